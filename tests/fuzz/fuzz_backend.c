/*
 * libFuzzer target for the host backend (host-backend/): a hostile guest's
 * requests, run against the CPU stand-in for libcuda (tests/fakecuda).
 *
 * One backend per process (devices "0,1"), one session with CUDA|ECHO|ASYNC
 * and a few handles made by well-formed setup calls (a buffer, a stream, an
 * event, a module and its function, a graph, the default pool).  Each input
 * is a short sequence of requests:
 *
 *   u8 op        index into the VCU_OP_MAP list
 *   u8 flags     F_* below
 *   u8 plen      payload bytes taken from the input
 *   u8 segs      bits 0-1: number of segments (0-3); 2-7: patches (0-3) ...
 *   per patch    u8 slot (u64 index in the payload), u8 handle index
 *   per segment  u8 dirflags, u16 offset, u16 len, u8 split
 *   payload      plen bytes (zero padded up to the opcode's struct unless F_SHORT)
 *
 * Segments point into a buffer the harness owns, never outside it.  A
 * request that does not complete within $FUZZ_TIMEOUT_MS (default 5: a
 * parked callback wait, a stream blocked by a host function) ends by a
 * backend reset, which completes it; requests that do complete take tens
 * of microseconds.  The replay in the test suite sets 1000, so that load
 * on the machine cannot turn a slow request into a reset.  An ECHO's
 * delay is cut to 0 or 1 ms unless it is out of range, so that delays are
 * exercised without each costing a timeout.  The session is rebuilt every $FUZZ_RESET_EVERY
 * inputs (default 1) and whenever it is gone or the context has a sticky
 * error.
 *
 * Speed: the harness sleeps on a condition variable until the backend's
 * completion callback (no polling), and the stand-in's devices have
 * FUZZ_DEVICE_MEM_MB each, so a larger cuMemAlloc fails as out of memory
 * at once (the stand-in backs device memory with host memory; under ASan
 * a multi-GiB allocation costs tens of milliseconds, and as much again
 * to poison its shadow when freed).  See docs/fuzzing.md.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vcu_backend.h"

#define FUZZ_TIMEOUT_MS 5
#define FUZZ_MAX_ALLOC_MB 256    /* any one malloc (ASan returns NULL beyond) */
#define FUZZ_DEVICE_MEM_MB "32"  /* the stand-in's memory per device */
#define FUZZ_MAX_REQS 8
#define FUZZ_DATA (64 * 1024)

/* The opcodes and their request structs. */
typedef struct {
    uint32_t op;
    uint32_t size;
} fz_op_t;
#define FZ_OP_(name, num, req, resp) {num, (uint32_t)sizeof(struct req)},
static const fz_op_t fz_ops[] = {VCU_OP_MAP(FZ_OP_)};
#undef FZ_OP_
#define FZ_NOPS (sizeof(fz_ops) / sizeof(fz_ops[0]))

/* Request flag bits from the input. */
#define F_ASYNC 0x01        /* VCU_REQ_F_ASYNC */
#define F_RAWFLAGS 0x02     /* header flags = next input byte (garbage) */
#define F_BADSESS 0x04      /* a session id other than ours */
#define F_PLEN_LIE 0x08     /* header payload_len = next input u16 */
#define F_SHORT 0x10        /* do not pad the payload up to the struct */
#define F_SEG_LIE 0x20      /* wire segment table differs (len/flags/nranges) */
#define F_NSEG_LIE 0x40     /* header nsegs off by one */
#define F_TRUNC 0x80        /* req_len short by the next input byte */

typedef struct {
    vcu_request_t r;
    int done;                   /* under fz_lock; fz_cond signals it */
    uint64_t reqbuf[(32 + VCU_MAX_PAYLOAD + 8 + 4 * 16) / 8];
    uint64_t respbuf[(24 + VCU_MAX_PAYLOAD) / 8];
    vcu_segment_t segs[4];
    struct iovec iov[4][4];
} fz_req_t;

static vcu_backend_t *be;
static uint64_t sess;
static uint64_t handles[16];
static unsigned int inputs_since_reset;
static unsigned int reset_every = 1;
static unsigned int timeout_ms = FUZZ_TIMEOUT_MS;
static unsigned char data[FUZZ_DATA];
static fz_req_t reqs[FUZZ_MAX_REQS];
static int need_reset = 1;
static int debug;           /* $FUZZ_DEBUG: print each request and its status */

/* fz_lock protects every fz_req_t's done; the completion callback (a
 * backend thread, or this one inside submit or reset) takes it. */
static pthread_mutex_t fz_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fz_cond;

static void fz_done(vcu_request_t *r)
{
    pthread_mutex_lock(&fz_lock);
    ((fz_req_t *)r)->done = 1;
    pthread_cond_broadcast(&fz_cond);
    pthread_mutex_unlock(&fz_lock);
}

/* Waits for t until the deadline; returns t->done. */
static int fz_wait(fz_req_t *t, const struct timespec *end)
{
    int done;

    pthread_mutex_lock(&fz_lock);
    while (!t->done && pthread_cond_timedwait(&fz_cond, &fz_lock, end) == 0)
        ;
    done = t->done;
    pthread_mutex_unlock(&fz_lock);
    return done;
}

/* Runs a built request; 0 if it completed in time, else resets the backend. */
static int fz_run(fz_req_t *t)
{
    struct timespec end;

    t->done = 0;
    t->r.resp = t->respbuf;
    t->r.resp_cap = sizeof(t->respbuf);
    t->r.done = fz_done;
    vcu_backend_submit(be, &t->r);
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += timeout_ms / 1000;
    end.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    if (fz_wait(t, &end))
        return 0;
    vcu_backend_reset(be);      /* completes every request */
    if (!fz_wait(t, &end)) {
        fprintf(stderr, "fuzz: request not completed by vcu_backend_reset\n");
        abort();
    }
    need_reset = 1;
    return -1;
}

static uint32_t fz_status(fz_req_t *t)
{
    return ((struct vcu_resp_hdr *)t->respbuf)->status;
}

static void *fz_resp(fz_req_t *t)
{
    return (struct vcu_resp_hdr *)t->respbuf + 1;
}

/* A well-formed request: payload p, at most one segment. */
static uint64_t fz_call(uint32_t op, uint64_t session, const void *p, uint32_t plen, uint32_t segflags,
                        void *seg, size_t seglen)
{
    fz_req_t *t = &reqs[0];
    struct vcu_req_hdr *h = (struct vcu_req_hdr *)t->reqbuf;
    size_t padded = (plen + 7) & ~7u;
    unsigned int ns = seg ? 1 : 0;

    memset(t->reqbuf, 0, sizeof(t->reqbuf));
    h->opcode = op;
    h->session = session;
    h->req_id = 1;
    h->payload_len = plen;
    h->nsegs = (uint16_t)ns;
    memcpy(h + 1, p, plen);
    if (ns) {
        struct vcu_seg *w = (struct vcu_seg *)((char *)(h + 1) + padded);

        w->len = seglen;
        w->nranges = 1;
        w->flags = segflags;
        t->iov[0][0].iov_base = seg;
        t->iov[0][0].iov_len = seglen;
        t->segs[0].iov = t->iov[0];
        t->segs[0].iovcnt = 1;
        t->segs[0].len = seglen;
        t->segs[0].flags = segflags;
    }
    t->r.req = t->reqbuf;
    t->r.req_len = sizeof(*h) + padded + ns * sizeof(struct vcu_seg);
    t->r.segs = t->segs;
    t->r.nsegs = ns;
    if (fz_run(t) != 0 || fz_status(t) != VCU_S_OK)
        return 0;
    if (op == VCU_OP_SESSION_OPEN)
        return ((struct vcu_session_open_resp *)fz_resp(t))->session;
    {
        const struct vcu_cu_u64_resp *u = fz_resp(t);
        size_t rl = t->r.resp_len;

        if (rl >= sizeof(struct vcu_resp_hdr) + sizeof(*u) && u->r.result == 0)
            return u->value;
        if (op == VCU_OP_CU_MODULE_GET_FUNCTION && u->r.result == 0)
            return u->value;
    }
    return 0;
}

#define FZ_KERNEL "_Z10vector_addPKfS0_Pfi"
static const char fz_ptx[] =
    "//\n.version 8.0\n.target sm_90\n.visible .entry " FZ_KERNEL "()\n{\n}\n";

static void fz_setup(void)
{
    struct vcu_session_open_req oq = {1, 1,
                                      VCU_FEAT_CUDA | VCU_FEAT_ECHO | VCU_FEAT_ASYNC | VCU_FEAT_BATCH,
                                      {0, 0}};
    struct vcu_cu_mem_alloc_req ma;
    struct vcu_cu_stream_create_req sc;
    struct vcu_cu_u64_req u;
    struct vcu_cu_module_load_req ml;
    struct {
        struct vcu_cu_name_req n;
        char name[sizeof(FZ_KERNEL)];
    } nr;
    struct vcu_cu_hdr ch = {0, 0};
    unsigned int n = 0;

    vcu_backend_reset(be);
    need_reset = 0;
    sess = fz_call(VCU_OP_SESSION_OPEN, 0, &oq, sizeof(oq), 0, NULL, 0);
    if (!sess) {
        fprintf(stderr, "fuzz: SESSION_OPEN failed\n");
        abort();
    }
    memset(handles, 0, sizeof(handles));
    handles[n++] = 0;
    handles[n++] = 1;
    memset(&ma, 0, sizeof(ma));
    ma.size = 4096;
    handles[n] = fz_call(VCU_OP_CU_MEM_ALLOC, sess, &ma, sizeof(ma), 0, NULL, 0);
    handles[n + 1] = handles[n] + 1024;
    handles[n + 2] = handles[n] + 4095;
    n += 3;
    memset(&sc, 0, sizeof(sc));
    handles[n++] = fz_call(VCU_OP_CU_STREAM_CREATE, sess, &sc, sizeof(sc), 0, NULL, 0);
    memset(&u, 0, sizeof(u));
    handles[n++] = fz_call(VCU_OP_CU_EVENT_CREATE, sess, &u, sizeof(u), 0, NULL, 0);
    handles[n++] = fz_call(VCU_OP_CU_GRAPH_CREATE, sess, &u, sizeof(u), 0, NULL, 0);
    handles[n++] = fz_call(VCU_OP_CU_MEMPOOL_GET_DEFAULT, sess, &ch, sizeof(ch), 0, NULL, 0);
    memset(&ml, 0, sizeof(ml));
    ml.image_len = sizeof(fz_ptx) - 1;
    handles[n] = fz_call(VCU_OP_CU_MODULE_LOAD, sess, &ml, sizeof(ml), VCU_SEG_TO_DEVICE,
                         (void *)fz_ptx, sizeof(fz_ptx) - 1);
    memset(&nr, 0, sizeof(nr));
    nr.n.module = handles[n++];
    nr.n.name_len = sizeof(FZ_KERNEL) - 1;
    memcpy(nr.name, FZ_KERNEL, sizeof(FZ_KERNEL) - 1);
    handles[n++] = fz_call(VCU_OP_CU_MODULE_GET_FUNCTION, sess, &nr,
                           sizeof(nr.n) + sizeof(FZ_KERNEL) - 1, 0, NULL, 0);
    handles[n++] = 16;
    handles[n++] = 0xffffffffffffffffull;
    handles[n++] = 1ull << 40;
    handles[n++] = 4096;
    handles[n++] = 0x7fffffff;
}

#define FZ_STR_(x) #x
#define FZ_STR(x) FZ_STR_(x)

/* The stand-in allocates device memory in host memory: a guest's huge
 * allocation must come back as CUDA_ERROR_OUT_OF_MEMORY, not abort. */
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=" FZ_STR(FUZZ_MAX_ALLOC_MB);
}

/* At exit (before LeakSanitizer's final check): no worker thread left. */
static void fz_fini(void)
{
    if (be) {
        vcu_backend_free(be);
        be = NULL;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    vcu_backend_config_t cfg;
    const char *e = getenv("FUZZ_RESET_EVERY");
    pthread_condattr_t ca;

    (void)argc;
    (void)argv;
    if (e && atoi(e) > 0)
        reset_every = (unsigned int)atoi(e);
    e = getenv("FUZZ_TIMEOUT_MS");
    if (e && atoi(e) > 0)
        timeout_ms = (unsigned int)atoi(e);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&fz_cond, &ca);
    pthread_condattr_destroy(&ca);
    debug = getenv("FUZZ_DEBUG") != NULL;
    setenv("VCU_FAKECUDA_MEM_MB", FUZZ_DEVICE_MEM_MB, 0);
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0,1";
    if (vcu_backend_new(&cfg, &be) != 0 || vcu_backend_cuda_error(be) != NULL) {
        fprintf(stderr, "fuzz: no CUDA (set VCU_LIBCUDA to the stand-in): %s\n",
                be ? vcu_backend_cuda_error(be) : "backend_new failed");
        abort();
    }
    fz_setup();
    atexit(fz_fini);
    return 0;
}

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in_t;

static uint8_t in_u8(fz_in_t *in)
{
    uint8_t v = 0;

    if (in->n) {
        v = *in->p++;
        in->n--;
    }
    return v;
}

static uint16_t in_u16(fz_in_t *in)
{
    uint16_t lo = in_u8(in);

    return (uint16_t)(lo | (in_u8(in) << 8));
}

/* Builds request i from the input; 0 if the input is used up. */
static int fz_build(fz_req_t *t, fz_in_t *in)
{
    struct vcu_req_hdr *h = (struct vcu_req_hdr *)t->reqbuf;
    unsigned char *pl = (unsigned char *)(h + 1);
    const fz_op_t *op;
    uint8_t fl, plen, sb, rawflags = 0, trunc = 0;
    uint16_t plen_lie = 0;
    unsigned int nseg, npatch, i, j, len, padded;
    struct {
        uint8_t slot, idx;
    } patch[3];
    struct {
        uint8_t dir, split;
        uint16_t off, len;
    } sg[3];
    struct vcu_seg *w;

    if (in->n < 4)
        return 0;
    op = &fz_ops[in_u8(in) % FZ_NOPS];
    fl = in_u8(in);
    plen = in_u8(in);
    sb = in_u8(in);
    if (fl & F_RAWFLAGS)
        rawflags = in_u8(in);
    if (fl & F_PLEN_LIE)
        plen_lie = in_u16(in);
    if (fl & F_TRUNC)
        trunc = in_u8(in);
    nseg = sb & 3;
    npatch = (sb >> 2) & 3;
    for (i = 0; i < npatch; i++) {
        patch[i].slot = in_u8(in);
        patch[i].idx = in_u8(in);
    }
    for (i = 0; i < nseg; i++) {
        sg[i].dir = in_u8(in);
        sg[i].off = in_u16(in);
        sg[i].len = in_u16(in);
        sg[i].split = in_u8(in);
    }

    memset(t->reqbuf, 0, sizeof(t->reqbuf));
    len = plen < in->n ? plen : (unsigned int)in->n;
    memcpy(pl, in->p, len);
    in->p += len;
    in->n -= len;
    if (!(fl & F_SHORT) && len < op->size)
        len = op->size;
    for (i = 0; i < npatch; i++) {
        unsigned int slot = patch[i].slot % 16;

        if (slot * 8 + 8 <= len)
            memcpy(pl + slot * 8, &handles[patch[i].idx % 16], 8);
    }
    /* An ECHO's delay: 0 or 1 ms, or out of range (rejected). */
    if (op->op == VCU_OP_ECHO && len >= sizeof(struct vcu_echo_req)) {
        struct vcu_echo_req er;

        memcpy(&er, pl, sizeof(er));
        if (er.delay_ms <= 10000) {
            er.delay_ms &= 1;
            memcpy(pl, &er, sizeof(er));
        }
    }
    h->opcode = op->op;
    h->flags = (fl & F_RAWFLAGS) ? rawflags : ((fl & F_ASYNC) ? VCU_REQ_F_ASYNC : 0);
    h->session = (fl & F_BADSESS) ? sess + 1 + (sb >> 4) : sess;
    h->req_id = 7;
    h->payload_len = (fl & F_PLEN_LIE) ? plen_lie : len;
    padded = (h->payload_len <= VCU_MAX_PAYLOAD) ? ((h->payload_len + 7) & ~7u) : ((len + 7) & ~7u);
    h->nsegs = (uint16_t)nseg;
    if (fl & F_NSEG_LIE)
        h->nsegs = (uint16_t)(nseg + 1);
    w = (struct vcu_seg *)(pl + padded);
    for (i = 0; i < nseg; i++) {
        unsigned int off = sg[i].off % FUZZ_DATA;
        unsigned int l = sg[i].len;
        unsigned int niov = (sg[i].split & 3) + 1, done = 0;
        uint32_t dflags = sg[i].dir & 0x7;

        if (l > FUZZ_DATA - off)
            l = FUZZ_DATA - off;
        if (!(sg[i].dir & 0x80) && (dflags & 3) != VCU_SEG_TO_DEVICE)
            dflags = (dflags & VCU_SEG_F_STABLE) | (sg[i].dir & 0x40 ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE);
        if (l == 0)
            niov = sg[i].split & 4 ? 1 : 0;
        for (j = 0; j < niov; j++) {
            unsigned int part = (j + 1 == niov) ? l - done : (l - done) / (2 + ((sg[i].split >> (2 + j * 2)) & 3));

            t->iov[i][j].iov_base = data + off + done;
            t->iov[i][j].iov_len = part;
            done += part;
        }
        t->segs[i].iov = t->iov[i];
        t->segs[i].iovcnt = niov;
        t->segs[i].len = l;
        t->segs[i].flags = dflags;
        if ((char *)(w + i + 1) <= (char *)t->reqbuf + sizeof(t->reqbuf)) {
            w[i].len = l;
            w[i].nranges = 1;
            w[i].flags = dflags;
            if ((fl & F_SEG_LIE) && i == 0) {
                w[i].len = l + (sg[i].split >> 4) - 8;
                w[i].nranges = sg[i].split;
                w[i].flags = sg[i].dir;
            }
        }
    }
    t->r.req = t->reqbuf;
    t->r.req_len = sizeof(*h) + padded + nseg * sizeof(struct vcu_seg);
    if (t->r.req_len > sizeof(t->reqbuf))
        t->r.req_len = sizeof(t->reqbuf);
    if (t->r.req_len >= trunc)
        t->r.req_len -= trunc;
    t->r.segs = nseg ? t->segs : NULL;
    t->r.nsegs = nseg;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size)
{
    fz_in_t in = {buf, size};
    unsigned int i;

    if (need_reset || inputs_since_reset >= reset_every) {
        fz_setup();
        inputs_since_reset = 0;
    }
    inputs_since_reset++;
    memset(data, 0x5a, sizeof(data));
    for (i = 0; i < FUZZ_MAX_REQS; i++) {
        fz_req_t *t = &reqs[i];
        struct vcu_req_hdr *h = (struct vcu_req_hdr *)t->reqbuf;

        if (!fz_build(t, &in))
            break;
        if (debug) {
            const struct vcu_seg *w = (const void *)((const char *)(h + 1) + ((h->payload_len + 7) & ~7u));
            unsigned int k;

            fprintf(stderr, "fuzz: op 0x%04x flags 0x%x plen %u nsegs %u req_len %zu:", h->opcode,
                    h->flags, h->payload_len, h->nsegs, t->r.req_len);
            for (k = 0; k < t->r.nsegs && h->payload_len <= VCU_MAX_PAYLOAD; k++)
                fprintf(stderr, " [%llu/%u/0x%x iov %u]", (unsigned long long)w[k].len, w[k].nranges,
                        w[k].flags, t->segs[k].iovcnt);
            for (k = 0; k < h->payload_len && k < 64 && h->payload_len <= VCU_MAX_PAYLOAD; k += 8) {
                uint64_t v;

                memcpy(&v, (const char *)(h + 1) + k, 8);
                fprintf(stderr, " %llx", (unsigned long long)v);
            }
            fprintf(stderr, "\n");
        }
        if (fz_run(t) != 0) {
            if (debug)
                fprintf(stderr, "fuzz:   timed out: backend reset\n");
            break;
        }
        if (debug)
            fprintf(stderr, "fuzz:   status %u result %u\n", fz_status(t),
                    t->r.resp_len >= 32 ? *(uint32_t *)fz_resp(t) : 0);
        /* The session gone (SESSION_CLOSE) or its context poisoned: start over. */
        if (fz_status(t) == VCU_S_OK && h->opcode == VCU_OP_SESSION_CLOSE)
            need_reset = 1;
        if (fz_status(t) == VCU_S_OK && t->r.resp_len >= sizeof(struct vcu_resp_hdr) + 8 &&
            h->opcode >= 0x100) {
            const struct vcu_cu_resp *cr = fz_resp(t);

            if (cr->result == 700 || cr->result == 719 || cr->result == 999 ||
                cr->result == 714 || cr->result == 715 || cr->result == 716)
                need_reset = 1;
        }
    }
    return 0;
}
