/*
 * libcuda.so.1: CUDA IPC between processes of the VM.  A handle is 64
 * bytes the host made (struct vcu_cu_ipc_handle): the name of a record
 * of the VM's, which any process of the VM may pass to another, as it
 * would pass the driver's; the driver's own handle stays on the host
 * (host-backend/worker/cuda_ipc.c, docs/design.md "CUDA IPC").
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

_Static_assert(sizeof(CUipcMemHandle) == sizeof(struct vcu_cu_ipc_handle) &&
                   sizeof(CUipcEventHandle) == sizeof(struct vcu_cu_ipc_handle),
               "a guest IPC handle fills the driver's");

VCU__EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    struct vcu_cu_u64_req r = { .value = dptr };
    struct vcu_cu_ipc_handle_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (pHandle == NULL || dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__call(c->dev, VCU_OP_CU_IPC_GET_MEM_HANDLE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    memcpy(pHandle->reserved, &o.h, sizeof(o.h));
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                           unsigned int Flags)
{
    struct vcu_cu_ipc_open_req r;
    struct vcu_cu_u64_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (pdptr == NULL || (Flags & ~(unsigned int)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    memcpy(&r.h, handle.reserved, sizeof(r.h));
    r.flags = Flags;
    e = vcu__call(c->dev, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *pdptr = (CUdeviceptr)o.value;
    return CUDA_SUCCESS;
}

/* The entry point of drivers before CUDA 11's _v2, the same call. */
VCU__EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                        unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

VCU__EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    struct vcu_cu_u64_req r = { .value = dptr };
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__call(c->dev, VCU_OP_CU_IPC_CLOSE_MEM_HANDLE, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_ipc_handle_resp o;
    vcu__event_t *v = (vcu__event_t *)event;
    CUresult e;

    if (pHandle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!vcu__reg_has(v, VCU__K_EVENT))
        return CUDA_ERROR_INVALID_HANDLE;
    r.value = v->h;
    e = vcu__call(v->dev, VCU_OP_CU_IPC_GET_EVENT_HANDLE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    memcpy(pHandle->reserved, &o.h, sizeof(o.h));
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    struct vcu_cu_ipc_open_req r;
    vcu__event_t *v;
    vcu__ctx_t *c;
    CUresult e;

    if (phEvent == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    v = calloc(1, sizeof(*v));
    if (v == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v->dev = c->dev;
    v->ipc = 1;
    memset(&r, 0, sizeof(r));
    memcpy(&r.h, handle.reserved, sizeof(r.h));
    e = vcu__host_obj_new(v, VCU__K_EVENT, c->dev, VCU_OP_CU_IPC_OPEN_EVENT_HANDLE, &r, sizeof(r),
                          NULL, 0, VCU_OP_CU_EVENT_DESTROY, &v->h);
    if (e != CUDA_SUCCESS) {
        free(v);
        return e;
    }
    *phEvent = (CUevent)v;
    return CUDA_SUCCESS;
}
