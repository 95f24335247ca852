/*
 * GPU suite (share, tests/gpu/share.sh): a compute-bound kernel loop.
 *
 *   share_loop TAG SECS [ITERS]
 *
 * Launches identical kernels (ITERS dependent FMAs per thread, default
 * 100000, on 8 blocks of 256 threads per SM: a fixed amount of work, never
 * a clock, since a context switched out must not finish its kernels) in
 * batches of 8, two batches in flight, for SECS seconds, and prints the
 * kernels completed so far about every second, so that the host can
 * compare VMs over the window they all ran in:
 *
 *   VCU-SHARE TAG start batch_ms=T
 *   VCU-SHARE TAG tick kernels=K
 *   VCU-SHARE TAG done kernels=K secs=S
 *   VCU-SHARE TAG error WHAT       (exit status 1)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime.h>

#define BATCH 8

__global__ void share_burn(float *out, int iters)
{
    float a = threadIdx.x * 1e-3f, b = blockIdx.x * 1e-3f;

    for (int i = 0; i < iters; i++) {
        a = fmaf(a, 0.9999f, 0.0001f);
        b = fmaf(b, 0.9998f, 0.0002f);
    }
    if (a + b == 12345.0f)
        out[0] = a;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *tag;

static int fail(const char *what, cudaError_t e)
{
    printf("VCU-SHARE %s error %s: %s\n", tag, what, cudaGetErrorString(e));
    fflush(stdout);
    return 1;
}

static cudaError_t batch(float *out, int blocks, int iters, cudaEvent_t ev)
{
    for (int i = 0; i < BATCH; i++)
        share_burn<<<blocks, 256>>>(out, iters);
    return cudaEventRecord(ev, 0);
}

int main(int argc, char **argv)
{
    cudaDeviceProp prop;
    cudaEvent_t ev[2], t0, t1;
    cudaError_t e;
    float *out, ms = 0;
    double start, last;
    long long done = 0;
    int secs, iters, blocks, cur = 0;

    if (argc < 3) {
        fprintf(stderr, "usage: share_loop TAG SECS [ITERS]\n");
        return 2;
    }
    tag = argv[1];
    secs = atoi(argv[2]);
    iters = argc > 3 ? atoi(argv[3]) : 100000;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
        return fail("cudaGetDeviceProperties", e);
    blocks = prop.multiProcessorCount * 8;
    if ((e = cudaMalloc(&out, 4096)) != cudaSuccess)
        return fail("cudaMalloc", e);
    if ((e = cudaEventCreateWithFlags(&ev[0], cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming)) != cudaSuccess ||
        (e = cudaEventCreate(&t0)) != cudaSuccess || (e = cudaEventCreate(&t1)) != cudaSuccess)
        return fail("cudaEventCreate", e);
    /* Warm-up, then one batch timed on the GPU, for the record. */
    share_burn<<<blocks, 256>>>(out, iters);
    if ((e = cudaDeviceSynchronize()) != cudaSuccess)
        return fail("first launch", e);
    cudaEventRecord(t0, 0);
    if ((e = batch(out, blocks, iters, t1)) != cudaSuccess ||
        (e = cudaEventSynchronize(t1)) != cudaSuccess)
        return fail("timed batch", e);
    cudaEventElapsedTime(&ms, t0, t1);
    printf("VCU-SHARE %s start batch_ms=%.2f blocks=%d iters=%d\n", tag, ms, blocks, iters);
    fflush(stdout);

    start = last = now_s();
    if ((e = batch(out, blocks, iters, ev[cur])) != cudaSuccess)
        return fail("launch", e);
    for (;;) {
        double t;

        cur ^= 1;
        if ((e = batch(out, blocks, iters, ev[cur])) != cudaSuccess)
            return fail("launch", e);
        if ((e = cudaEventSynchronize(ev[cur ^ 1])) != cudaSuccess)
            return fail("cudaEventSynchronize", e);
        done += BATCH;
        t = now_s();
        if (t - last >= 1.0) {
            printf("VCU-SHARE %s tick kernels=%lld\n", tag, done);
            fflush(stdout);
            last = t;
        }
        if (t - start >= secs)
            break;
    }
    if ((e = cudaEventSynchronize(ev[cur])) != cudaSuccess)
        return fail("cudaEventSynchronize", e);
    done += BATCH;
    printf("VCU-SHARE %s done kernels=%lld secs=%.2f\n", tag, done, now_s() - start);
    fflush(stdout);
    return 0;
}
