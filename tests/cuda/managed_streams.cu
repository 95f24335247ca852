/*
 * Managed memory as two cuda-samples use it, on a device without
 * concurrent managed access (ours reports 0): systemWideAtomics, whose
 * host adds to memory a kernel adds to without waiting for it first
 * (which CUDA forbids there: the result must still be right, or the
 * program must stop, never a wrong sum), and UnifiedMemoryStreams, whose
 * threads attach each task's memory to the host (then work on it on the
 * CPU while other threads' kernels run) or to their own stream (then a
 * kernel works on it), and wait for the device only at the end.
 */
#define TEST_NAME "managed_streams"
#include <pthread.h>
#include <string.h>
#include "vcu_test.h"

#define LOOPS 50

__global__ void ms_atomics(int *p, int loops)
{
    int tid = blockDim.x * blockIdx.x + threadIdx.x;

    for (int i = 0; i < loops; i++) {
        atomicAdd_system(&p[0], 10);
        atomicMax_system(&p[1], tid);
    }
}

/* y = A x, A n x n row-major; a thread a row, grid-stride. */
__global__ void ms_gemv(int n, const double *A, const double *x, double *y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        double s = 0.0;

        for (int j = 0; j < n; j++)
            s += A[(size_t)i * n + j] * x[j];
        y[i] = s;
    }
}

static void atomics(void)
{
    const int blocks = 64, threads = 256, n = blocks * threads;
    int *a;

    CK(cudaMallocManaged(&a, 2 * sizeof(int)));
    a[0] = 0;
    a[1] = -1;
    ms_atomics<<<blocks, threads>>>(a, LOOPS);
    CK(cudaGetLastError());
    /* The host's share, with no wait for the kernel first. */
    for (int i = n; i < 2 * n; i++) {
        for (int j = 0; j < LOOPS; j++) {
            int old, want;

            __sync_fetch_and_add(&a[0], 10);
            do {
                want = a[1];
                old = __sync_val_compare_and_swap(&a[1], want, want > i ? want : i);
            } while (old != want);
        }
    }
    CK(cudaDeviceSynchronize());
    EXPECT(a[0] == 2 * n * LOOPS * 10, "system atomics: sum %d, want %d", a[0],
           2 * n * LOOPS * 10);
    EXPECT(a[1] == 2 * n - 1, "system atomics: max %d, want %d", a[1], 2 * n - 1);
    CK(cudaFree(a));
    printf("system atomics: ok\n");
}

#define NTHREADS 4
#define NTASKS 24

typedef struct task_s {
    int n;
    double *A, *x, *y;
} task_t;

typedef struct work_s {
    int tid;
    task_t *tasks;
    int first, count;
    cudaStream_t *streams;
    int on_host, on_device;
} work_t;

static void gemv_host(int n, const double *A, const double *x, double *y)
{
    for (int i = 0; i < n; i++) {
        double s = 0.0;

        for (int j = 0; j < n; j++)
            s += A[(size_t)i * n + j] * x[j];
        y[i] = s;
    }
}

static void *execute(void *arg)
{
    work_t *w = (work_t *)arg;

    for (int k = w->first; k < w->first + w->count; k++) {
        task_t *t = &w->tasks[k];

        if (t->n < 100) {
            /* The host's: attached to it, usable while kernels run. */
            CK(cudaStreamAttachMemAsync(w->streams[0], t->A, 0, cudaMemAttachHost));
            CK(cudaStreamAttachMemAsync(w->streams[0], t->x, 0, cudaMemAttachHost));
            CK(cudaStreamAttachMemAsync(w->streams[0], t->y, 0, cudaMemAttachHost));
            CK(cudaStreamSynchronize(w->streams[0]));
            gemv_host(t->n, t->A, t->x, t->y);
            w->on_host++;
        } else {
            cudaStream_t s = w->streams[w->tid + 1];

            CK(cudaStreamAttachMemAsync(s, t->A, 0, cudaMemAttachSingle));
            CK(cudaStreamAttachMemAsync(s, t->x, 0, cudaMemAttachSingle));
            CK(cudaStreamAttachMemAsync(s, t->y, 0, cudaMemAttachSingle));
            ms_gemv<<<(t->n + 127) / 128, 128, 0, s>>>(t->n, t->A, t->x, t->y);
            CK(cudaGetLastError());
            w->on_device++;
        }
    }
    return NULL;
}

static void streams(void)
{
    static task_t tasks[NTASKS];
    cudaStream_t st[NTHREADS + 1];
    pthread_t th[NTHREADS];
    work_t w[NTHREADS];
    unsigned int seed = 12345;
    int on_host = 0, on_device = 0;

    for (int i = 0; i < NTHREADS + 1; i++)
        CK(cudaStreamCreate(&st[i]));
    for (int k = 0; k < NTASKS; k++) {
        task_t *t = &tasks[k];

        seed = seed * 1103515245u + 12345u;
        t->n = k % 3 == 0 ? 64 + (int)(seed >> 16) % 36 : 100 + (int)(seed >> 16) % 400;
        CK(cudaMallocManaged(&t->A, sizeof(double) * t->n * t->n));
        CK(cudaMallocManaged(&t->x, sizeof(double) * t->n));
        CK(cudaMallocManaged(&t->y, sizeof(double) * t->n));
        CK(cudaDeviceSynchronize());
        for (int i = 0; i < t->n * t->n; i++)
            t->A[i] = (double)((i * 7 + k) % 13) / 8.0;
        for (int i = 0; i < t->n; i++) {
            t->x[i] = (double)((i * 5 + k) % 11) / 4.0;
            t->y[i] = 0.0;
        }
    }
    for (int i = 0; i < NTHREADS; i++) {
        w[i].tid = i;
        w[i].tasks = tasks;
        w[i].first = i * (NTASKS / NTHREADS);
        w[i].count = NTASKS / NTHREADS;
        w[i].streams = st;
        w[i].on_host = w[i].on_device = 0;
        EXPECT(pthread_create(&th[i], NULL, execute, &w[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        on_host += w[i].on_host;
        on_device += w[i].on_device;
    }
    CK(cudaDeviceSynchronize());
    for (int k = 0; k < NTASKS; k++) {
        task_t *t = &tasks[k];
        double *want = (double *)malloc(sizeof(double) * t->n);

        EXPECT(want != NULL, "out of memory");
        gemv_host(t->n, t->A, t->x, want);
        for (int i = 0; i < t->n; i++) {
            double d = t->y[i] - want[i];

            EXPECT(d < 1e-9 && d > -1e-9, "task %d (n %d): y[%d] = %g, want %g", k, t->n, i,
                   t->y[i], want[i]);
        }
        free(want);
    }
    for (int k = 0; k < NTASKS; k++) {
        CK(cudaFree(tasks[k].A));
        CK(cudaFree(tasks[k].x));
        CK(cudaFree(tasks[k].y));
    }
    for (int i = 0; i < NTHREADS + 1; i++)
        CK(cudaStreamDestroy(st[i]));
    EXPECT(on_host > 0 && on_device > 0, "tasks: %d on the host, %d on the device", on_host,
           on_device);
    printf("streams: %d tasks on the host, %d on the device, all right\n", on_host, on_device);
}

int main(void)
{
    int managed = 0, concurrent = -1;

    CK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    cudaDeviceProp prop;

    EXPECT(managed == 1, "cudaDevAttrManagedMemory %d", managed);
    printf("info: concurrentManagedAccess %d\n", concurrent);
    /* What the guest cannot do is reported missing, so that programs take
     * their other paths: the GPU reaching pageable memory, the CPU's
     * atomics on device memory. */
    CK(cudaGetDeviceProperties(&prop, 0));
    EXPECT(prop.managedMemory == 1 && prop.concurrentManagedAccess == concurrent &&
               prop.pageableMemoryAccess == 0 && prop.hostNativeAtomicSupported == 0 &&
               prop.directManagedMemAccessFromHost == 0,
           "managed %d concurrent %d pageable %d host atomics %d direct %d",
           prop.managedMemory, prop.concurrentManagedAccess, prop.pageableMemoryAccess,
           prop.hostNativeAtomicSupported, prop.directManagedMemAccessFromHost);
    atomics();
    streams();
    vcu_test_pass();
    return 0;
}
