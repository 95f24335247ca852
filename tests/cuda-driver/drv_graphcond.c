/*
 * Conditional graph nodes (cuGraphConditionalHandleCreate, cuGraphAddNode
 * with CU_GRAPH_NODE_TYPE_CONDITIONAL): if, if/else and switch nodes
 * chosen by the handle's default value; a while node whose body kernel
 * ends the loop with cudaGraphSetConditional, handed the handle as a
 * kernel parameter (the value the driver gave, used on the GPU); body
 * graphs filled with the ordinary calls and by captures into them
 * (cuStreamBeginCaptureToGraph), not destroyable alone, gone with their
 * graph; the errors.
 */
#include "vcu_drv_test.h"

#define N 256                       /* words */

/* A conditional node; its body graphs into bodies[0..size-1], from the
 * array the call gives (cuda.h: CUDA-owned, valid for the node's life). */
static CUgraphNode cond_node(CUgraph g, CUgraphConditionalHandle h,
                             CUgraphConditionalNodeType type, unsigned int size,
                             CUgraph *bodies)
{
    CUgraphNodeParams np;
    CUgraphNode n = NULL;

    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = h;
    np.conditional.type = type;
    np.conditional.size = size;
    CK(cuCtxGetCurrent(&np.conditional.ctx));
    CK(cuGraphAddNode(&n, g, NULL, NULL, 0, &np));
    TRUE(np.conditional.phGraph_out != NULL);
    memcpy(bodies, np.conditional.phGraph_out, size * sizeof(*bodies));
    return n;
}

/* A memset of word i of buf to v, in body graph b. */
static void set_word(CUgraph b, CUdeviceptr buf, int i, unsigned int v)
{
    CUDA_MEMSET_NODE_PARAMS m;
    CUcontext ctx;
    CUgraphNode n;

    memset(&m, 0, sizeof(m));
    m.dst = buf + (CUdeviceptr)i * 4;
    m.value = v;
    m.elementSize = 4;
    m.width = 1;
    m.height = 1;
    CK(cuCtxGetCurrent(&ctx));
    CK(cuGraphAddMemsetNode(&n, b, NULL, 0, &m, ctx));
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction count;
    CUstream s;
    CUdeviceptr buf, ctr;
    CUgraph g, got, body[3], ebody[2], sbody[4], wbody[1];
    CUgraphExec x;
    CUgraphConditionalHandle h1, h0, he, hs, hw;
    CUgraphNodeParams np;
    CUgraphNode n;
    CUgraphNodeType t;
    CUDA_KERNEL_NODE_PARAMS kp;
    unsigned int hb[N], c, limit = 5;
    void *args[] = { &ctr, &limit, &hw };
    void *fatbin;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&count, mod, "vcu_drv_cond_count"));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&buf, sizeof(hb)));
    CK(cuMemAlloc(&ctr, 4));
    CK(cuMemsetD32(buf, 0, N));
    CK(cuMemsetD32(ctr, 0, 1));

    CK(cuGraphCreate(&g, 0));
    /* Handles, their default applied at each launch. */
    CK(cuGraphConditionalHandleCreate(&h1, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&h0, g, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&he, g, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&hs, g, ctx, 2, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&hw, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphConditionalHandleCreate(NULL, g, ctx, 0, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphConditionalHandleCreate(&h1, g, ctx, 0, 0x80));

    /* if (1): word 0 = 1; if (0): word 1 = 1 (never). */
    n = cond_node(g, h1, CU_GRAPH_COND_TYPE_IF, 1, &body[0]);
    TRUE(body[0] != NULL);
    CK(cuGraphNodeGetType(n, &t));
    TRUE(t == CU_GRAPH_NODE_TYPE_CONDITIONAL);
    set_word(body[0], buf, 0, 1);
    cond_node(g, h0, CU_GRAPH_COND_TYPE_IF, 1, &body[1]);
    set_word(body[1], buf, 1, 1);
    /* if (0) else: word 2 = 2 from the else body. */
    cond_node(g, he, CU_GRAPH_COND_TYPE_IF, 2, ebody);
    TRUE(ebody[0] != NULL && ebody[1] != NULL && ebody[0] != ebody[1]);
    set_word(ebody[0], buf, 2, 1);
    set_word(ebody[1], buf, 2, 2);
    /* switch (2): word 3 = 0x30 + the body's index. */
    cond_node(g, hs, CU_GRAPH_COND_TYPE_SWITCH, 4, sbody);
    for (c = 0; c < 4; c++)
        set_word(sbody[c], buf, 3, 0x30 + c);
    /* while: the kernel counts to limit. */
    cond_node(g, hw, CU_GRAPH_COND_TYPE_WHILE, 1, wbody);
    memset(&kp, 0, sizeof(kp));
    kp.func = count;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 32;
    kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args;
    CK(cuGraphAddKernelNode(&n, wbody[0], NULL, 0, &kp));

    /* Bodies are the node's. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(body[0]));
    /* Bad nodes: no bodies, no such type. */
    memset(&np, 0, sizeof(np));
    np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    np.conditional.handle = h1;
    np.conditional.type = CU_GRAPH_COND_TYPE_IF;
    np.conditional.size = 0;
    np.conditional.ctx = ctx;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddNode(&n, g, NULL, NULL, 0, &np));
    np.conditional.size = 1;
    np.conditional.type = (CUgraphConditionalNodeType)7;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddNode(&n, g, NULL, NULL, 0, &np));

    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(hb, buf, sizeof(hb)));
    TRUE(hb[0] == 1);
    TRUE(hb[1] == 0);
    TRUE(hb[2] == 2);
    TRUE(hb[3] == 0x32);
    CK(cuMemcpyDtoH(&c, ctr, 4));
    if (c != limit)
        printf("FAIL while node: counter %u, want %u\n", c, limit);
    TRUE(c == limit);
    /* Again: the defaults come back; the loop runs once more (5 -> 6). */
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(&c, ctr, 4));
    TRUE(c == limit + 1);
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    /* Bodies filled by captures into them (cuStreamBeginCaptureToGraph),
     * as NVIDIA's samples fill them: the while node's kernel, and a
     * memset in an if node's body, that capture ended without asking for
     * its graph. */
    CK(cuMemsetD32(ctr, 0, 1));
    CK(cuMemsetD32(buf, 0, N));
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphConditionalHandleCreate(&hw, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CK(cuGraphConditionalHandleCreate(&h1, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    cond_node(g, hw, CU_GRAPH_COND_TYPE_WHILE, 1, wbody);
    cond_node(g, h1, CU_GRAPH_COND_TYPE_IF, 1, body);
    EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
           cuStreamBeginCaptureToGraph(NULL, wbody[0], NULL, NULL, 0,
                                       CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamBeginCaptureToGraph(s, wbody[0], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuLaunchKernel(count, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    got = NULL;
    CK(cuStreamEndCapture(s, &got));
    TRUE(got == wbody[0]);
    CK(cuStreamBeginCaptureToGraph(s, body[0], NULL, NULL, 0,
                                   CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CK(cuMemsetD32Async(buf + 4 * 4, 9, 1, s));
    CK(cuStreamEndCapture(s, NULL));
    /* None now: what NVIDIA's driver (580) answers. */
    EXPECT(CUDA_ERROR_ILLEGAL_STATE, cuStreamEndCapture(s, NULL));
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(&c, ctr, 4));
    TRUE(c == limit);
    CK(cuMemcpyDtoH(hb, buf, sizeof(hb)));
    TRUE(hb[4] == 9);
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    CK(cuMemFree(buf));
    CK(cuMemFree(ctr));
    CK(cuModuleUnload(mod));
    CK(cuStreamDestroy(s));
    CK(cuDevicePrimaryCtxRelease(dev));
    free(fatbin);
    printf("PASS drv_graphcond\n");
    return 0;
}
