/*
 * virtio-cuda-pci: the device in a migration, a snapshot or a suspend
 * to a file (docs/design.md, "Live migration"): requests in flight
 * drained at every stop, and each session's state carried in the
 * device's section of the stream.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qemu/error-report.h"
#include "qemu/units.h"
#include "qemu/timer.h"
#include "qemu/thread.h"
#include "hw/virtio/virtio.h"
#include "migration/qemu-file-types.h"
#include "trace.h"

#include "vcu_link.h"
#include "vcu_proxy.h"
#include "virtio-cuda-int.h"

/*
 * ---- migration (docs/design.md, "Live migration") -------------------------
 *
 * When the VM stops (for a migration, a snapshot, or a pause that may be
 * followed by either), the requests in flight finish first (their replies reach guest memory before it is sent), but
 * for the host-callback waits a guest thread keeps parked: those are
 * carried in the device state and sent again on the destination.  The
 * device state then holds each session (the guest's id, how it was
 * opened) and its worker's state, streamed through a pipe in chunks of at
 * most VIRTIO_CUDA_MIG_CHUNK bytes; the destination opens each session in
 * a worker of its own daemon, which loads it.  A session that cannot move
 * fails the migration, naming why, and the source runs on.
 */
#define VIRTIO_CUDA_DRAIN_MS 10000
#define VIRTIO_CUDA_MIG_CHUNK (1 * MiB)

/* A request the backend keeps until something happens in the guest. */
static bool virtio_cuda_req_parked(const VirtIOCudaReq *r)
{
    return ldl_le_p(r->buf) == VCU_OP_CU_CALLBACK_WAIT;
}

static unsigned int virtio_cuda_busy(VirtIOCuda *s, bool parked)
{
    VirtIOCudaReq *r;
    unsigned int n = 0;

    QTAILQ_FOREACH(r, &s->inflight, inflight_next) {
        n += virtio_cuda_req_parked(r) == parked;
    }
    return n;
}

void virtio_cuda_vm_state_change(void *opaque, bool running, RunState state)
{
    VirtIOCuda *s = opaque;
    int64_t deadline;

    if (running) {
        s->stopped = false;
        /* What the guest queued while we were stopped. */
        virtio_cuda_handle_output(VIRTIO_DEVICE(s), s->vq);
        return;
    }
    s->stopped = true;
    /*
     * Every stop drains, as every stop drains block I/O (do_vm_stop()):
     * a VM paused first and then saved or migrated (virsh save, a paused
     * migration) gets no second notice when the migration takes it to
     * RUN_STATE_FINISH_MIGRATE (vm_stop_force_state() only sets the state),
     * and by the time the device state is written the guest's memory and
     * the virtqueues have already been sent.  Not at shutdown: nothing is
     * sent then, and the sessions close.
     */
    if (state == RUN_STATE_SHUTDOWN) {
        return;
    }
    deadline = qemu_clock_get_ms(QEMU_CLOCK_REALTIME) + VIRTIO_CUDA_DRAIN_MS;
    while (virtio_cuda_busy(s, false) > 0 &&
           qemu_clock_get_ms(QEMU_CLOCK_REALTIME) < deadline) {
        virtio_cuda_complete_bh(s);
        g_usleep(500);
    }
    virtio_cuda_complete_bh(s);
    trace_virtio_cuda_drained(virtio_cuda_busy(s, false),
                              virtio_cuda_busy(s, true));
}

/* A save or a load handed to the proxy, waited for. */
typedef struct VirtIOCudaState {
    vcu_request_t r;
    struct vcu_req_hdr h;
    uint8_t resp[sizeof(struct vcu_resp_hdr) + 256];
    QemuEvent done;
} VirtIOCudaState;

static void virtio_cuda_state_done(vcu_request_t *r)
{
    qemu_event_set(&((VirtIOCudaState *)r->opaque)->done);
}

static void virtio_cuda_state_init(VirtIOCudaState *st, uint32_t op, uint64_t id)
{
    memset(st, 0, sizeof(*st));
    st->h.opcode = op;
    st->h.session = id;
    st->r.req = &st->h;
    st->r.req_len = sizeof(st->h);
    st->r.resp = st->resp;
    st->r.resp_cap = sizeof(st->resp);
    st->r.done = virtio_cuda_state_done;
    st->r.opaque = st;
    qemu_event_init(&st->done, false);
}

/* Waits for it; its status, its reason in why. */
static uint32_t virtio_cuda_state_wait(VirtIOCudaState *st, const char **why)
{
    struct vcu_resp_hdr h = { .status = VCU_S_EIO };

    qemu_event_wait(&st->done);
    qemu_event_destroy(&st->done);
    if (st->r.resp_len >= sizeof(h)) {
        memcpy(&h, st->resp, sizeof(h));
    }
    st->resp[sizeof(st->resp) - 1] = 0;
    *why = st->r.resp_len > sizeof(h) ? (const char *)st->resp + sizeof(h) : "";
    return h.status;
}

/* One session's state from its worker into f. */
static int virtio_cuda_save_one(VirtIOCuda *s, QEMUFile *f, uint64_t id,
                                uint8_t *buf)
{
    VirtIOCudaState st;
    const char *why;
    uint32_t status;
    int p[2];
    ssize_t n;

    if (!g_unix_open_pipe(p, FD_CLOEXEC, NULL)) {
        error_report("virtio-cuda: no pipe for session %" PRIx64, id);
        return -EIO;
    }
    /* A larger pipe: fewer trips between the worker and us. */
    (void)fcntl(p[0], F_SETPIPE_SZ, VIRTIO_CUDA_MIG_CHUNK);
    virtio_cuda_state_init(&st, VCU_BACKEND_OP_SAVE, id);
    vcu_proxy_session_save(s->proxy, &st.r, p[1]);
    close(p[1]);
    for (;;) {
        n = read(p[0], buf, VIRTIO_CUDA_MIG_CHUNK);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        qemu_put_be32(f, n);
        qemu_put_buffer(f, buf, n);
    }
    close(p[0]);
    qemu_put_be32(f, 0);
    status = virtio_cuda_state_wait(&st, &why);
    if (status != VCU_S_OK || n < 0) {
        error_report("virtio-cuda: session %" PRIx64 " cannot migrate: %s "
                     "(status %u)", id, why[0] ? why : "reading its state failed",
                     status);
        return -EBUSY;
    }
    return 0;
}

static int virtio_cuda_put_sessions(QEMUFile *f, void *pv, size_t size,
                                    const VMStateField *field,
                                    JSONWriter *vmdesc)
{
    VirtIOCuda *s = pv;
    VirtIODevice *vdev = VIRTIO_DEVICE(s);
    g_autofree uint64_t *ids = g_new(uint64_t, VCU_PROXY_MAX_SESSIONS);
    g_autofree struct vcu_session_open_req *opens =
        g_new(struct vcu_session_open_req, VCU_PROXY_MAX_SESSIONS);
    g_autofree uint8_t *buf = g_malloc(VIRTIO_CUDA_MIG_CHUNK);
    VirtIOCudaReq *r;
    unsigned int i, n;
    int ret;

    if (virtio_cuda_busy(s, false) > 0) {
        error_report("virtio-cuda: %u requests did not finish within %d ms",
                     virtio_cuda_busy(s, false), VIRTIO_CUDA_DRAIN_MS);
        return -EBUSY;
    }
    n = vcu_proxy_sessions(s->proxy, ids, opens, VCU_PROXY_MAX_SESSIONS);
    n = MIN(n, VCU_PROXY_MAX_SESSIONS);
    qemu_put_be32(f, n);
    for (i = 0; i < n; i++) {
        qemu_put_be64(f, ids[i]);
        qemu_put_buffer(f, (uint8_t *)&opens[i], sizeof(opens[i]));
        ret = virtio_cuda_save_one(s, f, ids[i], buf);
        if (ret < 0) {
            return ret;
        }
    }
    qemu_put_be32(f, virtio_cuda_busy(s, true));
    QTAILQ_FOREACH(r, &s->inflight, inflight_next) {
        if (virtio_cuda_req_parked(r)) {
            qemu_put_virtqueue_element(vdev, f, r->elem);
        }
    }
    trace_virtio_cuda_saved(n);
    return 0;
}

/* One session opened again in a worker of this host's daemon, which loads
 * its state from f. */
static int virtio_cuda_load_one(VirtIOCuda *s, QEMUFile *f, uint8_t *buf)
{
    struct vcu_session_open_req open;
    VirtIOCudaState st;
    const char *why;
    uint32_t status, len;
    uint64_t id;
    bool ok = true;
    int p[2];

    id = qemu_get_be64(f);
    qemu_get_buffer(f, (uint8_t *)&open, sizeof(open));
    if (!g_unix_open_pipe(p, FD_CLOEXEC, NULL)) {
        error_report("virtio-cuda: no pipe for session %" PRIx64, id);
        return -EIO;
    }
    (void)fcntl(p[1], F_SETPIPE_SZ, VIRTIO_CUDA_MIG_CHUNK);
    virtio_cuda_state_init(&st, VCU_BACKEND_OP_LOAD, id);
    vcu_proxy_session_restore(s->proxy, &st.r, &open, p[0]);
    close(p[0]);
    /*
     * The worker's spawn goes out now.  Read from a socket, the stream
     * yields to the main loop, which writes the link; read from a file
     * (a restore: migrate-incoming file:, virsh restore) it never does,
     * and the pipe, full, would wait for a worker never asked for.
     */
    virtio_cuda_link_bh(s);
    /* All of it is read, whatever the worker does with it: the stream
     * goes on behind it. */
    while ((len = qemu_get_be32(f)) != 0) {
        if (len > VIRTIO_CUDA_MIG_CHUNK) {
            close(p[1]);
            virtio_cuda_state_wait(&st, &why);
            error_report("virtio-cuda: session %" PRIx64 ": a chunk of %u "
                         "bytes in the stream", id, len);
            return -EINVAL;
        }
        qemu_get_buffer(f, buf, len);
        ok = ok && qemu_write_full(p[1], buf, len) == len;
    }
    close(p[1]);
    status = virtio_cuda_state_wait(&st, &why);
    if (status != VCU_S_OK) {
        error_report("virtio-cuda: session %" PRIx64 " could not be loaded "
                     "here: %s (status %u)", id, why[0] ? why : "no reason",
                     status);
        return -EINVAL;
    }
    return 0;
}

static int virtio_cuda_get_sessions(QEMUFile *f, void *pv, size_t size,
                                    const VMStateField *field)
{
    VirtIOCuda *s = pv;
    VirtIODevice *vdev = VIRTIO_DEVICE(s);
    g_autofree uint8_t *buf = g_malloc(VIRTIO_CUDA_MIG_CHUNK);
    VirtQueueElement *elem;
    uint32_t i, n;
    int ret;

    n = qemu_get_be32(f);
    if (n > VCU_PROXY_MAX_SESSIONS) {
        error_report("virtio-cuda: %u sessions in the stream", n);
        return -EINVAL;
    }
    for (i = 0; i < n; i++) {
        ret = virtio_cuda_load_one(s, f, buf);
        if (ret < 0) {
            return ret;
        }
    }
    /* The parked waits, sent again to the new workers. */
    n = qemu_get_be32(f);
    if (n > VIRTIO_CUDA_QUEUE_SIZE) {
        error_report("virtio-cuda: %u parked requests in the stream", n);
        return -EINVAL;
    }
    for (i = 0; i < n; i++) {
        elem = qemu_get_virtqueue_element(vdev, f, sizeof(VirtQueueElement));
        if (virtio_cuda_handle_req(s, elem)) {
            virtio_cuda_notify(s);
        }
    }
    trace_virtio_cuda_loaded(n);
    return 0;
}

static const VMStateDescription vmstate_virtio_cuda_sessions = {
    .name = "vcu-cuda/sessions",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (const VMStateField[]) {
        {
            .name = "sessions",
            .info = &(const VMStateInfo) {
                .name = "virtio-cuda sessions",
                .get = virtio_cuda_get_sessions,
                .put = virtio_cuda_put_sessions,
            },
        },
        VMSTATE_END_OF_LIST()
    },
};

/* Not named virtio-...: QEMU would take its subsection for one of the
 * virtio core's, whose names it reads by that prefix. */
const VMStateDescription vmstate_virtio_cuda = {
    .name = "vcu-cuda",
    .version_id = 1,
    .minimum_version_id = 1,
    .fields = (const VMStateField[]) {
        VMSTATE_VIRTIO_DEVICE,
        VMSTATE_END_OF_LIST()
    },
    .subsections = (const VMStateDescription * const []) {
        &vmstate_virtio_cuda_sessions,
        NULL,
    },
};
