/*
 * The link between the QEMU device's proxy (proxy.c) and a session's
 * worker process (worker.c): one stream socket per session, frames of a
 * fixed header and a body.  Both ends are on one host and built from one
 * tree, so fields are host-endian; every length is still checked by the
 * side that reads it (a worker runs guest-chosen CUDA work and is not
 * trusted by QEMU either).
 *
 *   proxy -> worker
 *     VCU_IPC_REGION  body struct vcu_ipc_region, with one file descriptor
 *                     (SCM_RIGHTS): a shared guest RAM block the worker
 *                     maps; ranges name it by id.
 *     VCU_IPC_REQ     body struct vcu_ipc_req, the request bytes (header,
 *                     payload, segment table: as on the virtqueue, without
 *                     the guest-physical range list), zero padded to 8,
 *                     then struct vcu_ipc_range[nranges] in segment order.
 *   worker -> proxy
 *     VCU_IPC_HELLO   body struct vcu_ipc_hello, once, before anything else.
 *     VCU_IPC_RESP    body: the reply (struct vcu_resp_hdr and payload) to
 *                     the VCU_IPC_REQ of the same tag.
 *
 * A worker serves exactly one guest session and exits when the socket
 * closes.  The proxy never waits for a worker on QEMU's main loop.
 */
#ifndef VCU_IPC_H
#define VCU_IPC_H

#include <stdint.h>

#include "vcu_proto.h"

#define VCU_IPC_VERSION 1u

enum {
    VCU_IPC_REGION = 1,
    VCU_IPC_REQ = 2,
    VCU_IPC_HELLO = 3,
    VCU_IPC_RESP = 4,
};

struct vcu_ipc_hdr {
    uint32_t type;                  /* VCU_IPC_* */
    uint32_t len;                   /* body bytes after this header */
    uint64_t tag;                   /* VCU_IPC_REQ/RESP: the proxy's request tag */
};

struct vcu_ipc_region {
    uint32_t id;                    /* names the region in vcu_ipc_range */
    uint32_t reserved;
    uint64_t size;                  /* bytes of the file the worker maps */
};

struct vcu_ipc_req {
    uint32_t req_len;               /* request bytes that follow */
    uint32_t nranges;               /* struct vcu_ipc_range after them */
    uint64_t resp_cap;              /* reply bytes the transport can take */
};

/* One guest-physical range of a data segment, as an offset into a region. */
struct vcu_ipc_range {
    uint32_t region;
    uint32_t reserved;
    uint64_t off;
    uint64_t len;
};

struct vcu_ipc_hello {
    uint32_t version;               /* VCU_IPC_VERSION */
    uint32_t pid;
    char cuda_error[240];           /* "" when CUDA is available, else why not */
};

/* A body larger than this is a broken peer: the reader closes the link. */
#define VCU_IPC_MAX_BODY                                                     \
    ((uint64_t)sizeof(struct vcu_ipc_req) + sizeof(struct vcu_req_hdr) +     \
     VCU_MAX_PAYLOAD + 8 + VCU_MAX_SEGS * sizeof(struct vcu_seg) +           \
     (uint64_t)VCU_MAX_RANGES * sizeof(struct vcu_ipc_range))

/* Most regions one worker maps (guest RAM blocks: main RAM, DIMMs). */
#define VCU_IPC_MAX_REGIONS 64u

_Static_assert(sizeof(struct vcu_ipc_hdr) == 16, "vcu_ipc_hdr");
_Static_assert(sizeof(struct vcu_ipc_region) == 16, "vcu_ipc_region");
_Static_assert(sizeof(struct vcu_ipc_req) == 16, "vcu_ipc_req");
_Static_assert(sizeof(struct vcu_ipc_range) == 24, "vcu_ipc_range");
_Static_assert(sizeof(struct vcu_ipc_hello) == 248, "vcu_ipc_hello");

#endif /* VCU_IPC_H */
