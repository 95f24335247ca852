/*
 * Large copies between device memory and ordinary (pageable) host
 * memory, synchronous and async, beyond the sizes the guest library
 * splits into several requests (32 MiB): every byte must arrive.
 */
#define TEST_NAME "pageable"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "vcu_test.h"

int main(void)
{
    const size_t bytes = 72u << 20;     /* three requests of the guest library */
    unsigned char *a = (unsigned char *)malloc(bytes), *b = (unsigned char *)malloc(bytes), *d;
    cudaStream_t st;

    EXPECT(a != NULL && b != NULL, "malloc");
    for (size_t i = 0; i < bytes; i++)
        a[i] = (unsigned char)(i * 131 + (i >> 13));
    CK(cudaMalloc(&d, bytes));
    CK(cudaStreamCreate(&st));

    memset(b, 0xee, bytes);
    CK(cudaMemcpy(d, a, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, d, bytes, cudaMemcpyDeviceToHost));
    EXPECT(memcmp(a, b, bytes) == 0, "synchronous 72 MiB round trip differs");
    printf("synchronous round trip of 72 MiB of pageable memory\n");

    memset(b, 0x11, bytes);
    CK(cudaMemset(d, 0, bytes));
    CK(cudaMemcpyAsync(d, a, bytes, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(b, d, bytes, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    EXPECT(memcmp(a, b, bytes) == 0, "async 72 MiB round trip differs");
    printf("async round trip of 72 MiB of pageable memory\n");

    CK(cudaStreamDestroy(st));
    CK(cudaFree(d));
    free(a);
    free(b);
    vcu_test_pass();
    return 0;
}
