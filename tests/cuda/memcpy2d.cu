/* Pitched allocations: cudaMallocPitch, cudaMemset2D, cudaMemcpy2D. */
#define TEST_NAME "memcpy2d"
#include "vcu_test.h"

#define W 100                       /* floats per row */
#define H 37                        /* rows */

__global__ void m2_inc(float *p, size_t pitch, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;

    if (x < w && y < h) {
        float *row = (float *)((char *)p + y * pitch);

        row[x] += 1.0f + (float)y;
    }
}

int main(void)
{
    const size_t hpitch = (W + 3) * sizeof(float);   /* host rows padded too */
    float *h = (float *)malloc(hpitch * H), *back = (float *)malloc(hpitch * H);
    unsigned char *bytes = (unsigned char *)malloc(W * sizeof(float) * H);
    float *d;
    size_t pitch = 0;

    CK(cudaMallocPitch((void **)&d, &pitch, W * sizeof(float), H));
    EXPECT(pitch >= W * sizeof(float), "pitch %zu < row width", pitch);
    printf("info: pitch %zu\n", pitch);

    CK(cudaMemset2D(d, pitch, 0x3C, W * sizeof(float), H));
    CK(cudaMemcpy2D(bytes, W * sizeof(float), d, pitch, W * sizeof(float), H,
                    cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < W * sizeof(float) * H; i++)
        EXPECT(bytes[i] == 0x3C, "cudaMemset2D: byte %zu = %#x", i, bytes[i]);
    printf("cudaMemset2D ok\n");

    for (int y = 0; y < H; y++)
        for (int x = 0; x < W + 3; x++)
            ((float *)((char *)h + y * hpitch))[x] = (float)(y * 1000 + x);
    CK(cudaMemcpy2D(d, pitch, h, hpitch, W * sizeof(float), H,
                    cudaMemcpyHostToDevice));
    dim3 block(32, 8), grid((W + 31) / 32, (H + 7) / 8);
    m2_inc<<<grid, block>>>(d, pitch, W, H);
    CK_LAUNCH();
    for (size_t i = 0; i < hpitch * H / sizeof(float); i++)
        back[i] = -1.0f;
    CK(cudaMemcpy2D(back, hpitch, d, pitch, W * sizeof(float), H,
                    cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++) {
        float *row = (float *)((char *)back + y * hpitch);

        for (int x = 0; x < W; x++)
            EXPECT(row[x] == (float)(y * 1000 + x) + 1.0f + (float)y,
                   "(%d,%d) = %g", x, y, row[x]);
        for (int x = W; x < W + 3; x++)
            EXPECT(row[x] == -1.0f, "host padding (%d,%d) overwritten", x, y);
    }
    printf("cudaMemcpy2D round trip of %dx%d ok\n", W, H);

    /* A sub-rectangle, device to device, into a second pitched buffer. */
    float *d2;
    size_t pitch2;
    CK(cudaMallocPitch((void **)&d2, &pitch2, 10 * sizeof(float), 5));
    CK(cudaMemcpy2D(d2, pitch2, (char *)d + 3 * pitch + 7 * sizeof(float),
                    pitch, 10 * sizeof(float), 5, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy2D(back, 10 * sizeof(float), d2, pitch2, 10 * sizeof(float), 5,
                    cudaMemcpyDeviceToHost));
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 10; x++)
            EXPECT(back[y * 10 + x] ==
                   (float)((y + 3) * 1000 + x + 7) + 1.0f + (float)(y + 3),
                   "sub-rectangle (%d,%d) = %g", x, y, back[y * 10 + x]);
    printf("device-to-device sub-rectangle ok\n");

    CK(cudaFree(d));
    CK(cudaFree(d2));
    free(h);
    free(back);
    free(bytes);
    vcu_test_pass();
    return 0;
}
