/*
 * virtio-cuda-pci: the device in a migration, a snapshot or a suspend
 * to a file (docs/design.md, "Live migration"): requests in flight
 * drained at every stop, and each session's state carried in the
 * device's section of the stream.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "qemu/osdep.h"
#include "qapi/error.h"
#include "qemu/error-report.h"
#include "qemu/units.h"
#include "qemu/timer.h"
#include "qemu/thread.h"
#include "hw/virtio/virtio.h"
#include "migration/qemu-file-types.h"
#include "migration/register.h"
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
 *
 * Device memory goes mostly before the pause, in a live section of its
 * own ("vcu-cuda-pre"), while the VM runs: at the migration's setup each
 * session's pre-state (its history so far, no contents), which the
 * destination loads into a new worker at once; then, iteration by
 * iteration and within the migration's bandwidth, chunks of its device
 * memory, which the destination writes into that worker's allocations.
 * At the pause the device state carries, for those sessions, only the
 * rest: the calls made since, the allocations made since, and the chunks
 * whose hash changed.  A session whose pre-state cannot go (it used what
 * a migration cannot carry, or a capture is in progress) moves whole.
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

/* A state operation handed to the proxy, waited for. */
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

/* Waits for it; its status, its reason in why (and for the pass before
 * the pause, in *left, the bytes it has still to send). */
static uint32_t virtio_cuda_state_wait(VirtIOCudaState *st, const char **why,
                                       uint64_t *left)
{
    struct vcu_resp_hdr h = { .status = VCU_S_EIO };

    qemu_event_wait(&st->done);
    qemu_event_destroy(&st->done);
    if (st->r.resp_len >= sizeof(h)) {
        memcpy(&h, st->resp, sizeof(h));
    }
    if (left) {
        *left = h.status == VCU_S_OK && st->r.resp_len >= sizeof(h) + 8
                ? ldq_le_p(st->resp + sizeof(h)) : 0;
    }
    st->resp[sizeof(st->resp) - 1] = 0;
    *why = st->r.resp_len > sizeof(h) ? (const char *)st->resp + sizeof(h) : "";
    return h.status;
}

/*
 * What a state operation writes, copied into f: prefix (what names it
 * in the stream), then its bytes as chunks (be32 length, bytes; a 0
 * length ends them).  Neither goes out if the worker wrote nothing (a
 * refusal before the first byte).  The operation's status; *wrote.
 */
typedef struct VirtIOCudaOut {
    const char *why;
    uint64_t left;
    bool wrote;
} VirtIOCudaOut;

static uint32_t virtio_cuda_state_out(VirtIOCuda *s, QEMUFile *f, uint32_t op,
                                      uint64_t id, const uint8_t *prefix,
                                      size_t plen, uint8_t *buf,
                                      VirtIOCudaOut *o)
{
    VirtIOCudaState st;
    uint32_t status;
    int p[2];
    ssize_t n;

    o->wrote = false;
    o->left = 0;
    o->why = "";
    if (!g_unix_open_pipe(p, FD_CLOEXEC, NULL)) {
        o->why = "no pipe";
        return VCU_S_EIO;
    }
    /* A larger pipe: fewer trips between the worker and us. */
    (void)fcntl(p[0], F_SETPIPE_SZ, VIRTIO_CUDA_MIG_CHUNK);
    virtio_cuda_state_init(&st, op, id);
    vcu_proxy_session_state(s->proxy, &st.r, p[1]);
    close(p[1]);
    for (;;) {
        n = read(p[0], buf, VIRTIO_CUDA_MIG_CHUNK);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        if (!o->wrote) {
            qemu_put_buffer(f, prefix, plen);
            o->wrote = true;
        }
        qemu_put_be32(f, n);
        qemu_put_buffer(f, buf, n);
    }
    close(p[0]);
    if (o->wrote) {
        qemu_put_be32(f, 0);
    }
    status = virtio_cuda_state_wait(&st, &o->why, &o->left);
    if (status == VCU_S_OK && n < 0) {
        o->why = "reading its state failed";
        status = VCU_S_EIO;
    }
    return status;
}

/* The chunks of one state from f into a pipe to the worker, which loads
 * them (a session opened here as open says, or, open NULL, the session
 * already here).  0, or -errno. */
static int virtio_cuda_state_in(VirtIOCuda *s, QEMUFile *f, uint64_t id,
                                const struct vcu_session_open_req *open,
                                uint8_t *buf)
{
    VirtIOCudaState st;
    const char *why;
    uint32_t status, len;
    bool ok = true;
    int p[2];

    if (!g_unix_open_pipe(p, FD_CLOEXEC, NULL)) {
        error_report("virtio-cuda: no pipe for session %" PRIx64, id);
        return -EIO;
    }
    (void)fcntl(p[1], F_SETPIPE_SZ, VIRTIO_CUDA_MIG_CHUNK);
    virtio_cuda_state_init(&st, VCU_BACKEND_OP_LOAD, id);
    if (open) {
        vcu_proxy_session_restore(s->proxy, &st.r, open, p[0]);
    } else {
        vcu_proxy_session_state(s->proxy, &st.r, p[0]);
    }
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
            virtio_cuda_state_wait(&st, &why, NULL);
            error_report("virtio-cuda: session %" PRIx64 ": a chunk of %u "
                         "bytes in the stream", id, len);
            return -EINVAL;
        }
        qemu_get_buffer(f, buf, len);
        ok = ok && qemu_write_full(p[1], buf, len) == len;
    }
    close(p[1]);
    status = virtio_cuda_state_wait(&st, &why, NULL);
    if (status != VCU_S_OK) {
        error_report("virtio-cuda: session %" PRIx64 " could not be loaded "
                     "here: %s (status %u)", id, why[0] ? why : "no reason",
                     status);
        return -EINVAL;
    }
    return 0;
}

/* ---- the pass before the pause --------------------------------------------- */

/* What one iteration sends at most, of all sessions together. */
#define VIRTIO_CUDA_PRE_ITER (256 * MiB)

enum {
    VIRTIO_CUDA_PRE_END,        /* the section's end */
    VIRTIO_CUDA_PRE_OPEN,       /* be64 id, its SESSION_OPEN, its pre-state */
    VIRTIO_CUDA_PRE_CHUNKS,     /* be64 id, chunks of its device memory */
};

struct VirtIOCudaPre {
    uint64_t id;
    uint64_t left;              /* bytes still to send (source) */
    bool gone;                  /* closed since (source) */
};

static VirtIOCudaPre *virtio_cuda_pre_find(VirtIOCuda *s, uint64_t id)
{
    unsigned int i;

    for (i = 0; i < s->npre; i++) {
        if (s->pre[i].id == id) {
            return &s->pre[i];
        }
    }
    return NULL;
}

static void virtio_cuda_pre_reset(VirtIOCuda *s)
{
    g_free(s->pre);
    s->pre = NULL;
    s->npre = 0;
}

/* Setup (BQL held): each session's pre-state, as it is now. */
static int virtio_cuda_pre_setup(QEMUFile *f, void *opaque, Error **errp)
{
    VirtIOCuda *s = opaque;
    g_autofree uint64_t *ids = g_new(uint64_t, VCU_PROXY_MAX_SESSIONS);
    g_autofree struct vcu_session_open_req *opens =
        g_new(struct vcu_session_open_req, VCU_PROXY_MAX_SESSIONS);
    g_autofree uint8_t *buf = g_malloc(VIRTIO_CUDA_MIG_CHUNK);
    uint8_t prefix[12 + sizeof(struct vcu_session_open_req)];
    VirtIOCudaOut o;
    unsigned int i, n;
    uint32_t status;

    virtio_cuda_pre_reset(s);
    n = MIN(vcu_proxy_sessions(s->proxy, ids, opens, VCU_PROXY_MAX_SESSIONS),
            VCU_PROXY_MAX_SESSIONS);
    s->pre = g_new0(VirtIOCudaPre, MAX(n, 1));
    for (i = 0; i < n; i++) {
        stl_be_p(prefix, VIRTIO_CUDA_PRE_OPEN);
        stq_be_p(prefix + 4, ids[i]);
        memcpy(prefix + 12, &opens[i], sizeof(opens[i]));
        status = virtio_cuda_state_out(s, f, VCU_BACKEND_OP_PRE_SAVE, ids[i],
                                       prefix, sizeof(prefix), buf, &o);
        if (status == VCU_S_OK) {
            s->pre[s->npre].id = ids[i];
            s->pre[s->npre].left = o.left;
            s->npre++;
            trace_virtio_cuda_pre_begun(ids[i], o.left);
        } else if (o.wrote) {
            error_setg(errp, "virtio-cuda: session %" PRIx64 ": its pre-state "
                       "could not be written: %s (status %u)", ids[i], o.why,
                       status);
            return -EIO;
        } else {
            trace_virtio_cuda_pre_skipped(ids[i], o.why);
        }
    }
    qemu_put_be32(f, VIRTIO_CUDA_PRE_END);
    return 0;
}

/* Outside the BQL: chunks of each session's device memory, within the
 * migration's bandwidth.  1 once all went. */
static int virtio_cuda_pre_iterate(QEMUFile *f, void *opaque)
{
    VirtIOCuda *s = opaque;
    g_autofree uint8_t *buf = g_malloc(VIRTIO_CUDA_MIG_CHUNK);
    uint64_t sent = 0, left = 0;
    uint8_t prefix[12];
    VirtIOCudaOut o;
    unsigned int i;
    uint32_t status;

    for (i = 0; i < s->npre; i++) {
        VirtIOCudaPre *p = &s->pre[i];

        while (!p->gone && p->left > 0 && sent < VIRTIO_CUDA_PRE_ITER &&
               !migration_rate_exceeded(f)) {
            stl_be_p(prefix, VIRTIO_CUDA_PRE_CHUNKS);
            stq_be_p(prefix + 4, p->id);
            status = virtio_cuda_state_out(s, f, VCU_BACKEND_OP_PRE_COPY, p->id,
                                           prefix, sizeof(prefix), buf, &o);
            if (status == VCU_S_ENOSESSION && !o.wrote) {
                p->gone = true;     /* closed by the guest since */
                break;
            }
            if (status != VCU_S_OK) {
                error_report("virtio-cuda: session %" PRIx64 ": its device "
                             "memory could not be sent: %s (status %u)",
                             p->id, o.why, status);
                return -EIO;
            }
            trace_virtio_cuda_pre_sent(p->id, o.left);
            if (o.left >= p->left) {
                p->left = o.left;
                break;              /* no headway: the next iteration */
            }
            sent += p->left - o.left;
            p->left = o.left;
        }
        left += p->gone ? 0 : p->left;
    }
    qemu_put_be32(f, VIRTIO_CUDA_PRE_END);
    return left == 0;
}

static int virtio_cuda_pre_complete(QEMUFile *f, void *opaque)
{
    qemu_put_be32(f, VIRTIO_CUDA_PRE_END);
    return 0;
}

static void virtio_cuda_pre_pending(void *opaque, uint64_t *must_precopy,
                                    uint64_t *can_postcopy)
{
    VirtIOCuda *s = opaque;
    unsigned int i;

    for (i = 0; i < s->npre; i++) {
        *must_precopy += s->pre[i].gone ? 0 : s->pre[i].left;
    }
}

static void virtio_cuda_pre_cleanup(void *opaque)
{
    virtio_cuda_pre_reset(opaque);
}

/* Destination: a pre-state, or chunks, of each session the section names. */
static int virtio_cuda_pre_load(QEMUFile *f, void *opaque, int version_id)
{
    VirtIOCuda *s = opaque;
    g_autofree uint8_t *buf = g_malloc(VIRTIO_CUDA_MIG_CHUNK);
    struct vcu_session_open_req open;
    uint32_t tag;
    uint64_t id;
    int ret;

    while ((tag = qemu_get_be32(f)) != VIRTIO_CUDA_PRE_END) {
        id = qemu_get_be64(f);
        if (tag == VIRTIO_CUDA_PRE_OPEN) {
            qemu_get_buffer(f, (uint8_t *)&open, sizeof(open));
            if (virtio_cuda_pre_find(s, id) || s->npre >= VCU_PROXY_MAX_SESSIONS) {
                error_report("virtio-cuda: session %" PRIx64 " twice in the "
                             "stream, or too many", id);
                return -EINVAL;
            }
            ret = virtio_cuda_state_in(s, f, id, &open, buf);
            if (ret < 0) {
                return ret;
            }
            s->pre = g_renew(VirtIOCudaPre, s->pre, s->npre + 1);
            s->pre[s->npre++] = (VirtIOCudaPre) { .id = id };
            trace_virtio_cuda_pre_loaded(id);
        } else if (tag == VIRTIO_CUDA_PRE_CHUNKS && virtio_cuda_pre_find(s, id)) {
            ret = virtio_cuda_state_in(s, f, id, NULL, buf);
            if (ret < 0) {
                return ret;
            }
        } else {
            error_report("virtio-cuda: a pass before the pause names session "
                         "%" PRIx64 " as %u", id, tag);
            return -EINVAL;
        }
    }
    return 0;
}

static int virtio_cuda_pre_load_setup(QEMUFile *f, void *opaque, Error **errp)
{
    virtio_cuda_pre_reset(opaque);
    return 0;
}

static int virtio_cuda_pre_load_cleanup(void *opaque)
{
    virtio_cuda_pre_reset(opaque);
    return 0;
}

static const SaveVMHandlers virtio_cuda_pre_handlers = {
    .save_setup = virtio_cuda_pre_setup,
    .save_live_iterate = virtio_cuda_pre_iterate,
    .save_live_complete_precopy = virtio_cuda_pre_complete,
    .state_pending_estimate = virtio_cuda_pre_pending,
    .state_pending_exact = virtio_cuda_pre_pending,
    .save_cleanup = virtio_cuda_pre_cleanup,
    .load_state = virtio_cuda_pre_load,
    .load_setup = virtio_cuda_pre_load_setup,
    .load_cleanup = virtio_cuda_pre_load_cleanup,
};

void virtio_cuda_migration_init(VirtIOCuda *s)
{
    register_savevm_live("vcu-cuda-pre", VMSTATE_INSTANCE_ID_ANY, 1,
                         &virtio_cuda_pre_handlers, s);
}

void virtio_cuda_migration_fini(VirtIOCuda *s)
{
    unregister_savevm(NULL, "vcu-cuda-pre", s);
    virtio_cuda_pre_reset(s);
}

/* ---- the device state, at the pause --------------------------------------- */

/* Closes session id here (a pre-state loaded for a session that the
 * source no longer has, or sends whole). */
static void virtio_cuda_close_one(VirtIOCuda *s, uint64_t id)
{
    VirtIOCudaState st;
    const char *why;

    virtio_cuda_state_init(&st, VCU_OP_SESSION_CLOSE, id);
    vcu_proxy_submit(s->proxy, &st.r);
    virtio_cuda_link_bh(s);
    virtio_cuda_state_wait(&st, &why, NULL);
}

enum {
    VIRTIO_CUDA_WHOLE,          /* the session's whole state */
    VIRTIO_CUDA_REST,           /* the rest of a pass before the pause */
};

/* One session's state from its worker into f: the rest of its pass
 * before the pause if it had one, else whole. */
static int virtio_cuda_save_one(VirtIOCuda *s, QEMUFile *f, uint64_t id,
                                const struct vcu_session_open_req *open,
                                uint8_t *buf)
{
    uint8_t prefix[8 + sizeof(*open) + 4];
    VirtIOCudaPre *p = virtio_cuda_pre_find(s, id);
    uint32_t status = VCU_S_EIO;
    VirtIOCudaOut o = { .why = "" };

    stq_be_p(prefix, id);
    memcpy(prefix + 8, open, sizeof(*open));
    if (p && !p->gone) {
        stl_be_p(prefix + 8 + sizeof(*open), VIRTIO_CUDA_REST);
        status = virtio_cuda_state_out(s, f, VCU_BACKEND_OP_SAVE_REST, id,
                                       prefix, sizeof(prefix), buf, &o);
    }
    if (status != VCU_S_OK && !o.wrote) {
        /* No pass before the pause, or another session under its id. */
        stl_be_p(prefix + 8 + sizeof(*open), VIRTIO_CUDA_WHOLE);
        status = virtio_cuda_state_out(s, f, VCU_BACKEND_OP_SAVE, id, prefix,
                                       sizeof(prefix), buf, &o);
    }
    if (status != VCU_S_OK || !o.wrote) {
        error_report("virtio-cuda: session %" PRIx64 " cannot migrate: %s "
                     "(status %u)", id, o.why[0] ? o.why : "it wrote nothing",
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
        ret = virtio_cuda_save_one(s, f, ids[i], &opens[i], buf);
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

/* One session's state from f: the rest of its pass before the pause,
 * into the worker its pre-state was loaded into, or whole, into a new
 * worker of this host's daemon. */
static int virtio_cuda_load_one(VirtIOCuda *s, QEMUFile *f, uint8_t *buf,
                                bool *seen)
{
    struct vcu_session_open_req open;
    VirtIOCudaPre *p;
    uint32_t kind;
    uint64_t id;

    id = qemu_get_be64(f);
    qemu_get_buffer(f, (uint8_t *)&open, sizeof(open));
    kind = qemu_get_be32(f);
    p = virtio_cuda_pre_find(s, id);
    if (p) {
        seen[p - s->pre] = true;
    }
    if (kind == VIRTIO_CUDA_REST && p) {
        return virtio_cuda_state_in(s, f, id, NULL, buf);
    }
    if (kind != VIRTIO_CUDA_WHOLE) {
        error_report("virtio-cuda: session %" PRIx64 ": the rest of a pass "
                     "before the pause that did not begin here", id);
        return -EINVAL;
    }
    if (p) {
        virtio_cuda_close_one(s, id);   /* sent whole after all */
    }
    return virtio_cuda_state_in(s, f, id, &open, buf);
}

static int virtio_cuda_get_sessions(QEMUFile *f, void *pv, size_t size,
                                    const VMStateField *field)
{
    VirtIOCuda *s = pv;
    VirtIODevice *vdev = VIRTIO_DEVICE(s);
    g_autofree uint8_t *buf = g_malloc(VIRTIO_CUDA_MIG_CHUNK);
    g_autofree bool *seen = NULL;
    VirtQueueElement *elem;
    uint32_t i, n;
    int ret;

    n = qemu_get_be32(f);
    if (n > VCU_PROXY_MAX_SESSIONS) {
        error_report("virtio-cuda: %u sessions in the stream", n);
        return -EINVAL;
    }
    seen = g_new0(bool, MAX(s->npre, 1));
    for (i = 0; i < n; i++) {
        ret = virtio_cuda_load_one(s, f, buf, seen);
        if (ret < 0) {
            return ret;
        }
    }
    /* Pre-states of sessions the guest closed before the pause. */
    for (i = 0; i < s->npre; i++) {
        if (!seen[i]) {
            virtio_cuda_close_one(s, s->pre[i].id);
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
    .version_id = 2,
    .minimum_version_id = 2,
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
