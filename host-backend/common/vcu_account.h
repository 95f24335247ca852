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
 * The code is vcu_account.c, which the daemon, the worker and QEMU (which
 * maps the area read-only for its reports, proxy_link.c) each link.
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
int vcu__acct_sealed(int fd);

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

/* The proxy's: a new area of nslots slots.  0 or VCU_E*. */
int vcu__acct_new(uint64_t quota, uint32_t nslots, vcu_account_t **out);

/* A worker's: maps the proxy's area (fd is closed), enforcing quota.  The
 * slot count is what the file's size holds, whatever the header says. */
int vcu__acct_map(int fd, uint64_t quota, vcu_account_t **out);

/* QEMU's: the daemon's area, read-only (fd is closed), for reports. */
int vcu__acct_map_ro(int fd, vcu_account_t **out);

/* Unmaps and frees a (NULL: nothing). */
void vcu__acct_put(vcu_account_t *a);

/* Trusted side: a free slot for a new session, zeroed, or -1 if none. */
int vcu__acct_claim(vcu_account_t *a, uint64_t session);

void vcu__acct_set_pid(vcu_account_t *a, int slot, uint32_t pid);

/*
 * Trusted side, once the slot's worker is gone (reaped) or never ran:
 * its charges come back, a lock it died holding is broken, a fault it
 * reported is counted, and the slot is free again.
 */
void vcu__acct_release(vcu_account_t *a, int slot);

/* Device dev's bytes charged to the whole VM, its workers' contexts
 * included (saturating: a figure a worker wrote is not trusted to be
 * small). */
uint64_t vcu__acct_used(const vcu_account_t *a, uint32_t dev);

/* Of vcu__acct_used(), what the workers' contexts take. */
uint64_t vcu__acct_ctx(const vcu_account_t *a, uint32_t dev);

/* Host bytes charged to the whole VM (saturating). */
uint64_t vcu__acct_host_used(const vcu_account_t *a);

/*
 * Trusted side, for reporting only: the slots handed out (the proxy's
 * own table says which, and names their session and worker), at most
 * cap of them into out, lowest slot first.  Returns how many are handed
 * out, which may be more than cap.  The figures are the worker's and
 * taken as they are (one load each, so each is a value the worker
 * stored, never a torn one); sums over them saturate.
 */
uint32_t vcu__acct_report(vcu_account_t *a, struct vcu__acct_seen *out, uint32_t cap);

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

/*
 * Worker side: charges n bytes of device dev to slot.  0, or -1 when the
 * VM's charges would pass the quota (or the lock stays held past
 * VCU__ACCT_LOCK_NS): nothing is charged then.
 */
int vcu__acct_charge(vcu_account_t *a, int slot, uint32_t dev, uint64_t n);

/*
 * Worker side: charges n bytes of host memory to slot, against the VM's
 * host quota.  0, or -1 (nothing charged) as vcu__acct_charge().
 */
int vcu__acct_host_charge(vcu_account_t *a, int slot, uint64_t n);

/* Worker side: gives back n bytes of host memory (never below zero). */
void vcu__acct_host_uncharge(vcu_account_t *a, int slot, uint64_t n);

/* Worker side: records n bytes already taken outside its control (a
 * memory pool that reserved more than it was asked for), without
 * admission.  0, or -1 if the VM is past its quota now. */
int vcu__acct_add(vcu_account_t *a, int slot, uint32_t dev, uint64_t n);

/* Worker side: gives back n bytes (never below zero). */
void vcu__acct_uncharge(vcu_account_t *a, int slot, uint32_t dev, uint64_t n);

/* Worker side: of what slot has charged on dev, bytes are its contexts'
 * (reported apart; the charge itself goes through vcu__acct_charge()). */
void vcu__acct_set_ctx(vcu_account_t *a, int slot, uint32_t dev, uint64_t bytes);

void vcu__acct_fault(vcu_account_t *a, int slot);

#endif /* VCU_ACCOUNT_H */
