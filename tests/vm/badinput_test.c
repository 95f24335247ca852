/*
 * badinput suite: what a hostile or broken guest process can throw at
 * /dev/vcuda0 and at the device.  Each test expects one exact error and
 * checks afterwards that nothing stayed pinned.
 *
 * Parts:
 *  - the ioctl ABI (raw ioctls, no guest-lib): reserved fields, limits,
 *    flags, unknown commands, order of commands, transport opcodes;
 *  - bad user memory: NULL, kernel addresses, unmapped and read-only
 *    memory, segments running off the end of a mapping;
 *  - a process killed while its 64 MiB transfer is on the device, and a
 *    signal while waiting;
 *  - forged requests sent to the device unchanged (VCUDA_IOC_RAW_SUBMIT,
 *    module parameter allow_raw=1): every malformed one must get an error
 *    status, and the device, QEMU and the guest kernel must stay usable.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vcu_transport.h"
#include "vcuda_ioctl.h"
#include "vmtest.h"

#define MIB (1024ull * 1024)
#define PG 4096ull

typedef struct {
    char why[256];
} reason_t;

/* ---- raw ioctl helpers -------------------------------------------------- */

static int open_dev(void)
{
    int fd = open(VT_DEV, O_RDWR | O_CLOEXEC);

    if (fd < 0)
        vt_info("open %s: %s", VT_DEV, strerror(errno));
    return fd;
}

/* 0 or -errno. */
static int xioctl(int fd, unsigned long cmd, void *arg)
{
    return ioctl(fd, cmd, arg) == 0 ? 0 : -errno;
}

static int session_open(int fd, struct vcuda_session_open *so)
{
    memset(so, 0, sizeof(*so));
    so->version_min = VCU_PROTO_VERSION;
    so->version_max = VCU_PROTO_VERSION;
    so->features = VCU_FEAT_ECHO;
    return xioctl(fd, VCUDA_IOC_SESSION_OPEN, so);
}

/* An open file with its session open, or -1. */
static int open_session(void)
{
    struct vcuda_session_open so;
    int fd = open_dev(), err;

    if (fd < 0)
        return -1;
    err = session_open(fd, &so);
    if (err || so.status != VCU_S_OK) {
        vt_info("SESSION_OPEN -> %d status %u", err, so.status);
        close(fd);
        return -1;
    }
    return fd;
}

static struct vcu_echo_req echo_req = { .seed = 42 };
static unsigned char resp_buf[VCU_MAX_PAYLOAD];

/* A well-formed ECHO submit around the given segments. */
static void mk_submit(struct vcuda_submit *s, struct vcuda_seg *segs, unsigned int nsegs)
{
    memset(s, 0, sizeof(*s));
    s->opcode = VCU_OP_ECHO;
    s->req_addr = (uintptr_t)&echo_req;
    s->req_len = sizeof(echo_req);
    s->nsegs = nsegs;
    s->segs_addr = (uintptr_t)segs;
    s->resp_addr = (uintptr_t)resp_buf;
    s->resp_cap = sizeof(struct vcu_echo_resp);
}

static const char *errname(int e)
{
    static __thread char buf[32];

    switch (e < 0 ? -e : e) {
    case 0: return "0";
    case EINVAL: return "-EINVAL";
    case EFAULT: return "-EFAULT";
    case E2BIG: return "-E2BIG";
    case ENOTTY: return "-ENOTTY";
    case EPERM: return "-EPERM";
    case EBUSY: return "-EBUSY";
    case ENOTCONN: return "-ENOTCONN";
    case EINTR: return "-EINTR";
    case ENOMEM: return "-ENOMEM";
    case EIO: return "-EIO";
    case EMSGSIZE: return "-EMSGSIZE";
    case EOVERFLOW: return "-EOVERFLOW";
    case EEXIST: return "-EEXIST";
    case ENOENT: return "-ENOENT";
    }
    snprintf(buf, sizeof(buf), "-%d", e < 0 ? -e : e);
    return buf;
}

/* Expect err to be one of the given -errno values (0-terminated list). */
static void expect(const char *name, int err, const int *want)
{
    char list[128] = "";

    for (const int *w = want; *w; w++) {
        if (err == *w) {
            vt_pass(name);
            return;
        }
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                 w == want ? "" : " or ", errname(*w));
    }
    vt_fail(name, "got %s, want %s", errname(err), list);
}

#define EXPECT(name, err, ...) expect(name, err, (const int[]){ __VA_ARGS__, 0 })

/* Nothing may stay pinned after a failed submit; 0 or -1 (and a FAIL). */
static int check_unpinned(const char *name)
{
    uint64_t v = 0;

    if (vt_wait_zero("pinned_pages", 2000, &v) != 0) {
        char n[96];

        snprintf(n, sizeof(n), "%s_unpinned", name);
        vt_fail(n, "pinned_pages = %llu after the failed request", (unsigned long long)v);
        return -1;
    }
    return 0;
}

/* A correct small ECHO on fd: 0 or -1 with r. */
static int echo_ok(int fd, reason_t *r)
{
    unsigned char data[100];
    struct vcuda_seg seg = { (uintptr_t)data, sizeof(data), VCUDA_SEG_TO_DEVICE, 0 };
    struct vcuda_submit s;
    struct vcu_echo_resp er;
    int err;

    vt_pattern(data, sizeof(data), 5);
    mk_submit(&s, &seg, 1);
    err = xioctl(fd, VCUDA_IOC_SUBMIT, &s);
    if (err || s.status != VCU_S_OK || s.resp_len != sizeof(er)) {
        snprintf(r->why, sizeof(r->why), "ECHO -> %s status %u resp_len %u", errname(err),
                 s.status, s.resp_len);
        return -1;
    }
    memcpy(&er, resp_buf, sizeof(er));
    if (er.in_bytes != sizeof(data) || er.in_hash != vt_fnv(VCU_FNV64_INIT, data, sizeof(data))) {
        snprintf(r->why, sizeof(r->why), "ECHO reply wrong");
        return -1;
    }
    return 0;
}

/* ---- the ioctl ABI ----------------------------------------------------- */

static void test_abi(void)
{
    struct vcuda_session_open so;
    struct vcuda_submit s;
    struct vcuda_seg segs[VCUDA_MAX_SEGS + 1];
    unsigned char data[256];
    static unsigned char big_req[VCUDA_MAX_PAYLOAD + 8];
    int fd, err;
    reason_t r;

    fd = open_dev();
    if (fd < 0) {
        vt_fail("abi_open", "cannot open " VT_DEV);
        return;
    }
    memset(segs, 0, sizeof(segs));
    for (unsigned int i = 0; i <= VCUDA_MAX_SEGS; i++) {
        segs[i].addr = (uintptr_t)data;
        segs[i].len = 16;
        segs[i].flags = VCUDA_SEG_TO_DEVICE;
    }

    mk_submit(&s, segs, 1);
    EXPECT("submit_before_session_open", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -ENOTCONN);

    memset(&so, 0, sizeof(so));
    so.version_min = so.version_max = VCU_PROTO_VERSION;
    so.features = VCU_FEAT_ECHO;
    so.reserved[3] = 1;
    EXPECT("session_open_reserved", xioctl(fd, VCUDA_IOC_SESSION_OPEN, &so), -EINVAL);

    err = session_open(fd, &so);
    if (err || so.status != VCU_S_OK) {
        vt_fail("session_open", "-> %s status %u", errname(err), so.status);
        close(fd);
        return;
    }
    if (so.version != VCU_PROTO_VERSION || !(so.features & VCU_FEAT_ECHO) ||
        so.max_segs != VCUDA_MAX_SEGS || so.max_payload != VCUDA_MAX_PAYLOAD ||
        so.max_xfer != VCUDA_MAX_XFER)
        vt_fail("session_open", "version %u features %llx max_segs %u max_payload %u max_xfer %llu",
                so.version, (unsigned long long)so.features, so.max_segs, so.max_payload,
                (unsigned long long)so.max_xfer);
    else
        vt_pass("session_open");
    EXPECT("session_open_twice", session_open(fd, &so), -EBUSY);

    mk_submit(&s, segs, 1);
    s.reserved0 = 1;
    EXPECT("submit_reserved0", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EINVAL);
    mk_submit(&s, segs, 1);
    s.reserved[1] = 1;
    EXPECT("submit_reserved", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EINVAL);
    mk_submit(&s, segs, 1);
    s.flags = 0x80;
    EXPECT("submit_unknown_flag", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EINVAL);
    segs[0].reserved = 1;
    mk_submit(&s, segs, 1);
    EXPECT("seg_reserved", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EINVAL);
    segs[0].reserved = 0;
    segs[0].flags = 0;
    EXPECT("seg_no_direction", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EINVAL);
    segs[0].flags = VCUDA_SEG_TO_DEVICE | VCUDA_SEG_FROM_DEVICE;
    EXPECT("seg_both_directions", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EINVAL);
    segs[0].flags = 1u << 5;
    EXPECT("seg_unknown_flag", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EINVAL);
    segs[0].flags = VCUDA_SEG_TO_DEVICE;

    mk_submit(&s, segs, VCUDA_MAX_SEGS + 1);
    EXPECT("nsegs_over_max", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -E2BIG);
    mk_submit(&s, segs, 0xffffffffu);
    EXPECT("nsegs_huge", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -E2BIG);
    mk_submit(&s, segs, 1);
    s.req_addr = (uintptr_t)big_req;
    s.req_len = VCUDA_MAX_PAYLOAD + 1;
    EXPECT("req_len_over_max", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -E2BIG);
    mk_submit(&s, segs, 1);
    s.resp_cap = VCUDA_MAX_PAYLOAD + 1;
    EXPECT("resp_cap_over_max", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -E2BIG);

    mk_submit(&s, segs, 0);
    s.opcode = VCU_OP_SESSION_OPEN;
    EXPECT("submit_session_open_op", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EPERM);
    s.opcode = VCU_OP_SESSION_CLOSE;
    EXPECT("submit_session_close_op", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EPERM);

    EXPECT("ioctl_unknown_nr", xioctl(fd, _IOWR(VCUDA_IOC_MAGIC, 0x7f, struct vcuda_submit), &s),
           -ENOTTY);
    EXPECT("ioctl_wrong_size", xioctl(fd, _IOWR(VCUDA_IOC_MAGIC, 0x01, uint64_t), &s), -ENOTTY);
    EXPECT("ioctl_wrong_magic", xioctl(fd, _IOWR('T', 0x01, struct vcuda_submit), &s), -ENOTTY);

    /* Bad pointers in the submit struct itself. */
    EXPECT("submit_struct_null", xioctl(fd, VCUDA_IOC_SUBMIT, NULL), -EFAULT);
    mk_submit(&s, segs, 1);
    s.req_addr = 8;
    EXPECT("req_addr_bad", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EFAULT);
    mk_submit(&s, segs, 1);
    s.segs_addr = 0xffffffff81000000ull;
    EXPECT("segs_addr_kernel", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EFAULT);
    mk_submit(&s, segs, 1);
    s.resp_addr = 16;
    EXPECT("resp_addr_bad", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -EFAULT);

    if (echo_ok(fd, &r))
        vt_fail("abi_then_echo", "%s", r.why);
    else
        vt_pass("abi_then_echo");
    check_unpinned("abi");
    close(fd);
}

/* ---- bad user memory ---------------------------------------------------- */

/* One ECHO with one segment (addr, len, dir) expecting one of want. */
static void bad_seg(int fd, const char *name, uint64_t addr, uint64_t len, uint32_t dir,
                    const int *want)
{
    struct vcuda_seg seg = { addr, len, dir, 0 };
    struct vcuda_submit s;

    mk_submit(&s, &seg, 1);
    expect(name, xioctl(fd, VCUDA_IOC_SUBMIT, &s), want);
    check_unpinned(name);
}

#define BAD_SEG(fd, name, addr, len, dir, ...) \
    bad_seg(fd, name, addr, len, dir, (const int[]){ __VA_ARGS__, 0 })

static void test_memory(void)
{
    static const struct { const char *tag; uint64_t len; } sz[2] = {
        { "small", 100 }, { "1MiB", MIB },
    };
    static const struct { const char *tag; uint32_t dir; } dirs[2] = {
        { "to", VCUDA_SEG_TO_DEVICE }, { "from", VCUDA_SEG_FROM_DEVICE },
    };
    char name[96];
    unsigned char *m;
    int fd = open_session();

    if (fd < 0) {
        vt_fail("memory_open", "no session");
        return;
    }
    for (int d = 0; d < 2; d++) {
        for (int k = 0; k < 2; k++) {
            uint64_t len = sz[k].len;

            snprintf(name, sizeof(name), "addr_null_%s_%s", dirs[d].tag, sz[k].tag);
            BAD_SEG(fd, name, 0, len, dirs[d].dir, -EFAULT);
            snprintf(name, sizeof(name), "addr_kernel_%s_%s", dirs[d].tag, sz[k].tag);
            BAD_SEG(fd, name, 0xffff888000000000ull, len, dirs[d].dir, -EFAULT);
            snprintf(name, sizeof(name), "addr_kernel_text_%s_%s", dirs[d].tag, sz[k].tag);
            BAD_SEG(fd, name, 0xffffffff81000000ull, len, dirs[d].dir, -EFAULT);

            /* Freed memory. */
            m = mmap(NULL, len + PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            memset(m, 1, len + PG);
            munmap(m, len + PG);
            snprintf(name, sizeof(name), "addr_unmapped_%s_%s", dirs[d].tag, sz[k].tag);
            BAD_SEG(fd, name, (uintptr_t)m, len, dirs[d].dir, -EFAULT);

            /* Runs off the end of a mapping into an unmapped page: all
             * but the last page are valid (and get pinned first). */
            m = mmap(NULL, len + 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                     0);
            memset(m, 1, len + 2 * PG);
            munmap(m + ((len + PG) & ~(PG - 1)), PG + ((len + PG) % PG ? PG : 0));
            snprintf(name, sizeof(name), "runs_off_mapping_%s_%s", dirs[d].tag, sz[k].tag);
            BAD_SEG(fd, name, (uintptr_t)m + PG - 50, len + 100, dirs[d].dir, -EFAULT);
            munmap(m, len + 2 * PG);

            /* Address + length wraps around. */
            snprintf(name, sizeof(name), "addr_wraps_%s_%s", dirs[d].tag, sz[k].tag);
            BAD_SEG(fd, name, 0xfffffffffffff000ull, len + PG, dirs[d].dir, -EFAULT, -EINVAL);
        }
        /* PROT_NONE memory. */
        m = mmap(NULL, MIB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        snprintf(name, sizeof(name), "prot_none_%s_1MiB", dirs[d].tag);
        BAD_SEG(fd, name, (uintptr_t)m, MIB, dirs[d].dir, -EFAULT);
        snprintf(name, sizeof(name), "prot_none_%s_small", dirs[d].tag);
        BAD_SEG(fd, name, (uintptr_t)m, 100, dirs[d].dir, -EFAULT);
        munmap(m, MIB);
    }
    /* The device may not write into read-only memory. */
    m = mmap(NULL, MIB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    BAD_SEG(fd, "readonly_from_small", (uintptr_t)m, 100, VCUDA_SEG_FROM_DEVICE, -EFAULT);
    BAD_SEG(fd, "readonly_from_1MiB", (uintptr_t)m, MIB, VCUDA_SEG_FROM_DEVICE, -EFAULT);
    munmap(m, MIB);

    /* Over the transfer limit: refused before anything is pinned (the
     * mapping is never touched, so pinning it would cost nothing but time). */
    m = mmap(NULL, VCUDA_MAX_XFER + 2 * PG, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        vt_fail("seg_over_max_xfer", "mmap 1 GiB: %s", strerror(errno));
    } else {
        struct vcuda_seg segs[2] = {
            { (uintptr_t)m, 600 * MIB, VCUDA_SEG_TO_DEVICE, 0 },
            { (uintptr_t)m, 600 * MIB, VCUDA_SEG_TO_DEVICE, 0 },
        };
        struct vcuda_submit s;

        BAD_SEG(fd, "seg_over_max_xfer", (uintptr_t)m, VCUDA_MAX_XFER + 1, VCUDA_SEG_TO_DEVICE,
                -E2BIG, -EINVAL);
        BAD_SEG(fd, "seg_len_huge", (uintptr_t)m, ~0ull >> 1, VCUDA_SEG_TO_DEVICE, -E2BIG,
                -EINVAL);
        mk_submit(&s, segs, 2);
        EXPECT("segs_sum_over_max_xfer", xioctl(fd, VCUDA_IOC_SUBMIT, &s), -E2BIG, -EINVAL);
        check_unpinned("segs_sum_over_max_xfer");
        munmap(m, VCUDA_MAX_XFER + 2 * PG);
    }
    {
        reason_t r;

        if (echo_ok(fd, &r))
            vt_fail("memory_then_echo", "%s", r.why);
        else
            vt_pass("memory_then_echo");
    }
    close(fd);
}

/* ---- killed and interrupted transfers --------------------------------- */

static void test_kill(void)
{
    const size_t len = 64 * MIB;
    uint64_t pinned = 0, v = 0;
    int pipefd[2], st, fd;
    pid_t pid;
    char c;
    reason_t r;

    if (pipe(pipefd) != 0) {
        vt_fail("killed_mid_transfer", "pipe");
        return;
    }
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        unsigned char *a = vt_alloc(len), *b = vt_alloc(len);
        vcu_buf_t bufs[2] = { { a, len, VCU_SEG_TO_DEVICE }, { b, len, VCU_SEG_FROM_DEVICE } };
        struct vcu_echo_req er = { .seed = 1, .delay_ms = 2000 };
        struct vcu_echo_resp resp;
        vcu_conn_t *cn;

        if (!a || !b || vcu_conn_open(NULL, VCU_FEAT_ECHO, &cn) != 0)
            _exit(3);
        vt_pattern(a, len, 9);
        if (write(pipefd[1], "g", 1) != 1)
            _exit(4);
        vcu_conn_call(cn, VCU_OP_ECHO, 0, &er, sizeof(er), bufs, 2, &resp, sizeof(resp), NULL);
        _exit(5);   /* not reached before the kill */
    }
    close(pipefd[1]);
    if (pid < 0 || read(pipefd[0], &c, 1) != 1) {
        vt_fail("killed_mid_transfer", "child did not start");
        close(pipefd[0]);
        if (pid > 0)
            waitpid(pid, &st, 0);
        return;
    }
    close(pipefd[0]);
    /* Pinning 128 MiB takes a while under TCG: wait until the request is
     * on the device (all pages pinned), then kill it 300 ms into its
     * 2 s delay. */
    {
        uint64_t t0 = vt_now_us();

        do {
            vt_sleep_ms(10);
            vt_sysfs_u64("pinned_pages", &pinned);
        } while (pinned < 2 * len / PG && vt_now_us() - t0 < 5000000);
        vt_info("killed_mid_transfer: %llu pages pinned after %llu ms",
                (unsigned long long)pinned, (unsigned long long)(vt_now_us() - t0) / 1000);
    }
    vt_sleep_ms(300);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
        vt_fail("killed_mid_transfer", "child ended with status 0x%x before the kill", st);
        return;
    }
    if (pinned < 2 * len / PG)
        vt_fail("pinned_during_transfer", "pinned_pages = %llu, want >= %llu",
                (unsigned long long)pinned, (unsigned long long)(2 * len / PG));
    else
        vt_pass("pinned_during_transfer");
    if (vt_wait_zero("pinned_pages", 6000, &v) != 0)
        vt_fail("killed_mid_transfer", "pinned_pages still %llu 6 s after the kill",
                (unsigned long long)v);
    else if (vt_wait_zero("inflight", 1000, &v) != 0)
        vt_fail("killed_mid_transfer", "inflight still %llu", (unsigned long long)v);
    else
        vt_pass("killed_mid_transfer");

    fd = open_session();
    if (fd < 0 || echo_ok(fd, &r))
        vt_fail("session_after_kill", "%s", fd < 0 ? "no session" : r.why);
    else
        vt_pass("session_after_kill");
    if (fd >= 0)
        close(fd);
}

static void on_alarm(int sig)
{
    (void)sig;
}

/* A signal while waiting: -EINTR; the request completes on the device
 * and its pages are released afterwards. */
static void test_eintr(void)
{
    struct sigaction sa;
    unsigned char *a = vt_alloc(MIB);
    struct vcuda_seg seg = { (uintptr_t)a, MIB, VCUDA_SEG_FROM_DEVICE, 0 };
    struct vcu_echo_req er = { .seed = 3, .flags = VCU_ECHO_F_FILL, .delay_ms = 1000 };
    struct vcuda_submit s;
    uint64_t v;
    int fd = open_session(), err;
    reason_t r;

    if (fd < 0 || !a) {
        vt_fail("signal_while_waiting", "setup");
        return;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;   /* no SA_RESTART */
    sigaction(SIGALRM, &sa, NULL);
    mk_submit(&s, &seg, 1);
    s.req_addr = (uintptr_t)&er;
    ualarm(200000, 0);
    err = xioctl(fd, VCUDA_IOC_SUBMIT, &s);
    EXPECT("signal_while_waiting", err, -EINTR);
    if (vt_wait_zero("pinned_pages", 4000, &v) != 0)
        vt_fail("signal_then_unpinned", "pinned_pages still %llu", (unsigned long long)v);
    else
        vt_pass("signal_then_unpinned");
    if (echo_ok(fd, &r))
        vt_fail("signal_then_echo", "%s", r.why);
    else
        vt_pass("signal_then_echo");
    signal(SIGALRM, SIG_DFL);
    close(fd);
    vt_free(a, MIB);
}

/* ---- forged requests ---------------------------------------------------- */

static int raw_fd = -1;
static uint64_t raw_session;

/* Guest-physical address of the page holding p (mlocked), or 0. */
static uint64_t gpa_of(const void *p)
{
    uint64_t ent = 0;
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    off_t off = (off_t)((uintptr_t)p / PG) * 8;

    if (fd < 0)
        return 0;
    if (pread(fd, &ent, 8, off) != 8)
        ent = 0;
    close(fd);
    if (!(ent & (1ull << 63)) || (ent & ((1ull << 55) - 1)) == 0)
        return 0;
    return (ent & ((1ull << 55) - 1)) * PG + (uintptr_t)p % PG;
}

/* A forged request under construction. */
typedef struct {
    unsigned char buf[8192];
    size_t len;
} raw_t;

static void raw_begin(raw_t *q, uint32_t opcode, uint64_t session, const void *payload,
                      uint32_t payload_len, uint16_t nsegs)
{
    struct vcu_req_hdr h = {
        .opcode = opcode, .session = session, .req_id = 77, .payload_len = payload_len,
        .nsegs = nsegs,
    };

    memset(q, 0, sizeof(*q));
    memcpy(q->buf, &h, sizeof(h));
    q->len = sizeof(h);
    memcpy(q->buf + q->len, payload, payload_len);
    q->len += (payload_len + 7) & ~7u;
}

static void raw_add(raw_t *q, const void *p, size_t n)
{
    memcpy(q->buf + q->len, p, n);
    q->len += n;
}

static void raw_seg(raw_t *q, uint64_t len, uint32_t nranges, uint32_t flags)
{
    struct vcu_seg s = { .len = len, .nranges = nranges, .flags = flags };

    raw_add(q, &s, sizeof(s));
}

static void raw_range(raw_t *q, uint64_t gpa, uint64_t len)
{
    struct vcu_range r = { .gpa = gpa, .len = len };

    raw_add(q, &r, sizeof(r));
}

/* Sends q; returns -errno of the ioctl or the reply's status (>= 0). */
static int raw_send(const raw_t *q, void *payload_out, uint32_t cap)
{
    static unsigned char rb[sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD];
    struct vcuda_raw_submit rs;
    struct vcu_resp_hdr rh;
    int err;

    memset(&rs, 0, sizeof(rs));
    rs.req_addr = (uintptr_t)q->buf;
    rs.req_len = q->len;
    rs.resp_addr = (uintptr_t)rb;
    rs.resp_cap = sizeof(rb);
    err = xioctl(raw_fd, VCUDA_IOC_RAW_SUBMIT, &rs);
    if (err)
        return err;
    if (rs.resp_len < sizeof(rh))
        return -EPROTO;
    memcpy(&rh, rb, sizeof(rh));
    if (payload_out) {
        uint32_t n = rh.payload_len < cap ? rh.payload_len : cap;

        if (n > rs.resp_len - sizeof(rh))
            n = rs.resp_len - sizeof(rh);
        memcpy(payload_out, rb + sizeof(rh), n);
    }
    return (int)rh.status;
}

static const char *stname(int st)
{
    static __thread char buf[48];

    if (st < 0)
        return errname(st);
    snprintf(buf, sizeof(buf), "status %d (%s)", st, vcu_status_str(st));
    return buf;
}

static void expect_st(const char *name, int got, const int *want)
{
    char list[160] = "";

    for (const int *w = want; *w != -1; w++) {
        if (got == *w) {
            vt_pass(name);
            return;
        }
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                 w == want ? "" : " or ", stname(*w));
    }
    vt_fail(name, "got %s, want %s", stname(got), list);
}

#define EXPECT_ST(name, got, ...) expect_st(name, got, (const int[]){ __VA_ARGS__, -1 })

static void test_raw(void)
{
    struct vcu_session_open_req so = { .version_min = 1, .version_max = 1,
                                       .features = VCU_FEAT_ECHO };
    struct vcu_session_open_resp sor;
    struct vcu_echo_req er = { .seed = 1234, .flags = VCU_ECHO_F_FILL };
    struct vcu_echo_req er0 = { .seed = 99 };
    struct vcu_echo_resp ers;
    unsigned char *page;
    uint64_t gpa, gpa2, sess;
    raw_t q;
    int st;
    reason_t r;

    raw_fd = open_session();
    if (raw_fd < 0) {
        vt_fail("raw_open", "no session");
        return;
    }
    /* The device's own session for the forged requests. */
    raw_begin(&q, VCU_OP_SESSION_OPEN, 0, &so, sizeof(so), 0);
    memset(&sor, 0, sizeof(sor));
    st = raw_send(&q, &sor, sizeof(sor));
    if (st == -EPERM) {
        vt_fail("raw_session_open", "RAW_SUBMIT -> -EPERM: module loaded without allow_raw=1?");
        close(raw_fd);
        return;
    }
    if (st != VCU_S_OK || sor.session == 0) {
        vt_fail("raw_session_open", "got %s session %llu", stname(st),
                (unsigned long long)sor.session);
        close(raw_fd);
        return;
    }
    vt_pass("raw_session_open");
    sess = raw_session = sor.session;

    {
        struct vcu_session_open_req bad = { .version_min = 7, .version_max = 9 };

        raw_begin(&q, VCU_OP_SESSION_OPEN, 0, &bad, sizeof(bad), 0);
        EXPECT_ST("raw_session_open_bad_version", raw_send(&q, NULL, 0), VCU_S_EVERSION);
    }

    /* Control: a correct forged ECHO filling one of our own pages. */
    page = vt_alloc(2 * PG);
    mlock(page, 2 * PG);
    memset(page, 0xcc, 2 * PG);
    gpa = gpa_of(page);
    gpa2 = gpa_of(page + PG);
    if (!gpa || !gpa2) {
        vt_fail("raw_control_echo", "no GPA from /proc/self/pagemap");
    } else {
        raw_begin(&q, VCU_OP_ECHO, sess, &er, sizeof(er), 1);
        raw_seg(&q, PG + 100, 2, VCU_SEG_FROM_DEVICE);
        raw_range(&q, gpa, PG);
        raw_range(&q, gpa2, 100);
        st = raw_send(&q, &ers, sizeof(ers));
        if (st != VCU_S_OK)
            vt_fail("raw_control_echo", "got %s", stname(st));
        else if (vt_check_fill(page, PG, er.seed, 0) >= 0 ||
                 vt_check_fill(page + PG, 100, er.seed, PG) >= 0 || page[PG + 100] != 0xcc)
            vt_fail("raw_control_echo", "page contents wrong after a forged FILL");
        else
            vt_pass("raw_control_echo");
    }
    if (!gpa)
        gpa = 0x100000;     /* some guest RAM; only ever read below */

    raw_begin(&q, 0x7777, sess, &er0, sizeof(er0), 0);
    EXPECT_ST("raw_bad_opcode", raw_send(&q, NULL, 0), VCU_S_ENOTSUP, VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    ((struct vcu_req_hdr *)q.buf)->payload_len = 8;
    EXPECT_ST("raw_payload_len_short", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    ((struct vcu_req_hdr *)q.buf)->payload_len = 4096;
    EXPECT_ST("raw_payload_len_past_end", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    ((struct vcu_req_hdr *)q.buf)->payload_len = VCU_MAX_PAYLOAD + 8;
    EXPECT_ST("raw_payload_len_over_max", raw_send(&q, NULL, 0), VCU_S_E2BIG, VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    ((struct vcu_req_hdr *)q.buf)->reserved = 1;
    EXPECT_ST("raw_hdr_reserved", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), VCU_MAX_SEGS + 1);
    for (unsigned int i = 0; i <= VCU_MAX_SEGS; i++)
        raw_seg(&q, 16, 1, VCU_SEG_TO_DEVICE);
    for (unsigned int i = 0; i <= VCU_MAX_SEGS; i++)
        raw_range(&q, gpa, 16);
    EXPECT_ST("raw_nsegs_over_max", raw_send(&q, NULL, 0), VCU_S_E2BIG);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 2);   /* table missing */
    EXPECT_ST("raw_segs_missing", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 32, 2, VCU_SEG_TO_DEVICE);                      /* says 2 ranges */
    raw_range(&q, gpa, 32);                                     /* gives 1 */
    EXPECT_ST("raw_nranges_mismatch", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 32, 0xffffffffu, VCU_SEG_TO_DEVICE);
    raw_range(&q, gpa, 32);
    EXPECT_ST("raw_nranges_huge", raw_send(&q, NULL, 0), VCU_S_EINVAL, VCU_S_E2BIG);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 32, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, gpa, 32);
    raw_range(&q, gpa, 32);                                     /* one extra */
    EXPECT_ST("raw_extra_range", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 8192, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, gpa, 4096);
    EXPECT_ST("raw_seg_len_mismatch", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, PG, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, 1ull << 40, PG);
    EXPECT_ST("raw_gpa_beyond_ram", raw_send(&q, NULL, 0), VCU_S_EFAULT);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, PG, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, 0xfee00000ull, PG);
    EXPECT_ST("raw_gpa_mmio", raw_send(&q, NULL, 0), VCU_S_EFAULT);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 2 * PG, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, 0xbffff000ull, 2 * PG);                       /* end of low RAM */
    EXPECT_ST("raw_gpa_straddles_ram_end", raw_send(&q, NULL, 0), VCU_S_EFAULT, VCU_S_OK);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 0, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, gpa, 0);
    EXPECT_ST("raw_range_len_zero", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 0x2000, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, 0xfffffffffffff000ull, 0x2000);
    EXPECT_ST("raw_range_wraps", raw_send(&q, NULL, 0), VCU_S_EINVAL, VCU_S_EFAULT);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 2);
    raw_seg(&q, ~0ull - 10, 1, VCU_SEG_TO_DEVICE);
    raw_seg(&q, 100, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, gpa, ~0ull - 10);
    raw_range(&q, gpa, 100);
    EXPECT_ST("raw_seg_len_sum_wraps", raw_send(&q, NULL, 0), VCU_S_E2BIG, VCU_S_EINVAL,
              VCU_S_EFAULT);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, VCU_MAX_XFER + PG, 1, VCU_SEG_TO_DEVICE);
    raw_range(&q, 0x100000, VCU_MAX_XFER + PG);
    EXPECT_ST("raw_seg_over_max_xfer", raw_send(&q, NULL, 0), VCU_S_E2BIG);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 32, 1, 0);
    raw_range(&q, gpa, 32);
    EXPECT_ST("raw_seg_no_direction", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 1);
    raw_seg(&q, 32, 1, VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE);
    raw_range(&q, gpa, 32);
    EXPECT_ST("raw_seg_both_directions", raw_send(&q, NULL, 0), VCU_S_EINVAL);

    raw_begin(&q, VCU_OP_ECHO, 0xdead0000beefull, &er0, sizeof(er0), 0);
    EXPECT_ST("raw_unknown_session", raw_send(&q, NULL, 0), VCU_S_ENOSESSION);

    raw_begin(&q, VCU_OP_ECHO, 0, &er0, sizeof(er0), 0);
    EXPECT_ST("raw_session_zero", raw_send(&q, NULL, 0), VCU_S_ENOSESSION);

    {
        struct vcu_echo_req bad = { .seed = 1, .flags = 0x100 };

        raw_begin(&q, VCU_OP_ECHO, sess, &bad, sizeof(bad), 0);
        EXPECT_ST("raw_echo_bad_flags", raw_send(&q, NULL, 0), VCU_S_EINVAL);
        bad.flags = 0;
        bad.delay_ms = 10001;
        raw_begin(&q, VCU_OP_ECHO, sess, &bad, sizeof(bad), 0);
        EXPECT_ST("raw_echo_delay_over_max", raw_send(&q, NULL, 0), VCU_S_EINVAL);
    }

    /* Truncated: less than a header. */
    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    q.len = 16;
    st = raw_send(&q, NULL, 0);
    EXPECT_ST("raw_truncated_header", st, VCU_S_EINVAL, -EINVAL);

    /* The forged session still works, then closes. */
    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    EXPECT_ST("raw_session_still_works", raw_send(&q, NULL, 0), VCU_S_OK);
    raw_begin(&q, VCU_OP_SESSION_CLOSE, sess, NULL, 0, 0);
    EXPECT_ST("raw_session_close", raw_send(&q, NULL, 0), VCU_S_OK);
    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    EXPECT_ST("raw_closed_session", raw_send(&q, NULL, 0), VCU_S_ENOSESSION);

    if (echo_ok(raw_fd, &r))
        vt_fail("raw_then_echo", "%s", r.why);
    else
        vt_pass("raw_then_echo");
    close(raw_fd);
    vt_free(page, 2 * PG);
}

/*
 * Forged CUDA array, copy and texture requests (CU_ARRAY_*, CU_MIPMAP_*,
 * CU_MEMCPY_3D, CU_TEXOBJ_*) on a raw session of their own: truncated payloads are
 * malformed (VCU_S_EINVAL); forged handles, objects never made, huge
 * sizes and addresses the session did not allocate are CUDA errors in a
 * reply that succeeded; the session stays usable.  Without a GPU driver
 * on the host the device offers no CUDA and refuses them all
 * (VCU_S_ENOTSUP).
 */
static void raw_cu(const char *name, raw_t *q, int cuda, int want_st, uint32_t want_res)
{
    struct vcu_cu_resp rp;
    int st;

    memset(&rp, 0xee, sizeof(rp));
    st = raw_send(q, &rp, sizeof(rp));
    if (!cuda) {
        EXPECT_ST(name, st, VCU_S_ENOTSUP, VCU_S_EINVAL);
        return;
    }
    if (st != want_st)
        vt_fail(name, "got %s, want %s", stname(st), stname(want_st));
    else if (want_st == VCU_S_OK && rp.result != want_res)
        vt_fail(name, "CUresult %u, want %u", rp.result, want_res);
    else
        vt_pass(name);
}

static void test_raw_arrays(void)
{
    struct vcu_session_open_req so = { .version_min = 1, .version_max = 1,
                                       .features = VCU_FEAT_ECHO | VCU_FEAT_CUDA };
    struct vcu_session_open_resp sor;
    struct vcu_cu_array_req ar;
    struct vcu_cu_u64_req u;
    struct vcu_cu_memcpy3d_req m;
    struct vcu_cu_texobj_req tq;
    struct vcu_cu_pair_req pq;
    struct vcu_echo_req er0 = { .seed = 5 };
    uint64_t sess;
    raw_t q;
    int cuda, st;

    raw_fd = open_session();
    if (raw_fd < 0) {
        vt_fail("raw_cu_open", "no session");
        return;
    }
    raw_begin(&q, VCU_OP_SESSION_OPEN, 0, &so, sizeof(so), 0);
    memset(&sor, 0, sizeof(sor));
    st = raw_send(&q, &sor, sizeof(sor));
    if (st != VCU_S_OK || sor.session == 0) {
        vt_fail("raw_cu_session_open", "got %s", stname(st));
        close(raw_fd);
        return;
    }
    sess = sor.session;
    cuda = (sor.features & VCU_FEAT_CUDA) != 0;
    vt_info("badinput: forged CUDA array requests %s", cuda ? "with CUDA" : "without CUDA");

    memset(&ar, 0, sizeof(ar));
    ar.width = 64;
    ar.height = 64;
    ar.format = 0x20;               /* CU_AD_FORMAT_FLOAT */
    ar.channels = 1;
    raw_begin(&q, VCU_OP_CU_ARRAY_CREATE, sess, &ar, 16, 0);
    raw_cu("raw_cu_array_create_truncated", &q, cuda, VCU_S_EINVAL, 0);
    ar.width = 1ull << 40;
    raw_begin(&q, VCU_OP_CU_ARRAY_CREATE, sess, &ar, sizeof(ar), 0);
    raw_cu("raw_cu_array_create_huge", &q, cuda, VCU_S_OK, 1 /* INVALID_VALUE */);
    ar.width = 64;
    ar.channels = 3;
    raw_begin(&q, VCU_OP_CU_ARRAY_CREATE, sess, &ar, sizeof(ar), 0);
    raw_cu("raw_cu_array_create_channels", &q, cuda, VCU_S_OK, 1);
    ar.channels = 4;
    ar.width = ar.height = ar.depth = VCU_CU_ARRAY_MAX_DIM;
    raw_begin(&q, VCU_OP_CU_ARRAY_CREATE, sess, &ar, sizeof(ar), 0);
    raw_cu("raw_cu_array_create_all_max", &q, cuda, VCU_S_OK, 2 /* OUT_OF_MEMORY */);

    memset(&u, 0, sizeof(u));
    u.value = 0x1234567890ull;
    raw_begin(&q, VCU_OP_CU_ARRAY_DESTROY, sess, &u, sizeof(u), 0);
    raw_cu("raw_cu_array_destroy_forged", &q, cuda, VCU_S_OK, 400 /* INVALID_HANDLE */);
    raw_begin(&q, VCU_OP_CU_ARRAY_DESTROY, sess, &u, 8, 0);
    raw_cu("raw_cu_array_destroy_truncated", &q, cuda, VCU_S_EINVAL, 0);

    memset(&m, 0, sizeof(m));
    m.src.type = 3;                 /* CU_MEMORYTYPE_ARRAY, a forged handle */
    m.src.ptr = 0x1234567890ull;
    m.dst.type = 3;
    m.dst.ptr = 0x1234567891ull;
    m.width = m.height = m.depth = 1;
    raw_begin(&q, VCU_OP_CU_MEMCPY_3D, sess, &m, sizeof(m), 0);
    raw_cu("raw_cu_memcpy3d_forged_array", &q, cuda, VCU_S_OK, 400);
    m.src.type = 2;                 /* device memory to host, with no segment */
    m.src.ptr = 0x100000;
    m.dst.type = 1;
    m.dst.ptr = 0;
    m.dst.pitch = 1;
    raw_begin(&q, VCU_OP_CU_MEMCPY_3D, sess, &m, sizeof(m), 0);
    raw_cu("raw_cu_memcpy3d_host_no_segment", &q, cuda, VCU_S_EINVAL, 0);
    raw_begin(&q, VCU_OP_CU_MEMCPY_3D, sess, &m, 100, 0);
    raw_cu("raw_cu_memcpy3d_truncated", &q, cuda, VCU_S_EINVAL, 0);

    memset(&tq, 0, sizeof(tq));
    tq.res.type = 0;                /* CU_RESOURCE_TYPE_ARRAY, a forged handle */
    tq.res.handle = 0x1234567890ull;
    raw_begin(&q, VCU_OP_CU_TEXOBJ_CREATE, sess, &tq, sizeof(tq), 0);
    raw_cu("raw_cu_texobj_forged_array", &q, cuda, VCU_S_OK, 400);
    tq.res.type = 2;                /* LINEAR, at memory never allocated */
    tq.res.handle = 0;
    tq.res.ptr = 0x7f0000000000ull;
    tq.res.size = 1ull << 40;
    tq.res.format = 0x20;
    tq.res.channels = 1;
    raw_begin(&q, VCU_OP_CU_TEXOBJ_CREATE, sess, &tq, sizeof(tq), 0);
    raw_cu("raw_cu_texobj_linear_forged", &q, cuda, VCU_S_OK, 1);
    raw_begin(&q, VCU_OP_CU_TEXOBJ_CREATE, sess, &tq, 64, 0);
    raw_cu("raw_cu_texobj_truncated", &q, cuda, VCU_S_EINVAL, 0);

    memset(&pq, 0, sizeof(pq));
    pq.a = 0x51;                    /* an object never made */
    raw_begin(&q, VCU_OP_CU_TEXOBJ_DESTROY, sess, &pq, sizeof(pq), 0);
    raw_cu("raw_cu_texobj_destroy_forged", &q, cuda, VCU_S_OK, 1);
    pq.b = 1;
    raw_begin(&q, VCU_OP_CU_TEXOBJ_GET, sess, &pq, sizeof(pq), 0);
    raw_cu("raw_cu_surfobj_get_forged", &q, cuda, VCU_S_OK, 1);
    pq.b = 7;
    raw_begin(&q, VCU_OP_CU_TEXOBJ_GET, sess, &pq, sizeof(pq), 0);
    raw_cu("raw_cu_texobj_get_bad_kind", &q, cuda, VCU_S_EINVAL, 0);

    {
        struct vcu_cu_mipmap_req mr;

        memset(&mr, 0, sizeof(mr));
        mr.a.width = mr.a.height = 64;
        mr.a.format = 0x20;
        mr.a.channels = 1;
        mr.levels = 40;             /* more than 64 halves */
        raw_begin(&q, VCU_OP_CU_MIPMAP_CREATE, sess, &mr, sizeof(mr), 0);
        raw_cu("raw_cu_mipmap_too_many_levels", &q, cuda, VCU_S_OK, 1);
        raw_begin(&q, VCU_OP_CU_MIPMAP_CREATE, sess, &mr, 48, 0);
        raw_cu("raw_cu_mipmap_truncated", &q, cuda, VCU_S_EINVAL, 0);
        memset(&pq, 0, sizeof(pq));
        pq.a = 0x1234567890ull;
        raw_begin(&q, VCU_OP_CU_MIPMAP_LEVEL, sess, &pq, sizeof(pq), 0);
        raw_cu("raw_cu_mipmap_level_forged", &q, cuda, VCU_S_OK, 400);
        raw_begin(&q, VCU_OP_CU_MIPMAP_DESTROY, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_mipmap_destroy_forged", &q, cuda, VCU_S_OK, 400);
    }
    {
        /* Pools the guest makes, and device pointers to host memory at an
         * address the guest names: forged properties, handles, missing
         * segments and short payloads. */
        struct vcu_cu_pool_create_req pc;

        memset(&pc, 0, sizeof(pc));
        pc.alloc_type = 1;          /* CU_MEM_ALLOCATION_TYPE_PINNED */
        raw_begin(&q, VCU_OP_CU_MEMPOOL_CREATE, sess, &pc, 16, 0);
        raw_cu("raw_cu_pool_create_truncated", &q, cuda, VCU_S_EINVAL, 0);
        pc.handle_types = 2;        /* Win32 handles: not offered (POSIX descriptors are) */
        raw_begin(&q, VCU_OP_CU_MEMPOOL_CREATE, sess, &pc, sizeof(pc), 0);
        raw_cu("raw_cu_pool_create_win32", &q, cuda, VCU_S_OK, 801 /* NOT_SUPPORTED */);
        pc.handle_types = 3;
        raw_begin(&q, VCU_OP_CU_MEMPOOL_CREATE, sess, &pc, sizeof(pc), 0);
        raw_cu("raw_cu_pool_create_two_types", &q, cuda, VCU_S_OK, 801);
        pc.handle_types = 0;
        pc.reserved = 1;
        raw_begin(&q, VCU_OP_CU_MEMPOOL_CREATE, sess, &pc, sizeof(pc), 0);
        raw_cu("raw_cu_pool_create_reserved", &q, cuda, VCU_S_OK, 1);
        pc.reserved = 0;
        pc.alloc_type = 2;          /* not pinned */
        raw_begin(&q, VCU_OP_CU_MEMPOOL_CREATE, sess, &pc, sizeof(pc), 0);
        raw_cu("raw_cu_pool_create_type", &q, cuda, VCU_S_OK, 801);
        memset(&u, 0, sizeof(u));
        u.value = 0x1234567890ull;
        raw_begin(&q, VCU_OP_CU_MEMPOOL_DESTROY, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_pool_destroy_forged", &q, cuda, VCU_S_OK, 400);
        raw_begin(&q, VCU_OP_CU_MEMPOOL_DESTROY, sess, &u, 8, 0);
        raw_cu("raw_cu_pool_destroy_truncated", &q, cuda, VCU_S_EINVAL, 0);
        {
            /* A peer's access to a pool: a pool this session does not
             * have (another process's or VM's handle is one), a device
             * the VM does not have, flags cuda.h does not define, the
             * reserved field, a short payload. */
            struct vcu_cu_attr_req aq;

            memset(&aq, 0, sizeof(aq));
            aq.handle = 0x1234567890ull;
            aq.value = 3;           /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
            raw_begin(&q, VCU_OP_CU_MEMPOOL_SET_ACCESS, sess, &aq, sizeof(aq), 0);
            raw_cu("raw_cu_pool_access_forged", &q, cuda, VCU_S_OK, 400);
            aq.attr = 99;
            raw_begin(&q, VCU_OP_CU_MEMPOOL_SET_ACCESS, sess, &aq, sizeof(aq), 0);
            raw_cu("raw_cu_pool_access_no_device", &q, cuda, VCU_S_OK, 1);
            aq.attr = 0;
            aq.value = 2;
            raw_begin(&q, VCU_OP_CU_MEMPOOL_SET_ACCESS, sess, &aq, sizeof(aq), 0);
            raw_cu("raw_cu_pool_access_flags", &q, cuda, VCU_S_OK, 1);
            aq.value = 3;
            aq.reserved = 1;
            raw_begin(&q, VCU_OP_CU_MEMPOOL_SET_ACCESS, sess, &aq, sizeof(aq), 0);
            raw_cu("raw_cu_pool_access_reserved", &q, cuda, VCU_S_OK, 1);
            raw_begin(&q, VCU_OP_CU_MEMPOOL_SET_ACCESS, sess, &aq, 24, 0);
            raw_cu("raw_cu_pool_access_truncated", &q, cuda, VCU_S_EINVAL, 0);
        }
        {
            /* NVLinks of a device the VM does not have; a short payload.
             * Of device 0 the answer is whole and names only the VM's
             * own GPUs. */
            struct vcu_cu_nvlink_info_resp nr;
            struct vcu_cu_hdr nh;
            int st, ok = 1;

            memset(&nh, 0, sizeof(nh));
            nh.device = 99;
            raw_begin(&q, VCU_OP_CU_NVLINK_INFO, sess, &nh, sizeof(nh), 0);
            memset(&nr, 0xee, sizeof(nr));
            st = raw_send(&q, &nr, sizeof(nr));
            if (cuda && (st != VCU_S_OK || nr.r.result != 101))
                vt_fail("raw_cu_nvlink_no_device", "got %s, CUresult %u", stname(st),
                        nr.r.result);
            else
                vt_pass("raw_cu_nvlink_no_device");
            raw_begin(&q, VCU_OP_CU_NVLINK_INFO, sess, &nh, 4, 0);
            raw_cu("raw_cu_nvlink_truncated", &q, cuda, VCU_S_EINVAL, 0);
            nh.device = 0;
            raw_begin(&q, VCU_OP_CU_NVLINK_INFO, sess, &nh, sizeof(nh), 0);
            memset(&nr, 0xee, sizeof(nr));
            st = raw_send(&q, &nr, sizeof(nr));
            for (int l = 0; l < VCU_NVLINK_MAX; l++)
                ok &= nr.links[l].remote <= VCU_NVLINK_SWITCH && nr.links[l].reserved == 0 &&
                      (nr.links[l].remote == VCU_NVLINK_GPU || nr.links[l].remote_dev == 0);
            if (cuda && (st != VCU_S_OK || nr.r.result != 0 || nr.known > 1 || !ok))
                vt_fail("raw_cu_nvlink_dev0", "got %s, CUresult %u, known %u", stname(st),
                        nr.r.result, nr.known);
            else
                vt_pass("raw_cu_nvlink_dev0");
        }
        {
            /* A context's memory freed by number: 0 (the primary's) and
             * numbers past 32 bits are refused, as is a short payload; a
             * device the VM lacks is the driver's error; a number that
             * made nothing frees nothing. */
            struct vcu_cu_u64_req dq;
            struct vcu_cu_u64_resp dr;
            int st;

            memset(&dq, 0, sizeof(dq));
            raw_begin(&q, VCU_OP_CU_CTX_DESTROY, sess, &dq, sizeof(dq), 0);
            raw_cu("raw_cu_ctx_destroy_zero", &q, cuda, VCU_S_EINVAL, 0);
            dq.value = 1ull << 32;
            raw_begin(&q, VCU_OP_CU_CTX_DESTROY, sess, &dq, sizeof(dq), 0);
            raw_cu("raw_cu_ctx_destroy_wide", &q, cuda, VCU_S_EINVAL, 0);
            dq.value = 5;
            raw_begin(&q, VCU_OP_CU_CTX_DESTROY, sess, &dq, 8, 0);
            raw_cu("raw_cu_ctx_destroy_truncated", &q, cuda, VCU_S_EINVAL, 0);
            dq.hdr.device = 99;
            raw_begin(&q, VCU_OP_CU_CTX_DESTROY, sess, &dq, sizeof(dq), 0);
            raw_cu("raw_cu_ctx_destroy_no_device", &q, cuda, VCU_S_OK, 101);
            dq.hdr.device = 0;
            dq.value = 12345;
            raw_begin(&q, VCU_OP_CU_CTX_DESTROY, sess, &dq, sizeof(dq), 0);
            memset(&dr, 0xee, sizeof(dr));
            st = raw_send(&q, &dr, sizeof(dr));
            if (cuda && (st != VCU_S_OK || dr.r.result != 0 || dr.value != 0))
                vt_fail("raw_cu_ctx_destroy_unknown", "got %s, CUresult %u, freed %llu",
                        stname(st), dr.r.result, (unsigned long long)dr.value);
            else
                vt_pass("raw_cu_ctx_destroy_unknown");
        }
        u.value = 0x4a0000000000ull;
        raw_begin(&q, VCU_OP_CU_HOST_DEVICE_POINTER_AT, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_host_ptr_at_no_segment", &q, cuda, VCU_S_EINVAL, 0);
        raw_begin(&q, VCU_OP_CU_HOST_DEVICE_POINTER_AT, sess, &u, 8, 0);
        raw_cu("raw_cu_host_ptr_at_truncated", &q, cuda, VCU_S_EINVAL, 0);
    }
    {
        /* A module global's managed-memory answer: a forged module, a name
         * longer than the payload, a truncated header. */
        struct {
            struct vcu_cu_name_req r;
            char name[8];
        } gq;

        memset(&gq, 0, sizeof(gq));
        gq.r.module = 0x1234567890ull;
        gq.r.name_len = 3;
        memcpy(gq.name, "abc", 3);
        raw_begin(&q, VCU_OP_CU_MODULE_GLOBAL_INFO, sess, &gq, sizeof(gq.r) + 3, 0);
        raw_cu("raw_cu_global_info_forged", &q, cuda, VCU_S_OK, 400);
        gq.r.name_len = 64;
        raw_begin(&q, VCU_OP_CU_MODULE_GLOBAL_INFO, sess, &gq, sizeof(gq.r) + 3, 0);
        raw_cu("raw_cu_global_info_long_name", &q, cuda, VCU_S_EINVAL, 0);
        raw_begin(&q, VCU_OP_CU_MODULE_GLOBAL_INFO, sess, &gq, sizeof(gq.r) - 8, 0);
        raw_cu("raw_cu_global_info_truncated", &q, cuda, VCU_S_EINVAL, 0);
    }
    {
        /* CUDA IPC: a forged handle of each kind (a record no worker of
         * this VM wrote), one naming a path, a forged pointer and event to
         * export or close, a truncated request. */
        struct vcu_cu_ipc_open_req oq;
        struct vcu_cu_u64_req u;

        memset(&oq, 0, sizeof(oq));
        oq.h.magic = VCU_CU_IPC_MAGIC;
        oq.h.kind = VCU_CU_IPC_MEM;
        oq.h.pid = 2;
        memset(oq.h.token, 0xa5, sizeof(oq.h.token));
        raw_begin(&q, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, sess, &oq, sizeof(oq), 0);
        raw_cu("raw_cu_ipc_open_mem_forged", &q, cuda, VCU_S_OK, 1);
        oq.h.kind = VCU_CU_IPC_EVENT;
        raw_begin(&q, VCU_OP_CU_IPC_OPEN_EVENT_HANDLE, sess, &oq, sizeof(oq), 0);
        raw_cu("raw_cu_ipc_open_event_forged", &q, cuda, VCU_S_OK, 1);
        memcpy(oq.h.token, "../../../etc/pa", 16);
        raw_begin(&q, VCU_OP_CU_IPC_OPEN_EVENT_HANDLE, sess, &oq, sizeof(oq), 0);
        raw_cu("raw_cu_ipc_open_path", &q, cuda, VCU_S_OK, 1);
        raw_begin(&q, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, sess, &oq, sizeof(oq) - 16, 0);
        raw_cu("raw_cu_ipc_open_truncated", &q, cuda, VCU_S_EINVAL, 0);
        memset(&u, 0, sizeof(u));
        u.value = 0x7f0000001000ull;
        raw_begin(&q, VCU_OP_CU_IPC_GET_MEM_HANDLE, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_ipc_get_mem_forged", &q, cuda, VCU_S_OK, 1);
        raw_begin(&q, VCU_OP_CU_IPC_CLOSE_MEM_HANDLE, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_ipc_close_forged", &q, cuda, VCU_S_OK, 1);
        u.value = 0x1234567890ull;
        raw_begin(&q, VCU_OP_CU_IPC_GET_EVENT_HANDLE, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_ipc_get_event_forged", &q, cuda, VCU_S_OK, 400);

        /* Shareable handles: a name the daemon's keep never gave (for
         * this VM or any), one with a pid or the path's bytes, an export
         * of no allocation, a truncated request. */
        memset(&oq, 0, sizeof(oq));
        oq.h.magic = VCU_CU_IPC_MAGIC;
        oq.h.kind = VCU_CU_IPC_VMM;
        memset(oq.h.token, 0x5a, sizeof(oq.h.token));
        raw_begin(&q, VCU_OP_CU_MEM_IMPORT_SHAREABLE, sess, &oq, sizeof(oq), 0);
        raw_cu("raw_cu_share_import_forged", &q, cuda, VCU_S_OK, 1);
        memcpy(oq.h.token, "../../../etc/pa", 16);
        raw_begin(&q, VCU_OP_CU_MEM_IMPORT_SHAREABLE, sess, &oq, sizeof(oq), 0);
        raw_cu("raw_cu_share_import_path", &q, cuda, VCU_S_OK, 1);
        oq.h.pid = 2;
        raw_begin(&q, VCU_OP_CU_MEM_IMPORT_SHAREABLE, sess, &oq, sizeof(oq), 0);
        raw_cu("raw_cu_share_import_pid", &q, cuda, VCU_S_OK, 1);
        raw_begin(&q, VCU_OP_CU_MEM_IMPORT_SHAREABLE, sess, &oq, sizeof(oq) - 8, 0);
        raw_cu("raw_cu_share_import_truncated", &q, cuda, VCU_S_EINVAL, 0);
        u.value = 0x1234567890ull;
        raw_begin(&q, VCU_OP_CU_MEM_EXPORT_SHAREABLE, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_share_export_forged", &q, cuda, VCU_S_OK, 1);
        /* Pools: a forged pool name, a pool or a block never exported
         * (no such handle or block: INVALID_VALUE), a block imported
         * into a pool that is none. */
        memset(&oq, 0, sizeof(oq));
        oq.h.magic = VCU_CU_IPC_MAGIC;
        oq.h.kind = VCU_CU_IPC_POOL;
        memset(oq.h.token, 0x3c, sizeof(oq.h.token));
        raw_begin(&q, VCU_OP_CU_MEMPOOL_IMPORT_SHAREABLE, sess, &oq, sizeof(oq), 0);
        raw_cu("raw_cu_share_pool_import_forged", &q, cuda, VCU_S_OK, 1);
        raw_begin(&q, VCU_OP_CU_MEMPOOL_EXPORT_SHAREABLE, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_share_pool_export_forged", &q, cuda, VCU_S_OK, 400);
        raw_begin(&q, VCU_OP_CU_MEMPOOL_EXPORT_POINTER, sess, &u, sizeof(u), 0);
        raw_cu("raw_cu_share_pool_ptr_export_forged", &q, cuda, VCU_S_OK, 1);
        {
            struct vcu_cu_pool_ptr_req pq;

            memset(&pq, 0, sizeof(pq));
            pq.pool = 0x4242;
            pq.h.magic = VCU_CU_IPC_MAGIC;
            pq.h.kind = VCU_CU_IPC_POOL_PTR;
            pq.h.pid = 2;
            raw_begin(&q, VCU_OP_CU_MEMPOOL_IMPORT_POINTER, sess, &pq, sizeof(pq), 0);
            raw_cu("raw_cu_share_pool_ptr_import_forged", &q, cuda, VCU_S_OK, 400);
            raw_begin(&q, VCU_OP_CU_MEMPOOL_IMPORT_POINTER, sess, &pq, sizeof(pq) - 4, 0);
            raw_cu("raw_cu_share_pool_ptr_import_truncated", &q, cuda, VCU_S_EINVAL, 0);
        }
    }

    raw_begin(&q, VCU_OP_ECHO, sess, &er0, sizeof(er0), 0);
    EXPECT_ST("raw_cu_session_still_works", raw_send(&q, NULL, 0), VCU_S_OK);
    raw_begin(&q, VCU_OP_SESSION_CLOSE, sess, NULL, 0, 0);
    EXPECT_ST("raw_cu_session_close", raw_send(&q, NULL, 0), VCU_S_OK);
    close(raw_fd);
}

static void test_raw_refused_without_session(void)
{
    struct vcuda_raw_submit rs;
    unsigned char b[64];
    int fd = open_dev();

    if (fd < 0)
        return;
    memset(&rs, 0, sizeof(rs));
    rs.req_addr = (uintptr_t)b;
    rs.req_len = sizeof(b);
    rs.resp_addr = (uintptr_t)b;
    rs.resp_cap = sizeof(b);
    rs.reserved[0] = 1;
    EXPECT("raw_reserved", xioctl(fd, VCUDA_IOC_RAW_SUBMIT, &rs), -EINVAL, -ENOTCONN);
    close(fd);
}

/* ---- VCUDA_IOC_HOST_REGISTER -------------------------------------------- */

static int host_reg(int fd, unsigned long cmd, uint64_t addr, uint64_t len, uint64_t reserved)
{
    struct vcuda_host_register r = { .addr = addr, .len = len, .reserved = { reserved, 0 } };

    return xioctl(fd, cmd, &r);
}

/* Waits until pinned_pages is want (or 3 s): 0, or -1 with *last. */
static int wait_pinned(uint64_t want, uint64_t *last)
{
    for (int i = 0; i < 300; i++) {
        if (vt_sysfs_u64("pinned_pages", last) == 0 && *last == want)
            return 0;
        vt_sleep_ms(10);
    }
    return -1;
}

static void test_host_register(void)
{
    const size_t len = 64 * 1024;
    unsigned char *buf, *ro, *gone, *hm;
    struct vcuda_seg seg;
    struct vcuda_submit s;
    struct vcu_echo_resp er;
    uint64_t base = 0, v;
    int fd = open_dev(), fd2, err;

    if (fd < 0) {
        vt_fail("hostreg_open", "cannot open " VT_DEV);
        return;
    }
    buf = vt_alloc(len);
    EXPECT("hostreg_no_session", host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)buf, len, 0),
           -ENOTCONN);
    close(fd);
    fd = open_session();
    if (fd < 0) {
        vt_fail("hostreg_session", "no session");
        vt_free(buf, len);
        return;
    }
    vt_sysfs_u64("pinned_pages", &base);
    EXPECT("hostreg_reserved", host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)buf, len, 1),
           -EINVAL);
    EXPECT("hostreg_len_zero", host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)buf, 0, 0),
           -EINVAL);
    EXPECT("hostreg_wraps", host_reg(fd, VCUDA_IOC_HOST_REGISTER, ~0ull - 100, 4096, 0), -EINVAL);
    EXPECT("hostreg_kernel_address",
           host_reg(fd, VCUDA_IOC_HOST_REGISTER, 0xffff888000000000ull, 4096, 0), -EFAULT);
    EXPECT("hostreg_too_big", host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)buf, 1ull << 40, 0),
           -ENOMEM, -EFAULT);
    gone = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(gone, len);
    EXPECT("hostreg_unmapped", host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)gone, len, 0),
           -EFAULT);
    ro = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT("hostreg_read_only", host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)ro, len, 0),
           -EFAULT);
    munmap(ro, len);
    hm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (hm != MAP_FAILED) {
        EXPECT("hostreg_driver_memory",
               host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)hm, len, 0), -EFAULT);
        munmap(hm, len);
    }
    if (wait_pinned(base, &v) != 0)
        vt_fail("hostreg_failures_unpinned", "pinned_pages %llu, want %llu",
                (unsigned long long)v, (unsigned long long)base);
    else
        vt_pass("hostreg_failures_unpinned");

    /* A registration: its pages stay pinned, overlaps and unknown ranges
     * are refused, a segment inside it travels, and it ends when asked. */
    err = host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)buf + 100, len - 200, 0);
    if (err)
        vt_fail("hostreg_register", "-> %s", errname(err));
    else
        vt_pass("hostreg_register");
    if (wait_pinned(base + len / 4096, &v) != 0)
        vt_fail("hostreg_pinned", "pinned_pages %llu, want %llu", (unsigned long long)v,
                (unsigned long long)(base + len / 4096));
    else
        vt_pass("hostreg_pinned");
    EXPECT("hostreg_overlap", host_reg(fd, VCUDA_IOC_HOST_REGISTER, (uintptr_t)buf + 4096, 8192, 0),
           -EEXIST);
    EXPECT("hostreg_unregister_unknown",
           host_reg(fd, VCUDA_IOC_HOST_UNREGISTER, (uintptr_t)gone, 0, 0), -ENOENT);
    vt_pattern(buf, len, 9);
    seg = (struct vcuda_seg){ (uintptr_t)buf + 4096, 8192, VCUDA_SEG_TO_DEVICE, 0 };
    mk_submit(&s, &seg, 1);
    err = xioctl(fd, VCUDA_IOC_SUBMIT, &s);
    memcpy(&er, resp_buf, sizeof(er));
    if (err || s.status != VCU_S_OK || er.in_bytes != 8192 ||
        er.in_hash != vt_fnv(VCU_FNV64_INIT, buf + 4096, 8192))
        vt_fail("hostreg_echo_inside", "-> %s status %u in_bytes %llu", errname(err), s.status,
                (unsigned long long)er.in_bytes);
    else
        vt_pass("hostreg_echo_inside");
    err = host_reg(fd, VCUDA_IOC_HOST_UNREGISTER, (uintptr_t)buf + 5000, 0, 0);
    if (err)
        vt_fail("hostreg_unregister", "-> %s", errname(err));
    else
        vt_pass("hostreg_unregister");
    if (wait_pinned(base, &v) != 0)
        vt_fail("hostreg_unpinned_after_unregister", "pinned_pages %llu", (unsigned long long)v);
    else
        vt_pass("hostreg_unpinned_after_unregister");

    /* Registered, then the file closed without unregistering. */
    fd2 = open_session();
    if (fd2 < 0 || host_reg(fd2, VCUDA_IOC_HOST_REGISTER, (uintptr_t)buf, len, 0) != 0) {
        vt_fail("hostreg_close", "no session or registration");
    } else {
        close(fd2);
        if (wait_pinned(base, &v) != 0)
            vt_fail("hostreg_close", "pinned_pages %llu after close", (unsigned long long)v);
        else
            vt_pass("hostreg_close");
    }
    close(fd);
    vt_free(buf, len);
}

static void test_final_state(void)
{
    uint64_t v;
    int fd;
    reason_t r;

    fd = open_session();
    if (fd < 0 || echo_ok(fd, &r))
        vt_fail("final_echo", "%s", fd < 0 ? "no session" : r.why);
    else
        vt_pass("final_echo");
    if (fd >= 0)
        close(fd);
    if (vt_wait_zero("inflight", 3000, &v) != 0)
        vt_fail("sysfs_zero", "inflight = %llu", (unsigned long long)v);
    else if (vt_wait_zero("pinned_pages", 3000, &v) != 0)
        vt_fail("sysfs_zero", "pinned_pages = %llu", (unsigned long long)v);
    else
        vt_pass("sysfs_zero");
}

int main(void)
{
    uint64_t t0 = vt_now_us();

    vt_suite = "badinput";
    setvbuf(stdout, NULL, _IONBF, 0);
    test_abi();
    test_memory();
    test_raw_refused_without_session();
    test_raw();
    test_raw_arrays();
    test_eintr();
    test_kill();
    test_host_register();
    test_final_state();
    vt_info("badinput: %u passed, %u failed in %llu ms", vt_npass(), vt_nfail(),
            (unsigned long long)(vt_now_us() - t0) / 1000);
    return vt_nfail() ? 1 : 0;
}
