/*
 * virtio-cuda session proxy: the part of the QEMU device that talks to the
 * GPU side.  Every guest session runs in a worker process of its own
 * (vcu-worker), which the host daemon (vcu-daemon) starts in a jail at
 * SESSION_OPEN and ends at SESSION_CLOSE, reset or when QEMU goes: QEMU
 * never forks, execs or loads the CUDA driver, so it keeps the seccomp
 * sandbox libvirt gives it (spawn=deny).  The proxy makes each session's
 * channel (a socket pair, a shared area with two rings, two doorbells:
 * vcu_ipc.h) and hands the worker's ends to the daemon over the link
 * (vcu_link.h); from then on requests go straight to the worker and
 * replies straight back, the daemon out of the way.  Guest RAM reaches the
 * workers as shared memory: every mapped range comes with its RAM block's
 * file descriptor and offset (vcu_segment_t.ref), sent to the worker once,
 * which maps that file itself.
 *
 * The link to the daemon is either the transport's (QEMU: a -chardev
 * socket, vcu_proxy_link_t), or a unix socket the proxy connects to and
 * serves on a thread of its own (cfg.daemon: tests, benchmarks).
 *
 * The request interface is the backend's (vcu_backend.h: vcu_request_t,
 * vcu_segment_t): the caller allocates a request and keeps it alive until
 * done() has been called, exactly once, from any thread.  Nothing here
 * blocks on a worker or on the daemon: submission writes to the worker's
 * shared request ring without blocking (a thread of the session's own
 * sends what does not fit), replies are read from the reply ring by
 * another thread of the session, and reset asks the daemon to kill the
 * workers without waiting for them to exit.
 */
#ifndef VCU_PROXY_H
#define VCU_PROXY_H

#include "vcu_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vcu_proxy_s vcu_proxy_t;

/* The most sessions a proxy holds (vcu_proxy_config_t.max_sessions). */
#define VCU_PROXY_MAX_SESSIONS 4096u

/* Packed mode's bound: the most SMs a VM may be given. */
#define VCU_PROXY_MAX_SMS 4096

/* vcu_proxy_config_t.module_cache */
enum {
    VCU_PROXY_MODCACHE_SHARED = 0,  /* the daemon's cache, shared by its VMs */
    VCU_PROXY_MODCACHE_OFF = 1,     /* none */
    VCU_PROXY_MODCACHE_PRIVATE = 2, /* one of the VM's own (by its name) */
};

/*
 * The transport's side of the link (QEMU's chardev).  send() queues one
 * frame (header and body, vcu_link.h) with nfds descriptors, taking copies
 * of them before it returns (the caller closes its own); it must not block
 * and may be called from any thread.  0, or -1 when the link is down.
 * What the daemon sends, the transport hands to vcu_proxy_link_input(),
 * one whole frame at a time with the descriptors that came with it.
 */
typedef struct vcu_proxy_link_s {
    void *opaque;
    int (*send)(void *opaque, const void *frame, size_t len, const int *fds, unsigned int nfds);
} vcu_proxy_link_t;

typedef struct vcu_proxy_config_s {
    const char *daemon;             /* the daemon's socket: the proxy connects itself */
    const vcu_proxy_link_t *link;   /* or the transport's link (exactly one of the two) */
    const char *name;               /* the VM's name for the daemon ([A-Za-z0-9._-]) */
    const char *gpus;               /* host GPUs, "0", "0:1" or GPU- UUIDs; NULL: "0" */
    unsigned int max_sessions;      /* 0 means 64 */
    int capture_printf;             /* kernels' printf to the guest */
    unsigned int ring_bytes;        /* request ring per session, a power of two
                                       (4 KiB..64 MiB); 0 means 1 MiB */
    unsigned int spin_us;           /* how long an idle ring consumer (the reader,
                                       the worker) spins before it sleeps; 0 means
                                       $VCU_SPIN_US if set (0 there: no spin), else
                                       20 with 4 or more online CPUs, else none */
    uint64_t mem_quota;             /* GPU memory the VM's sessions may hold together,
                                       per device, in bytes; 0: the daemon's default */
    int module_cache;               /* VCU_PROXY_MODCACHE_* */
    /* Compute share between VMs (the daemon's group, docs/design.md
     * "Compute share"): this VM's weight (1..10000; 0: not in the group)
     * and its cap in percent of the GPU's time (1..99; 0 or 100: none). */
    uint32_t compute_share;
    uint32_t compute_cap;
    /* Packed mode (docs/design.md "Packed mode"): every worker is a client
     * of the MPS control daemon the host daemon names, and its context runs
     * on sms SMs.  Not with a compute share or cap.  0: isolated mode. */
    uint32_t sms;
} vcu_proxy_config_t;

/*
 * Checks the config and creates the proxy; the caller frees it with
 * vcu_proxy_free().  With cfg->daemon it connects, says HELLO and waits
 * for the daemon's WELCOME (the daemon probes CUDA as the VM asks, which
 * may take a while on a GPU host); with cfg->link it sends HELLO, and the
 * transport feeds the WELCOME to vcu_proxy_link_input() (QEMU's realize
 * reads it).  err gets a one-line reason on failure.
 */
int vcu_proxy_new(const vcu_proxy_config_t *cfg, vcu_proxy_t **out, char *err, size_t errlen);

/* Ends every session as vcu_proxy_reset() does, then frees. */
void vcu_proxy_free(vcu_proxy_t *px);

/*
 * A frame from the daemon (the transport's link), with the descriptors
 * that came with it (the proxy owns them now).  Any thread.  Returns 0; or
 * for a WELCOME that refuses the VM, or a frame that breaks the protocol,
 * a negative VCU_E* code with err saying why (the transport then closes
 * the link).
 */
int vcu_proxy_link_input(vcu_proxy_t *px, const void *frame, size_t len, int *fds,
                         unsigned int nfds, char *err, size_t errlen);

/*
 * Migration (docs/design.md, "Live migration").
 *
 * vcu_proxy_sessions(): the sessions open now, up to max of them, each
 * with the SESSION_OPEN it was opened with; returns how many there are.
 *
 * vcu_proxy_session_state(): req->req holds a struct vcu_req_hdr (opcode
 * one of the VCU_BACKEND_OP_ state operations, vcu_backend.h; session:
 * the guest's id); the session's worker writes its state to a copy of fd
 * (a pipe's write end, a file), or loads one from it, after every
 * request sent to it before.  req completes as a submitted one does: the
 * reply's status, and its payload as vcu_backend.h says.
 *
 * vcu_proxy_session_restore(): on a destination, opens the session of
 * req's header (opcode VCU_BACKEND_OP_LOAD, session: the guest's id,
 * whose slot must be free here) as *open did on the source, in a new
 * worker, which then loads the state from a copy of fd.  req completes
 * with the load's reply, or with why the session could not be opened; a
 * session whose load failed is dead (its requests fail with VCU_S_EIO)
 * until closed or reset.
 */
unsigned int vcu_proxy_sessions(vcu_proxy_t *px, uint64_t *ids,
                                struct vcu_session_open_req *opens, unsigned int max);
void vcu_proxy_session_state(vcu_proxy_t *px, vcu_request_t *req, int fd);
void vcu_proxy_session_restore(vcu_proxy_t *px, vcu_request_t *req,
                               const struct vcu_session_open_req *open, int fd);

/* The transport's link went down (the daemon ended, or restarts): no
 * session starts until a new WELCOME; the running ones end as their
 * workers do (the daemon kills them, or they die with it). */
void vcu_proxy_link_down(vcu_proxy_t *px);

/* The transport's link is back: sends HELLO again (the WELCOME comes
 * through vcu_proxy_link_input()). */
void vcu_proxy_link_up(vcu_proxy_t *px);

/* Whether the daemon has welcomed this VM (and the link has not gone
 * down since). */
int vcu_proxy_link_ready(vcu_proxy_t *px);

/*
 * Queues a request; always ends in exactly one call of req->done.  Every
 * segment iovec needs its vcu_gref_t (seg->ref), or the request fails
 * with VCU_S_EFAULT.  Not thread safe: one caller at a time (the BQL).
 * done may run before this returns, on the caller's thread: for a
 * synchronous request the caller polls the worker's replies for up to
 * 10 us ($VCU_POLL_US, at most 100 and at most the spin; none when the
 * spin is 0), completing what arrives.  done must not submit.
 */
void vcu_proxy_submit(vcu_proxy_t *px, vcu_request_t *req);

/*
 * Ends every session: the daemon is asked to kill their workers (their
 * GPU work ends with them), requests still out complete with
 * VCU_S_ECANCELED.  Returns once every done callback has run; never waits
 * for a worker to exit.
 */
void vcu_proxy_reset(vcu_proxy_t *px);

/*
 * The VM's usage, for the host's monitoring (QEMU's QOM properties): what
 * the VM's memory account says (read-only, the daemon's) and the proxy's
 * own counts.  Per device: the VM's virtual device numbers, all
 * VCU_CU_MAX_DEVICES of them.
 */
typedef struct vcu_proxy_session_stats_s {
    uint64_t session;               /* the guest's session id */
    uint32_t pid;                   /* the worker's host pid (not a guest pid); 0 before spawn */
    uint32_t fault;                 /* 1: the worker flagged a GPU fault */
    uint64_t mem[VCU_CU_MAX_DEVICES];   /* bytes charged, as the worker wrote them */
    uint64_t ctx[VCU_CU_MAX_DEVICES];   /* of those, its contexts' own, likewise */
    uint64_t host;                  /* host bytes charged, likewise */
} vcu_proxy_session_stats_t;

typedef struct vcu_proxy_stats_s {
    uint64_t mem_quota;             /* bytes per device; 0: none */
    uint64_t mem_used[VCU_CU_MAX_DEVICES];  /* all slots' charges (saturating sums) */
    uint64_t ctx_bytes[VCU_CU_MAX_DEVICES]; /* all slots' context memory (within mem_used) */
    uint64_t host_quota;            /* host memory the VM's workers may hold; 0: none */
    uint64_t host_used;             /* all slots' host charges */
    uint64_t faults;                /* sessions ended by a GPU fault since the welcome */
    uint32_t sessions;              /* the guest's open sessions */
    uint32_t workers;               /* sessions with a worker, closing ones included */
    uint32_t nsess;                 /* entries written to the caller's array */
    uint32_t link_up;               /* 1: the daemon has welcomed the VM */
    uint32_t compute_share;         /* the slice the daemon gave: weight, */
    uint32_t compute_cap;           /* cap, */
    uint32_t sms;                   /* packed mode's SMs (0: isolated mode) */
    uint32_t max_sessions;          /* and sessions */
    uint64_t vm_id;                 /* the daemon's number for the VM */
} vcu_proxy_stats_t;

/*
 * Fills out, and up to cap entries of sess (the caller's; NULL when cap
 * is 0), one per session with a worker, oldest first.  Session ids and
 * pids come from the proxy's own records; the memory figures are written
 * by workers (which run guest requests): each is reported as found and
 * every sum saturates at UINT64_MAX.  Any thread.  0, VCU_EINVAL or
 * VCU_ENOMEM.
 */
int vcu_proxy_stats(vcu_proxy_t *px, vcu_proxy_stats_t *out,
                    vcu_proxy_session_stats_t *sess, uint32_t cap);

/* Why the daemon's probe found no usable CUDA for this VM (the driver, the
 * GPU list), or NULL if it did. */
const char *vcu_proxy_cuda_error(const vcu_proxy_t *px);

#ifdef __cplusplus
}
#endif

#endif /* VCU_PROXY_H */
