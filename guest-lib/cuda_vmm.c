/*
 * libcuda.so.1: virtual memory management (cuMemCreate, cuMemAddressReserve,
 * cuMemMap, cuMemSetAccess and the calls around them), as PyTorch's
 * expandable segments and NCCL use it, over CU_MEM_* (vcu_proto.h).
 *
 * An allocation handle (CUmemGenericAllocationHandle) is the host's
 * session handle, which the host looks up and checks at each use;
 * addresses are the device's own, as cuMemAlloc's.  Devices in locations
 * are this program's ordinals, sent as the VM's virtual ones.  Nothing is
 * kept here: every call is the host's to judge.
 *
 * Shareable handles: a POSIX file descriptor the host's driver made is a
 * descriptor of the host's worker, meaningless in the guest.  The host
 * hands it to its daemon's keep for the VM's other workers and answers
 * 64 bytes that name it there (struct vcu_cu_ipc_handle, docs/design.md
 * "CUDA IPC"); the program gets a sealed memfd holding them, which it
 * passes to another process of the VM as it would the driver's
 * descriptor.  Fabric and Win32 handles the host does not offer.
 */
#include <string.h>

#include "cuda_int.h"

#define VCU__VMM_FD CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR

/* A program ordinal -> the VM's virtual one. */
static CUresult vcu__vmm_dev(int dev, uint32_t *vord)
{
    CUresult e = vcu__check_dev(dev);

    if (e == CUDA_SUCCESS)
        *vord = vcu__drv.dev[dev].vord;
    return e;
}

static void vcu__vmm_refuse_host(const char *call)
{
    static int once;

    vcu__log_once(&once, "libcuda (virtio-cuda): %s: host memory locations "
                         "(CU_MEM_LOCATION_TYPE_HOST*) are not supported\n", call);
}

/* The wire's properties from prop; *dev the program ordinal of its device. */
static CUresult vcu__vmm_prop(const char *call, const CUmemAllocationProp *prop,
                              struct vcu_cu_mem_prop *out, int *dev)
{
    CUresult e;

    if (prop == NULL || prop->win32HandleMetaData != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, sizeof(*out));
    out->type = (uint32_t)prop->type;
    out->handle_types = (uint32_t)prop->requestedHandleTypes;
    out->loc_type = (uint32_t)prop->location.type;
    out->compression = prop->allocFlags.compressionType;
    out->rdma = prop->allocFlags.gpuDirectRDMACapable;
    out->usage = prop->allocFlags.usage;
    if (prop->requestedHandleTypes & ~(CUmemAllocationHandleType)VCU__VMM_FD) {
        static int once;

        vcu__log_once(&once, "libcuda (virtio-cuda): %s: requested handle types 0x%x are not "
                             "supported (only CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)\n",
                      call, (unsigned int)prop->requestedHandleTypes);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        vcu__vmm_refuse_host(call);
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    e = vcu__vmm_dev(prop->location.id, &out->loc_id);
    if (e == CUDA_SUCCESS)
        *dev = prop->location.id;
    return e;
}

VCU__EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                                   const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    struct vcu_cu_vmm_req r;
    struct vcu_cu_vmm_resp o;
    int dev = 0;
    CUresult e;

    if (granularity == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    e = vcu__vmm_prop("cuMemGetAllocationGranularity", prop, &r.prop, &dev);
    if (e != CUDA_SUCCESS)
        return e;
    r.flags = (uint64_t)option;
    e = vcu__call(dev, VCU_OP_CU_MEM_GRANULARITY, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS)
        *granularity = (size_t)o.value;
    return e;
}

VCU__EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    struct vcu_cu_vmm_req r;
    struct vcu_cu_vmm_resp o;
    int dev = 0;
    CUresult e;

    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    e = vcu__vmm_prop("cuMemCreate", prop, &r.prop, &dev);
    if (e != CUDA_SUCCESS)
        return e;
    r.size = size;
    r.flags = flags;
    e = vcu__call(dev, VCU_OP_CU_MEM_CREATE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS)
        *handle = (CUmemGenericAllocationHandle)o.value;
    return e;
}

/* A call on an address or a handle runs in the current context's device,
 * or device 0's with none current: the driver's virtual memory calls need
 * no context (memMapIPCDrv releases its allocations with none).  The host
 * checks the handle itself, whichever device it is of. */
static CUresult vcu__vmm_call(uint32_t op, struct vcu_cu_vmm_req *r, struct vcu_cu_vmm_resp *o)
{
    struct vcu_cu_vmm_resp local;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    /* The reply is the opcode's whole struct, whatever the caller reads. */
    return vcu__call(vcu__share_dev(), op, r, sizeof(*r), NULL, 0, o != NULL ? o : &local,
                     sizeof(local));
}

VCU__EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    struct vcu_cu_vmm_req r;

    memset(&r, 0, sizeof(r));
    r.handle = handle;
    return vcu__vmm_call(VCU_OP_CU_MEM_RELEASE, &r, NULL);
}

VCU__EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                         CUdeviceptr addr, unsigned long long flags)
{
    struct vcu_cu_vmm_req r;
    struct vcu_cu_vmm_resp o;
    CUresult e;

    if (ptr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.size = size;
    r.offset = alignment;
    r.handle = addr;
    r.flags = flags;
    e = vcu__vmm_call(VCU_OP_CU_MEM_ADDRESS_RESERVE, &r, &o);
    if (e == CUDA_SUCCESS)
        *ptr = (CUdeviceptr)o.value;
    return e;
}

VCU__EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    struct vcu_cu_vmm_req r;

    memset(&r, 0, sizeof(r));
    r.ptr = ptr;
    r.size = size;
    return vcu__vmm_call(VCU_OP_CU_MEM_ADDRESS_FREE, &r, NULL);
}

VCU__EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    struct vcu_cu_vmm_req r;

    memset(&r, 0, sizeof(r));
    r.ptr = ptr;
    r.size = size;
    r.offset = offset;
    r.handle = handle;
    r.flags = flags;
    return vcu__vmm_call(VCU_OP_CU_MEM_MAP, &r, NULL);
}

VCU__EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    struct vcu_cu_vmm_req r;

    memset(&r, 0, sizeof(r));
    r.ptr = ptr;
    r.size = size;
    return vcu__vmm_call(VCU_OP_CU_MEM_UNMAP, &r, NULL);
}

VCU__EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                    size_t count)
{
    struct vcu_cu_vmm_req r;
    size_t i;
    CUresult e;

    if (desc == NULL || count == 0 || count > VCU_CU_MAX_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.ptr = ptr;
    r.size = size;
    r.count = (uint32_t)count;
    for (i = 0; i < count; i++) {
        r.access[i].loc_type = (uint32_t)desc[i].location.type;
        r.access[i].flags = (uint32_t)desc[i].flags;
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
            e = vcu__vmm_dev(desc[i].location.id, &r.access[i].loc_id);
            if (e != CUDA_SUCCESS)
                return e;
        } else if (desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST ||
                   desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                   desc[i].location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
            vcu__vmm_refuse_host("cuMemSetAccess");
            return CUDA_ERROR_NOT_SUPPORTED;
        } else {
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return vcu__vmm_call(VCU_OP_CU_MEM_SET_ACCESS, &r, NULL);
}

VCU__EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                    CUdeviceptr ptr)
{
    struct vcu_cu_vmm_req r;
    struct vcu_cu_vmm_resp o;
    CUresult e;

    if (flags == NULL || location == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.ptr = ptr;
    r.prop.loc_type = (uint32_t)location->type;
    if (location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
        e = vcu__vmm_dev(location->id, &r.prop.loc_id);
        if (e != CUDA_SUCCESS)
            return e;
    } else {
        return CUDA_ERROR_INVALID_VALUE;
    }
    e = vcu__vmm_call(VCU_OP_CU_MEM_GET_ACCESS, &r, &o);
    if (e == CUDA_SUCCESS)
        *flags = o.value;
    return e;
}

VCU__EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                           CUmemGenericAllocationHandle handle)
{
    struct vcu_cu_vmm_req r;
    struct vcu_cu_vmm_resp o;
    int dev;
    CUresult e;

    if (prop == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.handle = handle;
    e = vcu__vmm_call(VCU_OP_CU_MEM_GET_PROPS, &r, &o);
    if (e != CUDA_SUCCESS)
        return e;
    dev = vcu__prog_of(o.prop.loc_id);
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof(*prop));
    prop->type = (CUmemAllocationType)o.prop.type;
    prop->requestedHandleTypes = (CUmemAllocationHandleType)o.prop.handle_types;
    prop->location.type = (CUmemLocationType)o.prop.loc_type;
    prop->location.id = dev;
    prop->allocFlags.compressionType = o.prop.compression;
    prop->allocFlags.gpuDirectRDMACapable = o.prop.rdma;
    prop->allocFlags.usage = o.prop.usage;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    struct vcu_cu_vmm_req r;
    struct vcu_cu_vmm_resp o;
    CUresult e;

    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.ptr = (uint64_t)(uintptr_t)addr;
    e = vcu__vmm_call(VCU_OP_CU_MEM_RETAIN, &r, &o);
    if (e == CUDA_SUCCESS)
        *handle = (CUmemGenericAllocationHandle)o.value;
    return e;
}

static const char *vcu__vmm_htype(CUmemAllocationHandleType t)
{
    switch (t) {
    case CU_MEM_HANDLE_TYPE_NONE:
        return "CU_MEM_HANDLE_TYPE_NONE";
    case CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR:
        return "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR";
    case CU_MEM_HANDLE_TYPE_WIN32:
        return "CU_MEM_HANDLE_TYPE_WIN32";
    case CU_MEM_HANDLE_TYPE_WIN32_KMT:
        return "CU_MEM_HANDLE_TYPE_WIN32_KMT";
    case CU_MEM_HANDLE_TYPE_FABRIC:
        return "CU_MEM_HANDLE_TYPE_FABRIC";
    default:
        return "an unknown handle type";
    }
}

/* Said once per call (imp: the import) and handle type a program tries. */
static CUresult vcu__vmm_no_share(const char *call, int imp, CUmemAllocationHandleType t)
{
    static int once[2][5];
    int k = t == CU_MEM_HANDLE_TYPE_NONE ? 0 : t == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ? 1
          : t == CU_MEM_HANDLE_TYPE_WIN32 ? 2 : t == CU_MEM_HANDLE_TYPE_FABRIC ? 3 : 4;

    vcu__log_once(&once[imp][k],
                  "libcuda (virtio-cuda): %s with %s is not supported (only "
                  "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)\n",
                  call, vcu__vmm_htype(t));
    return CUDA_ERROR_NOT_SUPPORTED;
}

VCU__EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                                  CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags)
{
    static int once;
    struct vcu_cu_u64_req r = { .value = handle };
    struct vcu_cu_ipc_handle_resp o;
    int dev = vcu__share_dev();
    CUresult e;

    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return vcu__vmm_no_share("cuMemExportToShareableHandle", 0, handleType);
    if (shareableHandle == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e == CUDA_SUCCESS)
        e = vcu__share_on("cuMemExportToShareableHandle",
                          CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev,
                          &once);
    if (e == CUDA_SUCCESS)
        e = vcu__call(dev, VCU_OP_CU_MEM_EXPORT_SHAREABLE, &r, sizeof(r), NULL, 0, &o,
                      sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__share_fd(&o.h, (int *)shareableHandle);
}

/* The descriptor's 64 bytes, as cuMemExportToShareableHandle wrote them;
 * anything else is not such a handle (the host judges what they name). */
VCU__EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                    void *osHandle,
                                                    CUmemAllocationHandleType shHandleType)
{
    static int once;
    struct vcu_cu_ipc_open_req r;
    struct vcu_cu_u64_resp o;
    int dev = vcu__share_dev();
    CUresult e;

    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return vcu__vmm_no_share("cuMemImportFromShareableHandle", 1, shHandleType);
    if (handle == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e == CUDA_SUCCESS)
        e = vcu__share_on("cuMemImportFromShareableHandle",
                          CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev,
                          &once);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&r, 0, sizeof(r));
    e = vcu__share_read(osHandle, &r.h);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call(dev, VCU_OP_CU_MEM_IMPORT_SHAREABLE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *handle = (CUmemGenericAllocationHandle)o.value;
    return CUDA_SUCCESS;
}
