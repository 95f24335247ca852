/*
 * virtio-cuda session proxy (vcu_proxy.h): one worker process per guest
 * session, started by the host daemon and reached over two shared-memory
 * rings and a stream socket (vcu_ipc.h, "The hot path"); the daemon over
 * the link (vcu_link.h).
 *
 * This file is the request path: submit, the worker's two rings and its
 * socket, the replies.  proxy_session.c opens, resets and reports
 * sessions; proxy_link.c holds the daemon's link and makes and frees the
 * proxy.
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
 * Lock order: proxy_int.h, beside the structures the locks guard.
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
#include "proxy_int.h"

/* ---- the worker's end --------------------------------------------------- */

/* Asks the daemon to kill the session's worker (once).  s->mu held. */
void vcu__px_kill_locked(vcu__psess_t *s)
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
void vcu__px_complete(vcu_request_t *req, uint64_t req_id, uint32_t status)
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
void vcu__px_cancel_all(vcu__psess_t *s, uint32_t status)
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
    ssize_t n = vcu__fd_send(fd, f->buf + f->off, f->len - f->off, &f->fd,
                             f->off == 0 && f->fd >= 0 ? 1 : 0, MSG_DONTWAIT);

    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    return n;
}

void vcu__px_frame_free(vcu__pframe_t *f)
{
    if (f->own_fd && f->fd >= 0)
        close(f->fd);
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

/* A session's sender: writes the frames the submitter queued behind a
 * full request ring or a full socket, in order. */
void *vcu__px_sender(void *arg)
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

/* The session's socket as the reader reads it: the worker's hello frames,
 * then its end. */
typedef struct {
    unsigned char *buf;
    size_t cap;
    size_t have;
} vcu__psock_t;

/*
 * Takes the reply ring's consumer side for the reader, unless a submitter
 * polls for its reply and takes what comes meanwhile: then false, once
 * its time is up (or after a pause), and the reader tries again.  Until
 * then the reader stays off the lines of the submitter's path (the reply
 * ring's tail it polls, rx_busy and the position it writes).  A third
 * core reading them costs the path a line transfer each time
 * (bench/ring_rtt on the H200: the ring's round trip 729 ns alone,
 * 969-1017 ns beside a thread spinning on the tail or the position, 721 ns
 * beside one watching the clock).  Only the clock is watched meanwhile; a
 * new poll moves until on.
 */
static bool vcu__px_reader_take(vcu__psess_t *s)
{
    uint64_t until = __atomic_load_n(&s->poll_until, __ATOMIC_ACQUIRE);

    if (until != 0 && vcu__ring_now_ns() < until) {
        do
            vcu__cpu_relax();
        while (vcu__ring_now_ns() < until);
        return false;
    }
    if (!vcu__px_rx_take(s)) {
        /* The submitter's poll ends shortly. */
        vcu__cpu_relax();
        return false;
    }
    return true;
}

/* Completes the replies on the reply ring (rx_busy held), their bodies
 * copied out into rbuf first.  Returns vcu__ring_get()'s last result: 0
 * when the ring is empty, else it broke or holds a frame that is no reply. */
static inline int vcu__px_drain(vcu__psess_t *s, unsigned char *rbuf)
{
    struct vcu_ipc_hdr h;
    int rc;

    while ((rc = vcu__ring_get(&s->resp, &h, rbuf, VCU_IPC_MAX_RESP_BODY,
                               VCU_IPC_MAX_RESP_BODY)) > 0 &&
           h.type == VCU_IPC_RESP)
        vcu__px_reply(s, h.tag, rbuf, h.len);
    return rc;
}

/* Reads what the worker wrote to its socket: 1 when the reader goes on
 * (hello frames, or nothing yet), 0 at the worker's end, -1 when it broke
 * the link's rules (or out of memory). */
static int vcu__px_sock_read(vcu__psess_t *s, vcu__psock_t *k)
{
    struct vcu_ipc_hdr h;
    ssize_t n;

    if (k->cap - k->have < 65536) {
        size_t ncap = k->cap ? k->cap * 2 : 131072;
        unsigned char *nb = realloc(k->buf, ncap);

        if (nb == NULL)
            return -1;
        k->buf = nb;
        k->cap = ncap;
    }
    n = recv(s->fd, k->buf + k->have, k->cap - k->have, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return 1;
    if (n <= 0)
        return 0;
    k->have += (size_t)n;
    while (k->have >= sizeof(h)) {
        memcpy(&h, k->buf, sizeof(h));
        if (h.type != VCU_IPC_HELLO || h.len > sizeof(struct vcu_ipc_hello))
            return -1;
        if (k->have < sizeof(h) + h.len)
            break;
        memmove(k->buf, k->buf + sizeof(h) + h.len, k->have - sizeof(h) - h.len);
        k->have -= sizeof(h) + h.len;
    }
    return 1;
}

/* The reader's loop: replies until the worker's end (0, the replies it
 * published before it went still taken) or until it breaks the link's
 * rules (-1). */
static int vcu__px_reader_loop(vcu__psess_t *s, unsigned char *rbuf, vcu__psock_t *k)
{
    uint64_t spin_ns = (uint64_t)s->px->spin_us * 1000u;

    for (;;) {
        uint64_t seen;
        int rc;

        if (!vcu__px_reader_take(s))
            continue;
        rc = vcu__px_drain(s, rbuf);
        seen = s->resp.pos;
        vcu__px_rx_give(s);
        if (rc != 0)
            return -1;              /* a broken ring, or a frame that is no reply */
        /* Waiting, the reader watches the producer's tail alone (the
         * worker's line, not the submitter's). */
        if (vcu__ring_wait_from(&s->resp, seen, s->fd, spin_ns, -1) == 0)
            continue;
        /* The socket: the worker's hello, or its end. */
        rc = vcu__px_sock_read(s, k);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            /* Replies it published before it went still count. */
            while (!vcu__px_rx_take(s))
                vcu__cpu_relax();
            (void)vcu__px_drain(s, rbuf);
            vcu__px_rx_give(s);
            return 0;
        }
    }
}

/* Where the ended session goes (px->mu held, no reset under way): a
 * closing one to the zombies; one whose open was never answered OK (the
 * guest has no id to close it by) out of the table, to the zombies. */
static void vcu__px_reader_park_locked(vcu_proxy_t *px, vcu__psess_t *s, bool closing,
                                       bool orphan)
{
    vcu__psess_t **pp;

    if (closing) {
        for (pp = &px->closing; *pp != s; pp = &(*pp)->zombie_next)
            ;
        *pp = s->zombie_next;
        s->closing = false;
        s->zombie_next = px->zombies;
        px->zombies = s;
    } else if (orphan && px->sessions[s->slot] == s) {
        px->sessions[s->slot] = NULL;
        px->nlive--;
        s->zombie_next = px->zombies;
        px->zombies = s;
    }
}

/* After the reader's loop: unless a reset is under way (which completes
 * what is pending), waits for the worker to be gone, parks the session
 * and completes what is pending. */
static void vcu__px_reader_end(vcu__psess_t *s)
{
    vcu_proxy_t *px = s->px;
    bool closing, orphan, stop;

    pthread_mutex_lock(&s->mu);
    stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (stop)
        return;                     /* the reset completes what is pending */
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
    if (!stop)
        vcu__px_reader_park_locked(px, s, closing, orphan);
    pthread_mutex_unlock(&px->mu);
    if (stop)
        return;
    /* A session whose worker died stays in the table, dead, until the
     * guest closes it; one whose open failed is freed by the next open or
     * reset (its open is completed here with the reason). */
    vcu__px_cancel_all(s, closing ? VCU_S_ECANCELED : VCU_S_EIO);
}

/* A session's reader: takes the worker's replies off the reply ring and
 * completes them, reads its socket, and sees the worker's end. */
void *vcu__px_reader(void *arg)
{
    vcu__psess_t *s = arg;
    vcu__psock_t k = { NULL, 0, 0 };
    unsigned char *rbuf;

    /* Reply bodies are copied out of the ring here before anything reads
     * them: the worker may change the ring's bytes at any time. */
    rbuf = malloc(VCU_IPC_MAX_RESP_BODY);
    if (rbuf == NULL || vcu__px_reader_loop(s, rbuf, &k) != 0) {
        /* A worker that breaks the link's rules is not trusted further. */
        vcu__px_kill(s);
    }
    free(rbuf);
    free(k.buf);
    vcu__px_reader_end(s);
    return NULL;
}

vcu__psess_t *vcu__px_lookup_locked(vcu_proxy_t *px, uint64_t id)
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

/* ---- forward ------------------------------------------------------------ */

/* A request on its way to the worker (vcu__px_forward()): its frame's
 * layout and the frames made for it.  On the submitter's stack. */
typedef struct {
    uint64_t nranges;
    uint64_t body;                  /* vcu_ipc_req, the request, pad, the ranges */
    size_t pad;                     /* after the request, to 8 bytes */
    size_t len;                     /* the whole frame, its header included */
    bool ring;                      /* on the request ring, else on the socket */
    bool inbuf;                     /* built in the session's fbuf */
    unsigned char *buf;             /* where it is built */
    vcu__pframe_t *rf;              /* its own frame: not in fbuf, or waiting for room */
    vcu__pframe_t *mf;              /* on the socket: its VCU_IPC_SOCK mark for the ring */
    unsigned int ngf;               /* regions the worker has not been sent */
    int newfd[VCU_MAX_SEGS];
} vcu__pfwd_t;

/* A frame of len bytes to fill, not sent yet; NULL when out of memory. */
static vcu__pframe_t *vcu__px_frame_new(size_t len)
{
    vcu__pframe_t *f = calloc(1, sizeof(*f));

    if (f == NULL)
        return NULL;
    f->buf = malloc(len);
    if (f->buf == NULL) {
        free(f);
        return NULL;
    }
    f->fd = -1;
    f->len = len;
    return f;
}

/* Frees a frame that was never handed on (NULL: none). */
static void vcu__px_frame_drop(vcu__pframe_t *f)
{
    if (f != NULL)
        vcu__px_frame_free(f);
}

/* Counts the request's ranges into fw->nranges: VCU_S_OK, or the status
 * it completes with (segments the device did not map, too many). */
static uint32_t vcu__px_fwd_check(const vcu_request_t *req, vcu__pfwd_t *fw)
{
    unsigned int i;

    fw->nranges = 0;
    if (req->nsegs > VCU_MAX_SEGS)
        return VCU_S_EINVAL;
    for (i = 0; i < req->nsegs; i++) {
        if (req->segs[i].iovcnt > 0 && req->segs[i].ref == NULL)
            return VCU_S_EFAULT;
        fw->nranges += req->segs[i].iovcnt;
    }
    return fw->nranges > VCU_MAX_RANGES ? VCU_S_EINVAL : VCU_S_OK;
}

/* The frame's size, where it goes (the ring takes a quarter of its size
 * at most) and whether it is built in the session's buffer. */
static void vcu__px_fwd_layout(const vcu__psess_t *s, const vcu_request_t *req, vcu__pfwd_t *fw)
{
    fw->pad = (8 - req->req_len % 8) % 8;
    fw->body = sizeof(struct vcu_ipc_req) + req->req_len + fw->pad +
               fw->nranges * sizeof(struct vcu_ipc_range);
    fw->len = sizeof(struct vcu_ipc_hdr) + fw->body;
    fw->ring = vcu__ring_frame_bytes(fw->body) <= s->req.size / 4;
    fw->inbuf = fw->ring && fw->len <= sizeof(s->fbuf);
}

/* The frames made before the session's lock: the request's own when it
 * is not built in the session's buffer and, for the socket, its mark in
 * the ring's order.  0, or -1 when out of memory (none kept). */
static int vcu__px_fwd_frames(vcu__pfwd_t *fw)
{
    fw->rf = NULL;
    fw->mf = NULL;
    if (!fw->inbuf && (fw->rf = vcu__px_frame_new(fw->len)) == NULL)
        return -1;
    if (!fw->ring) {
        /* The VCU_IPC_SOCK entry that marks its place in the ring. */
        struct vcu_ipc_hdr mh = { .type = VCU_IPC_SOCK, .len = 0, .tag = 0 };

        fw->mf = vcu__px_frame_new(sizeof(mh));
        if (fw->mf == NULL) {
            vcu__px_frame_drop(fw->rf);
            return -1;
        }
        memcpy(fw->mf->buf, &mh, sizeof(mh));
    }
    return 0;
}

/* Writes the ranges from dst on, each naming its region (the fd of the
 * guest RAM it lies in), and notes in fw->newfd the regions the worker
 * has not been sent.  VCU_S_OK, or VCU_S_EFAULT (a range of no region,
 * too many regions).  s->mu held. */
static uint32_t vcu__px_fwd_ranges_locked(vcu__psess_t *s, const vcu_request_t *req,
                                          unsigned char *dst, vcu__pfwd_t *fw)
{
    unsigned int i, j, k;

    fw->ngf = 0;
    for (i = 0; i < req->nsegs; i++) {
        const vcu_segment_t *sg = &req->segs[i];

        for (j = 0; j < sg->iovcnt; j++) {
            struct vcu_ipc_range r;
            int fd = sg->ref[j].fd;

            memset(&r, 0, sizeof(r));
            r.region = (uint32_t)fd;
            r.off = sg->ref[j].off;
            r.len = sg->iov[j].iov_len;
            memcpy(dst, &r, sizeof(r));
            dst += sizeof(r);
            for (k = 0; k < s->nsent && s->sent_fds[k] != fd; k++)
                ;
            if (k < s->nsent)
                continue;
            for (k = 0; k < fw->ngf && fw->newfd[k] != fd; k++)
                ;
            if (k < fw->ngf)
                continue;
            if (fd < 0 || s->nsent + fw->ngf >= VCU_IPC_MAX_REGIONS || fw->ngf >= VCU_MAX_SEGS)
                return VCU_S_EFAULT;
            fw->newfd[fw->ngf++] = fd;
        }
    }
    return VCU_S_OK;
}

/* Builds the frame at fw->buf: its header (tag), the request with the
 * worker's own session id in it (not in an open, which has none yet),
 * the pad and the ranges.  VCU_S_OK or VCU_S_EFAULT.  s->mu held. */
static uint32_t vcu__px_fwd_build_locked(vcu__psess_t *s, const vcu_request_t *req, bool open,
                                         uint64_t tag, vcu__pfwd_t *fw)
{
    unsigned char *buf = fw->buf;
    struct vcu_ipc_hdr ih;
    struct vcu_ipc_req ir;
    size_t off = 0;

    ih.type = VCU_IPC_REQ;
    ih.len = (uint32_t)fw->body;
    ih.tag = tag;
    ir.req_len = (uint32_t)req->req_len;
    ir.nranges = (uint32_t)fw->nranges;
    ir.resp_cap = req->resp_cap;
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
    memset(buf + off, 0, fw->pad);
    off += fw->pad;
    return vcu__px_fwd_ranges_locked(s, req, buf + off, fw);
}

/* Sends the regions the worker has not seen yet (fw->newfd), each with
 * its fd, ahead of the request.  false when out of memory: then none is
 * sent.  s->mu held. */
static bool vcu__px_fwd_regions_locked(vcu__psess_t *s, const vcu__pfwd_t *fw)
{
    vcu__pframe_t *gf[VCU_MAX_SEGS];
    unsigned int i;

    for (i = 0; i < fw->ngf; i++) {
        struct vcu_ipc_region rg;
        struct vcu_ipc_hdr rh;

        gf[i] = vcu__px_frame_new(sizeof(rh) + sizeof(rg));
        if (gf[i] == NULL) {
            while (i-- > 0)
                vcu__px_frame_free(gf[i]);
            return false;
        }
        memset(&rg, 0, sizeof(rg));
        rg.id = (uint32_t)fw->newfd[i];
        rh.type = VCU_IPC_REGION;
        rh.len = sizeof(rg);
        rh.tag = 0;
        memcpy(gf[i]->buf, &rh, sizeof(rh));
        memcpy(gf[i]->buf + sizeof(rh), &rg, sizeof(rg));
        gf[i]->fd = fw->newfd[i];
    }
    for (i = 0; i < fw->ngf; i++) {
        s->sent_fds[s->nsent++] = fw->newfd[i];
        vcu__px_send_locked(s, gf[i]);
    }
    return true;
}

/* The request waits for its reply, newest last.  s->mu held. */
static void vcu__px_pending_add_locked(vcu__psess_t *s, vcu__preq_t *p, vcu_request_t *req,
                                       uint64_t tag, uint64_t req_id, bool open)
{
    p->req = req;
    p->tag = tag;
    p->req_id = req_id;
    p->open = open;
    p->next = NULL;
    if (s->pending_tail != NULL)
        s->pending_tail->next = p;
    else
        s->pending = p;
    s->pending_tail = p;
}

/* Hands the built frame on: on the ring (its own frame queued behind a
 * full one), or on the socket with its place in the ring's order marked.
 * Returns whether the submitter still polls for its reply.  s->mu held. */
static bool vcu__px_fwd_send_locked(vcu__psess_t *s, vcu__pfwd_t *fw, bool poll, uint64_t until)
{
    if (!fw->ring) {
        /* Too large for the ring: on the socket, and its place in the
         * ring's order marked. */
        vcu__px_send_locked(s, fw->rf);
        vcu__px_ring_send_locked(s, fw->mf);
        fw->mf = NULL;
        return poll;
    }
    if (fw->rf != NULL)
        vcu__px_ring_send_locked(s, fw->rf);
    /* On the ring now, nothing ahead of it queued: its reply may be
     * microseconds away. */
    poll = poll && s->rqhead == NULL && !s->broken;
    if (!poll && until != 0)
        __atomic_store_n(&s->poll_until, 0, __ATOMIC_RELEASE);
    return poll;
}

/* Sends the request to the session's worker: the regions it has not seen
 * yet first, each with its fd, then the request and its ranges.  A frame
 * for the ring is built in the session's buffer when it fits there, and
 * is copied only if it must wait for room. */
void vcu__px_forward(vcu__psess_t *s, vcu_request_t *req, const struct vcu_req_hdr *hp,
                     bool open)
{
    struct vcu_req_hdr h = *hp;
    vcu__pfwd_t fw;
    vcu__preq_t *p = NULL;
    uint32_t status;
    uint64_t tag, until = 0;
    bool poll = false;

    status = vcu__px_fwd_check(req, &fw);
    if (status != VCU_S_OK) {
        vcu__px_complete(req, h.req_id, status);
        return;
    }
    vcu__px_fwd_layout(s, req, &fw);
    if (vcu__px_fwd_frames(&fw) != 0) {
        vcu__px_complete(req, h.req_id, VCU_S_ENOMEM);
        return;
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
    poll = fw.ring && !open && !(h.flags & VCU_REQ_F_ASYNC) && s->px->poll_ns > 0;
    fw.buf = fw.inbuf ? s->fbuf : fw.rf->buf;
    tag = ++s->next_tag;
    status = vcu__px_fwd_build_locked(s, req, open, tag, &fw);
    if (status != VCU_S_OK)
        goto fail_locked;
    /* The regions the worker has not seen yet go first, each with its fd. */
    status = VCU_S_ENOMEM;
    if (!vcu__px_fwd_regions_locked(s, &fw))
        goto fail_locked;
    if (poll) {
        until = vcu__ring_now_ns() + s->px->poll_ns;
        __atomic_store_n(&s->poll_until, until, __ATOMIC_RELEASE);
    }
    if (fw.inbuf && !vcu__px_ring_try_locked(s, fw.buf)) {
        /* Behind a full ring: it waits in a copy of its own. */
        if ((fw.rf = vcu__px_frame_new(fw.len)) == NULL)
            goto fail_locked;
        memcpy(fw.rf->buf, fw.buf, fw.len);
    }
    vcu__px_pending_add_locked(s, p, req, tag, h.req_id, open);
    poll = vcu__px_fwd_send_locked(s, &fw, poll, until);
    pthread_mutex_unlock(&s->mu);
    vcu__px_frame_drop(fw.mf);
    if (poll)
        vcu__px_poll(s, tag, until);
    return;

fail_locked:
    if (p != NULL)
        vcu__px_preq_put_locked(s, p);
    if (until != 0)
        __atomic_store_n(&s->poll_until, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->mu);
    vcu__px_frame_drop(fw.rf);
    vcu__px_frame_drop(fw.mf);
    vcu__px_complete(req, h.req_id, status);
}

/* ---- migration ----------------------------------------------------------- */

void vcu__px_state(vcu__psess_t *s, vcu_request_t *req, uint32_t op, int fd)
{
    struct vcu_ipc_hdr mh = { .type = VCU_IPC_SOCK, .len = 0, .tag = 0 };
    struct vcu_ipc_hdr h = { .type = VCU_IPC_STATE, .len = sizeof(struct vcu_ipc_state) };
    struct vcu_ipc_state st;
    vcu__pframe_t *f, *mf;
    vcu__preq_t *p;
    uint64_t req_id = vcu__px_req_id(req);

    f = vcu__px_frame_new(sizeof(h) + sizeof(st));
    mf = vcu__px_frame_new(sizeof(mh));
    if (f == NULL || mf == NULL || (f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        vcu__px_frame_drop(f);
        vcu__px_frame_drop(mf);
        vcu__px_complete(req, req_id, VCU_S_ENOMEM);
        return;
    }
    f->own_fd = true;
    memcpy(mf->buf, &mh, sizeof(mh));
    pthread_mutex_lock(&s->mu);
    if (s->dead || s->wid == 0 || (p = vcu__px_preq_get_locked(s)) == NULL) {
        bool dead = s->dead || s->wid == 0;

        pthread_mutex_unlock(&s->mu);
        vcu__px_frame_drop(f);
        vcu__px_frame_drop(mf);
        vcu__px_complete(req, req_id, dead ? VCU_S_EIO : VCU_S_ENOMEM);
        return;
    }
    memset(&st, 0, sizeof(st));
    st.op = op;
    st.session = s->wid;
    h.tag = ++s->next_tag;
    memcpy(f->buf, &h, sizeof(h));
    memcpy(f->buf + sizeof(h), &st, sizeof(st));
    vcu__px_pending_add_locked(s, p, req, h.tag, req_id, false);
    /* On the socket, with its place in the ring's order marked. */
    vcu__px_send_locked(s, f);
    vcu__px_ring_send_locked(s, mf);
    pthread_mutex_unlock(&s->mu);
}
