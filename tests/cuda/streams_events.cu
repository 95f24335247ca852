/*
 * Two streams ordered by an event: stream 2 waits for stream 1's kernel
 * through cudaStreamWaitEvent.  Timing events, and queries that end in
 * cudaSuccess.
 */
#define TEST_NAME "streams_events"
#include <string.h>
#include "vcu_test.h"

/* p[i] = base + i */
__global__ void se_fill(int *p, int n, int base)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = base + i;
}

__global__ void se_add(int *dst, const int *src, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        dst[i] += 2 * src[i];
}

static void wait_stream(cudaStream_t s)
{
    cudaError_t err;

    while ((err = cudaStreamQuery(s)) == cudaErrorNotReady)
        ;
    CK(err);
}

static void wait_event(cudaEvent_t e)
{
    cudaError_t err;

    while ((err = cudaEventQuery(e)) == cudaErrorNotReady)
        ;
    CK(err);
}

int main(void)
{
    const int n = 1 << 16;
    int *da, *db, *h = (int *)malloc(n * sizeof(int));
    cudaStream_t s1, s2;
    cudaEvent_t start, stop, ready, done;
    float ms = -1.0f;

    CK(cudaStreamCreate(&s1));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    CK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CK(cudaEventCreate(&done));
    CK(cudaMalloc(&da, n * sizeof(int)));
    CK(cudaMalloc(&db, n * sizeof(int)));
    CK(cudaMemsetAsync(db, 0, n * sizeof(int), s2));
    CK(cudaStreamSynchronize(s2));

    CK(cudaEventRecord(start, s1));
    se_fill<<<n / 256, 256, 0, s1>>>(da, n, 1000);
    CK(cudaGetLastError());
    CK(cudaEventRecord(ready, s1));
    CK(cudaStreamWaitEvent(s2, ready, 0));
    se_add<<<n / 256, 256, 0, s2>>>(db, da, n);
    CK(cudaGetLastError());
    CK(cudaEventRecord(done, s2));
    CK(cudaEventRecord(stop, s1));

    wait_stream(s2);
    wait_event(done);
    wait_event(stop);
    CK(cudaEventSynchronize(stop));
    CK(cudaEventElapsedTime(&ms, start, stop));
    EXPECT(ms >= 0.0f, "cudaEventElapsedTime = %f", ms);
    printf("elapsed time >= 0\n");
    printf("info: elapsed %.3f ms\n", ms);
    CK_EQ(cudaErrorInvalidResourceHandle, cudaEventElapsedTime(&ms, start, ready));
    CK_EQ(cudaErrorInvalidResourceHandle, cudaGetLastError());
    printf("elapsed time of a timing-disabled event refused\n");

    CK(cudaMemcpy(h, db, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == 2 * (1000 + i), "db[%d] = %d, want %d", i, h[i],
               2 * (1000 + i));
    printf("stream 2 saw stream 1's result: %d elements\n", n);

    /* Again, with the wait on the legacy default stream instead. */
    se_fill<<<n / 256, 256, 0, s2>>>(da, n, 5);
    CK(cudaEventRecord(ready, s2));
    CK(cudaStreamWaitEvent(0, ready, 0));
    se_add<<<n / 256, 256>>>(db, da, n);
    CK_LAUNCH();
    CK(cudaMemcpy(h, db, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == 2 * (1000 + i) + 2 * (5 + i), "second pass db[%d] = %d",
               i, h[i]);
    printf("default stream saw stream 2's result\n");

    /* Stream attributes are the device's: set, read back, copied, and
     * checked as the driver checks them. */
    {
        cudaLaunchAttributeValue v, got;

        memset(&v, 0, sizeof(v));
        v.accessPolicyWindow.base_ptr = da;
        v.accessPolicyWindow.num_bytes = n * sizeof(int);
        v.accessPolicyWindow.hitRatio = 0.5f;
        v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
        v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
        CK(cudaStreamSetAttribute(s1, cudaLaunchAttributeAccessPolicyWindow, &v));
        memset(&got, 0, sizeof(got));
        CK(cudaStreamGetAttribute(s1, cudaLaunchAttributeAccessPolicyWindow, &got));
        EXPECT(got.accessPolicyWindow.base_ptr == (void *)da &&
               got.accessPolicyWindow.num_bytes == n * sizeof(int) &&
               got.accessPolicyWindow.hitRatio == 0.5f &&
               got.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting &&
               got.accessPolicyWindow.missProp == cudaAccessPropertyStreaming,
               "access policy window read back as %p %zu", got.accessPolicyWindow.base_ptr,
               got.accessPolicyWindow.num_bytes);
        memset(&v, 0, sizeof(v));
        v.memSyncDomain = cudaLaunchMemSyncDomainRemote;
        CK(cudaStreamSetAttribute(s1, cudaLaunchAttributeMemSyncDomain, &v));
        CK(cudaStreamGetAttribute(s1, cudaLaunchAttributeMemSyncDomain, &got));
        EXPECT(got.memSyncDomain == cudaLaunchMemSyncDomainRemote, "memSyncDomain %d",
               (int)got.memSyncDomain);
        v.syncPolicy = cudaSyncPolicyBlockingSync;
        CK(cudaStreamSetAttribute(s1, cudaLaunchAttributeSynchronizationPolicy, &v));
        CK(cudaStreamGetAttribute(s1, cudaLaunchAttributeSynchronizationPolicy, &got));
        EXPECT(got.syncPolicy == cudaSyncPolicyBlockingSync, "syncPolicy %d",
               (int)got.syncPolicy);
        /* A copy takes every attribute. */
        CK(cudaStreamCopyAttributes(s2, s1));
        memset(&got, 0, sizeof(got));
        CK(cudaStreamGetAttribute(s2, cudaLaunchAttributeAccessPolicyWindow, &got));
        EXPECT(got.accessPolicyWindow.base_ptr == (void *)da &&
               got.accessPolicyWindow.hitRatio == 0.5f, "copied window %p",
               got.accessPolicyWindow.base_ptr);
        CK(cudaStreamGetAttribute(s2, cudaLaunchAttributeMemSyncDomain, &got));
        EXPECT(got.memSyncDomain == cudaLaunchMemSyncDomainRemote, "copied memSyncDomain %d",
               (int)got.memSyncDomain);
        /* Work still runs on the stream with its window. */
        se_add<<<n / 256, 256, 0, s1>>>(db, da, n);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s1));
        /* Refused as the driver refuses them. */
        memset(&v, 0, sizeof(v));
        v.accessPolicyWindow.base_ptr = da;
        v.accessPolicyWindow.num_bytes = 4096;
        v.accessPolicyWindow.hitRatio = 2.0f;
        CK_EQ(cudaErrorInvalidValue,
              cudaStreamSetAttribute(s1, cudaLaunchAttributeAccessPolicyWindow, &v));
        (void)cudaGetLastError();
        printf("stream attributes set, read back and copied\n");
    }

    CK(cudaEventDestroy(start));
    CK(cudaEventDestroy(stop));
    CK(cudaEventDestroy(ready));
    CK(cudaEventDestroy(done));
    CK(cudaStreamDestroy(s1));
    CK(cudaStreamDestroy(s2));
    CK(cudaFree(da));
    CK(cudaFree(db));
    free(h);
    vcu_test_pass();
    return 0;
}
