/*
 * GPU host probe: what NVIDIA's driver answers to the calls cuFFT and
 * cuDNN made of ours that docs/driver-api.md marks "not measured":
 *  - 6e163fbe [7] (the module iterator cuFFT calls): the table's size,
 *    the result for modules of one and of several kernels, the arguments
 *    the callback gets, whether they are the CUfunctions
 *    cuModuleGetFunction gives, and the answers to a NULL context, a bad
 *    module and a NULL callback;
 *  - CU_POINTER_ATTRIBUTE_BUFFER_ID: per allocation, after a free and a
 *    new allocation at the same address, of pinned memory, of a pointer
 *    the driver does not know;
 *  - cuLibraryGetKernel and cuKernelGetFunction on a library with code
 *    for other GPUs only (lazy loading), and on a missing name there.
 * It prints one line per answer; run it against ours too (loopback) to
 * compare line by line.
 *
 *   cc -O1 -I/usr/local/cuda/include -o probe-libs tests/gpu/probe-libs.c -ldl
 *   ./probe-libs DIR [/path/to/libcuda.so.1]
 *     DIR: build/cuda-driver (vcu_drv_kernels.fatbin: four kernels;
 *     vcu_drv_kernels_ptx_lz4.fatbin: cuFFT's kind of module;
 *     vcu_drv_kernels_sm80.fatbin: code for sm_80 only)
 */
#define _GNU_SOURCE 1
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *lib;

#define SYM(name) ((__typeof__(&name))sym(#name))

static void *sym(const char *name)
{
    void *p = dlsym(lib, name);

    if (p == NULL) {
        fprintf(stderr, "probe-libs: no %s\n", name);
        exit(2);
    }
    return p;
}

static void *read_file(const char *dir, const char *name)
{
    char path[4096];
    FILE *f;
    long n;
    char *buf;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) <= 0) {
        fprintf(stderr, "probe-libs: cannot read %s\n", path);
        exit(2);
    }
    rewind(f);
    buf = malloc((size_t)n + 1);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n)
        exit(2);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static const unsigned char id_6e16[16] = { 0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                           0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e };

/* Each call's arguments as the callback gets them (six integer
 * registers: whatever the iterator passes beyond the first two). */
static struct {
    uintptr_t a[6];
} calls[16];
static int ncalls;

static int seen(uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, uintptr_t a4,
                uintptr_t a5)
{
    if (ncalls < 16) {
        uintptr_t v[6] = { a0, a1, a2, a3, a4, a5 };

        memcpy(calls[ncalls].a, v, sizeof(v));
    }
    ncalls++;
    return 0;
}

typedef long (*each_t)(CUcontext, CUmodule, void *, void *);

static void iterate(const char *what, each_t each, CUcontext ctx, CUmodule mod, void *cb)
{
    long r;
    static int argv_marker;

    ncalls = 0;
    r = each(ctx, mod, cb, &argv_marker);
    printf("6e163fbe[7] %s: result %ld (0x%lx), %d callback calls\n", what, r, (unsigned long)r,
           ncalls);
    for (int i = 0; i < ncalls && i < 16; i++) {
        const char *name = NULL;
        CUresult e = SYM(cuFuncGetName)(&name, (CUfunction)calls[i].a[1]);
        CUfunction f = NULL;

        if (e == CUDA_SUCCESS && name != NULL)
            SYM(cuModuleGetFunction)(&f, mod, name);
        printf("  call %d: arg %s, f %#lx (%s, cuModuleGetFunction gives %s), a2 %#lx a3 %#lx "
               "a4 %#lx a5 %#lx (module %p, ctx %p)\n",
               i, calls[i].a[0] == (uintptr_t)&argv_marker ? "as given" : "OTHER",
               (unsigned long)calls[i].a[1], e == CUDA_SUCCESS ? name : "no name",
               f == (CUfunction)calls[i].a[1] ? "the same" : "another",
               (unsigned long)calls[i].a[2], (unsigned long)calls[i].a[3],
               (unsigned long)calls[i].a[4], (unsigned long)calls[i].a[5], (void *)mod,
               (void *)ctx);
    }
}

int main(int argc, char **argv)
{
    const void *const *t = NULL;
    CUcontext ctx;
    CUmodule mod = NULL, lz4 = NULL;
    CUlibrary l80;
    CUkernel k;
    CUfunction f;
    CUdeviceptr a, b;
    void *host;
    unsigned long long ida = 0, ida2 = 0, idb = 0, idb2 = 0, idh = 0, idx = 0;
    CUresult e, et;

    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [libcuda.so.1]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen(argc > 2 ? argv[2] : "libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "probe-libs: %s\n", dlerror());
        return 2;
    }
    SYM(cuInit)(0);
    SYM(cuDevicePrimaryCtxRetain)(&ctx, 0);
    SYM(cuCtxSetCurrent)(ctx);

    et = SYM(cuGetExportTable)((const void **)&t, (const CUuuid *)id_6e16);
    printf("6e163fbe: %d, size slot %#lx\n", (int)et, t ? (unsigned long)(uintptr_t)t[0] : 0ul);
    if (et == CUDA_SUCCESS && (uintptr_t)t[0] > 7 * sizeof(void *)) {
        each_t each = (each_t)t[7];

        SYM(cuModuleLoadData)(&mod, read_file(argv[1], "vcu_drv_kernels.fatbin"));
        SYM(cuModuleLoadData)(&lz4, read_file(argv[1], "vcu_drv_kernels_ptx_lz4.fatbin"));
        iterate("four kernels", each, ctx, mod, (void *)seen);
        iterate("four kernels, NULL ctx", each, NULL, mod, (void *)seen);
        iterate("PTX, LZ4", each, ctx, lz4, (void *)seen);
    }

    SYM(cuMemAlloc_v2)(&a, 4096);
    SYM(cuMemAlloc_v2)(&b, 4096);
    SYM(cuPointerGetAttribute)(&ida, CU_POINTER_ATTRIBUTE_BUFFER_ID, a);
    SYM(cuPointerGetAttribute)(&ida2, CU_POINTER_ATTRIBUTE_BUFFER_ID, a + 100);
    SYM(cuPointerGetAttribute)(&idb, CU_POINTER_ATTRIBUTE_BUFFER_ID, b);
    SYM(cuMemFree_v2)(b);
    SYM(cuMemAlloc_v2)(&b, 4096);
    SYM(cuPointerGetAttribute)(&idb2, CU_POINTER_ATTRIBUTE_BUFFER_ID, b);
    SYM(cuMemHostAlloc)(&host, 4096, 0);
    e = SYM(cuPointerGetAttribute)(&idh, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)host);
    printf("BUFFER_ID: a %llu, a+100 %llu, b %llu, b again %llu, pinned %llu (%d)\n", ida, ida2,
           idb, idb2, idh, (int)e);
    e = SYM(cuPointerGetAttribute)(&idx, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)&idx);
    printf("BUFFER_ID of a stack address: %d, %llu\n", (int)e, idx);

    SYM(cuLibraryLoadData)(&l80, read_file(argv[1], "vcu_drv_kernels_sm80.fatbin"), NULL, NULL,
                           0, NULL, NULL, 0);
    e = SYM(cuLibraryGetKernel)(&k, l80, "vcu_drv_fill");
    printf("sm_80-only library: cuLibraryGetKernel %d", (int)e);
    if (e == CUDA_SUCCESS)
        printf(", cuKernelGetFunction %d", (int)SYM(cuKernelGetFunction)(&f, k));
    printf(", a missing name %d\n", (int)SYM(cuLibraryGetKernel)(&k, l80, "no_such_kernel"));

    /* Last: NVIDIA's driver may follow these pointers and crash. */
    if (et == CUDA_SUCCESS && (uintptr_t)t[0] > 7 * sizeof(void *)) {
        iterate("NULL callback", (each_t)t[7], ctx, mod, NULL);
        iterate("bad module", (each_t)t[7], ctx, (CUmodule)&ncalls, (void *)seen);
    }
    return 0;
}
