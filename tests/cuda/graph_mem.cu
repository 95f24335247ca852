/*
 * Graph memory and conditional nodes through the runtime: allocation and
 * free nodes (the address fixed when the node is made), cudaMallocAsync
 * and cudaFreeAsync captured as such nodes (the capture goes on), the
 * device's graph memory attributes and trim; a while node whose body
 * kernel ends the loop with cudaGraphSetConditional on the handle it was
 * given, an if/else node chosen by the handle's default value, both made
 * with cudaGraphAddNode, and their body graphs filled as any graph (the
 * while body by a capture into it, cudaStreamBeginCaptureToGraph).
 */
#define TEST_NAME "graph_mem"
#include "vcu_test.h"

#define N 1024

__global__ void gm_fill(unsigned int *p, int n, unsigned int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = v + (unsigned int)i;
}

/* *ctr += 1; go round again while *ctr < n. */
__global__ void gm_count(unsigned int *ctr, unsigned int n, cudaGraphConditionalHandle h)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int v = *ctr + 1;

        *ctr = v;
        cudaGraphSetConditional(h, v < n ? 1u : 0u);
    }
}

static void check(const char *what, const unsigned int *d, unsigned int v)
{
    static unsigned int h[N];

    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == v + (unsigned int)i, "%s: [%d] = %#x, want %#x", what, i, h[i],
               v + (unsigned int)i);
}

static unsigned long long gm_attr(cudaGraphMemAttributeType a)
{
    unsigned long long v = ~0ull;

    CK(cudaDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

/* Allocation -> fill kernel -> copy out -> free, added by hand. */
static void by_hand(cudaStream_t s, unsigned int *out)
{
    cudaGraph_t g;
    cudaGraphExec_t x;
    cudaGraphNode_t na, nk, nc, nf;
    cudaMemAllocNodeParams ap, got;
    cudaKernelNodeParams kp;
    unsigned int *p, v = 0x1000;
    int n = N;
    void *args[3];
    void *fp = NULL;

    CK(cudaGraphCreate(&g, 0));
    memset(&ap, 0, sizeof(ap));
    ap.poolProps.allocType = cudaMemAllocationTypePinned;
    ap.poolProps.location.type = cudaMemLocationTypeDevice;
    ap.poolProps.location.id = 0;
    ap.bytesize = N * sizeof(unsigned int);
    CK(cudaGraphAddMemAllocNode(&na, g, NULL, 0, &ap));
    EXPECT(ap.dptr != NULL, "allocation node: no address");
    p = (unsigned int *)ap.dptr;
    memset(&got, 0, sizeof(got));
    CK(cudaGraphMemAllocNodeGetParams(na, &got));
    EXPECT(got.dptr == ap.dptr && got.bytesize == ap.bytesize, "allocation node params");
    args[0] = &p;
    args[1] = &n;
    args[2] = &v;
    memset(&kp, 0, sizeof(kp));
    kp.func = (void *)gm_fill;
    kp.gridDim = dim3(N / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    CK(cudaGraphAddKernelNode(&nk, g, &na, 1, &kp));
    CK(cudaGraphAddMemcpyNode1D(&nc, g, &nk, 1, out, p, N * sizeof(unsigned int),
                                cudaMemcpyDeviceToDevice));
    CK(cudaGraphAddMemFreeNode(&nf, g, &nc, 1, p));
    CK(cudaGraphMemFreeNodeGetParams(nf, &fp));
    EXPECT(fp == p, "free node params");
    CK(cudaGraphInstantiate(&x, g, 0));
    for (int k = 0; k < 2; k++) {
        CK(cudaMemsetAsync(out, 0, N * sizeof(unsigned int), s));
        CK(cudaGraphLaunch(x, s));
        CK(cudaStreamSynchronize(s));
        check("allocation node", out, 0x1000);
    }
    /* Freed in the graph, the memory stays the graph's until a trim
     * (measured natively on the H200, driver 580): used, never more than
     * reserved. */
    EXPECT(gm_attr(cudaGraphMemAttrUsedMemCurrent) <=
               gm_attr(cudaGraphMemAttrReservedMemCurrent),
           "graph memory used past what is reserved");
    EXPECT(gm_attr(cudaGraphMemAttrReservedMemCurrent) >= N * sizeof(unsigned int),
           "no graph memory reserved");
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
    CK(cudaDeviceGraphMemTrim(0));
}

/* cudaMallocAsync / cudaFreeAsync in a capture: memory nodes. */
static void captured(cudaStream_t s, unsigned int *out)
{
    cudaGraph_t g;
    cudaGraphExec_t x;
    cudaStreamCaptureStatus st;
    unsigned int *p = NULL;
    size_t n = 0;

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMallocAsync((void **)&p, N * sizeof(unsigned int), s));
    gm_fill<<<N / 256, 256, 0, s>>>(p, N, 0x2000);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(out, p, N * sizeof(unsigned int), cudaMemcpyDeviceToDevice, s));
    CK(cudaFreeAsync(p, s));
    CK(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusActive, "capture invalidated by cudaMallocAsync");
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphGetNodes(g, NULL, &n));
    EXPECT(n == 4, "captured graph: %zu nodes, want 4", n);
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    check("captured allocation", out, 0x2000);
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));

    /* Allocated by the graph, freed outside it after each launch. */
    p = NULL;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMallocAsync((void **)&p, N * sizeof(unsigned int), s));
    gm_fill<<<N / 256, 256, 0, s>>>(p, N, 0x3000);
    CK(cudaGetLastError());
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&x, g, 0));
    for (int k = 0; k < 2; k++) {
        CK(cudaGraphLaunch(x, s));
        CK(cudaStreamSynchronize(s));
        check("a graph's allocation after the graph", p, 0x3000);
        if (k == 0)
            CK(cudaFreeAsync(p, s));
        else
            CK(cudaFree(p));
        CK(cudaStreamSynchronize(s));
    }
    EXPECT(cudaFreeAsync(out + 1, s) == cudaErrorInvalidValue, "a free of no allocation");
    (void)cudaGetLastError();
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
}

static cudaGraph_t cond_node(cudaGraph_t g, cudaGraphConditionalHandle h,
                             cudaGraphConditionalNodeType type, unsigned int size,
                             cudaGraph_t *bodies)
{
    /* As NVIDIA's samples make one: the union has no default constructor. */
    cudaGraphNodeParams np = { cudaGraphNodeTypeConditional };
    cudaGraphNode_t n;

    np.conditional.handle = h;
    np.conditional.type = type;
    np.conditional.size = size;
    CK(cudaGraphAddNode(&n, g, NULL, NULL, 0, &np));
    /* The bodies: an array the call gives, the node's. */
    EXPECT(np.conditional.phGraph_out != NULL, "no body graphs");
    memcpy(bodies, np.conditional.phGraph_out, size * sizeof(*bodies));
    return bodies[0];
}

static void conditional(cudaStream_t s, unsigned int *ctr, unsigned int *flag)
{
    cudaGraph_t g, wb[1], ib[2];
    cudaGraphExec_t x;
    cudaGraphNode_t n;
    cudaGraphConditionalHandle hw, hi;
    cudaMemsetParams mp;
    unsigned int limit = 7, c = 0, f = 0;

    CK(cudaMemset(ctr, 0, sizeof(unsigned int)));
    CK(cudaMemset(flag, 0, sizeof(unsigned int)));
    CK(cudaGraphCreate(&g, 0));
    CK(cudaGraphConditionalHandleCreate(&hw, g, 1, cudaGraphCondAssignDefault));
    CK(cudaGraphConditionalHandleCreate(&hi, g, 0, cudaGraphCondAssignDefault));
    cond_node(g, hw, cudaGraphCondTypeWhile, 1, wb);
    /* The while body by a capture into it, as NVIDIA's samples fill one;
     * the capture's end need not ask for the graph. */
    CK(cudaStreamBeginCaptureToGraph(s, wb[0], NULL, NULL, 0, cudaStreamCaptureModeGlobal));
    gm_count<<<1, 32, 0, s>>>(ctr, limit, hw);
    CK(cudaGetLastError());
    CK(cudaStreamEndCapture(s, NULL));
    /* if (0) flag = 1 else flag = 2 */
    cond_node(g, hi, cudaGraphCondTypeIf, 2, ib);
    memset(&mp, 0, sizeof(mp));
    mp.dst = flag;
    mp.elementSize = 4;
    mp.width = 1;
    mp.height = 1;
    mp.value = 1;
    CK(cudaGraphAddMemsetNode(&n, ib[0], NULL, 0, &mp));
    mp.value = 2;
    CK(cudaGraphAddMemsetNode(&n, ib[1], NULL, 0, &mp));
    EXPECT(cudaGraphDestroy(wb[0]) == cudaErrorInvalidValue, "a body graph destroyed alone");
    (void)cudaGetLastError();
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphLaunch(x, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(&c, ctr, sizeof(c), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(&f, flag, sizeof(f), cudaMemcpyDeviceToHost));
    EXPECT(c == limit, "while node: counter %u, want %u", c, limit);
    EXPECT(f == 2, "if/else node: flag %u, want 2", f);
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
}

int main(void)
{
    cudaStream_t s;
    unsigned int *out, *ctr;

    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&out, N * sizeof(unsigned int)));
    CK(cudaMalloc(&ctr, 2 * sizeof(unsigned int)));
    by_hand(s, out);
    captured(s, out);
    conditional(s, ctr, ctr + 1);
    CK(cudaFree(out));
    CK(cudaFree(ctr));
    CK(cudaStreamDestroy(s));
    vcu_test_pass();
    return 0;
}
