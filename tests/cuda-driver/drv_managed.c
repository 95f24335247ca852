/*
 * Managed memory through the Driver API: cuMemAllocManaged written on the
 * host, used by a kernel and read back; host writes between launches;
 * prefetches (both ABIs, to the device and the host), advice, stream
 * attachment, unified copies, pointer attributes, free; and each call's
 * failure paths.
 */
#include <stdint.h>

#include "vcu_drv_test.h"

#define N 4096

/* The CUDA 8 ABIs, which cuda.h maps to the _v2 ones: asked of
 * cuGetProcAddress at version 8000. */
typedef CUresult (*prefetch_v1_t)(CUdeviceptr, size_t, CUdevice, CUstream);
typedef CUresult (*advise_v1_t)(CUdeviceptr, size_t, CUmem_advise, CUdevice);

static void vadd(CUfunction f, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, int n)
{
    void *args[] = { &a, &b, &c, &n };

    CK(cuLaunchKernel(f, (unsigned int)(n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx, got;
    CUmodule mod;
    CUfunction f;
    CUdeviceptr x, y, d, p;
    CUstream s;
    CUmemLocation to_dev, to_host, bad;
    float *hx, *hy, host[N];
    unsigned int managed, type;
    int v;
    void *fatbin, *hp, *fn;
    prefetch_v1_t prefetch_v1;
    advise_v1_t advise_v1;

    EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuMemAllocManaged(&p, 16, CU_MEM_ATTACH_GLOBAL));
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuMemAllocManaged(&p, 16, CU_MEM_ATTACH_GLOBAL));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev));
    TRUE(v == 1);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev));
    TRUE(v == 0);
    CK(cuGetProcAddress("cuMemPrefetchAsync", &fn, 8000, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
    prefetch_v1 = (prefetch_v1_t)fn;
    CK(cuGetProcAddress("cuMemAdvise", &fn, 8000, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
    advise_v1 = (advise_v1_t)fn;
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&f, mod, "vcu_drv_vadd"));

    /* Allocation and its failure paths. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(NULL, 16, CU_MEM_ATTACH_GLOBAL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&p, 16, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&p, 16, 7));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&p, 16, CU_MEM_ATTACH_SINGLE));
    CK(cuMemAllocManaged(&x, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    CK(cuMemAllocManaged(&y, N * sizeof(float), CU_MEM_ATTACH_HOST));
    hx = (float *)(uintptr_t)x;
    hy = (float *)(uintptr_t)y;
    TRUE(hx[0] == 0.0f && hy[N - 1] == 0.0f);   /* new managed memory is zero */

    /* The host writes, a kernel adds, the host reads. */
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i;
        hy[i] = 1.0f;
    }
    vadd(f, x, y, y, N);
    CK(cuCtxSynchronize());
    for (int i = 0; i < N; i++)
        TRUE(hy[i] == (float)i + 1.0f);
    /* The host writes x only; y comes from the kernel. */
    for (int i = 0; i < N; i++)
        hx[i] = 2.0f;
    vadd(f, x, y, y, N);
    CK(cuStreamSynchronize(NULL));
    TRUE(hy[10] == 13.0f && hy[N - 1] == (float)(N - 1) + 3.0f);
    printf("host writes, kernels, host reads\n");

    /* Prefetches, both ABIs. */
    memset(&to_dev, 0, sizeof(to_dev));
    to_dev.type = CU_MEM_LOCATION_TYPE_DEVICE;
    to_dev.id = dev;
    memset(&to_host, 0, sizeof(to_host));
    to_host.type = CU_MEM_LOCATION_TYPE_HOST;
    bad = to_dev;
    bad.type = CU_MEM_LOCATION_TYPE_INVALID;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&d, N * sizeof(float)));
    CK(cuMemPrefetchAsync_v2(x, N * sizeof(float), to_dev, 0, s));
    CK(cuMemPrefetchAsync_v2(x, 0, to_dev, 0, s));
    CK(prefetch_v1(y, N * sizeof(float), dev, s));
    vadd(f, x, y, y, N);
    CK(prefetch_v1(y, N * sizeof(float), CU_DEVICE_CPU, NULL));
    CK(cuMemPrefetchAsync_v2(y + 4, 16, to_host, 0, NULL));
    CK(cuStreamSynchronize(NULL));
    TRUE(hy[10] == 15.0f);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPrefetchAsync_v2(d, 16, to_dev, 0, s));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemPrefetchAsync_v2(x, N * sizeof(float) + 1, to_dev, 0, s));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemPrefetchAsync_v2((CUdeviceptr)(uintptr_t)host, 16, to_dev, 0, s));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPrefetchAsync_v2(x, 16, bad, 0, s));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPrefetchAsync_v2(x, 16, to_dev, 1, s));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, prefetch_v1(x, 16, 99, s));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuMemPrefetchAsync_v2(x, 16, to_dev, 0, (CUstream)&v));
    printf("prefetches and their failure paths\n");

    /* Advice and attachment: checked, accepted on managed ranges. */
    CK(cuMemAdvise_v2(x, N * sizeof(float), CU_MEM_ADVISE_SET_READ_MOSTLY, to_dev));
    CK(advise_v1(x, 64, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev));
    CK(advise_v1(x, 64, CU_MEM_ADVISE_SET_ACCESSED_BY, CU_DEVICE_CPU));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAdvise_v2(x, 64, (CUmem_advise)0, to_dev));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAdvise_v2(x, 64, (CUmem_advise)99, to_dev));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemAdvise_v2(d, 64, CU_MEM_ADVISE_SET_READ_MOSTLY, to_dev));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemAdvise_v2(x, 64, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, bad));
    CK(cuStreamAttachMemAsync(s, x, 0, CU_MEM_ATTACH_SINGLE));
    CK(cuStreamAttachMemAsync(s, x, N * sizeof(float), CU_MEM_ATTACH_GLOBAL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamAttachMemAsync(s, x, 64, CU_MEM_ATTACH_HOST));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamAttachMemAsync(s, x, 0, 8));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamAttachMemAsync(s, d, 0, CU_MEM_ATTACH_HOST));
    printf("advice and attachment\n");

    /* Unified copies and memsets: managed memory is device memory. */
    CK(cuMemcpy(d, y, N * sizeof(float)));
    CK(cuMemcpyDtoH(host, d, sizeof(host)));
    TRUE(host[10] == 15.0f);
    CK(cuMemsetD32(y, 0, N));
    CK(cuCtxSynchronize());
    TRUE(hy[0] == 0.0f && hy[N - 1] == 0.0f);
    CK(cuMemcpyDtoD(y, d, N * sizeof(float)));
    TRUE(hy[10] == 15.0f);
    /* Named as host memory, managed memory is still device memory. */
    CK(cuMemsetD32(d, 0, N));
    CK(cuMemcpyHtoD(d, hy, N * sizeof(float)));
    CK(cuMemcpyDtoH(host, d, sizeof(host)));
    TRUE(host[10] == 15.0f);
    CK(cuMemsetD32(y, 0, N));
    CK(cuMemcpyDtoH(hy, d, N * sizeof(float)));
    TRUE(hy[10] == 15.0f);
    CK(cuMemcpyDtoHAsync(hx, d, N * sizeof(float), s));
    CK(cuStreamSynchronize(s));
    TRUE(hx[10] == 15.0f);
    printf("copies and memsets of managed memory\n");

    /* Pointer attributes. */
    CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, y + 8));
    TRUE(managed == 1);
    CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    TRUE(managed == 0);
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, y));
    TRUE(type == CU_MEMORYTYPE_DEVICE);
    CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, y + 8));
    TRUE(hp == (void *)(uintptr_t)(y + 8));
    CK(cuPointerGetAttribute(&p, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, y + 8));
    TRUE(p == y + 8);
    CK(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_CONTEXT, y));
    TRUE(got == ctx);
    CK(cuPointerGetAttribute(&p, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, y + 8));
    TRUE(p == y);

    /* Free. */
    CK(cuMemFree(x));
    CK(cuMemFree(y));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPrefetchAsync_v2(x, 16, to_dev, 0, s));
    CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    TRUE(managed == 0);
    CK(cuMemFree(d));

    /* A module's __managed__ global: the host reads and writes it by its
     * address, as natively (NVIDIA's uvmlite sample), and a kernel's write
     * comes back after a synchronize; through a library as well
     * (cuLibraryGetManaged, which finds no plain __device__ global). */
    {
        CUdeviceptr g, g2, plain, gp;
        size_t gsz;
        unsigned int *hw, *hp2;
        CUfunction add;
        CUlibrary lib;
        void *args[1];
        unsigned int inc = 5;

        CK(cuModuleGetGlobal(&g, &gsz, mod, "vcu_drv_managed_word"));
        TRUE(gsz == sizeof(unsigned int));
        CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, g));
        TRUE(managed == 1);
        CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, g));
        TRUE(hp == (void *)(uintptr_t)g);
        hw = hp;
        TRUE(*hw == 10);                          /* its initial value */
        /* Another managed global of the module, in the same page as the
         * driver packs them, each its own allocation. */
        CK(cuModuleGetGlobal(&gp, &gsz, mod, "vcu_drv_managed_pair"));
        TRUE(gsz == 2 * sizeof(unsigned int));
        CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, gp));
        TRUE(managed == 1);
        CK(cuPointerGetAttribute(&p, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, gp + 4));
        TRUE(p == gp);
        hp2 = (unsigned int *)(uintptr_t)gp;
        TRUE(hp2[0] == 20 && hp2[1] == 30);
        hp2[0] = 21;
        *hw += 1;
        CK(cuModuleGetFunction(&add, mod, "vcu_drv_managed_add"));
        args[0] = &inc;
        CK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
        TRUE(*hw == 16);                          /* the host's 1, the kernel's 5 */
        TRUE(hp2[0] == 21 && hp2[1] == 35);       /* the host's write kept, the kernel's */
        CK(cuModuleGetGlobal(&g2, NULL, mod, "vcu_drv_managed_word"));
        TRUE(g2 == g);
        CK(cuModuleGetGlobal(&plain, NULL, mod, "vcu_drv_flag"));
        CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, plain));
        TRUE(managed == 0);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFree(g));   /* not an allocation */
        TRUE(*hw == 16);

        CK(cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0));
        CK(cuLibraryGetManaged(&g2, &gsz, lib, "vcu_drv_managed_word"));
        TRUE(g2 != g && gsz == sizeof(unsigned int));
        TRUE(*(unsigned int *)(uintptr_t)g2 == 10);   /* the library's own copy */
        EXPECT(CUDA_ERROR_NOT_FOUND, cuLibraryGetManaged(&plain, NULL, lib, "vcu_drv_flag"));
        CK(cuLibraryUnload(lib));
    }

    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    free(fatbin);
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_managed\n");
    return 0;
}
