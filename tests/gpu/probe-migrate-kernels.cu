/* Kernels of tests/gpu/probe-migrate.c: a module global and a kernel that
 * adds to it and to a buffer. */
__device__ unsigned long long g_counter;
__device__ unsigned int g_table[4096];

extern "C" __global__ void bump(unsigned int *buf, unsigned int n, unsigned int add)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        buf[i] += add;
    if (i == 0)
        atomicAdd(&g_counter, add);
    if (i < 4096)
        g_table[i] += add;
}
