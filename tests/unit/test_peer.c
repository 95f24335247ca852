/*
 * Peer access, peer copies and stream memory operations in the CUDA
 * executor (CU_CTX_PEER_ACCESS, CU_MEMCPY_PEER, CU_MEMCPY_3D_PEER,
 * CU_STREAM_MEMOPS), against the CPU stand-in: a context named by a
 * device the VM was not given is refused, as are a device's peer access
 * to itself, flags cuda.h does not define, counts out of range, unknown
 * operations and addresses that are not the session's memory; a batch
 * with one bad operation issues none; malformed requests are refused.
 */
#include <stdio.h>

#include <cuda.h>

#include "ut.h"

#define INVAL ((uint32_t)CUDA_ERROR_INVALID_VALUE)
#define BADH ((uint32_t)CUDA_ERROR_INVALID_HANDLE)
#define BADCTX ((uint32_t)CUDA_ERROR_INVALID_CONTEXT)
#define BADDEV ((uint32_t)CUDA_ERROR_INVALID_DEVICE)
#define WIRE_EINVAL (0x10000u + VCU_S_EINVAL)

typedef struct tp_s {
    vcu_backend_t *be;
    uint64_t s;
} tp_t;

static int tp_open(tp_t *c, const char *gpus)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = gpus;
    cfg.account_slot = -1;
    c->be = NULL;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c->be));
    if (vcu_backend_cuda_error(c->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c->be));
    ASSERT_EQ(VCU_S_OK, ut_open(c->be, &c->s));
    return 0;
}

static void tp_close(tp_t *c)
{
    ut_close(c->be, c->s);
    vcu_backend_free(c->be);
}

/* One request without segments: the CUresult, or 0x10000 + the wire
 * status; the reply's first rlen bytes into resp. */
static uint32_t tp_do(tp_t *c, uint32_t op, const void *p, uint32_t plen, void *resp,
                      size_t rlen)
{
    return ut_cu_do(c->be, c->s, op, p, plen, resp, rlen);
}

static uint32_t tp_alloc(tp_t *c, uint32_t dev, uint64_t size, uint64_t *p)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.hdr.device = dev;
    rq.size = size;
    r = tp_do(c, VCU_OP_CU_MEM_ALLOC, &rq, sizeof(rq), &rp, sizeof(rp));
    *p = rp.value;
    return r;
}

static uint32_t tp_free(tp_t *c, uint32_t dev, uint64_t p)
{
    struct vcu_cu_u64_req rq = {{dev, 0}, p};

    return tp_do(c, VCU_OP_CU_MEM_FREE, &rq, sizeof(rq), NULL, 0);
}

static uint32_t tp_access(tp_t *c, uint32_t dev, uint64_t peer, uint64_t flags, uint64_t enable)
{
    struct vcu_cu_pair_req rq = {{dev, 0}, peer, flags, enable};

    return tp_do(c, VCU_OP_CU_CTX_PEER_ACCESS, &rq, sizeof(rq), NULL, 0);
}

static struct vcu_cu_memcpy_peer_req tp_peer(uint32_t dev, uint64_t dst, uint32_t dd,
                                             uint64_t src, uint32_t sd, uint64_t n)
{
    struct vcu_cu_memcpy_peer_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.c.hdr.device = dev;
    rq.c.dst = dst;
    rq.c.src = src;
    rq.c.size = n;
    rq.dst_device = dd;
    rq.src_device = sd;
    return rq;
}

static uint32_t tp_copy(tp_t *c, const struct vcu_cu_memcpy_peer_req *rq)
{
    return tp_do(c, VCU_OP_CU_MEMCPY_PEER, rq, sizeof(*rq), NULL, 0);
}

/* A device-to-device 3D peer copy of 64 x 2 bytes, the sides' devices sd
 * and dd. */
static uint32_t tp_copy3d(tp_t *c, uint64_t dst, uint32_t dd, uint64_t src, uint32_t sd)
{
    struct vcu_cu_memcpy3d_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.src.type = CU_MEMORYTYPE_DEVICE;
    rq.src.ptr = src;
    rq.src.pitch = 64;
    rq.src.height = 2;
    rq.src.reserved = sd;
    rq.dst = rq.src;
    rq.dst.ptr = dst;
    rq.dst.reserved = dd;
    rq.width = 64;
    rq.height = 2;
    rq.depth = 1;
    return tp_do(c, VCU_OP_CU_MEMCPY_3D_PEER, &rq, sizeof(rq), NULL, 0);
}

/* Copies and access between the VM's two devices; devices it was not
 * given refused. */
TEST(peer_hostile)
{
    struct vcu_cu_memcpy_peer_req rq;
    uint64_t p, q;
    tp_t c;

    CHECK(tp_open(&c, "0,1"));
    ASSERT_EQ(0, (int)tp_alloc(&c, 0, 4096, &p));
    ASSERT_EQ(0, (int)tp_alloc(&c, 1, 4096, &q));

    /* Copies: both ways, and within one device. */
    rq = tp_peer(0, q, 1, p, 0, 4096);
    ASSERT_EQ(0, (int)tp_copy(&c, &rq));
    rq = tp_peer(1, p, 0, q, 1, 4096);
    ASSERT_EQ(0, (int)tp_copy(&c, &rq));
    rq = tp_peer(0, p + 2048, 0, p, 0, 2048);
    ASSERT_EQ(0, (int)tp_copy(&c, &rq));
    rq.c.flags = VCU_CU_MEMCPY_F_ASYNC;
    rq.c.stream = VCU_CU_STREAM_LEGACY;
    ASSERT_EQ(0, (int)tp_copy(&c, &rq));
    rq.c.stream = 0x7777;                       /* forged stream */
    ASSERT_EQ(BADH, tp_copy(&c, &rq));
    /* A context of a device the VM was not given. */
    rq = tp_peer(0, q, 2, p, 0, 4096);
    ASSERT_EQ(BADCTX, tp_copy(&c, &rq));
    rq = tp_peer(0, q, 1, p, UINT32_MAX, 4096);
    ASSERT_EQ(BADCTX, tp_copy(&c, &rq));
    rq = tp_peer(0, q, VCU_CU_MAX_DEVICES, p, 0, 4096);
    ASSERT_EQ(BADCTX, tp_copy(&c, &rq));
    rq = tp_peer(9, q, 1, p, 0, 4096);
    ASSERT_EQ(BADDEV, tp_copy(&c, &rq));
    /* Malformed. */
    rq = tp_peer(0, q, 1, p, 0, 4096);
    rq.c.reserved = 1;
    ASSERT_EQ(WIRE_EINVAL, tp_copy(&c, &rq));
    rq.c.reserved = 0;
    rq.c.flags = 2;
    ASSERT_EQ(WIRE_EINVAL, tp_copy(&c, &rq));
    rq.c.flags = 0;
    ASSERT_EQ(WIRE_EINVAL, tp_do(&c, VCU_OP_CU_MEMCPY_PEER, &rq, sizeof(rq) - 8, NULL, 0));

    /* 3D: each side's device checked. */
    ASSERT_EQ(0, (int)tp_copy3d(&c, q, 1, p, 0));
    ASSERT_EQ(BADCTX, tp_copy3d(&c, q, 2, p, 0));
    ASSERT_EQ(BADCTX, tp_copy3d(&c, q, 1, p, 0x80000000u));

    /* Access: once, then again refused; off once. */
    ASSERT_EQ(0, (int)tp_access(&c, 0, 1, 0, 1));
    ASSERT_EQ((uint32_t)CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, tp_access(&c, 0, 1, 0, 1));
    ASSERT_EQ(0, (int)tp_access(&c, 1, 0, 0, 1));
    ASSERT_EQ(0, (int)tp_access(&c, 0, 1, 0, 0));
    ASSERT_EQ((uint32_t)CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, tp_access(&c, 0, 1, 0, 0));
    /* A device is not its own peer. */
    ASSERT_EQ(BADDEV, tp_access(&c, 0, 0, 0, 1));
    ASSERT_EQ((uint32_t)CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, tp_access(&c, 1, 1, 0, 0));
    /* Devices not given, flags, malformed. */
    ASSERT_EQ(BADCTX, tp_access(&c, 0, 2, 0, 1));
    ASSERT_EQ(BADCTX, tp_access(&c, 0, UINT64_MAX, 0, 1));
    ASSERT_EQ(BADDEV, tp_access(&c, 5, 1, 0, 1));
    ASSERT_EQ(INVAL, tp_access(&c, 0, 1, 1, 1));
    ASSERT_EQ(WIRE_EINVAL, tp_access(&c, 0, 1, 0, 2));
    ASSERT_EQ(WIRE_EINVAL, tp_access(&c, 0, 1, 1, 0));

    ASSERT_EQ(0, (int)tp_free(&c, 0, p));
    ASSERT_EQ(0, (int)tp_free(&c, 1, q));
    tp_close(&c);

    /* A VM of one device: the host's second device is not its. */
    CHECK(tp_open(&c, "0"));
    ASSERT_EQ(0, (int)tp_alloc(&c, 0, 4096, &p));
    ASSERT_EQ(BADCTX, tp_access(&c, 0, 1, 0, 1));
    rq = tp_peer(0, p, 1, p + 64, 0, 64);
    ASSERT_EQ(BADCTX, tp_copy(&c, &rq));
    ASSERT_EQ(BADCTX, tp_copy3d(&c, p, 0, p + 1024, 1));
    tp_close(&c);
    return 0;
}

/* A batch of n operations on stream st of device 0; count as given. */
static uint32_t tp_memops(tp_t *c, uint64_t st, uint32_t count, const struct vcu_cu_memop *ops,
                          uint32_t n, uint32_t flags)
{
    struct {
        struct vcu_cu_memops_req r;
        struct vcu_cu_memop op[8];
    } q;

    memset(&q, 0, sizeof(q));
    q.r.stream = st;
    q.r.count = count;
    q.r.flags = flags;
    memcpy(q.op, ops, n * sizeof(ops[0]));
    return tp_do(c, VCU_OP_CU_STREAM_MEMOPS, &q, (uint32_t)(sizeof(q.r) + n * sizeof(ops[0])),
                 NULL, 0);
}

static struct vcu_cu_memop tp_op(uint32_t type, uint32_t flags, uint64_t addr, uint64_t v)
{
    struct vcu_cu_memop o = {type, flags, addr, v};

    return o;
}

static uint32_t tp_one(tp_t *c, struct vcu_cu_memop o)
{
    return tp_memops(c, VCU_CU_STREAM_LEGACY, 1, &o, 1, 0);
}

/* Stream memory operations: counts, operations, flags and addresses. */
TEST(memops_hostile)
{
    struct vcu_cu_memop ops[8];
    uint64_t p, gone;
    tp_t c;

    CHECK(tp_open(&c, "0"));
    ASSERT_EQ(0, (int)tp_alloc(&c, 0, 4096, &p));
    ASSERT_EQ(0, (int)tp_alloc(&c, 0, 4096, &gone));
    ASSERT_EQ(0, (int)tp_free(&c, 0, gone));

    ops[0] = tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, p, 7);
    ops[1] = tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, 0, p + 8, 1ull << 40);
    ops[2] = tp_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, CU_STREAM_WAIT_VALUE_EQ, p, 7);
    ops[3] = tp_op(CU_STREAM_MEM_OP_WAIT_VALUE_64, CU_STREAM_WAIT_VALUE_GEQ, p + 8, 1ull << 40);
    ops[4] = tp_op(CU_STREAM_MEM_OP_BARRIER, CU_STREAM_MEMORY_BARRIER_TYPE_GPU, 0, 0);
    ops[5] = tp_op(CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES, 0, 0, 0);
    ASSERT_EQ(0, (int)tp_memops(&c, VCU_CU_STREAM_LEGACY, 6, ops, 6, 0));
    ASSERT_EQ(0, (int)tp_memops(&c, VCU_CU_STREAM_PER_THREAD, 6, ops, 6, 0));
    ASSERT_EQ(BADH, tp_memops(&c, 0x7777, 6, ops, 6, 0));

    /* Counts and flags: malformed. */
    ASSERT_EQ(WIRE_EINVAL, tp_memops(&c, VCU_CU_STREAM_LEGACY, 0, ops, 0, 0));
    ASSERT_EQ(WIRE_EINVAL, tp_memops(&c, VCU_CU_STREAM_LEGACY, VCU_CU_MEMOPS_MAX + 1, ops, 6, 0));
    ASSERT_EQ(WIRE_EINVAL, tp_memops(&c, VCU_CU_STREAM_LEGACY, 7, ops, 6, 0));  /* short */
    ASSERT_EQ(WIRE_EINVAL, tp_memops(&c, VCU_CU_STREAM_LEGACY, 1, ops, 1, 1));

    /* Operations and flags cuda.h does not define. */
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(0, 0, p, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(99, 0, p, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32,
                                      CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER, p, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, 0x100, p, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_BARRIER, 2, 0, 0)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_BARRIER, 0, p, 0)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES, 1, 0, 0)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, p, 1ull << 32)));
    /* Addresses: aligned, inside the session's live allocations. */
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, p + 2, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, 0, p + 4, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, 0, p + 4096, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, p + 4094, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, gone, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, 0, 0, 1)));
    ASSERT_EQ(INVAL, tp_one(&c, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_64, 0, UINT64_MAX - 7, 1)));

    /* One bad operation: none is issued (p still holds 7). */
    ops[0] = tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, p, 9);
    ops[1] = tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, gone, 9);
    ASSERT_EQ(INVAL, tp_memops(&c, VCU_CU_STREAM_LEGACY, 2, ops, 2, 0));
    ASSERT_EQ(0, (int)tp_one(&c, tp_op(CU_STREAM_MEM_OP_WAIT_VALUE_32, CU_STREAM_WAIT_VALUE_EQ,
                                       p, 7)));

    /* Another session (another guest process) names this one's memory:
     * refused, and p still holds 7. */
    {
        tp_t o = { c.be, 0 };

        ASSERT_EQ(VCU_S_OK, ut_open(c.be, &o.s));
        ASSERT_EQ(INVAL, tp_one(&o, tp_op(CU_STREAM_MEM_OP_WRITE_VALUE_32, 0, p, 9)));
        ASSERT_EQ(INVAL, tp_one(&o, tp_op(CU_STREAM_MEM_OP_WAIT_VALUE_32,
                                          CU_STREAM_WAIT_VALUE_EQ, p, 7)));
        ut_close(c.be, o.s);
        ASSERT_EQ(0, (int)tp_one(&c, tp_op(CU_STREAM_MEM_OP_WAIT_VALUE_32,
                                           CU_STREAM_WAIT_VALUE_EQ, p, 7)));
    }

    ASSERT_EQ(0, (int)tp_free(&c, 0, p));
    tp_close(&c);
    return 0;
}
