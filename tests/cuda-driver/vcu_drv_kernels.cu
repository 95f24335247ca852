/*
 * Kernels of the Driver API tests, loaded at run time (cuModuleLoadData of
 * the fatbin, cuModuleLoad of the cubin).  extern "C": the tests look them
 * up by these names.  Their CPU twins for the stand-in are in
 * tests/fakecuda/twins.c (tests/cuda/check-twins.sh compares them).
 */

/* Read and written by drv_vector_add through cuModuleGetGlobal. */
__device__ unsigned int vcu_drv_flag = 7;

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
