/*
 * The device's check of a request stream (include/vcu_proto.h) as the
 * guest put it on the virtqueue: header, payload length, segment table,
 * range list.  Plain C with no QEMU in it, so that the fuzz target
 * (tests/fuzz/fuzz_device.c) runs exactly what QEMU runs; virtio-cuda.c
 * then maps each range it accepted.
 */
#ifndef VCU_REQCHECK_H
#define VCU_REQCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "vcu_proto.h"

/* The largest request stream the protocol allows. */
#define VCU_REQ_MAX_STREAM                                        \
    (sizeof(struct vcu_req_hdr) + VCU_MAX_PAYLOAD +               \
     VCU_MAX_SEGS * sizeof(struct vcu_seg) +                      \
     (size_t)VCU_MAX_RANGES * sizeof(struct vcu_range))

typedef struct vcu_req_layout_s {
    uint32_t opcode;
    uint32_t payload_len;
    uint64_t session;
    uint64_t req_id;
    unsigned int nsegs;
    size_t seg_off;                 /* where the segment table starts */
    size_t range_off;               /* where the range list starts: the header,
                                       payload and table are range_off bytes */
    uint64_t nranges;               /* all segments' */
    uint64_t xfer;                  /* all segments' bytes */
    struct {
        uint64_t len;
        uint32_t nranges;
        uint32_t flags;
    } seg[VCU_MAX_SEGS];
} vcu_req_layout_t;

/*
 * Checks the stream's header, payload and segment table, and that the
 * range list is exactly as long as the table says.  Fills l (req_id as
 * soon as the header is there, for the error reply).  VCU_S_OK, or the
 * status to reply with and why (a static string).
 */
uint32_t vcu_req_check(const uint8_t *buf, size_t len, vcu_req_layout_t *l, const char **why);

/*
 * Walks the ranges of segment i (ranges first..first+n), checking each:
 * nonzero, within the protocol's limit, not wrapping the address space,
 * and all of them exactly the segment's length.  For each good range
 * cb(opaque, k, gpa, len) is called (k: its index in the whole list); a
 * nonzero return from cb stops the walk and is returned.  VCU_S_OK, or the
 * status and why.
 */
uint32_t vcu_req_ranges(const uint8_t *buf, const vcu_req_layout_t *l, unsigned int i,
                        uint64_t first,
                        uint32_t (*cb)(void *opaque, uint64_t k, uint64_t gpa, uint64_t len,
                                       const char **why),
                        void *opaque, const char **why);

#endif /* VCU_REQCHECK_H */
