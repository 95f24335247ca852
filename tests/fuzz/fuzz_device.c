/*
 * libFuzzer target for the QEMU device's check of a request stream
 * (qemu-device/vcu_reqcheck.c): the code virtio-cuda.c runs on every
 * virtqueue element, built here as it is, without QEMU.
 *
 * An input is the request stream exactly as a guest puts it on the
 * virtqueue (header, payload, segment table, range list), copied into a
 * buffer of its own length so that AddressSanitizer sees any read past
 * it.  The target runs what virtio_cuda_handle_req() runs: vcu_req_check(),
 * then vcu_req_ranges() for each segment in order, and checks what the
 * device relies on before it maps anything:
 *   - an accepted layout lies within the stream and the protocol's limits
 *     (header, payload, table and ranges; counts and sums), and says what
 *     the stream's bytes say (decoded here again, independently);
 *   - each accepted segment's flags are one direction, maybe STABLE;
 *   - the ranges handed to the callback are the segment's own, in order,
 *     each nonzero, within VCU_MAX_XFER and not wrapping, and those of a
 *     segment accepted whole sum to exactly its length;
 *   - a refusal says why, with one of the protocol's statuses;
 *   - a callback's refusal stops the walk and is what the walk returns.
 * Any break of these aborts (a crash libFuzzer keeps).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vcu_reqcheck.h"

#define FZ_CHECK(c)                                                               \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_device: %s:%d: check failed: %s\n", __FILE__,   \
                    __LINE__, #c);                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

static uint64_t fz_ld(const uint8_t *p, unsigned int n)
{
    uint64_t v = 0;

    while (n-- > 0)
        v = v << 8 | p[n];
    return v;
}

/* What the walk's callback saw, and when it is to refuse (a mapping that
 * fails, as virtio_cuda_map_one() does for memory that is not RAM). */
typedef struct {
    const uint8_t *buf;
    size_t len;
    const vcu_req_layout_t *l;
    uint64_t next;                  /* the index the next range must have */
    uint64_t sum;                   /* bytes of this segment's ranges so far */
    uint64_t refuse_at;             /* the call that refuses; UINT64_MAX: none */
    uint64_t calls;
    int refused;
} fz_walk_t;

static uint32_t fz_range(void *opaque, uint64_t k, uint64_t gpa, uint64_t len, const char **why)
{
    fz_walk_t *w = opaque;
    size_t at = w->l->range_off + (size_t)k * sizeof(struct vcu_range);

    FZ_CHECK(!w->refused);          /* a refusal ends the walk */
    FZ_CHECK(k == w->next);
    FZ_CHECK(k < w->l->nranges);
    FZ_CHECK(at + sizeof(struct vcu_range) <= w->len);
    FZ_CHECK(gpa == fz_ld(w->buf + at + offsetof(struct vcu_range, gpa), 8));
    FZ_CHECK(len == fz_ld(w->buf + at + offsetof(struct vcu_range, len), 8));
    FZ_CHECK(len != 0 && len <= VCU_MAX_XFER && gpa + len >= gpa);
    w->next++;
    w->sum += len;
    if (w->calls++ == w->refuse_at) {
        w->refused = 1;
        *why = "refused by the fuzz target";
        return VCU_S_EFAULT;
    }
    return VCU_S_OK;
}

static int fz_status_ok(uint32_t st)
{
    return st == VCU_S_EINVAL || st == VCU_S_E2BIG || st == VCU_S_EFAULT;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vcu_req_layout_t l;
    fz_walk_t w;
    const char *why = NULL;
    uint8_t *buf;
    uint32_t st;
    uint64_t nranges = 0, xfer = 0, k;
    unsigned int i;

    /* A stream the device accepts is a multiple of 8 bytes long: an input
     * of 8n+1 bytes (past a header) is such a stream and a last byte that
     * picks the callback call that refuses (0xff: none). */
    memset(&w, 0, sizeof(w));
    w.refuse_at = UINT64_MAX;
    if (size > sizeof(struct vcu_req_hdr) && (size & 7) == 1) {
        if (data[size - 1] != 0xff)
            w.refuse_at = data[size - 1];
        size--;
    }
    buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    st = vcu_req_check(buf, size, &l, &why);
    if (st != VCU_S_OK) {
        FZ_CHECK(fz_status_ok(st) && why != NULL);
        if (size >= sizeof(struct vcu_req_hdr))
            FZ_CHECK(l.req_id == fz_ld(buf + offsetof(struct vcu_req_hdr, req_id), 8));
        free(buf);
        return 0;
    }

    /* The layout, against the bytes and the protocol's limits. */
    FZ_CHECK(size >= sizeof(struct vcu_req_hdr) && size <= VCU_REQ_MAX_STREAM);
    FZ_CHECK(l.opcode == fz_ld(buf + offsetof(struct vcu_req_hdr, opcode), 4));
    FZ_CHECK(l.session == fz_ld(buf + offsetof(struct vcu_req_hdr, session), 8));
    FZ_CHECK(l.req_id == fz_ld(buf + offsetof(struct vcu_req_hdr, req_id), 8));
    FZ_CHECK(l.payload_len == fz_ld(buf + offsetof(struct vcu_req_hdr, payload_len), 4));
    FZ_CHECK(l.nsegs == fz_ld(buf + offsetof(struct vcu_req_hdr, nsegs), 2));
    FZ_CHECK(l.payload_len <= VCU_MAX_PAYLOAD && l.nsegs <= VCU_MAX_SEGS);
    FZ_CHECK(l.seg_off == sizeof(struct vcu_req_hdr) + ((l.payload_len + 7u) & ~7u));
    FZ_CHECK(l.range_off == l.seg_off + l.nsegs * sizeof(struct vcu_seg));
    FZ_CHECK(l.range_off <= size);
    for (i = 0; i < l.nsegs; i++) {
        const uint8_t *p = buf + l.seg_off + i * sizeof(struct vcu_seg);
        uint32_t dir = l.seg[i].flags & (VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE);

        FZ_CHECK(l.seg[i].len == fz_ld(p + offsetof(struct vcu_seg, len), 8));
        FZ_CHECK(l.seg[i].nranges == fz_ld(p + offsetof(struct vcu_seg, nranges), 4));
        FZ_CHECK(l.seg[i].flags == fz_ld(p + offsetof(struct vcu_seg, flags), 4));
        FZ_CHECK(dir == VCU_SEG_TO_DEVICE || dir == VCU_SEG_FROM_DEVICE);
        FZ_CHECK((l.seg[i].flags & ~(VCU_SEG_TO_DEVICE | VCU_SEG_FROM_DEVICE |
                                     VCU_SEG_F_STABLE)) == 0);
        nranges += l.seg[i].nranges;
        xfer += l.seg[i].len;
    }
    FZ_CHECK(nranges == l.nranges && nranges <= VCU_MAX_RANGES);
    FZ_CHECK(xfer == l.xfer && xfer <= VCU_MAX_XFER);
    FZ_CHECK(size == l.range_off + l.nranges * sizeof(struct vcu_range));

    /* The ranges, segment by segment, as the device maps them. */
    w.buf = buf;
    w.len = size;
    w.l = &l;
    for (i = 0, k = 0; i < l.nsegs; i++) {
        w.next = k;
        w.sum = 0;
        why = NULL;
        st = vcu_req_ranges(buf, &l, i, k, fz_range, &w, &why);
        if (st != VCU_S_OK) {
            FZ_CHECK(fz_status_ok(st) && why != NULL);
            /* The callback's own status comes back. */
            if (w.refused)
                FZ_CHECK(st == VCU_S_EFAULT);
            /* Only ranges within the segment's length reach the callback. */
            FZ_CHECK(w.sum <= l.seg[i].len);
            break;
        }
        FZ_CHECK(w.next == k + l.seg[i].nranges);
        FZ_CHECK(w.sum == l.seg[i].len);
        k += l.seg[i].nranges;
    }
    if (i == l.nsegs)
        FZ_CHECK(k == l.nranges);

    /* A caller that names a segment out of the table is refused. */
    why = NULL;
    w.refused = 0;
    FZ_CHECK(vcu_req_ranges(buf, &l, l.nsegs, 0, fz_range, &w, &why) == VCU_S_EINVAL &&
             why != NULL);
    if (l.nsegs > 0) {
        why = NULL;
        FZ_CHECK(vcu_req_ranges(buf, &l, 0, l.nranges + 1, fz_range, &w, &why) ==
                     VCU_S_EINVAL &&
                 why != NULL);
    }
    free(buf);
    return 0;
}
