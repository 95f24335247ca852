/*
 * Managed memory (cudaMallocManaged), emulated by shadowing: the shared
 * layer (vcu_managed.c) says how.  Here: the runtime's calls to the host
 * for it (vcu__m_ops), its allocation table, and the runtime's entry
 * points.  We report cudaDevAttrConcurrentManagedAccess = 0.
 */
#include <string.h>

#include "cudart_int.h"
#include "vcu_managed.h"
#include "vcu_transport_int.h"

static int vcu__m_call(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                       unsigned int nbufs, void *resp, uint32_t resp_cap)
{
    return (int)vcu__call(dev, op, 0, req, req_len, bufs, nbufs, resp, resp_cap);
}

static int vcu__m_loopback(void)
{
    return vcu__rt.conn->loop != NULL;
}

static uint64_t vcu__m_max_xfer(void)
{
    return vcu__rt.max_xfer ? vcu__rt.max_xfer : VCU_MAX_XFER;
}

/* Pointer kinds (cudaPointerGetAttributes, copies) come from the table. */
static int vcu__m_track(int dev, uint64_t base, uint64_t size, unsigned int flags)
{
    vcu__alloc_t a;

    memset(&a, 0, sizeof(a));
    a.base = base;
    a.size = size;
    a.dev = dev;
    a.kind = VCU__M_MANAGED;
    a.flags = flags;
    return vcu__mem_add(&a) != 0 ? -1 : 0;
}

const vcu__m_ops_t vcu__m_ops = {
    .call = vcu__m_call,
    .loopback = vcu__m_loopback,
    .max_xfer = vcu__m_max_xfer,
    .track = vcu__m_track,
    .oom = cudaErrorMemoryAllocation,
    .unknown = cudaErrorUnknown,
    .name = "virtio-cuda: cudaMallocManaged",
};

/* ---- hooks -------------------------------------------------------------- */

cudaError_t vcu__managed_use(int dev, uint64_t ws)
{
    return (cudaError_t)vcu__m_use(dev, ws, 0, 0);
}

cudaError_t vcu__managed_touch(int dev, uint64_t ws, const void *a, const void *b)
{
    vcu__alloc_t x;
    int ma, mb;

    if (!vcu__m_any())
        return cudaSuccess;
    ma = vcu__mem_find((uint64_t)(uintptr_t)a, &x) == 0 && x.kind == VCU__M_MANAGED;
    mb = b != NULL && vcu__mem_find((uint64_t)(uintptr_t)b, &x) == 0 && x.kind == VCU__M_MANAGED;
    if (ma || mb)
        return (cudaError_t)vcu__m_use(dev, ws, ma ? (uint64_t)(uintptr_t)a : 0,
                                       mb ? (uint64_t)(uintptr_t)b : 0);
    return cudaSuccess;
}

cudaError_t vcu__managed_sync(int dev, uint64_t ws, int full)
{
    return (cudaError_t)vcu__m_sync(dev, ws, full);
}

void vcu__managed_kind(const void *dst, const void *src, enum cudaMemcpyKind *kind)
{
    vcu__alloc_t x;
    int dd, sd;

    if (!vcu__m_any())
        return;
    dd = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
    sd = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
    /* Managed memory is device memory to copies: its device side is the
     * one that is current at a stream-ordered point. */
    if (vcu__mem_find((uint64_t)(uintptr_t)dst, &x) == 0 && x.kind == VCU__M_MANAGED)
        dd = 1;
    if (vcu__mem_find((uint64_t)(uintptr_t)src, &x) == 0 && x.kind == VCU__M_MANAGED)
        sd = 1;
    *kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
               : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

/* ---- allocation --------------------------------------------------------- */

VCU__EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    int dev;
    cudaError_t e;

    if (devPtr == NULL || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return vcu__err(cudaErrorInvalidValue);
    /* As NVIDIA's runtime answers by itself, without the driver. */
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    *devPtr = NULL;
    return vcu__err((cudaError_t)vcu__m_alloc(dev, size, flags, devPtr));
}

cudaError_t vcu__managed_free(void *p)
{
    uint64_t b = (uint64_t)(uintptr_t)p, dptr;
    int dev;
    cudaError_t e;

    if (vcu__mem_del(b, VCU__M_MANAGED, NULL) != 0 || vcu__m_release(b, &dev, &dptr) != 0)
        return cudaErrorInvalidValue;
    e = vcu__check_dev(dev);
    if (e == cudaSuccess) {
        struct vcu_cu_u64_req f = { .value = dptr };

        e = vcu__call(dev, VCU_OP_CU_MEM_FREE, 0, &f, sizeof(f), NULL, 0, NULL, 0);
    }
    return e;
}

void vcu__managed_forget_dev(int dev)
{
    vcu__m_forget_dev(dev);
}

/* ---- prefetch, advice, attachment ---------------------------------------- */

/* [p, p + count) inside one managed allocation (count 0: p inside one). */
static cudaError_t vcu__m_range(const void *p, size_t count, vcu__alloc_t *a)
{
    uint64_t b = (uint64_t)(uintptr_t)p;

    if (p == NULL || vcu__mem_find(b, a) != 0 || a->kind != VCU__M_MANAGED ||
        count > a->size - (b - a->base))
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

static cudaError_t vcu__m_prefetch(const void *p, size_t count, struct cudaMemLocation loc,
                                   unsigned int flags, cudaStream_t stream, int ptsz)
{
    vcu__alloc_t a;
    uint64_t ws;
    int dev;
    cudaError_t e;

    (void)flags;
    e = vcu__stream(stream, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess && count != 0)
        e = vcu__m_range(p, count, &a);
    if (e != cudaSuccess || count == 0)
        return e;
    switch (loc.type) {
    case cudaMemLocationTypeDevice:
        e = vcu__check_dev(loc.id);
        if (e != cudaSuccess)
            return e;
        /* To the device: the host's writes go now. */
        return (cudaError_t)vcu__m_flush_one(a.base);
    case cudaMemLocationTypeHost:
    case cudaMemLocationTypeHostNuma:
    case cudaMemLocationTypeHostNumaCurrent:
        /* To the host: the wait that lets the host look copies it back. */
        return cudaSuccess;
    default:
        return cudaErrorInvalidValue;
    }
}

VCU__EXPORT cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count,
                                             struct cudaMemLocation location, unsigned int flags,
                                             cudaStream_t stream)
{
    return vcu__err(vcu__m_prefetch(devPtr, count, location, flags, stream, 0));
}

VCU__EXPORT cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                  struct cudaMemLocation location,
                                                  unsigned int flags, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                  struct cudaMemLocation location,
                                                  unsigned int flags, cudaStream_t stream)
{
    return vcu__err(vcu__m_prefetch(devPtr, count, location, flags, stream, 1));
}

/* Hints: accepted on managed ranges, where they change nothing here. */
VCU__EXPORT cudaError_t cudaMemAdvise(const void *devPtr, size_t count,
                                      enum cudaMemoryAdvise advice, struct cudaMemLocation location)
{
    vcu__alloc_t a;
    int dev;
    cudaError_t e;

    (void)location;
    if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e == cudaSuccess)
        e = vcu__m_range(devPtr, count, &a);
    return e == cudaSuccess ? e : vcu__err(e);
}

static cudaError_t vcu__m_attach(cudaStream_t stream, void *p, size_t length,
                                 unsigned int flags, int ptsz)
{
    vcu__alloc_t a;
    uint64_t ws;
    int dev;
    cudaError_t e;

    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost &&
        flags != cudaMemAttachSingle)
        return cudaErrorInvalidValue;
    e = vcu__stream(stream, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__m_range(p, length, &a);
    /* The whole allocation or nothing, as CUDA requires. */
    if (e == cudaSuccess && length != 0 && ((uint64_t)(uintptr_t)p != a.base || length != a.size))
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = (cudaError_t)vcu__m_attach_to(a.base, ws, flags);
    return e;
}

VCU__EXPORT cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr,
                                                 size_t length, unsigned int flags)
{
    return vcu__err(vcu__m_attach(stream, devPtr, length, flags, 0));
}

VCU__EXPORT cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr,
                                                      size_t length, unsigned int flags);
VCU__EXPORT cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr,
                                                      size_t length, unsigned int flags)
{
    return vcu__err(vcu__m_attach(stream, devPtr, length, flags, 1));
}
