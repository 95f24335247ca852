/*
 * guest-lib's managed-memory coherence (guest-lib/vcu_managed.c, built
 * into this binary on its own) over a device faked here: its memory is
 * buffers of this process at addresses kept free for the shadows, its
 * copies memcpy, and a "kernel" is a write into a buffer between the
 * hooks that surround device work (vcu__m_use) and waits (vcu__m_sync).
 * What a program sees through the shadows: the device's writes after a
 * wait, the host's writes on the device at the next use, no stale read
 * and no lost write when the host touches memory device work may be
 * using (cuda-samples systemWideAtomics), and attachment to the host or
 * to one stream letting the host work while other streams' work runs
 * (cuda-samples UnifiedMemoryStreams).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../guest-lib/vcu_managed.h"
#include "vcu_test.h"

#define FK_MAX 16
#define FK_SPAN (64ull << 20)

static struct {
    uint64_t base;
    size_t size;
    unsigned char *mem;
} fk[FK_MAX];
static int fk_n;
static uint64_t fk_next, fk_end;
/* Counted in the fault handler too. */
static volatile int fk_ctx_syncs, fk_htod, fk_dtoh;

/* The fake device memory holding [a, a + n), or NULL. */
static unsigned char *fk_mem(uint64_t a, uint64_t n)
{
    for (int i = 0; i < fk_n; i++)
        if (a >= fk[i].base && a - fk[i].base + n <= fk[i].size)
            return fk[i].mem + (a - fk[i].base);
    return NULL;
}

static int fk_call(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                   unsigned int nbufs, void *resp, uint32_t resp_cap)
{
    struct vcu_cu_memcpy_req *c = req;
    unsigned char *d;

    (void)dev;
    (void)req_len;
    (void)resp_cap;
    switch (op) {
    case VCU_OP_CU_STREAM_CREATE:
        ((struct vcu_cu_u64_resp *)resp)->value = 77;
        return 0;
    case VCU_OP_CU_MEM_ALLOC: {
        uint64_t size = ((struct vcu_cu_mem_alloc_req *)req)->size;
        uint64_t span = (size + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);

        if (fk_n == FK_MAX || fk_next + span > fk_end)
            return 2;
        fk[fk_n].base = fk_next;
        fk[fk_n].size = size;
        fk[fk_n].mem = calloc(1, size);
        if (fk[fk_n].mem == NULL)
            return 2;
        ((struct vcu_cu_u64_resp *)resp)->value = fk_next;
        fk_n++;
        fk_next += span;
        return 0;
    }
    case VCU_OP_CU_MEMSET: {
        struct vcu_cu_memset_req *s = req;

        d = fk_mem(s->dst, s->width);
        if (d == NULL)
            return 1;
        memset(d, (int)s->value, s->width);
        return 0;
    }
    case VCU_OP_CU_CTX_SYNCHRONIZE:
        fk_ctx_syncs++;
        return 0;
    case VCU_OP_CU_MEM_FREE:
    case VCU_OP_CU_STREAM_SYNCHRONIZE:
        return 0;
    case VCU_OP_CU_MEMCPY_HTOD:
        d = fk_mem(c->dst, c->size);
        if (d == NULL || nbufs != 1 || bufs[0].len != c->size)
            return 1;
        memcpy(d, bufs[0].addr, c->size);
        fk_htod++;
        return 0;
    case VCU_OP_CU_MEMCPY_DTOH:
        d = fk_mem(c->src, c->size);
        if (d == NULL || nbufs != 1 || bufs[0].len != c->size)
            return 1;
        memcpy(bufs[0].addr, d, c->size);
        fk_dtoh++;
        return 0;
    }
    return 1;
}

static int fk_loopback(void)
{
    return 0;
}

static uint64_t fk_max_xfer(void)
{
    return 1u << 20;
}

const vcu__m_ops_t vcu__m_ops = {
    .call = fk_call,
    .loopback = fk_loopback,
    .max_xfer = fk_max_xfer,
    .oom = 2,
    .unknown = 3,
    .name = "test_managed",
};

/* guest-lib's vcu_common.c is not in this binary. */
void vcu__log_once(int *flag, const char *fmt, ...)
{
    (void)fmt;
    *flag = 1;
}

/* Addresses for the fake device: a range the kernel gave and took back,
 * so the shadows can be mapped there. */
static int fk_setup(void)
{
    void *p;

    if (fk_end != 0)
        return 0;
    p = mmap(NULL, FK_SPAN + (1u << 20), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    munmap(p, FK_SPAN + (1u << 20));
    fk_next = ((uint64_t)(uintptr_t)p + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
    fk_end = fk_next + FK_SPAN - (1u << 20);
    return 0;
}

static int *fk_alloc(size_t n, unsigned int flags)
{
    void *p = NULL;

    if (fk_setup() != 0 || vcu__m_alloc(0, n * sizeof(int), flags, &p) != 0)
        return NULL;
    return p;
}

static void fk_release(int *p)
{
    uint64_t dptr;
    int dev;

    vcu__m_release((uint64_t)(uintptr_t)p, &dev, &dptr);
}

#define S1 0x1001ull
#define S2 0x1002ull

/* The host's writes reach the device at a use, the device's come back
 * after a covering wait. */
TEST(managed_roundtrip)
{
    volatile int *p = fk_alloc(1024, VCU__M_ATTACH_GLOBAL);
    int *dev;

    ASSERT_TRUE(p != NULL);
    dev = (int *)fk_mem((uint64_t)(uintptr_t)p, 4096);
    ASSERT_TRUE(dev != NULL);
    ASSERT_EQ(0, p[5]);
    p[5] = 42;
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));
    ASSERT_EQ(42, dev[5]);
    dev[6] = 7;                                     /* the kernel */
    ASSERT_EQ(0, vcu__m_sync(0, S1, 0));            /* all work went to S1 */
    ASSERT_EQ(7, p[6]);
    ASSERT_EQ(42, p[5]);
    fk_release((int *)p);
    return 0;
}

/*
 * systemWideAtomics: the host adds while the device's kernel may still
 * run.  The host's access waits for the device, sees its result, and its
 * own additions survive the wait that follows.
 */
TEST(managed_host_touch_while_busy)
{
    volatile int *p = fk_alloc(16, VCU__M_ATTACH_GLOBAL);
    int *dev, syncs;

    ASSERT_TRUE(p != NULL);
    dev = (int *)fk_mem((uint64_t)(uintptr_t)p, 64);
    p[0] = 1;
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));
    dev[0] += 100;                                  /* the kernel's additions */
    syncs = fk_ctx_syncs;
    for (int i = 0; i < 10; i++)
        __sync_fetch_and_add(&p[0], 1);             /* no wait before: CUDA forbids it */
    ASSERT_EQ(syncs + 1, fk_ctx_syncs);             /* the handler waited for the device */
    ASSERT_EQ(111, p[0]);
    ASSERT_EQ(0, vcu__m_sync(0, VCU_CU_STREAM_LEGACY, 1));
    ASSERT_EQ(111, p[0]);
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));
    ASSERT_EQ(111, dev[0]);
    ASSERT_EQ(0, vcu__m_sync(0, VCU_CU_STREAM_LEGACY, 1));
    fk_release((int *)p);
    return 0;
}

/* A wait for one stream while another stream's work may write a global
 * region leaves it busy: the host's read waits for the device. */
TEST(managed_partial_wait)
{
    volatile int *p = fk_alloc(16, VCU__M_ATTACH_GLOBAL);
    int *dev, syncs;

    ASSERT_TRUE(p != NULL);
    dev = (int *)fk_mem((uint64_t)(uintptr_t)p, 64);
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));
    ASSERT_EQ(0, vcu__m_use(0, S2, 0, 0));
    ASSERT_EQ(0, vcu__m_sync(0, S1, 0));
    dev[3] = 33;                                    /* S2's kernel, still running */
    syncs = fk_ctx_syncs;
    ASSERT_EQ(33, p[3]);
    ASSERT_EQ(syncs + 1, fk_ctx_syncs);
    ASSERT_EQ(0, vcu__m_sync(0, VCU_CU_STREAM_LEGACY, 1));
    fk_release((int *)p);
    return 0;
}

/*
 * UnifiedMemoryStreams: memory attached to the host is the host's while
 * device work runs (no wait, no copy), memory attached to a stream is
 * busy only for that stream's work and comes back when it is waited for.
 */
TEST(managed_attach)
{
    volatile int *h = fk_alloc(256, VCU__M_ATTACH_GLOBAL);
    volatile int *s = fk_alloc(256, VCU__M_ATTACH_GLOBAL);
    volatile int *g = fk_alloc(256, VCU__M_ATTACH_GLOBAL);
    int *hd, *sd, syncs, htod;

    ASSERT_TRUE(h != NULL && s != NULL && g != NULL);
    hd = (int *)fk_mem((uint64_t)(uintptr_t)h, 1024);
    sd = (int *)fk_mem((uint64_t)(uintptr_t)s, 1024);
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));         /* before the attachments */
    ASSERT_EQ(0, vcu__m_attach_to((uint64_t)(uintptr_t)h, 0, VCU__M_ATTACH_HOST));
    ASSERT_EQ(0, vcu__m_attach_to((uint64_t)(uintptr_t)s, S2, VCU__M_ATTACH_SINGLE));
    ASSERT_EQ(0, vcu__m_sync(0, S2, 0));            /* their stream reached them */
    syncs = fk_ctx_syncs;
    h[0] = 1;                                       /* the host's, while S1 runs */
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));         /* more work elsewhere */
    htod = fk_htod;
    for (int i = 1; i < 256; i++)
        h[i] = h[i - 1] + 1;
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));
    ASSERT_EQ(htod, fk_htod);                       /* host memory stays put */
    ASSERT_EQ(0, hd[10]);
    ASSERT_EQ(0, vcu__m_sync(0, S1, 0));
    ASSERT_EQ(256, h[255]);
    /* s: S2's work writes it, S1's does not make it busy. */
    s[1] = 5;
    ASSERT_EQ(0, vcu__m_use(0, S2, 0, 0));
    ASSERT_EQ(5, sd[1]);
    sd[2] = 9;
    ASSERT_EQ(0, vcu__m_use(0, S1, 0, 0));
    ASSERT_EQ(0, vcu__m_sync(0, S2, 0));            /* S1's work may still run */
    ASSERT_EQ(9, s[2]);
    ASSERT_EQ(syncs, fk_ctx_syncs);                 /* nothing waited for the device */
    /* A copy naming host-attached memory takes it to the device. */
    ASSERT_EQ(0, vcu__m_use(0, S1, (uint64_t)(uintptr_t)h, 0));
    ASSERT_EQ(256, hd[255]);
    hd[0] = -1;
    ASSERT_EQ(0, vcu__m_sync(0, S1, 0));
    ASSERT_EQ(-1, h[0]);
    ASSERT_EQ(0, vcu__m_sync(0, VCU_CU_STREAM_LEGACY, 1));
    fk_release((int *)h);
    fk_release((int *)s);
    fk_release((int *)g);
    return 0;
}
