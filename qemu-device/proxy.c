/*
 * virtio-cuda session proxy (vcu_proxy.h): one worker process per guest
 * session, started by the host daemon and reached over two shared-memory
 * rings and a stream socket (vcu_ipc.h, "The hot path"); the daemon over
 * the link (vcu_link.h).
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
 * slow, stopped or dead worker never blocks the submitter.  With
 * cfg.daemon the proxy has one more thread, the link's reader; with the
 * transport's link, frames come on whatever thread the transport uses.
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
 * vcu__psess_t.mu; any of them -> vcu_proxy_t.lmu.  Neither mutex is held
 * across a done callback, a wait for a process or a blocking socket call;
 * rx_busy is held across done callbacks (so they must not submit).
 *   vcu_proxy_t.mu   the session table, the zombie list, counters, the
 *                    link's state (up, the slice, the account's mapping).
 *   vcu__psess_t.mu  the session's send queue, its pending requests, the
 *                    regions it was sent, wid, its close request, stop,
 *                    what the daemon said of its worker (spawn, pidfd).
 *   rx_busy          the reply ring's consumer side (resp), and
 *                    vcu_proxy_t.pbuf while the submitter polls.
 *   vcu_proxy_t.lmu  the native link's socket, for sending (cfg.daemon).
 *
 * Lifetimes
 * ---------
 * A session enters the table at SESSION_OPEN, when the proxy asks the
 * daemon for its worker (SPAWN with the worker's ends of the channel),
 * and leaves it at SESSION_CLOSE or reset.  The daemon answers SPAWNED
 * with the worker's pidfd, or with why it will not start one.  At
 * SESSION_CLOSE the proxy asks the daemon to kill the worker; the reader,
 * once the process is gone (its pidfd says so: its GPU work can no longer
 * touch guest memory), completes what was still pending with
 * VCU_S_ECANCELED and the close itself with VCU_S_OK, then parks the
 * session on px->zombies, freed by the next open, reset or free.  A reset
 * asks for every worker's end, joins the session threads (they end as
 * soon as their socket is shut down) and completes what was pending; it
 * does not wait for the processes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* memfd_create */
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "vcu_account.h"
#include "vcu_ipc.h"
#include "vcu_link.h"
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
/* How long vcu_proxy_new() waits for the daemon's WELCOME (its probe of
 * CUDA loads the driver). */
#define VCU__PX_WELCOME_MS 120000
/* A worker whose fate the daemon can no longer tell (the link went down
 * before it answered SPAWN) counts as gone this long after its socket
 * closed: it was killed with the daemon, or by it. */
#define VCU__PX_ORPHAN_NS (200ull * 1000 * 1000)

/* What the daemon said of a session's worker. */
enum {
    VCU__PX_SPAWN_PENDING = 0,      /* SPAWN sent, no answer yet */
    VCU__PX_SPAWN_OK = 1,           /* running (or was): pidfd tells when it is gone */
    VCU__PX_SPAWN_FAILED = 2,       /* never started */
};

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
    bool open;                      /* the session's SESSION_OPEN */
} vcu__preq_t;

typedef struct vcu__psess_s vcu__psess_t;

struct vcu_proxy_s {
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

    /* The link (vcu_link.h): the transport's, or the native one below. */
    vcu_proxy_link_t link;
    struct vcu_link_hello hello;    /* sent at each connection */
    bool link_up;                   /* welcomed (mu) */
    bool link_gen_down;             /* the link went down since the session's spawn (mu) */
    uint64_t link_gen;              /* counts welcomes (mu) */
    struct vcu_link_slice slice;    /* what the daemon gave (mu) */
    uint64_t vm_id;                 /* (mu) */
    char cuda_error[256];           /* the daemon's probe: "" when CUDA works (mu) */
    /* The VM's account and policy as the daemon shares them, read-only;
     * replaced at each welcome, the old ones kept until free (readers
     * hold no reference). */
    vcu_account_t *acct;
    const struct vcu_policy *policy;
    vcu_account_t *old_acct[8];
    const struct vcu_policy *old_policy[8];
    unsigned int nold;

    /* The native link (cfg.daemon). */
    int lfd;                        /* -1: the transport's link */
    pthread_mutex_t lmu;            /* sending on lfd */
    pthread_t lthread;
    bool lthread_on;
};

struct vcu__psess_s {
    vcu_proxy_t *px;
    uint64_t id;                    /* the guest's session id */
    unsigned int slot;
    int fd;
    void *shm;                      /* the shared area, shm_len bytes */
    size_t shm_len;
    int wake_req;                   /* request ring's doorbell: we ring it */
    int wake_resp;                  /* reply ring's doorbell: the reader sleeps on it */
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
    /* The worker, as the daemon told (mu). */
    int spawn;                      /* VCU__PX_SPAWN_* */
    uint32_t spawn_status;          /* why it failed: the open's status */
    uint64_t spawn_gen;             /* px->link_gen when SPAWN went out */
    int pidfd;                      /* readable once the worker is gone; -1: none */
    uint32_t pid;                   /* its host pid, for reports */
    int acct_slot;                  /* its slot in the VM's account; -1: none */
    bool kill_sent;
    bool stop;                      /* reset: threads end now */
    bool broken;                    /* a send failed or a ring broke: the link is gone */
    bool dead;                      /* the reader has ended: nothing more is answered */
    bool closing;                   /* on px->closing (px->mu) */

    vcu__psess_t *zombie_next;
    _Alignas(8) unsigned char fbuf[VCU__PX_FBUF];  /* s->mu: a frame being built */
};

/* ---- the link: sending --------------------------------------------------- */

/* Sends one frame to the daemon; fds are copied (the caller keeps its
 * own).  0, or -1 when the link is down. */
static int vcu__px_link_send(vcu_proxy_t *px, uint32_t type, uint64_t id, const void *body,
                             size_t len, const int *fds, unsigned int nfds)
{
    struct vcu_link_hdr h = { .type = type, .len = (uint32_t)len, .id = id };
    unsigned char buf[sizeof(h) + sizeof(struct vcu_link_hello)];
    union {
        struct cmsghdr c;
        char b[CMSG_SPACE(sizeof(int) * VCU_LINK_MAX_FDS)];
    } ctl;
    struct iovec iov;
    struct msghdr m;
    size_t off = 0;
    int rc = 0;

    if (len > sizeof(buf) - sizeof(h) || nfds > VCU_LINK_MAX_FDS)
        return -1;
    memcpy(buf, &h, sizeof(h));
    if (len > 0)
        memcpy(buf + sizeof(h), body, len);
    if (px->lfd < 0)
        return px->link.send(px->link.opaque, buf, sizeof(h) + len, fds, nfds);
    /* The native link: small frames, a daemon that reads them at once. */
    pthread_mutex_lock(&px->lmu);
    while (off < sizeof(h) + len) {
        ssize_t n;

        iov.iov_base = buf + off;
        iov.iov_len = sizeof(h) + len - off;
        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        if (off == 0 && nfds > 0) {
            memset(&ctl, 0, sizeof(ctl));
            m.msg_control = ctl.b;
            m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
            CMSG_FIRSTHDR(&m)->cmsg_level = SOL_SOCKET;
            CMSG_FIRSTHDR(&m)->cmsg_type = SCM_RIGHTS;
            CMSG_FIRSTHDR(&m)->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
            memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), fds, sizeof(int) * nfds);
        }
        n = sendmsg(px->lfd, &m, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = -1;
            break;
        }
        off += (size_t)n;
    }
    pthread_mutex_unlock(&px->lmu);
    return rc;
}

/* Asks the daemon to kill the session's worker (once).  s->mu held. */
static void vcu__px_kill_locked(vcu__psess_t *s)
{
    if (s->kill_sent || s->spawn == VCU__PX_SPAWN_FAILED)
        return;
    s->kill_sent = true;
    (void)vcu__px_link_send(s->px, VCU_LINK_KILL, s->id, NULL, 0, NULL, 0);
}

static void vcu__px_kill(vcu__psess_t *s)
{
    pthread_mutex_lock(&s->mu);
    vcu__px_kill_locked(s);
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
    uint32_t open_status;

    pthread_mutex_lock(&s->mu);
    /* A worker the daemon would not start: the open says why. */
    open_status = s->spawn == VCU__PX_SPAWN_FAILED ? s->spawn_status : status;
    list = s->pending;
    s->pending = NULL;
    s->pending_tail = NULL;
    close_req = s->close_req;
    s->close_req = NULL;
    pthread_mutex_unlock(&s->mu);
    while ((p = list) != NULL) {
        list = p->next;
        vcu__px_complete(p->req, p->req_id, p->open ? open_status : status);
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
            vcu__px_kill_locked(s);
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
            vcu__px_kill_locked(s);
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
        if (open)
            vcu__px_kill(s);
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
        } else {
            /* The guest gets no session to close: the worker goes now, and
             * the reader frees the session once it is gone. */
            vcu__px_kill(s);
        }
    }
    req->done(req);
}

/* Whether the daemon that was asked for s's worker can still answer for
 * it: the link is up and has not been welcomed anew since. */
static bool vcu__px_asked_daemon_there(vcu__psess_t *s)
{
    vcu_proxy_t *px = s->px;
    bool there;

    pthread_mutex_lock(&px->mu);
    there = px->link_up && px->link_gen == s->spawn_gen;
    pthread_mutex_unlock(&px->mu);
    return there;
}

/*
 * Waits for the killed worker to be gone, unless a reset comes first
 * (which does not wait): its pidfd readable; or the daemon said it never
 * started; or, when the daemon that was asked went away before it
 * answered, VCU__PX_ORPHAN_NS after its socket closed (the daemon killed
 * it when our link closed, or it died with the daemon).
 */
static void vcu__px_wait_exit(vcu__psess_t *s)
{
    uint64_t orphan_since = 0;

    for (;;) {
        struct timespec ts = { 0, 5 * 1000 * 1000 };
        int spawn, pidfd;
        bool stop;

        pthread_mutex_lock(&s->mu);
        spawn = s->spawn;
        pidfd = s->pidfd;
        stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop || spawn == VCU__PX_SPAWN_FAILED)
            return;
        if (spawn == VCU__PX_SPAWN_OK && pidfd >= 0) {
            struct pollfd p = { .fd = pidfd, .events = POLLIN };

            if (poll(&p, 1, 5) > 0)
                return;
            continue;
        }
        if (spawn == VCU__PX_SPAWN_OK)
            return;                 /* no pidfd came: nothing to wait on */
        if (!vcu__px_asked_daemon_there(s)) {
            uint64_t now = vcu__ring_now_ns();

            if (orphan_since == 0)
                orphan_since = now;
            else if (now - orphan_since > VCU__PX_ORPHAN_NS)
                return;
        }
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
    bool closing, orphan, stop;

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
    /* The open was never answered OK: the guest has no id to close it by. */
    orphan = s->wid == 0;
    pthread_mutex_unlock(&s->mu);
    if (!stop && closing) {
        vcu__psess_t **pp;

        for (pp = &px->closing; *pp != s; pp = &(*pp)->zombie_next)
            ;
        *pp = s->zombie_next;
        s->closing = false;
        s->zombie_next = px->zombies;
        px->zombies = s;
    } else if (!stop && orphan && px->sessions[s->slot] == s) {
        px->sessions[s->slot] = NULL;
        px->nlive--;
        s->zombie_next = px->zombies;
        px->zombies = s;
    }
    pthread_mutex_unlock(&px->mu);
    if (stop)
        return NULL;
    /* A session whose worker died stays in the table, dead, until the
     * guest closes it; one whose open failed is freed by the next open or
     * reset (its open is completed here with the reason). */
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

/* ---- sessions ---------------------------------------------------------- */

/* Ends a session's threads and asks for its worker's end without waiting
 * for it; completes what is pending.  s is out of the table. */
static void vcu__px_sess_end(vcu__psess_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cond);
    vcu__px_kill_locked(s);
    pthread_mutex_unlock(&s->mu);
    shutdown(s->fd, SHUT_RDWR);
    pthread_join(s->reader, NULL);
    pthread_join(s->sender, NULL);
    vcu__px_cancel_all(s, VCU_S_ECANCELED);
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
    if (s->pidfd >= 0)
        close(s->pidfd);
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

/*
 * The session's channel: the socket pair, the shared area with its two
 * rings (ours mapped and bound), the doorbells.  The worker's ends go into
 * theirs[] (socket, area, request doorbell, reply doorbell) for the
 * daemon.  0, or -1 (what was made is undone by the caller: every fd in
 * theirs[] and s that is not -1).
 */
static int vcu__px_channel(vcu_proxy_t *px, vcu__psess_t *s, int theirs[VCU_LINK_SPAWN_FDS])
{
    struct vcu_ipc_shm *shm;
    unsigned char *base;
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    s->fd = sv[0];
    theirs[0] = sv[1];
    s->shm_len = VCU_IPC_SHM_HDR + (size_t)px->ring_bytes + VCU_IPC_RESP_RING;
    theirs[1] = memfd_create("vcu-ring", MFD_CLOEXEC);
    if (theirs[1] < 0 || ftruncate(theirs[1], (off_t)s->shm_len) != 0)
        return -1;
    s->shm = mmap(NULL, s->shm_len, PROT_READ | PROT_WRITE, MAP_SHARED, theirs[1], 0);
    if (s->shm == MAP_FAILED) {
        s->shm = NULL;
        return -1;
    }
    /* Doorbells are sockets, not eventfds: a socket wakes its reader as a
     * synchronous hand-over (the waker is about to wait), which the
     * scheduler serves on the waker's CPU rather than an idle one. */
    if (vcu__px_doorbell(&s->wake_req, &theirs[2]) != 0 ||
        vcu__px_doorbell(&s->wake_resp, &theirs[3]) != 0)
        return -1;
    shm = s->shm;
    base = s->shm;
    shm->magic = VCU_IPC_SHM_MAGIC;
    shm->req_size = px->ring_bytes;
    shm->resp_size = VCU_IPC_RESP_RING;
    vcu__ring_init(&s->req, &shm->req, base + VCU_IPC_SHM_HDR, px->ring_bytes, s->wake_req);
    vcu__ring_init(&s->resp, &shm->resp, base + VCU_IPC_SHM_HDR + px->ring_bytes,
                   VCU_IPC_RESP_RING, s->wake_resp);
    return 0;
}

static void vcu__px_open(vcu_proxy_t *px, vcu_request_t *req, const struct vcu_req_hdr *h)
{
    vcu__psess_t *s;
    int theirs[VCU_LINK_SPAWN_FDS] = { -1, -1, -1, -1 };
    unsigned int slot, i;
    uint32_t status = VCU_S_ENOMEM;
    bool sent;

    vcu__px_reap_zombies(px);
    /* Aligned: poll_until has a cache line of its own. */
    s = aligned_alloc(64, (sizeof(*s) + 63) & ~(size_t)63);
    if (s == NULL)
        goto fail;
    memset(s, 0, sizeof(*s));
    s->px = px;
    s->fd = -1;
    s->wake_req = -1;
    s->wake_resp = -1;
    s->pidfd = -1;
    s->acct_slot = -1;
    if (pthread_mutex_init(&s->mu, NULL) != 0)
        goto fail_s;
    if (pthread_cond_init(&s->cond, NULL) != 0)
        goto fail_mu;

    pthread_mutex_lock(&px->mu);
    if (!px->link_up) {
        /* No daemon to start a worker: the guest's CUDA says no device. */
        pthread_mutex_unlock(&px->mu);
        status = VCU_S_ENODEV;
        goto fail_cond;
    }
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
    s->spawn_gen = px->link_gen;
    px->sessions[slot] = s;         /* reserved; undone below on failure */
    px->nlive++;
    pthread_mutex_unlock(&px->mu);

    status = VCU_S_EIO;
    if (vcu__px_channel(px, s, theirs) != 0)
        goto fail_slot;
    if (pthread_create(&s->sender, NULL, vcu__px_sender, s) != 0)
        goto fail_slot;
    if (pthread_create(&s->reader, NULL, vcu__px_reader, s) != 0) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->sender, NULL);
        goto fail_slot;
    }
    /* The open waits in the ring for the worker; then the daemon is asked
     * for it.  Until the worker's end of the socket is closed below, the
     * reader cannot see the link end. */
    vcu__px_forward(s, req, h, true);
    sent = vcu__px_link_send(px, VCU_LINK_SPAWN, s->id, NULL, 0, theirs, VCU_LINK_SPAWN_FDS) == 0;
    if (!sent) {
        /* The link went down just now: no worker will come. */
        pthread_mutex_lock(&s->mu);
        s->spawn = VCU__PX_SPAWN_FAILED;
        s->spawn_status = VCU_S_ENODEV;
        pthread_mutex_unlock(&s->mu);
    }
    for (i = 0; i < VCU_LINK_SPAWN_FDS; i++)
        close(theirs[i]);
    return;

fail_slot:
    pthread_mutex_lock(&px->mu);
    px->sessions[s->slot] = NULL;
    px->nlive--;
    pthread_mutex_unlock(&px->mu);
    for (i = 0; i < VCU_LINK_SPAWN_FDS; i++)
        if (theirs[i] >= 0)
            close(theirs[i]);
    if (s->fd >= 0)
        close(s->fd);
    if (s->shm != NULL)
        munmap(s->shm, s->shm_len);
    if (s->wake_req >= 0)
        close(s->wake_req);
    if (s->wake_resp >= 0)
        close(s->wake_resp);
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

/* ---- the link: what the daemon says -------------------------------------- */

static void vcu__px_close_fds(int *fds, unsigned int nfds)
{
    unsigned int i;

    for (i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Maps the VM's account and policy (read-only fds from the daemon). */
static int vcu__px_map_slice(vcu_proxy_t *px, int *acct_fdp, int pol_fd, char *err,
                             size_t errlen)
{
    const struct vcu_policy *pol;
    int acct_fd = *acct_fdp, rc;
    vcu_account_t *a;
    struct stat st;

    if (fstat(pol_fd, &st) != 0 || st.st_size < (off_t)sizeof(*pol)) {
        snprintf(err, errlen, "the daemon's policy page is not one");
        return VCU_EIO;
    }
    /* Both are mapped for as long as the VM runs: they must not shrink
     * under the mapping (a load past the end would kill QEMU). */
    if (!vcu__acct_sealed(pol_fd) || !vcu__acct_sealed(acct_fd)) {
        snprintf(err, errlen, "the daemon's policy page or memory account is not sealed "
                              "against shrinking (F_SEAL_SHRINK)");
        return VCU_EIO;
    }
    pol = mmap(NULL, sizeof(*pol), PROT_READ, MAP_SHARED, pol_fd, 0);
    if (pol == MAP_FAILED || pol->magic != VCU_POLICY_MAGIC) {
        if (pol != MAP_FAILED)
            munmap((void *)pol, sizeof(*pol));
        snprintf(err, errlen, "the daemon's policy page cannot be mapped, or is not one");
        return VCU_EIO;
    }
    rc = vcu__acct_map_ro(acct_fd, &a);
    *acct_fdp = -1;                 /* closed by the map */
    if (rc != 0) {
        munmap((void *)pol, sizeof(*pol));
        snprintf(err, errlen, "the daemon's memory account cannot be mapped");
        return VCU_EIO;
    }
    vcu__acct_set_policy(a, pol);
    pthread_mutex_lock(&px->mu);
    if (px->acct != NULL && px->nold < sizeof(px->old_acct) / sizeof(px->old_acct[0])) {
        /* A reader may still look at the old ones: kept until free. */
        px->old_acct[px->nold] = px->acct;
        px->old_policy[px->nold++] = px->policy;
    } else if (px->acct != NULL) {
        vcu__acct_put(px->acct);
        munmap((void *)px->policy, sizeof(*px->policy));
    }
    px->acct = a;
    px->policy = pol;
    pthread_mutex_unlock(&px->mu);
    return 0;
}

static int vcu__px_welcome(vcu_proxy_t *px, const struct vcu_link_welcome *w, int *fds,
                           unsigned int nfds, char *err, size_t errlen)
{
    int rc;

    if (w->status != VCU_S_OK) {
        char why[sizeof(w->error) + 1];

        memcpy(why, w->error, sizeof(w->error));
        why[sizeof(w->error)] = '\0';
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "the host daemon refuses this VM: %s",
                 why[0] ? why : vcu_status_str((int)w->status));
        return w->status < VCU_S_COUNT_ && w->status != 0 ? -(int)w->status : VCU_EIO;
    }
    if (nfds != VCU_LINK_WELCOME_FDS || w->version != VCU_LINK_VERSION) {
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "the host daemon's welcome is malformed");
        return VCU_EIO;
    }
    rc = vcu__px_map_slice(px, &fds[0], fds[1], err, errlen);
    vcu__px_close_fds(fds, nfds);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&px->mu);
    px->slice = w->slice;
    px->vm_id = w->vm_id;
    memcpy(px->cuda_error, w->cuda_error,
           sizeof(px->cuda_error) < sizeof(w->cuda_error) ? sizeof(px->cuda_error)
                                                         : sizeof(w->cuda_error));
    px->cuda_error[sizeof(px->cuda_error) - 1] = '\0';
    px->link_gen++;
    px->link_up = true;
    pthread_mutex_unlock(&px->mu);
    return 0;
}

/* SPAWNED: the daemon's word on a session's worker. */
static int vcu__px_spawned(vcu_proxy_t *px, uint64_t id, const struct vcu_link_spawned *r,
                           int *fds, unsigned int nfds)
{
    vcu__psess_t *s = NULL, *c;
    uint64_t slot = id & 0xffffffffu;

    if ((r->status == VCU_S_OK) != (nfds == VCU_LINK_SPAWNED_FDS) ||
        (r->status != VCU_S_OK && nfds != 0)) {
        vcu__px_close_fds(fds, nfds);
        return VCU_EIO;
    }
    pthread_mutex_lock(&px->mu);
    if (slot >= 1 && slot <= px->max_sessions && px->sessions[slot - 1] != NULL &&
        px->sessions[slot - 1]->id == id)
        s = px->sessions[slot - 1];
    for (c = px->closing; s == NULL && c != NULL; c = c->zombie_next)
        if (c->id == id)
            s = c;
    for (c = px->zombies; s == NULL && c != NULL; c = c->zombie_next)
        if (c->id == id)
            s = c;
    if (s != NULL) {
        pthread_mutex_lock(&s->mu);
        if (s->spawn == VCU__PX_SPAWN_PENDING) {
            if (r->status == VCU_S_OK) {
                s->spawn = VCU__PX_SPAWN_OK;
                s->pidfd = fds[0];
                s->pid = r->pid;
                s->acct_slot = r->acct_slot;
                fds[0] = -1;
            } else {
                s->spawn = VCU__PX_SPAWN_FAILED;
                s->spawn_status = r->status < VCU_S_COUNT_ && r->status != 0 ? r->status
                                                                            : VCU_S_EIO;
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&px->mu);
    /* A session reset meanwhile: its worker was asked to end already. */
    vcu__px_close_fds(fds, nfds);
    return 0;
}

VCU_EXPORT int vcu_proxy_link_input(vcu_proxy_t *px, const void *frame, size_t len, int *fds,
                                    unsigned int nfds, char *err, size_t errlen)
{
    struct vcu_link_hdr h;
    const unsigned char *body = (const unsigned char *)frame + sizeof(h);

    if (len < sizeof(h)) {
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "a short frame from the host daemon");
        return VCU_EIO;
    }
    memcpy(&h, frame, sizeof(h));
    if (h.len != len - sizeof(h)) {
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "a frame from the host daemon of the wrong length");
        return VCU_EIO;
    }
    switch (h.type) {
    case VCU_LINK_WELCOME: {
        struct vcu_link_welcome w;

        if (h.len != sizeof(w))
            break;
        memcpy(&w, body, sizeof(w));
        return vcu__px_welcome(px, &w, fds, nfds, err, errlen);
    }
    case VCU_LINK_SPAWNED: {
        struct vcu_link_spawned r;

        if (h.len != sizeof(r))
            break;
        memcpy(&r, body, sizeof(r));
        if (vcu__px_spawned(px, h.id, &r, fds, nfds) != 0) {
            snprintf(err, errlen, "a SPAWNED from the host daemon with the wrong descriptors");
            return VCU_EIO;
        }
        return 0;
    }
    case VCU_LINK_SLICE:
        if (h.len != sizeof(struct vcu_link_slice) || nfds != 0)
            break;
        pthread_mutex_lock(&px->mu);
        memcpy(&px->slice, body, sizeof(px->slice));
        pthread_mutex_unlock(&px->mu);
        return 0;
    default:
        break;
    }
    vcu__px_close_fds(fds, nfds);
    snprintf(err, errlen, "a frame from the host daemon of the wrong type or size (type %u)",
             h.type);
    return VCU_EIO;
}

VCU_EXPORT void vcu_proxy_link_down(vcu_proxy_t *px)
{
    pthread_mutex_lock(&px->mu);
    px->link_up = false;
    pthread_mutex_unlock(&px->mu);
}

VCU_EXPORT void vcu_proxy_link_up(vcu_proxy_t *px)
{
    (void)vcu__px_link_send(px, VCU_LINK_HELLO, 0, &px->hello, sizeof(px->hello), NULL, 0);
}

VCU_EXPORT int vcu_proxy_link_ready(vcu_proxy_t *px)
{
    int up;

    pthread_mutex_lock(&px->mu);
    up = px->link_up;
    pthread_mutex_unlock(&px->mu);
    return up;
}

/* ---- the native link (cfg.daemon) ----------------------------------------- */

/* Reads one whole frame (and the descriptors that came with its bytes)
 * from the native link.  0, or -1 when the link ended or broke. */
static int vcu__px_link_read(vcu_proxy_t *px, unsigned char *buf, size_t cap, size_t *len,
                             int *fds, unsigned int *nfds)
{
    size_t have = 0, want = sizeof(struct vcu_link_hdr);

    *nfds = 0;
    while (have < want) {
        union {
            struct cmsghdr c;
            char b[CMSG_SPACE(sizeof(int) * VCU_LINK_MAX_FDS)];
        } ctl;
        struct iovec iov = { buf + have, want - have };
        struct msghdr m;
        struct cmsghdr *c;
        ssize_t n;

        memset(&m, 0, sizeof(m));
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.b;
        m.msg_controllen = sizeof(ctl.b);
        n = recvmsg(px->lfd, &m, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        for (c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
            size_t k, nf;

            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (k = 0; k < nf; k++) {
                int fd;

                memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
                if (*nfds < VCU_LINK_MAX_FDS)
                    fds[(*nfds)++] = fd;
                else
                    close(fd);
            }
        }
        if (n <= 0)
            goto broken;
        have += (size_t)n;
        if (have == sizeof(struct vcu_link_hdr) && want == have) {
            struct vcu_link_hdr h;

            memcpy(&h, buf, sizeof(h));
            if (h.len > cap - sizeof(h) || h.len > VCU_LINK_MAX_BODY)
                goto broken;
            want += h.len;
        }
    }
    *len = have;
    return 0;
broken:
    vcu__px_close_fds(fds, *nfds);
    *nfds = 0;
    return -1;
}

static void *vcu__px_link_thread(void *arg)
{
    vcu_proxy_t *px = arg;
    unsigned char buf[sizeof(struct vcu_link_hdr) + VCU_LINK_MAX_BODY];

    for (;;) {
        int fds[VCU_LINK_MAX_FDS];
        unsigned int nfds;
        size_t len;
        char err[256];

        if (vcu__px_link_read(px, buf, sizeof(buf), &len, fds, &nfds) != 0)
            break;
        if (vcu_proxy_link_input(px, buf, len, fds, nfds, err, sizeof(err)) != 0) {
            fprintf(stderr, "vcu-proxy: %s\n", err);
            break;
        }
    }
    vcu_proxy_link_down(px);
    return NULL;
}

/* Connects to the daemon, says HELLO and takes its WELCOME (timeout_ms at
 * most), then serves the link on a thread. */
static int vcu__px_connect(vcu_proxy_t *px, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    unsigned char buf[sizeof(struct vcu_link_hdr) + VCU_LINK_MAX_BODY];
    struct pollfd p;
    int fds[VCU_LINK_MAX_FDS];
    unsigned int nfds;
    size_t len;
    int rc;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "daemon socket path too long: %s", path);
        return VCU_EINVAL;
    }
    strcpy(sa.sun_path, path);
    px->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (px->lfd < 0 || connect(px->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(err, errlen, "cannot reach the host daemon at %s: %s (is vcu-daemon running?)",
                 path, strerror(errno));
        return VCU_ENODEV;
    }
    if (vcu__px_link_send(px, VCU_LINK_HELLO, 0, &px->hello, sizeof(px->hello), NULL, 0) != 0) {
        snprintf(err, errlen, "the host daemon at %s closed the link", path);
        return VCU_ENODEV;
    }
    p.fd = px->lfd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, VCU__PX_WELCOME_MS) <= 0) {
        snprintf(err, errlen, "the host daemon at %s did not answer", path);
        return VCU_ENODEV;
    }
    if (vcu__px_link_read(px, buf, sizeof(buf), &len, fds, &nfds) != 0) {
        snprintf(err, errlen, "the host daemon at %s closed the link", path);
        return VCU_ENODEV;
    }
    rc = vcu_proxy_link_input(px, buf, len, fds, nfds, err, errlen);
    if (rc != 0)
        return rc;
    if (!vcu_proxy_link_ready(px)) {
        snprintf(err, errlen, "the host daemon at %s did not welcome this VM", path);
        return VCU_EIO;
    }
    if (pthread_create(&px->lthread, NULL, vcu__px_link_thread, px) != 0) {
        snprintf(err, errlen, "out of threads");
        return VCU_ENOMEM;
    }
    px->lthread_on = true;
    return 0;
}

/* ---- the proxy --------------------------------------------------------- */

static bool vcu__px_name_ok(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '.' || *s == '_'))
            return false;
    return true;
}

static bool vcu__px_gpus_ok(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == ':' || *s == ','))
            return false;
    return true;
}

/* The config's checks, and the HELLO it makes. */
static int vcu__px_hello(vcu_proxy_t *px, const vcu_proxy_config_t *cfg, char *err, size_t errlen)
{
    struct vcu_link_hello *h = &px->hello;
    const char *name = cfg->name != NULL ? cfg->name : "";
    const char *gpus = cfg->gpus != NULL ? cfg->gpus : "0";

    if (cfg->compute_share > 10000) {
        snprintf(err, errlen, "compute-share must be 1..10000");
        return VCU_EINVAL;
    }
    if (cfg->compute_cap > 100) {
        snprintf(err, errlen, "compute-cap must be a percentage, 1..100");
        return VCU_EINVAL;
    }
    if (cfg->sms > VCU_PROXY_MAX_SMS) {
        snprintf(err, errlen, "sms must be 1..%u (0: isolated mode), not %u", VCU_PROXY_MAX_SMS,
                 cfg->sms);
        return VCU_EINVAL;
    }
    /* A packed VM's share of the GPU is its SMs, side by side with the
     * others: there is no turn to take. */
    if (cfg->sms != 0 && (cfg->compute_share != 0 || cfg->compute_cap != 0)) {
        snprintf(err, errlen, "sms (packed mode) does not go with compute-share or compute-cap "
                              "(isolated mode): a packed VM's share is its SMs");
        return VCU_EINVAL;
    }
    if (strlen(name) >= sizeof(h->name) || !vcu__px_name_ok(name)) {
        snprintf(err, errlen, "the VM's name must be at most %zu of [A-Za-z0-9._-]",
                 sizeof(h->name) - 1);
        return VCU_EINVAL;
    }
    if (strlen(gpus) >= sizeof(h->gpus) || !vcu__px_gpus_ok(gpus)) {
        snprintf(err, errlen, "gpus must be host indices or GPU- UUIDs separated by ':'");
        return VCU_EINVAL;
    }
    if (cfg->max_sessions > VCU__PX_MAX_SESSIONS) {
        snprintf(err, errlen, "at most %u sessions", VCU__PX_MAX_SESSIONS);
        return VCU_EINVAL;
    }
    if (cfg->module_cache < VCU_PROXY_MODCACHE_SHARED ||
        cfg->module_cache > VCU_PROXY_MODCACHE_PRIVATE) {
        snprintf(err, errlen, "module-cache must be shared, private or off");
        return VCU_EINVAL;
    }
    memset(h, 0, sizeof(*h));
    h->version = VCU_LINK_VERSION;
    h->flags = (cfg->capture_printf ? VCU_LINK_F_CAPTURE_PRINTF : 0) |
               (cfg->module_cache == VCU_PROXY_MODCACHE_OFF ? VCU_LINK_F_NO_MODCACHE : 0) |
               (cfg->module_cache == VCU_PROXY_MODCACHE_PRIVATE ? VCU_LINK_F_PRIVATE_MODCACHE : 0);
    h->mem_quota = cfg->mem_quota;
    h->max_sessions = px->max_sessions;
    h->compute_share = cfg->compute_share;
    h->compute_cap = cfg->compute_cap;
    h->sms = cfg->sms;
    h->ring_bytes = px->ring_bytes;
    h->spin_us = px->spin_us;
    h->qemu_pid = (uint32_t)getpid();
    snprintf(h->name, sizeof(h->name), "%s", name);
    snprintf(h->gpus, sizeof(h->gpus), "%s", gpus);
    return 0;
}

VCU_EXPORT int vcu_proxy_new(const vcu_proxy_config_t *cfg, vcu_proxy_t **out, char *err,
                             size_t errlen)
{
    vcu_proxy_t *px;
    int rc;

    *out = NULL;
    if (cfg == NULL || (cfg->daemon == NULL) == (cfg->link == NULL) ||
        (cfg->link != NULL && cfg->link->send == NULL)) {
        snprintf(err, errlen, "the proxy needs the host daemon's socket or a link to it");
        return VCU_EINVAL;
    }
    if (cfg->ring_bytes != 0 &&
        (cfg->ring_bytes < VCU_IPC_REQ_RING_MIN || cfg->ring_bytes > VCU_IPC_REQ_RING_MAX ||
         (cfg->ring_bytes & (cfg->ring_bytes - 1)) != 0)) {
        snprintf(err, errlen, "the request ring must be a power of two of %u..%u bytes",
                 VCU_IPC_REQ_RING_MIN, VCU_IPC_REQ_RING_MAX);
        return VCU_EINVAL;
    }
    px = calloc(1, sizeof(*px));
    if (px == NULL)
        goto enomem;
    px->lfd = -1;
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
        if (px->spin_us > 1000)
            px->spin_us = 1000;
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
    px->sessions = calloc(px->max_sessions, sizeof(*px->sessions));
    if (px->sessions == NULL || px->pbuf == NULL || pthread_mutex_init(&px->mu, NULL) != 0 ||
        pthread_mutex_init(&px->lmu, NULL) != 0) {
        free(px->pbuf);
        free(px->sessions);
        free(px);
        goto enomem;
    }
    rc = vcu__px_hello(px, cfg, err, errlen);
    if (rc != 0) {
        vcu_proxy_free(px);
        return rc;
    }
    if (cfg->link != NULL) {
        px->link = *cfg->link;
        vcu_proxy_link_up(px);
    } else {
        rc = vcu__px_connect(px, cfg->daemon, err, errlen);
        if (rc != 0) {
            vcu_proxy_free(px);
            return rc;
        }
    }
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
    unsigned int i;

    if (px == NULL)
        return;
    vcu_proxy_reset(px);
    if (px->lfd >= 0) {
        /* The daemon ends our workers when the link closes. */
        shutdown(px->lfd, SHUT_RDWR);
        if (px->lthread_on)
            pthread_join(px->lthread, NULL);
        close(px->lfd);
    }
    pthread_mutex_destroy(&px->lmu);
    pthread_mutex_destroy(&px->mu);
    for (i = 0; i < px->nold; i++) {
        vcu__acct_put(px->old_acct[i]);
        munmap((void *)px->old_policy[i], sizeof(struct vcu_policy));
    }
    if (px->acct != NULL) {
        vcu__acct_put(px->acct);
        munmap((void *)px->policy, sizeof(struct vcu_policy));
    }
    free(px->sessions);
    free(px->pbuf);
    free(px);
}

/* Whether the daemon started s's worker and it has not ended yet (its
 * pidfd says).  px->mu held (which guards what SPAWNED set). */
static bool vcu__px_worker_lives(const vcu__psess_t *s)
{
    struct pollfd p = { .fd = s->pidfd, .events = POLLIN };

    if (s->spawn != VCU__PX_SPAWN_OK || s->pidfd < 0 || s->acct_slot < 0)
        return false;
    return poll(&p, 1, 0) == 0;
}

/* One session's figures from its account slot (one load each). */
static void vcu__px_sess_stats(const vcu_account_t *a, const vcu__psess_t *s,
                               vcu_proxy_session_stats_t *o)
{
    unsigned int d;

    memset(o, 0, sizeof(*o));
    o->session = s->id;
    o->pid = s->pid;
    if (a == NULL || s->acct_slot < 0 || (uint32_t)s->acct_slot >= a->nslots)
        return;
    o->fault = (atomic_load(&a->slot[s->acct_slot].flags) & VCU_ACCT_F_FAULT) != 0;
    for (d = 0; d < VCU_CU_MAX_DEVICES && d < VCU_ACCT_DEVS; d++) {
        o->mem[d] = atomic_load(&a->slot[s->acct_slot].charged[d]);
        o->ctx[d] = atomic_load(&a->slot[s->acct_slot].ctx[d]);
    }
    o->host = atomic_load(&a->slot[s->acct_slot].host);
}

VCU_EXPORT int vcu_proxy_stats(vcu_proxy_t *px, vcu_proxy_stats_t *out,
                               vcu_proxy_session_stats_t *sess, uint32_t cap)
{
    const vcu__psess_t *s;
    vcu_account_t *a;
    uint32_t d, i, n = 0;

    if (px == NULL || out == NULL || (sess == NULL && cap != 0))
        return VCU_EINVAL;
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&px->mu);
    a = px->acct;
    out->link_up = px->link_up;
    out->vm_id = px->vm_id;
    out->compute_share = px->slice.compute_share;
    out->compute_cap = px->slice.compute_cap;
    out->sms = px->slice.sms;
    out->max_sessions = px->slice.max_sessions;
    out->sessions = px->nlive;
    if (a != NULL) {
        out->mem_quota = vcu__acct_quota(a);
        for (d = 0; d < VCU_CU_MAX_DEVICES && d < VCU_ACCT_DEVS; d++) {
            out->mem_used[d] = vcu__acct_used(a, d);
            out->ctx_bytes[d] = vcu__acct_ctx(a, d);
        }
        out->host_quota = vcu__acct_host_quota(a);
        out->host_used = vcu__acct_host_used(a);
        out->faults = atomic_load(&a->hdr->faults);
    }
    /* Every session whose worker lives: the open ones, then those
     * closing.  A worker that is gone has its charges given back by the
     * daemon once it has reaped it. */
    for (i = 0; i < px->max_sessions; i++) {
        s = px->sessions[i];
        if (s == NULL || !vcu__px_worker_lives(s))
            continue;
        if (n < cap)
            vcu__px_sess_stats(a, s, &sess[n]);
        n++;
    }
    for (s = px->closing; s != NULL; s = s->zombie_next) {
        if (!vcu__px_worker_lives(s))
            continue;
        if (n < cap)
            vcu__px_sess_stats(a, s, &sess[n]);
        n++;
    }
    pthread_mutex_unlock(&px->mu);
    out->workers = n;
    out->nsess = n < cap ? n : cap;
    return 0;
}

VCU_EXPORT const char *vcu_proxy_cuda_error(const vcu_proxy_t *px)
{
    return px->cuda_error[0] ? px->cuda_error : NULL;
}
