/*
 * Probe, run natively on a GPU host (not a test of this project): does a
 * kernel fault in one CUDA context poison the other contexts of the same
 * process?  With driver 580 on an H200 it does (docs/design.md, Isolation).
 *
 *   nvcc -gencode arch=compute_90,code=sm_90 -o ctxfault probe-ctxfault.cu \
 *       -lcuda -L/usr/local/cuda/lib64/stubs
 *   nvcc -cubin -gencode arch=compute_90,code=sm_90 -o k.cubin probe-ctxfault.cu
 *   ./ctxfault k.cubin
 */
#include <cuda.h>
#include <stdio.h>
extern "C" __global__ void oob(int *p) { p[1ull << 40] = 1; }
extern "C" __global__ void ok(int *p) { p[0] = 7; }
#define CK(x) do { CUresult r_ = (x); const char *s_; cuGetErrorName(r_, &s_); printf("%-60s -> %s\n", #x, s_); } while (0)
int main(int argc, char **argv) {
    CUdevice d; CUcontext a, b, c; CUmodule ma, mb, mc; CUfunction fa, fb, fc; CUdeviceptr pa, pb, pc;
    CK(cuInit(0)); CK(cuDeviceGet(&d, 0));
    CK(cuCtxCreate(&b, NULL, 0, d)); CK(cuModuleLoad(&mb, argv[1])); CK(cuModuleGetFunction(&fb, mb, "ok")); CK(cuMemAlloc(&pb, 64));
    CK(cuCtxCreate(&a, NULL, 0, d)); CK(cuModuleLoad(&ma, argv[1])); CK(cuModuleGetFunction(&fa, ma, "oob")); CK(cuMemAlloc(&pa, 64));
    void *args[] = {&pa};
    CK(cuLaunchKernel(fa, 1,1,1, 1,1,1, 0, 0, args, 0)); CK(cuCtxSynchronize());
    CK(cuCtxSetCurrent(b)); void *argsb[] = {&pb};
    CK(cuLaunchKernel(fb, 1,1,1, 1,1,1, 0, 0, argsb, 0)); CK(cuCtxSynchronize()); CK(cuMemAlloc(&pc, 64));
    CK(cuCtxDestroy(a));
    CK(cuCtxSetCurrent(b)); CK(cuMemAlloc(&pc, 64)); CK(cuCtxSynchronize());
    CK(cuCtxCreate(&c, NULL, 0, d)); CK(cuMemAlloc(&pc, 64)); CK(cuModuleLoad(&mc, argv[1])); CK(cuModuleGetFunction(&fc, mc, "ok"));
    void *argsc[] = {&pc}; CK(cuLaunchKernel(fc, 1,1,1, 1,1,1, 0, 0, argsc, 0)); CK(cuCtxSynchronize());
    return 0;
}
