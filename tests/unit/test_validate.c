/*
 * Request validation: every malformed request gets its own status and
 * exactly one done call, never a crash.
 */
#include <stdint.h>

#include "ut.h"

/* Submits t (built already) to a backend with one open session and
 * checks the reply status and that done ran exactly once. */
static int expect_status(vcu_backend_t *be, ut_req_t *t, uint32_t status)
{
    vcu_backend_submit(be, &t->r);
    ASSERT_EQ(0, ut_wait_count(&t->ndone, 1));
    ASSERT_EQ(1, atomic_load(&t->ndone));
    ASSERT_EQ(sizeof(struct vcu_resp_hdr) + ut_resp(t)->payload_len, t->r.resp_len);
    ASSERT_EQ(status, ut_status(t));
    ASSERT_EQ(0, ut_resp(t)->reserved);
    return 0;
}

/* An ECHO with one 64-byte segment each way: valid unless tampered with. */
static unsigned char in_buf[64], out_buf[64];

static void echo_req(ut_req_t *t, uint64_t sid)
{
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in_buf, sizeof(in_buf));
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out_buf, sizeof(out_buf));
    ut_echo_build(t, sid, 1, 0, 0, NULL, 0);
}

static int check(uint32_t status, void (*tamper)(ut_req_t *t, uint64_t sid))
{
    vcu_backend_t *be = ut_backend(0);
    uint64_t sid = 0;
    ut_req_t *t = ut_req_new();
    int rc;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    echo_req(t, sid);
    tamper(t, sid);
    rc = expect_status(be, t, status);
    free(t);
    ASSERT_EQ(1, vcu_backend_session_count(be));
    vcu_backend_free(be);
    return rc;
}

static void t_none(ut_req_t *t, uint64_t sid)
{
    (void)t;
    (void)sid;
}

/* The untampered request really is valid: the other tests can fail. */
static int baseline(void)
{
    return check(VCU_S_OK, t_none);
}

static int resp_count;
static void count_done(vcu_request_t *r)
{
    (void)r;
    resp_count++;
}

TEST(val_resp_too_small)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();

    echo_req(t, 1);
    t->r.resp_cap = sizeof(struct vcu_resp_hdr) - 1;
    t->r.resp_len = 12345;
    t->r.done = count_done;
    resp_count = 0;
    vcu_backend_submit(be, &t->r);
    ASSERT_EQ(1, resp_count);
    ASSERT_EQ(0, t->r.resp_len);
    ASSERT_EQ(0xa5a5a5a5u, ut_status(t));   /* nothing written */
    free(t);
    vcu_backend_free(be);
    return 0;
}

TEST(val_resp_null)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();

    echo_req(t, 1);
    t->r.resp = NULL;
    t->r.done = count_done;
    resp_count = 0;
    vcu_backend_submit(be, &t->r);
    ASSERT_EQ(1, resp_count);
    ASSERT_EQ(0, t->r.resp_len);
    free(t);
    vcu_backend_free(be);
    return 0;
}

static void t_short_header(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->r.req_len = sizeof(struct vcu_req_hdr) - 1;
}
TEST(val_short_header)
{
    CHECK(baseline());
    CHECK(check(VCU_S_EINVAL, t_short_header));
    return 0;
}

static void t_null_bytes(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->r.req = NULL;
}
TEST(val_null_request_bytes)
{
    return check(VCU_S_EINVAL, t_null_bytes);
}

static void t_hdr_reserved(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->reserved = 1;
}
TEST(val_hdr_reserved_nonzero)
{
    return check(VCU_S_EINVAL, t_hdr_reserved);
}

static void t_hdr_flags(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->flags = 1u << 7;
}
TEST(val_hdr_flags_unknown)
{
    return check(VCU_S_EINVAL, t_hdr_flags);
}

static void t_payload_big(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->payload_len = VCU_MAX_PAYLOAD + 1;
    t->r.req_len = sizeof(t->reqbuf);   /* the bytes are there */
}
static void t_payload_huge(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->payload_len = UINT32_MAX;
}
TEST(val_payload_too_large)
{
    CHECK(check(VCU_S_E2BIG, t_payload_big));
    CHECK(check(VCU_S_E2BIG, t_payload_huge));
    return 0;
}

static void t_payload_beyond(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    /* No segments: the payload alone runs past req_len. */
    t->r.nsegs = 0;
    ut_hdr(t)->nsegs = 0;
    ut_hdr(t)->payload_len = 4096;
    t->r.req_len = sizeof(struct vcu_req_hdr) + 4096 - 8;
}
TEST(val_payload_beyond_req_len)
{
    return check(VCU_S_EINVAL, t_payload_beyond);
}

static void t_table_beyond(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->r.req_len -= 1;              /* last segment entry cut short */
}
TEST(val_seg_table_beyond_req_len)
{
    return check(VCU_S_EINVAL, t_table_beyond);
}

static void t_ranges_after(ut_req_t *t, uint64_t sid)
{
    struct vcu_range *r = (struct vcu_range *)((char *)t->reqbuf + t->r.req_len);

    (void)sid;
    r[0].gpa = 0xdead000;
    r[0].len = 77;
    r[1].gpa = 0xbeef000;
    r[1].len = 99;
    t->r.req_len += 2 * sizeof(*r) + 3;
}
TEST(val_range_list_ignored)
{
    return check(VCU_S_OK, t_ranges_after);
}

static void t_nsegs_many(ut_req_t *t, uint64_t sid)
{
    unsigned int i;

    for (i = t->nsegs; i < VCU_MAX_SEGS + 1; i++)
        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in_buf, 8);
    ut_echo_build(t, sid, 1, 0, 0, NULL, 0);
}
static void t_nsegs_max(ut_req_t *t, uint64_t sid)
{
    unsigned int i;

    for (i = t->nsegs; i < VCU_MAX_SEGS; i++)
        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, in_buf, 8);
    ut_echo_build(t, sid, 1, 0, 0, NULL, 0);
}
TEST(val_nsegs_too_many)
{
    CHECK(check(VCU_S_OK, t_nsegs_max));
    CHECK(check(VCU_S_E2BIG, t_nsegs_many));
    return 0;
}

static void t_nsegs_mismatch_host(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->r.nsegs = 1;
}
static void t_nsegs_mismatch_wire(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->nsegs = 1;           /* wire says 1, transport gave 2 */
}
TEST(val_nsegs_mismatch)
{
    CHECK(check(VCU_S_EINVAL, t_nsegs_mismatch_host));
    CHECK(check(VCU_S_EINVAL, t_nsegs_mismatch_wire));
    return 0;
}

static void t_segs_null(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->r.segs = NULL;
}
TEST(val_segs_null)
{
    return check(VCU_S_EINVAL, t_segs_null);
}

static void t_flags_zero(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 1)->flags = 0;
    t->segs[1].flags = 0;
}
TEST(val_seg_flags_zero)
{
    return check(VCU_S_EINVAL, t_flags_zero);
}

static void t_flags_both(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 0)->flags = VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE;
    t->segs[0].flags = VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE;
}
TEST(val_seg_flags_both)
{
    return check(VCU_S_EINVAL, t_flags_both);
}

static void t_flags_unknown(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 0)->flags |= 1u << 5;
    t->segs[0].flags |= 1u << 5;
}
TEST(val_seg_flags_unknown_bit)
{
    return check(VCU_S_EINVAL, t_flags_unknown);
}

static void t_flags_host(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->segs[0].flags = VCU_SEG_FROM_DEVICE;  /* wire says TO_DEVICE */
}
TEST(val_seg_flags_host_mismatch)
{
    return check(VCU_S_EINVAL, t_flags_host);
}

static void t_seg_len_wire(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 1)->len = 63;
}
static void t_seg_len_host(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->segs[1].len = 65;            /* wire and iov say 64 */
}
TEST(val_seg_len_mismatch)
{
    CHECK(check(VCU_S_EINVAL, t_seg_len_wire));
    CHECK(check(VCU_S_EINVAL, t_seg_len_host));
    return 0;
}

static void t_iov_short(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->iov[0][0].iov_len = 63;      /* seg len and wire len stay 64 */
}
TEST(val_seg_iov_sum_short)
{
    return check(VCU_S_EINVAL, t_iov_short);
}

static void t_iov_long(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->iov[1][1] = (struct iovec){out_buf, 1};
    t->segs[1].iovcnt = 2;          /* 64 + 1 */
}
TEST(val_seg_iov_sum_long)
{
    return check(VCU_S_EINVAL, t_iov_long);
}

/* Two iovecs whose sum wraps to exactly the segment length.  Never
 * dereferenced: validation must stop first. */
static void t_iov_wrap(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->iov[0][0] = (struct iovec){in_buf, SIZE_MAX};
    t->iov[0][1] = (struct iovec){in_buf, 65};  /* SIZE_MAX + 65 == 64 mod 2^64 */
    t->segs[0].iovcnt = 2;
}
TEST(val_seg_iov_overflow)
{
    return check(VCU_S_EINVAL, t_iov_wrap);
}

static void t_iov_null(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->segs[0].iov = NULL;
}
static void t_iov_base_null(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    t->iov[0][0].iov_base = NULL;
}
TEST(val_seg_iov_null)
{
    CHECK(check(VCU_S_EINVAL, t_iov_null));
    CHECK(check(VCU_S_EINVAL, t_iov_base_null));
    return 0;
}

/* A segment one byte over the limit: fake length, never touched. */
static void t_xfer_big(ut_req_t *t, uint64_t sid)
{
    uint64_t big = VCU_MAX_XFER + 1;

    (void)sid;
    t->iov[0][0].iov_len = big;
    t->segs[0].len = big;
    ut_wseg(t, 0)->len = big;
}
TEST(val_xfer_too_large)
{
    return check(VCU_S_E2BIG, t_xfer_big);
}

/* Each segment within the limit, their sum over it; and one whose sum
 * with the first would wrap 64 bits. */
static void t_xfer_sum(ut_req_t *t, uint64_t sid)
{
    uint64_t half = VCU_MAX_XFER / 2 + 1;
    unsigned int i;

    (void)sid;
    for (i = 0; i < 2; i++) {
        t->iov[i][0].iov_len = half;
        t->segs[i].len = half;
        ut_wseg(t, i)->len = half;
    }
}
static void t_xfer_wrap(ut_req_t *t, uint64_t sid)
{
    uint64_t big = UINT64_MAX - 10;

    (void)sid;
    t->iov[1][0].iov_len = big;
    t->segs[1].len = big;
    ut_wseg(t, 1)->len = big;
}
TEST(val_xfer_sum_too_large)
{
    CHECK(check(VCU_S_E2BIG, t_xfer_sum));
    CHECK(check(VCU_S_E2BIG, t_xfer_wrap));
    return 0;
}

static void t_opcode(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->opcode = 0x7777;
}
static void t_opcode_zero(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->opcode = 0;
}
TEST(val_unknown_opcode)
{
    CHECK(check(VCU_S_ENOTSUP, t_opcode));
    CHECK(check(VCU_S_ENOTSUP, t_opcode_zero));
    return 0;
}

static void t_session(ut_req_t *t, uint64_t sid)
{
    ut_hdr(t)->session = sid + (1ull << 32);    /* same slot, other generation */
}
static void t_session_zero(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->session = 0;
}
static void t_session_slot(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->session = 0xffffffffull;
}
TEST(val_unknown_session)
{
    CHECK(check(VCU_S_ENOSESSION, t_session));
    CHECK(check(VCU_S_ENOSESSION, t_session_zero));
    CHECK(check(VCU_S_ENOSESSION, t_session_slot));
    return 0;
}

static void t_payload_short(ut_req_t *t, uint64_t sid)
{
    ut_req_build(t, VCU_OP_ECHO, sid, "12345678", 8);  /* echo needs 16 */
}
static void t_open_short(ut_req_t *t, uint64_t sid)
{
    struct vcu_session_open_req oq = {1, 1, 0, {0, 0}};

    (void)sid;
    t->nsegs = 0;
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &oq, sizeof(oq) - 8);
}
static void t_cuda_short(ut_req_t *t, uint64_t sid)
{
    t->nsegs = 0;
    ut_req_build(t, VCU_OP_CU_LAUNCH, sid, "12345678", 8);
}
TEST(val_payload_short_for_op)
{
    CHECK(check(VCU_S_EINVAL, t_payload_short));
    CHECK(check(VCU_S_EINVAL, t_open_short));
    CHECK(check(VCU_S_EINVAL, t_cuda_short));
    return 0;
}

static void t_id(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_hdr(t)->req_id = 0xfeedfacecafebeefull;
    ut_hdr(t)->opcode = 0x9999;
}
TEST(val_req_id_in_error_reply)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();

    echo_req(t, 1);
    t_id(t, 1);
    CHECK(expect_status(be, t, VCU_S_ENOTSUP));
    ASSERT_EQ_U64(0xfeedfacecafebeefull, ut_resp(t)->req_id);
    ASSERT_EQ(0, ut_resp(t)->payload_len);
    free(t);
    vcu_backend_free(be);
    return 0;
}

/* vcu__complete refuses a payload that does not fit the reply buffer. */
TEST(val_complete_oversize)
{
    ut_req_t *t = ut_req_new();

    echo_req(t, 1);
    t->r.resp_cap = sizeof(struct vcu_resp_hdr) + 100;
    vcu__complete(&t->r, VCU_S_OK, 101);
    ASSERT_EQ(1, atomic_load(&t->ndone));
    ASSERT_EQ(VCU_S_ERANGE, ut_status(t));
    ASSERT_EQ(0, ut_resp(t)->payload_len);
    ASSERT_EQ(sizeof(struct vcu_resp_hdr), t->r.resp_len);
    ASSERT_EQ_U64(UT_REQ_ID, ut_resp(t)->req_id);
    vcu__complete(&t->r, VCU_S_OK, 100);
    ASSERT_EQ(2, atomic_load(&t->ndone));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_EQ(100, ut_resp(t)->payload_len);
    ASSERT_EQ(sizeof(struct vcu_resp_hdr) + 100, t->r.resp_len);
    free(t);
    return 0;
}

/* VCU_SEG_F_STABLE: allowed with exactly one direction, on wire and host alike. */
static void t_stable_to(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 0)->flags |= VCU_SEG_F_STABLE;
    t->segs[0].flags |= VCU_SEG_F_STABLE;
}
TEST(val_seg_stable_to_device)
{
    return check(VCU_S_OK, t_stable_to);
}

static void t_stable_from(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 1)->flags |= VCU_SEG_F_STABLE;
    t->segs[1].flags |= VCU_SEG_F_STABLE;
}
TEST(val_seg_stable_from_device)
{
    return check(VCU_S_OK, t_stable_from);
}

static void t_stable_alone(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 0)->flags = VCU_SEG_F_STABLE;
    t->segs[0].flags = VCU_SEG_F_STABLE;
}
TEST(val_seg_stable_alone)
{
    return check(VCU_S_EINVAL, t_stable_alone);
}

static void t_stable_both(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 0)->flags = VCU_SEG_F_STABLE | VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE;
    t->segs[0].flags = ut_wseg(t, 0)->flags;
}
TEST(val_seg_stable_both_dirs)
{
    return check(VCU_S_EINVAL, t_stable_both);
}

static void t_stable_unknown(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 0)->flags |= VCU_SEG_F_STABLE | (1u << 3);
    t->segs[0].flags = ut_wseg(t, 0)->flags;
}
TEST(val_seg_stable_unknown_bit)
{
    return check(VCU_S_EINVAL, t_stable_unknown);
}

static void t_stable_host(ut_req_t *t, uint64_t sid)
{
    (void)sid;
    ut_wseg(t, 0)->flags |= VCU_SEG_F_STABLE;  /* the host iovecs say not stable */
}
TEST(val_seg_stable_host_mismatch)
{
    return check(VCU_S_EINVAL, t_stable_host);
}

/* An echo over stable segments moves the data as over plain ones. */
TEST(val_seg_stable_echo_data)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();
    unsigned char in[100], out[100];
    uint64_t sid = 0;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    ut_fill(in, sizeof(in), 5);
    memset(out, 0, sizeof(out));
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE | VCU_SEG_F_STABLE, in, sizeof(in));
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE | VCU_SEG_F_STABLE, out, sizeof(out));
    ut_echo_build(t, sid, 0, 0, 0, NULL, 0);
    ASSERT_EQ(0, vcu_backend_execute(be, &t->r));
    ASSERT_EQ(VCU_S_OK, ut_status(t));
    ASSERT_MEM_EQ(in, out, sizeof(in));
    free(t);
    vcu_backend_free(be);
    return 0;
}

/* SESSION_FENCE, like the other transport opcodes, takes no segment. */
TEST(val_fence_with_segment)
{
    vcu_backend_t *be = ut_backend(0);
    ut_req_t *t = ut_req_new();
    uint64_t sid = 0;

    ASSERT_EQ(VCU_S_OK, ut_open(be, &sid));
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE | VCU_SEG_F_STABLE, in_buf, sizeof(in_buf));
    ut_req_build(t, VCU_OP_SESSION_FENCE, sid, NULL, 0);
    CHECK(expect_status(be, t, VCU_S_EINVAL));
    free(t);
    vcu_backend_free(be);
    return 0;
}
