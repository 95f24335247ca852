/*
 * Errors of the runtime: the translations into cudaError_t, the thread's
 * last error, sticky context errors, error names and strings.  The handle
 * registry and vcu__log_once() are shared with libcuda (vcu_common.c).
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_errlist.h"
#include "cudart_int.h"
#include "cudart_unsupported.h"

static __thread cudaError_t vcu__last;

int vcu__is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorIllegalAddress:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorContained:
        return 1;
    default:
        return 0;
    }
}

cudaError_t vcu__from_cu(uint32_t r)
{
    switch (r) {
#define VCU__CU_CASE(name, val, msg) case (val):
        VCU__CUDA_ERROR_MAP(VCU__CU_CASE)
#undef VCU__CU_CASE
        /* Since CUDA 10.1 every CUresult with a runtime twin has its number. */
        return (cudaError_t)r;
    case 202:   /* CUDA_ERROR_CONTEXT_ALREADY_CURRENT */
        return cudaErrorDeviceUninitialized;
    default:
        return cudaErrorUnknown;
    }
}

cudaError_t vcu__from_vcu(int err)
{
    switch (err) {
    case VCU_OK:
        return cudaSuccess;
    case VCU_EINVAL:
    case VCU_E2BIG:
    case VCU_EFAULT:
        return cudaErrorInvalidValue;
    case VCU_ENOTSUP:
        return cudaErrorNotSupported;
    case VCU_ENOMEM:
        return cudaErrorMemoryAllocation;
    case VCU_EVERSION:
        return cudaErrorInsufficientDriver;
    case VCU_EBUSY:
        return cudaErrorDevicesUnavailable;
    case VCU_ENODEV:
        return cudaErrorNoDevice;
    case VCU_ENOSESSION:
    case VCU_ECANCELED:
        return cudaErrorContextIsDestroyed;
    case VCU_ERANGE:
    case VCU_EIO:
    default:
        return cudaErrorUnknown;
    }
}

cudaError_t vcu__err_dev(int dev, cudaError_t e)
{
    if (e != cudaSuccess) {
        vcu__last = e;
        if (vcu__is_sticky(e) && dev >= 0 && dev < vcu__rt.ndev)
            __atomic_store_n(&vcu__rt.dev[dev].sticky, e, __ATOMIC_RELAXED);
    }
    return e;
}

cudaError_t vcu__err(cudaError_t e)
{
    return vcu__err_dev(vcu__cur_dev, e);
}

cudaError_t vcu__unsupported(int *once, const char *name, const char *why)
{
    vcu__log_once(once, "virtio-cuda: %s is not supported%s%s\n", name, why[0] ? ": " : "",
                  why);
    return vcu__err(cudaErrorNotSupported);
}

VCU__EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = vcu__last;
    int d = vcu__cur_dev;

    vcu__last = cudaSuccess;
    if (e == cudaSuccess && d >= 0 && d < vcu__rt.ndev)
        e = __atomic_load_n(&vcu__rt.dev[d].sticky, __ATOMIC_RELAXED);
    return e;
}

VCU__EXPORT cudaError_t cudaPeekAtLastError(void)
{
    cudaError_t e = vcu__last;
    int d = vcu__cur_dev;

    if (e == cudaSuccess && d >= 0 && d < vcu__rt.ndev)
        e = __atomic_load_n(&vcu__rt.dev[d].sticky, __ATOMIC_RELAXED);
    return e;
}

VCU__EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    switch ((int)error) {
#define VCU__NAME_CASE(name, val, msg) case (val): return #name;
        VCU__CUDA_ERROR_MAP(VCU__NAME_CASE)
#undef VCU__NAME_CASE
    }
    return "cudaErrorUnknown";
}

VCU__EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    switch ((int)error) {
#define VCU__STR_CASE(name, val, msg) case (val): return msg;
        VCU__CUDA_ERROR_MAP(VCU__STR_CASE)
#undef VCU__STR_CASE
    }
    return "unrecognized error code";
}
