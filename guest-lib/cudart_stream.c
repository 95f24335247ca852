/*
 * Streams, events and host callbacks.
 *
 * Host functions (cudaLaunchHostFunc, cudaStreamAddCallback, graph host
 * nodes) run in the guest: the host stream reaches a marker, and a guest
 * thread blocked in CU_CALLBACK_WAIT gets its cookie back, runs the
 * function and answers CU_CALLBACK_DONE(cookie), which lets the stream go
 * on.  A cookie names a slot of vcu__cbs with a generation, so stale or
 * forged cookies are refused.
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_int.h"

/* Stream ids: 0 is the legacy stream; per-thread streams and created
 * streams take the next value. */
static unsigned long long vcu__stream_ids = 1;
static __thread unsigned long long vcu__ptds_id;

cudaError_t vcu__stream(cudaStream_t s, int ptsz, int *dev, uint64_t *wire)
{
    vcu__stream_t *st;

    if (s == NULL) {
        *dev = vcu__cur_dev;
        *wire = ptsz ? VCU_CU_STREAM_PER_THREAD : VCU_CU_STREAM_LEGACY;
        return cudaSuccess;
    }
    if (s == cudaStreamLegacy) {
        *dev = vcu__cur_dev;
        *wire = VCU_CU_STREAM_LEGACY;
        return cudaSuccess;
    }
    if (s == cudaStreamPerThread) {
        *dev = vcu__cur_dev;
        *wire = VCU_CU_STREAM_PER_THREAD;
        return cudaSuccess;
    }
    if (!vcu__reg_has(s, VCU__H_STREAM))
        return cudaErrorInvalidResourceHandle;
    st = (vcu__stream_t *)s;
    *dev = st->dev;
    *wire = st->h;
    return cudaSuccess;
}

static cudaError_t vcu__stream_create(cudaStream_t *out, unsigned int flags, int priority)
{
    struct vcu_cu_stream_create_req r;
    struct vcu_cu_u64_resp o;
    vcu__stream_t *st;
    int dev;
    cudaError_t e;

    if (out == NULL || (flags & ~(unsigned int)cudaStreamNonBlocking))
        return cudaErrorInvalidValue;
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return e;
    memset(&r, 0, sizeof(r));
    r.flags = flags;
    r.priority = (uint32_t)priority;
    e = vcu__call(dev, VCU_OP_CU_STREAM_CREATE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return e;
    st = calloc(1, sizeof(*st));
    if (st == NULL || vcu__reg_add(st, VCU__H_STREAM) != 0) {
        struct vcu_cu_u64_req d = { .value = o.value };

        free(st);
        vcu__call(dev, VCU_OP_CU_STREAM_DESTROY, 0, &d, sizeof(d), NULL, 0, NULL, 0);
        return cudaErrorMemoryAllocation;
    }
    st->dev = dev;
    st->h = o.value;
    st->flags = flags;
    st->priority = priority;
    st->id = __atomic_fetch_add(&vcu__stream_ids, 1, __ATOMIC_RELAXED);
    st->sync_policy = cudaSyncPolicyAuto;
    *out = (cudaStream_t)st;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return vcu__err(vcu__stream_create(pStream, cudaStreamDefault, 0));
}

VCU__EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    return vcu__err(vcu__stream_create(pStream, flags, 0));
}

VCU__EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                     int priority)
{
    return vcu__err(vcu__stream_create(pStream, flags, priority));
}

VCU__EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    struct vcu_cu_u64_req r;
    vcu__stream_t *st = (vcu__stream_t *)stream;
    cudaError_t e;

    if (!vcu__reg_has(stream, VCU__H_STREAM))
        return vcu__err(cudaErrorInvalidResourceHandle);
    vcu__reg_del(stream);
    r.value = st->h;
    e = vcu__check_dev(st->dev);
    if (e == cudaSuccess)
        e = vcu__call(st->dev, VCU_OP_CU_STREAM_DESTROY, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    free(st);
    return vcu__err(e);
}

static cudaError_t vcu__stream_op(cudaStream_t stream, int ptsz, uint32_t op)
{
    struct vcu_cu_u64_req r;
    int dev;
    cudaError_t e = vcu__stream(stream, ptsz, &dev, &r.value);

    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__call(dev, op, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e == cudaSuccess)
        e = vcu__managed_sync(dev, r.value, 0);
    return e;
}

VCU__EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    return vcu__err(vcu__stream_op(stream, 0, VCU_OP_CU_STREAM_SYNCHRONIZE));
}

VCU__EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
VCU__EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    return vcu__err(vcu__stream_op(stream, 1, VCU_OP_CU_STREAM_SYNCHRONIZE));
}

/* cuStreamQuery, a generated call; success waited as a synchronize does. */
static cudaError_t vcu__stream_query(cudaStream_t stream, int ptsz)
{
    struct vcu_call_cuStreamQuery_req r;
    int dev;
    cudaError_t e;

    VCU_CALL_INIT(r, cuStreamQuery);
    e = vcu__stream(stream, ptsz, &dev, &r.hStream);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e == cudaSuccess)
        e = vcu__managed_sync(dev, r.hStream, 0);
    return e;
}

VCU__EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t e = vcu__stream_query(stream, 0);

    /* cudaErrorNotReady is an answer, not an error: it does not become
     * the last error. */
    return e == cudaErrorNotReady ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
VCU__EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    cudaError_t e = vcu__stream_query(stream, 1);

    return e == cudaErrorNotReady ? e : vcu__err(e);
}

typedef struct vcu__event_s {
    int dev;
    uint64_t h;
    unsigned int flags;
} vcu__event_t;

static cudaError_t vcu__event(cudaEvent_t ev, vcu__event_t **out)
{
    if (!vcu__reg_has(ev, VCU__H_EVENT))
        return cudaErrorInvalidResourceHandle;
    *out = (vcu__event_t *)ev;
    return vcu__check_dev((*out)->dev);
}

cudaError_t vcu__event_host(cudaEvent_t ev, int *dev, uint64_t *h)
{
    vcu__event_t *e;
    cudaError_t r = vcu__event(ev, &e);

    if (r != cudaSuccess)
        return r;
    *dev = e->dev;
    *h = e->h;
    return cudaSuccess;
}

static cudaError_t vcu__wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
                                   int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__event_t *ev;
    int dev;
    cudaError_t e = vcu__stream(stream, ptsz, &dev, &r.a);

    if (e == cudaSuccess)
        e = vcu__event(event, &ev);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    r.b = ev->h;
    r.c = flags;
    return vcu__call(dev, VCU_OP_CU_STREAM_WAIT_EVENT, 1, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                            unsigned int flags)
{
    return vcu__err(vcu__wait_event(stream, event, flags, 0));
}

VCU__EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                 unsigned int flags);
VCU__EXPORT cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                                 unsigned int flags)
{
    return vcu__err(vcu__wait_event(stream, event, flags, 1));
}

static cudaError_t vcu__stream_get(cudaStream_t s, int ptsz, vcu__stream_t **st, int *dev)
{
    uint64_t w;
    cudaError_t e = vcu__stream(s, ptsz, dev, &w);

    *st = e == cudaSuccess && w >= VCU_CU_HANDLE_MIN ? (vcu__stream_t *)s : NULL;
    return e;
}

static cudaError_t vcu__stream_priority(cudaStream_t s, int *priority, int ptsz)
{
    vcu__stream_t *st;
    int dev;
    cudaError_t e;

    if (priority == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream_get(s, ptsz, &st, &dev);
    if (e == cudaSuccess)
        *priority = st != NULL ? st->priority : 0;
    return e;
}

VCU__EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    return vcu__err(vcu__stream_priority(hStream, priority, 0));
}

VCU__EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int *priority);
VCU__EXPORT cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int *priority)
{
    return vcu__err(vcu__stream_priority(hStream, priority, 1));
}

static cudaError_t vcu__stream_flags(cudaStream_t s, unsigned int *flags, int ptsz)
{
    vcu__stream_t *st;
    int dev;
    cudaError_t e;

    if (flags == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream_get(s, ptsz, &st, &dev);
    if (e == cudaSuccess)
        *flags = st != NULL ? st->flags : cudaStreamDefault;
    return e;
}

VCU__EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
    return vcu__err(vcu__stream_flags(hStream, flags, 0));
}

VCU__EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags);
VCU__EXPORT cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags)
{
    return vcu__err(vcu__stream_flags(hStream, flags, 1));
}

static cudaError_t vcu__stream_device(cudaStream_t s, int *device, int ptsz)
{
    vcu__stream_t *st;
    cudaError_t e;

    if (device == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream_get(s, ptsz, &st, device);
    return e;
}

VCU__EXPORT cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device)
{
    return vcu__err(vcu__stream_device(hStream, device, 0));
}

VCU__EXPORT cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device);
VCU__EXPORT cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device)
{
    return vcu__err(vcu__stream_device(hStream, device, 1));
}

static cudaError_t vcu__stream_id(cudaStream_t s, unsigned long long *id, int ptsz)
{
    vcu__stream_t *st;
    uint64_t w;
    int dev;
    cudaError_t e;

    if (id == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream(s, ptsz, &dev, &w);
    if (e != cudaSuccess)
        return e;
    st = w >= VCU_CU_HANDLE_MIN ? (vcu__stream_t *)s : NULL;
    if (st != NULL) {
        *id = st->id;
    } else if (w == VCU_CU_STREAM_PER_THREAD) {
        if (vcu__ptds_id == 0)
            vcu__ptds_id = __atomic_fetch_add(&vcu__stream_ids, 1, __ATOMIC_RELAXED);
        *id = vcu__ptds_id;
    } else {
        *id = 0;
    }
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId)
{
    return vcu__err(vcu__stream_id(hStream, streamId, 0));
}

VCU__EXPORT cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId);
VCU__EXPORT cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId)
{
    return vcu__err(vcu__stream_id(hStream, streamId, 1));
}

/*
 * Stream attributes are the host stream's: cuStreamGetAttribute and
 * cuStreamSetAttribute (CU_CALL), which check the attribute and value as
 * NVIDIA's driver does (cuda_calls.list names the attributes the host
 * passes on; others are cudaErrorNotSupported).  The priority, which
 * cudaStreamGetPriority answers from the stream's record, may be set only
 * to the value it has.
 */
static cudaError_t vcu__stream_get_attr(cudaStream_t s, cudaLaunchAttributeID attr,
                                        cudaLaunchAttributeValue *v, int ptsz)
{
    struct vcu_call_cuStreamGetAttribute_req r;
    struct vcu_call_cuStreamGetAttribute_resp o;
    uint64_t ws;
    int dev;
    cudaError_t e;

    _Static_assert(sizeof(o.value_out) >= sizeof(*v), "cudaLaunchAttributeValue");
    if (v == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream(s, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    VCU_CALL_INIT(r, cuStreamGetAttribute);
    r.hStream = ws;
    r.attr = (uint32_t)attr;        /* cudaLaunchAttributeID values equal CUlaunchAttributeID's */
    e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        memcpy(v, o.value_out, sizeof(*v));
    return e;
}

static cudaError_t vcu__stream_set_attr(cudaStream_t s, cudaLaunchAttributeID attr,
                                        const cudaLaunchAttributeValue *v, int ptsz)
{
    struct vcu_call_cuStreamSetAttribute_req r;
    struct vcu_call_cuStreamSetAttribute_resp o;
    vcu__stream_t *st;
    uint64_t ws;
    int dev;
    cudaError_t e;

    _Static_assert(sizeof(r.value) >= sizeof(*v), "cudaLaunchAttributeValue");
    if (v == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream(s, ptsz, &dev, &ws);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    st = ws >= VCU_CU_HANDLE_MIN ? (vcu__stream_t *)s : NULL;
    if (attr == cudaLaunchAttributePriority && v->priority == (st != NULL ? st->priority : 0))
        return cudaSuccess;
    VCU_CALL_INIT(r, cuStreamSetAttribute);
    r.hStream = ws;
    r.attr = (uint32_t)attr;
    memcpy(r.value, v, sizeof(*v));
    e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess && st != NULL && attr == cudaLaunchAttributeSynchronizationPolicy)
        st->sync_policy = v->syncPolicy;
    return e;
}

VCU__EXPORT cudaError_t cudaStreamGetAttribute(cudaStream_t hStream, cudaLaunchAttributeID attr,
                                               cudaLaunchAttributeValue *value_out)
{
    cudaError_t e = vcu__stream_get_attr(hStream, attr, value_out, 0);

    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream,
                                                    cudaLaunchAttributeID attr,
                                                    cudaLaunchAttributeValue *value_out);
VCU__EXPORT cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream,
                                                    cudaLaunchAttributeID attr,
                                                    cudaLaunchAttributeValue *value_out)
{
    cudaError_t e = vcu__stream_get_attr(hStream, attr, value_out, 1);

    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaStreamSetAttribute(cudaStream_t hStream, cudaLaunchAttributeID attr,
                                               const cudaLaunchAttributeValue *value)
{
    cudaError_t e = vcu__stream_set_attr(hStream, attr, value, 0);

    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream,
                                                    cudaLaunchAttributeID attr,
                                                    const cudaLaunchAttributeValue *value);
VCU__EXPORT cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream,
                                                    cudaLaunchAttributeID attr,
                                                    const cudaLaunchAttributeValue *value)
{
    cudaError_t e = vcu__stream_set_attr(hStream, attr, value, 1);

    return e == cudaSuccess ? e : vcu__err(e);
}

/*
 * The host's cuStreamCopyAttributes (CU_CALL) copies every attribute, the
 * priority too (NVIDIA's driver, measured), so the records follow.
 */
static cudaError_t vcu__stream_copy_attrs(cudaStream_t dst, cudaStream_t src, int ptsz)
{
    struct vcu_call_cuStreamCopyAttributes_req r;
    struct vcu_call_cuStreamCopyAttributes_resp o;
    vcu__stream_t *sd, *ss;
    int dev, sdev;
    cudaError_t e;

    VCU_CALL_INIT(r, cuStreamCopyAttributes);
    e = vcu__stream(dst, ptsz, &dev, &r.dst);
    if (e == cudaSuccess)
        e = vcu__stream(src, ptsz, &sdev, &r.src);
    if (e == cudaSuccess && sdev != dev)
        e = cudaErrorInvalidResourceHandle;
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    sd = r.dst >= VCU_CU_HANDLE_MIN ? (vcu__stream_t *)dst : NULL;
    ss = r.src >= VCU_CU_HANDLE_MIN ? (vcu__stream_t *)src : NULL;
    e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess && sd != NULL) {
        sd->priority = ss != NULL ? ss->priority : 0;
        sd->sync_policy = ss != NULL ? ss->sync_policy : cudaSyncPolicyAuto;
    }
    return e;
}

VCU__EXPORT cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src)
{
    cudaError_t e = vcu__stream_copy_attrs(dst, src, 0);

    return e == cudaSuccess ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src);
VCU__EXPORT cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src)
{
    cudaError_t e = vcu__stream_copy_attrs(dst, src, 1);

    return e == cudaSuccess ? e : vcu__err(e);
}

/* ---- events ------------------------------------------------------------- */

VCU__EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_u64_resp o;
    vcu__event_t *ev;
    int dev;
    cudaError_t e;

    if (event == NULL || (flags & ~(unsigned int)(cudaEventBlockingSync | cudaEventDisableTiming |
                                                   cudaEventInterprocess)))
        return vcu__err(cudaErrorInvalidValue);
    if (flags & cudaEventInterprocess)
        VCU__NOT_SUPPORTED("cudaEventCreateWithFlags(cudaEventInterprocess)",
                           "CUDA IPC comes through NVIDIA's runtime only (libcuda.so.1 has it)");
    e = vcu__enter(&dev);
    if (e != cudaSuccess)
        return vcu__err(e);
    r.value = flags;    /* cudaEvent* flags equal CU_EVENT_* */
    e = vcu__call(dev, VCU_OP_CU_EVENT_CREATE, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return vcu__err(e);
    ev = calloc(1, sizeof(*ev));
    if (ev == NULL || vcu__reg_add(ev, VCU__H_EVENT) != 0) {
        struct vcu_cu_u64_req d = { .value = o.value };

        free(ev);
        vcu__call(dev, VCU_OP_CU_EVENT_DESTROY, 0, &d, sizeof(d), NULL, 0, NULL, 0);
        return vcu__err(cudaErrorMemoryAllocation);
    }
    ev->dev = dev;
    ev->h = o.value;
    ev->flags = flags;
    *event = (cudaEvent_t)ev;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

static cudaError_t vcu__event_record(cudaEvent_t event, cudaStream_t stream, unsigned int flags,
                                     int ptsz)
{
    struct vcu_cu_pair_req r;
    vcu__event_t *ev;
    int dev;
    cudaError_t e = vcu__event(event, &ev);

    if (e == cudaSuccess)
        e = vcu__stream(stream, ptsz, &dev, &r.b);
    if (e != cudaSuccess)
        return e;
    if (dev != ev->dev)
        return cudaErrorInvalidResourceHandle;
    r.a = ev->h;
    r.c = flags;
    return vcu__call(dev, VCU_OP_CU_EVENT_RECORD, 1, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    return vcu__err(vcu__event_record(event, stream, 0, 0));
}

VCU__EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    return vcu__err(vcu__event_record(event, stream, 0, 1));
}

VCU__EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                 unsigned int flags)
{
    return vcu__err(vcu__event_record(event, stream, flags, 0));
}

VCU__EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                                      unsigned int flags);
VCU__EXPORT cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                                      unsigned int flags)
{
    return vcu__err(vcu__event_record(event, stream, flags, 1));
}

/* CU_EVENT_SYNCHRONIZE, or (op CU_CALL) the generated cuEventQuery. */
static cudaError_t vcu__event_op(cudaEvent_t event, uint32_t op)
{
    struct vcu_call_cuEventQuery_req q;
    struct vcu_cu_u64_req r;
    vcu__event_t *ev;
    cudaError_t e = vcu__event(event, &ev);

    if (e != cudaSuccess)
        return e;
    r.value = ev->h;
    if (op == VCU_OP_CU_CALL) {
        VCU_CALL_INIT(q, cuEventQuery);
        q.hEvent = ev->h;
        e = vcu__call(ev->dev, op, 0, &q, sizeof(q), NULL, 0, NULL, 0);
    } else {
        e = vcu__call(ev->dev, op, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    }
    /* The event's stream is not known here: no stream matches. */
    if (e == cudaSuccess)
        e = vcu__managed_sync(ev->dev, UINT64_MAX, 0);
    return e;
}

VCU__EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    return vcu__err(vcu__event_op(event, VCU_OP_CU_EVENT_SYNCHRONIZE));
}

VCU__EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t e = vcu__event_op(event, VCU_OP_CU_CALL);

    return e == cudaErrorNotReady ? e : vcu__err(e);
}

VCU__EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    struct vcu_cu_u64_req r;
    vcu__event_t *ev = (vcu__event_t *)event;
    cudaError_t e;

    if (!vcu__reg_has(event, VCU__H_EVENT))
        return vcu__err(cudaErrorInvalidResourceHandle);
    vcu__reg_del(event);
    r.value = ev->h;
    e = vcu__check_dev(ev->dev);
    if (e == cudaSuccess)
        e = vcu__call(ev->dev, VCU_OP_CU_EVENT_DESTROY, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    free(ev);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    struct vcu_call_cuEventElapsedTime_v2_req r;
    struct vcu_call_cuEventElapsedTime_v2_resp o;
    vcu__event_t *a, *b;
    uint32_t bits;
    cudaError_t e;

    if (ms == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__event(start, &a);
    if (e == cudaSuccess)
        e = vcu__event(end, &b);
    if (e != cudaSuccess)
        return vcu__err(e);
    VCU_CALL_INIT(r, cuEventElapsedTime_v2);
    r.hStart = a->h;
    r.hEnd = b->h;
    e = vcu__call(a->dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaErrorNotReady)
        return e;
    if (e != cudaSuccess)
        return vcu__err(e);
    bits = (uint32_t)o.pMilliseconds;
    memcpy(ms, &bits, sizeof(*ms));
    return cudaSuccess;
}

/* ---- host callbacks ----------------------------------------------------- */

typedef struct vcu__cb_s {
    uint32_t gen;                   /* bumped on free; in the cookie */
    int used;
    int persistent;                 /* graph host node: runs many times */
    void (*fn)(void *);
    cudaStreamCallback_t cb;
    cudaStream_t stream;
    void *arg;
} vcu__cb_t;

#define VCU__MAX_CBS 4096
static pthread_mutex_t vcu__cb_mu = PTHREAD_MUTEX_INITIALIZER;   /* protects vcu__cbs */
static vcu__cb_t vcu__cbs[VCU__MAX_CBS];
static pthread_once_t vcu__cb_once = PTHREAD_ONCE_INIT;
static int vcu__cb_thread_ok;

uint64_t vcu__cb_new(void (*fn)(void *), cudaStreamCallback_t cb, cudaStream_t s, void *arg,
                     int persistent)
{
    uint64_t cookie = 0;

    pthread_mutex_lock(&vcu__cb_mu);
    for (uint32_t i = 0; i < VCU__MAX_CBS; i++) {
        vcu__cb_t *c = &vcu__cbs[i];

        if (c->used)
            continue;
        c->used = 1;
        c->persistent = persistent;
        c->fn = fn;
        c->cb = cb;
        c->stream = s;
        c->arg = arg;
        /* Never below VCU_CU_HANDLE_MIN, never 0. */
        cookie = ((uint64_t)(c->gen + 1) << 32) | (i + VCU_CU_HANDLE_MIN);
        break;
    }
    pthread_mutex_unlock(&vcu__cb_mu);
    return cookie;
}

static int vcu__cb_take(uint64_t cookie, vcu__cb_t *out)
{
    uint64_t idx = (cookie & 0xffffffffu) - VCU_CU_HANDLE_MIN;
    int ok = 0;

    if ((cookie & 0xffffffffu) < VCU_CU_HANDLE_MIN || idx >= VCU__MAX_CBS)
        return 0;
    pthread_mutex_lock(&vcu__cb_mu);
    if (vcu__cbs[idx].used && vcu__cbs[idx].gen + 1 == (uint32_t)(cookie >> 32)) {
        *out = vcu__cbs[idx];
        ok = 1;
        if (!vcu__cbs[idx].persistent) {
            vcu__cbs[idx].used = 0;
            vcu__cbs[idx].gen++;
        }
    }
    pthread_mutex_unlock(&vcu__cb_mu);
    return ok;
}

void vcu__cb_free(uint64_t cookie)
{
    uint64_t idx = (cookie & 0xffffffffu) - VCU_CU_HANDLE_MIN;

    if ((cookie & 0xffffffffu) < VCU_CU_HANDLE_MIN || idx >= VCU__MAX_CBS)
        return;
    pthread_mutex_lock(&vcu__cb_mu);
    if (vcu__cbs[idx].used && vcu__cbs[idx].gen + 1 == (uint32_t)(cookie >> 32)) {
        vcu__cbs[idx].used = 0;
        vcu__cbs[idx].gen++;
    }
    pthread_mutex_unlock(&vcu__cb_mu);
}

/* One per connection: waits for the host to reach a host function. */
static void *vcu__cb_thread(void *arg)
{
    (void)arg;
    for (;;) {
        struct vcu_cu_hdr h;
        struct vcu_cu_u64_resp o;
        struct vcu_cu_u64_req d;
        vcu__cb_t c;
        cudaError_t e;

        e = vcu__call(0, VCU_OP_CU_CALLBACK_WAIT, 0, &h, sizeof(h), NULL, 0, &o, sizeof(o));
        if (e != cudaSuccess) {
            static int once;

            vcu__log_once(&once, "virtio-cuda: host callbacks stopped: %s\n",
                          cudaGetErrorString(e));
            return NULL;
        }
        if (vcu__cb_take(o.value, &c)) {
            if (c.fn != NULL)
                c.fn(c.arg);
            else if (c.cb != NULL)
                c.cb(c.stream, cudaSuccess, c.arg);
        }
        /* Answer even an unknown cookie, so the host stream never hangs. */
        d.value = o.value;
        vcu__call(0, VCU_OP_CU_CALLBACK_DONE, 0, &d, sizeof(d), NULL, 0, NULL, 0);
    }
    return NULL;
}

static void vcu__cb_start_once(void)
{
    pthread_attr_t at;
    pthread_t t;

    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    vcu__cb_thread_ok = pthread_create(&t, &at, vcu__cb_thread, NULL) == 0;
    pthread_attr_destroy(&at);
}

cudaError_t vcu__cb_start(void)
{
    pthread_once(&vcu__cb_once, vcu__cb_start_once);
    return vcu__cb_thread_ok ? cudaSuccess : cudaErrorMemoryAllocation;
}

static cudaError_t vcu__host_func(cudaStream_t stream, void (*fn)(void *),
                                  cudaStreamCallback_t cb, void *arg, int ptsz)
{
    struct vcu_cu_pair_req r;
    int dev;
    cudaError_t e;

    if (fn == NULL && cb == NULL)
        return cudaErrorInvalidValue;
    e = vcu__stream(stream, ptsz, &dev, &r.a);
    if (e == cudaSuccess)
        e = vcu__check_dev(dev);
    if (e == cudaSuccess)
        e = vcu__cb_start();
    if (e != cudaSuccess)
        return e;
    /* In a capture the call becomes a host node of the graph, which runs
     * it each time the graph runs: the record stays, as a graph host
     * node's does. */
    r.b = vcu__cb_new(fn, cb, stream, arg, vcu__stream_capturing(dev, r.a));
    if (r.b == 0)
        return cudaErrorMemoryAllocation;
    r.c = 0;
    /* Stream and callback are checked: sent without waiting.  A host
     * failure shows at the next synchronizing call (its slot then stays
     * taken). */
    e = vcu__call(dev, VCU_OP_CU_STREAM_HOST_FUNC, 1, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != cudaSuccess)
        vcu__cb_free(r.b);
    return e;
}

VCU__EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    return vcu__err(vcu__host_func(stream, fn, NULL, userData, 0));
}

VCU__EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                                void *userData);
VCU__EXPORT cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
                                                void *userData)
{
    return vcu__err(vcu__host_func(stream, fn, NULL, userData, 1));
}

VCU__EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                              void *userData, unsigned int flags)
{
    if (flags != 0)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__host_func(stream, NULL, callback, userData, 0));
}

VCU__EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream,
                                                   cudaStreamCallback_t callback,
                                                   void *userData, unsigned int flags);
VCU__EXPORT cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream,
                                                   cudaStreamCallback_t callback,
                                                   void *userData, unsigned int flags)
{
    if (flags != 0)
        return vcu__err(cudaErrorInvalidValue);
    return vcu__err(vcu__host_func(stream, NULL, callback, userData, 1));
}
