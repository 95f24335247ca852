/*
 * Local memory past the stack limit: a kernel whose threads each need
 * 16 KiB of local memory, more than the default stack limit (1 KiB),
 * runs and computes right; the stack limit then covers it, and setting
 * the limit back down does not stop the kernel running again (natively
 * the driver grows the limit at the launch; through the device the
 * backend raised it, charged, when the kernel was looked up).
 */
#define TEST_NAME "lmem"
#include "vcu_test.h"

#define LMEM_WORDS 4096             /* 16 KiB a thread */
#define BLOCKS 4
#define THREADS 128

__global__ void lmem_walk(unsigned int *out, unsigned int seed)
{
    volatile unsigned int a[LMEM_WORDS];
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x, s = 0;

    for (unsigned int j = 0; j < LMEM_WORDS; j++)
        a[j] = seed ^ (i + j);
    for (unsigned int j = 0; j < LMEM_WORDS; j++)
        s += a[LMEM_WORDS - 1 - j] * (j | 1);
    out[i] = s;
}

/* What lmem_walk gives thread i. */
static unsigned int expect(unsigned int i, unsigned int seed)
{
    unsigned int s = 0;

    for (unsigned int j = 0; j < LMEM_WORDS; j++)
        s += (seed ^ (i + LMEM_WORDS - 1 - j)) * (j | 1);
    return s;
}

static void run(unsigned int *d, unsigned int *h, unsigned int seed)
{
    const unsigned int n = BLOCKS * THREADS;

    lmem_walk<<<BLOCKS, THREADS>>>(d, seed);
    CK_LAUNCH();
    CK(cudaMemcpy(h, d, n * sizeof(*h), cudaMemcpyDeviceToHost));
    for (unsigned int i = 0; i < n; i++)
        EXPECT(h[i] == expect(i, seed), "seed %#x thread %u: %#x, want %#x", seed, i, h[i],
               expect(i, seed));
}

int main(void)
{
    unsigned int *d, *h = (unsigned int *)malloc(BLOCKS * THREADS * sizeof(*h));
    size_t before = 0, after = 0;
    cudaFuncAttributes attr;

    EXPECT(h != NULL, "malloc");
    CK(cudaFuncGetAttributes(&attr, lmem_walk));
    EXPECT(attr.localSizeBytes >= LMEM_WORDS * sizeof(unsigned int), "localSizeBytes %zu",
           attr.localSizeBytes);
    printf("local memory: at least 16 KiB a thread\n");
    printf("info: localSizeBytes %zu\n", attr.localSizeBytes);
    CK(cudaDeviceGetLimit(&before, cudaLimitStackSize));
    CK(cudaMalloc(&d, BLOCKS * THREADS * sizeof(*d)));
    run(d, h, 0x5a5a1234u);
    CK(cudaDeviceGetLimit(&after, cudaLimitStackSize));
    printf("launched: results right\n");
    printf("info: stack limit %zu before, %zu after\n", before, after);
    CK(cudaDeviceSetLimit(cudaLimitStackSize, 1024));
    run(d, h, 0xc0ffeeu);
    CK(cudaDeviceGetLimit(&after, cudaLimitStackSize));
    printf("stack limit lowered: launched again, results right\n");
    printf("info: stack limit %zu after lowering to 1024 and a launch\n", after);
    CK(cudaFree(d));
    free(h);
    vcu_test_pass();
    return 0;
}
