/*
 * Copies (1D, 2D, 3D, to and from symbols, between devices) and memsets,
 * over the wire protocol; device and host pointers told apart by the
 * allocation table of cudart_mem.c.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cudart_int.h"
#include "vcu_transport_int.h"
#include "vcuda_ioctl.h"

/* ---- copies ------------------------------------------------------------- */

/* Resolves cudaMemcpyDefault and checks the kind. */
static cudaError_t vcu__kind(const void *dst, const void *src, enum cudaMemcpyKind *kind)
{
    int dd, sd;

    switch (*kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyHostToDevice:
    case cudaMemcpyDeviceToHost:
    case cudaMemcpyDeviceToDevice:
        vcu__managed_kind(dst, src, kind);
        return cudaSuccess;
    case cudaMemcpyDefault:
        dd = vcu__is_dev_ptr(dst, NULL);
        sd = vcu__is_dev_ptr(src, NULL);
        *kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                   : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
        return cudaSuccess;
    default:
        return cudaErrorInvalidMemcpyDirection;
    }
}

/* Waits for this thread's per-thread default stream on dev. */
static cudaError_t vcu__ptds_sync(int dev)
{
    struct vcu_cu_u64_req r = { .value = VCU_CU_STREAM_PER_THREAD };

    return vcu__call(dev, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, &r, sizeof(r), NULL, 0, NULL, 0);
}

/*
 * A copy between device and pageable guest memory larger than
 * VCU__COPY_CHUNK is sent as requests of that size, each its own segment,
 * without waiting, at most VCU__COPY_WINDOW unanswered at a time; the last
 * waits and collects any chunk's error (the reply's deferred field).  The
 * driver pins a chunk while it is in flight, so pinning chunk n+1 in the
 * guest overlaps the host's copy of chunk n.  32 MiB: the per-request cost
 * (page-list build, virtqueue round trip: tens of us) stays under 5% of a
 * chunk's copy at the ~15 GB/s of a pageable host copy (about 2 ms), the
 * first chunk starts early, and a window pins at most 128 MiB of guest
 * memory at once.  Copies up to one chunk stay one request.
 */
#define VCU__COPY_CHUNK (32ull << 20)
#define VCU__COPY_WINDOW 4

/* The device and wire stream of a copy: stream's when async, else the
 * current device's legacy stream (ptsz: its per-thread default stream). */
static cudaError_t vcu__copy_stream(cudaStream_t stream, int async, int ptsz, int *dev,
                                    uint64_t *ws)
{
    if (async)
        return vcu__stream(stream, ptsz, dev, ws);
    *dev = vcu__cur_dev;
    if (ptsz)
        *ws = VCU_CU_STREAM_PER_THREAD;
    return cudaSuccess;
}

/* A device-to-device copy of n bytes, r's stream and flags set.  Unknown
 * pointers wait for the host's verdict, as CUDA checks them at the
 * call. */
static cudaError_t vcu__copy_dtod(int dev, struct vcu_cu_memcpy_req *r, void *dst,
                                  const void *src, size_t n, int async)
{
    r->dst = (uint64_t)(uintptr_t)dst;
    r->src = (uint64_t)(uintptr_t)src;
    r->size = n;
    return vcu__call(dev, VCU_OP_CU_MEMCPY_DTOD,
                     async && vcu__dev_range_known(dev, r->dst, n) &&
                         vcu__dev_range_known(dev, r->src, n),
                     r, sizeof(*r), NULL, 0, NULL, 0);
}

/*
 * A copy of n bytes between device and host memory (kind HostToDevice or
 * DeviceToHost), r's stream and flags set, in pieces of the session's
 * transfer limit: none waits when async; a synchronous one from pageable
 * memory (not stable) is pipelined (VCU__COPY_CHUNK).
 */
static cudaError_t vcu__copy_pieces(int dev, struct vcu_cu_memcpy_req *r, void *dst,
                                    const void *src, size_t n, enum cudaMemcpyKind kind,
                                    int async, int stable)
{
    uint64_t chunk, off, i;
    int pipeline;
    cudaError_t e;
    vcu_buf_t b;

    pipeline = !async && !stable && vcu__rt.async && n > VCU__COPY_CHUNK;
    chunk = vcu__rt.max_xfer ? vcu__rt.max_xfer : VCU_MAX_XFER;
    if (pipeline && chunk > VCU__COPY_CHUNK)
        chunk = VCU__COPY_CHUNK;
    for (off = 0, i = 0; off < n; off += chunk, i++) {
        uint64_t len = n - off < chunk ? n - off : chunk;
        /* Every VCU__COPY_WINDOW-th chunk and the last wait: that bounds
         * what is pinned and in flight. */
        int nowait = async || (pipeline && off + len < n &&
                               (i + 1) % VCU__COPY_WINDOW != 0);

        r->dst = (uint64_t)(uintptr_t)dst + off;
        r->src = (uint64_t)(uintptr_t)src + off;
        r->size = len;
        b.len = len;
        if (kind == cudaMemcpyHostToDevice) {
            b.addr = (char *)src + off;
            b.flags = VCU_SEG_TO_DEVICE;
            e = vcu__call(dev, VCU_OP_CU_MEMCPY_HTOD, nowait, r, sizeof(*r), &b, 1, NULL, 0);
        } else {
            b.addr = (char *)dst + off;
            b.flags = VCU_SEG_FROM_DEVICE;
            e = vcu__call(dev, VCU_OP_CU_MEMCPY_DTOH, nowait, r, sizeof(*r), &b, 1, NULL, 0);
        }
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

static cudaError_t vcu__copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                             cudaStream_t stream, int async, int ptsz)
{
    struct vcu_cu_memcpy_req r;
    uint64_t ws = 0;
    int dev, stable;
    cudaError_t e;

    e = vcu__copy_stream(stream, async, ptsz, &dev, &ws);
    if (e != cudaSuccess)
        return e;
    e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__kind(dst, src, &kind);
    if (e != cudaSuccess || n == 0)
        return e;
    if (dst == NULL || src == NULL)
        return cudaErrorInvalidValue;
    if (kind == cudaMemcpyHostToHost) {
        memmove(dst, src, n);
        return cudaSuccess;
    }
    /* In a stream capture, a node of the capture's graph. */
    if (async && kind != cudaMemcpyDeviceToDevice) {
        int done;

        e = vcu__capture_copy(dev, ws, dst, src, n, kind, &done);
        if (done)
            return e;
    }
    e = vcu__managed_touch(dev, ws, dst, src);
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.stream = ws;
    /* A synchronous copy of a per-thread default stream program is issued
     * on that stream (the host issues flag-less copies on the legacy one)
     * and waited for below. */
    r.flags = async || ptsz ? VCU_CU_MEMCPY_F_ASYNC : 0;
    if (kind == cudaMemcpyDeviceToDevice)
        return vcu__copy_dtod(dev, &r, dst, src, n, async);
    /* Stream-ordered copies go without waiting only where the host memory
     * is the driver's (stable) and the device range is known; from
     * pageable memory cudaMemcpyAsync is synchronous, as in CUDA. */
    stable = vcu__host_range_stable(kind == cudaMemcpyHostToDevice ? src : dst, n);
    if (async && !(stable && vcu__dev_range_known(dev, (uint64_t)(uintptr_t)(
                                                           kind == cudaMemcpyHostToDevice ? dst
                                                                                          : src),
                                                  n)))
        async = 0;
    e = vcu__copy_pieces(dev, &r, dst, src, n, kind, async, stable);
    if (e != cudaSuccess)
        return e;
    /* The host waits for a copy touching pageable pages before it replies;
     * one touching the driver's pinned pages must be waited for here. */
    if (ptsz && !async && stable)
        return vcu__ptds_sync(dev);
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                   enum cudaMemcpyKind kind)
{
    cudaError_t e = vcu__copy(dst, src, count, kind, NULL, 0, 0);

    /* A synchronous copy waits for the legacy stream: the host may look. */
    if (e == cudaSuccess)
        e = vcu__managed_sync(vcu__cur_dev, VCU_CU_STREAM_LEGACY, 0);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                        enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return vcu__err(vcu__copy(dst, src, count, kind, stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                        enum cudaMemcpyKind kind);
VCU__EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                        enum cudaMemcpyKind kind)
{
    cudaError_t e = vcu__copy(dst, src, count, kind, NULL, 0, 1);

    if (e == cudaSuccess)
        e = vcu__managed_sync(vcu__cur_dev, VCU_CU_STREAM_PER_THREAD, 0);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return vcu__err(vcu__copy(dst, src, count, kind, stream, 1, 1));
}

/* The device and wire stream of a 2D copy or a memset: the stream's
 * (async), else the current device's and, per-thread (ptsz), its
 * per-thread stream (see vcu__copy); the device checked. */
static cudaError_t vcu__2d_stream(cudaStream_t stream, int async, int ptsz, int *dev,
                                  uint64_t *ws)
{
    cudaError_t e;

    if (async) {
        e = vcu__stream(stream, ptsz, dev, ws);
        if (e != cudaSuccess)
            return e;
    } else {
        *dev = vcu__cur_dev;
        if (ptsz)
            *ws = VCU_CU_STREAM_PER_THREAD;
    }
    return vcu__check_dev(*dev);
}

/* Whether an asynchronous 2D copy may go without waiting where
 * cudaMemcpyAsync would (see vcu__copy): known device ranges, host memory
 * that stays put, within one request. */
static int vcu__copy2d_nowait(int dev, void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind, uint64_t max)
{
    if (kind != cudaMemcpyDeviceToDevice) {
        int h2d = kind == cudaMemcpyHostToDevice;
        size_t hp = h2d ? spitch : dpitch, dp = h2d ? dpitch : spitch;
        const void *hb = h2d ? src : dst, *db = h2d ? dst : src;

        return hp * (height - 1) + width <= max &&
               vcu__host_range_stable(hb, hp * (height - 1) + width) &&
               vcu__dev_range_known(dev, (uint64_t)(uintptr_t)db, dp * (height - 1) + width);
    }
    return vcu__dev_range_known(dev, (uint64_t)(uintptr_t)dst, dpitch * (height - 1) + width) &&
           vcu__dev_range_known(dev, (uint64_t)(uintptr_t)src, spitch * (height - 1) + width);
}

/* The 2D copy's requests, as many rows in each as fit the transfer limit
 * max on the host side. */
static cudaError_t vcu__copy2d_send(int dev, void *dst, size_t dpitch, const void *src,
                                    size_t spitch, size_t width, size_t height,
                                    enum cudaMemcpyKind kind, uint64_t ws, uint32_t flags,
                                    int async, uint64_t max)
{
    size_t hp = kind == cudaMemcpyHostToDevice ? spitch : dpitch;
    struct vcu_cu_memcpy2d_req r;
    uint64_t rows;
    cudaError_t e;
    vcu_buf_t b;

    for (size_t row = 0; row < height; row += rows) {
        rows = height - row;
        if (kind != cudaMemcpyDeviceToDevice && hp * (rows - 1) + width > max)
            rows = max / hp ? max / hp : 1;
        if (kind != cudaMemcpyDeviceToDevice && hp * (rows - 1) + width > max)
            return cudaErrorInvalidValue;
        memset(&r, 0, sizeof(r));
        r.dst = (uint64_t)(uintptr_t)dst + row * dpitch;
        r.dpitch = dpitch;
        r.src = (uint64_t)(uintptr_t)src + row * spitch;
        r.spitch = spitch;
        r.width = width;
        r.height = rows;
        r.stream = ws;
        r.flags = flags;
        b.len = hp * (rows - 1) + width;
        switch (kind) {
        case cudaMemcpyHostToDevice:
            r.kind = VCU_CU_COPY_HTOD;
            b.addr = (char *)src + row * spitch;
            b.flags = VCU_SEG_TO_DEVICE;
            e = vcu__call(dev, VCU_OP_CU_MEMCPY_2D, async, &r, sizeof(r), &b, 1, NULL, 0);
            break;
        case cudaMemcpyDeviceToHost:
            r.kind = VCU_CU_COPY_DTOH;
            b.addr = (char *)dst + row * dpitch;
            b.flags = VCU_SEG_FROM_DEVICE;
            e = vcu__call(dev, VCU_OP_CU_MEMCPY_2D, async, &r, sizeof(r), &b, 1, NULL, 0);
            break;
        default:
            r.kind = VCU_CU_COPY_DTOD;
            e = vcu__call(dev, VCU_OP_CU_MEMCPY_2D, async, &r, sizeof(r), NULL, 0, NULL, 0);
            break;
        }
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

static cudaError_t vcu__copy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                               size_t width, size_t height, enum cudaMemcpyKind kind,
                               cudaStream_t stream, int async, int ptsz)
{
    uint64_t ws = 0, max;
    uint32_t flags = async || ptsz ? VCU_CU_MEMCPY_F_ASYNC : 0;
    int dev, sync_ptds = ptsz && !async;
    cudaError_t e;

    e = vcu__2d_stream(stream, async, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__kind(dst, src, &kind);
    if (e != cudaSuccess)
        return e;
    if (width == 0 || height == 0)
        return cudaSuccess;
    if (width > dpitch || width > spitch)
        return cudaErrorInvalidPitchValue;
    if (dst == NULL || src == NULL)
        return cudaErrorInvalidValue;
    if (kind == cudaMemcpyHostToHost) {
        for (size_t i = 0; i < height; i++)
            memmove((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
        return cudaSuccess;
    }
    e = vcu__managed_touch(dev, ws, dst, src);
    if (e != cudaSuccess)
        return e;
    max = vcu__rt.max_xfer ? vcu__rt.max_xfer : VCU_MAX_XFER;
    if (async)
        async = vcu__copy2d_nowait(dev, dst, dpitch, src, spitch, width, height, kind, max);
    e = vcu__copy2d_send(dev, dst, dpitch, src, spitch, width, height, kind, ws, flags, async,
                         max);
    if (e == cudaSuccess && sync_ptds && kind != cudaMemcpyDeviceToDevice)
        return vcu__ptds_sync(dev);
    return e;
}

VCU__EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                     size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return vcu__err(vcu__copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                                          size_t spitch, size_t width, size_t height,
                                          enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return vcu__err(vcu__copy2d(dst, dpitch, src, spitch, width, height, kind, stream, 1, 0));
}

static cudaError_t vcu__sym_range(const void *symbol, size_t count, size_t offset, char **p)
{
    uint64_t base, size;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    if (e == cudaSuccess)
        e = vcu__symbol(symbol, dev, &base, &size);
    if (e != cudaSuccess)
        return e;
    if (offset > size || count > size - offset)
        return cudaErrorInvalidValue;
    *p = (char *)(uintptr_t)base + offset;
    return cudaSuccess;
}

static cudaError_t vcu__to_symbol(const void *symbol, const void *src, size_t count,
                                  size_t offset, enum cudaMemcpyKind kind, cudaStream_t s,
                                  int async, int ptsz)
{
    char *p;
    cudaError_t e;

    if (kind == cudaMemcpyDefault)
        kind = vcu__is_dev_ptr(src, NULL) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
    if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice)
        return cudaErrorInvalidMemcpyDirection;
    e = vcu__sym_range(symbol, count, offset, &p);
    if (e != cudaSuccess)
        return e;
    return vcu__copy(p, src, count, kind, s, async, ptsz);
}

static cudaError_t vcu__from_symbol(void *dst, const void *symbol, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t s, int async,
                                    int ptsz)
{
    char *p;
    cudaError_t e;

    if (kind == cudaMemcpyDefault)
        kind = vcu__is_dev_ptr(dst, NULL) ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost;
    if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
        return cudaErrorInvalidMemcpyDirection;
    e = vcu__sym_range(symbol, count, offset, &p);
    if (e != cudaSuccess)
        return e;
    return vcu__copy(dst, p, count, kind, s, async, ptsz);
}

VCU__EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                           size_t offset, enum cudaMemcpyKind kind)
{
    return vcu__err(vcu__to_symbol(symbol, src, count, offset, kind, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                             size_t offset, enum cudaMemcpyKind kind)
{
    return vcu__err(vcu__from_symbol(dst, symbol, count, offset, kind, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src,
                                                size_t count, size_t offset,
                                                enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return vcu__err(vcu__to_symbol(symbol, src, count, offset, kind, stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count,
                                                  size_t offset, enum cudaMemcpyKind kind,
                                                  cudaStream_t stream)
{
    return vcu__err(vcu__from_symbol(dst, symbol, count, offset, kind, stream, 1, 0));
}

/* ---- memset ------------------------------------------------------------- */

static cudaError_t vcu__memset(void *p, size_t pitch, int value, size_t width, size_t height,
                               cudaStream_t stream, int async, int ptsz)
{
    struct vcu_cu_memset_req r;
    vcu__alloc_t a;
    uint64_t ws = 0;
    int dev;
    cudaError_t e;

    e = vcu__2d_stream(stream, async, ptsz, &dev, &ws);
    if (e != cudaSuccess || width == 0 || height == 0)
        return e;
    if (p == NULL || (height > 1 && width > pitch) ||
        (height > 1 && height - 1 > (UINT64_MAX - width) / pitch))
        return cudaErrorInvalidValue;
    e = vcu__managed_touch(dev, ws, p, NULL);
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.dst = (uint64_t)(uintptr_t)p;
    /* Page-locked host memory, which unified addressing lets a program
     * name as device memory: where the host mapped it. */
    if (vcu__mem_find(r.dst, &a) == 0 && (a.kind == VCU__M_HOST || a.kind == VCU__M_REGISTERED)) {
        r.dst = vcu__rt_host_range_dptr(r.dst, (uint64_t)(height - 1) * pitch + width);
        if (r.dst == 0)
            return cudaErrorInvalidValue;
    }
    r.pitch = height > 1 ? pitch : 0;
    r.width = width;
    r.height = height;
    r.stream = ws;
    r.value = (uint8_t)value;
    r.elem_size = 1;
    r.flags = async || ptsz ? VCU_CU_MEMCPY_F_ASYNC : 0;
    /* cudaMemset is asynchronous too, but CUDA refuses a bad pointer at
     * the call: only a range inside a known allocation goes unanswered. */
    return vcu__call(dev, VCU_OP_CU_MEMSET,
                     vcu__dev_range_known(dev, r.dst, (height - 1) * pitch + width), &r,
                     sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    return vcu__err(vcu__memset(devPtr, 0, value, count, 1, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                                        cudaStream_t stream)
{
    return vcu__err(vcu__memset(devPtr, 0, value, count, 1, stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                             cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                             cudaStream_t stream)
{
    return vcu__err(vcu__memset(devPtr, 0, value, count, 1, stream, 1, 1));
}

VCU__EXPORT cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width,
                                     size_t height)
{
    return vcu__err(vcu__memset(devPtr, pitch, value, width, height, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemset2DAsync(void *devPtr, size_t pitch, int value, size_t width,
                                          size_t height, cudaStream_t stream)
{
    return vcu__err(vcu__memset(devPtr, pitch, value, width, height, stream, 1, 0));
}

/* ---- per-thread default stream variants ---------------------------------- */

VCU__EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                                          size_t width, size_t height, enum cudaMemcpyKind kind);
VCU__EXPORT cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch,
                                          size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return vcu__err(vcu__copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               enum cudaMemcpyKind kind, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
                                               size_t spitch, size_t width, size_t height,
                                               enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return vcu__err(vcu__copy2d(dst, dpitch, src, spitch, width, height, kind, stream, 1, 1));
}

VCU__EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count,
                                                size_t offset, enum cudaMemcpyKind kind);
VCU__EXPORT cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count,
                                                size_t offset, enum cudaMemcpyKind kind)
{
    return vcu__err(vcu__to_symbol(symbol, src, count, offset, kind, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
                                                  size_t offset, enum cudaMemcpyKind kind);
VCU__EXPORT cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
                                                  size_t offset, enum cudaMemcpyKind kind)
{
    return vcu__err(vcu__from_symbol(dst, symbol, count, offset, kind, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src,
                                                     size_t count, size_t offset,
                                                     enum cudaMemcpyKind kind,
                                                     cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src,
                                                     size_t count, size_t offset,
                                                     enum cudaMemcpyKind kind,
                                                     cudaStream_t stream)
{
    return vcu__err(vcu__to_symbol(symbol, src, count, offset, kind, stream, 1, 1));
}

VCU__EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol,
                                                       size_t count, size_t offset,
                                                       enum cudaMemcpyKind kind,
                                                       cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol,
                                                       size_t count, size_t offset,
                                                       enum cudaMemcpyKind kind,
                                                       cudaStream_t stream)
{
    return vcu__err(vcu__from_symbol(dst, symbol, count, offset, kind, stream, 1, 1));
}

VCU__EXPORT cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
VCU__EXPORT cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    return vcu__err(vcu__memset(devPtr, 0, value, count, 1, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width,
                                          size_t height);
VCU__EXPORT cudaError_t cudaMemset2D_ptds(void *devPtr, size_t pitch, int value, size_t width,
                                          size_t height)
{
    return vcu__err(vcu__memset(devPtr, pitch, value, width, height, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemset2DAsync_ptsz(void *devPtr, size_t pitch, int value,
                                               size_t width, size_t height, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemset2DAsync_ptsz(void *devPtr, size_t pitch, int value,
                                               size_t width, size_t height, cudaStream_t stream)
{
    return vcu__err(vcu__memset(devPtr, pitch, value, width, height, stream, 1, 1));
}

/* ---- 3D linear memory: slices of 2D requests ----------------------------- */

VCU__EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    size_t pitch;
    void *p = NULL;
    cudaError_t e;

    if (pitchedDevPtr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    pitch = (extent.width + 511) & ~(size_t)511;   /* as cudaMallocPitch */
    if (pitch == 0)
        pitch = 512;
    if (extent.height != 0 && extent.depth != 0 &&
        pitch > SIZE_MAX / extent.height / extent.depth)
        return vcu__err(cudaErrorMemoryAllocation);
    e = cudaMalloc(&p, pitch * extent.height * extent.depth);
    if (e != cudaSuccess)
        return e;
    pitchedDevPtr->ptr = p;
    pitchedDevPtr->pitch = pitch;
    pitchedDevPtr->xsize = extent.width;
    pitchedDevPtr->ysize = extent.height;
    return cudaSuccess;
}

static cudaError_t vcu__memset3d(struct cudaPitchedPtr p, int value, struct cudaExtent x,
                                 cudaStream_t stream, int async, int ptsz)
{
    cudaError_t e;

    if (x.width == 0 || x.height == 0 || x.depth == 0)
        return vcu__memset(p.ptr, p.pitch, value, 0, 0, stream, async, ptsz);
    if (x.depth > 1 && p.ysize < x.height)
        return cudaErrorInvalidValue;
    /* Slices that follow each other are one 2D memset. */
    if (x.depth == 1 || p.ysize == x.height)
        return vcu__memset(p.ptr, p.pitch, value, x.width, x.height * x.depth, stream, async,
                           ptsz);
    for (size_t z = 0; z < x.depth; z++) {
        e = vcu__memset((char *)p.ptr + z * p.pitch * p.ysize, p.pitch, value, x.width,
                        x.height, stream, async, ptsz);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr pitchedDevPtr, int value,
                                     struct cudaExtent extent)
{
    return vcu__err(vcu__memset3d(pitchedDevPtr, value, extent, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr pitchedDevPtr, int value,
                                          struct cudaExtent extent, cudaStream_t stream)
{
    return vcu__err(vcu__memset3d(pitchedDevPtr, value, extent, stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                                          struct cudaExtent extent);
VCU__EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                                          struct cudaExtent extent)
{
    return vcu__err(vcu__memset3d(pitchedDevPtr, value, extent, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value,
                                               struct cudaExtent extent, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value,
                                               struct cudaExtent extent, cudaStream_t stream)
{
    return vcu__err(vcu__memset3d(pitchedDevPtr, value, extent, stream, 1, 1));
}

/* Linear memory only (pos.x in bytes); no CUDA arrays. */
static cudaError_t vcu__copy3d(const struct cudaMemcpy3DParms *p, cudaStream_t stream, int async,
                               int ptsz)
{
    const struct cudaExtent *x;
    size_t sp, dp, sy, dy;
    const char *src;
    char *dst;
    cudaError_t e;

    if (p == NULL)
        return cudaErrorInvalidValue;
    if (p->srcArray != NULL || p->dstArray != NULL)
        VCU__NOT_SUPPORTED("cudaMemcpy3D with a CUDA array", "CUDA arrays are not in the protocol");
    x = &p->extent;
    sp = p->srcPtr.pitch;
    dp = p->dstPtr.pitch;
    sy = p->srcPtr.ysize;
    dy = p->dstPtr.ysize;
    if (x->width == 0 || x->height == 0 || x->depth == 0)
        return vcu__copy2d(p->dstPtr.ptr, dp, p->srcPtr.ptr, sp, 0, 0, p->kind, stream, async,
                           ptsz);
    if (x->depth > 1 && (sy < p->srcPos.y + x->height || dy < p->dstPos.y + x->height))
        return cudaErrorInvalidValue;
    src = (const char *)p->srcPtr.ptr + p->srcPos.z * sp * sy + p->srcPos.y * sp + p->srcPos.x;
    dst = (char *)p->dstPtr.ptr + p->dstPos.z * dp * dy + p->dstPos.y * dp + p->dstPos.x;
    /* Slices that follow each other on both sides are one 2D copy. */
    if (x->depth == 1 || (sy == x->height && dy == x->height))
        return vcu__copy2d(dst, dp, src, sp, x->width, x->height * x->depth, p->kind, stream,
                           async, ptsz);
    for (size_t z = 0; z < x->depth; z++) {
        e = vcu__copy2d(dst + z * dp * dy, dp, src + z * sp * sy, sp, x->width, x->height,
                        p->kind, stream, async, ptsz);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
    return vcu__err(vcu__copy3d(p, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
    return vcu__err(vcu__copy3d(p, stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p);
VCU__EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p)
{
    return vcu__err(vcu__copy3d(p, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p,
                                               cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p,
                                               cudaStream_t stream)
{
    return vcu__err(vcu__copy3d(p, stream, 1, 1));
}

/* ---- copies between devices ---------------------------------------------- */

/* Runs f's synchronous copy with dev as the thread's device. */
static cudaError_t vcu__copy_on(int dev, void *dst, const void *src, size_t n,
                                enum cudaMemcpyKind kind)
{
    int saved = vcu__cur_dev;
    cudaError_t e;

    vcu__cur_dev = dev;
    e = vcu__copy(dst, src, n, kind, NULL, 0, 0);
    vcu__cur_dev = saved;
    return e;
}

/*
 * Peer copies.  Both on one device: a device-to-device copy there.
 * Between two devices: CU_MEMCPY_PEER (as cuMemcpyPeer sends it), which
 * the host copies between its contexts of the two, on the stream's
 * device (the source's for the synchronous copy).
 */
static cudaError_t vcu__copy_peer(void *dst, int dd, const void *src, int sd, size_t n,
                                  cudaStream_t stream, int async, int ptsz)
{
    struct vcu_cu_memcpy_peer_req r;
    cudaError_t e = vcu__check_dev(dd);
    int dev = sd;

    if (e == cudaSuccess)
        e = vcu__check_dev(sd);
    if (e != cudaSuccess || n == 0)
        return e;
    if (dd == sd) {
        if (async)
            return vcu__copy(dst, src, n, cudaMemcpyDeviceToDevice, stream, 1, ptsz);
        return vcu__copy_on(dd, dst, src, n, cudaMemcpyDeviceToDevice);
    }
    memset(&r, 0, sizeof(r));
    if (async) {
        e = vcu__stream(stream, ptsz, &dev, &r.c.stream);
        if (e != cudaSuccess)
            return e;
        r.c.flags = VCU_CU_MEMCPY_F_ASYNC;
    }
    r.c.dst = (uint64_t)(uintptr_t)dst;
    r.c.src = (uint64_t)(uintptr_t)src;
    r.c.size = n;
    r.dst_device = vcu__rt.dev[dd].vord;
    r.src_device = vcu__rt.dev[sd].vord;
    return vcu__call(dev, VCU_OP_CU_MEMCPY_PEER, 0, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice,
                                       size_t count)
{
    return vcu__err(vcu__copy_peer(dst, dstDevice, src, srcDevice, count, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
                                            int srcDevice, size_t count, cudaStream_t stream)
{
    return vcu__err(vcu__copy_peer(dst, dstDevice, src, srcDevice, count, stream, 1, 0));
}

/*
 * One side of a 3D copy between two devices: linear memory of device d
 * at pos, its context's device named in reserved (CU_MEMCPY_3D_PEER).
 */
static void vcu__peer_side(struct vcu_cu_memcpy3d_side *w, struct cudaPitchedPtr ptr,
                           struct cudaPos pos, int d)
{
    w->type = CU_MEMORYTYPE_DEVICE;
    w->ptr = (uint64_t)(uintptr_t)ptr.ptr;
    w->x = pos.x;
    w->y = pos.y;
    w->z = pos.z;
    w->pitch = ptr.pitch;
    w->height = ptr.ysize;
    w->reserved = vcu__rt.dev[d].vord;
}

/* Both sides on one device: cudaMemcpy3D's copy there.  On two: linear
 * memory, one CU_MEMCPY_3D_PEER (as cuMemcpy3DPeer sends it) on the
 * stream's device (the source's for the synchronous copy). */
static cudaError_t vcu__copy3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream,
                                    int async, int ptsz)
{
    struct cudaMemcpy3DParms q;
    struct vcu_cu_memcpy3d_req r;
    const struct cudaExtent *x;
    int saved = vcu__cur_dev, dev;
    cudaError_t e;

    if (p == NULL)
        return cudaErrorInvalidValue;
    e = vcu__check_dev(p->srcDevice);
    if (e == cudaSuccess)
        e = vcu__check_dev(p->dstDevice);
    if (e != cudaSuccess)
        return e;
    if (p->srcDevice != p->dstDevice) {
        x = &p->extent;
        if (p->srcArray != NULL || p->dstArray != NULL)
            VCU__NOT_SUPPORTED("cudaMemcpy3DPeer with a CUDA array",
                               "CUDA arrays are not in the protocol");
        if (p->srcPtr.ptr == NULL || p->dstPtr.ptr == NULL ||
            (x->height > 1 && (p->srcPtr.pitch < x->width || p->dstPtr.pitch < x->width)) ||
            (x->depth > 1 && (p->srcPtr.ysize < x->height || p->dstPtr.ysize < x->height)))
            return cudaErrorInvalidValue;
        memset(&r, 0, sizeof(r));
        dev = p->srcDevice;
        if (async) {
            e = vcu__stream(stream, ptsz, &dev, &r.stream);
            if (e != cudaSuccess)
                return e;
            r.flags = VCU_CU_MEMCPY_F_ASYNC;
        }
        if (x->width == 0 || x->height == 0 || x->depth == 0)
            return cudaSuccess;
        vcu__peer_side(&r.src, p->srcPtr, p->srcPos, p->srcDevice);
        vcu__peer_side(&r.dst, p->dstPtr, p->dstPos, p->dstDevice);
        r.width = x->width;
        r.height = x->height;
        r.depth = x->depth;
        return vcu__call(dev, VCU_OP_CU_MEMCPY_3D_PEER, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    }
    memset(&q, 0, sizeof(q));
    q.srcArray = p->srcArray;
    q.srcPos = p->srcPos;
    q.srcPtr = p->srcPtr;
    q.dstArray = p->dstArray;
    q.dstPos = p->dstPos;
    q.dstPtr = p->dstPtr;
    q.extent = p->extent;
    q.kind = cudaMemcpyDeviceToDevice;
    vcu__cur_dev = p->srcDevice;
    e = vcu__copy3d(&q, stream, async, ptsz);
    vcu__cur_dev = saved;
    return e;
}

VCU__EXPORT cudaError_t cudaMemcpy3DPeer(const struct cudaMemcpy3DPeerParms *p)
{
    return vcu__err(vcu__copy3d_peer(p, NULL, 0, 0));
}

VCU__EXPORT cudaError_t cudaMemcpy3DPeerAsync(const struct cudaMemcpy3DPeerParms *p,
                                              cudaStream_t stream)
{
    return vcu__err(vcu__copy3d_peer(p, stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms *p);
VCU__EXPORT cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms *p)
{
    return vcu__err(vcu__copy3d_peer(p, NULL, 0, 1));
}

VCU__EXPORT cudaError_t cudaMemcpy3DPeerAsync_ptsz(const struct cudaMemcpy3DPeerParms *p,
                                                   cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemcpy3DPeerAsync_ptsz(const struct cudaMemcpy3DPeerParms *p,
                                                   cudaStream_t stream)
{
    return vcu__err(vcu__copy3d_peer(p, stream, 1, 1));
}
