/* Pinned host memory (cudaMallocHost, cudaHostAlloc) and async copies. */
#define TEST_NAME "async_pinned"
#include <string.h>
#include "vcu_test.h"

__global__ void ap_scale(float *p, float s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = p[i] * s + 1.0f;
}

int main(void)
{
    const int n = 1 << 18;
    size_t bytes = n * sizeof(float);
    float *hin, *hout, *d;
    unsigned int flags = 99;
    cudaStream_t s;

    CK(cudaMallocHost((void **)&hin, bytes));
    CK(cudaHostAlloc((void **)&hout, bytes, cudaHostAllocDefault));
    CK(cudaHostGetFlags(&flags, hout));
    printf("info: host alloc flags %u\n", flags);
    CK(cudaStreamCreate(&s));
    CK(cudaMalloc(&d, bytes));
    for (int i = 0; i < n; i++) {
        hin[i] = (float)(i % 4096);
        hout[i] = -1.0f;
    }
    for (int round = 0; round < 3; round++) {
        CK(cudaMemcpyAsync(d, hin, bytes, cudaMemcpyHostToDevice, s));
        ap_scale<<<n / 256, 256, 0, s>>>(d, (float)(round + 2), n);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(hout, d, bytes, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++)
            EXPECT(hout[i] == hin[i] * (float)(round + 2) + 1.0f,
                   "round %d: hout[%d] = %g", round, i, hout[i]);
        printf("round %d ok\n", round);
    }
    /* cudaMemcpyDefault between pinned host and device memory. */
    CK(cudaMemcpyAsync(d, hout, bytes, cudaMemcpyDefault, s));
    CK(cudaMemcpyAsync(hin, d, bytes, cudaMemcpyDefault, s));
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++)
        EXPECT(hin[i] == hout[i], "cudaMemcpyDefault round trip at %d", i);
    printf("cudaMemcpyDefault round trip ok\n");

    /* Copies of growing size from the start of one pinned buffer, then
     * from the middle, as bandwidth tests do: each covers pages an earlier,
     * smaller one did not. */
    {
        float *big;
        size_t sizes[] = { 4096, 16384, 65536, 262144, bytes };

        CK(cudaMallocHost((void **)&big, 2 * bytes));
        for (int i = 0; i < 2 * n; i++)
            big[i] = (float)(i % 977);
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            CK(cudaMemcpyAsync(d, big, sizes[k], cudaMemcpyHostToDevice, s));
            CK(cudaMemcpyAsync(hout, d, sizes[k], cudaMemcpyDeviceToHost, s));
            CK(cudaMemcpyAsync(d, big + 1000 + 257 * k, sizes[k], cudaMemcpyHostToDevice, s));
            CK(cudaStreamSynchronize(s));
            EXPECT(memcmp(hout, big, sizes[k]) == 0, "growing copies: %zu bytes differ", sizes[k]);
        }
        CK(cudaFreeHost(big));
        printf("copies of growing size from one pinned buffer ok\n");
    }
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(hin));
    CK(cudaFreeHost(hout));
    vcu_test_pass();
    return 0;
}
