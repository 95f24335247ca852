/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Graphs, and a batch's runs of launches issued as graphs.
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
static uint32_t vcu__node_check(const struct vcu_cu_graph_node_req *rq,
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
    if (rq->kind < VCU_CU_NODE_KERNEL || rq->kind > VCU_CU_NODE_EMPTY)
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

/* A MEMSET node's parameters. */
static void vcu__node_memset(const struct vcu_cu_graph_node_req *rq, CUDA_MEMSET_NODE_PARAMS *ms)
{
    memset(ms, 0, sizeof(*ms));
    ms->dst = rq->dst;
    ms->pitch = (size_t)rq->pitch;
    ms->value = rq->value;
    ms->elementSize = rq->elem_size;
    ms->width = (size_t)rq->width;
    ms->height = (size_t)rq->height;
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
        vcu__cb_t *cb = vcu__cb_new(o->cs, rq->cookie, 0);

        if (cb == NULL) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
        memset(&hp, 0, sizeof(hp));
        hp.fn = vcu__cb_trampoline;
        hp.userData = cb;
        o->res = VCU__CU(cu, cuGraphAddHostNode, node, ge->u.graph.g, deps, rq->ndeps, &hp);
        break;
    }
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
static uint64_t vcu__node_name(vcu__op_t *o, uint64_t gh, CUgraphNode n)
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
static uint64_t vcu__gmem_bytes(vcu__cuda_t *cu, CUgraph g, int depth)
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
static int vcu__gmem_precharge(vcu__cuda_sess_t *cs, uint32_t d, vcu__hent_t *x)
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
    } else if (t == CU_GRAPH_NODE_TYPE_MEM_FREE) {
        CUdeviceptr p = 0;

        o->res = VCU__CU(o->cu, cuGraphMemFreeNodeGetParams, e->u.node.n, &p);
        o->rb.gmem.kind = VCU_CU_MEM_NODE_FREE;
        o->rb.gmem.dptr = p;
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

uint32_t vcu__op_CU_GRAPH_INSTANTIATE(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUgraphExec ge = NULL;
    const vcu__modset_t *mods;
    vcu__hent_t *x;
    uint64_t h, gmem;

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
    gmem = o->cs->gmem_seen ? vcu__gmem_bytes(o->cu, e->u.graph.g, 0) : 0;
    mods = e->u.graph.mods;         /* e may move in vcu__new */
    x = vcu__new(o, VCU__H_GRAPH_EXEC, &h);
    if (x == NULL) {
        VCU__CU(o->cu, cuGraphExecDestroy, ge);
        return VCU_S_OK;
    }
    x->u.exec.ge = ge;
    x->u.exec.gmem = gmem;
    if (vcu__mods_add_all(o->cs, &x->u.exec.mods, mods) != 0) {
        VCU__CU(o->cu, cuGraphExecDestroy, ge);
        vcu__del(o->cs, h);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->rb.u64.value = h;
    return VCU_S_OK;
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
    };
    struct vcu_cu_graph_set_req rq;
    CUDA_MEMCPY3D copy;
    CUDA_MEMSET_NODE_PARAMS ms;
    CUDA_HOST_NODE_PARAMS hp;
    CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
    const unsigned char *tail;
    vcu__hent_t *xe = NULL, *ge;
    CUgraphExec x = NULL;
    CUgraphNode node;
    CUcontext ctx;
    vcu__cb_t *cb;
    uint32_t st;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.n.ndeps != 0 || rq.n.graph != 0 || rq.n.hdr.device != 0 || rq.n.hdr.reserved != 0 ||
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
    VCU__GET(o, ne, rq.node, VCU__H_GRAPH_NODE);
    node = ne->u.node.n;
    ge = vcu__get(o, ne->u.node.graph, VCU__H_GRAPH);
    if (ge == NULL)
        return VCU_S_OK;
    if (rq.exec != 0) {
        xe = vcu__get(o, rq.exec, VCU__H_GRAPH_EXEC);
        if (xe == NULL)
            return VCU_S_OK;
        x = xe->u.exec.ge;
    }
    o->res = VCU__CU(o->cu, cuGraphNodeGetType, node, &t);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    if (t != want[rq.n.kind]) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    ctx = o->cs->ctx[vcu__dev_of(o)];
    switch (rq.n.kind) {
    case VCU_CU_NODE_KERNEL:
        vcu__set_kernel(o, &rq.n, xe, ge, node, tail);
        break;
    case VCU_CU_NODE_MEMCPY:
        o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecMemcpyNodeSetParams, x, node, &copy, ctx)
                           : VCU__CU(o->cu, cuGraphMemcpyNodeSetParams, node, &copy);
        break;
    case VCU_CU_NODE_MEMSET:
        vcu__node_memset(&rq.n, &ms);
        o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecMemsetNodeSetParams, x, node, &ms, ctx)
                           : VCU__CU(o->cu, cuGraphMemsetNodeSetParams, node, &ms);
        break;
    default:
        cb = vcu__cb_new(o->cs, rq.n.cookie, 0);
        if (cb == NULL) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        memset(&hp, 0, sizeof(hp));
        hp.fn = vcu__cb_trampoline;
        hp.userData = cb;
        o->res = x != NULL ? VCU__CU(o->cu, cuGraphExecHostNodeSetParams, x, node, &hp)
                           : VCU__CU(o->cu, cuGraphHostNodeSetParams, node, &hp);
        break;
    }
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
 * (allocated; the caller frees), their count in *n; o->res set. */
static void vcu__list_nodes(vcu__op_t *o, uint32_t what, CUgraph g, CUgraphNode node,
                            CUgraphNode **out, size_t *n)
{
    vcu__cuda_t *cu = o->cu;
    CUgraphNode *a = NULL;
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
            o->res = VCU__CU(cu, cuGraphGetEdges, g, a, a != NULL ? a + room / 2 : NULL, NULL,
                             &k);
            break;
        case VCU_CU_LIST_DEPS:
            o->res = VCU__CU(cu, cuGraphNodeGetDependencies, node, a, NULL, &k);
            break;
        default:
            o->res = VCU__CU(cu, cuGraphNodeGetDependentNodes, node, a, NULL, &k);
            break;
        }
        if (o->res != CUDA_SUCCESS || pass == 1 || k == 0)
            break;
        room = what == VCU_CU_LIST_EDGES ? 2 * k : k;
        a = calloc(room, sizeof(*a));
        if (a == NULL) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
    }
    *out = a;
    *n = k;
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
    uint64_t gh;
    size_t n = 0, i, per;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.what < VCU_CU_LIST_NODES || rq.what > VCU_CU_LIST_CLONE)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    gh = rq.graph;
    if (rq.what != VCU_CU_LIST_DEPS && rq.what != VCU_CU_LIST_DEPENDENTS) {
        VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
        g = ge->u.graph.g;
    }
    if (rq.what >= VCU_CU_LIST_DEPS) {
        VCU__GET(o, ne, rq.node, VCU__H_GRAPH_NODE);
        node = ne->u.node.n;
        if (rq.what != VCU_CU_LIST_CLONE)
            gh = ne->u.node.graph;
    }
    if (rq.what == VCU_CU_LIST_CLONE) {
        o->res = VCU__CU(o->cu, cuGraphNodeFindInClone, &cn, node, g);
        if (o->res == CUDA_SUCCESS) {
            o->rb.glist.total = 1;
            o->rb.glist.node[0] = vcu__node_handle(o, cn, gh);
            o->rb.glist.count = o->rb.glist.node[0] != 0;
        }
        return VCU_S_OK;
    }
    vcu__list_nodes(o, rq.what, g, node, &a, &n);
    if (o->res != CUDA_SUCCESS) {
        free(a);
        return VCU_S_OK;
    }
    o->rb.glist.total = n;
    per = rq.what == VCU_CU_LIST_EDGES ? VCU_CU_LIST_MAX / 2 : VCU_CU_LIST_MAX;
    for (i = rq.start; i < n && i - rq.start < per; i++) {
        size_t at = i - rq.start;

        if (rq.what == VCU_CU_LIST_EDGES) {
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

/* CU_GRAPH_EDGES: every node must be the graph's. */
uint32_t vcu__op_CU_GRAPH_EDGES(vcu__op_t *o)
{
    struct vcu_cu_graph_edges_req rq;
    CUgraphNode *from;
    CUgraph g;
    uint32_t i;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.add > 1 || rq.count == 0 || rq.count > VCU_CU_MAX_DEPS ||
        (size_t)rq.count * 16 > o->plen - sizeof(rq))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
    g = ge->u.graph.g;
    from = calloc(2 * (size_t)rq.count, sizeof(*from));
    if (from == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
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
        o->res = VCU__CU(o->cu, cuGraphAddDependencies, g, from, from + rq.count, NULL,
                         rq.count);
    else
        o->res = VCU__CU(o->cu, cuGraphRemoveDependencies, g, from, from + rq.count, NULL,
                         rq.count);
out:
    free(from);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_GRAPH_NODE_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, ne, rq.value, VCU__H_GRAPH_NODE);
    o->res = VCU__CU(o->cu, cuGraphDestroyNode, ne->u.node.n);
    if (o->res == CUDA_SUCCESS)
        vcu__del(o->cs, rq.value);
    return VCU_S_OK;
}

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
    if (nsegs != 0 || b.hdr.device != 0 || b.hdr.reserved != 0 || b.reserved != 0 ||
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
