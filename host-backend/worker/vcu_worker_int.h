/*
 * vcu-worker's state and the parts of the process that share it:
 * worker.c (requests, the process's start and main loop), worker_reg.c
 * (registrations of stable ranges, aliases) and worker_link.c (the
 * socket, the shared rings, taking requests in, the watch thread).
 * Locks: worker.c's "Threads".  Each function is described where it is
 * defined.  Private names: vcu__.
 */
#ifndef VCU_WORKER_INT_H
#define VCU_WORKER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vcu_backend.h"
#include "vcu_ipc.h"
#include "vcu_ring.h"
#include "vcu_stage.h"

#define VCU__W_PAGE 4096ull
/* A job's own room for its request, reply and iovecs; free jobs kept:
 * as many as a virtqueue holds in flight, so that a stream of async
 * launches (all taken in before the first runs) allocates nothing. */
#define VCU__JOB_REQ_INLINE 512u
#define VCU__JOB_RESP_INLINE 512u
#define VCU__JOB_IOV_INLINE 16u
#define VCU__JOB_CACHE 1024u
/* How long the main thread may be away from the ring before the watch
 * thread takes it over, and how often that thread looks. */
#define VCU__W_WATCH_NS 2000000ull
#define VCU__W_WATCH_PERIOD_NS 1000000L
/* Looks at an idle main thread this many times, then sleeps until the
 * main thread leaves the ring again. */
#define VCU__W_WATCH_IDLE 100u
/* Staged copies scattered on threads of their own at once, at most. */
#define VCU__W_FINISHERS 4u
/* An isolated worker's MPS pipe directory: one that cannot exist, so
 * that the driver never makes it a client of a daemon running on the
 * host (under MPS a fault in one client ends the others' work). */
#define VCU__NO_MPS_PIPE "/dev/null/virtio-cuda-isolated"

typedef struct vcu__region_s {
    uint32_t id;
    int fd;                         /* kept open: aliases map it again */
    unsigned char *base;
    uint64_t size;
} vcu__region_t;

/* A registered, page-rounded range of one region; registrations are
 * disjoint, kept sorted by (region, off). */
typedef struct vcu__reg_s {
    uint32_t region;
    uint64_t off;
    uint64_t len;
} vcu__reg_t;

/*
 * An alias: the pages of a stable segment of several ranges (a pinned
 * allocation of several chunks) mapped again at consecutive addresses and
 * registered there, so that the whole allocation has one device pointer
 * (CU_HOST_DEVICE_POINTER).  Dropped like a registration, when a fence
 * releases any of its ranges.
 *
 * Each maps guest memory the worker has mapped already, but costs the
 * host page tables, the kernel's record of each mapping and the driver's
 * of the pages it pins: about VCU__ALIAS_COST(), charged to the VM's host
 * quota while the alias lives.  And a guest may ask for aliases of any
 * ranges it holds, overlapping or not: a session's are bounded in number
 * (VCU__ALIAS_MAX), in mappings (VCU__ALIAS_MAPS: the kernel allows a
 * process about 65530) and in bytes (the guest RAM the worker maps: the
 * aliases of distinct pinned allocations never add up to more).  Past a
 * bound the segment keeps one iovec per range, as when the ranges do not
 * join.
 */
typedef struct vcu__alias_s {
    struct vcu__alias_s *next;
    unsigned char *base;
    uint64_t len;
    uint64_t cost;                  /* charged to the VM's host quota */
    uint32_t nr;
    struct vcu_ipc_range r[];       /* page-rounded, in order */
} vcu__alias_t;

#define VCU__ALIAS_MAX 1024u
#define VCU__ALIAS_MAPS 16384u
/* Page tables and the driver's pinned-page records (8 bytes each per
 * 4 KiB page), and a page for each mapping's records. */
#define VCU__ALIAS_COST(len, nr) ((len) / 256 + (uint64_t)(nr) * VCU__W_PAGE)

typedef struct vcu__job_s {
    vcu_request_t breq;
    uint64_t tag;
    uint64_t seq;                   /* order taken in (vcu__w.next_seq) */
    bool scattering;                /* listed in vcu__w.scat */
    bool fence;
    /* A fence's released ranges, dropped from the registrations at its
     * reply: region, page-rounded offset and length. */
    struct vcu_ipc_range *released;
    uint32_t nreleased;
    vcu_segment_t segs[VCU_MAX_SEGS];
    vcu_stage_t stage;              /* a large pageable copy, staged */
    struct iovec *iov;
    unsigned char *req;
    unsigned char *resp;
    struct vcu__job_s *next;        /* in the cache */
    /* Small requests (most: launches, queries) need no allocation: their
     * bytes, reply and iovecs fit here; larger ones are malloc()ed. */
    _Alignas(8) unsigned char req_in[VCU__JOB_REQ_INLINE];
    _Alignas(8) unsigned char resp_in[VCU__JOB_RESP_INLINE];
    struct iovec iov_in[VCU__JOB_IOV_INLINE];
} vcu__job_t;

/* The process's one session (worker.c). */
struct vcu__w_s {
    int fd;
    vcu_backend_t *be;
    vcu__ring_t req;                /* rlock */
    vcu__ring_t resp;               /* under wlock */
    bool rings;
    uint64_t spin_ns;
    unsigned char *sbuf;            /* socket bytes not yet taken (main thread) */
    size_t scap, shave;
    pthread_mutex_t wlock;          /* writes to fd, the reply ring */
    pthread_mutex_t jlock;          /* jobs, njobs: the cache of free jobs */
    vcu__job_t *jobs;
    unsigned int njobs;
    pthread_mutex_t alock;          /* regs */
    /* The request ring and the socket's read side (req, sbuf, fdq,
     * regions): held by the main thread while it pumps, by the watch
     * thread while it stands in. */
    pthread_mutex_t rlock;
    /* When the main thread left the ring (CLOCK_MONOTONIC ns), 0 while
     * it pumps; want: it waits for rlock, the watch thread must let go. */
    _Atomic uint64_t away_since;
    _Atomic int want;
    /* Frames the watch thread took in: what it queued, the main thread
     * runs before it waits for the ring again. */
    _Atomic uint64_t watch_took;
    uint64_t watch_seen;            /* main thread: watch_took when it last pumped */
    pthread_mutex_t watch_mu;       /* watch_parked, with watch_cv */
    pthread_cond_t watch_cv;
    _Atomic int watch_parked;
    _Atomic unsigned int finishers; /* vcu__job_finish_thread()s running */
    /* Requests are numbered as they are taken in; the scatters running on
     * finisher threads, by number (under smu, with scv): no reply leaves
     * before every earlier request's scatter is done, so that a reply
     * means the guest's pages hold what every request before it wrote
     * (a pipelined copy waits only for its last piece's reply). */
    _Atomic uint64_t next_seq;
    pthread_mutex_t smu;
    pthread_cond_t scv;
    uint64_t scat[VCU__W_FINISHERS];
    unsigned int nscat;
    unsigned char *rbuf;            /* a ring frame's body, copied out (rlock) */
    vcu__region_t regions[VCU_IPC_MAX_REGIONS];
    unsigned int nregions;
    vcu__reg_t *regs;               /* alock: sorted, disjoint */
    size_t nregs, capregs;
    vcu__alias_t *aliases;          /* alock */
    unsigned int naliases;          /* alock: aliases, their mappings, bytes */
    uint64_t alias_maps, alias_bytes;
    int fdq[VCU_IPC_MAX_REGIONS];   /* received, not yet claimed by a REGION */
    unsigned int nfdq;
};
extern struct vcu__w_s vcu__w;

/* How the process ends: its session is over (0) or a peer broke the
 * link's rules (1).  The fuzz target of the link (tests/fuzz/
 * fuzz_worker.c) defines it to go back to its harness instead. */
#ifndef VCU__W_EXIT
#define VCU__W_EXIT(code) _exit(code)
#endif

/* worker.c */
void vcu__send_frame(uint32_t type, uint64_t tag, const void *body, size_t len);
const vcu__region_t *vcu__region(uint32_t id);
void vcu__handle_req(uint64_t tag, const unsigned char *body, size_t blen);
void vcu__handle_state(uint64_t tag, const unsigned char *body, size_t blen);
void vcu__handle_region(const unsigned char *body, size_t blen);

/* worker_reg.c */
void vcu__reg_cover_locked(const vcu__region_t *r, uint64_t off, uint64_t len);
size_t vcu__reg_split_locked(const vcu__region_t *r, uint64_t off, uint64_t len,
                             struct iovec *out);
/* mmap() for guest memory, in the worker's window for it (worker_reg.c). */
void *vcu__guest_mmap(size_t len, int prot, int flags, int fd, off_t off);
unsigned char *vcu__alias_get(const struct vcu_ipc_range *rg, uint32_t n, uint64_t want);
void vcu__reg_release(const struct vcu_ipc_range *rel, uint32_t n);

/* worker_link.c */
void vcu__sock_pump(bool want_req);
void vcu__map_shm(int fd, int wake_req, int wake_resp);
void vcu__pump(void *opaque, int64_t timeout_ns);
void *vcu__watch(void *arg);

#endif /* VCU_WORKER_INT_H */
