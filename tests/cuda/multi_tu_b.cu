/* The second translation unit of multi_tu (see multi_tu_a.cu). */
#include <cuda_runtime.h>

__constant__ int mtu_b_scale = 5;
__device__ int mtu_b_offset;

__global__ void mtu_kernel_b(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = p[i] * mtu_b_scale + mtu_b_offset;
}

cudaError_t mtu_set_b_offset(int v)
{
    return cudaMemcpyToSymbol(mtu_b_offset, &v, sizeof(v));
}

cudaError_t mtu_launch_b(int *p, int n)
{
    mtu_kernel_b<<<(n + 127) / 128, 128>>>(p, n);
    return cudaGetLastError();
}
