/*
 * Editing graphs (nodes' parameters, enabling nodes, listing roots and
 * edges paged from the host) and updating executable graphs, on the
 * records of cudart_graph.c (cudart_graph.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_graph.h"
#include "cudart_int.h"
#include "vcu_stage.h"

/* ---- editing graphs, updating executable graphs ------------------------ */

/* CU_GRAPH_NODE_SET: node's new parameters (tmpl, then len bytes of a
 * kernel's) in exec (NULL: in the node's graph); the node and the exec
 * checked. */
static cudaError_t vcu__node_set(cudaGraphExec_t exec, cudaGraphNode_t node,
                                 const struct vcu_cu_graph_node_req *tmpl, const void *extra,
                                 uint32_t len)
{
    struct vcu_cu_graph_set_req *q;
    vcu__node_t *n = (vcu__node_t *)node;
    vcu__exec_t *x = (vcu__exec_t *)exec;
    cudaError_t e;

    if (x != NULL && (!vcu__reg_has(x, VCU__H_GRAPH_EXEC) || x->dev != n->g->dev))
        return cudaErrorInvalidValue;
    if (n->kind != tmpl->kind)
        return cudaErrorInvalidValue;
    q = calloc(1, sizeof(*q) + len);
    if (q == NULL)
        return cudaErrorMemoryAllocation;
    q->exec = x != NULL ? x->h : 0;
    q->node = n->h;
    q->n = *tmpl;
    if (len)
        memcpy(q + 1, extra, len);
    e = vcu__check_dev(n->g->dev);
    if (e == cudaSuccess)
        e = vcu__call(n->g->dev, VCU_OP_CU_GRAPH_NODE_SET, 0, q, (uint32_t)(sizeof(*q) + len),
                      NULL, 0, NULL, 0);
    free(q);
    return e;
}

static cudaError_t vcu__node_arg(cudaGraphNode_t node, vcu__node_t **out)
{
    if (!vcu__reg_has(node, VCU__H_NODE))
        return cudaErrorInvalidValue;
    *out = (vcu__node_t *)node;
    return cudaSuccess;
}

/* An event node's event (kind: which node), in exec or (NULL) its graph. */
static cudaError_t vcu__event_set(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t ev,
                                  uint32_t kind)
{
    struct vcu_cu_graph_node_req r;
    vcu__node_t *n;
    int dev;
    cudaError_t e = vcu__node_arg(node, &n);

    if (e != cudaSuccess)
        return vcu__err(e);
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    e = vcu__event_host(ev, &dev, &r.function);
    if (e == cudaSuccess)
        e = vcu__node_set(exec, node, &r, NULL, 0);
    if (e == cudaSuccess && exec == NULL)
        n->event = ev;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
    return vcu__event_set(NULL, node, event, VCU_CU_NODE_EVENT_RECORD);
}

VCU__EXPORT cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
    return vcu__event_set(NULL, node, event, VCU_CU_NODE_EVENT_WAIT);
}

VCU__EXPORT cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec,
                                                             cudaGraphNode_t hNode,
                                                             cudaEvent_t event)
{
    if (hGraphExec == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__event_set(hGraphExec, hNode, event, VCU_CU_NODE_EVENT_RECORD);
}

VCU__EXPORT cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec,
                                                           cudaGraphNode_t hNode,
                                                           cudaEvent_t event)
{
    if (hGraphExec == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__event_set(hGraphExec, hNode, event, VCU_CU_NODE_EVENT_WAIT);
}

/* The exec's child graph node runs childGraph (of the same shape), and
 * the exec its staged copies. */
VCU__EXPORT cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec,
                                                             cudaGraphNode_t node,
                                                             cudaGraph_t childGraph)
{
    struct vcu_cu_graph_node_req r;
    vcu__exec_t *x = (vcu__exec_t *)hGraphExec;
    vcu__graph_t *c;
    vcu__node_t *n;
    cudaError_t e = vcu__node_arg(node, &n);

    if (e == cudaSuccess)
        e = vcu__graph(childGraph, &c);
    if (e != cudaSuccess)
        return vcu__err(e);
    if (!vcu__reg_has(x, VCU__H_GRAPH_EXEC) || x->dev != c->dev)
        return vcu__err(cudaErrorInvalidValue);
    if (vcu__stages_copy(&x->stages, &c->stages) != 0)
        return vcu__err(cudaErrorMemoryAllocation);
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_CHILD;
    r.function = c->h;
    return vcu__err(vcu__node_set(hGraphExec, node, &r, NULL, 0));
}

static cudaError_t vcu__kernel_set(cudaGraphExec_t exec, cudaGraphNode_t node,
                                   const struct cudaKernelNodeParams *p)
{
    static __thread uint8_t params[VCU_CU_MAX_PARAM_BYTES];
    struct vcu_cu_graph_node_req r;
    vcu__node_t *n;
    uint32_t len = 0;
    cudaError_t e = vcu__node_arg(node, &n);

    if (e != cudaSuccess)
        return e;
    if (p == NULL)
        return cudaErrorInvalidValue;
    if (p->extra != NULL)
        VCU__NOT_SUPPORTED("cudaGraphKernelNodeSetParams with extra", "use kernelParams");
    e = vcu__kernel_req(n->g->dev, p, &r, params, &len);
    if (e == cudaSuccess)
        e = vcu__node_set(exec, node, &r, params, len);
    return e;
}

VCU__EXPORT cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node,
                                                     const struct cudaKernelNodeParams *p)
{
    return vcu__err(vcu__kernel_set(NULL, node, p));
}

VCU__EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec,
                                                         cudaGraphNode_t node,
                                                         const struct cudaKernelNodeParams *p)
{
    if (hGraphExec == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__kernel_set(hGraphExec, node, p));
}

static cudaError_t vcu__memset_set(cudaGraphExec_t exec, cudaGraphNode_t node,
                                   const struct cudaMemsetParams *p)
{
    struct vcu_cu_graph_node_req r;
    vcu__node_t *n;
    cudaError_t e = vcu__node_arg(node, &n);

    if (e == cudaSuccess)
        e = vcu__memset_req(p, &r);
    if (e == cudaSuccess)
        e = vcu__node_set(exec, node, &r, NULL, 0);
    return e;
}

VCU__EXPORT cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node,
                                                     const struct cudaMemsetParams *p)
{
    return vcu__err(vcu__memset_set(NULL, node, p));
}

VCU__EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec,
                                                         cudaGraphNode_t node,
                                                         const struct cudaMemsetParams *p)
{
    if (hGraphExec == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__memset_set(hGraphExec, node, p));
}

/* A 1D copy's new ends: device, page-locked or registered memory (a
 * pageable end would need a stage of its own). */
static cudaError_t vcu__copy1d_set(cudaGraphExec_t exec, cudaGraphNode_t node, void *dst,
                                   const void *src, size_t count, enum cudaMemcpyKind kind,
                                   const char *what)
{
    struct vcu_cu_graph_node_req r;
    vcu__node_t *n;
    cudaError_t e = vcu__node_arg(node, &n);
    int src_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ||
                   kind == cudaMemcpyDefault;
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                  kind == cudaMemcpyDefault;
    int dst_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                   kind == cudaMemcpyDefault;
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                  kind == cudaMemcpyDefault;

    if (e != cudaSuccess)
        return e;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    if (count == 0 || dst == NULL || src == NULL)
        return cudaErrorInvalidValue;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_MEMCPY;
    r.src = vcu__graph_side(src, count, src_dev, src_host);
    r.dst = vcu__graph_side(dst, count, dst_dev, dst_host);
    if ((r.src == 0 && !src_host) || (r.dst == 0 && !dst_host))
        return cudaErrorInvalidValue;
    if (r.src == 0 || r.dst == 0)
        VCU__NOT_SUPPORTED(what, "pageable host memory in a changed graph copy");
    r.width = count;
    r.height = 1;
    r.depth = 1;
    return vcu__node_set(exec, node, &r, NULL, 0);
}

VCU__EXPORT cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst,
                                                       const void *src, size_t count,
                                                       enum cudaMemcpyKind kind)
{
    return vcu__err(vcu__copy1d_set(NULL, node, dst, src, count, kind,
                                    "cudaGraphMemcpyNodeSetParams1D"));
}

VCU__EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec,
                                                           cudaGraphNode_t node, void *dst,
                                                           const void *src, size_t count,
                                                           enum cudaMemcpyKind kind)
{
    if (hGraphExec == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__copy1d_set(hGraphExec, node, dst, src, count, kind,
                                    "cudaGraphExecMemcpyNodeSetParams1D"));
}

/* A host node's new function: a callback record of its own, kept as
 * cudaGraphAddHostNode's (the old one stays: a launch may still run it). */
static cudaError_t vcu__host_set(cudaGraphExec_t exec, cudaGraphNode_t node,
                                 const struct cudaHostNodeParams *p)
{
    struct vcu_cu_graph_node_req r;
    vcu__node_t *n;
    cudaError_t e = vcu__node_arg(node, &n);

    if (e != cudaSuccess)
        return e;
    if (p == NULL || p->fn == NULL)
        return cudaErrorInvalidValue;
    e = vcu__cb_start();
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_HOST;
    r.cookie = vcu__cb_new(p->fn, NULL, NULL, p->userData, 1);
    if (r.cookie == 0)
        return cudaErrorMemoryAllocation;
    e = vcu__node_set(exec, node, &r, NULL, 0);
    if (e != cudaSuccess)
        vcu__cb_free(r.cookie);
    return e;
}

VCU__EXPORT cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node,
                                                   const struct cudaHostNodeParams *p)
{
    return vcu__err(vcu__host_set(NULL, node, p));
}

VCU__EXPORT cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec,
                                                       cudaGraphNode_t node,
                                                       const struct cudaHostNodeParams *p)
{
    if (hGraphExec == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__host_set(hGraphExec, node, p));
}

/* The record of node handle h in g, or NULL. */
static cudaGraphNode_t vcu__node_of(vcu__graph_t *g, uint64_t h)
{
    vcu__node_t *n;

    if (h == 0)
        return NULL;
    pthread_mutex_lock(&vcu__graph_mu);
    for (n = g->nodes; n != NULL && n->h != h; n = n->next)
        ;
    pthread_mutex_unlock(&vcu__graph_mu);
    return (cudaGraphNode_t)n;
}

/* cudaGraphExecUpdate: the host's result (error nodes where this library
 * made them); the exec runs the graph's staged copies after.  No result
 * info is asked for: none given (as NVIDIA's runtime). */
VCU__EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                            cudaGraphExecUpdateResultInfo *resultInfo)
{
    cudaGraphExecUpdateResultInfo none;
    struct vcu_cu_pair_req r;
    struct vcu_cu_graph_update_resp o;
    vcu__exec_t *x = (vcu__exec_t *)hGraphExec;
    vcu__stages_t ns = { NULL, 0 };
    vcu__graph_t *g;
    cudaError_t e;

    if (resultInfo == NULL)
        resultInfo = &none;
    e = vcu__graph(hGraph, &g);
    if (e != cudaSuccess)
        return vcu__err(e);
    if (!vcu__reg_has(x, VCU__H_GRAPH_EXEC) || x->dev != g->dev)
        return vcu__err(cudaErrorInvalidValue);
    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    memset(resultInfo, 0, sizeof(*resultInfo));
    r.a = x->h;
    r.b = g->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_EXEC_UPDATE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess && e != cudaErrorGraphExecUpdateFailure)
        return vcu__err(e);
    resultInfo->result = (enum cudaGraphExecUpdateResult)o.info;
    resultInfo->errorNode = vcu__node_of(g, o.error_node);
    resultInfo->errorFromNode = vcu__node_of(g, o.error_from);
    if (e != cudaSuccess)
        return vcu__err(e);
    if (vcu__stages_copy(&ns, &g->stages) != 0)
        return vcu__err(cudaErrorMemoryAllocation);
    vcu__stages_drop(&x->stages);
    x->stages = ns;
    return cudaSuccess;
}

/* cudaGraphNodeSetEnabled and cudaGraphNodeGetEnabled: the driver's
 * calls (CU_CALL). */
static cudaError_t vcu__enabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, int set,
                                unsigned int *v)
{
    vcu__exec_t *x = (vcu__exec_t *)hGraphExec;
    vcu__node_t *n;
    cudaError_t e = vcu__node_arg(node, &n);

    if (e != cudaSuccess)
        return e;
    if (!vcu__reg_has(x, VCU__H_GRAPH_EXEC) || x->dev != n->g->dev)
        return cudaErrorInvalidValue;
    if (set) {
        struct vcu_call_cuGraphNodeSetEnabled_req r;
        struct vcu_call_cuGraphNodeSetEnabled_resp o;

        VCU_CALL_INIT(r, cuGraphNodeSetEnabled);
        r.hGraphExec = x->h;
        r.hNode = n->h;
        r.isEnabled = *v;
        return vcu__call(x->dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    } else {
        struct vcu_call_cuGraphNodeGetEnabled_req r;
        struct vcu_call_cuGraphNodeGetEnabled_resp o;

        VCU_CALL_INIT(r, cuGraphNodeGetEnabled);
        r.hGraphExec = x->h;
        r.hNode = n->h;
        e = vcu__call(x->dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
        if (e == cudaSuccess)
            *v = (unsigned int)o.isEnabled;
        return e;
    }
}

VCU__EXPORT cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                unsigned int isEnabled)
{
    return vcu__err(vcu__enabled(hGraphExec, hNode, 1, &isEnabled));
}

VCU__EXPORT cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
                                                unsigned int *isEnabled)
{
    if (isEnabled == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__enabled(hGraphExec, hNode, 0, isEnabled));
}

/* cudaGraphGetRootNodes and cudaGraphGetEdges, over CU_GRAPH_LIST: nodes
 * this library made (a captured or cloned graph's: not supported). */
static cudaError_t vcu__list(vcu__graph_t *g, uint32_t what, cudaGraphNode_t *a,
                             cudaGraphNode_t *b, size_t *num, const char *who)
{
    struct vcu_cu_graph_list_req r;
    struct vcu_cu_graph_list_resp *o;
    size_t want = a != NULL ? *num : 0, got = 0, total = 0, i;
    int pairs = what == VCU_CU_LIST_EDGES;
    cudaError_t e = cudaSuccess;

    o = malloc(sizeof(*o));
    if (o == NULL)
        return cudaErrorMemoryAllocation;
    memset(&r, 0, sizeof(r));
    r.graph = g->h;
    r.what = what;
    do {
        size_t items;

        r.start = (uint32_t)got;
        e = vcu__call(g->dev, VCU_OP_CU_GRAPH_LIST, 0, &r, sizeof(r), NULL, 0, o, sizeof(*o));
        if (e != cudaSuccess)
            break;
        total = o->total;
        items = pairs ? o->count / 2 : o->count;
        if (o->count > VCU_CU_LIST_MAX || got + items > total ||
            (items == 0 && got < total && got < want)) {
            e = cudaErrorUnknown;
            break;
        }
        for (i = 0; i < items && got < want; i++, got++) {
            a[got] = vcu__node_of(g, o->node[pairs ? 2 * i : i]);
            if (pairs)
                b[got] = vcu__node_of(g, o->node[2 * i + 1]);
            if (a[got] == NULL || (pairs && b[got] == NULL)) {
                free(o);
                VCU__NOT_SUPPORTED(who, "a captured or cloned graph's nodes are not listed");
            }
        }
    } while (e == cudaSuccess && got < want && got < total);
    free(o);
    if (e != cudaSuccess)
        return e;
    if (a == NULL) {
        *num = total;
        return cudaSuccess;
    }
    for (i = got; i < want; i++) {
        a[i] = NULL;
        if (pairs)
            b[i] = NULL;
    }
    *num = got;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *pRootNodes,
                                              size_t *pNumRootNodes)
{
    vcu__graph_t *g;
    cudaError_t e;

    if (pNumRootNodes == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__graph(graph, &g);
    if (e == cudaSuccess)
        e = vcu__list(g, VCU_CU_LIST_ROOTS, pRootNodes, NULL, pNumRootNodes,
                      "cudaGraphGetRootNodes");
    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from,
                                          cudaGraphNode_t *to, cudaGraphEdgeData *edgeData,
                                          size_t *numEdges)
{
    vcu__graph_t *g;
    cudaError_t e;

    if (numEdges == NULL || (from == NULL) != (to == NULL) || (edgeData != NULL && from == NULL))
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__graph(graph, &g);
    if (e == cudaSuccess)
        e = vcu__list(g, VCU_CU_LIST_EDGES, from, to, numEdges, "cudaGraphGetEdges");
    if (e == cudaSuccess && edgeData != NULL)
        memset(edgeData, 0, *numEdges * sizeof(*edgeData));
    return e == cudaSuccess ? e : vcu__err(e);
}
