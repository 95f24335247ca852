/*
 * NVIDIA's libraries in a guest, on the guest's libcuda.so.1 (cuBLAS
 * SGEMM, cuBLASLt half-precision matmul): each check
 * computes something with a library and compares it with the CPU.  Built
 * the default nvcc way (static runtime), linked with the toolkit's
 * libraries; at run time the guest loads the GPU host's copies of them
 * (tests/gpu/libs-run.sh puts them in the guest image).
 *
 * Prints "PASS <name>" or "FAIL <name> <why>" per check, the run.sh way;
 * exits 1 if any failed.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libs_test.h"

/* C = A * B, column-major, n x n: cublasSgemm against the CPU. */
static void check_sgemm(void)
{
    const int n = 256;
    size_t bytes = (size_t)n * n * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    float *ref = (float *)malloc(bytes), *da = NULL, *db = NULL, *dc = NULL;
    const float one = 1.0f, zero = 0.0f;
    cublasHandle_t h = NULL;
    cublasStatus_t st;
    cudaError_t e;
    double maxerr = 0;

    for (int i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double s = 0;

            for (int k = 0; k < n; k++)
                s += (double)a[i + k * n] * b[k + j * n];
            ref[i + j * n] = (float)s;
        }
    e = cudaMalloc(&da, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&db, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&dc, bytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        CHECK("cublas_sgemm", 0, "CUDA setup: %s", cudaGetErrorString(e));
        return;
    }
    st = cublasCreate(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        CHECK("cublas_sgemm", 0, "cublasCreate: %s (%d)", cublasGetStatusName(st), (int)st);
        return;
    }
    st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
    if (st == CUBLAS_STATUS_SUCCESS)
        e = cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost);
    if (st != CUBLAS_STATUS_SUCCESS || e != cudaSuccess) {
        CHECK("cublas_sgemm", 0, "cublasSgemm: %d, copy back: %s", (int)st, cudaGetErrorString(e));
        return;
    }
    for (int i = 0; i < n * n; i++) {
        double d = fabs((double)c[i] - ref[i]);

        if (d > maxerr)
            maxerr = d;
    }
    CHECK("cublas_sgemm", maxerr < 1e-3, "max error %g against the CPU", maxerr);
    cublasDestroy(h);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    free(a);
    free(b);
    free(c);
    free(ref);
}

/*
 * D = A * B through cuBLASLt's heuristic choice, n x n column-major, A and
 * B in half precision, D in single (on Hopper such matmuls go to kernels
 * that use clusters and tensor maps): against the CPU on the same halves.
 */
static void check_lt_hgemm(void)
{
    const int n = 512;
    size_t hbytes = (size_t)n * n * sizeof(__half), fbytes = (size_t)n * n * sizeof(float);
    __half *a = (__half *)malloc(hbytes), *b = (__half *)malloc(hbytes);
    float *d = (float *)malloc(fbytes), *ref = (float *)malloc(fbytes);
    void *da = NULL, *db = NULL, *dd = NULL, *ws = NULL;
    const size_t wsbytes = 32u << 20;
    const float one = 1.0f, zero = 0.0f;
    cublasLtHandle_t lt = NULL;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    cublasStatus_t st;
    cudaError_t e;
    int found = 0;
    double maxerr = 0;

    for (int i = 0; i < n * n; i++) {
        a[i] = __float2half((float)((i * 7) % 13) / 13.0f - 0.5f);
        b[i] = __float2half((float)((i * 5) % 11) / 11.0f - 0.5f);
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double s = 0;

            for (int k = 0; k < n; k++)
                s += (double)__half2float(a[i + k * n]) * __half2float(b[k + j * n]);
            ref[i + j * n] = (float)s;
        }
    e = cudaMalloc(&da, hbytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&db, hbytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&dd, fbytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&ws, wsbytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(da, a, hbytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(db, b, hbytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        CHECK("cublaslt_hgemm", 0, "CUDA setup: %s", cudaGetErrorString(e));
        return;
    }
#define LT(call)                                                                   \
    do {                                                                           \
        st = (call);                                                               \
        if (st != CUBLAS_STATUS_SUCCESS) {                                         \
            CHECK("cublaslt_hgemm", 0, "%s: %s (%d)", #call, cublasGetStatusName(st), \
                  (int)st);                                                        \
            return;                                                                \
        }                                                                          \
    } while (0)
    LT(cublasLtCreate(&lt));
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, n, n, n));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, n, n, n));
    LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, n, n, n));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &wsbytes, sizeof(wsbytes)));
    LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found < 1) {
        CHECK("cublaslt_hgemm", 0, "no algorithm from the heuristic");
        return;
    }
    LT(cublasLtMatmul(lt, op, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &heur.algo, ws,
                      wsbytes, 0));
#undef LT
    e = cudaMemcpy(d, dd, fbytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        CHECK("cublaslt_hgemm", 0, "copy back: %s", cudaGetErrorString(e));
        return;
    }
    for (int i = 0; i < n * n; i++) {
        double diff = fabs((double)d[i] - ref[i]);

        if (diff > maxerr)
            maxerr = diff;
    }
    CHECK("cublaslt_hgemm", maxerr < 1e-2, "max error %g against the CPU", maxerr);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    cudaFree(ws);
    free(a);
    free(b);
    free(d);
    free(ref);
}

int main(void)
{
    check_sgemm();
    check_lt_hgemm();
    return failed;
}
