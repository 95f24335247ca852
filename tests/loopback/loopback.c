/*
 * Loopback transport, a test fixture (guest-lib builds it in with
 * LOOPBACK=1 only, for the tests): an in-process host backend stands in
 * for the kernel driver, the virtqueue and QEMU, so the runtime, the
 * backend and a CUDA stand-in run natively in tests.
 *
 * This file plays the kernel's part: it frames each request (header,
 * payload padded to 8, segment table without ranges) and hands the
 * backend iovecs that point straight at the user buffers.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "vcu_account.h"
#include "vcu_backend.h"
#include "vcu_transport_int.h"

struct vcu__loop_s {
    vcu_backend_t *be;
    vcu_account_t *acct;            /* VCU_LOOPBACK_QUOTA_MB's, or NULL */
    uint64_t session;
    atomic_uint_fast64_t next_id;
};

static void vcu__loop_done(vcu_request_t *req)
{
    (void)req;
}

/* Runs one framed request; *status gets the reply's wire status. */
static int vcu__loop_run(vcu__loop_t *l, uint32_t opcode, uint32_t flags, const void *req,
                         uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs,
                         void *resp, uint32_t resp_cap, uint32_t *resp_len, uint32_t *status)
{
    struct iovec iov[VCU_MAX_SEGS];
    vcu_segment_t segs[VCU_MAX_SEGS];
    struct vcu_req_hdr *h;
    struct vcu_seg *ws;
    struct vcu_resp_hdr *rh;
    vcu_request_t r;
    size_t pad = ((size_t)req_len + 7) & ~(size_t)7;
    size_t len = sizeof(*h) + pad + nbufs * sizeof(*ws);
    /* Nobody reads an async request's reply, but the backend still
     * writes one: give it room as the kernel driver does. */
    int async = (flags & VCU_CALL_ASYNC) != 0;
    size_t rcap = sizeof(*rh) + (async ? VCU_MAX_PAYLOAD : resp_cap);
    char *buf, *rbuf;
    unsigned int i;
    int err = 0;

    buf = calloc(1, len);
    rbuf = calloc(1, rcap);
    if (buf == NULL || rbuf == NULL) {
        err = VCU_ENOMEM;
        goto out;
    }
    h = (struct vcu_req_hdr *)buf;
    h->opcode = opcode;
    h->flags = (flags & VCU_CALL_ASYNC) ? VCU_REQ_F_ASYNC : 0;
    h->session = l->session;
    h->req_id = atomic_fetch_add(&l->next_id, 1);
    h->payload_len = req_len;
    h->nsegs = (uint16_t)nbufs;
    if (req_len)
        memcpy(buf + sizeof(*h), req, req_len);
    ws = (struct vcu_seg *)(buf + sizeof(*h) + pad);
    for (i = 0; i < nbufs; i++) {
        ws[i].len = bufs[i].len;
        ws[i].nranges = 0;
        ws[i].flags = bufs[i].flags;
        iov[i].iov_base = bufs[i].addr;
        iov[i].iov_len = bufs[i].len;
        segs[i].iov = &iov[i];
        segs[i].iovcnt = 1;
        segs[i].len = bufs[i].len;
        segs[i].flags = bufs[i].flags;
    }

    memset(&r, 0, sizeof(r));
    r.req = buf;
    r.req_len = len;
    r.segs = segs;
    r.nsegs = nbufs;
    r.resp = rbuf;
    r.resp_cap = rcap;
    r.done = vcu__loop_done;
    err = vcu_backend_execute(l->be, &r);
    if (err != 0 || async)
        goto out;
    if (r.resp_len < sizeof(*rh)) {
        err = VCU_EIO;
        goto out;
    }
    rh = (struct vcu_resp_hdr *)rbuf;
    *status = rh->status;
    if (rh->payload_len > resp_cap || rh->payload_len > r.resp_len - sizeof(*rh)) {
        err = VCU_ERANGE;
        goto out;
    }
    if (resp != NULL && rh->payload_len)
        memcpy(resp, rbuf + sizeof(*rh), rh->payload_len);
    if (resp_len != NULL)
        *resp_len = rh->payload_len;
out:
    free(buf);
    free(rbuf);
    return err;
}

int vcu__loop_open(vcu_conn_t *c, uint64_t features)
{
    vcu_backend_config_t cfg;
    struct vcu_session_open_req oreq;
    struct vcu_session_open_resp oresp;
    uint32_t status = VCU_S_OK, rlen = 0;
    const char *quota;
    vcu__loop_t *l;
    int err;

    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return VCU_ENOMEM;
    atomic_init(&l->next_id, 1);
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = getenv("VCU_GPUS");
    cfg.libcuda = getenv("VCU_LIBCUDA");
    /* The in-process backend's module cache: a directory, as the device's
     * module-cache property (tests); unset: none. */
    cfg.module_cache = getenv("VCU_LOOPBACK_MODULE_CACHE");
    /* The VM's GPU memory quota, in MiB (tests of the quota: a program
     * may set it before its first call); each context is charged 1 MiB
     * (the unit tests' figure), not a real context's.  Unset: none. */
    quota = getenv("VCU_LOOPBACK_QUOTA_MB");
    if (quota != NULL && strtoull(quota, NULL, 10) > 0) {
        err = vcu__acct_new(strtoull(quota, NULL, 10) << 20, 8, &l->acct);
        if (err != 0)
            goto err_new;
        cfg.account = l->acct;
        cfg.account_slot = -1;
        cfg.ctx_bytes = 1u << 20;
    }
    /* CUDA IPC between the test's processes, each a backend of its own
     * as each guest process has a worker: the host's /dev/shm stands for
     * the VM's folder, or the folder VCU_LOOPBACK_IPC_DIR names. */
    cfg.ipc_dir = getenv("VCU_LOOPBACK_IPC_DIR") != NULL ? getenv("VCU_LOOPBACK_IPC_DIR")
                                                         : "/dev/shm";
    /* The host's NVML is not the libnvidia-ml.so.1 of this process (the
     * guest's, whose calls would come back here): none, unless a test
     * names one (VCU_HOST_NVML, host-backend/worker/cuda_ctx.c). */
    setenv("VCU_HOST_NVML", "none", 0);
    /* Pinned memory registered with the driver (vcu__loop_add_ram). */
    cfg.register_ram = 1;
    err = vcu_backend_new(&cfg, &l->be);
    if (err != 0)
        goto err_new;

    memset(&oreq, 0, sizeof(oreq));
    oreq.version_min = VCU_PROTO_VERSION;
    oreq.version_max = VCU_PROTO_VERSION;
    oreq.features = features;
    memset(&oresp, 0, sizeof(oresp));
    err = vcu__loop_run(l, VCU_OP_SESSION_OPEN, 0, &oreq, sizeof(oreq), NULL, 0, &oresp,
                        sizeof(oresp), &rlen, &status);
    if (err == 0 && status != VCU_S_OK)
        err = vcu__status_to_err(status);
    if (err == 0 && (rlen < sizeof(oresp) || oresp.version != VCU_PROTO_VERSION))
        err = VCU_EVERSION;
    if (err != 0)
        goto err_session;
    l->session = oresp.session;
    c->loop = l;
    c->fd = -1;
    c->features = oresp.features & features;
    c->max_xfer = oresp.max_xfer ? oresp.max_xfer : VCU_MAX_XFER;
    c->max_payload = oresp.max_payload ? oresp.max_payload : VCU_MAX_PAYLOAD;
    c->max_segs = oresp.max_segs ? oresp.max_segs : VCU_MAX_SEGS;
    return 0;

err_session:
    vcu_backend_free(l->be);
err_new:
    vcu__acct_put(l->acct);
    free(l);
    return err;
}

void vcu__loop_close(vcu_conn_t *c)
{
    vcu__loop_t *l = c->loop;
    uint32_t status;

    vcu__loop_run(l, VCU_OP_SESSION_CLOSE, 0, NULL, 0, NULL, 0, NULL, 0, NULL, &status);
    vcu_backend_free(l->be);
    vcu__acct_put(l->acct);
    free(l);
    c->loop = NULL;
}

int vcu__loop_call(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                   uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                   uint32_t resp_cap, uint32_t *resp_len, uint32_t *status)
{
    if (VCU_OP_IS_TRANSPORT(opcode))
        return VCU_ENOTSUP;     /* the kernel refuses these too (-EPERM) */
    return vcu__loop_run(c->loop, opcode, flags, req, req_len, bufs, nbufs, resp, resp_cap,
                         resp_len, status);
}

/* Whole pages: what the driver pins. */
static void vcu__loop_pages(void **p, size_t *len)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)*p & ~(pg - 1);
    uintptr_t e = ((uintptr_t)*p + *len + pg - 1) & ~(pg - 1);

    *p = (void *)a;
    *len = e - a;
}

int vcu__loop_add_ram(vcu_conn_t *c, void *p, size_t len)
{
    vcu__loop_pages(&p, &len);
    return vcu_backend_add_ram(c->loop->be, p, len);
}

void vcu__loop_remove_ram(vcu_conn_t *c, void *p, size_t len)
{
    vcu__loop_pages(&p, &len);
    (void)vcu_backend_remove_ram(c->loop->be, p, len);
}
