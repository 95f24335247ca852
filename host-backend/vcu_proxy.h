/*
 * virtio-cuda session proxy: what the QEMU device links instead of the
 * backend itself.  Every guest session runs in a worker process of its
 * own (vcu-worker, worker.c), started at SESSION_OPEN and killed at
 * SESSION_CLOSE, reset or when QEMU goes: QEMU never loads the CUDA
 * driver, and one session's faults, memory and address space stay in its
 * process.  Guest RAM reaches the workers as shared memory: every mapped
 * range comes with its RAM block's file descriptor and offset
 * (vcu_segment_t.ref), and the worker maps that file itself.
 *
 * The request interface is the backend's (vcu_backend.h: vcu_request_t,
 * vcu_segment_t): the caller allocates a request and keeps it alive until
 * done() has been called, exactly once, from any thread.  Nothing here
 * blocks on a worker: submission writes to the worker's shared request
 * ring without blocking (a thread of the session's own sends what does
 * not fit), replies are read from the reply ring by another thread of the
 * session, and reset kills workers without waiting for them to exit.
 */
#ifndef VCU_PROXY_H
#define VCU_PROXY_H

#include "vcu_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vcu_proxy_s vcu_proxy_t;

/* Packed mode's bounds: the most SMs a VM may be given (the GPU's own
 * count is checked when the device starts), and where NVIDIA's MPS
 * control daemon keeps its pipes unless told otherwise. */
#define VCU_PROXY_MAX_SMS 4096
#define VCU_PROXY_MPS_PIPE "/tmp/nvidia-mps"

typedef struct vcu_proxy_config_s {
    const char *worker;             /* path of vcu-worker (required) */
    const char *gpus;               /* as vcu_backend_config_t.gpus */
    const char *libcuda;            /* as vcu_backend_config_t.libcuda */
    unsigned int max_sessions;      /* 0 means 64 */
    int capture_printf;             /* as vcu_backend_config_t.capture_printf */
    unsigned int ring_bytes;        /* request ring per session, a power of two
                                       (4 KiB..64 MiB); 0 means 1 MiB */
    unsigned int spin_us;           /* how long an idle ring consumer (the reader,
                                       the worker) spins before it sleeps; 0 means
                                       $VCU_SPIN_US if set (0 there: no spin), else
                                       20 with 4 or more online CPUs, else none */
    uint64_t mem_quota;             /* GPU memory the VM's sessions may hold together,
                                       per device, in bytes; 0: no quota */
    const char *module_cache;       /* the module cache's directory (vcu_modcache.h,
                                       vcu_modcache_default_dir() for the usual one),
                                       created if missing; refused (vcu_proxy_new fails)
                                       if another user's or writable by others; NULL,
                                       "" or "off": no cache */
    uint64_t module_cache_bytes;    /* its bound; 0 means 1 GiB */
    /* Compute share between VMs (vcu_sched.h, docs/design.md "Compute
     * share"): the host-wide group's file (absolute path; created if
     * missing; NULL or "": VCU_SCHED_DEFAULT_GROUP when a share or cap is
     * set), this VM's weight (1..10000; 0: not in a group, no gate) and
     * its cap in percent of the GPU's time (1..99; 0 or 100: none). */
    const char *share_group;
    uint32_t compute_share;
    uint32_t compute_cap;
    /* Packed mode (docs/design.md "Packed mode"): every worker is a
     * client of the MPS control daemon whose pipe directory is mps_pipe
     * (NULL or "": $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps), and
     * its context runs on sms SMs (execution affinity), which is what the
     * guest is told the device has.  Not with a compute share or cap.
     * 0: isolated mode, the default: workers are never MPS clients. */
    uint32_t sms;
    const char *mps_pipe;
} vcu_proxy_config_t;

/* Checks the config (the worker must be an executable file) and creates
 * the proxy, running a worker once to see whether CUDA works as
 * configured (vcu_proxy_cuda_error()); the caller frees it with
 * vcu_proxy_free().  err gets a one-line reason on failure. */
int vcu_proxy_new(const vcu_proxy_config_t *cfg, vcu_proxy_t **out, char *err, size_t errlen);

/* Ends every session as vcu_proxy_reset() does, then frees. */
void vcu_proxy_free(vcu_proxy_t *px);

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
 * Ends every session: workers are killed (SIGKILL; their GPU work ends
 * with them), requests still out complete with VCU_S_ECANCELED.  Returns
 * once every done callback has run; never waits for a worker to exit.
 */
void vcu_proxy_reset(vcu_proxy_t *px);

/*
 * The VM's usage, for the host's monitoring (QEMU's QOM properties): what
 * the VM's memory account says and the proxy's own counts.  Per device
 * (the VM's virtual device numbers, all VCU_CU_MAX_DEVICES of them: the
 * proxy does not know how many the workers found), and with a compute
 * share the VM's GPU time as the share group has charged it.
 */
typedef struct vcu_proxy_session_stats_s {
    uint64_t session;               /* the guest's session id */
    uint32_t pid;                   /* the worker's host pid (not a guest pid); 0 before spawn */
    uint32_t fault;                 /* 1: the worker flagged a GPU fault */
    uint64_t mem[VCU_CU_MAX_DEVICES];   /* bytes charged, as the worker wrote them */
    uint64_t ctx[VCU_CU_MAX_DEVICES];   /* its contexts' own GPU memory, likewise */
} vcu_proxy_session_stats_t;

typedef struct vcu_proxy_stats_s {
    uint64_t mem_quota;             /* bytes per device; 0: none */
    uint64_t mem_used[VCU_CU_MAX_DEVICES];  /* all slots' charges (saturating sums) */
    uint64_t ctx_bytes[VCU_CU_MAX_DEVICES]; /* all slots' context overhead, apart */
    uint64_t faults;                /* sessions ended by a GPU fault since realize */
    uint32_t sessions;              /* the guest's open sessions */
    uint32_t workers;               /* workers holding memory account slots (after a
                                       reset, old ones until reaped): may pass cap */
    uint32_t nsess;                 /* entries written to the caller's array */
    uint32_t reserved;
    /* Compute share: the VM's weight and cap (0: not in a group / none),
     * the GPU time charged to it since realize, what every live VM of the
     * group has been charged (its share is gpu_ns / group_gpu_ns), and the
     * turns it was given (one or more slices in a row each).  The times are written by workers of the
     * group (any VM's): reported as found. */
    uint32_t compute_share;
    uint32_t compute_cap;
    uint64_t gpu_ns;
    uint64_t group_gpu_ns;
    uint64_t grants;
    uint32_t sms;                   /* packed mode's SMs; 0: isolated mode */
    uint32_t reserved2;
} vcu_proxy_stats_t;

/*
 * Fills out, and up to cap entries of sess (the caller's; NULL when cap
 * is 0), one per worker holding an account slot, lowest slot first.
 * Session ids and pids come from the proxy's own records; the memory
 * figures are written by workers (which run guest requests): each is
 * reported as found and every sum saturates at UINT64_MAX.  Any thread;
 * it takes the proxy's and the account's locks briefly.  0, VCU_EINVAL or
 * VCU_ENOMEM.
 */
int vcu_proxy_stats(vcu_proxy_t *px, vcu_proxy_stats_t *out,
                    vcu_proxy_session_stats_t *sess, uint32_t cap);

/* Why a worker found no usable CUDA when the proxy was created (the
 * driver, the GPU list), or NULL if it did. */
const char *vcu_proxy_cuda_error(const vcu_proxy_t *px);

#ifdef __cplusplus
}
#endif

#endif /* VCU_PROXY_H */
