/*
 * Child graph nodes, event record and wait nodes, instantiation with
 * parameters and user objects, as NVIDIA's runtime and PyTorch-style code
 * use them:
 *   - a graph holding a child graph (a kernel and a copy), its node's own
 *     graph read back and added to, the exec's child set from another
 *     graph of the same shape; a graph that would hold itself refused;
 *   - event record and wait nodes ordering two streams' graphs, timing a
 *     kernel, their events read, changed in the graph and in an exec;
 *   - cuGraphInstantiateWithParams with an upload stream, its result;
 *   - user objects whose destructor runs exactly once, when the last
 *     reference goes: the caller's, a graph's, a child node's copy, an
 *     exec's (after the exec is destroyed); releases beyond what is held
 *     refused.
 * Every result checked against the CPU.
 */
#include <time.h>

#include "vcu_drv_test.h"

#define N 256

static volatile int dtor_a, dtor_b, dtor_c;

static void on_a(void *p)
{
    (void)p;
    __atomic_add_fetch(&dtor_a, 1, __ATOMIC_SEQ_CST);
}

static void on_b(void *p)
{
    TRUE(p == (void *)&dtor_b);
    __atomic_add_fetch(&dtor_b, 1, __ATOMIC_SEQ_CST);
}

static void on_c(void *p)
{
    (void)p;
    __atomic_add_fetch(&dtor_c, 1, __ATOMIC_SEQ_CST);
}

/* Destructors run on a thread of their own: waits up to 10 s for *v to
 * reach want, then a little longer to see it stays there. */
static void wait_count(volatile int *v, int want, const char *what)
{
    struct timespec ts = { 0, 10 * 1000 * 1000 };
    int i;

    for (i = 0; i < 1000 && __atomic_load_n(v, __ATOMIC_SEQ_CST) < want; i++)
        nanosleep(&ts, NULL);
    for (i = 0; i < 10; i++)
        nanosleep(&ts, NULL);
    if (__atomic_load_n(v, __ATOMIC_SEQ_CST) != want) {
        printf("FAIL %s: destructor ran %d times, want %d\n", what, *v, want);
        exit(1);
    }
}

static void check_f(CUdeviceptr d, const float *x, const float *y, const char *what)
{
    float h[N];
    int i;

    CK(cuMemcpyDtoH(h, d, sizeof(h)));
    for (i = 0; i < N; i++)
        if (h[i] != x[i] + y[i]) {
            printf("FAIL %s[%d] = %g, want %g\n", what, i, h[i], x[i] + y[i]);
            exit(1);
        }
}

static void check_u32(CUdeviceptr d, unsigned int v, const char *what)
{
    unsigned int h[N];
    int i;

    CK(cuMemcpyDtoH(h, d, sizeof(h)));
    for (i = 0; i < N; i++)
        if (h[i] != v) {
            printf("FAIL %s[%d] = %u, want %u\n", what, i, h[i], v);
            exit(1);
        }
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

static void kernel1d(CUDA_KERNEL_NODE_PARAMS *k, CUfunction f, void **args)
{
    memset(k, 0, sizeof(*k));
    k->func = f;
    k->gridDimX = N / 64;
    k->gridDimY = k->gridDimZ = 1;
    k->blockDimX = 64;
    k->blockDimY = k->blockDimZ = 1;
    k->kernelParams = args;
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
    CUstream s, s2;
    CUdeviceptr a, b, c, d, e, p, q;
    CUgraph child, other, parent, emb, emb2, g1, g2, gt, gu;
    CUgraphExec x, x1, x2, xt, xu;
    CUgraphNode nk, nc, nchild, nset, nr, nw, nfill, ncp, nt0, nt1, nte, ne, nbad;
    CUgraphNodeType t;
    CUgraphNodeParams np;
    CUDA_KERNEL_NODE_PARAMS kp;
    CUDA_MEMCPY3D cp;
    CUDA_MEMSET_NODE_PARAMS sp;
    CUDA_GRAPH_INSTANTIATE_PARAMS ip;
    CUevent ev, ev2, ev3, t0, t1, got;
    CUuserObject ua, ub, uc;
    float ha[N], hb[N], zero[N], ms = -1.0f;
    int cnt = N, i;
    char pad = 0;
    unsigned long long v = 40;
    unsigned int step = 3;
    void *vargs[] = { &a, &b, &c, &cnt };
    void *wargs[] = { &b, &b, &c, &cnt };
    void *fargs[] = { &p, &pad, &v, &step, &cnt };
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
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&a, N * 4));
    CK(cuMemAlloc(&b, N * 4));
    CK(cuMemAlloc(&c, N * 4));
    CK(cuMemAlloc(&d, N * 4));
    CK(cuMemAlloc(&e, N * 4));
    CK(cuMemAlloc(&p, N * 4));
    CK(cuMemAlloc(&q, N * 4));
    for (i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = (float)(5 * i + 2);
        zero[i] = 0.0f;
    }
    CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
    CK(cuMemcpyHtoD(b, hb, sizeof(hb)));

    /* ---- child graphs ---- */
    /* child: c = a + b, then d = c.  parent: child -> memset e = 9. */
    CK(cuGraphCreate(&child, 0));
    kernel1d(&kp, vadd, vargs);
    CK(cuGraphAddKernelNode(&nk, child, NULL, 0, &kp));
    copy1d(&cp, c, d);
    CK(cuGraphAddMemcpyNode(&nc, child, &nk, 1, &cp, ctx));
    CK(cuGraphCreate(&parent, 0));
    CK(cuGraphAddChildGraphNode(&nchild, parent, NULL, 0, child));
    set1d(&sp, e, 9);
    CK(cuGraphAddMemsetNode(&nset, parent, &nchild, 1, &sp, ctx));
    CK(cuGraphNodeGetType(nchild, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_GRAPH);
    /* The child was cloned: a node added to it now is not in parent. */
    set1d(&sp, q, 77);
    CK(cuGraphAddMemsetNode(&ne, child, &nc, 1, &sp, ctx));
    CK(cuGraphInstantiateWithFlags(&x, parent, 0));
    CK(cuMemsetD32(q, 0, N));
    run(x, s);
    check_f(c, ha, hb, "child c");
    check_f(d, ha, hb, "child d");
    check_u32(e, 9, "parent e");
    check_u32(q, 0, "clone q");
    /* The node's own graph: the same handle each time, two nodes, not
     * destroyable; what is added to it runs in execs made after. */
    CK(cuGraphChildGraphNodeGetGraph(nchild, &emb));
    CK(cuGraphChildGraphNodeGetGraph(nchild, &emb2));
    TRUE(emb == emb2 && emb != child);
    {
        size_t n = 0;

        CK(cuGraphGetNodes(emb, NULL, &n));
        TRUE(n == 2);
    }
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(emb));
    set1d(&sp, q, 11);
    CK(cuGraphAddMemsetNode(&ne, emb, NULL, 0, &sp, ctx));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphInstantiateWithFlags(&x, parent, 0));
    run(x, s);
    check_u32(q, 11, "embedded q");
    /* A graph may not hold itself, nor a graph holding it. */
    TRUE(cuGraphAddChildGraphNode(&nbad, parent, NULL, 0, parent) != CUDA_SUCCESS);
    TRUE(cuGraphAddChildGraphNode(&nbad, emb, NULL, 0, parent) != CUDA_SUCCESS);
    /* Wrong node kinds. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphChildGraphNodeGetGraph(nset, &emb2));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphEventRecordNodeGetEvent(nchild, &got));
    /* The exec's child from another graph of that shape: c = b + b. */
    CK(cuGraphCreate(&other, 0));
    kernel1d(&kp, vadd, wargs);
    CK(cuGraphAddKernelNode(&nk, other, NULL, 0, &kp));
    copy1d(&cp, c, d);
    CK(cuGraphAddMemcpyNode(&nc, other, &nk, 1, &cp, ctx));
    set1d(&sp, q, 12);
    CK(cuGraphAddMemsetNode(&ne, other, NULL, 0, &sp, ctx));
    CK(cuGraphExecChildGraphNodeSetParams(x, nchild, other));
    run(x, s);
    check_f(d, hb, hb, "set child d");
    check_u32(q, 12, "set child q");
    /* ... but not one of another shape. */
    TRUE(cuGraphExecChildGraphNodeSetParams(x, nchild, child) != CUDA_SUCCESS);
    CK(cuGraphExecDestroy(x));
    /* The generic call makes one too. */
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_GRAPH;
    np.graph.graph = child;
    CK(cuGraphAddNode(&nbad, other, NULL, NULL, 0, &np));
    CK(cuGraphNodeGetType(nbad, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_GRAPH);
    CK(cuGraphDestroy(other));
    CK(cuGraphDestroy(child));

    /* ---- event record and wait nodes ---- */
    /* g1 on s: p = fill, then record ev.  g2 on s2: wait ev, then q = p. */
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ev3, CU_EVENT_DISABLE_TIMING));
    CK(cuGraphCreate(&g1, 0));
    kernel1d(&kp, fill, fargs);
    CK(cuGraphAddKernelNode(&nfill, g1, NULL, 0, &kp));
    CK(cuGraphAddEventRecordNode(&nr, g1, &nfill, 1, ev));
    CK(cuGraphCreate(&g2, 0));
    CK(cuGraphAddEventWaitNode(&nw, g2, NULL, 0, ev));
    copy1d(&cp, p, q);
    CK(cuGraphAddMemcpyNode(&ncp, g2, &nw, 1, &cp, ctx));
    CK(cuGraphNodeGetType(nr, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_EVENT_RECORD);
    CK(cuGraphNodeGetType(nw, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_WAIT_EVENT);
    CK(cuGraphEventRecordNodeGetEvent(nr, &got));
    TRUE(got == ev);
    CK(cuGraphEventWaitNodeGetEvent(nw, &got));
    TRUE(got == ev);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphEventWaitNodeGetEvent(nr, &got));
    CK(cuGraphInstantiateWithFlags(&x1, g1, 0));
    CK(cuGraphInstantiateWithFlags(&x2, g2, 0));
    CK(cuMemsetD32(p, 0, N));
    CK(cuMemsetD32(q, 0, N));
    CK(cuCtxSynchronize());
    CK(cuGraphLaunch(x1, s));
    CK(cuGraphLaunch(x2, s2));
    CK(cuStreamSynchronize(s2));
    CK(cuEventSynchronize(ev));
    {
        unsigned int h[N];

        CK(cuMemcpyDtoH(h, q, sizeof(h)));
        for (i = 0; i < N; i++)
            TRUE(h[i] == 40u + 3u * (unsigned int)i);
    }
    CK(cuStreamSynchronize(s));
    /* The events changed: in the graph (then instantiated), in execs. */
    CK(cuGraphEventRecordNodeSetEvent(nr, ev2));
    CK(cuGraphEventWaitNodeSetEvent(nw, ev2));
    CK(cuGraphEventRecordNodeGetEvent(nr, &got));
    TRUE(got == ev2);
    CK(cuGraphExecEventRecordNodeSetEvent(x1, nr, ev3));
    CK(cuGraphExecEventWaitNodeSetEvent(x2, nw, ev3));
    CK(cuMemsetD32(q, 0, N));
    CK(cuCtxSynchronize());
    v = 41;
    CK(cuGraphLaunch(x1, s));
    CK(cuGraphLaunch(x2, s2));
    CK(cuStreamSynchronize(s2));
    CK(cuEventQuery(ev3));
    {
        unsigned int h[N];

        CK(cuMemcpyDtoH(h, q, sizeof(h)));
        for (i = 0; i < N; i++)
            TRUE(h[i] == 40u + 3u * (unsigned int)i);   /* the node kept its parameters */
    }
    CK(cuStreamSynchronize(s));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphEventRecordNodeSetEvent(nw, ev));
    CK(cuGraphExecDestroy(x1));
    CK(cuGraphExecDestroy(x2));
    CK(cuGraphDestroy(g1));
    CK(cuGraphDestroy(g2));
    /* Record nodes around a kernel time it. */
    CK(cuEventCreate(&t0, 0));
    CK(cuEventCreate(&t1, 0));
    CK(cuGraphCreate(&gt, 0));
    CK(cuGraphAddEventRecordNode(&nt0, gt, NULL, 0, t0));
    kernel1d(&kp, vadd, vargs);
    CK(cuGraphAddKernelNode(&nte, gt, &nt0, 1, &kp));
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    np.eventRecord.event = t1;
    CK(cuGraphAddNode(&nt1, gt, &nte, NULL, 1, &np));
    CK(cuGraphInstantiateWithFlags(&xt, gt, 0));
    run(xt, s);
    CK(cuEventElapsedTime(&ms, t0, t1));
    TRUE(ms >= 0.0f);
    CK(cuGraphExecDestroy(xt));
    CK(cuGraphDestroy(gt));

    /* ---- instantiation with parameters ---- */
    CK(cuGraphCreate(&gu, 0));
    kernel1d(&kp, vadd, vargs);
    CK(cuGraphAddKernelNode(&nk, gu, NULL, 0, &kp));
    memset(&ip, 0, sizeof(ip));
    ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    ip.hUploadStream = s;
    ip.result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    CK(cuGraphInstantiateWithParams(&xu, gu, &ip));
    TRUE(ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS);
    TRUE(ip.hErrNode_out == NULL);
    CK(cuMemcpyHtoD(c, zero, sizeof(zero)));
    run(xu, s);
    check_f(c, ha, hb, "with params");
    CK(cuGraphExecDestroy(xu));
    memset(&ip, 0, sizeof(ip));
    ip.flags = 1ull << 40;
    TRUE(cuGraphInstantiateWithParams(&xu, gu, &ip) != CUDA_SUCCESS);

    /* ---- user objects ---- */
    /* a: the caller's two references, released one by one. */
    CK(cuUserObjectCreate(&ua, NULL, on_a, 2, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CK(cuUserObjectRelease(ua, 1));
    wait_count(&dtor_a, 0, "a, one reference left");
    CK(cuUserObjectRetain(ua, 1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuUserObjectRelease(ua, 3));   /* more than held */
    CK(cuUserObjectRelease(ua, 2));
    wait_count(&dtor_a, 1, "a");
    /* b: moved to a graph, held by its exec after the graph is gone. */
    CK(cuUserObjectCreate(&ub, (void *)&dtor_b, on_b, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CK(cuGraphRetainUserObject(gu, ub, 1, CU_GRAPH_USER_OBJECT_MOVE));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphReleaseUserObject(gu, ub, 2));
    CK(cuGraphInstantiateWithFlags(&xu, gu, 0));
    CK(cuGraphDestroy(gu));
    wait_count(&dtor_b, 0, "b, held by the exec");
    CK(cuMemcpyHtoD(c, zero, sizeof(zero)));
    CK(cuGraphLaunch(xu, s));
    CK(cuGraphExecDestroy(xu));
    CK(cuStreamSynchronize(s));
    check_f(c, ha, hb, "user object's exec");
    wait_count(&dtor_b, 1, "b");
    /* c: a child graph's reference, copied into the parent's node. */
    CK(cuUserObjectCreate(&uc, NULL, on_c, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
    CK(cuGraphCreate(&child, 0));
    CK(cuGraphAddEmptyNode(&ne, child, NULL, 0));
    CK(cuGraphRetainUserObject(child, uc, 1, 0));
    CK(cuUserObjectRelease(uc, 1));
    CK(cuGraphCreate(&other, 0));
    CK(cuGraphAddChildGraphNode(&nchild, other, NULL, 0, child));
    CK(cuGraphReleaseUserObject(child, uc, 1));
    CK(cuGraphDestroy(child));
    wait_count(&dtor_c, 0, "c, held by the child node");
    CK(cuGraphDestroy(other));
    wait_count(&dtor_c, 1, "c");

    CK(cuGraphDestroy(parent));
    CK(cuEventDestroy(ev));
    CK(cuEventDestroy(ev2));
    CK(cuEventDestroy(ev3));
    CK(cuEventDestroy(t0));
    CK(cuEventDestroy(t1));
    CK(cuStreamDestroy(s));
    CK(cuStreamDestroy(s2));
    CK(cuModuleUnload(mod));
    free(fatbin);
    printf("PASS drv_graphchild\n");
    return 0;
}
