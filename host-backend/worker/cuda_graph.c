/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Graphs and graph memory.  Conditional nodes: cuda_graph_cond.c; a
 * batch's runs of launches issued as graphs: cuda_batch.c.
 */
#include "cuda_int.h"

/* --- graphs --- */

/* A handle for a new graph whose kernel nodes use the modules in mods. */
uint32_t vcu__graph_put(vcu__op_t *o, CUgraph g, const vcu__modset_t *mods)
{
    vcu__hent_t *e;
    uint64_t h;

    e = vcu__new(o, VCU__H_GRAPH, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuGraphDestroy, g);
        return VCU_S_OK;
    }
    e->u.graph.g = g;
    if (vcu__mods_add_all(o->cs, &e->u.graph.mods, mods) != 0) {
        VCU__CU(o->cu, cuGraphDestroy, g);
        vcu__del(o->cs, h);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->rb.u64.value = h;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_CREATE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraph g = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.value > UINT32_MAX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphCreate, &g, (unsigned int)rq.value);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    return vcu__graph_put(o, g, NULL);
}

uint32_t vcu__op_CU_GRAPH_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH);
    /* A capture's graph is the capture's (cuda.h); a conditional node's
     * body graph its node's. */
    if (e->u.graph.cap_id != 0 || e->u.graph.parent != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphDestroy, e->u.graph.g);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    vcu__graph_drop(o->cs, rq.value);
    return VCU_S_OK;
}

/*
 * A MEMCPY node's shape (vcu_proto.h) as a copy between device
 * addresses: 0, or VCU_S_EINVAL for a shape no copy has, or one whose
 * extent wraps the address space on either side.
 */
static uint32_t vcu__node_copy(const struct vcu_cu_graph_node_req *rq, CUDA_MEMCPY3D *m)
{
    uint64_t h = rq->height ? rq->height : 1, d = rq->depth ? rq->depth : 1;
    uint64_t sp = rq->src_pitch ? rq->src_pitch : rq->width;
    uint64_t dp = rq->dst_pitch ? rq->dst_pitch : rq->width;
    uint64_t sr = rq->src_rows ? rq->src_rows : h, dr = rq->dst_rows ? rq->dst_rows : h;
    const uint64_t side[2][3] = { { rq->src, sp, sr }, { rq->dst, dp, dr } };

    if (rq->width == 0 || rq->reserved != 0 || rq->stage > VCU_CU_STAGE_OUT ||
        (rq->stage != VCU_CU_STAGE_NONE && rq->cookie == 0))
        return VCU_S_EINVAL;
    if (h > (uint64_t)INT32_MAX || d > (uint64_t)INT32_MAX)
        return VCU_S_EINVAL;
    for (int i = 0; i < 2; i++) {
        uint64_t base = side[i][0], pitch = side[i][1], rows = side[i][2], span, t;

        if ((h > 1 || d > 1) && pitch < rq->width)
            return VCU_S_EINVAL;
        if (d > 1 && rows < h)
            return VCU_S_EINVAL;
        /* The last byte: base + ((d-1)*rows + h-1)*pitch + width - 1. */
        if (__builtin_mul_overflow(d - 1, rows, &t) || __builtin_add_overflow(t, h - 1, &t) ||
            __builtin_mul_overflow(t, pitch, &span) ||
            __builtin_add_overflow(span, rq->width - 1, &span) ||
            __builtin_add_overflow(base, span, &t))
            return VCU_S_EINVAL;
    }
    memset(m, 0, sizeof(*m));
    m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m->srcDevice = rq->src;
    m->srcPitch = (size_t)sp;
    m->srcHeight = (size_t)sr;
    m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m->dstDevice = rq->dst;
    m->dstPitch = (size_t)dp;
    m->dstHeight = (size_t)dr;
    m->WidthInBytes = (size_t)rq->width;
    m->Height = (size_t)h;
    m->Depth = (size_t)d;
    return 0;
}

/*
 * A copy staged through a guest host function (VCU_CU_STAGE_IN: the
 * function, then the copy; OUT: the copy, then the function), as one
 * child-graph node of g: one node to the guest, as NVIDIA's one memcpy
 * node with pageable memory is.  The child graph is cloned into the node.
 */
static CUresult vcu__staged_copy(vcu__op_t *o, CUgraphNode *node, CUgraph g,
                                 const CUgraphNode *deps, uint32_t ndeps,
                                 const CUDA_MEMCPY3D *m, uint32_t stage, vcu__cb_t *cb)
{
    vcu__cuda_t *cu = o->cu;
    CUcontext ctx = o->cs->ctx[vcu__dev_of(o)];
    CUDA_HOST_NODE_PARAMS hp = { .fn = vcu__cb_trampoline, .userData = cb };
    CUgraph child = NULL;
    CUgraphNode a = NULL, b = NULL;
    CUresult r;

    r = VCU__CU(cu, cuGraphCreate, &child, 0);
    if (r != CUDA_SUCCESS)
        return r;
    if (stage == VCU_CU_STAGE_IN) {
        r = VCU__CU(cu, cuGraphAddHostNode, &a, child, NULL, 0, &hp);
        if (r == CUDA_SUCCESS)
            r = VCU__CU(cu, cuGraphAddMemcpyNode, &b, child, &a, 1, m, ctx);
    } else {
        r = VCU__CU(cu, cuGraphAddMemcpyNode, &a, child, NULL, 0, m, ctx);
        if (r == CUDA_SUCCESS)
            r = VCU__CU(cu, cuGraphAddHostNode, &b, child, &a, 1, &hp);
    }
    if (r == CUDA_SUCCESS)
        r = VCU__CU(cu, cuGraphAddChildGraphNode, node, g, deps, ndeps, child);
    VCU__CU(cu, cuGraphDestroy, child);
    return r;
}

/* The checks of a CU_GRAPH_ADD_NODE request (or a CU_GRAPH_NODE_SET
 * request's node) before it runs, whose room bytes after the struct start
 * at after; and a copy node's descriptor (copy); *tail is where a
 * kernel's parameters start.  VCU_S_OK, or the status it gets. */
uint32_t vcu__node_check(const struct vcu_cu_graph_node_req *rq,
                         const unsigned char *after, size_t room, CUDA_MEMCPY3D *copy,
                         const unsigned char **tail)
{
    if (rq->ndeps > VCU_CU_MAX_DEPS)
        return VCU_S_E2BIG;
    if ((size_t)rq->ndeps * 8 > room)
        return VCU_S_EINVAL;
    room -= (size_t)rq->ndeps * 8;
    *tail = after + (size_t)rq->ndeps * 8;
    if (rq->kind == VCU_CU_NODE_KERNEL &&
        !vcu__param_bytes_ok(rq->param_bytes, room))
        return VCU_S_EINVAL;
    if (rq->kind == VCU_CU_NODE_MEMSET && rq->elem_size != 1 && rq->elem_size != 2 &&
        rq->elem_size != 4)
        return VCU_S_EINVAL;
    if (rq->kind < VCU_CU_NODE_KERNEL || rq->kind > VCU_CU_NODE_EVENT_WAIT)
        return VCU_S_EINVAL;
    if (rq->kind == VCU_CU_NODE_MEMCPY && vcu__node_copy(rq, copy) != 0)
        return VCU_S_EINVAL;
    return VCU_S_OK;
}

/* The new node's dependencies, ndeps session node handles at byte off
 * of the payload (the caller checked they are there), into *deps
 * (allocated when there are any; the caller frees).  -1 (o->res set)
 * where one is not the session's or out of memory. */
int vcu__deps_at(vcu__op_t *o, size_t off, uint32_t ndeps, CUgraphNode **deps)
{
    uint32_t i;

    if (ndeps > 0) {
        *deps = calloc(ndeps, sizeof(**deps));
        if (*deps == NULL) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return -1;
        }
    }
    for (i = 0; i < ndeps; i++) {
        uint64_t dh;
        vcu__hent_t *de;

        memcpy(&dh, o->p + off + (size_t)i * 8, 8);
        de = vcu__get(o, dh, VCU__H_GRAPH_NODE);
        if (de == NULL)
            return -1;
        (*deps)[i] = de->u.node.n;
    }
    return 0;
}

static int vcu__node_deps(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                          CUgraphNode **deps)
{
    return vcu__deps_at(o, sizeof(*rq), rq->ndeps, deps);
}

/* Adds a kernel node to graph entry ge (parameters at tail); sets o->res. */
static void vcu__node_kernel(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                             vcu__hent_t *ge, const CUgraphNode *deps,
                             const unsigned char *tail, CUgraphNode *node)
{
    CUDA_KERNEL_NODE_PARAMS kn;
    vcu__hent_t *fe = vcu__get(o, rq->function, VCU__H_FUNCTION);
    void **kp;

    if (fe == NULL)
        return;
    /* The graph holds the module for as long as it (or an exec made
     * from it) may run the function. */
    if (vcu__mods_add(o->cs, &ge->u.graph.mods, fe->u.fn.mod) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    /* A body graph's kernels run with its root graph's execs. */
    if (ge->u.graph.root != 0) {
        vcu__hent_t *re = vcu__htab_get(&o->cs->tab, ge->u.graph.root, VCU__H_GRAPH);

        if (re != NULL && vcu__mods_add(o->cs, &re->u.graph.mods, fe->u.fn.mod) != 0) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
    }
    kp = vcu__params(o, fe, tail, rq->param_bytes);
    if (kp == NULL)
        return;
    vcu__kernel_node(&kn, fe, rq->grid, rq->block, rq->shared_mem, kp);
    /* CUDA copies the parameter values into the node. */
    o->res = VCU__CU(o->cu, cuGraphAddKernelNode, node, ge->u.graph.g, deps, rq->ndeps, &kn);
    vcu__params_free(o, fe, kp);
}

/* Adds a copy node (copy), staged through a guest host function if the
 * request says so, to graph g; sets o->res. */
static void vcu__node_memcpy(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq, CUgraph g,
                             const CUgraphNode *deps, const CUDA_MEMCPY3D *copy,
                             CUgraphNode *node)
{
    vcu__cb_t *cb;

    if (rq->stage == VCU_CU_STAGE_NONE) {
        o->res = VCU__CU(o->cu, cuGraphAddMemcpyNode, node, g, deps, rq->ndeps, copy,
                         o->cs->ctx[vcu__dev_of(o)]);
        return;
    }
    cb = vcu__cb_new(o->cs, rq->cookie, 0);
    if (cb == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    o->res = vcu__staged_copy(o, node, g, deps, rq->ndeps, copy, rq->stage, cb);
}

int vcu__node_host(vcu__op_t *o, uint64_t cookie, CUDA_HOST_NODE_PARAMS *hp)
{
    vcu__cb_t *cb = vcu__cb_new(o->cs, cookie, 0);

    if (cb == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return -1;
    }
    memset(hp, 0, sizeof(*hp));
    hp->fn = vcu__cb_trampoline;
    hp->userData = cb;
    return 0;
}

/* A MEMSET node's parameters. */
void vcu__node_memset(const struct vcu_cu_graph_node_req *rq, CUDA_MEMSET_NODE_PARAMS *ms)
{
    memset(ms, 0, sizeof(*ms));
    ms->dst = rq->dst;
    ms->pitch = (size_t)rq->pitch;
    ms->value = rq->value;
    ms->elementSize = rq->elem_size;
    ms->width = (size_t)rq->width;
    ms->height = (size_t)rq->height;
}

/* Is graph handle c the graph gh, or one holding it (a parent, at any
 * depth)?  Such a child would hold its own parent. */
static bool vcu__graph_holds(vcu__cuda_sess_t *cs, uint64_t c, uint64_t gh)
{
    uint32_t depth = 0;

    while (gh != 0 && depth++ <= cs->tab.cap) {
        vcu__hent_t *e;

        if (gh == c)
            return true;
        e = vcu__htab_get(&cs->tab, gh, VCU__H_GRAPH);
        if (e == NULL)
            return false;
        gh = e->u.graph.parent;
    }
    return false;
}

/* *set (a graph's or an exec's modules) gets those child graph entry
 * ce's kernels use: its own, its root's if it is a body or a child
 * node's graph (its bodies' are there), a capture's.  0, or -1 with
 * o->res set. */
int vcu__mods_of_child(vcu__op_t *o, vcu__modset_t **set, vcu__hent_t *ce)
{
    vcu__cuda_sess_t *cs = o->cs;
    vcu__hent_t *re = ce->u.graph.root != 0
                          ? vcu__htab_get(&cs->tab, ce->u.graph.root, VCU__H_GRAPH)
                          : NULL;

    if ((ce->u.graph.cap_id != 0 && vcu__mods_add_all(cs, set, cs->cap_mods) != 0) ||
        vcu__mods_add_all(cs, set, ce->u.graph.mods) != 0 ||
        (re != NULL && vcu__mods_add_all(cs, set, re->u.graph.mods) != 0)) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return -1;
    }
    return 0;
}

/* Adds a child graph node (a clone of the graph named by rq->function)
 * to graph entry ge, which holds its modules from now on (and its root
 * too, ge being a body); sets o->res. */
static void vcu__node_child(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                            vcu__hent_t *ge, const CUgraphNode *deps, CUgraphNode *node)
{
    vcu__hent_t *ce = vcu__get(o, rq->function, VCU__H_GRAPH), *re;

    if (ce == NULL)
        return;
    if (vcu__graph_holds(o->cs, rq->function, rq->graph)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return;
    }
    re = ge->u.graph.root != 0 ? vcu__htab_get(&o->cs->tab, ge->u.graph.root, VCU__H_GRAPH)
                               : NULL;
    if (vcu__mods_of_child(o, &ge->u.graph.mods, ce) != 0 ||
        (re != NULL && vcu__mods_of_child(o, &re->u.graph.mods, ce) != 0))
        return;
    o->res = VCU__CU(o->cu, cuGraphAddChildGraphNode, node, ge->u.graph.g, deps, rq->ndeps,
                     ce->u.graph.g);
}

/* Adds an event record or wait node of the event rq->function names. */
static void vcu__node_event(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq, CUgraph g,
                            const CUgraphNode *deps, CUgraphNode *node)
{
    vcu__hent_t *ee = vcu__get(o, rq->function, VCU__H_EVENT);

    if (ee == NULL)
        return;
    if (rq->kind == VCU_CU_NODE_EVENT_RECORD)
        o->res = VCU__CU(o->cu, cuGraphAddEventRecordNode, node, g, deps, rq->ndeps,
                         ee->u.ev);
    else
        o->res = VCU__CU(o->cu, cuGraphAddEventWaitNode, node, g, deps, rq->ndeps, ee->u.ev);
}

/* Adds the request's node to graph entry ge, into *node; sets o->res. */
static void vcu__node_add(vcu__op_t *o, const struct vcu_cu_graph_node_req *rq,
                          vcu__hent_t *ge, const CUgraphNode *deps, const unsigned char *tail,
                          const CUDA_MEMCPY3D *copy, CUgraphNode *node)
{
    vcu__cuda_t *cu = o->cu;

    switch (rq->kind) {
    case VCU_CU_NODE_KERNEL:
        vcu__node_kernel(o, rq, ge, deps, tail, node);
        break;
    case VCU_CU_NODE_MEMCPY:
        vcu__node_memcpy(o, rq, ge->u.graph.g, deps, copy, node);
        break;
    case VCU_CU_NODE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS ms;

        vcu__node_memset(rq, &ms);
        o->res = VCU__CU(cu, cuGraphAddMemsetNode, node, ge->u.graph.g, deps, rq->ndeps, &ms,
                         o->cs->ctx[vcu__dev_of(o)]);
        break;
    }
    case VCU_CU_NODE_HOST: {
        CUDA_HOST_NODE_PARAMS hp;

        if (vcu__node_host(o, rq->cookie, &hp) != 0)
            return;
        o->res = VCU__CU(cu, cuGraphAddHostNode, node, ge->u.graph.g, deps, rq->ndeps, &hp);
        break;
    }
    case VCU_CU_NODE_CHILD:
        vcu__node_child(o, rq, ge, deps, node);
        break;
    case VCU_CU_NODE_EVENT_RECORD:
    case VCU_CU_NODE_EVENT_WAIT:
        vcu__node_event(o, rq, ge->u.graph.g, deps, node);
        break;
    default:
        o->res = VCU__CU(cu, cuGraphAddEmptyNode, node, ge->u.graph.g, deps, rq->ndeps);
        break;
    }
}

uint32_t vcu__op_CU_GRAPH_ADD_NODE(vcu__op_t *o)
{
    struct vcu_cu_graph_node_req rq;
    CUDA_MEMCPY3D copy;
    CUgraphNode *deps = NULL, node = NULL;
    const unsigned char *tail;
    vcu__hent_t *e;
    uint32_t st;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    st = vcu__node_check(&rq, o->p + sizeof(rq), o->plen - sizeof(rq), &copy, &tail);
    if (st != VCU_S_OK)
        return st;
    VCU__ENTER(o);
    VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
    if (vcu__node_deps(o, &rq, &deps) != 0)
        goto out;
    vcu__node_add(o, &rq, ge, deps, tail, &copy, &node);
    if (o->res != CUDA_SUCCESS)
        goto out;
    e = vcu__new(o, VCU__H_GRAPH_NODE, &h);
    if (e == NULL)
        goto out;                   /* the node stays in the graph, unnamed */
    e->u.node.n = node;
    e->u.node.graph = rq.graph;
    o->rb.u64.value = h;
out:
    free(deps);
    return VCU_S_OK;
}

/* A new node entry for node n of graph entry gh; its handle, or 0 (the
 * node stays in the graph, unnamed; o->res says why). */
uint64_t vcu__node_name(vcu__op_t *o, uint64_t gh, CUgraphNode n)
{
    vcu__hent_t *e;
    uint64_t h;

    e = vcu__new(o, VCU__H_GRAPH_NODE, &h);
    if (e == NULL)
        return 0;
    e->u.node.n = n;
    e->u.node.graph = gh;
    return h;
}

/*
 * CU_GRAPH_CHILD_GRAPH: the child graph node's own graph, named once (the
 * node keeps the handle): a graph entry the guest fills but may not
 * destroy, going with the node (owner) or its graph (parent).
 */
uint32_t vcu__op_CU_GRAPH_CHILD_GRAPH(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
    CUgraph child = NULL;
    vcu__hent_t *ge, *be;
    uint64_t gh, root, bh;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, ne, rq.value, VCU__H_GRAPH_NODE);
    if (ne->u.node.child != 0 &&
        vcu__htab_get(&o->cs->tab, ne->u.node.child, VCU__H_GRAPH) != NULL) {
        o->rb.u64.value = ne->u.node.child;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphNodeGetType, ne->u.node.n, &t);
    if (o->res == CUDA_SUCCESS && t != CU_GRAPH_NODE_TYPE_GRAPH)
        o->res = CUDA_ERROR_INVALID_VALUE;
    if (o->res == CUDA_SUCCESS)
        o->res = VCU__CU(o->cu, cuGraphChildGraphNodeGetGraph, ne->u.node.n, &child);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    gh = ne->u.node.graph;
    ge = vcu__get(o, gh, VCU__H_GRAPH);
    if (ge == NULL)
        return VCU_S_OK;
    root = ge->u.graph.root != 0 ? ge->u.graph.root : gh;
    be = vcu__new(o, VCU__H_GRAPH, &bh);    /* ne and ge may move */
    if (be == NULL)
        return VCU_S_OK;
    be->u.graph.g = child;
    be->u.graph.parent = gh;
    be->u.graph.root = root;
    be->u.graph.owner = rq.value;
    vcu__htab_get(&o->cs->tab, rq.value, VCU__H_GRAPH_NODE)->u.node.child = bh;
    o->rb.u64.value = bh;
    return VCU_S_OK;
}

/* ---- user objects -------------------------------------------------------- */

/*
 * The driver counts a user object's references, wherever they are (the
 * guest's, graphs', their clones' and child nodes', execs' until their
 * work is done) and calls vcu__uobj_dtor when the last goes, on a thread
 * of its choosing; the guest's destructor then runs in the guest as a
 * posted host function (vcu__cb_post).  What the host must know to never
 * name a destroyed object to the driver: the references the guest holds
 * (entry grefs) and those it gave each graph (graph urefs).  While either
 * is not 0 the object lives; the guest may release no more than those.
 * An entry goes once the object is dead (found at its next use, or at a
 * new object's creation), or with the session.
 *
 * vcu__uobj_mu protects each record's gate and dead, taken by the
 * destructor (any thread) and the worker; it is taken before a gate's mu.
 */
struct vcu__uobj_s {
    CUuserObject obj;
    uint64_t cookie;                /* the guest's destructor */
    vcu__gate_t *gate;              /* NULL once the session ends */
    bool dead;                      /* the driver destroyed it */
};

static pthread_mutex_t vcu__uobj_mu = PTHREAD_MUTEX_INITIALIZER;

static void CUDA_CB vcu__uobj_dtor(void *arg)
{
    vcu__uobj_t *u = arg;

    pthread_mutex_lock(&vcu__uobj_mu);
    u->dead = true;
    if (u->gate != NULL)
        vcu__cb_post(u->gate, u->cookie);
    pthread_mutex_unlock(&vcu__uobj_mu);
}

static bool vcu__uobj_dead(vcu__uobj_t *u)
{
    bool d;

    pthread_mutex_lock(&vcu__uobj_mu);
    d = u->dead;
    pthread_mutex_unlock(&vcu__uobj_mu);
    return d;
}

/* An entry's record goes with it (vcu__del), once dead: else the driver
 * may still call its destructor, and it stays (the session's end). */
void vcu__uobj_put(vcu__cuda_sess_t *cs, vcu__uobj_t *u)
{
    bool dead;

    pthread_mutex_lock(&vcu__uobj_mu);
    dead = u->dead;
    u->gate = NULL;
    pthread_mutex_unlock(&vcu__uobj_mu);
    vcu__mem_give(cs, sizeof(*u));
    if (dead)
        free(u);
}

/* The session ends: no destructor reaches its gate from now on; graphs'
 * reference counts go. */
void vcu__uobj_sess_end(vcu__cuda_sess_t *cs)
{
    for (uint32_t i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_UOBJ && e->u.uobj.rec != NULL) {
            vcu__uobj_put(cs, e->u.uobj.rec);
            e->u.uobj.rec = NULL;
        } else if (e->type == VCU__H_GRAPH && e->u.graph.urefs != NULL) {
            free(e->u.graph.urefs);
            vcu__mem_give(cs, (size_t)e->u.graph.nurefs * sizeof(vcu__uref_t));
            e->u.graph.urefs = NULL;
            e->u.graph.nurefs = 0;
        }
    }
}

/* Graph entry e's count of object h's references (slot *out), or NULL. */
static vcu__uref_t *vcu__uref(vcu__hent_t *e, uint64_t h)
{
    for (uint32_t i = 0; i < e->u.graph.nurefs; i++)
        if (e->u.graph.urefs[i].obj == h)
            return &e->u.graph.urefs[i];
    return NULL;
}

/* Does the guest, or a graph it gave references to, hold object h? */
static bool vcu__uobj_held(vcu__cuda_sess_t *cs, uint64_t h, const vcu__hent_t *ue)
{
    if (ue->u.uobj.grefs > 0)
        return true;
    for (uint32_t i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];
        vcu__uref_t *r;

        if (e->type == VCU__H_GRAPH && (r = vcu__uref(e, h)) != NULL && r->count > 0)
            return true;
    }
    return false;
}

/* Entries of objects the driver destroyed go. */
static void vcu__uobj_sweep(vcu__cuda_sess_t *cs)
{
    for (uint32_t i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_UOBJ && e->u.uobj.rec != NULL && vcu__uobj_dead(e->u.uobj.rec))
            vcu__del(cs, vcu__htab_handle_at(&cs->tab, i));
    }
}

uint32_t vcu__op_CU_USER_OBJECT_CREATE(vcu__op_t *o)
{
    struct vcu_cu_uobj_req rq;
    vcu__uobj_t *u;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.object != 0 || rq.graph != 0 || rq.what != 0 || rq.reserved != 0 || rq.cookie == 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    if (rq.count == 0 || rq.count > INT32_MAX || rq.flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    vcu__uobj_sweep(o->cs);
    if (vcu__mem_take(o->cs, sizeof(*u)) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    u = calloc(1, sizeof(*u));
    e = u != NULL ? vcu__new(o, VCU__H_UOBJ, &h) : NULL;
    if (e == NULL) {
        free(u);
        vcu__mem_give(o->cs, sizeof(*u));
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    u->cookie = rq.cookie;
    u->gate = &o->cs->gate;
    o->res = VCU__CU(o->cu, cuUserObjectCreate, &u->obj, u, vcu__uobj_dtor, rq.count,
                     rq.flags);
    if (o->res != CUDA_SUCCESS) {
        vcu__del(o->cs, h);         /* the entry has no record yet */
        free(u);
        vcu__mem_give(o->cs, sizeof(*u));
        return VCU_S_OK;
    }
    e->u.uobj.rec = u;
    e->u.uobj.grefs = rq.count;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/* A graph's count of h's references, made room for (in the budget): the
 * slot, or NULL (o->res set). */
static vcu__uref_t *vcu__uref_slot(vcu__op_t *o, vcu__hent_t *ge, uint64_t h)
{
    vcu__uref_t *r = vcu__uref(ge, h), *n;

    if (r != NULL)
        return r;
    o->res = CUDA_ERROR_OUT_OF_MEMORY;
    if (vcu__mem_take(o->cs, sizeof(*r)) != 0)
        return NULL;
    n = realloc(ge->u.graph.urefs, (ge->u.graph.nurefs + 1) * sizeof(*n));
    if (n == NULL) {
        vcu__mem_give(o->cs, sizeof(*r));
        return NULL;
    }
    o->res = CUDA_ERROR_INVALID_VALUE;
    ge->u.graph.urefs = n;
    r = &n[ge->u.graph.nurefs++];
    memset(r, 0, sizeof(*r));
    r->obj = h;
    return r;
}

uint32_t vcu__op_CU_USER_OBJECT_REF(vcu__op_t *o)
{
    struct vcu_cu_uobj_req rq;
    vcu__hent_t *ge = NULL;
    vcu__uref_t *r = NULL;
    vcu__uobj_t *u;
    bool graph;

    memcpy(&rq, o->p, sizeof(rq));
    graph = rq.what == VCU_CU_UOBJ_GRAPH_RETAIN || rq.what == VCU_CU_UOBJ_GRAPH_RELEASE;
    if (rq.what < VCU_CU_UOBJ_RETAIN || rq.what > VCU_CU_UOBJ_GRAPH_RELEASE ||
        rq.reserved != 0 || rq.cookie != 0 || (!graph && rq.graph != 0))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, ue, rq.object, VCU__H_UOBJ);
    u = ue->u.uobj.rec;
    if (u == NULL || vcu__uobj_dead(u)) {
        vcu__del(o->cs, rq.object);
        o->res = CUDA_ERROR_INVALID_HANDLE;
        return VCU_S_OK;
    }
    if (graph) {
        ge = vcu__get(o, rq.graph, VCU__H_GRAPH);
        if (ge == NULL)
            return VCU_S_OK;
    }
    o->res = CUDA_ERROR_INVALID_VALUE;
    if (rq.count == 0 || rq.count > INT32_MAX ||
        (rq.flags != 0 && (rq.what != VCU_CU_UOBJ_GRAPH_RETAIN ||
                           rq.flags != CU_GRAPH_USER_OBJECT_MOVE)))
        return VCU_S_OK;
    switch (rq.what) {
    case VCU_CU_UOBJ_RETAIN:
        if (!vcu__uobj_held(o->cs, rq.object, ue) ||
            (uint64_t)ue->u.uobj.grefs + rq.count > INT32_MAX)
            return VCU_S_OK;
        o->res = VCU__CU(o->cu, cuUserObjectRetain, u->obj, rq.count);
        if (o->res == CUDA_SUCCESS)
            ue->u.uobj.grefs += rq.count;
        break;
    case VCU_CU_UOBJ_RELEASE:
        if (rq.count > ue->u.uobj.grefs)
            return VCU_S_OK;
        o->res = VCU__CU(o->cu, cuUserObjectRelease, u->obj, rq.count);
        if (o->res == CUDA_SUCCESS)
            ue->u.uobj.grefs -= rq.count;
        break;
    case VCU_CU_UOBJ_GRAPH_RETAIN:
        if (rq.flags == CU_GRAPH_USER_OBJECT_MOVE ? rq.count > ue->u.uobj.grefs
                                                  : !vcu__uobj_held(o->cs, rq.object, ue))
            return VCU_S_OK;
        r = vcu__uref_slot(o, ge, rq.object);
        if (r == NULL || (uint64_t)r->count + rq.count > INT32_MAX)
            return VCU_S_OK;
        o->res = VCU__CU(o->cu, cuGraphRetainUserObject, ge->u.graph.g, u->obj, rq.count,
                         rq.flags);
        if (o->res != CUDA_SUCCESS)
            break;
        r->count += rq.count;
        if (rq.flags == CU_GRAPH_USER_OBJECT_MOVE)
            ue->u.uobj.grefs -= rq.count;
        break;
    default:
        r = vcu__uref(ge, rq.object);
        if (r == NULL || r->count < rq.count)
            return VCU_S_OK;
        o->res = VCU__CU(o->cu, cuGraphReleaseUserObject, ge->u.graph.g, u->obj, rq.count);
        if (o->res == CUDA_SUCCESS)
            r->count -= rq.count;
        break;
    }
    /* The last reference may have gone just now. */
    if (vcu__uobj_dead(u))
        vcu__del(o->cs, rq.object);
    return VCU_S_OK;
}

/* ---- graph memory -------------------------------------------------------- */

/*
 * Graph memory is the driver's, not a pool's: an allocation node's
 * address is fixed when the node is made, its physical memory mapped
 * when a graph holding it is launched (or uploaded) and kept by the
 * device's graph memory (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, this
 * worker process's own) until cuDeviceGraphMemTrim, reused by later
 * launches.  So: an exec knows how many bytes its allocation nodes take
 * (vcu__gmem_bytes, at instantiation); before each launch of such an exec
 * the session's graph memory charge on its device is raised to what is
 * reserved now plus those bytes, unless the exec ran since the driver
 * last released graph memory (its memory is still mapped, and used
 * again: vcu__gmem_precharge; past the VM's quota the launch does not
 * happen, CUDA_ERROR_OUT_OF_MEMORY); after it, and when an exec goes or
 * memory is reported, the charge comes to what is reserved
 * (vcu__gmem_settle).  A release (cuDeviceGraphMemTrim, an exec
 * destroyed) shows as less reserved than charged: every exec of the
 * device then counts as not mapped.  So the driver never reserves more
 * than was charged before the launch that made it reserve.
 */

/* Bytes of g's allocation nodes, its child graphs' included (a few
 * levels: deeper ones are not looked at; conditional bodies may hold no
 * allocation, cuda.h), each in whole VCU__ACCT_GRAIN. */
uint64_t vcu__gmem_bytes(vcu__cuda_t *cu, CUgraph g, int depth)
{
    CUgraphNode *nodes;
    uint64_t sum = 0;
    size_t n = 0, i;

    if (depth > 8 || VCU__CU(cu, cuGraphGetNodes, g, NULL, &n) != CUDA_SUCCESS || n == 0)
        return 0;
    nodes = calloc(n, sizeof(*nodes));
    if (nodes == NULL || VCU__CU(cu, cuGraphGetNodes, g, nodes, &n) != CUDA_SUCCESS) {
        free(nodes);
        return VCU__ACCT_MAX + 1;       /* unknown: no launch of it is admitted */
    }
    for (i = 0; i < n && sum <= VCU__ACCT_MAX; i++) {
        CUgraphNodeType t;
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        CUgraph child;

        if (VCU__CU(cu, cuGraphNodeGetType, nodes[i], &t) != CUDA_SUCCESS)
            continue;
        memset(&ap, 0, sizeof(ap));
        if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
            VCU__CU(cu, cuGraphMemAllocNodeGetParams, nodes[i], &ap) == CUDA_SUCCESS)
            sum += vcu__grain(ap.bytesize);
        else if (t == CU_GRAPH_NODE_TYPE_GRAPH &&
                 VCU__CU(cu, cuGraphChildGraphNodeGetGraph, nodes[i], &child) == CUDA_SUCCESS)
            sum += vcu__gmem_bytes(cu, child, depth + 1);
    }
    free(nodes);
    return sum;
}

/* What the driver reserves for graphs on device d now, in whole grains;
 * 0 when it cannot say. */
static uint64_t vcu__gmem_reserved(vcu__cuda_sess_t *cs, uint32_t d)
{
    cuuint64_t v = 0;

    if (VCU__CU(cs->cu, cuDeviceGetGraphMemAttribute, (CUdevice)cs->cu->host_ordinal[d],
                CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
        return 0;
    return vcu__grain(v);
}

/* Raises d's graph memory charge to what is reserved plus what exec x
 * may map: 0, or -1 past the VM's quota (the charge unchanged). */
int vcu__gmem_precharge(vcu__cuda_sess_t *cs, uint32_t d, vcu__hent_t *x)
{
    uint64_t want, res;
    uint32_t i;

    if (cs->cu->acct == NULL || d >= VCU_CU_MAX_DEVICES)
        return 0;
    res = vcu__gmem_reserved(cs, d);
    if (res < cs->gmem_charge[d]) {
        /* Released since: what any exec had mapped may be gone. */
        for (i = 0; i < cs->tab.cap; i++)
            if (cs->tab.ent[i].type == VCU__H_GRAPH_EXEC && cs->tab.ent[i].dev == d)
                cs->tab.ent[i].u.exec.gmapped = false;
    }
    want = res + (x->u.exec.gmapped ? 0 : x->u.exec.gmem);
    if (want > VCU__ACCT_MAX)
        return -1;
    if (want <= cs->gmem_charge[d])
        return 0;
    if (vcu__charge(cs, d, want - cs->gmem_charge[d]) != 0)
        return -1;
    cs->gmem_charge[d] = want;
    return 0;
}

/* Brings d's graph memory charge to what the driver reserves: given
 * back down to it; up to it (recorded, not admitted: it is taken) if the
 * driver ever reserved more than was charged. */
void vcu__gmem_settle(vcu__cuda_sess_t *cs, uint32_t d)
{
    uint64_t res;

    if (cs->cu->acct == NULL || d >= VCU_CU_MAX_DEVICES || !cs->gmem_seen)
        return;
    res = vcu__gmem_reserved(cs, d);
    if (res < cs->gmem_charge[d])
        vcu__uncharge(cs, d, cs->gmem_charge[d] - res);
    else if (res > cs->gmem_charge[d])
        (void)vcu__acct_add(cs->cu->acct, cs->aslot, d, res - cs->gmem_charge[d]);
    cs->gmem_charge[d] = res;
}

/* Records dptr as graph memory of device d the session may free. */
static int vcu__galloc_add(vcu__op_t *o, uint64_t dptr, uint32_t d)
{
    uint64_t v;

    o->cs->gmem_seen = true;
    if (dptr == 0 || vcu__pset_find(&o->cs->gallocs, dptr, &v))
        return 0;
    if (vcu__mem_take(o->cs, 16) != 0 || vcu__pset_add(&o->cs->gallocs, dptr, d) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return -1;
    }
    return 0;
}

/* Is dptr an address of the session's graph memory? */
int vcu__galloc_has(const vcu__cuda_sess_t *cs, uint64_t dptr)
{
    uint64_t v;

    return dptr != 0 && vcu__pset_find(&cs->gallocs, dptr, &v);
}

/* Captured by a stream-ordered allocation (cuda_mem.c): the driver made
 * an allocation node; its address is graph memory. */
int vcu__galloc_captured(vcu__op_t *o, uint64_t dptr)
{
    return vcu__galloc_add(o, dptr, vcu__dev_of(o));
}

uint32_t vcu__op_CU_GRAPH_ADD_MEM_NODE(vcu__op_t *o)
{
    struct vcu_cu_graph_mem_node_req rq;
    CUgraphNode *deps = NULL, node = NULL;
    uint32_t d = vcu__dev_of(o);

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.ndeps > VCU_CU_MAX_DEPS)
        return VCU_S_E2BIG;
    if ((size_t)rq.ndeps * 8 != o->plen - sizeof(rq) ||
        (rq.kind != VCU_CU_MEM_NODE_ALLOC && rq.kind != VCU_CU_MEM_NODE_FREE))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
    if (vcu__deps_at(o, sizeof(rq), rq.ndeps, &deps) != 0)
        goto out;
    if (rq.kind == VCU_CU_MEM_NODE_ALLOC) {
        CUDA_MEM_ALLOC_NODE_PARAMS ap;

        if (rq.size == 0 || rq.dptr != 0 || vcu__grain(rq.size) > VCU__ACCT_MAX) {
            o->res = rq.size == 0 || rq.dptr != 0 ? CUDA_ERROR_INVALID_VALUE
                                                  : CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        memset(&ap, 0, sizeof(ap));
        ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        ap.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ap.poolProps.location.id = o->cu->host_ordinal[d];
        ap.bytesize = (size_t)rq.size;
        o->res = VCU__CU(o->cu, cuGraphAddMemAllocNode, &node, ge->u.graph.g, deps, rq.ndeps,
                         &ap);
        if (o->res != CUDA_SUCCESS || vcu__galloc_add(o, ap.dptr, d) != 0)
            goto out;
        o->rb.gmem.dptr = ap.dptr;
        o->rb.gmem.size = rq.size;
        o->rb.gmem.device = d;
    } else {
        /* Only the session's graph memory (the driver checks the rest). */
        if (!vcu__galloc_has(o->cs, rq.dptr)) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        o->res = VCU__CU(o->cu, cuGraphAddMemFreeNode, &node, ge->u.graph.g, deps, rq.ndeps,
                         (CUdeviceptr)rq.dptr);
        if (o->res != CUDA_SUCCESS)
            goto out;
        o->rb.gmem.dptr = rq.dptr;
    }
    o->rb.gmem.kind = rq.kind;
    o->rb.gmem.node = vcu__node_name(o, rq.graph, node);
out:
    free(deps);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_MEM_NODE_PARAMS(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraphNodeType t;
    uint32_t d;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH_NODE);
    o->res = VCU__CU(o->cu, cuGraphNodeGetType, e->u.node.n, &t);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUDA_MEM_ALLOC_NODE_PARAMS ap;

        memset(&ap, 0, sizeof(ap));
        o->res = VCU__CU(o->cu, cuGraphMemAllocNodeGetParams, e->u.node.n, &ap);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
        /* The device as the guest numbers it. */
        for (d = 0; d < o->cu->ndev && o->cu->host_ordinal[d] != ap.poolProps.location.id; d++)
            ;
        o->rb.gmem.kind = VCU_CU_MEM_NODE_ALLOC;
        o->rb.gmem.dptr = ap.dptr;
        o->rb.gmem.size = ap.bytesize;
        o->rb.gmem.device = d < o->cu->ndev ? d : vcu__dev_of(o);
    } else {
        o->res = CUDA_ERROR_INVALID_VALUE;
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_MEM_ATTR(vcu__op_t *o)
{
    struct vcu_cu_attr_req rq;
    CUdevice dev;
    cuuint64_t v;
    uint32_t d = vcu__dev_of(o);

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.handle > 1 || rq.reserved != 0)
        return VCU_S_EINVAL;
    switch (rq.attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        if (rq.handle == 1) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            return VCU_S_OK;
        }
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        break;
    default:
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    dev = (CUdevice)o->cu->host_ordinal[d];
    if (rq.handle == 1) {
        /* Only a reset to 0 (cuda.h). */
        if (rq.value != 0) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            return VCU_S_OK;
        }
        v = 0;
        o->res = VCU__CU(o->cu, cuDeviceSetGraphMemAttribute, dev,
                         (CUgraphMem_attribute)rq.attr, &v);
        return VCU_S_OK;
    }
    v = 0;
    o->res = VCU__CU(o->cu, cuDeviceGetGraphMemAttribute, dev, (CUgraphMem_attribute)rq.attr,
                     &v);
    o->rb.u64.value = v;
    /* A trim (cuDeviceGraphMemTrim) may have given memory back. */
    vcu__gmem_settle(o->cs, d);
    return VCU_S_OK;
}
