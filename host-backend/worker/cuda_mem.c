/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Memory: allocations (charged), copies, memsets, stream-ordered
 * allocations and the session's pools.
 */
#include "cuda_int.h"

/* --- memory --- */

/* Records p, charged ch bytes; on failure frees it (the caller gives
 * the charge back). */
int vcu__track_dev(vcu__op_t *o, CUdeviceptr p, uint32_t d, uint32_t flags, uint64_t ch)
{
    uint64_t v = d | flags | ((ch / VCU__ACCT_GRAIN) << VCU__ALLOC_SHIFT);

    if (p == 0 || vcu__pset_add(&o->cs->allocs, p, v) == 0)
        return 0;
    o->cu->fn.cuMemFree(p);
    o->res = CUDA_ERROR_OUT_OF_MEMORY;
    return -1;
}

/* vcu__track_dev on the request's device, with the guest context the
 * request names (ctx_allocs). */
static int vcu__track(vcu__op_t *o, CUdeviceptr p, uint32_t flags, uint64_t ch)
{
    uint32_t ctx = vcu__ctx_of(o);

    if (vcu__track_dev(o, p, vcu__dev_of(o), flags, ch) != 0)
        return -1;
    if (p == 0 || ctx == 0 || vcu__pset_add(&o->cs->ctx_allocs, p, ctx) == 0)
        return 0;
    vcu__alloc_forget(o->cs, p);
    o->cu->fn.cuMemFree(p);
    o->res = CUDA_ERROR_OUT_OF_MEMORY;
    return -1;
}

void vcu__alloc_forget(vcu__cuda_sess_t *cs, uint64_t p)
{
    vcu__pset_del(&cs->allocs, p);
    vcu__pset_del(&cs->ctx_allocs, p);
    vcu__mig_freed(cs, p);
}

/* Charged before the driver is asked: past the VM's quota the guest gets
 * CUDA_ERROR_OUT_OF_MEMORY, as from a full GPU, and nothing else
 * changes.  Size 0 charges nothing (the driver refuses it). */
uint32_t vcu__op_CU_MEM_ALLOC(vcu__op_t *o)
{
    struct vcu_cu_mem_alloc_req rq;
    CUdeviceptr p = 0;
    uint32_t d = vcu__dev_of(o);
    uint64_t ch;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    ch = vcu__grain(rq.size);
    if (ch > VCU__ACCT_MAX || vcu__charge(o->cs, d, ch) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = o->cu->fn.cuMemAlloc(&p, (size_t)rq.size);
    if (o->res == CUDA_SUCCESS && vcu__track(o, p, 0, ch) == 0) {
        o->rb.u64.value = p;
        if (p == 0)
            vcu__uncharge(o->cs, d, ch);
        return VCU_S_OK;
    }
    vcu__uncharge(o->cs, d, ch);
    return VCU_S_OK;
}

/* Only pointers this session allocated may be freed (CUDA would refuse
 * others anyway; pool memory, though, is not bound to one context). */
static int vcu__untrack(vcu__op_t *o, CUdeviceptr p, uint64_t *val)
{
    if (!vcu__pset_find(&o->cs->allocs, p, val)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return -1;
    }
    return 0;
}

uint32_t vcu__op_CU_MEM_FREE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    uint64_t v = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    /* Graph memory a launch allocated: back to the graphs' memory,
     * charged as that (vcu__gmem_settle). */
    if (vcu__galloc_has(o->cs, rq.value) && !vcu__pset_find(&o->cs->allocs, rq.value, &v)) {
        o->res = o->cu->fn.cuMemFree((CUdeviceptr)rq.value);
        return VCU_S_OK;
    }
    if (vcu__untrack(o, rq.value, &v) != 0)
        return VCU_S_OK;
    o->res = o->cu->fn.cuMemFree((CUdeviceptr)rq.value);
    if (o->res == CUDA_SUCCESS) {
        vcu__alloc_forget(o->cs, rq.value);
        vcu__ipc_gone(o->cs, VCU_CU_IPC_MEM, rq.value);
        vcu__ipc_gone(o->cs, VCU_CU_IPC_POOL_PTR, rq.value);
        if (v & VCU__ALLOC_ASYNC) {
            vcu__pool_block_freed(o->cs, v);
        } else {
            vcu__uncharge(o->cs, VCU__ALLOC_DEV(v), VCU__ALLOC_CHARGE(v));
        }
    }
    return VCU_S_OK;
}

/* The events, then the streams, then the modules (their functions with
 * them) made in context number ctx on device d: how many went; the first
 * failure in o->res. */
static uint64_t vcu__ctx_handles_drop(vcu__op_t *o, uint32_t d, uint32_t ctx)
{
    static const uint8_t order[] = { VCU__H_EVENT, VCU__H_STREAM, VCU__H_MODULE };
    vcu__cuda_sess_t *cs = o->cs;
    uint64_t n = 0;
    uint32_t k, i;

    for (k = 0; k < sizeof(order); k++) {
        for (i = 0; i < cs->tab.cap; i++) {
            vcu__hent_t *e = &cs->tab.ent[i];
            uint64_t h = vcu__htab_handle_at(&cs->tab, i);
            CUresult r;

            if (h == 0 || e->type != order[k] || e->ctx != ctx || e->dev != d)
                continue;
            r = order[k] == VCU__H_EVENT    ? vcu__event_drop(o, h)
                : order[k] == VCU__H_STREAM ? vcu__stream_drop(o, h)
                                            : vcu__module_drop(o, h);
            if (r == CUDA_SUCCESS)
                n++;
            else if (o->res == CUDA_SUCCESS)
                o->res = r;
        }
    }
    return n;
}

/*
 * What the guest made in its context number rq.value, on the request's
 * device, goes, as a destroyed context's does (the guest synchronized
 * first): its events, streams and modules, and the memory CU_MEM_ALLOC
 * made; the reply counts them.  The numbers are the session's own: one
 * names nothing of another session.  What the driver will not free (a
 * context broken by a fault) stays the session's, and its error is the
 * result.
 */
uint32_t vcu__op_CU_CTX_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    vcu__cuda_sess_t *cs = o->cs;
    uint64_t n = 0;
    uint32_t i, d = vcu__dev_of(o);

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.value == 0 || rq.value > UINT32_MAX || o->nsegs != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    o->res = CUDA_SUCCESS;
    for (i = 0; i < cs->ctx_allocs.cap; i++) {
        uint64_t k = cs->ctx_allocs.keys[i], v = 0;
        CUresult r;

        if (k == 0 || k == VCU__PSET_TOMB || cs->ctx_allocs.vals[i] != rq.value)
            continue;
        if (!vcu__pset_find(&cs->allocs, k, &v) || VCU__ALLOC_DEV(v) != d)
            continue;
        r = o->cu->fn.cuMemFree((CUdeviceptr)k);
        if (r != CUDA_SUCCESS) {
            if (o->res == CUDA_SUCCESS)
                o->res = r;
            continue;
        }
        vcu__alloc_forget(cs, k);
        vcu__ipc_gone(cs, VCU_CU_IPC_MEM, k);
        vcu__uncharge(cs, d, VCU__ALLOC_CHARGE(v));
        n++;
    }
    /* Last: a module's unload may leave another context current. */
    n += vcu__ctx_handles_drop(o, d, (uint32_t)rq.value);
    o->rb.u64.value = n;
    return VCU_S_OK;
}

static uint32_t vcu__memcpy_host(vcu__op_t *o, int htod)
{
    struct vcu_cu_memcpy_req rq;
    const vcu_segment_t *s;
    CUstream st = NULL;
    int async, use_async, issued = 0;
    uint64_t off = 0;
    unsigned int i;
    CUresult r = CUDA_SUCCESS;

    memcpy(&rq, o->p, sizeof(rq));
    async = (rq.flags & VCU_CU_MEMCPY_F_ASYNC) != 0;
    if (rq.flags & ~VCU_CU_MEMCPY_F_ASYNC)
        return VCU_S_EINVAL;
    if (rq.size == 0 && o->nsegs == 0) {
        o->res = CUDA_SUCCESS;
        return VCU_S_OK;
    }
    s = vcu__seg(o, htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE);
    if (s == NULL || s->len != rq.size)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    if (async && vcu__stream(o, rq.stream, &st) != 0)
        return VCU_S_OK;
    /* A synchronous copy is issued where the blocking call would run,
     * on the legacy stream, and waited for without blocking. */
    use_async = async || (htod ? o->cu->fn.cuMemcpyHtoDAsync != NULL
                               : o->cu->fn.cuMemcpyDtoHAsync != NULL);
    if (!async)
        st = CU_STREAM_LEGACY;
    for (i = 0; i < s->iovcnt && r == CUDA_SUCCESS; i++) {
        CUdeviceptr dp = (CUdeviceptr)((htod ? rq.dst : rq.src) + off);
        size_t n = s->iov[i].iov_len;

        if (n == 0)
            continue;
        if (htod)
            r = use_async ? VCU__CU(o->cu, cuMemcpyHtoDAsync, dp, s->iov[i].iov_base, n, st)
                          : o->cu->fn.cuMemcpyHtoD(dp, s->iov[i].iov_base, n);
        else
            r = use_async ? VCU__CU(o->cu, cuMemcpyDtoHAsync, s->iov[i].iov_base, dp, n, st)
                          : o->cu->fn.cuMemcpyDtoH(s->iov[i].iov_base, dp, n);
        if (r == CUDA_SUCCESS)
            issued = 1;
        off += n;
    }
    /* The guest's pages are mapped only until the reply: nothing may
     * touch them after it, so the reply waits for the copy, unless the
     * guest keeps them until its next SESSION_FENCE (stable). */
    if (issued && use_async && (!async || !(s->flags & VCU_SEG_F_STABLE)) &&
        vcu__park_stream(o, st) != 0) {
        CUresult r2 = o->cu->fn.cuStreamSynchronize(st);

        if (r == CUDA_SUCCESS)
            r = r2;
    }
    o->res = r;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MEMCPY_HTOD(vcu__op_t *o)
{
    return vcu__memcpy_host(o, 1);
}

uint32_t vcu__op_CU_MEMCPY_DTOH(vcu__op_t *o)
{
    return vcu__memcpy_host(o, 0);
}

/* One device-to-device copy on st: between contexts dc and sc of two
 * devices (cuMemcpyPeerAsync) where dc is not NULL. */
static CUresult vcu__dtod_async(vcu__op_t *o, const struct vcu_cu_memcpy_req *rq, CUcontext dc,
                                CUcontext sc, CUstream st)
{
    if (dc != NULL)
        return VCU__CU(o->cu, cuMemcpyPeerAsync, rq->dst, dc, rq->src, sc, (size_t)rq->size, st);
    return VCU__CU(o->cu, cuMemcpyDtoDAsync, rq->dst, rq->src, (size_t)rq->size, st);
}

/*
 * CU_MEMCPY_DTOD, and CU_MEMCPY_PEER with the contexts dc and sc of its
 * two devices (NULL for DTOD), in the request device's context.
 */
static uint32_t vcu__memcpy_dtod(vcu__op_t *o, const struct vcu_cu_memcpy_req *rq, CUcontext dc,
                                 CUcontext sc)
{
    if (o->nsegs != 0 || (rq->flags & ~VCU_CU_MEMCPY_F_ASYNC))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    if (rq->flags & VCU_CU_MEMCPY_F_ASYNC) {
        VCU__STREAM(o, st, rq->stream);
        o->res = vcu__dtod_async(o, rq, dc, sc, st);
    } else if (dc != NULL ? o->cu->fn.cuMemcpyPeerAsync != NULL
                          : o->cu->fn.cuMemcpyDtoDAsync != NULL) {
        /* Synchronous: on the legacy stream, waited for by the core. */
        o->res = vcu__dtod_async(o, rq, dc, sc, CU_STREAM_LEGACY);
        if (o->res == CUDA_SUCCESS && vcu__park_stream(o, CU_STREAM_LEGACY) != 0)
            o->res = o->cu->fn.cuStreamSynchronize(CU_STREAM_LEGACY);
    } else if (dc != NULL) {
        o->res = VCU__CU(o->cu, cuMemcpyPeer, rq->dst, dc, rq->src, sc, (size_t)rq->size);
    } else {
        o->res = VCU__CU(o->cu, cuMemcpyDtoD, rq->dst, rq->src, (size_t)rq->size);
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MEMCPY_DTOD(vcu__op_t *o)
{
    struct vcu_cu_memcpy_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    return vcu__memcpy_dtod(o, &rq, NULL, NULL);
}

/* Each side's device one of the VM's (else CUDA_ERROR_INVALID_CONTEXT);
 * the host's context of each, made if need be. */
uint32_t vcu__op_CU_MEMCPY_PEER(vcu__op_t *o)
{
    struct vcu_cu_memcpy_peer_req rq;
    CUcontext dc, sc;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.c.reserved != 0 || o->nsegs != 0 || (rq.c.flags & ~VCU_CU_MEMCPY_F_ASYNC))
        return VCU_S_EINVAL;
    if (vcu__peer_ctx(o, rq.dst_device, &dc) != 0 || vcu__peer_ctx(o, rq.src_device, &sc) != 0)
        return VCU_S_OK;
    return vcu__memcpy_dtod(o, &rq.c, dc, sc);
}

uint32_t vcu__op_CU_MEMSET(vcu__op_t *o)
{
    struct vcu_cu_memset_req rq;
    vcu__cuda_t *cu = o->cu;
    CUstream st = NULL;
    int async;
    size_t w, hgt, pitch;

    memcpy(&rq, o->p, sizeof(rq));
    if (o->nsegs != 0 || (rq.flags & ~VCU_CU_MEMCPY_F_ASYNC) ||
        (rq.elem_size != 1 && rq.elem_size != 2 && rq.elem_size != 4))
        return VCU_S_EINVAL;
    async = (rq.flags & VCU_CU_MEMCPY_F_ASYNC) != 0;
    w = (size_t)rq.width;
    hgt = (size_t)rq.height;
    pitch = (size_t)rq.pitch;
    VCU__ENTER(o);
    if (async && vcu__stream(o, rq.stream, &st) != 0)
        return VCU_S_OK;
    if (hgt == 1) {
        switch (rq.elem_size) {
        case 1:
            o->res = async ? VCU__CU(cu, cuMemsetD8Async, rq.dst, (unsigned char)rq.value, w, st)
                           : VCU__CU(cu, cuMemsetD8, rq.dst, (unsigned char)rq.value, w);
            break;
        case 2:
            o->res = async ? VCU__CU(cu, cuMemsetD16Async, rq.dst, (unsigned short)rq.value, w, st)
                           : VCU__CU(cu, cuMemsetD16, rq.dst, (unsigned short)rq.value, w);
            break;
        default:
            o->res = async ? VCU__CU(cu, cuMemsetD32Async, rq.dst, rq.value, w, st)
                           : VCU__CU(cu, cuMemsetD32, rq.dst, rq.value, w);
            break;
        }
    } else {
        switch (rq.elem_size) {
        case 1:
            o->res = async ? VCU__CU(cu, cuMemsetD2D8Async, rq.dst, pitch, (unsigned char)rq.value, w, hgt, st)
                           : VCU__CU(cu, cuMemsetD2D8, rq.dst, pitch, (unsigned char)rq.value, w, hgt);
            break;
        case 2:
            o->res = async ? VCU__CU(cu, cuMemsetD2D16Async, rq.dst, pitch, (unsigned short)rq.value, w, hgt, st)
                           : VCU__CU(cu, cuMemsetD2D16, rq.dst, pitch, (unsigned short)rq.value, w, hgt);
            break;
        default:
            o->res = async ? VCU__CU(cu, cuMemsetD2D32Async, rq.dst, pitch, rq.value, w, hgt, st)
                           : VCU__CU(cu, cuMemsetD2D32, rq.dst, pitch, rq.value, w, hgt);
            break;
        }
    }
    return VCU_S_OK;
}

/* Bytes rows of width at pitch span, or 0 with *bad set on overflow. */
static uint64_t vcu__span(uint64_t pitch, uint64_t width, uint64_t height, int *bad)
{
    uint64_t rows;

    *bad = 0;
    if (height == 0 || width == 0)
        return 0;
    if (__builtin_mul_overflow(height - 1, pitch, &rows) ||
        __builtin_add_overflow(rows, width, &rows)) {
        *bad = 1;
        return 0;
    }
    return rows;
}

/* The copy's descriptor m from the request (kinds, pitches, the device
 * sides) and, for a host side, its segment *s, checked to hold the *span
 * bytes the rows take.  VCU_S_OK, or VCU_S_EINVAL for a malformed
 * request. */
static uint32_t vcu__2d_desc(const vcu__op_t *o, const struct vcu_cu_memcpy2d_req *rq,
                             CUDA_MEMCPY2D *m, const vcu_segment_t **s, uint64_t *span)
{
    int bad = 0;

    memset(m, 0, sizeof(*m));
    m->WidthInBytes = (size_t)rq->width;
    m->Height = (size_t)rq->height;
    m->srcPitch = (size_t)rq->spitch;
    m->dstPitch = (size_t)rq->dpitch;
    switch (rq->kind) {
    case VCU_CU_COPY_HTOD:
        *s = vcu__seg(o, VCU_SEG_TO_DEVICE);
        *span = vcu__span(rq->spitch, rq->width, rq->height, &bad);
        m->srcMemoryType = CU_MEMORYTYPE_HOST;
        m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
        m->dstDevice = rq->dst;
        break;
    case VCU_CU_COPY_DTOH:
        *s = vcu__seg(o, VCU_SEG_FROM_DEVICE);
        *span = vcu__span(rq->dpitch, rq->width, rq->height, &bad);
        m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m->srcDevice = rq->src;
        m->dstMemoryType = CU_MEMORYTYPE_HOST;
        break;
    case VCU_CU_COPY_DTOD:
        if (o->nsegs != 0)
            return VCU_S_EINVAL;
        m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m->srcDevice = rq->src;
        m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
        m->dstDevice = rq->dst;
        break;
    default:
        return VCU_S_EINVAL;
    }
    if (rq->kind != VCU_CU_COPY_DTOD && (*s == NULL || bad || *span > (*s)->len))
        return VCU_S_EINVAL;
    return VCU_S_OK;
}

/* The host side's address for the copy: segment s's one range, or a
 * staging buffer of span bytes (*bounce) holding s's bytes.  -1 (o->res
 * set) past the budget or out of memory. */
int vcu__2d_host(vcu__op_t *o, const vcu_segment_t *s, uint64_t span, void **host,
                 void **bounce)
{
    if (s->iovcnt == 1) {
        *host = s->iov[0].iov_base;
    } else if (span > 0) {
        /* Held until the copy is done, which the guest may put
         * behind work that never ends: counted. */
        if (vcu__mem_take(o->cs, (size_t)span) != 0) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return -1;
        }
        *bounce = malloc((size_t)span);
        if (*bounce == NULL) {
            vcu__mem_give(o->cs, (size_t)span);
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return -1;
        }
        /* DTOH too: the gaps between rows keep the guest's bytes. */
        vcu__gather(s, *bounce, (size_t)span);
        *host = *bounce;
    }
    return 0;
}

uint32_t vcu__op_CU_MEMCPY_2D(vcu__op_t *o)
{
    struct vcu_cu_memcpy2d_req rq;
    const vcu_segment_t *s = NULL;
    CUDA_MEMCPY2D m;
    CUstream st = NULL;
    void *host = NULL, *bounce = NULL;
    uint64_t span = 0;
    uint32_t rc;
    int async;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.flags & ~VCU_CU_MEMCPY_F_ASYNC)
        return VCU_S_EINVAL;
    async = (rq.flags & VCU_CU_MEMCPY_F_ASYNC) != 0;
    rc = vcu__2d_desc(o, &rq, &m, &s, &span);
    if (rc != VCU_S_OK)
        return rc;
    if (rq.kind != VCU_CU_COPY_DTOD) {
        if (vcu__2d_host(o, s, span, &host, &bounce) != 0)
            return VCU_S_OK;
        if (rq.kind == VCU_CU_COPY_HTOD)
            m.srcHost = host;
        else
            m.dstHost = host;
    }
    if (vcu__enter(o) != 0)
        goto out;
    if (async && vcu__stream(o, rq.stream, &st) != 0)
        goto out;
    if (async || o->cu->fn.cuMemcpy2DAsync != NULL) {
        /* A synchronous copy on the legacy stream, waited for too. */
        if (!async)
            st = CU_STREAM_LEGACY;
        o->res = VCU__CU(o->cu, cuMemcpy2DAsync, &m, st);
        /* Host pages (and the bounce buffer) must be done with before
         * the reply, unless they stay until SESSION_FENCE (stable, no
         * bounce). */
        if (o->res == CUDA_SUCCESS &&
            (!async || (rq.kind != VCU_CU_COPY_DTOD &&
                        (bounce != NULL || !(s->flags & VCU_SEG_F_STABLE))))) {
            if (vcu__park_stream(o, st) == 0) {
                /* The wait owns the staging buffer now. */
                o->wait->bounce = bounce;
                o->wait->bounce_len = bounce != NULL ? (size_t)span : 0;
                if (bounce != NULL && rq.kind == VCU_CU_COPY_DTOH) {
                    o->wait->seg = s;
                    o->wait->span = (size_t)span;
                }
                bounce = NULL;
            } else {
                o->res = o->cu->fn.cuStreamSynchronize(st);
            }
        }
    } else {
        o->res = VCU__CU(o->cu, cuMemcpy2D, &m);
    }
    if (o->res == CUDA_SUCCESS && bounce != NULL && rq.kind == VCU_CU_COPY_DTOH)
        vcu__scatter(s, bounce, (size_t)span);
out:
    if (bounce != NULL) {
        free(bounce);
        vcu__mem_give(o->cs, (size_t)span);
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MEM_FREE_ASYNC(vcu__op_t *o)
{
    struct vcu_cu_memcpy_req rq;
    uint64_t v = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (o->nsegs != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    /* Graph memory: freed in stream order, or, in a capture, a free
     * node of the captured graph. */
    if (vcu__galloc_has(o->cs, rq.dst) && !vcu__pset_find(&o->cs->allocs, rq.dst, &v)) {
        o->res = VCU__CU(o->cu, cuMemFreeAsync, (CUdeviceptr)rq.dst, st);
        return VCU_S_OK;
    }
    if (vcu__untrack(o, rq.dst, &v) != 0)
        return VCU_S_OK;
    o->res = VCU__CU(o->cu, cuMemFreeAsync, (CUdeviceptr)rq.dst, st);
    if (o->res == CUDA_SUCCESS) {
        vcu__alloc_forget(o->cs, rq.dst);
        vcu__ipc_gone(o->cs, VCU_CU_IPC_POOL_PTR, rq.dst);
        /* Pool memory stays charged while the pool keeps it reserved. */
        if (v & VCU__ALLOC_ASYNC) {
            vcu__pool_block_freed(o->cs, v);
        } else {
            vcu__uncharge(o->cs, VCU__ALLOC_DEV(v), VCU__ALLOC_CHARGE(v));
        }
    }
    return VCU_S_OK;
}

/*
 * The session's memory pool on device d, made on first use.  Never the
 * device's default pool: that one is shared by every context of the
 * process, so a block one session freed reached another's next
 * allocation with its data, and any session could set its attributes
 * or trim it for all.  Pool handles a guest holds name only these.
 */
static CUresult vcu__sess_pool(vcu__cuda_sess_t *cs, uint32_t d, CUmemoryPool *out)
{
    CUmemPoolProps props;
    CUresult r;

    if (cs->pools[d].pool == NULL) {
        memset(&props, 0, sizeof(props));
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = cs->cu->host_ordinal[d];
        r = VCU__CU(cs->cu, cuMemPoolCreate, &cs->pools[d].pool, &props);
        if (r != CUDA_SUCCESS) {
            cs->pools[d].pool = NULL;
            return r;
        }
        cs->pools[d].dev = d;
    }
    *out = cs->pools[d].pool;
    return CUDA_SUCCESS;
}

uint32_t vcu__pool_slot(const vcu__cuda_sess_t *cs, CUmemoryPool pool)
{
    uint32_t i;

    for (i = 0; i < VCU__POOL_SLOTS; i++)
        if (pool != NULL && cs->pools[i].pool == pool)
            break;
    return i;
}

/* Captured, an allocation is a node of the capture's graph (the pool's
 * properties, not its memory: cuda.h): graph memory, charged when the
 * graph is launched.  The guest's call as it made it: the device's current
 * pool (cuMemAllocAsync: nothing of the pool's is used, and no pool is
 * made while a capture may forbid it), or its own pool. */
static uint32_t vcu__alloc_captured(vcu__op_t *o, const struct vcu_cu_mem_alloc_req *rq,
                                    CUstream st)
{
    CUdeviceptr p = 0;

    if (rq->pool == 0) {
        o->res = VCU__CU(o->cu, cuMemAllocAsync, &p, (size_t)rq->size, st);
    } else {
        VCU__GET(o, e, rq->pool, VCU__H_POOL);
        o->res = VCU__CU(o->cu, cuMemAllocFromPoolAsync, &p, (size_t)rq->size, e->u.pool, st);
    }
    if (o->res == CUDA_SUCCESS && vcu__galloc_captured(o, p) == 0)
        o->rb.u64.value = p;
    return VCU_S_OK;
}

/* What the pool reserves, in grains, or 0 where the driver does not say. */
static uint64_t vcu__pool_reserved(vcu__op_t *o, CUmemoryPool pool)
{
    cuuint64_t res = 0;

    if (VCU__CU(o->cu, cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                &res) != CUDA_SUCCESS)
        return 0;
    return vcu__grain(res);
}

/* Before the allocation: the pool charged for its live blocks and one of
 * ch more (or what it reserves already, if more).  0, or -1 with
 * CUDA_ERROR_OUT_OF_MEMORY past the VM's quota. */
static int vcu__pool_charge_before(vcu__op_t *o, CUmemoryPool pool, vcu__pool_t *pl,
                                   uint64_t ch)
{
    uint64_t want = pl->live + ch, res;

    if (o->cu->acct == NULL)
        return 0;
    res = vcu__pool_reserved(o, pool);
    if (res > want)
        want = res;
    if (want > pl->charge) {
        if (vcu__charge(o->cs, pl->dev, want - pl->charge) != 0) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return -1;
        }
        pl->charge = want;
    }
    return 0;
}

/* After block p (ch grains) was made: the pool charged for anything more
 * it reserved to serve it; past the VM's quota the block is given back
 * and the guest gets CUDA_ERROR_OUT_OF_MEMORY. */
static void vcu__pool_charge_after(vcu__op_t *o, CUmemoryPool pool, vcu__pool_t *pl,
                                   CUdeviceptr p, uint64_t ch, CUstream st)
{
    uint64_t res;
    int over;

    if (o->cu->acct == NULL || o->res != CUDA_SUCCESS)
        return;
    res = vcu__pool_reserved(o, pool);
    if (res <= pl->charge)
        return;
    over = vcu__acct_add(o->cu->acct, o->cs->aslot, pl->dev, res - pl->charge);
    pl->charge = res;
    if (over != 0 && p != 0) {
        VCU__CU(o->cu, cuMemFreeAsync, p, st);
        vcu__alloc_forget(o->cs, p);
        pl->live -= ch;
        o->rb.u64.value = 0;
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
    }
}

/*
 * A session's pool is charged for at least what it reserves (driver's
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) and for every live block: before
 * the allocation, for the block on top of the live ones (or what is
 * reserved already, if more); after it, for anything more the pool
 * reserved to serve it.  If that pushed the VM past its quota the block is
 * given back and the guest gets CUDA_ERROR_OUT_OF_MEMORY.  Freed blocks
 * stay charged while the pool keeps them (vcu__pool_settle).  The pool's
 * device: the guest allocates from a pool of the stream's device only
 * (cuda.h), which the driver checks.
 */
uint32_t vcu__op_CU_MEM_ALLOC_ASYNC(vcu__op_t *o)
{
    struct vcu_cu_mem_alloc_req rq;
    vcu__cuda_sess_t *cs = o->cs;
    CUmemoryPool pool;
    CUdeviceptr p = 0;
    uint32_t slot;
    vcu__pool_t *pl;
    uint64_t ch;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    if (o->cs->capture && vcu__capturing(o->cu, st))
        return vcu__alloc_captured(o, &rq, st);
    if (rq.pool == 0) {
        /* The device's current pool, as the guest sees it: the session's. */
        o->res = vcu__sess_pool(cs, vcu__dev_of(o), &pool);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
    } else {
        VCU__GET(o, e, rq.pool, VCU__H_POOL);
        pool = e->u.pool;
    }
    slot = vcu__pool_slot(cs, pool);
    ch = vcu__grain(rq.size);
    if (ch > VCU__ACCT_MAX || slot >= VCU__POOL_SLOTS) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    /* Another process's pool: its blocks are imported, not made here. */
    if (cs->pools[slot].imported) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    pl = &cs->pools[slot];
    if (vcu__pool_charge_before(o, pool, pl, ch) != 0)
        return VCU_S_OK;
    o->res = VCU__CU(o->cu, cuMemAllocFromPoolAsync, &p, (size_t)rq.size, pool, st);
    if (o->res == CUDA_SUCCESS &&
        vcu__track_dev(o, p, pl->dev, VCU__ALLOC_ASYNC | (slot << VCU__ALLOC_POOL_SHIFT), ch) == 0) {
        o->rb.u64.value = p;
        if (p != 0)
            pl->live += ch;
    }
    vcu__pool_charge_after(o, pool, pl, p, ch, st);
    vcu__pool_settle_slot(cs, slot);
    return VCU_S_OK;
}

/* The device's default pool, as the guest sees it: the session's own
 * (vcu__sess_pool), one handle for the session's life. */
uint32_t vcu__op_CU_MEMPOOL_GET_DEFAULT(vcu__op_t *o)
{
    uint32_t d = vcu__dev_of(o);
    CUmemoryPool pool = NULL;
    vcu__hent_t *e;
    uint64_t h;

    VCU__ENTER(o);
    if (o->cs->pool_h[d] != 0 && vcu__htab_get(&o->cs->tab, o->cs->pool_h[d], VCU__H_POOL)) {
        o->rb.u64.value = o->cs->pool_h[d];
        return VCU_S_OK;
    }
    o->res = vcu__sess_pool(o->cs, d, &pool);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    e = vcu__new(o, VCU__H_POOL, &h);
    if (e == NULL)
        return VCU_S_OK;
    e->u.pool = pool;
    o->cs->pool_h[d] = h;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/* A free slot for a pool the guest makes or imports, or VCU__POOL_SLOTS. */
static uint32_t vcu__pool_free_slot(const vcu__cuda_sess_t *cs)
{
    uint32_t slot;

    for (slot = VCU_CU_MAX_DEVICES; slot < VCU__POOL_SLOTS; slot++)
        if (cs->pools[slot].pool == NULL && !cs->pools[slot].gone)
            break;
    return slot;
}

/* The driver's pool, made or imported, as the session's pool in slot (of
 * device d) under a new handle *h: 0, or -1 with the pool destroyed. */
static int vcu__pool_keep(vcu__op_t *o, uint32_t slot, CUmemoryPool pool, uint32_t d,
                          uint64_t *h)
{
    vcu__hent_t *e = vcu__new(o, VCU__H_POOL, h);

    if (e == NULL) {
        VCU__CU(o->cu, cuMemPoolDestroy, pool);
        return -1;
    }
    e->u.pool = pool;
    memset(&o->cs->pools[slot], 0, sizeof(o->cs->pools[slot]));
    o->cs->pools[slot].pool = pool;
    o->cs->pools[slot].dev = d;
    return 0;
}

/* A pool the guest makes: in a free slot of the session's, pinned memory
 * of the header's device, shared with nobody but through its shareable
 * handle (vcu_proto.h). */
uint32_t vcu__op_CU_MEMPOOL_CREATE(vcu__op_t *o)
{
    struct vcu_cu_pool_create_req rq;
    vcu__cuda_sess_t *cs = o->cs;
    uint32_t d = vcu__dev_of(o), slot;
    CUmemPoolProps props;
    CUmemoryPool pool = NULL;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.reserved != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (rq.alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED || rq.usage != 0 ||
        (rq.handle_types != CU_MEM_HANDLE_TYPE_NONE &&
         (rq.handle_types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || o->cu->keep_fd < 0))) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    slot = vcu__pool_free_slot(cs);
    if (slot == VCU__POOL_SLOTS) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = (CUmemAllocationHandleType)rq.handle_types;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = o->cu->host_ordinal[d];
    props.maxSize = (size_t)rq.max_size;
    o->res = VCU__CU(o->cu, cuMemPoolCreate, &pool, &props);
    if (o->res != CUDA_SUCCESS || vcu__pool_keep(o, slot, pool, d, &h) != 0)
        return VCU_S_OK;
    cs->pools[slot].share = rq.handle_types != CU_MEM_HANDLE_TYPE_NONE;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/* A pool the guest made.  Blocks of it still live stay valid (the driver
 * releases the pool once they are freed), and stay charged, with all
 * the pool was charged, until then (vcu__pool_settle_slot). */
uint32_t vcu__op_CU_MEMPOOL_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    vcu__cuda_sess_t *cs = o->cs;
    uint32_t slot;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_POOL);
    slot = vcu__pool_slot(cs, e->u.pool);
    if (slot < VCU_CU_MAX_DEVICES || slot >= VCU__POOL_SLOTS) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    vcu__pool_settle_slot(cs, slot);
    o->res = VCU__CU(o->cu, cuMemPoolDestroy, e->u.pool);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    vcu__htab_del(&cs->tab, rq.value);
    cs->pools[slot].pool = NULL;
    cs->pools[slot].gone = true;
    vcu__pool_settle_slot(cs, slot);
    return VCU_S_OK;
}

/*
 * A pool's shareable handle, as a cuMemCreate allocation's (cuda_vmm.c):
 * the driver's descriptor to the daemon's keep, the guest the name it
 * keeps it under, the same for every export.  Only a pool the guest made
 * with the POSIX handle type.
 */
uint32_t vcu__op_CU_MEMPOOL_EXPORT_SHAREABLE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    struct vcu_cu_ipc_handle *out = &o->rb.ipc.h;
    vcu__cuda_sess_t *cs = o->cs;
    vcu__pool_t *pl;
    uint32_t slot;
    int fd = -1, st;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_POOL);
    slot = vcu__pool_slot(cs, e->u.pool);
    if (slot < VCU_CU_MAX_DEVICES || slot >= VCU__POOL_SLOTS || !cs->pools[slot].share) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    pl = &cs->pools[slot];
    if (!pl->exported) {
        o->res = VCU__CU(o->cu, cuMemPoolExportToShareableHandle, &fd, pl->pool,
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
        st = vcu__keep_put(o->cu, VCU_CU_IPC_POOL, pl->dev, 0, fd, pl->token);
        close(fd);
        if (st != VCU_S_OK) {
            o->res = st == VCU_S_EBUSY ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
            return VCU_S_OK;
        }
        pl->exported = true;
    }
    out->magic = VCU_CU_IPC_MAGIC;
    out->kind = VCU_CU_IPC_POOL;
    memcpy(out->token, pl->token, sizeof(out->token));
    return VCU_S_OK;
}

/*
 * A pool a worker of this VM exported, from the daemon's keep, as a pool
 * of this session: blocks of it are imported (CU_MEMPOOL_IMPORT_POINTER),
 * never allocated here, and charged as they are imported.
 */
uint32_t vcu__op_CU_MEMPOOL_IMPORT_SHAREABLE(vcu__op_t *o)
{
    struct vcu_cu_ipc_open_req rq;
    vcu__cuda_sess_t *cs = o->cs;
    CUmemoryPool pool = NULL;
    uint64_t size = 0, h;
    uint32_t dev = 0, slot;
    int fd = -1, st;

    memcpy(&rq, o->p, sizeof(rq));
    if (!vcu__share_handle_ok(&rq, VCU_CU_IPC_POOL)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (o->cu->keep_fd < 0) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    slot = vcu__pool_free_slot(cs);
    if (slot == VCU__POOL_SLOTS) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    st = vcu__keep_get(o->cu, VCU_CU_IPC_POOL, rq.h.token, &dev, &size, &fd);
    if (st != VCU_S_OK) {
        o->res = st == VCU_S_EINVAL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OPERATING_SYSTEM;
        return VCU_S_OK;
    }
    if (dev >= o->cu->ndev) {
        close(fd);
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuMemPoolImportFromShareableHandle, &pool, (void *)(uintptr_t)fd,
                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    close(fd);
    if (o->res != CUDA_SUCCESS || vcu__pool_keep(o, slot, pool, dev, &h) != 0)
        return VCU_S_OK;
    cs->pools[slot].imported = true;
    o->rb.ipcimp.value = h;
    o->rb.ipcimp.dev = dev;
    return VCU_S_OK;
}

/* CUmemPool_attribute value types (cuda.h): the REUSE_* ones are int,
 * the rest cuuint64_t; 0 for an attribute this code does not know. */
static int vcu__pool_attr_kind(uint32_t a)
{
    switch (a) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return 1;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        return 2;
    }
    return 0;
}

uint32_t vcu__op_CU_MEMPOOL_SET_ATTR(vcu__op_t *o)
{
    struct vcu_cu_attr_req rq;
    int kind, iv;
    cuuint64_t uv;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.handle, VCU__H_POOL);
    kind = vcu__pool_attr_kind(rq.attr);
    if (kind == 1) {
        iv = (int)rq.value;
        o->res = VCU__CU(o->cu, cuMemPoolSetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &iv);
    } else if (kind == 2) {
        uv = rq.value;
        o->res = VCU__CU(o->cu, cuMemPoolSetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &uv);
    } else {
        o->res = CUDA_ERROR_INVALID_VALUE;
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MEMPOOL_GET_ATTR(vcu__op_t *o)
{
    struct vcu_cu_attr_req rq;
    int kind, iv = 0;
    cuuint64_t uv = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.handle, VCU__H_POOL);
    kind = vcu__pool_attr_kind(rq.attr);
    if (kind == 1) {
        o->res = VCU__CU(o->cu, cuMemPoolGetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &iv);
        o->rb.u64.value = (uint64_t)(int64_t)iv;
    } else if (kind == 2) {
        o->res = VCU__CU(o->cu, cuMemPoolGetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &uv);
        o->rb.u64.value = uv;
    } else {
        o->res = CUDA_ERROR_INVALID_VALUE;
    }
    return VCU_S_OK;
}

/* Another device's access to a pool of the session's (vcu_proto.h,
 * CU_MEMPOOL_SET_ACCESS): the device and the flags checked here, the
 * rest (whether the two devices reach each other) the driver's. */
uint32_t vcu__op_CU_MEMPOOL_SET_ACCESS(vcu__op_t *o)
{
    struct vcu_cu_attr_req rq;
    CUmemAccessDesc d;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.reserved != 0 || rq.attr >= o->cu->ndev ||
        (rq.value != CU_MEM_ACCESS_FLAGS_PROT_NONE && rq.value != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         rq.value != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    VCU__GET(o, e, rq.handle, VCU__H_POOL);
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = o->cu->host_ordinal[rq.attr];
    d.flags = (CUmemAccess_flags)rq.value;
    o->res = VCU__CU(o->cu, cuMemPoolSetAccess, e->u.pool, &d, 1);
    return VCU_S_OK;
}

/* After the generated cuMemPoolTrimTo (after= in the list): what the
 * trim gave back is no longer charged. */
void vcu__pool_trimmed(vcu__op_t *o)
{
    vcu__pool_settle(o->cs, vcu__dev_of(o));
}

/* Guest memory in the device's address space (zero copy).  Only a stable
 * segment is held by the guest past the reply, and only one contiguous
 * host range has one device pointer.  Where the worker put that range
 * (at the address CU_HOST_DEVICE_POINTER_AT asked for, or elsewhere) is
 * the worker's doing; the driver maps registered memory at its host
 * address, and the reply says where it is. */
static uint32_t vcu__host_dptr(vcu__op_t *o, bool flags_zero)
{
    struct vcu_cu_u64_req rq;
    const vcu_segment_t *s;
    CUdeviceptr p = 0;

    memcpy(&rq, o->p, sizeof(rq));
    s = vcu__seg(o, VCU_SEG_TO_DEVICE);
    if (s == NULL)
        return VCU_S_EINVAL;
    if (!(s->flags & VCU_SEG_F_STABLE) || s->iovcnt != 1 || (flags_zero && rq.value != 0)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemHostGetDevicePointer, &p, s->iov[0].iov_base, 0);
    if (o->res == CUDA_SUCCESS)
        o->rb.u64.value = p;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_HOST_DEVICE_POINTER(vcu__op_t *o)
{
    return vcu__host_dptr(o, true);
}

uint32_t vcu__op_CU_HOST_DEVICE_POINTER_AT(vcu__op_t *o)
{
    return vcu__host_dptr(o, false);
}
