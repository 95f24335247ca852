/*
 * Unit tests of the CUDA executor (host-backend/cuda.c, cuda_tab.c),
 * driven through the public backend API as a transport would, against the
 * CPU stand-in for libcuda (tests/fakecuda, via $VCU_LIBCUDA).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include "ut.h"
#include "vcu_backend_int.h"
#include "cuda_tab.h"
#include "vcu_calls.h"

/* The stand-in's twin of tests/cuda/vector_add.cu. */
#define TC_VADD "_Z10vector_addPKfS0_Pfi"
/* A PTX image naming it (the stand-in finds twins by name in the image). */
#define TC_PTX "//\n.version 8.0\n.target sm_90\n.visible .entry " TC_VADD "()\n{\n}\n"

typedef struct tc_s {
    vcu_backend_t *be;
    uint64_t s;
    char mc[32];                    /* tc_open_mc's module cache, or "" */
} tc_t;

/* A backend on $VCU_LIBCUDA with devices "0,1" and one session. */
static int tc_open_gpus(tc_t *c, const char *gpus)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = gpus;
    c->be = NULL;
    c->mc[0] = 0;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c->be));
    if (vcu_backend_cuda_error(c->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c->be));
    ASSERT_EQ(VCU_S_OK, ut_open(c->be, &c->s));
    return 0;
}

static int tc_open(tc_t *c)
{
    return tc_open_gpus(c, "0,1");
}

static void tc_close(tc_t *c)
{
    ut_close(c->be, c->s);
    vcu_backend_free(c->be);
    if (c->mc[0] != 0) {
        DIR *d = opendir(c->mc);
        struct dirent *e;
        char p[sizeof(c->mc) + 256];

        while (d != NULL && (e = readdir(d)) != NULL) {
            snprintf(p, sizeof(p), "%s/%s", c->mc, e->d_name);
            if (e->d_name[0] != '.')
                unlink(p);
        }
        if (d != NULL)
            closedir(d);
        rmdir(c->mc);
        c->mc[0] = 0;
    }
}

/* Runs a request with the segments already in t; returns the wire status. */
static uint32_t tc_run(tc_t *c, ut_req_t *t, uint32_t op, uint32_t flags, const void *p,
                       uint32_t plen)
{
    ut_req_build(t, op, c->s, p, plen);
    ut_hdr(t)->flags = flags;
    vcu_backend_execute(c->be, &t->r);
    return ut_status(t);
}

/* Runs a request without segments; copies up to rlen reply bytes to resp. */
static uint32_t tc_do(tc_t *c, uint32_t op, uint32_t flags, const void *p, uint32_t plen,
                      void *resp, size_t rlen)
{
    ut_req_t *t = ut_req_new();
    uint32_t st = tc_run(c, t, op, flags, p, plen);

    ut_resp_copy(t, resp, rlen);
    free(t);
    return st;
}

/* A u64 request; returns the CUresult (or 0x10000 + wire status). */
static uint32_t tc_u64(tc_t *c, uint32_t op, uint32_t dev, uint64_t value, uint64_t *out)
{
    struct vcu_cu_u64_req rq = {{dev, 0}, value};
    struct vcu_cu_u64_resp rp;
    uint32_t st = tc_do(c, op, 0, &rq, sizeof(rq), &rp, sizeof(rp));

    if (st != VCU_S_OK)
        return 0x10000 + st;
    if (out != NULL)
        *out = rp.value;
    return rp.r.result;
}

static uint32_t tc_pair(tc_t *c, uint32_t op, uint64_t a, uint64_t b, uint64_t cc, void *resp,
                        size_t rlen)
{
    struct vcu_cu_pair_req rq = {{0, 0}, a, b, cc};
    struct vcu_cu_u64_resp rp;
    uint32_t st = tc_do(c, op, 0, &rq, sizeof(rq), resp ? resp : &rp, resp ? rlen : sizeof(rp));

    if (st != VCU_S_OK)
        return 0x10000 + st;
    return resp ? ((struct vcu_cu_resp *)resp)->result : rp.r.result;
}

static uint32_t tc_alloc(tc_t *c, uint64_t size, uint64_t *ptr)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    st = tc_do(c, VCU_OP_CU_MEM_ALLOC, 0, &rq, sizeof(rq), &rp, sizeof(rp));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *ptr = rp.value;
    return rp.r.result;
}

/* A CU_CALL request of len bytes (its call and hash as given); the
 * CUresult, or 0x10000 + the wire status. */
static uint32_t tc_call(tc_t *c, const void *rq, uint32_t len, void *resp, size_t rlen)
{
    struct vcu_cu_resp r;
    uint32_t st = tc_do(c, VCU_OP_CU_CALL, 0, rq, len, resp ? resp : &r, resp ? rlen : sizeof(r));

    if (st != VCU_S_OK)
        return 0x10000 + st;
    return resp ? ((struct vcu_cu_resp *)resp)->result : r.result;
}

#define TC_CALL_INIT(rq, name, dev)                                          \
    do {                                                                     \
        memset(&(rq), 0, sizeof(rq));                                        \
        (rq).c.hdr.device = (dev);                                           \
        (rq).c.call = VCU_CALL_##name;                                       \
        (rq).c.hash = VCU_CALLS_HASH;                                        \
    } while (0)

/* A generated query of one handle (cuStreamQuery, cuEventQuery: the same
 * layout) on device dev; the CUresult, or 0x10000 + the wire status. */
static uint32_t tc_query(tc_t *c, uint32_t call, uint32_t dev, uint64_t h)
{
    struct vcu_call_cuStreamQuery_req rq;

    _Static_assert(sizeof(rq) == sizeof(struct vcu_call_cuEventQuery_req), "one slot each");
    TC_CALL_INIT(rq, cuStreamQuery, dev);
    rq.c.call = call;
    rq.hStream = h;
    return tc_call(c, &rq, sizeof(rq), NULL, 0);
}

/* HtoD / DtoH with the host side split into iovecs of the given sizes;
 * segflags is added to the segment's direction (VCU_SEG_F_STABLE). */
static uint32_t tc_copy_ex(tc_t *c, int htod, uint64_t dptr, void *host, size_t len,
                           const size_t *cuts, unsigned int ncuts, uint32_t cflags,
                           uint64_t stream, uint32_t segflags)
{
    ut_req_t *t = ut_req_new();
    struct iovec iov[UT_MAX_IOV];
    struct vcu_cu_memcpy_req rq;
    struct vcu_cu_resp rp;
    size_t off = 0;
    unsigned int i, n = 0;
    uint32_t st;

    for (i = 0; i < ncuts && n < UT_MAX_IOV - 1; i++) {
        iov[n].iov_base = (char *)host + off;
        iov[n].iov_len = cuts[i];
        off += cuts[i];
        n++;
    }
    iov[n].iov_base = (char *)host + off;
    iov[n].iov_len = len - off;
    n++;
    ut_req_add_seg_iov(t, (htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE) | segflags, iov, n);
    memset(&rq, 0, sizeof(rq));
    if (htod)
        rq.dst = dptr;
    else
        rq.src = dptr;
    rq.size = len;
    rq.flags = cflags;
    rq.stream = stream;
    st = tc_run(c, t, htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, 0, &rq, sizeof(rq));
    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    return st != VCU_S_OK ? 0x10000 + st : rp.result;
}

static uint32_t tc_copy(tc_t *c, int htod, uint64_t dptr, void *host, size_t len,
                        const size_t *cuts, unsigned int ncuts, uint32_t cflags, uint64_t stream)
{
    return tc_copy_ex(c, htod, dptr, host, len, cuts, ncuts, cflags, stream, 0);
}

/* Loads an "image" the stand-in accepts: bytes naming the kernels. */
/* A module loaded in the guest's context number ctx (vcu_cu_hdr.ctx). */
static uint32_t tc_module_in(tc_t *c, uint32_t ctx, const char *image, uint64_t *mod)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_module_load_req rq;
    struct vcu_cu_u64_resp rp;
    size_t len = strlen(image);
    uint32_t st;

    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, (void *)image, len);
    memset(&rq, 0, sizeof(rq));
    rq.hdr.ctx = ctx;
    rq.image_len = len;
    st = tc_run(c, t, VCU_OP_CU_MODULE_LOAD, 0, &rq, sizeof(rq));
    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *mod = rp.value;
    return rp.r.result;
}

static uint32_t tc_module(tc_t *c, const char *image, uint64_t *mod)
{
    return tc_module_in(c, 0, image, mod);
}

/* CU_MODULE_GET_FUNCTION; resp gets the whole reply (params follow). */
static uint32_t tc_func(tc_t *c, uint64_t mod, const char *name, uint32_t name_len,
                        uint32_t plen_extra, void *resp, size_t rlen)
{
    unsigned char p[sizeof(struct vcu_cu_name_req) + VCU_CU_NAME_MAX + 64];
    struct vcu_cu_name_req rq;
    size_t n = strlen(name) < VCU_CU_NAME_MAX + 32 ? strlen(name) : VCU_CU_NAME_MAX + 32;
    uint32_t st;

    memset(p, 0, sizeof(p));
    memset(&rq, 0, sizeof(rq));
    rq.module = mod;
    rq.name_len = name_len;
    memcpy(p, &rq, sizeof(rq));
    memcpy(p + sizeof(rq), name, n);
    st = tc_do(c, VCU_OP_CU_MODULE_GET_FUNCTION, 0, p, (uint32_t)(sizeof(rq) + n + plen_extra),
               resp, rlen);
    if (st != VCU_S_OK)
        return 0x10000 + st;
    return ((struct vcu_cu_resp *)resp)->result;
}

/* Launch with the given parameter bytes. */
static uint32_t tc_launch(tc_t *c, uint64_t fn, uint64_t stream, uint32_t grid, uint32_t block,
                          const void *params, uint32_t pbytes, uint32_t pbytes_field)
{
    unsigned char p[sizeof(struct vcu_cu_launch_req) + 256];
    struct vcu_cu_launch_req rq;
    struct vcu_cu_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.function = fn;
    rq.stream = stream;
    rq.grid[0] = grid;
    rq.grid[1] = rq.grid[2] = 1;
    rq.block[0] = block;
    rq.block[1] = rq.block[2] = 1;
    rq.param_bytes = pbytes_field;
    memcpy(p, &rq, sizeof(rq));
    memcpy(p + sizeof(rq), params, pbytes);
    st = tc_do(c, VCU_OP_CU_LAUNCH, 0, p, (uint32_t)(sizeof(rq) + pbytes), &rp, sizeof(rp));
    return st != VCU_S_OK ? 0x10000 + st : rp.result;
}

/* ---- tables, no driver needed ------------------------------------------- */

TEST(cuda_htab)
{
    vcu__htab_t t;
    vcu__hent_t *e = NULL;
    uint64_t a, b, c2;

    vcu__htab_init(&t);
    a = vcu__htab_add(&t, VCU__H_STREAM, 0, &e);
    ASSERT_GE(a, VCU_CU_HANDLE_MIN);
    b = vcu__htab_add(&t, VCU__H_EVENT, 1, &e);
    ASSERT_NE(a, b);
    ASSERT_TRUE(vcu__htab_get(&t, a, VCU__H_STREAM) != NULL);
    ASSERT_NULL(vcu__htab_get(&t, a, VCU__H_EVENT));    /* wrong type */
    ASSERT_NULL(vcu__htab_get(&t, a + (1ull << 32), VCU__H_STREAM)); /* wrong generation */
    ASSERT_NULL(vcu__htab_get(&t, a + 100000, VCU__H_STREAM));       /* index out of range */
    ASSERT_NULL(vcu__htab_get(&t, 0, VCU__H_FREE));
    vcu__htab_del(&t, a);
    ASSERT_NULL(vcu__htab_get(&t, a, VCU__H_STREAM));   /* stale */
    c2 = vcu__htab_add(&t, VCU__H_STREAM, 0, &e);       /* same slot, new generation */
    ASSERT_EQ((uint32_t)c2, (uint32_t)a);
    ASSERT_NE(c2, a);
    ASSERT_NULL(vcu__htab_get(&t, a, VCU__H_STREAM));
    ASSERT_TRUE(vcu__htab_get(&t, c2, VCU__H_STREAM) != NULL);
    ASSERT_EQ(2, t.live);
    /* Functions own their parameter layout; fini frees it (LeakSanitizer). */
    (void)vcu__htab_add(&t, VCU__H_FUNCTION, 0, &e);
    e->u.fn.params = malloc(16);
    vcu__htab_fini(&t);
    return 0;
}

TEST(cuda_pset)
{
    vcu__pset_t s;
    uint64_t v = 0;
    uint64_t i;

    vcu__pset_init(&s);
    ASSERT_EQ(0, vcu__pset_find(&s, 0x1000, &v));
    for (i = 1; i <= 1000; i++)
        ASSERT_EQ(0, vcu__pset_add(&s, i * 256, (uint32_t)i));
    for (i = 1; i <= 1000; i += 2)
        vcu__pset_del(&s, i * 256);
    for (i = 1; i <= 1000; i++) {
        ASSERT_EQ(i % 2 == 0, vcu__pset_find(&s, i * 256, &v));
        if (i % 2 == 0)
            ASSERT_EQ(i, v);
    }
    ASSERT_EQ(500, s.live);
    /* Churn: tombstones must not fill the table. */
    for (i = 0; i < 100000; i++) {
        ASSERT_EQ(0, vcu__pset_add(&s, 0x10000000 + i * 8, 1));
        vcu__pset_del(&s, 0x10000000 + i * 8);
    }
    ASSERT_EQ(500, s.live);
    ASSERT_EQ(0, vcu__pset_find(&s, 0, NULL));
    vcu__pset_fini(&s);
    return 0;
}

/* ---- driver loading and devices ----------------------------------------- */

TEST(cuda_no_driver)
{
    vcu_backend_config_t cfg;
    vcu__cuda_t *cu = (vcu__cuda_t *)1;
    char err[256];

    memset(&cfg, 0, sizeof(cfg));
    cfg.libcuda = UT_NO_LIBCUDA;
    ASSERT_EQ(VCU_ENODEV, vcu__cuda_init(&cfg, &cu, err, sizeof(err)));
    ASSERT_NULL(cu);
    ASSERT_TRUE(strstr(err, "cannot open shared object file") != NULL);
    ASSERT_NULL(strchr(err, '\n'));
    /* A library that is not a CUDA driver. */
    cfg.libcuda = "libm.so.6";
    ASSERT_EQ(VCU_ENODEV, vcu__cuda_init(&cfg, &cu, err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "cuInit") != NULL);
    return 0;
}

TEST(cuda_gpus_config)
{
    vcu_backend_config_t cfg;
    vcu__cuda_t *cu = NULL;
    char err[256];
    static const char *bad[] = {"2", "0,0", "-1", "x", "0,", "GPU-00000000-0000-0000-0000-000000000000",
                                "99999999999999999999", "0:0", "0:", ":1", "0:2", "0;1"};
    unsigned int i;

    memset(&cfg, 0, sizeof(cfg));
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.gpus = bad[i];
        ASSERT_EQ(VCU_ENODEV, vcu__cuda_init(&cfg, &cu, err, sizeof(err)));
        ASSERT_NULL(cu);
        ASSERT_TRUE(err[0] != '\0');
    }
    cfg.gpus = " 1 , 0";
    ASSERT_EQ(0, vcu__cuda_init(&cfg, &cu, err, sizeof(err)));
    ASSERT_NOT_NULL(cu);
    vcu__cuda_fini(cu);
    return 0;
}

/* ':' separates entries as ',' does: "0:1" is the form QEMU's -device
 * parser takes without the ",," escape. */
TEST(cuda_gpus_colon)
{
    static const char *two[] = {"0,1", "1:0", " 0 : 1 "};
    tc_t c;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_driver_info_resp r;
    unsigned int i;

    for (i = 0; i < sizeof(two) / sizeof(two[0]); i++) {
        CHECK(tc_open_gpus(&c, two[i]));
        memset(&r, 0, sizeof(r));
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_DRIVER_INFO, 0, &h, sizeof(h), &r, sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.r.result);
        ASSERT_EQ(2, r.device_count);
        tc_close(&c);
    }
    return 0;
}

TEST(cuda_driver_info)
{
    tc_t c;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_driver_info_resp r;

    CHECK(tc_open_gpus(&c, "1"));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_DRIVER_INFO, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.r.result);
    ASSERT_EQ(1, r.device_count);
    ASSERT_GT(r.driver_version, 0);
    tc_close(&c);
    return 0;
}

TEST(cuda_device_info)
{
    tc_t c;
    struct vcu_cu_hdr h = {1, 0};
    struct vcu_cu_device_info_resp *r = malloc(sizeof(*r));

    CHECK(tc_open(&c));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_DEVICE_INFO, 0, &h, sizeof(h), r, sizeof(*r)));
    ASSERT_EQ(CUDA_SUCCESS, r->r.result);
    ASSERT_TRUE(r->name[0] != '\0');
    ASSERT_EQ(1, r->host_ordinal);
    ASSERT_GT(r->total_mem, 0);
    ASSERT_GT(r->num_attrs, 100);
    ASSERT_LE(r->num_attrs, VCU_CU_NUM_DEV_ATTRS);
    ASSERT_EQ(1024, r->attrs[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK]);
    ASSERT_EQ(0, r->attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID]);
    ASSERT_EQ(0, r->attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
    ASSERT_EQ(0, r->attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID]);
    h.device = 2;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_DEVICE_INFO, 0, &h, sizeof(h), r, sizeof(*r)));
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, r->r.result);
    /* Every context opcode checks the ordinal too. */
    h.device = 16;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), r, 8));
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, r->r.result);
    free(r);
    tc_close(&c);
    return 0;
}

/* ---- memory ------------------------------------------------------------- */

TEST(cuda_memcpy_roundtrip)
{
    static const size_t cut_in[] = {1, 4095, 7};
    static const size_t cut_out[] = {1000, 1};
    unsigned char *in = malloc(10000), *out = malloc(10000);
    uint64_t d = 0, d2 = 0, st = 0;
    struct vcu_cu_memcpy_req rq;
    tc_t c;

    CHECK(tc_open(&c));
    ut_fill(in, 10000, 7);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 10000, &d));
    ASSERT_NE(0, d);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, d, in, 10000, cut_in, 3, 0, 0));
    memset(out, 0, 10000);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, out, 10000, cut_out, 2, 0, 0));
    ASSERT_MEM_EQ(in, out, 10000);

    /* Async on a stream, then DtoD. */
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 10000, &d2));
    {
        struct vcu_cu_stream_create_req sq = {{0, 0}, 0, 0};
        struct vcu_cu_u64_resp sr;

        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_CREATE, 0, &sq, sizeof(sq), &sr, sizeof(sr)));
        ASSERT_EQ(CUDA_SUCCESS, sr.r.result);
        st = sr.value;
    }
    ut_fill(in, 10000, 9);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, d, in, 10000, cut_out, 2, VCU_CU_MEMCPY_F_ASYNC, st));
    memset(&rq, 0, sizeof(rq));
    rq.dst = d2;
    rq.src = d;
    rq.size = 10000;
    {
        struct vcu_cu_resp r;

        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMCPY_DTOD, 0, &rq, sizeof(rq), &r, sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.result);
    }
    memset(out, 0, 10000);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d2, out, 10000, cut_in, 3, VCU_CU_MEMCPY_F_ASYNC,
                                    VCU_CU_STREAM_PER_THREAD));
    ASSERT_MEM_EQ(in, out, 10000);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, d, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, d2, NULL));
    /* Freed twice: not ours any more. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, d, NULL));
    free(in);
    free(out);
    tc_close(&c);
    return 0;
}

TEST(cuda_memcpy_bad_segments)
{
    unsigned char buf[64];
    uint64_t d = 0;
    struct vcu_cu_memcpy_req rq;
    ut_req_t *t;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d));
    memset(&rq, 0, sizeof(rq));
    rq.dst = d;
    rq.size = 64;
    /* No segment. */
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_MEMCPY_HTOD, 0, &rq, sizeof(rq), NULL, 0));
    /* Wrong direction. */
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, buf, 64);
    ASSERT_EQ(VCU_S_EINVAL, tc_run(&c, t, VCU_OP_CU_MEMCPY_HTOD, 0, &rq, sizeof(rq)));
    free(t);
    /* Size differs from the segment. */
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf, 32);
    ASSERT_EQ(VCU_S_EINVAL, tc_run(&c, t, VCU_OP_CU_MEMCPY_HTOD, 0, &rq, sizeof(rq)));
    free(t);
    /* Two segments. */
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf, 32);
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf + 32, 32);
    ASSERT_EQ(VCU_S_EINVAL, tc_run(&c, t, VCU_OP_CU_MEMCPY_HTOD, 0, &rq, sizeof(rq)));
    free(t);
    /* Unknown copy flag. */
    rq.flags = 2;
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf, 64);
    ASSERT_EQ(VCU_S_EINVAL, tc_run(&c, t, VCU_OP_CU_MEMCPY_HTOD, 0, &rq, sizeof(rq)));
    free(t);
    /* A bad stream on an async copy. */
    rq.flags = VCU_CU_MEMCPY_F_ASYNC;
    rq.stream = 5;
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf, 64);
    ASSERT_EQ(VCU_S_OK, tc_run(&c, t, VCU_OP_CU_MEMCPY_HTOD, 0, &rq, sizeof(rq)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, ((struct vcu_cu_resp *)ut_resp_payload(t))->result);
    free(t);
    tc_close(&c);
    return 0;
}

static uint32_t tc_memset(tc_t *c, uint64_t dst, uint32_t value, uint32_t esz, uint64_t width,
                          uint64_t height, uint64_t pitch, uint32_t flags)
{
    struct vcu_cu_memset_req rq;
    struct vcu_cu_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.dst = dst;
    rq.value = value;
    rq.elem_size = esz;
    rq.width = width;
    rq.height = height;
    rq.pitch = pitch;
    rq.flags = flags;
    st = tc_do(c, VCU_OP_CU_MEMSET, 0, &rq, sizeof(rq), &rp, sizeof(rp));
    return st != VCU_S_OK ? 0x10000 + st : rp.result;
}

/* The guest driver gives an async request room for the reply header only:
 * the work must still run, and the reply must be the header alone. */
TEST(cuda_async_header_only_reply)
{
    struct vcu_cu_memset_req rq;
    unsigned char out[64];
    uint64_t d = 0;
    unsigned int i;
    ut_req_t *t;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, sizeof(out), &d));
    memset(&rq, 0, sizeof(rq));
    rq.dst = d;
    rq.value = 0x5c;
    rq.elem_size = 1;
    rq.width = sizeof(out);
    rq.height = 1;
    rq.flags = VCU_CU_MEMCPY_F_ASYNC;
    t = ut_req_new();
    t->r.resp_cap = sizeof(struct vcu_resp_hdr);
    ASSERT_EQ(VCU_S_OK, tc_run(&c, t, VCU_OP_CU_MEMSET, VCU_REQ_F_ASYNC, &rq, sizeof(rq)));
    ASSERT_EQ(sizeof(struct vcu_resp_hdr), t->r.resp_len);
    ASSERT_EQ(0, ut_resp(t)->payload_len);
    ASSERT_TRUE(t->r.resp == (void *)t->respbuf);
    free(t);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, out, sizeof(out), NULL, 0, 0, 0));
    for (i = 0; i < sizeof(out); i++)
        ASSERT_EQ(0x5c, out[i]);
    tc_close(&c);
    return 0;
}

TEST(cuda_memset)
{
    unsigned char out[256];
    uint64_t d = 0;
    unsigned int i;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0xab, 1, 256, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0x1234, 2, 8, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d + 16, 0xdeadbeef, 4, 4, 1, 0, VCU_CU_MEMCPY_F_ASYNC));
    /* 2D: 3 rows of 4 bytes at pitch 64 from byte 64. */
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d + 64, 0x5a, 1, 4, 3, 64, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, out, sizeof(out), NULL, 0, 0, 0));
    for (i = 0; i < 16; i += 2) {
        ASSERT_EQ(0x34, out[i]);
        ASSERT_EQ(0x12, out[i + 1]);
    }
    for (i = 16; i < 32; i += 4) {
        uint32_t v;

        memcpy(&v, out + i, 4);
        ASSERT_EQ_U64(0xdeadbeef, v);
    }
    for (i = 32; i < 256; i++) {
        unsigned int col = i % 64, row = i / 64;
        int in2d = row >= 1 && row <= 3 && col < 4;

        ASSERT_EQ(in2d ? 0x5a : 0xab, out[i]);
    }
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_memset(&c, d, 0, 3, 8, 1, 0, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_memset(&c, d, 0, 0, 8, 1, 0, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_memset(&c, d, 0, 1, 8, 1, 0, 0x80));
    tc_close(&c);
    return 0;
}

static uint32_t tc_2d(tc_t *c, uint32_t kind, uint64_t dev, uint64_t dpitch, uint64_t spitch,
                      uint64_t width, uint64_t height, void *host, size_t hlen,
                      const size_t *cuts, unsigned int ncuts)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_memcpy2d_req rq;
    struct iovec iov[UT_MAX_IOV];
    size_t off = 0;
    unsigned int i, n = 0;
    uint32_t st, res;

    for (i = 0; i < ncuts; i++) {
        iov[n].iov_base = (char *)host + off;
        iov[n++].iov_len = cuts[i];
        off += cuts[i];
    }
    iov[n].iov_base = (char *)host + off;
    iov[n++].iov_len = hlen - off;
    if (host != NULL)
        ut_req_add_seg_iov(t, kind == VCU_CU_COPY_HTOD ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE,
                           iov, n);
    memset(&rq, 0, sizeof(rq));
    rq.kind = kind;
    rq.dst = dev;
    rq.src = dev;
    rq.dpitch = dpitch;
    rq.spitch = spitch;
    rq.width = width;
    rq.height = height;
    st = tc_run(c, t, VCU_OP_CU_MEMCPY_2D, 0, &rq, sizeof(rq));
    res = ((struct vcu_cu_resp *)ut_resp_payload(t))->result;
    free(t);
    return st != VCU_S_OK ? 0x10000 + st : res;
}

TEST(cuda_memcpy2d)
{
    unsigned char host[10 * 100], back[10 * 100], dev_img[10 * 64];
    static const size_t cuts[] = {33, 250, 1};
    uint64_t d = 0;
    unsigned int r;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64 * 10, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0, 1, 640, 1, 0, 0));
    ut_fill(host, sizeof(host), 3);
    /* HtoD from one iovec: 10 rows of 40 bytes, host pitch 100, device pitch 64. */
    ASSERT_EQ(CUDA_SUCCESS, tc_2d(&c, VCU_CU_COPY_HTOD, d, 64, 100, 40, 10, host, 940, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, dev_img, sizeof(dev_img), NULL, 0, 0, 0));
    for (r = 0; r < 10; r++)
        ASSERT_MEM_EQ(dev_img + r * 64, host + r * 100, 40);
    /* DtoH through the bounce buffer (several iovecs): gaps keep their bytes. */
    memset(back, 0xee, sizeof(back));
    ASSERT_EQ(CUDA_SUCCESS,
              tc_2d(&c, VCU_CU_COPY_DTOH, d, 100, 64, 40, 10, back, 940, cuts, 3));
    for (r = 0; r < 10; r++) {
        ASSERT_MEM_EQ(back + r * 100, host + r * 100, 40);
        if (r < 9)
            ASSERT_EQ(0xee, back[r * 100 + 40]);
    }
    /* Segment one byte short of (height-1)*pitch + width. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_2d(&c, VCU_CU_COPY_HTOD, d, 64, 100, 40, 10, host, 939, NULL, 0));
    /* Overflowing geometry. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_2d(&c, VCU_CU_COPY_DTOH, d, UINT64_MAX / 2, 64, 40, 10, back, 940, NULL, 0));
    /* DtoD takes no segment; bad kind. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_2d(&c, VCU_CU_COPY_DTOD, d, 64, 64, 40, 2, host, 940, NULL, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_2d(&c, 9, d, 64, 64, 40, 2, NULL, 0, NULL, 0));
    tc_close(&c);
    return 0;
}

/* cuMemGetAddressRange_v2 (generated host side): the allocation holding
 * a pointer; none holds an unknown one. */
TEST(cuda_mem_range)
{
    struct vcu_call_cuMemGetAddressRange_v2_req rq;
    struct vcu_call_cuMemGetAddressRange_v2_resp rp;
    uint64_t d = 0;
    tc_t a;

    CHECK(tc_open(&a));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&a, 8192, &d));
    TC_CALL_INIT(rq, cuMemGetAddressRange_v2, 0);
    rq.dptr = d + 100;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&a, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ_U64(d, rp.pbase);
    ASSERT_EQ_U64(8192, rp.psize);
    rq.dptr = 0x1000;
    ASSERT_EQ(CUDA_ERROR_NOT_FOUND, tc_call(&a, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ_U64(0, rp.pbase);
    /* A payload of the wrong size is malformed. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&a, &rq, sizeof(rq) - 8, &rp, sizeof(rp)));
    tc_close(&a);
    return 0;
}

/* cuDeviceGetTexture1DLinearMaxWidth (generated): the driver's answer
 * for a device of the VM; a device past the VM's, values too wide for
 * their types and a short payload refused before the driver sees them. */
TEST(cuda_tex1d_linear_width)
{
    struct vcu_call_cuDeviceGetTexture1DLinearMaxWidth_req rq;
    struct vcu_call_cuDeviceGetTexture1DLinearMaxWidth_resp rp;
    tc_t c;

    CHECK(tc_open(&c));
    TC_CALL_INIT(rq, cuDeviceGetTexture1DLinearMaxWidth, 0);
    rq.format = CU_AD_FORMAT_FLOAT;
    rq.numChannels = 4;
    rq.dev = 0;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ_U64((uint64_t)1 << 28, rp.maxWidthInElements);
    rq.dev = 7;
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    rq.dev = 0;
    rq.numChannels = (uint64_t)1 << 32 | 4;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    rq.numChannels = 4;
    rq.format = (uint64_t)1 << 40 | CU_AD_FORMAT_FLOAT;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    rq.format = CU_AD_FORMAT_FLOAT;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &rq, sizeof(rq) - 8, &rp, sizeof(rp)));
    tc_close(&c);
    return 0;
}

/* cuGraphMemFreeNodeGetParams (generated): a free node's address; an
 * allocation node, a handle of another type or a forged one refused, and
 * CU_GRAPH_MEM_NODE_PARAMS answers allocation nodes alone. */
TEST(cuda_graph_mem_free_params)
{
    struct vcu_call_cuGraphMemFreeNodeGetParams_req rq;
    struct vcu_call_cuGraphMemFreeNodeGetParams_resp rp;
    struct vcu_cu_graph_mem_node_req mq;
    struct vcu_cu_graph_mem_node_resp mr;
    unsigned char buf[sizeof(mq) + 8];
    uint64_t g = 0, an, fn, p;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    memset(&mq, 0, sizeof(mq));
    mq.graph = g;
    mq.kind = VCU_CU_MEM_NODE_ALLOC;
    mq.size = 4096;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_ADD_MEM_NODE, 0, &mq, sizeof(mq), &mr,
                              sizeof(mr)));
    ASSERT_EQ(CUDA_SUCCESS, mr.r.result);
    an = mr.node;
    p = mr.dptr;
    mq.kind = VCU_CU_MEM_NODE_FREE;
    mq.size = 0;
    mq.dptr = p;
    mq.ndeps = 1;
    memcpy(buf, &mq, sizeof(mq));
    memcpy(buf + sizeof(mq), &an, 8);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_ADD_MEM_NODE, 0, buf, sizeof(buf), &mr,
                              sizeof(mr)));
    ASSERT_EQ(CUDA_SUCCESS, mr.r.result);
    fn = mr.node;

    TC_CALL_INIT(rq, cuGraphMemFreeNodeGetParams, 0);
    rq.hNode = fn;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    ASSERT_EQ_U64(p, rp.dptr_out);
    rq.hNode = an;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    rq.hNode = g;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    rq.hNode = fn ^ 0x1234567800000000ull;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &rq, sizeof(rq), &rp, sizeof(rp)));
    /* A payload of the wrong size is malformed. */
    rq.hNode = fn;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &rq, sizeof(rq) - 8, &rp, sizeof(rp)));

    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_MEM_NODE_PARAMS, 0, an, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_u64(&c, VCU_OP_CU_GRAPH_MEM_NODE_PARAMS, 0, fn, NULL));
    tc_close(&c);
    return 0;
}

TEST(cuda_mem_free_foreign)
{
    tc_t a, b;
    uint64_t d = 0;

    CHECK(tc_open(&a));
    b.be = a.be;
    ASSERT_EQ(VCU_S_OK, ut_open(b.be, &b.s));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&a, 4096, &d));
    /* Session b may not free session a's memory. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&b, VCU_OP_CU_MEM_FREE, 0, d, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&a, VCU_OP_CU_MEM_FREE, 0, 0x1234, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_MEM_FREE, 0, d, NULL));
    ut_close(b.be, b.s);
    tc_close(&a);
    return 0;
}

/* An allocation made in the guest's context number ctx (vcu_cu_hdr.ctx). */
static uint32_t tc_alloc_in(tc_t *c, uint32_t dev, uint32_t ctx, uint64_t size, uint64_t *ptr)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.hdr.device = dev;
    rq.hdr.ctx = ctx;
    rq.size = size;
    st = tc_do(c, VCU_OP_CU_MEM_ALLOC, 0, &rq, sizeof(rq), &rp, sizeof(rp));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *ptr = rp.value;
    return rp.r.result;
}

/* A stream (CU_STREAM_CREATE) or event (CU_EVENT_CREATE) made in the
 * guest's context number ctx. */
static uint64_t tc_obj_in(tc_t *c, uint32_t op, uint32_t ctx)
{
    struct vcu_cu_stream_create_req sq;
    struct vcu_cu_u64_req eq;
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    memset(&sq, 0, sizeof(sq));
    memset(&eq, 0, sizeof(eq));
    sq.hdr.ctx = ctx;
    eq.hdr.ctx = ctx;
    st = op == VCU_OP_CU_STREAM_CREATE ? tc_do(c, op, 0, &sq, sizeof(sq), &rp, sizeof(rp))
                                       : tc_do(c, op, 0, &eq, sizeof(eq), &rp, sizeof(rp));
    return st == VCU_S_OK && rp.r.result == CUDA_SUCCESS ? rp.value : 0;
}

/*
 * CU_CTX_DESTROY frees what CU_MEM_ALLOC made in that context number on
 * that device, and nothing else: not the primary context's, not another
 * number's, not another device's, not another session's under the same
 * number; the charge comes back; a freed pointer is unknown after.
 */
TEST(cuda_ctx_destroy_frees)
{
    struct vcu_cu_mem_info_resp mi;
    struct vcu_cu_hdr hd = {0, 0};
    uint64_t p0 = 0, p7a = 0, p7b = 0, p8 = 0, p7d1 = 0, q7 = 0, n = 0, used;
    tc_t a, b;

    CHECK(tc_open(&a));
    b.be = a.be;
    ASSERT_EQ(VCU_S_OK, ut_open(b.be, &b.s));
    ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_MEM_GET_INFO, 0, &hd, sizeof(hd), &mi, sizeof(mi)));
    used = mi.total - mi.free;
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&a, 0, 0, 1 << 20, &p0));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&a, 0, 7, 1 << 20, &p7a));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&a, 0, 7, 3 << 20, &p7b));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&a, 0, 8, 1 << 20, &p8));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&a, 1, 7, 1 << 20, &p7d1));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&b, 0, 7, 1 << 20, &q7));
    /* Number 0 is the primary context's, never destroyed; no segments. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_u64(&a, VCU_OP_CU_CTX_DESTROY, 0, 0, NULL));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_u64(&a, VCU_OP_CU_CTX_DESTROY, 0, 1ull << 32, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_CTX_DESTROY, 0, 7, &n));
    ASSERT_EQ(2, n);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&a, VCU_OP_CU_MEM_FREE, 0, p7a, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&a, VCU_OP_CU_MEM_FREE, 0, p7b, NULL));
    /* Again: nothing left under 7 on device 0. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_CTX_DESTROY, 0, 7, &n));
    ASSERT_EQ(0, n);
    /* The others stand: each frees once. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_MEM_FREE, 0, p0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&b, VCU_OP_CU_MEM_FREE, 0, q7, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_CTX_DESTROY, 1, 7, &n));
    ASSERT_EQ(1, n);
    /* A pointer freed by hand leaves its number: nothing to free twice. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_MEM_FREE, 0, p8, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_CTX_DESTROY, 0, 8, &n));
    ASSERT_EQ(0, n);
    ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_MEM_GET_INFO, 0, &hd, sizeof(hd), &mi, sizeof(mi)));
    ASSERT_EQ(used, mi.total - mi.free);
    ut_close(b.be, b.s);
    tc_close(&a);
    return 0;
}

/*
 * CU_CTX_DESTROY also ends the events, streams and modules (their
 * functions with them) made in that number, on that device: their
 * handles are unknown after; the primary context's, another number's
 * and another session's stand and work.
 */
TEST(cuda_ctx_destroy_objects)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    struct vcu_cu_function_resp f;
    uint64_t s7, e7, m7 = 0, s0, e0, m0 = 0, s8, bs7, n = 0;
    tc_t a, b;

    CHECK(tc_open(&a));
    b.be = a.be;
    ASSERT_EQ(VCU_S_OK, ut_open(b.be, &b.s));
    s7 = tc_obj_in(&a, VCU_OP_CU_STREAM_CREATE, 7);
    e7 = tc_obj_in(&a, VCU_OP_CU_EVENT_CREATE, 7);
    ASSERT_EQ(CUDA_SUCCESS, tc_module_in(&a, 7, TC_PTX, &m7));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(&a, m7, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    memcpy(&f, fr, sizeof(f));
    s0 = tc_obj_in(&a, VCU_OP_CU_STREAM_CREATE, 0);
    e0 = tc_obj_in(&a, VCU_OP_CU_EVENT_CREATE, 0);
    ASSERT_EQ(CUDA_SUCCESS, tc_module_in(&a, 0, TC_PTX, &m0));
    s8 = tc_obj_in(&a, VCU_OP_CU_STREAM_CREATE, 8);
    bs7 = tc_obj_in(&b, VCU_OP_CU_STREAM_CREATE, 7);
    ASSERT_TRUE(s7 != 0 && e7 != 0 && s0 != 0 && e0 != 0 && s8 != 0 && bs7 != 0);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_CTX_DESTROY, 0, 7, &n));
    ASSERT_EQ(3, n);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&a, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s7, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&a, VCU_OP_CU_EVENT_DESTROY, 0, e7, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&a, VCU_OP_CU_MODULE_UNLOAD, 0, m7, NULL));
    {
        struct vcu_cu_u64_req fq = {{0, 0}, f.function};
        struct vcu_cu_func_attrs_resp fa;

        ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_FUNC_GET_ATTRS, 0, &fq, sizeof(fq), &fa, sizeof(fa)));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, fa.r.result);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s8, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&b, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, bs7, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_EVENT_DESTROY, 0, e0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_MODULE_UNLOAD, 0, m0, NULL));
    ut_close(b.be, b.s);
    tc_close(&a);
    return 0;
}

/* ---- handles ------------------------------------------------------------ */

static uint64_t tc_stream_new(tc_t *c)
{
    struct vcu_cu_stream_create_req sq = {{0, 0}, 0, 0};
    struct vcu_cu_u64_resp sr;

    if (tc_do(c, VCU_OP_CU_STREAM_CREATE, 0, &sq, sizeof(sq), &sr, sizeof(sr)) != VCU_S_OK ||
        sr.r.result != CUDA_SUCCESS)
        return 0;
    return sr.value;
}

TEST(cuda_handles_invalid)
{
    struct vcu_cu_attr_req aq;
    struct vcu_cu_u64_resp rp;
    uint64_t s, ev = 0, g = 0, pool = 0, dead_s, dead_ev, dead_g, forged[4];
    unsigned int i;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEMPOOL_GET_DEFAULT, 0, 0, &pool));
    dead_s = tc_stream_new(&c);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_DESTROY, 0, dead_s, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &dead_ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_DESTROY, 0, dead_ev, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &dead_g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, dead_g, NULL));

    forged[0] = 2;                  /* below VCU_CU_HANDLE_MIN, not a default stream */
    forged[1] = 0x1234;
    forged[2] = s ^ (1ull << 32);   /* right index, wrong generation */
    forged[3] = UINT64_MAX;
    for (i = 0; i < 4; i++) {
        uint64_t f = forged[i];

        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, f, NULL));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_query(&c, VCU_CALL_cuEventQuery, 0, f));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_query(&c, VCU_CALL_cuStreamQuery, 0, f));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, f, NULL));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_FUNC_GET_ATTRS, 0, f, NULL));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, f, NULL));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, f, NULL));
    }
    /* Stale. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_query(&c, VCU_CALL_cuStreamQuery, 0, dead_s));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_STREAM_DESTROY, 0, dead_s, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_EVENT_SYNCHRONIZE, 0, dead_ev, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_CLONE, 0, dead_g, NULL));
    /* Wrong type: each live handle used as every other kind. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_query(&c, VCU_CALL_cuEventQuery, 0, s));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_query(&c, VCU_CALL_cuStreamQuery, 0, ev));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, pool, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, g, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_FUNC_GET_ATTRS, 0, ev, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, g, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_EVENT_RECORD, ev, ev, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_STREAM_WAIT_EVENT, s, s, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, g, 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_GRAPH_INSTANTIATE, s, 0, 0, NULL, 0));
    {
        struct vcu_call_cuEventElapsedTime_v2_req eq;
        struct vcu_call_cuEventElapsedTime_v2_resp er;

        TC_CALL_INIT(eq, cuEventElapsedTime_v2, 0);
        eq.hStart = ev;
        eq.hEnd = s;
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &eq, sizeof(eq), &er, sizeof(er)));
    }
    memset(&aq, 0, sizeof(aq));
    aq.handle = s;
    aq.attr = CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMPOOL_GET_ATTR, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.r.result);
    /* A graph node handle that is a graph handle, as a dependency. */
    {
        struct {
            struct vcu_cu_graph_node_req r;
            uint64_t dep;
        } nq;

        memset(&nq, 0, sizeof(nq));
        nq.r.graph = g;
        nq.r.kind = VCU_CU_NODE_EMPTY;
        nq.r.ndeps = 1;
        nq.dep = g;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq), &rp, sizeof(rp)));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.r.result);
        nq.r.graph = dead_g;
        nq.r.ndeps = 0;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq.r), &rp, sizeof(rp)));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.r.result);
    }
    /* The live ones still work. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, VCU_CU_STREAM_LEGACY, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, VCU_CU_STREAM_PER_THREAD, NULL));
    /* Handles are per session. */
    {
        tc_t d = {c.be, 0, ""};

        ASSERT_EQ(VCU_S_OK, ut_open(d.be, &d.s));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&d, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
        ut_close(d.be, d.s);
    }
    tc_close(&c);
    return 0;
}

TEST(cuda_module_unload_kills_funcs)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    struct vcu_cu_function_resp *f = (struct vcu_cu_function_resp *)fr;
    uint64_t mod = 0;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(&c, mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_FUNC_GET_ATTRS, 0, f->function, NULL));
    /* A name the module does not have. */
    ASSERT_EQ(CUDA_ERROR_NOT_FOUND, tc_func(&c, mod, "nope", 4, 0, fr + 256, 64));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, mod, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_FUNC_GET_ATTRS, 0, f->function, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, mod, NULL));
    tc_close(&c);
    return 0;
}

/* ---- modules and launches ----------------------------------------------- */

/* cuOccupancyAvailableDynamicSMemPerBlock (a CU_CALL): the driver's
 * answer for the function; bad requests and handles refused. */
TEST(cuda_occupancy_avail_smem)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    struct vcu_cu_function_resp f;
    struct vcu_call_cuOccupancyAvailableDynamicSMemPerBlock_req q;
    struct vcu_call_cuOccupancyAvailableDynamicSMemPerBlock_resp one, two;
    uint64_t mod = 0;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(&c, mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    memcpy(&f, fr, sizeof(f));
    TC_CALL_INIT(q, cuOccupancyAvailableDynamicSMemPerBlock, 0);
    q.func = f.function;
    q.blockSize = 128;
    q.numBlocks = 1;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &q, sizeof(q), &one, sizeof(one)));
    q.numBlocks = 16;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &q, sizeof(q), &two, sizeof(two)));
    ASSERT_GT(one.dynamicSmemSize, 0);
    ASSERT_GT(one.dynamicSmemSize, two.dynamicSmemSize);    /* sixteen blocks share the SM */
    q.numBlocks = 0;                        /* no block */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_call(&c, &q, sizeof(q), &two, sizeof(two)));
    q.numBlocks = (uint64_t)(int64_t)-1;    /* an int, the driver's to refuse */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_call(&c, &q, sizeof(q), &two, sizeof(two)));
    q.numBlocks = 0x80000000u;              /* not an int */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &q, sizeof(q), &two, sizeof(two)));
    q.numBlocks = 0xffffffffu;              /* -1 not sign-extended */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &q, sizeof(q), &two, sizeof(two)));
    q.numBlocks = 1;
    q.func = mod;                           /* not a function */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &q, sizeof(q), &two, sizeof(two)));
    tc_close(&c);
    return 0;
}

/* Loads the vector_add twin; *fn its handle. */
static int tc_vadd(tc_t *c, uint64_t *fn)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    struct vcu_cu_function_resp f;
    struct vcu_cu_param p[4];
    uint64_t mod = 0;

    ASSERT_EQ(CUDA_SUCCESS, tc_module(c, TC_PTX, &mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(c, mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    memcpy(&f, fr, sizeof(f));
    ASSERT_EQ(4, f.nparams);
    ASSERT_EQ(28, f.param_bytes);
    memcpy(p, fr + sizeof(f), sizeof(p));
    ASSERT_EQ(0, p[0].offset);
    ASSERT_EQ(8, p[0].size);
    ASSERT_EQ(16, p[2].offset);
    ASSERT_EQ(24, p[3].offset);
    ASSERT_EQ(4, p[3].size);
    ASSERT_GE(f.function, VCU_CU_HANDLE_MIN);
    *fn = f.function;
    return 0;
}

TEST(cuda_launch_vector_add)
{
    enum { N = 1000 };
    float *a = malloc(N * 4), *b = malloc(N * 4), *out = malloc(N * 4);
    uint64_t fn = 0, da = 0, db = 0, dc = 0;
    unsigned char params[32];
    int32_t n = N - 3;              /* the last 3 stay as memset left them */
    int i;
    tc_t c;

    CHECK(tc_open(&c));
    CHECK(tc_vadd(&c, &fn));
    for (i = 0; i < N; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = (float)(N - i);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, N * 4, &da));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, N * 4, &db));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, N * 4, &dc));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, da, a, N * 4, NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, db, b, N * 4, NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, dc, 0, 4, N, 1, 0, 0));
    memcpy(params + 0, &da, 8);
    memcpy(params + 8, &db, 8);
    memcpy(params + 16, &dc, 8);
    memcpy(params + 24, &n, 4);
    ASSERT_EQ(CUDA_SUCCESS, tc_launch(&c, fn, 0, (N + 127) / 128, 128, params, 28, 28));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, dc, out, N * 4, NULL, 0, 0, 0));
    for (i = 0; i < N; i++)
        ASSERT_TRUE(out[i] == (i < N - 3 ? a[i] + b[i] : 0.0f));
    free(a);
    free(b);
    free(out);
    tc_close(&c);
    return 0;
}

TEST(cuda_launch_param_bytes)
{
    unsigned char params[64];
    uint64_t fn = 0;
    tc_t c;

    memset(params, 0, sizeof(params));
    CHECK(tc_open(&c));
    CHECK(tc_vadd(&c, &fn));
    /* Not what the function takes. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_launch(&c, fn, 0, 1, 1, params, 24, 24));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_launch(&c, fn, 0, 1, 1, params, 32, 32));
    /* More than the payload holds, more than the limit. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_launch(&c, fn, 0, 1, 1, params, 20, 28));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_launch(&c, fn, 0, 1, 1, params, 28, 40000));
    /* Bad function and stream handles. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_launch(&c, fn + 1, 0, 1, 1, params, 28, 28));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_launch(&c, fn, 77, 1, 1, params, 28, 28));
    tc_close(&c);
    return 0;
}

/* ---- streams and events ------------------------------------------------- */

TEST(cuda_events_elapsed)
{
    struct vcu_call_cuEventElapsedTime_v2_req eq;
    struct vcu_call_cuEventElapsedTime_v2_resp er;
    uint64_t e1 = 0, e2 = 0, s;
    uint32_t bits;
    float ms = -1;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, CU_EVENT_DEFAULT, &e1));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, CU_EVENT_BLOCKING_SYNC, &e2));
    ASSERT_NE(e1, e2);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_EVENT_RECORD, e1, s, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_EVENT_RECORD, e2, s, 0, NULL, 0));
    /* Flags: CU_EVENT_RECORD_EXTERNAL (the driver's to judge: outside a
     * capture it refuses it) and nothing else, in all 64 bits (a driver
     * taking 32 would see 0). */
    ASSERT_EQ(CUDA_ERROR_ILLEGAL_STATE, tc_pair(&c, VCU_OP_CU_EVENT_RECORD, e2, s,
                                                CU_EVENT_RECORD_EXTERNAL, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_pair(&c, VCU_OP_CU_EVENT_RECORD, e2, s, 2, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_pair(&c, VCU_OP_CU_EVENT_RECORD, e2, s, 1ull << 32, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_SYNCHRONIZE, 0, e2, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_query(&c, VCU_CALL_cuEventQuery, 0, e2));
    TC_CALL_INIT(eq, cuEventElapsedTime_v2, 0);
    eq.hStart = e1;
    eq.hEnd = e2;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &eq, sizeof(eq), &er, sizeof(er)));
    ASSERT_LE(er.pMilliseconds, UINT32_MAX);
    bits = (uint32_t)er.pMilliseconds;
    memcpy(&ms, &bits, 4);
    ASSERT_TRUE(ms >= 0.0f && ms < 10000.0f);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_WAIT_EVENT, 0, e1, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_DESTROY, 0, e1, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &eq, sizeof(eq), &er, sizeof(er)));
    tc_close(&c);
    return 0;
}

TEST(cuda_streams)
{
    struct vcu_cu_stream_create_req sq = {{0, 0}, CU_STREAM_NON_BLOCKING, 0};
    struct vcu_call_cuCtxGetStreamPriorityRange_req pq;
    struct vcu_call_cuCtxGetStreamPriorityRange_resp pr;
    struct vcu_cu_u64_resp sr;
    uint64_t s[3];
    int i;
    tc_t c;

    CHECK(tc_open(&c));
    TC_CALL_INIT(pq, cuCtxGetStreamPriorityRange, 0);
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &pq, sizeof(pq), &pr, sizeof(pr)));
    ASSERT_LE((int64_t)pr.greatestPriority, (int64_t)pr.leastPriority);
    for (i = 0; i < 3; i++) {
        sq.priority = (uint32_t)pr.greatestPriority;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_CREATE, 0, &sq, sizeof(sq), &sr, sizeof(sr)));
        ASSERT_EQ(CUDA_SUCCESS, sr.r.result);
        s[i] = sr.value;
        ASSERT_GE(s[i], VCU_CU_HANDLE_MIN);
    }
    ASSERT_NE(s[0], s[1]);
    for (i = 0; i < 3; i++) {
        ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s[i], NULL));
        ASSERT_EQ(CUDA_SUCCESS, tc_query(&c, VCU_CALL_cuStreamQuery, 0, s[i]));
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_DESTROY, 0, s[1], NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s[1], NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s[2], NULL));
    /* s[0] and s[2] are left for session close to free (LeakSanitizer). */
    tc_close(&c);
    return 0;
}

TEST(cuda_deferred_error)
{
    struct vcu_cu_u64_req rq = {{0, 0}, 0xbad000};
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;
    tc_t c;

    CHECK(tc_open(&c));
    /* Async failures: the first one is kept, the second dropped. */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_FREE, VCU_REQ_F_ASYNC, &rq, sizeof(rq), &r, sizeof(r)));
    ASSERT_EQ(0, r.deferred);
    rq.value = 5;                   /* not a stream handle */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, VCU_REQ_F_ASYNC, &rq, sizeof(rq),
                              &r, sizeof(r)));
    ASSERT_EQ(0, r.deferred);
    /* Reported once, by the next synchronous reply. */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, r.deferred);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(0, r.deferred);
    /* CU_GET_DEFERRED_ERROR, and a malformed async request. */
    {
        struct vcu_call_cuEventQuery_req eq;

        TC_CALL_INIT(eq, cuEventQuery, 0);
        eq.hEvent = 6;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALL, VCU_REQ_F_ASYNC, &eq, sizeof(eq), &r, sizeof(r)));
    }
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GET_DEFERRED_ERROR, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.result);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GET_DEFERRED_ERROR, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    {
        struct vcu_cu_memset_req mq;

        memset(&mq, 0, sizeof(mq));
        mq.elem_size = 3;
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_MEMSET, VCU_REQ_F_ASYNC, &mq, sizeof(mq), NULL, 0));
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, r.deferred);
    }
    tc_close(&c);
    return 0;
}

/* ---- CU_BATCH ------------------------------------------------------------ */

typedef struct tc_batch_s {
    unsigned char b[VCU_CU_BATCH_BYTES + 64];
    size_t len;
} tc_batch_t;

static void tc_batch_init(tc_batch_t *b)
{
    memset(b, 0, sizeof(*b));
    b->len = sizeof(struct vcu_cu_batch_req);
}

/* Appends an entry of len payload bytes (p may be shorter: zeros). */
static void tc_batch_add(tc_batch_t *b, uint32_t op, const void *p, size_t plen, uint32_t len)
{
    struct vcu_cu_batch_entry e = {op, len};

    memcpy(b->b + b->len, &e, sizeof(e));
    b->len += sizeof(e);
    memcpy(b->b + b->len, p, plen < len ? plen : len);
    b->len += ((size_t)len + 7) & ~(size_t)7;
}

static void tc_batch_memset(tc_batch_t *b, uint64_t dst, uint32_t value, uint64_t width)
{
    struct vcu_cu_memset_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.dst = dst;
    rq.value = value;
    rq.elem_size = 1;
    rq.width = width;
    rq.height = 1;
    rq.flags = VCU_CU_MEMCPY_F_ASYNC;
    tc_batch_add(b, VCU_OP_CU_MEMSET, &rq, sizeof(rq), sizeof(rq));
}

/* Sends the batch with count in its header; wire status, reply in *r. */
static uint32_t tc_batch_send(tc_t *c, tc_batch_t *b, uint32_t count, uint32_t flags,
                              struct vcu_cu_resp *r)
{
    struct vcu_cu_batch_req h;

    memset(&h, 0, sizeof(h));
    h.count = count;
    memcpy(b->b, &h, sizeof(h));
    return tc_do(c, VCU_OP_CU_BATCH, flags, b->b, (uint32_t)b->len, r, sizeof(*r));
}

static int tc_bytes_are(tc_t *c, uint64_t d, size_t off, size_t n, unsigned char v)
{
    unsigned char out[256];
    size_t i;

    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, d, out, sizeof(out), NULL, 0, 0, 0));
    for (i = off; i < off + n; i++)
        if (out[i] != v) {
            fprintf(stderr, "byte %zu is 0x%02x, not 0x%02x\n", i, out[i], v);
            return -1;
        }
    return 0;
}

/* Entries run in order, as the same requests sent alone and async: a
 * failing one is the deferred error and the ones after it still run. */
TEST(cuda_batch)
{
    struct vcu_cu_pair_req wq = {{0, 0}, VCU_CU_STREAM_LEGACY, 0xbad0, 0};
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;
    tc_batch_t *b = malloc(sizeof(*b));
    uint64_t d = 0;
    unsigned int i;
    tc_t c;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0, 1, 256, 1, 0, 0));

    tc_batch_init(b);
    tc_batch_memset(b, d, 0x11, 16);
    tc_batch_memset(b, d + 16, 0x22, 16);
    tc_batch_memset(b, d, 0x33, 8);             /* after the first: wins */
    ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, 3, VCU_REQ_F_ASYNC, &r));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(0, r.deferred);
    CHECK(tc_bytes_are(&c, d, 0, 8, 0x33));
    CHECK(tc_bytes_are(&c, d, 8, 8, 0x11));
    CHECK(tc_bytes_are(&c, d, 16, 16, 0x22));

    /* A stream wait on a handle that is no event, between two memsets. */
    tc_batch_init(b);
    tc_batch_memset(b, d + 32, 0x44, 8);
    tc_batch_add(b, VCU_OP_CU_STREAM_WAIT_EVENT, &wq, sizeof(wq), sizeof(wq));
    tc_batch_memset(b, d + 40, 0x55, 8);
    ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, 3, VCU_REQ_F_ASYNC, &r));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.deferred);
    CHECK(tc_bytes_are(&c, d, 32, 8, 0x44));
    CHECK(tc_bytes_are(&c, d, 40, 8, 0x55));

    /* Sent synchronously, its own reply carries the entries' failure. */
    tc_batch_init(b);
    tc_batch_add(b, VCU_OP_CU_STREAM_WAIT_EVENT, &wq, sizeof(wq), sizeof(wq));
    ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, 1, 0, &r));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.deferred);

    /* As many entries as a batch may hold, each a launch's worth. */
    tc_batch_init(b);
    for (i = 0; i < VCU_CU_BATCH_MAX; i++)
        tc_batch_memset(b, d + 48 + i % 16, i, 1);  /* the last round wins */
    ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, VCU_CU_BATCH_MAX, 0, &r));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(0, r.deferred);
    for (i = 0; i < 16; i++)
        CHECK(tc_bytes_are(&c, d, 48 + i, 1, (unsigned char)(VCU_CU_BATCH_MAX - 16 + i)));
    tc_close(&c);
    free(b);
    return 0;
}

/* ---- runs of launches as graphs ----------------------------------------- */

#define TC_BT "_Z7bt_stepPii"
#define TC_GADD "_Z5g_addPiii"
#define TC_RUN_PTX "//\n.version 8.0\n.target sm_90\n.visible .entry " TC_BT "()\n{\n}\n" \
                   ".visible .entry " TC_GADD "()\n{\n}\n"

/* The stand-in's graph counters: launched, instantiated, updated. */
static void tc_graph_counts(unsigned long long out[3])
{
    void (*counts)(unsigned long long[3]) = NULL;
    void *dl = dlopen(getenv("VCU_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD);

    out[0] = out[1] = out[2] = ~0ull;
    if (dl == NULL)
        return;
    *(void **)&counts = dlsym(dl, "cuFakeGraphCounts");
    if (counts != NULL)
        counts(out);
    dlclose(dl);
}

static uint64_t tc_fn(tc_t *c, uint64_t mod, const char *name)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];

    if (tc_func(c, mod, name, (uint32_t)strlen(name), 0, fr, sizeof(fr)) != CUDA_SUCCESS)
        return 0;
    return ((struct vcu_cu_function_resp *)fr)->function;
}

/* Module mod's function name, named through device dev (the request's
 * device); 0 on failure. */
static uint64_t tc_fn_dev(tc_t *c, uint32_t dev, uint64_t mod, const char *name)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    unsigned char p[sizeof(struct vcu_cu_name_req) + 128];
    struct vcu_cu_name_req nq;
    size_t n = strlen(name) < 128 ? strlen(name) : 128;

    memset(&nq, 0, sizeof(nq));
    nq.hdr.device = dev;
    nq.module = mod;
    nq.name_len = (uint32_t)n;
    memcpy(p, &nq, sizeof(nq));
    memcpy(p + sizeof(nq), name, n);
    if (tc_do(c, VCU_OP_CU_MODULE_GET_FUNCTION, 0, p, (uint32_t)(sizeof(nq) + n), fr,
              sizeof(fr)) != VCU_S_OK ||
        ((struct vcu_cu_resp *)fr)->result != CUDA_SUCCESS)
        return 0;
    return ((struct vcu_cu_function_resp *)fr)->function;
}

/* A new stream on device dev; 0 on failure. */
static uint64_t tc_stream_dev(tc_t *c, uint32_t dev)
{
    struct vcu_cu_stream_create_req sq;
    struct vcu_cu_u64_resp sr;

    memset(&sq, 0, sizeof(sq));
    sq.hdr.device = dev;
    if (tc_do(c, VCU_OP_CU_STREAM_CREATE, 0, &sq, sizeof(sq), &sr, sizeof(sr)) != VCU_S_OK ||
        sr.r.result != CUDA_SUCCESS)
        return 0;
    return sr.value;
}

/* A launch entry on device dev: fn(d, a, b) with 1 block of block
 * threads; bt_step's int is a, g_add's (n, add) are (a, b). */
static void tc_batch_launch_dev(tc_batch_t *b, uint32_t dev, uint64_t fn, uint64_t stream,
                                uint32_t block, uint64_t d, int32_t a, int32_t b2, uint32_t pbytes)
{
    unsigned char p[sizeof(struct vcu_cu_launch_req) + 16];
    struct vcu_cu_launch_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.hdr.device = dev;
    rq.function = fn;
    rq.stream = stream;
    rq.grid[0] = rq.grid[1] = rq.grid[2] = 1;
    rq.block[0] = block;
    rq.block[1] = rq.block[2] = 1;
    rq.param_bytes = pbytes;
    memcpy(p, &rq, sizeof(rq));
    memcpy(p + sizeof(rq), &d, 8);
    memcpy(p + sizeof(rq) + 8, &a, 4);
    memcpy(p + sizeof(rq) + 12, &b2, 4);
    tc_batch_add(b, VCU_OP_CU_LAUNCH, p, sizeof(rq) + pbytes, (uint32_t)(sizeof(rq) + pbytes));
}

static void tc_batch_launch(tc_batch_t *b, uint64_t fn, uint64_t stream, uint32_t block,
                            uint64_t d, int32_t a, int32_t b2, uint32_t pbytes)
{
    tc_batch_launch_dev(b, 0, fn, stream, block, d, a, b2, pbytes);
}

/* Batches of bt_step(d, i), i counting up from *next: in order, d[0]
 * ends at *next and d[1] (what a launch out of order adds to) stays 0. */
static uint32_t tc_bt_batch(tc_t *c, tc_batch_t *b, uint64_t fn, uint64_t stream, uint64_t d,
                            uint32_t n, int32_t *next)
{
    struct vcu_cu_resp r;
    uint32_t i;

    tc_batch_init(b);
    for (i = 0; i < n; i++)
        tc_batch_launch(b, fn, stream, 1, d, (*next)++, 0, 12);
    return tc_batch_send(c, b, n, VCU_REQ_F_ASYNC, &r);
}

/* A session (graphs on) with the run kernels' module, kernel's handle in
 * *fn and 64 zeroed bytes of device memory at *d. */
static int tc_run_open(tc_t *c, const char *kernel, uint64_t *mod, uint64_t *fn, uint64_t *d)
{
    unsetenv("VCU_LAUNCH_GRAPHS");
    CHECK(tc_open(c));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(c, TC_RUN_PTX, mod));
    *fn = tc_fn(c, *mod, kernel);
    ASSERT_NE(0, *fn);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, 64, d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, *d, 0, 1, 64, 1, 0, 0));
    return 0;
}

static int tc_sync_ok(tc_t *c)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;

    ASSERT_EQ(VCU_S_OK, tc_do(c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(0, r.deferred);
    return 0;
}

/*
 * A batch's run of launches into one stream goes as one graph from the
 * second such run on (the first is issued launch by launch), updated for
 * each: the launches still run once each, in order; shorter runs, other
 * streams' launches between them and VCU_LAUNCH_GRAPHS=0 keep them apart.
 */
TEST(cuda_batch_graph_runs)
{
    unsigned long long c0[3], c1[3];
    tc_batch_t *b = malloc(sizeof(*b));
    int32_t h[2], next = 0;
    uint64_t mod = 0, fn, d = 0, s;
    unsigned int k;
    tc_t c;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_run_open(&c, TC_BT, &mod, &fn, &d));
    tc_graph_counts(c0);
    ASSERT_NE(~0ull, c0[0]);
    for (k = 0; k < 4; k++)
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, VCU_CU_BATCH_MAX, &next));
    CHECK(tc_sync_ok(&c));
    tc_graph_counts(c1);
    /* One run seen, then instantiated once and updated twice. */
    ASSERT_EQ(3, c1[0] - c0[0]);
    ASSERT_EQ(1, c1[1] - c0[1]);
    ASSERT_EQ(2, c1[2] - c0[2]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    ASSERT_EQ(next, h[0]);
    ASSERT_EQ(0, h[1]);

    /* Runs shorter than the threshold, and runs broken by memsets into
     * shorter ones: launch by launch, still in order. */
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    tc_graph_counts(c0);
    for (k = 0; k < 3; k++)
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, 7, &next));
    for (k = 0; k < 3; k++) {
        struct vcu_cu_resp r;
        unsigned int i;

        tc_batch_init(b);
        for (i = 0; i < 12; i++) {
            tc_batch_launch(b, fn, VCU_CU_STREAM_LEGACY, 1, d, next++, 0, 12);
            if (i % 6 == 5)
                tc_batch_memset(b, d + 32, i, 8);
        }
        ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, 14, VCU_REQ_F_ASYNC, &r));
    }
    CHECK(tc_sync_ok(&c));
    tc_graph_counts(c1);
    ASSERT_EQ(0, c1[0] - c0[0]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    ASSERT_EQ(next, h[0]);
    ASSERT_EQ(0, h[1]);

    /* The same runs on two streams: kept apart (each its own graph). */
    tc_graph_counts(c0);
    for (k = 0; k < 3; k++) {
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, 16, &next));
        CHECK(tc_sync_ok(&c));
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, s, d, 16, &next));
        CHECK(tc_sync_ok(&c));
    }
    tc_graph_counts(c1);
    ASSERT_EQ(4, c1[0] - c0[0]);
    ASSERT_EQ(2, c1[1] - c0[1]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    ASSERT_EQ(next, h[0]);
    ASSERT_EQ(0, h[1]);
    tc_close(&c);

    /* Turned off: the same batches, launch by launch. */
    setenv("VCU_LAUNCH_GRAPHS", "0", 1);
    CHECK(tc_open(&c));
    unsetenv("VCU_LAUNCH_GRAPHS");
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_RUN_PTX, &mod));
    fn = tc_fn(&c, mod, TC_BT);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0, 1, 64, 1, 0, 0));
    next = 0;
    tc_graph_counts(c0);
    for (k = 0; k < 4; k++)
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, VCU_CU_BATCH_MAX, &next));
    CHECK(tc_sync_ok(&c));
    tc_graph_counts(c1);
    ASSERT_EQ(0, c1[0] - c0[0]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    ASSERT_EQ(next, h[0]);
    tc_close(&c);
    free(b);
    return 0;
}

/*
 * A run with a launch the driver refuses (too many threads) after a run
 * of its shape was seen: no graph runs; the other launches run once
 * each, and the refusal is the deferred error, as launch by launch.
 */
TEST(cuda_batch_graph_refused)
{
    unsigned long long c0[3], c1[3];
    tc_batch_t *b = malloc(sizeof(*b));
    struct vcu_cu_hdr hd = {0, 0};
    struct vcu_cu_resp r;
    int32_t h[4];
    uint64_t mod = 0, fn, d = 0;
    unsigned int k, i;
    tc_t c;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_run_open(&c, TC_GADD, &mod, &fn, &d));
    tc_graph_counts(c0);
    for (k = 0; k < 2; k++) {
        tc_batch_init(b);
        for (i = 0; i < 32; i++)
            tc_batch_launch(b, fn, VCU_CU_STREAM_LEGACY, k == 1 && i == 10 ? 4096 : 4, d, 4, 1,
                            16);
        ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, 32, VCU_REQ_F_ASYNC, &r));
    }
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &hd, sizeof(hd), &r, sizeof(r)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, r.deferred);
    tc_graph_counts(c1);
    ASSERT_EQ(0, c1[0] - c0[0]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    for (i = 0; i < 4; i++)
        ASSERT_EQ(63, h[i]);
    /* The next such run, all valid, goes as a graph. */
    tc_batch_init(b);
    for (i = 0; i < 32; i++)
        tc_batch_launch(b, fn, VCU_CU_STREAM_LEGACY, 4, d, 4, 1, 16);
    ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, 32, VCU_REQ_F_ASYNC, &r));
    CHECK(tc_sync_ok(&c));
    tc_graph_counts(c1);
    ASSERT_EQ(1, c1[0] - c0[0]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    for (i = 0; i < 4; i++)
        ASSERT_EQ(95, h[i]);
    tc_close(&c);
    free(b);
    return 0;
}

/*
 * Runs whose stream, or whose function's module, is of another device
 * than the launches name: the driver refuses each such launch, and a
 * graph must not run them elsewhere instead.
 */
TEST(cuda_batch_graph_other_device)
{
    unsigned long long c0[3], c1[3];
    tc_batch_t *b = malloc(sizeof(*b));
    struct vcu_cu_hdr hd = {0, 0};
    struct vcu_cu_resp r;
    uint64_t mod = 0, fn, fn1, d = 0, s1;
    unsigned int k, i, v;
    tc_t c;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_run_open(&c, TC_BT, &mod, &fn, &d));
    /* The device-0 module's function, named through device 1. */
    fn1 = tc_fn_dev(&c, 1, mod, TC_BT);
    ASSERT_NE(0, fn1);
    s1 = tc_stream_dev(&c, 1);
    ASSERT_NE(0, s1);
    /* v 0: device 0's launches into device 1's stream; v 1: device 1's
     * launches of the device-0 function into it. */
    for (v = 0; v < 2; v++) {
        tc_graph_counts(c0);
        for (k = 0; k < 3; k++) {
            tc_batch_init(b);
            for (i = 0; i < 16; i++)
                tc_batch_launch_dev(b, v, v ? fn1 : fn, s1, 1, d, (int32_t)i, 0, 12);
            ASSERT_EQ(VCU_S_OK, tc_batch_send(&c, b, 16, VCU_REQ_F_ASYNC, &r));
        }
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &hd, sizeof(hd), &r, sizeof(r)));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.deferred);
        tc_graph_counts(c1);
        ASSERT_EQ(0, c1[0] - c0[0]);
    }
    tc_close(&c);
    free(b);
    return 0;
}

/*
 * A graph the driver refuses to update: that run and the next 64 of its
 * shape go launch by launch (still in order), then it is made anew.
 */
TEST(cuda_batch_graph_backoff)
{
    unsigned long long c0[3], c1[3];
    tc_batch_t *b = malloc(sizeof(*b));
    int32_t h[2], next = 0;
    uint64_t mod = 0, fn, d = 0;
    unsigned int k;
    tc_t c;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_run_open(&c, TC_BT, &mod, &fn, &d));
    tc_graph_counts(c0);
    for (k = 0; k < 2; k++)
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, 8, &next));
    CHECK(tc_sync_ok(&c));
    tc_graph_counts(c1);
    ASSERT_EQ(1, c1[0] - c0[0]);
    setenv("VCU_FAKECUDA_GRAPH_UPDATE", "fail", 1);
    ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, 8, &next));
    CHECK(tc_sync_ok(&c));
    unsetenv("VCU_FAKECUDA_GRAPH_UPDATE");
    for (k = 0; k < 64; k++)
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, 8, &next));
    CHECK(tc_sync_ok(&c));
    tc_graph_counts(c1);
    ASSERT_EQ(1, c1[0] - c0[0]);
    ASSERT_EQ(1, c1[1] - c0[1]);
    ASSERT_EQ(0, c1[2] - c0[2]);
    ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, VCU_CU_STREAM_LEGACY, d, 8, &next));
    CHECK(tc_sync_ok(&c));
    tc_graph_counts(c1);
    ASSERT_EQ(2, c1[0] - c0[0]);
    ASSERT_EQ(2, c1[1] - c0[1]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    ASSERT_EQ(next, h[0]);
    ASSERT_EQ(0, h[1]);
    tc_close(&c);
    free(b);
    return 0;
}

/*
 * Another session's runs naming this session's function (and device
 * memory): refused as its launches alone would be, never made a graph,
 * and this session's memory stays as it was.
 */
TEST(cuda_batch_graph_other_session)
{
    unsigned long long c0[3], c1[3];
    tc_batch_t *b = malloc(sizeof(*b));
    struct vcu_cu_hdr hd = {0, 0};
    struct vcu_cu_resp r;
    uint64_t mod = 0, fn, d = 0, s2 = 0;
    unsigned int k, i;
    int32_t h[16];
    tc_t c, c2;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_run_open(&c, TC_GADD, &mod, &fn, &d));
    ASSERT_EQ(VCU_S_OK, ut_open(c.be, &s2));
    c2.be = c.be;
    c2.s = s2;
    tc_graph_counts(c0);
    for (k = 0; k < 3; k++) {
        tc_batch_init(b);
        for (i = 0; i < 16; i++)
            tc_batch_launch(b, fn, VCU_CU_STREAM_LEGACY, 4, d, 4, 1, 16);
        ASSERT_EQ(VCU_S_OK, tc_batch_send(&c2, b, 16, VCU_REQ_F_ASYNC, &r));
    }
    ASSERT_EQ(VCU_S_OK, tc_do(&c2, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &hd, sizeof(hd), &r, sizeof(r)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.deferred);
    tc_graph_counts(c1);
    ASSERT_EQ(0, c1[0] - c0[0]);
    ASSERT_EQ(0, c1[1] - c0[1]);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, h, sizeof(h), NULL, 0, 0, 0));
    for (i = 0; i < 16; i++)
        ASSERT_EQ(0, h[i]);
    ut_close(c.be, s2);
    tc_close(&c);
    free(b);
    return 0;
}

/*
 * While a stream captures, its launches are captured one node each, never
 * launched as a graph (which would be captured as one child-graph node).
 */
TEST(cuda_batch_graph_capture)
{
    unsigned long long c0[3], c1[3];
    tc_batch_t *b = malloc(sizeof(*b));
    uint64_t mod = 0, fn, d = 0, s, g = 0, cnt = 0;
    int32_t next = 0;
    unsigned int k;
    tc_t c;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_run_open(&c, TC_BT, &mod, &fn, &d));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    tc_graph_counts(c0);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    for (k = 0; k < 3; k++)
        ASSERT_EQ(VCU_S_OK, tc_bt_batch(&c, b, fn, s, d, 16, &next));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(48, cnt);
    tc_graph_counts(c1);
    ASSERT_EQ(0, c1[0] - c0[0]);
    tc_close(&c);
    free(b);
    return 0;
}

/*
 * Malformed batches: refused whole, before any entry runs (the first
 * entry of each would set 8 bytes to 0x77); sent async, the refusal is
 * the deferred error.
 */
TEST(cuda_batch_hostile)
{
    static const uint32_t not_batchable[] = {
        VCU_OP_CU_CTX_SYNCHRONIZE, VCU_OP_CU_BATCH,       VCU_OP_CU_CALLBACK_WAIT,
        VCU_OP_CU_CALLBACK_DONE,   VCU_OP_CU_MEMCPY_HTOD, VCU_OP_CU_MEM_ALLOC,
        VCU_OP_SESSION_CLOSE,      VCU_OP_SESSION_FENCE,  VCU_OP_ECHO,
        VCU_OP_CU_STREAM_SYNCHRONIZE, VCU_OP_CU_CALL,     0xffff,
    };
    struct vcu_cu_memset_req mq;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;
    struct vcu_cu_batch_req bh;
    tc_batch_t *b = malloc(sizeof(*b));
    unsigned char big[VCU_CU_BATCH_BYTES];
    uint64_t d = 0;
    unsigned int i;
    tc_t c;

    ASSERT_TRUE(b != NULL);
    memset(big, 0, sizeof(big));
    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0, 1, 256, 1, 0, 0));
    memset(&mq, 0, sizeof(mq));
    mq.dst = d;
    mq.value = 0x77;
    mq.elem_size = 1;
    mq.width = 8;
    mq.height = 1;
    mq.flags = VCU_CU_MEMCPY_F_ASYNC;

#define TC_REFUSED(count)                                                              \
    do {                                                                               \
        ASSERT_EQ(VCU_S_EINVAL, tc_batch_send(&c, b, (count), 0, &r));                  \
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, r.result);                                  \
        CHECK(tc_bytes_are(&c, d, 0, 8, 0));                                            \
    } while (0)

    /* Counts: none, too many, more or fewer than the entries. */
    tc_batch_init(b);
    tc_batch_memset(b, d, 0x77, 8);
    TC_REFUSED(0);
    TC_REFUSED(VCU_CU_BATCH_MAX + 1);
    TC_REFUSED(2);
    tc_batch_memset(b, d, 0x77, 8);
    TC_REFUSED(1);
    TC_REFUSED(0xffffffffu);

    /* Opcodes a batch may not hold, as the second entry. */
    for (i = 0; i < sizeof(not_batchable) / sizeof(not_batchable[0]); i++) {
        tc_batch_init(b);
        tc_batch_memset(b, d, 0x77, 8);
        tc_batch_add(b, not_batchable[i], &mq, sizeof(mq), sizeof(mq));
        TC_REFUSED(2);
    }

    /* An entry shorter than its opcode's request. */
    tc_batch_init(b);
    tc_batch_memset(b, d, 0x77, 8);
    tc_batch_add(b, VCU_OP_CU_MEMSET, &mq, sizeof(mq), 8);
    TC_REFUSED(2);

    /* Entry lengths past the payload, and ones that wrap with padding. */
    {
        static const uint32_t lens[] = {0xffffffffu, 0xfffffff9u, 0x80000000u, 4096};

        for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            struct vcu_cu_batch_entry e = {VCU_OP_CU_MEMSET, lens[i]};

            tc_batch_init(b);
            tc_batch_memset(b, d, 0x77, 8);
            memcpy(b->b + b->len, &e, sizeof(e));
            b->len += sizeof(e);
            memcpy(b->b + b->len, &mq, sizeof(mq));
            b->len += sizeof(mq);
            TC_REFUSED(2);
        }
    }

    /* Padding missing at the end: the last entry's payload not a
     * multiple of 8 and the batch cut right after it. */
    tc_batch_init(b);
    tc_batch_memset(b, d, 0x77, 8);
    tc_batch_add(b, VCU_OP_CU_MEMSET, &mq, sizeof(mq), (uint32_t)sizeof(mq) + 3);
    b->len -= 5;
    TC_REFUSED(2);

    /* An entry header cut short. */
    tc_batch_init(b);
    tc_batch_memset(b, d, 0x77, 8);
    b->len += 4;
    TC_REFUSED(2);

    /* The batch's own header: device, ctx and reserved fields not 0. */
    tc_batch_init(b);
    tc_batch_memset(b, d, 0x77, 8);
    memset(&bh, 0, sizeof(bh));
    bh.count = 1;
    bh.hdr.device = 1;
    memcpy(b->b, &bh, sizeof(bh));
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_BATCH, 0, b->b, (uint32_t)b->len, &r, sizeof(r)));
    bh.hdr.device = 0;
    bh.hdr.ctx = 1;
    memcpy(b->b, &bh, sizeof(bh));
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_BATCH, 0, b->b, (uint32_t)b->len, &r, sizeof(r)));
    bh.hdr.ctx = 0;
    bh.reserved = 1;
    memcpy(b->b, &bh, sizeof(bh));
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_BATCH, 0, b->b, (uint32_t)b->len, &r, sizeof(r)));
    CHECK(tc_bytes_are(&c, d, 0, 8, 0));

    /* More than VCU_CU_BATCH_BYTES, and shorter than its header. */
    tc_batch_init(b);
    tc_batch_memset(b, d, 0x77, 8);
    tc_batch_add(b, VCU_OP_CU_MEMSET, big, sizeof(big) - 64, sizeof(big) - 64);
    memcpy(b->b + b->len - (sizeof(big) - 64), &mq, sizeof(mq));
    TC_REFUSED(2);
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_BATCH, 0, b->b, 8, &r, sizeof(r)));

    /* With a segment: a batch takes none. */
    {
        ut_req_t *t = ut_req_new();
        unsigned char buf[64];

        tc_batch_init(b);
        tc_batch_memset(b, d, 0x77, 8);
        memset(&bh, 0, sizeof(bh));
        bh.count = 1;
        memcpy(b->b, &bh, sizeof(bh));
        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, buf, sizeof(buf));
        ASSERT_EQ(VCU_S_EINVAL, tc_run(&c, t, VCU_OP_CU_BATCH, 0, b->b, (uint32_t)b->len));
        free(t);
        CHECK(tc_bytes_are(&c, d, 0, 8, 0));
    }

    /* Async: refused all the same, and the next reply says so. */
    tc_batch_init(b);
    tc_batch_memset(b, d, 0x77, 8);
    ASSERT_EQ(VCU_S_EINVAL, tc_batch_send(&c, b, 5, VCU_REQ_F_ASYNC, &r));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, r.deferred);
    CHECK(tc_bytes_are(&c, d, 0, 8, 0));
#undef TC_REFUSED
    tc_close(&c);
    free(b);
    return 0;
}

/* Another session's batch names this session's event: refused (deferred),
 * as the same requests alone are.  Memory is kept apart by the worker
 * process each session has (tests/cuda/isolation, whose async attacks now
 * go as batches); this in-process backend is one address space. */
TEST(cuda_batch_other_session)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;
    tc_batch_t *b = malloc(sizeof(*b));
    uint64_t d = 0, ev = 0, s2 = 0;
    tc_t c, c2;

    ASSERT_TRUE(b != NULL);
    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0x5a, 1, 256, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &ev));
    ASSERT_EQ(VCU_S_OK, ut_open(c.be, &s2));
    c2.be = c.be;
    c2.s = s2;
    {
        struct vcu_cu_pair_req wq = {{0, 0}, VCU_CU_STREAM_LEGACY, ev, 0};
        struct vcu_cu_pair_req rq = {{0, 0}, ev, VCU_CU_STREAM_LEGACY, 0};

        tc_batch_init(b);
        tc_batch_add(b, VCU_OP_CU_STREAM_WAIT_EVENT, &wq, sizeof(wq), sizeof(wq));
        tc_batch_add(b, VCU_OP_CU_EVENT_RECORD, &rq, sizeof(rq), sizeof(rq));
        ASSERT_EQ(VCU_S_OK, tc_batch_send(&c2, b, 2, VCU_REQ_F_ASYNC, &r));
    }
    ASSERT_EQ(VCU_S_OK, tc_do(&c2, VCU_OP_CU_CTX_SYNCHRONIZE, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.deferred);
    /* The event is still this session's and works. */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_EVENT_RECORD, ev, VCU_CU_STREAM_LEGACY, 0, NULL,
                                    0));
    CHECK(tc_bytes_are(&c, d, 0, 256, 0x5a));
    ut_close(c.be, s2);
    tc_close(&c);
    free(b);
    return 0;
}

/* A session that did not agree VCU_FEAT_BATCH gets none. */
TEST(cuda_batch_feature)
{
    vcu_backend_config_t cfg;
    vcu_backend_t *be = NULL;
    struct vcu_cu_batch_req bh;
    unsigned char p[sizeof(bh) + 8 + sizeof(struct vcu_cu_memset_req)];
    uint64_t s = 0, feat = 0;
    ut_req_t *t;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0";
    ASSERT_EQ(0, vcu_backend_new(&cfg, &be));
    ASSERT_EQ(VCU_S_OK, ut_open_ex(be, 1, 1, VCU_FEAT_CUDA | VCU_FEAT_ASYNC | VCU_FEAT_BATCH, &s,
                                   &feat));
    ASSERT_TRUE((feat & VCU_FEAT_BATCH) != 0);
    ut_close(be, s);
    ASSERT_EQ(VCU_S_OK, ut_open_ex(be, 1, 1, VCU_FEAT_CUDA | VCU_FEAT_ASYNC, &s, NULL));
    memset(p, 0, sizeof(p));
    memset(&bh, 0, sizeof(bh));
    bh.count = 1;
    memcpy(p, &bh, sizeof(bh));
    t = ut_req_new();
    ut_req_build(t, VCU_OP_CU_BATCH, s, p, sizeof(p));
    vcu_backend_execute(be, &t->r);
    ASSERT_EQ(VCU_S_ENOTSUP, ut_status(t));
    free(t);
    ut_close(be, s);
    vcu_backend_free(be);
    return 0;
}

/* ---- host callbacks ----------------------------------------------------- */

static ut_req_t *tc_submit_pair(tc_t *c, uint32_t op, uint64_t a, uint64_t b)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_pair_req rq = {{0, 0}, a, b, 0};

    ut_req_build(t, op, c->s, &rq, sizeof(rq));
    vcu_backend_submit(c->be, &t->r);
    return t;
}

static ut_req_t *tc_submit_wait(tc_t *c)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_hdr h = {0, 0};

    ut_req_build(t, VCU_OP_CU_CALLBACK_WAIT, c->s, &h, sizeof(h));
    vcu_backend_submit(c->be, &t->r);
    return t;
}

static void tc_nap(void)
{
    struct timespec ts = {0, 20 * 1000000};

    nanosleep(&ts, NULL);
}

TEST(cuda_callback_gate)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_u64_resp wr;
    struct vcu_cu_u64_req sq;
    ut_req_t *hf, *sync;
    uint64_t s;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    /*
     * HOST_FUNC may complete at once (a GPU driver runs the callback on
     * its own thread) or only once the callback ran (the stand-in runs it
     * inside cuLaunchHostFunc): this test holds either way.
     */
    hf = tc_submit_pair(&c, VCU_OP_CU_STREAM_HOST_FUNC, s, 0xc0ffee);
    /* WAIT hands out the cookie the trampoline reached. */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), &wr, sizeof(wr)));
    ASSERT_EQ(CUDA_SUCCESS, wr.r.result);
    ASSERT_EQ_U64(0xc0ffee, wr.value);
    /* The stream is held until DONE. */
    sync = ut_req_new();
    memset(&sq, 0, sizeof(sq));
    sq.value = s;
    ut_req_build(sync, VCU_OP_CU_STREAM_SYNCHRONIZE, c.s, &sq, sizeof(sq));
    vcu_backend_submit(c.be, &sync->r);
    tc_nap();
    ASSERT_EQ(0, atomic_load(&sync->ndone));
    /* DONE for a cookie nobody waits on. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_CALLBACK_DONE, 0, 0x1, NULL));
    ASSERT_EQ(0, atomic_load(&sync->ndone));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CALLBACK_DONE, 0, 0xc0ffee, NULL));
    ASSERT_EQ(0, ut_wait_count(&hf->ndone, 1));
    ASSERT_EQ(VCU_S_OK, ut_status(hf));
    ASSERT_EQ(CUDA_SUCCESS, ((struct vcu_cu_resp *)ut_resp_payload(hf))->result);
    ASSERT_EQ(0, ut_wait_count(&sync->ndone, 1));
    ASSERT_EQ(VCU_S_OK, ut_status(sync));
    ASSERT_EQ(CUDA_SUCCESS, ((struct vcu_cu_resp *)ut_resp_payload(sync))->result);
    /* Used up. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_CALLBACK_DONE, 0, 0xc0ffee, NULL));
    free(sync);
    free(hf);
    tc_close(&c);
    return 0;
}

TEST(cuda_callback_parked_first)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_u64_resp wr;
    ut_req_t *w, *hf;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    w = tc_submit_wait(&c);
    tc_nap();
    ASSERT_EQ(0, atomic_load(&w->ndone));
    /* One parked WAIT per session. */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), &wr, sizeof(wr)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, wr.r.result);
    hf = tc_submit_pair(&c, VCU_OP_CU_STREAM_HOST_FUNC, VCU_CU_STREAM_LEGACY, 42);
    ASSERT_EQ(0, ut_wait_count(&w->ndone, 1));
    ASSERT_EQ(VCU_S_OK, ut_status(w));
    ASSERT_EQ(sizeof(struct vcu_cu_u64_resp), ut_resp(w)->payload_len);
    memcpy(&wr, ut_resp_payload(w), sizeof(wr));
    ASSERT_EQ(CUDA_SUCCESS, wr.r.result);
    ASSERT_EQ(42, wr.value);
    ASSERT_EQ_U64(UT_REQ_ID, ut_resp(w)->req_id);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CALLBACK_DONE, 0, 42, NULL));
    ASSERT_EQ(0, ut_wait_count(&hf->ndone, 1));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    free(w);
    free(hf);
    tc_close(&c);
    return 0;
}

TEST(cuda_callback_cancel)
{
    ut_req_t *w;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    w = tc_submit_wait(&c);
    tc_nap();
    ASSERT_EQ(0, atomic_load(&w->ndone));
    /* Session end: the parked WAIT is cancelled. */
    ASSERT_EQ(VCU_S_OK, ut_close(c.be, c.s));
    ASSERT_EQ(0, ut_wait_count(&w->ndone, 1));
    ASSERT_EQ(VCU_S_ECANCELED, ut_status(w));
    free(w);
    vcu_backend_free(c.be);
    return 0;
}

/*
 * Below the core: a trampoline blocked for a DONE that never comes (the
 * guest died) is let go by vcu__cuda_sess_cancel(), and session free
 * after that completes.  With the stand-in the callback runs inside
 * cuLaunchHostFunc, i.e. inside exec on the thread below.
 */
typedef struct tc_exec_s {
    vcu__cuda_sess_t *cs;
    uint32_t op;
    struct vcu_cu_pair_req rq;
    uint64_t out[64];
    size_t out_len;
    uint32_t st;
    vcu__cuda_wait_t *wait;
    atomic_int finished;
} tc_exec_t;

static void *tc_exec_thread(void *arg)
{
    tc_exec_t *x = arg;
    struct vcu_req_hdr h;

    memset(&h, 0, sizeof(h));
    h.opcode = x->op;
    h.payload_len = sizeof(x->rq);
    x->st = vcu__cuda_exec(x->cs, &h, &x->rq, NULL, 0, x->out, sizeof(x->out), &x->out_len, NULL, &x->wait);
    atomic_store(&x->finished, 1);
    return NULL;
}

TEST(cuda_callback_session_end)
{
    vcu_backend_config_t cfg;
    vcu__cuda_t *cu = NULL;
    vcu__cuda_sess_t *cs = NULL;
    tc_exec_t x;
    pthread_t th;
    char err[256];

    memset(&cfg, 0, sizeof(cfg));
    ASSERT_EQ(0, vcu__cuda_init(&cfg, &cu, err, sizeof(err)));
    ASSERT_EQ(0, vcu__cuda_sess_new(cu, 1, &cs));
    memset(&x, 0, sizeof(x));
    atomic_init(&x.finished, 0);
    x.cs = cs;
    x.op = VCU_OP_CU_STREAM_HOST_FUNC;
    x.rq.a = VCU_CU_STREAM_LEGACY;
    x.rq.b = 99;
    ASSERT_EQ(0, pthread_create(&th, NULL, tc_exec_thread, &x));
    tc_nap();
    vcu__cuda_sess_cancel(cs);
    ASSERT_EQ(0, ut_wait_count(&x.finished, 1));
    pthread_join(th, NULL);
    ASSERT_EQ(VCU_S_OK, x.st);
    ASSERT_EQ(CUDA_SUCCESS, ((struct vcu_cu_resp *)x.out)->result);
    /* After the end: WAIT is cancelled, new callbacks do not block. */
    {
        struct vcu_req_hdr h;
        struct vcu_cu_hdr ch = {0, 0};
        uint64_t out[4];
        size_t len = 0;
        vcu__cuda_wait_t *w = NULL;

        memset(&h, 0, sizeof(h));
        h.opcode = VCU_OP_CU_CALLBACK_WAIT;
        h.payload_len = sizeof(ch);
        ASSERT_EQ(VCU_S_ECANCELED, vcu__cuda_exec(cs, &h, &ch, NULL, 0, out, sizeof(out), &len, NULL, &w));
    }
    x.rq.b = 100;
    atomic_store(&x.finished, 0);
    tc_exec_thread(&x);
    ASSERT_EQ(VCU_S_OK, x.st);
    vcu__cuda_sess_free(cs);
    vcu__cuda_fini(cu);
    return 0;
}

/* ---- malformed payloads ------------------------------------------------- */

TEST(cuda_bad_payloads)
{
    static char longname[VCU_CU_NAME_MAX + 32];
    unsigned char fr[256];
    uint64_t mod = 0, g = 0;
    tc_t c;

    CHECK(tc_open(&c));
    memset(longname, 'a', sizeof(longname) - 1);
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_func(&c, mod, TC_VADD, 0, 0, fr, sizeof(fr)));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_func(&c, mod, longname, VCU_CU_NAME_MAX + 1, 0, fr, sizeof(fr)));
    /* name_len beyond the payload. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_func(&c, mod, TC_VADD, 100, 0, fr, sizeof(fr)));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_func(&c, mod, "ab\0cd", 5, 3, fr, sizeof(fr)));
    /* Longest legal name: just not found. */
    ASSERT_EQ(CUDA_ERROR_NOT_FOUND, tc_func(&c, mod, longname, VCU_CU_NAME_MAX, 0, fr, sizeof(fr)));
    /* Module: image_len differs from the segment, no segment. */
    {
        struct vcu_cu_module_load_req lq = {{0, 0}, 5};
        ut_req_t *t = ut_req_new();

        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, longname, 4);
        ASSERT_EQ(VCU_S_EINVAL, tc_run(&c, t, VCU_OP_CU_MODULE_LOAD, 0, &lq, sizeof(lq)));
        free(t);
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_MODULE_LOAD, 0, &lq, sizeof(lq), NULL, 0));
    }
    /* Graph nodes: too many deps, deps beyond the payload, bad kind. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    {
        struct vcu_cu_graph_node_req nq;

        memset(&nq, 0, sizeof(nq));
        nq.graph = g;
        nq.kind = VCU_CU_NODE_EMPTY;
        nq.ndeps = VCU_CU_MAX_DEPS + 1;
        ASSERT_EQ(VCU_S_E2BIG, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq), NULL, 0));
        nq.ndeps = 0xffffffffu;
        ASSERT_EQ(VCU_S_E2BIG, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq), NULL, 0));
        nq.ndeps = 3;
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq), NULL, 0));
        nq.ndeps = 0;
        nq.kind = 99;
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq), NULL, 0));
        nq.kind = VCU_CU_NODE_KERNEL;
        nq.param_bytes = 16;
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq), NULL, 0));
        nq.kind = VCU_CU_NODE_MEMSET;
        nq.elem_size = 8;
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_ADD_NODE, 0, &nq, sizeof(nq), NULL, 0));
    }
    /* Reply buffer too small for the opcode's reply. */
    {
        struct vcu_cu_hdr h = {0, 0};
        ut_req_t *t = ut_req_new();

        ut_req_build(t, VCU_OP_CU_DEVICE_INFO, c.s, &h, sizeof(h));
        t->r.resp_cap = sizeof(struct vcu_resp_hdr) + 100;
        vcu_backend_execute(c.be, &t->r);
        ASSERT_EQ(VCU_S_ERANGE, ut_status(t));
        free(t);
    }
    /* Limits and peer ordinals. */
    {
        struct vcu_call_cuDeviceCanAccessPeer_req pq;
        struct vcu_call_cuDeviceCanAccessPeer_resp pr;

        TC_CALL_INIT(pq, cuDeviceCanAccessPeer, 0);
        pq.peerDev = 2;
        ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, tc_call(&c, &pq, sizeof(pq), &pr, sizeof(pr)));
    }
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0, 1ull << 40, NULL));
    /* Still alive. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    tc_close(&c);
    return 0;
}

/* ---- graphs ------------------------------------------------------------- */

static uint32_t tc_node(tc_t *c, struct vcu_cu_graph_node_req *nq, const uint64_t *deps,
                        uint32_t ndeps, uint64_t *node)
{
    unsigned char p[sizeof(*nq) + 8 * 8];
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    nq->ndeps = ndeps;
    memcpy(p, nq, sizeof(*nq));
    if (ndeps > 0)
        memcpy(p + sizeof(*nq), deps, 8 * (size_t)ndeps);
    st = tc_do(c, VCU_OP_CU_GRAPH_ADD_NODE, 0, p, (uint32_t)(sizeof(*nq) + 8 * ndeps), &rp,
               sizeof(rp));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *node = rp.value;
    return rp.r.result;
}

TEST(cuda_graph_nodes)
{
    struct vcu_cu_graph_node_req nq;
    unsigned char out[64];
    uint64_t g = 0, g2 = 0, ge = 0, d = 0, n1 = 0, n2 = 0, n3 = 0, cnt = 0;
    unsigned int i;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0, 1, 64, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_MEMSET;
    nq.dst = d;
    nq.value = 0x77;
    nq.elem_size = 1;
    nq.width = 32;
    nq.height = 1;
    ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, NULL, 0, &n1));
    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_MEMCPY;
    nq.dst = d + 32;
    nq.src = d;
    nq.width = 16;
    ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, &n1, 1, &n2));
    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_EMPTY;
    {
        uint64_t deps[2] = {n1, n2};

        ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, deps, 2, &n3));
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(3, cnt);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CLONE, 0, g, &g2));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g2, &cnt));
    ASSERT_EQ(3, cnt);
    {
        struct vcu_cu_u64_resp rp;

        ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_INSTANTIATE, g2, 0, 0, &rp, sizeof(rp)));
        ge = rp.value;
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, ge, 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d, out, 64, NULL, 0, 0, 0));
    for (i = 0; i < 64; i++)
        ASSERT_EQ(i < 48 ? 0x77 : 0, out[i]);
    /* Destroying a graph invalidates its node handles. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    nq.graph = g2;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_node(&c, &nq, &n1, 1, &n3));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, ge, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, ge, 0, 0, NULL, 0));
    /* g2 is left for the session's end. */
    tc_close(&c);
    return 0;
}

/*
 * MEMCPY nodes of any shape, and staged ones (a guest host function and
 * the copy as one node); shapes no copy has, or whose extent wraps the
 * address space, are refused before the driver sees them.
 */
/* A CU_GRAPH_NODE_SET request (set with the parameters in nq, extra
 * bytes after); the CUresult or 0x10000 + the wire status. */
static uint32_t tc_node_set(tc_t *c, uint64_t exec, uint64_t node,
                            const struct vcu_cu_graph_node_req *nq, uint32_t extra)
{
    unsigned char p[sizeof(struct vcu_cu_graph_set_req) + 64];
    struct vcu_cu_graph_set_req rq;
    struct vcu_cu_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    memset(p, 0, sizeof(p));
    rq.exec = exec;
    rq.node = node;
    rq.n = *nq;
    memcpy(p, &rq, sizeof(rq));
    st = tc_do(c, VCU_OP_CU_GRAPH_NODE_SET, 0, p, (uint32_t)sizeof(rq) + extra, &rp, sizeof(rp));
    return st != VCU_S_OK ? 0x10000 + st : rp.result;
}

static uint32_t tc_list(tc_t *c, uint64_t g, uint64_t node, uint32_t what,
                        struct vcu_cu_graph_list_resp *rp)
{
    struct vcu_cu_graph_list_req rq;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.graph = g;
    rq.node = node;
    rq.what = what;
    st = tc_do(c, VCU_OP_CU_GRAPH_LIST, 0, &rq, sizeof(rq), rp, sizeof(*rp));
    return st != VCU_S_OK ? 0x10000 + st : rp->r.result;
}

/* Graph edits and updates with bad requests: refused, the worker alive. */
TEST(cuda_graph_update_hostile)
{
    static struct vcu_cu_graph_list_resp lr;
    struct vcu_cu_graph_node_req nq;
    struct vcu_cu_graph_update_resp ur;
    unsigned char eq[sizeof(struct vcu_cu_graph_edges_req) + 16];
    struct vcu_cu_graph_edges_req er;
    uint64_t g = 0, g2 = 0, d = 0, n1 = 0, n2 = 0, o1 = 0, x = 0;
    struct vcu_cu_resp rp;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g2));
    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_MEMSET;
    nq.dst = d;
    nq.value = 1;
    nq.elem_size = 1;
    nq.width = 64;
    nq.height = 1;
    ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, NULL, 0, &n1));
    ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, &n1, 1, &n2));
    nq.graph = g2;
    ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, NULL, 0, &o1));
    {
        struct vcu_cu_u64_resp xr;

        ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_INSTANTIATE, g, 0, 0, &xr,
                                        sizeof(xr)));
        x = xr.value;
    }

    /* NODE_SET: the request's own checks, then the handles and kinds. */
    nq.graph = 0;
    nq.value = 2;
    ASSERT_EQ(CUDA_SUCCESS, tc_node_set(&c, 0, n1, &nq, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_node_set(&c, x, n2, &nq, 0));
    nq.ndeps = 1;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node_set(&c, 0, n1, &nq, 8));
    nq.ndeps = 0;
    nq.graph = g;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node_set(&c, 0, n1, &nq, 0));
    nq.graph = 0;
    nq.elem_size = 3;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node_set(&c, 0, n1, &nq, 0));
    nq.elem_size = 1;
    nq.kind = VCU_CU_NODE_EMPTY;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node_set(&c, 0, n1, &nq, 0));
    nq.kind = 99;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node_set(&c, 0, n1, &nq, 0));
    nq.kind = VCU_CU_NODE_KERNEL;
    nq.param_bytes = 64;            /* more than the request holds */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node_set(&c, 0, n1, &nq, 8));
    nq.param_bytes = 0;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_node_set(&c, 0, n1, &nq, 0));  /* not a kernel */
    nq.kind = VCU_CU_NODE_MEMCPY;
    nq.src = d;
    nq.dst = d;
    nq.width = 8;
    nq.stage = VCU_CU_STAGE_IN;
    nq.cookie = 1;
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, tc_node_set(&c, 0, n1, &nq, 0));
    nq.stage = VCU_CU_STAGE_NONE;
    nq.cookie = 0;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_node_set(&c, 0, n1, &nq, 0));  /* not a copy */
    nq.kind = VCU_CU_NODE_HOST;
    nq.cookie = 5;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_node_set(&c, 0, n1, &nq, 0));  /* not a host node */
    nq.kind = VCU_CU_NODE_MEMSET;
    nq.width = 64;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_node_set(&c, 0, g, &nq, 0));   /* a graph */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_node_set(&c, g, n1, &nq, 0));  /* not an exec */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_node_set(&c, 0, n1 + (1ull << 32), &nq, 0));

    /* LIST: kinds, handles; the nodes come back under their handles. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_list(&c, g, 0, 0, &lr));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_list(&c, g, 0, VCU_CU_LIST_CLONE + 1, &lr));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_list(&c, n1, 0, VCU_CU_LIST_NODES, &lr));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_list(&c, 0, g, VCU_CU_LIST_DEPS, &lr));
    ASSERT_EQ(CUDA_SUCCESS, tc_list(&c, g, 0, VCU_CU_LIST_ROOTS, &lr));
    ASSERT_EQ(1, lr.total);
    ASSERT_EQ(1, lr.count);
    ASSERT_EQ(n1, lr.node[0]);
    ASSERT_EQ(CUDA_SUCCESS, tc_list(&c, g, 0, VCU_CU_LIST_EDGES, &lr));
    ASSERT_EQ(1, lr.total);
    ASSERT_EQ(2, lr.count);
    ASSERT_EQ(n1, lr.node[0]);
    ASSERT_EQ(n2, lr.node[1]);
    ASSERT_EQ(CUDA_SUCCESS, tc_list(&c, 0, n2, VCU_CU_LIST_DEPS, &lr));
    ASSERT_EQ(1, lr.count);
    ASSERT_EQ(n1, lr.node[0]);

    /* EDGES: framing, then the nodes must be the graph's. */
    memset(&er, 0, sizeof(er));
    er.graph = g;
    er.count = 1;
    memcpy(eq, &er, sizeof(er));
    memcpy(eq + sizeof(er), &n1, 8);
    memcpy(eq + sizeof(er) + 8, &o1, 8);
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_EDGES, 0, eq, sizeof(er) + 8, &rp,
                                  sizeof(rp)));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_EDGES, 0, eq, sizeof(eq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, rp.result);
    er.count = 0;
    memcpy(eq, &er, sizeof(er));
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_EDGES, 0, eq, sizeof(eq), &rp, sizeof(rp)));
    er.count = 1;
    er.add = 2;
    memcpy(eq, &er, sizeof(er));
    ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_EDGES, 0, eq, sizeof(eq), &rp, sizeof(rp)));
    er.add = 0;
    memcpy(eq, &er, sizeof(er));
    memcpy(eq + sizeof(er) + 8, &n2, 8);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_EDGES, 0, eq, sizeof(eq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.result);

    /* EDGES_DATA: the data after the pairs, reserved bytes 0, the driver's
     * own checks (programmatic only between kernel nodes); the edge listed
     * with its data; data listed only of edges. */
    {
        unsigned char dq[sizeof(er) + 24];
        CUgraphEdgeData ed;
        struct vcu_cu_graph_list_resp lr2;

        memset(&ed, 0, sizeof(ed));
        er.add = 1;
        memcpy(dq, &er, sizeof(er));
        memcpy(dq + sizeof(er), &n1, 8);
        memcpy(dq + sizeof(er) + 8, &n2, 8);
        memcpy(dq + sizeof(er) + 16, &ed, 8);
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_GRAPH_EDGES_DATA, 0, dq, sizeof(er) + 16,
                                      &rp, sizeof(rp)));
        ed.reserved[4] = 1;
        memcpy(dq + sizeof(er) + 16, &ed, 8);
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_EDGES_DATA, 0, dq, sizeof(dq), &rp,
                                  sizeof(rp)));
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, rp.result);
        ed.reserved[4] = 0;
        ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        memcpy(dq + sizeof(er) + 16, &ed, 8);
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_EDGES_DATA, 0, dq, sizeof(dq), &rp,
                                  sizeof(rp)));
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, rp.result);   /* memset nodes */
        ed.type = 0;
        memcpy(dq + sizeof(er) + 16, &ed, 8);
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_EDGES_DATA, 0, dq, sizeof(dq), &rp,
                                  sizeof(rp)));
        ASSERT_EQ(CUDA_SUCCESS, rp.result);
        ASSERT_EQ(CUDA_SUCCESS, tc_list(&c, g, 0, VCU_CU_LIST_EDGES | VCU_CU_LIST_F_DATA, &lr2));
        ASSERT_EQ(1, lr2.total);
        ASSERT_EQ(1, lr2.count);
        ASSERT_EQ(0, lr2.node[0]);
        ASSERT_EQ(CUDA_SUCCESS, tc_list(&c, 0, n2, VCU_CU_LIST_DEPS | VCU_CU_LIST_F_DATA, &lr2));
        ASSERT_EQ(1, lr2.count);
        ASSERT_EQ(0x10000 + VCU_S_EINVAL,
                  tc_list(&c, g, 0, VCU_CU_LIST_NODES | VCU_CU_LIST_F_DATA, &lr2));
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_list(&c, g, 0, VCU_CU_LIST_F_DATA, &lr2));
        ASSERT_EQ(0x10000 + VCU_S_EINVAL,
                  tc_list(&c, g, 0, VCU_CU_LIST_ROOTS | VCU_CU_LIST_F_LOSSY_OK, &lr2));
        ASSERT_EQ(CUDA_SUCCESS, tc_list(&c, g, 0, VCU_CU_LIST_EDGES | VCU_CU_LIST_F_LOSSY_OK, &lr2));
        ASSERT_EQ(2, lr2.count);
        /* Another session (another guest process) names this one's graph
         * and nodes: not found, nothing changed. */
        {
            tc_t o = c;

            ASSERT_EQ(VCU_S_OK, ut_open(c.be, &o.s));
            ASSERT_EQ(VCU_S_OK, tc_do(&o, VCU_OP_CU_GRAPH_EDGES_DATA, 0, dq, sizeof(dq), &rp,
                                      sizeof(rp)));
            ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.result);
            ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
                      tc_list(&o, g, 0, VCU_CU_LIST_EDGES | VCU_CU_LIST_F_DATA, &lr2));
            ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
                      tc_list(&o, 0, n2, VCU_CU_LIST_DEPS | VCU_CU_LIST_F_LOSSY_OK, &lr2));
            ut_close(c.be, o.s);
        }
        ASSERT_EQ(CUDA_SUCCESS, tc_list(&c, g, 0, VCU_CU_LIST_EDGES | VCU_CU_LIST_F_DATA, &lr2));
        ASSERT_EQ(1, lr2.total);
        /* As it was: the edge removed. */
        er.add = 0;
        memcpy(dq, &er, sizeof(er));
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_EDGES_DATA, 0, dq, sizeof(dq), &rp,
                                  sizeof(rp)));
        ASSERT_EQ(CUDA_SUCCESS, rp.result);
    }

    /* EXEC_UPDATE: handles of the right kinds; a changed topology reported. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_GRAPH_EXEC_UPDATE, g, g, 0, &ur,
                                                 sizeof(ur)));
    ASSERT_EQ(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
              tc_pair(&c, VCU_OP_CU_GRAPH_EXEC_UPDATE, x, g2, 0, &ur, sizeof(ur)));
    ASSERT_EQ(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, ur.info);

    /* NODE_DESTROY: the handle goes with the node. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_DESTROY, 0, n2, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_DESTROY, 0, n2, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_DESTROY, 0, g, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    tc_close(&c);
    return 0;
}

TEST(cuda_graph_copy_shapes)
{
    struct vcu_cu_graph_node_req nq, bad;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_u64_resp wr, rp;
    unsigned char in[256], out[256];
    uint64_t g = 0, ge = 0, d = 0, n1 = 0, n2 = 0, cnt = 0;
    ut_req_t *launch;
    unsigned int i;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 512, &d));
    for (i = 0; i < sizeof(in); i++)
        in[i] = (unsigned char)(i * 7 + 1);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, d, in, sizeof(in), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d + 256, 0, 1, 256, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    /* A 2D copy: 4 rows of 8 bytes, source rows 32 apart, 16 at the
     * destination. */
    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_MEMCPY;
    nq.src = d + 3;
    nq.dst = d + 256;
    nq.width = 8;
    nq.height = 4;
    nq.src_pitch = 32;
    nq.dst_pitch = 16;
    ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, NULL, 0, &n1));
    /* Staged: the host function, then a 1D copy, as one node. */
    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_MEMCPY;
    nq.src = d + 128;
    nq.dst = d + 384;
    nq.width = 64;
    nq.stage = VCU_CU_STAGE_IN;
    nq.cookie = 0x5157;
    ASSERT_EQ(CUDA_SUCCESS, tc_node(&c, &nq, &n1, 1, &n2));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(2, cnt);

    /* Refused shapes, each one field off the good 2D copy. */
    memset(&bad, 0, sizeof(bad));
    bad.graph = g;
    bad.kind = VCU_CU_NODE_MEMCPY;
    bad.src = d;
    bad.dst = d + 256;
    bad.width = 8;
    bad.height = 4;
    bad.src_pitch = 32;
    bad.dst_pitch = 16;
    {
        struct vcu_cu_graph_node_req b;
        uint64_t x = 0;

        b = bad; b.width = 0;
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.src_pitch = 4;                       /* rows overlap */
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.depth = 2; b.dst_rows = 3;           /* slices overlap */
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.src_pitch = UINT64_MAX / 2;          /* extent wraps */
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.height = 1; b.depth = 1; b.src = UINT64_MAX - 3;
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.depth = (uint64_t)1 << 40;
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.stage = 3; b.cookie = 1;
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.stage = VCU_CU_STAGE_OUT;            /* no cookie */
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
        b = bad; b.reserved = 1;
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_node(&c, &b, NULL, 0, &x));
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(2, cnt);

    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_INSTANTIATE, g, 0, 0, &rp, sizeof(rp)));
    ge = rp.value;
    /* The staged node's host function reaches the guest's WAIT with its
     * cookie; the launch finishes once the guest answers DONE. */
    launch = tc_submit_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, ge, 0);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), &wr, sizeof(wr)));
    ASSERT_EQ(CUDA_SUCCESS, wr.r.result);
    ASSERT_EQ_U64(0x5157, wr.value);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CALLBACK_DONE, 0, 0x5157, NULL));
    ASSERT_EQ(0, ut_wait_count(&launch->ndone, 1));
    ASSERT_EQ(CUDA_SUCCESS, ((struct vcu_cu_resp *)ut_resp_payload(launch))->result);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, d + 256, out, 256, NULL, 0, 0, 0));
    for (i = 0; i < 64; i++) {
        unsigned int row = i / 16, col = i % 16;

        ASSERT_EQ(col < 8 ? in[3 + row * 32 + col] : 0, out[i]);
    }
    for (i = 64; i < 128; i++)
        ASSERT_EQ(0, out[i]);
    for (i = 0; i < 64; i++)
        ASSERT_EQ(in[128 + i], out[128 + i]);
    free(launch);
    tc_close(&c);
    return 0;
}

TEST(cuda_graph_capture)
{
    struct vcu_cu_capture_info_resp ci;
    struct vcu_cu_memset_req mq;
    uint64_t s, g = 0, cnt = 0, d = 0;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    {
        struct vcu_cu_u64_req rq = {{0, 0}, s};

        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_CAPTURE_INFO, 0, &rq, sizeof(rq), &ci, sizeof(ci)));
        ASSERT_EQ(CUDA_SUCCESS, ci.r.result);
        ASSERT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, ci.status);
    }
    memset(&mq, 0, sizeof(mq));
    mq.dst = d;
    mq.value = 1;
    mq.elem_size = 1;
    mq.width = 64;
    mq.height = 1;
    mq.stream = s;
    mq.flags = VCU_CU_MEMCPY_F_ASYNC;
    {
        struct vcu_cu_resp r;

        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMSET, 0, &mq, sizeof(mq), &r, sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.result);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_GE(g, VCU_CU_HANDLE_MIN);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(1, cnt);
    tc_close(&c);
    return 0;
}

/* CU_STREAM_CAPTURE_GRAPH on stream s; the CUresult (or 0x10000 + the
 * wire status), the reply in *o. */
static uint32_t tc_capg(tc_t *c, uint64_t s, struct vcu_cu_capture_graph_resp *o)
{
    struct vcu_cu_u64_req rq = {{0, 0}, s};
    uint32_t st;

    memset(o, 0, sizeof(*o));
    st = tc_do(c, VCU_OP_CU_STREAM_CAPTURE_GRAPH, 0, &rq, sizeof(rq), o, sizeof(*o));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    return o->r.result;
}

/* CU_LINK with the given input stream and room for the image
 * (CUresult or 0x10000 + status); reply in *o. */
static uint32_t tc_link(tc_t *c, const struct vcu_cu_link_req *rq, const void *in, size_t in_len,
                        void *img, size_t room, int nsegs, struct vcu_cu_link_resp *o)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    if (nsegs >= 1)
        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, (void *)in, in_len);
    if (nsegs >= 2)
        ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, img, room);
    st = tc_run(c, t, VCU_OP_CU_LINK, 0, rq, sizeof(*rq));
    memset(o, 0, sizeof(*o));
    memcpy(o, ut_resp_payload(t), sizeof(*o));
    free(t);
    return st != VCU_S_OK ? 0x10000 + st : o->r.result;
}

/* One input record: header, name, data. */
static size_t tc_link_rec(unsigned char *out, uint32_t type, const char *name, uint64_t data_len,
                          const void *data, size_t copy)
{
    struct vcu_cu_link_input r = { type, (uint32_t)strlen(name), data_len };

    memcpy(out, &r, sizeof(r));
    memcpy(out + sizeof(r), name, strlen(name));
    memcpy(out + sizeof(r) + strlen(name), data, copy);
    return sizeof(r) + strlen(name) + copy;
}

/*
 * CU_LINK: a good link of one image; then a hostile guest's requests,
 * each refused before the driver sees a byte out of bounds: wrong
 * segments, no inputs or too many, an option that is not a plain value,
 * records whose name or data run past the input, a type out of range,
 * bytes after the last record.  Too little room: the size, nothing
 * written.
 */
TEST(cuda_link)
{
    static const char img[] = "stand-in image";
    struct vcu_cu_link_req rq;
    struct vcu_cu_link_resp o;
    unsigned char in[256], out[64];
    size_t n;
    tc_t c;

    CHECK(tc_open(&c));
    memset(&rq, 0, sizeof(rq));
    rq.ninputs = 1;
    rq.nopts = 1;
    rq.opt[0].id = CU_JIT_OPTIMIZATION_LEVEL;
    rq.opt[0].value = 3;
    n = tc_link_rec(in, CU_JIT_INPUT_CUBIN, "a.cubin", sizeof(img), img, sizeof(img));
    memset(out, 0, sizeof(out));
    ASSERT_EQ(CUDA_SUCCESS, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    ASSERT_EQ(sizeof(img), o.image_len);
    ASSERT_EQ(0, memcmp(out, img, sizeof(img)));
    /* Too little room: the size comes back, nothing is written. */
    memset(out, 0, sizeof(out));
    ASSERT_EQ(CUDA_SUCCESS, tc_link(&c, &rq, in, n, out, 4, 2, &o));
    ASSERT_EQ(sizeof(img), o.image_len);
    ASSERT_EQ(0, out[0]);

    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_link(&c, &rq, in, n, out, sizeof(out), 1, &o));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_link(&c, &rq, in, n, out, sizeof(out), 0, &o));
    rq.ninputs = 0;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    rq.ninputs = VCU_CU_MAX_LINK_INPUTS + 1;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    rq.ninputs = 2;                 /* one record there */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    rq.ninputs = 1;
    rq.nopts = VCU_CU_MAX_LINK_OPTS + 1;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    rq.nopts = 1;
    rq.opt[0].id = CU_JIT_ERROR_LOG_BUFFER;     /* a pointer into the worker */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    rq.opt[0].id = CU_JIT_OPTIMIZATION_LEVEL;
    /* Data longer than what follows; a name longer than what follows. */
    n = tc_link_rec(in, CU_JIT_INPUT_CUBIN, "a", 1ull << 40, img, sizeof(img));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    n = tc_link_rec(in, CU_JIT_INPUT_CUBIN, "a", sizeof(img), img, sizeof(img));
    ((struct vcu_cu_link_input *)in)->name_len = 0xffffffffu;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    ((struct vcu_cu_link_input *)in)->name_len = 1;
    ((struct vcu_cu_link_input *)in)->type = 99;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    ((struct vcu_cu_link_input *)in)->type = CU_JIT_INPUT_CUBIN;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, n + 3, out, sizeof(out), 2, &o));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_link(&c, &rq, in, 10, out, sizeof(out), 2, &o));
    /* Still a good link after all that. */
    ASSERT_EQ(CUDA_SUCCESS, tc_link(&c, &rq, in, n, out, sizeof(out), 2, &o));
    tc_close(&c);
    return 0;
}

/* CU_STREAM_CAPTURE_DEPS on stream s (CUresult or 0x10000 + status). */
static uint32_t tc_capd(tc_t *c, uint64_t s, struct vcu_cu_capture_deps_resp *o)
{
    struct vcu_cu_u64_req rq = {{0, 0}, s};
    uint32_t st;

    memset(o, 0, sizeof(*o));
    st = tc_do(c, VCU_OP_CU_STREAM_CAPTURE_DEPS, 0, &rq, sizeof(rq), o, sizeof(*o));
    return st != VCU_S_OK ? 0x10000 + st : o->r.result;
}

static uint32_t tc_updd(tc_t *c, uint64_t s, uint32_t flags, uint32_t n, const uint64_t *nodes,
                        uint32_t plen)
{
    struct vcu_cu_update_deps_req rq;
    struct vcu_cu_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.stream = s;
    rq.flags = flags;
    rq.ndeps = n;
    for (uint32_t i = 0; i < n && i < VCU_CU_MAX_CAPTURE_DEPS; i++)
        rq.node[i] = nodes[i];
    st = tc_do(c, VCU_OP_CU_STREAM_UPDATE_DEPS, 0, &rq, plen, &rp, sizeof(rp));
    return st != VCU_S_OK ? 0x10000 + st : rp.result;
}

/*
 * A capture's open dependencies as node handles of its graph, the same
 * handle each time; updating them from a hostile guest: bad flags, too
 * many nodes (read past the host's array without the check), handles of
 * another type, forged, stale after their graph went, a short payload.
 */
TEST(cuda_capture_deps)
{
    struct vcu_cu_capture_deps_resp o;
    struct vcu_cu_memset_req mq;
    struct vcu_cu_resp r;
    uint64_t s, d = 0, g = 0, n1, many[VCU_CU_MAX_CAPTURE_DEPS + 1];
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_capd(&c, s, &o));
    ASSERT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, o.status);
    ASSERT_EQ(0, o.ndeps);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_capd(&c, 0x123456789abcull, &o));

    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL, 0));
    memset(&mq, 0, sizeof(mq));
    mq.dst = d;
    mq.value = 1;
    mq.elem_size = 1;
    mq.width = 64;
    mq.height = 1;
    mq.stream = s;
    mq.flags = VCU_CU_MEMCPY_F_ASYNC;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMSET, 0, &mq, sizeof(mq), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_SUCCESS, tc_capd(&c, s, &o));
    ASSERT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, o.status);
    ASSERT_EQ(1, o.ndeps);
    ASSERT_GE(o.graph, VCU_CU_HANDLE_MIN);
    ASSERT_GE(o.node[0], VCU_CU_HANDLE_MIN);
    n1 = o.node[0];
    ASSERT_EQ(CUDA_SUCCESS, tc_capd(&c, s, &o));
    ASSERT_EQ(n1, o.node[0]);

    ASSERT_EQ(CUDA_SUCCESS, tc_updd(&c, s, CU_STREAM_SET_CAPTURE_DEPENDENCIES, 1, &n1,
                                    sizeof(struct vcu_cu_update_deps_req)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_updd(&c, s, 2, 1, &n1, sizeof(struct vcu_cu_update_deps_req)));
    for (size_t i = 0; i < VCU_CU_MAX_CAPTURE_DEPS + 1; i++)
        many[i] = n1;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_updd(&c, s, 0, VCU_CU_MAX_CAPTURE_DEPS + 1, many,
                      sizeof(struct vcu_cu_update_deps_req)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_updd(&c, s, 0, 0xffffffffu, many, sizeof(struct vcu_cu_update_deps_req)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_updd(&c, s, 0, 1, &s, sizeof(struct vcu_cu_update_deps_req)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_updd(&c, s, 0, 1, &o.graph, sizeof(struct vcu_cu_update_deps_req)));
    many[0] = n1 ^ (1ull << 32);    /* another generation */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_updd(&c, s, 0, 1, many, sizeof(struct vcu_cu_update_deps_req)));
    many[0] = 0;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_updd(&c, s, 0, 1, many, sizeof(struct vcu_cu_update_deps_req)));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_updd(&c, s, 0, 1, &n1, sizeof(struct vcu_cu_update_deps_req) - 8));
    /* The capture still stands, with its one dependency. */
    ASSERT_EQ(CUDA_SUCCESS, tc_capd(&c, s, &o));
    ASSERT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, o.status);
    ASSERT_EQ(1, o.ndeps);
    ASSERT_EQ(n1, o.node[0]);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    /* Its nodes went with the graph. */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_updd(&c, s, 0, 1, &n1, sizeof(struct vcu_cu_update_deps_req)));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    tc_close(&c);
    return 0;
}

/*
 * The graph of a capture under a handle the capture owns: the same one
 * each time and the one END_CAPTURE returns; refused by GRAPH_DESTROY
 * while the capture owns it; stale (refused, never used) once its
 * capture failed or its stream went.  Bad stream handles and modes.
 */
/* CU_GRAPH_ADD_COND_NODE with handle h, type, size bodies, after dep
 * (0: none); the reply in *o. */
static uint32_t tc_cond(tc_t *c, uint64_t g, uint64_t h, uint32_t type, uint32_t size,
                        uint64_t dep, struct vcu_cu_graph_cond_resp *o)
{
    unsigned char buf[sizeof(struct vcu_cu_graph_cond_req) + 8];
    struct vcu_cu_graph_cond_req rq;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.graph = g;
    rq.handle = h;
    rq.type = type;
    rq.size = size;
    rq.ndeps = dep != 0;
    memcpy(buf, &rq, sizeof(rq));
    memcpy(buf + sizeof(rq), &dep, 8);
    st = tc_do(c, VCU_OP_CU_GRAPH_ADD_COND_NODE, 0, buf, sizeof(rq) + 8 * rq.ndeps, o,
               sizeof(*o));
    return st != VCU_S_OK ? 0x10000 + st : o->r.result;
}

/*
 * Conditional nodes from the host's side: only handles the driver gave
 * for the node's graph (or one holding it) make a node; a body graph is a
 * graph handle of its own that may be filled but not destroyed, and goes
 * (with its nodes and its own bodies) when its graph goes; malformed
 * requests are refused before the driver sees them.
 */
TEST(cuda_graph_cond)
{
    struct vcu_cu_graph_cond_resp *o = calloc(1, sizeof(*o));
    uint64_t g, g2, h, h2, hb, body, inner, node;
    tc_t c;

    ASSERT_NE(NULL, o);
    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g2));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_COND_HANDLE, g, 1,
                                    CU_GRAPH_COND_ASSIGN_DEFAULT, NULL, 0));
    {
        struct vcu_cu_pair_req rq = {{0, 0}, g, 0, 0};
        struct vcu_cu_u64_resp rp;

        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_COND_HANDLE, 0, &rq, sizeof(rq), &rp,
                                  sizeof(rp)));
        ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
        h = rp.value;
        /* The driver numbers each graph's handles from 1 (driver 580):
         * g2's third has a value no handle of g has. */
        rq.a = g2;
        for (int i = 0; i < 3; i++)
            ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_COND_HANDLE, 0, &rq, sizeof(rq), &rp,
                                      sizeof(rp)));
        h2 = rp.value;
    }
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_pair(&c, VCU_OP_CU_GRAPH_COND_HANDLE, g, 1, 2, NULL, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_pair(&c, VCU_OP_CU_GRAPH_COND_HANDLE, g, 1ull << 32, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_GRAPH_COND_HANDLE, 77, 0, 0,
                                                 NULL, 0));
    /* Values no handle of ours has, another graph's handle, bad shapes. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_cond(&c, g, h + 12345, 0, 1, 0, o));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_cond(&c, g, ~0ull, 0, 1, 0, o));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_cond(&c, g, h2, 0, 1, 0, o));
    /* g2's first handle has the value of g's first: each makes a node in
     * its own graph. */
    ASSERT_EQ(CUDA_SUCCESS, tc_cond(&c, g2, 1, CU_GRAPH_COND_TYPE_IF, 1, 0, o));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_cond(&c, g, h, 0, 0, 0, o));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_cond(&c, g, h, 0, VCU_CU_MAX_COND_BODIES + 1, 0, o));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_cond(&c, g, h, 3, 1, 0, o));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_cond(&c, g, h, 0, 1, 99, o));
    /* A while node: one body, a graph handle. */
    ASSERT_EQ(CUDA_SUCCESS, tc_cond(&c, g, h, CU_GRAPH_COND_TYPE_WHILE, 1, 0, o));
    ASSERT_EQ(1, (int)o->nbodies);
    node = o->node;
    body = o->body[0];
    ASSERT_NE(0, node);
    ASSERT_NE(0, body);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, body, NULL));
    /* A node in the body, from a handle of the body's own, and one of
     * the graph holding it. */
    {
        struct vcu_cu_pair_req rq = {{0, 0}, body, 1, 0};
        struct vcu_cu_u64_resp rp;

        /* The third: a value no handle of g has. */
        for (int i = 0; i < 3; i++)
            ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_COND_HANDLE, 0, &rq, sizeof(rq), &rp,
                                      sizeof(rp)));
        ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
        hb = rp.value;
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_cond(&c, body, hb, CU_GRAPH_COND_TYPE_IF, 2, 0, o));
    inner = o->body[1];
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, inner, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_cond(&c, g, hb, 0, 1, 0, o));   /* not g's */
    ASSERT_EQ(CUDA_SUCCESS, tc_cond(&c, g, h, CU_GRAPH_COND_TYPE_SWITCH, 3, node, o));
    ASSERT_EQ(3, (int)o->nbodies);
    /* A capture into a body: its end gives the body's own handle. */
    {
        struct vcu_cu_capture_to_graph_req rq;
        struct vcu_cu_resp rp;
        uint64_t s = tc_stream_new(&c), got = 0;

        ASSERT_NE(0, s);
        memset(&rq, 0, sizeof(rq));
        rq.stream = s;
        rq.graph = body;
        rq.mode = 9;
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_STREAM_CAPTURE_TO_GRAPH, 0, &rq, sizeof(rq),
                                      &rp, sizeof(rp)));
        rq.mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
        rq.graph = 77;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_CAPTURE_TO_GRAPH, 0, &rq, sizeof(rq),
                                  &rp, sizeof(rp)));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.result);
        rq.graph = body;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_CAPTURE_TO_GRAPH, 0, &rq, sizeof(rq),
                                  &rp, sizeof(rp)));
        ASSERT_EQ(CUDA_SUCCESS, rp.result);
        ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &got));
        ASSERT_EQ(body, got);
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, body, NULL));
    }
    /* The graph goes, its bodies with it, however deep. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, body, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, inner, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_cond(&c, body, hb, 0, 1, 0, o));
    /* A graph made since (in g's slot, maybe) has none of g's handles. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_cond(&c, g, h, 0, 1, 0, o));
    ASSERT_EQ(CUDA_SUCCESS, tc_cond(&c, g2, h2, CU_GRAPH_COND_TYPE_IF, 1, 0, o));
    tc_close(&c);               /* g2's bodies go with the session */
    free(o);
    return 0;
}

TEST(cuda_capture_graph)
{
    struct vcu_cu_capture_graph_resp o;
    uint64_t s, s2, h, g = 0, cnt = 0, d = 0, d2 = 0, prev = 0;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d));
    /* Not capturing: no graph. */
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    ASSERT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, o.status);
    ASSERT_EQ(0, o.graph);
    /* Hostile handles. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_capg(&c, 0x123456789abcull, &o));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_capg(&c, d, &o));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, s, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_THREAD_CAPTURE_MODE, 0, 9, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_u64(&c, VCU_OP_CU_THREAD_CAPTURE_MODE, 0, ~0ull, NULL));

    /* A capture that succeeds. */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    ASSERT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, o.status);
    ASSERT_NE(0, o.id);
    ASSERT_GE(o.graph, VCU_CU_HANDLE_MIN);
    ASSERT_EQ(0, o.ndeps);
    h = o.graph;
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    ASSERT_EQ(h, o.graph);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, h, NULL));
    /* Under a relaxed worker mode, allocation during the capture. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_THREAD_CAPTURE_MODE, 0,
                                   CU_STREAM_CAPTURE_MODE_RELAXED, &prev));
    ASSERT_EQ(CU_STREAM_CAPTURE_MODE_GLOBAL, prev);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d2));
    /* The mode is this session's: another's capture still refuses. */
    {
        uint64_t s3, d3 = 0;
        tc_t c2;

        CHECK(tc_open(&c2));
        s3 = tc_stream_new(&c2);
        ASSERT_NE(0, s3);
        ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c2, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s3,
                                        CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 0, NULL, 0));
        ASSERT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, tc_alloc(&c2, 64, &d3));
        ASSERT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
                  tc_u64(&c2, VCU_OP_CU_STREAM_END_CAPTURE, 0, s3, NULL));
        tc_close(&c2);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64, &d2));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_THREAD_CAPTURE_MODE, 0,
                                   CU_STREAM_CAPTURE_MODE_GLOBAL, &prev));
    ASSERT_EQ(CU_STREAM_CAPTURE_MODE_RELAXED, prev);
    {
        struct vcu_cu_memset_req mq;
        struct vcu_cu_resp r;

        memset(&mq, 0, sizeof(mq));
        mq.dst = d;
        mq.value = 1;
        mq.elem_size = 1;
        mq.width = 64;
        mq.height = 1;
        mq.stream = s;
        mq.flags = VCU_CU_MEMCPY_F_ASYNC;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMSET, 0, &mq, sizeof(mq), &r, sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.result);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    ASSERT_EQ(1, o.ndeps);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(h, g);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(1, cnt);
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    ASSERT_EQ(0, o.graph);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));

    /* A failed capture: its graph's handle goes stale. */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    h = o.graph;
    ASSERT_GE(h, VCU_CU_HANDLE_MIN);
    ASSERT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, tc_alloc(&c, 64, &d2));
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    ASSERT_EQ(CU_STREAM_CAPTURE_STATUS_INVALIDATED, o.status);
    ASSERT_EQ(0, o.graph);
    ASSERT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
              tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, h, &cnt));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_pair(&c, VCU_OP_CU_GRAPH_INSTANTIATE, h, 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_CLONE, 0, h, NULL));

    /* A capture whose stream is destroyed: the same. */
    s2 = tc_stream_new(&c);
    ASSERT_NE(0, s2);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s2,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s2, &o));
    h = o.graph;
    ASSERT_GE(h, VCU_CU_HANDLE_MIN);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_DESTROY, 0, s2, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, h, &cnt));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, h, NULL));

    /* A capture left running at the session's end: its graph is not
     * destroyed by the session (the capture's). */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_capg(&c, s, &o));
    ASSERT_GE(o.graph, VCU_CU_HANDLE_MIN);
    tc_close(&c);
    return 0;
}

/*
 * Fuzzer find: CU_STREAM_HOST_FUNC on a capturing stream becomes a host
 * node of the captured graph, which runs any number of times or never;
 * its callback record was one-shot (freed by its one run), so it leaked
 * (never run) or was used after free (graph launched twice).
 */
TEST(cuda_host_func_captured)
{
    uint64_t s, g = 0, cnt = 0;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_HOST_FUNC, s, 42, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_GE(g, VCU_CU_HANDLE_MIN);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(1, cnt);
    /* And one left in a capture that never ends. */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_HOST_FUNC, s, 43, 0, NULL, 0));
    tc_close(&c);                   /* LeakSanitizer: no record left */
    return 0;
}

TEST(cuda_ctx_reset)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;
    uint64_t s, d = 0, ev1 = 0;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 4096, &d));
    h.device = 1;
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 1, 0, &ev1));
    h.device = 0;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_RESET, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, d, NULL));
    /* Device 1 is untouched; device 0 comes back on the next call. */
    ASSERT_EQ(CUDA_SUCCESS, tc_query(&c, VCU_CALL_cuEventQuery, 1, ev1));
    /* The generated queries: a handle of another device is refused. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_query(&c, VCU_CALL_cuEventQuery, 0, ev1));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 4096, &d));
    /* Flags before the context exists are kept for its creation. */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_RESET, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0, CU_CTX_SCHED_BLOCKING_SYNC, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    h.device = 3;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_RESET, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, r.result);
    tc_close(&c);
    return 0;
}

TEST(cuda_mempool)
{
    struct vcu_cu_attr_req aq;
    struct vcu_cu_mem_alloc_req mq;
    struct vcu_cu_u64_resp rp;
    uint64_t pool = 0, pool2 = 0, p = 0;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEMPOOL_GET_DEFAULT, 0, 0, &pool));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEMPOOL_GET_DEFAULT, 0, 0, &pool2));
    ASSERT_EQ_U64(pool, pool2);
    memset(&aq, 0, sizeof(aq));
    aq.handle = pool;
    aq.attr = CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    aq.value = 1ull << 33;          /* needs all 64 bits */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMPOOL_SET_ATTR, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMPOOL_GET_ATTR, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    ASSERT_EQ_U64(1ull << 33, rp.value);
    aq.attr = 999;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMPOOL_GET_ATTR, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, rp.r.result);
    memset(&mq, 0, sizeof(mq));
    mq.size = 1000;
    mq.pool = pool;
    /* From a named pool (the stand-in may lack cuMemAllocFromPoolAsync). */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_TRUE(rp.r.result == CUDA_SUCCESS || rp.r.result == CUDA_ERROR_NOT_SUPPORTED);
    if (rp.r.result == CUDA_SUCCESS) {
        struct vcu_cu_memcpy_req fq;
        struct vcu_cu_resp r;

        memset(&fq, 0, sizeof(fq));
        fq.dst = rp.value;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_FREE_ASYNC, 0, &fq, sizeof(fq), &r, sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.result);
    }
    mq.pool = pool + 1;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.r.result);
    mq.pool = 0;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    p = rp.value;
    ASSERT_NE(0, p);
    {
        struct vcu_cu_memcpy_req fq;
        struct vcu_cu_resp r;

        memset(&fq, 0, sizeof(fq));
        fq.dst = p;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_FREE_ASYNC, 0, &fq, sizeof(fq), &r, sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.result);
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_FREE_ASYNC, 0, &fq, sizeof(fq), &r, sizeof(r)));
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, r.result);
    }
    /* One left allocated for the session's end to free. */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    tc_close(&c);
    return 0;
}

static uint32_t tc_fence(tc_t *c)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_req_build(t, VCU_OP_SESSION_FENCE, c->s, NULL, 0);
    vcu_backend_execute(c->be, &t->r);
    st = ut_status(t);
    free(t);
    return st;
}

/*
 * Async copies from stable segments reply without synchronizing the
 * stream.  The stand-in runs copies at once, so this is seen through
 * stream capture: a synchronize of a capturing stream fails (as on a GPU),
 * so a stable copy is captured and succeeds while a plain one reports the
 * synchronize's failure.  Data then moves as usual, fenced.
 */
TEST(cuda_memcpy_stable_async)
{
    static const size_t cuts[] = {100, 3000};
    unsigned char *in = malloc(8192), *out = malloc(8192);
    uint64_t s, s2, d = 0, g = 0, cnt = 0;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    s2 = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_NE(0, s2);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 8192, &d));
    ut_fill(in, 8192, 11);

    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy_ex(&c, 1, d, in, 8192, cuts, 2, VCU_CU_MEMCPY_F_ASYNC, s,
                                       VCU_SEG_F_STABLE));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy_ex(&c, 0, d, out, 8192, cuts, 2, VCU_CU_MEMCPY_F_ASYNC, s,
                                       VCU_SEG_F_STABLE));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, g, &cnt));
    ASSERT_EQ(6, cnt);              /* one copy node per iovec */

    /* Not stable: the reply waits for the stream, which cannot be waited for. */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s2,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_NE(CUDA_SUCCESS, tc_copy_ex(&c, 1, d, in, 8192, cuts, 2, VCU_CU_MEMCPY_F_ASYNC, s2, 0));
    tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s2, NULL);
    /* Synchronous copies ignore the flag. */
    ASSERT_EQ(CUDA_SUCCESS, tc_copy_ex(&c, 1, d, in, 8192, cuts, 2, 0, 0, VCU_SEG_F_STABLE));

    /* A stable round trip on a plain stream, fenced. */
    memset(out, 0, 8192);
    ut_fill(in, 8192, 12);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy_ex(&c, 1, d, in, 8192, cuts, 2, VCU_CU_MEMCPY_F_ASYNC, 0,
                                       VCU_SEG_F_STABLE));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy_ex(&c, 0, d, out, 8192, NULL, 0, VCU_CU_MEMCPY_F_ASYNC, 0,
                                       VCU_SEG_F_STABLE));
    ASSERT_EQ(VCU_S_OK, tc_fence(&c));
    ASSERT_MEM_EQ(in, out, 8192);
    tc_close(&c);
    free(in);
    free(out);
    return 0;
}

/*
 * SESSION_FENCE synchronizes the session's contexts: with a stream still
 * capturing, the context synchronize fails, which the fence reports as the
 * next reply's deferred error; without CUDA state it just replies.
 */
TEST(cuda_fence)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_driver_info_resp dr;
    uint64_t s;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(VCU_S_OK, tc_fence(&c));          /* no CUDA state yet */
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(VCU_S_OK, tc_fence(&c));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_DRIVER_INFO, 0, &h, sizeof(h), &dr, sizeof(dr)));
    ASSERT_EQ(0, dr.r.deferred);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL, 0));
    ASSERT_EQ(VCU_S_OK, tc_fence(&c));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_DRIVER_INFO, 0, &h, sizeof(h), &dr, sizeof(dr)));
    ASSERT_NE(0, dr.r.deferred);
    tc_close(&c);
    return 0;
}

/* Guest RAM registration: reference counted per range, off by config. */
TEST(cuda_add_ram)
{
    vcu_backend_config_t cfg;
    vcu_backend_t *be = NULL;
    size_t len = 1 << 20;
    void *ram = NULL, *ram2 = NULL;

    ASSERT_EQ(0, posix_memalign(&ram, 4096, len));
    ASSERT_EQ(0, posix_memalign(&ram2, 4096, len));
    memset(&cfg, 0, sizeof(cfg));
    ASSERT_EQ(0, vcu_backend_new(&cfg, &be));
    ASSERT_NULL(vcu_backend_cuda_error(be));
    ASSERT_EQ(VCU_ENOTSUP, vcu_backend_add_ram(be, ram, len));
    vcu_backend_free(be);

    cfg.register_ram = 1;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &be));
    ASSERT_EQ(VCU_EINVAL, vcu_backend_add_ram(be, NULL, len));
    ASSERT_EQ(VCU_EINVAL, vcu_backend_add_ram(be, ram, 0));
    ASSERT_EQ(0, vcu_backend_add_ram(be, ram, len));
    ASSERT_EQ(0, vcu_backend_add_ram(be, ram, len));     /* an alias: counted */
    ASSERT_EQ(0, vcu_backend_add_ram(be, ram2, len));
    ASSERT_EQ(0, vcu_backend_remove_ram(be, ram, len));
    ASSERT_EQ(0, vcu_backend_remove_ram(be, ram, len));
    ASSERT_EQ(VCU_EINVAL, vcu_backend_remove_ram(be, ram, len));
    ASSERT_EQ(VCU_EINVAL, vcu_backend_remove_ram(be, ram2, len / 2));
    ASSERT_EQ(0, vcu_backend_add_ram(be, ram, len));     /* again after removal */
    /* ram and ram2 still registered: vcu_backend_free() drops them. */
    vcu_backend_free(be);
    free(ram);
    free(ram2);
    return 0;
}

/*
 * Guest RAM first registered while a guest's stream captures in GLOBAL
 * mode (its page-locked memory first used inside the capture): the
 * registration is the worker's own and neither fails nor ends the capture,
 * where the driver refuses a registration on a thread of GLOBAL mode.
 */
TEST(cuda_add_ram_during_capture)
{
    vcu_backend_config_t cfg;
    size_t len = 1 << 20;
    void *ram = NULL;
    uint64_t s, g = 0;
    tc_t c = { NULL, 0, "" };

    ASSERT_EQ(0, posix_memalign(&ram, 4096, len));
    memset(&cfg, 0, sizeof(cfg));
    cfg.register_ram = 1;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c.be));
    ASSERT_NULL(vcu_backend_cuda_error(c.be));
    ASSERT_EQ(VCU_S_OK, ut_open(c.be, &c.s));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL, 0));
    ASSERT_EQ(0, vcu_backend_add_ram(c.be, ram, len));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_NE(0, g);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL, 0));
    ASSERT_EQ(0, vcu_backend_remove_ram(c.be, ram, len));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    tc_close(&c);
    free(ram);
    return 0;
}

static int tc_tmpfd(void);
static uint32_t tc_state(tc_t *c, uint32_t op, int fd, char *why, size_t whylen);

/* op (CU_HOST_DEVICE_POINTER or _AT) on one iovec with the given segment
 * flags. */
static uint32_t tc_hdp_op(tc_t *c, uint32_t op, void *p, size_t len, uint32_t segflags,
                          unsigned int niov, uint64_t value, uint64_t *out)
{
    ut_req_t *t = ut_req_new();
    struct iovec iov[2] = {{p, niov > 1 ? len / 2 : len}, {(char *)p + len / 2, len - len / 2}};
    struct vcu_cu_u64_req rq = {{0, 0}, value};
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    if (niov > 0)
        ut_req_add_seg_iov(t, segflags, iov, niov);
    st = tc_run(c, t, op, 0, &rq, sizeof(rq));
    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    if (st != VCU_S_OK)
        return 0x10000 + st;
    if (out != NULL)
        *out = rp.value;
    return rp.r.result;
}

static uint32_t tc_hdp(tc_t *c, void *p, size_t len, uint32_t segflags, unsigned int niov,
                       uint64_t value, uint64_t *out)
{
    return tc_hdp_op(c, VCU_OP_CU_HOST_DEVICE_POINTER, p, len, segflags, niov, value, out);
}

/* Zero copy: a stable one-range segment of registered guest RAM has a
 * device pointer (the stand-in's is the host address); anything else not. */
TEST(cuda_host_device_pointer)
{
    const uint32_t stable = VCU_SEG_TO_DEVICE | VCU_SEG_F_STABLE;
    vcu_backend_config_t cfg;
    size_t len = 1 << 20;
    void *ram = NULL, *other = NULL;
    uint64_t d = 0;
    tc_t c;

    ASSERT_EQ(0, posix_memalign(&ram, 4096, len));
    ASSERT_EQ(0, posix_memalign(&other, 4096, 8192));
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0,1";
    cfg.register_ram = 1;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c.be));
    if (vcu_backend_cuda_error(c.be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c.be));
    ASSERT_EQ(0, vcu_backend_add_ram(c.be, ram, len));
    ASSERT_EQ(VCU_S_OK, ut_open(c.be, &c.s));

    ASSERT_EQ(CUDA_SUCCESS, tc_hdp(&c, (char *)ram + 8192, 4096, stable, 1, 0, &d));
    ASSERT_EQ((uint64_t)(uintptr_t)ram + 8192, d);
    ASSERT_EQ(CUDA_SUCCESS, tc_hdp(&c, ram, len, stable, 1, 0, &d));
    ASSERT_EQ((uint64_t)(uintptr_t)ram, d);
    /* Not stable, two ranges, flags, unregistered memory. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hdp(&c, ram, 8192, VCU_SEG_TO_DEVICE, 1, 0, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hdp(&c, ram, 8192, stable, 2, 0, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hdp(&c, ram, 8192, stable, 1, 1, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hdp(&c, other, 8192, stable, 1, 0, NULL));
    /* No segment, or one the wrong way: a malformed request. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_hdp(&c, ram, 8192, stable, 0, 0, NULL));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_hdp(&c, ram, 8192, VCU_SEG_FROM_DEVICE | VCU_SEG_F_STABLE, 1, 0, NULL));
    /* _AT: its value is the address asked for (where the memory is is the
     * worker's doing), the same checks otherwise; a session that has one
     * does not migrate, and says why. */
    {
        const uint32_t at = VCU_OP_CU_HOST_DEVICE_POINTER_AT;
        char why[256];
        int fd = tc_tmpfd();

        ASSERT_GE(fd, 0);
        ASSERT_EQ(CUDA_SUCCESS, tc_hdp_op(&c, at, ram, 4096, stable, 1, 0x4a0000000000ull, &d));
        ASSERT_EQ((uint64_t)(uintptr_t)ram, d);
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hdp_op(&c, at, ram, 8192, VCU_SEG_TO_DEVICE, 1,
                                                      (uintptr_t)ram, NULL));
        ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hdp_op(&c, at, other, 8192, stable, 1,
                                                      (uintptr_t)other, NULL));
        ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_hdp_op(&c, at, ram, 8192, stable, 0, 1, NULL));
        ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
        ASSERT_TRUE(strstr(why, "device pointers to host memory") != NULL);
        close(fd);
    }
    tc_close(&c);
    free(ram);
    free(other);
    return 0;
}

/* ---- device printf (capture.c, CU_TAKE_OUTPUT) -------------------------- */

#include <unistd.h>

#include "vcu_printf.h"

/* A fatbin of one entry of the given kind, flags and payload. */
static size_t tc_fatbin(unsigned char *buf, uint16_t kind, uint64_t flags, const char *payload)
{
    struct vcu_fatbin_hdr h = { VCU_FATBIN_MAGIC, 1, sizeof(h), 0 };
    struct vcu_fatbin_entry e;
    size_t n = strlen(payload);

    memset(&e, 0, sizeof(e));
    e.kind = kind;
    e.header_size = sizeof(e);
    e.size = n;
    e.flags = flags;
    h.fat_size = sizeof(e) + n;
    memcpy(buf, &h, sizeof(h));
    memcpy(buf + sizeof(h), &e, sizeof(e));
    memcpy(buf + sizeof(h) + sizeof(e), payload, n);
    return sizeof(h) + sizeof(e) + n;
}

TEST(printf_image_detect)
{
    unsigned char b[512];
    struct vcu_cu_memcpy_req m;
    size_t n;

    ASSERT_EQ(1, vcu_image_uses_printf(TC_PTX ".extern .func vprintf", strlen(TC_PTX) + 22));
    ASSERT_EQ(0, vcu_image_uses_printf(TC_PTX, strlen(TC_PTX)));
    n = tc_fatbin(b, VCU_FATBIN_KIND_ELF, 0x11, "\177ELF...vprintf...");
    ASSERT_EQ(1, vcu_image_uses_printf(b, n));
    n = tc_fatbin(b, VCU_FATBIN_KIND_ELF, 0x11, "\177ELF...vprint.");
    ASSERT_EQ(0, vcu_image_uses_printf(b, n));
    /* Compressed: cannot tell, so yes. */
    n = tc_fatbin(b, VCU_FATBIN_KIND_ELF, 0x8011, "zzzz");
    ASSERT_EQ(1, vcu_image_uses_printf(b, n));
    n = tc_fatbin(b, VCU_FATBIN_KIND_PTX, 0x11, ".extern .func vprintf");
    ASSERT_EQ(1, vcu_image_uses_printf(b, n));
    /* A truncated fatbin is read as plain bytes. */
    ASSERT_EQ(0, vcu_image_uses_printf(b, 20));

    memset(&m, 0, sizeof(m));
    ASSERT_EQ(1, vcu_op_flushes_printf(VCU_OP_CU_MEMCPY_DTOH, &m));
    m.flags = VCU_CU_MEMCPY_F_ASYNC;
    ASSERT_EQ(0, vcu_op_flushes_printf(VCU_OP_CU_MEMCPY_DTOH, &m));
    ASSERT_EQ(1, vcu_op_flushes_printf(VCU_OP_CU_STREAM_SYNCHRONIZE, &m));
    ASSERT_EQ(0, vcu_op_flushes_printf(VCU_OP_CU_LAUNCH, &m));
    return 0;
}

/* CU_TAKE_OUTPUT into buf (cap bytes); returns the CUresult or 0x10000 +
 * wire status; *len and *more from the reply. */
static uint32_t tc_take(tc_t *c, uint64_t flags, char *buf, size_t cap, uint32_t *len,
                        uint32_t *more)
{
    struct vcu_cu_u64_req rq = {{0, 0}, flags};
    struct vcu_cu_output_resp rp;
    ut_req_t *t = ut_req_new();
    uint32_t st = tc_run(c, t, VCU_OP_CU_TAKE_OUTPUT, 0, &rq, sizeof(rq));

    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    if (st == VCU_S_OK) {
        *len = rp.len;
        *more = rp.more;
        if (rp.len > cap || ut_resp(t)->payload_len != sizeof(rp) + rp.len)
            st = VCU_S_ERANGE;
        else
            memcpy(buf, (char *)ut_resp_payload(t) + sizeof(rp), rp.len);
    }
    free(t);
    return st != VCU_S_OK ? 0x10000 + st : rp.r.result;
}

#define TC_PF_HELLO "_Z8pf_helloiPi"
#define TC_PF_PTX \
    "//\n.version 8.0\n.target sm_90\n.extern .func vprintf\n.visible .entry " TC_PF_HELLO "()\n{\n}\n"

TEST(cuda_printf_capture)
{
    vcu_backend_config_t cfg;
    unsigned char fr[256], p[16];
    static char got[VCU_MAX_PAYLOAD], big[64 * 1024];
    uint64_t mod, fn, d;
    uint32_t len, more;
    size_t total = 0;
    int32_t launch = 7;
    tc_t c;
    int i;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0";
    cfg.capture_printf = 1;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c.be));
    ASSERT_NULL(vcu_backend_cuda_error(c.be));
    ASSERT_EQ(VCU_S_OK, ut_open(c.be, &c.s));

    /* No printf module yet: nothing is the session's. */
    ASSERT_EQ(0, tc_take(&c, 0, got, sizeof(got), &len, &more));
    ASSERT_EQ(0, len);
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_take(&c, 2, got, sizeof(got), &len, &more));

    ASSERT_EQ(0, tc_module(&c, TC_PF_PTX, &mod));
    ASSERT_EQ(0, tc_func(&c, mod, TC_PF_HELLO, strlen(TC_PF_HELLO), 0, fr, sizeof(fr)));
    memcpy(&fn, fr + 8, sizeof(fn));
    ASSERT_EQ(0, tc_alloc(&c, 64, &d));
    memcpy(p, &launch, 4);
    memcpy(p + 8, &d, 8);
    ASSERT_EQ(0, tc_launch(&c, fn, 0, 2, 4, p, 16, 16));
    ASSERT_EQ(0, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    ASSERT_EQ(0, tc_take(&c, 0, got, sizeof(got), &len, &more));
    got[len] = '\0';
    ASSERT_EQ(0, strcmp(got, "hello from block 1 thread 2 launch 7\n"));
    ASSERT_EQ(0, more);
    ASSERT_EQ(0, tc_take(&c, 0, got, sizeof(got), &len, &more));
    ASSERT_EQ(0, len);

    /* Over 1 MiB: the rest is dropped, and the output says so once. */
    memset(big, 'x', sizeof(big));
    ASSERT_EQ(0, tc_launch(&c, fn, 0, 2, 4, p, 16, 16));
    for (i = 0; i < 20; i++)
        ASSERT_EQ((ssize_t)sizeof(big), write(1, big, sizeof(big)));
    ASSERT_EQ(0, tc_take(&c, VCU_CU_TAKE_F_SYNC, got, sizeof(got), &len, &more));
    total = len;
    while (more) {
        ASSERT_EQ(0, tc_take(&c, 0, got, sizeof(got), &len, &more));
        total += len;
    }
    got[len] = '\0';
    ASSERT_LE(total, (size_t)1 << 20);
    ASSERT_GT(total, ((size_t)1 << 20) - 256);
    ASSERT_NOT_NULL(strstr(got, "dropped]"));
    tc_close(&c);
    return 0;
}

/* Loopback: the backend leaves fd 1 alone and takes nothing. */
TEST(cuda_printf_no_capture)
{
    unsigned char fr[256];
    uint64_t mod;
    uint32_t len = 1, more = 1;
    char got[64];
    tc_t c;

    ASSERT_EQ(0, tc_open_gpus(&c, "0"));
    ASSERT_EQ(0, tc_module(&c, TC_PF_PTX, &mod));
    ASSERT_EQ(0, tc_func(&c, mod, TC_PF_HELLO, strlen(TC_PF_HELLO), 0, fr, sizeof(fr)));
    ASSERT_EQ(0, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    ASSERT_EQ(0, tc_take(&c, VCU_CU_TAKE_F_SYNC, got, sizeof(got), &len, &more));
    ASSERT_EQ(0, len);
    ASSERT_EQ(0, more);
    tc_close(&c);
    return 0;
}

/* ---- hostile guests ------------------------------------------------------ */

/* From the ASan runtime the tests are linked with (the header,
 * sanitizer/allocator_interface.h, is not installed with every gcc). */
size_t __sanitizer_get_current_allocated_bytes(void);

/* Sets up the vector_add twin's inputs; *params gets its 28 bytes. */
static int tc_vadd_setup(tc_t *c, uint64_t *fn, uint64_t *dc, unsigned char *params, int n)
{
    float a[64], b[64];
    uint64_t da = 0, db = 0;
    int i;

    CHECK(tc_vadd(c, fn));
    for (i = 0; i < 64; i++) {
        a[i] = (float)i;
        b[i] = 1000.0f;
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, sizeof(a), &da));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, sizeof(b), &db));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, sizeof(a), dc));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 1, da, a, sizeof(a), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 1, db, b, sizeof(b), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, *dc, 0, 4, 64, 1, 0, 0));
    memcpy(params + 0, &da, 8);
    memcpy(params + 8, &db, 8);
    memcpy(params + 16, dc, 8);
    memcpy(params + 24, &n, 4);
    return 0;
}

/* dc holds a + b for the first n elements (the rest 0). */
static int tc_vadd_check(tc_t *c, uint64_t dc, int n)
{
    float out[64];
    int i;

    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, dc, out, sizeof(out), NULL, 0, 0, 0));
    for (i = 0; i < 64; i++)
        ASSERT_TRUE(out[i] == (i < n ? (float)i + 1000.0f : 0.0f));
    return 0;
}

/* ---- cuLaunchKernelEx and cluster occupancy ------------------------------ */

/* One launch attribute on the wire. */
static struct vcu_cu_launch_attr tc_attr(uint32_t id, uint64_t handle, uint32_t v0, uint32_t v1,
                                         uint32_t v2)
{
    struct vcu_cu_launch_attr a;

    memset(&a, 0, sizeof(a));
    a.id = id;
    a.handle = handle;
    a.v[0] = v0;
    a.v[1] = v1;
    a.v[2] = v2;
    return a;
}

/*
 * A CU_LAUNCH_EX-shaped request (op: LAUNCH_EX or a cluster occupancy
 * query) for fn on stream, grid gx x gy x 1 of 64-thread blocks; sends
 * plen_cut bytes fewer than it built.  Returns the CUresult, or 0x10000 +
 * wire status; *value the reply's value.
 */
static uint32_t tc_launch_ex(tc_t *c, uint32_t op, uint32_t dev, uint64_t fn, uint64_t stream,
                             uint32_t gx, uint32_t gy, uint32_t block,
                             const struct vcu_cu_launch_attr *attrs, uint32_t nattrs,
                             uint32_t nattrs_field, const unsigned char *params,
                             uint32_t pbytes, uint32_t plen_cut, uint64_t *value)
{
    static unsigned char p[sizeof(struct vcu_cu_launch_ex_req) +
                           20 * sizeof(struct vcu_cu_launch_attr) + 256];
    struct vcu_cu_launch_ex_req rq;
    struct vcu_cu_u64_resp rp;
    size_t off = sizeof(rq);
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.l.hdr.device = dev;
    rq.l.function = fn;
    rq.l.stream = stream;
    rq.l.grid[0] = gx;
    rq.l.grid[1] = gy;
    rq.l.grid[2] = 1;
    rq.l.block[0] = block;
    rq.l.block[1] = rq.l.block[2] = 1;
    rq.l.param_bytes = pbytes;
    rq.nattrs = nattrs_field;
    memcpy(p, &rq, sizeof(rq));
    if (nattrs > 0)
        memcpy(p + off, attrs, nattrs * sizeof(*attrs));
    off += nattrs * sizeof(*attrs);
    if (pbytes > 0)
        memcpy(p + off, params, pbytes);
    off += pbytes;
    st = tc_do(c, op, 0, p, (uint32_t)(off - plen_cut), &rp, sizeof(rp));
    if (value != NULL)
        *value = rp.value;
    return st != VCU_S_OK ? 0x10000 + st : rp.r.result;
}

/* CU_LAUNCH_EX runs the kernel with every attribute the wire carries. */
TEST(cuda_launch_ex)
{
    struct vcu_cu_launch_attr a[12];
    unsigned char params[32];
    uint64_t fn = 0, dc = 0, ev = 0, s;
    tc_t c;

    CHECK(tc_open(&c));
    CHECK(tc_vadd_setup(&c, &fn, &dc, params, 64));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, CU_EVENT_DISABLE_TIMING, &ev));
    /* No attribute. */
    ASSERT_EQ(CUDA_SUCCESS, tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, fn, 0, 1, 1, 64, NULL, 0, 0,
                                         params, 28, 0, NULL));
    CHECK(tc_vadd_check(&c, dc, 64));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, dc, 0, 4, 64, 1, 0, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 2, 1, 1);
    a[1] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, 0,
                   CU_CLUSTER_SCHEDULING_POLICY_SPREAD, 0, 0);
    a[2] = tc_attr(CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 0, 1, 0, 0);
    a[3] = tc_attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 0, 1, 0, 0);
    a[4] = tc_attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, 0, (uint32_t)-1, 0, 0);
    a[5] = tc_attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, 0, CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE, 0, 0);
    a[6] = tc_attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, 0, 0, 1, 0);
    a[7] = tc_attr(CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 0, 50, 0, 0);
    a[8] = tc_attr(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, ev, 0, 0, 0);
    a[9] = tc_attr(CU_LAUNCH_ATTRIBUTE_IGNORE, 0, 0, 0, 0);
    /* Two blocks of 32: the second block adds the upper half. */
    ASSERT_EQ(CUDA_SUCCESS, tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, fn, s, 2, 1, 32, a, 10, 10,
                                         params, 28, 0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_SYNCHRONIZE, 0, ev, NULL));
    CHECK(tc_vadd_check(&c, dc, 64));
    /* A programmatic event, triggered at block start; the default carveout. */
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, ev, 0, 1, 0);
    a[1] = tc_attr(CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 0,
                   (uint32_t)CU_SHAREDMEM_CARVEOUT_DEFAULT, 0, 0);
    ASSERT_EQ(CUDA_SUCCESS, tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, fn, s, 1, 1, 64, a, 2, 2,
                                         params, 28, 0, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    /* The stand-in refuses a grid that is not whole clusters: the
     * attribute reached it. */
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 2, 1, 1);
    ASSERT_EQ(CUDA_ERROR_INVALID_CLUSTER_SIZE,
              tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, fn, 0, 3, 1, 32, a, 1, 1, params, 28, 0,
                           NULL));
    tc_close(&c);
    return 0;
}

/* CU_LAUNCH_EX from a hostile guest: each field checked before the driver. */
TEST(cuda_launch_ex_hostile)
{
    struct vcu_cu_launch_attr a[20];
    unsigned char params[32];
    uint64_t fn = 0, dc = 0, ev = 0, ev1 = 0, dead_ev = 0, s;
    unsigned int i;
    tc_t c;

#define LX(n, nf, gx, gy, blk, pb, cut) \
    tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, fn, 0, gx, gy, blk, a, n, nf, params, pb, cut, NULL)
    CHECK(tc_open(&c));
    CHECK(tc_vadd_setup(&c, &fn, &dc, params, 64));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, CU_EVENT_DISABLE_TIMING, &ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 1, CU_EVENT_DISABLE_TIMING, &ev1));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &dead_ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_DESTROY, 0, dead_ev, NULL));
    for (i = 0; i < 20; i++)
        a[i] = tc_attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, 0, 0, 0, 0);
    ASSERT_EQ(CUDA_SUCCESS, LX(16, 16, 1, 1, 64, 28, 0));
    CHECK(tc_vadd_check(&c, dc, 64));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, dc, 0, 4, 64, 1, 0, 0));
    /* Counts and sizes: too many attributes, fewer than the count says,
     * parameters past the payload, over the limit. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, LX(17, 17, 1, 1, 64, 28, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, LX(0, 0xffffffffu, 1, 1, 64, 28, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, LX(2, 3, 1, 1, 64, 0, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, LX(2, 2, 1, 1, 64, 28, 1));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, LX(2, 2, 1, 1, 64, 28, 28 + 64));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(2, 2, 1, 1, 64, 24, 0));   /* not the layout */
    /* Dims: zero, too many threads, grid y beyond 65535. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(0, 0, 0, 1, 64, 28, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(0, 0, 1, 0, 64, 28, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(0, 0, 1, 1, 0, 28, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(0, 0, 1, 1, 1025, 28, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(0, 0, 1, 65536, 64, 28, 0));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(0, 0, 0x80000000u, 1, 64, 28, 0));
    /* Attribute ids the wire does not carry, named in the log. */
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, 0, 0, 0, 0);
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, 0, 1, 0, 0);
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(0xffffffffu, 0, 0, 0, 0);
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, LX(1, 1, 1, 1, 64, 28, 0));
    /* Values out of range. */
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, 0, 0, 0, 0);
    a[0].reserved = 1;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PRIORITY, ev, 0, 0, 0);       /* a handle where none is */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 0, 1, 1);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 1, 1, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 0x80000000u, 2, 2);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION, 0, 8, 8, 1);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, 0, 3, 0, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, 0, 2, 0, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, 0, 0, 2, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 0, 101, 0, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, ev, 0, 2, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, ev, 0x80000000u, 0, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, LX(1, 1, 1, 1, 64, 28, 0));
    /* Events that are not the session's on this device. */
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, s, 0, 0, 0);        /* a stream */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, dead_ev, 0, 0, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, 0x1234567890ull, 0, 0, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, ev1, 0, 0, 0); /* device 1 */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, LX(1, 1, 1, 1, 64, 28, 0));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, 0, 0, 0, 0);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, LX(1, 1, 1, 1, 64, 28, 0));
    /* Flags and reserved fields of the request. */
    {
        unsigned char p[sizeof(struct vcu_cu_launch_ex_req) + 32];
        struct vcu_cu_launch_ex_req rq;
        struct vcu_cu_resp rp;

        memset(&rq, 0, sizeof(rq));
        rq.l.function = fn;
        rq.l.grid[0] = rq.l.grid[1] = rq.l.grid[2] = 1;
        rq.l.block[0] = 64;
        rq.l.block[1] = rq.l.block[2] = 1;
        rq.l.param_bytes = 28;
        rq.l.flags = VCU_CU_LAUNCH_F_COOPERATIVE;       /* an attribute here */
        memcpy(p, &rq, sizeof(rq));
        memcpy(p + sizeof(rq), params, 28);
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_LAUNCH_EX, 0, p, sizeof(rq) + 28, &rp, sizeof(rp)));
        rq.l.flags = 0;
        rq.reserved = 1;
        memcpy(p, &rq, sizeof(rq));
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_LAUNCH_EX, 0, p, sizeof(rq) + 28, &rp, sizeof(rp)));
        rq.reserved = 0;
        memcpy(p, &rq, sizeof(rq));
        ASSERT_EQ(VCU_S_EINVAL, tc_do(&c, VCU_OP_CU_LAUNCH_EX, 0, p, sizeof(rq) - 1, &rp, sizeof(rp)));
    }
    /* Function, stream and device handles. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, fn + 1, 0, 1, 1, 64, a, 0, 0, params, 28, 0,
                           NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, ev, 0, 1, 1, 64, a, 0, 0, params, 28, 0,
                           NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 0, fn, ev, 1, 1, 64, a, 0, 0, params, 28, 0,
                           NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE,
              tc_launch_ex(&c, VCU_OP_CU_LAUNCH_EX, 9, fn, 0, 1, 1, 64, a, 0, 0, params, 28, 0,
                           NULL));
    /* Nothing above ran the kernel: dc is as the setup left it. */
    CHECK(tc_vadd_check(&c, dc, 0));
#undef LX
    tc_close(&c);
    return 0;
}

/* CU_OCCUPANCY_CLUSTERS and CU_OCCUPANCY_CLUSTER_SIZE: the driver's
 * answers for a config; the same checks as a launch, no parameters. */
TEST(cuda_occupancy_clusters)
{
    struct vcu_cu_launch_attr a[2];
    unsigned char params[32];
    uint64_t fn = 0, dc = 0, two = 0, four = 0, size = 0;
    tc_t c;

    CHECK(tc_open(&c));
    CHECK(tc_vadd_setup(&c, &fn, &dc, params, 64));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 2, 1, 1);
    ASSERT_EQ(CUDA_SUCCESS, tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTERS, 0, fn, 0, 8, 1, 128, a,
                                         1, 1, NULL, 0, 0, &two));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 4, 1, 1);
    ASSERT_EQ(CUDA_SUCCESS, tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTERS, 0, fn, 0, 8, 1, 128, a,
                                         1, 1, NULL, 0, 0, &four));
    ASSERT_GT(two, 0);
    ASSERT_GT(two, four);                   /* bigger clusters, fewer of them */
    ASSERT_EQ(CUDA_SUCCESS, tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE, 0, fn, 0, 8, 1, 128,
                                         a, 0, 0, NULL, 0, 0, &size));
    ASSERT_EQ(8, size);
    /* No cluster size given, none required by the kernel. */
    ASSERT_EQ(CUDA_ERROR_INVALID_CLUSTER_SIZE,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTERS, 0, fn, 0, 8, 1, 128, a, 0, 0, NULL,
                           0, 0, NULL));
    /* Parameters are not part of the question. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTERS, 0, fn, 0, 8, 1, 128, a, 1, 1, params,
                           28, 0, NULL));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE, 0, fn, 0, 8, 1, 128, a, 1, 1,
                           params, 28, 0, NULL));
    /* The launch's checks. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTERS, 0, fn, 0, 8, 1, 128, a, 1, 17, NULL,
                           0, 0, NULL));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 0, 0, 1, 1);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTERS, 0, fn, 0, 8, 1, 128, a, 1, 1, NULL,
                           0, 0, NULL));
    a[0] = tc_attr(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, 0, 0, 0, 0);
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE, 0, fn, 0, 8, 1, 128, a, 1, 1,
                           NULL, 0, 0, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE, 0, fn, 0, 8, 1, 0, a, 0, 0,
                           NULL, 0, 0, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_launch_ex(&c, VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE, 0, dc, 0, 8, 1, 128, a, 0, 0,
                           NULL, 0, 0, NULL));
    tc_close(&c);
    return 0;
}

/* ---- tensor maps ----------------------------------------------------------- */

static uint32_t tc_tmap(tc_t *c, const struct vcu_cu_tmap_req *q, struct vcu_cu_tmap_resp *rp)
{
    uint32_t st = tc_do(c, VCU_OP_CU_TENSOR_MAP, 0, q, sizeof(*q), rp, sizeof(*rp));

    return st != VCU_S_OK ? 0x10000 + st : rp->r.result;
}

/* A 2-D tiled map of 64 x 32 floats at p, 16 x 8 boxes. */
static void tc_tmap_tiled(struct vcu_cu_tmap_req *q, uint64_t p)
{
    memset(q, 0, sizeof(*q));
    q->kind = VCU_CU_TMAP_TILED;
    q->data_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    q->rank = 2;
    q->global_address = p;
    q->global_dim[0] = 64;
    q->global_dim[1] = 32;
    q->global_strides[0] = 64 * 4;
    q->box_dim[0] = 16;
    q->box_dim[1] = 8;
    q->element_strides[0] = q->element_strides[1] = 1;
}

/* CU_TENSOR_MAP: the driver's map comes back; the arrays are bounded by
 * rank and what lies beyond it is refused. */
TEST(cuda_tensor_map)
{
    struct vcu_cu_tmap_req q;
    struct vcu_cu_tmap_resp rp;
    uint64_t p = 0, w[16];
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 64 * 32 * 4, &p));
    tc_tmap_tiled(&q, p);
    ASSERT_EQ(CUDA_SUCCESS, tc_tmap(&c, &q, &rp));
    memcpy(w, rp.map, sizeof(w));
    ASSERT_EQ_U64(p, w[0]);                 /* the stand-in's encoding */
    ASSERT_EQ_U64(64, w[1]);
    ASSERT_EQ_U64(32, w[2]);
    ASSERT_EQ_U64(256, w[6]);
    ASSERT_EQ_U64(1, w[13]);
    /* A new address in the same map. */
    memset(&q, 0, sizeof(q));
    q.kind = VCU_CU_TMAP_REPLACE_ADDRESS;
    q.global_address = p + 1024;
    memcpy(q.map, rp.map, sizeof(q.map));
    ASSERT_EQ(CUDA_SUCCESS, tc_tmap(&c, &q, &rp));
    memcpy(w, rp.map, sizeof(w));
    ASSERT_EQ_U64(p + 1024, w[0]);
    ASSERT_EQ_U64(64, w[1]);
    q.global_address = p + 4;               /* misaligned: the driver says so */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_tmap(&c, &q, &rp));
    /* The driver's own checks. */
    tc_tmap_tiled(&q, p + 4);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.box_dim[0] = 0;
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_tmap(&c, &q, &rp));
    /* Ours: rank, kinds, entries past the rank, fields of the other kind. */
    tc_tmap_tiled(&q, p);
    q.rank = 0;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    q.rank = 6;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    q.rank = 0xffffffffu;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.kind = 9;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.global_dim[2] = 5;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.global_strides[1] = 16;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.box_dim[4] = 1;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.lower_corner[0] = 1;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.channels_per_pixel = 8;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.reserved = 1;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_tmap_tiled(&q, p);
    q.hdr.device = 7;
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, tc_tmap(&c, &q, &rp));
    /* Im2col: rank 3 to 5, corners for rank - 2 dims. */
    memset(&q, 0, sizeof(q));
    q.kind = VCU_CU_TMAP_IM2COL;
    q.data_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    q.rank = 3;
    q.global_address = p;
    q.global_dim[0] = 16;           /* channels */
    q.global_dim[1] = 32;           /* width */
    q.global_dim[2] = 4;            /* batch */
    q.global_strides[0] = 16 * 2;
    q.global_strides[1] = 16 * 2 * 32;
    q.element_strides[0] = q.element_strides[1] = q.element_strides[2] = 1;
    q.lower_corner[0] = (uint32_t)-1;
    q.upper_corner[0] = 1;
    q.channels_per_pixel = 16;
    q.pixels_per_column = 32;
    ASSERT_EQ(CUDA_SUCCESS, tc_tmap(&c, &q, &rp));
    memcpy(w, rp.map, sizeof(w));
    ASSERT_EQ_U64(2, w[13]);
    ASSERT_EQ_U64(0x1ff, w[10]);
    q.lower_corner[1] = 1;          /* past rank - 2 */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    q.lower_corner[1] = 0;
    q.rank = 2;
    q.global_dim[2] = 0;
    q.global_strides[1] = 0;
    q.element_strides[2] = 0;
    q.lower_corner[0] = q.upper_corner[0] = 0;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_tmap(&c, &q, &rp));
    tc_close(&c);
    return 0;
}

static uint32_t tc_kernel_node(tc_t *c, uint64_t g, uint64_t fn, const unsigned char *params,
                               uint64_t *node)
{
    unsigned char p[sizeof(struct vcu_cu_graph_node_req) + 32];
    struct vcu_cu_graph_node_req nq;
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_KERNEL;
    nq.function = fn;
    nq.grid[0] = 1;
    nq.grid[1] = nq.grid[2] = 1;
    nq.block[0] = 64;
    nq.block[1] = nq.block[2] = 1;
    nq.param_bytes = 28;
    memcpy(p, &nq, sizeof(nq));
    memcpy(p + sizeof(nq), params, 28);
    st = tc_do(c, VCU_OP_CU_GRAPH_ADD_NODE, 0, p, (uint32_t)(sizeof(nq) + 28), &rp, sizeof(rp));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *node = rp.value;
    return rp.r.result;
}

static uint32_t tc_instantiate(tc_t *c, uint64_t g, uint64_t *ge)
{
    struct vcu_cu_u64_resp rp;
    uint32_t r = tc_pair(c, VCU_OP_CU_GRAPH_INSTANTIATE, g, 0, 0, &rp, sizeof(rp));

    *ge = rp.value;
    return r;
}

/*
 * Finding 1: a context flag the guest sets must not reach the driver's
 * core dump machinery (CU_CTX_COREDUMP_ENABLE made one faulting kernel
 * write a GPU core dump into QEMU's working directory and abort() it;
 * CU_CTX_USER_COREDUMP_ENABLE made the driver create a named pipe), and
 * core dumps are off for the whole process from driver init on.
 */
TEST(sec_ctx_flags_coredump)
{
    CUresult (*get)(CUcoredumpSettings, void *, size_t *) = NULL;
    CUresult (*set)(CUcoredumpSettings, void *, size_t *) = NULL;
    static const CUcoredumpSettings off[] = {CU_COREDUMP_ENABLE_ON_EXCEPTION,
                                             CU_COREDUMP_TRIGGER_HOST,
                                             CU_COREDUMP_ENABLE_USER_TRIGGER};
    const char *lib = getenv("VCU_LIBCUDA");
    void *dl;
    size_t sz = sizeof(bool);
    unsigned int i;
    bool b = true;
    tc_t c;

    /* What a host administrator or a previous user may have left on. */
    setenv("CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "1", 1);
    setenv("CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION", "1", 1);
    setenv("CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "1", 1);
    setenv("CUDA_COREDUMP_PIPE", "/tmp/vcu-unit-corepipe", 1);
    ASSERT_NOT_NULL(lib);
    dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NOT_NULL(dl);
    *(void **)&get = dlsym(dl, "cuCoredumpGetAttributeGlobal");
    *(void **)&set = dlsym(dl, "cuCoredumpSetAttributeGlobal");
    ASSERT_NOT_NULL(get);
    ASSERT_NOT_NULL(set);
    for (i = 0; i < sizeof(off) / sizeof(off[0]); i++)
        ASSERT_EQ(CUDA_SUCCESS, set(off[i], &b, &sz));

    CHECK(tc_open(&c));
    ASSERT_STR_EQ("0", getenv("CUDA_ENABLE_COREDUMP_ON_EXCEPTION"));
    ASSERT_STR_EQ("0", getenv("CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION"));
    ASSERT_STR_EQ("0", getenv("CUDA_ENABLE_USER_TRIGGERED_COREDUMP"));
    ASSERT_NULL(getenv("CUDA_COREDUMP_PIPE"));
    for (i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        b = true;
        ASSERT_EQ(CUDA_SUCCESS, get(off[i], &b, &sz));
        ASSERT_EQ(0, b);
    }

    /* Refused before the context exists (kept for its creation) and after. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0, CU_CTX_COREDUMP_ENABLE, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0, CU_CTX_USER_COREDUMP_ENABLE, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0, 0x100, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0,
                                   CU_CTX_SCHED_BLOCKING_SYNC | CU_CTX_MAP_HOST |
                                       CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0, CU_CTX_SCHED_SPIN | CU_CTX_COREDUMP_ENABLE,
                     NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SET_FLAGS, 0, CU_CTX_SCHED_YIELD, NULL));
    tc_close(&c);
    dlclose(dl);
    return 0;
}

/*
 * Finding 2: a graph and its instantiation keep using the functions of
 * their kernel nodes; unloading the module under them made the next
 * launch follow dangling pointers inside libcuda (a segfault; the
 * stand-in aborts there).  The module must live until its last user goes.
 */
TEST(sec_graph_module_unload)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    unsigned char params[32];
    uint64_t fn = 0, dc = 0, g = 0, g2 = 0, ge = 0, node = 0, mod = 0;
    tc_t c;

    CHECK(tc_open(&c));
    CHECK(tc_vadd_setup(&c, &fn, &dc, params, 40));
    /* A module of the test's own, unloaded under the graph. */
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(&c, mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    memcpy(&fn, fr + offsetof(struct vcu_cu_function_resp, function), 8);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_kernel_node(&c, g, fn, params, &node));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g, &ge));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CLONE, 0, g, &g2));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, mod, NULL));
    /* The guest's handles are gone at once... */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, mod, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_FUNC_GET_ATTRS, 0, fn, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_kernel_node(&c, g, fn, params, &node));
    /* ...the graph exec still runs the kernel... */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, ge, 0, 0, NULL, 0));
    CHECK(tc_vadd_check(&c, dc, 40));
    /* ...and so does one instantiated after the unload. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, ge, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, dc, 0, 4, 64, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g, &ge));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, ge, 0, 0, NULL, 0));
    CHECK(tc_vadd_check(&c, dc, 40));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, ge, NULL));
    /* The clone still holds the module; the session's end releases both. */
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g2, &ge));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, ge, 0, 0, NULL, 0));
    tc_close(&c);
    return 0;
}

/* Finding 2, by stream capture: a launch on a capturing stream is a
 * kernel node of the captured graph. */
TEST(sec_capture_module_unload)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    unsigned char params[32];
    uint64_t fn = 0, dc = 0, g = 0, ge = 0, mod = 0, s;
    tc_t c;

    CHECK(tc_open(&c));
    CHECK(tc_vadd_setup(&c, &fn, &dc, params, 30));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(&c, mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    memcpy(&fn, fr + offsetof(struct vcu_cu_function_resp, function), 8);
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_launch(&c, fn, s, 1, 64, params, 28, 28));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, mod, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g, &ge));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, ge, 0, 0, NULL, 0));
    CHECK(tc_vadd_check(&c, dc, 30));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, ge, NULL));
    /* A capture left open over an unload, for the session's end. */
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(&c, mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    memcpy(&fn, fr + offsetof(struct vcu_cu_function_resp, function), 8);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_launch(&c, fn, s, 1, 64, params, 28, 28));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MODULE_UNLOAD, 0, mod, NULL));
    tc_close(&c);
    return 0;
}

/*
 * Finding 3: an async CU_CALLBACK_WAIT with room for the reply header
 * only, as the session's first CUDA request, was parked with its reply
 * pointing into the queue item, which the worker then freed: the cancel
 * at close (or a callback) wrote into freed heap.  The payload is made
 * long and unaligned so that the item is one of its own, freed (not
 * cached), and ASan sees the write.
 */
TEST(sec_callback_wait_async_item)
{
    unsigned char p[512];
    ut_req_t *t = ut_req_new();
    struct vcu_cu_hdr h = {0, 0};
    tc_t c;

    CHECK(tc_open(&c));
    memset(p, 0, sizeof(p));
    memcpy(p, &h, sizeof(h));
    ut_req_build(t, VCU_OP_CU_CALLBACK_WAIT, c.s, p, sizeof(p));
    ut_hdr(t)->flags = VCU_REQ_F_ASYNC;
    memmove((char *)t->reqbuf + 4, t->reqbuf, t->r.req_len);
    t->r.req = (char *)t->reqbuf + 4;
    t->r.resp_cap = sizeof(struct vcu_resp_hdr);
    vcu_backend_submit(c.be, &t->r);
    tc_nap();                       /* the worker has run it */
    /* The close cancels a parked WAIT, writing its reply. */
    ASSERT_EQ(VCU_S_OK, ut_close(c.be, c.s));
    /* An async WAIT has no reader: it must not park, and replied at once
     * in the guest's own buffer. */
    ASSERT_EQ(1, atomic_load(&t->ndone));
    ASSERT_TRUE(t->r.resp == (void *)t->respbuf);
    ASSERT_EQ(VCU_S_EINVAL, ut_status(t));
    vcu_backend_free(c.be);
    free(t);
    return 0;
}

/*
 * Finding 4: a function handle cost 8 KiB of host heap (its parameter
 * layout was allocated for VCU_CU_MAX_PARAMS entries whatever the
 * kernel took), so 2^20 handles pinned 8 GiB.
 */
TEST(sec_function_handle_cost)
{
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    uint64_t fn = 0, mod = 0;
    size_t before, after;
    int i;
    tc_t c;

    CHECK(tc_open(&c));
    CHECK(tc_vadd(&c, &fn));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    before = __sanitizer_get_current_allocated_bytes();
    for (i = 0; i < 2000; i++)
        ASSERT_EQ(CUDA_SUCCESS, tc_func(&c, mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr,
                                        sizeof(fr)));
    after = __sanitizer_get_current_allocated_bytes();
    /* A table entry and 4 parameters: well under 256 bytes a handle. */
    ASSERT_LT(after - before, 2000 * 256);
    tc_close(&c);
    return 0;
}

/*
 * Finding 5: the device's default memory pool was shared by every
 * session: a block one session freed reached another with its data, and
 * pool attributes set by one applied to all.
 */
TEST(sec_mempool_per_session)
{
    unsigned char pat[4096], got[4096], zero[4096];
    struct vcu_cu_mem_alloc_req mq;
    struct vcu_cu_memcpy_req fq;
    struct vcu_cu_attr_req aq;
    struct vcu_cu_u64_resp rp;
    struct vcu_cu_resp r;
    uint64_t pa = 0, pb = 0, pool_a = 0, pool_b = 0;
    tc_t a, b;

    CHECK(tc_open(&a));
    b.be = a.be;
    ASSERT_EQ(VCU_S_OK, ut_open(b.be, &b.s));
    memset(&mq, 0, sizeof(mq));
    mq.size = sizeof(pat);
    ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    pa = rp.value;
    memset(pat, 0x5a, sizeof(pat));
    memset(zero, 0, sizeof(zero));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&a, 1, pa, pat, sizeof(pat), NULL, 0, 0, 0));
    memset(&fq, 0, sizeof(fq));
    fq.dst = pa;
    ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_MEM_FREE_ASYNC, 0, &fq, sizeof(fq), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    /* B's stream-ordered allocation never holds A's bytes. */
    ASSERT_EQ(VCU_S_OK, tc_do(&b, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    pb = rp.value;
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&b, 0, pb, got, sizeof(got), NULL, 0, 0, 0));
    ASSERT_MEM_EQ(zero, got, sizeof(got));

    /* Each session's default pool is its own. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_MEMPOOL_GET_DEFAULT, 0, 0, &pool_a));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&b, VCU_OP_CU_MEMPOOL_GET_DEFAULT, 0, 0, &pool_b));
    memset(&aq, 0, sizeof(aq));
    aq.handle = pool_a;
    aq.attr = CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
    aq.value = 123456;
    ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_MEMPOOL_SET_ATTR, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    aq.handle = pool_b;
    ASSERT_EQ(VCU_S_OK, tc_do(&b, VCU_OP_CU_MEMPOOL_GET_ATTR, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    ASSERT_EQ_U64(0, rp.value);
    aq.handle = pool_a;
    ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_MEMPOOL_GET_ATTR, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ_U64(123456, rp.value);
    /* Its own pool's data is the session's own to see again. */
    ASSERT_EQ(VCU_S_OK, tc_do(&a, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    /* Trim works on the session's pool; allocations stay for the end. */
    {
        struct vcu_call_cuMemPoolTrimTo_req tq;

        TC_CALL_INIT(tq, cuMemPoolTrimTo, 0);
        tq.pool = pool_a;
        tq.minBytesToKeep = 0;
        ASSERT_EQ(CUDA_SUCCESS, tc_call(&a, &tq, sizeof(tq), NULL, 0));
        /* A forged handle, and a handle of another type. */
        tq.pool = 0x1234;
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&a, &tq, sizeof(tq), NULL, 0));
        ASSERT_EQ(CUDA_SUCCESS, tc_u64(&a, VCU_OP_CU_EVENT_CREATE, 0, 0, &tq.pool));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&a, &tq, sizeof(tq), NULL, 0));
    }
    ASSERT_EQ(VCU_S_OK, ut_close(b.be, b.s));
    tc_close(&a);
    return 0;
}

/*
 * Finding 6: a capture in CU_STREAM_CAPTURE_MODE_GLOBAL forbids unsafe
 * calls in the whole process: one session's capture made every other
 * session's cuMemAlloc fail.  The session itself sees what it would
 * natively (its own allocation during the capture fails and invalidates
 * it).
 */
TEST(sec_capture_global_confined)
{
    uint64_t s, p = 0, g = 0;
    tc_t a, b;

    CHECK(tc_open(&a));
    b.be = a.be;
    ASSERT_EQ(VCU_S_OK, ut_open(b.be, &b.s));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&b, 64, &p));
    s = tc_stream_new(&a);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&a, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_GLOBAL, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&b, 64, &p));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&b, VCU_OP_CU_MEM_FREE, 0, p, NULL));
    ASSERT_EQ(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, tc_alloc(&a, 64, &p));
    ASSERT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
              tc_u64(&a, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(VCU_S_OK, ut_close(b.be, b.s));
    tc_close(&a);
    return 0;
}

/*
 * Finding 2, across devices: a function named through device 1 from a
 * module of device 0 must not outlive the module when device 0's
 * context is reset (a launch into a capture reads its module).
 */
TEST(sec_ctx_reset_cross_device_function)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_resp r;
    unsigned char params[28];
    uint64_t mod = 0, fn, s1;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX, &mod));
    fn = tc_fn_dev(&c, 1, mod, TC_VADD);
    ASSERT_NE(0, fn);
    s1 = tc_stream_dev(&c, 1);
    ASSERT_NE(0, s1);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_RESET, 0, &h, sizeof(h), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    {
        struct vcu_cu_pair_req bq = {{1, 0}, s1, CU_STREAM_CAPTURE_MODE_RELAXED, 0};

        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, 0, &bq, sizeof(bq), &r,
                                  sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.result);
    }
    memset(params, 0, sizeof(params));
    {
        unsigned char lp[sizeof(struct vcu_cu_launch_req) + 28];
        struct vcu_cu_launch_req lq;

        memset(&lq, 0, sizeof(lq));
        lq.hdr.device = 1;
        lq.function = fn;
        lq.stream = s1;
        lq.grid[0] = lq.grid[1] = lq.grid[2] = 1;
        lq.block[0] = lq.block[1] = lq.block[2] = 1;
        lq.param_bytes = 28;
        memcpy(lp, &lq, sizeof(lq));
        memcpy(lp + sizeof(lq), params, 28);
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_LAUNCH, 0, lp, sizeof(lp), &r, sizeof(r)));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, r.result);
    }
    tc_close(&c);
    return 0;
}

/* ---- CU_CALL: the generated calls (cuda_calls.list's "remote") --------- */

/* A stream on device dev. */
static uint64_t tc_stream_on(tc_t *c, uint32_t dev)
{
    struct vcu_cu_stream_create_req sq = {{dev, 0}, 0, 0};
    struct vcu_cu_u64_resp sr;

    if (tc_do(c, VCU_OP_CU_STREAM_CREATE, 0, &sq, sizeof(sq), &sr, sizeof(sr)) != VCU_S_OK ||
        sr.r.result != CUDA_SUCCESS)
        return 0;
    return sr.value;
}

/* A well-formed call reaches the driver and its struct result comes back. */
TEST(cuda_call_roundtrip)
{
    struct vcu_call_cuStreamSetAttribute_req sq;
    struct vcu_call_cuStreamGetAttribute_req gq;
    struct vcu_call_cuStreamGetAttribute_resp gr;
    struct vcu_call_cuDeviceGetP2PAttribute_req pq;
    struct vcu_call_cuDeviceGetP2PAttribute_resp pr;
    CUstreamAttrValue v, w;
    tc_t c;
    uint64_t s;

    if (tc_open(&c) != 0)
        return 1;
    s = tc_stream_on(&c, 0);
    ASSERT_GE(s, VCU_CU_HANDLE_MIN);
    memset(&v, 0, sizeof(v));
    v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)0x10000;
    v.accessPolicyWindow.num_bytes = 4096;
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
    TC_CALL_INIT(sq, cuStreamSetAttribute, 0);
    sq.hStream = s;
    sq.attr = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
    memcpy(sq.value, &v, sizeof(v));
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    TC_CALL_INIT(gq, cuStreamGetAttribute, 0);
    gq.hStream = s;
    gq.attr = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &gq, sizeof(gq), &gr, sizeof(gr)));
    memcpy(&w, gr.value_out, sizeof(w));
    ASSERT_EQ(4096, w.accessPolicyWindow.num_bytes);
    ASSERT_EQ(0x10000, (uintptr_t)w.accessPolicyWindow.base_ptr);
    /* The legacy stream is anyone's. */
    gq.hStream = VCU_CU_STREAM_LEGACY;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &gq, sizeof(gq), &gr, sizeof(gr)));
    /* Two devices: a peer attribute the stand-in answers. */
    TC_CALL_INIT(pq, cuDeviceGetP2PAttribute, 0);
    pq.attrib = CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED;
    pq.srcDevice = 0;
    pq.dstDevice = 1;
    memset(&pr, 0xff, sizeof(pr));
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &pq, sizeof(pq), &pr, sizeof(pr)));
    ASSERT_EQ(1, pr.value);
    tc_close(&c);
    return 0;
}

/*
 * What a hostile guest may put in a CU_CALL: an unknown call number,
 * another list's hash, a payload shorter or longer than the call's (a
 * struct argument of the wrong size among them), slots their C type
 * cannot hold, selectors the list does not carry, handles of another
 * type, forged, destroyed or of another device, devices out of range, a
 * reply buffer too small.  Each is refused before the driver sees it.
 */
TEST(cuda_call_hostile)
{
    struct vcu_call_cuStreamSetAttribute_req sq;
    struct vcu_call_cuStreamGetAttribute_req gq;
    struct vcu_call_cuStreamGetAttribute_resp gr;
    struct vcu_call_cuDeviceGetP2PAttribute_req pq;
    struct vcu_call_cuDeviceGetP2PAttribute_resp pr;
    struct vcu_call_cuCtxResetPersistingL2Cache_req lq;
    unsigned char big[sizeof(sq) + 16];
    CUstreamAttrValue v;
    uint64_t s, s1, ev = 0, gone;
    tc_t c;

    if (tc_open(&c) != 0)
        return 1;
    s = tc_stream_on(&c, 0);
    s1 = tc_stream_on(&c, 1);
    gone = tc_stream_on(&c, 0);
    ASSERT_GE(s, VCU_CU_HANDLE_MIN);
    ASSERT_GE(s1, VCU_CU_HANDLE_MIN);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_DESTROY, 0, gone, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, CU_EVENT_DISABLE_TIMING, &ev));
    memset(&v, 0, sizeof(v));
    v.syncPolicy = CU_SYNC_POLICY_YIELD;
    TC_CALL_INIT(sq, cuStreamSetAttribute, 0);
    sq.hStream = s;
    sq.attr = CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;
    memcpy(sq.value, &v, sizeof(v));
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &sq, sizeof(sq), NULL, 0));

    /* Call numbers and the list's hash. */
    sq.c.call = 0xfffe;
    ASSERT_EQ(0x10000 + VCU_S_ENOTSUP, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.c.call = 0;
    ASSERT_EQ(0x10000 + VCU_S_ENOTSUP, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.c.call = VCU_CALL_cuStreamSetAttribute;
    sq.c.hash = VCU_CALLS_HASH ^ 1;
    ASSERT_EQ(0x10000 + VCU_S_EVERSION, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.c.hash = VCU_CALLS_HASH;

    /* Lengths: exactly the call's, the struct argument whole. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &sq, sizeof(sq) - 8, NULL, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &sq, sizeof(sq) - 1, NULL, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &sq, sizeof(struct vcu_cu_call_req), NULL, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &sq, 8, NULL, 0));
    memset(big, 0, sizeof(big));
    memcpy(big, &sq, sizeof(sq));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, big, sizeof(sq) + 8, NULL, 0));
    TC_CALL_INIT(lq, cuCtxResetPersistingL2Cache, 0);
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &lq, sizeof(lq), NULL, 0));
    memcpy(big, &lq, sizeof(lq));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, big, sizeof(lq) + 8, NULL, 0));

    /* Slots: an enum that does not fit 32 bits; selectors not carried
     * (an event member would name a guest object; the priority is the
     * guest's to keep). */
    sq.attr = (1ull << 32) | CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.attr = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    v.programmaticEvent.event = (CUevent)(uintptr_t)ev;
    memcpy(sq.value, &v, sizeof(v));
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.attr = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.attr = 999;
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.attr = CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;
    v.syncPolicy = CU_SYNC_POLICY_YIELD;
    memcpy(sq.value, &v, sizeof(v));

    /* Handles: another type, forged, destroyed, another device's, values
     * below VCU_CU_HANDLE_MIN that are not default streams. */
    sq.hStream = ev;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.hStream = s ^ (1ull << 40);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.hStream = s + 1;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.hStream = gone;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.hStream = s1;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.c.hdr.device = 1;
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.c.hdr.device = 0;
    sq.hStream = 5;
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.hStream = s;
    sq.c.hdr.device = 7;
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, tc_call(&c, &sq, sizeof(sq), NULL, 0));
    sq.c.hdr.device = 0;

    /* Device arguments: only the VM's. */
    TC_CALL_INIT(pq, cuDeviceGetP2PAttribute, 0);
    pq.attrib = CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED;
    pq.dstDevice = 2;
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, tc_call(&c, &pq, sizeof(pq), &pr, sizeof(pr)));
    pq.dstDevice = 1ull << 32;
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, tc_call(&c, &pq, sizeof(pq), &pr, sizeof(pr)));
    pq.dstDevice = 1;
    pq.srcDevice = UINT64_MAX;
    ASSERT_EQ(CUDA_ERROR_INVALID_DEVICE, tc_call(&c, &pq, sizeof(pq), &pr, sizeof(pr)));

    /* A reply buffer that cannot hold the result struct. */
    TC_CALL_INIT(gq, cuStreamGetAttribute, 0);
    gq.hStream = s;
    gq.attr = CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY;
    {
        ut_req_t *t = ut_req_new();

        t->r.resp_cap = sizeof(struct vcu_resp_hdr) + sizeof(gr) - 8;
        ASSERT_EQ(VCU_S_ERANGE, tc_run(&c, t, VCU_OP_CU_CALL, 0, &gq, sizeof(gq)));
        free(t);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &gq, sizeof(gq), &gr, sizeof(gr)));
    memcpy(&v, gr.value_out, sizeof(v));
    ASSERT_EQ(CU_SYNC_POLICY_YIELD, v.syncPolicy);
    tc_close(&c);
    return 0;
}

/* ---- migration (cuda_migrate.c) ----------------------------------------- */

/* A backend as tc_open's, with a module cache of its own in a new
 * directory (removed by tc_close): a migration's two ends share nothing
 * but the stream. */
static int tc_open_mc(tc_t *c)
{
    vcu_backend_config_t cfg;

    snprintf(c->mc, sizeof(c->mc), "/tmp/vcu-mig-mc-XXXXXX");
    ASSERT_TRUE(mkdtemp(c->mc) != NULL);
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0,1";
    cfg.module_cache = c->mc;
    c->be = NULL;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c->be));
    if (vcu_backend_cuda_error(c->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c->be));
    ASSERT_EQ(VCU_S_OK, ut_open(c->be, &c->s));
    return 0;
}

/* An empty file of our own to hold a state (unlinked at once). */
static int tc_tmpfd(void)
{
    char path[] = "/tmp/vcu-mig-XXXXXX";
    int fd = mkstemp(path);

    if (fd >= 0)
        unlink(path);
    return fd;
}

/* vector_add's PTX with a module global the stand-in knows (symbols.cu's
 * sym_counter): the migration tests carry its contents. */
#define TC_PTX_GLOB TC_PTX ".visible .global .align 4 .u32 sym_counter;\n"

/* Queues state operation op (VCU_BACKEND_OP_SAVE, _LOAD, ...) with fd and
 * waits; the reply's status, and its reason in why, or for the pass
 * before the pause, the bytes it has still to send in *left (~0: none
 * said). */
static uint32_t tc_state_ex(tc_t *c, uint32_t op, int fd, char *why, size_t whylen,
                            uint64_t *left)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_req_build(t, op, c->s, NULL, 0);
    vcu_backend_submit_state(c->be, &t->r, fd);
    ASSERT_EQ(0, ut_wait_count(&t->ndone, 1));
    st = ut_status(t);
    if (left != NULL) {
        *left = ~0ull;
        if (st == VCU_S_OK && ut_resp(t)->payload_len == 8)
            memcpy(left, ut_resp_payload(t), 8);
    } else {
        snprintf(why, whylen, "%s",
                 ut_resp(t)->payload_len > 0 ? (char *)ut_resp_payload(t) : "");
    }
    free(t);
    return st;
}

static uint32_t tc_state(tc_t *c, uint32_t op, int fd, char *why, size_t whylen)
{
    return tc_state_ex(c, op, fd, why, whylen, NULL);
}

static uint32_t tc_state_left(tc_t *c, uint32_t op, int fd, uint64_t *left)
{
    return tc_state_ex(c, op, fd, NULL, 0, left);
}

static uint32_t tc_global(tc_t *c, uint64_t mod, const char *name, uint64_t *addr, uint64_t *size)
{
    unsigned char p[sizeof(struct vcu_cu_name_req) + 64];
    struct vcu_cu_name_req rq;
    struct vcu_cu_mem_range_resp rp;
    size_t n = strlen(name);
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.module = mod;
    rq.name_len = (uint32_t)n;
    memcpy(p, &rq, sizeof(rq));
    memcpy(p + sizeof(rq), name, n);
    st = tc_do(c, VCU_OP_CU_MODULE_GET_GLOBAL, 0, p, (uint32_t)(sizeof(rq) + n), &rp, sizeof(rp));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *addr = rp.base;
    *size = rp.size;
    return rp.r.result;
}

/* CU_MODULE_GLOBAL_INFO of name in mod (name_len as given: n). */
static uint32_t tc_ginfo(tc_t *c, uint64_t mod, const char *name, uint32_t n, uint32_t plen,
                         struct vcu_cu_global_info_resp *rp)
{
    unsigned char p[sizeof(struct vcu_cu_name_req) + 64];
    struct vcu_cu_name_req rq;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    memset(rp, 0, sizeof(*rp));
    rq.module = mod;
    rq.name_len = n;
    memcpy(p, &rq, sizeof(rq));
    memcpy(p + sizeof(rq), name, strlen(name));
    st = tc_do(c, VCU_OP_CU_MODULE_GLOBAL_INFO, 0, p, plen, rp, sizeof(*rp));
    return st != VCU_S_OK ? 0x10000 + st : rp->r.result;
}

/*
 * A __managed__ global is said to be managed, with the page-aligned
 * allocation holding it, for the guest's host view; a plain one is not.
 * Forged, another session's and malformed requests get errors and change
 * nothing.
 */
TEST(cuda_module_global_info)
{
    static const char ptx[] = TC_PTX
        ".visible .global .attribute(.managed) .align 4 .u32 vcu_drv_managed_word = 10;\n"
        ".visible .global .align 4 .u32 sym_counter;\n";
    struct vcu_cu_global_info_resp rp;
    uint64_t mod = 0, base = 0, size = 0;
    const char *mw = "vcu_drv_managed_word";
    uint32_t n = (uint32_t)strlen(mw);
    tc_t c, d;

    CHECK(tc_open(&c));
    d.be = c.be;
    ASSERT_EQ(VCU_S_OK, ut_open(d.be, &d.s));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, ptx, &mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_ginfo(&c, mod, mw, n, (uint32_t)sizeof(struct vcu_cu_name_req) + n,
                                     &rp));
    ASSERT_EQ(VCU_CU_GLOBAL_F_MANAGED, rp.flags);
    ASSERT_EQ(4, (int)rp.size);
    ASSERT_TRUE(rp.range_base != 0 && rp.range_base % 4096 == 0);
    ASSERT_TRUE(rp.base >= rp.range_base && rp.base + rp.size <= rp.range_base + rp.range_size);
    /* The same global as CU_MODULE_GET_GLOBAL names. */
    ASSERT_EQ(CUDA_SUCCESS, tc_global(&c, mod, mw, &base, &size));
    ASSERT_EQ(base, rp.base);
    ASSERT_EQ(CUDA_SUCCESS, tc_ginfo(&c, mod, "sym_counter", 11,
                                     (uint32_t)sizeof(struct vcu_cu_name_req) + 11, &rp));
    ASSERT_EQ(0, (int)rp.flags);
    ASSERT_EQ(0, (int)rp.range_base);
    ASSERT_EQ(CUDA_ERROR_NOT_FOUND, tc_ginfo(&c, mod, "nothere", 7,
                                             (uint32_t)sizeof(struct vcu_cu_name_req) + 7, &rp));
    /* Another session naming this one's module, a forged handle. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_ginfo(&d, mod, mw, n, (uint32_t)sizeof(struct vcu_cu_name_req) + n, &rp));
    ASSERT_EQ(0, (int)rp.flags);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_ginfo(&c, mod ^ 0x40, mw, n,
                                                  (uint32_t)sizeof(struct vcu_cu_name_req) + n,
                                                  &rp));
    /* A name longer than the payload, no name, a truncated header. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, tc_ginfo(&c, mod, mw, n + 8,
                                               (uint32_t)sizeof(struct vcu_cu_name_req) + n, &rp));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_ginfo(&c, mod, mw, 0, (uint32_t)sizeof(struct vcu_cu_name_req), &rp));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_ginfo(&c, mod, mw, n, (uint32_t)sizeof(struct vcu_cu_name_req) - 4, &rp));
    /* And the module still answers. */
    ASSERT_EQ(CUDA_SUCCESS, tc_ginfo(&c, mod, mw, n, (uint32_t)sizeof(struct vcu_cu_name_req) + n,
                                     &rp));
    ASSERT_EQ(VCU_CU_GLOBAL_F_MANAGED, rp.flags);
    ASSERT_EQ(VCU_S_OK, ut_close(d.be, d.s));
    tc_close(&c);
    return 0;
}

/* What a migrated session must find again: its allocations (one freed in
 * between), the contents of each, a module global, a function, a stream
 * and an event. */
typedef struct tc_mig_s {
    uint64_t mod, fn, da, db, dc, gone, glob, gsize, stream, event;
} tc_mig_t;

enum { TC_MIG_N = 1000 };

static int tc_mig_build(tc_t *c, tc_mig_t *m)
{
    float a[TC_MIG_N], b[TC_MIG_N];
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 64 * 8];
    struct vcu_cu_function_resp f;
    uint32_t g = 0x5eed;
    int i;

    memset(m, 0, sizeof(*m));
    for (i = 0; i < TC_MIG_N; i++) {
        a[i] = (float)i * 0.5f;
        b[i] = (float)(TC_MIG_N - i);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, 1 << 20, &m->gone));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, sizeof(a), &m->da));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(c, TC_PTX_GLOB, &m->mod));
    ASSERT_EQ(CUDA_SUCCESS, tc_func(c, m->mod, TC_VADD, (uint32_t)strlen(TC_VADD), 0, fr, sizeof(fr)));
    memcpy(&f, fr, sizeof(f));
    m->fn = f.function;
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_MEM_FREE, 0, m->gone, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, sizeof(b), &m->db));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, sizeof(a), &m->dc));
    ASSERT_EQ(CUDA_SUCCESS, tc_global(c, m->mod, "sym_counter", &m->glob, &m->gsize));
    ASSERT_EQ(4, m->gsize);
    m->stream = tc_stream_new(c);
    ASSERT_NE(0, m->stream);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_EVENT_CREATE, 0, 0, &m->event));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 1, m->da, a, sizeof(a), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 1, m->db, b, sizeof(b), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 1, m->glob, &g, sizeof(g), NULL, 0, 0, 0));
    return 0;
}

/* Launches out = a + b on the session's stream, records its event, and
 * checks the result, the inputs and the global. */
static int tc_mig_check(tc_t *c, const tc_mig_t *m)
{
    float out[TC_MIG_N], a[TC_MIG_N];
    unsigned char params[32];
    int32_t n = TC_MIG_N;
    uint32_t g = 0;
    int i;

    memcpy(params + 0, &m->da, 8);
    memcpy(params + 8, &m->db, 8);
    memcpy(params + 16, &m->dc, 8);
    memcpy(params + 24, &n, 4);
    ASSERT_EQ(CUDA_SUCCESS, tc_launch(c, m->fn, m->stream, (TC_MIG_N + 127) / 128, 128, params, 28, 28));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(c, VCU_OP_CU_EVENT_RECORD, m->event, m->stream, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_EVENT_SYNCHRONIZE, 0, m->event, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, m->dc, out, sizeof(out), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, m->da, a, sizeof(a), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, m->glob, &g, sizeof(g), NULL, 0, 0, 0));
    for (i = 0; i < TC_MIG_N; i++) {
        ASSERT_TRUE(a[i] == (float)i * 0.5f);
        ASSERT_TRUE(out[i] == (float)i * 0.5f + (float)(TC_MIG_N - i));
    }
    ASSERT_EQ(0x5eed, g);
    return 0;
}

/* c's session saved into fd, its backend gone, and a fresh backend
 * (c again) with the session loaded from fd. */
static int tc_move(tc_t *c, int fd)
{
    char why[256];

    if (tc_state(c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("save: %s", why);
    tc_close(c);
    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    CHECK(tc_open_mc(c));
    if (tc_state(c, VCU_BACKEND_OP_LOAD, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("load: %s", why);
    return 0;
}

/* A session saved, its backend gone, and a fresh one loaded from the
 * state: the same addresses and handles work, the data is there, and the
 * loaded session can be saved again. */
TEST(migrate_roundtrip)
{
    char why[256];
    tc_mig_t m;
    tc_t c;
    int fd = tc_tmpfd(), fd2 = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    CHECK(tc_mig_build(&c, &m));
    CHECK(tc_mig_check(&c, &m));
    /* The generated queries keep the hand-written ones' class: nothing
     * to carry, nothing refused. */
    ASSERT_EQ(CUDA_SUCCESS, tc_query(&c, VCU_CALL_cuStreamQuery, 0, m.stream));
    ASSERT_EQ(CUDA_SUCCESS, tc_query(&c, VCU_CALL_cuEventQuery, 0, m.event));
    if (tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("save: %s", why);
    ASSERT_EQ(0, (int)strlen(why));
    tc_close(&c);

    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    if (tc_state(&c, VCU_BACKEND_OP_LOAD, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("load: %s", why);
    CHECK(tc_mig_check(&c, &m));
    /* Carried again. */
    ASSERT_EQ(VCU_S_OK, tc_state(&c, VCU_BACKEND_OP_SAVE, fd2, why, sizeof(why)));
    tc_close(&c);
    ASSERT_EQ(0, lseek(fd2, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    if (tc_state(&c, VCU_BACKEND_OP_LOAD, fd2, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("second load: %s", why);
    CHECK(tc_mig_check(&c, &m));
    tc_close(&c);
    close(fd);
    close(fd2);
    return 0;
}

/* Which context made an allocation moves with the session: after a load,
 * CU_CTX_DESTROY frees the number's allocations there and no other, and
 * a context destroyed before the save stays destroyed. */
TEST(migrate_ctx_memory)
{
    uint64_t p0 = 0, p9 = 0, p10 = 0, n = 0;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&c, 0, 0, 1 << 20, &p0));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&c, 0, 9, 1 << 20, &p9));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc_in(&c, 0, 10, 1 << 20, &p10));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_DESTROY, 0, 10, &n));
    ASSERT_EQ(1, n);
    CHECK(tc_move(&c, fd));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, p10, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_DESTROY, 0, 9, &n));
    ASSERT_EQ(1, n);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, p9, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, p0, NULL));
    tc_close(&c);
    close(fd);
    return 0;
}

/* A copy of stream fd's bytes [off, off + len), with the 8 at at
 * replaced by v, in a new file at its start. */
static int tc_forge(int fd, off_t off, size_t len, size_t at, uint64_t v)
{
    unsigned char *b = malloc(len);
    int out = tc_tmpfd();

    if (b == NULL || out < 0 || pread(fd, b, len, off) != (ssize_t)len)
        return -1;
    memcpy(b + at, &v, 8);
    if (write(out, b, len) != (ssize_t)len || lseek(out, 0, SEEK_SET) != 0)
        return -1;
    free(b);
    return out;
}

/* A fresh session loads the pre-state in fa, then refuses the stream in
 * fd (len bytes) with the 8 bytes at at forged to v, saying want. */
static int tc_forged_refused(int fa, int fd, size_t len, size_t at, uint64_t v,
                             const char *want)
{
    char why[256];
    int ff = tc_forge(fd, 0, len, at, v);
    tc_t c;

    ASSERT_GE(ff, 0);
    ASSERT_EQ(0, (int)lseek(fa, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(VCU_S_OK, tc_state(&c, VCU_BACKEND_OP_LOAD, fa, why, sizeof(why)));
    ASSERT_EQ(VCU_S_EINVAL, tc_state(&c, VCU_BACKEND_OP_LOAD, ff, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, want) != NULL);
    tc_close(&c);
    close(ff);
    return 0;
}

/*
 * The pass before the pause: a pre-state and chunks of device memory
 * while the session runs on, then the rest at the pause.  After the
 * chunks went, the source changes one 8 MiB chunk of a large allocation,
 * frees a small one and makes another, and makes a new one.  The rest
 * carries those and not the unchanged chunks (it is smaller than the
 * large allocation); the destination, loading the streams in order, has
 * every byte as the source had it, and goes on.  Refused: a rest or
 * chunks into a session no pre-state was loaded into, a rest that
 * continues another history, a chunk outside every allocation.
 */
TEST(migrate_precopy)
{
    enum { CH = 8 << 20, BIG = 3 * CH + 4096 };
    unsigned char *host = malloc(BIG), *back = malloc(BIG);
    unsigned char small[4096], got[4096];
    uint64_t big = 0, old = 0, old2 = 0, fresh = 0, left = 0, v;
    int fa = tc_tmpfd(), fb = tc_tmpfd(), fc = tc_tmpfd(), ops = 0, i;
    off_t chunks_len, rest_len;
    char why[256];
    tc_mig_t m;
    tc_t c;

    ASSERT_TRUE(host != NULL && back != NULL && fa >= 0 && fb >= 0 && fc >= 0);
    for (i = 0; i < BIG; i++)
        host[i] = (unsigned char)(i * 7 + (i >> 12));
    CHECK(tc_open_mc(&c));
    CHECK(tc_mig_build(&c, &m));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, BIG, &big));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, big, host, BIG, NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, sizeof(small), &old));
    memset(small, 0x11, sizeof(small));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, old, small, sizeof(small), NULL, 0, 0, 0));
    /* No pass began: chunks and a rest are refused. */
    ASSERT_EQ(VCU_S_EBUSY, tc_state_left(&c, VCU_BACKEND_OP_PRE_COPY, fb, &left));
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE_REST, fc, why, sizeof(why)));
    ASSERT_EQ(0, (int)lseek(fc, 0, SEEK_END));

    ASSERT_EQ(VCU_S_OK, tc_state_left(&c, VCU_BACKEND_OP_PRE_SAVE, fa, &left));
    ASSERT_TRUE(left >= (uint64_t)BIG + sizeof(small));
    while (left > 0 && ops < 16) {
        ASSERT_EQ(VCU_S_OK, tc_state_left(&c, VCU_BACKEND_OP_PRE_COPY, fb, &left));
        ops++;
    }
    ASSERT_EQ_U64(0, left);
    ASSERT_TRUE(ops >= 1);
    chunks_len = lseek(fb, 0, SEEK_CUR);
    ASSERT_TRUE(chunks_len > BIG);

    /* The session runs on. */
    memset(host + CH + 100, 0x5a, 4096);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, big + CH + 100, host + CH + 100, 4096, NULL, 0, 0, 0));
    CHECK(tc_mig_check(&c, &m));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, old, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, sizeof(small), &old2));
    memset(small, 0x22, sizeof(small));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 1, old2, small, sizeof(small), NULL, 0, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 3 * sizeof(small), &fresh));
    ASSERT_EQ(VCU_S_OK, tc_state(&c, VCU_BACKEND_OP_SAVE_REST, fc, why, sizeof(why)));
    rest_len = lseek(fc, 0, SEEK_CUR);
    /* The changed chunk went again, the two unchanged ones did not. */
    ASSERT_TRUE(rest_len > CH && rest_len < 2 * CH);
    tc_close(&c);

    /* A rest into a session without its pre-state. */
    ASSERT_EQ(0, (int)lseek(fc, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(VCU_S_EINVAL, tc_state(&c, VCU_BACKEND_OP_LOAD, fc, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "pre-state") != NULL);
    tc_close(&c);
    /* A chunk outside every allocation (the first record's address, after
     * the 40-byte head, forged). */
    CHECK(tc_forged_refused(fa, fb, (size_t)chunks_len, 40, 0x1000, "not one here"));
    /* A rest that continues a history of another length (the head's
     * "first", at 24). */
    ASSERT_EQ(0, (int)pread(fc, &v, 8, 24) - 8);
    CHECK(tc_forged_refused(fa, fc, (size_t)rest_len, 24, v + 1, "continues a history"));

    /* The destination: the three, in order. */
    ASSERT_EQ(0, (int)lseek(fa, 0, SEEK_SET));
    ASSERT_EQ(0, (int)lseek(fb, 0, SEEK_SET));
    ASSERT_EQ(0, (int)lseek(fc, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    if (tc_state(&c, VCU_BACKEND_OP_LOAD, fa, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("pre-state: %s", why);
    for (i = 0; i < ops; i++)
        if (tc_state(&c, VCU_BACKEND_OP_LOAD, fb, why, sizeof(why)) != VCU_S_OK)
            VCU_TEST_FAIL_("chunks %d: %s", i, why);
    if (tc_state(&c, VCU_BACKEND_OP_LOAD, fc, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("rest: %s", why);
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, big, back, BIG, NULL, 0, 0, 0));
    ASSERT_EQ(0, memcmp(host, back, BIG));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(&c, 0, old2, got, sizeof(got), NULL, 0, 0, 0));
    ASSERT_EQ(0, memcmp(small, got, sizeof(got)));
    CHECK(tc_mig_check(&c, &m));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, fresh, NULL));
    tc_close(&c);
    close(fa);
    close(fb);
    close(fc);
    free(host);
    free(back);
    return 0;
}

/*
 * Packed mode (a worker that is an MPS client with the VM's SMs: the
 * stand-in plays one when an MPS control file exists): a save and a
 * pre-state are refused, naming it, and the session runs on.
 */
TEST(migrate_packed_refused)
{
    vcu_backend_config_t cfg;
    char dir[] = "/tmp/vcu-mps-XXXXXX", ctl[64], why[256];
    uint64_t p = 0;
    int fd = tc_tmpfd(), f;
    tc_t c;

    ASSERT_GE(fd, 0);
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    snprintf(ctl, sizeof(ctl), "%s/control", dir);
    f = open(ctl, O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(f, 0);
    close(f);
    setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
    memset(&c, 0, sizeof(c));
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0";
    cfg.worker = 1;
    cfg.sms = 8;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c.be));
    if (vcu_backend_cuda_error(c.be) != NULL)
        VCU_TEST_FAIL_("packed mode on the stand-in: %s", vcu_backend_cuda_error(c.be));
    ASSERT_EQ(VCU_S_OK, ut_open(c.be, &c.s));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 4096, &p));
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "packed mode") != NULL);
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_PRE_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "packed mode") != NULL);
    ASSERT_EQ(0, (int)lseek(fd, 0, SEEK_END));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, p, NULL));
    tc_close(&c);
    unlink(ctl);
    rmdir(dir);
    close(fd);
    return 0;
}

/*
 * A function's first use places its code in device memory (lazy loading,
 * as the driver does by default; the stand-in does it too): memory
 * allocated after a launch lands where it did on the source only if the
 * destination loads the function at the same place in the history.
 */
TEST(migrate_first_use)
{
    uint64_t after = 0;
    tc_mig_t m;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    CHECK(tc_mig_build(&c, &m));
    CHECK(tc_mig_check(&c, &m));    /* the kernel's first launch */
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 4096, &after));
    CHECK(tc_move(&c, fd));
    CHECK(tc_mig_check(&c, &m));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, after, NULL));
    tc_close(&c);
    close(fd);
    return 0;
}

/* Peer access is made again at the load; peer copies and stream memory
 * operations, work, neither refuse the save nor come back. */
TEST(migrate_peer)
{
    struct vcu_cu_pair_req aq = {{0, 0}, 1, 0, 1};
    struct vcu_cu_memcpy_peer_req cq;
    struct {
        struct vcu_cu_memops_req r;
        struct vcu_cu_memop op;
    } mq;
    struct vcu_cu_resp rp;
    uint64_t p = 0;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 4096, &p));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_PEER_ACCESS, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.result);
    memset(&cq, 0, sizeof(cq));
    cq.c.dst = p + 2048;
    cq.c.src = p;
    cq.c.size = 2048;
    cq.dst_device = 0;
    cq.src_device = 0;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMCPY_PEER, 0, &cq, sizeof(cq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.result);
    memset(&mq, 0, sizeof(mq));
    mq.r.count = 1;
    mq.op.type = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    mq.op.address = p;
    mq.op.value = 5;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_STREAM_MEMOPS, 0, &mq, sizeof(mq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.result);
    CHECK(tc_move(&c, fd));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CTX_PEER_ACCESS, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, rp.result);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEM_FREE, 0, p, NULL));
    tc_close(&c);
    close(fd);
    return 0;
}

/* What the history cannot carry makes the session refuse to be saved,
 * saying what it was; nothing is written. */
TEST(migrate_refused)
{
    struct vcu_cu_mem_alloc_req aq;
    struct vcu_cu_u64_resp rp;
    char why[256];
    uint64_t g = 0;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    {
        struct vcu_cu_graph_mem_node_req mq;
        struct vcu_cu_graph_mem_node_resp mr;

        memset(&mq, 0, sizeof(mq));
        mq.graph = g;
        mq.kind = VCU_CU_MEM_NODE_ALLOC;
        mq.size = 4096;
        ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_ADD_MEM_NODE, 0, &mq, sizeof(mq), &mr,
                                  sizeof(mr)));
        ASSERT_EQ(CUDA_SUCCESS, mr.r.result);
    }
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "graph memory nodes") != NULL);
    ASSERT_EQ(0, lseek(fd, 0, SEEK_END));
    tc_close(&c);

    CHECK(tc_open_mc(&c));
    memset(&aq, 0, sizeof(aq));
    aq.size = 4096;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEM_ALLOC_ASYNC, 0, &aq, sizeof(aq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "stream-ordered") != NULL);
    tc_close(&c);

    /* The generated cuMemPoolTrimTo keeps its class and its reason. */
    CHECK(tc_open_mc(&c));
    {
        struct vcu_call_cuMemPoolTrimTo_req tq;

        TC_CALL_INIT(tq, cuMemPoolTrimTo, 0);
        ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_MEMPOOL_GET_DEFAULT, 0, 0, &tq.pool));
        ASSERT_EQ(CUDA_SUCCESS, tc_call(&c, &tq, sizeof(tq), NULL, 0));
    }
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "stream-ordered") != NULL);
    tc_close(&c);

    /* A module whose image nothing keeps: no module cache. */
    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_module(&c, TC_PTX_GLOB, &g));
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "no module cache") != NULL);
    tc_close(&c);
    close(fd);
    return 0;
}

/* A load checks what it is given and where things land: a session that
 * ran calls, a stream that is not a state or is cut short, a history
 * whose addresses come out otherwise here.  Each is refused with its
 * reason, and the backend goes on.  The guest cannot send any of the
 * state operations. */
TEST(migrate_load_checks)
{
    char why[256], junk[64];
    uint64_t p = 0, other = 0;
    uint32_t op;
    struct stat sb;
    tc_mig_t m;
    tc_t c, d;
    int fd = tc_tmpfd(), bad = tc_tmpfd(),
        cut = tc_tmpfd();
    void *st;

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    CHECK(tc_mig_build(&c, &m));
    ASSERT_EQ(VCU_S_OK, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    /* The guest's own path does not know the opcodes. */
    for (op = VCU_BACKEND_OP_SAVE; op <= VCU_BACKEND_OP_SAVE_REST; op++)
        ASSERT_EQ(VCU_S_ENOTSUP, tc_do(&c, op, 0, NULL, 0, NULL, 0));
    tc_close(&c);

    CHECK(tc_open_mc(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 4096, &p));
    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    ASSERT_EQ(VCU_S_EINVAL, tc_state(&c, VCU_BACKEND_OP_LOAD, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "already") != NULL);
    tc_close(&c);

    memset(junk, 0x41, sizeof(junk));
    ASSERT_EQ((ssize_t)sizeof(junk), write(bad, junk, sizeof(junk)));
    ASSERT_EQ(0, lseek(bad, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(VCU_S_EINVAL, tc_state(&c, VCU_BACKEND_OP_LOAD, bad, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "not a session") != NULL);
    tc_close(&c);

    /* Cut in the middle of the device memory. */
    ASSERT_EQ(0, fstat(fd, &sb));
    st = malloc((size_t)sb.st_size);
    ASSERT_EQ((ssize_t)sb.st_size, pread(fd, st, (size_t)sb.st_size, 0));
    ASSERT_EQ((ssize_t)sb.st_size - 3000, write(cut, st, (size_t)sb.st_size - 3000));
    free(st);
    ASSERT_EQ(0, lseek(cut, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(VCU_S_EINVAL, tc_state(&c, VCU_BACKEND_OP_LOAD, cut, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "ends") != NULL);
    tc_close(&c);

    /* Another session of the backend took the first address. */
    CHECK(tc_open_mc(&c));
    ASSERT_EQ(VCU_S_OK, ut_open(c.be, &d.s));
    d.be = c.be;
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&d, 1 << 20, &other));
    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    ASSERT_EQ(VCU_S_EINVAL, tc_state(&c, VCU_BACKEND_OP_LOAD, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "came out otherwise") != NULL);
    ut_close(c.be, d.s);
    tc_close(&c);
    close(fd);
    close(bad);
    close(cut);
    return 0;
}

/* ---- migration of graphs and captures ----------------------------------- */

/* What a migrated session's graphs must do again: an exec of a built
 * graph (a kernel, a copy of its result, a memset whose value the exec
 * was given after instantiation, an empty node joined by an edge, a
 * conditional node whose body sets memory), and an exec of a captured
 * graph (the kernel and a memset). */
typedef struct tc_mgraph_s {
    tc_mig_t m;
    uint64_t dcopy, dset, dcond, dcap;
    uint64_t g, clone, exec, capg, capexec;
} tc_mgraph_t;

/* A node of kind on graph g after deps (ndeps of them), set up by the
 * caller in *nq but for graph, kind and ndeps. */
static uint32_t tc_mg_node(tc_t *c, uint64_t g, uint32_t kind, struct vcu_cu_graph_node_req *nq,
                           const uint64_t *deps, uint32_t ndeps, uint64_t *node)
{
    nq->graph = g;
    nq->kind = kind;
    return tc_node(c, nq, deps, ndeps, node);
}

static void tc_mg_vadd_params(const tc_mig_t *m, unsigned char params[28])
{
    int32_t n = TC_MIG_N;

    memcpy(params + 0, &m->da, 8);
    memcpy(params + 8, &m->db, 8);
    memcpy(params + 16, &m->dc, 8);
    memcpy(params + 24, &n, 4);
}

static int tc_mg_build(tc_t *c, tc_mgraph_t *x)
{
    unsigned char p[sizeof(struct vcu_cu_graph_node_req) + 8 * 8 + 28];
    unsigned char eq[sizeof(struct vcu_cu_graph_edges_req) + 16];
    struct vcu_cu_graph_node_req nq;
    struct vcu_cu_graph_edges_req er;
    struct vcu_cu_graph_cond_resp co;
    struct vcu_cu_u64_resp rp;
    uint64_t k = 0, cp = 0, ms = 0, em = 0, bm = 0, h = 0, nd = 0;
    size_t bytes = TC_MIG_N * sizeof(float);

    CHECK(tc_mig_build(c, &x->m));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, bytes, &x->dcopy));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, 256, &x->dset));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, 256, &x->dcond));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(c, 256, &x->dcap));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &x->g));
    /* The kernel, over every element. */
    memset(&nq, 0, sizeof(nq));
    nq.graph = x->g;
    nq.kind = VCU_CU_NODE_KERNEL;
    nq.function = x->m.fn;
    nq.grid[0] = (TC_MIG_N + 127) / 128;
    nq.grid[1] = nq.grid[2] = 1;
    nq.block[0] = 128;
    nq.block[1] = nq.block[2] = 1;
    nq.param_bytes = 28;
    memcpy(p, &nq, sizeof(nq));
    tc_mg_vadd_params(&x->m, p + sizeof(nq));
    ASSERT_EQ(VCU_S_OK, tc_do(c, VCU_OP_CU_GRAPH_ADD_NODE, 0, p, (uint32_t)(sizeof(nq) + 28), &rp,
                              sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    k = rp.value;
    /* Its result copied. */
    memset(&nq, 0, sizeof(nq));
    nq.dst = x->dcopy;
    nq.src = x->m.dc;
    nq.width = bytes;
    ASSERT_EQ(CUDA_SUCCESS, tc_mg_node(c, x->g, VCU_CU_NODE_MEMCPY, &nq, &k, 1, &cp));
    /* A memset of 7, set to 0x5a in the exec below. */
    memset(&nq, 0, sizeof(nq));
    nq.dst = x->dset;
    nq.value = 7;
    nq.elem_size = 1;
    nq.width = 256;
    nq.height = 1;
    nq.pitch = 256;
    ASSERT_EQ(CUDA_SUCCESS, tc_mg_node(c, x->g, VCU_CU_NODE_MEMSET, &nq, NULL, 0, &ms));
    memset(&nq, 0, sizeof(nq));
    ASSERT_EQ(CUDA_SUCCESS, tc_mg_node(c, x->g, VCU_CU_NODE_EMPTY, &nq, NULL, 0, &em));
    memset(&er, 0, sizeof(er));
    er.graph = x->g;
    er.add = 1;
    er.count = 1;
    memcpy(eq, &er, sizeof(er));
    memcpy(eq + sizeof(er), &cp, 8);
    memcpy(eq + sizeof(er) + 8, &em, 8);
    ASSERT_EQ(VCU_S_OK, tc_do(c, VCU_OP_CU_GRAPH_EDGES, 0, eq, sizeof(eq), &rp, sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    /* A conditional node (if, default 1) whose body sets dcond to 3. */
    {
        struct vcu_cu_pair_req rq = {{0, 0}, x->g, 1, CU_GRAPH_COND_ASSIGN_DEFAULT};

        ASSERT_EQ(VCU_S_OK, tc_do(c, VCU_OP_CU_GRAPH_COND_HANDLE, 0, &rq, sizeof(rq), &rp,
                                  sizeof(rp)));
        ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
        h = rp.value;
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_cond(c, x->g, h, CU_GRAPH_COND_TYPE_IF, 1, em, &co));
    memset(&nq, 0, sizeof(nq));
    nq.dst = x->dcond;
    nq.value = 3;
    nq.elem_size = 1;
    nq.width = 256;
    nq.height = 1;
    nq.pitch = 256;
    ASSERT_EQ(CUDA_SUCCESS, tc_mg_node(c, co.body[0], VCU_CU_NODE_MEMSET, &nq, NULL, 0, &bm));
    /* A node made and taken out again, a clone, the exec. */
    memset(&nq, 0, sizeof(nq));
    ASSERT_EQ(CUDA_SUCCESS, tc_mg_node(c, x->g, VCU_CU_NODE_EMPTY, &nq, NULL, 0, &nd));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_GRAPH_NODE_DESTROY, 0, nd, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_GRAPH_CLONE, 0, x->g, &x->clone));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(c, x->g, &x->exec));
    memset(&nq, 0, sizeof(nq));
    nq.dst = x->dset;
    nq.value = 0x5a;
    nq.elem_size = 1;
    nq.width = 256;
    nq.height = 1;
    nq.pitch = 256;
    nq.kind = VCU_CU_NODE_MEMSET;
    ASSERT_EQ(CUDA_SUCCESS, tc_node_set(c, x->exec, ms, &nq, 0));
    /* The exec made again from the clone, in place. */
    {
        struct vcu_cu_graph_update_resp ur;

        ASSERT_EQ(CUDA_SUCCESS, tc_pair(c, VCU_OP_CU_GRAPH_EXEC_UPDATE, x->exec, x->clone, 0,
                                        &ur, sizeof(ur)));
        ASSERT_EQ(CUDA_SUCCESS, tc_node_set(c, x->exec, ms, &nq, 0));
    }
    /* A captured graph: the kernel on the session's stream and a memset
     * of dcap to 0x21. */
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, x->m.stream,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    tc_mg_vadd_params(&x->m, p);
    ASSERT_EQ(CUDA_SUCCESS, tc_launch(c, x->m.fn, x->m.stream, (TC_MIG_N + 127) / 128, 128, p,
                                      28, 28));
    {
        struct vcu_cu_memset_req mq;
        struct vcu_cu_resp r;

        memset(&mq, 0, sizeof(mq));
        mq.dst = x->dcap;
        mq.value = 0x21;
        mq.elem_size = 1;
        mq.width = 256;
        mq.height = 1;
        mq.stream = x->m.stream;
        mq.flags = VCU_CU_MEMCPY_F_ASYNC;
        ASSERT_EQ(VCU_S_OK, tc_do(c, VCU_OP_CU_MEMSET, 0, &mq, sizeof(mq), &r, sizeof(r)));
        ASSERT_EQ(CUDA_SUCCESS, r.result);
    }
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_STREAM_END_CAPTURE, 0, x->m.stream, &x->capg));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(c, x->capg, &x->capexec));
    return 0;
}

/* Every byte of [d, d + n) is v. */
static int tc_mg_bytes(tc_t *c, uint64_t d, size_t n, unsigned char v)
{
    unsigned char b[256];
    size_t i;

    ASSERT_TRUE(n <= sizeof(b));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, d, b, n, NULL, 0, 0, 0));
    for (i = 0; i < n; i++)
        ASSERT_EQ(v, b[i]);
    return 0;
}

/* Clears what the graphs write, launches both execs and checks it. */
static int tc_mg_check(tc_t *c, const tc_mgraph_t *x)
{
    static float out[TC_MIG_N];
    int i;

    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, x->m.dc, 0, 1, TC_MIG_N * sizeof(float), 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, x->dcopy, 0, 1, TC_MIG_N * sizeof(float), 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, x->dset, 0, 1, 256, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, x->dcond, 0, 1, 256, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, x->dcap, 0, 1, 256, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(c, VCU_OP_CU_GRAPH_LAUNCH, x->exec, x->m.stream, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, x->m.stream, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, x->dcopy, out, sizeof(out), NULL, 0, 0, 0));
    for (i = 0; i < TC_MIG_N; i++)
        ASSERT_TRUE(out[i] == (float)i * 0.5f + (float)(TC_MIG_N - i));
    CHECK(tc_mg_bytes(c, x->dset, 256, 0x5a));
    CHECK(tc_mg_bytes(c, x->dcond, 256, 3));
    CHECK(tc_mg_bytes(c, x->dcap, 256, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(c, x->m.dc, 0, 1, TC_MIG_N * sizeof(float), 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(c, VCU_OP_CU_GRAPH_LAUNCH, x->capexec, x->m.stream, 0, NULL,
                                    0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, x->m.stream, NULL));
    CHECK(tc_mg_bytes(c, x->dcap, 256, 0x21));
    ASSERT_EQ(CUDA_SUCCESS, tc_copy(c, 0, x->m.dc, out, sizeof(out), NULL, 0, 0, 0));
    for (i = 0; i < TC_MIG_N; i++)
        ASSERT_TRUE(out[i] == (float)i * 0.5f + (float)(TC_MIG_N - i));
    return 0;
}

/*
 * A session that built, edited, instantiated and launched graphs (one
 * of them captured) migrates: the destination launches the same exec
 * handles and gets the same results, and new handles on both ends are
 * the same.
 */
TEST(migrate_graph)
{
    tc_mgraph_t x;
    char why[256];
    uint64_t g1 = 0, g2 = 0;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    CHECK(tc_mg_build(&c, &x));
    CHECK(tc_mg_check(&c, &x));
    if (tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("save: %s", why);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g1));
    tc_close(&c);

    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    if (tc_state(&c, VCU_BACKEND_OP_LOAD, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("load: %s", why);
    CHECK(tc_mig_check(&c, &x.m));
    CHECK(tc_mg_check(&c, &x));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g2));
    ASSERT_EQ_U64(g1, g2);
    tc_close(&c);
    close(fd);
    return 0;
}

/* A capture in progress refuses the save, saying so.  One that an
 * unsafe call invalidated, and one after it, migrate: the destination
 * makes the same failures and records the same graph. */
TEST(migrate_capture_in_progress)
{
    struct vcu_cu_memset_req mq;
    struct vcu_cu_resp r;
    char why[256];
    uint64_t s, g = 0, x = 0, d = 0;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "capture is in progress") != NULL);
    ASSERT_EQ(0, lseek(fd, 0, SEEK_END));
    /* Invalidated by a synchronize, then ended (failing). */
    ASSERT_NE(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    ASSERT_EQ(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
              tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_BEGIN_CAPTURE, s,
                                    CU_STREAM_CAPTURE_MODE_RELAXED, 0, NULL, 0));
    memset(&mq, 0, sizeof(mq));
    mq.dst = d;
    mq.value = 0x44;
    mq.elem_size = 1;
    mq.width = 256;
    mq.height = 1;
    mq.stream = s;
    mq.flags = VCU_CU_MEMCPY_F_ASYNC;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_MEMSET, 0, &mq, sizeof(mq), &r, sizeof(r)));
    ASSERT_EQ(CUDA_SUCCESS, r.result);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_END_CAPTURE, 0, s, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g, &x));
    CHECK(tc_move(&c, fd));
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0, 1, 256, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, s, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    CHECK(tc_mg_bytes(&c, d, 256, 0x44));
    tc_close(&c);
    close(fd);
    return 0;
}

/*
 * A save while a host function waits for the guest (the driver runs it
 * on a thread of its own: the stand-in too, told so) does not wait for
 * it, which a stopped guest would never answer: it is refused at once,
 * saying why, and the session saves once the function returned.
 */
TEST(migrate_host_func)
{
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_u64_resp wr;
    char why[256];
    uint64_t s;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    setenv("VCU_FAKECUDA_HOST_THREAD", "1", 1);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_STREAM_HOST_FUNC, s, 0xfeed, 0, NULL, 0));
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "host function") != NULL);
    ASSERT_EQ(0, lseek(fd, 0, SEEK_END));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), &wr, sizeof(wr)));
    ASSERT_EQ_U64(0xfeed, wr.value);
    /* Handed out, not returned yet: still refused. */
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "host function") != NULL);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CALLBACK_DONE, 0, 0xfeed, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    unsetenv("VCU_FAKECUDA_HOST_THREAD");
    if (tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("save: %s", why);
    tc_close(&c);
    close(fd);
    return 0;
}

/*
 * A graph host node (a guest function) migrates as the guest's cookie:
 * launched on the destination, its exec hands the same cookie to the
 * guest's callback thread and goes on once the guest answered.
 */
TEST(migrate_graph_host)
{
    struct vcu_cu_graph_node_req nq;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_u64_resp wr;
    uint64_t g = 0, hn = 0, ms = 0, x = 0, s, d = 0;
    ut_req_t *l;
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    memset(&nq, 0, sizeof(nq));
    nq.cookie = 0x77;
    ASSERT_EQ(CUDA_SUCCESS, tc_mg_node(&c, g, VCU_CU_NODE_HOST, &nq, NULL, 0, &hn));
    memset(&nq, 0, sizeof(nq));
    nq.dst = d;
    nq.value = 0x3c;
    nq.elem_size = 1;
    nq.width = 256;
    nq.height = 1;
    nq.pitch = 256;
    ASSERT_EQ(CUDA_SUCCESS, tc_mg_node(&c, g, VCU_CU_NODE_MEMSET, &nq, &hn, 1, &ms));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g, &x));
    CHECK(tc_move(&c, fd));
    l = tc_submit_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, s);
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), &wr, sizeof(wr)));
    ASSERT_EQ(CUDA_SUCCESS, wr.r.result);
    ASSERT_EQ_U64(0x77, wr.value);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CALLBACK_DONE, 0, 0x77, NULL));
    ASSERT_EQ(0, ut_wait_count(&l->ndone, 1));
    ASSERT_EQ(CUDA_SUCCESS, ((struct vcu_cu_resp *)ut_resp_payload(l))->result);
    free(l);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    CHECK(tc_mg_bytes(&c, d, 256, 0x3c));
    tc_close(&c);
    close(fd);
    return 0;
}

/* ---- child graph nodes, event nodes, user objects ----------------------- */

/* A MEMSET node of 256 bytes of v at d on graph g, after dep (0: none). */
static uint32_t tc_gset(tc_t *c, uint64_t g, uint64_t d, unsigned char v, uint64_t dep,
                        uint64_t *node)
{
    struct vcu_cu_graph_node_req nq;

    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = VCU_CU_NODE_MEMSET;
    nq.dst = d;
    nq.value = v;
    nq.elem_size = 1;
    nq.width = 256;
    nq.height = 1;
    nq.pitch = 256;
    return tc_node(c, &nq, dep ? &dep : NULL, dep != 0, node);
}

/* A node of kind naming handle h (a CHILD's graph, an EVENT_*'s event). */
static uint32_t tc_hnode(tc_t *c, uint64_t g, uint32_t kind, uint64_t h, uint64_t dep,
                         uint64_t *node)
{
    struct vcu_cu_graph_node_req nq;

    memset(&nq, 0, sizeof(nq));
    nq.graph = g;
    nq.kind = kind;
    nq.function = h;
    return tc_node(c, &nq, dep ? &dep : NULL, dep != 0, node);
}

/* CU_GRAPH_NODE_SET of node (in exec, or 0: its graph) to a kind naming h. */
static uint32_t tc_hset(tc_t *c, uint64_t exec, uint64_t node, uint32_t kind, uint64_t h)
{
    struct vcu_cu_graph_node_req nq;

    memset(&nq, 0, sizeof(nq));
    nq.kind = kind;
    nq.function = h;
    return tc_node_set(c, exec, node, &nq, 0);
}

/*
 * Child graph nodes from the host's side: the child graph handle must be
 * a graph of the session that is not the graph nor one holding it; a
 * child node's own graph has one handle, may be filled but not
 * destroyed, and goes with its node or its graph; an exec's child is set
 * only from a graph, only on a child node; kinds past the last refused.
 */
TEST(cuda_graph_child)
{
    uint64_t g, child, parent, emb, emb2, nc, nm, ns, nx, x, ev = 0, d = 0, e = 0, cnt = 0;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 512, &e));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &child));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, child, d, 0x11, 0, &nm));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &parent));
    /* Forged and wrong handles, the graph itself. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_hnode(&c, parent, VCU_CU_NODE_CHILD, 77, 0, &nc));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_hnode(&c, parent, VCU_CU_NODE_CHILD, ev, 0, &nc));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_hnode(&c, parent, VCU_CU_NODE_CHILD, nm, 0, &nc));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_hnode(&c, parent, VCU_CU_NODE_CHILD, parent, 0, &nc));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_hnode(&c, parent, VCU_CU_NODE_EVENT_WAIT + 1, child, 0, &nc));
    ASSERT_EQ(CUDA_SUCCESS, tc_hnode(&c, parent, VCU_CU_NODE_CHILD, child, 0, &nc));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, parent, e, 0x22, nc, &ns));
    /* The node's own graph: one handle, two nodes, not destroyable. */
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, 99, &emb));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, child, &emb));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, ns, &emb));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, nc, &emb));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, nc, &emb2));
    ASSERT_EQ_U64(emb, emb2);
    ASSERT_NE(child, emb);
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, emb, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, emb, e + 128, 0x33, 0, &nx));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, emb, &cnt));
    ASSERT_EQ(2, cnt);
    /* A graph holding its own parent: refused, however deep. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hnode(&c, emb, VCU_CU_NODE_CHILD, parent, 0, &nx));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hnode(&c, emb, VCU_CU_NODE_CHILD, emb, 0, &nx));
    /* It runs: the child's memset, the one added to emb (half under the
     * parent's, which runs after), the parent's. */
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, parent, &x));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    CHECK(tc_mg_bytes(&c, d, 256, 0x11));
    CHECK(tc_mg_bytes(&c, e, 256, 0x22));
    CHECK(tc_mg_bytes(&c, e + 256, 128, 0x33));
    /* An exec's child: only from a graph, on a child node, in an exec. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hset(&c, 0, nc, VCU_CU_NODE_CHILD, child));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_hset(&c, x, nc, VCU_CU_NODE_CHILD, ev));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hset(&c, x, ns, VCU_CU_NODE_CHILD, child));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, g, d, 0x44, 0, &nx));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, g, e + 256, 0x45, 0, &nx));
    ASSERT_EQ(CUDA_SUCCESS, tc_hset(&c, x, nc, VCU_CU_NODE_CHILD, g));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_CTX_SYNCHRONIZE, 0, 0, NULL));
    CHECK(tc_mg_bytes(&c, d, 256, 0x44));
    CHECK(tc_mg_bytes(&c, e + 256, 128, 0x45));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hset(&c, x, nc, VCU_CU_NODE_CHILD, child));
    /* The node goes, its graph with it; the exec stays. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_DESTROY, 0, ns, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_DESTROY, 0, nc, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, emb, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_gset(&c, emb, d, 1, 0, &nx));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, 0, 0, NULL, 0));
    /* A child node's graph goes with its graph too. */
    ASSERT_EQ(CUDA_SUCCESS, tc_hnode(&c, parent, VCU_CU_NODE_CHILD, child, 0, &nc));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, nc, &emb));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, parent, NULL));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_u64(&c, VCU_OP_CU_GRAPH_NODE_COUNT, 0, emb, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, x, NULL));
    tc_close(&c);
    return 0;
}

/*
 * Event record and wait nodes: only an event handle of the session names
 * the event; a node's event is set (in its graph or an exec's copy) only
 * on a node of that kind; a launched record node records.
 */
TEST(cuda_graph_event_nodes)
{
    uint64_t g, nr, nw, ns, x, ev = 0, ev2 = 0, d = 0;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &ev2));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_hnode(&c, g, VCU_CU_NODE_EVENT_RECORD, 0, 0, &nr));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_hnode(&c, g, VCU_CU_NODE_EVENT_RECORD, g, 0, &nr));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE,
              tc_hnode(&c, g, VCU_CU_NODE_EVENT_WAIT, ev + (1ull << 32), 0, &nw));
    ASSERT_EQ(CUDA_SUCCESS, tc_hnode(&c, g, VCU_CU_NODE_EVENT_WAIT, ev2, 0, &nw));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, g, d, 0x5a, nw, &ns));
    ASSERT_EQ(CUDA_SUCCESS, tc_hnode(&c, g, VCU_CU_NODE_EVENT_RECORD, ev, ns, &nr));
    /* Set: of the node's kind only, to an event only. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hset(&c, 0, nw, VCU_CU_NODE_EVENT_RECORD, ev));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hset(&c, 0, ns, VCU_CU_NODE_EVENT_WAIT, ev));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, tc_hset(&c, 0, nr, VCU_CU_NODE_EVENT_RECORD, g));
    ASSERT_EQ(CUDA_SUCCESS, tc_hset(&c, 0, nr, VCU_CU_NODE_EVENT_RECORD, ev2));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g, &x));
    ASSERT_EQ(CUDA_SUCCESS, tc_hset(&c, x, nr, VCU_CU_NODE_EVENT_RECORD, ev));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, tc_hset(&c, x, nr, VCU_CU_NODE_EVENT_WAIT, ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_SYNCHRONIZE, 0, ev, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_query(&c, VCU_CALL_cuEventQuery, 0, ev));
    CHECK(tc_mg_bytes(&c, d, 256, 0x5a));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, x, NULL));
    tc_close(&c);
    return 0;
}

/* CU_GRAPH_INSTANTIATE_PARAMS: the upload stream must be one, the result
 * and exec come back; a refused instantiation says so. */
TEST(cuda_graph_instantiate_params)
{
    struct vcu_cu_graph_inst_req rq;
    struct vcu_cu_graph_inst_resp rp;
    uint64_t g, n, s, d = 0;
    tc_t c;

    CHECK(tc_open(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, g, d, 0x6b, 0, &n));
    memset(&rq, 0, sizeof(rq));
    rq.graph = g;
    rq.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    rq.stream = 0xdead0000beefull;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_INSTANTIATE_PARAMS, 0, &rq, sizeof(rq), &rp,
                              sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.r.result);
    rq.stream = s;
    rq.graph = n;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_INSTANTIATE_PARAMS, 0, &rq, sizeof(rq), &rp,
                              sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, rp.r.result);
    rq.graph = g;
    rq.flags = 1ull << 40;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_INSTANTIATE_PARAMS, 0, &rq, sizeof(rq), &rp,
                              sizeof(rp)));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, rp.r.result);
    ASSERT_EQ_U64(0, rp.exec);
    ASSERT_NE(CUDA_GRAPH_INSTANTIATE_SUCCESS, rp.result);
    rq.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_INSTANTIATE_PARAMS, 0, &rq, sizeof(rq), &rp,
                              sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    ASSERT_EQ(CUDA_GRAPH_INSTANTIATE_SUCCESS, rp.result);
    ASSERT_EQ_U64(0, rp.error_node);
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, rp.exec, s, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    CHECK(tc_mg_bytes(&c, d, 256, 0x6b));
    tc_close(&c);
    return 0;
}

/* A user object request; the CUresult or 0x10000 + the wire status, the
 * reply's value in *out. */
static uint32_t tc_uobj(tc_t *c, uint32_t op, uint64_t obj, uint64_t graph, uint64_t cookie,
                        uint32_t count, uint32_t flags, uint32_t what, uint64_t *out)
{
    struct vcu_cu_uobj_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.object = obj;
    rq.graph = graph;
    rq.cookie = cookie;
    rq.count = count;
    rq.flags = flags;
    rq.what = what;
    st = tc_do(c, op, 0, &rq, sizeof(rq), &rp, sizeof(rp));
    if (st != VCU_S_OK)
        return 0x10000 + st;
    if (out != NULL)
        *out = rp.value;
    return rp.r.result;
}

#define TC_UREF(c, o, g, n, f, w) tc_uobj((c), VCU_OP_CU_USER_OBJECT_REF, (o), (g), 0, (n), (f), (w), NULL)

/*
 * User objects: malformed requests and forged handles refused; the guest
 * releases no more than it holds and a graph no more than it was given;
 * the destructor's cookie is posted once, when the driver drops the last
 * reference (here the exec's, when it is destroyed), and the handle is
 * gone after.
 */
TEST(cuda_user_objects)
{
    const uint32_t nds = CU_USER_OBJECT_NO_DESTRUCTOR_SYNC;
    struct vcu_cu_hdr h = {0, 0};
    struct vcu_cu_u64_resp wr;
    uint64_t u = 0, u2 = 0, g, g2, n, x, d = 0;
    tc_t c;

    CHECK(tc_open(&c));
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 256, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g2));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, g, d, 0x12, 0, &n));
    /* Creation. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0, 1, nds, 0, &u));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL,
              tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 5, 0, 0xc1, 1, nds, 0, &u));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0xc1, 1, 0, 0, &u));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0xc1, 0, nds, 0, &u));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0xc1, 0x80000000u, nds, 0, &u));
    ASSERT_EQ(CUDA_SUCCESS, tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0xc1, 1, nds, 0, &u));
    ASSERT_EQ(CUDA_SUCCESS, tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0xc2, 2, nds, 0,
                                    &u2));
    /* Another session (another guest process) names this one's object
     * and graph: not found. */
    {
        tc_t o = c;

        ASSERT_EQ(VCU_S_OK, ut_open(c.be, &o.s));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, TC_UREF(&o, u, 0, 1, 0, VCU_CU_UOBJ_RELEASE));
        ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, TC_UREF(&o, u, 0, 1, 0, VCU_CU_UOBJ_RETAIN));
        ut_close(c.be, o.s);
    }
    /* Malformed references and forged handles. */
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, TC_UREF(&c, u, 0, 1, 0, 0));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, TC_UREF(&c, u, 0, 1, 0, 5));
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, TC_UREF(&c, u, g, 1, 0, VCU_CU_UOBJ_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, TC_UREF(&c, 77, 0, 1, 0, VCU_CU_UOBJ_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, TC_UREF(&c, g, 0, 1, 0, VCU_CU_UOBJ_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, TC_UREF(&c, u, n, 1, 0, VCU_CU_UOBJ_GRAPH_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u, 0, 0, 0, VCU_CU_UOBJ_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              TC_UREF(&c, u, 0, 1, CU_GRAPH_USER_OBJECT_MOVE, VCU_CU_UOBJ_RETAIN));
    /* No more released than held, by the guest or by a graph. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u, 0, 2, 0, VCU_CU_UOBJ_RELEASE));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u, g, 1, 0, VCU_CU_UOBJ_GRAPH_RELEASE));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE,
              TC_UREF(&c, u, g, 2, CU_GRAPH_USER_OBJECT_MOVE, VCU_CU_UOBJ_GRAPH_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u, 0, 0x7fffffffu, 0, VCU_CU_UOBJ_RETAIN));
    ASSERT_EQ(CUDA_SUCCESS, TC_UREF(&c, u2, g2, 1, 0, VCU_CU_UOBJ_GRAPH_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u2, g2, 2, 0, VCU_CU_UOBJ_GRAPH_RELEASE));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u2, g, 1, 0, VCU_CU_UOBJ_GRAPH_RELEASE));
    ASSERT_EQ(CUDA_SUCCESS, TC_UREF(&c, u2, 0, 2, 0, VCU_CU_UOBJ_RELEASE));
    /* Held by g2 alone: still named, still retained through it. */
    ASSERT_EQ(CUDA_SUCCESS, TC_UREF(&c, u2, 0, 1, 0, VCU_CU_UOBJ_RETAIN));
    ASSERT_EQ(CUDA_SUCCESS, TC_UREF(&c, u2, 0, 1, 0, VCU_CU_UOBJ_RELEASE));
    /* u: moved into g, held by its exec once g is gone. */
    ASSERT_EQ(CUDA_SUCCESS, TC_UREF(&c, u, g, 1, CU_GRAPH_USER_OBJECT_MOVE,
                                    VCU_CU_UOBJ_GRAPH_RETAIN));
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u, 0, 1, 0, VCU_CU_UOBJ_RELEASE));
    ASSERT_EQ(CUDA_SUCCESS, tc_instantiate(&c, g, &x));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g, NULL));
    /* Nobody the host knows of holds it now: no retain reaches it. */
    ASSERT_EQ(CUDA_ERROR_INVALID_VALUE, TC_UREF(&c, u, 0, 1, 0, VCU_CU_UOBJ_RETAIN));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, 0, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, x, NULL));
    /* The stand-in runs the destructor at the last release: the cookie
     * waits for the guest's callback thread, once. */
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), &wr, sizeof(wr)));
    ASSERT_EQ(CUDA_SUCCESS, wr.r.result);
    ASSERT_EQ_U64(0xc1, wr.value);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, TC_UREF(&c, u, 0, 1, 0, VCU_CU_UOBJ_RETAIN));
    /* u2 goes with g2. */
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_DESTROY, 0, g2, NULL));
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), &wr, sizeof(wr)));
    ASSERT_EQ_U64(0xc2, wr.value);
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, TC_UREF(&c, u2, 0, 1, 0, VCU_CU_UOBJ_RELEASE));
    /* One left alive goes with the session. */
    ASSERT_EQ(CUDA_SUCCESS, tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0xc3, 1, nds, 0, &u));
    tc_close(&c);
    return 0;
}

/*
 * A session with a child graph node (its own graph named and added to),
 * event nodes and an exec instantiated with parameters migrates: the
 * destination launches the same exec handle with the same results; user
 * objects refuse the save, saying so.
 */
TEST(migrate_graph_child)
{
    struct vcu_cu_graph_inst_req rq;
    struct vcu_cu_graph_inst_resp rp;
    uint64_t child, parent, emb, nc, n, nr, s, ev = 0, d = 0, x, u, g1 = 0, g2 = 0;
    char why[256];
    tc_t c;
    int fd = tc_tmpfd();

    ASSERT_GE(fd, 0);
    CHECK(tc_open_mc(&c));
    s = tc_stream_new(&c);
    ASSERT_NE(0, s);
    ASSERT_EQ(CUDA_SUCCESS, tc_alloc(&c, 512, &d));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, 0, &ev));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &child));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, child, d, 0x21, 0, &n));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &parent));
    ASSERT_EQ(CUDA_SUCCESS, tc_hnode(&c, parent, VCU_CU_NODE_CHILD, child, 0, &nc));
    ASSERT_EQ(CUDA_SUCCESS, tc_hnode(&c, parent, VCU_CU_NODE_EVENT_RECORD, ev, nc, &nr));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, nc, &emb));
    ASSERT_EQ(CUDA_SUCCESS, tc_gset(&c, emb, d + 256, 0x43, 0, &n));
    memset(&rq, 0, sizeof(rq));
    rq.graph = parent;
    rq.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    rq.stream = s;
    ASSERT_EQ(VCU_S_OK, tc_do(&c, VCU_OP_CU_GRAPH_INSTANTIATE_PARAMS, 0, &rq, sizeof(rq), &rp,
                              sizeof(rp)));
    ASSERT_EQ(CUDA_SUCCESS, rp.r.result);
    x = rp.exec;
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    if (tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("save: %s", why);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g1));
    tc_close(&c);

    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    CHECK(tc_open_mc(&c));
    if (tc_state(&c, VCU_BACKEND_OP_LOAD, fd, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("load: %s", why);
    ASSERT_EQ(CUDA_SUCCESS, tc_memset(&c, d, 0, 1, 512, 1, 0, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_pair(&c, VCU_OP_CU_GRAPH_LAUNCH, x, s, 0, NULL, 0));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_STREAM_SYNCHRONIZE, 0, s, NULL));
    ASSERT_EQ(CUDA_SUCCESS, tc_query(&c, VCU_CALL_cuEventQuery, 0, ev));
    CHECK(tc_mg_bytes(&c, d, 256, 0x21));
    CHECK(tc_mg_bytes(&c, d + 256, 256, 0x43));
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, nc, &n));
    ASSERT_EQ_U64(emb, n);
    ASSERT_EQ(CUDA_SUCCESS, tc_u64(&c, VCU_OP_CU_GRAPH_CREATE, 0, 0, &g2));
    ASSERT_EQ_U64(g1, g2);
    /* A user object: refused, saying why. */
    ASSERT_EQ(CUDA_SUCCESS, tc_uobj(&c, VCU_OP_CU_USER_OBJECT_CREATE, 0, 0, 0xc1, 1,
                                    CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, 0, &u));
    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    ASSERT_EQ(VCU_S_EBUSY, tc_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
    ASSERT_TRUE(strstr(why, "user objects") != NULL);
    tc_close(&c);
    close(fd);
    return 0;
}
