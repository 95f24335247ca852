/*
 * The VM's memory account: one small shared-memory area per VM, made by
 * the host daemon when the VM's device connects and mapped by every
 * worker process it starts for the VM, so that the VM's quotas hold
 * across all of its guest processes at once: GPU memory per device
 * (mem-quota) and host memory (the daemon's --host-mem-quota).
 * docs/design.md, "Memory quota".
 *
 * Layout: a header (the quota, for reporting; the admission lock; the
 * count of sessions ended by a GPU fault) and one slot per session:
 * the guest's session id and the worker's pid (written by the daemon),
 * then per virtual device the GPU bytes charged to the session, its
 * CUDA contexts' own memory included, and of those the contexts' part
 * (for reports); then the host memory charged to it (its budget taken,
 * its staging buffers, its aliases of guest memory).  All of a slot's
 * figures are written by that session's worker alone.
 *
 * Who is trusted: the daemon.  A worker is host code but runs what its
 * guest sends, so the daemon reads nothing of the area but to report, and
 * never for its own decisions: slots are handed out from a table private
 * to the daemon; the quotas a worker enforces come from the VM's policy
 * page (vcu_link.h), which the daemon alone writes, not from the area;
 * and a session's charges come back by the daemon zeroing its slot once
 * the worker has been reaped (its process is gone, and the driver has
 * freed every byte it held).  So a worker that dies at any instruction
 * leaves nothing behind: what it had charged is exactly what its slot
 * says, since it is the slot's only writer.
 *
 * Admission: with a quota, a charge takes the area's lock (a word holding
 * the holder's slot + 1), sums the column it charges (a device's, or the
 * host's) over every slot, adds to its own slot if the sum stays within
 * the quota, and lets go.  Releases only lower the worker's own slot and
 * need no lock.  A holder that dies with the lock has it broken by the
 * daemon once it is reaped; until then others wait (bounded:
 * VCU__ACCT_LOCK_NS, then the charge fails as out of memory).  The sum is
 * over a few hundred words at most, against a cuMemAlloc that takes tens
 * of microseconds.  Why not a VM-wide total updated by compare-and-swap: a
 * worker killed between its add to the total and its add to its own slot
 * would leave the total wrong for good, and the daemon would have to
 * trust a slot's figure to correct it.
 *
 * All inline: QEMU maps the area read-only for its reports
 * (proxy_link.c), the worker and the daemon link it themselves.
 */
#ifndef VCU_ACCOUNT_H
#define VCU_ACCOUNT_H

#include <errno.h>
#include <fcntl.h>
#include <linux/memfd.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "vcu_link.h"
#include "vcu_proto.h"

/* File seals (fcntl(2)); glibc names them only under _GNU_SOURCE. */
#ifndef F_ADD_SEALS
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#endif
/* Sealed on every shared area a reader maps: nobody who holds its fd (a
 * worker holds the account's, writable) can shrink it under a reader's
 * mapping, which would kill the reader (SIGBUS) on its next load. */
#define VCU_ACCT_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

/* Whether fd is a memfd sealed so (VCU_ACCT_SEALS). */
static inline int vcu__acct_sealed(int fd)
{
    int seals = fcntl(fd, F_GET_SEALS);

    return seals >= 0 && (seals & VCU_ACCT_SEALS) == VCU_ACCT_SEALS;
}

#define VCU_ACCT_MAGIC 0x31746363612d7576ull    /* "vu-acct1" */
#define VCU_ACCT_DEVS VCU_CU_MAX_DEVICES
#define VCU_ACCT_F_FAULT 1u                     /* slot flags: a sticky GPU fault */
/* How long a charge waits for the admission lock before it fails. */
#define VCU__ACCT_LOCK_NS (2ull * 1000 * 1000 * 1000)

struct vcu_acct_slot {
    _Atomic uint64_t session;       /* the guest's session id; 0: free (daemon) */
    _Atomic uint32_t pid;           /* the worker's (daemon) */
    _Atomic uint32_t flags;         /* VCU_ACCT_F_* (worker) */
    _Atomic uint64_t charged[VCU_ACCT_DEVS];    /* GPU bytes charged, contexts included (worker) */
    _Atomic uint64_t ctx[VCU_ACCT_DEVS];        /* of which its contexts' own (worker) */
    _Atomic uint64_t host;          /* host bytes charged (worker) */
};

struct vcu_acct_hdr {
    uint64_t magic;
    uint64_t quota;                 /* bytes per device; 0: none (reporting only) */
    uint32_t nslots;
    _Atomic uint32_t lock;          /* admission: 0, or the holder's slot + 1 */
    _Atomic uint64_t faults;        /* sessions ended by a GPU fault (proxy) */
    uint64_t reserved[4];
};

_Static_assert(sizeof(struct vcu_acct_slot) == 24 + 16 * VCU_ACCT_DEVS, "vcu_acct_slot");
_Static_assert(sizeof(struct vcu_acct_hdr) == 64, "vcu_acct_hdr");

/* One process's view of the area. */
typedef struct vcu_account_s {
    struct vcu_acct_hdr *hdr;
    struct vcu_acct_slot *slot;
    size_t len;
    int fd;                         /* the memfd, for spawning (proxy); -1 in a worker */
    uint64_t quota;                 /* what this process enforces, unless policy */
    uint64_t host_quota;            /* likewise, host memory; 0: none */
    /* The VM's policy page (vcu_link.h), kept by the daemon: its quotas
     * are the ones enforced, as they are now.  NULL: quota, host_quota. */
    const struct vcu_policy *policy;
    uint32_t nslots;
    _Atomic unsigned int refs;
    /* The proxy's own record of which slots are handed out (never read
     * from the shared area); mu protects it: the submitting thread
     * claims, readers and reaper threads release. */
    pthread_mutex_t mu;
    unsigned char *busy;
    /* Under mu too: each handed-out slot's session id and worker pid as
     * the proxy wrote them, so that reports name sessions from the
     * proxy's own memory, not from what a worker may have overwritten. */
    uint64_t *own_session;
    uint32_t *own_pid;
} vcu_account_t;

/* One handed-out slot as the proxy reports it (vcu__acct_report()). */
struct vcu__acct_seen {
    uint64_t session;               /* the proxy's record */
    uint32_t pid;                   /* the proxy's record: the worker's host pid; 0 before spawn */
    uint32_t fault;                 /* 1: the worker flagged a GPU fault */
    uint64_t charged[VCU_ACCT_DEVS];    /* as the worker wrote them: not trusted */
    uint64_t ctx[VCU_ACCT_DEVS];
    uint64_t host;
};

static inline size_t vcu__acct_len(uint32_t nslots)
{
    return sizeof(struct vcu_acct_hdr) + (size_t)nslots * sizeof(struct vcu_acct_slot);
}

static inline vcu_account_t *vcu__acct_alloc(void)
{
    vcu_account_t *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->fd = -1;
    atomic_init(&a->refs, 1);
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

/* The proxy's: a new area of nslots slots.  0 or VCU_E*. */
static inline int vcu__acct_new(uint64_t quota, uint32_t nslots, vcu_account_t **out)
{
    vcu_account_t *a;
    void *p;

    *out = NULL;
    if (nslots == 0)
        return VCU_EINVAL;
    a = vcu__acct_alloc();
    if (a == NULL)
        return VCU_ENOMEM;
    a->len = vcu__acct_len(nslots);
    a->busy = calloc(nslots, 1);
    a->own_session = calloc(nslots, sizeof(*a->own_session));
    a->own_pid = calloc(nslots, sizeof(*a->own_pid));
    /* The syscall itself: memfd_create() needs _GNU_SOURCE before every
     * header of the file that includes this one. */
    a->fd = (int)syscall(SYS_memfd_create, "vcu-account", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (a->busy == NULL || a->own_session == NULL || a->own_pid == NULL || a->fd < 0 ||
        ftruncate(a->fd, (off_t)a->len) != 0 ||
        fcntl(a->fd, F_ADD_SEALS, VCU_ACCT_SEALS | F_SEAL_SEAL) != 0)
        goto fail;
    p = mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (p == MAP_FAILED)
        goto fail;
    a->hdr = p;
    a->slot = (struct vcu_acct_slot *)(a->hdr + 1);
    a->quota = quota;
    a->nslots = nslots;
    a->hdr->magic = VCU_ACCT_MAGIC;
    a->hdr->quota = quota;
    a->hdr->nslots = nslots;
    *out = a;
    return 0;

fail:
    if (a->fd >= 0)
        close(a->fd);
    free(a->busy);
    free(a->own_session);
    free(a->own_pid);
    pthread_mutex_destroy(&a->mu);
    free(a);
    return VCU_EIO;
}

/* A worker's: maps the proxy's area (fd is closed), enforcing quota.  The
 * slot count is what the file's size holds, whatever the header says. */
static inline int vcu__acct_map(int fd, uint64_t quota, vcu_account_t **out)
{
    vcu_account_t *a;
    struct stat st;
    void *p;

    *out = NULL;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)vcu__acct_len(1) ||
        (uint64_t)st.st_size > vcu__acct_len(1u << 20)) {
        close(fd);
        return VCU_EINVAL;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return VCU_EIO;
    a = vcu__acct_alloc();
    if (a == NULL) {
        munmap(p, (size_t)st.st_size);
        return VCU_ENOMEM;
    }
    a->hdr = p;
    a->slot = (struct vcu_acct_slot *)(a->hdr + 1);
    a->len = (size_t)st.st_size;
    a->nslots = (uint32_t)((a->len - sizeof(struct vcu_acct_hdr)) / sizeof(struct vcu_acct_slot));
    a->quota = quota;
    *out = a;
    return 0;
}

/* QEMU's: the daemon's area, read-only (fd is closed), for reports. */
static inline int vcu__acct_map_ro(int fd, vcu_account_t **out)
{
    vcu_account_t *a;
    struct stat st;
    void *p;

    *out = NULL;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)vcu__acct_len(1) ||
        (uint64_t)st.st_size > vcu__acct_len(1u << 20) ||
        !vcu__acct_sealed(fd)) {
        close(fd);
        return VCU_EINVAL;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return VCU_EIO;
    a = vcu__acct_alloc();
    if (a == NULL) {
        munmap(p, (size_t)st.st_size);
        return VCU_ENOMEM;
    }
    a->hdr = p;
    a->slot = (struct vcu_acct_slot *)(a->hdr + 1);
    a->len = (size_t)st.st_size;
    a->nslots = (uint32_t)((a->len - sizeof(struct vcu_acct_hdr)) / sizeof(struct vcu_acct_slot));
    *out = a;
    return 0;
}

static inline vcu_account_t *vcu__acct_get(vcu_account_t *a)
{
    atomic_fetch_add(&a->refs, 1);
    return a;
}

static inline void vcu__acct_put(vcu_account_t *a)
{
    if (a == NULL || atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    munmap(a->hdr, a->len);
    if (a->fd >= 0)
        close(a->fd);
    free(a->busy);
    free(a->own_session);
    free(a->own_pid);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* Trusted side: a free slot for a new session, zeroed, or -1 if none. */
static inline int vcu__acct_claim(vcu_account_t *a, uint64_t session)
{
    struct vcu_acct_slot *s;
    uint32_t i;
    unsigned int d;

    pthread_mutex_lock(&a->mu);
    for (i = 0; i < a->nslots && a->busy[i]; i++)
        ;
    if (i == a->nslots) {
        pthread_mutex_unlock(&a->mu);
        return -1;
    }
    a->busy[i] = 1;
    a->own_session[i] = session;
    a->own_pid[i] = 0;
    pthread_mutex_unlock(&a->mu);
    s = &a->slot[i];
    for (d = 0; d < VCU_ACCT_DEVS; d++) {
        atomic_store(&s->charged[d], 0);
        atomic_store(&s->ctx[d], 0);
    }
    atomic_store(&s->host, 0);
    atomic_store(&s->flags, 0);
    atomic_store(&s->pid, 0);
    atomic_store(&s->session, session);
    return (int)i;
}

static inline void vcu__acct_set_pid(vcu_account_t *a, int slot, uint32_t pid)
{
    if (slot < 0 || (uint32_t)slot >= a->nslots)
        return;
    atomic_store(&a->slot[slot].pid, pid);
    pthread_mutex_lock(&a->mu);
    if (a->own_pid != NULL)
        a->own_pid[slot] = pid;
    pthread_mutex_unlock(&a->mu);
}

/*
 * Trusted side, once the slot's worker is gone (reaped) or never ran:
 * its charges come back, a lock it died holding is broken, a fault it
 * reported is counted, and the slot is free again.
 */
static inline void vcu__acct_release(vcu_account_t *a, int slot)
{
    struct vcu_acct_slot *s;
    uint32_t mine = (uint32_t)slot + 1;
    unsigned int d;

    if (slot < 0 || (uint32_t)slot >= a->nslots)
        return;
    s = &a->slot[slot];
    if (atomic_load(&s->flags) & VCU_ACCT_F_FAULT)
        atomic_fetch_add(&a->hdr->faults, 1);
    for (d = 0; d < VCU_ACCT_DEVS; d++) {
        atomic_store(&s->charged[d], 0);
        atomic_store(&s->ctx[d], 0);
    }
    atomic_store(&s->host, 0);
    atomic_store(&s->flags, 0);
    atomic_store(&s->pid, 0);
    atomic_store(&s->session, 0);
    atomic_compare_exchange_strong(&a->hdr->lock, &mine, 0);
    pthread_mutex_lock(&a->mu);
    if (a->busy != NULL) {
        a->busy[slot] = 0;
        a->own_session[slot] = 0;
        a->own_pid[slot] = 0;
    }
    pthread_mutex_unlock(&a->mu);
}

/* Device dev's bytes charged to the whole VM, its workers' contexts
 * included (saturating: a figure a worker wrote is not trusted to be
 * small). */
static inline uint64_t vcu__acct_used(const vcu_account_t *a, uint32_t dev)
{
    uint64_t sum = 0, v;
    uint32_t i;

    if (dev >= VCU_ACCT_DEVS)
        return 0;
    for (i = 0; i < a->nslots; i++) {
        v = atomic_load(&a->slot[i].charged[dev]);
        sum = v > UINT64_MAX - sum ? UINT64_MAX : sum + v;
    }
    return sum;
}

/* Of vcu__acct_used(), what the workers' contexts take. */
static inline uint64_t vcu__acct_ctx(const vcu_account_t *a, uint32_t dev)
{
    uint64_t sum = 0, v;
    uint32_t i;

    if (dev >= VCU_ACCT_DEVS)
        return 0;
    for (i = 0; i < a->nslots; i++) {
        v = atomic_load(&a->slot[i].ctx[dev]);
        sum = v > UINT64_MAX - sum ? UINT64_MAX : sum + v;
    }
    return sum;
}

/* Host bytes charged to the whole VM (saturating). */
static inline uint64_t vcu__acct_host_used(const vcu_account_t *a)
{
    uint64_t sum = 0, v;
    uint32_t i;

    for (i = 0; i < a->nslots; i++) {
        v = atomic_load(&a->slot[i].host);
        sum = v > UINT64_MAX - sum ? UINT64_MAX : sum + v;
    }
    return sum;
}

/*
 * Trusted side, for reporting only: the slots handed out (the proxy's
 * own table says which, and names their session and worker), at most
 * cap of them into out, lowest slot first.  Returns how many are handed
 * out, which may be more than cap.  The figures are the worker's and
 * taken as they are (one load each, so each is a value the worker
 * stored, never a torn one); sums over them saturate.
 */
static inline uint32_t vcu__acct_report(vcu_account_t *a, struct vcu__acct_seen *out, uint32_t cap)
{
    uint32_t i, n = 0;
    unsigned int d;

    if (a->busy == NULL)
        return 0;
    pthread_mutex_lock(&a->mu);
    for (i = 0; i < a->nslots; i++) {
        const struct vcu_acct_slot *s = &a->slot[i];
        struct vcu__acct_seen *o;

        if (!a->busy[i])
            continue;
        if (n++ >= cap)
            continue;
        o = &out[n - 1];
        o->session = a->own_session[i];
        o->pid = a->own_pid[i];
        o->fault = (atomic_load(&s->flags) & VCU_ACCT_F_FAULT) != 0;
        for (d = 0; d < VCU_ACCT_DEVS; d++) {
            o->charged[d] = atomic_load(&s->charged[d]);
            o->ctx[d] = atomic_load(&s->ctx[d]);
        }
        o->host = atomic_load(&s->host);
    }
    pthread_mutex_unlock(&a->mu);
    return n;
}

static inline uint64_t vcu__acct_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The quota to enforce now: the daemon's policy page, else as given. */
static inline uint64_t vcu__acct_quota(const vcu_account_t *a)
{
    return a->policy != NULL ? atomic_load(&a->policy->mem_quota) : a->quota;
}

/* Likewise, for the VM's host memory. */
static inline uint64_t vcu__acct_host_quota(const vcu_account_t *a)
{
    return a->policy != NULL ? atomic_load(&a->policy->host_quota) : a->host_quota;
}

static inline void vcu__acct_set_policy(vcu_account_t *a, const struct vcu_policy *p)
{
    a->policy = p;
}

/* Worker side: the admission lock, for slot.  0, or -1 when another
 * holds it past VCU__ACCT_LOCK_NS. */
static inline int vcu__acct_lock(vcu_account_t *a, int slot)
{
    uint32_t mine = (uint32_t)slot + 1, free_ = 0;
    uint64_t t0 = 0;
    unsigned int spins = 0;

    while (!atomic_compare_exchange_weak(&a->hdr->lock, &free_, mine)) {
        free_ = 0;
        if (++spins < 64)
            continue;
        if (t0 == 0)
            t0 = vcu__acct_now_ns();
        else if (vcu__acct_now_ns() - t0 > VCU__ACCT_LOCK_NS)
            return -1;
        sched_yield();
    }
    return 0;
}

static inline void vcu__acct_unlock(vcu_account_t *a)
{
    atomic_store(&a->hdr->lock, 0);
}

/*
 * Worker side: charges n bytes of device dev to slot.  0, or -1 when the
 * VM's charges would pass the quota (or the lock stays held past
 * VCU__ACCT_LOCK_NS): nothing is charged then.
 */
static inline int vcu__acct_charge(vcu_account_t *a, int slot, uint32_t dev, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t quota = vcu__acct_quota(a);

    if (slot < 0 || (uint32_t)slot >= a->nslots || dev >= VCU_ACCT_DEVS)
        return -1;
    s = &a->slot[slot];
    if (n == 0)
        return 0;
    if (quota == 0) {
        atomic_fetch_add(&s->charged[dev], n);
        return 0;
    }
    if (n > quota || vcu__acct_lock(a, slot) != 0)
        return -1;
    if (vcu__acct_used(a, dev) > quota - n) {
        vcu__acct_unlock(a);
        return -1;
    }
    atomic_fetch_add(&s->charged[dev], n);
    vcu__acct_unlock(a);
    return 0;
}

/*
 * Worker side: charges n bytes of host memory to slot, against the VM's
 * host quota.  0, or -1 (nothing charged) as vcu__acct_charge().
 */
static inline int vcu__acct_host_charge(vcu_account_t *a, int slot, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t quota = vcu__acct_host_quota(a);

    if (slot < 0 || (uint32_t)slot >= a->nslots)
        return -1;
    s = &a->slot[slot];
    if (n == 0)
        return 0;
    if (quota == 0) {
        atomic_fetch_add(&s->host, n);
        return 0;
    }
    if (n > quota || vcu__acct_lock(a, slot) != 0)
        return -1;
    if (vcu__acct_host_used(a) > quota - n) {
        vcu__acct_unlock(a);
        return -1;
    }
    atomic_fetch_add(&s->host, n);
    vcu__acct_unlock(a);
    return 0;
}

/* Worker side: gives back n bytes of host memory (never below zero). */
static inline void vcu__acct_host_uncharge(vcu_account_t *a, int slot, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t cur;

    if (slot < 0 || (uint32_t)slot >= a->nslots || n == 0)
        return;
    s = &a->slot[slot];
    cur = atomic_load(&s->host);
    while (!atomic_compare_exchange_weak(&s->host, &cur, cur > n ? cur - n : 0))
        ;
}

/* Worker side: records n bytes already taken outside its control (a
 * memory pool that reserved more than it was asked for), without
 * admission.  0, or -1 if the VM is past its quota now. */
static inline int vcu__acct_add(vcu_account_t *a, int slot, uint32_t dev, uint64_t n)
{
    if (slot < 0 || (uint32_t)slot >= a->nslots || dev >= VCU_ACCT_DEVS)
        return -1;
    atomic_fetch_add(&a->slot[slot].charged[dev], n);
    uint64_t quota = vcu__acct_quota(a);

    return quota != 0 && vcu__acct_used(a, dev) > quota ? -1 : 0;
}

/* Worker side: gives back n bytes (never below zero). */
static inline void vcu__acct_uncharge(vcu_account_t *a, int slot, uint32_t dev, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t cur;

    if (slot < 0 || (uint32_t)slot >= a->nslots || dev >= VCU_ACCT_DEVS || n == 0)
        return;
    s = &a->slot[slot];
    cur = atomic_load(&s->charged[dev]);
    while (!atomic_compare_exchange_weak(&s->charged[dev], &cur, cur > n ? cur - n : 0))
        ;
}

/* Worker side: of what slot has charged on dev, bytes are its contexts'
 * (reported apart; the charge itself goes through vcu__acct_charge()). */
static inline void vcu__acct_set_ctx(vcu_account_t *a, int slot, uint32_t dev, uint64_t bytes)
{
    if (slot >= 0 && (uint32_t)slot < a->nslots && dev < VCU_ACCT_DEVS)
        atomic_store(&a->slot[slot].ctx[dev], bytes);
}

static inline void vcu__acct_fault(vcu_account_t *a, int slot)
{
    if (slot >= 0 && (uint32_t)slot < a->nslots)
        atomic_fetch_or(&a->slot[slot].flags, VCU_ACCT_F_FAULT);
}

#endif /* VCU_ACCOUNT_H */
