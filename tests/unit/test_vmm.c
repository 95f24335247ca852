/*
 * Virtual memory management in the CUDA executor (host-backend/worker/
 * cuda_vmm.c), against the CPU stand-in: cuMemCreate charged to the VM's
 * quota until the last reference and the last mapping are gone, the
 * session's end taking everything down; one session's ranges and handles
 * out of another's reach; hostile requests; virtual device ordinals.
 */
#include <stdio.h>

#include <cuda.h>

#include "ut.h"
#include "vcu_account.h"

#define MiB (1ull << 20)
#define GRAN (2 * MiB)              /* the stand-in's granularity */
#define TV_CTX (1 * MiB)            /* what each context is charged here */
#define INVAL ((uint32_t)CUDA_ERROR_INVALID_VALUE)
#define OOM ((uint32_t)CUDA_ERROR_OUT_OF_MEMORY)

typedef struct tv_s {
    vcu_backend_t *be;
    uint64_t s;
} tv_t;

static int tv_open(tv_t *c, const char *gpus, vcu_account_t *a)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = gpus;
    cfg.account = a;
    cfg.account_slot = -1;
    cfg.ctx_bytes = TV_CTX;
    c->be = NULL;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c->be));
    if (vcu_backend_cuda_error(c->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c->be));
    ASSERT_EQ(VCU_S_OK, ut_open(c->be, &c->s));
    return 0;
}

static void tv_close(tv_t *c)
{
    ut_close(c->be, c->s);
    vcu_backend_free(c->be);
}

/* One request of opcode op; the CUresult, or 0x10000 + the wire status. */
static uint32_t tv_do(tv_t *c, uint32_t op, const struct vcu_cu_vmm_req *rq, uint32_t len,
                      struct vcu_cu_vmm_resp *rp)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_vmm_resp r;
    uint32_t st;

    ut_req_build(t, op, c->s, rq, len);
    vcu_backend_execute(c->be, &t->r);
    st = ut_status(t);
    memset(&r, 0, sizeof(r));
    memcpy(&r, ut_resp_payload(t),
           ut_resp(t)->payload_len < sizeof(r) ? ut_resp(t)->payload_len : sizeof(r));
    free(t);
    if (rp != NULL)
        *rp = r;
    return st != VCU_S_OK ? 0x10000 + st : r.r.result;
}

static uint32_t tv(tv_t *c, uint32_t op, const struct vcu_cu_vmm_req *rq, uint64_t *value)
{
    struct vcu_cu_vmm_resp rp;
    uint32_t r = tv_do(c, op, rq, sizeof(*rq), &rp);

    if (value != NULL)
        *value = rp.value;
    return r;
}

static struct vcu_cu_vmm_req tv_req(uint32_t dev)
{
    struct vcu_cu_vmm_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.hdr.device = dev;
    rq.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    rq.prop.loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    rq.prop.loc_id = dev;
    return rq;
}

static uint32_t tv_create(tv_t *c, uint64_t size, uint64_t *h)
{
    struct vcu_cu_vmm_req rq = tv_req(0);

    rq.size = size;
    return tv(c, VCU_OP_CU_MEM_CREATE, &rq, h);
}

static uint32_t tv_h(tv_t *c, uint32_t op, uint64_t h)
{
    struct vcu_cu_vmm_req rq = tv_req(0);

    rq.handle = h;
    return tv(c, op, &rq, NULL);
}

static uint32_t tv_reserve(tv_t *c, uint64_t size, uint64_t *va)
{
    struct vcu_cu_vmm_req rq = tv_req(0);

    rq.size = size;
    return tv(c, VCU_OP_CU_MEM_ADDRESS_RESERVE, &rq, va);
}

/* ptr, size and handle: MAP, UNMAP, ADDRESS_FREE, RETAIN. */
static uint32_t tv_range(tv_t *c, uint32_t op, uint64_t ptr, uint64_t size, uint64_t h,
                         uint64_t *value)
{
    struct vcu_cu_vmm_req rq = tv_req(0);

    rq.ptr = ptr;
    rq.size = size;
    rq.handle = h;
    return tv(c, op, &rq, value);
}

static uint32_t tv_access(tv_t *c, uint64_t ptr, uint64_t size, uint32_t dev)
{
    struct vcu_cu_vmm_req rq = tv_req(0);

    rq.ptr = ptr;
    rq.size = size;
    rq.count = 1;
    rq.access[0].loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    rq.access[0].loc_id = dev;
    rq.access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return tv(c, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL);
}

static uint64_t tv_free(tv_t *c)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_mem_info_resp rp;
    ut_req_t *t = ut_req_new();

    ut_req_build(t, VCU_OP_CU_MEM_GET_INFO, c->s, &h, sizeof(h));
    vcu_backend_execute(c->be, &t->r);
    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    return rp.free;
}

/* Charged at the create, past the quota refused; a handle released while
 * mapped stays charged until the unmap; retains count; the session's end
 * gives back what it left mapped, reserved or unreleased. */
TEST(vmm_quota)
{
    vcu_account_t *a;
    uint64_t h1, h2, h3, hr, va, x;
    tv_t c;

    ASSERT_EQ(0, vcu__acct_new(16 * MiB + TV_CTX, 8, &a));
    CHECK(tv_open(&c, "0", a));
    ASSERT_EQ(0, (int)tv_create(&c, 8 * MiB, &h1));
    ASSERT_EQ_U64(8 * MiB + TV_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(OOM, tv_create(&c, 10 * MiB, &x));
    ASSERT_EQ(OOM, tv_create(&c, UINT64_MAX, &x));
    ASSERT_EQ(OOM, tv_create(&c, 1ull << 62, &x));
    ASSERT_EQ(INVAL, tv_create(&c, 0, &x));
    ASSERT_EQ(INVAL, tv_create(&c, GRAN + 1, &x));       /* the driver's refusal */
    ASSERT_EQ_U64(8 * MiB + TV_CTX, vcu__acct_used(a, 0));

    /* Mapped, then released: still charged, still there. */
    ASSERT_EQ(0, (int)tv_reserve(&c, 16 * MiB, &va));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_MAP, va, 8 * MiB, h1, NULL));
    ASSERT_EQ(0, (int)tv_access(&c, va, 8 * MiB, 0));
    ASSERT_EQ(0, (int)tv_h(&c, VCU_OP_CU_MEM_RELEASE, h1));
    ASSERT_EQ(INVAL, tv_h(&c, VCU_OP_CU_MEM_RELEASE, h1));
    ASSERT_EQ(INVAL, tv_h(&c, VCU_OP_CU_MEM_GET_PROPS, h1));
    ASSERT_EQ_U64(8 * MiB + TV_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(OOM, tv_create(&c, 10 * MiB, &x));
    ASSERT_EQ_U64(8 * MiB, tv_free(&c));
    /* Retained from its address (the same handle), twice, released twice. */
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_RETAIN, va + 4096, 0, 0, &hr));
    ASSERT_EQ_U64(h1, hr);
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_RETAIN, va, 0, 0, &hr));
    ASSERT_EQ(0, (int)tv_h(&c, VCU_OP_CU_MEM_RELEASE, h1));
    ASSERT_EQ(0, (int)tv_h(&c, VCU_OP_CU_MEM_GET_PROPS, h1));
    ASSERT_EQ(0, (int)tv_h(&c, VCU_OP_CU_MEM_RELEASE, h1));
    ASSERT_EQ(INVAL, tv_h(&c, VCU_OP_CU_MEM_RELEASE, h1));
    ASSERT_EQ_U64(8 * MiB + TV_CTX, vcu__acct_used(a, 0));
    /* Unmapped: the memory and its charge go. */
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_UNMAP, va, 8 * MiB, 0, NULL));
    ASSERT_EQ_U64(TV_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_UNMAP, va, 8 * MiB, 0, NULL));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_RETAIN, va, 0, 0, &hr));

    /* Two mappings of one allocation: charged once, until both go. */
    ASSERT_EQ(0, (int)tv_create(&c, 4 * MiB, &h2));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_MAP, va, 4 * MiB, h2, NULL));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_MAP, va + 8 * MiB, 4 * MiB, h2, NULL));
    ASSERT_EQ(0, (int)tv_h(&c, VCU_OP_CU_MEM_RELEASE, h2));
    ASSERT_EQ_U64(4 * MiB + TV_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_UNMAP, va, 4 * MiB, 0, NULL));
    ASSERT_EQ_U64(4 * MiB + TV_CTX, vcu__acct_used(a, 0));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_UNMAP, va + 8 * MiB, 4 * MiB, 0, NULL));
    ASSERT_EQ_U64(TV_CTX, vcu__acct_used(a, 0));

    /* Left for the session's end: a released mapped allocation, an
     * unmapped one, a reservation. */
    ASSERT_EQ(0, (int)tv_create(&c, 6 * MiB, &h2));
    ASSERT_EQ(0, (int)tv_create(&c, 4 * MiB, &h3));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_MAP, va, 6 * MiB, h2, NULL));
    ASSERT_EQ(0, (int)tv_h(&c, VCU_OP_CU_MEM_RELEASE, h2));
    ASSERT_EQ_U64(10 * MiB + TV_CTX, vcu__acct_used(a, 0));
    tv_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/* Another session's ranges and handles are not this one's to map into,
 * unmap, set access on, free, release or retain; malformed requests are
 * refused and change nothing. */
TEST(vmm_hostile)
{
    vcu_account_t *a;
    struct vcu_cu_vmm_req rq;
    uint64_t ha, hb, va, vb, x, used;
    unsigned int i;
    tv_t c, d;

    ASSERT_EQ(0, vcu__acct_new(64 * MiB + 2 * TV_CTX, 8, &a));
    CHECK(tv_open(&c, "0,1", a));
    d.be = c.be;
    ASSERT_EQ(VCU_S_OK, ut_open(d.be, &d.s));
    /* Handles are per session: c's second names nothing in d, whose
     * first has the value c's first has. */
    ASSERT_EQ(0, (int)tv_create(&c, 2 * MiB, &x));
    ASSERT_EQ(0, (int)tv_create(&c, 4 * MiB, &ha));
    ASSERT_EQ(0, (int)tv_reserve(&c, 8 * MiB, &va));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_MAP, va, 4 * MiB, ha, NULL));
    ASSERT_EQ(0, (int)tv_access(&c, va, 4 * MiB, 0));
    ASSERT_EQ(0, (int)tv_create(&d, 4 * MiB, &hb));
    ASSERT_EQ(0, (int)tv_reserve(&d, 8 * MiB, &vb));

    /* d against c's. */
    ASSERT_EQ(INVAL, tv_range(&d, VCU_OP_CU_MEM_MAP, va + 4 * MiB, 4 * MiB, hb, NULL));
    ASSERT_EQ(INVAL, tv_range(&d, VCU_OP_CU_MEM_MAP, vb, 4 * MiB, ha, NULL));
    ASSERT_EQ(INVAL, tv_range(&d, VCU_OP_CU_MEM_UNMAP, va, 4 * MiB, 0, NULL));
    ASSERT_EQ(INVAL, tv_access(&d, va, 4 * MiB, 0));
    ASSERT_EQ(INVAL, tv_range(&d, VCU_OP_CU_MEM_ADDRESS_FREE, va, 8 * MiB, 0, NULL));
    ASSERT_EQ(INVAL, tv_h(&d, VCU_OP_CU_MEM_RELEASE, ha));
    ASSERT_EQ(INVAL, tv_h(&d, VCU_OP_CU_MEM_GET_PROPS, ha));
    ASSERT_EQ(INVAL, tv_range(&d, VCU_OP_CU_MEM_RETAIN, va, 0, 0, &x));
    rq = tv_req(0);
    rq.ptr = va;
    rq.prop.loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    ASSERT_EQ(INVAL, tv(&d, VCU_OP_CU_MEM_GET_ACCESS, &rq, &x));

    /* Malformed: wrapping ranges, a zero size, counts, devices, flags. */
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_MAP, UINT64_MAX - 4096, 8192, ha, NULL));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_UNMAP, va, UINT64_MAX, 0, NULL));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_UNMAP, va, 0, 0, NULL));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_ADDRESS_FREE, 0, 8 * MiB, 0, NULL));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_ADDRESS_FREE, va, 8 * MiB, 0, NULL));  /* mapped */
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_MAP, va, 4 * MiB, ha, NULL));         /* twice */
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_MAP, va + 4 * MiB, 4 * MiB, 17, NULL));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_MAP, va + 4 * MiB, 4 * MiB, ~0ull, NULL));
    ASSERT_EQ(INVAL, tv_range(&c, VCU_OP_CU_MEM_MAP, va + 6 * MiB, 4 * MiB, ha, NULL));
    rq = tv_req(0);
    rq.ptr = va;
    rq.size = 4 * MiB;
    rq.count = VCU_CU_MAX_DEVICES + 1;
    ASSERT_EQ(INVAL, tv(&c, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL));
    rq.count = 1;
    rq.access[0].loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    rq.access[0].loc_id = 2;        /* the VM has two */
    rq.access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_DEVICE, tv(&c, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL));
    rq.access[0].loc_id = 1;
    rq.access[0].flags = 2;
    ASSERT_EQ(INVAL, tv(&c, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL));
    rq.access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    rq.access[0].loc_type = 77;
    ASSERT_EQ(INVAL, tv(&c, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL));
    rq.access[0].loc_type = CU_MEM_LOCATION_TYPE_HOST;
    ASSERT_EQ((uint32_t)CUDA_ERROR_NOT_SUPPORTED, tv(&c, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL));
    rq.access[0].loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    ASSERT_EQ(0, (int)tv(&c, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL));    /* device 1 reads */
    rq = tv_req(0);
    rq.size = GRAN;
    rq.prop.loc_id = 1;             /* not the header's device */
    ASSERT_EQ(INVAL, tv(&c, VCU_OP_CU_MEM_CREATE, &rq, &x));
    rq.prop.loc_id = 5;
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_DEVICE, tv(&c, VCU_OP_CU_MEM_CREATE, &rq, &x));
    rq = tv_req(0);
    rq.size = GRAN;
    rq.prop.handle_types = CU_MEM_HANDLE_TYPE_FABRIC;
    ASSERT_EQ((uint32_t)CUDA_ERROR_NOT_SUPPORTED, tv(&c, VCU_OP_CU_MEM_CREATE, &rq, &x));
    rq.prop.handle_types = 0;
    rq.prop.usage = CU_MEM_CREATE_USAGE_TILE_POOL;
    ASSERT_EQ((uint32_t)CUDA_ERROR_NOT_SUPPORTED, tv(&c, VCU_OP_CU_MEM_CREATE, &rq, &x));
    rq.prop.usage = 0;
    rq.prop.reserved = 1;
    ASSERT_EQ(INVAL, tv(&c, VCU_OP_CU_MEM_CREATE, &rq, &x));
    rq.prop.reserved = 0;
    rq.prop.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
    ASSERT_EQ(INVAL, tv(&c, VCU_OP_CU_MEM_GRANULARITY, &rq, &x));
    rq.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    rq.flags = 9;
    ASSERT_EQ(INVAL, tv(&c, VCU_OP_CU_MEM_GRANULARITY, &rq, &x));
    rq.flags = 0;
    ASSERT_EQ(0, (int)tv(&c, VCU_OP_CU_MEM_GRANULARITY, &rq, &x));
    ASSERT_EQ_U64(GRAN, x);
    rq.hdr.device = 9;
    rq.prop.loc_id = 9;
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_DEVICE, tv(&c, VCU_OP_CU_MEM_CREATE, &rq, &x));
    /* A short request; another handle kind. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tv_do(&c, VCU_OP_CU_MEM_CREATE, &rq, 16, NULL));
    ASSERT_EQ(INVAL, tv_h(&c, VCU_OP_CU_MEM_RELEASE, c.s));

    /* Garbage of every field: nothing crashes, nothing is left charged. */
    used = vcu__acct_used(a, 0);
    srand(7);
    for (i = 0; i < 3000; i++) {
        static const uint64_t vals[] = { 0, 1, GRAN, 4 * MiB, 8 * MiB, UINT64_MAX, 1ull << 63 };
        uint32_t op = VCU_OP_CU_MEM_CREATE + (uint32_t)(rand() % 11);

        rq = tv_req((uint32_t)(rand() % 3));
        rq.ptr = (rand() % 2 ? va : vb) + vals[rand() % 7] * (uint64_t)(rand() % 2);
        rq.size = vals[rand() % 7];
        rq.offset = vals[rand() % 7];
        rq.handle = rand() % 3 == 0 ? ha : rand() % 2 ? hb : vals[rand() % 7];
        rq.flags = rand() % 4 == 0 ? vals[rand() % 7] : 0;
        rq.prop.loc_id = (uint32_t)(rand() % 3);
        rq.count = (uint32_t)(rand() % 18);
        rq.access[0].loc_type = (uint32_t)(rand() % 3);
        rq.access[0].loc_id = (uint32_t)(rand() % 3);
        rq.access[0].flags = (uint32_t)(rand() % 4);
        if (op == VCU_OP_CU_MEM_CREATE || op == VCU_OP_CU_MEM_ADDRESS_RESERVE ||
            op == VCU_OP_CU_MEM_RETAIN)
            continue;       /* these would only make more */
        (void)tv(&c, op, &rq, &x);
    }
    ASSERT_TRUE(vcu__acct_used(a, 0) <= used);
    ut_close(d.be, d.s);
    tv_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

/* The guest's ordinal 0 is the host's device 1 here: the allocation and
 * its memory are device 1's; the VM has no device 1. */
TEST(vmm_virtual_device)
{
    struct vcu_cu_vmm_req rq;
    uint64_t h, va, f0, f1, g0;
    tv_t c, d;

    CHECK(tv_open(&c, "1", NULL));
    CHECK(tv_open(&d, "0", NULL));
    f0 = tv_free(&c);
    g0 = tv_free(&d);
    ASSERT_EQ(0, (int)tv_create(&c, 64 * MiB, &h));
    f1 = tv_free(&c);
    ASSERT_EQ_U64(f0 - 64 * MiB, f1);
    ASSERT_EQ_U64(g0, tv_free(&d));                     /* host device 0's untouched */
    ASSERT_EQ(0, (int)tv_reserve(&c, 64 * MiB, &va));
    ASSERT_EQ(0, (int)tv_range(&c, VCU_OP_CU_MEM_MAP, va, 64 * MiB, h, NULL));
    ASSERT_EQ(0, (int)tv_access(&c, va, 64 * MiB, 0));
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_DEVICE, tv_access(&c, va, 64 * MiB, 1));
    rq = tv_req(0);
    rq.ptr = va;
    ASSERT_EQ(0, (int)tv(&c, VCU_OP_CU_MEM_GET_ACCESS, &rq, &h));
    ASSERT_EQ_U64(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, h);
    rq.prop.loc_id = 1;
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_DEVICE, tv(&c, VCU_OP_CU_MEM_GET_ACCESS, &rq, &h));
    rq = tv_req(1);
    rq.size = GRAN;
    ASSERT_EQ((uint32_t)CUDA_ERROR_INVALID_DEVICE, tv(&c, VCU_OP_CU_MEM_CREATE, &rq, &h));
    tv_close(&c);                                       /* the session's end frees it */
    tv_close(&d);
    CHECK(tv_open(&c, "1", NULL));
    ASSERT_EQ_U64(f0, tv_free(&c));
    tv_close(&c);
    return 0;
}
