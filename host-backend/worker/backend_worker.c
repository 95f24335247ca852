/*
 * virtio-cuda host backend core, the session workers: a session's worker
 * (its own thread, or vcu_backend_drive()'s caller for a driven session)
 * runs the requests vcu_backend_submit() (backend.c) queued for it: ECHO
 * and SESSION_FENCE itself, the CUDA opcodes through the executor
 * (cuda*.c, see vcu_backend_int.h).  It holds GPU work while the VM has
 * no compute grant, and ends the session.  The lock order, lifetimes and
 * the hand-over from the submitter: backend.c.
 *
 * Waiting
 * -------
 * A worker never blocks on the GPU or on time: it issues its requests in
 * FIFO order (so CUDA stream order holds), and one that must wait (an
 * ECHO delay; a synchronize, synchronous copy or fence: VCU__WAITING) is
 * moved, with its item, to the session's s->waiting list, which only the
 * worker touches.  When the queue is empty, and every VCU__POLL_NS while
 * it is not, the worker polls that list (the deadline, or the executor's
 * events) and completes what is done, in any order: each reply carries
 * its req_id.  A SESSION_FENCE is done only once every request waiting
 * ahead of it is.  Between polls it sleeps in short timed waits on
 * s->cond, so a new request wakes it at once.  When the session ends,
 * waiting requests complete with VCU_S_ECANCELED, after the session's
 * final synchronize (vcu__cuda_sess_free): the transport unmaps a
 * request's segments at completion, and the GPU may use them until then.
 */
#include <endian.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "vcu_backend_int.h"
#include "vcu_sched.h"

/*
 * Waiting requests: how long the worker spins polling while GPU work of
 * its session is pending (a 64 MiB copy takes about 1.2 ms: a worker that
 * slept through its end would add a large share of that to the copy, as
 * CUDA's own spin-wait avoids), then the shortest and longest sleep between
 * polls, and how often a busy worker polls them between requests.
 */
#define VCU__WAIT_SPIN_NS 2000000L
#define VCU__POLL_MIN_NS 20000L
#define VCU__POLL_MAX_NS 50000L
#define VCU__POLL_NS 50000L

/* ---- completion ---------------------------------------------------------- */

/* The one translation from a library code (0 or VCU_E*) to a wire status. */
static uint32_t vcu__status_from_code(int code)
{
    if (code == 0)
        return VCU_S_OK;
    if (code < 0 && code > -VCU_S_COUNT_)
        return (uint32_t)-code;
    return VCU_S_EIO;
}

/* Completes the item's request; the item itself stays the caller's. */
static void vcu__complete_item(vcu__item_t *it, uint32_t status, size_t payload_len)
{
    vcu_request_t *req = it->req;

    it->req = NULL;
    if (it->resp_save) {
        req->resp = it->resp_save;
        req->resp_cap = it->resp_cap_save;
        it->resp_save = NULL;
        payload_len = 0;
    }
    vcu__complete(req, status, payload_len);
}

/* ---- ECHO ---------------------------------------------------------------- */

/* Walks the segments of one direction as one byte stream. */
typedef struct vcu__cursor_s {
    const vcu_segment_t *segs;
    unsigned int nsegs;
    uint32_t dir;
    unsigned int seg;
    unsigned int iov;
    size_t off;                     /* inside the current iovec */
} vcu__cursor_t;

static void vcu__cursor_init(vcu__cursor_t *c, const vcu_segment_t *segs, unsigned int nsegs,
                             uint32_t dir)
{
    memset(c, 0, sizeof(*c));
    c->segs = segs;
    c->nsegs = nsegs;
    c->dir = dir;
}

/* The contiguous bytes at the cursor; 0 at the end of the stream. */
static size_t vcu__cursor_peek(vcu__cursor_t *c, unsigned char **p)
{
    for (; c->seg < c->nsegs; c->seg++, c->iov = 0, c->off = 0) {
        const vcu_segment_t *s = &c->segs[c->seg];

        if (VCU_SEG_DIR(s->flags) != c->dir)
            continue;
        for (; c->iov < s->iovcnt; c->iov++, c->off = 0) {
            const struct iovec *v = &s->iov[c->iov];

            if (c->off < v->iov_len) {
                *p = (unsigned char *)v->iov_base + c->off;
                return v->iov_len - c->off;
            }
        }
    }
    return 0;
}

static uint64_t vcu__stream_len(const vcu_segment_t *segs, unsigned int nsegs, uint32_t dir)
{
    uint64_t n = 0;
    unsigned int i;

    for (i = 0; i < nsegs; i++)
        if (VCU_SEG_DIR(segs[i].flags) == dir)
            n += segs[i].len;       /* validated: total <= VCU_MAX_XFER */
    return n;
}

/* Worker: puts an issued request on the waiting list; the item goes
 * with it. */
static void vcu__wait_push(vcu__sess_t *s, vcu__item_t *it)
{
    vcu__queue_push(&s->waiting, it);
}

/* Does the ECHO's work and completes it. */
static void vcu__echo_finish(vcu__item_t *it)
{
    vcu_request_t *req = it->req;
    const vcu_segment_t *segs = req->segs;
    unsigned int nsegs = req->nsegs;
    struct vcu_echo_req er;
    struct vcu_echo_resp rsp;
    size_t tail = it->hdr.payload_len - sizeof(er);
    unsigned char *out = vcu__resp_payload(req);
    vcu__cursor_t in, wr;
    unsigned char *p, *q;
    uint64_t hash = VCU_FNV64_INIT, in_len, out_len, n, off;
    size_t a, b, k;

    memcpy(&er, it->payload, sizeof(er));
    in_len = vcu__stream_len(segs, nsegs, VCU_SEG_TO_DEVICE);
    out_len = vcu__stream_len(segs, nsegs, VCU_SEG_FROM_DEVICE);

    vcu__cursor_init(&in, segs, nsegs, VCU_SEG_TO_DEVICE);
    while ((a = vcu__cursor_peek(&in, &p)) != 0) {
        for (k = 0; k < a; k++) {
            hash ^= p[k];
            hash *= VCU_FNV64_PRIME;
        }
        in.off += a;
    }

    vcu__cursor_init(&wr, segs, nsegs, VCU_SEG_FROM_DEVICE);
    if (er.flags & VCU_ECHO_F_FILL) {
        off = 0;
        while ((b = vcu__cursor_peek(&wr, &q)) != 0) {
            for (k = 0; k < b; k++)
                q[k] = vcu_echo_byte(er.seed, off + k);
            off += b;
            wr.off += b;
        }
        n = out_len;
    } else {
        n = in_len < out_len ? in_len : out_len;
        vcu__cursor_init(&in, segs, nsegs, VCU_SEG_TO_DEVICE);
        for (off = 0; off < n;) {
            a = vcu__cursor_peek(&in, &p);
            b = vcu__cursor_peek(&wr, &q);
            k = a < b ? a : b;
            if (k > n - off)
                k = (size_t)(n - off);
            if (k == 0)
                break;              /* cannot happen: both streams hold >= n bytes */
            memmove(q, p, k);       /* the guest may pass overlapping pages */
            in.off += k;
            wr.off += k;
            off += k;
        }
    }

    memset(&rsp, 0, sizeof(rsp));
    rsp.in_bytes = in_len;
    rsp.out_bytes = n;
    rsp.in_hash = hash;
    memcpy(out, &rsp, sizeof(rsp));
    memcpy(out + sizeof(rsp), (const unsigned char *)it->payload + sizeof(er), tail);
    vcu__complete_item(it, VCU_S_OK, sizeof(rsp) + tail);
}

/* An ECHO with a delay waits for its deadline on the waiting list (its
 * data are read and written then).  Returns true if it keeps the item. */
static bool vcu__run_echo(vcu__sess_t *s, vcu__item_t *it)
{
    struct vcu_echo_req er;

    memcpy(&er, it->payload, sizeof(er));
    if (er.delay_ms == 0) {
        vcu__echo_finish(it);
        return false;
    }
    it->deadline = vcu__now_ns() + (uint64_t)er.delay_ms * 1000000u;
    it->wait = NULL;
    vcu__wait_push(s, it);
    return true;
}

/* ---- CUDA dispatch ------------------------------------------------------- */

/* On the worker: creates the session's CUDA state on first use. */
static int vcu__sess_cuda(vcu__sess_t *s)
{
    vcu__cuda_sess_t *cs = NULL;
    bool ending;
    int rc;

    if (s->cs)
        return 0;
    rc = vcu__cuda_sess_new(s->be->cu, s->id, &cs);
    if (rc == 0 && !cs)
        rc = VCU_EIO;
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&s->be->lock);
    s->cs = cs;
    ending = s->closing || s->cancel;
    pthread_mutex_unlock(&s->be->lock);
    /* Created after close or reset began: let no callback wait. */
    if (ending)
        vcu__cuda_sess_cancel(cs);
    return 0;
}

/* Runs one CUDA opcode (vcu_backend_int.h): on the worker, and on the
 * submitting thread for the inline opcodes (s == NULL). */
bool vcu__exec_cuda(vcu__sess_t *s, vcu__cuda_sess_t *cs, vcu__item_t *it)
{
    vcu_request_t *req = it->req;
    vcu__cuda_wait_t *w = NULL;
    size_t out_len = 0;
    uint32_t st;

    st = vcu__cuda_exec(cs, &it->hdr, it->payload, req->segs, req->nsegs, vcu__resp_payload(req),
                        vcu__resp_cap(req), &out_len, req, &w);
    if (st == VCU__PARKED) {
        it->req = NULL;             /* the executor's now */
        return false;
    }
    if (st == VCU__WAITING && w != NULL && s != NULL) {
        /* Work already done (idle streams): reply at once. */
        if (!vcu__cuda_wait_poll(cs, w)) {
            it->wait = w;
            vcu__wait_push(s, it);
            return true;
        }
        st = vcu__cuda_wait_finish(cs, w, req, &out_len);
    }
    vcu__complete_item(it, st, out_len);
    return false;
}

static bool vcu__run_cuda(vcu__sess_t *s, vcu__item_t *it)
{
    int rc = vcu__sess_cuda(s);

    if (rc < 0) {
        vcu__complete_item(it, vcu__status_from_code(rc), 0);
        return false;
    }
    if ((it->hdr.flags & VCU_REQ_F_ASYNC) && it->req->resp_cap < sizeof(it->async_resp)) {
        it->resp_save = it->req->resp;
        it->resp_cap_save = it->req->resp_cap;
        it->req->resp = it->async_resp;
        it->req->resp_cap = sizeof(it->async_resp);
    }
    return vcu__exec_cuda(s, s->cs, it);
}

/* SESSION_FENCE: everything queued before it has been issued (FIFO); it
 * waits for the GPU work they left behind and for the requests still
 * waiting ahead of it.  Without CUDA state there is no GPU work. */
static bool vcu__run_fence(vcu__sess_t *s, vcu__item_t *it)
{
    vcu__cuda_wait_t *w = NULL;

    if (s->cs)
        (void)vcu__cuda_sess_fence(s->cs, &w);  /* failures are deferred errors */
    if (w == NULL && !s->waiting.head) {
        vcu__complete_item(it, VCU_S_OK, 0);
        return false;
    }
    it->wait = w;
    vcu__wait_push(s, it);
    return true;
}

/*
 * Worker, without be->lock: completes the waiting requests that are done
 * (ECHO delays are cut short, cancelled, once the session is closing).
 * Returns true if it completed any; *next is the earliest ECHO deadline
 * still ahead (0 if none), *gpu whether a CUDA wait is pending.
 */
static bool vcu__poll_waiting(vcu__sess_t *s, bool closing, uint64_t *next, bool *gpu)
{
    vcu__item_t **pp = &s->waiting.head, *it;
    uint64_t now = vcu__now_ns();
    bool ahead = false, any = false;

    *next = 0;
    *gpu = false;
    while ((it = *pp) != NULL) {
        uint32_t op = it->hdr.opcode, st = VCU_S_OK;
        size_t len = 0;
        bool done;

        if (op == VCU_OP_ECHO)
            done = closing || now >= it->deadline;
        else
            done = it->wait == NULL || vcu__cuda_wait_poll(s->cs, it->wait);
        /* A fence waits for everything ahead of it. */
        if (done && op == VCU_OP_SESSION_FENCE && ahead)
            done = false;
        if (!done) {
            ahead = true;
            if (op == VCU_OP_ECHO) {
                if (*next == 0 || it->deadline < *next)
                    *next = it->deadline;
            } else if (it->wait != NULL) {
                *gpu = true;
            }
            pp = &it->next;
            continue;
        }
        *pp = it->next;
        if (s->waiting.tailp == &it->next)
            s->waiting.tailp = pp;
        it->next = NULL;
        if (op == VCU_OP_ECHO && closing) {
            vcu__complete_item(it, VCU_S_ECANCELED, 0);
        } else if (op == VCU_OP_ECHO) {
            vcu__echo_finish(it);
        } else {
            if (it->wait != NULL)
                st = vcu__cuda_wait_finish(s->cs, it->wait, op == VCU_OP_SESSION_FENCE ? NULL : it->req,
                                           &len);
            if (op == VCU_OP_SESSION_FENCE) {
                st = VCU_S_OK;
                len = 0;
            }
            it->wait = NULL;
            vcu__complete_item(it, st, len);
        }
        vcu__item_put(s->be, it);
        any = true;
    }
    return any;
}

/*
 * Worker, without be->lock: polls the waiting requests for up to
 * VCU__WAIT_SPIN_NS while GPU work is pending (else VCU__SPIN_NS), until
 * new work arrives (kick moves) or none waits.
 */
static void vcu__spin_poll(vcu__sess_t *s, bool closing, unsigned int k)
{
    uint64_t t0 = vcu__now_ns(), next;
    bool gpu;
    int i;

    while (s->waiting.head) {
        if (vcu__poll_waiting(s, closing, &next, &gpu))
            t0 = vcu__now_ns();     /* progress: keep at it */
        if (!gpu && next == 0)
            return;                 /* only a fence waiting on nothing: cannot be */
        if (s->driven)
            s->be->cfg.pump(s->be->cfg.pump_opaque, 0);
        for (i = 0; i < 32; i++) {
            if (atomic_load_explicit(&s->kick, memory_order_acquire) != k)
                return;
            vcu__pause();
        }
        if (vcu__now_ns() - t0 > (uint64_t)(gpu ? VCU__WAIT_SPIN_NS : VCU__SPIN_NS))
            return;
    }
}

/* ---- compute share ------------------------------------------------------- */

/* The opcodes that put work on the GPU: held while the VM has no grant. */
static bool vcu__op_issues_gpu(uint32_t op)
{
    switch (op) {
    case VCU_OP_CU_LAUNCH:
    case VCU_OP_CU_LAUNCH_EX:
    case VCU_OP_CU_GRAPH_LAUNCH:
    case VCU_OP_CU_MEMCPY_HTOD:
    case VCU_OP_CU_MEMCPY_DTOH:
    case VCU_OP_CU_MEMCPY_DTOD:
    case VCU_OP_CU_MEMCPY_PEER:
    case VCU_OP_CU_MEMCPY_3D_PEER:
    case VCU_OP_CU_MEMCPY_2D:
    case VCU_OP_CU_MEMSET:
    case VCU_OP_CU_STREAM_MEMOPS:
    case VCU_OP_CU_BATCH:
        return true;
    default:
        return false;
    }
}

/* Worker, be->lock held: whether the request at the queue's head must
 * wait for the VM's grant.  One atomic load when it may go. */
static bool vcu__sched_hold_locked(vcu__sess_t *s)
{
    if (s->sched == NULL || !s->queue.head || !vcu__op_issues_gpu(s->queue.head->hdr.opcode))
        return false;
    s->idle_since = 0;
    return !vcu__sched_issue(s->sched);
}

/*
 * Worker, without be->lock, each time round its idle loop with a group:
 * finishes a drain, starts one when the grant was revoked (or after
 * VCU__SCHED_IDLE_NS idle), clears want when idle that long, and asks
 * the group for the grant while held.  Returns how soon to look again
 * (ns), or -1: not before something arrives.
 */
static int64_t vcu__sched_tick(vcu__sess_t *s, bool held, bool idle)
{
    vcu_sched_t *sc = s->sched;
    uint64_t now = vcu__now_ns();
    size_t len;

    if (sc == NULL)
        return -1;
    if (!idle)
        s->idle_since = 0;
    else if (s->idle_since == 0)
        s->idle_since = now;
    vcu__sched_cap_check(sc, now);
    if (s->drain != NULL) {
        if (!vcu__cuda_wait_poll(s->cs, s->drain))
            return (int64_t)VCU__SCHED_TICK_NS;
        (void)vcu__cuda_wait_finish(s->cs, s->drain, NULL, &len);
        s->drain = NULL;
        /* Work issued after the fence (an idle drain, then the guest came
         * back) is not covered: the next drain will be. */
        if (sc->nissued == s->drain_mark)
            vcu__sched_drained(sc, vcu__now_ns());
    }
    if (sc->issued &&
        (vcu__sched_must_drain(sc) || (idle && now - s->idle_since >= VCU__SCHED_IDLE_NS))) {
        vcu__cuda_wait_t *w = NULL;

        if (s->cs != NULL)
            (void)vcu__cuda_sess_fence(s->cs, &w);  /* failures are deferred errors */
        s->drain_mark = sc->nissued;
        if (w == NULL)
            vcu__sched_drained(sc, vcu__now_ns());
        else
            s->drain = w;
        return (int64_t)VCU__SCHED_TICK_NS;
    }
    if (idle && sc->want && now - s->idle_since >= VCU__SCHED_IDLE_NS) {
        vcu__sched_set_want(sc, false);
        vcu__sched_step(sc, now);
    }
    if (held) {
        vcu__sched_step(sc, now);
        return (int64_t)VCU__SCHED_TICK_NS;
    }
    if (sc->issued || sc->want)
        return (int64_t)VCU__SCHED_TICK_NS;
    return -1;
}

/* The session is over: its work is gone with its contexts. */
static void vcu__sched_end(vcu__sess_t *s)
{
    vcu_sched_t *sc = s->sched;

    if (sc == NULL)
        return;
    s->drain = NULL;                /* freed by vcu__cuda_sess_free() */
    vcu__sched_set_want(sc, false);
    vcu__sched_drained(sc, vcu__now_ns());
}

/* ---- worker -------------------------------------------------------------- */

/* The worker's idle state: spun and nap start over with each request. */
typedef struct vcu__idle_s {
    bool spun;                      /* has spun since the last request */
    uint64_t nap;                   /* next sleep between polls of s->waiting (ns) */
    uint64_t last_poll;             /* when s->waiting was last polled */
} vcu__idle_t;

/*
 * Caller holds be->lock, which this drops and retakes.  A driven
 * session's thread, idle: takes in new requests, waiting at most
 * timeout_ns (-1: no limit) for some.
 */
static void vcu__pump_locked(vcu__sess_t *s, int64_t timeout_ns)
{
    vcu_backend_t *be = s->be;

    pthread_mutex_unlock(&be->lock);
    be->cfg.pump(be->cfg.pump_opaque, timeout_ns);
    pthread_mutex_lock(&be->lock);
}

/* Caller holds be->lock.  Sleeps on s->cond for at most ns; a push
 * signals. */
static void vcu__nap_locked(vcu__sess_t *s, uint64_t ns)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ns / 1000000000u);
    ts.tv_nsec += (long)(ns % 1000000000u);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    s->sleeping = true;
    pthread_cond_timedwait(&s->cond, &s->be->lock, &ts);
    s->sleeping = false;
}

/*
 * When the next poll of the waiting requests is due (CLOCK_MONOTONIC ns):
 * short while the GPU has work of ours (nap), growing while nothing
 * finishes; an ECHO alone waits for its deadline (next); the group's
 * tick (-1: none) may come first.
 */
static uint64_t vcu__next_poll(uint64_t now, uint64_t nap, bool gpu, uint64_t next, int64_t tick)
{
    uint64_t dl = gpu ? now + nap : next;

    if (next != 0 && next < dl)
        dl = next;
    if (tick >= 0 && (dl == 0 || now + (uint64_t)tick < dl))
        dl = now + (uint64_t)tick;
    return dl;
}

/*
 * Caller holds be->lock, which this drops and retakes.  The idle worker
 * with requests waiting: polls them, then spins polling (once after a
 * request) or sleeps until the next poll.  hh is the queue's head and k
 * the kick count when this round of the idle loop began.
 */
static void vcu__idle_waiting_locked(vcu__sess_t *s, vcu__idle_t *st, vcu__item_t *hh,
                                     unsigned int k, int64_t tick)
{
    vcu_backend_t *be = s->be;
    bool closing = s->closing, gpu;
    uint64_t next, now, dl;

    pthread_mutex_unlock(&be->lock);
    if (vcu__poll_waiting(s, closing, &next, &gpu))
        st->nap = VCU__POLL_MIN_NS;
    st->last_poll = vcu__now_ns();
    pthread_mutex_lock(&be->lock);
    if (!s->waiting.head || s->cancel || s->prio.head || s->queue.head != hh ||
        s->closing != closing)
        return;
    if (!st->spun && hh == NULL && s->drain == NULL) {
        /* Just finished a request: more may be on the way, and GPU work
         * often ends within microseconds.  Spin, polling, before sleeping
         * (not while a request waits for the grant or a drain is out: the
         * tick must come round). */
        st->spun = true;
        pthread_mutex_unlock(&be->lock);
        vcu__spin_poll(s, closing, k);
        st->last_poll = vcu__now_ns();
        pthread_mutex_lock(&be->lock);
        return;
    }
    /* Sleep until the next poll.  A push signals. */
    now = vcu__now_ns();
    dl = vcu__next_poll(now, st->nap, gpu, next, tick);
    if (dl <= now)
        return;
    if (gpu && st->nap < VCU__POLL_MAX_NS)
        st->nap = st->nap * 2 < VCU__POLL_MAX_NS ? st->nap * 2 : VCU__POLL_MAX_NS;
    if (s->driven)
        vcu__pump_locked(s, (int64_t)(dl - now));
    else
        vcu__nap_locked(s, dl - now);
}

/*
 * Caller holds be->lock, which this may drop and retake.  One round of
 * the worker's wait for a request it may run: the group's tick, then the
 * waiting requests, or the pump of a driven session, a spin after a
 * request, a sleep.  The caller looks again at what changed.
 */
static void vcu__idle_round_locked(vcu__sess_t *s, vcu__idle_t *st)
{
    vcu_backend_t *be = s->be;
    unsigned int k = atomic_load_explicit(&s->kick, memory_order_relaxed);
    /* A request held for the grant stays at the head (only this thread
     * pops): a different head is news. */
    vcu__item_t *hh = s->queue.head;
    int64_t tick = -1;

    if (s->sched != NULL) {
        pthread_mutex_unlock(&be->lock);
        tick = vcu__sched_tick(s, hh != NULL, hh == NULL && !s->waiting.head);
        pthread_mutex_lock(&be->lock);
        if (s->cancel || s->prio.head || s->queue.head != hh ||
            (hh != NULL && !vcu__sched_hold_locked(s)))
            return;
    }
    if (s->waiting.head) {
        vcu__idle_waiting_locked(s, st, hh, k, tick);
        return;
    }
    if (s->driven) {
        /* The pump spins before it sleeps. */
        vcu__pump_locked(s, tick);
        return;
    }
    if (!st->spun) {
        /* Just finished a request: more may be on the way. */
        st->spun = true;
        pthread_mutex_unlock(&be->lock);
        vcu__spin_while(&s->kick, k);
        pthread_mutex_lock(&be->lock);
        return;
    }
    s->sleeping = true;
    pthread_cond_wait(&s->cond, &be->lock);
    s->sleeping = false;
}

/* The state operation of the item's opcode: 0 or a VCU_E* code, the
 * reason in why; *left for the pass before the pause. */
static int vcu__state_op(vcu__sess_t *s, uint32_t op, int fd, uint64_t *left, char *why,
                         size_t whylen)
{
    switch (op) {
    case VCU_BACKEND_OP_SAVE:
    case VCU_BACKEND_OP_SAVE_REST:
        return vcu__cuda_sess_save(s->cs, fd, op == VCU_BACKEND_OP_SAVE_REST, why, whylen);
    case VCU_BACKEND_OP_PRE_SAVE:
        return vcu__cuda_sess_presave(s->cs, fd, left, why, whylen);
    case VCU_BACKEND_OP_PRE_COPY:
        return vcu__cuda_sess_precopy(s->cs, fd, left, why, whylen);
    default:
        return vcu__cuda_sess_load(s->cs, fd, why, whylen);
    }
}

/* VCU_BACKEND_OP_SAVE, _LOAD and the rest (vcu_backend_submit_state()):
 * between requests; a save or a load with none of the session's waiting
 * for the GPU (the pass before the pause copies on a stream of its own,
 * behind none of the guest's work). */
static bool vcu__run_state(vcu__sess_t *s, vcu__item_t *it)
{
    vcu_request_t *req = it->req;
    uint32_t op = it->hdr.opcode;
    bool pre = op == VCU_BACKEND_OP_PRE_SAVE || op == VCU_BACKEND_OP_PRE_COPY;
    size_t cap = vcu__resp_cap(req), n;
    int fd = (int)it->buf[0], rc;
    uint64_t left = 0;
    char why[256];

    why[0] = '\0';
    if (s->waiting.head && !pre) {
        snprintf(why, sizeof(why), "requests of the session still wait for the GPU");
        rc = VCU_EBUSY;
    } else if ((rc = vcu__sess_cuda(s)) == 0) {
        rc = vcu__state_op(s, op, fd, &left, why, sizeof(why));
    }
    if (rc == 0 && pre) {
        n = cap < sizeof(left) ? 0 : sizeof(left);
        left = htole64(left);
        memcpy(vcu__resp_payload(req), &left, n);
    } else {
        n = strnlen(why, sizeof(why) - 1) + 1;
        if (n > cap)
            n = cap;
        if (n > 0) {
            memcpy(vcu__resp_payload(req), why, n);
            ((char *)vcu__resp_payload(req))[n - 1] = '\0';
        }
    }
    vcu__complete_item(it, rc == 0 ? VCU_S_OK
                           : op == VCU_BACKEND_OP_LOAD ? VCU_S_EINVAL : VCU_S_EBUSY,
                       n);
    return false;
}

/*
 * Worker, without be->lock: runs a request taken off the queue, then
 * polls the waiting ones if that is due.  Returns true if the request
 * keeps its item (it waits).
 */
static bool vcu__run_item(vcu__sess_t *s, vcu__item_t *it, vcu__idle_t *st)
{
    bool kept;

    if (it->hdr.opcode == VCU_OP_ECHO)
        kept = vcu__run_echo(s, it);
    else if (it->hdr.opcode == VCU_OP_SESSION_FENCE)
        kept = vcu__run_fence(s, it);
    else if (VCU_BACKEND_OP_IS_STATE(it->hdr.opcode))
        kept = vcu__run_state(s, it);
    else
        kept = vcu__run_cuda(s, it);
    /* A stream of requests must not starve the waiting ones. */
    if (s->waiting.head) {
        uint64_t now = vcu__now_ns(), next;
        bool gpu;

        if (now - st->last_poll >= (uint64_t)VCU__POLL_NS) {
            vcu__poll_waiting(s, false, &next, &gpu);
            st->last_poll = now;
        }
    }
    return kept;
}

/* Caller holds be->lock, which this may drop and retake.  A done item
 * goes back to the cache, or is freed without the lock. */
static void vcu__item_recycle_locked(vcu_backend_t *be, vcu__item_t *it)
{
    vcu__item_t *spare = vcu__item_put_locked(be, it);

    if (spare) {
        pthread_mutex_unlock(&be->lock);
        free(spare);
        pthread_mutex_lock(&be->lock);
    }
}

/*
 * The worker's loop: waits for a request it may run, runs it, and so on
 * until the session closes or is reset.  Returns with be->lock held: the
 * SESSION_CLOSE's item, or NULL on a reset.
 */
static vcu__item_t *vcu__worker_loop(vcu__sess_t *s)
{
    vcu_backend_t *be = s->be;
    vcu__idle_t st = { .last_poll = 0 };
    vcu__item_t *it;
    bool kept;

    pthread_mutex_lock(&be->lock);
    for (;;) {
        st.spun = false;
        st.nap = VCU__POLL_MIN_NS;
        while (!s->cancel && !s->prio.head && (!s->queue.head || vcu__sched_hold_locked(s)))
            vcu__idle_round_locked(s, &st);
        if (s->cancel)
            return NULL;
        it = vcu__queue_pop(&s->prio);
        if (!it)
            it = vcu__queue_pop(&s->queue);
        if (it->hdr.opcode == VCU_OP_SESSION_CLOSE)
            return it;
        pthread_mutex_unlock(&be->lock);
        kept = vcu__run_item(s, it, &st);
        pthread_mutex_lock(&be->lock);
        if (!kept)
            vcu__item_recycle_locked(be, it);
    }
}

/*
 * Ending (close or reset), be->lock held, which this drops: takes what is
 * left in the queues into cancelled, waits for inline executions still
 * using cs, then lets go of cs and returns it.
 */
static vcu__cuda_sess_t *vcu__end_take_locked(vcu__sess_t *s, vcu__queue_t *cancelled)
{
    vcu_backend_t *be = s->be;
    vcu__cuda_sess_t *cs;

    vcu__queue_splice(cancelled, &s->prio);
    vcu__queue_splice(cancelled, &s->queue);
    s->sleeping = true;
    while (s->inline_busy)
        pthread_cond_wait(&s->cond, &be->lock);
    s->sleeping = false;
    cs = s->cs;
    s->cs = NULL;
    pthread_mutex_unlock(&be->lock);
    return cs;
}

/*
 * GPU work first: a cancelled SESSION_FENCE, or a waiting copy, must not
 * reply while the GPU may still use guest pages.  sess_free frees the
 * executor's waits; their requests, and those never run, are cancelled
 * here.
 */
static void vcu__end_cancel(vcu__sess_t *s, vcu__cuda_sess_t *cs, vcu__queue_t *cancelled)
{
    vcu__item_t *it;

    if (cs)
        vcu__cuda_sess_free(cs);
    vcu__sched_end(s);
    while ((it = vcu__queue_pop(&s->waiting)) != NULL) {
        it->wait = NULL;
        vcu__complete_item(it, VCU_S_ECANCELED, 0);
        vcu__item_put(s->be, it);
    }
    while ((it = vcu__queue_pop(cancelled)) != NULL) {
        vcu__complete_item(it, VCU_S_ECANCELED, 0);
        vcu__item_put(s->be, it);
    }
}

/* A closed session leaves the table for the zombies, which the next
 * SESSION_OPEN, reset or free joins; a reset took it out already. */
static void vcu__end_unlist(vcu__sess_t *s)
{
    vcu_backend_t *be = s->be;

    pthread_mutex_lock(&be->lock);
    if (s->in_table) {
        be->sessions[s->slot] = NULL;
        be->nlive--;
        s->in_table = false;
        s->zombie_next = be->zombies;
        be->zombies = s;
    }
    pthread_mutex_unlock(&be->lock);
}

void *vcu__worker(void *arg)
{
    vcu__sess_t *s = arg;
    vcu_backend_t *be = s->be;
    vcu__item_t *close_it;
    vcu__queue_t cancelled;
    vcu__cuda_sess_t *cs;
    bool orphan;

    /* The polls' short timed waits mean little under the default 50 us of
     * timer slack. */
    prctl(PR_SET_TIMERSLACK, 1000UL);
    vcu__queue_init(&cancelled);
    close_it = vcu__worker_loop(s);
    cs = vcu__end_take_locked(s, &cancelled);
    vcu__end_cancel(s, cs, &cancelled);
    vcu__end_unlist(s);

    if (close_it) {
        vcu__complete_item(close_it, VCU_S_OK, 0);
        vcu__item_put(be, close_it);
    }

    pthread_mutex_lock(&be->lock);
    s->finished = true;
    orphan = s->orphan;
    pthread_mutex_unlock(&be->lock);
    if (orphan)
        vcu__sess_destroy(s);       /* reset let go of it: ours to free */
    return NULL;
}
