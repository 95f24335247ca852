/*
 * Graph memory nodes, conditional nodes and cudaGraphAddNode, as
 * guest-lib/cuda_graph_mem.c does them for libcuda, over the same
 * opcodes: an allocation node's address is the host driver's, fixed when
 * the node is made; a conditional handle is the driver's own value, for
 * kernels to hand to cudaGraphSetConditional; body graphs are graphs of
 * this library, freed with the graph holding their node.
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_int.h"

/* req (n bytes) followed by the host handles of the dependencies, sent
 * as op to graph's device into resp. */
static cudaError_t vcu__graph_send(cudaGraph_t graph, const cudaGraphNode_t *deps,
                                   size_t ndeps, uint32_t op, const void *req, size_t n,
                                   void *resp, size_t rlen)
{
    uint64_t h;
    char *q;
    int dev;
    cudaError_t e;

    if ((ndeps > 0 && deps == NULL) || ndeps > VCU_CU_MAX_DEPS)
        return cudaErrorInvalidValue;
    e = vcu__graph_host(graph, &dev, &h);
    if (e != cudaSuccess)
        return e;
    q = malloc(n + ndeps * 8);
    if (q == NULL)
        return cudaErrorMemoryAllocation;
    memcpy(q, req, n);
    e = vcu__graph_deps(graph, deps, ndeps, (uint64_t *)(q + n));
    if (e == cudaSuccess)
        e = vcu__call(dev, op, 0, q, (uint32_t)(n + ndeps * 8), NULL, 0, resp, rlen);
    free(q);
    return e;
}

/* ---- memory nodes -------------------------------------------------------- */

static cudaError_t vcu__mem_node(cudaGraphNode_t *out, cudaGraph_t graph,
                                 const cudaGraphNode_t *deps, size_t ndeps, uint32_t kind,
                                 uint64_t size, uint64_t dptr, uint64_t *dptr_out)
{
    struct vcu_cu_graph_mem_node_req r;
    struct vcu_cu_graph_mem_node_resp o;
    uint64_t gh;
    int dev;
    cudaError_t e;

    if (out == NULL)
        return cudaErrorInvalidValue;
    e = vcu__graph_host(graph, &dev, &gh);
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.graph = gh;
    r.kind = kind;
    r.ndeps = (uint32_t)ndeps;
    r.size = size;
    r.dptr = dptr;
    e = vcu__graph_send(graph, deps, ndeps, VCU_OP_CU_GRAPH_ADD_MEM_NODE, &r, sizeof(r), &o,
                        sizeof(o));
    if (e == cudaSuccess)
        e = vcu__graph_node_new(graph, o.node, kind == VCU_CU_MEM_NODE_ALLOC
                                                   ? VCU__RT_NODE_MEM_ALLOC
                                                   : VCU__RT_NODE_MEM_FREE, out);
    if (e == cudaSuccess && dptr_out != NULL)
        *dptr_out = o.dptr;
    return e;
}

/* Device memory of the graph's device, pinned, no export handle, that
 * device's own access only: others are not supported. */
static cudaError_t vcu__alloc_node(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                   const cudaGraphNode_t *deps, size_t ndeps,
                                   const struct cudaMemPoolProps *pp,
                                   const struct cudaMemAccessDesc *acc, size_t nacc,
                                   size_t bytesize, void **dptr)
{
    vcu__alloc_t a;
    uint64_t gh, d = 0;
    size_t i;
    int dev;
    cudaError_t e = vcu__graph_host(graph, &dev, &gh);

    if (e != cudaSuccess)
        return e;
    if (bytesize == 0 || pp->allocType != cudaMemAllocationTypePinned ||
        pp->location.type != cudaMemLocationTypeDevice || (nacc > 0 && acc == NULL))
        return cudaErrorInvalidValue;
    for (i = 0; i < nacc; i++)
        if (acc[i].location.type != cudaMemLocationTypeDevice || acc[i].location.id != dev ||
            acc[i].flags != cudaMemAccessFlagsProtReadWrite)
            break;
    if (pp->location.id != dev || pp->handleTypes != cudaMemHandleTypeNone || i < nacc)
        VCU__NOT_SUPPORTED("cudaGraphAddMemAllocNode of another device's memory, with export "
                           "handles or peer access", "the graph's own device only");
    e = vcu__mem_node(pGraphNode, graph, deps, ndeps, VCU_CU_MEM_NODE_ALLOC, bytesize, 0, &d);
    if (e != cudaSuccess)
        return e;
    /* Device memory to this library's pointer checks. */
    memset(&a, 0, sizeof(a));
    a.base = d;
    a.size = bytesize;
    a.dev = dev;
    a.kind = VCU__M_DEVICE;
    (void)vcu__mem_add(&a);
    *dptr = (void *)(uintptr_t)d;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                 const cudaGraphNode_t *pDependencies,
                                                 size_t numDependencies,
                                                 struct cudaMemAllocNodeParams *nodeParams)
{
    if (nodeParams == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__alloc_node(pGraphNode, graph, pDependencies, numDependencies,
                                    &nodeParams->poolProps, nodeParams->accessDescs,
                                    nodeParams->accessDescCount, nodeParams->bytesize,
                                    &nodeParams->dptr));
}

VCU__EXPORT cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                const cudaGraphNode_t *pDependencies,
                                                size_t numDependencies, void *dptr)
{
    if (dptr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__mem_node(pGraphNode, graph, pDependencies, numDependencies,
                                  VCU_CU_MEM_NODE_FREE, 0, (uint64_t)(uintptr_t)dptr, NULL));
}

static cudaError_t vcu__mem_node_params(cudaGraphNode_t node, uint32_t kind,
                                        struct vcu_cu_graph_mem_node_resp *o, int *dev)
{
    struct vcu_cu_u64_req r;
    uint32_t k;
    cudaError_t e;

    memset(&r, 0, sizeof(r));
    e = vcu__graph_node_host(node, dev, &r.value, &k);
    if (e == cudaSuccess && k != kind)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = vcu__call(*dev, VCU_OP_CU_GRAPH_MEM_NODE_PARAMS, 0, &r, sizeof(r), NULL, 0, o,
                      sizeof(*o));
    return e;
}

VCU__EXPORT cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node,
                                                       struct cudaMemAllocNodeParams *params_out)
{
    struct vcu_cu_graph_mem_node_resp o;
    int dev, i;
    cudaError_t e;

    if (params_out == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__mem_node_params(node, VCU__RT_NODE_MEM_ALLOC, &o, &dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    for (i = 0; i < vcu__rt.ndev && vcu__rt.dev[i].vord != o.device; i++)
        ;
    memset(params_out, 0, sizeof(*params_out));
    params_out->poolProps.allocType = cudaMemAllocationTypePinned;
    params_out->poolProps.handleTypes = cudaMemHandleTypeNone;
    params_out->poolProps.location.type = cudaMemLocationTypeDevice;
    params_out->poolProps.location.id = i < vcu__rt.ndev ? i : dev;
    params_out->bytesize = (size_t)o.size;
    params_out->dptr = (void *)(uintptr_t)o.dptr;
    return cudaSuccess;
}

/* The generated cuGraphMemFreeNodeGetParams's request, as libcuda sends it. */
VCU__EXPORT cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void *dptr_out)
{
    struct vcu_call_cuGraphMemFreeNodeGetParams_req r;
    struct vcu_call_cuGraphMemFreeNodeGetParams_resp o;
    uint32_t k;
    int dev;
    cudaError_t e;

    if (dptr_out == NULL)
        return vcu__err(cudaErrorInvalidValue);
    VCU_CALL_INIT(r, cuGraphMemFreeNodeGetParams);
    e = vcu__graph_node_host(node, &dev, &r.hNode, &k);
    if (e == cudaSuccess && k != VCU__RT_NODE_MEM_FREE)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return vcu__err(e);
    *(void **)dptr_out = (void *)(uintptr_t)o.dptr_out;
    return cudaSuccess;
}

static cudaError_t vcu__graph_mem_attr(int device, enum cudaGraphMemAttributeType attr,
                                       void *value, int set)
{
    struct vcu_cu_attr_req r;
    struct vcu_cu_u64_resp o;
    cudaError_t e = vcu__check_dev(device);

    if (e != cudaSuccess)
        return e;
    if (value == NULL)
        return cudaErrorInvalidValue;
    memset(&r, 0, sizeof(r));
    r.handle = set ? 1 : 0;
    r.attr = (uint32_t)attr;        /* the runtime's values are the driver's */
    if (set)
        r.value = *(const unsigned long long *)value;
    e = vcu__call(device, VCU_OP_CU_GRAPH_MEM_ATTR, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess && !set)
        *(unsigned long long *)value = o.value;
    return e;
}

VCU__EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device,
                                                       enum cudaGraphMemAttributeType attr,
                                                       void *value)
{
    return vcu__err(vcu__graph_mem_attr(device, attr, value, 0));
}

VCU__EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device,
                                                       enum cudaGraphMemAttributeType attr,
                                                       void *value)
{
    return vcu__err(vcu__graph_mem_attr(device, attr, value, 1));
}

VCU__EXPORT cudaError_t cudaDeviceGraphMemTrim(int device)
{
    struct vcu_call_cuDeviceGraphMemTrim_req r;
    struct vcu_call_cuDeviceGraphMemTrim_resp o;
    cudaError_t e = vcu__check_dev(device);

    if (e != cudaSuccess)
        return vcu__err(e);
    VCU_CALL_INIT(r, cuDeviceGraphMemTrim);
    r.device = vcu__rt.dev[device].vord;
    return vcu__err(vcu__call(device, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o,
                              sizeof(o)));
}

/* ---- conditional nodes --------------------------------------------------- */

VCU__EXPORT cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out,
                                                         cudaGraph_t graph,
                                                         unsigned int defaultLaunchValue,
                                                         unsigned int flags)
{
    struct vcu_cu_pair_req r;
    struct vcu_cu_u64_resp o;
    uint64_t gh;
    int dev;
    cudaError_t e;

    if (pHandle_out == NULL || (flags & ~(unsigned int)cudaGraphCondAssignDefault) != 0)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__graph_host(graph, &dev, &gh);
    if (e != cudaSuccess)
        return vcu__err(e);
    memset(&r, 0, sizeof(r));
    r.a = gh;
    r.b = defaultLaunchValue;
    r.c = flags;
    e = vcu__call(dev, VCU_OP_CU_GRAPH_COND_HANDLE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        *pHandle_out = (cudaGraphConditionalHandle)o.value;
    return vcu__err(e);
}

static cudaError_t vcu__cond_node(cudaGraphNode_t *out, cudaGraph_t graph,
                                  const cudaGraphNode_t *deps, size_t ndeps,
                                  struct cudaConditionalNodeParams *p)
{
    struct vcu_cu_graph_cond_req r;
    struct vcu_cu_graph_cond_resp *o;
    cudaGraph_t *bodies;
    uint64_t gh;
    uint32_t i;
    int dev;
    cudaError_t e;

    if (out == NULL || p->size == 0 || (unsigned int)p->type > cudaGraphCondTypeSwitch)
        return cudaErrorInvalidValue;
    if (p->size > VCU_CU_MAX_COND_BODIES)
        VCU__NOT_SUPPORTED("a conditional node of more than 64 bodies", "at most 64");
    e = vcu__graph_host(graph, &dev, &gh);
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.graph = gh;
    r.handle = p->handle;
    r.type = (uint32_t)p->type;
    r.size = p->size;
    r.ndeps = (uint32_t)ndeps;
    o = calloc(1, sizeof(*o));
    bodies = calloc(p->size, sizeof(*bodies));
    if (o == NULL || bodies == NULL) {
        free(o);
        free(bodies);
        return cudaErrorMemoryAllocation;
    }
    e = vcu__graph_send(graph, deps, ndeps, VCU_OP_CU_GRAPH_ADD_COND_NODE, &r, sizeof(r), o,
                        sizeof(*o));
    if (e == cudaSuccess && o->nbodies != p->size)
        e = cudaErrorUnknown;       /* a host that answered another node */
    for (i = 0; e == cudaSuccess && i < p->size; i++)
        e = vcu__graph_body_new(graph, o->body[i], &bodies[i]);
    if (e == cudaSuccess)
        e = vcu__graph_node_new(graph, o->node, VCU__RT_NODE_COND, out);
    free(o);
    if (e != cudaSuccess) {
        free(bodies);           /* the bodies' records go with graph */
        return e;
    }
    /* CUDA-owned (the node's), valid for the node's life. */
    vcu__graph_node_own(*out, bodies);
    p->phGraph_out = bodies;
    return cudaSuccess;
}

/* ---- cudaGraphAddNode ---------------------------------------------------- */

/* Each type as its own call does it; edge data other than the default,
 * child graphs, events, external semaphores: not supported. */
VCU__EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                         const cudaGraphNode_t *pDependencies,
                                         const cudaGraphEdgeData *dependencyData,
                                         size_t numDependencies,
                                         struct cudaGraphNodeParams *np)
{
    static const cudaGraphEdgeData none;
    size_t i;

    if (np == NULL || pGraphNode == NULL)
        return vcu__err(cudaErrorInvalidValue);
    for (i = 0; dependencyData != NULL && i < numDependencies; i++)
        if (memcmp(&dependencyData[i], &none, sizeof(none)) != 0)
            VCU__NOT_SUPPORTED("cudaGraphAddNode with edge data", "default edges only");
    switch (np->type) {
    case cudaGraphNodeTypeKernel: {
        struct cudaKernelNodeParams kp;

        memset(&kp, 0, sizeof(kp));
        kp.func = np->kernel.func;
        kp.gridDim = np->kernel.gridDim;
        kp.blockDim = np->kernel.blockDim;
        kp.sharedMemBytes = np->kernel.sharedMemBytes;
        kp.kernelParams = np->kernel.kernelParams;
        kp.extra = np->kernel.extra;
        return cudaGraphAddKernelNode(pGraphNode, graph, pDependencies, numDependencies, &kp);
    }
    case cudaGraphNodeTypeMemcpy:
        return cudaGraphAddMemcpyNode(pGraphNode, graph, pDependencies, numDependencies,
                                      &np->memcpy.copyParams);
    case cudaGraphNodeTypeMemset: {
        struct cudaMemsetParams mp;

        memset(&mp, 0, sizeof(mp));
        mp.dst = np->memset.dst;
        mp.pitch = np->memset.pitch;
        mp.value = np->memset.value;
        mp.elementSize = np->memset.elementSize;
        mp.width = np->memset.width;
        mp.height = np->memset.height;
        return cudaGraphAddMemsetNode(pGraphNode, graph, pDependencies, numDependencies, &mp);
    }
    case cudaGraphNodeTypeHost: {
        struct cudaHostNodeParams hp = { .fn = np->host.fn, .userData = np->host.userData };

        return cudaGraphAddHostNode(pGraphNode, graph, pDependencies, numDependencies, &hp);
    }
    case cudaGraphNodeTypeEmpty:
        return cudaGraphAddEmptyNode(pGraphNode, graph, pDependencies, numDependencies);
    case cudaGraphNodeTypeMemAlloc:
        return vcu__err(vcu__alloc_node(pGraphNode, graph, pDependencies, numDependencies,
                                        &np->alloc.poolProps, np->alloc.accessDescs,
                                        np->alloc.accessDescCount, np->alloc.bytesize,
                                        &np->alloc.dptr));
    case cudaGraphNodeTypeMemFree:
        return cudaGraphAddMemFreeNode(pGraphNode, graph, pDependencies, numDependencies,
                                       np->free.dptr);
    case cudaGraphNodeTypeConditional:
        return vcu__err(vcu__cond_node(pGraphNode, graph, pDependencies, numDependencies,
                                       &np->conditional));
    default:
        VCU__NOT_SUPPORTED("cudaGraphAddNode of this node type",
                           "kernel, copy, memset, host, empty, memory and conditional nodes");
    }
}

/* ---- captures into a graph ----------------------------------------------- */

/* Captures into a graph of the caller's, begun and not yet ended. */
typedef struct vcu__cap_to_s {
    int dev;
    uint64_t stream;                /* host handle */
    cudaGraph_t g;
    struct vcu__cap_to_s *next;
} vcu__cap_to_t;

static pthread_mutex_t vcu__cap_to_mu = PTHREAD_MUTEX_INITIALIZER;
static vcu__cap_to_t *vcu__cap_tos;       /* under vcu__cap_to_mu */

cudaGraph_t vcu__cap_to_take(int dev, uint64_t stream)
{
    vcu__cap_to_t **pp, *t;
    cudaGraph_t g = NULL;
    uint64_t h;
    int d;

    pthread_mutex_lock(&vcu__cap_to_mu);
    for (pp = &vcu__cap_tos; (t = *pp) != NULL; pp = &t->next)
        if (t->dev == dev && t->stream == stream) {
            *pp = t->next;
            g = t->g;
            free(t);
            break;
        }
    pthread_mutex_unlock(&vcu__cap_to_mu);
    /* A graph destroyed meanwhile (the caller's error) is no record. */
    return g != NULL && vcu__graph_host(g, &d, &h) == cudaSuccess ? g : NULL;
}

cudaGraph_t vcu__cap_to_find(int dev, uint64_t h)
{
    vcu__cap_to_t *t;
    cudaGraph_t g = NULL;
    uint64_t gh;
    int d;

    pthread_mutex_lock(&vcu__cap_to_mu);
    for (t = vcu__cap_tos; t != NULL && g == NULL; t = t->next)
        if (t->dev == dev && vcu__graph_host(t->g, &d, &gh) == cudaSuccess && gh == h)
            g = t->g;
    pthread_mutex_unlock(&vcu__cap_to_mu);
    return g;
}

/* cudaStreamBeginCaptureToGraph (CU_STREAM_CAPTURE_TO_GRAPH): the
 * stream's work goes into graph after the given nodes of it (default
 * edges only); cudaStreamEndCapture then gives graph itself. */
static cudaError_t vcu__capture_to_graph(cudaStream_t stream, cudaGraph_t graph,
                                         const cudaGraphNode_t *deps,
                                         const cudaGraphEdgeData *edges, size_t ndeps,
                                         enum cudaStreamCaptureMode mode, int ptsz)
{
    static const cudaGraphEdgeData none;
    struct vcu_cu_capture_to_graph_req r;
    vcu__cap_to_t *t;
    uint64_t gh;
    int dev, gdev;
    size_t i;
    cudaError_t e;

    if ((unsigned int)mode > cudaStreamCaptureModeRelaxed)
        return cudaErrorInvalidValue;
    for (i = 0; edges != NULL && i < ndeps; i++)
        if (memcmp(&edges[i], &none, sizeof(none)) != 0)
            VCU__NOT_SUPPORTED("cudaStreamBeginCaptureToGraph with edge data",
                               "default edges only");
    memset(&r, 0, sizeof(r));
    e = vcu__graph_host(graph, &gdev, &gh);
    if (e == cudaSuccess)
        e = vcu__stream(stream, ptsz, &dev, &r.stream);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    if (r.stream == VCU_CU_STREAM_LEGACY)
        return cudaErrorStreamCaptureUnsupported;
    if (gdev != dev)
        return cudaErrorInvalidValue;
    r.graph = gh;
    r.mode = (uint32_t)mode;
    r.ndeps = (uint32_t)ndeps;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return cudaErrorMemoryAllocation;
    e = vcu__graph_send(graph, deps, ndeps, VCU_OP_CU_STREAM_CAPTURE_TO_GRAPH, &r, sizeof(r),
                        NULL, 0);
    if (e != cudaSuccess) {
        free(t);
        return e;
    }
    t->dev = dev;
    t->stream = r.stream;
    t->g = graph;
    pthread_mutex_lock(&vcu__cap_to_mu);
    t->next = vcu__cap_tos;
    vcu__cap_tos = t;
    pthread_mutex_unlock(&vcu__cap_to_mu);
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                      const cudaGraphNode_t *dependencies,
                                                      const cudaGraphEdgeData *dependencyData,
                                                      size_t numDependencies,
                                                      enum cudaStreamCaptureMode mode)
{
    return vcu__err(vcu__capture_to_graph(stream, graph, dependencies, dependencyData,
                                          numDependencies, mode, 0));
}

VCU__EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(
    cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies,
    const cudaGraphEdgeData *dependencyData, size_t numDependencies,
    enum cudaStreamCaptureMode mode);
VCU__EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(
    cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies,
    const cudaGraphEdgeData *dependencyData, size_t numDependencies,
    enum cudaStreamCaptureMode mode)
{
    return vcu__err(vcu__capture_to_graph(stream, graph, dependencies, dependencyData,
                                          numDependencies, mode, 1));
}
