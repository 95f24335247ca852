/*
 * GPU suite (leaks): holds GPU memory and keeps the GPU busy until killed,
 * so that the host can check what a killed process, a device reset and a
 * killed QEMU leave behind.  Prints "spinning" once its work is running.
 *
 *   spin [MIB]      device memory to hold (default 256)
 */
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

__global__ void spin_for(long long cycles, int *flag)
{
    long long t0 = clock64();

    while (clock64() - t0 < cycles)
        ;
    if (threadIdx.x == 0)
        flag[blockIdx.x] = 1;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
    int *d;

    if (cudaMalloc(&d, mib << 20) != cudaSuccess || cudaMemset(d, 0, mib << 20) != cudaSuccess) {
        printf("spin: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    spin_for<<<4, 32>>>(1000000LL, d);
    if (cudaDeviceSynchronize() != cudaSuccess) {
        printf("spin: first launch failed\n");
        return 1;
    }
    printf("spinning\n");
    fflush(stdout);
    for (;;) {
        spin_for<<<132, 128>>>(2000000000LL, d);
        if (cudaDeviceSynchronize() != cudaSuccess)
            return 1;
    }
}
