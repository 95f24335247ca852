/*
 * Managed memory emulated by shadowing, shared by libcudart.so.13
 * (cudaMallocManaged, cudart_managed.c) and libcuda.so.1
 * (cuMemAllocManaged, cuda_managed.c); each library links its own copy
 * and gives it its calls to the host (vcu__m_ops, vcu_managed.h).
 *
 * The GPU only knows the host process's device addresses, so a managed
 * allocation is device memory at D plus, in the program, anonymous memory
 * mapped at exactly D (the shadow): the one pointer is valid on the guest
 * CPU (the shadow) and on the GPU (the device memory).  The library keeps
 * the two coherent at the points where CUDA lets either side look:
 *
 *  - before device work that may touch managed memory (a launch, a graph
 *    launch, a copy or memset of a managed range, a prefetch to the
 *    device) the shadows the host wrote are copied to the device
 *    (vcu__m_use);
 *  - after a wait (context, stream or event synchronize, a synchronous
 *    copy, a query answering success) the shadows the device may have
 *    written since are copied back (vcu__m_sync).
 *
 * Host writes are found with mprotect: a clean shadow is read-only, the
 * first write faults, the SIGSEGV handler marks the region host-dirty and
 * makes it writable.  Device work makes a region busy: from the use
 * until a wait that covers it the shadow is inaccessible (PROT_NONE),
 * so a read-only host phase costs no copy to the device, launches with
 * no host access in between cost no copies at all, and the host never
 * sees a stale shadow.
 *
 * Which device work touches a region follows its attachment, as CUDA
 * defines it for devices without concurrent managed access
 * (cudaStreamAttachMemAsync; memory allocated host-attached counts as
 * global until the program attaches it, since a program written for the
 * GPU behind the device may launch on it as it is): a global region
 * is touched by work on any stream and covered by a wait for the whole
 * device or for the one stream all work since the last such wait went
 * to; a region attached to one stream is touched by work on that stream
 * (and copies naming it) and covered by a wait for it; a region attached
 * to the host is touched by nothing but copies naming it and never
 * stays busy past a wait.  So the host may work on host-attached and
 * other streams' memory while kernels run, as CUDA allows.
 *
 * Concurrent managed access is not offered.  A host access to a busy
 * region (which CUDA forbids on such devices: the program has not waited)
 * does not see stale data nor lose its writes: the fault handler waits
 * for the device, brings its writes back and lets the access go on, as
 * if the program had synchronized there (logged once).  Where it cannot
 * (the faulting thread is this layer's own) the fault is fatal.  A region
 * that the host wrote and the device may have written keeps the host's
 * data.
 *
 * Loopback (tests): the program and the CPU stand-in share one process
 * and device pointers are host pointers, so the device memory is the
 * managed memory, with no shadow.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vcu_common.h"
#include "vcu_managed.h"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* CU_STREAM_NON_BLOCKING, without cuda.h. */
#define VCU__M_STREAM_NON_BLOCKING 0x1u

#define VCU__MAX_MANAGED 4096
/* Driver allocations one adopted region's pages may hold. */
#define VCU__M_PIECES 32
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
    uint64_t astream;               /* the stream of a VCU__M_ATTACH_SINGLE region */
    int attach;                     /* VCU__M_ATTACH_* */
    int dev;
    int shadow;                     /* 0 in loopback: no shadow, no coherence */
    int host_dirty;                 /* shadow writable: the host may have written */
    int busy;                       /* device work may use it: shadow PROT_NONE */
    int dev_dirty;                  /* the device may have written since the copy back */
    int adopted;                    /* vcu__m_adopt's: the driver's memory */
    /* Adopted: the driver's allocations in the shadow's pages (managed
     * globals, each its own, share pages, those of several modules too),
     * the only bytes copied either way, each with the owner that adopted
     * it; npieces 0: the whole [base, base + size). */
    unsigned int npieces;
    struct {
        uint64_t off, len, owner;
    } piece[VCU__M_PIECES];
} vcu__mreg_t;

/* Per device, under vcu__m_mu. */
typedef struct vcu__mdev_s {
    uint64_t stream;                /* private non-blocking stream; 0 until made */
    uint64_t lstream;               /* the stream of the uses since the last full wait */
    int used;                       /* some use since then */
    int multi;                      /* ... on more than one stream */
} vcu__mdev_t;

/*
 * vcu__m_mu protects the slots and vcu__mdev.  It is taken before the
 * library's own locks (those vcu__m_ops.call and .track take: libcudart's
 * allocation table) and held across calls to the host: it
 * serializes the copies that keep the shadows coherent.  The copies run
 * on private streams that wait for nothing else, so holding it never
 * waits on program work.
 */
static pthread_mutex_t vcu__m_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t vcu__m_owner;      /* holder of vcu__m_mu, if vcu__m_owned */
static int vcu__m_owned;            /* atomic */
static vcu__mreg_t vcu__mregs[VCU__MAX_MANAGED];
static int vcu__m_top;              /* slots in use are below it; atomic */
static vcu__mdev_t vcu__mdev[VCU_CU_MAX_DEVICES];
static int vcu__m_nmanaged;         /* live allocations; atomic */
static int vcu__m_nshadow;          /* live allocations with a shadow; atomic */
static int vcu__m_ndirty;           /* host-dirty shadows; atomic, may be stale high */

static pthread_once_t vcu__m_sig_once = PTHREAD_ONCE_INIT;
static struct sigaction vcu__m_old_sa;
static int vcu__m_sig_ok;

static void vcu__m_lock(void)
{
    pthread_mutex_lock(&vcu__m_mu);
    vcu__m_owner = pthread_self();
    __atomic_store_n(&vcu__m_owned, 1, __ATOMIC_RELEASE);
}

static void vcu__m_unlock(void)
{
    __atomic_store_n(&vcu__m_owned, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&vcu__m_mu);
}

static uint64_t vcu__m_page(void)
{
    long p = sysconf(_SC_PAGESIZE);

    return p > 0 ? (uint64_t)p : 4096;
}

/* ---- host writes: the fault handler ------------------------------------- */

static int vcu__m_refresh_one_locked(vcu__mreg_t *m);

/*
 * A host access to busy region m (the program did not wait for the
 * device): waits for the device, brings its writes back, and leaves the
 * region as after a wait.  1: the access may go on (retried), 0: it
 * cannot (the faulting thread holds vcu__m_mu: fatal).  Runs in the
 * handler, on the thread that faulted, as that thread would have called
 * cuCtxSynchronize.
 */
static int vcu__m_fault_wait(vcu__mreg_t *m, uint64_t b)
{
    static int logged;
    struct vcu_cu_hdr h;
    int ok = 1;

    if (__atomic_load_n(&vcu__m_owned, __ATOMIC_ACQUIRE) &&
        pthread_equal(vcu__m_owner, pthread_self()))
        return 0;
    vcu__log_once(&logged, "%s: the host touched managed memory that device work may be "
                           "using (no concurrent managed access): waited for the device\n",
                  vcu__m_ops.name);
    vcu__m_lock();
    if (m->base == b && m->busy) {
        memset(&h, 0, sizeof(h));
        ok = vcu__m_ops.call(m->dev, VCU_OP_CU_CTX_SYNCHRONIZE, &h, sizeof(h), NULL, 0, NULL,
                             0) == 0;
        /* Every region of the device is covered now. */
        for (int i = 0; ok && i < vcu__m_top; i++) {
            vcu__mreg_t *o = &vcu__mregs[i];

            if (o->base != 0 && o->shadow && o->dev == m->dev && o->busy)
                ok = vcu__m_refresh_one_locked(o) == 0;
        }
        if (ok) {
            vcu__mdev[m->dev].used = 0;
            vcu__mdev[m->dev].multi = 0;
        }
    }
    vcu__m_unlock();
    return ok;
}

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
        if (__atomic_load_n(&m->busy, __ATOMIC_ACQUIRE)) {
            /* Retried: a write faults again below, on a clean shadow. */
            if (vcu__m_fault_wait(m, b)) {
                errno = saved;
                return;
            }
            break;
        }
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

static int vcu__m_stream_locked(int dev)
{
    struct vcu_cu_stream_create_req r;
    struct vcu_cu_u64_resp o;
    int e;

    if (vcu__mdev[dev].stream != 0)
        return 0;
    memset(&r, 0, sizeof(r));
    r.flags = VCU__M_STREAM_NON_BLOCKING;
    e = vcu__m_ops.call(dev, VCU_OP_CU_STREAM_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == 0)
        vcu__mdev[dev].stream = o.value;
    return e;
}

/* Copies the region's size bytes between shadow and device, waited for. */
/* [from, from + size) of region m, one way. */
static int vcu__m_xfer_range(vcu__mreg_t *m, int htod, uint64_t from, uint64_t size)
{
    struct vcu_cu_memcpy_req r;
    uint64_t chunk = vcu__m_ops.max_xfer();
    int e;
    vcu_buf_t b;

    if (chunk > VCU__M_CHUNK)
        chunk = VCU__M_CHUNK;
    for (uint64_t off = from; off < from + size; off += chunk) {
        uint64_t n = from + size - off < chunk ? from + size - off : chunk;

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
        e = vcu__m_ops.call(m->dev, htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, &r,
                            sizeof(r), &b, 1, NULL, 0);
        if (e != 0)
            return e;
    }
    return 0;
}

/* Region m's bytes one way: all of it, or an adopted region's pieces. */
static int vcu__m_xfer(vcu__mreg_t *m, int htod)
{
    int e = 0;

    if (m->npieces == 0)
        return vcu__m_xfer_range(m, htod, 0, m->size);
    for (unsigned int i = 0; i < m->npieces && e == 0; i++)
        e = vcu__m_xfer_range(m, htod, m->piece[i].off, m->piece[i].len);
    return e;
}

/* The host's writes of region m to the device; the shadow is left
 * read-only (a write from now on faults and marks it again). */
static int vcu__m_flush_one_locked(vcu__mreg_t *m)
{
    void *p = (void *)(uintptr_t)m->base;
    int e;

    if (!__atomic_exchange_n(&m->host_dirty, 0, __ATOMIC_ACQ_REL))
        return 0;
    __atomic_fetch_sub(&vcu__m_ndirty, 1, __ATOMIC_RELAXED);
    /* Read-only before the copy: a write before it is in the copy. */
    mprotect(p, m->len, PROT_READ);
    e = vcu__m_xfer(m, 1);
    if (e != 0) {
        if (!__atomic_exchange_n(&m->host_dirty, 1, __ATOMIC_ACQ_REL))
            __atomic_fetch_add(&vcu__m_ndirty, 1, __ATOMIC_RELAXED);
        mprotect(p, m->len, PROT_READ | PROT_WRITE);
    } else if (m->busy) {
        mprotect(p, m->len, PROT_NONE);
    }
    return e;
}

/*
 * Region m is no longer busy: the device's writes come back (unless the
 * host wrote: its data wins) and the shadow is readable again.
 */
static int vcu__m_refresh_one_locked(vcu__mreg_t *m)
{
    void *p = (void *)(uintptr_t)m->base;
    int e = 0;

    if (m->dev_dirty && !__atomic_load_n(&m->host_dirty, __ATOMIC_ACQUIRE)) {
        /* The driver pins the pages for writing: writable for the copy. */
        if (mprotect(p, m->len, PROT_READ | PROT_WRITE) != 0)
            return vcu__m_ops.unknown;
        e = vcu__m_xfer(m, 0);
        if (e != 0) {
            mprotect(p, m->len, PROT_NONE);
            return e;
        }
    }
    m->dev_dirty = 0;
    __atomic_store_n(&m->busy, 0, __ATOMIC_RELEASE);
    mprotect(p, m->len, __atomic_load_n(&m->host_dirty, __ATOMIC_ACQUIRE)
                            ? PROT_READ | PROT_WRITE : PROT_READ);
    return 0;
}

/* Whether device work on stream ws touches region m (a, b: the managed
 * ranges a copy names, 0 for none). */
static int vcu__m_touches(const vcu__mreg_t *m, uint64_t ws, uint64_t a, uint64_t b)
{
    if ((a != 0 && a - m->base < m->len) || (b != 0 && b - m->base < m->len))
        return 1;
    switch (m->attach) {
    case VCU__M_ATTACH_GLOBAL:
        return 1;
    case VCU__M_ATTACH_SINGLE:
        return m->astream == ws;
    default:
        return 0;
    }
}

/* ---- hooks -------------------------------------------------------------- */

int vcu__m_use(int dev, uint64_t ws, uint64_t a, uint64_t b)
{
    vcu__mdev_t *d = &vcu__mdev[dev];
    int e = 0;

    if (__atomic_load_n(&vcu__m_nshadow, __ATOMIC_ACQUIRE) == 0)
        return 0;
    vcu__m_lock();
    for (int i = 0; i < vcu__m_top && e == 0; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];

        if (m->base == 0 || !m->shadow || m->dev != dev || !vcu__m_touches(m, ws, a, b))
            continue;
        e = vcu__m_flush_one_locked(m);
        if (e == 0 && !m->busy) {
            __atomic_store_n(&m->busy, 1, __ATOMIC_RELEASE);
            mprotect((void *)(uintptr_t)m->base, m->len, PROT_NONE);
        }
        m->dev_dirty = 1;
    }
    if (!d->used) {
        d->used = 1;
        d->lstream = ws;
        d->multi = 0;
    } else if (d->lstream != ws) {
        d->multi = 1;
    }
    vcu__m_unlock();
    return e;
}

int vcu__m_sync(int dev, uint64_t ws, int full)
{
    vcu__mdev_t *d = &vcu__mdev[dev];
    int e = 0, global;

    if (__atomic_load_n(&vcu__m_nshadow, __ATOMIC_ACQUIRE) == 0)
        return 0;
    vcu__m_lock();
    /* A wait on the one stream every use since the last full wait went
     * to covers the global regions too. */
    global = full || (d->used && !d->multi && d->lstream == ws);
    for (int i = 0; i < vcu__m_top && e == 0; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];
        int covered;

        if (m->base == 0 || !m->shadow || m->dev != dev || !m->busy)
            continue;
        switch (m->attach) {
        case VCU__M_ATTACH_GLOBAL:
            covered = global;
            break;
        case VCU__M_ATTACH_SINGLE:
            covered = full || m->astream == ws;
            break;
        default:                    /* host: only a copy that named it */
            covered = 1;
            break;
        }
        if (covered)
            e = vcu__m_refresh_one_locked(m);
    }
    if (global && e == 0)
        d->used = 0;
    vcu__m_unlock();
    return e;
}

int vcu__m_attach_to(uint64_t base, uint64_t ws, unsigned int flags)
{
    if (__atomic_load_n(&vcu__m_nmanaged, __ATOMIC_ACQUIRE) == 0)
        return 0;
    vcu__m_lock();
    for (int i = 0; i < vcu__m_top; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];

        if (m->base == 0 || base - m->base >= m->len)
            continue;
        m->attach = flags == VCU__M_ATTACH_HOST || flags == VCU__M_ATTACH_SINGLE
                        ? (int)flags : VCU__M_ATTACH_GLOBAL;
        m->astream = ws;
        break;
    }
    vcu__m_unlock();
    return 0;
}

/* ---- allocation --------------------------------------------------------- */

static void vcu__m_dev_free(int dev, uint64_t dptr)
{
    struct vcu_cu_u64_req f = { .value = dptr };

    vcu__m_ops.call(dev, VCU_OP_CU_MEM_FREE, &f, sizeof(f), NULL, 0, NULL, 0);
}

static int vcu__m_dev_alloc(int dev, uint64_t size, uint64_t *out)
{
    struct vcu_cu_mem_alloc_req r = { .size = size };
    struct vcu_cu_u64_resp o;
    int e;

    e = vcu__m_ops.call(dev, VCU_OP_CU_MEM_ALLOC, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == 0)
        *out = o.value;
    return e;
}

/* Zeroes [base, base + len) on the device, waited for: a new shadow is
 * zero and clean. */
static int vcu__m_zero_locked(int dev, uint64_t base, uint64_t len)
{
    struct vcu_cu_memset_req r;
    struct vcu_cu_u64_req s;
    int e;

    memset(&r, 0, sizeof(r));
    r.dst = base;
    r.width = len;
    r.height = 1;
    r.stream = vcu__mdev[dev].stream;
    r.elem_size = 1;
    r.flags = VCU_CU_MEMCPY_F_ASYNC;
    e = vcu__m_ops.call(dev, VCU_OP_CU_MEMSET, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != 0)
        return e;
    s.value = vcu__mdev[dev].stream;
    return vcu__m_ops.call(dev, VCU_OP_CU_STREAM_SYNCHRONIZE, &s, sizeof(s), NULL, 0, NULL, 0);
}

/* A free slot of vcu__mregs, or -1 (logged once). */
static int vcu__m_slot_locked(void)
{
    static int log_slots;
    int slot = -1;

    for (int i = 0; i < VCU__MAX_MANAGED && slot < 0; i++)
        if (vcu__mregs[i].base == 0)
            slot = i;
    if (slot < 0)
        vcu__log_once(&log_slots, "%s: more than %d managed allocations\n",
                      vcu__m_ops.name, VCU__MAX_MANAGED);
    return slot;
}

/* Device memory for an allocation of size bytes (len: size in whole
 * pages): *dptr as allocated, *base where the allocation begins.  The
 * shadow (not loop) needs whole pages of its own: an allocation not on a
 * page boundary is made again one page larger, from the first page
 * boundary inside. */
static int vcu__m_dev_alloc_pages(int dev, size_t size, uint64_t len, int loop, uint64_t *dptr,
                                  uint64_t *base)
{
    uint64_t page = vcu__m_page();
    int e;

    e = vcu__m_dev_alloc(dev, loop ? size : len, dptr);
    if (e != 0)
        return e;
    *base = *dptr;
    if (!loop && (*dptr & (page - 1))) {
        vcu__m_dev_free(dev, *dptr);
        e = vcu__m_dev_alloc(dev, len + page, dptr);
        if (e != 0)
            return e;
        *base = (*dptr + page - 1) & ~(page - 1);
    }
    return 0;
}

/* The shadow of [base, base + len): this process's pages at the device
 * address, mapped read-only.  0; 1 when the address is taken here (the
 * process's own mappings are where the guest's kernel put them, the
 * device's where the host's driver did); or the ops' oom. */
static int vcu__m_shadow_map(uint64_t base, uint64_t len)
{
    void *p = mmap((void *)(uintptr_t)base, len, PROT_READ,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

    if (p == (void *)(uintptr_t)base)
        return 0;
    if (p != MAP_FAILED) {
        munmap(p, len);             /* a kernel before 4.17 took the address as a hint */
        return 1;
    }
    return errno == EEXIST ? 1 : vcu__m_ops.oom;
}

/*
 * Device memory with its shadow: an allocation whose address is taken in
 * this process is kept while the next is made (so that it comes out
 * elsewhere), up to VCU__M_TRIES times, and those kept are freed after.
 */
#define VCU__M_TRIES 8

static int vcu__m_dev_alloc_shadowed(int dev, size_t size, uint64_t len, uint64_t *dptr,
                                     uint64_t *base)
{
    static int log_map;
    uint64_t taken[VCU__M_TRIES];
    int ntaken = 0, e;

    for (;;) {
        e = vcu__m_dev_alloc_pages(dev, size, len, 0, dptr, base);
        if (e != 0)
            break;
        e = vcu__m_shadow_map(*base, len);
        if (e == 1 && ntaken < VCU__M_TRIES) {
            taken[ntaken++] = *dptr;
            continue;
        }
        if (e == 1) {
            vcu__log_once(&log_map, "%s: %d device addresses in a row are taken in this "
                                    "process (the last 0x%llx): no shadow\n",
                          vcu__m_ops.name, ntaken + 1, (unsigned long long)*base);
            e = vcu__m_ops.oom;
        }
        if (e != 0)
            vcu__m_dev_free(dev, *dptr);
        break;
    }
    while (ntaken > 0)
        vcu__m_dev_free(dev, taken[--ntaken]);
    return e;
}

/* Fills slot and makes it visible (base last, for the fault handler). */
static void vcu__m_publish_locked(int slot, int dev, size_t size, uint64_t dptr, uint64_t base,
                                  uint64_t len, int loop)
{
    vcu__mreg_t *m = &vcu__mregs[slot];

    m->size = size;
    m->dptr = dptr;
    /* Allocated host-attached, it is still taken as global: the device
     * reports concurrentManagedAccess 0, under which a kernel must not
     * touch such memory before it is attached to a stream, but a program
     * written for the GPU behind the device (which has it) may, and its
     * kernel's writes must not be lost.  An attachment the program makes
     * (vcu__m_attach_to) is honoured. */
    m->attach = VCU__M_ATTACH_GLOBAL;
    m->astream = 0;
    m->busy = 0;
    m->dev_dirty = 0;
    m->dev = dev;
    m->shadow = !loop;
    m->host_dirty = 0;
    m->adopted = 0;
    m->npieces = 0;
    __atomic_store_n(&m->len, len, __ATOMIC_RELAXED);
    __atomic_store_n(&m->base, base, __ATOMIC_RELEASE);
    if (slot >= vcu__m_top)
        __atomic_store_n(&vcu__m_top, slot + 1, __ATOMIC_RELEASE);
    __atomic_fetch_add(&vcu__m_nmanaged, 1, __ATOMIC_RELEASE);
    if (!loop)
        __atomic_fetch_add(&vcu__m_nshadow, 1, __ATOMIC_RELEASE);
}

static int vcu__m_alloc_locked(int dev, size_t size, unsigned int flags, void **out)
{
    static int log_sig;
    uint64_t page = vcu__m_page(), len, dptr = 0, base = 0;
    int loop = vcu__m_ops.loopback(), slot;
    int e;

    if (size > UINT64_MAX - 2 * page)
        return vcu__m_ops.oom;
    len = (size + page - 1) & ~(page - 1);
    slot = vcu__m_slot_locked();
    if (slot < 0)
        return vcu__m_ops.oom;
    if (!loop) {
        pthread_once(&vcu__m_sig_once, vcu__m_sig_install);
        if (!vcu__m_sig_ok) {
            vcu__log_once(&log_sig, "%s: cannot install the SIGSEGV handler\n",
                          vcu__m_ops.name);
            return vcu__m_ops.oom;
        }
    }
    e = vcu__m_stream_locked(dev);
    if (e == 0)
        e = loop ? vcu__m_dev_alloc_pages(dev, size, len, 1, &dptr, &base)
                 : vcu__m_dev_alloc_shadowed(dev, size, len, &dptr, &base);
    if (e != 0)
        return e;
    e = vcu__m_zero_locked(dev, base, loop ? size : len);
    if (e == 0 && vcu__m_ops.track != NULL && vcu__m_ops.track(dev, base, size, flags) != 0)
        e = vcu__m_ops.oom;
    if (e != 0) {
        if (!loop)
            munmap((void *)(uintptr_t)base, len);
        vcu__m_dev_free(dev, dptr);
        return e;
    }
    vcu__m_publish_locked(slot, dev, size, dptr, base, len, loop);
    *out = (void *)(uintptr_t)base;
    return 0;
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

void vcu__m_forget_dev(int dev)
{
    vcu__m_lock();
    for (int i = 0; i < vcu__m_top; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];

        if (m->base == 0 || m->dev != dev)
            continue;
        if (m->shadow)
            munmap((void *)(uintptr_t)m->base, m->len);
        vcu__m_drop_locked(m);
    }
    memset(&vcu__mdev[dev], 0, sizeof(vcu__mdev[dev]));
    vcu__m_unlock();
}


int vcu__m_alloc(int dev, size_t size, unsigned int flags, void **out)
{
    int e;

    vcu__m_lock();
    e = vcu__m_alloc_locked(dev, size, flags, out);
    vcu__m_unlock();
    return e;
}

/* Adds piece [off, off + len) to adopted region m and fills it from the
 * device (vcu__m_mu held): 0, -1 when m has no room, or an error. */
static int vcu__m_piece_locked(vcu__mreg_t *m, uint64_t off, uint64_t len, uint64_t owner)
{
    void *p = (void *)(uintptr_t)m->base;
    int e;

    for (unsigned int i = 0; i < m->npieces; i++) {
        if (m->piece[i].off == off && m->piece[i].len == len && m->piece[i].owner == owner)
            return 0;
        if (off < m->piece[i].off + m->piece[i].len && m->piece[i].off < off + len)
            return -1;              /* overlaps another allocation: not the driver's */
    }
    if (m->npieces == VCU__M_PIECES)
        return -1;
    if (!m->shadow) {
        m->piece[m->npieces].off = off;
        m->piece[m->npieces].owner = owner;
        m->piece[m->npieces++].len = len;
        return 0;
    }
    /* Writable for the copy (the driver pins the pages for writing),
     * then as the region's state says. */
    if (mprotect(p, m->len, PROT_READ | PROT_WRITE) != 0)
        return vcu__m_ops.unknown;
    e = vcu__m_xfer_range(m, 0, off, len);
    if (e == 0) {
        m->piece[m->npieces].off = off;
        m->piece[m->npieces].owner = owner;
        m->piece[m->npieces++].len = len;
    }
    mprotect(p, m->len, m->busy ? PROT_NONE
                        : __atomic_load_n(&m->host_dirty, __ATOMIC_ACQUIRE)
                            ? PROT_READ | PROT_WRITE : PROT_READ);
    return e;
}

int vcu__m_adopt(int dev, uint64_t base, uint64_t size, uint64_t owner)
{
    uint64_t page = vcu__m_page(), pbase, len;
    int loop = vcu__m_ops.loopback(), slot, e;
    vcu__mreg_t *m;

    if (base == 0 || size == 0 || owner == 0 || size > UINT64_MAX - 2 * page ||
        base > UINT64_MAX - size - 2 * page)
        return -1;
    pbase = base & ~(page - 1);
    len = (base + size - pbase + page - 1) & ~(page - 1);
    vcu__m_lock();
    for (int i = 0; i < vcu__m_top; i++) {
        m = &vcu__mregs[i];
        if (m->base == 0 || !(pbase < m->base + m->len && m->base < pbase + len))
            continue;
        /* Another global in pages already adopted (the driver packs
         * managed globals in shared pages, those of several modules too);
         * in the way of memory of this layer's own, or reaching past those
         * pages: none. */
        e = m->adopted && m->dev == dev && pbase >= m->base && pbase + len <= m->base + m->len
                ? vcu__m_piece_locked(m, base - m->base, size, owner)
                : -1;
        vcu__m_unlock();
        return e;
    }
    slot = vcu__m_slot_locked();
    e = slot < 0 ? vcu__m_ops.oom : 0;
    if (e == 0 && !loop) {
        pthread_once(&vcu__m_sig_once, vcu__m_sig_install);
        e = vcu__m_sig_ok ? vcu__m_stream_locked(dev) : vcu__m_ops.oom;
        if (e == 0)
            e = vcu__m_shadow_map(pbase, len);
    }
    if (e != 0) {
        vcu__m_unlock();
        return e == 1 ? -1 : e;
    }
    /* Its pages, with no piece yet (nothing to copy), then the piece. */
    vcu__m_publish_locked(slot, dev, len, pbase, pbase, len, loop);
    m = &vcu__mregs[slot];
    m->adopted = 1;
    e = vcu__m_piece_locked(m, base - pbase, size, owner);
    if (e != 0) {
        vcu__m_drop_locked(m);
        if (!loop)
            munmap((void *)(uintptr_t)pbase, len);
    }
    vcu__m_unlock();
    return e;
}

void vcu__m_drop_owner(uint64_t owner)
{
    if (owner == 0 || __atomic_load_n(&vcu__m_nmanaged, __ATOMIC_ACQUIRE) == 0)
        return;
    vcu__m_lock();
    for (int i = 0; i < vcu__m_top; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];
        unsigned int k = 0;

        if (m->base == 0 || !m->adopted)
            continue;
        /* Its pieces go; the view, with the last of them. */
        for (unsigned int j = 0; j < m->npieces; j++)
            if (m->piece[j].owner != owner)
                m->piece[k++] = m->piece[j];
        m->npieces = k;
        if (k > 0)
            continue;
        vcu__m_drop_locked(m);
        if (m->shadow)
            munmap((void *)(uintptr_t)m->base, m->len);
    }
    vcu__m_unlock();
}

int vcu__m_release(uint64_t base, int *dev, uint64_t *dptr)
{
    vcu__mreg_t *m = NULL;

    vcu__m_lock();
    for (int i = 0; i < vcu__m_top && m == NULL; i++)
        if (vcu__mregs[i].base == base && base != 0 && !vcu__mregs[i].adopted)
            m = &vcu__mregs[i];
    if (m == NULL) {
        vcu__m_unlock();
        return -1;
    }
    *dev = m->dev;
    *dptr = m->dptr;
    vcu__m_drop_locked(m);
    if (m->shadow)
        munmap((void *)(uintptr_t)base, m->len);
    vcu__m_unlock();
    return 0;
}

int vcu__m_find(uint64_t p, uint64_t *base, uint64_t *size, int *dev)
{
    int found = 0;

    if (__atomic_load_n(&vcu__m_nmanaged, __ATOMIC_ACQUIRE) == 0)
        return 0;
    vcu__m_lock();
    for (int i = 0; i < vcu__m_top && !found; i++) {
        vcu__mreg_t *m = &vcu__mregs[i];

        if (m->base == 0 || p < m->base || p - m->base >= m->size)
            continue;
        /* In an adopted region, the driver's allocation holding it. */
        for (unsigned int k = 0; k < m->npieces && !found; k++)
            if (p - m->base - m->piece[k].off < m->piece[k].len) {
                found = 1;
                *base = m->base + m->piece[k].off;
                *size = m->piece[k].len;
                *dev = m->dev;
            }
        if (m->npieces > 0)
            break;
        found = 1;
        *base = m->base;
        *size = m->size;
        *dev = m->dev;
    }
    vcu__m_unlock();
    return found;
}

int vcu__m_any(void)
{
    return __atomic_load_n(&vcu__m_nmanaged, __ATOMIC_ACQUIRE) != 0;
}

int vcu__m_flush_one(uint64_t base)
{
    int e = 0;

    if (__atomic_load_n(&vcu__m_nshadow, __ATOMIC_ACQUIRE) == 0)
        return 0;
    vcu__m_lock();
    for (int i = 0; i < vcu__m_top; i++)
        if (vcu__mregs[i].base == base && vcu__mregs[i].shadow) {
            e = vcu__m_flush_one_locked(&vcu__mregs[i]);
            break;
        }
    vcu__m_unlock();
    return e;
}
