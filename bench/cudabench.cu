/*
 * cudabench: the CUDA runtime costs a guest program sees, measured the same
 * way natively (NVIDIA's libcudart.so.13) and in a virtio-cuda guest (ours).
 * Runtime API only; built with nvcc --cudart=shared, so the libcudart.so.13
 * found first on LD_LIBRARY_PATH is the one measured.
 *
 *   cudabench [--quick] [--sizes 4K,1M,64M] [--budget-seconds S]
 *
 * Prints CSV on stdout: a header "metric,size_bytes,value,unit", then one
 * row per measurement; lines starting with '#' are comments (what was
 * measured how, what was skipped).  Diagnostics go to stderr.
 *
 * Every figure is a median over repetitions timed with CLOCK_MONOTONIC
 * around synchronous calls, i.e. as the application sees it.  The number
 * of repetitions adapts to the size and to a time budget (default 60 s,
 * 20 s with --quick), since the guest runs under TCG emulation and is much
 * slower than the host: each measurement gets a share of what is left of
 * the budget, is timed once as a warm-up, and is then repeated as often as
 * its share allows (at least once, at most a cap that depends on size).
 */
#include <cuda_runtime.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KIB (1024ull)
#define MIB (1024ull * 1024)

#define CHECK(call)                                                               \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        if (e_ != cudaSuccess) {                                                  \
            fprintf(stderr, "cudabench: %s:%d: %s: %s (%d)\n", __FILE__, __LINE__, \
                    #call, cudaGetErrorString(e_), (int)e_);                      \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

__global__ void bench_empty(void)
{
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* Sorts v in place. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- budget --------------------------------------------------------------- */

typedef struct budget_s {
    double end;                     /* absolute deadline of this phase */
    int items_left;                 /* measurements still to do in it */
} budget_t;

static void budget_start(budget_t *b, double seconds, int items)
{
    b->end = now_s() + seconds;
    b->items_left = items > 0 ? items : 1;
}

/* The share of the phase's remaining time for the next measurement. */
static double budget_take(budget_t *b)
{
    double left = b->end - now_s();
    double share = left / (b->items_left > 0 ? b->items_left : 1);

    if (b->items_left > 1)
        b->items_left--;
    return share > 0 ? share : 0;
}

/* Repetitions that fit into share given one took t; in [1, cap]. */
static int reps_for(double share, double t, int cap)
{
    double r = t > 0 ? share / t : cap;

    if (r < 1)
        return 1;
    return r > cap ? cap : (int)r;
}

/* ---- options ---------------------------------------------------------------- */

#define MAX_SIZES 64

static const unsigned long long default_sizes[] = {
    4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB,
};
static const unsigned long long quick_sizes[] = {4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 64 * MIB};

static void usage(void)
{
    fprintf(stderr,
            "usage: cudabench [--quick] [--sizes LIST] [--budget-seconds S]\n"
            "  --sizes LIST        comma-separated sizes in bytes, K/M/G suffixes allowed\n"
            "                      [4K,16K,64K,256K,1M,4M,16M,64M,256M; --quick: 4K,64K,1M,16M,64M]\n"
            "  --budget-seconds S  time for the whole run [60; --quick: 20]\n"
            "  --quick             fewer sizes, a smaller budget, at most 20000 launches\n");
    exit(2);
}

static int parse_size(const char *s, unsigned long long *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    switch (*end) {
    case 'k': case 'K': v *= KIB; end++; break;
    case 'm': case 'M': v *= MIB; end++; break;
    case 'g': case 'G': v *= 1024 * MIB; end++; break;
    }
    if (*end == 'i' || *end == 'B')  /* "4KiB", "4KB" */
        end++;
    if (*end == 'B')
        end++;
    if (*end != '\0' || v == 0)
        return -1;
    *out = v;
    return 0;
}

static int parse_sizes(const char *list, unsigned long long *sizes)
{
    char buf[1024], *tok, *save = NULL;
    int n = 0;

    snprintf(buf, sizeof(buf), "%s", list);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n >= MAX_SIZES || parse_size(tok, &sizes[n]) != 0) {
            fprintf(stderr, "cudabench: bad size '%s'\n", tok);
            exit(2);
        }
        n++;
    }
    if (n == 0)
        usage();
    return n;
}

/* ---- bandwidth ---------------------------------------------------------------- */

/* Cap on repetitions: small copies are cheap and noisy, large ones neither. */
static int bw_cap(unsigned long long size)
{
    if (size <= 1 * MIB)
        return 100;
    if (size <= 16 * MIB)
        return 30;
    return 10;
}

/* Async copies per timed batch from pinned memory (bandwidthTest uses 100). */
#define PINNED_BATCH 32

static cudaStream_t bw_stream;

/*
 * One copy of size bytes; returns seconds.  Pageable memory: a synchronous
 * cudaMemcpy.  Pinned memory: as NVIDIA's bandwidthTest measures it, a
 * batch of cudaMemcpyAsync on one stream and one synchronize, the time
 * divided by the batch, so the copy engine's rate is what is measured and
 * the per-call cost overlaps with the copies (cudabench prints the
 * synchronous per-call cost separately: memcpy4_latency).
 */
static double copy_once(void *dev, void *host, unsigned long long size, int h2d, int pinned)
{
    double t0 = now_s();
    int i;

    if (!pinned) {
        if (h2d)
            CHECK(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice));
        else
            CHECK(cudaMemcpy(host, dev, size, cudaMemcpyDeviceToHost));
        return now_s() - t0;
    }
    for (i = 0; i < PINNED_BATCH; i++) {
        if (h2d)
            CHECK(cudaMemcpyAsync(dev, host, size, cudaMemcpyHostToDevice, bw_stream));
        else
            CHECK(cudaMemcpyAsync(host, dev, size, cudaMemcpyDeviceToHost, bw_stream));
    }
    CHECK(cudaStreamSynchronize(bw_stream));
    return (now_s() - t0) / PINNED_BATCH;
}

static void bw_rows(const char *metric, void *dev, void *host, const unsigned long long *sizes,
                    int nsizes, unsigned long long have, int h2d, int pinned, budget_t *b)
{
    double t[128];
    int i, r, reps;

    for (i = 0; i < nsizes; i++) {
        unsigned long long sz = sizes[i];
        double share, warm;

        if (sz > have) {
            printf("# %s %llu: skipped (could allocate only %llu bytes)\n", metric, sz, have);
            budget_take(b);
            continue;
        }
        share = budget_take(b);
        warm = copy_once(dev, host, sz, h2d, pinned);
        reps = reps_for(share - warm, warm, bw_cap(sz));
        for (r = 0; r < reps; r++)
            t[r] = copy_once(dev, host, sz, h2d, pinned);
        printf("%s,%llu,%.6g,GB/s\n", metric, sz, (double)sz / median(t, reps) / 1e9);
        printf("# %s %llu: median of %d%s\n", metric, sz, reps,
               pinned ? " batches of async copies" : " synchronous copies");
        fflush(stdout);
    }
}

/* Tries size, then halves it down to the largest size asked for that fits. */
static void *alloc_down(unsigned long long want, unsigned long long min, unsigned long long *got,
                        int kind)
{
    unsigned long long sz = want;

    while (sz >= min) {
        void *p = NULL;
        cudaError_t e;

        if (kind == 0) {
            e = cudaMalloc(&p, sz);
        } else if (kind == 1) {
            e = cudaMallocHost(&p, sz);
        } else {
            p = malloc(sz);
            e = p ? cudaSuccess : cudaErrorMemoryAllocation;
        }
        if (e == cudaSuccess) {
            *got = sz;
            return p;
        }
        cudaGetLastError();         /* clear a sticky-free allocation error */
        sz /= 2;
    }
    *got = 0;
    return NULL;
}

/* ---- latency and launches ------------------------------------------------------- */

/* The guest driver's counters (requests, kicks, irqs; virtio_cuda.ko's
 * sysfs stats): 0, or -1 natively (no such file). */
static int vstats(unsigned long long v[3])
{
    FILE *f = fopen("/sys/class/vcuda/vcuda0/stats", "r");
    int n;

    if (f == NULL)
        return -1;
    n = fscanf(f, "requests %llu kicks %llu irqs %llu", &v[0], &v[1], &v[2]);
    fclose(f);
    return n == 3 ? 0 : -1;
}

/* What a guest paid per call of a loop of n: requests on the virtqueue,
 * notifications to the device (an exit each on KVM) and interrupts. */
static void vstats_rows(const char *metric, const unsigned long long before[3], int ok, long n)
{
    unsigned long long after[3];

    if (!ok || n <= 0 || vstats(after) != 0)
        return;
    printf("%s_requests_per_call,0,%.3f,requests\n", metric, (double)(after[0] - before[0]) / n);
    printf("%s_kicks_per_call,0,%.3f,kicks\n", metric, (double)(after[1] - before[1]) / n);
    printf("%s_irqs_per_call,0,%.3f,irqs\n", metric, (double)(after[2] - before[2]) / n);
}

static void latency_memcpy4(void *dev, budget_t *b)
{
    double t[1000];
    int reps, r;
    int v = 42;
    double share = budget_take(b), warm;
    unsigned long long vs[3];
    int vs_ok;

    warm = now_s();
    CHECK(cudaMemcpy(dev, &v, 4, cudaMemcpyHostToDevice));
    warm = now_s() - warm;
    reps = reps_for(share, warm, 1000);
    vs_ok = vstats(vs) == 0;
    for (r = 0; r < reps; r++) {
        double t0 = now_s();

        CHECK(cudaMemcpy(dev, &v, 4, cudaMemcpyHostToDevice));
        t[r] = now_s() - t0;
    }
    vstats_rows("memcpy4", vs, vs_ok, reps);
    printf("memcpy4_latency,4,%.2f,us\n", median(t, reps) * 1e6);
    printf("# memcpy4_latency: 4-byte cudaMemcpy H2D from pageable memory, median of %d\n", reps);
    fflush(stdout);
}

static void latency_launch_sync(budget_t *b)
{
    double t[1000];
    int reps, r, vs_ok;
    double share = budget_take(b), warm;
    unsigned long long vs[3];

    warm = now_s();
    bench_empty<<<1, 1>>>();
    CHECK(cudaDeviceSynchronize());
    warm = now_s() - warm;
    reps = reps_for(share, warm, 1000);
    vs_ok = vstats(vs) == 0;
    for (r = 0; r < reps; r++) {
        double t0 = now_s();

        bench_empty<<<1, 1>>>();
        CHECK(cudaDeviceSynchronize());
        t[r] = now_s() - t0;
    }
    CHECK(cudaGetLastError());
    vstats_rows("launch_sync", vs, vs_ok, reps);
    printf("launch_sync_latency,0,%.2f,us\n", median(t, reps) * 1e6);
    printf("# launch_sync_latency: empty <<<1,1>>> + cudaDeviceSynchronize, median of %d\n", reps);
    fflush(stdout);
}

static void malloc_free(budget_t *b)
{
    double t[200];
    int reps, r;
    double share = budget_take(b), warm;
    void *p;

    warm = now_s();
    CHECK(cudaMalloc(&p, MIB));
    CHECK(cudaFree(p));
    warm = now_s() - warm;
    reps = reps_for(share, warm, 200);
    for (r = 0; r < reps; r++) {
        double t0 = now_s();

        CHECK(cudaMalloc(&p, MIB));
        CHECK(cudaFree(p));
        t[r] = now_s() - t0;
    }
    printf("malloc_free_latency,%llu,%.2f,us\n", MIB, median(t, reps) * 1e6);
    printf("# malloc_free_latency: cudaMalloc + cudaFree of 1 MiB, median of %d\n", reps);
    fflush(stdout);
}

/* N async launches then one sync; N = max_n, fewer if the budget says so. */
static void launch_rate(budget_t *b, long max_n)
{
    const int probe = 200;
    double share = budget_take(b), t0, dt, rate;
    unsigned long long vs[3];
    long n, i;
    int vs_ok;

    t0 = now_s();
    for (i = 0; i < probe; i++)
        bench_empty<<<1, 1>>>();
    CHECK(cudaDeviceSynchronize());
    dt = now_s() - t0;
    rate = probe / (dt > 0 ? dt : 1e-9);
    n = (long)(rate * (share - dt) * 0.8);
    if (n > max_n)
        n = max_n;
    if (n < 1000)
        n = 1000;

    vs_ok = vstats(vs) == 0;
    t0 = now_s();
    for (i = 0; i < n; i++)
        bench_empty<<<1, 1>>>();
    CHECK(cudaDeviceSynchronize());
    dt = now_s() - t0;
    CHECK(cudaGetLastError());
    vstats_rows("launch_async", vs, vs_ok, n);
    printf("launch_rate,0,%.0f,kernels/s\n", n / dt);
    printf("# launch_rate: %ld empty <<<1,1>>> launches on the legacy stream, then one "
           "cudaDeviceSynchronize%s\n",
           n, n < max_n ? " (fewer than the usual 200000: time budget or --quick)" : "");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    unsigned long long sizes[MAX_SIZES], maxsz = 0, minsz = ~0ull, have_dev, have_host;
    int nsizes = 0, quick = 0, i, rt = 0, drv = 0;
    double budget = -1, start = now_s();
    const char *sizes_arg = NULL;
    budget_t bw, lat, lr;
    cudaDeviceProp prop;
    void *dev, *host;
    long max_launches;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            sizes_arg = argv[++i];
        } else if (!strcmp(argv[i], "--budget-seconds") && i + 1 < argc) {
            char *end;

            budget = strtod(argv[++i], &end);
            if (*end != '\0' || budget <= 0)
                usage();
        } else {
            usage();
        }
    }
    if (sizes_arg) {
        nsizes = parse_sizes(sizes_arg, sizes);
    } else if (quick) {
        nsizes = (int)(sizeof(quick_sizes) / sizeof(quick_sizes[0]));
        memcpy(sizes, quick_sizes, sizeof(quick_sizes));
    } else {
        nsizes = (int)(sizeof(default_sizes) / sizeof(default_sizes[0]));
        memcpy(sizes, default_sizes, sizeof(default_sizes));
    }
    if (budget <= 0)
        budget = quick ? 20 : 60;
    max_launches = quick ? 20000 : 200000;
    for (i = 0; i < nsizes; i++)
        if (sizes[i] > maxsz)
            maxsz = sizes[i];
    for (i = 0; i < nsizes; i++)
        if (sizes[i] < minsz)
            minsz = sizes[i];

    /* Context creation and module loading are not what is measured. */
    CHECK(cudaFree(0));
    CHECK(cudaStreamCreateWithFlags(&bw_stream, cudaStreamNonBlocking));
    bench_empty<<<1, 1>>>();
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaGetDeviceProperties(&prop, 0));
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);

    printf("metric,size_bytes,value,unit\n");
    printf("# cudabench: device \"%s\", runtime %d, driver %d, budget %.0f s%s, init %.2f s\n",
           prop.name, rt, drv, budget, quick ? ", quick" : "", now_s() - start);
    fflush(stdout);

    /* Time split: bandwidth 75%, the small latencies 10%, launches 15%. */
    start = now_s();
    dev = alloc_down(maxsz, minsz, &have_dev, 0);
    if (!dev) {
        fprintf(stderr, "cudabench: cudaMalloc of %llu bytes failed\n", minsz);
        return 1;
    }
    budget_start(&bw, budget * 0.75, 4 * nsizes);

    host = alloc_down(have_dev, minsz, &have_host, 1);
    if (host) {
        memset(host, 1, have_host);
        bw_rows("h2d_pinned", dev, host, sizes, nsizes, have_host, 1, 1, &bw);
        bw_rows("d2h_pinned", dev, host, sizes, nsizes, have_host, 0, 1, &bw);
        CHECK(cudaFreeHost(host));
    } else {
        printf("# h2d_pinned, d2h_pinned: skipped (cudaMallocHost failed)\n");
    }

    host = alloc_down(have_dev, minsz, &have_host, 2);
    if (host) {
        memset(host, 1, have_host);     /* touched: page faults are not measured */
        bw_rows("h2d_pageable", dev, host, sizes, nsizes, have_host, 1, 0, &bw);
        bw_rows("d2h_pageable", dev, host, sizes, nsizes, have_host, 0, 0, &bw);
        free(host);
    } else {
        printf("# h2d_pageable, d2h_pageable: skipped (malloc failed)\n");
    }

    /* What the bandwidth phase left over goes to the rest. */
    budget = budget - (now_s() - start);
    if (budget < 2)
        budget = 2;
    budget_start(&lat, budget * 0.4, 3);
    latency_memcpy4(dev, &lat);
    latency_launch_sync(&lat);
    malloc_free(&lat);
    CHECK(cudaFree(dev));

    budget_start(&lr, lat.end - now_s() + budget * 0.6, 1);
    launch_rate(&lr, max_launches);
    printf("# cudabench: done in %.1f s\n", now_s() - start);
    return 0;
}
