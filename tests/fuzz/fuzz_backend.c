/*
 * libFuzzer target for the host backend (host-backend/): a hostile guest's
 * requests, run against the CPU stand-in for libcuda (tests/fakecuda).
 *
 * One backend per process (devices "0,1"), one session with CUDA|ECHO|ASYNC
 * and a few handles made by well-formed setup calls (a buffer, a stream, an
 * event, a module and its function, a graph, the default pool).  Each input
 * is a short sequence of requests:
 *
 *   u8 op        index into the VCU_OP_MAP list
 *   u8 flags     F_* below
 *   u8 plen      payload bytes taken from the input
 *   u8 segs      bits 0-1: number of segments (0-3); 2-7: patches (0-3) ...
 *   per patch    u8 slot (u64 index in the payload), u8 handle index
 *   per segment  u8 dirflags, u16 offset, u16 len, u8 split
 *   payload      plen bytes (zero padded up to the opcode's struct unless F_SHORT)
 *
 * Segments point into a buffer the harness owns, never outside it.  An
 * ECHO's delay is cut to 0 or 1 ms unless it is out of range, so that
 * delays are exercised without each costing a timeout.  The session and
 * its timeouts: fz_session.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fz_session.h"

/* The opcodes and their request structs. */
typedef struct {
    uint32_t op;
    uint32_t size;
} fz_op_t;
#define FZ_OP_(name, num, req, resp) {num, (uint32_t)sizeof(struct req)},
static const fz_op_t fz_ops[] = {VCU_OP_MAP(FZ_OP_)};
#undef FZ_OP_
#define FZ_NOPS (sizeof(fz_ops) / sizeof(fz_ops[0]))

/* Request flag bits from the input. */
#define F_ASYNC 0x01        /* VCU_REQ_F_ASYNC */
#define F_RAWFLAGS 0x02     /* header flags = next input byte (garbage) */
#define F_BADSESS 0x04      /* a session id other than ours */
#define F_PLEN_LIE 0x08     /* header payload_len = next input u16 */
#define F_SHORT 0x10        /* do not pad the payload up to the struct */
#define F_SEG_LIE 0x20      /* wire segment table differs (len/flags/nranges) */
#define F_NSEG_LIE 0x40     /* header nsegs off by one */
#define F_TRUNC 0x80        /* req_len short by the next input byte */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_session_init();
    return 0;
}

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in_t;

static uint8_t in_u8(fz_in_t *in)
{
    uint8_t v = 0;

    if (in->n) {
        v = *in->p++;
        in->n--;
    }
    return v;
}

static uint16_t in_u16(fz_in_t *in)
{
    uint16_t lo = in_u8(in);

    return (uint16_t)(lo | (in_u8(in) << 8));
}

/* Builds request i from the input; 0 if the input is used up. */
static int fz_build(fz_req_t *t, fz_in_t *in)
{
    struct vcu_req_hdr *h = (struct vcu_req_hdr *)t->reqbuf;
    unsigned char *pl = (unsigned char *)(h + 1);
    const fz_op_t *op;
    uint8_t fl, plen, sb, rawflags = 0, trunc = 0;
    uint16_t plen_lie = 0;
    unsigned int nseg, npatch, i, j, len, padded;
    struct {
        uint8_t slot, idx;
    } patch[3];
    struct {
        uint8_t dir, split;
        uint16_t off, len;
    } sg[3];
    struct vcu_seg *w;

    if (in->n < 4)
        return 0;
    op = &fz_ops[in_u8(in) % FZ_NOPS];
    fl = in_u8(in);
    plen = in_u8(in);
    sb = in_u8(in);
    if (fl & F_RAWFLAGS)
        rawflags = in_u8(in);
    if (fl & F_PLEN_LIE)
        plen_lie = in_u16(in);
    if (fl & F_TRUNC)
        trunc = in_u8(in);
    nseg = sb & 3;
    npatch = (sb >> 2) & 3;
    for (i = 0; i < npatch; i++) {
        patch[i].slot = in_u8(in);
        patch[i].idx = in_u8(in);
    }
    for (i = 0; i < nseg; i++) {
        sg[i].dir = in_u8(in);
        sg[i].off = in_u16(in);
        sg[i].len = in_u16(in);
        sg[i].split = in_u8(in);
    }

    memset(t->reqbuf, 0, sizeof(t->reqbuf));
    len = plen < in->n ? plen : (unsigned int)in->n;
    memcpy(pl, in->p, len);
    in->p += len;
    in->n -= len;
    if (!(fl & F_SHORT) && len < op->size)
        len = op->size;
    for (i = 0; i < npatch; i++) {
        unsigned int slot = patch[i].slot % 16;

        if (slot * 8 + 8 <= len)
            memcpy(pl + slot * 8, &fz_handles[patch[i].idx % 16], 8);
    }
    /* An ECHO's delay: 0 or 1 ms, or out of range (rejected). */
    if (op->op == VCU_OP_ECHO && len >= sizeof(struct vcu_echo_req)) {
        struct vcu_echo_req er;

        memcpy(&er, pl, sizeof(er));
        if (er.delay_ms <= 10000) {
            er.delay_ms &= 1;
            memcpy(pl, &er, sizeof(er));
        }
    }
    h->opcode = op->op;
    h->flags = (fl & F_RAWFLAGS) ? rawflags : ((fl & F_ASYNC) ? VCU_REQ_F_ASYNC : 0);
    h->session = (fl & F_BADSESS) ? fz_sess + 1 + (sb >> 4) : fz_sess;
    h->req_id = 7;
    h->payload_len = (fl & F_PLEN_LIE) ? plen_lie : len;
    padded = (h->payload_len <= VCU_MAX_PAYLOAD) ? ((h->payload_len + 7) & ~7u) : ((len + 7) & ~7u);
    h->nsegs = (uint16_t)nseg;
    if (fl & F_NSEG_LIE)
        h->nsegs = (uint16_t)(nseg + 1);
    w = (struct vcu_seg *)(pl + padded);
    for (i = 0; i < nseg; i++) {
        unsigned int off = sg[i].off % FZ_DATA;
        unsigned int l = sg[i].len;
        unsigned int niov = (sg[i].split & 3) + 1, done = 0;
        uint32_t dflags = sg[i].dir & 0x7;

        if (l > FZ_DATA - off)
            l = FZ_DATA - off;
        if (!(sg[i].dir & 0x80) && (dflags & 3) != VCU_SEG_TO_DEVICE)
            dflags = (dflags & VCU_SEG_F_STABLE) | (sg[i].dir & 0x40 ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE);
        if (l == 0)
            niov = sg[i].split & 4 ? 1 : 0;
        for (j = 0; j < niov; j++) {
            unsigned int part = (j + 1 == niov) ? l - done : (l - done) / (2 + ((sg[i].split >> (2 + j * 2)) & 3));

            t->iov[i][j].iov_base = fz_data + off + done;
            t->iov[i][j].iov_len = part;
            done += part;
        }
        t->segs[i].iov = t->iov[i];
        t->segs[i].iovcnt = niov;
        t->segs[i].len = l;
        t->segs[i].flags = dflags;
        if ((char *)(w + i + 1) <= (char *)t->reqbuf + sizeof(t->reqbuf)) {
            w[i].len = l;
            w[i].nranges = 1;
            w[i].flags = dflags;
            if ((fl & F_SEG_LIE) && i == 0) {
                w[i].len = l + (sg[i].split >> 4) - 8;
                w[i].nranges = sg[i].split;
                w[i].flags = sg[i].dir;
            }
        }
    }
    t->r.req = t->reqbuf;
    t->r.req_len = sizeof(*h) + padded + nseg * sizeof(struct vcu_seg);
    if (t->r.req_len > sizeof(t->reqbuf))
        t->r.req_len = sizeof(t->reqbuf);
    if (t->r.req_len >= trunc)
        t->r.req_len -= trunc;
    t->r.segs = nseg ? t->segs : NULL;
    t->r.nsegs = nseg;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size)
{
    fz_in_t in = {buf, size};
    unsigned int i;

    fz_session_begin();
    for (i = 0; i < FZ_MAX_REQS; i++) {
        fz_req_t *t = &fz_reqs[i];
        struct vcu_req_hdr *h = (struct vcu_req_hdr *)t->reqbuf;

        if (!fz_build(t, &in))
            break;
        if (fz_debug) {
            const struct vcu_seg *w = (const void *)((const char *)(h + 1) + ((h->payload_len + 7) & ~7u));
            unsigned int k;

            fprintf(stderr, "fuzz: op 0x%04x flags 0x%x plen %u nsegs %u req_len %zu:", h->opcode,
                    h->flags, h->payload_len, h->nsegs, t->r.req_len);
            for (k = 0; k < t->r.nsegs && h->payload_len <= VCU_MAX_PAYLOAD; k++)
                fprintf(stderr, " [%llu/%u/0x%x iov %u]", (unsigned long long)w[k].len, w[k].nranges,
                        w[k].flags, t->segs[k].iovcnt);
            for (k = 0; k < h->payload_len && k < 64 && h->payload_len <= VCU_MAX_PAYLOAD; k += 8) {
                uint64_t v;

                memcpy(&v, (const char *)(h + 1) + k, 8);
                fprintf(stderr, " %llx", (unsigned long long)v);
            }
            fprintf(stderr, "\n");
        }
        if (fz_run(t) != 0) {
            if (fz_debug)
                fprintf(stderr, "fuzz:   timed out: backend reset\n");
            break;
        }
        if (fz_debug)
            fprintf(stderr, "fuzz:   status %u result %u\n", fz_status(t),
                    t->r.resp_len >= 32 ? *(uint32_t *)fz_resp(t) : 0);
        fz_after(t);
    }
    return 0;
}
