/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Migration: the pass before the pause (docs/design.md, "Live
 * migration"): a pre-state while the guest runs, chunks of device memory
 * with each chunk's hash, and what the rest at the pause needs of them.
 * Worker thread only, but for the hash pool's threads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_migrate_int.h"

/*
 * A chunk's fingerprint: four lanes of xxHash64's round over 32-byte
 * stripes, merged, then the tail and the length.  It tells whether a
 * chunk changed since the pass before the pause sent it; a guest that
 * forged a collision would only keep its own old bytes.
 */
#define VCU__H1 0x9e3779b185ebca87ull
#define VCU__H2 0xc2b2ae3d27d4eb4full
#define VCU__H3 0x165667b19e3779f9ull

static inline uint64_t vcu__rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t vcu__round(uint64_t acc, uint64_t w)
{
    return vcu__rotl(acc + w * VCU__H2, 31) * VCU__H1;
}

static uint64_t vcu__mig_hash(const unsigned char *p, size_t n)
{
    uint64_t a = VCU__H1 + VCU__H2, b = VCU__H2, c = 0, d = 0 - VCU__H1, h, w[4];
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        memcpy(w, p + i, 32);
        a = vcu__round(a, w[0]);
        b = vcu__round(b, w[1]);
        c = vcu__round(c, w[2]);
        d = vcu__round(d, w[3]);
    }
    h = vcu__rotl(a, 1) + vcu__rotl(b, 7) + vcu__rotl(c, 12) + vcu__rotl(d, 18);
    h = (h ^ vcu__round(0, a)) * VCU__H1 + VCU__H3;
    h = (h ^ vcu__round(0, b)) * VCU__H1 + VCU__H3;
    h = (h ^ vcu__round(0, c)) * VCU__H1 + VCU__H3;
    h = (h ^ vcu__round(0, d)) * VCU__H1 + VCU__H3;
    for (; i < n; i++)
        h = vcu__rotl(h ^ (p[i] * VCU__H3), 11) * VCU__H1;
    h ^= (uint64_t)n;
    h ^= h >> 33;
    h *= VCU__H2;
    h ^= h >> 29;
    h *= VCU__H3;
    return h ^ (h >> 32);
}

/*
 * A chunk's hash is that of its four quarters (lanes), combined: three
 * threads of a small pool hash three of them while the caller hashes the
 * first, so that the pause, which reads every chunk the pass before it
 * sent back to hash it again, is bound by the copies rather than by one
 * core.  Without the pool (its threads could not be made) the caller
 * hashes all four: the same value.
 */
static void vcu__hlane_span(size_t n, unsigned int lane, size_t *off, size_t *len)
{
    size_t part = (n / VCU__MIG_LANES) & ~(size_t)31;

    *off = part * lane;
    *len = lane == VCU__MIG_LANES - 1 ? n - *off : part;
}

static void vcu__hlane_do(vcu__hpool_t *hp, unsigned int lane)
{
    size_t off, len;

    vcu__hlane_span(hp->n, lane, &off, &len);
    hp->h[lane] = vcu__mig_hash(hp->p + off, len);
}

static void *vcu__hlane_run(void *arg)
{
    vcu__hlane_t *l = arg;
    vcu__hpool_t *hp = l->pool;
    unsigned int seen = 0;

    for (;;) {
        pthread_mutex_lock(&hp->mu);
        while (hp->gen == seen && !hp->stop)
            pthread_cond_wait(&hp->go, &hp->mu);
        if (hp->stop) {
            pthread_mutex_unlock(&hp->mu);
            return NULL;
        }
        seen = hp->gen;
        pthread_mutex_unlock(&hp->mu);
        vcu__hlane_do(hp, l->lane);
        pthread_mutex_lock(&hp->mu);
        if (--hp->busy == 0)
            pthread_cond_signal(&hp->done);
        pthread_mutex_unlock(&hp->mu);
    }
}

void vcu__hpool_init(vcu__hpool_t *hp)
{
    unsigned int i;

    memset(hp, 0, sizeof(*hp));
    pthread_mutex_init(&hp->mu, NULL);
    pthread_cond_init(&hp->go, NULL);
    pthread_cond_init(&hp->done, NULL);
    for (i = 0; i < VCU__MIG_LANES - 1; i++) {
        hp->lanes[i].pool = hp;
        hp->lanes[i].lane = i + 1;
        if (pthread_create(&hp->lanes[i].t, NULL, vcu__hlane_run, &hp->lanes[i]) != 0)
            break;
        hp->nt++;
    }
}

void vcu__hpool_fini(vcu__hpool_t *hp)
{
    unsigned int i;

    pthread_mutex_lock(&hp->mu);
    hp->stop = true;
    pthread_cond_broadcast(&hp->go);
    pthread_mutex_unlock(&hp->mu);
    for (i = 0; i < hp->nt; i++)
        pthread_join(hp->lanes[i].t, NULL);
    pthread_cond_destroy(&hp->go);
    pthread_cond_destroy(&hp->done);
    pthread_mutex_destroy(&hp->mu);
}

/* The hash of a chunk: its lanes' hashes, hashed with its length. */
uint64_t vcu__mig_chunk_hash(vcu__hpool_t *hp, const unsigned char *p, size_t n)
{
    unsigned int i;

    hp->p = p;
    hp->n = n;
    if (hp->nt == VCU__MIG_LANES - 1 && n >= ((size_t)1 << 20)) {
        pthread_mutex_lock(&hp->mu);
        hp->busy = hp->nt;
        hp->gen++;
        pthread_cond_broadcast(&hp->go);
        pthread_mutex_unlock(&hp->mu);
        vcu__hlane_do(hp, 0);
        pthread_mutex_lock(&hp->mu);
        while (hp->busy > 0)
            pthread_cond_wait(&hp->done, &hp->mu);
        pthread_mutex_unlock(&hp->mu);
    } else {
        for (i = 0; i < VCU__MIG_LANES; i++)
            vcu__hlane_do(hp, i);
    }
    return vcu__mig_hash((const unsigned char *)hp->h, sizeof(hp->h)) ^ ((uint64_t)n * VCU__H3);
}

/* Forgets a pass before the pause (a new one begins, or the session ends). */
void vcu__mig_pre_drop(vcu__cuda_sess_t *cs)
{
    vcu__mig_t *m = cs->mig;
    size_t i;

    for (i = 0; i < m->pre_n; i++)
        free(m->pre_mem[i].hash);
    free(m->pre_mem);
    vcu__mem_give(cs, m->pre_held);
    m->pre_mem = NULL;
    m->pre_n = m->pre_next = m->pre_held = 0;
    m->pre = false;
    m->pre_calls = 0;
}

/* The pre-pass entry of the allocation at addr, or NULL. */
vcu__mpre_t *vcu__mig_pre_find(vcu__mig_t *m, uint64_t addr)
{
    size_t lo = 0, hi = m->pre_n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (m->pre_mem[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->pre_n && m->pre_mem[lo].addr == addr ? &m->pre_mem[lo] : NULL;
}

/*
 * The session freed the allocation at addr: what the pass before the
 * pause sent of it counts no more.  The destination frees it too when it
 * makes the call again, and an allocation made there later at the same
 * address need not hold those bytes.
 */
void vcu__mig_freed(vcu__cuda_sess_t *cs, uint64_t addr)
{
    vcu__mpre_t *e;

    if (cs->mig != NULL && cs->mig->pre && (e = vcu__mig_pre_find(cs->mig, addr)) != NULL)
        e->live = false;
}

/* ---- the pass before the pause ----------------------------------------- */

static int vcu__mig_pre_cmp(const void *a, const void *b)
{
    uint64_t x = ((const vcu__mpre_t *)a)->addr, y = ((const vcu__mpre_t *)b)->addr;

    return x < y ? -1 : x > y;
}

/* The bytes the pass before the pause has still to send. */
static uint64_t vcu__mig_pre_left(const vcu__mig_t *m)
{
    uint64_t n = 0;
    size_t i;

    for (i = m->pre_next; i < m->pre_n; i++)
        if (m->pre_mem[i].live)
            n += m->pre_mem[i].bytes - m->pre_mem[i].sent;
    return n;
}

/* The list of the session's allocations the pass will carry. */
static int vcu__mig_pre_list(vcu__cuda_sess_t *cs)
{
    vcu__mig_t *m = cs->mig;
    size_t cap = cs->allocs.live, need;
    uint32_t i;

    need = cap * sizeof(vcu__mpre_t);
    if (vcu__mem_take(cs, need) != 0)
        return -1;
    m->pre_held = need;
    m->pre_mem = calloc(cap ? cap : 1, sizeof(vcu__mpre_t));
    if (m->pre_mem == NULL)
        return -1;
    for (i = 0; i < cs->allocs.cap && m->pre_n < cap; i++) {
        uint64_t k = cs->allocs.keys[i], v = cs->allocs.vals[i];
        vcu__mpre_t *e = &m->pre_mem[m->pre_n];
        size_t nch;

        if (k == 0 || k == VCU__PSET_TOMB)
            continue;
        e->addr = k;
        e->dev = VCU__ALLOC_DEV(v);
        e->bytes = vcu__mig_size(cs, e->dev, k);
        if (e->bytes == 0)
            continue;               /* sent whole at the pause */
        nch = (size_t)((e->bytes + VCU__MIG_CHUNK - 1) / VCU__MIG_CHUNK);
        if (vcu__mem_take(cs, nch * 8) != 0)
            return -1;
        m->pre_held += nch * 8;
        if ((e->hash = calloc(nch, 8)) == NULL)
            return -1;
        e->live = true;
        m->pre_n++;
    }
    qsort(m->pre_mem, m->pre_n, sizeof(vcu__mpre_t), vcu__mig_pre_cmp);
    return 0;
}

int vcu__cuda_sess_presave(vcu__cuda_sess_t *cs, int fd, uint64_t *left, char *why,
                           size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    uint64_t magic = VCU__MIG_MAGIC;

    why[0] = '\0';
    *left = 0;
    vcu__mig_pre_drop(cs);
    /* Refused before a byte is written: the session then moves whole at
     * the pause, which says why if it still cannot. */
    if (vcu__mig_refusal(cs) != NULL) {
        snprintf(why, whylen, "%s", vcu__mig_refusal(cs));
        return VCU_EBUSY;
    }
    if (cs->capture && vcu__any_capture(cs)) {
        snprintf(why, whylen, "a stream capture is in progress");
        return VCU_EBUSY;
    }
    if (vcu__mig_pre_list(cs) != 0) {
        vcu__mig_pre_drop(cs);
        snprintf(why, whylen, "out of host memory");
        return VCU_EBUSY;
    }
    m->pre_calls = m->n;
    if (vcu__mig_head_write(cs, fd, VCU__MIG_PRE, 0, m->pre_calls) != 0 ||
        vcu__mig_save_calls(cs, fd, 0, why, whylen) != 0 ||
        vcu__mig_write(fd, &magic, sizeof(magic)) != 0) {
        if (why[0] == '\0')
            snprintf(why, whylen, "writing the stream failed");
        vcu__mig_pre_drop(cs);
        return VCU_EINVAL;
    }
    m->pre = true;
    *left = vcu__mig_pre_left(m);
    return 0;
}

/*
 * [addr, addr + k) of device d into buf while the guest runs: on the
 * context's own non-blocking stream, which waits for none of the guest's
 * work (a host function in it may wait for the guest's answer, which
 * this thread would then never serve), with the thread's capture mode
 * relaxed (the guest may be capturing on this thread's streams).
 */
static int vcu__mig_pre_read(vcu__cuda_sess_t *cs, uint32_t d, uint64_t addr, size_t k,
                             unsigned char *buf)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool swapped;
    CUresult r;

    /* Without the stream a copy would wait behind the guest's work. */
    if (d >= cs->cu->ndev || cs->ctx[d] == NULL || cs->mstream[d] == NULL ||
        vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS)
        return -1;
    swapped = VCU__CU(cs->cu, cuThreadExchangeStreamCaptureMode, &mode) == CUDA_SUCCESS;
    r = vcu__mig_fetch(cs, d, addr, k, buf);
    if (r == CUDA_SUCCESS)
        r = vcu__mig_fetch_wait(cs, d);
    if (swapped)
        (void)VCU__CU(cs->cu, cuThreadExchangeStreamCaptureMode, &mode);
    return r == CUDA_SUCCESS ? 0 : -1;
}

int vcu__cuda_sess_precopy(vcu__cuda_sess_t *cs, int fd, uint64_t *left, char *why,
                           size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    uint64_t magic = VCU__MIG_MAGIC, budget = VCU__MIG_PRE_BUDGET, v;
    struct vcu__mig_mem mh;
    unsigned char *buf = NULL;
    vcu__hpool_t hp;
    int rc = VCU_EINVAL;

    why[0] = '\0';
    *left = 0;
    vcu__hpool_init(&hp);
    if (!m->pre)
        VCU__MIG_FAIL("no pass before the pause began for this session");
    buf = vcu__mig_buf(cs);
    if (buf == NULL)
        VCU__MIG_FAIL("out of host memory");
    if (vcu__mig_head_write(cs, fd, VCU__MIG_CHUNKS, 0, 0) != 0)
        VCU__MIG_FAIL("writing the stream failed");
    while (m->pre_next < m->pre_n && budget > 0) {
        vcu__mpre_t *e = &m->pre_mem[m->pre_next];
        size_t k;

        if (!e->live || e->sent >= e->bytes || !vcu__pset_find(&cs->allocs, e->addr, &v)) {
            m->pre_next++;
            continue;
        }
        k = e->bytes - e->sent < VCU__MIG_CHUNK ? (size_t)(e->bytes - e->sent) : VCU__MIG_CHUNK;
        if (vcu__mig_pre_read(cs, e->dev, e->addr + e->sent, k, buf) != 0)
            VCU__MIG_FAIL("device memory at 0x%llx cannot be read",
                          (unsigned long long)(e->addr + e->sent));
        memset(&mh, 0, sizeof(mh));
        mh.addr = e->addr + e->sent;
        mh.bytes = k;
        mh.dev = e->dev;
        mh.flags = VCU__MIG_MEM_PART;
        if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 || vcu__mig_write(fd, buf, k) != 0)
            VCU__MIG_FAIL("writing the stream failed");
        e->hash[e->sent / VCU__MIG_CHUNK] = vcu__mig_chunk_hash(&hp, buf, k);
        e->sent += k;
        budget -= k < budget ? k : budget;
    }
    memset(&mh, 0, sizeof(mh));
    if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 || vcu__mig_write(fd, &magic, sizeof(magic)) != 0)
        VCU__MIG_FAIL("writing the stream failed");
    *left = vcu__mig_pre_left(m);
    rc = 0;
out:
    vcu__mig_buf_free(cs, buf);
    vcu__hpool_fini(&hp);
    return rc;
}
