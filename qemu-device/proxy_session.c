/*
 * virtio-cuda session proxy: sessions (proxy.c says how they live).  A
 * session is opened at the guest's SESSION_OPEN: its channel to the worker
 * (a socket, the shared area with the two rings, their doorbells), its
 * threads, and the daemon asked for the worker; it ends at SESSION_CLOSE
 * (proxy.c) or at a reset, and is freed here.  Also the report of the
 * sessions whose workers live (vcu_proxy_stats()).
 */
#include "proxy_int.h"

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

/* A new session, out of the table, with no channel yet; NULL when out of
 * memory (or of mutexes). */
static vcu__psess_t *vcu__px_sess_new(vcu_proxy_t *px)
{
    vcu__psess_t *s;

    /* Aligned: poll_until has a cache line of its own. */
    s = aligned_alloc(64, (sizeof(*s) + 63) & ~(size_t)63);
    if (s == NULL)
        return NULL;
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
    return s;

fail_mu:
    pthread_mutex_destroy(&s->mu);
fail_s:
    free(s);
    return NULL;
}

/* Frees a session vcu__px_sess_new() made that never got further. */
static void vcu__px_sess_destroy(vcu__psess_t *s)
{
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Gives s its slot in the table and its id: VCU_S_OK, or VCU_S_ENODEV
 * (no daemon to start a worker), VCU_S_EBUSY (the table is full). */
static uint32_t vcu__px_sess_reserve(vcu_proxy_t *px, vcu__psess_t *s)
{
    unsigned int slot;

    pthread_mutex_lock(&px->mu);
    if (!px->link_up) {
        /* No daemon to start a worker: the guest's CUDA says no device. */
        pthread_mutex_unlock(&px->mu);
        return VCU_S_ENODEV;
    }
    if (px->nlive >= px->max_sessions) {
        pthread_mutex_unlock(&px->mu);
        return VCU_S_EBUSY;
    }
    for (slot = 0; slot < px->max_sessions; slot++)
        if (px->sessions[slot] == NULL)
            break;
    s->slot = slot;
    s->id = (px->next_gen++ << 32) | (uint64_t)(slot + 1);
    s->spawn_gen = px->link_gen;
    px->sessions[slot] = s;         /* reserved; undone on failure */
    px->nlive++;
    pthread_mutex_unlock(&px->mu);
    return VCU_S_OK;
}

/* vcu__px_sess_reserve() for a session a migration brings: its id is the
 * one the guest has, its slot must be free.  VCU_S_OK, ENODEV, EBUSY
 * (taken), or EINVAL (an id this proxy cannot hold). */
static uint32_t vcu__px_sess_reserve_id(vcu_proxy_t *px, vcu__psess_t *s, uint64_t id)
{
    uint64_t slot = (id & 0xffffffffu), gen = id >> 32;

    if (slot == 0 || slot > px->max_sessions || gen == 0)
        return VCU_S_EINVAL;
    pthread_mutex_lock(&px->mu);
    if (!px->link_up || px->sessions[slot - 1] != NULL || px->nlive >= px->max_sessions) {
        uint32_t st = !px->link_up ? VCU_S_ENODEV : VCU_S_EBUSY;

        pthread_mutex_unlock(&px->mu);
        return st;
    }
    s->slot = (unsigned int)(slot - 1);
    s->id = id;
    if (px->next_gen <= gen)
        px->next_gen = gen + 1;
    s->spawn_gen = px->link_gen;
    px->sessions[s->slot] = s;
    px->nlive++;
    pthread_mutex_unlock(&px->mu);
    return VCU_S_OK;
}

/* Undoes vcu__px_sess_reserve() and what vcu__px_channel() made, both
 * ends: the open failed. */
static void vcu__px_sess_unreserve(vcu_proxy_t *px, vcu__psess_t *s,
                                   int theirs[VCU_LINK_SPAWN_FDS])
{
    unsigned int i;

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
}

/* Starts the session's sender and reader: 0, or -1 with neither running. */
static int vcu__px_sess_threads(vcu__psess_t *s)
{
    if (pthread_create(&s->sender, NULL, vcu__px_sender, s) != 0)
        return -1;
    if (pthread_create(&s->reader, NULL, vcu__px_reader, s) != 0) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->sender, NULL);
        return -1;
    }
    return 0;
}

/* Asks the daemon for the session's worker, with the worker's ends of the
 * channel (closed here, the daemon has its copies). */
static void vcu__px_spawn(vcu_proxy_t *px, vcu__psess_t *s, int theirs[VCU_LINK_SPAWN_FDS])
{
    unsigned int i;
    bool sent;

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
}

/* SESSION_OPEN: a new session, its channel and threads, the open itself
 * on its way to the worker and the daemon asked to start it; or the open
 * completes with why not. */
void vcu__px_open(vcu_proxy_t *px, vcu_request_t *req, const struct vcu_req_hdr *h)
{
    vcu__psess_t *s;
    int theirs[VCU_LINK_SPAWN_FDS] = { -1, -1, -1, -1 };
    uint32_t status;

    vcu__px_reap_zombies(px);
    s = vcu__px_sess_new(px);
    if (s == NULL) {
        vcu__px_complete(req, h->req_id, VCU_S_ENOMEM);
        return;
    }
    status = vcu__px_sess_reserve(px, s);
    if (status != VCU_S_OK)
        goto fail_s;
    status = VCU_S_EIO;
    if (vcu__px_channel(px, s, theirs) != 0 || vcu__px_sess_threads(s) != 0)
        goto fail_slot;
    if (req->req_len >= sizeof(*h) + sizeof(s->open_req))
        memcpy(&s->open_req, (const char *)req->req + sizeof(*h), sizeof(s->open_req));
    /* The open waits in the ring for the worker; then the daemon is asked
     * for it.  Until the worker's end of the socket is closed, the reader
     * cannot see the link end. */
    vcu__px_forward(s, req, h, true);
    vcu__px_spawn(px, s, theirs);
    return;

fail_slot:
    vcu__px_sess_unreserve(px, s, theirs);
fail_s:
    vcu__px_sess_destroy(s);
    vcu__px_complete(req, h->req_id, status);
}

/* ---- migration ----------------------------------------------------------- */

VCU_EXPORT unsigned int vcu_proxy_sessions(vcu_proxy_t *px, uint64_t *ids,
                                           struct vcu_session_open_req *opens, unsigned int max)
{
    unsigned int i, n = 0;

    pthread_mutex_lock(&px->mu);
    for (i = 0; i < px->max_sessions; i++) {
        vcu__psess_t *s = px->sessions[i];

        if (s == NULL)
            continue;
        if (n < max) {
            ids[n] = s->id;
            pthread_mutex_lock(&s->mu);
            opens[n] = s->open_req;
            pthread_mutex_unlock(&s->mu);
        }
        n++;
    }
    pthread_mutex_unlock(&px->mu);
    return n;
}

VCU_EXPORT void vcu_proxy_session_state(vcu_proxy_t *px, vcu_request_t *req, int fd)
{
    struct vcu_req_hdr h;
    vcu__psess_t *s;

    memset(&h, 0, sizeof(h));
    if (req->req_len >= sizeof(h))
        memcpy(&h, req->req, sizeof(h));
    if (!VCU_BACKEND_OP_IS_STATE(h.opcode) || fd < 0) {
        vcu__px_complete(req, h.req_id, VCU_S_EINVAL);
        return;
    }
    pthread_mutex_lock(&px->mu);
    s = vcu__px_lookup_locked(px, h.session);
    pthread_mutex_unlock(&px->mu);
    if (s == NULL) {
        vcu__px_complete(req, h.req_id, VCU_S_ENOSESSION);
        return;
    }
    vcu__px_state(s, req, h.opcode, fd);
}

/* A restore's own SESSION_OPEN, then the caller's load behind it. */
typedef struct vcu__prestore_s {
    vcu_request_t r;
    unsigned char req[sizeof(struct vcu_req_hdr) + sizeof(struct vcu_session_open_req)];
    unsigned char resp[sizeof(struct vcu_resp_hdr) + sizeof(struct vcu_session_open_resp)];
    vcu__psess_t *s;
    vcu_request_t *load;
    uint64_t load_id;
    int fd;
} vcu__prestore_t;

/* The open's reply, on the session's reader: the load goes out once the
 * worker has the session (vcu__px_state() only queues a frame). */
static void vcu__px_restore_opened(vcu_request_t *r)
{
    vcu__prestore_t *rs = r->opaque;
    struct vcu_resp_hdr h;

    memset(&h, 0, sizeof(h));
    h.status = VCU_S_EIO;
    if (r->resp_len >= sizeof(h))
        memcpy(&h, rs->resp, sizeof(h));
    if (h.status == VCU_S_OK)
        vcu__px_state(rs->s, rs->load, VCU_BACKEND_OP_LOAD, rs->fd);
    else
        vcu__px_complete(rs->load, rs->load_id, h.status);
    close(rs->fd);
    free(rs);
}

VCU_EXPORT void vcu_proxy_session_restore(vcu_proxy_t *px, vcu_request_t *req,
                                          const struct vcu_session_open_req *open, int fd)
{
    int theirs[VCU_LINK_SPAWN_FDS] = { -1, -1, -1, -1 };
    struct vcu_req_hdr h, oh;
    vcu__prestore_t *rs;
    vcu__psess_t *s;
    uint32_t status = VCU_S_EINVAL;

    memset(&h, 0, sizeof(h));
    if (req->req_len >= sizeof(h))
        memcpy(&h, req->req, sizeof(h));
    if (h.opcode != VCU_BACKEND_OP_LOAD || fd < 0 || open == NULL) {
        vcu__px_complete(req, h.req_id, VCU_S_EINVAL);
        return;
    }
    vcu__px_reap_zombies(px);
    rs = calloc(1, sizeof(*rs));
    s = rs != NULL ? vcu__px_sess_new(px) : NULL;
    if (s == NULL || (rs->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        if (s != NULL)
            vcu__px_sess_destroy(s);
        free(rs);
        vcu__px_complete(req, h.req_id, VCU_S_ENOMEM);
        return;
    }
    status = vcu__px_sess_reserve_id(px, s, h.session);
    if (status != VCU_S_OK)
        goto fail_s;
    status = VCU_S_EIO;
    if (vcu__px_channel(px, s, theirs) != 0 || vcu__px_sess_threads(s) != 0)
        goto fail_slot;
    memset(&oh, 0, sizeof(oh));
    oh.opcode = VCU_OP_SESSION_OPEN;
    oh.payload_len = sizeof(*open);
    memcpy(rs->req, &oh, sizeof(oh));
    memcpy(rs->req + sizeof(oh), open, sizeof(*open));
    rs->r.req = rs->req;
    rs->r.req_len = sizeof(rs->req);
    rs->r.resp = rs->resp;
    rs->r.resp_cap = sizeof(rs->resp);
    rs->r.done = vcu__px_restore_opened;
    rs->r.opaque = rs;
    rs->s = s;
    rs->load = req;
    rs->load_id = h.req_id;
    s->open_req = *open;
    vcu__px_forward(s, &rs->r, &oh, true);
    vcu__px_spawn(px, s, theirs);
    return;

fail_slot:
    vcu__px_sess_unreserve(px, s, theirs);
fail_s:
    vcu__px_sess_destroy(s);
    close(rs->fd);
    free(rs);
    vcu__px_complete(req, h.req_id, status);
}

/* ---- reset ------------------------------------------------------------- */

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


/* ---- reports ----------------------------------------------------------- */

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
