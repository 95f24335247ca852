/*
 * Managed memory as "An Even Easier Introduction to CUDA" uses it: one
 * pointer written on the host, used by kernels, read back on the host.
 * Then host writes between launches, launches with no host access between
 * them, prefetches, copies, small allocations and the error paths.
 */
#define TEST_NAME "managed"
#include <string.h>
#include <sys/mman.h>
#include "vcu_test.h"

__global__ void mm_add(int n, const float *x, float *y)
{
    int stride = blockDim.x * gridDim.x;

    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        y[i] = x[i] + y[i];
}

/* Mismatches of y[i] against want(i). */
static int bad_y(const float *y, int n, float base, float mul)
{
    int bad = 0;

    for (int i = 0; i < n; i++)
        if (y[i] != base + mul * (float)(i % 100))
            bad++;
    return bad;
}

int main(void)
{
    const int n = 1 << 20;
    const int threads = 256, blocks = (n + threads - 1) / threads;
    size_t bytes = (size_t)n * sizeof(float);
    struct cudaPointerAttributes pa;
    struct cudaMemLocation to_dev, to_host;
    float *x, *y, *s1, *s2, *d, *h, *p;
    int dev, v, bad;

    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, dev));
    EXPECT(v == 1, "cudaDevAttrManagedMemory is %d", v);
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrConcurrentManagedAccess, dev));
    printf("concurrentManagedAccess=%d\n", v);

    /* The tutorial: init on the host, add on the device, check on the host. */
    CK(cudaMallocManaged(&x, bytes));
    CK(cudaMallocManaged(&y, bytes, cudaMemAttachGlobal));
    for (int i = 0; i < n; i++) {
        x[i] = 1.0f;
        y[i] = 2.0f;
    }
    mm_add<<<blocks, threads>>>(n, x, y);
    CK_LAUNCH();
    bad = bad_y(y, n, 3.0f, 0.0f);
    printf("add: mismatches=%d\n", bad);
    EXPECT(bad == 0, "y != x + y after the first launch");

    /* The host writes x only; y comes from the last kernel. */
    for (int i = 0; i < n; i++)
        x[i] = (float)(i % 100);
    mm_add<<<blocks, threads>>>(n, x, y);
    CK_LAUNCH();
    bad = bad_y(y, n, 3.0f, 1.0f);
    printf("host write then add: mismatches=%d\n", bad);
    EXPECT(bad == 0, "the host's writes to x did not reach the device");

    /* Ten launches with no host access between them. */
    for (int k = 0; k < 10; k++)
        mm_add<<<blocks, threads>>>(n, x, y);
    CK_LAUNCH();
    bad = bad_y(y, n, 3.0f, 11.0f);
    printf("10 launches: mismatches=%d\n", bad);
    EXPECT(bad == 0, "y wrong after ten launches");

    /* Prefetch to the device after host writes, back to the host after. */
    for (int i = 0; i < n; i++)
        y[i] = 1.0f;
    memset(&to_dev, 0, sizeof(to_dev));
    to_dev.type = cudaMemLocationTypeDevice;
    to_dev.id = dev;
    memset(&to_host, 0, sizeof(to_host));
    to_host.type = cudaMemLocationTypeHost;
    CK(cudaMemPrefetchAsync(x, bytes, to_dev, 0, 0));
    CK(cudaMemPrefetchAsync(y, bytes, to_dev, 0, 0));
    CK(cudaMemAdvise(x, bytes, cudaMemAdviseSetReadMostly, to_dev));
    mm_add<<<blocks, threads>>>(n, x, y);
    CK(cudaGetLastError());
    CK(cudaMemPrefetchAsync(y, bytes, to_host, 0, 0));
    CK(cudaStreamSynchronize(0));
    bad = bad_y(y, n, 1.0f, 1.0f);
    printf("prefetch: mismatches=%d\n", bad);
    EXPECT(bad == 0, "y wrong after prefetches");

    /* Copies: managed is device memory to cudaMemcpyDefault. */
    h = (float *)malloc(bytes);
    CK(cudaMalloc(&d, bytes));
    CK(cudaMemcpy(d, y, bytes, cudaMemcpyDefault));
    CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    bad = bad_y(h, n, 1.0f, 1.0f);
    EXPECT(bad == 0, "managed -> device copy wrong (%d)", bad);
    CK(cudaMemset(y, 0, bytes));
    CK(cudaDeviceSynchronize());
    EXPECT(y[0] == 0.0f && y[n - 1] == 0.0f, "cudaMemset of managed memory not seen");
    CK(cudaMemcpy(y, d, bytes, cudaMemcpyDefault));
    bad = bad_y(y, n, 1.0f, 1.0f);
    EXPECT(bad == 0, "device -> managed copy not seen by the host (%d)", bad);
    printf("copies: ok\n");

    /* Small allocations share no page; each works on its own. */
    CK(cudaMallocManaged(&s1, sizeof(float)));
    CK(cudaMallocManaged(&s2, sizeof(float)));
    EXPECT(*s1 == 0.0f && *s2 == 0.0f, "new managed memory is not zero");
    *s1 = 5.0f;
    *s2 = 6.0f;
    mm_add<<<1, 1>>>(1, s1, s2);
    CK_LAUNCH();
    EXPECT(*s2 == 11.0f && *s1 == 5.0f, "small allocations: %g %g", *s1, *s2);
    printf("small: %g\n", *s2);

    /* Attributes. */
    CK(cudaPointerGetAttributes(&pa, y));
    EXPECT(pa.type == cudaMemoryTypeManaged, "type %d", (int)pa.type);
    EXPECT(pa.device == dev && pa.devicePointer == y && pa.hostPointer == y,
           "pointer attributes of managed memory");
    printf("attributes: managed\n");

    /* Error paths. */
    /* Zero bytes: success and a NULL pointer, as NVIDIA's runtime answers
     * (by itself: it asks the driver nothing). */
    p = x;
    CK(cudaMallocManaged(&p, 0));
    EXPECT(p == NULL, "zero bytes gave %p", (void *)p);
    CK_EQ(cudaErrorInvalidValue, cudaMallocManaged(&p, 4, 7));
    CK_EQ(cudaErrorInvalidValue, cudaMemPrefetchAsync(d, bytes, to_dev, 0, 0));
    CK_EQ(cudaErrorInvalidValue, cudaMemPrefetchAsync(x, bytes + 1, to_dev, 0, 0));
    CK_EQ(cudaErrorInvalidValue, cudaMemPrefetchAsync(h, bytes, to_dev, 0, 0));
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    CK(cudaGetLastError());

    CK(cudaFree(s1));
    CK(cudaFree(s2));
    CK(cudaFree(d));
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK_EQ(cudaErrorInvalidValue, cudaFree(y));
    CK_EQ(cudaErrorInvalidValue, cudaGetLastError());
    /* Freed managed memory is gone from the pointer table. */
    CK(cudaPointerGetAttributes(&pa, x));
    EXPECT(pa.type == cudaMemoryTypeUnregistered, "freed managed pointer still known");
    free(h);

    /* An allocation whose address this process has taken already (its own
     * mappings are where its kernel put them, device memory where the
     * driver did): it must come out elsewhere, not fail.  Natively the
     * driver keeps the freed range reserved, and the mapping is refused. */
    {
        float *q, *q2;
        void *m;

        CK(cudaMallocManaged(&q, bytes));
        CK(cudaFree(q));
        m = mmap(q, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (m != (void *)q) {
            printf("info: the freed managed range stays reserved here\n");
            if (m != MAP_FAILED)
                munmap(m, 4096);
        } else {
            CK(cudaMallocManaged(&q2, bytes));
            printf("info: the next managed allocation at %s address\n",
                   q2 == q ? "the same" : "another");
            EXPECT(q2 != q, "managed memory placed over this process's own mapping");
            for (int i = 0; i < n; i++)
                q2[i] = 1.0f;
            mm_add<<<blocks, threads>>>(n, q2, q2);
            CK_LAUNCH();
            bad = bad_y(q2, n, 2.0f, 0.0f);
            EXPECT(bad == 0, "managed memory made elsewhere is wrong (%d)", bad);
            CK(cudaFree(q2));
            munmap(m, 4096);
        }
    }
    vcu_test_pass();
    return 0;
}
