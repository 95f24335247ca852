/*
 * libcuda.so.1: graphs, over the host's CU_GRAPH_* opcodes, as our
 * runtime does them.  CUgraph, CUgraphNode and CUgraphExec are records of
 * this library naming host handles; a graph keeps the nodes made here so
 * cuGraphGetNodes can list them (a captured or cloned graph's nodes are
 * counted, not listed, but when every one of them has a record here:
 * added, or listed as a capture's dependency).
 * Kernel, memcpy (pageable memory through vcu_stage.h), memset, host,
 * empty, child graph and event record and wait nodes are offered, and
 * user objects.  Stream capture: cuda_capture.c; editing graphs and
 * updating executable graphs: cuda_graph_edit.c.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

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
void vcu__graph_free(vcu__graph_t *g)
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
void vcu__keep_kernel(vcu__gnode_t *n, const CUDA_KERNEL_NODE_PARAMS *p,
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
void vcu__keep(vcu__gnode_t *n, uint32_t kind, const void *p, size_t len)
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
CUresult vcu__kernel_req(vcu__graph_t *g, const CUDA_KERNEL_NODE_PARAMS *p, CUkernel kern,
                         struct vcu_cu_graph_node_req *r, char *params, vcu__func_t **fo)
{
    vcu__func_t *f;
    CUfunction fn;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    fn = p->func;
    if ((fn == NULL && kern != NULL) || vcu__reg_has(fn, VCU__K_KERNEL)) {
        /* A kernel's function in the node's context (p->ctx, taken only
         * with kern), else the current one, else the graph's device. */
        vcu__ctx_t *c = fn == NULL ? (vcu__ctx_t *)p->ctx : NULL;
        int dev = g->dev;

        if (c != NULL && !vcu__reg_has(c, VCU__K_CTX))
            return CUDA_ERROR_INVALID_CONTEXT;
        if (c != NULL || vcu__cur_quiet(&c) == CUDA_SUCCESS)
            dev = c->dev;
        e = vcu__kernel_function_dev(fn != NULL ? (CUkernel)fn : kern, dev, &fn);
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

/* The graph whose record holds g's stages: the one at the top of its
 * parents (a body or a child node's graph goes with it, and its execs
 * run their copies). */
static vcu__graph_t *vcu__stage_owner(vcu__graph_t *g)
{
    pthread_mutex_lock(&vcu__drv.lock);
    while (g->parent != NULL)
        g = g->parent;
    pthread_mutex_unlock(&vcu__drv.lock);
    return g;
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
    if (e == CUDA_SUCCESS && vcu__stages_add(&vcu__stage_owner(g)->stages, st) != 0)
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
CUresult vcu__copy_req(vcu__graph_t *g, const CUDA_MEMCPY3D *m,
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
CUresult vcu__memset_req(const CUDA_MEMSET_NODE_PARAMS *p, struct vcu_cu_graph_node_req *r)
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

/*
 * A child graph node: the host clones childGraph into it; the graph (its
 * top parent) holds the child's staged copies, which the clone runs.
 */
VCU__EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                              const CUgraphNode *dependencies,
                                              size_t numDependencies, CUgraph childGraph)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g, *c;
    CUresult e = vcu__graph_arg(hGraph, &g);

    if (e == CUDA_SUCCESS)
        e = vcu__graph_arg(childGraph, &c);
    if (e != CUDA_SUCCESS)
        return e;
    if (c->dev != g->dev || phGraphNode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (vcu__stages_copy(&vcu__stage_owner(g)->stages, &vcu__stage_owner(c)->stages) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_NODE_CHILD;
    r.function = c->h;
    e = vcu__add_node(phGraphNode, g, dependencies, numDependencies, &r, NULL, 0);
    if (e == CUDA_SUCCESS)
        vcu__keep((vcu__gnode_t *)*phGraphNode, VCU_CU_NODE_CHILD, &c, 0);
    return e;
}

/*
 * The node's own graph, named by the host once (CU_GRAPH_CHILD_GRAPH): a
 * record on the node's graph's bodies, which the caller may add to but
 * not destroy, as a conditional node's body.
 */
VCU__EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__gnode_t *n;
    vcu__graph_t *b;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e != CUDA_SUCCESS)
        return e;
    if (phGraph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vcu__drv.lock);
    b = n->child;
    /* A node of another kind made here (a staged copy is a child graph
     * node on the host): as natively.  One not made here: the host asks
     * the driver. */
    e = n->kind != 0 && n->kind != VCU_CU_NODE_CHILD ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    pthread_mutex_unlock(&vcu__drv.lock);
    if (e != CUDA_SUCCESS)
        return e;
    if (b != NULL) {
        *phGraph = (CUgraph)b;
        return CUDA_SUCCESS;
    }
    memset(&r, 0, sizeof(r));
    r.value = n->h;
    e = vcu__call(n->g->dev, VCU_OP_CU_GRAPH_CHILD_GRAPH, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    b = calloc(1, sizeof(*b));
    if (b == NULL || vcu__reg_add(b, VCU__K_GRAPH) != 0) {
        free(b);                    /* the host keeps the handle for the next ask */
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    b->dev = n->g->dev;
    b->h = o.value;
    pthread_mutex_lock(&vcu__drv.lock);
    if (n->child == NULL) {
        b->parent = n->g;
        b->body_next = n->g->bodies;
        n->g->bodies = b;
        n->child = b;
    }
    *phGraph = (CUgraph)n->child;
    pthread_mutex_unlock(&vcu__drv.lock);
    if (*phGraph != (CUgraph)b) {
        vcu__reg_del(b);            /* another thread asked first */
        free(b);
    }
    return CUDA_SUCCESS;
}

/* An event record or wait node (kind) of event ev. */
static CUresult vcu__event_node(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *deps, size_t ndeps, CUevent ev,
                                uint32_t kind)
{
    struct vcu_cu_graph_node_req r;
    vcu__graph_t *g;
    CUresult e = vcu__graph_arg(hGraph, &g);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(ev, VCU__K_EVENT))
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.function = ((vcu__event_t *)ev)->h;
    e = vcu__add_node(phGraphNode, g, deps, ndeps, &r, NULL, 0);
    if (e == CUDA_SUCCESS)
        vcu__keep((vcu__gnode_t *)*phGraphNode, kind, &ev, sizeof(ev));
    return e;
}

VCU__EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                               const CUgraphNode *dependencies,
                                               size_t numDependencies, CUevent event)
{
    return vcu__event_node(phGraphNode, hGraph, dependencies, numDependencies, event,
                           VCU_CU_NODE_EVENT_RECORD);
}

VCU__EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             size_t numDependencies, CUevent event)
{
    return vcu__event_node(phGraphNode, hGraph, dependencies, numDependencies, event,
                           VCU_CU_NODE_EVENT_WAIT);
}

/* ---- user objects -------------------------------------------------------- */

/*
 * The driver on the host counts a user object's references, wherever
 * they are (ours, graphs', their clones', child nodes' and execs' until
 * their work is done), and hands the destructor's cookie back once, when
 * the last goes; our callback thread then runs it here, and the record
 * goes with it (docs/driver-api.md, "User objects").
 */
typedef struct vcu__uobj_s {
    int dev;
    uint64_t h;
    void *ptr;
    CUhostFn fn;
} vcu__uobj_t;

static void vcu__uobj_run(void *arg)
{
    vcu__uobj_t *u = arg;

    vcu__reg_del(u);
    u->fn(u->ptr);
    free(u);
}

VCU__EXPORT CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                        unsigned int initialRefcount, unsigned int flags)
{
    struct vcu_cu_uobj_req r;
    struct vcu_cu_u64_resp o;
    vcu__uobj_t *u;
    vcu__ctx_t *c;
    CUresult e;

    if (object_out == NULL || destroy == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    u = calloc(1, sizeof(*u));
    if (u == NULL || vcu__reg_add(u, VCU__K_UOBJ) != 0) {
        free(u);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    u->dev = c->dev;
    u->ptr = ptr;
    u->fn = destroy;
    memset(&r, 0, sizeof(r));
    r.cookie = vcu__hostfn_once(vcu__uobj_run, u);
    r.count = initialRefcount;
    r.flags = flags;
    e = r.cookie != 0 ? vcu__call(c->dev, VCU_OP_CU_USER_OBJECT_CREATE, &r, sizeof(r), NULL, 0,
                                  &o, sizeof(o))
                      : CUDA_ERROR_OUT_OF_MEMORY;
    if (e != CUDA_SUCCESS) {
        vcu__hostfn_forget(r.cookie);
        vcu__reg_del(u);
        free(u);
        return e;
    }
    u->h = o.value;
    *object_out = (CUuserObject)u;
    return CUDA_SUCCESS;
}

/* CU_USER_OBJECT_REF what of object (and graph): u may be gone once the
 * host answers, its destructor run. */
static CUresult vcu__uobj_ref(CUuserObject object, CUgraph graph, unsigned int count,
                              unsigned int flags, uint32_t what)
{
    struct vcu_cu_uobj_req r;
    vcu__uobj_t *u = (vcu__uobj_t *)object;
    vcu__graph_t *g = NULL;
    CUresult e = vcu__check_init();
    int dev;

    if (e == CUDA_SUCCESS && graph != NULL)
        e = vcu__graph_arg(graph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(u, VCU__K_UOBJ))
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.object = u->h;
    r.graph = g != NULL ? g->h : 0;
    r.count = count;
    r.flags = flags;
    r.what = what;
    dev = g != NULL ? g->dev : u->dev;
    return vcu__call(dev, VCU_OP_CU_USER_OBJECT_REF, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    return vcu__uobj_ref(object, NULL, count, 0, VCU_CU_UOBJ_RETAIN);
}

VCU__EXPORT CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    return vcu__uobj_ref(object, NULL, count, 0, VCU_CU_UOBJ_RELEASE);
}

VCU__EXPORT CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object,
                                             unsigned int count, unsigned int flags)
{
    if (graph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__uobj_ref(object, graph, count, flags, VCU_CU_UOBJ_GRAPH_RETAIN);
}

VCU__EXPORT CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object,
                                              unsigned int count)
{
    if (graph == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__uobj_ref(object, graph, count, 0, VCU_CU_UOBJ_GRAPH_RELEASE);
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

/* The record of exec h, instantiated from g, which runs g's staged
 * copies; on failure the host's exec goes. */
static CUresult vcu__exec_wrap(vcu__graph_t *g, uint64_t h, CUgraphExec *phGraphExec)
{
    vcu__gexec_t *x = calloc(1, sizeof(*x));

    if (x == NULL || vcu__stages_copy(&x->stages, &vcu__stage_owner(g)->stages) != 0 ||
        vcu__reg_add(x, VCU__K_GEXEC) != 0) {
        struct vcu_cu_u64_req d = { .value = h };

        if (x != NULL)
            vcu__stages_drop(&x->stages);
        free(x);
        vcu__call(g->dev, VCU_OP_CU_GRAPH_EXEC_DESTROY, &d, sizeof(d), NULL, 0, NULL, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->dev = g->dev;
    x->h = h;
    *phGraphExec = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                 unsigned long long flags)
{
    struct vcu_cu_pair_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
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
    return vcu__exec_wrap(g, o.value, phGraphExec);
}

/*
 * CU_GRAPH_INSTANTIATE_PARAMS: the flags as given (UPLOAD: on
 * hUploadStream, of the current context, ptsz: the per-thread default
 * stream for NULL), the driver's result and error node back.
 */
static CUresult vcu__instantiate_params(CUgraphExec *phGraphExec, CUgraph hGraph,
                                        CUDA_GRAPH_INSTANTIATE_PARAMS *p, int ptsz)
{
    struct vcu_cu_graph_inst_req r;
    struct vcu_cu_graph_inst_resp o;
    vcu__graph_t *g;
    vcu__ctx_t *c;
    CUresult e;

    if (phGraphExec == NULL || p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    r.graph = g->h;
    r.flags = p->flags;
    if (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
        e = vcu__cur(&c);
        if (e == CUDA_SUCCESS && c->dev != g->dev)
            e = CUDA_ERROR_INVALID_CONTEXT;
        if (e == CUDA_SUCCESS)
            e = vcu__stream(c, p->hUploadStream, ptsz, &r.stream);
        if (e != CUDA_SUCCESS)
            return e;
    }
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_INSTANTIATE_PARAMS, &r, sizeof(r), NULL, 0, &o,
                  sizeof(o));
    p->result_out = (CUgraphInstantiateResult)o.result;
    p->hErrNode_out = o.error_node != 0 ? (CUgraphNode)vcu__gnode_of(g, o.error_node) : NULL;
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__exec_wrap(g, o.exec, phGraphExec);
}

VCU__EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return vcu__instantiate_params(phGraphExec, hGraph, instantiateParams, 0);
}

VCU__EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    return vcu__instantiate_params(phGraphExec, hGraph, instantiateParams, 1);
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
