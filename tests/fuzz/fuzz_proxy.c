/*
 * libFuzzer target for what the session proxy (qemu-device/proxy*.c, QEMU's
 * side of the GPU daemon and of every worker) reads from its peers, either
 * of which may be compromised:
 *
 * The daemon's link (mode 0): vcu_proxy_link_input() with the frames
 * (WELCOME, SPAWNED, SLICE, anything) and descriptors of the input, as
 * QEMU's chardev hands them over, or (flag L_NATIVE) written to a socket
 * pair the proxy reads itself (vcu__px_link_read(), the native link of
 * tests and benchmarks).  A few sessions are made by hand (in the table,
 * closing or parked) for SPAWNED to find; then vcu_proxy_stats() reads
 * the account the daemon shared.
 *
 * A worker's replies (mode 1): one session whose reply ring and socket hold
 * the input (a ring whose tail, head position and frames the worker wrote,
 * a socket with its hello frames and then its end), with pending requests
 * whose reply buffers have the input's sizes.  Optionally the submitter
 * polls first (vcu__px_poll()); then the session's reader (vcu__px_reader())
 * runs on this thread until the worker's end, taking replies with
 * vcu__ring_get() and vcu__px_reply().
 *
 * The proxy's files (proxy.c, proxy_session.c, proxy_link.c) are included
 * whole, for their static functions; what it runs is QEMU's code as it is.  The transport's link here queues nothing.
 *
 * Input:
 *   u8 mode             bit 0: the replies part, else the link part
 *   link part:
 *     u8 sess           bits 0-1: sessions made (0-3); bits 2-7, two per
 *                       session: 0 in the table, 1 closing, 2 parked (closed),
 *                       3 in the table, its worker refused already
 *     u8 flags          L_* below
 *     frames until the input ends:
 *       u8 fds          bits 0-2: descriptors with it; bits 3-5: which (F_*)
 *       [u16 n, n bytes]  the contents of a file F_* makes from the input
 *       u16 len, len bytes  the frame
 *   replies part:
 *     u8 npend          bits 0-2: pending requests (1-8); bit 3: the submitter
 *                       polls first; bit 4: the ring's position near 2^64
 *     per request: u8   bits 0-2: its reply buffer's size (R_CAPS); bit 3: an open
 *     u16 start         the ring position we start at (x 8)
 *     u8 t, u16 or u64  the worker's tail: t bit 0: absolute u64, else start + u16
 *     u16 n, n bytes    the ring's bytes from our position on
 *     the rest          what the worker writes to its socket before it ends
 *
 * Checked (besides the sanitizers): every request completes exactly once,
 * its reply within its buffer; an open's reply carries the guest's session
 * id, not the worker's; the proxy's link answers with frames of its own
 * types only; after the proxy is freed every descriptor it was given is
 * closed (an fd count), whatever the frames were.
 */
#include "proxy.c"
#include "proxy_link.c"
#include "proxy_session.c"
#include "fz_input.h"

#include <dirent.h>

#define FZ_CHECK(c)                                                               \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_proxy: %s:%d: check failed: %s\n", __FILE__,     \
                    __LINE__, #c);                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

#define L_NATIVE 0x01               /* the native link: a socket the proxy reads */
#define L_SEND_FAILS 0x02           /* the transport's link is down for sending */
#define L_DOWN_UP 0x04              /* after a refused frame: link down, up again */

/* Descriptor kinds (u8 fds, bits 3-5). */
enum {
    F_NULL,                         /* /dev/null each */
    F_SLICE,                        /* a good account and policy, then /dev/null */
    F_ACCT_IN,                      /* an account from the input, a good policy */
    F_POLICY_IN,                    /* a good account, a policy from the input */
    F_SWAPPED,                      /* the policy first, then the account */
    F_EMPTY,                        /* empty memfds */
    F_PIDFD,                        /* a process descriptor (ours), then /dev/null */
};

static const uint32_t r_caps[8] = { 0, 8, 24, 25, 40, 64, 4096, VCU_IPC_MAX_RESP_BODY };

static int fz_debug;
static int devnull = -1;
static int fz_acct_fd = -1;         /* a good account, as the daemon makes it */
static int fz_policy_fd = -1;       /* a good policy page */
static int fz_send_fails;
static unsigned char *fz_ring;      /* the reply ring's bytes (ASan sees past them) */

static unsigned int fz_nfds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    unsigned int n = 0;

    FZ_CHECK(dir != NULL);
    while ((e = readdir(dir)) != NULL)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* The transport's link: what the proxy sends is checked and dropped. */
static int fz_link_send(void *opaque, const void *frame, size_t len, const int *fds,
                        unsigned int nfds)
{
    struct vcu_link_hdr h;
    unsigned int i;

    (void)opaque;
    FZ_CHECK(len >= sizeof(h) && nfds <= VCU_LINK_MAX_FDS);
    memcpy(&h, frame, sizeof(h));
    FZ_CHECK(h.len == len - sizeof(h));
    FZ_CHECK(h.type == VCU_LINK_HELLO || h.type == VCU_LINK_SPAWN || h.type == VCU_LINK_KILL);
    for (i = 0; i < nfds; i++)
        FZ_CHECK(fcntl(fds[i], F_GETFD) != -1);
    return fz_send_fails ? -1 : 0;
}

static const vcu_proxy_link_t fz_link = { NULL, fz_link_send };

static int fz_memfd(const void *p, size_t n, size_t size)
{
    int fd = memfd_create("fz", MFD_CLOEXEC);

    FZ_CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
    if (n > 0)
        FZ_CHECK(pwrite(fd, p, n, 0) == (ssize_t)n);
    return fd;
}

static int fz_dup(int fd)
{
    int n = fcntl(fd, F_DUPFD_CLOEXEC, 0);

    FZ_CHECK(n >= 0);
    return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    vcu_account_t *a;
    struct vcu_policy pol;

    (void)argc;
    (void)argv;
    fz_debug = getenv("FUZZ_DEBUG") != NULL;
    signal(SIGPIPE, SIG_IGN);
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    FZ_CHECK(devnull >= 0);
    FZ_CHECK(vcu__acct_new(1ull << 30, 4, &a) == 0);
    fz_acct_fd = fz_dup(a->fd);
    vcu__acct_put(a);
    memset(&pol, 0, sizeof(pol));
    pol.magic = VCU_POLICY_MAGIC;
    pol.mem_quota = 1ull << 30;
    pol.max_sessions = 8;
    fz_policy_fd = fz_memfd(&pol, sizeof(pol), 4096);
    fz_ring = malloc(VCU_IPC_RESP_RING);
    FZ_CHECK(fz_ring != NULL);
    return 0;
}

/* ---- sessions made by hand --------------------------------------------------- */

/* A session as vcu__px_open() makes it, without its threads and channel. */
static vcu__psess_t *fz_sess_new(vcu_proxy_t *px, unsigned int slot)
{
    vcu__psess_t *s = aligned_alloc(64, (sizeof(*s) + 63) & ~(size_t)63);

    FZ_CHECK(s != NULL);
    memset(s, 0, sizeof(*s));
    s->px = px;
    s->fd = -1;
    s->wake_req = -1;
    s->wake_resp = -1;
    s->pidfd = -1;
    s->acct_slot = -1;
    s->slot = slot;
    s->id = (px->next_gen++ << 32) | (uint64_t)(slot + 1);
    s->spawn_gen = px->link_gen;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    return s;
}

static void fz_sess_free(vcu__psess_t *s)
{
    while (s->pfree != NULL) {
        vcu__preq_t *p = s->pfree;

        s->pfree = p->next;
        free(p);
    }
    if (s->fd >= 0)
        close(s->fd);
    if (s->pidfd >= 0)
        close(s->pidfd);
    if (s->wake_resp >= 0)
        close(s->wake_resp);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Takes the hand-made sessions out of the proxy (which would join their
 * threads) and frees them. */
static void fz_sess_drop_all(vcu_proxy_t *px)
{
    vcu__psess_t *s;
    unsigned int i;

    for (i = 0; i < px->max_sessions; i++) {
        if ((s = px->sessions[i]) != NULL) {
            px->sessions[i] = NULL;
            fz_sess_free(s);
        }
    }
    px->nlive = 0;
    while ((s = px->closing) != NULL) {
        px->closing = s->zombie_next;
        fz_sess_free(s);
    }
    while ((s = px->zombies) != NULL) {
        px->zombies = s->zombie_next;
        fz_sess_free(s);
    }
}

static vcu_proxy_t *fz_proxy_new(void)
{
    vcu_proxy_config_t cfg;
    vcu_proxy_t *px = NULL;
    char err[256];

    memset(&cfg, 0, sizeof(cfg));
    cfg.link = &fz_link;
    cfg.name = "fuzz";
    cfg.spin_us = 1;
    fz_send_fails = 0;
    FZ_CHECK(vcu_proxy_new(&cfg, &px, err, sizeof(err)) == 0);
    px->spin_us = 0;                /* the reader never spins here */
    px->poll_ns = 0;
    return px;
}

/* ---- the link ------------------------------------------------------------------ */

/* The descriptors of a frame, as the input says; n of them into fds. */
static void fz_fds(fz_in_t *in, uint8_t spec, int *fds, unsigned int *nfds)
{
    unsigned int n = spec & 7, kind = (spec >> 3) & 7, i;
    int made[2] = { -1, -1 };

    if (kind == F_ACCT_IN || kind == F_POLICY_IN) {
        size_t len = (size_t)in_u(in, 2), take = len < in->n ? len : in->n;

        made[kind == F_POLICY_IN] = fz_memfd(in->p, take, len);
        in->p += take;
        in->n -= take;
    }
    for (i = 0; i < n; i++) {
        int fd = devnull;

        switch (kind) {
        case F_SLICE:
        case F_ACCT_IN:
        case F_POLICY_IN:
            if (i < 2)
                fd = made[i] >= 0 ? made[i] : (i == 0 ? fz_acct_fd : fz_policy_fd);
            break;
        case F_SWAPPED:
            if (i < 2)
                fd = i == 0 ? fz_policy_fd : fz_acct_fd;
            break;
        case F_EMPTY:
            fds[i] = memfd_create("fz-empty", MFD_CLOEXEC);
            FZ_CHECK(fds[i] >= 0);
            continue;
        case F_PIDFD:
            if (i == 0) {
                fds[i] = (int)syscall(SYS_pidfd_open, getpid(), 0);
                if (fds[i] >= 0)
                    continue;
            }
            break;
        default:
            break;
        }
        fds[i] = fz_dup(fd);
    }
    for (i = 0; i < 2; i++)
        if (made[i] >= 0)
            close(made[i]);
    *nfds = n;
}

/* Writes a frame and its descriptors to the native link's other end. */
static void fz_native_send(int fd, const uint8_t *p, size_t len, const int *fds, unsigned int n)
{
    (void)vcu__fd_send(fd, p, len, fds, n, MSG_DONTWAIT);
}

static void fz_link_part(fz_in_t *in)
{
    vcu_proxy_t *px = fz_proxy_new();
    uint8_t sess = (uint8_t)in_u(in, 1), flags = (uint8_t)in_u(in, 1);
    vcu_proxy_session_stats_t st[4];
    vcu_proxy_stats_t out;
    unsigned int i;
    int sv[2] = { -1, -1 };

    for (i = 0; i < (sess & 3u); i++) {
        vcu__psess_t *s = fz_sess_new(px, i);
        unsigned int where = (sess >> (2 + 2 * i)) & 3;

        if (where == 1) {
            s->closing = true;
            s->zombie_next = px->closing;
            px->closing = s;
        } else if (where == 2) {
            s->zombie_next = px->zombies;
            px->zombies = s;
        } else {
            if (where == 3)
                s->spawn = VCU__PX_SPAWN_FAILED;
            px->sessions[i] = s;
            px->nlive++;
        }
    }
    fz_send_fails = (flags & L_SEND_FAILS) != 0;
    if (flags & L_NATIVE) {
        FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        px->lfd = sv[0];
    }
    while (in->n > 0) {
        uint8_t spec = (uint8_t)in_u(in, 1);
        int fds[8];
        unsigned int nfds;
        size_t len;
        char err[256];
        int rc;

        fz_fds(in, spec, fds, &nfds);
        len = (size_t)in_u(in, 2);
        if (len > in->n)
            len = in->n;
        if (flags & L_NATIVE) {
            if (len > 0)
                fz_native_send(sv[1], in->p, len, fds, nfds);
            vcu__px_close_fds(fds, nfds);
        } else {
            err[0] = '\0';
            rc = vcu_proxy_link_input(px, in->p, len, fds, nfds, err, sizeof(err));
            FZ_CHECK(rc == 0 || (rc < 0 && err[0] != '\0'));
            if (fz_debug)
                fprintf(stderr, "fuzz: frame of %zu bytes, %u fds: %d %s\n", len, nfds, rc, err);
            if (rc != 0 && (flags & L_DOWN_UP)) {
                vcu_proxy_link_down(px);
                vcu_proxy_link_up(px);
            }
        }
        in->p += len;
        in->n -= len;
    }
    if (flags & L_NATIVE) {
        unsigned char buf[sizeof(struct vcu_link_hdr) + VCU_LINK_MAX_BODY];

        /* The daemon's end closes after what it wrote: the link's reader
         * takes frames until then, as vcu__px_link_thread() does. */
        close(sv[1]);
        for (i = 0; i < 1024; i++) {
            int fds[VCU_LINK_MAX_FDS];
            unsigned int nfds;
            size_t len;
            char err[256];

            if (vcu__px_link_read(px, buf, sizeof(buf), &len, fds, &nfds) != 0)
                break;
            FZ_CHECK(len >= sizeof(struct vcu_link_hdr) && len <= sizeof(buf));
            FZ_CHECK(nfds <= VCU_LINK_MAX_FDS);
            if (vcu_proxy_link_input(px, buf, len, fds, nfds, err, sizeof(err)) != 0) {
                if (fz_debug)
                    fprintf(stderr, "fuzz: native frame refused: %s\n", err);
                break;
            }
            if (fz_debug)
                fprintf(stderr, "fuzz: native frame of %zu bytes, %u fds\n", len, nfds);
        }
        vcu_proxy_link_down(px);
    }
    FZ_CHECK(vcu_proxy_stats(px, &out, st, 4) == 0);
    FZ_CHECK(out.nsess <= 4 && out.nsess <= out.workers);
    fz_sess_drop_all(px);
    vcu_proxy_free(px);
}

/* ---- a worker's replies -------------------------------------------------------- */

typedef struct {
    vcu_request_t r;
    int done;
    uint64_t req_id;
    bool open;
} fz_req_t;

static void fz_done(vcu_request_t *r)
{
    fz_req_t *q = (fz_req_t *)r;

    FZ_CHECK(q->done == 0);         /* exactly once */
    q->done = 1;
    if (fz_debug)
        fprintf(stderr, "fuzz: request %llu done: %zu bytes, status %u\n",
                (unsigned long long)q->req_id, r->resp_len,
                r->resp_len >= 4 ? *(const uint32_t *)r->resp : 0);
    FZ_CHECK(r->resp_len <= r->resp_cap);
}

static void fz_replies_part(fz_in_t *in)
{
    vcu_proxy_t *px = fz_proxy_new();
    vcu__psess_t *s = fz_sess_new(px, 0);
    struct vcu_ipc_ring_ctl *ctl = calloc(1, sizeof(*ctl));
    uint8_t np = (uint8_t)in_u(in, 1), tk;
    unsigned int n = (np & 7u) + 1, i;
    fz_req_t reqs[8];
    uint64_t start, tail, ring_len;
    int sv[2], wake[2];

    FZ_CHECK(ctl != NULL);
    px->sessions[0] = s;
    px->nlive = 1;
    for (i = 0; i < n; i++) {
        uint8_t c = (uint8_t)in_u(in, 1);
        vcu__preq_t *p = malloc(sizeof(*p));

        FZ_CHECK(p != NULL);
        memset(&reqs[i], 0, sizeof(reqs[i]));
        reqs[i].r.resp_cap = r_caps[c & 7];
        reqs[i].r.resp = malloc(reqs[i].r.resp_cap ? reqs[i].r.resp_cap : 1);
        reqs[i].r.done = fz_done;
        reqs[i].req_id = 100 + i;
        reqs[i].open = (c & 8) != 0;
        p->req = &reqs[i].r;
        p->tag = i + 1;
        p->req_id = reqs[i].req_id;
        p->open = reqs[i].open;
        p->next = NULL;
        if (s->pending_tail != NULL)
            s->pending_tail->next = p;
        else
            s->pending = p;
        s->pending_tail = p;
    }
    start = in_u(in, 2) * 8;
    if (np & 16)
        start -= VCU_IPC_RESP_RING; /* near 2^64: positions wrap */
    tk = (uint8_t)in_u(in, 1);
    tail = tk & 1 ? in_u(in, 8) : start + in_u(in, 2);
    ring_len = in_u(in, 2);
    if (ring_len > in->n)
        ring_len = in->n;
    memset(fz_ring, 0, VCU_IPC_RESP_RING);
    for (i = 0; i < ring_len; i++)
        fz_ring[(start + i) & (VCU_IPC_RESP_RING - 1)] = in->p[i];
    in->p += ring_len;
    in->n -= ring_len;

    /* The channel: the session's socket (the worker's end writes the rest
     * of the input, then closes) and the reply ring's doorbell. */
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, wake) == 0);
    s->fd = sv[0];
    s->wake_resp = wake[0];
    vcu__ring_init(&s->resp, ctl, fz_ring, VCU_IPC_RESP_RING, wake[0]);
    s->resp.pos = start;
    ctl->head = start;
    ctl->tail = tail;
    while (in->n > 0) {
        ssize_t w = send(sv[1], in->p, in->n, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (w <= 0)
            break;
        in->p += w;
        in->n -= (size_t)w;
    }
    close(sv[1]);
    close(wake[1]);

    if (np & 8)
        vcu__px_poll(s, 1, 0);
    /* A reset is under way: the reader ends at the worker's end (or a
     * broken ring) and leaves what is pending to the caller. */
    s->stop = true;
    FZ_CHECK(vcu__px_reader(s) == NULL);
    vcu__px_cancel_all(s, VCU_S_ECANCELED);
    for (i = 0; i < n; i++) {
        struct vcu_resp_hdr h;

        FZ_CHECK(reqs[i].done == 1);
        if (reqs[i].open && reqs[i].r.resp_len >= sizeof(h) + sizeof(struct vcu_session_open_resp)) {
            struct vcu_session_open_resp o;

            memcpy(&h, reqs[i].r.resp, sizeof(h));
            memcpy(&o, (char *)reqs[i].r.resp + sizeof(h), sizeof(o));
            if (h.status == VCU_S_OK)
                FZ_CHECK(o.session == s->id);
        }
        free(reqs[i].r.resp);
    }
    px->sessions[0] = NULL;
    px->nlive = 0;
    fz_sess_free(s);
    free(ctl);
    vcu_proxy_free(px);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = { data, size };
    unsigned int fds0 = fz_nfds();
    uint8_t mode = (uint8_t)in_u(&in, 1);

    if (mode & 1)
        fz_replies_part(&in);
    else
        fz_link_part(&in);
    FZ_CHECK(fz_nfds() == fds0);
    return 0;
}
