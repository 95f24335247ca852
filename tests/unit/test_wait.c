/*
 * Waiting requests: the worker issues in FIFO order and never blocks, so
 * requests of one session that wait (an ECHO delay, a synchronize, a copy,
 * a fence) do not hold up the ones behind them.
 *
 * The CUDA cases run against tests/unit/mockcuda (built by the Makefile,
 * path in VCU_MOCKCUDA), not the CPU stand-in: the stand-in runs work at
 * once, so nothing is ever pending there.  In the mock a "spin" (what
 * CU_MEMSET with elem_size 2 means to it) stands for a kernel polling a
 * flag in device memory, which a later copy sets.  Device memory is host
 * memory in the mock.
 *
 * About "a stream waits on an event recorded later": CUDA binds
 * cuStreamWaitEvent to the record current at the call (none: no wait), so
 * a wait issued before the record cannot hang.  What hung a blocking
 * worker is work that only a later request of the same session lets
 * finish: wait_event_later_work has that (B spins on a flag, E is
 * recorded on B, A waits for E, A is synchronized, then a copy sets the
 * flag).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>

#include "ut.h"
#include "vcu_calls.h"

#ifndef VCU_MOCKCUDA
#define VCU_MOCKCUDA "/nonexistent/mockcuda/libcuda.so.1"
#endif

typedef struct wt_s {
    vcu_backend_t *be;
    uint64_t s;
} wt_t;

static int wt_open(wt_t *w)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.libcuda = VCU_MOCKCUDA;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &w->be));
    if (vcu_backend_cuda_error(w->be) != NULL)
        VCU_TEST_FAIL_("mock driver not loaded: %s", vcu_backend_cuda_error(w->be));
    ASSERT_EQ(VCU_S_OK, ut_open(w->be, &w->s));
    return 0;
}

/* Builds and submits; the caller waits on t->ndone and frees t. */
static ut_req_t *wt_submit(wt_t *w, uint32_t op, const void *p, uint32_t plen)
{
    ut_req_t *t = ut_req_new();

    ut_req_build(t, op, w->s, p, plen);
    vcu_backend_submit(w->be, &t->r);
    return t;
}

static ut_req_t *wt_submit_seg(wt_t *w, uint32_t op, const void *p, uint32_t plen, uint32_t sflags,
                               void *buf, size_t len)
{
    ut_req_t *t = ut_req_new();

    ut_req_add_seg(t, sflags, buf, len);
    ut_req_build(t, op, w->s, p, plen);
    vcu_backend_submit(w->be, &t->r);
    return t;
}

/* The CUresult of a finished CUDA request (-1 if it failed on the wire). */
static long wt_result(ut_req_t *t)
{
    struct vcu_cu_resp r;

    if (ut_status(t) != VCU_S_OK)
        return -1;
    memcpy(&r, ut_resp_payload(t), sizeof(r));
    return r.result;
}

static uint64_t wt_value(ut_req_t *t)
{
    struct vcu_cu_u64_resp r;

    memcpy(&r, ut_resp_payload(t), sizeof(r));
    return r.value;
}

/* Runs a request to the end; its value (handle, pointer), 0 on failure. */
static uint64_t wt_do(wt_t *w, uint32_t op, const void *p, uint32_t plen)
{
    ut_req_t *t = ut_req_new();
    uint64_t v = 0;

    ut_req_build(t, op, w->s, p, plen);
    vcu_backend_execute(w->be, &t->r);
    if (wt_result(t) == CUDA_SUCCESS)
        v = wt_value(t);
    free(t);
    return v;
}

static uint64_t wt_alloc(wt_t *w, uint64_t size)
{
    struct vcu_cu_mem_alloc_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    return wt_do(w, VCU_OP_CU_MEM_ALLOC, &rq, sizeof(rq));
}

static uint64_t wt_stream(wt_t *w)
{
    struct vcu_cu_stream_create_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.flags = CU_STREAM_NON_BLOCKING;
    return wt_do(w, VCU_OP_CU_STREAM_CREATE, &rq, sizeof(rq));
}

static uint64_t wt_event(wt_t *w)
{
    struct vcu_cu_u64_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.value = CU_EVENT_DISABLE_TIMING;
    return wt_do(w, VCU_OP_CU_EVENT_CREATE, &rq, sizeof(rq));
}

static ut_req_t *wt_u64(wt_t *w, uint32_t op, uint64_t v)
{
    struct vcu_cu_u64_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.value = v;
    return wt_submit(w, op, &rq, sizeof(rq));
}

/* A generated query of one handle (cuStreamQuery, cuEventQuery: the same
 * layout). */
static ut_req_t *wt_query(wt_t *w, uint32_t call, uint64_t h)
{
    struct vcu_call_cuStreamQuery_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.c.call = call;
    rq.c.hash = VCU_CALLS_HASH;
    rq.hStream = h;
    return wt_submit(w, VCU_OP_CU_CALL, &rq, sizeof(rq));
}

static ut_req_t *wt_pair(wt_t *w, uint32_t op, uint64_t a, uint64_t b)
{
    struct vcu_cu_pair_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.a = a;
    rq.b = b;
    return wt_submit(w, op, &rq, sizeof(rq));
}

/* Async memset on a stream; elem_size 2 is the mock's "spin on *dst". */
static ut_req_t *wt_memset(wt_t *w, uint64_t dst, uint32_t elem, uint64_t stream)
{
    struct vcu_cu_memset_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.dst = dst;
    rq.width = 1;
    rq.height = 1;
    rq.stream = stream;
    rq.value = 7;
    rq.elem_size = elem;
    rq.flags = VCU_CU_MEMCPY_F_ASYNC;
    return wt_submit(w, VCU_OP_CU_MEMSET, &rq, sizeof(rq));
}

/* A copy (async on stream when flags says so), segment not stable. */
static ut_req_t *wt_copy(wt_t *w, int htod, uint64_t dev, void *host, size_t len, uint32_t flags,
                         uint64_t stream)
{
    struct vcu_cu_memcpy_req rq;

    memset(&rq, 0, sizeof(rq));
    if (htod)
        rq.dst = dev;
    else
        rq.src = dev;
    rq.size = len;
    rq.stream = stream;
    rq.flags = flags;
    return wt_submit_seg(w, htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, &rq, sizeof(rq),
                         htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE, host, len);
}

static int wt_wait(ut_req_t *t)
{
    double end = ut_now() + 5;

    while (atomic_load(&t->ndone) == 0) {
        if (ut_now() > end)
            return -1;
        usleep(200);
    }
    return 0;
}

static void wt_nap(void)
{
    usleep(30 * 1000);
}

/* ---- ECHO ---------------------------------------------------------------- */

TEST(wait_echo_slow_quick)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *slow = ut_req_new(), *q[5];
    uint64_t sid = 0;
    double t0;
    int i;

    /* Margins of seconds: on a loaded 2-core machine a thread can wait
     * a few hundred ms for a CPU. */
    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    ut_echo_build(slow, sid, 1, 0, 3000, NULL, 0);
    t0 = ut_now();
    vcu_backend_submit(be, &slow->r);
    for (i = 0; i < 5; i++) {
        q[i] = ut_req_new();
        ut_echo_build(q[i], sid, 2, 0, 0, &i, sizeof(i));
        vcu_backend_submit(be, &q[i]->r);
    }
    for (i = 0; i < 5; i++) {
        ASSERT_EQ(0, wt_wait(q[i]));
        ASSERT_EQ(VCU_S_OK, ut_status(q[i]));
        ASSERT_MEM_EQ(&i, (char *)ut_resp_payload(q[i]) + sizeof(struct vcu_echo_resp), sizeof(i));
    }
    ASSERT_LT((ut_now() - t0) * 1000, 1500);  /* well before the slow one */
    ASSERT_EQ(0, atomic_load(&slow->ndone));
    ASSERT_EQ(0, wt_wait(slow));
    ASSERT_GE((ut_now() - t0) * 1000, 3000);
    ASSERT_EQ(VCU_S_OK, ut_status(slow));
    for (i = 0; i < 5; i++)
        free(q[i]);
    free(slow);
    ASSERT_EQ(VCU_S_OK, ut_close(be, sid));
    vcu_backend_free(be);
    return 0;
}

/* ---- CUDA (mock driver) -------------------------------------------------- */

/* A stream synchronize waits; later requests of the session go on. */
TEST(wait_stream_sync_parked)
{
    wt_t w;
    uint64_t a, b, flag;
    ut_req_t *spin, *sync, *q, *set, *echo;
    unsigned char one = 1;

    CHECK(wt_open(&w));
    a = wt_stream(&w);
    b = wt_stream(&w);
    flag = wt_alloc(&w, 64);
    ASSERT_NE(0, a);
    ASSERT_NE(0, b);
    ASSERT_NE(0, flag);
    spin = wt_memset(&w, flag, 2, a);
    sync = wt_u64(&w, VCU_OP_CU_STREAM_SYNCHRONIZE, a);
    /* Behind the sync, same session: all complete while it waits. */
    q = wt_query(&w, VCU_CALL_cuStreamQuery, a);
    ASSERT_EQ(0, wt_wait(q));
    ASSERT_EQ(CUDA_ERROR_NOT_READY, wt_result(q));
    echo = ut_req_new();
    ut_echo_build(echo, w.s, 0, 0, 0, NULL, 0);
    vcu_backend_submit(w.be, &echo->r);
    ASSERT_EQ(0, wt_wait(echo));
    wt_nap();
    ASSERT_EQ(0, atomic_load(&sync->ndone));
    /* A later copy on another stream lets the spin end. */
    set = wt_copy(&w, 1, flag, &one, 1, VCU_CU_MEMCPY_F_ASYNC, b);
    ASSERT_EQ(0, wt_wait(set));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(set));
    ASSERT_EQ(0, wt_wait(sync));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(sync));
    ASSERT_EQ(0, wt_wait(spin));
    free(spin);
    free(sync);
    free(q);
    free(set);
    free(echo);
    ASSERT_EQ(VCU_S_OK, ut_close(w.be, w.s));
    vcu_backend_free(w.be);
    return 0;
}

/* A sync of a stream waiting on an event whose work only a later request
 * lets finish: a blocking worker never got to that request. */
TEST(wait_event_later_work)
{
    wt_t w;
    uint64_t a, b, c, e, flag, buf;
    ut_req_t *spin, *rec, *wev, *ms, *sync, *esync, *rec2, *set;
    unsigned char one = 1;

    CHECK(wt_open(&w));
    a = wt_stream(&w);
    b = wt_stream(&w);
    c = wt_stream(&w);
    e = wt_event(&w);
    flag = wt_alloc(&w, 64);
    buf = wt_alloc(&w, 64);
    ASSERT_NE(0, e);
    spin = wt_memset(&w, flag, 2, b);               /* B: held until the flag is set */
    rec = wt_pair(&w, VCU_OP_CU_EVENT_RECORD, e, b);
    wev = wt_pair(&w, VCU_OP_CU_STREAM_WAIT_EVENT, a, e);
    ms = wt_memset(&w, buf, 1, a);
    sync = wt_u64(&w, VCU_OP_CU_STREAM_SYNCHRONIZE, a);
    esync = wt_u64(&w, VCU_OP_CU_EVENT_SYNCHRONIZE, e);
    /* Recorded again, on an idle stream: the parked EVENT_SYNCHRONIZE
     * still waits for the record before it. */
    rec2 = wt_pair(&w, VCU_OP_CU_EVENT_RECORD, e, c);
    ASSERT_EQ(0, wt_wait(rec2));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(rec2));
    wt_nap();
    ASSERT_EQ(0, atomic_load(&sync->ndone));
    ASSERT_EQ(0, atomic_load(&esync->ndone));
    ASSERT_EQ(0, *(volatile unsigned char *)(uintptr_t)buf);   /* A still held */
    set = wt_copy(&w, 1, flag, &one, 1, VCU_CU_MEMCPY_F_ASYNC, c);
    ASSERT_EQ(0, wt_wait(set));
    ASSERT_EQ(0, wt_wait(sync));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(sync));
    ASSERT_EQ(0, wt_wait(esync));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(esync));
    ASSERT_EQ(7, *(volatile unsigned char *)(uintptr_t)buf);
    /* The event handle still works (it got a fresh CUevent). */
    free(rec2);
    rec2 = wt_query(&w, VCU_CALL_cuEventQuery, e);
    ASSERT_EQ(0, wt_wait(rec2));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(rec2));
    free(spin);
    free(rec);
    free(wev);
    free(ms);
    free(sync);
    free(esync);
    free(rec2);
    free(set);
    ASSERT_EQ(VCU_S_OK, ut_close(w.be, w.s));
    vcu_backend_free(w.be);
    return 0;
}

static void *wt_release_later(void *arg)
{
    usleep(100 * 1000);
    __atomic_store_n((unsigned char *)arg, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A reset cancels waiting requests once the session's GPU work is done;
 * ASan checks nothing leaks. */
TEST(wait_reset_cancels)
{
    wt_t w;
    uint64_t a, flag;
    ut_req_t *spin, *sync, *copy, *ctx, *fence, *echo;
    unsigned char *host = malloc(4096);
    pthread_t th;
    double t0;

    CHECK(wt_open(&w));
    a = wt_stream(&w);
    flag = wt_alloc(&w, 4096);
    spin = wt_memset(&w, flag, 2, a);
    sync = wt_u64(&w, VCU_OP_CU_STREAM_SYNCHRONIZE, a);
    copy = wt_copy(&w, 0, flag, host, 4096, VCU_CU_MEMCPY_F_ASYNC, a);
    ctx = wt_submit(&w, VCU_OP_CU_CTX_SYNCHRONIZE, &(struct vcu_cu_hdr){0, 0},
                    sizeof(struct vcu_cu_hdr));
    fence = ut_req_new();
    ut_req_build(fence, VCU_OP_SESSION_FENCE, w.s, NULL, 0);
    vcu_backend_submit(w.be, &fence->r);
    echo = ut_req_new();
    ut_echo_build(echo, w.s, 0, 0, 10000, NULL, 0);
    vcu_backend_submit(w.be, &echo->r);
    wt_nap();
    ASSERT_EQ(1, atomic_load(&spin->ndone));
    ASSERT_EQ(0, atomic_load(&sync->ndone));
    ASSERT_EQ(0, atomic_load(&copy->ndone));
    ASSERT_EQ(0, atomic_load(&ctx->ndone));
    ASSERT_EQ(0, atomic_load(&fence->ndone));
    ASSERT_EQ(0, atomic_load(&echo->ndone));
    /* The reset's final synchronize waits for the spin: let it end. */
    ASSERT_EQ(0, pthread_create(&th, NULL, wt_release_later, (void *)(uintptr_t)flag));
    t0 = ut_now();
    vcu_backend_reset(w.be);
    ASSERT_LT((ut_now() - t0) * 1000, 1500);
    pthread_join(th, NULL);
    ASSERT_EQ(1, atomic_load(&sync->ndone));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(sync));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(copy));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(ctx));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(fence));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(echo));
    free(spin);
    free(sync);
    free(copy);
    free(ctx);
    free(fence);
    free(echo);
    free(host);
    vcu_backend_free(w.be);
    return 0;
}

static atomic_int fence_n;
static int fence_order[4];

static void wt_order_done(vcu_request_t *r)
{
    ut_req_t *t = (ut_req_t *)r;

    fence_order[atomic_fetch_add(&fence_n, 1) & 3] = (int)(intptr_t)t->user;
    atomic_fetch_add(&t->ndone, 1);
}

/* A fence completes only after the copies waiting ahead of it; a request
 * after the fence does not wait for it. */
TEST(wait_fence_after_copies)
{
    wt_t w;
    uint64_t a, flag;
    ut_req_t *spin, *copy, *fence, *after;
    unsigned char *host = malloc(256), one = 1;

    atomic_store(&fence_n, 0);
    CHECK(wt_open(&w));
    a = wt_stream(&w);
    flag = wt_alloc(&w, 256);
    spin = wt_memset(&w, flag, 2, a);
    copy = ut_req_new();
    copy->user = (void *)1;
    copy->r.done = wt_order_done;
    {
        struct vcu_cu_memcpy_req rq;

        memset(&rq, 0, sizeof(rq));
        rq.src = flag;
        rq.size = 256;
        rq.stream = a;
        rq.flags = VCU_CU_MEMCPY_F_ASYNC;
        ut_req_add_seg(copy, VCU_SEG_FROM_DEVICE, host, 256);
        ut_req_build(copy, VCU_OP_CU_MEMCPY_DTOH, w.s, &rq, sizeof(rq));
        vcu_backend_submit(w.be, &copy->r);
    }
    fence = ut_req_new();
    fence->user = (void *)2;
    fence->r.done = wt_order_done;
    ut_req_build(fence, VCU_OP_SESSION_FENCE, w.s, NULL, 0);
    vcu_backend_submit(w.be, &fence->r);
    after = ut_req_new();
    after->user = (void *)3;
    after->r.done = wt_order_done;
    ut_echo_build(after, w.s, 0, 0, 0, NULL, 0);
    vcu_backend_submit(w.be, &after->r);
    ASSERT_EQ(0, wt_wait(after));
    wt_nap();
    ASSERT_EQ(0, atomic_load(&copy->ndone));
    ASSERT_EQ(0, atomic_load(&fence->ndone));
    /* The guest's flag write arrives (as a copy would set it). */
    __atomic_store_n((unsigned char *)(uintptr_t)flag, one, __ATOMIC_RELEASE);
    ASSERT_EQ(0, wt_wait(fence));
    ASSERT_EQ(1, atomic_load(&copy->ndone));
    ASSERT_EQ(3, fence_order[0]);
    ASSERT_EQ(1, fence_order[1]);
    ASSERT_EQ(2, fence_order[2]);
    ASSERT_EQ(VCU_S_OK, ut_status(fence));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(copy));
    ASSERT_EQ(1, host[0]);              /* the data had arrived by the reply */
    free(spin);
    free(copy);
    free(fence);
    free(after);
    free(host);
    ASSERT_EQ(VCU_S_OK, ut_close(w.be, w.s));
    vcu_backend_free(w.be);
    return 0;
}

/* A 2D copy from host pages in several pieces goes through a staging
 * buffer of its whole span, held until the copy is done. */
static ut_req_t *wt_copy2d(wt_t *w, uint64_t dev, void *host, size_t piece, unsigned int npieces,
                           uint64_t pitch, uint64_t height, uint64_t stream)
{
    struct vcu_cu_memcpy2d_req rq;
    struct iovec iov[UT_MAX_IOV];
    ut_req_t *t = ut_req_new();
    unsigned int i;

    for (i = 0; i < npieces; i++) {
        iov[i].iov_base = host;     /* the same pages, again and again */
        iov[i].iov_len = piece;
    }
    ut_req_add_seg_iov(t, VCU_SEG_TO_DEVICE, iov, npieces);
    memset(&rq, 0, sizeof(rq));
    rq.kind = VCU_CU_COPY_HTOD;
    rq.dst = dev;
    rq.dpitch = pitch;
    rq.spitch = pitch;
    rq.width = pitch;
    rq.height = height;
    rq.stream = stream;
    rq.flags = VCU_CU_MEMCPY_F_ASYNC;
    ut_req_build(t, VCU_OP_CU_MEMCPY_2D, w->s, &rq, sizeof(rq));
    vcu_backend_submit(w->be, &t->r);
    return t;
}

/*
 * Finding 4: staging buffers of copies parked behind work that never
 * ends pinned host memory without bound (24 copies of 64 MiB spans from
 * 32 MiB of guest pages: +1.5 GiB in QEMU).  A session's host memory is
 * budgeted (VCU__SESS_HOST_BUDGET, 256 MiB): past it a request fails
 * with CUDA_ERROR_OUT_OF_MEMORY, at once, and the budget comes back as
 * parked work completes.
 */
TEST(wait_bounce_budget)
{
    enum { PIECE = 16 << 20, PITCH = 1 << 20, ROWS = 100 };  /* 100 MiB spans */
    ut_req_t *spin, *c[4];
    unsigned char *host = malloc(PIECE);
    uint64_t a, flag, dev;
    int i;
    wt_t w;

    ASSERT_NOT_NULL(host);
    memset(host, 0x3c, PIECE);
    CHECK(wt_open(&w));
    a = wt_stream(&w);
    flag = wt_alloc(&w, 64);
    dev = wt_alloc(&w, (uint64_t)PITCH * ROWS);
    ASSERT_NE(0, dev);
    spin = wt_memset(&w, flag, 2, a);
    for (i = 0; i < 3; i++)
        c[i] = wt_copy2d(&w, dev, host, PIECE, 8, PITCH, ROWS, a);
    ASSERT_EQ(0, wt_wait(c[2]));
    ASSERT_EQ(CUDA_ERROR_OUT_OF_MEMORY, wt_result(c[2]));
    wt_nap();
    ASSERT_EQ(0, atomic_load(&c[0]->ndone));
    ASSERT_EQ(0, atomic_load(&c[1]->ndone));
    __atomic_store_n((unsigned char *)(uintptr_t)flag, 1, __ATOMIC_RELEASE);
    ASSERT_EQ(0, wt_wait(c[0]));
    ASSERT_EQ(0, wt_wait(c[1]));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(c[0]));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(c[1]));
    /* Given back when they completed. */
    c[3] = wt_copy2d(&w, dev, host, PIECE, 8, PITCH, ROWS, a);
    ASSERT_EQ(0, wt_wait(c[3]));
    ASSERT_EQ(CUDA_SUCCESS, wt_result(c[3]));
    ASSERT_EQ(0x3c, ((unsigned char *)(uintptr_t)dev)[(uint64_t)PITCH * ROWS - 1]);
    ASSERT_EQ(0, wt_wait(spin));
    for (i = 0; i < 4; i++)
        free(c[i]);
    free(spin);
    free(host);
    ASSERT_EQ(VCU_S_OK, ut_close(w.be, w.s));
    vcu_backend_free(w.be);
    return 0;
}
