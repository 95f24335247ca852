/* ECHO: data streams, hash, fill, payload tail, delays, order, threads. */
#include <stdlib.h>
#include <unistd.h>

#include "ut.h"

typedef struct {
    vcu_backend_t *be;
    uint64_t sid;
} env_t;

static int env_open(env_t *e)
{
    e->be = ut_backend(0);
    e->sid = 0;
    ASSERT_EQ(VCU_S_OK, ut_open(e->be, &e->sid));
    return 0;
}

static const struct vcu_echo_resp *echo_resp(ut_req_t *t)
{
    return ut_resp_payload(t);
}

/* One TO segment of n bytes, one FROM segment of n (+16 guard) bytes. */
static int echo_n(env_t *e, size_t n)
{
    ut_req_t *t = ut_req_new();
    unsigned char *in = malloc(n + 1), *out = malloc(n + 16);
    size_t i;

    ut_fill(in, n, (unsigned int)n);
    memset(out, 0xee, n + 16);
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in, n);
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out, n);
    ut_echo_build(t, e->sid, 9, 0, 0, NULL, 0);
    ASSERT_EQ(0, vcu_backend_execute(e->be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_EQ(sizeof(struct vcu_echo_resp), ut_resp(t)->payload_len);
    ASSERT_EQ_U64(n, echo_resp(t)->in_bytes);
    ASSERT_EQ_U64(n, echo_resp(t)->out_bytes);
    ASSERT_EQ_U64(ut_fnv(VCU_FNV64_INIT, in, n), echo_resp(t)->in_hash);
    ASSERT_EQ(0, echo_resp(t)->reserved);
    ASSERT_MEM_EQ(in, out, n);
    for (i = n; i < n + 16; i++)
        ASSERT_EQ(0xee, out[i]);
    free(in);
    free(out);
    free(t);
    return 0;
}

TEST(echo_sizes)
{
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 1 << 20};
    env_t e;
    size_t i;

    CHECK(env_open(&e));
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (echo_n(&e, sizes[i]) != 0) {
            fprintf(stderr, "size %zu\n", sizes[i]);
            return 1;
        }
    }
    /* A known FNV-1a 64 value: "a" -> 0xaf63dc4c8601ec8c. */
    ASSERT_EQ_U64(0xaf63dc4c8601ec8cull, ut_fnv(VCU_FNV64_INIT, "a", 1));
    vcu_backend_free(e.be);
    return 0;
}

/* Segments interleaved by direction, each split over several iovecs
 * (an empty one included). */
TEST(echo_multi_iov)
{
    env_t e;
    ut_req_t *t = ut_req_new();
    static unsigned char in[4510], out[6500], expect_out[6500];
    struct iovec v[3];
    uint64_t h;

    CHECK(env_open(&e));
    ut_fill(in, sizeof(in), 3);
    memset(out, 0x5a, sizeof(out));
    v[0] = (struct iovec){in, 10};
    v[1] = (struct iovec){in + 10, 0};
    v[2] = (struct iovec){in + 10, 4000};
    ut_req_add_seg_iov(t, VCU_SEG_TO_DEVICE, v, 3);
    v[0] = (struct iovec){out, 1000};
    v[1] = (struct iovec){out + 1000, 2000};
    ut_req_add_seg_iov(t, VCU_SEG_FROM_DEVICE, v, 2);
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in + 4010, 500);
    v[0] = (struct iovec){out + 3000, 1};
    v[1] = (struct iovec){out + 3001, 1499};
    v[2] = (struct iovec){out + 4500, 2000};
    ut_req_add_seg_iov(t, VCU_SEG_FROM_DEVICE, v, 3);
    ut_echo_build(t, e.sid, 0, 0, 0, NULL, 0);
    ASSERT_EQ(0, vcu_backend_execute(e.be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    h = ut_fnv(VCU_FNV64_INIT, in, sizeof(in));
    ASSERT_EQ_U64(h, echo_resp(t)->in_hash);
    ASSERT_EQ(sizeof(in), echo_resp(t)->in_bytes);
    ASSERT_EQ(sizeof(in), echo_resp(t)->out_bytes);
    memset(expect_out, 0x5a, sizeof(expect_out));
    memcpy(expect_out, in, sizeof(in));
    ASSERT_MEM_EQ(expect_out, out, sizeof(out));
    free(t);
    vcu_backend_free(e.be);
    return 0;
}

TEST(echo_in_shorter)
{
    env_t e;
    ut_req_t *t = ut_req_new();
    unsigned char in[100], out[200], expect[200];

    CHECK(env_open(&e));
    ut_fill(in, sizeof(in), 4);
    memset(out, 0x11, sizeof(out));
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out, sizeof(out));
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in, sizeof(in));
    ut_echo_build(t, e.sid, 0, 0, 0, NULL, 0);
    ASSERT_EQ(0, vcu_backend_execute(e.be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_EQ(100, echo_resp(t)->in_bytes);
    ASSERT_EQ(100, echo_resp(t)->out_bytes);
    memset(expect, 0x11, sizeof(expect));
    memcpy(expect, in, sizeof(in));
    ASSERT_MEM_EQ(expect, out, sizeof(out));
    free(t);
    vcu_backend_free(e.be);
    return 0;
}

TEST(echo_out_shorter)
{
    env_t e;
    ut_req_t *t = ut_req_new();
    unsigned char in[200], out[100];

    CHECK(env_open(&e));
    ut_fill(in, sizeof(in), 5);
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in, sizeof(in));
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out, sizeof(out));
    ut_echo_build(t, e.sid, 0, 0, 0, NULL, 0);
    ASSERT_EQ(0, vcu_backend_execute(e.be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_EQ(200, echo_resp(t)->in_bytes);
    ASSERT_EQ(100, echo_resp(t)->out_bytes);
    ASSERT_EQ_U64(ut_fnv(VCU_FNV64_INIT, in, sizeof(in)), echo_resp(t)->in_hash);
    ASSERT_MEM_EQ(in, out, sizeof(out));
    free(t);
    vcu_backend_free(e.be);
    return 0;
}

TEST(echo_fill)
{
    env_t e;
    ut_req_t *t = ut_req_new();
    static unsigned char in[10], out[8000];
    struct iovec v[2] = {{out, 1234}, {out + 1234, 3000 - 1234}};
    const uint64_t seed = 0x123456789abcdefull;
    size_t i;

    CHECK(env_open(&e));
    ut_fill(in, sizeof(in), 6);
    memset(out, 0, sizeof(out));
    ut_req_add_seg_iov(t, VCU_SEG_FROM_DEVICE, v, 2);
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in, sizeof(in));
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out + 3000, 5000);
    ut_echo_build(t, e.sid, seed, VCU_ECHO_F_FILL, 0, NULL, 0);
    ASSERT_EQ(0, vcu_backend_execute(e.be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_EQ(10, echo_resp(t)->in_bytes);
    ASSERT_EQ(8000, echo_resp(t)->out_bytes);
    ASSERT_EQ_U64(ut_fnv(VCU_FNV64_INIT, in, sizeof(in)), echo_resp(t)->in_hash);
    for (i = 0; i < sizeof(out); i++)
        if (out[i] != vcu_echo_byte(seed, i))
            ASSERT_EQ(vcu_echo_byte(seed, i), out[i]);
    free(t);
    vcu_backend_free(e.be);
    return 0;
}

TEST(echo_payload_tail)
{
    static const uint32_t lens[] = {1, 7, 8, 100, VCU_MAX_PAYLOAD - sizeof(struct vcu_echo_req)};
    static unsigned char tail[VCU_MAX_PAYLOAD];
    env_t e;
    size_t i;

    CHECK(env_open(&e));
    ut_fill(tail, sizeof(tail), 7);
    for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        ut_req_t *t = ut_req_new();
        const unsigned char *back = (const unsigned char *)ut_resp_payload(t) +
                                    sizeof(struct vcu_echo_resp);

        ut_echo_build(t, e.sid, 0, 0, 0, tail, lens[i]);
        ASSERT_EQ(0, vcu_backend_execute(e.be, &t->r));
        ASSERT_EQ(VCU_S_OK, ut_status(t));
        ASSERT_EQ(sizeof(struct vcu_echo_resp) + lens[i], ut_resp(t)->payload_len);
        ASSERT_EQ(sizeof(struct vcu_resp_hdr) + sizeof(struct vcu_echo_resp) + lens[i],
                  t->r.resp_len);
        ASSERT_EQ(0, echo_resp(t)->in_bytes);
        ASSERT_EQ_U64(VCU_FNV64_INIT, echo_resp(t)->in_hash);
        ASSERT_MEM_EQ(tail, back, lens[i]);
        free(t);
    }
    vcu_backend_free(e.be);
    return 0;
}

static uint32_t echo_status(env_t *e, uint32_t flags, uint32_t delay_ms, size_t resp_cap,
                            uint32_t tail_len)
{
    ut_req_t *t = ut_req_new();
    static unsigned char tail[64];
    uint32_t st;

    if (resp_cap)
        t->r.resp_cap = resp_cap;
    ut_echo_build(t, e->sid, 0, flags, delay_ms, tail, tail_len);
    vcu_backend_execute(e->be, &t->r);
    st = ut_status(t);
    free(t);
    return st;
}

TEST(echo_bad_flags)
{
    env_t e;

    CHECK(env_open(&e));
    ASSERT_EQ(VCU_S_EINVAL, echo_status(&e, 2, 0, 0, 0));
    ASSERT_EQ(VCU_S_EINVAL, echo_status(&e, 1u << 31, 0, 0, 0));
    ASSERT_EQ(VCU_S_OK, echo_status(&e, VCU_ECHO_F_FILL, 0, 0, 0));
    vcu_backend_free(e.be);
    return 0;
}

TEST(echo_delay_too_long)
{
    env_t e;
    ut_req_t *t = ut_req_new();

    CHECK(env_open(&e));
    ASSERT_EQ(VCU_S_EINVAL, echo_status(&e, 0, 10001, 0, 0));
    ASSERT_EQ(VCU_S_EINVAL, echo_status(&e, 0, UINT32_MAX, 0, 0));
    /* 10000 is allowed; the close cancels it at once. */
    ut_echo_build(t, e.sid, 0, 0, 10000, NULL, 0);
    vcu_backend_submit(e.be, &t->r);
    ASSERT_EQ(VCU_S_OK, ut_close(e.be, e.sid));
    ASSERT_EQ(1, atomic_load(&t->ndone));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(t));
    free(t);
    vcu_backend_free(e.be);
    return 0;
}

TEST(echo_delay)
{
    env_t e;
    double t0, dt;

    CHECK(env_open(&e));
    t0 = ut_now();
    ASSERT_EQ(VCU_S_OK, echo_status(&e, 0, 150, 0, 0));
    dt = ut_now() - t0;
    ASSERT_GE(dt * 1000, 150);
    ASSERT_LT(dt, 5.0);
    vcu_backend_free(e.be);
    return 0;
}

TEST(echo_reply_too_small)
{
    env_t e;
    const size_t hdr = sizeof(struct vcu_resp_hdr), er = sizeof(struct vcu_echo_resp);

    CHECK(env_open(&e));
    ASSERT_EQ(VCU_S_ERANGE, echo_status(&e, 0, 0, hdr + er - 1, 0));
    ASSERT_EQ(VCU_S_ERANGE, echo_status(&e, 0, 0, hdr, 0));
    ASSERT_EQ(VCU_S_ERANGE, echo_status(&e, 0, 0, hdr + er + 9, 10));
    ASSERT_EQ(VCU_S_OK, echo_status(&e, 0, 0, hdr + er + 10, 10));
    ASSERT_EQ(VCU_S_OK, echo_status(&e, 0, 0, hdr + er, 0));
    vcu_backend_free(e.be);
    return 0;
}

/* Order of completion within one session is the order of submission,
 * even when the first request takes longest. */
static atomic_int fifo_n, fifo_fin;
static int fifo_order[200];
static void fifo_done(vcu_request_t *r)
{
    ut_req_t *t = (ut_req_t *)r;
    int i = atomic_fetch_add(&fifo_n, 1);

    if (i < 200)
        fifo_order[i] = (int)(intptr_t)t->user;
    atomic_fetch_add(&t->ndone, 1);
    atomic_fetch_add(&fifo_fin, 1);     /* after the slot is written */
}

TEST(echo_fifo_order)
{
    enum { N = 100 };
    env_t e;
    ut_req_t **t = calloc(N, sizeof(*t));
    uint64_t other = 0;
    int i;

    CHECK(env_open(&e));
    ASSERT_EQ(VCU_S_OK, ut_open(e.be, &other));
    atomic_store(&fifo_n, 0);
    atomic_store(&fifo_fin, 0);
    for (i = 0; i < N; i++) {
        t[i] = ut_req_new();
        t[i]->user = (void *)(intptr_t)i;
        t[i]->r.done = fifo_done;
        /* The first one's 1 s is far longer than submitting and running
         * the rest takes, even on a loaded machine. */
        ut_echo_build(t[i], e.sid, 0, 0, i == 0 ? 1000 : (i % 10 == 0 ? 2 : 0), &i, sizeof(i));
    }
    for (i = 0; i < N; i++)
        vcu_backend_submit(e.be, &t[i]->r);
    /* Another session is not held up by this one's waiting echoes. */
    {
        ut_req_t *o = ut_req_new();

        ut_echo_build(o, other, 0, 0, 0, NULL, 0);
        vcu_backend_execute(e.be, &o->r);
        ASSERT_EQ(VCU_S_OK, ut_status(o));
        free(o);
    }
    ASSERT_EQ(0, ut_wait_count(&fifo_fin, N));
    /* Echoes without a delay complete in FIFO order; delayed ones wait
     * for their deadline only, not holding the others up: the 1 s one
     * is last. */
    {
        int last = -1, n = 0;

        for (i = 0; i < N; i++) {
            int k = fifo_order[i];

            if (k % 10 == 0)
                continue;
            ASSERT_GT(k, last);
            last = k;
            n++;
        }
        ASSERT_EQ(N - N / 10, n);
        ASSERT_EQ(0, fifo_order[N - 1]);
    }
    for (i = 0; i < N; i++) {
        ASSERT_EQ(VCU_S_OK, ut_status(t[i]));
        ASSERT_MEM_EQ(&i, (char *)ut_resp_payload(t[i]) + sizeof(struct vcu_echo_resp), sizeof(i));
        free(t[i]);
    }
    free(t);
    vcu_backend_free(e.be);
    return 0;
}

/* Several threads, several sessions, many requests in flight at once. */
enum { MT_THREADS = 4, MT_SESSIONS = 6, MT_BATCH = 24, MT_ROUNDS = 6 };

typedef struct {
    vcu_backend_t *be;
    uint64_t *sids;
    unsigned int seed;
    int failed;
    atomic_int *total_done;
} mt_arg_t;

static atomic_int mt_done_count;
static void mt_done(vcu_request_t *r)
{
    ut_req_t *t = (ut_req_t *)r;

    atomic_fetch_add(&t->ndone, 1);
    atomic_fetch_add(&mt_done_count, 1);
}

static int mt_body(mt_arg_t *a)
{
    ut_req_t *t[MT_BATCH];
    unsigned char *in[MT_BATCH], *out[MT_BATCH];
    size_t len[MT_BATCH];
    int round, i;

    for (round = 0; round < MT_ROUNDS; round++) {
        for (i = 0; i < MT_BATCH; i++) {
            unsigned int r = rand_r(&a->seed);

            len[i] = r % 20000;
            in[i] = malloc(len[i] + 1);
            out[i] = malloc(len[i] + 1);
            ut_fill(in[i], len[i], r);
            t[i] = ut_req_new();
            t[i]->r.done = mt_done;
            ut_req_add_seg(t[i], VCU_SEG_TO_DEVICE, in[i], len[i]);
            ut_req_add_seg(t[i], VCU_SEG_FROM_DEVICE, out[i], len[i]);
            ut_echo_build(t[i], a->sids[r % MT_SESSIONS], r, 0, (r % 7 == 0) ? 1 : 0, &r,
                          sizeof(r));
            vcu_backend_submit(a->be, &t[i]->r);
        }
        for (i = 0; i < MT_BATCH; i++) {
            ASSERT_EQ(0, ut_wait_count(&t[i]->ndone, 1));
            ASSERT_EQ(1, atomic_load(&t[i]->ndone));
            ASSERT_EQ(VCU_S_OK, ut_status(t[i]));
            ASSERT_EQ_U64(len[i], echo_resp(t[i])->out_bytes);
            ASSERT_EQ_U64(ut_fnv(VCU_FNV64_INIT, in[i], len[i]), echo_resp(t[i])->in_hash);
            ASSERT_MEM_EQ(in[i], out[i], len[i]);
            free(in[i]);
            free(out[i]);
            free(t[i]);
        }
    }
    return 0;
}

static void *mt_thread(void *p)
{
    mt_arg_t *a = p;

    a->failed = mt_body(a);
    return NULL;
}

TEST(echo_many_threads)
{
    vcu_backend_t *be = ut_backend(0);
    uint64_t sids[MT_SESSIONS];
    pthread_t th[MT_THREADS];
    mt_arg_t args[MT_THREADS];
    int i;

    atomic_store(&mt_done_count, 0);
    for (i = 0; i < MT_SESSIONS; i++)
        ASSERT_EQ(VCU_S_OK, ut_open(be, &sids[i]));
    for (i = 0; i < MT_THREADS; i++) {
        args[i] = (mt_arg_t){be, sids, (unsigned int)i * 7919u + 1, 0, NULL};
        ASSERT_EQ(0, pthread_create(&th[i], NULL, mt_thread, &args[i]));
    }
    for (i = 0; i < MT_THREADS; i++) {
        pthread_join(th[i], NULL);
        ASSERT_EQ(0, args[i].failed);
    }
    ASSERT_EQ(MT_THREADS * MT_BATCH * MT_ROUNDS, atomic_load(&mt_done_count));
    for (i = 0; i < MT_SESSIONS; i++)
        ASSERT_EQ(VCU_S_OK, ut_close(be, sids[i]));
    ASSERT_EQ(0, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}
