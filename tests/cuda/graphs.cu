/*
 * CUDA graphs: one captured from a stream (memset, kernels, D2D copy) and
 * launched three times; one built node by node (memset, kernel, host
 * nodes with dependencies), cloned, and both launched; one captured as
 * PyTorch's CUDAGraph does (thread-local capture, the graph asked for
 * during it, a relaxed cudaMalloc, a fork and join, AutoFreeOnLaunch,
 * upload, replays over new inputs); copy nodes of page-locked and
 * registered host memory.
 */
#define TEST_NAME "graphs"
#include "vcu_test.h"

__global__ void g_add(int *p, int n, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] += v;
}

__global__ void g_accum(int *acc, const int *src, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        acc[i] += src[i];
}

static int host_calls;

static void CUDART_CB g_host_fn(void *arg)
{
    (*(int *)arg)++;
}

static void check(const char *what, const int *d, int n, int want)
{
    int *h = (int *)malloc(n * sizeof(int));

    CK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(h[i] == want, "%s[%d] = %d, want %d", what, i, h[i], want);
    free(h);
}

static void captured(cudaStream_t s, int n)
{
    int *da, *db, *dacc;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamCaptureStatus status;
    size_t nodes = 0;

    CK(cudaMalloc(&da, n * sizeof(int)));
    CK(cudaMalloc(&db, n * sizeof(int)));
    CK(cudaMalloc(&dacc, n * sizeof(int)));
    CK(cudaMemset(dacc, 0, n * sizeof(int)));
    CK(cudaMemset(da, 0x7f, n * sizeof(int)));

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusActive, "capture not active");
    CK(cudaMemsetAsync(da, 0, n * sizeof(int), s));
    g_add<<<(n + 255) / 256, 256, 0, s>>>(da, n, 5);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(db, da, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
    g_accum<<<(n + 255) / 256, 256, 0, s>>>(dacc, db, n);
    CK(cudaGetLastError());
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphGetNodes(graph, NULL, &nodes));
    EXPECT(nodes == 4, "captured graph has %zu nodes, want 4", nodes);
    printf("captured graph: %zu nodes\n", nodes);

    /* Capture recorded the work without running it. */
    check("a before launch", da, n, 0x7f7f7f7f);

    CK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 3; i++)
        CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check("a", da, n, 5);
    check("b", db, n, 5);
    check("acc", dacc, n, 15);
    printf("captured graph launched 3 times ok\n");

    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dacc));
}

static void explicit_graph(cudaStream_t s, int n)
{
    int *dc;
    cudaGraph_t graph, clone;
    cudaGraphExec_t exec, exec_clone;
    cudaGraphNode_t memset_node, k1, k2, host_node, deps[2];
    cudaMemsetParams mp = {};
    cudaKernelNodeParams kp = {};
    cudaHostNodeParams hp = {};
    size_t nodes = 0;
    int v7 = 7, v1 = 1;
    void *args7[] = { &dc, &n, &v7 };
    void *args1[] = { &dc, &n, &v1 };

    CK(cudaMalloc(&dc, n * sizeof(int)));
    CK(cudaGraphCreate(&graph, 0));

    mp.dst = dc;
    mp.value = 100;
    mp.elementSize = sizeof(int);
    mp.width = n;
    mp.height = 1;
    CK(cudaGraphAddMemsetNode(&memset_node, graph, NULL, 0, &mp));

    kp.func = (void *)g_add;
    kp.gridDim = dim3((n + 127) / 128);
    kp.blockDim = dim3(128);
    kp.sharedMemBytes = 0;
    kp.kernelParams = args7;
    deps[0] = memset_node;
    CK(cudaGraphAddKernelNode(&k1, graph, deps, 1, &kp));

    hp.fn = g_host_fn;
    hp.userData = &host_calls;
    deps[0] = k1;
    CK(cudaGraphAddHostNode(&host_node, graph, deps, 1, &hp));

    kp.kernelParams = args1;
    deps[0] = k1;
    deps[1] = host_node;
    CK(cudaGraphAddKernelNode(&k2, graph, deps, 2, &kp));

    CK(cudaGraphClone(&clone, graph));
    CK(cudaGraphGetNodes(clone, NULL, &nodes));
    EXPECT(nodes == 4, "clone has %zu nodes, want 4", nodes);
    printf("explicit graph cloned: %zu nodes\n", nodes);

    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphInstantiate(&exec_clone, clone, 0));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check("c", dc, n, 108);
    EXPECT(host_calls == 1, "host node ran %d times, want 1", host_calls);
    CK(cudaMemset(dc, 0, n * sizeof(int)));
    CK(cudaGraphLaunch(exec_clone, s));
    CK(cudaGraphLaunch(exec_clone, s));
    CK(cudaStreamSynchronize(s));
    check("c (clone)", dc, n, 108);
    EXPECT(host_calls == 3, "host node ran %d times, want 3", host_calls);
    printf("explicit graph and clone ok, host node ran %d times\n", host_calls);

    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphExecDestroy(exec_clone));
    CK(cudaGraphDestroy(graph));
    CK(cudaGraphDestroy(clone));
    CK(cudaFree(dc));
}

static void fill(int *d, int n, int v)
{
    int *h = (int *)malloc(n * sizeof(int));

    for (int i = 0; i < n; i++)
        h[i] = v;
    CK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    free(h);
}

static void torch_like(int n)
{
    cudaStream_t s, s2;
    cudaEvent_t fork, join;
    cudaGraph_t cg = NULL, cg2 = NULL, graph = NULL;
    cudaGraphExec_t exec;
    cudaStreamCaptureStatus status;
    cudaStreamCaptureMode mode;
    unsigned long long id = 0, id2 = 0;
    size_t nd = 99;
    int *da, *db, *dc, *scratch = NULL;

    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    CK(cudaMalloc(&da, n * sizeof(int)));
    CK(cudaMalloc(&db, n * sizeof(int)));
    CK(cudaMalloc(&dc, n * sizeof(int)));

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaStreamGetCaptureInfo(s, &status, &id, &cg, NULL, NULL, &nd));
    EXPECT(status == cudaStreamCaptureStatusActive && id != 0, "capture not active");
    EXPECT(cg != NULL, "no graph from cudaStreamGetCaptureInfo during the capture");
    EXPECT(nd == 0, "%zu dependencies at the start", nd);
    CK(cudaStreamGetCaptureInfo(s, &status, &id2, &cg2, NULL, NULL, NULL));
    EXPECT(cg2 == cg && id2 == id, "another graph or id the second time");
    /* The allocator's cudaMalloc during a capture, under a relaxed mode. */
    mode = cudaStreamCaptureModeRelaxed;
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    CK(cudaMalloc(&scratch, 4096));
    CK(cudaThreadExchangeStreamCaptureMode(&mode));
    EXPECT(mode == cudaStreamCaptureModeRelaxed, "mode %d restored", (int)mode);
    CK(cudaStreamIsCapturing(s, &status));
    EXPECT(status == cudaStreamCaptureStatusActive, "capture ended by cudaMalloc");
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(s2, fork, 0));
    cg2 = NULL;
    CK(cudaStreamGetCaptureInfo(s2, &status, &id2, &cg2, NULL, NULL, NULL));
    EXPECT(cg2 == cg && id2 == id, "the forked stream names another capture");
    CK(cudaMemsetAsync(dc, 0, n * sizeof(int), s2));
    CK(cudaEventRecord(join, s2));
    CK(cudaStreamWaitEvent(s, join, 0));
    g_accum<<<(n + 255) / 256, 256, 0, s>>>(dc, da, n);
    g_accum<<<(n + 255) / 256, 256, 0, s>>>(dc, db, n);
    CK(cudaGetLastError());
    nd = 0;
    CK(cudaStreamGetCaptureInfo(s, &status, NULL, NULL, NULL, NULL, &nd));
    EXPECT(nd == 1, "%zu dependencies after the kernel", nd);
    CK(cudaStreamEndCapture(s, &graph));
    EXPECT(graph == cg, "cudaStreamEndCapture's graph is not the capture's");

    CK(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    CK(cudaGraphUpload(exec, s));
    fill(da, n, 3);
    fill(db, n, 4);
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check("c", dc, n, 7);
    fill(da, n, -10);
    fill(db, n, 25);
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    check("c again", dc, n, 15);
    printf("PyTorch-style capture replayed twice ok\n");

    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaFree(scratch));
    CK(cudaFree(da));
    CK(cudaFree(db));
    CK(cudaFree(dc));
    CK(cudaEventDestroy(fork));
    CK(cudaEventDestroy(join));
    CK(cudaStreamDestroy(s2));
    CK(cudaStreamDestroy(s));
}

/*
 * Copy nodes that read and write host memory: page-locked in (an H2D
 * node), registered out (a D2H node after it), read and written when
 * the graph runs, at each replay.  Through a
 * worker only: in the loopback transport host memory is handed as it is,
 * which the stand-in does not take for device memory.
 */
static void host_copies(cudaStream_t s, int n)
{
    size_t sz = (size_t)n * sizeof(int), room = (sz + 4095) & ~(size_t)4095;
    int *hin, *hout = (int *)aligned_alloc(4096, room), *dev;
    cudaGraph_t g;
    cudaGraphExec_t x;
    cudaGraphNode_t in, out;

    EXPECT(hout != NULL, "aligned_alloc");
    CK(cudaMallocHost((void **)&hin, sz));
    CK(cudaHostRegister(hout, room, cudaHostRegisterDefault));
    CK(cudaMalloc((void **)&dev, sz));
    CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphAddMemcpyNode1D(&in, g, NULL, 0, dev, hin, sz, cudaMemcpyHostToDevice));
    CK(cudaGraphAddMemcpyNode1D(&out, g, &in, 1, hout, dev, sz, cudaMemcpyDeviceToHost));
    CK(cudaGraphInstantiate(&x, g, 0));
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < n; i++) {
            hin[i] = rep ? -i : 3 * i + 1;
            hout[i] = 0;
        }
        CK(cudaGraphLaunch(x, s));
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < n; i++)
            EXPECT(hout[i] == hin[i], "host copies: replay %d, [%d] = %d, want %d", rep, i,
                   hout[i], hin[i]);
    }
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(dev));
    CK(cudaHostUnregister(hout));
    CK(cudaFreeHost(hin));
    free(hout);
}

/* A pitched copy's parameters: extent w bytes x h rows x d slices. */
static cudaMemcpy3DParms pitched(void *dst, size_t dpitch, size_t drows, const void *src,
                                 size_t spitch, size_t srows, size_t w, size_t h, size_t d,
                                 cudaMemcpyKind kind)
{
    cudaMemcpy3DParms p;

    memset(&p, 0, sizeof(p));
    p.dstPtr = make_cudaPitchedPtr(dst, dpitch, w, drows);
    p.srcPtr = make_cudaPitchedPtr((void *)src, spitch, w, srows);
    p.extent = make_cudaExtent(w, h, d);
    p.kind = kind;
    return p;
}

/*
 * Copy nodes of ordinary (pageable) memory, and 2D/3D copy nodes: a
 * pageable array in (1D H2D), a 2D copy out into a pageable pitched
 * array (D2H, rows apart, the gaps untouched), a 3D copy out into
 * page-locked memory.  The graph itself is destroyed before the exec
 * and a clone run, which keep running the copies; each replay reads and
 * writes the memory afresh.
 */
static void pageable_copies(cudaStream_t s)
{
    enum { W = 24, H = 5, D = 2, PITCH = 40, ROWS = 7, N = W * H * D };
    unsigned char *hin = (unsigned char *)malloc(N), *h2d = (unsigned char *)malloc(PITCH * H);
    unsigned char *h3d, *dev;
    cudaGraph_t g, g2;
    cudaGraphExec_t x, x2;
    cudaGraphNode_t in, out2, out3;
    cudaMemcpy3DParms p;

    EXPECT(hin != NULL && h2d != NULL, "malloc");
    CK(cudaMallocHost((void **)&h3d, PITCH * ROWS * D));
    CK(cudaMalloc((void **)&dev, N));
    CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphAddMemcpyNode1D(&in, g, NULL, 0, dev, hin, N, cudaMemcpyHostToDevice));
    /* The first slice's rows, W bytes each, PITCH apart in h2d. */
    p = pitched(h2d, PITCH, H, dev, W, H, W, H, 1, cudaMemcpyDeviceToHost);
    CK(cudaGraphAddMemcpyNode(&out2, g, &in, 1, &p));
    /* Both slices into h3d: rows PITCH apart, slices ROWS rows apart. */
    p = pitched(h3d, PITCH, ROWS, dev, W, H, W, H, D, cudaMemcpyDeviceToHost);
    CK(cudaGraphAddMemcpyNode(&out3, g, &in, 1, &p));
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphClone(&g2, g));
    CK(cudaGraphDestroy(g));
    CK(cudaGraphInstantiate(&x2, g2, 0));
    CK(cudaGraphDestroy(g2));
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < N; i++)
            hin[i] = (unsigned char)(rep * 31 + i * 7 + 1);
        memset(h2d, 0xee, PITCH * H);
        memset(h3d, 0xdd, PITCH * ROWS * D);
        CK(cudaGraphLaunch(rep == 1 ? x2 : x, s));
        CK(cudaStreamSynchronize(s));
        for (int z = 0; z < D; z++)
            for (int y = 0; y < ROWS; y++)
                for (int b = 0; b < PITCH; b++) {
                    int i = (z * ROWS + y) * PITCH + b;
                    unsigned char want = b < W && y < H ? hin[(z * H + y) * W + b] : 0xdd;

                    EXPECT(h3d[i] == want, "3D copy: replay %d, slice %d row %d byte %d = %#x, "
                           "want %#x", rep, z, y, b, h3d[i], want);
                }
        for (int y = 0; y < H; y++)
            for (int b = 0; b < PITCH; b++) {
                unsigned char want = b < W ? hin[y * W + b] : 0xee;

                EXPECT(h2d[y * PITCH + b] == want, "pageable 2D copy: replay %d, row %d byte %d "
                       "= %#x, want %#x", rep, y, b, h2d[y * PITCH + b], want);
            }
    }
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphExecDestroy(x2));
    CK(cudaFree(dev));
    CK(cudaFreeHost(h3d));
    free(h2d);
    free(hin);
}

int main(void)
{
    cudaStream_t s;
    const char *t = getenv("VCU_TRANSPORT");

    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    captured(s, 10000);
    explicit_graph(s, 5000);
    torch_like(3000);
    if (t == NULL || strcmp(t, "loopback") != 0)
        host_copies(s, 4096);
    if (t == NULL || strcmp(t, "loopback") != 0)
        pageable_copies(s);
    CK(cudaStreamDestroy(s));
    vcu_test_pass();
    return 0;
}
