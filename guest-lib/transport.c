/*
 * guest-lib transport over the virtio-cuda kernel driver (/dev/vcudaN).
 *
 * A connection is one open file, hence one device session.  The driver lets
 * several threads submit on one file at once, so vcu_conn_call() takes no
 * lock of its own: the connection is read-only after vcu_conn_open(), but
 * for the batch of coalesced async requests (batch.c), which has one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vcuda_ioctl.h"
#include "vcu_transport_int.h"

_Static_assert(sizeof(struct vcuda_session_open) == 72, "vcuda_session_open");
_Static_assert(sizeof(struct vcuda_seg) == 24, "vcuda_seg");
_Static_assert(sizeof(struct vcuda_submit) == 72, "vcuda_submit");
_Static_assert(VCUDA_SEG_TO_DEVICE == VCU_SEG_TO_DEVICE, "segment flags");
_Static_assert(VCUDA_SEG_FROM_DEVICE == VCU_SEG_FROM_DEVICE, "segment flags");
_Static_assert(VCUDA_MAX_SEGS == VCU_MAX_SEGS, "segment limit");

int vcu_errno_to_err(int errnum)
{
    switch (errnum < 0 ? -errnum : errnum) {
    case 0:
        return VCU_OK;
    case EINVAL:
        return VCU_EINVAL;
    case ENOTTY:
    case EOPNOTSUPP:
    case ENOSYS:
        return VCU_ENOTSUP;
    case ENOTCONN:
        return VCU_ENOSESSION;
    case ENOMEM:
        return VCU_ENOMEM;
    case EFAULT:
        return VCU_EFAULT;
    case E2BIG:
    case EMSGSIZE:
        return VCU_E2BIG;
    case EPROTO:
    case EPROTONOSUPPORT:
        return VCU_EVERSION;
    case EBUSY:
    case EAGAIN:
    case EMFILE:
    case ENFILE:
        return VCU_EBUSY;
    case ENOENT:
    case ENODEV:
    case ENXIO:
    case EACCES:
    case EPERM:
        return VCU_ENODEV;
    case ECANCELED:
    case ESHUTDOWN:
        return VCU_ECANCELED;
    case ERANGE:
    case EOVERFLOW:
        return VCU_ERANGE;
    default:
        /* EINTR included: the request still completes on the device, so
         * it must not be sent again; the caller sees a failed call. */
        return VCU_EIO;
    }
}

int vcu__status_to_err(uint32_t status)
{
    if (status < VCU_S_COUNT_)
        return -(int)status;
    return VCU_EIO;
}

/* VCU_FEAT_BATCH is asked for with the CUDA and async features, unless
 * VCU_BATCH=0. */
static uint64_t vcu__conn_want(uint64_t features)
{
    const char *e = getenv("VCU_BATCH");

    if ((features & (VCU_FEAT_CUDA | VCU_FEAT_ASYNC)) == (VCU_FEAT_CUDA | VCU_FEAT_ASYNC) &&
        (e == NULL || strcmp(e, "0") != 0))
        features |= VCU_FEAT_BATCH;
    return features;
}

static int vcu__conn_batch_open(vcu_conn_t *c)
{
    if (!(c->features & VCU_FEAT_BATCH))
        return 0;
    return vcu__batch_open(c);
}

int vcu_conn_open(const char *path, uint64_t features, vcu_conn_t **out)
{
    struct vcuda_session_open so;
    vcu_conn_t *c;
    int err;

    *out = NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return VCU_ENOMEM;
    c->fd = -1;
    features = vcu__conn_want(features);

#ifdef VCU_WITH_LOOPBACK
    {
        const char *t = getenv("VCU_TRANSPORT");

        if (path == NULL && t != NULL && strcmp(t, "loopback") == 0) {
            err = vcu__loop_open(c, features);
            if (err == 0 && (err = vcu__conn_batch_open(c)) != 0)
                vcu__loop_close(c);
            if (err != 0) {
                free(c);
                return err;
            }
            *out = c;
            return 0;
        }
    }
#endif

    if (path == NULL)
        path = getenv("VCU_DEVICE");
    if (path == NULL || path[0] == '\0')
        path = "/dev/vcuda0";
    c->fd = open(path, O_RDWR | O_CLOEXEC);
    if (c->fd < 0) {
        err = vcu_errno_to_err(errno);
        goto err_open;
    }

    memset(&so, 0, sizeof(so));
    so.version_min = VCU_PROTO_VERSION;
    so.version_max = VCU_PROTO_VERSION;
    so.features = features;
    if (ioctl(c->fd, VCUDA_IOC_SESSION_OPEN, &so) != 0) {
        err = vcu_errno_to_err(errno);
        goto err_session;
    }
    if (so.status != VCU_S_OK) {
        err = vcu__status_to_err(so.status);
        goto err_session;
    }
    if (so.version != VCU_PROTO_VERSION) {
        err = VCU_EVERSION;
        goto err_session;
    }
    c->features = so.features & features;
    c->max_xfer = so.max_xfer ? so.max_xfer : VCU_MAX_XFER;
    c->max_payload = so.max_payload ? so.max_payload : VCU_MAX_PAYLOAD;
    c->max_segs = so.max_segs ? so.max_segs : VCU_MAX_SEGS;
    err = vcu__conn_batch_open(c);
    if (err != 0)
        goto err_session;
    *out = c;
    return 0;

err_session:
    close(c->fd);
err_open:
    free(c);
    return err;
}

void vcu_conn_close(vcu_conn_t *c)
{
    if (c == NULL)
        return;
    vcu__batch_close(c);
#ifdef VCU_WITH_LOOPBACK
    if (c->loop != NULL)
        vcu__loop_close(c);
#endif
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

uint64_t vcu_conn_features(const vcu_conn_t *c)
{
    return c->features;
}

int vcu_conn_call(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                  uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                  uint32_t resp_cap, uint32_t *resp_len)
{
    int err;

    if (resp_len != NULL)
        *resp_len = 0;
    if (c->batch != NULL) {
        if ((flags & VCU_CALL_ASYNC) && nbufs == 0 && vcu_batch_op_ok(opcode) &&
            req_len <= c->max_payload) {
            err = vcu__batch_add(c, opcode, req, req_len);
            if (err != VCU__BATCH_NOT_TAKEN)
                return err;
        } else if (opcode != VCU_OP_CU_CALLBACK_WAIT && opcode != VCU_OP_CU_CALLBACK_DONE) {
            /* Everything before this call goes first; but not before the
             * host-callback thread's calls: a batch being sent may wait
             * on the host for a callback, which waits on them. */
            if ((err = vcu__batch_flush(c)) != 0)
                return err;
        }
    }
    return vcu__conn_send(c, opcode, flags, req, req_len, bufs, nbufs, resp, resp_cap,
                          resp_len);
}

int vcu__conn_send(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                   uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                   uint32_t resp_cap, uint32_t *resp_len)
{
    struct vcuda_seg segs[VCU_MAX_SEGS];
    struct vcuda_submit sub;
    unsigned int i;

    if (resp_len != NULL)
        *resp_len = 0;
    if (nbufs > c->max_segs || nbufs > VCU_MAX_SEGS || req_len > c->max_payload)
        return VCU_E2BIG;
    if (resp_cap > c->max_payload)
        resp_cap = c->max_payload;

#ifdef VCU_WITH_LOOPBACK
    if (c->loop != NULL) {
        uint32_t status = VCU_S_OK;
        int err = vcu__loop_call(c, opcode, flags, req, req_len, bufs, nbufs, resp, resp_cap,
                                 resp_len, &status);

        if (err != 0)
            return err;
        return vcu__status_to_err(status);
    }
#endif

    memset(segs, 0, sizeof(segs));
    for (i = 0; i < nbufs; i++) {
        segs[i].addr = (uint64_t)(uintptr_t)bufs[i].addr;
        segs[i].len = bufs[i].len;
        segs[i].flags = bufs[i].flags == VCU_SEG_FROM_DEVICE ? VCUDA_SEG_FROM_DEVICE
                                                             : VCUDA_SEG_TO_DEVICE;
    }
    memset(&sub, 0, sizeof(sub));
    sub.opcode = opcode;
    sub.flags = (flags & VCU_CALL_ASYNC) ? VCUDA_SUBMIT_ASYNC : 0;
    sub.req_addr = (uint64_t)(uintptr_t)req;
    sub.req_len = req_len;
    sub.nsegs = nbufs;
    sub.segs_addr = (uint64_t)(uintptr_t)segs;
    sub.resp_addr = (uint64_t)(uintptr_t)resp;
    sub.resp_cap = resp != NULL ? resp_cap : 0;
    if (ioctl(c->fd, VCUDA_IOC_SUBMIT, &sub) != 0)
        return vcu_errno_to_err(errno);
    if (flags & VCU_CALL_ASYNC)
        return 0;
    if (resp_len != NULL)
        *resp_len = sub.resp_len;
    return vcu__status_to_err(sub.status);
}

/*
 * Where the driver's pinned memory goes in this process: bottom up in a
 * window of its own (64-96 TiB), a hint the kernel takes where it is
 * free.  With unified addressing a page-locked host pointer is its own
 * device pointer, and the host maps the memory at the same address in
 * the session's worker when asked (CU_HOST_DEVICE_POINTER_AT); there this
 * window is clear of the worker's own guest-RAM window (16-64 TiB), of
 * its libraries and of the device memory the driver places below them.
 */
#define VCU__PINNED_WINDOW 0x400000000000ull
#define VCU__PINNED_WINDOW_END 0x600000000000ull
#define VCU__PINNED_ALIGN (2ull << 20)

static void *vcu__pinned_hint(size_t len)
{
    static _Atomic uint64_t next = VCU__PINNED_WINDOW;
    /* A 2 MiB gap after each: an overrun faults here as it would natively. */
    uint64_t span = ((uint64_t)len + 2 * VCU__PINNED_ALIGN - 1) & ~(VCU__PINNED_ALIGN - 1);
    uint64_t at = atomic_fetch_add(&next, span);

    return at + span <= VCU__PINNED_WINDOW_END && at + span > at ? (void *)(uintptr_t)at : NULL;
}

int vcu_conn_hostmem_alloc(vcu_conn_t *c, size_t len, void **out, int *stable)
{
    void *p = MAP_FAILED;

    *out = NULL;
    *stable = 0;
    if (len == 0)
        return VCU_EINVAL;
    if (c->fd >= 0) {
        p = mmap(vcu__pinned_hint(len), len, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
        if (p != MAP_FAILED) {
            *stable = 1;
            *out = p;
            return 0;
        }
        /* An older driver has no mmap; anything else is a real failure. */
        if (errno != ENODEV && errno != EINVAL)
            return vcu_errno_to_err(errno);
    }
    /* Locked, so the driver's pinning and the host's DMA never wait for
     * a page fault. */
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1,
             0);
    if (p == MAP_FAILED)
        return VCU_ENOMEM;
    (void)mlock(p, len);
#ifdef VCU_WITH_LOOPBACK
    /* Loopback finishes every request before the call returns, and the
     * driver under it maps the memory as a worker maps guest RAM. */
    if (c->loop != NULL)
        *stable = vcu__loop_add_ram(c, p, len) == 0;
#endif
    *out = p;
    return 0;
}

int vcu_conn_host_register(vcu_conn_t *c, void *p, size_t len, int *stable)
{
    struct vcuda_host_register r;

    *stable = 0;
#ifdef VCU_WITH_LOOPBACK
    if (c->loop != NULL) {
        *stable = vcu__loop_add_ram(c, p, len) == 0;
        return 0;
    }
#endif
    if (c->fd < 0)
        return 0;
    memset(&r, 0, sizeof(r));
    r.addr = (uint64_t)(uintptr_t)p;
    r.len = len;
    if (ioctl(c->fd, VCUDA_IOC_HOST_REGISTER, &r) != 0) {
        if (errno == ENOTTY)
            return 0;
        return errno == EEXIST ? VCU_EBUSY : vcu_errno_to_err(errno);
    }
    *stable = 1;
    return 0;
}

void vcu_conn_host_unregister(vcu_conn_t *c, void *p, size_t len)
{
    struct vcuda_host_register r;

#ifdef VCU_WITH_LOOPBACK
    if (c->loop != NULL) {
        vcu__loop_remove_ram(c, p, len);
        return;
    }
#else
    (void)len;
#endif
    if (c->fd < 0)
        return;
    /* The requests that use the pages go first. */
    (void)vcu__batch_flush(c);
    memset(&r, 0, sizeof(r));
    r.addr = (uint64_t)(uintptr_t)p;
    /* The driver unpins once the host has stopped using the pages. */
    (void)ioctl(c->fd, VCUDA_IOC_HOST_UNREGISTER, &r);
}

void vcu_conn_hostmem_free(vcu_conn_t *c, void *p, size_t len)
{
    /* For the driver's mapping, munmap fences the session's host work
     * before the pages are freed: the requests that use them go first. */
    (void)vcu__batch_flush(c);
#ifdef VCU_WITH_LOOPBACK
    if (c->loop != NULL && p != NULL)
        vcu__loop_remove_ram(c, p, len);
#endif
    if (p != NULL)
        munmap(p, len);
}
