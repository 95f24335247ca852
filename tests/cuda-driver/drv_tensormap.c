/*
 * Tensor maps (the descriptors Hopper's TMA reads): cuTensorMapEncodeTiled,
 * cuTensorMapEncodeIm2col and cuTensorMapReplaceAddress made by the host's
 * driver over device memory, the same map for the same arguments, and the
 * refusals cuda.h lists (misaligned address, bad rank, box and strides,
 * NULL arguments).
 */
#include "vcu_drv_test.h"

static CUresult tiled(CUtensorMap *m, CUdeviceptr p, cuuint32_t rank, cuuint32_t box0,
                      cuuint64_t stride0)
{
    cuuint64_t dim[5] = { 64, 32, 1, 1, 1 }, strides[4] = { stride0, stride0 * 32, 0, 0 };
    cuuint32_t box[5] = { box0, 8, 1, 1, 1 }, es[5] = { 1, 1, 1, 1, 1 };

    return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, (void *)p, dim,
                                  strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                  CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

static int zero(const CUtensorMap *m)
{
    for (int i = 0; i < 16; i++)
        if (m->opaque[i] != 0)
            return 0;
    return 1;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    CUtensorMap a, b, r;
    int major = 0;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    if (major < 9) {
        printf("SKIP drv_tensormap: device %d.x has no tensor memory access\n", major);
        printf("PASS drv_tensormap\n");
        return 0;
    }
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&p, 64 * 32 * 4 * 2));

    memset(&a, 0, sizeof(a));
    memset(&b, 0xee, sizeof(b));
    CK(tiled(&a, p, 2, 16, 64 * 4));
    TRUE(!zero(&a));
    CK(tiled(&b, p, 2, 16, 64 * 4));
    TRUE(memcmp(&a, &b, sizeof(a)) == 0);       /* the same arguments, the same map */
    CK(tiled(&b, p, 3, 16, 64 * 4));
    TRUE(memcmp(&a, &b, sizeof(a)) != 0);
    /* Another address in the map: as if encoded there. */
    r = a;
    CK(cuTensorMapReplaceAddress(&r, (void *)(p + 64 * 32 * 4)));
    CK(tiled(&b, p + 64 * 32 * 4, 2, 16, 64 * 4));
    TRUE(memcmp(&r, &b, sizeof(r)) == 0);
    TRUE(memcmp(&r, &a, sizeof(r)) != 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTensorMapReplaceAddress(&r, (void *)(p + 4)));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTensorMapReplaceAddress(NULL, (void *)p));

    /* Im2col over an NHWC image of 2 x 8 x 8 x 16 halves. */
    {
        cuuint64_t dim[4] = { 16, 8, 8, 2 }, strides[3] = { 32, 32 * 8, 32 * 64 };
        cuuint32_t es[4] = { 1, 1, 1, 1 };
        int lo[2] = { -1, -1 }, hi[2] = { 1, 1 };

        CK(cuTensorMapEncodeIm2col(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, (void *)p, dim,
                                   strides, lo, hi, 16, 32, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
        TRUE(!zero(&b));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuTensorMapEncodeIm2col(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)p, dim,
                                       strides, lo, hi, 16, 32, es,
                                       CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       CU_TENSOR_MAP_SWIZZLE_NONE,
                                       CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    }

    /* Refusals. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, tiled(&b, p + 4, 2, 16, 64 * 4));     /* misaligned */
    EXPECT(CUDA_ERROR_INVALID_VALUE, tiled(&b, p, 0, 16, 64 * 4));
    EXPECT(CUDA_ERROR_INVALID_VALUE, tiled(&b, p, 6, 16, 64 * 4));
    EXPECT(CUDA_ERROR_INVALID_VALUE, tiled(&b, p, 2, 0, 64 * 4));          /* empty box */
    EXPECT(CUDA_ERROR_INVALID_VALUE, tiled(&b, p, 2, 512, 64 * 4));        /* box > 256 */
    EXPECT(CUDA_ERROR_INVALID_VALUE, tiled(&b, p, 2, 16, 64 * 4 + 4));     /* stride % 16 */
    EXPECT(CUDA_ERROR_INVALID_VALUE, tiled(NULL, p, 2, 16, 64 * 4));
    {
        cuuint64_t dim[2] = { 64, 32 }, strides[1] = { 256 };
        cuuint32_t box[2] = { 16, 8 }, es[2] = { 1, 1 };

        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuTensorMapEncodeTiled(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)p, NULL,
                                      strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                      CU_TENSOR_MAP_SWIZZLE_NONE,
                                      CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuTensorMapEncodeTiled(&b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)p, dim,
                                      strides, NULL, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                      CU_TENSOR_MAP_SWIZZLE_NONE,
                                      CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    }
    CK(cuMemFree(p));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_tensormap\n");
    return 0;
}
