/*
 * CUDA arrays, texture and surface objects through the runtime, as
 * NVIDIA's samples use them (simpleTexture, simpleSurfaceWrite): a float
 * image in a 2D array sampled by a kernel with tex2D (normalized
 * coordinates, linear filtering, clamped edges) and checked against the
 * same filter computed here; a kernel writing a surface, read back and
 * checked; a 3D array filled and read back by cudaMemcpy3D.
 *
 * NVIDIA's runtime takes these from our libcuda.so.1 (suite nvrt).  Our
 * own runtime does not carry them (cudaMallocArray is "not supported",
 * and so is cudaGetDriverEntryPointByVersion): there the program says
 * so and passes.  On the CPU stand-in for libcuda no kernel samples:
 * the arrays, copies and objects are checked, the kernels skipped.
 */
#define TEST_NAME "texture"
#include "vcu_test.h"

#include <math.h>
#include <string.h>

#define W 64              /* powers of two: the sample points are exact */
#define H 32
#define D 4

__global__ void tx_sample(cudaTextureObject_t t, float *out, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;

    if (x < w && y < h)
        out[y * w + x] = tex2D<float>(t, (x + 0.75f) / w, (y + 1.0f) / h);
}

__global__ void tx_surf_write(cudaSurfaceObject_t s, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;

    if (x < w && y < h)
        surf2Dwrite(make_float2((float)(x * 3 + y), (float)(y - x)), s, x * (int)sizeof(float2),
                    y);
}

static float texel(const float *img, int x, int y)
{
    x = x < 0 ? 0 : x >= W ? W - 1 : x;
    y = y < 0 ? 0 : y >= H ? H - 1 : y;
    return img[y * W + x];
}

/* What tex2D gives at (x + 0.75) / W, (y + 1) / H: the texel grid is
 * offset by half a texel, so the weights are 0.25 across and 0.5 down,
 * exact in the filter's 8-bit fractions. */
static float filtered(const float *img, int x, int y)
{
    float a = 0.25f, b = 0.5f;

    return (1 - a) * (1 - b) * texel(img, x, y) + a * (1 - b) * texel(img, x + 1, y) +
           (1 - a) * b * texel(img, x, y + 1) + a * b * texel(img, x + 1, y + 1);
}

/* The CPU stand-in for libcuda (loopback), which runs no texture or
 * surface kernel; a real driver in loopback does. */
static bool stand_in(void)
{
    cudaDeviceProp p;

    CK(cudaGetDeviceProperties(&p, 0));
    return strstr(p.name, "stand-in") != NULL;
}

static void texture_2d(bool run)
{
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t arr;
    cudaResourceDesc rd;
    cudaTextureDesc td;
    cudaTextureObject_t t = 0;
    float *img = (float *)malloc(W * H * sizeof(float));
    float *got = (float *)malloc(W * H * sizeof(float));
    float *back = (float *)calloc(W * H, sizeof(float));
    float *dout;

    if (img == NULL || got == NULL || back == NULL)
        vcu_test_fail("out of host memory");
    for (int i = 0; i < W * H; i++)
        img[i] = sinf(i * 0.37f) * 10.0f + (float)(i % 7);
    CK(cudaMallocArray(&arr, &cd, W, H));
    CK(cudaMemcpy2DToArray(arr, 0, 0, img, W * sizeof(float), W * sizeof(float), H,
                           cudaMemcpyHostToDevice));
    CK(cudaMemcpy2DFromArray(back, W * sizeof(float), arr, 0, 0, W * sizeof(float), H,
                             cudaMemcpyDeviceToHost));
    if (memcmp(img, back, W * H * sizeof(float)) != 0)
        vcu_test_fail("array round trip differs");
    {
        cudaChannelFormatDesc qd;
        cudaExtent ext;
        unsigned int flags = 1;

        CK(cudaArrayGetInfo(&qd, &ext, &flags, arr));
        if (ext.width != W || ext.height != H || ext.depth != 0 || qd.x != 32 ||
            qd.f != cudaChannelFormatKindFloat || flags != 0)
            vcu_test_fail("cudaArrayGetInfo: %zu x %zu x %zu, %d bits, flags %u", ext.width,
                          ext.height, ext.depth, qd.x, flags);
    }

    memset(&rd, 0, sizeof(rd));
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = arr;
    memset(&td, 0, sizeof(td));
    td.addressMode[0] = cudaAddressModeClamp;
    td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModeLinear;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    CK(cudaCreateTextureObject(&t, &rd, &td, NULL));
    {
        cudaTextureDesc tb;
        cudaResourceDesc rb;

        CK(cudaGetTextureObjectTextureDesc(&tb, t));
        CK(cudaGetTextureObjectResourceDesc(&rb, t));
        if (tb.filterMode != cudaFilterModeLinear || !tb.normalizedCoords ||
            rb.resType != cudaResourceTypeArray || rb.res.array.array != arr)
            vcu_test_fail("texture object's descriptors differ");
    }
    if (run) {
        dim3 block(16, 8), grid((W + 15) / 16, (H + 7) / 8);

        CK(cudaMalloc(&dout, W * H * sizeof(float)));
        tx_sample<<<grid, block>>>(t, dout, W, H);
        CK_LAUNCH();
        CK(cudaMemcpy(got, dout, W * H * sizeof(float), cudaMemcpyDeviceToHost));
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                float want = filtered(img, x, y);

                if (fabsf(got[y * W + x] - want) > 1e-3f * (1.0f + fabsf(want)))
                    vcu_test_fail("tex2D at %d,%d: %g, want %g", x, y, got[y * W + x], want);
            }
        CK(cudaFree(dout));
    }
    CK(cudaDestroyTextureObject(t));
    CK(cudaFreeArray(arr));
    free(img);
    free(got);
    free(back);
}

static void surface_2d(bool run)
{
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float2>();
    cudaArray_t arr;
    cudaResourceDesc rd;
    cudaSurfaceObject_t s = 0;
    float2 *got = (float2 *)calloc(W * H, sizeof(float2));

    if (got == NULL)
        vcu_test_fail("out of host memory");
    CK(cudaMallocArray(&arr, &cd, W, H, cudaArraySurfaceLoadStore));
    memset(&rd, 0, sizeof(rd));
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = arr;
    CK(cudaCreateSurfaceObject(&s, &rd));
    if (run) {
        dim3 block(16, 8), grid((W + 15) / 16, (H + 7) / 8);

        tx_surf_write<<<grid, block>>>(s, W, H);
        CK_LAUNCH();
        CK(cudaMemcpy2DFromArray(got, W * sizeof(float2), arr, 0, 0, W * sizeof(float2), H,
                                 cudaMemcpyDeviceToHost));
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                if (got[y * W + x].x != (float)(x * 3 + y) || got[y * W + x].y != (float)(y - x))
                    vcu_test_fail("surface at %d,%d: %g,%g", x, y, got[y * W + x].x,
                                  got[y * W + x].y);
    }
    CK(cudaDestroySurfaceObject(s));
    CK(cudaFreeArray(arr));
    free(got);
}

static void array_3d(void)
{
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<unsigned short>();
    cudaExtent ext = make_cudaExtent(W, H, D);
    cudaArray_t arr;
    cudaMemcpy3DParms p;
    size_t n = (size_t)W * H * D;
    unsigned short *in = (unsigned short *)malloc(n * 2), *out = (unsigned short *)calloc(n, 2);

    if (in == NULL || out == NULL)
        vcu_test_fail("out of host memory");
    for (size_t i = 0; i < n; i++)
        in[i] = (unsigned short)(i * 13 + 5);
    CK(cudaMalloc3DArray(&arr, &cd, ext));
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr(in, W * 2, W, H);
    p.dstArray = arr;
    p.extent = ext;
    p.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&p));
    memset(&p, 0, sizeof(p));
    p.srcArray = arr;
    p.dstPtr = make_cudaPitchedPtr(out, W * 2, W, H);
    p.extent = ext;
    p.kind = cudaMemcpyDeviceToHost;
    CK(cudaMemcpy3D(&p));
    if (memcmp(in, out, n * 2) != 0)
        vcu_test_fail("3D array round trip differs");
    CK(cudaFreeArray(arr));
    free(in);
    free(out);
}

int main(void)
{
    cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
    cudaArray_t probe;
    cudaError_t e;
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;

    CK(cudaSetDevice(0));
    e = cudaMallocArray(&probe, &cd, 4, 4);
    if (e == cudaErrorNotSupported &&
        cudaGetDriverEntryPointByVersion("cuArrayCreate", &fn, 12000, cudaEnableDefault, &q) ==
            cudaErrorNotSupported) {
        /* Our own runtime: neither arrays nor the driver behind it. */
        cudaGetLastError();
        printf("skipped: this CUDA runtime has no arrays (NVIDIA's runs this test)\n");
        printf("PASS %s\n", TEST_NAME);
        return 0;
    }
    CK(e);
    CK(cudaFreeArray(probe));
    texture_2d(!stand_in());
    surface_2d(!stand_in());
    array_3d();
    if (stand_in())
        printf("skipped: the CPU stand-in runs no texture or surface kernel\n");
    printf("PASS %s\n", TEST_NAME);
    return 0;
}
