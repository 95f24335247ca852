/*
 * Executable graph updates as cuda-samples' simpleCudaGraphs and
 * jacobiCudaGraphs do them: a graph of two kernels, a memset, a copy and
 * a host node, instantiated; each node's parameters changed in the exec
 * (cudaGraphExec*NodeSetParams), a node disabled and enabled, a kernel
 * node of the graph changed and the exec updated from it
 * (cudaGraphExecUpdate), an update with another topology refused with
 * its reason; node types, nodes, roots and edges listed.  Every run
 * checked against a CPU model of the buffers.
 */
#define TEST_NAME "graph_update"
#include "vcu_test.h"

/* The kernels of graphs.cu (their CPU twins serve both). */
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

#define N 512

static int calls_a, calls_b;

static void CUDART_CB host_a(void *arg)
{
    (void)arg;
    calls_a++;
}

static void CUDART_CB host_b(void *arg)
{
    (void)arg;
    calls_b++;
}

static void check(const char *what, const int *d, const int *want)
{
    int h[N];

    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == want[i], "%s[%d] = %d, want %d", what, i, h[i], want[i]);
}

static int has(const cudaGraphNode_t *v, size_t n, cudaGraphNode_t x)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

int main(void)
{
    static int ra[N], rb[N], rs[N], rd[N];
    int *a, *b, *s, *d, n = N, v = 1;
    cudaStream_t st;
    cudaGraph_t g, g2;
    cudaGraphExec_t x;
    cudaGraphNode_t k1, k2, ms, cp, hn, e, list[8], from[8], to[8];
    struct cudaKernelNodeParams kp;
    struct cudaMemsetParams sp;
    struct cudaHostNodeParams hp;
    cudaGraphExecUpdateResultInfo info;
    enum cudaGraphNodeType t;
    unsigned int en = 7;
    size_t cnt;
    void *add_args[] = { &a, &n, &v };
    void *acc_args[] = { &b, &a, &n };

    CK(cudaStreamCreate(&st));
    CK(cudaMalloc(&a, N * sizeof(int)));
    CK(cudaMalloc(&b, N * sizeof(int)));
    CK(cudaMalloc(&s, N * sizeof(int)));
    CK(cudaMalloc(&d, N * sizeof(int)));
    for (int i = 0; i < N; i++)
        ra[i] = i;
    CK(cudaMemcpy(a, ra, sizeof(ra), cudaMemcpyHostToDevice));
    CK(cudaMemset(b, 0, N * sizeof(int)));

    /* k1: a += v -> k2: b += a -> ms: s = 5 -> cp: d = b -> hn: host_a */
    CK(cudaGraphCreate(&g, 0));
    memset(&kp, 0, sizeof(kp));
    kp.func = (void *)g_add;
    kp.gridDim = dim3(N / 128);
    kp.blockDim = dim3(128);
    kp.kernelParams = add_args;
    CK(cudaGraphAddKernelNode(&k1, g, NULL, 0, &kp));
    kp.func = (void *)g_accum;
    kp.kernelParams = acc_args;
    CK(cudaGraphAddKernelNode(&k2, g, &k1, 1, &kp));
    memset(&sp, 0, sizeof(sp));
    sp.dst = s;
    sp.value = 5;
    sp.elementSize = 4;
    sp.width = N;
    sp.height = 1;
    CK(cudaGraphAddMemsetNode(&ms, g, &k2, 1, &sp));
    CK(cudaGraphAddMemcpyNode1D(&cp, g, &ms, 1, d, b, N * sizeof(int),
                                cudaMemcpyDeviceToDevice));
    hp.fn = host_a;
    hp.userData = NULL;
    CK(cudaGraphAddHostNode(&hn, g, &cp, 1, &hp));
    CK(cudaGraphInstantiate(&x, g, 0));

    CK(cudaGraphLaunch(x, st));
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < N; i++) {
        ra[i] += 1;
        rb[i] += ra[i];
        rs[i] = 5;
        rd[i] = rb[i];
    }
    check("a", a, ra);
    check("b", b, rb);
    check("s", s, rs);
    check("d", d, rd);
    EXPECT(calls_a == 1, "host node ran %d times", calls_a);

    /* The graph's shape. */
    CK(cudaGraphNodeGetType(k1, &t));
    EXPECT(t == cudaGraphNodeTypeKernel, "k1 type %d", (int)t);
    CK(cudaGraphNodeGetType(ms, &t));
    EXPECT(t == cudaGraphNodeTypeMemset, "ms type %d", (int)t);
    CK(cudaGraphNodeGetType(cp, &t));
    EXPECT(t == cudaGraphNodeTypeMemcpy, "cp type %d", (int)t);
    CK(cudaGraphNodeGetType(hn, &t));
    EXPECT(t == cudaGraphNodeTypeHost, "hn type %d", (int)t);
    cnt = 8;
    CK(cudaGraphGetNodes(g, list, &cnt));
    EXPECT(cnt == 5 && has(list, 5, k1) && has(list, 5, k2) && has(list, 5, ms) &&
           has(list, 5, cp) && has(list, 5, hn), "nodes: %zu", cnt);
    cnt = 8;
    CK(cudaGraphGetRootNodes(g, list, &cnt));
    EXPECT(cnt == 1 && list[0] == k1, "roots: %zu", cnt);
    cnt = 0;
    CK(cudaGraphGetEdges(g, NULL, NULL, NULL, &cnt));
    EXPECT(cnt == 4, "edges: %zu", cnt);
    cnt = 8;
    CK(cudaGraphGetEdges(g, from, to, NULL, &cnt));
    EXPECT(cnt == 4, "edges listed: %zu", cnt);
    for (size_t i = 0; i < cnt; i++)
        EXPECT((from[i] == k1 && to[i] == k2) || (from[i] == k2 && to[i] == ms) ||
               (from[i] == ms && to[i] == cp) || (from[i] == cp && to[i] == hn),
               "edge %zu", i);

    /* Each node changed in the exec alone. */
    v = 10;
    kp.func = (void *)g_add;
    kp.kernelParams = add_args;
    CK(cudaGraphExecKernelNodeSetParams(x, k1, &kp));
    v = 1;
    sp.value = 9;
    CK(cudaGraphExecMemsetNodeSetParams(x, ms, &sp));
    CK(cudaGraphExecMemcpyNodeSetParams1D(x, cp, d, a, N * sizeof(int),
                                          cudaMemcpyDeviceToDevice));
    hp.fn = host_b;
    CK(cudaGraphExecHostNodeSetParams(x, hn, &hp));
    CK_EQ(cudaErrorInvalidValue, cudaGraphExecMemsetNodeSetParams(x, k1, &sp));
    CK(cudaGraphLaunch(x, st));
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < N; i++) {
        ra[i] += 10;
        rb[i] += ra[i];
        rs[i] = 9;
        rd[i] = ra[i];
    }
    check("a", a, ra);
    check("b", b, rb);
    check("s", s, rs);
    check("d", d, rd);
    EXPECT(calls_a == 1 && calls_b == 1, "host nodes ran %d, %d times", calls_a, calls_b);

    /* A kernel node disabled, then enabled again. */
    CK(cudaGraphNodeSetEnabled(x, k2, 0));
    CK(cudaGraphNodeGetEnabled(x, k2, &en));
    EXPECT(en == 0, "enabled %u", en);
    CK(cudaGraphLaunch(x, st));
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < N; i++) {
        ra[i] += 10;
        rd[i] = ra[i];
    }
    check("a", a, ra);
    check("b", b, rb);
    check("d", d, rd);
    CK(cudaGraphNodeSetEnabled(x, k2, 1));
    CK(cudaGraphNodeGetEnabled(x, k2, &en));
    EXPECT(en == 1, "enabled %u", en);

    /* The graph's kernel node changed, the exec updated from the graph:
     * every node as the graph has it. */
    v = 100;
    CK(cudaGraphKernelNodeSetParams(k1, &kp));
    v = 1;
    memset(&info, 0, sizeof(info));
    CK(cudaGraphExecUpdate(x, g, &info));
    EXPECT(info.result == cudaGraphExecUpdateSuccess, "update result %d", (int)info.result);
    CK(cudaGraphLaunch(x, st));
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < N; i++) {
        ra[i] += 100;
        rb[i] += ra[i];
        rs[i] = 5;
        rd[i] = rb[i];
    }
    check("a", a, ra);
    check("b", b, rb);
    check("s", s, rs);
    check("d", d, rd);
    EXPECT(calls_a == 2 && calls_b == 2, "host nodes ran %d, %d times", calls_a, calls_b);

    /* Another topology: refused, with its reason. */
    CK(cudaGraphClone(&g2, g));
    CK(cudaGraphAddEmptyNode(&e, g2, NULL, 0));
    memset(&info, 0, sizeof(info));
    CK_EQ(cudaErrorGraphExecUpdateFailure, cudaGraphExecUpdate(x, g2, &info));
    EXPECT(info.result == cudaGraphExecUpdateErrorTopologyChanged, "update result %d",
           (int)info.result);
    /* No result info asked for: the update made all the same. */
    CK(cudaGraphExecUpdate(x, g, NULL));

    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g2));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(s));
    CK(cudaFree(d));
    vcu_test_pass();
    return 0;
}
