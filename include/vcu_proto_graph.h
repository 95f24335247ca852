/*
 * The wire protocol's stream capture and graphs: the payloads of
 * CU_STREAM_CAPTURE_* and CU_STREAM_UPDATE_DEPS, CU_GRAPH_*, graph memory
 * and conditional nodes, user objects and CU_STREAM_CAPTURE_TO_GRAPH.
 * Part of include/vcu_proto.h, which includes it where these structs
 * belong and alone is to be included: the opcodes, the common headers,
 * the types and the rules of every struct (fixed width, little-endian,
 * explicit padding) are there.
 */
#ifndef VCU_PROTO_GRAPH_H
#define VCU_PROTO_GRAPH_H

#ifndef VCU_PROTO_H
#error "include vcu_proto.h, not vcu_proto_graph.h"
#endif

struct vcu_cu_capture_info_resp {
    struct vcu_cu_resp r;
    vcu_le32 status;                /* CUstreamCaptureStatus */
    vcu_le32 reserved;
    vcu_le64 id;
};

/*
 * CU_STREAM_CAPTURE_GRAPH: cuStreamGetCaptureInfo with the graph.  While
 * the capture is active, graph is a session handle of the graph being
 * captured, owned by the capture: the same handle each time it is asked
 * for, refused by CU_GRAPH_DESTROY, and the one CU_STREAM_END_CAPTURE
 * returns when the capture succeeds (it is then the caller's).  It is
 * gone when the capture fails or its streams and context are.  0 when
 * not capturing.
 */
struct vcu_cu_capture_graph_resp {
    struct vcu_cu_resp r;
    vcu_le32 status;                /* OUT CUstreamCaptureStatus */
    vcu_le32 reserved;
    vcu_le64 id;                    /* OUT capture id */
    vcu_le64 graph;                 /* OUT graph handle, or 0 */
    vcu_le64 ndeps;                 /* OUT the stream's open dependencies */
};

/*
 * CU_STREAM_CAPTURE_DEPS: the open dependencies of the capture on the
 * stream (request: value = stream), as node handles of the capture's
 * graph (graph: its handle, as CU_STREAM_CAPTURE_GRAPH gives it).  A node
 * keeps its handle while its graph lives; nodes the guest added have the
 * handle CU_GRAPH_ADD_NODE gave.  ndeps is the whole count; node[] holds
 * the first VCU_CU_MAX_CAPTURE_DEPS.  No capture: status says so, ndeps 0.
 */
struct vcu_cu_capture_deps_resp {
    struct vcu_cu_resp r;
    vcu_le32 status;                /* OUT CUstreamCaptureStatus */
    vcu_le32 reserved;
    vcu_le64 graph;                 /* OUT the capture's graph handle */
    vcu_le64 ndeps;                 /* OUT */
    vcu_le64 node[VCU_CU_MAX_CAPTURE_DEPS];
};

/*
 * CU_STREAM_UPDATE_DEPS: cuStreamUpdateCaptureDependencies.  flags is
 * CU_STREAM_ADD_CAPTURE_DEPENDENCIES or CU_STREAM_SET_CAPTURE_DEPENDENCIES;
 * node[0..ndeps-1] are node handles (their edges the default ones).
 */
struct vcu_cu_update_deps_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 stream;
    vcu_le32 flags;
    vcu_le32 ndeps;                 /* <= VCU_CU_MAX_CAPTURE_DEPS */
    vcu_le64 node[VCU_CU_MAX_CAPTURE_DEPS];
};

/*
 * CU_GRAPH_ADD_NODE: followed by ndeps le64 node handles, then by the
 * kind's trailing data (a kernel node's param_bytes of parameters).
 * Kinds and the fields they use:
 *   KERNEL  function, grid, block, shared_mem, param_bytes
 *   MEMCPY  dst, src (device addresses) and the copy's shape: width
 *           bytes per row, height rows (0: 1), depth slices (0: 1),
 *           src_pitch/dst_pitch bytes from row to row (0: width; at
 *           least width when there is more than one row), src_rows/
 *           dst_rows rows from slice to slice (0: height; at least
 *           height when there is more than one slice); size is unused.
 *           stage (VCU_CU_STAGE_*) with cookie: the copy goes through a
 *           guest host function run as a HOST node's (the guest moves
 *           pageable memory to or from the page-locked side): IN, the
 *           function then the copy; OUT, the copy then the function.
 *           The host makes the pair one child-graph node.
 *   MEMSET  dst, pitch, width, height, value, elem_size
 *   HOST    cookie (run in the guest as CU_STREAM_HOST_FUNC)
 *   EMPTY   none
 *   CHILD   function: a graph handle, cloned into the node (never the
 *           graph itself nor one holding it: CUDA_ERROR_INVALID_VALUE)
 *   EVENT_RECORD, EVENT_WAIT   function: an event handle
 */
#define VCU_CU_NODE_KERNEL 1u
#define VCU_CU_NODE_MEMCPY 2u
#define VCU_CU_NODE_MEMSET 3u
#define VCU_CU_NODE_HOST 4u
#define VCU_CU_NODE_EMPTY 5u
#define VCU_CU_NODE_CHILD 6u
#define VCU_CU_NODE_EVENT_RECORD 7u
#define VCU_CU_NODE_EVENT_WAIT 8u

#define VCU_CU_STAGE_NONE 0u
#define VCU_CU_STAGE_IN 1u
#define VCU_CU_STAGE_OUT 2u

struct vcu_cu_graph_node_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 graph;
    vcu_le32 kind;                  /* VCU_CU_NODE_* */
    vcu_le32 ndeps;                 /* <= VCU_CU_MAX_DEPS */
    vcu_le64 function;
    vcu_le32 grid[3];
    vcu_le32 block[3];
    vcu_le32 shared_mem;
    vcu_le32 param_bytes;
    vcu_le64 dst;
    vcu_le64 src;
    vcu_le64 size;
    vcu_le64 pitch;
    vcu_le64 width;
    vcu_le64 height;
    vcu_le32 value;
    vcu_le32 elem_size;
    vcu_le64 cookie;
    vcu_le64 depth;
    vcu_le64 src_pitch;
    vcu_le64 dst_pitch;
    vcu_le64 src_rows;
    vcu_le64 dst_rows;
    vcu_le32 stage;
    vcu_le32 reserved;              /* 0 */
};

/*
 * CU_GRAPH_NODE_SET: new parameters for a KERNEL, MEMCPY (stage NONE),
 * MEMSET, HOST, EVENT_RECORD or EVENT_WAIT node, or (exec only) a CHILD
 * node (node: its handle), of the node's kind.  exec 0:
 * in the node's graph (cuGraph*NodeSetParams); else only in that graph
 * exec, made from the node's graph (cuGraphExec*NodeSetParams).  n holds
 * them as CU_GRAPH_ADD_NODE's request does (n.hdr, n.graph and n.ndeps
 * 0), followed by a kernel's param_bytes of parameters.
 */
struct vcu_cu_graph_set_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 exec;                  /* IN graph exec handle, or 0 */
    vcu_le64 node;                  /* IN node handle */
    struct vcu_cu_graph_node_req n; /* IN */
};

/*
 * CU_GRAPH_EXEC_UPDATE (vcu_cu_pair_req a = exec, b = graph):
 * cuGraphExecUpdate.  info is its CUgraphExecUpdateResult; error_node and
 * error_from are node handles of the graph (0: none).
 */
struct vcu_cu_graph_update_resp {
    struct vcu_cu_resp r;
    vcu_le32 info;                  /* OUT CUgraphExecUpdateResult */
    vcu_le32 reserved;
    vcu_le64 error_node;            /* OUT */
    vcu_le64 error_from;            /* OUT */
};

/*
 * CU_GRAPH_LIST: nodes as node handles (a node keeps its handle while its
 * graph lives; a node added by CU_GRAPH_ADD_NODE has the one it gave),
 * the items from index start on, at most VCU_CU_LIST_MAX handles:
 *   NODES       graph's nodes (cuGraphGetNodes)
 *   ROOTS       graph's root nodes
 *   EDGES       graph's edges: node[2i] from, node[2i+1] to (items are
 *               edges, VCU_CU_LIST_MAX / 2 at most)
 *   DEPS        node's dependencies (graph 0)
 *   DEPENDENTS  node's dependent nodes (graph 0)
 *   CLONE       node[0]: the node of graph (a clone) that node of the
 *               original is (cuGraphNodeFindInClone)
 * total is how many items there are in all.  With VCU_CU_LIST_F_DATA in
 * what (EDGES, DEPS, DEPENDENTS), node[i] is item i's CUgraphEdgeData (8
 * bytes) in place of its handles, one per edge.  Without it, edges with
 * data other than the default make the listing the driver's
 * CUDA_ERROR_LOSSY_QUERY (as a query without edge data is natively),
 * unless VCU_CU_LIST_F_LOSSY_OK says the guest asks for the data next.
 */
#define VCU_CU_LIST_NODES 1u
#define VCU_CU_LIST_ROOTS 2u
#define VCU_CU_LIST_EDGES 3u
#define VCU_CU_LIST_DEPS 4u
#define VCU_CU_LIST_DEPENDENTS 5u
#define VCU_CU_LIST_CLONE 6u
#define VCU_CU_LIST_F_DATA 0x100u
#define VCU_CU_LIST_F_LOSSY_OK 0x200u
#define VCU_CU_LIST_MAX 128u

struct vcu_cu_graph_list_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 graph;                 /* IN graph handle, or 0 */
    vcu_le64 node;                  /* IN node handle, or 0 */
    vcu_le32 what;                  /* IN VCU_CU_LIST_* */
    vcu_le32 start;                 /* IN the first item wanted */
};

struct vcu_cu_graph_list_resp {
    struct vcu_cu_resp r;
    vcu_le64 total;                 /* OUT */
    vcu_le32 count;                 /* OUT handles in node[] */
    vcu_le32 reserved;
    vcu_le64 node[VCU_CU_LIST_MAX]; /* OUT */
};

/*
 * CU_GRAPH_EDGES: cuGraphAddDependencies (add 1) or
 * cuGraphRemoveDependencies (add 0) in graph, followed by count pairs of
 * le64 node handles (from, to), edges of the default kind.
 * CU_GRAPH_EDGES_DATA: the same followed by count CUgraphEdgeData, 8
 * bytes each (from_port, to_port, type, then 5 reserved bytes, 0): edges
 * of other kinds, such as programmatic ones between kernel nodes.
 */
struct vcu_cu_graph_edges_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 graph;                 /* IN */
    vcu_le32 add;                   /* IN 0 or 1 */
    vcu_le32 count;                 /* IN 1..VCU_CU_MAX_DEPS */
};

/* CU_GRAPH_NODE_DESTROY (vcu_cu_u64_req value = node): cuGraphDestroyNode;
 * the node's handle goes with it. */

/*
 * Graph memory nodes.  CU_GRAPH_ADD_MEM_NODE adds an allocation (ALLOC:
 * size bytes on the header's device, read and written by it alone, as
 * a pool of CU_MEM_ALLOCATION_TYPE_PINNED; the reply's dptr is the
 * address the driver fixed for it) or a free of such an address (FREE:
 * dptr) to graph, followed by ndeps le64 node handles.  The memory is
 * charged to the VM's account when a graph holding the node is
 * launched, not here (docs/driver-api.md, "Graph memory").
 * CU_GRAPH_MEM_NODE_PARAMS (value = node handle) gives an allocation
 * node's parameters back (kind ALLOC; device is the virtual ordinal);
 * another node is CUDA_ERROR_INVALID_VALUE (a free node's address is the
 * generated cuGraphMemFreeNodeGetParams).
 * CU_GRAPH_MEM_ATTR: cuDeviceGet/SetGraphMemAttribute of the header's
 * device; attr a CUgraphMem_attribute, handle 1 to set (value 0: only
 * the two _HIGH marks may be set, only to 0), 0 to get.
 */
#define VCU_CU_MEM_NODE_ALLOC 1u
#define VCU_CU_MEM_NODE_FREE 2u

struct vcu_cu_graph_mem_node_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 graph;
    vcu_le32 kind;                  /* VCU_CU_MEM_NODE_* */
    vcu_le32 ndeps;                 /* <= VCU_CU_MAX_DEPS */
    vcu_le64 size;                  /* ALLOC: bytes, > 0 */
    vcu_le64 dptr;                  /* FREE: the address; ALLOC: 0 */
};

struct vcu_cu_graph_mem_node_resp {
    struct vcu_cu_resp r;
    vcu_le64 node;                  /* OUT CU_GRAPH_ADD_MEM_NODE: the new node's handle */
    vcu_le64 dptr;                  /* OUT the allocation's address */
    vcu_le64 size;                  /* OUT CU_GRAPH_MEM_NODE_PARAMS, ALLOC: bytes */
    vcu_le32 kind;                  /* OUT VCU_CU_MEM_NODE_* */
    vcu_le32 device;                /* OUT ALLOC: virtual ordinal of its memory */
};

/*
 * Conditional nodes.  CU_GRAPH_COND_HANDLE makes a conditional handle
 * for graph (vcu_cu_pair_req above); the reply's value is the driver's
 * handle itself, which the guest passes to kernels (cudaGraphSetConditional
 * runs on the GPU).  CU_GRAPH_ADD_COND_NODE adds a node of that handle,
 * type a CUgraphConditionalNodeType and size bodies (cuda.h:
 * CUDA_CONDITIONAL_NODE_PARAMS), followed by ndeps le64 node handles; the
 * reply names each body graph by a new graph handle, which the guest
 * fills as any graph but may not destroy: the bodies go with the node's
 * graph (CU_GRAPH_DESTROY of a body is CUDA_ERROR_INVALID_VALUE).
 */
#define VCU_CU_MAX_COND_BODIES 64u

struct vcu_cu_graph_cond_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 graph;
    vcu_le64 handle;                /* from CU_GRAPH_COND_HANDLE */
    vcu_le32 type;                  /* CUgraphConditionalNodeType */
    vcu_le32 size;                  /* 1 ..VCU_CU_MAX_COND_BODIES */
    vcu_le32 ndeps;                 /* <= VCU_CU_MAX_DEPS */
    vcu_le32 reserved;              /* 0 */
};

struct vcu_cu_graph_cond_resp {
    struct vcu_cu_resp r;
    vcu_le64 node;                  /* OUT */
    vcu_le32 nbodies;               /* OUT = size */
    vcu_le32 reserved;
    vcu_le64 body[VCU_CU_MAX_COND_BODIES];  /* OUT graph handles */
};

/*
 * CU_GRAPH_CHILD_GRAPH (vcu_cu_u64_req value = a CHILD node's handle):
 * cuGraphChildGraphNodeGetGraph.  The reply's value names the node's own
 * graph (the clone it holds), the same handle each time: the guest adds
 * to it as to any graph but may not destroy it (CU_GRAPH_DESTROY:
 * CUDA_ERROR_INVALID_VALUE); it goes with the node and its graph.
 *
 * CU_GRAPH_INSTANTIATE_PARAMS: cuGraphInstantiateWithParams; flags
 * CUDA_GRAPH_INSTANTIATE_FLAG_* (UPLOAD: uploaded on stream, a stream
 * handle as CU_GRAPH_LAUNCH's).  The reply: the exec's handle, the
 * CUgraphInstantiateResult, and the node the driver blames (a node
 * handle of graph, 0: none).
 */
struct vcu_cu_graph_inst_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 graph;                 /* IN */
    vcu_le64 flags;                 /* IN CUDA_GRAPH_INSTANTIATE_FLAG_* */
    vcu_le64 stream;                /* IN the upload's stream (flag UPLOAD) */
};

struct vcu_cu_graph_inst_resp {
    struct vcu_cu_resp r;
    vcu_le64 exec;                  /* OUT */
    vcu_le32 result;                /* OUT CUgraphInstantiateResult */
    vcu_le32 reserved;
    vcu_le64 error_node;            /* OUT */
};

/*
 * User objects.  CU_USER_OBJECT_CREATE: cuUserObjectCreate of count
 * references (1..INT_MAX) held by the guest, flags
 * CU_USER_OBJECT_NO_DESTRUCTOR_SYNC; the destructor is the guest's
 * function of cookie (as CU_STREAM_HOST_FUNC's), which the host hands to
 * CU_CALLBACK_WAIT once, when the driver drops the last reference (no
 * CU_CALLBACK_DONE is waited for).  The reply's value is the object's
 * handle, which names it until the destructor is handed over.
 * CU_USER_OBJECT_REF does what says (object; count 1..INT_MAX):
 *   RETAIN, RELEASE               the guest's own references
 *   GRAPH_RETAIN, GRAPH_RELEASE   graph's (flags CU_GRAPH_USER_OBJECT_MOVE:
 *                                 moved from the guest's)
 * The host counts the references the guest holds and those it gave each
 * graph: a release of more than those, or a retain of an object nobody
 * is known to hold, is CUDA_ERROR_INVALID_VALUE.
 */
#define VCU_CU_UOBJ_RETAIN 1u
#define VCU_CU_UOBJ_RELEASE 2u
#define VCU_CU_UOBJ_GRAPH_RETAIN 3u
#define VCU_CU_UOBJ_GRAPH_RELEASE 4u

struct vcu_cu_uobj_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 object;                /* IN REF: the object's handle */
    vcu_le64 graph;                 /* IN GRAPH_*: the graph's handle */
    vcu_le64 cookie;                /* IN CREATE: the destructor's */
    vcu_le32 count;                 /* IN */
    vcu_le32 flags;                 /* IN */
    vcu_le32 what;                  /* IN REF: VCU_CU_UOBJ_* */
    vcu_le32 reserved;              /* 0 */
};

/*
 * CU_STREAM_CAPTURE_TO_GRAPH: cuStreamBeginCaptureToGraph, a capture of
 * stream into graph (the guest's, a conditional node's body for one),
 * its nodes after the ndeps le64 node handles of graph that follow;
 * mode a CUstreamCaptureMode.  CU_STREAM_END_CAPTURE then returns that
 * graph's own handle.
 */
struct vcu_cu_capture_to_graph_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 stream;
    vcu_le64 graph;
    vcu_le32 mode;
    vcu_le32 ndeps;                 /* <= VCU_CU_MAX_DEPS */
};

/* ---- size asserts ------------------------------------------------------- */
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_capture_info_resp) == 24, "vcu_cu_capture_info_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_capture_graph_resp) == 40, "vcu_cu_capture_graph_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_capture_deps_resp) == 32 + 8 * VCU_CU_MAX_CAPTURE_DEPS,
                 "vcu_cu_capture_deps_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_update_deps_req) == 24 + 8 * VCU_CU_MAX_CAPTURE_DEPS,
                 "vcu_cu_update_deps_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_node_req) == 176, "vcu_cu_graph_node_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_set_req) == 200, "vcu_cu_graph_set_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_update_resp) == 32, "vcu_cu_graph_update_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_list_req) == 32, "vcu_cu_graph_list_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_list_resp) == 24 + 8 * VCU_CU_LIST_MAX,
                 "vcu_cu_graph_list_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_edges_req) == 24, "vcu_cu_graph_edges_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_mem_node_req) == 40, "vcu_cu_graph_mem_node_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_mem_node_resp) == 40, "vcu_cu_graph_mem_node_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_cond_req) == 40, "vcu_cu_graph_cond_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_inst_req) == 32, "vcu_cu_graph_inst_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_inst_resp) == 32, "vcu_cu_graph_inst_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_uobj_req) == 48, "vcu_cu_uobj_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_capture_to_graph_req) == 32,
                 "vcu_cu_capture_to_graph_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_graph_cond_resp) == 24 + 8 * VCU_CU_MAX_COND_BODIES,
                 "vcu_cu_graph_cond_resp");

#endif /* VCU_PROTO_GRAPH_H */
