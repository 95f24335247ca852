/*
 * libcuda.so.1: host functions in streams (cuLaunchHostFunc,
 * cuStreamAddCallback), as our runtime runs them: the host stream
 * reaches a marker (CU_STREAM_HOST_FUNC), a guest thread blocked in
 * CU_CALLBACK_WAIT gets the marker's cookie back, runs the function and
 * answers CU_CALLBACK_DONE(cookie), which lets the stream go on.  A
 * cookie names a slot of vcu__hfs with a generation, so stale or forged
 * cookies are refused.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

typedef struct vcu__hf_s {
    uint32_t gen;                   /* bumped on free; in the cookie */
    int used;
    int persistent;                 /* a graph host node: runs many times */
    CUhostFn fn;
    CUstreamCallback cb;
    CUstream stream;
    void *arg;
} vcu__hf_t;

#define VCU__MAX_HFS 4096
static pthread_mutex_t vcu__hf_mu = PTHREAD_MUTEX_INITIALIZER;    /* protects vcu__hfs */
static vcu__hf_t vcu__hfs[VCU__MAX_HFS];
static pthread_once_t vcu__hf_once = PTHREAD_ONCE_INIT;
static int vcu__hf_thread_ok;

static uint64_t vcu__hf_new(CUhostFn fn, CUstreamCallback cb, CUstream s, void *arg,
                            int persistent)
{
    uint64_t cookie = 0;

    pthread_mutex_lock(&vcu__hf_mu);
    for (uint32_t i = 0; i < VCU__MAX_HFS; i++) {
        vcu__hf_t *h = &vcu__hfs[i];

        if (h->used)
            continue;
        h->used = 1;
        h->persistent = persistent;
        h->fn = fn;
        h->cb = cb;
        h->stream = s;
        h->arg = arg;
        /* Never below VCU_CU_HANDLE_MIN, never 0. */
        cookie = ((uint64_t)(h->gen + 1) << 32) | (i + VCU_CU_HANDLE_MIN);
        break;
    }
    pthread_mutex_unlock(&vcu__hf_mu);
    return cookie;
}

/* Takes the slot of a live cookie (and frees it unless persistent): 1,
 * or 0 if none. */
static int vcu__hf_take(uint64_t cookie, vcu__hf_t *out)
{
    uint64_t idx = (cookie & 0xffffffffu) - VCU_CU_HANDLE_MIN;
    int ok = 0;

    if ((cookie & 0xffffffffu) < VCU_CU_HANDLE_MIN || idx >= VCU__MAX_HFS)
        return 0;
    pthread_mutex_lock(&vcu__hf_mu);
    if (vcu__hfs[idx].used && vcu__hfs[idx].gen + 1 == (uint32_t)(cookie >> 32)) {
        *out = vcu__hfs[idx];
        if (!vcu__hfs[idx].persistent) {
            vcu__hfs[idx].used = 0;
            vcu__hfs[idx].gen++;
        }
        ok = 1;
    }
    pthread_mutex_unlock(&vcu__hf_mu);
    return ok;
}

/* One for the session: waits for the host to reach a host function. */
static void *vcu__hf_thread(void *arg)
{
    (void)arg;
    for (;;) {
        struct vcu_cu_hdr h;
        struct vcu_cu_u64_resp o;
        struct vcu_cu_u64_req d;
        vcu__hf_t f;
        CUresult e;

        e = vcu__call(0, VCU_OP_CU_CALLBACK_WAIT, &h, sizeof(h), NULL, 0, &o, sizeof(o));
        if (e != CUDA_SUCCESS) {
            static int once;

            vcu__log_once(&once, "libcuda (virtio-cuda): host functions stopped: CUresult %d\n",
                          (int)e);
            return NULL;
        }
        if (vcu__hf_take(o.value, &f)) {
            if (f.fn != NULL)
                f.fn(f.arg);
            else
                f.cb(f.stream, CUDA_SUCCESS, f.arg);
        }
        /* Answer even an unknown cookie, so the host stream never hangs. */
        d.value = o.value;
        vcu__call(0, VCU_OP_CU_CALLBACK_DONE, &d, sizeof(d), NULL, 0, NULL, 0);
    }
    return NULL;
}

static void vcu__hf_start_once(void)
{
    pthread_attr_t at;
    pthread_t t;

    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    vcu__hf_thread_ok = pthread_create(&t, &at, vcu__hf_thread, NULL) == 0;
    pthread_attr_destroy(&at);
}

static CUresult vcu__host_func(CUstream stream, CUhostFn fn, CUstreamCallback cb, void *arg,
                               int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__ctx_t *c;
    CUresult e;

    if (fn == NULL && cb == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    memset(&r, 0, sizeof(r));
    if (e == CUDA_SUCCESS)
        e = vcu__stream(c, stream, ptsz, &r.a);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_once(&vcu__hf_once, vcu__hf_start_once);
    if (!vcu__hf_thread_ok)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* In a capture the call becomes a host node of the graph, which runs
     * it each time the graph runs: the record stays, as a graph host
     * node's does. */
    r.b = vcu__hf_new(fn, cb, stream, arg, vcu__stream_capturing(c, r.a));
    if (r.b == 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e = vcu__call(c->dev, VCU_OP_CU_STREAM_HOST_FUNC, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != CUDA_SUCCESS)
        vcu__hostfn_forget(r.b);
    return e;
}

/* A graph host node's cookie: kept for the life of the process (an
 * instantiated graph, or a clone, may run it after its graph is gone). */
uint64_t vcu__hostfn_cookie(CUhostFn fn, void *arg)
{
    pthread_once(&vcu__hf_once, vcu__hf_start_once);
    if (!vcu__hf_thread_ok)
        return 0;
    return vcu__hf_new(fn, NULL, NULL, arg, 1);
}

uint64_t vcu__hostfn_once(CUhostFn fn, void *arg)
{
    pthread_once(&vcu__hf_once, vcu__hf_start_once);
    if (!vcu__hf_thread_ok)
        return 0;
    return vcu__hf_new(fn, NULL, NULL, arg, 0);
}

void vcu__hostfn_forget(uint64_t cookie)
{
    uint64_t idx = (cookie & 0xffffffffu) - VCU_CU_HANDLE_MIN;

    if ((cookie & 0xffffffffu) < VCU_CU_HANDLE_MIN || idx >= VCU__MAX_HFS)
        return;
    pthread_mutex_lock(&vcu__hf_mu);
    if (vcu__hfs[idx].used && vcu__hfs[idx].gen + 1 == (uint32_t)(cookie >> 32)) {
        vcu__hfs[idx].used = 0;
        vcu__hfs[idx].gen++;
    }
    pthread_mutex_unlock(&vcu__hf_mu);
}

VCU__EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__host_func(hStream, fn, NULL, userData, 0);
}

VCU__EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
    if (fn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__host_func(hStream, fn, NULL, userData, 1);
}

/* flags: reserved, 0 (cuda.h). */
VCU__EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback,
                                         void *userData, unsigned int flags)
{
    if (callback == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__host_func(hStream, NULL, callback, userData, 0);
}

VCU__EXPORT CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                              void *userData, unsigned int flags)
{
    if (callback == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__host_func(hStream, NULL, callback, userData, 1);
}
