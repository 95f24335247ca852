/*
 * libcuda.so.1: stream-ordered allocation from the device's default
 * memory pool (the session's own pool of the device on the host) and
 * from pools the program makes (pinned device memory shared with no
 * other process), over CU_MEMPOOL_* and
 * CU_MEM_ALLOC_ASYNC/CU_MEM_FREE_ASYNC.  Each device's current pool
 * (cuDeviceSetMemPool) is kept here: cuMemAllocAsync names it.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* Under vcu__drv.lock: the default pools, and the current ones (NULL:
 * the default). */
static vcu__pool_t *vcu__pools[VCU_CU_MAX_DEVICES];
static vcu__pool_t *vcu__cur_pools[VCU_CU_MAX_DEVICES];

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

VCU__EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    vcu__pool_t *p;
    CUresult e;

    if (pool == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_dev(dev);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    p = vcu__cur_pools[dev];
    pthread_mutex_unlock(&vcu__drv.lock);
    if (p == NULL)
        return cuDeviceGetDefaultMemPool(pool, dev);
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* A pool of dev becomes what cuMemAllocAsync there allocates from. */
VCU__EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    vcu__pool_t *p;
    CUresult e = vcu__check_dev(dev);

    if (e == CUDA_SUCCESS)
        e = vcu__pool_arg(pool, &p);
    if (e != CUDA_SUCCESS)
        return e;
    if (p->dev != dev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vcu__drv.lock);
    vcu__cur_pools[dev] = p->created ? p : NULL;
    pthread_mutex_unlock(&vcu__drv.lock);
    return CUDA_SUCCESS;
}

/*
 * CUDA 13's pools by location and allocation type: a device's pinned
 * memory is the device's pools above; host and managed memory pools are
 * not offered (CUDA_ERROR_NOT_SUPPORTED, logged once); anything else is
 * CUDA_ERROR_INVALID_VALUE, as cuda.h says.  *dev: the device.
 */
static CUresult vcu__pool_location(const CUmemLocation *loc, CUmemAllocationType type,
                                   const char *call, int *dev)
{
    static int logged;

    if (loc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEM_ALLOCATION_TYPE_PINNED && loc->type == CU_MEM_LOCATION_TYPE_DEVICE) {
        *dev = loc->id;
        return vcu__check_dev(loc->id);
    }
    if ((type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         (loc->type == CU_MEM_LOCATION_TYPE_HOST ||
          loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA)) ||
        (type == CU_MEM_ALLOCATION_TYPE_MANAGED &&
         (loc->type == CU_MEM_LOCATION_TYPE_DEVICE || loc->type == CU_MEM_LOCATION_TYPE_HOST ||
          loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA || loc->type == CU_MEM_LOCATION_TYPE_NONE))) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s of host or managed memory is not "
                               "supported\n", call);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

VCU__EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location,
                                            CUmemAllocationType type)
{
    int dev;
    CUresult e = vcu__check_init();

    if (e == CUDA_SUCCESS)
        e = vcu__pool_location(location, type, "cuMemGetDefaultMemPool", &dev);
    return e == CUDA_SUCCESS ? cuDeviceGetDefaultMemPool(pool_out, dev) : e;
}

VCU__EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location,
                                     CUmemAllocationType type)
{
    int dev;
    CUresult e = vcu__check_init();

    if (e == CUDA_SUCCESS)
        e = vcu__pool_location(location, type, "cuMemGetMemPool", &dev);
    return e == CUDA_SUCCESS ? cuDeviceGetMemPool(pool, dev) : e;
}

VCU__EXPORT CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type,
                                     CUmemoryPool pool)
{
    int dev;
    CUresult e = vcu__check_init();

    if (e == CUDA_SUCCESS)
        e = vcu__pool_location(location, type, "cuMemSetMemPool", &dev);
    return e == CUDA_SUCCESS ? cuDeviceSetMemPool(dev, pool) : e;
}

/* CUmemAccess_flags cuda.h defines. */
static int vcu__access_flags_ok(CUmemAccess_flags f)
{
    return f == CU_MEM_ACCESS_FLAGS_PROT_NONE || f == CU_MEM_ACCESS_FLAGS_PROT_READ ||
           f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
}

/*
 * Access to a pool's memory: its own device always reads and writes it
 * (which may be said again); another device's (a peer's) is set on the
 * host's pool (CU_MEMPOOL_SET_ACCESS), one device at a time, and kept
 * here for cuMemPoolGetAccess.  The whole map is checked before any of
 * it is sent.
 */
VCU__EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map,
                                        size_t count)
{
    struct vcu_cu_attr_req r;
    struct vcu_cu_resp o;
    vcu__pool_t *p;
    CUresult e = vcu__pool_arg(pool, &p);

    if (e != CUDA_SUCCESS)
        return e;
    if (map == NULL && count > 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            vcu__check_dev(map[i].location.id) != CUDA_SUCCESS ||
            !vcu__access_flags_ok(map[i].flags))
            return CUDA_ERROR_INVALID_VALUE;
        if (map[i].location.id == p->dev && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++) {
        int d = map[i].location.id;

        if (d == p->dev)
            continue;
        memset(&r, 0, sizeof(r));
        r.handle = p->h;
        r.attr = vcu__drv.dev[d].vord;
        r.value = (uint64_t)map[i].flags;
        e = vcu__call(p->dev, VCU_OP_CU_MEMPOOL_SET_ACCESS, &r, sizeof(r), NULL, 0, &o, sizeof(o));
        if (e != CUDA_SUCCESS)
            return e;
        __atomic_store_n(&p->access[d], (unsigned char)map[i].flags, __ATOMIC_RELAXED);
    }
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                        CUmemLocation *location)
{
    vcu__pool_t *p;
    CUresult e = vcu__pool_arg(memPool, &p);

    if (e != CUDA_SUCCESS)
        return e;
    if (flags == NULL || location == NULL || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
        vcu__check_dev(location->id) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = location->id == p->dev
                 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                 : (CUmemAccess_flags)__atomic_load_n(&p->access[location->id], __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

static int vcu__zero(const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return 0;
    return 1;
}

VCU__EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    static int logged;
    struct vcu_cu_pool_create_req r;
    struct vcu_cu_u64_resp o;
    vcu__pool_t *p;
    CUresult e;

    if (pool == NULL || props == NULL || !vcu__zero(props->reserved, sizeof(props->reserved)) ||
        props->win32SecurityAttributes != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
         props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): cuMemPoolCreate of host memory or with "
                               "shareable handles other than POSIX descriptors is not "
                               "supported\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    e = vcu__check_dev(props->location.id);
    if (e != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
        static int once;
        int v = 0;

        e = cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES,
                                 props->location.id);
        if (e != CUDA_SUCCESS)
            return e;
        if (!(v & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
            vcu__log_once(&once, "libcuda (virtio-cuda): cuMemPoolCreate with POSIX descriptors "
                                 "is not supported: this device offers no shareable handles\n");
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    memset(&r, 0, sizeof(r));
    r.alloc_type = (uint32_t)props->allocType;
    r.handle_types = (uint32_t)props->handleTypes;
    r.max_size = props->maxSize;
    r.usage = props->usage;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__call(props->location.id, VCU_OP_CU_MEMPOOL_CREATE, &r, sizeof(r), NULL, 0, &o,
                  sizeof(o));
    if (e != CUDA_SUCCESS) {
        free(p);
        return e;
    }
    p->dev = props->location.id;
    p->created = 1;
    p->h = o.value;
    if (vcu__reg_add(p, VCU__K_POOL) != 0) {
        struct vcu_cu_u64_req d = { .value = p->h };

        (void)vcu__call(p->dev, VCU_OP_CU_MEMPOOL_DESTROY, &d, sizeof(d), NULL, 0, NULL, 0);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* Blocks of it still out stay valid until freed, as with NVIDIA's; a
 * device whose current pool it was goes back to its default pool.  A
 * default pool is not the program's to destroy. */
VCU__EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    struct vcu_cu_u64_req r;
    vcu__pool_t *p;
    CUresult e = vcu__pool_arg(pool, &p);

    if (e != CUDA_SUCCESS)
        return e;
    if (!p->created)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.value = p->h;
    e = vcu__call(p->dev, VCU_OP_CU_MEMPOOL_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    if (vcu__cur_pools[p->dev] == p)
        vcu__cur_pools[p->dev] = NULL;
    pthread_mutex_unlock(&vcu__drv.lock);
    vcu__reg_del(p);
    free(p);
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
    if (pool == NULL) {
        /* The device's current pool: NULL for its default one, which
         * the host takes as pool 0 (captured, too). */
        pthread_mutex_lock(&vcu__drv.lock);
        p = vcu__cur_pools[c->dev];
        pthread_mutex_unlock(&vcu__drv.lock);
    }
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
    /* As the driver (and cuMemFree): freeing nothing succeeds. */
    if (dptr == 0)
        return CUDA_SUCCESS;
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

/* ---- shareable pools (docs/design.md, "CUDA IPC") ------------------------ */

/* A POSIX descriptor of a pool this program made with that handle type:
 * a sealed memfd naming the host driver's, kept by the host daemon. */
VCU__EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                      CUmemAllocationHandleType handleType,
                                                      unsigned long long flags)
{
    static int once, other;
    struct vcu_cu_u64_req r;
    struct vcu_cu_ipc_handle_resp o;
    vcu__pool_t *p;
    CUresult e;

    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        vcu__log_once(&other, "libcuda (virtio-cuda): cuMemPoolExportToShareableHandle of a "
                              "handle type other than POSIX descriptors is not supported\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    e = vcu__pool_arg(pool, &p);
    if (e != CUDA_SUCCESS)
        return e;
    if (handle_out == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__share_on("cuMemPoolExportToShareableHandle",
                      CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, p->dev, &once);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.value = p->h;
    e = vcu__call(p->dev, VCU_OP_CU_MEMPOOL_EXPORT_SHAREABLE, &r, sizeof(r), NULL, 0, &o,
                  sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__share_fd(&o.h, (int *)handle_out);
}

VCU__EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                        CUmemAllocationHandleType handleType,
                                                        unsigned long long flags)
{
    static int once, other;
    struct vcu_cu_ipc_open_req r;
    struct vcu_cu_ipc_import_resp o;
    vcu__pool_t *p;
    CUresult e;
    int dev, cur = vcu__share_dev();

    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        vcu__log_once(&other, "libcuda (virtio-cuda): cuMemPoolImportFromShareableHandle of a "
                              "handle type other than POSIX descriptors is not supported\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if (pool_out == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__share_on("cuMemPoolImportFromShareableHandle",
                      CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, cur, &once);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    e = vcu__share_read(handle, &r.h);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call(cur, VCU_OP_CU_MEMPOOL_IMPORT_SHAREABLE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    dev = vcu__prog_of(o.dev);
    p = calloc(1, sizeof(*p));
    if (dev < 0 || p == NULL || vcu__reg_add(p, VCU__K_POOL) != 0) {
        struct vcu_cu_u64_req d = { .value = o.value };

        (void)vcu__call(cur, VCU_OP_CU_MEMPOOL_DESTROY, &d, sizeof(d), NULL, 0, NULL, 0);
        free(p);
        /* A pool of a device the VM gives this program no ordinal for. */
        return dev < 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->dev = dev;
    p->created = 1;
    p->imported = 1;
    p->h = o.value;
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* A block of a shareable pool: 64 bytes naming the host's record of the
 * driver's export data (the program's CUmemPoolPtrExportData). */
VCU__EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out,
                                            CUdeviceptr ptr)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_ipc_handle_resp o;
    CUresult e = vcu__check_init();

    _Static_assert(sizeof(shareData_out->reserved) == sizeof(o.h), "CUmemPoolPtrExportData");
    if (e != CUDA_SUCCESS)
        return e;
    if (shareData_out == NULL || ptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.value = ptr;
    e = vcu__call(vcu__share_dev(), VCU_OP_CU_MEMPOOL_EXPORT_POINTER, &r, sizeof(r), NULL, 0, &o,
                  sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    memcpy(shareData_out->reserved, &o.h, sizeof(o.h));
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                            CUmemPoolPtrExportData *shareData)
{
    struct vcu_cu_pool_ptr_req r;
    struct vcu_cu_ipc_import_resp o;
    vcu__pool_t *p;
    CUresult e = vcu__pool_arg(pool, &p);

    if (e != CUDA_SUCCESS)
        return e;
    if (ptr_out == NULL || shareData == NULL || !p->imported)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.pool = p->h;
    memcpy(&r.h, shareData->reserved, sizeof(r.h));
    e = vcu__call(p->dev, VCU_OP_CU_MEMPOOL_IMPORT_POINTER, &r, sizeof(r), NULL, 0, &o,
                  sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *ptr_out = (CUdeviceptr)o.value;
    vcu__dr_add(p->dev, o.value, o.size);
    return CUDA_SUCCESS;
}
