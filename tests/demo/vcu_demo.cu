/*
 * The main job's demonstration (scripts/run.sh): what a CUDA program sees
 * of its devices, then a real workload on device 0 with its figures, each
 * result checked against a CPU reference.
 *
 * One nvcc binary (--cudart=shared) runs both in the guest, on virtio-cuda's
 * libcudart.so.13, and natively on the host, on NVIDIA's, so the figures
 * compare like with like.
 *
 *   vcu_demo [--small | --full]
 *
 * Sizes: full (64 MiB copies, SAXPY over 16M floats, SGEMM 2048x2048) on a
 * GPU; small (16 MiB, 1M, 256x256) with --small or when device 0 is the CPU
 * stand-in for libcuda, whose kernels run on the host's CPU.
 *
 * Output: the device list, then one row per workload:
 *   "  KEY  LABEL...  VALUE UNIT CHECK"   (CHECK: ok or WRONG)
 * with KEY one of h2d d2h saxpy sgemm launch; scripts/run.sh reads these
 * rows.  Ends with "PASS vcu_demo", or "FAIL vcu_demo: ..." and exit 1.
 */
#define TEST_NAME "vcu_demo"
#include <math.h>
#include <string.h>
#include <time.h>
#include "../cuda/vcu_test.h"

#define TILE 16
#define REPS_MAX 16

/* y = a * x + y; n == 0 makes it an empty kernel (the launch figure). */
__global__ void demo_saxpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        y[i] = a * x[i] + y[i];
}

/* C = A * B, n x n row-major, 16x16 tiles in __shared__. */
__global__ void demo_sgemm(const float *a, const float *b, float *c, int n)
{
    __shared__ float ta[TILE][TILE];
    __shared__ float tb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;

    for (int t = 0; t < (n + TILE - 1) / TILE; t++) {
        int ac = t * TILE + threadIdx.x;
        int br = t * TILE + threadIdx.y;

        ta[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? a[row * n + ac] : 0.0f;
        tb[threadIdx.y][threadIdx.x] = (br < n && col < n) ? b[br * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n)
        c[row * n + col] = acc;
}

typedef struct {
    size_t copy_bytes;      /* each pinned copy */
    int saxpy_n;            /* floats per vector */
    int sgemm_n;
    int reps;               /* timed repetitions (median) */
    int launch_reps;
} demo_sizes_t;

static const demo_sizes_t full_sizes = { 64 << 20, 16 << 20, 2048, 5, 200 };
static const demo_sizes_t small_sizes = { 16 << 20, 1 << 20, 256, 3, 20 };

static cudaEvent_t ev_start, ev_stop;
static int wrong;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;

    return (x > y) - (x < y);
}

/* Never 0: the figures divide by it (events resolve about 0.5 us). */
static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_float);
    return v[n / 2] > 1e-4f ? v[n / 2] : 1e-4f;
}

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void row(const char *key, const char *label, double value, const char *unit,
                int ok)
{
    printf("  %-7s %-40s %10.2f %-8s %s\n", key, label, value, unit, ok ? "ok" : "WRONG");
    fflush(stdout);
    if (!ok)
        wrong++;
}

static void show_devices(int count)
{
    for (int i = 0; i < count; i++) {
        cudaDeviceProp p;
        char bus[32];
        const unsigned char *u;

        CK(cudaGetDeviceProperties(&p, i));
        CK(cudaDeviceGetPCIBusId(bus, sizeof(bus), i));
        u = (const unsigned char *)p.uuid.bytes;
        printf("  device %d: %s\n", i, p.name);
        printf("    memory        %.2f GiB\n", p.totalGlobalMem / 1073741824.0);
        printf("    SMs           %d, compute capability %d.%d\n", p.multiProcessorCount,
               p.major, p.minor);
        printf("    PCI bus id    %s\n", bus);
        printf("    UUID          GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
               "%02x%02x%02x%02x%02x%02x\n", u[0], u[1], u[2], u[3], u[4], u[5], u[6],
               u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    }
}

/* Copies per timed batch: queued back to back on one stream, as
 * bandwidthTest times them, so the figure is the copy engine's rate and
 * not one request's issue latency (a synchronous copy of its own pays the
 * guest's issue time, which under TCG is most of a 64 MiB copy's). */
#define COPY_BATCH 4

/* Pinned copies both ways, then the round trip compared byte for byte. */
static void copies(const demo_sizes_t *s)
{
    unsigned char *src, *dst, *d;
    float th[REPS_MAX], td[REPS_MAX], ms;
    char label[64];
    int ok;

    CK(cudaMallocHost((void **)&src, s->copy_bytes));
    CK(cudaMallocHost((void **)&dst, s->copy_bytes));
    CK(cudaMalloc((void **)&d, s->copy_bytes));
    for (size_t i = 0; i < s->copy_bytes; i++)
        src[i] = (unsigned char)(i * 131 + (i >> 16));
    memset(dst, 0, s->copy_bytes);
    CK(cudaMemcpy(d, src, s->copy_bytes, cudaMemcpyHostToDevice));      /* warm-up */
    for (int r = 0; r < s->reps; r++) {
        CK(cudaEventRecord(ev_start, 0));
        for (int b = 0; b < COPY_BATCH; b++)
            CK(cudaMemcpyAsync(d, src, s->copy_bytes, cudaMemcpyHostToDevice, 0));
        CK(cudaEventRecord(ev_stop, 0));
        CK(cudaEventSynchronize(ev_stop));
        CK(cudaEventElapsedTime(&th[r], ev_start, ev_stop));
        th[r] /= COPY_BATCH;
        CK(cudaEventRecord(ev_start, 0));
        for (int b = 0; b < COPY_BATCH; b++)
            CK(cudaMemcpyAsync(dst, d, s->copy_bytes, cudaMemcpyDeviceToHost, 0));
        CK(cudaEventRecord(ev_stop, 0));
        CK(cudaEventSynchronize(ev_stop));
        CK(cudaEventElapsedTime(&td[r], ev_start, ev_stop));
        td[r] /= COPY_BATCH;
    }
    ok = memcmp(src, dst, s->copy_bytes) == 0;
    snprintf(label, sizeof(label), "H2D copy, %zu MiB pinned", s->copy_bytes >> 20);
    ms = median(th, s->reps);
    row("h2d", label, s->copy_bytes / (ms * 1e6), "GB/s", ok);
    snprintf(label, sizeof(label), "D2H copy, %zu MiB pinned", s->copy_bytes >> 20);
    ms = median(td, s->reps);
    row("d2h", label, s->copy_bytes / (ms * 1e6), "GB/s", ok);
    CK(cudaFree(d));
    CK(cudaFreeHost(src));
    CK(cudaFreeHost(dst));
}

/* SAXPY timed in place, then once more from the initial y and checked. */
static void saxpy(const demo_sizes_t *s)
{
    int n = s->saxpy_n, block = 256, grid = (n + block - 1) / block;
    int stride = n > (1 << 20) ? 16 : 1, ok = 1;
    size_t bytes = (size_t)n * sizeof(float);
    const float a = 1.5f;
    float *hx, *hy, *hr, *dx, *dy, t[REPS_MAX], ms;
    char label[64];

    CK(cudaMallocHost((void **)&hx, bytes));
    CK(cudaMallocHost((void **)&hy, bytes));
    hr = (float *)malloc(bytes);
    EXPECT(hr != NULL, "out of host memory");
    CK(cudaMalloc((void **)&dx, bytes));
    CK(cudaMalloc((void **)&dy, bytes));
    for (int i = 0; i < n; i++) {
        hx[i] = (float)(i % 1000) * 0.001f;
        hy[i] = (float)(i % 7) - 3.0f;
    }
    CK(cudaMemcpy(dx, hx, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy, hy, bytes, cudaMemcpyHostToDevice));
    demo_saxpy<<<grid, block>>>(n, a, dx, dy);                          /* warm-up */
    CK_LAUNCH();
    for (int r = 0; r < s->reps; r++) {
        CK(cudaEventRecord(ev_start, 0));
        demo_saxpy<<<grid, block>>>(n, a, dx, dy);
        CK(cudaEventRecord(ev_stop, 0));
        CK(cudaEventSynchronize(ev_stop));
        CK(cudaEventElapsedTime(&t[r], ev_start, ev_stop));
    }
    CK(cudaGetLastError());
    CK(cudaMemcpy(dy, hy, bytes, cudaMemcpyHostToDevice));
    demo_saxpy<<<grid, block>>>(n, a, dx, dy);
    CK_LAUNCH();
    CK(cudaMemcpy(hr, dy, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i += stride) {
        float ref = fmaf(a, hx[i], hy[i]);

        if (fabsf(hr[i] - ref) > 1e-6f * (1.0f + fabsf(ref))) {
            printf("  saxpy: y[%d] = %g, CPU reference %g\n", i, hr[i], ref);
            ok = 0;
            break;
        }
    }
    ms = median(t, s->reps);
    snprintf(label, sizeof(label), "SAXPY y=a*x+y, %dM floats", n >> 20);
    /* Bytes moved: read x and y, write y. */
    row("saxpy", label, 3.0 * bytes / (ms * 1e6), "GB/s", ok);
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFreeHost(hx));
    CK(cudaFreeHost(hy));
    free(hr);
}

/* SGEMM timed, the last result checked on 8 rows spread over C. */
static void sgemm(const demo_sizes_t *s)
{
    int n = s->sgemm_n, ok = 1;
    size_t bytes = (size_t)n * n * sizeof(float);
    float *ha, *hb, *hc, *da, *db, *dc, t[REPS_MAX], ms;
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    char label[64];

    ha = (float *)malloc(bytes);
    hb = (float *)malloc(bytes);
    hc = (float *)malloc(bytes);
    EXPECT(ha && hb && hc, "out of host memory");
    for (int i = 0; i < n * n; i++) {
        ha[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        hb[i] = (float)((i * 5) % 11) / 11.0f - 0.25f;
    }
    CK(cudaMalloc((void **)&da, bytes));
    CK(cudaMalloc((void **)&db, bytes));
    CK(cudaMalloc((void **)&dc, bytes));
    CK(cudaMemcpy(da, ha, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb, bytes, cudaMemcpyHostToDevice));
    demo_sgemm<<<grid, block>>>(da, db, dc, n);                         /* warm-up */
    CK_LAUNCH();
    for (int r = 0; r < s->reps; r++) {
        CK(cudaEventRecord(ev_start, 0));
        demo_sgemm<<<grid, block>>>(da, db, dc, n);
        CK(cudaEventRecord(ev_stop, 0));
        CK(cudaEventSynchronize(ev_stop));
        CK(cudaEventElapsedTime(&t[r], ev_start, ev_stop));
    }
    CK(cudaGetLastError());
    CK(cudaMemcpy(hc, dc, bytes, cudaMemcpyDeviceToHost));
    for (int k = 0; k < 8 && ok; k++) {
        int r = (int)((long)k * (n - 1) / 7);

        for (int c = 0; c < n; c++) {
            double ref = 0.0;

            for (int j = 0; j < n; j++)
                ref += (double)ha[r * n + j] * hb[j * n + c];
            if (fabs(hc[r * n + c] - ref) > 1e-3 * (1.0 + fabs(ref))) {
                printf("  sgemm: C[%d][%d] = %g, CPU reference %g\n", r, c, hc[r * n + c],
                       ref);
                ok = 0;
                break;
            }
        }
    }
    ms = median(t, s->reps);
    snprintf(label, sizeof(label), "SGEMM %dx%d fp32, 16x16 tiles", n, n);
    row("sgemm", label, 2.0 * n * n * (double)n / (ms * 1e6), "GFLOP/s", ok);
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    free(ha);
    free(hb);
    free(hc);
}

/* An empty kernel launched and waited for: the round trip of one call. */
static void launch(const demo_sizes_t *s)
{
    float t[256];
    int reps = s->launch_reps < 256 ? s->launch_reps : 256;

    demo_saxpy<<<1, 32>>>(0, 0.0f, NULL, NULL);
    CK_LAUNCH();
    for (int r = 0; r < reps; r++) {
        double t0 = now_us();

        demo_saxpy<<<1, 32>>>(0, 0.0f, NULL, NULL);
        CK(cudaDeviceSynchronize());
        t[r] = (float)(now_us() - t0);
    }
    CK(cudaGetLastError());
    row("launch", "empty kernel launch + synchronize", median(t, reps), "us", 1);
}

int main(int argc, char **argv)
{
    int count = 0, drv = 0, rt = 0, small = -1;
    const demo_sizes_t *s;
    cudaDeviceProp p;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0)
            small = 1;
        else if (strcmp(argv[i], "--full") == 0)
            small = 0;
        else
            vcu_test_fail("usage: vcu_demo [--small | --full]");
    }
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    CK(cudaGetDeviceCount(&count));
    printf("CUDA driver %d.%d, runtime %d.%d; %d device%s\n", drv / 1000, drv % 1000 / 10,
           rt / 1000, rt % 1000 / 10, count, count == 1 ? "" : "s");
    show_devices(count);

    CK(cudaGetDeviceProperties(&p, 0));
    if (small < 0)
        small = strstr(p.name, "stand-in") != NULL;
    s = small ? &small_sizes : &full_sizes;
    printf("workloads on device 0 (%s sizes%s), median of %d:\n", small ? "small" : "full",
           small && strstr(p.name, "stand-in") ? ": its kernels run on the host's CPU" : "",
           s->reps);
    CK(cudaEventCreate(&ev_start));
    CK(cudaEventCreate(&ev_stop));
    copies(s);
    saxpy(s);
    sgemm(s);
    launch(s);
    CK(cudaEventDestroy(ev_start));
    CK(cudaEventDestroy(ev_stop));
    EXPECT(wrong == 0, "workload results that differ from the CPU reference: %d", wrong);
    vcu_test_pass();
    return 0;
}
