/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * CUDA arrays and mipmapped arrays (charged as allocations), copies that
 * have an array or a third dimension, texture and surface objects.
 *
 * An array is a session handle (VCU__H_ARRAY) with the shape it was made
 * with, never the driver's CUarray.  A texture or surface object is the
 * driver's own 64-bit value, since kernels take it as a parameter: the
 * session keeps the values it made (cs->texs, cs->surfs) and takes no
 * other.  Every descriptor field is checked here before the driver sees
 * it: the driver's own checks are not relied on to keep the process up.
 */
#include <math.h>

#include "cuda_int.h"

/* Bytes per channel of a plain CUarray_format; 0 for any other value, and
 * *known set for a format cuda.h has that is not carried (packed,
 * block-compressed, video). */
static uint32_t vcu__fmt_bytes(uint32_t fmt, int *known)
{
    *known = 1;
    switch (fmt) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    }
    *known = fmt == 0x50 || (fmt >= 0x91 && fmt <= 0xcb);
    return 0;
}

/* Element bytes of format and channel count: 0 with o->res set if bad. */
static uint32_t vcu__elem(vcu__op_t *o, uint32_t fmt, uint32_t nch)
{
    int known;
    uint32_t b = vcu__fmt_bytes(fmt, &known);

    if (b == 0) {
        o->res = known ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
        return 0;
    }
    if (nch != 1 && nch != 2 && nch != 4) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return 0;
    }
    return b * nch;
}

/* The session's array of handle h on the request's device, or NULL with
 * CUDA_ERROR_INVALID_HANDLE. */
static vcu__hent_t *vcu__array_get(vcu__op_t *o, uint64_t h)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, VCU__H_ARRAY);

    if (e == NULL || e->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    return e;
}

void vcu__array_obj_destroy(vcu__cuda_sess_t *cs, vcu__hent_t *e)
{
    switch (e->type) {
    case VCU__H_ARRAY:
        if (e->u.arr.parent == 0)   /* a level goes with its mipmapped array */
            VCU__CU(cs->cu, cuArrayDestroy, e->u.arr.a);
        break;
    case VCU__H_MIPMAP:
        VCU__CU(cs->cu, cuMipmappedArrayDestroy, e->u.mip.m);
        break;
    case VCU__H_TEXOBJ:
        VCU__CU(cs->cu, cuTexObjectDestroy, (CUtexObject)e->u.tex.obj);
        break;
    case VCU__H_SURFOBJ:
        VCU__CU(cs->cu, cuSurfObjectDestroy, (CUsurfObject)e->u.tex.obj);
        break;
    }
}

/* n padded as a block-linear layout may pad it: to a power of two from
 * lo up to hi, past hi to a multiple of hi. */
static uint64_t vcu__pad_blocks(uint64_t n, uint64_t lo, uint64_t hi)
{
    uint64_t p = lo;

    if (n > hi)
        return (n + hi - 1) / hi * hi;
    while (p < n)
        p <<= 1;
    return p;
}

/*
 * What an array is charged before it exists, at least what the driver's
 * block-linear layout can take: rows padded to 512 bytes, rows per slice
 * as blocks of up to 32 GOBs of 8 rows pad them, the slices of a 3D
 * array as blocks of up to 32 slices (a layered array's layers are not
 * padded); afterwards the driver's own figure where it gives one
 * (cuArrayGetMemoryRequirements) if that is larger.  -1 when the plain
 * size overflows.
 */
static int vcu__array_charge(uint64_t w, uint64_t h, uint64_t d, uint32_t flags, uint32_t elem,
                             uint64_t *est)
{
    uint64_t row, rows, slices, plain;

    if (__builtin_mul_overflow(w, (uint64_t)elem, &row) ||
        __builtin_mul_overflow(row, h ? h : 1, &plain) ||
        __builtin_mul_overflow(plain, d ? d : 1, &plain))
        return -1;
    row = (row + 511) & ~(uint64_t)511;
    rows = vcu__pad_blocks(h ? h : 1, 8, 256);
    slices = d == 0 ? 1 : (flags & CUDA_ARRAY3D_LAYERED) ? d : vcu__pad_blocks(d, 1, 32);
    if (__builtin_mul_overflow(row, rows, est) || __builtin_mul_overflow(*est, slices, est))
        *est = UINT64_MAX;
    return 0;
}

/*
 * An array's shape, checked (CU_ARRAY_CREATE, CU_MIPMAP_CREATE): its
 * element size into *elem, its charge before it exists into *est, and
 * the driver's descriptor; VCU_S_OK with o->res set for a bad value.
 */
static uint32_t vcu__array_shape(vcu__op_t *o, const struct vcu_cu_array_req *rq, uint32_t *elem,
                                 uint64_t *est, CUDA_ARRAY3D_DESCRIPTOR *ad)
{
    if (rq->reserved != 0)
        return VCU_S_EINVAL;
    *elem = vcu__elem(o, rq->format, rq->channels);
    if (*elem == 0)
        return VCU_S_OK;
    if (rq->flags & ~VCU_CU_ARRAY_FLAGS) {
        /* Sparse, deferred-mapping and video arrays need calls not offered. */
        o->res = (rq->flags & ~0x1ffu) ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    if (rq->width == 0 || rq->width > VCU_CU_ARRAY_MAX_DIM || rq->height > VCU_CU_ARRAY_MAX_DIM ||
        rq->depth > VCU_CU_ARRAY_MAX_DIM ||
        vcu__array_charge(rq->width, rq->height, rq->depth, rq->flags, *elem, est) != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    memset(ad, 0, sizeof(*ad));
    ad->Width = (size_t)rq->width;
    ad->Height = (size_t)rq->height;
    ad->Depth = (size_t)rq->depth;
    ad->Format = (CUarray_format)rq->format;
    ad->NumChannels = rq->channels;
    ad->Flags = rq->flags;
    return VCU_S_OK;
}

/* Charged before the driver is asked, as CU_MEM_ALLOC: past the VM's
 * quota the guest gets CUDA_ERROR_OUT_OF_MEMORY and nothing changes. */
uint32_t vcu__op_CU_ARRAY_CREATE(vcu__op_t *o)
{
    struct vcu_cu_array_req rq;
    CUDA_ARRAY3D_DESCRIPTOR ad;
    CUDA_ARRAY_MEMORY_REQUIREMENTS mr;
    CUarray a = NULL;
    vcu__hent_t *e;
    uint32_t d = vcu__dev_of(o), elem = 0, rc;
    uint64_t est = 0, ch, h;

    memcpy(&rq, o->p, sizeof(rq));
    rc = vcu__array_shape(o, &rq, &elem, &est, &ad);
    if (rc != VCU_S_OK || o->res != CUDA_SUCCESS)
        return rc;
    VCU__ENTER(o);
    ch = vcu__grain(est);
    if (ch > VCU__ACCT_MAX || vcu__charge(o->cs, d, ch) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuArray3DCreate, &a, &ad);
    if (o->res != CUDA_SUCCESS) {
        vcu__uncharge(o->cs, d, ch);
        return VCU_S_OK;
    }
    memset(&mr, 0, sizeof(mr));
    if (VCU__CU(o->cu, cuArrayGetMemoryRequirements, &mr, a, o->cu->dev[d]) == CUDA_SUCCESS &&
        vcu__grain(mr.size) > ch) {
        uint64_t more = vcu__grain(mr.size) - ch;

        if (more > VCU__ACCT_MAX || vcu__charge(o->cs, d, more) != 0) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            goto fail;
        }
        ch += more;
    }
    e = vcu__new(o, VCU__H_ARRAY, &h);
    if (e == NULL)
        goto fail;
    e->u.arr.a = a;
    e->u.arr.charge = ch;
    e->u.arr.width = (uint32_t)rq.width;
    e->u.arr.height = (uint32_t)rq.height;
    e->u.arr.depth = (uint32_t)rq.depth;
    e->u.arr.elem = (uint8_t)elem;
    o->rb.u64.value = h;
    return VCU_S_OK;
fail:
    VCU__CU(o->cu, cuArrayDestroy, a);
    vcu__uncharge(o->cs, d, ch);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_ARRAY_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    vcu__hent_t *e;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    e = vcu__array_get(o, rq.value);
    if (e == NULL)
        return VCU_S_OK;
    if (e->u.arr.parent != 0) {     /* a level: its mipmapped array's */
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuArrayDestroy, e->u.arr.a);
    if (o->res == CUDA_SUCCESS)
        vcu__del(o->cs, rq.value);
    return VCU_S_OK;
}

/* ---- mipmapped arrays ------------------------------------------------------ */

static vcu__hent_t *vcu__mip_get(vcu__op_t *o, uint64_t h)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, VCU__H_MIPMAP);

    if (e == NULL || e->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    return e;
}

/* Level l of a dimension of level 0 (0 stays 0). */
static uint32_t vcu__level_dim(uint32_t n, uint32_t l)
{
    return n == 0 ? 0 : (n >> l) ? (n >> l) : 1;
}

/* Every level charged as level 0 is, and as much again for the rest
 * (each at most half the one before). */
uint32_t vcu__op_CU_MIPMAP_CREATE(vcu__op_t *o)
{
    struct vcu_cu_mipmap_req rq;
    CUDA_ARRAY3D_DESCRIPTOR ad;
    CUmipmappedArray m = NULL;
    vcu__hent_t *e;
    uint32_t d = vcu__dev_of(o), elem = 0, rc, most = 1;
    uint64_t est = 0, ch, h, big;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.reserved != 0)
        return VCU_S_EINVAL;
    rc = vcu__array_shape(o, &rq.a, &elem, &est, &ad);
    if (rc != VCU_S_OK || o->res != CUDA_SUCCESS)
        return rc;
    big = rq.a.width > rq.a.height ? rq.a.width : rq.a.height;
    if (!(rq.a.flags & CUDA_ARRAY3D_LAYERED) && rq.a.depth > big)
        big = rq.a.depth;
    while (big >> most)
        most++;
    if (rq.levels == 0 || rq.levels > most || rq.levels > VCU_CU_MIPMAP_MAX_LEVELS) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    ch = est > VCU__ACCT_MAX ? UINT64_MAX : vcu__grain(2 * est);
    if (ch > VCU__ACCT_MAX || vcu__charge(o->cs, d, ch) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuMipmappedArrayCreate, &m, &ad, rq.levels);
    if (o->res != CUDA_SUCCESS) {
        vcu__uncharge(o->cs, d, ch);
        return VCU_S_OK;
    }
    e = vcu__new(o, VCU__H_MIPMAP, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuMipmappedArrayDestroy, m);
        vcu__uncharge(o->cs, d, ch);
        return VCU_S_OK;
    }
    e->u.mip.m = m;
    e->u.mip.charge = ch;
    e->u.mip.width = (uint32_t)rq.a.width;
    e->u.mip.height = (uint32_t)rq.a.height;
    e->u.mip.depth = (uint32_t)rq.a.depth;
    e->u.mip.flags = rq.a.flags;
    e->u.mip.levels = rq.levels;
    e->u.mip.elem = (uint8_t)elem;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/* The level's array entry of mipmapped array mh, if one was given out. */
static uint64_t vcu__level_find(vcu__cuda_sess_t *cs, uint64_t mh, uint32_t level)
{
    uint32_t i;

    for (i = 0; i < cs->tab.cap; i++) {
        const vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_ARRAY && e->u.arr.parent == mh && e->u.arr.level == level)
            return vcu__htab_handle_at(&cs->tab, i);
    }
    return 0;
}

uint32_t vcu__op_CU_MIPMAP_LEVEL(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    vcu__hent_t *e;
    CUarray a = NULL;
    uint32_t w, hgt, dep, elem;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.c != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    e = vcu__mip_get(o, rq.a);
    if (e == NULL)
        return VCU_S_OK;
    if (rq.b >= e->u.mip.levels) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    h = vcu__level_find(o->cs, rq.a, (uint32_t)rq.b);
    if (h != 0) {
        o->rb.u64.value = h;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuMipmappedArrayGetLevel, &a, e->u.mip.m, (unsigned int)rq.b);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    w = vcu__level_dim(e->u.mip.width, (uint32_t)rq.b);
    hgt = vcu__level_dim(e->u.mip.height, (uint32_t)rq.b);
    dep = (e->u.mip.flags & CUDA_ARRAY3D_LAYERED) ? e->u.mip.depth
                                                  : vcu__level_dim(e->u.mip.depth, (uint32_t)rq.b);
    elem = e->u.mip.elem;
    e = vcu__new(o, VCU__H_ARRAY, &h);     /* entries may move: e is stale after */
    if (e == NULL)
        return VCU_S_OK;
    e->u.arr.a = a;
    e->u.arr.width = w;
    e->u.arr.height = hgt;
    e->u.arr.depth = dep;
    e->u.arr.elem = (uint8_t)elem;
    e->u.arr.level = (uint32_t)rq.b;
    e->u.arr.parent = rq.a;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MIPMAP_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    vcu__cuda_sess_t *cs = o->cs;
    vcu__hent_t *e;
    uint32_t i;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    e = vcu__mip_get(o, rq.value);
    if (e == NULL)
        return VCU_S_OK;
    o->res = VCU__CU(o->cu, cuMipmappedArrayDestroy, e->u.mip.m);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    for (i = 0; i < cs->tab.cap; i++)
        if (cs->tab.ent[i].type == VCU__H_ARRAY && cs->tab.ent[i].u.arr.parent == rq.value)
            vcu__del(cs, vcu__htab_handle_at(&cs->tab, i));
    vcu__del(cs, rq.value);
    return VCU_S_OK;
}

/* ---- copies ---------------------------------------------------------------- */

/*
 * One side of a CU_MEMCPY_3D into m's fields (src or dst by is_dst).
 * Host: the segment *s (its direction by side), at offset 0, holding the
 * *span bytes the copy's rows take.  An array: the session's, the copy
 * within its extent.  VCU_S_EINVAL for a malformed side; VCU_S_OK with
 * o->res set for a bad value.
 */
static uint32_t vcu__3d_side(vcu__op_t *o, const struct vcu_cu_memcpy3d_req *rq, int is_dst,
                             int peer, CUDA_MEMCPY3D *m, const vcu_segment_t **s, uint64_t *span)
{
    const struct vcu_cu_memcpy3d_side *sd = is_dst ? &rq->dst : &rq->src;
    uint64_t last, end;
    vcu__hent_t *e;

    /* CU_MEMCPY_3D_PEER: reserved is the side's device (checked by the
     * caller), which its array must be of. */
    if (!peer && sd->reserved != 0)
        return VCU_S_EINVAL;
    switch (sd->type) {
    case CU_MEMORYTYPE_HOST:
        if (sd->ptr != 0 || sd->x != 0 || sd->y != 0 || sd->z != 0)
            return VCU_S_EINVAL;
        *s = vcu__seg(o, is_dst ? VCU_SEG_FROM_DEVICE : VCU_SEG_TO_DEVICE);
        if (*s == NULL)
            return VCU_S_EINVAL;
        if ((rq->height > 1 && sd->pitch < rq->width) ||
            (rq->depth > 1 && sd->height < rq->height) ||
            __builtin_mul_overflow(rq->depth - 1, sd->height, &last) ||
            __builtin_add_overflow(last, rq->height - 1, &last) ||
            __builtin_mul_overflow(last, sd->pitch, &last) ||
            __builtin_add_overflow(last, rq->width, span) || *span > (*s)->len) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            return VCU_S_OK;
        }
        break;
    case CU_MEMORYTYPE_DEVICE:
        if (sd->ptr == 0) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            return VCU_S_OK;
        }
        break;
    case CU_MEMORYTYPE_ARRAY:
        if (sd->pitch != 0 || sd->height != 0)
            return VCU_S_EINVAL;
        e = vcu__htab_get(&o->cs->tab, sd->ptr, VCU__H_ARRAY);
        if (e == NULL || e->dev != (peer ? sd->reserved : vcu__dev_of(o))) {
            o->res = CUDA_ERROR_INVALID_HANDLE;
            return VCU_S_OK;
        }
        if (__builtin_add_overflow(sd->x, rq->width, &end) ||
            end > (uint64_t)e->u.arr.width * e->u.arr.elem ||
            __builtin_add_overflow(sd->y, rq->height, &end) ||
            end > (e->u.arr.height ? e->u.arr.height : 1u) ||
            __builtin_add_overflow(sd->z, rq->depth, &end) ||
            end > (e->u.arr.depth ? e->u.arr.depth : 1u)) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            return VCU_S_OK;
        }
        if (is_dst)
            m->dstArray = e->u.arr.a;
        else
            m->srcArray = e->u.arr.a;
        break;
    default:
        return VCU_S_EINVAL;
    }
    if (is_dst) {
        m->dstMemoryType = (CUmemorytype)sd->type;
        m->dstDevice = sd->type == CU_MEMORYTYPE_DEVICE ? (CUdeviceptr)sd->ptr : 0;
        m->dstXInBytes = (size_t)sd->x;
        m->dstY = (size_t)sd->y;
        m->dstZ = (size_t)sd->z;
        m->dstPitch = (size_t)sd->pitch;
        m->dstHeight = (size_t)sd->height;
    } else {
        m->srcMemoryType = (CUmemorytype)sd->type;
        m->srcDevice = sd->type == CU_MEMORYTYPE_DEVICE ? (CUdeviceptr)sd->ptr : 0;
        m->srcXInBytes = (size_t)sd->x;
        m->srcY = (size_t)sd->y;
        m->srcZ = (size_t)sd->z;
        m->srcPitch = (size_t)sd->pitch;
        m->srcHeight = (size_t)sd->height;
    }
    return VCU_S_OK;
}

/* m with the contexts of its two sides, for cuMemcpy3DPeer[Async]. */
static void vcu__3d_peer(const CUDA_MEMCPY3D *m, CUcontext sc, CUcontext dc,
                         CUDA_MEMCPY3D_PEER *p)
{
    memset(p, 0, sizeof(*p));
    p->srcXInBytes = m->srcXInBytes;
    p->srcY = m->srcY;
    p->srcZ = m->srcZ;
    p->srcMemoryType = m->srcMemoryType;
    p->srcHost = m->srcHost;
    p->srcDevice = m->srcDevice;
    p->srcArray = m->srcArray;
    p->srcContext = sc;
    p->srcPitch = m->srcPitch;
    p->srcHeight = m->srcHeight;
    p->dstXInBytes = m->dstXInBytes;
    p->dstY = m->dstY;
    p->dstZ = m->dstZ;
    p->dstMemoryType = m->dstMemoryType;
    p->dstHost = m->dstHost;
    p->dstDevice = m->dstDevice;
    p->dstArray = m->dstArray;
    p->dstContext = dc;
    p->dstPitch = m->dstPitch;
    p->dstHeight = m->dstHeight;
    p->WidthInBytes = m->WidthInBytes;
    p->Height = m->Height;
    p->Depth = m->Depth;
}

/* The copy on st (CU_STREAM_LEGACY when synchronous), between the
 * contexts sc and dc of two devices where they are not NULL. */
static CUresult vcu__3d_async(vcu__op_t *o, const CUDA_MEMCPY3D *m, CUcontext sc, CUcontext dc,
                              CUstream st)
{
    CUDA_MEMCPY3D_PEER p;

    if (sc == NULL)
        return VCU__CU(o->cu, cuMemcpy3DAsync, m, st);
    vcu__3d_peer(m, sc, dc, &p);
    return VCU__CU(o->cu, cuMemcpy3DPeerAsync, &p, st);
}

/* A copy's side in guest memory, if it has one: its segment and span,
 * which way (to_host: the destination), and the bounce buffer standing in
 * for it where the segment could not be mapped as it is. */
typedef struct {
    const vcu_segment_t *seg;
    uint64_t span;
    void *bounce;
    int to_host;
} vcu__3d_guest_t;

/* The descriptor's sides and size; a side in guest memory mapped (or
 * bounced) into g.  VCU_S_OK with o->res CUDA_SUCCESS when it can go. */
static uint32_t vcu__3d_desc(vcu__op_t *o, const struct vcu_cu_memcpy3d_req *rq, int peer,
                             CUDA_MEMCPY3D *m, vcu__3d_guest_t *g)
{
    const vcu_segment_t *ss = NULL, *ds = NULL;
    uint64_t sspan = 0, dspan = 0;
    void *host = NULL;
    uint32_t rc;

    memset(m, 0, sizeof(*m));
    rc = vcu__3d_side(o, rq, 0, peer, m, &ss, &sspan);
    if (rc != VCU_S_OK || o->res != CUDA_SUCCESS)
        return rc;
    rc = vcu__3d_side(o, rq, 1, peer, m, &ds, &dspan);
    if (rc != VCU_S_OK || o->res != CUDA_SUCCESS)
        return rc;
    m->WidthInBytes = (size_t)rq->width;
    m->Height = (size_t)rq->height;
    m->Depth = (size_t)rq->depth;
    g->to_host = ds != NULL;
    g->seg = ss != NULL ? ss : ds;
    g->span = ss != NULL ? sspan : dspan;
    if (g->seg == NULL)
        return VCU_S_OK;
    if (vcu__2d_host(o, g->seg, g->span, &host, &g->bounce) != 0)
        return VCU_S_OK;            /* o->res says why */
    if (g->to_host)
        m->dstHost = host;
    else
        m->srcHost = host;
    return VCU_S_OK;
}

/* After an asynchronous copy on st: the request waits for the stream where
 * it must (synchronous, a bounce buffer, guest memory that may move), and
 * the wait frees the bounce buffer (scattering it to the guest first when
 * it was the destination). */
static void vcu__3d_park(vcu__op_t *o, int async, CUstream st, vcu__3d_guest_t *g)
{
    if (async && (g->seg == NULL || (g->bounce == NULL && (g->seg->flags & VCU_SEG_F_STABLE))))
        return;
    if (vcu__park_stream(o, st) != 0) {
        o->res = o->cu->fn.cuStreamSynchronize(st);
        return;
    }
    o->wait->bounce = g->bounce;
    o->wait->bounce_len = g->bounce != NULL ? (size_t)g->span : 0;
    if (g->bounce != NULL && g->to_host) {
        o->wait->seg = g->seg;
        o->wait->span = (size_t)g->span;
    }
    g->bounce = NULL;
}

/* The copy itself: on a stream where the driver has the asynchronous form
 * (CU_STREAM_LEGACY when synchronous), else the synchronous call. */
static void vcu__3d_copy(vcu__op_t *o, CUDA_MEMCPY3D *m, int peer, CUcontext sc, CUcontext dc,
                         int async, CUstream st, vcu__3d_guest_t *g)
{
    CUDA_MEMCPY3D_PEER pm;

    if (async || (peer ? o->cu->fn.cuMemcpy3DPeerAsync != NULL
                       : o->cu->fn.cuMemcpy3DAsync != NULL)) {
        if (!async)
            st = CU_STREAM_LEGACY;
        o->res = vcu__3d_async(o, m, sc, dc, st);
        if (o->res == CUDA_SUCCESS)
            vcu__3d_park(o, async, st, g);
    } else if (peer) {
        vcu__3d_peer(m, sc, dc, &pm);
        o->res = VCU__CU(o->cu, cuMemcpy3DPeer, &pm);
    } else {
        o->res = VCU__CU(o->cu, cuMemcpy3D, m);
    }
    if (o->res == CUDA_SUCCESS && g->bounce != NULL && g->to_host)
        vcu__scatter(g->seg, g->bounce, (size_t)g->span);
}

/*
 * As CU_MEMCPY_2D, with cuMemcpy3D's descriptor: CU_MEMCPY_3D, and
 * CU_MEMCPY_3D_PEER (peer) whose sides name their contexts' devices.
 */
static uint32_t vcu__memcpy3d(vcu__op_t *o, int peer)
{
    struct vcu_cu_memcpy3d_req rq;
    vcu__3d_guest_t g = { 0 };
    CUDA_MEMCPY3D m;
    CUcontext sc = NULL, dc = NULL;
    CUstream st = NULL;
    int async;
    uint32_t rc;

    memcpy(&rq, o->p, sizeof(rq));
    if ((rq.flags & ~VCU_CU_MEMCPY_F_ASYNC) || rq.reserved != 0)
        return VCU_S_EINVAL;
    async = (rq.flags & VCU_CU_MEMCPY_F_ASYNC) != 0;
    if (rq.src.type == CU_MEMORYTYPE_HOST && rq.dst.type == CU_MEMORYTYPE_HOST)
        return VCU_S_EINVAL;
    if (rq.src.type != CU_MEMORYTYPE_HOST && rq.dst.type != CU_MEMORYTYPE_HOST && o->nsegs != 0)
        return VCU_S_EINVAL;
    if (peer && (vcu__peer_ctx(o, rq.src.reserved, &sc) != 0 ||
                 vcu__peer_ctx(o, rq.dst.reserved, &dc) != 0))
        return VCU_S_OK;
    if (vcu__enter(o) != 0)
        return VCU_S_OK;
    if (rq.width == 0 || rq.height == 0 || rq.depth == 0)
        return VCU_S_OK;
    rc = vcu__3d_desc(o, &rq, peer, &m, &g);
    if (rc != VCU_S_OK || o->res != CUDA_SUCCESS)
        goto out;
    if (!async || vcu__stream(o, rq.stream, &st) == 0)
        vcu__3d_copy(o, &m, peer, sc, dc, async, st, &g);
out:
    if (g.bounce != NULL) {
        free(g.bounce);
        vcu__mem_give(o->cs, (size_t)g.span);
    }
    return rc;
}

uint32_t vcu__op_CU_MEMCPY_3D(vcu__op_t *o)
{
    return vcu__memcpy3d(o, 0);
}

uint32_t vcu__op_CU_MEMCPY_3D_PEER(vcu__op_t *o)
{
    return vcu__memcpy3d(o, 1);
}

/* ---- texture and surface objects ------------------------------------------- */

/* Does [p, p + n) lie inside one live allocation of the session? (In the
 * current context: the driver is asked for the range.) */
int vcu__owned_range(vcu__op_t *o, uint64_t p, uint64_t n)
{
    vcu__cuda_sess_t *cs = o->cs;
    CUdeviceptr base = 0;
    size_t size = 0;
    uint64_t v, end;
    uint32_t i;

    if (n == 0 || __builtin_add_overflow(p, n, &end))
        return 0;
    for (i = 0; i < cs->vmm.map.n; i++) {
        const vcu__vmm_range_t *r = &cs->vmm.map.r[i];

        if (p >= r->base && end <= r->base + r->size)
            return 1;
    }
    if (VCU__CU(o->cu, cuMemGetAddressRange, &base, &size, (CUdeviceptr)p) != CUDA_SUCCESS)
        return 0;
    if (!vcu__pset_find(&cs->allocs, base, &v) && !vcu__galloc_has(cs, base))
        return 0;
    return end <= (uint64_t)base + size;
}

static int vcu__finite(uint32_t bits)
{
    float f;

    memcpy(&f, &bits, sizeof(f));
    return isfinite(f);
}

/* An array or mipmapped array resource: its handle only. */
static uint32_t vcu__res_array(vcu__op_t *o, const struct vcu_cu_texobj_req *rq,
                               CUDA_RESOURCE_DESC *rd)
{
    const struct vcu_cu_res_desc *r = &rq->res;
    vcu__hent_t *e;

    if (r->format != 0 || r->channels != 0 || r->ptr != 0 || r->size != 0 || r->width != 0 ||
        r->height != 0 || r->pitch != 0)
        return VCU_S_EINVAL;
    if (r->type == CU_RESOURCE_TYPE_ARRAY) {
        e = vcu__array_get(o, r->handle);
        if (e != NULL)
            rd->res.array.hArray = e->u.arr.a;
        return VCU_S_OK;
    }
    if (rq->kind != VCU_CU_TEXOBJ_TEX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    e = vcu__mip_get(o, r->handle);
    if (e != NULL)
        rd->res.mipmap.hMipmappedArray = e->u.mip.m;
    return VCU_S_OK;
}

/* A linear resource: a pointer and a size. */
static uint32_t vcu__res_linear(vcu__op_t *o, const struct vcu_cu_res_desc *r,
                                CUDA_RESOURCE_DESC *rd)
{
    if (r->width != 0 || r->height != 0 || r->pitch != 0)
        return VCU_S_EINVAL;
    if (r->size == 0 || r->ptr + r->size < r->ptr) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    rd->res.linear.devPtr = (CUdeviceptr)r->ptr;
    rd->res.linear.format = (CUarray_format)r->format;
    rd->res.linear.numChannels = r->channels;
    rd->res.linear.sizeInBytes = (size_t)r->size;
    return VCU_S_OK;
}

/* A pitched 2D resource of elements of elem bytes: rows that fit their
 * pitch, a span that does not overflow. */
static uint32_t vcu__res_pitch2d(vcu__op_t *o, const struct vcu_cu_res_desc *r, uint32_t elem,
                                 CUDA_RESOURCE_DESC *rd)
{
    uint64_t row, span;

    if (r->size != 0)
        return VCU_S_EINVAL;
    if (r->width == 0 || r->height == 0 || r->width > VCU_CU_ARRAY_MAX_DIM ||
        r->height > VCU_CU_ARRAY_MAX_DIM || __builtin_mul_overflow(r->width, elem, &row) ||
        r->pitch < row || __builtin_mul_overflow(r->height - 1, r->pitch, &span) ||
        __builtin_add_overflow(span, row, &span)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    rd->res.pitch2D.devPtr = (CUdeviceptr)r->ptr;
    rd->res.pitch2D.format = (CUarray_format)r->format;
    rd->res.pitch2D.numChannels = r->channels;
    rd->res.pitch2D.width = (size_t)r->width;
    rd->res.pitch2D.height = (size_t)r->height;
    rd->res.pitch2D.pitchInBytes = (size_t)r->pitch;
    return VCU_S_OK;
}

/*
 * The request's resource into rd: VCU_S_OK with o->res CUDA_SUCCESS, or
 * with o->res saying what is wrong; VCU_S_EINVAL for a malformed one.
 */
static uint32_t vcu__res_desc(vcu__op_t *o, const struct vcu_cu_texobj_req *rq,
                              CUDA_RESOURCE_DESC *rd)
{
    const struct vcu_cu_res_desc *r = &rq->res;
    uint32_t elem, st;

    memset(rd, 0, sizeof(*rd));
    if (r->flags != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    rd->resType = (CUresourcetype)r->type;
    if (r->type == CU_RESOURCE_TYPE_ARRAY || r->type == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY)
        return vcu__res_array(o, rq, rd);
    if (r->type != CU_RESOURCE_TYPE_LINEAR && r->type != CU_RESOURCE_TYPE_PITCH2D) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (rq->kind != VCU_CU_TEXOBJ_TEX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (r->handle != 0)
        return VCU_S_EINVAL;
    elem = vcu__elem(o, r->format, r->channels);
    if (elem == 0)
        return VCU_S_OK;
    st = r->type == CU_RESOURCE_TYPE_LINEAR ? vcu__res_linear(o, r, rd)
                                            : vcu__res_pitch2d(o, r, elem, rd);
    if (st != VCU_S_OK || o->res != CUDA_SUCCESS)
        return st;
    /*
     * The memory must begin in a live allocation of the session; how far
     * it reaches is the driver's to judge, as natively: the driver does not
     * hold a texture to the allocation it starts in (NVIDIA's
     * convolutionFFT2D gives its textures a row of padding more than its
     * buffers hold), and a kernel reaches what a texture reaches through
     * any pointer, in this session's own address space only.
     */
    if (!vcu__owned_range(o, r->ptr, 1))
        o->res = CUDA_ERROR_INVALID_VALUE;
    return VCU_S_OK;
}

/* The texture and view descriptors: 0, or -1 with o->res set. */
static int vcu__tex_desc(vcu__op_t *o, const struct vcu_cu_texobj_req *rq, CUDA_TEXTURE_DESC *td,
                         CUDA_RESOURCE_VIEW_DESC *vd)
{
    const struct vcu_cu_tex_desc *t = &rq->tex;
    const struct vcu_cu_view_desc *v = &rq->view;
    unsigned int i;

    memset(td, 0, sizeof(*td));
    memset(vd, 0, sizeof(*vd));
    for (i = 0; i < 3; i++)
        if (t->address_mode[i] > CU_TR_ADDRESS_MODE_BORDER)
            goto bad;
    if (t->filter_mode > CU_TR_FILTER_MODE_LINEAR ||
        t->mipmap_filter_mode > CU_TR_FILTER_MODE_LINEAR ||
        (t->flags & ~(uint32_t)(CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES |
                                CU_TRSF_SRGB | CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION |
                                CU_TRSF_SEAMLESS_CUBEMAP)) ||
        t->max_anisotropy > 16 || !vcu__finite(t->mipmap_level_bias) ||
        !vcu__finite(t->min_mipmap_level_clamp) || !vcu__finite(t->max_mipmap_level_clamp))
        goto bad;
    for (i = 0; i < 3; i++)
        td->addressMode[i] = (CUaddress_mode)t->address_mode[i];
    td->filterMode = (CUfilter_mode)t->filter_mode;
    td->flags = t->flags;
    td->maxAnisotropy = t->max_anisotropy;
    td->mipmapFilterMode = (CUfilter_mode)t->mipmap_filter_mode;
    memcpy(&td->mipmapLevelBias, &t->mipmap_level_bias, sizeof(float));
    memcpy(&td->minMipmapLevelClamp, &t->min_mipmap_level_clamp, sizeof(float));
    memcpy(&td->maxMipmapLevelClamp, &t->max_mipmap_level_clamp, sizeof(float));
    memcpy(td->borderColor, t->border_color, sizeof(td->borderColor));
    if (!rq->has_view)
        return 0;
    if (v->reserved != 0 || v->format > CU_RES_VIEW_FORMAT_UNSIGNED_BC7 ||
        v->width > VCU_CU_ARRAY_MAX_DIM || v->height > VCU_CU_ARRAY_MAX_DIM ||
        v->depth > VCU_CU_ARRAY_MAX_DIM || v->first_mipmap_level > v->last_mipmap_level ||
        v->first_layer > v->last_layer || v->last_layer >= VCU_CU_ARRAY_MAX_DIM ||
        v->last_mipmap_level >= 32 || (rq->res.type != CU_RESOURCE_TYPE_ARRAY &&
                                       rq->res.type != CU_RESOURCE_TYPE_MIPMAPPED_ARRAY))
        goto bad;
    vd->format = (CUresourceViewFormat)v->format;
    vd->width = (size_t)v->width;
    vd->height = (size_t)v->height;
    vd->depth = (size_t)v->depth;
    vd->firstMipmapLevel = v->first_mipmap_level;
    vd->lastMipmapLevel = v->last_mipmap_level;
    vd->firstLayer = v->first_layer;
    vd->lastLayer = v->last_layer;
    return 0;
bad:
    o->res = CUDA_ERROR_INVALID_VALUE;
    return -1;
}

static int vcu__zero(const void *p, size_t n)
{
    const unsigned char *b = p;

    while (n > 0)
        if (b[--n] != 0)
            return 0;
    return 1;
}

uint32_t vcu__op_CU_TEXOBJ_CREATE(vcu__op_t *o)
{
    struct vcu_cu_texobj_req rq, *keep;
    CUDA_RESOURCE_DESC rd;
    CUDA_TEXTURE_DESC td;
    CUDA_RESOURCE_VIEW_DESC vd;
    vcu__pset_t *set;
    vcu__hent_t *e;
    uint64_t obj = 0, h;
    uint32_t rc;
    int surf;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.kind > VCU_CU_TEXOBJ_SURF || rq.has_view > 1)
        return VCU_S_EINVAL;
    surf = rq.kind == VCU_CU_TEXOBJ_SURF;
    if (surf && (rq.has_view != 0 || !vcu__zero(&rq.tex, sizeof(rq.tex)) ||
                 !vcu__zero(&rq.view, sizeof(rq.view))))
        return VCU_S_EINVAL;
    if (!rq.has_view && !vcu__zero(&rq.view, sizeof(rq.view)))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    rc = vcu__res_desc(o, &rq, &rd);
    if (rc != VCU_S_OK || o->res != CUDA_SUCCESS)
        return rc;
    if (surf && rq.res.type != CU_RESOURCE_TYPE_ARRAY) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (!surf && vcu__tex_desc(o, &rq, &td, &vd) != 0)
        return VCU_S_OK;
    if (vcu__mem_take(o->cs, sizeof(*keep)) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    keep = malloc(sizeof(*keep));
    if (keep == NULL) {
        vcu__mem_give(o->cs, sizeof(*keep));
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    *keep = rq;
    if (surf) {
        CUsurfObject so = 0;

        o->res = VCU__CU(o->cu, cuSurfObjectCreate, &so, &rd);
        obj = so;
    } else {
        CUtexObject to = 0;

        o->res = VCU__CU(o->cu, cuTexObjectCreate, &to, &rd, &td, rq.has_view ? &vd : NULL);
        obj = to;
    }
    if (o->res != CUDA_SUCCESS)
        goto fail;
    set = surf ? &o->cs->surfs : &o->cs->texs;
    e = vcu__new(o, surf ? VCU__H_SURFOBJ : VCU__H_TEXOBJ, &h);
    if (e != NULL) {
        e->u.tex.obj = obj;
        e->u.tex.desc = keep;
        /* A value the set cannot hold is refused: never seen from the driver. */
        if (obj != 0 && obj != VCU__PSET_TOMB && vcu__pset_add(set, obj, h) == 0) {
            o->rb.u64.value = obj;
            return VCU_S_OK;
        }
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        vcu__array_obj_destroy(o->cs, e);
        e->u.tex.obj = 0;       /* not in the set: nothing to take out */
        vcu__del(o->cs, h);     /* frees keep */
        return VCU_S_OK;
    }
    if (surf)
        VCU__CU(o->cu, cuSurfObjectDestroy, (CUsurfObject)obj);
    else
        VCU__CU(o->cu, cuTexObjectDestroy, (CUtexObject)obj);
fail:
    free(keep);
    vcu__mem_give(o->cs, sizeof(*keep));
    return VCU_S_OK;
}

/* The session's object a of kind b (CU_TEXOBJ_DESTROY, CU_TEXOBJ_GET), of
 * the request's device; else NULL with CUDA_ERROR_INVALID_VALUE (the
 * driver's answer for an object it does not know). */
static vcu__hent_t *vcu__texobj_get(vcu__op_t *o, const struct vcu_cu_pair_req *rq)
{
    vcu__pset_t *set = rq->b == VCU_CU_TEXOBJ_SURF ? &o->cs->surfs : &o->cs->texs;
    vcu__hent_t *e = NULL;
    uint64_t h;

    if (rq->a != 0 && rq->a != VCU__PSET_TOMB && vcu__pset_find(set, rq->a, &h))
        e = vcu__htab_get(&o->cs->tab,
                          h, rq->b == VCU_CU_TEXOBJ_SURF ? VCU__H_SURFOBJ : VCU__H_TEXOBJ);
    if (e == NULL || e->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    return e;
}

uint32_t vcu__op_CU_TEXOBJ_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.b > VCU_CU_TEXOBJ_SURF || rq.c != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    e = vcu__texobj_get(o, &rq);
    if (e == NULL)
        return VCU_S_OK;
    h = vcu__htab_handle_at(&o->cs->tab, (uint32_t)(e - o->cs->tab.ent));
    o->res = rq.b == VCU_CU_TEXOBJ_SURF
                 ? VCU__CU(o->cu, cuSurfObjectDestroy, (CUsurfObject)e->u.tex.obj)
                 : VCU__CU(o->cu, cuTexObjectDestroy, (CUtexObject)e->u.tex.obj);
    if (o->res == CUDA_SUCCESS)
        vcu__del(o->cs, h);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_TEXOBJ_GET(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    vcu__hent_t *e;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.b > VCU_CU_TEXOBJ_SURF || rq.c != 0)
        return VCU_S_EINVAL;
    e = vcu__texobj_get(o, &rq);
    if (e == NULL)
        return VCU_S_OK;
    o->rb.texobj.kind = e->u.tex.desc->kind;
    o->rb.texobj.has_view = e->u.tex.desc->has_view;
    o->rb.texobj.res = e->u.tex.desc->res;
    o->rb.texobj.tex = e->u.tex.desc->tex;
    o->rb.texobj.view = e->u.tex.desc->view;
    return VCU_S_OK;
}
