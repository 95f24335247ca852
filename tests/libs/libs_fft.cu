/*
 * cuFFT on the guest's libcuda.so.1, against the CPU: a 1D complex
 * transform of 2520 points (2^3 3^2 5 7: several radices) forward, checked
 * against a direct DFT in double precision, and back (the inverse of the
 * forward, divided by n, is the input); a 2D real-to-complex transform of
 * 48 x 40 against a direct 2D DFT.  A program of its own, so that an
 * image without cuFFT still runs the others.  Prints "PASS <name>" or
 * "FAIL <name> <why>" per check; a FAIL that reached the comparison ends
 * with "against the CPU".
 */
#include <cuda_runtime.h>
#include <cufft.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "libs_test.h"

/* Largest |a - b| over n complex numbers, relative to the largest |b|. */
static double rel_err(const cufftComplex *a, const double *bre, const double *bim, size_t n)
{
    double err = 0, mag = 0;

    for (size_t i = 0; i < n; i++) {
        double dr = a[i].x - bre[i], di = a[i].y - bim[i];
        double e = sqrt(dr * dr + di * di), m = sqrt(bre[i] * bre[i] + bim[i] * bim[i]);

        if (!(e <= err))    /* NaN counts as an error */
            err = e;
        if (m > mag)
            mag = m;
    }
    return mag > 0 ? err / mag : err;
}

static void check_c2c(void)
{
    const int n = 2520;
    size_t bytes = (size_t)n * sizeof(cufftComplex);
    cufftComplex *x = (cufftComplex *)malloc(bytes), *y = (cufftComplex *)malloc(bytes);
    cufftComplex *z = (cufftComplex *)malloc(bytes), *dx = NULL;
    double *rre = (double *)malloc(n * sizeof(double)), *rim = (double *)malloc(n * sizeof(double));
    double *cs = (double *)malloc(n * sizeof(double)), *sn = (double *)malloc(n * sizeof(double));
    double *xre = (double *)malloc(n * sizeof(double)), *xim = (double *)malloc(n * sizeof(double));
    cufftHandle plan = 0;
    cufftResult r;
    cudaError_t e;
    double fwd, inv;

    for (int i = 0; i < n; i++) {
        x[i].x = input(i, 1);
        x[i].y = input(i, 2);
        xre[i] = x[i].x;
        xim[i] = x[i].y;
        cs[i] = cos(2 * M_PI * i / n);
        sn[i] = sin(2 * M_PI * i / n);
    }
    /* Forward: X[k] = sum x[j] e^(-2 pi i jk/n). */
    for (int k = 0; k < n; k++) {
        double sr = 0, si = 0;

        for (int j = 0; j < n; j++) {
            int t = (int)(((long)j * k) % n);

            sr += x[j].x * cs[t] + x[j].y * sn[t];
            si += x[j].y * cs[t] - x[j].x * sn[t];
        }
        rre[k] = sr;
        rim[k] = si;
    }
    e = cudaMalloc(&dx, bytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        CHECK("cufft_c2c", 0, "CUDA setup: %s", cudaGetErrorString(e));
        return;
    }
    r = cufftPlan1d(&plan, n, CUFFT_C2C, 1);
    if (r != CUFFT_SUCCESS) {
        CHECK("cufft_c2c", 0, "cufftPlan1d: %d", (int)r);
        return;
    }
    r = cufftExecC2C(plan, dx, dx, CUFFT_FORWARD);
    if (r == CUFFT_SUCCESS && (e = cudaMemcpy(y, dx, bytes, cudaMemcpyDeviceToHost)) == cudaSuccess)
        r = cufftExecC2C(plan, dx, dx, CUFFT_INVERSE);
    if (r == CUFFT_SUCCESS && e == cudaSuccess)
        e = cudaMemcpy(z, dx, bytes, cudaMemcpyDeviceToHost);
    if (r != CUFFT_SUCCESS || e != cudaSuccess) {
        CHECK("cufft_c2c", 0, "cufftExecC2C: %d, copy back: %s", (int)r, cudaGetErrorString(e));
        return;
    }
    fwd = rel_err(y, rre, rim, n);
    for (int i = 0; i < n; i++) {
        z[i].x /= n;
        z[i].y /= n;
    }
    inv = rel_err(z, xre, xim, n);
    /* Single precision over log2(2520) ~ 11 stages: a few 1e-7 each. */
    CHECK("cufft_c2c", fwd < 1e-5 && inv < 1e-5,
          "forward error %g, inverse error %g (relative to the largest value) against the CPU",
          fwd, inv);
    cufftDestroy(plan);
    cudaFree(dx);
    free(x);
    free(y);
    free(z);
    free(rre);
    free(rim);
    free(cs);
    free(sn);
    free(xre);
    free(xim);
}

/* nx rows of ny reals -> nx rows of ny/2+1 complex numbers. */
static void check_r2c_2d(void)
{
    const int nx = 48, ny = 40, nyc = ny / 2 + 1;
    size_t rbytes = (size_t)nx * ny * sizeof(cufftReal), cbytes = (size_t)nx * nyc * sizeof(cufftComplex);
    cufftReal *x = (cufftReal *)malloc(rbytes), *dx = NULL;
    cufftComplex *y = (cufftComplex *)malloc(cbytes), *dy = NULL;
    double *rre = (double *)malloc(nx * nyc * sizeof(double)), *rim = (double *)malloc(nx * nyc * sizeof(double));
    cufftHandle plan = 0;
    cufftResult r;
    cudaError_t e;
    double err;

    for (int i = 0; i < nx * ny; i++)
        x[i] = input(i, 3);
    for (int k1 = 0; k1 < nx; k1++)
        for (int k2 = 0; k2 < nyc; k2++) {
            double sr = 0, si = 0;

            for (int j1 = 0; j1 < nx; j1++)
                for (int j2 = 0; j2 < ny; j2++) {
                    double a = -2 * M_PI * ((double)j1 * k1 / nx + (double)j2 * k2 / ny);

                    sr += x[j1 * ny + j2] * cos(a);
                    si += x[j1 * ny + j2] * sin(a);
                }
            rre[k1 * nyc + k2] = sr;
            rim[k1 * nyc + k2] = si;
        }
    e = cudaMalloc(&dx, rbytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&dy, cbytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(dx, x, rbytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        CHECK("cufft_r2c_2d", 0, "CUDA setup: %s", cudaGetErrorString(e));
        return;
    }
    r = cufftPlan2d(&plan, nx, ny, CUFFT_R2C);
    if (r != CUFFT_SUCCESS) {
        CHECK("cufft_r2c_2d", 0, "cufftPlan2d: %d", (int)r);
        return;
    }
    r = cufftExecR2C(plan, dx, dy);
    if (r == CUFFT_SUCCESS)
        e = cudaMemcpy(y, dy, cbytes, cudaMemcpyDeviceToHost);
    if (r != CUFFT_SUCCESS || e != cudaSuccess) {
        CHECK("cufft_r2c_2d", 0, "cufftExecR2C: %d, copy back: %s", (int)r, cudaGetErrorString(e));
        return;
    }
    err = rel_err(y, rre, rim, (size_t)nx * nyc);
    CHECK("cufft_r2c_2d", err < 1e-5, "error %g (relative to the largest value) against the CPU",
          err);
    cufftDestroy(plan);
    cudaFree(dx);
    cudaFree(dy);
    free(x);
    free(y);
    free(rre);
    free(rim);
}

int main(void)
{
    check_c2c();
    check_r2c_2d();
    return failed;
}
