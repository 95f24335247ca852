/*
 * libcuda.so.1: what the generated remote calls (gen-cuda.py's forwarders
 * for the "remote" names of cuda_calls.list) need by hand: the one place
 * that turns each kind of handle into its device and wire handle, and the
 * CU_CALL request itself.  The host checks all of it again.
 */
#include <string.h>

#include "cuda_int.h"

CUresult vcu__rc_at_ctx(vcu__rc_t *rc)
{
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS)
        rc->dev = c->dev;
    return e;
}

CUresult vcu__rc_at_dev(vcu__rc_t *rc, CUdevice dev)
{
    CUresult e = vcu__check_dev(dev);

    if (e == CUDA_SUCCESS)
        rc->dev = dev;
    return e;
}

/* Graph objects answer a bad handle with CUDA_ERROR_INVALID_VALUE, as
 * cuda_graph.c and cuda_pool.c do (and NVIDIA's driver). */
static CUresult vcu__rc_bad(int kind)
{
    return kind == VCU__K_STREAM || kind == VCU__K_EVENT || kind == VCU__K_FUNCTION
               ? CUDA_ERROR_INVALID_HANDLE
               : CUDA_ERROR_INVALID_VALUE;
}

/* The device and wire handle of an object (not a default stream, not a
 * CUkernel). */
static CUresult vcu__rc_obj(int kind, const void *h, int *dev, uint64_t *wire)
{
    if (!vcu__reg_has(h, kind))
        return vcu__rc_bad(kind);
    switch (kind) {
    case VCU__K_STREAM:
        *dev = ((const vcu__stream_t *)h)->dev;
        *wire = ((const vcu__stream_t *)h)->h;
        return CUDA_SUCCESS;
    case VCU__K_EVENT:
        *dev = ((const vcu__event_t *)h)->dev;
        *wire = ((const vcu__event_t *)h)->h;
        return CUDA_SUCCESS;
    case VCU__K_FUNCTION:
        *dev = ((const vcu__func_t *)h)->mod->dev;
        *wire = ((const vcu__func_t *)h)->h;
        return CUDA_SUCCESS;
    case VCU__K_GRAPH:
        *dev = ((const vcu__graph_t *)h)->dev;
        *wire = ((const vcu__graph_t *)h)->h;
        return CUDA_SUCCESS;
    case VCU__K_GEXEC:
        *dev = ((const vcu__gexec_t *)h)->dev;
        *wire = ((const vcu__gexec_t *)h)->h;
        return CUDA_SUCCESS;
    case VCU__K_GNODE:
        *dev = ((const vcu__gnode_t *)h)->g->dev;
        *wire = ((const vcu__gnode_t *)h)->h;
        return CUDA_SUCCESS;
    case VCU__K_POOL:
        *dev = ((const vcu__pool_t *)h)->dev;
        *wire = ((const vcu__pool_t *)h)->h;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_HANDLE;
}

static int vcu__rc_default_stream(int kind, const void *h)
{
    return kind == VCU__K_STREAM &&
           (h == NULL || h == (const void *)CU_STREAM_LEGACY || h == (const void *)CU_STREAM_PER_THREAD);
}

CUresult vcu__rc_at_obj(vcu__rc_t *rc, int kind, const void *h, int ptsz)
{
    uint64_t wire;
    CUresult e = vcu__check_init();

    (void)ptsz;
    if (e != CUDA_SUCCESS)
        return e;
    if (vcu__rc_default_stream(kind, h) || (kind == VCU__K_FUNCTION && vcu__reg_has(h, VCU__K_KERNEL)))
        return vcu__rc_at_ctx(rc);
    return vcu__rc_obj(kind, h, &rc->dev, &wire);
}

CUresult vcu__rc_handle(vcu__rc_t *rc, int kind, const void *h, int ptsz, uint64_t *wire)
{
    vcu__func_t *f;
    vcu__ctx_t *c;
    CUresult e;
    int dev;

    if (vcu__rc_default_stream(kind, h)) {
        e = vcu__cur(&c);
        if (e != CUDA_SUCCESS)
            return e;
        if (c->dev != rc->dev)
            return CUDA_ERROR_INVALID_CONTEXT;
        return vcu__stream(c, (CUstream)h, ptsz, wire);
    }
    if (kind == VCU__K_FUNCTION) {
        e = vcu__func_arg((CUfunction)h, &f);
        if (e != CUDA_SUCCESS)
            return e;
        h = f;
    }
    e = vcu__rc_obj(kind, h, &dev, wire);
    if (e == CUDA_SUCCESS && dev != rc->dev)
        return vcu__rc_bad(kind);
    return e;
}

CUresult vcu__rc_device(CUdevice dev, uint64_t *wire)
{
    CUresult e = vcu__check_dev(dev);

    if (e == CUDA_SUCCESS)
        *wire = vcu__drv.dev[dev].vord;
    return e;
}

CUresult vcu__rc_call(vcu__rc_t *rc, uint32_t call, struct vcu_cu_call_req *req, uint32_t req_len,
                      struct vcu_cu_resp *resp, uint32_t resp_cap)
{
    req->call = call;
    req->hash = VCU_CALLS_HASH;
    return vcu__call(rc->dev, VCU_OP_CU_CALL, req, req_len, NULL, 0, resp, resp_cap);
}
