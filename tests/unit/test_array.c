/*
 * CUDA arrays, array copies, texture and surface objects in the CUDA
 * executor (host-backend/worker/cuda_array.c), against the CPU stand-in:
 * descriptors checked before the driver sees them, handles and objects
 * of the session only, linear resources inside the session's own
 * allocations, arrays and mipmapped arrays charged to the VM's quota
 * until destroyed or the session ends; malformed requests refused.
 */
#include <stdio.h>

#include <cuda.h>

#include "ut.h"
#include "vcu_account.h"

#define MiB (1ull << 20)
#define TA_CTX (1 * MiB)            /* what each context is charged here */
#define INVAL ((uint32_t)CUDA_ERROR_INVALID_VALUE)
#define BADH ((uint32_t)CUDA_ERROR_INVALID_HANDLE)
#define NOSUP ((uint32_t)CUDA_ERROR_NOT_SUPPORTED)
#define OOM ((uint32_t)CUDA_ERROR_OUT_OF_MEMORY)
#define WIRE_EINVAL (0x10000u + VCU_S_EINVAL)

typedef struct ta_s {
    vcu_backend_t *be;
    uint64_t s;
} ta_t;

static int ta_open(ta_t *c, const char *gpus, vcu_account_t *a)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = gpus;
    cfg.account = a;
    cfg.account_slot = -1;
    cfg.ctx_bytes = TA_CTX;
    c->be = NULL;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c->be));
    if (vcu_backend_cuda_error(c->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c->be));
    ASSERT_EQ(VCU_S_OK, ut_open(c->be, &c->s));
    return 0;
}

static void ta_close(ta_t *c)
{
    ut_close(c->be, c->s);
    vcu_backend_free(c->be);
}

/* One request (segments already in t, or none); the CUresult or
 * 0x10000 + the wire status; the reply's first rlen bytes into resp. */
static uint32_t ta_run(ta_t *c, ut_req_t *t, uint32_t op, const void *p, uint32_t plen, void *resp,
                       size_t rlen)
{
    struct vcu_cu_resp r;
    uint32_t st;

    ut_req_build(t, op, c->s, p, plen);
    vcu_backend_execute(c->be, &t->r);
    st = ut_status(t);
    memset(&r, 0, sizeof(r));
    memcpy(&r, ut_resp_payload(t), sizeof(r));
    ut_resp_copy(t, resp, rlen);
    return st != VCU_S_OK ? 0x10000 + st : r.result;
}

static uint32_t ta_do(ta_t *c, uint32_t op, const void *p, uint32_t plen, void *resp, size_t rlen)
{
    ut_req_t *t = ut_req_new();
    uint32_t r = ta_run(c, t, op, p, plen, resp, rlen);

    free(t);
    return r;
}

static struct vcu_cu_array_req ta_desc(uint64_t w, uint64_t h, uint64_t d, uint32_t fmt,
                                       uint32_t nch)
{
    struct vcu_cu_array_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.width = w;
    rq.height = h;
    rq.depth = d;
    rq.format = fmt;
    rq.channels = nch;
    return rq;
}

static uint32_t ta_create(ta_t *c, const struct vcu_cu_array_req *rq, uint64_t *h)
{
    struct vcu_cu_u64_resp rp;
    uint32_t r = ta_do(c, VCU_OP_CU_ARRAY_CREATE, rq, sizeof(*rq), &rp, sizeof(rp));

    *h = rp.value;
    return r;
}

static uint32_t ta_u64(ta_t *c, uint32_t op, uint32_t dev, uint64_t v, uint64_t *out)
{
    struct vcu_cu_u64_req rq = {{dev, 0}, v};
    struct vcu_cu_u64_resp rp;
    uint32_t r = ta_do(c, op, &rq, sizeof(rq), &rp, sizeof(rp));

    if (out != NULL)
        *out = rp.value;
    return r;
}

static uint32_t ta_alloc(ta_t *c, uint64_t size, uint64_t *p)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    r = ta_do(c, VCU_OP_CU_MEM_ALLOC, &rq, sizeof(rq), &rp, sizeof(rp));
    *p = rp.value;
    return r;
}

/* A copy of a w x h x d box between a host buffer and array a (to the
 * array if to_arr), the array side at (x, y, z). */
static uint32_t ta_copy(ta_t *c, uint64_t a, int to_arr, void *buf, size_t len, uint64_t w,
                        uint64_t h, uint64_t d, uint64_t x, uint64_t y, uint64_t z)
{
    struct vcu_cu_memcpy3d_req rq;
    struct vcu_cu_memcpy3d_side *hs = to_arr ? &rq.src : &rq.dst, *as = to_arr ? &rq.dst : &rq.src;
    ut_req_t *t = ut_req_new();
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    hs->type = CU_MEMORYTYPE_HOST;
    hs->pitch = w;
    hs->height = h;
    as->type = CU_MEMORYTYPE_ARRAY;
    as->ptr = a;
    as->x = x;
    as->y = y;
    as->z = z;
    rq.width = w;
    rq.height = h;
    rq.depth = d;
    ut_req_add_seg(t, to_arr ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE, buf, len);
    r = ta_run(c, t, VCU_OP_CU_MEMCPY_3D, &rq, sizeof(rq), NULL, 0);
    free(t);
    return r;
}

static struct vcu_cu_texobj_req ta_tex_array(uint64_t a)
{
    struct vcu_cu_texobj_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.kind = VCU_CU_TEXOBJ_TEX;
    rq.res.type = CU_RESOURCE_TYPE_ARRAY;
    rq.res.handle = a;
    rq.tex.filter_mode = CU_TR_FILTER_MODE_LINEAR;
    rq.tex.flags = CU_TRSF_NORMALIZED_COORDINATES;
    return rq;
}

static struct vcu_cu_texobj_req ta_tex_linear(uint64_t p, uint64_t size)
{
    struct vcu_cu_texobj_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.kind = VCU_CU_TEXOBJ_TEX;
    rq.res.type = CU_RESOURCE_TYPE_LINEAR;
    rq.res.ptr = p;
    rq.res.size = size;
    rq.res.format = CU_AD_FORMAT_FLOAT;
    rq.res.channels = 1;
    return rq;
}

static uint32_t ta_obj(ta_t *c, const struct vcu_cu_texobj_req *rq, uint64_t *obj)
{
    struct vcu_cu_u64_resp rp;
    uint32_t r = ta_do(c, VCU_OP_CU_TEXOBJ_CREATE, rq, sizeof(*rq), &rp, sizeof(rp));

    *obj = rp.value;
    return r;
}

static uint32_t ta_pair(ta_t *c, uint32_t op, uint64_t obj, uint64_t kind, void *resp, size_t rlen)
{
    struct vcu_cu_pair_req rq = {{0, 0}, obj, kind, 0};

    return ta_do(c, op, &rq, sizeof(rq), resp, rlen);
}

/* Bad descriptors are refused before the driver, and make nothing. */
TEST(array_bad_desc)
{
    struct vcu_cu_array_req rq;
    uint64_t h;
    ta_t c;

    CHECK(ta_open(&c, "0", NULL));
    rq = ta_desc(0, 4, 0, CU_AD_FORMAT_FLOAT, 1);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, 4, 0, CU_AD_FORMAT_FLOAT, 3);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, 4, 0, CU_AD_FORMAT_FLOAT, 0);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, 4, 0, 0x77, 1);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, 4, 0, 0, 1);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, 4, 0, CU_AD_FORMAT_BC1_UNORM, 4);     /* known, not carried */
    ASSERT_EQ(NOSUP, ta_create(&c, &rq, &h));
    rq = ta_desc((uint64_t)1 << 40, 1, 0, CU_AD_FORMAT_FLOAT, 4);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, UINT64_MAX, 0, CU_AD_FORMAT_FLOAT, 4);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, 4, (uint64_t)1 << 32, CU_AD_FORMAT_FLOAT, 4);
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq = ta_desc(16, 4, 0, CU_AD_FORMAT_FLOAT, 1);
    rq.flags = 0x1000;
    ASSERT_EQ(INVAL, ta_create(&c, &rq, &h));
    rq.flags = CUDA_ARRAY3D_SPARSE;
    ASSERT_EQ(NOSUP, ta_create(&c, &rq, &h));
    rq.flags = 0;
    rq.reserved = 1;
    ASSERT_EQ(WIRE_EINVAL, ta_create(&c, &rq, &h));
    /* Truncated. */
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_ARRAY_CREATE, &rq, sizeof(rq) - 8, NULL, 0));
    /* The largest each dimension may be, with the product overflowing. */
    rq = ta_desc(VCU_CU_ARRAY_MAX_DIM, VCU_CU_ARRAY_MAX_DIM, VCU_CU_ARRAY_MAX_DIM,
                 CU_AD_FORMAT_FLOAT, 4);
    ASSERT_TRUE(ta_create(&c, &rq, &h) != 0);
    /* A good one. */
    rq = ta_desc(16, 4, 0, CU_AD_FORMAT_FLOAT, 1);
    ASSERT_EQ(0, (int)ta_create(&c, &rq, &h));
    ASSERT_TRUE(h >= VCU_CU_HANDLE_MIN);
    ta_close(&c);
    return 0;
}

/* Handles: forged, destroyed twice, another session's, another device's. */
TEST(array_handles)
{
    struct vcu_cu_array_req rq = ta_desc(8, 8, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4);
    unsigned char buf[256];
    uint64_t a, b;
    ta_t c, d;

    CHECK(ta_open(&c, "0,1", NULL));
    d.be = c.be;
    ASSERT_EQ(VCU_S_OK, ut_open(d.be, &d.s));
    ASSERT_EQ(0, (int)ta_create(&c, &rq, &a));
    ASSERT_EQ(BADH, ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, a + 1, NULL));
    ASSERT_EQ(BADH, ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, 0, NULL));
    ASSERT_EQ(BADH, ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, UINT64_MAX, NULL));
    ASSERT_EQ(BADH, ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 1, a, NULL));       /* device 1's? */
    ASSERT_EQ(BADH, ta_u64(&d, VCU_OP_CU_ARRAY_DESTROY, 0, a, NULL));       /* d's? */
    memset(buf, 7, sizeof(buf));
    ASSERT_EQ(BADH, ta_copy(&d, a, 1, buf, sizeof(buf), 32, 8, 1, 0, 0, 0));
    /* d's own array with the same handle value is d's alone. */
    ASSERT_EQ(0, (int)ta_create(&d, &rq, &b));
    ASSERT_EQ_U64(a, b);
    ASSERT_EQ(0, (int)ta_copy(&d, b, 1, buf, sizeof(buf), 32, 8, 1, 0, 0, 0));
    memset(buf, 0, sizeof(buf));
    ASSERT_EQ(0, (int)ta_copy(&c, a, 0, buf, sizeof(buf), 32, 8, 1, 0, 0, 0));
    ASSERT_EQ(0, buf[0] | buf[255]);
    ASSERT_EQ(0, (int)ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, a, NULL));
    ASSERT_EQ(BADH, ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, a, NULL));
    ASSERT_EQ(BADH, ta_copy(&c, a, 0, buf, sizeof(buf), 32, 8, 1, 0, 0, 0));
    ut_close(d.be, d.s);
    ta_close(&c);
    return 0;
}

/* Copies to and from arrays: the data, the edges, malformed sides. */
TEST(array_copy)
{
    struct vcu_cu_array_req rq = ta_desc(10, 6, 3, CU_AD_FORMAT_UNSIGNED_INT16, 2);
    unsigned char in[10 * 4 * 6 * 3], out[sizeof(in)];
    struct vcu_cu_memcpy3d_req m;
    struct iovec iov[3];
    uint64_t a, a2, p;
    ut_req_t *t;
    size_t i;
    ta_t c;

    CHECK(ta_open(&c, "0", NULL));
    ASSERT_EQ(0, (int)ta_create(&c, &rq, &a));
    ASSERT_EQ(0, (int)ta_create(&c, &rq, &a2));
    for (i = 0; i < sizeof(in); i++)
        in[i] = (unsigned char)(i * 31 + 1);
    ASSERT_EQ(0, (int)ta_copy(&c, a, 1, in, sizeof(in), 40, 6, 3, 0, 0, 0));
    /* Back in three ranges (the host's staging path). */
    memset(out, 0, sizeof(out));
    t = ut_req_new();
    iov[0] = (struct iovec){out, 100};
    iov[1] = (struct iovec){out + 100, 333};
    iov[2] = (struct iovec){out + 433, sizeof(out) - 433};
    ut_req_add_seg_iov(t, VCU_SEG_FROM_DEVICE, iov, 3);
    memset(&m, 0, sizeof(m));
    m.src.type = CU_MEMORYTYPE_ARRAY;
    m.src.ptr = a;
    m.dst.type = CU_MEMORYTYPE_HOST;
    m.dst.pitch = 40;
    m.dst.height = 6;
    m.width = 40;
    m.height = 6;
    m.depth = 3;
    ASSERT_EQ(0, (int)ta_run(&c, t, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    free(t);
    ASSERT_EQ(0, memcmp(in, out, sizeof(in)));
    /* Array to array to device to host. */
    ASSERT_EQ(0, (int)ta_alloc(&c, sizeof(in), &p));
    memset(&m, 0, sizeof(m));
    m.src.type = CU_MEMORYTYPE_ARRAY;
    m.src.ptr = a;
    m.dst.type = CU_MEMORYTYPE_ARRAY;
    m.dst.ptr = a2;
    m.width = 40;
    m.height = 6;
    m.depth = 3;
    ASSERT_EQ(0, (int)ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    m.src.ptr = a2;
    m.dst.type = CU_MEMORYTYPE_DEVICE;
    m.dst.ptr = p;
    m.dst.pitch = 40;
    m.dst.height = 6;
    ASSERT_EQ(0, (int)ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    memset(out, 0, sizeof(out));
    {
        struct vcu_cu_memcpy_req q;

        memset(&q, 0, sizeof(q));
        q.src = p;
        q.size = sizeof(out);
        t = ut_req_new();
        ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out, sizeof(out));
        ASSERT_EQ(0, (int)ta_run(&c, t, VCU_OP_CU_MEMCPY_DTOH, &q, sizeof(q), NULL, 0));
        free(t);
    }
    ASSERT_EQ(0, memcmp(in, out, sizeof(in)));
    /* One element in the last corner; past each edge. */
    ASSERT_EQ(0, (int)ta_copy(&c, a, 0, out, 4, 4, 1, 1, 36, 5, 2));
    ASSERT_EQ(0, memcmp(out, in + 2 * 240 + 5 * 40 + 36, 4));
    ASSERT_EQ(INVAL, ta_copy(&c, a, 0, out, 8, 8, 1, 1, 36, 5, 2));
    ASSERT_EQ(INVAL, ta_copy(&c, a, 0, out, 80, 40, 2, 1, 0, 5, 2));
    ASSERT_EQ(INVAL, ta_copy(&c, a, 0, out, 40, 40, 1, 1, 0, 0, 3));
    ASSERT_EQ(INVAL, ta_copy(&c, a, 0, out, 40, 40, 1, 1, UINT64_MAX - 8, 0, 0));
    ASSERT_EQ(INVAL, ta_copy(&c, a, 0, out, 40, 40, 1, 1, 0, UINT64_MAX, 0));
    /* The segment shorter than the rows. */
    ASSERT_EQ(INVAL, ta_copy(&c, a, 0, out, 39, 40, 1, 1, 0, 0, 0));
    /* Malformed: host offsets, two host sides, no segment, a segment
     * with no host side, an unknown type, reserved bits. */
    memset(&m, 0, sizeof(m));
    m.src.type = CU_MEMORYTYPE_ARRAY;
    m.src.ptr = a;
    m.dst.type = CU_MEMORYTYPE_HOST;
    m.dst.pitch = 40;
    m.dst.x = 4;
    m.width = 4;
    m.height = 1;
    m.depth = 1;
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out, sizeof(out));
    ASSERT_EQ(WIRE_EINVAL, ta_run(&c, t, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    free(t);
    m.dst.x = 0;
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    m.src = m.dst;
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, out, sizeof(out));
    ASSERT_EQ(WIRE_EINVAL, ta_run(&c, t, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    free(t);
    m.src.type = CU_MEMORYTYPE_ARRAY;
    m.src.ptr = a;
    m.src.pitch = 0;
    m.dst.type = CU_MEMORYTYPE_ARRAY;
    m.dst.ptr = a2;
    m.dst.pitch = 0;
    t = ut_req_new();
    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, out, sizeof(out));
    ASSERT_EQ(WIRE_EINVAL, ta_run(&c, t, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    free(t);
    m.dst.type = 9;
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    m.dst.type = CU_MEMORYTYPE_ARRAY;
    m.dst.pitch = 40;               /* an array has no pitch */
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    m.dst.pitch = 0;
    m.reserved = 1;
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    m.reserved = 0;
    m.flags = 2;
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    m.flags = 0;
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m) - 1, NULL, 0));
    ASSERT_EQ(0, (int)ta_do(&c, VCU_OP_CU_MEMCPY_3D, &m, sizeof(m), NULL, 0));
    /* Left for the session's end. */
    ta_close(&c);
    return 0;
}

/* Texture and surface objects: on the session's arrays and inside its
 * allocations only; destroyed and asked about once made, by their kind. */
TEST(array_texobj)
{
    struct vcu_cu_array_req ar = ta_desc(32, 16, 0, CU_AD_FORMAT_FLOAT, 1);
    struct vcu_cu_texobj_req rq;
    struct vcu_cu_texobj_resp got;
    uint64_t a, sa, p1, p2, t1, t2, s1, x;
    ta_t c, d;

    CHECK(ta_open(&c, "0", NULL));
    d.be = c.be;
    ASSERT_EQ(VCU_S_OK, ut_open(d.be, &d.s));
    ASSERT_EQ(0, (int)ta_create(&c, &ar, &a));
    ASSERT_EQ(0, (int)ta_alloc(&c, 4096, &p1));
    ASSERT_EQ(0, (int)ta_alloc(&c, 4096, &p2));

    rq = ta_tex_array(a);
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &t1));
    ASSERT_TRUE(t1 != 0);
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_GET, t1, VCU_CU_TEXOBJ_TEX, &got, sizeof(got)));
    ASSERT_EQ_U64(a, got.res.handle);
    ASSERT_EQ(CU_TR_FILTER_MODE_LINEAR, (int)got.tex.filter_mode);
    ASSERT_EQ(0, (int)got.has_view);
    /* Its value is no surface, nor another session's object. */
    ASSERT_EQ(INVAL, ta_pair(&c, VCU_OP_CU_TEXOBJ_GET, t1, VCU_CU_TEXOBJ_SURF, &got, sizeof(got)));
    ASSERT_EQ(INVAL, ta_pair(&d, VCU_OP_CU_TEXOBJ_GET, t1, VCU_CU_TEXOBJ_TEX, &got, sizeof(got)));
    ASSERT_EQ(INVAL, ta_pair(&d, VCU_OP_CU_TEXOBJ_DESTROY, t1, VCU_CU_TEXOBJ_TEX, NULL, 0));
    ASSERT_EQ(INVAL, ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, t1 + 1000, VCU_CU_TEXOBJ_TEX, NULL, 0));
    ASSERT_EQ(INVAL, ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, 0, VCU_CU_TEXOBJ_TEX, NULL, 0));
    ASSERT_EQ(INVAL, ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, UINT64_MAX, VCU_CU_TEXOBJ_TEX, NULL, 0));
    ASSERT_EQ(WIRE_EINVAL, ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, t1, 2, NULL, 0));
    /* Another session's array. */
    ASSERT_EQ(BADH, ta_obj(&d, &rq, &x));

    /* Linear: beginning in an allocation of the session, never at an
     * address the session did not allocate; reaching past its end is the
     * driver's to judge, as natively (it takes it). */
    rq = ta_tex_linear(p1, 4096);
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &t2));
    rq = ta_tex_linear(p1 + 1024, 3072);
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &x));
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, x, VCU_CU_TEXOBJ_TEX, NULL, 0));
    rq = ta_tex_linear(p1, 4097);
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &x));
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, x, VCU_CU_TEXOBJ_TEX, NULL, 0));
    rq = ta_tex_linear(p1 + 4000, p2 - p1);
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &x));
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, x, VCU_CU_TEXOBJ_TEX, NULL, 0));
    rq = ta_tex_linear(p1, 0);
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_linear(p1, UINT64_MAX);
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_linear(0x1000, 16);
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_linear(p1, 64);
    ASSERT_EQ(INVAL, ta_obj(&d, &rq, &x));          /* c's memory, d's object */
    /* Pitched: beginning in an allocation of the session. */
    rq = ta_tex_linear(p1, 0);
    rq.res.type = CU_RESOURCE_TYPE_PITCH2D;
    rq.res.width = 16;
    rq.res.height = 16;
    rq.res.pitch = 256;
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &x));
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, x, VCU_CU_TEXOBJ_TEX, NULL, 0));
    rq.res.height = 17;             /* past the end: the driver's to judge */
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &x));
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, x, VCU_CU_TEXOBJ_TEX, NULL, 0));
    rq.res.ptr = 0x1000;            /* not the session's */
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq.res.ptr = p1;
    rq.res.height = 16;
    rq.res.pitch = 32;              /* less than a row */
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq.res.pitch = UINT64_MAX / 8;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));

    /* Bad fields, each alone. */
    rq = ta_tex_array(a);
    rq.tex.address_mode[1] = 4;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.tex.filter_mode = 2;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.tex.flags = 0x80;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.tex.max_anisotropy = 17;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.tex.mipmap_level_bias = 0x7fc00000;          /* NaN */
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.res.flags = 1;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.res.type = 9;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.res.type = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;    /* an array is no mipmapped array */
    ASSERT_EQ(BADH, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.res.ptr = p1;                /* an array resource has no address */
    ASSERT_EQ(WIRE_EINVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.view.width = 4;              /* a view without has_view */
    ASSERT_EQ(WIRE_EINVAL, ta_obj(&c, &rq, &x));
    rq.has_view = 1;
    rq.view.format = 0x99;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq.view.format = CU_RES_VIEW_FORMAT_FLOAT_1X32;
    rq.view.first_layer = 2;
    rq.view.last_layer = 1;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq.view.first_layer = 0;
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &x));
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_GET, x, VCU_CU_TEXOBJ_TEX, &got, sizeof(got)));
    ASSERT_EQ(1, (int)got.has_view);
    ASSERT_EQ_U64(4, got.view.width);
    rq.has_view = 2;
    ASSERT_EQ(WIRE_EINVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_array(a);
    rq.kind = 2;
    ASSERT_EQ(WIRE_EINVAL, ta_obj(&c, &rq, &x));
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_TEXOBJ_CREATE, &rq, sizeof(rq) - 4, NULL, 0));

    /* Surfaces: an array resource only (made for surface access: the
     * driver's check), no texture fields. */
    ar.flags = CUDA_ARRAY3D_SURFACE_LDST;
    ASSERT_EQ(0, (int)ta_create(&c, &ar, &sa));
    rq = ta_tex_array(sa);
    rq.kind = VCU_CU_TEXOBJ_SURF;
    ASSERT_EQ(WIRE_EINVAL, ta_obj(&c, &rq, &x));
    memset(&rq.tex, 0, sizeof(rq.tex));
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &s1));
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_GET, s1, VCU_CU_TEXOBJ_SURF, &got, sizeof(got)));
    ASSERT_EQ_U64(sa, got.res.handle);
    ASSERT_EQ(VCU_CU_TEXOBJ_SURF, (int)got.kind);
    rq.res.handle = a;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    rq = ta_tex_linear(p1, 64);
    memset(&rq.tex, 0, sizeof(rq.tex));
    rq.kind = VCU_CU_TEXOBJ_SURF;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));

    /* Destroyed: once. */
    ASSERT_EQ(0, (int)ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, t2, VCU_CU_TEXOBJ_TEX, NULL, 0));
    ASSERT_EQ(INVAL, ta_pair(&c, VCU_OP_CU_TEXOBJ_DESTROY, t2, VCU_CU_TEXOBJ_TEX, NULL, 0));
    ASSERT_EQ(INVAL, ta_pair(&c, VCU_OP_CU_TEXOBJ_GET, t2, VCU_CU_TEXOBJ_TEX, &got, sizeof(got)));
    /* An object on a destroyed array cannot be made. */
    ASSERT_EQ(0, (int)ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, a, NULL));
    rq = ta_tex_array(a);
    ASSERT_EQ(BADH, ta_obj(&c, &rq, &x));
    /* t1, s1 and x (on the destroyed array) are left for the session's
     * end; the stand-in and ASan see that nothing leaks. */
    ut_close(d.be, d.s);
    ta_close(&c);
    return 0;
}

/* Arrays are charged as allocations: refused past the quota, given back
 * at destroy and at the session's end. */
TEST(array_quota)
{
    vcu_account_t *a;
    struct vcu_cu_array_req rq;
    uint64_t h1, h2, x, used;
    ta_t c;

    ASSERT_EQ(0, vcu__acct_new(16 * MiB + TA_CTX, 8, &a));
    CHECK(ta_open(&c, "0", a));
    /* 1024 x 1024 floats: 4 MiB. */
    rq = ta_desc(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1);
    ASSERT_EQ(0, (int)ta_create(&c, &rq, &h1));
    used = vcu__acct_used(a, 0);
    ASSERT_TRUE(used >= 4 * MiB + TA_CTX);
    ASSERT_TRUE(used <= 5 * MiB + TA_CTX);
    /* Larger than what is left; larger than the whole quota. */
    rq = ta_desc(1024, 1024, 4, CU_AD_FORMAT_FLOAT, 1);
    ASSERT_EQ(OOM, ta_create(&c, &rq, &x));
    rq = ta_desc(VCU_CU_ARRAY_MAX_DIM, VCU_CU_ARRAY_MAX_DIM, 0, CU_AD_FORMAT_FLOAT, 4);
    ASSERT_EQ(OOM, ta_create(&c, &rq, &x));
    ASSERT_EQ_U64(used, vcu__acct_used(a, 0));
    /* Destroyed: its charge goes back. */
    ASSERT_EQ(0, (int)ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, h1, NULL));
    ASSERT_EQ_U64(TA_CTX, vcu__acct_used(a, 0));
    rq = ta_desc(1024, 1024, 3, CU_AD_FORMAT_FLOAT, 1);
    ASSERT_EQ(0, (int)ta_create(&c, &rq, &h2));
    ASSERT_TRUE(vcu__acct_used(a, 0) >= 12 * MiB + TA_CTX);
    /* The session's end gives back what it left. */
    ta_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(a, 0));
    vcu__acct_put(a);
    return 0;
}

static uint32_t ta_mip(ta_t *c, uint64_t w, uint64_t h, uint32_t levels, uint64_t *m)
{
    struct vcu_cu_mipmap_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.a = ta_desc(w, h, 0, CU_AD_FORMAT_FLOAT, 1);
    rq.levels = levels;
    r = ta_do(c, VCU_OP_CU_MIPMAP_CREATE, &rq, sizeof(rq), &rp, sizeof(rp));
    *m = rp.value;
    return r;
}

static uint32_t ta_level(ta_t *c, uint64_t m, uint64_t level, uint64_t *a)
{
    struct vcu_cu_pair_req rq = {{0, 0}, m, level, 0};
    struct vcu_cu_u64_resp rp;
    uint32_t r = ta_do(c, VCU_OP_CU_MIPMAP_LEVEL, &rq, sizeof(rq), &rp, sizeof(rp));

    *a = rp.value;
    return r;
}

/* Mipmapped arrays: charged for every level, levels the same handle each
 * time and only their mipmapped array's to destroy, gone with it. */
TEST(array_mipmap)
{
    vcu_account_t *acct;
    struct vcu_cu_texobj_req rq;
    struct vcu_cu_mipmap_req mr;
    unsigned char buf[256 * 4];
    uint64_t m, l1, l1b, l8, t, x;
    ta_t c, d;

    ASSERT_EQ(0, vcu__acct_new(16 * MiB + TA_CTX, 8, &acct));
    CHECK(ta_open(&c, "0", acct));
    d.be = c.be;
    ASSERT_EQ(VCU_S_OK, ut_open(d.be, &d.s));
    ASSERT_EQ(INVAL, ta_mip(&c, 256, 256, 0, &x));
    ASSERT_EQ(INVAL, ta_mip(&c, 256, 256, 10, &x));          /* 256 halves 8 times */
    ASSERT_EQ(OOM, ta_mip(&c, 2048, 2048, 2, &x));            /* 16 MiB, twice */
    ASSERT_EQ(0, (int)ta_mip(&c, 512, 512, 9, &m));
    ASSERT_EQ_U64(2 * MiB + TA_CTX, vcu__acct_used(acct, 0));
    ASSERT_EQ(0, (int)ta_level(&c, m, 1, &l1));
    ASSERT_EQ(0, (int)ta_level(&c, m, 1, &l1b));
    ASSERT_EQ_U64(l1, l1b);
    ASSERT_EQ(0, (int)ta_level(&c, m, 8, &l8));
    ASSERT_EQ(INVAL, ta_level(&c, m, 9, &x));
    ASSERT_EQ(BADH, ta_level(&c, m + 1, 0, &x));
    ASSERT_EQ(BADH, ta_level(&d, m, 0, &x));                  /* another session's */
    ASSERT_EQ(BADH, ta_level(&c, l1, 0, &x));                 /* an array is no mipmap */
    /* Levels cost nothing more (d's context is charged now). */
    ASSERT_EQ_U64(2 * MiB + 2 * TA_CTX, vcu__acct_used(acct, 0));
    /* A level is an array for copies, with its own extent (256 x 256)
     * and the last level's (2 x 2). */
    memset(buf, 3, sizeof(buf));
    ASSERT_EQ(0, (int)ta_copy(&c, l1, 1, buf, sizeof(buf), 1024, 1, 1, 0, 255, 0));
    ASSERT_EQ(INVAL, ta_copy(&c, l1, 1, buf, sizeof(buf), 1024, 1, 1, 4, 255, 0));
    ASSERT_EQ(0, (int)ta_copy(&c, l8, 0, buf, 16, 8, 2, 1, 0, 0, 0));
    ASSERT_EQ(INVAL, ta_copy(&c, l8, 0, buf, 12, 12, 1, 1, 0, 0, 0));
    ASSERT_EQ(INVAL, ta_copy(&c, l8, 0, buf, 24, 8, 3, 1, 0, 0, 0));
    ASSERT_EQ(INVAL, ta_u64(&c, VCU_OP_CU_ARRAY_DESTROY, 0, l1, NULL));
    /* A texture over the mipmapped array; no surface. */
    memset(&rq, 0, sizeof(rq));
    rq.kind = VCU_CU_TEXOBJ_TEX;
    rq.res.type = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    rq.res.handle = m;
    rq.tex.mipmap_filter_mode = CU_TR_FILTER_MODE_LINEAR;
    ASSERT_EQ(0, (int)ta_obj(&c, &rq, &t));
    rq.res.handle = l1;
    ASSERT_EQ(BADH, ta_obj(&c, &rq, &x));
    rq.res.handle = m;
    rq.res.ptr = 64;
    ASSERT_EQ(WIRE_EINVAL, ta_obj(&c, &rq, &x));
    rq.res.ptr = 0;
    memset(&rq.tex, 0, sizeof(rq.tex));
    rq.kind = VCU_CU_TEXOBJ_SURF;
    ASSERT_EQ(INVAL, ta_obj(&c, &rq, &x));
    /* Malformed. */
    memset(&mr, 0, sizeof(mr));
    mr.a = ta_desc(16, 16, 0, CU_AD_FORMAT_FLOAT, 1);
    mr.levels = 1;
    mr.reserved = 1;
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MIPMAP_CREATE, &mr, sizeof(mr), NULL, 0));
    mr.reserved = 0;
    ASSERT_EQ(WIRE_EINVAL, ta_do(&c, VCU_OP_CU_MIPMAP_CREATE, &mr, sizeof(mr) - 8, NULL, 0));
    /* Destroyed: its levels with it, its charge back; once. */
    ASSERT_EQ(BADH, ta_u64(&d, VCU_OP_CU_MIPMAP_DESTROY, 0, m, NULL));
    ASSERT_EQ(0, (int)ta_u64(&c, VCU_OP_CU_MIPMAP_DESTROY, 0, m, NULL));
    ASSERT_EQ(BADH, ta_u64(&c, VCU_OP_CU_MIPMAP_DESTROY, 0, m, NULL));
    ASSERT_EQ(BADH, ta_copy(&c, l1, 0, buf, 4, 4, 1, 1, 0, 0, 0));
    ASSERT_EQ(BADH, ta_level(&c, m, 1, &x));
    ASSERT_EQ_U64(2 * TA_CTX, vcu__acct_used(acct, 0));
    /* One left for the session's end, a level asked for. */
    ASSERT_EQ(0, (int)ta_mip(&c, 64, 64, 3, &m));
    ASSERT_EQ(0, (int)ta_level(&c, m, 2, &x));
    ut_close(d.be, d.s);
    ta_close(&c);
    ASSERT_EQ_U64(0, vcu__acct_used(acct, 0));
    vcu__acct_put(acct);
    return 0;
}
