/*
 * libcuda.so.1: editing graphs (nodes' parameters, edges, removal,
 * listing nodes and edges paged from the host) and updating executable
 * graphs, over the host's CU_GRAPH_* opcodes, on the records of
 * cuda_graph.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* ---- editing graphs, updating executable graphs ------------------------ */

/* hNode, a node record; *g its graph. */
CUresult vcu__gnode_arg(CUgraphNode hNode, vcu__gnode_t **out)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(hNode, VCU__K_GNODE))
        return CUDA_ERROR_INVALID_VALUE;
    *out = (vcu__gnode_t *)hNode;
    return CUDA_SUCCESS;
}

/*
 * CU_GRAPH_NODE_SET: node n's new parameters (tmpl, then extra_len bytes
 * of a kernel's), in exec hExec or (NULL) in the node's graph.
 */
static CUresult vcu__node_set(CUgraphExec hExec, vcu__gnode_t *n,
                              const struct vcu_cu_graph_node_req *tmpl, const void *extra,
                              uint32_t extra_len)
{
    struct vcu_cu_graph_set_req *q;
    vcu__gexec_t *x = (vcu__gexec_t *)hExec;
    CUresult e;

    if (x != NULL && (!vcu__reg_has(x, VCU__K_GEXEC) || x->dev != n->g->dev))
        return CUDA_ERROR_INVALID_VALUE;
    q = calloc(1, sizeof(*q) + extra_len);
    if (q == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    q->exec = x != NULL ? x->h : 0;
    q->node = n->h;
    q->n = *tmpl;
    q->n.graph = 0;
    q->n.ndeps = 0;
    if (extra_len)
        memcpy(q + 1, extra, extra_len);
    e = vcu__call(n->g->dev, VCU_OP_CU_GRAPH_NODE_SET, q, (uint32_t)(sizeof(*q) + extra_len),
                  NULL, 0, NULL, 0);
    free(q);
    return e;
}

/* A kernel node's new parameters, in hExec or (NULL) in its graph (and
 * its record then). */
static CUresult vcu__kernel_set(CUgraphExec hExec, CUgraphNode hNode,
                                const CUDA_KERNEL_NODE_PARAMS *p, CUkernel kern)
{
    struct vcu_cu_graph_node_req r;
    vcu__gnode_t *n;
    vcu__func_t *f = NULL;
    char *params;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e != CUDA_SUCCESS)
        return e;
    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    params = malloc(VCU_CU_MAX_PARAM_BYTES);
    if (params == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__kernel_req(n->g, p, kern, &r, params, &f);
    if (e == CUDA_SUCCESS)
        e = vcu__node_set(hExec, n, &r, params, f->param_bytes);
    if (e == CUDA_SUCCESS && hExec == NULL) {
        pthread_mutex_lock(&vcu__drv.lock);
        vcu__keep_kernel(n, p, f, params);
        pthread_mutex_unlock(&vcu__drv.lock);
    }
    free(params);
    return e;
}

/* The 1-ABI kernel struct lacks kern and ctx: the same first fields. */
static void vcu__kernel_v1(CUDA_KERNEL_NODE_PARAMS *p, const CUDA_KERNEL_NODE_PARAMS_v1 *v1)
{
    memset(p, 0, sizeof(*p));
    memcpy(p, v1, sizeof(*v1));
}

VCU__EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    return vcu__kernel_set(NULL, hNode, nodeParams, nodeParams != NULL ? nodeParams->kern : NULL);
}

VCU__EXPORT CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;

    if (nodeParams == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    vcu__kernel_v1(&p, nodeParams);
    return vcu__kernel_set(NULL, hNode, &p, NULL);
}

VCU__EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    if (hGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__kernel_set(hGraphExec, hNode, nodeParams,
                           nodeParams != NULL ? nodeParams->kern : NULL);
}

VCU__EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;

    if (nodeParams == NULL || hGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    vcu__kernel_v1(&p, nodeParams);
    return vcu__kernel_set(hGraphExec, hNode, &p, NULL);
}

/* A copy node's new parameters: device, page-locked or registered memory
 * (pageable memory would need a stage of its own: not supported). */
static CUresult vcu__copy_set(CUgraphExec hExec, CUgraphNode hNode, const CUDA_MEMCPY3D *m,
                              const char *who)
{
    struct vcu_cu_graph_node_req r;
    vcu__gnode_t *n;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e == CUDA_SUCCESS)
        e = vcu__copy_req(NULL, m, &r, who);
    if (e == CUDA_SUCCESS)
        e = vcu__node_set(hExec, n, &r, NULL, 0);
    if (e == CUDA_SUCCESS && hExec == NULL)
        vcu__keep(n, VCU_CU_NODE_MEMCPY, m, sizeof(*m));
    return e;
}

VCU__EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    return vcu__copy_set(NULL, hNode, nodeParams, "cuGraphMemcpyNodeSetParams");
}

VCU__EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    const CUDA_MEMCPY3D *copyParams,
                                                    CUcontext ctx)
{
    (void)ctx;
    if (hGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__copy_set(hGraphExec, hNode, copyParams, "cuGraphExecMemcpyNodeSetParams");
}

static CUresult vcu__memset_set(CUgraphExec hExec, CUgraphNode hNode,
                                const CUDA_MEMSET_NODE_PARAMS *p)
{
    struct vcu_cu_graph_node_req r;
    vcu__gnode_t *n;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e == CUDA_SUCCESS)
        e = vcu__memset_req(p, &r);
    if (e == CUDA_SUCCESS)
        e = vcu__node_set(hExec, n, &r, NULL, 0);
    if (e == CUDA_SUCCESS && hExec == NULL)
        vcu__keep(n, VCU_CU_NODE_MEMSET, p, sizeof(*p));
    return e;
}

VCU__EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    return vcu__memset_set(NULL, hNode, nodeParams);
}

VCU__EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                    CUcontext ctx)
{
    (void)ctx;
    if (hGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__memset_set(hGraphExec, hNode, memsetParams);
}

/* A host node's new function: a persistent cookie of its own, as
 * cuGraphAddHostNode's (the old one stays: a launch may still run it). */
static CUresult vcu__host_set(CUgraphExec hExec, CUgraphNode hNode,
                              const CUDA_HOST_NODE_PARAMS *p)
{
    struct vcu_cu_graph_node_req r;
    vcu__gnode_t *n;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e != CUDA_SUCCESS)
        return e;
    if (p == NULL || p->fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_HOST;
    r.cookie = vcu__hostfn_cookie(p->fn, p->userData);
    if (r.cookie == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__node_set(hExec, n, &r, NULL, 0);
    if (e != CUDA_SUCCESS)
        vcu__hostfn_forget(r.cookie);
    else if (hExec == NULL)
        vcu__keep(n, VCU_CU_NODE_HOST, p, sizeof(*p));
    return e;
}

VCU__EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    return vcu__host_set(NULL, hNode, nodeParams);
}

VCU__EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    if (hGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__host_set(hGraphExec, hNode, nodeParams);
}

_Static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS) == sizeof(CUDA_KERNEL_NODE_PARAMS_v3),
               "kernel node params v2 and v3");

/* An event node's event (kind says which node), in exec hExec (the
 * generated exec call) or (NULL) in its graph, and its record then. */
static CUresult vcu__event_set(CUgraphExec hExec, CUgraphNode hNode, CUevent ev, uint32_t kind)
{
    struct vcu_cu_graph_node_req r;
    vcu__gnode_t *n;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e != CUDA_SUCCESS)
        return e;
    if (hExec != NULL)
        return kind == VCU_CU_NODE_EVENT_RECORD
                   ? cuGraphExecEventRecordNodeSetEvent(hExec, hNode, ev)
                   : cuGraphExecEventWaitNodeSetEvent(hExec, hNode, ev);
    if (!vcu__reg_has(ev, VCU__K_EVENT))
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.function = ((vcu__event_t *)ev)->h;
    e = vcu__node_set(NULL, n, &r, NULL, 0);
    if (e == CUDA_SUCCESS)
        vcu__keep(n, kind, &ev, sizeof(ev));
    return e;
}

VCU__EXPORT CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return vcu__event_set(NULL, hNode, event, VCU_CU_NODE_EVENT_RECORD);
}

VCU__EXPORT CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return vcu__event_set(NULL, hNode, event, VCU_CU_NODE_EVENT_WAIT);
}

/* The exec's child graph node runs childGraph (of the same shape) from
 * now on, and the exec that graph's staged copies too. */
VCU__EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                        CUgraph childGraph)
{
    struct vcu_cu_graph_node_req r;
    vcu__gexec_t *x = (vcu__gexec_t *)hGraphExec;
    vcu__graph_t *c, *top;
    vcu__gnode_t *n;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e == CUDA_SUCCESS)
        e = vcu__graph_arg(childGraph, &c);
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(x, VCU__K_GEXEC) || c->dev != x->dev)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vcu__drv.lock);
    for (top = c; top->parent != NULL; top = top->parent)
        ;
    pthread_mutex_unlock(&vcu__drv.lock);
    if (vcu__stages_copy(&x->stages, &top->stages) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_CHILD;
    r.function = c->h;
    return vcu__node_set(hGraphExec, n, &r, NULL, 0);
}

/* cuGraphNodeSetParams and cuGraphExecNodeSetParams: the kinds this
 * library makes (kernel, copy, memset, host, event record and wait; a
 * child graph in an exec). */
static CUresult vcu__params_set(CUgraphExec hExec, CUgraphNode hNode, CUgraphNodeParams *p,
                                const char *who)
{
    static int logged;
    CUDA_KERNEL_NODE_PARAMS k;
    CUDA_MEMSET_NODE_PARAMS ms;
    CUDA_HOST_NODE_PARAMS hp;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        memcpy(&k, &p->kernel, sizeof(k));
        return vcu__kernel_set(hExec, hNode, &k, k.kern);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (p->memcpy.flags != 0 || p->memcpy.reserved != 0)
            return CUDA_ERROR_INVALID_VALUE;
        return vcu__copy_set(hExec, hNode, &p->memcpy.copyParams, who);
    case CU_GRAPH_NODE_TYPE_MEMSET:
        memset(&ms, 0, sizeof(ms));
        ms.dst = p->memset.dst;
        ms.pitch = p->memset.pitch;
        ms.value = p->memset.value;
        ms.elementSize = p->memset.elementSize;
        ms.width = p->memset.width;
        ms.height = p->memset.height;
        return vcu__memset_set(hExec, hNode, &ms);
    case CU_GRAPH_NODE_TYPE_HOST:
        hp.fn = p->host.fn;
        hp.userData = p->host.userData;
        return vcu__host_set(hExec, hNode, &hp);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return vcu__event_set(hExec, hNode, p->eventRecord.event, VCU_CU_NODE_EVENT_RECORD);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return vcu__event_set(hExec, hNode, p->eventWait.event, VCU_CU_NODE_EVENT_WAIT);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        if (hExec != NULL)
            return cuGraphExecChildGraphNodeSetParams(hExec, hNode, p->graph.graph);
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s: a child graph node's graph is "
                               "changed through cuGraphChildGraphNodeGetGraph\n", who);
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s: only kernel, memcpy, memset, host, "
                               "event and (in an exec) child graph nodes are supported\n", who);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

VCU__EXPORT CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
    return vcu__params_set(NULL, hNode, nodeParams, "cuGraphNodeSetParams");
}

VCU__EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              CUgraphNodeParams *nodeParams)
{
    if (hGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__params_set(hGraphExec, hNode, nodeParams, "cuGraphExecNodeSetParams");
}

/*
 * The parameters a node of kind was given here (len bytes into out);
 * a node whose parameters this library never saw (captured, or a
 * clone's not found with cuGraphNodeFindInClone): CUDA_ERROR_NOT_SUPPORTED,
 * logged once.
 */
static CUresult vcu__node_get(CUgraphNode hNode, uint32_t kind, void *out, size_t len,
                              const char *who)
{
    static int logged;
    vcu__gnode_t *n;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e != CUDA_SUCCESS)
        return e;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vcu__drv.lock);
    if (n->kind == kind)
        memcpy(out, &n->p, len);
    else
        e = n->kind == 0 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&vcu__drv.lock);
    if (e == CUDA_ERROR_NOT_SUPPORTED)
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s of a captured node is not "
                               "supported\n", who);
    return e;
}

VCU__EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
                                                   CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    return vcu__node_get(hNode, VCU_CU_NODE_KERNEL, nodeParams, sizeof(*nodeParams),
                         "cuGraphKernelNodeGetParams");
}

VCU__EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode,
                                                CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    return vcu__node_get(hNode, VCU_CU_NODE_KERNEL, nodeParams, sizeof(*nodeParams),
                         "cuGraphKernelNodeGetParams");
}

VCU__EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
    return vcu__node_get(hNode, VCU_CU_NODE_MEMCPY, nodeParams, sizeof(*nodeParams),
                         "cuGraphMemcpyNodeGetParams");
}

VCU__EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode,
                                                CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    return vcu__node_get(hNode, VCU_CU_NODE_MEMSET, nodeParams, sizeof(*nodeParams),
                         "cuGraphMemsetNodeGetParams");
}

VCU__EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
    return vcu__node_get(hNode, VCU_CU_NODE_HOST, nodeParams, sizeof(*nodeParams),
                         "cuGraphHostNodeGetParams");
}

VCU__EXPORT CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return vcu__node_get(hNode, VCU_CU_NODE_EVENT_RECORD, event_out, sizeof(*event_out),
                         "cuGraphEventRecordNodeGetEvent");
}

VCU__EXPORT CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return vcu__node_get(hNode, VCU_CU_NODE_EVENT_WAIT, event_out, sizeof(*event_out),
                         "cuGraphEventWaitNodeGetEvent");
}

/*
 * cuGraphExecUpdate: the host's result and error nodes (as nodes of
 * hGraph); after an update the exec runs hGraph's staged copies.
 */
static CUresult vcu__exec_update(CUgraphExec hGraphExec, CUgraph hGraph,
                                 CUgraphExecUpdateResultInfo *info)
{
    struct vcu_cu_pair_req r;
    struct vcu_cu_graph_update_resp o;
    vcu__gexec_t *x = (vcu__gexec_t *)hGraphExec;
    vcu__stages_t ns = { NULL, 0 };
    vcu__graph_t *g;
    CUresult e;

    if (info == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(x, VCU__K_GEXEC) || x->dev != g->dev)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    memset(info, 0, sizeof(*info));
    r.a = x->h;
    r.b = g->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_EXEC_UPDATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS && e != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
        return e;
    info->result = (CUgraphExecUpdateResult)o.info;
    if (o.error_node != 0)
        info->errorNode = (CUgraphNode)vcu__gnode_of(g, o.error_node);
    if (o.error_from != 0)
        info->errorFromNode = (CUgraphNode)vcu__gnode_of(g, o.error_from);
    if (e != CUDA_SUCCESS)
        return e;
    if (vcu__stages_copy(&ns, &g->stages) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    vcu__stages_drop(&x->stages);
    x->stages = ns;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                          CUgraphExecUpdateResultInfo *resultInfo)
{
    return vcu__exec_update(hGraphExec, hGraph, resultInfo);
}

VCU__EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                       CUgraphNode *hErrorNode_out,
                                       CUgraphExecUpdateResult *updateResult_out)
{
    CUgraphExecUpdateResultInfo info;
    CUresult e;

    if (hErrorNode_out == NULL || updateResult_out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__exec_update(hGraphExec, hGraph, &info);
    *hErrorNode_out = info.errorNode;
    *updateResult_out = info.result;
    return e;
}

/*
 * A list of CU_GRAPH_LIST (what, of graph g's handle gh or of node nh),
 * as node records of g, paged from the host: into a[] (and, for edges,
 * b[]), room for *num (a NULL: the count only).  *num is then the count
 * written (a given) or the whole count.
 */
CUresult vcu__list(vcu__graph_t *g, uint64_t gh, uint64_t nh, uint32_t what,
                   CUgraphNode *a, CUgraphNode *b, size_t *num)
{
    struct vcu_cu_graph_list_req r;
    struct vcu_cu_graph_list_resp *o;
    size_t want = a != NULL ? *num : 0, got = 0, total = 0, i;
    int pairs = (what & ~VCU_CU_LIST_F_LOSSY_OK) == VCU_CU_LIST_EDGES;
    CUresult e = CUDA_SUCCESS;

    o = malloc(sizeof(*o));
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&r, 0, sizeof(r));
    r.graph = gh;
    r.node = nh;
    r.what = what;
    do {
        size_t items;

        r.start = (uint32_t)got;
        e = vcu__call(g->dev, VCU_OP_CU_GRAPH_LIST, &r, sizeof(r), NULL, 0, o, sizeof(*o));
        if (e != CUDA_SUCCESS)
            break;
        total = o->total;
        items = pairs ? o->count / 2 : o->count;
        if (o->count > VCU_CU_LIST_MAX || got + items > total ||
            (items == 0 && got < total && got < want)) {
            e = CUDA_ERROR_UNKNOWN;      /* not what was asked for */
            break;
        }
        for (i = 0; i < items && got < want; i++, got++) {
            vcu__gnode_t *x = vcu__gnode_of(g, o->node[pairs ? 2 * i : i]);
            vcu__gnode_t *y = pairs ? vcu__gnode_of(g, o->node[2 * i + 1]) : NULL;

            if (x == NULL || (pairs && y == NULL)) {
                e = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            a[got] = (CUgraphNode)x;
            if (pairs)
                b[got] = (CUgraphNode)y;
        }
    } while (e == CUDA_SUCCESS && got < want && got < total);
    free(o);
    if (e != CUDA_SUCCESS)
        return e;
    if (a == NULL) {
        *num = total;
        return CUDA_SUCCESS;
    }
    for (i = got; i < want; i++) {
        a[i] = NULL;
        if (pairs)
            b[i] = NULL;
    }
    *num = got;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes,
                                         size_t *numRootNodes)
{
    vcu__graph_t *g;
    CUresult e;

    if (numRootNodes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__list(g, g->h, 0, VCU_CU_LIST_ROOTS, rootNodes, NULL, numRootNodes);
}

/* The data of the first n edges of a CU_GRAPH_LIST (what, as
 * vcu__list), into ed[] (nothing where ed is NULL). */
static CUresult vcu__list_data(vcu__graph_t *g, uint64_t gh, uint64_t nh, uint32_t what,
                               CUgraphEdgeData *ed, size_t n)
{
    struct vcu_cu_graph_list_req r;
    struct vcu_cu_graph_list_resp *o;
    size_t got = 0, i;
    CUresult e = CUDA_SUCCESS;

    if (ed == NULL || n == 0)
        return CUDA_SUCCESS;
    o = malloc(sizeof(*o));
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&r, 0, sizeof(r));
    r.graph = gh;
    r.node = nh;
    r.what = what | VCU_CU_LIST_F_DATA;
    while (got < n) {
        r.start = (uint32_t)got;
        e = vcu__call(g->dev, VCU_OP_CU_GRAPH_LIST, &r, sizeof(r), NULL, 0, o, sizeof(*o));
        if (e != CUDA_SUCCESS)
            break;
        if (o->count > VCU_CU_LIST_MAX || o->count == 0) {
            e = CUDA_ERROR_UNKNOWN;      /* not what was asked for */
            break;
        }
        for (i = 0; i < o->count && got < n; i++, got++)
            memcpy(&ed[got], &o->node[i], sizeof(ed[got]));
    }
    free(o);
    return e;
}

VCU__EXPORT CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                        CUgraphEdgeData *edgeData, size_t *numEdges)
{
    vcu__graph_t *g;
    CUresult e;

    if (numEdges == NULL || (from == NULL) != (to == NULL) || (edgeData != NULL && from == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e == CUDA_SUCCESS)
        e = vcu__list(g, g->h, 0,
                      VCU_CU_LIST_EDGES | (edgeData != NULL ? VCU_CU_LIST_F_LOSSY_OK : 0), from,
                      to, numEdges);
    if (e == CUDA_SUCCESS && from != NULL)
        e = vcu__list_data(g, g->h, 0, VCU_CU_LIST_EDGES, edgeData, *numEdges);
    return e;
}

VCU__EXPORT CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                     size_t *numEdges)
{
    return cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}

static CUresult vcu__node_list(CUgraphNode hNode, uint32_t what, CUgraphNode *out,
                               CUgraphEdgeData *ed, size_t *num)
{
    vcu__gnode_t *n;
    CUresult e;

    if (num == NULL || (ed != NULL && out == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__gnode_arg(hNode, &n);
    if (e == CUDA_SUCCESS)
        e = vcu__list(n->g, 0, n->h, what | (ed != NULL ? VCU_CU_LIST_F_LOSSY_OK : 0), out, NULL,
                      num);
    if (e == CUDA_SUCCESS && out != NULL)
        e = vcu__list_data(n->g, 0, n->h, what, ed, *num);
    return e;
}

VCU__EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
                                                   CUgraphEdgeData *edgeData,
                                                   size_t *numDependencies)
{
    return vcu__node_list(hNode, VCU_CU_LIST_DEPS, dependencies, edgeData, numDependencies);
}

VCU__EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                                size_t *numDependencies)
{
    return vcu__node_list(hNode, VCU_CU_LIST_DEPS, dependencies, NULL, numDependencies);
}

VCU__EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode,
                                                     CUgraphNode *dependentNodes,
                                                     CUgraphEdgeData *edgeData,
                                                     size_t *numDependentNodes)
{
    return vcu__node_list(hNode, VCU_CU_LIST_DEPENDENTS, dependentNodes, edgeData,
                          numDependentNodes);
}

VCU__EXPORT CUresult cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                                  size_t *numDependentNodes)
{
    return vcu__node_list(hNode, VCU_CU_LIST_DEPENDENTS, dependentNodes, NULL,
                          numDependentNodes);
}

/* The clone's node, with the original's record of its parameters. */
VCU__EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                            CUgraph hClonedGraph)
{
    vcu__gnode_t *n, *cn;
    vcu__graph_t *c;
    size_t one = 1;
    CUgraphNode out = NULL;
    CUresult e;

    if (phNode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__gnode_arg(hOriginalNode, &n);
    if (e == CUDA_SUCCESS)
        e = vcu__graph_arg(hClonedGraph, &c);
    if (e != CUDA_SUCCESS)
        return e;
    if (c->dev != n->g->dev)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__list(c, c->h, n->h, VCU_CU_LIST_CLONE, &out, NULL, &one);
    if (e != CUDA_SUCCESS)
        return e;
    if (one != 1 || out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cn = (vcu__gnode_t *)out;
    pthread_mutex_lock(&vcu__drv.lock);
    if (cn->kind == 0 && n->kind != 0) {
        if (n->kind == VCU_CU_NODE_KERNEL)
            vcu__keep_kernel(cn, &n->p.kernel, (const vcu__func_t *)n->p.kernel.func, n->kbuf);
        else {
            cn->p = n->p;
            cn->kind = n->kind;
        }
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    *phNode = out;
    return CUDA_SUCCESS;
}

int vcu__edges_default(const CUgraphEdgeData *ed, size_t n)
{
    static const CUgraphEdgeData none;

    for (size_t i = 0; ed != NULL && i < n; i++)
        if (memcmp(&ed[i], &none, sizeof(none)) != 0)
            return 0;
    return 1;
}

/* cuGraphAddDependencies and cuGraphRemoveDependencies: edges of the
 * default kind as CU_GRAPH_EDGES, others with their data as
 * CU_GRAPH_EDGES_DATA. */
CUresult vcu__graph_edges(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                          const CUgraphEdgeData *ed, size_t n, int add, const char *who)
{
    static int logged;
    struct vcu_cu_graph_edges_req *q;
    vcu__graph_t *g;
    uint64_t *hp;
    size_t i, per;
    int data;
    CUresult e = vcu__graph_arg(hGraph, &g);

    if (e != CUDA_SUCCESS)
        return e;
    if (n == 0)
        return CUDA_SUCCESS;
    if (from == NULL || to == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (n > VCU_CU_MAX_DEPS) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s of more than %u edges at once is "
                               "not supported\n", who, VCU_CU_MAX_DEPS);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    _Static_assert(sizeof(CUgraphEdgeData) == 8, "CUgraphEdgeData is the wire's 8 bytes");
    data = !vcu__edges_default(ed, n);
    per = data ? 24 : 16;
    q = calloc(1, sizeof(*q) + n * per);
    if (q == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    hp = (uint64_t *)(q + 1);
    for (i = 0; i < n; i++) {
        vcu__gnode_t *a = (vcu__gnode_t *)from[i], *b = (vcu__gnode_t *)to[i];

        if (!vcu__reg_has(a, VCU__K_GNODE) || !vcu__reg_has(b, VCU__K_GNODE) || a->g != g ||
            b->g != g) {
            free(q);
            return CUDA_ERROR_INVALID_VALUE;
        }
        hp[2 * i] = a->h;
        hp[2 * i + 1] = b->h;
    }
    if (data)
        memcpy(hp + 2 * n, ed, n * sizeof(*ed));
    q->graph = g->h;
    q->add = (uint32_t)add;
    q->count = (uint32_t)n;
    e = vcu__call(g->dev, data ? VCU_OP_CU_GRAPH_EDGES_DATA : VCU_OP_CU_GRAPH_EDGES, q,
                  (uint32_t)(sizeof(*q) + n * per), NULL, 0, NULL, 0);
    free(q);
    return e;
}

VCU__EXPORT CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                               const CUgraphNode *to,
                                               const CUgraphEdgeData *edgeData,
                                               size_t numDependencies)
{
    return vcu__graph_edges(hGraph, from, to, edgeData, numDependencies, 1, "cuGraphAddDependencies");
}

VCU__EXPORT CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from,
                                            const CUgraphNode *to, size_t numDependencies)
{
    return vcu__graph_edges(hGraph, from, to, NULL, numDependencies, 1, "cuGraphAddDependencies");
}

VCU__EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                                  const CUgraphNode *to,
                                                  const CUgraphEdgeData *edgeData,
                                                  size_t numDependencies)
{
    return vcu__graph_edges(hGraph, from, to, edgeData, numDependencies, 0,
                      "cuGraphRemoveDependencies");
}

VCU__EXPORT CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from,
                                               const CUgraphNode *to, size_t numDependencies)
{
    return vcu__graph_edges(hGraph, from, to, NULL, numDependencies, 0, "cuGraphRemoveDependencies");
}

/* The node and its record go; a host node's cookie stays (an exec made
 * before may still run it). */
VCU__EXPORT CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
    struct vcu_cu_u64_req r;
    vcu__gnode_t *n, **pp;
    vcu__graph_t *g;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e != CUDA_SUCCESS)
        return e;
    g = n->g;
    memset(&r, 0, sizeof(r));
    r.value = n->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_NODE_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    for (pp = &g->nodes; *pp != NULL && *pp != n; pp = &(*pp)->next)
        ;
    if (*pp == n) {
        *pp = n->next;
        g->nnodes--;
    }
    /* A child node's graph went with it (the host's handle too). */
    if (n->child != NULL) {
        vcu__graph_t **bp;

        for (bp = &g->bodies; *bp != NULL && *bp != n->child; bp = &(*bp)->body_next)
            ;
        if (*bp == n->child)
            *bp = n->child->body_next;
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    if (n->child != NULL)
        vcu__graph_free(n->child);
    vcu__reg_del(n);
    free(n->kbuf);
    free(n);
    return CUDA_SUCCESS;
}
