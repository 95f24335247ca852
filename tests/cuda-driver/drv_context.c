/*
 * Contexts: calls before cuInit, the per-thread stack (push, pop, set,
 * get, a new thread starts with none), created and destroyed contexts
 * (the memory made in one freed with it), the primary context (one
 * handle, reference count, state, flags, reset).
 */
#include <pthread.h>

#include "vcu_drv_test.h"

static CUcontext shared_ctx;

static void *other_thread(void *arg)
{
    CUcontext cur = (CUcontext)1;
    CUdevice d;

    (void)arg;
    /* A new thread has no current context, whatever the others have. */
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == NULL);
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxGetDevice(&d));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxSynchronize());
    CK(cuCtxPushCurrent(shared_ctx));
    CK(cuCtxGetDevice(&d));
    TRUE(d == 0);
    CK(cuCtxPopCurrent(&cur));
    TRUE(cur == shared_ctx);
    return NULL;
}

int main(void)
{
    CUcontext c1, c2, cur, p1, p2, popped;
    CUdevice dev, d;
    CUdeviceptr mem;
    unsigned int flags;
    int count, active, v;
    pthread_t t;

    /* Before cuInit. */
    EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&count));
    EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGet(&dev, 0));
    EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuCtxGetCurrent(&cur));
    EXPECT(CUDA_ERROR_NOT_INITIALIZED, cuMemAlloc(&mem, 16));
    CK(cuDriverGetVersion(&v));     /* needs no cuInit */
    TRUE(v >= 13000);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuInit(1));
    CK(cuInit(0));
    CK(cuInit(0));

    CK(cuDeviceGetCount(&count));
    TRUE(count >= 1);
    CK(cuDeviceGet(&dev, 0));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&d, count));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&d, -1));

    /* The stack starts empty. */
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == NULL);
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent(&popped));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc(&mem, 16));
    CK(cuCtxSetCurrent(NULL));      /* no-op on an empty stack */

    /* cuCtxCreate pushes. */
    CK(cuCtxCreate(&c1, NULL, 0, dev));
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == c1);
    CK(cuCtxCreate(&c2, NULL, CU_CTX_SCHED_BLOCKING_SYNC, dev));
    TRUE(c2 != c1);
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == c2);
    CK(cuCtxGetDevice(&d));
    TRUE(d == dev);
    /* The CUDA 13 forms name the context (NULL: the current one). */
    CK(cuCtxGetDevice_v2(&d, c1));
    TRUE(d == dev);
    CK(cuCtxGetDevice_v2(&d, NULL));
    CK(cuCtxSynchronize_v2(c1));
    CK(cuCtxSynchronize_v2(NULL));
    EXPECT(CUDA_ERROR_CONTEXT_IS_DESTROYED, cuCtxSynchronize_v2((CUcontext)&d));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxGetDevice_v2(NULL, c1));
    CK(cuCtxPopCurrent(&popped));
    TRUE(popped == c2);
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == c1);
    CK(cuCtxPushCurrent(c2));
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == c2);
    /* SetCurrent replaces the top. */
    CK(cuCtxSetCurrent(c1));
    CK(cuCtxPopCurrent(&popped));
    TRUE(popped == c1);
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == c1);                /* the first push of c1 */
    CK(cuCtxSynchronize());

    /* Work in a created context. */
    CK(cuMemAlloc(&mem, 4096));
    CK(cuMemsetD8(mem, 1, 4096));
    CK(cuMemFree(mem));

    /* Another thread has a stack of its own. */
    shared_ctx = c2;
    TRUE(pthread_create(&t, NULL, other_thread, NULL) == 0);
    TRUE(pthread_join(t, NULL) == 0);
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == c1);

    /* Destroy pops it where it is current; its handle dies. */
    CK(cuCtxDestroy(c1));
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == NULL);
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy(c1));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(c1));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent(c1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxPushCurrent(NULL));
    /* Destroying the current context pops it. */
    CK(cuCtxPushCurrent(c2));
    CK(cuCtxDestroy(c2));
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == NULL);

    /* Bad flags and arguments. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxCreate(&c1, NULL, 0x80000000u, dev));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuCtxCreate(&c1, NULL, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, dev));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxCreate(NULL, NULL, 0, dev));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuCtxCreate(&c1, NULL, 0, count));

    /* The primary context: one handle, counted. */
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TRUE(active == 0);
    CK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_YIELD));
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TRUE(flags == CU_CTX_SCHED_YIELD && active == 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxSetFlags(dev, 0x80000000u));
    CK(cuDevicePrimaryCtxRetain(&p1, dev));
    CK(cuDevicePrimaryCtxRetain(&p2, dev));
    TRUE(p1 == p2);
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TRUE(active == 1);
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy(p1));   /* not with cuCtxDestroy */
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxGetFlags(&flags));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetFlags(0));
    CK(cuCtxPushCurrent(p1));
    /* The current context's flags (cudaGetDeviceFlags asks them). */
    CK(cuCtxGetFlags(&flags));
    TRUE((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_YIELD);
    CK(cuCtxSetFlags(CU_CTX_SCHED_BLOCKING_SYNC));
    CK(cuCtxGetFlags(&flags));
    TRUE((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxSetFlags(0x80000000u));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxSetFlags(CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxGetFlags(NULL));
    {
        CUcontext mine;
        unsigned int f2 = 0;

        CK(cuCtxCreate(&mine, NULL, CU_CTX_SCHED_SPIN, dev));
        CK(cuCtxGetFlags(&f2));
        TRUE((f2 & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_SPIN);
        CK(cuCtxDestroy(mine));
    }
    CK(cuMemAlloc(&mem, 256));
    CK(cuMemFree(mem));
    /* What a created context holds goes with it, as the driver frees it
     * at cuCtxDestroy: a third of the free memory, a module, a stream and
     * an event made in a new context and left there, eight times over;
     * the primary context's stay and work. */
    {
        CUcontext mine;
        CUdeviceptr keep, big;
        CUmodule mod, pmod;
        CUfunction fn;
        CUstream st, pst;
        CUevent ev;
        size_t fr = 0, tot = 0, chunk, flen;
        unsigned int v = 0;
        void *fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", &flen);

        CK(cuMemAlloc(&keep, 4096));
        CK(cuMemsetD32(keep, 0x5eed, 1024));
        CK(cuModuleLoadData(&pmod, fatbin));
        CK(cuStreamCreate(&pst, CU_STREAM_NON_BLOCKING));
        CK(cuMemGetInfo(&fr, &tot));
        chunk = (fr / 3) & ~(size_t)((2u << 20) - 1);
        TRUE(chunk > 0);
        for (int i = 0; i < 8; i++) {
            CK(cuCtxCreate(&mine, NULL, 0, dev));
            CK(cuMemAlloc(&big, chunk));
            CK(cuModuleLoadData(&mod, fatbin));
            CK(cuModuleGetFunction(&fn, mod, "vcu_drv_fill"));
            CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
            CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
            CK(cuMemsetD8Async(big, 1, 4096, st));
            CK(cuEventRecord(ev, st));
            CK(cuCtxDestroy(mine));
            CK(cuCtxGetCurrent(&cur));
            TRUE(cur == p1);
        }
        CK(cuModuleGetFunction(&fn, pmod, "vcu_drv_fill"));
        CK(cuMemsetD32Async(keep + 4, 0x5eed, 1, pst));
        CK(cuStreamSynchronize(pst));
        CK(cuMemcpyDtoH(&v, keep, sizeof(v)));
        TRUE(v == 0x5eed);
        CK(cuStreamDestroy(pst));
        CK(cuModuleUnload(pmod));
        CK(cuMemFree(keep));
        free(fatbin);
    }
    CK(cuDevicePrimaryCtxRelease(dev));
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TRUE(active == 1);
    CK(cuDevicePrimaryCtxRelease(dev));
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TRUE(active == 0);
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuDevicePrimaryCtxRelease(dev));
    /* The handle is the same for the life of the process. */
    CK(cuDevicePrimaryCtxRetain(&p2, dev));
    TRUE(p2 == p1);
    /* Reset: everything of the device goes, the handle stays. */
    CK(cuMemAlloc(&mem, 256));
    CK(cuDevicePrimaryCtxReset(dev));
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    TRUE(active == 0 && flags == 0);
    CK(cuDevicePrimaryCtxRetain(&p2, dev));
    TRUE(p2 == p1);
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == p1);
    CK(cuMemAlloc(&mem, 256));
    CK(cuMemFree(mem));
    CK(cuDevicePrimaryCtxRelease(dev));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxRetain(&p2, count));
    printf("PASS drv_context\n");
    return 0;
}
