/*
 * virtio-cuda host backend: the library a transport (the QEMU device, a
 * unit test, a benchmark) hands guest requests to.
 *
 * Transport neutral: a request is its bytes (include/vcu_proto.h: header,
 * payload, segment table; any range list after it is ignored) plus, for
 * each data segment, host iovecs the transport has already mapped.  The
 * backend validates everything in the request itself: the transport only
 * guarantees that the iovecs are host memory of the lengths it says.
 *
 * Threads: vcu_backend_submit() may be called from any one thread at a
 * time per backend (the QEMU device calls it with the BQL held).  Each
 * session runs its requests in order on a worker thread of its own, where
 * its CUDA context lives.  The done callback runs on a worker thread, on a
 * CUDA callback thread, or inside vcu_backend_submit() itself for
 * requests rejected before they reach a worker; it must not call back
 * into the backend.
 */
#ifndef VCU_BACKEND_H
#define VCU_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "vcu_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Functions return 0 or a VCU_E* code (include/vcu_proto.h); vcu_status_str()
 * gives its message. */

typedef struct vcu_backend_s vcu_backend_t;

typedef struct vcu_backend_config_s {
    /*
     * Host GPUs given to the VM, in virtual order: a list of host
     * ordinals or UUIDs ("GPU-1234abcd-...") separated by ',' or ':'
     * ("0,2", "0:2"); NULL or "" means "0".
     */
    const char *gpus;
    /* Path for dlopen(); NULL means "libcuda.so.1". */
    const char *libcuda;
    /* Most sessions at once; 0 means 64. */
    unsigned int max_sessions;
    /* Register guest RAM given with vcu_backend_add_ram() with CUDA. */
    int register_ram;
    /*
     * Capture device printf output (CU_TAKE_OUTPUT): the driver writes it
     * to fd 1, which becomes a pipe while a backend with this set has
     * CUDA; what no session claims goes on to the original fd 1.  For a
     * process whose fd 1 is not the guest program's (QEMU); 0 where it is
     * (loopback: the output is already where it belongs).
     */
    int capture_printf;
    /*
     * A worker process of one session (worker.c): sessions use each
     * device's primary context, which also holds the registrations of
     * vcu_backend_add_ram() (no second context, whose GPU memory the
     * session would pay for); and CUDA is refused on a device that can
     * reach pageable host memory (HMM, ATS), since the worker maps guest
     * RAM that the session's kernels must not reach.
     */
    int worker;
    /*
     * Driven sessions: no thread of the backend's own runs a session.
     * The caller runs each one, after its SESSION_OPEN, on a thread of
     * its own with vcu_backend_drive(); pump() is how that thread takes
     * in new requests, idle or between requests: it submits whatever has
     * arrived (vcu_backend_submit()) and returns, waiting at most
     * timeout_ns for something to arrive (0: no wait; -1: no limit).  It
     * is called without any backend lock held.  So a request runs on the
     * thread that received it, with no hand-over to another thread (a
     * worker process: worker.c).  NULL: a thread per session.
     */
    void (*pump)(void *opaque, int64_t timeout_ns);
    void *pump_opaque;
    /*
     * The VM's GPU memory account (vcu_account.h): every allocation of
     * device memory is charged to it first, and the memory figures the
     * guest sees come from it when it has a quota.  NULL: no account (the
     * guest sees the whole GPU).  The caller keeps it alive until
     * vcu_backend_free().
     */
    struct vcu_account_s *account;
    /* The slot of this process's one session (a worker: the proxy's
     * choice); -1: each session claims a slot of its own while it lives
     * (in-process backends). */
    int account_slot;
    /*
     * The module cache's directory (vcu_modcache.h), shared with other
     * processes naming it; NULL or "": no cache.  A directory that cannot
     * be used (another user's, writable by others, not creatable) leaves
     * the cache off, with one line on stderr; loads work as without it.
     */
    const char *module_cache;
    uint64_t module_cache_bytes;    /* its bound; 0: VCU_MODCACHE_DEFAULT_BYTES */
    /*
     * The compute-share group (vcu_sched.h), attached to this worker's
     * slot: a driven session (pump) issues GPU work (launches, copies,
     * memsets, graph launches) only while its VM holds the group's grant,
     * and drains when it loses it.  NULL: no gate, nothing on the launch
     * path.  The caller's; it outlives the backend.
     */
    struct vcu_sched_s *sched;
    /*
     * Packed mode (worker only; docs/design.md "Packed mode"): each
     * device's context is created with an execution affinity of this many
     * SMs, which the driver gives only to a client of an MPS control
     * daemon; the guest is told the device has this many.  The driver
     * must give exactly this many, and the device must have them: else
     * CUDA is refused, with the reason (vcu_backend_cuda_error()).  0:
     * primary contexts, and CUDA is refused to a process that turns out
     * to be an MPS client (a fault there would reach other processes).
     */
    uint32_t sms;
    /* A worker asked only whether CUDA works (at the device's start): in
     * packed mode it also creates and checks one context. */
    int probe;
    /*
     * GPU memory each CUDA context takes for itself, charged to the
     * account (account) when the context is made: past the VM's quota
     * the session's first call on the device fails with
     * CUDA_ERROR_OUT_OF_MEMORY.  0: VCU_BACKEND_CTX_BYTES.
     */
    uint64_t ctx_bytes;
    /*
     * The folder this process shares with the other workers of its VM
     * alone, for CUDA IPC between them (host-backend/worker/cuda_ipc.c):
     * the daemon's per-VM folder, which a jailed worker sees as /dev/shm.
     * NULL: CUDA IPC is not offered (CUDA_ERROR_NOT_SUPPORTED).
     */
    const char *ipc_dir;
    /*
     * The daemon's keep (host-backend/common/vcu_keep.h): a socket on
     * which the worker hands over shareable handles for the VM's other
     * workers.  Taken by the backend (closed by it).  0: none, and
     * shareable handles are not offered (a worker's descriptor 0 is
     * never it).
     */
    int keep_fd;
} vcu_backend_config_t;

/*
 * What one context takes on an H100 with driver 580 and the default stack
 * limit (measured: /work/shared/SHARING-FACTS.md P5; 325 MiB of it with
 * a 256-byte stack limit).  The daemon's --ctx-bytes default.
 */
#define VCU_BACKEND_CTX_BYTES ((uint64_t)524 << 20)

/*
 * Where a mapped range lives in shared guest RAM: the file descriptor of
 * its RAM block and the offset in that file.  A transport that runs
 * sessions in worker processes (vcu_proxy.h) needs it for every iovec;
 * the in-process backend ignores it.
 */
typedef struct vcu_gref_s {
    int fd;
    uint32_t reserved;
    uint64_t off;
} vcu_gref_t;

typedef struct vcu_segment_s {
    const struct iovec *iov;        /* host memory of this segment, in order */
    unsigned int iovcnt;
    uint64_t len;                   /* sum of iov lengths */
    uint32_t flags;                 /* VCU_SEG_TO_DEVICE or VCU_SEG_FROM_DEVICE,
                                       maybe | VCU_SEG_F_STABLE (as on the wire) */
    const vcu_gref_t *ref;          /* NULL, or one per iov (vcu_proxy.h) */
} vcu_segment_t;

/* The direction bit of a segment's flags (VCU_SEG_TO_DEVICE or _FROM_DEVICE). */
#define VCU_SEG_DIR(flags) ((flags) & (VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE))

typedef struct vcu_request_s vcu_request_t;
typedef void (*vcu_done_cb)(vcu_request_t *req);

/*
 * One request.  The caller allocates it and everything it points to, and
 * keeps all of it alive and unchanged until done() has been called, exactly
 * once.  The backend writes the whole reply (struct vcu_resp_hdr, status
 * first, and its payload) into resp and sets resp_len.
 */
struct vcu_request_s {
    const void *req;                /* request bytes */
    size_t req_len;
    const vcu_segment_t *segs;      /* one per segment of the request's table */
    unsigned int nsegs;
    void *resp;                     /* reply buffer, >= sizeof(struct vcu_resp_hdr) */
    size_t resp_cap;
    size_t resp_len;                /* OUT */
    vcu_done_cb done;
    void *opaque;                   /* the caller's */
};

/* Creates a backend.  Never fails for lack of a GPU driver: the CUDA
 * feature is simply not offered then (vcu_backend_cuda_error() says why).
 * The caller frees it with vcu_backend_free(). */
int vcu_backend_new(const vcu_backend_config_t *cfg, vcu_backend_t **out);

/* Ends every session as vcu_backend_reset() does, then frees. */
void vcu_backend_free(vcu_backend_t *be);

/* Queues a request; always ends in exactly one call of req->done. */
void vcu_backend_submit(vcu_backend_t *be, vcu_request_t *req);

/* Runs a request and waits for it: for tests and benchmarks.  Returns 0
 * once done, the reply's status being in req->resp. */
int vcu_backend_execute(vcu_backend_t *be, vcu_request_t *req);

/*
 * Driven sessions (config pump): runs the oldest session opened and not
 * yet driven on the calling thread, until it ends (SESSION_CLOSE, or a
 * reset).  Returns 0 then, VCU_ENOSESSION if no session waits to be
 * driven, VCU_EINVAL without a pump.
 */
int vcu_backend_drive(vcu_backend_t *be);

/*
 * Ends every session (device reset): requests not yet started complete
 * with VCU_S_ECANCELED, running ones finish, then every session's host
 * state (CUDA context and all it holds) is freed.  Returns once all done
 * callbacks have run and every worker has exited; a driven session that
 * its thread still runs is only told to end (it frees itself once its
 * vcu_backend_drive() returns).  Not from pump().
 */
void vcu_backend_reset(vcu_backend_t *be);

/*
 * Registers a range of host memory backing guest RAM with CUDA (pinned
 * DMA for copies from and to it); hva and len page aligned.  Registering
 * the very same range again only counts a reference.  VCU_ENODEV without
 * CUDA, VCU_ENOTSUP when the config's register_ram is 0; another error
 * means the driver refused (copies still work, staged).  Main thread.
 */
int vcu_backend_add_ram(vcu_backend_t *be, void *hva, size_t len);

/* Drops one reference to a range given to vcu_backend_add_ram() (the same
 * hva and len), unregistering it with the last.  VCU_EINVAL if unknown. */
int vcu_backend_remove_ram(vcu_backend_t *be, void *hva, size_t len);

/*
 * Host memory the caller holds for the backend's one session (a worker's
 * staging buffers and aliases of guest memory), charged to the VM's host
 * quota in the account (vcu_account.h) beside the session's own budget:
 * 0, or VCU_ENOMEM past the quota (nothing charged).  Without an account
 * slot of the backend's own (account_slot -1: in-process sessions),
 * nothing is charged and 0 returned.  uncharge gives back what charge
 * took.  Any thread.
 */
int vcu_backend_host_charge(vcu_backend_t *be, uint64_t n);
void vcu_backend_host_uncharge(vcu_backend_t *be, uint64_t n);

/*
 * Migration (docs/design.md, "Live migration").  VCU_BACKEND_OP_SAVE
 * writes the session's state to fd; VCU_BACKEND_OP_LOAD rebuilds a
 * session that has run no CUDA call yet from a state read from fd,
 * checking that every device address and handle comes out as the source
 * had it (a session a load failed on must be closed).  The pass before
 * the pause splits a save in three while the guest runs on:
 * VCU_BACKEND_OP_PRE_SAVE writes the history so far (no contents),
 * VCU_BACKEND_OP_PRE_COPY the next chunks of device memory (64 MiB at
 * most), and VCU_BACKEND_OP_SAVE_REST, at the pause, what those did not
 * carry or what changed since; each is loaded, in that order, by a
 * VCU_BACKEND_OP_LOAD of its own into the same session.  None is a wire
 * opcode: vcu_backend_submit() refuses them as unknown, so a guest cannot
 * send them; only the transport queues them, with
 * vcu_backend_submit_state(), and they run on the session's worker after
 * every request of the session queued before.  req->req holds a struct
 * vcu_req_hdr with the opcode and the session, payload_len and nsegs 0.
 * Like vcu_backend_submit(), it always ends in one call of req->done:
 * status VCU_S_OK, or why not (VCU_S_EBUSY: the session cannot be saved,
 * now or at all; VCU_S_EINVAL: the state was refused), the reply's
 * payload a one-line reason, NUL-terminated (empty on success); but for
 * PRE_SAVE and PRE_COPY, whose payload on success is a little-endian
 * uint64_t: the bytes of device memory the pass has still to send.  A
 * PRE_SAVE refused writes nothing to fd.  fd stays the caller's; it is
 * no longer used once done has been called.
 */
#define VCU_BACKEND_OP_SAVE 0x00f0u
#define VCU_BACKEND_OP_LOAD 0x00f1u
#define VCU_BACKEND_OP_PRE_SAVE 0x00f2u
#define VCU_BACKEND_OP_PRE_COPY 0x00f3u
#define VCU_BACKEND_OP_SAVE_REST 0x00f4u
#define VCU_BACKEND_OP_IS_STATE(op) ((op) >= VCU_BACKEND_OP_SAVE && (op) <= VCU_BACKEND_OP_SAVE_REST)
void vcu_backend_submit_state(vcu_backend_t *be, vcu_request_t *req, int fd);

/* Why CUDA is unavailable, or NULL if it is available. */
const char *vcu_backend_cuda_error(const vcu_backend_t *be);

/* Sessions open now (for tests). */
unsigned int vcu_backend_session_count(vcu_backend_t *be);

#ifdef __cplusplus
}
#endif

#endif /* VCU_BACKEND_H */
