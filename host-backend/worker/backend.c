/*
 * virtio-cuda host backend core: request validation, sessions (one
 * worker thread each), submission and the backend's lifetime.  The
 * workers (backend_worker.c) run the transport opcodes and ECHO, and
 * dispatch the CUDA opcodes to the executor (cuda*.c, see
 * vcu_backend_int.h).
 *
 * Lock order
 * ----------
 * be->lock is the core's only lock.  Nothing else is taken while it is
 * held: the executor, vcu__cuda_*() and the done callbacks are always
 * called without it, so it has no order with the executor's locks.
 * vcu__waiter_t.lock (vcu_backend_execute) is a leaf taken inside a done
 * callback.
 *
 * Lifetimes
 * ---------
 * A session is created by SESSION_OPEN in vcu_backend_submit() and lives
 * in be->sessions[] until its worker ends it (SESSION_CLOSE) or a reset
 * takes it out.  A worker that ended by SESSION_CLOSE parks its session
 * on be->zombies; the next SESSION_OPEN, reset or free joins the thread
 * and frees the session.  A reset joins every worker itself.
 *
 * The CUDA state of a session (cs) is created and freed by its worker
 * only.  Other threads use it (inline opcodes, vcu__cuda_sess_cancel()
 * at close and reset) while holding a count in inline_busy, which the
 * worker waits to reach zero before it frees cs.
 *
 * vcu_backend_submit() is safe from several threads at once (the public
 * header asks for less); the tests rely on it.  Parked requests
 * (VCU__PARKED) are the executor's: vcu__cuda_sess_cancel() and
 * vcu__cuda_sess_free() complete them, so a reset still returns only after
 * every done callback has run.
 *
 * Waiting
 * -------
 * A worker never blocks on the GPU or on time: a request that must wait
 * moves to the session's waiting list, which the worker polls (see
 * backend_worker.c).
 *
 * Hand-over
 * ---------
 * Requests often stream in (async launches, copies): a worker that has
 * just finished one spins for up to VCU__SPIN_NS, watching s->kick, before
 * it sleeps on s->cond; the submitter signals the condvar only when the
 * worker sleeps (s->sleeping).  vcu_backend_execute() spins the same way
 * for its done callback.  Queue items come from a small cache (be->items)
 * and point at the request's own payload when it is 8-byte aligned, so a
 * streaming request costs no malloc and no payload copy.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vcu_backend_int.h"

#define VCU_EXPORT __attribute__((visibility("default")))

#define VCU__DEFAULT_SESSIONS 64u
#define VCU__MAX_SESSIONS 65536u
#define VCU__ECHO_MAX_DELAY_MS 10000u
#define VCU__OFFERED_ALWAYS (VCU_FEAT_ECHO | VCU_FEAT_ASYNC)
#define VCU__FIRST_CUDA_OP 0x0100u

/* ---- small helpers ------------------------------------------------------- */

/* Caller holds be->lock.  A cached item, or NULL. */
static vcu__item_t *vcu__item_get_locked(vcu_backend_t *be)
{
    vcu__item_t *it = be->items;

    if (it) {
        be->items = it->next;
        be->nitems--;
    }
    return it;
}

/* Size of the opcode's fixed request struct; -1 if the opcode is unknown.
 * Generated from VCU_OP_MAP: a duplicate number fails to compile here. */
static int vcu__op_req_size(uint32_t op, size_t *size)
{
    switch (op) {
#define VCU__OP_CASE(name, num, req, resp) \
    case (num):                            \
        *size = sizeof(struct req);        \
        return 0;
        VCU_OP_MAP(VCU__OP_CASE)
#undef VCU__OP_CASE
    }
    return -1;
}

static bool vcu__op_is_cuda(uint32_t op)
{
    return op >= VCU__FIRST_CUDA_OP;
}

/* ---- completion ---------------------------------------------------------- */

void vcu__complete(vcu_request_t *req, uint32_t status, size_t payload_len)
{
    struct vcu_resp_hdr rh;

    if (!req->resp || req->resp_cap < sizeof(rh)) {
        req->resp_len = 0;
        if (req->done)
            req->done(req);
        return;
    }
    if (payload_len > vcu__resp_cap(req) || payload_len > UINT32_MAX) {
        status = VCU_S_ERANGE;
        payload_len = 0;
    }
    memset(&rh, 0, sizeof(rh));
    rh.status = status;
    rh.payload_len = (uint32_t)payload_len;
    if (req->req && req->req_len >= sizeof(struct vcu_req_hdr))
        memcpy(&rh.req_id, (const char *)req->req + offsetof(struct vcu_req_hdr, req_id),
               sizeof(rh.req_id));
    memcpy(req->resp, &rh, sizeof(rh));
    req->resp_len = sizeof(rh) + payload_len;
    if (req->done)
        req->done(req);
}

/* ---- validation ---------------------------------------------------------- */

/*
 * Checks everything about the request that does not depend on backend
 * state.  Fills *hdr and *payload (inside req->req).  Returns a wire status.
 */
static uint32_t vcu__validate(const vcu_request_t *req, struct vcu_req_hdr *hdr,
                              const unsigned char **payload)
{
    const unsigned char *b = req->req;
    size_t padded, need, op_size;
    uint64_t total = 0;
    unsigned int i, j;

    if (!b || req->req_len < sizeof(*hdr))
        return VCU_S_EINVAL;
    memcpy(hdr, b, sizeof(*hdr));
    if (hdr->reserved != 0 || (hdr->flags & ~VCU_REQ_F_ASYNC) != 0)
        return VCU_S_EINVAL;
    if (hdr->payload_len > VCU_MAX_PAYLOAD || hdr->nsegs > VCU_MAX_SEGS)
        return VCU_S_E2BIG;
    if (hdr->nsegs != req->nsegs)
        return VCU_S_EINVAL;
    /* Both bounded above (64 KiB, 16 segments): no overflow possible. */
    padded = ((size_t)hdr->payload_len + 7) & ~(size_t)7;
    need = sizeof(*hdr) + padded + (size_t)hdr->nsegs * sizeof(struct vcu_seg);
    if (need > req->req_len)
        return VCU_S_EINVAL;
    if (vcu__op_req_size(hdr->opcode, &op_size) < 0)
        return VCU_S_ENOTSUP;
    if (hdr->payload_len < op_size)
        return VCU_S_EINVAL;
    if (hdr->nsegs && !req->segs)
        return VCU_S_EINVAL;

    for (i = 0; i < hdr->nsegs; i++) {
        const vcu_segment_t *s = &req->segs[i];
        struct vcu_seg ws;
        uint64_t sum = 0;

        memcpy(&ws, b + sizeof(*hdr) + padded + (size_t)i * sizeof(ws), sizeof(ws));
        /* Exactly one direction, STABLE optional, nothing else. */
        if ((VCU_SEG_DIR(ws.flags) != VCU_SEG_TO_DEVICE &&
             VCU_SEG_DIR(ws.flags) != VCU_SEG_FROM_DEVICE) ||
            (ws.flags & ~(VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE | VCU_SEG_F_STABLE)) != 0)
            return VCU_S_EINVAL;
        if (s->flags != ws.flags || s->len != ws.len)
            return VCU_S_EINVAL;
        if (s->iovcnt && !s->iov)
            return VCU_S_EINVAL;
        for (j = 0; j < s->iovcnt; j++) {
            uint64_t l = s->iov[j].iov_len;

            if (l > s->len - sum)
                return VCU_S_EINVAL;
            if (l && !s->iov[j].iov_base)
                return VCU_S_EINVAL;
            sum += l;
        }
        if (sum != s->len)
            return VCU_S_EINVAL;
        if (s->len > VCU_MAX_XFER - total)
            return VCU_S_E2BIG;
        total += s->len;
    }
    *payload = b + sizeof(*hdr);
    return VCU_S_OK;
}

/* Opcode-specific checks of the fixed request struct that the core owns. */
static uint32_t vcu__validate_op(const vcu_request_t *req, const struct vcu_req_hdr *hdr,
                                 const unsigned char *payload)
{
    switch (hdr->opcode) {
    case VCU_OP_SESSION_OPEN:
    case VCU_OP_SESSION_CLOSE:
    case VCU_OP_SESSION_FENCE:
        if (hdr->nsegs != 0)
            return VCU_S_EINVAL;
        break;
    case VCU_OP_ECHO: {
        struct vcu_echo_req er;
        size_t tail = hdr->payload_len - sizeof(er);

        memcpy(&er, payload, sizeof(er));
        if ((er.flags & ~VCU_ECHO_F_FILL) != 0 || er.delay_ms > VCU__ECHO_MAX_DELAY_MS)
            return VCU_S_EINVAL;
        if (vcu__resp_cap(req) < sizeof(struct vcu_echo_resp) + tail)
            return VCU_S_ERANGE;
        break;
    }
    default:
        break;
    }
    return VCU_S_OK;
}

/* ---- sessions ------------------------------------------------------------ */

/* Caller holds be->lock.  Open sessions only; closing ones are gone for
 * new requests. */
static vcu__sess_t *vcu__sess_lookup_locked(vcu_backend_t *be, uint64_t id)
{
    uint64_t slot = (id & 0xffffffffu);
    vcu__sess_t *s;

    if (slot == 0 || slot > be->max_sessions)
        return NULL;
    s = be->sessions[slot - 1];
    if (!s || s->id != id || s->closing || s->cancel)
        return NULL;
    return s;
}

/* Joins and frees the closed sessions whose workers have finished. */
static void vcu__reap_zombies(vcu_backend_t *be)
{
    vcu__sess_t *done = NULL, **pp, *s;

    pthread_mutex_lock(&be->lock);
    pp = &be->zombies;
    while ((s = *pp) != NULL) {
        if (s->finished) {
            *pp = s->zombie_next;
            s->zombie_next = done;
            done = s;
        } else {
            pp = &s->zombie_next;
        }
    }
    pthread_mutex_unlock(&be->lock);
    while ((s = done) != NULL) {
        done = s->zombie_next;
        if (!s->driven)
            pthread_join(s->thread, NULL);
        vcu__sess_destroy(s);
    }
}

/*
 * Caller holds be->lock, which this drops and retakes.  Releases the
 * session's host callbacks (a worker blocked in a synchronize behind a
 * guest callback that will never be done) and its parked CALLBACK_WAIT,
 * as the session is ending.  inline_busy keeps cs alive meanwhile.
 */
static void vcu__sess_cancel_cuda_locked(vcu_backend_t *be, vcu__sess_t *s)
{
    vcu__cuda_sess_t *cs = s->cs;

    if (!cs)
        return;
    s->inline_busy++;
    pthread_mutex_unlock(&be->lock);
    vcu__cuda_sess_cancel(cs);
    pthread_mutex_lock(&be->lock);
    if (--s->inline_busy == 0)
        vcu__wake_locked(s);
}

/* ---- SESSION_OPEN -------------------------------------------------------- */

/* A new session, not yet in the table: its queues, the features asked for
 * that the backend offers, its condvar.  NULL without memory. */
static vcu__sess_t *vcu__sess_new(vcu_backend_t *be, uint64_t features)
{
    pthread_condattr_t ca;
    vcu__sess_t *s;
    uint64_t offered;

    s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->be = be;
    vcu__queue_init(&s->queue);
    vcu__queue_init(&s->prio);
    vcu__queue_init(&s->waiting);
    offered = VCU__OFFERED_ALWAYS | (be->cu ? VCU_FEAT_CUDA | VCU_FEAT_BATCH : 0) |
              (be->cu && vcu__cuda_has_modcache(be->cu) ? VCU_FEAT_MODULE_CACHE : 0);
    s->features = features & offered;
    if (pthread_condattr_init(&ca) != 0) {
        free(s);
        return NULL;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_cond_init(&s->cond, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        free(s);
        return NULL;
    }
    pthread_condattr_destroy(&ca);
    return s;
}

/*
 * Puts a new session in a free slot, with its id, and starts its worker
 * (a driven session waits for vcu_backend_drive() instead).  Returns a
 * wire status; on failure s is freed.
 */
static uint32_t vcu__sess_start(vcu_backend_t *be, vcu__sess_t *s)
{
    unsigned int slot;

    pthread_mutex_lock(&be->lock);
    if (be->nlive >= be->max_sessions) {
        pthread_mutex_unlock(&be->lock);
        vcu__sess_destroy(s);
        return VCU_S_EBUSY;
    }
    for (slot = 0; slot < be->max_sessions; slot++)
        if (!be->sessions[slot])
            break;
    s->slot = slot;
    /* Slot in the low half (never 0), a never-reused generation above. */
    s->id = (be->next_gen++ << 32) | (uint64_t)(slot + 1);
    s->in_table = true;
    s->driven = be->cfg.pump != NULL;
    s->sched = s->driven ? be->cfg.sched : NULL;
    if (s->driven) {
        vcu__sess_t **pp = &be->undriven;

        while (*pp)
            pp = &(*pp)->zombie_next;
        *pp = s;
    } else if (pthread_create(&s->thread, NULL, vcu__worker, s) != 0) {
        /* Started under the lock: the worker's first step is to take it. */
        pthread_mutex_unlock(&be->lock);
        vcu__sess_destroy(s);
        return VCU_S_ENOMEM;
    }
    be->sessions[slot] = s;
    be->nlive++;
    pthread_mutex_unlock(&be->lock);
    return VCU_S_OK;
}

static uint32_t vcu__session_open(vcu_backend_t *be, vcu_request_t *req, const unsigned char *payload,
                                  size_t *out_len)
{
    struct vcu_session_open_req oq;
    struct vcu_session_open_resp orsp;
    vcu__sess_t *s;
    uint32_t st;

    memcpy(&oq, payload, sizeof(oq));
    if (oq.reserved[0] || oq.reserved[1])
        return VCU_S_EINVAL;
    if (oq.version_min > VCU_PROTO_VERSION || oq.version_max < VCU_PROTO_VERSION)
        return VCU_S_EVERSION;
    if (vcu__resp_cap(req) < sizeof(orsp))
        return VCU_S_ERANGE;

    vcu__reap_zombies(be);
    s = vcu__sess_new(be, oq.features);
    if (!s)
        return VCU_S_ENOMEM;
    st = vcu__sess_start(be, s);
    if (st != VCU_S_OK)
        return st;

    memset(&orsp, 0, sizeof(orsp));
    orsp.version = VCU_PROTO_VERSION;
    orsp.max_payload = VCU_MAX_PAYLOAD;
    orsp.features = s->features;
    orsp.session = s->id;
    orsp.max_xfer = VCU_MAX_XFER;
    orsp.max_segs = VCU_MAX_SEGS;
    memcpy(vcu__resp_payload(req), &orsp, sizeof(orsp));
    *out_len = sizeof(orsp);
    return VCU_S_OK;
}

/* ---- submit -------------------------------------------------------------- */

/*
 * The checks before anything is taken: a reply buffer to write to, a
 * backend, a valid request.  Fills *hdr and *payload; false when the
 * request is done already (completed with the failure, or, with no room
 * for a reply, only its done called).
 */
static bool vcu__submit_check(vcu_backend_t *be, vcu_request_t *req, struct vcu_req_hdr *hdr,
                              const unsigned char **payload)
{
    uint32_t st;

    if (!req)
        return false;
    req->resp_len = 0;
    if (!req->resp || req->resp_cap < sizeof(struct vcu_resp_hdr)) {
        if (req->done)
            req->done(req);         /* nothing can be written */
        return false;
    }
    if (!be) {
        vcu__complete(req, VCU_S_EIO, 0);
        return false;
    }
    st = vcu__validate(req, hdr, payload);
    if (st == VCU_S_OK)
        st = vcu__validate_op(req, hdr, *payload);
    if (st != VCU_S_OK) {
        vcu__complete(req, st, 0);
        return false;
    }
    return true;
}

/* Caller holds be->lock.  The request's open session, in *out, if it
 * takes the request's opcode and flags; returns a wire status. */
static uint32_t vcu__sess_admit_locked(vcu_backend_t *be, const struct vcu_req_hdr *hdr,
                                       vcu__sess_t **out)
{
    vcu__sess_t *s = vcu__sess_lookup_locked(be, hdr->session);

    if (!s)
        return VCU_S_ENOSESSION;
    if ((hdr->flags & VCU_REQ_F_ASYNC) && !(s->features & VCU_FEAT_ASYNC))
        return VCU_S_ENOTSUP;
    if (hdr->opcode == VCU_OP_ECHO && !(s->features & VCU_FEAT_ECHO))
        return VCU_S_ENOTSUP;
    if (vcu__op_is_cuda(hdr->opcode) && !be->cu)
        return VCU_S_ENODEV;
    if (vcu__op_is_cuda(hdr->opcode) && !(s->features & VCU_FEAT_CUDA))
        return VCU_S_ENOTSUP;
    if ((hdr->opcode == VCU_OP_CU_MODULE_LOAD_HASH || hdr->opcode == VCU_OP_CU_MODULE_LOAD_KEEP) &&
        !(s->features & VCU_FEAT_MODULE_CACHE))
        return VCU_S_ENOTSUP;
    if (hdr->opcode == VCU_OP_CU_BATCH && !(s->features & VCU_FEAT_BATCH))
        return VCU_S_ENOTSUP;
    *out = s;
    return VCU_S_OK;
}

/*
 * Takes be->lock, the request's session (*out) and an item for it: it
 * (one of its own, allocated by the caller), else a cached one, else one
 * allocated without the lock.  Returns the item with the lock held; or,
 * having completed the request with the failure (and freed it), NULL
 * without the lock.
 */
static vcu__item_t *vcu__submit_item_locked(vcu_backend_t *be, vcu_request_t *req,
                                            const struct vcu_req_hdr *hdr, vcu__item_t *it,
                                            vcu__sess_t **out)
{
    uint32_t st;

    pthread_mutex_lock(&be->lock);
    for (;;) {
        st = vcu__sess_admit_locked(be, hdr, out);
        if (st != VCU_S_OK) {
            pthread_mutex_unlock(&be->lock);
            free(it);
            vcu__complete(req, st, 0);
            return NULL;
        }
        if (it || (it = vcu__item_get_locked(be)) != NULL)
            return it;
        /* Cache empty: allocate without the lock, then look again (the
         * session may have gone meanwhile). */
        pthread_mutex_unlock(&be->lock);
        it = malloc(sizeof(*it) + VCU__ITEM_INLINE);
        if (!it) {
            vcu__complete(req, VCU_S_ENOMEM, 0);
            return NULL;
        }
        it->big = false;
        pthread_mutex_lock(&be->lock);
    }
}

/* Caller holds be->lock.  The item takes the request: its header, and its
 * payload in place or, with copy, copied into the item. */
static void vcu__item_fill_locked(vcu__item_t *it, vcu_request_t *req,
                                  const struct vcu_req_hdr *hdr, const unsigned char *payload,
                                  bool copy)
{
    it->next = NULL;
    it->req = req;
    it->hdr = *hdr;
    it->resp_save = NULL;
    if (copy) {
        memcpy(it->buf, payload, hdr->payload_len);
        it->payload = it->buf;
    } else {
        it->payload = payload;
    }
}

/* Runs an inline CUDA opcode on the calling thread if the session has CUDA
 * state; otherwise hands it to the worker ahead of the queue. */
static void vcu__submit_inline(vcu_backend_t *be, vcu__sess_t *s, vcu__item_t *it)
{
    vcu__cuda_sess_t *cs = s->cs;

    if (!cs) {
        vcu__queue_push(&s->prio, it);
        vcu__wake_locked(s);
        pthread_mutex_unlock(&be->lock);
        return;
    }
    s->inline_busy++;
    pthread_mutex_unlock(&be->lock);

    (void)vcu__exec_cuda(NULL, cs, it);

    pthread_mutex_lock(&be->lock);
    if (--s->inline_busy == 0)
        vcu__wake_locked(s);
    it = vcu__item_put_locked(be, it);
    pthread_mutex_unlock(&be->lock);
    free(it);
}

/* Caller holds be->lock, which this drops.  Queues the item for the
 * worker; a SESSION_CLOSE also starts the session's end. */
static void vcu__submit_queue_locked(vcu_backend_t *be, vcu__sess_t *s, vcu__item_t *it)
{
    vcu__queue_push(&s->queue, it);
    vcu__wake_locked(s);
    if (it->hdr.opcode == VCU_OP_SESSION_CLOSE) {
        s->closing = true;          /* also cuts a running echo delay short */
        pthread_cond_signal(&s->cond);
        vcu__sess_cancel_cuda_locked(be, s);
    }
    pthread_mutex_unlock(&be->lock);
}

VCU_EXPORT void vcu_backend_submit(vcu_backend_t *be, vcu_request_t *req)
{
    struct vcu_req_hdr hdr;
    const unsigned char *payload = NULL;
    vcu__item_t *it = NULL;
    vcu__sess_t *s;
    size_t out_len = 0;
    uint32_t st;
    bool copy;

    if (!vcu__submit_check(be, req, &hdr, &payload))
        return;
    if (hdr.opcode == VCU_OP_SESSION_OPEN) {
        st = hdr.session != 0 ? VCU_S_EINVAL : vcu__session_open(be, req, payload, &out_len);
        vcu__complete(req, st, st == VCU_S_OK ? out_len : 0);
        return;
    }

    /* An unaligned payload is copied; one too big for a cached item gets
     * an item of its own, allocated before the lock. */
    copy = ((uintptr_t)payload & 7) != 0 && hdr.payload_len > 0;
    if (copy && hdr.payload_len > VCU__ITEM_INLINE) {
        it = malloc(sizeof(*it) + hdr.payload_len);
        if (!it) {
            vcu__complete(req, VCU_S_ENOMEM, 0);
            return;
        }
        it->big = true;
    }
    it = vcu__submit_item_locked(be, req, &hdr, it, &s);
    if (!it)
        return;
    vcu__item_fill_locked(it, req, &hdr, payload, copy);
    if (vcu__op_is_cuda(hdr.opcode) && vcu__cuda_is_inline(hdr.opcode))
        vcu__submit_inline(be, s, it);  /* unlocks */
    else
        vcu__submit_queue_locked(be, s, it);    /* unlocks */
}

VCU_EXPORT void vcu_backend_submit_state(vcu_backend_t *be, vcu_request_t *req, int fd)
{
    struct vcu_req_hdr hdr;
    vcu__item_t *it;
    vcu__sess_t *s;

    if (!req)
        return;
    req->resp_len = 0;
    if (!req->resp || req->resp_cap < sizeof(struct vcu_resp_hdr)) {
        if (req->done)
            req->done(req);
        return;
    }
    if (!be || !req->req || req->req_len < sizeof(hdr)) {
        vcu__complete(req, be ? VCU_S_EINVAL : VCU_S_EIO, 0);
        return;
    }
    memcpy(&hdr, req->req, sizeof(hdr));
    if (!VCU_BACKEND_OP_IS_STATE(hdr.opcode) ||
        hdr.flags != 0 || hdr.payload_len != 0 || hdr.nsegs != 0 || req->nsegs != 0 ||
        hdr.reserved != 0 || fd < 0) {
        vcu__complete(req, VCU_S_EINVAL, 0);
        return;
    }
    if (!be->cu) {
        vcu__complete(req, VCU_S_ENODEV, 0);
        return;
    }
    it = vcu__submit_item_locked(be, req, &hdr, NULL, &s);
    if (!it)
        return;
    vcu__item_fill_locked(it, req, &hdr, NULL, false);
    it->buf[0] = (uint64_t)fd;      /* the item's own: no guest writes it */
    it->payload = it->buf;
    vcu__submit_queue_locked(be, s, it);    /* unlocks */
}

/* ---- execute ------------------------------------------------------------- */

typedef struct vcu__waiter_s {
    pthread_mutex_t lock;           /* taken to set done and to sleep on it */
    pthread_cond_t cond;
    atomic_uint done;               /* also read without the lock (spin) */
    vcu_done_cb cb;                 /* the caller's, restored on done */
    void *opaque;
} vcu__waiter_t;

static void vcu__execute_done(vcu_request_t *req)
{
    vcu__waiter_t *w = req->opaque;

    req->done = w->cb;
    req->opaque = w->opaque;
    pthread_mutex_lock(&w->lock);
    atomic_store_explicit(&w->done, 1, memory_order_release);
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* req->done is not called; req->done and req->opaque are as they were on
 * return. */
VCU_EXPORT int vcu_backend_execute(vcu_backend_t *be, vcu_request_t *req)
{
    vcu__waiter_t w;

    if (!be || !req)
        return VCU_EINVAL;
    if (pthread_mutex_init(&w.lock, NULL) != 0)
        return VCU_ENOMEM;
    if (pthread_cond_init(&w.cond, NULL) != 0) {
        pthread_mutex_destroy(&w.lock);
        return VCU_ENOMEM;
    }
    atomic_init(&w.done, 0);
    w.cb = req->done;
    w.opaque = req->opaque;
    req->done = vcu__execute_done;
    req->opaque = &w;
    vcu_backend_submit(be, req);
    /* Most replies come within microseconds.  The lock is taken even when
     * the spin saw done: the callback may still be inside it. */
    vcu__spin_while(&w.done, 0);
    pthread_mutex_lock(&w.lock);
    while (!atomic_load_explicit(&w.done, memory_order_acquire))
        pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    return 0;
}

/* ---- lifetime ------------------------------------------------------------ */

VCU_EXPORT int vcu_backend_new(const vcu_backend_config_t *cfg, vcu_backend_t **out)
{
    vcu_backend_t *be;
    int rc;

    if (!out)
        return VCU_EINVAL;
    *out = NULL;
    if (cfg && cfg->max_sessions > VCU__MAX_SESSIONS)
        return VCU_EINVAL;
    be = calloc(1, sizeof(*be));
    if (!be)
        return VCU_ENOMEM;
    if (cfg)
        be->cfg = *cfg;
    be->max_sessions = be->cfg.max_sessions ? be->cfg.max_sessions : VCU__DEFAULT_SESSIONS;
    be->cfg.max_sessions = be->max_sessions;
    be->next_gen = 1;
    if ((be->cfg.gpus && !(be->gpus = strdup(be->cfg.gpus))) ||
        (be->cfg.libcuda && !(be->libcuda = strdup(be->cfg.libcuda)))) {
        rc = VCU_ENOMEM;
        goto err_strings;
    }
    be->cfg.gpus = be->gpus;
    be->cfg.libcuda = be->libcuda;
    be->sessions = calloc(be->max_sessions, sizeof(*be->sessions));
    if (!be->sessions) {
        rc = VCU_ENOMEM;
        goto err_strings;
    }
    if (pthread_mutex_init(&be->lock, NULL) != 0) {
        rc = VCU_ENOMEM;
        goto err_sessions;
    }

    be->cu_err[0] = '\0';
    if (vcu__cuda_init(&be->cfg, &be->cu, be->cu_err, sizeof(be->cu_err)) < 0 || !be->cu) {
        be->cu = NULL;
        be->cu_err[sizeof(be->cu_err) - 1] = '\0';
        if (!be->cu_err[0])
            strcpy(be->cu_err, "CUDA driver not available");
    }
    *out = be;
    return 0;

err_sessions:
    free(be->sessions);
err_strings:
    free(be->gpus);
    free(be->libcuda);
    free(be);
    return rc;
}

VCU_EXPORT void vcu_backend_reset(vcu_backend_t *be)
{
    vcu__sess_t *list = NULL, *s;
    unsigned int i;

    if (!be)
        return;
    pthread_mutex_lock(&be->lock);
    for (i = 0; i < be->max_sessions; i++) {
        s = be->sessions[i];
        if (!s)
            continue;
        be->sessions[i] = NULL;
        s->in_table = false;
        s->cancel = true;
        if (s->driven && !s->driving) {
            /* Never driven: nothing of it runs; freed below. */
            vcu__sess_t **pp = &be->undriven;

            while (*pp != s)
                pp = &(*pp)->zombie_next;
            *pp = s->zombie_next;
            s->finished = true;
        }
        vcu__wake_locked(s);
        pthread_cond_signal(&s->cond);
        s->zombie_next = list;
        list = s;
    }
    be->nlive = 0;
    while ((s = be->zombies) != NULL) {
        be->zombies = s->zombie_next;
        s->zombie_next = list;
        list = s;
    }
    /* Out of the table now: only this thread and the workers see them. */
    for (s = list; s; s = s->zombie_next)
        vcu__sess_cancel_cuda_locked(be, s);
    pthread_mutex_unlock(&be->lock);

    while ((s = list) != NULL) {
        bool running = false;

        list = s->zombie_next;
        if (s->driven) {
            /* Its driver's thread sees cancel at its next step and frees
             * it at the end; only a finished one is ours. */
            pthread_mutex_lock(&be->lock);
            running = !s->finished;
            s->orphan = running;
            pthread_mutex_unlock(&be->lock);
        } else {
            pthread_join(s->thread, NULL);
        }
        if (!running)
            vcu__sess_destroy(s);
    }
}

VCU_EXPORT int vcu_backend_drive(vcu_backend_t *be)
{
    vcu__sess_t *s;

    if (!be || !be->cfg.pump)
        return VCU_EINVAL;
    pthread_mutex_lock(&be->lock);
    s = be->undriven;
    if (s) {
        be->undriven = s->zombie_next;
        s->zombie_next = NULL;
        s->driving = true;
    }
    pthread_mutex_unlock(&be->lock);
    if (!s)
        return VCU_ENOSESSION;
    vcu__worker(s);
    return 0;
}

VCU_EXPORT void vcu_backend_free(vcu_backend_t *be)
{
    if (!be)
        return;
    vcu_backend_reset(be);
    if (be->cu)
        vcu__cuda_fini(be->cu);
    while (be->items) {
        vcu__item_t *it = be->items;

        be->items = it->next;
        free(it);
    }
    pthread_mutex_destroy(&be->lock);
    free(be->sessions);
    free(be->gpus);
    free(be->libcuda);
    free(be);
}

VCU_EXPORT int vcu_backend_add_ram(vcu_backend_t *be, void *hva, size_t len)
{
    if (!be)
        return VCU_EINVAL;
    if (!be->cu)
        return VCU_ENODEV;
    if (!be->cfg.register_ram)
        return VCU_ENOTSUP;
    return vcu__cuda_add_ram(be->cu, hva, len);
}

VCU_EXPORT int vcu_backend_remove_ram(vcu_backend_t *be, void *hva, size_t len)
{
    if (!be)
        return VCU_EINVAL;
    if (!be->cu)
        return VCU_ENODEV;
    return vcu__cuda_remove_ram(be->cu, hva, len);
}

VCU_EXPORT int vcu_backend_host_charge(vcu_backend_t *be, uint64_t n)
{
    if (!be)
        return VCU_EINVAL;
    return be->cu ? vcu__cuda_host_charge(be->cu, n) : 0;
}

VCU_EXPORT void vcu_backend_host_uncharge(vcu_backend_t *be, uint64_t n)
{
    if (be && be->cu)
        vcu__cuda_host_uncharge(be->cu, n);
}

VCU_EXPORT const char *vcu_backend_cuda_error(const vcu_backend_t *be)
{
    if (!be)
        return "no backend";
    return be->cu ? NULL : be->cu_err;
}

VCU_EXPORT unsigned int vcu_backend_session_count(vcu_backend_t *be)
{
    unsigned int n;

    if (!be)
        return 0;
    pthread_mutex_lock(&be->lock);
    n = be->nlive;
    pthread_mutex_unlock(&be->lock);
    return n;
}
