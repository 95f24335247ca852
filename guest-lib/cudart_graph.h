/*
 * libcudart.so.13's graph records, shared by cudart_graph.c (graphs,
 * nodes, instantiation, launches), cudart_capture.c (stream capture) and
 * cudart_graph_edit.c (editing, updates); each function is described
 * where it is defined.  cudart_graph_mem.c reaches graphs through
 * cudart_int.h instead.
 */
#ifndef VCU_CUDART_GRAPH_H
#define VCU_CUDART_GRAPH_H

#include <pthread.h>
#include <stdint.h>

#include "cudart_int.h"
#include "vcu_stage.h"

typedef struct vcu__node_s {
    uint64_t h;
    struct vcu__graph_s *g;
    uint64_t cookie;                /* host node's callback record, or 0 */
    uint32_t kind;                  /* VCU_CU_NODE_* */
    struct vcu__node_s *next;
    void *owned;                    /* freed with it (a conditional node's phGraph_out) */
    cudaEvent_t event;              /* an event node's */
    /* A child graph node's graph (cudaGraphChildGraphNodeGetGraph), on
     * g's bodies.  Under vcu__graph_mu. */
    struct vcu__graph_s *child;
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

/* Protects the graphs' node lists, capture ids, the capture list and
 * body graph links (cudart_graph.c). */
extern pthread_mutex_t vcu__graph_mu;

/* A copy's shape: each side at its first byte, with its pitch and rows. */
typedef struct vcu__copy_shape_s {
    unsigned char *dst, *src;
    size_t dpitch, spitch, drows, srows;
    size_t width, height, depth;
} vcu__copy_shape_t;

/* cudart_graph.c: */
cudaError_t vcu__graph(cudaGraph_t g, vcu__graph_t **out);
cudaError_t vcu__graph_wrap(int dev, uint64_t h, cudaGraph_t *out);
cudaError_t vcu__add_node_h(vcu__graph_t *g, const uint64_t *hdeps, size_t ndeps,
                            struct vcu_cu_graph_node_req *tmpl, const void *extra,
                            uint32_t extra_len, uint64_t *h);
cudaError_t vcu__kernel_req(int dev, const struct cudaKernelNodeParams *p,
                            struct vcu_cu_graph_node_req *r, uint8_t *params, uint32_t *len);
uint64_t vcu__graph_side(const void *p, size_t n, int want_dev, int want_host);
cudaError_t vcu__graph_copy_req(vcu__graph_t *g, const vcu__copy_shape_t *c,
                                enum cudaMemcpyKind kind, const char *what,
                                struct vcu_cu_graph_node_req *rp);
cudaError_t vcu__memset_req(const struct cudaMemsetParams *p, struct vcu_cu_graph_node_req *r);

#endif
