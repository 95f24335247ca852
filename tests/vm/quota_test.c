/*
 * quota suite: the VM's GPU memory quota (device property mem-quota, set
 * by run.sh for this suite), seen from two guest processes, each with its
 * own session and so its own worker process on the host.
 *
 * Each process's CUDA context is charged to the quota (the daemon's
 * --ctx-bytes: C bytes each), so the quota Q holds Q - 2C of data.
 * Process A takes most of that; process B sees total = Q and free = what
 * A and the two contexts left, takes the rest, and one byte more fails as
 * on a full GPU (CUDA_ERROR_OUT_OF_MEMORY) without disturbing either; A
 * is killed, and its charge, its context's included, comes back to B;
 * then a graph whose allocation node would pass the quota is not
 * launched, and one that fits is, its memory charged.
 * Raw protocol (the transport library), so that the figures are the
 * host's own; Q and C come from the host (CU_SLICE_INFO).
 *
 * Usage: quota_test
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vcu_transport.h"
#include "vmtest.h"

#define MIB (1024ull * 1024)
#define OOM 2u                      /* CUDA_ERROR_OUT_OF_MEMORY */

/* CU_MEM_ALLOC of n bytes on device 0: the CUresult, or 0x10000 + the
 * transport's error; *ptr the pointer. */
static uint32_t cu_alloc(vcu_conn_t *c, uint64_t n, uint64_t *ptr)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    int err;

    memset(&rq, 0, sizeof(rq));
    memset(&rp, 0, sizeof(rp));
    rq.size = n;
    err = vcu_conn_call(c, VCU_OP_CU_MEM_ALLOC, 0, &rq, sizeof(rq), NULL, 0, &rp, sizeof(rp), NULL);
    if (err != 0)
        return 0x10000u + (uint32_t)-err;
    if (ptr != NULL)
        *ptr = rp.value;
    return rp.r.result;
}

static uint32_t cu_free(vcu_conn_t *c, uint64_t p)
{
    struct vcu_cu_u64_req rq = { { 0, 0 }, p };
    struct vcu_cu_resp rp;
    int err;

    memset(&rp, 0, sizeof(rp));
    err = vcu_conn_call(c, VCU_OP_CU_MEM_FREE, 0, &rq, sizeof(rq), NULL, 0, &rp, sizeof(rp), NULL);
    return err != 0 ? 0x10000u + (uint32_t)-err : rp.result;
}

static int meminfo(vcu_conn_t *c, uint64_t *fr, uint64_t *tot)
{
    struct vcu_cu_hdr h = { 0, 0 };
    struct vcu_cu_mem_info_resp rp;

    memset(&rp, 0, sizeof(rp));
    if (vcu_conn_call(c, VCU_OP_CU_MEM_GET_INFO, 0, &h, sizeof(h), NULL, 0, &rp, sizeof(rp),
                      NULL) != 0 || rp.r.result != 0)
        return -1;
    *fr = rp.free;
    *tot = rp.total;
    return 0;
}

static int total_mem(vcu_conn_t *c, uint64_t *tot)
{
    struct vcu_cu_hdr h = { 0, 0 };
    static struct vcu_cu_device_info_resp rp;

    memset(&rp, 0, sizeof(rp));
    if (vcu_conn_call(c, VCU_OP_CU_DEVICE_INFO, 0, &h, sizeof(h), NULL, 0, &rp, sizeof(rp),
                      NULL) != 0 || rp.r.result != 0)
        return -1;
    *tot = rp.total_mem;
    return 0;
}

static int slice(vcu_conn_t *c, struct vcu_cu_slice_info_resp *rp)
{
    struct vcu_cu_hdr h = { 0, 0 };

    memset(rp, 0, sizeof(*rp));
    if (vcu_conn_call(c, VCU_OP_CU_SLICE_INFO, 0, &h, sizeof(h), NULL, 0, rp, sizeof(*rp),
                      NULL) != 0 || rp->r.result != 0)
        return -1;
    return 0;
}

/* A request of one struct in, one u64 out: the CUresult (or 0x10000 +
 * the transport's error), the value in *out. */
static uint32_t cu_op(vcu_conn_t *c, uint32_t op, const void *rq, uint32_t len, uint64_t *out)
{
    struct vcu_cu_u64_resp rp;
    int err;

    memset(&rp, 0, sizeof(rp));
    err = vcu_conn_call(c, op, 0, (void *)rq, len, NULL, 0, &rp, sizeof(rp), NULL);
    if (err != 0)
        return 0x10000u + (uint32_t)-err;
    if (out != NULL)
        *out = rp.value;
    return rp.r.result;
}

/* A graph of one allocation node of n bytes, instantiated, launched on
 * the legacy stream and waited for: the launch's CUresult (the steps
 * before it must succeed: else 0x20000 + the step). */
static uint32_t graph_alloc_run(vcu_conn_t *c, uint64_t n)
{
    struct vcu_cu_u64_req u = { { 0, 0 }, 0 };
    struct vcu_cu_graph_mem_node_req m;
    struct vcu_cu_graph_mem_node_resp mr;
    struct vcu_cu_pair_req pr;
    uint64_t g = 0, x = 0;
    uint32_t r;

    if (cu_op(c, VCU_OP_CU_GRAPH_CREATE, &u, sizeof(u), &g) != 0)
        return 0x20001;
    memset(&m, 0, sizeof(m));
    m.graph = g;
    m.kind = VCU_CU_MEM_NODE_ALLOC;
    m.size = n;
    memset(&mr, 0, sizeof(mr));
    if (vcu_conn_call(c, VCU_OP_CU_GRAPH_ADD_MEM_NODE, 0, &m, sizeof(m), NULL, 0, &mr,
                      sizeof(mr), NULL) != 0 || mr.r.result != 0 || mr.node == 0 || mr.dptr == 0)
        return 0x20002;
    memset(&pr, 0, sizeof(pr));
    pr.a = g;
    if (cu_op(c, VCU_OP_CU_GRAPH_INSTANTIATE, &pr, sizeof(pr), &x) != 0)
        return 0x20003;
    pr.a = x;
    pr.b = 0;                       /* the legacy stream */
    r = cu_op(c, VCU_OP_CU_GRAPH_LAUNCH, &pr, sizeof(pr), NULL);
    u.value = 0;
    if (r == 0 && cu_op(c, VCU_OP_CU_STREAM_SYNCHRONIZE, &u, sizeof(u), NULL) != 0)
        return 0x20004;
    return r;
}

/* What A tells B: the quota, a context's charge, what A took. */
struct quota_fig {
    uint64_t quota, ctx, a_take;
    char ok;
};

/* Process A: makes its context, learns the quota and a context's charge
 * (the only context yet), takes 5/8 of what two contexts leave of the
 * quota, says so on `up`, then waits to die. */
static void proc_a(int up)
{
    static struct vcu_cu_slice_info_resp si;
    struct quota_fig f;
    vcu_conn_t *c = NULL;
    uint64_t p = 0, fr, tot;

    memset(&f, 0, sizeof(f));
    f.ok = 'n';
    if (vcu_conn_open(NULL, VCU_FEAT_CUDA, &c) == 0 && meminfo(c, &fr, &tot) == 0 &&
        slice(c, &si) == 0 && si.num_sessions == 1 && si.ctx_bytes != 0 &&
        si.mem_quota > 2 * si.ctx_bytes + 8 * MIB) {
        f.quota = si.mem_quota;
        f.ctx = si.ctx_bytes;
        f.a_take = (f.quota - 2 * f.ctx) / 8 * 5;
        if (cu_alloc(c, f.a_take, &p) == 0 && p != 0)
            f.ok = 'y';
    }
    if (write(up, &f, sizeof(f)) != (ssize_t)sizeof(f))
        _exit(1);
    for (;;)
        pause();
}

int main(void)
{
    static struct vcu_cu_slice_info_resp si;
    struct quota_fig f;
    uint64_t quota, ctx, a_take, rest, fr = 0, tot = 0, p = 0, q = 0;
    vcu_conn_t *c = NULL;
    int up[2], err, st;
    uint32_t r;
    pid_t a;

    vt_suite = "quota";
    if (pipe(up) != 0) {
        vt_fail("setup", "pipe: %s", strerror(errno));
        return 1;
    }
    /* A forks before anything opens the device: its own session. */
    a = fork();
    if (a == 0) {
        close(up[0]);
        proc_a(up[1]);
    }
    close(up[1]);
    if (a < 0 || read(up[0], &f, sizeof(f)) != (ssize_t)sizeof(f) || f.ok != 'y') {
        vt_fail("setup", "process A could not learn the slice or take its share "
                "(quota %llu, context %llu)", (unsigned long long)f.quota,
                (unsigned long long)f.ctx);
        return 1;
    }
    quota = f.quota;
    ctx = f.ctx;
    a_take = f.a_take;
    rest = quota - 2 * ctx - a_take;
    err = vcu_conn_open(NULL, VCU_FEAT_CUDA, &c);
    if (err != 0 || !(vcu_conn_features(c) & VCU_FEAT_CUDA)) {
        vt_fail("setup", "vcu_conn_open -> %d, no CUDA", err);
        kill(a, SIGKILL);
        return 1;
    }

    /* B's own context is made by this very call, and counts. */
    if (meminfo(c, &fr, &tot) == 0 && tot == quota && fr == rest)
        vt_pass("meminfo_total_is_quota");
    else
        vt_fail("meminfo_total_is_quota", "free %llu total %llu (quota %llu, A holds %llu, "
                "contexts 2 x %llu)", (unsigned long long)fr, (unsigned long long)tot,
                (unsigned long long)quota, (unsigned long long)a_take, (unsigned long long)ctx);
    if (total_mem(c, &tot) == 0 && tot == quota)
        vt_pass("device_total_mem_is_quota");
    else
        vt_fail("device_total_mem_is_quota", "total_mem %llu", (unsigned long long)tot);

    /* B takes the rest: together they hit the quota. */
    r = cu_alloc(c, rest, &p);
    if (r == 0)
        vt_pass("two_processes_fill_quota");
    else
        vt_fail("two_processes_fill_quota", "alloc of the rest -> %u", r);
    r = cu_alloc(c, 1, &q);
    if (r == OOM)
        vt_pass("one_byte_past_is_oom");
    else
        vt_fail("one_byte_past_is_oom", "-> %u", r);
    if (slice(c, &si) == 0 && si.mem_quota == quota && si.mem_used == quota &&
        si.num_sessions == 2 && si.ctx_bytes == 2 * ctx)
        vt_pass("slice_info");
    else
        vt_fail("slice_info", "quota %llu used %llu sessions %u ctx %llu",
                (unsigned long long)si.mem_quota, (unsigned long long)si.mem_used,
                si.num_sessions, (unsigned long long)si.ctx_bytes);
    /* The session goes on: free and take again. */
    if (cu_free(c, p) == 0 && cu_alloc(c, rest, &p) == 0)
        vt_pass("session_goes_on");
    else
        vt_fail("session_goes_on", "free and alloc again failed");

    /* A dies: its charge and its context's come back (once the host has
     * reaped its worker). */
    kill(a, SIGKILL);
    waitpid(a, &st, 0);
    {
        uint64_t t0 = vt_now_us();

        while ((r = cu_alloc(c, a_take + ctx, &q)) == OOM && vt_now_us() - t0 < 10000000ull)
            vt_sleep_ms(50);
    }
    if (r == 0 && cu_alloc(c, 1, NULL) == OOM)
        vt_pass("killed_process_charge_returns");
    else
        vt_fail("killed_process_charge_returns", "alloc of A's share -> %u", r);
    if (slice(c, &si) == 0 && si.num_sessions == 1 && si.mem_used == quota &&
        si.ctx_bytes == ctx)
        vt_pass("slice_info_after_kill");
    else
        vt_fail("slice_info_after_kill", "used %llu sessions %u ctx %llu",
                (unsigned long long)si.mem_used, si.num_sessions,
                (unsigned long long)si.ctx_bytes);

    /* Graph memory counts too: a graph whose allocation does not fit is
     * not launched; one that fits is, and its memory is then charged. */
    if (cu_free(c, q) != 0) {
        vt_fail("graph_mem_setup", "free of A's share failed");
    } else {
        uint64_t room = a_take + ctx;

        r = graph_alloc_run(c, room + 64 * MIB);
        if (r == OOM)
            vt_pass("graph_mem_past_quota_not_launched");
        else
            vt_fail("graph_mem_past_quota_not_launched", "launch -> %#x", r);
        r = graph_alloc_run(c, room / 2);
        if (r == 0 && cu_alloc(c, room, NULL) == OOM && slice(c, &si) == 0 &&
            si.mem_used <= quota && si.mem_used >= quota - room + room / 2)
            vt_pass("graph_mem_charged");
        else
            vt_fail("graph_mem_charged", "launch -> %#x, used %llu of %llu", r,
                    (unsigned long long)si.mem_used, (unsigned long long)quota);
    }
    vcu_conn_close(c);
    return vt_nfail() ? 1 : 0;
}
