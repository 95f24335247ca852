/*
 * Per-thread default streams are per guest thread: while one thread's
 * per-thread stream is held up by a host function, another thread's is
 * idle, and while one thread's captures, another thread's does not (one
 * stream for the whole process would be busy, or capturing, for both);
 * threads that come and go each get one of their own.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "vcu_drv_test.h"

static CUcontext ctx;
static atomic_int started, release;

static void hold(void *arg)
{
    struct timespec ts = { 0, 1000000 };

    (void)arg;
    atomic_store(&started, 1);
    for (int i = 0; i < 10000 && !atomic_load(&release); i++)    /* 10 s at most */
        nanosleep(&ts, NULL);
}

static void *holder(void *arg)
{
    (void)arg;
    CK(cuCtxSetCurrent(ctx));
    CK(cuLaunchHostFunc(CU_STREAM_PER_THREAD, hold, NULL));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    return NULL;
}

static atomic_int capturing, capture_done;

/* Captures on its per-thread stream until told to stop. */
static void *capturer(void *arg)
{
    struct timespec ts = { 0, 1000000 };
    CUgraph g;

    (void)arg;
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    atomic_store(&capturing, 1);
    for (int i = 0; i < 10000 && !atomic_load(&capture_done); i++)
        nanosleep(&ts, NULL);
    CK(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g));
    CK(cuGraphDestroy(g));
    return NULL;
}

static void *short_lived(void *arg)
{
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)arg;

    CK(cuCtxSetCurrent(ctx));
    CK(cuMemsetD8Async(p, 7, 4096, CU_STREAM_PER_THREAD));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    return NULL;
}

int main(void)
{
    CUdevice dev;
    CUdeviceptr p;
    pthread_t t, many[32];
    struct timespec ts = { 0, 1000000 };
    unsigned char host[4096];
    int waited = 0;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));

    TRUE(pthread_create(&t, NULL, holder, NULL) == 0);
    while (!atomic_load(&started) && waited++ < 10000)
        nanosleep(&ts, NULL);
    TRUE(atomic_load(&started));
    /* The other thread's stream is busy; this thread's is not. */
    EXPECT(CUDA_SUCCESS, cuStreamQuery(CU_STREAM_PER_THREAD));
    CK(cuMemAlloc(&p, sizeof(host)));
    CK(cuMemsetD8Async(p, 3, sizeof(host), CU_STREAM_PER_THREAD));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    TRUE(!atomic_load(&release));           /* it did not wait for the holder */
    atomic_store(&release, 1);
    TRUE(pthread_join(t, NULL) == 0);

    /* Another thread's per-thread stream captures; this thread's does not. */
    {
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;

        waited = 0;
        TRUE(pthread_create(&t, NULL, capturer, NULL) == 0);
        while (!atomic_load(&capturing) && waited++ < 10000)
            nanosleep(&ts, NULL);
        TRUE(atomic_load(&capturing));
        CK(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &st));
        TRUE(st == CU_STREAM_CAPTURE_STATUS_NONE);
        atomic_store(&capture_done, 1);
        TRUE(pthread_join(t, NULL) == 0);
    }

    /* Threads that come and go. */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 32; i++)
            TRUE(pthread_create(&many[i], NULL, short_lived, (void *)(uintptr_t)p) == 0);
        for (int i = 0; i < 32; i++)
            TRUE(pthread_join(many[i], NULL) == 0);
    }
    CK(cuMemcpyDtoH(host, p, sizeof(host)));
    for (size_t i = 0; i < sizeof(host); i++)
        TRUE(host[i] == 7);
    CK(cuMemFree(p));
    printf("PASS drv_ptds\n");
    return 0;
}
