/* Four host threads, each with its own stream and buffers, at once. */
#define TEST_NAME "threads"
#include <pthread.h>
#include "vcu_test.h"

#define NTHREADS 4
#define ROUNDS 5
#define N (1 << 16)

__global__ void thr_mul_add(int *p, int n, int mul, int add)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = p[i] * mul + add;
}

struct worker {
    int id;
    int bad;                        /* mismatched elements, or -1 on an error */
    cudaError_t err;
};

static void *work(void *arg)
{
    struct worker *w = (struct worker *)arg;
    int *h = (int *)malloc(N * sizeof(int)), *d = NULL;
    cudaStream_t s = NULL;
    cudaError_t err;

#define TRY(call) do { if ((err = (call)) != cudaSuccess) goto out; } while (0)
    TRY(cudaSetDevice(0));
    TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    TRY(cudaMalloc(&d, N * sizeof(int)));
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++)
            h[i] = i + w->id * 100000 + r;
        TRY(cudaMemcpyAsync(d, h, N * sizeof(int), cudaMemcpyHostToDevice, s));
        thr_mul_add<<<N / 256, 256, 0, s>>>(d, N, w->id + 2, r);
        TRY(cudaGetLastError());
        TRY(cudaMemcpyAsync(h, d, N * sizeof(int), cudaMemcpyDeviceToHost, s));
        TRY(cudaStreamSynchronize(s));
        for (int i = 0; i < N; i++)
            if (h[i] != (i + w->id * 100000 + r) * (w->id + 2) + r)
                w->bad++;
    }
    TRY(cudaFree(d));
    d = NULL;
    TRY(cudaStreamDestroy(s));
    s = NULL;
#undef TRY
out:
    w->err = err;
    if (d)
        cudaFree(d);
    if (s)
        cudaStreamDestroy(s);
    free(h);
    return NULL;
}

int main(void)
{
    pthread_t tid[NTHREADS];
    struct worker w[NTHREADS];

    CK(cudaFree(0));                /* one context, before the threads */
    for (int t = 0; t < NTHREADS; t++) {
        w[t].id = t;
        w[t].bad = 0;
        w[t].err = cudaSuccess;
        EXPECT(pthread_create(&tid[t], NULL, work, &w[t]) == 0,
               "pthread_create");
    }
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(tid[t], NULL);
    for (int t = 0; t < NTHREADS; t++) {
        EXPECT(w[t].err == cudaSuccess, "thread %d: %s", t,
               cudaGetErrorName(w[t].err));
        EXPECT(w[t].bad == 0, "thread %d: %d mismatches", t, w[t].bad);
        printf("thread %d: %d rounds ok\n", t, ROUNDS);
    }
    vcu_test_pass();
    return 0;
}
