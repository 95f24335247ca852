/* c = a + b on 1M floats, and a second launch with a partial last block. */
#define TEST_NAME "vector_add"
#include "vcu_test.h"

__global__ void vector_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        c[i] = a[i] + b[i];
}

static int run(int n, int threads)
{
    size_t bytes = (size_t)n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes);
    float *hc = (float *)malloc(bytes);
    float *da, *db, *dc;
    int blocks = (n + threads - 1) / threads;
    int bad = 0;

    for (int i = 0; i < n; i++) {
        ha[i] = (float)(i % 1000) * 0.5f;
        hb[i] = (float)(i % 777) * 0.25f - 3.0f;
    }
    CK(cudaMalloc(&da, bytes));
    CK(cudaMalloc(&db, bytes));
    CK(cudaMalloc(&dc, bytes));
    CK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(dc, 0, bytes));
    vector_add<<<blocks, threads>>>(da, db, dc, n);
    CK_LAUNCH();
    CK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (hc[i] != ha[i] + hb[i])
            bad++;
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    free(ha);
    free(hb);
    free(hc);
    printf("n=%d threads=%d blocks=%d mismatches=%d\n", n, threads, blocks,
           bad);
    return bad;
}

int main(void)
{
    EXPECT(run(1 << 20, 256) == 0, "1M elements differ from the CPU sum");
    EXPECT(run(1000, 128) == 0, "partial block differs from the CPU sum");
    vcu_test_pass();
    return 0;
}
