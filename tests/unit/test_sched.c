/*
 * Compute share between VMs (host-backend/vcu_sched.h): the scheduler's
 * decisions on a simulated clock, with simulated parties (each a view of
 * one area with a pid of its own) and a simulated GPU that runs one VM at
 * a time; then the area on a file (open's refusals, garbage), then the
 * proxy's checks of its configuration and a session gated through a real
 * worker on the CPU stand-in.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ut.h"
#include "ut_daemon.h"
#include "vcu_proxy.h"
#include "vcu_sched.h"


/* ---- the simulation --------------------------------------------------------- */

#define SIM_TICK_NS (100ull * 1000)
#define SIM_MAX_VMS 4
#define SIM_MAX_W 8

static uint64_t sim_now;
/* Pids 1000 + n are the VMs' QEMUs, 2000 + n the workers; dead ones here. */
static unsigned char sim_dead[4096];

static uint64_t sim_clock(void)
{
    return sim_now;
}

static int sim_alive(uint32_t pid)
{
    return pid != 0 && pid < sizeof(sim_dead) && !sim_dead[pid];
}

typedef struct sim_worker_s {
    vcu_sched_t sc;
    int vm;
    bool wants;                     /* the guest keeps the GPU busy */
    bool hung;                      /* never drains (a stuck kernel) */
    bool lazy;                      /* says it wants the GPU, never issues */
    uint64_t drain_left;            /* ticks its drain still takes */
    bool draining;
} sim_worker_t;

typedef struct sim_s {
    void *area;
    vcu_sched_t proxy[SIM_MAX_VMS];
    sim_worker_t w[SIM_MAX_VMS * SIM_MAX_W];
    unsigned int nvms, nw;
    uint64_t ran[SIM_MAX_VMS];      /* ticks the GPU ran each VM's work */
    uint64_t overlap;               /* ticks two VMs issued in (must stay 0) */
    uint64_t drain_ticks;           /* how long a drain takes */
} sim_t;

static void sim_view(sim_t *s, vcu_sched_t *sc, uint32_t pid)
{
    vcu__sched_view(sc, s->area, pid);
    sc->alive = sim_alive;
    sc->clock = sim_clock;
}

static int sim_init(sim_t *s)
{
    memset(s, 0, sizeof(*s));
    memset(sim_dead, 0, sizeof(sim_dead));
    sim_now = 1000000000ull;
    s->area = aligned_alloc(4096, (VCU_SCHED_LEN + 4095) / 4096 * 4096);
    if (s->area == NULL)
        return -1;
    vcu__sched_format(s->area);
    s->drain_ticks = 2;
    return 0;
}

/* A VM of this weight and cap with n workers, all wanting the GPU. */
static int sim_vm(sim_t *s, uint32_t weight, uint32_t cap, unsigned int n)
{
    unsigned int v = s->nvms++, i;

    sim_view(s, &s->proxy[v], 1000 + v);
    if (vcu__sched_vm_claim(&s->proxy[v], weight, cap, sim_now) != 0)
        return -1;
    for (i = 0; i < n; i++) {
        sim_worker_t *w = &s->w[s->nw];

        sim_view(s, &w->sc, 2000 + s->nw);
        s->nw++;
        w->vm = (int)v;
        w->wants = true;
        if (vcu__sched_attach(&w->sc, (uint32_t)s->proxy[v].vm_slot, 1000 + v, cap) != 0)
            return -1;
    }
    return (int)v;
}

/*
 * One tick of every worker, as the backend's loop runs it: a drain in
 * progress goes on; a revoked grant starts a drain; work that may go is
 * issued (the GPU runs that VM this tick); work that may not asks the
 * group; an idle worker clears want.
 */
static void sim_tick(sim_t *s)
{
    bool ran[SIM_MAX_VMS] = { false };
    unsigned int i, n = 0;

    for (i = 0; i < s->nw; i++) {
        sim_worker_t *w = &s->w[i];

        if (sim_dead[w->sc.pid])
            continue;
        if (w->draining) {
            if (w->hung || --w->drain_left > 0) {
                ran[w->vm] = true;  /* its work still runs */
                continue;
            }
            w->draining = false;
            vcu__sched_drained(&w->sc, sim_now);
            continue;
        }
        if (vcu__sched_must_drain(&w->sc)) {
            w->draining = true;
            w->drain_left = s->drain_ticks;
            ran[w->vm] = true;
            continue;
        }
        if (w->lazy) {
            vcu__sched_set_want(&w->sc, true);
            vcu__sched_step(&w->sc, sim_now);
            continue;
        }
        if (!w->wants) {
            vcu__sched_set_want(&w->sc, false);
            if (w->sc.issued) {
                w->draining = true;
                w->drain_left = s->drain_ticks;
            }
            continue;
        }
        if (vcu__sched_issue(&w->sc))
            ran[w->vm] = true;
        else
            vcu__sched_step(&w->sc, sim_now);
    }
    for (i = 0; i < s->nvms; i++) {
        if (ran[i]) {
            s->ran[i]++;
            n++;
        }
    }
    if (n > 1)
        s->overlap++;
    sim_now += SIM_TICK_NS;
}

static void sim_run(sim_t *s, uint64_t ns)
{
    uint64_t end = sim_now + ns;

    while (sim_now < end)
        sim_tick(s);
}

static void sim_reset_counts(sim_t *s)
{
    memset(s->ran, 0, sizeof(s->ran));
}

/* VM v's share of the GPU's busy ticks, in tenths of a percent. */
static unsigned int sim_share(const sim_t *s, unsigned int v)
{
    uint64_t all = 0;
    unsigned int i;

    for (i = 0; i < s->nvms; i++)
        all += s->ran[i];
    return all ? (unsigned int)(s->ran[v] * 1000 / all) : 0;
}

static void sim_free(sim_t *s)
{
    free(s->area);
}

/* Weights 25/75, both always busy: the GPU's time in that ratio (within
 * 2 %), one VM at a time, and each VM's charged GPU time likewise. */
TEST(sched_weights)
{
    sim_t s;
    uint64_t u0, u1;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 25, 0, 1));
    ASSERT_EQ(1, sim_vm(&s, 75, 0, 1));
    sim_run(&s, 4000000000ull);
    ASSERT_EQ(0, (int)s.overlap);
    ASSERT_GE(sim_share(&s, 0), 230);
    ASSERT_LE(sim_share(&s, 0), 270);
    ASSERT_GE(sim_share(&s, 1), 730);
    ASSERT_LE(sim_share(&s, 1), 770);
    u0 = atomic_load(&s.proxy[0].vm[0].used_ns);
    u1 = atomic_load(&s.proxy[0].vm[1].used_ns);
    ASSERT_GT(u0, 0);
    ASSERT_GE(u1 * 100 / (u0 + u1), 73);
    ASSERT_LE(u1 * 100 / (u0 + u1), 77);
    /* The heavier VM's three slices in a row are one turn (no drain
     * between them): about as many turns as the lighter one's. */
    ASSERT_GT(atomic_load(&s.proxy[0].vm[0].grants), 20);
    ASSERT_LE(atomic_load(&s.proxy[0].vm[1].grants), atomic_load(&s.proxy[0].vm[0].grants) + 2);
    sim_free(&s);
    return 0;
}

/* Three busy sessions in one VM, one in another, equal weights: 50/50 per
 * VM (the driver alone would give 75/25). */
TEST(sched_sessions)
{
    sim_t s;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 3));
    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    sim_run(&s, 4000000000ull);
    ASSERT_EQ(0, (int)s.overlap);
    ASSERT_GE(sim_share(&s, 0), 480);
    ASSERT_LE(sim_share(&s, 0), 520);
    sim_free(&s);
    return 0;
}

/* A VM alone is never switched away from (one grant, no drain, nothing
 * charged to its virtual time); an idle VM is skipped; one that comes
 * back starts from the group's clock, not owed its idle time. */
TEST(sched_idle)
{
    sim_t s;
    uint64_t gen;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    s.w[1].wants = false;
    sim_run(&s, 1000000000ull);
    ASSERT_EQ(1000, sim_share(&s, 0));
    gen = atomic_load(&s.proxy[0].hdr->gen);
    ASSERT_EQ_U64(1, gen);
    ASSERT_EQ_U64(1, atomic_load(&s.proxy[0].hdr->grant));
    ASSERT_EQ_U64(0, atomic_load(&s.proxy[0].vm[0].vtime));
    /* The other comes back: at once the two share equally. */
    s.w[1].wants = true;
    sim_reset_counts(&s);
    sim_run(&s, 2000000000ull);
    ASSERT_GE(sim_share(&s, 1), 480);
    ASSERT_LE(sim_share(&s, 1), 520);
    ASSERT_EQ(0, (int)s.overlap);
    /* The first goes idle: the second is not made to wait for its slices. */
    s.w[0].wants = false;
    sim_run(&s, 100000000ull);
    sim_reset_counts(&s);
    sim_run(&s, 500000000ull);
    ASSERT_EQ(1000, sim_share(&s, 1));
    sim_free(&s);
    return 0;
}

/* A cap holds even with the GPU otherwise idle, and beside another VM. */
TEST(sched_cap)
{
    sim_t s;
    uint64_t t0;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 30, 1));
    t0 = sim_now;
    sim_run(&s, 4000000000ull);
    /* ran[] counts ticks: 30 % of the wall time, within 3 points. */
    ASSERT_GE(s.ran[0] * 1000 / ((sim_now - t0) / SIM_TICK_NS), 270);
    ASSERT_LE(s.ran[0] * 1000 / ((sim_now - t0) / SIM_TICK_NS), 330);

    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    sim_reset_counts(&s);
    t0 = sim_now;
    sim_run(&s, 4000000000ull);
    ASSERT_LE(s.ran[0] * 1000 / ((sim_now - t0) / SIM_TICK_NS), 330);
    ASSERT_GE(s.ran[0] * 1000 / ((sim_now - t0) / SIM_TICK_NS), 250);
    ASSERT_GE(s.ran[1] * 1000 / ((sim_now - t0) / SIM_TICK_NS), 650);
    ASSERT_EQ(0, (int)s.overlap);
    sim_free(&s);
    return 0;
}

/* A holder that never drains loses the grant VCU__SCHED_DRAIN_NS after
 * its revocation; one whose worker or QEMU dies, at the next step. */
TEST(sched_dead_holder)
{
    sim_t s;
    uint64_t t0;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    sim_run(&s, 10 * SIM_TICK_NS);
    ASSERT_EQ_U64(1, atomic_load(&s.proxy[0].hdr->grant));
    s.w[0].hung = true;
    t0 = sim_now;
    while (atomic_load(&s.proxy[0].hdr->grant) != 2 && sim_now - t0 < 10000000000ull)
        sim_tick(&s);
    ASSERT_GE(sim_now - t0, VCU__SCHED_DRAIN_NS);
    ASSERT_LE(sim_now - t0, VCU_SCHED_SLICE_NS + VCU__SCHED_DRAIN_NS + 10 * SIM_TICK_NS);

    /* The second VM's worker dies holding the grant, busy: the first gets
     * it back at the next step, whatever the dead one's flags say. */
    s.w[0].hung = false;
    s.w[0].draining = false;
    vcu__sched_drained(&s.w[0].sc, sim_now);
    sim_dead[s.w[1].sc.pid] = 1;
    t0 = sim_now;
    while (atomic_load(&s.proxy[0].hdr->grant) != 1 && sim_now - t0 < 10000000000ull)
        sim_tick(&s);
    ASSERT_LE(sim_now - t0, 3 * SIM_TICK_NS);

    /* A third VM's QEMU dies while it holds the grant. */
    ASSERT_EQ(2, sim_vm(&s, 10000, 0, 1));
    sim_run(&s, 200000000ull);
    ASSERT_GT(s.ran[2], 0);
    while (atomic_load(&s.proxy[0].hdr->grant) != 3)
        sim_tick(&s);
    sim_dead[1002] = 1;
    sim_dead[s.w[2].sc.pid] = 1;
    s.w[2].hung = true;
    t0 = sim_now;
    while (atomic_load(&s.proxy[0].hdr->grant) != 1 && sim_now - t0 < 10000000000ull)
        sim_tick(&s);
    ASSERT_LE(sim_now - t0, 3 * SIM_TICK_NS);
    sim_free(&s);
    return 0;
}

/*
 * Workers that lie (or are stuck) cannot take more than their VM's share
 * of wall time: one that says it wants the GPU and never issues is
 * charged the slices it holds; one whose drain never ends is charged
 * until its grant is taken back (VCU__SCHED_DRAIN_NS).  An honest VM of
 * equal weight beside either keeps at least about half the time (all of
 * it once the stuck one no longer even asks).
 */
TEST(sched_liars)
{
    sim_t s;
    uint64_t t0;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    s.w[0].lazy = true;
    sim_run(&s, 2000000000ull);
    ASSERT_GE(s.ran[1] * 1000 / (2000000000ull / SIM_TICK_NS), 450);
    sim_free(&s);

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    s.w[0].hung = true;
    t0 = sim_now;
    sim_run(&s, 20000000000ull);
    /* ran[1]: ticks the honest VM ran in (the hung one "runs" throughout,
     * overlapping once its grant was taken back). */
    ASSERT_GE(s.ran[1] * 1000 / ((sim_now - t0) / SIM_TICK_NS), 400);
    /* The stuck one was charged for the grant it kept past its drain. */
    ASSERT_GE(atomic_load(&s.proxy[0].vm[0].used_ns), VCU__SCHED_DRAIN_NS);
    sim_free(&s);
    return 0;
}

/* A worker the proxy has reaped leaves nothing behind even if its pid is
 * alive again (used by another process): its stuck busy flag no longer
 * holds a revoked grant for VCU__SCHED_DRAIN_NS. */
TEST(sched_reaped_worker)
{
    sim_t s;
    uint64_t t0;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    sim_run(&s, 10 * SIM_TICK_NS);
    ASSERT_EQ_U64(1, atomic_load(&s.proxy[0].hdr->grant));
    s.w[0].hung = true;
    sim_run(&s, VCU_SCHED_SLICE_NS + 10 * SIM_TICK_NS);
    ASSERT_EQ((int)(1 | VCU_SCHED_REVOKING), (int)atomic_load(&s.proxy[0].hdr->grant));
    /* The worker's process is gone and reaped; its pid lives on. */
    vcu__sched_worker_gone(&s.proxy[0], s.w[0].sc.pid, sim_now);
    s.w[0].draining = false;
    s.w[0].wants = false;
    s.w[0].hung = false;
    t0 = sim_now;
    while (atomic_load(&s.proxy[0].hdr->grant) != 2 && sim_now - t0 < 10000000000ull)
        sim_tick(&s);
    ASSERT_LE(sim_now - t0, 2 * SIM_TICK_NS);
    ASSERT_EQ(0, (int)atomic_load(&s.proxy[0].w[s.w[0].sc.w_slot].pid));
    sim_free(&s);
    return 0;
}

/* The area's lock: one whose holder died is broken, and so is one held
 * past VCU__SCHED_LOCK_NS by a live holder. */
TEST(sched_lock_broken)
{
    sim_t s;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    atomic_store(&s.proxy[0].hdr->lock, 3999);
    sim_dead[3999] = 1;
    vcu__sched_set_want(&s.w[0].sc, true);
    vcu__sched_step(&s.w[0].sc, sim_now);
    ASSERT_EQ(0, (int)atomic_load(&s.proxy[0].hdr->lock));
    ASSERT_EQ_U64(1, atomic_load(&s.proxy[0].hdr->grant));
    sim_free(&s);

    /* A live holder: the simulated clock runs on in another thread's
     * stead, so the waiter sees the bound pass. */
    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    atomic_store(&s.proxy[0].hdr->lock, 3998);
    s.w[0].sc.clock = vcu__sched_now;
    vcu__sched_step(&s.w[0].sc, sim_now);
    ASSERT_EQ(0, (int)atomic_load(&s.proxy[0].hdr->lock));
    sim_free(&s);
    return 0;
}

/* Garbage in every byte of the area, again and again, while parties keep
 * stepping, issuing, claiming: nothing crashes (ASan), every index read
 * is bounded, and once the area is sane again scheduling resumes. */
TEST(sched_garbage)
{
    sim_t s;
    unsigned int round, i;
    uint64_t used, all, grants;

    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 50, 2));
    ASSERT_EQ(1, sim_vm(&s, 100, 0, 1));
    srand(7);
    for (round = 0; round < 200; round++) {
        unsigned char *p = s.area;

        if (round % 2 == 0) {
            for (i = 0; i < VCU_SCHED_LEN; i++)
                p[i] = (unsigned char)rand();
        } else {
            /* Plausible garbage: large words, pids of the living, indices
             * just out of range. */
            uint32_t *q = s.area;

            for (i = 0; i < VCU_SCHED_LEN / 4; i++)
                q[i] = (uint32_t)(rand() % 5 == 0   ? 0xffffffffu
                                  : rand() % 4 == 0 ? 1000u + (unsigned int)(rand() % 3)
                                  : rand() % 3 == 0 ? VCU_SCHED_VMS + (unsigned int)(rand() % 3)
                                                    : (unsigned int)rand());
        }
        /* The lock too, as a dead holder's (a live one's is waited for
         * on the real clock: sched_lock_broken). */
        sim_dead[3999] = 1;
        atomic_store(&s.proxy[0].hdr->lock, round % 3 == 0 ? 0 : 3999);
        for (i = 0; i < 20; i++)
            sim_tick(&s);
        vcu__sched_vm_report(&s.proxy[0], &used, &all, &grants);
        (void)vcu__sched_weight(&s.proxy[0].vm[0]);
    }
    /* Sane again: a fresh area, the same parties rejoin and are served. */
    sim_free(&s);
    ASSERT_EQ(0, sim_init(&s));
    ASSERT_EQ(0, sim_vm(&s, 100, 0, 1));
    sim_run(&s, 100000000ull);
    ASSERT_GT(s.ran[0], 900);
    sim_free(&s);
    return 0;
}

/* ---- the area's file -------------------------------------------------------- */

/* Made if missing, joined if there; refused: a relative path, a link, the
 * wrong size, the wrong magic, writable by others. */
TEST(sched_open_refuses)
{
    char dir[] = "/tmp/vcu-sched-XXXXXX", path[256], link_[256], err[256];
    vcu_sched_t *a, *b;
    int fd;

    ASSERT_NOT_NULL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/group", dir);
    snprintf(link_, sizeof(link_), "%s/link", dir);
    ASSERT_EQ(-1, vcu__sched_open("relative/group", 1, &a, err, sizeof(err)));
    ASSERT_EQ(-1, vcu__sched_open(path, 0, &a, err, sizeof(err)));     /* missing */
    ASSERT_EQ(0, vcu__sched_open(path, 1, &a, err, sizeof(err)));
    ASSERT_EQ(0, vcu__sched_open(path, 0, &b, err, sizeof(err)));
    ASSERT_EQ_U64(VCU_SCHED_MAGIC, b->hdr->magic);
    vcu__sched_close(b);
    ASSERT_EQ(0, symlink(path, link_));
    ASSERT_EQ(-1, vcu__sched_open(link_, 1, &b, err, sizeof(err)));
    unlink(link_);
    chmod(path, 0622);
    ASSERT_EQ(-1, vcu__sched_open(path, 0, &b, err, sizeof(err)));
    chmod(path, 0600);
    a->hdr->magic = 0;
    ASSERT_EQ(-1, vcu__sched_open(path, 0, &b, err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "magic") != NULL);
    vcu__sched_close(a);
    fd = open(path, O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(0, ftruncate(fd, 4096));
    close(fd);
    ASSERT_EQ(-1, vcu__sched_open(path, 1, &b, err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "size") != NULL);
    unlink(path);
    rmdir(dir);
    return 0;
}

/* ---- the proxy and the daemon ------------------------------------------------- */

static int sched_px(uint32_t share, uint32_t cap, vcu_proxy_t **px, char *err, size_t errlen)
{
    vcu_proxy_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon(UT_NO_LIBCUDA);
    if (cfg.daemon == NULL) {
        snprintf(err, errlen, "no daemon");
        return VCU_EIO;
    }
    cfg.compute_share = share;
    cfg.compute_cap = cap;
    return vcu_proxy_new(&cfg, px, err, errlen);
}

/* Bad values are refused with a reason; good ones join the daemon's
 * group, are reported (to QEMU and on the control socket), and the VM
 * leaves the daemon's list once its proxy is gone. */
TEST(sched_proxy_config)
{
    char err[256];
    const char *sock = ut_daemon(UT_NO_LIBCUDA);
    vcu_proxy_t *px, *px2;
    vcu_proxy_stats_t st;
    uint64_t id, id2;
    double t0;

    ASSERT_NOT_NULL(sock);
    ASSERT_EQ(VCU_EINVAL, sched_px(10001, 0, &px, err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "compute-share") != NULL);
    ASSERT_EQ(VCU_EINVAL, sched_px(100, 101, &px, err, sizeof(err)));
    ASSERT_TRUE(strstr(err, "compute-cap") != NULL);

    ASSERT_EQ(0, sched_px(25, 0, &px, err, sizeof(err)));
    ASSERT_EQ(0, sched_px(75, 40, &px2, err, sizeof(err)));
    ASSERT_EQ(0, vcu_proxy_stats(px2, &st, NULL, 0));
    ASSERT_EQ(75, (int)st.compute_share);
    ASSERT_EQ(40, (int)st.compute_cap);
    id2 = st.vm_id;
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, NULL, 0));
    id = st.vm_id;
    ASSERT_NE_U64(id, id2);
    ASSERT_EQ_U64(25, ut_daemon_vm_u64(sock, id, "compute_share"));
    ASSERT_EQ_U64(75, ut_daemon_vm_u64(sock, id2, "compute_share"));
    ASSERT_EQ_U64(40, ut_daemon_vm_u64(sock, id2, "compute_cap"));
    ASSERT_EQ_U64(0, ut_daemon_vm_u64(sock, id2, "gpu_ns"));
    vcu_proxy_free(px);
    t0 = ut_now();
    while (ut_daemon_vm_u64(sock, id, "compute_share") != UINT64_MAX && ut_now() - t0 < 5)
        usleep(10000);
    ASSERT_EQ_U64(UINT64_MAX, ut_daemon_vm_u64(sock, id, "compute_share"));
    ASSERT_EQ_U64(75, ut_daemon_vm_u64(sock, id2, "compute_share"));
    vcu_proxy_free(px2);
    /* Without a share, no group. */
    ASSERT_EQ(0, sched_px(0, 0, &px, err, sizeof(err)));
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, NULL, 0));
    ASSERT_EQ(0, (int)st.compute_share);
    vcu_proxy_free(px);
    return 0;
}

/* The weight the session's worker reports to its guest (CU_SLICE_INFO,
 * what nvidia-smi shows); -1 on failure. */
static int ts_slice_share(vcu_proxy_t *px, uint64_t sid)
{
    ut_req_t *t = ut_req_new();
    const struct vcu_cu_slice_info_resp *si = ut_resp_payload(t);
    struct vcu_cu_hdr ch;
    int r = -1;

    memset(&ch, 0, sizeof(ch));
    ut_req_build(t, VCU_OP_CU_SLICE_INFO, sid, &ch, sizeof(ch));
    if (ut_px_exec(px, t) == VCU_S_OK && si->r.result == 0)
        r = (int)si->compute_share;
    free(t);
    return r;
}

/*
 * An operator changes a running VM's weight and cap on the control socket:
 * the worker already running sees the new weight (its guest's
 * CU_SLICE_INFO), QEMU's stats too (SLICE), and a bad value or an unknown
 * VM is refused with a reason.
 */
TEST(sched_proxy_live_change)
{
    char err[256], req[256], ans[4096];
    const char *sock = ut_daemon_cuda();
    struct vcu_session_open_req o;
    vcu_proxy_config_t cfg;
    vcu_proxy_stats_t st;
    vcu_proxy_t *px;
    ut_req_t *t = ut_req_new();
    uint64_t sid;
    double t0;

    ASSERT_NOT_NULL(sock);
    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = sock;
    cfg.gpus = "0";
    cfg.name = "live-vm";
    cfg.compute_share = 100;
    if (vcu_proxy_new(&cfg, &px, err, sizeof(err)) != 0)
        VCU_TEST_FAIL_("vcu_proxy_new: %s", err);
    if (vcu_proxy_cuda_error(px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(px));
    memset(&o, 0, sizeof(o));
    o.version_min = o.version_max = VCU_PROTO_VERSION;
    o.features = VCU_FEAT_ECHO | VCU_FEAT_CUDA;
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &o, sizeof(o));
    ASSERT_EQ(VCU_S_OK, ut_px_exec(px, t));
    sid = ((const struct vcu_session_open_resp *)ut_resp_payload(t))->session;
    ASSERT_EQ(100, ts_slice_share(px, sid));
    ASSERT_EQ(0, vcu_proxy_stats(px, &st, NULL, 0));

    snprintf(req, sizeof(req), "{\"cmd\":\"set-vm\",\"vm\":\"%llu\",\"compute_share\":300,"
             "\"compute_cap\":50}", (unsigned long long)st.vm_id);
    ASSERT_EQ(0, ut_daemon_ctl(sock, req, ans, sizeof(ans)));
    ASSERT_TRUE(strstr(ans, "\"ok\":true") != NULL);
    ASSERT_EQ(300, ts_slice_share(px, sid));
    ASSERT_EQ_U64(50, ut_daemon_vm_u64(sock, st.vm_id, "compute_cap"));
    t0 = ut_now();
    do
        ASSERT_EQ(0, vcu_proxy_stats(px, &st, NULL, 0));
    while (st.compute_share != 300 && ut_now() - t0 < 5);
    ASSERT_EQ(300, (int)st.compute_share);
    ASSERT_EQ(50, (int)st.compute_cap);

    ASSERT_EQ(0, ut_daemon_ctl(sock, "{\"cmd\":\"set-vm\",\"vm\":\"live-vm\",\"compute_share\":0}",
                               ans, sizeof(ans)));
    ASSERT_TRUE(strstr(ans, "compute-share must be") != NULL);
    ASSERT_EQ(0, ut_daemon_ctl(sock, "{\"cmd\":\"set-vm\",\"vm\":\"no-such-vm\",\"compute_cap\":5}",
                               ans, sizeof(ans)));
    ASSERT_TRUE(strstr(ans, "\"ok\":false") != NULL);
    ASSERT_EQ(0, ut_daemon_ctl(sock, "{\"cmd\":\"frobnicate\"}", ans, sizeof(ans)));
    ASSERT_TRUE(strstr(ans, "unknown cmd") != NULL);
    ASSERT_EQ(300, ts_slice_share(px, sid));
    vcu_proxy_free(px);
    free(t);
    return 0;
}

/* ---- shares through real workers ------------------------------------------ */

/* One session's load: synchronous memsets of 8 MiB, back to back, until
 * stop; each a few milliseconds of the stand-in's CPU "GPU". */
typedef struct ts_load_s {
    vcu_proxy_t *px;
    pthread_mutex_t *mu;            /* one submitter per proxy at a time */
    uint64_t sid, ptr;
    atomic_int *stop;
    long done;
    int err;
} ts_load_t;

static void *ts_load(void *arg)
{
    ts_load_t *l = arg;
    ut_req_t *t = ut_req_new();
    struct vcu_cu_memset_req mr;

    memset(&mr, 0, sizeof(mr));
    mr.dst = l->ptr;
    mr.width = 8u << 20;
    mr.height = 1;
    mr.elem_size = 1;
    while (!atomic_load(l->stop)) {
        int n = atomic_load(&t->ndone);
        double end = ut_now() + 30;

        mr.value = (uint32_t)l->done;
        ut_req_build(t, VCU_OP_CU_MEMSET, l->sid, &mr, sizeof(mr));
        t->r.resp_cap = sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD;
        pthread_mutex_lock(l->mu);
        vcu_proxy_submit(l->px, &t->r);
        pthread_mutex_unlock(l->mu);
        while (atomic_load(&t->ndone) == n && ut_now() < end) {
            struct timespec ts = { 0, 20000 };

            nanosleep(&ts, NULL);
        }
        if (atomic_load(&t->ndone) == n || ut_status(t) != VCU_S_OK ||
            ((const struct vcu_cu_resp *)ut_resp_payload(t))->result != 0) {
            l->err = 1;
            break;
        }
        l->done++;
    }
    free(t);
    return NULL;
}

/* A proxy (a VM) in the group, with nsess sessions holding 8 MiB each. */
static int ts_vm(uint32_t share, unsigned int nsess, vcu_proxy_t **px, pthread_mutex_t *mu,
                 ts_load_t *loads, atomic_int *stop)
{
    vcu_proxy_config_t cfg;
    char err[256];
    unsigned int i;

    memset(&cfg, 0, sizeof(cfg));
    cfg.daemon = ut_daemon_cuda();
    ASSERT_NOT_NULL(cfg.daemon);
    cfg.gpus = "0";
    cfg.compute_share = share;
    if (vcu_proxy_new(&cfg, px, err, sizeof(err)) != 0)
        VCU_TEST_FAIL_("vcu_proxy_new: %s", err);
    if (vcu_proxy_cuda_error(*px) != NULL)
        VCU_TEST_FAIL_("no CUDA in the worker: %s", vcu_proxy_cuda_error(*px));
    pthread_mutex_init(mu, NULL);
    for (i = 0; i < nsess; i++) {
        ut_req_t *t = ut_req_new();
        struct vcu_session_open_req o;
        struct vcu_cu_mem_alloc_req ar;

        memset(&o, 0, sizeof(o));
        o.version_min = o.version_max = VCU_PROTO_VERSION;
        o.features = VCU_FEAT_ECHO | VCU_FEAT_CUDA;
        ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &o, sizeof(o));
        ASSERT_EQ(VCU_S_OK, ut_px_exec(*px, t));
        memset(&loads[i], 0, sizeof(loads[i]));
        loads[i].px = *px;
        loads[i].mu = mu;
        loads[i].stop = stop;
        loads[i].sid = ((const struct vcu_session_open_resp *)ut_resp_payload(t))->session;
        memset(&ar, 0, sizeof(ar));
        ar.size = 8u << 20;
        ut_req_build(t, VCU_OP_CU_MEM_ALLOC, loads[i].sid, &ar, sizeof(ar));
        ASSERT_EQ(VCU_S_OK, ut_px_exec(*px, t));
        ASSERT_EQ(0, (int)((const struct vcu_cu_u64_resp *)ut_resp_payload(t))->r.result);
        loads[i].ptr = ((const struct vcu_cu_u64_resp *)ut_resp_payload(t))->value;
        free(t);
    }
    return 0;
}

/* Two VMs with n0 and n1 busy sessions and weights w0, w1 for secs: VM
 * 0's part of the GPU time the group charged, in percent. */
static int ts_shares(uint32_t w0, unsigned int n0, uint32_t w1, unsigned int n1, double secs,
                     unsigned int *pct0, long *ops0, long *ops1)
{
    const char *sock = ut_daemon_cuda();
    vcu_proxy_t *px[2];
    pthread_mutex_t mu[2];
    ts_load_t loads[2][4];
    pthread_t th[2][4];
    vcu_proxy_stats_t st[2];
    uint64_t ns[2];
    atomic_int stop;
    unsigned int n[2] = { n0, n1 }, v, i;

    atomic_init(&stop, 0);
    CHECK(ts_vm(w0, n0, &px[0], &mu[0], loads[0], &stop));
    CHECK(ts_vm(w1, n1, &px[1], &mu[1], loads[1], &stop));
    for (v = 0; v < 2; v++)
        for (i = 0; i < n[v]; i++)
            ASSERT_EQ(0, pthread_create(&th[v][i], NULL, ts_load, &loads[v][i]));
    usleep((useconds_t)(secs * 1e6));
    atomic_store(&stop, 1);
    *ops0 = *ops1 = 0;
    for (v = 0; v < 2; v++)
        for (i = 0; i < n[v]; i++) {
            pthread_join(th[v][i], NULL);
            ASSERT_EQ(0, loads[v][i].err);
            *(v ? ops1 : ops0) += loads[v][i].done;
        }
    /* The GPU time the group charged each VM, as the daemon reports it. */
    for (v = 0; v < 2; v++) {
        ASSERT_EQ(0, vcu_proxy_stats(px[v], &st[v], NULL, 0));
        ns[v] = ut_daemon_vm_u64(sock, st[v].vm_id, "gpu_ns");
        ASSERT_NE_U64(UINT64_MAX, ns[v]);
        ASSERT_GT(ns[v], 0);
    }
    *pct0 = (unsigned int)(ns[0] * 100 / (ns[0] + ns[1]));
    fprintf(stderr, "shares: weights %u/%u, sessions %u/%u: GPU time %u%% / %u%% "
            "(%.0f / %.0f ms), memsets %ld / %ld\n",
            w0, w1, n0, n1, *pct0, 100 - *pct0, ns[0] / 1e6, ns[1] / 1e6, *ops0, *ops1);
    for (v = 0; v < 2; v++) {
        vcu_proxy_free(px[v]);
        pthread_mutex_destroy(&mu[v]);
    }
    return 0;
}

/*
 * Real workers on the CPU stand-in, two proxies (VMs) of one group, every
 * session busy with memsets: the GPU time the group charges splits by
 * weight (25/75), and by VM, not by session (3 sessions against 1 at
 * equal weights: half each).  Loose bounds (±10 points): the stand-in's
 * "GPU" is the build machine's CPU, shared with everything else.
 */
TEST(sched_proxy_shares)
{
    unsigned int pct;
    long a, b;

    CHECK(ts_shares(25, 1, 75, 1, 3.0, &pct, &a, &b));
    ASSERT_GE(pct, 15);
    ASSERT_LE(pct, 35);
    ASSERT_GT(a, 0);
    CHECK(ts_shares(100, 3, 100, 1, 3.0, &pct, &a, &b));
    ASSERT_GE(pct, 40);
    ASSERT_LE(pct, 60);
    return 0;
}
