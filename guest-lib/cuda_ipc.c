/*
 * libcuda.so.1: CUDA IPC between processes of the VM.  A handle is 64
 * bytes the host made (struct vcu_cu_ipc_handle): the name of a record
 * of the VM's, which any process of the VM may pass to another, as it
 * would pass the driver's; the driver's own handle stays on the host
 * (host-backend/worker/cuda_ipc.c, docs/design.md "CUDA IPC").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- shareable handles (POSIX descriptors): cuda_vmm.c, cuda_pool.c ---- */

int vcu__prog_of(uint32_t vord)
{
    int i;

    for (i = 0; i < vcu__drv.ndev; i++)
        if (vcu__drv.dev[i].vord == vord)
            return i;
    return -1;
}

/*
 * Whether device dev offers POSIX descriptors by attr
 * (HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: 1, or
 * MEMPOOL_SUPPORTED_HANDLE_TYPES: a mask; the POSIX bit is 1 in both).
 * The host offers them with its daemon's keep, not in a worker started
 * by hand nor in packed mode.  Why not is said once per call (once: the
 * caller's flag).
 */
CUresult vcu__share_on(const char *call, CUdevice_attribute attr, int dev, int *once)
{
    int v = 0;
    CUresult e = cuDeviceGetAttribute(&v, attr, dev);

    if (e != CUDA_SUCCESS)
        return e;
    if (!(v & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        vcu__log_once(once, "libcuda (virtio-cuda): %s is not supported: this device offers no "
                            "shareable handles (its host runs no vcu-daemon keep for it)\n",
                      call);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return CUDA_SUCCESS;
}

/* The device of the calling thread's context, else 0: for the calls that
 * need none (the host runs them in that device's context). */
int vcu__share_dev(void)
{
    vcu__ctx_t *c;

    return vcu__cur(&c) == CUDA_SUCCESS ? c->dev : 0;
}

CUresult vcu__share_fd(const struct vcu_cu_ipc_handle *h, int *out)
{
    int fd = memfd_create("vcu-shareable", MFD_CLOEXEC | MFD_ALLOW_SEALING), err;

    if (fd >= 0 && pwrite(fd, h, sizeof(*h), 0) == (ssize_t)sizeof(*h) &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0) {
        *out = fd;
        return CUDA_SUCCESS;
    }
    err = errno;
    if (fd >= 0)
        close(fd);
    return err == EMFILE || err == ENFILE || err == ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY
                                                           : CUDA_ERROR_OPERATING_SYSTEM;
}

CUresult vcu__share_read(void *osHandle, struct vcu_cu_ipc_handle *h)
{
    intptr_t v = (intptr_t)osHandle;
    struct stat st;

    if (v < 0 || v > INT32_MAX || fstat((int)v, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_size != (off_t)sizeof(*h) || pread((int)v, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
