/*
 * Graph editing and executable graph updates, as cuda-samples'
 * simpleCudaGraphs and jacobiCudaGraphs and PyTorch-style code do them:
 * a graph of a kernel with padded parameters, a kernel, a memset, a copy
 * and a host node, instantiated; each node's parameters changed in the
 * exec alone (cuGraphExec*NodeSetParams, cuGraphExecNodeSetParams), a
 * node disabled and enabled, the graph's own parameters read and changed
 * and the exec updated from it (cuGraphExecUpdate) or from a clone;
 * updates a changed topology refuses (a node added, an edge removed), and
 * the nodes, roots, edges, dependencies and types listed.  Every result
 * checked against the CPU.
 */
#include "vcu_drv_test.h"

#define N 256

static volatile int hits_a, hits_b;

static void count_a(void *p)
{
    (void)p;
    hits_a++;
}

static void count_b(void *p)
{
    (void)p;
    hits_b++;
}

static void get_u32(CUdeviceptr d, unsigned int *h)
{
    CK(cuMemcpyDtoH(h, d, N * sizeof(*h)));
}

/* p[i] = v + i * step + pad, as vcu_drv_fill writes it. */
static void check_fill(CUdeviceptr p, unsigned long long v, unsigned int step, char pad)
{
    unsigned int h[N];
    int i;

    get_u32(p, h);
    for (i = 0; i < N; i++)
        if (h[i] != (unsigned int)v + (unsigned int)i * step + (unsigned int)pad) {
            printf("FAIL fill[%d] = %u, want %u\n", i, h[i],
                   (unsigned int)v + (unsigned int)i * step + (unsigned int)pad);
            exit(1);
        }
}

static void check_f(CUdeviceptr d, const float *x, const float *y, const char *what)
{
    float h[N];
    int i;

    CK(cuMemcpyDtoH(h, d, sizeof(h)));
    for (i = 0; i < N; i++)
        if (h[i] != x[i] + (y != NULL ? y[i] : 0.0f)) {
            printf("FAIL %s[%d] = %g, want %g\n", what, i, h[i], x[i] + (y != NULL ? y[i] : 0.0f));
            exit(1);
        }
}

static void check_set(CUdeviceptr s, unsigned int v)
{
    unsigned int h[N];
    int i;

    get_u32(s, h);
    for (i = 0; i < N; i++)
        if (h[i] != v) {
            printf("FAIL set[%d] = %u, want %u\n", i, h[i], v);
            exit(1);
        }
}

static int has(const CUgraphNode *v, size_t n, CUgraphNode x)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

static void copy1d(CUDA_MEMCPY3D *m, CUdeviceptr src, CUdeviceptr dst)
{
    memset(m, 0, sizeof(*m));
    m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m->srcDevice = src;
    m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m->dstDevice = dst;
    m->WidthInBytes = N * sizeof(float);
    m->Height = 1;
    m->Depth = 1;
}

static void set1d(CUDA_MEMSET_NODE_PARAMS *m, CUdeviceptr dst, unsigned int v)
{
    memset(m, 0, sizeof(*m));
    m->dst = dst;
    m->value = v;
    m->elementSize = 4;
    m->width = N;
    m->height = 1;
}

static void run(CUgraphExec x, CUstream s)
{
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction vadd, fill;
    CUstream s;
    CUdeviceptr a, b, c, p, d, st;
    CUgraph g, g2;
    CUgraphExec x;
    CUgraphNode nf, nk, ns, nc, nh, nk2, nf2, nh2, ne, list[8], from[8], to[8];
    CUgraphNodeType t;
    CUDA_KERNEL_NODE_PARAMS kp, kq;
    CUDA_MEMCPY3D cp, cq;
    CUDA_MEMSET_NODE_PARAMS sp, sq;
    CUDA_HOST_NODE_PARAMS hp, hq;
    CUgraphNodeParams np;
    CUgraphExecUpdateResultInfo info;
    unsigned int en = 7;
    size_t n;
    float ha[N], hb[N], twice_a[N], twice_b[N];
    int cnt = N, i;
    char pad = 1;
    unsigned long long v = 100;
    unsigned int step = 2;
    void *fargs[] = { &p, &pad, &v, &step, &cnt };
    void *vargs[] = { &a, &b, &c, &cnt };
    void *fatbin;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&vadd, mod, "vcu_drv_vadd"));
    CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&a, N * 4));
    CK(cuMemAlloc(&b, N * 4));
    CK(cuMemAlloc(&c, N * 4));
    CK(cuMemAlloc(&p, N * 4));
    CK(cuMemAlloc(&d, N * 4));
    CK(cuMemAlloc(&st, N * 4));
    for (i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = (float)(3 * i + 1);
        twice_a[i] = 2.0f * ha[i];
        twice_b[i] = 2.0f * hb[i];
    }
    CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
    CK(cuMemcpyHtoD(b, hb, sizeof(hb)));

    /* F (fill) -> K (vadd) -> S (memset) -> C (copy c to d) -> H (host) */
    CK(cuGraphCreate(&g, 0));
    memset(&kp, 0, sizeof(kp));
    kp.func = fill;
    kp.gridDimX = N / 64;
    kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 64;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = fargs;
    CK(cuGraphAddKernelNode(&nf, g, NULL, 0, &kp));
    kq = kp;
    kq.func = vadd;
    kq.kernelParams = vargs;
    CK(cuGraphAddKernelNode(&nk, g, &nf, 1, &kq));
    set1d(&sp, st, 5);
    CK(cuGraphAddMemsetNode(&ns, g, &nk, 1, &sp, ctx));
    copy1d(&cp, c, d);
    CK(cuGraphAddMemcpyNode(&nc, g, &ns, 1, &cp, ctx));
    hp.fn = count_a;
    hp.userData = NULL;
    CK(cuGraphAddHostNode(&nh, g, &nc, 1, &hp));
    CK(cuGraphInstantiateWithFlags(&x, g, 0));
    run(x, s);
    check_fill(p, 100, 2, 1);
    check_f(c, ha, hb, "c");
    check_set(st, 5);
    check_f(d, ha, hb, "d");
    TRUE(hits_a == 1 && hits_b == 0);

    /* The graph's shape: nodes, roots, edges, dependencies, types. */
    n = 0;
    CK(cuGraphGetNodes(g, NULL, &n));
    TRUE(n == 5);
    n = 8;
    CK(cuGraphGetNodes(g, list, &n));
    TRUE(n == 5 && has(list, 5, nf) && has(list, 5, nk) && has(list, 5, ns) &&
         has(list, 5, nc) && has(list, 5, nh) && list[5] == NULL);
    n = 8;
    CK(cuGraphGetRootNodes(g, list, &n));
    TRUE(n == 1 && list[0] == nf);
    n = 0;
    CK(cuGraphGetEdges(g, NULL, NULL, NULL, &n));
    TRUE(n == 4);
    n = 8;
    CK(cuGraphGetEdges(g, from, to, NULL, &n));
    TRUE(n == 4);
    for (i = 0; i < 4; i++)
        TRUE((from[i] == nf && to[i] == nk) || (from[i] == nk && to[i] == ns) ||
             (from[i] == ns && to[i] == nc) || (from[i] == nc && to[i] == nh));
    n = 8;
    CK(cuGraphNodeGetDependencies(nk, list, NULL, &n));
    TRUE(n == 1 && list[0] == nf);
    n = 8;
    CK(cuGraphNodeGetDependentNodes(nk, list, NULL, &n));
    TRUE(n == 1 && list[0] == ns);
    n = 8;
    CK(cuGraphNodeGetDependentNodes(nh, list, NULL, &n));
    TRUE(n == 0);
    CK(cuGraphNodeGetType(nf, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_KERNEL);
    CK(cuGraphNodeGetType(ns, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_MEMSET);
    CK(cuGraphNodeGetType(nc, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_MEMCPY);
    CK(cuGraphNodeGetType(nh, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_HOST);

    /* The nodes' parameters as given. */
    memset(&kq, 0, sizeof(kq));
    CK(cuGraphKernelNodeGetParams(nf, &kq));
    TRUE(kq.func == fill && kq.gridDimX == N / 64 && kq.blockDimX == 64 &&
         kq.kernelParams != NULL);
    TRUE(*(CUdeviceptr *)kq.kernelParams[0] == p && *(char *)kq.kernelParams[1] == 1 &&
         *(unsigned long long *)kq.kernelParams[2] == 100 &&
         *(unsigned int *)kq.kernelParams[3] == 2 && *(int *)kq.kernelParams[4] == N);
    CK(cuGraphMemsetNodeGetParams(ns, &sq));
    TRUE(sq.dst == st && sq.value == 5 && sq.elementSize == 4 && sq.width == N);
    CK(cuGraphMemcpyNodeGetParams(nc, &cq));
    TRUE(cq.srcDevice == c && cq.dstDevice == d && cq.WidthInBytes == N * 4);
    CK(cuGraphHostNodeGetParams(nh, &hq));
    TRUE(hq.fn == count_a);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphKernelNodeGetParams(ns, &kq));

    /* Each node changed in the exec alone. */
    pad = 2;
    v = 1000;
    step = 3;
    CK(cuGraphExecKernelNodeSetParams(x, nf, &kp));
    pad = 1;
    v = 100;
    step = 2;
    set1d(&sq, st, 9);
    CK(cuGraphExecMemsetNodeSetParams(x, ns, &sq, ctx));
    copy1d(&cq, a, d);
    CK(cuGraphExecMemcpyNodeSetParams(x, nc, &cq, ctx));
    hq.fn = count_b;
    CK(cuGraphExecHostNodeSetParams(x, nh, &hq));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecKernelNodeSetParams(x, ns, &kp));
    run(x, s);
    check_fill(p, 1000, 3, 2);
    check_set(st, 9);
    check_f(d, ha, NULL, "d");
    TRUE(hits_a == 1 && hits_b == 1);
    CK(cuGraphKernelNodeGetParams(nf, &kq));
    TRUE(*(unsigned long long *)kq.kernelParams[2] == 100);

    /* Through the generic call. */
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_MEMSET;
    np.memset.dst = st;
    np.memset.value = 11;
    np.memset.elementSize = 4;
    np.memset.width = N;
    np.memset.height = 1;
    CK(cuGraphExecNodeSetParams(x, ns, &np));
    run(x, s);
    check_set(st, 11);

    /* A node disabled runs as an empty one. */
    CK(cuGraphNodeSetEnabled(x, nk, 0));
    CK(cuGraphNodeGetEnabled(x, nk, &en));
    TRUE(en == 0);
    CK(cuMemsetD32(c, 0, N));
    run(x, s);
    {
        unsigned int h[N];

        get_u32(c, h);
        for (i = 0; i < N; i++)
            TRUE(h[i] == 0);
    }
    CK(cuGraphNodeSetEnabled(x, nk, 1));
    CK(cuGraphNodeGetEnabled(x, nk, &en));
    TRUE(en == 1);
    run(x, s);
    check_f(c, ha, hb, "c");
    TRUE(hits_b == 4);

    /* The graph changed, the exec updated from it: every node as the
     * graph has it again. */
    kq = kp;
    kq.func = vadd;
    {
        void *aa[] = { &a, &a, &c, &cnt };

        kq.kernelParams = aa;
        CK(cuGraphKernelNodeSetParams(nk, &kq));
    }
    CK(cuGraphKernelNodeGetParams(nk, &kq));
    TRUE(kq.func == vadd && *(CUdeviceptr *)kq.kernelParams[1] == a);
    np.memset.value = 7;
    CK(cuGraphNodeSetParams(ns, &np));
    CK(cuGraphMemsetNodeGetParams(ns, &sq));
    TRUE(sq.value == 7);
    memset(&info, 0, sizeof(info));
    CK(cuGraphExecUpdate(x, g, &info));
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    run(x, s);
    check_fill(p, 100, 2, 1);
    check_f(c, twice_a, NULL, "c");
    check_set(st, 7);
    check_f(d, twice_a, NULL, "d");
    TRUE(hits_a == 2 && hits_b == 4);

    /* A clone: its nodes found, listed, changed. */
    CK(cuGraphClone(&g2, g));
    CK(cuGraphNodeFindInClone(&nk2, nk, g2));
    CK(cuGraphNodeFindInClone(&nf2, nf, g2));
    CK(cuGraphNodeFindInClone(&nh2, nh, g2));
    TRUE(nk2 != nk && nf2 != nf);
    CK(cuGraphNodeGetType(nk2, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_KERNEL);
    n = 8;
    CK(cuGraphGetNodes(g2, list, &n));
    TRUE(n == 5 && has(list, 5, nk2) && has(list, 5, nf2) && has(list, 5, nh2));
    n = 8;
    CK(cuGraphNodeGetDependencies(nk2, list, NULL, &n));
    TRUE(n == 1 && list[0] == nf2);

    /* A node more: the update is refused, and the exec keeps running
     * as it was. */
    CK(cuGraphAddEmptyNode(&ne, g2, &nh2, 1));
    memset(&info, 0, sizeof(info));
    EXPECT(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cuGraphExecUpdate(x, g2, &info));
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    CK(cuGraphDestroyNode(ne));
    n = 0;
    CK(cuGraphGetNodes(g2, NULL, &n));
    TRUE(n == 5);
    /* An edge fewer: refused too; back, accepted. */
    CK(cuGraphRemoveDependencies(g2, &nf2, &nk2, NULL, 1));
    n = 8;
    CK(cuGraphGetRootNodes(g2, list, &n));
    TRUE(n == 2 && has(list, 2, nf2) && has(list, 2, nk2));
    memset(&info, 0, sizeof(info));
    EXPECT(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cuGraphExecUpdate(x, g2, &info));
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    CK(cuGraphAddDependencies(g2, &nf2, &nk2, NULL, 1));
    {
        void *bb[] = { &b, &b, &c, &cnt };

        kq = kp;
        kq.func = vadd;
        kq.kernelParams = bb;
        CK(cuGraphKernelNodeSetParams(nk2, &kq));
    }
    memset(&info, 0, sizeof(info));
    CK(cuGraphExecUpdate(x, g2, &info));
    TRUE(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS);
    run(x, s);
    check_f(c, twice_b, NULL, "c");
    check_f(d, twice_b, NULL, "d");
    TRUE(hits_a == 3);
    /* The original is as it was. */
    CK(cuGraphKernelNodeGetParams(nk, &kq));
    TRUE(*(CUdeviceptr *)kq.kernelParams[0] == a);

    /* Programmatic edges between kernel nodes (XLA's command buffers add
     * them through cuGraphAddNode_v2): made with their data, listed with
     * it, run; a default edge lists as zeroes; reserved bytes refused. */
    {
        CUgraph g3;
        CUgraphExec x3;
        CUgraphNode k1, k2, k3;
        CUgraphEdgeData ed, eds[4];
        void *f2[] = { &d, &pad, &v, &step, &cnt };

        CK(cuGraphCreate(&g3, 0));
        CK(cuGraphAddKernelNode(&k1, g3, NULL, 0, &kp));
        memset(&np, 0, sizeof(np));
        np.type = CU_GRAPH_NODE_TYPE_KERNEL;
        memcpy(&np.kernel, &kp, sizeof(kp));
        np.kernel.kernelParams = f2;
        memset(&ed, 0, sizeof(ed));
        ed.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
        ed.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
        CK(cuGraphAddNode_v2(&k2, g3, &k1, &ed, 1, &np));
        CK(cuGraphAddEmptyNode(&k3, g3, &k2, 1));
        n = 4;
        memset(eds, 0xff, sizeof(eds));
        CK(cuGraphGetEdges_v2(g3, from, to, eds, &n));
        TRUE(n == 2);
        for (i = 0; i < 2; i++) {
            if (from[i] == k1) {
                TRUE(to[i] == k2 && eds[i].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
                     eds[i].from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC &&
                     eds[i].to_port == 0);
            } else {
                TRUE(from[i] == k2 && to[i] == k3 && eds[i].type == 0 &&
                     eds[i].from_port == 0);
            }
        }
        /* Listed without room for their data, such edges are a lossy
         * query, as the driver documents. */
        n = 4;
        EXPECT(CUDA_ERROR_LOSSY_QUERY, cuGraphGetEdges_v2(g3, from, to, NULL, &n));
        n = 4;
        EXPECT(CUDA_ERROR_LOSSY_QUERY, cuGraphNodeGetDependencies_v2(k2, list, NULL, &n));
        n = 4;
        memset(eds, 0, sizeof(eds));
        CK(cuGraphNodeGetDependencies_v2(k2, list, eds, &n));
        TRUE(n == 1 && list[0] == k1 && eds[0].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC);
        n = 4;
        memset(eds, 0, sizeof(eds));
        CK(cuGraphNodeGetDependentNodes_v2(k1, list, eds, &n));
        TRUE(n == 1 && list[0] == k2 &&
             eds[0].from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC);
        CK(cuMemsetD32(p, 0, N));
        CK(cuMemsetD32(d, 0, N));
        CK(cuGraphInstantiateWithFlags(&x3, g3, 0));
        run(x3, s);
        check_fill(p, 100, 2, 1);
        check_fill(d, 100, 2, 1);
        /* The edge goes with cuGraphRemoveDependencies_v2 given its data. */
        CK(cuGraphRemoveDependencies_v2(g3, &k1, &k2, &ed, 1));
        n = 0;
        CK(cuGraphGetEdges(g3, NULL, NULL, NULL, &n));
        TRUE(n == 1);
        ed.reserved[2] = 1;
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddDependencies_v2(g3, &k1, &k2, &ed, 1));
        CK(cuGraphExecDestroy(x3));
        CK(cuGraphDestroy(g3));
    }

    /* A kernel node of a library's kernel (kern) in a context named in
     * its parameters (ctx), added by a thread with no current context, as
     * XLA's command buffers do. */
    {
        CUlibrary lib;
        CUkernel kern;
        CUgraph g4;
        CUgraphExec x4;
        CUgraphNode k4;
        CUcontext none = NULL;

        CK(cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0));
        CK(cuLibraryGetKernel(&kern, lib, "vcu_drv_fill"));
        CK(cuGraphCreate(&g4, 0));
        kq = kp;
        kq.func = NULL;
        kq.kern = kern;
        kq.ctx = ctx;
        CK(cuCtxSetCurrent(NULL));
        CK(cuCtxGetCurrent(&none));
        TRUE(none == NULL);
        CK(cuGraphAddKernelNode_v2(&k4, g4, NULL, 0, &kq));
        CK(cuCtxSetCurrent(ctx));
        CK(cuMemsetD32(p, 0, N));
        CK(cuGraphInstantiateWithFlags(&x4, g4, 0));
        run(x4, s);
        check_fill(p, 100, 2, 1);
        CK(cuGraphExecDestroy(x4));
        CK(cuGraphDestroy(g4));
        CK(cuLibraryUnload(lib));
    }

    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g2));
    CK(cuGraphDestroy(g));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    free(fatbin);
    printf("PASS drv_graphupd\n");
    return 0;
}
