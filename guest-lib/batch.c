/*
 * Coalescing a burst of async requests into one CU_BATCH (VCU_FEAT_BATCH).
 *
 * A launch loop sends one async request per launch; each costs the guest
 * a system call and the host a virtqueue element, a frame to the worker
 * and a reply.  Requests that vcu_batch_op_ok() names (launches, memsets,
 * event records, stream waits, graph launches, async frees: no segment,
 * nothing to read back) are instead appended to the connection's batch
 * when they come in a burst: one that comes when the batch is empty and
 * the previous one came more than the gap (VCU_BATCH_US, 50 us) before
 * goes at once, alone, so a lone launch is never delayed.  That test reads
 * CLOCK_MONOTONIC_COARSE, which costs nothing even where the guest's clock
 * source is emulated (a precise clock_gettime per launch cost 1.3 us in a
 * TCG guest on HPET), so requests within one clock tick of each other
 * (1-4 ms) count as a burst; the flush thread bounds what that costs.
 * The batch goes to the device, as one async request:
 *
 *   - when it is full (VCU_CU_BATCH_MAX entries or VCU_CU_BATCH_BYTES);
 *   - before any other request of the connection (a synchronize, a copy,
 *     a query), from any thread, and before the driver is asked to
 *     unregister or free host memory: everything a program did before a
 *     call reaches the host before that call;
 *   - by the connection's flush thread, once no request has been appended
 *     for a gap, or once the batch is VCU__BATCH_AGE_GAPS gaps old: a
 *     program that launches and then waits on mapped memory without
 *     calling CUDA sees its kernel start about a gap later, never not at
 *     all, and a slow but steady stream of launches is held back at most
 *     that age.  The thread watches by an append count, not by time read
 *     on the launch path: it wakes after a gap, and again after twice
 *     that while appends go on.

 * Order is kept by the batch lock: entries are appended, and batches and
 * the isolated requests of the batchable kinds are sent, under it, and a
 * batch counts as pending until the system call that sends it has
 * returned (the driver queues requests of a file in the order its calls
 * return).  The host runs each entry as the same request sent alone with
 * VCU_REQ_F_ASYNC, so a failure is the next reply's deferred error, as
 * before.  A batch that cannot be sent (the device gone, no memory) fails
 * the next call of the connection, which is then not sent.
 *
 * VCU_BATCH=0 in the environment turns coalescing off; VCU_BATCH_US sets
 * the gap (1..10000 us, default 50).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vcu_transport_int.h"

#define VCU__BATCH_GAP_US 50u
#define VCU__BATCH_AGE_GAPS 20u     /* the oldest a batch gets: 1 ms by default */

/* Set in a child of fork(): its copy of a batch is the parent's, and
 * the parent's flush thread (and maybe the lock) did not come along. */
static int vcu__batch_child;
static pthread_once_t vcu__batch_once = PTHREAD_ONCE_INIT;

static void vcu__batch_atfork_child(void)
{
    vcu__batch_child = 1;
}

static void vcu__batch_init_once(void)
{
    (void)pthread_atfork(NULL, NULL, vcu__batch_atfork_child);
}

struct vcu__batch_s {
    vcu_conn_t *c;
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* the flush thread waits on it */
    unsigned int n;                 /* entries; read without mu as a hint */
    size_t len;                     /* bytes in buf, the batch header included */
    uint64_t appended;              /* entries ever appended */
    uint64_t sent;                  /* batches ever sent */
    uint64_t last_ns;               /* when the last async request came (coarse) */
    uint64_t gap_ns;
    int err;                        /* a failed send, for the next call */
    int stop;
    int thread;                     /* the flush thread runs */
    int idle;                       /* it waits for a first entry */
    pthread_t tid;
    vcu__batch_stats_t st;          /* what it has done (tests) */
    uint64_t buf[VCU_CU_BATCH_BYTES / 8];
};

static uint64_t vcu__batch_now(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Holder of mu: sends the batch, if any; the send's error is kept. */
static void vcu__batch_send_locked(vcu_conn_t *c, vcu__batch_t *b)
{
    struct vcu_cu_batch_req *h = (struct vcu_cu_batch_req *)b->buf;
    int err;

    if (b->n == 0)
        return;
    memset(h, 0, sizeof(*h));
    h->count = b->n;
    err = vcu__conn_send(c, VCU_OP_CU_BATCH, VCU_CALL_ASYNC, b->buf, (uint32_t)b->len, NULL, 0,
                         NULL, 0, NULL);
    if (err != 0 && b->err == 0)
        b->err = err;
    b->st.batches++;
    b->st.entries += b->n;
    b->sent++;
    b->len = sizeof(*h);
    __atomic_store_n(&b->n, 0, __ATOMIC_RELEASE);
}

/* Holder of mu: waits until deadline (CLOCK_MONOTONIC), stop, or a
 * batch other than gen (sent by someone else). */
static void vcu__batch_wait_locked(vcu__batch_t *b, uint64_t deadline, uint64_t gen)
{
    struct timespec ts = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };

    while (!b->stop && b->sent == gen && vcu__batch_now(CLOCK_MONOTONIC) < deadline)
        pthread_cond_timedwait(&b->cv, &b->mu, &ts);
}

static void *vcu__batch_thread(void *arg)
{
    vcu__batch_t *b = arg;
    vcu_conn_t *c = b->c;

    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        uint64_t gen, start, seen, period, now;

        if (b->n == 0) {
            b->idle = 1;
            pthread_cond_wait(&b->cv, &b->mu);
            b->idle = 0;
            continue;
        }
        /* Watch this batch until it is sent, by us or by anyone. */
        gen = b->sent;
        start = vcu__batch_now(CLOCK_MONOTONIC);
        seen = b->appended;
        period = b->gap_ns;
        for (;;) {
            vcu__batch_wait_locked(b, vcu__batch_now(CLOCK_MONOTONIC) + period, gen);
            if (b->stop || b->sent != gen)
                break;
            now = vcu__batch_now(CLOCK_MONOTONIC);
            if (b->appended == seen || now - start >= b->gap_ns * VCU__BATCH_AGE_GAPS) {
                vcu__batch_send_locked(c, b);
                break;
            }
            seen = b->appended;
            period *= 2;
            if (period > start + b->gap_ns * VCU__BATCH_AGE_GAPS - now)
                period = start + b->gap_ns * VCU__BATCH_AGE_GAPS - now;
        }
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int vcu__batch_open(vcu_conn_t *c)
{
    const char *e = getenv("VCU_BATCH_US");
    pthread_condattr_t ca;
    vcu__batch_t *b;
    long us = VCU__BATCH_GAP_US;

    if (e != NULL && e[0] != '\0') {
        char *end;

        us = strtol(e, &end, 10);
        if (*end != '\0' || us < 1 || us > 10000)
            us = VCU__BATCH_GAP_US;
    }
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return VCU_ENOMEM;
    if (pthread_condattr_init(&ca) != 0) {
        free(b);
        return VCU_ENOMEM;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (pthread_cond_init(&b->cv, &ca) != 0) {
        pthread_condattr_destroy(&ca);
        free(b);
        return VCU_ENOMEM;
    }
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&b->mu, NULL);
    b->c = c;
    b->len = sizeof(struct vcu_cu_batch_req);
    b->gap_ns = (uint64_t)us * 1000u;
    (void)pthread_once(&vcu__batch_once, vcu__batch_init_once);
    c->batch = b;
    return 0;
}

static int vcu__batch_flush_b(vcu_conn_t *c, vcu__batch_t *b)
{
    int err;

    if (b == NULL || vcu__batch_child)
        return 0;
    if (__atomic_load_n(&b->n, __ATOMIC_ACQUIRE) == 0 &&
        __atomic_load_n(&b->err, __ATOMIC_RELAXED) == 0)
        return 0;
    pthread_mutex_lock(&b->mu);
    vcu__batch_send_locked(c, b);
    err = b->err;
    b->err = 0;
    pthread_mutex_unlock(&b->mu);
    return err;
}

int vcu__batch_flush(vcu_conn_t *c)
{
    return vcu__batch_flush_b(c, c->batch);
}

void vcu__batch_stats(vcu_conn_t *c, vcu__batch_stats_t *st)
{
    vcu__batch_t *b = c->batch;

    memset(st, 0, sizeof(*st));
    if (b == NULL || vcu__batch_child)
        return;
    pthread_mutex_lock(&b->mu);
    *st = b->st;
    st->pending = b->n;
    pthread_mutex_unlock(&b->mu);
}

void vcu__batch_close(vcu_conn_t *c)
{
    vcu__batch_t *b = c->batch;

    if (b == NULL)
        return;
    c->batch = NULL;
    if (vcu__batch_child)
        return;                     /* the parent's, left as it is */
    (void)vcu__batch_flush_b(c, b);
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (b->thread)
        pthread_join(b->tid, NULL);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

int vcu__batch_add(vcu_conn_t *c, uint32_t opcode, const void *req, uint32_t req_len)
{
    vcu__batch_t *b = c->batch;
    size_t need = sizeof(struct vcu_cu_batch_entry) + (((size_t)req_len + 7) & ~(size_t)7);
    struct vcu_cu_batch_entry e;
    uint64_t now;
    int err;

    if (vcu__batch_child || need > VCU_CU_BATCH_BYTES - sizeof(struct vcu_cu_batch_req))
        return VCU__BATCH_NOT_TAKEN;
    now = vcu__batch_now(CLOCK_MONOTONIC_COARSE);
    pthread_mutex_lock(&b->mu);
    if (b->n > 0 && b->len + need > VCU_CU_BATCH_BYTES)
        vcu__batch_send_locked(c, b);
    if (b->err != 0) {
        err = b->err;
        b->err = 0;
        pthread_mutex_unlock(&b->mu);
        return err;
    }
    if (b->n == 0 && now - b->last_ns > b->gap_ns) {
        /* Not in a burst: at once, still under mu (order). */
        b->last_ns = now;
        b->st.alone++;
        err = vcu__conn_send(c, opcode, VCU_CALL_ASYNC, req, req_len, NULL, 0, NULL, 0, NULL);
        pthread_mutex_unlock(&b->mu);
        return err;
    }
    b->last_ns = now;
    if (b->n == 0 && !b->thread) {
        if (pthread_create(&b->tid, NULL, vcu__batch_thread, b) != 0) {
            err = vcu__conn_send(c, opcode, VCU_CALL_ASYNC, req, req_len, NULL, 0, NULL, 0,
                                 NULL);
            pthread_mutex_unlock(&b->mu);
            return err;
        }
        b->thread = 1;
    }
    e.opcode = opcode;
    e.len = req_len;
    memcpy((unsigned char *)b->buf + b->len, &e, sizeof(e));
    memcpy((unsigned char *)b->buf + b->len + sizeof(e), req, req_len);
    memset((unsigned char *)b->buf + b->len + sizeof(e) + req_len, 0,
           need - sizeof(e) - req_len);
    b->len += need;
    b->appended++;
    __atomic_store_n(&b->n, b->n + 1, __ATOMIC_RELEASE);
    if (b->n == 1 && b->idle)
        pthread_cond_signal(&b->cv);
    if (b->n == VCU_CU_BATCH_MAX)
        vcu__batch_send_locked(c, b);
    pthread_mutex_unlock(&b->mu);
    return 0;
}
