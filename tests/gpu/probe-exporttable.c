/*
 * GPU host probe: a libcuda.so.1 that forwards to NVIDIA's (dlopen of
 * the path in VCU_REAL_LIBCUDA) and logs to stderr what NVIDIA's CUDA
 * runtime asks of it: every cuGetProcAddress query and every
 * cuGetExportTable UUID, with the answer and the table's first slot.
 * NVIDIA's runtime looks up only cuGetProcAddress_v2 by name (measured:
 * docs/driver-api.md) and everything else through it, so those two
 * entry points are all this needs.
 *
 *   cc -O1 -shared -fPIC -Wl,-soname,libcuda.so.1 -o DIR/libcuda.so.1 \
 *       tests/gpu/probe-exporttable.c -ldl
 *   VCU_REAL_LIBCUDA=/usr/lib/x86_64-linux-gnu/libcuda.so.1 LD_LIBRARY_PATH=DIR ./program
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gpa_fn)(const char *, void **, int, uint64_t, int *);
typedef int (*get_table_fn)(const void **, const unsigned char *);

static gpa_fn real_gpa;
static get_table_fn real_get_table;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    const char *p = getenv("VCU_REAL_LIBCUDA");
    void *lib = dlopen(p != NULL ? p : "/usr/lib/x86_64-linux-gnu/libcuda.so.1", RTLD_NOW);

    if (lib == NULL) {
        fprintf(stderr, "probe: %s\n", dlerror());
        exit(2);
    }
    real_gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
    real_get_table = (get_table_fn)dlsym(lib, "cuGetExportTable");
    if (real_gpa == NULL || real_get_table == NULL) {
        fprintf(stderr, "probe: the real libcuda lacks cuGetProcAddress_v2 or cuGetExportTable\n");
        exit(2);
    }
}

static int get_table(const void **table, const unsigned char *u)
{
    int rc = real_get_table(table, u);
    uintptr_t slot0 = rc == 0 && table != NULL && *table != NULL ? *(const uintptr_t *)*table : 0;

    fprintf(stderr,
            "probe: cuGetExportTable %02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x"
            " -> %d slot0=0x%lx\n",
            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
            u[13], u[14], u[15], rc, (unsigned long)slot0);
    return rc;
}

__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char *s, void **pfn, int v,
                                                                uint64_t flags, int *st);

static int gpa4(const char *s, void **pfn, int v, uint64_t flags)
{
    return cuGetProcAddress_v2(s, pfn, v, flags, NULL);
}

__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char *s, void **pfn, int v,
                                                                uint64_t flags, int *st)
{
    Dl_info info;
    int rc;

    pthread_once(&once, load);
    rc = real_gpa(s, pfn, v, flags, st);
    fprintf(stderr, "probe: cuGetProcAddress(%s, %d, %llu) -> %d %s\n", s ? s : "(null)", v,
            (unsigned long long)flags, rc,
            rc == 0 && pfn && *pfn && dladdr(*pfn, &info) && info.dli_sname ? info.dli_sname
                                                                           : "-");
    if (rc == 0 && pfn != NULL && s != NULL && strcmp(s, "cuGetExportTable") == 0)
        *pfn = (void *)get_table;
    if (rc == 0 && pfn != NULL && s != NULL && strcmp(s, "cuGetProcAddress") == 0)
        *pfn = v >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)gpa4;
    return rc;
}

__attribute__((visibility("default"))) int cuGetProcAddress(const char *s, void **pfn, int v,
                                                             uint64_t flags)
{
    return gpa4(s, pfn, v, flags);
}
