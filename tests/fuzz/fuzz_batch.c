/*
 * libFuzzer target for CU_BATCH in the host backend (host-backend/worker/
 * cuda.c, vcu__batch(), and the runs of launches it issues as one graph,
 * vcu__grun()): batches with well-formed framing and fuzzed entries, on the
 * session of fz_session.c (the CPU stand-in for libcuda).
 *
 * fuzz_backend's requests carry at most 255 payload bytes with handles in
 * their first 16 words: a batch of several entries with handles in each
 * hardly ever comes out of them (its one batch seed reached 9 of
 * vcu__batch()'s 46 edges, and never a run of launches).
 * Here the harness builds each entry from a template of its opcode with the
 * session's real handles (function, streams, event, buffer, graph exec),
 * and the input chooses the opcodes, streams and devices, the entries'
 * lengths and extra bytes, and lies: a count, lengths or a header that do
 * not match, opcodes a batch may not hold, bytes flipped anywhere.
 *
 * Input:
 *   u8 flags      B_* below
 *   [u8 count]    with B_COUNT_LIE: the header's count
 *   [u8 x 8]      with B_BAD_HDR: the batch header's device and reserved words
 *   [u8 trail]    with B_TRAIL: 1..64 bytes past the last entry
 *   per entry, until the input ends or 64 entries:
 *     u8 sel      bits 0-2: opcode (E_OPS below; 7: the next 4 bytes are one);
 *                 bits 3-4: stream (the session's, legacy, per-thread, a
 *                 second one); bit 5: device 1; bit 6: a length lie follows;
 *                 bit 7: a flip follows
 *     [u32 op]    for a raw opcode
 *     u8 extra    a launch's parameter bytes (extra % 65), else bytes past
 *                 the struct (extra % 16)
 *     [u8 lie]    the entry's len is off by it (bit 7: short, else long)
 *     [u8 off, x] payload[off % len] ^= x
 *
 * Checked: a batch sent without VCU_REQ_F_ASYNC whose framing the
 * protocol's rules (vcu_proto.h, CU_BATCH) accept is answered VCU_S_OK with
 * CUDA_SUCCESS, any other with CUDA_ERROR_INVALID_VALUE; the harness judges
 * the framing itself, from those rules.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_session.h"
#include "fz_input.h"

#define FZ_CHECK(c)                                                               \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_batch: %s:%d: check failed: %s\n", __FILE__,     \
                    __LINE__, #c);                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

#define B_ASYNC 0x01                /* the batch itself async */
#define B_COUNT_LIE 0x02            /* the header's count from the input */
#define B_BAD_HDR 0x04              /* the header's device and reserved from the input */
#define B_SYNC_AFTER 0x08           /* then CU_CTX_SYNCHRONIZE: the entries' errors */
#define B_TWICE 0x10                /* the same batch again (a kept run's graph) */
#define B_TRAIL 0x20                /* bytes past the last entry */

/* The request struct's size of an opcode; 0 for none. */
static size_t fz_req_size(uint32_t op)
{
    switch (op) {
#define FZ_SZ_(name, num, rq, rp) case VCU_OP_##name: return sizeof(struct rq);
        VCU_OP_MAP(FZ_SZ_)
#undef FZ_SZ_
    }
    return 0;
}

static const uint32_t e_ops[7] = {
    VCU_OP_CU_LAUNCH, VCU_OP_CU_LAUNCH, VCU_OP_CU_MEMSET, VCU_OP_CU_MEM_FREE_ASYNC,
    VCU_OP_CU_STREAM_WAIT_EVENT, VCU_OP_CU_EVENT_RECORD, VCU_OP_CU_GRAPH_LAUNCH,
};

/* Made for each session on top of fz_session's handles. */
static uint64_t fz_exec;            /* the session's graph, instantiated */
static uint64_t fz_stream2;
static uint64_t fz_func;            /* a kernel that does nothing */

/*
 * The stand-in runs a kernel as its C twin, which takes the pointers in
 * its parameters as they come (a GPU would fault on a bad one; the twin
 * reads host memory): the entries' launches go to a kernel with no twin,
 * which the stand-in runs as one that does nothing and takes no
 * parameters (VCU_FAKECUDA_ANY_KERNEL), and the session's other module,
 * whose kernel has a twin, is unloaded.
 */
#define FZ_NOOP "fz_batch_noop"
static const char fz_noop_ptx[] =
    "//\n.version 8.0\n.target sm_90\n.visible .entry " FZ_NOOP "()\n{\n}\n";

static void fz_batch_setup(void)
{
    struct vcu_cu_pair_req pr;
    struct vcu_cu_stream_create_req sc;
    struct vcu_cu_u64_req u;
    struct vcu_cu_module_load_req ml;
    struct {
        struct vcu_cu_name_req n;
        char name[sizeof(FZ_NOOP)];
    } nr;

    memset(&u, 0, sizeof(u));
    u.value = fz_handles[9];
    (void)fz_call(VCU_OP_CU_MODULE_UNLOAD, fz_sess, &u, sizeof(u), 0, NULL, 0);
    memset(&ml, 0, sizeof(ml));
    ml.image_len = sizeof(fz_noop_ptx) - 1;
    memset(&nr, 0, sizeof(nr));
    nr.n.module = fz_call(VCU_OP_CU_MODULE_LOAD, fz_sess, &ml, sizeof(ml), VCU_SEG_TO_DEVICE,
                          (void *)fz_noop_ptx, sizeof(fz_noop_ptx) - 1);
    nr.n.name_len = sizeof(FZ_NOOP) - 1;
    memcpy(nr.name, FZ_NOOP, sizeof(FZ_NOOP) - 1);
    fz_func = fz_call(VCU_OP_CU_MODULE_GET_FUNCTION, fz_sess, &nr,
                      sizeof(nr.n) + sizeof(FZ_NOOP) - 1, 0, NULL, 0);
    memset(&pr, 0, sizeof(pr));
    pr.a = fz_handles[7];
    fz_exec = fz_call(VCU_OP_CU_GRAPH_INSTANTIATE, fz_sess, &pr, sizeof(pr), 0, NULL, 0);
    memset(&sc, 0, sizeof(sc));
    fz_stream2 = fz_call(VCU_OP_CU_STREAM_CREATE, fz_sess, &sc, sizeof(sc), 0, NULL, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("VCU_FAKECUDA_ANY_KERNEL", "1", 1);
    fz_session_init();
    fz_batch_setup();
    return 0;
}

/* The entry's payload from its opcode's template: the session's handles. */
static void fz_template(uint32_t op, unsigned char *p, uint32_t dev, uint64_t stream,
                        uint32_t params)
{
    struct vcu_cu_hdr h = { dev, 0 };

    memcpy(p, &h, sizeof(h));
    switch (op) {
    case VCU_OP_CU_LAUNCH: {
        struct vcu_cu_launch_req l;

        memset(&l, 0, sizeof(l));
        l.hdr = h;
        l.function = fz_func;
        l.stream = stream;
        l.grid[0] = l.grid[1] = l.grid[2] = 1;
        l.block[0] = l.block[1] = l.block[2] = 1;
        l.param_bytes = params;
        memcpy(p, &l, sizeof(l));
        break;
    }
    case VCU_OP_CU_MEMSET: {
        struct vcu_cu_memset_req m;

        memset(&m, 0, sizeof(m));
        m.hdr = h;
        m.dst = fz_handles[2];
        m.width = 64;
        m.height = 1;
        m.stream = stream;
        m.value = 0x5a;
        m.elem_size = 1;
        m.flags = VCU_CU_MEMCPY_F_ASYNC;
        memcpy(p, &m, sizeof(m));
        break;
    }
    case VCU_OP_CU_MEM_FREE_ASYNC: {
        struct vcu_cu_memcpy_req m;

        memset(&m, 0, sizeof(m));
        m.hdr = h;
        m.dst = fz_handles[2];
        m.stream = stream;
        m.flags = VCU_CU_MEMCPY_F_ASYNC;
        memcpy(p, &m, sizeof(m));
        break;
    }
    case VCU_OP_CU_STREAM_WAIT_EVENT:
    case VCU_OP_CU_EVENT_RECORD:
    case VCU_OP_CU_GRAPH_LAUNCH: {
        struct vcu_cu_pair_req pr;

        memset(&pr, 0, sizeof(pr));
        pr.hdr = h;
        pr.a = op == VCU_OP_CU_STREAM_WAIT_EVENT ? stream
               : op == VCU_OP_CU_EVENT_RECORD    ? fz_handles[6]
                                                 : fz_exec;
        pr.b = op == VCU_OP_CU_STREAM_WAIT_EVENT ? fz_handles[6] : stream;
        memcpy(p, &pr, sizeof(pr));
        break;
    }
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = { data, size };
    fz_req_t *t = &fz_reqs[0];
    struct vcu_req_hdr *h = (struct vcu_req_hdr *)t->reqbuf;
    unsigned char *pl = (unsigned char *)(h + 1);
    struct vcu_cu_batch_req b;
    uint8_t flags;
    uint32_t count = 0, count_lie = 0, trail = 0, plen;
    int framing_ok = 1;
    unsigned int round;

    if (fz_session_begin())
        fz_batch_setup();
    if (size == 0)
        return 0;
    memset(t->reqbuf, 0, sizeof(t->reqbuf));
    flags = (uint8_t)in_u(&in, 1);
    memset(&b, 0, sizeof(b));
    if (flags & B_COUNT_LIE)
        count_lie = (uint32_t)in_u(&in, 1);
    if (flags & B_BAD_HDR) {
        b.hdr.device = (uint32_t)in_u(&in, 2);
        b.hdr.ctx = (uint32_t)in_u(&in, 2);
        b.reserved = (uint32_t)in_u(&in, 4);
        if (b.hdr.device || b.hdr.ctx || b.reserved)
            framing_ok = 0;
    }
    if (flags & B_TRAIL)
        trail = (uint32_t)(in_u(&in, 1) % 64) + 1;
    plen = sizeof(b);
    while (in.n > 0 && count < VCU_CU_BATCH_MAX) {
        uint8_t sel = (uint8_t)in_u(&in, 1), extra, lie = 0, off = 0, x = 0;
        uint32_t op = (sel & 7) == 7 ? (uint32_t)in_u(&in, 4) : e_ops[sel & 7];
        uint32_t dev = (sel >> 5) & 1, params = 0, len;
        uint64_t streams[4] = { fz_handles[5], 0, 1, fz_stream2 };
        uint64_t stream = streams[(sel >> 3) & 3];
        size_t rq = fz_req_size(op);
        struct vcu_cu_batch_entry e;
        unsigned char tmp[512];

        extra = (uint8_t)in_u(&in, 1);
        if (sel & 0x40)
            lie = (uint8_t)in_u(&in, 1);
        if (sel & 0x80) {
            off = (uint8_t)in_u(&in, 1);
            x = (uint8_t)in_u(&in, 1);
        }
        if (op == VCU_OP_CU_LAUNCH)
            params = extra % 65;
        len = (uint32_t)(rq ? rq : sizeof(struct vcu_cu_hdr)) +
              (op == VCU_OP_CU_LAUNCH ? params : extra % 16u);
        if (sel & 0x40)
            len = lie & 0x80 ? (len > (lie & 0x7fu) ? len - (lie & 0x7fu) : 0) : len + lie;
        /* Up to a little past the protocol's bound, which is checked too. */
        if (len > sizeof(tmp) || plen + sizeof(e) + len + 8 > VCU_CU_BATCH_BYTES + 256)
            break;
        e.opcode = op;
        e.len = len;
        memcpy(pl + plen, &e, sizeof(e));
        plen += sizeof(e);
        memset(tmp, 0, sizeof(tmp));
        fz_template(op, tmp, dev, stream, params);
        if ((sel & 0x80) && len > 0)
            tmp[off % len] ^= x;
        memset(pl + plen, 0, (len + 7u) & ~7u);
        memcpy(pl + plen, tmp, len);
        /* The rules: an opcode a batch may hold, at least its struct. */
        if (!vcu_batch_op_ok(op) || len < rq)
            framing_ok = 0;
        plen += (len + 7u) & ~7u;
        count++;
    }
    b.count = (flags & B_COUNT_LIE) ? count_lie : count;
    if (b.count != count)
        framing_ok = 0;
    if (trail != 0) {
        memset(pl + plen, 0, trail);
        plen += trail;
        framing_ok = 0;
    }
    if (b.count == 0 || b.count > VCU_CU_BATCH_MAX || plen > VCU_CU_BATCH_BYTES)
        framing_ok = 0;
    memcpy(pl, &b, sizeof(b));

    for (round = 0; round < ((flags & B_TWICE) ? 2u : 1u); round++) {
        /* A setup call or the last round timed out (a loaded machine) or
         * poisoned the context: the session is not one to judge by. */
        if (fz_session_lost())
            return 0;
        h->opcode = VCU_OP_CU_BATCH;
        h->flags = (flags & B_ASYNC) ? VCU_REQ_F_ASYNC : 0;
        h->session = fz_sess;
        h->req_id = 9;
        h->payload_len = plen;
        h->nsegs = 0;
        t->r.req = t->reqbuf;
        t->r.req_len = sizeof(*h) + ((plen + 7u) & ~7u);
        t->r.segs = NULL;
        t->r.nsegs = 0;
        if (fz_run(t) != 0)
            return 0;
        if (fz_debug)
            fprintf(stderr, "fuzz: batch of %u (count %u) %u bytes: status %u result %u%s\n",
                    count, b.count, plen, fz_status(t),
                    t->r.resp_len >= 32 ? *(uint32_t *)fz_resp(t) : 0,
                    framing_ok ? "" : " (bad framing)");
        if (!(flags & B_ASYNC)) {
            const struct vcu_cu_resp *r = fz_resp(t);
            int whole = t->r.resp_len >= sizeof(struct vcu_resp_hdr) + sizeof(*r);
            int ok = framing_ok ? fz_status(t) == VCU_S_OK && whole && r->result == 0
                                : fz_status(t) != VCU_S_OK || (whole && r->result == 1);

            if (!ok)
                fprintf(stderr, "fuzz: batch (%s framing): status %u result %u deferred %u\n",
                        framing_ok ? "good" : "bad", fz_status(t), r->result, r->deferred);
            FZ_CHECK(ok);
        }
        fz_after(t);
    }
    if (flags & B_SYNC_AFTER) {
        struct vcu_cu_hdr ch = { 0, 0 };

        (void)fz_call(VCU_OP_CU_CTX_SYNCHRONIZE, fz_sess, &ch, sizeof(ch), 0, NULL, 0);
        fz_after(&fz_reqs[0]);
    }
    return 0;
}
