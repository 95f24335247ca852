/*
 * hostmem suite: driver-owned host memory, mmap of /dev/vcuda0 (the guest
 * side of cudaMallocHost; guest-driver/uapi/vcuda_ioctl.h).
 *
 * Segments inside a mapping travel as its physical chunks, unpinned and
 * marked VCU_SEG_F_STABLE; the chunks are freed only after a
 * SESSION_FENCE once the mapping is gone.  Checked with ECHO byte for
 * byte, and with the sysfs counters hostmem_pages, pinned_pages and
 * inflight for leaks.  Raw ioctls: the mapping and the calls must share
 * one file.
 *
 * Usage: hostmem_test [max_mib]   (default 256: largest mapping in MiB)
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vcuda_ioctl.h"
#include "vmtest.h"

#define KIB ((size_t)1024)
#define MIB ((size_t)1024 * 1024)
#define PAGE ((size_t)4096)
#define WAIT_MS 15000u

typedef struct {
    char why[256];
} reason_t;

#define WHY(r, ...) (snprintf((r)->why, sizeof((r)->why), __VA_ARGS__), -1)

static int fd = -1;

/* Opens /dev/vcuda0 and, if want_session, its session.  fd or -errno. */
static int dev_open(int want_session)
{
    struct vcuda_session_open so = {
        .version_min = VCU_PROTO_VERSION,
        .version_max = VCU_PROTO_VERSION,
        .features = VCU_FEAT_ECHO | VCU_FEAT_ASYNC,
    };
    int f = open(VT_DEV, O_RDWR | O_CLOEXEC);

    if (f < 0)
        return -errno;
    if (!want_session)
        return f;
    if (ioctl(f, VCUDA_IOC_SESSION_OPEN, &so) != 0) {
        int e = errno;

        close(f);
        return -e;
    }
    if (so.status != VCU_S_OK || so.features != (VCU_FEAT_ECHO | VCU_FEAT_ASYNC)) {
        close(f);
        return -EPROTO;
    }
    return f;
}

static void *hm_map(int f, size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);

    return p == MAP_FAILED ? NULL : p;
}

/*
 * One ECHO on file f.  Sync: 0 when the device answered OK with a full
 * reply (*out filled), else -1 with r set.  Async: 0 once queued.
 * *err gets -errno of a failing ioctl (0 otherwise).
 */
static int echo_f(int f, uint64_t seed, uint32_t eflags, uint32_t delay_ms, int async,
                  const struct vcuda_seg *segs, unsigned int n, struct vcu_echo_resp *out,
                  int *err, reason_t *r)
{
    struct vcu_echo_req req = { .seed = seed, .flags = eflags, .delay_ms = delay_ms };
    struct vcu_echo_resp resp;
    struct vcuda_submit sub = {
        .opcode = VCU_OP_ECHO,
        .flags = async ? VCUDA_SUBMIT_ASYNC : 0,
        .req_addr = (uintptr_t)&req,
        .req_len = sizeof(req),
        .nsegs = n,
        .segs_addr = (uintptr_t)segs,
        .resp_addr = (uintptr_t)&resp,
        .resp_cap = sizeof(resp),
    };

    if (err)
        *err = 0;
    memset(&resp, 0, sizeof(resp));
    if (ioctl(f, VCUDA_IOC_SUBMIT, &sub) != 0) {
        if (err)
            *err = -errno;
        return WHY(r, "SUBMIT: %s", strerror(errno));
    }
    if (sub.status != VCU_S_OK)
        return WHY(r, "ECHO status %u (%s)", sub.status, vcu_status_str((int)sub.status));
    if (async)
        return 0;
    if (sub.resp_len != sizeof(resp))
        return WHY(r, "reply payload %u bytes, want %zu", sub.resp_len, sizeof(resp));
    if (out)
        *out = resp;
    return 0;
}

static struct vcuda_seg seg(void *addr, uint64_t len, uint32_t flags)
{
    struct vcuda_seg s = { .addr = (uintptr_t)addr, .len = len, .flags = flags };

    return s;
}

/* FROM_DEVICE fill of buf[0..len); the bytes just outside must stay. */
static int check_fill(int f, unsigned char *buf, size_t len, uint64_t seed, reason_t *r)
{
    struct vcuda_seg s = seg(buf, len, VCUDA_SEG_FROM_DEVICE);
    struct vcu_echo_resp resp;
    long long bad;

    if (echo_f(f, seed, VCU_ECHO_F_FILL, 0, 0, &s, 1, &resp, NULL, r))
        return -1;
    if (resp.out_bytes != len)
        return WHY(r, "out_bytes %llu, want %zu", (unsigned long long)resp.out_bytes, len);
    bad = vt_check_fill(buf, len, seed, 0);
    if (bad >= 0)
        return WHY(r, "byte %lld is %02x, want %02x", bad, buf[bad],
                   vcu_echo_byte(seed, (uint64_t)bad));
    return 0;
}

/* TO_DEVICE: the host's hash of buf[0..len) must match. */
static int check_to(int f, unsigned char *buf, size_t len, uint64_t seed, reason_t *r)
{
    struct vcuda_seg s = seg(buf, len, VCUDA_SEG_TO_DEVICE);
    struct vcu_echo_resp resp;
    uint64_t want;

    vt_pattern(buf, len, seed);
    want = vt_fnv(VCU_FNV64_INIT, buf, len);
    if (echo_f(f, seed, 0, 0, 0, &s, 1, &resp, NULL, r))
        return -1;
    if (resp.in_bytes != len || resp.in_hash != want)
        return WHY(r, "in_bytes %llu hash %016llx, want %zu %016llx",
                   (unsigned long long)resp.in_bytes, (unsigned long long)resp.in_hash, len,
                   (unsigned long long)want);
    return 0;
}

/* Copy src -> dst through the host; byte-exact. */
static int check_copy(int f, unsigned char *src, unsigned char *dst, size_t len, uint64_t seed,
                      reason_t *r)
{
    struct vcuda_seg s[2] = { seg(src, len, VCUDA_SEG_TO_DEVICE),
                              seg(dst, len, VCUDA_SEG_FROM_DEVICE) };
    struct vcu_echo_resp resp;

    vt_pattern(src, len, seed);
    memset(dst, 0x3c, len);
    if (echo_f(f, seed, 0, 0, 0, s, 2, &resp, NULL, r))
        return -1;
    if (resp.in_bytes != len || resp.out_bytes != len)
        return WHY(r, "in/out bytes %llu/%llu, want %zu", (unsigned long long)resp.in_bytes,
                   (unsigned long long)resp.out_bytes, len);
    if (memcmp(src, dst, len) != 0)
        return WHY(r, "copy differs from the source");
    return 0;
}

static void report(const char *name, int rc, const reason_t *r)
{
    if (rc == 0)
        vt_pass(name);
    else
        vt_fail(name, "%s", r->why);
}

static uint64_t sysfs(const char *attr)
{
    uint64_t v = ~0ull;

    vt_sysfs_u64(attr, &v);
    return v;
}

/* All three counters back to 0 within WAIT_MS. */
static int check_idle(reason_t *r)
{
    static const char *const attrs[] = { "hostmem_pages", "inflight", "pinned_pages" };
    uint64_t last;
    unsigned int i;

    for (i = 0; i < 3; i++)
        if (vt_wait_zero(attrs[i], WAIT_MS, &last) != 0)
            return WHY(r, "%s stays at %llu", attrs[i], (unsigned long long)last);
    return 0;
}

static void test_before_open(void)
{
    int f = dev_open(0);
    void *p;

    if (f < 0) {
        vt_fail("mmap_before_open", "open: %s", strerror(-f));
        return;
    }
    p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (p != MAP_FAILED)
        vt_fail("mmap_before_open", "mmap succeeded");
    else if (errno != ENOTCONN)
        vt_fail("mmap_before_open", "errno %d (%s), want ENOTCONN", errno, strerror(errno));
    else
        vt_pass("mmap_before_open");
    close(f);
}

static void test_bad_args(void)
{
    void *p;

    p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, PAGE);
    if (p != MAP_FAILED || errno != EINVAL)
        vt_fail("mmap_offset", "%s, want EINVAL", p == MAP_FAILED ? strerror(errno) : "mapped");
    else
        vt_pass("mmap_offset");
    p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED || errno != EINVAL)
        vt_fail("mmap_private", "%s, want EINVAL", p == MAP_FAILED ? strerror(errno) : "mapped");
    else
        vt_pass("mmap_private");
    /* Over the per-file cap (hostmem_max_mib, 4 GiB by default). */
    p = mmap(NULL, 5ull << 30, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED || errno != ENOMEM)
        vt_fail("mmap_over_cap", "%s, want ENOMEM", p == MAP_FAILED ? strerror(errno) : "mapped");
    else
        vt_pass("mmap_over_cap");
    if (p != MAP_FAILED)
        munmap(p, 5ull << 30);
}

/* Zeroed, counted, fill / to / copy / unaligned, then freed on munmap. */
static void test_size(size_t len, const char *tag)
{
    size_t half = len / 2, ulen;
    unsigned char *p;
    char name[64];
    uint64_t t0 = vt_now_us(), pages;
    long long bad;
    reason_t r;

    snprintf(name, sizeof(name), "map_%s", tag);
    p = hm_map(fd, len);
    if (!p) {
        vt_fail(name, "mmap %zu: %s", len, strerror(errno));
        return;
    }
    pages = sysfs("hostmem_pages");
    bad = vt_check_byte(p, len, 0);
    if (bad >= 0)
        vt_fail(name, "byte %lld is %02x, not zeroed", bad, p[bad]);
    else if (pages != len / PAGE)
        vt_fail(name, "hostmem_pages %llu, want %zu", (unsigned long long)pages, len / PAGE);
    else
        vt_pass(name);

    snprintf(name, sizeof(name), "fill_%s", tag);
    report(name, check_fill(fd, p, len, len ^ 0x1111, &r), &r);
    snprintf(name, sizeof(name), "to_device_%s", tag);
    report(name, check_to(fd, p, len, len ^ 0x2222, &r), &r);
    snprintf(name, sizeof(name), "copy_%s", tag);
    report(name, check_copy(fd, p, p + half, half, len ^ 0x3333, &r), &r);

    /* Odd start and length inside the mapping; the edges must stay. */
    snprintf(name, sizeof(name), "unaligned_%s", tag);
    ulen = len - 3 - 5;
    memset(p, 0x5a, len);
    if (check_fill(fd, p + 3, ulen, len ^ 0x4444, &r) != 0)
        vt_fail(name, "%s", r.why);
    else if (vt_check_byte(p, 3, 0x5a) >= 0 || vt_check_byte(p + 3 + ulen, 5, 0x5a) >= 0)
        vt_fail(name, "bytes outside the segment overwritten");
    else if (check_copy(fd, p + 1, p + half + 7, half - 9, len ^ 0x5555, &r) != 0)
        vt_fail(name, "copy: %s", r.why);
    else
        vt_pass(name);

    snprintf(name, sizeof(name), "munmap_%s", tag);
    if (munmap(p, len) != 0)
        vt_fail(name, "munmap: %s", strerror(errno));
    else if (check_idle(&r) != 0)
        vt_fail(name, "%s", r.why);
    else
        vt_pass(name);
    vt_info("%s: done in %llu ms", tag, (unsigned long long)(vt_now_us() - t0) / 1000);
}

/* An async fill with the host sleeping: nothing pinned, data lands, and
 * munmap while it is in flight keeps the pages until it is done. */
static void test_async(void)
{
    size_t len = 8 * MIB;
    struct vcuda_seg s;
    unsigned char *p = hm_map(fd, len);
    uint64_t pinned, pages;
    long long bad;
    reason_t r;

    if (!p) {
        vt_fail("async_fill", "mmap: %s", strerror(errno));
        return;
    }
    s = seg(p, len, VCUDA_SEG_FROM_DEVICE);
    if (echo_f(fd, 0xa51c, VCU_ECHO_F_FILL, 500, 1, &s, 1, NULL, NULL, &r)) {
        vt_fail("async_fill", "%s", r.why);
        munmap(p, len);
        return;
    }
    pinned = sysfs("pinned_pages");
    if (vt_wait_zero("inflight", WAIT_MS, &pages) != 0)
        vt_fail("async_fill", "inflight stays at %llu", (unsigned long long)pages);
    else if (pinned != 0)
        vt_fail("async_fill", "pinned_pages %llu during the request", (unsigned long long)pinned);
    else if ((bad = vt_check_fill(p, len, 0xa51c, 0)) >= 0)
        vt_fail("async_fill", "byte %lld is %02x", bad, p[bad]);
    else
        vt_pass("async_fill");

    /* Again, and unmap at once: the request holds the memory. */
    memset(p, 0, len);
    if (echo_f(fd, 0xa51d, VCU_ECHO_F_FILL, 1000, 1, &s, 1, NULL, NULL, &r)) {
        vt_fail("munmap_in_flight", "%s", r.why);
        munmap(p, len);
        return;
    }
    munmap(p, len);
    vt_sleep_ms(200);
    pages = sysfs("hostmem_pages");
    if (pages != len / PAGE)
        vt_fail("munmap_in_flight", "hostmem_pages %llu while the host writes, want %zu",
                (unsigned long long)pages, len / PAGE);
    else if (check_idle(&r) != 0)
        vt_fail("munmap_in_flight", "%s", r.why);
    else
        vt_pass("munmap_in_flight");
}

/* A segment running past the end of the mapping: the part outside must
 * come from that memory (pinning/bounce) or the call fails cleanly. */
static void test_straddle(void)
{
    size_t hlen = MIB, alen = 256 * KIB, total = hlen + alen;
    unsigned char *base, *anon, *p;
    static const size_t sizes[] = { 8 * KIB, 256 * KIB };
    struct vcuda_seg s;
    unsigned int i;
    reason_t r;
    int err;

    base = mmap(NULL, total + PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        vt_fail("straddle", "reserve: %s", strerror(errno));
        return;
    }
    p = mmap(base, hlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    anon = mmap(base + hlen, alen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                -1, 0);
    if (p != base || anon != base + hlen) {
        vt_fail("straddle", "fixed mmaps: %s", strerror(errno));
        goto out;
    }
    for (i = 0; i < 2; i++) {
        size_t n = sizes[i], half = n / 2;
        unsigned char *start = base + hlen - half;
        char name[64];
        long long bad;

        snprintf(name, sizeof(name), "straddle_%zuk", n / KIB);
        memset(base + hlen - 2 * half, 0x5a, 2 * half);
        memset(anon, 0x5a, alen);
        s = seg(start, n, VCUDA_SEG_FROM_DEVICE);
        if (echo_f(fd, n, VCU_ECHO_F_FILL, 0, 0, &s, 1, NULL, &err, &r) != 0) {
            /* Only a clean refusal is fine, and only for a pinned size. */
            if (err == -EFAULT && n > VCUDA_BOUNCE_MAX &&
                vt_check_byte(anon, alen, 0x5a) < 0 &&
                vt_check_byte(base + hlen - 2 * half, 2 * half, 0x5a) < 0) {
                vt_info("%s: refused with EFAULT (not pinnable)", name);
                vt_pass(name);
            } else {
                vt_fail(name, "%s", r.why);
            }
            continue;
        }
        bad = vt_check_fill(start, n, n, 0);
        if (bad >= 0)
            vt_fail(name, "byte %lld is %02x", bad, start[bad]);
        else if (vt_check_byte(anon + half, alen - half, 0x5a) >= 0 ||
                 vt_check_byte(base + hlen - 2 * half, half, 0x5a) >= 0)
            vt_fail(name, "bytes outside the segment overwritten");
        else
            vt_pass(name);
    }

    /* Into a hole: nothing to pin there. */
    munmap(anon, alen);
    s = seg(base + hlen - 64 * KIB, 128 * KIB, VCUDA_SEG_FROM_DEVICE);
    if (echo_f(fd, 1, VCU_ECHO_F_FILL, 0, 0, &s, 1, NULL, &err, &r) == 0)
        vt_fail("straddle_hole", "succeeded");
    else if (err != -EFAULT)
        vt_fail("straddle_hole", "%s, want EFAULT", r.why);
    else
        vt_pass("straddle_hole");
out:
    munmap(base, total + PAGE);
}

/* Another file's mapping: sent unpinned, not stable, still byte-exact. */
static void test_cross_file(void)
{
    int g = dev_open(1);
    size_t len = 2 * MIB;
    unsigned char *p;
    reason_t r;

    if (g < 0) {
        vt_fail("cross_file", "second session: %s", strerror(-g));
        return;
    }
    p = hm_map(fd, len);
    if (!p) {
        vt_fail("cross_file", "mmap: %s", strerror(errno));
        close(g);
        return;
    }
    if (check_fill(g, p, len, 0xc0ffee, &r) == 0 && check_to(g, p, len, 0xbeef, &r) == 0)
        vt_pass("cross_file");
    else
        vt_fail("cross_file", "%s", r.why);
    munmap(p, len);
    close(g);
    report("cross_file_idle", check_idle(&r), &r);
}

/* Hash of vt_pattern(len, seed); 0 if out of memory. */
static uint64_t pattern_hash(size_t len, uint64_t seed)
{
    unsigned char *q = malloc(len);
    uint64_t h = 0;

    if (q) {
        vt_pattern(q, len, seed);
        h = vt_fnv(VCU_FNV64_INIT, q, len);
        free(q);
    }
    return h;
}

/* The child of fork() has no such mapping; the parent's stays intact. */
static void test_fork(void)
{
    size_t len = MIB;
    unsigned char *p = hm_map(fd, len), vec[MIB / PAGE];
    int status;
    pid_t pid;

    if (!p) {
        vt_fail("fork", "mmap: %s", strerror(errno));
        return;
    }
    vt_pattern(p, len, 99);
    pid = fork();
    if (pid == 0) {
        /* mincore: ENOMEM when the range is not mapped. */
        if (mincore(p, len, vec) == 0)
            _exit(1);
        _exit(errno == ENOMEM ? 0 : 2);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        vt_fail("fork", "fork/wait: %s", strerror(errno));
    else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        vt_fail("fork", "child sees the mapping (status %#x)", status);
    else if (vt_fnv(VCU_FNV64_INIT, p, len) != pattern_hash(len, 99))
        vt_fail("fork", "parent's data changed");
    else
        vt_pass("fork");
    munmap(p, len);
}

/* mremap in any form, partial munmap and mprotect all fail; the mapping
 * then still works. */
static void test_no_reshape(void)
{
    size_t len = 2 * MIB;
    unsigned char *p = hm_map(fd, len), *q;
    void *other;
    reason_t r;
    char why[160] = "";

    if (!p) {
        vt_fail("mremap", "mmap: %s", strerror(errno));
        return;
    }
    other = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    q = mremap(p, len, 2 * len, 0);
    if (q != MAP_FAILED)
        snprintf(why, sizeof(why), "grow in place succeeded");
    q = mremap(p, len, 2 * len, MREMAP_MAYMOVE);
    if (!why[0] && q != MAP_FAILED)
        snprintf(why, sizeof(why), "grow with move succeeded");
    q = mremap(p, len, len / 2, 0);
    if (!why[0] && q != MAP_FAILED)
        snprintf(why, sizeof(why), "shrink succeeded");
    if (other != MAP_FAILED) {
        q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, other);
        if (!why[0] && q != MAP_FAILED)
            snprintf(why, sizeof(why), "move succeeded");
    }
    if (why[0])
        vt_fail("mremap", "%s", why);
    else
        vt_pass("mremap");

    if (munmap(p + MIB, MIB) == 0)
        vt_fail("partial_munmap", "succeeded");
    else if (mprotect(p, MIB, PROT_READ) == 0)
        vt_fail("partial_munmap", "partial mprotect succeeded");
    else
        vt_pass("partial_munmap");

    if (check_fill(fd, p, len, 0x77, &r) == 0 && sysfs("hostmem_pages") == len / PAGE)
        vt_pass("after_reshape");
    else
        vt_fail("after_reshape", "%s (hostmem_pages %llu)", r.why,
                (unsigned long long)sysfs("hostmem_pages"));
    munmap(p, len);
    if (other != MAP_FAILED)
        munmap(other, len);
    report("reshape_idle", check_idle(&r), &r);
}

/* A process killed with a mapping and requests in flight leaks nothing. */
static void test_kill(void)
{
    int pfd[2], status;
    pid_t pid;
    char c;
    reason_t r;

    if (pipe(pfd) != 0) {
        vt_fail("killed", "pipe: %s", strerror(errno));
        return;
    }
    pid = fork();
    if (pid == 0) {
        size_t len = 64 * MIB;
        struct vcuda_seg s;
        unsigned char *p;
        int f = dev_open(1);

        close(pfd[0]);
        if (f < 0 || !(p = hm_map(f, len)))
            _exit(1);
        s = seg(p, len, VCUDA_SEG_FROM_DEVICE);
        if (echo_f(f, 5, VCU_ECHO_F_FILL, 2000, 1, &s, 1, NULL, NULL, &r))
            _exit(2);
        s = seg(p, len / 2, VCUDA_SEG_TO_DEVICE);
        if (write(pfd[1], "x", 1) != 1)
            _exit(3);
        echo_f(f, 6, 0, 3000, 0, &s, 1, NULL, NULL, &r);
        _exit(4);
    }
    close(pfd[1]);
    if (pid < 0 || read(pfd[0], &c, 1) != 1) {
        vt_fail("killed", "child did not start its requests");
        if (pid > 0)
            waitpid(pid, &status, 0);
        close(pfd[0]);
        return;
    }
    vt_sleep_ms(300);
    if (sysfs("hostmem_pages") == 0)
        vt_info("killed: hostmem_pages already 0 before the kill");
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(pfd[0]);
    if (!WIFSIGNALED(status))
        vt_fail("killed", "child exited with status %#x", status);
    else
        report("killed", check_idle(&r), &r);
}

int main(int argc, char **argv)
{
    static const struct {
        size_t len;
        const char *tag;
    } sizes[] = { { 4 * KIB, "4k" }, { MIB, "1m" }, { 64 * MIB, "64m" }, { 256 * MIB, "256m" } };
    unsigned long max_mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
    unsigned int i;

    vt_suite = "hostmem";
    setvbuf(stdout, NULL, _IONBF, 0);
    test_before_open();
    fd = dev_open(1);
    if (fd < 0) {
        vt_fail("session", "%s", strerror(-fd));
        return 1;
    }
    test_bad_args();
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (sizes[i].len <= max_mib * MIB)
            test_size(sizes[i].len, sizes[i].tag);
    test_async();
    test_straddle();
    test_cross_file();
    test_fork();
    test_no_reshape();
    test_kill();
    close(fd);
    return vt_nfail() ? 1 : 0;
}
