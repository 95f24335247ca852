/*
 * Managed memory (cudaMallocManaged), emulated by shadowing.
 *
 * The GPU only knows the host process's device addresses, so a managed
 * allocation is device memory at D plus, in the program, anonymous memory
 * mapped at exactly D (the shadow): the one pointer is valid on the guest
 * CPU (the shadow) and on the GPU (the device memory).  The runtime keeps
 * the two coherent at the points where CUDA lets either side look:
 *
 *  - before device work that may touch managed memory (a launch, a graph
 *    launch, a copy or memset of a managed range, a prefetch to the
 *    device) the shadows the host wrote are copied to the device;
 *  - after a wait (cudaDeviceSynchronize, cudaStreamSynchronize,
 *    cudaEventSynchronize, a synchronous cudaMemcpy, a query answering
 *    success) the shadows the device may have written since are copied
 *    back.
 *
 * Host writes are found with mprotect: a clean shadow is read-only, the
 * first write faults, the SIGSEGV handler marks the region host-dirty and
 * makes it writable.  Device writes are counted per device (gen): every
 * use of the device bumps it, a region whose seen_gen lags is stale.  So
 * a read-only host phase costs no copy to the device, and launches with no
 * host access in between cost no copies at all.
 *
 * The copies run on a private non-blocking stream per device and are
 * waited for before the call returns, so the launch that follows a copy
 * to the device is sent after it has finished, and a copy back waits for
 * nothing but itself.
 *
 * We report cudaDevAttrConcurrentManagedAccess = 0: the host must not
 * touch managed memory between a launch and the wait for it.  A region
 * that the host wrote and the device may have written keeps the host's
 * data (the host wrote after a wait that did not cover every stream).
 *
 * Loopback (tests): the program and the CPU stand-in share one process
 * and device pointers are host pointers, so the device memory is the
 * managed memory, with no shadow.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cudart_int.h"
#include "vcu_transport_int.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define VCU__MAX_MANAGED 4096
/* Bytes per coherence copy: bounds what the driver pins at once. */
#define VCU__M_CHUNK (64ull << 20)

/*
 * One managed allocation.  base and len are read by the fault handler
 * without a lock (atomically; base is written last when a slot is filled
 * and first when it is emptied); host_dirty is set by the handler and
 * cleared under vcu__m_mu; everything else is under vcu__m_mu.
 */
typedef struct vcu__mreg_s {
    uint64_t base;                  /* managed pointer, page aligned; 0: free slot */
    uint64_t len;                   /* shadow bytes: size rounded up to pages */
    uint64_t size;                  /* bytes asked for */
    uint64_t dptr;                  /* what CU_MEM_ALLOC returned, for CU_MEM_FREE */
    uint64_t seen_gen;              /* device gen the shadow is up to date with */
    int dev;
    int shadow;                     /* 0 in loopback: no shadow, no coherence */
    int host_dirty;                 /* shadow writable: the host may have written */
} vcu__mreg_t;

/* Per device, under vcu__m_mu. */
typedef struct vcu__mdev_s {
    uint64_t stream;                /* private non-blocking stream; 0 until made */
    uint64_t gen;                   /* bumped by each device use */
    uint64_t clean_gen;             /* gen at the last wait that covered every use */
    uint64_t lstream;               /* the stream of the uses since then */
    int multi;                      /* ... or they went to more than one stream */
} vcu__mdev_t;

/*
 * vcu__m_mu protects the slots and vcu__mdev.  It is taken before the
 * allocation table's lock and held across calls to the host: it
 * serializes the copies that keep the shadows coherent.  The copies run
 * on private streams that wait for nothing else, so holding it never
 * waits on program work.
 */
static pthread_mutex_t vcu__m_mu = PTHREAD_MUTEX_INITIALIZER;
static vcu__mreg_t vcu__mregs[VCU__MAX_MANAGED];
static int vcu__m_top;              /* slots in use are below it; atomic */
static vcu__mdev_t vcu__mdev[VCU_CU_MAX_DEVICES];
static int vcu__m_nmanaged;         /* live allocations; atomic */
static int vcu__m_nshadow;          /* live allocations with a shadow; atomic */
static int vcu__m_ndirty;           /* host-dirty shadows; atomic, may be stale high */

static pthread_once_t vcu__m_sig_once = PTHREAD_ONCE_INIT;
static struct sigaction vcu__m_old_sa;
static int vcu__m_sig_ok;

static uint64_t vcu__m_page(void)
{
    long p = sysconf(_SC_PAGESIZE);

    return p > 0 ? (uint64_t)p : 4096;
}

/* ---- host writes: the fault handler ------------------------------------- */

static void vcu__m_fault(int sig, siginfo_t *si, void *uc)
{
    uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
    int top = __atomic_load_n(&vcu__m_top, __ATOMIC_ACQUIRE);
    int saved = errno;

    for (int i = 0; i < top; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];
        uint64_t b = __atomic_load_n(&m->base, __ATOMIC_ACQUIRE);
        uint64_t len = __atomic_load_n(&m->len, __ATOMIC_RELAXED);

        if (b == 0 || a < b || a - b >= len || !m->shadow)
            continue;
        if (!__atomic_exchange_n(&m->host_dirty, 1, __ATOMIC_ACQ_REL))
            __atomic_fetch_add(&vcu__m_ndirty, 1, __ATOMIC_RELAXED);
        if (mprotect((void *)(uintptr_t)b, len, PROT_READ | PROT_WRITE) == 0) {
            errno = saved;
            return;
        }
        break;
    }
    errno = saved;
    /* Not ours: the previous handler's, or the default action (the fault
     * repeats when we return). */
    if (vcu__m_old_sa.sa_flags & SA_SIGINFO) {
        if (vcu__m_old_sa.sa_sigaction != NULL) {
            vcu__m_old_sa.sa_sigaction(sig, si, uc);
            return;
        }
    } else if (vcu__m_old_sa.sa_handler != SIG_DFL && vcu__m_old_sa.sa_handler != SIG_IGN) {
        vcu__m_old_sa.sa_handler(sig);
        return;
    }
    signal(SIGSEGV, SIG_DFL);
}

static void vcu__m_sig_install(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = vcu__m_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    vcu__m_sig_ok = sigaction(SIGSEGV, &sa, &vcu__m_old_sa) == 0;
}

/* ---- coherence copies (vcu__m_mu held) ----------------------------------- */

static cudaError_t vcu__m_stream_locked(int dev)
{
    struct vcu_cu_stream_create_req r;
    struct vcu_cu_u64_resp o;
    cudaError_t e;

    if (vcu__mdev[dev].stream != 0)
        return cudaSuccess;
    memset(&r, 0, sizeof(r));
    r.flags = cudaStreamNonBlocking;
    e = vcu__call(dev, VCU_OP_CU_STREAM_CREATE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        vcu__mdev[dev].stream = o.value;
    return e;
}

/* Copies the region's size bytes between shadow and device, waited for. */
static cudaError_t vcu__m_xfer(vcu__mreg_t *m, int htod)
{
    struct vcu_cu_memcpy_req r;
    uint64_t chunk = vcu__rt.max_xfer ? vcu__rt.max_xfer : VCU_MAX_XFER;
    cudaError_t e;
    vcu_buf_t b;

    if (chunk > VCU__M_CHUNK)
        chunk = VCU__M_CHUNK;
    for (uint64_t off = 0; off < m->size; off += chunk) {
        uint64_t n = m->size - off < chunk ? m->size - off : chunk;

        memset(&r, 0, sizeof(r));
        r.dst = m->base + off;
        r.src = m->base + off;
        r.size = n;
        r.stream = vcu__mdev[m->dev].stream;
        r.flags = VCU_CU_MEMCPY_F_ASYNC;
        b.addr = (void *)(uintptr_t)(m->base + off);
        b.len = n;
        b.flags = htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE;
        /* Pageable guest memory: the host replies once the copy is done. */
        e = vcu__call(m->dev, htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, 0, &r,
                      sizeof(r), &b, 1, NULL, 0);
        if (e != cudaSuccess)
            return e;
    }
    return cudaSuccess;
}

/* Host writes of dev's shadows (or of only) to the device. */
static cudaError_t vcu__m_flush_locked(int dev, const vcu__mreg_t *only)
{
    cudaError_t e;

    if (__atomic_load_n(&vcu__m_ndirty, __ATOMIC_ACQUIRE) == 0)
        return cudaSuccess;
    for (int i = 0; i < vcu__m_top; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];
        void *p = (void *)(uintptr_t)m->base;

        if (m->base == 0 || !m->shadow || m->dev != dev || (only != NULL && m != only))
            continue;
        if (!__atomic_exchange_n(&m->host_dirty, 0, __ATOMIC_ACQ_REL))
            continue;
        __atomic_fetch_sub(&vcu__m_ndirty, 1, __ATOMIC_RELAXED);
        /* Read-only before the copy: a write from now on faults and
         * marks the region again; one before it is in the copy. */
        mprotect(p, m->len, PROT_READ);
        e = vcu__m_xfer(m, 1);
        if (e != cudaSuccess) {
            if (!__atomic_exchange_n(&m->host_dirty, 1, __ATOMIC_ACQ_REL))
                __atomic_fetch_add(&vcu__m_ndirty, 1, __ATOMIC_RELAXED);
            mprotect(p, m->len, PROT_READ | PROT_WRITE);
            return e;
        }
    }
    return cudaSuccess;
}

/* Device writes of dev's managed memory back to the shadows. */
static cudaError_t vcu__m_refresh_locked(int dev, int full)
{
    vcu__mdev_t *d = &vcu__mdev[dev];
    cudaError_t e;

    for (int i = 0; i < vcu__m_top; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];
        void *p = (void *)(uintptr_t)m->base;

        if (m->base == 0 || !m->shadow || m->dev != dev || m->seen_gen == d->gen)
            continue;
        if (__atomic_load_n(&m->host_dirty, __ATOMIC_ACQUIRE)) {
            /* The host wrote after a wait: its data wins. */
            if (full)
                m->seen_gen = d->gen;
            continue;
        }
        /* The driver pins the pages for writing: writable for the copy. */
        if (mprotect(p, m->len, PROT_READ | PROT_WRITE) != 0)
            return cudaErrorUnknown;
        e = vcu__m_xfer(m, 0);
        mprotect(p, m->len, PROT_READ);
        if (e != cudaSuccess)
            return e;
        if (full)
            m->seen_gen = d->gen;
    }
    if (full)
        d->clean_gen = d->gen;
    return cudaSuccess;
}

/* ---- hooks -------------------------------------------------------------- */

cudaError_t vcu__managed_use(int dev, uint64_t ws)
{
    vcu__mdev_t *d = &vcu__mdev[dev];
    cudaError_t e;

    if (__atomic_load_n(&vcu__m_nshadow, __ATOMIC_ACQUIRE) == 0)
        return cudaSuccess;
    pthread_mutex_lock(&vcu__m_mu);
    e = vcu__m_flush_locked(dev, NULL);
    if (d->gen == d->clean_gen) {
        d->lstream = ws;
        d->multi = 0;
    } else if (d->lstream != ws) {
        d->multi = 1;
    }
    d->gen++;
    pthread_mutex_unlock(&vcu__m_mu);
    return e;
}

cudaError_t vcu__managed_touch(int dev, uint64_t ws, const void *a, const void *b)
{
    vcu__alloc_t x;

    if (__atomic_load_n(&vcu__m_nshadow, __ATOMIC_ACQUIRE) == 0)
        return cudaSuccess;
    if ((vcu__mem_find((uint64_t)(uintptr_t)a, &x) == 0 && x.kind == VCU__M_MANAGED) ||
        (b != NULL && vcu__mem_find((uint64_t)(uintptr_t)b, &x) == 0 &&
         x.kind == VCU__M_MANAGED))
        return vcu__managed_use(dev, ws);
    return cudaSuccess;
}

cudaError_t vcu__managed_sync(int dev, uint64_t ws, int full)
{
    vcu__mdev_t *d = &vcu__mdev[dev];
    cudaError_t e = cudaSuccess;

    if (__atomic_load_n(&vcu__m_nshadow, __ATOMIC_ACQUIRE) == 0)
        return cudaSuccess;
    pthread_mutex_lock(&vcu__m_mu);
    if (d->gen != d->clean_gen) {
        /* A wait on the one stream every use since the last clean went
         * to covers them all. */
        full = full || (!d->multi && d->lstream == ws);
        e = vcu__m_refresh_locked(dev, full);
    }
    pthread_mutex_unlock(&vcu__m_mu);
    return e;
}

void vcu__managed_kind(const void *dst, const void *src, enum cudaMemcpyKind *kind)
{
    vcu__alloc_t x;
    int dd, sd;

    if (__atomic_load_n(&vcu__m_nmanaged, __ATOMIC_ACQUIRE) == 0)
        return;
    dd = *kind == cudaMemcpyHostToDevice || *kind == cudaMemcpyDeviceToDevice;
    sd = *kind == cudaMemcpyDeviceToHost || *kind == cudaMemcpyDeviceToDevice;
    /* Managed memory is device memory to copies: its device side is the
     * one that is current at a stream-ordered point. */
    if (vcu__mem_find((uint64_t)(uintptr_t)dst, &x) == 0 && x.kind == VCU__M_MANAGED)
        dd = 1;
    if (vcu__mem_find((uint64_t)(uintptr_t)src, &x) == 0 && x.kind == VCU__M_MANAGED)
        sd = 1;
    *kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
               : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

/* ---- allocation --------------------------------------------------------- */

static void vcu__m_dev_free(int dev, uint64_t dptr)
{
    struct vcu_cu_u64_req f = { .value = dptr };

    vcu__call(dev, VCU_OP_CU_MEM_FREE, 0, &f, sizeof(f), NULL, 0, NULL, 0);
}

static cudaError_t vcu__m_dev_alloc(int dev, uint64_t size, uint64_t *out)
{
    struct vcu_cu_mem_alloc_req r = { .size = size };
    struct vcu_cu_u64_resp o;
    cudaError_t e;

    e = vcu__call(dev, VCU_OP_CU_MEM_ALLOC, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        *out = o.value;
    return e;
}

/* Zeroes [base, base + len) on the device, waited for: a new shadow is
 * zero and clean. */
static cudaError_t vcu__m_zero_locked(int dev, uint64_t base, uint64_t len)
{
    struct vcu_cu_memset_req r;
    struct vcu_cu_u64_req s;
    cudaError_t e;

    memset(&r, 0, sizeof(r));
    r.dst = base;
    r.width = len;
    r.height = 1;
    r.stream = vcu__mdev[dev].stream;
    r.elem_size = 1;
    r.flags = VCU_CU_MEMCPY_F_ASYNC;
    e = vcu__call(dev, VCU_OP_CU_MEMSET, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != cudaSuccess)
        return e;
    s.value = vcu__mdev[dev].stream;
    return vcu__call(dev, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, &s, sizeof(s), NULL, 0, NULL, 0);
}

static cudaError_t vcu__m_alloc_locked(int dev, size_t size, unsigned int flags, void **out)
{
    static int log_slots, log_map, log_sig;
    uint64_t page = vcu__m_page(), len, dptr, base;
    int loop = vcu__rt.conn->loop != NULL, slot = -1;
    vcu__mreg_t *m;
    vcu__alloc_t a;
    cudaError_t e;

    if (size > UINT64_MAX - 2 * page)
        return cudaErrorMemoryAllocation;
    len = (size + page - 1) & ~(page - 1);
    for (int i = 0; i < VCU__MAX_MANAGED && slot < 0; i++)
        if (vcu__mregs[i].base == 0)
            slot = i;
    if (slot < 0) {
        vcu__log_once(&log_slots, "virtio-cuda: cudaMallocManaged: more than %d managed "
                                  "allocations\n", VCU__MAX_MANAGED);
        return cudaErrorMemoryAllocation;
    }
    if (!loop) {
        pthread_once(&vcu__m_sig_once, vcu__m_sig_install);
        if (!vcu__m_sig_ok) {
            vcu__log_once(&log_sig, "virtio-cuda: cudaMallocManaged: cannot install the "
                                    "SIGSEGV handler\n");
            return cudaErrorMemoryAllocation;
        }
    }
    e = vcu__m_stream_locked(dev);
    if (e != cudaSuccess)
        return e;
    e = vcu__m_dev_alloc(dev, loop ? size : len, &dptr);
    if (e != cudaSuccess)
        return e;
    base = dptr;
    if (!loop && (dptr & (page - 1))) {
        /* The shadow needs whole pages of its own: one page more, from
         * the first page boundary inside. */
        vcu__m_dev_free(dev, dptr);
        e = vcu__m_dev_alloc(dev, len + page, &dptr);
        if (e != cudaSuccess)
            return e;
        base = (dptr + page - 1) & ~(page - 1);
    }
    if (!loop) {
        void *p = mmap((void *)(uintptr_t)base, len, PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

        if (p != (void *)(uintptr_t)base) {
            int err = p == MAP_FAILED ? errno : EEXIST;

            if (p != MAP_FAILED)
                munmap(p, len);     /* a kernel before 4.17 took the address as a hint */
            vcu__log_once(&log_map, "virtio-cuda: cudaMallocManaged: the device address "
                                    "0x%llx is taken in this process (%s): no shadow\n",
                          (unsigned long long)base, strerror(err));
            vcu__m_dev_free(dev, dptr);
            return cudaErrorMemoryAllocation;
        }
    }
    e = vcu__m_zero_locked(dev, base, loop ? size : len);
    memset(&a, 0, sizeof(a));
    a.base = base;
    a.size = size;
    a.dev = dev;
    a.kind = VCU__M_MANAGED;
    a.flags = flags;
    if (e == cudaSuccess && vcu__mem_add(&a) != 0)
        e = cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        if (!loop)
            munmap((void *)(uintptr_t)base, len);
        vcu__m_dev_free(dev, dptr);
        return e;
    }
    m = &vcu__mregs[slot];
    m->size = size;
    m->dptr = dptr;
    m->seen_gen = vcu__mdev[dev].gen;
    m->dev = dev;
    m->shadow = !loop;
    m->host_dirty = 0;
    __atomic_store_n(&m->len, len, __ATOMIC_RELAXED);
    __atomic_store_n(&m->base, base, __ATOMIC_RELEASE);
    if (slot >= vcu__m_top)
        __atomic_store_n(&vcu__m_top, slot + 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&vcu__m_nmanaged, 1, __ATOMIC_RELEASE);
    if (!loop)
        __atomic_fetch_add(&vcu__m_nshadow, 1, __ATOMIC_RELEASE);
    *out = (void *)(uintptr_t)base;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    int dev;
    cudaError_t e;

    if (devPtr == NULL || size == 0 ||
        (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    *devPtr = NULL;
    pthread_mutex_lock(&vcu__m_mu);
    e = vcu__m_alloc_locked(dev, size, flags, devPtr);
    pthread_mutex_unlock(&vcu__m_mu);
    return vcu__err(e);
}

/* Empties slot m (vcu__m_mu held); the device memory is the caller's. */
static void vcu__m_drop_locked(vcu__mreg_t *m)
{
    __atomic_store_n(&m->base, 0, __ATOMIC_RELEASE);
    if (m->shadow) {
        if (__atomic_exchange_n(&m->host_dirty, 0, __ATOMIC_ACQ_REL))
            __atomic_fetch_sub(&vcu__m_ndirty, 1, __ATOMIC_RELAXED);
        __atomic_fetch_sub(&vcu__m_nshadow, 1, __ATOMIC_RELEASE);
    }
    __atomic_fetch_sub(&vcu__m_nmanaged, 1, __ATOMIC_RELEASE);
}

cudaError_t vcu__managed_free(void *p)
{
    uint64_t b = (uint64_t)(uintptr_t)p;
    vcu__mreg_t *m = NULL;
    int dev;
    cudaError_t e;

    pthread_mutex_lock(&vcu__m_mu);
    for (int i = 0; i < vcu__m_top && m == NULL; i++)
        if (vcu__mregs[i].base == b && b != 0)
            m = &vcu__mregs[i];
    if (m == NULL || vcu__mem_del(b, VCU__M_MANAGED, NULL) != 0) {
        pthread_mutex_unlock(&vcu__m_mu);
        return cudaErrorInvalidValue;
    }
    dev = m->dev;
    vcu__m_drop_locked(m);
    if (m->shadow)
        munmap(p, m->len);
    e = vcu__check_dev(dev);
    if (e == cudaSuccess) {
        struct vcu_cu_u64_req f = { .value = m->dptr };

        e = vcu__call(dev, VCU_OP_CU_MEM_FREE, 0, &f, sizeof(f), NULL, 0, NULL, 0);
    }
    pthread_mutex_unlock(&vcu__m_mu);
    return e;
}

void vcu__managed_forget_dev(int dev)
{
    pthread_mutex_lock(&vcu__m_mu);
    for (int i = 0; i < vcu__m_top; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];

        if (m->base == 0 || m->dev != dev)
            continue;
        if (m->shadow)
            munmap((void *)(uintptr_t)m->base, m->len);
        vcu__m_drop_locked(m);
    }
    memset(&vcu__mdev[dev], 0, sizeof(vcu__mdev[dev]));
    pthread_mutex_unlock(&vcu__m_mu);
}

/* ---- prefetch, advice, attachment ---------------------------------------- */

/* [p, p + count) inside one managed allocation (count 0: p inside one). */
static cudaError_t vcu__m_range(const void *p, size_t count, vcu__alloc_t *a)
{
    uint64_t b = (uint64_t)(uintptr_t)p;

    if (p == NULL || vcu__mem_find(b, a) != 0 || a->kind != VCU__M_MANAGED ||
        count > a->size - (b - a->base))
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

static cudaError_t vcu__m_prefetch(const void *p, size_t count, struct cudaMemLocation loc,
                                   unsigned int flags, cudaStream_t stream, int ptsz)
{
    vcu__alloc_t a;
    uint64_t ws;
    int dev;
    cudaError_t e;

    (void)flags;
    e = vcu__stream(stream, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess && count != 0)
        e = vcu__m_range(p, count, &a);
    if (e != cudaSuccess || count == 0)
        return e;
    switch (loc.type) {
    case cudaMemLocationTypeDevice:
        e = vcu__check_dev(loc.id);
        if (e != cudaSuccess)
            return e;
        /* To the device: the host's writes go now. */
        if (__atomic_load_n(&vcu__m_nshadow, __ATOMIC_ACQUIRE) == 0)
            return cudaSuccess;
        pthread_mutex_lock(&vcu__m_mu);
        for (int i = 0; i < vcu__m_top; i++)
            if (vcu__mregs[i].base == a.base && vcu__mregs[i].shadow) {
                e = vcu__m_flush_locked(a.dev, &vcu__mregs[i]);
                break;
            }
        pthread_mutex_unlock(&vcu__m_mu);
        return e;
    case cudaMemLocationTypeHost:
    case cudaMemLocationTypeHostNuma:
    case cudaMemLocationTypeHostNumaCurrent:
        /* To the host: the wait that lets the host look copies it back. */
        return cudaSuccess;
    default:
        return cudaErrorInvalidValue;
    }
}

VCU__EXPORT cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count,
                                             struct cudaMemLocation location, unsigned int flags,
                                             cudaStream_t stream)
{
    return vcu__err(vcu__m_prefetch(devPtr, count, location, flags, stream, 0));
}

VCU__EXPORT cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                  struct cudaMemLocation location,
                                                  unsigned int flags, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                  struct cudaMemLocation location,
                                                  unsigned int flags, cudaStream_t stream)
{
    return vcu__err(vcu__m_prefetch(devPtr, count, location, flags, stream, 1));
}

/* Hints: accepted on managed ranges, where they change nothing here. */
VCU__EXPORT cudaError_t cudaMemAdvise(const void *devPtr, size_t count,
                                      enum cudaMemoryAdvise advice, struct cudaMemLocation location)
{
    vcu__alloc_t a;
    int dev;
    cudaError_t e;

    (void)location;
    if (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e == cudaSuccess)
        e = vcu__m_range(devPtr, count, &a);
    return e == cudaSuccess ? e : vcu__err(e);
}

static cudaError_t vcu__m_attach(cudaStream_t stream, void *p, size_t length,
                                 unsigned int flags, int ptsz)
{
    vcu__alloc_t a;
    uint64_t ws;
    int dev;
    cudaError_t e;

    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost &&
        flags != cudaMemAttachSingle)
        return cudaErrorInvalidValue;
    e = vcu__stream(stream, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__m_range(p, length, &a);
    /* The whole allocation or nothing, as CUDA requires. */
    if (e == cudaSuccess && length != 0 && ((uint64_t)(uintptr_t)p != a.base || length != a.size))
        e = cudaErrorInvalidValue;
    return e;
}

VCU__EXPORT cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr,
                                                 size_t length, unsigned int flags)
{
    return vcu__err(vcu__m_attach(stream, devPtr, length, flags, 0));
}

VCU__EXPORT cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr,
                                                      size_t length, unsigned int flags);
VCU__EXPORT cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr,
                                                      size_t length, unsigned int flags)
{
    return vcu__err(vcu__m_attach(stream, devPtr, length, flags, 1));
}
