/*
 * Internal interface between the backend core (sessions, workers,
 * validation, dispatch: backend.c) and the CUDA executor (cuda.c).
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

/* Registers host memory backing guest RAM with the driver (portable), in
 * a backend-wide context on virtual device 0; the same range again only
 * counts a reference.  remove drops one (VCU_EINVAL if never added). */
int vcu__cuda_add_ram(vcu__cuda_t *cu, void *hva, size_t len);
int vcu__cuda_remove_ram(vcu__cuda_t *cu, void *hva, size_t len);

/* Called on the session's worker thread, first and last. */
int vcu__cuda_sess_new(vcu__cuda_t *cu, vcu__cuda_sess_t **out);
void vcu__cuda_sess_free(vcu__cuda_sess_t *cs);

/*
 * Ends the session's host callbacks now: every trampoline blocked on a
 * CU_CALLBACK_DONE returns, the parked CU_CALLBACK_WAIT completes with
 * VCU_S_ECANCELED, later WAITs are cancelled and later callbacks return at
 * once.  Any thread, any number of times, while cs is alive.  The core
 * calls it when SESSION_CLOSE is queued and when a reset starts: otherwise
 * a worker blocked in a stream synchronize behind a guest callback that
 * will never be DONE (the guest process died) never reaches the close.
 * vcu__cuda_sess_free() calls it itself.
 */
void vcu__cuda_sess_cancel(vcu__cuda_sess_t *cs);

/*
 * SESSION_FENCE, on the session's worker: synchronizes every context of
 * the session, so that no GPU work the session queued (asynchronous copies
 * from VCU_SEG_F_STABLE segments included) is still running.  A failing
 * synchronize becomes the session's deferred error, reported with the next
 * CUDA reply; the contexts are idle (or dead) either way.  Returns 0 or the
 * first failure as VCU_E*.
 */
int vcu__cuda_sess_fence(vcu__cuda_sess_t *cs);

/* Returned by vcu__cuda_exec() when it has taken the request over and
 * will finish it later itself with vcu__complete(). */
#define VCU__PARKED 0xffffffffu

/*
 * Executes one CUDA opcode, on the session's worker thread, except for
 * the opcodes vcu__cuda_is_inline() names, which run on the submitting
 * thread and must never block on the GPU.
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
                        size_t *out_len, vcu_request_t *req);

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
