/*
 * libcuda.so.1: memory, modules, launches, streams and events over the
 * wire protocol.  Launches whose configuration is known good here, event
 * records and stream waits go without waiting for the host's reply
 * (vcu__call_async; the host runs them in order, and what fails on the
 * GPU is reported by a later call, as CUDA reports it); every other call
 * waits, so its error shows at the call that caused it.
 */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda_int.h"
#include "vcu_fatbin.h"
#include "vcu_kernels.h"

/* ---- streams (wire handles) -------------------------------------------- */

/*
 * Each guest thread's per-thread default stream (CU_STREAM_PER_THREAD,
 * the _ptsz forms' NULL): a host stream of its own per device, made at
 * its first use, blocking (it synchronizes with the legacy stream, as the
 * per-thread stream does), and destroyed when the thread exits.  The
 * worker's own per-thread stream would be one for every thread of the
 * guest process: their work would be serialized, and a thread's host
 * function waiting for another thread's per-thread work would never end.
 * A context reset takes the host's streams: gen tells.
 */
typedef struct {
    uint64_t h[VCU_CU_MAX_DEVICES];
    unsigned int gen[VCU_CU_MAX_DEVICES];
} vcu__pts_t;

static __thread vcu__pts_t *vcu__pts;
static pthread_key_t vcu__pts_key;
static pthread_once_t vcu__pts_once = PTHREAD_ONCE_INIT;

static void vcu__pts_free(void *arg)
{
    vcu__pts_t *p = arg;

    for (unsigned int d = 0; d < VCU_CU_MAX_DEVICES; d++) {
        struct vcu_cu_u64_req r = { .value = p->h[d] };

        if (p->h[d] != 0 && p->gen[d] == __atomic_load_n(&vcu__drv.gen[d], __ATOMIC_ACQUIRE))
            vcu__call((int)d, VCU_OP_CU_STREAM_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    }
    free(p);
}

static void vcu__pts_init(void)
{
    if (pthread_key_create(&vcu__pts_key, vcu__pts_free) != 0)
        vcu__pts_key = (pthread_key_t)-1;
}

static CUresult vcu__per_thread(int dev, uint64_t *wire)
{
    struct vcu_cu_stream_create_req r;
    struct vcu_cu_u64_resp o;
    unsigned int gen = __atomic_load_n(&vcu__drv.gen[dev], __ATOMIC_ACQUIRE);
    CUresult e;

    if (vcu__pts == NULL) {
        pthread_once(&vcu__pts_once, vcu__pts_init);
        if (vcu__pts_key == (pthread_key_t)-1 || (vcu__pts = calloc(1, sizeof(*vcu__pts))) == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (pthread_setspecific(vcu__pts_key, vcu__pts) != 0) {
            free(vcu__pts);
            vcu__pts = NULL;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (vcu__pts->h[dev] != 0 && vcu__pts->gen[dev] == gen) {
        *wire = vcu__pts->h[dev];
        return CUDA_SUCCESS;
    }
    memset(&r, 0, sizeof(r));
    e = vcu__call(dev, VCU_OP_CU_STREAM_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    vcu__pts->h[dev] = o.value;
    vcu__pts->gen[dev] = gen;
    *wire = o.value;
    return CUDA_SUCCESS;
}

CUresult vcu__stream(vcu__ctx_t *ctx, CUstream s, int ptsz, uint64_t *wire)
{
    vcu__stream_t *st = (vcu__stream_t *)s;

    if (s == NULL && !ptsz) {
        *wire = VCU_CU_STREAM_LEGACY;
        return CUDA_SUCCESS;
    }
    if (s == CU_STREAM_LEGACY) {
        *wire = VCU_CU_STREAM_LEGACY;
        return CUDA_SUCCESS;
    }
    if (s == NULL || s == CU_STREAM_PER_THREAD)
        return vcu__per_thread(ctx->dev, wire);
    if (!vcu__reg_has(st, VCU__K_STREAM) || st->dev != ctx->dev)
        return CUDA_ERROR_INVALID_HANDLE;
    *wire = st->h;
    return CUDA_SUCCESS;
}

/* The device and wire handle of a stream named on its own (synchronize,
 * query): a stream object needs no current context, the default streams
 * are the current context's. */
static CUresult vcu__stream_alone(CUstream s, int ptsz, int *dev, uint64_t *wire)
{
    vcu__stream_t *st = (vcu__stream_t *)s;
    vcu__ctx_t *c;
    CUresult e;

    if (s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD) {
        e = vcu__check_init();
        if (e != CUDA_SUCCESS)
            return e;
        if (!vcu__reg_has(st, VCU__K_STREAM))
            return CUDA_ERROR_INVALID_HANDLE;
        *dev = st->dev;
        *wire = st->h;
        return CUDA_SUCCESS;
    }
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    *dev = c->dev;
    return vcu__stream(c, s, ptsz, wire);
}

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
    if (e == CUDA_SUCCESS)
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
 * (as our runtime's, cudart_mem.c). */
#define VCU__COPY_CHUNK (32ull << 20)
#define VCU__COPY_WINDOW 4

/*
 * One copy kind (VCU_OP_CU_MEMCPY_*), in pieces of at most the session's
 * transfer limit.  stream: NULL for a synchronous copy, else the
 * program's stream (ptsz: NULL names the per-thread one).
 */
CUresult vcu__copy(uint32_t op, uint64_t dst, uint64_t src, void *host, size_t n, int async,
                   CUstream stream, int ptsz)
{
    struct vcu_cu_memcpy_req r;
    vcu_buf_t b;
    uint64_t wire = 0, mbase, msize;
    vcu__ctx_t *c;
    int mdev, nowait, pipeline;
    CUresult e;

    if (op != VCU_OP_CU_MEMCPY_DTOD && host == NULL && n > 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* Managed memory named as the host side is device memory to copies,
     * as to our runtime's: its device side is the one that is current at
     * a stream-ordered point (and a shadow is read-only between waits). */
    if (op != VCU_OP_CU_MEMCPY_DTOD && n > 0 &&
        vcu__managed_find((CUdeviceptr)(uintptr_t)host, &mbase, &msize, &mdev)) {
        if (op == VCU_OP_CU_MEMCPY_HTOD)
            src = (uint64_t)(uintptr_t)host;
        else
            dst = (uint64_t)(uintptr_t)host;
        op = VCU_OP_CU_MEMCPY_DTOD;
        host = NULL;
    }
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS && async)
        e = vcu__stream(c, stream, ptsz, &wire);
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
    /* A stream-ordered copy goes without waiting only where nothing is
     * left to fail at the call (known device ranges) and the host memory
     * stays put after it (this library's page-locked memory); from
     * pageable memory it is synchronous, as in CUDA. */
    nowait = async &&
             (op == VCU_OP_CU_MEMCPY_DTOD
                  ? vcu__dr_known(c->dev, dst, n) && vcu__dr_known(c->dev, src, n)
                  : vcu__dr_known(c->dev, op == VCU_OP_CU_MEMCPY_HTOD ? dst : src, n) &&
                        vcu__hm_stable(host, n));
    /* A large copy from or to pageable memory goes in pieces, as our
     * runtime sends it, of which only every VCU__COPY_WINDOW-th and the
     * last wait: the guest pins the next piece while the host copies the
     * last, and at most a window of them is pinned at once.  Only where
     * the device range is known good, so that no piece after the first
     * can fail at the call. */
    pipeline = !nowait && op != VCU_OP_CU_MEMCPY_DTOD && vcu__drv.async &&
               n > VCU__COPY_CHUNK &&
               vcu__dr_known(c->dev, op == VCU_OP_CU_MEMCPY_HTOD ? dst : src, n);
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

static CUresult vcu__memset(CUdeviceptr dst, uint32_t value, uint32_t elem, size_t n,
                            int async, CUstream stream, int ptsz)
{
    struct vcu_cu_memset_req r;
    uint64_t wire = 0;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS && async)
        e = vcu__stream(c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    if (n == 0)
        return CUDA_SUCCESS;
    if (dst % elem != 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.dst = dst;
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

/* ---- pitched memory and 2D copies --------------------------------------- */

/* Rows padded to 512 bytes, as our runtime's cudaMallocPitch. */
VCU__EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes)
{
    size_t pitch;

    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (WidthInBytes > SIZE_MAX - 511)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pitch = (WidthInBytes + 511) & ~(size_t)511;
    if (pitch > SIZE_MAX / Height)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pPitch = pitch;
    return cuMemAlloc_v2(dptr, pitch * Height);
}

static CUresult vcu__memset2d(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t elem,
                              size_t w, size_t h, int async, CUstream stream, int ptsz)
{
    struct vcu_cu_memset_req r;
    uint64_t wire = 0;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS && async)
        e = vcu__stream(c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    if (w == 0 || h == 0)
        return CUDA_SUCCESS;
    if (dst % elem != 0 || pitch % elem != 0 || (h > 1 && w > pitch / elem))
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.dst = dst;
    r.pitch = pitch;
    r.width = w;
    r.height = h;
    r.stream = wire;
    r.value = value;
    r.elem_size = elem;
    r.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
    return vcu__call(c->dev, VCU_OP_CU_MEMSET, &r, sizeof(r), NULL, 0, NULL, 0);
}

#define VCU__MEMSET2D(name, type, elem, async, ptsz, ...)                                  \
    VCU__EXPORT CUresult name(CUdeviceptr dstDevice, size_t dstPitch, type v, size_t Width, \
                              size_t Height __VA_ARGS__)                                   \
    {                                                                                      \
        return vcu__memset2d(dstDevice, dstPitch, v, elem, Width, Height, async,           \
                             VCU__MEMSET2D_STREAM_##async, ptsz);                          \
    }
#define VCU__MEMSET2D_STREAM_0 NULL
#define VCU__MEMSET2D_STREAM_1 hStream

/* The _ptds forms: a synchronous memset waits for the legacy stream,
 * which orders it after the per-thread stream's work too. */
VCU__MEMSET2D(cuMemsetD2D8_v2, unsigned char, 1, 0, 0)
VCU__MEMSET2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, 0, 0)
VCU__MEMSET2D(cuMemsetD2D16_v2, unsigned short, 2, 0, 0)
VCU__MEMSET2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, 0, 0)
VCU__MEMSET2D(cuMemsetD2D32_v2, unsigned int, 4, 0, 0)
VCU__MEMSET2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, 0, 0)
VCU__MEMSET2D(cuMemsetD2D8Async, unsigned char, 1, 1, 0, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D8Async_ptsz, unsigned char, 1, 1, 1, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D16Async, unsigned short, 2, 1, 0, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D16Async_ptsz, unsigned short, 2, 1, 1, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D32Async, unsigned int, 4, 1, 0, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D32Async_ptsz, unsigned int, 4, 1, 1, , CUstream hStream)

/*
 * cuMemcpy2D*: host and device sides in pieces of whole rows within the
 * session's transfer limit (an array or unified side: as a 3D copy,
 * cuda_array.c).  Host to host is done here.
 */
static CUresult vcu__copy2d(const CUDA_MEMCPY2D *p, int async, CUstream stream, int ptsz)
{
    struct vcu_cu_memcpy2d_req r;
    uint64_t wire = 0, src, dst;
    size_t rows, hp;
    vcu_buf_t b;
    vcu__ctx_t *c;
    uint32_t kind;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY ||
        p->srcMemoryType == CU_MEMORYTYPE_UNIFIED || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED)
        return vcu__copy2d_array(p, async, stream, ptsz);
    if ((p->srcMemoryType != CU_MEMORYTYPE_HOST && p->srcMemoryType != CU_MEMORYTYPE_DEVICE) ||
        (p->dstMemoryType != CU_MEMORYTYPE_HOST && p->dstMemoryType != CU_MEMORYTYPE_DEVICE))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS && async)
        e = vcu__stream(c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    if (p->WidthInBytes == 0 || p->Height == 0)
        return CUDA_SUCCESS;
    if ((p->Height > 1 && (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch)) ||
        p->srcY > SIZE_MAX / (p->srcPitch ? p->srcPitch : 1) ||
        p->dstY > SIZE_MAX / (p->dstPitch ? p->dstPitch : 1))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_HOST)
        src = (uint64_t)(uintptr_t)p->srcHost;
    else
        src = p->srcDevice;
    if (p->dstMemoryType == CU_MEMORYTYPE_HOST)
        dst = (uint64_t)(uintptr_t)p->dstHost;
    else
        dst = p->dstDevice;
    if (src == 0 || dst == 0)
        return CUDA_ERROR_INVALID_VALUE;
    src += p->srcXInBytes + p->srcY * p->srcPitch;
    dst += p->dstXInBytes + p->dstY * p->dstPitch;
    if (p->srcMemoryType == CU_MEMORYTYPE_HOST && p->dstMemoryType == CU_MEMORYTYPE_HOST) {
        for (size_t i = 0; i < p->Height; i++)
            memmove((char *)(uintptr_t)dst + i * p->dstPitch,
                    (const char *)(uintptr_t)src + i * p->srcPitch, p->WidthInBytes);
        return CUDA_SUCCESS;
    }
    kind = p->srcMemoryType == CU_MEMORYTYPE_HOST   ? VCU_CU_COPY_HTOD
           : p->dstMemoryType == CU_MEMORYTYPE_HOST ? VCU_CU_COPY_DTOH
                                                    : VCU_CU_COPY_DTOD;
    hp = kind == VCU_CU_COPY_HTOD ? p->srcPitch : p->dstPitch;
    for (size_t row = 0; row < p->Height; row += rows) {
        rows = p->Height - row;
        if (kind != VCU_CU_COPY_DTOD && hp * (rows - 1) + p->WidthInBytes > vcu__drv.max_xfer)
            rows = hp && vcu__drv.max_xfer / hp ? (size_t)(vcu__drv.max_xfer / hp) : 1;
        if (kind != VCU_CU_COPY_DTOD && hp * (rows - 1) + p->WidthInBytes > vcu__drv.max_xfer)
            return CUDA_ERROR_INVALID_VALUE;
        memset(&r, 0, sizeof(r));
        r.dst = dst + row * p->dstPitch;
        r.dpitch = p->dstPitch;
        r.src = src + row * p->srcPitch;
        r.spitch = p->srcPitch;
        r.width = p->WidthInBytes;
        r.height = rows;
        r.stream = wire;
        r.kind = kind;
        r.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
        b.len = hp * (rows - 1) + p->WidthInBytes;
        b.addr = (void *)(uintptr_t)(kind == VCU_CU_COPY_HTOD ? r.src : r.dst);
        b.flags = kind == VCU_CU_COPY_HTOD ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE;
        e = vcu__call(c->dev, VCU_OP_CU_MEMCPY_2D, &r, sizeof(r), &b,
                      kind == VCU_CU_COPY_DTOD ? 0 : 1, NULL, 0);
        if (e != CUDA_SUCCESS)
            return e;
    }
    return CUDA_SUCCESS;
}

/* Unaligned or not: the host's driver gets the pitches as they are.  The
 * _ptds forms as the memsets above. */
VCU__EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return vcu__copy2d(pCopy, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return vcu__copy2d(pCopy, 1, hStream, 1);
}

/* ---- modules ------------------------------------------------------------- */

#define VCU__FATBINC_MAGIC 0x466243b1u
#define VCU__FATBIN_MAGIC 0xBA55ED50u

typedef struct vcu__fatbin_wrapper_s {
    uint32_t magic;
    uint32_t version;
    const void *data;
    void *filename_or_fatbins;
} vcu__fatbin_wrapper_t;

typedef struct vcu__fatbin_hdr_s {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
} vcu__fatbin_hdr_t;

/* End of a 64-bit ELF (a cubin): its furthest header or section.  avail:
 * bytes known to be there (UINT64_MAX: unknown, as cuModuleLoadData's). */
static CUresult vcu__elf_size(const unsigned char *img, uint64_t avail, uint64_t *size)
{
    Elf64_Ehdr eh;
    uint64_t end, shend;

    if (avail < sizeof(eh))
        return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&eh, img, sizeof(eh));
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shoff > VCU_MAX_XFER || eh.e_phoff > VCU_MAX_XFER)
        return CUDA_ERROR_INVALID_IMAGE;
    shend = eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr);
    if (shend > avail)
        return CUDA_ERROR_INVALID_IMAGE;
    end = sizeof(eh);
    if (shend > end)
        end = shend;
    if (eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize > end)
        end = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
    for (unsigned int i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;

        memcpy(&sh, img + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        if (sh.sh_type == SHT_NOBITS)
            continue;
        if (sh.sh_offset > VCU_MAX_XFER || sh.sh_size > VCU_MAX_XFER)
            return CUDA_ERROR_INVALID_IMAGE;
        if (sh.sh_offset + sh.sh_size > end)
            end = sh.sh_offset + sh.sh_size;
    }
    if (end > avail)
        return CUDA_ERROR_INVALID_IMAGE;
    *size = end;
    return CUDA_SUCCESS;
}

/*
 * cuModuleLoadData gets no length: it is read from the image, as the
 * driver does.  A fatbin (or the wrapper nvcc puts around one), a cubin
 * (ELF), or PTX (NUL-terminated text).  *image moves past a wrapper.
 * avail: bytes known to be at *image (a file's size), or UINT64_MAX.
 */
CUresult vcu__image_size(const void **image, uint64_t avail, uint64_t *size)
{
    const unsigned char *img = *image;
    uint32_t magic;

    if (avail < sizeof(vcu__fatbin_hdr_t))
        return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&magic, img, sizeof(magic));
    if (magic == VCU__FATBINC_MAGIC) {
        vcu__fatbin_wrapper_t w;

        /* The wrapper holds a pointer: it exists in memory, never in a file. */
        if (avail != UINT64_MAX || avail < sizeof(w))
            return CUDA_ERROR_INVALID_IMAGE;
        memcpy(&w, img, sizeof(w));
        if (w.data == NULL)
            return CUDA_ERROR_INVALID_IMAGE;
        img = w.data;
        memcpy(&magic, img, sizeof(magic));
        if (magic != VCU__FATBIN_MAGIC)
            return CUDA_ERROR_INVALID_IMAGE;
        *image = img;
    }
    if (magic == VCU__FATBIN_MAGIC) {
        vcu__fatbin_hdr_t h;

        memcpy(&h, img, sizeof(h));
        if (h.header_size < sizeof(h) || h.fat_size == 0 || h.fat_size > VCU_MAX_XFER ||
            (uint64_t)h.header_size + h.fat_size > avail)
            return CUDA_ERROR_INVALID_IMAGE;
        *size = (uint64_t)h.header_size + h.fat_size;
        return CUDA_SUCCESS;
    }
    if (memcmp(img, ELFMAG, SELFMAG) == 0)
        return vcu__elf_size(img, avail, size);
    *size = strnlen((const char *)img, avail < VCU_MAX_XFER + 1 ? avail : VCU_MAX_XFER + 1);
    if (*size == 0 || *size > VCU_MAX_XFER)
        return CUDA_ERROR_INVALID_IMAGE;
    return CUDA_SUCCESS;
}

/*
 * Asks the host for a new object (op with its request and data; the
 * reply's u64 is the handle, into *h) for the guest object obj, and
 * registers obj as kind.  If obj cannot be registered, the host's object
 * is dropped again (drop_op).  The caller frees obj on failure.
 */
static CUresult vcu__host_obj_new_r(const void *obj, int kind, int dev, uint32_t op, void *req,
                                    uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs,
                                    uint32_t drop_op, void *resp, uint32_t resp_len, uint64_t *h)
{
    struct vcu_cu_u64_resp o;
    CUresult e = vcu__call(dev, op, req, req_len, bufs, nbufs, resp, resp_len);

    if (e != CUDA_SUCCESS)
        return e;
    memcpy(&o, resp, sizeof(o));
    *h = o.value;
    if (vcu__reg_add(obj, kind) != 0) {
        struct vcu_cu_u64_req u = { .value = o.value };

        vcu__call(dev, drop_op, &u, sizeof(u), NULL, 0, NULL, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* The reply of op begins with a vcu_cu_u64_resp, and is nothing more. */
static CUresult vcu__host_obj_new(const void *obj, int kind, int dev, uint32_t op, void *req,
                                  uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs,
                                  uint32_t drop_op, uint64_t *h)
{
    struct vcu_cu_u64_resp o;

    return vcu__host_obj_new_r(obj, kind, dev, op, req, req_len, bufs, nbufs, drop_op, &o,
                               sizeof(o), h);
}

CUresult vcu__module_load_dev(int dev, CUmodule *module, const void *image, uint64_t len,
                              vcu__library_t *lib)
{
    struct vcu_cu_module_load_req r;
    vcu__modname_t mn;
    vcu__module_t *m;
    vcu_buf_t b = { .addr = (void *)image, .len = len, .flags = VCU_SEG_TO_DEVICE };
    void *trim = NULL;
    int major = 0, minor = 0;
    struct timespec t0 = { 0, 0 }, th = { 0, 0 };
    const char *how = "sent";
    char id[VCU__SRC_ID_LEN];
    const char *src_id = id;
    size_t tlen;
    int trimmed;
    CUresult e = CUDA_ERROR_FILE_NOT_FOUND;

    /* The module cache names images by their place in a library's file
     * (a library's copy: where it was copied from). */
    id[0] = '\0';
    if (lib != NULL)
        src_id = lib->src_id;
    else if (vcu_conn_features(vcu__drv.conn) & VCU_FEAT_MODULE_CACHE)
        vcu__module_src_id(image, len, id, sizeof(id));

    /* Only the code the device loads crosses to the host; a fatbin with
     * none is refused here, as the driver would refuse it. */
    if (cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ==
            CUDA_SUCCESS &&
        cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ==
            CUDA_SUCCESS) {
        switch (vcu_fatbin_trim(image, (size_t)len, (unsigned int)(major * 10 + minor), &trim,
                                &tlen)) {
        case VCU_FATBIN_NONE:
            return CUDA_ERROR_NO_BINARY_FOR_GPU;
        case VCU_FATBIN_TRIMMED:
            b.addr = trim;
            b.len = len = tlen;
            break;
        }
    }
    r.image_len = len;
    if (vcu__tracing_modules())
        clock_gettime(CLOCK_MONOTONIC, &t0);
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        free(trim);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->dev = dev;
    /* An image the host's module cache holds is named, not sent: the
     * cache answers CUDA_ERROR_FILE_NOT_FOUND for one it lacks. */
    vcu__module_name(vcu__drv.conn, 0, b.addr, len, src_id, (unsigned int)(major * 10 + minor),
                     &mn);
    if (vcu__tracing_modules())
        clock_gettime(CLOCK_MONOTONIC, &th);
    if (mn.how != VCU__MN_SEND) {
        e = vcu__host_obj_new(m, VCU__K_MODULE, dev, VCU_OP_CU_MODULE_LOAD_HASH, &mn.req,
                              sizeof(mn.req), NULL, 0, VCU_OP_CU_MODULE_UNLOAD, &m->h);
        how = e != CUDA_SUCCESS ? "sent, not in the host's cache"
              : mn.how == VCU__MN_REMEMBERED ? "by hash, not sent; hash remembered"
                                             : "by hash, not sent";
    }
    if (e == CUDA_ERROR_FILE_NOT_FOUND && mn.keep) {
        struct vcu_cu_module_keep_resp k;

        e = vcu__host_obj_new_r(m, VCU__K_MODULE, dev, VCU_OP_CU_MODULE_LOAD_KEEP, &r, sizeof(r),
                                &b, 1, VCU_OP_CU_MODULE_UNLOAD, &k, sizeof(k), &m->h);
        if (e == CUDA_SUCCESS)
            vcu__module_remember(&mn, k.sha256);
        if (mn.how == VCU__MN_SEND)
            how = "sent; hash kept";
    } else if (e == CUDA_ERROR_FILE_NOT_FOUND) {
        e = vcu__host_obj_new(m, VCU__K_MODULE, dev, VCU_OP_CU_MODULE_LOAD, &r, sizeof(r), &b, 1,
                              VCU_OP_CU_MODULE_UNLOAD, &m->h);
    }
    if (e != CUDA_SUCCESS) {
        free(trim);
        free(m);
        return e;
    }
    vcu__printf_module(b.addr, len);
    trimmed = trim != NULL;
    /* Kept for vcu__module_kernels: a library keeps its own image. */
    if (lib != NULL) {
        m->lib = lib;
        free(trim);
    } else if (trim != NULL) {
        m->image = trim;
        m->image_len = len;
    } else if ((m->image = malloc(len)) != NULL) {
        memcpy(m->image, image, len);
        m->image_len = len;
    }
    if (vcu__tracing_modules()) {
        struct timespec t1;

        clock_gettime(CLOCK_MONOTONIC, &t1);
        fprintf(stderr,
                "libcuda (virtio-cuda): module loaded, %llu bytes (%s, %s), %.1f ms "
                "(naming %.1f ms)\n",
                (unsigned long long)len, trimmed ? "trimmed" : "as given", how,
                (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
                th.tv_sec == 0 && th.tv_nsec == 0
                    ? 0.0
                    : (double)(th.tv_sec - t0.tv_sec) * 1e3 +
                          (double)(th.tv_nsec - t0.tv_nsec) / 1e6);
    }
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

CUresult vcu__module_load(CUmodule *module, const void *image, uint64_t len)
{
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__module_load_dev(c->dev, module, image, len, NULL);
}

VCU__EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    uint64_t len;
    CUresult e;

    if (module == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__image_size(&image, UINT64_MAX, &len);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__module_load(module, image, len);
}

/*
 * JIT options change nothing here (the host loads the image as it is);
 * they are checked, and the outputs a caller may read are filled: empty
 * logs, zero wall time.
 */
VCU__EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                                        unsigned int numOptions, CUjit_option *options,
                                        void **optionValues)
{
    if (numOptions > 0 && (options == NULL || optionValues == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numOptions; i++)
        if ((unsigned int)options[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numOptions; i++) {
        switch (options[i]) {
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            optionValues[i] = NULL;
            break;
        case CU_JIT_INFO_LOG_BUFFER:
        case CU_JIT_ERROR_LOG_BUFFER:
            if (optionValues[i] != NULL)
                *(char *)optionValues[i] = '\0';
            break;
        case CU_JIT_WALL_TIME: {
            float zero = 0.0f;

            memcpy(&optionValues[i], &zero, sizeof(zero));
            break;
        }
        default:
            break;
        }
    }
    return cuModuleLoadData(module, image);
}

VCU__EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    struct stat sb;
    const void *img;
    char *buf;
    ssize_t got;
    size_t off = 0;
    uint64_t len;
    CUresult e;
    int fd;

    if (module == NULL || fname == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    fd = open(fname, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 ||
        (uint64_t)sb.st_size > VCU_MAX_XFER) {
        close(fd);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    /* One NUL more: a PTX file is text. */
    buf = calloc(1, (size_t)sb.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    while (off < (size_t)sb.st_size &&
           (got = read(fd, buf + off, (size_t)sb.st_size - off)) > 0)
        off += (size_t)got;
    close(fd);
    if (off != (size_t)sb.st_size) {
        free(buf);
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    img = buf;
    e = vcu__image_size(&img, (uint64_t)sb.st_size, &len);
    if (e == CUDA_SUCCESS)
        e = vcu__module_load(module, img, len);
    free(buf);
    return e;
}

/* Modules are loaded whole, at load (the host's driver gets the whole
 * image): eager, whatever CUDA_MODULE_LOADING says. */
VCU__EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    CUresult e;

    if (mode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    *mode = CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
}

static void vcu__funcs_free(vcu__func_t *f)
{
    while (f != NULL) {
        vcu__func_t *next = f->next;

        vcu__reg_del(f);
        free(f->name);
        free(f->params);
        free(f);
        f = next;
    }
}

VCU__EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    vcu__module_t *m = (vcu__module_t *)hmod;
    struct vcu_cu_u64_req r;
    vcu__func_t *funcs;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(m, VCU__K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    r.value = m->h;
    e = vcu__call(m->dev, VCU_OP_CU_MODULE_UNLOAD, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__reg_del(m);
    pthread_mutex_lock(&vcu__drv.lock);
    funcs = m->funcs;
    m->funcs = NULL;
    pthread_mutex_unlock(&vcu__drv.lock);
    vcu__funcs_free(funcs);
    free(m->image);
    free(m);
    return e;
}

/* A module handle usable from ctx: its own context's, or another of the
 * same device (they share the host's). */
static CUresult vcu__module_here(vcu__ctx_t *ctx, CUmodule hmod, vcu__module_t **out)
{
    vcu__module_t *m = (vcu__module_t *)hmod;

    if (!vcu__reg_has(m, VCU__K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->dev != ctx->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = m;
    return CUDA_SUCCESS;
}

/* The function of that name in m (the host's context of m's device). */
CUresult vcu__module_function(vcu__module_t *m, const char *name, vcu__func_t **out)
{
    struct {
        struct vcu_cu_name_req r;
        char name[VCU_CU_NAME_MAX];
    } q;
    struct {
        struct vcu_cu_function_resp f;
        struct vcu_cu_param p[VCU_CU_MAX_PARAMS];
    } *o = NULL;
    vcu__func_t *f = NULL;
    size_t nlen;
    CUresult e;

    nlen = strnlen(name, VCU_CU_NAME_MAX + 1);
    if (nlen == 0 || nlen > VCU_CU_NAME_MAX)
        return CUDA_ERROR_NOT_FOUND;
    /* One handle per kernel and module, as CUDA gives; the lookup is
     * serialized so two threads asking at once get the same one. */
    pthread_mutex_lock(&vcu__drv.lock);
    for (f = m->funcs; f != NULL; f = f->next)
        if (strcmp(f->name, name) == 0)
            break;
    if (f != NULL)
        goto out;
    o = calloc(1, sizeof(*o));
    f = calloc(1, sizeof(*f));
    if (o == NULL || f == NULL || (f->name = strdup(name)) == NULL) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    memset(&q.r, 0, sizeof(q.r));
    q.r.module = m->h;
    q.r.name_len = (uint32_t)nlen;
    memcpy(q.name, name, nlen);
    e = vcu__call(m->dev, VCU_OP_CU_MODULE_GET_FUNCTION, &q, (uint32_t)(sizeof(q.r) + nlen),
                  NULL, 0, o, sizeof(*o));
    if (e != CUDA_SUCCESS)
        goto fail;
    /* The host's layout is checked before a launch trusts it. */
    if (o->f.nparams > VCU_CU_MAX_PARAMS || o->f.param_bytes > VCU_CU_MAX_PARAM_BYTES) {
        e = CUDA_ERROR_UNKNOWN;
        goto fail;
    }
    for (uint32_t i = 0; i < o->f.nparams; i++) {
        if ((uint64_t)o->p[i].offset + o->p[i].size > o->f.param_bytes) {
            e = CUDA_ERROR_UNKNOWN;
            goto fail;
        }
    }
    f->params = malloc(((size_t)o->f.nparams + 1) * sizeof(*f->params));
    if (f->params == NULL) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    memcpy(f->params, o->p, (size_t)o->f.nparams * sizeof(*f->params));
    f->nparams = o->f.nparams;
    f->param_bytes = o->f.param_bytes;
    f->h = o->f.function;
    f->mod = m;
    if (vcu__reg_add(f, VCU__K_FUNCTION) != 0) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    f->next = m->funcs;
    m->funcs = f;
out:
    pthread_mutex_unlock(&vcu__drv.lock);
    free(o);
    *out = f;
    return CUDA_SUCCESS;

fail:
    pthread_mutex_unlock(&vcu__drv.lock);
    if (f != NULL) {
        free(f->name);
        free(f->params);
        free(f);
    }
    free(o);
    return e;
}

/* The names vcu_image_kernels finds, each once.  VCU__NAMES_NOMEM stops
 * it (vcu_kernel_fn's negative results are its own). */
#define VCU__NAMES_NOMEM (-2)

typedef struct {
    char **names;
    unsigned int n, cap;
} vcu__names_t;

static int vcu__names_add(void *arg, const char *name, size_t len)
{
    vcu__names_t *v = arg;
    char *s;

    for (unsigned int i = 0; i < v->n; i++)
        if (strncmp(v->names[i], name, len) == 0 && v->names[i][len] == '\0')
            return 0;
    if (v->n == v->cap) {
        unsigned int cap = v->cap ? v->cap * 2 : 16;
        char **p = realloc(v->names, cap * sizeof(*p));

        if (p == NULL)
            return VCU__NAMES_NOMEM;
        v->names = p;
        v->cap = cap;
    }
    if ((s = strndup(name, len)) == NULL)
        return VCU__NAMES_NOMEM;
    v->names[v->n++] = s;
    return 0;
}

/* zstd, for fatbin entries compressed with it: the system's libzstd.so.1,
 * loaded at the first need (none: such entries are not read). */
static size_t (*vcu__zstd_decompress)(void *, size_t, const void *, size_t);
static unsigned (*vcu__zstd_is_error)(size_t);
static pthread_once_t vcu__zstd_once = PTHREAD_ONCE_INIT;

static void vcu__zstd_load(void)
{
    void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL)
        return;
    *(void **)&vcu__zstd_is_error = dlsym(lib, "ZSTD_isError");
    *(void **)&vcu__zstd_decompress = dlsym(lib, "ZSTD_decompress");
    if (vcu__zstd_is_error == NULL)
        vcu__zstd_decompress = NULL;
}

static size_t vcu__unzstd(void *dst, size_t cap, const void *src, size_t n)
{
    size_t r;

    pthread_once(&vcu__zstd_once, vcu__zstd_load);
    if (vcu__zstd_decompress == NULL)
        return 0;
    r = vcu__zstd_decompress(dst, cap, src, n);
    return vcu__zstd_is_error(r) ? 0 : r;
}

CUresult vcu__module_kernels(vcu__module_t *m, void (*fn)(void *arg, CUfunction f), void *arg,
                             unsigned int *count)
{
    static int logged;
    vcu__names_t v = { NULL, 0, 0 };
    const void *img = m->lib != NULL ? m->lib->image : m->image;
    uint64_t len = m->lib != NULL ? m->lib->len : m->image_len;
    int major = 0, minor = 0;
    CUresult e = CUDA_SUCCESS;
    long r;

    *count = 0;
    if (img == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;       /* the copy failed at the load */
    e = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, m->dev);
    if (e == CUDA_SUCCESS)
        e = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, m->dev);
    if (e != CUDA_SUCCESS)
        return e;
    r = vcu_image_kernels(img, (size_t)len, (unsigned int)(major * 10 + minor), vcu__names_add,
                          &v, vcu__unzstd);
    if (r == VCU__NAMES_NOMEM) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (r < 0) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): a module's kernels cannot be listed "
                               "(its image is not read here; zstd needs libzstd.so.1)\n");
        e = CUDA_ERROR_NOT_SUPPORTED;
    }
    for (unsigned int i = 0; i < v.n && e == CUDA_SUCCESS; i++) {
        vcu__func_t *f;

        e = vcu__module_function(m, v.names[i], &f);
        if (e == CUDA_SUCCESS) {
            fn(arg, (CUfunction)f);
            (*count)++;
        }
    }
    for (unsigned int i = 0; i < v.n; i++)
        free(v.names[i]);
    free(v.names);
    return e;
}

VCU__EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    vcu__module_t *m;
    vcu__func_t *f;
    vcu__ctx_t *c;
    CUresult e;

    if (hfunc == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__module_here(c, hmod, &m);
    if (e == CUDA_SUCCESS)
        e = vcu__module_function(m, name, &f);
    if (e != CUDA_SUCCESS)
        return e;
    *hfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                          const char *name)
{
    struct {
        struct vcu_cu_name_req r;
        char name[VCU_CU_NAME_MAX];
    } q;
    struct vcu_cu_mem_range_resp o;
    vcu__module_t *m;
    vcu__ctx_t *c;
    size_t nlen;
    CUresult e;

    if (name == NULL || (dptr == NULL && bytes == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    nlen = strnlen(name, VCU_CU_NAME_MAX + 1);
    if (nlen == 0 || nlen > VCU_CU_NAME_MAX)
        return CUDA_ERROR_NOT_FOUND;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__module_here(c, hmod, &m);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&q.r, 0, sizeof(q.r));
    q.r.module = m->h;
    q.r.name_len = (uint32_t)nlen;
    memcpy(q.name, name, nlen);
    e = vcu__call(c->dev, VCU_OP_CU_MODULE_GET_GLOBAL, &q, (uint32_t)(sizeof(q.r) + nlen), NULL,
                  0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    if (dptr != NULL)
        *dptr = (CUdeviceptr)o.base;
    if (bytes != NULL)
        *bytes = (size_t)o.size;
    return CUDA_SUCCESS;
}

/* ---- launches ------------------------------------------------------------ */

/*
 * The parameter buffer, laid out by the offsets the host reported for
 * the kernel (CU_MODULE_GET_FUNCTION, from cuFuncGetParamInfo): from
 * kernelParams (one pointer per parameter) or from extra's
 * CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE (the buffer as it is).
 */
CUresult vcu__pack(const vcu__func_t *f, void **kernelParams, void **extra, char *buf)
{
    void *ebuf = NULL;
    size_t esize = 0;
    int have_size = 0;

    memset(buf, 0, f->param_bytes);
    /* An extra holding only CU_LAUNCH_PARAM_END says nothing (NVIDIA's
     * driver then takes kernelParams, measured). */
    if (extra != NULL && extra[0] == CU_LAUNCH_PARAM_END)
        extra = NULL;
    if (kernelParams != NULL && extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (extra != NULL) {
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (i >= 64)
                return CUDA_ERROR_INVALID_VALUE;
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
                ebuf = extra[i + 1];
            } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
                if (extra[i + 1] == NULL)
                    return CUDA_ERROR_INVALID_VALUE;
                esize = *(size_t *)extra[i + 1];
                have_size = 1;
            } else {
                return CUDA_ERROR_INVALID_VALUE;
            }
        }
        if (f->param_bytes == 0)
            return CUDA_SUCCESS;
        if (ebuf == NULL || !have_size || esize < f->param_bytes)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(buf, ebuf, f->param_bytes);
        return CUDA_SUCCESS;
    }
    if (f->nparams > 0 && kernelParams == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; i < f->nparams; i++) {
        if (kernelParams[i] == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(buf + f->params[i].offset, kernelParams[i], f->params[i].size);
    }
    return CUDA_SUCCESS;
}

/* cuda.h's names of the launch attributes, for the refusals' log. */
static const char *vcu__attr_name(unsigned int id)
{
    static const char *const names[] = {
        "IGNORE", "ACCESS_POLICY_WINDOW", "COOPERATIVE", "SYNCHRONIZATION_POLICY",
        "CLUSTER_DIMENSION", "CLUSTER_SCHEDULING_POLICY_PREFERENCE",
        "PROGRAMMATIC_STREAM_SERIALIZATION", "PROGRAMMATIC_EVENT", "PRIORITY",
        "MEM_SYNC_DOMAIN_MAP", "MEM_SYNC_DOMAIN", "PREFERRED_CLUSTER_DIMENSION",
        "LAUNCH_COMPLETION_EVENT", "DEVICE_UPDATABLE_KERNEL_NODE",
        "PREFERRED_SHARED_MEMORY_CARVEOUT", "15", "NVLINK_UTIL_CENTRIC_SCHEDULING",
    };

    return id < sizeof(names) / sizeof(names[0]) ? names[id] : "unknown";
}

/*
 * A CUlaunchConfig's attributes on the wire (out: VCU_CU_MAX_LAUNCH_ATTRS
 * entries, *n those used; IGNORE entries are dropped).  Events must be of
 * the context's device.  An attribute this library does not carry is
 * CUDA_ERROR_NOT_SUPPORTED, logged once with its name.
 */
static CUresult vcu__attrs_wire(vcu__ctx_t *c, const CUlaunchConfig *cfg,
                                struct vcu_cu_launch_attr *out, uint32_t *n)
{
    static int logged[32], too_many;
    vcu__event_t *ev;

    *n = 0;
    if (cfg->numAttrs > 0 && cfg->attrs == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < cfg->numAttrs; i++) {
        const CUlaunchAttribute *a = &cfg->attrs[i];
        const CUlaunchAttributeValue *v = &a->value;
        struct vcu_cu_launch_attr w;

        memset(&w, 0, sizeof(w));
        w.id = (uint32_t)a->id;
        switch (a->id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
            continue;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            w.v[0] = (uint32_t)v->cooperative;
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            w.v[0] = (uint32_t)v->programmaticStreamSerializationAllowed;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            w.v[0] = (uint32_t)v->priority;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
            w.v[0] = (uint32_t)v->memSyncDomain;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
            w.v[0] = v->memSyncDomainMap.default_;
            w.v[1] = v->memSyncDomainMap.remote;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
            w.v[0] = (uint32_t)v->clusterSchedulingPolicyPreference;
            break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            w.v[0] = v->sharedMemCarveout;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            w.v[0] = v->clusterDim.x;
            w.v[1] = v->clusterDim.y;
            w.v[2] = v->clusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
            w.v[0] = v->preferredClusterDim.x;
            w.v[1] = v->preferredClusterDim.y;
            w.v[2] = v->preferredClusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
            ev = (vcu__event_t *)v->programmaticEvent.event;
            if (!vcu__reg_has(ev, VCU__K_EVENT) || ev->dev != c->dev)
                return CUDA_ERROR_INVALID_HANDLE;
            w.handle = ev->h;
            w.v[0] = (uint32_t)v->programmaticEvent.flags;
            w.v[1] = (uint32_t)v->programmaticEvent.triggerAtBlockStart;
            break;
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
            ev = (vcu__event_t *)v->launchCompletionEvent.event;
            if (!vcu__reg_has(ev, VCU__K_EVENT) || ev->dev != c->dev)
                return CUDA_ERROR_INVALID_HANDLE;
            w.handle = ev->h;
            w.v[0] = (uint32_t)v->launchCompletionEvent.flags;
            break;
        default:
            vcu__log_once(&logged[(unsigned int)a->id % 32],
                          "libcuda (virtio-cuda): cuLaunchKernelEx: launch attribute "
                          "CU_LAUNCH_ATTRIBUTE_%s (%u) is not supported\n",
                          vcu__attr_name((unsigned int)a->id), (unsigned int)a->id);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        if (*n == VCU_CU_MAX_LAUNCH_ATTRS) {
            vcu__log_once(&too_many, "libcuda (virtio-cuda): cuLaunchKernelEx: more than %u "
                                     "launch attributes are not supported\n",
                          VCU_CU_MAX_LAUNCH_ATTRS);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        out[(*n)++] = w;
    }
    return CUDA_SUCCESS;
}

/*
 * Every launch, and the cluster occupancy queries, which describe one:
 * the function (or a kernel's function in the current context), dims and
 * stream checked, then op sent.  CU_LAUNCH carries flags; CU_LAUNCH_EX
 * and the queries cfg's attributes (flags 0).  The queries send no
 * parameters and get *value back.
 */
static CUresult vcu__launch_op(uint32_t op, CUfunction fn, const CUlaunchConfig *cfg,
                               void **kernelParams, void **extra, int ptsz, uint32_t flags,
                               uint64_t *value)
{
    vcu__launch_req_t *q;
    vcu__func_t *f = (vcu__func_t *)fn;
    struct vcu_cu_u64_resp o;
    size_t head;
    char *params;
    uint32_t nattrs = 0;
    vcu__ctx_t *c;
    uint64_t wire;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    /* A CUkernel serves as a CUfunction of the current context (cuda.h). */
    if (!vcu__reg_has(f, VCU__K_FUNCTION) && vcu__reg_has(f, VCU__K_KERNEL)) {
        e = cuKernelGetFunction(&fn, (CUkernel)f);
        if (e != CUDA_SUCCESS)
            return e;
        f = (vcu__func_t *)fn;
    }
    if (!vcu__reg_has(f, VCU__K_FUNCTION))
        return CUDA_ERROR_INVALID_HANDLE;
    if (f->mod->dev != c->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (cfg->gridDimX == 0 || cfg->gridDimY == 0 || cfg->gridDimZ == 0 ||
        cfg->blockDimX == 0 || cfg->blockDimY == 0 || cfg->blockDimZ == 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__stream(c, cfg->hStream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    q = vcu__launch_buf();
    if (q == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&q->r, 0, sizeof(q->r));
    if (op == VCU_OP_CU_LAUNCH) {
        head = sizeof(q->r.l);
    } else {
        e = vcu__attrs_wire(c, cfg, q->attrs, &nattrs);
        head = sizeof(q->r) + nattrs * sizeof(q->attrs[0]);
    }
    /* The parameters follow the attributes (none for CU_LAUNCH). */
    params = (char *)q + head;
    if (e == CUDA_SUCCESS && op != VCU_OP_CU_OCCUPANCY_CLUSTERS &&
        op != VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE)
        e = vcu__pack(f, kernelParams, extra, params);
    if (e == CUDA_SUCCESS) {
        int query = op == VCU_OP_CU_OCCUPANCY_CLUSTERS || op == VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE;

        q->r.l.function = f->h;
        q->r.l.stream = wire;
        q->r.l.grid[0] = cfg->gridDimX;
        q->r.l.grid[1] = cfg->gridDimY;
        q->r.l.grid[2] = cfg->gridDimZ;
        q->r.l.block[0] = cfg->blockDimX;
        q->r.l.block[1] = cfg->blockDimY;
        q->r.l.block[2] = cfg->blockDimZ;
        q->r.l.shared_mem = cfg->sharedMemBytes;
        q->r.l.flags = flags;
        q->r.l.param_bytes = query ? 0 : f->param_bytes;
        if (op != VCU_OP_CU_LAUNCH)
            q->r.nattrs = nattrs;
        /* A plain launch whose configuration is known good goes without
         * waiting (vcu__launch_may_defer); launches with attributes and
         * the occupancy queries wait. */
        if (op == VCU_OP_CU_LAUNCH &&
            vcu__launch_may_defer(f, q->r.l.grid, q->r.l.block, cfg->sharedMemBytes, flags))
            e = vcu__call_async(c->dev, op, q, (uint32_t)(head + q->r.l.param_bytes), NULL, 0);
        else
            e = vcu__call(c->dev, op, q, (uint32_t)(head + q->r.l.param_bytes), NULL, 0,
                          query ? &o : NULL, query ? sizeof(o) : 0);
        if (e == CUDA_SUCCESS && query)
            *value = o.value;
    }
    vcu__launch_buf_put(q);
    return e;
}

static CUresult vcu__launch(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                            unsigned int bx, unsigned int by, unsigned int bz,
                            unsigned int shmem, CUstream stream, void **kernelParams,
                            void **extra, int ptsz, uint32_t flags)
{
    CUlaunchConfig cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = gx;
    cfg.gridDimY = gy;
    cfg.gridDimZ = gz;
    cfg.blockDimX = bx;
    cfg.blockDimY = by;
    cfg.blockDimZ = bz;
    cfg.sharedMemBytes = shmem;
    cfg.hStream = stream;
    return vcu__launch_op(VCU_OP_CU_LAUNCH, fn, &cfg, kernelParams, extra, ptsz, flags, NULL);
}

/* With launch attributes (CU_LAUNCH_EX); the host checks them again. */
VCU__EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__launch_op(VCU_OP_CU_LAUNCH_EX, f, config, kernelParams, extra, 0, 0, NULL);
}

VCU__EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                           void **kernelParams, void **extra)
{
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__launch_op(VCU_OP_CU_LAUNCH_EX, f, config, kernelParams, extra, 1, 0, NULL);
}

/* The host's driver answers for the config (CU_OCCUPANCY_CLUSTERS). */
VCU__EXPORT CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                                  const CUlaunchConfig *config)
{
    uint64_t v = 0;
    CUresult e;

    if (numClusters == NULL || config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__launch_op(VCU_OP_CU_OCCUPANCY_CLUSTERS, func, config, NULL, NULL, 0, 0, &v);
    if (e == CUDA_SUCCESS)
        *numClusters = v > INT32_MAX ? INT32_MAX : (int)v;
    return e;
}

/* The host's driver answers for the config (CU_OCCUPANCY_CLUSTER_SIZE). */
VCU__EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                                        const CUlaunchConfig *config)
{
    uint64_t v = 0;
    CUresult e;

    if (clusterSize == NULL || config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__launch_op(VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE, func, config, NULL, NULL, 0, 0, &v);
    if (e == CUDA_SUCCESS)
        *clusterSize = v > INT32_MAX ? INT32_MAX : (int)v;
    return e;
}

VCU__EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, extra, 0, 0);
}

VCU__EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                         unsigned int gridDimY, unsigned int gridDimZ,
                                         unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes,
                                         CUstream hStream, void **kernelParams, void **extra)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, extra, 1, 0);
}

/* All blocks resident at once (the host's driver checks the grid). */
VCU__EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, NULL, 0,
                       VCU_CU_LAUNCH_F_COOPERATIVE);
}

VCU__EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                    unsigned int gridDimY, unsigned int gridDimZ,
                                                    unsigned int blockDimX,
                                                    unsigned int blockDimY,
                                                    unsigned int blockDimZ,
                                                    unsigned int sharedMemBytes,
                                                    CUstream hStream, void **kernelParams)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, NULL, 1,
                       VCU_CU_LAUNCH_F_COOPERATIVE);
}

/* ---- streams ------------------------------------------------------------ */

/* The current context's stream priorities (the host side of
 * cuCtxGetStreamPriorityRange is generated; either pointer may be NULL
 * here). */
static CUresult vcu__prio_range(vcu__ctx_t *c, int *least, int *greatest)
{
    struct vcu_call_cuCtxGetStreamPriorityRange_req r;
    struct vcu_call_cuCtxGetStreamPriorityRange_resp o;
    CUresult e;

    VCU_CALL_INIT(r, cuCtxGetStreamPriorityRange);
    e = vcu__call(c->dev, VCU_OP_CU_CALL, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *least = (int)o.leastPriority;
    *greatest = (int)o.greatestPriority;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    vcu__ctx_t *c;
    int l, g;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__prio_range(c, &l, &g);
    if (e != CUDA_SUCCESS)
        return e;
    if (leastPriority != NULL)
        *leastPriority = l;
    if (greatestPriority != NULL)
        *greatestPriority = g;
    return CUDA_SUCCESS;
}

/* A stream of the current context; priority clamped to the context's
 * range as the driver clamps it (cuda.h), and kept for
 * cuStreamGetPriority. */
static CUresult vcu__stream_create(CUstream *phStream, unsigned int Flags, int priority,
                                   int prio_given)
{
    struct vcu_cu_stream_create_req r;
    vcu__stream_t *s;
    vcu__ctx_t *c;
    int least = 0, greatest = 0;
    CUresult e;

    if (phStream == NULL || (Flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    if (prio_given) {
        e = vcu__prio_range(c, &least, &greatest);
        if (e != CUDA_SUCCESS)
            return e;
        priority = priority > least ? least : priority < greatest ? greatest : priority;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&r, 0, sizeof(r));
    r.flags = Flags;
    r.priority = (uint32_t)priority;
    s->flags = Flags;
    s->priority = priority;
    s->id = vcu__next_id();
    s->dev = c->dev;
    e = vcu__host_obj_new(s, VCU__K_STREAM, c->dev, VCU_OP_CU_STREAM_CREATE, &r, sizeof(r), NULL,
                          0, VCU_OP_CU_STREAM_DESTROY, &s->h);
    if (e != CUDA_SUCCESS) {
        free(s);
        return e;
    }
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return vcu__stream_create(phStream, Flags, 0, 0);
}

VCU__EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                int priority)
{
    return vcu__stream_create(phStream, flags, priority, 1);
}

/* A stream's flags and priority as created; the default streams' are 0
 * (a blocking stream of the default priority). */
static CUresult vcu__stream_props(CUstream hStream, unsigned int *flags, int *priority)
{
    vcu__stream_t *s = (vcu__stream_t *)hStream;
    vcu__ctx_t *c;
    CUresult e;

    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
        e = vcu__cur(&c);
        if (e != CUDA_SUCCESS)
            return e;
        *flags = 0;
        *priority = 0;
        return CUDA_SUCCESS;
    }
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(s, VCU__K_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    *flags = s->flags;
    *priority = s->priority;
    return CUDA_SUCCESS;
}

/*
 * cuStreamCopyAttributes[_ptsz] (CU_CALL, generated wire): the driver
 * copies every stream attribute, the priority too (measured on the H100:
 * the copy's CU_LAUNCH_ATTRIBUTE_PRIORITY is then the source's), so the
 * record cuStreamGetPriority answers from takes the source's priority.
 */
static CUresult vcu__stream_copy_attrs(CUstream dst, CUstream src, int ptsz)
{
    struct vcu_call_cuStreamCopyAttributes_req r;
    struct vcu_call_cuStreamCopyAttributes_resp o;
    unsigned int fl;
    vcu__rc_t rc;
    int prio = 0;
    CUresult e;

    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    e = vcu__rc_at_obj(&rc, VCU__K_STREAM, (const void *)dst, ptsz);
    if (e == CUDA_SUCCESS)
        e = vcu__rc_handle(&rc, VCU__K_STREAM, (const void *)dst, ptsz, &r.dst);
    if (e == CUDA_SUCCESS)
        e = vcu__rc_handle(&rc, VCU__K_STREAM, (const void *)src, ptsz, &r.src);
    if (e == CUDA_SUCCESS)
        e = vcu__stream_props(src, &fl, &prio);
    if (e == CUDA_SUCCESS)
        e = vcu__rc_call(&rc, VCU_CALL_cuStreamCopyAttributes, &r.c, sizeof(r), &o.r, sizeof(o));
    if (e == CUDA_SUCCESS && dst != NULL && dst != CU_STREAM_LEGACY && dst != CU_STREAM_PER_THREAD)
        ((vcu__stream_t *)dst)->priority = prio;
    return e;
}

VCU__EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
    return vcu__stream_copy_attrs(dst, src, 0);
}

VCU__EXPORT CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src)
{
    return vcu__stream_copy_attrs(dst, src, 1);
}

VCU__EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    int prio;

    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__stream_props(hStream, flags, &prio);
}

VCU__EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
    return cuStreamGetFlags(hStream, flags);
}

VCU__EXPORT CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    unsigned int flags;

    if (priority == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__stream_props(hStream, &flags, priority);
}

VCU__EXPORT CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
    return cuStreamGetPriority(hStream, priority);
}

/*
 * The device, context and id of a stream: a default stream is the current
 * context's; a stream object serves every context of its device, so its
 * context is the current one where that is of its device, else the
 * device's primary context.
 */
static CUresult vcu__stream_where(CUstream hStream, vcu__ctx_t **ctx, unsigned long long *id)
{
    vcu__stream_t *s = (vcu__stream_t *)hStream;
    vcu__ctx_t *c = NULL;
    CUresult e;

    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
        e = vcu__cur(&c);
        if (e != CUDA_SUCCESS)
            return e;
        *ctx = c;
        *id = hStream == CU_STREAM_PER_THREAD ? 2 : 1;
        return CUDA_SUCCESS;
    }
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(s, VCU__K_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    if (vcu__cur(&c) != CUDA_SUCCESS || c->dev != s->dev) {
        e = vcu__primary(s->dev, &c);
        if (e != CUDA_SUCCESS)
            return e;
    }
    *ctx = c;
    *id = s->id;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    unsigned long long id;
    vcu__ctx_t *c;
    CUresult e;

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__stream_where(hStream, &c, &id);
    if (e == CUDA_SUCCESS)
        *pctx = (CUcontext)c;
    return e;
}

VCU__EXPORT CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    return cuStreamGetCtx(hStream, pctx);
}

/* No green contexts here: *pGreenCtx is always NULL. */
VCU__EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    CUresult e;

    if (pCtx == NULL || pGreenCtx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = cuStreamGetCtx(hStream, pCtx);
    if (e == CUDA_SUCCESS)
        *pGreenCtx = NULL;
    return e;
}

VCU__EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx,
                                            CUgreenCtx *pGreenCtx)
{
    return cuStreamGetCtx_v2(hStream, pCtx, pGreenCtx);
}

VCU__EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    unsigned long long id;
    vcu__ctx_t *c;
    CUresult e;

    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__stream_where(hStream, &c, &id);
    if (e == CUDA_SUCCESS)
        *device = c->dev;
    return e;
}

VCU__EXPORT CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{
    return cuStreamGetDevice(hStream, device);
}

VCU__EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    vcu__ctx_t *c;

    if (streamId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__stream_where(hStream, &c, streamId);
}

/* NULL is the per-thread stream here. */
VCU__EXPORT CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
    return cuStreamGetId(hStream == NULL ? CU_STREAM_PER_THREAD : hStream, streamId);
}

/* A limit of the current context's device (CU_CTX_SET_LIMIT, charged on
 * the host; cuCtxGetLimit is a remote call). */
VCU__EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct vcu_cu_limit_req r;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.limit = (uint32_t)limit;
    r.value = value;
    return vcu__call(c->dev, VCU_OP_CU_CTX_SET_LIMIT, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    vcu__stream_t *s = (vcu__stream_t *)hStream;
    struct vcu_cu_u64_req r;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(s, VCU__K_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    r.value = s->h;
    e = vcu__call(s->dev, VCU_OP_CU_STREAM_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__reg_del(s);
    free(s);
    return e;
}

VCU__EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

static CUresult vcu__stream_op(uint32_t op, CUstream hStream, int ptsz)
{
    struct vcu_cu_u64_req r;
    int dev;
    CUresult e = vcu__stream_alone(hStream, ptsz, &dev, &r.value);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__call(dev, op, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    return vcu__stream_op(VCU_OP_CU_STREAM_SYNCHRONIZE, hStream, 0);
}

VCU__EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return vcu__stream_op(VCU_OP_CU_STREAM_SYNCHRONIZE, hStream, 1);
}

VCU__EXPORT CUresult cuStreamQuery(CUstream hStream)
{
    return vcu__stream_op(VCU_OP_CU_STREAM_QUERY, hStream, 0);
}

VCU__EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    return vcu__stream_op(VCU_OP_CU_STREAM_QUERY, hStream, 1);
}

/* ---- events -------------------------------------------------------------- */

static CUresult vcu__event_here(vcu__ctx_t *c, CUevent ev, vcu__event_t **out);

static CUresult vcu__stream_wait(CUstream hStream, CUevent hEvent, unsigned int Flags, int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e;

    if (Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    memset(&r, 0, sizeof(r));
    if (e == CUDA_SUCCESS)
        e = vcu__event_here(c, hEvent, &v);
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.a);
    if (e != CUDA_SUCCESS)
        return e;
    r.b = v->h;
    r.c = Flags;
    /* Both handles are known good here: nothing is left to fail at the call. */
    return vcu__call_async(c->dev, VCU_OP_CU_STREAM_WAIT_EVENT, &r, sizeof(r), NULL, 0);
}

VCU__EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return vcu__stream_wait(hStream, hEvent, Flags, 0);
}

VCU__EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                            unsigned int Flags)
{
    return vcu__stream_wait(hStream, hEvent, Flags, 1);
}

static CUresult vcu__event_here(vcu__ctx_t *c, CUevent ev, vcu__event_t **out)
{
    vcu__event_t *v = (vcu__event_t *)ev;

    if (!vcu__reg_has(v, VCU__K_EVENT))
        return CUDA_ERROR_INVALID_HANDLE;
    if (v->dev != c->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = v;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct vcu_cu_u64_req r = { .value = Flags };
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e;

    if (phEvent == NULL ||
        (Flags & ~(unsigned int)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                 CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    /* As NVIDIA's: an interprocess event must not time. */
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    v = calloc(1, sizeof(*v));
    if (v == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v->dev = c->dev;
    e = vcu__host_obj_new(v, VCU__K_EVENT, c->dev, VCU_OP_CU_EVENT_CREATE, &r, sizeof(r), NULL, 0,
                          VCU_OP_CU_EVENT_DESTROY, &v->h);
    if (e != CUDA_SUCCESS) {
        free(v);
        return e;
    }
    *phEvent = (CUevent)v;
    return CUDA_SUCCESS;
}

/* flags: CU_EVENT_RECORD_DEFAULT, or CU_EVENT_RECORD_EXTERNAL (in a
 * capture, an event record node of the graph; outside one the driver
 * refuses it, CUDA_ERROR_ILLEGAL_STATE on the H100, so it is sent
 * synchronously: the refusal is this call's, as natively). */
static CUresult vcu__event_record(CUevent hEvent, CUstream hStream, unsigned int flags, int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e;

    if (flags & ~(unsigned int)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__event_here(c, hEvent, &v);
    memset(&r, 0, sizeof(r));
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.b);
    if (e != CUDA_SUCCESS)
        return e;
    r.a = v->h;
    r.c = flags;
    if (flags & CU_EVENT_RECORD_EXTERNAL)
        return vcu__call(c->dev, VCU_OP_CU_EVENT_RECORD, &r, sizeof(r), NULL, 0, NULL, 0);
    return vcu__call_async(c->dev, VCU_OP_CU_EVENT_RECORD, &r, sizeof(r), NULL, 0);
}

VCU__EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return vcu__event_record(hEvent, hStream, CU_EVENT_RECORD_DEFAULT, 0);
}

VCU__EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return vcu__event_record(hEvent, hStream, CU_EVENT_RECORD_DEFAULT, 1);
}

VCU__EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return vcu__event_record(hEvent, hStream, flags, 0);
}

VCU__EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                 unsigned int flags)
{
    return vcu__event_record(hEvent, hStream, flags, 1);
}

VCU__EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    struct vcu_cu_u64_req r;
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__event_here(c, hEvent, &v);
    if (e != CUDA_SUCCESS)
        return e;
    r.value = v->h;
    return vcu__call(c->dev, VCU_OP_CU_EVENT_SYNCHRONIZE, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    struct vcu_cu_u64_req r;
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__event_here(c, hEvent, &v);
    if (e != CUDA_SUCCESS)
        return e;
    r.value = v->h;
    return vcu__call(c->dev, VCU_OP_CU_EVENT_QUERY, &r, sizeof(r), NULL, 0, NULL, 0);
}

/* The first ABI, the same as the remote cuEventElapsedTime_v2's. */
VCU__EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

VCU__EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    struct vcu_cu_u64_req r;
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__event_here(c, hEvent, &v);
    if (e != CUDA_SUCCESS)
        return e;
    r.value = v->h;
    e = vcu__call(c->dev, VCU_OP_CU_EVENT_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__reg_del(v);
    free(v);
    return e;
}

VCU__EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

/* ---- tensor maps ---------------------------------------------------------- */

/*
 * A CUtensorMap is made by the host's driver (CU_TENSOR_MAP) in the
 * current context's device: its 128 bytes come back and are passed to
 * kernels as they are.
 */
static CUresult vcu__tmap(struct vcu_cu_tmap_req *r, CUtensorMap *tensorMap)
{
    struct vcu_cu_tmap_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (tensorMap == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call(c->dev, VCU_OP_CU_TENSOR_MAP, r, sizeof(*r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS)
        memcpy(tensorMap, o.map, sizeof(o.map));
    return e;
}

/* The fields the encoders share, checked; rank entries of each array. */
static CUresult vcu__tmap_common(struct vcu_cu_tmap_req *r, uint32_t kind,
                                 CUtensorMapDataType type, cuuint32_t rank, void *addr,
                                 const cuuint64_t *dim, const cuuint64_t *strides,
                                 const cuuint32_t *estrides, CUtensorMapInterleave il,
                                 CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                 CUtensorMapFloatOOBfill oob)
{
    memset(r, 0, sizeof(*r));
    if (rank == 0 || rank > VCU_CU_TMAP_MAX_RANK || dim == NULL || estrides == NULL ||
        (rank > 1 && strides == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    r->kind = kind;
    r->data_type = (uint32_t)type;
    r->rank = rank;
    r->interleave = (uint32_t)il;
    r->swizzle = (uint32_t)sw;
    r->l2_promotion = (uint32_t)l2;
    r->oob_fill = (uint32_t)oob;
    r->global_address = (uint64_t)(uintptr_t)addr;
    for (cuuint32_t i = 0; i < rank; i++) {
        r->global_dim[i] = dim[i];
        r->element_strides[i] = estrides[i];
        if (i + 1 < rank)
            r->global_strides[i] = strides[i];
    }
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap,
                                            CUtensorMapDataType tensorDataType,
                                            cuuint32_t tensorRank, void *globalAddress,
                                            const cuuint64_t *globalDim,
                                            const cuuint64_t *globalStrides,
                                            const cuuint32_t *boxDim,
                                            const cuuint32_t *elementStrides,
                                            CUtensorMapInterleave interleave,
                                            CUtensorMapSwizzle swizzle,
                                            CUtensorMapL2promotion l2Promotion,
                                            CUtensorMapFloatOOBfill oobFill)
{
    struct vcu_cu_tmap_req r;
    CUresult e = vcu__tmap_common(&r, VCU_CU_TMAP_TILED, tensorDataType, tensorRank,
                                  globalAddress, globalDim, globalStrides, elementStrides,
                                  interleave, swizzle, l2Promotion, oobFill);

    if (e != CUDA_SUCCESS)
        return e;
    if (boxDim == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < tensorRank; i++)
        r.box_dim[i] = boxDim[i];
    return vcu__tmap(&r, tensorMap);
}

VCU__EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap,
                                             CUtensorMapDataType tensorDataType,
                                             cuuint32_t tensorRank, void *globalAddress,
                                             const cuuint64_t *globalDim,
                                             const cuuint64_t *globalStrides,
                                             const int *pixelBoxLowerCorner,
                                             const int *pixelBoxUpperCorner,
                                             cuuint32_t channelsPerPixel,
                                             cuuint32_t pixelsPerColumn,
                                             const cuuint32_t *elementStrides,
                                             CUtensorMapInterleave interleave,
                                             CUtensorMapSwizzle swizzle,
                                             CUtensorMapL2promotion l2Promotion,
                                             CUtensorMapFloatOOBfill oobFill)
{
    struct vcu_cu_tmap_req r;
    CUresult e = vcu__tmap_common(&r, VCU_CU_TMAP_IM2COL, tensorDataType, tensorRank,
                                  globalAddress, globalDim, globalStrides, elementStrides,
                                  interleave, swizzle, l2Promotion, oobFill);

    if (e != CUDA_SUCCESS)
        return e;
    if (tensorRank < 3 || pixelBoxLowerCorner == NULL || pixelBoxUpperCorner == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i + 2 < tensorRank; i++) {
        r.lower_corner[i] = (uint32_t)pixelBoxLowerCorner[i];
        r.upper_corner[i] = (uint32_t)pixelBoxUpperCorner[i];
    }
    r.channels_per_pixel = channelsPerPixel;
    r.pixels_per_column = pixelsPerColumn;
    return vcu__tmap(&r, tensorMap);
}

VCU__EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    struct vcu_cu_tmap_req r;

    if (tensorMap == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_TMAP_REPLACE_ADDRESS;
    r.global_address = (uint64_t)(uintptr_t)globalAddress;
    memcpy(r.map, tensorMap, sizeof(r.map));
    return vcu__tmap(&r, tensorMap);
}
