/* Sessions: open/close, limits, features, close and reset with work queued. */
#include <stdlib.h>
#include <unistd.h>

#include "ut.h"

TEST(sess_open_basic)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();
    struct vcu_session_open_req oq;
    const struct vcu_session_open_resp *o = ut_resp_payload(t);
    uint64_t id2 = 0, f2 = 0;

    ASSERT_EQ(0, vcu_backend_session_count(be));
    memset(&oq, 0, sizeof(oq));
    oq.version_min = 0;
    oq.version_max = 7;
    oq.features = VCU_FEAT_ECHO | VCU_FEAT_ASYNC | VCU_FEAT_CUDA | (1ull << 63);
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &oq, sizeof(oq));
    ASSERT_EQ(0, vcu_backend_execute(be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_EQ(sizeof(*o), ut_resp(t)->payload_len);
    ASSERT_EQ(sizeof(struct vcu_resp_hdr) + sizeof(*o), t->r.resp_len);
    ASSERT_EQ_U64(UT_REQ_ID, ut_resp(t)->req_id);
    ASSERT_EQ(1, o->version);
    ASSERT_EQ(VCU_MAX_PAYLOAD, o->max_payload);
    ASSERT_EQ_U64(VCU_MAX_XFER, o->max_xfer);
    ASSERT_EQ(VCU_MAX_SEGS, o->max_segs);
    ASSERT_EQ(0, o->reserved);
    /* No driver here: CUDA is not offered; unknown bits are dropped. */
    ASSERT_NOT_NULL(vcu_backend_cuda_error(be));
    ASSERT_EQ_U64(VCU_FEAT_ECHO | VCU_FEAT_ASYNC, o->features);
    ASSERT_NE(0, o->session);
    ASSERT_EQ(1, vcu_backend_session_count(be));

    ASSERT_EQ(VCU_S_OK, ut_open_ex(be, 1, 1, VCU_FEAT_ECHO, &id2, &f2));
    ASSERT_EQ_U64(VCU_FEAT_ECHO, f2);
    ASSERT_NE(0, id2);
    ASSERT_NE(o->session, id2);
    ASSERT_EQ(2, vcu_backend_session_count(be));
    free(t);
    vcu_backend_free(be);
    return 0;
}

static uint32_t open_raw(vcu_backend_t *be, struct vcu_session_open_req *oq, uint64_t session,
                         int with_seg)
{
    ut_req_t *t = ut_req_new();
    static unsigned char buf[16];
    uint32_t st;

    if (with_seg)
        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf, sizeof(buf));
    ut_req_build(t, VCU_OP_SESSION_OPEN, session, oq, sizeof(*oq));
    vcu_backend_execute(be, &t->r);
    st = ut_status(t);
    if (st != VCU_S_OK && ut_resp(t)->payload_len != 0)
        st = 0xdead;                /* an error reply carries no payload */
    free(t);
    return st;
}

TEST(sess_open_reserved_nonzero)
{
    vcu_backend_t *be = ut_backend(0);
    struct vcu_session_open_req oq = {1, 1, VCU_FEAT_ECHO, {0, 0}};

    oq.reserved[1] = 1;
    ASSERT_EQ(VCU_S_EINVAL, open_raw(be, &oq, 0, 0));
    oq.reserved[1] = 0;
    oq.reserved[0] = 1ull << 40;
    ASSERT_EQ(VCU_S_EINVAL, open_raw(be, &oq, 0, 0));
    oq.reserved[0] = 0;
    ASSERT_EQ(VCU_S_OK, open_raw(be, &oq, 0, 0));
    ASSERT_EQ(1, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}

TEST(sess_open_nonzero_session)
{
    vcu_backend_t *be = ut_backend(0);
    struct vcu_session_open_req oq = {1, 1, VCU_FEAT_ECHO, {0, 0}};

    ASSERT_EQ(VCU_S_EINVAL, open_raw(be, &oq, 5, 0));
    ASSERT_EQ(0, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}

TEST(sess_open_with_segments)
{
    vcu_backend_t *be = ut_backend(0);
    struct vcu_session_open_req oq = {1, 1, VCU_FEAT_ECHO, {0, 0}};

    ASSERT_EQ(VCU_S_EINVAL, open_raw(be, &oq, 0, 1));
    ASSERT_EQ(0, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}

TEST(sess_version_mismatch)
{
    vcu_backend_t *be = ut_backend(0);

    ASSERT_EQ(VCU_S_EVERSION, ut_open_ex(be, 2, 3, VCU_FEAT_ECHO, NULL, NULL));
    ASSERT_EQ(VCU_S_EVERSION, ut_open_ex(be, 0, 0, VCU_FEAT_ECHO, NULL, NULL));
    ASSERT_EQ(VCU_S_EVERSION, ut_open_ex(be, 2, 1, VCU_FEAT_ECHO, NULL, NULL));
    ASSERT_EQ(VCU_S_EVERSION, ut_open_ex(be, UINT32_MAX, UINT32_MAX, 0, NULL, NULL));
    ASSERT_EQ(0, vcu_backend_session_count(be));
    ASSERT_EQ(VCU_S_OK, ut_open_ex(be, 1, UINT32_MAX, VCU_FEAT_ECHO, NULL, NULL));
    ASSERT_EQ(1, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}

TEST(sess_too_many)
{
    vcu_backend_t *be = ut_backend(2);
    uint64_t a = 0, b = 0, c = 0, d = 0;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &a));
    ASSERT_EQ(VCU_S_OK, ut_open(be, &b));
    ASSERT_EQ(VCU_S_EBUSY, ut_open(be, &c));
    ASSERT_EQ(2, vcu_backend_session_count(be));
    ASSERT_EQ(VCU_S_OK, ut_close(be, a));
    ASSERT_EQ(1, vcu_backend_session_count(be));
    ASSERT_EQ(VCU_S_OK, ut_open(be, &c));
    ASSERT_EQ(VCU_S_EBUSY, ut_open(be, &d));
    /* Ids are never reused, not even for the same slot. */
    ASSERT_NE(a, c);
    ASSERT_NE(b, c);
    ASSERT_EQ(VCU_S_ENOSESSION, ut_close(be, a));
    vcu_backend_free(be);
    return 0;
}

static uint32_t echo_sync(vcu_backend_t *be, uint64_t sid, uint32_t delay_ms)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_echo_build(t, sid, 0, 0, delay_ms, NULL, 0);
    vcu_backend_execute(be, &t->r);
    st = ut_status(t);
    free(t);
    return st;
}

TEST(sess_close)
{
    vcu_backend_t *be = ut_backend(0);
    uint64_t a = 0, b = 0;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &a));
    ASSERT_EQ(VCU_S_OK, ut_open(be, &b));
    ASSERT_EQ(VCU_S_OK, echo_sync(be, a, 0));
    ASSERT_EQ(VCU_S_OK, ut_close(be, a));
    ASSERT_EQ(1, vcu_backend_session_count(be));
    ASSERT_EQ(VCU_S_ENOSESSION, echo_sync(be, a, 0));
    ASSERT_EQ(VCU_S_ENOSESSION, ut_close(be, a));
    ASSERT_EQ(VCU_S_OK, echo_sync(be, b, 0));
    ASSERT_EQ(VCU_S_OK, ut_close(be, b));
    ASSERT_EQ(0, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}

/* Completion order, recorded by the done callbacks. */
static atomic_int order_n, order_fin;
static int order[64];

static void order_done(vcu_request_t *r)
{
    ut_req_t *t = (ut_req_t *)r;
    int i = atomic_fetch_add(&order_n, 1);

    if (i < 64)
        order[i] = (int)(intptr_t)t->user;
    atomic_fetch_add(&t->ndone, 1);
    atomic_fetch_add(&order_fin, 1);    /* after the slot is written */
}

TEST(sess_close_queued)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t[8];
    uint64_t sid = 0;
    int i;

    atomic_store(&order_n, 0);
    atomic_store(&order_fin, 0);
    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    for (i = 0; i < 8; i++) {
        t[i] = ut_req_new();
        t[i]->user = (void *)(intptr_t)i;
        t[i]->r.done = order_done;
        if (i < 7)
            ut_echo_build(t[i], sid, 0, 0, i == 0 ? 300 : 0, NULL, 0);
        else
            ut_req_build(t[i], VCU_OP_SESSION_CLOSE, sid, NULL, 0);
    }
    for (i = 0; i < 8; i++)
        vcu_backend_submit(be, &t[i]->r);
    ASSERT_EQ(0, ut_wait_count(&order_fin, 8));
    /* The quick echoes do not wait for the slow one, which the close
     * cancels; the close replies last. */
    for (i = 0; i < 6; i++)
        ASSERT_EQ(i + 1, order[i]);
    ASSERT_EQ(0, order[6]);
    ASSERT_EQ(7, order[7]);
    for (i = 0; i < 8; i++) {
        ASSERT_EQ(1, atomic_load(&t[i]->ndone));
        ASSERT_EQ(i == 0 ? VCU_S_ECANCELED : VCU_S_OK, ut_status(t[i]));
        free(t[i]);
    }
    ASSERT_EQ(0, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}

TEST(sess_close_cuts_delay)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();
    uint64_t sid = 0;
    double t0;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    ut_echo_build(t, sid, 0, 0, 10000, NULL, 0);
    t0 = ut_now();
    vcu_backend_submit(be, &t->r);
    usleep(50 * 1000);
    ASSERT_EQ(0, atomic_load(&t->ndone));
    ASSERT_EQ(VCU_S_OK, ut_close(be, sid));
    ASSERT_EQ(1, atomic_load(&t->ndone));      /* before the close's reply */
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(t));
    ASSERT_LT(ut_now() - t0, 3.0);
    free(t);
    vcu_backend_free(be);
    return 0;
}

TEST(sess_features_enforced)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();
    uint64_t none = 0, echo = 0;

    ASSERT_EQ(VCU_S_OK, ut_open_ex(be, 1, 1, 0, &none, NULL));
    ASSERT_EQ(VCU_S_OK, ut_open_ex(be, 1, 1, VCU_FEAT_ECHO, &echo, NULL));
    ASSERT_EQ(VCU_S_ENOTSUP, echo_sync(be, none, 0));
    ASSERT_EQ(VCU_S_OK, echo_sync(be, echo, 0));
    ut_echo_build(t, echo, 0, 0, 0, NULL, 0);
    ut_hdr(t)->flags = VCU_REQ_F_ASYNC;        /* ASYNC not agreed */
    vcu_backend_execute(be, &t->r);
    ASSERT_EQ(VCU_S_ENOTSUP, ut_status(t));
    free(t);
    vcu_backend_free(be);
    return 0;
}

TEST(sess_reset_cancels)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t[2][6];
    uint64_t sid[2] = {0, 0}, again = 0;
    double t0;
    int s, i;

    for (s = 0; s < 2; s++) {
        ASSERT_EQ(VCU_S_OK, ut_open(be, &sid[s]));
        for (i = 0; i < 6; i++) {
            t[s][i] = ut_req_new();
            ut_echo_build(t[s][i], sid[s], 0, 0, 10000, "tail", 4);
        }
    }
    t0 = ut_now();
    for (s = 0; s < 2; s++)
        for (i = 0; i < 6; i++)
            vcu_backend_submit(be, &t[s][i]->r);
    usleep(100 * 1000);             /* all are waiting now */
    for (s = 0; s < 2; s++)
        for (i = 0; i < 6; i++)
            ASSERT_EQ(0, atomic_load(&t[s][i]->ndone));
    vcu_backend_reset(be);
    ASSERT_LT(ut_now() - t0, 3.0);
    ASSERT_EQ(0, vcu_backend_session_count(be));
    for (s = 0; s < 2; s++) {
        for (i = 0; i < 6; i++) {
            ASSERT_EQ(1, atomic_load(&t[s][i]->ndone));
            ASSERT_EQ(VCU_S_ECANCELED, ut_status(t[s][i]));
            ASSERT_EQ(0, ut_resp(t[s][i])->payload_len);
            free(t[s][i]);
        }
        ASSERT_EQ(VCU_S_ENOSESSION, echo_sync(be, sid[s], 0));
    }
    /* The backend works on after a reset. */
    ASSERT_EQ(VCU_S_OK, ut_open(be, &again));
    ASSERT_EQ(VCU_S_OK, echo_sync(be, again, 0));
    vcu_backend_free(be);
    return 0;
}

TEST(sess_reset_idle)
{
    vcu_backend_t *be = ut_backend(0);
    uint64_t a = 0;

    vcu_backend_reset(be);
    vcu_backend_reset(be);
    ASSERT_EQ(0, vcu_backend_session_count(be));
    ASSERT_EQ(VCU_S_OK, ut_open(be, &a));
    ASSERT_EQ(VCU_S_OK, ut_close(be, a));      /* leaves a closed worker to join */
    vcu_backend_reset(be);
    ASSERT_EQ(0, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return 0;
}

TEST(sess_free_with_work)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t[4];
    uint64_t sid = 0;
    int i;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    for (i = 0; i < 4; i++) {
        t[i] = ut_req_new();
        ut_echo_build(t[i], sid, 0, 0, 5000, NULL, 0);
        vcu_backend_submit(be, &t[i]->r);
    }
    vcu_backend_free(be);
    for (i = 0; i < 4; i++) {
        ASSERT_EQ(1, atomic_load(&t[i]->ndone));
        ASSERT_TRUE(ut_status(t[i]) == VCU_S_OK || ut_status(t[i]) == VCU_S_ECANCELED);
        ASSERT_EQ(VCU_S_ECANCELED, i > 0 ? ut_status(t[i]) : VCU_S_ECANCELED);
        free(t[i]);
    }
    return 0;
}

TEST(sess_reuse_after_reset)
{
    vcu_backend_t *be = ut_backend(0);
    uint64_t id;
    int round, i;

    for (round = 0; round < 2; round++) {
        for (i = 0; i < 64; i++)
            ASSERT_EQ(VCU_S_OK, ut_open(be, &id));
        ASSERT_EQ(VCU_S_EBUSY, ut_open(be, &id));
        ASSERT_EQ(64, vcu_backend_session_count(be));
        vcu_backend_reset(be);
        ASSERT_EQ(0, vcu_backend_session_count(be));
    }
    vcu_backend_free(be);
    return 0;
}

TEST(sess_new_bad_args)
{
    vcu_backend_config_t cfg;
    vcu_backend_t *be = (vcu_backend_t *)1;

    memset(&cfg, 0, sizeof(cfg));
    ASSERT_EQ(VCU_EINVAL, vcu_backend_new(&cfg, NULL));
    cfg.max_sessions = 1u << 30;
    ASSERT_EQ(VCU_EINVAL, vcu_backend_new(&cfg, &be));
    ASSERT_NULL(be);
    /* No config at all: defaults. */
    ASSERT_EQ(0, vcu_backend_new(NULL, &be));
    ASSERT_NOT_NULL(be);
    vcu_backend_free(be);
    vcu_backend_free(NULL);
    vcu_backend_reset(NULL);
    ASSERT_EQ(0, vcu_backend_session_count(NULL));
    ASSERT_EQ(VCU_EINVAL, vcu_backend_execute(NULL, NULL));
    return 0;
}

TEST(sess_execute_restores)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();
    uint64_t sid = 0;
    int cookie;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    ut_echo_build(t, sid, 0, 0, 0, NULL, 0);
    t->r.opaque = &cookie;
    ASSERT_EQ(0, vcu_backend_execute(be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_TRUE(t->r.done == ut_done);
    ASSERT_TRUE(t->r.opaque == &cookie);
    ASSERT_EQ(0, atomic_load(&t->ndone));
    free(t);
    vcu_backend_free(be);
    return 0;
}

static uint32_t cuda_op(vcu_backend_t *be, uint64_t sid, uint32_t op, size_t size, int seg)
{
    ut_req_t *t = ut_req_new();
    static unsigned char buf[4096];
    unsigned char payload[256];
    uint32_t st;

    memset(payload, 0, sizeof(payload));
    if (seg)
        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf, sizeof(buf));
    ut_req_build(t, op, sid, payload, (uint32_t)size);
    vcu_backend_execute(be, &t->r);
    st = ut_status(t);
    if (ut_resp(t)->payload_len != 0)
        st = 0xdead;
    free(t);
    return st;
}

/* No driver: CUDA is not offered and CUDA opcodes answer ENODEV. */
TEST(sess_cuda_enodev)
{
    vcu_backend_t *be = NULL;
    uint64_t sid = 0, feat = 0;
    char ram[64];

    ASSERT_EQ(0, setenv("VCU_LIBCUDA", UT_NO_LIBCUDA, 1));
    ASSERT_EQ(0, vcu_backend_new(NULL, &be));
    ASSERT_NOT_NULL(vcu_backend_cuda_error(be));
    ASSERT_TRUE(vcu_backend_cuda_error(be)[0] != '\0');
    ASSERT_EQ(VCU_S_OK, ut_open_ex(be, 1, 1, VCU_FEAT_CUDA | VCU_FEAT_ECHO, &sid, &feat));
    ASSERT_EQ_U64(VCU_FEAT_ECHO, feat);
    ASSERT_EQ(VCU_S_ENODEV, cuda_op(be, sid, VCU_OP_CU_DRIVER_INFO, sizeof(struct vcu_cu_hdr), 0));
    ASSERT_EQ(VCU_S_ENODEV, cuda_op(be, sid, VCU_OP_CU_MEMCPY_HTOD,
                                    sizeof(struct vcu_cu_memcpy_req), 1));
    ASSERT_EQ(VCU_S_ENODEV, cuda_op(be, sid, VCU_OP_CU_CALLBACK_WAIT, sizeof(struct vcu_cu_hdr), 0));
    ASSERT_EQ(VCU_S_ENODEV, cuda_op(be, sid, VCU_OP_CU_CALLBACK_DONE,
                                    sizeof(struct vcu_cu_u64_req), 0));
    /* Still validated first: short payload, unknown session. */
    ASSERT_EQ(VCU_S_EINVAL, cuda_op(be, sid, VCU_OP_CU_LAUNCH, 8, 0));
    ASSERT_EQ(VCU_S_ENOSESSION, cuda_op(be, sid + 1, VCU_OP_CU_DRIVER_INFO, 8, 0));
    ASSERT_EQ(VCU_ENODEV, vcu_backend_add_ram(be, ram, sizeof(ram)));
    /* The session is fine after all that. */
    ASSERT_EQ(VCU_S_OK, echo_sync(be, sid, 0));
    vcu_backend_free(be);
    return 0;
}

static uint32_t fence_sync(vcu_backend_t *be, uint64_t sid)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_req_build(t, VCU_OP_SESSION_FENCE, sid, NULL, 0);
    vcu_backend_execute(be, &t->r);
    st = ut_status(t);
    if (ut_resp(t)->payload_len != 0)
        st = 0xdead;
    free(t);
    return st;
}

/* SESSION_FENCE without CUDA state just replies; unknown sessions do not. */
TEST(sess_fence_basic)
{
    vcu_backend_t *be = ut_backend(0);
    uint64_t sid = 0;

    ASSERT_EQ(VCU_S_ENOSESSION, fence_sync(be, 12345));
    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    ASSERT_EQ(VCU_S_OK, fence_sync(be, sid));
    ASSERT_EQ(VCU_S_OK, fence_sync(be, sid));
    ASSERT_EQ(VCU_S_ENOSESSION, fence_sync(be, sid + 1));
    ASSERT_EQ(VCU_S_OK, ut_close(be, sid));
    ASSERT_EQ(VCU_S_ENOSESSION, fence_sync(be, sid));
    vcu_backend_free(be);
    return 0;
}

/* A fence queues behind the session's earlier work and replies after it;
 * another session's work does not wait for it. */
TEST(sess_fence_ordering)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t[5];
    uint64_t a = 0, b = 0;
    int i;

    atomic_store(&order_n, 0);
    atomic_store(&order_fin, 0);
    ASSERT_EQ(VCU_S_OK, ut_open(be, &a));
    ASSERT_EQ(VCU_S_OK, ut_open(be, &b));
    for (i = 0; i < 5; i++) {
        t[i] = ut_req_new();
        t[i]->user = (void *)(intptr_t)i;
        t[i]->r.done = order_done;
    }
    ut_echo_build(t[0], a, 0, 0, 200, NULL, 0);          /* 0: slow work */
    ut_echo_build(t[1], a, 0, 0, 0, NULL, 0);            /* 1: queued behind it */
    ut_req_build(t[2], VCU_OP_SESSION_FENCE, a, NULL, 0); /* 2: the fence */
    ut_echo_build(t[3], a, 0, 0, 0, NULL, 0);            /* 3: after the fence */
    ut_echo_build(t[4], b, 0, 0, 0, NULL, 0);            /* 4: other session */
    for (i = 0; i < 5; i++)
        vcu_backend_submit(be, &t[i]->r);
    ASSERT_EQ(0, ut_wait_count(&order_fin, 5));
    /* Quick echoes, before or after the fence, do not wait for the slow
     * one; the fence waits for everything ahead of it. */
    {
        int pos[5];

        for (i = 0; i < 5; i++)
            pos[order[i]] = i;
        ASSERT_LT(pos[1], pos[0]);
        ASSERT_LT(pos[3], pos[0]);
        ASSERT_LT(pos[0], pos[2]);
        ASSERT_EQ(4, pos[2]);
    }
    for (i = 0; i < 5; i++) {
        ASSERT_EQ(1, atomic_load(&t[i]->ndone));
        ASSERT_EQ(VCU_S_OK, ut_status(t[i]));
        free(t[i]);
    }
    vcu_backend_free(be);
    return 0;
}

/* A fence still queued when the device resets is cancelled, after the
 * work ahead of it. */
TEST(sess_fence_reset)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *e = ut_req_new(), *f = ut_req_new();
    uint64_t sid = 0;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    ut_echo_build(e, sid, 0, 0, 5000, NULL, 0);
    ut_req_build(f, VCU_OP_SESSION_FENCE, sid, NULL, 0);
    vcu_backend_submit(be, &e->r);
    vcu_backend_submit(be, &f->r);
    usleep(50000);
    vcu_backend_reset(be);
    ASSERT_EQ(1, atomic_load(&e->ndone));
    ASSERT_EQ(1, atomic_load(&f->ndone));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(f));
    free(e);
    free(f);
    vcu_backend_free(be);
    return 0;
}
