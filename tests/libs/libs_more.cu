/*
 * More of NVIDIA's libraries on the guest's libcuda.so.1, each against the
 * CPU: cuRAND's host API (device generators against cuRAND's host
 * generators of the same kind and seed, which give the same numbers:
 * XORWOW uniforms, and Philox normals whose mean and standard deviation
 * are checked too) and cuSPARSE (a CSR matrix times a vector).  A separate program from
 * libs_check, so that an image without these libraries still runs that
 * one.  Prints "PASS <name>" or "FAIL <name> <why>" per check; a FAIL
 * that reached the comparison ends with "against the CPU".
 */
#include <cuda_runtime.h>
#include <curand.h>
#include <cusparse.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "libs_test.h"

static void check_curand(void)
{
    const size_t n = 4096;
    float *d = NULL, *h = (float *)malloc(n * sizeof(float)), *ref = (float *)malloc(n * sizeof(float));
    curandGenerator_t g = NULL, hg = NULL;
    curandStatus_t st;
    size_t diff = 0;

    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) {
        CHECK("curand_uniform", 0, "cudaMalloc failed");
        return;
    }
    st = curandCreateGenerator(&g, CURAND_RNG_PSEUDO_XORWOW);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandSetPseudoRandomGeneratorSeed(g, 1234);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandGenerateUniform(g, d, n);
    if (st != CURAND_STATUS_SUCCESS) {
        CHECK("curand_uniform", 0, "device generator: status %d", (int)st);
        return;
    }
    if (cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        CHECK("curand_uniform", 0, "copy back failed");
        return;
    }
    st = curandCreateGeneratorHost(&hg, CURAND_RNG_PSEUDO_XORWOW);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandSetPseudoRandomGeneratorSeed(hg, 1234);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandGenerateUniform(hg, ref, n);
    if (st != CURAND_STATUS_SUCCESS) {
        CHECK("curand_uniform", 0, "host generator: status %d", (int)st);
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (h[i] != ref[i] || !(h[i] > 0.0f && h[i] <= 1.0f))
            diff++;
    CHECK("curand_uniform", diff == 0, "%zu of %zu numbers differ from the host generator's, "
          "against the CPU", diff, n);
    curandDestroyGenerator(g);
    curandDestroyGenerator(hg);
    cudaFree(d);
    free(h);
    free(ref);
}

/*
 * Philox normals (mean 1.5, standard deviation 2): the device's against
 * the host generator's, to a float's rounding (both are Box-Muller on the
 * same bits; the device's logarithm and sine may differ in the last
 * bits), and the sample's mean and deviation within 5 standard errors.
 */
static void check_curand_normal(void)
{
    const size_t n = 1 << 18;
    const float mean = 1.5f, sd = 2.0f;
    float *d = NULL, *h = (float *)malloc(n * sizeof(float)), *ref = (float *)malloc(n * sizeof(float));
    curandGenerator_t g = NULL, hg = NULL;
    curandStatus_t st;
    size_t diff = 0;
    double s = 0, s2 = 0, m, dev;

    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) {
        CHECK("curand_normal", 0, "cudaMalloc failed");
        return;
    }
    st = curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandSetPseudoRandomGeneratorSeed(g, 42);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandGenerateNormal(g, d, n, mean, sd);
    if (st != CURAND_STATUS_SUCCESS) {
        CHECK("curand_normal", 0, "device generator: status %d", (int)st);
        return;
    }
    if (cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        CHECK("curand_normal", 0, "copy back failed");
        return;
    }
    st = curandCreateGeneratorHost(&hg, CURAND_RNG_PSEUDO_PHILOX4_32_10);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandSetPseudoRandomGeneratorSeed(hg, 42);
    if (st == CURAND_STATUS_SUCCESS)
        st = curandGenerateNormal(hg, ref, n, mean, sd);
    if (st != CURAND_STATUS_SUCCESS) {
        CHECK("curand_normal", 0, "host generator: status %d", (int)st);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(fabs((double)h[i] - ref[i]) <= 1e-5 * (1 + fabs((double)ref[i]))))
            diff++;
        s += h[i];
        s2 += (double)h[i] * h[i];
    }
    m = s / n;
    dev = sqrt(s2 / n - m * m);
    CHECK("curand_normal",
          diff == 0 && fabs(m - mean) < 5 * sd / sqrt((double)n) &&
              fabs(dev - sd) < 5 * sd / sqrt(2.0 * n),
          "%zu of %zu numbers differ from the host generator's; mean %g (%g), standard "
          "deviation %g (%g), against the CPU", diff, n, m, (double)mean, dev, (double)sd);
    curandDestroyGenerator(g);
    curandDestroyGenerator(hg);
    cudaFree(d);
    free(h);
    free(ref);
}

/* y = A x, A an n x n tridiagonal CSR matrix. */
static void check_cusparse(void)
{
    const int n = 1000;
    int nnz = 3 * n - 2, k = 0;
    int *rp = (int *)malloc((n + 1) * sizeof(int)), *ci = (int *)malloc(nnz * sizeof(int));
    float *v = (float *)malloc(nnz * sizeof(float)), *x = (float *)malloc(n * sizeof(float));
    float *y = (float *)malloc(n * sizeof(float)), *ref = (float *)malloc(n * sizeof(float));
    int *drp = NULL, *dci = NULL;
    float *dv = NULL, *dx = NULL, *dy = NULL;
    void *ws = NULL;
    size_t wsbytes = 0;
    const float one = 1.0f, zero = 0.0f;
    cusparseHandle_t h = NULL;
    cusparseSpMatDescr_t a = NULL;
    cusparseDnVecDescr_t vx = NULL, vy = NULL;
    cusparseStatus_t st;
    double maxerr = 0;

    for (int i = 0; i < n; i++) {
        rp[i] = k;
        for (int j = i - 1; j <= i + 1; j++) {
            if (j < 0 || j >= n)
                continue;
            ci[k] = j;
            v[k++] = (float)((i * 3 + j) % 7) - 3.0f;
        }
        x[i] = (float)(i % 5) - 2.0f;
    }
    rp[n] = k;
    for (int i = 0; i < n; i++) {
        double s = 0;

        for (int p = rp[i]; p < rp[i + 1]; p++)
            s += (double)v[p] * x[ci[p]];
        ref[i] = (float)s;
    }
    if (cudaMalloc(&drp, (n + 1) * sizeof(int)) != cudaSuccess ||
        cudaMalloc(&dci, nnz * sizeof(int)) != cudaSuccess ||
        cudaMalloc(&dv, nnz * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&dx, n * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&dy, n * sizeof(float)) != cudaSuccess ||
        cudaMemcpy(drp, rp, (n + 1) * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dci, ci, nnz * sizeof(int), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dv, v, nnz * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(dx, x, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        CHECK("cusparse_spmv", 0, "CUDA setup failed");
        return;
    }
#define SP(call)                                                                   \
    do {                                                                           \
        st = (call);                                                               \
        if (st != CUSPARSE_STATUS_SUCCESS) {                                       \
            CHECK("cusparse_spmv", 0, "%s: %s (%d)", #call, cusparseGetErrorName(st), \
                  (int)st);                                                        \
            return;                                                                \
        }                                                                          \
    } while (0)
    SP(cusparseCreate(&h));
    SP(cusparseCreateCsr(&a, n, n, nnz, drp, dci, dv, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                         CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
    SP(cusparseCreateDnVec(&vx, n, dx, CUDA_R_32F));
    SP(cusparseCreateDnVec(&vy, n, dy, CUDA_R_32F));
    SP(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, vx, &zero, vy,
                               CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &wsbytes));
    if (wsbytes > 0 && cudaMalloc(&ws, wsbytes) != cudaSuccess) {
        CHECK("cusparse_spmv", 0, "workspace of %zu bytes", wsbytes);
        return;
    }
    SP(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, a, vx, &zero, vy, CUDA_R_32F,
                    CUSPARSE_SPMV_ALG_DEFAULT, ws));
#undef SP
    if (cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        CHECK("cusparse_spmv", 0, "copy back failed");
        return;
    }
    for (int i = 0; i < n; i++)
        if (fabs((double)y[i] - ref[i]) > maxerr)
            maxerr = fabs((double)y[i] - ref[i]);
    CHECK("cusparse_spmv", maxerr < 1e-4, "max error %g against the CPU", maxerr);
    cusparseDestroySpMat(a);
    cusparseDestroyDnVec(vx);
    cusparseDestroyDnVec(vy);
    cusparseDestroy(h);
    cudaFree(drp);
    cudaFree(dci);
    cudaFree(dv);
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(ws);
    free(rp);
    free(ci);
    free(v);
    free(x);
    free(y);
    free(ref);
}

int main(void)
{
    check_curand();
    check_curand_normal();
    check_cusparse();
    return failed;
}
