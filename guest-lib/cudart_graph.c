/*
 * Graphs and stream capture.  cudaGraph_t, cudaGraphNode_t and
 * cudaGraphExec_t are records of this library naming host handles; a
 * graph keeps its nodes so cudaGraphGetNodes can list them.
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_int.h"
#include "vcu_stage.h"

typedef struct vcu__node_s {
    uint64_t h;
    struct vcu__graph_s *g;
    uint64_t cookie;                /* host node's callback record, or 0 */
    uint32_t kind;                  /* VCU_CU_NODE_* */
    struct vcu__node_s *next;
    void *owned;                    /* freed with it (a conditional node's phGraph_out) */
} vcu__node_t;

typedef struct vcu__graph_s {
    int dev;
    uint64_t h;
    vcu__node_t *nodes;             /* newest first; protected by vcu__graph_mu */
    size_t nnodes;
    /* A capture's graph (cudaStreamGetCaptureInfo's graph_out): nonzero
     * capture id while the capture owns it, and on vcu__cap_graphs.  Both
     * under vcu__graph_mu. */
    unsigned long long cap_id;
    struct vcu__graph_s *cap_next;
    vcu__stages_t stages;           /* its pageable copies' (vcu_stage.h) */
    /* A conditional node's body graph: the graph holding the node (it
     * goes with it, never by itself); a graph's bodies, linked by
     * body_next.  Under vcu__graph_mu. */
    struct vcu__graph_s *parent;
    struct vcu__graph_s *bodies;
    struct vcu__graph_s *body_next;
} vcu__graph_t;

typedef struct vcu__exec_s {
    int dev;
    uint64_t h;
    unsigned long long flags;       /* as instantiated */
    vcu__stages_t stages;           /* its graph's, when instantiated */
} vcu__exec_t;

static pthread_mutex_t vcu__graph_mu = PTHREAD_MUTEX_INITIALIZER;
/* Captures begun and not yet ended in this process; atomic.  While none
 * is, copies need not ask whether their stream captures
 * (vcu__capture_copy). */
static int vcu__captures;

/* The graphs of captures asked for and not yet ended; under
 * vcu__graph_mu. */
static vcu__graph_t *vcu__cap_graphs;

static cudaError_t vcu__graph(cudaGraph_t g, vcu__graph_t **out)
{
    if (!vcu__reg_has(g, VCU__H_GRAPH))
        return cudaErrorInvalidResourceHandle;
    *out = (vcu__graph_t *)g;
    return vcu__check_dev((*out)->dev);
}

static cudaError_t vcu__graph_wrap(int dev, uint64_t h, cudaGraph_t *out)
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
static cudaError_t vcu__add_node_h(vcu__graph_t *g, const uint64_t *hdeps, size_t ndeps,
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
static cudaError_t vcu__kernel_req(int dev, const struct cudaKernelNodeParams *p,
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
static uint64_t vcu__graph_side(const void *p, size_t n, int want_dev, int want_host)
{
    vcu__alloc_t a;
    uint64_t v = (uint64_t)(uintptr_t)p;

    if (want_dev && vcu__mem_find(v, &a) == 0 &&
        (a.kind == VCU__M_DEVICE || a.kind == VCU__M_SYMBOL))
        return v;
    return want_host ? vcu__rt_host_range_dptr(v, n) : 0;
}

/* A copy's shape: each side at its first byte, with its pitch and rows. */
typedef struct vcu__copy_shape_s {
    unsigned char *dst, *src;
    size_t dpitch, spitch, drows, srows;
    size_t width, height, depth;
} vcu__copy_shape_t;

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
static cudaError_t vcu__graph_copy_req(vcu__graph_t *g, const vcu__copy_shape_t *c,
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

static cudaError_t vcu__memset_req(const struct cudaMemsetParams *p,
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

/* As WithFlags: instantiation already uploads, so the upload stream is
 * only checked. */
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
    e = vcu__instantiate(pGraphExec, graph, p->flags);
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

/* ---- stream capture ----------------------------------------------------- */

static cudaError_t vcu__begin_capture(cudaStream_t stream, enum cudaStreamCaptureMode mode,
                                      int ptsz)
{
    struct vcu_cu_pair_req r;
    int dev;
    cudaError_t e;

    memset(&r, 0, sizeof(r));
    e = vcu__stream(stream, ptsz, &dev, &r.a);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    if (r.a == VCU_CU_STREAM_LEGACY)
        return cudaErrorStreamCaptureUnsupported;
    r.b = (uint64_t)mode;   /* cudaStreamCaptureMode values equal CUstreamCaptureMode's */
    e = vcu__call(dev, VCU_OP_CU_STREAM_BEGIN_CAPTURE, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e == cudaSuccess)
        __atomic_fetch_add(&vcu__captures, 1, __ATOMIC_RELEASE);
    return e;
}

VCU__EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                               enum cudaStreamCaptureMode mode)
{
    return vcu__err(vcu__begin_capture(stream, mode, 0));
}

VCU__EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                    enum cudaStreamCaptureMode mode);
VCU__EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                                    enum cudaStreamCaptureMode mode)
{
    return vcu__err(vcu__begin_capture(stream, mode, 1));
}

/* The record on vcu__cap_graphs naming host graph h of dev; under
 * vcu__graph_mu. */
static vcu__graph_t *vcu__cap_graph_find(int dev, uint64_t h)
{
    vcu__graph_t *g;

    for (g = vcu__cap_graphs; g != NULL; g = g->cap_next)
        if (g->dev == dev && g->h == h)
            return g;
    return NULL;
}

/* Ends capture id: its graph record becomes the caller's when the host
 * returned it (handle h, 0 if the capture failed), else it goes. */
static vcu__graph_t *vcu__cap_graph_end(int dev, unsigned long long id, uint64_t h)
{
    vcu__graph_t **pp, *g, *kept = NULL, *gone = NULL;

    pthread_mutex_lock(&vcu__graph_mu);
    for (pp = &vcu__cap_graphs; (g = *pp) != NULL;) {
        if (g->dev == dev && ((h != 0 && g->h == h) || (id != 0 && g->cap_id == id))) {
            *pp = g->cap_next;
            g->cap_id = 0;
            if (h != 0 && g->h == h) {
                kept = g;
            } else {
                g->cap_next = gone;
                gone = g;
            }
            continue;
        }
        pp = &g->cap_next;
    }
    pthread_mutex_unlock(&vcu__graph_mu);
    for (; gone != NULL; gone = g) {
        g = gone->cap_next;
        vcu__reg_del(gone);
        vcu__stages_drop(&gone->stages);
        free(gone);
    }
    return kept;
}

static cudaError_t vcu__end_capture(cudaStream_t stream, cudaGraph_t *pGraph, int ptsz)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    struct vcu_cu_capture_info_resp ci;
    vcu__graph_t *g, *tg;
    int dev, asked;
    cudaError_t e;

    e = vcu__stream(stream, ptsz, &dev, &r.value);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    /* A capture into a graph of the caller's ends in it; it need not be
     * asked for. */
    tg = (vcu__graph_t *)vcu__cap_to_take(dev, r.value);
    if (pGraph == NULL && tg == NULL)
        return cudaErrorInvalidValue;
    if (pGraph != NULL)
        *pGraph = NULL;
    pthread_mutex_lock(&vcu__graph_mu);
    asked = vcu__cap_graphs != NULL;
    pthread_mutex_unlock(&vcu__graph_mu);
    /* Which capture ends, for the graph record it may have. */
    memset(&ci, 0, sizeof(ci));
    if (asked && vcu__call(dev, VCU_OP_CU_STREAM_CAPTURE_INFO, 0, &r, sizeof(r), NULL, 0, &ci,
                           sizeof(ci)) != cudaSuccess)
        ci.id = 0;
    o.value = 0;
    e = vcu__call(dev, VCU_OP_CU_STREAM_END_CAPTURE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        o.value = 0;
    /* The capture is over, made or not (not while it goes on: another
     * thread's to end, or no capture at all). */
    if ((e == cudaSuccess || e == cudaErrorStreamCaptureInvalidated ||
         e == cudaErrorStreamCaptureUnjoined) &&
        __atomic_sub_fetch(&vcu__captures, 1, __ATOMIC_RELEASE) < 0)
        __atomic_store_n(&vcu__captures, 0, __ATOMIC_RELEASE);
    g = asked ? vcu__cap_graph_end(dev, ci.id, o.value) : NULL;
    if (e != cudaSuccess || o.value == 0)
        return e;
    if (tg != NULL && tg->h == o.value) {
        if (pGraph != NULL)
            *pGraph = (cudaGraph_t)tg;
        return cudaSuccess;
    }
    if (pGraph == NULL)
        return cudaErrorInvalidValue;
    if (g != NULL) {
        *pGraph = (cudaGraph_t)g;
        return cudaSuccess;
    }
    return vcu__graph_wrap(dev, o.value, pGraph);
}

VCU__EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return vcu__err(vcu__end_capture(stream, pGraph, 0));
}

VCU__EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
VCU__EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    return vcu__err(vcu__end_capture(stream, pGraph, 1));
}

static cudaError_t vcu__capture_info(cudaStream_t stream, enum cudaStreamCaptureStatus *st,
                                     unsigned long long *id, int ptsz)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_capture_info_resp o;
    int dev;
    cudaError_t e;

    if (st == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream(stream, ptsz, &dev, &r.value);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_STREAM_CAPTURE_INFO, 0, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
    if (e != cudaSuccess)
        return e;
    *st = (enum cudaStreamCaptureStatus)o.status;
    if (id != NULL)
        *id = o.id;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                              enum cudaStreamCaptureStatus *pCaptureStatus)
{
    return vcu__err(vcu__capture_info(stream, pCaptureStatus, NULL, 0));
}

VCU__EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *st);
VCU__EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                   enum cudaStreamCaptureStatus *st)
{
    return vcu__err(vcu__capture_info(stream, st, NULL, 1));
}

/* The record of the capture's graph h: the same one each time. */
static cudaError_t vcu__cap_graph_get(int dev, unsigned long long id, uint64_t h,
                                      cudaGraph_t *out)
{
    vcu__graph_t *g, *ng;

    pthread_mutex_lock(&vcu__graph_mu);
    g = vcu__cap_graph_find(dev, h);
    pthread_mutex_unlock(&vcu__graph_mu);
    if (g == NULL)
        g = (vcu__graph_t *)vcu__cap_to_find(dev, h);   /* a capture into the caller's */
    if (g != NULL) {
        *out = (cudaGraph_t)g;
        return cudaSuccess;
    }
    ng = calloc(1, sizeof(*ng));
    if (ng == NULL || vcu__reg_add(ng, VCU__H_GRAPH) != 0) {
        free(ng);
        return cudaErrorMemoryAllocation;
    }
    ng->dev = dev;
    ng->h = h;
    ng->cap_id = id;
    pthread_mutex_lock(&vcu__graph_mu);
    g = vcu__cap_graph_find(dev, h);        /* another thread's, meanwhile */
    if (g == NULL) {
        ng->cap_next = vcu__cap_graphs;
        vcu__cap_graphs = ng;
        g = ng;
        ng = NULL;
    }
    pthread_mutex_unlock(&vcu__graph_mu);
    if (ng != NULL) {
        vcu__reg_del(ng);
        free(ng);
    }
    *out = (cudaGraph_t)g;
    return cudaSuccess;
}

/*
 * During a capture, the graph being captured (CU_STREAM_CAPTURE_GRAPH):
 * owned by the capture, the same cudaGraph_t each time, and the one
 * cudaStreamEndCapture returns.  The open dependencies are counted;
 * their nodes have no records here, so their list is refused
 * (cudaErrorNotSupported) while there are any.
 */
static cudaError_t vcu__get_capture_info(cudaStream_t stream,
                                         enum cudaStreamCaptureStatus *st,
                                         unsigned long long *id, cudaGraph_t *graph_out,
                                         const cudaGraphNode_t **deps_out,
                                         const cudaGraphEdgeData **edges_out, size_t *ndeps_out,
                                         int ptsz)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_capture_graph_resp o;
    int dev;
    cudaError_t e;

    if (graph_out == NULL && deps_out == NULL && edges_out == NULL && ndeps_out == NULL)
        return vcu__capture_info(stream, st, id, ptsz);
    if (st == NULL || (edges_out != NULL && deps_out == NULL))
        return cudaErrorInvalidValue;
    e = vcu__stream(stream, ptsz, &dev, &r.value);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_STREAM_CAPTURE_GRAPH, 0, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
    if (e != cudaSuccess)
        return e;
    if (o.status == cudaStreamCaptureStatusActive && deps_out != NULL && o.ndeps > 0)
        VCU__NOT_SUPPORTED("cudaStreamGetCaptureInfo listing a capture's dependencies",
                           "only the count");
    if (graph_out != NULL) {
        *graph_out = NULL;
        if (o.status == cudaStreamCaptureStatusActive && o.graph != 0) {
            e = vcu__cap_graph_get(dev, o.id, o.graph, graph_out);
            if (e != cudaSuccess)
                return e;
        }
    }
    *st = (enum cudaStreamCaptureStatus)o.status;
    if (id != NULL)
        *id = o.id;
    if (deps_out != NULL)
        *deps_out = NULL;
    if (edges_out != NULL)
        *edges_out = NULL;
    if (ndeps_out != NULL)
        *ndeps_out = o.status == cudaStreamCaptureStatusActive ? (size_t)o.ndeps : 0;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                                 enum cudaStreamCaptureStatus *captureStatus_out,
                                                 unsigned long long *id_out,
                                                 cudaGraph_t *graph_out,
                                                 const cudaGraphNode_t **dependencies_out,
                                                 const cudaGraphEdgeData **edgeData_out,
                                                 size_t *numDependencies_out)
{
    return vcu__err(vcu__get_capture_info(stream, captureStatus_out, id_out, graph_out,
                                          dependencies_out, edgeData_out, numDependencies_out,
                                          0));
}

VCU__EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(
    cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
    unsigned long long *id_out, cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
    const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out);
VCU__EXPORT cudaError_t cudaStreamGetCaptureInfo_ptsz(
    cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
    unsigned long long *id_out, cudaGraph_t *graph_out, const cudaGraphNode_t **dependencies_out,
    const cudaGraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return vcu__err(vcu__get_capture_info(stream, captureStatus_out, id_out, graph_out,
                                          dependencies_out, edgeData_out, numDependencies_out,
                                          1));
}

/*
 * The thread's capture interaction mode, kept in the guest (the previous
 * one is this thread's) and sent to the host, whose worker makes the
 * session's calls: the mode a thread set last stands there for the whole
 * session.
 */
static __thread enum cudaStreamCaptureMode vcu__capture_mode = cudaStreamCaptureModeGlobal;

VCU__EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    enum cudaStreamCaptureMode prev;
    int dev;
    cudaError_t e;

    if (mode == NULL || *mode < cudaStreamCaptureModeGlobal ||
        *mode > cudaStreamCaptureModeRelaxed)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e == cudaSuccess) {
        memset(&r, 0, sizeof(r));
        r.value = (uint64_t)*mode;
        e = vcu__call(dev, VCU_OP_CU_THREAD_CAPTURE_MODE, 0, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
    }
    if (e != cudaSuccess)
        return vcu__err(e);
    prev = vcu__capture_mode;
    vcu__capture_mode = *mode;
    *mode = prev;
    return cudaSuccess;
}

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

/* ---- copies with host memory in a capture --------------------------------- */

int vcu__stream_capturing(int dev, uint64_t ws)
{
    struct vcu_cu_u64_req r = { .value = ws };
    struct vcu_cu_capture_info_resp o;

    if (__atomic_load_n(&vcu__captures, __ATOMIC_ACQUIRE) <= 0 || ws == VCU_CU_STREAM_LEGACY)
        return 0;
    memset(&o, 0, sizeof(o));
    return vcu__call(dev, VCU_OP_CU_STREAM_CAPTURE_INFO, 0, &r, sizeof(r), NULL, 0, &o,
                     sizeof(o)) == cudaSuccess &&
           o.status == cudaStreamCaptureStatusActive;
}

/*
 * A copy between device and host memory (kind cudaMemcpyHostToDevice or
 * DeviceToHost) on stream ws of dev while it captures.  The host cannot
 * make it (no worker reaches pageable guest memory when the graph runs,
 * and the copy's wait would end the capture), so it becomes what NVIDIA's
 * runtime makes of it: a memcpy node of the capture's graph, which moves
 * the bytes each time the graph runs, made as cudaGraphAddMemcpyNode1D
 * makes one (pageable memory through a stage the graph owns,
 * vcu_stage.h), after the capture's open dependencies and then the only
 * one.  *done 0: the stream does not capture, the copy is the caller's.
 */
cudaError_t vcu__capture_copy(int dev, uint64_t ws, void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind, int *done)
{
    static int logged;
    struct vcu_cu_u64_req r = { .value = ws };
    struct vcu_cu_capture_graph_resp o;
    struct vcu_cu_capture_deps_resp *dp = NULL;
    struct vcu_cu_update_deps_req u;
    struct vcu_cu_graph_node_req nr;
    vcu__copy_shape_t c = { .dst = dst, .src = (unsigned char *)src, .dpitch = n,
                            .spitch = n, .drows = 1, .srows = 1, .width = n,
                            .height = 1, .depth = 1 };
    cudaGraph_t graph;
    uint64_t node;
    size_t nd = 0;
    cudaError_t e;

    *done = 0;
    if (__atomic_load_n(&vcu__captures, __ATOMIC_ACQUIRE) <= 0 || ws == VCU_CU_STREAM_LEGACY)
        return cudaSuccess;
    e = vcu__call(dev, VCU_OP_CU_STREAM_CAPTURE_GRAPH, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess || o.status != cudaStreamCaptureStatusActive || o.graph == 0)
        return cudaSuccess;         /* the copy itself says what is wrong */
    *done = 1;
    e = vcu__cap_graph_get(dev, o.id, o.graph, &graph);
    if (e == cudaSuccess && o.ndeps > 0) {
        dp = malloc(sizeof(*dp));
        e = dp != NULL ? vcu__call(dev, VCU_OP_CU_STREAM_CAPTURE_DEPS, 0, &r, sizeof(r), NULL, 0,
                                   dp, sizeof(*dp))
                       : cudaErrorMemoryAllocation;
        if (e == cudaSuccess && dp->ndeps > VCU_CU_MAX_CAPTURE_DEPS) {
            vcu__log_once(&logged, "virtio-cuda: a copy in a stream capture with more than %u "
                                   "open dependencies is not supported\n",
                          VCU_CU_MAX_CAPTURE_DEPS);
            e = cudaErrorNotSupported;
        }
        if (e == cudaSuccess)
            nd = dp->status == cudaStreamCaptureStatusActive ? (size_t)dp->ndeps : 0;
    }
    if (e == cudaSuccess)
        e = vcu__graph_copy_req((vcu__graph_t *)graph, &c, kind, "cudaMemcpyAsync in a capture",
                                &nr);
    if (e == cudaSuccess)
        e = vcu__add_node_h((vcu__graph_t *)graph, dp != NULL ? dp->node : NULL, nd, &nr, NULL,
                            0, &node);
    free(dp);
    if (e != cudaSuccess)
        return e;
    memset(&u, 0, sizeof(u));
    u.stream = ws;
    u.flags = cudaStreamSetCaptureDependencies;
    u.ndeps = 1;
    u.node[0] = node;
    return vcu__call(dev, VCU_OP_CU_STREAM_UPDATE_DEPS, 0, &u, sizeof(u), NULL, 0, NULL, 0);
}
