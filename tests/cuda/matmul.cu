/* Tiled C = A * B with __shared__ tiles and __syncthreads(). */
#define TEST_NAME "matmul"
#include <math.h>
#include "vcu_test.h"

#define TILE 16

/* Any n; tiles past the edge load zeros. */
__global__ void matmul_tiled(const float *a, const float *b, float *c, int n)
{
    __shared__ float ta[TILE][TILE];
    __shared__ float tb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;

    for (int t = 0; t < (n + TILE - 1) / TILE; t++) {
        int ac = t * TILE + threadIdx.x;
        int br = t * TILE + threadIdx.y;

        ta[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? a[row * n + ac] : 0.0f;
        tb[threadIdx.y][threadIdx.x] = (br < n && col < n) ? b[br * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n)
        c[row * n + col] = acc;
}

static int run(int n)
{
    size_t bytes = (size_t)n * n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes);
    float *hc = (float *)malloc(bytes);
    float *da, *db, *dc;
    dim3 block(TILE, TILE);
    dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    int bad = 0;

    for (int i = 0; i < n * n; i++) {
        ha[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        hb[i] = (float)((i * 5) % 11) / 11.0f - 0.25f;
    }
    CK(cudaMalloc(&da, bytes));
    CK(cudaMalloc(&db, bytes));
    CK(cudaMalloc(&dc, bytes));
    CK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
    matmul_tiled<<<grid, block>>>(da, db, dc, n);
    CK_LAUNCH();
    CK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
    for (int r = 0; r < n; r++) {
        for (int c = 0; c < n; c++) {
            double ref = 0.0;

            for (int k = 0; k < n; k++)
                ref += (double)ha[r * n + k] * hb[k * n + c];
            if (fabs(hc[r * n + c] - ref) > 1e-3 * (1.0 + fabs(ref)))
                bad++;
        }
    }
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    free(ha);
    free(hb);
    free(hc);
    printf("n=%d grid=%ux%u mismatches=%d\n", n, grid.x, grid.y, bad);
    return bad;
}

int main(void)
{
    EXPECT(run(128) == 0, "128x128 differs from the CPU reference");
    EXPECT(run(50) == 0, "50x50 (partial tiles) differs from the CPU reference");
    vcu_test_pass();
    return 0;
}
