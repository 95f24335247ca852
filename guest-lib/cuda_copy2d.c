/*
 * libcuda.so.1: pitched memory, 2D copies and 2D memsets over the wire
 * protocol.
 */
#include <stdint.h>
#include <string.h>

#include "cuda_int.h"

/* ---- pitched memory and 2D copies --------------------------------------- */

/* Rows padded to 512 bytes, as our runtime's cudaMallocPitch. */
VCU__EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes)
{
    size_t pitch;

    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (WidthInBytes > SIZE_MAX - 511)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pitch = (WidthInBytes + 511) & ~(size_t)511;
    if (pitch > SIZE_MAX / Height)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pPitch = pitch;
    return cuMemAlloc_v2(dptr, pitch * Height);
}

static CUresult vcu__memset2d(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t elem,
                              size_t w, size_t h, int async, CUstream stream, int ptsz)
{
    struct vcu_cu_memset_req r;
    uint64_t wire = 0;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e == CUDA_SUCCESS && async)
        e = vcu__stream_ctx(&c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    if (w == 0 || h == 0)
        return CUDA_SUCCESS;
    if (dst % elem != 0 || pitch % elem != 0 || (h > 1 && w > pitch / elem) ||
        w > UINT64_MAX / elem || (h > 1 && h - 1 > (UINT64_MAX - w * elem) / pitch))
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.dst = dst;
    e = vcu__host_as_dev(&r.dst, (uint64_t)(h - 1) * pitch + (uint64_t)w * elem);
    if (e != CUDA_SUCCESS)
        return e;
    r.pitch = pitch;
    r.width = w;
    r.height = h;
    r.stream = wire;
    r.value = value;
    r.elem_size = elem;
    r.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
    return vcu__call(c->dev, VCU_OP_CU_MEMSET, &r, sizeof(r), NULL, 0, NULL, 0);
}

#define VCU__MEMSET2D(name, type, elem, async, ptsz, ...)                                  \
    VCU__EXPORT CUresult name(CUdeviceptr dstDevice, size_t dstPitch, type v, size_t Width, \
                              size_t Height __VA_ARGS__)                                   \
    {                                                                                      \
        return vcu__memset2d(dstDevice, dstPitch, v, elem, Width, Height, async,           \
                             VCU__MEMSET2D_STREAM_##async, ptsz);                          \
    }
#define VCU__MEMSET2D_STREAM_0 NULL
#define VCU__MEMSET2D_STREAM_1 hStream

/* The _ptds forms: a synchronous memset waits for the legacy stream,
 * which orders it after the per-thread stream's work too. */
VCU__MEMSET2D(cuMemsetD2D8_v2, unsigned char, 1, 0, 0)
VCU__MEMSET2D(cuMemsetD2D8_v2_ptds, unsigned char, 1, 0, 0)
VCU__MEMSET2D(cuMemsetD2D16_v2, unsigned short, 2, 0, 0)
VCU__MEMSET2D(cuMemsetD2D16_v2_ptds, unsigned short, 2, 0, 0)
VCU__MEMSET2D(cuMemsetD2D32_v2, unsigned int, 4, 0, 0)
VCU__MEMSET2D(cuMemsetD2D32_v2_ptds, unsigned int, 4, 0, 0)
VCU__MEMSET2D(cuMemsetD2D8Async, unsigned char, 1, 1, 0, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D8Async_ptsz, unsigned char, 1, 1, 1, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D16Async, unsigned short, 2, 1, 0, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D16Async_ptsz, unsigned short, 2, 1, 1, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D32Async, unsigned int, 4, 1, 0, , CUstream hStream)
VCU__MEMSET2D(cuMemsetD2D32Async_ptsz, unsigned int, 4, 1, 1, , CUstream hStream)

/*
 * cuMemcpy2D*: host and device sides in pieces of whole rows within the
 * session's transfer limit (an array or unified side: as a 3D copy,
 * cuda_array.c).  Host to host is done here.
 */
static CUresult vcu__copy2d(const CUDA_MEMCPY2D *p, int async, CUstream stream, int ptsz)
{
    struct vcu_cu_memcpy2d_req r;
    uint64_t wire = 0, src, dst;
    size_t rows, hp;
    vcu_buf_t b;
    vcu__ctx_t *c;
    uint32_t kind;
    CUresult e;

    if (p == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY ||
        p->srcMemoryType == CU_MEMORYTYPE_UNIFIED || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED)
        return vcu__copy2d_array(p, async, stream, ptsz);
    if ((p->srcMemoryType != CU_MEMORYTYPE_HOST && p->srcMemoryType != CU_MEMORYTYPE_DEVICE) ||
        (p->dstMemoryType != CU_MEMORYTYPE_HOST && p->dstMemoryType != CU_MEMORYTYPE_DEVICE))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS && async)
        e = vcu__stream_ctx(&c, stream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    if (p->WidthInBytes == 0 || p->Height == 0)
        return CUDA_SUCCESS;
    if ((p->Height > 1 && (p->WidthInBytes > p->srcPitch || p->WidthInBytes > p->dstPitch)) ||
        p->srcY > SIZE_MAX / (p->srcPitch ? p->srcPitch : 1) ||
        p->dstY > SIZE_MAX / (p->dstPitch ? p->dstPitch : 1))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcMemoryType == CU_MEMORYTYPE_HOST)
        src = (uint64_t)(uintptr_t)p->srcHost;
    else
        src = p->srcDevice;
    if (p->dstMemoryType == CU_MEMORYTYPE_HOST)
        dst = (uint64_t)(uintptr_t)p->dstHost;
    else
        dst = p->dstDevice;
    if (src == 0 || dst == 0)
        return CUDA_ERROR_INVALID_VALUE;
    src += p->srcXInBytes + p->srcY * p->srcPitch;
    dst += p->dstXInBytes + p->dstY * p->dstPitch;
    if (p->srcMemoryType == CU_MEMORYTYPE_HOST && p->dstMemoryType == CU_MEMORYTYPE_HOST) {
        for (size_t i = 0; i < p->Height; i++)
            memmove((char *)(uintptr_t)dst + i * p->dstPitch,
                    (const char *)(uintptr_t)src + i * p->srcPitch, p->WidthInBytes);
        return CUDA_SUCCESS;
    }
    kind = p->srcMemoryType == CU_MEMORYTYPE_HOST   ? VCU_CU_COPY_HTOD
           : p->dstMemoryType == CU_MEMORYTYPE_HOST ? VCU_CU_COPY_DTOH
                                                    : VCU_CU_COPY_DTOD;
    hp = kind == VCU_CU_COPY_HTOD ? p->srcPitch : p->dstPitch;
    for (size_t row = 0; row < p->Height; row += rows) {
        rows = p->Height - row;
        if (kind != VCU_CU_COPY_DTOD && hp * (rows - 1) + p->WidthInBytes > vcu__drv.max_xfer)
            rows = hp && vcu__drv.max_xfer / hp ? (size_t)(vcu__drv.max_xfer / hp) : 1;
        if (kind != VCU_CU_COPY_DTOD && hp * (rows - 1) + p->WidthInBytes > vcu__drv.max_xfer)
            return CUDA_ERROR_INVALID_VALUE;
        memset(&r, 0, sizeof(r));
        r.dst = dst + row * p->dstPitch;
        r.dpitch = p->dstPitch;
        r.src = src + row * p->srcPitch;
        r.spitch = p->srcPitch;
        r.width = p->WidthInBytes;
        r.height = rows;
        r.stream = wire;
        r.kind = kind;
        r.flags = async ? VCU_CU_MEMCPY_F_ASYNC : 0;
        b.len = hp * (rows - 1) + p->WidthInBytes;
        b.addr = (void *)(uintptr_t)(kind == VCU_CU_COPY_HTOD ? r.src : r.dst);
        b.flags = kind == VCU_CU_COPY_HTOD ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE;
        e = vcu__call(c->dev, VCU_OP_CU_MEMCPY_2D, &r, sizeof(r), &b,
                      kind == VCU_CU_COPY_DTOD ? 0 : 1, NULL, 0);
        if (e != CUDA_SUCCESS)
            return e;
    }
    return CUDA_SUCCESS;
}

/* Unaligned or not: the host's driver gets the pitches as they are.  The
 * _ptds forms as the memsets above. */
VCU__EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
    return vcu__copy2d(pCopy, 0, NULL, 0);
}

VCU__EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return vcu__copy2d(pCopy, 1, hStream, 0);
}

VCU__EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    return vcu__copy2d(pCopy, 1, hStream, 1);
}
