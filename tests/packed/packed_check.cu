/*
 * GPU suite (packed, tests/gpu/packed.sh): what a guest of a packed VM
 * (sms=N) sees of its SMs, and where its kernels run.
 *
 *   packed_check N
 *
 * Checks that the device properties (cudaGetDeviceProperties and
 * cudaDeviceGetAttribute) say N SMs, that the guest's NVML gives N SMs'
 * worth of cores (nvmlDeviceGetNumGpuCores), and that a grid of many
 * blocks, each holding its SM a moment, runs on exactly N distinct SMs
 * (the %smid register).  Prints one line and exits 0 when all agree:
 *
 *   VCU-PACKED check sms=N props=P attr=A nvml_cores=C smid_distinct=D smid_max=M PASS|FAIL
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

#define SEEN_WORDS 64           /* a bitmap of %smid values, 0..2047 */

extern "C" __global__ void packed_smid(unsigned int *seen, long long spin)
{
    unsigned int smid;

    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    if (threadIdx.x == 0) {
        long long t0 = clock64();

        if (smid < SEEN_WORDS * 32)
            atomicOr(&seen[smid / 32], 1u << (smid % 32));
        atomicMax(&seen[SEEN_WORDS], smid);
        while (clock64() - t0 < spin)
            ;
    }
    __syncthreads();
}

/* NVML's cores of device 0, through the guest's libnvidia-ml.so.1; -1
 * where it cannot be asked. */
static long nvml_cores(void)
{
    typedef int (*init_t)(void);
    typedef int (*handle_t)(unsigned int, void **);
    typedef int (*cores_t)(void *, unsigned int *);
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    unsigned int cores = 0;
    void *dev = NULL;

    if (h == NULL) {
        fprintf(stderr, "packed_check: %s\n", dlerror());
        return -1;
    }
    init_t init = (init_t)dlsym(h, "nvmlInit_v2");
    handle_t get = (handle_t)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    cores_t num = (cores_t)dlsym(h, "nvmlDeviceGetNumGpuCores");
    if (init == NULL || get == NULL || num == NULL || init() != 0 || get(0, &dev) != 0 ||
        num(dev, &cores) != 0)
        return -1;
    return (long)cores;
}

int main(int argc, char **argv)
{
    cudaDeviceProp prop;
    unsigned int *seen, host[SEEN_WORDS + 1];
    int n, attr = -1, distinct = 0;
    long cores;
    cudaError_t e;

    if (argc < 2 || (n = atoi(argv[1])) <= 0) {
        fprintf(stderr, "usage: packed_check N\n");
        return 2;
    }
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&attr, cudaDevAttrMultiProcessorCount, 0)) != cudaSuccess ||
        (e = cudaMalloc(&seen, sizeof(host))) != cudaSuccess ||
        (e = cudaMemset(seen, 0, sizeof(host))) != cudaSuccess) {
        printf("VCU-PACKED check error %s\n", cudaGetErrorString(e));
        return 1;
    }
    /* 32 blocks for each SM the whole GPU could have, each holding its SM
     * some 20 us: every SM the context may use gets blocks. */
    for (int i = 0; i < 3; i++)
        packed_smid<<<32 * 132, 64>>>(seen, 40000);
    if ((e = cudaMemcpy(host, seen, sizeof(host), cudaMemcpyDeviceToHost)) != cudaSuccess) {
        printf("VCU-PACKED check error %s\n", cudaGetErrorString(e));
        return 1;
    }
    for (int w = 0; w < SEEN_WORDS; w++)
        distinct += __builtin_popcount(host[w]);
    cores = nvml_cores();
    bool ok = prop.multiProcessorCount == n && attr == n && distinct == n && cores > 0 &&
              cores % n == 0 && (cores / n == 64 || cores / n == 128);
    printf("VCU-PACKED check sms=%d props=%d attr=%d nvml_cores=%ld smid_distinct=%d smid_max=%u %s\n",
           n, prop.multiProcessorCount, attr, cores, distinct, host[SEEN_WORDS],
           ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
