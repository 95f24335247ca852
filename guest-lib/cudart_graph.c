/*
 * Graphs: their nodes, instantiation and launches.  cudaGraph_t,
 * cudaGraphNode_t and cudaGraphExec_t are records of this library naming
 * host handles (cudart_graph.h); a graph keeps its nodes so
 * cudaGraphGetNodes can list them.  Stream capture: cudart_capture.c;
 * editing graphs and updating executable graphs: cudart_graph_edit.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_graph.h"
#include "cudart_int.h"
#include "vcu_stage.h"

pthread_mutex_t vcu__graph_mu = PTHREAD_MUTEX_INITIALIZER;

cudaError_t vcu__graph(cudaGraph_t g, vcu__graph_t **out)
{
    if (!vcu__reg_has(g, VCU__H_GRAPH))
        return cudaErrorInvalidResourceHandle;
    *out = (vcu__graph_t *)g;
    return vcu__check_dev((*out)->dev);
}

cudaError_t vcu__graph_wrap(int dev, uint64_t h, cudaGraph_t *out)
{
    vcu__graph_t *g = calloc(1, sizeof(*g));

    if (g == NULL || vcu__reg_add(g, VCU__H_GRAPH) != 0) {
        struct vcu_cu_u64_req d = { .value = h };

        free(g);
        vcu__call(dev, VCU_OP_CU_GRAPH_DESTROY, 0, &d, sizeof(d), NULL, 0, NULL, 0);
        return cudaErrorMemoryAllocation;
    }
    g->dev = dev;
    g->h = h;
    *out = (cudaGraph_t)g;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    int dev;
    cudaError_t e;

    if (pGraph == NULL || flags != 0)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    r.value = flags;
    e = vcu__call(dev, VCU_OP_CU_GRAPH_CREATE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        e = vcu__graph_wrap(dev, o.value, pGraph);
    return vcu__err(e);
}

/* Frees the records of g, its nodes and its conditional nodes' bodies
 * (theirs too: a list, no recursion).  Host node callbacks stay valid:
 * an instantiated copy may still run them. */
static void vcu__graph_free(vcu__graph_t *g)
{
    vcu__graph_t *left = g, *b, *nb;
    vcu__node_t *n, *next;

    g->body_next = NULL;
    while ((g = left) != NULL) {
        left = g->body_next;
        pthread_mutex_lock(&vcu__graph_mu);
        for (b = g->bodies; b != NULL; b = nb) {
            nb = b->body_next;
            b->body_next = left;
            left = b;
        }
        g->bodies = NULL;
        pthread_mutex_unlock(&vcu__graph_mu);
        vcu__reg_del(g);
        for (n = g->nodes; n != NULL; n = next) {
            next = n->next;
            vcu__reg_del(n);
            free(n->owned);
            free(n);
        }
        vcu__stages_drop(&g->stages);
        free(g);
    }
}

VCU__EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    struct vcu_cu_u64_req r;
    vcu__graph_t *g = (vcu__graph_t *)graph;
    cudaError_t e;

    if (!vcu__reg_has(graph, VCU__H_GRAPH))
        return vcu__err(cudaErrorInvalidResourceHandle);
    pthread_mutex_lock(&vcu__graph_mu);
    /* The capture's; a body graph its conditional node's. */
    e = g->cap_id != 0 || g->parent != NULL ? cudaErrorInvalidValue : cudaSuccess;
    pthread_mutex_unlock(&vcu__graph_mu);
    if (e != cudaSuccess)
        return vcu__err(e);
    vcu__reg_del(graph);
    r.value = g->h;
    e = vcu__check_dev(g->dev);
    if (e == cudaSuccess)
        e = vcu__call(g->dev, VCU_OP_CU_GRAPH_DESTROY, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__graph_free(g);
    return vcu__err(e);
}

/* Sends CU_GRAPH_ADD_NODE to g with host node handles hdeps and the
 * trailing bytes: the new node's handle in *h. */
cudaError_t vcu__add_node_h(vcu__graph_t *g, const uint64_t *hdeps, size_t ndeps,
                            struct vcu_cu_graph_node_req *tmpl, const void *extra,
                            uint32_t extra_len, uint64_t *h)
{
    struct vcu_cu_u64_resp o;
    size_t len = sizeof(*tmpl) + ndeps * 8 + extra_len;
    char *q;
    cudaError_t e;

    if (ndeps > VCU_CU_MAX_DEPS)
        return cudaErrorInvalidValue;
    q = malloc(len);
    if (q == NULL)
        return cudaErrorMemoryAllocation;
    tmpl->graph = g->h;
    tmpl->ndeps = (uint32_t)ndeps;
    memcpy(q, tmpl, sizeof(*tmpl));
    if (ndeps)
        memcpy(q + sizeof(*tmpl), hdeps, ndeps * 8);
    if (extra_len)
        memcpy(q + sizeof(*tmpl) + ndeps * 8, extra, extra_len);
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_ADD_NODE, 0, q, (uint32_t)len, NULL, 0, &o, sizeof(o));
    free(q);
    if (e == cudaSuccess)
        *h = o.value;
    return e;
}

/* ---- for cudart_graph_mem.c (cudart_int.h) ------------------------------- */

cudaError_t vcu__graph_host(cudaGraph_t graph, int *dev, uint64_t *h)
{
    vcu__graph_t *g;
    cudaError_t e = vcu__graph(graph, &g);

    if (e != cudaSuccess)
        return e;
    *dev = g->dev;
    *h = g->h;
    return cudaSuccess;
}

cudaError_t vcu__graph_deps(cudaGraph_t graph, const cudaGraphNode_t *deps, size_t ndeps,
                            uint64_t *out)
{
    for (size_t i = 0; i < ndeps; i++) {
        vcu__node_t *dn = (vcu__node_t *)deps[i];

        if (!vcu__reg_has(dn, VCU__H_NODE) || dn->g != (vcu__graph_t *)graph)
            return cudaErrorInvalidValue;
        out[i] = dn->h;
    }
    return cudaSuccess;
}

cudaError_t vcu__graph_node_new(cudaGraph_t graph, uint64_t h, uint32_t kind,
                                cudaGraphNode_t *out)
{
    vcu__graph_t *g = (vcu__graph_t *)graph;
    vcu__node_t *n = calloc(1, sizeof(*n));

    if (n == NULL || vcu__reg_add(n, VCU__H_NODE) != 0) {
        free(n);
        return cudaErrorMemoryAllocation;
    }
    n->h = h;
    n->g = g;
    n->kind = kind;
    pthread_mutex_lock(&vcu__graph_mu);
    n->next = g->nodes;
    g->nodes = n;
    g->nnodes++;
    pthread_mutex_unlock(&vcu__graph_mu);
    *out = (cudaGraphNode_t)n;
    return cudaSuccess;
}

void vcu__graph_node_own(cudaGraphNode_t node, void *p)
{
    ((vcu__node_t *)node)->owned = p;
}

cudaError_t vcu__graph_node_host(cudaGraphNode_t node, int *dev, uint64_t *h, uint32_t *kind)
{
    vcu__node_t *n = (vcu__node_t *)node;

    if (!vcu__reg_has(n, VCU__H_NODE))
        return cudaErrorInvalidValue;
    *dev = n->g->dev;
    *h = n->h;
    *kind = n->kind;
    return cudaSuccess;
}

cudaError_t vcu__graph_body_new(cudaGraph_t parent, uint64_t h, cudaGraph_t *out)
{
    vcu__graph_t *p = (vcu__graph_t *)parent, *b;
    cudaError_t e = vcu__graph_wrap(p->dev, h, out);

    if (e != cudaSuccess)
        return e;
    b = (vcu__graph_t *)*out;
    pthread_mutex_lock(&vcu__graph_mu);
    b->parent = p;
    b->body_next = p->bodies;
    p->bodies = b;
    pthread_mutex_unlock(&vcu__graph_mu);
    return cudaSuccess;
}

/* Sends CU_GRAPH_ADD_NODE with the deps and trailing bytes; adds the node. */
static cudaError_t vcu__add_node(cudaGraphNode_t *out, cudaGraph_t graph,
                                 const cudaGraphNode_t *deps, size_t ndeps,
                                 struct vcu_cu_graph_node_req *tmpl, const void *extra,
                                 uint32_t extra_len, uint64_t cookie)
{
    uint64_t hd[VCU_CU_MAX_DEPS], h;
    vcu__graph_t *g;
    vcu__node_t *n;
    cudaError_t e;

    if (out == NULL || (ndeps > 0 && deps == NULL) || ndeps > VCU_CU_MAX_DEPS)
        return cudaErrorInvalidValue;
    e = vcu__graph(graph, &g);
    if (e != cudaSuccess)
        return e;
    for (size_t i = 0; i < ndeps; i++) {
        vcu__node_t *dn = (vcu__node_t *)deps[i];

        if (!vcu__reg_has(dn, VCU__H_NODE) || dn->g != g)
            return cudaErrorInvalidValue;
        hd[i] = dn->h;
    }
    e = vcu__add_node_h(g, hd, ndeps, tmpl, extra, extra_len, &h);
    if (e != cudaSuccess)
        return e;
    n = calloc(1, sizeof(*n));
    if (n == NULL || vcu__reg_add(n, VCU__H_NODE) != 0) {
        free(n);
        return cudaErrorMemoryAllocation;
    }
    n->h = h;
    n->g = g;
    n->cookie = cookie;
    n->kind = tmpl->kind;
    pthread_mutex_lock(&vcu__graph_mu);
    n->next = g->nodes;
    g->nodes = n;
    g->nnodes++;
    pthread_mutex_unlock(&vcu__graph_mu);
    *out = (cudaGraphNode_t)n;
    return cudaSuccess;
}

/* A kernel node's request for device dev into *r, its packed parameters
 * into params (VCU_CU_MAX_PARAM_BYTES); *len their size. */
cudaError_t vcu__kernel_req(int dev, const struct cudaKernelNodeParams *p,
                            struct vcu_cu_graph_node_req *r, uint8_t *params,
                            uint32_t *len)
{
    const vcu__kfn_t *f;
    vcu__kernel_t *k;
    cudaError_t e;

    k = vcu__kernel_by_host(p->func);
    if (k == NULL)
        return cudaErrorInvalidDeviceFunction;
    e = vcu__check_config(dev, p->gridDim, p->blockDim, p->sharedMemBytes);
    if (e == cudaSuccess)
        e = vcu__kernel_fn(k, dev, &f);
    if (e == cudaSuccess)
        e = vcu__pack_params(f, p->kernelParams, params);
    if (e != cudaSuccess)
        return e;
    memset(r, 0, sizeof(*r));
    r->kind = VCU_CU_NODE_KERNEL;
    r->function = f->fn;
    r->grid[0] = p->gridDim.x;
    r->grid[1] = p->gridDim.y;
    r->grid[2] = p->gridDim.z;
    r->block[0] = p->blockDim.x;
    r->block[1] = p->blockDim.y;
    r->block[2] = p->blockDim.z;
    r->shared_mem = p->sharedMemBytes;
    r->param_bytes = f->param_bytes;
    *len = f->param_bytes;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies,
                                               const struct cudaKernelNodeParams *p)
{
    struct vcu_cu_graph_node_req r;
    static __thread uint8_t params[VCU_CU_MAX_PARAM_BYTES];
    vcu__graph_t *g;
    uint32_t len = 0;
    cudaError_t e;

    if (p == NULL)
        return vcu__err(cudaErrorInvalidValue);
    if (p->extra != NULL)
        VCU__NOT_SUPPORTED("cudaGraphAddKernelNode with extra", "use kernelParams");
    e = vcu__graph(graph, &g);
    if (e == cudaSuccess)
        e = vcu__kernel_req(g->dev, p, &r, params, &len);
    if (e != cudaSuccess)
        return vcu__err(e);
    return vcu__err(vcu__add_node(pGraphNode, graph, pDependencies, numDependencies, &r, params,
                                  len, 0));
}

/*
 * One side of a graph memcpy node as a device address: device memory (or
 * a symbol) as it is; page-locked or registered host memory through the
 * device pointer of its allocation, which the session's worker maps, so
 * the node reads or writes the pages each time the graph runs.  0: none
 * of these (pageable host memory, which the caller stages: vcu_stage.h).
 */
uint64_t vcu__graph_side(const void *p, size_t n, int want_dev, int want_host)
{
    vcu__alloc_t a;
    uint64_t v = (uint64_t)(uintptr_t)p;

    if (want_dev && vcu__mem_find(v, &a) == 0 &&
        (a.kind == VCU__M_DEVICE || a.kind == VCU__M_SYMBOL))
        return v;
    return want_host ? vcu__rt_host_range_dptr(v, n) : 0;
}

static void vcu__stage_release(vcu__stage_t *st)
{
    cudaFreeHost(st->buf);          /* after the device's work on it */
    vcu__cb_free(st->cookie);
}

/* The stage of a copy whose one side (p) is pageable: a page-locked
 * buffer holding the copy densely, its device pointer in *dptr; taken by
 * the graph. */
static cudaError_t vcu__stage_new(vcu__graph_t *g, const vcu__copy_shape_t *c, unsigned char *p,
                                  size_t pitch, size_t rows, int in, uint64_t *dptr,
                                  vcu__stage_t **out)
{
    vcu__stage_t *st;
    size_t n = 0;
    cudaError_t e;

    /* The host function runs on the callback thread, which may not be
     * running yet. */
    e = vcu__cb_start();
    if (e != cudaSuccess)
        return e;
    st = vcu__stage_new_of(p, pitch, rows, c->width, c->height, c->depth, in,
                           vcu__stage_release, &n);
    if (st == NULL)
        return cudaErrorMemoryAllocation;
    e = cudaMallocHost((void **)&st->buf, n);
    if (e != cudaSuccess) {
        free(st);
        return e;
    }
    *dptr = vcu__rt_host_range_dptr((uint64_t)(uintptr_t)st->buf, n);
    st->cookie = *dptr != 0 ? vcu__cb_new(vcu__stage_run, NULL, NULL, st, 1) : 0;
    e = *dptr == 0 ? cudaErrorNotSupported : cudaSuccess;
    if (e == cudaSuccess && (st->cookie == 0 || vcu__stages_add(&g->stages, st) != 0))
        e = cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        vcu__stage_release(st);
        free(st);
        return e;
    }
    *out = st;
    return cudaSuccess;
}

/*
 * A copy of any shape as a MEMCPY node, kind as cudaMemcpy's: device and
 * page-locked or registered host memory as the device reaches them,
 * pageable host memory on one side through a stage (vcu_stage.h); on
 * both sides not supported.
 */
cudaError_t vcu__graph_copy_req(vcu__graph_t *g, const vcu__copy_shape_t *c,
                                enum cudaMemcpyKind kind, const char *what,
                                struct vcu_cu_graph_node_req *rp)
{
    struct vcu_cu_graph_node_req r;
    int src_host = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost ||
                   kind == cudaMemcpyDefault;
    int src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                  kind == cudaMemcpyDefault;
    int dst_host = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost ||
                   kind == cudaMemcpyDefault;
    int dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                  kind == cudaMemcpyDefault;
    vcu__stage_t *st = NULL;
    size_t sspan, dspan;
    uint64_t d, s;
    cudaError_t e = cudaSuccess;

    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return cudaErrorInvalidMemcpyDirection;
    if (c->width == 0 || c->height == 0 || c->depth == 0)
        return cudaErrorInvalidValue;
    if (((c->height > 1 || c->depth > 1) && (c->spitch < c->width || c->dpitch < c->width)) ||
        (c->depth > 1 && (c->srows < c->height || c->drows < c->height)))
        return cudaErrorInvalidPitchValue;
    sspan = vcu__stage_span(c->width, c->height, c->depth, c->spitch, c->srows);
    dspan = vcu__stage_span(c->width, c->height, c->depth, c->dpitch, c->drows);
    if (sspan == 0 || dspan == 0)
        return cudaErrorInvalidValue;
    s = vcu__graph_side(c->src, sspan, src_dev, src_host);
    d = vcu__graph_side(c->dst, dspan, dst_dev, dst_host);
    if ((s == 0 && !src_host) || (d == 0 && !dst_host))
        return cudaErrorInvalidValue;
    if (s == 0 && d == 0)
        VCU__NOT_SUPPORTED(what, "pageable host memory on both sides of a graph copy");
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_MEMCPY;
    r.width = c->width;
    r.height = c->height;
    r.depth = c->depth;
    r.src_pitch = c->spitch;
    r.dst_pitch = c->dpitch;
    r.src_rows = c->srows;
    r.dst_rows = c->drows;
    if (s == 0) {
        e = vcu__stage_new(g, c, c->src, c->spitch, c->srows, 1, &s, &st);
        r.src_pitch = c->width;
        r.src_rows = c->height;
        r.stage = VCU_CU_STAGE_IN;
    } else if (d == 0) {
        e = vcu__stage_new(g, c, c->dst, c->dpitch, c->drows, 0, &d, &st);
        r.dst_pitch = c->width;
        r.dst_rows = c->height;
        r.stage = VCU_CU_STAGE_OUT;
    }
    if (e != cudaSuccess)
        return e;
    r.cookie = st != NULL ? st->cookie : 0;
    r.dst = d;
    r.src = s;
    *rp = r;
    return cudaSuccess;
}

static cudaError_t vcu__graph_copy(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t *pDependencies, size_t numDependencies,
                                   const vcu__copy_shape_t *c, enum cudaMemcpyKind kind,
                                   const char *what)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g;
    cudaError_t e;

    e = vcu__graph(graph, &g);
    if (e == cudaSuccess)
        e = vcu__graph_copy_req(g, c, kind, what, &r);
    /* A failed node leaves its stage to the graph: freed with it. */
    if (e == cudaSuccess)
        e = vcu__add_node(pGraphNode, graph, pDependencies, numDependencies, &r, NULL, 0, 0);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies,
                                               const struct cudaMemcpy3DParms *p)
{
    vcu__copy_shape_t c;
    size_t so, dso;

    if (p == NULL)
        return vcu__err(cudaErrorInvalidValue);
    if (p->srcArray != NULL || p->dstArray != NULL)
        VCU__NOT_SUPPORTED("cudaGraphAddMemcpyNode of a CUDA array",
                           "CUDA arrays are not offered");
    memset(&c, 0, sizeof(c));
    c.width = p->extent.width;
    c.height = p->extent.height;
    c.depth = p->extent.depth;
    c.spitch = p->srcPtr.pitch ? p->srcPtr.pitch : c.width;
    c.dpitch = p->dstPtr.pitch ? p->dstPtr.pitch : c.width;
    c.srows = p->srcPtr.ysize ? p->srcPtr.ysize : c.height;
    c.drows = p->dstPtr.ysize ? p->dstPtr.ysize : c.height;
    if (p->srcPtr.ptr == NULL || p->dstPtr.ptr == NULL ||
        vcu__copy_offset(p->srcPos.x, p->srcPos.y, p->srcPos.z, c.spitch, c.srows, &so) != 0 ||
        vcu__copy_offset(p->dstPos.x, p->dstPos.y, p->dstPos.z, c.dpitch, c.drows, &dso) != 0)
        return vcu__err(cudaErrorInvalidValue);
    c.src = (unsigned char *)p->srcPtr.ptr + so;
    c.dst = (unsigned char *)p->dstPtr.ptr + dso;
    return vcu__graph_copy(pGraphNode, graph, pDependencies, numDependencies, &c, p->kind,
                           "cudaGraphAddMemcpyNode");
}

VCU__EXPORT cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t *pDependencies,
                                                 size_t numDependencies, void *dst,
                                                 const void *src, size_t count,
                                                 enum cudaMemcpyKind kind)
{
    vcu__copy_shape_t c = { .dst = dst, .src = (unsigned char *)src, .dpitch = count,
                            .spitch = count, .drows = 1, .srows = 1, .width = count,
                            .height = 1, .depth = 1 };

    return vcu__graph_copy(pGraphNode, graph, pDependencies, numDependencies, &c, kind,
                           "cudaGraphAddMemcpyNode1D");
}

cudaError_t vcu__memset_req(const struct cudaMemsetParams *p,
                            struct vcu_cu_graph_node_req *r)
{
    if (p == NULL || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) ||
        p->width == 0 || p->height == 0)
        return cudaErrorInvalidValue;
    memset(r, 0, sizeof(*r));
    r->kind = VCU_CU_NODE_MEMSET;
    r->dst = (uint64_t)(uintptr_t)p->dst;
    r->pitch = p->height > 1 ? p->pitch : 0;
    r->width = p->width;
    r->height = p->height;
    r->value = p->value;
    r->elem_size = p->elementSize;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies,
                                               const struct cudaMemsetParams *p)
{
    struct vcu_cu_graph_node_req r;
    cudaError_t e = vcu__memset_req(p, &r);

    if (e != cudaSuccess)
        return vcu__err(e);
    return vcu__err(vcu__add_node(pGraphNode, graph, pDependencies, numDependencies, &r, NULL, 0,
                                  0));
}

VCU__EXPORT cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                             const cudaGraphNode_t *pDependencies,
                                             size_t numDependencies,
                                             const struct cudaHostNodeParams *p)
{
    struct vcu_cu_graph_node_req r;
    cudaError_t e;

    if (p == NULL || p->fn == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__cb_start();
    if (e != cudaSuccess)
        return vcu__err(e);
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_HOST;
    r.cookie = vcu__cb_new(p->fn, NULL, NULL, p->userData, 1);
    if (r.cookie == 0)
        return vcu__err(cudaErrorMemoryAllocation);
    e = vcu__add_node(pGraphNode, graph, pDependencies, numDependencies, &r, NULL, 0, r.cookie);
    if (e != cudaSuccess)
        vcu__cb_free(r.cookie);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                              const cudaGraphNode_t *pDependencies,
                                              size_t numDependencies)
{
    struct vcu_cu_graph_node_req r;

    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_EMPTY;
    return vcu__err(vcu__add_node(pGraphNode, graph, pDependencies, numDependencies, &r, NULL, 0,
                                  0));
}

/* ---- child graph and event nodes, user objects ---------------------------- */

/* The host clones childGraph into the node; graph holds its staged copies. */
VCU__EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                   const cudaGraphNode_t *pDependencies,
                                                   size_t numDependencies, cudaGraph_t childGraph)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g, *c;
    cudaError_t e = vcu__graph(graph, &g);

    if (e == cudaSuccess)
        e = vcu__graph(childGraph, &c);
    if (e != cudaSuccess)
        return vcu__err(e);
    if (c->dev != g->dev)
        return vcu__err(cudaErrorInvalidValue);
    if (vcu__stages_copy(&g->stages, &c->stages) != 0)
        return vcu__err(cudaErrorMemoryAllocation);
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_CHILD;
    r.function = c->h;
    return vcu__err(vcu__add_node(pGraphNode, graph, pDependencies, numDependencies, &r, NULL, 0,
                                  0));
}

/* The node's own graph (CU_GRAPH_CHILD_GRAPH), a body of the node's graph. */
VCU__EXPORT cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__node_t *n = (vcu__node_t *)node;
    cudaGraph_t b = NULL;
    cudaError_t e;

    if (!vcu__reg_has(n, VCU__H_NODE) || pGraph == NULL || n->kind != VCU_CU_NODE_CHILD)
        return vcu__err(cudaErrorInvalidValue);
    pthread_mutex_lock(&vcu__graph_mu);
    b = (cudaGraph_t)n->child;
    pthread_mutex_unlock(&vcu__graph_mu);
    if (b != NULL) {
        *pGraph = b;
        return cudaSuccess;
    }
    e = vcu__check_dev(n->g->dev);
    memset(&r, 0, sizeof(r));
    r.value = n->h;
    if (e == cudaSuccess)
        e = vcu__call(n->g->dev, VCU_OP_CU_GRAPH_CHILD_GRAPH, 0, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
    if (e == cudaSuccess)
        e = vcu__graph_body_new((cudaGraph_t)n->g, o.value, &b);
    if (e != cudaSuccess)
        return vcu__err(e);
    /* Two threads asking at once: the second record stays a body. */
    pthread_mutex_lock(&vcu__graph_mu);
    if (n->child == NULL)
        n->child = (vcu__graph_t *)b;
    *pGraph = (cudaGraph_t)n->child;
    pthread_mutex_unlock(&vcu__graph_mu);
    return cudaSuccess;
}

static cudaError_t vcu__event_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t *deps, size_t ndeps, cudaEvent_t ev,
                                   uint32_t kind)
{
    struct vcu_cu_graph_node_req r;
    int dev;
    cudaError_t e;

    memset(&r, 0, sizeof(r));
    r.kind = kind;
    e = vcu__event_host(ev, &dev, &r.function);
    if (e == cudaSuccess)
        e = vcu__add_node(pGraphNode, graph, deps, ndeps, &r, NULL, 0, 0);
    if (e == cudaSuccess)
        ((vcu__node_t *)*pGraphNode)->event = ev;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                    const cudaGraphNode_t *pDependencies,
                                                    size_t numDependencies, cudaEvent_t event)
{
    return vcu__event_node(pGraphNode, graph, pDependencies, numDependencies, event,
                           VCU_CU_NODE_EVENT_RECORD);
}

VCU__EXPORT cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                  const cudaGraphNode_t *pDependencies,
                                                  size_t numDependencies, cudaEvent_t event)
{
    return vcu__event_node(pGraphNode, graph, pDependencies, numDependencies, event,
                           VCU_CU_NODE_EVENT_WAIT);
}

static cudaError_t vcu__event_get(cudaGraphNode_t node, cudaEvent_t *out, uint32_t kind)
{
    vcu__node_t *n = (vcu__node_t *)node;

    if (!vcu__reg_has(n, VCU__H_NODE) || out == NULL || n->kind != kind)
        return vcu__err(cudaErrorInvalidValue);
    *out = n->event;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node,
                                                         cudaEvent_t *event_out)
{
    return vcu__event_get(node, event_out, VCU_CU_NODE_EVENT_RECORD);
}

VCU__EXPORT cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node,
                                                       cudaEvent_t *event_out)
{
    return vcu__event_get(node, event_out, VCU_CU_NODE_EVENT_WAIT);
}

/*
 * User objects: the host's driver counts the references (ours, graphs',
 * execs'); the destructor's cookie comes back once, when the last goes,
 * and runs on our callback thread (docs/driver-api.md, "User objects").
 */
typedef struct vcu__uobj_s {
    int dev;
    uint64_t h;
    void *ptr;
    cudaHostFn_t fn;
} vcu__uobj_t;

static void vcu__uobj_run(void *arg)
{
    vcu__uobj_t *u = arg;

    vcu__reg_del(u);
    u->fn(u->ptr);
    free(u);
}

VCU__EXPORT cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr,
                                             cudaHostFn_t destroy, unsigned int initialRefcount,
                                             unsigned int flags)
{
    struct vcu_cu_uobj_req r;
    struct vcu_cu_u64_resp o;
    vcu__uobj_t *u;
    int dev;
    cudaError_t e;

    if (object_out == NULL || destroy == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e == cudaSuccess)
        e = vcu__cb_start();
    if (e != cudaSuccess)
        return vcu__err(e);
    u = calloc(1, sizeof(*u));
    if (u == NULL || vcu__reg_add(u, VCU__H_UOBJ) != 0) {
        free(u);
        return vcu__err(cudaErrorMemoryAllocation);
    }
    u->dev = dev;
    u->ptr = ptr;
    u->fn = destroy;
    memset(&r, 0, sizeof(r));
    r.cookie = vcu__cb_new(vcu__uobj_run, NULL, NULL, u, 0);
    r.count = initialRefcount;
    r.flags = flags;
    e = r.cookie != 0 ? vcu__call(dev, VCU_OP_CU_USER_OBJECT_CREATE, 0, &r, sizeof(r), NULL, 0,
                                  &o, sizeof(o))
                      : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        vcu__cb_free(r.cookie);
        vcu__reg_del(u);
        free(u);
        return vcu__err(e);
    }
    u->h = o.value;
    *object_out = (cudaUserObject_t)u;
    return cudaSuccess;
}

/* CU_USER_OBJECT_REF; the object may be gone once the host answers. */
static cudaError_t vcu__uobj_ref(cudaUserObject_t object, cudaGraph_t graph, unsigned int count,
                                 unsigned int flags, uint32_t what)
{
    struct vcu_cu_uobj_req r;
    vcu__uobj_t *u = (vcu__uobj_t *)object;
    vcu__graph_t *g = NULL;
    cudaError_t e = cudaSuccess;

    if (graph != NULL || what == VCU_CU_UOBJ_GRAPH_RETAIN || what == VCU_CU_UOBJ_GRAPH_RELEASE)
        e = vcu__graph(graph, &g);
    if (e != cudaSuccess)
        return vcu__err(e);
    if (!vcu__reg_has(u, VCU__H_UOBJ))
        return vcu__err(cudaErrorInvalidValue);
    memset(&r, 0, sizeof(r));
    r.object = u->h;
    r.graph = g != NULL ? g->h : 0;
    r.count = count;
    r.flags = flags;
    r.what = what;
    return vcu__err(vcu__call(g != NULL ? g->dev : u->dev, VCU_OP_CU_USER_OBJECT_REF, 0, &r,
                              sizeof(r), NULL, 0, NULL, 0));
}

VCU__EXPORT cudaError_t cudaUserObjectRetain(cudaUserObject_t object, unsigned int count)
{
    return vcu__uobj_ref(object, NULL, count, 0, VCU_CU_UOBJ_RETAIN);
}

VCU__EXPORT cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count)
{
    return vcu__uobj_ref(object, NULL, count, 0, VCU_CU_UOBJ_RELEASE);
}

VCU__EXPORT cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                                  unsigned int count, unsigned int flags)
{
    return vcu__uobj_ref(object, graph, count, flags, VCU_CU_UOBJ_GRAPH_RETAIN);
}

VCU__EXPORT cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t object,
                                                   unsigned int count)
{
    return vcu__uobj_ref(object, graph, count, 0, VCU_CU_UOBJ_GRAPH_RELEASE);
}

VCU__EXPORT cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
    cudaError_t e;

    if (pGraphClone == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__graph(originalGraph, &g);
    if (e != cudaSuccess)
        return vcu__err(e);
    r.value = g->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_CLONE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        e = vcu__graph_wrap(g->dev, o.value, pGraphClone);
    /* The clone runs the same staged copies. */
    if (e == cudaSuccess &&
        vcu__stages_copy(&((vcu__graph_t *)*pGraphClone)->stages, &g->stages) != 0) {
        cudaGraphDestroy(*pGraphClone);
        *pGraphClone = NULL;
        e = cudaErrorMemoryAllocation;
    }
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes,
                                          size_t *numNodes)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
    cudaError_t e;

    if (numNodes == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__graph(graph, &g);
    if (e != cudaSuccess)
        return vcu__err(e);
    r.value = g->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_NODE_COUNT, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return vcu__err(e);
    if (nodes != NULL) {
        size_t i = 0, n;
        vcu__node_t *nd;

        pthread_mutex_lock(&vcu__graph_mu);
        n = g->nnodes;
        if (n != o.value) {
            /* Nodes this library did not create (a clone, a capture):
             * their handles are not known in the guest. */
            pthread_mutex_unlock(&vcu__graph_mu);
            VCU__NOT_SUPPORTED("cudaGraphGetNodes listing a cloned or captured graph",
                               "only the count is available");
        }
        /* Oldest first, as CUDA lists them. */
        for (nd = g->nodes; nd != NULL && i < n; nd = nd->next, i++)
            if (n - 1 - i < *numNodes)
                nodes[n - 1 - i] = (cudaGraphNode_t)nd;
        pthread_mutex_unlock(&vcu__graph_mu);
        if (*numNodes > n)
            for (i = n; i < *numNodes; i++)
                nodes[i] = NULL;
    }
    *numNodes = o.value;
    return cudaSuccess;
}

static cudaError_t vcu__instantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                    unsigned long long flags)
{
    struct vcu_cu_pair_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
    vcu__exec_t *x;
    cudaError_t e;

    if (pGraphExec == NULL)
        return cudaErrorInvalidValue;
    e = vcu__graph(graph, &g);
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.a = g->h;
    r.b = flags;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_INSTANTIATE, 0, &r, sizeof(r), NULL, 0, &o,
                  sizeof(o));
    if (e != cudaSuccess)
        return e;
    x = calloc(1, sizeof(*x));
    if (x == NULL || vcu__stages_copy(&x->stages, &g->stages) != 0 ||
        vcu__reg_add(x, VCU__H_GRAPH_EXEC) != 0) {
        struct vcu_cu_u64_req d = { .value = o.value };

        if (x != NULL)
            vcu__stages_drop(&x->stages);
        free(x);
        vcu__call(g->dev, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, &d, sizeof(d), NULL, 0, NULL, 0);
        return cudaErrorMemoryAllocation;
    }
    x->dev = g->dev;
    x->h = o.value;
    x->flags = flags;
    *pGraphExec = (cudaGraphExec_t)x;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                      cudaGraph_t graph,
                                                      unsigned long long flags)
{
    return vcu__err(vcu__instantiate(pGraphExec, graph, flags));
}

/* As WithFlags, less the upload flag (which the driver takes only here):
 * instantiation already uploads, so the upload stream is only checked. */
static cudaError_t vcu__instantiate_params(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                           cudaGraphInstantiateParams *p, int ptsz)
{
    uint64_t ws;
    int dev;
    cudaError_t e;

    if (p == NULL)
        return cudaErrorInvalidValue;
    p->errNode_out = NULL;
    p->result_out = cudaGraphInstantiateError;
    if (p->flags & cudaGraphInstantiateFlagUpload) {
        e = vcu__stream(p->uploadStream, ptsz, &dev, &ws);
        if (e != cudaSuccess)
            return e;
    }
    e = vcu__instantiate(pGraphExec, graph, p->flags & ~(unsigned long long)cudaGraphInstantiateFlagUpload);
    if (e == cudaSuccess)
        p->result_out = cudaGraphInstantiateSuccess;
    return e;
}

VCU__EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec,
                                                       cudaGraph_t graph,
                                                       cudaGraphInstantiateParams *p)
{
    return vcu__err(vcu__instantiate_params(pGraphExec, graph, p, 0));
}

VCU__EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
                                                            cudaGraph_t graph,
                                                            cudaGraphInstantiateParams *p);
VCU__EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec,
                                                            cudaGraph_t graph,
                                                            cudaGraphInstantiateParams *p)
{
    return vcu__err(vcu__instantiate_params(pGraphExec, graph, p, 1));
}

VCU__EXPORT cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec,
                                              unsigned long long *flags)
{
    if (flags == NULL)
        return vcu__err(cudaErrorInvalidValue);
    if (!vcu__reg_has(graphExec, VCU__H_GRAPH_EXEC))
        return vcu__err(cudaErrorInvalidResourceHandle);
    *flags = ((vcu__exec_t *)graphExec)->flags;
    return cudaSuccess;
}

/* Instantiation already put the graph on the device: only the handles
 * are checked. */
static cudaError_t vcu__graph_upload(cudaGraphExec_t exec, cudaStream_t stream, int ptsz)
{
    uint64_t ws;
    int dev;
    cudaError_t e;

    if (!vcu__reg_has(exec, VCU__H_GRAPH_EXEC))
        return cudaErrorInvalidResourceHandle;
    e = vcu__stream(stream, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess && dev != ((vcu__exec_t *)exec)->dev)
        e = cudaErrorInvalidValue;
    return e;
}

VCU__EXPORT cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    cudaError_t e = vcu__graph_upload(graphExec, stream, 0);

    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    cudaError_t e = vcu__graph_upload(graphExec, stream, 1);

    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType)
{
    if (pType == NULL)
        return vcu__err(cudaErrorInvalidValue);
    if (!vcu__reg_has(node, VCU__H_NODE))
        return vcu__err(cudaErrorInvalidValue);
    switch (((vcu__node_t *)node)->kind) {
    case VCU_CU_NODE_KERNEL:
        *pType = cudaGraphNodeTypeKernel;
        break;
    case VCU_CU_NODE_MEMCPY:
        *pType = cudaGraphNodeTypeMemcpy;
        break;
    case VCU_CU_NODE_MEMSET:
        *pType = cudaGraphNodeTypeMemset;
        break;
    case VCU_CU_NODE_HOST:
        *pType = cudaGraphNodeTypeHost;
        break;
    case VCU__RT_NODE_MEM_ALLOC:
        *pType = cudaGraphNodeTypeMemAlloc;
        break;
    case VCU__RT_NODE_MEM_FREE:
        *pType = cudaGraphNodeTypeMemFree;
        break;
    case VCU__RT_NODE_COND:
        *pType = cudaGraphNodeTypeConditional;
        break;
    case VCU_CU_NODE_CHILD:
        *pType = cudaGraphNodeTypeGraph;
        break;
    case VCU_CU_NODE_EVENT_RECORD:
        *pType = cudaGraphNodeTypeEventRecord;
        break;
    case VCU_CU_NODE_EVENT_WAIT:
        *pType = cudaGraphNodeTypeWaitEvent;
        break;
    default:
        *pType = cudaGraphNodeTypeEmpty;
        break;
    }
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                             unsigned long long flags)
{
    return cudaGraphInstantiateWithFlags(pGraphExec, graph, flags);
}

static cudaError_t vcu__graph_launch(cudaGraphExec_t exec, cudaStream_t stream, int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__exec_t *x;
    int dev;
    cudaError_t e;

    if (!vcu__reg_has(exec, VCU__H_GRAPH_EXEC))
        return cudaErrorInvalidResourceHandle;
    x = (vcu__exec_t *)exec;
    memset(&r, 0, sizeof(r));
    e = vcu__stream(stream, ptsz, &dev, &r.b);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess && dev != x->dev)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = vcu__managed_use(dev, r.b);
    if (e != cudaSuccess)
        return e;
    r.a = x->h;
    return vcu__call(dev, VCU_OP_CU_GRAPH_LAUNCH, 1, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return vcu__err(vcu__graph_launch(graphExec, stream, 0));
}

VCU__EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    return vcu__err(vcu__graph_launch(graphExec, stream, 1));
}

VCU__EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    struct vcu_cu_u64_req r;
    vcu__exec_t *x = (vcu__exec_t *)graphExec;
    cudaError_t e;

    if (!vcu__reg_has(graphExec, VCU__H_GRAPH_EXEC))
        return vcu__err(cudaErrorInvalidResourceHandle);
    vcu__reg_del(graphExec);
    r.value = x->h;
    e = vcu__check_dev(x->dev);
    if (e == cudaSuccess)
        e = vcu__call(x->dev, VCU_OP_CU_GRAPH_EXEC_DESTROY, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__stages_drop(&x->stages);
    free(x);
    return vcu__err(e);
}
