/*
 * cuGetProcAddress as NVIDIA's driver answers it (cuda.h, and driver
 * 580.159.04 measured: docs/driver-api.md): base name + CUDA version pick
 * the ABI variant, the per-thread flag its _ptds/_ptsz twin, unknown
 * names and too-old versions give CUDA_SUCCESS, a NULL pointer and a
 * status; and the pointers it gives are the library's own exports.  Runs
 * before cuInit.
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>

#include "vcu_drv_test.h"

static void *lib;

/* The export of that name in the libcuda.so.1 this program runs on. */
static void *sym(const char *name)
{
    void *p = dlsym(lib, name);

    if (p == NULL) {
        printf("FAIL: libcuda.so.1 does not export %s\n", name);
        exit(1);
    }
    return p;
}

/* cuGetProcAddress(base, version, flags) must give the export want. */
static void want(const char *base, int version, cuuint64_t flags, const char *want_name,
                 int line)
{
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)99;
    void *pfn = (void *)1;
    CUresult r = cuGetProcAddress(base, &pfn, version, flags, &st);

    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || pfn != sym(want_name)) {
        Dl_info info;
        const char *got = pfn != NULL && dladdr(pfn, &info) && info.dli_sname ? info.dli_sname
                                                                             : "?";

        printf("FAIL line %d: cuGetProcAddress(%s, %d, %llu) = %d status %d -> %s, want %s\n",
               line, base, version, (unsigned long long)flags, (int)r, (int)st, got, want_name);
        exit(1);
    }
}
#define WANT(base, version, flags, name) want(base, version, flags, name, __LINE__)

int main(void)
{
    const cuuint64_t D = CU_GET_PROC_ADDRESS_DEFAULT, L = CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                     PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    CUdriverProcAddressQueryResult st;
    CUresult (*v1)(const char *, void **, int, cuuint64_t);
    void *pfn;
    int drv;

    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    TRUE(lib != NULL);
    CK(cuDriverGetVersion(&drv));

    /* The version picks the ABI variant. */
    WANT("cuMemAlloc", 2000, D, "cuMemAlloc");
    WANT("cuMemAlloc", 3010, D, "cuMemAlloc");
    WANT("cuMemAlloc", 3020, D, "cuMemAlloc_v2");
    WANT("cuMemAlloc", 13000, D, "cuMemAlloc_v2");
    WANT("cuCtxCreate", 3020, D, "cuCtxCreate_v2");
    WANT("cuCtxCreate", 11040, D, "cuCtxCreate_v3");
    WANT("cuCtxCreate", 12050, D, "cuCtxCreate_v4");
    WANT("cuCtxDestroy", 2000, D, "cuCtxDestroy");
    WANT("cuCtxDestroy", 4000, D, "cuCtxDestroy_v2");
    WANT("cuDeviceGetUuid", 11040, D, "cuDeviceGetUuid_v2");
    WANT("cuDeviceGetUuid", 9020, D, "cuDeviceGetUuid");
    WANT("cuEventElapsedTime", 12080, D, "cuEventElapsedTime_v2");
    WANT("cuGraphInstantiate", 11000, D, "cuGraphInstantiate_v2");
    WANT("cuGetProcAddress", 11030, D, "cuGetProcAddress");
    WANT("cuGetProcAddress", 12000, D, "cuGetProcAddress_v2");
    WANT("cuInit", 2000, D, "cuInit");
    WANT("cuGetExportTable", 3000, D, "cuGetExportTable");

    /* Per-thread: the _ptds/_ptsz twin of the ABI the version picks, from
     * the version it appeared in (7000 for most); names without one give
     * their legacy variant.  Both bits set count as per-thread. */
    WANT("cuMemcpyHtoD", 13000, PT, "cuMemcpyHtoD_v2_ptds");
    WANT("cuMemcpyHtoD", 7000, PT, "cuMemcpyHtoD_v2_ptds");
    WANT("cuMemcpyHtoD", 12000, PT | L, "cuMemcpyHtoD_v2_ptds");
    WANT("cuMemcpyHtoD", 13000, L, "cuMemcpyHtoD_v2");
    WANT("cuMemcpyHtoD", 13000, D, "cuMemcpyHtoD_v2");
    WANT("cuLaunchKernel", 12000, PT, "cuLaunchKernel_ptsz");
    WANT("cuLaunchKernel", 12000, L, "cuLaunchKernel");
    WANT("cuStreamSynchronize", 7000, PT, "cuStreamSynchronize_ptsz");
    WANT("cuStreamGetCaptureInfo", 11030, PT, "cuStreamGetCaptureInfo_v2_ptsz");
    WANT("cuStreamGetCaptureInfo", 12030, PT, "cuStreamGetCaptureInfo_v3_ptsz");
    WANT("cuStreamBeginCapture", 10010, PT, "cuStreamBeginCapture_v2_ptsz");
    WANT("cuInit", 12000, PT, "cuInit");            /* none: the legacy one */
    WANT("cuMemAlloc", 12000, PT, "cuMemAlloc_v2");
    WANT("cuGLMapBufferObject", 7000, PT, "cuGLMapBufferObject_v2_ptds");  /* interop */

    /* Not found: CUDA_SUCCESS, a NULL pointer, the status saying why. */
    pfn = (void *)1;
    st = CU_GET_PROC_ADDRESS_SUCCESS;
    CK(cuGetProcAddress("cuNoSuchFunction", &pfn, 12000, D, &st));
    TRUE(pfn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    pfn = (void *)1;
    CK(cuGetProcAddress("cuMemAlloc_v2", &pfn, 12000, D, &st));
    TRUE(pfn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);   /* base names only */
    pfn = (void *)1;
    CK(cuGetProcAddress("", &pfn, 0, D, &st));      /* NVIDIA's runtime's first question */
    TRUE(pfn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    pfn = (void *)1;
    CK(cuGetProcAddress("cuMemAlloc", &pfn, 1000, D, &st));
    TRUE(pfn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    pfn = (void *)1;
    CK(cuGetProcAddress("cuLaunchKernelEx", &pfn, 11000, PT, &st));
    TRUE(pfn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* A per-thread question before the per-thread variant existed finds
     * nothing: no fallback to the legacy one. */
    pfn = (void *)1;
    CK(cuGetProcAddress("cuMemcpyHtoD", &pfn, 6050, PT, &st));
    TRUE(pfn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    pfn = (void *)1;
    CK(cuGetProcAddress("cuLaunchKernel", &pfn, 4000, PT, &st));
    TRUE(pfn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CK(cuGetProcAddress("cuMemAlloc", &pfn, 12000, D, NULL));
    /* Bad arguments. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuMemAlloc", &pfn, drv + 10, D, &st));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuMemAlloc", &pfn, 12000, 4, &st));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuMemAlloc", &pfn, 12000, 8, &st));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress(NULL, &pfn, 12000, D, &st));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuMemAlloc", NULL, 12000, D, &st));

    /* The 11.x four-argument form, as exported under the plain name. */
    v1 = (CUresult(*)(const char *, void **, int, cuuint64_t))sym("cuGetProcAddress");
    CK(v1("cuMemAlloc", &pfn, 11000, D));
    TRUE(pfn == sym("cuMemAlloc_v2"));
    pfn = (void *)1;
    CK(v1("cuNoSuchFunction", &pfn, 11000, D));
    TRUE(pfn == NULL);

    /* A pointer it gives works: cuDriverGetVersion through the table. */
    {
        CUresult (*gv)(int *);
        int v = 0;

        CK(cuGetProcAddress("cuDriverGetVersion", (void **)&gv, 2020, D, NULL));
        CK(gv(&v));
        TRUE(v == drv);
    }
    printf("PASS drv_procaddr\n");
    return 0;
}
