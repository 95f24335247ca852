/*
 * Host work in stream order: cudaLaunchHostFunc and cudaStreamAddCallback.
 * A host function queued between two kernels sees the first kernel's
 * result (copied to pinned memory before it) and not the second's.
 */
#define TEST_NAME "callbacks"
#include "vcu_test.h"

__global__ void cb_set(int *dst, int v)
{
    dst[threadIdx.x] = v + (int)threadIdx.x;
}

struct cb_log {
    const volatile int *pinned;     /* written by the copies before each call */
    int seen[4];
    int calls;
    int callbacks;
    cudaError_t status;
};

static void CUDART_CB cb_host_fn(void *arg)
{
    struct cb_log *log = (struct cb_log *)arg;

    if (log->calls < 4)
        log->seen[log->calls] = log->pinned[0];
    log->calls++;
}

static void CUDART_CB cb_stream_cb(cudaStream_t s, cudaError_t status,
                                   void *arg)
{
    struct cb_log *log = (struct cb_log *)arg;

    (void)s;
    log->callbacks++;
    log->status = status;
}

int main(void)
{
    int *d, *pinned;
    cudaStream_t s;
    struct cb_log log = {};

    CK(cudaStreamCreate(&s));
    CK(cudaMalloc(&d, 32 * sizeof(int)));
    CK(cudaMallocHost((void **)&pinned, 32 * sizeof(int)));
    pinned[0] = -1;
    log.pinned = pinned;
    log.status = cudaErrorUnknown;

    cb_set<<<1, 32, 0, s>>>(d, 11);
    CK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaLaunchHostFunc(s, cb_host_fn, &log));
    cb_set<<<1, 32, 0, s>>>(d, 22);
    CK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaLaunchHostFunc(s, cb_host_fn, &log));
    CK(cudaStreamAddCallback(s, cb_stream_cb, &log, 0));
    cb_set<<<1, 32, 0, s>>>(d, 33);
    CK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamAddCallback(s, cb_stream_cb, &log, 0));
    CK(cudaLaunchHostFunc(s, cb_host_fn, &log));
    CK(cudaStreamSynchronize(s));

    EXPECT(log.calls == 3, "host function ran %d times, want 3", log.calls);
    EXPECT(log.callbacks == 2, "stream callback ran %d times, want 2",
           log.callbacks);
    EXPECT(log.status == cudaSuccess, "callback status %s",
           cudaGetErrorName(log.status));
    printf("host functions: %d, callbacks: %d\n", log.calls, log.callbacks);
    EXPECT(log.seen[0] == 11 && log.seen[1] == 22 && log.seen[2] == 33,
           "host functions saw %d, %d, %d; want 11, 22, 33", log.seen[0],
           log.seen[1], log.seen[2]);
    printf("host functions saw %d, %d, %d\n", log.seen[0], log.seen[1],
           log.seen[2]);
    for (int i = 0; i < 32; i++)
        EXPECT(pinned[i] == 33 + i, "pinned[%d] = %d", i, pinned[i]);

    /* On the legacy default stream too. */
    CK(cudaLaunchHostFunc(0, cb_host_fn, &log));
    CK(cudaDeviceSynchronize());
    EXPECT(log.calls == 4, "host function on stream 0 did not run");
    printf("host function on the default stream ok\n");

    /* Captured, a host node: run each time the graph runs. */
    {
        cudaStream_t cs;
        cudaGraph_t g;
        cudaGraphExec_t x;

        CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
        CK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
        CK(cudaLaunchHostFunc(cs, cb_host_fn, &log));
        CK(cudaStreamEndCapture(cs, &g));
        EXPECT(log.calls == 4, "a captured host function ran at the capture");
        CK(cudaGraphInstantiate(&x, g, 0));
        for (int i = 0; i < 3; i++) {
            CK(cudaGraphLaunch(x, cs));
            CK(cudaStreamSynchronize(cs));
        }
        EXPECT(log.calls == 7, "captured host function ran %d times in 3 replays",
               log.calls - 4);
        CK(cudaGraphExecDestroy(x));
        CK(cudaGraphDestroy(g));
        CK(cudaStreamDestroy(cs));
        printf("captured host function ran at each of 3 replays\n");
    }

    CK(cudaFreeHost(pinned));
    CK(cudaFree(d));
    CK(cudaStreamDestroy(s));
    vcu_test_pass();
    return 0;
}
