/*
 * The link between the QEMU device's proxy (proxy*.c) and a session's
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
 *     VCU_IPC_STATE   body struct vcu_ipc_state, with one file descriptor:
 *                     migration (docs/design.md, "Live migration"): the
 *                     worker's session saves its state into it or loads
 *                     one from it (vcu_backend_submit_state()), after
 *                     every request before it.  Always on the socket, its
 *                     place in the ring's order marked by a VCU_IPC_SOCK
 *                     entry; answered by the VCU_IPC_RESP of its tag
 *                     (status, then a one-line reason).
 *   worker -> proxy
 *     VCU_IPC_HELLO   body struct vcu_ipc_hello, once, before anything else.
 *     VCU_IPC_RESP    body: the reply (struct vcu_resp_hdr and payload) to
 *                     the VCU_IPC_REQ of the same tag.
 *
 * A worker serves exactly one guest session and exits when the socket
 * closes.  The proxy never waits for a worker on QEMU's main loop.
 *
 * The hot path: shared-memory rings.  A session's worker also gets a
 * shared area (a memfd, struct vcu_ipc_shm) holding two single-producer,
 * single-consumer byte rings: requests (proxy -> worker) and replies
 * (worker -> proxy), and a doorbell per ring (a socket pair: a byte on
 * it wakes the ring's consumer).
 * Each ring entry is one frame as above, starting 8-aligned.  On the
 * rings travel VCU_IPC_REQ (requests) and VCU_IPC_RESP (replies); on the
 * socket VCU_IPC_HELLO, VCU_IPC_REGION (they carry a file descriptor)
 * and requests too large for the ring: each of those has a VCU_IPC_SOCK
 * entry in the request ring at its place, so that the worker takes them
 * in order.  A request may name a region whose VCU_IPC_REGION is still
 * on its way: the worker reads the socket until it has it.  The socket
 * stays the session's liveness: either side seeing it close ends the
 * session.
 *
 * Ring protocol (positions are free-running byte counts; an entry at
 * position p lies at p % size, wrapping):
 *   producer: writes the frame, stores tail (release), full fence, and if
 *             the consumer's sleeping flag is set, rings its doorbell; it
 *             reads head (acquire) only when the head it saw last leaves
 *             too little room;
 *   consumer: reads tail (acquire), copies each whole frame out, stores
 *             head (release).  When idle past its spin time it sets
 *             sleeping, full fence, reads tail once more and only then
 *             blocks in poll() on its doorbell and the socket.
 * Each side checks what the other wrote: tail - head <= size, a head
 * that never goes back, a frame's length within the bytes published.  A
 * broken ring ends the session.
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
    VCU_IPC_SOCK = 5,               /* request ring: the next request is on the socket */
    VCU_IPC_STATE = 6,
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

struct vcu_ipc_state {
    uint32_t op;                    /* VCU_BACKEND_OP_SAVE, _LOAD, ... (vcu_backend.h) */
    uint32_t reserved;
    uint64_t session;               /* the worker's session id */
};

struct vcu_ipc_hello {
    uint32_t version;               /* VCU_IPC_VERSION */
    uint32_t pid;
    char cuda_error[240];           /* "" when CUDA is available, else why not */
};

/*
 * One ring's indices, each on a cache line of its own: the producer
 * writes tail on every frame, the consumer head on every frame, and the
 * producer reads sleeping after every frame, which the consumer writes
 * only when it goes to sleep.  Kept apart, a frame moves the tail's line
 * (and the frame's) from one core to the other, and nothing else: the
 * producer reads head only when its last look at it shows too little
 * room, and sleeping stays cached on both sides while nobody sleeps.
 */
struct vcu_ipc_ring_ctl {
    uint64_t tail;                  /* producer: bytes published */
    uint8_t pad0[56];
    uint64_t head;                  /* consumer: bytes consumed */
    uint8_t pad1[56];
    uint32_t sleeping;              /* consumer: blocked or about to, wake me */
    uint32_t reserved;
    uint8_t pad2[56];
};

/* The shared area: this header, then the request ring's bytes at
 * VCU_IPC_SHM_HDR, then the reply ring's. */
struct vcu_ipc_shm {
    uint64_t magic;                 /* VCU_IPC_SHM_MAGIC */
    uint32_t req_size;              /* request ring bytes, a power of two */
    uint32_t resp_size;             /* reply ring bytes, a power of two */
    uint8_t pad[48];
    struct vcu_ipc_ring_ctl req;
    struct vcu_ipc_ring_ctl resp;
};

#define VCU_IPC_SHM_MAGIC 0x32676e6972756376ull    /* "vcuring2" */
#define VCU_IPC_SHM_HDR 4096u
#define VCU_IPC_REQ_RING_DEFAULT (1u << 20)
#define VCU_IPC_REQ_RING_MIN 4096u
#define VCU_IPC_REQ_RING_MAX (64u << 20)
/* Holds the largest reply frame (VCU_IPC_MAX_RESP_BODY) several times. */
#define VCU_IPC_RESP_RING (256u << 10)

/* The largest reply body. */
#define VCU_IPC_MAX_RESP_BODY ((uint64_t)sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD)

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
_Static_assert(sizeof(struct vcu_ipc_ring_ctl) == 192, "vcu_ipc_ring_ctl");
_Static_assert(sizeof(struct vcu_ipc_shm) == 448, "vcu_ipc_shm");
_Static_assert(sizeof(struct vcu_ipc_shm) <= VCU_IPC_SHM_HDR, "vcu_ipc_shm header");
_Static_assert(VCU_IPC_MAX_RESP_BODY + sizeof(struct vcu_ipc_hdr) + 8 <= VCU_IPC_RESP_RING / 2,
               "a reply frame fits the reply ring");

#endif /* VCU_IPC_H */
