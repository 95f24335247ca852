/*
 * GPU host probe: what a libcuda.so.1's cuGetProcAddress_v2 answers.
 * Reads "base version flags" lines on stdin and prints, for each, the
 * result, the symbol status and the exported name the pointer is (by
 * dladdr).  Run once against NVIDIA's driver and once against ours
 * (LD_LIBRARY_PATH) and diff the two (docs/driver-api.md).
 *
 *   cc -O1 -o probe-procaddr tests/gpu/probe-procaddr.c -ldl
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int (*gpa_fn)(const char *, void **, int, uint64_t, int *);

int main(void)
{
    char base[256];
    int version;
    unsigned long long flags;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    gpa_fn gpa;
    Dl_info info;
    char path[4096] = "?";

    if (lib == NULL) {
        fprintf(stderr, "probe-procaddr: %s\n", dlerror());
        return 2;
    }
    gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
    if (gpa == NULL) {
        fprintf(stderr, "probe-procaddr: no cuGetProcAddress_v2\n");
        return 2;
    }
    if (dladdr((void *)gpa, &info) && info.dli_fname != NULL)
        snprintf(path, sizeof(path), "%s", info.dli_fname);
    fprintf(stderr, "probe-procaddr: libcuda.so.1 is %s\n", path);
    while (scanf("%255s %d %llu", base, &version, &flags) == 3) {
        void *pfn = (void *)1;
        int status = -1;
        int rc = gpa(base, &pfn, version, (uint64_t)flags, &status);
        const char *name = "NULL";

        if (pfn != NULL && pfn != (void *)1)
            name = dladdr(pfn, &info) && info.dli_sname != NULL ? info.dli_sname : "?";
        else if (pfn == (void *)1)
            name = "untouched";
        printf("%s %d %llu -> %d %d %s\n", base, version, flags, rc, status, name);
    }
    return 0;
}
