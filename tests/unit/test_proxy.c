/*
 * The session proxy's shared-memory rings (host-backend/common/vcu_ring.h,
 * qemu-device/proxy*.c, host-backend/worker/worker.c): the ring itself on
 * plain memory, then vcu_proxy with the real daemon and worker
 * (VCU_TEST_DAEMON, VCU_TEST_WORKER, built with the backend under the
 * sanitizers; the workers jailed as in production):
 * wrap-around, a full ring falling back to the sender thread, requests too
 * large for the ring, a worker killed while the reader spins or sleeps,
 * and a worker that breaks the reply ring.
 */
#define _GNU_SOURCE                 /* memfd_create */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ut.h"
#include "ut_daemon.h"
#include "vcu_proxy.h"
#include "vcu_ring.h"

/* ---- the ring alone ------------------------------------------------------ */

typedef struct {
    struct vcu_ipc_ring_ctl ctl;
    unsigned char data[4096];
} ring_mem_t;

static void ring_pair(ring_mem_t *m, vcu__ring_t *prod, vcu__ring_t *cons)
{
    memset(m, 0, sizeof(*m));
    vcu__ring_init(prod, &m->ctl, m->data, sizeof(m->data), -1);
    vcu__ring_init(cons, &m->ctl, m->data, sizeof(m->data), -1);
}

/* Frames of every size up to 700 bytes, many times round the ring, the
 * ring filled to FULL on the way: each comes out as it went in. */
TEST(ring_wrap_full)
{
    static ring_mem_t m;
    vcu__ring_t p, c;
    unsigned char in[700], out[700];
    struct vcu_ipc_hdr h, g;
    uint64_t sent = 0, got = 0;
    int fulls = 0;

    ring_pair(&m, &p, &c);
    while (got < 3000) {
        int rc;

        h.type = VCU_IPC_REQ;
        h.len = (uint32_t)(sent * 37 % sizeof(in));
        h.tag = sent;
        memset(in, (int)(sent & 0xff), h.len);
        rc = vcu__ring_put(&p, &h, in);
        ASSERT_NE(VCU__RING_BROKEN, rc);
        if (rc > 0) {
            sent++;
            if (sent % 12 != 0)
                continue;           /* let it fill */
        } else {
            fulls++;
        }
        while ((rc = vcu__ring_get(&c, &g, out, sizeof(out), sizeof(out))) > 0) {
            unsigned int i;

            ASSERT_EQ_U64(got, g.tag);
            ASSERT_EQ(got * 37 % sizeof(in), g.len);
            for (i = 0; i < g.len; i++)
                ASSERT_EQ((int)(got & 0xff), out[i]);
            got++;
        }
        ASSERT_EQ(VCU__RING_EMPTY, rc);
    }
    ASSERT_GT(fulls, 0);
    ASSERT_GT(p.pos, 100 * sizeof(m.data));
    return 0;
}

/* What the peer wrote is checked: a tail or head past the ring, a frame
 * longer than what was published or than allowed. */
TEST(ring_corrupt_index)
{
    static ring_mem_t m;
    vcu__ring_t p, c;
    unsigned char buf[256] = { 0 };
    struct vcu_ipc_hdr h = { .type = VCU_IPC_RESP, .len = 100, .tag = 1 };
    int rc;

    ring_pair(&m, &p, &c);
    m.ctl.tail = sizeof(m.data) + 8;            /* more than the ring */
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_get(&c, &h, buf, sizeof(buf), sizeof(buf)));
    m.ctl.tail = 12;                            /* not 8-aligned */
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_get(&c, &h, buf, sizeof(buf), sizeof(buf)));
    m.ctl.tail = (uint64_t)-8;                  /* behind the consumer */
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_get(&c, &h, buf, sizeof(buf), sizeof(buf)));

    ring_pair(&m, &p, &c);
    ASSERT_EQ(1, vcu__ring_put(&p, &h, buf));
    h.len = 4000;                               /* the frame claims more than published */
    memcpy(m.data, &h, sizeof(h));
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_get(&c, &h, buf, sizeof(buf), 1u << 20));
    ring_pair(&m, &p, &c);
    h.len = 200;
    ASSERT_EQ(1, vcu__ring_put(&p, &h, buf));
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_get(&c, &h, buf, sizeof(buf), 100));  /* over max */
    ASSERT_EQ(c.pos, 0);

    /* The producer reads the head when its last look leaves too little
     * room: what it reads then is checked. */
    ring_pair(&m, &p, &c);
    while ((rc = vcu__ring_put(&p, &h, buf)) > 0)
        ;
    ASSERT_EQ(VCU__RING_FULL, rc);
    m.ctl.head = p.pos + 64;                    /* ahead of the producer */
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_put(&p, &h, buf));
    m.ctl.head = 12;                            /* not 8-aligned */
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_put(&p, &h, buf));
    m.ctl.head = vcu__ring_frame_bytes(h.len);  /* one frame taken: room again */
    ASSERT_EQ(1, vcu__ring_put(&p, &h, buf));
    m.ctl.head = 8;                             /* went back */
    ASSERT_EQ(VCU__RING_BROKEN, vcu__ring_put(&p, &h, buf));
    return 0;
}

/* ---- the proxy with the real worker -------------------------------------- */

#define PX_RAM (16u << 20)

typedef struct {
    vcu_proxy_t *px;
    int ramfd;
    unsigned char *ram;
    uint64_t sid;
} px_env_t;

static int px_env(px_env_t *e, unsigned int ring_bytes, unsigned int spin_us)
{
    vcu_proxy_config_t cfg;
    char err[256];

    memset(e, 0, sizeof(*e));
    e->ramfd = memfd_create("ut-guest-ram", MFD_CLOEXEC);
    ASSERT_GE(e->ramfd, 0);
    ASSERT_EQ(0, ftruncate(e->ramfd, PX_RAM));
    e->ram = mmap(NULL, PX_RAM, PROT_READ | PROT_WRITE, MAP_SHARED, e->ramfd, 0);
    ASSERT_TRUE(e->ram != MAP_FAILED);
    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon(UT_NO_LIBCUDA);      /* ECHO needs no CUDA */
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.ring_bytes = ring_bytes;
    cfg.spin_us = spin_us;
    if (vcu_proxy_new(&cfg, &e->px, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcu_proxy_new: %s\n", err);
        return -1;
    }
    return 0;
}

static void px_env_free(px_env_t *e)
{
    vcu_proxy_free(e->px);
    munmap(e->ram, PX_RAM);
    close(e->ramfd);
}

/* Submits t: its reply buffer as large as the link allows (the worker
 * refuses larger ones, as QEMU never asks for them). */
static void px_submit_to(vcu_proxy_t *px, ut_req_t *t)
{
    t->r.resp_cap = sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD;
    vcu_proxy_submit(px, &t->r);
}

static void px_submit(px_env_t *e, ut_req_t *t)
{
    px_submit_to(e->px, t);
}

/* Runs t through the proxy and waits; its status. */
static uint32_t px_exec_on(vcu_proxy_t *px, ut_req_t *t)
{
    return ut_px_exec(px, t);
}

static uint32_t px_exec(px_env_t *e, ut_req_t *t)
{
    return px_exec_on(e->px, t);
}

static int px_open(px_env_t *e)
{
    ut_req_t *t = ut_req_new();
    struct vcu_session_open_req o;

    memset(&o, 0, sizeof(o));
    o.version_min = o.version_max = VCU_PROTO_VERSION;
    o.features = VCU_FEAT_ECHO;
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &o, sizeof(o));
    ASSERT_EQ(VCU_S_OK, px_exec(e, t));
    e->sid = ((const struct vcu_session_open_resp *)ut_resp_payload(t))->session;
    free(t);
    return 0;
}

/* Gives t's segments their {fd, offset}: they must lie in e->ram, one
 * wire range per iovec. */
static vcu_gref_t px_refs[VCU_MAX_SEGS + 4][UT_MAX_IOV];

static void px_refs_set(px_env_t *e, ut_req_t *t, vcu_gref_t (*refs)[UT_MAX_IOV])
{
    unsigned int i, j;

    for (i = 0; i < t->nsegs; i++) {
        for (j = 0; j < t->segs[i].iovcnt; j++) {
            refs[i][j].fd = e->ramfd;
            refs[i][j].off = (uint64_t)((unsigned char *)t->segs[i].iov[j].iov_base - e->ram);
        }
        t->segs[i].ref = refs[i];
        ut_wseg(t, i)->nranges = t->segs[i].iovcnt;
    }
}

/* An ECHO of n bytes at ram + off (in iovs pieces); checks the hash. */
static int px_echo(px_env_t *e, size_t off, size_t n, unsigned int iovs)
{
    ut_req_t *t = ut_req_new();
    struct iovec v[UT_MAX_IOV];
    unsigned int i;

    ut_fill(e->ram + off, n, (unsigned int)(off + n));
    for (i = 0; i < iovs; i++) {
        v[i].iov_base = e->ram + off + n / iovs * i;
        v[i].iov_len = i + 1 < iovs ? n / iovs : n - n / iovs * i;
    }
    ut_req_add_seg_iov(t, VCU_SEG_TO_DEVICE, v, iovs);
    ut_echo_build(t, e->sid, 1, 0, 0, NULL, 0);
    px_refs_set(e, t, px_refs);
    ASSERT_EQ(VCU_S_OK, px_exec(e, t));
    ASSERT_EQ_U64(n, ((const struct vcu_echo_resp *)ut_resp_payload(t))->in_bytes);
    ASSERT_EQ_U64(ut_fnv(VCU_FNV64_INIT, e->ram + off, n),
                  ((const struct vcu_echo_resp *)ut_resp_payload(t))->in_hash);
    free(t);
    return 0;
}

/* The session's worker (one session open): its host pid, as the daemon
 * told the proxy. */
static pid_t px_worker_pid(px_env_t *e)
{
    return ut_px_worker_pid(e->px);
}

/* A 4 KiB request ring: ECHOs of every shape wrap it many times; a burst
 * of 300 in flight fills it, and what does not fit waits for the sender
 * thread, in order; a request with many ranges is too large for the ring
 * and goes on the socket, in its place. */
TEST(proxy_ring_wrap_full)
{
    static ut_req_t *burst[300];
    px_env_t e;
    unsigned int i;
    double t0;
    pid_t pid;

    CHECK(px_env(&e, 4096, 0));
    CHECK(px_open(&e));
    for (i = 0; i < 200; i++)
        CHECK(px_echo(&e, (i * 4099u) % (PX_RAM / 2), 1 + i * 97u % 8192, 1 + i % UT_MAX_IOV));

    /* The worker stopped: the ring fills and the rest queue, without
     * the submitter waiting for anything. */
    pid = px_worker_pid(&e);
    ASSERT_GT(pid, 0);
    ASSERT_EQ(0, kill(pid, SIGSTOP));
    t0 = ut_now();
    for (i = 0; i < 300; i++) {
        burst[i] = ut_req_new();
        ut_req_add_seg(burst[i], VCU_SEG_TO_DEVICE, e.ram + i * 64, 64);
        ut_fill(e.ram + i * 64, 64, i);
        ut_echo_build(burst[i], e.sid, i, 0, 0, NULL, 0);
        px_refs_set(&e, burst[i], px_refs);
        px_submit(&e, burst[i]);
    }
    ASSERT_LT(ut_now() - t0, 1.0);
    ASSERT_EQ(0, atomic_load(&burst[0]->ndone));
    ASSERT_EQ(0, kill(pid, SIGCONT));
    for (i = 0; i < 300; i++) {
        ASSERT_EQ(0, ut_wait_count(&burst[i]->ndone, 1));
        ASSERT_EQ(VCU_S_OK, ut_status(burst[i]));
        ASSERT_EQ_U64(ut_fnv(VCU_FNV64_INIT, e.ram + i * 64, 64),
                      ((const struct vcu_echo_resp *)ut_resp_payload(burst[i]))->in_hash);
        free(burst[i]);
    }

    /* 8 segments of 8 ranges: 64 ranges, over a quarter of the ring. */
    {
        ut_req_t *t = ut_req_new();
        struct iovec v[UT_MAX_IOV];
        uint64_t hsh = VCU_FNV64_INIT;
        unsigned int s, j;

        for (s = 0; s < 8; s++) {
            for (j = 0; j < UT_MAX_IOV; j++) {
                v[j].iov_base = e.ram + (1u << 20) + (s * UT_MAX_IOV + j) * 8192u;
                v[j].iov_len = 100 + j;
                ut_fill(v[j].iov_base, v[j].iov_len, s * 16 + j);
                hsh = ut_fnv(hsh, v[j].iov_base, v[j].iov_len);
            }
            ut_req_add_seg_iov(t, VCU_SEG_TO_DEVICE, v, UT_MAX_IOV);
        }
        ut_echo_build(t, e.sid, 5, 0, 0, NULL, 0);
        px_refs_set(&e, t, px_refs);
        ASSERT_GT(vcu__ring_frame_bytes(64 * sizeof(struct vcu_ipc_range)), 4096 / 4);
        ASSERT_EQ(VCU_S_OK, px_exec(&e, t));
        ASSERT_EQ_U64(hsh, ((const struct vcu_echo_resp *)ut_resp_payload(t))->in_hash);
        free(t);
    }
    CHECK(px_echo(&e, 12345, 777, 3));         /* and the ring goes on after it */
    px_env_free(&e);
    return 0;
}

/* Whether file (under /proc/PID) has a line starting with key whose rest
 * contains want. */
static int px_proc_has(pid_t pid, const char *file, const char *key, const char *want,
                       const char *after)
{
    char path[64], line[512];
    int found = 0, armed = after == NULL;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        if (!armed) {
            armed = strstr(line, after) != NULL;
            continue;
        }
        if (strncmp(line, key, strlen(key)) == 0 && strstr(line + strlen(key), want) != NULL)
            found = 1;
    }
    fclose(f);
    return found;
}

/*
 * The worker as the daemon starts it, seen from outside: its seccomp
 * filter on and no_new_privs, no core dumps, and the guest RAM it maps
 * (the memfd "ut-guest-ram") marked MADV_DONTDUMP, so that no dump of it
 * could carry the VM's memory.
 */
TEST(proxy_worker_hardened)
{
    px_env_t e;
    pid_t pid;

    CHECK(px_env(&e, 0, 0));
    CHECK(px_open(&e));
    CHECK(px_echo(&e, 4096, 8192, 2));
    pid = px_worker_pid(&e);
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(px_proc_has(pid, "status", "Seccomp:", "2", NULL));
    ASSERT_TRUE(px_proc_has(pid, "status", "NoNewPrivs:", "1", NULL));
    ASSERT_TRUE(px_proc_has(pid, "limits", "Max core file size", " 0 ", NULL));
    /* The VmFlags line of the guest RAM mapping's block. */
    ASSERT_TRUE(px_proc_has(pid, "smaps", "VmFlags:", " dd", "ut-guest-ram"));
    px_env_free(&e);
    return 0;
}

/* Kills the worker while a request is in flight, after wait_ms: the
 * request ends (VCU_S_EIO) soon after, and so does the next one. */
static int px_kill_case(unsigned int spin_us, unsigned int wait_ms)
{
    px_env_t e;
    ut_req_t *t = ut_req_new(), *u = ut_req_new();
    struct timespec ts = { wait_ms / 1000, (long)(wait_ms % 1000) * 1000000L };
    pid_t pid;
    double t0;

    CHECK(px_env(&e, 0, spin_us));
    CHECK(px_open(&e));
    CHECK(px_echo(&e, 0, 100, 1));
    pid = px_worker_pid(&e);
    ASSERT_GT(pid, 0);
    ut_echo_build(t, e.sid, 1, 0, 5000, NULL, 0);    /* 5 s in the worker */
    px_submit(&e, t);
    nanosleep(&ts, NULL);
    t0 = ut_now();
    ASSERT_EQ(0, kill(pid, SIGKILL));
    ASSERT_EQ(0, ut_wait_count(&t->ndone, 1));
    /* Before the 5 s echo could have ended: the kill was seen, after at
     * most the reader's 1 s of spin, with room for a loaded machine. */
    ASSERT_LT(ut_now() - t0, 4.0);
    ASSERT_EQ(VCU_S_EIO, ut_status(t));
    ut_echo_build(u, e.sid, 1, 0, 0, NULL, 0);
    ASSERT_EQ(VCU_S_EIO, px_exec(&e, u));
    free(t);
    free(u);
    px_env_free(&e);
    return 0;
}

/* Right after a reply, the reader spins (1 s of spin configured); later
 * it sleeps in poll(): a killed worker is seen either way. */
TEST(proxy_worker_killed)
{
    CHECK(px_kill_case(1000000, 0));
    CHECK(px_kill_case(0, 300));
    CHECK(px_kill_case(50, 300));
    return 0;
}

/*
 * The submitter polls the reply ring for a synchronous request's reply
 * (spin on): replies are taken by it or by the reader, and every request
 * completes exactly once, with its own reply: a stream of ECHOs, a burst
 * submitted without waiting (each submit takes the earlier ones' replies
 * too), a delayed one the poll gives up on, and the same with no poll.
 */
static int px_poll_case(unsigned int spin_us, const char *poll_us)
{
    static ut_req_t *burst[64];
    px_env_t e;
    ut_req_t *slow = ut_req_new();
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    unsigned int i;

    setenv("VCU_POLL_US", poll_us, 1);
    CHECK(px_env(&e, 0, spin_us));
    unsetenv("VCU_POLL_US");
    CHECK(px_open(&e));
    for (i = 0; i < 300; i++)
        CHECK(px_echo(&e, (i * 4099u) % (PX_RAM / 2), 1 + i * 97u % 4096, 1 + i % UT_MAX_IOV));
    ut_echo_build(slow, e.sid, 7, 0, 20, NULL, 0);  /* 20 ms in the worker */
    px_submit(&e, slow);
    for (i = 0; i < 64; i++) {
        burst[i] = ut_req_new();
        ut_req_add_seg(burst[i], VCU_SEG_TO_DEVICE, e.ram + i * 128, 100);
        ut_fill(e.ram + i * 128, 100, i);
        ut_echo_build(burst[i], e.sid, i, 0, 0, NULL, 0);
        px_refs_set(&e, burst[i], px_refs);
        px_submit(&e, burst[i]);
    }
    for (i = 0; i < 64; i++) {
        ASSERT_EQ(0, ut_wait_count(&burst[i]->ndone, 1));
        ASSERT_EQ(VCU_S_OK, ut_status(burst[i]));
        ASSERT_EQ_U64(ut_fnv(VCU_FNV64_INIT, e.ram + i * 128, 100),
                      ((const struct vcu_echo_resp *)ut_resp_payload(burst[i]))->in_hash);
    }
    ASSERT_EQ(0, ut_wait_count(&slow->ndone, 1));
    ASSERT_EQ(VCU_S_OK, ut_status(slow));
    nanosleep(&ts, NULL);
    ASSERT_EQ(1, atomic_load(&slow->ndone));
    for (i = 0; i < 64; i++) {
        ASSERT_EQ(1, atomic_load(&burst[i]->ndone));
        free(burst[i]);
    }
    CHECK(px_echo(&e, 777, 5000, 3));
    free(slow);
    px_env_free(&e);
    return 0;
}

TEST(proxy_poll)
{
    CHECK(px_poll_case(50, "100"));
    CHECK(px_poll_case(50, "0"));
    return 0;
}

/*
 * While submitters poll, the reader stays off the reply ring until their
 * time is up, and a tight loop of synchronous requests keeps moving that
 * time on: replies that come meanwhile for other requests (here delayed
 * ECHOs, whose polls gave up) must still be taken, by the next poll that
 * meets them or by the reader, while the loop runs; and once it stops,
 * the last ones by the reader.  Every request completes once, with its
 * own reply.
 */
TEST(proxy_poll_window)
{
    static ut_req_t *late[16];
    px_env_t e;
    ut_req_t *t = ut_req_new();
    double t0, loop_end, done_by = 0;
    unsigned int i, n = 0;

    setenv("VCU_POLL_US", "100", 1);
    CHECK(px_env(&e, 0, 50));
    unsetenv("VCU_POLL_US");
    CHECK(px_open(&e));
    t0 = ut_now();
    for (i = 0; i < 16; i++) {
        late[i] = ut_req_new();
        ut_echo_build(late[i], e.sid, i, 0, 1 + i % 4, NULL, 0);    /* 1-4 ms */
        ut_hdr(late[i])->req_id = 1000 + i;
        px_submit(&e, late[i]);
    }
    /* Synchronous ECHOs back to back for 200 ms: each one's poll takes
     * its own reply at once and moves the reader's wait on. */
    do {
        ut_echo_build(t, e.sid, n, 0, 0, NULL, 0);
        ut_hdr(t)->req_id = n;
        ASSERT_EQ(VCU_S_OK, px_exec(&e, t));
        ASSERT_EQ_U64(n, ((const struct vcu_resp_hdr *)t->respbuf)->req_id);
        n++;
        for (i = 0; i < 16 && done_by == 0; i++)
            if (atomic_load(&late[i]->ndone) == 0)
                break;
        if (i == 16 && done_by == 0)
            done_by = ut_now();
    } while (ut_now() - t0 < 0.2);
    loop_end = ut_now();
    ASSERT_GT(n, 10);
    /* The delayed replies came during the loop and were taken in it. */
    ASSERT_TRUE(done_by > 0 && done_by < loop_end);
    for (i = 0; i < 16; i++) {
        ASSERT_EQ(1, atomic_load(&late[i]->ndone));
        ASSERT_EQ(VCU_S_OK, ut_status(late[i]));
        ASSERT_EQ_U64(1000 + i, ((const struct vcu_resp_hdr *)late[i]->respbuf)->req_id);
    }
    /* One more delayed ECHO with no poll after it: the reader's. */
    ut_echo_build(late[0], e.sid, 7, 0, 2, NULL, 0);
    ut_hdr(late[0])->req_id = 77;
    px_submit(&e, late[0]);
    ASSERT_EQ(0, ut_wait_count(&late[0]->ndone, 2));
    ASSERT_EQ(VCU_S_OK, ut_status(late[0]));
    ASSERT_EQ_U64(77, ((const struct vcu_resp_hdr *)late[0]->respbuf)->req_id);
    for (i = 0; i < 16; i++)
        free(late[i]);
    free(t);
    px_env_free(&e);
    return 0;
}

/*
 * Frames of every size class through the proxy and a real worker: built in
 * the session's own frame buffer (up to 24 KiB), right at its edge, and
 * in a heap copy beyond it, on the ring (1 MiB, so up to a quarter of it)
 * with the submitter polling: each ECHO's payload tail comes back whole
 * (at most what a reply can carry back beside the ECHO's own reply).
 */
TEST(proxy_frame_sizes)
{
    static unsigned char tail[VCU_MAX_PAYLOAD];
    static const uint32_t lens[] = { 1, 20000, 24 * 1024 - 120, 24 * 1024 - 80, 24 * 1024,
                                     30000, VCU_MAX_PAYLOAD - sizeof(struct vcu_echo_resp) };
    px_env_t e;
    unsigned int i, k;

    setenv("VCU_POLL_US", "100", 1);
    CHECK(px_env(&e, 0, 50));
    unsetenv("VCU_POLL_US");
    CHECK(px_open(&e));
    ut_fill(tail, sizeof(tail), 3);
    for (k = 0; k < 3; k++)
        for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            ut_req_t *t = ut_req_new();

            ut_echo_build(t, e.sid, 0, 0, 0, tail + i, lens[i]);
            ut_hdr(t)->req_id = 100 * k + i;
            ASSERT_EQ(VCU_S_OK, px_exec(&e, t));
            ASSERT_EQ_U64(100 * k + i, ut_resp(t)->req_id);
            ASSERT_EQ(sizeof(struct vcu_echo_resp) + lens[i], ut_resp(t)->payload_len);
            ASSERT_MEM_EQ(tail + i,
                          (const unsigned char *)ut_resp_payload(t) + sizeof(struct vcu_echo_resp),
                          lens[i]);
            free(t);
        }
    px_env_free(&e);
    return 0;
}

/* The session's shared area as the proxy maps it in this process (the
 * one mapping of the memfd "vcu-ring"): what the worker shares with us. */
static struct vcu_ipc_shm *px_shm(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    struct vcu_ipc_shm *found = NULL;
    char line[512];
    int n = 0;

    if (f == NULL)
        return NULL;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo;

        if (strstr(line, "/memfd:vcu-ring") == NULL || sscanf(line, "%lx-", &lo) != 1)
            continue;
        found = (struct vcu_ipc_shm *)lo;
        n++;
    }
    fclose(f);
    return n == 1 ? found : NULL;
}

static int px_close(px_env_t *e)
{
    ut_req_t *t = ut_req_new();

    ut_req_build(t, VCU_OP_SESSION_CLOSE, e->sid, NULL, 0);
    ASSERT_EQ(VCU_S_OK, px_exec(e, t));
    free(t);
    return 0;
}

/*
 * A worker that breaks a ring: an impossible tail in the reply ring (the
 * reader, spinning, takes it), an impossible head in the request ring
 * (the proxy finds it when it next needs room).  Either way the proxy
 * kills the worker,
 * fails what was pending with VCU_S_EIO, the session stays dead, and a
 * new session works.  The shared area is written from this side, as the
 * worker would.
 */
TEST(proxy_ring_corrupt)
{
    static ut_req_t *burst[64];
    px_env_t e;
    ut_req_t *t = ut_req_new(), *u = ut_req_new();
    struct vcu_ipc_shm *shm;
    unsigned int i;
    pid_t pid;

    /* 3 s of spin: the reader sees the tail without a wake-up. */
    CHECK(px_env(&e, 0, 3000000));
    CHECK(px_open(&e));
    CHECK(px_echo(&e, 0, 100, 1));
    pid = px_worker_pid(&e);
    ASSERT_GT(pid, 0);
    shm = px_shm();
    ASSERT_NOT_NULL(shm);
    ASSERT_EQ_U64(VCU_IPC_SHM_MAGIC, shm->magic);
    ut_echo_build(t, e.sid, 1, 0, 5000, NULL, 0);
    px_submit(&e, t);
    __atomic_store_n(&shm->resp.tail, shm->resp.head + 3ull * VCU_IPC_RESP_RING,
                     __ATOMIC_RELEASE);
    ASSERT_EQ(0, ut_wait_count(&t->ndone, 1));
    ASSERT_EQ(VCU_S_EIO, ut_status(t));
    ut_echo_build(u, e.sid, 1, 0, 0, NULL, 0);
    ASSERT_EQ(VCU_S_EIO, px_exec(&e, u));
    ASSERT_EQ(0, ut_wait_gone(pid));            /* killed and reaped */
    CHECK(px_close(&e));

    CHECK(px_open(&e));                         /* frees the dead one's area */
    CHECK(px_echo(&e, 4096, 5000, 2));
    CHECK(px_close(&e));
    px_env_free(&e);

    /* The proxy reads the request ring's head only when it needs room:
     * a 4 KiB ring, the worker stopped, filled until it looks. */
    CHECK(px_env(&e, 4096, 0));
    CHECK(px_open(&e));
    CHECK(px_echo(&e, 4096, 5000, 2));
    pid = px_worker_pid(&e);
    ASSERT_GT(pid, 0);
    shm = px_shm();
    ASSERT_NOT_NULL(shm);
    ASSERT_EQ(0, kill(pid, SIGSTOP));
    /* Ahead of all the proxy will have written when it looks. */
    __atomic_store_n(&shm->req.head, shm->req.tail + 3 * 4096, __ATOMIC_RELEASE);
    for (i = 0; i < 64; i++) {
        burst[i] = ut_req_new();
        ut_echo_build(burst[i], e.sid, i, 0, 0, NULL, 0);
        px_submit(&e, burst[i]);
    }
    for (i = 0; i < 64; i++) {
        ASSERT_EQ(0, ut_wait_count(&burst[i]->ndone, 1));
        ASSERT_EQ(VCU_S_EIO, ut_status(burst[i]));
        free(burst[i]);
    }
    ASSERT_EQ(0, ut_wait_gone(pid));            /* killed and reaped */
    CHECK(px_close(&e));

    CHECK(px_open(&e));
    CHECK(px_echo(&e, 8192, 3000, 1));
    free(t);
    free(u);
    px_env_free(&e);
    return 0;
}

/*
 * A reply means the guest's pages hold what every earlier request wrote.
 * A large device-to-host copy into pageable memory is staged and
 * scattered on a thread of its own, while the session's thread goes on:
 * the reply of a small request that came after it must still wait for
 * that scatter (the guest library's pipelined copies wait only for their
 * last piece, so an earlier piece still being scattered was data the
 * program read too early).
 */
#define PX_SCAT_BYTES (48u << 20)

TEST(proxy_reply_after_scatter)
{
    vcu_proxy_config_t cfg;
    vcu_proxy_t *px;
    ut_req_t *t = ut_req_new(), *q = ut_req_new();
    struct vcu_session_open_req o;
    struct vcu_cu_mem_alloc_req ar;
    struct vcu_cu_memset_req ms;
    struct vcu_cu_memcpy_req mc;
    struct vcu_cu_hdr h = { 0, 0 };
    vcu_gref_t refs[1][UT_MAX_IOV];
    unsigned char *ram;
    uint64_t sid, dptr;
    char err[256];
    int fd;

    fd = memfd_create("ut-guest-ram-scatter", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, PX_SCAT_BYTES));
    ram = mmap(NULL, PX_SCAT_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_TRUE(ram != MAP_FAILED);
    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon_cuda();
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.gpus = "0";
    if (vcu_proxy_new(&cfg, &px, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcu_proxy_new: %s\n", err);
        return -1;
    }
    if (vcu_proxy_cuda_error(px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(px));
    memset(&o, 0, sizeof(o));
    o.version_min = o.version_max = VCU_PROTO_VERSION;
    o.features = VCU_FEAT_CUDA | VCU_FEAT_ASYNC;
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &o, sizeof(o));
    ASSERT_EQ(VCU_S_OK, px_exec_on(px, t));
    sid = ((const struct vcu_session_open_resp *)ut_resp_payload(t))->session;

    memset(&ar, 0, sizeof(ar));
    ar.size = PX_SCAT_BYTES;
    ut_req_build(t, VCU_OP_CU_MEM_ALLOC, sid, &ar, sizeof(ar));
    ASSERT_EQ(VCU_S_OK, px_exec_on(px, t));
    ASSERT_EQ(0, (int)((const struct vcu_cu_u64_resp *)ut_resp_payload(t))->r.result);
    dptr = ((const struct vcu_cu_u64_resp *)ut_resp_payload(t))->value;

    for (int round = 0; round < 4; round++) {
        unsigned char v = (unsigned char)(0x5a + round);
        size_t bad = 0;

        memset(&ms, 0, sizeof(ms));
        ms.dst = dptr;
        ms.width = PX_SCAT_BYTES;
        ms.height = 1;
        ms.value = v;
        ms.elem_size = 1;
        ut_req_build(t, VCU_OP_CU_MEMSET, sid, &ms, sizeof(ms));
        ASSERT_EQ(VCU_S_OK, px_exec_on(px, t));
        ASSERT_EQ(0, (int)((const struct vcu_cu_resp *)ut_resp_payload(t))->result);
        memset(ram, 0, PX_SCAT_BYTES);

        /* The copy, sent without waiting (a pipelined piece)... */
        free(t);
        t = ut_req_new();
        ut_req_add_seg(t, VCU_SEG_FROM_DEVICE, ram, PX_SCAT_BYTES);
        memset(&mc, 0, sizeof(mc));
        mc.src = dptr;
        mc.size = PX_SCAT_BYTES;
        mc.stream = VCU_CU_STREAM_LEGACY;
        ut_req_build(t, VCU_OP_CU_MEMCPY_DTOH, sid, &mc, sizeof(mc));
        ut_hdr(t)->flags = VCU_REQ_F_ASYNC;
        for (unsigned int j = 0; j < t->segs[0].iovcnt; j++) {
            refs[0][j].fd = fd;
            refs[0][j].off = (uint64_t)((unsigned char *)t->segs[0].iov[j].iov_base - ram);
        }
        t->segs[0].ref = refs[0];
        ut_wseg(t, 0)->nranges = t->segs[0].iovcnt;
        px_submit_to(px, t);
        /* ...then a small request that waits: once it is answered, every
         * byte of the copy is in the guest's pages. */
        ut_req_build(q, VCU_OP_CU_MEM_GET_INFO, sid, &h, sizeof(h));
        ASSERT_EQ(VCU_S_OK, px_exec_on(px, q));
        for (size_t i = 0; i < PX_SCAT_BYTES; i++)
            bad += ram[i] != v;
        if (bad != 0)
            VCU_TEST_FAIL_("round %d: %zu of %u bytes not yet written when a later reply came",
                           round, bad, PX_SCAT_BYTES);
        ASSERT_EQ(0, ut_wait_count(&t->ndone, 1));
        free(t);
        t = ut_req_new();
    }
    vcu_proxy_free(px);
    free(t);
    free(q);
    munmap(ram, PX_SCAT_BYTES);
    close(fd);
    return 0;
}

/* ---- migration between two daemons --------------------------------------- */

/* vector_add's PTX (the stand-in's twin of tests/cuda/vector_add.cu). */
#define PX_VADD "_Z10vector_addPKfS0_Pfi"
#define PX_PTX "//\n.version 8.0\n.target sm_90\n.visible .entry " PX_VADD "()\n{\n}\n"

/* A proxy on a daemon of its own, with a module cache of its own: the
 * two ends of a migration share nothing but the state. */
static int px_mig_env(px_env_t *e)
{
    static char dirs[2][32];
    static unsigned int n;
    const char *l = getenv("VCU_LIBCUDA");
    const char *extra[] = { "--cache-dir", dirs[n % 2], NULL };
    vcu_proxy_config_t cfg;
    char err[256];

    snprintf(dirs[n % 2], sizeof(dirs[0]), "/tmp/vcu-ut-mc-XXXXXX");
    ASSERT_TRUE(mkdtemp(dirs[n % 2]) != NULL);
    n++;
    memset(e, 0, sizeof(*e));
    e->ramfd = memfd_create("ut-guest-ram", MFD_CLOEXEC);
    ASSERT_GE(e->ramfd, 0);
    ASSERT_EQ(0, ftruncate(e->ramfd, PX_RAM));
    e->ram = mmap(NULL, PX_RAM, PROT_READ | PROT_WRITE, MAP_SHARED, e->ramfd, 0);
    ASSERT_TRUE(e->ram != MAP_FAILED);
    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon_with(l != NULL ? l : "libcuda.so.1", extra);
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.gpus = "0";
    if (vcu_proxy_new(&cfg, &e->px, err, sizeof(err)) != 0) {
        fprintf(stderr, "vcu_proxy_new: %s\n", err);
        return -1;
    }
    if (vcu_proxy_cuda_error(e->px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(e->px));
    return 0;
}

/* A CUDA request of e's session, with one segment of n bytes at e->ram +
 * off (n 0: none); the reply payload into resp; the CUresult, or 0x10000
 * + the wire status. */
static uint32_t px_cu(px_env_t *e, uint32_t op, const void *p, uint32_t plen, size_t off, size_t n,
                      uint32_t dir, void *resp, size_t rlen)
{
    ut_req_t *t = ut_req_new();
    uint32_t st, res;

    if (n > 0)
        ut_req_add_seg(t, dir, e->ram + off, n);
    ut_req_build(t, op, e->sid, p, plen);
    if (n > 0)
        px_refs_set(e, t, px_refs);
    st = px_exec(e, t);
    res = st == VCU_S_OK ? ((const struct vcu_cu_resp *)ut_resp_payload(t))->result : 0x10000 + st;
    if (resp != NULL && st == VCU_S_OK)
        memcpy(resp, ut_resp_payload(t), rlen);
    free(t);
    return res;
}

static uint32_t px_cu_alloc(px_env_t *e, uint64_t size, uint64_t *p)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    r = px_cu(e, VCU_OP_CU_MEM_ALLOC, &rq, sizeof(rq), 0, 0, 0, &rp, sizeof(rp));
    *p = rp.value;
    return r;
}

static uint32_t px_cu_copy(px_env_t *e, int htod, uint64_t d, size_t off, size_t n)
{
    struct vcu_cu_memcpy_req rq;

    memset(&rq, 0, sizeof(rq));
    rq.dst = htod ? d : 0;
    rq.src = htod ? 0 : d;
    rq.size = n;
    return px_cu(e, htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, &rq, sizeof(rq), off, n,
                 htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE, NULL, 0);
}

/* out = a + b (N floats), launched and synchronized. */
static uint32_t px_cu_vadd(px_env_t *e, uint64_t fn, uint64_t a, uint64_t b, uint64_t out, int n)
{
    unsigned char p[sizeof(struct vcu_cu_launch_req) + 32];
    struct vcu_cu_launch_req lq;
    struct vcu_cu_u64_req sq = { { 0, 0 }, 0 };
    uint32_t r;

    memset(&lq, 0, sizeof(lq));
    lq.function = fn;
    lq.grid[0] = (uint32_t)(n + 127) / 128;
    lq.grid[1] = lq.grid[2] = 1;
    lq.block[0] = 128;
    lq.block[1] = lq.block[2] = 1;
    lq.param_bytes = 28;
    memcpy(p, &lq, sizeof(lq));
    memcpy(p + sizeof(lq), &a, 8);
    memcpy(p + sizeof(lq) + 8, &b, 8);
    memcpy(p + sizeof(lq) + 16, &out, 8);
    memcpy(p + sizeof(lq) + 24, &n, 4);
    r = px_cu(e, VCU_OP_CU_LAUNCH, p, sizeof(lq) + 28, 0, 0, 0, NULL, 0);
    return r != 0 ? r : px_cu(e, VCU_OP_CU_CTX_SYNCHRONIZE, &sq, sizeof(struct vcu_cu_hdr), 0, 0,
                              0, NULL, 0);
}

/* Waits for a state request; its status, its reason in why. */
static uint32_t px_state_wait(ut_req_t *t, char *why, size_t len)
{
    if (ut_wait_count(&t->ndone, 1) != 0)
        return 0xdeadu;
    snprintf(why, len, "%s", ut_resp(t)->payload_len ? (const char *)ut_resp_payload(t) : "");
    return ut_status(t);
}

/*
 * A guest session migrates between two daemons that share nothing but
 * the state: on the source, memory, a module, a function and a result;
 * the source's proxy has its worker save the session into a file; the
 * destination's proxy opens the session under the guest's id in a new
 * worker of its own daemon, which loads it.  The guest's next requests,
 * with the same id, addresses and handles, find their data and compute
 * right.  A second restore of the same id is refused (its slot is
 * taken), and a save of a session that is not there says so.
 */
TEST(proxy_migrate)
{
    enum { N = 1000 };
    struct vcu_session_open_req o;
    struct vcu_cu_module_load_req lq;
    unsigned char fq[sizeof(struct vcu_cu_name_req) + 32], fr[sizeof(struct vcu_cu_function_resp) + 64];
    struct vcu_cu_name_req nq;
    struct vcu_cu_u64_resp mr;
    struct vcu_session_open_req opens[4];
    uint64_t ids[4], a, b, c, fn;
    px_env_t src, dst;
    ut_req_t *t;
    char why[256];
    float *fa, *fo;
    int fd, i;
    size_t plen = strlen(PX_PTX);

    CHECK(px_mig_env(&src));
    memset(&o, 0, sizeof(o));
    o.version_min = o.version_max = VCU_PROTO_VERSION;
    o.features = VCU_FEAT_CUDA | VCU_FEAT_ASYNC;
    t = ut_req_new();
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &o, sizeof(o));
    ASSERT_EQ(VCU_S_OK, px_exec(&src, t));
    src.sid = ((const struct vcu_session_open_resp *)ut_resp_payload(t))->session;
    free(t);

    ASSERT_EQ(0, (int)px_cu_alloc(&src, N * 4, &a));
    ASSERT_EQ(0, (int)px_cu_alloc(&src, N * 4, &b));
    memcpy(src.ram + (1 << 20), PX_PTX, plen);
    memset(&lq, 0, sizeof(lq));
    lq.image_len = plen;
    ASSERT_EQ(0, (int)px_cu(&src, VCU_OP_CU_MODULE_LOAD, &lq, sizeof(lq), 1 << 20, plen,
                            VCU_SEG_TO_DEVICE, &mr, sizeof(mr)));
    memset(&nq, 0, sizeof(nq));
    nq.module = mr.value;
    nq.name_len = (uint32_t)strlen(PX_VADD);
    memcpy(fq, &nq, sizeof(nq));
    memcpy(fq + sizeof(nq), PX_VADD, nq.name_len);
    ASSERT_EQ(0, (int)px_cu(&src, VCU_OP_CU_MODULE_GET_FUNCTION, fq, sizeof(nq) + nq.name_len, 0,
                            0, 0, fr, sizeof(fr)));
    fn = ((const struct vcu_cu_function_resp *)fr)->function;
    ASSERT_EQ(0, (int)px_cu_alloc(&src, N * 4, &c));
    fa = (float *)src.ram;
    for (i = 0; i < N; i++)
        fa[i] = (float)i;
    ASSERT_EQ(0, (int)px_cu_copy(&src, 1, a, 0, N * 4));
    for (i = 0; i < N; i++)
        fa[i] = 0.5f;
    ASSERT_EQ(0, (int)px_cu_copy(&src, 1, b, 0, N * 4));
    ASSERT_EQ(0, (int)px_cu_vadd(&src, fn, a, b, c, N));

    /* The device would send what vcu_proxy_sessions() lists. */
    ASSERT_EQ(1, vcu_proxy_sessions(src.px, ids, opens, 4));
    ASSERT_EQ_U64(src.sid, ids[0]);
    ASSERT_EQ_U64(VCU_FEAT_CUDA | VCU_FEAT_ASYNC, opens[0].features);
    {
        char path[] = "/tmp/vcu-ut-state-XXXXXX";

        fd = mkstemp(path);
        ASSERT_GE(fd, 0);
        unlink(path);
    }
    t = ut_req_new();
    ut_req_build(t, VCU_BACKEND_OP_SAVE, src.sid + (1ull << 32), NULL, 0);
    vcu_proxy_session_state(src.px, &t->r, fd);
    ASSERT_EQ(VCU_S_ENOSESSION, px_state_wait(t, why, sizeof(why)));
    free(t);
    t = ut_req_new();
    ut_req_build(t, VCU_BACKEND_OP_SAVE, src.sid, NULL, 0);
    t->r.resp_cap = sizeof(struct vcu_resp_hdr) + 256;
    vcu_proxy_session_state(src.px, &t->r, fd);
    if (px_state_wait(t, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("save: %s", why);
    free(t);
    px_env_free(&src);                      /* the source is gone */

    CHECK(px_mig_env(&dst));
    dst.sid = ids[0];
    ASSERT_EQ(0, lseek(fd, 0, SEEK_SET));
    t = ut_req_new();
    ut_req_build(t, VCU_BACKEND_OP_LOAD, dst.sid, NULL, 0);
    t->r.resp_cap = sizeof(struct vcu_resp_hdr) + 256;
    vcu_proxy_session_restore(dst.px, &t->r, &opens[0], fd);
    if (px_state_wait(t, why, sizeof(why)) != VCU_S_OK)
        VCU_TEST_FAIL_("load: %s", why);
    free(t);
    t = ut_req_new();
    ut_req_build(t, VCU_BACKEND_OP_LOAD, dst.sid, NULL, 0);
    vcu_proxy_session_restore(dst.px, &t->r, &opens[0], fd);
    ASSERT_EQ(VCU_S_EBUSY, px_state_wait(t, why, sizeof(why)));
    free(t);

    fo = (float *)dst.ram;
    ASSERT_EQ(0, (int)px_cu_copy(&dst, 0, c, 0, N * 4));
    for (i = 0; i < N; i++)
        ASSERT_TRUE(fo[i] == (float)i + 0.5f);
    for (i = 0; i < N; i++)
        fo[i] = 2.0f;
    ASSERT_EQ(0, (int)px_cu_copy(&dst, 1, b, 0, N * 4));
    ASSERT_EQ(0, (int)px_cu_vadd(&dst, fn, a, b, c, N));
    ASSERT_EQ(0, (int)px_cu_copy(&dst, 0, c, 0, N * 4));
    for (i = 0; i < N; i++)
        ASSERT_TRUE(fo[i] == (float)i + 2.0f);
    px_env_free(&dst);
    close(fd);
    return 0;
}
