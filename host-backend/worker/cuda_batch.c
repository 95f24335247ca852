/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * CU_BATCH: a batch's requests, and its runs of launches issued as graphs.
 */
#include "cuda_int.h"

/* ---- runs of launches as graphs ---------------------------------------- */

/*
 * A batch's consecutive launches into one stream cost the driver one
 * cuLaunchKernel each, 3.5-4.5 us of CPU on the H100 and H200 (what bounds
 * a burst of small kernels, natively too).  As the kernel nodes of one
 * executable graph, updated for each run (cuGraphExecUpdate) and launched
 * whole, the same run costs a fraction of that (docs/benchmarks.md,
 * "Launch runs as graphs").  It is the same work in the same order:
 *
 *   - A chain of kernel nodes launched into the stream runs as the
 *     launches would, ordered after the stream's earlier work, before its
 *     later work, with the legacy stream's implicit synchronization.
 *     Launches of one executable graph are ordered among themselves, so a
 *     kept graph serves one stream only: no dependency across streams.
 *   - Every error cuLaunchKernel gives at once, the graph calls give
 *     before anything runs (invalid values and handles when a node is
 *     added, a launch out of resources at instantiation or update; measured
 *     on driver 580): then the run's launches are issued one by one, as
 *     before, and the first failure is the deferred error.  Faults in the
 *     kernels are the context's sticky error either way.
 *   - Not while a capture may be in progress (the captured graph would get
 *     one child-graph node, not the kernels), nor for a printf session
 *     (its launches are marked one by one), cooperative launches or
 *     launches with attributes (CU_LAUNCH_EX: not batched as runs).
 *
 * Instantiation costs about what the run's launches would, so a run is
 * made a graph only the second time a run of its length on its stream
 * comes; at most VCU__GRUN_SLOTS kept, each counted in the session's host
 * budget.  VCU_LAUNCH_GRAPHS=0 in the worker's environment turns it off.
 */

/* Destroys a kept run's executable graph, in its device's context; the
 * slot stays.  (May switch the current context.) */
static void vcu__grun_exec_drop(vcu__cuda_sess_t *cs, vcu__grun_t *g)
{
    if (g->ex == NULL)
        return;
    if (cs->ctx[g->dev] != NULL && vcu__cur(cs, cs->ctx[g->dev]) == CUDA_SUCCESS)
        cs->cu->fn.cuGraphExecDestroy(g->ex);
    vcu__mem_give(cs, VCU__GRUN_BYTES);
    g->ex = NULL;
}

/* Frees a slot, its executable graph first. */
static void vcu__grun_free(vcu__cuda_sess_t *cs, vcu__grun_t *g)
{
    vcu__grun_exec_drop(cs, g);
    memset(g, 0, sizeof(*g));
}

/* Forgets the kept runs of device d (VCU_CU_MAX_DEVICES: of all): before
 * a module is unloaded (their kernel nodes may name its functions), a
 * context limit changes or the context goes. */
void vcu__grun_drop(vcu__cuda_sess_t *cs, uint32_t d)
{
    unsigned int i;

    for (i = 0; i < VCU__GRUN_SLOTS; i++)
        if (cs->grun[i].n != 0 && (d == VCU_CU_MAX_DEVICES || cs->grun[i].dev == d))
            vcu__grun_free(cs, &cs->grun[i]);
}

/* How many entries from off, at most left, are plain launches of one
 * device and stream that could go as one graph; 0 when the session may
 * not run them so. */
static uint32_t vcu__grun_len(const vcu__cuda_sess_t *cs, const unsigned char *p, size_t off,
                              size_t plen, uint32_t left)
{
    struct vcu_cu_launch_req first;
    uint32_t n;

    if (!cs->cu->graphs || cs->capture || cs->out != NULL)
        return 0;
    for (n = 0; n < left; n++) {
        struct vcu_cu_batch_entry e;
        struct vcu_cu_launch_req rq;

        memcpy(&e, p + off, sizeof(e));
        if (e.opcode != VCU_OP_CU_LAUNCH || e.len < sizeof(rq))
            break;
        memcpy(&rq, p + off + sizeof(e), sizeof(rq));
        if (rq.flags != 0 || (n > 0 && (rq.stream != first.stream ||
                                        rq.hdr.device != first.hdr.device)))
            break;
        if (n == 0)
            first = rq;
        off += sizeof(e) + e.len + (8 - e.len % 8) % 8;
        if (off > plen)
            break;
    }
    return n;
}

/* The kept run for (stream, dev, n), made the most recently used; or a
 * slot taken for it (ex NULL), the least recently used one freed. */
static vcu__grun_t *vcu__grun_slot(vcu__cuda_sess_t *cs, uint64_t stream, uint32_t dev,
                                   uint32_t n, bool *found)
{
    vcu__grun_t *g, *victim = &cs->grun[0];
    unsigned int i;

    for (i = 0; i < VCU__GRUN_SLOTS; i++) {
        g = &cs->grun[i];
        if (g->n == n && g->stream == stream && g->dev == dev) {
            g->used = ++cs->grun_tick;
            *found = true;
            return g;
        }
        if (g->used < victim->used)
            victim = g;
    }
    vcu__grun_free(cs, victim);
    victim->stream = stream;
    victim->dev = dev;
    victim->n = n;
    victim->used = ++cs->grun_tick;
    *found = false;
    return victim;
}

/* Adds the n launch entries from *off to gr as a chain of kernel nodes
 * of device dev; *off is then past the last one added.  What failed, if
 * anything: nothing of it has run. */
static CUresult vcu__grun_nodes(vcu__cuda_sess_t *cs, vcu__op_t *o, const unsigned char *p,
                                size_t *off, uint32_t n, uint32_t dev, CUgraph gr)
{
    struct vcu_cu_launch_req rq;
    CUgraphNode prev = NULL, node;
    CUresult r = CUDA_SUCCESS;
    uint32_t i;

    for (i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct vcu_cu_batch_entry e;
        CUDA_KERNEL_NODE_PARAMS kn;
        const vcu__hent_t *fe;
        void **kp;

        memcpy(&e, p + *off, sizeof(e));
        memcpy(&rq, p + *off + sizeof(e), sizeof(rq));
        fe = vcu__htab_get(&cs->tab, rq.function, VCU__H_FUNCTION);
        if (fe == NULL || fe->u.fn.mod->dev != dev ||
            !vcu__param_bytes_ok(rq.param_bytes, e.len - sizeof(rq)) ||
            (kp = vcu__params(o, fe, p + *off + sizeof(e) + sizeof(rq), rq.param_bytes)) == NULL) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        vcu__kernel_node(&kn, fe, rq.grid, rq.block, rq.shared_mem, kp);
        /* The node keeps a copy of the parameters. */
        r = cs->cu->fn.cuGraphAddKernelNode(&node, gr, i > 0 ? &prev : NULL, i > 0, &kn);
        vcu__params_free(o, fe, kp);
        prev = node;
        *off += sizeof(e) + e.len + (8 - e.len % 8) % 8;
    }
    return r;
}

/* Makes g's executable graph gr (r: how making gr went): instantiated
 * for a new run, updated for a kept one.  A graph the driver will not
 * instantiate or update (a launch out of resources, a kernel a graph may
 * not hold or change to): this shape goes launch by launch a while, then
 * is made anew. */
static CUresult vcu__grun_make(vcu__cuda_sess_t *cs, vcu__grun_t *g, CUgraph gr, CUresult r)
{
    CUgraphExecUpdateResultInfo info;
    vcu__cuda_t *cu = cs->cu;

    if (g->ex == NULL) {
        /* Its budget taken by the caller. */
        if (r == CUDA_SUCCESS && (r = cu->fn.cuGraphInstantiate(&g->ex, gr, 0)) != CUDA_SUCCESS) {
            g->ex = NULL;
            g->skip = VCU__GRUN_BACKOFF;
        }
        if (r != CUDA_SUCCESS)
            vcu__mem_give(cs, VCU__GRUN_BYTES);
    } else if (r == CUDA_SUCCESS &&
               (r = cu->fn.cuGraphExecUpdate(g->ex, gr, &info)) != CUDA_SUCCESS) {
        vcu__grun_exec_drop(cs, g);
        g->skip = VCU__GRUN_BACKOFF;
    }
    return r;
}

/*
 * Issues the n launch entries from off (vcu__grun_len() found them) as
 * one graph; *end is then the offset after them.  -1 when it did not
 * launch (nothing of the run has run): the caller issues them one by one.
 */
static int vcu__grun(vcu__cuda_sess_t *cs, const unsigned char *p, size_t off, uint32_t n,
                     size_t *end)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__op_t *o = cs->op;
    struct vcu_cu_launch_req rq;
    CUgraph gr = NULL;
    vcu__grun_t *g;
    CUstream st;
    bool found;
    uint32_t dev;
    CUresult r;

    memcpy(&rq, p + off + sizeof(struct vcu_cu_batch_entry), sizeof(rq));
    dev = rq.hdr.device;
    g = vcu__grun_slot(cs, rq.stream, dev, n, &found);
    if (!found || o == NULL)
        return -1;
    if (g->skip > 0) {
        g->skip--;
        return -1;
    }
    /* As vcu__op_CU_LAUNCH: the device's context current, the stream's.
     * A stream or function of another device's context, which the driver
     * refuses a launch, could be a graph's node there: launch by launch. */
    memset(o, 0, offsetof(vcu__op_t, rb));
    o->cs = cs;
    o->cu = cu;
    o->p = p + off + sizeof(struct vcu_cu_batch_entry);
    o->plen = sizeof(rq);
    if (vcu__enter(o) != 0 || vcu__stream(o, rq.stream, &st) != 0)
        return -1;
    if (rq.stream != VCU_CU_STREAM_LEGACY && rq.stream != VCU_CU_STREAM_PER_THREAD) {
        const vcu__hent_t *se = vcu__htab_get(&cs->tab, rq.stream, VCU__H_STREAM);

        if (se == NULL || se->dev != dev)
            return -1;
    }
    if (g->ex == NULL && vcu__mem_take(cs, VCU__GRUN_BYTES) != 0)
        return -1;
    if (cu->fn.cuGraphCreate(&gr, 0) != CUDA_SUCCESS)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    else
        r = vcu__grun_nodes(cs, o, p, &off, n, dev, gr);
    r = vcu__grun_make(cs, g, gr, r);
    if (r == CUDA_SUCCESS)
        r = cu->fn.cuGraphLaunch(g->ex, st);
    if (gr != NULL)
        cu->fn.cuGraphDestroy(gr);
    if (r != CUDA_SUCCESS)
        return -1;
    *end = off;
    return 0;
}

/*
 * CU_BATCH: the framing is checked whole before any entry runs; then each
 * entry runs as the same request sent alone with VCU_REQ_F_ASYNC (its
 * failure becomes the deferred error, the first one kept), or a run of
 * launches as one graph (vcu__grun()), which fails only before any of
 * them ran.  The reply is the batch's own, with the deferred error as any
 * reply's.
 */
uint32_t vcu__batch(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                    const unsigned char *p, unsigned int nsegs, void *out,
                    size_t *out_len)
{
    struct vcu_cu_batch_req b;
    struct vcu_cu_resp r = { (uint32_t)CUDA_ERROR_INVALID_VALUE, 0 };
    size_t plen = h->payload_len, off, pad;
    int async = (h->flags & VCU_REQ_F_ASYNC) != 0;
    uint32_t i, alone, st = VCU_S_EINVAL;

    memcpy(&b, p, sizeof(b));
    if (nsegs != 0 || b.hdr.device != 0 || b.hdr.ctx != 0 || b.reserved != 0 ||
        b.count == 0 || b.count > VCU_CU_BATCH_MAX || plen > VCU_CU_BATCH_BYTES)
        goto reply;
    for (i = 0, off = sizeof(b); i < b.count; i++) {
        struct vcu_cu_batch_entry e;

        if (plen - off < sizeof(e))
            goto reply;
        memcpy(&e, p + off, sizeof(e));
        off += sizeof(e);
        if (!vcu_batch_op_ok(e.opcode) || e.len < vcu__req_size(e.opcode) || e.len > plen - off)
            goto reply;
        off += e.len;
        pad = (8 - e.len % 8) % 8;
        if (pad > plen - off)
            goto reply;
        off += pad;
    }
    if (off != plen)
        goto reply;

    (void)vcu__op_scratch(cs);       /* for the runs' graphs; without it, none */
    for (i = 0, off = sizeof(b), alone = 0; i < b.count; i++) {
        struct vcu_cu_batch_entry e;
        struct vcu_req_hdr sh = *h;
        struct vcu_cu_resp er;
        vcu__cuda_wait_t *w = NULL;
        size_t elen = 0;

        if (alone == 0) {
            uint32_t n = vcu__grun_len(cs, p, off, plen, b.count - i);

            if (n >= VCU__GRUN_MIN && vcu__grun(cs, p, off, n, &off) == 0) {
                i += n - 1;
                continue;
            }
            /* Not as a graph: the run's launches one by one. */
            alone = n > 0 ? n : 1;
        }
        alone--;
        memcpy(&e, p + off, sizeof(e));
        off += sizeof(e);
        sh.opcode = e.opcode;
        sh.flags = VCU_REQ_F_ASYNC;
        sh.payload_len = e.len;
        sh.nsegs = 0;
        /* Entries never wait (vcu_batch_op_ok): none comes back with w. */
        (void)vcu__cuda_exec(cs, &sh, p + off, NULL, 0, &er, sizeof(er), &elen, NULL, &w);
        if (w != NULL)
            vcu__wait_free(cs, w);
        off += e.len + (8 - e.len % 8) % 8;
    }
    r.result = CUDA_SUCCESS;
    st = VCU_S_OK;
reply:
    r.deferred = vcu__deferred(cs, async, r.result);
    memcpy(out, &r, sizeof(r));
    *out_len = sizeof(r);
    return st;
}
