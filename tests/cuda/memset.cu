/* cudaMemset and cudaMemsetAsync, checked on the host and by a kernel. */
#define TEST_NAME "memset"
#include "vcu_test.h"

/* counts[0] += elements equal to v, counts[1] += elements not equal. */
__global__ void ms_count(const unsigned char *p, int n, unsigned char v,
                         int *counts)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        atomicAdd(&counts[p[i] == v ? 0 : 1], 1);
}

int main(void)
{
    const int n = 100003;
    unsigned char *h = (unsigned char *)malloc(n), *d;
    int *dcounts, counts[2];
    cudaStream_t s;

    CK(cudaMalloc(&d, n));
    CK(cudaMalloc(&dcounts, sizeof(counts)));
    CK(cudaStreamCreate(&s));

    CK(cudaMemset(d, 0xAB, n));
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == 0xAB, "cudaMemset: byte %d = %#x", i, h[i]);
    printf("cudaMemset 0xab over %d bytes ok\n", n);

    /* An odd offset and length inside, on a stream. */
    CK(cudaMemsetAsync(d + 17, 0x5C, 5001, s));
    CK(cudaMemsetAsync(dcounts, 0, sizeof(counts), s));
    ms_count<<<(n + 255) / 256, 256, 0, s>>>(d, n, 0x5C, dcounts);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(counts, dcounts, sizeof(counts), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    EXPECT(counts[0] == 5001 && counts[1] == n - 5001,
           "kernel counted %d/%d", counts[0], counts[1]);
    CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        unsigned char want = (i >= 17 && i < 17 + 5001) ? 0x5C : 0xAB;

        EXPECT(h[i] == want, "cudaMemsetAsync: byte %d = %#x, want %#x", i,
               h[i], want);
    }
    printf("cudaMemsetAsync [17, 5018) ok, kernel counted %d/%d\n", counts[0],
           counts[1]);

    /* Value is taken as an unsigned char: 0x1FF sets 0xFF. */
    CK(cudaMemset(d, 0x1FF, 64));
    CK(cudaMemcpy(h, d, 64, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++)
        EXPECT(h[i] == 0xFF, "cudaMemset(0x1ff): byte %d = %#x", i, h[i]);
    printf("value truncated to a byte ok\n");

    CK(cudaStreamDestroy(s));
    CK(cudaFree(d));
    CK(cudaFree(dcounts));
    free(h);
    vcu_test_pass();
    return 0;
}
