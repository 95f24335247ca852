/*
 * echo suite: data movement through /dev/vcuda0 with the ECHO opcode.
 *
 * ECHO (include/vcu_proto.h) hashes the TO_DEVICE stream (FNV-1a 64),
 * copies it into the FROM_DEVICE stream up to the shorter of the two, or
 * with VCU_ECHO_F_FILL fills the FROM_DEVICE stream with
 * vcu_echo_byte(seed, offset); the payload tail comes back after the
 * fixed reply.  Every transfer below is checked byte for byte.
 *
 * Usage: echo_test [max_mib]   (default 256: largest transfer in MiB)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vcu_transport.h"
#include "vmtest.h"

#define MIB (1024ull * 1024)
#define SLOW_MS 200u

typedef struct {
    char why[256];
} reason_t;

#define WHY(r, ...) (snprintf((r)->why, sizeof((r)->why), __VA_ARGS__), -1)

static vcu_conn_t *conn;

/* One ECHO call; checks the fixed reply's length.  0 or -1 with r set. */
static int echo(vcu_conn_t *c, uint64_t seed, uint32_t flags, uint32_t delay_ms,
                const vcu_buf_t *bufs, unsigned int n, struct vcu_echo_resp *out, reason_t *r)
{
    struct vcu_echo_req req = { .seed = seed, .flags = flags, .delay_ms = delay_ms };
    uint32_t rlen = 0;
    int err;

    memset(out, 0, sizeof(*out));
    err = vcu_conn_call(c, VCU_OP_ECHO, 0, &req, sizeof(req), bufs, n, out, sizeof(*out), &rlen);
    if (err)
        return WHY(r, "ECHO -> %d (%s)", err, vcu_status_str(err));
    if (rlen != sizeof(*out))
        return WHY(r, "reply payload %u bytes, want %zu", rlen, sizeof(*out));
    return 0;
}

/* TO_DEVICE: len bytes at buf (caller's alignment) hashed by the host. */
static int check_to(vcu_conn_t *c, unsigned char *buf, size_t len, uint64_t seed, reason_t *r)
{
    vcu_buf_t b = { buf, len, VCU_SEG_TO_DEVICE };
    struct vcu_echo_resp resp;
    uint64_t want;

    vt_pattern(buf, len, seed);
    want = vt_fnv(VCU_FNV64_INIT, buf, len);
    if (echo(c, seed, 0, 0, &b, 1, &resp, r))
        return -1;
    if (resp.in_bytes != len)
        return WHY(r, "in_bytes %llu, want %zu", (unsigned long long)resp.in_bytes, len);
    if (resp.out_bytes != 0)
        return WHY(r, "out_bytes %llu, want 0", (unsigned long long)resp.out_bytes);
    if (resp.in_hash != want)
        return WHY(r, "in_hash %016llx, want %016llx", (unsigned long long)resp.in_hash,
                   (unsigned long long)want);
    return 0;
}

/* FROM_DEVICE with FILL into buf[0..len); the byte after it must stay. */
static int check_from(vcu_conn_t *c, unsigned char *buf, size_t len, uint64_t seed, reason_t *r)
{
    vcu_buf_t b = { buf, len, VCU_SEG_FROM_DEVICE };
    struct vcu_echo_resp resp;
    long long bad;

    memset(buf, 0x5a, len + 1);
    if (echo(c, seed, VCU_ECHO_F_FILL, 0, &b, 1, &resp, r))
        return -1;
    if (resp.out_bytes != len)
        return WHY(r, "out_bytes %llu, want %zu", (unsigned long long)resp.out_bytes, len);
    if (resp.in_bytes != 0 || resp.in_hash != VCU_FNV64_INIT)
        return WHY(r, "in_bytes %llu hash %016llx for no input",
                   (unsigned long long)resp.in_bytes, (unsigned long long)resp.in_hash);
    bad = vt_check_fill(buf, len, seed, 0);
    if (bad >= 0)
        return WHY(r, "byte %lld is %02x, want %02x", bad, buf[bad],
                   vcu_echo_byte(seed, (uint64_t)bad));
    if (buf[len] != 0x5a)
        return WHY(r, "byte past the segment overwritten");
    return 0;
}

/* One TO_DEVICE and one FROM_DEVICE segment of len bytes: a copy. */
static int check_copy(vcu_conn_t *c, unsigned char *src, unsigned char *dst, size_t len,
                      uint64_t seed, reason_t *r)
{
    vcu_buf_t b[2] = { { src, len, VCU_SEG_TO_DEVICE }, { dst, len, VCU_SEG_FROM_DEVICE } };
    struct vcu_echo_resp resp;
    uint64_t want;

    vt_pattern(src, len, seed);
    memset(dst, 0x3c, len + 1);
    want = vt_fnv(VCU_FNV64_INIT, src, len);
    if (echo(c, seed, 0, 0, b, 2, &resp, r))
        return -1;
    if (resp.in_bytes != len || resp.out_bytes != len)
        return WHY(r, "in/out bytes %llu/%llu, want %zu", (unsigned long long)resp.in_bytes,
                   (unsigned long long)resp.out_bytes, len);
    if (resp.in_hash != want)
        return WHY(r, "in_hash mismatch");
    if (memcmp(src, dst, len) != 0)
        return WHY(r, "copy differs from the source");
    if (dst[len] != 0x3c)
        return WHY(r, "byte past the segment overwritten");
    return 0;
}

static void report(const char *name, int rc, const reason_t *r)
{
    if (rc == 0)
        vt_pass(name);
    else
        vt_fail(name, "%s", r->why);
}

/* The three directions at one size and one start offset into the buffer. */
static void test_size(size_t len, size_t off, const char *tag)
{
    unsigned char *a, *b;
    char name[64];
    reason_t r;
    uint64_t t0;

    a = vt_alloc(len + off + 1);
    b = vt_alloc(len + off + 1);
    if (!a || !b) {
        snprintf(name, sizeof(name), "alloc_%s", tag);
        vt_fail(name, "cannot allocate 2 x %zu bytes", len + off + 1);
        vt_free(a, len + off + 1);
        vt_free(b, len + off + 1);
        return;
    }
    t0 = vt_now_us();
    snprintf(name, sizeof(name), "to_device_%s", tag);
    report(name, check_to(conn, a + off, len, len ^ 0x1111, &r), &r);
    snprintf(name, sizeof(name), "from_device_%s", tag);
    report(name, check_from(conn, a + off, len, len ^ 0x2222, &r), &r);
    snprintf(name, sizeof(name), "copy_%s", tag);
    report(name, check_copy(conn, a + off, b + off, len, len ^ 0x3333, &r), &r);
    if (len >= MIB)
        vt_info("%s: 3 transfers + checks in %llu ms", tag,
                (unsigned long long)(vt_now_us() - t0) / 1000);
    vt_free(a, len + off + 1);
    vt_free(b, len + off + 1);
}

/* The payload after the fixed request comes back after the fixed reply. */
static void test_tail(uint32_t tail)
{
    uint32_t req_len = sizeof(struct vcu_echo_req) + tail;
    uint32_t cap = sizeof(struct vcu_echo_resp) + tail, rlen = 0;
    unsigned char *req = malloc(req_len), *resp = malloc(cap);
    struct vcu_echo_req er = { .seed = 7 };
    char name[64];
    int err;

    snprintf(name, sizeof(name), "payload_tail_%u", tail);
    if (!req || !resp) {
        vt_fail(name, "malloc");
        goto out;
    }
    memcpy(req, &er, sizeof(er));
    vt_pattern(req + sizeof(er), tail, tail);
    memset(resp, 0xee, cap);
    err = vcu_conn_call(conn, VCU_OP_ECHO, 0, req, req_len, NULL, 0, resp, cap, &rlen);
    if (err)
        vt_fail(name, "ECHO -> %d (%s)", err, vcu_status_str(err));
    else if (rlen != cap)
        vt_fail(name, "reply payload %u bytes, want %u", rlen, cap);
    else if (memcmp(resp + sizeof(struct vcu_echo_resp), req + sizeof(er), tail) != 0)
        vt_fail(name, "tail differs");
    else
        vt_pass(name);
out:
    free(req);
    free(resp);
}

/* A tail whose echo cannot fit the largest reply: VCU_ERANGE, not a
 * truncated reply. */
static void test_reply_too_small(void)
{
    uint32_t tail = VCU_MAX_PAYLOAD - sizeof(struct vcu_echo_req), rlen = 12345;
    uint32_t req_len = sizeof(struct vcu_echo_req) + tail;
    unsigned char *req = calloc(1, req_len), *resp = malloc(VCU_MAX_PAYLOAD);
    int err;

    if (!req || !resp) {
        vt_fail("reply_too_small", "malloc");
    } else {
        err = vcu_conn_call(conn, VCU_OP_ECHO, 0, req, req_len, NULL, 0, resp, VCU_MAX_PAYLOAD,
                            &rlen);
        if (err != VCU_ERANGE)
            vt_fail("reply_too_small", "ECHO -> %d (%s), want VCU_ERANGE", err,
                    vcu_status_str(err));
        else
            vt_pass("reply_too_small");
    }
    free(req);
    free(resp);
}

/*
 * 16 segments (the maximum): 8 TO_DEVICE and 8 FROM_DEVICE of mixed sizes
 * (bounced and pinned) at odd offsets, interleaved.  Copy mode: the FROM
 * stream is the TO stream up to the shorter; the rest stays untouched.
 * Fill mode: the whole FROM stream, offsets continuing across segments.
 */
static void test_multiseg(int fill)
{
    static const size_t to_len[8] = { 1, 4097, 65536, 70000, 0, 300000, 13, 2 * MIB + 5 };
    static const size_t from_len[8] = { 4095, 3, 100000, 0, 65537, 1 * MIB, 77, 3 * MIB };
    const char *name = fill ? "multiseg_fill" : "multiseg_copy";
    unsigned char *to[8], *from[8], *in = NULL, *out = NULL;
    size_t in_total = 0, out_total = 0, pos, expect;
    vcu_buf_t b[16];
    struct vcu_echo_resp resp;
    uint64_t seed = 0xabcdef + fill;
    reason_t r;
    int i, ok = 1;

    for (i = 0; i < 8; i++) {
        to[i] = vt_alloc(to_len[i] + 8);
        from[i] = vt_alloc(from_len[i] + 8);
        if (!to[i] || !from[i]) {
            vt_fail(name, "alloc");
            return;
        }
        vt_pattern(to[i] + i, to_len[i], seed + i);
        memset(from[i], 0x77, from_len[i] + 8);
        b[2 * i] = (vcu_buf_t){ to[i] + i, to_len[i], VCU_SEG_TO_DEVICE };
        b[2 * i + 1] = (vcu_buf_t){ from[i] + i, from_len[i], VCU_SEG_FROM_DEVICE };
        in_total += to_len[i];
        out_total += from_len[i];
    }
    in = malloc(in_total);
    if (!in) {
        vt_fail(name, "malloc");
        return;
    }
    for (pos = 0, i = 0; i < 8; i++) {
        memcpy(in + pos, to[i] + i, to_len[i]);
        pos += to_len[i];
    }
    if (echo(conn, seed, fill ? VCU_ECHO_F_FILL : 0, 0, b, 16, &resp, &r)) {
        vt_fail(name, "%s", r.why);
        goto out;
    }
    expect = fill ? out_total : (in_total < out_total ? in_total : out_total);
    if (resp.in_bytes != in_total || resp.out_bytes != expect ||
        resp.in_hash != vt_fnv(VCU_FNV64_INIT, in, in_total)) {
        vt_fail(name, "in %llu/%zu out %llu/%zu or hash wrong",
                (unsigned long long)resp.in_bytes, in_total,
                (unsigned long long)resp.out_bytes, expect);
        goto out;
    }
    for (pos = 0, i = 0; i < 8 && ok; i++) {
        unsigned char *p = from[i] + i;
        size_t n = from_len[i], done = pos >= expect ? 0 : (expect - pos < n ? expect - pos : n);
        long long bad;

        if (fill)
            bad = vt_check_fill(p, done, seed, pos);
        else
            bad = memcmp(p, in + pos, done) ? 0 : -1;
        if (bad >= 0) {
            vt_fail(name, "FROM segment %d (stream offset %zu) wrong near %lld", i, pos, bad);
            ok = 0;
        } else if (vt_check_byte(p + done, n - done + (8 - i), 0x77) >= 0 ||
                   vt_check_byte(from[i], i, 0x77) >= 0) {
            vt_fail(name, "FROM segment %d: bytes outside the written stream changed", i);
            ok = 0;
        }
        pos += n;
    }
    if (ok)
        vt_pass(name);
out:
    free(in);
    free(out);
    for (i = 0; i < 8; i++) {
        vt_free(to[i], to_len[i] + 8);
        vt_free(from[i], from_len[i] + 8);
    }
}

/* A mixed run at a few sizes: used by the threads and the processes. */
static int worker_run(vcu_conn_t *c, unsigned int id, unsigned int rounds, reason_t *r)
{
    const size_t sizes[4] = { 1000 + 17 * id, 65536 + id, MIB + 7 * id, 4 * MIB - id };
    size_t max = 4 * MIB + 1;
    unsigned char *a = vt_alloc(max + 8), *b = vt_alloc(max + 8);
    int rc = 0;

    if (!a || !b) {
        rc = WHY(r, "alloc");
        goto out;
    }
    for (unsigned int k = 0; k < rounds && rc == 0; k++) {
        for (unsigned int s = 0; s < 4 && rc == 0; s++) {
            uint64_t seed = ((uint64_t)id << 32) | (k << 8) | s;
            size_t off = (id + s) % 8;

            if (check_to(c, a + off, sizes[s], seed, r) ||
                check_from(c, a + off, sizes[s], seed + 1, r) ||
                check_copy(c, a + off, b + off, sizes[s], seed + 2, r)) {
                char tmp[200];

                snprintf(tmp, sizeof(tmp), "%s", r->why);
                rc = WHY(r, "worker %u size %zu round %u: %s", id, sizes[s], k, tmp);
            }
        }
    }
out:
    vt_free(a, max + 8);
    vt_free(b, max + 8);
    return rc;
}

struct thr {
    pthread_t t;
    vcu_conn_t *c;
    unsigned int id;
    int rc;
    reason_t r;
    uint32_t delay_ms;
    uint64_t t_end;
    size_t seg_len;
};

static void *thr_worker(void *arg)
{
    struct thr *t = arg;

    t->rc = worker_run(t->c, t->id, 3, &t->r);
    return NULL;
}

static void test_threads(void)
{
    struct thr t[4];
    int i, bad = -1;

    for (i = 0; i < 4; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        t[i].c = conn;
        t[i].id = i + 1;
        if (pthread_create(&t[i].t, NULL, thr_worker, &t[i]) != 0) {
            vt_fail("threads4", "pthread_create");
            return;
        }
    }
    for (i = 0; i < 4; i++) {
        pthread_join(t[i].t, NULL);
        if (t[i].rc && bad < 0)
            bad = i;
    }
    if (bad >= 0)
        vt_fail("threads4", "%s", t[bad].r.why);
    else
        vt_pass("threads4");
}

static void test_procs(void)
{
    pid_t pid[2];
    int i, st, ok = 1;

    fflush(stdout);
    for (i = 0; i < 2; i++) {
        pid[i] = fork();
        if (pid[i] < 0) {
            vt_fail("procs2", "fork: %s", strerror(errno));
            return;
        }
        if (pid[i] == 0) {
            vcu_conn_t *c;
            reason_t r;
            int err = vcu_conn_open(NULL, VCU_FEAT_ECHO, &c);

            if (err) {
                vt_info("procs2 child %d: open -> %d", i, err);
                _exit(2);
            }
            if (worker_run(c, 10 + i, 3, &r)) {
                vt_info("procs2 child %d: %s", i, r.why);
                _exit(1);
            }
            vcu_conn_close(c);
            _exit(0);
        }
    }
    for (i = 0; i < 2; i++) {
        if (waitpid(pid[i], &st, 0) != pid[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            ok = 0;
            vt_info("procs2 child %d: status 0x%x", i, st);
        }
    }
    if (ok)
        vt_pass("procs2");
    else
        vt_fail("procs2", "a child failed (see info lines)");
}

static void *thr_echo(void *arg)
{
    struct thr *t = arg;
    unsigned char *buf = vt_alloc(t->seg_len + 1);
    vcu_buf_t b = { buf, t->seg_len, VCU_SEG_TO_DEVICE };
    struct vcu_echo_resp resp;
    unsigned int n = t->delay_ms ? 1 : 5;

    if (!buf) {
        t->rc = WHY(&t->r, "alloc");
        return NULL;
    }
    vt_pattern(buf, t->seg_len, t->id);
    for (unsigned int k = 0; k < n && t->rc == 0; k++) {
        t->rc = echo(t->c, t->id, 0, t->delay_ms, &b, 1, &resp, &t->r);
        if (t->rc == 0 && (resp.in_bytes != t->seg_len ||
                           resp.in_hash != vt_fnv(VCU_FNV64_INIT, buf, t->seg_len)))
            t->rc = WHY(&t->r, "thread %u: wrong reply", t->id);
    }
    t->t_end = vt_now_us();
    vt_free(buf, t->seg_len + 1);
    return NULL;
}

/*
 * One slow request (ECHO delay_ms=SLOW_MS, a pinned 1 MiB segment) and,
 * once it is in flight, three threads doing quick echoes: on the same
 * connection (two_conns = 0) or on a second one.  The quick ones must all
 * be done before the slow one, and while it waits the driver must show it
 * in inflight and its pages in pinned_pages.
 */
static void test_inflight(int two_conns)
{
    const char *name = two_conns ? "inflight_two_conns" : "inflight_one_conn";
    vcu_conn_t *c2 = conn;
    struct thr slow, quick[3];
    uint64_t t0, infl = 0, infl2 = 0, pinned = 0, qmax = 0;
    int i, err;

    if (two_conns && (err = vcu_conn_open(NULL, VCU_FEAT_ECHO, &c2)) != 0) {
        vt_fail(name, "second open -> %d", err);
        return;
    }
    memset(&slow, 0, sizeof(slow));
    slow.c = conn;
    slow.id = 100;
    slow.delay_ms = SLOW_MS;
    slow.seg_len = MIB;
    t0 = vt_now_us();
    pthread_create(&slow.t, NULL, thr_echo, &slow);
    vt_sleep_ms(40);
    vt_sysfs_u64("inflight", &infl);
    vt_sysfs_u64("pinned_pages", &pinned);
    for (i = 0; i < 3; i++) {
        memset(&quick[i], 0, sizeof(quick[i]));
        quick[i].c = c2;
        quick[i].id = 200 + i;
        quick[i].seg_len = 4096 + i;
        pthread_create(&quick[i].t, NULL, thr_echo, &quick[i]);
    }
    /* If the quick ones are stuck, this tells whether they are stuck in
     * the guest (not queued) or on the host (queued behind the slow one). */
    vt_sleep_ms(60);
    vt_sysfs_u64("inflight", &infl2);
    for (i = 0; i < 3; i++) {
        pthread_join(quick[i].t, NULL);
        if (quick[i].t_end - t0 > qmax)
            qmax = quick[i].t_end - t0;
    }
    pthread_join(slow.t, NULL);
    vt_info("%s: slow %llu ms, quick done by %llu ms, inflight %llu then %llu, pinned %llu",
            name, (unsigned long long)(slow.t_end - t0) / 1000, (unsigned long long)qmax / 1000,
            (unsigned long long)infl, (unsigned long long)infl2, (unsigned long long)pinned);
    if (slow.rc)
        vt_fail(name, "slow: %s", slow.r.why);
    else if (quick[0].rc || quick[1].rc || quick[2].rc)
        vt_fail(name, "quick: %s", quick[0].rc ? quick[0].r.why
                                   : quick[1].rc ? quick[1].r.why : quick[2].r.why);
    else if (slow.t_end - t0 < SLOW_MS * 1000ull)
        vt_fail(name, "slow echo returned after %llu ms, before its %u ms delay",
                (unsigned long long)(slow.t_end - t0) / 1000, SLOW_MS);
    else if (qmax + 20000 > slow.t_end - t0)
        vt_fail(name, "quick requests waited for the slow one (done at %llu ms, slow at %llu ms; "
                "%llu requests in flight in the driver 100 ms in)",
                (unsigned long long)qmax / 1000, (unsigned long long)(slow.t_end - t0) / 1000,
                (unsigned long long)infl2);
    else if (infl < 1 || pinned < MIB / 4096)
        vt_fail(name, "during the slow request inflight=%llu pinned_pages=%llu, want >=1, >=%llu",
                (unsigned long long)infl, (unsigned long long)pinned,
                (unsigned long long)(MIB / 4096));
    else
        vt_pass(name);
    if (two_conns)
        vcu_conn_close(c2);
}

static void test_sysfs_zero(void)
{
    uint64_t v;
    int err;

    if ((err = vt_wait_zero("inflight", 3000, &v)) != 0)
        vt_fail("sysfs_zero", "inflight = %llu (%d)", (unsigned long long)v, err);
    else if ((err = vt_wait_zero("pinned_pages", 3000, &v)) != 0)
        vt_fail("sysfs_zero", "pinned_pages = %llu (%d)", (unsigned long long)v, err);
    else
        vt_pass("sysfs_zero");
}

int main(int argc, char **argv)
{
    static const size_t small[] = { 0, 1, 4095, 4096, 4097, 65535, 65536, 65537 };
    static const size_t offs[] = { 1, 7, 4095 };
    unsigned long max_mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
    uint64_t t0 = vt_now_us();
    char tag[64];
    size_t i;
    int err;

    vt_suite = "echo";
    setvbuf(stdout, NULL, _IONBF, 0);
    err = vcu_conn_open(NULL, VCU_FEAT_ECHO, &conn);
    if (err) {
        vt_fail("open", "vcu_conn_open -> %d (%s)", err, vcu_status_str(err));
        return 1;
    }
    if (!(vcu_conn_features(conn) & VCU_FEAT_ECHO)) {
        vt_fail("open", "ECHO feature not agreed (features %llx)",
                (unsigned long long)vcu_conn_features(conn));
        return 1;
    }
    vt_pass("open");

    for (i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
        snprintf(tag, sizeof(tag), "%zu", small[i]);
        test_size(small[i], 0, tag);
    }
    for (size_t mib = 1; mib <= max_mib; mib *= (mib == 1 ? 64 : 4)) {
        snprintf(tag, sizeof(tag), "%zuMiB", mib);
        test_size(mib * MIB, 0, tag);
    }
    for (i = 0; i < 3; i++) {
        snprintf(tag, sizeof(tag), "off%zu_5000", offs[i]);
        test_size(5000, offs[i], tag);
        snprintf(tag, sizeof(tag), "off%zu_1MiB+3", offs[i]);
        test_size(MIB + 3, offs[i], tag);
    }
    test_tail(1);
    test_tail(1000);
    test_tail(VCU_MAX_PAYLOAD - sizeof(struct vcu_echo_resp));
    test_reply_too_small();
    test_multiseg(0);
    test_multiseg(1);
    test_threads();
    test_procs();
    test_inflight(0);
    test_inflight(1);
    test_sysfs_zero();
    vcu_conn_close(conn);
    vt_info("echo: %u passed, %u failed in %llu ms", vt_npass(), vt_nfail(),
            (unsigned long long)(vt_now_us() - t0) / 1000);
    return vt_nfail() ? 1 : 0;
}
