/*
 * Kernels of the Driver API tests, loaded at run time (cuModuleLoadData of
 * the fatbin, cuModuleLoad of the cubin).  extern "C": the tests look them
 * up by these names.  Their CPU twins for the stand-in are in
 * tests/fakecuda/twins.c (tests/cuda/check-twins.sh compares them).
 */

/* Read and written by drv_vector_add through cuModuleGetGlobal. */
__device__ unsigned int vcu_drv_flag = 7;

/* Managed (__managed__): drv_managed reads and writes them from the host
 * by their addresses, as natively, and vcu_drv_managed_add adds to them.
 * The driver packs a module's managed globals in one page, each an
 * allocation of its own. */
__managed__ unsigned int vcu_drv_managed_word = 10;
__managed__ unsigned int vcu_drv_managed_pair[2] = { 20, 30 };

extern "C" __global__ void vcu_drv_managed_add(unsigned int v)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        vcu_drv_managed_word += v;
        vcu_drv_managed_pair[1] += v;
    }
}

extern "C" __global__ void vcu_drv_vadd(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        c[i] = a[i] + b[i];
}

/* p[i] = v + i * step, with a parameter layout that has padding: a char
 * between two 8-byte ones. */
extern "C" __global__ void vcu_drv_fill(unsigned int *p, char pad, unsigned long long v,
                                        unsigned int step, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = (unsigned int)v + (unsigned int)i * step + (unsigned int)pad;
}

/* *out = vcu_drv_flag, then vcu_drv_flag += 1. */
extern "C" __global__ void vcu_drv_flag_bump(unsigned int *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *out = vcu_drv_flag;
        vcu_drv_flag += 1;
    }
}

/* The body of a while node (drv_graphcond): *ctr += 1, and the node
 * goes round again while *ctr < n (cudaGraphSetConditional, device code
 * of the CUDA runtime's that needs no device-runtime library). */
extern "C" __global__ void vcu_drv_cond_count(unsigned int *ctr, unsigned int n,
                                              cudaGraphConditionalHandle h)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int v = *ctr + 1;

        *ctr = v;
        cudaGraphSetConditional(h, v < n ? 1u : 0u);
    }
}

/*
 * out[block] = rank | size << 8 | cluster << 16, as the hardware numbers
 * them: the block's rank in its cluster (%cluster_ctarank), the blocks in
 * its cluster (%cluster_nctarank) and its cluster's linear index in the
 * grid (%clusterid, x fastest).  Without clusters every block is a
 * cluster of one.
 */
extern "C" __global__ void vcu_drv_cluster(unsigned int *out)
{
#if __CUDA_ARCH__ >= 900    /* clusters are sm_90's; drv_fatbin builds for sm_80 too */
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
#else
    (void)out;
#endif
}
