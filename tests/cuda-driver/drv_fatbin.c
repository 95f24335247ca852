/*
 * Fatbins as libraries ship them: code for several GPUs loads and runs
 * (the guest sends only what the device loads), and code for other GPUs
 * only is refused with CUDA_ERROR_NO_BINARY_FOR_GPU at cuModuleLoadData,
 * as NVIDIA's driver refuses it, while cuLibraryLoadData takes it and
 * refuses it where a kernel of it is first asked for (lazy loading).
 */
#include "vcu_drv_test.h"

#define N 256

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUlibrary lib;
    CUkernel k;
    CUfunction fill;
    CUdeviceptr p;
    unsigned int host[N];
    unsigned long long v = 40;
    unsigned int step = 2;
    char pad = 0;
    int n = N, major = 0;
    void *args[] = { &p, &pad, &v, &step, &n };
    void *multi, *sm80;
    CUresult rc;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    multi = vcu_drv_read_beside("vcu_drv_kernels_multi.fatbin", NULL);
    sm80 = vcu_drv_read_beside("vcu_drv_kernels_sm80.fatbin", NULL);

    CK(cuMemAlloc(&p, sizeof(host)));
    CK(cuModuleLoadData(&mod, multi));
    CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    CK(cuLaunchKernel(fill, 1, 1, 1, N, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(host, p, sizeof(host)));
    for (int i = 0; i < N; i++)
        TRUE(host[i] == 40u + 2u * (unsigned int)i);
    CK(cuModuleUnload(mod));

    if (major != 8) {
        EXPECT(CUDA_ERROR_NO_BINARY_FOR_GPU, cuModuleLoadData(&mod, sm80));
        /* Taken; refused where a kernel of it is first asked for in a
         * context, known name or not, twice alike (NVIDIA's driver: 209
         * for both, tests/gpu/probe-libs.c). */
        CK(cuLibraryLoadData(&lib, sm80, NULL, NULL, 0, NULL, NULL, 0));
        rc = cuLibraryGetKernel(&k, lib, "vcu_drv_fill");
        EXPECT(CUDA_ERROR_NO_BINARY_FOR_GPU, rc);
        EXPECT(CUDA_ERROR_NO_BINARY_FOR_GPU, cuLibraryGetKernel(&k, lib, "vcu_drv_fill"));
        EXPECT(CUDA_ERROR_NO_BINARY_FOR_GPU, cuLibraryGetKernel(&k, lib, "no_such_kernel"));
        CK(cuLibraryUnload(lib));
    }
    CK(cuMemFree(p));
    printf("PASS drv_fatbin\n");
    return 0;
}
