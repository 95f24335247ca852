/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Streams, stream captures, host callbacks and events.
 */
#include "cuda_int.h"

/* --- streams and host callbacks --- */

uint32_t vcu__op_CU_STREAM_CREATE(vcu__op_t *o)
{
    struct vcu_cu_stream_create_req rq;
    CUstream s = NULL;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuStreamCreateWithPriority, &s, rq.flags, (int)rq.priority);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    e = vcu__new(o, VCU__H_STREAM, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuStreamDestroy, s);
        return VCU_S_OK;
    }
    e->u.st = s;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/*
 * Keeps a destroyed stream with work still queued as an orphan, so that
 * context-wide waits still see that work (CUDA releases such a stream
 * once its work is done, too).  -1: destroy it now.
 */
static int vcu__orphan(vcu__op_t *o, CUstream st)
{
    vcu__cuda_t *cu = o->cu;
    uint32_t d = vcu__dev_of(o);
    vcu__orphan_t *or;

    if (o->cs->orphans != NULL)
        vcu__orphans_prune(o->cs);
    /* A stream in a capture is destroyed as it is (NVIDIA's
     * graphMemoryNodes destroys one it captured into): a query would
     * invalidate the capture, so it is asked first. */
    if (vcu__cur(o->cs, o->cs->ctx[d]) != CUDA_SUCCESS || cu->fn.cuStreamQuery == NULL ||
        vcu__capturing(cu, st) || cu->fn.cuStreamQuery(st) != CUDA_ERROR_NOT_READY)
        return -1;
    if (vcu__mem_take(o->cs, sizeof(*or)) != 0)
        return -1;
    or = calloc(1, sizeof(*or));
    if (or == NULL)
        goto err_mem;
    if (vcu__ev_get(o->cs, d, &or->ev) != CUDA_SUCCESS)
        goto err_ev;
    if (VCU__CU(cu, cuEventRecordWithFlags, or->ev, st, 0) != CUDA_SUCCESS) {
        vcu__ev_put(o->cs, d, or->ev);
        goto err_ev;
    }
    or->st = st;
    or->dev = d;
    or->next = o->cs->orphans;
    o->cs->orphans = or;
    return 0;

err_ev:
    free(or);
err_mem:
    vcu__mem_give(o->cs, sizeof(*or));
    return -1;
}

/* Forgets graph entry h and its nodes' entries. */
void vcu__graph_drop(vcu__cuda_sess_t *cs, uint64_t h)
{
    bool more = true;
    uint32_t i;

    vcu__del(cs, h);
    /* Then the body graphs of its conditional nodes, theirs, and so on
     * (the driver's, gone with it): a pass for each level, no recursion
     * however deep the guest nested them.  Then the nodes of them all. */
    while (more) {
        more = false;
        for (i = 0; i < cs->tab.cap; i++) {
            vcu__hent_t *b = &cs->tab.ent[i];

            if (b->type == VCU__H_GRAPH && b->u.graph.parent != 0 &&
                vcu__htab_get(&cs->tab, b->u.graph.parent, VCU__H_GRAPH) == NULL) {
                vcu__del(cs, vcu__htab_handle_at(&cs->tab, i));
                more = true;
            }
        }
    }
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *n = &cs->tab.ent[i];

        if (n->type == VCU__H_GRAPH_NODE &&
            vcu__htab_get(&cs->tab, n->u.node.graph, VCU__H_GRAPH) == NULL)
            vcu__htab_del(&cs->tab, vcu__htab_handle_at(&cs->tab, i));
    }
}

/* Is capture id in progress on a stream of the session?  (Switches
 * contexts.) */
static bool vcu__cap_live(vcu__cuda_sess_t *cs, uint64_t id)
{
    CUstreamCaptureStatus status;
    cuuint64_t sid;
    uint32_t d, i;

    if (cs->cu->fn.cuStreamGetCaptureInfo == NULL)
        return false;
    for (d = 0; d < cs->cu->ndev; d++) {
        status = CU_STREAM_CAPTURE_STATUS_NONE;
        sid = 0;
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS &&
            cs->cu->fn.cuStreamGetCaptureInfo(CU_STREAM_PER_THREAD, &status, &sid, NULL, NULL,
                                              NULL, NULL) == CUDA_SUCCESS &&
            status != CU_STREAM_CAPTURE_STATUS_NONE && sid == id)
            return true;
    }
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        status = CU_STREAM_CAPTURE_STATUS_NONE;
        sid = 0;
        if (e->type == VCU__H_STREAM && vcu__cur(cs, cs->ctx[e->dev]) == CUDA_SUCCESS &&
            cs->cu->fn.cuStreamGetCaptureInfo(e->u.st, &status, &sid, NULL, NULL, NULL, NULL) ==
                CUDA_SUCCESS &&
            status != CU_STREAM_CAPTURE_STATUS_NONE && sid == id)
            return true;
    }
    return false;
}

/*
 * Forgets the graph entries of captures that ended (failed, or their
 * streams destroyed): the driver destroyed or owns those graphs, and a
 * later use of the handle is refused as stale.  After END_CAPTURE and
 * STREAM_DESTROY; nothing to do unless a capture's graph was asked for.
 */
static void vcu__cap_graphs_prune(vcu__cuda_sess_t *cs)
{
    uint32_t i;

    for (i = 0; cs->cap_graphs > 0 && i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_GRAPH && e->u.graph.cap_id != 0 &&
            !vcu__cap_live(cs, e->u.graph.cap_id))
            vcu__graph_drop(cs, vcu__htab_handle_at(&cs->tab, i));
    }
}

CUresult vcu__stream_drop(vcu__op_t *o, uint64_t h)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, VCU__H_STREAM);
    CUresult r;

    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (vcu__orphan(o, e->u.st) == 0) {
        vcu__htab_del(&o->cs->tab, h);
        vcu__cap_graphs_prune(o->cs);       /* an orphan's capture is out of reach */
        return CUDA_SUCCESS;
    }
    r = VCU__CU(o->cu, cuStreamDestroy, e->u.st);
    if (r == CUDA_SUCCESS) {
        vcu__htab_del(&o->cs->tab, h);
        vcu__cap_graphs_prune(o->cs);
    }
    return r;
}

uint32_t vcu__op_CU_STREAM_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = vcu__stream_drop(o, rq.value);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_STREAM_SYNCHRONIZE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    if (vcu__park_stream(o, st) != 0)
        o->res = o->cu->fn.cuStreamSynchronize(st);
    return VCU_S_OK;
}

/*
 * One operation of a CU_STREAM_MEMOPS into *p: CUDA_SUCCESS, or what is
 * wrong with it (an operation cuda.h does not define, or flags it does
 * not define for it, CUDA_ERROR_INVALID_VALUE; an address that is not
 * the session's device memory, naturally aligned, likewise).
 */
static CUresult vcu__memop(vcu__op_t *o, const struct vcu_cu_memop *w,
                           CUstreamBatchMemOpParams *p)
{
    const unsigned int wait_flags = CU_STREAM_WAIT_VALUE_NOR | CU_STREAM_WAIT_VALUE_FLUSH;
    int wait = w->type == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
               w->type == CU_STREAM_MEM_OP_WAIT_VALUE_64;
    int is32 = w->type == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
               w->type == CU_STREAM_MEM_OP_WRITE_VALUE_32;

    memset(p, 0, sizeof(*p));
    switch (w->type) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        /* A write's NO_MEMORY_BARRIER is not of the v2 API. */
        if ((wait ? (w->flags & ~wait_flags) != 0 : w->flags != 0) ||
            (is32 && w->value > UINT32_MAX))
            return CUDA_ERROR_INVALID_VALUE;
        if (w->address % (is32 ? 4 : 8) != 0 || !vcu__owned_range(o, w->address, is32 ? 4 : 8))
            return CUDA_ERROR_INVALID_VALUE;
        if (wait) {
            p->waitValue.operation = (CUstreamBatchMemOpType)w->type;
            p->waitValue.address = (CUdeviceptr)w->address;
            if (is32)
                p->waitValue.value = (cuuint32_t)w->value;
            else
                p->waitValue.value64 = w->value;
            p->waitValue.flags = w->flags;
        } else {
            p->writeValue.operation = (CUstreamBatchMemOpType)w->type;
            p->writeValue.address = (CUdeviceptr)w->address;
            if (is32)
                p->writeValue.value = (cuuint32_t)w->value;
            else
                p->writeValue.value64 = w->value;
        }
        return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
        if (w->flags != 0 || w->address != 0 || w->value != 0)
            return CUDA_ERROR_INVALID_VALUE;
        p->flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
        return CUDA_SUCCESS;
    case CU_STREAM_MEM_OP_BARRIER:
        if ((w->flags != CU_STREAM_MEMORY_BARRIER_TYPE_SYS &&
             w->flags != CU_STREAM_MEMORY_BARRIER_TYPE_GPU) ||
            w->address != 0 || w->value != 0)
            return CUDA_ERROR_INVALID_VALUE;
        p->memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
        p->memoryBarrier.flags = w->flags;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* cuStreamBatchMemOp_v2: every operation checked before any is issued. */
uint32_t vcu__op_CU_STREAM_MEMOPS(vcu__op_t *o)
{
    struct vcu_cu_memops_req rq;
    CUstreamBatchMemOpParams *ops;
    struct vcu_cu_memop w;
    uint32_t i;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.count == 0 || rq.count > VCU_CU_MEMOPS_MAX || rq.flags != 0 || o->nsegs != 0 ||
        o->plen < sizeof(rq) + (size_t)rq.count * sizeof(w))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    ops = calloc(rq.count, sizeof(*ops));
    if (ops == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    for (i = 0; i < rq.count && o->res == CUDA_SUCCESS; i++) {
        memcpy(&w, o->p + sizeof(rq) + (size_t)i * sizeof(w), sizeof(w));
        o->res = vcu__memop(o, &w, &ops[i]);
    }
    if (o->res == CUDA_SUCCESS)
        o->res = VCU__CU(o->cu, cuStreamBatchMemOp, st, rq.count, ops, 0);
    free(ops);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_STREAM_WAIT_EVENT(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.a);
    VCU__GET(o, e, rq.b, VCU__H_EVENT);
    o->res = VCU__CU(o->cu, cuStreamWaitEvent, st, e->u.ev, (unsigned int)rq.c);
    return VCU_S_OK;
}

/*
 * CU_STREAM_CAPTURE_MODE_GLOBAL forbids unsafe calls (cuMemAlloc...) in
 * every thread of the process: one session's capture made the others'
 * fail, and the RAM registration's.  All of a session's driver calls are
 * made by its worker, the thread that begins the capture, so
 * THREAD_LOCAL forbids exactly the calls of the session that GLOBAL
 * did (the worker's own mode stays the default: the guest library keeps
 * cudaThreadExchangeStreamCaptureMode to itself), and nothing of other
 * sessions.
 */
uint32_t vcu__op_CU_STREAM_BEGIN_CAPTURE(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUstreamCaptureMode mode;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.a);
    mode = (CUstreamCaptureMode)rq.b;
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
        mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    o->res = VCU__CU(o->cu, cuStreamBeginCapture, st, mode);
    if (o->res == CUDA_SUCCESS)
        o->cs->capture = true;
    return VCU_S_OK;
}

/* A capture into a graph entry of the guest's (a body graph for one):
 * END_CAPTURE gives that entry back (vcu__cap_graph_adopt). */
uint32_t vcu__op_CU_STREAM_CAPTURE_TO_GRAPH(vcu__op_t *o)
{
    struct vcu_cu_capture_to_graph_req rq;
    CUstreamCaptureMode mode;
    CUgraphNode *deps = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.ndeps > VCU_CU_MAX_DEPS)
        return VCU_S_E2BIG;
    if ((size_t)rq.ndeps * 8 != o->plen - sizeof(rq) || rq.mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
    if (ge->u.graph.cap_id != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;      /* a capture's own graph */
        return VCU_S_OK;
    }
    if (vcu__deps_at(o, sizeof(rq), rq.ndeps, &deps) != 0)
        return VCU_S_OK;
    mode = (CUstreamCaptureMode)rq.mode;
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
        mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;     /* as BEGIN_CAPTURE */
    o->res = VCU__CU(o->cu, cuStreamBeginCaptureToGraph, st, ge->u.graph.g, deps, NULL,
                     rq.ndeps, mode);
    if (o->res == CUDA_SUCCESS)
        o->cs->capture = true;
    free(deps);
    return VCU_S_OK;
}

bool vcu__any_capture(vcu__cuda_sess_t *cs)
{
    uint32_t d, i;

    for (d = 0; d < cs->cu->ndev; d++)
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS &&
            vcu__capturing(cs->cu, CU_STREAM_PER_THREAD))
            return true;
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_STREAM && vcu__cur(cs, cs->ctx[e->dev]) == CUDA_SUCCESS &&
            vcu__capturing(cs->cu, e->u.st))
            return true;
    }
    return false;
}

/*
 * Which launches a capture recorded is not known here (streams join a
 * capture through events, across the session's streams): while any may
 * be in progress, every module launched is pinned in cs->cap_mods, and
 * each captured graph holds all of them.  Conservative, and bounded by
 * the session's modules.  Let go once no stream captures.
 */
static void vcu__capture_settle(vcu__cuda_sess_t *cs)
{
    if (!cs->capture || vcu__any_capture(cs))
        return;
    cs->capture = false;
    vcu__mods_free(cs, cs->cap_mods);
    cs->cap_mods = NULL;
}

/* The handle of the entry a capture owns for graph g, or 0. */
static uint64_t vcu__cap_graph_find(vcu__cuda_sess_t *cs, CUgraph g)
{
    uint32_t i;

    for (i = 0; cs->cap_graphs > 0 && i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_GRAPH && e->u.graph.cap_id != 0 && e->u.graph.g == g)
            return vcu__htab_handle_at(&cs->tab, i);
    }
    return 0;
}

/* The handle of the guest's own entry for graph g (a capture into it,
 * CU_STREAM_CAPTURE_TO_GRAPH), or 0. */
static uint64_t vcu__own_graph_find(vcu__cuda_sess_t *cs, CUgraph g)
{
    uint32_t i;

    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_GRAPH && e->u.graph.cap_id == 0 && e->u.graph.g == g)
            return vcu__htab_handle_at(&cs->tab, i);
    }
    return 0;
}

/*
 * A successful capture's graph: the entry CU_STREAM_CAPTURE_GRAPH made
 * for it becomes the caller's (the same handle), or, for a capture into
 * a graph of the guest's, that graph's entry (its root holding the
 * modules too: a body's kernels run with it), or a new one.  Its kernel
 * nodes may use any module launched during captures.
 */
static void vcu__cap_graph_adopt(vcu__op_t *o, CUgraph g)
{
    vcu__cuda_sess_t *cs = o->cs;
    uint64_t h = vcu__cap_graph_find(cs, g);
    vcu__hent_t *e;

    if (h == 0 && (h = vcu__own_graph_find(cs, g)) != 0) {
        vcu__hent_t *re;

        e = &cs->tab.ent[(uint32_t)h];
        re = e->u.graph.root != 0 ? vcu__htab_get(&cs->tab, e->u.graph.root, VCU__H_GRAPH)
                                  : NULL;
        if (vcu__mods_add_all(cs, &e->u.graph.mods, cs->cap_mods) != 0 ||
            (re != NULL && vcu__mods_add_all(cs, &re->u.graph.mods, cs->cap_mods) != 0)) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
        o->rb.u64.value = h;
        return;
    }
    if (h == 0) {
        vcu__graph_put(o, g, cs->cap_mods);
        return;
    }
    e = &cs->tab.ent[(uint32_t)h];
    e->u.graph.cap_id = 0;
    cs->cap_graphs--;
    if (vcu__mods_add_all(cs, &e->u.graph.mods, cs->cap_mods) != 0) {
        VCU__CU(o->cu, cuGraphDestroy, g);
        vcu__graph_drop(cs, h);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    o->rb.u64.value = h;
}

uint32_t vcu__op_CU_STREAM_END_CAPTURE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraph g = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamEndCapture, st, &g);
    if (o->res == CUDA_SUCCESS && g != NULL)
        vcu__cap_graph_adopt(o, g);
    vcu__cap_graphs_prune(o->cs);
    vcu__capture_settle(o->cs);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_STREAM_CAPTURE_INFO(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamGetCaptureInfo, st, &status, &id, NULL, NULL, NULL, NULL);
    o->rb.cap.status = (uint32_t)status;
    o->rb.cap.id = id;
    return VCU_S_OK;
}

/*
 * The capture's graph under a handle the capture owns: the same entry
 * each time, and the one END_CAPTURE hands over (vcu__cap_graph_adopt).
 * The dependencies are counted only: their nodes have no handles.
 */
/* The handle of capture id's graph g, made at the first ask; 0 (result
 * OUT_OF_MEMORY) over quota. */
static uint64_t vcu__cap_graph_handle(vcu__op_t *o, CUgraph g, uint64_t id)
{
    uint64_t h = vcu__cap_graph_find(o->cs, g);
    vcu__hent_t *e;

    /* A capture into a graph of the guest's: that graph's handle. */
    if (h == 0)
        h = vcu__own_graph_find(o->cs, g);
    if (h == 0) {
        e = vcu__new(o, VCU__H_GRAPH, &h);
        if (e == NULL)
            return 0;
        e->u.graph.g = g;
        e->u.graph.cap_id = id;
        o->cs->cap_graphs++;
    }
    return h;
}

uint32_t vcu__op_CU_STREAM_CAPTURE_GRAPH(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph g = NULL;
    size_t ndeps = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamGetCaptureInfo, st, &status, &id, &g, NULL, NULL, &ndeps);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    o->rb.capg.status = (uint32_t)status;
    o->rb.capg.id = id;
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || g == NULL || id == 0)
        return VCU_S_OK;
    o->rb.capg.ndeps = ndeps;
    o->rb.capg.graph = vcu__cap_graph_handle(o, g, id);
    return VCU_S_OK;
}

/* Nodes go with their graph (vcu__graph_drop). */
uint64_t vcu__node_handle(vcu__op_t *o, CUgraphNode n, uint64_t gh)
{
    vcu__cuda_sess_t *cs = o->cs;
    vcu__hent_t *e;
    uint32_t i;
    uint64_t h;

    for (i = 0; i < cs->tab.cap; i++) {
        e = &cs->tab.ent[i];
        if (e->type == VCU__H_GRAPH_NODE && e->u.node.n == n && e->u.node.graph == gh)
            return vcu__htab_handle_at(&cs->tab, i);
    }
    e = vcu__new(o, VCU__H_GRAPH_NODE, &h);
    if (e == NULL)
        return 0;
    e->u.node.n = n;
    e->u.node.graph = gh;
    return h;
}

uint32_t vcu__op_CU_STREAM_CAPTURE_DEPS(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUgraphNode *deps = NULL;
    cuuint64_t id = 0;
    CUgraph g = NULL;
    size_t ndeps = 0, i;
    uint64_t gh;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamGetCaptureInfo, st, &status, &id, &g, &deps, NULL, &ndeps);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    o->rb.capd.status = (uint32_t)status;
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || g == NULL || id == 0)
        return VCU_S_OK;
    gh = vcu__cap_graph_handle(o, g, id);
    if (gh == 0)
        return VCU_S_OK;
    o->rb.capd.graph = gh;
    o->rb.capd.ndeps = ndeps;
    for (i = 0; deps != NULL && i < ndeps && i < VCU_CU_MAX_CAPTURE_DEPS; i++) {
        o->rb.capd.node[i] = vcu__node_handle(o, deps[i], gh);
        if (o->rb.capd.node[i] == 0)
            return VCU_S_OK;
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_STREAM_UPDATE_DEPS(vcu__op_t *o)
{
    struct vcu_cu_update_deps_req rq;
    CUgraphNode nodes[VCU_CU_MAX_CAPTURE_DEPS];
    uint32_t i;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.ndeps > VCU_CU_MAX_CAPTURE_DEPS ||
        (rq.flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES &&
         rq.flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    for (i = 0; i < rq.ndeps; i++) {
        VCU__GET(o, e, rq.node[i], VCU__H_GRAPH_NODE);
        nodes[i] = e->u.node.n;
    }
    o->res = VCU__CU(o->cu, cuStreamUpdateCaptureDependencies, st, nodes, NULL, rq.ndeps,
                     rq.flags);
    return VCU_S_OK;
}

/*
 * The session's capture interaction mode: one thread makes all of the
 * session's calls, so the mode a guest thread set last stands for the
 * session (cudaMalloc under a RELAXED guard during a capture, as
 * PyTorch's allocator does).  Set on the thread by vcu__enter, for this
 * session's calls only.  The previous one is returned.
 */
uint32_t vcu__op_CU_THREAD_CAPTURE_MODE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureMode prev = o->cs->cap_mode;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.value > CU_STREAM_CAPTURE_MODE_RELAXED) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (o->cu->fn.cuThreadExchangeStreamCaptureMode == NULL) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    o->cs->cap_mode = (CUstreamCaptureMode)rq.value;
    o->rb.u64.value = (uint64_t)prev;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_STREAM_HOST_FUNC(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    vcu__cb_t *cb;
    int oneshot;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.a);
    if (o->cu->fn.cuLaunchHostFunc == NULL) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    /* In a stream capture the call becomes a host node of the graph,
     * which may run any number of times (or never): the record must then
     * live as long as the session, as a graph's HOST node's does. */
    oneshot = !vcu__capturing(o->cu, st);
    cb = vcu__cb_new(o->cs, rq.b, oneshot);
    if (cb == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = o->cu->fn.cuLaunchHostFunc(st, vcu__cb_trampoline, cb);
    /* On failure CUDA never calls it, so a one-shot record is still ours
     * (a persistent one is on the session's list, freed with it). */
    if (o->res != CUDA_SUCCESS && oneshot)
        vcu__cb_free(cb);
    return VCU_S_OK;
}

/* --- events --- */

uint32_t vcu__op_CU_EVENT_CREATE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUevent ev = NULL;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.value > UINT32_MAX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuEventCreate, &ev, (unsigned int)rq.value);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    e = vcu__new(o, VCU__H_EVENT, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuEventDestroy, ev);
        return VCU_S_OK;
    }
    e->u.ev = ev;
    e->xflags = (uint32_t)rq.value;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

CUresult vcu__event_drop(vcu__op_t *o, uint64_t h)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, VCU__H_EVENT);
    vcu__cuda_wait_t *w;
    CUresult r;

    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    w = vcu__gev_waiter(o->cs, e->u.ev);
    if (w != NULL) {
        /* A parked synchronize still looks at it: it destroys it. */
        w->own_gev = 1;
        vcu__htab_del(&o->cs->tab, h);
        vcu__ipc_gone(o->cs, VCU_CU_IPC_EVENT, h);
        return CUDA_SUCCESS;
    }
    r = VCU__CU(o->cu, cuEventDestroy, e->u.ev);
    if (r == CUDA_SUCCESS) {
        vcu__htab_del(&o->cs->tab, h);
        vcu__ipc_gone(o->cs, VCU_CU_IPC_EVENT, h);
    }
    return r;
}

uint32_t vcu__op_CU_EVENT_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = vcu__event_drop(o, rq.value);
    return VCU_S_OK;
}

/* Before e is recorded again: a parked synchronize waits for the record
 * before this one, so it keeps the old CUevent and the guest's handle
 * gets a new one. */
void vcu__event_rerecord(vcu__op_t *o, vcu__hent_t *e)
{
    vcu__cuda_wait_t *w;
    CUevent ev = NULL;

    /* An interprocess event is one event in every process that opened
     * it: it stays, and the parked synchronize waits for this record. */
    if (e->xflags & CU_EVENT_INTERPROCESS)
        return;
    w = vcu__gev_waiter(o->cs, e->u.ev);

    if (w != NULL && VCU__CU(o->cu, cuEventCreate, &ev, e->xflags) == CUDA_SUCCESS) {
        w->own_gev = 1;
        e->u.ev = ev;
    }
}

uint32_t vcu__op_CU_EVENT_RECORD(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.c & ~(uint64_t)CU_EVENT_RECORD_EXTERNAL) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__GET(o, e, rq.a, VCU__H_EVENT);
    VCU__STREAM(o, st, rq.b);
    vcu__event_rerecord(o, e);
    o->res = VCU__CU(o->cu, cuEventRecordWithFlags, e->u.ev, st, (unsigned int)rq.c);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_EVENT_SYNCHRONIZE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_EVENT);
    if (o->cu->fn.cuEventQuery == NULL || (o->wait = vcu__wait_new(o->cs)) == NULL) {
        o->res = VCU__CU(o->cu, cuEventSynchronize, e->u.ev);
        return VCU_S_OK;
    }
    /* Polled itself: it has no stream of its own to record behind. */
    o->wait->gev = e->u.ev;
    o->wait->gdev = e->dev;
    o->cs->ngev++;
    return VCU_S_OK;
}
