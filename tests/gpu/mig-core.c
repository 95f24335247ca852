/*
 * The worker's migration core (host-backend/worker/cuda_migrate.c) on the
 * real driver, without VM or QEMU: one process builds a session as a
 * guest's would (allocations with a free among them, a module with
 * globals, a function, a stream, runs of launches that the backend sends
 * as graphs, a graph built node by node (a kernel and a copy of its
 * buffer) and one captured from the stream, each instantiated, rounds of
 * a kernel and of both graphs that each check their data), saves it,
 * and exits; a second, fresh process loads the state into a new backend
 * and goes on with the same rounds, addresses and handles, checking each.
 *
 *   mig-core save DIR STATE [ROUNDS]    (DIR holds probe-migrate.fatbin)
 *   mig-core load DIR STATE [ROUNDS]
 *
 * Both print one line per step; the last says PASS or FAIL.  Built by
 * tests/gpu/prepare.sh against the backend library; run by
 * tests/gpu/mig-core.sh.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "vcu_backend.h"
#include "vcu_proto.h"

#define N (1u << 18)                /* words of the round's buffer */
#define ADD 3u

typedef struct st_s {
    uint64_t mod, fn, big, buf, small, stream, extra, extra_bytes;
    uint64_t gbuf, gcopy, cbuf, gexec, cexec;   /* the graphs' buffers and execs */
    uint32_t rounds;
} st_t;

static vcu_backend_t *be;
static uint64_t sess;

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* One request; its reply payload into resp; the wire status. */
static uint32_t call(uint32_t op, uint32_t flags, const void *p, uint32_t plen, void *data,
                     size_t dlen, uint32_t dir, void *resp, size_t rlen)
{
    static unsigned char rq[sizeof(struct vcu_req_hdr) + 65536 + 64];
    static unsigned char rp[sizeof(struct vcu_resp_hdr) + 65536];
    struct vcu_req_hdr *h = (void *)rq;
    struct vcu_resp_hdr *rh = (void *)rp;
    struct iovec iov = { data, dlen };
    vcu_segment_t seg = { &iov, 1, dlen, dir, NULL };
    size_t pad = (plen + 7) & ~7u;
    vcu_request_t r;

    memset(rq, 0, sizeof(*h) + pad + sizeof(struct vcu_seg));
    h->opcode = op;
    h->flags = flags;
    h->session = sess;
    h->req_id = 1;
    h->payload_len = plen;
    h->nsegs = data ? 1 : 0;
    memcpy(h + 1, p, plen);
    if (data) {
        struct vcu_seg w = { dlen, 1, dir };

        memcpy(rq + sizeof(*h) + pad, &w, sizeof(w));
    }
    memset(&r, 0, sizeof(r));
    r.req = rq;
    r.req_len = sizeof(*h) + pad + (data ? sizeof(struct vcu_seg) : 0);
    r.segs = data ? &seg : NULL;
    r.nsegs = data ? 1 : 0;
    r.resp = rp;
    r.resp_cap = sizeof(rp);
    vcu_backend_execute(be, &r);
    if (resp)
        memcpy(resp, rh + 1, rlen < rh->payload_len ? rlen : rh->payload_len);
    return rh->status;
}

static uint64_t u64(uint32_t op, uint64_t v, uint32_t *res)
{
    struct vcu_cu_u64_req q = { { 0, 0 }, v };
    struct vcu_cu_u64_resp a;

    memset(&a, 0, sizeof(a));
    if (call(op, 0, &q, sizeof(q), NULL, 0, 0, &a, sizeof(a)) != VCU_S_OK)
        a.r.result = 999;
    *res = a.r.result;
    return a.value;
}

static int fail(const char *what, uint32_t res)
{
    printf("FAIL %s (%u)\n", what, res);
    return 1;
}

static uint64_t alloc(uint64_t size, uint32_t *res)
{
    struct vcu_cu_mem_alloc_req q;
    struct vcu_cu_u64_resp a;

    memset(&q, 0, sizeof(q));
    q.size = size;
    memset(&a, 0, sizeof(a));
    if (call(VCU_OP_CU_MEM_ALLOC, 0, &q, sizeof(q), NULL, 0, 0, &a, sizeof(a)) != VCU_S_OK)
        a.r.result = 999;
    *res = a.r.result;
    return a.value;
}

static uint32_t copy(int htod, uint64_t d, void *h, size_t n)
{
    struct vcu_cu_memcpy_req q;
    struct vcu_cu_resp a = { 999, 0 };

    memset(&q, 0, sizeof(q));
    q.dst = htod ? d : 0;
    q.src = htod ? 0 : d;
    q.size = n;
    call(htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, 0, &q, sizeof(q), h, n,
         htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE, &a, sizeof(a));
    return a.result;
}

/* The launch payload of bump(buf, N, ADD) on the stream. */
static size_t launch_req(const st_t *s, unsigned char *p)
{
    struct vcu_cu_launch_req q;
    uint32_t n = N, add = ADD;

    memset(&q, 0, sizeof(q));
    q.function = s->fn;
    q.stream = s->stream;
    q.grid[0] = N / 256;
    q.grid[1] = q.grid[2] = 1;
    q.block[0] = 256;
    q.block[1] = q.block[2] = 1;
    q.param_bytes = 16;
    memcpy(p, &q, sizeof(q));
    memcpy(p + sizeof(q), &s->buf, 8);
    memcpy(p + sizeof(q) + 8, &n, 4);
    memcpy(p + sizeof(q) + 12, &add, 4);
    return sizeof(q) + 16;
}

/* bump's parameters on buf into p. */
static void bump_params(unsigned char *p, uint64_t buf)
{
    uint32_t n = N, add = ADD;

    memcpy(p, &buf, 8);
    memcpy(p + 8, &n, 4);
    memcpy(p + 12, &add, 4);
}

static uint32_t pair(uint32_t op, uint64_t a, uint64_t b, uint64_t c, uint64_t *value)
{
    struct vcu_cu_pair_req q = { { 0, 0 }, a, b, c };
    struct vcu_cu_u64_resp r;

    memset(&r, 0, sizeof(r));
    if (call(op, 0, &q, sizeof(q), NULL, 0, 0, &r, sizeof(r)) != VCU_S_OK)
        r.r.result = 999;
    if (value != NULL)
        *value = r.value;
    return r.r.result;
}

/* Every word of buffer d is want. */
static int check_words(const char *what, uint32_t r, uint64_t d, unsigned int *h,
                       unsigned long long want)
{
    uint32_t res, i;

    if ((res = copy(0, d, h, N * 4)) != 0)
        return fail("read back", res);
    for (i = 0; i < N; i++)
        if (h[i] != (unsigned int)want)
            return printf("FAIL round %u: %s word %u is %u, want %llu\n", r, what, i, h[i],
                          want), 1;
    return 0;
}

/*
 * The graphs: one built node by node (bump on gbuf, then gbuf copied to
 * gcopy), one captured from the stream (bump on cbuf), both instantiated.
 */
static int build_graphs(st_t *s)
{
    unsigned char p[sizeof(struct vcu_cu_graph_node_req) + 16 + 8];
    struct vcu_cu_graph_node_req q;
    struct vcu_cu_u64_resp a;
    uint64_t g = 0, k, cg = 0;
    unsigned char lp[sizeof(struct vcu_cu_launch_req) + 16];
    struct vcu_cu_resp la = { 999, 0 };
    uint32_t res;

    s->gbuf = alloc(N * 4, &res);
    if (res == 0)
        s->gcopy = alloc(N * 4, &res);
    if (res == 0)
        s->cbuf = alloc(N * 4, &res);
    if (res)
        return fail("alloc graph buffers", res);
    if ((res = pair(VCU_OP_CU_GRAPH_CREATE, 0, 0, 0, &g)) != 0)
        return fail("graph create", res);
    memset(&q, 0, sizeof(q));
    q.graph = g;
    q.kind = VCU_CU_NODE_KERNEL;
    q.function = s->fn;
    q.grid[0] = N / 256;
    q.grid[1] = q.grid[2] = 1;
    q.block[0] = 256;
    q.block[1] = q.block[2] = 1;
    q.param_bytes = 16;
    memcpy(p, &q, sizeof(q));
    bump_params(p + sizeof(q), s->gbuf);
    memset(&a, 0, sizeof(a));
    call(VCU_OP_CU_GRAPH_ADD_NODE, 0, p, sizeof(q) + 16, NULL, 0, 0, &a, sizeof(a));
    if (a.r.result)
        return fail("kernel node", a.r.result);
    k = a.value;
    memset(&q, 0, sizeof(q));
    q.graph = g;
    q.kind = VCU_CU_NODE_MEMCPY;
    q.ndeps = 1;
    q.dst = s->gcopy;
    q.src = s->gbuf;
    q.width = N * 4;
    memcpy(p, &q, sizeof(q));
    memcpy(p + sizeof(q), &k, 8);
    memset(&a, 0, sizeof(a));
    call(VCU_OP_CU_GRAPH_ADD_NODE, 0, p, sizeof(q) + 8, NULL, 0, 0, &a, sizeof(a));
    if (a.r.result)
        return fail("copy node", a.r.result);
    if ((res = pair(VCU_OP_CU_GRAPH_INSTANTIATE, g, 0, 0, &s->gexec)) != 0)
        return fail("instantiate", res);
    if ((res = pair(VCU_OP_CU_STREAM_BEGIN_CAPTURE, s->stream, 2 /* relaxed */, 0, NULL)) != 0)
        return fail("begin capture", res);
    {
        struct vcu_cu_launch_req l;

        memset(&l, 0, sizeof(l));
        l.function = s->fn;
        l.stream = s->stream;
        l.grid[0] = N / 256;
        l.grid[1] = l.grid[2] = 1;
        l.block[0] = 256;
        l.block[1] = l.block[2] = 1;
        l.param_bytes = 16;
        memcpy(lp, &l, sizeof(l));
        bump_params(lp + sizeof(l), s->cbuf);
        call(VCU_OP_CU_LAUNCH, 0, lp, sizeof(lp), NULL, 0, 0, &la, sizeof(la));
        if (la.result)
            return fail("captured launch", la.result);
    }
    cg = u64(VCU_OP_CU_STREAM_END_CAPTURE, s->stream, &res);
    if (res)
        return fail("end capture", res);
    if ((res = pair(VCU_OP_CU_GRAPH_INSTANTIATE, cg, 0, 0, &s->cexec)) != 0)
        return fail("instantiate the captured graph", res);
    return 0;
}

/* A round: 16 launches as one CU_BATCH (the backend sends runs of 8 and
 * more as graphs), a launch of each graph, a synchronize, and the
 * buffers and the global checked: after round r every word of the
 * buffer is r * 16 * ADD, every word of the graphs' buffers r * ADD, the
 * counter r * 18 * ADD. */
static int round_(st_t *s, uint32_t r, uint64_t gaddr, unsigned int *h)
{
    unsigned char b[sizeof(struct vcu_cu_batch_req) + 16 * 128];
    struct vcu_cu_batch_req bq;
    struct vcu_cu_batch_entry be_;
    struct vcu_cu_resp a = { 999, 0 };
    unsigned long long g = 0, want = (unsigned long long)r * 16 * ADD;
    unsigned long long gwant = (unsigned long long)r * ADD;
    size_t off = sizeof(bq), n;
    uint32_t res, i;

    memset(&bq, 0, sizeof(bq));
    bq.count = 16;
    for (i = 0; i < 16; i++) {
        n = launch_req(s, b + off + sizeof(be_));
        be_.opcode = VCU_OP_CU_LAUNCH;
        be_.len = (uint32_t)n;
        memcpy(b + off, &be_, sizeof(be_));
        off += sizeof(be_) + ((n + 7) & ~(size_t)7);
    }
    memcpy(b, &bq, sizeof(bq));
    if (call(VCU_OP_CU_BATCH, VCU_REQ_F_ASYNC, b, (uint32_t)off, NULL, 0, 0, &a, sizeof(a)) !=
        VCU_S_OK)
        return fail("batch", a.result);
    if ((res = pair(VCU_OP_CU_GRAPH_LAUNCH, s->gexec, s->stream, 0, NULL)) != 0 ||
        (res = pair(VCU_OP_CU_GRAPH_LAUNCH, s->cexec, s->stream, 0, NULL)) != 0)
        return fail("graph launch", res);
    u64(VCU_OP_CU_STREAM_SYNCHRONIZE, s->stream, &res);
    if (res != 0)
        return fail("synchronize", res);
    if ((res = copy(0, gaddr, &g, 8)) != 0)
        return fail("read back", res);
    if (check_words("buffer", r, s->buf, h, want) != 0 ||
        check_words("built graph's buffer", r, s->gbuf, h, gwant) != 0 ||
        check_words("built graph's copy", r, s->gcopy, h, gwant) != 0 ||
        check_words("captured graph's buffer", r, s->cbuf, h, gwant) != 0)
        return 1;
    if (g != want + 2 * gwant)
        return printf("FAIL round %u: counter %llu, want %llu\n", r, g, want + 2 * gwant), 1;
    return 0;
}

static int open_backend(void)
{
    vcu_backend_config_t cfg;
    struct vcu_session_open_req q;
    struct vcu_session_open_resp a;

    static char dir[] = "/tmp/vcu-mig-core-XXXXXX";

    /* A module cache of the process's own: the two ends share nothing
     * but the state. */
    if (mkdtemp(dir) == NULL)
        return printf("FAIL mkdtemp\n"), 1;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0";
    cfg.module_cache = dir;
    if (vcu_backend_new(&cfg, &be) != 0 || vcu_backend_cuda_error(be) != NULL)
        return printf("FAIL no CUDA: %s\n", be ? vcu_backend_cuda_error(be) : "?"), 1;
    memset(&q, 0, sizeof(q));
    q.version_min = q.version_max = VCU_PROTO_VERSION;
    q.features = VCU_FEAT_CUDA | VCU_FEAT_ASYNC | VCU_FEAT_BATCH;
    sess = 0;
    if (call(VCU_OP_SESSION_OPEN, 0, &q, sizeof(q), NULL, 0, 0, &a, sizeof(a)) != VCU_S_OK)
        return printf("FAIL session open\n"), 1;
    sess = a.session;
    return 0;
}

static uint32_t state(uint32_t op, int fd, char *why, size_t len)
{
    unsigned char rq[sizeof(struct vcu_req_hdr)], rp[sizeof(struct vcu_resp_hdr) + 512];
    struct vcu_req_hdr *h = (void *)rq;
    struct vcu_resp_hdr *rh = (void *)rp;
    volatile int done = 0;
    vcu_request_t r;

    memset(rq, 0, sizeof(rq));
    memset(rp, 0, sizeof(rp));
    h->opcode = op;
    h->session = sess;
    memset(&r, 0, sizeof(r));
    r.req = rq;
    r.req_len = sizeof(rq);
    r.resp = rp;
    r.resp_cap = sizeof(rp);
    r.opaque = (void *)&done;
    r.done = NULL;
    vcu_backend_submit_state(be, &r, fd);
    while (r.resp_len == 0)
        usleep(1000);
    snprintf(why, len, "%s", rh->payload_len ? (char *)(rh + 1) : "");
    return rh->status;
}

static int build(const char *dir, st_t *s)
{
    char path[4096];
    unsigned char fr[sizeof(struct vcu_cu_function_resp) + 512];
    struct vcu_cu_module_load_req lq;
    struct vcu_cu_stream_create_req sq = { { 0, 0 }, 1, 0 };
    struct vcu_cu_u64_resp a;
    struct vcu_cu_function_resp f;
    unsigned char nq[sizeof(struct vcu_cu_name_req) + 8];
    struct vcu_cu_name_req nr;
    uint32_t res;
    void *img;
    long n;
    FILE *fp;

    snprintf(path, sizeof(path), "%s/probe-migrate.fatbin", dir);
    fp = fopen(path, "rb");
    if (!fp)
        return printf("FAIL no %s\n", path), 1;
    fseek(fp, 0, SEEK_END);
    n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    img = malloc((size_t)n);
    if (fread(img, 1, (size_t)n, fp) != (size_t)n)
        return 1;
    fclose(fp);
    s->big = alloc(64 << 20, &res);
    if (res)
        return fail("alloc 64 MiB", res);
    s->buf = alloc(N * 4, &res);
    if (res)
        return fail("alloc buffer", res);
    memset(&lq, 0, sizeof(lq));
    lq.image_len = (uint64_t)n;
    memset(&a, 0, sizeof(a));
    call(VCU_OP_CU_MODULE_LOAD, 0, &lq, sizeof(lq), img, (size_t)n, VCU_SEG_TO_DEVICE, &a,
         sizeof(a));
    if (a.r.result)
        return fail("module load", a.r.result);
    s->mod = a.value;
    memset(&nr, 0, sizeof(nr));
    nr.module = s->mod;
    nr.name_len = 4;
    memcpy(nq, &nr, sizeof(nr));
    memcpy(nq + sizeof(nr), "bump", 4);
    memset(fr, 0, sizeof(fr));
    call(VCU_OP_CU_MODULE_GET_FUNCTION, 0, nq, sizeof(nr) + 4, NULL, 0, 0, fr, sizeof(fr));
    memcpy(&f, fr, sizeof(f));
    if (f.r.result)
        return fail("get function", f.r.result);
    s->fn = f.function;
    u64(VCU_OP_CU_MEM_FREE, s->big, &res);
    if (res)
        return fail("free", res);
    s->small = alloc(256, &res);
    if (res)
        return fail("alloc 256", res);
    memset(&a, 0, sizeof(a));
    call(VCU_OP_CU_STREAM_CREATE, 0, &sq, sizeof(sq), NULL, 0, 0, &a, sizeof(a));
    if (a.r.result)
        return fail("stream", a.r.result);
    s->stream = a.value;
    free(img);
    if (build_graphs(s) != 0)
        return 1;
    /* MIG_EXTRA_MIB: that much more device memory, every byte 0xab,
     * for the state's size and its time. */
    if (getenv("MIG_EXTRA_MIB") != NULL && atoll(getenv("MIG_EXTRA_MIB")) > 0) {
        struct vcu_cu_memset_req mq;
        struct vcu_cu_resp ma = { 999, 0 };

        s->extra_bytes = (uint64_t)atoll(getenv("MIG_EXTRA_MIB")) << 20;
        s->extra = alloc(s->extra_bytes, &res);
        if (res)
            return fail("alloc extra", res);
        memset(&mq, 0, sizeof(mq));
        mq.dst = s->extra;
        mq.pitch = s->extra_bytes;
        mq.width = s->extra_bytes;
        mq.height = 1;
        mq.value = 0xab;
        mq.elem_size = 1;
        call(VCU_OP_CU_MEMSET, 0, &mq, sizeof(mq), NULL, 0, 0, &ma, sizeof(ma));
        if (ma.result)
            return fail("memset extra", ma.result);
    }
    return 0;
}

/* The extra memory's first and last MiB still read 0xab. */
static int check_extra(const st_t *s)
{
    static unsigned char b[1 << 20];
    uint64_t at[2];
    uint32_t res;
    int k, i;

    if (s->extra_bytes < sizeof(b))
        return 0;
    at[0] = s->extra;
    at[1] = s->extra + s->extra_bytes - sizeof(b);
    for (k = 0; k < 2; k++) {
        if ((res = copy(0, at[k], b, sizeof(b))) != 0)
            return fail("read extra", res);
        for (i = 0; i < (int)sizeof(b); i++)
            if (b[i] != 0xab)
                return printf("FAIL extra memory byte %d of chunk %d is 0x%02x\n", i, k, b[i]), 1;
    }
    return 0;
}

static uint64_t global_addr(const st_t *s)
{
    unsigned char nq[sizeof(struct vcu_cu_name_req) + 16];
    struct vcu_cu_name_req nr;
    struct vcu_cu_mem_range_resp a;

    memset(&nr, 0, sizeof(nr));
    nr.module = s->mod;
    nr.name_len = 9;
    memcpy(nq, &nr, sizeof(nr));
    memcpy(nq + sizeof(nr), "g_counter", 9);
    memset(&a, 0, sizeof(a));
    call(VCU_OP_CU_MODULE_GET_GLOBAL, 0, nq, sizeof(nr) + 9, NULL, 0, 0, &a, sizeof(a));
    return a.r.result ? 0 : a.base;
}

int main(int ac, char **av)
{
    unsigned int *h = calloc(N, 4);
    uint32_t r, rounds = ac > 4 ? (uint32_t)atoi(av[4]) : 5, res;
    char why[512];
    uint64_t g;
    st_t s;
    int fd, save;
    double t0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ac < 4 || (strcmp(av[1], "save") != 0 && strcmp(av[1], "load") != 0))
        return fprintf(stderr, "usage: mig-core save|load DIR STATE [ROUNDS]\n"), 2;
    save = strcmp(av[1], "save") == 0;
    if (open_backend() != 0)
        return 1;
    memset(&s, 0, sizeof(s));
    if (save) {
        if (build(av[2], &s) != 0)
            return 1;
        memset(h, 0, N * 4);
        if ((res = copy(1, s.buf, h, N * 4)) != 0 || (res = copy(1, s.gbuf, h, N * 4)) != 0 ||
            (res = copy(1, s.gcopy, h, N * 4)) != 0 || (res = copy(1, s.cbuf, h, N * 4)) != 0)
            return fail("zero", res);
        g = global_addr(&s);
        if (g == 0)
            return fail("global", 0);
        for (r = 1; r <= rounds; r++)
            if (round_(&s, r, g, h) != 0)
                return 1;
        s.rounds = rounds;
        fd = open(av[3], O_CREAT | O_TRUNC | O_RDWR, 0600);
        t0 = now();
        if (fd < 0 || state(VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)) != VCU_S_OK)
            return printf("FAIL save: %s\n", why), 1;
        /* What the loading process needs to go on: the handles and
         * addresses, as a guest would keep them. */
        if (write(fd, &s, sizeof(s)) != sizeof(s))
            return 1;
        printf("saved %u rounds in %.3f s: buffer 0x%llx, counter 0x%llx, function 0x%llx, "
               "stream 0x%llx, state %lld bytes\n",
               rounds, now() - t0, (unsigned long long)s.buf, (unsigned long long)g,
               (unsigned long long)s.fn, (unsigned long long)s.stream,
               (long long)lseek(fd, 0, SEEK_CUR));
        close(fd);
        printf("PASS save\n");
        return 0;
    }
    fd = open(av[3], O_RDONLY);
    if (fd < 0)
        return printf("FAIL no state\n"), 1;
    if (pread(fd, &s, sizeof(s), lseek(fd, -(off_t)sizeof(s), SEEK_END)) != sizeof(s))
        return 1;
    lseek(fd, 0, SEEK_SET);
    t0 = now();
    if (state(VCU_BACKEND_OP_LOAD, fd, why, sizeof(why)) != VCU_S_OK)
        return printf("FAIL load: %s\n", why), 1;
    printf("loaded in %.3f s (%llu MiB more device memory)\n", now() - t0,
           (unsigned long long)(s.extra_bytes >> 20));
    if (check_extra(&s) != 0)
        return 1;
    g = global_addr(&s);
    if (g == 0)
        return fail("global after load", 0);
    for (r = s.rounds + 1; r <= s.rounds + rounds; r++)
        if (round_(&s, r, g, h) != 0)
            return 1;
    printf("PASS load: %u more rounds (launches and both graphs) right at the same addresses "
           "and handles\n", rounds);
    return 0;
}
