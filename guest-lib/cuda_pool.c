/*
 * libcuda.so.1: stream-ordered allocation from the device's default
 * memory pool (the host's pool of the device; created pools are not
 * offered), over CU_MEMPOOL_* and CU_MEM_ALLOC_ASYNC/CU_MEM_FREE_ASYNC.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

static vcu__pool_t *vcu__pools[VCU_CU_MAX_DEVICES];   /* under vcu__drv.lock */

VCU__EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    struct vcu_cu_hdr h;
    struct vcu_cu_u64_resp o;
    vcu__pool_t *p;
    CUresult e;

    if (pool_out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_dev(dev);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    p = vcu__pools[dev];
    pthread_mutex_unlock(&vcu__drv.lock);
    if (p == NULL) {
        e = vcu__call(dev, VCU_OP_CU_MEMPOOL_GET_DEFAULT, &h, sizeof(h), NULL, 0, &o, sizeof(o));
        if (e != CUDA_SUCCESS)
            return e;
        p = calloc(1, sizeof(*p));
        if (p == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        p->dev = dev;
        p->h = o.value;
        pthread_mutex_lock(&vcu__drv.lock);
        if (vcu__pools[dev] == NULL && vcu__reg_add(p, VCU__K_POOL) == 0) {
            vcu__pools[dev] = p;
        } else {
            free(p);
            p = vcu__pools[dev];
        }
        pthread_mutex_unlock(&vcu__drv.lock);
        if (p == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* The current pool is the default one (cuDeviceSetMemPool is not offered). */
VCU__EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return cuDeviceGetDefaultMemPool(pool, dev);
}

static CUresult vcu__pool_arg(CUmemoryPool pool, vcu__pool_t **out)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(pool, VCU__K_POOL))
        return CUDA_ERROR_INVALID_VALUE;
    *out = (vcu__pool_t *)pool;
    return CUDA_SUCCESS;
}

/* The three reuse attributes are ints, the rest cuuint64_t (cuda.h). */
static int vcu__pool_attr_is_int(CUmemPool_attribute attr)
{
    return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

VCU__EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
    struct vcu_cu_attr_req r;
    vcu__pool_t *p;
    CUresult e;

    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__pool_arg(pool, &p);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.handle = p->h;
    r.attr = (uint32_t)attr;
    r.value = vcu__pool_attr_is_int(attr) ? (uint64_t)(int64_t)*(int *)value
                                          : *(cuuint64_t *)value;
    return vcu__call(p->dev, VCU_OP_CU_MEMPOOL_SET_ATTR, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
    struct vcu_cu_attr_req r;
    struct vcu_cu_u64_resp o;
    vcu__pool_t *p;
    CUresult e;

    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__pool_arg(pool, &p);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.handle = p->h;
    r.attr = (uint32_t)attr;
    e = vcu__call(p->dev, VCU_OP_CU_MEMPOOL_GET_ATTR, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    if (vcu__pool_attr_is_int(attr))
        *(int *)value = (int)o.value;
    else
        *(cuuint64_t *)value = o.value;
    return CUDA_SUCCESS;
}

/* From pool (NULL: the device's current pool), ordered in stream. */
static CUresult vcu__alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                 CUstream stream, int ptsz)
{
    struct vcu_cu_mem_alloc_req r;
    struct vcu_cu_u64_resp o;
    vcu__pool_t *p = NULL;
    vcu__ctx_t *c;
    CUresult e;

    if (dptr == NULL || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS && pool != NULL)
        e = vcu__pool_arg(pool, &p);
    if (e != CUDA_SUCCESS)
        return e;
    if (p != NULL && p->dev != c->dev)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.size = size;
    r.pool = p != NULL ? p->h : 0;
    e = vcu__stream(c, stream, ptsz, &r.stream);
    if (e == CUDA_SUCCESS)
        e = vcu__call(c->dev, VCU_OP_CU_MEM_ALLOC_ASYNC, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *dptr = (CUdeviceptr)o.value;
    vcu__dr_add(c->dev, o.value, size);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return vcu__alloc_async(dptr, bytesize, NULL, hStream, 0);
}

VCU__EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return vcu__alloc_async(dptr, bytesize, NULL, hStream, 1);
}

VCU__EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                             CUmemoryPool pool, CUstream hStream)
{
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__alloc_async(dptr, bytesize, pool, hStream, 0);
}

VCU__EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream hStream)
{
    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__alloc_async(dptr, bytesize, pool, hStream, 1);
}

static CUresult vcu__free_async(CUdeviceptr dptr, CUstream stream, int ptsz)
{
    struct vcu_cu_memcpy_req r;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.dst = dptr;
    r.flags = VCU_CU_MEMCPY_F_ASYNC;
    e = vcu__stream(c, stream, ptsz, &r.stream);
    if (e != CUDA_SUCCESS)
        return e;
    vcu__dr_del(dptr);
    return vcu__call(c->dev, VCU_OP_CU_MEM_FREE_ASYNC, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return vcu__free_async(dptr, hStream, 0);
}

VCU__EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return vcu__free_async(dptr, hStream, 1);
}
