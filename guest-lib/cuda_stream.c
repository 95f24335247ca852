/*
 * libcuda.so.1: streams and events over the wire protocol: the guest's
 * stream handles as the host's (each thread's per-thread default stream a
 * host stream of its own), stream and event calls.  Event records and
 * stream waits go without waiting for the host's reply (vcu__call_async;
 * the host runs them in order); every other call waits.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* ---- streams (wire handles) -------------------------------------------- */

/*
 * Each guest thread's per-thread default stream (CU_STREAM_PER_THREAD,
 * the _ptsz forms' NULL): a host stream of its own per device, made at
 * its first use, blocking (it synchronizes with the legacy stream, as the
 * per-thread stream does), and destroyed when the thread exits.  The
 * worker's own per-thread stream would be one for every thread of the
 * guest process: their work would be serialized, and a thread's host
 * function waiting for another thread's per-thread work would never end.
 * A context reset takes the host's streams: gen tells.
 */
typedef struct {
    uint64_t h[VCU_CU_MAX_DEVICES];
    unsigned int gen[VCU_CU_MAX_DEVICES];
} vcu__pts_t;

static __thread vcu__pts_t *vcu__pts;
static pthread_key_t vcu__pts_key;
static pthread_once_t vcu__pts_once = PTHREAD_ONCE_INIT;

static void vcu__pts_free(void *arg)
{
    vcu__pts_t *p = arg;

    for (unsigned int d = 0; d < VCU_CU_MAX_DEVICES; d++) {
        struct vcu_cu_u64_req r = { .value = p->h[d] };

        if (p->h[d] != 0 && p->gen[d] == __atomic_load_n(&vcu__drv.gen[d], __ATOMIC_ACQUIRE))
            vcu__call((int)d, VCU_OP_CU_STREAM_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    }
    free(p);
}

static void vcu__pts_init(void)
{
    if (pthread_key_create(&vcu__pts_key, vcu__pts_free) != 0)
        vcu__pts_key = (pthread_key_t)-1;
}

static CUresult vcu__per_thread(int dev, uint64_t *wire)
{
    struct vcu_cu_stream_create_req r;
    struct vcu_cu_u64_resp o;
    unsigned int gen = __atomic_load_n(&vcu__drv.gen[dev], __ATOMIC_ACQUIRE);
    CUresult e;

    if (vcu__pts == NULL) {
        pthread_once(&vcu__pts_once, vcu__pts_init);
        if (vcu__pts_key == (pthread_key_t)-1 || (vcu__pts = calloc(1, sizeof(*vcu__pts))) == NULL)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if (pthread_setspecific(vcu__pts_key, vcu__pts) != 0) {
            free(vcu__pts);
            vcu__pts = NULL;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (vcu__pts->h[dev] != 0 && vcu__pts->gen[dev] == gen) {
        *wire = vcu__pts->h[dev];
        return CUDA_SUCCESS;
    }
    memset(&r, 0, sizeof(r));
    e = vcu__call(dev, VCU_OP_CU_STREAM_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    vcu__pts->h[dev] = o.value;
    vcu__pts->gen[dev] = gen;
    *wire = o.value;
    return CUDA_SUCCESS;
}

CUresult vcu__stream(vcu__ctx_t *ctx, CUstream s, int ptsz, uint64_t *wire)
{
    vcu__stream_t *st = (vcu__stream_t *)s;

    if (s == NULL && !ptsz) {
        *wire = VCU_CU_STREAM_LEGACY;
        return CUDA_SUCCESS;
    }
    if (s == CU_STREAM_LEGACY) {
        *wire = VCU_CU_STREAM_LEGACY;
        return CUDA_SUCCESS;
    }
    if (s == NULL || s == CU_STREAM_PER_THREAD)
        return vcu__per_thread(ctx->dev, wire);
    if (!vcu__reg_has(st, VCU__K_STREAM) || st->dev != ctx->dev)
        return CUDA_ERROR_INVALID_HANDLE;
    *wire = st->h;
    return CUDA_SUCCESS;
}

static int vcu__stream_is_object(CUstream s)
{
    return s != NULL && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD;
}

/* The device and wire handle of a stream named on its own (synchronize,
 * query): a stream object needs no current context, the default streams
 * are the current context's. */
CUresult vcu__stream_alone(CUstream s, int ptsz, int *dev, uint64_t *wire)
{
    vcu__stream_t *st = (vcu__stream_t *)s;
    vcu__ctx_t *c;
    CUresult e;

    if (vcu__stream_is_object(s)) {
        e = vcu__check_init();
        if (e != CUDA_SUCCESS)
            return e;
        if (!vcu__reg_has(st, VCU__K_STREAM))
            return CUDA_ERROR_INVALID_HANDLE;
        *dev = st->dev;
        *wire = st->h;
        return CUDA_SUCCESS;
    }
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    *dev = c->dev;
    return vcu__stream(c, s, ptsz, wire);
}

/*
 * The context an asynchronous copy or memset on stream s runs in: s's
 * device's, whichever context is current, as NVIDIA's driver takes them
 * (cuFFT's multi-GPU copies name each GPU's stream from one context):
 * *c, the current context, stays where s is a default stream or of *c's
 * device, else becomes that device's primary context.
 */
CUresult vcu__stream_ctx(vcu__ctx_t **c, CUstream s, int ptsz, uint64_t *wire)
{
    int dev;
    CUresult e = vcu__stream_alone(s, ptsz, &dev, wire);

    if (e == CUDA_SUCCESS && dev != (*c)->dev)
        e = vcu__primary(dev, c);
    return e;
}

/* ---- streams ------------------------------------------------------------ */

/* The current context's stream priorities (the host side of
 * cuCtxGetStreamPriorityRange is generated; either pointer may be NULL
 * here). */
static CUresult vcu__prio_range(vcu__ctx_t *c, int *least, int *greatest)
{
    struct vcu_call_cuCtxGetStreamPriorityRange_req r;
    struct vcu_call_cuCtxGetStreamPriorityRange_resp o;
    CUresult e;

    VCU_CALL_INIT(r, cuCtxGetStreamPriorityRange);
    e = vcu__call(c->dev, VCU_OP_CU_CALL, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *least = (int)o.leastPriority;
    *greatest = (int)o.greatestPriority;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    vcu__ctx_t *c;
    int l, g;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        e = vcu__prio_range(c, &l, &g);
    if (e != CUDA_SUCCESS)
        return e;
    if (leastPriority != NULL)
        *leastPriority = l;
    if (greatestPriority != NULL)
        *greatestPriority = g;
    return CUDA_SUCCESS;
}

/* A stream of the current context; priority clamped to the context's
 * range as the driver clamps it (cuda.h), and kept for
 * cuStreamGetPriority. */
static CUresult vcu__stream_create(CUstream *phStream, unsigned int Flags, int priority,
                                   int prio_given)
{
    struct vcu_cu_stream_create_req r;
    vcu__stream_t *s;
    vcu__ctx_t *c;
    int least = 0, greatest = 0;
    CUresult e;

    if (phStream == NULL || (Flags & ~(unsigned int)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    if (prio_given) {
        e = vcu__prio_range(c, &least, &greatest);
        if (e != CUDA_SUCCESS)
            return e;
        priority = priority > least ? least : priority < greatest ? greatest : priority;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&r, 0, sizeof(r));
    r.flags = Flags;
    r.priority = (uint32_t)priority;
    s->flags = Flags;
    s->priority = priority;
    s->id = vcu__next_id();
    s->dev = c->dev;
    r.hdr.ctx = c->number;     /* goes with a created context */
    e = vcu__host_obj_new(s, VCU__K_STREAM, c->dev, VCU_OP_CU_STREAM_CREATE, &r, sizeof(r), NULL,
                          0, VCU_OP_CU_STREAM_DESTROY, &s->h);
    if (e != CUDA_SUCCESS) {
        free(s);
        return e;
    }
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return vcu__stream_create(phStream, Flags, 0, 0);
}

VCU__EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags,
                                                int priority)
{
    return vcu__stream_create(phStream, flags, priority, 1);
}

/* A stream's flags and priority as created; the default streams' are 0
 * (a blocking stream of the default priority). */
static CUresult vcu__stream_props(CUstream hStream, unsigned int *flags, int *priority)
{
    vcu__stream_t *s = (vcu__stream_t *)hStream;
    vcu__ctx_t *c;
    CUresult e;

    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
        e = vcu__cur(&c);
        if (e != CUDA_SUCCESS)
            return e;
        *flags = 0;
        *priority = 0;
        return CUDA_SUCCESS;
    }
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(s, VCU__K_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    *flags = s->flags;
    *priority = s->priority;
    return CUDA_SUCCESS;
}

/*
 * cuStreamCopyAttributes[_ptsz] (CU_CALL, generated wire): the driver
 * copies every stream attribute, the priority too (measured on the H100:
 * the copy's CU_LAUNCH_ATTRIBUTE_PRIORITY is then the source's), so the
 * record cuStreamGetPriority answers from takes the source's priority.
 */
static CUresult vcu__stream_copy_attrs(CUstream dst, CUstream src, int ptsz)
{
    struct vcu_call_cuStreamCopyAttributes_req r;
    struct vcu_call_cuStreamCopyAttributes_resp o;
    unsigned int fl;
    vcu__rc_t rc;
    int prio = 0;
    CUresult e;

    memset(&r, 0, sizeof(r));
    memset(&o, 0, sizeof(o));
    e = vcu__rc_at_obj(&rc, VCU__K_STREAM, (const void *)dst, ptsz);
    if (e == CUDA_SUCCESS)
        e = vcu__rc_handle(&rc, VCU__K_STREAM, (const void *)dst, ptsz, &r.dst);
    if (e == CUDA_SUCCESS)
        e = vcu__rc_handle(&rc, VCU__K_STREAM, (const void *)src, ptsz, &r.src);
    if (e == CUDA_SUCCESS)
        e = vcu__stream_props(src, &fl, &prio);
    if (e == CUDA_SUCCESS)
        e = vcu__rc_call(&rc, VCU_CALL_cuStreamCopyAttributes, &r.c, sizeof(r), &o.r, sizeof(o));
    if (e == CUDA_SUCCESS && dst != NULL && dst != CU_STREAM_LEGACY && dst != CU_STREAM_PER_THREAD)
        ((vcu__stream_t *)dst)->priority = prio;
    return e;
}

VCU__EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
    return vcu__stream_copy_attrs(dst, src, 0);
}

VCU__EXPORT CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src)
{
    return vcu__stream_copy_attrs(dst, src, 1);
}

VCU__EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    int prio;

    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__stream_props(hStream, flags, &prio);
}

VCU__EXPORT CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
    return cuStreamGetFlags(hStream, flags);
}

VCU__EXPORT CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    unsigned int flags;

    if (priority == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__stream_props(hStream, &flags, priority);
}

VCU__EXPORT CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
    return cuStreamGetPriority(hStream, priority);
}

/*
 * The device, context and id of a stream: a default stream is the current
 * context's; a stream object serves every context of its device, so its
 * context is the current one where that is of its device, else the
 * device's primary context.
 */
static CUresult vcu__stream_where(CUstream hStream, vcu__ctx_t **ctx, unsigned long long *id)
{
    vcu__stream_t *s = (vcu__stream_t *)hStream;
    vcu__ctx_t *c = NULL;
    CUresult e;

    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
        e = vcu__cur(&c);
        if (e != CUDA_SUCCESS)
            return e;
        *ctx = c;
        *id = hStream == CU_STREAM_PER_THREAD ? 2 : 1;
        return CUDA_SUCCESS;
    }
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(s, VCU__K_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    if (vcu__cur(&c) != CUDA_SUCCESS || c->dev != s->dev) {
        e = vcu__primary(s->dev, &c);
        if (e != CUDA_SUCCESS)
            return e;
    }
    *ctx = c;
    *id = s->id;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    unsigned long long id;
    vcu__ctx_t *c;
    CUresult e;

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__stream_where(hStream, &c, &id);
    if (e == CUDA_SUCCESS)
        *pctx = (CUcontext)c;
    return e;
}

VCU__EXPORT CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    return cuStreamGetCtx(hStream, pctx);
}

/* No green contexts here: *pGreenCtx is always NULL. */
VCU__EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
    CUresult e;

    if (pCtx == NULL || pGreenCtx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = cuStreamGetCtx(hStream, pCtx);
    if (e == CUDA_SUCCESS)
        *pGreenCtx = NULL;
    return e;
}

VCU__EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx,
                                            CUgreenCtx *pGreenCtx)
{
    return cuStreamGetCtx_v2(hStream, pCtx, pGreenCtx);
}

VCU__EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
    unsigned long long id;
    vcu__ctx_t *c;
    CUresult e;

    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__stream_where(hStream, &c, &id);
    if (e == CUDA_SUCCESS)
        *device = c->dev;
    return e;
}

VCU__EXPORT CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{
    return cuStreamGetDevice(hStream, device);
}

VCU__EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    vcu__ctx_t *c;

    if (streamId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__stream_where(hStream, &c, streamId);
}

/* NULL is the per-thread stream here. */
VCU__EXPORT CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
    return cuStreamGetId(hStream == NULL ? CU_STREAM_PER_THREAD : hStream, streamId);
}

/* A limit of the current context's device (CU_CTX_SET_LIMIT, charged on
 * the host; cuCtxGetLimit is a remote call). */
VCU__EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct vcu_cu_limit_req r;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    r.limit = (uint32_t)limit;
    r.value = value;
    return vcu__call(c->dev, VCU_OP_CU_CTX_SET_LIMIT, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    vcu__stream_t *s = (vcu__stream_t *)hStream;
    struct vcu_cu_u64_req r;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(s, VCU__K_STREAM))
        return CUDA_ERROR_INVALID_HANDLE;
    r.value = s->h;
    e = vcu__call(s->dev, VCU_OP_CU_STREAM_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__reg_del(s);
    free(s);
    return e;
}

VCU__EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

static CUresult vcu__stream_op(uint32_t op, CUstream hStream, int ptsz)
{
    struct vcu_cu_u64_req r;
    int dev;
    CUresult e = vcu__stream_alone(hStream, ptsz, &dev, &r.value);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__call(dev, op, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    return vcu__stream_op(VCU_OP_CU_STREAM_SYNCHRONIZE, hStream, 0);
}

VCU__EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return vcu__stream_op(VCU_OP_CU_STREAM_SYNCHRONIZE, hStream, 1);
}

/* ---- events -------------------------------------------------------------- */

static CUresult vcu__stream_wait(CUstream hStream, CUevent hEvent, unsigned int Flags, int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__event_t *v;
    int dev;
    CUresult e;

    if (Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    /* A stream object names its device, whichever context is current;
     * the event may be of another device than the stream, as cuda.h
     * allows: the session's events are all the worker's. */
    e = vcu__stream_alone(hStream, ptsz, &dev, &r.a);
    v = (vcu__event_t *)hEvent;
    if (e == CUDA_SUCCESS && !vcu__reg_has(v, VCU__K_EVENT))
        e = CUDA_ERROR_INVALID_HANDLE;
    if (e != CUDA_SUCCESS)
        return e;
    r.b = v->h;
    r.c = Flags;
    /* Both handles are known good here: nothing is left to fail at the call. */
    return vcu__call_async(dev, VCU_OP_CU_STREAM_WAIT_EVENT, &r, sizeof(r), NULL, 0);
}

VCU__EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return vcu__stream_wait(hStream, hEvent, Flags, 0);
}

VCU__EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                            unsigned int Flags)
{
    return vcu__stream_wait(hStream, hEvent, Flags, 1);
}

VCU__EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct vcu_cu_u64_req r = { .value = Flags };
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e;

    if (phEvent == NULL ||
        (Flags & ~(unsigned int)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                 CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    /* As NVIDIA's: an interprocess event must not time. */
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    v = calloc(1, sizeof(*v));
    if (v == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v->dev = c->dev;
    v->ipc = (Flags & CU_EVENT_INTERPROCESS) != 0;
    r.hdr.ctx = c->number;     /* goes with a created context */
    e = vcu__host_obj_new(v, VCU__K_EVENT, c->dev, VCU_OP_CU_EVENT_CREATE, &r, sizeof(r), NULL, 0,
                          VCU_OP_CU_EVENT_DESTROY, &v->h);
    if (e != CUDA_SUCCESS) {
        free(v);
        return e;
    }
    *phEvent = (CUevent)v;
    return CUDA_SUCCESS;
}

/* flags: CU_EVENT_RECORD_DEFAULT, or CU_EVENT_RECORD_EXTERNAL (in a
 * capture, an event record node of the graph; outside one the driver
 * refuses it, CUDA_ERROR_ILLEGAL_STATE on the H100, so it is sent
 * synchronously: the refusal is this call's, as natively). */
static CUresult vcu__event_record(CUevent hEvent, CUstream hStream, unsigned int flags, int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__event_t *v;
    int dev;
    CUresult e;

    if (flags & ~(unsigned int)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    /* A stream object names its device, whichever context is current
     * (p2pBandwidthLatencyTest records device j's event on device j's
     * stream with device i current); the event must be of that device.
     * A default stream is the current context's. */
    e = vcu__stream_alone(hStream, ptsz, &dev, &r.b);
    v = (vcu__event_t *)hEvent;
    if (e == CUDA_SUCCESS && !vcu__reg_has(v, VCU__K_EVENT))
        e = CUDA_ERROR_INVALID_HANDLE;
    if (e == CUDA_SUCCESS && v->dev != dev)
        e = vcu__stream_is_object(hStream) ? CUDA_ERROR_INVALID_HANDLE
                                           : CUDA_ERROR_INVALID_CONTEXT;
    if (e != CUDA_SUCCESS)
        return e;
    r.a = v->h;
    r.c = flags;
    if ((flags & CU_EVENT_RECORD_EXTERNAL) || v->ipc)
        return vcu__call(dev, VCU_OP_CU_EVENT_RECORD, &r, sizeof(r), NULL, 0, NULL, 0);
    return vcu__call_async(dev, VCU_OP_CU_EVENT_RECORD, &r, sizeof(r), NULL, 0);
}

VCU__EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return vcu__event_record(hEvent, hStream, CU_EVENT_RECORD_DEFAULT, 0);
}

VCU__EXPORT CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return vcu__event_record(hEvent, hStream, CU_EVENT_RECORD_DEFAULT, 1);
}

VCU__EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return vcu__event_record(hEvent, hStream, flags, 0);
}

VCU__EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                 unsigned int flags)
{
    return vcu__event_record(hEvent, hStream, flags, 1);
}

/* An event object on its own (synchronize, destroy): its device's, with
 * no current context needed, as natively. */
static CUresult vcu__event_alone(CUevent ev, vcu__event_t **out)
{
    vcu__event_t *v = (vcu__event_t *)ev;
    CUresult e = vcu__check_init();

    if (e == CUDA_SUCCESS && !vcu__reg_has(v, VCU__K_EVENT))
        e = CUDA_ERROR_INVALID_HANDLE;
    if (e == CUDA_SUCCESS)
        *out = v;
    return e;
}

VCU__EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    struct vcu_cu_u64_req r;
    vcu__event_t *v;
    CUresult e = vcu__event_alone(hEvent, &v);

    if (e != CUDA_SUCCESS)
        return e;
    r.value = v->h;
    return vcu__call(v->dev, VCU_OP_CU_EVENT_SYNCHRONIZE, &r, sizeof(r), NULL, 0, NULL, 0);
}

/* The first ABI, the same as the remote cuEventElapsedTime_v2's. */
VCU__EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

VCU__EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    struct vcu_cu_u64_req r;
    vcu__event_t *v;
    CUresult e = vcu__event_alone(hEvent, &v);

    if (e != CUDA_SUCCESS)
        return e;
    r.value = v->h;
    e = vcu__call(v->dev, VCU_OP_CU_EVENT_DESTROY, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__reg_del(v);
    free(v);
    return e;
}

VCU__EXPORT CUresult cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

/* ---- stream memory operations ---------------------------------------------- */

/*
 * cuStreamBatchMemOp_v2: checked here as cuda.h defines the operations
 * (an operation or a flag it does not define: CUDA_ERROR_INVALID_VALUE),
 * sent as CU_STREAM_MEMOPS, checked again by the host, addresses too
 * (the session's device memory).  v1, the unversioned ABI: the same
 * operations but the barrier (v2 only), and writes may carry
 * CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER, which v2 does not take: such
 * a write is fenced as any other, a stronger order than asked for.
 */
static CUresult vcu__memops(CUstream stream, unsigned int count,
                            const CUstreamBatchMemOpParams *ops, unsigned int flags, int ptsz,
                            int v1)
{
    const unsigned int wait_flags = CU_STREAM_WAIT_VALUE_NOR | CU_STREAM_WAIT_VALUE_FLUSH;
    struct {
        struct vcu_cu_memops_req r;
        struct vcu_cu_memop op[VCU_CU_MEMOPS_MAX];
    } q;
    uint64_t wire;
    int dev;
    CUresult e = vcu__stream_alone(stream, ptsz, &dev, &wire);

    if (e != CUDA_SUCCESS)
        return e;
    if (flags != 0 || count > VCU_CU_MEMOPS_MAX || (count > 0 && ops == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    if (count == 0)
        return CUDA_SUCCESS;
    memset(&q, 0, sizeof(q.r) + count * sizeof(q.op[0]));
    for (unsigned int i = 0; i < count; i++) {
        const CUstreamBatchMemOpParams *p = &ops[i];
        struct vcu_cu_memop *w = &q.op[i];

        w->type = (uint32_t)p->operation;
        switch (p->operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            w->address = p->waitValue.address;
            w->value = p->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ? p->waitValue.value
                                                                       : p->waitValue.value64;
            w->flags = p->waitValue.flags;
            if (w->flags & ~wait_flags)
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            w->address = p->writeValue.address;
            w->value = p->operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ? p->writeValue.value
                                                                        : p->writeValue.value64;
            w->flags = p->writeValue.flags;
            if (v1)
                w->flags &= ~(unsigned int)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
            if (w->flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
            if (p->flushRemoteWrites.flags != 0)
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_STREAM_MEM_OP_BARRIER:
            w->flags = p->memoryBarrier.flags;
            if (v1 || (w->flags != CU_STREAM_MEMORY_BARRIER_TYPE_SYS &&
                       w->flags != CU_STREAM_MEMORY_BARRIER_TYPE_GPU))
                return CUDA_ERROR_INVALID_VALUE;
            break;
        default:
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    q.r.stream = wire;
    q.r.count = count;
    return vcu__call(dev, VCU_OP_CU_STREAM_MEMOPS, &q,
                     (uint32_t)(sizeof(q.r) + count * sizeof(q.op[0])), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuStreamBatchMemOp_v2(CUstream stream, unsigned int count,
                                           CUstreamBatchMemOpParams *paramArray,
                                           unsigned int flags)
{
    return vcu__memops(stream, count, paramArray, flags, 0, 0);
}

VCU__EXPORT CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count,
                                                CUstreamBatchMemOpParams *paramArray,
                                                unsigned int flags)
{
    return vcu__memops(stream, count, paramArray, flags, 1, 0);
}

VCU__EXPORT CUresult cuStreamBatchMemOp(CUstream stream, unsigned int count,
                                        CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
    return vcu__memops(stream, count, paramArray, flags, 0, 1);
}

VCU__EXPORT CUresult cuStreamBatchMemOp_ptsz(CUstream stream, unsigned int count,
                                             CUstreamBatchMemOpParams *paramArray,
                                             unsigned int flags)
{
    return vcu__memops(stream, count, paramArray, flags, 1, 1);
}

/* The unversioned single operations: the _v2 calls (generated), a
 * write's NO_MEMORY_BARRIER dropped as in vcu__memops. */
VCU__EXPORT CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags)
{
    return cuStreamWaitValue32_v2(stream, addr, value, flags);
}

VCU__EXPORT CUresult cuStreamWaitValue32_ptsz(CUstream stream, CUdeviceptr addr,
                                              cuuint32_t value, unsigned int flags)
{
    return cuStreamWaitValue32_v2_ptsz(stream, addr, value, flags);
}

VCU__EXPORT CUresult cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                         unsigned int flags)
{
    return cuStreamWaitValue64_v2(stream, addr, value, flags);
}

VCU__EXPORT CUresult cuStreamWaitValue64_ptsz(CUstream stream, CUdeviceptr addr,
                                              cuuint64_t value, unsigned int flags)
{
    return cuStreamWaitValue64_v2_ptsz(stream, addr, value, flags);
}

VCU__EXPORT CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                          unsigned int flags)
{
    return cuStreamWriteValue32_v2(stream, addr, value,
                                   flags & ~(unsigned int)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
}

VCU__EXPORT CUresult cuStreamWriteValue32_ptsz(CUstream stream, CUdeviceptr addr,
                                               cuuint32_t value, unsigned int flags)
{
    return cuStreamWriteValue32_v2_ptsz(
        stream, addr, value, flags & ~(unsigned int)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
}

VCU__EXPORT CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                          unsigned int flags)
{
    return cuStreamWriteValue64_v2(stream, addr, value,
                                   flags & ~(unsigned int)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
}

VCU__EXPORT CUresult cuStreamWriteValue64_ptsz(CUstream stream, CUdeviceptr addr,
                                               cuuint64_t value, unsigned int flags)
{
    return cuStreamWriteValue64_v2_ptsz(
        stream, addr, value, flags & ~(unsigned int)CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER);
}
