/*
 * Internal interface between the backend core (validation, sessions,
 * submission, lifetime: backend.c; the session workers and dispatch:
 * backend_worker.c) and the CUDA executor (cuda.c and its parts,
 * cuda_int.h), and, at the end, what the core's two files share.
 * Private names: vcu__.
 */
#ifndef VCU_BACKEND_INT_H
#define VCU_BACKEND_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

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

/*
 * Migration (cuda_migrate.c, docs/design.md "Live migration"), on the
 * session's worker between requests.  save writes the session's state
 * to fd: it synchronizes every context first, and refuses a session
 * whose history it cannot carry or that has GPU work still waited for;
 * with rest, only what the pass before the pause (presave, precopy) did
 * not carry or what changed since.  presave writes the history so far
 * and begins that pass; precopy writes the next chunks of device memory
 * (VCU__MIG_PRE_BUDGET at most) while the guest runs; both say in *left
 * how many bytes the pass has still to send.  load rebuilds a session
 * from any of those streams, in the order they were written, checking
 * that every address and handle comes out as it was; a session it failed
 * on must be closed.  All return 0, or a VCU_E* code with a one-line
 * reason in why.
 */
int vcu__cuda_sess_save(vcu__cuda_sess_t *cs, int fd, bool rest, char *why, size_t whylen);
int vcu__cuda_sess_presave(vcu__cuda_sess_t *cs, int fd, uint64_t *left, char *why,
                           size_t whylen);
int vcu__cuda_sess_precopy(vcu__cuda_sess_t *cs, int fd, uint64_t *left, char *why,
                           size_t whylen);
int vcu__cuda_sess_load(vcu__cuda_sess_t *cs, int fd, char *why, size_t whylen);

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

/* ---- the core's own (backend.c, backend_worker.c) ------------------------ */

/*
 * The core's state, and the helpers both its files use on every request
 * (static inline: no call on the hot path).  Lock order and lifetimes:
 * backend.c; waiting requests: backend_worker.c.
 */

/* How long an idle worker or vcu_backend_execute() spins before sleeping. */
#define VCU__SPIN_NS 20000L
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
    /* Requests issued and waiting ("Waiting", backend_worker.c), oldest
     * first.  The worker's alone: no lock. */
    vcu__queue_t waiting;
    struct vcu__sess_s *zombie_next;
    /* Compute share (vcu_sched.h), the worker's alone: the group, or NULL
     * (constant after open; driven sessions only), the fence that drains
     * what it issued under a grant, and since when it has been idle. */
    struct vcu_sched_s *sched;
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

/*
 * A session's worker (backend_worker.c): runs its requests until the
 * session closes or is reset, then ends it.  The session's thread, started
 * by SESSION_OPEN, or vcu_backend_drive()'s caller for a driven session.
 */
void *vcu__worker(void *arg);

/*
 * Runs one CUDA opcode with the session's state (backend_worker.c); cs is
 * valid for the whole call.  A parked request is finished by the executor
 * (header and payload are only valid during the call); a waiting one (only
 * on the worker, s != NULL: inline opcodes never wait) keeps its item,
 * returning true.
 */
bool vcu__exec_cuda(vcu__sess_t *s, vcu__cuda_sess_t *cs, vcu__item_t *it);

static inline void vcu__queue_init(vcu__queue_t *q)
{
    q->head = NULL;
    q->tailp = &q->head;
}

static inline void vcu__queue_push(vcu__queue_t *q, vcu__item_t *it)
{
    it->next = NULL;
    *q->tailp = it;
    q->tailp = &it->next;
}

static inline vcu__item_t *vcu__queue_pop(vcu__queue_t *q)
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
static inline void vcu__queue_splice(vcu__queue_t *dst, vcu__queue_t *src)
{
    if (src->head) {
        *dst->tailp = src->head;
        dst->tailp = src->tailp;
    }
    vcu__queue_init(src);
}

/* Caller holds be->lock.  Lets the worker see new work or a state change:
 * its spin watches kick; a sleeping worker needs the signal. */
static inline void vcu__wake_locked(vcu__sess_t *s)
{
    atomic_fetch_add_explicit(&s->kick, 1, memory_order_release);
    if (s->sleeping)
        pthread_cond_signal(&s->cond);
}

/* Caller holds be->lock.  Returns an item to the cache; NULL, or the item
 * for the caller to free() once it has dropped the lock. */
static inline vcu__item_t *vcu__item_put_locked(vcu_backend_t *be, vcu__item_t *it)
{
    if (!it || it->big || be->nitems >= VCU__ITEM_CACHE)
        return it;
    it->next = be->items;
    be->items = it;
    be->nitems++;
    return NULL;
}

static inline void vcu__item_put(vcu_backend_t *be, vcu__item_t *it)
{
    pthread_mutex_lock(&be->lock);
    it = vcu__item_put_locked(be, it);
    pthread_mutex_unlock(&be->lock);
    free(it);
}

static inline uint64_t vcu__now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A spin-wait hint to the CPU (vcu_ring.h's vcu__cpu_relax(), which a
 * file including both headers would see defined twice). */
static inline void vcu__pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins up to VCU__SPIN_NS while *word == old; true if it changed. */
static inline bool vcu__spin_while(atomic_uint *word, unsigned int old)
{
    uint64_t t0 = 0;
    unsigned int i;

    for (i = 0;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old)
            return true;
        vcu__pause();
        if ((i & 63) == 63) {
            uint64_t t = vcu__now_ns();

            if (t0 == 0)
                t0 = t;
            else if (t - t0 > (uint64_t)VCU__SPIN_NS)
                return false;
        }
    }
}

static inline void vcu__sess_destroy(vcu__sess_t *s)
{
    pthread_cond_destroy(&s->cond);
    free(s);
}

#endif /* VCU_BACKEND_INT_H */
