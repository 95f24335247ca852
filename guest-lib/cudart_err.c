/*
 * Errors of the runtime: the translations into cudaError_t, the thread's
 * last error, sticky context errors, error names and strings; also the
 * handle registry every entry point validates handles with.
 */
#include <stdarg.h>
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

void vcu__log_once(int *flag, const char *fmt, ...)
{
    va_list ap;

    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED))
        return;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
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

/*
 * Handle registry: an open-addressing hash set of (pointer, kind).  A
 * handle the program passes is looked up by value before it is ever
 * dereferenced, so garbage and destroyed handles fail cleanly.
 */
typedef struct vcu__slot_s {
    uintptr_t p;                    /* 0 empty, 1 deleted */
    int kind;
} vcu__slot_t;

static pthread_mutex_t vcu__reg_mu = PTHREAD_MUTEX_INITIALIZER;  /* protects the set */
static vcu__slot_t *vcu__set;
static size_t vcu__set_cap, vcu__set_used;

static size_t vcu__hash(uintptr_t p)
{
    uint64_t x = (uint64_t)p * 0x9e3779b97f4a7c15ULL;

    return (size_t)(x >> 17);
}

static int vcu__set_grow(void)
{
    size_t ncap = vcu__set_cap ? vcu__set_cap * 2 : 256, i, j;
    vcu__slot_t *n = calloc(ncap, sizeof(*n));

    if (n == NULL)
        return -1;
    for (i = 0; i < vcu__set_cap; i++) {
        if (vcu__set[i].p <= 1)
            continue;
        for (j = vcu__hash(vcu__set[i].p) & (ncap - 1); n[j].p; j = (j + 1) & (ncap - 1))
            ;
        n[j] = vcu__set[i];
    }
    free(vcu__set);
    vcu__set = n;
    vcu__set_cap = ncap;
    return 0;
}

static vcu__slot_t *vcu__set_find(uintptr_t p)
{
    size_t j, n;

    if (vcu__set_cap == 0)
        return NULL;
    for (j = vcu__hash(p) & (vcu__set_cap - 1), n = 0; n < vcu__set_cap;
         j = (j + 1) & (vcu__set_cap - 1), n++) {
        if (vcu__set[j].p == p)
            return &vcu__set[j];
        if (vcu__set[j].p == 0)
            return NULL;
    }
    return NULL;
}

int vcu__reg_add(const void *p, int kind)
{
    uintptr_t v = (uintptr_t)p;
    size_t j;
    int ret = 0;

    pthread_mutex_lock(&vcu__reg_mu);
    if ((vcu__set_used + 1) * 2 > vcu__set_cap && vcu__set_grow() != 0) {
        ret = VCU_ENOMEM;
        goto out;
    }
    for (j = vcu__hash(v) & (vcu__set_cap - 1); vcu__set[j].p > 1; j = (j + 1) & (vcu__set_cap - 1))
        ;
    if (vcu__set[j].p == 0)
        vcu__set_used++;
    vcu__set[j].p = v;
    vcu__set[j].kind = kind;
out:
    pthread_mutex_unlock(&vcu__reg_mu);
    return ret;
}

int vcu__reg_has(const void *p, int kind)
{
    vcu__slot_t *s;
    int ret;

    if ((uintptr_t)p <= 1)
        return 0;
    pthread_mutex_lock(&vcu__reg_mu);
    s = vcu__set_find((uintptr_t)p);
    ret = s != NULL && s->kind == kind;
    pthread_mutex_unlock(&vcu__reg_mu);
    return ret;
}

void vcu__reg_del(const void *p)
{
    vcu__slot_t *s;

    if ((uintptr_t)p <= 1)
        return;
    pthread_mutex_lock(&vcu__reg_mu);
    s = vcu__set_find((uintptr_t)p);
    if (s != NULL)
        s->p = 1;
    pthread_mutex_unlock(&vcu__reg_mu);
}
