/*
 * TEST DOUBLE ONLY: a second stand-in for libcuda.so.1, for the unit
 * tests of waiting requests (test_wait.c).  The CPU stand-in
 * (tests/fakecuda) runs all work at once, so nothing it queues is ever
 * pending; this one keeps each stream's work queued and runs it only when
 * it can, which lets a test hold GPU work back:
 *
 *  - streams are FIFOs of operations; the legacy and per-thread streams
 *    are two more (this model has no implicit legacy synchronization);
 *  - cuEventRecord queues a record; cuStreamWaitEvent waits for the
 *    record current when it was called (none: no wait), as CUDA does;
 *  - cuMemsetD16Async is not a memset here: it stands for a kernel that
 *    polls a flag in device memory, and finishes once the byte at dst is
 *    non-zero (a copy on another stream may set it);
 *  - work runs, as far as it can, on every call into the library;
 *    synchronizing calls poll for up to two seconds, then fail with
 *    CUDA_ERROR_LAUNCH_TIMEOUT (a blocking worker shows as that failure,
 *    not as a hung test).
 *
 * One context per device, one device.  Only what test_wait.c needs; the
 * rest is left out (the backend treats it as missing), or refused.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

enum { M_MEMSET, M_SPIN, M_COPY, M_WAIT, M_RECORD };

typedef struct m_event_s {
    uint64_t issued;                /* records queued */
    uint64_t done;                  /* records reached */
    struct m_event_s *next;         /* all events, freed at context destroy */
    int dead;
} m_event_t;

typedef struct m_op_s {
    int kind;
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
    unsigned char val;
    m_event_t *ev;
    uint64_t seq;
    struct m_op_s *next;
} m_op_t;

typedef struct m_stream_s {
    m_op_t *head, **tailp;
    struct m_stream_s *next;
    int dead;                       /* destroyed: freed once empty, at ctx destroy */
} m_stream_t;

static pthread_mutex_t m_lock = PTHREAD_MUTEX_INITIALIZER;
static m_stream_t m_legacy, m_perthread;
static m_stream_t *m_streams;       /* created ones */
static m_event_t *m_events;
static int m_ctx_live;
static void **m_allocs;             /* live allocations, freed with the context */
static size_t m_nallocs;
static int m_ctx_token;             /* CUcontext is &m_ctx_token */

static void m_stream_init(m_stream_t *s)
{
    s->head = NULL;
    s->tailp = &s->head;
}

static m_stream_t *m_stream(CUstream h)
{
    if (h == NULL || h == CU_STREAM_LEGACY)
        return &m_legacy;
    if (h == CU_STREAM_PER_THREAD)
        return &m_perthread;
    return (m_stream_t *)h;
}

static void m_push(m_stream_t *s, m_op_t op)
{
    m_op_t *o = malloc(sizeof(*o));

    if (o == NULL)
        abort();
    *o = op;
    o->next = NULL;
    *s->tailp = o;
    s->tailp = &o->next;
}

/* Runs the head of one stream as far as it can; 1 if anything ran. */
static int m_run_stream(m_stream_t *s)
{
    int ran = 0;
    m_op_t *o;

    while ((o = s->head) != NULL) {
        switch (o->kind) {
        case M_MEMSET:
            memset(o->dst, o->val, o->n);
            break;
        case M_COPY:
            memcpy(o->dst, o->src, o->n);
            break;
        case M_SPIN:
            if (__atomic_load_n(o->dst, __ATOMIC_ACQUIRE) == 0)
                return ran;
            break;
        case M_WAIT:
            if (o->ev->done < o->seq)
                return ran;
            break;
        case M_RECORD:
            if (o->ev->done < o->seq)
                o->ev->done = o->seq;
            break;
        }
        s->head = o->next;
        if (s->head == NULL)
            s->tailp = &s->head;
        free(o);
        ran = 1;
    }
    return ran;
}

/* m_lock held. */
static void m_progress(void)
{
    int ran;

    do {
        m_stream_t *s;

        ran = m_run_stream(&m_legacy) | m_run_stream(&m_perthread);
        for (s = m_streams; s != NULL; s = s->next)
            ran |= m_run_stream(s);
    } while (ran);
}

static int m_all_idle(void)
{
    m_stream_t *s;

    if (m_legacy.head || m_perthread.head)
        return 0;
    for (s = m_streams; s != NULL; s = s->next)
        if (s->head)
            return 0;
    return 1;
}

/* Polls until cond() holds, for up to two seconds.  m_lock held. */
static CUresult m_block(int (*cond)(void *), void *arg)
{
    int i;

    for (i = 0; i < 2000; i++) {
        struct timespec ts = {0, 1000000};

        m_progress();
        if (cond(arg))
            return CUDA_SUCCESS;
        pthread_mutex_unlock(&m_lock);
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&m_lock);
    }
    return CUDA_ERROR_LAUNCH_TIMEOUT;
}

static int m_stream_empty(void *arg)
{
    return ((m_stream_t *)arg)->head == NULL;
}

static int m_idle(void *arg)
{
    (void)arg;
    return m_all_idle();
}

static int m_event_reached(void *arg)
{
    m_event_t *e = arg;

    return e->done >= e->issued;
}

#define M_ENTER() pthread_mutex_lock(&m_lock); m_progress()
#define M_RETURN(r) do { CUresult r_ = (r); m_progress(); pthread_mutex_unlock(&m_lock); return r_; } while (0)

CUresult CUDAAPI cuInit(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *n)
{
    *n = 1;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                             CUdevice dev)
{
    (void)params;
    (void)flags;
    (void)dev;
    M_ENTER();
    if (m_ctx_live)
        M_RETURN(CUDA_ERROR_NOT_SUPPORTED);   /* one session at a time */
    m_ctx_live = 1;
    m_stream_init(&m_legacy);
    m_stream_init(&m_perthread);
    *pctx = (CUcontext)&m_ctx_token;
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    (void)ctx;
    M_ENTER();
    m_block(m_idle, NULL);
    while (m_streams != NULL) {
        m_stream_t *s = m_streams;

        m_streams = s->next;
        while (s->head != NULL) {
            m_op_t *o = s->head;

            s->head = o->next;
            free(o);
        }
        free(s);
    }
    while (m_nallocs > 0)
        free(m_allocs[--m_nallocs]);
    free(m_allocs);
    m_allocs = NULL;
    while (m_events != NULL) {
        m_event_t *e = m_events;

        m_events = e->next;
        free(e);
    }
    m_ctx_live = 0;
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    (void)ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    M_ENTER();
    M_RETURN(m_block(m_idle, NULL));
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *p, size_t size)
{
    void *m = calloc(1, size ? size : 1), **n;

    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    M_ENTER();
    n = realloc(m_allocs, (m_nallocs + 1) * sizeof(*n));
    if (n == NULL) {
        free(m);
        M_RETURN(CUDA_ERROR_OUT_OF_MEMORY);
    }
    m_allocs = n;
    m_allocs[m_nallocs++] = m;
    *p = (CUdeviceptr)(uintptr_t)m;
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemFree(CUdeviceptr p)
{
    size_t i;

    M_ENTER();
    for (i = 0; i < m_nallocs; i++)
        if (m_allocs[i] == (void *)(uintptr_t)p)
            break;
    if (i == m_nallocs)
        M_RETURN(CUDA_ERROR_INVALID_VALUE);
    m_block(m_idle, NULL);
    free(m_allocs[i]);
    m_allocs[i] = m_allocs[--m_nallocs];
    M_RETURN(CUDA_SUCCESS);
}

static CUresult m_copy(void *dst, const void *src, size_t n, CUstream h, int sync)
{
    m_stream_t *s = m_stream(h);
    m_op_t op = {M_COPY, dst, src, n, 0, NULL, 0, NULL};

    M_ENTER();
    m_push(s, op);
    if (sync)
        M_RETURN(m_block(m_stream_empty, s));
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr d, const void *src, size_t n)
{
    return m_copy((void *)(uintptr_t)d, src, n, CU_STREAM_LEGACY, 1);
}

CUresult CUDAAPI cuMemcpyDtoH(void *dst, CUdeviceptr s, size_t n)
{
    return m_copy(dst, (const void *)(uintptr_t)s, n, CU_STREAM_LEGACY, 1);
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr d, const void *src, size_t n, CUstream h)
{
    return m_copy((void *)(uintptr_t)d, src, n, h, 0);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dst, CUdeviceptr s, size_t n, CUstream h)
{
    return m_copy(dst, (const void *)(uintptr_t)s, n, h, 0);
}

/* Queued row by row; host and device memory are both host memory here. */
CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream h)
{
    const unsigned char *src;
    unsigned char *dst;
    size_t y;

    if (c == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? c->srcHost
                                                  : (const void *)(uintptr_t)c->srcDevice;
    dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? c->dstHost : (void *)(uintptr_t)c->dstDevice;
    M_ENTER();
    for (y = 0; y < c->Height; y++) {
        m_op_t op = {M_COPY, dst + y * c->dstPitch, src + y * c->srcPitch, c->WidthInBytes, 0,
                     NULL, 0, NULL};

        m_push(m_stream(h), op);
    }
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h)
{
    m_op_t op = {M_MEMSET, (unsigned char *)(uintptr_t)d, NULL, n, v, NULL, 0, NULL};

    M_ENTER();
    m_push(m_stream(h), op);
    M_RETURN(CUDA_SUCCESS);
}

/* The "kernel that polls a flag" (see the top). */
CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h)
{
    m_op_t op = {M_SPIN, (unsigned char *)(uintptr_t)d, NULL, 0, 0, NULL, 0, NULL};

    (void)v;
    (void)n;
    M_ENTER();
    m_push(m_stream(h), op);
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *m, const void *image)
{
    (void)m;
    (void)image;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuModuleUnload(CUmodule m)
{
    (void)m;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    (void)f;
    (void)m;
    (void)name;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int smem, CUstream h, void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz;
    (void)smem, (void)h, (void)params, (void)extra;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int prio)
{
    m_stream_t *s = calloc(1, sizeof(*s));

    (void)flags;
    (void)prio;
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m_stream_init(s);
    M_ENTER();
    s->next = m_streams;
    m_streams = s;
    *ph = (CUstream)s;
    M_RETURN(CUDA_SUCCESS);
}

/* Work goes on; the memory goes with the context. */
CUresult CUDAAPI cuStreamDestroy(CUstream h)
{
    M_ENTER();
    m_stream(h)->dead = 1;
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream h)
{
    M_ENTER();
    M_RETURN(m_block(m_stream_empty, m_stream(h)));
}

CUresult CUDAAPI cuStreamQuery(CUstream h)
{
    M_ENTER();
    M_RETURN(m_stream(h)->head == NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

CUresult CUDAAPI cuEventCreate(CUevent *pe, unsigned int flags)
{
    m_event_t *e = calloc(1, sizeof(*e));

    (void)flags;
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    M_ENTER();
    e->next = m_events;
    m_events = e;
    *pe = (CUevent)e;
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventDestroy(CUevent h)
{
    M_ENTER();
    ((m_event_t *)h)->dead = 1;
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent h, CUstream st, unsigned int flags)
{
    m_event_t *e = (m_event_t *)h;
    m_op_t op = {M_RECORD, NULL, NULL, 0, 0, e, 0, NULL};

    (void)flags;
    M_ENTER();
    if (e->dead)
        M_RETURN(CUDA_ERROR_INVALID_HANDLE);
    op.seq = ++e->issued;
    m_push(m_stream(st), op);
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream st, CUevent h, unsigned int flags)
{
    m_event_t *e = (m_event_t *)h;
    m_op_t op = {M_WAIT, NULL, NULL, 0, 0, e, 0, NULL};

    (void)flags;
    M_ENTER();
    if (e->dead)
        M_RETURN(CUDA_ERROR_INVALID_HANDLE);
    op.seq = e->issued;
    if (op.seq > 0)
        m_push(m_stream(st), op);
    M_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventQuery(CUevent h)
{
    m_event_t *e = (m_event_t *)h;

    M_ENTER();
    if (e->dead)
        M_RETURN(CUDA_ERROR_INVALID_HANDLE);
    M_RETURN(e->done >= e->issued ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

CUresult CUDAAPI cuEventSynchronize(CUevent h)
{
    M_ENTER();
    M_RETURN(m_block(m_event_reached, h));
}
