/*
 * Device symbols: a __constant__ array set with cudaMemcpyToSymbol, a
 * __device__ counter read back with cudaMemcpyFromSymbol, an initialised
 * __device__ variable, and a __device__ array reached through
 * cudaGetSymbolAddress / cudaGetSymbolSize.
 */
#define TEST_NAME "symbols"
#include "vcu_test.h"

#define NCOEF 16
#define NTABLE 256

__constant__ float sym_coef[NCOEF];
__device__ int sym_counter;
__device__ int sym_init = 42;
__device__ float sym_table[NTABLE];

/* out[i] = sym_coef[i % NCOEF] * i + sym_init; counts the threads that ran. */
__global__ void sym_apply(float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n) {
        out[i] = sym_coef[i % NCOEF] * (float)i + (float)sym_init;
        atomicAdd(&sym_counter, 1);
    }
}

__global__ void sym_scale_table(float s)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < NTABLE)
        sym_table[i] *= s;
}

int main(void)
{
    const int n = 1000;
    float coef[NCOEF], out[n], table[NTABLE], back[NTABLE];
    float *dout, *dtable;
    size_t size = 0;
    int counter = -1, init = 0, bad = 0;

    for (int i = 0; i < NCOEF; i++)
        coef[i] = (float)(i + 1) * 0.5f;
    CK(cudaMemcpyToSymbol(sym_coef, coef, sizeof(coef)));
    CK(cudaMemcpyFromSymbol(&init, sym_init, sizeof(init)));
    EXPECT(init == 42, "sym_init reads %d, want its initialiser 42", init);
    printf("sym_init=%d\n", init);
    CK(cudaMemcpyToSymbol(sym_counter, &bad, sizeof(bad)));

    CK(cudaMalloc(&dout, sizeof(out)));
    sym_apply<<<(n + 127) / 128, 128>>>(dout, n);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(out), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (out[i] != coef[i % NCOEF] * (float)i + 42.0f)
            bad++;
    EXPECT(bad == 0, "sym_apply: %d mismatches", bad);
    CK(cudaMemcpyFromSymbol(&counter, sym_counter, sizeof(counter)));
    EXPECT(counter == n, "sym_counter = %d, want %d", counter, n);
    printf("sym_counter=%d\n", counter);

    /* Partial write at an offset, read back at an offset. */
    float two[2] = { 100.0f, 200.0f }, got[2];
    CK(cudaMemcpyToSymbol(sym_coef, two, sizeof(two), 3 * sizeof(float)));
    CK(cudaMemcpyFromSymbol(got, sym_coef, sizeof(got), 3 * sizeof(float)));
    EXPECT(got[0] == 100.0f && got[1] == 200.0f, "offset copy of sym_coef");
    CK(cudaMemcpyFromSymbol(got, sym_coef, sizeof(float), 2 * sizeof(float)));
    EXPECT(got[0] == coef[2], "sym_coef[2] clobbered by offset copy");

    CK(cudaGetSymbolSize(&size, sym_table));
    EXPECT(size == sizeof(table), "cudaGetSymbolSize = %zu, want %zu", size,
           sizeof(table));
    printf("sym_table size=%zu\n", size);
    CK(cudaGetSymbolAddress((void **)&dtable, sym_table));
    EXPECT(dtable != NULL, "cudaGetSymbolAddress gave NULL");
    for (int i = 0; i < NTABLE; i++)
        table[i] = (float)i - 10.0f;
    CK(cudaMemcpy(dtable, table, sizeof(table), cudaMemcpyHostToDevice));
    sym_scale_table<<<NTABLE / 64, 64>>>(3.0f);
    CK_LAUNCH();
    CK(cudaMemcpyFromSymbol(back, sym_table, sizeof(back)));
    for (int i = 0; i < NTABLE; i++)
        if (back[i] != table[i] * 3.0f)
            bad++;
    EXPECT(bad == 0, "sym_scale_table: %d mismatches", bad);
    printf("sym_table scaled ok\n");

    CK(cudaFree(dout));
    vcu_test_pass();
    return 0;
}
