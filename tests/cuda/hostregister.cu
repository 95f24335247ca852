/*
 * cudaHostRegister of ordinary memory: pinned in place until unregistered,
 * used by async copies and, mapped, by a kernel through its device
 * pointer; buffers larger than any physically contiguous piece, and an
 * unaligned one.
 */
#define TEST_NAME "hostregister"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "vcu_test.h"

/* The same kernel as zerocopy.cu's (one twin serves both). */
__global__ void zc_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        c[i] = a[i] + b[i];
}

static float *page_alloc(size_t bytes)
{
    void *p = NULL;

    EXPECT(posix_memalign(&p, 4096, bytes) == 0, "posix_memalign(%zu)", bytes);
    return (float *)p;
}

int main(void)
{
    const int n = 8 << 20;                       /* 32 MiB of floats */
    size_t bytes = (size_t)n * sizeof(float);
    float *h1 = page_alloc(bytes), *h2 = page_alloc(bytes), *d;
    cudaStream_t st;
    unsigned int flags = 0;

    /* 1. Async copies from and to registered memory. */
    for (int i = 0; i < n; i++)
        h1[i] = (float)(i % 4093) - 7.0f;
    memset(h2, 0, bytes);
    CK(cudaHostRegister(h1, bytes, cudaHostRegisterDefault));
    CK(cudaHostRegister(h2, bytes, cudaHostRegisterDefault));
    CK_EQ(cudaErrorHostMemoryAlreadyRegistered, cudaHostRegister(h1 + 1024, 4096, 0));
    CK_EQ(cudaErrorHostMemoryAlreadyRegistered, cudaGetLastError());
    CK(cudaMalloc(&d, bytes));
    CK(cudaStreamCreate(&st));
    CK(cudaMemcpyAsync(d, h1, bytes, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(h2, d, bytes, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    EXPECT(memcmp(h1, h2, bytes) == 0, "registered memory: async round trip differs");
    printf("async copies through 32 MiB of registered memory\n");
    CK(cudaHostUnregister(h2));
    CK_EQ(cudaErrorHostMemoryNotRegistered, cudaHostUnregister(h2));
    CK_EQ(cudaErrorHostMemoryNotRegistered, cudaGetLastError());
    CK(cudaHostUnregister(h1));
    printf("unregister; a second unregister: cudaErrorHostMemoryNotRegistered\n");

    /* 2. Mapped: a kernel reads and writes registered memory in place. */
    {
        float *a = page_alloc(bytes), *b = page_alloc(bytes), *c = page_alloc(bytes);
        float *da, *db, *dc;
        int bad = 0;

        for (int i = 0; i < n; i++) {
            a[i] = (float)(i % 1000) * 0.5f;
            b[i] = (float)(i % 777) * 0.25f;
            c[i] = -1.0f;
        }
        CK(cudaHostRegister(a, bytes, cudaHostRegisterMapped));
        CK(cudaHostRegister(b, bytes, cudaHostRegisterMapped));
        CK(cudaHostRegister(c, bytes, cudaHostRegisterMapped));
        CK(cudaHostGetFlags(&flags, a));
        EXPECT(flags & cudaHostRegisterMapped, "cudaHostGetFlags lacks cudaHostRegisterMapped");
        CK(cudaHostGetDevicePointer((void **)&da, a, 0));
        CK(cudaHostGetDevicePointer((void **)&db, b, 0));
        CK(cudaHostGetDevicePointer((void **)&dc, c, 0));
        zc_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
        CK_LAUNCH();
        for (int i = 0; i < n; i++)
            if (c[i] != a[i] + b[i])
                bad++;
        EXPECT(bad == 0, "a kernel on mapped registered memory: %d mismatches", bad);
        printf("a kernel through 32 MiB mapped registered buffers\n");
        CK(cudaHostUnregister(a));
        CK(cudaHostUnregister(b));
        CK(cudaHostUnregister(c));
        /* The same memory again, after its first registration ended. */
        CK(cudaHostRegister(a, bytes, cudaHostRegisterMapped));
        CK(cudaHostUnregister(a));
        free(a);
        free(b);
        free(c);
    }

    /* 3. Not page aligned: pointers keep their offsets. */
    {
        char *raw = (char *)malloc(3 * 4096);
        float *p = (float *)(raw + 100), *dp, *dp16;

        EXPECT(raw != NULL, "malloc");
        CK(cudaHostRegister(p, 10000, cudaHostRegisterMapped));
        CK(cudaHostGetDevicePointer((void **)&dp, p, 0));
        CK(cudaHostGetDevicePointer((void **)&dp16, p + 16, 0));
        EXPECT(dp16 == dp + 16, "interior device pointer is not base + offset");
        for (int i = 0; i < 2000; i++)
            p[i] = 1.0f;
        zc_add<<<8, 256>>>(dp, dp, dp, 2000);
        CK_LAUNCH();
        for (int i = 0; i < 2000; i++)
            EXPECT(p[i] == 2.0f, "unaligned mapped memory: p[%d] = %f", i, p[i]);
        CK(cudaHostUnregister(p));
        free(raw);
        printf("unaligned registration: device pointers keep the offset\n");
    }
    CK(cudaFree(d));
    CK(cudaStreamDestroy(st));
    free(h1);
    free(h2);
    vcu_test_pass();
    return 0;
}
