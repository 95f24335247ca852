/*
 * libcudart.so.13 core: lazy connection, devices and CUDA_VISIBLE_DEVICES,
 * the registration ABI nvcc emits, kernel launches, function attributes
 * and occupancy.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cudart_int.h"
#include "vcu_transport_int.h"

_Static_assert(sizeof(struct cudaDeviceProp) == 1008, "CUDA 13 cudaDeviceProp");
_Static_assert(sizeof(struct vcu_cu_device_info_resp) <= VCU_MAX_PAYLOAD, "device info");

vcu__rt_t vcu__rt = {
    .once = PTHREAD_ONCE_INIT,
    .reg_lock = PTHREAD_MUTEX_INITIALIZER,
    .dev_lock = PTHREAD_MUTEX_INITIALIZER,
};

__thread int vcu__cur_dev;
/* cudaSetDevice was called on this thread: cudaSetValidDevices leaves the
 * current device alone then. */
static __thread int vcu__dev_chosen;

/* ---- connection and devices -------------------------------------------- */

static cudaError_t vcu__raw_info(uint32_t vord, struct vcu_cu_device_info_resp *out)
{
    int err = vcu__device_info(vcu__rt.conn, vord, out);

    return err != 0 ? vcu__from_vcu(err) : vcu__from_cu(out->r.result);
}

static int vcu__uuid_of(void *arg, uint32_t vord, uint8_t uuid[16])
{
    struct vcu_cu_device_info_resp info;

    (void)arg;
    if (vcu__raw_info(vord, &info) != cudaSuccess)
        return -1;
    memcpy(uuid, info.uuid, 16);
    return 0;
}

static void vcu__visible(uint32_t n)
{
    uint32_t vord[VCU_CU_MAX_DEVICES];

    vcu__rt.ndev = vcu__visible_devices(getenv("CUDA_VISIBLE_DEVICES"), n, vcu__uuid_of, NULL,
                                        vord, VCU_CU_MAX_DEVICES);
    for (int i = 0; i < vcu__rt.ndev; i++)
        vcu__rt.dev[i].vord = vord[i];
}

static void vcu__pci_ids(void)
{
    unsigned int dom = 0, bus = 0, slot = 0;
    int have = vcu__pci_addr(vcu__dev_path(), &dom, &bus, &slot);

    for (int i = 0; i < vcu__rt.ndev; i++) {
        vcu__dev_t *d = &vcu__rt.dev[i];

        d->pci_domain = have ? (int)dom : 0;
        d->pci_bus = have ? (int)bus : 0;
        d->pci_device = have ? (int)(slot + d->vord) : (int)d->vord;
    }
}

static void vcu__init_once(void)
{
    static int logged;
    struct vcu_cu_hdr h = { 0 };
    struct vcu_cu_driver_info_resp di;
    const char *a;
    int err;

    err = vcu_conn_open(NULL, VCU_FEAT_CUDA | VCU_FEAT_ASYNC | VCU_FEAT_MODULE_CACHE,
                        &vcu__rt.conn);
    if (err != 0) {
        vcu__rt.init_err = err == VCU_EVERSION ? cudaErrorInsufficientDriver : cudaErrorNoDevice;
        vcu__log_once(&logged, "virtio-cuda: cannot open a session on %s: %s\n",
                      getenv("VCU_TRANSPORT") ? getenv("VCU_TRANSPORT") : vcu__dev_path(),
                      vcu_status_str(err));
        return;
    }
    if (!(vcu_conn_features(vcu__rt.conn) & VCU_FEAT_CUDA)) {
        vcu__rt.init_err = cudaErrorNoDevice;
        vcu__log_once(&logged, "virtio-cuda: the host offers no CUDA (no GPU driver on the host)\n");
        return;
    }
    vcu__rt.max_xfer = vcu__rt.conn->max_xfer;
    /* Stream-ordered calls go without waiting unless VCU_SYNC_CALLS=1
     * (debugging: every error then shows at the call that caused it). */
    a = getenv("VCU_SYNC_CALLS");
    vcu__rt.async = (vcu_conn_features(vcu__rt.conn) & VCU_FEAT_ASYNC) &&
                    !(a != NULL && strcmp(a, "1") == 0);
    memset(&di, 0, sizeof(di));
    err = vcu_conn_call(vcu__rt.conn, VCU_OP_CU_DRIVER_INFO, 0, &h, sizeof(h), NULL, 0, &di,
                        sizeof(di), NULL);
    if (err != 0 || di.r.result != 0) {
        vcu__rt.init_err = err != 0 ? vcu__from_vcu(err) : vcu__from_cu(di.r.result);
        vcu__log_once(&logged, "virtio-cuda: the host's CUDA driver failed: %s\n",
                      err != 0 ? vcu_status_str(err) : cudaGetErrorString(vcu__rt.init_err));
        return;
    }
    vcu__rt.driver_version = (int)di.driver_version;
    vcu__visible(di.device_count);
    vcu__pci_ids();
}

cudaError_t vcu__init(void)
{
    pthread_once(&vcu__rt.once, vcu__init_once);
    return vcu__rt.init_err;
}

cudaError_t vcu__check_dev(int dev)
{
    cudaError_t e = vcu__init();

    if (e != cudaSuccess)
        return e;
    if (vcu__rt.ndev == 0)
        return cudaErrorNoDevice;
    if (dev < 0 || dev >= vcu__rt.ndev)
        return cudaErrorInvalidDevice;
    return __atomic_load_n(&vcu__rt.dev[dev].sticky, __ATOMIC_RELAXED);
}

cudaError_t vcu__enter(int *dev)
{
    *dev = vcu__cur_dev;
    return vcu__check_dev(*dev);
}

cudaError_t vcu__call(int dev, uint32_t op, int async, void *req, uint32_t req_len,
                      const vcu_buf_t *bufs, unsigned int nbufs, void *resp, uint32_t resp_cap)
{
    struct vcu_cu_resp local;
    struct vcu_cu_resp *r;
    uint32_t rlen = 0;
    cudaError_t e;
    int err;

    ((struct vcu_cu_hdr *)req)->device = vcu__rt.dev[dev].vord;
    ((struct vcu_cu_hdr *)req)->ctx = 0;
    if (resp == NULL) {
        resp = &local;
        resp_cap = sizeof(local);
    }
    r = resp;
    memset(r, 0, sizeof(*r));
    if (async && vcu__rt.async) {
        /* Read first: launch loops need not bounce the cache line. */
        if (!__atomic_load_n(&vcu__rt.dev[dev].pending, __ATOMIC_RELAXED))
            __atomic_store_n(&vcu__rt.dev[dev].pending, 1, __ATOMIC_RELAXED);
        err = vcu_conn_call(vcu__rt.conn, op, VCU_CALL_ASYNC, req, req_len, bufs, nbufs, NULL,
                            0, NULL);
        return vcu__from_vcu(err);
    }
    if (op == VCU_OP_CU_CTX_SYNCHRONIZE || op == VCU_OP_CU_CTX_RESET)
        /* Cleared before the call: an async call racing with it sets it
         * again, so it is never wrongly clear. */
        __atomic_store_n(&vcu__rt.dev[dev].pending, 0, __ATOMIC_RELAXED);
    err = vcu_conn_call(vcu__rt.conn, op, 0, req, req_len, bufs, nbufs, resp, resp_cap, &rlen);
    if (err == 0)
        vcu__printf_after(dev, op, req);
    if (err != 0)
        return vcu__from_vcu(err);
    if (rlen < sizeof(*r))
        return cudaErrorUnknown;
    /* An earlier async call's failure is this call's error, as CUDA
     * reports it at the next call. */
    if (r->deferred != 0) {
        e = vcu__from_cu(r->deferred);
        vcu__err_dev(dev, e);
        if (r->result == 0)
            return e;
    }
    e = vcu__from_cu(r->result);
    if (vcu__is_sticky(e))
        vcu__err_dev(dev, e);
    return e;
}

cudaError_t vcu__sync_pending(void)
{
    cudaError_t first = cudaSuccess;

    for (int d = 0; d < vcu__rt.ndev; d++) {
        struct vcu_cu_hdr h;
        cudaError_t e;

        if (!__atomic_load_n(&vcu__rt.dev[d].pending, __ATOMIC_RELAXED))
            continue;
        e = vcu__call(d, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), NULL, 0, NULL, 0);
        if (first == cudaSuccess)
            first = e;
    }
    return first;
}

cudaError_t vcu__dev_info(int dev, const struct vcu_cu_device_info_resp **out)
{
    cudaError_t e = cudaSuccess;
    vcu__dev_t *d = &vcu__rt.dev[dev];

    pthread_mutex_lock(&vcu__rt.dev_lock);
    if (!d->info_loaded) {
        e = vcu__raw_info(d->vord, &d->info);
        if (e == cudaSuccess)
            d->info_loaded = 1;
    }
    pthread_mutex_unlock(&vcu__rt.dev_lock);
    *out = &d->info;
    return e;
}

/* Device attribute as the program sees it (virtual PCI ids). */
int vcu__dev_attr(int dev, int attr)
{
    const struct vcu_cu_device_info_resp *info;
    vcu__dev_t *d = &vcu__rt.dev[dev];

    switch (attr) {
    case cudaDevAttrPciBusId:
        return d->pci_bus;
    case cudaDevAttrPciDeviceId:
        return d->pci_device;
    case cudaDevAttrPciDomainId:
        return d->pci_domain;
    /* This runtime offers no IPC (cudart_unsupported.h: NVIDIA's runtime
     * reaches it through libcuda.so.1), whatever the device does. */
    case cudaDevAttrIpcEventSupport:
    case cudaDevAttrMemoryPoolSupportedHandleTypes:
        return 0;
    }
    /* Those the library answers itself (managed memory emulated in
     * cudart_managed.c): vcu__device_info. */
    if (vcu__dev_info(dev, &info) != cudaSuccess || attr < 0 ||
        (uint32_t)attr >= info->num_attrs || attr >= (int)VCU_CU_NUM_DEV_ATTRS)
        return 0;
    return (int)info->attrs[attr];
}

VCU__EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return vcu__err(cudaErrorInvalidValue);
    if (vcu__init() != cudaSuccess) {
        *driverVersion = 0;
        return cudaSuccess;
    }
    *driverVersion = vcu__rt.driver_version;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (runtimeVersion == NULL)
        return vcu__err(cudaErrorInvalidValue);
    *runtimeVersion = VCU__CUDART_VERSION;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    cudaError_t e;

    if (count == NULL)
        return vcu__err(cudaErrorInvalidValue);
    *count = 0;
    e = vcu__init();
    if (e != cudaSuccess)
        return vcu__err(e);
    if (vcu__rt.ndev == 0)
        return vcu__err(cudaErrorNoDevice);
    *count = vcu__rt.ndev;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGetDevice(int *device)
{
    cudaError_t e;

    if (device == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__init();
    if (e != cudaSuccess)
        return vcu__err(e);
    if (vcu__rt.ndev == 0)
        return vcu__err(cudaErrorNoDevice);
    *device = vcu__cur_dev;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaSetDevice(int device)
{
    cudaError_t e = vcu__init();

    if (e == cudaSuccess && vcu__rt.ndev == 0)
        e = cudaErrorNoDevice;
    if (e == cudaSuccess && (device < 0 || device >= vcu__rt.ndev))
        e = cudaErrorInvalidDevice;
    if (e != cudaSuccess)
        return vcu__err(e);
    vcu__cur_dev = device;
    vcu__dev_chosen = 1;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
    (void)deviceFlags;
    (void)flags;
    return cudaSetDevice(device) == cudaSuccess ? cudaSuccess : cudaPeekAtLastError();
}

VCU__EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    const struct vcu_cu_device_info_resp *info;
    cudaError_t e;

    if (value == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__init();
    if (e == cudaSuccess && (device < 0 || device >= vcu__rt.ndev))
        e = vcu__rt.ndev == 0 ? cudaErrorNoDevice : cudaErrorInvalidDevice;
    if (e == cudaSuccess)
        e = vcu__dev_info(device, &info);
    if (e != cudaSuccess)
        return vcu__err(e);
    if ((int)attr < 0 || (int)attr >= (int)VCU_CU_NUM_DEV_ATTRS || (uint32_t)attr >= info->num_attrs)
        return vcu__err(cudaErrorInvalidValue);
    *value = vcu__dev_attr(device, (int)attr);
    return cudaSuccess;
}

#define A(x) vcu__dev_attr(device, cudaDevAttr##x)

/* cudaGetDeviceProperties's limits of blocks, grids and memory, and the
 * compute capability. */
static void vcu__props_compute(struct cudaDeviceProp *p, int device)
{
    p->sharedMemPerBlock = (size_t)A(MaxSharedMemoryPerBlock);
    p->regsPerBlock = A(MaxRegistersPerBlock);
    p->warpSize = A(WarpSize);
    p->memPitch = (size_t)(unsigned int)A(MaxPitch);
    p->maxThreadsPerBlock = A(MaxThreadsPerBlock);
    p->maxThreadsDim[0] = A(MaxBlockDimX);
    p->maxThreadsDim[1] = A(MaxBlockDimY);
    p->maxThreadsDim[2] = A(MaxBlockDimZ);
    p->maxGridSize[0] = A(MaxGridDimX);
    p->maxGridSize[1] = A(MaxGridDimY);
    p->maxGridSize[2] = A(MaxGridDimZ);
    p->totalConstMem = (size_t)A(TotalConstantMemory);
    p->major = A(ComputeCapabilityMajor);
    p->minor = A(ComputeCapabilityMinor);
    p->textureAlignment = (size_t)A(TextureAlignment);
    p->texturePitchAlignment = (size_t)A(TexturePitchAlignment);
    p->multiProcessorCount = A(MultiProcessorCount);
    p->integrated = A(Integrated);
    p->canMapHostMemory = A(CanMapHostMemory);
}

/* cudaGetDeviceProperties's texture and surface limits. */
static void vcu__props_textures(struct cudaDeviceProp *p, int device)
{
    p->maxTexture1D = A(MaxTexture1DWidth);
    p->maxTexture1DMipmap = A(MaxTexture1DMipmappedWidth);
    p->maxTexture2D[0] = A(MaxTexture2DWidth);
    p->maxTexture2D[1] = A(MaxTexture2DHeight);
    p->maxTexture2DMipmap[0] = A(MaxTexture2DMipmappedWidth);
    p->maxTexture2DMipmap[1] = A(MaxTexture2DMipmappedHeight);
    p->maxTexture2DLinear[0] = A(MaxTexture2DLinearWidth);
    p->maxTexture2DLinear[1] = A(MaxTexture2DLinearHeight);
    p->maxTexture2DLinear[2] = A(MaxTexture2DLinearPitch);
    p->maxTexture2DGather[0] = A(MaxTexture2DGatherWidth);
    p->maxTexture2DGather[1] = A(MaxTexture2DGatherHeight);
    p->maxTexture3D[0] = A(MaxTexture3DWidth);
    p->maxTexture3D[1] = A(MaxTexture3DHeight);
    p->maxTexture3D[2] = A(MaxTexture3DDepth);
    p->maxTexture3DAlt[0] = A(MaxTexture3DWidthAlt);
    p->maxTexture3DAlt[1] = A(MaxTexture3DHeightAlt);
    p->maxTexture3DAlt[2] = A(MaxTexture3DDepthAlt);
    p->maxTextureCubemap = A(MaxTextureCubemapWidth);
    p->maxTexture1DLayered[0] = A(MaxTexture1DLayeredWidth);
    p->maxTexture1DLayered[1] = A(MaxTexture1DLayeredLayers);
    p->maxTexture2DLayered[0] = A(MaxTexture2DLayeredWidth);
    p->maxTexture2DLayered[1] = A(MaxTexture2DLayeredHeight);
    p->maxTexture2DLayered[2] = A(MaxTexture2DLayeredLayers);
    p->maxTextureCubemapLayered[0] = A(MaxTextureCubemapLayeredWidth);
    p->maxTextureCubemapLayered[1] = A(MaxTextureCubemapLayeredLayers);
    p->maxSurface1D = A(MaxSurface1DWidth);
    p->maxSurface2D[0] = A(MaxSurface2DWidth);
    p->maxSurface2D[1] = A(MaxSurface2DHeight);
    p->maxSurface3D[0] = A(MaxSurface3DWidth);
    p->maxSurface3D[1] = A(MaxSurface3DHeight);
    p->maxSurface3D[2] = A(MaxSurface3DDepth);
    p->maxSurface1DLayered[0] = A(MaxSurface1DLayeredWidth);
    p->maxSurface1DLayered[1] = A(MaxSurface1DLayeredLayers);
    p->maxSurface2DLayered[0] = A(MaxSurface2DLayeredWidth);
    p->maxSurface2DLayered[1] = A(MaxSurface2DLayeredHeight);
    p->maxSurface2DLayered[2] = A(MaxSurface2DLayeredLayers);
    p->maxSurfaceCubemap = A(MaxSurfaceCubemapWidth);
    p->maxSurfaceCubemapLayered[0] = A(MaxSurfaceCubemapLayeredWidth);
    p->maxSurfaceCubemapLayered[1] = A(MaxSurfaceCubemapLayeredLayers);
    p->surfaceAlignment = (size_t)A(SurfaceAlignment);
}

/* cudaGetDeviceProperties's features: concurrency, caches, managed and
 * host memory, pools, NUMA. */
static void vcu__props_features(struct cudaDeviceProp *p, int device)
{
    p->concurrentKernels = A(ConcurrentKernels);
    p->ECCEnabled = A(EccEnabled);
    p->pciBusID = A(PciBusId);
    p->pciDeviceID = A(PciDeviceId);
    p->pciDomainID = A(PciDomainId);
    p->tccDriver = A(TccDriver);
    p->asyncEngineCount = A(AsyncEngineCount);
    p->unifiedAddressing = A(UnifiedAddressing);
    p->memoryBusWidth = A(GlobalMemoryBusWidth);
    p->l2CacheSize = A(L2CacheSize);
    p->persistingL2CacheMaxSize = A(MaxPersistingL2CacheSize);
    p->maxThreadsPerMultiProcessor = A(MaxThreadsPerMultiProcessor);
    p->streamPrioritiesSupported = A(StreamPrioritiesSupported);
    p->globalL1CacheSupported = A(GlobalL1CacheSupported);
    p->localL1CacheSupported = A(LocalL1CacheSupported);
    p->sharedMemPerMultiprocessor = (size_t)A(MaxSharedMemoryPerMultiprocessor);
    p->regsPerMultiprocessor = A(MaxRegistersPerMultiprocessor);
    p->managedMemory = A(ManagedMemory);
    p->isMultiGpuBoard = A(IsMultiGpuBoard);
    p->multiGpuBoardGroupID = A(MultiGpuBoardGroupID);
    p->hostNativeAtomicSupported = A(HostNativeAtomicSupported);
    p->pageableMemoryAccess = 0;
    p->concurrentManagedAccess = 0;
    p->computePreemptionSupported = A(ComputePreemptionSupported);
    p->canUseHostPointerForRegisteredMem = 0;
    p->cooperativeLaunch = A(CooperativeLaunch);
    p->sharedMemPerBlockOptin = (size_t)A(MaxSharedMemoryPerBlockOptin);
    p->pageableMemoryAccessUsesHostPageTables = 0;
    p->directManagedMemAccessFromHost = 0;
    p->maxBlocksPerMultiProcessor = A(MaxBlocksPerMultiprocessor);
    p->accessPolicyMaxWindowSize = A(MaxAccessPolicyWindowSize);
    p->reservedSharedMemPerBlock = (size_t)A(ReservedSharedMemoryPerBlock);
    p->hostRegisterSupported = A(HostRegisterSupported);
    p->sparseCudaArraySupported = A(SparseCudaArraySupported);
    p->hostRegisterReadOnlySupported = A(HostRegisterReadOnlySupported);
    p->timelineSemaphoreInteropSupported = A(TimelineSemaphoreInteropSupported);
    p->memoryPoolsSupported = A(MemoryPoolsSupported);
    p->gpuDirectRDMASupported = A(GPUDirectRDMASupported);
    p->gpuDirectRDMAFlushWritesOptions = (unsigned int)A(GPUDirectRDMAFlushWritesOptions);
    p->gpuDirectRDMAWritesOrdering = A(GPUDirectRDMAWritesOrdering);
    p->memoryPoolSupportedHandleTypes = (unsigned int)A(MemoryPoolSupportedHandleTypes);
    p->deferredMappingCudaArraySupported = A(DeferredMappingCudaArraySupported);
    p->ipcEventSupported = A(IpcEventSupport);
    p->clusterLaunch = A(ClusterLaunch);
    p->unifiedFunctionPointers = vcu__dev_attr(device, 129); /* CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS */
    p->deviceNumaConfig = A(NumaConfig);
    p->deviceNumaId = A(NumaId);
    p->mpsEnabled = A(MpsEnabled);
    p->hostNumaId = A(HostNumaId);
    p->gpuPciDeviceID = (unsigned int)A(GpuPciDeviceId);
    p->gpuPciSubsystemID = (unsigned int)A(GpuPciSubsystemId);
    p->hostNumaMultinodeIpcSupported = A(HostNumaMultinodeIpcSupported);
}
#undef A

VCU__EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device)
{
    const struct vcu_cu_device_info_resp *info;
    cudaError_t e;

    if (p == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__init();
    if (e == cudaSuccess && (device < 0 || device >= vcu__rt.ndev))
        e = vcu__rt.ndev == 0 ? cudaErrorNoDevice : cudaErrorInvalidDevice;
    if (e == cudaSuccess)
        e = vcu__dev_info(device, &info);
    if (e != cudaSuccess)
        return vcu__err(e);
    memset(p, 0, sizeof(*p));
    memcpy(p->name, info->name, sizeof(p->name));
    p->name[sizeof(p->name) - 1] = '\0';
    memcpy(p->uuid.bytes, info->uuid, sizeof(p->uuid.bytes));
    p->totalGlobalMem = info->total_mem;
    vcu__props_compute(p, device);
    vcu__props_textures(p, device);
    vcu__props_features(p, device);
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaChooseDevice(int *device, const struct cudaDeviceProp *prop)
{
    cudaError_t e;

    if (device == NULL || prop == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__init();
    if (e == cudaSuccess && vcu__rt.ndev == 0)
        e = cudaErrorNoDevice;
    if (e != cudaSuccess)
        return vcu__err(e);
    *device = 0;
    for (int i = 0; i < vcu__rt.ndev; i++) {
        int maj = vcu__dev_attr(i, cudaDevAttrComputeCapabilityMajor);
        int min = vcu__dev_attr(i, cudaDevAttrComputeCapabilityMinor);

        if (maj > prop->major || (maj == prop->major && min >= prop->minor)) {
            *device = i;
            break;
        }
    }
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    struct vcu_cu_hdr h;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), NULL, 0, NULL, 0);
    if (e == cudaSuccess)
        e = vcu__managed_sync(dev, VCU_CU_STREAM_LEGACY, 1);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaDeviceReset(void)
{
    struct vcu_cu_hdr h;
    int dev = vcu__cur_dev;
    cudaError_t e = vcu__init();

    if (e == cudaSuccess && vcu__rt.ndev == 0)
        e = cudaErrorNoDevice;
    if (e != cudaSuccess)
        return vcu__err(e);
    e = vcu__call(dev, VCU_OP_CU_CTX_RESET, 0, &h, sizeof(h), NULL, 0, NULL, 0);
    if (e == cudaSuccess || vcu__is_sticky(e)) {
        pthread_mutex_lock(&vcu__rt.reg_lock);
        /* Every module and function of the device is gone with its context. */
        extern void vcu__kernels_forget_dev(int dev);
        vcu__kernels_forget_dev(dev);
        pthread_mutex_unlock(&vcu__rt.reg_lock);
        vcu__mem_forget_dev(dev);
        pthread_mutex_lock(&vcu__rt.dev_lock);
        vcu__rt.dev[dev].default_pool = NULL;
        pthread_mutex_unlock(&vcu__rt.dev_lock);
        __atomic_store_n(&vcu__rt.dev[dev].sticky, cudaSuccess, __ATOMIC_RELAXED);
        cudaGetLastError();
        return cudaSuccess;
    }
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    struct vcu_cu_u64_req r;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    if (e == cudaSuccess && (flags & ~(unsigned int)(cudaDeviceScheduleMask | cudaDeviceMapHost |
                                                      cudaDeviceLmemResizeToMax |
                                                      cudaDeviceSyncMemops)))
        e = cudaErrorInvalidValue;
    if (e != cudaSuccess)
        return vcu__err(e);
    r.value = flags & cudaDeviceScheduleMask;
    e = vcu__call(dev, VCU_OP_CU_CTX_SET_FLAGS, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e == cudaSuccess)
        vcu__rt.dev[dev].flags = flags;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    int dev;
    cudaError_t e;

    if (flags == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    *flags = vcu__rt.dev[dev].flags | cudaDeviceMapHost;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
    struct vcu_cu_limit_req r = { .limit = (uint32_t)limit, .value = value };
    int dev;
    cudaError_t e = vcu__enter(&dev);

    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CTX_SET_LIMIT, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e == cudaErrorNotSupported || e == cudaErrorUnsupportedLimit)
        e = cudaErrorUnsupportedLimit;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
    struct vcu_call_cuCtxGetLimit_req r;
    struct vcu_call_cuCtxGetLimit_resp o;
    int dev;
    cudaError_t e;

    if (pValue == NULL)
        return vcu__err(cudaErrorInvalidValue);
    VCU_CALL_INIT(r, cuCtxGetLimit);
    r.limit = (uint32_t)limit;      /* cudaLimit values equal CUlimit's */
    e = vcu__enter(&dev);
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        *pValue = o.pvalue;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct vcu_call_cuCtxGetStreamPriorityRange_req r;
    struct vcu_call_cuCtxGetStreamPriorityRange_resp o;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    VCU_CALL_INIT(r, cuCtxGetStreamPriorityRange);
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return vcu__err(e);
    if (leastPriority != NULL)
        *leastPriority = (int)o.leastPriority;
    if (greatestPriority != NULL)
        *greatestPriority = (int)o.greatestPriority;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    struct vcu_call_cuDeviceCanAccessPeer_req r;
    struct vcu_call_cuDeviceCanAccessPeer_resp o;
    cudaError_t e;

    if (canAccessPeer == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__check_dev(device);
    if (e == cudaSuccess && (peerDevice < 0 || peerDevice >= vcu__rt.ndev))
        e = cudaErrorInvalidDevice;
    if (e != cudaSuccess)
        return vcu__err(e);
    if (peerDevice == device) {
        *canAccessPeer = 0;
        return cudaSuccess;
    }
    VCU_CALL_INIT(r, cuDeviceCanAccessPeer);
    r.dev = vcu__rt.dev[device].vord;
    r.peerDev = vcu__rt.dev[peerDevice].vord;
    e = vcu__call(device, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        *canAccessPeer = o.canAccessPeer != 0;
    return vcu__err(e);
}

/* Peer access from the current device to peerDevice: the host's
 * contexts of the two (CU_CTX_PEER_ACCESS, as cuCtxEnablePeerAccess
 * sends it).  A device is not its own peer. */
static cudaError_t vcu__peer_access(int peerDevice, unsigned int flags, int enable)
{
    struct vcu_cu_pair_req r;
    cudaError_t e = vcu__check_dev(vcu__cur_dev);

    if (e == cudaSuccess && (peerDevice < 0 || peerDevice >= vcu__rt.ndev))
        e = cudaErrorInvalidDevice;
    if (e == cudaSuccess && flags != 0)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess && peerDevice == vcu__cur_dev)
        e = enable ? cudaErrorInvalidDevice : cudaErrorPeerAccessNotEnabled;
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.a = vcu__rt.dev[peerDevice].vord;
    r.c = enable ? 1 : 0;
    return vcu__call(vcu__cur_dev, VCU_OP_CU_CTX_PEER_ACCESS, 0, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    return vcu__err(vcu__peer_access(peerDevice, flags, 1));
}

VCU__EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
    return vcu__err(vcu__peer_access(peerDevice, 0, 0));
}

VCU__EXPORT cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *pCacheConfig)
{
    if (pCacheConfig == NULL)
        return vcu__err(cudaErrorInvalidValue);
    *pCacheConfig = cudaFuncCachePreferNone;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig)
{
    (void)cacheConfig;      /* a hint; sm_70+ ignores it */
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaProfilerStart(void)
{
    struct vcu_call_cuProfilerStart_req r;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    VCU_CALL_INIT(r, cuProfilerStart);
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaProfilerStop(void)
{
    struct vcu_call_cuProfilerStop_req r;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    VCU_CALL_INIT(r, cuProfilerStop);
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                                unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *driverStatus)
{
    (void)symbol;
    (void)flags;
    if (funcPtr != NULL)
        *funcPtr = NULL;
    if (driverStatus != NULL)
        *driverStatus = cudaDriverEntryPointSymbolNotFound;
    VCU__NOT_SUPPORTED("cudaGetDriverEntryPoint", "the guest has no libcuda");
}

VCU__EXPORT cudaError_t cudaGetDriverEntryPointByVersion(
    const char *symbol, void **funcPtr, unsigned int cudaVersion, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *driverStatus)
{
    (void)symbol;
    (void)flags;
    (void)cudaVersion;
    if (funcPtr != NULL)
        *funcPtr = NULL;
    if (driverStatus != NULL)
        *driverStatus = cudaDriverEntryPointSymbolNotFound;
    VCU__NOT_SUPPORTED("cudaGetDriverEntryPointByVersion", "the guest has no libcuda");
}

VCU__EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
                                                     unsigned long long flags,
                                                     enum cudaDriverEntryPointQueryResult *st);
VCU__EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr,
                                                     unsigned long long flags,
                                                     enum cudaDriverEntryPointQueryResult *st)
{
    return cudaGetDriverEntryPoint(symbol, funcPtr, flags, st);
}

VCU__EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int v, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *st);
VCU__EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **funcPtr, unsigned int v, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *st)
{
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, v, flags, st);
}

/* ---- PCI ids, peers, valid devices and deprecated configuration --------- */

VCU__EXPORT cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    cudaError_t e;

    if (pciBusId == NULL || len <= 0)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__check_dev(device);
    if (e != cudaSuccess)
        return vcu__err(e);
    /* The virtual ids cudaGetDeviceProperties reports, in the driver's
     * "domain:bus:device.function" form. */
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", (unsigned int)vcu__rt.dev[device].pci_domain,
             (unsigned int)vcu__rt.dev[device].pci_bus,
             (unsigned int)vcu__rt.dev[device].pci_device);
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId)
{
    unsigned int dom = 0, bus, slot, fn = 0;
    cudaError_t e;

    if (device == NULL || pciBusId == NULL)
        return vcu__err(cudaErrorInvalidValue);
    /* domain:bus:device.function, domain:bus:device or bus:device.function */
    if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) != 4 &&
        sscanf(pciBusId, "%x:%x:%x", &dom, &bus, &slot) != 3) {
        dom = 0;
        if (sscanf(pciBusId, "%x:%x.%x", &bus, &slot, &fn) != 3)
            return vcu__err(cudaErrorInvalidValue);
    }
    e = vcu__init();
    if (e == cudaSuccess && vcu__rt.ndev == 0)
        e = cudaErrorNoDevice;
    if (e != cudaSuccess)
        return vcu__err(e);
    for (int i = 0; i < vcu__rt.ndev; i++) {
        const vcu__dev_t *d = &vcu__rt.dev[i];

        if ((unsigned int)d->pci_domain == dom && (unsigned int)d->pci_bus == bus &&
            (unsigned int)d->pci_device == slot && fn == 0) {
            *device = i;
            return cudaSuccess;
        }
    }
    return vcu__err(cudaErrorInvalidDevice);
}

VCU__EXPORT cudaError_t cudaDeviceGetP2PAttribute(int *value, enum cudaDeviceP2PAttr attr,
                                                  int srcDevice, int dstDevice)
{
    struct vcu_call_cuDeviceGetP2PAttribute_req r;
    struct vcu_call_cuDeviceGetP2PAttribute_resp o;
    cudaError_t e;

    if (value == NULL || attr < cudaDevP2PAttrPerformanceRank ||
        attr > cudaDevP2PAttrOnlyPartialNativeAtomicSupported)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__check_dev(srcDevice);
    if (e == cudaSuccess && (dstDevice < 0 || dstDevice >= vcu__rt.ndev))
        e = cudaErrorInvalidDevice;
    if (e == cudaSuccess && srcDevice == dstDevice)
        e = cudaErrorInvalidDevice;
    if (e != cudaSuccess)
        return vcu__err(e);
    /* The host's answer for its two devices (cudaDevP2PAttr* are
     * CU_DEVICE_P2P_ATTRIBUTE_*). */
    VCU_CALL_INIT(r, cuDeviceGetP2PAttribute);
    r.attrib = (uint64_t)attr;
    r.srcDevice = vcu__rt.dev[srcDevice].vord;
    r.dstDevice = vcu__rt.dev[dstDevice].vord;
    e = vcu__call(srcDevice, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        *value = (int)(int64_t)o.value;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaSetValidDevices(int *device_arr, int len)
{
    cudaError_t e;

    if (len < 0 || (len > 0 && device_arr == NULL))
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__init();
    if (e == cudaSuccess && vcu__rt.ndev == 0)
        e = cudaErrorNoDevice;
    for (int i = 0; e == cudaSuccess && i < len; i++)
        if (device_arr[i] < 0 || device_arr[i] >= vcu__rt.ndev)
            e = cudaErrorInvalidDevice;
    if (e != cudaSuccess)
        return vcu__err(e);
    /* NVIDIA's runtime tries the list in order when a context cannot be
     * made; here every device's context can be: the list only picks the
     * device a thread that never called cudaSetDevice runs on. */
    if (len > 0 && !vcu__dev_chosen)
        vcu__cur_dev = device_arr[0];
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig *pConfig)
{
    int dev;
    cudaError_t e;

    if (pConfig == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    /* Deprecated; banks are four bytes wide on every GPU since sm_70. */
    *pConfig = cudaSharedMemBankSizeFourByte;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config)
{
    int dev;
    cudaError_t e;

    if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    return e == cudaSuccess ? cudaSuccess : vcu__err(e);   /* a no-op, as on sm_90 */
}

VCU__EXPORT cudaError_t cudaCtxResetPersistingL2Cache(void)
{
    int dev;
    cudaError_t e = vcu__enter(&dev);

    /* Access policy windows are not offered: nothing persists in L2. */
    return e == cudaSuccess ? cudaSuccess : vcu__err(e);
}

VCU__EXPORT struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                              enum cudaChannelFormatKind f)
{
    struct cudaChannelFormatDesc d = { .x = x, .y = y, .z = z, .w = w, .f = f };

    return d;
}

/* Returns 0 as NVIDIA's does: a pointer or a status, the caller's choice. */
VCU__EXPORT void *__cudaGetProcAddress(void);
VCU__EXPORT void *__cudaGetProcAddress(void)
{
    static int once;

    vcu__log_once(&once, "virtio-cuda: __cudaGetProcAddress is not supported: the guest has no "
                         "libcuda\n");
    vcu__err(cudaErrorNotSupported);
    return NULL;
}
