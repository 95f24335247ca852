/*
 * Bursts of async work, which the guest library coalesces into batches
 * (guest-lib/batch.c): thousands of launches and memsets in one stream
 * run exactly in order; a launch followed by no CUDA call at all (the
 * program spins on mapped memory the kernel writes) still runs, soon;
 * event timing around a burst still works.
 */
#define TEST_NAME "batching"
#include <time.h>

#include "vcu_test.h"

/* p[0] counts the steps that came in order, p[1] those that did not. */
__global__ void bt_step(int *p, int i)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        if (p[0] == i)
            p[0] = i + 1;
        else
            p[1] += 1;
    }
}

__global__ void bt_flag(int *flag, int v)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        __threadfence_system();
        *(volatile int *)flag = v;
    }
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    const int steps = 3000;
    int *d, host[4], *flag, *dflag;
    unsigned char bytes[64];
    cudaEvent_t e0, e1;
    float ms = -1.0f;
    double t0, waited;

    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CK(cudaMalloc((void **)&d, 4 * sizeof(int) + sizeof(bytes)));
    CK(cudaMemset(d, 0, 4 * sizeof(int) + sizeof(bytes)));

    /* Launches and memsets interleaved, as one burst. */
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, 0));
    for (int i = 0; i < steps; i++) {
        bt_step<<<1, 32>>>(d, i);
        if (i % 100 == 99)
            CK(cudaMemsetAsync((unsigned char *)(d + 4) + i / 100, i / 100, 1, 0));
    }
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(bytes, d + 4, sizeof(bytes), cudaMemcpyDeviceToHost));
    printf("steps in order %d, out of order %d\n", host[0], host[1]);
    EXPECT(host[0] == steps && host[1] == 0, "launches ran out of order or not at all");
    for (int k = 0; k < steps / 100; k++)
        EXPECT(bytes[k] == (unsigned char)k, "the memset between launches %d and %d was lost",
               100 * k + 99, 100 * k + 100);
    EXPECT(ms >= 0.0f, "no elapsed time between the events around the burst");
    printf("info: %d launches in %.3f ms of GPU time\n", steps, ms);

    /* A burst, then nothing but a wait on mapped memory: no CUDA call
     * sends the last launches, yet they must run. */
    CK(cudaHostAlloc((void **)&flag, sizeof(int), cudaHostAllocMapped));
    *(volatile int *)flag = 0;
    CK(cudaHostGetDevicePointer((void **)&dflag, flag, 0));
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < 5; i++)
        bt_step<<<1, 32>>>(d, steps + i);
    bt_flag<<<1, 1>>>(dflag, 12345);
    t0 = now_s();
    while (*(volatile int *)flag != 12345 && now_s() - t0 < 30.0)
        ;
    waited = now_s() - t0;
    EXPECT(*(volatile int *)flag == 12345, "a launch followed by no CUDA call never ran");
    printf("info: the flag came after %.0f us\n", waited * 1e6);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(host, d, sizeof(host), cudaMemcpyDeviceToHost));
    EXPECT(host[0] == steps + 5 && host[1] == 0, "the launches before the flag went wrong");
    CK(cudaFreeHost(flag));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(d));
    vcu_test_pass();
    return 0;
}
