/*
 * Virtual memory management through the Driver API, as PyTorch's
 * expandable segments and NCCL use it: the granularity, a reservation,
 * physical allocations mapped into it with access set, copies, a memset
 * and a kernel over the mapped range, the mapping grown by a second
 * allocation mapped right behind the first (one range for copies and
 * kernels across the seam), a handle released while mapped (the memory
 * stays, and its charge), retained back from an address, unmapped,
 * released, freed; each call's failure paths (ranges not reserved or not
 * mapped, twice, sizes off the granularity, devices out of range,
 * shareable handles); and the VM's memory quota: cuMemCreate cannot take
 * more than cuMemGetInfo says is free.  Against the loopback the quota
 * is the program's own (VCU_LOOPBACK_QUOTA_MB, 256 MiB unless set).
 */
#include <stdint.h>

#include "vcu_drv_test.h"

static CUmemAllocationProp dev_prop(int dev)
{
    CUmemAllocationProp p;

    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemAccessDesc rw(int dev, CUmemAccess_flags flags)
{
    CUmemAccessDesc a;

    memset(&a, 0, sizeof(a));
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = dev;
    a.flags = flags;
    return a;
}

static void vadd(CUfunction f, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, int n)
{
    void *args[] = { &a, &b, &c, &n };

    CK(cuLaunchKernel(f, (unsigned int)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
}

static size_t free_now(void)
{
    size_t fr = 0, tot = 0;

    CK(cuMemGetInfo(&fr, &tot));
    return fr;
}

/* Creates chunks of the free memory's quarter (512 MiB at most: the
 * stand-in backs each with a file, which a jailed worker may not grow
 * past 1 GiB) until the driver (or the quota) says out of memory: never
 * more than was free. */
#define VMM_MAX_CHUNKS 1024u
#define VMM_CHUNK_MAX ((size_t)512 << 20)

static void quota(int dev, size_t gran)
{
    CUmemAllocationProp prop = dev_prop(dev);
    static CUmemGenericAllocationHandle h[VMM_MAX_CHUNKS];
    CUmemAccessDesc ad = rw(dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUdeviceptr va;
    size_t fr0 = free_now(), chunk, got = 0, fr1, fr2;
    unsigned int n = 0, i;
    CUresult r = CUDA_SUCCESS;

    chunk = fr0 / 4 < VMM_CHUNK_MAX ? fr0 / 4 : VMM_CHUNK_MAX;
    chunk = (chunk + gran - 1) / gran * gran;
    TRUE(chunk >= gran);
    while (n < VMM_MAX_CHUNKS) {
        r = cuMemCreate(&h[n], chunk, &prop, 0);
        if (r != CUDA_SUCCESS)
            break;
        got += chunk;
        n++;
    }
    EXPECT(CUDA_ERROR_OUT_OF_MEMORY, r);
    TRUE(got <= fr0);
    printf("info: quota: %u chunks of %zu MiB created of %zu MiB free, then out of memory\n", n,
           chunk >> 20, fr0 >> 20);
    for (i = 0; i < n; i++)
        CK(cuMemRelease(h[i]));
    TRUE(free_now() + chunk / 2 >= fr0);

    /* Released while mapped: the memory is still taken (its charge
     * too) until the mapping goes. */
    CK(cuMemAddressReserve(&va, chunk, 0, 0, 0));
    CK(cuMemCreate(&h[0], chunk, &prop, 0));
    CK(cuMemMap(va, chunk, 0, h[0], 0));
    CK(cuMemSetAccess(va, chunk, &ad, 1));
    CK(cuMemRelease(h[0]));
    fr1 = free_now();
    TRUE(fr1 + chunk / 2 <= fr0);
    /* What is left cannot hold another chunk of that size, plus all that
     * was free before. */
    EXPECT(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&h[1], (fr1 / gran + 1) * gran, &prop, 0));
    CK(cuMemsetD8(va, 0x5a, chunk));
    CK(cuCtxSynchronize());
    CK(cuMemUnmap(va, chunk));
    fr2 = free_now();
    TRUE(fr2 >= fr1 + chunk / 2);
    CK(cuMemAddressFree(va, chunk));
    printf("quota: creates stop where the free memory ends; a released mapped "
           "allocation stays charged until unmapped\n");
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUmemAllocationProp prop, bad, got;
    CUmemGenericAllocationHandle h1, h2, h3, hr;
    CUmemAccessDesc ad, ads[2];
    CUmemLocation loc;
    CUdeviceptr va, d;
    unsigned long long flags;
    size_t gran, rec, n, i;
    float *a, *c;
    unsigned int *u, mtype = 0;
    void *fatbin;
    int ndev, shfd = -1;
    const char *t = getenv("VCU_TRANSPORT");

    if (t != NULL && strcmp(t, "loopback") == 0 && getenv("VCU_LOOPBACK_QUOTA_MB") == NULL)
        setenv("VCU_LOOPBACK_QUOTA_MB", "256", 1);
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDeviceGetCount(&ndev));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&f, mod, "vcu_drv_vadd"));

    /* The granularity, and questions it refuses. */
    prop = dev_prop(dev);
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    TRUE(gran > 0 && (gran & (gran - 1)) == 0 && rec >= gran && rec % gran == 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemGetAllocationGranularity(NULL, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemGetAllocationGranularity(&rec, NULL, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemGetAllocationGranularity(&rec, &prop, (CUmemAllocationGranularity_flags)7));
    bad = dev_prop(99);
    EXPECT(CUDA_ERROR_INVALID_DEVICE,
           cuMemGetAllocationGranularity(&rec, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("info: granularity %zu KiB, recommended %zu KiB\n", gran >> 10, rec >> 10);

    /* Reserve, create, map, set access. */
    CK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    TRUE(va != 0 && va % gran == 0);
    CK(cuMemCreate(&h1, gran, &prop, 0));
    CK(cuMemGetAllocationPropertiesFromHandle(&got, h1));
    TRUE(got.type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == dev);
    CK(cuMemMap(va, gran, 0, h1, 0));
    ad = rw(dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(cuMemSetAccess(va, gran, &ad, 1));
    memset(&loc, 0, sizeof(loc));
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = dev;
    CK(cuMemGetAccess(&flags, &loc, va + 64));
    TRUE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 64));
    TRUE(mtype == CU_MEMORYTYPE_DEVICE);

    /* Copies, a memset and a kernel over the mapping. */
    n = gran / sizeof(float);
    a = malloc(2 * gran);
    c = malloc(2 * gran);
    TRUE(a != NULL && c != NULL);
    for (i = 0; i < n; i++)
        a[i] = (float)(i % 1000);
    CK(cuMemcpyHtoD(va, a, gran / 2));
    vadd(f, va, va, va + gran / 2, (int)(n / 2));
    CK(cuMemcpyDtoH(c, va + gran / 2, gran / 2));
    for (i = 0; i < n / 2; i++)
        TRUE(c[i] == 2.0f * a[i]);
    CK(cuMemsetD32(va, 0xdeadbeefu, n));
    CK(cuMemcpyDtoH(c, va, gran));
    u = (unsigned int *)c;
    TRUE(u[0] == 0xdeadbeefu && u[n - 1] == 0xdeadbeefu);
    printf("reserve, create, map, access; copies, memset, kernel over the mapping\n");

    /* Grown: a second allocation mapped right behind the first; copies
     * and kernels run across the seam. */
    CK(cuMemCreate(&h2, gran, &prop, 0));
    CK(cuMemMap(va + gran, gran, 0, h2, 0));
    CK(cuMemSetAccess(va + gran, gran, &ad, 1));
    for (i = 0; i < 2 * n; i++)
        a[i] = (float)(i % 777);
    CK(cuMemcpyHtoD(va, a, 2 * gran));
    CK(cuMemAlloc(&d, gran));
    vadd(f, va + gran / 2, va + gran / 2, d, (int)n);
    CK(cuMemcpyDtoH(c, d, gran));
    for (i = 0; i < n; i++)
        TRUE(c[i] == 2.0f * a[n / 2 + i]);
    CK(cuMemcpyDtoH(c, va, 2 * gran));
    TRUE(memcmp(a, c, 2 * gran) == 0);
    CK(cuMemsetD8(va + gran - 8, 0x11, 16));
    CK(cuMemcpyDtoH(c, va + gran - 8, 16));
    TRUE(((unsigned char *)c)[0] == 0x11 && ((unsigned char *)c)[15] == 0x11);
    CK(cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)(va + gran + 64)));
    TRUE(hr == h2);
    CK(cuMemRelease(hr));
    printf("grown by a second mapping behind the first: copies and a kernel across the seam\n");

    /* Other devices' access (a second device of the VM, if any). */
    if (ndev > 1) {
        ads[0] = ad;
        ads[1] = rw(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
        CK(cuMemSetAccess(va, 2 * gran, ads, 2));
        loc.id = 1;
        CK(cuMemGetAccess(&flags, &loc, va + gran));
        TRUE(flags == CU_MEM_ACCESS_FLAGS_PROT_READ);
        loc.id = dev;
    }

    /* Failure paths. */
    CK(cuMemCreate(&h3, gran, &prop, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h3, gran + 1, &prop, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemCreate(NULL, gran, &prop, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&hr, gran, NULL, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&hr, gran, &prop, 1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&hr, 0, &prop, 0));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuMemCreate(&hr, gran, &bad, 0));
    bad = prop;
    bad.location.type = CU_MEM_LOCATION_TYPE_HOST;
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuMemCreate(&hr, gran, &bad, 0));
    bad = prop;
    bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuMemCreate(&hr, gran, &bad, 0));
    bad = prop;
    bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&hr, gran, &bad, 0));
    /* A range it did not reserve, one mapped already, past the end of the
     * reservation, off the granularity, beyond the allocation, a handle
     * that is none. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(d, gran, 0, h3, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap((CUdeviceptr)(uintptr_t)&ndev, gran, 0, h3, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va, gran, 0, h3, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + gran / 2, gran, 0, h3, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 3 * gran, 2 * gran, 0, h3, 0));
    /* A size off the granularity: what NVIDIA's driver answers (580). */
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuMemMap(va + 2 * gran, gran / 2, 0, h3, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 2 * gran, 2 * gran, 0, h3, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 2 * gran, gran, gran, h3, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 2 * gran, gran, 0, 12345, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 2 * gran, 0, 0, h3, 0));
    /* Access: a range not mapped, another device, no descriptor, flags
     * that are none. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va + 2 * gran, gran, &ad, 1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(d, gran, &ad, 1));
    ads[0] = rw(99, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuMemSetAccess(va, gran, ads, 1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va, gran, &ad, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va, gran, NULL, 1));
    ads[0] = rw(dev, (CUmemAccess_flags)7);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemSetAccess(va, gran, ads, 1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemGetAccess(&flags, &loc, va + 2 * gran));
    loc.id = 99;
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuMemGetAccess(&flags, &loc, va));
    loc.id = dev;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)d));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemGetAllocationPropertiesFromHandle(&got, 12345));
    /* Shareable handles: POSIX descriptors where the device says so
     * (drv_vmm_ipc uses them), of an allocation made to be exported; no
     * other kind, whatever the GPU would (docs/design.md, "CUDA IPC"). */
    {
        int v = -1, pools = -1, fds[2];

        CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, dev));
        TRUE(v == 0);
        v = -1;
        CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                dev));
        TRUE(v == 0 || v == 1);
        /* Pools: POSIX descriptors where allocations have them, no other. */
        CK(cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev));
        TRUE(pools == (v ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0));
        TRUE(pipe(fds) == 0);
        EXPECT(v ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED,
               cuMemExportToShareableHandle(&shfd, h1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        EXPECT(v ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED,
               cuMemImportFromShareableHandle(&hr, (void *)(uintptr_t)fds[0],
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        EXPECT(CUDA_ERROR_NOT_SUPPORTED,
               cuMemExportToShareableHandle(&shfd, h1, CU_MEM_HANDLE_TYPE_FABRIC, 0));
        TRUE(shfd == -1);
        close(fds[0]);
        close(fds[1]);
    }
    /* Unmap a part of a mapping, a range not starting at one, one with a
     * hole; free a reservation with mappings in it, or not as reserved. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va, gran / 2));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va + gran / 2, gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va, 3 * gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(d, gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(va, 4 * gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(va, 2 * gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(d, gran));
    CK(cuMemRelease(h3));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemRelease(h3));                 /* twice */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemMap(va + 2 * gran, gran, 0, h3, 0));
    printf("failure paths: ranges not reserved or mapped, sizes, devices, handles, "
           "shareable handles\n");

    /* Released while mapped: the memory stays; the address gives the
     * handle back, which must be released again. */
    CK(cuMemRelease(h1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemGetAllocationPropertiesFromHandle(&got, h1));
    CK(cuMemsetD32(va, 7, n));
    CK(cuMemcpyDtoH(c, va, gran));
    TRUE(u[0] == 7 && u[n - 1] == 7);
    CK(cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)va));
    TRUE(hr == h1);
    CK(cuMemGetAllocationPropertiesFromHandle(&got, hr));
    CK(cuMemRelease(hr));
    CK(cuMemRelease(h2));

    /* Unmapped (both mappings at once), twice; freed, twice. */
    CK(cuCtxSynchronize());
    CK(cuMemUnmap(va, 2 * gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va, 2 * gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(va, gran));
    TRUE(cuMemcpyHtoD(va, a, 64) != CUDA_SUCCESS);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemRelease(h1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemRetainAllocationHandle(&hr, (void *)(uintptr_t)va));
    CK(cuMemAddressFree(va, 4 * gran));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(va, 4 * gran));
    printf("released while mapped, retained back, unmapped, freed\n");

    quota(dev, gran);

    /* Left for the session's end to take down: a mapping with its
     * reservation and handle. */
    CK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    CK(cuMemCreate(&h1, gran, &prop, 0));
    CK(cuMemMap(va, gran, 0, h1, 0));
    CK(cuMemSetAccess(va, gran, &ad, 1));
    CK(cuMemsetD8(va, 1, gran));
    CK(cuCtxSynchronize());

    CK(cuMemFree(d));
    CK(cuModuleUnload(mod));
    free(fatbin);
    free(a);
    free(c);
    printf("PASS drv_vmm\n");
    return 0;
}
