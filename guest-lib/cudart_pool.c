/*
 * The stream-ordered allocator: cudaMallocAsync, cudaFreeAsync and memory
 * pools, over the host's pools.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cudart_int.h"
#include "vcu_transport_int.h"
#include "vcuda_ioctl.h"

/* ---- stream-ordered allocator ------------------------------------------- */

typedef struct vcu__pool_s {
    int dev;
    uint64_t h;
} vcu__pool_t;

static cudaError_t vcu__pool_check(cudaMemPool_t pool, vcu__pool_t **out)
{
    if (!vcu__reg_has(pool, VCU__H_POOL))
        return cudaErrorInvalidValue;
    *out = (vcu__pool_t *)pool;
    return vcu__check_dev((*out)->dev);
}

VCU__EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    struct vcu_cu_hdr h;
    struct vcu_cu_u64_resp o;
    vcu__pool_t *p;
    cudaError_t e;

    if (memPool == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__check_dev(device);
    if (e != cudaSuccess)
        return vcu__err(e);
    pthread_mutex_lock(&vcu__rt.dev_lock);
    p = vcu__rt.dev[device].default_pool;
    pthread_mutex_unlock(&vcu__rt.dev_lock);
    if (p == NULL) {
        e = vcu__call(device, VCU_OP_CU_MEMPOOL_GET_DEFAULT, 0, &h, sizeof(h), NULL, 0, &o,
                      sizeof(o));
        if (e != cudaSuccess)
            return vcu__err(e);
        p = calloc(1, sizeof(*p));
        if (p == NULL)
            return vcu__err(cudaErrorMemoryAllocation);
        p->dev = device;
        p->h = o.value;
        pthread_mutex_lock(&vcu__rt.dev_lock);
        if (vcu__rt.dev[device].default_pool == NULL && vcu__reg_add(p, VCU__H_POOL) == 0) {
            vcu__rt.dev[device].default_pool = p;
        } else {
            free(p);
            p = vcu__rt.dev[device].default_pool;
        }
        pthread_mutex_unlock(&vcu__rt.dev_lock);
        if (p == NULL)
            return vcu__err(cudaErrorMemoryAllocation);
    }
    *memPool = (cudaMemPool_t)p;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    /* cudaDeviceSetMemPool is not offered: the current pool is the default. */
    return cudaDeviceGetDefaultMemPool(memPool, device);
}

static int vcu__pool_attr_is_int(enum cudaMemPoolAttr attr)
{
    return attr == cudaMemPoolReuseFollowEventDependencies ||
           attr == cudaMemPoolReuseAllowOpportunistic ||
           attr == cudaMemPoolReuseAllowInternalDependencies;
}

VCU__EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                void *value)
{
    struct vcu_cu_attr_req r;
    vcu__pool_t *p;
    cudaError_t e;

    if (value == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__pool_check(memPool, &p);
    if (e != cudaSuccess)
        return vcu__err(e);
    memset(&r, 0, sizeof(r));
    r.handle = p->h;
    r.attr = (uint32_t)attr;
    r.value = vcu__pool_attr_is_int(attr) ? (uint64_t)(int64_t)*(int *)value
                                          : *(uint64_t *)value;
    return vcu__err(vcu__call(p->dev, VCU_OP_CU_MEMPOOL_SET_ATTR, 0, &r, sizeof(r), NULL, 0,
                              NULL, 0));
}

VCU__EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                void *value)
{
    struct vcu_cu_attr_req r;
    struct vcu_cu_u64_resp o;
    vcu__pool_t *p;
    cudaError_t e;

    if (value == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__pool_check(memPool, &p);
    if (e != cudaSuccess)
        return vcu__err(e);
    memset(&r, 0, sizeof(r));
    r.handle = p->h;
    r.attr = (uint32_t)attr;
    e = vcu__call(p->dev, VCU_OP_CU_MEMPOOL_GET_ATTR, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return vcu__err(e);
    if (vcu__pool_attr_is_int(attr))
        *(int *)value = (int)o.value;
    else
        *(uint64_t *)value = o.value;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    struct vcu_call_cuMemPoolTrimTo_req r;
    vcu__pool_t *p;
    cudaError_t e = vcu__pool_check(memPool, &p);

    if (e != cudaSuccess)
        return vcu__err(e);
    VCU_CALL_INIT(r, cuMemPoolTrimTo);
    r.pool = p->h;
    r.minBytesToKeep = minBytesToKeep;
    return vcu__err(vcu__call(p->dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, NULL, 0));
}

static cudaError_t vcu__malloc_async(void **ptr, size_t size, cudaMemPool_t pool,
                                     cudaStream_t stream, int ptsz)
{
    vcu__pool_t *p = NULL;
    uint64_t ws;
    int dev;
    cudaError_t e;

    if (ptr == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream(stream, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess && pool != NULL) {
        e = vcu__pool_check(pool, &p);
        if (e == cudaSuccess && p->dev != dev)
            e = cudaErrorInvalidValue;
    }
    if (e != cudaSuccess)
        return e;
    *ptr = NULL;
    if (size == 0)
        return cudaSuccess;
    return vcu__malloc(dev, ptr, size, 1, ws, p != NULL ? p->h : 0);
}

VCU__EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return vcu__err(vcu__malloc_async(devPtr, size, NULL, hStream, 0));
}

VCU__EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
VCU__EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return vcu__err(vcu__malloc_async(devPtr, size, NULL, hStream, 1));
}

VCU__EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                                cudaStream_t stream)
{
    if (memPool == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__malloc_async(ptr, size, memPool, stream, 0));
}

static cudaError_t vcu__free_async(void *ptr, cudaStream_t stream, int ptsz)
{
    struct vcu_cu_memcpy_req r;
    vcu__alloc_t a;
    uint64_t ws;
    int dev;
    cudaError_t e = vcu__stream(stream, ptsz, &dev, &ws);

    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess || ptr == NULL)
        return e;
    memset(&r, 0, sizeof(r));
    r.stream = ws;
    r.flags = VCU_CU_MEMCPY_F_ASYNC;
    /* Not ours: graph memory allocated again by a launch after an earlier
     * free, which the host knows; else invalid.  Answered at once. */
    if (vcu__mem_del((uint64_t)(uintptr_t)ptr, VCU__M_DEVICE, &a) != 0) {
        r.dst = (uint64_t)(uintptr_t)ptr;
        return vcu__call(dev, VCU_OP_CU_MEM_FREE_ASYNC, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    }
    r.dst = a.base;
    return vcu__call(dev, VCU_OP_CU_MEM_FREE_ASYNC, 1, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return vcu__err(vcu__free_async(devPtr, hStream, 0));
}

VCU__EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
VCU__EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return vcu__err(vcu__free_async(devPtr, hStream, 1));
}

VCU__EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
                                                     cudaMemPool_t memPool, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
                                                     cudaMemPool_t memPool, cudaStream_t stream)
{
    if (memPool == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__malloc_async(ptr, size, memPool, stream, 1));
}

/*
 * Pools by location: a device's default pool is its only pool, so it is
 * also its current one, and setting a pool accepts that pool alone.
 */
static cudaError_t vcu__pool_location(const struct cudaMemLocation *loc,
                                      enum cudaMemAllocationType type, int *dev)
{
    if (loc == NULL)
        return cudaErrorInvalidValue;
    if (loc->type != cudaMemLocationTypeDevice || type != cudaMemAllocationTypePinned)
        VCU__NOT_SUPPORTED("a memory pool for other than device memory", "");
    *dev = loc->id;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *memPool,
                                                 struct cudaMemLocation *location,
                                                 enum cudaMemAllocationType type)
{
    int dev = 0;
    cudaError_t e = vcu__pool_location(location, type, &dev);

    if (e != cudaSuccess)
        return vcu__err(e);
    return cudaDeviceGetDefaultMemPool(memPool, dev);
}

VCU__EXPORT cudaError_t cudaMemGetMemPool(cudaMemPool_t *memPool, struct cudaMemLocation *location,
                                          enum cudaMemAllocationType type)
{
    return cudaMemGetDefaultMemPool(memPool, location, type);
}

static cudaError_t vcu__set_pool(int dev, cudaMemPool_t pool)
{
    cudaMemPool_t def;
    cudaError_t e = cudaDeviceGetDefaultMemPool(&def, dev);

    if (e != cudaSuccess)
        return e;
    if (pool == def)
        return cudaSuccess;
    if (!vcu__reg_has(pool, VCU__H_POOL))
        return cudaErrorInvalidValue;
    VCU__NOT_SUPPORTED("cudaDeviceSetMemPool with other than the default pool",
                       "only the default memory pool is offered");
}

VCU__EXPORT cudaError_t cudaMemSetMemPool(struct cudaMemLocation *location,
                                          enum cudaMemAllocationType type, cudaMemPool_t memPool)
{
    int dev = 0;
    cudaError_t e = vcu__pool_location(location, type, &dev);

    if (e == cudaSuccess)
        e = vcu__set_pool(dev, memPool);
    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    cudaError_t e = vcu__set_pool(device, memPool);

    return e == cudaSuccess ? e : vcu__err(e);
}
