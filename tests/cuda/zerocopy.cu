/*
 * Zero copy, the cuda-samples simpleZeroCopy pattern: mapped pinned host
 * memory read and written by a kernel through its device pointers.
 */
#define TEST_NAME "zerocopy"
#include "vcu_test.h"

__global__ void zc_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        c[i] = a[i] + b[i];
}

/* NCCL's pattern: a structure in device memory holds the address of
 * page-locked host memory, which no call of the program ever showed to
 * the driver as a pointer (NCCL's abort flag). */
struct zc_comm {
    volatile unsigned *flag;
};

__global__ void zc_through(const struct zc_comm *c, unsigned *out)
{
    out[0] = c->flag[0];
    c->flag[1] = out[0] + 1;
}

int main(void)
{
    const int n = 1 << 20;
    size_t bytes = (size_t)n * sizeof(float);
    struct cudaDeviceProp prop;
    float *a, *b, *c, *da, *db, *dc;
    unsigned int flags = 0;
    int bad = 0;

    CK(cudaSetDeviceFlags(cudaDeviceMapHost));
    CK(cudaGetDeviceProperties(&prop, 0));
    EXPECT(prop.canMapHostMemory, "device cannot map host memory");
    CK(cudaHostAlloc((void **)&a, bytes, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&b, bytes, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&c, bytes, cudaHostAllocMapped));
    CK(cudaHostGetFlags(&flags, a));
    EXPECT(flags & cudaHostAllocMapped, "cudaHostGetFlags lacks cudaHostAllocMapped");
    for (int i = 0; i < n; i++) {
        a[i] = (float)(i % 1000) * 0.5f;
        b[i] = (float)(i % 777) * 0.25f - 3.0f;
        c[i] = -1.0f;
    }
    CK(cudaHostGetDevicePointer((void **)&da, a, 0));
    CK(cudaHostGetDevicePointer((void **)&db, b, 0));
    CK(cudaHostGetDevicePointer((void **)&dc, c, 0));

    /* An interior pointer maps to the same offset. */
    {
        float *mid = NULL;
        struct cudaPointerAttributes at;

        CK(cudaHostGetDevicePointer((void **)&mid, a + 1000, 0));
        EXPECT(mid == da + 1000, "interior device pointer is not base + offset");
        CK(cudaPointerGetAttributes(&at, b));
        EXPECT(at.type == cudaMemoryTypeHost, "mapped memory is not host memory");
        EXPECT(at.devicePointer == db, "cudaPointerGetAttributes device pointer differs");
    }

    zc_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CK_LAUNCH();
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < n; i++)
        if (c[i] != a[i] + b[i])
            bad++;
    printf("n=%d mismatches=%d\n", n, bad);
    EXPECT(bad == 0, "kernel results through mapped memory differ from the CPU sum");

    /* With unified addressing the host pointer itself names the memory on
     * the device: a memset on it, stream-ordered, lands in place. */
    {
        cudaStream_t s;

        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CK(cudaMemsetAsync(c + 8, 0, 4 * sizeof(float), s));
        CK(cudaStreamSynchronize(s));
        EXPECT(c[7] == a[7] + b[7] && c[8] == 0.0f && c[11] == 0.0f && c[12] == a[12] + b[12],
               "a memset on mapped host memory through its host pointer missed");
        EXPECT(cudaMemset(c + n - 1, 0, 2 * sizeof(float)) == cudaErrorInvalidValue,
               "a memset past the end of host memory was not refused");
        (void)cudaGetLastError();
        CK(cudaStreamDestroy(s));
    }
    CK(cudaFreeHost(a));
    CK(cudaFreeHost(b));
    CK(cudaFreeHost(c));

    /* Mapped memory of many pages: 24 MiB, more than any one physically
     * contiguous piece a guest kernel hands out. */
    {
        const int m = 6 << 20;
        float *x, *y, *z, *dx, *dy, *dz;

        CK(cudaHostAlloc((void **)&x, (size_t)m * sizeof(float), cudaHostAllocMapped));
        CK(cudaHostAlloc((void **)&y, (size_t)m * sizeof(float), cudaHostAllocMapped));
        CK(cudaHostAlloc((void **)&z, (size_t)m * sizeof(float), cudaHostAllocMapped));
        for (int i = 0; i < m; i++) {
            x[i] = (float)(i % 1013);
            y[i] = (float)(i % 17) - 8.0f;
            z[i] = 0.0f;
        }
        CK(cudaHostGetDevicePointer((void **)&dx, x, 0));
        CK(cudaHostGetDevicePointer((void **)&dy, y, 0));
        CK(cudaHostGetDevicePointer((void **)&dz, z, 0));
        zc_add<<<(m + 255) / 256, 256>>>(dx, dy, dz, m);
        CK_LAUNCH();
        bad = 0;
        for (int i = 0; i < m; i++)
            if (z[i] != x[i] + y[i])
                bad++;
        printf("n=%d (24 MiB mapped buffers) mismatches=%d\n", m, bad);
        EXPECT(bad == 0, "kernel results through large mapped memory differ from the CPU sum");
        CK(cudaFreeHost(x));
        CK(cudaFreeHost(y));
        CK(cudaFreeHost(z));
    }
    {
        /* With unified addressing a page-locked host pointer is its own
         * device pointer: a kernel handed the host pointers of memory
         * whose device pointer no one asked for works in place, and the
         * device pointer asked afterwards is the host pointer itself. */
        const int m = 4096;
        float *x, *y, *z, *dz = NULL;
        int bad = 0;

        CK(cudaMallocHost((void **)&x, (size_t)m * sizeof(float)));
        CK(cudaHostAlloc((void **)&y, (size_t)m * sizeof(float), cudaHostAllocDefault));
        CK(cudaMallocHost((void **)&z, (size_t)m * sizeof(float)));
        for (int i = 0; i < m; i++) {
            x[i] = (float)i;
            y[i] = 3.0f * (float)i;
            z[i] = -1.0f;
        }
        zc_add<<<(m + 255) / 256, 256>>>(x, y, z, m);
        CK_LAUNCH();
        for (int i = 0; i < m; i++)
            if (z[i] != 4.0f * (float)i)
                bad++;
        printf("host pointers handed to a kernel: mismatches=%d\n", bad);
        EXPECT(bad == 0, "a kernel through page-locked host pointers differs from the CPU sum");
        CK(cudaHostGetDevicePointer((void **)&dz, z, 0));
        EXPECT(dz == z, "the device pointer of page-locked memory is not its host pointer");
        CK(cudaFreeHost(x));
        CK(cudaFreeHost(y));
        CK(cudaFreeHost(z));
    }
    {
        /* With unified addressing page-locked memory is the device's at
         * its own address from the start: a kernel reaches it through a
         * pointer stored in device memory, never passed to any call. */
        struct zc_comm hc, *dc;
        unsigned *flag, *dout, out = 0;

        CK(cudaHostAlloc((void **)&flag, 2 * sizeof(unsigned), cudaHostAllocMapped));
        flag[0] = 0x5eedu;
        flag[1] = 0;
        hc.flag = flag;
        CK(cudaMalloc((void **)&dc, sizeof(hc)));
        CK(cudaMalloc((void **)&dout, sizeof(unsigned)));
        CK(cudaMemcpy(dc, &hc, sizeof(hc), cudaMemcpyHostToDevice));
        zc_through<<<1, 1>>>(dc, dout);
        CK_LAUNCH();
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(&out, dout, sizeof(out), cudaMemcpyDeviceToHost));
        printf("host pointer stored in device memory: read 0x%x, wrote 0x%x\n", out, flag[1]);
        EXPECT(out == 0x5eedu && flag[1] == 0x5eeeu,
               "a kernel did not reach page-locked memory through a pointer stored on the device");
        CK(cudaFree(dc));
        CK(cudaFree(dout));
        CK(cudaFreeHost(flag));
    }
    vcu_test_pass();
    return 0;
}
