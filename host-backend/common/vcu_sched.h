/*
 * Compute share between VMs: a host-wide grant of the GPU, one VM at a
 * time, in slices, to the active VM with the least GPU time per weight.
 * docs/design.md, "Compute share".
 *
 * The rendezvous is a small shared file (the devices' share-group=PATH,
 * under /dev/shm), mapped by every QEMU proxy of the group and every
 * worker they spawn.  Layout: a header (the area's lock, the grant, the
 * current slice's times, the group's virtual clock), one slot per VM
 * (claimed by its QEMU proxy: its pid, weight and cap; then its GPU time,
 * virtual time and cap budget, written under the lock by whoever charges
 * it) and one slot per worker (claimed by the worker itself: its pid, its
 * VM, and two flags it alone writes: want, it has GPU work to issue or
 * running; busy, it issued GPU work under its VM's grant that has not
 * been seen drained).
 *
 * The grant is one word: the holding VM's slot + 1, with
 * VCU_SCHED_REVOKING set once it must stop.  A worker may issue GPU work
 * while the word is exactly its VM's slot + 1: one atomic load
 * (vcu__sched_issue()).  Decisions (grant, revoke, renew, charge) are
 * made by vcu__sched_step(), under the area's lock, by whichever party
 * runs it: a waiting worker, a draining one, a capped holder at its
 * deadline.  A VM with one active worker set and nobody else wanting is
 * never revoked: no switching, no draining, no lock on the launch path.
 *
 * Exclusivity (Dekker): a worker sets busy before it loads the grant; the
 * step moves the grant on only after it has seen every busy flag of the
 * holder's workers clear, so no worker issues under a grant already
 * revoked and then lets it pass undrained.
 *
 * Who is trusted: nobody more than the others.  Every party (QEMU
 * proxies of several VMs, their workers) maps the area writable; a worker
 * runs guest-driven work but is host code: it is assumed honest but may
 * die at any instruction, and the area may hold anything (a crashed or
 * confused party, a stale file).  So every reader bounds every index,
 * clamps every weight and cap, saturates every sum; liveness is decided
 * from pids (kill(pid, 0)), never from a party's own word; and every wait
 * is bounded by the reader's own clock: the lock is broken when its
 * holder is dead or held past VCU__SCHED_LOCK_NS, a revoked grant moves
 * on after VCU__SCHED_DRAIN_NS whatever its workers say, and a VM whose
 * QEMU is gone loses the grant at the next step.  A fully compromised
 * worker has the GPU itself (it can call the driver without asking):
 * nothing here tries to hold it, as vcu_account.h for memory.
 *
 * All inline: QEMU links proxy*.c alone, the worker worker_setup.c and
 * backend_worker.c; the unit tests drive it with a simulated clock and pids.
 */
#ifndef VCU_SCHED_H
#define VCU_SCHED_H

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define VCU_SCHED_MAGIC 0x31646863732d7576ull    /* "vu-schd1" */
#define VCU_SCHED_VMS 64u
#define VCU_SCHED_WORKERS 1024u
#define VCU_SCHED_REVOKING 0x80000000u
#define VCU_SCHED_WEIGHT_MAX 10000u
/* The group a device joins when it names none. */
#define VCU_SCHED_DEFAULT_GROUP "/dev/shm/virtio-cuda-share"
/* A slice: long against a switch (a drain, about 0.1 ms of idle GPU),
 * short against what a user notices. */
#define VCU_SCHED_SLICE_NS (20ull * 1000 * 1000)
/* Virtual time: ns of contended GPU time * this / weight. */
#define VCU__SCHED_WSCALE 64ull
/* How long a revoked holder's workers may take to drain (a kernel longer
 * than a slice is waited for, and charged); past it the grant moves on. */
#define VCU__SCHED_DRAIN_NS (2ull * 1000 * 1000 * 1000)
/* A lock held longer than this (by the breaker's clock) is broken: every
 * section under it is a few hundred loads. */
#define VCU__SCHED_LOCK_NS (50ull * 1000 * 1000)
/* How often a waiting, draining or capped worker looks at the area. */
#define VCU__SCHED_TICK_NS (100ull * 1000)
/* A capped VM's budget: accrues at cap% of wall time, up to this; it is
 * granted only with a slice's worth of it (shorter slices would spend a
 * larger part of each on the switch). */
#define VCU__SCHED_BURST_NS (2ull * VCU_SCHED_SLICE_NS)
/* A worker idle this long clears want (its VM has nothing to run) and
 * drains what it issued: not at every idle instant, which a program that
 * synchronizes after each kernel has between every two. */
#define VCU__SCHED_IDLE_NS (1000ull * 1000)
/* The most one charge counts (garbage times cannot overflow a sum). */
#define VCU__SCHED_CHARGE_MAX (1ull << 50)

struct vcu_sched_hdr {
    uint64_t magic;
    uint32_t nvms;                  /* informative: the file's size decides */
    uint32_t nworkers;
    _Atomic uint32_t lock;          /* 0, or the holder's pid */
    _Atomic uint32_t grant;         /* 0, or VM slot + 1 | VCU_SCHED_REVOKING */
    _Atomic uint64_t gen;           /* grants made */
    _Atomic uint64_t start_ns;      /* the grant's start (CLOCK_MONOTONIC) */
    _Atomic uint64_t first_ns;      /* its first issue (charges start there); 0: none */
    _Atomic uint64_t deadline_ns;   /* when it may be revoked or renewed */
    _Atomic uint64_t contended_ns;  /* since when another VM wants; 0: none */
    _Atomic uint64_t revoke_ns;     /* when it was revoked */
    _Atomic uint64_t vclock;        /* virtual time of the last grant */
    uint64_t reserved[6];
};

struct vcu_sched_vm {
    _Atomic uint32_t pid;           /* its QEMU; 0: free */
    _Atomic uint32_t weight;        /* compute-share */
    _Atomic uint32_t cap;           /* compute-cap, percent; 0 or 100: none */
    uint32_t reserved0;
    _Atomic uint64_t vtime;
    _Atomic uint64_t used_ns;       /* GPU time charged since claimed */
    _Atomic int64_t tokens;         /* cap budget, ns */
    _Atomic uint64_t refill_ns;
    _Atomic uint64_t charged_until; /* end of the last charge */
    _Atomic uint64_t grants;
};

struct vcu_sched_worker {
    _Atomic uint32_t pid;           /* 0: free */
    _Atomic uint32_t vm;            /* its VM's slot */
    _Atomic uint32_t want;          /* (worker) GPU work to issue or running */
    _Atomic uint32_t busy;          /* (worker) issued under the grant, not drained */
    _Atomic uint64_t drained_ns;    /* (worker) when its last drain ended */
    uint64_t reserved;
};

_Static_assert(sizeof(struct vcu_sched_hdr) == 128, "vcu_sched_hdr");
_Static_assert(sizeof(struct vcu_sched_vm) == 64, "vcu_sched_vm");
_Static_assert(sizeof(struct vcu_sched_worker) == 32, "vcu_sched_worker");

#define VCU_SCHED_LEN                                                              \
    (sizeof(struct vcu_sched_hdr) + VCU_SCHED_VMS * sizeof(struct vcu_sched_vm) + \
     VCU_SCHED_WORKERS * sizeof(struct vcu_sched_worker))

/* One process's view of the area. */
typedef struct vcu_sched_s {
    struct vcu_sched_hdr *hdr;
    struct vcu_sched_vm *vm;
    struct vcu_sched_worker *w;
    int vm_slot;                    /* this VM's; -1 before claimed */
    int w_slot;                     /* this worker's; -1 in the proxy */
    uint32_t pid;                   /* this process's (tests: any) */
    uint32_t mine;                  /* vm_slot + 1: the grant word that lets us issue */
    uint32_t cap;                   /* this VM's cap as its command line says */
    /* Where the VM's cap is kept up to date (the daemon's policy page, which
     * the worker maps read-only), or NULL: cap stays as given. */
    const _Atomic uint32_t *cap_src;
    int (*alive)(uint32_t pid);     /* whether a pid lives (tests: simulated) */
    uint64_t (*clock)(void);        /* for the lock's bound (tests: simulated) */
    /* The worker's own record of its flags (its thread alone). */
    bool want, busy, issued;
    uint64_t nissued;               /* issues so far (a drain covers those before it) */
    uint64_t deadline;              /* of the grant it issues under, as seen */
} vcu_sched_t;

static inline uint64_t vcu__sched_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A worker in its jail sees no other process: every party named in the
 * area counts as alive, and the daemon, which reaps them all, frees the
 * slots and the lock of those that die (vcu__sched_party_gone()). */
static inline int vcu__sched_party_named(uint32_t pid)
{
    return pid != 0;
}

static inline int vcu__sched_pid_alive(uint32_t pid)
{
    if (pid == 0 || pid > (uint32_t)INT32_MAX)
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* A view of an area already mapped at p (VCU_SCHED_LEN bytes). */
static inline void vcu__sched_view(vcu_sched_t *sc, void *p, uint32_t pid)
{
    memset(sc, 0, sizeof(*sc));
    sc->hdr = p;
    sc->vm = (struct vcu_sched_vm *)(sc->hdr + 1);
    sc->w = (struct vcu_sched_worker *)(sc->vm + VCU_SCHED_VMS);
    sc->vm_slot = -1;
    sc->w_slot = -1;
    sc->pid = pid;
    sc->alive = vcu__sched_pid_alive;
    sc->clock = vcu__sched_now;
}

/* A fresh area's header (the creator's, under flock, or a test's). */
static inline void vcu__sched_format(void *p)
{
    struct vcu_sched_hdr *h = p;

    memset(p, 0, VCU_SCHED_LEN);
    h->nvms = VCU_SCHED_VMS;
    h->nworkers = VCU_SCHED_WORKERS;
    atomic_thread_fence(memory_order_seq_cst);
    h->magic = VCU_SCHED_MAGIC;
}

/*
 * Opens (create: making it if missing, as the proxy does) and maps the
 * group's area at path.  Refused: a path not absolute, a link, not a
 * regular file, another user's, writable by others, the wrong size or
 * magic.  0, or -1 with a reason in err.  The caller frees with
 * vcu__sched_close().
 */
static inline int vcu__sched_open(const char *path, int create, vcu_sched_t **out, char *err,
                                  size_t errlen)
{
    vcu_sched_t *sc;
    struct stat st;
    void *p;
    int fd;

    *out = NULL;
    if (path == NULL || path[0] != '/') {
        snprintf(err, errlen, "share-group must be an absolute path");
        return -1;
    }
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    if (fd < 0) {
        snprintf(err, errlen, "share-group %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "share-group %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0022)) {
        snprintf(err, errlen, "share-group %s: not a regular file of ours, or writable by others",
                 path);
        goto fail;
    }
    if (st.st_size == 0 && create) {
        if (ftruncate(fd, (off_t)VCU_SCHED_LEN) != 0) {
            snprintf(err, errlen, "share-group %s: %s", path, strerror(errno));
            goto fail;
        }
        st.st_size = (off_t)VCU_SCHED_LEN;
        p = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "share-group %s: cannot map", path);
            goto fail;
        }
        vcu__sched_format(p);
    } else if ((uint64_t)st.st_size != VCU_SCHED_LEN) {
        snprintf(err, errlen, "share-group %s: not a share group (size)", path);
        goto fail;
    } else {
        p = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "share-group %s: cannot map", path);
            goto fail;
        }
        if (((struct vcu_sched_hdr *)p)->magic != VCU_SCHED_MAGIC) {
            munmap(p, VCU_SCHED_LEN);
            snprintf(err, errlen, "share-group %s: not a share group (magic)", path);
            goto fail;
        }
    }
    flock(fd, LOCK_UN);
    close(fd);
    sc = malloc(sizeof(*sc));
    if (sc == NULL) {
        munmap(p, VCU_SCHED_LEN);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    vcu__sched_view(sc, p, (uint32_t)getpid());
    *out = sc;
    return 0;

fail:
    close(fd);
    return -1;
}

/*
 * A worker's view of the daemon's group (fd, a memfd of VCU_SCHED_LEN
 * bytes; closed here), as party: the id the daemon gave it.  0 or -1
 * (err says why).
 */
static inline int vcu__sched_map_fd(int fd, uint32_t party, vcu_sched_t **out, char *err,
                                    size_t errlen)
{
    struct stat st;
    vcu_sched_t *sc;
    void *p;

    *out = NULL;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != VCU_SCHED_LEN || party == 0) {
        close(fd);
        snprintf(err, errlen, "the share group is not one (size, or no party id)");
        return -1;
    }
    p = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED || ((struct vcu_sched_hdr *)p)->magic != VCU_SCHED_MAGIC) {
        if (p != MAP_FAILED)
            munmap(p, VCU_SCHED_LEN);
        snprintf(err, errlen, "the share group cannot be mapped, or is not one");
        return -1;
    }
    sc = malloc(sizeof(*sc));
    if (sc == NULL) {
        munmap(p, VCU_SCHED_LEN);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    vcu__sched_view(sc, p, party);
    sc->alive = vcu__sched_party_named;
    *out = sc;
    return 0;
}

static inline void vcu__sched_close(vcu_sched_t *sc)
{
    if (sc == NULL)
        return;
    munmap(sc->hdr, VCU_SCHED_LEN);
    free(sc);
}

/* ---- the lock ------------------------------------------------------------ */

static inline void vcu__sched_lock(vcu_sched_t *sc)
{
    uint32_t cur = 0, seen = 0;
    uint64_t since = 0;
    unsigned int spins = 0;

    while (!atomic_compare_exchange_weak(&sc->hdr->lock, &cur, sc->pid)) {
        if (cur == 0)
            continue;
        if (++spins < 64) {
            cur = 0;
            continue;
        }
        /* Held a while: a dead holder, or one past the bound, loses it. */
        if (cur != seen) {
            seen = cur;
            since = sc->clock();
        }
        if (!sc->alive(cur) || sc->clock() - since > VCU__SCHED_LOCK_NS) {
            if (atomic_compare_exchange_strong(&sc->hdr->lock, &cur, sc->pid))
                return;
        }
        cur = 0;
        sched_yield();
    }
}

static inline void vcu__sched_unlock(vcu_sched_t *sc)
{
    uint32_t me = sc->pid;

    atomic_compare_exchange_strong(&sc->hdr->lock, &me, 0);
}

/* ---- reading the area, distrusting it ------------------------------------- */

static inline uint32_t vcu__sched_weight(const struct vcu_sched_vm *v)
{
    uint32_t w = atomic_load(&v->weight);

    return w == 0 ? 1 : w > VCU_SCHED_WEIGHT_MAX ? VCU_SCHED_WEIGHT_MAX : w;
}

static inline uint32_t vcu__sched_cap(const struct vcu_sched_vm *v)
{
    uint32_t c = atomic_load(&v->cap);

    return c >= 100 ? 0 : c;
}

static inline bool vcu__sched_vm_live(vcu_sched_t *sc, uint32_t i)
{
    uint32_t pid = atomic_load(&sc->vm[i].pid);

    return pid != 0 && sc->alive(pid);
}

/* Worker slot j, if it is a live worker of VM i. */
static inline bool vcu__sched_w_of(vcu_sched_t *sc, uint32_t j, uint32_t i)
{
    uint32_t pid = atomic_load(&sc->w[j].pid);

    return pid != 0 && atomic_load(&sc->w[j].vm) == i && sc->alive(pid);
}

/* Whether VM i has a live worker with want (or busy) set. */
static inline bool vcu__sched_any(vcu_sched_t *sc, uint32_t i, bool busy)
{
    uint32_t j;

    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(busy ? &sc->w[j].busy : &sc->w[j].want) == 0)
            continue;
        if (vcu__sched_w_of(sc, j, i))
            return true;
    }
    return false;
}

static inline void vcu__sched_refill(vcu_sched_t *sc, uint32_t i, uint64_t now)
{
    struct vcu_sched_vm *v = &sc->vm[i];
    uint32_t cap = vcu__sched_cap(v);
    uint64_t last = atomic_load(&v->refill_ns);
    int64_t t = atomic_load(&v->tokens), add;

    atomic_store(&v->refill_ns, now);
    if (cap == 0 || now <= last)
        return;
    add = (now - last > VCU__SCHED_BURST_NS * 100) ? (int64_t)VCU__SCHED_BURST_NS
                                                    : (int64_t)((now - last) * cap / 100);
    /* A debt is at most a slice and a drain (a garbage one is bounded
     * too: the VM waits seconds, not forever). */
    if (t < -(int64_t)(VCU__SCHED_DRAIN_NS + VCU__SCHED_BURST_NS))
        t = -(int64_t)(VCU__SCHED_DRAIN_NS + VCU__SCHED_BURST_NS);
    t += add;
    if (t > (int64_t)VCU__SCHED_BURST_NS)
        t = (int64_t)VCU__SCHED_BURST_NS;
    atomic_store(&v->tokens, t);
}

/* Whether VM i may be granted now: alive, wanting, within its cap. */
static inline bool vcu__sched_eligible(vcu_sched_t *sc, uint32_t i)
{
    if (!vcu__sched_vm_live(sc, i) || !vcu__sched_any(sc, i, false))
        return false;
    return vcu__sched_cap(&sc->vm[i]) == 0 ||
           atomic_load(&sc->vm[i].tokens) >= (int64_t)VCU_SCHED_SLICE_NS;
}

static inline uint64_t vcu__sched_add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/*
 * Charges VM i the GPU time from..to: all of it to its used time and cap
 * budget, the part since contention began to its virtual time.  A charge
 * never covers time already charged.
 */
static inline void vcu__sched_charge(vcu_sched_t *sc, uint32_t i, uint64_t from, uint64_t to)
{
    struct vcu_sched_vm *v = &sc->vm[i];
    uint64_t until = atomic_load(&v->charged_until), cont = atomic_load(&sc->hdr->contended_ns);
    uint64_t d, dv;

    if (from < until)
        from = until;
    if (to <= from)
        return;
    d = to - from;
    atomic_store(&v->charged_until, to);
    atomic_store(&v->used_ns, vcu__sched_add_sat(atomic_load(&v->used_ns), d));
    if (d > VCU__SCHED_CHARGE_MAX)
        d = VCU__SCHED_CHARGE_MAX;
    if (vcu__sched_cap(v) != 0)
        atomic_store(&v->tokens, atomic_load(&v->tokens) - (int64_t)d);
    if (cont != 0 && cont < to) {
        dv = to - (cont > from ? cont : from);
        if (dv > VCU__SCHED_CHARGE_MAX)
            dv = VCU__SCHED_CHARGE_MAX;
        atomic_store(&v->vtime, vcu__sched_add_sat(atomic_load(&v->vtime),
                                                   dv * VCU__SCHED_WSCALE / vcu__sched_weight(v)));
    }
}

/* Latest drain of VM i's workers within [lo, hi], else lo. */
static inline uint64_t vcu__sched_drain_end(vcu_sched_t *sc, uint32_t i, uint64_t lo, uint64_t hi)
{
    uint64_t end = lo, t;
    uint32_t j;

    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(&sc->w[j].pid) == 0 || atomic_load(&sc->w[j].vm) != i)
            continue;
        t = atomic_load(&sc->w[j].drained_ns);
        if (t > end && t <= hi)
            end = t;
    }
    return end;
}

/* Whether holder v, charged so far, still has no more virtual time than
 * any other eligible VM would start a slice with. */
static inline bool vcu__sched_least(vcu_sched_t *sc, uint32_t v, uint64_t vclock)
{
    uint64_t mine = atomic_load(&sc->vm[v].vtime), eff;
    uint32_t i;

    for (i = 0; i < VCU_SCHED_VMS; i++) {
        if (i == v || !vcu__sched_eligible(sc, i))
            continue;
        eff = atomic_load(&sc->vm[i].vtime);
        if (eff < vclock)
            eff = vclock;
        if (eff < mine)
            return false;
    }
    return true;
}

/*
 * The scheduler's one decision point, under the lock, at time now (any
 * party's CLOCK_MONOTONIC; tests simulate it).  Revokes a holder whose
 * slice is over while another VM wants (or at once if it has nothing to
 * run, or its cap is spent), renews a lone holder's slice, moves a revoked
 * grant on once its workers have drained (or past VCU__SCHED_DRAIN_NS),
 * and grants the GPU to the eligible VM with the least virtual time.
 */
static inline void vcu__sched_step_locked(vcu_sched_t *sc, uint64_t now)
{
    struct vcu_sched_hdr *h = sc->hdr;
    uint32_t g = atomic_load(&h->grant), hv = (g & ~VCU_SCHED_REVOKING), i, best = 0;
    uint64_t start = atomic_load(&h->start_ns), beff = 0, vclock = atomic_load(&h->vclock);
    uint64_t first = atomic_load(&h->first_ns), held_from;
    bool others = false;

    if (hv > VCU_SCHED_VMS) {       /* garbage: no grant */
        atomic_store(&h->grant, 0);
        g = hv = 0;
    }
    if (start > now)
        start = now;
    /* Charges run from the grant's first issue (the time until the
     * holder's workers woke up is nobody's).  A holder that wanted the GPU
     * and issued nothing held it all the same: from the grant (held is
     * held, whatever a worker says it wants). */
    if (first != 0 && (first < start || first > now))
        first = start;
    held_from = first != 0 ? first : start;
    if (first == 0)
        first = UINT64_MAX;
    for (i = 0; i < VCU_SCHED_VMS; i++)
        if (vcu__sched_cap(&sc->vm[i]) != 0)
            vcu__sched_refill(sc, i, now);
    if (hv != 0) {
        uint32_t v = hv - 1;

        for (i = 0; i < VCU_SCHED_VMS; i++)
            if (i != v && vcu__sched_eligible(sc, i))
                others = true;
        if (!vcu__sched_vm_live(sc, v)) {
            atomic_store(&h->grant, 0);     /* its QEMU is gone, its workers too */
            g = hv = 0;
        } else if (!(g & VCU_SCHED_REVOKING)) {
            bool wants = vcu__sched_any(sc, v, false), busy = vcu__sched_any(sc, v, true);
            uint32_t cap = vcu__sched_cap(&sc->vm[v]);
            uint64_t dl = atomic_load(&h->deadline_ns);
            bool spent = cap != 0 && first <= now &&
                         atomic_load(&sc->vm[v].tokens) - (int64_t)(now - first) <= 0;

            if (others && atomic_load(&h->contended_ns) == 0)
                atomic_store(&h->contended_ns, now);
            /* At its deadline a holder that would be chosen again anyway
             * (weight 75 against 25: three slices in a row) goes on,
             * charged so far, without a drain. */
            if (others && wants && !spent && now >= dl) {
                vcu__sched_charge(sc, v, held_from, now);
                if (vcu__sched_least(sc, v, vclock))
                    others = false;
            }
            if ((others && (now >= dl || !wants)) || spent) {
                g |= VCU_SCHED_REVOKING;
                atomic_store(&h->revoke_ns, now);
                atomic_store(&h->grant, g);
            } else if (!wants && !busy) {
                /* Idle and alone: let go, charging up to its last drain. */
                vcu__sched_charge(sc, v, first, vcu__sched_drain_end(sc, v, start, now));
                atomic_store(&h->grant, 0);
                g = hv = 0;
            } else if (now >= dl) {
                /* Alone (or still the least served): a new slice, no
                 * switch.  The time so far was held with work on the GPU. */
                int64_t tok;

                vcu__sched_charge(sc, v, held_from, now);
                tok = atomic_load(&sc->vm[v].tokens);
                atomic_store(&h->start_ns, now);
                atomic_store(&h->first_ns, first != UINT64_MAX ? now : 0);
                atomic_store(&h->deadline_ns,
                             now + (cap != 0 && tok < (int64_t)VCU_SCHED_SLICE_NS
                                        ? (uint64_t)(tok > 0 ? tok : 0)
                                        : VCU_SCHED_SLICE_NS));
            }
        }
        if (hv != 0 && (g & VCU_SCHED_REVOKING)) {
            uint64_t rv = atomic_load(&h->revoke_ns);

            if (rv > now || rv < start)
                rv = now;
            if (!vcu__sched_any(sc, v, true) || now - rv > VCU__SCHED_DRAIN_NS) {
                /* A holder that never drained is charged until now: it
                 * kept the others waiting that long. */
                uint64_t end = vcu__sched_any(sc, v, true) ? now
                                                           : vcu__sched_drain_end(sc, v, rv, now);

                vcu__sched_charge(sc, v, held_from, end);
                atomic_store(&h->grant, 0);
                g = hv = 0;
            }
        }
    }
    if (hv != 0)
        return;
    /* Nobody holds the grant: the eligible VM with the least virtual
     * time, a VM back from idle counting from the group's clock. */
    for (i = 0; i < VCU_SCHED_VMS; i++) {
        uint64_t eff;

        if (!vcu__sched_eligible(sc, i))
            continue;
        eff = atomic_load(&sc->vm[i].vtime);
        if (eff < vclock)
            eff = vclock;
        if (best == 0 || eff < beff) {
            if (best != 0)
                others = true;
            best = i + 1;
            beff = eff;
        } else {
            others = true;
        }
    }
    if (best == 0)
        return;
    {
        struct vcu_sched_vm *v = &sc->vm[best - 1];
        uint64_t slice = VCU_SCHED_SLICE_NS;

        if (vcu__sched_cap(v) != 0 && atomic_load(&v->tokens) < (int64_t)slice)
            slice = (uint64_t)atomic_load(&v->tokens);
        atomic_store(&v->vtime, beff);
        atomic_store(&v->grants, atomic_load(&v->grants) + 1);
        atomic_store(&h->vclock, beff);
        atomic_store(&h->gen, atomic_load(&h->gen) + 1);
        atomic_store(&h->start_ns, now);
        atomic_store(&h->first_ns, 0);
        atomic_store(&h->deadline_ns, now + slice);
        atomic_store(&h->contended_ns, others ? now : 0);
        atomic_store(&h->revoke_ns, 0);
        atomic_store(&h->grant, best);
    }
}

static inline void vcu__sched_step(vcu_sched_t *sc, uint64_t now)
{
    vcu__sched_lock(sc);
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
}

/* ---- the proxy's side ----------------------------------------------------- */

/*
 * Claims a VM slot for this device (a free one, or one whose QEMU is
 * gone), with its weight and cap (percent; 0: none).  0, or -1 if the
 * group is full.  Its virtual time starts at the group's clock, so a new
 * VM neither owes nor is owed anything.
 */
static inline int vcu__sched_vm_claim(vcu_sched_t *sc, uint32_t weight, uint32_t cap, uint64_t now)
{
    uint32_t i, pid;

    vcu__sched_lock(sc);
    for (i = 0; i < VCU_SCHED_VMS; i++) {
        pid = atomic_load(&sc->vm[i].pid);
        if (pid == 0 || !sc->alive(pid))
            break;
    }
    if (i == VCU_SCHED_VMS) {
        vcu__sched_unlock(sc);
        return -1;
    }
    if ((atomic_load(&sc->hdr->grant) & ~VCU_SCHED_REVOKING) == i + 1)
        atomic_store(&sc->hdr->grant, 0);
    memset((void *)&sc->vm[i], 0, sizeof(sc->vm[i]));
    atomic_store(&sc->vm[i].weight, weight);
    atomic_store(&sc->vm[i].cap, cap);
    atomic_store(&sc->vm[i].vtime, atomic_load(&sc->hdr->vclock));
    atomic_store(&sc->vm[i].tokens, (int64_t)VCU__SCHED_BURST_NS);
    atomic_store(&sc->vm[i].refill_ns, now);
    atomic_store(&sc->vm[i].pid, sc->pid);
    vcu__sched_unlock(sc);
    sc->vm_slot = (int)i;
    sc->mine = i + 1;
    sc->cap = cap >= 100 ? 0 : cap;
    return 0;
}

/* At the device's end: the slot is free, a grant it held moves on. */
static inline void vcu__sched_vm_release(vcu_sched_t *sc, uint64_t now)
{
    if (sc->vm_slot < 0)
        return;
    vcu__sched_lock(sc);
    atomic_store(&sc->vm[sc->vm_slot].pid, 0);
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
    sc->vm_slot = -1;
}

/*
 * The proxy, once it has reaped its worker pid: the worker's slot is
 * freed now, rather than when someone finds the pid dead (a pid used again
 * by then would keep the dead worker's flags alive).
 */
static inline void vcu__sched_worker_gone(vcu_sched_t *sc, uint32_t pid, uint64_t now)
{
    uint32_t j;

    if (sc->vm_slot < 0 || pid == 0)
        return;
    vcu__sched_lock(sc);
    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(&sc->w[j].pid) != pid || atomic_load(&sc->w[j].vm) != (uint32_t)sc->vm_slot)
            continue;
        atomic_store(&sc->w[j].want, 0);
        atomic_store(&sc->w[j].busy, 0);
        atomic_store(&sc->w[j].pid, 0);
    }
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
}

/*
 * The daemon, once it has reaped a worker (party: the id it gave it): the
 * worker's slot is freed and a lock it died holding is broken, whatever
 * its VM.
 */
static inline void vcu__sched_party_gone(vcu_sched_t *sc, uint32_t party, uint64_t now)
{
    uint32_t j, held = party;

    if (party == 0)
        return;
    atomic_compare_exchange_strong(&sc->hdr->lock, &held, 0);
    vcu__sched_lock(sc);
    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(&sc->w[j].pid) != party)
            continue;
        atomic_store(&sc->w[j].want, 0);
        atomic_store(&sc->w[j].busy, 0);
        atomic_store(&sc->w[j].pid, 0);
    }
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
}

/* What the proxy reports of its VM (taken as found: one load each). */
static inline void vcu__sched_vm_report(vcu_sched_t *sc, uint64_t *used_ns, uint64_t *all_ns,
                                        uint64_t *grants)
{
    uint64_t all = 0;
    uint32_t i;

    *used_ns = *grants = 0;
    for (i = 0; i < VCU_SCHED_VMS; i++) {
        if (atomic_load(&sc->vm[i].pid) == 0)
            continue;
        all = vcu__sched_add_sat(all, atomic_load(&sc->vm[i].used_ns));
    }
    if (sc->vm_slot >= 0) {
        *used_ns = atomic_load(&sc->vm[sc->vm_slot].used_ns);
        *grants = atomic_load(&sc->vm[sc->vm_slot].grants);
        /* A VM running alone is charged at its pauses: the slice it holds
         * now counts too. */
        if (atomic_load(&sc->hdr->grant) == sc->mine && atomic_load(&sc->hdr->first_ns) != 0) {
            uint64_t from = atomic_load(&sc->hdr->first_ns), now = sc->clock();
            uint64_t until = atomic_load(&sc->vm[sc->vm_slot].charged_until);

            if (until > from)
                from = until;
            if (now > from && now - from < VCU__SCHED_CHARGE_MAX) {
                *used_ns = vcu__sched_add_sat(*used_ns, now - from);
                all = vcu__sched_add_sat(all, now - from);
            }
        }
    }
    *all_ns = all;
}

/* ---- the worker's side ---------------------------------------------------- */

/*
 * Takes a worker slot for this process in VM vm_slot (its QEMU's, as the
 * command line says), with the cap it was given.  0, or -1 when the VM
 * slot is not its parent's or the group is full.
 */
static inline int vcu__sched_attach(vcu_sched_t *sc, uint32_t vm_slot, uint32_t parent,
                                    uint32_t cap)
{
    uint32_t j, pid;

    if (vm_slot >= VCU_SCHED_VMS)
        return -1;
    vcu__sched_lock(sc);
    if (parent != 0 ? atomic_load(&sc->vm[vm_slot].pid) != parent
                    : atomic_load(&sc->vm[vm_slot].pid) == 0) {
        vcu__sched_unlock(sc);
        return -1;
    }
    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        pid = atomic_load(&sc->w[j].pid);
        if (pid == 0 || pid == sc->pid || !sc->alive(pid))
            break;
    }
    if (j == VCU_SCHED_WORKERS) {
        vcu__sched_unlock(sc);
        return -1;
    }
    atomic_store(&sc->w[j].want, 0);
    atomic_store(&sc->w[j].busy, 0);
    atomic_store(&sc->w[j].drained_ns, 0);
    atomic_store(&sc->w[j].vm, vm_slot);
    atomic_store(&sc->w[j].pid, sc->pid);
    vcu__sched_unlock(sc);
    sc->vm_slot = (int)vm_slot;
    sc->w_slot = (int)j;
    sc->mine = vm_slot + 1;
    sc->cap = cap >= 100 ? 0 : cap;
    return 0;
}

static inline void vcu__sched_detach(vcu_sched_t *sc, uint64_t now)
{
    if (sc->w_slot < 0)
        return;
    vcu__sched_lock(sc);
    atomic_store(&sc->w[sc->w_slot].want, 0);
    atomic_store(&sc->w[sc->w_slot].busy, 0);
    atomic_store(&sc->w[sc->w_slot].pid, 0);
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
    sc->w_slot = -1;
}

static inline void vcu__sched_set_want(vcu_sched_t *sc, bool on)
{
    if (sc->want != on) {
        sc->want = on;
        atomic_store(&sc->w[sc->w_slot].want, on);
    }
}

/* A capped holder's own look at its deadline (nobody else revokes a
 * lone holder): at or past it, a step, which renews or revokes. */
static inline void vcu__sched_cap_check(vcu_sched_t *sc, uint64_t now)
{
    if (sc->cap_src != NULL) {
        uint32_t c = atomic_load(sc->cap_src);

        sc->cap = c >= 100 ? 0 : c;
    }
    if (sc->cap == 0 || !sc->issued || now < sc->deadline)
        return;
    vcu__sched_step(sc, now);
    sc->deadline = atomic_load(&sc->hdr->deadline_ns);
    if (sc->deadline <= now)
        sc->deadline = now + VCU__SCHED_TICK_NS;
}

/*
 * The launch path: whether this worker may issue GPU work now.  Busy is
 * set before the grant is read (see "Exclusivity" above); the cost once
 * busy is one load.  A capped worker also reads the clock (vDSO, no
 * syscall), for its deadline.
 */
static inline bool vcu__sched_issue(vcu_sched_t *sc)
{
    if (!sc->busy) {
        sc->busy = true;
        atomic_store(&sc->w[sc->w_slot].busy, 1);
    }
    vcu__sched_set_want(sc, true);
    if (atomic_load(&sc->hdr->grant) == sc->mine) {
        if (!sc->issued) {
            uint64_t none = 0;

            sc->issued = true;
            sc->deadline = atomic_load(&sc->hdr->deadline_ns);
            /* Busy is set: the grant cannot move on meanwhile. */
            atomic_compare_exchange_strong(&sc->hdr->first_ns, &none, sc->clock());
        }
        if (sc->cap != 0 || sc->cap_src != NULL) {
            vcu__sched_cap_check(sc, sc->clock());
            if (atomic_load(&sc->hdr->grant) != sc->mine)
                return false;
        }
        sc->nissued++;
        return true;
    }
    if (!sc->issued) {
        sc->busy = false;
        atomic_store(&sc->w[sc->w_slot].busy, 0);
    }
    return false;
}

/* Whether what this worker issued must be drained now: its VM's grant
 * was revoked (or has moved on). */
static inline bool vcu__sched_must_drain(const vcu_sched_t *sc)
{
    return sc->issued && atomic_load(&sc->hdr->grant) != sc->mine;
}

/* Its issued work has drained at now: busy clears, and the grant may move. */
static inline void vcu__sched_drained(vcu_sched_t *sc, uint64_t now)
{
    atomic_store(&sc->w[sc->w_slot].drained_ns, now);
    sc->issued = false;
    sc->busy = false;
    atomic_store(&sc->w[sc->w_slot].busy, 0);
    vcu__sched_step(sc, now);
}

#endif /* VCU_SCHED_H */
