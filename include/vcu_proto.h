/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * virtio-cuda wire protocol, version 1.
 *
 * The one header shared by the guest library, the guest kernel module, the
 * QEMU device model and the host backend.  Everything that crosses the
 * virtqueue is defined here; nothing else may.
 *
 * Rules (see docs/protocol.md for the long form):
 *  - every field is fixed width and little endian; structs are naturally
 *    aligned with explicit padding, no bool, enum, bitfield, long or pointer;
 *    pointers and sizes travel as 64-bit values;
 *  - every struct's size is asserted below, and again by each part;
 *  - opcodes, their numbers and their names come from VCU_OP_MAP alone;
 *  - new behaviour gets a new opcode, never a changed struct.
 *
 * A request is one device-readable byte stream (the driver may split it
 * over several descriptors; the device gathers them):
 *
 *   struct vcu_req_hdr
 *   payload                       (hdr.payload_len bytes, zero padded to 8)
 *   struct vcu_seg   [hdr.nsegs]
 *   struct vcu_range [sum of seg.nranges, in segment order]
 *
 * followed by one device-writable buffer for the reply:
 *
 *   struct vcu_resp_hdr
 *   payload                       (resp.payload_len bytes)
 *
 * A data segment is guest memory the request reads (VCU_SEG_TO_DEVICE) or
 * writes (VCU_SEG_FROM_DEVICE), given as guest-physical ranges.  The
 * opcode says what each segment means.
 *
 * The guest kernel owns the transport fields (session, req_id, nsegs and
 * the segment table); user space chooses opcode, flags and payload only.
 * Guest user space is little endian x86-64, as is the host: the user-space
 * parts assert this and read fields directly; the kernel and QEMU use their
 * byte-order helpers on the header fields they touch.
 */
#ifndef VCU_PROTO_H
#define VCU_PROTO_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/build_bug.h>
typedef __le16 vcu_le16;
typedef __le32 vcu_le32;
typedef __le64 vcu_le64;
typedef __u8 vcu_u8;
#define VCU_PROTO_ASSERT(cond, msg) static_assert(cond, msg)
#else
#include <stdint.h>
typedef uint16_t vcu_le16;
typedef uint32_t vcu_le32;
typedef uint64_t vcu_le64;
typedef uint8_t vcu_u8;
#ifdef __cplusplus
#define VCU_PROTO_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define VCU_PROTO_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "virtio-cuda user-space parts assume a little-endian host"
#endif
#endif

/*
 * Virtio device ID.  63 is unassigned in the virtio 1.3 registry and is the
 * highest ID Linux binds as a modern virtio-pci device (PCI ID 0x1040 + 63 =
 * 0x107f), as far as possible from the IDs OASIS hands out in order.
 */
#define VCU_VIRTIO_ID 63
#define VCU_PCI_DEVICE_ID (0x1040 + VCU_VIRTIO_ID)

#define VCU_PROTO_VERSION 1

/* Feature bits agreed at SESSION_OPEN (not virtio feature bits). */
#define VCU_FEAT_ECHO (1ULL << 0)   /* ECHO opcode */
#define VCU_FEAT_CUDA (1ULL << 1)   /* the CUDA opcodes; set only where a driver loaded */
#define VCU_FEAT_ASYNC (1ULL << 2)  /* VCU_REQ_F_ASYNC requests */
#define VCU_FEAT_MODULE_CACHE (1ULL << 3) /* CU_MODULE_LOAD_HASH; only where the host keeps a cache */
#define VCU_FEAT_BATCH (1ULL << 4)  /* CU_BATCH; with VCU_FEAT_CUDA and VCU_FEAT_ASYNC */

/* Limits; the device rejects anything beyond them with VCU_S_E2BIG. */
#define VCU_MAX_PAYLOAD (64u * 1024)        /* request and response payload */
#define VCU_MAX_SEGS 16u                    /* data segments per request */
#define VCU_MAX_XFER (1ull << 30)           /* data bytes per request */
#define VCU_PAGE_SIZE 4096u
/* Every 4 KiB page its own range, plus a partial page at each segment end. */
#define VCU_MAX_RANGES ((unsigned int)(VCU_MAX_XFER / VCU_PAGE_SIZE) + 2 * VCU_MAX_SEGS)

/*
 * Status codes: the wire status (positive, VCU_S_*) and the user-space
 * library codes (VCU_E* = -VCU_S_*) come from this one list.
 */
#define VCU_STATUS_MAP(XX)                                                   \
    XX(OK, 0, "success")                                                     \
    XX(EINVAL, 1, "invalid request")                                         \
    XX(ENOTSUP, 2, "operation not supported")                                \
    XX(ENOSESSION, 3, "no such session")                                     \
    XX(ENOMEM, 4, "out of memory on the host")                               \
    XX(EFAULT, 5, "data segment is not in guest RAM")                        \
    XX(E2BIG, 6, "request exceeds a protocol limit")                         \
    XX(EVERSION, 7, "protocol version not supported")                        \
    XX(EBUSY, 8, "too many sessions or requests")                            \
    XX(EIO, 9, "host backend failure")                                       \
    XX(ENODEV, 10, "no such device or no GPU driver on the host")            \
    XX(ECANCELED, 11, "request cancelled: session ended or device reset")    \
    XX(ERANGE, 12, "response does not fit the reply buffer")

#define VCU_S_ENUM_(name, val, msg) VCU_S_##name = (val),
enum { VCU_STATUS_MAP(VCU_S_ENUM_) VCU_S_COUNT_ };
#undef VCU_S_ENUM_

#ifndef __KERNEL__
/* User-space library codes: VCU_OK or VCU_E* = -VCU_S_E*. */
#define VCU_E_ENUM_(name, val, msg) VCU_##name = -(val),
enum { VCU_STATUS_MAP(VCU_E_ENUM_) };
#undef VCU_E_ENUM_

/* Message for a wire status or a library code (0, VCU_S_* or VCU_E*).
 * Any int: a status a peer sent may be INT_MIN, which has no negation. */
static inline const char *vcu_status_str(int code)
{
    switch (code < 0 ? 0u - (unsigned int)code : (unsigned int)code) {
#define VCU_STR_CASE_(name, val, msg) case (val): return msg;
    VCU_STATUS_MAP(VCU_STR_CASE_)
#undef VCU_STR_CASE_
    }
    return "unknown virtio-cuda status";
}
#endif

/* Request flags (vcu_req_hdr.flags). */
#define VCU_REQ_F_ASYNC (1u << 0)   /* nobody waits for the reply; errors are deferred */

struct vcu_req_hdr {
    vcu_le32 opcode;
    vcu_le32 flags;                 /* VCU_REQ_F_* */
    vcu_le64 session;               /* from SESSION_OPEN; 0 for SESSION_OPEN */
    vcu_le64 req_id;                /* echoed in the reply */
    vcu_le32 payload_len;           /* <= VCU_MAX_PAYLOAD */
    vcu_le16 nsegs;                 /* <= VCU_MAX_SEGS */
    vcu_le16 reserved;              /* 0 */
};

#define VCU_SEG_TO_DEVICE (1u << 0)   /* device reads the segment */
#define VCU_SEG_FROM_DEVICE (1u << 1) /* device writes the segment */
/*
 * The guest kernel keeps the segment's pages allocated and in place until
 * the session's next SESSION_FENCE has completed (or the session ended),
 * so the host may go on using them after the reply: a copy from guest
 * pinned memory can then run truly asynchronously.  Without it the host is
 * done with a segment when it replies.
 */
#define VCU_SEG_F_STABLE (1u << 2)

struct vcu_seg {
    vcu_le64 len;                   /* sum of the ranges' lengths */
    vcu_le32 nranges;
    vcu_le32 flags;                 /* exactly one of VCU_SEG_* */
};

struct vcu_range {
    vcu_le64 gpa;                   /* guest-physical address */
    vcu_le64 len;                   /* > 0 */
};

struct vcu_resp_hdr {
    vcu_le32 status;                /* VCU_S_*; first, always valid */
    vcu_le32 payload_len;           /* bytes of reply payload that follow */
    vcu_le64 req_id;
    vcu_le64 reserved;
};

/*
 * Opcodes.  XX(name, number, request struct, reply struct).  Ranges:
 * 0x00xx transport, 0x01xx CUDA device and context, 0x02xx memory, 0x03xx
 * modules and launches, 0x04xx streams and host callbacks, 0x05xx events,
 * 0x06xx graphs, 0x07xx the generated calls.  A struct named vcu_none
 * means an empty payload.
 * "+ trailing" in a comment means bytes follow the fixed struct.
 */
#define VCU_OP_MAP(XX)                                                                   \
    /* transport */                                                                      \
    XX(SESSION_OPEN, 0x0001, vcu_session_open_req, vcu_session_open_resp)                \
    XX(SESSION_CLOSE, 0x0002, vcu_none, vcu_none)                                        \
    XX(ECHO, 0x0003, vcu_echo_req, vcu_echo_resp)                                        \
    XX(SESSION_FENCE, 0x0004, vcu_none, vcu_none)                                        \
    /* CUDA: device and context */                                                       \
    XX(CU_DRIVER_INFO, 0x0100, vcu_cu_hdr, vcu_cu_driver_info_resp)                      \
    XX(CU_DEVICE_INFO, 0x0101, vcu_cu_hdr, vcu_cu_device_info_resp)                      \
    XX(CU_MEM_GET_INFO, 0x0102, vcu_cu_hdr, vcu_cu_mem_info_resp)                        \
    XX(CU_CTX_SYNCHRONIZE, 0x0103, vcu_cu_hdr, vcu_cu_resp)                              \
    XX(CU_CTX_RESET, 0x0104, vcu_cu_hdr, vcu_cu_resp)                                    \
    XX(CU_CTX_SET_FLAGS, 0x0105, vcu_cu_u64_req, vcu_cu_resp)                            \
    XX(CU_CTX_SET_LIMIT, 0x0106, vcu_cu_limit_req, vcu_cu_resp)                          \
    XX(CU_GET_DEFERRED_ERROR, 0x010b, vcu_cu_hdr, vcu_cu_resp)                           \
    XX(CU_TAKE_OUTPUT, 0x010c, vcu_cu_u64_req, vcu_cu_output_resp)                      \
    XX(CU_SLICE_INFO, 0x010d, vcu_cu_hdr, vcu_cu_slice_info_resp)                        \
    XX(CU_NVLINK_INFO, 0x010e, vcu_cu_hdr, vcu_cu_nvlink_info_resp)                      \
    XX(CU_CTX_DESTROY, 0x010f, vcu_cu_u64_req, vcu_cu_u64_resp)                          \
    /* CUDA: memory */                                                                   \
    XX(CU_MEM_ALLOC, 0x0200, vcu_cu_mem_alloc_req, vcu_cu_u64_resp)                      \
    XX(CU_MEM_FREE, 0x0201, vcu_cu_u64_req, vcu_cu_resp)                                 \
    XX(CU_MEMCPY_HTOD, 0x0202, vcu_cu_memcpy_req, vcu_cu_resp)                           \
    XX(CU_MEMCPY_DTOH, 0x0203, vcu_cu_memcpy_req, vcu_cu_resp)                           \
    XX(CU_MEMCPY_DTOD, 0x0204, vcu_cu_memcpy_req, vcu_cu_resp)                           \
    XX(CU_MEMSET, 0x0205, vcu_cu_memset_req, vcu_cu_resp)                                \
    XX(CU_MEMCPY_2D, 0x0206, vcu_cu_memcpy2d_req, vcu_cu_resp)                           \
    XX(CU_MEM_FREE_ASYNC, 0x0207, vcu_cu_memcpy_req, vcu_cu_resp)                        \
    XX(CU_MEM_ALLOC_ASYNC, 0x0208, vcu_cu_mem_alloc_req, vcu_cu_u64_resp)                \
    XX(CU_MEMPOOL_GET_DEFAULT, 0x0209, vcu_cu_hdr, vcu_cu_u64_resp)                      \
    XX(CU_MEMPOOL_SET_ATTR, 0x020a, vcu_cu_attr_req, vcu_cu_resp)                        \
    XX(CU_MEMPOOL_GET_ATTR, 0x020b, vcu_cu_attr_req, vcu_cu_u64_resp)                    \
    XX(CU_HOST_DEVICE_POINTER, 0x020e, vcu_cu_u64_req, vcu_cu_u64_resp)                  \
    /* CUDA: modules, functions, launches */                                             \
    XX(CU_MODULE_LOAD, 0x0300, vcu_cu_module_load_req, vcu_cu_u64_resp)                  \
    XX(CU_MODULE_UNLOAD, 0x0301, vcu_cu_u64_req, vcu_cu_resp)                            \
    XX(CU_MODULE_GET_FUNCTION, 0x0302, vcu_cu_name_req, vcu_cu_function_resp)            \
    XX(CU_MODULE_GET_GLOBAL, 0x0303, vcu_cu_name_req, vcu_cu_mem_range_resp)             \
    XX(CU_FUNC_GET_ATTRS, 0x0304, vcu_cu_u64_req, vcu_cu_func_attrs_resp)                \
    XX(CU_OCCUPANCY_BLOCK_SIZE, 0x0307, vcu_cu_occupancy_req, vcu_cu_occupancy_resp)     \
    XX(CU_LAUNCH, 0x0308, vcu_cu_launch_req, vcu_cu_resp)                                \
    XX(CU_LAUNCH_EX, 0x030a, vcu_cu_launch_ex_req, vcu_cu_resp)                          \
    /* the launch config of cuOccupancyMaxActiveClusters, no parameters; reply: clusters */ \
    XX(CU_OCCUPANCY_CLUSTERS, 0x030b, vcu_cu_launch_ex_req, vcu_cu_u64_resp)              \
    /* cuOccupancyMaxPotentialClusterSize's config; reply: blocks per cluster */          \
    XX(CU_OCCUPANCY_CLUSTER_SIZE, 0x030c, vcu_cu_launch_ex_req, vcu_cu_u64_resp)          \
    XX(CU_TENSOR_MAP, 0x030d, vcu_cu_tmap_req, vcu_cu_tmap_resp)                        \
    /* a module the host's cache holds, named by its SHA-256; no segment */              \
    XX(CU_MODULE_LOAD_HASH, 0x030e, vcu_cu_module_hash_req, vcu_cu_u64_resp)             \
    /* CU_MODULE_LOAD that also returns the image's SHA-256 (the cache's name) */       \
    XX(CU_MODULE_LOAD_KEEP, 0x030f, vcu_cu_module_load_req, vcu_cu_module_keep_resp)     \
    XX(CU_LINK, 0x0310, vcu_cu_link_req, vcu_cu_link_resp)                               \
    /* + trailing: sub-requests (struct vcu_cu_batch_entry each), run as async */       \
    XX(CU_BATCH, 0x0311, vcu_cu_batch_req, vcu_cu_resp)                                  \
    /* CUDA: streams and host callbacks */                                               \
    XX(CU_STREAM_CREATE, 0x0400, vcu_cu_stream_create_req, vcu_cu_u64_resp)              \
    XX(CU_STREAM_DESTROY, 0x0401, vcu_cu_u64_req, vcu_cu_resp)                           \
    XX(CU_STREAM_SYNCHRONIZE, 0x0402, vcu_cu_u64_req, vcu_cu_resp)                       \
    XX(CU_STREAM_WAIT_EVENT, 0x0404, vcu_cu_pair_req, vcu_cu_resp)                       \
    XX(CU_STREAM_BEGIN_CAPTURE, 0x0405, vcu_cu_pair_req, vcu_cu_resp)                    \
    XX(CU_STREAM_END_CAPTURE, 0x0406, vcu_cu_u64_req, vcu_cu_u64_resp)                   \
    XX(CU_STREAM_CAPTURE_INFO, 0x0407, vcu_cu_u64_req, vcu_cu_capture_info_resp)         \
    XX(CU_STREAM_HOST_FUNC, 0x0408, vcu_cu_pair_req, vcu_cu_resp)                        \
    XX(CU_CALLBACK_WAIT, 0x0409, vcu_cu_hdr, vcu_cu_u64_resp)                            \
    XX(CU_CALLBACK_DONE, 0x040a, vcu_cu_u64_req, vcu_cu_resp)                            \
    XX(CU_STREAM_CAPTURE_GRAPH, 0x040b, vcu_cu_u64_req, vcu_cu_capture_graph_resp)       \
    XX(CU_THREAD_CAPTURE_MODE, 0x040c, vcu_cu_u64_req, vcu_cu_u64_resp)                  \
    XX(CU_STREAM_CAPTURE_DEPS, 0x040d, vcu_cu_u64_req, vcu_cu_capture_deps_resp)         \
    XX(CU_STREAM_UPDATE_DEPS, 0x040e, vcu_cu_update_deps_req, vcu_cu_resp)               \
    /* CUDA: events */                                                                   \
    XX(CU_EVENT_CREATE, 0x0500, vcu_cu_u64_req, vcu_cu_u64_resp)                         \
    XX(CU_EVENT_DESTROY, 0x0501, vcu_cu_u64_req, vcu_cu_resp)                            \
    XX(CU_EVENT_RECORD, 0x0502, vcu_cu_pair_req, vcu_cu_resp)                            \
    XX(CU_EVENT_SYNCHRONIZE, 0x0503, vcu_cu_u64_req, vcu_cu_resp)                        \
    /* CUDA: graphs */                                                                   \
    XX(CU_GRAPH_CREATE, 0x0600, vcu_cu_u64_req, vcu_cu_u64_resp)                         \
    XX(CU_GRAPH_DESTROY, 0x0601, vcu_cu_u64_req, vcu_cu_resp)                            \
    XX(CU_GRAPH_ADD_NODE, 0x0602, vcu_cu_graph_node_req, vcu_cu_u64_resp)                \
    XX(CU_GRAPH_CLONE, 0x0603, vcu_cu_u64_req, vcu_cu_u64_resp)                          \
    XX(CU_GRAPH_INSTANTIATE, 0x0604, vcu_cu_pair_req, vcu_cu_u64_resp)                   \
    XX(CU_GRAPH_LAUNCH, 0x0605, vcu_cu_pair_req, vcu_cu_resp)                            \
    XX(CU_GRAPH_EXEC_DESTROY, 0x0606, vcu_cu_u64_req, vcu_cu_resp)                       \
    XX(CU_GRAPH_NODE_COUNT, 0x0607, vcu_cu_u64_req, vcu_cu_u64_resp)                     \
    XX(CU_GRAPH_NODE_SET, 0x0608, vcu_cu_graph_set_req, vcu_cu_resp)                      \
    XX(CU_GRAPH_EXEC_UPDATE, 0x0609, vcu_cu_pair_req, vcu_cu_graph_update_resp)           \
    XX(CU_GRAPH_LIST, 0x060a, vcu_cu_graph_list_req, vcu_cu_graph_list_resp)              \
    XX(CU_GRAPH_EDGES, 0x060b, vcu_cu_graph_edges_req, vcu_cu_resp)                       \
    XX(CU_GRAPH_NODE_DESTROY, 0x060c, vcu_cu_u64_req, vcu_cu_resp)                        \
    /* + trailing: ndeps le64 node handles */                                          \
    XX(CU_GRAPH_ADD_MEM_NODE, 0x0620, vcu_cu_graph_mem_node_req, vcu_cu_graph_mem_node_resp) \
    XX(CU_GRAPH_MEM_NODE_PARAMS, 0x0621, vcu_cu_u64_req, vcu_cu_graph_mem_node_resp)    \
    XX(CU_GRAPH_MEM_ATTR, 0x0622, vcu_cu_attr_req, vcu_cu_u64_resp)                      \
    XX(CU_GRAPH_COND_HANDLE, 0x0623, vcu_cu_pair_req, vcu_cu_u64_resp)                   \
    /* + trailing: ndeps le64 node handles */                                          \
    XX(CU_GRAPH_ADD_COND_NODE, 0x0624, vcu_cu_graph_cond_req, vcu_cu_graph_cond_resp)    \
    /* + trailing: ndeps le64 node handles */                                          \
    XX(CU_STREAM_CAPTURE_TO_GRAPH, 0x0625, vcu_cu_capture_to_graph_req, vcu_cu_resp)     \
    /* CUDA: the generated calls (struct vcu_cu_call_req) */                             \
    XX(CU_CALL, 0x0700, vcu_cu_call_req, vcu_cu_resp)                                    \
    /* CUDA: virtual memory management, memory's range (struct vcu_cu_vmm_req says   \
     * the fields each reads); last in the list, so that the fuzz corpora's          \
     * opcode indices (fuzz_backend.c) keep naming what they named */               \
    XX(CU_MEM_CREATE, 0x020f, vcu_cu_vmm_req, vcu_cu_vmm_resp)                           \
    XX(CU_MEM_RELEASE, 0x0210, vcu_cu_vmm_req, vcu_cu_vmm_resp)                          \
    XX(CU_MEM_ADDRESS_RESERVE, 0x0211, vcu_cu_vmm_req, vcu_cu_vmm_resp)                  \
    XX(CU_MEM_ADDRESS_FREE, 0x0212, vcu_cu_vmm_req, vcu_cu_vmm_resp)                     \
    XX(CU_MEM_MAP, 0x0213, vcu_cu_vmm_req, vcu_cu_vmm_resp)                              \
    XX(CU_MEM_UNMAP, 0x0214, vcu_cu_vmm_req, vcu_cu_vmm_resp)                            \
    XX(CU_MEM_SET_ACCESS, 0x0215, vcu_cu_vmm_req, vcu_cu_vmm_resp)                       \
    XX(CU_MEM_GET_ACCESS, 0x0216, vcu_cu_vmm_req, vcu_cu_vmm_resp)                       \
    XX(CU_MEM_GRANULARITY, 0x0217, vcu_cu_vmm_req, vcu_cu_vmm_resp)                      \
    XX(CU_MEM_GET_PROPS, 0x0218, vcu_cu_vmm_req, vcu_cu_vmm_resp)                        \
    XX(CU_MEM_RETAIN, 0x0219, vcu_cu_vmm_req, vcu_cu_vmm_resp)                        \
    /* CUDA: arrays, texture and surface objects (memory's range; last for the   \
     * fuzz corpora as above) */                                                    \
    XX(CU_ARRAY_CREATE, 0x021a, vcu_cu_array_req, vcu_cu_u64_resp)                     \
    XX(CU_ARRAY_DESTROY, 0x021b, vcu_cu_u64_req, vcu_cu_resp)                          \
    XX(CU_MEMCPY_3D, 0x021c, vcu_cu_memcpy3d_req, vcu_cu_resp)                         \
    XX(CU_TEXOBJ_CREATE, 0x021d, vcu_cu_texobj_req, vcu_cu_u64_resp)                   \
    XX(CU_TEXOBJ_DESTROY, 0x021e, vcu_cu_pair_req, vcu_cu_resp)                        \
    XX(CU_TEXOBJ_GET, 0x021f, vcu_cu_pair_req, vcu_cu_texobj_resp)                     \
    XX(CU_MIPMAP_CREATE, 0x0220, vcu_cu_mipmap_req, vcu_cu_u64_resp)                   \
    XX(CU_MIPMAP_DESTROY, 0x0221, vcu_cu_u64_req, vcu_cu_resp)                         \
    XX(CU_MIPMAP_LEVEL, 0x0222, vcu_cu_pair_req, vcu_cu_u64_resp)                     \
    /* CUDA: peer access, peer copies, stream memory operations (last for  \
     * the fuzz corpora as above) */                                                 \
    XX(CU_MEMCPY_PEER, 0x0230, vcu_cu_memcpy_peer_req, vcu_cu_resp)                    \
    XX(CU_MEMCPY_3D_PEER, 0x0231, vcu_cu_memcpy3d_req, vcu_cu_resp)                    \
    XX(CU_CTX_PEER_ACCESS, 0x0232, vcu_cu_pair_req, vcu_cu_resp)                       \
    XX(CU_STREAM_MEMOPS, 0x0233, vcu_cu_memops_req, vcu_cu_resp)                      \
    /* CUDA: graphs' child graphs, instantiation with parameters, user objects     \
     * (last for the fuzz corpora as above) */                                      \
    XX(CU_GRAPH_CHILD_GRAPH, 0x0240, vcu_cu_u64_req, vcu_cu_u64_resp)                  \
    XX(CU_GRAPH_INSTANTIATE_PARAMS, 0x0241, vcu_cu_graph_inst_req, vcu_cu_graph_inst_resp) \
    XX(CU_USER_OBJECT_CREATE, 0x0242, vcu_cu_uobj_req, vcu_cu_u64_resp)                \
    XX(CU_USER_OBJECT_REF, 0x0243, vcu_cu_uobj_req, vcu_cu_resp)                       \
    XX(CU_GRAPH_EDGES_DATA, 0x0244, vcu_cu_graph_edges_req, vcu_cu_resp)              \
    XX(CU_HOST_DEVICE_POINTER_AT, 0x0245, vcu_cu_u64_req, vcu_cu_u64_resp)               \
    XX(CU_MEMPOOL_CREATE, 0x0246, vcu_cu_pool_create_req, vcu_cu_u64_resp)             \
    XX(CU_MEMPOOL_DESTROY, 0x0247, vcu_cu_u64_req, vcu_cu_resp)                          \
    /* CU_MODULE_GET_GLOBAL's answer, and whether the global is managed   */            \
    /* memory (__managed__) with the allocation holding it                 */            \
    XX(CU_MODULE_GLOBAL_INFO, 0x0248, vcu_cu_name_req, vcu_cu_global_info_resp)         \
    /* CUDA IPC between the VM's processes (struct vcu_cu_ipc_handle)       */            \
    XX(CU_IPC_GET_MEM_HANDLE, 0x0249, vcu_cu_u64_req, vcu_cu_ipc_handle_resp)            \
    XX(CU_IPC_OPEN_MEM_HANDLE, 0x024a, vcu_cu_ipc_open_req, vcu_cu_u64_resp)             \
    XX(CU_IPC_CLOSE_MEM_HANDLE, 0x024b, vcu_cu_u64_req, vcu_cu_resp)                     \
    XX(CU_IPC_GET_EVENT_HANDLE, 0x024c, vcu_cu_u64_req, vcu_cu_ipc_handle_resp)          \
    XX(CU_IPC_OPEN_EVENT_HANDLE, 0x024d, vcu_cu_ipc_open_req, vcu_cu_u64_resp)            \
    /* shareable handles (POSIX file descriptors) of cuMemCreate's allocations  */       \
    XX(CU_MEM_EXPORT_SHAREABLE, 0x024e, vcu_cu_u64_req, vcu_cu_ipc_handle_resp)          \
    XX(CU_MEM_IMPORT_SHAREABLE, 0x024f, vcu_cu_ipc_open_req, vcu_cu_u64_resp)            \
    /* shareable memory pools and their blocks                                  */       \
    XX(CU_MEMPOOL_EXPORT_SHAREABLE, 0x0250, vcu_cu_u64_req, vcu_cu_ipc_handle_resp)      \
    XX(CU_MEMPOOL_IMPORT_SHAREABLE, 0x0251, vcu_cu_ipc_open_req, vcu_cu_ipc_import_resp) \
    XX(CU_MEMPOOL_EXPORT_POINTER, 0x0252, vcu_cu_u64_req, vcu_cu_ipc_handle_resp)        \
    XX(CU_MEMPOOL_IMPORT_POINTER, 0x0253, vcu_cu_pool_ptr_req, vcu_cu_ipc_import_resp) \
    /* a pool's access for another device of the VM (peer access)             */       \
    XX(CU_MEMPOOL_SET_ACCESS, 0x0254, vcu_cu_attr_req, vcu_cu_resp)

#define VCU_OP_ENUM_(name, num, req, resp) VCU_OP_##name = (num),
enum { VCU_OP_MAP(VCU_OP_ENUM_) };
#undef VCU_OP_ENUM_

/* Opcodes only the guest kernel may send (user space gets -EPERM). */
#define VCU_OP_IS_TRANSPORT(op)                                                     \
    ((op) == VCU_OP_SESSION_OPEN || (op) == VCU_OP_SESSION_CLOSE ||                 \
     (op) == VCU_OP_SESSION_FENCE)

/*
 * CU_HOST_DEVICE_POINTER: the device pointer through which kernels reach
 * guest memory directly (zero copy: the host registers the segment's
 * pages, and only those).  One data segment, VCU_SEG_TO_DEVICE |
 * VCU_SEG_F_STABLE, covering the whole allocation, of any number of
 * ranges that join at page boundaries (else the result is
 * CUDA_ERROR_INVALID_VALUE).  The reply's value is the device pointer of
 * the segment's first byte; it stays valid until the guest frees the
 * memory, which the guest kernel fences (SESSION_FENCE) first.
 *
 * CU_HOST_DEVICE_POINTER_AT: the same, and its value is the address the
 * guest would have the segment's first byte at on the device: its own
 * virtual address, since with unified addressing a page-locked host
 * pointer is its own device pointer and programs hand it to kernels as it
 * is.  The host maps the segment there when that address is free in the
 * session's worker (and outside the window where the worker keeps guest
 * RAM), else where it likes; the reply says where.
 */

/*
 * SESSION_FENCE: replies once everything the session queued before it has
 * finished on the host, GPU work included; after it the host touches no
 * VCU_SEG_F_STABLE segment of an earlier request.  The guest kernel sends
 * it before it frees or reuses memory it gave out as stable, naming that
 * memory in VCU_SEG_TO_DEVICE segments (not stable, never read): before
 * it replies, the host drops every way the session's GPU work could still
 * reach those pages (their registrations, device pointers to them).  A
 * fence with no segment only waits.
 */
struct vcu_none {
    vcu_u8 unused[0];
};

/* ---- transport ---------------------------------------------------------- */

struct vcu_session_open_req {
    vcu_le32 version_min;           /* oldest protocol version the guest speaks */
    vcu_le32 version_max;           /* newest */
    vcu_le64 features;              /* VCU_FEAT_* the guest wants */
    vcu_le64 reserved[2];
};

struct vcu_session_open_resp {
    vcu_le32 version;               /* chosen, within [version_min, version_max] */
    vcu_le32 max_payload;           /* VCU_MAX_PAYLOAD as the device enforces it */
    vcu_le64 features;              /* requested & offered */
    vcu_le64 session;               /* id for vcu_req_hdr.session, never 0 */
    vcu_le64 max_xfer;              /* data bytes per request */
    vcu_le32 max_segs;
    vcu_le32 reserved;
};

/*
 * ECHO: the request payload after the fixed struct is returned after the
 * fixed reply struct.  Data: the TO_DEVICE segments, taken as one byte
 * stream, are hashed (FNV-1a 64) and copied into the FROM_DEVICE segments
 * taken as one stream, up to the shorter of the two; with VCU_ECHO_F_FILL
 * the FROM_DEVICE stream is filled with vcu_echo_byte(seed, offset)
 * instead.  The rest of the FROM_DEVICE stream is left untouched.
 */
#define VCU_ECHO_F_FILL (1u << 0)

struct vcu_echo_req {
    vcu_le64 seed;
    vcu_le32 flags;                 /* VCU_ECHO_F_* */
    vcu_le32 delay_ms;              /* the host sleeps first (<= 10000): tests in-flight work */
};

struct vcu_echo_resp {
    vcu_le64 in_bytes;              /* TO_DEVICE bytes seen */
    vcu_le64 out_bytes;             /* FROM_DEVICE bytes written */
    vcu_le64 in_hash;               /* FNV-1a 64 of the TO_DEVICE stream */
    vcu_le64 reserved;
};

#define VCU_FNV64_INIT 0xcbf29ce484222325ULL
#define VCU_FNV64_PRIME 0x100000001b3ULL

static inline vcu_u8 vcu_echo_byte(vcu_le64 seed, vcu_le64 off)
{
    vcu_le64 x = seed + off * 0x9e3779b97f4a7c15ULL;

    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    return (vcu_u8)(x ^ (x >> 8));
}

/* ---- CUDA --------------------------------------------------------------- */
/*
 * The CUDA opcodes carry the CUDA Driver API: the guest library builds the
 * runtime API on top of them as NVIDIA's runtime does on libcuda.  Every
 * CUDA request starts with vcu_cu_hdr (the virtual device the call runs
 * on); every reply starts with vcu_cu_resp.  "result" is a CUresult.
 *
 * Handles (module, function, stream, event, graph, graph exec, pool) are
 * session-local values chosen by the host; values below 16 are never
 * handles.  Stream handle 0 is the legacy default stream, 1 the
 * per-thread default stream.  Device pointers are the session context's
 * own addresses.
 *
 * A request with VCU_REQ_F_ASYNC gets no reader for its reply: its first
 * failing result is kept by the session and reported, once, in the
 * "deferred" field of the next reply (and by CU_GET_DEFERRED_ERROR).
 */
#define VCU_CU_STREAM_LEGACY 0ull
#define VCU_CU_STREAM_PER_THREAD 1ull
#define VCU_CU_HANDLE_MIN 16ull

#define VCU_CU_NAME_MAX 4096u       /* symbol names, trailing, NUL not sent */
#define VCU_CU_NUM_DEV_ATTRS 160u   /* > CU_DEVICE_ATTRIBUTE_MAX in CUDA 13.0 */
#define VCU_CU_NUM_FUNC_ATTRS 16u   /* > CU_FUNC_ATTRIBUTE_MAX in CUDA 13.0 */
#define VCU_CU_MAX_PARAMS 1024u
#define VCU_CU_MAX_PARAM_BYTES 32764u
#define VCU_CU_MAX_DEPS 256u
#define VCU_CU_MAX_CAPTURE_DEPS 64u /* a capture's open dependencies, listed */
#define VCU_CU_MAX_DEVICES 16u

struct vcu_cu_hdr {
    vcu_le32 device;                /* virtual ordinal, 0..count-1 */
    /* The guest context what a request of VCU_CU_OP_NAMES_CTX makes is
     * made in: 0 for the device's primary context, else the number the
     * guest library gave a context it created (cuCtxCreate), which
     * CU_CTX_DESTROY names.  0 in every other request (the host reads it
     * as 0 there). */
    vcu_le32 ctx;
};

/* The requests whose vcu_cu_hdr.ctx says where what they make belongs. */
#define VCU_CU_OP_NAMES_CTX(op)                                                     \
    ((op) == VCU_OP_CU_MEM_ALLOC || (op) == VCU_OP_CU_STREAM_CREATE ||               \
     (op) == VCU_OP_CU_EVENT_CREATE || (op) == VCU_OP_CU_MODULE_LOAD ||              \
     (op) == VCU_OP_CU_MODULE_LOAD_HASH || (op) == VCU_OP_CU_MODULE_LOAD_KEEP)

struct vcu_cu_resp {
    vcu_le32 result;                /* CUresult of this call */
    vcu_le32 deferred;              /* CUresult of an earlier async call, or 0 */
};

struct vcu_cu_u64_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 value;                 /* a handle, pointer, flag word or index */
};

struct vcu_cu_pair_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 a;                     /* the opcode's first operand (see its comment) */
    vcu_le64 b;
    vcu_le64 c;
};
/*
 * vcu_cu_pair_req operands:
 *   CU_STREAM_WAIT_EVENT   a = stream, b = event, c = flags
 *   CU_STREAM_BEGIN_CAPTURE a = stream, b = CUstreamCaptureMode
 *   CU_STREAM_HOST_FUNC    a = stream, b = guest cookie (returned by CALLBACK_WAIT)
 *   CU_EVENT_RECORD        a = event, b = stream, c = flags
 *   CU_GRAPH_INSTANTIATE   a = graph, b = flags
 *   CU_GRAPH_LAUNCH        a = graph exec, b = stream
 *   CU_GRAPH_EXEC_UPDATE   a = graph exec, b = graph
 *   CU_GRAPH_COND_HANDLE   a = graph, b = default launch value, c = flags
 *                          (CU_GRAPH_COND_ASSIGN_DEFAULT or 0)
 *   CU_TEXOBJ_DESTROY, CU_TEXOBJ_GET
 *                          a = the object's driver value, b = VCU_CU_TEXOBJ_*
 *   CU_MIPMAP_LEVEL        a = mipmapped array, b = level
 *   CU_CTX_PEER_ACCESS     a = the peer context's device (virtual ordinal),
 *                          b = flags (0), c = 1 enable, 0 disable; the
 *                          current context is the header's device's
 * vcu_cu_u64_req value:
 *   CU_CTX_SET_FLAGS flags; CU_MEM_FREE pointer;
 *   CU_EVENT_CREATE and CU_GRAPH_CREATE flags; CU_CALLBACK_DONE cookie;
 *   CU_TAKE_OUTPUT flags (VCU_CU_TAKE_F_*);
 *   CU_THREAD_CAPTURE_MODE the worker's new CUstreamCaptureMode (the
 *   previous one returned);
 *   CU_HOST_DEVICE_POINTER flags (0); CU_HOST_DEVICE_POINTER_AT the
 *   address asked for;
 *   everything else the handle it names.
 */

struct vcu_cu_u64_resp {
    struct vcu_cu_resp r;
    vcu_le64 value;                 /* the handle, pointer or value asked for */
};

struct vcu_cu_driver_info_resp {
    struct vcu_cu_resp r;
    vcu_le32 driver_version;        /* cuDriverGetVersion */
    vcu_le32 device_count;          /* devices given to this VM (virtual) */
};

struct vcu_cu_device_info_resp {
    struct vcu_cu_resp r;
    char name[256];                 /* NUL terminated */
    vcu_u8 uuid[16];                /* the host GPU's UUID */
    vcu_le64 total_mem;
    vcu_le32 host_ordinal;          /* informational; attrs carry virtual PCI ids */
    vcu_le32 num_attrs;             /* valid entries of attrs */
    /* attrs[i] = cuDeviceGetAttribute(i); 0 where unsupported */
    vcu_le32 attrs[VCU_CU_NUM_DEV_ATTRS];
};

struct vcu_cu_mem_info_resp {
    struct vcu_cu_resp r;
    vcu_le64 free;
    vcu_le64 total;
};

/*
 * CU_SLICE_INFO: the VM's slice of the GPU the header's device belongs
 * to, as the host accounts it: what the guest's NVML (nvidia-smi) shows.
 * Memory figures are what the host charges against the VM's quota
 * (mem-quota on the device), the GPU memory each worker's CUDA context
 * takes for itself included; ctx_bytes says how much of them that is.
 * sessions[] lists the VM's live sessions (every guest process with the
 * device open), the asking one among them, by the id SESSION_OPEN gave
 * each; the guest kernel knows which process holds which.  A field the host cannot tell
 * is VCU_SLICE_UNKNOWN (all ones, of its width).
 */
#define VCU_SLICE_MAX_SESSIONS 64
#define VCU_SLICE_UNKNOWN32 0xffffffffu
#define VCU_SLICE_UNKNOWN64 0xffffffffffffffffull

struct vcu_cu_slice_session {
    vcu_le64 session;               /* vcu_session_open_resp.session */
    vcu_le64 mem_used;              /* bytes charged to this session, its context's included */
    vcu_le64 ctx_bytes;             /* of which its context's own GPU memory */
    vcu_le64 gpu_time_ns;           /* GPU time its work took */
};

struct vcu_cu_slice_info_resp {
    struct vcu_cu_resp r;
    vcu_le64 mem_quota;             /* 0: no quota, the VM may use the whole GPU */
    vcu_le64 mem_total;             /* what the guest is told: the quota, else the GPU's */
    vcu_le64 mem_used;              /* charged to the VM, all its sessions, contexts included */
    vcu_le64 ctx_bytes;             /* of which its workers' contexts */
    vcu_le32 compute_share;         /* weight; 0: none set */
    vcu_le32 sm_count;              /* SMs the VM's work may use */
    vcu_le32 util_percent;          /* the VM's GPU busy share, last second */
    vcu_le32 num_sessions;          /* valid entries of sessions[] */
    vcu_le64 faults;                /* sessions of this VM ended by a GPU fault */
    char driver_version[16];        /* the host's NVIDIA driver, "580.159.04",
                                     * NUL terminated; "" where unknown */
    vcu_le64 reserved[1];
    struct vcu_cu_slice_session sessions[VCU_SLICE_MAX_SESSIONS];
};

/*
 * CU_NVLINK_INFO: the NVLinks of the header's device as the VM may see
 * them, from the host's NVML (what the guest's NVML answers for NCCL's
 * topology: nvmlDeviceGetNvLink*).  Link i of the GPU is links[i].  A
 * link to another GPU of the VM names its virtual ordinal; a link to an
 * NVSwitch says so and nothing more.  A link to anything else (a GPU
 * this VM was not given, a CPU) is not reported, as if absent: the VM
 * cannot use it, and what is at its end is the host's.  known 0: the
 * host cannot tell (no NVML there), and no link is reported.
 */
#define VCU_NVLINK_MAX 18           /* NVML_NVLINK_MAX_LINKS */
#define VCU_NVLINK_NONE 0           /* absent, or not the VM's */
#define VCU_NVLINK_GPU 1            /* to the VM's GPU remote_dev */
#define VCU_NVLINK_SWITCH 2         /* to an NVSwitch */

struct vcu_cu_nvlink {
    vcu_u8 remote;                  /* VCU_NVLINK_* */
    vcu_u8 active;                  /* 1: the link is up */
    vcu_u8 caps;                    /* bit n: nvmlNvLinkCapability_t n (0..5) */
    vcu_u8 reserved;
    vcu_le32 remote_dev;            /* VCU_NVLINK_GPU: the VM's virtual ordinal */
};

struct vcu_cu_nvlink_info_resp {
    struct vcu_cu_resp r;
    vcu_le32 known;                 /* 1: the host's NVML answered */
    vcu_le32 reserved;
    struct vcu_cu_nvlink links[VCU_NVLINK_MAX];
};

/*
 * CU_CTX_DESTROY: value = a context's number (vcu_cu_hdr.ctx, not 0).
 * The host ends what was made in it on the request's device and is still
 * there (CU_MEM_ALLOC allocations, CU_MODULE_LOAD* modules,
 * CU_STREAM_CREATE streams, CU_EVENT_CREATE events), as cuCtxDestroy
 * does; the reply's value is how many.  The guest synchronizes first.
 */

/*
 * CU_TAKE_OUTPUT: device printf output.  The host's driver writes it to
 * the host process's stdout; a host that captures it keeps it per session
 * (at most 1 MiB; beyond that it is dropped and the output says so once)
 * and this returns the oldest len bytes of it, followed by them, and more
 * = 1 if there is still more.  The host collects it after the calls that
 * flush it (vcu_op_flushes_printf() in vcu_printf.h) of sessions that
 * loaded an image that uses printf (vcu_image_uses_printf()).  With
 * VCU_CU_TAKE_F_SYNC it first synchronizes every context of the session
 * (process exit).  A host that does not capture returns len 0.
 */
#define VCU_CU_TAKE_F_SYNC (1u << 0)

struct vcu_cu_output_resp {
    struct vcu_cu_resp r;
    vcu_le32 len;                   /* bytes that follow */
    vcu_le32 more;                  /* 1: call again */
};

struct vcu_cu_limit_req {
    struct vcu_cu_hdr hdr;
    vcu_le32 limit;                 /* CUlimit */
    vcu_le32 reserved;
    vcu_le64 value;
};

/*
 * Virtual memory management (cuMemCreate and the calls around it).  An
 * allocation handle is a session handle (the host's table), never the
 * driver's; addresses are the device's, as cuMemAlloc's.  Devices in
 * prop and access are virtual ordinals.  The fields each opcode reads
 * (the rest must be 0) and what its reply's value is:
 *   CU_MEM_CREATE           size, flags, prop; value: the handle
 *   CU_MEM_RELEASE          handle
 *   CU_MEM_ADDRESS_RESERVE  size, offset (alignment), handle (address
 *                           hint), flags; value: the address
 *   CU_MEM_ADDRESS_FREE     ptr, size
 *   CU_MEM_MAP              ptr, size, offset, handle, flags
 *   CU_MEM_UNMAP            ptr, size
 *   CU_MEM_SET_ACCESS       ptr, size, count, access[count]
 *   CU_MEM_GET_ACCESS       ptr, prop.loc_type/loc_id; value: the flags
 *   CU_MEM_GRANULARITY      prop, flags (the option); value: bytes
 *   CU_MEM_GET_PROPS        handle; reply prop
 *   CU_MEM_RETAIN           ptr; value: the handle of the allocation
 *                           mapped there (counted once more)
 */
struct vcu_cu_mem_prop {
    vcu_le32 type;                  /* CUmemAllocationType */
    vcu_le32 handle_types;          /* CUmemAllocationHandleType mask */
    vcu_le32 loc_type;              /* CUmemLocationType */
    vcu_le32 loc_id;                /* a device: its virtual ordinal */
    vcu_u8 compression;             /* allocFlags */
    vcu_u8 rdma;
    vcu_le16 usage;
    vcu_le32 reserved;
};

struct vcu_cu_mem_access {
    vcu_le32 loc_type;              /* CUmemLocationType */
    vcu_le32 loc_id;
    vcu_le32 flags;                 /* CUmemAccess_flags */
    vcu_le32 reserved;
};

struct vcu_cu_vmm_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 ptr;
    vcu_le64 size;
    vcu_le64 offset;
    vcu_le64 handle;
    vcu_le64 flags;
    struct vcu_cu_mem_prop prop;
    vcu_le32 count;                 /* entries of access used */
    vcu_le32 reserved;
    struct vcu_cu_mem_access access[VCU_CU_MAX_DEVICES];
};

struct vcu_cu_vmm_resp {
    struct vcu_cu_resp r;
    vcu_le64 value;
    vcu_le64 size;                  /* CU_MEM_GET_PROPS: the allocation's */
    struct vcu_cu_mem_prop prop;    /* CU_MEM_GET_PROPS */
};

struct vcu_cu_mem_alloc_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 size;
    vcu_le64 stream;                /* CU_MEM_ALLOC_ASYNC */
    vcu_le64 pool;                  /* CU_MEM_ALLOC_ASYNC; 0 = the device's current pool */
};

/*
 * CU_MEMCPY_HTOD: one TO_DEVICE segment of size bytes, copied to dst.
 * CU_MEMCPY_DTOH: one FROM_DEVICE segment of size bytes, filled from src.
 * CU_MEMCPY_DTOD: no segment.  CU_MEM_FREE_ASYNC: dst = pointer.
 * stream is used where flags has VCU_CU_MEMCPY_F_ASYNC (cuMemcpy*Async);
 * otherwise the copy is synchronous.
 */
#define VCU_CU_MEMCPY_F_ASYNC (1u << 0)

struct vcu_cu_memcpy_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 dst;
    vcu_le64 src;
    vcu_le64 size;
    vcu_le64 stream;
    vcu_le32 flags;                 /* VCU_CU_MEMCPY_F_* */
    vcu_le32 reserved;
};

/*
 * CU_MEMCPY_PEER: cuMemcpyPeer[Async] between contexts of two devices
 * (the host's context of each); c as CU_MEMCPY_DTOD, its stream (with
 * VCU_CU_MEMCPY_F_ASYNC) of the header's device.  Two contexts of one
 * device are a CU_MEMCPY_DTOD.
 */
struct vcu_cu_memcpy_peer_req {
    struct vcu_cu_memcpy_req c;     /* IN; c.reserved 0 */
    vcu_le32 dst_device;            /* IN virtual ordinal of dst's context */
    vcu_le32 src_device;            /* IN virtual ordinal of src's context */
};

/*
 * CU_STREAM_MEMOPS: cuStreamBatchMemOp on the stream (the header's
 * device's), count operations of struct vcu_cu_memop after the request.
 * type: CUstreamBatchMemOpType; address: device memory of the session,
 * 4- or 8-byte aligned (wait and write); value: the 32 or 64 bits;
 * flags: the operation's (CUstreamWaitValue_flags, 0 for writes,
 * CUstreamMemoryBarrier_flags for a barrier, 0 for a flush).
 */
#define VCU_CU_MEMOPS_MAX 255u      /* cuda.h: count "less than 256" */

struct vcu_cu_memops_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 stream;                /* IN */
    vcu_le32 count;                 /* IN 1..VCU_CU_MEMOPS_MAX */
    vcu_le32 flags;                 /* IN 0 */
};

struct vcu_cu_memop {
    vcu_le32 type;                  /* IN CU_STREAM_MEM_OP_* */
    vcu_le32 flags;                 /* IN */
    vcu_le64 address;               /* IN device address; barrier, flush: 0 */
    vcu_le64 value;                 /* IN */
};

/* cuMemsetD{8,16,32}[2D][Async]; height 1 and pitch 0 for 1D. */
struct vcu_cu_memset_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 dst;
    vcu_le64 pitch;                 /* bytes */
    vcu_le64 width;                 /* elements */
    vcu_le64 height;
    vcu_le64 stream;
    vcu_le32 value;
    vcu_le32 elem_size;             /* 1, 2 or 4 */
    vcu_le32 flags;                 /* VCU_CU_MEMCPY_F_ASYNC */
    vcu_le32 reserved;
};

/*
 * cuMemcpy2D.  A host side (src for HTOD, dst for DTOH) is the request's
 * one segment, holding rows at the given pitch starting at offset 0;
 * its pointer field is ignored.
 */
#define VCU_CU_COPY_HTOD 1u
#define VCU_CU_COPY_DTOH 2u
#define VCU_CU_COPY_DTOD 3u

struct vcu_cu_memcpy2d_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 dst;
    vcu_le64 dpitch;
    vcu_le64 src;
    vcu_le64 spitch;
    vcu_le64 width;                 /* bytes */
    vcu_le64 height;
    vcu_le64 stream;
    vcu_le32 kind;                  /* VCU_CU_COPY_* */
    vcu_le32 flags;                 /* VCU_CU_MEMCPY_F_ASYNC */
};

/*
 * CUDA arrays (cuArrayCreate, cuArray3DCreate).  CU_ARRAY_CREATE: the
 * array's shape as CUDA_ARRAY3D_DESCRIPTOR has it (height 0 for a 1D
 * array, depth 0 for a 1D or 2D one; a layered array's depth is its
 * layer count); the reply's value is a session handle (VCU__H_ARRAY on
 * the host), never the driver's CUarray.  The host refuses with
 * CUDA_ERROR_INVALID_VALUE a format other than CUarray_format's eight
 * plain ones (CUDA_ERROR_NOT_SUPPORTED for the packed, block-compressed
 * and video formats), a channel count other than 1, 2 or 4, a width of
 * 0 or a dimension above VCU_CU_ARRAY_MAX_DIM, flags outside
 * VCU_CU_ARRAY_FLAGS, and a shape whose bytes overflow; the array is
 * charged to the VM's quota as an allocation (CUDA_ERROR_OUT_OF_MEMORY
 * past it).  CU_ARRAY_DESTROY: value = the handle.
 */
#define VCU_CU_ARRAY_MAX_DIM (1u << 18)
/* LAYERED, SURFACE_LDST, CUBEMAP, TEXTURE_GATHER, DEPTH_TEXTURE,
 * COLOR_ATTACHMENT; sparse and deferred-mapping arrays are not offered. */
#define VCU_CU_ARRAY_FLAGS 0x3fu

struct vcu_cu_array_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 width;                 /* IN elements */
    vcu_le64 height;                /* IN */
    vcu_le64 depth;                 /* IN */
    vcu_le32 format;                /* IN CUarray_format */
    vcu_le32 channels;              /* IN 1, 2 or 4 */
    vcu_le32 flags;                 /* IN CUDA_ARRAY3D_* within VCU_CU_ARRAY_FLAGS */
    vcu_le32 reserved;              /* IN 0 */
};

/*
 * Mipmapped arrays (cuMipmappedArrayCreate): CU_MIPMAP_CREATE takes the
 * level 0 shape as CU_ARRAY_CREATE does and 1..VCU_CU_MIPMAP_MAX_LEVELS
 * levels (each level halves width, height and a 3D array's depth, to 1;
 * no more levels than level 0's largest dimension has halvings); its
 * value is a session handle (VCU__H_MIPMAP), charged to the quota for
 * every level.  CU_MIPMAP_LEVEL returns the array handle of one level:
 * the same each time, usable wherever an array is, but destroyed only
 * with its mipmapped array (CU_ARRAY_DESTROY of it is
 * CUDA_ERROR_INVALID_VALUE).  CU_MIPMAP_DESTROY: value = the handle.
 */
#define VCU_CU_MIPMAP_MAX_LEVELS 19u    /* 2^18 halves 18 times */

struct vcu_cu_mipmap_req {
    struct vcu_cu_array_req a;      /* IN level 0 */
    vcu_le32 levels;                /* IN */
    vcu_le32 reserved;              /* IN 0 */
};

/*
 * CU_MEMCPY_3D: cuMemcpy3D[Async] and every copy to or from an array
 * (cuMemcpy2D with an array side, cuMemcpy{HtoA,AtoH,AtoD,DtoA,AtoA}).
 * A side is host memory (type CU_MEMORYTYPE_HOST: the request's one
 * segment, its first byte the first byte copied, so x, y and z are 0;
 * TO_DEVICE for a source, FROM_DEVICE for a destination), device memory
 * (CU_MEMORYTYPE_DEVICE: ptr the address of (0,0,0)) or an array
 * (CU_MEMORYTYPE_ARRAY: ptr its session handle, pitch and height 0).
 * At most one side is host memory.  pitch is bytes from row to row,
 * height rows from slice to slice.  flags: VCU_CU_MEMCPY_F_ASYNC with
 * stream, as CU_MEMCPY_2D.  CU_MEMCPY_3D_PEER (cuMemcpy3DPeer[Async]
 * between contexts of two devices): the same, each side's reserved the
 * virtual ordinal of its context's device (an array must be of it).
 */
struct vcu_cu_memcpy3d_side {
    vcu_le64 ptr;                   /* IN device address or array handle; host: 0 */
    vcu_le64 x;                     /* IN bytes */
    vcu_le64 y;                     /* IN rows */
    vcu_le64 z;                     /* IN slices */
    vcu_le64 pitch;                 /* IN bytes; array: 0 */
    vcu_le64 height;                /* IN rows; array: 0 */
    vcu_le32 type;                  /* IN CUmemorytype: HOST, DEVICE or ARRAY */
    vcu_le32 reserved;              /* IN 0 */
};

struct vcu_cu_memcpy3d_req {
    struct vcu_cu_hdr hdr;
    struct vcu_cu_memcpy3d_side src;
    struct vcu_cu_memcpy3d_side dst;
    vcu_le64 width;                 /* IN bytes */
    vcu_le64 height;                /* IN rows */
    vcu_le64 depth;                 /* IN slices */
    vcu_le64 stream;                /* IN with VCU_CU_MEMCPY_F_ASYNC */
    vcu_le32 flags;                 /* IN VCU_CU_MEMCPY_F_ASYNC */
    vcu_le32 reserved;              /* IN 0 */
};

/*
 * Texture and surface objects (cuTexObjectCreate, cuSurfObjectCreate).
 * CU_TEXOBJ_CREATE: kind TEX takes res, tex and, with has_view, view;
 * kind SURF takes res alone (an array).  The reply's value is the
 * driver's own 64-bit object, which kernels take as a parameter; the
 * host keeps the set of those it made for the session and takes only
 * those in CU_TEXOBJ_DESTROY and CU_TEXOBJ_GET (a = the object, b = its
 * kind).  The resource: an array (res.type CU_RESOURCE_TYPE_ARRAY,
 * handle a session array of the header's device), a mipmapped array
 * (MIPMAPPED_ARRAY, handle a session mipmapped array; textures only) or
 * linear memory
 * (LINEAR: ptr, format, channels, size; PITCH2D: ptr, format, channels,
 * width, height, pitch), which must lie inside one live allocation of
 * the session.  Every field is checked on the host: a bad one is
 * CUDA_ERROR_INVALID_VALUE, a forged handle CUDA_ERROR_INVALID_HANDLE.
 * CU_TEXOBJ_GET returns the
 * descriptors as created (a surface's tex and view zero).
 */
#define VCU_CU_TEXOBJ_TEX 0u
#define VCU_CU_TEXOBJ_SURF 1u

struct vcu_cu_res_desc {
    vcu_le32 type;                  /* IN CUresourcetype */
    vcu_le32 format;                /* IN CUarray_format (LINEAR, PITCH2D) */
    vcu_le32 channels;              /* IN (LINEAR, PITCH2D) */
    vcu_le32 flags;                 /* IN 0 */
    vcu_le64 handle;                /* IN ARRAY, MIPMAPPED_ARRAY: its session handle */
    vcu_le64 ptr;                   /* IN LINEAR, PITCH2D: device address */
    vcu_le64 size;                  /* IN LINEAR: bytes */
    vcu_le64 width;                 /* IN PITCH2D: elements */
    vcu_le64 height;                /* IN PITCH2D: rows */
    vcu_le64 pitch;                 /* IN PITCH2D: bytes */
};

/* CUDA_TEXTURE_DESC; the floats as their IEEE-754 bits. */
struct vcu_cu_tex_desc {
    vcu_le32 address_mode[3];       /* IN CUaddress_mode */
    vcu_le32 filter_mode;           /* IN CUfilter_mode */
    vcu_le32 flags;                 /* IN CU_TRSF_* */
    vcu_le32 max_anisotropy;        /* IN <= 16 */
    vcu_le32 mipmap_filter_mode;    /* IN CUfilter_mode */
    vcu_le32 mipmap_level_bias;     /* IN float, finite */
    vcu_le32 min_mipmap_level_clamp;        /* IN float, finite */
    vcu_le32 max_mipmap_level_clamp;        /* IN float, finite */
    vcu_le32 border_color[4];       /* IN float */
};

/* CUDA_RESOURCE_VIEW_DESC. */
struct vcu_cu_view_desc {
    vcu_le32 format;                /* IN CUresourceViewFormat */
    vcu_le32 reserved;              /* IN 0 */
    vcu_le64 width;                 /* IN */
    vcu_le64 height;                /* IN */
    vcu_le64 depth;                 /* IN */
    vcu_le32 first_mipmap_level;    /* IN */
    vcu_le32 last_mipmap_level;     /* IN */
    vcu_le32 first_layer;           /* IN */
    vcu_le32 last_layer;            /* IN */
};

struct vcu_cu_texobj_req {
    struct vcu_cu_hdr hdr;
    vcu_le32 kind;                  /* IN VCU_CU_TEXOBJ_* */
    vcu_le32 has_view;              /* IN 0 or 1 (TEX only) */
    struct vcu_cu_res_desc res;
    struct vcu_cu_tex_desc tex;     /* IN TEX only, else 0 */
    struct vcu_cu_view_desc view;   /* IN with has_view, else 0 */
};

struct vcu_cu_texobj_resp {
    struct vcu_cu_resp r;
    vcu_le32 kind;                  /* OUT VCU_CU_TEXOBJ_* */
    vcu_le32 has_view;              /* OUT */
    struct vcu_cu_res_desc res;     /* OUT as created */
    struct vcu_cu_tex_desc tex;     /* OUT */
    struct vcu_cu_view_desc view;   /* OUT */
};

struct vcu_cu_mem_range_resp {
    struct vcu_cu_resp r;
    vcu_le64 base;
    vcu_le64 size;
};

/*
 * CU_MODULE_GLOBAL_INFO: a module global (base, size, as CU_MODULE_GET_GLOBAL
 * answers) and, with VCU_CU_GLOBAL_F_MANAGED, the managed allocation that
 * holds it (range_base, range_size: the guest gives it a host view).
 */
#define VCU_CU_GLOBAL_F_MANAGED 0x1u

/*
 * CUDA IPC: the 64 bytes of a CUipcMemHandle or CUipcEventHandle in the
 * guest.  They name a record the exporting session's worker keeps in its
 * VM's IPC folder, which only that VM's workers reach: the exporter's pid
 * in its jail and 128 random bits.  The driver's own handle, which any
 * process of the host could open, never leaves the host.
 * docs/design.md, "CUDA IPC".
 *
 * CU_IPC_GET_MEM_HANDLE: value: a device pointer of the session's own
 *   cuMemAlloc memory.  CU_IPC_GET_EVENT_HANDLE: value: an event handle
 *   (created with CU_EVENT_INTERPROCESS).  Reply: the handle.
 * CU_IPC_OPEN_MEM_HANDLE: a handle and cuIpcOpenMemHandle's flags; reply:
 *   the device pointer, charged to the opener as its own memory (the
 *   driver keeps it while any process holds it).  CU_IPC_CLOSE_MEM_HANDLE:
 *   value: that pointer.  CU_IPC_OPEN_EVENT_HANDLE: a handle, flags 0;
 *   reply: an event handle of the session.
 *
 * Shareable handles (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), kind
 * VCU_CU_IPC_VMM: the driver's descriptor is given to the host daemon,
 * which keeps it for the VM's other workers (host-backend/common/vcu_keep.h)
 * under 128 random bits of its own; pid is 0.  The guest library hands its
 * program a sealed memfd holding the 64 bytes.
 * CU_MEM_EXPORT_SHAREABLE: value: an allocation handle (CU_MEM_CREATE's,
 *   made with requestedHandleTypes POSIX_FILE_DESCRIPTOR).  Reply: the
 *   handle, the same for every export of one allocation.
 * CU_MEM_IMPORT_SHAREABLE: a handle, flags 0; reply: an allocation handle
 *   of the session, charged to it as CU_MEM_CREATE's are.
 * Pools made with handle_types POSIX_FILE_DESCRIPTOR (CU_MEMPOOL_CREATE):
 * CU_MEMPOOL_EXPORT_SHAREABLE: value: the pool handle; reply: a handle of
 *   kind VCU_CU_IPC_POOL, kept by the daemon as a VMM one.
 * CU_MEMPOOL_IMPORT_SHAREABLE: a handle, flags 0; reply: value, a pool
 *   handle of the session (no allocations of its own: blocks are
 *   imported into it), and dev, the pool's device (a virtual ordinal).
 * CU_MEMPOOL_EXPORT_POINTER: value: a block of such a pool of the
 *   session's; reply: a handle of kind VCU_CU_IPC_POOL_PTR, a record in
 *   the VM's IPC folder as CU_IPC_GET_MEM_HANDLE's (the guest's 64 bytes
 *   of CUmemPoolPtrExportData).
 * CU_MEMPOOL_IMPORT_POINTER: an imported pool and such a handle; reply:
 *   value, the block's device pointer in this session, and size, its
 *   bytes as charged to the session until it is freed (cuMemFreeAsync).
 */
#define VCU_CU_IPC_MAGIC 0x63706963u        /* "cipc" */
#define VCU_CU_IPC_MEM 1u
#define VCU_CU_IPC_EVENT 2u
#define VCU_CU_IPC_VMM 3u                   /* a shareable handle of cuMemCreate's */
#define VCU_CU_IPC_POOL 4u                  /* a shareable handle of a memory pool */
#define VCU_CU_IPC_POOL_PTR 5u              /* a pool's block (CUmemPoolPtrExportData) */
#define VCU_CU_IPC_TOKEN 16u

struct vcu_cu_ipc_handle {
    vcu_le32 magic;                 /* VCU_CU_IPC_MAGIC */
    vcu_le32 kind;                  /* VCU_CU_IPC_MEM, _EVENT or _VMM */
    vcu_le32 pid;                   /* the exporting worker's, in its jail; _VMM: 0 */
    vcu_le32 reserved;
    vcu_u8 token[VCU_CU_IPC_TOKEN];
    vcu_u8 reserved2[32];
};

struct vcu_cu_ipc_handle_resp {
    struct vcu_cu_resp r;
    struct vcu_cu_ipc_handle h;     /* OUT */
};

struct vcu_cu_ipc_open_req {
    struct vcu_cu_hdr hdr;
    struct vcu_cu_ipc_handle h;     /* IN */
    vcu_le32 flags;                 /* IN: CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS or 0 */
    vcu_le32 reserved;
};

struct vcu_cu_ipc_import_resp {
    struct vcu_cu_resp r;
    vcu_le64 value;                 /* OUT */
    vcu_le64 size;                  /* OUT: IMPORT_POINTER */
    vcu_le32 dev;                   /* OUT: IMPORT_SHAREABLE */
    vcu_le32 reserved;
};

struct vcu_cu_pool_ptr_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 pool;                  /* IN: an imported pool's handle */
    struct vcu_cu_ipc_handle h;     /* IN */
};

struct vcu_cu_global_info_resp {
    struct vcu_cu_resp r;
    vcu_le64 base;                  /* OUT */
    vcu_le64 size;                  /* OUT */
    vcu_le64 range_base;            /* OUT: 0 unless managed */
    vcu_le64 range_size;            /* OUT */
    vcu_le32 flags;                 /* OUT: VCU_CU_GLOBAL_F_* */
    vcu_le32 reserved;
};

/*
 * Attributes of pools (CU_MEMPOOL_*: handle = pool, attr = CUmemPool_attribute,
 * value; TRIM: value = minBytesToKeep).  CU_MEMPOOL_SET_ACCESS
 * (cuMemPoolSetAccess, one device at a time): handle = a pool of the
 * session's (its own, made or imported), attr = the device that gets
 * access (the VM's ordinal), value = CU_MEM_ACCESS_FLAGS_PROT_NONE, _READ
 * or _READWRITE; the driver says whether the two devices allow it.
 */
struct vcu_cu_attr_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 handle;
    vcu_le32 attr;
    vcu_le32 reserved;
    vcu_le64 value;
};

/*
 * CU_MEMPOOL_CREATE: a memory pool of the header's device (cuMemPoolCreate
 * with the CUmemPoolProps this carries; the reply's value is its handle,
 * for CU_MEM_ALLOC_ASYNC, the attribute requests, cuMemPoolTrimTo and
 * CU_MEMPOOL_DESTROY).  Pinned device memory only, shared with no other
 * process but through its shareable handle (handle_types
 * POSIX_FILE_DESCRIPTOR, where the worker has the daemon's keep: below,
 * CU_MEMPOOL_EXPORT_SHAREABLE): another alloc_type, handle type or usage
 * is CUDA_ERROR_NOT_SUPPORTED.  Its blocks are charged to the VM's quota as
 * the session's own pool's are, and a session makes at most 32.
 * CU_MEMPOOL_DESTROY (value = the handle): the session's own pool of a
 * device is not the guest's to destroy (CUDA_ERROR_INVALID_VALUE).
 */
struct vcu_cu_pool_create_req {
    struct vcu_cu_hdr hdr;
    vcu_le32 alloc_type;            /* CU_MEM_ALLOCATION_TYPE_PINNED */
    vcu_le32 handle_types;          /* CU_MEM_HANDLE_TYPE_NONE or _POSIX_FILE_DESCRIPTOR */
    vcu_le64 max_size;              /* 0: the driver's default */
    vcu_le32 usage;                 /* 0 */
    vcu_le32 reserved;
};

/* CU_MODULE_LOAD: one TO_DEVICE segment holding the image (fatbin, cubin or PTX). */
struct vcu_cu_module_load_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 image_len;
};

/*
 * CU_MODULE_LOAD_HASH (only with VCU_FEAT_MODULE_CACHE): load the image
 * of image_len bytes whose SHA-256 is sha256, from the host's module
 * cache, without sending it.  No data segment.  The reply is
 * CU_MODULE_LOAD's; result CUDA_ERROR_FILE_NOT_FOUND (which a load of
 * bytes never answers) means the host does not have it, and the guest
 * then sends the image with CU_MODULE_LOAD, after which the host has it.
 * The host stores only images it received, under the hash it computed
 * itself, and hashes what it reads back before loading it.
 */
struct vcu_cu_module_hash_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 image_len;             /* 1..VCU_MAX_XFER */
    vcu_u8 sha256[32];
};

/*
 * CU_MODULE_LOAD_KEEP (only with VCU_FEAT_MODULE_CACHE): CU_MODULE_LOAD,
 * whose reply also gives the SHA-256 the host computed over the image it
 * received (and stored it under, if the load succeeded), so that a guest
 * can name that image later without hashing it itself.
 */
struct vcu_cu_module_keep_resp {
    struct vcu_cu_resp r;
    vcu_le64 module;
    vcu_u8 sha256[32];
};

/* Followed by name_len bytes of symbol name (no NUL). */
struct vcu_cu_name_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 module;
    vcu_le32 name_len;              /* 1..VCU_CU_NAME_MAX */
    vcu_le32 reserved;
};

struct vcu_cu_param {
    vcu_le32 offset;
    vcu_le32 size;
};

/* Followed by nparams struct vcu_cu_param, from cuFuncGetParamInfo. */
struct vcu_cu_function_resp {
    struct vcu_cu_resp r;
    vcu_le64 function;
    vcu_le32 nparams;
    vcu_le32 param_bytes;           /* end of the last parameter */
};

struct vcu_cu_func_attrs_resp {
    struct vcu_cu_resp r;
    vcu_le32 attrs[VCU_CU_NUM_FUNC_ATTRS];   /* cuFuncGetAttribute(i) as int32 */
};

/*
 * CU_OCCUPANCY_BLOCK_SIZE: cuOccupancyMaxPotentialBlockSizeWithFlags with a
 *   fixed dyn_smem (block_size = limit) -> value0 = min grid, value1 = block.
 */
struct vcu_cu_occupancy_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 function;
    vcu_le32 block_size;
    vcu_le32 flags;
    vcu_le64 dyn_smem;
};

struct vcu_cu_occupancy_resp {
    struct vcu_cu_resp r;
    vcu_le32 value0;
    vcu_le32 value1;
};

/*
 * CU_LAUNCH: followed by param_bytes of the kernel's parameter buffer, laid
 * out by the offsets CU_MODULE_GET_FUNCTION returned.
 */
#define VCU_CU_LAUNCH_F_COOPERATIVE (1u << 0)

struct vcu_cu_launch_req {
    struct vcu_cu_hdr hdr;
    vcu_le64 function;
    vcu_le64 stream;
    vcu_le32 grid[3];
    vcu_le32 block[3];
    vcu_le32 shared_mem;
    vcu_le32 flags;                 /* VCU_CU_LAUNCH_F_* */
    vcu_le32 param_bytes;           /* <= VCU_CU_MAX_PARAM_BYTES */
    vcu_le32 reserved;
};

/*
 * CU_BATCH (with VCU_FEAT_BATCH): count consecutive async requests of one
 * session in one, as the guest library coalesces a burst of launches.
 * Each entry is a vcu_cu_batch_entry, then len bytes of its opcode's
 * request payload (its own vcu_cu_hdr first), then zeros to a multiple
 * of 8; the entries fill the payload exactly.  Only the opcodes
 * vcu_batch_op_ok() names, which take no segment, reply with a
 * vcu_cu_resp alone and never wait, may be entries.  The host checks the
 * whole framing before it runs any entry; then it runs them in order,
 * each exactly as the same request sent alone with VCU_REQ_F_ASYNC: its
 * failure is the session's deferred error (the first one kept).  The
 * batch's own header device and reserved are 0; its result is
 * CUDA_SUCCESS, or CUDA_ERROR_INVALID_VALUE (nothing run) for bad
 * framing.  Sent with VCU_REQ_F_ASYNC itself, as the guest library does,
 * a bad batch is a deferred CUDA_ERROR_INVALID_VALUE.
 */
#define VCU_CU_BATCH_MAX 64u        /* entries */
#define VCU_CU_BATCH_BYTES 16384u   /* payload, header included */

struct vcu_cu_batch_req {
    struct vcu_cu_hdr hdr;          /* device 0, reserved 0 */
    vcu_le32 count;                 /* 1..VCU_CU_BATCH_MAX */
    vcu_le32 reserved;
};

struct vcu_cu_batch_entry {
    vcu_le32 opcode;
    vcu_le32 len;                   /* the request payload's bytes */
};

/*
 * CU_LAUNCH_EX: cuLaunchKernelEx.  The fixed struct's launch part is
 * CU_LAUNCH's (flags 0), then nattrs struct vcu_cu_launch_attr, then
 * param_bytes of parameters as for CU_LAUNCH.  CU_OCCUPANCY_CLUSTERS and
 * CU_OCCUPANCY_CLUSTER_SIZE take the same struct, param_bytes 0, stream
 * and attributes of the CUlaunchConfig they ask about.
 *
 * An attribute: id is a CUlaunchAttributeID; handle is a session event for
 * PROGRAMMATIC_EVENT and LAUNCH_COMPLETION_EVENT, else 0; v[] holds the
 * value's other fields in the order cuda.h's CUlaunchAttributeValue gives
 * them, one 32-bit word each (MEM_SYNC_DOMAIN_MAP: default, remote):
 *   COOPERATIVE, PROGRAMMATIC_STREAM_SERIALIZATION, PRIORITY,
 *   MEM_SYNC_DOMAIN, CLUSTER_SCHEDULING_POLICY_PREFERENCE,
 *   PREFERRED_SHARED_MEMORY_CARVEOUT      v[0]
 *   CLUSTER_DIMENSION, PREFERRED_CLUSTER_DIMENSION   v[0..2] = x, y, z
 *   PROGRAMMATIC_EVENT      handle, v[0] = flags, v[1] = triggerAtBlockStart
 *   LAUNCH_COMPLETION_EVENT handle, v[0] = flags
 *   MEM_SYNC_DOMAIN_MAP     v[0] = default, v[1] = remote
 *   IGNORE                  nothing
 * Any other id is CUDA_ERROR_NOT_SUPPORTED.
 */
#define VCU_CU_MAX_LAUNCH_ATTRS 16u
#define VCU_CU_MAX_CLUSTER_BLOCKS 32u   /* above any GPU's non-portable size */

struct vcu_cu_launch_attr {
    vcu_le32 id;                    /* CUlaunchAttributeID */
    vcu_le32 reserved;
    vcu_le64 handle;                /* an event, or 0 */
    vcu_le32 v[4];
};

struct vcu_cu_launch_ex_req {
    struct vcu_cu_launch_req l;     /* flags 0 */
    vcu_le32 nattrs;                /* <= VCU_CU_MAX_LAUNCH_ATTRS */
    vcu_le32 reserved;
};

/*
 * CU_TENSOR_MAP: the host's driver encodes a CUtensorMap (TILED:
 * cuTensorMapEncodeTiled; IM2COL: cuTensorMapEncodeIm2col) or changes
 * map's address (REPLACE_ADDRESS: cuTensorMapReplaceAddress; only map and
 * global_address used).  The reply's 128 bytes are the map, passed to
 * kernels as they are: the global address in it is a device address,
 * the same in guest and host.  Arrays hold rank entries (strides rank -
 * 1, corners rank - 2), the rest zero.
 */
#define VCU_CU_TMAP_TILED 1u
#define VCU_CU_TMAP_IM2COL 2u
#define VCU_CU_TMAP_REPLACE_ADDRESS 3u
#define VCU_CU_TMAP_MAX_RANK 5u
#define VCU_CU_TMAP_BYTES 128u

struct vcu_cu_tmap_req {
    struct vcu_cu_hdr hdr;
    vcu_le32 kind;                  /* VCU_CU_TMAP_* */
    vcu_le32 data_type;             /* CUtensorMapDataType */
    vcu_le32 rank;                  /* 1..5; IM2COL 3..5 */
    vcu_le32 interleave;            /* CUtensorMapInterleave */
    vcu_le32 swizzle;               /* CUtensorMapSwizzle */
    vcu_le32 l2_promotion;          /* CUtensorMapL2promotion */
    vcu_le32 oob_fill;              /* CUtensorMapFloatOOBfill */
    vcu_le32 channels_per_pixel;    /* IM2COL */
    vcu_le32 pixels_per_column;     /* IM2COL */
    vcu_le32 reserved;
    vcu_le64 global_address;
    vcu_le64 global_dim[VCU_CU_TMAP_MAX_RANK];
    vcu_le64 global_strides[VCU_CU_TMAP_MAX_RANK - 1];
    vcu_le32 box_dim[VCU_CU_TMAP_MAX_RANK];          /* TILED */
    vcu_le32 element_strides[VCU_CU_TMAP_MAX_RANK];
    vcu_le32 lower_corner[VCU_CU_TMAP_MAX_RANK - 2]; /* IM2COL, as int32 */
    vcu_le32 upper_corner[VCU_CU_TMAP_MAX_RANK - 2]; /* IM2COL, as int32 */
    vcu_u8 map[VCU_CU_TMAP_BYTES];                   /* REPLACE_ADDRESS */
};

struct vcu_cu_tmap_resp {
    struct vcu_cu_resp r;
    vcu_u8 map[VCU_CU_TMAP_BYTES];
};

struct vcu_cu_stream_create_req {
    struct vcu_cu_hdr hdr;
    vcu_le32 flags;                 /* CU_STREAM_* */
    vcu_le32 priority;              /* as int32 */
};

/*
 * CU_LINK: cuLinkCreate .. cuLinkComplete in one request, run by the
 * session's worker.  Segment 0 (VCU_SEG_TO_DEVICE, at most
 * VCU_CU_MAX_LINK_BYTES) holds ninputs records, each a struct
 * vcu_cu_link_input then name_len bytes of name (no NUL) then data_len
 * bytes of data; segment 1 (VCU_SEG_FROM_DEVICE) receives the linked
 * image.  opt[] are the link's options (JIT options of plain values
 * only; logs come back in the reply).  Reply: image_len, the image's
 * size (written only when segment 1 holds it: else the guest asks again
 * with room), and the error log, NUL-terminated.
 */
#define VCU_CU_MAX_LINK_OPTS 16u
#define VCU_CU_MAX_LINK_INPUTS 1024u
#define VCU_CU_MAX_LINK_BYTES (256ull << 20)
#define VCU_CU_LINK_LOG 1024u
/* The JIT options a link request may carry, by number: plain values that
 * point at no memory and are not written back (CU_JIT_MAX_REGISTERS 0,
 * OPTIMIZATION_LEVEL 7, TARGET_FROM_CUCONTEXT 8, TARGET 9,
 * FALLBACK_STRATEGY 10, GENERATE_DEBUG_INFO 11, LOG_VERBOSE 12,
 * GENERATE_LINE_INFO 13, CACHE_MODE 14; cuda.c checks the numbers). */
#define VCU_CU_LINK_PLAIN_OPTS 0x7f81u
#define VCU_CU_LINK_OPT_PLAIN(id) ((id) < 32u && ((VCU_CU_LINK_PLAIN_OPTS >> (id)) & 1u))

struct vcu_cu_link_opt {
    vcu_le32 id;                    /* CUjit_option */
    vcu_le32 reserved;
    vcu_le64 value;
};

struct vcu_cu_link_input {
    vcu_le32 type;                  /* CUjitInputType */
    vcu_le32 name_len;              /* <= VCU_CU_NAME_MAX */
    vcu_le64 data_len;
};

struct vcu_cu_link_req {
    struct vcu_cu_hdr hdr;
    vcu_le32 nopts;                 /* <= VCU_CU_MAX_LINK_OPTS */
    vcu_le32 ninputs;               /* 1 ..VCU_CU_MAX_LINK_INPUTS */
    struct vcu_cu_link_opt opt[VCU_CU_MAX_LINK_OPTS];
};

struct vcu_cu_link_resp {
    struct vcu_cu_resp r;
    vcu_le64 image_len;
    char log[VCU_CU_LINK_LOG];
};

#include "vcu_proto_graph.h"

/*
 * Retired, their numbers never to be reused: 0x0107 CU_CTX_GET_LIMIT,
 * 0x0108 CU_CTX_PRIORITY_RANGE, 0x0109 CU_DEVICE_CAN_ACCESS_PEER, 0x010a
 * CU_PROFILER, 0x0305 CU_FUNC_SET_ATTR, 0x0306 CU_OCCUPANCY_BLOCKS,
 * 0x0309 CU_OCCUPANCY_AVAIL_SMEM, 0x0505 CU_EVENT_ELAPSED, 0x0403
 * CU_STREAM_QUERY, 0x0504 CU_EVENT_QUERY, 0x020c CU_MEMPOOL_TRIM, 0x020d
 * CU_MEM_GET_RANGE: now CU_CALL's cuCtxGetLimit,
 * cuCtxGetStreamPriorityRange, cuDeviceCanAccessPeer,
 * cuProfilerStart/Stop, cuFuncSetAttribute,
 * cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
 * cuOccupancyAvailableDynamicSMemPerBlock, cuEventElapsedTime_v2,
 * cuStreamQuery, cuEventQuery, cuMemPoolTrimTo, cuMemGetAddressRange_v2.
 *
 * CU_CALL: one Driver API call of include/cuda_calls.list's "remote"
 * kind, generated on both sides from the list and cuda.h's prototype.
 * call is the list's number for it; hash is the list's (VCU_CALLS_HASH),
 * and a host built from another list answers VCU_S_EVERSION rather than
 * read the arguments by its own layout.  The arguments follow, laid out
 * by the generated struct vcu_call_<name>_req (build/.../vcu_calls.h):
 * one le64 slot per handle, device and scalar argument in the
 * prototype's order, then each struct argument's bytes, padded to 8;
 * the payload is exactly that long.  The reply is a vcu_cu_resp and
 * the call's results (struct vcu_call_<name>_resp): a slot per scalar
 * result, then each struct result's bytes.  Handles are the session's
 * handles of the header's device; unknown call numbers get
 * VCU_S_ENOTSUP, a payload of the wrong length or a slot its C type
 * cannot hold VCU_S_EINVAL.
 */
struct vcu_cu_call_req {
    struct vcu_cu_hdr hdr;
    vcu_le32 call;                  /* VCU_CALL_* */
    vcu_le32 hash;                  /* VCU_CALLS_HASH */
};

/* ---- size asserts ------------------------------------------------------- */
VCU_PROTO_ASSERT(sizeof(struct vcu_req_hdr) == 32, "vcu_req_hdr");
VCU_PROTO_ASSERT(sizeof(struct vcu_seg) == 16, "vcu_seg");
VCU_PROTO_ASSERT(sizeof(struct vcu_range) == 16, "vcu_range");
VCU_PROTO_ASSERT(sizeof(struct vcu_resp_hdr) == 24, "vcu_resp_hdr");
VCU_PROTO_ASSERT(sizeof(struct vcu_none) == 0, "vcu_none");
VCU_PROTO_ASSERT(sizeof(struct vcu_session_open_req) == 32, "vcu_session_open_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_session_open_resp) == 40, "vcu_session_open_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_echo_req) == 16, "vcu_echo_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_echo_resp) == 32, "vcu_echo_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_hdr) == 8, "vcu_cu_hdr");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_resp) == 8, "vcu_cu_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_u64_req) == 16, "vcu_cu_u64_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_pair_req) == 32, "vcu_cu_pair_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_u64_resp) == 16, "vcu_cu_u64_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_driver_info_resp) == 16, "vcu_cu_driver_info_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_device_info_resp) == 8 + 256 + 16 + 8 + 8 + 4 * VCU_CU_NUM_DEV_ATTRS,
                 "vcu_cu_device_info_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_mem_info_resp) == 24, "vcu_cu_mem_info_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_slice_session) == 32, "vcu_cu_slice_session");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_slice_info_resp) == 88 + 32 * VCU_SLICE_MAX_SESSIONS,
                 "vcu_cu_slice_info_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_nvlink) == 8, "vcu_cu_nvlink");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_nvlink_info_resp) == 16 + 8 * VCU_NVLINK_MAX,
                 "vcu_cu_nvlink_info_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_output_resp) == 16, "vcu_cu_output_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_limit_req) == 24, "vcu_cu_limit_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_mem_alloc_req) == 32, "vcu_cu_mem_alloc_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memcpy_req) == 48, "vcu_cu_memcpy_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memcpy_peer_req) == 56, "vcu_cu_memcpy_peer_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memops_req) == 24, "vcu_cu_memops_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memop) == 24, "vcu_cu_memop");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memset_req) == 64, "vcu_cu_memset_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memcpy2d_req) == 72, "vcu_cu_memcpy2d_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_mem_range_resp) == 24, "vcu_cu_mem_range_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_global_info_resp) == 48, "vcu_cu_global_info_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_ipc_handle) == 64, "vcu_cu_ipc_handle");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_ipc_handle_resp) == 72, "vcu_cu_ipc_handle_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_ipc_open_req) == 80, "vcu_cu_ipc_open_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_attr_req) == 32, "vcu_cu_attr_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_pool_create_req) == 32, "vcu_cu_pool_create_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_mem_prop) == 24, "vcu_cu_mem_prop");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_mem_access) == 16, "vcu_cu_mem_access");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_vmm_req) == 336, "vcu_cu_vmm_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_vmm_resp) == 48, "vcu_cu_vmm_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_ipc_import_resp) == 32, "vcu_cu_ipc_import_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_pool_ptr_req) == 80, "vcu_cu_pool_ptr_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_array_req) == 48, "vcu_cu_array_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_mipmap_req) == 56, "vcu_cu_mipmap_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memcpy3d_side) == 56, "vcu_cu_memcpy3d_side");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_memcpy3d_req) == 160, "vcu_cu_memcpy3d_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_res_desc) == 64, "vcu_cu_res_desc");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_tex_desc) == 56, "vcu_cu_tex_desc");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_view_desc) == 48, "vcu_cu_view_desc");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_texobj_req) == 184, "vcu_cu_texobj_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_texobj_resp) == 184, "vcu_cu_texobj_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_module_load_req) == 16, "vcu_cu_module_load_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_module_hash_req) == 48, "vcu_cu_module_hash_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_module_keep_resp) == 48, "vcu_cu_module_keep_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_name_req) == 24, "vcu_cu_name_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_param) == 8, "vcu_cu_param");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_function_resp) == 24, "vcu_cu_function_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_func_attrs_resp) == 8 + 4 * VCU_CU_NUM_FUNC_ATTRS,
                 "vcu_cu_func_attrs_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_occupancy_req) == 32, "vcu_cu_occupancy_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_occupancy_resp) == 16, "vcu_cu_occupancy_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_launch_req) == 64, "vcu_cu_launch_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_batch_req) == 16, "vcu_cu_batch_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_batch_entry) == 8, "vcu_cu_batch_entry");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_launch_attr) == 32, "vcu_cu_launch_attr");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_launch_ex_req) == 72, "vcu_cu_launch_ex_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_tmap_req) == 320, "vcu_cu_tmap_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_tmap_resp) == 136, "vcu_cu_tmap_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_stream_create_req) == 16, "vcu_cu_stream_create_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_link_input) == 16, "vcu_cu_link_input");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_link_req) == 16 + 16 * VCU_CU_MAX_LINK_OPTS,
                 "vcu_cu_link_req");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_link_resp) == 16 + VCU_CU_LINK_LOG, "vcu_cu_link_resp");
VCU_PROTO_ASSERT(sizeof(struct vcu_cu_call_req) == 16, "vcu_cu_call_req");

/* The opcodes a CU_BATCH may hold: async, segment-free, never waiting. */
static inline int vcu_batch_op_ok(vcu_le32 op)
{
    switch (op) {
    case VCU_OP_CU_LAUNCH:
    case VCU_OP_CU_MEMSET:
    case VCU_OP_CU_MEM_FREE_ASYNC:
    case VCU_OP_CU_STREAM_WAIT_EVENT:
    case VCU_OP_CU_EVENT_RECORD:
    case VCU_OP_CU_GRAPH_LAUNCH:
        return 1;
    }
    return 0;
}

#endif /* VCU_PROTO_H */
