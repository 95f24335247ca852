/*
 * Staging of pageable guest copies in the worker process (worker.c).
 *
 * A guest buffer that is not pinned memory of the guest driver arrives as
 * its pages, scattered through guest RAM, and is used only until the
 * reply.  Copying it range by range from memory that is not registered
 * makes the driver stage every 4 KiB page on its own.  Instead, a large
 * CU_MEMCPY_HTOD segment is gathered (by up to eight threads, half the
 * online CPUs) into a pinned
 * staging buffer of the worker, which the backend copies from in one DMA;
 * a CU_MEMCPY_DTOH lands in such a buffer and is scattered to the guest's
 * pages before the reply.  The buffers are registered once and reused;
 * VCU__STAGE_MAX bytes of them at most per session, each charged to the
 * VM's host quota (vcu_backend_host_charge()) before it is made: past
 * either bound a copy goes unstaged.
 *
 * Only these two opcodes: their one segment is wholly read, or wholly
 * written when the copy succeeds, so staging changes nothing the guest can
 * see.  Main thread (stage in) and the thread that completes the request
 * (stage out); vcu__st.lock protects the buffer list.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vcu_stage.h"

/* Smaller segments are copied as they are.  Any number of ranges: even a
 * few large ones are not registered, and the driver would stage them. */
#define VCU__STAGE_MIN (1u << 20)
#define VCU__STAGE_MIN_RANGES 1u
/* Pinned staging memory per session. */
#define VCU__STAGE_MAX (256ull << 20)
/* Threads of a gather or scatter: half the online CPUs, at most this
 * many (the rest are QEMU's, the guest's and other sessions'). */
#define VCU__STAGE_THREADS 8

typedef struct vcu__sbuf_s {
    struct vcu__sbuf_s *next;
    unsigned char *p;
    size_t cap;
    bool busy;
} vcu__sbuf_t;

static struct {
    pthread_mutex_t lock;
    vcu__sbuf_t *bufs;
    uint64_t total;
} vcu__st = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A free registered buffer of at least len bytes, or NULL. */
static vcu__sbuf_t *vcu__sbuf_get(vcu_backend_t *be, size_t len)
{
    vcu__sbuf_t *b, *best = NULL;
    size_t cap = (len + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    void *p;

    pthread_mutex_lock(&vcu__st.lock);
    for (b = vcu__st.bufs; b != NULL; b = b->next)
        if (!b->busy && b->cap >= len && (best == NULL || b->cap < best->cap))
            best = b;
    if (best != NULL) {
        best->busy = true;
        pthread_mutex_unlock(&vcu__st.lock);
        return best;
    }
    if (vcu__st.total + cap > VCU__STAGE_MAX) {
        pthread_mutex_unlock(&vcu__st.lock);
        return NULL;
    }
    vcu__st.total += cap;
    pthread_mutex_unlock(&vcu__st.lock);

    if (vcu_backend_host_charge(be, cap) != 0) {
        pthread_mutex_lock(&vcu__st.lock);
        vcu__st.total -= cap;
        pthread_mutex_unlock(&vcu__st.lock);
        return NULL;
    }
    b = calloc(1, sizeof(*b));
    p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (b == NULL || p == MAP_FAILED || vcu_backend_add_ram(be, p, cap) != 0) {
        if (p != MAP_FAILED)
            munmap(p, cap);
        free(b);
        vcu_backend_host_uncharge(be, cap);
        pthread_mutex_lock(&vcu__st.lock);
        vcu__st.total -= cap;
        pthread_mutex_unlock(&vcu__st.lock);
        return NULL;
    }
    b->p = p;
    b->cap = cap;
    b->busy = true;
    pthread_mutex_lock(&vcu__st.lock);
    b->next = vcu__st.bufs;
    vcu__st.bufs = b;
    pthread_mutex_unlock(&vcu__st.lock);
    return b;
}

static void vcu__sbuf_put(vcu__sbuf_t *b)
{
    pthread_mutex_lock(&vcu__st.lock);
    b->busy = false;
    pthread_mutex_unlock(&vcu__st.lock);
}

/* One thread's share of a gather or scatter: bytes [from, to) of the
 * segment, whose iovecs start at iov. */
typedef struct vcu__spart_s {
    const struct iovec *iov;
    unsigned int iovcnt;
    unsigned char *buf;
    uint64_t from, to;
    bool in;                        /* gather into buf, else scatter from it */
} vcu__spart_t;

static void *vcu__spart_run(void *arg)
{
    vcu__spart_t *w = arg;
    uint64_t pos = 0;
    unsigned int i;

    for (i = 0; i < w->iovcnt && pos < w->to; i++) {
        uint64_t start = pos, end = pos + w->iov[i].iov_len;
        uint64_t a = start > w->from ? start : w->from;
        uint64_t e = end < w->to ? end : w->to;
        unsigned char *g = (unsigned char *)w->iov[i].iov_base;

        pos = end;
        if (e <= a)
            continue;
        if (w->in)
            memcpy(w->buf + a, g + (a - start), e - a);
        else
            memcpy(g + (a - start), w->buf + a, e - a);
    }
    return NULL;
}

static unsigned int vcu__stage_threads(void)
{
    static unsigned int n;
    long cpus;

    if (n == 0) {
        cpus = sysconf(_SC_NPROCESSORS_ONLN) / 2;
        n = cpus < 1 ? 1 : cpus > VCU__STAGE_THREADS ? VCU__STAGE_THREADS : (unsigned int)cpus;
    }
    return n;
}

/* Gathers or scatters the whole segment, in parallel. */
static void vcu__stage_copy(const vcu_segment_t *s, unsigned char *buf, bool in)
{
    vcu__spart_t w[VCU__STAGE_THREADS];
    pthread_t t[VCU__STAGE_THREADS];
    bool started[VCU__STAGE_THREADS] = { false };
    unsigned int k, nt = vcu__stage_threads();
    uint64_t share = (s->len + nt - 1) / nt;

    for (k = 0; k < nt; k++) {
        w[k].iov = s->iov;
        w[k].iovcnt = s->iovcnt;
        w[k].buf = buf;
        w[k].from = k * share < s->len ? k * share : s->len;
        w[k].to = (k + 1) * share < s->len ? (k + 1) * share : s->len;
        w[k].in = in;
        if (k > 0 && w[k].from < w[k].to)
            started[k] = pthread_create(&t[k], NULL, vcu__spart_run, &w[k]) == 0;
    }
    vcu__spart_run(&w[0]);
    for (k = 1; k < nt; k++) {
        if (started[k])
            pthread_join(t[k], NULL);
        else if (w[k].from < w[k].to)
            vcu__spart_run(&w[k]);  /* no thread: this one does it */
    }
}

int vcu_stage_in(vcu_backend_t *be, uint32_t opcode, uint32_t req_flags, vcu_segment_t *segs,
                 unsigned int nsegs, vcu_stage_t *st)
{
    vcu__sbuf_t *b;

    memset(st, 0, sizeof(*st));
    if ((opcode != VCU_OP_CU_MEMCPY_HTOD && opcode != VCU_OP_CU_MEMCPY_DTOH) || nsegs != 1 ||
        (segs[0].flags & VCU_SEG_F_STABLE) || segs[0].len < VCU__STAGE_MIN ||
        segs[0].iovcnt < VCU__STAGE_MIN_RANGES)
        return 0;
    b = vcu__sbuf_get(be, segs[0].len);
    if (b == NULL)
        return 0;                   /* over the budget: copied as it is */
    st->buf = b;
    st->guest = segs[0];
    st->one.iov_base = b->p;
    st->one.iov_len = segs[0].len;
    if (opcode == VCU_OP_CU_MEMCPY_HTOD)
        vcu__stage_copy(&segs[0], b->p, true);
    else
        st->out = (req_flags & VCU_REQ_F_ASYNC) ? 2 : 1;
    segs[0].iov = &st->one;
    segs[0].iovcnt = 1;
    return 1;
}

void vcu_stage_out(vcu_stage_t *st, const void *resp, size_t resp_len)
{
    vcu__sbuf_t *b = st->buf;

    if (b == NULL)
        return;
    /*
     * A DTOH that succeeded wrote the whole buffer: it goes to the guest.
     * (The reply: header, then struct vcu_cu_resp, result first.)  An
     * async one's reply is its header alone (its errors are deferred to
     * a later reply): it goes to the guest when the request itself was
     * accepted.  If its copy failed, the guest's buffer gets what the
     * staging buffer held, this session's own earlier data, as CUDA
     * leaves a failed copy's destination undefined.
     */
    if (st->out && resp_len >= sizeof(struct vcu_resp_hdr)) {
        struct vcu_resp_hdr h;
        struct vcu_cu_resp r = { 1, 0 };

        memcpy(&h, resp, sizeof(h));
        if (st->out == 2)
            r.result = 0;
        else if (resp_len >= sizeof(h) + sizeof(r))
            memcpy(&r, (const char *)resp + sizeof(h), sizeof(r));
        if (h.status == VCU_S_OK && r.result == 0)
            vcu__stage_copy(&st->guest, b->p, false);
    }
    vcu__sbuf_put(b);
    st->buf = NULL;
}
