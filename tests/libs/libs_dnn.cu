/*
 * cuDNN on the guest's libcuda.so.1, against the CPU: a forward
 * convolution, NCHW float (2 images of 3 channels, 20 x 20; 8 filters of
 * 3 x 3, padding 1), the algorithm cuDNN's heuristic puts first
 * (cudnnGetConvolutionForwardAlgorithm_v7) with the workspace it asks
 * for, checked against a direct convolution in double precision.  A
 * program of its own, so that an image without cuDNN still runs the
 * others.  Prints "PASS <name>" or "FAIL <name> <why>"; a FAIL that
 * reached the comparison ends with "against the CPU".
 */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "libs_test.h"

static void check_conv(void)
{
    enum { N = 2, C = 3, H = 20, W = 20, K = 8, R = 3, S = 3, PAD = 1 };
    const int oh = H + 2 * PAD - R + 1, ow = W + 2 * PAD - S + 1;
    size_t xn = (size_t)N * C * H * W, wn = (size_t)K * C * R * S, yn = (size_t)N * K * oh * ow;
    float *x = (float *)malloc(xn * sizeof(float)), *w = (float *)malloc(wn * sizeof(float));
    float *y = (float *)malloc(yn * sizeof(float));
    double *ref = (double *)malloc(yn * sizeof(double)), *bound = (double *)malloc(yn * sizeof(double));
    float *dx = NULL, *dw = NULL, *dy = NULL;
    void *ws = NULL;
    size_t wsbytes = 0;
    const float one = 1.0f, zero = 0.0f;
    cudnnHandle_t h = NULL;
    cudnnTensorDescriptor_t xd = NULL, yd = NULL;
    cudnnFilterDescriptor_t wd = NULL;
    cudnnConvolutionDescriptor_t cd = NULL;
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
    int nperf = 0, n2, c2, h2, w2;
    cudnnStatus_t st;
    cudaError_t e;
    size_t bad = 0;
    double maxerr = 0;

    for (size_t i = 0; i < xn; i++)
        x[i] = input((unsigned)i, 1);
    for (size_t i = 0; i < wn; i++)
        w[i] = input((unsigned)i, 2);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int p = 0; p < oh; p++)
                for (int q = 0; q < ow; q++) {
                    double s = 0, b = 0;

                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int t = 0; t < S; t++) {
                                int i = p + r - PAD, j = q + t - PAD;
                                double v;

                                if (i < 0 || i >= H || j < 0 || j >= W)
                                    continue;
                                /* cuDNN's convolution is a cross-correlation
                                 * (CUDNN_CROSS_CORRELATION below). */
                                v = (double)x[((n * C + c) * H + i) * W + j] *
                                    w[((k * C + c) * R + r) * S + t];
                                s += v;
                                b += fabs(v);
                            }
                    ref[((n * K + k) * oh + p) * ow + q] = s;
                    bound[((n * K + k) * oh + p) * ow + q] = b;
                }
    e = cudaMalloc(&dx, xn * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc(&dw, wn * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMalloc(&dy, yn * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpy(dx, x, xn * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dw, w, wn * sizeof(float), cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        CHECK("cudnn_conv_fwd", 0, "CUDA setup: %s", cudaGetErrorString(e));
        return;
    }
#define DNN(call)                                                                  \
    do {                                                                           \
        st = (call);                                                               \
        if (st != CUDNN_STATUS_SUCCESS) {                                          \
            CHECK("cudnn_conv_fwd", 0, "%s: %s (%d)", #call, cudnnGetErrorString(st), \
                  (int)st);                                                        \
            return;                                                                \
        }                                                                          \
    } while (0)
    DNN(cudnnCreate(&h));
    DNN(cudnnCreateTensorDescriptor(&xd));
    DNN(cudnnCreateTensorDescriptor(&yd));
    DNN(cudnnCreateFilterDescriptor(&wd));
    DNN(cudnnCreateConvolutionDescriptor(&cd));
    DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
    DNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, S));
    DNN(cudnnSetConvolution2dDescriptor(cd, PAD, PAD, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT));
    DNN(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n2, &c2, &h2, &w2));
    if (n2 != N || c2 != K || h2 != oh || w2 != ow) {
        CHECK("cudnn_conv_fwd", 0, "output %dx%dx%dx%d, expected %dx%dx%dx%d", n2, c2, h2, w2, N,
              K, oh, ow);
        return;
    }
    DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, oh, ow));
    DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &nperf, perf));
    for (int i = 0; i < nperf; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS) {
            algo = perf[i].algo;
            break;
        }
    DNN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &wsbytes));
    printf("cudnn %zu: %d algorithms offered, algorithm %d, workspace %zu bytes\n",
           cudnnGetVersion(), nperf, (int)algo, wsbytes);
    if (wsbytes > 0 && (e = cudaMalloc(&ws, wsbytes)) != cudaSuccess) {
        CHECK("cudnn_conv_fwd", 0, "workspace of %zu bytes: %s", wsbytes, cudaGetErrorString(e));
        return;
    }
    DNN(cudnnConvolutionForward(h, &one, xd, dx, wd, dw, cd, algo, ws, wsbytes, &zero, yd, dy));
#undef DNN
    e = cudaMemcpy(y, dy, yn * sizeof(float), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        CHECK("cudnn_conv_fwd", 0, "copy back: %s", cudaGetErrorString(e));
        return;
    }
    /* The default math type lets cuDNN use TF32 on Ampere and later: 10
     * bits of mantissa per factor, so each output is good to about 1e-3
     * of the sum of its terms' magnitudes. */
    for (size_t i = 0; i < yn; i++) {
        double d = fabs((double)y[i] - ref[i]);

        if (!(d <= 2e-3 * bound[i] + 1e-6))
            bad++;
        if (!(d <= maxerr))
            maxerr = d;
    }
    CHECK("cudnn_conv_fwd", bad == 0, "%zu of %zu outputs off, max error %g against the CPU", bad,
          yn, maxerr);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
    cudnnDestroy(h);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    cudaFree(ws);
    free(x);
    free(w);
    free(y);
    free(ref);
    free(bound);
}

int main(void)
{
    check_conv();
    return failed;
}
