/*
 * CUDA arrays and mipmapped arrays, copies with an array side or a third
 * dimension, texture and surface objects.
 *
 * A CUarray is this library's record (registered as VCU__K_ARRAY) of the
 * host's session handle and the descriptor the array was made with; the
 * host keeps the driver's array.  Texture and surface objects are the
 * host driver's own 64-bit values (kernels take them as parameters); the
 * host keeps the descriptors they were made with, and answers for the
 * objects of this session only.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

typedef struct vcu__mipmap_s vcu__mipmap_t;

typedef struct vcu__array_s {
    int dev;
    uint64_t h;                     /* the host's handle */
    CUDA_ARRAY3D_DESCRIPTOR desc;   /* as made */
    vcu__mipmap_t *owner;           /* a level: its mipmapped array, else NULL */
    struct vcu__array_s *next;      /* vcu__arrays */
} vcu__array_t;

struct vcu__mipmap_s {
    int dev;
    uint64_t h;
    CUDA_ARRAY3D_DESCRIPTOR desc;   /* level 0 */
    unsigned int levels;
    struct vcu__mipmap_s *next;     /* vcu__mipmaps */
};

/* Every live array and mipmapped array, to name the record of a handle
 * the host returns (cuTexObjectGetResourceDesc, a level asked again). */
static pthread_mutex_t vcu__arr_mu = PTHREAD_MUTEX_INITIALIZER;
static vcu__array_t *vcu__arrays;
static vcu__mipmap_t *vcu__mipmaps;

/* Bytes per element of a plain format (the host refuses the others). */
static size_t vcu__fmt_elem(CUarray_format f, unsigned int nch)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return nch;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2u * nch;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4u * nch;
    default:
        return 0;
    }
}

static CUresult vcu__array_here(vcu__ctx_t *c, CUarray a, vcu__array_t **out)
{
    vcu__array_t *v = (vcu__array_t *)a;

    if (a == NULL || !vcu__reg_has(v, VCU__K_ARRAY))
        return CUDA_ERROR_INVALID_HANDLE;
    if (v->dev != c->dev)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = v;
    return CUDA_SUCCESS;
}

static CUmipmappedArray vcu__mipmap_of(int dev, uint64_t h)
{
    vcu__mipmap_t *m;

    pthread_mutex_lock(&vcu__arr_mu);
    for (m = vcu__mipmaps; m != NULL; m = m->next)
        if (m->dev == dev && m->h == h)
            break;
    pthread_mutex_unlock(&vcu__arr_mu);
    return (CUmipmappedArray)m;
}

static CUresult vcu__mipmap_here(vcu__ctx_t *c, CUmipmappedArray a, vcu__mipmap_t **out)
{
    vcu__mipmap_t *m = (vcu__mipmap_t *)a;

    if (a == NULL || !vcu__reg_has(m, VCU__K_MIPMAP) || m->dev != c->dev)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = m;
    return CUDA_SUCCESS;
}

static CUarray vcu__array_of(int dev, uint64_t h)
{
    vcu__array_t *v;

    pthread_mutex_lock(&vcu__arr_mu);
    for (v = vcu__arrays; v != NULL; v = v->next)
        if (v->dev == dev && v->h == h)
            break;
    pthread_mutex_unlock(&vcu__arr_mu);
    return (CUarray)v;
}

/* ---- arrays ---------------------------------------------------------------- */

static CUresult vcu__array_create(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    struct vcu_cu_array_req r;
    struct vcu_cu_u64_resp o;
    vcu__array_t *v;
    vcu__ctx_t *c;
    CUresult e;

    if (pHandle == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.width = d->Width;
    r.height = d->Height;
    r.depth = d->Depth;
    r.format = (uint32_t)d->Format;
    r.channels = d->NumChannels;
    r.flags = d->Flags;
    v = calloc(1, sizeof(*v));
    if (v == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__call(c->dev, VCU_OP_CU_ARRAY_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS) {
        free(v);
        return e;
    }
    v->dev = c->dev;
    v->h = o.value;
    v->desc = *d;
    if (vcu__reg_add(v, VCU__K_ARRAY) != 0) {
        struct vcu_cu_u64_req u = { .value = o.value };

        vcu__call(c->dev, VCU_OP_CU_ARRAY_DESTROY, &u, sizeof(u), NULL, 0, NULL, 0);
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&vcu__arr_mu);
    v->next = vcu__arrays;
    vcu__arrays = v;
    pthread_mutex_unlock(&vcu__arr_mu);
    *pHandle = (CUarray)v;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;

    if (pAllocateArray == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&d, 0, sizeof(d));
    d.Width = pAllocateArray->Width;
    d.Height = pAllocateArray->Height;
    d.Format = pAllocateArray->Format;
    d.NumChannels = pAllocateArray->NumChannels;
    return vcu__array_create(pHandle, &d);
}

VCU__EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    return vcu__array_create(pHandle, pAllocateArray);
}

VCU__EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    struct vcu_cu_u64_req r;
    vcu__array_t *v, **pp;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__array_here(c, hArray, &v);
    if (e != CUDA_SUCCESS)
        return e;
    if (v->owner != NULL)           /* a level goes with its mipmapped array */
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.value = v->h;
    /* The record goes whatever the host says: an array a context reset
     * took is gone there already. */
    e = vcu__call(c->dev, VCU_OP_CU_ARRAY_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    pthread_mutex_lock(&vcu__arr_mu);
    for (pp = &vcu__arrays; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == v) {
            *pp = v->next;
            break;
        }
    }
    pthread_mutex_unlock(&vcu__arr_mu);
    vcu__reg_del(v);
    free(v);
    return e;
}

VCU__EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor,
                                             CUarray hArray)
{
    vcu__array_t *v;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__array_here(c, hArray, &v);
    if (e != CUDA_SUCCESS)
        return e;
    if (pArrayDescriptor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(pArrayDescriptor, 0, sizeof(*pArrayDescriptor));
    pArrayDescriptor->Width = v->desc.Width;
    pArrayDescriptor->Height = v->desc.Height;
    pArrayDescriptor->Format = v->desc.Format;
    pArrayDescriptor->NumChannels = v->desc.NumChannels;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor,
                                               CUarray hArray)
{
    vcu__array_t *v;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__array_here(c, hArray, &v);
    if (e != CUDA_SUCCESS)
        return e;
    if (pArrayDescriptor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pArrayDescriptor = v->desc;
    return CUDA_SUCCESS;
}

/* ---- mipmapped arrays ------------------------------------------------------ */

VCU__EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                            const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                            unsigned int numMipmapLevels)
{
    const CUDA_ARRAY3D_DESCRIPTOR *d = pMipmappedArrayDesc;
    struct vcu_cu_mipmap_req r;
    struct vcu_cu_u64_resp o;
    vcu__mipmap_t *m;
    vcu__ctx_t *c;
    CUresult e;

    if (pHandle == NULL || d == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.a.width = d->Width;
    r.a.height = d->Height;
    r.a.depth = d->Depth;
    r.a.format = (uint32_t)d->Format;
    r.a.channels = d->NumChannels;
    r.a.flags = d->Flags;
    r.levels = numMipmapLevels;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__call(c->dev, VCU_OP_CU_MIPMAP_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS) {
        free(m);
        return e;
    }
    m->dev = c->dev;
    m->h = o.value;
    m->desc = *d;
    m->levels = numMipmapLevels;
    if (vcu__reg_add(m, VCU__K_MIPMAP) != 0) {
        struct vcu_cu_u64_req u = { .value = o.value };

        vcu__call(c->dev, VCU_OP_CU_MIPMAP_DESTROY, &u, sizeof(u), NULL, 0, NULL, 0);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&vcu__arr_mu);
    m->next = vcu__mipmaps;
    vcu__mipmaps = m;
    pthread_mutex_unlock(&vcu__arr_mu);
    *pHandle = (CUmipmappedArray)m;
    return CUDA_SUCCESS;
}

/* The same CUarray each time a level is asked for, as the driver's. */
VCU__EXPORT CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray,
                                              CUmipmappedArray hMipmappedArray,
                                              unsigned int level)
{
    struct vcu_cu_pair_req r;
    struct vcu_cu_u64_resp o;
    vcu__mipmap_t *m;
    vcu__array_t *v;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__mipmap_here(c, hMipmappedArray, &m);
    if (e != CUDA_SUCCESS)
        return e;
    if (pLevelArray == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.a = m->h;
    r.b = level;
    e = vcu__call(c->dev, VCU_OP_CU_MIPMAP_LEVEL, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    v = (vcu__array_t *)vcu__array_of(c->dev, o.value);
    if (v != NULL) {
        *pLevelArray = (CUarray)v;
        return CUDA_SUCCESS;
    }
    v = calloc(1, sizeof(*v));
    if (v == NULL || vcu__reg_add(v, VCU__K_ARRAY) != 0) {
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->dev = c->dev;
    v->h = o.value;
    v->owner = m;
    v->desc = m->desc;
    v->desc.Width = m->desc.Width >> level ? m->desc.Width >> level : 1;
    if (m->desc.Height != 0)
        v->desc.Height = m->desc.Height >> level ? m->desc.Height >> level : 1;
    if (m->desc.Depth != 0 && !(m->desc.Flags & CUDA_ARRAY3D_LAYERED))
        v->desc.Depth = m->desc.Depth >> level ? m->desc.Depth >> level : 1;
    pthread_mutex_lock(&vcu__arr_mu);
    v->next = vcu__arrays;
    vcu__arrays = v;
    pthread_mutex_unlock(&vcu__arr_mu);
    *pLevelArray = (CUarray)v;
    return CUDA_SUCCESS;
}

/* Its levels' records go with it, whatever the host says (as arrays'). */
VCU__EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    struct vcu_cu_u64_req r;
    vcu__mipmap_t *m, **mp;
    vcu__array_t **pp, *dead = NULL;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__mipmap_here(c, hMipmappedArray, &m);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.value = m->h;
    e = vcu__call(c->dev, VCU_OP_CU_MIPMAP_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    pthread_mutex_lock(&vcu__arr_mu);
    for (pp = &vcu__arrays; *pp != NULL;) {
        vcu__array_t *v = *pp;

        if (v->owner == m) {
            *pp = v->next;
            v->next = dead;
            dead = v;
        } else {
            pp = &v->next;
        }
    }
    for (mp = &vcu__mipmaps; *mp != NULL; mp = &(*mp)->next) {
        if (*mp == m) {
            *mp = m->next;
            break;
        }
    }
    pthread_mutex_unlock(&vcu__arr_mu);
    while (dead != NULL) {
        vcu__array_t *v = dead;

        dead = v->next;
        vcu__reg_del(v);
        free(v);
    }
    vcu__reg_del(m);
    free(m);
    return e;
}

/* ---- copies ---------------------------------------------------------------- */

/* One side of a copy, as this library sends it. */
typedef struct vcu__side_s {
    CUmemorytype type;
    char *host;                     /* HOST: the first byte of (x, y, z) */
    struct vcu_cu_memcpy3d_side w;  /* the wire's; HOST: pitch, height */
} vcu__side_t;

static CUresult vcu__side(vcu__ctx_t *c, CUmemorytype type, const void *host, CUdeviceptr dev,
                          CUarray arr, size_t x, size_t y, size_t z, size_t pitch, size_t height,
                          vcu__side_t *s)
{
    vcu__array_t *v;
    CUresult e;
    int is_dev;

    memset(s, 0, sizeof(*s));
    if (type == CU_MEMORYTYPE_UNIFIED) {
        /* Device memory where the host knows an allocation there. */
        e = vcu__is_device(c->dev, dev, &is_dev);
        if (e != CUDA_SUCCESS)
            return e;
        type = is_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        host = (const void *)(uintptr_t)dev;
    }
    s->type = type;
    s->w.type = (uint32_t)type;
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        if (host == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        if (z > SIZE_MAX / (height ? height : 1) ||
            z * height > SIZE_MAX - y || (z * height + y) > SIZE_MAX / (pitch ? pitch : 1))
            return CUDA_ERROR_INVALID_VALUE;
        s->host = (char *)(uintptr_t)host + x + (z * height + y) * pitch;
        s->w.pitch = pitch;
        s->w.height = height;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
        if (dev == 0)
            return CUDA_ERROR_INVALID_VALUE;
        s->w.ptr = dev;
        s->w.pitch = pitch;
        s->w.height = height;
        break;
    case CU_MEMORYTYPE_ARRAY:
        e = vcu__array_here(c, arr, &v);
        if (e != CUDA_SUCCESS)
            return e;
        s->w.ptr = v->h;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    s->w.x = x;
    s->w.y = y;
    s->w.z = z;
    return CUDA_SUCCESS;
}

/*
 * Sends one piece: rows [y0, y0 + h) of slices [z0, z0 + d) of the
 * copy.  The host side's segment holds exactly what the piece reads or
 * writes.
 */
static CUresult vcu__copy3d_piece(vcu__ctx_t *c, const vcu__side_t *src, const vcu__side_t *dst,
                                  size_t width, size_t y0, size_t h, size_t z0, size_t d,
                                  uint64_t stream, int async, vcu__ctx_t *const peer[2])
{
    struct vcu_cu_memcpy3d_req r;
    const vcu__side_t *hs = src->type == CU_MEMORYTYPE_HOST ? src : dst;
    vcu_buf_t b;
    int nbufs = 0;

    memset(&r, 0, sizeof(r));
    r.src = src->w;
    r.dst = dst->w;
    r.width = width;
    r.height = h;
    r.depth = d;
    r.stream = stream;
    r.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
    if (src->type != CU_MEMORYTYPE_HOST) {
        r.src.y += y0;
        r.src.z += z0;
    }
    if (dst->type != CU_MEMORYTYPE_HOST) {
        r.dst.y += y0;
        r.dst.z += z0;
    }
    if (hs->type == CU_MEMORYTYPE_HOST) {
        b.addr = hs->host + (z0 * hs->w.height + y0) * hs->w.pitch;
        b.len = ((uint64_t)(d - 1) * hs->w.height + (h - 1)) * hs->w.pitch + width;
        b.flags = hs == src ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE;
        nbufs = 1;
    }
    if (peer != NULL) {
        r.src.reserved = vcu__drv.dev[peer[0]->dev].vord;
        r.dst.reserved = vcu__drv.dev[peer[1]->dev].vord;
    }
    return vcu__call(c->dev, peer != NULL ? VCU_OP_CU_MEMCPY_3D_PEER : VCU_OP_CU_MEMCPY_3D, &r,
                     sizeof(r), &b, nbufs, NULL, 0);
}

/*
 * Any copy of cuMemcpy3D's shape.  With a host side, in pieces within
 * the session's transfer limit: whole slices where one fits, else rows
 * of one slice.  Host to host is done here.  peer: the contexts of the
 * source and the destination (cuMemcpy3DPeer between two devices, sent
 * as CU_MEMCPY_3D_PEER from the current context), or NULL.
 */
static CUresult vcu__copy3d_on(const CUDA_MEMCPY3D *p, int async, CUstream stream, int ptsz,
                               vcu__ctx_t *const peer[2])
{
    vcu__side_t src, dst;
    const vcu__side_t *hs;
    uint64_t wire = 0, max = vcu__drv.max_xfer, slice, stride;
    vcu__ctx_t *c;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS && async)
        e = vcu__stream(c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0)
        return CUDA_SUCCESS;
    if ((p->Height > 1 || p->Depth > 1) &&
        ((p->srcMemoryType != CU_MEMORYTYPE_ARRAY && p->srcPitch < p->WidthInBytes) ||
         (p->dstMemoryType != CU_MEMORYTYPE_ARRAY && p->dstPitch < p->WidthInBytes)))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->Depth > 1 &&
        ((p->srcMemoryType != CU_MEMORYTYPE_ARRAY && p->srcHeight < p->Height) ||
         (p->dstMemoryType != CU_MEMORYTYPE_ARRAY && p->dstHeight < p->Height)))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__side(peer != NULL ? peer[0] : c, p->srcMemoryType, p->srcHost, p->srcDevice,
                  p->srcArray, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight, &src);
    if (e == CUDA_SUCCESS)
        e = vcu__side(peer != NULL ? peer[1] : c, p->dstMemoryType, p->dstHost, p->dstDevice,
                      p->dstArray, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight,
                      &dst);
    if (e != CUDA_SUCCESS)
        return e;
    if (src.type == CU_MEMORYTYPE_HOST && dst.type == CU_MEMORYTYPE_HOST) {
        if (async) {
            e = ptsz ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream);
            if (e != CUDA_SUCCESS)
                return e;
        }
        for (size_t z = 0; z < p->Depth; z++)
            for (size_t y = 0; y < p->Height; y++)
                memmove(dst.host + (z * p->dstHeight + y) * p->dstPitch,
                        src.host + (z * p->srcHeight + y) * p->srcPitch, p->WidthInBytes);
        return CUDA_SUCCESS;
    }
    hs = src.type == CU_MEMORYTYPE_HOST ? &src : dst.type == CU_MEMORYTYPE_HOST ? &dst : NULL;
    if (hs == NULL)
        return vcu__copy3d_piece(c, &src, &dst, p->WidthInBytes, 0, p->Height, 0, p->Depth,
                                 wire, async, peer);
    if (p->WidthInBytes > max)
        return CUDA_ERROR_INVALID_VALUE;
    slice = (uint64_t)(p->Height - 1) * hs->w.pitch + p->WidthInBytes;
    stride = (uint64_t)hs->w.height * hs->w.pitch;
    if (slice <= max) {
        /* As many whole slices as fit. */
        size_t per = p->Depth == 1 || stride == 0 ? p->Depth : (size_t)((max - slice) / stride + 1);

        for (size_t z = 0; z < p->Depth; z += per) {
            size_t n = p->Depth - z < per ? p->Depth - z : per;

            e = vcu__copy3d_piece(c, &src, &dst, p->WidthInBytes, 0, p->Height, z, n, wire,
                                  async, peer);
            if (e != CUDA_SUCCESS)
                return e;
        }
        return CUDA_SUCCESS;
    }
    for (size_t z = 0; z < p->Depth; z++) {
        size_t per = hs->w.pitch ? (size_t)((max - p->WidthInBytes) / hs->w.pitch + 1) : 1;

        for (size_t y = 0; y < p->Height; y += per) {
            size_t n = p->Height - y < per ? p->Height - y : per;

            e = vcu__copy3d_piece(c, &src, &dst, p->WidthInBytes, y, n, z, 1, wire, async,
                                  peer);
            if (e != CUDA_SUCCESS)
                return e;
        }
    }
    return CUDA_SUCCESS;
}

static CUresult vcu__copy3d(const CUDA_MEMCPY3D *p, int async, CUstream stream, int ptsz)
{
    return vcu__copy3d_on(p, async, stream, ptsz, NULL);
}

CUresult vcu__copy2d_array(const CUDA_MEMCPY2D *p, int async, CUstream stream, int ptsz)
{
    CUDA_MEMCPY3D m;

    memset(&m, 0, sizeof(m));
    m.srcXInBytes = p->srcXInBytes;
    m.srcY = p->srcY;
    m.srcMemoryType = p->srcMemoryType;
    m.srcHost = p->srcHost;
    m.srcDevice = p->srcDevice;
    m.srcArray = p->srcArray;
    m.srcPitch = p->srcPitch;
    m.srcHeight = p->Height;
    m.dstXInBytes = p->dstXInBytes;
    m.dstY = p->dstY;
    m.dstMemoryType = p->dstMemoryType;
    m.dstHost = p->dstHost;
    m.dstDevice = p->dstDevice;
    m.dstArray = p->dstArray;
    m.dstPitch = p->dstPitch;
    m.dstHeight = p->Height;
    m.WidthInBytes = p->WidthInBytes;
    m.Height = p->Height;
    m.Depth = 1;
    return vcu__copy3d(&m, async, stream, ptsz);
}

VCU__EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
    return vcu__copy3d(pCopy, 0, NULL, 0);
}

/* Synchronous: ordered after the per-thread stream's work too (see
 * cuMemcpyHtoD_v2_ptds). */
VCU__EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy)
{
    return vcu__copy3d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return vcu__copy3d(pCopy, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    return vcu__copy3d(pCopy, 1, hStream, 1);
}

/*
 * cuMemcpy3DPeer[Async]: cuMemcpy3D's copy between a context of the
 * source's device and one of the destination's.  Both of the current
 * context's device: a cuMemcpy3D there; else CU_MEMCPY_3D_PEER, which
 * the host copies between its contexts of the two devices (an array side
 * must be of its context's device).
 */
static CUresult vcu__copy3d_peer(const CUDA_MEMCPY3D_PEER *p, int async, CUstream stream,
                                 int ptsz)
{
    vcu__ctx_t *peer[2], *c;
    CUDA_MEMCPY3D m;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    peer[0] = (vcu__ctx_t *)p->srcContext;
    peer[1] = (vcu__ctx_t *)p->dstContext;
    if (peer[0] == NULL || peer[1] == NULL || !vcu__reg_has(peer[0], VCU__K_CTX) ||
        !vcu__reg_has(peer[1], VCU__K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    memset(&m, 0, sizeof(m));
    m.srcXInBytes = p->srcXInBytes;
    m.srcY = p->srcY;
    m.srcZ = p->srcZ;
    m.srcLOD = p->srcLOD;
    m.srcMemoryType = p->srcMemoryType;
    m.srcHost = p->srcHost;
    m.srcDevice = p->srcDevice;
    m.srcArray = p->srcArray;
    m.srcPitch = p->srcPitch;
    m.srcHeight = p->srcHeight;
    m.dstXInBytes = p->dstXInBytes;
    m.dstY = p->dstY;
    m.dstZ = p->dstZ;
    m.dstLOD = p->dstLOD;
    m.dstMemoryType = p->dstMemoryType;
    m.dstHost = p->dstHost;
    m.dstDevice = p->dstDevice;
    m.dstArray = p->dstArray;
    m.dstPitch = p->dstPitch;
    m.dstHeight = p->dstHeight;
    m.WidthInBytes = p->WidthInBytes;
    m.Height = p->Height;
    m.Depth = p->Depth;
    if (peer[0]->dev == c->dev && peer[1]->dev == c->dev)
        return vcu__copy3d(&m, async, stream, ptsz);
    return vcu__copy3d_on(&m, async, stream, ptsz, peer);
}

VCU__EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy)
{
    return vcu__copy3d_peer(pCopy, 0, NULL, 0);
}

/* Synchronous: ordered after the per-thread stream's work too (see
 * cuMemcpyHtoD_v2_ptds). */
VCU__EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *pCopy)
{
    return vcu__copy3d_peer(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
    return vcu__copy3d_peer(pCopy, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
    return vcu__copy3d_peer(pCopy, 1, hStream, 1);
}

/* An array's row in bytes, its height (1 for a 1D array) and its rows in
 * all its slices. */
static size_t vcu__arr_row(const vcu__array_t *v)
{
    return v->desc.Width * vcu__fmt_elem(v->desc.Format, v->desc.NumChannels);
}

static size_t vcu__arr_h(const vcu__array_t *v)
{
    return v->desc.Height ? v->desc.Height : 1;
}

static size_t vcu__arr_rows(const vcu__array_t *v)
{
    return vcu__arr_h(v) * (v->desc.Depth ? v->desc.Depth : 1);
}

/* Array to array (v at byte off, ov at ooff, n bytes): the same row layout
 * on both sides, else one row of either at a time; rows past the first
 * slice are the next slices' rows. */
static CUresult vcu__array_to_array(vcu__array_t *v, size_t off, vcu__array_t *ov, size_t ooff,
                                    size_t n, int arr_is_dst, int async, CUstream stream,
                                    int ptsz)
{
    vcu__array_t *dv = arr_is_dst ? v : ov, *sv = arr_is_dst ? ov : v;
    size_t row = vcu__arr_row(v), orow = vcu__arr_row(ov);
    size_t drow = arr_is_dst ? row : orow, srow = arr_is_dst ? orow : row;
    CUresult e;

    if (orow == 0 || ooff > orow * vcu__arr_rows(ov) || n > orow * vcu__arr_rows(ov) - ooff)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t done = 0; done < n;) {
        size_t a = off + done, b = ooff + done;
        size_t da = arr_is_dst ? a : b, sa = arr_is_dst ? b : a;
        size_t k = n - done;
        CUDA_MEMCPY3D m;

        if (k > row - a % row)
            k = row - a % row;
        if (k > orow - b % orow)
            k = orow - b % orow;
        memset(&m, 0, sizeof(m));
        m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_ARRAY;
        m.dstArray = (CUarray)dv;
        m.srcArray = (CUarray)sv;
        m.dstXInBytes = da % drow;
        m.dstY = da / drow;
        m.srcXInBytes = sa % srow;
        m.srcY = sa / srow;
        m.WidthInBytes = k;
        m.Height = 1;
        m.Depth = 1;
        if (dv->desc.Depth) {
            m.dstZ = m.dstY / vcu__arr_h(dv);
            m.dstY %= vcu__arr_h(dv);
        }
        if (sv->desc.Depth) {
            m.srcZ = m.srcY / vcu__arr_h(sv);
            m.srcY %= vcu__arr_h(sv);
        }
        e = vcu__copy3d(&m, async, stream, ptsz);
        if (e != CUDA_SUCCESS)
            return e;
        done += k;
    }
    return CUDA_SUCCESS;
}

/*
 * The copies that name a byte offset into an array: the array's bytes
 * taken row after row (a 1D array is one row), as the driver takes them.
 * One piece per partial row at either end and one for the whole rows
 * between.  other: the linear side (host or device memory, or a second
 * array at its own offset for AtoA).
 */
static CUresult vcu__array_linear(CUarray arr, size_t off, int arr_is_dst, CUmemorytype otype,
                                  const void *ohost, CUdeviceptr odev, CUarray oarr,
                                  size_t ooff, size_t n, int async, CUstream stream, int ptsz)
{
    vcu__array_t *v, *ov = NULL;
    vcu__ctx_t *c;
    size_t row, h;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__array_here(c, arr, &v);
    if (e == CUDA_SUCCESS && otype == CU_MEMORYTYPE_ARRAY)
        e = vcu__array_here(c, oarr, &ov);
    if (e != CUDA_SUCCESS)
        return e;
    row = vcu__arr_row(v);
    h = vcu__arr_h(v);
    if (row == 0 || off > row * vcu__arr_rows(v) || n > row * vcu__arr_rows(v) - off)
        return CUDA_ERROR_INVALID_VALUE;
    if (ov != NULL)
        return vcu__array_to_array(v, off, ov, ooff, n, arr_is_dst, async, stream, ptsz);
    for (size_t done = 0; done < n;) {
        size_t a = off + done, k, nrows = 1;
        CUDA_MEMCPY3D m;

        if (a % row != 0 || n - done < row)
            k = (n - done < row - a % row) ? n - done : row - a % row;
        else {
            /* Whole rows, within one slice. */
            nrows = (n - done) / row;
            if (nrows > h - (a / row) % h)
                nrows = h - (a / row) % h;
            k = row;
        }
        memset(&m, 0, sizeof(m));
        m.WidthInBytes = k;
        m.Height = nrows;
        m.Depth = 1;
        if (arr_is_dst) {
            m.dstMemoryType = CU_MEMORYTYPE_ARRAY;
            m.dstArray = arr;
            m.dstXInBytes = a % row;
            m.dstY = (a / row) % h;
            m.dstZ = (a / row) / h;
            m.srcMemoryType = otype;
            m.srcHost = otype == CU_MEMORYTYPE_HOST ? (const char *)ohost + done : NULL;
            m.srcDevice = otype == CU_MEMORYTYPE_DEVICE ? odev + done : 0;
            m.srcPitch = row;
            m.srcHeight = nrows;
        } else {
            m.srcMemoryType = CU_MEMORYTYPE_ARRAY;
            m.srcArray = arr;
            m.srcXInBytes = a % row;
            m.srcY = (a / row) % h;
            m.srcZ = (a / row) / h;
            m.dstMemoryType = otype;
            m.dstHost = otype == CU_MEMORYTYPE_HOST ? (char *)(uintptr_t)ohost + done : NULL;
            m.dstDevice = otype == CU_MEMORYTYPE_DEVICE ? odev + done : 0;
            m.dstPitch = row;
            m.dstHeight = nrows;
        }
        e = vcu__copy3d(&m, async, stream, ptsz);
        if (e != CUDA_SUCCESS)
            return e;
        done += k * nrows;
    }
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                     size_t ByteCount)
{
    return vcu__array_linear(dstArray, dstOffset, 1, CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0,
                             ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyHtoA_v2_ptds(CUarray dstArray, size_t dstOffset,
                                          const void *srcHost, size_t ByteCount)
{
    return cuMemcpyHtoA_v2(dstArray, dstOffset, srcHost, ByteCount);
}

VCU__EXPORT CUresult cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray, size_t srcOffset,
                                     size_t ByteCount)
{
    return vcu__array_linear(srcArray, srcOffset, 0, CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0,
                             ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyAtoH_v2_ptds(void *dstHost, CUarray srcArray, size_t srcOffset,
                                          size_t ByteCount)
{
    return cuMemcpyAtoH_v2(dstHost, srcArray, srcOffset, ByteCount);
}

VCU__EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset,
                                          const void *srcHost, size_t ByteCount,
                                          CUstream hStream)
{
    return vcu__array_linear(dstArray, dstOffset, 1, CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0,
                             ByteCount, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dstArray, size_t dstOffset,
                                               const void *srcHost, size_t ByteCount,
                                               CUstream hStream)
{
    return vcu__array_linear(dstArray, dstOffset, 1, CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0,
                             ByteCount, 1, hStream, 1);
}

VCU__EXPORT CUresult cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset,
                                          size_t ByteCount, CUstream hStream)
{
    return vcu__array_linear(srcArray, srcOffset, 0, CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0,
                             ByteCount, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dstHost, CUarray srcArray,
                                               size_t srcOffset, size_t ByteCount,
                                               CUstream hStream)
{
    return vcu__array_linear(srcArray, srcOffset, 0, CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0,
                             ByteCount, 1, hStream, 1);
}

VCU__EXPORT CUresult cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,
                                     size_t ByteCount)
{
    return vcu__array_linear(dstArray, dstOffset, 1, CU_MEMORYTYPE_DEVICE, NULL, srcDevice,
                             NULL, 0, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray dstArray, size_t dstOffset,
                                          CUdeviceptr srcDevice, size_t ByteCount)
{
    return cuMemcpyDtoA_v2(dstArray, dstOffset, srcDevice, ByteCount);
}

VCU__EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,
                                     size_t ByteCount)
{
    return vcu__array_linear(srcArray, srcOffset, 0, CU_MEMORYTYPE_DEVICE, NULL, dstDevice,
                             NULL, 0, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dstDevice, CUarray srcArray,
                                          size_t srcOffset, size_t ByteCount)
{
    return cuMemcpyAtoD_v2(dstDevice, srcArray, srcOffset, ByteCount);
}

VCU__EXPORT CUresult cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray,
                                     size_t srcOffset, size_t ByteCount)
{
    return vcu__array_linear(dstArray, dstOffset, 1, CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray,
                             srcOffset, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyAtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUarray srcArray,
                                          size_t srcOffset, size_t ByteCount)
{
    return cuMemcpyAtoA_v2(dstArray, dstOffset, srcArray, srcOffset, ByteCount);
}

/* ---- texture and surface objects ------------------------------------------- */

static CUresult vcu__res_to_wire(vcu__ctx_t *c, const CUDA_RESOURCE_DESC *r,
                                 struct vcu_cu_res_desc *w)
{
    vcu__array_t *v;
    CUresult e;

    memset(w, 0, sizeof(*w));
    w->type = (uint32_t)r->resType;
    w->flags = r->flags;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        e = vcu__array_here(c, r->res.array.hArray, &v);
        if (e != CUDA_SUCCESS)
            return e;
        w->handle = v->h;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
        vcu__mipmap_t *m;

        e = vcu__mipmap_here(c, r->res.mipmap.hMipmappedArray, &m);
        if (e != CUDA_SUCCESS)
            return e;
        w->handle = m->h;
        return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_LINEAR:
        w->ptr = r->res.linear.devPtr;
        w->format = (uint32_t)r->res.linear.format;
        w->channels = r->res.linear.numChannels;
        w->size = r->res.linear.sizeInBytes;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_PITCH2D:
        w->ptr = r->res.pitch2D.devPtr;
        w->format = (uint32_t)r->res.pitch2D.format;
        w->channels = r->res.pitch2D.numChannels;
        w->width = r->res.pitch2D.width;
        w->height = r->res.pitch2D.height;
        w->pitch = r->res.pitch2D.pitchInBytes;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static void vcu__res_from_wire(int dev, const struct vcu_cu_res_desc *w, CUDA_RESOURCE_DESC *r)
{
    memset(r, 0, sizeof(*r));
    r->resType = (CUresourcetype)w->type;
    r->flags = w->flags;
    switch (w->type) {
    case CU_RESOURCE_TYPE_ARRAY:
        r->res.array.hArray = vcu__array_of(dev, w->handle);
        break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        r->res.mipmap.hMipmappedArray = vcu__mipmap_of(dev, w->handle);
        break;
    case CU_RESOURCE_TYPE_LINEAR:
        r->res.linear.devPtr = w->ptr;
        r->res.linear.format = (CUarray_format)w->format;
        r->res.linear.numChannels = w->channels;
        r->res.linear.sizeInBytes = w->size;
        break;
    case CU_RESOURCE_TYPE_PITCH2D:
        r->res.pitch2D.devPtr = w->ptr;
        r->res.pitch2D.format = (CUarray_format)w->format;
        r->res.pitch2D.numChannels = w->channels;
        r->res.pitch2D.width = w->width;
        r->res.pitch2D.height = w->height;
        r->res.pitch2D.pitchInBytes = w->pitch;
        break;
    }
}

static CUresult vcu__obj_create(uint32_t kind, uint64_t *out, const CUDA_RESOURCE_DESC *pResDesc,
                                const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v)
{
    struct vcu_cu_texobj_req r;
    struct vcu_cu_u64_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (out == NULL || pResDesc == NULL || (kind == VCU_CU_TEXOBJ_TEX && t == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    e = vcu__res_to_wire(c, pResDesc, &r.res);
    if (e != CUDA_SUCCESS)
        return e;
    if (t != NULL) {
        for (int i = 0; i < 3; i++)
            r.tex.address_mode[i] = (uint32_t)t->addressMode[i];
        r.tex.filter_mode = (uint32_t)t->filterMode;
        r.tex.flags = t->flags;
        r.tex.max_anisotropy = t->maxAnisotropy;
        r.tex.mipmap_filter_mode = (uint32_t)t->mipmapFilterMode;
        memcpy(&r.tex.mipmap_level_bias, &t->mipmapLevelBias, 4);
        memcpy(&r.tex.min_mipmap_level_clamp, &t->minMipmapLevelClamp, 4);
        memcpy(&r.tex.max_mipmap_level_clamp, &t->maxMipmapLevelClamp, 4);
        memcpy(r.tex.border_color, t->borderColor, sizeof(r.tex.border_color));
    }
    if (v != NULL) {
        r.has_view = 1;
        r.view.format = (uint32_t)v->format;
        r.view.width = v->width;
        r.view.height = v->height;
        r.view.depth = v->depth;
        r.view.first_mipmap_level = v->firstMipmapLevel;
        r.view.last_mipmap_level = v->lastMipmapLevel;
        r.view.first_layer = v->firstLayer;
        r.view.last_layer = v->lastLayer;
    }
    e = vcu__call(c->dev, VCU_OP_CU_TEXOBJ_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS)
        *out = o.value;
    return e;
}

static CUresult vcu__obj_get(uint32_t kind, uint64_t obj, struct vcu_cu_texobj_resp *o, int *dev)
{
    struct vcu_cu_pair_req r;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.a = obj;
    r.b = kind;
    *dev = c->dev;
    return vcu__call(c->dev, VCU_OP_CU_TEXOBJ_GET, &r, sizeof(r), NULL, 0, o, sizeof(*o));
}

static CUresult vcu__obj_destroy(uint32_t kind, uint64_t obj)
{
    struct vcu_cu_pair_req r;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.a = obj;
    r.b = kind;
    return vcu__call(c->dev, VCU_OP_CU_TEXOBJ_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                                       const CUDA_TEXTURE_DESC *pTexDesc,
                                       const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
    uint64_t v = 0;
    CUresult e = vcu__obj_create(VCU_CU_TEXOBJ_TEX, pTexObject ? &v : NULL, pResDesc, pTexDesc,
                                 pResViewDesc);

    if (e == CUDA_SUCCESS)
        *pTexObject = (CUtexObject)v;
    return e;
}

VCU__EXPORT CUresult cuTexObjectDestroy(CUtexObject texObject)
{
    return vcu__obj_destroy(VCU_CU_TEXOBJ_TEX, texObject);
}

VCU__EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc,
                                                CUtexObject texObject)
{
    struct vcu_cu_texobj_resp o;
    int dev;
    CUresult e;

    if (pResDesc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__obj_get(VCU_CU_TEXOBJ_TEX, texObject, &o, &dev);
    if (e == CUDA_SUCCESS)
        vcu__res_from_wire(dev, &o.res, pResDesc);
    return e;
}

VCU__EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject)
{
    struct vcu_cu_texobj_resp o;
    int dev;
    CUresult e;

    if (pTexDesc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__obj_get(VCU_CU_TEXOBJ_TEX, texObject, &o, &dev);
    if (e != CUDA_SUCCESS)
        return e;
    memset(pTexDesc, 0, sizeof(*pTexDesc));
    for (int i = 0; i < 3; i++)
        pTexDesc->addressMode[i] = (CUaddress_mode)o.tex.address_mode[i];
    pTexDesc->filterMode = (CUfilter_mode)o.tex.filter_mode;
    pTexDesc->flags = o.tex.flags;
    pTexDesc->maxAnisotropy = o.tex.max_anisotropy;
    pTexDesc->mipmapFilterMode = (CUfilter_mode)o.tex.mipmap_filter_mode;
    memcpy(&pTexDesc->mipmapLevelBias, &o.tex.mipmap_level_bias, 4);
    memcpy(&pTexDesc->minMipmapLevelClamp, &o.tex.min_mipmap_level_clamp, 4);
    memcpy(&pTexDesc->maxMipmapLevelClamp, &o.tex.max_mipmap_level_clamp, 4);
    memcpy(pTexDesc->borderColor, o.tex.border_color, sizeof(pTexDesc->borderColor));
    return CUDA_SUCCESS;
}

/* As the driver: CUDA_ERROR_INVALID_VALUE for an object made without a
 * view. */
VCU__EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *pResViewDesc,
                                                    CUtexObject texObject)
{
    struct vcu_cu_texobj_resp o;
    int dev;
    CUresult e;

    if (pResViewDesc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__obj_get(VCU_CU_TEXOBJ_TEX, texObject, &o, &dev);
    if (e != CUDA_SUCCESS)
        return e;
    if (!o.has_view)
        return CUDA_ERROR_INVALID_VALUE;
    memset(pResViewDesc, 0, sizeof(*pResViewDesc));
    pResViewDesc->format = (CUresourceViewFormat)o.view.format;
    pResViewDesc->width = o.view.width;
    pResViewDesc->height = o.view.height;
    pResViewDesc->depth = o.view.depth;
    pResViewDesc->firstMipmapLevel = o.view.first_mipmap_level;
    pResViewDesc->lastMipmapLevel = o.view.last_mipmap_level;
    pResViewDesc->firstLayer = o.view.first_layer;
    pResViewDesc->lastLayer = o.view.last_layer;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuSurfObjectCreate(CUsurfObject *pSurfObject,
                                        const CUDA_RESOURCE_DESC *pResDesc)
{
    uint64_t v = 0;
    CUresult e = vcu__obj_create(VCU_CU_TEXOBJ_SURF, pSurfObject ? &v : NULL, pResDesc, NULL,
                                 NULL);

    if (e == CUDA_SUCCESS)
        *pSurfObject = (CUsurfObject)v;
    return e;
}

VCU__EXPORT CUresult cuSurfObjectDestroy(CUsurfObject surfObject)
{
    return vcu__obj_destroy(VCU_CU_TEXOBJ_SURF, surfObject);
}

VCU__EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc,
                                                 CUsurfObject surfObject)
{
    struct vcu_cu_texobj_resp o;
    int dev;
    CUresult e;

    if (pResDesc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__obj_get(VCU_CU_TEXOBJ_SURF, surfObject, &o, &dev);
    if (e == CUDA_SUCCESS)
        vcu__res_from_wire(dev, &o.res, pResDesc);
    return e;
}
