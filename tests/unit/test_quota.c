/*
 * The VM's memory quotas (host-backend/common/vcu_account.h, cuda.c,
 * worker.c, proxy*.c): the account on its own, then backends sharing one
 * account against the CPU stand-in (sessions of one VM: allocations,
 * contexts, context limits, host memory), then the proxy with real
 * workers (a killed worker's charge comes back, the daemon's context
 * figure, the workers' aliases of guest memory, a reset in a worker).
 */
#define _GNU_SOURCE                 /* memfd_create */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#include "ut.h"
#include "vcu_account.h"
#include "ut_daemon.h"
#include "vcu_proxy.h"


#define MiB (1ull << 20)
#define OOM ((uint32_t)CUDA_ERROR_OUT_OF_MEMORY)
/* What each context is charged here (the backend's ctx_bytes; the test
 * daemon's --ctx-bytes, ut_daemon.h): a session's quota below holds its
 * context and what the test allocates. */
#define TQ_CTX (1 * MiB)

/* ---- the account alone --------------------------------------------------- */

/* Charges up to the quota, not a byte past; releases make room; a slot
 * released by the trusted side gives back all it held, a lock its holder
 * died with included; a slot full of garbage (a confused worker) only
 * denies its own VM until it is released. */
TEST(quota_account)
{
    vcu_account_t *a;
    int s0, s1;

    ASSERT_EQ(0, vcu__acct_new(10 * MiB, 4, &a));
    s0 = vcu__acct_claim(a, 0x100000001ull);
    s1 = vcu__acct_claim(a, 0x100000002ull);
    ASSERT_EQ(0, s0);
    ASSERT_EQ(1, s1);
    ASSERT_EQ(0, vcu__acct_charge(a, s0, 0, 6 * MiB));
    ASSERT_EQ(0, vcu__acct_charge(a, s1, 0, 4 * MiB));
    ASSERT_EQ(-1, vcu__acct_charge(a, s1, 0, 1));
    ASSERT_EQ(0, vcu__acct_charge(a, s1, 1, 10 * MiB));    /* per device */
    ASSERT_EQ(-1, vcu__acct_charge(a, s1, 0, UINT64_MAX));
    ASSERT_EQ(-1, vcu__acct_charge(a, 7, 0, 1));           /* no such slot */
    ASSERT_EQ(-1, vcu__acct_charge(a, -1, 0, 1));
    ASSERT_EQ(-1, vcu__acct_charge(a, s0, VCU_ACCT_DEVS, 1));
    ASSERT_EQ_U64(10 * MiB, vcu__acct_used(a, 0));
    vcu__acct_uncharge(a, s1, 0, 1 * MiB);
    ASSERT_EQ(0, vcu__acct_charge(a, s0, 0, 1 * MiB));
    vcu__acct_uncharge(a, s1, 0, UINT64_MAX);              /* never below zero */
    ASSERT_EQ_U64(7 * MiB, vcu__acct_used(a, 0));

    /* s0 dies holding the lock: the proxy's release breaks it. */
    atomic_store(&a->hdr->lock, (uint32_t)s0 + 1);
    vcu__acct_release(a, s0);
    ASSERT_EQ(0, (int)atomic_load(&a->hdr->lock));
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    ASSERT_EQ(0, vcu__acct_charge(a, s1, 0, 10 * MiB));

    /* A slot a worker filled with garbage. */
    s0 = vcu__acct_claim(a, 0x200000001ull);
    ASSERT_EQ(0, s0);
    atomic_store(&a->slot[s0].charged[0], UINT64_MAX);
    atomic_store(&a->slot[s0].charged[2], UINT64_MAX - 5);
    ASSERT_EQ_U64(UINT64_MAX, vcu__acct_used(a, 0));        /* saturates */
    ASSERT_EQ(-1, vcu__acct_charge(a, s1, 2, 1));
    vcu__acct_fault(a, s0);
    vcu__acct_release(a, s0);
    ASSERT_EQ(0, vcu__acct_charge(a, s1, 2, 10 * MiB));
    ASSERT_EQ_U64(1, atomic_load(&a->hdr->faults));
    vcu__acct_release(a, 99);                              /* ignored */

    /* Every slot taken: no more sessions. */
    ASSERT_EQ(0, vcu__acct_claim(a, 3));
    ASSERT_EQ(2, vcu__acct_claim(a, 4));
    ASSERT_EQ(3, vcu__acct_claim(a, 5));
    ASSERT_EQ(-1, vcu__acct_claim(a, 6));
    vcu__acct_put(a);

    /* Without a quota charges are only recorded. */
    ASSERT_EQ(0, vcu__acct_new(0, 2, &a));
    s0 = vcu__acct_claim(a, 1);
    ASSERT_EQ(0, vcu__acct_charge(a, s0, 0, 1ull << 50));
    ASSERT_EQ_U64(1ull << 50, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/* The proxy's report of a hand-made account: sessions and pids are its
 * own records, whatever a worker wrote over them; garbage figures are
 * shown as found and their sums saturate; the report never passes its
 * array, nor the account's slots. */
TEST(quota_report_hostile)
{
    struct vcu__acct_seen seen[4];
    vcu_account_t *a;
    int s0, s1, s2;

    ASSERT_EQ(0, vcu__acct_new(10 * MiB, 4, &a));
    a->host_quota = 10 * MiB;
    ASSERT_EQ(0u, vcu__acct_report(a, seen, 4));
    s0 = vcu__acct_claim(a, 0x100000001ull);
    s1 = vcu__acct_claim(a, 0x100000002ull);
    s2 = vcu__acct_claim(a, 0x100000003ull);
    ASSERT_EQ(2, s2);
    vcu__acct_set_pid(a, s0, 1111);
    vcu__acct_set_pid(a, s1, 2222);
    vcu__acct_release(a, s2);                              /* not reported */
    ASSERT_EQ(0, vcu__acct_charge(a, s0, 0, 3 * MiB));
    vcu__acct_set_ctx(a, s1, 1, 5 * MiB);
    ASSERT_EQ(2u, vcu__acct_report(a, seen, 4));
    ASSERT_EQ_U64(0x100000001ull, seen[0].session);
    ASSERT_EQ(1111, (int)seen[0].pid);
    ASSERT_EQ_U64(3 * MiB, seen[0].charged[0]);
    ASSERT_EQ_U64(0x100000002ull, seen[1].session);
    ASSERT_EQ_U64(5 * MiB, seen[1].ctx[1]);

    /* A worker writes garbage over its slot, the free ones, the header. */
    atomic_store(&a->slot[s1].session, UINT64_MAX);
    atomic_store(&a->slot[s1].pid, 1);
    atomic_store(&a->slot[s1].flags, UINT32_MAX);
    atomic_store(&a->slot[s1].charged[0], UINT64_MAX - 1);
    atomic_store(&a->slot[s1].ctx[15], UINT64_MAX);
    atomic_store(&a->slot[s1].host, UINT64_MAX - 2);
    atomic_store(&a->slot[s0].host, 7);
    atomic_store(&a->slot[3].session, 77);
    atomic_store(&a->slot[3].charged[15], UINT64_MAX);
    memset(seen, 0xa5, sizeof(seen));
    ASSERT_EQ(2u, vcu__acct_report(a, seen, 1));           /* two held, one room */
    ASSERT_EQ_U64(0x100000001ull, seen[0].session);
    ASSERT_EQ(0xa5, ((unsigned char *)&seen[1])[0]);       /* untouched */
    ASSERT_EQ(2u, vcu__acct_report(a, seen, 4));
    ASSERT_EQ_U64(0x100000002ull, seen[1].session);
    ASSERT_EQ(2222, (int)seen[1].pid);
    ASSERT_EQ(1, (int)seen[1].fault);
    ASSERT_EQ_U64(UINT64_MAX - 1, seen[1].charged[0]);
    ASSERT_EQ_U64(UINT64_MAX - 2, seen[1].host);
    ASSERT_EQ_U64(UINT64_MAX, vcu__acct_host_used(a));    /* saturates */
    ASSERT_EQ(-1, vcu__acct_host_charge(a, s0, 1));       /* with a quota, refused */
    ASSERT_EQ_U64(UINT64_MAX, vcu__acct_used(a, 0));       /* saturates */
    ASSERT_EQ_U64(UINT64_MAX, vcu__acct_ctx(a, 15));
    ASSERT_EQ_U64(UINT64_MAX, vcu__acct_used(a, 15));      /* a free slot's garbage counts */
    ASSERT_EQ(2u, vcu__acct_report(a, NULL, 0));
    vcu__acct_release(a, s1);
    ASSERT_EQ_U64(7, vcu__acct_host_used(a));
    ASSERT_EQ(1u, vcu__acct_report(a, seen, 4));
    ASSERT_EQ_U64(1, atomic_load(&a->hdr->faults));        /* its flag, counted once */
    vcu__acct_put(a);
    return 0;
}

/* ---- backends sharing one account (one VM's sessions) -------------------- */

typedef struct {
    vcu_backend_t *be;
    uint64_t s;
} tq_t;

/* A backend of its own sharing account a, each context charged ctx bytes
 * (0: the backend's default), and a session of it. */
static int tq_open_ctx(tq_t *c, vcu_account_t *a, uint64_t ctx)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0";
    cfg.account = a;
    cfg.account_slot = -1;
    cfg.ctx_bytes = ctx;
    c->be = NULL;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c->be));
    if (vcu_backend_cuda_error(c->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c->be));
    ASSERT_EQ(VCU_S_OK, ut_open(c->be, &c->s));
    return 0;
}

static int tq_open(tq_t *c, vcu_account_t *a)
{
    return tq_open_ctx(c, a, TQ_CTX);
}

/* A second session of c's backend (one VM, two guest processes). */
static int tq_open_more(tq_t *d, const tq_t *c)
{
    d->be = c->be;
    ASSERT_EQ(VCU_S_OK, ut_open(d->be, &d->s));
    return 0;
}

static void tq_close(tq_t *c)
{
    ut_close(c->be, c->s);
    vcu_backend_free(c->be);
}

static uint32_t tq_do(tq_t *c, uint32_t op, const void *p, uint32_t plen, void *resp, size_t rlen)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_req_build(t, op, c->s, p, plen);
    vcu_backend_execute(c->be, &t->r);
    st = ut_status(t);
    ut_resp_copy(t, resp, rlen);
    free(t);
    return st;
}

/* CU_MEM_ALLOC (or _ASYNC on the legacy stream, from pool: 0 the
 * device's current one): the CUresult. */
static uint32_t tq_alloc_from(tq_t *c, uint32_t op, uint64_t pool, uint64_t size, uint64_t *ptr)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    rq.stream = VCU_CU_STREAM_LEGACY;
    rq.pool = pool;
    if (tq_do(c, op, &rq, sizeof(rq), &rp, sizeof(rp)) != VCU_S_OK)
        return 0x10000;
    if (ptr != NULL)
        *ptr = rp.value;
    return rp.r.result;
}

static uint32_t tq_alloc_op(tq_t *c, uint32_t op, uint64_t size, uint64_t *ptr)
{
    return tq_alloc_from(c, op, 0, size, ptr);
}

static uint32_t tq_alloc(tq_t *c, uint64_t size, uint64_t *ptr)
{
    return tq_alloc_op(c, VCU_OP_CU_MEM_ALLOC, size, ptr);
}

static uint32_t tq_free(tq_t *c, uint64_t ptr)
{
    struct vcu_cu_u64_req rq = {{0, 0}, ptr};
    struct vcu_cu_resp rp;

    if (tq_do(c, VCU_OP_CU_MEM_FREE, &rq, sizeof(rq), &rp, sizeof(rp)) != VCU_S_OK)
        return 0x10000;
    return rp.result;
}

static uint32_t tq_free_async(tq_t *c, uint64_t ptr)
{
    struct vcu_cu_memcpy_req rq;
    struct vcu_cu_resp rp;

    memset(&rq, 0, sizeof(rq));
    rq.dst = ptr;
    rq.stream = VCU_CU_STREAM_LEGACY;
    if (tq_do(c, VCU_OP_CU_MEM_FREE_ASYNC, &rq, sizeof(rq), &rp, sizeof(rp)) != VCU_S_OK)
        return 0x10000;
    return rp.result;
}

static int tq_meminfo(tq_t *c, uint64_t *fr, uint64_t *tot)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_mem_info_resp rp;

    ASSERT_EQ(VCU_S_OK, tq_do(c, VCU_OP_CU_MEM_GET_INFO, &h, sizeof(h), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.r.result);
    *fr = rp.free;
    *tot = rp.total;
    return 0;
}

static int tq_slice(tq_t *c, struct vcu_cu_slice_info_resp *r)
{
    struct vcu_cu_hdr h = {0, 0};

    ASSERT_EQ(VCU_S_OK, tq_do(c, VCU_OP_CU_SLICE_INFO, &h, sizeof(h), r, sizeof(*r)));
    ASSERT_EQ(0, (int)r->r.result);
    return 0;
}

static uint32_t tq_module(tq_t *c, const char *image, uint64_t *mod)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_module_load_req rq;
    struct vcu_cu_u64_resp rp;
    size_t len = strlen(image);
    uint32_t st;

    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, (void *)image, len);
    memset(&rq, 0, sizeof(rq));
    rq.image_len = len;
    ut_req_build(t, VCU_OP_CU_MODULE_LOAD, c->s, &rq, sizeof(rq));
    vcu_backend_execute(c->be, &t->r);
    st = ut_status(t);
    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *mod = rp.value;
    return rp.r.result;
}

/* Allocations up to the quota (less the session's context) succeed, one
 * byte past fails as on a full GPU, freeing makes room again; the guest
 * sees total = quota and free = quota - used in cuMemGetInfo, and total =
 * quota in the device's description; the session goes on working. */
TEST(quota_alloc_exact)
{
    vcu_account_t *a;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_device_info_resp di;
    uint64_t p[4], q, fr, tot;
    unsigned int i;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(4 * MiB + TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    for (i = 0; i < 4; i++)
        ASSERT_EQ(0, (int)tq_alloc(&c, 1 * MiB, &p[i]));
    ASSERT_EQ(OOM, tq_alloc(&c, 1, &q));
    CHECK(tq_meminfo(&c, &fr, &tot));
    ASSERT_EQ_U64(4 * MiB + TQ_CTX, tot);
    ASSERT_EQ_U64(0, fr);
    ASSERT_EQ(0, (int)tq_free(&c, p[1]));
    CHECK(tq_meminfo(&c, &fr, &tot));
    ASSERT_EQ_U64(1 * MiB, fr);
    ASSERT_EQ(OOM, tq_alloc(&c, 1 * MiB + 1, &q));
    ASSERT_EQ(0, (int)tq_alloc(&c, 1 * MiB - 512, &p[1]));
    ASSERT_EQ(0, (int)tq_alloc(&c, 512, &q));             /* the last grain */
    ASSERT_EQ(OOM, tq_alloc(&c, 1, NULL));
    ASSERT_EQ(0, (int)tq_free(&c, q));
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_DEVICE_INFO, &h, sizeof(h), &di, sizeof(di)));
    ASSERT_EQ_U64(4 * MiB + TQ_CTX, di.total_mem);
    for (i = 0; i < 4; i++)
        ASSERT_EQ(0, (int)tq_free(&c, p[i]));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));         /* the context's */
    ASSERT_EQ(0, (int)tq_alloc(&c, 4 * MiB, &q));        /* all of it, at once */
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));              /* the session's end gives back */
    vcu__acct_put(a);
    return 0;
}

/* Hostile sizes and frees: nothing drifts the count. */
TEST(quota_hostile)
{
    vcu_account_t *a;
    uint64_t p, q, r;
    tq_t c, d;

    ASSERT_EQ(0, vcu__acct_new(8 * MiB + 2 * TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    CHECK(tq_open(&d, a));
    ASSERT_EQ(0, (int)tq_alloc(&d, 512, &r));            /* both contexts made */
    ASSERT_EQ(0, (int)tq_free(&d, r));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_alloc(&c, 0, &q));
    ASSERT_EQ(OOM, tq_alloc(&c, UINT64_MAX, &q));
    ASSERT_EQ(OOM, tq_alloc(&c, UINT64_MAX - 511, &q));
    ASSERT_EQ(OOM, tq_alloc(&c, 1ull << 63, &q));
    ASSERT_EQ(OOM, tq_alloc(&c, 8 * MiB + 1, &q));
    ASSERT_EQ(OOM, tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, UINT64_MAX, &q));
    ASSERT_EQ(OOM, tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 1ull << 62, &q));
    ASSERT_EQ_U64(2 * TQ_CTX, vcu__acct_used(a, 0));     /* the contexts alone */
    ASSERT_EQ(0, (int)tq_alloc(&c, 3 * MiB, &p));
    ASSERT_EQ(0, (int)tq_free(&c, p));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_free(&c, p));   /* twice */
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_free(&c, p + 512));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_free_async(&c, p));
    ASSERT_EQ_U64(2 * TQ_CTX, vcu__acct_used(a, 0));
    /* Another session's pointer is not ours to free (or to uncharge). */
    ASSERT_EQ(0, (int)tq_alloc(&d, 5 * MiB, &r));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_free(&c, r));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_free_async(&c, r));
    ASSERT_EQ_U64(5 * MiB + 2 * TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(OOM, tq_alloc(&c, 3 * MiB + 1, &q));
    ASSERT_EQ(0, (int)tq_alloc(&c, 3 * MiB, &q));
    ASSERT_EQ(0, (int)tq_free(&d, r));
    ASSERT_EQ(0, (int)tq_free(&c, q));
    ASSERT_EQ_U64(2 * TQ_CTX, vcu__acct_used(a, 0));
    tq_close(&c);
    tq_close(&d);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

#define Q2 (16 * MiB + 2 * TQ_CTX)

/* Two sessions of one VM share the quota; one's end gives its share to
 * the other; CU_SLICE_INFO's figures add up. */
TEST(quota_two_sessions)
{
    vcu_account_t *a;
    struct vcu_cu_slice_info_resp *si = calloc(1, sizeof(*si));
    uint64_t p, q, fr, tot;
    uint32_t i;
    tq_t c, d;

    ASSERT_NOT_NULL(si);
    ASSERT_EQ(0, vcu__acct_new(Q2, 8, &a));
    CHECK(tq_open(&c, a));
    CHECK(tq_open_more(&d, &c));
    ASSERT_EQ(0, (int)tq_alloc(&c, 10 * MiB, &p));
    ASSERT_EQ(OOM, tq_alloc(&d, 6 * MiB + 1, &q));
    ASSERT_EQ(0, (int)tq_alloc(&d, 6 * MiB, &q));
    CHECK(tq_meminfo(&d, &fr, &tot));
    ASSERT_EQ_U64(Q2, tot);
    ASSERT_EQ_U64(0, fr);

    /* Each session's figure holds its context's, and says how much. */
    CHECK(tq_slice(&c, si));
    ASSERT_EQ_U64(Q2, si->mem_quota);
    ASSERT_EQ_U64(Q2, si->mem_total);
    ASSERT_EQ_U64(Q2, si->mem_used);
    ASSERT_EQ_U64(2 * TQ_CTX, si->ctx_bytes);
    ASSERT_EQ(2, (int)si->num_sessions);
    {
        uint64_t sum = 0, ctx = 0;
        int seen_c = 0, seen_d = 0;

        for (i = 0; i < si->num_sessions; i++) {
            sum += si->sessions[i].mem_used;
            ctx += si->sessions[i].ctx_bytes;
            if (si->sessions[i].session == c.s) {
                seen_c = 1;
                ASSERT_EQ_U64(10 * MiB + TQ_CTX, si->sessions[i].mem_used);
            }
            if (si->sessions[i].session == d.s) {
                seen_d = 1;
                ASSERT_EQ_U64(6 * MiB + TQ_CTX, si->sessions[i].mem_used);
            }
            ASSERT_EQ_U64(TQ_CTX, si->sessions[i].ctx_bytes);
        }
        ASSERT_TRUE(seen_c && seen_d);
        ASSERT_EQ_U64(si->mem_used, sum);
        ASSERT_EQ_U64(si->ctx_bytes, ctx);
        ASSERT_EQ_U64(0, si->faults);
    }
    {
        /* A session that only asks for the slice (a guest's nvidia-smi)
         * makes no context: it shows with no memory and no overhead. */
        tq_t e;
        int seen = 0;

        CHECK(tq_open_more(&e, &c));
        CHECK(tq_slice(&e, si));
        ASSERT_EQ_U64(Q2, si->mem_total);
        ASSERT_EQ_U64(Q2, si->mem_used);
        ASSERT_EQ(3, (int)si->num_sessions);
        for (i = 0; i < si->num_sessions; i++) {
            if (si->sessions[i].session != e.s)
                continue;
            seen = 1;
            ASSERT_EQ_U64(0, si->sessions[i].mem_used);
            ASSERT_EQ_U64(0, si->sessions[i].ctx_bytes);
        }
        ASSERT_TRUE(seen);
        ASSERT_EQ(VCU_S_OK, ut_close(e.be, e.s));
    }

    ASSERT_EQ(VCU_S_OK, ut_close(c.be, c.s));     /* its 10 MiB and context come back */
    ASSERT_EQ_U64(6 * MiB + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_alloc(&d, 10 * MiB + TQ_CTX, &p));
    CHECK(tq_slice(&d, si));
    ASSERT_EQ(1, (int)si->num_sessions);
    ASSERT_EQ_U64(Q2, si->mem_used);
    ASSERT_EQ_U64(TQ_CTX, si->ctx_bytes);
    tq_close(&d);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    free(si);
    return 0;
}

/* Stream-ordered allocations from the session's pool count as well; a
 * freed block is charged while the pool holds it, and no longer. */
TEST(quota_pool)
{
    vcu_account_t *a;
    uint64_t p, q, r, fr, tot;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(8 * MiB + TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    ASSERT_EQ(0, (int)tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 5 * MiB, &p));
    ASSERT_EQ_U64(5 * MiB + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(OOM, tq_alloc(&c, 3 * MiB + 1, &q));
    ASSERT_EQ(OOM, tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 3 * MiB + 1, &q));
    ASSERT_EQ(0, (int)tq_alloc(&c, 2 * MiB, &q));
    ASSERT_EQ(0, (int)tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 1 * MiB, &r));
    CHECK(tq_meminfo(&c, &fr, &tot));
    ASSERT_EQ_U64(0, fr);
    ASSERT_EQ(0, (int)tq_free_async(&c, p));
    ASSERT_EQ(0, (int)tq_free(&c, r));  /* a pool block freed at once */
    ASSERT_EQ_U64(2 * MiB + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 6 * MiB, &p));
    ASSERT_EQ(OOM, tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 1, &r));
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/* ---- graph memory ---- */

/* An op of one u64 in, one out: the CUresult (0x10000 + status if the
 * request was refused). */
static uint32_t tq_u64(tq_t *c, uint32_t op, uint64_t v, uint64_t *out)
{
    struct vcu_cu_u64_req rq = {{0, 0}, v};
    struct vcu_cu_u64_resp rp;
    uint32_t st = tq_do(c, op, &rq, sizeof(rq), &rp, sizeof(rp));

    if (st != VCU_S_OK)
        return 0x10000 + st;
    if (out != NULL)
        *out = rp.value;
    return rp.r.result;
}

static uint32_t tq_pair(tq_t *c, uint32_t op, uint64_t a, uint64_t b, uint64_t *out)
{
    struct vcu_cu_pair_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.a = a;
    rq.b = b;
    st = tq_do(c, op, &rq, sizeof(rq), &rp, sizeof(rp));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    if (out != NULL)
        *out = rp.value;
    return rp.r.result;
}

/* CU_GRAPH_ADD_MEM_NODE of kind (size, or dptr to free) after node dep
 * (0: none); *out the reply. */
static uint32_t tq_mem_node(tq_t *c, uint64_t g, uint32_t kind, uint64_t size, uint64_t dptr,
                            uint64_t dep, struct vcu_cu_graph_mem_node_resp *out)
{
    unsigned char buf[sizeof(struct vcu_cu_graph_mem_node_req) + 8];
    struct vcu_cu_graph_mem_node_req rq;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.graph = g;
    rq.kind = kind;
    rq.ndeps = dep != 0;
    rq.size = size;
    rq.dptr = dptr;
    memcpy(buf, &rq, sizeof(rq));
    memcpy(buf + sizeof(rq), &dep, 8);
    st = tq_do(c, VCU_OP_CU_GRAPH_ADD_MEM_NODE, buf, sizeof(rq) + 8 * rq.ndeps, out,
               sizeof(*out));
    return st != VCU_S_OK ? 0x10000 + st : out->r.result;
}

/* A graph of one allocation node of size bytes, instantiated: its exec
 * (and graph, and the allocation's address). */
static int tq_graph_alloc(tq_t *c, uint64_t size, uint64_t *g, uint64_t *x, uint64_t *dptr)
{
    struct vcu_cu_graph_mem_node_resp rp;

    ASSERT_EQ(0, (int)tq_u64(c, VCU_OP_CU_GRAPH_CREATE, 0, g));
    ASSERT_EQ(0, (int)tq_mem_node(c, *g, VCU_CU_MEM_NODE_ALLOC, size, 0, 0, &rp));
    ASSERT_EQ(1, (int)(rp.dptr != 0));
    *dptr = rp.dptr;
    ASSERT_EQ(0, (int)tq_pair(c, VCU_OP_CU_GRAPH_INSTANTIATE, *g, 0, x));
    return 0;
}

/* CU_MEMPOOL_CREATE on device 0 with these properties: the CUresult,
 * *h the pool's handle. */
static uint32_t tq_pool_create(tq_t *c, uint32_t type, uint32_t handles, uint32_t usage,
                               uint32_t reserved, uint64_t *h)
{
    struct vcu_cu_pool_create_req rq;
    struct vcu_cu_u64_resp rp;

    memset(&rq, 0, sizeof(rq));
    rq.alloc_type = type;
    rq.handle_types = handles;
    rq.usage = usage;
    rq.reserved = reserved;
    if (tq_do(c, VCU_OP_CU_MEMPOOL_CREATE, &rq, sizeof(rq), &rp, sizeof(rp)) != VCU_S_OK)
        return 0x10000;
    *h = rp.value;
    return rp.r.result;
}

static uint32_t tq_alloc_pool(tq_t *c, uint64_t h, uint64_t size, uint64_t *ptr)
{
    return tq_alloc_from(c, VCU_OP_CU_MEM_ALLOC_ASYNC, h, size, ptr);
}

/*
 * Pools the guest makes (cuMemPoolCreate) are charged as the session's
 * own pool is: their blocks and the session's share the VM's quota; a
 * pool destroyed with a block still out keeps its charge until the block
 * is freed; a session makes at most 32; the session's own pool is not
 * the guest's to destroy; shareable handles, other memory kinds, usage
 * bits and reserved bytes are refused; another guest process can neither
 * allocate from nor destroy this one's pool; the session's end gives
 * back all of it.
 */
TEST(quota_guest_pools)
{
    struct vcu_cu_hdr hh = {0, 0};
    struct vcu_cu_u64_resp rp;
    vcu_account_t *a;
    uint64_t pl, pl2, def, p, q, x;
    tq_t c, d;
    int i;

    ASSERT_EQ(0, vcu__acct_new(8 * MiB + TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    ASSERT_EQ(0, (int)tq_pool_create(&c, CU_MEM_ALLOCATION_TYPE_PINNED, 0, 0, 0, &pl));
    ASSERT_EQ(0, (int)tq_alloc_pool(&c, pl, 5 * MiB, &p));
    ASSERT_EQ_U64(5 * MiB + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(OOM, tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 3 * MiB + 1, &q));
    ASSERT_EQ(OOM, tq_alloc_pool(&c, pl, 3 * MiB + 1, &q));
    ASSERT_EQ(OOM, tq_alloc(&c, 3 * MiB + 1, &q));

    /* Destroyed with a block out: still charged, the block still the
     * session's to free; then nothing. */
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_MEMPOOL_DESTROY, pl, NULL));
    ASSERT_EQ_U64(5 * MiB + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_HANDLE, tq_alloc_pool(&c, pl, MiB, &q));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_HANDLE, tq_u64(&c, VCU_OP_CU_MEMPOOL_DESTROY, pl, NULL));
    ASSERT_EQ(OOM, tq_alloc(&c, 3 * MiB + 1, &q));
    ASSERT_EQ(0, (int)tq_free_async(&c, p));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_alloc(&c, 8 * MiB, &q));
    ASSERT_EQ(0, (int)tq_free(&c, q));

    /* The session's own pool stays. */
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_MEMPOOL_GET_DEFAULT, &hh, sizeof(hh), &rp, sizeof(rp)));
    def = rp.value;
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_u64(&c, VCU_OP_CU_MEMPOOL_DESTROY, def, NULL));

    /* What is refused, and how. */
    ASSERT_EQ((uint32_t)CUDA_ERROR_NOT_SUPPORTED,
              tq_pool_create(&c, CU_MEM_ALLOCATION_TYPE_PINNED,
                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0, 0, &x));
    ASSERT_EQ((uint32_t)CUDA_ERROR_NOT_SUPPORTED, tq_pool_create(&c, 0, 0, 0, 0, &x));
    ASSERT_EQ((uint32_t)CUDA_ERROR_NOT_SUPPORTED,
              tq_pool_create(&c, CU_MEM_ALLOCATION_TYPE_PINNED, 0, 1, 0, &x));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE,
              tq_pool_create(&c, CU_MEM_ALLOCATION_TYPE_PINNED, 0, 0, 1, &x));

    /* Another guest process of the VM. */
    CHECK(tq_open_more(&d, &c));
    ASSERT_EQ(0, (int)tq_pool_create(&c, CU_MEM_ALLOCATION_TYPE_PINNED, 0, 0, 0, &pl2));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_HANDLE, tq_alloc_pool(&d, pl2, MiB, &q));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_HANDLE, tq_u64(&d, VCU_OP_CU_MEMPOOL_DESTROY, pl2, NULL));
    ASSERT_EQ(0, (int)tq_alloc_pool(&c, pl2, MiB, &p));

    /* At most 32 a session: 31 more, then none. */
    for (i = 0; i < 31; i++)
        ASSERT_EQ(0, (int)tq_pool_create(&c, CU_MEM_ALLOCATION_TYPE_PINNED, 0, 0, 0, &x));
    ASSERT_EQ(OOM, tq_pool_create(&c, CU_MEM_ALLOCATION_TYPE_PINNED, 0, 0, 0, &x));
    ASSERT_EQ(0, (int)tq_pool_create(&d, CU_MEM_ALLOCATION_TYPE_PINNED, 0, 0, 0, &x));
    ASSERT_EQ(0, (int)tq_alloc_pool(&d, x, 2 * MiB, &q));
    ASSERT_EQ_U64(3 * MiB + TQ_CTX * 2, vcu__acct_used(a, 0));

    /* The sessions' ends give back all of it, blocks out and all. */
    ut_close(d.be, d.s);
    ASSERT_EQ_U64(MiB + TQ_CTX, vcu__acct_used(a, 0));
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/*
 * Another guest process of the VM names this one's graph memory: a free
 * node of its own graph, a plain free, an allocation node's parameters
 * by this one's node handle: each refused, and the memory stays this
 * session's (its own free node of it still works).
 */
TEST(quota_graph_mem_other_session)
{
    struct vcu_cu_graph_mem_node_resp rp;
    vcu_account_t *a;
    uint64_t g, gb, p, node;
    tq_t c, d;

    ASSERT_EQ(0, vcu__acct_new(64 * MiB, 8, &a));
    CHECK(tq_open(&c, a));
    CHECK(tq_open_more(&d, &c));
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, &g));
    ASSERT_EQ(0, (int)tq_mem_node(&c, g, VCU_CU_MEM_NODE_ALLOC, 1 * MiB, 0, 0, &rp));
    p = rp.dptr;
    node = rp.node;
    ASSERT_EQ(0, (int)tq_u64(&d, VCU_OP_CU_GRAPH_CREATE, 0, &gb));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE,
              tq_mem_node(&d, gb, VCU_CU_MEM_NODE_FREE, 0, p, 0, &rp));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_free(&d, p));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_HANDLE,
              tq_u64(&d, VCU_OP_CU_GRAPH_MEM_NODE_PARAMS, node, NULL));
    ASSERT_EQ(0, (int)tq_mem_node(&c, g, VCU_CU_MEM_NODE_FREE, 0, p, node, &rp));
    ut_close(d.be, d.s);
    tq_close(&c);
    vcu__acct_put(a);
    return 0;
}

/*
 * Graph memory is charged when a graph that allocates is launched, for
 * what the driver then reserves: no launch takes the VM past its quota
 * (the launch fails as out of memory, nothing runs), whether the
 * allocation node was added or captured from cudaMallocAsync; what
 * graphs hold counts against other allocations; it comes back when the
 * driver no longer reserves it.  Hostile node requests change nothing.
 */
TEST(quota_graph_mem)
{
    struct vcu_cu_graph_mem_node_resp rp;
    struct vcu_cu_stream_create_req sc;
    struct vcu_cu_mem_alloc_req ar;
    struct vcu_cu_u64_resp u;
    vcu_account_t *a;
    uint64_t g, x, p, g2, x2, p2, g3, x3, p3, st, gc, xc, q, fr, tot;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(8 * MiB + TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    /* alloc 6 MiB -> free: nothing charged until it runs. */
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, &g));
    ASSERT_EQ(0, (int)tq_mem_node(&c, g, VCU_CU_MEM_NODE_ALLOC, 6 * MiB, 0, 0, &rp));
    p = rp.dptr;
    ASSERT_EQ(1, (int)(p != 0));
    ASSERT_EQ(0, (int)tq_mem_node(&c, g, VCU_CU_MEM_NODE_FREE, 0, p, rp.node, &rp));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    /* Hostile: past any GPU, no such kind, a free of memory no graph
     * made, dependencies that are not there. */
    ASSERT_EQ(OOM, tq_mem_node(&c, g, VCU_CU_MEM_NODE_ALLOC, 1ull << 60, 0, 0, &rp));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tq_mem_node(&c, g, 3, 1, 0, 0, &rp));
    ASSERT_EQ(0, (int)tq_alloc(&c, 1 * MiB, &q));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE,
              tq_mem_node(&c, g, VCU_CU_MEM_NODE_FREE, 0, q, 0, &rp));
    ASSERT_EQ(0, (int)tq_free(&c, q));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_HANDLE,
              tq_mem_node(&c, g, VCU_CU_MEM_NODE_ALLOC, 1, 0, 12345, &rp));
    ASSERT_EQ(0, (int)tq_pair(&c, VCU_OP_CU_GRAPH_INSTANTIATE, g, 0, &x));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, VCU_CU_STREAM_LEGACY, NULL));
    ASSERT_EQ_U64(6 * MiB + TQ_CTX, vcu__acct_used(a, 0));   /* reserved for graphs */
    ASSERT_EQ(OOM, tq_alloc(&c, 3 * MiB, &q));
    ASSERT_EQ(0, (int)tq_alloc(&c, 2 * MiB, &q));
    ASSERT_EQ(0, (int)tq_free(&c, q));
    ASSERT_EQ(0, (int)tq_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, VCU_CU_STREAM_LEGACY, NULL));
    ASSERT_EQ_U64(6 * MiB + TQ_CTX, vcu__acct_used(a, 0));   /* the same memory again */

    /* 3 MiB more would pass the quota: not launched. */
    CHECK(tq_graph_alloc(&c, 3 * MiB, &g2, &x2, &p2));
    ASSERT_EQ(OOM, tq_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x2, VCU_CU_STREAM_LEGACY, NULL));
    CHECK(tq_graph_alloc(&c, 64 * MiB, &g3, &x3, &p3));
    ASSERT_EQ(OOM, tq_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x3, VCU_CU_STREAM_LEGACY, NULL));
    ASSERT_EQ_U64(6 * MiB + TQ_CTX, vcu__acct_used(a, 0));

    /* The first graph gone, its memory with it (the stand-in unmaps it
     * with its last node): then there is room. */
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, x, NULL));
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_GRAPH_DESTROY, g, NULL));
    CHECK(tq_meminfo(&c, &fr, &tot));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x2, VCU_CU_STREAM_LEGACY, NULL));
    ASSERT_EQ_U64(3 * MiB + TQ_CTX, vcu__acct_used(a, 0));

    /* Captured: cudaMallocAsync is an allocation node, not pool memory. */
    memset(&sc, 0, sizeof(sc));
    sc.flags = CU_STREAM_NON_BLOCKING;
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_STREAM_CREATE, &sc, sizeof(sc), &u, sizeof(u)));
    ASSERT_EQ(0, (int)u.r.result);
    st = u.value;
    ASSERT_EQ(0, (int)tq_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, st,
                              CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, NULL));
    memset(&ar, 0, sizeof(ar));
    ar.size = 6 * MiB;
    ar.stream = st;
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, &ar, sizeof(ar), &u, sizeof(u)));
    ASSERT_EQ(0, (int)u.r.result);
    q = u.value;
    ASSERT_EQ(1, (int)(q != 0));
    ASSERT_EQ_U64(3 * MiB + TQ_CTX, vcu__acct_used(a, 0));   /* not charged as a pool's */
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, st, &gc));
    ASSERT_EQ(0, (int)tq_pair(&c, VCU_OP_CU_GRAPH_INSTANTIATE, gc, 0, &xc));
    ASSERT_EQ(OOM, tq_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, xc, VCU_CU_STREAM_LEGACY, NULL));
    /* x2's allocation freed after its graph, outside, and trimmed away
     * with x2 (the stand-in): then the captured graph fits. */
    ASSERT_EQ(0, (int)tq_free_async(&c, p2));
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, x2, NULL));
    ASSERT_EQ(0, (int)tq_u64(&c, VCU_OP_CU_GRAPH_DESTROY, g2, NULL));
    ASSERT_EQ(0, (int)tq_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, xc, VCU_CU_STREAM_LEGACY, NULL));
    ASSERT_EQ_U64(6 * MiB + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_free(&c, q));                      /* graph memory, freed */
    ASSERT_EQ(OOM, tq_alloc(&c, 3 * MiB, NULL));            /* still reserved */
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/* A module's globals take GPU memory (the stand-in's twin of
 * tests/cuda/symbols.cu's sym_table: 1 KiB): charged while it is loaded,
 * and a load that would pass the quota fails as out of memory. */
TEST(quota_module_globals)
{
    static const char img[] = "//\n.version 8.0\n.target sm_90\n"
                              ".global .align 4 .f32 sym_table[256];\n";
    vcu_account_t *a;
    uint64_t m, m2, p;
    struct vcu_cu_u64_req rq = {{0, 0}, 0};
    struct vcu_cu_resp rp;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(2 * MiB + TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    ASSERT_EQ(0, (int)tq_module(&c, img, &m));
    ASSERT_EQ_U64(1024 + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_alloc(&c, 2 * MiB - 1024, &p));
    ASSERT_EQ(OOM, tq_module(&c, img, &m2));
    ASSERT_EQ_U64(2 * MiB + TQ_CTX, vcu__acct_used(a, 0));
    rq.value = m;
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_MODULE_UNLOAD, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    ASSERT_EQ_U64(2 * MiB - 1024 + TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_module(&c, img, &m));
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/* CU_SLICE_INFO from a hostile guest: a device it does not have, a reply
 * buffer too small for the answer, a payload too short; each refused,
 * nothing written past the reply, the session still answered after. */
TEST(quota_slice_hostile)
{
    vcu_account_t *a;
    struct vcu_cu_slice_info_resp *si = calloc(1, sizeof(*si));
    struct vcu_cu_hdr h = { 99, 0 };
    ut_req_t *t;
    tq_t c;

    ASSERT_NOT_NULL(si);
    ASSERT_EQ(0, vcu__acct_new(16 * MiB, 8, &a));
    CHECK(tq_open(&c, a));
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_SLICE_INFO, &h, sizeof(h), si, sizeof(*si)));
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, (int)si->r.result);
    /* Room for the header only. */
    t = ut_req_new();
    h.device = 0;
    ut_req_build(t, VCU_OP_CU_SLICE_INFO, c.s, &h, sizeof(h));
    t->r.resp_cap = sizeof(struct vcu_resp_hdr) + 8;
    memset((unsigned char *)t->respbuf + t->r.resp_cap, 0x5c, 64);
    vcu_backend_execute(c.be, &t->r);
    ASSERT_NE(VCU_S_OK, ut_status(t));
    for (int i = 0; i < 64; i++)
        ASSERT_EQ(0x5c, ((unsigned char *)t->respbuf)[t->r.resp_cap + (size_t)i]);
    /* No header at all. */
    ut_req_build(t, VCU_OP_CU_SLICE_INFO, c.s, &h, 4);
    t->r.resp_cap = sizeof(t->respbuf);
    vcu_backend_execute(c.be, &t->r);
    ASSERT_NE(VCU_S_OK, ut_status(t));
    free(t);
    CHECK(tq_slice(&c, si));
    ASSERT_EQ_U64(16 * MiB, si->mem_quota);
    tq_close(&c);
    vcu__acct_put(a);
    free(si);
    return 0;
}

/* The device malloc heap the guest asks for is GPU memory too. */
TEST(quota_limits)
{
    vcu_account_t *a;
    struct vcu_cu_limit_req rq;
    struct vcu_cu_resp rp;
    uint64_t p;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(64 * MiB + TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    memset(&rq, 0, sizeof(rq));
    rq.limit = CU_LIMIT_MALLOC_HEAP_SIZE;
    rq.value = 1ull << 40;
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_SET_LIMIT, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ(OOM, rp.result);
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    rq.value = 48 * MiB;
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_SET_LIMIT, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    ASSERT_GT(vcu__acct_used(a, 0), 30 * MiB);
    ASSERT_EQ(OOM, tq_alloc(&c, 40 * MiB, &p));
    rq.value = 1 * MiB;                 /* below the default: nothing charged */
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_SET_LIMIT, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_alloc(&c, 64 * MiB, &p));
    tq_close(&c);
    vcu__acct_put(a);
    return 0;
}

/* A context reset (cudaDeviceReset) frees everything the context held:
 * its allocations, pool blocks, modules and limits are no longer charged,
 * nor is the context itself. */
TEST(quota_ctx_reset)
{
    static const char img[] = "//\n.version 8.0\n.target sm_90\n"
                              ".global .align 4 .f32 sym_table[256];\n";
    vcu_account_t *a;
    struct vcu_cu_limit_req lq;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp rp;
    uint64_t p, q, m;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(64 * MiB + TQ_CTX, 8, &a));
    CHECK(tq_open(&c, a));
    ASSERT_EQ(0, (int)tq_alloc(&c, 3 * MiB, &p));
    ASSERT_EQ(0, (int)tq_alloc_op(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 2 * MiB, &q));
    ASSERT_EQ(0, (int)tq_module(&c, img, &m));
    memset(&lq, 0, sizeof(lq));
    lq.limit = CU_LIMIT_PRINTF_FIFO_SIZE;
    lq.value = 32 * MiB;
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_SET_LIMIT, &lq, sizeof(lq), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    ASSERT_GT(vcu__acct_used(a, 0), 5 * MiB + 20 * MiB);
    ASSERT_GT(vcu__acct_ctx(a, 0), 0);
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_RESET, &h, sizeof(h), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    ASSERT_EQ_U64(0, vcu__acct_ctx(a, 0));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_free(&c, p));  /* gone with it */
    ASSERT_EQ(0, (int)tq_alloc(&c, 64 * MiB, &p));    /* a new context, all of it */
    tq_close(&c);
    vcu__acct_put(a);
    return 0;
}

/* CU_CTX_SET_LIMIT of value for limit: the CUresult. */
static uint32_t tq_limit(tq_t *c, uint32_t limit, uint64_t value)
{
    struct vcu_cu_limit_req rq;
    struct vcu_cu_resp rp;

    memset(&rq, 0, sizeof(rq));
    rq.limit = limit;
    rq.value = value;
    if (tq_do(c, VCU_OP_CU_CTX_SET_LIMIT, &rq, sizeof(rq), &rp, sizeof(rp)) != VCU_S_OK)
        return 0x10000;
    return rp.result;
}

/* The stand-in's device, as the backend reads it: the stack of every
 * thread it holds at once (132 SMs x 2048 threads). */
#define TQ_STACK_THREADS (132ull * 2048)

/*
 * The stack limit makes the driver reserve the stack of every thread the
 * device holds (the stand-in models it: free memory drops by the part
 * past the default): charged before the driver is asked, at least what
 * the device lost and little more, given back when lowered, refused as
 * out of memory past the quota or when its whole reservation passes the
 * quota (with none, the GPU), and given back with the context.
 */
TEST(quota_stack_limit)
{
    vcu_account_t *a;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp rp;
    uint64_t fr0, fr1, tot, drop, ch, p;
    tq_t c;

    /* No quota: cuMemGetInfo is the device's own. */
    ASSERT_EQ(0, vcu__acct_new(0, 8, &a));
    CHECK(tq_open(&c, a));
    CHECK(tq_meminfo(&c, &fr0, &tot));
    ASSERT_EQ(0, (int)tq_limit(&c, CU_LIMIT_STACK_SIZE, 16 << 10));
    CHECK(tq_meminfo(&c, &fr1, &tot));
    drop = fr0 - fr1;
    ch = vcu__acct_used(a, 0) - TQ_CTX;
    ASSERT_EQ_U64(((16 << 10) - 1024) * TQ_STACK_THREADS, drop);   /* 3.9 GiB */
    ASSERT_GE(ch, drop);
    ASSERT_LE(ch, drop + drop / 8);
    ASSERT_EQ(0, (int)tq_limit(&c, CU_LIMIT_STACK_SIZE, 1024));     /* the default */
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    CHECK(tq_meminfo(&c, &fr1, &tot));
    ASSERT_EQ_U64(fr0, fr1);
    /* More than the whole GPU could hold: refused before the driver. */
    ASSERT_EQ(OOM, tq_limit(&c, CU_LIMIT_STACK_SIZE, tot / TQ_STACK_THREADS + 1));
    ASSERT_EQ(OOM, tq_limit(&c, CU_LIMIT_STACK_SIZE, UINT64_MAX));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    tq_close(&c);
    vcu__acct_put(a);

    /* A quota of 1 GiB. */
    ASSERT_EQ(0, vcu__acct_new(1ull << 30, 8, &a));
    CHECK(tq_open(&c, a));
    /* 4 KiB: 1.1 GiB in all, though its part past the default (0.8 GiB)
     * would fit what is left. */
    ASSERT_EQ(OOM, tq_limit(&c, CU_LIMIT_STACK_SIZE, 4096));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    /* 3 KiB: 0.8 GiB in all, 0.5 GiB past the default: charged. */
    ASSERT_EQ(0, (int)tq_limit(&c, CU_LIMIT_STACK_SIZE, 3072));
    ASSERT_GE(vcu__acct_used(a, 0), TQ_CTX + 2048 * TQ_STACK_THREADS);
    ASSERT_EQ(OOM, tq_alloc(&c, 500 * MiB, &p));
    ASSERT_EQ(0, (int)tq_alloc(&c, 100 * MiB, &p));
    /* Another session's stack past what is left: refused, nothing charged. */
    {
        tq_t d;
        uint64_t used = vcu__acct_used(a, 0);

        CHECK(tq_open_more(&d, &c));
        ASSERT_EQ(OOM, tq_limit(&d, CU_LIMIT_STACK_SIZE, 3072));
        ASSERT_EQ_U64(used + TQ_CTX, vcu__acct_used(a, 0));       /* its context only */
        ASSERT_EQ(VCU_S_OK, ut_close(d.be, d.s));
    }
    /* The context's end gives it back; a new context has the default. */
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_RESET, &h, sizeof(h), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_alloc(&c, (1ull << 30) - TQ_CTX, &p));
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/* A module the stand-in finds lmem_walk in (tests/cuda/lmem.cu: 16 KiB
 * of local memory a thread) and dq_noop (none). */
static const char tq_lmem_img[] = "//\n.version 8.0\n.target sm_90\n"
                                  ".visible .entry _Z9lmem_walkPjj(.param .u64 o, .param .u32 s)\n"
                                  "{\n}\n"
                                  ".visible .entry _Z7dq_noopPi(.param .u64 p)\n{\n}\n";
#define TQ_LMEM "_Z9lmem_walkPjj"
#define TQ_NOOP "_Z7dq_noopPi"

/* CU_MODULE_GET_FUNCTION of name in mod: the CUresult; *fn the handle. */
static uint32_t tq_function(tq_t *c, uint64_t mod, const char *name, uint64_t *fn)
{
    unsigned char nq[sizeof(struct vcu_cu_name_req) + 64];
    struct vcu_cu_name_req rq;
    struct vcu_cu_function_resp rp;

    memset(&rq, 0, sizeof(rq));
    rq.module = mod;
    rq.name_len = (uint32_t)strlen(name);
    memcpy(nq, &rq, sizeof(rq));
    memcpy(nq + sizeof(rq), name, rq.name_len);
    if (tq_do(c, VCU_OP_CU_MODULE_GET_FUNCTION, nq, (uint32_t)(sizeof(rq) + rq.name_len), &rp,
              sizeof(rp)) != VCU_S_OK)
        return 0x10000;
    *fn = rp.function;
    return rp.r.result;
}

/* CU_LAUNCH of lmem_walk (pbytes 12) or dq_noop (8) on one thread
 * writing *out, then CU_CTX_SYNCHRONIZE: the first failure. */
static uint32_t tq_run(tq_t *c, uint64_t fn, uint64_t out, uint32_t pbytes)
{
    unsigned char p[sizeof(struct vcu_cu_launch_req) + 12];
    struct vcu_cu_launch_req lq;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp rp;
    uint32_t seed = 7;

    memset(&lq, 0, sizeof(lq));
    lq.function = fn;
    lq.grid[0] = lq.grid[1] = lq.grid[2] = 1;
    lq.block[0] = lq.block[1] = lq.block[2] = 1;
    lq.param_bytes = pbytes;
    memcpy(p, &lq, sizeof(lq));
    memcpy(p + sizeof(lq), &out, 8);
    memcpy(p + sizeof(lq) + 8, &seed, 4);
    if (tq_do(c, VCU_OP_CU_LAUNCH, p, (uint32_t)(sizeof(lq) + pbytes), &rp, sizeof(rp)) !=
        VCU_S_OK)
        return 0x10000;
    if (rp.result != 0)
        return rp.result;
    if (tq_do(c, VCU_OP_CU_CTX_SYNCHRONIZE, &h, sizeof(h), &rp, sizeof(rp)) != VCU_S_OK)
        return 0x10000;
    return rp.result ? rp.result : rp.deferred;
}

/*
 * A kernel needing more local memory a thread than the stack limit
 * (lmem_walk: 16 KiB) makes the driver grow the context's reservation at
 * its launch, to that much for every thread the device holds (the
 * stand-in models it).  Its lookup raises the stack limit to cover it,
 * charged as a guest's set: the account holds at least what the device
 * lost, from the lookup on, and the launches take nothing more; a lower
 * stack limit the guest sets keeps the cover (the driver would grow it
 * back uncharged), a higher one is charged above it and given back down
 * to it; the context's end gives all of it back.  A kernel with no local
 * memory changes nothing.
 */
TEST(quota_local_memory)
{
    const uint64_t want = (16384 - 1024) * TQ_STACK_THREADS;        /* 3.9 GiB */
    vcu_account_t *a;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp rp;
    uint64_t frs, fr0, fr1, tot, base, ch, m, fn, fn2, noop, out;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(0, 8, &a));
    CHECK(tq_open(&c, a));
    CHECK(tq_meminfo(&c, &frs, &tot));
    ASSERT_EQ(0, (int)tq_alloc(&c, 4096, &out));
    ASSERT_EQ(0, (int)tq_module(&c, tq_lmem_img, &m));
    CHECK(tq_meminfo(&c, &fr0, &tot));
    base = vcu__acct_used(a, 0);
    ASSERT_EQ(0, (int)tq_function(&c, m, TQ_NOOP, &noop));
    ASSERT_EQ(0, (int)tq_run(&c, noop, out, 8));
    ASSERT_EQ_U64(base, vcu__acct_used(a, 0));

    ASSERT_EQ(0, (int)tq_function(&c, m, TQ_LMEM, &fn));
    ch = vcu__acct_used(a, 0) - base;
    ASSERT_GE(ch, want);                        /* charged at the lookup */
    ASSERT_EQ(0, (int)tq_run(&c, fn, out, 12));
    CHECK(tq_meminfo(&c, &fr1, &tot));
    ASSERT_EQ_U64(want, fr0 - fr1);
    ASSERT_LE(ch, want + want / 8);
    ASSERT_EQ_U64(base + ch, vcu__acct_used(a, 0));

    /* The guest lowers the stack limit: the cover stays, the launch
     * grows nothing. */
    ASSERT_EQ(0, (int)tq_limit(&c, CU_LIMIT_STACK_SIZE, 1024));
    ASSERT_EQ(0, (int)tq_run(&c, fn, out, 12));
    CHECK(tq_meminfo(&c, &fr1, &tot));
    ASSERT_EQ_U64(want, fr0 - fr1);
    ASSERT_EQ_U64(base + ch, vcu__acct_used(a, 0));
    /* Raises it past: charged above the cover, and back down to it. */
    ASSERT_EQ(0, (int)tq_limit(&c, CU_LIMIT_STACK_SIZE, 32 << 10));
    CHECK(tq_meminfo(&c, &fr1, &tot));
    ASSERT_EQ_U64(((32 << 10) - 1024) * TQ_STACK_THREADS, fr0 - fr1);
    ASSERT_GE(vcu__acct_used(a, 0) - base, fr0 - fr1);
    ASSERT_EQ(0, (int)tq_limit(&c, CU_LIMIT_STACK_SIZE, 2048));
    ASSERT_EQ_U64(base + ch, vcu__acct_used(a, 0));
    CHECK(tq_meminfo(&c, &fr1, &tot));
    ASSERT_EQ_U64(want, fr0 - fr1);
    /* Looked up again: nothing more. */
    ASSERT_EQ(0, (int)tq_function(&c, m, TQ_LMEM, &fn2));
    ASSERT_EQ_U64(base + ch, vcu__acct_used(a, 0));

    /* The context's end gives it back, and a new context has none. */
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_RESET, &h, sizeof(h), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    CHECK(tq_meminfo(&c, &fr1, &tot));
    ASSERT_EQ_U64(frs, fr1);
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/*
 * Past the VM's quota, the lookup of a kernel whose local memory the
 * stack limit would have to grow for fails as out of memory, so no
 * launch of it can take the GPU memory: nothing is charged, and the
 * session goes on (kernels that fit are looked up and run, the whole
 * quota can still be allocated).  Where the quota holds it but not
 * beside what is allocated, it is refused until memory is freed.
 */
TEST(quota_local_memory_refused)
{
    vcu_account_t *a;
    uint64_t m, fn, noop, out;
    tq_t c;

    /* 1 GiB: 16 KiB a thread is 4.1 GiB. */
    ASSERT_EQ(0, vcu__acct_new(1ull << 30, 8, &a));
    CHECK(tq_open(&c, a));
    ASSERT_EQ(0, (int)tq_module(&c, tq_lmem_img, &m));
    ASSERT_EQ(OOM, tq_function(&c, m, TQ_LMEM, &fn));
    ASSERT_EQ_U64(TQ_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(OOM, tq_function(&c, m, TQ_LMEM, &fn));
    ASSERT_EQ(0, (int)tq_function(&c, m, TQ_NOOP, &noop));
    ASSERT_EQ(0, (int)tq_alloc(&c, (1ull << 30) - TQ_CTX, &out));
    ASSERT_EQ(0, (int)tq_run(&c, noop, out, 8));
    ASSERT_EQ_U64(1ull << 30, vcu__acct_used(a, 0));
    tq_close(&c);
    vcu__acct_put(a);

    /* 5 GiB holds it, but not once 2 GiB are allocated; freed, it fits. */
    ASSERT_EQ(0, vcu__acct_new(5ull << 30, 8, &a));
    CHECK(tq_open(&c, a));
    ASSERT_EQ(0, (int)tq_module(&c, tq_lmem_img, &m));
    ASSERT_EQ(0, (int)tq_alloc(&c, 2ull << 30, &out));
    ASSERT_EQ(OOM, tq_function(&c, m, TQ_LMEM, &fn));
    ASSERT_EQ_U64(TQ_CTX + (2ull << 30), vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_free(&c, out));
    ASSERT_EQ(0, (int)tq_function(&c, m, TQ_LMEM, &fn));
    ASSERT_GE(vcu__acct_used(a, 0), TQ_CTX + (16384 - 1024) * TQ_STACK_THREADS);
    ASSERT_EQ(OOM, tq_alloc(&c, 1ull << 30, &out));
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/*
 * Every session's context is charged to the VM when it is made (here the
 * backend's default, VCU_BACKEND_CTX_BYTES): the guest sees it in use,
 * free = quota - used; a session whose context the quota cannot hold
 * fails its first call as out of memory, until another's context ends.
 */
TEST(quota_ctx_charged)
{
    const uint64_t ctx = VCU_BACKEND_CTX_BYTES, q = 2 * ctx + 8 * MiB;
    struct vcu_cu_slice_info_resp *si = calloc(1, sizeof(*si));
    vcu_account_t *a;
    uint64_t fr, tot, p;
    uint32_t i;
    tq_t c, d, e;

    ASSERT_NOT_NULL(si);
    ASSERT_EQ(0, vcu__acct_new(q, 8, &a));
    CHECK(tq_open_ctx(&c, a, 0));
    CHECK(tq_meminfo(&c, &fr, &tot));
    ASSERT_EQ_U64(q, tot);
    ASSERT_EQ_U64(q - ctx, fr);
    CHECK(tq_open_more(&d, &c));
    ASSERT_EQ(OOM, tq_alloc(&d, 8 * MiB + 1, &p));
    ASSERT_EQ(0, (int)tq_alloc(&d, 8 * MiB, &p));
    CHECK(tq_meminfo(&c, &fr, &tot));
    ASSERT_EQ_U64(0, fr);
    ASSERT_EQ_U64(ctx, vcu__acct_ctx(a, 0) / 2);

    /* A third guest process: no room for its context. */
    CHECK(tq_open_more(&e, &c));
    ASSERT_EQ(OOM, tq_alloc(&e, 512, &p));
    {
        struct vcu_cu_hdr h = {0, 0};
        struct vcu_cu_mem_info_resp mi;

        ASSERT_EQ(VCU_S_OK, tq_do(&e, VCU_OP_CU_MEM_GET_INFO, &h, sizeof(h), &mi, sizeof(mi)));
        ASSERT_EQ(OOM, mi.r.result);
    }
    CHECK(tq_slice(&e, si));                /* needs no context */
    ASSERT_EQ_U64(q, si->mem_used);
    ASSERT_EQ_U64(2 * ctx, si->ctx_bytes);
    for (i = 0; i < si->num_sessions; i++) {
        if (si->sessions[i].session == e.s) {
            ASSERT_EQ_U64(0, si->sessions[i].mem_used);
        } else {
            ASSERT_EQ_U64(ctx, si->sessions[i].ctx_bytes);
        }
    }

    /* d's end makes room for e's context. */
    ASSERT_EQ(VCU_S_OK, ut_close(d.be, d.s));
    ASSERT_EQ_U64(ctx, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tq_alloc(&e, 8 * MiB, &p));
    ASSERT_EQ_U64(q, vcu__acct_used(a, 0));
    ASSERT_EQ(VCU_S_OK, ut_close(e.be, e.s));
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    ASSERT_EQ_U64(0, vcu__acct_ctx(a, 0));
    vcu__acct_put(a);
    free(si);
    return 0;
}

/* A module image of n bytes of PTX (a comment past a header): malloc'd. */
static char *tq_big_image(size_t n)
{
    static const char hdr[] = "//\n.version 8.0\n.target sm_90\n// ";
    char *img = malloc(n + 1);

    if (img == NULL)
        abort();
    memset(img, 'x', n);
    memcpy(img, hdr, sizeof(hdr) - 1);
    img[n - 1] = '\n';
    img[n] = '\0';
    return img;
}

/*
 * Host memory the VM's guests make the host hold (here a module image
 * being loaded, taken of the session's budget) is one sum per VM, against
 * the VM's host quota (the policy page's): past it a request fails as out
 * of memory though the session's own budget (256 MiB) would take it, and
 * what another session of the VM holds leaves it less.
 */
TEST(quota_host_memory)
{
    static struct vcu_policy pol;
    char *img6 = tq_big_image(6 * MiB), *img10 = tq_big_image(10 * MiB);
    vcu_account_t *a;
    uint64_t m;
    int other;
    tq_t c;

    ASSERT_EQ(0, vcu__acct_new(0, 8, &a));
    pol.magic = VCU_POLICY_MAGIC;
    atomic_store(&pol.host_quota, 8 * MiB);
    vcu__acct_set_policy(a, &pol);
    CHECK(tq_open(&c, a));
    ASSERT_EQ(0, (int)tq_module(&c, img6, &m));
    ASSERT_LE(vcu__acct_host_used(a), 2 * MiB);     /* the image's budget back, but a step */
    ASSERT_EQ(OOM, tq_module(&c, img10, &m));
    /* Another session of the VM (its staging buffers, say) holds 4 MiB. */
    other = vcu__acct_claim(a, 0x99);
    ASSERT_GE(other, 0);
    ASSERT_EQ(0, vcu__acct_host_charge(a, other, 4 * MiB));
    ASSERT_EQ(OOM, tq_module(&c, img6, &m));
    ASSERT_EQ(-1, vcu__acct_host_charge(a, other, 8 * MiB));
    vcu__acct_host_uncharge(a, other, 4 * MiB);
    ASSERT_EQ(0, (int)tq_module(&c, img6, &m));
    /* The quota lowered live (the daemon's set-vm): the next take sees it. */
    atomic_store(&pol.host_quota, 1 * MiB);
    ASSERT_EQ(OOM, tq_module(&c, img6, &m));
    atomic_store(&pol.host_quota, 0);                /* none */
    ASSERT_EQ(0, (int)tq_module(&c, img10, &m));
    tq_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_host_used(a));       /* the session's end gives it all back */
    vcu__acct_release(a, other);
    vcu__acct_put(a);
    free(img6);
    free(img10);
    return 0;
}

/* A session that met a GPU fault counts in CU_SLICE_INFO's faults once it
 * has ended; a healthy one does not. */
TEST(quota_faults)
{
    static const char img[] = "//\n.version 8.0\n.target sm_90\n"
                              ".visible .entry _Z13err_oob_writePi(.param .u64 p)\n{\n}\n";
    vcu_account_t *a;
    unsigned char p[sizeof(struct vcu_cu_launch_req) + 8];
    unsigned char nq[sizeof(struct vcu_cu_name_req) + 32];
    struct vcu_cu_name_req name;
    struct vcu_cu_launch_req lq;
    struct vcu_cu_function_resp fr;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp rp;
    struct vcu_cu_slice_info_resp *si = calloc(1, sizeof(*si));
    uint64_t m, ptr = 0, q;
    tq_t c, d;

    ASSERT_NOT_NULL(si);
    ASSERT_EQ(0, vcu__acct_new(0, 8, &a));
    CHECK(tq_open(&c, a));
    CHECK(tq_open_more(&d, &c));
    ASSERT_EQ(0, (int)tq_alloc(&d, 4096, &q));          /* a healthy session */
    ASSERT_EQ(0, (int)tq_module(&c, img, &m));
    memset(&name, 0, sizeof(name));
    name.module = m;
    name.name_len = (uint32_t)strlen("_Z13err_oob_writePi");
    memcpy(nq, &name, sizeof(name));
    memcpy(nq + sizeof(name), "_Z13err_oob_writePi", name.name_len);
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_MODULE_GET_FUNCTION, nq,
                              (uint32_t)(sizeof(name) + name.name_len), &fr, sizeof(fr)));
    ASSERT_EQ(0, (int)fr.r.result);
    memset(&lq, 0, sizeof(lq));
    lq.function = fr.function;
    lq.grid[0] = lq.grid[1] = lq.grid[2] = 1;
    lq.block[0] = lq.block[1] = lq.block[2] = 1;
    lq.param_bytes = 8;
    memcpy(p, &lq, sizeof(lq));
    memcpy(p + sizeof(lq), &ptr, 8);
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_LAUNCH, p, sizeof(p), &rp, sizeof(rp)));
    ASSERT_EQ(VCU_S_OK, tq_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, &h, sizeof(h), &rp, sizeof(rp)));
    ASSERT_EQ((uint32_t)CUDA_ERROR_ILLEGAL_ADDRESS, rp.result ? rp.result : rp.deferred);
    CHECK(tq_slice(&d, si));
    ASSERT_EQ_U64(0, si->faults);                        /* not ended yet */
    ASSERT_EQ_U64(4096 + 2 * TQ_CTX, si->mem_used);    /* and both contexts */
    ASSERT_EQ(VCU_S_OK, ut_close(c.be, c.s));
    CHECK(tq_slice(&d, si));
    ASSERT_EQ_U64(1, si->faults);
    ASSERT_EQ(1, (int)si->num_sessions);
    tq_close(&d);
    ASSERT_EQ_U64(1, atomic_load(&a->hdr->faults));     /* the healthy one added none */
    vcu__acct_put(a);
    free(si);
    return 0;
}

/* ---- the proxy: one account for the VM's workers ------------------------- */

#define TQ_RAM (4u << 20)

static uint32_t tq_px_exec(vcu_proxy_t *px, ut_req_t *t)
{
    return ut_px_exec(px, t);
}

static int tq_px_open(vcu_proxy_t *px, uint64_t *sid)
{
    ASSERT_EQ(0, ut_px_open(px, sid));
    return 0;
}

static uint32_t tq_px_alloc(vcu_proxy_t *px, uint64_t sid, uint64_t size)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_mem_alloc_req rq;
    uint32_t st, res;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    ut_req_build(t, VCU_OP_CU_MEM_ALLOC, sid, &rq, sizeof(rq));
    st = tq_px_exec(px, t);
    res = st == VCU_S_OK ? ((const struct vcu_cu_u64_resp *)ut_resp_payload(t))->r.result
                         : 0x10000 + st;
    free(t);
    return res;
}

/* Two guest processes, each with its worker process: together they hit
 * the quota; the first one's worker is killed (a crash, the OOM killer)
 * and its charge comes back once the proxy has reaped it. */
TEST(quota_proxy_worker_killed)
{
    vcu_proxy_config_t cfg;
    vcu_proxy_t *px;
    char err[256];
    uint64_t sa, sb;
    pid_t pa;
    double t0;
    uint32_t r;

    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon_cuda();
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.gpus = "0";
    cfg.mem_quota = 8 * MiB + 2 * UT_CTX_BYTES_N;    /* and the workers' contexts */
    if (vcu_proxy_new(&cfg, &px, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcu_proxy_new: %s\n", err);
        return -1;
    }
    if (vcu_proxy_cuda_error(px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(px));
    CHECK(tq_px_open(px, &sa));
    pa = ut_px_worker_pid(px);
    ASSERT_GT(pa, 0);
    CHECK(tq_px_open(px, &sb));
    ASSERT_EQ(0, (int)tq_px_alloc(px, sa, 6 * MiB));
    ASSERT_EQ(0, (int)tq_px_alloc(px, sb, 2 * MiB));
    ASSERT_EQ(OOM, tq_px_alloc(px, sb, 1));
    ASSERT_EQ(OOM, tq_px_alloc(px, sa, 512));
    ASSERT_EQ(0, kill(pa, SIGKILL));
    t0 = ut_now();
    do {
        r = tq_px_alloc(px, sb, 6 * MiB + UT_CTX_BYTES_N);
    } while (r == OOM && ut_now() - t0 < 10.0);
    ASSERT_EQ(0, (int)r);
    ASSERT_EQ(OOM, tq_px_alloc(px, sb, 1));
    vcu_proxy_free(px);
    return 0;
}

/* What the host's monitoring reads (vcu_proxy_stats): nothing before any
 * session; two sessions' charges, each under its own id and worker pid;
 * a killed worker's share gone once it is reaped. */
TEST(quota_proxy_stats)
{
    vcu_proxy_session_stats_t ss[4];
    vcu_proxy_config_t cfg;
    vcu_proxy_stats_t st;
    vcu_proxy_t *px;
    char err[256];
    uint64_t sa, sb;
    pid_t pa, pb;
    double t0;

    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon_cuda();
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.gpus = "0";
    cfg.mem_quota = 8 * MiB + 2 * UT_CTX_BYTES_N;
    if (vcu_proxy_new(&cfg, &px, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcu_proxy_new: %s\n", err);
        return -1;
    }
    if (vcu_proxy_cuda_error(px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(px));
    ASSERT_EQ(VCU_EINVAL, vcu_proxy_stats(px, &st, NULL, 1));
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 4));
    ASSERT_EQ_U64(8 * MiB + 2 * UT_CTX_BYTES_N, st.mem_quota);
    ASSERT_EQ_U64(0, st.mem_used[0]);
    ASSERT_EQ(0, (int)(st.sessions + st.workers + st.nsess));
    CHECK(tq_px_open(px, &sa));
    pa = ut_px_worker_pid(px);
    CHECK(tq_px_open(px, &sb));
    pb = ut_px_worker_pid(px);
    ASSERT_GT(pa, 0);
    ASSERT_GT(pb, 0);
    ASSERT_NE(pa, pb);
    ASSERT_EQ(0, (int)tq_px_alloc(px, sa, 6 * MiB));
    ASSERT_EQ(0, (int)tq_px_alloc(px, sb, 2 * MiB));
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 4));
    ASSERT_EQ_U64(8 * MiB + 2 * UT_CTX_BYTES_N, st.mem_used[0]);
    ASSERT_EQ_U64(0, st.mem_used[1]);
    ASSERT_EQ(2, (int)st.sessions);
    ASSERT_EQ(2, (int)st.workers);
    ASSERT_EQ(2, (int)st.nsess);
    ASSERT_EQ_U64(sa, ss[0].session);
    ASSERT_EQ((int)pa, (int)ss[0].pid);
    ASSERT_EQ_U64(6 * MiB + UT_CTX_BYTES_N, ss[0].mem[0]);
    ASSERT_EQ_U64(UT_CTX_BYTES_N, ss[0].ctx[0]);
    ASSERT_EQ_U64(sb, ss[1].session);
    ASSERT_EQ((int)pb, (int)ss[1].pid);
    ASSERT_EQ_U64(2 * MiB + UT_CTX_BYTES_N, ss[1].mem[0]);
    ASSERT_EQ_U64(ss[0].ctx[0] + ss[1].ctx[0], st.ctx_bytes[0]);
    /* Host memory: the daemon's default quota; what the sessions took. */
    ASSERT_EQ_U64(4ull << 30, st.host_quota);
    ASSERT_EQ_U64(ss[0].host + ss[1].host, st.host_used);
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 1));         /* room for one */
    ASSERT_EQ(2, (int)st.workers);
    ASSERT_EQ(1, (int)st.nsess);
    ASSERT_EQ(0, kill(pa, SIGKILL));
    t0 = ut_now();
    do {
        ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 4));
    } while ((st.workers != 1 || st.mem_used[0] != 2 * MiB + UT_CTX_BYTES_N) &&
             ut_now() - t0 < 10.0);
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 4));         /* the sums were read first */
    ASSERT_EQ(1, (int)st.workers);
    ASSERT_EQ_U64(sb, ss[0].session);
    ASSERT_EQ_U64(2 * MiB + UT_CTX_BYTES_N, st.mem_used[0]);
    ASSERT_EQ_U64(ss[0].host, st.host_used);
    ASSERT_EQ_U64(0, st.faults);
    vcu_proxy_free(px);
    return 0;
}

/* A proxy of a VM with the given quota, its workers started by a daemon
 * with these extra options (NULL: the tests' usual daemon). */
static int tq_px_new(const char *const *extra, uint64_t quota, vcu_proxy_t **px)
{
    const char *l = getenv("VCU_LIBCUDA");
    vcu_proxy_config_t cfg;
    char err[256];

    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon_with(l != NULL ? l : "libcuda.so.1", extra);
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.gpus = "0";
    cfg.mem_quota = quota;
    if (vcu_proxy_new(&cfg, px, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcu_proxy_new: %s\n", err);
        return -1;
    }
    if (vcu_proxy_cuda_error(*px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(*px));
    return 0;
}

/*
 * The daemon's --ctx-bytes reaches its workers: each worker's context is
 * charged that much to its VM at the session's first CUDA call, reported
 * as the contexts' part; a guest process whose context the quota cannot
 * hold gets CUDA_ERROR_OUT_OF_MEMORY, until another's worker is gone.
 */
TEST(quota_proxy_ctx_bytes)
{
    static const char *const extra[] = { "--ctx-bytes", "3M", NULL };
    vcu_proxy_session_stats_t ss[4];
    vcu_proxy_stats_t st;
    vcu_proxy_t *px;
    uint64_t sa, sb, sc;
    pid_t pa;
    double t0;
    uint32_t r;

    CHECK(tq_px_new(extra, 8 * MiB, &px));
    CHECK(tq_px_open(px, &sa));
    pa = ut_px_worker_pid(px);
    ASSERT_GT(pa, 0);
    CHECK(tq_px_open(px, &sb));
    CHECK(tq_px_open(px, &sc));
    ASSERT_EQ(0, (int)tq_px_alloc(px, sa, 1 * MiB));
    ASSERT_EQ(0, (int)tq_px_alloc(px, sb, 1 * MiB));
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 4));
    ASSERT_EQ_U64(8 * MiB, st.mem_used[0]);
    ASSERT_EQ_U64(6 * MiB, st.ctx_bytes[0]);
    ASSERT_EQ_U64(sa, ss[0].session);
    ASSERT_EQ_U64(4 * MiB, ss[0].mem[0]);
    ASSERT_EQ_U64(3 * MiB, ss[0].ctx[0]);
    ASSERT_EQ(OOM, tq_px_alloc(px, sc, 512));          /* no room for its context */
    ASSERT_EQ(0, kill(pa, SIGKILL));
    t0 = ut_now();
    do {
        r = tq_px_alloc(px, sc, 1 * MiB);
    } while (r == OOM && ut_now() - t0 < 10.0);
    ASSERT_EQ(0, (int)r);
    ASSERT_EQ(OOM, tq_px_alloc(px, sc, 1));
    vcu_proxy_free(px);
    return 0;
}

#define TQ_PAGE 4096u
#define TQ_GUEST_RAM (16u << 20)

/* CU_HOST_DEVICE_POINTER_AT (want != 0) or CU_HOST_DEVICE_POINTER of a
 * pinned buffer of two ranges of the guest RAM in fd (mapped at ram): n
 * pages at page p0, n at page p1, from byte skip of the first.  The
 * CUresult, or 0x10000 + the status; *dptr the reply's pointer. */
static uint32_t tq_px_devptr_at(vcu_proxy_t *px, uint64_t sid, int fd, unsigned char *ram,
                                uint64_t p0, uint64_t p1, uint64_t n, uint64_t skip,
                                uint64_t want, uint64_t *dptr)
{
    vcu_gref_t refs[2] = { { fd, 0, p0 * TQ_PAGE + skip }, { fd, 0, p1 * TQ_PAGE } };
    struct iovec v[2] = { { ram + p0 * TQ_PAGE + skip, n * TQ_PAGE - skip },
                          { ram + p1 * TQ_PAGE, n * TQ_PAGE } };
    struct vcu_cu_u64_req rq;
    ut_req_t *t = ut_req_new();
    uint32_t st, res;

    memset(&rq, 0, sizeof(rq));
    rq.value = want;
    ut_req_add_seg_iov(t, VCU_SEG_TO_DEVICE | VCU_SEG_F_STABLE, v, 2);
    ut_req_build(t, want != 0 ? VCU_OP_CU_HOST_DEVICE_POINTER_AT : VCU_OP_CU_HOST_DEVICE_POINTER,
                 sid, &rq, sizeof(rq));
    t->segs[0].ref = refs;
    ut_wseg(t, 0)->nranges = 2;
    st = tq_px_exec(px, t);
    res = st == VCU_S_OK ? ((const struct vcu_cu_u64_resp *)ut_resp_payload(t))->r.result
                         : 0x10000 + st;
    *dptr = st == VCU_S_OK ? ((const struct vcu_cu_u64_resp *)ut_resp_payload(t))->value : 0;
    free(t);
    return res;
}

static uint32_t tq_px_devptr(vcu_proxy_t *px, uint64_t sid, int fd, unsigned char *ram,
                             uint64_t p0, uint64_t p1, uint64_t n)
{
    uint64_t d;

    return tq_px_devptr_at(px, sid, fd, ram, p0, p1, n, 0, 0, &d);
}

/* Asks for n distinct two-page aliases (pages k and k + 2048); how many
 * the worker made (the others refused as ranges that do not join). */
static int tq_px_aliases(vcu_proxy_t *px, uint64_t sid, int fd, unsigned char *ram,
                         unsigned int n, unsigned int *made)
{
    unsigned int k;
    uint32_t r;

    *made = 0;
    for (k = 0; k < n; k++) {
        r = tq_px_devptr(px, sid, fd, ram, k, k + 2048, 1);
        if (r == 0)
            (*made)++;
        else
            ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, r);
    }
    return 0;
}

/*
 * A pinned buffer of several ranges gets one device pointer through an
 * alias of its pages in the worker.  A session's aliases are bounded in
 * number and in bytes (the guest RAM the worker maps), past which the
 * guest is refused as for ranges that do not join; each is charged to
 * the VM's host quota while it lives, which bounds them too.
 */
TEST(quota_proxy_aliases)
{
    static const char *const small[] = { "--host-mem-quota", "4M", NULL };
    vcu_proxy_stats_t st;
    vcu_proxy_t *px;
    unsigned char *ram;
    unsigned int made;
    uint64_t sa, sb;
    int fd;

    fd = memfd_create("ut-guest-ram", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, TQ_GUEST_RAM));
    ram = mmap(NULL, TQ_GUEST_RAM, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_TRUE(ram != MAP_FAILED);

    CHECK(tq_px_new(NULL, 0, &px));
    CHECK(tq_px_open(px, &sa));
    CHECK(tq_px_aliases(px, sa, fd, ram, 1100, &made));
    ASSERT_EQ(1024, (int)made);
    ASSERT_EQ(0, (int)tq_px_devptr(px, sa, fd, ram, 0, 2048, 1));     /* one it has */
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, NULL, 0));
    ASSERT_GE(st.host_used, 1024ull * (2 * TQ_PAGE / 256 + 2 * TQ_PAGE));
    /* Bytes: two aliases of 8 MiB take all of the guest's 16 MiB. */
    CHECK(tq_px_open(px, &sb));
    ASSERT_EQ(0, (int)tq_px_devptr(px, sb, fd, ram, 0, 2048, 1024));
    ASSERT_EQ(0, (int)tq_px_devptr(px, sb, fd, ram, 0, 3072, 1024));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_VALUE, tq_px_devptr(px, sb, fd, ram, 1024, 2048, 1024));
    vcu_proxy_free(px);

    /* A VM of 4 MiB of host memory: its aliases stop at that. */
    CHECK(tq_px_new(small, 0, &px));
    CHECK(tq_px_open(px, &sa));
    CHECK(tq_px_aliases(px, sa, fd, ram, 1100, &made));
    ASSERT_GT(made, 100);
    ASSERT_LT(made, 4u << 20 >> 13);
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, NULL, 0));
    ASSERT_EQ_U64(4ull << 20, st.host_quota);
    ASSERT_LE(st.host_used, 4ull << 20);
    vcu_proxy_free(px);
    munmap(ram, TQ_GUEST_RAM);
    close(fd);
    return 0;
}

/*
 * CU_HOST_DEVICE_POINTER_AT: the guest's pinned buffer at the guest's own
 * address, as unified addressing has it, where that is free in the worker;
 * anywhere else the guest names (taken, inside the worker's guest-RAM
 * window, at another offset within its page, past the end of user space)
 * the buffer still gets a pointer, somewhere else, and nothing of the
 * worker's is replaced (the session goes on working).
 */
/* CU_MEMCPY_DTOH of 8 bytes from device address src into guest page pg
 * of fd: the CUresult, or 0x10000 + the status. */
static uint32_t tq_px_dtoh8(vcu_proxy_t *px, uint64_t sid, int fd, unsigned char *ram,
                            uint64_t src, uint64_t pg)
{
    vcu_gref_t ref = { fd, 0, pg * TQ_PAGE };
    struct iovec v = { ram + pg * TQ_PAGE, 8 };
    struct vcu_cu_memcpy_req rq;
    ut_req_t *t = ut_req_new();
    uint32_t st, res;

    memset(&rq, 0, sizeof(rq));
    rq.src = src;
    rq.size = 8;
    ut_req_add_seg_iov(t, VCU_SEG_FROM_DEVICE, &v, 1);
    ut_req_build(t, VCU_OP_CU_MEMCPY_DTOH, sid, &rq, sizeof(rq));
    t->segs[0].ref = &ref;
    ut_wseg(t, 0)->nranges = 1;
    st = tq_px_exec(px, t);
    res = st == VCU_S_OK ? ((const struct vcu_cu_resp *)ut_resp_payload(t))->result
                         : 0x10000 + st;
    free(t);
    return res;
}

static int tq_px_meminfo(vcu_proxy_t *px, uint64_t sid, uint64_t *fr);

TEST(quota_proxy_alias_at)
{
    const uint64_t at = 0x4a0000000000ull, at2 = 0x4a0000200000ull;
    vcu_proxy_t *px;
    unsigned char *ram;
    uint64_t sa, d, d2, fr;
    int fd;

    fd = memfd_create("ut-guest-ram", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, TQ_GUEST_RAM));
    ram = mmap(NULL, TQ_GUEST_RAM, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_TRUE(ram != MAP_FAILED);
    CHECK(tq_px_new(NULL, 0, &px));
    CHECK(tq_px_open(px, &sa));

    ASSERT_EQ(0, (int)tq_px_devptr_at(px, sa, fd, ram, 0, 2048, 2, 0x100, at + 0x100, &d));
    ASSERT_EQ_U64(at + 0x100, d);
    /* The same buffer again: the same alias. */
    ASSERT_EQ(0, (int)tq_px_devptr_at(px, sa, fd, ram, 0, 2048, 2, 0x100, at + 0x100, &d));
    ASSERT_EQ_U64(at + 0x100, d);
    /* Another buffer where the first is: elsewhere. */
    ASSERT_EQ(0, (int)tq_px_devptr_at(px, sa, fd, ram, 4, 2052, 1, 0, at, &d2));
    ASSERT_TRUE(d2 != 0 && (d2 < at || d2 >= at + 4 * TQ_PAGE));
    /* Another offset within the page than the buffer's own. */
    ASSERT_EQ(0, (int)tq_px_devptr_at(px, sa, fd, ram, 8, 2056, 1, 0, at2 + 0x10, &d));
    ASSERT_TRUE(d != 0 && d != at2 + 0x10 && (d & (TQ_PAGE - 1)) == 0);
    /* Inside the worker's guest-RAM window (16-64 TiB). */
    ASSERT_EQ(0, (int)tq_px_devptr_at(px, sa, fd, ram, 12, 2060, 1, 0, 0x200000000000ull, &d));
    ASSERT_TRUE(d != 0 && d != 0x200000000000ull);
    /* Running past the end of user space, and in the first page. */
    ASSERT_EQ(0, (int)tq_px_devptr_at(px, sa, fd, ram, 16, 2064, 1, 0, 0x7fffffffe000ull, &d));
    ASSERT_TRUE(d != 0 && d != 0x7fffffffe000ull);
    ASSERT_EQ(0, (int)tq_px_devptr_at(px, sa, fd, ram, 20, 2068, 1, 0, TQ_PAGE, &d));
    ASSERT_TRUE(d != 0 && d != TQ_PAGE);
    /* The session still works. */
    CHECK(tq_px_meminfo(px, sa, &fr));

    /* Another guest process of the VM asks for the same address for its
     * own buffer: it gets it, in its own worker, and through it reads its
     * own memory; this session's reads its own. */
    {
        const uint64_t ma = 0xaaaaaaaa11111111ull, mb = 0xbbbbbbbb22222222ull;
        uint64_t sb, db, got;

        memcpy(ram + 0x100, &ma, 8);
        memcpy(ram + 24 * TQ_PAGE + 0x100, &mb, 8);
        CHECK(tq_px_open(px, &sb));
        ASSERT_EQ(0, (int)tq_px_devptr_at(px, sb, fd, ram, 24, 2072, 2, 0x100, at + 0x100, &db));
        ASSERT_EQ_U64(at + 0x100, db);
        ASSERT_EQ(0, (int)tq_px_dtoh8(px, sa, fd, ram, at + 0x100, 40));
        ASSERT_EQ(0, (int)tq_px_dtoh8(px, sb, fd, ram, at + 0x100, 41));
        memcpy(&got, ram + 40 * TQ_PAGE, 8);
        ASSERT_EQ_U64(ma, got);
        memcpy(&got, ram + 41 * TQ_PAGE, 8);
        ASSERT_EQ_U64(mb, got);
    }
    vcu_proxy_free(px);
    munmap(ram, TQ_GUEST_RAM);
    close(fd);
    return 0;
}

/* A request of op with payload p through the proxy; its reply payload
 * into resp (rlen bytes).  The status. */
static uint32_t tq_px_call(vcu_proxy_t *px, uint64_t sid, uint32_t op, const void *p,
                           uint32_t plen, void *resp, size_t rlen)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_req_build(t, op, sid, p, plen);
    st = tq_px_exec(px, t);
    memset(resp, 0, rlen);
    if (st == VCU_S_OK)
        memcpy(resp, ut_resp_payload(t), rlen);
    free(t);
    return st;
}

static int tq_px_meminfo(vcu_proxy_t *px, uint64_t sid, uint64_t *fr)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_mem_info_resp rp;

    ASSERT_EQ(VCU_S_OK, tq_px_call(px, sid, VCU_OP_CU_MEM_GET_INFO, &h, sizeof(h), &rp,
                                   sizeof(rp)));
    ASSERT_EQ(0, (int)rp.r.result);
    *fr = rp.free;
    return 0;
}

/*
 * A worker's context outlives a context reset while its registrations of
 * guest memory hold it (they are made in the device's primary context,
 * the session's too): what the reset gives back of the account is gone
 * from the GPU as well, the allocations and the stack limit's
 * reservation alike, or a guest could reset its way past its quota.
 */
TEST(quota_proxy_reset_frees)
{
    vcu_proxy_session_stats_t ss[2];
    struct vcu_cu_limit_req lq;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp rp;
    vcu_proxy_stats_t st;
    vcu_proxy_t *px;
    unsigned char *ram;
    uint64_t sid, fr0, fr1, fr2;
    int fd;

    fd = memfd_create("ut-guest-ram", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, TQ_GUEST_RAM));
    ram = mmap(NULL, TQ_GUEST_RAM, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_TRUE(ram != MAP_FAILED);
    CHECK(tq_px_new(NULL, 0, &px));
    CHECK(tq_px_open(px, &sid));
    /* A pinned buffer of the guest: registered, in the primary context. */
    ASSERT_EQ(0, (int)tq_px_devptr(px, sid, fd, ram, 0, 1, 1));
    CHECK(tq_px_meminfo(px, sid, &fr0));
    ASSERT_EQ(0, (int)tq_px_alloc(px, sid, 256 * MiB));
    memset(&lq, 0, sizeof(lq));
    lq.limit = CU_LIMIT_STACK_SIZE;
    lq.value = 16 << 10;
    ASSERT_EQ(VCU_S_OK, tq_px_call(px, sid, VCU_OP_CU_CTX_SET_LIMIT, &lq, sizeof(lq), &rp,
                                   sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    CHECK(tq_px_meminfo(px, sid, &fr1));
    ASSERT_EQ_U64(256 * MiB + ((16 << 10) - 1024) * TQ_STACK_THREADS, fr0 - fr1);
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 2));
    ASSERT_GE(st.mem_used[0], UT_CTX_BYTES_N + (fr0 - fr1));
    ASSERT_EQ(VCU_S_OK, tq_px_call(px, sid, VCU_OP_CU_CTX_RESET, &h, sizeof(h), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    CHECK(tq_px_meminfo(px, sid, &fr2));
    ASSERT_EQ_U64(fr0, fr2);
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 2));
    ASSERT_EQ_U64(UT_CTX_BYTES_N, st.mem_used[0]);    /* the context, which lived on */
    vcu_proxy_free(px);
    munmap(ram, TQ_GUEST_RAM);
    close(fd);
    return 0;
}

/* CU_MODULE_LOAD through the proxy of img, which it first places in the
 * guest's RAM at page 64: the CUresult; *mod the handle. */
static uint32_t tq_px_module(vcu_proxy_t *px, uint64_t sid, int fd, unsigned char *ram,
                             const char *img, uint64_t *mod)
{
    size_t len = strlen(img);
    vcu_gref_t ref = { fd, 0, 64 * TQ_PAGE };
    struct vcu_cu_module_load_req rq;
    ut_req_t *t = ut_req_new();
    uint32_t st, res;

    memcpy(ram + 64 * TQ_PAGE, img, len);
    memset(&rq, 0, sizeof(rq));
    rq.image_len = len;
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, ram + 64 * TQ_PAGE, len);
    ut_req_build(t, VCU_OP_CU_MODULE_LOAD, sid, &rq, sizeof(rq));
    t->segs[0].ref = &ref;
    st = tq_px_exec(px, t);
    res = 0x10000 + st;
    if (st == VCU_S_OK) {
        const struct vcu_cu_u64_resp *rp = ut_resp_payload(t);

        *mod = rp->value;
        res = rp->r.result;
    }
    free(t);
    return res;
}

/*
 * In a worker: looking up a kernel whose local memory passes the stack
 * limit raises the limit of the worker's context, charged to the VM (the
 * device loses what the account holds); a reset sets it back in the
 * context, which lives on (a pinned buffer of the guest holds it), and
 * the device has all of it back.
 */
TEST(quota_proxy_local_memory)
{
    const uint64_t want = (16384 - 1024) * TQ_STACK_THREADS;
    unsigned char nq[sizeof(struct vcu_cu_name_req) + 32];
    vcu_proxy_session_stats_t ss[2];
    struct vcu_cu_name_req name;
    struct vcu_cu_function_resp fr;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp rp;
    vcu_proxy_stats_t st;
    vcu_proxy_t *px;
    unsigned char *ram;
    uint64_t sid, m = 0, fr0, fr1;
    int fd;

    fd = memfd_create("ut-guest-ram", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, TQ_GUEST_RAM));
    ram = mmap(NULL, TQ_GUEST_RAM, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_TRUE(ram != MAP_FAILED);
    CHECK(tq_px_new(NULL, 0, &px));
    CHECK(tq_px_open(px, &sid));
    ASSERT_EQ(0, (int)tq_px_devptr(px, sid, fd, ram, 0, 1, 1));
    ASSERT_EQ(0, (int)tq_px_module(px, sid, fd, ram, tq_lmem_img, &m));
    CHECK(tq_px_meminfo(px, sid, &fr0));
    memset(&name, 0, sizeof(name));
    name.module = m;
    name.name_len = (uint32_t)strlen(TQ_LMEM);
    memcpy(nq, &name, sizeof(name));
    memcpy(nq + sizeof(name), TQ_LMEM, name.name_len);
    ASSERT_EQ(VCU_S_OK, tq_px_call(px, sid, VCU_OP_CU_MODULE_GET_FUNCTION, nq,
                                   (uint32_t)(sizeof(name) + name.name_len), &fr, sizeof(fr)));
    ASSERT_EQ(0, (int)fr.r.result);
    CHECK(tq_px_meminfo(px, sid, &fr1));
    ASSERT_EQ_U64(want, fr0 - fr1);
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 2));
    ASSERT_GE(st.mem_used[0], UT_CTX_BYTES_N + want);
    ASSERT_EQ(VCU_S_OK, tq_px_call(px, sid, VCU_OP_CU_CTX_RESET, &h, sizeof(h), &rp, sizeof(rp)));
    ASSERT_EQ(0, (int)rp.result);
    CHECK(tq_px_meminfo(px, sid, &fr1));
    ASSERT_EQ_U64(fr0, fr1);
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, ss, 2));
    ASSERT_EQ_U64(UT_CTX_BYTES_N, st.mem_used[0]);
    vcu_proxy_free(px);
    munmap(ram, TQ_GUEST_RAM);
    close(fd);
    return 0;
}
