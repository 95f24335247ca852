/*
 * A cooperative launch whose kernel synchronises the whole grid with
 * cooperative_groups: each phase reads what other blocks wrote before it.
 */
#define TEST_NAME "cooperative"
#include <cooperative_groups.h>
#include "vcu_test.h"

namespace cg = cooperative_groups;

#define THREADS 128

/*
 * Phase 1: partial[g] = sum of in[] over a grid-stride loop.
 * Phase 2: mixed[g] = partial[g] + partial[total - 1 - g] (other blocks).
 * Phase 3: thread 0 sums mixed[] into out[0].
 */
__global__ void coop_sum(const int *in, int *partial, int *mixed, int *out,
                         int n)
{
    cg::grid_group grid = cg::this_grid();
    int total = gridDim.x * blockDim.x;
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int s = 0;

    for (int i = g; i < n; i += total)
        s += in[i];
    partial[g] = s;
    grid.sync();
    mixed[g] = partial[g] + partial[total - 1 - g];
    grid.sync();
    if (g == 0) {
        int t = 0;

        for (int i = 0; i < total; i++)
            t += mixed[i];
        out[0] = t;
    }
}

/* Dynamic shared memory per block size, for the variable search. */
static size_t smem4(int bs)
{
    return (size_t)bs * 4;
}

int main(void)
{
    const int n = 100000;
    int coop = 0, sms = 0, per_sm = 0, blocks, total, sum, want = 0;
    int *h = (int *)malloc(n * sizeof(int)), *hmixed, *hpartial;
    int *din, *dpartial, *dmixed, *dout;

    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    EXPECT(coop == 1, "cudaDevAttrCooperativeLaunch = %d", coop);
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_sum,
                                                     THREADS, 0));
    EXPECT(sms >= 1 && per_sm >= 1, "occupancy %d blocks/SM on %d SMs", per_sm,
           sms);
    printf("info: %d SMs, %d blocks per SM\n", sms, per_sm);
    /* cuda_runtime.h's best block size, over this runtime's occupancy and
     * function attributes: the one the same search here finds. */
    {
        int grid = 0, block = 0, want_grid = 0, want_block = 0, per_mp = 0, b;
        cudaFuncAttributes fa;

        CK(cudaOccupancyMaxPotentialBlockSize(&grid, &block, coop_sum, 0, 0));
        CK(cudaFuncGetAttributes(&fa, coop_sum));
        CK(cudaDeviceGetAttribute(&per_mp, cudaDevAttrMaxThreadsPerMultiProcessor, 0));
        for (int bs = fa.maxThreadsPerBlock / 32 * 32; bs > 0; bs -= 32) {
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, coop_sum, bs, bs * 4));
            if (bs * b > want_block * (want_grid / sms)) {
                want_block = bs;
                want_grid = b * sms;
            }
            if (want_block * (want_grid / sms) == per_mp)
                break;
        }
        CK(cudaOccupancyMaxPotentialBlockSizeVariableSMem(&grid, &block, coop_sum,
                                                          smem4, 0));
        EXPECT(block == want_block && grid == want_grid && block > 0,
               "best block %d grid %d, want %d %d", block, grid, want_block, want_grid);
        printf("info: best block %d, grid %d\n", block, grid);
    }
    /* Fixed when the device allows it, so the output does not vary. */
    blocks = sms * per_sm < 8 ? sms * per_sm : 8;
    total = blocks * THREADS;

    for (int i = 0; i < n; i++)
        h[i] = (i % 97) - 40;
    CK(cudaMalloc(&din, n * sizeof(int)));
    CK(cudaMalloc(&dpartial, total * sizeof(int)));
    CK(cudaMalloc(&dmixed, total * sizeof(int)));
    CK(cudaMalloc(&dout, sizeof(int)));
    CK(cudaMemcpy(din, h, n * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0, sizeof(int)));

    void *args[] = { &din, &dpartial, &dmixed, &dout, (void *)&n };
    CK(cudaLaunchCooperativeKernel((void *)coop_sum, dim3(blocks),
                                   dim3(THREADS), args, 0, 0));
    CK(cudaDeviceSynchronize());

    hpartial = (int *)calloc(total, sizeof(int));
    hmixed = (int *)malloc(total * sizeof(int));
    for (int i = 0; i < n; i++)
        hpartial[i % total] += h[i];
    for (int g = 0; g < total; g++)
        want += hpartial[g] + hpartial[total - 1 - g];
    CK(cudaMemcpy(hmixed, dmixed, total * sizeof(int), cudaMemcpyDeviceToHost));
    for (int g = 0; g < total; g++)
        EXPECT(hmixed[g] == hpartial[g] + hpartial[total - 1 - g],
               "mixed[%d] = %d: a block ran past grid.sync()", g, hmixed[g]);
    CK(cudaMemcpy(&sum, dout, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(sum == want, "sum = %d, want %d", sum, want);
    printf("grid-synchronised sum ok\n");

    CK(cudaFree(din));
    CK(cudaFree(dpartial));
    CK(cudaFree(dmixed));
    CK(cudaFree(dout));
    free(h);
    free(hpartial);
    free(hmixed);
    vcu_test_pass();
    return 0;
}
