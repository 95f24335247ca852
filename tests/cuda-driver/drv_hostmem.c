/*
 * Page-locked host memory beyond plain pinned buffers: mapped memory
 * (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP, cuMemHostGetDevicePointer)
 * read and written by a kernel, ordinary memory registered in place
 * (cuMemHostRegister, cuMemHostUnregister), mapped and used by copies,
 * pointer attributes (cuPointerGetAttribute, cuPointerGetAttributes), and
 * each call's failure paths.
 */
#include <stdint.h>

#include "vcu_drv_test.h"

#define N 4096

/* c = a + b on the device through the three device pointers. */
static void vadd(CUfunction f, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, int n)
{
    void *args[] = { &a, &b, &c, &n };

    CK(cuLaunchKernel(f, (unsigned int)(n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
}

static void *page_alloc(size_t bytes)
{
    void *p = NULL;

    TRUE(posix_memalign(&p, 4096, bytes) == 0);
    return p;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx, got;
    CUmodule mod;
    CUfunction f;
    CUdeviceptr da, db, dc, dmid, d, dp;
    float *a, *b, *c, *r1, *r2, *r3;
    unsigned int flags, type;
    int v, ord;
    void *fatbin, *hp;
    char pageable[64];

    /* Before cuInit. */
    EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuMemHostUnregister(pageable));
    EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuMemHostRegister(pageable, sizeof(pageable), 0));

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    /* No current context yet. */
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuMemHostRegister(pageable, sizeof(pageable), 0));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuMemHostGetDevicePointer(&d, pageable, 0));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT,
           cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev));
    TRUE(v == 1);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, dev));
    TRUE(v == 1);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev));
    TRUE(v == 1);

    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&f, mod, "vcu_drv_vadd"));

    /* 1. Mapped pinned memory: a kernel reads and writes it in place. */
    CK(cuMemHostAlloc((void **)&a, N * sizeof(float), CU_MEMHOSTALLOC_DEVICEMAP));
    CK(cuMemHostAlloc((void **)&b, N * sizeof(float),
                      CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CK(cuMemAllocHost((void **)&c, N * sizeof(float)));   /* mapped too, as with UVA */
    CK(cuMemHostGetFlags(&flags, b + 7));
    TRUE(flags == (CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CK(cuMemHostGetFlags(&flags, c));
    TRUE(flags == 0);
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.25f * (float)i;
        c[i] = -1.0f;
    }
    CK(cuMemHostGetDevicePointer(&da, a, 0));
    CK(cuMemHostGetDevicePointer(&db, b, 0));
    CK(cuMemHostGetDevicePointer(&dc, c, 0));
    CK(cuMemHostGetDevicePointer(&dmid, a + 100, 0));
    TRUE(dmid == da + 100 * sizeof(float));
    CK(cuMemHostGetDevicePointer(&dp, a, 0));
    TRUE(dp == da);                 /* the same answer again */
    vadd(f, da, db, dc, N);
    for (int i = 0; i < N; i++)
        TRUE(c[i] == 1.25f * (float)i);
    /* With unified addressing the host pointer itself names the memory
     * on the device: memsets on it, stream-ordered (as XLA zeroes its
     * pinned buffers) and 2D, land in place; past the allocation's end is
     * refused. */
    {
        unsigned int *u = (unsigned int *)c;
        CUstream s;

        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CK(cuMemsetD32Async((CUdeviceptr)(uintptr_t)(u + 1), 0x5a5a5a5au, 2, s));
        CK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)(u + 3), 0x11, 4, s));
        CK(cuStreamSynchronize(s));
        CK(cuMemsetD2D16((CUdeviceptr)(uintptr_t)(u + 8), 16, 0x2222, 2, 3));
        TRUE(u[1] == 0x5a5a5a5au && u[2] == 0x5a5a5a5au && u[3] == 0x11111111u);
        TRUE(u[8] == 0x22222222u && u[12] == 0x22222222u && u[16] == 0x22222222u);
        TRUE(c[4] == 1.25f * 4.0f && c[9] == 1.25f * 9.0f);
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuMemsetD32((CUdeviceptr)(uintptr_t)(u + N - 1), 0, 2));
        /* Copies naming it as device memory too, each direction. */
        {
            CUdeviceptr dd;
            unsigned int x = 0, val = 0x77665544u;

            CK(cuMemAlloc(&dd, 64));
            CK(cuMemcpyDtoDAsync(dd, (CUdeviceptr)(uintptr_t)(u + 1), 8, s));
            CK(cuStreamSynchronize(s));
            CK(cuMemcpyDtoD((CUdeviceptr)(uintptr_t)(u + 24), dd, 8));
            TRUE(u[24] == 0x5a5a5a5au && u[25] == 0x5a5a5a5au);
            CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)(u + 28), &val, 4));
            TRUE(u[28] == val);
            CK(cuMemcpyDtoH(&x, (CUdeviceptr)(uintptr_t)(u + 8), 4));
            TRUE(x == 0x22222222u);
            EXPECT(CUDA_ERROR_INVALID_VALUE,
                   cuMemcpyDtoD(dd, (CUdeviceptr)(uintptr_t)(u + N - 1), 8));
            CK(cuMemFree(dd));
        }
        CK(cuStreamDestroy(s));
    }
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(NULL, a, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&d, NULL, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&d, a, 1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&d, pageable, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostAlloc((void **)&r1, 16, 0x10));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostAlloc((void **)&r1, 0, CU_MEMHOSTALLOC_DEVICEMAP));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostAlloc(NULL, 16, CU_MEMHOSTALLOC_DEVICEMAP));
    printf("mapped pinned memory: a kernel through its device pointers\n");

    /* 1b. With unified addressing a page-locked host pointer is its own
     * device pointer: kernels (launched, and a graph's node) handed the
     * host pointers of memory whose device pointer no one asked for read
     * and write it in place, as XLA's do; the device pointer asked for
     * afterwards is the host pointer itself; registered memory too. */
    {
        float *x, *y, *z, *w, *rg;
        CUdeviceptr hx, hy, hz, dz;
        CUgraph g;
        CUgraphExec ge;
        CUgraphNode kn;
        CUDA_KERNEL_NODE_PARAMS kp;
        int n = N;
        void *args[] = { &hx, &hy, &hz, &n };

        CK(cuMemHostAlloc((void **)&x, N * sizeof(float), 0));
        CK(cuMemAllocHost((void **)&y, N * sizeof(float)));
        CK(cuMemHostAlloc((void **)&z, N * sizeof(float), CU_MEMHOSTALLOC_PORTABLE));
        CK(cuMemHostAlloc((void **)&w, N * sizeof(float), 0));
        for (int i = 0; i < N; i++) {
            x[i] = (float)i;
            y[i] = 2.0f * (float)i;
            z[i] = w[i] = -1.0f;
        }
        vadd(f, (CUdeviceptr)(uintptr_t)x, (CUdeviceptr)(uintptr_t)y, (CUdeviceptr)(uintptr_t)z, N);
        for (int i = 0; i < N; i++)
            TRUE(z[i] == 3.0f * (float)i);
        CK(cuMemHostGetDevicePointer(&dz, z, 0));
        TRUE(dz == (CUdeviceptr)(uintptr_t)z);

        hx = (CUdeviceptr)(uintptr_t)z;
        hy = (CUdeviceptr)(uintptr_t)y;
        hz = (CUdeviceptr)(uintptr_t)w;
        memset(&kp, 0, sizeof(kp));
        kp.func = f;
        kp.gridDimX = (N + 127) / 128;
        kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = 128;
        kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = args;
        CK(cuGraphCreate(&g, 0));
        CK(cuGraphAddKernelNode(&kn, g, NULL, 0, &kp));
        CK(cuGraphInstantiateWithFlags(&ge, g, 0));
        CK(cuGraphLaunch(ge, NULL));
        CK(cuStreamSynchronize(NULL));
        for (int i = 0; i < N; i++)
            TRUE(w[i] == 5.0f * (float)i);

        rg = page_alloc(N * sizeof(float));
        CK(cuMemHostRegister(rg, N * sizeof(float), 0));
        vadd(f, (CUdeviceptr)(uintptr_t)x, (CUdeviceptr)(uintptr_t)w, (CUdeviceptr)(uintptr_t)rg,
             N);
        for (int i = 0; i < N; i++)
            TRUE(rg[i] == 6.0f * (float)i);
        CK(cuMemHostUnregister(rg));
        free(rg);
        CK(cuGraphExecDestroy(ge));
        CK(cuGraphDestroy(g));
        CK(cuMemFreeHost(x));
        CK(cuMemFreeHost(y));
        CK(cuMemFreeHost(z));
        CK(cuMemFreeHost(w));
    }
    printf("pinned host pointers as device pointers: launches, a graph node, registered memory\n");

    /* 2. Pointer attributes. */
    CK(cuMemAlloc(&d, 4096));
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)b));
    TRUE(type == CU_MEMORYTYPE_HOST);
    CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                             (CUdeviceptr)(uintptr_t)(b + 3)));
    TRUE(dp == db + 3 * sizeof(float));
    CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(uintptr_t)b));
    TRUE(hp == (void *)b);
    CK(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)b));
    TRUE(got == ctx);
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    TRUE(ord == 0);
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
    TRUE(type == CU_MEMORYTYPE_DEVICE);
    CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
    TRUE(dp == d);
    {
        size_t size = 0;

        CK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
        TRUE(size >= 4096);
    }
    CK(cuPointerGetAttribute(&flags, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
    TRUE(flags == 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 (CUdeviceptr)(uintptr_t)pageable));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_P2P_TOKENS, d));
    {
        /* Buffer IDs: one per allocation, anywhere in it, never reused
         * (cuFFT asks them of its work areas). */
        unsigned long long id1 = 0, id2 = 0, id3 = 0, idh = 0, idu = 7;
        CUdeviceptr d2;
        CUpointer_attribute at = CU_POINTER_ATTRIBUTE_BUFFER_ID;
        void *data[] = { &idu };

        CK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
        CK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d + 100));
        TRUE(id1 != 0 && id1 == id2);
        CK(cuMemAlloc(&d2, 4096));
        CK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d2));
        TRUE(id2 != 0 && id2 != id1);
        CK(cuMemFree(d2));
        CK(cuMemAlloc(&d2, 4096));
        CK(cuPointerGetAttribute(&id3, CU_POINTER_ATTRIBUTE_BUFFER_ID, d2));
        TRUE(id3 != 0 && id3 != id2 && id3 != id1);
        CK(cuMemFree(d2));
        CK(cuPointerGetAttribute(&idh, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)b));
        TRUE(idh != 0 && idh != id1 && idh != id2 && idh != id3);
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                     (CUdeviceptr)(uintptr_t)pageable));
        CK(cuPointerGetAttributes(1, &at, data, (CUdeviceptr)(uintptr_t)pageable));
        TRUE(idu == 0);
    }
    {
        /* As NVIDIA's runtime asks in cudaPointerGetAttributes. */
        CUpointer_attribute at[] = {
            CU_POINTER_ATTRIBUTE_CONTEXT,        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
            CU_POINTER_ATTRIBUTE_IS_MANAGED,     CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        };
        CUcontext actx = ctx;
        unsigned int atype = 99, managed = 99;
        CUdeviceptr adp = 1;
        void *ahp = pageable;
        int aord = 99;
        void *data[] = { &actx, &atype, &adp, &ahp, &managed, &aord };

        CK(cuPointerGetAttributes(6, at, data, (CUdeviceptr)(uintptr_t)c));
        TRUE(actx == ctx && atype == CU_MEMORYTYPE_HOST && adp == dc && ahp == (void *)c &&
             managed == 0 && aord == 0);
        /* Unknown memory: zero values and success. */
        CK(cuPointerGetAttributes(6, at, data, (CUdeviceptr)(uintptr_t)pageable));
        TRUE(actx == NULL && atype == 0 && adp == 0 && ahp == NULL && managed == 0);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes(0, at, data, d));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes(6, NULL, data, d));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes(6, at, NULL, d));
        data[2] = NULL;
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttributes(6, at, data, d));
    }
    printf("pointer attributes of pinned, device and unknown memory, buffer IDs\n");

    /* 3. Registered memory: copies, then mapped for a kernel. */
    r1 = page_alloc(N * sizeof(float));
    r2 = page_alloc(N * sizeof(float));
    r3 = page_alloc(N * sizeof(float));
    for (int i = 0; i < N; i++) {
        r1[i] = 3.0f * (float)i;
        r2[i] = 1.0f;
        r3[i] = 0.0f;
    }
    CK(cuMemHostRegister(r1, N * sizeof(float), 0));
    CK(cuMemHostRegister_v2(r2, N * sizeof(float), CU_MEMHOSTREGISTER_DEVICEMAP));
    CK(cuMemHostRegister(r3, N * sizeof(float),
                         CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    CK(cuMemHostGetFlags(&flags, r3 + 5));
    TRUE(flags == (CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE));
    EXPECT(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cuMemHostRegister(r1 + 1024, 16, 0));
    EXPECT(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cuMemHostRegister(a, 16, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister(NULL, 16, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister(pageable, 0, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostRegister(pageable, sizeof(pageable), 0x40));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED,
           cuMemHostRegister(pageable, sizeof(pageable), CU_MEMHOSTREGISTER_IOMEMORY));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED,
           cuMemHostRegister(pageable, sizeof(pageable), CU_MEMHOSTREGISTER_READ_ONLY));
    CK(cuMemcpyHtoDAsync(d, r1, 4096, NULL));
    CK(cuMemcpyDtoHAsync(r3, d, 4096, NULL));
    CK(cuStreamSynchronize(NULL));
    TRUE(r3[0] == 0.0f && r3[1023] == 3.0f * 1023.0f);
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                             (CUdeviceptr)(uintptr_t)r1));
    TRUE(type == CU_MEMORYTYPE_HOST);
    CK(cuMemHostGetDevicePointer(&da, r1, 0));
    CK(cuMemHostGetDevicePointer(&db, r2, 0));
    CK(cuMemHostGetDevicePointer(&dc, r3, 0));
    vadd(f, da, db, dc, N);
    for (int i = 0; i < N; i++)
        TRUE(r3[i] == 3.0f * (float)i + 1.0f);
    printf("registered memory: async copies and a kernel through it\n");

    EXPECT(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(r1 + 4));
    EXPECT(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(a));
    EXPECT(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(pageable));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostUnregister(NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(r1));
    CK(cuMemHostUnregister(r1));
    EXPECT(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cuMemHostUnregister(r1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&d, r1, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetFlags(&flags, r1));
    /* The same memory again once its first registration ended. */
    CK(cuMemHostRegister(r1, N * sizeof(float), CU_MEMHOSTREGISTER_DEVICEMAP));
    CK(cuMemHostUnregister(r1));
    CK(cuMemHostUnregister(r2));
    CK(cuMemHostUnregister(r3));
    printf("unregister, and its failure paths\n");

    CK(cuMemFreeHost(a));
    CK(cuMemFreeHost(b));
    CK(cuMemFreeHost(c));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetDevicePointer(&d, a, 0));
    CK(cuMemFree(d));
    free(r1);
    free(r2);
    free(r3);
    CK(cuModuleUnload(mod));
    free(fatbin);
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_hostmem\n");
    return 0;
}
