/*
 * CUDA arrays, texture and surface objects through the Driver API: 2D and
 * 3D arrays made and described back; data taken host -> array -> array ->
 * device -> host by cuMemcpy2D, cuMemcpy3D and the offset copies
 * (cuMemcpyHtoA, AtoA, AtoD, DtoA, AtoH), each checked; texture objects
 * on an array, on linear and on pitched memory, a surface object, their
 * descriptors read back; the refusals (bad format, channel count, size,
 * destroyed array, an object not made); mipmapped arrays and their
 * levels.  No kernel samples here
 * (tests/cuda/texture.cu does).
 */
#include "vcu_drv_test.h"

#define W 37
#define H 19
#define D 5

static void fill(float *p, size_t n, float base)
{
    for (size_t i = 0; i < n; i++)
        p[i] = base + (float)i * 0.25f;
}

static int same(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            printf("differ at %zu: %g != %g\n", i, a[i], b[i]);
            return 0;
        }
    return 1;
}

static void round_2d(void)
{
    CUDA_ARRAY_DESCRIPTOR ad, got;
    CUDA_ARRAY3D_DESCRIPTOR got3;
    CUDA_MEMCPY2D c;
    CUarray a, b;
    CUdeviceptr dp;
    size_t pitch = (W + 3) * sizeof(float);
    float *in = malloc(H * pitch), *out = calloc(H, pitch);

    TRUE(in != NULL && out != NULL);
    fill(in, H * pitch / sizeof(float), 1.0f);
    memset(&ad, 0, sizeof(ad));
    ad.Width = W;
    ad.Height = H;
    ad.Format = CU_AD_FORMAT_FLOAT;
    ad.NumChannels = 1;
    CK(cuArrayCreate(&a, &ad));
    CK(cuArrayCreate(&b, &ad));
    CK(cuArrayGetDescriptor(&got, a));
    TRUE(got.Width == W && got.Height == H && got.Format == CU_AD_FORMAT_FLOAT &&
         got.NumChannels == 1);
    CK(cuArray3DGetDescriptor(&got3, a));
    TRUE(got3.Width == W && got3.Height == H && got3.Depth == 0 && got3.Flags == 0);

    /* host -> a (pitched rows), a -> b, b -> device, device -> host */
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = in;
    c.srcPitch = pitch;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = a;
    c.WidthInBytes = W * sizeof(float);
    c.Height = H;
    CK(cuMemcpy2D(&c));
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = a;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = b;
    c.WidthInBytes = W * sizeof(float);
    c.Height = H;
    CK(cuMemcpy2D(&c));
    CK(cuMemAlloc(&dp, H * pitch));
    CK(cuMemsetD8(dp, 0, H * pitch));
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = b;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dp;
    c.dstPitch = pitch;
    c.WidthInBytes = W * sizeof(float);
    c.Height = H;
    CK(cuMemcpy2DAsync(&c, NULL));
    CK(cuStreamSynchronize(NULL));
    CK(cuMemcpyDtoH(out, dp, H * pitch));
    for (int y = 0; y < H; y++)
        TRUE(same((float *)((char *)in + y * pitch), (float *)((char *)out + y * pitch), W));

    /* A window of the array: rows 3.., columns 5.. to host directly. */
    memset(out, 0, H * pitch);
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = b;
    c.srcXInBytes = 5 * sizeof(float);
    c.srcY = 3;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = out;
    c.dstPitch = pitch;
    c.WidthInBytes = 7 * sizeof(float);
    c.Height = 4;
    CK(cuMemcpy2DUnaligned(&c));
    for (int y = 0; y < 4; y++)
        TRUE(same((float *)((char *)in + (y + 3) * pitch) + 5, (float *)((char *)out + y * pitch),
                  7));
    /* Past the array's edge. */
    c.Height = H;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&c));

    /* The offset copies: bytes taken row after row. */
    {
        size_t n = W * H * sizeof(float), off = 3 * sizeof(float);
        float *lin = malloc(n), *back = calloc(1, n);
        CUdeviceptr dl;

        TRUE(lin != NULL && back != NULL);
        fill(lin, W * H, 100.0f);
        CK(cuMemcpyHtoA(a, 0, lin, n));
        CK(cuMemcpyAtoH(back, a, 0, n));
        TRUE(same(lin, back, W * H));
        /* An offset that is not a row's start, across rows. */
        CK(cuMemcpyAtoA(b, off, a, 0, n - off));
        CK(cuMemAlloc(&dl, n));
        CK(cuMemcpyAtoD(dl, b, off, n - off));
        memset(back, 0, n);
        CK(cuMemcpyDtoH(back, dl, n - off));
        TRUE(same(lin, back, W * H - 3));
        CK(cuMemcpyDtoA(a, W * sizeof(float), dl, 2 * W * sizeof(float)));
        memset(back, 0, n);
        CK(cuMemcpyAtoHAsync(back, a, W * sizeof(float), 2 * W * sizeof(float), NULL));
        CK(cuStreamSynchronize(NULL));
        TRUE(same(lin, back, 2 * W));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoA(a, 4, lin, n));
        CK(cuMemFree(dl));
        free(lin);
        free(back);
    }
    CK(cuArrayDestroy(a));
    CK(cuArrayDestroy(b));
    CK(cuMemFree(dp));
    free(in);
    free(out);
}

static void round_3d(void)
{
    CUDA_ARRAY3D_DESCRIPTOR ad, got;
    CUDA_MEMCPY3D c;
    CUarray a, b;
    CUdeviceptr dp;
    size_t n = (size_t)W * H * D * 4;
    unsigned char *in = malloc(n), *out = calloc(1, n);

    TRUE(in != NULL && out != NULL);
    for (size_t i = 0; i < n; i++)
        in[i] = (unsigned char)(i * 7 + i / 251);
    memset(&ad, 0, sizeof(ad));
    ad.Width = W;
    ad.Height = H;
    ad.Depth = D;
    ad.Format = CU_AD_FORMAT_UNSIGNED_INT8;
    ad.NumChannels = 4;
    CK(cuArray3DCreate(&a, &ad));
    ad.Flags = CUDA_ARRAY3D_SURFACE_LDST;
    CK(cuArray3DCreate(&b, &ad));
    CK(cuArray3DGetDescriptor(&got, b));
    TRUE(got.Width == W && got.Height == H && got.Depth == D && got.NumChannels == 4 &&
         got.Format == CU_AD_FORMAT_UNSIGNED_INT8 && got.Flags == CUDA_ARRAY3D_SURFACE_LDST);

    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = in;
    c.srcPitch = W * 4;
    c.srcHeight = H;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = a;
    c.WidthInBytes = W * 4;
    c.Height = H;
    c.Depth = D;
    CK(cuMemcpy3D(&c));
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = a;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = b;
    c.WidthInBytes = W * 4;
    c.Height = H;
    c.Depth = D;
    CK(cuMemcpy3DAsync(&c, NULL));
    CK(cuMemAlloc(&dp, n));
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = b;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dp;
    c.dstPitch = W * 4;
    c.dstHeight = H;
    c.WidthInBytes = W * 4;
    c.Height = H;
    c.Depth = D;
    CK(cuMemcpy3D(&c));
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = dp;
    c.srcPitch = W * 4;
    c.srcHeight = H;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = out;
    c.dstPitch = W * 4;
    c.dstHeight = H;
    c.WidthInBytes = W * 4;
    c.Height = H;
    c.Depth = D;
    CK(cuMemcpy3D(&c));
    TRUE(memcmp(in, out, n) == 0);

    /* One slice, from the middle, to host. */
    memset(out, 0, n);
    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = b;
    c.srcZ = 2;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = out;
    c.dstPitch = W * 4;
    c.dstHeight = H;
    c.WidthInBytes = W * 4;
    c.Height = H;
    c.Depth = 1;
    CK(cuMemcpy3D(&c));
    TRUE(memcmp(in + 2 * W * H * 4, out, W * H * 4) == 0);
    c.srcZ = D;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpy3D(&c));

    /* A surface object on the surface array; none on the plain one. */
    {
        CUDA_RESOURCE_DESC rd, back;
        CUsurfObject s = 0;

        memset(&rd, 0, sizeof(rd));
        rd.resType = CU_RESOURCE_TYPE_ARRAY;
        rd.res.array.hArray = b;
        CK(cuSurfObjectCreate(&s, &rd));
        TRUE(s != 0);
        memset(&back, 0, sizeof(back));
        CK(cuSurfObjectGetResourceDesc(&back, s));
        TRUE(back.resType == CU_RESOURCE_TYPE_ARRAY && back.res.array.hArray == b);
        CK(cuSurfObjectDestroy(s));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuSurfObjectGetResourceDesc(&back, s));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuSurfObjectDestroy(s));
    }
    CK(cuArrayDestroy(a));
    CK(cuArrayDestroy(b));
    CK(cuMemFree(dp));
    free(in);
    free(out);
}

static void textures(void)
{
    CUDA_ARRAY_DESCRIPTOR ad;
    CUDA_RESOURCE_DESC rd, rback;
    CUDA_TEXTURE_DESC td, tback;
    CUDA_RESOURCE_VIEW_DESC vd, vback;
    CUtexObject t = 0, tl = 0, tp = 0;
    CUarray a;
    CUdeviceptr p;

    memset(&ad, 0, sizeof(ad));
    ad.Width = 64;
    ad.Height = 32;
    ad.Format = CU_AD_FORMAT_FLOAT;
    ad.NumChannels = 2;
    CK(cuArrayCreate(&a, &ad));
    memset(&rd, 0, sizeof(rd));
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = a;
    memset(&td, 0, sizeof(td));
    td.addressMode[0] = CU_TR_ADDRESS_MODE_WRAP;
    td.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP;
    td.filterMode = CU_TR_FILTER_MODE_LINEAR;
    td.flags = CU_TRSF_NORMALIZED_COORDINATES;
    td.borderColor[2] = 0.5f;
    memset(&vd, 0, sizeof(vd));
    vd.format = CU_RES_VIEW_FORMAT_FLOAT_2X32;
    vd.width = 64;
    vd.height = 32;
    CK(cuTexObjectCreate(&t, &rd, &td, &vd));
    TRUE(t != 0);
    CK(cuTexObjectGetResourceDesc(&rback, t));
    TRUE(rback.resType == CU_RESOURCE_TYPE_ARRAY && rback.res.array.hArray == a);
    CK(cuTexObjectGetTextureDesc(&tback, t));
    TRUE(tback.addressMode[1] == CU_TR_ADDRESS_MODE_CLAMP &&
         tback.filterMode == CU_TR_FILTER_MODE_LINEAR &&
         tback.flags == CU_TRSF_NORMALIZED_COORDINATES && tback.borderColor[2] == 0.5f);
    CK(cuTexObjectGetResourceViewDesc(&vback, t));
    TRUE(vback.format == CU_RES_VIEW_FORMAT_FLOAT_2X32 && vback.width == 64 &&
         vback.height == 32);

    /* Linear and pitched memory in an allocation; how wide a 1D texture
     * over linear memory may be (the host's driver says). */
    {
        size_t w = 0;
        CUdevice dev;
        int n;

        CK(cuCtxGetDevice(&dev));
        CK(cuDeviceGetTexture1DLinearMaxWidth(&w, CU_AD_FORMAT_UNSIGNED_INT32, 1, dev));
        CK(cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH, dev));
        printf("info: cuDeviceGetTexture1DLinearMaxWidth(u32, 1) = %zu, attribute %d\n", w, n);
        TRUE(w >= (1u << 16) / 4);
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuDeviceGetTexture1DLinearMaxWidth(NULL, CU_AD_FORMAT_FLOAT, 1, dev));
        EXPECT(CUDA_ERROR_INVALID_DEVICE,
               cuDeviceGetTexture1DLinearMaxWidth(&w, CU_AD_FORMAT_FLOAT, 1, 99));
    }
    CK(cuMemAlloc(&p, 1 << 16));
    memset(&rd, 0, sizeof(rd));
    rd.resType = CU_RESOURCE_TYPE_LINEAR;
    rd.res.linear.devPtr = p;
    rd.res.linear.format = CU_AD_FORMAT_UNSIGNED_INT32;
    rd.res.linear.numChannels = 1;
    rd.res.linear.sizeInBytes = 1 << 16;
    memset(&td, 0, sizeof(td));
    td.flags = CU_TRSF_READ_AS_INTEGER;
    CK(cuTexObjectCreate(&tl, &rd, &td, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectGetResourceViewDesc(&vback, tl));
    CK(cuTexObjectGetResourceDesc(&rback, tl));
    TRUE(rback.resType == CU_RESOURCE_TYPE_LINEAR && rback.res.linear.devPtr == p &&
         rback.res.linear.sizeInBytes == 1 << 16);
    /* Reaching past the allocation's end: the driver takes it (NVIDIA's
     * convolutionFFT2D sizes its textures a row of padding past its
     * buffers); beginning outside every allocation: refused. */
    rd.res.linear.sizeInBytes = (1 << 16) + 4096;
    CK(cuTexObjectCreate(&tp, &rd, &td, NULL));
    CK(cuTexObjectDestroy(tp));
    rd.res.linear.devPtr = 4096;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectCreate(&tp, &rd, &td, NULL));
    memset(&rd, 0, sizeof(rd));
    rd.resType = CU_RESOURCE_TYPE_PITCH2D;
    rd.res.pitch2D.devPtr = p;
    rd.res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    rd.res.pitch2D.numChannels = 1;
    rd.res.pitch2D.width = 60;
    rd.res.pitch2D.height = 64;
    rd.res.pitch2D.pitchInBytes = 256;
    CK(cuTexObjectCreate(&tp, &rd, &td, NULL));
    rd.res.pitch2D.devPtr = 4096;      /* no allocation */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectCreate(&tl, &rd, &td, NULL));
    CK(cuTexObjectDestroy(tp));
    /* A value never made, or made and destroyed. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectDestroy(tp));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectGetTextureDesc(&tback, tp));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectDestroy((CUtexObject)0x7fff1234));
    CK(cuTexObjectDestroy(t));

    /* Bad descriptors. */
    memset(&rd, 0, sizeof(rd));
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = a;
    memset(&td, 0, sizeof(td));
    td.filterMode = (CUfilter_mode)7;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectCreate(&t, &rd, &td, NULL));
    td.filterMode = CU_TR_FILTER_MODE_POINT;
    td.addressMode[2] = (CUaddress_mode)9;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectCreate(&t, &rd, &td, NULL));
    td.addressMode[2] = CU_TR_ADDRESS_MODE_WRAP;
    td.flags = 0x8000;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectCreate(&t, &rd, &td, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectCreate(&t, &rd, NULL, NULL));

    /* An array destroyed is no resource. */
    CK(cuArrayDestroy(a));
    td.flags = 0;
    TRUE(cuTexObjectCreate(&t, &rd, &td, NULL) != CUDA_SUCCESS);
    TRUE(cuArrayDestroy(a) != CUDA_SUCCESS);
    CK(cuTexObjectDestroy(tl));
    CK(cuMemFree(p));
}

/* Mipmapped arrays: levels halving to 1, the same level array each
 * time, data in and out of a level, a texture object over all levels. */
static void mipmaps(void)
{
    CUDA_ARRAY3D_DESCRIPTOR ad, got;
    CUDA_RESOURCE_DESC rd, rback;
    CUDA_TEXTURE_DESC td;
    CUmipmappedArray m;
    CUarray l0, l2, again;
    CUtexObject t, t2;
    float v[16 * 8], w[16 * 8];

    memset(&ad, 0, sizeof(ad));
    ad.Width = 64;
    ad.Height = 32;
    ad.Format = CU_AD_FORMAT_FLOAT;
    ad.NumChannels = 1;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayCreate(&m, &ad, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayCreate(&m, &ad, 8));   /* 64 halves 6 times */
    CK(cuMipmappedArrayCreate(&m, &ad, 7));
    CK(cuMipmappedArrayGetLevel(&l0, m, 0));
    CK(cuMipmappedArrayGetLevel(&l2, m, 2));
    CK(cuMipmappedArrayGetLevel(&again, m, 2));
    TRUE(again == l2 && l0 != l2);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayGetLevel(&again, m, 7));
    CK(cuArray3DGetDescriptor(&got, l2));
    TRUE(got.Width == 16 && got.Height == 8 && got.Format == CU_AD_FORMAT_FLOAT);
    CK(cuMipmappedArrayGetLevel(&again, m, 6));
    CK(cuArray3DGetDescriptor(&got, again));
    TRUE(got.Width == 1 && got.Height == 1);
    fill(v, 16 * 8, 7.0f);
    CK(cuMemcpyHtoA(l2, 0, v, sizeof(v)));
    memset(w, 0, sizeof(w));
    CK(cuMemcpyAtoH(w, l2, 0, sizeof(w)));
    TRUE(same(v, w, 16 * 8));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoA(l2, 4, v, sizeof(v)));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuArrayDestroy(l2));     /* its mipmapped array's */
    memset(&rd, 0, sizeof(rd));
    rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    rd.res.mipmap.hMipmappedArray = m;
    memset(&td, 0, sizeof(td));
    td.filterMode = CU_TR_FILTER_MODE_LINEAR;
    td.mipmapFilterMode = CU_TR_FILTER_MODE_LINEAR;
    td.maxMipmapLevelClamp = 6.0f;
    td.flags = CU_TRSF_NORMALIZED_COORDINATES;
    CK(cuTexObjectCreate(&t, &rd, &td, NULL));
    CK(cuTexObjectGetResourceDesc(&rback, t));
    TRUE(rback.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY && rback.res.mipmap.hMipmappedArray == m);
    td.maxMipmapLevelClamp = __builtin_inff();
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuTexObjectCreate(&t2, &rd, &td, NULL));
    td.maxMipmapLevelClamp = 6.0f;
    CK(cuTexObjectDestroy(t));
    CK(cuMipmappedArrayDestroy(m));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuMipmappedArrayDestroy(m));
    TRUE(cuMemcpyAtoH(w, l2, 0, sizeof(w)) != CUDA_SUCCESS);   /* gone with it */
    TRUE(cuTexObjectCreate(&t, &rd, &td, NULL) != CUDA_SUCCESS);
}

static void refusals(void)
{
    CUDA_ARRAY3D_DESCRIPTOR ad;
    CUarray a;

    memset(&ad, 0, sizeof(ad));
    ad.Width = 16;
    ad.Format = CU_AD_FORMAT_FLOAT;
    ad.NumChannels = 3;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuArray3DCreate(&a, &ad));
    ad.NumChannels = 1;
    ad.Format = (CUarray_format)0x77;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuArray3DCreate(&a, &ad));
    ad.Format = CU_AD_FORMAT_FLOAT;
    ad.Width = 0;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuArray3DCreate(&a, &ad));
    ad.Width = 16;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuArray3DCreate(NULL, &ad));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuArray3DCreate(&a, NULL));
    /* A 1D array: no height, no depth. */
    CK(cuArray3DCreate(&a, &ad));
    {
        float v[16], w[16];

        fill(v, 16, -3.0f);
        CK(cuMemcpyHtoA(a, 0, v, sizeof(v)));
        memset(w, 0, sizeof(w));
        CK(cuMemcpyAtoH(w, a, 8, 8 * sizeof(float)));
        TRUE(same(v + 2, w, 8));
    }
    CK(cuArrayDestroy(a));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    round_2d();
    round_3d();
    textures();
    mipmaps();
    refusals();
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_array\n");
    return 0;
}
