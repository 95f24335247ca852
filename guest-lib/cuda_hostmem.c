/*
 * libcuda.so.1: page-locked host memory, as our runtime does it
 * (cudart_mem.c):
 *
 *  - cuMemHostAlloc, cuMemAllocHost, cuMemFreeHost: the transport's pinned
 *    memory (the guest driver's, physically contiguous in chunks and never
 *    moved), which copies may use after their call returns;
 *  - cuMemHostRegister, cuMemHostUnregister: ordinary memory pinned in
 *    place by the guest driver (VCUDA_IOC_HOST_REGISTER) until
 *    unregistered;
 *  - mapped memory (CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTREGISTER_DEVICEMAP,
 *    cuMemHostGetDevicePointer): the host maps either kind whole into the
 *    device's address space once (CU_HOST_DEVICE_POINTER, one stable
 *    segment) and the pointer is valid until the memory is freed or
 *    unregistered.  Only memory the driver keeps pinned ("stable") can be
 *    mapped; in loopback the memory is registered with the driver under
 *    the library (tests/loopback), which with unified addressing maps it
 *    at its own address, so every pointer is its own device pointer.  As NVIDIA's
 *    driver does with unified addressing, all pinned memory that can be
 *    is mapped, DEVICEMAP or not (cuMemHostGetFlags gives the flags as
 *    they were given).
 *
 * Unified copies (cuMemcpy, cuMemcpyAsync) and cuPointerGetAttribute(s)
 * tell host from device memory here (managed memory is device memory to
 * both, as to NVIDIA's).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "vcu_transport_int.h"

enum { VCU__HM_ALLOC = 1, VCU__HM_REGISTERED };

typedef struct vcu__hostmem_s {
    void *p;
    size_t size;
    unsigned int flags;             /* as given */
    int mapped;                     /* the device can map it */
    int kind;                       /* VCU__HM_* */
    int dev;                        /* program ordinal of the context it was made in */
    vcu__ctx_t *ctx;                /* that context: may be destroyed since */
    uint64_t dptr;                  /* device pointer of p; 0 until asked */
    uint64_t id;                    /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    struct vcu__hostmem_s *next;
} vcu__hostmem_t;

static pthread_mutex_t vcu__hm_mu = PTHREAD_MUTEX_INITIALIZER;    /* protects vcu__hms */
static vcu__hostmem_t *vcu__hms;
/* Bounds of every entry vcu__hms has had (they only widen; written under
 * vcu__hm_mu, read without it): most device pointers a copy names fall
 * outside, and need no walk of the list. */
static uintptr_t vcu__hm_lo = UINTPTR_MAX, vcu__hm_hi;

/* In loopback the library and the backend share one process. */
static int vcu__loopback(void)
{
    return vcu__drv.conn->loop != NULL;
}

/* Whether the device can map memory the driver pinned (stable), or
 * pinned for one request only (not). */
static int vcu__mappable(int stable)
{
    return vcu__loopback() || stable;
}

static CUresult vcu__map_unsupported(void)
{
    static int logged;

    vcu__log_once(&logged, "libcuda (virtio-cuda): mapped host memory is not supported "
                           "without the guest driver's pinned memory\n");
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* The entry holding p (under vcu__hm_mu), or NULL. */
static vcu__hostmem_t *vcu__hm_find_locked(uintptr_t p)
{
    vcu__hostmem_t *h;

    for (h = vcu__hms; h != NULL; h = h->next)
        if (p >= (uintptr_t)h->p && p - (uintptr_t)h->p < h->size)
            return h;
    return NULL;
}

static void vcu__hm_add(vcu__hostmem_t *h)
{
    h->id = vcu__buffer_id_new();
    pthread_mutex_lock(&vcu__hm_mu);
    h->next = vcu__hms;
    vcu__hms = h;
    if ((uintptr_t)h->p < vcu__hm_lo)
        __atomic_store_n(&vcu__hm_lo, (uintptr_t)h->p, __ATOMIC_RELEASE);
    if ((uintptr_t)h->p + h->size > vcu__hm_hi)
        __atomic_store_n(&vcu__hm_hi, (uintptr_t)h->p + h->size, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&vcu__hm_mu);
}

/* Takes the entry starting at p of this kind off the list, or NULL. */
static vcu__hostmem_t *vcu__hm_del(void *p, int kind)
{
    vcu__hostmem_t **pp, *h = NULL;

    pthread_mutex_lock(&vcu__hm_mu);
    for (pp = &vcu__hms; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->p == p && (*pp)->kind == kind) {
            h = *pp;
            *pp = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&vcu__hm_mu);
    return h;
}

/* Every device's work, which may still read or write the memory (copies
 * run on the host after their call): the first error is returned. */
static CUresult vcu__sync_all(void)
{
    CUresult e, r = CUDA_SUCCESS;

    for (int d = 0; d < vcu__drv.ndev; d++) {
        struct vcu_cu_hdr hdr;

        e = vcu__call(d, VCU_OP_CU_CTX_SYNCHRONIZE, &hdr, sizeof(hdr), NULL, 0, NULL, 0);
        if (r == CUDA_SUCCESS)
            r = e;
    }
    return r;
}

static CUresult vcu__host_dptr(uintptr_t p, CUdeviceptr *out, int *mapped);

/*
 * Memory allocated with DEVICEMAP is the device's at its own address
 * from the start (unified addressing), and programs store that address
 * where no call of theirs shows it to this library (NCCL's abort flag
 * and work FIFO, in structures copied to the device): so the host maps
 * it when it is made, and where that fails it is not given.  Other
 * page-locked memory is mapped when a call names it (a launch's
 * parameters, cuMemHostGetDevicePointer): a session with device
 * pointers to host memory cannot migrate (cuda_migrate.c), and
 * cudaMallocHost's buffers, which most programs have, would keep every
 * such program from it.  Registered memory too: registered again right
 * after its unregistration, its pages may not yet be released by the
 * host.
 */
static CUresult vcu__hm_map_now(vcu__hostmem_t *h)
{
    CUdeviceptr d;
    int mapped;

    if (!h->mapped || vcu__loopback())
        return CUDA_SUCCESS;
    return vcu__host_dptr((uintptr_t)h->p, &d, &mapped);
}

VCU__EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    vcu__hostmem_t *h;
    vcu__ctx_t *c;
    void *p;
    int stable;
    CUresult e;

    if (pp == NULL || bytesize == 0 ||
        (Flags & ~(unsigned int)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                 CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (vcu_conn_hostmem_alloc(vcu__drv.conn, bytesize, &p, &stable) != 0) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if ((Flags & CU_MEMHOSTALLOC_DEVICEMAP) && !vcu__mappable(stable)) {
        vcu_conn_hostmem_free(vcu__drv.conn, p, bytesize);
        free(h);
        return vcu__map_unsupported();
    }
    h->p = p;
    h->size = bytesize;
    h->flags = Flags;
    h->mapped = vcu__mappable(stable);
    h->kind = VCU__HM_ALLOC;
    h->dev = c->dev;
    h->ctx = c;
    vcu__hm_add(h);
    e = (Flags & CU_MEMHOSTALLOC_DEVICEMAP) ? vcu__hm_map_now(h) : CUDA_SUCCESS;
    if (e != CUDA_SUCCESS) {
        h = vcu__hm_del(p, VCU__HM_ALLOC);
        vcu_conn_hostmem_free(vcu__drv.conn, p, bytesize);
        free(h);
        return e;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

int vcu__hm_stable(const void *p, size_t n)
{
    vcu__hostmem_t *h;
    int ok;

    pthread_mutex_lock(&vcu__hm_mu);
    h = vcu__hm_find_locked((uintptr_t)p);
    ok = h != NULL && h->kind == VCU__HM_ALLOC && h->mapped &&
         n <= h->size - ((uintptr_t)p - (uintptr_t)h->p);
    pthread_mutex_unlock(&vcu__hm_mu);
    return ok;
}

VCU__EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

/* Waits for every device's work first, as NVIDIA's does: copies from
 * the memory may still be running on the host after their call.  The
 * memory goes even if that work failed: its error is returned. */
VCU__EXPORT CUresult cuMemFreeHost(void *p)
{
    vcu__hostmem_t *h;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    h = vcu__hm_del(p, VCU__HM_ALLOC);
    if (h == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__sync_all();
    vcu_conn_hostmem_free(vcu__drv.conn, h->p, h->size);
    free(h);
    return e;
}

/*
 * Ordinary memory, pinned in place until cuMemHostUnregister: copies are
 * DMA and may run after the reply, and it can be mapped.  A range that
 * overlaps one already registered (or this library's pinned memory) is
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, as NVIDIA's.
 */
VCU__EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    vcu__hostmem_t *h;
    vcu__ctx_t *c;
    uintptr_t b = (uintptr_t)p;
    int stable = 0, rc, busy;
    CUresult e;

    if (p == NULL || bytesize == 0 || bytesize > UINTPTR_MAX - b ||
        (Flags & ~(unsigned int)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                 CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    if (Flags & (CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)) {
        static int logged;

        vcu__log_once(&logged, "libcuda (virtio-cuda): cuMemHostRegister with "
                               "CU_MEMHOSTREGISTER_IOMEMORY or READ_ONLY is not supported: "
                               "the guest driver pins memory for writing, and I/O memory "
                               "cannot be pinned\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&vcu__hm_mu);
    busy = 0;
    for (h = vcu__hms; h != NULL; h = h->next)
        if (b < (uintptr_t)h->p + h->size && (uintptr_t)h->p < b + bytesize)
            busy = 1;
    pthread_mutex_unlock(&vcu__hm_mu);
    if (busy)
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = vcu_conn_host_register(vcu__drv.conn, p, bytesize, &stable);
    if (rc != 0) {
        free(h);
        if (rc == VCU_EBUSY)
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        return rc == VCU_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    if ((Flags & CU_MEMHOSTREGISTER_DEVICEMAP) && !vcu__mappable(stable)) {
        vcu_conn_host_unregister(vcu__drv.conn, p, bytesize);
        free(h);
        return vcu__map_unsupported();
    }
    h->p = p;
    h->size = bytesize;
    h->flags = Flags;
    h->mapped = vcu__mappable(stable);
    h->kind = VCU__HM_REGISTERED;
    h->dev = c->dev;
    h->ctx = c;
    vcu__hm_add(h);
    return CUDA_SUCCESS;
}

/* The same ABI as the _v2 form (flags unsigned int, size size_t). */
VCU__EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

/* As cuMemFreeHost: the memory goes back to its owner only once work
 * queued on it has finished; that work's error is returned. */
VCU__EXPORT CUresult cuMemHostUnregister(void *p)
{
    vcu__hostmem_t *h;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    h = vcu__hm_del(p, VCU__HM_REGISTERED);
    if (h == NULL)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    e = vcu__sync_all();
    vcu_conn_host_unregister(vcu__drv.conn, h->p, h->size);
    free(h);
    return e;
}

/* The flags it was allocated or registered with; p may point inside. */
VCU__EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    vcu__hostmem_t *h;
    CUresult e;

    if (pFlags == NULL || p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__hm_mu);
    h = vcu__hm_find_locked((uintptr_t)p);
    if (h != NULL)
        *pFlags = h->flags;
    pthread_mutex_unlock(&vcu__hm_mu);
    return h != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/*
 * The device pointer of the mapped memory holding p;
 * CUDA_ERROR_INVALID_VALUE, *mapped 0, where p is none of this library's
 * mappable host memory.  The host maps the whole allocation or
 * registration at its first ask; the answer is kept.
 */
static CUresult vcu__host_dptr(uintptr_t p, CUdeviceptr *out, int *mapped)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__hostmem_t *h;
    vcu_buf_t b;
    uintptr_t base;
    size_t size;
    uint64_t d;
    int dev;
    CUresult e;

    *mapped = 0;
    pthread_mutex_lock(&vcu__hm_mu);
    h = vcu__hm_find_locked(p);
    if (h == NULL || !h->mapped) {
        pthread_mutex_unlock(&vcu__hm_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *mapped = 1;
    base = (uintptr_t)h->p;
    size = h->size;
    dev = h->dev;
    d = h->dptr;
    pthread_mutex_unlock(&vcu__hm_mu);
    if (d == 0 && vcu__loopback())
        d = base;
    if (d == 0) {
        b.addr = (void *)base;
        b.len = size;
        b.flags = VCU_SEG_TO_DEVICE;
        /* At its own address, as with unified addressing, where the host
         * can (CU_HOST_DEVICE_POINTER_AT). */
        r.value = base;
        e = vcu__call(dev, VCU_OP_CU_HOST_DEVICE_POINTER_AT, &r, sizeof(r), &b, 1, &o,
                      sizeof(o));
        if (e != CUDA_SUCCESS)
            return e;
        if (o.value == 0)
            return CUDA_ERROR_UNKNOWN;
        d = o.value;
        /* Still the same memory (not freed meanwhile): keep the answer. */
        pthread_mutex_lock(&vcu__hm_mu);
        h = vcu__hm_find_locked(base);
        if (h != NULL && (uintptr_t)h->p == base)
            h->dptr = d;
        pthread_mutex_unlock(&vcu__hm_mu);
    }
    *out = d + (p - base);
    return CUDA_SUCCESS;
}

CUresult vcu__host_range_dptr(const void *p, size_t n, CUdeviceptr *out)
{
    vcu__hostmem_t *h;
    int mapped, in;

    pthread_mutex_lock(&vcu__hm_mu);
    h = vcu__hm_find_locked((uintptr_t)p);
    in = h != NULL && n <= h->size - ((uintptr_t)p - (uintptr_t)h->p);
    pthread_mutex_unlock(&vcu__hm_mu);
    if (!in)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__host_dptr((uintptr_t)p, out, &mapped);
}

/*
 * With unified addressing a pinned host pointer names its memory on the
 * device too (cuMemsetD32Async on cuMemHostAlloc memory, as XLA does): *p
 * inside this library's host memory, span bytes of it, becomes the device
 * pointer the host mapped it at; any other *p is left as it is.
 */
CUresult vcu__host_as_dev(uint64_t *p, uint64_t span)
{
    vcu__hostmem_t *h;
    CUdeviceptr d;
    int mapped, in;
    CUresult e;

    if (*p < __atomic_load_n(&vcu__hm_lo, __ATOMIC_ACQUIRE) ||
        *p >= __atomic_load_n(&vcu__hm_hi, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS;
    pthread_mutex_lock(&vcu__hm_mu);
    h = vcu__hm_find_locked((uintptr_t)*p);
    in = h != NULL && span <= h->size - ((uintptr_t)*p - (uintptr_t)h->p);
    pthread_mutex_unlock(&vcu__hm_mu);
    if (h == NULL)
        return CUDA_SUCCESS;
    if (!in)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__host_dptr((uintptr_t)*p, &d, &mapped);
    if (e == CUDA_SUCCESS)
        *p = d;
    return e;
}

/*
 * A kernel's parameter buffer (n bytes) as the program filled it: with
 * unified addressing a page-locked host pointer is its own device pointer,
 * and programs hand kernels their pinned buffers so (XLA does).  Each
 * 8-byte word pointing into this library's mappable host memory gets that
 * memory mapped on the device first (once: the host puts it at the same
 * address where it can); where the host put it elsewhere the word becomes
 * the device pointer.  Words outside every allocation, most of them by the
 * bounds check, are left as they are.
 */
CUresult vcu__host_params(char *buf, size_t n)
{
    uintptr_t lo = __atomic_load_n(&vcu__hm_lo, __ATOMIC_ACQUIRE);
    uintptr_t hi = __atomic_load_n(&vcu__hm_hi, __ATOMIC_ACQUIRE);

    if (lo >= hi)
        return CUDA_SUCCESS;
    for (size_t off = 0; off + sizeof(uint64_t) <= n; off += sizeof(uint64_t)) {
        uint64_t w;
        CUdeviceptr d;
        int mapped;
        CUresult e;

        memcpy(&w, buf + off, sizeof(w));
        if (w < lo || w >= hi)
            continue;
        e = vcu__host_dptr((uintptr_t)w, &d, &mapped);
        if (!mapped)
            continue;
        if (e != CUDA_SUCCESS)
            return e;
        if (d != w)
            memcpy(buf + off, &d, sizeof(d));
    }
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p,
                                                  unsigned int Flags)
{
    vcu__ctx_t *c;
    int mapped;
    CUresult e;

    if (pdptr == NULL || p == NULL || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__host_dptr((uintptr_t)p, pdptr, &mapped);
}

/* ---- pointer attributes -------------------------------------------------- */

/* What this library knows of a pointer. */
typedef struct vcu__ptr_info_s {
    unsigned int type;              /* CU_MEMORYTYPE_HOST or _DEVICE; 0: unknown */
    int dev;
    vcu__ctx_t *ctx;                /* NULL: the device's primary context */
    int managed;
    uint64_t start, size;           /* the allocation holding it */
    CUdeviceptr dptr;               /* 0: none */
    void *hptr;                     /* NULL: none */
    uint64_t id;                    /* buffer ID; 0: not known */
} vcu__ptr_info_t;

/* The host's driver's allocation holding p (cuMemGetAddressRange_v2, a
 * generated call): CUDA_ERROR_NOT_FOUND where none does. */
static CUresult vcu__range(int dev, CUdeviceptr p, uint64_t *base, uint64_t *size)
{
    struct vcu_call_cuMemGetAddressRange_v2_req r;
    struct vcu_call_cuMemGetAddressRange_v2_resp o;
    CUresult e;

    VCU_CALL_INIT(r, cuMemGetAddressRange_v2);
    r.dptr = p;
    memset(&o, 0, sizeof(o));
    e = vcu__call(dev, VCU_OP_CU_CALL, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS) {
        *base = o.pbase;
        *size = o.psize;
    }
    return e;
}

static CUresult vcu__ptr_info(vcu__ctx_t *c, CUdeviceptr p, vcu__ptr_info_t *pi)
{
    uint64_t base = 0, size = 0;
    vcu__hostmem_t *h;
    int mapped;
    CUresult e;

    memset(pi, 0, sizeof(*pi));
    /* Managed memory: device memory with a host view at the same
     * address (cuda_managed.c). */
    if (vcu__managed_find(p, &pi->start, &pi->size, &pi->dev)) {
        pi->type = CU_MEMORYTYPE_DEVICE;
        pi->managed = 1;
        pi->ctx = pi->dev == c->dev ? c : NULL;
        pi->dptr = p;
        pi->hptr = (void *)(uintptr_t)p;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&vcu__hm_mu);
    h = vcu__hm_find_locked((uintptr_t)p);
    if (h != NULL) {
        pi->type = CU_MEMORYTYPE_HOST;
        pi->dev = h->dev;
        pi->ctx = h->ctx;
        pi->start = (uintptr_t)h->p;
        pi->size = h->size;
        pi->hptr = (void *)(uintptr_t)p;
        pi->id = h->id;
    }
    pthread_mutex_unlock(&vcu__hm_mu);
    if (h != NULL) {
        if (vcu__host_dptr((uintptr_t)p, &pi->dptr, &mapped) != CUDA_SUCCESS)
            pi->dptr = 0;
        return CUDA_SUCCESS;
    }
    /* Device memory this library allocated, of whichever device: the
     * host has one context per device, so the current context is as good
     * an answer as any context of its device (else the device's primary:
     * vcu__ptr_attr_ctx). */
    if (vcu__dr_find(p, &pi->start, &pi->size, &pi->id, &pi->dev)) {
        pi->type = CU_MEMORYTYPE_DEVICE;
        pi->ctx = pi->dev == c->dev ? c : NULL;
        pi->dptr = p;
        return CUDA_SUCCESS;
    }
    /* Else what the host's driver finds (module globals, memory of
     * another process's): taken for the current context's device. */
    e = vcu__range(c->dev, p, &base, &size);
    if (e == CUDA_ERROR_NOT_FOUND || e == CUDA_ERROR_INVALID_VALUE)
        return CUDA_SUCCESS;
    if (e != CUDA_SUCCESS)
        return e;
    pi->type = CU_MEMORYTYPE_DEVICE;
    pi->dev = c->dev;
    pi->ctx = c;
    pi->start = base;
    pi->size = size;
    pi->dptr = p;
    return CUDA_SUCCESS;
}

/* A pointer attribute this library does not answer (logged once). */
static CUresult vcu__ptr_attr_unsupported(CUpointer_attribute a)
{
    static int logged;

    vcu__log_once(&logged, "libcuda (virtio-cuda): pointer attribute %d is not "
                           "supported\n", (int)a);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* CU_POINTER_ATTRIBUTE_CONTEXT (strict: see vcu__ptr_attr): the context
 * it was made in, or the device's primary context where that one was
 * destroyed since. */
static CUresult vcu__ptr_attr_ctx(const vcu__ptr_info_t *pi, void *data, int strict)
{
    int known = pi->type != 0;
    vcu__ctx_t *pc = NULL;
    CUresult e;

    if (known && pi->ctx != NULL && vcu__reg_has(pi->ctx, VCU__K_CTX)) {
        pc = pi->ctx;
    } else if (known) {
        e = vcu__primary(pi->dev, &pc);
        if (e != CUDA_SUCCESS)
            return e;
    }
    if (strict && !known)
        return CUDA_ERROR_INVALID_VALUE;
    *(CUcontext *)data = (CUcontext)pc;
    return CUDA_SUCCESS;
}

/*
 * CU_POINTER_ATTRIBUTE_BUFFER_ID (strict: see vcu__ptr_attr).  cuFFT asks
 * it of its work areas (and fails its plans without it).  Known for the
 * allocations this library made: device memory (cuda_ranges.c) and
 * page-locked host memory; managed memory, module globals and ranges
 * forgotten after a reset are not (NOT_SUPPORTED).
 */
static CUresult vcu__ptr_attr_id(const vcu__ptr_info_t *pi, void *data, int strict)
{
    if (pi->type == 0) {
        if (strict)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned long long *)data = 0;
        return CUDA_SUCCESS;
    }
    if (pi->id != 0) {
        *(unsigned long long *)data = pi->id;
        return CUDA_SUCCESS;
    }
    return vcu__ptr_attr_unsupported(CU_POINTER_ATTRIBUTE_BUFFER_ID);
}

/*
 * One attribute of a known or unknown (pi->type 0) pointer into data.
 * strict: cuPointerGetAttribute, where an unknown pointer or a missing
 * alias is CUDA_ERROR_INVALID_VALUE; else (cuPointerGetAttributes) they
 * give zero values, as cuda.h says.  Booleans are written as unsigned
 * int.
 */
static CUresult vcu__ptr_attr(const vcu__ptr_info_t *pi, CUpointer_attribute a, void *data,
                              int strict)
{
    int known = pi->type != 0;

    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        return vcu__ptr_attr_ctx(pi, data, strict);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        if (strict && !known)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned int *)data = pi->type;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (strict && pi->dptr == 0)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = pi->dptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (strict && pi->hptr == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = pi->hptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        if (strict && !known)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned int *)data = (unsigned int)pi->managed;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        if (strict && !known)
            return CUDA_ERROR_INVALID_VALUE;
        *(unsigned int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned int *)data = known;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        if (strict && !known)
            return CUDA_ERROR_INVALID_VALUE;
        *(int *)data = known ? pi->dev : -2;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        if (strict && !known)
            return CUDA_ERROR_INVALID_VALUE;
        *(CUdeviceptr *)data = pi->start;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        if (strict && !known)
            return CUDA_ERROR_INVALID_VALUE;
        *(size_t *)data = pi->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        return vcu__ptr_attr_id(pi, data, strict);
    default:
        return vcu__ptr_attr_unsupported(a);
    }
}

/*
 * The allocation holding dptr: managed memory from this library's own
 * record, device memory from the host's driver (CU_CALL; its host side is
 * generated).  As NVIDIA's, either result pointer may be NULL.
 */
VCU__EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    uint64_t base = 0, size = 0;
    vcu__ctx_t *c;
    int dev;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__managed_find(dptr, &base, &size, &dev)) {
        e = vcu__range(c->dev, dptr, &base, &size);
        if (e != CUDA_SUCCESS)
            return e;
    }
    if (pbase != NULL)
        *pbase = (CUdeviceptr)base;
    if (psize != NULL)
        *psize = (size_t)size;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                           CUdeviceptr ptr)
{
    vcu__ptr_info_t pi;
    vcu__ctx_t *c;
    CUresult e;

    if (data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__ptr_info(c, ptr, &pi);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__ptr_attr(&pi, attribute, data, 1);
}

/* An unknown pointer gets zero values and CUDA_SUCCESS, as cuda.h says. */
VCU__EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                            CUpointer_attribute *attributes, void **data,
                                            CUdeviceptr ptr)
{
    vcu__ptr_info_t pi;
    vcu__ctx_t *c;
    CUresult e;

    if (numAttributes == 0 || attributes == NULL || data == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numAttributes; i++)
        if (data[i] == NULL)
            return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__ptr_info(c, ptr, &pi);
    if (e != CUDA_SUCCESS)
        return e;
    for (unsigned int i = 0; i < numAttributes; i++) {
        e = vcu__ptr_attr(&pi, attributes[i], data[i], 0);
        if (e != CUDA_SUCCESS)
            return e;
    }
    return CUDA_SUCCESS;
}

/* ---- unified copies ------------------------------------------------------ */

/*
 * Device memory or not: this library's pinned and registered memory is
 * host memory;
 * anything else is device memory where the host's driver knows an
 * allocation holding it (cuMemGetAddressRange_v2), else pageable host
 * memory.
 */
CUresult vcu__is_device(int dev, CUdeviceptr p, int *is_dev)
{
    uint64_t base, size;
    vcu__hostmem_t *h;
    CUresult e;

    pthread_mutex_lock(&vcu__hm_mu);
    h = vcu__hm_find_locked((uintptr_t)p);
    pthread_mutex_unlock(&vcu__hm_mu);
    if (h != NULL) {
        *is_dev = 0;
        return CUDA_SUCCESS;
    }
    e = vcu__range(dev, p, &base, &size);
    if (e == CUDA_ERROR_NOT_FOUND || e == CUDA_ERROR_INVALID_VALUE) {
        *is_dev = 0;
        return CUDA_SUCCESS;
    }
    if (e != CUDA_SUCCESS)
        return e;
    *is_dev = 1;
    return CUDA_SUCCESS;
}

static CUresult vcu__copy_unified(CUdeviceptr dst, CUdeviceptr src, size_t n, int async,
                                  CUstream stream, int ptsz)
{
    int ddev, sdev;
    vcu__ctx_t *c;
    CUresult e;

    if (dst == 0 || src == 0)
        return n == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__is_device(c->dev, dst, &ddev);
    if (e == CUDA_SUCCESS)
        e = vcu__is_device(c->dev, src, &sdev);
    if (e != CUDA_SUCCESS)
        return e;
    if (ddev && sdev)
        return vcu__copy(VCU_OP_CU_MEMCPY_DTOD, dst, src, NULL, n, async, stream, ptsz);
    if (ddev)
        return vcu__copy(VCU_OP_CU_MEMCPY_HTOD, dst, 0, (void *)(uintptr_t)src, n, async,
                         stream, ptsz);
    if (sdev)
        return vcu__copy(VCU_OP_CU_MEMCPY_DTOH, 0, src, (void *)(uintptr_t)dst, n, async,
                         stream, ptsz);
    /* Host to host: after the stream's earlier work, as in stream order. */
    if (async) {
        e = ptsz ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream);
        if (e != CUDA_SUCCESS)
            return e;
    }
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return vcu__copy_unified(dst, src, ByteCount, 0, NULL, 0);
}

/* Synchronous: ordered after the per-thread stream's work too (see
 * cuMemcpyHtoD_v2_ptds). */
VCU__EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return vcu__copy_unified(dst, src, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                   CUstream hStream)
{
    return vcu__copy_unified(dst, src, ByteCount, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                        CUstream hStream)
{
    return vcu__copy_unified(dst, src, ByteCount, 1, hStream, 1);
}
