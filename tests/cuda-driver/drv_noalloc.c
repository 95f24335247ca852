/*
 * The launch path allocates nothing: after the first launches of a
 * thread, a burst of asynchronous launches (cuLaunchKernel and
 * cuLaunchKernelEx) makes no heap allocation on the launching thread but
 * what sending a batch of them costs (the guest library sends up to 64
 * launches in one CU_BATCH; in the loopback transport of the tests, each
 * batch also allocates its framing, and so does each synchronous request:
 * a cuLaunchKernelEx waits for its answer).  This program's own malloc, calloc
 * and realloc stand in front of the C library's and count the calls of
 * this thread while the burst runs.  The results are checked too.
 */
#include "vcu_drv_test.h"

#define N 4096
#define BURST 4096
/* Fewer than one allocation per this many launches: what sending a batch
 * of up to 64 costs (the loopback transport: about 4). */
#define PER 8

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);

static __thread int counting;
static __thread unsigned long allocs;

void *malloc(size_t n)
{
    if (counting)
        allocs++;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    if (counting)
        allocs++;
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (counting)
        allocs++;
    return __libc_realloc(p, n);
}

static CUresult launch(CUfunction fill, CUstream s, int ex, CUdeviceptr p, unsigned long long v)
{
    char pad = 0;
    unsigned int step = 1;
    int n = N;
    void *args[] = { &p, &pad, &v, &step, &n };
    CUlaunchConfig cfg;

    if (!ex)
        return cuLaunchKernel(fill, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL);
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = N / 256;
    cfg.gridDimY = 1;
    cfg.gridDimZ = 1;
    cfg.blockDimX = 256;
    cfg.blockDimY = 1;
    cfg.blockDimZ = 1;
    cfg.hStream = s;
    return cuLaunchKernelEx(&cfg, fill, args, NULL);
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr p;
    CUstream s;
    static unsigned int host[N];
    unsigned long got[2];
    const char *tp = getenv("VCU_TRANSPORT");
    unsigned long sync_cost = tp != NULL && strcmp(tp, "loopback") == 0 ? 2 : 0;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoadData(&mod, vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL)));
    CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    CK(cuMemAlloc(&p, N * sizeof(unsigned int)));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int ex = 0; ex < 2; ex++) {
        /* The first launches of the thread may set things up. */
        for (int i = 0; i < 128; i++)
            CK(launch(fill, s, ex, p, (unsigned long long)i));
        CK(cuStreamSynchronize(s));
        allocs = 0;
        counting = 1;
        for (int i = 0; i < BURST; i++)
            CK(launch(fill, s, ex, p, (unsigned long long)i));
        counting = 0;
        got[ex] = allocs;
        CK(cuStreamSynchronize(s));
        CK(cuMemcpyDtoH(host, p, sizeof(host)));
        for (int i = 0; i < N; i++)
            TRUE(host[i] == (unsigned int)(BURST - 1) + (unsigned int)i);
    }
    printf("info: allocations on the launching thread in %d launches: cuLaunchKernel %lu, "
           "cuLaunchKernelEx %lu\n", BURST, got[0], got[1]);
    TRUE(got[0] < BURST / PER);
    TRUE(got[1] < BURST * sync_cost + BURST / PER);
    CK(cuStreamDestroy(s));
    CK(cuMemFree(p));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_noalloc\n");
    return 0;
}
