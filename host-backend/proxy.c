/*
 * virtio-cuda session proxy (vcu_proxy.h): one worker process per guest
 * session, reached over two shared-memory rings and a stream socket
 * (vcu_ipc.h, "The hot path").
 *
 * Threads
 * -------
 * vcu_proxy_submit() and vcu_proxy_reset() run on the transport's thread
 * (QEMU: with the BQL).  Each session has two threads of its own: a reader
 * that takes replies from the reply ring and calls done (idle, it spins
 * spin_ns, then sleeps in poll() on the ring's doorbell and the socket, so
 * a worker's end is seen at once), and a sender that writes whatever the
 * submitting thread could not write at once without blocking: frames
 * behind a full request ring, socket bytes behind a full socket.  So a
 * slow, stopped or dead worker never blocks the submitter.
 *
 * The submitter polls: after a synchronous request that went straight
 * onto the ring, it watches the reply ring itself for at most poll_ns
 * (vcu__px_poll()) and completes what arrives, its own reply included,
 * before it returns.  A short request then costs the cross-core hops to
 * the worker and back and nothing more: no hand-over from the reader to
 * the submitter's thread (in QEMU, no wake-up of the main loop for the
 * bottom half).  The reader and a polling submitter take replies under
 * rx_busy, which both only ever try to take: the submitter gives up
 * polling at once when the reader is busy.  The submitter says until when
 * it polls (poll_until, set before its request goes on the ring), and the
 * reader watches only the clock meanwhile, no line of the request's path,
 * so that none of them moves to the reader's core and back on each
 * request.
 *
 * Lock order: vcu_proxy_t.mu -> vcu__psess_t.mu; rx_busy ->
 * vcu__psess_t.mu.  Neither mutex is held across a done callback, a wait
 * for a process or a blocking socket call; rx_busy is held across done
 * callbacks (so they must not submit).
 *   vcu_proxy_t.mu   the session table, the zombie list, counters.
 *   vcu__psess_t.mu  the session's send queue, its pending requests, the
 *                    regions it was sent, wid, its close request, stop.
 *   rx_busy          the reply ring's consumer side (resp), and
 *                    vcu_proxy_t.pbuf while the submitter polls.
 *   vcu_account_t.mu which memory account slots are handed out
 *                    (vcu_account.h); innermost, taken under
 *                    vcu__psess_t.mu when a reaped worker's slot is freed.
 *   share group lock the compute-share area's word lock (vcu_sched.h,
 *                    bounded: a dead or slow holder loses it); innermost,
 *                    taken under vcu__psess_t.mu when a reaped worker's
 *                    group slot is freed, never with vcu_account_t.mu.
 *
 * Lifetimes
 * ---------
 * A session enters the table at SESSION_OPEN, when its worker is spawned,
 * and leaves it at SESSION_CLOSE or reset.  At SESSION_CLOSE its worker
 * is killed; the reader, once the process is gone (so its GPU work can no
 * longer touch guest memory), completes what was still pending with
 * VCU_S_ECANCELED and the close itself with VCU_S_OK, then parks the
 * session on px->zombies, freed by the next open, reset or free.  A reset
 * kills every worker, joins the session threads (they end as soon as
 * their socket is shut down), completes what was pending and leaves the
 * processes to a reaper thread each.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* memfd_create */
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vcu_account.h"
#include "vcu_sched.h"
#include "vcu_ipc.h"
#include "vcu_modcache.h"
#include "vcu_proxy.h"
#include "vcu_ring.h"

#define VCU_EXPORT __attribute__((visibility("default")))

#define VCU__PX_DEFAULT_SESSIONS 64u
#define VCU__PX_MAX_SESSIONS 4096u
#define VCU__PX_SPIN_US_DEFAULT 20u
#define VCU__PX_SPIN_MIN_CPUS 4     /* fewer online CPUs: no spinning */
/* How long a submitter polls for the reply of a synchronous request, at
 * most (never longer than the spin): a bounded busy wait on QEMU's
 * thread, as virtio's poll mode, long enough for a short driver call. */
#define VCU__PX_POLL_US 10u
/* A request frame up to this size (a full CU_BATCH fits) is built in
 * its session's own buffer and copied onto the ring from there; one that
 * must wait for room is copied out.  So the hot path allocates nothing. */
#define VCU__PX_FBUF (24u * 1024u)
/* Pending entries a session keeps for reuse. */
#define VCU__PX_PCACHE 64u
/* The worker's fds: the socket, the shared area, the rings' doorbells. */
#define VCU__PX_FD_SOCK 3
#define VCU__PX_FD_SHM 4
#define VCU__PX_FD_WAKE_REQ 5
#define VCU__PX_FD_WAKE_RESP 6
#define VCU__PX_FD_ACCT 7

extern char **environ;

typedef struct vcu__pframe_s {
    struct vcu__pframe_s *next;
    unsigned char *buf;
    size_t len;
    size_t off;                     /* bytes already sent */
    int fd;                         /* sent with the first byte, or -1 */
} vcu__pframe_t;

typedef struct vcu__preq_s {
    struct vcu__preq_s *next;
    vcu_request_t *req;
    uint64_t tag;
    uint64_t req_id;
    bool open;                      /* the SESSION_OPEN that started the worker */
} vcu__preq_t;

typedef struct vcu__psess_s vcu__psess_t;

struct vcu_proxy_s {
    char *worker;
    char *gpus;
    char *libcuda;
    char *module_cache;             /* NULL: none */
    uint64_t module_cache_bytes;
    int capture_printf;
    uint32_t ring_bytes;            /* request ring per session */
    unsigned int spin_us;
    uint64_t poll_ns;               /* the submitter's poll; 0: none */
    unsigned char *pbuf;            /* a reply body, copied out while polling */

    pthread_mutex_t mu;             /* see the lock order above */
    vcu__psess_t **sessions;        /* max_sessions slots */
    unsigned int max_sessions;
    unsigned int nlive;
    uint64_t next_gen;
    vcu__psess_t *zombies;          /* closed, threads to join */
    vcu__psess_t *closing;          /* SESSION_CLOSE sent, worker not yet gone */
    char cuda_error[256];           /* the probe's answer: "" when CUDA works */
    /* The VM's GPU memory account (vcu_account.h), shared with every
     * worker; a session's slot is freed once its worker is reaped.  Its
     * own lock; reaper threads hold a reference. */
    vcu_account_t *acct;
    /* The compute-share group (vcu_sched.h) with this VM's slot claimed,
     * or NULL; constant from new to free.  Its own lock (the area's). */
    vcu_sched_t *sched;
    char *share_group;
    /* Packed mode: the SMs of each worker's context and the MPS control
     * daemon's pipe directory; 0 and NULL in isolated mode. */
    uint32_t sms;
    char *mps_pipe;
};

struct vcu__psess_s {
    vcu_proxy_t *px;
    uint64_t id;                    /* the guest's session id */
    unsigned int slot;
    int acct_slot;                  /* in px->acct; -1 once released */
    pid_t pid;
    int fd;
    void *shm;                      /* the shared area, shm_len bytes */
    size_t shm_len;
    int wake_req;                   /* request ring's doorbell: we ring it */
    int wake_resp;                  /* reply ring's doorbell: the reader sleeps on it */
    int wake_peer[2];               /* their other ends, the worker's, until spawned */
    vcu__ring_t resp;               /* consumed under rx_busy */
    int rx_busy;                    /* taken (trylock only) to consume resp */
    /* Until when (vcu__ring_now_ns()) a submitter polls for its reply, or
     * 0: written by the submitter before its request goes on the ring,
     * read by the reader, which meanwhile stays off the consumer side
     * (see vcu__px_reader()).  A line of its own. */
    _Alignas(64) uint64_t poll_until;
    uint8_t poll_pad[56];
    pthread_t reader;
    pthread_t sender;

    pthread_mutex_t mu;             /* see the lock order above */
    pthread_cond_t cond;            /* the sender waits on it */
    uint64_t wid;                   /* the worker's session id, 0 before the open reply */
    uint64_t next_tag;
    vcu__pframe_t *qhead, *qtail;   /* not yet (wholly) sent, in order */
    vcu__ring_t req;                /* the request ring's producer side */
    vcu__pframe_t *rqhead, *rqtail; /* for the request ring, behind a full one */
    vcu__preq_t *pending;           /* sent, not answered, oldest first: */
    vcu__preq_t *pending_tail;      /* replies mostly come in order */
    vcu__preq_t *pfree;             /* entries for reuse, npfree of them */
    unsigned int npfree;
    int sent_fds[VCU_IPC_MAX_REGIONS];
    unsigned int nsent;
    vcu_request_t *close_req;       /* SESSION_CLOSE waiting for the exit */
    bool stop;                      /* reset: threads end now */
    bool broken;                    /* a send failed or a ring broke: the link is gone */
    bool dead;                      /* the reader has ended: nothing more is answered */
    bool closing;                   /* on px->closing (px->mu) */

    vcu__psess_t *zombie_next;
    _Alignas(8) unsigned char fbuf[VCU__PX_FBUF];  /* s->mu: a frame being built */
};

/* Kills the worker unless it has been reaped (a pid of -1 must never
 * reach kill(): that signals every process we may). */
static void vcu__px_kill(vcu__psess_t *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->pid > 0)
        kill(s->pid, SIGKILL);
    pthread_mutex_unlock(&s->mu);
}

/* ---- replies ----------------------------------------------------------- */

/* A reply of status alone. */
static void vcu__px_complete(vcu_request_t *req, uint64_t req_id, uint32_t status)
{
    struct vcu_resp_hdr h;

    memset(&h, 0, sizeof(h));
    h.status = status;
    h.req_id = req_id;
    if (req->resp_cap >= sizeof(h)) {
        memcpy(req->resp, &h, sizeof(h));
        req->resp_len = sizeof(h);
    } else {
        req->resp_len = 0;
    }
    req->done(req);
}

static uint64_t vcu__px_req_id(const vcu_request_t *req)
{
    struct vcu_req_hdr h;

    if (req->req_len < sizeof(h))
        return 0;
    memcpy(&h, req->req, sizeof(h));
    return h.req_id;
}

/* A pending entry, from the session's cache if it has one.  s->mu held. */
static vcu__preq_t *vcu__px_preq_get_locked(vcu__psess_t *s)
{
    vcu__preq_t *p = s->pfree;

    if (p == NULL)
        return malloc(sizeof(*p));
    s->pfree = p->next;
    s->npfree--;
    return p;
}

/* Gives a pending entry back to the cache, or frees it.  s->mu held. */
static void vcu__px_preq_put_locked(vcu__psess_t *s, vcu__preq_t *p)
{
    if (s->npfree >= VCU__PX_PCACHE) {
        free(p);
        return;
    }
    p->next = s->pfree;
    s->pfree = p;
    s->npfree++;
}

/* Completes every pending request (and the close) with status; the
 * session's threads have ended or will never answer them. */
static void vcu__px_cancel_all(vcu__psess_t *s, uint32_t status)
{
    vcu__preq_t *p, *list;
    vcu_request_t *close_req;

    pthread_mutex_lock(&s->mu);
    list = s->pending;
    s->pending = NULL;
    s->pending_tail = NULL;
    close_req = s->close_req;
    s->close_req = NULL;
    pthread_mutex_unlock(&s->mu);
    while ((p = list) != NULL) {
        list = p->next;
        vcu__px_complete(p->req, p->req_id, status);
        free(p);
    }
    if (close_req != NULL)
        vcu__px_complete(close_req, vcu__px_req_id(close_req), VCU_S_OK);
}

/* ---- sending ----------------------------------------------------------- */

/* One non-blocking send of what is left of f; returns bytes sent, 0 if
 * the socket is full, -1 if the link is broken. */
static ssize_t vcu__px_send_some(int fd, vcu__pframe_t *f)
{
    struct iovec iov = { f->buf + f->off, f->len - f->off };
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } c;
    struct msghdr m;
    ssize_t n;

    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (f->off == 0 && f->fd >= 0) {
        memset(&c, 0, sizeof(c));
        m.msg_control = c.b;
        m.msg_controllen = sizeof(c.b);
        CMSG_FIRSTHDR(&m)->cmsg_level = SOL_SOCKET;
        CMSG_FIRSTHDR(&m)->cmsg_type = SCM_RIGHTS;
        CMSG_FIRSTHDR(&m)->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), &f->fd, sizeof(int));
    }
    do {
        n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    return n;
}

static void vcu__px_frame_free(vcu__pframe_t *f)
{
    free(f->buf);
    free(f);
}

/* Sends f, or queues what is left of it for the sender.  s->mu held. */
static void vcu__px_send_locked(vcu__psess_t *s, vcu__pframe_t *f)
{
    if (s->qhead == NULL && !s->broken) {
        ssize_t n = vcu__px_send_some(s->fd, f);

        if (n < 0) {
            s->broken = true;
        } else {
            f->off += (size_t)n;
            if (f->off == f->len) {
                vcu__px_frame_free(f);
                return;
            }
        }
    }
    if (s->broken) {
        /* The reader sees the link end and cancels what is pending. */
        vcu__px_frame_free(f);
        return;
    }
    f->next = NULL;
    if (s->qtail != NULL)
        s->qtail->next = f;
    else
        s->qhead = f;
    s->qtail = f;
    pthread_cond_signal(&s->cond);
}

/* Puts the frame at buf (its header, then its body) on the request ring
 * if nothing is queued for it: true when it is there, or dropped because
 * the link is broken (the reader then cancels what is pending); false
 * when it must queue.  s->mu held. */
static bool vcu__px_ring_try_locked(vcu__psess_t *s, const unsigned char *buf)
{
    if (s->rqhead == NULL && !s->broken) {
        struct vcu_ipc_hdr h;
        int rc;

        memcpy(&h, buf, sizeof(h));
        rc = vcu__ring_put(&s->req, &h, buf + sizeof(h));
        if (rc > 0)
            return true;
        if (rc < 0) {
            /* The worker wrote an impossible head. */
            s->broken = true;
            if (s->pid > 0)
                kill(s->pid, SIGKILL);
        }
    }
    return s->broken;
}

/* Puts f on the request ring, or queues it for the sender behind a full
 * ring (in order: nothing passes what is queued).  s->mu held. */
static void vcu__px_ring_send_locked(vcu__psess_t *s, vcu__pframe_t *f)
{
    if (vcu__px_ring_try_locked(s, f->buf)) {
        vcu__px_frame_free(f);
        return;
    }
    f->next = NULL;
    if (s->rqtail != NULL)
        s->rqtail->next = f;
    else
        s->rqhead = f;
    s->rqtail = f;
    pthread_cond_signal(&s->cond);
}

/* Moves what it can of the ring queue onto the ring; false if the ring
 * is full.  s->mu held. */
static bool vcu__px_ring_flush_locked(vcu__psess_t *s)
{
    vcu__pframe_t *f;

    while ((f = s->rqhead) != NULL && !s->broken) {
        struct vcu_ipc_hdr h;
        int rc;

        memcpy(&h, f->buf, sizeof(h));
        rc = vcu__ring_put(&s->req, &h, f->buf + sizeof(h));
        if (rc == VCU__RING_FULL)
            return false;
        if (rc < 0) {
            s->broken = true;
            if (s->pid > 0)
                kill(s->pid, SIGKILL);
            break;
        }
        s->rqhead = f->next;
        if (s->rqhead == NULL)
            s->rqtail = NULL;
        vcu__px_frame_free(f);
    }
    while ((f = s->rqhead) != NULL) {
        s->rqhead = f->next;
        vcu__px_frame_free(f);
    }
    s->rqtail = NULL;
    return true;
}

static void *vcu__px_sender(void *arg)
{
    vcu__psess_t *s = arg;

    pthread_mutex_lock(&s->mu);
    for (;;) {
        vcu__pframe_t *f;
        struct pollfd pfd;
        ssize_t n;
        int tmo;

        while (s->qhead == NULL && s->rqhead == NULL && !s->stop)
            pthread_cond_wait(&s->cond, &s->mu);
        if (s->stop)
            break;
        if (s->rqhead != NULL && !vcu__px_ring_flush_locked(s) && s->qhead == NULL) {
            /* The worker frees ring space as it takes requests; this is
             * back-pressure, not the hot path: poll for it. */
            struct timespec ts = { 0, 50 * 1000 };

            pthread_mutex_unlock(&s->mu);
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        if (s->qhead == NULL)
            continue;
        /* Only this thread sends while the queue is not empty.  Short
         * waits: ring frames may queue meanwhile, and the worker reads
         * the socket only once it reaches their VCU_IPC_SOCK entry. */
        f = s->qhead;
        tmo = s->rqhead != NULL ? 1 : 10;
        pthread_mutex_unlock(&s->mu);
        pfd.fd = s->fd;
        pfd.events = POLLOUT;
        pfd.revents = 0;
        n = poll(&pfd, 1, tmo) < 0 && errno != EINTR ? -1 : 0;
        if (n == 0 && (pfd.revents & (POLLOUT | POLLERR | POLLHUP)))
            n = vcu__px_send_some(s->fd, f);
        pthread_mutex_lock(&s->mu);
        if (n < 0) {
            s->broken = true;
        } else {
            f->off += (size_t)n;
            if (f->off < f->len)
                continue;
        }
        s->qhead = f->next;
        if (s->qhead == NULL)
            s->qtail = NULL;
        vcu__px_frame_free(f);
        if (s->broken) {
            while ((f = s->qhead) != NULL) {
                s->qhead = f->next;
                vcu__px_frame_free(f);
            }
            s->qtail = NULL;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- receiving --------------------------------------------------------- */

/* Takes the reply ring's consumer side if nobody has it. */
static bool vcu__px_rx_take(vcu__psess_t *s)
{
    int idle = 0;

    return __atomic_load_n(&s->rx_busy, __ATOMIC_RELAXED) == 0 &&
           __atomic_compare_exchange_n(&s->rx_busy, &idle, 1, false, __ATOMIC_ACQUIRE,
                                       __ATOMIC_RELAXED);
}

static void vcu__px_rx_give(vcu__psess_t *s)
{
    __atomic_store_n(&s->rx_busy, 0, __ATOMIC_RELEASE);
}

static vcu__preq_t *vcu__px_take_locked(vcu__psess_t *s, uint64_t tag)
{
    vcu__preq_t *prev = NULL, *p;

    for (p = s->pending; p != NULL; prev = p, p = p->next)
        if (p->tag == tag) {
            if (prev != NULL)
                prev->next = p->next;
            else
                s->pending = p->next;
            if (s->pending_tail == p)
                s->pending_tail = prev;
            return p;
        }
    return NULL;
}

/* One reply from the worker: into the request's reply buffer, with the
 * worker's session id replaced by the guest's in an open reply. */
static void vcu__px_reply(vcu__psess_t *s, uint64_t tag, const unsigned char *body, size_t len)
{
    vcu__preq_t *p;
    vcu_request_t *req = NULL;
    uint64_t req_id = 0;
    bool open = false;
    size_t n;

    pthread_mutex_lock(&s->mu);
    p = vcu__px_take_locked(s, tag);
    if (p != NULL) {
        req = p->req;
        req_id = p->req_id;
        open = p->open;
        vcu__px_preq_put_locked(s, p);
    }
    pthread_mutex_unlock(&s->mu);
    if (p == NULL)
        return;                     /* cancelled meanwhile */
    n = len < req->resp_cap ? len : req->resp_cap;
    if (n < sizeof(struct vcu_resp_hdr)) {
        vcu__px_complete(req, req_id, VCU_S_EIO);
        return;
    }
    memcpy(req->resp, body, n);
    req->resp_len = n;
    if (open) {
        struct vcu_resp_hdr h;
        struct vcu_session_open_resp o;

        memcpy(&h, req->resp, sizeof(h));
        if (h.status == VCU_S_OK && n >= sizeof(h) + sizeof(o)) {
            memcpy(&o, (char *)req->resp + sizeof(h), sizeof(o));
            pthread_mutex_lock(&s->mu);
            s->wid = o.session;
            pthread_mutex_unlock(&s->mu);
            o.session = s->id;
            memcpy((char *)req->resp + sizeof(h), &o, sizeof(o));
        }
    }
    req->done(req);
}

/* The session's worker is gone (reaped) or never ran: what it had
 * charged to the VM's memory account comes back. */
static void vcu__px_acct_release(vcu__psess_t *s)
{
    if (s->acct_slot >= 0)
        vcu__acct_release(s->px->acct, s->acct_slot);
    s->acct_slot = -1;
}

/* Waits for the killed worker to be gone, unless a reset comes first
 * (which does not wait). */
static void vcu__px_wait_exit(vcu__psess_t *s)
{
    for (;;) {
        struct timespec ts = { 0, 5 * 1000 * 1000 };
        pid_t r;
        bool stop;

        pthread_mutex_lock(&s->mu);
        r = waitpid(s->pid, NULL, WNOHANG);
        if (r == s->pid || (r < 0 && errno != EINTR)) {
            if (r == s->pid && s->px->sched != NULL)
                vcu__sched_worker_gone(s->px->sched, (uint32_t)r, vcu__sched_now());
            s->pid = -1;
            vcu__px_acct_release(s);
            pthread_mutex_unlock(&s->mu);
            return;
        }
        stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return;
        nanosleep(&ts, NULL);
    }
}

static void *vcu__px_reader(void *arg)
{
    vcu__psess_t *s = arg;
    vcu_proxy_t *px = s->px;
    unsigned char *buf = NULL, *rbuf;
    size_t cap = 0, have = 0;
    uint64_t spin_ns = (uint64_t)px->spin_us * 1000u;
    bool closing, stop;

    /* Reply bodies are copied out of the ring here before anything reads
     * them: the worker may change the ring's bytes at any time. */
    rbuf = malloc(VCU_IPC_MAX_RESP_BODY);
    if (rbuf == NULL)
        goto broken;
    for (;;) {
        struct vcu_ipc_hdr h;
        uint64_t until, seen;
        ssize_t n;
        int rc;

        /*
         * A submitter polls for its reply and takes what comes meanwhile:
         * stay off the lines of its path (the reply ring's tail it polls,
         * rx_busy and the position it writes) until its time is up.  A
         * third core reading them costs the path a line transfer each
         * time (bench/ring_rtt on the H200: the ring's round trip 729 ns
         * alone, 969-1017 ns beside a thread spinning on the tail or the
         * position, 721 ns beside one watching the clock).  Only the
         * clock is watched meanwhile; a new poll moves until on.
         */
        until = __atomic_load_n(&s->poll_until, __ATOMIC_ACQUIRE);
        if (until != 0 && vcu__ring_now_ns() < until) {
            do
                vcu__cpu_relax();
            while (vcu__ring_now_ns() < until);
            continue;
        }
        if (!vcu__px_rx_take(s)) {
            /* The submitter's poll ends shortly. */
            vcu__cpu_relax();
            continue;
        }
        while ((rc = vcu__ring_get(&s->resp, &h, rbuf, VCU_IPC_MAX_RESP_BODY,
                                   VCU_IPC_MAX_RESP_BODY)) > 0 &&
               h.type == VCU_IPC_RESP)
            vcu__px_reply(s, h.tag, rbuf, h.len);
        seen = s->resp.pos;
        vcu__px_rx_give(s);
        if (rc != 0)
            goto broken;            /* a broken ring, or a frame that is no reply */
        /* Waiting, the reader watches the producer's tail alone (the
         * worker's line, not the submitter's). */
        if (vcu__ring_wait_from(&s->resp, seen, s->fd, spin_ns, -1) == 0)
            continue;

        /* The socket: the worker's hello, or its end. */
        if (cap - have < 65536) {
            size_t ncap = cap ? cap * 2 : 131072;
            unsigned char *nb = realloc(buf, ncap);

            if (nb == NULL)
                goto broken;
            buf = nb;
            cap = ncap;
        }
        n = recv(s->fd, buf + have, cap - have, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (n <= 0) {
            /* Replies it published before it went still count. */
            while (!vcu__px_rx_take(s))
                vcu__cpu_relax();
            while ((rc = vcu__ring_get(&s->resp, &h, rbuf, VCU_IPC_MAX_RESP_BODY,
                                       VCU_IPC_MAX_RESP_BODY)) > 0 &&
                   h.type == VCU_IPC_RESP)
                vcu__px_reply(s, h.tag, rbuf, h.len);
            vcu__px_rx_give(s);
            break;
        }
        have += (size_t)n;
        while (have >= sizeof(h)) {
            memcpy(&h, buf, sizeof(h));
            if (h.type != VCU_IPC_HELLO || h.len > sizeof(struct vcu_ipc_hello))
                goto broken;
            if (have < sizeof(h) + h.len)
                break;
            memmove(buf, buf + sizeof(h) + h.len, have - sizeof(h) - h.len);
            have -= sizeof(h) + h.len;
        }
    }
    goto ended;
broken:
    /* A worker that breaks the link's rules is not trusted further. */
    vcu__px_kill(s);
ended:
    free(rbuf);
    free(buf);
    pthread_mutex_lock(&s->mu);
    stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (stop)
        return NULL;                /* the reset completes what is pending */
    /* Closed, or died on its own: either way make sure it is gone before
     * anything it was given back to the guest. */
    vcu__px_kill(s);
    vcu__px_wait_exit(s);
    pthread_mutex_lock(&px->mu);
    pthread_mutex_lock(&s->mu);
    stop = s->stop;
    s->dead = true;
    closing = s->closing;
    pthread_mutex_unlock(&s->mu);
    if (!stop && closing) {
        vcu__psess_t **pp;

        for (pp = &px->closing; *pp != s; pp = &(*pp)->zombie_next)
            ;
        *pp = s->zombie_next;
        s->closing = false;
        s->zombie_next = px->zombies;
        px->zombies = s;
    }
    pthread_mutex_unlock(&px->mu);
    if (stop)
        return NULL;
    /* A session whose worker died stays in the table, dead, until the
     * guest closes it. */
    vcu__px_cancel_all(s, closing ? VCU_S_ECANCELED : VCU_S_EIO);
    return NULL;
}

/* ---- sessions ---------------------------------------------------------- */

/* A worker to reap after a reset, and its account slot to free then. */
typedef struct vcu__preap_s {
    pid_t pid;
    vcu_account_t *acct;            /* a reference */
    int acct_slot;
} vcu__preap_t;

static void *vcu__px_reaper(void *arg)
{
    vcu__preap_t *r = arg;

    while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    if (r->acct_slot >= 0)
        vcu__acct_release(r->acct, r->acct_slot);
    vcu__acct_put(r->acct);
    free(r);
    return NULL;
}

/* Ends a session's threads and process without waiting for the process;
 * completes what is pending.  s is out of the table. */
static void vcu__px_sess_end(vcu__psess_t *s)
{
    pthread_t t;
    pthread_attr_t a;

    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
    vcu__px_kill(s);
    shutdown(s->fd, SHUT_RDWR);
    pthread_join(s->reader, NULL);
    pthread_join(s->sender, NULL);
    vcu__px_cancel_all(s, VCU_S_ECANCELED);
    if (s->pid > 0) {
        vcu__preap_t *r = malloc(sizeof(*r));

        if (r != NULL && pthread_attr_init(&a) == 0) {
            r->pid = s->pid;
            r->acct = vcu__acct_get(s->px->acct);
            r->acct_slot = s->acct_slot;
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &a, vcu__px_reaper, r) == 0) {
                s->acct_slot = -1;  /* the reaper's now */
                r = NULL;
            } else {
                vcu__acct_put(r->acct);
            }
            pthread_attr_destroy(&a);
        }
        free(r);
        /* No reaper: the process is killed; what it held goes with it. */
        if (s->acct_slot >= 0)
            waitpid(s->pid, NULL, WNOHANG);
    }
    vcu__px_acct_release(s);
}

static void vcu__px_sess_free(vcu__psess_t *s)
{
    vcu__pframe_t *f;

    while ((f = s->qhead) != NULL) {
        s->qhead = f->next;
        vcu__px_frame_free(f);
    }
    while ((f = s->rqhead) != NULL) {
        s->rqhead = f->next;
        vcu__px_frame_free(f);
    }
    while (s->pfree != NULL) {
        vcu__preq_t *p = s->pfree;

        s->pfree = p->next;
        free(p);
    }
    close(s->fd);
    if (s->shm != NULL)
        munmap(s->shm, s->shm_len);
    close(s->wake_req);
    close(s->wake_resp);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Joins and frees the sessions whose close has completed.  No lock held. */
static void vcu__px_reap_zombies(vcu_proxy_t *px)
{
    vcu__psess_t *list, *s;

    pthread_mutex_lock(&px->mu);
    list = px->zombies;
    px->zombies = NULL;
    pthread_mutex_unlock(&px->mu);
    while ((s = list) != NULL) {
        list = s->zombie_next;
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->reader, NULL);
        pthread_join(s->sender, NULL);
        vcu__px_sess_free(s);
    }
}

/*
 * Starts the worker with its end of the socket as fd 3 and, for a
 * session (s), the shared area and the rings' doorbells as fds 4, 5, 6
 * and the VM's memory account as fd 7 (with the session's slot in it and
 * the quota on the command line).
 * Every fd given is above them first, so that no dup2 overwrites
 * another's source.
 */
static int vcu__px_spawn(vcu_proxy_t *px, int child_fd, vcu__psess_t *s, pid_t *pid, bool probe)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    char cap[2] = { px->capture_printf ? '1' : '0', '\0' };
    char spin[16], aslot[16], quota[24], mcsize[24], svm[16], scap[16], sms[16];
    char *argv[40];
    int src[5] = { -1, -1, -1, -1, -1 };
    int argc = 0, rc, i;

    src[0] = fcntl(child_fd, F_DUPFD_CLOEXEC, 16);
    if (s != NULL) {
        int shm_fd = memfd_create("vcu-ring", MFD_CLOEXEC);

        if (shm_fd >= 0) {
            src[1] = fcntl(shm_fd, F_DUPFD_CLOEXEC, 16);
            close(shm_fd);
        }
        src[2] = fcntl(s->wake_peer[0], F_DUPFD_CLOEXEC, 16);
        src[3] = fcntl(s->wake_peer[1], F_DUPFD_CLOEXEC, 16);
        src[4] = fcntl(px->acct->fd, F_DUPFD_CLOEXEC, 16);
        if (src[1] < 0 || ftruncate(src[1], (off_t)s->shm_len) != 0 ||
            (s->shm = mmap(NULL, s->shm_len, PROT_READ | PROT_WRITE, MAP_SHARED, src[1], 0)) ==
                MAP_FAILED) {
            s->shm = NULL;
            rc = VCU_EIO;
            goto out;
        }
    }
    for (i = 0; i < (s != NULL ? 5 : 1); i++)
        if (src[i] < 0) {
            rc = VCU_EIO;
            goto out;
        }
    if (s != NULL) {
        struct vcu_ipc_shm *shm = s->shm;
        unsigned char *base = s->shm;

        shm->magic = VCU_IPC_SHM_MAGIC;
        shm->req_size = px->ring_bytes;
        shm->resp_size = VCU_IPC_RESP_RING;
        vcu__ring_init(&s->req, &shm->req, base + VCU_IPC_SHM_HDR, px->ring_bytes, s->wake_req);
        vcu__ring_init(&s->resp, &shm->resp, base + VCU_IPC_SHM_HDR + px->ring_bytes,
                       VCU_IPC_RESP_RING, s->wake_resp);
    }

    argv[argc++] = px->worker;
    argv[argc++] = (char *)"--fd";
    argv[argc++] = (char *)"3";
    argv[argc++] = (char *)"--capture-printf";
    argv[argc++] = cap;
    if (s != NULL) {
        snprintf(spin, sizeof(spin), "%u", px->spin_us);
        argv[argc++] = (char *)"--shm";
        argv[argc++] = (char *)"4";
        argv[argc++] = (char *)"--wake-req";
        argv[argc++] = (char *)"5";
        argv[argc++] = (char *)"--wake-resp";
        argv[argc++] = (char *)"6";
        argv[argc++] = (char *)"--spin-us";
        argv[argc++] = spin;
        snprintf(aslot, sizeof(aslot), "%d", s->acct_slot);
        snprintf(quota, sizeof(quota), "%llu", (unsigned long long)px->acct->quota);
        argv[argc++] = (char *)"--account";
        argv[argc++] = (char *)"7";
        argv[argc++] = (char *)"--account-slot";
        argv[argc++] = aslot;
        argv[argc++] = (char *)"--mem-quota";
        argv[argc++] = quota;
    }
    if (px->gpus != NULL) {
        argv[argc++] = (char *)"--gpus";
        argv[argc++] = px->gpus;
    }
    if (px->libcuda != NULL) {
        argv[argc++] = (char *)"--libcuda";
        argv[argc++] = px->libcuda;
    }
    if (px->module_cache != NULL) {
        snprintf(mcsize, sizeof(mcsize), "%llu", (unsigned long long)px->module_cache_bytes);
        argv[argc++] = (char *)"--module-cache";
        argv[argc++] = px->module_cache;
        argv[argc++] = (char *)"--module-cache-size";
        argv[argc++] = mcsize;
    }
    if (px->sched != NULL && !probe) {
        snprintf(svm, sizeof(svm), "%d", px->sched->vm_slot);
        snprintf(scap, sizeof(scap), "%u", px->sched->cap);
        argv[argc++] = (char *)"--share-group";
        argv[argc++] = px->share_group;
        argv[argc++] = (char *)"--share-vm";
        argv[argc++] = svm;
        argv[argc++] = (char *)"--compute-cap";
        argv[argc++] = scap;
    }
    if (px->sms != 0) {
        snprintf(sms, sizeof(sms), "%u", px->sms);
        argv[argc++] = (char *)"--sms";
        argv[argc++] = sms;
        argv[argc++] = (char *)"--mps-pipe";
        argv[argc++] = px->mps_pipe;
    }
    if (probe)
        argv[argc++] = (char *)"--probe";
    argv[argc] = NULL;

    rc = VCU_ENOMEM;
    if (posix_spawn_file_actions_init(&fa) != 0)
        goto out;
    if (posix_spawnattr_init(&at) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        goto out;
    }
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    /* Device printf the worker does not capture goes nowhere, never to
     * QEMU's stdout (a serial console, a monitor). */
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, src[0], VCU__PX_FD_SOCK);
    if (s != NULL) {
        posix_spawn_file_actions_adddup2(&fa, src[1], VCU__PX_FD_SHM);
        posix_spawn_file_actions_adddup2(&fa, src[2], VCU__PX_FD_WAKE_REQ);
        posix_spawn_file_actions_adddup2(&fa, src[3], VCU__PX_FD_WAKE_RESP);
        posix_spawn_file_actions_adddup2(&fa, src[4], VCU__PX_FD_ACCT);
    }
    rc = posix_spawn(pid, px->worker, &fa, &at, argv, environ) == 0 ? 0 : VCU_EIO;
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
out:
    for (i = 0; i < 5; i++)
        if (src[i] >= 0)
            close(src[i]);
    return rc;
}

/* SESSION_OPEN: a new worker, told to open its session. */
static void vcu__px_forward(vcu__psess_t *s, vcu_request_t *req, const struct vcu_req_hdr *hp,
                            bool open);

/* A ring's doorbell: a non-blocking socket pair, ours and the worker's. */
static int vcu__px_doorbell(int *ours, int *theirs)
{
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    *ours = sv[0];
    *theirs = sv[1];
    return 0;
}

static void vcu__px_open(vcu_proxy_t *px, vcu_request_t *req, const struct vcu_req_hdr *h)
{
    vcu__psess_t *s;
    int sv[2], rc;
    unsigned int slot;
    uint32_t status = VCU_S_ENOMEM;

    vcu__px_reap_zombies(px);
    /* Aligned: poll_until has a cache line of its own. */
    s = aligned_alloc(64, (sizeof(*s) + 63) & ~(size_t)63);
    if (s == NULL)
        goto fail;
    memset(s, 0, sizeof(*s));
    s->px = px;
    s->pid = -1;
    s->acct_slot = -1;
    s->fd = -1;
    s->wake_req = -1;
    s->wake_resp = -1;
    s->wake_peer[0] = -1;
    s->wake_peer[1] = -1;
    if (pthread_mutex_init(&s->mu, NULL) != 0)
        goto fail_s;
    if (pthread_cond_init(&s->cond, NULL) != 0)
        goto fail_mu;

    pthread_mutex_lock(&px->mu);
    if (px->nlive >= px->max_sessions) {
        pthread_mutex_unlock(&px->mu);
        status = VCU_S_EBUSY;
        goto fail_cond;
    }
    for (slot = 0; slot < px->max_sessions; slot++)
        if (px->sessions[slot] == NULL)
            break;
    s->slot = slot;
    s->id = (px->next_gen++ << 32) | (uint64_t)(slot + 1);
    px->sessions[slot] = s;         /* reserved; undone below on failure */
    px->nlive++;
    pthread_mutex_unlock(&px->mu);

    /* Slots are twice the sessions: a reset's workers hold theirs until
     * they are reaped, while new sessions start. */
    s->acct_slot = vcu__acct_claim(px->acct, s->id);
    if (s->acct_slot < 0) {
        status = VCU_S_EBUSY;
        goto fail_slot;
    }
    status = VCU_S_EIO;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        goto fail_slot;
    s->fd = sv[0];
    s->shm_len = VCU_IPC_SHM_HDR + (size_t)px->ring_bytes + VCU_IPC_RESP_RING;
    /* Doorbells are sockets, not eventfds: a socket wakes its reader
     * as a synchronous hand-over (the waker is about to wait), which the
     * scheduler serves on the waker's CPU rather than an idle one. */
    if (vcu__px_doorbell(&s->wake_req, &s->wake_peer[0]) != 0 ||
        vcu__px_doorbell(&s->wake_resp, &s->wake_peer[1]) != 0) {
        close(sv[1]);
        goto fail_slot;
    }
    rc = vcu__px_spawn(px, sv[1], s, &s->pid, false);
    close(sv[1]);
    close(s->wake_peer[0]);
    close(s->wake_peer[1]);
    s->wake_peer[0] = s->wake_peer[1] = -1;
    if (rc != 0)
        goto fail_slot;
    vcu__acct_set_pid(px->acct, s->acct_slot, (uint32_t)s->pid);
    if (pthread_create(&s->sender, NULL, vcu__px_sender, s) != 0)
        goto fail_kill;
    if (pthread_create(&s->reader, NULL, vcu__px_reader, s) != 0) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->sender, NULL);
        goto fail_kill;
    }
    vcu__px_forward(s, req, h, true);
    return;

fail_kill:
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
fail_slot:
    vcu__px_acct_release(s);
    pthread_mutex_lock(&px->mu);
    px->sessions[s->slot] = NULL;
    px->nlive--;
    pthread_mutex_unlock(&px->mu);
    if (s->fd >= 0)
        close(s->fd);
    if (s->shm != NULL)
        munmap(s->shm, s->shm_len);
    if (s->wake_req >= 0)
        close(s->wake_req);
    if (s->wake_resp >= 0)
        close(s->wake_resp);
    if (s->wake_peer[0] >= 0)
        close(s->wake_peer[0]);
    if (s->wake_peer[1] >= 0)
        close(s->wake_peer[1]);
fail_cond:
    pthread_cond_destroy(&s->cond);
fail_mu:
    pthread_mutex_destroy(&s->mu);
fail_s:
    free(s);
fail:
    vcu__px_complete(req, h->req_id, status);
}

static vcu__psess_t *vcu__px_lookup_locked(vcu_proxy_t *px, uint64_t id)
{
    uint64_t slot = id & 0xffffffffu;

    if (slot == 0 || slot > px->max_sessions)
        return NULL;
    if (px->sessions[slot - 1] == NULL || px->sessions[slot - 1]->id != id)
        return NULL;
    return px->sessions[slot - 1];
}

/* ---- submit ------------------------------------------------------------ */

/*
 * The submitter, right after a synchronous request went onto the request
 * ring: takes replies off the reply ring until the one for tag, at most
 * until until (the session's poll_until, px->poll_ns after the request
 * was put), completing each as the reader would (earlier async requests'
 * replies come first).  Returns at once if the reader is taking replies;
 * what is left when the time is up is the reader's.
 */
static void vcu__px_poll(vcu__psess_t *s, uint64_t tag, uint64_t until)
{
    vcu_proxy_t *px = s->px;
    unsigned int i = 0;

    if (!vcu__px_rx_take(s))
        return;
    for (;;) {
        struct vcu_ipc_hdr h;
        int rc = vcu__ring_get(&s->resp, &h, px->pbuf, VCU_IPC_MAX_RESP_BODY,
                               VCU_IPC_MAX_RESP_BODY);

        if (rc > 0 && h.type == VCU_IPC_RESP) {
            vcu__px_reply(s, h.tag, px->pbuf, h.len);
            if (h.tag == tag)
                break;
            continue;
        }
        if (rc != 0) {
            /* A worker that breaks the link's rules: its end ends the
             * session (the reader sees its socket close). */
            vcu__px_kill(s);
            break;
        }
        vcu__cpu_relax();
        if ((++i & 15u) == 0 && vcu__ring_now_ns() > until)
            break;
    }
    vcu__px_rx_give(s);
}

static void vcu__px_forward(vcu__psess_t *s, vcu_request_t *req, const struct vcu_req_hdr *hp,
                            bool open);

VCU_EXPORT void vcu_proxy_submit(vcu_proxy_t *px, vcu_request_t *req)
{
    struct vcu_req_hdr h;
    vcu__psess_t *s;
    bool dead = false;

    if (req->req_len < sizeof(h) || req->req_len > sizeof(h) + VCU_MAX_PAYLOAD + 8 +
                                                   VCU_MAX_SEGS * sizeof(struct vcu_seg)) {
        vcu__px_complete(req, vcu__px_req_id(req), VCU_S_EINVAL);
        return;
    }
    memcpy(&h, req->req, sizeof(h));
    if (h.opcode == VCU_OP_SESSION_OPEN) {
        vcu__px_open(px, req, &h);
        return;
    }
    pthread_mutex_lock(&px->mu);
    s = vcu__px_lookup_locked(px, h.session);
    if (s != NULL && h.opcode == VCU_OP_SESSION_CLOSE) {
        /* Out of the table now: nothing more reaches the worker. */
        px->sessions[s->slot] = NULL;
        px->nlive--;
        pthread_mutex_lock(&s->mu);
        dead = s->dead;
        if (!dead)
            s->close_req = req;
        pthread_mutex_unlock(&s->mu);
        if (dead) {
            /* Its reader has ended already. */
            s->zombie_next = px->zombies;
            px->zombies = s;
        } else {
            s->closing = true;
            s->zombie_next = px->closing;
            px->closing = s;
        }
    }
    pthread_mutex_unlock(&px->mu);
    if (s == NULL) {
        vcu__px_complete(req, h.req_id, VCU_S_ENOSESSION);
        return;
    }
    if (h.opcode == VCU_OP_SESSION_CLOSE) {
        if (dead) {
            vcu__px_complete(req, h.req_id, VCU_S_OK);
            return;
        }
        /* Nothing of the session's survives its process: no final
         * synchronize that a never-ending kernel could hold up. */
        vcu__px_kill(s);
        shutdown(s->fd, SHUT_RDWR);
        return;
    }
    vcu__px_forward(s, req, &h, false);
}

/* Sends the request to the session's worker: the regions it has not seen
 * yet first, each with its fd, then the request and its ranges.  A frame
 * for the ring is built in the session's buffer when it fits there, and
 * is copied only if it must wait for room. */
static void vcu__px_forward(vcu__psess_t *s, vcu_request_t *req, const struct vcu_req_hdr *hp,
                            bool open)
{
    struct vcu_req_hdr h = *hp;
    vcu__pframe_t *rf = NULL, *mf = NULL, *gf[VCU_MAX_SEGS] = { NULL };
    vcu__preq_t *p = NULL;
    struct vcu_ipc_hdr ih;
    struct vcu_ipc_req ir;
    uint64_t nranges = 0, body;
    size_t pad, off, len;
    unsigned char *buf;
    unsigned int i, j, ngf = 0;
    int newfd[VCU_MAX_SEGS];
    uint32_t status;
    uint64_t until = 0;
    bool poll = false, ring, inbuf;

    if (req->nsegs > VCU_MAX_SEGS)
        goto einval;
    for (i = 0; i < req->nsegs; i++) {
        if (req->segs[i].iovcnt > 0 && req->segs[i].ref == NULL) {
            vcu__px_complete(req, h.req_id, VCU_S_EFAULT);
            return;
        }
        nranges += req->segs[i].iovcnt;
    }
    if (nranges > VCU_MAX_RANGES)
        goto einval;

    pad = (8 - req->req_len % 8) % 8;
    body = sizeof(ir) + req->req_len + pad + nranges * sizeof(struct vcu_ipc_range);
    len = sizeof(ih) + body;
    ring = vcu__ring_frame_bytes(body) <= s->req.size / 4;
    inbuf = ring && len <= sizeof(s->fbuf);
    if (!inbuf) {
        rf = calloc(1, sizeof(*rf));
        if (rf == NULL)
            goto enomem;
        rf->fd = -1;
        rf->len = len;
        rf->buf = malloc(len);
        if (rf->buf == NULL)
            goto enomem;
    }
    if (!ring) {
        /* The VCU_IPC_SOCK entry that marks its place in the ring. */
        struct vcu_ipc_hdr mh = { .type = VCU_IPC_SOCK, .len = 0, .tag = 0 };

        mf = calloc(1, sizeof(*mf));
        if (mf == NULL || (mf->buf = malloc(sizeof(mh))) == NULL)
            goto enomem;
        memcpy(mf->buf, &mh, sizeof(mh));
        mf->len = sizeof(mh);
        mf->fd = -1;
    }

    pthread_mutex_lock(&s->mu);
    status = VCU_S_EIO;
    if (s->dead)
        goto fail_locked;           /* its worker is gone: dead until closed */
    status = VCU_S_ENOMEM;
    if ((p = vcu__px_preq_get_locked(s)) == NULL)
        goto fail_locked;
    /* A synchronous request on the ring is polled for: the reader is
     * told before its reply can come (vcu__px_reader()). */
    poll = ring && !open && !(h.flags & VCU_REQ_F_ASYNC) && s->px->poll_ns > 0;
    buf = inbuf ? s->fbuf : rf->buf;
    ih.type = VCU_IPC_REQ;
    ih.len = (uint32_t)body;
    ih.tag = ++s->next_tag;
    ir.req_len = (uint32_t)req->req_len;
    ir.nranges = (uint32_t)nranges;
    ir.resp_cap = req->resp_cap;
    off = 0;
    memcpy(buf + off, &ih, sizeof(ih));
    off += sizeof(ih);
    memcpy(buf + off, &ir, sizeof(ir));
    off += sizeof(ir);
    memcpy(buf + off, req->req, req->req_len);
    if (!open) {
        /* The worker knows its session by its own id. */
        uint64_t wid = s->wid;

        memcpy(buf + off + offsetof(struct vcu_req_hdr, session), &wid, sizeof(wid));
    }
    off += req->req_len;
    memset(buf + off, 0, pad);
    off += pad;
    status = VCU_S_EFAULT;
    for (i = 0; i < req->nsegs; i++) {
        const vcu_segment_t *sg = &req->segs[i];

        for (j = 0; j < sg->iovcnt; j++) {
            struct vcu_ipc_range r;
            unsigned int k;
            int fd = sg->ref[j].fd;

            memset(&r, 0, sizeof(r));
            r.region = (uint32_t)fd;
            r.off = sg->ref[j].off;
            r.len = sg->iov[j].iov_len;
            memcpy(buf + off, &r, sizeof(r));
            off += sizeof(r);
            for (k = 0; k < s->nsent && s->sent_fds[k] != fd; k++)
                ;
            if (k < s->nsent)
                continue;
            for (k = 0; k < ngf && newfd[k] != fd; k++)
                ;
            if (k < ngf)
                continue;
            if (fd < 0 || s->nsent + ngf >= VCU_IPC_MAX_REGIONS || ngf >= VCU_MAX_SEGS)
                goto fail_locked;
            newfd[ngf++] = fd;
        }
    }
    /* The regions the worker has not seen yet go first, each with its fd. */
    status = VCU_S_ENOMEM;
    for (i = 0; i < ngf; i++) {
        struct vcu_ipc_region rg;
        struct vcu_ipc_hdr rh;

        gf[i] = calloc(1, sizeof(*gf[i]));
        if (gf[i] == NULL || (gf[i]->buf = malloc(sizeof(rh) + sizeof(rg))) == NULL)
            goto fail_locked;
        memset(&rg, 0, sizeof(rg));
        rg.id = (uint32_t)newfd[i];
        rh.type = VCU_IPC_REGION;
        rh.len = sizeof(rg);
        rh.tag = 0;
        memcpy(gf[i]->buf, &rh, sizeof(rh));
        memcpy(gf[i]->buf + sizeof(rh), &rg, sizeof(rg));
        gf[i]->len = sizeof(rh) + sizeof(rg);
        gf[i]->fd = newfd[i];
    }
    for (i = 0; i < ngf; i++) {
        s->sent_fds[s->nsent++] = newfd[i];
        vcu__px_send_locked(s, gf[i]);
        gf[i] = NULL;
    }
    if (poll) {
        until = vcu__ring_now_ns() + s->px->poll_ns;
        __atomic_store_n(&s->poll_until, until, __ATOMIC_RELEASE);
    }
    if (inbuf && !vcu__px_ring_try_locked(s, buf)) {
        /* Behind a full ring: it waits in a copy of its own. */
        rf = calloc(1, sizeof(*rf));
        if (rf == NULL || (rf->buf = malloc(len)) == NULL)
            goto fail_locked;
        memcpy(rf->buf, buf, len);
        rf->fd = -1;
        rf->len = len;
    }
    p->req = req;
    p->tag = ih.tag;
    p->req_id = h.req_id;
    p->open = open;
    p->next = NULL;
    if (s->pending_tail != NULL)
        s->pending_tail->next = p;
    else
        s->pending = p;
    s->pending_tail = p;
    if (ring) {
        if (rf != NULL)
            vcu__px_ring_send_locked(s, rf);
        /* On the ring now, nothing ahead of it queued: its reply may be
         * microseconds away. */
        poll = poll && s->rqhead == NULL && !s->broken;
        if (!poll && until != 0)
            __atomic_store_n(&s->poll_until, 0, __ATOMIC_RELEASE);
    } else {
        /* Too large for the ring: on the socket, and its place in the
         * ring's order marked. */
        vcu__px_send_locked(s, rf);
        vcu__px_ring_send_locked(s, mf);
        mf = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    free(mf ? mf->buf : NULL);
    free(mf);
    if (poll)
        vcu__px_poll(s, ih.tag, until);
    return;

fail_locked:
    if (p != NULL)
        vcu__px_preq_put_locked(s, p);
    if (until != 0)
        __atomic_store_n(&s->poll_until, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    for (i = 0; i < ngf; i++)
        if (gf[i] != NULL) {
            free(gf[i]->buf);
            free(gf[i]);
        }
    free(rf ? rf->buf : NULL);
    free(rf);
    free(mf ? mf->buf : NULL);
    free(mf);
    vcu__px_complete(req, h.req_id, status);
    return;
enomem:
    free(rf ? rf->buf : NULL);
    free(rf);
    free(mf ? mf->buf : NULL);
    free(mf);
    vcu__px_complete(req, h.req_id, VCU_S_ENOMEM);
    return;
einval:
    vcu__px_complete(req, h.req_id, VCU_S_EINVAL);
}

/* ---- the proxy --------------------------------------------------------- */

/*
 * Runs a worker with --probe and waits (at most timeout_ms) for what it
 * says of CUDA: the driver, the GPU list.  At creation, before any guest
 * runs, so that a wrong configuration shows at start.
 */
static void vcu__px_probe(vcu_proxy_t *px, int timeout_ms)
{
    struct vcu_ipc_hdr h;
    struct vcu_ipc_hello hello;
    unsigned char buf[sizeof(h) + sizeof(hello)];
    size_t have = 0;
    pid_t pid;
    int sv[2];

    snprintf(px->cuda_error, sizeof(px->cuda_error), "the worker did not answer");
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return;
    if (vcu__px_spawn(px, sv[1], NULL, &pid, true) != 0) {
        snprintf(px->cuda_error, sizeof(px->cuda_error), "cannot start %s", px->worker);
        close(sv[0]);
        close(sv[1]);
        return;
    }
    close(sv[1]);
    while (have < sizeof(buf)) {
        struct pollfd pfd = { .fd = sv[0], .events = POLLIN };
        ssize_t n;

        if (poll(&pfd, 1, timeout_ms) <= 0)
            break;
        n = recv(sv[0], buf + have, sizeof(buf) - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    if (have == sizeof(buf)) {
        memcpy(&h, buf, sizeof(h));
        memcpy(&hello, buf + sizeof(h), sizeof(hello));
        if (h.type == VCU_IPC_HELLO && h.len == sizeof(hello)) {
            hello.cuda_error[sizeof(hello.cuda_error) - 1] = '\0';
            snprintf(px->cuda_error, sizeof(px->cuda_error), "%s", hello.cuda_error);
        }
    }
    close(sv[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Joins the compute-share group at path as a VM of this weight and cap. */
static int vcu__px_share_open(vcu_proxy_t *px, const char *path, uint32_t weight, uint32_t cap,
                              char *err, size_t errlen)
{
    px->share_group = strdup(path);
    if (px->share_group == NULL) {
        snprintf(err, errlen, "out of memory");
        return VCU_ENOMEM;
    }
    if (vcu__sched_open(path, 1, &px->sched, err, errlen) != 0)
        return VCU_EINVAL;
    if (vcu__sched_vm_claim(px->sched, weight, cap, vcu__sched_now()) != 0) {
        snprintf(err, errlen, "share-group %s: no free VM slot (%u VMs at most)", path,
                 VCU_SCHED_VMS);
        vcu__sched_close(px->sched);
        px->sched = NULL;
        return VCU_EBUSY;
    }
    return 0;
}

VCU_EXPORT int vcu_proxy_new(const vcu_proxy_config_t *cfg, vcu_proxy_t **out, char *err,
                             size_t errlen)
{
    vcu_proxy_t *px;
    bool mc;

    *out = NULL;
    if (cfg == NULL || cfg->worker == NULL || cfg->worker[0] == '\0') {
        snprintf(err, errlen, "no worker program given");
        return VCU_EINVAL;
    }
    if (cfg->compute_share > VCU_SCHED_WEIGHT_MAX) {
        snprintf(err, errlen, "compute-share must be 1..%u", VCU_SCHED_WEIGHT_MAX);
        return VCU_EINVAL;
    }
    if (cfg->compute_cap > 100) {
        snprintf(err, errlen, "compute-cap must be a percentage, 1..100");
        return VCU_EINVAL;
    }
    if (cfg->share_group != NULL && cfg->share_group[0] != '\0' && cfg->share_group[0] != '/') {
        snprintf(err, errlen, "share-group must be an absolute path");
        return VCU_EINVAL;
    }
    if (cfg->sms > VCU_PROXY_MAX_SMS) {
        snprintf(err, errlen, "sms must be 1..%u (0: isolated mode), not %u", VCU_PROXY_MAX_SMS,
                 cfg->sms);
        return VCU_EINVAL;
    }
    /* A packed VM's share of the GPU is its SMs, side by side with the
     * others: there is no turn to take. */
    if (cfg->sms != 0 && (cfg->compute_share != 0 || cfg->compute_cap != 0 ||
                          (cfg->share_group != NULL && cfg->share_group[0] != '\0'))) {
        snprintf(err, errlen, "sms (packed mode) does not go with compute-share, compute-cap or "
                 "share-group (isolated mode): a packed VM's share is its SMs");
        return VCU_EINVAL;
    }
    if (cfg->sms != 0 && cfg->mps_pipe != NULL && cfg->mps_pipe[0] != '\0' &&
        cfg->mps_pipe[0] != '/') {
        snprintf(err, errlen, "mps-pipe must be an absolute path, not '%s'", cfg->mps_pipe);
        return VCU_EINVAL;
    }
    if (access(cfg->worker, X_OK) != 0) {
        snprintf(err, errlen, "worker program %s: %s", cfg->worker, strerror(errno));
        return VCU_ENODEV;
    }
    if (cfg->ring_bytes != 0 &&
        (cfg->ring_bytes < VCU_IPC_REQ_RING_MIN || cfg->ring_bytes > VCU_IPC_REQ_RING_MAX ||
         (cfg->ring_bytes & (cfg->ring_bytes - 1)) != 0)) {
        snprintf(err, errlen, "the request ring must be a power of two of %u..%u bytes",
                 VCU_IPC_REQ_RING_MIN, VCU_IPC_REQ_RING_MAX);
        return VCU_EINVAL;
    }
    if (cfg->max_sessions > VCU__PX_MAX_SESSIONS) {
        snprintf(err, errlen, "at most %u sessions", VCU__PX_MAX_SESSIONS);
        return VCU_EINVAL;
    }
    /* The module cache's directory is checked here, once, with a reason
     * the user sees; each worker checks it again when it opens it. */
    mc = cfg->module_cache != NULL && cfg->module_cache[0] != '\0' &&
         strcmp(cfg->module_cache, "off") != 0;
    if (mc) {
        int dfd, rc = vcu_modcache_dir_open(cfg->module_cache, 1, &dfd, err, errlen);

        if (rc != 0)
            return rc;
        close(dfd);
    }
    px = calloc(1, sizeof(*px));
    if (px == NULL)
        goto enomem;
    px->max_sessions = cfg->max_sessions ? cfg->max_sessions : VCU__PX_DEFAULT_SESSIONS;
    px->capture_printf = cfg->capture_printf;
    px->ring_bytes = cfg->ring_bytes ? cfg->ring_bytes : VCU_IPC_REQ_RING_DEFAULT;
    px->spin_us = cfg->spin_us;
    if (px->spin_us == 0) {
        const char *e = getenv("VCU_SPIN_US");

        /* A spinning consumer holds a CPU that the producer may need:
         * with few CPUs (a vCPU thread, the reader, the worker and its
         * executor all want one) it only delays the wake-up. */
        if (e != NULL && e[0] != '\0')
            px->spin_us = (unsigned int)strtoul(e, NULL, 10);
        else
            px->spin_us = sysconf(_SC_NPROCESSORS_ONLN) >= VCU__PX_SPIN_MIN_CPUS
                              ? VCU__PX_SPIN_US_DEFAULT
                              : 0;
    }
    {
        const char *e = getenv("VCU_POLL_US");
        unsigned long poll_us = e != NULL && e[0] != '\0' ? strtoul(e, NULL, 10)
                                                           : VCU__PX_POLL_US;

        /* Bounded: QEMU's thread holds the BQL meanwhile. */
        if (poll_us > 100)
            poll_us = 100;
        if (poll_us > px->spin_us)
            poll_us = px->spin_us;
        px->poll_ns = (uint64_t)poll_us * 1000u;
    }
    px->next_gen = 1;
    px->pbuf = malloc(VCU_IPC_MAX_RESP_BODY);
    px->worker = strdup(cfg->worker);
    px->gpus = cfg->gpus ? strdup(cfg->gpus) : NULL;
    px->libcuda = cfg->libcuda ? strdup(cfg->libcuda) : NULL;
    if (mc)
        px->module_cache = strdup(cfg->module_cache);
    px->module_cache_bytes = cfg->module_cache_bytes ? cfg->module_cache_bytes
                                                     : VCU_MODCACHE_DEFAULT_BYTES;
    px->sessions = calloc(px->max_sessions, sizeof(*px->sessions));
    px->sms = cfg->sms;
    if (px->sms != 0) {
        const char *e = getenv("CUDA_MPS_PIPE_DIRECTORY");

        px->mps_pipe = strdup(cfg->mps_pipe != NULL && cfg->mps_pipe[0] != '\0' ? cfg->mps_pipe
                              : e != NULL && e[0] == '/'                       ? e
                                                                               : VCU_PROXY_MPS_PIPE);
    }
    if (px->worker == NULL || (cfg->gpus && !px->gpus) || (cfg->libcuda && !px->libcuda) ||
        (px->sms != 0 && !px->mps_pipe) ||
        (mc && !px->module_cache) || px->sessions == NULL || px->pbuf == NULL ||
        vcu__acct_new(cfg->mem_quota, px->max_sessions * 2, &px->acct) != 0 ||
        pthread_mutex_init(&px->mu, NULL) != 0) {
        vcu__acct_put(px->acct);
        free(px->pbuf);
        free(px->worker);
        free(px->gpus);
        free(px->libcuda);
        free(px->module_cache);
        free(px->mps_pipe);
        free(px->sessions);
        free(px);
        goto enomem;
    }
    if (cfg->compute_share != 0 || (cfg->compute_cap != 0 && cfg->compute_cap != 100) ||
        (cfg->share_group != NULL && cfg->share_group[0] != '\0')) {
        const char *g = cfg->share_group != NULL && cfg->share_group[0] != '\0'
                            ? cfg->share_group
                            : VCU_SCHED_DEFAULT_GROUP;
        int rc = vcu__px_share_open(px, g, cfg->compute_share ? cfg->compute_share : 100,
                                    cfg->compute_cap, err, errlen);

        if (rc != 0) {
            vcu_proxy_free(px);
            return rc;
        }
    }
    vcu__px_probe(px, 60000);
    *out = px;
    return 0;
enomem:
    snprintf(err, errlen, "out of memory");
    return VCU_ENOMEM;
}

VCU_EXPORT void vcu_proxy_reset(vcu_proxy_t *px)
{
    vcu__psess_t *list = NULL, *s;
    unsigned int i;

    if (px == NULL)
        return;
    pthread_mutex_lock(&px->mu);
    for (i = 0; i < px->max_sessions; i++) {
        s = px->sessions[i];
        if (s == NULL)
            continue;
        px->sessions[i] = NULL;
        s->zombie_next = list;
        list = s;
    }
    px->nlive = 0;
    while ((s = px->closing) != NULL) {
        px->closing = s->zombie_next;
        s->closing = false;
        s->zombie_next = list;
        list = s;
    }
    pthread_mutex_unlock(&px->mu);
    /* A closing session's reader, once it sees stop, leaves the session
     * to us; one that got to the zombie list first is joined below. */
    while ((s = list) != NULL) {
        list = s->zombie_next;
        vcu__px_sess_end(s);
        vcu__px_sess_free(s);
    }
    vcu__px_reap_zombies(px);
}

VCU_EXPORT void vcu_proxy_free(vcu_proxy_t *px)
{
    if (px == NULL)
        return;
    vcu_proxy_reset(px);
    pthread_mutex_destroy(&px->mu);
    vcu__acct_put(px->acct);        /* reapers still out hold it */
    if (px->sched != NULL) {
        vcu__sched_vm_release(px->sched, vcu__sched_now());
        vcu__sched_close(px->sched);
    }
    free(px->share_group);
    free(px->mps_pipe);
    free(px->sessions);
    free(px->pbuf);
    free(px->worker);
    free(px->gpus);
    free(px->libcuda);
    free(px->module_cache);
    free(px);
}

VCU_EXPORT int vcu_proxy_stats(vcu_proxy_t *px, vcu_proxy_stats_t *out,
                               vcu_proxy_session_stats_t *sess, uint32_t cap)
{
    struct vcu__acct_seen *seen = NULL;
    vcu_account_t *a;
    uint32_t d, i;

    if (px == NULL || out == NULL || (sess == NULL && cap != 0))
        return VCU_EINVAL;
    a = px->acct;
    memset(out, 0, sizeof(*out));
    out->mem_quota = a->quota;
    for (d = 0; d < VCU_ACCT_DEVS; d++) {
        out->mem_used[d] = vcu__acct_used(a, d);
        out->ctx_bytes[d] = vcu__acct_ctx(a, d);
    }
    out->faults = atomic_load(&a->hdr->faults);
    out->sms = px->sms;
    if (px->sched != NULL) {
        out->compute_share = vcu__sched_weight(&px->sched->vm[px->sched->vm_slot]);
        out->compute_cap = px->sched->cap;
        vcu__sched_vm_report(px->sched, &out->gpu_ns, &out->group_gpu_ns, &out->grants);
    }
    pthread_mutex_lock(&px->mu);
    out->sessions = px->nlive;
    pthread_mutex_unlock(&px->mu);
    if (cap > a->nslots)
        cap = a->nslots;
    if (cap > 0 && (seen = calloc(cap, sizeof(*seen))) == NULL)
        return VCU_ENOMEM;
    out->workers = vcu__acct_report(a, seen, cap);
    out->nsess = out->workers < cap ? out->workers : cap;
    for (i = 0; i < out->nsess; i++) {
        sess[i].session = seen[i].session;
        sess[i].pid = seen[i].pid;
        sess[i].fault = seen[i].fault;
        memcpy(sess[i].mem, seen[i].charged, sizeof(sess[i].mem));
        memcpy(sess[i].ctx, seen[i].ctx, sizeof(sess[i].ctx));
    }
    free(seen);
    return 0;
}

VCU_EXPORT const char *vcu_proxy_cuda_error(const vcu_proxy_t *px)
{
    return px->cuda_error[0] ? px->cuda_error : NULL;
}
