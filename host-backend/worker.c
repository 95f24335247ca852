/*
 * vcu-worker: one guest session's host process.
 *
 *   vcu-worker --fd N [--shm FD --wake-req FD --wake-resp FD] [--spin-us N]
 *              [--gpus LIST] [--libcuda PATH] [--capture-printf 0|1] [--probe]
 *
 * --probe: load the driver, resolve the GPU list, say so (VCU_IPC_HELLO)
 * and exit: QEMU checks its configuration this way at start.
 *
 * Started by the QEMU device's proxy (proxy.c) at SESSION_OPEN with its
 * end of a stream socket (vcu_ipc.h) as fd N.  Runs the backend
 * (vcu_backend.h) in this process, for this one session: the session's
 * CUDA contexts, memory, modules and faults are this process's alone.
 * Exits when the socket closes (QEMU closed the session, reset the device
 * or died) or when its parent dies.
 *
 * Guest memory: the proxy sends each guest RAM block's file descriptor
 * once (VCU_IPC_REGION); the worker maps the block whole and turns every
 * range of a request into an iovec of that mapping.  Nothing of it is
 * registered with CUDA but the ranges of VCU_SEG_F_STABLE segments (the
 * guest's pinned buffers, which async copies and zero-copy kernels use
 * after the reply): each is registered once, page-rounded, and stays so
 * until a SESSION_FENCE names it as released; the registration is dropped
 * before the fence's reply, after which the guest may reuse the pages.
 * The backend refuses CUDA on a device that can read pageable host memory
 * (HMM, ATS), so unregistered guest RAM is out of the kernels' reach.
 *
 * The link: with --shm, requests come on the shared request ring and
 * replies go on the reply ring (vcu_ipc.h, "The hot path"); the socket
 * carries the regions, requests too large for the ring (announced in the
 * ring by VCU_IPC_SOCK), and the end of the session.  The main thread,
 * idle, spins --spin-us on the request ring, then sleeps in poll() on the
 * ring's doorbell and the socket.  Without --shm (--probe) only the hello
 * is sent.
 *
 * Threads: the main thread reads frames and submits; replies are written
 * by whichever thread completes a request (the backend's), under
 * vcu__w.wlock.  vcu__w.alock protects the registration list.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "vcu_backend.h"
#include "vcu_ipc.h"
#include "vcu_ring.h"

#define VCU__W_PAGE 4096ull

typedef struct vcu__region_s {
    uint32_t id;
    unsigned char *base;
    uint64_t size;
} vcu__region_t;

/* A registered, page-rounded range of one region. */
typedef struct vcu__reg_s {
    struct vcu__reg_s *next;
    uint32_t region;
    uint64_t off;
    uint64_t len;
} vcu__reg_t;

typedef struct vcu__job_s {
    vcu_request_t breq;
    uint64_t tag;
    bool fence;
    /* A fence's released ranges, dropped from the registrations at its
     * reply: region, page-rounded offset and length. */
    struct vcu_ipc_range *released;
    uint32_t nreleased;
    vcu_segment_t segs[VCU_MAX_SEGS];
    struct iovec *iov;
    unsigned char *req;
    unsigned char *resp;
} vcu__job_t;

static struct {
    int fd;
    vcu_backend_t *be;
    vcu__ring_t req;                /* main thread only */
    vcu__ring_t resp;               /* under wlock */
    bool rings;
    uint64_t spin_ns;
    unsigned char *sbuf;            /* socket bytes not yet taken (main thread) */
    size_t scap, shave;
    pthread_mutex_t wlock;          /* writes to fd, the reply ring */
    pthread_mutex_t alock;          /* regs */
    vcu__region_t regions[VCU_IPC_MAX_REGIONS];
    unsigned int nregions;
    vcu__reg_t *regs;
    int fdq[VCU_IPC_MAX_REGIONS];   /* received, not yet claimed by a REGION */
    unsigned int nfdq;
} vcu__w = {
    .fd = -1,
    .wlock = PTHREAD_MUTEX_INITIALIZER,
    .alock = PTHREAD_MUTEX_INITIALIZER,
};

static void vcu__die(const char *what)
{
    fprintf(stderr, "vcu-worker[%d]: %s\n", (int)getpid(), what);
    _exit(1);
}

static void vcu__write_all(const void *p, size_t n)
{
    const unsigned char *b = p;

    while (n > 0) {
        ssize_t w = send(vcu__w.fd, b, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(0);               /* QEMU is gone: so is the session */
        b += w;
        n -= (size_t)w;
    }
}

/* Replies go on the reply ring (waiting while it is full: the proxy's
 * reader empties it), the hello on the socket. */
static void vcu__send_frame(uint32_t type, uint64_t tag, const void *body, size_t len)
{
    struct vcu_ipc_hdr h = { .type = type, .len = (uint32_t)len, .tag = tag };

    pthread_mutex_lock(&vcu__w.wlock);
    if (type == VCU_IPC_RESP && vcu__w.rings) {
        int rc;

        while ((rc = vcu__ring_put(&vcu__w.resp, &h, body)) == VCU__RING_FULL) {
            struct timespec ts = { 0, 20 * 1000 };

            nanosleep(&ts, NULL);
        }
        if (rc < 0)
            vcu__die("reply ring broken");
    } else {
        vcu__write_all(&h, sizeof(h));
        vcu__write_all(body, len);
    }
    pthread_mutex_unlock(&vcu__w.wlock);
}

static const vcu__region_t *vcu__region(uint32_t id)
{
    unsigned int i;

    for (i = 0; i < vcu__w.nregions; i++)
        if (vcu__w.regions[i].id == id)
            return &vcu__w.regions[i];
    return NULL;
}

/* ---- registrations of stable ranges ------------------------------------ */

/* Registers [off, off+len) of region r, page-rounded, unless a registered
 * range holds it already.  A failure only costs speed (the copy is
 * staged), so it is not reported. */
static void vcu__reg_use(const vcu__region_t *r, uint64_t off, uint64_t len)
{
    uint64_t a = off & ~(VCU__W_PAGE - 1);
    uint64_t e = (off + len + VCU__W_PAGE - 1) & ~(VCU__W_PAGE - 1);
    vcu__reg_t *g;

    if (e > r->size)
        e = r->size & ~(VCU__W_PAGE - 1);
    if (e <= a)
        return;
    pthread_mutex_lock(&vcu__w.alock);
    for (g = vcu__w.regs; g != NULL; g = g->next)
        if (g->region == r->id && g->off <= a && a + (e - a) <= g->off + g->len) {
            pthread_mutex_unlock(&vcu__w.alock);
            return;
        }
    g = calloc(1, sizeof(*g));
    if (g != NULL && vcu_backend_add_ram(vcu__w.be, r->base + a, e - a) == 0) {
        g->region = r->id;
        g->off = a;
        g->len = e - a;
        g->next = vcu__w.regs;
        vcu__w.regs = g;
        g = NULL;
    }
    pthread_mutex_unlock(&vcu__w.alock);
    free(g);
}

/* Drops every registration that overlaps a released range. */
static void vcu__reg_release(const struct vcu_ipc_range *rel, uint32_t n)
{
    vcu__reg_t **pp, *g;
    uint32_t i;

    pthread_mutex_lock(&vcu__w.alock);
    for (pp = &vcu__w.regs; (g = *pp) != NULL;) {
        bool hit = false;

        for (i = 0; i < n && !hit; i++)
            hit = rel[i].region == g->region && rel[i].off < g->off + g->len &&
                  g->off < rel[i].off + rel[i].len;
        if (!hit) {
            pp = &g->next;
            continue;
        }
        *pp = g->next;
        vcu_backend_remove_ram(vcu__w.be, vcu__region(g->region)->base + g->off, g->len);
        free(g);
    }
    pthread_mutex_unlock(&vcu__w.alock);
}

/* ---- requests ---------------------------------------------------------- */

static void vcu__job_free(vcu__job_t *j)
{
    free(j->released);
    free(j->iov);
    free(j->req);
    free(j->resp);
    free(j);
}

static void vcu__job_done(vcu_request_t *breq)
{
    vcu__job_t *j = breq->opaque;
    size_t len = breq->resp_len <= breq->resp_cap ? breq->resp_len : breq->resp_cap;

    /* Before the reply: the guest frees the pages once it has it. */
    if (j->fence && j->nreleased > 0)
        vcu__reg_release(j->released, j->nreleased);
    vcu__send_frame(VCU_IPC_RESP, j->tag, j->resp, len);
    vcu__job_free(j);
}

/* A reply of status alone, for a request the backend never saw. */
static void vcu__reply_status(uint64_t tag, const struct vcu_req_hdr *h, uint32_t status)
{
    struct vcu_resp_hdr r;

    memset(&r, 0, sizeof(r));
    r.status = status;
    r.req_id = h != NULL ? h->req_id : 0;
    vcu__send_frame(VCU_IPC_RESP, tag, &r, sizeof(r));
}

static void vcu__sock_pump(bool want_req);

/*
 * One VCU_IPC_REQ: the ranges become iovecs of the mapped regions; a
 * fence's segment (the memory it releases) is taken off the request
 * before the backend sees it.
 */
static void vcu__handle_req(uint64_t tag, const unsigned char *body, size_t blen)
{
    struct vcu_ipc_req ir;
    struct vcu_req_hdr h;
    const struct vcu_ipc_range *rg;
    vcu__job_t *j;
    size_t pad, seg_off;
    uint64_t k = 0, total = 0;
    unsigned int i;
    uint32_t status = VCU_S_EINVAL;

    if (blen < sizeof(ir)) {
        vcu__reply_status(tag, NULL, VCU_S_EINVAL);
        return;
    }
    memcpy(&ir, body, sizeof(ir));
    pad = (8 - ir.req_len % 8) % 8;
    if (ir.req_len < sizeof(h) || ir.nranges > VCU_MAX_RANGES ||
        blen != sizeof(ir) + ir.req_len + pad + (uint64_t)ir.nranges * sizeof(*rg) ||
        ir.resp_cap < sizeof(struct vcu_resp_hdr) ||
        ir.resp_cap > sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD) {
        vcu__reply_status(tag, NULL, VCU_S_EINVAL);
        return;
    }
    memcpy(&h, body + sizeof(ir), sizeof(h));
    rg = (const struct vcu_ipc_range *)(body + sizeof(ir) + ir.req_len + pad);
    /* A region's fd comes on the socket, sent before the request that
     * names it: wait for it there. */
    for (k = 0; k < ir.nranges; k++)
        while (vcu__region(rg[k].region) == NULL)
            vcu__sock_pump(false);
    k = 0;
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        vcu__reply_status(tag, &h, VCU_S_ENOMEM);
        return;
    }
    j->tag = tag;
    j->req = malloc(ir.req_len);
    j->resp = calloc(1, ir.resp_cap);
    j->iov = calloc(ir.nranges ? ir.nranges : 1, sizeof(*j->iov));
    if (j->req == NULL || j->resp == NULL || j->iov == NULL) {
        status = VCU_S_ENOMEM;
        goto fail;
    }
    memcpy(j->req, body + sizeof(ir), ir.req_len);

    if (h.nsegs > VCU_MAX_SEGS || h.payload_len > VCU_MAX_PAYLOAD)
        goto fail;
    seg_off = sizeof(h) + ((h.payload_len + 7u) & ~7u);
    if (ir.req_len < seg_off + (size_t)h.nsegs * sizeof(struct vcu_seg))
        goto fail;
    for (i = 0; i < h.nsegs; i++) {
        struct vcu_seg ws;
        vcu_segment_t *sg = &j->segs[i];
        uint64_t sum = 0;
        uint32_t n;

        memcpy(&ws, j->req + seg_off + i * sizeof(ws), sizeof(ws));
        /* A fence's segments name memory it releases: read by no one. */
        if (ws.nranges > ir.nranges - k ||
            (h.opcode == VCU_OP_SESSION_FENCE && ws.flags != VCU_SEG_TO_DEVICE)) {
            status = VCU_S_EINVAL;
            goto fail;
        }
        sg->iov = &j->iov[k];
        sg->iovcnt = ws.nranges;
        sg->len = ws.len;
        sg->flags = ws.flags;
        for (n = 0; n < ws.nranges; n++, k++) {
            const vcu__region_t *r = vcu__region(rg[k].region);

            /* The proxy checked nothing of this: QEMU did, but a link
             * that disagrees with itself is refused here too. */
            if (r == NULL || rg[k].len == 0 || rg[k].off > r->size ||
                rg[k].len > r->size - rg[k].off) {
                status = VCU_S_EFAULT;
                goto fail;
            }
            j->iov[k].iov_base = r->base + rg[k].off;
            j->iov[k].iov_len = rg[k].len;
            sum += rg[k].len;
            if ((ws.flags & VCU_SEG_F_STABLE) && h.opcode != VCU_OP_SESSION_FENCE)
                vcu__reg_use(r, rg[k].off, rg[k].len);
        }
        total += sum;
        (void)total;
    }
    if (k != ir.nranges)
        goto fail;

    if (h.opcode == VCU_OP_SESSION_FENCE) {
        j->fence = true;
        if (ir.nranges > 0) {
            j->released = malloc(ir.nranges * sizeof(*j->released));
            if (j->released == NULL) {
                status = VCU_S_ENOMEM;
                goto fail;
            }
            memcpy(j->released, rg, ir.nranges * sizeof(*rg));
            j->nreleased = ir.nranges;
        }
        /* The backend's fence takes no segment. */
        h.nsegs = 0;
        memcpy(j->req, &h, sizeof(h));
        ir.req_len = (uint32_t)seg_off;
    }

    j->breq.req = j->req;
    j->breq.req_len = ir.req_len;
    j->breq.segs = j->fence ? NULL : j->segs;
    j->breq.nsegs = j->fence ? 0 : h.nsegs;
    j->breq.resp = j->resp;
    j->breq.resp_cap = ir.resp_cap;
    j->breq.done = vcu__job_done;
    j->breq.opaque = j;
    vcu_backend_submit(vcu__w.be, &j->breq);
    return;

fail:
    vcu__reply_status(tag, &h, status);
    vcu__job_free(j);
}

static void vcu__handle_region(const unsigned char *body, size_t blen)
{
    struct vcu_ipc_region rg;
    struct stat st;
    vcu__region_t *r;
    void *p;
    int fd;

    if (blen != sizeof(rg) || vcu__w.nfdq == 0)
        vcu__die("malformed region message");
    memcpy(&rg, body, sizeof(rg));
    fd = vcu__w.fdq[0];
    memmove(vcu__w.fdq, vcu__w.fdq + 1, --vcu__w.nfdq * sizeof(int));
    if (vcu__region(rg.id) != NULL || vcu__w.nregions >= VCU_IPC_MAX_REGIONS)
        vcu__die("region given twice, or too many regions");
    if (fstat(fd, &st) != 0 || st.st_size <= 0)
        vcu__die("cannot stat a guest RAM region");
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        vcu__die("cannot map a guest RAM region");
    close(fd);
    r = &vcu__w.regions[vcu__w.nregions++];
    r->id = rg.id;
    r->base = p;
    r->size = (uint64_t)st.st_size;
}

/* ---- the socket --------------------------------------------------------- */

/* Reads what the socket has (with block, waits for some) into sbuf, the
 * file descriptors that come with it into fdq.  Its end is ours. */
static void vcu__sock_fill(bool block)
{
    union {
        struct cmsghdr c;
        char b[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct vcu_ipc_hdr h;
    struct iovec iov;
    struct msghdr m;
    struct cmsghdr *c;
    size_t need = vcu__w.shave + 65536;
    ssize_t n;

    if (vcu__w.shave >= sizeof(h)) {
        memcpy(&h, vcu__w.sbuf, sizeof(h));
        if (h.len > VCU_IPC_MAX_BODY)
            vcu__die("oversized message");
        if (sizeof(h) + h.len > need)
            need = sizeof(h) + h.len;
    }
    if (need > vcu__w.scap) {
        unsigned char *nb;

        if (need < 2 * vcu__w.scap)
            need = 2 * vcu__w.scap;
        nb = realloc(vcu__w.sbuf, need);

        if (nb == NULL)
            vcu__die("out of memory");
        vcu__w.sbuf = nb;
        vcu__w.scap = need;
    }
    iov.iov_base = vcu__w.sbuf + vcu__w.shave;
    iov.iov_len = vcu__w.scap - vcu__w.shave;
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.b;
    m.msg_controllen = sizeof(ctl.b);
    do {
        n = recvmsg(vcu__w.fd, &m, MSG_CMSG_CLOEXEC | (block ? 0 : MSG_DONTWAIT));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && !block && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0)
        _exit(0);                   /* closed: the session ends with us */
    if (m.msg_flags & MSG_CTRUNC)
        vcu__die("file descriptors lost");
    for (c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
        size_t nfd, f;

        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (f = 0; f < nfd; f++) {
            int fd;

            memcpy(&fd, CMSG_DATA(c) + f * sizeof(int), sizeof(int));
            if (vcu__w.nfdq >= VCU_IPC_MAX_REGIONS)
                vcu__die("too many file descriptors");
            vcu__w.fdq[vcu__w.nfdq++] = fd;
        }
    }
    vcu__w.shave += (size_t)n;
}

/*
 * Takes frames from the socket, reading it as needed: each region is
 * mapped; with want_req the call ends after a request (the one a
 * VCU_IPC_SOCK entry announced), else after a region.  A request the
 * ring did not announce breaks the link's order.
 */
static void vcu__sock_pump(bool want_req)
{
    for (;;) {
        struct vcu_ipc_hdr h;

        while (vcu__w.shave >= sizeof(h)) {
            size_t flen;

            memcpy(&h, vcu__w.sbuf, sizeof(h));
            if (h.len > VCU_IPC_MAX_BODY)
                vcu__die("oversized message");
            flen = sizeof(h) + h.len;
            if (vcu__w.shave < flen)
                break;
            if (h.type == VCU_IPC_REGION) {
                vcu__handle_region(vcu__w.sbuf + sizeof(h), h.len);
                memmove(vcu__w.sbuf, vcu__w.sbuf + flen, vcu__w.shave - flen);
                vcu__w.shave -= flen;
                if (!want_req)
                    return;
                continue;
            }
            if (h.type == VCU_IPC_REQ && want_req) {
                /* Out of sbuf first: a region wait reads the socket. */
                unsigned char *body = malloc(h.len ? h.len : 1);

                if (body == NULL)
                    vcu__die("out of memory");
                memcpy(body, vcu__w.sbuf + sizeof(h), h.len);
                memmove(vcu__w.sbuf, vcu__w.sbuf + flen, vcu__w.shave - flen);
                vcu__w.shave -= flen;
                vcu__handle_req(h.tag, body, h.len);
                free(body);
                return;
            }
            vcu__die("unexpected message on the socket");
        }
        vcu__sock_fill(true);
    }
}

/* Maps the shared area (fd) and binds the two rings to it. */
static void vcu__map_shm(int fd, int wake_req, int wake_resp)
{
    struct vcu_ipc_shm *shm;
    struct stat st;
    uint32_t rq, rs;
    void *p;

    if (fstat(fd, &st) != 0 || st.st_size < (off_t)VCU_IPC_SHM_HDR)
        vcu__die("bad shared area");
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        vcu__die("cannot map the shared area");
    close(fd);
    shm = p;
    rq = shm->req_size;
    rs = shm->resp_size;
    if (shm->magic != VCU_IPC_SHM_MAGIC || rq < VCU_IPC_REQ_RING_MIN ||
        rq > VCU_IPC_REQ_RING_MAX || (rq & (rq - 1)) != 0 || rs != VCU_IPC_RESP_RING ||
        (uint64_t)st.st_size < (uint64_t)VCU_IPC_SHM_HDR + rq + rs)
        vcu__die("bad shared area");
    vcu__ring_init(&vcu__w.req, &shm->req, (unsigned char *)p + VCU_IPC_SHM_HDR, rq, wake_req);
    vcu__ring_init(&vcu__w.resp, &shm->resp, (unsigned char *)p + VCU_IPC_SHM_HDR + rq, rs,
                   wake_resp);
    vcu__w.rings = true;
}

/* ---- main -------------------------------------------------------------- */

static void vcu__usage(void)
{
    fprintf(stderr, "usage: vcu-worker --fd N [--shm FD --wake-req FD --wake-resp FD] "
                    "[--spin-us N]\n"
                    "                  [--gpus LIST] [--libcuda PATH] "
                    "[--capture-printf 0|1] [--probe]\n"
                    "Started by QEMU's virtio-cuda-pci device, one per guest session.\n");
    exit(2);
}

int main(int argc, char **argv)
{
    vcu_backend_config_t cfg;
    struct vcu_ipc_hello hello;
    unsigned char *buf;
    const char *cerr;
    bool probe = false;
    int i, shm_fd = -1, wake_req = -1, wake_resp = -1;

    memset(&cfg, 0, sizeof(cfg));
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--probe") == 0) {
            probe = true;
            continue;
        }
        if (v == NULL)
            vcu__usage();
        if (strcmp(a, "--fd") == 0 || strcmp(a, "--shm") == 0 || strcmp(a, "--wake-req") == 0 ||
            strcmp(a, "--wake-resp") == 0 || strcmp(a, "--spin-us") == 0) {
            char *end;
            long n = strtol(v, &end, 10);

            if (*end != '\0' || n < 0 || n > INT_MAX)
                vcu__usage();
            if (strcmp(a, "--fd") == 0)
                vcu__w.fd = (int)n;
            else if (strcmp(a, "--shm") == 0)
                shm_fd = (int)n;
            else if (strcmp(a, "--wake-req") == 0)
                wake_req = (int)n;
            else if (strcmp(a, "--wake-resp") == 0)
                wake_resp = (int)n;
            else
                vcu__w.spin_ns = (uint64_t)n * 1000u;
        } else if (strcmp(a, "--gpus") == 0) {
            cfg.gpus = v;
        } else if (strcmp(a, "--libcuda") == 0) {
            cfg.libcuda = v;
        } else if (strcmp(a, "--capture-printf") == 0) {
            cfg.capture_printf = strcmp(v, "0") != 0;
        } else {
            vcu__usage();
        }
        i++;
    }
    if (vcu__w.fd < 0 || (!probe && (shm_fd < 0 || wake_req < 0 || wake_resp < 0)))
        vcu__usage();

    /* Dies with QEMU even when the socket would not tell (a stopped
     * parent), and never outlives it. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 0;
    prctl(PR_SET_NAME, "vcu-worker");
    signal(SIGPIPE, SIG_IGN);

    cfg.max_sessions = 1;
    cfg.register_ram = 1;
    cfg.worker = 1;
    if (vcu_backend_new(&cfg, &vcu__w.be) != 0)
        vcu__die("cannot create the backend");
    memset(&hello, 0, sizeof(hello));
    hello.version = VCU_IPC_VERSION;
    hello.pid = (uint32_t)getpid();
    cerr = vcu_backend_cuda_error(vcu__w.be);
    if (cerr != NULL)
        snprintf(hello.cuda_error, sizeof(hello.cuda_error), "%s", cerr);
    vcu__send_frame(VCU_IPC_HELLO, 0, &hello, sizeof(hello));
    if (probe)
        _exit(0);
    vcu__map_shm(shm_fd, wake_req, wake_resp);

    /* Ring frames are copied out here; a request on the ring is at most
     * a quarter of it (larger ones come on the socket). */
    buf = malloc(vcu__w.req.size);
    if (buf == NULL)
        vcu__die("out of memory");
    for (;;) {
        struct vcu_ipc_hdr h;
        int rc = vcu__ring_get(&vcu__w.req, &h, buf, vcu__w.req.size, VCU_IPC_MAX_BODY);

        if (rc < 0)
            vcu__die("request ring broken");
        if (rc > 0) {
            if (h.type == VCU_IPC_REQ)
                vcu__handle_req(h.tag, buf, h.len);
            else if (h.type == VCU_IPC_SOCK && h.len == 0)
                vcu__sock_pump(true);
            else
                vcu__die("unknown message");
            continue;
        }
        /* Idle: spin, then sleep until the ring or the socket (regions
         * ahead of their request, or the end) has something. */
        if (vcu__ring_wait(&vcu__w.req, vcu__w.fd, vcu__w.spin_ns, -1) != 0)
            vcu__sock_fill(false);
    }
}
