/*
 * Graph memory: allocation and free nodes added by hand (their address
 * fixed when the node is made, the same at every launch) and through the
 * generic cuGraphAddNode; stream-ordered allocations and frees captured
 * as such nodes (a capture that goes on, not one invalidated); memory a
 * graph allocated freed outside it; the device's graph memory attributes
 * and cuDeviceGraphMemTrim; the errors of each call.
 */
#include "vcu_drv_test.h"

#define N 4096                      /* words */

static void check_words(CUdeviceptr d, unsigned int want, const char *what)
{
    static unsigned int h[N];
    int i;

    CK(cuMemcpyDtoH(h, d, sizeof(h)));
    for (i = 0; i < N; i++)
        if (h[i] != want) {
            printf("FAIL %s: word %d = %#x, want %#x\n", what, i, h[i], want);
            exit(1);
        }
}

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(CUdevice dev, size_t size)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;

    memset(&p, 0, sizeof(p));
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = size;
    return p;
}

static CUDA_MEMSET_NODE_PARAMS set_params(CUdeviceptr d, unsigned int v)
{
    CUDA_MEMSET_NODE_PARAMS m;

    memset(&m, 0, sizeof(m));
    m.dst = d;
    m.value = v;
    m.elementSize = 4;
    m.width = N;
    m.height = 1;
    return m;
}

static CUDA_MEMCPY3D copy_params(CUdeviceptr dst, CUdeviceptr src)
{
    CUDA_MEMCPY3D c;

    memset(&c, 0, sizeof(c));
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = src;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = dst;
    c.WidthInBytes = N * 4;
    c.Height = 1;
    c.Depth = 1;
    return c;
}

static cuuint64_t attr(CUdevice dev, CUgraphMem_attribute a)
{
    cuuint64_t v = ~0ull;

    CK(cuDeviceGetGraphMemAttribute(dev, a, &v));
    return v;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream s, s2;
    CUevent ev1, ev2;
    CUdeviceptr out, out2, plain, p, q;
    CUgraph g, cg;
    CUgraphExec x;
    CUgraphNode na, ns, nc, nf, ne, nodes[4];
    CUgraphNodeParams np;
    CUDA_MEM_ALLOC_NODE_PARAMS ap, got;
    CUDA_MEMSET_NODE_PARAMS ms;
    CUDA_MEMCPY3D cp;
    CUgraphNodeType t;
    CUstreamCaptureStatus st;
    cuuint64_t v;
    size_t n;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&out, N * 4));
    CK(cuMemAlloc(&out2, N * 4));
    CK(cuMemAlloc(&plain, N * 4));

    /* ---- nodes added by hand: alloc -> memset -> copy out -> free ---- */
    CK(cuGraphCreate(&g, 0));
    ap = alloc_params(dev, N * 4);
    CK(cuGraphAddMemAllocNode(&na, g, NULL, 0, &ap));
    TRUE(ap.dptr != 0);
    p = ap.dptr;
    memset(&got, 0xa5, sizeof(got));
    CK(cuGraphMemAllocNodeGetParams(na, &got));
    TRUE(got.dptr == p && got.bytesize == N * 4);
    TRUE(got.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
         got.poolProps.location.id == dev);
    CK(cuGraphNodeGetType(na, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    ms = set_params(p, 0x5eed0001);
    CK(cuGraphAddMemsetNode(&ns, g, &na, 1, &ms, ctx));
    cp = copy_params(out, p);
    CK(cuGraphAddMemcpyNode(&nc, g, &ns, 1, &cp, ctx));
    CK(cuGraphAddMemFreeNode(&nf, g, &nc, 1, p));
    q = 0;
    CK(cuGraphMemFreeNodeGetParams(nf, &q));
    TRUE(q == p);
    CK(cuGraphNodeGetType(nf, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_MEM_FREE);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemFreeNodeGetParams(na, &q));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemAllocNodeGetParams(nf, &got));
    n = 0;
    CK(cuGraphGetNodes(g, NULL, &n));
    TRUE(n == 4);
    CK(cuGraphGetNodes(g, nodes, &n));
    TRUE(n == 4 && (nodes[0] == na || nodes[1] == na || nodes[2] == na || nodes[3] == na));

    /* Bad parameters. */
    ap = alloc_params(dev, 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode(&ne, g, NULL, 0, &ap));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode(&ne, g, NULL, 0, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(&ne, g, NULL, 0, plain));

    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_words(out, 0x5eed0001, "graph allocation, first launch");
    /* The address is the node's: the same at the next launch. */
    CK(cuMemsetD32(out, 0, N));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_words(out, 0x5eed0001, "graph allocation, second launch");
    /* Freed in the graph, it stays the graph's until a trim (measured
     * natively on the H200, driver 580): never past what is reserved. */
    TRUE(attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) <=
         attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    TRUE(attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) >= N * 4);
    TRUE(attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) >= N * 4);
    v = 0;
    CK(cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &v));
    /* Reset to what is used now (still the graph's, above). */
    TRUE(attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) ==
         attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
    v = 5;
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &v));
    v = 0;
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuDeviceSetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, NULL));
    EXPECT(CUDA_ERROR_INVALID_DEVICE,
           cuDeviceGetGraphMemAttribute(99, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    CK(cuDeviceGraphMemTrim(dev));
    TRUE(attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0);

    /* ---- the generic call: an allocation and an empty node ---- */
    CK(cuGraphCreate(&g, 0));
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    np.alloc.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    np.alloc.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    np.alloc.poolProps.location.id = dev;
    np.alloc.bytesize = N * 4;
    CK(cuGraphAddNode(&na, g, NULL, NULL, 0, &np));
    TRUE(np.alloc.dptr != 0);
    p = np.alloc.dptr;
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_MEMSET;
    np.memset.dst = p;
    np.memset.value = 0x77;
    np.memset.elementSize = 4;
    np.memset.width = N;
    np.memset.height = 1;
    np.memset.ctx = ctx;
    CK(cuGraphAddNode(&ns, g, &na, NULL, 1, &np));
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    np.memcpy.copyCtx = ctx;
    np.memcpy.copyParams = copy_params(out2, p);
    CK(cuGraphAddNode(&nc, g, &ns, NULL, 1, &np));
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    np.free.dptr = p;
    CK(cuGraphAddNode(&nf, g, &nc, NULL, 1, &np));
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_EMPTY;
    CK(cuGraphAddNode(&ne, g, &nf, NULL, 1, &np));
    CK(cuGraphNodeGetType(ne, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_EMPTY);
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_words(out2, 0x77, "cuGraphAddNode's allocation");
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    /* ---- captured: cuMemAllocAsync / cuMemFreeAsync become nodes ---- */
    CK(cuMemsetD32(out, 0, N));
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    p = 0;
    CK(cuMemAllocAsync(&p, N * 4, s));
    TRUE(p != 0);
    CK(cuMemsetD32Async(p, 0xc0ffee, N, s));
    CK(cuMemcpyDtoDAsync(out, p, N * 4, s));
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);            /* not invalidated */
    CK(cuStreamEndCapture(s, &cg));
    TRUE(cg != NULL);
    n = 0;
    CK(cuGraphGetNodes(cg, NULL, &n));
    TRUE(n == 4);
    CK(cuGraphInstantiate(&x, cg, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_words(out, 0xc0ffee, "captured allocation");
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(cg));

    /* A second stream joins the capture through an event, its work
     * rejoins the origin, and it is destroyed before the capture ends, as
     * NVIDIA's graphMemoryNodes does: the capture goes on (the host once
     * asked the stream whether work was pending, which invalidated it). */
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&ev1, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
    CK(cuMemsetD32(out, 0, N));
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    p = 0;
    CK(cuMemAllocAsync(&p, N * 4, s));
    CK(cuMemsetD32Async(p, 0x5a5a, N, s));
    CK(cuEventRecord(ev1, s));
    CK(cuStreamWaitEvent(s2, ev1, 0));
    CK(cuMemcpyDtoDAsync(out, p, N * 4, s2));
    CK(cuEventRecord(ev2, s2));
    CK(cuStreamWaitEvent(s, ev2, 0));
    CK(cuStreamDestroy(s2));
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CK(cuStreamEndCapture(s, &cg));
    CK(cuGraphInstantiate(&x, cg, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_words(out, 0x5a5a, "a capture whose joined stream was destroyed");
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(cg));
    CK(cuEventDestroy(ev1));
    CK(cuEventDestroy(ev2));

    /* Allocated by the graph, freed after it, outside: then again. */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    p = 0;
    CK(cuMemAllocAsync(&p, N * 4, s));
    CK(cuMemsetD32Async(p, 0xabc, N, s));
    CK(cuStreamEndCapture(s, &cg));
    CK(cuGraphInstantiate(&x, cg, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_words(p, 0xabc, "a graph's allocation after the graph");
    TRUE(attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) >= N * 4);
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    TRUE(attr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) <=
         attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    CK(cuGraphLaunch(x, s));
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(cg));
    CK(cuDeviceGraphMemTrim(dev));

    CK(cuMemFree(out));
    CK(cuMemFree(out2));
    CK(cuMemFree(plain));
    CK(cuStreamDestroy(s));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_graphmem\n");
    return 0;
}
