/*
 * Two translation units, each with its own kernel and __constant__, hence
 * two fatbins registered by one program.  This one holds main().
 */
#define TEST_NAME "multi_tu"
#include "vcu_test.h"

__constant__ int mtu_a_scale = 3;

__global__ void mtu_kernel_a(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = p[i] * mtu_a_scale + 1;
}

/* multi_tu_b.cu */
cudaError_t mtu_launch_b(int *p, int n);
cudaError_t mtu_set_b_offset(int v);

int main(void)
{
    const int n = 3000;
    int h[n], *d;

    for (int i = 0; i < n; i++)
        h[i] = i;
    CK(cudaMalloc(&d, sizeof(h)));
    CK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    mtu_kernel_a<<<(n + 255) / 256, 256>>>(d, n);
    CK_LAUNCH();
    CK(mtu_set_b_offset(-7));
    CK(mtu_launch_b(d, n));
    CK_LAUNCH();
    mtu_kernel_a<<<(n + 255) / 256, 256>>>(d, n);
    CK_LAUNCH();
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        int want = ((i * 3 + 1) * 5 - 7) * 3 + 1;

        EXPECT(h[i] == want, "p[%d] = %d, want %d", i, h[i], want);
    }
    printf("a, b, a over %d elements ok\n", n);
    CK(cudaFree(d));
    vcu_test_pass();
    return 0;
}
