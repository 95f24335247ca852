/*
 * Helpers for the backend unit tests: build request bytes and segments,
 * open and close sessions, read replies.  Header-only (static inline).
 */
#ifndef VCU_UT_H
#define VCU_UT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vcu_backend.h"
#include "vcu_backend_int.h"
#include "vcu_test.h"

#define UT_REQ_ID 0x1122334455667788ull
#define UT_MAX_IOV 8
#define UT_NO_LIBCUDA "/nonexistent/vcu-unit/libcuda.so.1"

typedef struct ut_req_s {
    vcu_request_t r;
    /* Request bytes: header, payload, segment table, room for ranges. */
    uint64_t reqbuf[(sizeof(struct vcu_req_hdr) + VCU_MAX_PAYLOAD + 8 +
                     (VCU_MAX_SEGS + 4) * sizeof(struct vcu_seg) + 256) / 8];
    uint64_t respbuf[(sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD + 256) / 8];
    vcu_segment_t segs[VCU_MAX_SEGS + 4];
    struct iovec iov[VCU_MAX_SEGS + 4][UT_MAX_IOV];
    unsigned int nsegs;             /* segments added so far */
    atomic_int ndone;               /* done callbacks seen (ut_done) */
    void *user;
} ut_req_t;

static inline void ut_done(vcu_request_t *r)
{
    ut_req_t *t = (ut_req_t *)r;   /* r is the first member */

    atomic_fetch_add(&t->ndone, 1);
}

static inline ut_req_t *ut_req_new(void)
{
    ut_req_t *t = calloc(1, sizeof(*t));

    if (!t)
        abort();
    atomic_init(&t->ndone, 0);
    memset(t->respbuf, 0xa5, sizeof(t->respbuf));
    t->r.resp = t->respbuf;
    t->r.resp_cap = sizeof(t->respbuf);
    t->r.done = ut_done;
    return t;
}

/* Adds a segment made of the given iovecs (copied). */
static inline void ut_req_add_seg_iov(ut_req_t *t, uint32_t flags, const struct iovec *iov,
                                      unsigned int n)
{
    vcu_segment_t *s = &t->segs[t->nsegs];
    uint64_t len = 0;
    unsigned int i;

    for (i = 0; i < n; i++) {
        t->iov[t->nsegs][i] = iov[i];
        len += iov[i].iov_len;
    }
    s->iov = t->iov[t->nsegs];
    s->iovcnt = n;
    s->len = len;
    s->flags = flags;
    t->nsegs++;
}

static inline void ut_req_add_seg(ut_req_t *t, uint32_t flags, void *buf, size_t len)
{
    struct iovec v = {buf, len};

    ut_req_add_seg_iov(t, flags, &v, len ? 1 : 0);
}

static inline struct vcu_req_hdr *ut_hdr(ut_req_t *t)
{
    return (struct vcu_req_hdr *)t->reqbuf;
}

static inline size_t ut_pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

/* The wire segment table entry i (valid after ut_req_build). */
static inline struct vcu_seg *ut_wseg(ut_req_t *t, unsigned int i)
{
    return (struct vcu_seg *)((char *)t->reqbuf + sizeof(struct vcu_req_hdr) +
                              ut_pad8(ut_hdr(t)->payload_len) + i * sizeof(struct vcu_seg));
}

/* Writes header, payload and segment table for the segments added so far. */
static inline void ut_req_build(ut_req_t *t, uint32_t op, uint64_t session, const void *payload,
                                uint32_t plen)
{
    struct vcu_req_hdr *h = ut_hdr(t);
    unsigned int i;

    memset(t->reqbuf, 0, sizeof(t->reqbuf));
    h->opcode = op;
    h->session = session;
    h->req_id = UT_REQ_ID;
    h->payload_len = plen;
    h->nsegs = (uint16_t)t->nsegs;
    if (plen)
        memcpy(h + 1, payload, plen);
    for (i = 0; i < t->nsegs; i++) {
        struct vcu_seg *w = ut_wseg(t, i);

        w->len = t->segs[i].len;
        w->flags = t->segs[i].flags;
        w->nranges = 1;
    }
    t->r.req = t->reqbuf;
    t->r.req_len = sizeof(*h) + ut_pad8(plen) + t->nsegs * sizeof(struct vcu_seg);
    t->r.segs = t->segs;
    t->r.nsegs = t->nsegs;
}

static inline struct vcu_resp_hdr *ut_resp(ut_req_t *t)
{
    return (struct vcu_resp_hdr *)t->respbuf;
}

static inline uint32_t ut_status(ut_req_t *t)
{
    return ut_resp(t)->status;
}

static inline void *ut_resp_payload(ut_req_t *t)
{
    return ut_resp(t) + 1;
}

/* The reply's first rlen bytes into resp (resp NULL: none), zero past
 * what the reply holds. */
static inline void ut_resp_copy(ut_req_t *t, void *resp, size_t rlen)
{
    if (resp == NULL)
        return;
    memset(resp, 0, rlen);
    memcpy(resp, ut_resp_payload(t),
           ut_resp(t)->payload_len < rlen ? ut_resp(t)->payload_len : rlen);
}

/* One CU_* request without segments on session sid of be, its reply
 * into resp (ut_resp_copy): the reply's CUresult, or 0x10000 + the wire
 * status where that is not VCU_S_OK. */
static inline uint32_t ut_cu_do(vcu_backend_t *be, uint64_t sid, uint32_t op, const void *p,
                                uint32_t plen, void *resp, size_t rlen)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_resp r;
    uint32_t st;

    ut_req_build(t, op, sid, p, plen);
    vcu_backend_execute(be, &t->r);
    st = ut_status(t);
    memcpy(&r, ut_resp_payload(t), sizeof(r));
    ut_resp_copy(t, resp, rlen);
    free(t);
    return st != VCU_S_OK ? 0x10000 + st : r.result;
}

/* A backend with CUDA certainly unavailable (unless cuda says so). */
static inline vcu_backend_t *ut_backend(unsigned int max_sessions)
{
    vcu_backend_config_t cfg;
    vcu_backend_t *be = NULL;

    memset(&cfg, 0, sizeof(cfg));
    cfg.libcuda = UT_NO_LIBCUDA;
    cfg.max_sessions = max_sessions;
    if (vcu_backend_new(&cfg, &be) != 0 || !be)
        abort();
    return be;
}

/* Opens a session; returns the wire status, *id and *features on success. */
static inline uint32_t ut_open_ex(vcu_backend_t *be, uint32_t vmin, uint32_t vmax, uint64_t feat,
                                  uint64_t *id, uint64_t *features)
{
    ut_req_t *t = ut_req_new();
    struct vcu_session_open_req oq;
    uint32_t st;

    memset(&oq, 0, sizeof(oq));
    oq.version_min = vmin;
    oq.version_max = vmax;
    oq.features = feat;
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &oq, sizeof(oq));
    vcu_backend_execute(be, &t->r);
    st = ut_status(t);
    if (st == VCU_S_OK) {
        const struct vcu_session_open_resp *o = ut_resp_payload(t);

        if (id)
            *id = o->session;
        if (features)
            *features = o->features;
    }
    free(t);
    return st;
}

static inline uint32_t ut_open(vcu_backend_t *be, uint64_t *id)
{
    return ut_open_ex(be, 1, 1, VCU_FEAT_ECHO | VCU_FEAT_ASYNC | VCU_FEAT_CUDA | VCU_FEAT_BATCH, id,
                      NULL);
}

static inline uint32_t ut_close(vcu_backend_t *be, uint64_t id)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_req_build(t, VCU_OP_SESSION_CLOSE, id, NULL, 0);
    vcu_backend_execute(be, &t->r);
    st = ut_status(t);
    free(t);
    return st;
}

/* Builds an ECHO request with the segments added so far. */
static inline void ut_echo_build(ut_req_t *t, uint64_t session, uint64_t seed, uint32_t flags,
                                 uint32_t delay_ms, const void *tail, uint32_t tail_len)
{
    unsigned char p[sizeof(struct vcu_echo_req) + VCU_MAX_PAYLOAD];
    struct vcu_echo_req er;

    memset(&er, 0, sizeof(er));
    er.seed = seed;
    er.flags = flags;
    er.delay_ms = delay_ms;
    memcpy(p, &er, sizeof(er));
    if (tail_len)
        memcpy(p + sizeof(er), tail, tail_len);
    ut_req_build(t, VCU_OP_ECHO, session, p, (uint32_t)sizeof(er) + tail_len);
}

static inline uint64_t ut_fnv(uint64_t h, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    size_t i;

    for (i = 0; i < len; i++) {
        h ^= p[i];
        h *= VCU_FNV64_PRIME;
    }
    return h;
}

static inline double ut_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits until *counter reaches n (at most 30 s); 0 if it did. */
static inline int ut_wait_count(atomic_int *counter, int n)
{
    double end = ut_now() + 30;

    while (atomic_load(counter) < n) {
        if (ut_now() > end)
            return -1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static inline void ut_fill(void *buf, size_t len, unsigned int seed)
{
    unsigned char *p = buf;
    size_t i;

    for (i = 0; i < len; i++)
        p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

#endif /* VCU_UT_H */
