/*
 * Memory: device allocations (tracked so cudaMemcpyDefault, cudaFree and
 * cudaPointerGetAttributes can tell device from host pointers), page-locked
 * host memory (guest memory, tracked).  Copies and memsets:
 * cudart_copy.c; the stream-ordered allocator: cudart_pool.c.
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

/* Bounds of every page-locked or registered range the table has had
 * (they only widen; written under vcu__mem_mu, read without it): most
 * kernel parameters fall outside, and need no search (vcu__rt_host_params). */
static uint64_t vcu__hm_lo = UINT64_MAX, vcu__hm_hi;

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
    if (a->kind == VCU__M_HOST || a->kind == VCU__M_REGISTERED) {
        if (a->base < vcu__hm_lo)
            __atomic_store_n(&vcu__hm_lo, a->base, __ATOMIC_RELEASE);
        if (a->base + a->size > vcu__hm_hi)
            __atomic_store_n(&vcu__hm_hi, a->base + a->size, __ATOMIC_RELEASE);
    }
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

int vcu__is_dev_ptr(const void *p, int *dev)
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

cudaError_t vcu__malloc(int dev, void **p, size_t size, int async, uint64_t stream,
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

static cudaError_t vcu__host_dptr_any(const vcu__alloc_t *a, uint64_t *dptr, int any);

/*
 * As libcuda's (cuda_hostmem.c vcu__hm_map_now): memory allocated with
 * cudaHostAllocMapped is the device's at its own address from the start,
 * since a program may store the address where no call shows it here;
 * other page-locked memory is mapped when a call names it (a session
 * with device pointers to host memory cannot migrate).
 */
static cudaError_t vcu__host_map_now(const vcu__alloc_t *a)
{
    uint64_t d;

    if (vcu__loopback())
        return cudaSuccess;
    return vcu__host_dptr_any(a, &d, 1);
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
    e = (flags & cudaHostAllocMapped) ? vcu__host_map_now(&a) : cudaSuccess;
    if (e != cudaSuccess) {
        vcu__mem_del(a.base, VCU__M_HOST, &a);
        vcu_conn_hostmem_free(vcu__rt.conn, p, size);
        return e;
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
        vcu_conn_host_unregister(vcu__rt.conn, ptr, size);
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
        vcu_conn_host_unregister(vcu__rt.conn, ptr, size);
        return vcu__err(cudaErrorMemoryAllocation);
    }
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    vcu__alloc_t a;
    cudaError_t e;

    if (vcu__mem_del((uint64_t)(uintptr_t)ptr, VCU__M_REGISTERED, &a) != 0)
        return vcu__err(cudaErrorHostMemoryNotRegistered);
    /* As cudaFreeHost: the memory goes back to its owner only once work
     * queued on it has finished; its error is returned. */
    e = vcu__sync_pending();
    vcu_conn_host_unregister(vcu__rt.conn, ptr, a.size);
    return e == cudaSuccess ? cudaSuccess : vcu__err(e);
}

/*
 * The device pointer of a's base: asked of the host once per allocation.
 * The host maps the whole allocation, one stable segment; the pointer
 * stays valid until cudaFreeHost, whose munmap the driver fences.
 */
static cudaError_t vcu__host_dptr_any(const vcu__alloc_t *a, uint64_t *dptr, int any)
{
    struct vcu_cu_u64_req r = { .value = a->base };
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
    /* At its own address, as with unified addressing, where the host can. */
    e = vcu__call(a->dev, VCU_OP_CU_HOST_DEVICE_POINTER_AT, 0, &r, sizeof(r), &b, 1, &o,
                  sizeof(o));
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

/*
 * A kernel's parameter buffer (n bytes): with unified addressing a
 * page-locked host pointer is its own device pointer, and programs hand
 * kernels their pinned buffers so.  Each 8-byte word pointing into
 * page-locked or registered memory gets that memory mapped on the device
 * first (once: at the same address where the host can), and where the
 * host put it elsewhere the word becomes the device pointer.
 */
void vcu__rt_host_params(void *buf, size_t n)
{
    uint64_t lo = __atomic_load_n(&vcu__hm_lo, __ATOMIC_ACQUIRE);
    uint64_t hi = __atomic_load_n(&vcu__hm_hi, __ATOMIC_ACQUIRE);

    for (size_t off = 0; lo < hi && off + sizeof(uint64_t) <= n; off += sizeof(uint64_t)) {
        uint64_t w, d;

        memcpy(&w, (char *)buf + off, sizeof(w));
        if (w < lo || w >= hi)
            continue;
        d = vcu__rt_host_range_dptr(w, 1);
        if (d != 0 && d != w)
            memcpy((char *)buf + off, &d, sizeof(d));
    }
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
    e = vcu__host_dptr_any(&a, &d, 1);   /* unified addressing: all of it is mapped */
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
