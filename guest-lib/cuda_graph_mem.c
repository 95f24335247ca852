/*
 * libcuda.so.1: graph memory nodes, conditional nodes and the generic
 * cuGraphAddNode, over CU_GRAPH_ADD_MEM_NODE, CU_GRAPH_MEM_NODE_PARAMS,
 * CU_GRAPH_MEM_ATTR, CU_GRAPH_COND_HANDLE and CU_GRAPH_ADD_COND_NODE
 * (vcu_proto.h).  An allocation node's address is the host driver's,
 * fixed when the node is made, as natively; a conditional handle is the
 * driver's own value (kernels hand it to cudaGraphSetConditional on the
 * GPU); a conditional node's body graphs are CUgraph records of their
 * own, filled as any graph and freed with the graph holding the node.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* Edge data other than the default: not carried (logged once). */
static CUresult vcu__edges_default_only(const char *call, const CUgraphEdgeData *edges,
                                        size_t n)
{
    static int logged;

    if (vcu__edges_default(edges, n))
        return CUDA_SUCCESS;
    vcu__log_once(&logged, "libcuda (virtio-cuda): %s with edge data is not supported\n",
                  call);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- memory nodes -------------------------------------------------------- */

static CUresult vcu__mem_node(CUgraphNode *out, vcu__graph_t *g, const CUgraphNode *deps,
                              size_t ndeps, uint32_t kind, uint64_t size, uint64_t dptr,
                              uint64_t *dptr_out)
{
    struct vcu_cu_graph_mem_node_req r;
    struct vcu_cu_graph_mem_node_resp o;
    vcu__gnode_t *n;
    size_t len;
    void *q;
    CUresult e;

    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.graph = g->h;
    r.kind = kind;
    r.ndeps = (uint32_t)ndeps;
    r.size = size;
    r.dptr = dptr;
    e = vcu__deps_req(g, &r, sizeof(r), deps, ndeps, NULL, 0, &q, &len);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_ADD_MEM_NODE, q, (uint32_t)len, NULL, 0, &o,
                  sizeof(o));
    free(q);
    if (e != CUDA_SUCCESS)
        return e;
    n = vcu__gnode_new(g, o.node);
    if (n == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (dptr_out != NULL)
        *dptr_out = o.dptr;
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

/*
 * The allocation's properties as the host makes them: device memory of
 * the graph's device, pinned, no export handle, that device's own access
 * (access descriptors may only repeat it); others are
 * CUDA_ERROR_NOT_SUPPORTED, logged once.
 */
static CUresult vcu__alloc_props(const vcu__graph_t *g, const CUmemPoolProps *pp,
                                 const CUmemAccessDesc *acc, size_t nacc)
{
    static int logged;
    size_t i;

    if (pp->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        pp->location.type != CU_MEM_LOCATION_TYPE_DEVICE || (nacc > 0 && acc == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    if (vcu__check_dev(pp->location.id) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_DEVICE;
    for (i = 0; i < nacc; i++)
        if (acc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            acc[i].location.id != g->dev || acc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            break;
    if (pp->location.id != g->dev || pp->handleTypes != CU_MEM_HANDLE_TYPE_NONE || i < nacc) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): cuGraphAddMemAllocNode: memory of "
                               "another device than the graph's, export handles or peer "
                               "access are not supported\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

static CUresult vcu__alloc_node(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    vcu__graph_t *g;
    uint64_t d = 0;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    if (p->bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__alloc_props(g, &p->poolProps, p->accessDescs, p->accessDescCount);
    if (e == CUDA_SUCCESS)
        e = vcu__mem_node(phGraphNode, g, deps, ndeps, VCU_CU_MEM_NODE_ALLOC, p->bytesize, 0, &d);
    if (e != CUDA_SUCCESS)
        return e;
    p->dptr = (CUdeviceptr)d;
    vcu__dr_add(g->dev, d, p->bytesize);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                            const CUgraphNode *dependencies,
                                            size_t numDependencies,
                                            CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    return vcu__alloc_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

VCU__EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                           const CUgraphNode *dependencies,
                                           size_t numDependencies, CUdeviceptr dptr)
{
    vcu__graph_t *g;
    CUresult e = vcu__graph_arg(hGraph, &g);

    if (e != CUDA_SUCCESS)
        return e;
    if (dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__mem_node(phGraphNode, g, dependencies, numDependencies, VCU_CU_MEM_NODE_FREE,
                         0, dptr, NULL);
}

/* CU_GRAPH_MEM_NODE_PARAMS: an allocation node's parameters (a free
 * node's address is the generated cuGraphMemFreeNodeGetParams). */
static CUresult vcu__mem_node_params(CUgraphNode hNode, struct vcu_cu_graph_mem_node_resp *o)
{
    struct vcu_cu_u64_req r;
    vcu__gnode_t *n;
    CUresult e = vcu__gnode_arg(hNode, &n);

    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.value = n->h;
    return vcu__call(n->g->dev, VCU_OP_CU_GRAPH_MEM_NODE_PARAMS, &r, sizeof(r), NULL, 0, o,
                     sizeof(*o));
}

/* The device the host numbers vord, as this process numbers devices
 * (CUDA_VISIBLE_DEVICES); dflt when none. */
static int vcu__dev_of_vord(uint32_t vord, int dflt)
{
    int i;

    for (i = 0; i < vcu__drv.ndev; i++)
        if (vcu__drv.dev[i].vord == vord)
            return i;
    return dflt;
}

VCU__EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
                                                  CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    struct vcu_cu_graph_mem_node_resp o;
    CUresult e;

    if (params_out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__mem_node_params(hNode, &o);
    if (e != CUDA_SUCCESS)
        return e;
    if (o.kind != VCU_CU_MEM_NODE_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    memset(params_out, 0, sizeof(*params_out));
    params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params_out->poolProps.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params_out->poolProps.location.id =
        vcu__dev_of_vord(o.device, ((vcu__gnode_t *)hNode)->g->dev);
    params_out->bytesize = (size_t)o.size;
    params_out->dptr = (CUdeviceptr)o.dptr;
    return CUDA_SUCCESS;
}

/* The worker's graph memory is the session's alone: the figures are the
 * guest process's own, as a process's are natively. */
static CUresult vcu__graph_mem_attr(CUdevice device, CUgraphMem_attribute attr, void *value,
                                    int set)
{
    struct vcu_cu_attr_req r;
    struct vcu_cu_u64_resp o;
    CUresult e = vcu__check_dev(device);

    if (e != CUDA_SUCCESS)
        return e;
    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.handle = set ? 1 : 0;
    r.attr = (uint32_t)attr;
    if (set)
        r.value = *(const cuuint64_t *)value;
    e = vcu__call(device, VCU_OP_CU_GRAPH_MEM_ATTR, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS && !set)
        *(cuuint64_t *)value = o.value;
    return e;
}

VCU__EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                  void *value)
{
    return vcu__graph_mem_attr(device, attr, value, 0);
}

VCU__EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                  void *value)
{
    return vcu__graph_mem_attr(device, attr, value, 1);
}

/* ---- conditional nodes --------------------------------------------------- */

VCU__EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out,
                                                    CUgraph hGraph, CUcontext ctx,
                                                    unsigned int defaultLaunchValue,
                                                    unsigned int flags)
{
    struct vcu_cu_pair_req r;
    struct vcu_cu_u64_resp o;
    vcu__graph_t *g;
    CUresult e;

    (void)ctx;          /* the graph's device's context: the session's one */
    if (pHandle_out == NULL || (flags & ~(unsigned int)CU_GRAPH_COND_ASSIGN_DEFAULT) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.a = g->h;
    r.b = defaultLaunchValue;
    r.c = flags;
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_COND_HANDLE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS)
        *pHandle_out = (CUgraphConditionalHandle)o.value;
    return e;
}

/*
 * A conditional node: its body graphs become records of their own,
 * linked to g, whose destruction frees them; p->phGraph_out is set to
 * the node's array of them (cuda.h: CUDA-owned, valid for the node's
 * lifetime).
 */
static CUresult vcu__cond_node(CUgraphNode *out, vcu__graph_t *g, const CUgraphNode *deps,
                               size_t ndeps, CUDA_CONDITIONAL_NODE_PARAMS *p)
{
    static int logged;
    struct vcu_cu_graph_cond_req r;
    struct vcu_cu_graph_cond_resp *o;
    CUgraph *bodies;
    vcu__gnode_t *n;
    uint32_t i, nb = 0;
    size_t len;
    void *q;
    CUresult e;

    if (out == NULL || p->size == 0 || (unsigned int)p->type > CU_GRAPH_COND_TYPE_SWITCH)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->size > VCU_CU_MAX_COND_BODIES) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): a conditional node of more than %u "
                               "bodies is not supported\n", VCU_CU_MAX_COND_BODIES);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    memset(&r, 0, sizeof(r));
    r.graph = g->h;
    r.handle = p->handle;
    r.type = (uint32_t)p->type;
    r.size = p->size;
    r.ndeps = (uint32_t)ndeps;
    e = vcu__deps_req(g, &r, sizeof(r), deps, ndeps, NULL, 0, &q, &len);
    if (e != CUDA_SUCCESS)
        return e;
    o = calloc(1, sizeof(*o));
    bodies = calloc(p->size, sizeof(*bodies));
    if (o == NULL || bodies == NULL) {
        free(o);
        free(bodies);
        free(q);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e = vcu__call(g->dev, VCU_OP_CU_GRAPH_ADD_COND_NODE, q, (uint32_t)len, NULL, 0, o,
                  sizeof(*o));
    free(q);
    if (e == CUDA_SUCCESS && o->nbodies != p->size)
        e = CUDA_ERROR_UNKNOWN;     /* a host that answered another node */
    for (i = 0; e == CUDA_SUCCESS && i < p->size; i++, nb++)
        e = vcu__graph_wrap(g->dev, o->body[i], &bodies[i]);
    n = e == CUDA_SUCCESS ? vcu__gnode_new(g, o->node) : NULL;
    if (e == CUDA_SUCCESS && n == NULL)
        e = CUDA_ERROR_OUT_OF_MEMORY;
    free(o);
    /* Records made for a node that failed go (their host handles go with
     * g); those of a node made go with g. */
    pthread_mutex_lock(&vcu__drv.lock);
    for (i = 0; i < nb; i++) {
        vcu__graph_t *b = (vcu__graph_t *)bodies[i];

        b->parent = g;
        b->body_next = g->bodies;
        g->bodies = b;
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    if (e != CUDA_SUCCESS) {
        free(bodies);
        return e;
    }
    n->bodies = bodies;
    p->phGraph_out = bodies;
    *out = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

/* ---- cuGraphAddNode ------------------------------------------------------ */

/*
 * The generic call (NVIDIA's runtime makes its memory allocation nodes,
 * conditional nodes and others through it): each type as its own call
 * does it here.  Types this library does not add (external semaphores,
 * memory operations; a child graph moved into its node) are CUDA_ERROR_NOT_SUPPORTED,
 * logged once.
 */
static CUresult vcu__add_node_typed(CUgraphNode *phGraphNode, CUgraph hGraph, vcu__graph_t *g,
                                    const CUgraphNode *deps, size_t ndeps,
                                    CUgraphNodeParams *np)
{
    static int logged;
    CUresult e;

    switch (np->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
        /* The _v3 struct is the _v2 one (kern, ctx last). */
        return cuGraphAddKernelNode_v2(phGraphNode, hGraph, deps, ndeps,
                                       (const CUDA_KERNEL_NODE_PARAMS *)&np->kernel);
    case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (np->memcpy.flags != 0 || np->memcpy.reserved != 0)
            return CUDA_ERROR_INVALID_VALUE;
        return cuGraphAddMemcpyNode(phGraphNode, hGraph, deps, ndeps, &np->memcpy.copyParams,
                                    np->memcpy.copyCtx);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS ms;

        memset(&ms, 0, sizeof(ms));
        ms.dst = np->memset.dst;
        ms.pitch = np->memset.pitch;
        ms.value = np->memset.value;
        ms.elementSize = np->memset.elementSize;
        ms.width = np->memset.width;
        ms.height = np->memset.height;
        return cuGraphAddMemsetNode(phGraphNode, hGraph, deps, ndeps, &ms, np->memset.ctx);
    }
    case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS hp = { .fn = np->host.fn, .userData = np->host.userData };

        return cuGraphAddHostNode(phGraphNode, hGraph, deps, ndeps, &hp);
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
        return cuGraphAddEmptyNode(phGraphNode, hGraph, deps, ndeps);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
        CUDA_MEM_ALLOC_NODE_PARAMS ap;

        memcpy(&ap, &np->alloc, sizeof(ap));    /* _v2 is _v1's layout */
        e = vcu__alloc_node(phGraphNode, hGraph, deps, ndeps, &ap);
        if (e == CUDA_SUCCESS)
            np->alloc.dptr = ap.dptr;
        return e;
    }
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
        return cuGraphAddMemFreeNode(phGraphNode, hGraph, deps, ndeps, np->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        return vcu__cond_node(phGraphNode, g, deps, ndeps, &np->conditional);
    case CU_GRAPH_NODE_TYPE_GRAPH:
        /* Moving the graph into the node: not offered (a clone is). */
        if (np->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
            vcu__log_once(&logged, "libcuda (virtio-cuda): cuGraphAddNode of a child graph "
                                   "moved into its node is not supported\n");
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        return cuGraphAddChildGraphNode(phGraphNode, hGraph, deps, ndeps, np->graph.graph);
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        return cuGraphAddEventRecordNode(phGraphNode, hGraph, deps, ndeps, np->eventRecord.event);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        return cuGraphAddEventWaitNode(phGraphNode, hGraph, deps, ndeps, np->eventWait.event);
    default:
        vcu__log_once(&logged, "libcuda (virtio-cuda): cuGraphAddNode of a node of type %d "
                               "is not supported\n", (int)np->type);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
}

/*
 * Edges with data other than the default (programmatic ones, as XLA's
 * command buffers make between kernel nodes): the node is added without
 * dependencies, then its edges with their data; the node goes again if
 * they are refused.
 */
static CUresult vcu__add_node_any(CUgraphNode *phGraphNode, CUgraph hGraph,
                                  const CUgraphNode *deps, const CUgraphEdgeData *edges,
                                  size_t ndeps, CUgraphNodeParams *np)
{
    CUgraphNode node, *to;
    vcu__graph_t *g;
    CUresult e;

    if (np == NULL || phGraphNode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e != CUDA_SUCCESS)
        return e;
    if (vcu__edges_default(edges, ndeps))
        return vcu__add_node_typed(phGraphNode, hGraph, g, deps, ndeps, np);
    if (deps == NULL || ndeps > VCU_CU_MAX_DEPS)
        return CUDA_ERROR_INVALID_VALUE;
    to = malloc(ndeps * sizeof(*to));
    if (to == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__add_node_typed(&node, hGraph, g, NULL, 0, np);
    if (e == CUDA_SUCCESS) {
        for (size_t i = 0; i < ndeps; i++)
            to[i] = node;
        e = vcu__graph_edges(hGraph, deps, to, edges, ndeps, 1, "cuGraphAddNode");
        if (e != CUDA_SUCCESS)
            (void)cuGraphDestroyNode(node);
        else
            *phGraphNode = node;
    }
    free(to);
    return e;
}

VCU__EXPORT CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                    const CUgraphNode *dependencies, size_t numDependencies,
                                    CUgraphNodeParams *nodeParams)
{
    return vcu__add_node_any(phGraphNode, hGraph, dependencies, NULL, numDependencies,
                             nodeParams);
}

VCU__EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies,
                                       const CUgraphEdgeData *dependencyData,
                                       size_t numDependencies, CUgraphNodeParams *nodeParams)
{
    return vcu__add_node_any(phGraphNode, hGraph, dependencies, dependencyData,
                             numDependencies, nodeParams);
}

/* ---- captures into a graph ----------------------------------------------- */

/* Captures into a graph of the caller's, begun and not yet ended: which
 * graph record each stream's goes into.  Under vcu__drv.lock. */
typedef struct vcu__cap_to_s {
    int dev;
    uint64_t stream;                /* host handle */
    vcu__graph_t *g;
    struct vcu__cap_to_s *next;
} vcu__cap_to_t;

static vcu__cap_to_t *vcu__cap_tos;

vcu__graph_t *vcu__cap_to_take(int dev, uint64_t stream)
{
    vcu__cap_to_t **pp, *t;
    vcu__graph_t *g = NULL;

    pthread_mutex_lock(&vcu__drv.lock);
    for (pp = &vcu__cap_tos; (t = *pp) != NULL; pp = &t->next)
        if (t->dev == dev && t->stream == stream) {
            *pp = t->next;
            g = t->g;
            free(t);
            break;
        }
    pthread_mutex_unlock(&vcu__drv.lock);
    /* A graph destroyed meanwhile (the caller's error) is no record. */
    return g != NULL && vcu__reg_has(g, VCU__K_GRAPH) ? g : NULL;
}

vcu__graph_t *vcu__cap_to_find(int dev, uint64_t h)
{
    vcu__cap_to_t *t;
    vcu__graph_t *g = NULL;

    pthread_mutex_lock(&vcu__drv.lock);
    for (t = vcu__cap_tos; t != NULL && g == NULL; t = t->next)
        if (t->dev == dev && vcu__reg_has(t->g, VCU__K_GRAPH) && t->g->h == h)
            g = t->g;
    pthread_mutex_unlock(&vcu__drv.lock);
    return g;
}

/*
 * cuStreamBeginCaptureToGraph (CU_STREAM_CAPTURE_TO_GRAPH): the stream's
 * work goes into hGraph after the given nodes of it (default edges only),
 * as NVIDIA's samples fill a conditional node's body; cuStreamEndCapture
 * then gives hGraph itself (phGraph may be NULL).
 */
static CUresult vcu__capture_to_graph(CUstream hStream, CUgraph hGraph, const CUgraphNode *deps,
                                      const CUgraphEdgeData *edges, size_t ndeps,
                                      CUstreamCaptureMode mode, int ptsz)
{
    struct vcu_cu_capture_to_graph_req r;
    vcu__cap_to_t *t;
    vcu__graph_t *g;
    vcu__ctx_t *c;
    size_t len;
    void *q;
    CUresult e;

    if ((unsigned int)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__graph_arg(hGraph, &g);
    if (e == CUDA_SUCCESS)
        e = vcu__edges_default_only("cuStreamBeginCaptureToGraph", edges, ndeps);
    if (e == CUDA_SUCCESS)
        e = vcu__cur(&c);
    memset(&r, 0, sizeof(r));
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, hStream, ptsz, &r.stream);
    if (e != CUDA_SUCCESS)
        return e;
    if (r.stream == VCU_CU_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (g->dev != c->dev)
        return CUDA_ERROR_INVALID_VALUE;
    r.graph = g->h;
    r.mode = (uint32_t)mode;
    r.ndeps = (uint32_t)ndeps;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__deps_req(g, &r, sizeof(r), deps, ndeps, NULL, 0, &q, &len);
    if (e == CUDA_SUCCESS) {
        e = vcu__call(c->dev, VCU_OP_CU_STREAM_CAPTURE_TO_GRAPH, q, (uint32_t)len, NULL, 0,
                      NULL, 0);
        free(q);
    }
    if (e != CUDA_SUCCESS) {
        free(t);
        return e;
    }
    t->dev = c->dev;
    t->stream = r.stream;
    t->g = g;
    pthread_mutex_lock(&vcu__drv.lock);
    t->next = vcu__cap_tos;
    vcu__cap_tos = t;
    pthread_mutex_unlock(&vcu__drv.lock);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode *dependencies,
                                                 const CUgraphEdgeData *dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode)
{
    return vcu__capture_to_graph(hStream, hGraph, dependencies, dependencyData, numDependencies,
                                 mode, 0);
}

VCU__EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                      const CUgraphNode *dependencies,
                                                      const CUgraphEdgeData *dependencyData,
                                                      size_t numDependencies,
                                                      CUstreamCaptureMode mode)
{
    return vcu__capture_to_graph(hStream, hGraph, dependencies, dependencyData, numDependencies,
                                 mode, 1);
}
