/*
 * Internal interface between the backend core (sessions, workers,
 * validation, dispatch: backend.c) and the CUDA executor (cuda.c and its
 * parts, cuda_int.h).
 * Private names: vcu__.
 */
#ifndef VCU_BACKEND_INT_H
#define VCU_BACKEND_INT_H

#include "vcu_backend.h"

/* Backend-wide CUDA state: the dlopen'd driver and the virtual devices. */
typedef struct vcu__cuda_s vcu__cuda_t;
/* One session's CUDA state: its contexts and handle tables. */
typedef struct vcu__cuda_sess_s vcu__cuda_sess_t;

/*
 * Loads the driver (cfg->libcuda, else $VCU_LIBCUDA, else "libcuda.so.1")
 * and resolves cfg->gpus.  On failure returns VCU_ENODEV with a one-line
 * reason in err; the backend then runs without the CUDA feature.
 */
int vcu__cuda_init(const vcu_backend_config_t *cfg, vcu__cuda_t **out, char *err, size_t errlen);
void vcu__cuda_fini(vcu__cuda_t *cu);
/* Whether the executor has a module cache (VCU_FEAT_MODULE_CACHE). */
int vcu__cuda_has_modcache(const vcu__cuda_t *cu);

/* Registers host memory backing guest RAM with the driver (portable), in
 * a backend-wide context on virtual device 0; the same range again only
 * counts a reference.  remove drops one (VCU_EINVAL if never added). */
int vcu__cuda_add_ram(vcu__cuda_t *cu, void *hva, size_t len);
int vcu__cuda_remove_ram(vcu__cuda_t *cu, void *hva, size_t len);

/* vcu_backend_host_charge(): the backend's own account slot, if any. */
int vcu__cuda_host_charge(vcu__cuda_t *cu, uint64_t n);
void vcu__cuda_host_uncharge(vcu__cuda_t *cu, uint64_t n);

/* Called on the session's worker thread, first and last.  sess_free
 * synchronizes every context before it releases anything.  id: the
 * session's, for the memory account (vcu_backend_config_t.account). */
int vcu__cuda_sess_new(vcu__cuda_t *cu, uint64_t id, vcu__cuda_sess_t **out);
void vcu__cuda_sess_free(vcu__cuda_sess_t *cs);

/*
 * Ends the session's host callbacks now: every trampoline blocked on a
 * CU_CALLBACK_DONE returns, the parked CU_CALLBACK_WAIT completes with
 * VCU_S_ECANCELED, later WAITs are cancelled and later callbacks return at
 * once.  Any thread, any number of times, while cs is alive.  The core
 * calls it when SESSION_CLOSE is queued and when a reset starts: the
 * session's final synchronize (vcu__cuda_sess_free) must not wait for a
 * guest callback that will never be DONE (the guest process died), nor
 * may a driver that runs host functions on the issuing thread keep the
 * worker from reaching the close.  vcu__cuda_sess_free() calls it itself.
 */
void vcu__cuda_sess_cancel(vcu__cuda_sess_t *cs);

/*
 * A request waiting for GPU work it issued (a synchronize, a synchronous
 * copy, an async copy from segments that are not stable, a fence): the
 * executor recorded events behind that work, on the worker, in FIFO
 * order.  The worker polls it with vcu__cuda_wait_poll() and, once done,
 * finishes it with vcu__cuda_wait_finish().  Worker thread only.
 * vcu__cuda_sess_free() frees the waits still pending (after it has
 * synchronized): the core then completes their requests itself.
 */
typedef struct vcu__cuda_wait_s vcu__cuda_wait_t;

/* 1 once everything the wait is for has finished (or failed), else 0.
 * Never blocks; may be called again after it said 1. */
int vcu__cuda_wait_poll(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w);

/*
 * Completes the reply of a wait vcu__cuda_wait_poll() found done: a
 * failure seen while waiting becomes the result in the reply payload
 * already in req->resp (or the session's deferred error, for a fence or
 * an async request); frees w.  Returns the reply's wire status and sets
 * *out_len, for vcu__complete().  req may be NULL (a fence).
 */
uint32_t vcu__cuda_wait_finish(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, vcu_request_t *req,
                               size_t *out_len);

/*
 * SESSION_FENCE, on the session's worker: records events behind all GPU
 * work of every context of the session (every stream, destroyed ones
 * still running included) and returns the wait in *wait, or NULL when
 * there was nothing to wait for.  Where events cannot be used (a stream
 * capture in progress) it synchronizes instead.  Failures become the
 * session's deferred error, reported with the next CUDA reply.  Returns 0
 * or a failure to synchronize as VCU_E*.
 */
int vcu__cuda_sess_fence(vcu__cuda_sess_t *cs, vcu__cuda_wait_t **wait);

/*
 * Device printf capture (capture.c).  vcu__cap_start() makes fd 1 a pipe
 * read by a thread of its own (counted: every start has its stop);
 * VCU_EIO if it cannot.  A session that loaded an image using printf has
 * a sink (vcu__out_new, freed with vcu__out_free) that collects what is
 * written to fd 1 while it synchronizes (between vcu__out_sync_begin and
 * _end: one session at a time, the driver call made in between must be
 * a blocking one) and what is written while it was the last to launch
 * (vcu__out_touch).  vcu__out_take() moves the oldest bytes out, up to
 * cap, and says whether more are left.  Worker thread of the sink's
 * session; start and stop from the backend's owner.
 */
typedef struct vcu__out_s vcu__out_t;
int vcu__cap_start(void);
void vcu__cap_stop(void);
int vcu__out_new(vcu__out_t **out);
void vcu__out_free(vcu__out_t *o);
void vcu__out_touch(vcu__out_t *o);
void vcu__out_sync_begin(vcu__out_t *o);
void vcu__out_sync_end(vcu__out_t *o);
size_t vcu__out_take(vcu__out_t *o, void *dst, size_t cap, int *more);

/* Returned by vcu__cuda_exec() when it has taken the request over and
 * will finish it later itself with vcu__complete().  Only a request whose
 * reply buffer (req->resp) is its own is ever parked, never a
 * VCU_REQ_F_ASYNC one: the core points an async reply into its queue
 * item, which it frees when exec returns. */
#define VCU__PARKED 0xffffffffu
/* Returned by vcu__cuda_exec() with *wait set: the reply payload is
 * written (*out_len), the request completes when the wait is done. */
#define VCU__WAITING 0xfffffffeu

/*
 * Executes one CUDA opcode, on the session's worker thread, except for
 * the opcodes vcu__cuda_is_inline() names, which run on the submitting
 * thread.  Never blocks on the GPU: work that must be waited for is
 * issued and the request returned as VCU__WAITING with *wait set.
 *
 * The core has checked: the opcode is a CUDA one, payload_len is what the
 * header says and at least the size of the opcode's request struct, the
 * segments are well formed (flags valid, iov lengths add up to len).
 * Everything inside the payload is for the executor to validate.
 *
 * h and payload are valid only during the call (the core passes aligned
 * copies, or the request's own bytes when already aligned): a request that
 * is parked must copy what it needs.
 *
 * Writes the reply payload (starting with struct vcu_cu_resp) to out, at
 * most out_cap bytes, and sets *out_len.  Returns a wire status: VCU_S_OK
 * whenever the call was made, whatever CUresult it gave.
 */
uint32_t vcu__cuda_exec(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h, const void *payload,
                        const vcu_segment_t *segs, unsigned int nsegs, void *out, size_t out_cap,
                        size_t *out_len, vcu_request_t *req, vcu__cuda_wait_t **wait);

/* CU_CALLBACK_WAIT and CU_CALLBACK_DONE: must not queue behind GPU work. */
int vcu__cuda_is_inline(uint32_t opcode);

/*
 * Finishes a request: writes the reply header (status, payload_len,
 * req_id) in front of the payload already in req->resp, sets resp_len and
 * calls done.  Safe from any thread.
 */
void vcu__complete(vcu_request_t *req, uint32_t status, size_t payload_len);

/* Start of the reply payload inside req->resp, and its capacity. */
static inline void *vcu__resp_payload(vcu_request_t *req)
{
    return (char *)req->resp + sizeof(struct vcu_resp_hdr);
}

static inline size_t vcu__resp_cap(const vcu_request_t *req)
{
    return req->resp_cap - sizeof(struct vcu_resp_hdr);
}

#endif /* VCU_BACKEND_INT_H */
