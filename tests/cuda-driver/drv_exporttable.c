/*
 * NVIDIA's private tables as guest-lib's libcuda.so.1 serves them
 * (guest-lib/cuda_export.c, docs/driver-api.md): sizes, the CUDART_INTERFACE
 * module loader and primary context, context-local storage and its
 * destructors, CONTEXT_CHECKS, the integrity check computed from what the
 * library reports of its devices, the libraries and kernels NVIDIA's
 * runtime loads code with, and the answers for slots of unknown purpose.
 */
#include <pthread.h>
#include <stdint.h>

#include "../../guest-lib/cuda_integrity.h"
#include "vcu_drv_test.h"

#define TEST_NAME "drv_exporttable"

static const unsigned char ids[][16] = {
    { 0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9 },
    { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 },
    { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 },
    { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc },
    { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 },
    { 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e },
    { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 },
    { 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2 },
    { 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca },
    { 0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e },
};
enum { T_F8, T_CUDART, T_HOOKS, T_TLS, T_CLS, T_CHECKS, T_INTEGRITY, T_21318C60, T_1734DC26,
       T_6E163FBE, NT };
/* Sizes NVIDIA's driver 580.159.04 gives (CLS has no size slot); 21318c60's
 * is 595.99.02's, 1734dc26's and 6e163fbe's ours, none measured on 580. */
static const size_t sizes[NT] = { 0x18, 0x68, 0x38, 0x18, 0, 0x78, 0x18, 95 * 8, 32 * 8, 16 * 8 };

typedef CUresult (*cls_put_t)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));
typedef CUresult (*cls_delete_t)(CUcontext, void *);
typedef CUresult (*cls_get_t)(void **, CUcontext, void *);
typedef CUresult (*wrapper_t)(CUmodule *, const void *);
typedef CUresult (*wrapper_ext2_t)(const void *, CUmodule *, void *, void *, unsigned int);
typedef CUresult (*primary_t)(CUcontext *, CUdevice);
typedef CUresult (*check_t)(CUcontext, uint32_t *, CUcontext *);
typedef CUresult (*integrity_t)(uint32_t, uint64_t, uint64_t *);
typedef CUresult (*unknown_t)(void);
typedef void (*buffer_t)(void **, size_t *);
typedef int (*each_fn_t)(CUcontext, CUmodule, void (*)(void *, CUfunction), void *);

/* What 6e163fbe [7] hands its callback. */
struct seen {
    CUfunction f[8];
    int n;
};

static void seen_add(void *arg, CUfunction f)
{
    struct seen *s = arg;

    if (s->n < 8)
        s->f[s->n] = f;
    s->n++;
}

/* The module's kernels as 6e163fbe [7] lists them: each of the six of
 * vcu_drv_kernels.cu once, as cuModuleGetFunction gives it. */
#define NKERNELS 6
static const char *const names[NKERNELS] = { "vcu_drv_vadd", "vcu_drv_fill",
                                             "vcu_drv_flag_bump", "vcu_drv_managed_add",
                                             "vcu_drv_cond_count", "vcu_drv_cluster" };

static int module_kernels_ok(each_fn_t each, CUcontext ctx, CUmodule mod)
{
    struct seen s = { { NULL }, 0 };

    if (each(ctx, mod, seen_add, &s) != NKERNELS || s.n != NKERNELS)
        return 0;
    for (int i = 0; i < NKERNELS; i++) {
        CUfunction f;
        int found = 0;

        if (cuModuleGetFunction(&f, mod, names[i]) != CUDA_SUCCESS)
            return 0;
        for (int j = 0; j < NKERNELS; j++)
            found += s.f[j] == f;
        if (found != 1)
            return 0;
    }
    return 1;
}

static int dtor_calls;
static void *dtor_value;
static CUcontext dtor_ctx;

static void dtor(CUcontext ctx, void *key, void *value)
{
    (void)key;
    dtor_calls++;
    dtor_ctx = ctx;
    dtor_value = value;
}

/* The same through the public calls (CUDA 12.4 and later): the counts,
 * and each kernel once, as cuModuleGetFunction and cuLibraryGetKernel give
 * them; buffers smaller than the count; bad handles. */
static void enumerate_ok(CUmodule mod, const void *fatbin)
{
    CUfunction fs[NKERNELS + 2], f;
    CUkernel ks[NKERNELS];
    CUlibrary lib;
    unsigned int c = 0;
    const char *name;

    CK(cuModuleGetFunctionCount(&c, mod));
    TRUE(c == NKERNELS);
    memset(fs, 0, sizeof(fs));
    CK(cuModuleEnumerateFunctions(fs, NKERNELS + 2, mod));
    TRUE(fs[NKERNELS] == NULL);
    for (int i = 0; i < NKERNELS; i++) {
        int found = 0;

        CK(cuModuleGetFunction(&f, mod, names[i]));
        for (int j = 0; j < NKERNELS; j++)
            found += fs[j] == f;
        TRUE(found == 1);
    }
    memset(fs, 0, sizeof(fs));
    CK(cuModuleEnumerateFunctions(fs, 2, mod));
    TRUE(fs[0] != NULL && fs[1] != NULL && fs[2] == NULL);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuModuleGetFunctionCount(NULL, mod));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuModuleGetFunctionCount(&c, (CUmodule)&c));

    CK(cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernelCount(&c, lib));
    TRUE(c == NKERNELS);
    memset(ks, 0, sizeof(ks));
    CK(cuLibraryEnumerateKernels(ks, NKERNELS, lib));
    for (int i = 0; i < NKERNELS; i++) {
        int found = 0;

        CK(cuKernelGetName(&name, ks[i]));
        for (int j = 0; j < NKERNELS; j++)
            found += strcmp(name, names[j]) == 0;
        TRUE(found == 1);
    }
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuLibraryGetKernelCount(&c, (CUlibrary)&c));
    CK(cuLibraryUnload(lib));
    printf("cuModuleGetFunctionCount, cuModuleEnumerateFunctions, cuLibraryGetKernelCount, "
           "cuLibraryEnumerateKernels\n");
}

/* nvcc's wrapper around a fatbin, as a program registers it. */
struct wrapper {
    uint32_t magic;
    uint32_t version;
    const void *data;
    void *unused;
};

int main(void)
{
    const void *const *t[NT];
    const void *p;
    CUcontext ctx, prim, got;
    CUmodule mod;
    CUfunction fn;
    CUlibrary lib;
    CUkernel k, k2;
    CUdevice dev;
    CUuuid bogus;
    void *fatbin, *value;
    unsigned int flags;
    int active, ndev, v;
    uint32_t wrapped;
    uint64_t res[2], want[2];
    size_t flen, sz;

    /* Tables can be had before cuInit, as NVIDIA's runtime asks for the
     * first one before it. */
    for (int i = 0; i < NT; i++) {
        CK(cuGetExportTable(&p, (const CUuuid *)ids[i]));
        t[i] = p;
        if (sizes[i] != 0)
            TRUE((size_t)t[i][0] == sizes[i]);
    }
    memset(&bogus, 0x5a, sizeof(bogus));
    p = (const void *)1;
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuGetExportTable(&p, &bogus));
    TRUE(p == NULL);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetExportTable(NULL, (const CUuuid *)ids[0]));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetExportTable(&p, NULL));
    printf("ten tables, sized as NVIDIA's\n");

    /* Slots of unknown purpose: NOT_SUPPORTED each time (logged once). */
    for (int i = 0; i < 3; i++)
        EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_CUDART][3])());
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_TLS][1])());
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_CHECKS][14])());
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_21318C60][1])());
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_21318C60][94])());
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_1734DC26][4])());
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_1734DC26][31])());
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, ((unknown_t)t[T_6E163FBE][6])());
    TRUE(t[T_CUDART][10] == NULL && t[T_CLS][3] == NULL);
    printf("unknown slots: CUDA_ERROR_NOT_SUPPORTED\n");

    /* Before cuInit. */
    EXPECT(CUDA_ERROR_NOT_INITIALIZED, ((primary_t)t[T_CUDART][2])(&prim, 0));
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));

    /* Tools buffers: zero (no tool attached). */
    ((buffer_t)t[T_HOOKS][2])(&value, &sz);
    TRUE(value != NULL && sz == 8192 && ((uint64_t *)value)[0] == 0);
    ((buffer_t)t[T_HOOKS][6])(&value, &sz);
    TRUE(value != NULL && sz == 14);

    /* [2]: the primary context, the same handle as a retain's, and not
     * retained (as NVIDIA's driver answers). */
    CK(((primary_t)t[T_CUDART][2])(&prim, dev));
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TRUE(active == 0);
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    TRUE(ctx == prim);
    EXPECT(CUDA_ERROR_INVALID_VALUE, ((primary_t)t[T_CUDART][2])(NULL, dev));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, ((primary_t)t[T_CUDART][2])(&got, 99));
    CK(cuCtxSetCurrent(prim));
    printf("CUDART_INTERFACE [2]: the primary context, not retained\n");

    /* [1] and [8]: modules from nvcc's wrapper and from the fatbin. */
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", &flen);
    struct wrapper w = { 0x466243b1u, 1, fatbin, NULL };
    CK(((wrapper_t)t[T_CUDART][1])(&mod, &w));
    CK(cuModuleGetFunction(&fn, mod, "vcu_drv_vadd"));
    CK(cuModuleUnload(mod));
    CK(((wrapper_ext2_t)t[T_CUDART][8])(fatbin, &mod, NULL, NULL, 0));
    CK(cuModuleUnload(mod));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED,
           ((wrapper_ext2_t)t[T_CUDART][8])(fatbin, &mod, &w, NULL, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, ((wrapper_t)t[T_CUDART][1])(NULL, &w));
    w.data = NULL;
    EXPECT(CUDA_ERROR_INVALID_IMAGE, ((wrapper_t)t[T_CUDART][1])(&mod, &w));
    printf("CUDART_INTERFACE [1], [8]: modules from a wrapper and a fatbin\n");

    /* 6e163fbe [7]: a module's kernels, from a fatbin, a cubin file and
     * PTX (compressed in a fatbin: LZ4 as cuFFT's, zstd as nvcc 13's
     * default), and a library's. */
    {
        each_fn_t each = (each_fn_t)t[T_6E163FBE][7];
        struct seen s = { { NULL }, 0 };
        void *img;

        CK(cuModuleLoadData(&mod, fatbin));
        TRUE(module_kernels_ok(each, prim, mod));
        TRUE(module_kernels_ok(each, NULL, mod));
        enumerate_ok(mod, fatbin);
        /* No callback: still the count (NVIDIA's driver, measured). */
        TRUE(each(prim, mod, NULL, &s) == NKERNELS && s.n == 0);
        TRUE(each((CUcontext)&s, mod, seen_add, &s) == 0 && s.n == 0);
        TRUE(each(prim, (CUmodule)&s, seen_add, &s) == 0 && s.n == 0);
        CK(cuModuleUnload(mod));
        TRUE(each(prim, mod, seen_add, &s) == 0 && s.n == 0);
        img = vcu_drv_read_beside("vcu_drv_kernels.cubin", NULL);
        CK(cuModuleLoadData(&mod, img));
        TRUE(module_kernels_ok(each, prim, mod));
        CK(cuModuleUnload(mod));
        free(img);
        img = vcu_drv_read_beside("vcu_drv_kernels_ptx_lz4.fatbin", NULL);
        CK(cuModuleLoadData(&mod, img));
        TRUE(module_kernels_ok(each, prim, mod));
        CK(cuModuleUnload(mod));
        free(img);
        /* zstd: through the system's libzstd.so.1. */
        img = vcu_drv_read_beside("vcu_drv_kernels_ptx_zstd.fatbin", NULL);
        CK(cuModuleLoadData(&mod, img));
        TRUE(module_kernels_ok(each, prim, mod));
        CK(cuModuleUnload(mod));
        free(img);
        CK(cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0));
        CK(cuLibraryGetModule(&mod, lib));
        TRUE(module_kernels_ok(each, prim, mod));
        CK(cuLibraryUnload(lib));
    }
    printf("6e163fbe [7]: a module's kernels, each once\n");

    /* Libraries and kernels, as the runtime loads code. */
    w.data = fatbin;
    /* A library option with no values array, as cuBLASLt 13 passes it. */
    {
        CUlibraryOption lo = CU_LIBRARY_BINARY_IS_PRESERVED;
        CUlibrary l2;

        CK(cuLibraryLoadData(&l2, &w, NULL, NULL, 0, &lo, NULL, 1));
        CK(cuLibraryUnload(l2));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuLibraryLoadData(&l2, &w, NULL, NULL, 0, NULL, NULL, 1));
    }
    CK(cuLibraryLoadData(&lib, &w, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuLibraryGetKernel(&k, lib, "vcu_drv_vadd"));
    CK(cuLibraryGetKernel(&k2, lib, "vcu_drv_vadd"));
    TRUE(k == k2);
    EXPECT(CUDA_ERROR_NOT_FOUND, cuLibraryGetKernel(&k2, lib, "no_such_kernel"));
    CK(cuKernelGetFunction(&fn, k));
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn));
    TRUE(v > 0);
    CK(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, dev));
    TRUE(v > 0);
    {
        size_t po = 99, ps = 99;

        CK(cuKernelGetParamInfo(k, 3, &po, &ps));
        TRUE(po == 24 && ps == 4);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuKernelGetParamInfo(k, 4, &po, &ps));
        EXPECT(CUDA_ERROR_INVALID_HANDLE, cuKernelGetParamInfo((CUkernel)&po, 0, &po, &ps));
    }
    /* Cache configurations: preferences, checked. */
    {
        CUfunc_cache cc = CU_FUNC_CACHE_PREFER_EQUAL;

        CK(cuKernelSetCacheConfig(k, CU_FUNC_CACHE_PREFER_SHARED, dev));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuKernelSetCacheConfig(k, (CUfunc_cache)9, dev));
        EXPECT(CUDA_ERROR_INVALID_DEVICE, cuKernelSetCacheConfig(k, CU_FUNC_CACHE_PREFER_L1, 99));
        CK(cuFuncSetCacheConfig(fn, CU_FUNC_CACHE_PREFER_L1));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuFuncSetCacheConfig(fn, (CUfunc_cache)9));
        EXPECT(CUDA_ERROR_INVALID_HANDLE, cuFuncSetCacheConfig((CUfunction)&cc,
                                                               CU_FUNC_CACHE_PREFER_L1));
        CK(cuCtxGetCacheConfig(&cc));
        TRUE(cc == CU_FUNC_CACHE_PREFER_NONE);
        CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
        CK(cuCtxGetCacheConfig(&cc));
        TRUE(cc == CU_FUNC_CACHE_PREFER_SHARED);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxSetCacheConfig((CUfunc_cache)9));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxGetCacheConfig(NULL));
        CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_NONE));
    }
    {
        CUdeviceptr a, b, c;
        float ha[64], hb[64], hc[64];
        int n = 64;
        void *args[] = { &a, &b, &c, &n };

        for (int i = 0; i < n; i++) {
            ha[i] = (float)i;
            hb[i] = 2.0f * (float)i;
        }
        CK(cuMemAlloc(&a, sizeof(ha)));
        CK(cuMemAlloc(&b, sizeof(hb)));
        CK(cuMemAlloc(&c, sizeof(hc)));
        CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
        CK(cuMemcpyHtoD(b, hb, sizeof(hb)));
        /* A CUkernel launches as a CUfunction of the current context. */
        CK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 64, 1, 1, 0, NULL, args, NULL));
        CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
        for (int i = 0; i < n; i++)
            TRUE(hc[i] == 3.0f * (float)i);
        CK(cuMemFree(a));
        CK(cuMemFree(b));
        CK(cuMemFree(c));
    }
    CK(cuLibraryGetModule(&mod, lib));
    CK(cuLibraryUnload(lib));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuKernelGetFunction(&fn, k));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuLibraryUnload(lib));
    printf("libraries: kernels, attributes, a launch by CUkernel, unload\n");

    /* Context-local storage. */
    cls_put_t put = (cls_put_t)t[T_CLS][0];
    cls_delete_t del = (cls_delete_t)t[T_CLS][1];
    cls_get_t get = (cls_get_t)t[T_CLS][2];
    static int key1, key2;
    EXPECT(CUDA_ERROR_INVALID_HANDLE, get(&value, NULL, &key1));
    CK(put(NULL, &key1, (void *)0x1234, dtor));
    CK(put(prim, &key2, (void *)0x5678, NULL));
    CK(get(&value, prim, &key1));
    TRUE(value == (void *)0x1234);
    CK(put(prim, &key1, (void *)0x4321, dtor));
    CK(get(&value, NULL, &key1));
    TRUE(value == (void *)0x4321);
    CK(del(NULL, &key2));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, get(&value, NULL, &key2));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, del(NULL, &key2));
    EXPECT(CUDA_ERROR_INVALID_VALUE, get(NULL, NULL, &key1));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, get(&value, (CUcontext)&key1, &key1));
    /* Released to zero: the destructor runs, with the context. */
    TRUE(dtor_calls == 0);
    CK(cuDevicePrimaryCtxRelease(dev));
    TRUE(dtor_calls == 1 && dtor_ctx == prim && dtor_value == (void *)0x4321);
    EXPECT(CUDA_ERROR_INVALID_HANDLE, get(&value, prim, &key1));
    /* Reset: it runs too. */
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(put(prim, &key1, (void *)0x99, dtor));
    CK(cuDevicePrimaryCtxReset(dev));
    TRUE(dtor_calls == 2 && dtor_value == (void *)0x99);
    /* A created context's run at its destruction. */
    CK(cuCtxCreate(&ctx, NULL, 0, dev));
    CK(put(NULL, &key2, (void *)0x77, dtor));
    CK(cuCtxDestroy(ctx));
    TRUE(dtor_calls == 3 && dtor_ctx == ctx && dtor_value == (void *)0x77);
    printf("context-local storage: put, get, delete, destructors on release, reset, destroy\n");

    /* CONTEXT_CHECKS [2]: never wrapped; no context is an error and
     * nothing is written; [3] answers 0. */
    CK(cuCtxSetCurrent(prim));
    wrapped = 77;
    got = (CUcontext)&key1;
    CK(((check_t)t[T_CHECKS][2])(prim, &wrapped, &got));
    TRUE(wrapped == 0 && got == (CUcontext)&key1);
    CK(cuCtxSetCurrent(NULL));
    wrapped = 77;
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, ((check_t)t[T_CHECKS][2])(NULL, &wrapped, &got));
    TRUE(wrapped == 77);
    TRUE(((int (*)(void))t[T_CHECKS][3])() == 0);
    printf("CONTEXT_CHECKS: not wrapped\n");

    /* TOOLS_TLS [2]: the thread's current context (none: NULL);
     * 21318c60 [4]: a context's number, as cuCtxGetId. */
    {
        unsigned long long id = 0, want_id = 0;

        got = (CUcontext)&key1;
        CK(((CUresult (*)(CUcontext *))t[T_TLS][2])(&got));
        TRUE(got == NULL);
        EXPECT(CUDA_ERROR_INVALID_VALUE, ((CUresult (*)(CUcontext *))t[T_TLS][2])(NULL));
        CK(cuCtxSetCurrent(prim));
        CK(((CUresult (*)(CUcontext *))t[T_TLS][2])(&got));
        TRUE(got == prim);
        CK(cuCtxGetId(prim, &want_id));
        CK(((CUresult (*)(CUcontext, unsigned long long *))t[T_21318C60][4])(prim, &id));
        TRUE(id == want_id && id != 0);
        id = 0;
        CK(((CUresult (*)(CUcontext, unsigned long long *))t[T_21318C60][4])(NULL, &id));
        TRUE(id == want_id);
        /* [51]: an object for the context; [39]: 0 for it. */
        {
            typedef CUresult (*obj_t)(CUcontext, uint64_t, void **);
            typedef CUresult (*zero_t)(CUcontext, const void *, uint64_t *);
            void *obj = NULL, *obj2 = NULL;
            uint64_t z = 99;

            CK(((obj_t)t[T_21318C60][51])(prim, 0, &obj));
            CK(((obj_t)t[T_21318C60][51])(NULL, 0, &obj2));
            TRUE(obj != NULL && obj == obj2 && ((unsigned char *)obj)[0] == 0);
            EXPECT(CUDA_ERROR_INVALID_HANDLE, ((obj_t)t[T_21318C60][51])(prim, UINT64_MAX, &obj));
            EXPECT(CUDA_ERROR_INVALID_VALUE, ((obj_t)t[T_21318C60][51])(prim, 0, NULL));
            EXPECT(CUDA_ERROR_INVALID_CONTEXT,
                   ((obj_t)t[T_21318C60][51])((CUcontext)&z, 0, &obj));
            CK(((zero_t)t[T_21318C60][39])(prim, obj, &z));
            TRUE(z == 0);
            EXPECT(CUDA_ERROR_INVALID_VALUE, ((zero_t)t[T_21318C60][39])(prim, obj, NULL));
        }
        CK(cuCtxSetCurrent(NULL));
    }
    printf("TOOLS_TLS [2], 21318c60 [4]: current context, context number\n");

    /* INTEGRITY_CHECK: from what this library reports. */
    vcu__integrity_in_t in = {
        .version = 13002,
        .pid = (uint32_t)getpid(),
        .tid = (uint32_t)(uintptr_t)pthread_self(),
        .cudart_table = t[T_CUDART],
        .integrity_table = t[T_INTEGRITY],
        .integrity_fn = t[T_INTEGRITY][1],
        .unix_seconds = 1763800000,
    };
    vcu__integrity_dev_t devs[8];
    CK(cuDriverGetVersion(&v));
    in.driver_version = (uint32_t)v;
    CK(cuDeviceGetCount(&ndev));
    TRUE(ndev >= 1 && ndev <= 8);
    for (int d = 0; d < ndev; d++) {
        CUuuid u;

        CK(cuDeviceGetUuid_v2(&u, d));
        memcpy(devs[d].uuid, u.bytes, 16);
        CK(cuDeviceGetAttribute(&devs[d].pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d));
        CK(cuDeviceGetAttribute(&devs[d].pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d));
        CK(cuDeviceGetAttribute(&devs[d].pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d));
    }
    vcu__integrity(&in, devs, ndev, want);
    CK(((integrity_t)t[T_INTEGRITY][1])(13002, 1763800000, res));
    TRUE(res[0] == want[0] && res[1] == want[1]);
    CK(((integrity_t)t[T_INTEGRITY][1])(13000, 1763800000, res));
    TRUE(res[0] == 0x3341181C03CB675Cull && res[1] == 0x8ED383AA1F4CD1E8ull);
    EXPECT(CUDA_ERROR_INVALID_VALUE, ((integrity_t)t[T_INTEGRITY][1])(13002, 0, NULL));
    printf("INTEGRITY_CHECK: HMAC-MD2 of this library's own answers\n");

    free(fatbin);
    printf("PASS %s\n", TEST_NAME);
    return 0;
}
