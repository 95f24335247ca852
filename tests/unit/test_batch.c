/*
 * The guest library's coalescing of async requests (guest-lib/batch.c),
 * through its transport in loopback: the in-process backend over the CPU
 * stand-in.  A burst of async memsets goes as CU_BATCH requests, in
 * order; any other call sends what is pending first; the flush thread
 * sends a batch nobody else does; a lone request goes at once; VCU_BATCH=0
 * turns it off.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "vcu_test.h"
#include "vcu_transport_int.h"

static void tb_nap_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

/* A loopback connection with a gap of gap_us (VCU_BATCH_US). */
static int tb_open(const char *gap_us, const char *batch, vcu_conn_t **c)
{
    setenv("VCU_TRANSPORT", "loopback", 1);
    setenv("VCU_BATCH_US", gap_us, 1);
    if (batch != NULL)
        setenv("VCU_BATCH", batch, 1);
    else
        unsetenv("VCU_BATCH");
    if (getenv("VCU_LIBCUDA") == NULL)
        VCU_TEST_FAIL_("%s", "no VCU_LIBCUDA (the CPU stand-in)");
    ASSERT_EQ(0, vcu_conn_open(NULL, VCU_FEAT_CUDA | VCU_FEAT_ASYNC, c));
    return 0;
}

static int tb_alloc(vcu_conn_t *c, uint64_t *d)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t len = 0;

    memset(&rq, 0, sizeof(rq));
    rq.size = 256;
    ASSERT_EQ(0, vcu_conn_call(c, VCU_OP_CU_MEM_ALLOC, 0, &rq, sizeof(rq), NULL, 0, &rp,
                               sizeof(rp), &len));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    *d = rp.value;
    return 0;
}

static int tb_memset(vcu_conn_t *c, uint32_t flags, uint64_t dst, uint8_t v, uint64_t n)
{
    struct vcu_cu_memset_req rq;
    struct vcu_cu_resp rp;
    int async = (flags & VCU_CALL_ASYNC) != 0;

    memset(&rq, 0, sizeof(rq));
    rq.dst = dst;
    rq.value = v;
    rq.elem_size = 1;
    rq.width = n;
    rq.height = 1;
    rq.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
    memset(&rp, 0, sizeof(rp));
    ASSERT_EQ(0, vcu_conn_call(c, VCU_OP_CU_MEMSET, flags, &rq, sizeof(rq), NULL, 0,
                               async ? NULL : &rp, async ? 0 : sizeof(rp), NULL));
    ASSERT_EQ(CUDA_SUCCESS, rp.result);
    return 0;
}

static int tb_read(vcu_conn_t *c, uint64_t d, unsigned char out[256])
{
    struct vcu_cu_memcpy_req rq;
    struct vcu_cu_resp rp;
    vcu_buf_t b = { out, 256, VCU_SEG_FROM_DEVICE };

    memset(&rq, 0, sizeof(rq));
    rq.src = d;
    rq.size = 256;
    ASSERT_EQ(0, vcu_conn_call(c, VCU_OP_CU_MEMCPY_DTOH, 0, &rq, sizeof(rq), &b, 1, &rp,
                               sizeof(rp), NULL));
    ASSERT_EQ(CUDA_SUCCESS, rp.result);
    ASSERT_EQ(0, rp.deferred);
    return 0;
}

/* 200 async memsets in a burst: one alone, the rest in batches of at
 * most VCU_CU_BATCH_MAX, run in order; the copy after them sends the
 * rest first. */
TEST(batch_coalesces)
{
    vcu__batch_stats_t st;
    unsigned char out[256];
    vcu_conn_t *c = NULL;
    uint64_t d = 0;
    unsigned int i;

    CHECK(tb_open("10000", NULL, &c));
    ASSERT_TRUE((vcu_conn_features(c) & VCU_FEAT_BATCH) != 0);
    CHECK(tb_alloc(c, &d));
    CHECK(tb_memset(c, 0, d, 0, 256));
    for (i = 0; i < 200; i++)
        CHECK(tb_memset(c, VCU_CALL_ASYNC, d + i % 64, (uint8_t)i, 1));
    vcu__batch_stats(c, &st);
    ASSERT_EQ_U64(1, st.alone);
    ASSERT_EQ_U64(199, st.entries + st.pending);
    ASSERT_TRUE(st.batches >= 199 / VCU_CU_BATCH_MAX);
    ASSERT_TRUE(st.batches < 100);
    CHECK(tb_read(c, d, out));
    vcu__batch_stats(c, &st);
    ASSERT_EQ(0, st.pending);
    ASSERT_EQ_U64(199, st.entries);
    /* The last round of the 200 wins each byte. */
    for (i = 0; i < 64; i++)
        ASSERT_EQ(i < 200 % 64 ? 192 + i : 128 + i, out[i]);
    vcu_conn_close(c);
    return 0;
}

/* A batch that nothing else sends goes by the flush thread, and a
 * request after a pause goes alone, at once. */
TEST(batch_flush_thread)
{
    vcu__batch_stats_t st, st2;
    unsigned char out[256];
    vcu_conn_t *c = NULL;
    uint64_t d = 0;

    CHECK(tb_open("10000", NULL, &c));
    CHECK(tb_alloc(c, &d));
    CHECK(tb_memset(c, 0, d, 0, 256));
    tb_nap_ms(40);                  /* more than the gap and a clock tick */
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d, 0x41, 8));     /* alone */
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d + 8, 0x42, 8)); /* batched */
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d + 16, 0x43, 8));
    vcu__batch_stats(c, &st);
    ASSERT_EQ_U64(1, st.alone);
    /* No call from here: the flush thread sends it (10 ms after the
     * last entry; 2 s is plenty on a slow machine). */
    for (int i = 0; i < 200 && st.pending > 0; i++) {
        tb_nap_ms(10);
        vcu__batch_stats(c, &st);
    }
    ASSERT_EQ(0, st.pending);
    ASSERT_EQ_U64(1, st.batches);
    ASSERT_EQ_U64(2, st.entries);
    tb_nap_ms(40);
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d + 24, 0x44, 8));
    vcu__batch_stats(c, &st2);
    ASSERT_EQ_U64(2, st2.alone);
    ASSERT_EQ(0, st2.pending);
    CHECK(tb_read(c, d, out));
    ASSERT_EQ(0x41, out[0]);
    ASSERT_EQ(0x42, out[8]);
    ASSERT_EQ(0x43, out[16]);
    ASSERT_EQ(0x44, out[24]);
    vcu_conn_close(c);
    return 0;
}

/* A failing entry is the next call's deferred error, as an async
 * request's; closing the connection sends what is pending. */
TEST(batch_deferred_and_close)
{
    struct vcu_cu_pair_req wq = {{0, 0}, VCU_CU_STREAM_LEGACY, 0xbad0, 0};
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;
    vcu__batch_stats_t st;
    vcu_conn_t *c = NULL;
    uint64_t d = 0;

    CHECK(tb_open("10000", NULL, &c));
    CHECK(tb_alloc(c, &d));
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d, 1, 8));
    ASSERT_EQ(0, vcu_conn_call(c, VCU_OP_CU_STREAM_WAIT_EVENT, VCU_CALL_ASYNC, &wq, sizeof(wq),
                               NULL, 0, NULL, 0, NULL));
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d, 2, 8));
    vcu__batch_stats(c, &st);
    ASSERT_EQ(2, st.pending);
    memset(&r, 0, sizeof(r));
    ASSERT_EQ(0, vcu_conn_call(c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), NULL, 0, &r,
                               sizeof(r), NULL));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.deferred);
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d, 3, 8));
    CHECK(tb_memset(c, VCU_CALL_ASYNC, d, 4, 8));
    vcu__batch_stats(c, &st);
    ASSERT_TRUE(st.pending > 0);
    vcu_conn_close(c);              /* sends them, then ends the session */
    return 0;
}

/* VCU_BATCH=0: no batch feature asked, nothing coalesced. */
TEST(batch_off)
{
    vcu__batch_stats_t st;
    unsigned char out[256];
    vcu_conn_t *c = NULL;
    uint64_t d = 0;
    int i;

    CHECK(tb_open("10000", "0", &c));
    ASSERT_EQ(0, vcu_conn_features(c) & VCU_FEAT_BATCH);
    CHECK(tb_alloc(c, &d));
    for (i = 0; i < 10; i++)
        CHECK(tb_memset(c, VCU_CALL_ASYNC, d, (uint8_t)i, 256));
    vcu__batch_stats(c, &st);
    ASSERT_EQ_U64(0, st.alone + st.batches + st.entries + st.pending);
    CHECK(tb_read(c, d, out));
    ASSERT_EQ(9, out[255]);
    vcu_conn_close(c);
    return 0;
}
