/*
 * libcuda.so.1: device memory over the wire protocol: allocation, copies
 * (in pieces of the session's transfer limit, pageable host memory
 * pipelined) and memset.  Pitched memory and 2D copies: cuda_copy2d.c.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* ---- memory ------------------------------------------------------------ */

VCU__EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct vcu_cu_mem_alloc_req r = { .size = bytesize };
    struct vcu_cu_u64_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (dptr == NULL || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    /* Made in the context: a created one's goes with it (cuCtxDestroy). */
    r.hdr.ctx = c->number;
    e = vcu__call(c->dev, VCU_OP_CU_MEM_ALLOC, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *dptr = (CUdeviceptr)o.value;
    vcu__dr_add(c->dev, o.value, bytesize);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    struct vcu_cu_u64_req r = { .value = dptr };
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (dptr == 0)
        return CUDA_SUCCESS;
    if (vcu__managed_free(dptr, &e))
        return e;
    vcu__dr_del(dptr);
    return vcu__call(c->dev, VCU_OP_CU_MEM_FREE, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct vcu_cu_hdr h;
    struct vcu_cu_mem_info_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (free_bytes == NULL || total == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__call(c->dev, VCU_OP_CU_MEM_GET_INFO, &h, sizeof(h), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *free_bytes = (size_t)o.free;
    *total = (size_t)o.total;
    return CUDA_SUCCESS;
}

/* Pieces of a pipelined pageable copy, and how many go between waits
 * (as our runtime's, cudart_copy.c). */
#define VCU__COPY_CHUNK (32ull << 20)
#define VCU__COPY_WINDOW 4

/*
 * A copy's sides as the host takes them.  Managed memory named as the host
 * side is device memory to copies, as to our runtime's: its device side is
 * the one that is current at a stream-ordered point (and a shadow is
 * read-only between waits).  A device side that is this library's
 * page-locked memory named by its host pointer, as unified addressing
 * allows (XLA copies so between its buffers): where the host mapped it.
 */
static CUresult vcu__copy_sides(uint32_t *op, uint64_t *dst, uint64_t *src, void **host, size_t n)
{
    uint64_t mbase, msize;
    int mdev;
    CUresult e;

    if (*op != VCU_OP_CU_MEMCPY_DTOD && n > 0 &&
        vcu__managed_find((CUdeviceptr)(uintptr_t)*host, &mbase, &msize, &mdev)) {
        if (*op == VCU_OP_CU_MEMCPY_HTOD)
            *src = (uint64_t)(uintptr_t)*host;
        else
            *dst = (uint64_t)(uintptr_t)*host;
        *op = VCU_OP_CU_MEMCPY_DTOD;
        *host = NULL;
    }
    if (n > 0 && *op != VCU_OP_CU_MEMCPY_DTOH && (e = vcu__host_as_dev(dst, n)) != CUDA_SUCCESS)
        return e;
    if (n > 0 && *op != VCU_OP_CU_MEMCPY_HTOD && (e = vcu__host_as_dev(src, n)) != CUDA_SUCCESS)
        return e;
    return CUDA_SUCCESS;
}

/*
 * The copy's requests, on stream wire when async.  A stream-ordered copy
 * goes without waiting only where nothing is left to fail at the call
 * (known device ranges) and the host memory stays put after it (this
 * library's page-locked memory); from pageable memory it is synchronous,
 * as in CUDA.  A large copy from or to pageable memory goes in pieces, as
 * our runtime sends it, of which only every VCU__COPY_WINDOW-th and the
 * last wait: the guest pins the next piece while the host copies the
 * last, and at most a window of them is pinned at once.  Only where the
 * device range is known good, so that no piece after the first can fail
 * at the call.
 */
static CUresult vcu__copy_send(vcu__ctx_t *c, uint32_t op, uint64_t dst, uint64_t src, void *host,
                               size_t n, int async, uint64_t wire)
{
    uint64_t dev_side = op == VCU_OP_CU_MEMCPY_HTOD ? dst : src;
    struct vcu_cu_memcpy_req r;
    int nowait, pipeline;
    vcu_buf_t b;
    CUresult e;

    nowait = async && (op == VCU_OP_CU_MEMCPY_DTOD
                           ? vcu__dr_known(c->dev, dst, n) && vcu__dr_known(c->dev, src, n)
                           : vcu__dr_known(c->dev, dev_side, n) && vcu__hm_stable(host, n));
    pipeline = !nowait && op != VCU_OP_CU_MEMCPY_DTOD && vcu__drv.async &&
               n > VCU__COPY_CHUNK && vcu__dr_known(c->dev, dev_side, n);
    for (size_t off = 0, i = 0; off < n; i++) {
        size_t chunk = n - off;

        if (op != VCU_OP_CU_MEMCPY_DTOD && chunk > vcu__drv.max_xfer)
            chunk = (size_t)vcu__drv.max_xfer;
        if (pipeline && chunk > VCU__COPY_CHUNK)
            chunk = VCU__COPY_CHUNK;
        memset(&r, 0, sizeof(r));
        r.dst = op == VCU_OP_CU_MEMCPY_DTOH ? 0 : dst + off;
        r.src = op == VCU_OP_CU_MEMCPY_HTOD ? 0 : src + off;
        r.size = chunk;
        r.stream = wire;
        r.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
        b.addr = (char *)host + off;
        b.len = chunk;
        b.flags = op == VCU_OP_CU_MEMCPY_HTOD ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE;
        if (nowait || (pipeline && off + chunk < n && (i + 1) % VCU__COPY_WINDOW != 0))
            e = vcu__call_async(c->dev, op, &r, sizeof(r), &b,
                                op == VCU_OP_CU_MEMCPY_DTOD ? 0 : 1);
        else
            e = vcu__call(c->dev, op, &r, sizeof(r), &b, op == VCU_OP_CU_MEMCPY_DTOD ? 0 : 1,
                          NULL, 0);
        if (e != CUDA_SUCCESS)
            return e;
        off += chunk;
    }
    return CUDA_SUCCESS;
}

/*
 * One copy kind (VCU_OP_CU_MEMCPY_*), in pieces of at most the session's
 * transfer limit.  stream: NULL for a synchronous copy, else the
 * program's stream (ptsz: NULL names the per-thread one).
 */
CUresult vcu__copy(uint32_t op, uint64_t dst, uint64_t src, void *host, size_t n, int async,
                   CUstream stream, int ptsz)
{
    uint64_t wire = 0;
    vcu__ctx_t *c;
    CUresult e;

    if (op != VCU_OP_CU_MEMCPY_DTOD && host == NULL && n > 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__copy_sides(&op, &dst, &src, &host, n);
    if (e == CUDA_SUCCESS)
        e = vcu__cur(&c);
    if (e == CUDA_SUCCESS && async)
        e = vcu__stream_ctx(&c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    /* In a stream capture, a node of the capture's graph. */
    if (async && op != VCU_OP_CU_MEMCPY_DTOD && n > 0) {
        int done;

        e = vcu__capture_copy(c, wire, op, op == VCU_OP_CU_MEMCPY_HTOD ? dst : src, host, n,
                              &done);
        if (done)
            return e;
    }
    return vcu__copy_send(c, op, dst, src, host, n, async, wire);
}

VCU__EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_HTOD, dstDevice, 0, (void *)srcHost, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_DTOH, 0, srcDevice, dstHost, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                     size_t ByteCount)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_DTOD, dstDevice, srcDevice, NULL, ByteCount, 0, NULL, 0);
}

/* The per-thread default stream variants of the synchronous copies: a
 * synchronous copy here waits for the legacy stream, which orders it
 * after the per-thread stream's work too. */
VCU__EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                          size_t ByteCount)
{
    return cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

VCU__EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

VCU__EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount)
{
    return cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

VCU__EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost,
                                          size_t ByteCount, CUstream hStream)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_HTOD, dstDevice, 0, (void *)srcHost, ByteCount, 1, hStream,
                     0);
}

VCU__EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                               size_t ByteCount, CUstream hStream)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_HTOD, dstDevice, 0, (void *)srcHost, ByteCount, 1, hStream,
                     1);
}

VCU__EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_DTOH, 0, srcDevice, dstHost, ByteCount, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice,
                                               size_t ByteCount, CUstream hStream)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_DTOH, 0, srcDevice, dstHost, ByteCount, 1, hStream, 1);
}

VCU__EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_DTOD, dstDevice, srcDevice, NULL, ByteCount, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                               size_t ByteCount, CUstream hStream)
{
    return vcu__copy(VCU_OP_CU_MEMCPY_DTOD, dstDevice, srcDevice, NULL, ByteCount, 1, hStream, 1);
}

/*
 * cuMemcpyPeer[Async]: between contexts of the current context's device
 * (on a stream of it), a device-to-device copy (vcu__copy); else
 * CU_MEMCPY_PEER on the stream's device (the current context's for the
 * synchronous copy), which the host copies between its contexts of the
 * two devices.
 */
static CUresult vcu__copy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                               size_t n, int async, CUstream stream, int ptsz)
{
    struct vcu_cu_memcpy_peer_req r;
    vcu__ctx_t *c, *dc = (vcu__ctx_t *)dctx, *sc = (vcu__ctx_t *)sctx;
    uint64_t wire = VCU_CU_STREAM_LEGACY;
    int dev;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (dc == NULL || sc == NULL || !vcu__reg_has(dc, VCU__K_CTX) ||
        !vcu__reg_has(sc, VCU__K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    dev = c->dev;
    if (async) {
        e = vcu__stream_alone(stream, ptsz, &dev, &wire);
        if (e != CUDA_SUCCESS)
            return e;
    }
    if (n == 0)
        return CUDA_SUCCESS;
    if (dc->dev == c->dev && sc->dev == c->dev && dev == c->dev)
        return vcu__copy(VCU_OP_CU_MEMCPY_DTOD, dst, src, NULL, n, async, stream, ptsz);
    memset(&r, 0, sizeof(r));
    r.c.dst = dst;
    r.c.src = src;
    r.c.size = n;
    r.c.stream = wire;
    r.c.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
    r.dst_device = vcu__drv.dev[dc->dev].vord;
    r.src_device = vcu__drv.dev[sc->dev].vord;
    return vcu__call(dev, VCU_OP_CU_MEMCPY_PEER, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
                                  CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)
{
    return vcu__copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 0, NULL, 0);
}

/* Synchronous: ordered after the per-thread stream's work too (see
 * cuMemcpyHtoD_v2_ptds). */
VCU__EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                       CUdeviceptr srcDevice, CUcontext srcContext,
                                       size_t ByteCount)
{
    return vcu__copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                       CUdeviceptr srcDevice, CUcontext srcContext,
                                       size_t ByteCount, CUstream hStream)
{
    return vcu__copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 1, hStream,
                          0);
}

VCU__EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                            CUdeviceptr srcDevice, CUcontext srcContext,
                                            size_t ByteCount, CUstream hStream)
{
    return vcu__copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 1, hStream,
                          1);
}

static CUresult vcu__memset(CUdeviceptr dst, uint32_t value, uint32_t elem, size_t n,
                            int async, CUstream stream, int ptsz)
{
    struct vcu_cu_memset_req r;
    uint64_t wire = 0;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS && async)
        e = vcu__stream_ctx(&c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    if (n == 0)
        return CUDA_SUCCESS;
    if (dst % elem != 0 || n > UINT64_MAX / elem)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.dst = dst;
    e = vcu__host_as_dev(&r.dst, (uint64_t)n * elem);
    if (e != CUDA_SUCCESS)
        return e;
    r.width = n;
    r.height = 1;
    r.stream = wire;
    r.value = value;
    r.elem_size = elem;
    r.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
    /* As a copy: without waiting where nothing is left to fail at the call. */
    if (async && vcu__dr_known(c->dev, dst, (uint64_t)n * elem))
        return vcu__call_async(c->dev, VCU_OP_CU_MEMSET, &r, sizeof(r), NULL, 0);
    return vcu__call(c->dev, VCU_OP_CU_MEMSET, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return vcu__memset(dstDevice, uc, 1, N, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return vcu__memset(dstDevice, uc, 1, N, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return vcu__memset(dstDevice, us, 2, N, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return vcu__memset(dstDevice, us, 2, N, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return vcu__memset(dstDevice, ui, 4, N, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return vcu__memset(dstDevice, ui, 4, N, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                     CUstream hStream)
{
    return vcu__memset(dstDevice, uc, 1, N, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                          CUstream hStream)
{
    return vcu__memset(dstDevice, uc, 1, N, 1, hStream, 1);
}

VCU__EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                      CUstream hStream)
{
    return vcu__memset(dstDevice, us, 2, N, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                           CUstream hStream)
{
    return vcu__memset(dstDevice, us, 2, N, 1, hStream, 1);
}

VCU__EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream)
{
    return vcu__memset(dstDevice, ui, 4, N, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                           CUstream hStream)
{
    return vcu__memset(dstDevice, ui, 4, N, 1, hStream, 1);
}
