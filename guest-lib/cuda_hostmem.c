/*
 * libcuda.so.1: page-locked host memory (cuMemHostAlloc, cuMemAllocHost,
 * cuMemFreeHost, cuMemHostGetFlags): the transport's pinned memory, as
 * our runtime's cudaMallocHost, which copies may use after their call
 * returns.  The device does not map host memory here
 * (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY is 0): CU_MEMHOSTALLOC_DEVICEMAP
 * is refused.  Unified copies (cuMemcpy, cuMemcpyAsync) tell host from
 * device memory here.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

typedef struct vcu__hostmem_s {
    void *p;
    size_t size;
    unsigned int flags;
    struct vcu__hostmem_s *next;
} vcu__hostmem_t;

static pthread_mutex_t vcu__hm_mu = PTHREAD_MUTEX_INITIALIZER;    /* protects vcu__hms */
static vcu__hostmem_t *vcu__hms;

VCU__EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    vcu__hostmem_t *h;
    vcu__ctx_t *c;
    void *p;
    int stable;
    CUresult e;

    if (pp == NULL || bytesize == 0 ||
        (Flags & ~(unsigned int)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                 CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    if (Flags & CU_MEMHOSTALLOC_DEVICEMAP) {
        static int logged;

        vcu__log_once(&logged, "libcuda (virtio-cuda): mapped host memory "
                               "(CU_MEMHOSTALLOC_DEVICEMAP) is not supported\n");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (vcu_conn_hostmem_alloc(vcu__drv.conn, bytesize, &p, &stable) != 0) {
        free(h);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    h->p = p;
    h->size = bytesize;
    h->flags = Flags;
    pthread_mutex_lock(&vcu__hm_mu);
    h->next = vcu__hms;
    vcu__hms = h;
    pthread_mutex_unlock(&vcu__hm_mu);
    *pp = p;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

/* Waits for every device's work first, as NVIDIA's does: copies from
 * the memory may still be running on the host after their call. */
VCU__EXPORT CUresult cuMemFreeHost(void *p)
{
    vcu__hostmem_t **pp, *h = NULL;
    CUresult e = vcu__check_init(), r = CUDA_SUCCESS;

    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__hm_mu);
    for (pp = &vcu__hms; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->p == p) {
            h = *pp;
            *pp = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&vcu__hm_mu);
    if (h == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (int d = 0; d < vcu__drv.ndev; d++) {
        struct vcu_cu_hdr hdr;

        e = vcu__call(d, VCU_OP_CU_CTX_SYNCHRONIZE, &hdr, sizeof(hdr), NULL, 0, NULL, 0);
        if (r == CUDA_SUCCESS)
            r = e;
    }
    vcu_conn_hostmem_free(vcu__drv.conn, h->p, h->size);
    free(h);
    return r;
}

/* The flags it was allocated with; p may point inside the allocation. */
VCU__EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    vcu__hostmem_t *h;
    CUresult e;

    if (pFlags == NULL || p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__hm_mu);
    for (h = vcu__hms; h != NULL; h = h->next)
        if ((uintptr_t)p >= (uintptr_t)h->p && (uintptr_t)p - (uintptr_t)h->p < h->size)
            break;
    if (h != NULL)
        *pFlags = h->flags;
    pthread_mutex_unlock(&vcu__hm_mu);
    return h != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- unified copies ------------------------------------------------------ */

/*
 * Device memory or not: this library's pinned memory is host memory;
 * anything else is device memory where the host's driver knows an
 * allocation holding it (CU_MEM_GET_RANGE), else pageable host memory.
 */
static CUresult vcu__is_device(int dev, CUdeviceptr p, int *is_dev)
{
    struct vcu_cu_u64_req r = { .value = p };
    struct vcu_cu_mem_range_resp o;
    vcu__hostmem_t *h;
    CUresult e;

    pthread_mutex_lock(&vcu__hm_mu);
    for (h = vcu__hms; h != NULL; h = h->next)
        if (p >= (uintptr_t)h->p && p - (uintptr_t)h->p < h->size)
            break;
    pthread_mutex_unlock(&vcu__hm_mu);
    if (h != NULL) {
        *is_dev = 0;
        return CUDA_SUCCESS;
    }
    e = vcu__call(dev, VCU_OP_CU_MEM_GET_RANGE, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_ERROR_NOT_FOUND || e == CUDA_ERROR_INVALID_VALUE) {
        *is_dev = 0;
        return CUDA_SUCCESS;
    }
    if (e != CUDA_SUCCESS)
        return e;
    *is_dev = 1;
    return CUDA_SUCCESS;
}

static CUresult vcu__copy_unified(CUdeviceptr dst, CUdeviceptr src, size_t n, int async,
                                  CUstream stream, int ptsz)
{
    int ddev, sdev;
    vcu__ctx_t *c;
    CUresult e;

    if (dst == 0 || src == 0)
        return n == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__is_device(c->dev, dst, &ddev);
    if (e == CUDA_SUCCESS)
        e = vcu__is_device(c->dev, src, &sdev);
    if (e != CUDA_SUCCESS)
        return e;
    if (ddev && sdev)
        return vcu__copy(VCU_OP_CU_MEMCPY_DTOD, dst, src, NULL, n, async, stream, ptsz);
    if (ddev)
        return vcu__copy(VCU_OP_CU_MEMCPY_HTOD, dst, 0, (void *)(uintptr_t)src, n, async,
                         stream, ptsz);
    if (sdev)
        return vcu__copy(VCU_OP_CU_MEMCPY_DTOH, 0, src, (void *)(uintptr_t)dst, n, async,
                         stream, ptsz);
    /* Host to host: after the stream's earlier work, as in stream order. */
    if (async) {
        e = ptsz ? cuStreamSynchronize_ptsz(stream) : cuStreamSynchronize(stream);
        if (e != CUDA_SUCCESS)
            return e;
    }
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return vcu__copy_unified(dst, src, ByteCount, 0, NULL, 0);
}

/* Synchronous: ordered after the per-thread stream's work too (see
 * cuMemcpyHtoD_v2_ptds). */
VCU__EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return vcu__copy_unified(dst, src, ByteCount, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                   CUstream hStream)
{
    return vcu__copy_unified(dst, src, ByteCount, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                        CUstream hStream)
{
    return vcu__copy_unified(dst, src, ByteCount, 1, hStream, 1);
}
