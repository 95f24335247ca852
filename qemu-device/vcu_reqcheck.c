/*
 * The device's check of a request stream (vcu_reqcheck.h).  Every count
 * and length comes from the guest: each is bounded before it is used in
 * an offset, and sums are kept in 64 bits below their bounds.
 */
#include <string.h>

#include "vcu_reqcheck.h"

#ifndef VCU_SEG_DIR
#define VCU_SEG_DIR(flags) ((flags) & (VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE))
#endif

/* Little-endian loads from the guest's bytes (any alignment). */
static uint16_t vcu__ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t vcu__ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t vcu__ld64(const uint8_t *p)
{
    return (uint64_t)vcu__ld32(p) | (uint64_t)vcu__ld32(p + 4) << 32;
}

uint32_t vcu_req_check(const uint8_t *buf, size_t len, vcu_req_layout_t *l, const char **why)
{
    unsigned int i;

    memset(l, 0, sizeof(*l));
    if (len < sizeof(struct vcu_req_hdr)) {
        *why = "request shorter than its header";
        return VCU_S_EINVAL;
    }
    l->opcode = vcu__ld32(buf + offsetof(struct vcu_req_hdr, opcode));
    l->session = vcu__ld64(buf + offsetof(struct vcu_req_hdr, session));
    l->req_id = vcu__ld64(buf + offsetof(struct vcu_req_hdr, req_id));
    l->payload_len = vcu__ld32(buf + offsetof(struct vcu_req_hdr, payload_len));
    l->nsegs = vcu__ld16(buf + offsetof(struct vcu_req_hdr, nsegs));
    if (len > VCU_REQ_MAX_STREAM) {
        *why = "request stream longer than the protocol allows";
        return VCU_S_E2BIG;
    }
    if (l->payload_len > VCU_MAX_PAYLOAD) {
        *why = "payload too long";
        return VCU_S_E2BIG;
    }
    if (l->nsegs > VCU_MAX_SEGS) {
        *why = "too many segments";
        return VCU_S_E2BIG;
    }
    /* Both bounded above: no overflow. */
    l->seg_off = sizeof(struct vcu_req_hdr) + ((l->payload_len + 7u) & ~7u);
    l->range_off = l->seg_off + l->nsegs * sizeof(struct vcu_seg);
    if (len < l->range_off) {
        *why = "request shorter than its payload and segment table";
        return VCU_S_EINVAL;
    }
    for (i = 0; i < l->nsegs; i++) {
        const uint8_t *p = buf + l->seg_off + i * sizeof(struct vcu_seg);
        uint64_t slen = vcu__ld64(p + offsetof(struct vcu_seg, len));
        uint32_t n = vcu__ld32(p + offsetof(struct vcu_seg, nranges));
        uint32_t flags = vcu__ld32(p + offsetof(struct vcu_seg, flags));

        if ((VCU_SEG_DIR(flags) != VCU_SEG_TO_DEVICE &&
             VCU_SEG_DIR(flags) != VCU_SEG_FROM_DEVICE) ||
            (flags & ~(VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE | VCU_SEG_F_STABLE))) {
            *why = "segment flags must be exactly one direction (and STABLE)";
            return VCU_S_EINVAL;
        }
        if (slen > VCU_MAX_XFER || n > VCU_MAX_RANGES) {
            *why = "segment too large";
            return VCU_S_E2BIG;
        }
        l->nranges += n;
        l->xfer += slen;
        if (l->nranges > VCU_MAX_RANGES || l->xfer > VCU_MAX_XFER) {
            *why = "too many ranges or bytes in the request";
            return VCU_S_E2BIG;
        }
        l->seg[i].len = slen;
        l->seg[i].nranges = n;
        l->seg[i].flags = flags;
    }
    /* nranges <= VCU_MAX_RANGES: no overflow. */
    if (len != l->range_off + l->nranges * sizeof(struct vcu_range)) {
        *why = "range list length does not match the segment table";
        return VCU_S_EINVAL;
    }
    return VCU_S_OK;
}

uint32_t vcu_req_ranges(const uint8_t *buf, const vcu_req_layout_t *l, unsigned int i,
                        uint64_t first,
                        uint32_t (*cb)(void *opaque, uint64_t k, uint64_t gpa, uint64_t len,
                                       const char **why),
                        void *opaque, const char **why)
{
    uint64_t sum = 0, k;
    uint32_t j;

    if (i >= l->nsegs || first > l->nranges || l->seg[i].nranges > l->nranges - first) {
        *why = "segment out of the table";
        return VCU_S_EINVAL;
    }
    for (j = 0, k = first; j < l->seg[i].nranges; j++, k++) {
        const uint8_t *p = buf + l->range_off + k * sizeof(struct vcu_range);
        uint64_t gpa = vcu__ld64(p + offsetof(struct vcu_range, gpa));
        uint64_t len = vcu__ld64(p + offsetof(struct vcu_range, len));
        uint32_t st;

        if (len == 0 || len > VCU_MAX_XFER) {
            *why = "range length is 0 or too large";
            return VCU_S_EINVAL;
        }
        if (gpa + len < gpa) {
            *why = "range wraps around the address space";
            return VCU_S_EFAULT;
        }
        sum += len;                 /* <= 2^18 * 2^30: no overflow */
        if (sum > l->seg[i].len) {
            *why = "ranges longer than their segment";
            return VCU_S_EINVAL;
        }
        st = cb(opaque, k, gpa, len, why);
        if (st != VCU_S_OK)
            return st;
    }
    if (sum != l->seg[i].len) {
        *why = "ranges shorter than their segment";
        return VCU_S_EINVAL;
    }
    return VCU_S_OK;
}
