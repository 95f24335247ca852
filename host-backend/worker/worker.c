/*
 * vcu-worker: one guest session's host process.
 *
 *   vcu-worker --fd N [--shm FD --wake-req FD --wake-resp FD] [--spin-us N]
 *              [--account FD --account-slot N --policy FD]
 *              [--gpus LIST] [--libcuda PATH] [--capture-printf 0|1]
 *              [--module-cache DIR --module-cache-size BYTES]
 *              [--share FD --share-vm N --share-party ID]
 *              [--sms N --mps-pipe DIR] [--seccomp on|log|off] [--probe]
 *              [--ctx-bytes N]
 *
 * Started by the host daemon (vcu-daemon, host-backend/daemon/) in a jail
 * of its own (daemon/jail.c: its own namespaces and root, these
 * descriptors and no other, no_new_privs, no core dumps), one per guest
 * session, with the session's channel to QEMU's device proxy
 * (qemu-device/proxy_session.c), which QEMU made and handed the daemon.  First
 * thing, before it loads the driver or reads anything a guest sent, the
 * worker installs its seccomp filter (seccomp.c; --seccomp off only for
 * diagnosis).
 *
 * --account: the VM's GPU memory account (vcu_account.h) and this
 * session's slot in it; --policy: the VM's policy page (vcu_link.h),
 * read-only, whose quota is the one enforced (an operator may change it
 * while the VM runs).
 *
 * --share: the host's compute-share group (vcu_sched.h), the VM's slot in
 * it (claimed by the daemon) and this worker's id there: GPU work is
 * issued only while the VM holds the group's grant.
 *
 * --sms: packed mode (docs/design.md "Packed mode"): the session's context
 * runs on N SMs, as a client of the MPS control daemon whose pipes are in
 * DIR.  Without it the worker is never an MPS client.
 *
 * --module-cache: the host's module cache (vcu_modcache.h), shared with
 * every other worker naming it, and its bound.
 *
 * --ctx-bytes: the GPU memory each of the session's CUDA contexts is
 * charged to the account (the daemon's --ctx-bytes; without it
 * VCU_BACKEND_CTX_BYTES).
 *
 * --probe: load the driver, resolve the GPU list, say so (VCU_IPC_HELLO)
 * and exit: the daemon checks a VM's configuration this way when its
 * device connects.
 *
 * Runs the backend (vcu_backend.h) in this process, for this one session:
 * the session's CUDA contexts, memory, modules and faults are this
 * process's alone.  Exits when the socket closes (QEMU closed the
 * session, reset the device or died) or when the daemon dies.
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
 * ring by VCU_IPC_SOCK), and the end of the session.  Without --shm
 * (--probe) only the hello is sent.
 *
 * Threads
 * -------
 * The main thread reads the ring and runs the session's requests itself:
 * the backend's session is driven (vcu_backend_drive()), and the
 * backend's pump is vcu__pump(), which takes in what the ring holds and,
 * idle, spins --spin-us on it, then sleeps in ppoll() on the ring's
 * doorbell and the socket.  So a request goes from the ring to the GPU
 * and its reply back to the reply ring with no hand-over between threads.
 *
 * The ring (and the socket's bytes) belong to whichever thread holds
 * vcu__w.rlock: the main thread while it pumps.  A request the main
 * thread runs might block (a blocking synchronize, which device printf
 * needs) behind a host callback that waits for a CU_CALLBACK_DONE still
 * in the ring: so when the main thread has been away from the ring for
 * VCU__W_WATCH_NS, the watch thread takes the ring over and submits what
 * arrives (CALLBACK_DONE runs inline; the rest is queued for the main
 * thread) until the main thread comes back for it.
 *
 * A staged device-to-host copy is scattered to the guest's pages, and
 * replied to, on a short-lived thread of its own (vcu__job_done()).
 *
 * Replies are written by whichever thread completes a request, under
 * vcu__w.wlock.  vcu__w.alock protects the registration list.
 * Lock order: rlock -> alock, rlock -> wlock.
 *
 * Parts: this file (requests, the start, the main loop), worker_reg.c
 * (registrations, aliases), worker_link.c (the socket, the rings, taking
 * requests in, the watch thread); their shared state: vcu_worker_int.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* ppoll */
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
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
#include "vcu_seccomp.h"
#include "vcu_stage.h"
#include "vcu_worker.h"
#include "vcu_worker_int.h"

struct vcu__w_s vcu__w = {
    .fd = -1,
    .wlock = PTHREAD_MUTEX_INITIALIZER,
    .alock = PTHREAD_MUTEX_INITIALIZER,
    .rlock = PTHREAD_MUTEX_INITIALIZER,
    .jlock = PTHREAD_MUTEX_INITIALIZER,
    .watch_mu = PTHREAD_MUTEX_INITIALIZER,
    .smu = PTHREAD_MUTEX_INITIALIZER,
    .scv = PTHREAD_COND_INITIALIZER,
    .watch_cv = PTHREAD_COND_INITIALIZER,
};

void vcu__die(const char *what)
{
    fprintf(stderr, "vcu-worker[%d]: %s\n", (int)getpid(), what);
    VCU__W_EXIT(1);
}

static void vcu__write_all(const void *p, size_t n)
{
    const unsigned char *b = p;

    while (n > 0) {
        ssize_t w = send(vcu__w.fd, b, n, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            VCU__W_EXIT(0);         /* QEMU is gone: so is the session */
        b += w;
        n -= (size_t)w;
    }
}

/* Replies go on the reply ring (waiting while it is full: the proxy's
 * reader empties it), the hello on the socket. */
void vcu__send_frame(uint32_t type, uint64_t tag, const void *body, size_t len)
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

const vcu__region_t *vcu__region(uint32_t id)
{
    unsigned int i;

    for (i = 0; i < vcu__w.nregions; i++)
        if (vcu__w.regions[i].id == id)
            return &vcu__w.regions[i];
    return NULL;
}


/* ---- requests ---------------------------------------------------------- */

/* A job with room for req_len request bytes and resp_cap reply bytes
 * (zeroed), the rest of it cleared; NULL without memory. */
static vcu__job_t *vcu__job_get(size_t req_len, size_t resp_cap)
{
    vcu__job_t *j;

    pthread_mutex_lock(&vcu__w.jlock);
    j = vcu__w.jobs;
    if (j != NULL) {
        vcu__w.jobs = j->next;
        vcu__w.njobs--;
    }
    pthread_mutex_unlock(&vcu__w.jlock);
    if (j == NULL && (j = malloc(sizeof(*j))) == NULL)
        return NULL;
    memset(j, 0, offsetof(vcu__job_t, req_in));
    j->req = req_len <= sizeof(j->req_in) ? j->req_in : malloc(req_len);
    j->resp = resp_cap <= sizeof(j->resp_in) ? j->resp_in : calloc(1, resp_cap);
    if (j->req == NULL || j->resp == NULL) {
        if (j->req != j->req_in)
            free(j->req);
        if (j->resp != j->resp_in)
            free(j->resp);
        free(j);
        return NULL;
    }
    if (j->resp == j->resp_in)
        memset(j->resp_in, 0, sizeof(j->resp_in));
    return j;
}

/* Room for n iovecs in the job: its own, or allocated. */
static struct iovec *vcu__job_iov(vcu__job_t *j, size_t n)
{
    if (n <= VCU__JOB_IOV_INLINE)
        j->iov = j->iov_in;
    else
        j->iov = calloc(n, sizeof(*j->iov));
    return j->iov;
}

static void vcu__job_free(vcu__job_t *j)
{
    free(j->released);
    if (j->iov != j->iov_in)
        free(j->iov);
    if (j->req != j->req_in)
        free(j->req);
    if (j->resp != j->resp_in)
        free(j->resp);
    pthread_mutex_lock(&vcu__w.jlock);
    if (vcu__w.njobs < VCU__JOB_CACHE) {
        j->next = vcu__w.jobs;
        vcu__w.jobs = j;
        vcu__w.njobs++;
        j = NULL;
    }
    pthread_mutex_unlock(&vcu__w.jlock);
    free(j);
}

/* Whether a scatter of a request taken in before seq still runs (smu). */
static bool vcu__scatter_before_locked(uint64_t seq)
{
    for (unsigned int i = 0; i < vcu__w.nscat; i++)
        if (vcu__w.scat[i] < seq)
            return true;
    return false;
}

static void vcu__job_finish(vcu__job_t *j)
{
    vcu_request_t *breq = &j->breq;
    size_t len = breq->resp_len <= breq->resp_cap ? breq->resp_len : breq->resp_cap;

    /* Before the reply: the guest reads its pages once it has it. */
    vcu_stage_out(&j->stage, j->resp, len);
    /* Most replies find no scatter listed: no lock for them (a scatter is
     * listed by the session's thread before any later request runs). */
    if (!j->scattering && __atomic_load_n(&vcu__w.nscat, __ATOMIC_ACQUIRE) == 0)
        goto send;
    pthread_mutex_lock(&vcu__w.smu);
    if (j->scattering) {
        for (unsigned int i = 0; i < vcu__w.nscat; i++) {
            if (vcu__w.scat[i] == j->seq) {
                vcu__w.scat[i] = vcu__w.scat[vcu__w.nscat - 1];
                __atomic_store_n(&vcu__w.nscat, vcu__w.nscat - 1, __ATOMIC_RELEASE);
                break;
            }
        }
        j->scattering = false;
        pthread_cond_broadcast(&vcu__w.scv);
    }
    /* Nor before earlier requests' scatters (milliseconds at most). */
    while (vcu__scatter_before_locked(j->seq))
        pthread_cond_wait(&vcu__w.scv, &vcu__w.smu);
    pthread_mutex_unlock(&vcu__w.smu);
send:
    /* Before the reply: the guest frees the pages once it has it. */
    if (j->fence && j->nreleased > 0)
        vcu__reg_release(j->released, j->nreleased);
    vcu__send_frame(VCU_IPC_RESP, j->tag, j->resp, len);
    vcu__job_free(j);
}

static void *vcu__job_finish_thread(void *arg)
{
    vcu__job_finish(arg);
    atomic_fetch_sub_explicit(&vcu__w.finishers, 1, memory_order_relaxed);
    return NULL;
}

/*
 * The backend is done with a request.  A staged device-to-host copy is
 * scattered to the guest's pages before its reply, which takes
 * milliseconds: that happens on a thread of its own (VCU__W_FINISHERS at
 * once), so the session's thread goes on with the next request (the next
 * chunk's DMA) meanwhile.
 */
static void vcu__job_done(vcu_request_t *breq)
{
    vcu__job_t *j = breq->opaque;
    pthread_attr_t a;
    pthread_t t;
    bool ok = false;

    if (j->stage.buf != NULL && j->stage.out &&
        atomic_fetch_add_explicit(&vcu__w.finishers, 1, memory_order_relaxed) < VCU__W_FINISHERS) {
        /* Listed before it runs: a later request's reply waits for it. */
        pthread_mutex_lock(&vcu__w.smu);
        if (vcu__w.nscat < VCU__W_FINISHERS) {
            vcu__w.scat[vcu__w.nscat] = j->seq;
            __atomic_store_n(&vcu__w.nscat, vcu__w.nscat + 1, __ATOMIC_RELEASE);
            j->scattering = true;
        }
        pthread_mutex_unlock(&vcu__w.smu);
        if (pthread_attr_init(&a) == 0) {
            ok = pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
                 pthread_create(&t, &a, vcu__job_finish_thread, j) == 0;
            pthread_attr_destroy(&a);
        }
        if (ok)
            return;
        atomic_fetch_sub_explicit(&vcu__w.finishers, 1, memory_order_relaxed);
    } else if (j->stage.buf != NULL && j->stage.out) {
        atomic_fetch_sub_explicit(&vcu__w.finishers, 1, memory_order_relaxed);
    }
    vcu__job_finish(j);
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

/*
 * The frame of one VCU_IPC_REQ, checked: its fixed part (*ir), the
 * request's header (*h) and its ranges (*rg), each range's region mapped
 * (a region's fd comes on the socket, sent before the request that names
 * it: this waits for it there).  False when the frame is malformed,
 * replied to already.
 */
static bool vcu__req_frame(uint64_t tag, const unsigned char *body, size_t blen,
                           struct vcu_ipc_req *ir, struct vcu_req_hdr *h,
                           const struct vcu_ipc_range **rg)
{
    size_t pad;
    uint64_t k;

    if (blen < sizeof(*ir)) {
        vcu__reply_status(tag, NULL, VCU_S_EINVAL);
        return false;
    }
    memcpy(ir, body, sizeof(*ir));
    pad = (8 - ir->req_len % 8) % 8;
    if (ir->req_len < sizeof(*h) || ir->nranges > VCU_MAX_RANGES ||
        blen != sizeof(*ir) + ir->req_len + pad + (uint64_t)ir->nranges * sizeof(**rg) ||
        ir->resp_cap < sizeof(struct vcu_resp_hdr) ||
        ir->resp_cap > sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD) {
        vcu__reply_status(tag, NULL, VCU_S_EINVAL);
        return false;
    }
    memcpy(h, body + sizeof(*ir), sizeof(*h));
    *rg = (const struct vcu_ipc_range *)(body + sizeof(*ir) + ir->req_len + pad);
    for (k = 0; k < ir->nranges; k++)
        while (vcu__region((*rg)[k].region) == NULL)
            vcu__sock_pump(false);
    return true;
}

/*
 * The n ranges of one segment: each inside its region (the proxy checked
 * nothing of this: QEMU did, but a link that disagrees with itself is
 * refused here too), adding up to len.  Returns a wire status.
 */
static uint32_t vcu__seg_ranges(const struct vcu_ipc_range *rg, uint32_t n, uint64_t len)
{
    uint64_t sum = 0;
    uint32_t i;

    for (i = 0; i < n; i++) {
        const vcu__region_t *r = vcu__region(rg[i].region);

        if (r == NULL || rg[i].len == 0 || rg[i].off > r->size ||
            rg[i].len > r->size - rg[i].off)
            return VCU_S_EFAULT;
        /* Kept within the protocol's bound: no overflow. */
        if (rg[i].len > VCU_MAX_XFER - sum)
            return VCU_S_EINVAL;
        sum += rg[i].len;
    }
    /* The backend takes a segment's length for its iovecs' sum
     * (vcu_backend.h) and bounds copies by it: ranges that add up to
     * less would let a copy run past them. */
    return sum == len ? VCU_S_OK : VCU_S_EINVAL;
}

/*
 * The request's segments, from its copy in the job: into j->segs, each
 * with its count of ranges and, in first[], the index of its first range
 * in rg; every range used exactly once.  *seg_off: where the segments
 * start in the request.  Returns a wire status.
 */
static uint32_t vcu__req_segs(vcu__job_t *j, const struct vcu_ipc_req *ir,
                              const struct vcu_req_hdr *h, const struct vcu_ipc_range *rg,
                              uint64_t *first, size_t *seg_off)
{
    uint64_t k = 0;
    unsigned int i;
    uint32_t st;

    if (h->nsegs > VCU_MAX_SEGS || h->payload_len > VCU_MAX_PAYLOAD)
        return VCU_S_EINVAL;
    *seg_off = sizeof(*h) + ((h->payload_len + 7u) & ~7u);
    if (ir->req_len < *seg_off + (size_t)h->nsegs * sizeof(struct vcu_seg))
        return VCU_S_EINVAL;
    for (i = 0; i < h->nsegs; i++) {
        struct vcu_seg ws;
        vcu_segment_t *sg = &j->segs[i];

        memcpy(&ws, j->req + *seg_off + i * sizeof(ws), sizeof(ws));
        /* A fence's segments name memory it releases: read by no one. */
        if (ws.nranges > ir->nranges - k ||
            (h->opcode == VCU_OP_SESSION_FENCE && ws.flags != VCU_SEG_TO_DEVICE))
            return VCU_S_EINVAL;
        first[i] = k;
        sg->iovcnt = ws.nranges;
        sg->len = ws.len;
        sg->flags = ws.flags;
        st = vcu__seg_ranges(&rg[k], ws.nranges, ws.len);
        if (st != VCU_S_OK)
            return st;
        k += ws.nranges;
    }
    return k == ir->nranges ? VCU_S_OK : VCU_S_EINVAL;
}

/*
 * Stable segments are registered (the gaps not yet), then every segment's
 * ranges become iovecs of the mapped RAM, cut at the edges of
 * registrations, in the job's iovecs.  Returns a wire status.
 */
static uint32_t vcu__req_iovs(vcu__job_t *j, const struct vcu_req_hdr *h,
                              const struct vcu_ipc_range *rg, const uint64_t *first)
{
    size_t niov;
    unsigned int i;
    uint64_t k;

    pthread_mutex_lock(&vcu__w.alock);
    for (i = 0, niov = 0; i < h->nsegs; i++) {
        bool stable = (j->segs[i].flags & VCU_SEG_F_STABLE) && h->opcode != VCU_OP_SESSION_FENCE;

        for (k = first[i]; k < first[i] + j->segs[i].iovcnt; k++) {
            const vcu__region_t *r = vcu__region(rg[k].region);

            if (stable)
                vcu__reg_cover_locked(r, rg[k].off, rg[k].len);
            niov += vcu__reg_split_locked(r, rg[k].off, rg[k].len, NULL);
        }
    }
    if (vcu__job_iov(j, niov) == NULL) {
        pthread_mutex_unlock(&vcu__w.alock);
        return VCU_S_ENOMEM;
    }
    for (i = 0, niov = 0; i < h->nsegs; i++) {
        size_t start = niov;

        for (k = first[i]; k < first[i] + j->segs[i].iovcnt; k++)
            niov += vcu__reg_split_locked(vcu__region(rg[k].region), rg[k].off, rg[k].len,
                                          &j->iov[niov]);
        j->segs[i].iov = &j->iov[start];
        j->segs[i].iovcnt = (unsigned int)(niov - start);
    }
    pthread_mutex_unlock(&vcu__w.alock);
    return VCU_S_OK;
}

/* The address a CU_HOST_DEVICE_POINTER_AT request asks for (its value),
 * or 0 when the request is too short to hold one (the backend refuses
 * it then). */
static uint64_t vcu__req_want(const unsigned char *req, uint32_t req_len)
{
    struct vcu_cu_u64_req rq;

    if (req_len < sizeof(struct vcu_req_hdr) + sizeof(rq))
        return 0;
    memcpy(&rq, req + sizeof(struct vcu_req_hdr), sizeof(rq));
    return rq.value;
}

/* CU_HOST_DEVICE_POINTER(_AT): one device pointer for the whole segment,
 * whose iovecs become one (the backend takes only one).  want: the
 * address _AT asks for the segment's first byte, else 0. */
static void vcu__req_host_ptr(vcu__job_t *j, const struct vcu_ipc_req *ir,
                              const struct vcu_ipc_range *rg, uint64_t want)
{
    if ((j->segs[0].flags & VCU_SEG_F_STABLE) && (ir->nranges > 1 || want != 0)) {
        /* A pinned allocation of several chunks, or one the guest wants
         * at its own address: an alias of them. */
        unsigned char *p = vcu__alias_get(rg, ir->nranges, want);

        if (p != NULL) {
            j->iov[0].iov_base = p;
            j->iov[0].iov_len = j->segs[0].len;
            j->segs[0].iovcnt = 1;
            return;
        }
    }
    if (ir->nranges == 1) {
        /* One range, registered in pieces that meet: the pointer of its
         * first byte reaches all of it (registered memory is mapped at
         * its host address). */
        j->iov[0].iov_base = vcu__region(rg[0].region)->base + rg[0].off;
        j->iov[0].iov_len = rg[0].len;
        j->segs[0].iovcnt = 1;
    }
}

/*
 * SESSION_FENCE: its ranges are what it releases, kept for its reply;
 * the backend's fence takes no segment, so they leave the request, whose
 * new length is *req_len.  Returns a wire status.
 */
static uint32_t vcu__req_fence(vcu__job_t *j, struct vcu_req_hdr *h, uint32_t nranges,
                               const struct vcu_ipc_range *rg, size_t seg_off, uint32_t *req_len)
{
    j->fence = true;
    if (nranges > 0) {
        j->released = malloc(nranges * sizeof(*j->released));
        if (j->released == NULL)
            return VCU_S_ENOMEM;
        memcpy(j->released, rg, nranges * sizeof(*rg));
        j->nreleased = nranges;
    }
    h->nsegs = 0;
    memcpy(j->req, h, sizeof(*h));
    *req_len = (uint32_t)seg_off;
    return VCU_S_OK;
}

/* The job's request goes to the backend, which calls vcu__job_done(). */
static void vcu__req_submit(vcu__job_t *j, const struct vcu_req_hdr *h, uint32_t req_len,
                            uint32_t resp_cap)
{
    j->breq.req = j->req;
    j->breq.req_len = req_len;
    j->breq.segs = j->fence ? NULL : j->segs;
    j->breq.nsegs = j->fence ? 0 : h->nsegs;
    j->breq.resp = j->resp;
    j->breq.resp_cap = resp_cap;
    j->breq.done = vcu__job_done;
    if (!j->fence)
        vcu_stage_in(vcu__w.be, h->opcode, h->flags, j->segs, h->nsegs, &j->stage);
    j->breq.opaque = j;
    vcu_backend_submit(vcu__w.be, &j->breq);
}

/*
 * One VCU_IPC_REQ: the ranges become iovecs of the mapped regions; a
 * fence's segment (the memory it releases) is taken off the request
 * before the backend sees it.
 */
void vcu__handle_req(uint64_t tag, const unsigned char *body, size_t blen)
{
    struct vcu_ipc_req ir;
    struct vcu_req_hdr h;
    const struct vcu_ipc_range *rg;
    vcu__job_t *j;
    size_t seg_off;
    uint64_t first[VCU_MAX_SEGS];
    uint32_t status;

    if (!vcu__req_frame(tag, body, blen, &ir, &h, &rg))
        return;
    j = vcu__job_get(ir.req_len, ir.resp_cap);
    if (j == NULL) {
        vcu__reply_status(tag, &h, VCU_S_ENOMEM);
        return;
    }
    j->tag = tag;
    j->seq = atomic_fetch_add_explicit(&vcu__w.next_seq, 1, memory_order_relaxed);
    memcpy(j->req, body + sizeof(ir), ir.req_len);

    status = vcu__req_segs(j, &ir, &h, rg, first, &seg_off);
    if (status == VCU_S_OK)
        status = vcu__req_iovs(j, &h, rg, first);
    if (status != VCU_S_OK)
        goto fail;
    if (h.opcode == VCU_OP_CU_HOST_DEVICE_POINTER && h.nsegs == 1)
        vcu__req_host_ptr(j, &ir, rg, 0);
    if (h.opcode == VCU_OP_CU_HOST_DEVICE_POINTER_AT && h.nsegs == 1)
        vcu__req_host_ptr(j, &ir, rg, vcu__req_want(j->req, ir.req_len));
    if (h.opcode == VCU_OP_SESSION_FENCE) {
        status = vcu__req_fence(j, &h, ir.nranges, rg, seg_off, &ir.req_len);
        if (status != VCU_S_OK)
            goto fail;
    }
    vcu__req_submit(j, &h, ir.req_len, ir.resp_cap);
    return;

fail:
    vcu__reply_status(tag, &h, status);
    vcu__job_free(j);
}

/* A save or a load of the session's state (VCU_IPC_STATE), in the
 * backend's order; its reply goes back under the frame's tag, and the
 * descriptor is closed, once it is done. */
typedef struct vcu__state_job_s {
    vcu_request_t breq;
    struct vcu_req_hdr h;
    unsigned char resp[sizeof(struct vcu_resp_hdr) + 256];
    uint64_t tag;
    int fd;
} vcu__state_job_t;

static void vcu__state_done(vcu_request_t *breq)
{
    vcu__state_job_t *sj = breq->opaque;
    size_t len = breq->resp_len <= sizeof(sj->resp) ? breq->resp_len : sizeof(sj->resp);

    close(sj->fd);
    vcu__send_frame(VCU_IPC_RESP, sj->tag, sj->resp, len);
    free(sj);
}

void vcu__handle_state(uint64_t tag, const unsigned char *body, size_t blen)
{
    struct vcu_ipc_state st;
    vcu__state_job_t *sj;
    int fd;

    if (blen != sizeof(st) || vcu__w.nfdq == 0)
        vcu__die("malformed state message");
    memcpy(&st, body, sizeof(st));
    fd = vcu__w.fdq[0];
    memmove(vcu__w.fdq, vcu__w.fdq + 1, --vcu__w.nfdq * sizeof(int));
    if (!VCU_BACKEND_OP_IS_STATE(st.op) || st.reserved != 0)
        vcu__die("malformed state message");
    sj = calloc(1, sizeof(*sj));
    if (sj == NULL) {
        close(fd);
        vcu__reply_status(tag, NULL, VCU_S_ENOMEM);
        return;
    }
    sj->h.opcode = st.op;
    sj->h.session = st.session;
    sj->tag = tag;
    sj->fd = fd;
    sj->breq.req = &sj->h;
    sj->breq.req_len = sizeof(sj->h);
    sj->breq.resp = sj->resp;
    sj->breq.resp_cap = sizeof(sj->resp);
    sj->breq.done = vcu__state_done;
    sj->breq.opaque = sj;
    vcu_backend_submit_state(vcu__w.be, &sj->breq, fd);
}

void vcu__handle_region(const unsigned char *body, size_t blen)
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
    p = vcu__guest_mmap((size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        vcu__die("cannot map a guest RAM region");
    /* The VM's RAM never goes into a core dump of ours (there is none:
     * RLIMIT_CORE is 0 and the process is not dumpable; this holds even
     * for a host that collects dumps another way). */
    if (madvise(p, (size_t)st.st_size, MADV_DONTDUMP) != 0)
        vcu__die("madvise(MADV_DONTDUMP) on guest RAM");
    r = &vcu__w.regions[vcu__w.nregions++];
    r->id = rg.id;
    r->fd = fd;
    r->base = p;
    r->size = (uint64_t)st.st_size;
}


/* ---- main -------------------------------------------------------------- */

/* The backend, for the one session this process runs, then the hello
 * that tells the daemon whether it has CUDA. */
static void vcu__start_backend(vcu_backend_config_t *cfg, const vcu__opts_t *o)
{
    struct vcu_ipc_hello hello;
    const char *cerr;

    /* Before the driver loads: a packed worker is a client of the MPS
     * control daemon behind this pipe directory; an isolated one never is,
     * even on a host whose default daemon runs (no directory can exist
     * under /dev/null). */
    if (cfg->sms != 0 && (o->mps_pipe == NULL || o->mps_pipe[0] != '/'))
        vcu__usage();
    if (setenv("CUDA_MPS_PIPE_DIRECTORY", cfg->sms != 0 ? o->mps_pipe : VCU__NO_MPS_PIPE, 1) != 0)
        vcu__die("setenv");
    cfg->max_sessions = 1;
    cfg->register_ram = 1;
    cfg->worker = 1;
    cfg->probe = o->probe;
    cfg->pump = vcu__pump;
    vcu__map_account(cfg, o->acct_fd, o->aslot, o->policy_fd);
    cfg->keep_fd = o->keep_fd > 0 ? o->keep_fd : 0;
    if (!o->probe)
        vcu__map_share(cfg, o->share_fd, o->share_vm, o->share_party);
    if (vcu_backend_new(cfg, &vcu__w.be) != 0)
        vcu__die("cannot create the backend");
    memset(&hello, 0, sizeof(hello));
    hello.version = VCU_IPC_VERSION;
    hello.pid = (uint32_t)getpid();
    cerr = vcu_backend_cuda_error(vcu__w.be);
    if (cerr != NULL)
        snprintf(hello.cuda_error, sizeof(hello.cuda_error), "%s", cerr);
    vcu__send_frame(VCU_IPC_HELLO, 0, &hello, sizeof(hello));
}

int main(int argc, char **argv)
{
    vcu_backend_config_t cfg;
    vcu__opts_t o = {
        .fd = -1, .shm_fd = -1, .wake_req = -1, .wake_resp = -1, .acct_fd = -1, .policy_fd = -1,
        .share_fd = -1, .keep_fd = -1, .seccomp = VCU_SECCOMP_ON,
    };
    pthread_t watch;

    memset(&cfg, 0, sizeof(cfg));
    vcu__parse_args(argc, argv, &cfg, &o);
    vcu__w.fd = o.fd;
    vcu__w.spin_ns = o.spin_ns;
    if (!vcu__lock_down(o.seccomp, o.jail_parent))
        return 0;
    vcu__start_backend(&cfg, &o);
    if (o.probe)
        _exit(0);
    vcu__map_shm(o.shm_fd, o.wake_req, o.wake_resp);
    /* A request on the ring is at most a quarter of it (larger ones come
     * on the socket). */
    vcu__w.rbuf = malloc(vcu__w.req.size);
    if (vcu__w.rbuf == NULL)
        vcu__die("out of memory");

    if (pthread_create(&watch, NULL, vcu__watch, NULL) != 0)
        vcu__die("cannot start the watch thread");
    /* Until SESSION_OPEN: then the session runs here until it ends. */
    for (;;) {
        vcu__pump(NULL, -1);
        (void)vcu_backend_drive(vcu__w.be);
    }
}
