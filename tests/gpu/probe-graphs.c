/*
 * GPU host probe behind docs/design.md "Runs of launches as graphs":
 *  - where each error cuLaunchKernel gives at once surfaces when the same
 *    launch is a kernel node (cuGraphAddKernelNode, cuGraphInstantiate,
 *    cuGraphExecUpdate, cuGraphLaunch): a block of 1025 threads, 1 MiB of
 *    shared memory, a zero grid, a null function, more threads than a
 *    kernel's registers allow;
 *  - whether cuGraphExecUpdate may change a node's function, shape and
 *    parameters (the updated graph's results checked), and what a fault
 *    inside a graph does to the context;
 *  - the driver's CPU cost of a burst of empty kernels: 64 cuLaunchKernel
 *    against a graph of 64 kernel nodes built and instantiated per batch,
 *    kept and updated per node, kept as is, and kept and updated whole
 *    (what the backend does), in rotation, ROUNDS rounds of 146 batches.
 * One line per answer.
 *
 *   nvcc -fatbin -maxrregcount=255 -gencode arch=compute_90,code=sm_90 \
 *       -o probe-graphs.fatbin tests/gpu/probe-graphs-kernels.cu
 *   cc -O1 -I/usr/local/cuda/include -o probe-graphs tests/gpu/probe-graphs.c \
 *       -L/usr/local/cuda/lib64/stubs -lcuda
 *   ./probe-graphs DIR [ROUNDS]     (DIR holds probe-graphs.fatbin)
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define B 64
#define NB 146

static CUfunction fe, fa, fb, fr;
static CUdeviceptr dp;
static void *kp_a[1], *kp_r[2];
static int n_r = 64;

static const char *es(CUresult r)
{
    const char *s = "?";

    cuGetErrorName(r, &s);
    return s;
}

static CUDA_KERNEL_NODE_PARAMS mk(CUfunction f, unsigned gx, unsigned bx, unsigned smem, void **kp)
{
    CUDA_KERNEL_NODE_PARAMS p;

    memset(&p, 0, sizeof(p));
    p.func = f;
    p.gridDimX = gx;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = bx;
    p.blockDimY = p.blockDimZ = 1;
    p.sharedMemBytes = smem;
    p.kernelParams = kp;
    return p;
}

/* A valid node, then the bad one: the launch alone, as a new graph, and
 * as an update of a valid exec. */
static void refused(const char *name, CUDA_KERNEL_NODE_PARAMS bad)
{
    CUDA_KERNEL_NODE_PARAMS ok = mk(fa, 1, 32, 0, kp_a);
    CUgraphExecUpdateResultInfo info;
    CUgraphNode n[2];
    CUgraphExec ex;
    CUgraph g, g2;
    CUresult r;

    r = cuLaunchKernel(bad.func, bad.gridDimX, 1, 1, bad.blockDimX, 1, 1, bad.sharedMemBytes, NULL,
                       bad.kernelParams, NULL);
    printf("%-10s launch %s, then sync %s\n", name, es(r), es(cuCtxSynchronize()));
    cuGraphCreate(&g, 0);
    cuGraphAddKernelNode(&n[0], g, NULL, 0, &ok);
    r = cuGraphAddKernelNode(&n[1], g, &n[0], 1, &bad);
    printf("%-10s graph: add %s", name, es(r));
    if (r == CUDA_SUCCESS) {
        r = cuGraphInstantiate(&ex, g, 0);
        printf(", instantiate %s", es(r));
        if (r == CUDA_SUCCESS) {
            r = cuGraphLaunch(ex, NULL);
            printf(", launch %s, sync %s", es(r), es(cuCtxSynchronize()));
            cuGraphExecDestroy(ex);
        }
    }
    cuGraphDestroy(g);
    cuGraphCreate(&g, 0);
    cuGraphAddKernelNode(&n[0], g, NULL, 0, &ok);
    cuGraphAddKernelNode(&n[1], g, &n[0], 1, &ok);
    cuGraphInstantiate(&ex, g, 0);
    cuGraphCreate(&g2, 0);
    cuGraphAddKernelNode(&n[0], g2, NULL, 0, &ok);
    if (cuGraphAddKernelNode(&n[1], g2, &n[0], 1, &bad) == CUDA_SUCCESS) {
        r = cuGraphExecUpdate(ex, g2, &info);
        printf("; update %s (%d)", es(r), (int)info.result);
        if (r == CUDA_SUCCESS)
            printf(", launch %s, sync %s", es(cuGraphLaunch(ex, NULL)), es(cuCtxSynchronize()));
    }
    printf("\n");
    cuGraphExecDestroy(ex);
    cuGraphDestroy(g);
    cuGraphDestroy(g2);
}

static void chain(CUgraph *g, CUgraphNode *nodes, int n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    cuGraphCreate(g, 0);
    for (int i = 0; i < n; i++)
        cuGraphAddKernelNode(&nodes[i], *g, i ? &nodes[i - 1] : NULL, i ? 1 : 0, &p[i]);
}

static void updates(void)
{
    CUdeviceptr dp2 = dp + 4096;
    void *kp2[1] = { &dp2 };
    CUDA_KERNEL_NODE_PARAMS aa[2], ab[2], dims[2], regs[2];
    CUgraphExecUpdateResultInfo info;
    CUgraphNode nn[2];
    CUgraphExec ex;
    CUgraph g, g2, g3, g4;
    int h[2];

    aa[0] = aa[1] = mk(fa, 1, 32, 0, kp_a);
    ab[0] = mk(fa, 1, 32, 0, kp2);
    ab[1] = mk(fb, 1, 32, 0, kp2);
    dims[0] = dims[1] = mk(fa, 2, 64, 0, kp_a);
    regs[0] = mk(fr, 1, 32, 0, kp_r);
    regs[1] = mk(fa, 1, 32, 0, kp_a);
    cuMemsetD8(dp, 0, 8192);
    chain(&g, nn, 2, aa);
    cuGraphInstantiate(&ex, g, 0);
    cuGraphLaunch(ex, NULL);                        /* dp[0] = 2 */
    chain(&g2, nn, 2, ab);
    printf("update (a, a) -> (a, b) on another pointer: %s (%d)\n",
           es(cuGraphExecUpdate(ex, g2, &info)), (int)info.result);
    cuGraphLaunch(ex, NULL);                        /* dp2[0]: (0 + 1) * 2 */
    cuGraphLaunch(ex, NULL);                        /* (2 + 1) * 2 */
    printf("sync %s", es(cuCtxSynchronize()));
    cuMemcpyDtoH(&h[0], dp, 4);
    cuMemcpyDtoH(&h[1], dp2, 4);
    printf("; dp[0] %d (2 wanted), dp2[0] %d (6 wanted)\n", h[0], h[1]);
    chain(&g3, nn, 2, dims);
    printf("update to another grid and block: %s (%d)\n", es(cuGraphExecUpdate(ex, g3, &info)),
           (int)info.result);
    chain(&g4, nn, 2, regs);
    printf("update to another kernel's function: %s (%d)\n", es(cuGraphExecUpdate(ex, g4, &info)),
           (int)info.result);
    printf("sync %s\n", es(cuCtxSynchronize()));
    cuGraphExecDestroy(ex);
    cuGraphDestroy(g);
    cuGraphDestroy(g2);
    cuGraphDestroy(g3);
    cuGraphDestroy(g4);
}

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static void rates(int rounds)
{
    static const char *name[5] = { "64 cuLaunchKernel", "graph built+instantiated per batch",
                                   "kept exec, 64 node SetParams", "kept exec as is",
                                   "kept exec, whole-graph update" };
    CUDA_KERNEL_NODE_PARAMS p[B];
    CUgraphExecUpdateResultInfo info;
    CUgraphExec ex, tmp[NB];
    CUgraphNode nodes[B], n2[B];
    CUgraph g, g2;
    double r[5][64];

    for (int i = 0; i < B; i++)
        p[i] = mk(fe, 1, 1, 0, NULL);
    chain(&g, nodes, B, p);
    cuGraphInstantiate(&ex, g, 0);
    for (int i = 0; i < 2000; i++)
        cuLaunchKernel(fe, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    for (int i = 0; i < 20; i++)
        cuGraphLaunch(ex, NULL);
    cuCtxSynchronize();
    for (int k = 0; k < rounds; k++) {
        for (int v = 0; v < 5; v++) {
            int m = (v + k) % 5;
            double t0 = now();

            for (int b = 0; b < NB; b++) {
                switch (m) {
                case 0:
                    for (int i = 0; i < B; i++)
                        cuLaunchKernel(fe, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
                    break;
                case 1:
                    chain(&g2, n2, B, p);
                    cuGraphInstantiate(&tmp[b], g2, 0);
                    cuGraphLaunch(tmp[b], NULL);
                    cuGraphDestroy(g2);
                    break;
                case 2:
                    for (int i = 0; i < B; i++)
                        cuGraphExecKernelNodeSetParams(ex, nodes[i], &p[i]);
                    cuGraphLaunch(ex, NULL);
                    break;
                case 3:
                    cuGraphLaunch(ex, NULL);
                    break;
                default:
                    chain(&g2, n2, B, p);
                    cuGraphExecUpdate(ex, g2, &info);
                    cuGraphLaunch(ex, NULL);
                    cuGraphDestroy(g2);
                    break;
                }
            }
            if (cuCtxSynchronize() != CUDA_SUCCESS) {
                printf("rates: the context failed\n");
                return;
            }
            r[m][k] = NB * B / (now() - t0);
            if (m == 1)
                for (int b = 0; b < NB; b++)
                    cuGraphExecDestroy(tmp[b]);
        }
    }
    for (int m = 0; m < 5; m++) {
        qsort(r[m], (size_t)rounds, sizeof(double), cmp);
        printf("rate: %-36s %9.0f launches/s median (%.0f-%.0f)\n", name[m], r[m][rounds / 2],
               r[m][0], r[m][rounds - 1]);
    }
    cuGraphExecDestroy(ex);
    cuGraphDestroy(g);
}

int main(int argc, char **argv)
{
    int rounds = argc > 2 ? atoi(argv[2]) : 15, mt = 0, nreg = 0;
    char path[4096];
    CUdevice d;
    CUcontext c;
    CUmodule m;
    CUresult r;

    if (argc < 2) {
        fprintf(stderr, "usage: probe-graphs DIR [ROUNDS]\n");
        return 2;
    }
    if (rounds < 1 || rounds > 64)
        rounds = 15;
    snprintf(path, sizeof(path), "%s/probe-graphs.fatbin", argv[1]);
    if ((r = cuInit(0)) != CUDA_SUCCESS || (r = cuDeviceGet(&d, 0)) != CUDA_SUCCESS ||
        (r = cuDevicePrimaryCtxRetain(&c, d)) != CUDA_SUCCESS ||
        (r = cuCtxSetCurrent(c)) != CUDA_SUCCESS || (r = cuModuleLoad(&m, path)) != CUDA_SUCCESS) {
        printf("setup: %s\n", es(r));
        return 1;
    }
    cuModuleGetFunction(&fe, m, "k_empty");
    cuModuleGetFunction(&fa, m, "k_a");
    cuModuleGetFunction(&fb, m, "k_b");
    cuModuleGetFunction(&fr, m, "k_regs");
    cuFuncGetAttribute(&mt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fr);
    cuFuncGetAttribute(&nreg, CU_FUNC_ATTRIBUTE_NUM_REGS, fr);
    printf("k_regs: %d registers, at most %d threads a block\n", nreg, mt);
    cuMemAlloc(&dp, 8192);
    cuMemsetD8(dp, 0, 8192);
    kp_a[0] = &dp;
    kp_r[0] = &dp;
    kp_r[1] = &n_r;
    refused("block1025", mk(fa, 1, 1025, 0, kp_a));
    refused("smem1M", mk(fa, 1, 32, 1 << 20, kp_a));
    refused("grid0", mk(fa, 0, 32, 0, kp_a));
    refused("regs1024", mk(fr, 1, 1024, 0, kp_r));
    refused("nullfn", mk(NULL, 1, 32, 0, kp_a));
    updates();
    rates(rounds);
    {
        /* Last: a fault inside a graph ends the context. */
        CUdeviceptr bad = 0x10;
        void *kpb[1] = { &bad };
        CUDA_KERNEL_NODE_PARAMS pf[2] = { mk(fa, 1, 32, 0, kp_a), mk(fa, 1, 32, 0, kpb) };
        CUgraphNode nn[2];
        CUgraphExec ex;
        CUgraph g;

        chain(&g, nn, 2, pf);
        printf("fault in a graph: instantiate %s", es(cuGraphInstantiate(&ex, g, 0)));
        printf(", launch %s", es(cuGraphLaunch(ex, NULL)));
        printf(", sync %s", es(cuCtxSynchronize()));
        printf(", a launch after it %s\n",
               es(cuLaunchKernel(fa, 1, 1, 1, 32, 1, 1, 0, NULL, kp_a, NULL)));
    }
    return 0;
}
