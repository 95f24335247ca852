/*
 * virtio-cuda: paravirtualized GPU compute device
 *
 * The guest sends requests (include/vcu_proto.h) on one virtqueue: the
 * device-readable descriptors carry the request stream (header, payload,
 * segment table, range list), the device-writable ones the reply buffer.
 * This file checks the stream (vcu_reqcheck.c), maps every guest-physical
 * range of the data segments and hands the request to the session proxy
 * (proxy*.c), which sends it to the session's worker process: QEMU never
 * forks, execs or loads the CUDA driver, so it keeps the seccomp sandbox
 * libvirt gives it (spawn=deny).  The workers are the host daemon's
 * (vcu-daemon): the device reaches it through its chardev (a unix socket,
 * vcu_link.h) and hands it each new session's channel; the daemon starts
 * the session's worker in a jail and keeps the VM's slice.  The proxy's
 * done callback queues the request for a bottom half, which writes the
 * reply, unmaps and pushes.
 *
 * Everything in a request comes from the guest and is checked here before
 * use: counts, lengths and addresses.  Malformed requests get a VCU_S_*
 * status, never an abort.
 *
 * Guest RAM must be shared memory (memory-backend-memfd,share=on): a
 * worker reaches a range through the RAM block's file descriptor and the
 * offset this file gives it with every range, never through an address
 * of QEMU's.  Segments marked VCU_SEG_F_STABLE may still be read or
 * written by the GPU after the reply (until the guest's SESSION_FENCE):
 * the worker maps the RAM itself, so unmapping here at the reply is
 * harmless.
 *
 * The daemon's link: at realize the device waits for its chardev to connect
 * and for the daemon's WELCOME (the daemon refuses a VM with a reason,
 * which fails realize).  Later frames come through the chardev's read
 * handler on the main loop; what the proxy sends (from any thread) is
 * queued and written by a bottom half.  If the daemon goes away, guest
 * processes get errors as their workers end; with reconnect-ms on the
 * chardev, the device says HELLO again when the daemon is back and new
 * processes work.
 *
 * Lock order: BQL -> complete_lock; link_lock is taken alone.  The
 * backend's done callback takes complete_lock only (it may run on any
 * thread, with or without the BQL); the proxy's link sends take link_lock
 * only (any thread).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/iov.h"
#include "qemu/log.h"
#include "qemu/error-report.h"
#include "qemu/units.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qemu/rcu.h"
#include "qapi/error.h"
#include "qapi/visitor.h"
#include "qemu/host-utils.h"
#include "hw/qdev-properties.h"
#include "hw/virtio/virtio.h"
#include "hw/virtio/virtio-cuda.h"
#include "migration/vmstate.h"
#include "migration/qemu-file-types.h"
#include "system/dma.h"
#include "exec/memory.h"
#include "exec/ramblock.h"
#include "hw/boards.h"
#include "standard-headers/linux/virtio_ids.h"
#include "standard-headers/linux/virtio_config.h"
#include "trace.h"

#include "chardev/char-fe.h"
#include "system/runstate.h"
#include "system/system.h"

#include "vcu_link.h"
#include "vcu_proxy.h"
#include "vcu_reqcheck.h"
#include "virtio-cuda-int.h"

QEMU_BUILD_BUG_ON(VCU_VIRTIO_ID != VIRTIO_ID_CUDA);
QEMU_BUILD_BUG_ON(sizeof(struct vcu_req_hdr) != 32);
QEMU_BUILD_BUG_ON(sizeof(struct vcu_seg) != 16);
QEMU_BUILD_BUG_ON(sizeof(struct vcu_range) != 16);
QEMU_BUILD_BUG_ON(sizeof(struct vcu_resp_hdr) != 24);

/* The largest request stream the protocol allows. */
#define VIRTIO_CUDA_MAX_REQ VCU_REQ_MAX_STREAM
/* The largest reply: header and payload. */
#define VIRTIO_CUDA_MAX_RESP (sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD)
/*
 * Mapped ranges of all requests in flight.  Above this the device stops
 * popping the queue until completions bring it down, so a guest cannot make
 * QEMU hold more than about 2 * VCU_MAX_RANGES iovecs.  One request of the
 * largest size always fits.
 */
#define VIRTIO_CUDA_MAX_INFLIGHT_RANGES (2ull * VCU_MAX_RANGES)


/* Unmaps every range mapped so far. */
static void virtio_cuda_unmap(VirtIOCudaReq *r)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(r->dev);
    uint64_t k = 0;
    unsigned int i;

    for (i = 0; i < r->nsegs && k < r->nmapped; i++) {
        const vcu_segment_t *seg = &r->segs[i];
        DMADirection dir = VCU_SEG_DIR(seg->flags) == VCU_SEG_FROM_DEVICE ?
                           DMA_DIRECTION_FROM_DEVICE : DMA_DIRECTION_TO_DEVICE;
        unsigned int j;

        for (j = 0; j < seg->iovcnt && k < r->nmapped; j++, k++) {
            /*
             * The backend does not say how much it wrote: count the whole
             * range as written so that all of it is marked dirty.
             */
            dma_memory_unmap(vdev->dma_as, r->iov[k].iov_base,
                             r->iov[k].iov_len, dir, r->iov[k].iov_len);
        }
    }
    r->nmapped = 0;
}

static void virtio_cuda_req_free(VirtIOCudaReq *r)
{
    virtio_cuda_unmap(r);
    g_free(r->iov);
    g_free(r->ref);
    g_free(r->buf);
    g_free(r->resp);
    g_free(r->elem);
    g_free(r);
}

/* Takes the request out of the in-flight accounting. */
static void virtio_cuda_req_retire(VirtIOCuda *s, VirtIOCudaReq *r)
{
    QTAILQ_REMOVE(&s->inflight, r, inflight_next);
    s->ninflight--;
    s->inflight_ranges -= r->niov;
}

/*
 * Replies with status alone (no payload), for requests that never reach
 * the backend.  The caller has checked that the reply buffer holds a
 * struct vcu_resp_hdr.
 */
static void virtio_cuda_reply_error(VirtIOCuda *s, VirtIOCudaReq *r,
                                    uint32_t status, const char *why)
{
    VirtQueueElement *elem = r->elem;
    struct vcu_resp_hdr h = {
        .status = cpu_to_le32(status),
        .req_id = cpu_to_le64(r->req_id),
    };
    size_t n;

    qemu_log_mask(LOG_GUEST_ERROR, "virtio-cuda: request %" PRIu64
                  " rejected (%u): %s\n", r->req_id, status, why);
    trace_virtio_cuda_req_error(r->req_id, status, why);
    virtio_cuda_unmap(r);
    n = iov_from_buf(elem->in_sg, elem->in_num, 0, &h, sizeof(h));
    virtqueue_push(s->vq, elem, n);
    virtio_cuda_req_free(r);
}

/*
 * Checks one data range and maps it.  Only guest RAM the device may access
 * directly is accepted, and the whole range must map at once: MMIO, ROM
 * for writing, unassigned space or a range that crosses into another
 * memory region gives VCU_S_EFAULT.
 */
static uint32_t virtio_cuda_map_range(VirtIOCuda *s, uint64_t gpa, uint64_t len,
                                      bool is_write, struct iovec *iov,
                                      vcu_gref_t *ref)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(s);
    MemTxAttrs attrs = MEMTXATTRS_UNSPECIFIED;
    dma_addr_t maplen = len;
    MemoryRegion *mr;
    ram_addr_t off;
    bool direct;
    int fd;
    void *p;

    WITH_RCU_READ_LOCK_GUARD() {
        hwaddr xlat, plen = len;
        MemoryRegion *tmr = address_space_translate(vdev->dma_as, gpa, &xlat,
                                                    &plen, is_write, attrs);

        direct = memory_region_is_ram(tmr) &&
                 memory_access_is_direct(tmr, is_write, attrs);
    }
    if (!direct) {
        return VCU_S_EFAULT;
    }
    p = dma_memory_map(vdev->dma_as, gpa, &maplen,
                       is_write ? DMA_DIRECTION_FROM_DEVICE :
                                  DMA_DIRECTION_TO_DEVICE, attrs);
    if (!p) {
        return VCU_S_EFAULT;
    }
    if (maplen != len) {
        dma_memory_unmap(vdev->dma_as, p, maplen,
                         is_write ? DMA_DIRECTION_FROM_DEVICE :
                                    DMA_DIRECTION_TO_DEVICE, 0);
        return VCU_S_EFAULT;
    }
    /*
     * The worker maps the RAM block's file: only shared, fd-backed RAM
     * can be handed over, and the whole range must lie in that block.
     */
    mr = memory_region_from_host(p, &off);
    fd = mr ? memory_region_get_fd(mr) : -1;
    if (fd < 0 || !qemu_ram_is_shared(mr->ram_block) ||
        off + len > memory_region_size(mr)) {
        dma_memory_unmap(vdev->dma_as, p, maplen,
                         is_write ? DMA_DIRECTION_FROM_DEVICE :
                                    DMA_DIRECTION_TO_DEVICE, 0);
        return VCU_S_EFAULT;
    }
    ref->fd = fd;
    ref->reserved = 0;
    ref->off = off + mr->ram_block->fd_offset;
    iov->iov_base = p;
    iov->iov_len = len;
    return VCU_S_OK;
}

/* Used buffers for the guest: counted as notifications offered (the
 * guest may have suppressed the interrupt; its driver counts what it got,
 * /sys/class/vcuda/vcudaN/stats). */
void virtio_cuda_notify(VirtIOCuda *s)
{
    qatomic_inc(&s->stat_notifies);
    virtio_notify(VIRTIO_DEVICE(s), s->vq);
}

static void virtio_cuda_done(vcu_request_t *breq)
{
    VirtIOCudaReq *r = breq->opaque;
    VirtIOCuda *s = r->dev;

    /* Any thread: the BH does the rest under the BQL. */
    WITH_QEMU_LOCK_GUARD(&s->complete_lock) {
        QSIMPLEQ_INSERT_TAIL(&s->completed, r, complete_next);
    }
    qemu_bh_schedule(s->complete_bh);
}

/* vcu_req_ranges()' callback: maps range k of the request being built. */
typedef struct {
    VirtIOCuda *s;
    VirtIOCudaReq *r;
    bool is_write;
} VirtIOCudaMapCtx;

static uint32_t virtio_cuda_map_one(void *opaque, uint64_t k, uint64_t gpa,
                                    uint64_t len, const char **why)
{
    VirtIOCudaMapCtx *c = opaque;
    uint32_t status = virtio_cuda_map_range(c->s, gpa, len, c->is_write,
                                            &c->r->iov[k], &c->r->ref[k]);

    if (status != VCU_S_OK) {
        *why = "range is not guest RAM or does not map whole";
        return status;
    }
    c->r->nmapped++;
    return VCU_S_OK;
}

/*
 * Reads the request stream into r->buf and checks it (l): VCU_S_OK, or the
 * status to reply with and why.  r->req_id is the stream's whenever it has
 * a header, for the reply.
 */
static uint32_t virtio_cuda_read_req(VirtIOCudaReq *r, size_t out_len,
                                     vcu_req_layout_t *l, const char **why)
{
    VirtQueueElement *elem = r->elem;
    uint32_t status;

    if (out_len >= sizeof(struct vcu_req_hdr)) {
        /* For the reply, whatever else is wrong with the request. */
        uint64_t id;

        iov_to_buf(elem->out_sg, elem->out_num,
                   offsetof(struct vcu_req_hdr, req_id), &id, sizeof(id));
        r->req_id = le64_to_cpu(id);
    } else {
        *why = "request shorter than its header";
        return VCU_S_EINVAL;
    }
    if (out_len > VIRTIO_CUDA_MAX_REQ) {
        *why = "request stream longer than the protocol allows";
        return VCU_S_E2BIG;
    }
    r->buf = g_malloc(out_len);
    if (iov_to_buf(elem->out_sg, elem->out_num, 0, r->buf, out_len) != out_len) {
        *why = "short request stream";
        return VCU_S_EINVAL;
    }
    status = vcu_req_check(r->buf, out_len, l, why);
    r->req_id = l->req_id;
    return status;
}

/*
 * Checks and maps every range of the request's data segments, counting
 * them in s->inflight_ranges (given back by retire, or here when a range
 * fails): VCU_S_OK, or the status to reply with and why.
 */
static uint32_t virtio_cuda_map_req(VirtIOCuda *s, VirtIOCudaReq *r,
                                    const vcu_req_layout_t *l, const char **why)
{
    uint32_t status;
    uint64_t k = 0;
    unsigned int i;

    r->niov = l->nranges;
    r->iov = g_new0(struct iovec, l->nranges ? l->nranges : 1);
    r->ref = g_new0(vcu_gref_t, l->nranges ? l->nranges : 1);
    s->inflight_ranges += r->niov;
    for (i = 0; i < l->nsegs; i++) {
        VirtIOCudaMapCtx c = {
            .s = s, .r = r,
            .is_write = VCU_SEG_DIR(l->seg[i].flags) == VCU_SEG_FROM_DEVICE,
        };

        r->segs[i].iov = &r->iov[k];
        r->segs[i].ref = &r->ref[k];
        status = vcu_req_ranges(r->buf, l, i, k, virtio_cuda_map_one, &c, why);
        if (status != VCU_S_OK) {
            s->inflight_ranges -= r->niov;
            return status;
        }
        k += l->seg[i].nranges;
    }
    return VCU_S_OK;
}

/*
 * Hands the checked and mapped request to the proxy, with a reply buffer
 * of in_len bytes at most (VIRTIO_CUDA_MAX_RESP).
 */
static void virtio_cuda_submit(VirtIOCuda *s, VirtIOCudaReq *r,
                               const vcu_req_layout_t *l, size_t in_len)
{
    /*
     * The backend ignores the range list: keep header, payload and segment
     * table only, so requests in flight hold little memory.
     */
    r->buf = g_realloc(r->buf, l->range_off);
    r->resp_cap = MIN(in_len, VIRTIO_CUDA_MAX_RESP);
    r->resp = g_malloc0(r->resp_cap);

    r->breq.req = r->buf;
    r->breq.req_len = l->range_off;
    r->breq.segs = r->segs;
    r->breq.nsegs = l->nsegs;
    r->breq.resp = r->resp;
    r->breq.resp_cap = r->resp_cap;
    r->breq.resp_len = 0;
    r->breq.done = virtio_cuda_done;
    r->breq.opaque = r;

    QTAILQ_INSERT_TAIL(&s->inflight, r, inflight_next);
    s->ninflight++;
    qatomic_inc(&s->stat_requests);
    /* May call virtio_cuda_done() before it returns. */
    vcu_proxy_submit(s->proxy, &r->breq);
}

/*
 * Parses, checks and maps one request, then submits it.  Returns true when
 * the element was pushed here (an error reply), false when the backend has
 * it.
 */
bool virtio_cuda_handle_req(VirtIOCuda *s, VirtQueueElement *elem)
{
    VirtIOCudaReq *r;
    size_t out_len = iov_size(elem->out_sg, elem->out_num);
    size_t in_len = iov_size(elem->in_sg, elem->in_num);
    vcu_req_layout_t l;
    uint32_t status;
    unsigned int i;
    const char *why;

    if (in_len < sizeof(struct vcu_resp_hdr)) {
        qemu_log_mask(LOG_GUEST_ERROR, "virtio-cuda: reply buffer of %zu "
                      "bytes cannot hold a reply header\n", in_len);
        trace_virtio_cuda_req_error(0, VCU_S_EINVAL, "no reply buffer");
        virtqueue_push(s->vq, elem, 0);
        g_free(elem);
        return true;
    }

    r = g_new0(VirtIOCudaReq, 1);
    r->dev = s;
    r->elem = elem;

    status = virtio_cuda_read_req(r, out_len, &l, &why);
    if (status != VCU_S_OK) {
        goto fail;
    }
    for (i = 0; i < l.nsegs; i++) {
        r->segs[i].iovcnt = l.seg[i].nranges;
        r->segs[i].len = l.seg[i].len;
        r->segs[i].flags = l.seg[i].flags;
    }
    r->nsegs = l.nsegs;

    trace_virtio_cuda_req_in(r, l.opcode, l.session, r->req_id, l.payload_len,
                             l.nsegs, l.xfer);

    status = virtio_cuda_map_req(s, r, &l, &why);
    if (status != VCU_S_OK) {
        goto fail;
    }
    virtio_cuda_submit(s, r, &l, in_len);
    return false;

fail:
    virtio_cuda_reply_error(s, r, status, why);
    return true;
}

void virtio_cuda_handle_output(VirtIODevice *vdev, VirtQueue *vq)
{
    VirtIOCuda *s = VIRTIO_CUDA(vdev);
    VirtQueueElement *elem;
    bool notify = false;

    if (!virtio_device_started(vdev, vdev->status) || vdev->broken || s->stopped) {
        return;
    }
    qatomic_inc(&s->stat_kicks);
    for (;;) {
        if (s->inflight_ranges > VIRTIO_CUDA_MAX_INFLIGHT_RANGES - VCU_MAX_RANGES) {
            /* The completion BH runs us again when there is room. */
            s->throttled = true;
            break;
        }
        elem = virtqueue_pop(vq, sizeof(VirtQueueElement));
        if (!elem) {
            break;
        }
        notify |= virtio_cuda_handle_req(s, elem);
    }
    if (notify) {
        virtio_cuda_notify(s);
    }
}

void virtio_cuda_complete_bh(void *opaque)
{
    VirtIOCuda *s = opaque;
    VirtIODevice *vdev = VIRTIO_DEVICE(s);
    QSIMPLEQ_HEAD(, VirtIOCudaReq) done = QSIMPLEQ_HEAD_INITIALIZER(done);
    VirtIOCudaReq *r;
    bool notify = false;

    WITH_QEMU_LOCK_GUARD(&s->complete_lock) {
        QSIMPLEQ_CONCAT(&done, &s->completed);
    }
    while ((r = QSIMPLEQ_FIRST(&done))) {
        /* The backend's length is not trusted either. */
        size_t len = MIN(r->breq.resp_len, r->resp_cap);
        uint32_t status = len >= sizeof(uint32_t) ? ldl_le_p(r->resp) : VCU_S_EIO;

        QSIMPLEQ_REMOVE_HEAD(&done, complete_next);
        virtio_cuda_req_retire(s, r);
        if (len < sizeof(struct vcu_resp_hdr)) {
            /* A backend bug; the guest still gets an answer. */
            struct vcu_resp_hdr h = {
                .status = cpu_to_le32(VCU_S_EIO),
                .req_id = cpu_to_le64(r->req_id),
            };
            memcpy(r->resp, &h, sizeof(h));
            len = sizeof(h);
            status = VCU_S_EIO;
        }
        trace_virtio_cuda_req_out(r, r->req_id, status, len);
        /* Unmap first: the data is in guest memory before the reply is. */
        virtio_cuda_unmap(r);
        len = iov_from_buf(r->elem->in_sg, r->elem->in_num, 0, r->resp, len);
        virtqueue_push(s->vq, r->elem, len);
        notify = true;
        virtio_cuda_req_free(r);
    }
    if (notify) {
        virtio_cuda_notify(s);
    }
    if (s->throttled &&
        s->inflight_ranges <= VIRTIO_CUDA_MAX_INFLIGHT_RANGES - VCU_MAX_RANGES) {
        s->throttled = false;
        virtio_cuda_handle_output(vdev, s->vq);
    }
}

/*
 * Ends every session and drops every request without a reply: for device
 * reset, driver failure and unrealize.  The proxy kills the workers
 * without waiting for them and returns once every done callback has run,
 * so all requests are on the completed list afterwards.
 */
static void virtio_cuda_quiesce(VirtIOCuda *s)
{
    VirtIOCudaReq *r;

    trace_virtio_cuda_reset(s->ninflight);
    if (s->proxy) {
        vcu_proxy_reset(s->proxy);
    }
    qemu_mutex_lock(&s->complete_lock);
    while ((r = QSIMPLEQ_FIRST(&s->completed))) {
        QSIMPLEQ_REMOVE_HEAD(&s->completed, complete_next);
        qemu_mutex_unlock(&s->complete_lock);
        virtio_cuda_req_retire(s, r);
        virtio_cuda_unmap(r);
        /* Unmaps the descriptors; the queue itself is reset (or dropped). */
        virtqueue_detach_element(s->vq, r->elem, 0);
        virtio_cuda_req_free(r);
        qemu_mutex_lock(&s->complete_lock);
    }
    qemu_mutex_unlock(&s->complete_lock);
    if (s->ninflight) {
        /* The backend broke its promise: leak rather than free live memory. */
        error_report("virtio-cuda: %u requests still in the backend after reset",
                     s->ninflight);
    }
    s->throttled = false;
}

static void virtio_cuda_reset(VirtIODevice *vdev)
{
    virtio_cuda_quiesce(VIRTIO_CUDA(vdev));
}

static void virtio_cuda_set_status(VirtIODevice *vdev, uint8_t status)
{
    VirtIOCuda *s = VIRTIO_CUDA(vdev);
    bool was_ok = vdev->status & VIRTIO_CONFIG_S_DRIVER_OK;
    bool is_ok = (status & VIRTIO_CONFIG_S_DRIVER_OK) &&
                 !(status & VIRTIO_CONFIG_S_FAILED);

    trace_virtio_cuda_set_status(status);
    /* The driver gave up on the device without a reset: end its sessions. */
    if (was_ok && !is_ok && status != 0) {
        virtio_cuda_quiesce(s);
    }
}

static uint64_t virtio_cuda_get_features(VirtIODevice *vdev, uint64_t features,
                                         Error **errp)
{
    return features;
}

/* ---- the daemon's link -------------------------------------------------- */

/* A frame for the daemon, queued by the proxy from any thread. */
typedef struct VirtIOCudaTx {
    QSIMPLEQ_ENTRY(VirtIOCudaTx) next;
    size_t len;
    int fds[VCU_LINK_MAX_FDS];
    unsigned int nfds;
    uint8_t buf[];
} VirtIOCudaTx;

/* Writes what is queued (main loop, BQL). */
void virtio_cuda_link_bh(void *opaque)
{
    VirtIOCuda *s = opaque;

    for (;;) {
        VirtIOCudaTx *t;
        unsigned int i;

        WITH_QEMU_LOCK_GUARD(&s->link_lock) {
            t = QSIMPLEQ_FIRST(&s->link_txq);
            if (t) {
                QSIMPLEQ_REMOVE_HEAD(&s->link_txq, next);
            }
        }
        if (!t) {
            break;
        }
        if (qatomic_read(&s->link_connected)) {
            if (t->nfds > 0) {
                qemu_chr_fe_set_msgfds(&s->chr, t->fds, t->nfds);
            }
            if (qemu_chr_fe_write_all(&s->chr, t->buf, t->len) != (int)t->len) {
                warn_report("virtio-cuda: cannot write to the host daemon");
            }
        }
        for (i = 0; i < t->nfds; i++) {
            close(t->fds[i]);
        }
        g_free(t);
    }
}

/* vcu_proxy_link_t.send: copies the frame and its fds, queues them. */
static int virtio_cuda_link_send(void *opaque, const void *frame, size_t len,
                                 const int *fds, unsigned int nfds)
{
    VirtIOCuda *s = opaque;
    VirtIOCudaTx *t;
    unsigned int i;

    if (!qatomic_read(&s->link_connected) || nfds > VCU_LINK_MAX_FDS) {
        return -1;
    }
    t = g_malloc0(sizeof(*t) + len);
    t->len = len;
    memcpy(t->buf, frame, len);
    for (i = 0; i < nfds; i++) {
        t->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
        if (t->fds[i] < 0) {
            while (i > 0) {
                close(t->fds[--i]);
            }
            g_free(t);
            return -1;
        }
    }
    t->nfds = nfds;
    WITH_QEMU_LOCK_GUARD(&s->link_lock) {
        QSIMPLEQ_INSERT_TAIL(&s->link_txq, t, next);
    }
    qemu_bh_schedule(s->link_bh);
    return 0;
}

static void virtio_cuda_link_reset_rx(VirtIOCuda *s)
{
    s->link_rhave = 0;
    s->link_rpos = 0;
    while (s->link_nrfds > 0) {
        close(s->link_rfds[--s->link_nrfds].fd);
    }
}

/* Descriptors a frame from the daemon carries (vcu_link.h). */
static unsigned int virtio_cuda_link_fds(const uint8_t *frame)
{
    struct vcu_link_hdr h;
    uint32_t status;

    memcpy(&h, frame, sizeof(h));
    if ((h.type != VCU_LINK_WELCOME && h.type != VCU_LINK_SPAWNED) ||
        h.len < sizeof(uint32_t) * 2) {
        return 0;
    }
    /* Both bodies have their status as the second word. */
    memcpy(&status, frame + sizeof(h) + sizeof(uint32_t), sizeof(status));
    if (h.type == VCU_LINK_SPAWNED) {
        memcpy(&status, frame + sizeof(h), sizeof(status));
        return status == VCU_S_OK ? VCU_LINK_SPAWNED_FDS : 0;
    }
    return status == VCU_S_OK ? VCU_LINK_WELCOME_FDS : 0;
}

/*
 * How many of the queued descriptors the frame just put together (stream
 * bytes fstart..fend) came with, or -1 if one there came with no frame.
 * The daemon sends a frame's descriptors with its first byte, and the
 * kernel ends a read with the message that carried descriptors: so they
 * belong to the last frame that starts in the read that brought them.
 * Those of a read that ends past fend are a later frame's.
 */
static int virtio_cuda_link_owned(VirtIOCuda *s, uint64_t fstart, uint64_t fend)
{
    unsigned int i;

    for (i = 0; i < s->link_nrfds && s->link_rfds[i].end <= fend; i++) {
        if (s->link_rfds[i].start > fstart || s->link_rfds[i].end <= fstart) {
            return -1;
        }
    }
    return i;
}

/* Hands the first n queued descriptors to fds[] and drops them from the
 * queue. */
static void virtio_cuda_link_shift_fds(VirtIOCuda *s, int *fds, unsigned int n)
{
    unsigned int i;

    for (i = 0; i < n; i++) {
        fds[i] = s->link_rfds[i].fd;
    }
    memmove(s->link_rfds, s->link_rfds + n,
            (s->link_nrfds - n) * sizeof(s->link_rfds[0]));
    s->link_nrfds -= n;
}

/*
 * Bytes from the daemon: cut into frames, each handed to the proxy with
 * the descriptors that came with it (virtio_cuda_link_owned()).  A daemon
 * that breaks the protocol loses the link.
 */
static void virtio_cuda_link_feed(VirtIOCuda *s, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        struct vcu_link_hdr h;
        size_t take, flen, want = sizeof(h);
        int fds[VCU_LINK_MAX_FDS];
        unsigned int need;
        int owned;
        char err[256];

        if (s->link_rhave == 0) {
            s->link_fstart = s->link_rpos;
        }
        if (s->link_rhave >= sizeof(h)) {
            memcpy(&h, s->link_rbuf, sizeof(h));
            want += h.len;
        }
        take = MIN(len, want - s->link_rhave);
        memcpy(s->link_rbuf + s->link_rhave, buf, take);
        s->link_rhave += take;
        s->link_rpos += take;
        buf += take;
        len -= take;
        if (s->link_rhave == sizeof(h)) {
            memcpy(&h, s->link_rbuf, sizeof(h));
            if (h.len > VCU_LINK_MAX_BODY) {
                error_report("virtio-cuda: an oversized frame from the host "
                             "daemon; closing the link");
                goto broken;
            }
            if (h.len > 0) {
                continue;
            }
        }
        if (s->link_rhave < sizeof(h) || s->link_rhave < want) {
            continue;
        }
        need = virtio_cuda_link_fds(s->link_rbuf);
        owned = virtio_cuda_link_owned(s, s->link_fstart, s->link_rpos);
        if (owned < 0) {
            error_report("virtio-cuda: descriptors from the host daemon that "
                         "came with no frame; closing the link");
            goto broken;
        }
        if ((unsigned int)owned != need) {
            error_report("virtio-cuda: a frame from the host daemon (type %u) "
                         "with %d descriptors, not %u; closing the link",
                         ldl_he_p(s->link_rbuf), owned, need);
            goto broken;
        }
        virtio_cuda_link_shift_fds(s, fds, need);
        flen = s->link_rhave;
        s->link_rhave = 0;
        if (vcu_proxy_link_input(s->proxy, s->link_rbuf, flen, fds, need,
                                 err, sizeof(err)) != 0) {
            error_report("virtio-cuda: %s", err);
            goto broken;
        }
    }
    return;
broken:
    virtio_cuda_link_reset_rx(s);
    vcu_proxy_link_down(s->proxy);
    qemu_chr_fe_disconnect(&s->chr);
}

/*
 * Takes the descriptors the last read brought: stream bytes start..end.
 * false if it brought more than a frame carries (the kernel ends a read
 * at the message with descriptors, so one read holds one frame's).
 */
static bool virtio_cuda_link_take_fds(VirtIOCuda *s, uint64_t start, uint64_t end)
{
    int fds[ARRAY_SIZE(s->link_rfds)];
    int n = qemu_chr_fe_get_msgfds(&s->chr, fds, ARRAY_SIZE(fds));
    int i, got = 0;
    bool ok = true;

    for (i = 0; i < n; i++) {
        if (fds[i] < 0) {
            continue;
        }
        if (got < VCU_LINK_MAX_FDS && s->link_nrfds < ARRAY_SIZE(s->link_rfds)) {
            s->link_rfds[s->link_nrfds].fd = fds[i];
            s->link_rfds[s->link_nrfds].start = start;
            s->link_rfds[s->link_nrfds].end = end;
            s->link_nrfds++;
            got++;
        } else {
            close(fds[i]);
            ok = false;
        }
    }
    return ok;
}

static int virtio_cuda_link_can_read(void *opaque)
{
    return sizeof(((VirtIOCuda *)opaque)->link_rbuf);
}

static void virtio_cuda_link_read(void *opaque, const uint8_t *buf, int size)
{
    VirtIOCuda *s = opaque;

    if (!virtio_cuda_link_take_fds(s, s->link_rpos, s->link_rpos + MAX(size, 0))) {
        error_report("virtio-cuda: more descriptors from the host daemon than "
                     "a frame carries; closing the link");
        virtio_cuda_link_reset_rx(s);
        vcu_proxy_link_down(s->proxy);
        qemu_chr_fe_disconnect(&s->chr);
        return;
    }
    if (size > 0) {
        virtio_cuda_link_feed(s, buf, size);
    }
}

static void virtio_cuda_link_event(void *opaque, QEMUChrEvent event)
{
    VirtIOCuda *s = opaque;

    switch (event) {
    case CHR_EVENT_OPENED:
        qatomic_set(&s->link_connected, true);
        if (s->proxy && !vcu_proxy_link_ready(s->proxy)) {
            info_report("virtio-cuda: the host daemon is back; saying hello");
            virtio_cuda_link_reset_rx(s);
            vcu_proxy_link_up(s->proxy);
        }
        break;
    case CHR_EVENT_CLOSED:
        if (qatomic_read(&s->link_connected) && !runstate_check(RUN_STATE_SHUTDOWN)) {
            warn_report("virtio-cuda: the host daemon's link closed: guest "
                        "processes get errors until it is back");
        }
        qatomic_set(&s->link_connected, false);
        virtio_cuda_link_reset_rx(s);
        if (s->proxy) {
            vcu_proxy_link_down(s->proxy);
        }
        break;
    default:
        break;
    }
}

/*
 * At realize: waits for the chardev to connect, says HELLO and reads the
 * daemon's WELCOME (blocking, as vhost-user devices do at realize: the
 * VM cannot start without its daemon).
 */
static bool virtio_cuda_link_start(VirtIOCuda *s, const vcu_proxy_config_t *cfg,
                                   Error **errp)
{
    struct vcu_link_hdr h;
    uint8_t *frame;
    int fds[VCU_LINK_MAX_FDS];
    unsigned int nfds = 0;
    /* Room for the daemon's whole reason (vcu_link_welcome.error). */
    char err[320] = "";
    int rc;

    if (qemu_chr_fe_wait_connected(&s->chr, errp) < 0) {
        error_prepend(errp, "virtio-cuda: cannot reach the host daemon: ");
        return false;
    }
    qatomic_set(&s->link_connected, true);
    rc = vcu_proxy_new(cfg, &s->proxy, err, sizeof(err));
    if (rc < 0) {
        error_setg(errp, "virtio-cuda: %s", err);
        s->proxy = NULL;
        return false;
    }
    /* The HELLO is queued: write it now, the main loop is not running. */
    virtio_cuda_link_bh(s);
    if (qemu_chr_fe_read_all(&s->chr, (uint8_t *)&h, sizeof(h)) != sizeof(h) ||
        h.type != VCU_LINK_WELCOME || h.len != sizeof(struct vcu_link_welcome)) {
        error_setg(errp, "virtio-cuda: the host daemon did not welcome this VM "
                   "(is the chardev vcu-daemon's socket?)");
        return false;
    }
    frame = g_malloc(sizeof(h) + h.len);
    memcpy(frame, &h, sizeof(h));
    if (qemu_chr_fe_read_all(&s->chr, frame + sizeof(h), h.len) != (int)h.len) {
        g_free(frame);
        error_setg(errp, "virtio-cuda: the host daemon closed the link");
        return false;
    }
    /* Every descriptor that came is the WELCOME's: the proxy checks the
     * count and closes them all. */
    if (virtio_cuda_link_take_fds(s, 0, sizeof(h) + h.len)) {
        nfds = MIN(s->link_nrfds, VCU_LINK_MAX_FDS);
        virtio_cuda_link_shift_fds(s, fds, nfds);
    }
    rc = vcu_proxy_link_input(s->proxy, frame, sizeof(h) + h.len, fds, nfds,
                              err, sizeof(err));
    g_free(frame);
    virtio_cuda_link_reset_rx(s);
    if (rc < 0 || !vcu_proxy_link_ready(s->proxy)) {
        error_setg(errp, "virtio-cuda: %s", err[0] ? err :
                   "the host daemon's welcome is malformed");
        return false;
    }
    return true;
}

/* Guest RAM the workers can map: the machine's memory backend, fd-backed
 * and shared. */
static bool virtio_cuda_ram_shared(Error **errp)
{
    MachineState *ms = MACHINE(qdev_get_machine());
    uint64_t mib = ms->ram_size / MiB;

    if (ms->ram && memory_region_get_fd(ms->ram) >= 0 &&
        qemu_ram_is_shared(ms->ram->ram_block)) {
        return true;
    }
    error_setg(errp, "virtio-cuda: guest RAM must be shared memory, which "
               "the session worker processes map: add -object "
               "memory-backend-memfd,id=mem,size=%" PRIu64 "M,share=on "
               "-machine memory-backend=mem", mib);
    return false;
}

/*
 * The properties the proxy's config takes from: the chardev (required),
 * max-sessions and module-cache (into cfg).
 */
static bool virtio_cuda_check_props(VirtIOCuda *s, vcu_proxy_config_t *cfg,
                                    Error **errp)
{
    if (!qemu_chr_fe_backend_connected(&s->chr)) {
        error_setg(errp, "virtio-cuda: the chardev property is required: the "
                   "host daemon's socket (-chardev socket,id=vcu0,path=/run/"
                   "virtio-cuda/vcu.sock,reconnect-ms=1000 -device "
                   "virtio-cuda-pci,chardev=vcu0)");
        return false;
    }
    if (s->max_sessions == 0 || s->max_sessions > 4096) {
        error_setg(errp, "virtio-cuda: max-sessions must be 1..4096, not %u",
                   s->max_sessions);
        return false;
    }
    if (!s->module_cache || !strcmp(s->module_cache, "shared")) {
        cfg->module_cache = VCU_PROXY_MODCACHE_SHARED;
    } else if (!strcmp(s->module_cache, "private")) {
        cfg->module_cache = VCU_PROXY_MODCACHE_PRIVATE;
    } else if (!strcmp(s->module_cache, "off")) {
        cfg->module_cache = VCU_PROXY_MODCACHE_OFF;
    } else {
        error_setg(errp, "virtio-cuda: module-cache must be shared, private "
                   "or off, not '%s'", s->module_cache);
        return false;
    }
    return true;
}

/*
 * The VM's name for the daemon's reports: -name, else the device id, with
 * anything outside [A-Za-z0-9._-] made '_'; NULL when there is neither.
 * The caller frees it.
 */
static char *virtio_cuda_vm_name(DeviceState *dev)
{
    const char *name = qemu_get_vm_name() ? qemu_get_vm_name() : dev->id;
    char *vm_name, *p;

    if (!name) {
        return NULL;
    }
    vm_name = g_strndup(name, 63);
    for (p = vm_name; *p; p++) {
        if (!g_ascii_isalnum(*p) && *p != '.' && *p != '_' && *p != '-') {
            *p = '_';
        }
    }
    return vm_name;
}

/* The completion and link queues, their locks and bottom halves. */
static void virtio_cuda_init_queues(VirtIOCuda *s, DeviceState *dev)
{
    qemu_mutex_init(&s->complete_lock);
    qemu_mutex_init(&s->link_lock);
    QSIMPLEQ_INIT(&s->completed);
    QSIMPLEQ_INIT(&s->link_txq);
    QTAILQ_INIT(&s->inflight);
    s->complete_bh = qemu_bh_new_guarded(virtio_cuda_complete_bh, s,
                                         &dev->mem_reentrancy_guard);
    s->link_bh = qemu_bh_new_guarded(virtio_cuda_link_bh, s,
                                     &dev->mem_reentrancy_guard);
}

/*
 * Undoes virtio_cuda_init_queues() and the link (realize failed after
 * them): the proxy freed, what it queued dropped.
 */
static void virtio_cuda_realize_undo(VirtIOCuda *s)
{
    qemu_chr_fe_set_handlers(&s->chr, NULL, NULL, NULL, NULL, NULL, NULL, true);
    vcu_proxy_free(s->proxy);
    s->proxy = NULL;
    virtio_cuda_link_bh(s);
    virtio_cuda_link_reset_rx(s);
    qemu_bh_delete(s->link_bh);
    qemu_bh_delete(s->complete_bh);
    qemu_mutex_destroy(&s->link_lock);
    qemu_mutex_destroy(&s->complete_lock);
}

/* The daemon welcomed the VM: say whether CUDA works, serve the link. */
static void virtio_cuda_link_serve(VirtIOCuda *s)
{
    if (vcu_proxy_cuda_error(s->proxy)) {
        warn_report_once("virtio-cuda: CUDA is not available (%s); "
                         "only ECHO requests will work",
                         vcu_proxy_cuda_error(s->proxy));
    }
    qemu_chr_fe_set_handlers(&s->chr, virtio_cuda_link_can_read,
                             virtio_cuda_link_read, virtio_cuda_link_event,
                             NULL, s, NULL, true);
    trace_virtio_cuda_realize(s->gpus ? s->gpus : "", "vcu-daemon");
}

static void virtio_cuda_realize(DeviceState *dev, Error **errp)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VirtIOCuda *s = VIRTIO_CUDA(dev);
    vcu_proxy_link_t link = { .opaque = s, .send = virtio_cuda_link_send };
    g_autofree char *vm_name = NULL;
    vcu_proxy_config_t cfg = {
        .link = &link,
        .gpus = s->gpus,
        .max_sessions = s->max_sessions,
        .capture_printf = s->capture_printf,
        .mem_quota = s->mem_quota,
        .compute_share = s->compute_share,
        .compute_cap = s->compute_cap,
        .sms = s->sms,
    };

    if (!virtio_cuda_check_props(s, &cfg, errp)) {
        return;
    }
    vm_name = virtio_cuda_vm_name(dev);
    cfg.name = vm_name;
    if (!virtio_cuda_ram_shared(errp)) {
        return;
    }

    virtio_cuda_init_queues(s, dev);
    if (!virtio_cuda_link_start(s, &cfg, errp)) {
        goto fail;
    }
    virtio_cuda_link_serve(s);

    s->vmstate_entry = qemu_add_vm_change_state_handler(
        virtio_cuda_vm_state_change, s);
    virtio_cuda_migration_init(s);

    virtio_init(vdev, VIRTIO_ID_CUDA, 0);
    s->vq = virtio_add_queue(vdev, VIRTIO_CUDA_QUEUE_SIZE,
                             virtio_cuda_handle_output);
    return;

fail:
    virtio_cuda_realize_undo(s);
}

static void virtio_cuda_unrealize(DeviceState *dev)
{
    VirtIODevice *vdev = VIRTIO_DEVICE(dev);
    VirtIOCuda *s = VIRTIO_CUDA(dev);

    virtio_cuda_quiesce(s);
    qemu_chr_fe_set_handlers(&s->chr, NULL, NULL, NULL, NULL, NULL, NULL, true);
    vcu_proxy_free(s->proxy);
    s->proxy = NULL;
    qatomic_set(&s->link_connected, false);
    virtio_cuda_link_bh(s);         /* drops what is queued */
    virtio_cuda_link_reset_rx(s);
    qemu_bh_delete(s->link_bh);
    qemu_bh_delete(s->complete_bh);
    qemu_mutex_destroy(&s->link_lock);
    qemu_mutex_destroy(&s->complete_lock);
    qemu_del_vm_change_state_handler(s->vmstate_entry);
    virtio_cuda_migration_fini(s);
    virtio_delete_queue(s->vq);
    virtio_cleanup(vdev);
}

/*
 * The VM's usage, read-only, for the host's monitoring: qom-get on the
 * device (or its virtio-cuda-pci proxy, which aliases these) from QMP or
 * HMP.  Everything comes from vcu_proxy_stats(): the proxy's counts and
 * the VM's memory account.  The account's figures are written by workers
 * that run guest requests, so they are only reported, never used here,
 * and every sum saturates.  GPU time and compute shares are not measured
 * and are not reported.  docs/design.md, "Monitoring".
 */
typedef enum {
    VIRTIO_CUDA_STAT_MEM_USED,
    VIRTIO_CUDA_STAT_CTX_BYTES,
    VIRTIO_CUDA_STAT_SESSIONS,
    VIRTIO_CUDA_STAT_FAULTS,
} VirtIOCudaStat;

static uint64_t virtio_cuda_sat_add(uint64_t a, uint64_t b)
{
    uint64_t r;

    return uadd64_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t virtio_cuda_sum(const uint64_t *v)
{
    uint64_t sum = 0;
    unsigned int d;

    for (d = 0; d < VCU_CU_MAX_DEVICES; d++) {
        sum = virtio_cuda_sat_add(sum, v[d]);
    }
    return sum;
}

static bool virtio_cuda_read_stats(VirtIOCuda *s, vcu_proxy_stats_t *st,
                                   vcu_proxy_session_stats_t *sess,
                                   uint32_t cap, Error **errp)
{
    if (!s->proxy) {
        error_setg(errp, "virtio-cuda: the device is not realized");
        return false;
    }
    if (vcu_proxy_stats(s->proxy, st, sess, cap) != 0) {
        error_setg(errp, "virtio-cuda: usage unavailable (out of memory)");
        return false;
    }
    return true;
}

static void virtio_cuda_get_stat(Object *obj, Visitor *v, const char *name,
                                 void *opaque, Error **errp)
{
    VirtIOCuda *s = VIRTIO_CUDA(obj);
    vcu_proxy_stats_t st;
    uint64_t val = 0;

    if (!virtio_cuda_read_stats(s, &st, NULL, 0, errp)) {
        return;
    }
    switch ((VirtIOCudaStat)(uintptr_t)opaque) {
    case VIRTIO_CUDA_STAT_MEM_USED:
        val = virtio_cuda_sum(st.mem_used);
        break;
    case VIRTIO_CUDA_STAT_CTX_BYTES:
        val = virtio_cuda_sum(st.ctx_bytes);
        break;
    case VIRTIO_CUDA_STAT_SESSIONS:
        val = st.sessions;
        break;
    case VIRTIO_CUDA_STAT_FAULTS:
        val = st.faults;
        break;
    }
    visit_type_uint64(v, name, &val, errp);
}

/* The devices reported: up to the highest one with anything on it, and
 * at least device 0 (the proxy does not know how many the VM has). */
static unsigned int virtio_cuda_ndev(const uint64_t *mem, const uint64_t *ctx)
{
    unsigned int d, n = 1;

    for (d = 0; d < VCU_CU_MAX_DEVICES; d++) {
        if (mem[d] || ctx[d]) {
            n = d + 1;
        }
    }
    return n;
}

/* "devices": [{"index", "mem-used", "mem-ctx-bytes"}, ...] */
static bool virtio_cuda_visit_devices(Visitor *v, unsigned int ndev,
                                      uint64_t *mem, uint64_t *ctx,
                                      Error **errp)
{
    unsigned int d;
    bool ok = false;

    if (!visit_start_list(v, "devices", NULL, 0, errp)) {
        return false;
    }
    for (d = 0; d < ndev; d++) {
        uint32_t index = d;

        if (!visit_start_struct(v, NULL, NULL, 0, errp)) {
            goto out;
        }
        ok = visit_type_uint32(v, "index", &index, errp) &&
             visit_type_uint64(v, "mem-used", &mem[d], errp) &&
             visit_type_uint64(v, "mem-ctx-bytes", &ctx[d], errp) &&
             visit_check_struct(v, errp);
        visit_end_struct(v, NULL);
        if (!ok) {
            goto out;
        }
    }
    ok = visit_check_list(v, errp);
out:
    visit_end_list(v, NULL);
    return ok;
}

static bool virtio_cuda_visit_session(Visitor *v,
                                      vcu_proxy_session_stats_t *ss,
                                      Error **errp)
{
    uint64_t mem = virtio_cuda_sum(ss->mem);
    uint64_t ctx = virtio_cuda_sum(ss->ctx);
    bool fault = ss->fault != 0;
    bool ok;

    if (!visit_start_struct(v, NULL, NULL, 0, errp)) {
        return false;
    }
    ok = visit_type_uint64(v, "session", &ss->session, errp) &&
         visit_type_uint32(v, "host-pid", &ss->pid, errp) &&
         visit_type_bool(v, "fault", &fault, errp) &&
         visit_type_uint64(v, "mem-used", &mem, errp) &&
         visit_type_uint64(v, "mem-ctx-bytes", &ctx, errp) &&
         virtio_cuda_visit_devices(v, virtio_cuda_ndev(ss->mem, ss->ctx),
                                   ss->mem, ss->ctx, errp) &&
         visit_check_struct(v, errp);
    visit_end_struct(v, NULL);
    return ok;
}

/*
 * "stats": the whole picture in one JSON object (docs/design.md,
 * "Monitoring", lists its members).  host-pid is the worker's pid on the
 * host: the guest process's own pid is not known to the host.
 */
static void virtio_cuda_get_stats(Object *obj, Visitor *v, const char *name,
                                  void *opaque, Error **errp)
{
    VirtIOCuda *s = VIRTIO_CUDA(obj);
    uint32_t cap = s->max_sessions * 2, i;
    g_autofree vcu_proxy_session_stats_t *sess =
        g_new0(vcu_proxy_session_stats_t, cap);
    vcu_proxy_stats_t st;
    uint64_t mem, ctx;
    uint64_t kicks = qatomic_read(&s->stat_kicks);
    uint64_t notifies = qatomic_read(&s->stat_notifies);
    uint64_t requests = qatomic_read(&s->stat_requests);
    bool link_up, ok = false;

    if (!virtio_cuda_read_stats(s, &st, sess, cap, errp)) {
        return;
    }
    link_up = st.link_up != 0;
    mem = virtio_cuda_sum(st.mem_used);
    ctx = virtio_cuda_sum(st.ctx_bytes);
    if (!visit_start_struct(v, name, NULL, 0, errp)) {
        return;
    }
    if (!visit_type_uint64(v, "mem-quota", &st.mem_quota, errp) ||
        !visit_type_uint64(v, "mem-used", &mem, errp) ||
        !visit_type_uint64(v, "mem-ctx-bytes", &ctx, errp) ||
        !visit_type_uint32(v, "sessions", &st.sessions, errp) ||
        !visit_type_uint32(v, "workers", &st.workers, errp) ||
        !visit_type_uint64(v, "faults", &st.faults, errp) ||
        !visit_type_uint32(v, "compute-share", &st.compute_share, errp) ||
        !visit_type_uint32(v, "compute-cap", &st.compute_cap, errp) ||
        !visit_type_uint32(v, "sms", &st.sms, errp) ||
        !visit_type_uint32(v, "max-sessions", &st.max_sessions, errp) ||
        !visit_type_bool(v, "daemon-link", &link_up, errp) ||
        !visit_type_uint64(v, "vm-id", &st.vm_id, errp) ||
        !visit_type_uint64(v, "requests", &requests, errp) ||
        !visit_type_uint64(v, "kicks", &kicks, errp) ||
        !visit_type_uint64(v, "notifies", &notifies, errp) ||
        !virtio_cuda_visit_devices(v, virtio_cuda_ndev(st.mem_used,
                                                       st.ctx_bytes),
                                   st.mem_used, st.ctx_bytes, errp)) {
        goto out;
    }
    if (!visit_start_list(v, "session-list", NULL, 0, errp)) {
        goto out;
    }
    for (i = 0; i < st.nsess && i < cap; i++) {
        if (!virtio_cuda_visit_session(v, &sess[i], errp)) {
            break;
        }
    }
    ok = i == MIN(st.nsess, cap) && visit_check_list(v, errp);
    visit_end_list(v, NULL);
    if (ok) {
        visit_check_struct(v, errp);
    }
out:
    visit_end_struct(v, NULL);
}

static const Property virtio_cuda_properties[] = {
    /* The host daemon's socket (vcu-daemon): required. */
    DEFINE_PROP_CHR("chardev", VirtIOCuda, chr),
    DEFINE_PROP_STRING("gpus", VirtIOCuda, gpus),
    DEFINE_PROP_BOOL("capture-printf", VirtIOCuda, capture_printf, true),
    DEFINE_PROP_UINT32("max-sessions", VirtIOCuda, max_sessions, 64),
    /* The VM's GPU memory, enforced by the host across all its sessions:
     * past it allocations fail as on a full GPU, and the guest sees it as
     * the GPU's total (host-backend/common/vcu_account.h).  The daemon may
     * give less (its --max-mem-quota) or set one (--mem-quota). */
    DEFINE_PROP_SIZE("mem-quota", VirtIOCuda, mem_quota, 0),
    /* The daemon's module cache: shared with its other VMs (the default),
     * one of the VM's own ("private", by the VM's name), or "off". */
    DEFINE_PROP_STRING("module-cache", VirtIOCuda, module_cache),
    /* GPU time between VMs (docs/design.md "Compute share"): the VM's
     * weight in the daemon's group (1..10000; 0: not in it) and its cap in
     * percent of the GPU's time even when the GPU is otherwise idle (0:
     * none).  An operator may change both while the VM runs. */
    DEFINE_PROP_UINT32("compute-share", VirtIOCuda, compute_share, 0),
    DEFINE_PROP_UINT32("compute-cap", VirtIOCuda, compute_cap, 0),
    /* Packed mode (docs/design.md "Packed mode"): the VM's processes are
     * clients of NVIDIA's MPS control daemon the host daemon names, and
     * run on sms SMs each, side by side with other packed VMs; a GPU fault
     * in one can end their work.  0: isolated mode, the default. */
    DEFINE_PROP_UINT32("sms", VirtIOCuda, sms, 0),
};

static void virtio_cuda_class_init(ObjectClass *klass, void *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    VirtioDeviceClass *vdc = VIRTIO_DEVICE_CLASS(klass);

    device_class_set_props(dc, virtio_cuda_properties);
    dc->vmsd = &vmstate_virtio_cuda;
    object_class_property_add(klass, "mem-used", "uint64", virtio_cuda_get_stat,
                              NULL, NULL,
                              (void *)(uintptr_t)VIRTIO_CUDA_STAT_MEM_USED);
    object_class_property_set_description(klass, "mem-used",
        "GPU memory charged to the VM's sessions, all devices (bytes)");
    object_class_property_add(klass, "mem-ctx-bytes", "uint64",
                              virtio_cuda_get_stat, NULL, NULL,
                              (void *)(uintptr_t)VIRTIO_CUDA_STAT_CTX_BYTES);
    object_class_property_set_description(klass, "mem-ctx-bytes",
        "GPU memory of the sessions' CUDA contexts, apart (bytes)");
    object_class_property_add(klass, "sessions", "uint64", virtio_cuda_get_stat,
                              NULL, NULL,
                              (void *)(uintptr_t)VIRTIO_CUDA_STAT_SESSIONS);
    object_class_property_set_description(klass, "sessions",
        "The guest's open sessions (CUDA processes)");
    object_class_property_add(klass, "faults", "uint64", virtio_cuda_get_stat,
                              NULL, NULL,
                              (void *)(uintptr_t)VIRTIO_CUDA_STAT_FAULTS);
    object_class_property_set_description(klass, "faults",
        "Sessions ended by a GPU fault");
    object_class_property_add(klass, "stats", "VirtioCudaStats",
                              virtio_cuda_get_stats, NULL, NULL, NULL);
    object_class_property_set_description(klass, "stats",
        "The VM's usage, per device and per session (JSON object)");
    set_bit(DEVICE_CATEGORY_MISC, dc->categories);
    vdc->realize = virtio_cuda_realize;
    vdc->unrealize = virtio_cuda_unrealize;
    vdc->get_features = virtio_cuda_get_features;
    vdc->reset = virtio_cuda_reset;
    vdc->set_status = virtio_cuda_set_status;
}

static const TypeInfo virtio_cuda_info = {
    .name = TYPE_VIRTIO_CUDA,
    .parent = TYPE_VIRTIO_DEVICE,
    .instance_size = sizeof(VirtIOCuda),
    .class_init = virtio_cuda_class_init,
};

static void virtio_cuda_register_types(void)
{
    type_register_static(&virtio_cuda_info);
}

type_init(virtio_cuda_register_types)
