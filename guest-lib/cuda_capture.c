/*
 * libcuda.so.1: stream capture, over the host's CU_STREAM_*_CAPTURE
 * opcodes, into graph records of cuda_graph.c (a captured graph's nodes
 * get records as they are listed, e.g. as a capture's dependencies), and
 * copies with host memory on a capturing stream as memcpy nodes.
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
vcu__gnode_t *vcu__gnode_of(vcu__graph_t *g, uint64_t h)
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
