/*
 * First-GEMM latency of cuBLAS in a new process: how long from the
 * process's start (the kernel's record of it, so the loader's work on
 * cuBLAS counts) and from cublasCreate to the first SGEMM whose result is
 * back on the host, checked against the CPU.  Run twice in a row in a
 * fresh guest: the first run is cold, the second finds what the host
 * kept.
 *
 *   first_gemm LABEL      prints "first_gemm LABEL: ..." and
 *                         "PASS first_gemm_LABEL" or "FAIL first_gemm_LABEL ..."
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_BOOTTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The process's start on the CLOCK_BOOTTIME scale: /proc/self/stat
 * field 22, in clock ticks since boot (-1 if unreadable). */
static double process_start(void)
{
    char buf[1024], *p;
    unsigned long long ticks;
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n;
    int field;

    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name (field 2) may hold spaces: count from its ')'. */
    p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    for (field = 2; field < 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL || sscanf(p + 1, "%llu", &ticks) != 1)
        return -1;
    return (double)ticks / sysconf(_SC_CLK_TCK);
}

int main(int argc, char **argv)
{
    const char *label = argc > 1 ? argv[1] : "run";
    const int n = 128;
    size_t bytes = (size_t)n * n * sizeof(float);
    double t_main = now(), t_start = process_start(), t_create, t_created, t_done, maxerr = 0;
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    float *ref = (float *)malloc(bytes), *da = NULL, *db = NULL, *dc = NULL;
    const float one = 1.0f, zero = 0.0f;
    char name[64];
    cublasHandle_t h = NULL;
    cublasStatus_t st;
    cudaError_t e;

    snprintf(name, sizeof(name), "first_gemm_%s", label);
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    }
    t_create = now();
    st = cublasCreate(&h);
    t_created = now();
    if (st != CUBLAS_STATUS_SUCCESS) {
        printf("FAIL %s cublasCreate: %s (%d)\n", name, cublasGetStatusName(st), (int)st);
        return 1;
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
        printf("FAIL %s CUDA setup: %s\n", name, cudaGetErrorString(e));
        return 1;
    }
    st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
    if (st == CUBLAS_STATUS_SUCCESS)
        e = cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost);
    t_done = now();
    if (st != CUBLAS_STATUS_SUCCESS || e != cudaSuccess) {
        printf("FAIL %s cublasSgemm: %d, copy back: %s\n", name, (int)st, cudaGetErrorString(e));
        return 1;
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++) {
            double s = 0, d;

            for (int k = 0; k < n; k++)
                s += (double)a[i + k * n] * b[k + j * n];
            d = fabs(c[i + j * n] - s);
            if (!(d <= maxerr))
                maxerr = d;
        }
    if (t_start >= 0)
        printf("first_gemm %s: process start to first SGEMM %.3f s (to main %.3f s), "
               "cublasCreate %.3f s, cublasCreate to SGEMM done %.3f s\n",
               label, t_done - t_start, t_main - t_start, t_created - t_create,
               t_done - t_create);
    else
        printf("first_gemm %s: process start unknown; main to first SGEMM %.3f s, "
               "cublasCreate %.3f s, cublasCreate to SGEMM done %.3f s\n",
               label, t_done - t_main, t_created - t_create, t_done - t_create);
    if (maxerr < 1e-3) {
        printf("PASS %s\n", name);
    } else {
        printf("FAIL %s max error %g against the CPU\n", name, maxerr);
        return 1;
    }
    cublasDestroy(h);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    return 0;
}
