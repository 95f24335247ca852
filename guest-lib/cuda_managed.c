/*
 * libcuda.so.1: managed memory (cuMemAllocManaged), emulated by shadowing
 * as our runtime's cudaMallocManaged: the shared layer (vcu_managed.c)
 * does it; here are this library's calls to the host for it
 * (vcu__m_ops), the entry points, and the hooks vcu__call runs around
 * every call to the host: before device work that may touch managed
 * memory (launches, graph launches, copies and memsets of a managed
 * range) and after each wait (context, stream and event synchronize,
 * synchronous copies, queries answering success).
 *
 * CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 1, CONCURRENT_MANAGED_ACCESS 0:
 * a host access between device work and the wait for it waits for the
 * device (vcu_managed.c).  Prefetches to the device send the host's writes
 * at once; prefetches to the host and advice are checked and change
 * nothing else (the next wait brings the device's writes back); stream
 * attachment decides which work uses the memory (vcu__m_attach_to).
 */
#include <string.h>

#include "cuda_int.h"
#include "vcu_managed.h"
#include "vcu_transport_int.h"

/* Declared nowhere in cuda.h, exported by NVIDIA's driver. */
VCU__EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                CUmemLocation location, unsigned int flags,
                                                CUstream hStream);

static int vcu__m_call(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                       unsigned int nbufs, void *resp, uint32_t resp_cap)
{
    return (int)vcu__call_raw(dev, op, req, req_len, bufs, nbufs, resp, resp_cap);
}

static int vcu__m_loopback(void)
{
    return vcu__drv.conn->loop != NULL;
}

static uint64_t vcu__m_max_xfer(void)
{
    return vcu__drv.max_xfer ? vcu__drv.max_xfer : VCU_MAX_XFER;
}

const vcu__m_ops_t vcu__m_ops = {
    .call = vcu__m_call,
    .loopback = vcu__m_loopback,
    .max_xfer = vcu__m_max_xfer,
    .track = NULL,
    .oom = CUDA_ERROR_OUT_OF_MEMORY,
    .unknown = CUDA_ERROR_UNKNOWN,
    .name = "libcuda (virtio-cuda): cuMemAllocManaged",
};

/* ---- hooks around calls to the host --------------------------------------- */

/* Device work on ws if a or b (0: none) is managed memory. */
static CUresult vcu__m_touch(int dev, uint64_t ws, uint64_t a, uint64_t b)
{
    uint64_t base, size;
    int d, ma = a != 0 && vcu__m_find(a, &base, &size, &d);
    int mb = b != 0 && vcu__m_find(b, &base, &size, &d);

    if (ma || mb)
        return (CUresult)vcu__m_use(dev, ws, ma ? a : 0, mb ? b : 0);
    return CUDA_SUCCESS;
}

CUresult vcu__managed_before(int dev, uint32_t op, const void *req)
{
    struct vcu_cu_launch_req l;
    struct vcu_cu_pair_req g;
    struct vcu_cu_memcpy_req m;
    struct vcu_cu_memset_req s;
    struct vcu_cu_memcpy2d_req m2;

    if (!vcu__m_any())
        return CUDA_SUCCESS;
    switch (op) {
    case VCU_OP_CU_LAUNCH:
    case VCU_OP_CU_LAUNCH_EX:           /* starts with CU_LAUNCH's struct */
        memcpy(&l, req, sizeof(l));
        return (CUresult)vcu__m_use(dev, l.stream, 0, 0);
    case VCU_OP_CU_GRAPH_LAUNCH:
        memcpy(&g, req, sizeof(g));
        return (CUresult)vcu__m_use(dev, g.b, 0, 0);
    case VCU_OP_CU_MEMCPY_HTOD:
    case VCU_OP_CU_MEMCPY_DTOH:
    case VCU_OP_CU_MEMCPY_DTOD:
    case VCU_OP_CU_MEMCPY_PEER:         /* starts with CU_MEMCPY_DTOD's struct */
        memcpy(&m, req, sizeof(m));
        return vcu__m_touch(dev, m.stream, op == VCU_OP_CU_MEMCPY_DTOH ? 0 : m.dst,
                            op == VCU_OP_CU_MEMCPY_HTOD ? 0 : m.src);
    case VCU_OP_CU_MEMSET:
        memcpy(&s, req, sizeof(s));
        return vcu__m_touch(dev, s.stream, s.dst, 0);
    case VCU_OP_CU_MEMCPY_2D:
        memcpy(&m2, req, sizeof(m2));
        return vcu__m_touch(dev, m2.stream, m2.dst, m2.src);
    }
    return CUDA_SUCCESS;
}

CUresult vcu__managed_after(int dev, uint32_t op, const void *req)
{
    struct vcu_call_cuStreamQuery_req sq;
    struct vcu_cu_u64_req u;
    struct vcu_cu_memcpy_req m;
    struct vcu_cu_memcpy2d_req m2;

    if (!vcu__m_any())
        return CUDA_SUCCESS;
    switch (op) {
    case VCU_OP_CU_CTX_SYNCHRONIZE:
        return (CUresult)vcu__m_sync(dev, VCU_CU_STREAM_LEGACY, 1);
    case VCU_OP_CU_CTX_RESET:
        vcu__m_forget_dev(dev);
        return CUDA_SUCCESS;
    case VCU_OP_CU_STREAM_SYNCHRONIZE:
        memcpy(&u, req, sizeof(u));
        return (CUresult)vcu__m_sync(dev, u.value, 0);
    case VCU_OP_CU_EVENT_SYNCHRONIZE:
        /* The event's stream is not known here: no stream matches. */
        return (CUresult)vcu__m_sync(dev, UINT64_MAX, 0);
    case VCU_OP_CU_CALL:
        /* The queries are generated calls; a query answering success
         * waited as a synchronize does. */
        switch (((const struct vcu_cu_call_req *)req)->call) {
        case VCU_CALL_cuStreamQuery:
            memcpy(&sq, req, sizeof(sq));
            return (CUresult)vcu__m_sync(dev, sq.hStream, 0);
        case VCU_CALL_cuEventQuery:
            return (CUresult)vcu__m_sync(dev, UINT64_MAX, 0);
        }
        return CUDA_SUCCESS;
    case VCU_OP_CU_MEMCPY_HTOD:
    case VCU_OP_CU_MEMCPY_DTOH:
    case VCU_OP_CU_MEMCPY_DTOD:
    case VCU_OP_CU_MEMCPY_PEER:
        memcpy(&m, req, sizeof(m));
        if (m.flags & VCU_CU_MEMCPY_F_ASYNC)
            return CUDA_SUCCESS;
        return (CUresult)vcu__m_sync(dev, m.stream, 0);
    case VCU_OP_CU_MEMCPY_2D:
        memcpy(&m2, req, sizeof(m2));
        if (m2.flags & VCU_CU_MEMCPY_F_ASYNC)
            return CUDA_SUCCESS;
        return (CUresult)vcu__m_sync(dev, m2.stream, 0);
    }
    return CUDA_SUCCESS;
}

/* ---- allocation ------------------------------------------------------------ */

VCU__EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    vcu__ctx_t *c;
    void *p = NULL;
    CUresult e;

    if (dptr == NULL || bytesize == 0 ||
        (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    e = (CUresult)vcu__m_alloc(c->dev, bytesize, flags, &p);
    if (e == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return e;
}

int vcu__managed_free(CUdeviceptr p, CUresult *res)
{
    uint64_t dptr;
    int dev;

    if (vcu__m_release(p, &dev, &dptr) != 0)
        return 0;
    {
        struct vcu_cu_u64_req f = { .value = dptr };

        *res = vcu__call(dev, VCU_OP_CU_MEM_FREE, &f, sizeof(f), NULL, 0, NULL, 0);
    }
    return 1;
}

int vcu__managed_find(CUdeviceptr p, uint64_t *base, uint64_t *size, int *dev)
{
    return vcu__m_find(p, base, size, dev);
}

/* ---- prefetch, advice, attachment ------------------------------------------ */

/* [p, p + count) inside one managed allocation (count 0: p inside one),
 * and the allocation's start. */
static CUresult vcu__m_range(CUdeviceptr p, size_t count, uint64_t *base)
{
    uint64_t size;
    int dev;

    if (p == 0 || !vcu__m_find(p, base, &size, &dev) || count > size - (p - *base))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* A location of a prefetch or advice: a device of this library or the
 * host. */
static CUresult vcu__m_location(CUmemLocation loc, int *to_dev)
{
    switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        *to_dev = 1;
        return vcu__check_dev(loc.id);
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        *to_dev = 0;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult vcu__m_prefetch(CUdeviceptr p, size_t count, CUmemLocation loc,
                                unsigned int flags, CUstream stream, int ptsz)
{
    vcu__ctx_t *c;
    uint64_t ws, base;
    int to_dev;
    CUresult e;

    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, stream, ptsz, &ws);
    if (e == CUDA_SUCCESS)
        e = vcu__m_location(loc, &to_dev);
    if (e == CUDA_SUCCESS)
        e = vcu__m_range(p, count, &base);
    if (e != CUDA_SUCCESS || count == 0)
        return e;
    /* To the device: the host's writes go now.  To the host: the wait
     * that lets the host look copies the device's writes back. */
    return to_dev ? (CUresult)vcu__m_flush_one(base) : CUDA_SUCCESS;
}

/* The CUDA 8 form: a device, or CU_DEVICE_CPU for the host. */
static CUmemLocation vcu__m_dev_location(CUdevice d)
{
    CUmemLocation loc;

    memset(&loc, 0, sizeof(loc));
    loc.type = d == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = d == CU_DEVICE_CPU ? 0 : d;
    return loc;
}

VCU__EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                        CUstream hStream)
{
    return vcu__m_prefetch(devPtr, count, vcu__m_dev_location(dstDevice), 0, hStream, 0);
}

VCU__EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count,
                                             CUdevice dstDevice, CUstream hStream)
{
    return vcu__m_prefetch(devPtr, count, vcu__m_dev_location(dstDevice), 0, hStream, 1);
}

VCU__EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count,
                                           CUmemLocation location, unsigned int flags,
                                           CUstream hStream)
{
    return vcu__m_prefetch(devPtr, count, location, flags, hStream, 0);
}

VCU__EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                CUmemLocation location, unsigned int flags,
                                                CUstream hStream)
{
    return vcu__m_prefetch(devPtr, count, location, flags, hStream, 1);
}

/* Hints: checked, and accepted on managed ranges, where they change
 * nothing here. */
static CUresult vcu__m_advise(CUdeviceptr p, size_t count, CUmem_advise advice,
                              CUmemLocation loc)
{
    vcu__ctx_t *c;
    uint64_t base;
    int to_dev;
    CUresult e;

    if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    /* The location matters only where the advice names one. */
    if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY && advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY) {
        e = vcu__m_location(loc, &to_dev);
        if (e != CUDA_SUCCESS)
            return e;
    }
    return vcu__m_range(p, count, &base);
}

VCU__EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                 CUdevice device)
{
    return vcu__m_advise(devPtr, count, advice, vcu__m_dev_location(device));
}

VCU__EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                    CUmemLocation location)
{
    return vcu__m_advise(devPtr, count, advice, location);
}

static CUresult vcu__m_attach(CUstream stream, CUdeviceptr p, size_t length, unsigned int flags,
                              int ptsz)
{
    vcu__ctx_t *c;
    uint64_t ws, base, size;
    int dev;
    CUresult e;

    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
        flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, stream, ptsz, &ws);
    if (e == CUDA_SUCCESS)
        e = vcu__m_range(p, length, &base);
    if (e != CUDA_SUCCESS)
        return e;
    /* The whole allocation or nothing, as cuda.h requires. */
    if (length != 0 && (p != base || !vcu__m_find(p, &base, &size, &dev) || length != size))
        return CUDA_ERROR_INVALID_VALUE;
    return (CUresult)vcu__m_attach_to(base, ws, flags);
}

VCU__EXPORT CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length,
                                            unsigned int flags)
{
    return vcu__m_attach(hStream, dptr, length, flags, 0);
}

VCU__EXPORT CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr,
                                                 size_t length, unsigned int flags)
{
    return vcu__m_attach(hStream, dptr, length, flags, 1);
}
