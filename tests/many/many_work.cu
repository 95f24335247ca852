/*
 * GPU suite (many, tests/gpu/many.sh): one guest process's share of the
 * many-VM run, checking everything it computes.
 *
 *   many_work TAG SECS QUOTA_MIB [FAULT_AT]
 *
 * Until SECS seconds have passed, round after round: SAXPY over 4M floats
 * (data new each round, from page-locked memory, result checked on the
 * CPU element by element), a reduction checked against the CPU's sum, a
 * CUDA graph captured once at the start (two SAXPYs and a device copy of
 * their result) launched on new data and checked, and every fourth round
 * a probe of the VM's quota (QUOTA_MIB, 0: none): one
 * allocation larger than the quota must fail with
 * cudaErrorMemoryAllocation, and cudaMemGetInfo's total must be the
 * quota; either otherwise is a violation.  FAULT_AT (seconds, optional):
 * then a kernel writes to an address no allocation holds, which must end
 * this process's CUDA with the sticky error (and nobody else's).  Prints:
 *
 *   VCU-MANY TAG start
 *   VCU-MANY TAG tick rounds=R wrong=W violations=V
 *   VCU-MANY TAG round R                   (each round, with MANY_ROUNDS=1)
 *   VCU-MANY TAG done rounds=R wrong=W violations=V secs=S maxgap=G
 *   VCU-MANY TAG fault-seen ERROR          (exit status 3)
 *   VCU-MANY TAG error WHAT                (exit status 1)
 *
 * G: the longest time between the ends of two rounds, in seconds, by the
 * guest's clock (which stops while its VM is paused: tests/vm/migrate.py
 * times the "round" lines as they reach the host instead).  With MANY_BALLAST_MIB
 * in the environment, that much more device memory is held throughout,
 * every byte 0x5a, and checked at the end (a model's weights while the
 * VM migrates): a wrong byte counts as a wrong result.  With
 * MANY_MANAGED=1, each round also adds new data into an accumulator in
 * managed memory (cudaMallocManaged) on the GPU, written by the CPU
 * before and checked by it after against its own sums: managed memory
 * that lost its state (across a migration) is a wrong result.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime.h>

#define N (4 << 20)
#define GN (64 << 10)               /* the graph's elements */
#define MN (64 << 10)               /* the managed accumulator's elements */
#define GA 3.0f                     /* the graph's SAXPY factor */

__global__ void many_saxpy(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        y[i] = a * x[i] + y[i];
}

/* Integer sum of x's elements (as ints), one atomic per block. */
__global__ void many_sum(const int *x, int n, unsigned long long *out)
{
    __shared__ unsigned long long part[256];
    unsigned long long s = 0;

    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        s += (unsigned int)x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (threadIdx.x < k)
            part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}

__global__ void many_fault(int *p)
{
    *p = 1;
}

static const char *tag;

/* The graph each round launches, captured on stream st: y = GA * x + y
 * twice, then z = y. */
static cudaError_t graph_make(cudaStream_t st, float *gx, float *gy, float *gz,
                              cudaGraphExec_t *exec)
{
    cudaGraph_t g;
    cudaError_t e;

    e = cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess)
        return e;
    many_saxpy<<<(GN + 255) / 256, 256, 0, st>>>(GA, gx, gy, GN);
    many_saxpy<<<(GN + 255) / 256, 256, 0, st>>>(GA, gx, gy, GN);
    (void)cudaMemcpyAsync(gz, gy, GN * sizeof(float), cudaMemcpyDeviceToDevice, st);
    e = cudaStreamEndCapture(st, &g);
    if (e != cudaSuccess)
        return e;
    e = cudaGraphInstantiate(exec, g, 0);
    (void)cudaGraphDestroy(g);
    return e;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, cudaError_t e)
{
    printf("VCU-MANY %s error %s: %s\n", tag, what, cudaGetErrorString(e));
    fflush(stdout);
    return 1;
}

#define CK(call)                                                           \
    do {                                                                   \
        cudaError_t e_ = (call);                                           \
        if (e_ != cudaSuccess)                                             \
            return fail(#call, e_);                                        \
    } while (0)

int main(int argc, char **argv)
{
    float *hx, *hy, *dx, *dy, *gx, *gy, *gz, a;
    cudaStream_t gst;
    cudaGraphExec_t gexec;
    int *ix;
    unsigned long long *dsum, got, want;
    long long rounds = 0, wrong = 0, viol = 0;
    double start, last, fault_at, last_round = 0, maxgap = 0;
    void *ballast = NULL;
    size_t ballast_bytes = 0;
    float *mx = NULL, *my = NULL, *macc = NULL;
    size_t quota, fr, tot;
    int secs, round_lines;

    if (argc < 4) {
        fprintf(stderr, "usage: many_work TAG SECS QUOTA_MIB [FAULT_AT]\n");
        return 2;
    }
    tag = argv[1];
    secs = atoi(argv[2]);
    quota = (size_t)strtoull(argv[3], NULL, 10) << 20;
    fault_at = argc > 4 ? atof(argv[4]) : -1;
    CK(cudaMallocHost((void **)&hx, N * sizeof(float)));
    CK(cudaMallocHost((void **)&hy, N * sizeof(float)));
    CK(cudaMalloc((void **)&dx, N * sizeof(float)));
    CK(cudaMalloc((void **)&dy, N * sizeof(float)));
    CK(cudaMalloc((void **)&dsum, sizeof(*dsum)));
    CK(cudaMalloc((void **)&gx, GN * sizeof(float)));
    CK(cudaMalloc((void **)&gy, GN * sizeof(float)));
    CK(cudaMalloc((void **)&gz, GN * sizeof(float)));
    CK(cudaStreamCreate(&gst));     /* blocking: ordered after the legacy stream's copies */
    CK(graph_make(gst, gx, gy, gz, &gexec));
    ix = (int *)hx;
    round_lines = getenv("MANY_ROUNDS") != NULL && strcmp(getenv("MANY_ROUNDS"), "1") == 0;
    if (getenv("MANY_BALLAST_MIB") != NULL && atoll(getenv("MANY_BALLAST_MIB")) > 0) {
        ballast_bytes = (size_t)atoll(getenv("MANY_BALLAST_MIB")) << 20;
        CK(cudaMalloc(&ballast, ballast_bytes));
        CK(cudaMemset(ballast, 0x5a, ballast_bytes));
        CK(cudaDeviceSynchronize());
    }
    if (getenv("MANY_MANAGED") != NULL && strcmp(getenv("MANY_MANAGED"), "1") == 0) {
        CK(cudaMallocManaged((void **)&mx, MN * sizeof(float), cudaMemAttachGlobal));
        CK(cudaMallocManaged((void **)&my, MN * sizeof(float), cudaMemAttachGlobal));
        macc = (float *)calloc(MN, sizeof(float));
        if (macc == NULL)
            return 1;
        memset(my, 0, MN * sizeof(float));
    }
    printf("VCU-MANY %s start\n", tag);
    fflush(stdout);
    start = last = now_s();
    while (now_s() - start < secs) {
        unsigned int seed = (unsigned int)rounds * 2654435761u + 12345u;

        /* SAXPY, every element checked (exact in float: small integers). */
        a = (float)(rounds % 7 + 1);
        for (int i = 0; i < N; i++) {
            hx[i] = (float)((i ^ seed) & 1023);
            hy[i] = (float)(i & 511);
        }
        CK(cudaMemcpy(dx, hx, N * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dy, hy, N * sizeof(float), cudaMemcpyHostToDevice));
        many_saxpy<<<(N + 255) / 256, 256>>>(a, dx, dy, N);
        CK(cudaGetLastError());
        CK(cudaMemcpy(hy, dy, N * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++) {
            float w = a * (float)((i ^ seed) & 1023) + (float)(i & 511);

            if (hy[i] != w) {
                wrong++;
                break;
            }
        }
        /* A reduction against the CPU's sum. */
        want = 0;
        for (int i = 0; i < N; i++) {
            ix[i] = (int)((i * 7u + seed) & 0xffff);
            want += (unsigned int)ix[i];
        }
        CK(cudaMemcpy(dx, ix, N * sizeof(int), cudaMemcpyHostToDevice));
        CK(cudaMemset(dsum, 0, sizeof(*dsum)));
        many_sum<<<264, 256>>>((const int *)dx, N, dsum);
        CK(cudaGetLastError());
        CK(cudaMemcpy(&got, dsum, sizeof(got), cudaMemcpyDeviceToHost));
        if (got != want)
            wrong++;
        /* The graph, on new data: z = 2 * GA * x. */
        for (int i = 0; i < GN; i++)
            hx[i] = (float)((i + seed) & 1023);
        CK(cudaMemcpy(gx, hx, GN * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemset(gy, 0, GN * sizeof(float)));
        CK(cudaMemset(gz, 0, GN * sizeof(float)));
        CK(cudaGraphLaunch(gexec, gst));
        CK(cudaStreamSynchronize(gst));
        CK(cudaMemcpy(hy, gz, GN * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < GN; i++)
            if (hy[i] != 2.0f * GA * (float)((i + seed) & 1023)) {
                wrong++;
                break;
            }
        /* Managed memory: y += x on the GPU, y kept across rounds (exact
         * in float: sums of small integers below 2^24). */
        if (my != NULL) {
            for (int i = 0; i < MN; i++) {
                mx[i] = (float)((i ^ seed) & 255);
                macc[i] += mx[i];
            }
            many_saxpy<<<(MN + 255) / 256, 256>>>(1.0f, mx, my, MN);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            for (int i = 0; i < MN; i++)
                if (my[i] != macc[i]) {
                    wrong++;
                    break;
                }
        }
        /* The quota: a larger allocation fails as on a full GPU, and the
         * device's total is the quota. */
        if (quota > 0 && rounds % 4 == 0) {
            void *big = NULL;
            cudaError_t e = cudaMalloc(&big, quota + (64 << 20));

            if (e == cudaSuccess) {
                viol++;
                cudaFree(big);
            } else if (e != cudaErrorMemoryAllocation) {
                return fail("cudaMalloc past the quota", e);
            }
            (void)cudaGetLastError();
            CK(cudaMemGetInfo(&fr, &tot));
            if (tot != quota || fr > tot)
                viol++;
        }
        rounds++;
        {
            double t = now_s();

            if (rounds > 1 && t - last_round > maxgap)
                maxgap = t - last_round;
            last_round = t;
        }
        if (round_lines) {
            printf("VCU-MANY %s round %lld\n", tag, rounds);
            fflush(stdout);
        }
        if (fault_at >= 0 && now_s() - start >= fault_at) {
            cudaError_t e;

            many_fault<<<1, 1>>>((int *)(uintptr_t)0x10);
            e = cudaDeviceSynchronize();
            printf("VCU-MANY %s fault-seen %s rounds=%lld wrong=%lld violations=%lld\n", tag,
                   cudaGetErrorName(e), rounds, wrong, viol);
            fflush(stdout);
            return e == cudaErrorIllegalAddress ? 3 : 1;
        }
        if (now_s() - last >= 5) {
            printf("VCU-MANY %s tick rounds=%lld wrong=%lld violations=%lld\n", tag, rounds,
                   wrong, viol);
            fflush(stdout);
            last = now_s();
        }
    }
    if (ballast != NULL) {
        /* Its first and last MiB, and one in the middle. */
        size_t at[3] = { 0, ballast_bytes / 2, ballast_bytes - (1 << 20) };

        for (int k = 0; k < 3 && ballast_bytes >= (1 << 20); k++) {
            CK(cudaMemcpy(hx, (char *)ballast + (at[k] & ~(size_t)4095), 1 << 20,
                          cudaMemcpyDeviceToHost));
            for (int i = 0; i < (1 << 20); i++)
                if (((unsigned char *)hx)[i] != 0x5a) {
                    wrong++;
                    break;
                }
        }
    }
    printf("VCU-MANY %s done rounds=%lld wrong=%lld violations=%lld secs=%.1f maxgap=%.3f\n", tag,
           rounds, wrong, viol, now_s() - start, maxgap);
    fflush(stdout);
    return wrong == 0 && viol == 0 ? 0 : 1;
}
