/*
 * Shareable handles of cuMemCreate's allocations (POSIX descriptors)
 * between a VM's processes, end to end on the host: a real daemon and its
 * jailed workers (ut_daemon.h), two VMs' proxies as QEMU runs them, the
 * CPU stand-in as CUDA.  docs/design.md, "CUDA IPC".
 *
 * One guest process exports an allocation it filled; another process of
 * the same VM imports it, maps it and reads the bytes; a process of
 * another VM, forged names and the wrong kinds reach nothing.  The
 * exporter's charge stays while the daemon keeps the descriptor (after
 * its release), the importer is charged too (past the quota it gets
 * CUDA_ERROR_OUT_OF_MEMORY), and the name goes with the exporter's
 * process while the importer keeps its memory.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#include "ut.h"
#include "ut_daemon.h"

#define MiB (1ull << 20)
#define GRAN (2 * MiB)              /* the stand-in's granularity */
#define TS_RAM (4 * MiB)            /* guest RAM for the copies' segments */
#define INVAL ((uint32_t)CUDA_ERROR_INVALID_VALUE)
#define OOM ((uint32_t)CUDA_ERROR_OUT_OF_MEMORY)

typedef struct {
    vcu_proxy_t *px;
    int ramfd;
    unsigned char *ram;
} ts_vm_t;

static int ts_vm(ts_vm_t *v, uint64_t quota)
{
    const char *l = getenv("VCU_LIBCUDA");
    vcu_proxy_config_t cfg;
    char err[256];

    memset(v, 0, sizeof(*v));
    v->ramfd = memfd_create("ut-guest-ram", MFD_CLOEXEC);
    ASSERT_GE(v->ramfd, 0);
    ASSERT_EQ(0, ftruncate(v->ramfd, TS_RAM));
    v->ram = mmap(NULL, TS_RAM, PROT_READ | PROT_WRITE, MAP_SHARED, v->ramfd, 0);
    ASSERT_TRUE(v->ram != MAP_FAILED);
    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon_with(l != NULL ? l : "libcuda.so.1", NULL);
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.gpus = "0";
    cfg.mem_quota = quota;
    if (vcu_proxy_new(&cfg, &v->px, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcu_proxy_new: %s\n", err);
        return -1;
    }
    if (vcu_proxy_cuda_error(v->px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(v->px));
    return 0;
}

static void ts_vm_free(ts_vm_t *v)
{
    vcu_proxy_free(v->px);
    munmap(v->ram, TS_RAM);
    close(v->ramfd);
}

static uint32_t ts_exec(ts_vm_t *v, ut_req_t *t)
{
    return ut_px_exec(v->px, t);
}

static int ts_open(ts_vm_t *v, uint64_t *sid)
{
    ASSERT_EQ(0, ut_px_open(v->px, sid));
    return 0;
}

static void ts_close(ts_vm_t *v, uint64_t sid)
{
    ut_req_t *t = ut_req_new();

    ut_req_build(t, VCU_OP_SESSION_CLOSE, sid, NULL, 0);
    (void)ts_exec(v, t);
    free(t);
}

/* A CUDA request of session sid, with one segment of n bytes at the
 * VM's RAM (n 0: none); the reply into resp; the CUresult, or 0x10000 +
 * the wire status. */
static uint32_t ts_cu(ts_vm_t *v, uint64_t sid, uint32_t op, const void *p, uint32_t plen,
                      size_t n, uint32_t dir, void *resp, size_t rlen)
{
    ut_req_t *t = ut_req_new();
    vcu_gref_t ref = { v->ramfd, 0, 0 };
    uint32_t st, res;

    if (n > 0)
        ut_req_add_seg(t, dir, v->ram, n);
    ut_req_build(t, op, sid, p, plen);
    if (n > 0) {
        t->segs[0].ref = &ref;
        ut_wseg(t, 0)->nranges = 1;
    }
    st = ts_exec(v, t);
    res = st == VCU_S_OK ? ((const struct vcu_cu_resp *)ut_resp_payload(t))->result : 0x10000 + st;
    if (resp != NULL) {
        memset(resp, 0, rlen);
        if (st == VCU_S_OK)
            memcpy(resp, ut_resp_payload(t), rlen);
    }
    free(t);
    return res;
}

static struct vcu_cu_vmm_req ts_req(void)
{
    struct vcu_cu_vmm_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    rq.prop.loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    return rq;
}

static uint32_t ts_vmm(ts_vm_t *v, uint64_t sid, uint32_t op, struct vcu_cu_vmm_req *rq,
                       uint64_t *value)
{
    struct vcu_cu_vmm_resp rp;
    uint32_t r = ts_cu(v, sid, op, rq, sizeof(*rq), 0, 0, &rp, sizeof(rp));

    if (value != NULL)
        *value = rp.value;
    return r;
}

/* An allocation of GRAN bytes, exportable if fd. */
static uint32_t ts_create(ts_vm_t *v, uint64_t sid, int fd, uint64_t *h)
{
    struct vcu_cu_vmm_req rq = ts_req();

    rq.size = GRAN;
    rq.prop.handle_types = fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0;
    return ts_vmm(v, sid, VCU_OP_CU_MEM_CREATE, &rq, h);
}

static uint32_t ts_release(ts_vm_t *v, uint64_t sid, uint64_t h)
{
    struct vcu_cu_vmm_req rq = ts_req();

    rq.handle = h;
    return ts_vmm(v, sid, VCU_OP_CU_MEM_RELEASE, &rq, NULL);
}

/* h reserved, mapped and made read-write: its address into *va. */
static int ts_map(ts_vm_t *v, uint64_t sid, uint64_t h, uint64_t *va)
{
    struct vcu_cu_vmm_req rq = ts_req();

    rq.size = GRAN;
    ASSERT_EQ(0, (int)ts_vmm(v, sid, VCU_OP_CU_MEM_ADDRESS_RESERVE, &rq, va));
    rq = ts_req();
    rq.ptr = *va;
    rq.size = GRAN;
    rq.handle = h;
    ASSERT_EQ(0, (int)ts_vmm(v, sid, VCU_OP_CU_MEM_MAP, &rq, NULL));
    rq = ts_req();
    rq.ptr = *va;
    rq.size = GRAN;
    rq.count = 1;
    rq.access[0].loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    rq.access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_EQ(0, (int)ts_vmm(v, sid, VCU_OP_CU_MEM_SET_ACCESS, &rq, NULL));
    return 0;
}

/* n bytes between the VM's RAM and device address d. */
static uint32_t ts_copy(ts_vm_t *v, uint64_t sid, int htod, uint64_t d, size_t n)
{
    struct vcu_cu_memcpy_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.dst = htod ? d : 0;
    rq.src = htod ? 0 : d;
    rq.size = n;
    return ts_cu(v, sid, htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, &rq, sizeof(rq), n,
                 htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE, NULL, 0);
}

static uint32_t ts_export(ts_vm_t *v, uint64_t sid, uint64_t h, struct vcu_cu_ipc_handle *out)
{
    struct vcu_cu_u64_req rq = { { 0, 0 }, h };
    struct vcu_cu_ipc_handle_resp rp;
    uint32_t r = ts_cu(v, sid, VCU_OP_CU_MEM_EXPORT_SHAREABLE, &rq, sizeof(rq), 0, 0, &rp,
                       sizeof(rp));

    if (out != NULL)
        *out = rp.h;
    return r;
}

static uint32_t ts_import(ts_vm_t *v, uint64_t sid, const struct vcu_cu_ipc_handle *h,
                          uint32_t flags, uint64_t *out)
{
    struct vcu_cu_ipc_open_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.h = *h;
    rq.flags = flags;
    r = ts_cu(v, sid, VCU_OP_CU_MEM_IMPORT_SHAREABLE, &rq, sizeof(rq), 0, 0, &rp, sizeof(rp));
    if (out != NULL)
        *out = rp.value;
    return r;
}

static uint64_t ts_used(ts_vm_t *v)
{
    vcu_proxy_stats_t st;

    if (vcu_proxy_stats(v->px, &st, NULL, 0) != 0)
        return ~0ull;
    return st.mem_used[0];
}

/* The device attribute the guest reads (the host's answer). */
static uint32_t ts_attr(ts_vm_t *v, uint64_t sid, uint32_t attr)
{
    struct vcu_cu_hdr h = { 0, 0 };
    struct vcu_cu_device_info_resp *rp = malloc(sizeof(*rp));
    uint32_t a;

    ts_cu(v, sid, VCU_OP_CU_DEVICE_INFO, &h, sizeof(h), 0, 0, rp, sizeof(*rp));
    a = attr < rp->num_attrs ? rp->attrs[attr] : ~0u;
    free(rp);
    return a;
}

TEST(share_vmm_two_vms)
{
    /* Two contexts (1 MiB each here), the exporter's allocation and the
     * importer's charge for it: 6 MiB.  A third allocation's worth is
     * past it. */
    const uint64_t quota = 2 * UT_CTX_BYTES_N + 2 * GRAN;
    struct vcu_cu_ipc_handle hd, again, bad;
    ts_vm_t a, b;
    uint64_t a1, a2, b1, h0, h1, g, g2, va1, va2, used;
    unsigned int i;

    CHECK(ts_vm(&a, quota));
    CHECK(ts_vm(&b, 0));
    CHECK(ts_open(&a, &a1));
    CHECK(ts_open(&a, &a2));
    CHECK(ts_open(&b, &b1));
    ASSERT_EQ(1, (int)ts_attr(&a, a1, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED));

    /* The exporter fills its allocation and exports it; one made without
     * the handle type, or no allocation, has no handle. */
    ASSERT_EQ(0, (int)ts_create(&a, a1, 1, &h1));
    CHECK(ts_map(&a, a1, h1, &va1));
    for (i = 0; i < GRAN / 4; i++)
        ((uint32_t *)a.ram)[i] = 0x5a5a0000u + i;
    ASSERT_EQ(0, (int)ts_copy(&a, a1, 1, va1, GRAN));
    ASSERT_EQ(0, (int)ts_create(&b, b1, 0, &h0));
    ASSERT_EQ(INVAL, ts_export(&b, b1, h0, NULL));
    ASSERT_EQ(0, (int)ts_release(&b, b1, h0));
    ASSERT_EQ(INVAL, ts_export(&a, a1, 0x7777, NULL));
    ASSERT_EQ(0, (int)ts_export(&a, a1, h1, &hd));
    ASSERT_EQ(VCU_CU_IPC_MAGIC, hd.magic);
    ASSERT_EQ(VCU_CU_IPC_VMM, hd.kind);
    ASSERT_EQ(0, (int)hd.pid);
    ASSERT_EQ(0, (int)ts_export(&a, a1, h1, &again));
    ASSERT_EQ(0, memcmp(&hd, &again, sizeof(hd)));

    /* Released, it stays charged: the daemon holds the memory for it. */
    used = ts_used(&a);
    ASSERT_EQ(0, (int)ts_release(&a, a1, h1));
    ASSERT_EQ(INVAL, ts_release(&a, a1, h1));
    ASSERT_EQ_U64(used, ts_used(&a));

    /* Forged names reach nothing. */
    bad = hd;
    bad.token[3] ^= 0x10;
    ASSERT_EQ(INVAL, ts_import(&a, a2, &bad, 0, NULL));
    bad = hd;
    bad.kind = VCU_CU_IPC_MEM;
    ASSERT_EQ(INVAL, ts_import(&a, a2, &bad, 0, NULL));
    bad = hd;
    bad.pid = 7;
    ASSERT_EQ(INVAL, ts_import(&a, a2, &bad, 0, NULL));
    bad = hd;
    bad.reserved2[31] = 1;
    ASSERT_EQ(INVAL, ts_import(&a, a2, &bad, 0, NULL));
    bad = hd;
    bad.magic ^= 1;
    ASSERT_EQ(INVAL, ts_import(&a, a2, &bad, 0, NULL));
    ASSERT_EQ(INVAL, ts_import(&a, a2, &hd, 1, NULL));
    /* Another VM's process: not its VM's name. */
    ASSERT_EQ(INVAL, ts_import(&b, b1, &hd, 0, NULL));

    /* The other process of the VM: charged, mapped, the bytes there (its
     * context made first, by a reservation: it is charged too). */
    {
        struct vcu_cu_vmm_req rq = ts_req();
        uint64_t va = 0;

        rq.size = GRAN;
        ASSERT_EQ(0, (int)ts_vmm(&a, a2, VCU_OP_CU_MEM_ADDRESS_RESERVE, &rq, &va));
        rq.ptr = va;
        ASSERT_EQ(0, (int)ts_vmm(&a, a2, VCU_OP_CU_MEM_ADDRESS_FREE, &rq, NULL));
    }
    used = ts_used(&a);
    ASSERT_EQ(0, (int)ts_import(&a, a2, &hd, 0, &g));
    ASSERT_EQ_U64(used + GRAN, ts_used(&a));
    CHECK(ts_map(&a, a2, g, &va2));
    memset(a.ram, 0, GRAN);
    ASSERT_EQ(0, (int)ts_copy(&a, a2, 0, va2, GRAN));
    for (i = 0; i < GRAN / 4; i++)
        if (((uint32_t *)a.ram)[i] != 0x5a5a0000u + i)
            VCU_TEST_FAIL_("word %u: 0x%x", i, ((uint32_t *)a.ram)[i]);
    /* Past the VM's quota: refused, nothing charged. */
    ASSERT_EQ(OOM, ts_import(&a, a2, &hd, 0, &g2));
    ASSERT_EQ_U64(used + GRAN, ts_used(&a));

    /* The exporter's process ends: its name goes, the importer keeps the
     * memory and the bytes. */
    ts_close(&a, a1);
    for (i = 0; i < 200 && ts_import(&a, a2, &hd, 0, &g2) != INVAL; i++) {
        ts_release(&a, a2, g2);
        usleep(10000);
    }
    ASSERT_EQ(INVAL, ts_import(&a, a2, &hd, 0, NULL));
    memset(a.ram, 0, GRAN);
    ASSERT_EQ(0, (int)ts_copy(&a, a2, 0, va2, GRAN));
    ASSERT_EQ(0x5a5a0000u + 77, ((uint32_t *)a.ram)[77]);
    ts_close(&a, a2);
    ts_close(&b, b1);
    ts_vm_free(&a);
    ts_vm_free(&b);
    return 0;
}

/* One request to a backend of this process; the CUresult, or 0x10000 +
 * the wire status; the reply into resp. */
static uint32_t ts_be(vcu_backend_t *be, uint64_t sid, uint32_t op, const void *p, uint32_t plen,
                      void *resp, size_t rlen)
{
    return ut_cu_do(be, sid, op, p, plen, resp, rlen);
}

/* A backend with no keep (loopback, a worker started by hand, packed
 * mode): not offered, and the device says so. */
TEST(share_vmm_not_offered)
{
    vcu_backend_config_t cfg;
    vcu_backend_t *be = NULL;
    struct vcu_cu_vmm_req rq = ts_req();
    struct vcu_cu_vmm_resp vr;
    struct vcu_cu_u64_req uq = { { 0, 0 }, 0 };
    struct vcu_cu_ipc_handle_resp hr;
    struct vcu_cu_ipc_open_req oq;
    struct vcu_cu_u64_resp orp;
    struct vcu_cu_hdr h = { 0, 0 };
    struct vcu_cu_device_info_resp *di = malloc(sizeof(*di));
    uint64_t s;

    ASSERT_NOT_NULL(di);
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0";
    cfg.account_slot = -1;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &be));
    if (vcu_backend_cuda_error(be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(be));
    ASSERT_EQ(VCU_S_OK, ut_open(be, &s));
    ASSERT_EQ(0, (int)ts_be(be, s, VCU_OP_CU_DEVICE_INFO, &h, sizeof(h), di, sizeof(*di)));
    ASSERT_EQ(0, (int)di->attrs[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED]);
    rq.size = GRAN;
    rq.prop.handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    ASSERT_EQ(0, (int)ts_be(be, s, VCU_OP_CU_MEM_CREATE, &rq, sizeof(rq), &vr, sizeof(vr)));
    uq.value = vr.value;
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED,
              ts_be(be, s, VCU_OP_CU_MEM_EXPORT_SHAREABLE, &uq, sizeof(uq), &hr, sizeof(hr)));
    memset(&oq, 0, sizeof(oq));
    oq.h.magic = VCU_CU_IPC_MAGIC;
    oq.h.kind = VCU_CU_IPC_VMM;
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED,
              ts_be(be, s, VCU_OP_CU_MEM_IMPORT_SHAREABLE, &oq, sizeof(oq), &orp, sizeof(orp)));
    free(di);
    ut_close(be, s);
    vcu_backend_free(be);
    return 0;
}

static uint32_t ts_pool_create(ts_vm_t *v, uint64_t sid, int share, uint64_t *h)
{
    struct vcu_cu_pool_create_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.alloc_type = CU_MEM_ALLOCATION_TYPE_PINNED;
    rq.handle_types = share ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0;
    r = ts_cu(v, sid, VCU_OP_CU_MEMPOOL_CREATE, &rq, sizeof(rq), 0, 0, &rp, sizeof(rp));
    *h = rp.value;
    return r;
}

static uint32_t ts_alloc_async(ts_vm_t *v, uint64_t sid, uint64_t pool, uint64_t size,
                               uint64_t *p)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    rq.pool = pool;
    r = ts_cu(v, sid, VCU_OP_CU_MEM_ALLOC_ASYNC, &rq, sizeof(rq), 0, 0, &rp, sizeof(rp));
    *p = rp.value;
    return r;
}

static uint32_t ts_free_async(ts_vm_t *v, uint64_t sid, uint64_t p)
{
    struct vcu_cu_memcpy_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.dst = p;
    rq.flags = VCU_CU_MEMCPY_F_ASYNC;
    return ts_cu(v, sid, VCU_OP_CU_MEM_FREE_ASYNC, &rq, sizeof(rq), 0, 0, NULL, 0);
}

static uint32_t ts_get(ts_vm_t *v, uint64_t sid, uint32_t op, uint64_t value,
                       struct vcu_cu_ipc_handle *out)
{
    struct vcu_cu_u64_req rq = { { 0, 0 }, value };
    struct vcu_cu_ipc_handle_resp rp;
    uint32_t r = ts_cu(v, sid, op, &rq, sizeof(rq), 0, 0, &rp, sizeof(rp));

    if (out != NULL)
        *out = rp.h;
    return r;
}

static uint32_t ts_pool_import(ts_vm_t *v, uint64_t sid, const struct vcu_cu_ipc_handle *h,
                               struct vcu_cu_ipc_import_resp *out)
{
    struct vcu_cu_ipc_open_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.h = *h;
    return ts_cu(v, sid, VCU_OP_CU_MEMPOOL_IMPORT_SHAREABLE, &rq, sizeof(rq), 0, 0, out,
                 sizeof(*out));
}

static uint32_t ts_ptr_import(ts_vm_t *v, uint64_t sid, uint64_t pool,
                              const struct vcu_cu_ipc_handle *h, struct vcu_cu_ipc_import_resp *out)
{
    struct vcu_cu_pool_ptr_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.pool = pool;
    rq.h = *h;
    return ts_cu(v, sid, VCU_OP_CU_MEMPOOL_IMPORT_POINTER, &rq, sizeof(rq), 0, 0, out,
                 sizeof(*out));
}

/*
 * A pool made with POSIX descriptors, streamOrderedAllocationIPC's way:
 * exported with a block of it; another process of the VM imports the
 * pool and the block, reads the bytes, is charged for the block until it
 * frees it; the other VM's process imports nothing; names forged or of
 * the wrong kind reach nothing; a pool made without the handle type, or
 * an imported one, exports nothing, and an imported pool makes no blocks.
 */
TEST(share_pool_two_vms)
{
    struct vcu_cu_ipc_handle hp, hb, again, bad;
    struct vcu_cu_ipc_import_resp ir;
    ts_vm_t a, b;
    uint64_t a1, a2, b1, pool, plain, blk, other, ip, q, used;
    unsigned int i;

    CHECK(ts_vm(&a, 0));
    CHECK(ts_vm(&b, 0));
    CHECK(ts_open(&a, &a1));
    CHECK(ts_open(&a, &a2));
    CHECK(ts_open(&b, &b1));
    ASSERT_EQ(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
              (int)ts_attr(&a, a1, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES));

    ASSERT_EQ(0, (int)ts_pool_create(&a, a1, 1, &pool));
    ASSERT_EQ(0, (int)ts_pool_create(&a, a1, 0, &plain));
    ASSERT_EQ(0, (int)ts_alloc_async(&a, a1, pool, 1 * MiB, &blk));
    ASSERT_EQ(0, (int)ts_alloc_async(&a, a1, plain, 1 * MiB, &other));
    for (i = 0; i < MiB / 4; i++)
        ((uint32_t *)a.ram)[i] = 0x77000000u + i;
    ASSERT_EQ(0, (int)ts_copy(&a, a1, 1, blk, MiB));
    ASSERT_EQ(INVAL, ts_get(&a, a1, VCU_OP_CU_MEMPOOL_EXPORT_SHAREABLE, plain, NULL));
    ASSERT_EQ(INVAL, ts_get(&a, a1, VCU_OP_CU_MEMPOOL_EXPORT_POINTER, other, NULL));
    ASSERT_EQ(0, (int)ts_get(&a, a1, VCU_OP_CU_MEMPOOL_EXPORT_SHAREABLE, pool, &hp));
    ASSERT_EQ(VCU_CU_IPC_POOL, hp.kind);
    ASSERT_EQ(0, (int)ts_get(&a, a1, VCU_OP_CU_MEMPOOL_EXPORT_SHAREABLE, pool, &again));
    ASSERT_EQ(0, memcmp(&hp, &again, sizeof(hp)));
    ASSERT_EQ(0, (int)ts_get(&a, a1, VCU_OP_CU_MEMPOOL_EXPORT_POINTER, blk, &hb));
    ASSERT_EQ(VCU_CU_IPC_POOL_PTR, hb.kind);

    /* The other VM, forged and wrong names: nothing. */
    ASSERT_EQ(INVAL, ts_pool_import(&b, b1, &hp, &ir));
    bad = hp;
    bad.token[0] ^= 1;
    ASSERT_EQ(INVAL, ts_pool_import(&a, a2, &bad, &ir));
    bad = hp;
    bad.kind = VCU_CU_IPC_VMM;
    ASSERT_EQ(INVAL, ts_pool_import(&a, a2, &bad, &ir));
    ASSERT_EQ(INVAL, ts_pool_import(&a, a2, &hb, &ir));

    /* The VM's other process: the pool, then the block in it. */
    ASSERT_EQ(0, (int)ts_pool_import(&a, a2, &hp, &ir));
    ASSERT_EQ(0, (int)ir.dev);
    ip = ir.value;
    ASSERT_EQ(INVAL, ts_alloc_async(&a, a2, ip, MiB, &q));
    ASSERT_EQ(INVAL, ts_get(&a, a2, VCU_OP_CU_MEMPOOL_EXPORT_SHAREABLE, ip, NULL));
    ASSERT_EQ(INVAL, ts_ptr_import(&a, a2, ip, &hp, &ir));      /* a pool's name */
    bad = hb;
    bad.token[5] ^= 4;
    ASSERT_EQ(INVAL, ts_ptr_import(&a, a2, ip, &bad, &ir));
    ASSERT_EQ(INVAL, ts_ptr_import(&a, a1, pool, &hb, &ir));    /* not an imported pool */
    used = ts_used(&a);
    ASSERT_EQ(0, (int)ts_ptr_import(&a, a2, ip, &hb, &ir));
    ASSERT_EQ_U64(MiB, ir.size);
    ASSERT_EQ_U64(used + MiB, ts_used(&a));
    memset(a.ram, 0, MiB);
    ASSERT_EQ(0, (int)ts_copy(&a, a2, 0, ir.value, MiB));
    for (i = 0; i < MiB / 4; i++)
        if (((uint32_t *)a.ram)[i] != 0x77000000u + i)
            VCU_TEST_FAIL_("word %u: 0x%x", i, ((uint32_t *)a.ram)[i]);
    ASSERT_EQ(0, (int)ts_free_async(&a, a2, ir.value));
    ASSERT_EQ_U64(used, ts_used(&a));
    ts_close(&a, a1);
    ts_close(&a, a2);
    ts_close(&b, b1);
    ts_vm_free(&a);
    ts_vm_free(&b);
    return 0;
}

/* A peer's access to a pool (CU_MEMPOOL_SET_ACCESS): the session that
 * made the pool may set it; the VM's other process and another VM name
 * nothing with the same handle; a device the VM was not given (the
 * host has a second) is refused, as are undefined flags. */
TEST(share_pool_access_sessions)
{
    struct vcu_cu_attr_req rq;
    ts_vm_t a, b;
    uint64_t a1, a2, b1, pool;

    CHECK(ts_vm(&a, 0));
    CHECK(ts_vm(&b, 0));
    CHECK(ts_open(&a, &a1));
    CHECK(ts_open(&a, &a2));
    CHECK(ts_open(&b, &b1));
    ASSERT_EQ(0, (int)ts_pool_create(&a, a1, 0, &pool));
    memset(&rq, 0, sizeof(rq));
    rq.handle = pool;
    rq.value = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_EQ(0, (int)ts_cu(&a, a1, VCU_OP_CU_MEMPOOL_SET_ACCESS, &rq, sizeof(rq), 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              (int)ts_cu(&a, a2, VCU_OP_CU_MEMPOOL_SET_ACCESS, &rq, sizeof(rq), 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              (int)ts_cu(&b, b1, VCU_OP_CU_MEMPOOL_SET_ACCESS, &rq, sizeof(rq), 0, 0, NULL, 0));
    rq.attr = 1;
    ASSERT_EQ(INVAL, ts_cu(&a, a1, VCU_OP_CU_MEMPOOL_SET_ACCESS, &rq, sizeof(rq), 0, 0, NULL, 0));
    rq.attr = 0;
    rq.value = 2;
    ASSERT_EQ(INVAL, ts_cu(&a, a1, VCU_OP_CU_MEMPOOL_SET_ACCESS, &rq, sizeof(rq), 0, 0, NULL, 0));
    ts_close(&a, a1);
    ts_close(&a, a2);
    ts_close(&b, b1);
    ts_vm_free(&a);
    ts_vm_free(&b);
    return 0;
}
