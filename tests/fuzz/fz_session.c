/*
 * The backend targets' session (fz_session.h).
 *
 * A request that does not complete within $FUZZ_TIMEOUT_MS (default 5: a
 * parked callback wait, a stream blocked by a host function) ends by a
 * backend reset, which completes it; requests that do complete take tens
 * of microseconds.  The replay in the test suite sets 1000, so that load
 * on the machine cannot turn a slow request into a reset.  The session is
 * rebuilt every $FUZZ_RESET_EVERY inputs (default 1) and whenever it is
 * gone or the context has a sticky error.
 *
 * Speed: the harness sleeps on a condition variable until the backend's
 * completion callback (no polling), and the stand-in's devices have
 * FUZZ_DEVICE_MEM_MB each, so a larger cuMemAlloc fails as out of memory
 * at once (the stand-in backs device memory with host memory; under ASan
 * a multi-GiB allocation costs tens of milliseconds, and as much again
 * to poison its shadow when freed).  See docs/fuzzing.md.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fz_session.h"

#define FUZZ_TIMEOUT_MS 5
#define FUZZ_MAX_ALLOC_MB 256    /* any one malloc (ASan returns NULL beyond) */
#define FUZZ_DEVICE_MEM_MB "32"  /* the stand-in's memory per device */

vcu_backend_t *fz_be;
uint64_t fz_sess;
uint64_t fz_handles[16];
unsigned char fz_data[FZ_DATA];
fz_req_t fz_reqs[FZ_MAX_REQS];
int fz_debug;

static unsigned int inputs_since_reset;
static unsigned int reset_every = 1;
static unsigned int timeout_ms = FUZZ_TIMEOUT_MS;
static int need_reset = 1;

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

int fz_run(fz_req_t *t)
{
    struct timespec end;

    t->done = 0;
    t->r.resp = t->respbuf;
    t->r.resp_cap = sizeof(t->respbuf);
    t->r.done = fz_done;
    vcu_backend_submit(fz_be, &t->r);
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += timeout_ms / 1000;
    end.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    if (fz_wait(t, &end))
        return 0;
    vcu_backend_reset(fz_be);       /* completes every request */
    if (!fz_wait(t, &end)) {
        fprintf(stderr, "fuzz: request not completed by vcu_backend_reset\n");
        abort();
    }
    need_reset = 1;
    return -1;
}

uint32_t fz_status(fz_req_t *t)
{
    return ((struct vcu_resp_hdr *)t->respbuf)->status;
}

void *fz_resp(fz_req_t *t)
{
    return (struct vcu_resp_hdr *)t->respbuf + 1;
}

uint64_t fz_call(uint32_t op, uint64_t session, const void *p, uint32_t plen, uint32_t segflags,
                 void *seg, size_t seglen)
{
    fz_req_t *t = &fz_reqs[0];
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

    vcu_backend_reset(fz_be);
    need_reset = 0;
    fz_sess = fz_call(VCU_OP_SESSION_OPEN, 0, &oq, sizeof(oq), 0, NULL, 0);
    if (!fz_sess) {
        fprintf(stderr, "fuzz: SESSION_OPEN failed\n");
        abort();
    }
    memset(fz_handles, 0, sizeof(fz_handles));
    fz_handles[n++] = 0;
    fz_handles[n++] = 1;
    memset(&ma, 0, sizeof(ma));
    ma.size = 4096;
    fz_handles[n] = fz_call(VCU_OP_CU_MEM_ALLOC, fz_sess, &ma, sizeof(ma), 0, NULL, 0);
    fz_handles[n + 1] = fz_handles[n] + 1024;
    fz_handles[n + 2] = fz_handles[n] + 4095;
    n += 3;
    memset(&sc, 0, sizeof(sc));
    fz_handles[n++] = fz_call(VCU_OP_CU_STREAM_CREATE, fz_sess, &sc, sizeof(sc), 0, NULL, 0);
    memset(&u, 0, sizeof(u));
    fz_handles[n++] = fz_call(VCU_OP_CU_EVENT_CREATE, fz_sess, &u, sizeof(u), 0, NULL, 0);
    fz_handles[n++] = fz_call(VCU_OP_CU_GRAPH_CREATE, fz_sess, &u, sizeof(u), 0, NULL, 0);
    fz_handles[n++] = fz_call(VCU_OP_CU_MEMPOOL_GET_DEFAULT, fz_sess, &ch, sizeof(ch), 0, NULL, 0);
    memset(&ml, 0, sizeof(ml));
    ml.image_len = sizeof(fz_ptx) - 1;
    fz_handles[n] = fz_call(VCU_OP_CU_MODULE_LOAD, fz_sess, &ml, sizeof(ml), VCU_SEG_TO_DEVICE,
                            (void *)fz_ptx, sizeof(fz_ptx) - 1);
    memset(&nr, 0, sizeof(nr));
    nr.n.module = fz_handles[n++];
    nr.n.name_len = sizeof(FZ_KERNEL) - 1;
    memcpy(nr.name, FZ_KERNEL, sizeof(FZ_KERNEL) - 1);
    fz_handles[n++] = fz_call(VCU_OP_CU_MODULE_GET_FUNCTION, fz_sess, &nr,
                              sizeof(nr.n) + sizeof(FZ_KERNEL) - 1, 0, NULL, 0);
    fz_handles[n++] = 16;
    fz_handles[n++] = 0xffffffffffffffffull;
    fz_handles[n++] = 1ull << 40;
    fz_handles[n++] = 4096;
    fz_handles[n++] = 0x7fffffff;
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
    if (fz_be) {
        vcu_backend_free(fz_be);
        fz_be = NULL;
    }
}

void fz_session_init(void)
{
    vcu_backend_config_t cfg;
    const char *e = getenv("FUZZ_RESET_EVERY");
    pthread_condattr_t ca;

    if (e && atoi(e) > 0)
        reset_every = (unsigned int)atoi(e);
    e = getenv("FUZZ_TIMEOUT_MS");
    if (e && atoi(e) > 0)
        timeout_ms = (unsigned int)atoi(e);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&fz_cond, &ca);
    pthread_condattr_destroy(&ca);
    fz_debug = getenv("FUZZ_DEBUG") != NULL;
    setenv("VCU_FAKECUDA_MEM_MB", FUZZ_DEVICE_MEM_MB, 0);
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0,1";
    if (vcu_backend_new(&cfg, &fz_be) != 0 || vcu_backend_cuda_error(fz_be) != NULL) {
        fprintf(stderr, "fuzz: no CUDA (set VCU_LIBCUDA to the stand-in): %s\n",
                fz_be ? vcu_backend_cuda_error(fz_be) : "backend_new failed");
        abort();
    }
    fz_setup();
    atexit(fz_fini);
}

int fz_session_begin(void)
{
    int rebuilt = 0;

    if (need_reset || inputs_since_reset >= reset_every) {
        fz_setup();
        inputs_since_reset = 0;
        rebuilt = 1;
    }
    inputs_since_reset++;
    memset(fz_data, 0x5a, sizeof(fz_data));
    return rebuilt;
}

int fz_session_lost(void)
{
    return need_reset;
}

void fz_after(fz_req_t *t)
{
    const struct vcu_req_hdr *h = (const struct vcu_req_hdr *)t->reqbuf;

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
