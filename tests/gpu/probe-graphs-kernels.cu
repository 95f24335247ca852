// Kernels of tests/gpu/probe-graphs.c (built with -maxrregcount=255, so
// that k_regs takes more registers than 1024 threads of it may have).
extern "C" __global__ void k_empty(void) {}
extern "C" __global__ void k_a(int *p) { p[threadIdx.x] += 1; }
extern "C" __global__ void k_b(int *p) { p[threadIdx.x] *= 2; }
extern "C" __global__ void k_regs(float *p, int n)
{
    float v[96];
#pragma unroll
    for (int i = 0; i < 96; i++)
        v[i] = p[(threadIdx.x + i * 7) % n];
    float s = 0;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int i = 0; i < 96; i++)
            s += v[i] * v[(i + j) % 96] + s * 0.5f;
    p[threadIdx.x] = s;
}
