/*
 * Memory: device allocations (tracked so cudaMemcpyDefault, cudaFree and
 * cudaPointerGetAttributes can tell device from host pointers), page-locked
 * host memory (guest memory, tracked), copies, memsets, the stream-ordered
 * allocator.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cudart_int.h"
#include "vcu_transport_int.h"
#include "vcuda_ioctl.h"

/* ---- allocation table: sorted by base, protected by vcu__mem_mu ---------- */
static pthread_mutex_t vcu__mem_mu = PTHREAD_MUTEX_INITIALIZER;
static vcu__alloc_t *vcu__allocs;
static size_t vcu__nalloc, vcu__calloc;

/* Index of the first entry with base > addr. */
static size_t vcu__mem_upper(uint64_t addr)
{
    size_t lo = 0, hi = vcu__nalloc;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;

        if (vcu__allocs[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int vcu__mem_add(const vcu__alloc_t *a)
{
    size_t i;

    pthread_mutex_lock(&vcu__mem_mu);
    if (vcu__nalloc == vcu__calloc) {
        size_t n = vcu__calloc ? vcu__calloc * 2 : 64;
        vcu__alloc_t *p = realloc(vcu__allocs, n * sizeof(*p));

        if (p == NULL) {
            pthread_mutex_unlock(&vcu__mem_mu);
            return VCU_ENOMEM;
        }
        vcu__allocs = p;
        vcu__calloc = n;
    }
    i = vcu__mem_upper(a->base);
    memmove(&vcu__allocs[i + 1], &vcu__allocs[i], (vcu__nalloc - i) * sizeof(*a));
    vcu__allocs[i] = *a;
    vcu__nalloc++;
    pthread_mutex_unlock(&vcu__mem_mu);
    return 0;
}

int vcu__mem_find(uint64_t addr, vcu__alloc_t *out)
{
    size_t i;
    int ret = VCU_EINVAL;

    pthread_mutex_lock(&vcu__mem_mu);
    /* Entries may nest (a symbol inside nothing, a registration inside a
     * bigger host range): search back from the last base <= addr. */
    for (i = vcu__mem_upper(addr); i-- > 0;) {
        const vcu__alloc_t *a = &vcu__allocs[i];

        if (addr >= a->base && addr - a->base < (a->size ? a->size : 1)) {
            *out = *a;
            ret = 0;
            break;
        }
        if (vcu__nalloc - i > 64)
            break;
    }
    pthread_mutex_unlock(&vcu__mem_mu);
    return ret;
}

int vcu__mem_del(uint64_t base, int kind, vcu__alloc_t *out)
{
    size_t i;
    int ret = VCU_EINVAL;

    pthread_mutex_lock(&vcu__mem_mu);
    for (i = vcu__mem_upper(base); i-- > 0 && vcu__allocs[i].base == base;) {
        if (vcu__allocs[i].kind != kind)
            continue;
        if (out != NULL)
            *out = vcu__allocs[i];
        memmove(&vcu__allocs[i], &vcu__allocs[i + 1], (vcu__nalloc - i - 1) * sizeof(*out));
        vcu__nalloc--;
        ret = 0;
        break;
    }
    pthread_mutex_unlock(&vcu__mem_mu);
    return ret;
}

/* Caches the device pointer of the host allocation at base. */
static void vcu__mem_set_dptr(uint64_t base, uint64_t dptr)
{
    size_t i;

    pthread_mutex_lock(&vcu__mem_mu);
    for (i = vcu__mem_upper(base); i-- > 0 && vcu__allocs[i].base == base;)
        if (vcu__allocs[i].kind == VCU__M_HOST)
            vcu__allocs[i].dptr = dptr;
    pthread_mutex_unlock(&vcu__mem_mu);
}

void vcu__mem_forget_dev(int dev)
{
    size_t i, j;

    vcu__managed_forget_dev(dev);
    pthread_mutex_lock(&vcu__mem_mu);
    for (i = j = 0; i < vcu__nalloc; i++) {
        const vcu__alloc_t *a = &vcu__allocs[i];

        if ((a->kind == VCU__M_DEVICE || a->kind == VCU__M_SYMBOL ||
             a->kind == VCU__M_MANAGED) && a->dev == dev)
            continue;
        vcu__allocs[j++] = *a;
    }
    vcu__nalloc = j;
    pthread_mutex_unlock(&vcu__mem_mu);
}

int vcu__dev_range_known(int dev, uint64_t p, uint64_t len)
{
    vcu__alloc_t a;

    if (vcu__mem_find(p, &a) != 0 || a.dev != dev)
        return 0;
    if (a.kind != VCU__M_DEVICE && a.kind != VCU__M_SYMBOL && a.kind != VCU__M_MANAGED)
        return 0;
    return len <= a.size - (p - a.base);
}

int vcu__host_range_stable(const void *p, uint64_t len)
{
    uint64_t b = (uint64_t)(uintptr_t)p;
    vcu__alloc_t a;

    if (vcu__mem_find(b, &a) != 0 || (a.kind != VCU__M_HOST && a.kind != VCU__M_REGISTERED) ||
        !a.stable)
        return 0;
    return len <= a.size - (b - a.base);
}

static int vcu__is_dev_ptr(const void *p, int *dev)
{
    vcu__alloc_t a;

    if (vcu__mem_find((uint64_t)(uintptr_t)p, &a) != 0)
        return 0;
    if (a.kind != VCU__M_DEVICE && a.kind != VCU__M_SYMBOL && a.kind != VCU__M_MANAGED)
        return 0;
    if (dev != NULL)
        *dev = a.dev;
    return 1;
}

/* ---- allocation --------------------------------------------------------- */

static cudaError_t vcu__malloc(int dev, void **p, size_t size, int async, uint64_t stream,
                               uint64_t pool)
{
    struct vcu_cu_mem_alloc_req r = { .size = size, .stream = stream, .pool = pool };
    struct vcu_cu_u64_resp o;
    vcu__alloc_t a;
    cudaError_t e;

    e = vcu__call(dev, async ? VCU_OP_CU_MEM_ALLOC_ASYNC : VCU_OP_CU_MEM_ALLOC, 0, &r,
                  sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return e;
    memset(&a, 0, sizeof(a));
    a.base = o.value;
    a.size = size;
    a.dev = dev;
    a.kind = VCU__M_DEVICE;
    if (vcu__mem_add(&a) != 0) {
        struct vcu_cu_u64_req f = { .value = o.value };

        vcu__call(dev, VCU_OP_CU_MEM_FREE, 0, &f, sizeof(f), NULL, 0, NULL, 0);
        return cudaErrorMemoryAllocation;
    }
    *p = (void *)(uintptr_t)o.value;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    int dev;
    cudaError_t e;

    if (devPtr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    *devPtr = NULL;
    if (size == 0)
        return cudaSuccess;
    return vcu__err(vcu__malloc(dev, devPtr, size, 0, 0, 0));
}

VCU__EXPORT cudaError_t cudaFree(void *devPtr)
{
    struct vcu_cu_u64_req r;
    vcu__alloc_t a;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    if (e != cudaSuccess)
        return vcu__err(e);
    if (devPtr == NULL)
        return cudaSuccess;
    if (vcu__mem_del((uint64_t)(uintptr_t)devPtr, VCU__M_DEVICE, &a) != 0) {
        e = vcu__managed_free(devPtr);
        /* Not ours: graph memory allocated again by a launch after an
         * earlier free (the host knows it), else invalid. */
        if (e == cudaErrorInvalidValue) {
            r.value = (uint64_t)(uintptr_t)devPtr;
            e = vcu__call(dev, VCU_OP_CU_MEM_FREE, 0, &r, sizeof(r), NULL, 0, NULL, 0);
        }
        return vcu__err(e);
    }
    r.value = a.base;
    e = vcu__call(a.dev, VCU_OP_CU_MEM_FREE, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    size_t p;

    if (devPtr == NULL || pitch == NULL)
        return vcu__err(cudaErrorInvalidValue);
    p = (width + 511) & ~(size_t)511;
    if (p == 0)
        p = 512;
    *pitch = p;
    if (height != 0 && p > SIZE_MAX / height)
        return vcu__err(cudaErrorMemoryAllocation);
    return cudaMalloc(devPtr, p * height);
}

/* In loopback the guest library and the backend share one process: the
 * device reaches host memory at its own address. */
static int vcu__loopback(void)
{
    return vcu__rt.conn->loop != NULL;
}

/*
 * Whether the device can map a host allocation of size bytes (stable:
 * from the driver): the host maps the driver's pinned memory, of any size
 * (the session's worker maps its chunks at consecutive addresses of its
 * own), not memory pinned for one request only.
 */
static int vcu__host_mappable(uint64_t size, int stable)
{
    (void)size;
    return vcu__loopback() || stable;
}

static cudaError_t vcu__host_map_unsupported(uint64_t size)
{
    (void)size;
    VCU__NOT_SUPPORTED("mapped host memory without the guest driver's pinned memory",
                       "the driver has no mmap, so the memory is not physically contiguous");
}

static cudaError_t vcu__host_alloc(void **ptr, size_t size, unsigned int flags)
{
    vcu__alloc_t a;
    void *p;
    int dev = vcu__cur_dev, stable;
    cudaError_t e = vcu__check_dev(dev);

    if (e != cudaSuccess)
        return e;
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    /* The driver's pinned memory: copies from it may run asynchronously. */
    if (vcu_conn_hostmem_alloc(vcu__rt.conn, size, &p, &stable) != 0)
        return cudaErrorMemoryAllocation;
    memset(&a, 0, sizeof(a));
    a.base = (uint64_t)(uintptr_t)p;
    a.size = size;
    a.dev = dev;
    a.kind = VCU__M_HOST;
    a.stable = stable;
    /* As CUDA with unified addressing: all pinned memory is mapped. */
    a.flags = flags | (vcu__host_mappable(size, stable) ? cudaHostAllocMapped : 0);
    if ((flags & cudaHostAllocMapped) && !(a.flags & cudaHostAllocMapped)) {
        vcu_conn_hostmem_free(vcu__rt.conn, p, size);
        return vcu__host_map_unsupported(size);
    }
    if (vcu__mem_add(&a) != 0) {
        vcu_conn_hostmem_free(vcu__rt.conn, p, size);
        return cudaErrorMemoryAllocation;
    }
    *ptr = p;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    if (ptr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__host_alloc(ptr, size, cudaHostAllocDefault));
}

VCU__EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    if (pHost == NULL || (flags & ~(unsigned int)(cudaHostAllocPortable | cudaHostAllocMapped |
                                                   cudaHostAllocWriteCombined)))
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__host_alloc(pHost, size, flags));
}

VCU__EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    vcu__alloc_t a;
    cudaError_t e;

    if (ptr == NULL)
        return cudaSuccess;
    if (vcu__mem_del((uint64_t)(uintptr_t)ptr, VCU__M_HOST, &a) != 0)
        return vcu__err(cudaErrorInvalidValue);
    /* As CUDA's does: wait for the work that may still use the memory
     * (async copies from it finish on the host after their call).  The
     * memory goes even if that work failed: its error is returned. */
    e = vcu__sync_pending();
    vcu_conn_hostmem_free(vcu__rt.conn, ptr, a.size);
    return e == cudaSuccess ? cudaSuccess : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    vcu__alloc_t a;
    uint64_t b = (uint64_t)(uintptr_t)ptr;

    int stable = 0, rc;
    cudaError_t e;

    if (ptr == NULL || size == 0 ||
        (flags & ~(unsigned int)(cudaHostRegisterPortable | cudaHostRegisterMapped |
                                 cudaHostRegisterIoMemory | cudaHostRegisterReadOnly)))
        return vcu__err(cudaErrorInvalidValue);
    if (flags & (cudaHostRegisterIoMemory | cudaHostRegisterReadOnly))
        VCU__NOT_SUPPORTED("cudaHostRegister(cudaHostRegisterIoMemory or ReadOnly)",
                           "the guest driver pins memory for writing, and I/O memory cannot "
                           "be pinned");
    e = vcu__check_dev(vcu__cur_dev);
    if (e != cudaSuccess)
        return e;
    if (vcu__mem_find(b, &a) == 0 || vcu__mem_find(b + size - 1, &a) == 0)
        return vcu__err(cudaErrorHostMemoryAlreadyRegistered);
    /* Pinned by the driver until unregistered: copies are DMA and may run
     * after the reply, and it can be mapped into the device. */
    rc = vcu_conn_host_register(vcu__rt.conn, ptr, size, &stable);
    if (rc == VCU_EBUSY)
        return vcu__err(cudaErrorHostMemoryAlreadyRegistered);
    if (rc != 0)
        return vcu__err(rc == VCU_ENOMEM ? cudaErrorMemoryAllocation : cudaErrorInvalidValue);
    if ((flags & cudaHostRegisterMapped) && !vcu__host_mappable(size, stable)) {
        vcu_conn_host_unregister(vcu__rt.conn, ptr);
        return vcu__host_map_unsupported(size);
    }
    memset(&a, 0, sizeof(a));
    a.base = b;
    a.size = size;
    a.dev = vcu__cur_dev;
    a.kind = VCU__M_REGISTERED;
    a.stable = stable;
    /* As CUDA with unified addressing: registered memory is mapped. */
    a.flags = flags | (vcu__host_mappable(size, stable) ? cudaHostRegisterMapped : 0);
    if (vcu__mem_add(&a) != 0) {
        vcu_conn_host_unregister(vcu__rt.conn, ptr);
        return vcu__err(cudaErrorMemoryAllocation);
    }
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    cudaError_t e;

    if (vcu__mem_del((uint64_t)(uintptr_t)ptr, VCU__M_REGISTERED, NULL) != 0)
        return vcu__err(cudaErrorHostMemoryNotRegistered);
    /* As cudaFreeHost: the memory goes back to its owner only once work
     * queued on it has finished; its error is returned. */
    e = vcu__sync_pending();
    vcu_conn_host_unregister(vcu__rt.conn, ptr);
    return e == cudaSuccess ? cudaSuccess : vcu__err(e);
}

/*
 * The device pointer of a's base: asked of the host once per allocation.
 * The host maps the whole allocation, one stable segment; the pointer
 * stays valid until cudaFreeHost, whose munmap the driver fences.
 */
static cudaError_t vcu__host_dptr_any(const vcu__alloc_t *a, uint64_t *dptr, int any)
{
    struct vcu_cu_u64_req r = { .value = 0 };
    struct vcu_cu_u64_resp o;
    vcu_buf_t b;
    cudaError_t e;

    if (a->dptr != 0) {
        *dptr = a->dptr;
        return cudaSuccess;
    }
    if (vcu__loopback()) {
        *dptr = a->base;
        return cudaSuccess;
    }
    if (!any && !(a->flags & cudaHostAllocMapped) &&
        !(a->kind == VCU__M_REGISTERED && (a->flags & cudaHostRegisterMapped)))
        return vcu__host_map_unsupported(a->size);
    if (a->kind == VCU__M_HOST && !a->stable)
        return vcu__host_map_unsupported(a->size);
    b.addr = (void *)(uintptr_t)a->base;
    b.len = a->size;
    b.flags = VCU_SEG_TO_DEVICE;
    e = vcu__call(a->dev, VCU_OP_CU_HOST_DEVICE_POINTER, 0, &r, sizeof(r), &b, 1, &o, sizeof(o));
    if (e != cudaSuccess)
        return e;
    if (o.value == 0)
        return cudaErrorUnknown;
    vcu__mem_set_dptr(a->base, o.value);
    *dptr = o.value;
    return cudaSuccess;
}

static cudaError_t vcu__host_dptr(const vcu__alloc_t *a, uint64_t *dptr)
{
    return vcu__host_dptr_any(a, dptr, 0);
}

/* The device pointer of [p, p + len) of one page-locked or registered
 * allocation, mapped or not (graph memcpy nodes): 0 when it is none. */
uint64_t vcu__rt_host_range_dptr(uint64_t p, uint64_t len)
{
    vcu__alloc_t a;
    uint64_t d = 0;

    if (vcu__mem_find(p, &a) != 0 || (a.kind != VCU__M_HOST && a.kind != VCU__M_REGISTERED) ||
        len > a.size - (p - a.base) || vcu__host_dptr_any(&a, &d, 1) != cudaSuccess)
        return 0;
    return d + (p - a.base);
}

VCU__EXPORT cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    vcu__alloc_t a;
    uint64_t h = (uint64_t)(uintptr_t)pHost, d = 0;
    cudaError_t e;

    if (pDevice == NULL || flags != 0)
        return vcu__err(cudaErrorInvalidValue);
    *pDevice = NULL;
    if (vcu__mem_find(h, &a) != 0)
        return vcu__err(cudaErrorInvalidValue);
    if (a.kind != VCU__M_HOST && a.kind != VCU__M_REGISTERED)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__host_dptr(&a, &d);
    if (e != cudaSuccess)
        return e == cudaErrorNotSupported ? e : vcu__err(e);
    *pDevice = (void *)(uintptr_t)(d + (h - a.base));
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
    vcu__alloc_t a;

    if (pFlags == NULL || vcu__mem_find((uint64_t)(uintptr_t)pHost, &a) != 0 ||
        (a.kind != VCU__M_HOST && a.kind != VCU__M_REGISTERED))
        return vcu__err(cudaErrorInvalidValue);
    *pFlags = a.flags;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMemGetInfo(size_t *free_, size_t *total)
{
    struct vcu_cu_hdr h;
    struct vcu_cu_mem_info_resp o;
    int dev;
    cudaError_t e = vcu__enter(&dev);

    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_MEM_GET_INFO, 0, &h, sizeof(h), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return vcu__err(e);
    if (free_ != NULL)
        *free_ = o.free;
    if (total != NULL)
        *total = o.total;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr,
                                                 const void *ptr)
{
    vcu__alloc_t a;

    if (attr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    memset(attr, 0, sizeof(*attr));
    if (vcu__mem_find((uint64_t)(uintptr_t)ptr, &a) != 0) {
        attr->type = cudaMemoryTypeUnregistered;
        attr->device = -2;
        return cudaSuccess;
    }
    attr->device = a.dev;
    if (a.kind == VCU__M_MANAGED) {
        attr->type = cudaMemoryTypeManaged;
        attr->devicePointer = (void *)ptr;
        attr->hostPointer = (void *)ptr;
    } else if (a.kind == VCU__M_DEVICE || a.kind == VCU__M_SYMBOL) {
        attr->type = cudaMemoryTypeDevice;
        attr->devicePointer = (void *)ptr;
    } else {
        uint64_t d = 0;

        attr->type = cudaMemoryTypeHost;
        attr->hostPointer = (void *)ptr;
        /* Mapped memory: the device pointer too, if the host gives one. */
        if (a.kind == VCU__M_HOST && (a.flags & cudaHostAllocMapped) &&
            vcu__host_dptr(&a, &d) == cudaSuccess)
            attr->devicePointer = (void *)(uintptr_t)(d + ((uint64_t)(uintptr_t)ptr - a.base));
    }
    return cudaSuccess;
}

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

static cudaError_t vcu__copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                             cudaStream_t stream, int async, int ptsz)
{
    struct vcu_cu_memcpy_req r;
    uint64_t ws = 0, chunk, off, i;
    int dev, stable, pipeline;
    cudaError_t e;
    vcu_buf_t b;

    if (async) {
        e = vcu__stream(stream, ptsz, &dev, &ws);
        if (e != cudaSuccess)
            return e;
    } else {
        dev = vcu__cur_dev;
        if (ptsz)
            ws = VCU_CU_STREAM_PER_THREAD;
    }
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
    if (kind == cudaMemcpyDeviceToDevice) {
        r.dst = (uint64_t)(uintptr_t)dst;
        r.src = (uint64_t)(uintptr_t)src;
        r.size = n;
        /* Unknown pointers wait for the host's verdict, as CUDA checks
         * them at the call. */
        return vcu__call(dev, VCU_OP_CU_MEMCPY_DTOD,
                         async && vcu__dev_range_known(dev, r.dst, n) &&
                             vcu__dev_range_known(dev, r.src, n),
                         &r, sizeof(r), NULL, 0, NULL, 0);
    }
    /* Stream-ordered copies go without waiting only where the host memory
     * is the driver's (stable) and the device range is known; from
     * pageable memory cudaMemcpyAsync is synchronous, as in CUDA. */
    stable = vcu__host_range_stable(kind == cudaMemcpyHostToDevice ? src : dst, n);
    if (async && !(stable && vcu__dev_range_known(dev, (uint64_t)(uintptr_t)(
                                                           kind == cudaMemcpyHostToDevice ? dst
                                                                                          : src),
                                                  n)))
        async = 0;
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

        r.dst = (uint64_t)(uintptr_t)dst + off;
        r.src = (uint64_t)(uintptr_t)src + off;
        r.size = len;
        b.len = len;
        if (kind == cudaMemcpyHostToDevice) {
            b.addr = (char *)src + off;
            b.flags = VCU_SEG_TO_DEVICE;
            e = vcu__call(dev, VCU_OP_CU_MEMCPY_HTOD, nowait, &r, sizeof(r), &b, 1, NULL, 0);
        } else {
            b.addr = (char *)dst + off;
            b.flags = VCU_SEG_FROM_DEVICE;
            e = vcu__call(dev, VCU_OP_CU_MEMCPY_DTOH, nowait, &r, sizeof(r), &b, 1, NULL, 0);
        }
        if (e != cudaSuccess)
            return e;
    }
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

static cudaError_t vcu__copy2d(void *dst, size_t dpitch, const void *src, size_t spitch,
                               size_t width, size_t height, enum cudaMemcpyKind kind,
                               cudaStream_t stream, int async, int ptsz)
{
    struct vcu_cu_memcpy2d_req r;
    uint64_t ws = 0, rows, max;
    uint32_t flags = async || ptsz ? VCU_CU_MEMCPY_F_ASYNC : 0;
    int dev, sync_ptds = ptsz && !async;
    cudaError_t e;
    vcu_buf_t b;

    if (async) {
        e = vcu__stream(stream, ptsz, &dev, &ws);
        if (e != cudaSuccess)
            return e;
    } else {
        dev = vcu__cur_dev;
        if (ptsz)
            ws = VCU_CU_STREAM_PER_THREAD;     /* see vcu__copy */
    }
    e = vcu__check_dev(dev);
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
    /* Without waiting where cudaMemcpyAsync would (see vcu__copy). */
    if (async && kind != cudaMemcpyDeviceToDevice) {
        int h2d = kind == cudaMemcpyHostToDevice;
        size_t hp = h2d ? spitch : dpitch, dp = h2d ? dpitch : spitch;
        const void *hb = h2d ? src : dst, *db = h2d ? dst : src;

        if (hp * (height - 1) + width > max ||
            !vcu__host_range_stable(hb, hp * (height - 1) + width) ||
            !vcu__dev_range_known(dev, (uint64_t)(uintptr_t)db, dp * (height - 1) + width))
            async = 0;
    } else if (async) {
        if (!vcu__dev_range_known(dev, (uint64_t)(uintptr_t)dst, dpitch * (height - 1) + width) ||
            !vcu__dev_range_known(dev, (uint64_t)(uintptr_t)src, spitch * (height - 1) + width))
            async = 0;
    }
    for (size_t row = 0; row < height; row += rows) {
        size_t hp = kind == cudaMemcpyHostToDevice ? spitch : dpitch;

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
    if (sync_ptds && kind != cudaMemcpyDeviceToDevice)
        return vcu__ptds_sync(dev);
    return cudaSuccess;
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
    uint64_t ws = 0;
    int dev;
    cudaError_t e;

    if (async) {
        e = vcu__stream(stream, ptsz, &dev, &ws);
        if (e != cudaSuccess)
            return e;
    } else {
        dev = vcu__cur_dev;
        if (ptsz)
            ws = VCU_CU_STREAM_PER_THREAD;     /* see vcu__copy */
    }
    e = vcu__check_dev(dev);
    if (e != cudaSuccess || width == 0 || height == 0)
        return e;
    if (p == NULL || (height > 1 && width > pitch))
        return cudaErrorInvalidValue;
    e = vcu__managed_touch(dev, ws, p, NULL);
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.dst = (uint64_t)(uintptr_t)p;
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
    struct vcu_cu_attr_req r;
    vcu__pool_t *p;
    cudaError_t e = vcu__pool_check(memPool, &p);

    if (e != cudaSuccess)
        return vcu__err(e);
    memset(&r, 0, sizeof(r));
    r.handle = p->h;
    r.value = minBytesToKeep;
    return vcu__err(vcu__call(p->dev, VCU_OP_CU_MEMPOOL_TRIM, 0, &r, sizeof(r), NULL, 0, NULL,
                              0));
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
 * Between two virtual devices (no peer access in the protocol): staged
 * through guest memory, a device-to-host copy on the source device then a
 * host-to-device copy on the destination, VCU__PEER_CHUNK at a time; the
 * async form first waits for its stream, so it is synchronous.
 */
#define VCU__PEER_CHUNK (64ull << 20)

static cudaError_t vcu__copy_peer(void *dst, int dd, const void *src, int sd, size_t n,
                                  cudaStream_t stream, int async, int ptsz)
{
    cudaError_t e = vcu__check_dev(dd);
    char *buf;

    if (e == cudaSuccess)
        e = vcu__check_dev(sd);
    if (e != cudaSuccess || n == 0)
        return e;
    if (dd == sd) {
        if (async)
            return vcu__copy(dst, src, n, cudaMemcpyDeviceToDevice, stream, 1, ptsz);
        return vcu__copy_on(dd, dst, src, n, cudaMemcpyDeviceToDevice);
    }
    if (async) {
        struct vcu_cu_u64_req r;
        int sdev;

        e = vcu__stream(stream, ptsz, &sdev, &r.value);
        if (e == cudaSuccess)
            e = vcu__call(sdev, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, &r, sizeof(r), NULL, 0, NULL, 0);
        if (e != cudaSuccess)
            return e;
    }
    buf = malloc(n < VCU__PEER_CHUNK ? n : VCU__PEER_CHUNK);
    if (buf == NULL)
        return cudaErrorMemoryAllocation;
    for (size_t off = 0; off < n && e == cudaSuccess; off += VCU__PEER_CHUNK) {
        size_t len = n - off < VCU__PEER_CHUNK ? n - off : VCU__PEER_CHUNK;

        e = vcu__copy_on(sd, buf, (const char *)src + off, len, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            e = vcu__copy_on(dd, (char *)dst + off, buf, len, cudaMemcpyHostToDevice);
    }
    free(buf);
    return e;
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

/* Both sides on one device only. */
static cudaError_t vcu__copy3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream,
                                    int async, int ptsz)
{
    struct cudaMemcpy3DParms q;
    int saved = vcu__cur_dev;
    cudaError_t e;

    if (p == NULL)
        return cudaErrorInvalidValue;
    e = vcu__check_dev(p->srcDevice);
    if (e == cudaSuccess)
        e = vcu__check_dev(p->dstDevice);
    if (e != cudaSuccess)
        return e;
    if (p->srcDevice != p->dstDevice)
        VCU__NOT_SUPPORTED("cudaMemcpy3DPeer between two devices", "no peer access");
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
