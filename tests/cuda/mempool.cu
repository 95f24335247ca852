/* Stream-ordered allocation and the device's default memory pool. */
#define TEST_NAME "mempool"
#include <string.h>
#include <unistd.h>
#include "vcu_test.h"

__global__ void mp_fill(int *p, int n, int base)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = base + 3 * i;
}

int main(void)
{
    const int n = 50000;
    int supported = 0, *d, *h = (int *)malloc(n * sizeof(int));
    cudaMemPool_t pool, cur;
    unsigned long long thr = 64ull << 20, got = 0;
    cudaStream_t s;

    CK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    EXPECT(supported == 1, "cudaDevAttrMemoryPoolsSupported = %d", supported);
    /* Pools shared between processes: what the device says is what the
     * runtime does (docs/design.md, "CUDA IPC"): POSIX descriptors on
     * NVIDIA's runtime over our libcuda.so.1 in a VM, none on ours. */
    CK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    EXPECT(supported == 0 || supported == cudaMemHandleTypePosixFileDescriptor,
           "cudaDevAttrMemoryPoolSupportedHandleTypes = %d", supported);
    {
        cudaMemPoolProps props;
        cudaMemPool_t shared;
        int fd = -1;
        cudaError_t r;

        memset(&props, 0, sizeof(props));
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = 0;
        r = cudaMemPoolCreate(&shared, &props);
        if (r == cudaSuccess) {
            r = cudaMemPoolExportToShareableHandle(&fd, shared,
                                                   cudaMemHandleTypePosixFileDescriptor, 0);
            CK(cudaMemPoolDestroy(shared));
        }
        EXPECT((r == cudaSuccess) == (supported != 0),
               "the device says %d, a shareable pool's export gives %s", supported,
               cudaGetErrorName(r));
        if (fd >= 0)
            close(fd);
        cudaGetLastError();
        printf("shareable pools: %s\n", supported ? "offered" : "not offered");
    }
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    CK(cudaDeviceGetMemPool(&cur, 0));
    EXPECT(cur == pool, "current pool is not the default pool");
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &got));
    EXPECT(got == thr, "release threshold reads %llu, want %llu",
           (unsigned long long)got, (unsigned long long)thr);
    printf("release threshold %llu\n", (unsigned long long)got);

    CK(cudaStreamCreate(&s));
    for (int r = 0; r < 3; r++) {
        CK(cudaMallocAsync((void **)&d, n * sizeof(int), s));
        mp_fill<<<(n + 255) / 256, 256, 0, s>>>(d, n, r * 1000);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(h, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
        CK(cudaFreeAsync(d, s));
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++)
            EXPECT(h[i] == r * 1000 + 3 * i, "round %d: h[%d] = %d", r, i, h[i]);
        printf("round %d ok\n", r);
    }
    CK(cudaMallocFromPoolAsync((void **)&d, 4096, pool, s));
    CK(cudaMemsetAsync(d, 0, 4096, s));
    CK(cudaFreeAsync(d, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemPoolTrimTo(pool, 0));
    printf("cudaMallocFromPoolAsync and trim ok\n");
    CK(cudaStreamDestroy(s));
    free(h);
    vcu_test_pass();
    return 0;
}
