/*
 * Stream capture into graph records of cudart_graph.c (cudart_graph.h),
 * and copies with host memory on a capturing stream as memcpy nodes.
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_graph.h"
#include "cudart_int.h"
#include "vcu_stage.h"

/* Captures begun and not yet ended in this process; atomic.  While none
 * is, copies need not ask whether their stream captures
 * (vcu__capture_copy). */
static int vcu__captures;

/* The graphs of captures asked for and not yet ended; under
 * vcu__graph_mu. */
static vcu__graph_t *vcu__cap_graphs;

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
