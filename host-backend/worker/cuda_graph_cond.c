/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Conditional nodes of graphs (cuda_graph.c): their handles, kept per
 * graph, and the nodes with their body graphs.
 */
#include "cuda_int.h"

/* ---- conditional nodes --------------------------------------------------- */

/*
 * The driver numbers a graph's conditional handles 1, 2, ... (driver
 * 580, measured): two graphs' handles may be equal.  cs->conds holds each
 * handle the driver gave under the key (index of its graph's entry, the
 * handle), with the graph's whole handle as value: an entry left by a
 * destroyed graph has another generation and matches nothing.
 */
static uint64_t vcu__cond_key(uint64_t graph, uint64_t ch)
{
    return (graph & 0xffffffffu) << 32 | ch;
}

uint32_t vcu__op_CU_GRAPH_COND_HANDLE(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUgraphConditionalHandle ch = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.b > UINT32_MAX || (rq.c & ~(uint64_t)CU_GRAPH_COND_ASSIGN_DEFAULT) != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, e, rq.a, VCU__H_GRAPH);
    o->res = VCU__CU(o->cu, cuGraphConditionalHandleCreate, &ch, e->u.graph.g,
                     o->cs->ctx[vcu__dev_of(o)], (unsigned int)rq.b, (unsigned int)rq.c);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    /* Kept, so that a node is made only of handles the driver gave. */
    if (ch == 0 || ch >= UINT32_MAX) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;  /* not a number we can keep */
        return VCU_S_OK;
    }
    if ((!vcu__pset_find(&o->cs->conds, vcu__cond_key(rq.a, ch), NULL) &&
         vcu__mem_take(o->cs, 16) != 0) ||
        vcu__pset_add(&o->cs->conds, vcu__cond_key(rq.a, ch), rq.a) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->rb.u64.value = ch;
    return VCU_S_OK;
}

/* Was conditional handle ch made on graph hg (a live graph entry) or on a
 * graph holding it (hg a body, at any depth)?  The parents form a chain
 * up to a graph of no parent. */
static bool vcu__cond_graph_ok(vcu__cuda_sess_t *cs, uint64_t hg, uint64_t ch)
{
    uint32_t depth = 0;
    uint64_t v;

    if (ch == 0 || ch >= UINT32_MAX)
        return false;
    while (hg != 0 && depth++ <= cs->tab.cap) {
        vcu__hent_t *e = vcu__htab_get(&cs->tab, hg, VCU__H_GRAPH);

        if (e == NULL)
            return false;
        if (vcu__pset_find(&cs->conds, vcu__cond_key(hg, ch), &v) && v == hg)
            return true;
        hg = e->u.graph.parent;
    }
    return false;
}

uint32_t vcu__op_CU_GRAPH_ADD_COND_NODE(vcu__op_t *o)
{
    struct vcu_cu_graph_cond_req rq;
    CUgraphNodeParams np;
    CUgraphNode *deps = NULL, node = NULL;
    uint64_t root;
    uint32_t i, d = vcu__dev_of(o);

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.ndeps > VCU_CU_MAX_DEPS)
        return VCU_S_E2BIG;
    if ((size_t)rq.ndeps * 8 != o->plen - sizeof(rq) || rq.reserved != 0 || rq.size == 0 ||
        rq.size > VCU_CU_MAX_COND_BODIES || rq.type > CU_GRAPH_COND_TYPE_SWITCH)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
    root = ge->u.graph.root != 0 ? ge->u.graph.root : rq.graph;
    /* A handle the driver gave for this graph or one holding it, which
     * still lives: no other value reaches the driver. */
    if (!vcu__cond_graph_ok(o->cs, rq.graph, rq.handle)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (vcu__deps_at(o, sizeof(rq), rq.ndeps, &deps) != 0)
        goto out;
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = rq.handle;
    np.conditional.type = (CUgraphConditionalNodeType)rq.type;
    np.conditional.size = rq.size;
    np.conditional.ctx = o->cs->ctx[d];
    o->res = VCU__CU(o->cu, cuGraphAddNode, &node, ge->u.graph.g, deps, NULL, rq.ndeps, &np);
    if (o->res != CUDA_SUCCESS)
        goto out;
    /* phGraph_out: the driver's own array, the node's for its life. */
    if (np.conditional.phGraph_out == NULL) {
        o->res = CUDA_ERROR_UNKNOWN;
        goto out;
    }
    o->rb.cond.node = vcu__node_name(o, rq.graph, node);
    if (o->rb.cond.node == 0)
        goto out;
    /* Each body a graph handle of its own, going with the node's graph. */
    for (i = 0; i < rq.size; i++) {
        vcu__hent_t *be;
        uint64_t bh;

        be = vcu__new(o, VCU__H_GRAPH, &bh);
        if (be == NULL)
            goto out;
        be->u.graph.g = np.conditional.phGraph_out[i];
        be->u.graph.parent = rq.graph;
        be->u.graph.root = root;
        be->u.graph.owner = o->rb.cond.node;
        o->rb.cond.body[i] = bh;
    }
    o->rb.cond.nbodies = rq.size;
out:
    free(deps);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_CLONE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraph g = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH);
    if (e->u.graph.cap_id != 0 && vcu__mods_add_all(o->cs, &e->u.graph.mods, o->cs->cap_mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphClone, &g, e->u.graph.g);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    return vcu__graph_put(o, g, e->u.graph.mods);
}

static uint64_t vcu__exec_put(vcu__op_t *o, vcu__hent_t *e, CUgraphExec ge);

uint32_t vcu__op_CU_GRAPH_INSTANTIATE(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUgraphExec ge = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.a, VCU__H_GRAPH);
    if (e->u.graph.cap_id != 0 && vcu__mods_add_all(o->cs, &e->u.graph.mods, o->cs->cap_mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphInstantiate, &ge, e->u.graph.g, (unsigned long long)rq.b);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    o->rb.u64.value = vcu__exec_put(o, e, ge);
    return VCU_S_OK;
}

/*
 * CU_GRAPH_INSTANTIATE_PARAMS: as CU_GRAPH_INSTANTIATE, with an upload
 * stream and the driver's result and error node.
 */
uint32_t vcu__op_CU_GRAPH_INSTANTIATE_PARAMS(vcu__op_t *o)
{
    struct vcu_cu_graph_inst_req rq;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    CUgraphExec ge = NULL;
    CUstream st = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.graph, VCU__H_GRAPH);
    if ((rq.flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) && vcu__stream(o, rq.stream, &st) != 0)
        return VCU_S_OK;
    if (e->u.graph.cap_id != 0 && vcu__mods_add_all(o->cs, &e->u.graph.mods, o->cs->cap_mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    memset(&ip, 0, sizeof(ip));
    ip.flags = rq.flags;
    ip.hUploadStream = st;
    o->res = VCU__CU(o->cu, cuGraphInstantiateWithParams, &ge, e->u.graph.g, &ip);
    o->rb.ginst.result = (uint32_t)ip.result_out;
    if (o->res != CUDA_SUCCESS) {
        if (ip.hErrNode_out != NULL) {
            CUresult res = o->res;

            o->rb.ginst.error_node = vcu__node_handle(o, ip.hErrNode_out, rq.graph);
            o->res = res;
        }
        return VCU_S_OK;
    }
    o->rb.ginst.exec = vcu__exec_put(o, e, ge);
    return VCU_S_OK;
}

/* A new exec entry for ge, instantiated from graph entry e: its handle,
 * or 0 (o->res set; ge destroyed). */
static uint64_t vcu__exec_put(vcu__op_t *o, vcu__hent_t *e, CUgraphExec ge)
{
    const vcu__modset_t *mods;
    vcu__hent_t *x;
    uint64_t h, gmem;

    gmem = o->cs->gmem_seen ? vcu__gmem_bytes(o->cu, e->u.graph.g, 0) : 0;
    mods = e->u.graph.mods;         /* e may move in vcu__new */
    x = vcu__new(o, VCU__H_GRAPH_EXEC, &h);
    if (x == NULL) {
        VCU__CU(o->cu, cuGraphExecDestroy, ge);
        return 0;
    }
    x->u.exec.ge = ge;
    x->u.exec.gmem = gmem;
    if (vcu__mods_add_all(o->cs, &x->u.exec.mods, mods) != 0) {
        VCU__CU(o->cu, cuGraphExecDestroy, ge);
        vcu__del(o->cs, h);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return 0;
    }
    return h;
}

uint32_t vcu__op_CU_GRAPH_LAUNCH(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.a, VCU__H_GRAPH_EXEC);
    VCU__STREAM(o, st, rq.b);
    /* Launched into a capture, its nodes join the captured graph. */
    if (o->cs->capture && vcu__mods_add_all(o->cs, &o->cs->cap_mods, e->u.exec.mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    if (e->u.exec.gmem == 0) {
        o->res = VCU__CU(o->cu, cuGraphLaunch, e->u.exec.ge, st);
        return VCU_S_OK;
    }
    /* Its allocations may take new GPU memory: charged first. */
    if (vcu__gmem_precharge(o->cs, e->dev, e) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphLaunch, e->u.exec.ge, st);
    if (o->res == CUDA_SUCCESS)
        e->u.exec.gmapped = true;
    vcu__gmem_settle(o->cs, e->dev);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_EXEC_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH_EXEC);
    o->res = VCU__CU(o->cu, cuGraphExecDestroy, e->u.exec.ge);
    if (o->res == CUDA_SUCCESS) {
        uint32_t d = e->dev;
        bool gmem = e->u.exec.gmem != 0;

        vcu__del(o->cs, rq.value);
        if (gmem)
            vcu__gmem_settle(o->cs, d);
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_NODE_COUNT(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    size_t n = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH);
    o->res = VCU__CU(o->cu, cuGraphGetNodes, e->u.graph.g, NULL, &n);
    o->rb.u64.value = n;
    return VCU_S_OK;
}

/* Sets node's kernel parameters (rq, parameters at tail), in exec xe or,
 * xe NULL, in graph entry ge; the module is held by what runs it.  Sets
 * o->res. */
static void vcu__set_kernel(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                            vcu__hent_t *xe, vcu__hent_t *ge, CUgraphNode node,
                            const unsigned char *tail)
{
    CUDA_KERNEL_NODE_PARAMS kn;
    vcu__hent_t *fe = vcu__get(o, rq->function, VCU__H_FUNCTION);
    void **kp;

    if (fe == NULL)
        return;
    if (vcu__mods_add(o->cs, xe != NULL ? &xe->u.exec.mods : &ge->u.graph.mods,
                      fe->u.fn.mod) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    kp = vcu__params(o, fe, tail, rq->param_bytes);
    if (kp == NULL)
        return;
    vcu__kernel_node(&kn, fe, rq->grid, rq->block, rq->shared_mem, kp);
    /* CUDA copies the parameter values into the node. */
    if (xe != NULL)
        o->res = VCU__CU(o->cu, cuGraphExecKernelNodeSetParams, xe->u.exec.ge, node, &kn);
    else
        o->res = VCU__CU(o->cu, cuGraphKernelNodeSetParams, node, &kn);
    vcu__params_free(o, fe, kp);
}

/* An exec's child graph node runs (a copy of) the graph rq->function
 * names, of the same shape (the driver checks); the exec holds its
 * modules from now on.  Sets o->res. */
static void vcu__set_child(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                           vcu__hent_t *xe, CUgraphNode node)
{
    vcu__hent_t *ce = vcu__get(o, rq->function, VCU__H_GRAPH);

    if (ce == NULL || vcu__mods_of_child(o, &xe->u.exec.mods, ce) != 0)
        return;
    o->res = VCU__CU(o->cu, cuGraphExecChildGraphNodeSetParams, xe->u.exec.ge, node,
                     ce->u.graph.g);
}

/* An event node's event, in exec x or (NULL) in its graph.  Sets o->res. */
static void vcu__set_event(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                           CUgraphExec x, CUgraphNode node)
{
    vcu__hent_t *ee = vcu__get(o, rq->function, VCU__H_EVENT);
    CUevent ev;

    if (ee == NULL)
        return;
    ev = ee->u.ev;
    if (rq->kind == VCU_CU_NODE_EVENT_RECORD)
        o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecEventRecordNodeSetEvent, x, node, ev)
                           : VCU__CU(o->cu, cuGraphEventRecordNodeSetEvent, node, ev);
    else
        o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecEventWaitNodeSetEvent, x, node, ev)
                           : VCU__CU(o->cu, cuGraphEventWaitNodeSetEvent, node, ev);
}

/* A host node's new function: its cookie gets a record of its own. */
static void vcu__set_host(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq, CUgraphExec x,
                          CUgraphNode node)
{
    CUDA_HOST_NODE_PARAMS hp;

    if (vcu__node_host(o, rq->cookie, &hp) != 0)
        return;
    o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecHostNodeSetParams, x, node, &hp)
                       : VCU__CU(o->cu, cuGraphHostNodeSetParams, node, &hp);
}

/* The node's new parameters, in the graph or (xe) in an exec of it; the
 * node is of the kind they are for. */
static void vcu__set_params(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                            vcu__hent_t *xe, vcu__hent_t *ge, CUgraphNode node,
                            const CUDA_MEMCPY3D *copy, const unsigned char *tail)
{
    CUgraphExec x = xe != NULL ? xe->u.exec.ge : NULL;
    CUcontext ctx = o->cs->ctx[vcu__dev_of(o)];
    CUDA_MEMSET_NODE_PARAMS ms;

    switch (rq->kind) {
    case VCU_CU_NODE_KERNEL:
        vcu__set_kernel(o, rq, xe, ge, node, tail);
        break;
    case VCU_CU_NODE_MEMCPY:
        o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecMemcpyNodeSetParams, x, node, copy, ctx)
                           : VCU__CU(o->cu, cuGraphMemcpyNodeSetParams, node, copy);
        break;
    case VCU_CU_NODE_MEMSET:
        vcu__node_memset(rq, &ms);
        o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecMemsetNodeSetParams, x, node, &ms, ctx)
                           : VCU__CU(o->cu, cuGraphMemsetNodeSetParams, node, &ms);
        break;
    case VCU_CU_NODE_CHILD:
        vcu__set_child(o, rq, xe, node);
        break;
    case VCU_CU_NODE_EVENT_RECORD:
    case VCU_CU_NODE_EVENT_WAIT:
        vcu__set_event(o, rq, x, node);
        break;
    default:
        vcu__set_host(o, rq, x, node);
        break;
    }
}

/*
 * CU_GRAPH_NODE_SET: checked as CU_GRAPH_ADD_NODE's node is; the node
 * must be of the kind the parameters are for (a staged copy, a child
 * graph here, is not a MEMCPY node).  A host node's new cookie gets a
 * record of its own, kept with the session as CU_GRAPH_ADD_NODE's.
 */
uint32_t vcu__op_CU_GRAPH_NODE_SET(vcu__op_t *o)
{
    static const CUgraphNodeType want[] = {
        [VCU_CU_NODE_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL,
        [VCU_CU_NODE_MEMCPY] = CU_GRAPH_NODE_TYPE_MEMCPY,
        [VCU_CU_NODE_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET,
        [VCU_CU_NODE_HOST] = CU_GRAPH_NODE_TYPE_HOST,
        [VCU_CU_NODE_EMPTY] = CU_GRAPH_NODE_TYPE_EMPTY,
        [VCU_CU_NODE_CHILD] = CU_GRAPH_NODE_TYPE_GRAPH,
        [VCU_CU_NODE_EVENT_RECORD] = CU_GRAPH_NODE_TYPE_EVENT_RECORD,
        [VCU_CU_NODE_EVENT_WAIT] = CU_GRAPH_NODE_TYPE_WAIT_EVENT,
    };
    struct vcu_cu_graph_set_req rq;
    CUDA_MEMCPY3D copy;
    CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
    const unsigned char *tail;
    vcu__hent_t *xe = NULL, *ge;
    uint32_t st;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.n.ndeps != 0 || rq.n.graph != 0 || rq.n.hdr.device != 0 || rq.n.hdr.ctx != 0 ||
        rq.n.kind == VCU_CU_NODE_EMPTY)
        return VCU_S_EINVAL;
    st = vcu__node_check(&rq.n, o->p + sizeof(rq), o->plen - sizeof(rq), &copy, &tail);
    if (st != VCU_S_OK)
        return st;
    VCU__ENTER(o);
    if (rq.n.kind == VCU_CU_NODE_MEMCPY && rq.n.stage != VCU_CU_STAGE_NONE) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    /* A child graph node's graph is changed through its own handle
     * (CU_GRAPH_CHILD_GRAPH); only an exec's copy is set. */
    if (rq.n.kind == VCU_CU_NODE_CHILD && rq.exec == 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__GET(o, ne, rq.node, VCU__H_GRAPH_NODE);
    ge = vcu__get(o, ne->u.node.graph, VCU__H_GRAPH);
    if (ge == NULL)
        return VCU_S_OK;
    if (rq.exec != 0 && (xe = vcu__get(o, rq.exec, VCU__H_GRAPH_EXEC)) == NULL)
        return VCU_S_OK;
    o->res = VCU__CU(o->cu, cuGraphNodeGetType, ne->u.node.n, &t);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    if (t != want[rq.n.kind]) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    vcu__set_params(o, &rq.n, xe, ge, ne->u.node.n, &copy, tail);
    return VCU_S_OK;
}

/*
 * CU_GRAPH_EXEC_UPDATE: the exec holds the graph's modules from now on
 * (the ones it held stay held: it may be running); the error nodes are
 * named as nodes of the graph.
 */
uint32_t vcu__op_CU_GRAPH_EXEC_UPDATE(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUgraphExecUpdateResultInfo info;
    CUresult res;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, xe, rq.a, VCU__H_GRAPH_EXEC);
    VCU__GET(o, ge, rq.b, VCU__H_GRAPH);
    if ((ge->u.graph.cap_id != 0 &&
         vcu__mods_add_all(o->cs, &ge->u.graph.mods, o->cs->cap_mods) != 0) ||
        vcu__mods_add_all(o->cs, &xe->u.exec.mods, ge->u.graph.mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    memset(&info, 0, sizeof(info));
    res = VCU__CU(o->cu, cuGraphExecUpdate, xe->u.exec.ge, ge->u.graph.g, &info);
    o->rb.gupd.info = (uint32_t)info.result;
    /* The handles may move the table's entries: xe and ge are not used
     * after. */
    if (info.errorNode != NULL)
        o->rb.gupd.error_node = vcu__node_handle(o, info.errorNode, rq.b);
    if (info.errorFromNode != NULL)
        o->rb.gupd.error_from = vcu__node_handle(o, info.errorFromNode, rq.b);
    o->res = res;
    return VCU_S_OK;
}

/* The nodes (or edges: from, to) CU_GRAPH_LIST asks for, into *out
 * (allocated; the caller frees), with each edge's data into *ed where ed
 * is not NULL (allocated too), their count in *n; o->res set. */
static void vcu__list_nodes(vcu__op_t *o, uint32_t what, CUgraph g, CUgraphNode node,
                            CUgraphNode **out, CUgraphEdgeData **ed, size_t *n)
{
    vcu__cuda_t *cu = o->cu;
    CUgraphNode *a = NULL;
    CUgraphEdgeData *d = NULL;
    size_t k = 0, room = 0;

    for (int pass = 0; pass < 2; pass++) {
        switch (what) {
        case VCU_CU_LIST_NODES:
            o->res = VCU__CU(cu, cuGraphGetNodes, g, a, &k);
            break;
        case VCU_CU_LIST_ROOTS:
            o->res = VCU__CU(cu, cuGraphGetRootNodes, g, a, &k);
            break;
        case VCU_CU_LIST_EDGES:
            o->res = VCU__CU(cu, cuGraphGetEdges, g, a, a != NULL ? a + room / 2 : NULL, d,
                             &k);
            break;
        case VCU_CU_LIST_DEPS:
            o->res = VCU__CU(cu, cuGraphNodeGetDependencies, node, a, d, &k);
            break;
        default:
            o->res = VCU__CU(cu, cuGraphNodeGetDependentNodes, node, a, d, &k);
            break;
        }
        if (o->res != CUDA_SUCCESS || pass == 1 || k == 0)
            break;
        room = what == VCU_CU_LIST_EDGES ? 2 * k : k;
        a = calloc(room, sizeof(*a));
        if (ed != NULL)
            d = calloc(k, sizeof(*d));
        if (a == NULL || (ed != NULL && d == NULL)) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
    }
    *out = a;
    if (ed != NULL)
        *ed = d;
    else
        free(d);
    *n = k;
}

/* CU_GRAPH_LIST of edge data (VCU_CU_LIST_F_DATA): item i's
 * CUgraphEdgeData as node[i]. */
static void vcu__list_data(vcu__op_t *o, const struct vcu_cu_graph_list_req *rq, CUgraph g,
                           CUgraphNode node)
{
    CUgraphNode *a = NULL;
    CUgraphEdgeData *d = NULL;
    size_t n = 0, i;

    vcu__list_nodes(o, rq->what & ~(VCU_CU_LIST_F_DATA | VCU_CU_LIST_F_LOSSY_OK), g, node, &a,
                    &d, &n);
    if (o->res == CUDA_SUCCESS) {
        o->rb.glist.total = n;
        for (i = rq->start; i < n && i - rq->start < VCU_CU_LIST_MAX; i++) {
            memcpy(&o->rb.glist.node[i - rq->start], &d[i], sizeof(d[i]));
            o->rb.glist.count++;
        }
    }
    free(a);
    free(d);
}

/*
 * CU_GRAPH_LIST: asked whole of the driver each time (the guest pages
 * through a list VCU_CU_LIST_MAX handles at a time); each node listed
 * gets its handle here.
 */
uint32_t vcu__op_CU_GRAPH_LIST(vcu__op_t *o)
{
    struct vcu_cu_graph_list_req rq;
    CUgraphNode *a = NULL, node = NULL, cn = NULL;
    CUgraph g = NULL;
    uint32_t what;
    uint64_t gh;
    size_t n = 0, i, per;

    memcpy(&rq, o->p, sizeof(rq));
    what = rq.what & ~(VCU_CU_LIST_F_DATA | VCU_CU_LIST_F_LOSSY_OK);
    if (what < VCU_CU_LIST_NODES || what > VCU_CU_LIST_CLONE ||
        ((rq.what & (VCU_CU_LIST_F_DATA | VCU_CU_LIST_F_LOSSY_OK)) && what != VCU_CU_LIST_EDGES &&
         what != VCU_CU_LIST_DEPS && what != VCU_CU_LIST_DEPENDENTS))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    gh = rq.graph;
    if (what != VCU_CU_LIST_DEPS && what != VCU_CU_LIST_DEPENDENTS) {
        VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
        g = ge->u.graph.g;
    }
    if (what >= VCU_CU_LIST_DEPS) {
        VCU__GET(o, ne, rq.node, VCU__H_GRAPH_NODE);
        node = ne->u.node.n;
        if (what != VCU_CU_LIST_CLONE)
            gh = ne->u.node.graph;
    }
    if (what == VCU_CU_LIST_CLONE) {
        o->res = VCU__CU(o->cu, cuGraphNodeFindInClone, &cn, node, g);
        if (o->res == CUDA_SUCCESS) {
            o->rb.glist.total = 1;
            o->rb.glist.node[0] = vcu__node_handle(o, cn, gh);
            o->rb.glist.count = o->rb.glist.node[0] != 0;
        }
        return VCU_S_OK;
    }
    if (rq.what & VCU_CU_LIST_F_DATA) {
        vcu__list_data(o, &rq, g, node);
        return VCU_S_OK;
    }
    {
        /* The data asked of the driver too where the guest asks for it
         * next (else a graph with such edges is CUDA_ERROR_LOSSY_QUERY). */
        CUgraphEdgeData *ed = NULL;

        vcu__list_nodes(o, what, g, node, &a, (rq.what & VCU_CU_LIST_F_LOSSY_OK) ? &ed : NULL,
                        &n);
        free(ed);
    }
    if (o->res != CUDA_SUCCESS) {
        free(a);
        return VCU_S_OK;
    }
    o->rb.glist.total = n;
    per = what == VCU_CU_LIST_EDGES ? VCU_CU_LIST_MAX / 2 : VCU_CU_LIST_MAX;
    for (i = rq.start; i < n && i - rq.start < per; i++) {
        size_t at = i - rq.start;

        if (what == VCU_CU_LIST_EDGES) {
            o->rb.glist.node[2 * at] = vcu__node_handle(o, a[i], gh);
            o->rb.glist.node[2 * at + 1] = vcu__node_handle(o, a[n + i], gh);
            if (o->rb.glist.node[2 * at] == 0 || o->rb.glist.node[2 * at + 1] == 0)
                break;
            o->rb.glist.count += 2;
        } else {
            o->rb.glist.node[at] = vcu__node_handle(o, a[i], gh);
            if (o->rb.glist.node[at] == 0)
                break;
            o->rb.glist.count++;
        }
    }
    free(a);
    return VCU_S_OK;
}

/* The count edge data after a CU_GRAPH_EDGES_DATA request's handles,
 * checked: reserved bytes 0 (the driver checks the rest). */
static int vcu__edge_data(const vcu__op_t *o, uint32_t count, CUgraphEdgeData **out)
{
    static const unsigned char zero[sizeof((*out)->reserved)];
    CUgraphEdgeData *d;
    uint32_t i;

    _Static_assert(sizeof(CUgraphEdgeData) == 8, "CUgraphEdgeData is the wire's 8 bytes");
    d = calloc(count, sizeof(*d));
    if (d == NULL)
        return -1;
    memcpy(d, o->p + sizeof(struct vcu_cu_graph_edges_req) + (size_t)count * 16,
           (size_t)count * sizeof(*d));
    for (i = 0; i < count; i++)
        if (memcmp(d[i].reserved, zero, sizeof(zero)) != 0) {
            free(d);
            return 1;
        }
    *out = d;
    return 0;
}

/* CU_GRAPH_EDGES and CU_GRAPH_EDGES_DATA (with_data): every node must be
 * the graph's. */
static uint32_t vcu__graph_edges(vcu__op_t *o, int with_data)
{
    struct vcu_cu_graph_edges_req rq;
    CUgraphEdgeData *ed = NULL;
    CUgraphNode *from;
    CUgraph g;
    uint32_t i;
    int bad;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.add > 1 || rq.count == 0 || rq.count > VCU_CU_MAX_DEPS ||
        (size_t)rq.count * (with_data ? 24 : 16) > o->plen - sizeof(rq))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
    g = ge->u.graph.g;
    if (with_data) {
        bad = vcu__edge_data(o, rq.count, &ed);
        if (bad != 0) {
            o->res = bad > 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
            return VCU_S_OK;
        }
    }
    from = calloc(2 * (size_t)rq.count, sizeof(*from));
    if (from == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    for (i = 0; i < 2 * rq.count; i++) {
        uint64_t h;
        vcu__hent_t *ne;

        memcpy(&h, o->p + sizeof(rq) + (size_t)i * 8, 8);
        ne = vcu__get(o, h, VCU__H_GRAPH_NODE);
        if (ne == NULL)
            goto out;
        if (ne->u.node.graph != rq.graph) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        /* from[0..count-1], then to[0..count-1] */
        from[(i % 2) * rq.count + i / 2] = ne->u.node.n;
    }
    if (rq.add)
        o->res = VCU__CU(o->cu, cuGraphAddDependencies, g, from, from + rq.count, ed,
                         rq.count);
    else
        o->res = VCU__CU(o->cu, cuGraphRemoveDependencies, g, from, from + rq.count, ed,
                         rq.count);
out:
    free(from);
    free(ed);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_EDGES(vcu__op_t *o)
{
    return vcu__graph_edges(o, 0);
}

uint32_t vcu__op_CU_GRAPH_EDGES_DATA(vcu__op_t *o)
{
    return vcu__graph_edges(o, 1);
}

uint32_t vcu__op_CU_GRAPH_NODE_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, ne, rq.value, VCU__H_GRAPH_NODE);
    o->res = VCU__CU(o->cu, cuGraphDestroyNode, ne->u.node.n);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    vcu__del(o->cs, rq.value);
    /* The graphs the node held (a conditional node's bodies, a child
     * graph node's graph) went with it, and theirs. */
    for (uint32_t i = 0; i < o->cs->tab.cap; i++) {
        vcu__hent_t *b = &o->cs->tab.ent[i];

        if (b->type == VCU__H_GRAPH && b->u.graph.owner == rq.value)
            vcu__graph_drop(o->cs, vcu__htab_handle_at(&o->cs->tab, i));
    }
    return VCU_S_OK;
}
