/*
 * Failure paths: errors that are reported and cleared, then, last, an
 * illegal address in a kernel, which poisons the context for good.
 */
#define TEST_NAME "errors"
#include <string.h>
#include "vcu_test.h"

__global__ void err_fill(int *p, int n, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = v;
}

/* Stores 4 TiB past a valid pointer: cudaErrorIllegalAddress. */
__global__ void err_oob_write(int *p)
{
    p[1ull << 40] = 1;
}

int main(void)
{
    const int n = 1024;
    int h[n], *d, *d2;

    CK(cudaMalloc(&d, n * sizeof(int)));

    /*
     * Too many threads per block: reported at launch, not sticky.  CUDA 13's
     * runtime says cudaErrorInvalidValue here (older ones said
     * cudaErrorInvalidConfiguration); seen on an H200, driver 580.
     */
    err_fill<<<1, 2048>>>(d, n, 1);
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    CK(cudaGetLastError());
    printf("2048 threads per block: cudaErrorInvalidValue\n");
    err_fill<<<dim3(1, 1, 1), dim3(1, 1, 65)>>>(d, n, 1);
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    printf("blockDim.z 65: cudaErrorInvalidValue\n");
    err_fill<<<0, 32>>>(d, n, 1);
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    printf("empty grid: cudaErrorInvalidValue\n");
    err_fill<<<n / 256, 256>>>(d, n, 9);
    CK_LAUNCH();
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == 9, "launch after a bad configuration: h[%d] = %d", i, h[i]);
    printf("next launch works\n");

    /*
     * A device pointer that is no allocation.  (Not with cudaMemcpyDefault
     * or as a destination: unknown pointers are host memory under UVA, and
     * NVIDIA's runtime then dereferences them.)  Each failed call is also
     * the last error, until read.
     */
    CK_EQ(cudaErrorInvalidValue,
          cudaMemcpy(h, (void *)0x1000, sizeof(h), cudaMemcpyDeviceToHost));
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    printf("cudaMemcpy from a bogus device pointer: cudaErrorInvalidValue\n");
    CK_EQ(cudaErrorInvalidValue, cudaMemset((void *)0x1000, 0, 64));
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    printf("cudaMemset of a bogus device pointer: cudaErrorInvalidValue\n");

    CK_EQ(cudaErrorInvalidValue, cudaFree((void *)0x1234));
    CK_EQ(cudaErrorInvalidValue, cudaFree((char *)d + 16));
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    printf("cudaFree of a bogus or interior pointer: cudaErrorInvalidValue\n");
    CK(cudaFree(NULL));

    EXPECT(strcmp(cudaGetErrorName(cudaErrorInvalidValue),
                  "cudaErrorInvalidValue") == 0, "cudaGetErrorName");
    EXPECT(strcmp(cudaGetErrorName(cudaErrorIllegalAddress),
                  "cudaErrorIllegalAddress") == 0, "cudaGetErrorName(700)");
    EXPECT(strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0,
           "cudaGetErrorName(cudaSuccess)");
    EXPECT(cudaGetErrorString(cudaErrorInvalidValue) != NULL &&
           strlen(cudaGetErrorString(cudaErrorInvalidValue)) > 0,
           "cudaGetErrorString");
    printf("info: cudaErrorInvalidValue: %s\n",
           cudaGetErrorString(cudaErrorInvalidValue));
    EXPECT(cudaPeekAtLastError() == cudaSuccess, "an error is still pending");
    printf("error names ok\n");

    /* Last: an illegal address, sticky from here on. */
    err_oob_write<<<1, 1>>>(d);
    CK(cudaGetLastError());
    CK_EQ(cudaErrorIllegalAddress, cudaDeviceSynchronize());
    printf("out-of-bounds store: cudaErrorIllegalAddress\n");
    CK_EQ(cudaErrorIllegalAddress, cudaMalloc(&d2, 4096));
    CK_EQ(cudaErrorIllegalAddress, cudaGetLastError());
    CK_EQ(cudaErrorIllegalAddress, cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    err_fill<<<1, 32>>>(d, n, 1);
    CK_EQ(cudaErrorIllegalAddress, cudaGetLastError());
    CK_EQ(cudaErrorIllegalAddress, cudaDeviceSynchronize());
    printf("the error is sticky: cudaMalloc, cudaMemcpy, launch, synchronize\n");
    vcu_test_pass();
    return 0;
}
