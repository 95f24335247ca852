/*
 * virtio-cuda host backend core: request validation, sessions (one
 * worker thread each), the transport opcodes and ECHO, and dispatch of
 * the CUDA opcodes to the executor (cuda*.c, see vcu_backend_int.h).
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
#include <sys/prctl.h>
#include <time.h>

#include "vcu_backend_int.h"
#include "vcu_sched.h"

#define VCU_EXPORT __attribute__((visibility("default")))

#define VCU__DEFAULT_SESSIONS 64u
#define VCU__MAX_SESSIONS 65536u
#define VCU__ECHO_MAX_DELAY_MS 10000u
#define VCU__OFFERED_ALWAYS (VCU_FEAT_ECHO | VCU_FEAT_ASYNC)
#define VCU__FIRST_CUDA_OP 0x0100u
/* How long an idle worker or vcu_backend_execute() spins before sleeping. */
#define VCU__SPIN_NS 20000L
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
/* Payload bytes an item holds itself; items of this size are cached. */
#define VCU__ITEM_INLINE 256u
/* Largest reply of an opcode the guest sends with VCU_REQ_F_ASYNC. */
#define VCU__ASYNC_REPLY_MAX 64u
/* Free items kept: a virtqueue's worth in flight (1024) allocates nothing. */
#define VCU__ITEM_CACHE 1024u

/*
 * A request accepted for a worker.  The header is copied, so that what was
 * validated is what runs.  The payload is the request's own bytes where
 * they are 8-byte aligned (the caller keeps them unchanged until done:
 * vcu_backend.h), else a copy in buf, aligned.
 */
typedef struct vcu__item_s {
    struct vcu__item_s *next;
    vcu_request_t *req;
    struct vcu_req_hdr hdr;
    const void *payload;            /* hdr.payload_len bytes */
    bool big;                       /* buf larger than VCU__ITEM_INLINE: never cached */
    /* On s->waiting: what it waits for (the worker's alone). */
    uint64_t deadline;              /* ECHO: CLOCK_MONOTONIC ns */
    vcu__cuda_wait_t *wait;         /* CUDA: the executor's wait, or NULL */
    /*
     * An async request's reply has no reader, and the guest gives room
     * for its header only: the executor writes into async_resp instead,
     * and the guest's buffer (saved here) gets the header alone.
     */
    void *resp_save;                /* NULL unless swapped */
    size_t resp_cap_save;
    uint64_t async_resp[(sizeof(struct vcu_resp_hdr) + VCU__ASYNC_REPLY_MAX) / 8];
    uint64_t buf[];                 /* VCU__ITEM_INLINE bytes, or more if big */
} vcu__item_t;

typedef struct vcu__queue_s {
    vcu__item_t *head;
    vcu__item_t **tailp;
} vcu__queue_t;

typedef struct vcu__sess_s {
    vcu_backend_t *be;
    uint64_t id;                    /* constant after open */
    uint64_t features;              /* constant after open */
    uint32_t slot;                  /* index in be->sessions, constant */
    pthread_t thread;
    /*
     * Wakes the worker (work queued, close, reset, inline_busy back to 0)
     * and cuts an echo delay short.  Used with be->lock.
     */
    pthread_cond_t cond;
    /* Bumped (under be->lock) whenever the worker has something new to
     * look at; read without the lock by the worker's spin. */
    atomic_uint kick;

    /* The fields below are protected by be->lock. */
    vcu__queue_t queue;             /* FIFO of requests, SESSION_CLOSE last */
    /* Inline CUDA requests (vcu__cuda_is_inline) that arrived before the
     * session had CUDA state: the worker runs them before the queue. */
    vcu__queue_t prio;
    bool closing;                   /* SESSION_CLOSE queued: nothing new accepted */
    bool cancel;                    /* reset: cancel the queue and exit */
    bool in_table;                  /* in be->sessions (counts in nlive) */
    bool finished;                  /* worker past its last use of the session */
    unsigned int inline_busy;       /* inline executions using cs right now */
    bool sleeping;                  /* worker waits on cond: a push must signal */
    /* Constant after open: run by vcu_backend_drive() on the caller's
     * thread (config pump), not by a thread of ours. */
    bool driven;
    bool driving;                   /* vcu_backend_drive() has taken it */
    bool orphan;                    /* reset while driven: the driver frees it */
    /* Written only by the worker (under be->lock); read by the worker
     * without it, and by vcu_backend_submit() under it. */
    vcu__cuda_sess_t *cs;
    /* Requests issued and waiting (see "Waiting"), oldest first.  The
     * worker's alone: no lock. */
    vcu__queue_t waiting;
    struct vcu__sess_s *zombie_next;
    /* Compute share (vcu_sched.h), the worker's alone: the group, or NULL
     * (constant after open; driven sessions only), the fence that drains
     * what it issued under a grant, and since when it has been idle. */
    vcu_sched_t *sched;
    vcu__cuda_wait_t *drain;
    uint64_t drain_mark;            /* sched->nissued when the drain began */
    uint64_t idle_since;
} vcu__sess_t;

struct vcu_backend_s {
    vcu_backend_config_t cfg;       /* strings point to our copies */
    char *gpus;
    char *libcuda;
    vcu__cuda_t *cu;                /* NULL: no CUDA feature; constant after new */
    char cu_err[256];

    /* Protects sessions[], nlive, next_gen, zombies and the session
     * fields marked so in vcu__sess_t. */
    pthread_mutex_t lock;
    vcu__sess_t **sessions;         /* max_sessions slots, NULL = free */
    unsigned int max_sessions;
    unsigned int nlive;             /* non-NULL slots */
    uint64_t next_gen;              /* high half of the next session id */
    vcu__sess_t *zombies;           /* closed, thread not yet joined */
    vcu__item_t *items;             /* cache of free VCU__ITEM_INLINE items */
    vcu__sess_t *undriven;          /* driven sessions opened, oldest first, not yet driven */
    unsigned int nitems;
};

/* ---- small helpers ------------------------------------------------------- */

static void vcu__queue_init(vcu__queue_t *q)
{
    q->head = NULL;
    q->tailp = &q->head;
}

static void vcu__queue_push(vcu__queue_t *q, vcu__item_t *it)
{
    it->next = NULL;
    *q->tailp = it;
    q->tailp = &it->next;
}

static vcu__item_t *vcu__queue_pop(vcu__queue_t *q)
{
    vcu__item_t *it = q->head;

    if (it) {
        q->head = it->next;
        if (!q->head)
            q->tailp = &q->head;
        it->next = NULL;
    }
    return it;
}

/* Appends all of src to dst and empties src. */
static void vcu__queue_splice(vcu__queue_t *dst, vcu__queue_t *src)
{
    if (src->head) {
        *dst->tailp = src->head;
        dst->tailp = src->tailp;
    }
    vcu__queue_init(src);
}

/* Caller holds be->lock.  Lets the worker see new work or a state change:
 * its spin watches kick; a sleeping worker needs the signal. */
static void vcu__wake_locked(vcu__sess_t *s)
{
    atomic_fetch_add_explicit(&s->kick, 1, memory_order_release);
    if (s->sleeping)
        pthread_cond_signal(&s->cond);
}

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

/* Caller holds be->lock.  Returns an item to the cache; NULL, or the item
 * for the caller to free() once it has dropped the lock. */
static vcu__item_t *vcu__item_put_locked(vcu_backend_t *be, vcu__item_t *it)
{
    if (!it || it->big || be->nitems >= VCU__ITEM_CACHE)
        return it;
    it->next = be->items;
    be->items = it;
    be->nitems++;
    return NULL;
}

static void vcu__item_put(vcu_backend_t *be, vcu__item_t *it)
{
    pthread_mutex_lock(&be->lock);
    it = vcu__item_put_locked(be, it);
    pthread_mutex_unlock(&be->lock);
    free(it);
}

static uint64_t vcu__now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void vcu__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins up to VCU__SPIN_NS while *word == old; true if it changed. */
static bool vcu__spin_while(atomic_uint *word, unsigned int old)
{
    uint64_t t0 = 0;
    unsigned int i;

    for (i = 0;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old)
            return true;
        vcu__cpu_relax();
        if ((i & 63) == 63) {
            uint64_t t = vcu__now_ns();

            if (t0 == 0)
                t0 = t;
            else if (t - t0 > (uint64_t)VCU__SPIN_NS)
                return false;
        }
    }
}

/* The one translation from a library code (0 or VCU_E*) to a wire status. */
static uint32_t vcu__status_from_code(int code)
{
    if (code == 0)
        return VCU_S_OK;
    if (code < 0 && code > -VCU_S_COUNT_)
        return (uint32_t)-code;
    return VCU_S_EIO;
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

static void vcu__sess_destroy(vcu__sess_t *s)
{
    pthread_cond_destroy(&s->cond);
    free(s);
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

/* Runs one CUDA opcode with the session's state; cs is valid for the
 * whole call.  A parked request is finished by the executor (header and
 * payload are only valid during the call); a waiting one (only on the
 * worker: inline opcodes never wait) keeps its item, returning true. */
static bool vcu__exec_cuda(vcu__sess_t *s, vcu__cuda_sess_t *cs, vcu__item_t *it)
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
            vcu__cpu_relax();
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
    case VCU_OP_CU_MEMCPY_2D:
    case VCU_OP_CU_MEMSET:
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

static void *vcu__worker(void *arg)
{
    vcu__sess_t *s = arg;
    vcu_backend_t *be = s->be;
    vcu__item_t *it, *close_it = NULL;
    vcu__queue_t cancelled;
    vcu__cuda_sess_t *cs;
    uint64_t last_poll = 0;
    bool orphan;

    /* The polls' short timed waits mean little under the default 50 us of
     * timer slack. */
    prctl(PR_SET_TIMERSLACK, 1000UL);
    vcu__queue_init(&cancelled);
    pthread_mutex_lock(&be->lock);
    for (;;) {
        bool spun = false, kept;
        uint64_t nap = VCU__POLL_MIN_NS;
        vcu__item_t *spare;

        while (!s->cancel && !s->prio.head && (!s->queue.head || vcu__sched_hold_locked(s))) {
            unsigned int k = atomic_load_explicit(&s->kick, memory_order_relaxed);
            /* A request held for the grant stays at the head (only this
             * thread pops): a different head is news. */
            vcu__item_t *hh = s->queue.head;
            int64_t tick = -1;

            if (s->sched != NULL) {
                pthread_mutex_unlock(&be->lock);
                tick = vcu__sched_tick(s, hh != NULL, hh == NULL && !s->waiting.head);
                pthread_mutex_lock(&be->lock);
                if (s->cancel || s->prio.head || s->queue.head != hh ||
                    (hh != NULL && !vcu__sched_hold_locked(s)))
                    continue;
            }
            if (s->waiting.head) {
                bool closing = s->closing, gpu;
                uint64_t next, now, dl;
                struct timespec ts;

                pthread_mutex_unlock(&be->lock);
                if (vcu__poll_waiting(s, closing, &next, &gpu))
                    nap = VCU__POLL_MIN_NS;
                last_poll = vcu__now_ns();
                pthread_mutex_lock(&be->lock);
                if (!s->waiting.head || s->cancel || s->prio.head || s->queue.head != hh ||
                    s->closing != closing)
                    continue;
                if (!spun && hh == NULL && s->drain == NULL) {
                    /* Just finished a request: more may be on the way,
                     * and GPU work often ends within microseconds.  Spin,
                     * polling, before sleeping (not while a request waits
                     * for the grant or a drain is out: the tick must come
                     * round). */
                    spun = true;
                    pthread_mutex_unlock(&be->lock);
                    vcu__spin_poll(s, closing, k);
                    last_poll = vcu__now_ns();
                    pthread_mutex_lock(&be->lock);
                    continue;
                }
                /* Sleep until the next poll: short while the GPU has work
                 * of ours, growing while nothing finishes; an ECHO alone
                 * sleeps until its deadline.  A push signals. */
                now = vcu__now_ns();
                dl = gpu ? now + nap : next;
                if (next != 0 && next < dl)
                    dl = next;
                if (tick >= 0 && (dl == 0 || now + (uint64_t)tick < dl))
                    dl = now + (uint64_t)tick;
                if (dl <= now)
                    continue;
                if (gpu && nap < VCU__POLL_MAX_NS)
                    nap = nap * 2 < VCU__POLL_MAX_NS ? nap * 2 : VCU__POLL_MAX_NS;
                if (s->driven) {
                    vcu__pump_locked(s, (int64_t)(dl - now));
                    continue;
                }
                clock_gettime(CLOCK_MONOTONIC, &ts);
                dl -= now;
                ts.tv_sec += (time_t)(dl / 1000000000u);
                ts.tv_nsec += (long)(dl % 1000000000u);
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                s->sleeping = true;
                pthread_cond_timedwait(&s->cond, &be->lock, &ts);
                s->sleeping = false;
                continue;
            }
            if (s->driven) {
                /* The pump spins before it sleeps. */
                vcu__pump_locked(s, tick);
                continue;
            }
            if (!spun) {
                /* Just finished a request: more may be on the way. */
                spun = true;
                pthread_mutex_unlock(&be->lock);
                vcu__spin_while(&s->kick, k);
                pthread_mutex_lock(&be->lock);
                continue;
            }
            s->sleeping = true;
            pthread_cond_wait(&s->cond, &be->lock);
            s->sleeping = false;
        }
        if (s->cancel)
            break;
        it = vcu__queue_pop(&s->prio);
        if (!it)
            it = vcu__queue_pop(&s->queue);
        if (it->hdr.opcode == VCU_OP_SESSION_CLOSE) {
            close_it = it;
            break;
        }
        pthread_mutex_unlock(&be->lock);
        if (it->hdr.opcode == VCU_OP_ECHO)
            kept = vcu__run_echo(s, it);
        else if (it->hdr.opcode == VCU_OP_SESSION_FENCE)
            kept = vcu__run_fence(s, it);
        else
            kept = vcu__run_cuda(s, it);
        /* A stream of requests must not starve the waiting ones. */
        if (s->waiting.head) {
            uint64_t now = vcu__now_ns(), next;
            bool gpu;

            if (now - last_poll >= (uint64_t)VCU__POLL_NS) {
                vcu__poll_waiting(s, false, &next, &gpu);
                last_poll = now;
            }
        }
        pthread_mutex_lock(&be->lock);
        if (kept)
            continue;
        spare = vcu__item_put_locked(be, it);
        if (spare) {
            pthread_mutex_unlock(&be->lock);
            free(spare);
            pthread_mutex_lock(&be->lock);
        }
    }

    /* Ending (close or reset), be->lock held: take what is left, wait for
     * inline executions still using cs, then let go of cs. */
    vcu__queue_splice(&cancelled, &s->prio);
    vcu__queue_splice(&cancelled, &s->queue);
    s->sleeping = true;
    while (s->inline_busy)
        pthread_cond_wait(&s->cond, &be->lock);
    s->sleeping = false;
    cs = s->cs;
    s->cs = NULL;
    pthread_mutex_unlock(&be->lock);

    /* GPU work first: a cancelled SESSION_FENCE, or a waiting copy, must
     * not reply while the GPU may still use guest pages.  sess_free frees
     * the executor's waits; their requests are cancelled here. */
    if (cs)
        vcu__cuda_sess_free(cs);
    vcu__sched_end(s);
    while ((it = vcu__queue_pop(&s->waiting)) != NULL) {
        it->wait = NULL;
        vcu__complete_item(it, VCU_S_ECANCELED, 0);
        vcu__item_put(be, it);
    }
    while ((it = vcu__queue_pop(&cancelled)) != NULL) {
        vcu__complete_item(it, VCU_S_ECANCELED, 0);
        vcu__item_put(be, it);
    }

    pthread_mutex_lock(&be->lock);
    if (s->in_table) {
        be->sessions[s->slot] = NULL;
        be->nlive--;
        s->in_table = false;
        s->zombie_next = be->zombies;
        be->zombies = s;
    }
    pthread_mutex_unlock(&be->lock);

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

/* ---- SESSION_OPEN -------------------------------------------------------- */

static uint32_t vcu__session_open(vcu_backend_t *be, vcu_request_t *req, const unsigned char *payload,
                                  size_t *out_len)
{
    struct vcu_session_open_req oq;
    struct vcu_session_open_resp orsp;
    pthread_condattr_t ca;
    vcu__sess_t *s;
    uint64_t offered;
    unsigned int slot;

    memcpy(&oq, payload, sizeof(oq));
    if (oq.reserved[0] || oq.reserved[1])
        return VCU_S_EINVAL;
    if (oq.version_min > VCU_PROTO_VERSION || oq.version_max < VCU_PROTO_VERSION)
        return VCU_S_EVERSION;
    if (vcu__resp_cap(req) < sizeof(orsp))
        return VCU_S_ERANGE;

    vcu__reap_zombies(be);

    s = calloc(1, sizeof(*s));
    if (!s)
        return VCU_S_ENOMEM;
    s->be = be;
    vcu__queue_init(&s->queue);
    vcu__queue_init(&s->prio);
    vcu__queue_init(&s->waiting);
    offered = VCU__OFFERED_ALWAYS | (be->cu ? VCU_FEAT_CUDA | VCU_FEAT_BATCH : 0) |
              (be->cu && vcu__cuda_has_modcache(be->cu) ? VCU_FEAT_MODULE_CACHE : 0);
    s->features = oq.features & offered;
    if (pthread_condattr_init(&ca) != 0) {
        free(s);
        return VCU_S_ENOMEM;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_cond_init(&s->cond, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        free(s);
        return VCU_S_ENOMEM;
    }
    pthread_condattr_destroy(&ca);

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

VCU_EXPORT void vcu_backend_submit(vcu_backend_t *be, vcu_request_t *req)
{
    struct vcu_req_hdr hdr;
    const unsigned char *payload = NULL;
    vcu__item_t *it = NULL;
    vcu__sess_t *s;
    size_t out_len = 0;
    uint32_t st;
    bool copy;

    if (!req)
        return;
    req->resp_len = 0;
    if (!req->resp || req->resp_cap < sizeof(struct vcu_resp_hdr)) {
        if (req->done)
            req->done(req);         /* nothing can be written */
        return;
    }
    if (!be) {
        vcu__complete(req, VCU_S_EIO, 0);
        return;
    }
    st = vcu__validate(req, &hdr, &payload);
    if (st == VCU_S_OK)
        st = vcu__validate_op(req, &hdr, payload);
    if (st != VCU_S_OK) {
        vcu__complete(req, st, 0);
        return;
    }

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

    pthread_mutex_lock(&be->lock);
    for (;;) {
        s = vcu__sess_lookup_locked(be, hdr.session);
        if (!s)
            st = VCU_S_ENOSESSION;
        else if ((hdr.flags & VCU_REQ_F_ASYNC) && !(s->features & VCU_FEAT_ASYNC))
            st = VCU_S_ENOTSUP;
        else if (hdr.opcode == VCU_OP_ECHO && !(s->features & VCU_FEAT_ECHO))
            st = VCU_S_ENOTSUP;
        else if (vcu__op_is_cuda(hdr.opcode) && !be->cu)
            st = VCU_S_ENODEV;
        else if (vcu__op_is_cuda(hdr.opcode) && !(s->features & VCU_FEAT_CUDA))
            st = VCU_S_ENOTSUP;
        else if ((hdr.opcode == VCU_OP_CU_MODULE_LOAD_HASH ||
                  hdr.opcode == VCU_OP_CU_MODULE_LOAD_KEEP) &&
                 !(s->features & VCU_FEAT_MODULE_CACHE))
            st = VCU_S_ENOTSUP;
        else if (hdr.opcode == VCU_OP_CU_BATCH && !(s->features & VCU_FEAT_BATCH))
            st = VCU_S_ENOTSUP;
        if (st != VCU_S_OK) {
            pthread_mutex_unlock(&be->lock);
            free(it);
            vcu__complete(req, st, 0);
            return;
        }
        if (it || (it = vcu__item_get_locked(be)) != NULL)
            break;
        /* Cache empty: allocate without the lock, then look again (the
         * session may have gone meanwhile). */
        pthread_mutex_unlock(&be->lock);
        it = malloc(sizeof(*it) + VCU__ITEM_INLINE);
        if (!it) {
            vcu__complete(req, VCU_S_ENOMEM, 0);
            return;
        }
        it->big = false;
        pthread_mutex_lock(&be->lock);
    }
    it->next = NULL;
    it->req = req;
    it->hdr = hdr;
    it->resp_save = NULL;
    if (copy) {
        memcpy(it->buf, payload, hdr.payload_len);
        it->payload = it->buf;
    } else {
        it->payload = payload;
    }

    if (vcu__op_is_cuda(hdr.opcode) && vcu__cuda_is_inline(hdr.opcode)) {
        vcu__submit_inline(be, s, it);  /* unlocks */
        return;
    }
    vcu__queue_push(&s->queue, it);
    vcu__wake_locked(s);
    if (hdr.opcode == VCU_OP_SESSION_CLOSE) {
        s->closing = true;          /* also cuts a running echo delay short */
        pthread_cond_signal(&s->cond);
        vcu__sess_cancel_cuda_locked(be, s);
    }
    pthread_mutex_unlock(&be->lock);
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
