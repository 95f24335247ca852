/*
 * libcuda.so.1: stream capture and graphs, over the host's CU_GRAPH_* and
 * CU_STREAM_*_CAPTURE opcodes, as our runtime does them.  CUgraph,
 * CUgraphNode and CUgraphExec are records of this library naming host
 * handles; a graph keeps the nodes made here so cuGraphGetNodes can list
 * them (a captured or cloned graph's nodes are counted, not listed, but
 * when every one of them has a record here: added, or listed as a
 * capture's dependency).
 * Kernel, memcpy (pageable memory through vcu_stage.h), memset, host
 * and empty nodes are offered.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* The graphs of captures asked for and not yet ended; under
 * vcu__drv.lock. */
static vcu__graph_t *vcu__cap_graphs;
/* Captures begun and not yet ended in this process; atomic.  While none
 * is, copies need not ask whether their stream captures
 * (vcu__capture_copy). */
static int vcu__captures;

static vcu__gnode_t *vcu__gnode_of(vcu__graph_t *g, uint64_t h);
static CUresult vcu__list(vcu__graph_t *g, uint64_t gh, uint64_t nh, uint32_t what,
                          CUgraphNode *a, CUgraphNode *b, size_t *num);

CUresult vcu__graph_arg(CUgraph graph, vcu__graph_t **out)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(graph, VCU__K_GRAPH))
        return CUDA_ERROR_INVALID_VALUE;
    *out = (vcu__graph_t *)graph;
    return CUDA_SUCCESS;
}

CUresult vcu__graph_wrap(int dev, uint64_t h, CUgraph *out)
{
    vcu__graph_t *g = calloc(1, sizeof(*g));

    if (g == NULL || vcu__reg_add(g, VCU__K_GRAPH) != 0) {
        struct vcu_cu_u64_req d = { .value = h };

        free(g);
        vcu__call(dev, VCU_OP_CU_GRAPH_DESTROY, &d, sizeof(d), NULL, 0, NULL, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->dev = dev;
    g->h = h;
    *out = (CUgraph)g;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    struct vcu_cu_u64_req r = { .value = flags };
    struct vcu_cu_u64_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (phGraph == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__call(c->dev, VCU_OP_CU_GRAPH_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__graph_wrap(c->dev, o.value, phGraph);
}

/* Frees the records of g, its nodes and its conditional nodes' body
 * graphs (theirs too, however deep: a list, no recursion). */
static void vcu__graph_free(vcu__graph_t *g)
{
    vcu__graph_t *left = g, *b, *nb;
    vcu__gnode_t *n, *next;

    g->body_next = NULL;
    while ((g = left) != NULL) {
        left = g->body_next;
        pthread_mutex_lock(&vcu__drv.lock);
        for (b = g->bodies; b != NULL; b = nb) {
            nb = b->body_next;
            b->body_next = left;
            left = b;
        }
        g->bodies = NULL;
        pthread_mutex_unlock(&vcu__drv.lock);
        vcu__reg_del(g);
        for (n = g->nodes; n != NULL; n = next) {
            next = n->next;
            vcu__reg_del(n);
            free(n->bodies);
            free(n->kbuf);
            free(n);
        }
        free(g->deps_out);
        free(g->edges_out);
        vcu__stages_drop(&g->stages);
        free(g);
    }
}

/* Host node functions stay valid: an instantiated copy may still run
 * them. */
VCU__EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    struct vcu_cu_u64_req r;
    vcu__graph_t *g;
    CUresult e = vcu__graph_arg(hGraph, &g);

    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    /* The capture's (cuda.h); a body graph its conditional node's. */
    e = g->cap_id != 0 || g->parent != NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    pthread_mutex_unlock(&vcu__drv.lock);
    if (e != CUDA_SUCCESS)
        return e;
    vcu__reg_del(g);
    r.value = g->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__graph_free(g);
    return e;
}

CUresult vcu__deps_req(vcu__graph_t *g, const void *req, size_t n, const CUgraphNode *deps,
                       size_t ndeps, const void *extra, size_t extra_len, void **out,
                       size_t *len)
{
    char *q;
    size_t i;

    if ((ndeps > 0 && deps == NULL) || ndeps > VCU_CU_MAX_DEPS)
        return CUDA_ERROR_INVALID_VALUE;
    q = malloc(n + ndeps * 8 + extra_len);
    if (q == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(q, req, n);
    for (i = 0; i < ndeps; i++) {
        vcu__gnode_t *dn = (vcu__gnode_t *)deps[i];
        uint64_t h;

        if (!vcu__reg_has(dn, VCU__K_GNODE) || dn->g != g) {
            free(q);
            return CUDA_ERROR_INVALID_VALUE;
        }
        h = dn->h;
        memcpy(q + n + i * 8, &h, 8);
    }
    if (extra_len)
        memcpy(q + n + ndeps * 8, extra, extra_len);
    *out = q;
    *len = n + ndeps * 8 + extra_len;
    return CUDA_SUCCESS;
}

/* CU_GRAPH_ADD_NODE with the dependencies and trailing bytes. */
static CUresult vcu__add_node(CUgraphNode *out, vcu__graph_t *g, const CUgraphNode *deps,
                              size_t ndeps, struct vcu_cu_graph_node_req *tmpl,
                              const void *extra, uint32_t extra_len)
{
    struct vcu_cu_u64_resp o;
    vcu__gnode_t *n;
    void *q;
    size_t len;
    CUresult e;

    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    tmpl->graph = g->h;
    tmpl->ndeps = (uint32_t)ndeps;
    e = vcu__deps_req(g, tmpl, sizeof(*tmpl), deps, ndeps, extra, extra_len, &q, &len);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_ADD_NODE, q, (uint32_t)len, NULL, 0, &o, sizeof(o));
    free(q);
    if (e != CUDA_SUCCESS)
        return e;
    n = vcu__gnode_new(g, o.value);
    if (n == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

vcu__gnode_t *vcu__gnode_new(vcu__graph_t *g, uint64_t h)
{
    vcu__gnode_t *n = calloc(1, sizeof(*n));

    if (n == NULL || vcu__reg_add(n, VCU__K_GNODE) != 0) {
        free(n);
        return NULL;
    }
    n->h = h;
    n->g = g;
    pthread_mutex_lock(&vcu__drv.lock);
    n->next = g->nodes;
    g->nodes = n;
    g->nnodes++;
    pthread_mutex_unlock(&vcu__drv.lock);
    return n;
}

/* The record of kernel node n: p with func f, its parameters (packed in
 * params) copied; n->kind 0 if out of memory.  Under vcu__drv.lock. */
static void vcu__keep_kernel(vcu__gnode_t *n, const CUDA_KERNEL_NODE_PARAMS *p,
                             const vcu__func_t *f, const char *params)
{
    size_t body = ((size_t)f->param_bytes + 15) & ~(size_t)15;
    char *buf = malloc(body + ((size_t)f->nparams + 1) * sizeof(void *));
    void **kp;
    uint32_t i;

    free(n->kbuf);
    n->kbuf = buf;
    n->kind = 0;
    if (buf == NULL)
        return;
    memcpy(buf, params, f->param_bytes);
    kp = (void **)(buf + body);
    for (i = 0; i < f->nparams; i++)
        kp[i] = buf + f->params[i].offset;
    kp[i] = NULL;
    n->p.kernel = *p;
    n->p.kernel.func = (CUfunction)f;
    n->p.kernel.kernelParams = kp;
    n->p.kernel.extra = NULL;
    n->p.kernel.kern = NULL;
    n->p.kernel.ctx = NULL;
    n->kind = VCU_CU_NODE_KERNEL;
}

/* A node's record of what it was given (kind, p; a kernel's through
 * vcu__keep_kernel). */
static void vcu__keep(vcu__gnode_t *n, uint32_t kind, const void *p, size_t len)
{
    pthread_mutex_lock(&vcu__drv.lock);
    free(n->kbuf);
    n->kbuf = NULL;
    memcpy(&n->p, p, len);
    n->kind = kind;
    pthread_mutex_unlock(&vcu__drv.lock);
}

/* A kernel node's request (func, or kern's function, in the graph's
 * device) into *r and its packed parameters into params (room for
 * VCU_CU_MAX_PARAM_BYTES); the function in *fo. */
static CUresult vcu__kernel_req(vcu__graph_t *g, const CUDA_KERNEL_NODE_PARAMS *p, CUkernel kern,
                                struct vcu_cu_graph_node_req *r, char *params, vcu__func_t **fo)
{
    vcu__func_t *f;
    CUfunction fn;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    fn = p->func;
    if (fn == NULL && kern != NULL) {
        e = cuKernelGetFunction(&fn, kern);
        if (e != CUDA_SUCCESS)
            return e;
    }
    if (vcu__reg_has(fn, VCU__K_KERNEL)) {
        e = cuKernelGetFunction(&fn, (CUkernel)fn);
        if (e != CUDA_SUCCESS)
            return e;
    }
    if (!vcu__reg_has(fn, VCU__K_FUNCTION))
        return CUDA_ERROR_INVALID_HANDLE;
    f = (vcu__func_t *)fn;
    if (f->mod->dev != g->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (p->gridDimX == 0 || p->gridDimY == 0 || p->gridDimZ == 0 || p->blockDimX == 0 ||
        p->blockDimY == 0 || p->blockDimZ == 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__pack(f, p->kernelParams, p->extra, params);
    if (e != CUDA_SUCCESS)
        return e;
    memset(r, 0, sizeof(*r));
    r->kind = VCU_CU_NODE_KERNEL;
    r->function = f->h;
    r->grid[0] = p->gridDimX;
    r->grid[1] = p->gridDimY;
    r->grid[2] = p->gridDimZ;
    r->block[0] = p->blockDimX;
    r->block[1] = p->blockDimY;
    r->block[2] = p->blockDimZ;
    r->shared_mem = p->sharedMemBytes;
    r->param_bytes = f->param_bytes;
    *fo = f;
    return CUDA_SUCCESS;
}

static CUresult vcu__kernel_node(CUgraphNode *phGraphNode, CUgraph hGraph,
                                 const CUgraphNode *deps, size_t ndeps,
                                 const CUDA_KERNEL_NODE_PARAMS *p, CUkernel kern)
{
    struct vcu_cu_graph_node_req r;
    char *params;
    vcu__graph_t *g;
    vcu__func_t *f = NULL;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    params = malloc(VCU_CU_MAX_PARAM_BYTES);
    if (params == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__kernel_req(g, p, kern, &r, params, &f);
    if (e == CUDA_SUCCESS)
        e = vcu__add_node(phGraphNode, g, deps, ndeps, &r, params, f->param_bytes);
    if (e == CUDA_SUCCESS) {
        pthread_mutex_lock(&vcu__drv.lock);
        vcu__keep_kernel((vcu__gnode_t *)*phGraphNode, p, f, params);
        pthread_mutex_unlock(&vcu__drv.lock);
    }
    free(params);
    return e;
}

VCU__EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             size_t numDependencies,
                                             const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    return vcu__kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams,
                            nodeParams != NULL ? nodeParams->kern : NULL);
}

/* The 1-ABI struct lacks kern and ctx: the same first fields. */
VCU__EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies,
                                          size_t numDependencies,
                                          const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
    CUDA_KERNEL_NODE_PARAMS p;

    if (nodeParams == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&p, 0, sizeof(p));
    memcpy(&p, nodeParams, sizeof(*nodeParams));
    return vcu__kernel_node(phGraphNode, hGraph, dependencies, numDependencies, &p, NULL);
}

/*
 * One side of a graph memcpy node, at its first byte (base + z slices +
 * y rows + x bytes), spanning span bytes: device memory as it is; host
 * memory (CU_MEMORYTYPE_HOST, or a UNIFIED address that is not device
 * memory) through the device pointer of its page-locked or registered
 * allocation, which the session's worker maps, so the node reads or
 * writes the guest's pages when the graph runs.  Pageable host memory has
 * no such pointer: *pageable is set to its first byte (and *out left 0)
 * for the caller to stage (vcu_stage.h).
 */
static CUresult vcu__memcpy_side(CUmemorytype t, const void *host, CUdeviceptr dptr, size_t off,
                                 size_t span, uint64_t *out, unsigned char **pageable)
{
    static int logged;
    unsigned int mt = 0;
    CUdeviceptr d;

    *out = 0;
    *pageable = NULL;
    switch (t) {
    case CU_MEMORYTYPE_DEVICE:
        *out = dptr + off;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
        if (cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr + off) ==
                CUDA_SUCCESS &&
            mt == CU_MEMORYTYPE_DEVICE) {
            *out = dptr + off;
            return CUDA_SUCCESS;
        }
        return vcu__memcpy_side(CU_MEMORYTYPE_HOST, (const void *)(uintptr_t)dptr, 0, off, span,
                                out, pageable);
    case CU_MEMORYTYPE_HOST:
        if (host == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        if (vcu__host_range_dptr((const char *)host + off, span, &d) == CUDA_SUCCESS)
            *out = d;
        else
            *pageable = (unsigned char *)host + off;
        return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY:
        vcu__log_once(&logged, "libcuda (virtio-cuda): cuGraphAddMemcpyNode: CUDA arrays are "
                               "not supported\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static void vcu__stage_release(vcu__stage_t *st)
{
    cuMemFreeHost(st->buf);         /* after the device's work on it */
    vcu__hostfn_forget(st->cookie);
}

/*
 * The stage of a copy whose one side is pageable (p, with that side's
 * pitch and rows): a page-locked buffer holding the copy densely, its
 * device pointer in *dptr, and the host function's cookie; taken by g.
 */
static CUresult vcu__stage_new(vcu__graph_t *g, const CUDA_MEMCPY3D *m, unsigned char *p,
                               size_t pitch, size_t rows, int in, uint64_t *dptr,
                               vcu__stage_t **out)
{
    vcu__stage_t *st;
    size_t n = 0;
    CUdeviceptr d;
    CUresult e;

    st = vcu__stage_new_of(p, pitch, rows, m->WidthInBytes, m->Height, m->Depth, in,
                           vcu__stage_release, &n);
    if (st == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = cuMemHostAlloc((void **)&st->buf, n, 0);
    if (e != CUDA_SUCCESS) {
        free(st);
        return e;
    }
    e = vcu__host_range_dptr(st->buf, n, &d);
    st->cookie = e == CUDA_SUCCESS ? vcu__hostfn_cookie(vcu__stage_run, st) : 0;
    if (e == CUDA_SUCCESS && st->cookie == 0)
        e = CUDA_ERROR_OUT_OF_MEMORY;
    if (e == CUDA_SUCCESS && vcu__stages_add(&g->stages, st) != 0)
        e = CUDA_ERROR_OUT_OF_MEMORY;
    if (e != CUDA_SUCCESS) {
        vcu__stage_release(st);
        free(st);
        return e;
    }
    *dptr = d;
    *out = st;
    return CUDA_SUCCESS;
}

/*
 * A copy node's request (any shape: 1D, 2D, 3D with pitches and offsets)
 * into *r: between device memory and device, page-locked, registered or
 * pageable host memory, as a device-to-device copy on the host
 * (vcu__memcpy_side); pageable memory on one side goes through a stage
 * (vcu_stage.h) taken by g (g NULL: CUDA_ERROR_NOT_SUPPORTED, as on both
 * sides or with CUDA arrays; logged once, naming the call who).
 */
static CUresult vcu__copy_req(vcu__graph_t *g, const CUDA_MEMCPY3D *m,
                              struct vcu_cu_graph_node_req *r, const char *who)
{
    static int logged, logged_set;
    unsigned char *sp, *dp;
    vcu__stage_t *st = NULL;
    uint64_t src, dst;
    size_t spitch, dpitch, srows, drows, sspan, dspan, soff, doff;
    CUresult e = CUDA_SUCCESS;

    if (m == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->WidthInBytes == 0 || m->Height == 0 || m->Depth == 0 || m->srcLOD || m->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    spitch = m->srcPitch ? m->srcPitch : m->WidthInBytes;
    dpitch = m->dstPitch ? m->dstPitch : m->WidthInBytes;
    srows = m->srcHeight ? m->srcHeight : m->Height;
    drows = m->dstHeight ? m->dstHeight : m->Height;
    if (((m->Height > 1 || m->Depth > 1) && (spitch < m->WidthInBytes ||
                                             dpitch < m->WidthInBytes)) ||
        (m->Depth > 1 && (srows < m->Height || drows < m->Height)))
        return CUDA_ERROR_INVALID_VALUE;
    sspan = vcu__stage_span(m->WidthInBytes, m->Height, m->Depth, spitch, srows);
    dspan = vcu__stage_span(m->WidthInBytes, m->Height, m->Depth, dpitch, drows);
    if (sspan == 0 || dspan == 0 ||
        vcu__copy_offset(m->srcXInBytes, m->srcY, m->srcZ, spitch, srows, &soff) != 0 ||
        vcu__copy_offset(m->dstXInBytes, m->dstY, m->dstZ, dpitch, drows, &doff) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__memcpy_side(m->srcMemoryType, m->srcHost, m->srcDevice, soff, sspan, &src, &sp);
    if (e == CUDA_SUCCESS)
        e = vcu__memcpy_side(m->dstMemoryType, m->dstHost, m->dstDevice, doff, dspan, &dst,
                             &dp);
    if (e != CUDA_SUCCESS)
        return e;
    if (sp != NULL && dp != NULL) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s: pageable host memory on both sides "
                               "is not supported\n", who);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    if ((sp != NULL || dp != NULL) && g == NULL) {
        vcu__log_once(&logged_set, "libcuda (virtio-cuda): %s: pageable host memory is not "
                                   "supported (page-locked or registered memory is)\n", who);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    memset(r, 0, sizeof(*r));
    r->kind = VCU_CU_NODE_MEMCPY;
    r->width = m->WidthInBytes;
    r->height = m->Height;
    r->depth = m->Depth;
    r->src_pitch = spitch;
    r->dst_pitch = dpitch;
    r->src_rows = srows;
    r->dst_rows = drows;
    if (sp != NULL) {
        e = vcu__stage_new(g, m, sp, spitch, srows, 1, &src, &st);
        r->src_pitch = m->WidthInBytes;
        r->src_rows = m->Height;
        r->stage = VCU_CU_STAGE_IN;
    } else if (dp != NULL) {
        e = vcu__stage_new(g, m, dp, dpitch, drows, 0, &dst, &st);
        r->dst_pitch = m->WidthInBytes;
        r->dst_rows = m->Height;
        r->stage = VCU_CU_STAGE_OUT;
    }
    if (e != CUDA_SUCCESS)
        return e;
    r->cookie = st != NULL ? st->cookie : 0;
    r->dst = dst;
    r->src = src;
    return CUDA_SUCCESS;
}

/*
 * cuGraphAddMemcpyNode: vcu__copy_req; a staged copy is one child-graph
 * node on the host.
 */
VCU__EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies,
                                          size_t numDependencies,
                                          const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g;
    CUresult e;

    (void)ctx;
    if (copyParams == NULL || phGraphNode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e == CUDA_SUCCESS)
        e = vcu__copy_req(g, copyParams, &r, "cuGraphAddMemcpyNode");
    /* A failed node leaves its stage to the graph: freed with it. */
    if (e == CUDA_SUCCESS)
        e = vcu__add_node(phGraphNode, g, dependencies, numDependencies, &r, NULL, 0);
    if (e == CUDA_SUCCESS)
        vcu__keep((vcu__gnode_t *)*phGraphNode, VCU_CU_NODE_MEMCPY, copyParams,
                  sizeof(*copyParams));
    return e;
}

/* A memset node's request into *r. */
static CUresult vcu__memset_req(const CUDA_MEMSET_NODE_PARAMS *p, struct vcu_cu_graph_node_req *r)
{
    if (p == NULL || p->width == 0 || p->height == 0 ||
        (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
        return CUDA_ERROR_INVALID_VALUE;
    memset(r, 0, sizeof(*r));
    r->kind = VCU_CU_NODE_MEMSET;
    r->dst = p->dst;
    r->pitch = p->pitch;
    r->width = p->width;
    r->height = p->height;
    r->value = p->value;
    r->elem_size = p->elementSize;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies,
                                          size_t numDependencies,
                                          const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                          CUcontext ctx)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g;
    CUresult e;

    (void)ctx;
    e = vcu__memset_req(memsetParams, &r);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__graph_arg(hGraph, &g);
    if (e == CUDA_SUCCESS)
        e = vcu__add_node(phGraphNode, g, dependencies, numDependencies, &r, NULL, 0);
    if (e == CUDA_SUCCESS)
        vcu__keep((vcu__gnode_t *)*phGraphNode, VCU_CU_NODE_MEMSET, memsetParams,
                  sizeof(*memsetParams));
    return e;
}

VCU__EXPORT CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g;
    CUresult e;

    if (nodeParams == NULL || nodeParams->fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_HOST;
    r.cookie = vcu__hostfn_cookie(nodeParams->fn, nodeParams->userData);
    if (r.cookie == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__add_node(phGraphNode, g, dependencies, numDependencies, &r, NULL, 0);
    if (e == CUDA_SUCCESS)
        vcu__keep((vcu__gnode_t *)*phGraphNode, VCU_CU_NODE_HOST, nodeParams,
                  sizeof(*nodeParams));
    return e;
}

VCU__EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies,
                                         size_t numDependencies)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g;
    CUresult e = vcu__graph_arg(hGraph, &g);

    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_EMPTY;
    return vcu__add_node(phGraphNode, g, dependencies, numDependencies, &r, NULL, 0);
}

VCU__EXPORT CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
    CUresult e;

    if (phGraphClone == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(originalGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    r.value = g->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_CLONE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__graph_wrap(g->dev, o.value, phGraphClone);
    /* The clone runs the same staged copies. */
    if (e == CUDA_SUCCESS &&
        vcu__stages_copy(&((vcu__graph_t *)*phGraphClone)->stages, &g->stages) != 0) {
        cuGraphDestroy(*phGraphClone);
        *phGraphClone = NULL;
        e = CUDA_ERROR_OUT_OF_MEMORY;
    }
    return e;
}

/* The count from the host; the nodes listed oldest first where this
 * library made them all, else as the host lists them (CU_GRAPH_LIST). */
VCU__EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
    CUresult e;

    if (numNodes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    r.value = g->h;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_NODE_COUNT, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    if (nodes != NULL) {
        vcu__gnode_t *nd;
        size_t i = 0, n;

        pthread_mutex_lock(&vcu__drv.lock);
        n = g->nnodes;
        if (n != o.value) {
            pthread_mutex_unlock(&vcu__drv.lock);
            return vcu__list(g, g->h, 0, VCU_CU_LIST_NODES, nodes, NULL, numNodes);
        }
        for (nd = g->nodes; nd != NULL && i < n; nd = nd->next, i++)
            if (n - 1 - i < *numNodes)
                nodes[n - 1 - i] = (CUgraphNode)nd;
        pthread_mutex_unlock(&vcu__drv.lock);
        for (i = n; i < *numNodes; i++)
            nodes[i] = NULL;
        if (n < *numNodes)
            *numNodes = n;
        return CUDA_SUCCESS;
    }
    *numNodes = (size_t)o.value;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 unsigned long long flags)
{
    struct vcu_cu_pair_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
    vcu__gexec_t *x;
    CUresult e;

    if (phGraphExec == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.a = g->h;
    r.b = flags;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_INSTANTIATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    x = calloc(1, sizeof(*x));
    if (x == NULL || vcu__stages_copy(&x->stages, &g->stages) != 0 ||
        vcu__reg_add(x, VCU__K_GEXEC) != 0) {
        struct vcu_cu_u64_req d = { .value = o.value };

        if (x != NULL)
            vcu__stages_drop(&x->stages);
        free(x);
        vcu__call(g->dev, VCU_OP_CU_GRAPH_EXEC_DESTROY, &d, sizeof(d), NULL, 0, NULL, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->dev = g->dev;
    x->h = o.value;
    *phGraphExec = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

/*
 * The 10000 and 11000 ABIs (cuGetProcAddress "cuGraphInstantiate"): no
 * flags; the error node is NULL and the log empty (the host gives only
 * the result).
 */
static CUresult vcu__instantiate_log(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     CUgraphNode *phErrorNode, char *logBuffer,
                                     size_t bufferSize)
{
    if (phErrorNode != NULL)
        *phErrorNode = NULL;
    if (logBuffer != NULL && bufferSize > 0)
        logBuffer[0] = '\0';
    return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

VCU__EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                        CUgraphNode *phErrorNode, char *logBuffer,
                                        size_t bufferSize)
{
    return vcu__instantiate_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

VCU__EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                           CUgraphNode *phErrorNode, char *logBuffer,
                                           size_t bufferSize)
{
    return vcu__instantiate_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

static CUresult vcu__graph_launch(CUgraphExec hGraphExec, CUstream hStream, int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__gexec_t *x = (vcu__gexec_t *)hGraphExec;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(x, VCU__K_GEXEC))
        return CUDA_ERROR_INVALID_VALUE;
    if (x->dev != c->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    memset(&r, 0, sizeof(r));
    r.a = x->h;
    e = vcu__stream(c, hStream, ptsz, &r.b);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__call(c->dev, VCU_OP_CU_GRAPH_LAUNCH, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return vcu__graph_launch(hGraphExec, hStream, 0);
}

VCU__EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return vcu__graph_launch(hGraphExec, hStream, 1);
}

VCU__EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    struct vcu_cu_u64_req r;
    vcu__gexec_t *x = (vcu__gexec_t *)hGraphExec;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(x, VCU__K_GEXEC))
        return CUDA_ERROR_INVALID_VALUE;
    vcu__reg_del(x);
    r.value = x->h;
    e = vcu__call(x->dev, VCU_OP_CU_GRAPH_EXEC_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__stages_drop(&x->stages);
    free(x);
    return e;
}

/* ---- stream capture ------------------------------------------------------ */

static CUresult vcu__begin_capture(CUstream hStream, CUstreamCaptureMode mode, int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__ctx_t *c;
    CUresult e;

    if ((unsigned int)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    memset(&r, 0, sizeof(r));
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.a);
    if (e != CUDA_SUCCESS)
        return e;
    /* As NVIDIA's: the legacy stream cannot be captured. */
    if (r.a == VCU_CU_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    r.b = (uint64_t)mode;
    e = vcu__call(c->dev, VCU_OP_CU_STREAM_BEGIN_CAPTURE, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e == CUDA_SUCCESS)
        __atomic_fetch_add(&vcu__captures, 1, __ATOMIC_RELEASE);
    return e;
}

VCU__EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return vcu__begin_capture(hStream, mode, 0);
}

VCU__EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return vcu__begin_capture(hStream, mode, 1);
}

/* The record on vcu__cap_graphs naming host graph h of dev; under
 * vcu__drv.lock. */
static vcu__graph_t *vcu__cap_graph_find(int dev, uint64_t h)
{
    vcu__graph_t *g;

    for (g = vcu__cap_graphs; g != NULL; g = g->cap_next)
        if (g->dev == dev && g->h == h)
            return g;
    return NULL;
}

/*
 * Ends capture id: its graph record, if it was asked for, becomes the
 * caller's when the host returned it (handle h, 0 if the capture
 * failed); otherwise it goes, as the capture's graph went.
 */
static vcu__graph_t *vcu__cap_graph_end(int dev, uint64_t id, uint64_t h)
{
    vcu__graph_t **pp, *g, *kept = NULL, *gone = NULL;

    pthread_mutex_lock(&vcu__drv.lock);
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
    pthread_mutex_unlock(&vcu__drv.lock);
    for (; gone != NULL; gone = g) {
        g = gone->cap_next;
        vcu__graph_free(gone);
    }
    return kept;
}

static CUresult vcu__end_capture(CUstream hStream, CUgraph *phGraph, int ptsz)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    struct vcu_cu_capture_info_resp ci;
    vcu__graph_t *g, *tg;
    vcu__ctx_t *c;
    int asked;
    CUresult e;

    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.value);
    if (e != CUDA_SUCCESS)
        return e;
    /* A capture into a graph of the caller's (cuStreamBeginCaptureToGraph)
     * ends in that graph, which need not be asked for. */
    tg = vcu__cap_to_take(c->dev, r.value);
    /* No graph to give it to: as NVIDIA's driver (580) answers, no
     * capture to end is an illegal state, a capture left running an
     * invalid value. */
    if (phGraph == NULL && tg == NULL)
        return vcu__stream_capturing(c, r.value) ? CUDA_ERROR_INVALID_VALUE
                                                 : CUDA_ERROR_ILLEGAL_STATE;
    if (phGraph != NULL)
        *phGraph = NULL;
    pthread_mutex_lock(&vcu__drv.lock);
    asked = vcu__cap_graphs != NULL;
    pthread_mutex_unlock(&vcu__drv.lock);
    /* Which capture ends, for the graph record it may have. */
    memset(&ci, 0, sizeof(ci));
    if (asked &&
        vcu__call(c->dev, VCU_OP_CU_STREAM_CAPTURE_INFO, &r, sizeof(r), NULL, 0, &ci,
                  sizeof(ci)) != CUDA_SUCCESS)
        ci.id = 0;
    o.value = 0;
    e = vcu__call(c->dev, VCU_OP_CU_STREAM_END_CAPTURE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        o.value = 0;
    /* The capture is over, made or not (not while it goes on: another
     * thread's to end, or no capture at all). */
    if ((e == CUDA_SUCCESS || e == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
         e == CUDA_ERROR_STREAM_CAPTURE_UNJOINED) &&
        __atomic_sub_fetch(&vcu__captures, 1, __ATOMIC_RELEASE) < 0)
        __atomic_store_n(&vcu__captures, 0, __ATOMIC_RELEASE);
    g = asked ? vcu__cap_graph_end(c->dev, ci.id, o.value) : NULL;
    if (e != CUDA_SUCCESS || o.value == 0)
        return e;
    if (tg != NULL && tg->h == o.value) {
        if (phGraph != NULL)
            *phGraph = (CUgraph)tg;
        return CUDA_SUCCESS;
    }
    if (phGraph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (g != NULL) {
        *phGraph = (CUgraph)g;
        return CUDA_SUCCESS;
    }
    return vcu__graph_wrap(c->dev, o.value, phGraph);
}

VCU__EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return vcu__end_capture(hStream, phGraph, 0);
}

VCU__EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return vcu__end_capture(hStream, phGraph, 1);
}

static CUresult vcu__capture_info(CUstream hStream, CUstreamCaptureStatus *st, cuuint64_t *id,
                                  int ptsz)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_capture_info_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (st == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.value);
    if (e == CUDA_SUCCESS)
        e = vcu__call(c->dev, VCU_OP_CU_STREAM_CAPTURE_INFO, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *st = (CUstreamCaptureStatus)o.status;
    if (id != NULL)
        *id = o.id;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return vcu__capture_info(hStream, captureStatus, NULL, 0);
}

VCU__EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                              CUstreamCaptureStatus *captureStatus)
{
    return vcu__capture_info(hStream, captureStatus, NULL, 1);
}

/* The guest record of the capture's graph h: the same one each time. */
static CUresult vcu__cap_graph_get(int dev, uint64_t id, uint64_t h, CUgraph *out)
{
    vcu__graph_t *g, *ng;

    pthread_mutex_lock(&vcu__drv.lock);
    g = vcu__cap_graph_find(dev, h);
    pthread_mutex_unlock(&vcu__drv.lock);
    if (g == NULL)
        g = vcu__cap_to_find(dev, h);       /* a capture into the caller's graph */
    if (g != NULL) {
        *out = (CUgraph)g;
        return CUDA_SUCCESS;
    }
    ng = calloc(1, sizeof(*ng));
    if (ng == NULL || vcu__reg_add(ng, VCU__K_GRAPH) != 0) {
        free(ng);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ng->dev = dev;
    ng->h = h;
    ng->cap_id = id;
    pthread_mutex_lock(&vcu__drv.lock);
    g = vcu__cap_graph_find(dev, h);        /* another thread's, meanwhile */
    if (g == NULL) {
        ng->cap_next = vcu__cap_graphs;
        vcu__cap_graphs = ng;
        g = ng;
        ng = NULL;
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    if (ng != NULL) {
        vcu__reg_del(ng);
        free(ng);
    }
    *out = (CUgraph)g;
    return CUDA_SUCCESS;
}

/* The node of g with host handle h: the record made here before (a node
 * added here, or listed before), else a new one.  NULL: out of memory. */
static vcu__gnode_t *vcu__gnode_of(vcu__graph_t *g, uint64_t h)
{
    vcu__gnode_t *n;

    pthread_mutex_lock(&vcu__drv.lock);
    for (n = g->nodes; n != NULL && n->h != h; n = n->next)
        ;
    if (n == NULL && (n = calloc(1, sizeof(*n))) != NULL) {
        if (vcu__reg_add(n, VCU__K_GNODE) != 0) {     /* its own lock, taken inside ours */
            free(n);
            n = NULL;
        } else {
            n->h = h;
            n->g = g;
            n->next = g->nodes;
            g->nodes = n;
            g->nnodes++;
        }
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    return n;
}

/*
 * The open dependencies of the capture on stream hs (host handle) as
 * nodes of its graph, into *deps (and default edges into *edges), the
 * graph's own array, valid until the next ask: CU_STREAM_CAPTURE_DEPS.
 * More than VCU_CU_MAX_CAPTURE_DEPS: CUDA_ERROR_NOT_SUPPORTED (logged).
 */
static CUresult vcu__capture_deps(vcu__ctx_t *c, uint64_t hs, uint64_t id,
                                  const CUgraphNode **deps, const CUgraphEdgeData **edges,
                                  size_t *ndeps)
{
    static int logged;
    struct vcu_cu_u64_req r = { .value = hs };
    struct vcu_cu_capture_deps_resp *o;
    vcu__graph_t *g;
    CUgraph cg;
    CUresult e;
    size_t i;

    o = malloc(sizeof(*o));
    if (o == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__call(c->dev, VCU_OP_CU_STREAM_CAPTURE_DEPS, &r, sizeof(r), NULL, 0, o, sizeof(*o));
    if (e == CUDA_SUCCESS && o->ndeps > VCU_CU_MAX_CAPTURE_DEPS) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): cuStreamGetCaptureInfo: a capture with "
                               "more than %u open dependencies cannot be listed\n",
                      VCU_CU_MAX_CAPTURE_DEPS);
        e = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (e == CUDA_SUCCESS && (o->status != CU_STREAM_CAPTURE_STATUS_ACTIVE || o->ndeps == 0)) {
        *deps = NULL;       /* ended meanwhile, or nothing open */
        if (edges != NULL)
            *edges = NULL;
        *ndeps = 0;
        free(o);
        return CUDA_SUCCESS;
    }
    if (e == CUDA_SUCCESS)
        e = vcu__cap_graph_get(c->dev, id, o->graph, &cg);
    if (e != CUDA_SUCCESS) {
        free(o);
        return e;
    }
    g = (vcu__graph_t *)cg;
    pthread_mutex_lock(&vcu__drv.lock);
    if (g->deps_out == NULL) {
        g->deps_out = calloc(VCU_CU_MAX_CAPTURE_DEPS, sizeof(*g->deps_out));
        g->edges_out = calloc(VCU_CU_MAX_CAPTURE_DEPS, sizeof(*g->edges_out));
    }
    e = g->deps_out != NULL && g->edges_out != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&vcu__drv.lock);
    for (i = 0; e == CUDA_SUCCESS && i < o->ndeps; i++) {
        vcu__gnode_t *n = vcu__gnode_of(g, o->node[i]);

        if (n == NULL)
            e = CUDA_ERROR_OUT_OF_MEMORY;
        else
            g->deps_out[i] = (CUgraphNode)n;
    }
    if (e == CUDA_SUCCESS) {
        *deps = g->deps_out;
        if (edges != NULL)
            *edges = g->edges_out;      /* all default: else the host's query was lossy */
        *ndeps = o->ndeps;
    }
    free(o);
    return e;
}

/*
 * cuStreamGetCaptureInfo in its three ABIs.  Status and id from the host;
 * during a capture, the graph being captured (CU_STREAM_CAPTURE_GRAPH):
 * owned by the capture, the same CUgraph each time, and the one
 * cuStreamEndCapture returns.  The stream's open dependencies, when asked
 * for, as nodes of that graph (CU_STREAM_CAPTURE_DEPS; the same CUgraphNode
 * for the same node each time, and for a node added here the one
 * cuGraphAdd*Node gave); their edges are the default ones (a capture with
 * other edges is CUDA_ERROR_LOSSY_QUERY, as cuda.h says).  Outside a
 * capture these are not valid data (cuda.h) and come back NULL and 0.
 */
static CUresult vcu__capture_info_all(CUstream hStream, CUstreamCaptureStatus *st,
                                      cuuint64_t *id, CUgraph *graph,
                                      const CUgraphNode **deps, const CUgraphEdgeData **edges,
                                      size_t *ndeps, int ptsz)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_capture_graph_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (edges != NULL && deps == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (graph == NULL && deps == NULL && edges == NULL && ndeps == NULL)
        return vcu__capture_info(hStream, st, id, ptsz);
    if (st == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.value);
    if (e == CUDA_SUCCESS)
        e = vcu__call(c->dev, VCU_OP_CU_STREAM_CAPTURE_GRAPH, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    if (graph != NULL) {
        *graph = NULL;
        if (o.status == CU_STREAM_CAPTURE_STATUS_ACTIVE && o.graph != 0) {
            e = vcu__cap_graph_get(c->dev, o.id, o.graph, graph);
            if (e != CUDA_SUCCESS)
                return e;
        }
    }
    *st = (CUstreamCaptureStatus)o.status;
    if (id != NULL)
        *id = o.id;
    if (deps != NULL)
        *deps = NULL;
    if (edges != NULL)
        *edges = NULL;
    if (ndeps != NULL)
        *ndeps = o.status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? (size_t)o.ndeps : 0;
    if (deps != NULL && o.status == CU_STREAM_CAPTURE_STATUS_ACTIVE && o.ndeps > 0) {
        size_t n = 0;

        e = vcu__capture_deps(c, r.value, o.id, deps, edges, &n);
        if (e != CUDA_SUCCESS)
            return e;
        if (ndeps != NULL)
            *ndeps = n;
    }
    return CUDA_SUCCESS;
}

/*
 * cuStreamUpdateCaptureDependencies in its ABIs: nodes of the capture's
 * graph made here (added, or listed by cuStreamGetCaptureInfo), with the
 * default edges (others: CUDA_ERROR_NOT_SUPPORTED, logged once).
 */
static CUresult vcu__update_deps(CUstream hStream, CUgraphNode *deps,
                                 const CUgraphEdgeData *edges, size_t n, unsigned int flags,
                                 int ptsz)
{
    static int logged;
    struct vcu_cu_update_deps_req r;
    vcu__ctx_t *c;
    CUresult e;
    size_t i;

    if ((n > 0 && deps == NULL) || (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES &&
                                     flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES))
        return CUDA_ERROR_INVALID_VALUE;
    if (n > VCU_CU_MAX_CAPTURE_DEPS) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): cuStreamUpdateCaptureDependencies "
                               "with more than %u nodes is not supported\n",
                      VCU_CU_MAX_CAPTURE_DEPS);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    for (i = 0; edges != NULL && i < n; i++) {
        static const CUgraphEdgeData none;

        if (memcmp(&edges[i], &none, sizeof(none)) != 0) {
            vcu__log_once(&logged, "libcuda (virtio-cuda): cuStreamUpdateCaptureDependencies "
                                   "with edge data is not supported\n");
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    memset(&r, 0, sizeof(r));
    for (i = 0; i < n; i++) {
        vcu__gnode_t *nd = (vcu__gnode_t *)deps[i];

        if (!vcu__reg_has(nd, VCU__K_GNODE))
            return CUDA_ERROR_INVALID_VALUE;
        r.node[i] = nd->h;
    }
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.stream);
    if (e != CUDA_SUCCESS)
        return e;
    r.flags = flags;
    r.ndeps = (uint32_t)n;
    return vcu__call(c->dev, VCU_OP_CU_STREAM_UPDATE_DEPS, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream hStream, CUgraphNode *dependencies,
                                                       size_t numDependencies, unsigned int flags)
{
    return vcu__update_deps(hStream, dependencies, NULL, numDependencies, flags, 0);
}

VCU__EXPORT CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream,
                                                            CUgraphNode *dependencies,
                                                            size_t numDependencies,
                                                            unsigned int flags)
{
    return vcu__update_deps(hStream, dependencies, NULL, numDependencies, flags, 1);
}

VCU__EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream hStream,
                                                          CUgraphNode *dependencies,
                                                          const CUgraphEdgeData *dependencyData,
                                                          size_t numDependencies,
                                                          unsigned int flags)
{
    return vcu__update_deps(hStream, dependencies, dependencyData, numDependencies, flags, 0);
}

VCU__EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(
    CUstream hStream, CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
    size_t numDependencies, unsigned int flags)
{
    return vcu__update_deps(hStream, dependencies, dependencyData, numDependencies, flags, 1);
}

VCU__EXPORT CUresult cuStreamGetCaptureInfo(CUstream hStream,
                                            CUstreamCaptureStatus *captureStatus_out,
                                            cuuint64_t *id_out)
{
    return vcu__capture_info_all(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL, 0);
}

VCU__EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                                 CUstreamCaptureStatus *captureStatus_out,
                                                 cuuint64_t *id_out)
{
    return vcu__capture_info_all(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL, 1);
}

VCU__EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               size_t *numDependencies_out)
{
    return vcu__capture_info_all(hStream, captureStatus_out, id_out, graph_out,
                                 dependencies_out, NULL, numDependencies_out, 0);
}

VCU__EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                    CUstreamCaptureStatus *captureStatus_out,
                                                    cuuint64_t *id_out, CUgraph *graph_out,
                                                    const CUgraphNode **dependencies_out,
                                                    size_t *numDependencies_out)
{
    return vcu__capture_info_all(hStream, captureStatus_out, id_out, graph_out,
                                 dependencies_out, NULL, numDependencies_out, 1);
}

VCU__EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               const CUgraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out)
{
    return vcu__capture_info_all(hStream, captureStatus_out, id_out, graph_out,
                                 dependencies_out, edgeData_out, numDependencies_out, 0);
}

VCU__EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                    CUstreamCaptureStatus *captureStatus_out,
                                                    cuuint64_t *id_out, CUgraph *graph_out,
                                                    const CUgraphNode **dependencies_out,
                                                    const CUgraphEdgeData **edgeData_out,
                                                    size_t *numDependencies_out)
{
    return vcu__capture_info_all(hStream, captureStatus_out, id_out, graph_out,
                                 dependencies_out, edgeData_out, numDependencies_out, 1);
}

/*
 * This thread's capture interaction mode, kept here (the previous one is
 * this thread's) and sent to the host, whose worker makes the session's
 * calls: the mode a thread set last stands there for the whole session.
 * Without a context only this thread's record changes.
 */
static __thread CUstreamCaptureMode vcu__capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

VCU__EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    CUstreamCaptureMode prev;
    vcu__ctx_t *c;
    CUresult e;

    if (mode == NULL || (unsigned int)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (vcu__cur(&c) == CUDA_SUCCESS) {
        memset(&r, 0, sizeof(r));
        r.value = (uint64_t)*mode;
        e = vcu__call(c->dev, VCU_OP_CU_THREAD_CAPTURE_MODE, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
        if (e != CUDA_SUCCESS)
            return e;
    }
    prev = vcu__capture_mode;
    vcu__capture_mode = *mode;
    *mode = prev;
    return CUDA_SUCCESS;
}

/*
 * cuGraphUpload: the exec and the stream checked; the upload itself is
 * left to the first launch, which makes it anyway (an optimization
 * only, in stream order either way).
 */
static CUresult vcu__graph_upload(CUgraphExec hGraphExec, CUstream hStream, int ptsz)
{
    vcu__gexec_t *x = (vcu__gexec_t *)hGraphExec;
    vcu__ctx_t *c;
    uint64_t st;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(x, VCU__K_GEXEC))
        return CUDA_ERROR_INVALID_VALUE;
    if (x->dev != c->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    return vcu__stream(c, hStream, ptsz, &st);
}

VCU__EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
    return vcu__graph_upload(hGraphExec, hStream, 0);
}

VCU__EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return vcu__graph_upload(hGraphExec, hStream, 1);
}

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

/* cuGraphNodeSetParams and cuGraphExecNodeSetParams: the kinds this
 * library makes (kernel, copy, memset, host). */
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
    default:
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s: only kernel, memcpy, memset and "
                               "host nodes are supported\n", who);
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
static CUresult vcu__list(vcu__graph_t *g, uint64_t gh, uint64_t nh, uint32_t what,
                          CUgraphNode *a, CUgraphNode *b, size_t *num)
{
    struct vcu_cu_graph_list_req r;
    struct vcu_cu_graph_list_resp *o;
    size_t want = a != NULL ? *num : 0, got = 0, total = 0, i;
    int pairs = what == VCU_CU_LIST_EDGES;
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

/* Edges here are the default kind: any edge data listed is zeroes. */
static void vcu__edges_none(CUgraphEdgeData *ed, size_t n)
{
    if (ed != NULL)
        memset(ed, 0, n * sizeof(*ed));
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
        e = vcu__list(g, g->h, 0, VCU_CU_LIST_EDGES, from, to, numEdges);
    if (e == CUDA_SUCCESS && from != NULL)
        vcu__edges_none(edgeData, *numEdges);
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
        e = vcu__list(n->g, 0, n->h, what, out, NULL, num);
    if (e == CUDA_SUCCESS && out != NULL)
        vcu__edges_none(ed, *num);
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

/* cuGraphAddDependencies and cuGraphRemoveDependencies: edges of the
 * default kind (others: CUDA_ERROR_NOT_SUPPORTED, logged once). */
static CUresult vcu__edges(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                           const CUgraphEdgeData *ed, size_t n, int add, const char *who)
{
    static int logged;
    struct vcu_cu_graph_edges_req *q;
    vcu__graph_t *g;
    uint64_t *hp;
    size_t i;
    CUresult e = vcu__graph_arg(hGraph, &g);

    if (e != CUDA_SUCCESS)
        return e;
    if (n == 0)
        return CUDA_SUCCESS;
    if (from == NULL || to == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (i = 0; ed != NULL && i < n; i++) {
        static const CUgraphEdgeData none;

        if (memcmp(&ed[i], &none, sizeof(none)) != 0) {
            vcu__log_once(&logged, "libcuda (virtio-cuda): %s with edge data is not "
                                   "supported\n", who);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    if (n > VCU_CU_MAX_DEPS) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): %s of more than %u edges at once is "
                               "not supported\n", who, VCU_CU_MAX_DEPS);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    q = calloc(1, sizeof(*q) + n * 16);
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
    q->graph = g->h;
    q->add = (uint32_t)add;
    q->count = (uint32_t)n;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_EDGES, q, (uint32_t)(sizeof(*q) + n * 16), NULL, 0,
                  NULL, 0);
    free(q);
    return e;
}

VCU__EXPORT CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                               const CUgraphNode *to,
                                               const CUgraphEdgeData *edgeData,
                                               size_t numDependencies)
{
    return vcu__edges(hGraph, from, to, edgeData, numDependencies, 1, "cuGraphAddDependencies");
}

VCU__EXPORT CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from,
                                            const CUgraphNode *to, size_t numDependencies)
{
    return vcu__edges(hGraph, from, to, NULL, numDependencies, 1, "cuGraphAddDependencies");
}

VCU__EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from,
                                                  const CUgraphNode *to,
                                                  const CUgraphEdgeData *edgeData,
                                                  size_t numDependencies)
{
    return vcu__edges(hGraph, from, to, edgeData, numDependencies, 0,
                      "cuGraphRemoveDependencies");
}

VCU__EXPORT CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from,
                                               const CUgraphNode *to, size_t numDependencies)
{
    return vcu__edges(hGraph, from, to, NULL, numDependencies, 0, "cuGraphRemoveDependencies");
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
    pthread_mutex_unlock(&vcu__drv.lock);
    vcu__reg_del(n);
    free(n->kbuf);
    free(n);
    return CUDA_SUCCESS;
}

/* ---- copies with host memory in a capture ------------------------------------ */

int vcu__stream_capturing(vcu__ctx_t *c, uint64_t hs)
{
    struct vcu_cu_u64_req r = { .value = hs };
    struct vcu_cu_capture_info_resp o;

    if (__atomic_load_n(&vcu__captures, __ATOMIC_ACQUIRE) <= 0 || hs == VCU_CU_STREAM_LEGACY)
        return 0;
    memset(&o, 0, sizeof(o));
    return vcu__call(c->dev, VCU_OP_CU_STREAM_CAPTURE_INFO, &r, sizeof(r), NULL, 0, &o,
                     sizeof(o)) == CUDA_SUCCESS &&
           o.status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

/*
 * A copy between device memory (dptr) and host memory (host; op says the
 * direction) on stream hs of c while it captures.  The host cannot make
 * it (no worker reaches pageable guest memory when the graph runs, and
 * the copy's wait would end the capture), so it becomes what NVIDIA's
 * driver makes of it: a memcpy node of the capture's graph, which moves
 * the bytes each time the graph runs, made as cuGraphAddMemcpyNode makes
 * one (pageable memory through a stage the graph owns, vcu_stage.h),
 * after the capture's open dependencies and then the only one.  *done 0:
 * the stream does not capture, the copy is the caller's.
 */
CUresult vcu__capture_copy(vcu__ctx_t *c, uint64_t hs, uint32_t op, uint64_t dptr, void *host,
                           size_t n, int *done)
{
    struct vcu_cu_u64_req r = { .value = hs };
    struct vcu_cu_capture_graph_resp o;
    struct vcu_cu_update_deps_req u;
    const CUgraphNode *deps = NULL;
    CUDA_MEMCPY3D m;
    CUgraphNode node;
    CUgraph g;
    size_t nd = 0;
    CUresult e;

    *done = 0;
    if (__atomic_load_n(&vcu__captures, __ATOMIC_ACQUIRE) <= 0 || hs == VCU_CU_STREAM_LEGACY)
        return CUDA_SUCCESS;
    e = vcu__call(c->dev, VCU_OP_CU_STREAM_CAPTURE_GRAPH, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS || o.status != CU_STREAM_CAPTURE_STATUS_ACTIVE || o.graph == 0)
        return CUDA_SUCCESS;        /* the copy itself says what is wrong */
    *done = 1;
    e = vcu__cap_graph_get(c->dev, o.id, o.graph, &g);
    if (e == CUDA_SUCCESS && o.ndeps > 0)
        e = vcu__capture_deps(c, hs, o.id, &deps, NULL, &nd);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&m, 0, sizeof(m));
    m.WidthInBytes = n;
    m.Height = 1;
    m.Depth = 1;
    if (op == VCU_OP_CU_MEMCPY_HTOD) {
        m.srcMemoryType = CU_MEMORYTYPE_HOST;
        m.srcHost = host;
        m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        m.dstDevice = dptr;
    } else {
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m.srcDevice = dptr;
        m.dstMemoryType = CU_MEMORYTYPE_HOST;
        m.dstHost = host;
    }
    e = cuGraphAddMemcpyNode(&node, g, deps, nd, &m, NULL);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&u, 0, sizeof(u));
    u.stream = hs;
    u.flags = CU_STREAM_SET_CAPTURE_DEPENDENCIES;
    u.ndeps = 1;
    u.node[0] = ((vcu__gnode_t *)node)->h;
    return vcu__call(c->dev, VCU_OP_CU_STREAM_UPDATE_DEPS, &u, sizeof(u), NULL, 0, NULL, 0);
}
