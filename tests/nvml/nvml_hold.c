/*
 * Holds the device for the nvml VM suite: a context and MIB MiB of device
 * memory through libcuda.so.1 (ours), then "holding" on stdout and a
 * wait until killed, so that the sessions file and vcuda-smi list it.
 *
 *   nvml_hold MIB
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cuda.h>

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 16;
    CUcontext ctx;
    CUdeviceptr p;
    CUdevice d;
    CUresult r;

    if ((r = cuInit(0)) != CUDA_SUCCESS || (r = cuDeviceGet(&d, 0)) != CUDA_SUCCESS ||
        (r = cuCtxCreate(&ctx, NULL, 0, d)) != CUDA_SUCCESS ||
        (r = cuMemAlloc(&p, mib << 20)) != CUDA_SUCCESS) {
        printf("nvml_hold: CUDA error %d\n", (int)r);
        return 1;
    }
    printf("holding %zu MiB\n", mib);
    fflush(stdout);
    for (;;)
        pause();
}
