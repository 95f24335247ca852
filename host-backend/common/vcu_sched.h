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
 * The code is vcu_sched.c, which QEMU, the daemon and the worker each
 * link; the launch path's calls (vcu__sched_issue() and what it calls)
 * stay inline here.  The unit tests drive it with a simulated clock and
 * pids.
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

/* A view of an area already mapped at p (VCU_SCHED_LEN bytes). */
void vcu__sched_view(vcu_sched_t *sc, void *p, uint32_t pid);

/* A fresh area's header (the creator's, under flock, or a test's). */
void vcu__sched_format(void *p);

/*
 * Opens (create: making it if missing, as the proxy does) and maps the
 * group's area at path.  Refused: a path not absolute, a link, not a
 * regular file, another user's, writable by others, the wrong size or
 * magic.  0, or -1 with a reason in err.  The caller frees with
 * vcu__sched_close().
 */
int vcu__sched_open(const char *path, int create, vcu_sched_t **out, char *err,
                    size_t errlen);

/*
 * A worker's view of the daemon's group (fd, a memfd of VCU_SCHED_LEN
 * bytes; closed here), as party: the id the daemon gave it.  0 or -1
 * (err says why).
 */
int vcu__sched_map_fd(int fd, uint32_t party, vcu_sched_t **out, char *err,
                      size_t errlen);

void vcu__sched_close(vcu_sched_t *sc);

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

void vcu__sched_step(vcu_sched_t *sc, uint64_t now);

/* ---- the proxy's side ----------------------------------------------------- */

/*
 * Claims a VM slot for this device (a free one, or one whose QEMU is
 * gone), with its weight and cap (percent; 0: none).  0, or -1 if the
 * group is full.  Its virtual time starts at the group's clock, so a new
 * VM neither owes nor is owed anything.
 */
int vcu__sched_vm_claim(vcu_sched_t *sc, uint32_t weight, uint32_t cap, uint64_t now);

/* At the device's end: the slot is free, a grant it held moves on. */
void vcu__sched_vm_release(vcu_sched_t *sc, uint64_t now);

/*
 * The proxy, once it has reaped its worker pid: the worker's slot is
 * freed now, rather than when someone finds the pid dead (a pid used again
 * by then would keep the dead worker's flags alive).
 */
void vcu__sched_worker_gone(vcu_sched_t *sc, uint32_t pid, uint64_t now);

/*
 * The daemon, once it has reaped a worker (party: the id it gave it): the
 * worker's slot is freed and a lock it died holding is broken, whatever
 * its VM.
 */
void vcu__sched_party_gone(vcu_sched_t *sc, uint32_t party, uint64_t now);

/* What the proxy reports of its VM (taken as found: one load each). */
void vcu__sched_vm_report(vcu_sched_t *sc, uint64_t *used_ns, uint64_t *all_ns,
                          uint64_t *grants);

/* ---- the worker's side ---------------------------------------------------- */

/*
 * Takes a worker slot for this process in VM vm_slot (its QEMU's, as the
 * command line says), with the cap it was given.  0, or -1 when the VM
 * slot is not its parent's or the group is full.
 */
int vcu__sched_attach(vcu_sched_t *sc, uint32_t vm_slot, uint32_t parent,
                      uint32_t cap);

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
void vcu__sched_drained(vcu_sched_t *sc, uint64_t now);

#endif /* VCU_SCHED_H */
