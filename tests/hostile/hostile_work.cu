/*
 * GPU suite (hostile, tests/gpu/hostile.sh): a guest process that tries to
 * take more of the GPU than its VM's slice, or one that checks its VM
 * still gets all of its own.
 *
 *   hostile_work attack TAG SECS
 *   hostile_work victim TAG SECS
 *
 * attack: takes its context, waits 3 s (its VM's other processes take
 * theirs), raises every limit it can set (the stack size up to 1 MiB a
 * thread, the device malloc heap and the printf FIFO to 1 GiB), launches
 * a kernel with 256 KiB of local memory a thread (natively the driver
 * grows the stack to that for every thread the GPU holds: 67 GiB on an
 * H200), then allocates in every way the runtime has, each until it is
 * refused: device memory in shrinking steps (256, 16, 1 MiB), the
 * stream-ordered allocator (cudaMallocAsync), pinned host memory; then
 * holds all of it for SECS seconds.  It never asks for managed memory:
 * the GPU machine's rules.
 *
 * victim: round after round for SECS seconds, asks for everything its
 * VM's slice says is free (cudaMemGetInfo, less 4 MiB of rounding),
 * writes it, checks it and frees it: each refusal is a round lost to
 * someone else's use of the GPU.
 *
 * Prints:
 *   VCU-HOSTILE TAG context ok|failed ERROR
 *   VCU-HOSTILE TAG limit NAME BYTES ok|refused   (NAME lmem: the launch)
 *   VCU-HOSTILE TAG alloc KIND MIB
 *   VCU-HOSTILE TAG holding dev_mib=D pool_mib=P host_mib=H stack=S
 *   VCU-HOSTILE TAG victim rounds=R refused=F wrong=W min_free_mib=M
 * and exits 0 (attack: whatever it got; victim: no round refused or
 * wrong), 1 on a failure of its own.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime.h>

#define MIB (1ull << 20)
#define MAX_PTRS 4096

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__global__ void hostile_touch(unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

__global__ void hostile_check(const unsigned char *p, size_t n, unsigned char v,
                              unsigned long long *bad)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        if (p[i] != v)
            atomicAdd(bad, 1ull);
}

#define LMEM_WORDS (64 * 1024)      /* 256 KiB a thread */

__global__ void hostile_lmem(unsigned int *out, unsigned int seed)
{
    volatile unsigned int a[LMEM_WORDS];

    for (unsigned int j = 0; j < LMEM_WORDS; j++)
        a[j] = seed + j;
    out[0] = a[seed % LMEM_WORDS];
}

/* One thread of hostile_lmem: "ok" if it ran. */
static void lmem(const char *tag)
{
    unsigned int *out;
    cudaError_t e = cudaMalloc(&out, sizeof(*out));

    if (e == cudaSuccess) {
        hostile_lmem<<<1, 1>>>(out, 7);
        e = cudaGetLastError();
        if (e == cudaSuccess)
            e = cudaDeviceSynchronize();
        cudaFree(out);
    }
    printf("VCU-HOSTILE %s limit lmem %zu %s\n", tag, LMEM_WORDS * sizeof(unsigned int),
           e == cudaSuccess ? "ok" : "refused");
    if (e != cudaSuccess)
        cudaGetLastError();
}

static void limit(const char *tag, const char *name, cudaLimit l, size_t v)
{
    cudaError_t e = cudaDeviceSetLimit(l, v);

    printf("VCU-HOSTILE %s limit %s %zu %s\n", tag, name, v, e == cudaSuccess ? "ok" : "refused");
    if (e != cudaSuccess)
        cudaGetLastError();
}

static int attack(const char *tag, double secs)
{
    static void *dev[MAX_PTRS], *host[MAX_PTRS], *pool[MAX_PTRS];
    static const size_t steps[] = { 256 * MIB, 16 * MIB, MIB };
    static const size_t stacks[] = { 16 << 10, 64 << 10, 256 << 10, 1 << 20 };
    size_t dev_b = 0, pool_b = 0, host_b = 0, stack = 0;
    unsigned int nd = 0, nh = 0, np = 0, i;
    cudaStream_t st;

    if (cudaFree(0) != cudaSuccess || cudaStreamCreate(&st) != cudaSuccess) {
        printf("VCU-HOSTILE %s context failed %s\n", tag, cudaGetErrorString(cudaGetLastError()));
        fflush(stdout);
        return 0;                   /* refused at the start: the slice holds */
    }
    printf("VCU-HOSTILE %s context ok\n", tag);
    fflush(stdout);
    /* The VM's other processes take their contexts meanwhile (they start
     * a fifth of a second apart): every session the VM may open is open
     * before any of them fills the slice. */
    sleep(3);
    for (i = 0; i < sizeof(stacks) / sizeof(stacks[0]); i++) {
        limit(tag, "stack", cudaLimitStackSize, stacks[i]);
        if (cudaDeviceGetLimit(&stack, cudaLimitStackSize) != cudaSuccess)
            stack = 0;
    }
    limit(tag, "malloc_heap", cudaLimitMallocHeapSize, 1ull << 30);
    limit(tag, "printf_fifo", cudaLimitPrintfFifoSize, 1ull << 30);
    lmem(tag);
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        while (nd < MAX_PTRS && cudaMalloc(&dev[nd], steps[i]) == cudaSuccess) {
            dev_b += steps[i];
            nd++;
        }
    cudaGetLastError();
    printf("VCU-HOSTILE %s alloc device %zu\n", tag, dev_b / MIB);
    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        while (np < MAX_PTRS && cudaMallocAsync(&pool[np], steps[i], st) == cudaSuccess &&
               cudaStreamSynchronize(st) == cudaSuccess) {
            pool_b += steps[i];
            np++;
        }
    cudaGetLastError();
    printf("VCU-HOSTILE %s alloc pool %zu\n", tag, pool_b / MIB);
    while (nh < 64 && cudaMallocHost(&host[nh], 256 * MIB) == cudaSuccess) {
        host_b += 256 * MIB;
        nh++;
    }
    cudaGetLastError();
    printf("VCU-HOSTILE %s alloc host %zu\n", tag, host_b / MIB);
    printf("VCU-HOSTILE %s holding dev_mib=%zu pool_mib=%zu host_mib=%zu stack=%zu\n", tag,
           dev_b / MIB, pool_b / MIB, host_b / MIB, stack);
    fflush(stdout);
    usleep((useconds_t)(secs * 1e6));
    return 0;
}

static int victim(const char *tag, double secs)
{
    unsigned long long *bad;
    unsigned long long rounds = 0, refused = 0, wrong = 0, min_free = ~0ull;
    double end = now_s() + secs;

    if (cudaMalloc(&bad, sizeof(*bad)) != cudaSuccess) {
        printf("VCU-HOSTILE %s context failed %s\n", tag, cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    printf("VCU-HOSTILE %s context ok\n", tag);
    fflush(stdout);
    while (now_s() < end) {
        size_t fr = 0, tot = 0, n;
        unsigned long long b = 0;
        unsigned char *p;

        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
            return 1;
        if (fr < min_free)
            min_free = fr;
        n = fr > 4 * MIB ? fr - 4 * MIB : 0;
        rounds++;
        if (n == 0 || cudaMalloc(&p, n) != cudaSuccess) {
            cudaGetLastError();
            refused++;
            usleep(100000);
            continue;
        }
        cudaMemset(bad, 0, sizeof(*bad));
        hostile_touch<<<1024, 256>>>(p, n, (unsigned char)rounds);
        hostile_check<<<1024, 256>>>(p, n, (unsigned char)rounds, bad);
        cudaMemcpy(&b, bad, sizeof(b), cudaMemcpyDeviceToHost);
        if (cudaGetLastError() != cudaSuccess || b != 0)
            wrong++;
        cudaFree(p);
        if (rounds % 5 == 0) {
            printf("VCU-HOSTILE %s tick rounds=%llu refused=%llu wrong=%llu free_mib=%zu\n", tag,
                   rounds, refused, wrong, fr / MIB);
            fflush(stdout);
        }
    }
    printf("VCU-HOSTILE %s victim rounds=%llu refused=%llu wrong=%llu min_free_mib=%llu\n", tag,
           rounds, refused, wrong, min_free / MIB);
    fflush(stdout);
    return refused == 0 && wrong == 0 && rounds > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hostile_work attack|victim TAG SECS\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(argv[1], "attack") == 0)
        return attack(argv[2], atof(argv[3]));
    if (strcmp(argv[1], "victim") == 0)
        return victim(argv[2], atof(argv[3]));
    return 2;
}
