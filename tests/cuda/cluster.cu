/*
 * Thread-block clusters through cudaLaunchKernelExC: each block writes
 * its rank in its cluster, its cluster's size and its cluster's index as
 * the hardware reports them (%cluster_ctarank, %cluster_nctarank,
 * %clusterid), for several cluster shapes, and a bad cluster shape is
 * refused.
 */
#define TEST_NAME "cluster"
#include "vcu_test.h"

#define NB 64

__global__ void cluster_ids(unsigned int *out)
{
    unsigned int rank, n, cx, cy, cz, ncx, ncy;

    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cx));
    asm volatile("mov.u32 %0, %%clusterid.y;" : "=r"(cy));
    asm volatile("mov.u32 %0, %%clusterid.z;" : "=r"(cz));
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(ncx));
    asm volatile("mov.u32 %0, %%nclusterid.y;" : "=r"(ncy));
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        unsigned int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);

        out[b] = rank | (n << 8) | ((cx + ncx * (cy + ncy * cz)) << 16);
    }
}

static void check(unsigned int *dout, dim3 g, dim3 c, int with_attr)
{
    cudaLaunchAttribute a[2];
    cudaLaunchConfig_t cfg = {};
    unsigned int h[NB];

    a[0].id = cudaLaunchAttributeClusterDimension;
    a[0].val.clusterDim.x = c.x;
    a[0].val.clusterDim.y = c.y;
    a[0].val.clusterDim.z = c.z;
    a[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    a[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
    cfg.gridDim = g;
    cfg.blockDim = dim3(32);
    cfg.attrs = a;
    cfg.numAttrs = with_attr ? 2 : 0;
    CK(cudaMemset(dout, 0xff, sizeof(h)));
    CK(cudaLaunchKernelEx(&cfg, cluster_ids, dout));
    CK(cudaMemcpy(h, dout, sizeof(h), cudaMemcpyDeviceToHost));
    for (unsigned int z = 0; z < g.z; z++)
        for (unsigned int y = 0; y < g.y; y++)
            for (unsigned int x = 0; x < g.x; x++) {
                unsigned int b = x + g.x * (y + g.y * z);
                unsigned int rank = x % c.x + c.x * (y % c.y + c.y * (z % c.z));
                unsigned int id = x / c.x + (g.x / c.x) * (y / c.y + (g.y / c.y) * (z / c.z));
                unsigned int want = rank | (c.x * c.y * c.z) << 8 | id << 16;

                EXPECT(h[b] == want, "grid %ux%ux%u cluster %ux%ux%u: block %u: 0x%x, want 0x%x",
                       g.x, g.y, g.z, c.x, c.y, c.z, b, h[b], want);
            }
    printf("grid %ux%ux%u in clusters of %ux%ux%u ok\n", g.x, g.y, g.z, c.x, c.y, c.z);
}

int main(void)
{
    unsigned int *dout;
    int major = 0, clusters = 0;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute a;

    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CK(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, 0));
    EXPECT(major >= 9 && clusters == 1, "compute capability %d, cluster launch %d", major,
           clusters);
    CK(cudaMalloc(&dout, NB * sizeof(unsigned int)));
    check(dout, dim3(8), dim3(1, 1, 1), 0);
    check(dout, dim3(8), dim3(2, 1, 1), 1);
    check(dout, dim3(16), dim3(8, 1, 1), 1);
    check(dout, dim3(4, 4, 2), dim3(2, 2, 1), 1);

    /* 7 blocks are not whole clusters of 2. */
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = 2;
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = 1;
    cfg.gridDim = dim3(7);
    cfg.blockDim = dim3(32);
    cfg.attrs = &a;
    cfg.numAttrs = 1;
    {
        cudaError_t e = cudaLaunchKernelEx(&cfg, cluster_ids, dout);

        EXPECT(e == cudaErrorInvalidClusterSize, "7 blocks in clusters of 2: %d", (int)e);
        (void)cudaGetLastError();
    }
    CK(cudaDeviceSynchronize());
    printf("bad cluster shape refused\n");
    CK(cudaFree(dout));
    vcu_test_pass();
    return 0;
}
