/*
 * 64 KiB of dynamic shared memory: refused without
 * cudaFuncAttributeMaxDynamicSharedMemorySize, works with it.
 */
#define TEST_NAME "dynshared"
#include "vcu_test.h"

#define SMEM_BYTES (64 * 1024)
#define SMEM_FLOATS (SMEM_BYTES / (int)sizeof(float))

/* Each block reverses its chunk of SMEM_FLOATS floats through shared memory. */
__global__ void dyn_reverse(const float *in, float *out)
{
    extern __shared__ float buf[];
    const float *src = in + (size_t)blockIdx.x * SMEM_FLOATS;
    float *dst = out + (size_t)blockIdx.x * SMEM_FLOATS;

    for (int i = threadIdx.x; i < SMEM_FLOATS; i += blockDim.x)
        buf[i] = src[i];
    __syncthreads();
    for (int i = threadIdx.x; i < SMEM_FLOATS; i += blockDim.x)
        dst[i] = buf[SMEM_FLOATS - 1 - i];
}

int main(void)
{
    const int blocks = 4, n = blocks * SMEM_FLOATS;
    float *hin = (float *)malloc(n * sizeof(float));
    float *hout = (float *)malloc(n * sizeof(float));
    float *din, *dout;
    cudaFuncAttributes attr;
    cudaError_t err;
    int optin = 0;

    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    EXPECT(optin >= SMEM_BYTES, "opt-in shared memory %d < %d", optin,
           SMEM_BYTES);
    for (int i = 0; i < n; i++)
        hin[i] = (float)i;
    CK(cudaMalloc(&din, n * sizeof(float)));
    CK(cudaMalloc(&dout, n * sizeof(float)));
    CK(cudaMemcpy(din, hin, n * sizeof(float), cudaMemcpyHostToDevice));

    dyn_reverse<<<blocks, 256, SMEM_BYTES>>>(din, dout);
    err = cudaGetLastError();
    EXPECT(err != cudaSuccess, "64 KiB launch without the attribute succeeded");
    printf("without attribute: refused\n");
    printf("info: error %s\n", cudaGetErrorName(err));
    CK(cudaGetLastError());         /* not sticky */

    CK(cudaFuncSetAttribute(dyn_reverse,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            SMEM_BYTES));
    CK(cudaFuncGetAttributes(&attr, dyn_reverse));
    EXPECT(attr.maxDynamicSharedSizeBytes == SMEM_BYTES,
           "maxDynamicSharedSizeBytes = %d", attr.maxDynamicSharedSizeBytes);
    dyn_reverse<<<blocks, 256, SMEM_BYTES>>>(din, dout);
    CK_LAUNCH();
    CK(cudaMemcpy(hout, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
        for (int i = 0; i < SMEM_FLOATS; i++)
            EXPECT(hout[b * SMEM_FLOATS + i] ==
                   hin[b * SMEM_FLOATS + SMEM_FLOATS - 1 - i],
                   "block %d element %d not reversed", b, i);
    printf("with attribute: %d blocks of %d bytes reversed\n", blocks,
           SMEM_BYTES);
    CK(cudaFree(din));
    CK(cudaFree(dout));
    free(hin);
    free(hout);
    vcu_test_pass();
    return 0;
}
