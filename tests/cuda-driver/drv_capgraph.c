/*
 * Stream capture as PyTorch's CUDAGraph does it: a capture begun
 * thread-local or relaxed, cuStreamGetCaptureInfo asked for the graph
 * being captured (the same CUgraph each time, from every stream of the
 * capture, and the one cuStreamEndCapture returns), the dependencies
 * counted, a fork and join through events, memory allocated during the
 * capture under a relaxed thread mode, the graph instantiated with
 * AUTO_FREE_ON_LAUNCH, uploaded and replayed over new inputs; a failed
 * capture takes its graph with it.
 */
#include "vcu_drv_test.h"

#define N 1024

static void check_sum(CUdeviceptr c, const float *ha, const float *hb)
{
    float hc[N];
    int i;

    CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
    for (i = 0; i < N; i++)
        if (hc[i] != ha[i] + hb[i]) {
            printf("FAIL c[%d] = %g, want %g\n", i, hc[i], ha[i] + hb[i]);
            exit(1);
        }
}

int main(void)
{
    CUresult (*v2)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
                   const CUgraphNode **, size_t *) = NULL;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction vadd;
    CUstream s, s2;
    CUevent fork, join, ext;
    CUresult r;
    CUdeviceptr a, b, c, scratch = 0, scratch2 = 0, bad = 0;
    CUgraph cg, cg2, g;
    CUgraphExec x;
    CUstreamCaptureStatus st;
    CUstreamCaptureMode mode;
    const CUgraphNode *deps;
    cuuint64_t id = 0, id2 = 0;
    size_t nd;
    float ha[N], hb[N];
    int n = N, i;
    void *args[] = { &a, &b, &c, &n };
    void *fatbin;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&vadd, mod, "vcu_drv_vadd"));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&ext, CU_EVENT_DISABLE_TIMING));
    /* Outside a capture an external record is refused, at the call (the
     * H100's driver: ILLEGAL_STATE); other flags too. */
    EXPECT(CUDA_ERROR_ILLEGAL_STATE, cuEventRecordWithFlags(ext, NULL, CU_EVENT_RECORD_EXTERNAL));
    CK(cuEventRecordWithFlags(ext, NULL, CU_EVENT_RECORD_DEFAULT));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuEventRecordWithFlags(ext, NULL, 2));
    CK(cuEventSynchronize(ext));
    CK(cuMemAlloc(&a, sizeof(ha)));
    CK(cuMemAlloc(&b, sizeof(hb)));
    CK(cuMemAlloc(&c, sizeof(ha)));
    CK(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v2, 11030, 0, NULL));
    TRUE(v2 != NULL);

    /* Not capturing: no graph, no dependencies. */
    cg = (CUgraph)&id;
    nd = 99;
    CK(cuStreamGetCaptureInfo_v3(s, &st, &id, &cg, NULL, NULL, &nd));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_NONE && cg == NULL && nd == 0);

    /* A thread-local capture, as torch.cuda.graph's. */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    deps = (const CUgraphNode *)&id;
    nd = 99;
    CK(cuStreamGetCaptureInfo_v3(s, &st, &id, &cg, &deps, NULL, &nd));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && cg != NULL);
    TRUE(nd == 0 && deps == NULL);
    cg2 = NULL;
    CK(v2(s, &st, &id2, &cg2, NULL, NULL));
    TRUE(cg2 == cg && id2 == id);
    /* The capture's graph is not the caller's to destroy. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(cg));
    /* Memory allocated during the capture under a relaxed thread mode, as
     * PyTorch's allocator does; the capture goes on. */
    mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    TRUE(mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
    CK(cuMemAlloc(&scratch, 4096));
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    TRUE(mode == CU_STREAM_CAPTURE_MODE_RELAXED);
    mode = (CUstreamCaptureMode)7;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuThreadExchangeStreamCaptureMode(&mode));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuThreadExchangeStreamCaptureMode(NULL));
    CK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    /* Fork into s2 and join back: s2's capture info names the same graph. */
    CK(cuEventRecord(fork, s));
    CK(cuStreamWaitEvent(s2, fork, 0));
    cg2 = NULL;
    CK(cuStreamGetCaptureInfo_v3(s2, &st, &id2, &cg2, NULL, NULL, NULL));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id2 == id && cg2 == cg);
    CK(cuMemsetD8Async(c, 0, sizeof(ha), s2));
    CK(cuEventRecord(join, s2));
    CK(cuStreamWaitEvent(s, join, 0));
    CK(cuLaunchKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
    /* An external record in a capture: a node of the graph. */
    {
        /* The per-thread ABI, as a runtime built for it finds it. */
        CUresult (*rec)(CUevent, CUstream, unsigned int) = NULL;

        CK(cuGetProcAddress("cuEventRecordWithFlags", (void **)&rec, 11010,
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
        TRUE(rec != NULL && rec != cuEventRecordWithFlags);
        CK(rec(ext, s, CU_EVENT_RECORD_EXTERNAL));
    }
    /* One open dependency: counted, and listed as a node of the capture's
     * graph, the same CUgraphNode each time, its edge a default one. */
    nd = 0;
    CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, NULL, NULL, &nd));
    TRUE(nd == 1);
    deps = NULL;
    CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, &deps, NULL, &nd));
    TRUE(nd == 1 && deps != NULL && deps[0] != NULL);
    {
        const CUgraphEdgeData *edges = NULL;
        CUgraphNode last = deps[0], empty = NULL, forged = (CUgraphNode)&id;

        CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, &deps, &edges, &nd));
        TRUE(nd == 1 && deps[0] == last && edges != NULL && edges[0].type == 0);
        /* A node added to the capture's graph after it becomes the
         * capture's one dependency (as libraries splice work in). */
        CK(cuGraphAddEmptyNode(&empty, cg, &last, 1));
        CK(cuStreamUpdateCaptureDependencies(s, &empty, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
        CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, &deps, NULL, &nd));
        TRUE(nd == 1 && deps[0] == empty);
        {
            /* The first ABI (no edge data), as an older runtime asks. */
            CUresult (*upd)(CUstream, CUgraphNode *, size_t, unsigned int) = NULL;

            CK(cuGetProcAddress("cuStreamUpdateCaptureDependencies", (void **)&upd, 11030, 0,
                                NULL));
            TRUE(upd != NULL);
            CK(upd(s, &last, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
        }
        CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, &deps, NULL, &nd));
        TRUE(nd == 2 && ((deps[0] == empty && deps[1] == last) ||
                         (deps[0] == last && deps[1] == empty)));
        CK(cuStreamUpdateCaptureDependencies(s, &empty, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamUpdateCaptureDependencies(s, &empty, NULL, 1, 2));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuStreamUpdateCaptureDependencies(s, &forged, NULL, 1,
                                                 CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuStreamUpdateCaptureDependencies(s, NULL, NULL, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES));
        CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, &deps, NULL, &nd));
        TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && nd == 1 && deps[0] == empty);
    }
    g = NULL;
    CK(cuStreamEndCapture(s, &g));
    TRUE(g == cg);
    cg2 = (CUgraph)&id;
    CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, &cg2, NULL, NULL, NULL));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_NONE && cg2 == NULL);
    nd = 0;
    CK(cuGraphGetNodes(g, NULL, &nd));
    TRUE(nd >= 2);
    CK(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    CK(cuGraphUpload(x, s));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphUpload((CUgraphExec)&id, s));
    /* Replayed twice over different inputs. */
    for (i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = 0.5f;
    }
    CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
    CK(cuMemcpyHtoD(b, hb, sizeof(hb)));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_sum(c, ha, hb);
    for (i = 0; i < N; i++) {
        ha[i] = (float)(3 * i);
        hb[i] = -2.0f;
    }
    CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
    CK(cuMemcpyHtoD(b, hb, sizeof(hb)));
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_sum(c, ha, hb);
    CK(cuGraphExecDestroy(x));
    /* Now the caller's. */
    CK(cuGraphDestroy(g));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(g));

    /* A relaxed capture: allocation allowed; its graph handed over. */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuStreamGetCaptureInfo_v3(s, &st, &id2, &cg, NULL, NULL, NULL));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id2 != id && cg != NULL);
    CK(cuMemAlloc(&scratch2, 4096));
    CK(cuLaunchKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
    CK(cuStreamEndCapture(s, &g));
    TRUE(g == cg);
    /* The 11000 ABI of cuGraphInstantiate, as an older runtime asks. */
    {
        CUresult (*inst)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t) = NULL;
        CUgraphNode err = (CUgraphNode)&id;
        char log[64] = "x";

        CK(cuGetProcAddress("cuGraphInstantiate", (void **)&inst, 11000, 0, NULL));
        TRUE(inst != NULL);
        CK(inst(&x, g, &err, log, sizeof(log)));
        TRUE(err == NULL && log[0] == '\0');
    }
    CK(cuGraphLaunch(x, s));
    CK(cuStreamSynchronize(s));
    check_sum(c, ha, hb);
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    /* A failed capture: an unsafe call in the capturing thread invalidates
     * it, and its graph goes with it. */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, &cg, NULL, NULL, NULL));
    TRUE(cg != NULL);
    EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuMemAlloc(&bad, 4096));
    CK(cuStreamIsCapturing(s, &st));
    TRUE(st == CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    cg2 = (CUgraph)&id;
    CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, &cg2, NULL, NULL, NULL));
    TRUE(cg2 == NULL);
    g = (CUgraph)&id;
    EXPECT(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture(s, &g));
    TRUE(g == NULL);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(cg));
    /* A dead capture's graph is refused (the library finds it gone,
     * INVALID_VALUE, or the host does, INVALID_HANDLE), never run. */
    x = NULL;
    r = cuGraphInstantiateWithFlags(&x, cg, 0);
    TRUE((r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_HANDLE) && x == NULL);

    /* Graph memcpy nodes that read and write host memory: page-locked
     * in, registered out (as a unified address), read and written when
     * the graph runs, each replay; then pageable memory and 2D copies.
     * Through a worker only (a VM, or the GPU): in the loopback transport
     * the library hands host addresses as they are, which the stand-in
     * does not take as device memory, where a worker registers them. */
    if (getenv("VCU_TRANSPORT") == NULL || strcmp(getenv("VCU_TRANSPORT"), "loopback") != 0) {
        size_t sz = sizeof(ha);
        float *hin = NULL, *hout = aligned_alloc(4096, (sz + 4095) & ~(size_t)4095);
        float pg[4] = { 0 };
        CUgraph mg;
        CUgraphExec mx;
        CUgraphNode n1, n2, n3;
        CUDA_MEMCPY3D m;

        TRUE(hout != NULL);
        CK(cuMemHostAlloc((void **)&hin, sz, 0));
        CK(cuMemHostRegister(hout, (sz + 4095) & ~(size_t)4095, 0));
        CK(cuGraphCreate(&mg, 0));
        memset(&m, 0, sizeof(m));
        m.srcMemoryType = CU_MEMORYTYPE_HOST;
        m.srcHost = hin;
        m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        m.dstDevice = a;
        m.WidthInBytes = sz;
        m.Height = 1;
        m.Depth = 1;
        CK(cuGraphAddMemcpyNode(&n1, mg, NULL, 0, &m, ctx));
        memset(&m, 0, sizeof(m));
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m.srcDevice = a;
        m.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
        m.dstDevice = (CUdeviceptr)(uintptr_t)hout;
        m.WidthInBytes = sz;
        m.Height = 1;
        m.Depth = 1;
        CK(cuGraphAddMemcpyNode(&n2, mg, &n1, 1, &m, ctx));
        CK(cuGraphInstantiateWithFlags(&mx, mg, 0));
        for (int rep = 0; rep < 2; rep++) {
            for (i = 0; i < N; i++) {
                hin[i] = rep ? -(float)i : 0.25f * (float)i;
                hout[i] = 7.0f;
            }
            CK(cuGraphLaunch(mx, s));
            CK(cuStreamSynchronize(s));
            TRUE(memcmp(hout, hin, sz) == 0);
        }
        /* Pageable host memory in, a 2D copy out into pageable memory
         * (rows 16 bytes apart, 8 copied): staged through the library,
         * read and written at each replay; CUDA arrays are refused. */
        {
            unsigned char out2d[64];
            CUgraph pg_g;
            CUgraphExec pg_x;

            CK(cuGraphCreate(&pg_g, 0));
            memset(&m, 0, sizeof(m));
            m.srcMemoryType = CU_MEMORYTYPE_HOST;
            m.srcHost = pg;
            m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
            m.dstDevice = a;
            m.WidthInBytes = sizeof(pg);
            m.Height = 1;
            m.Depth = 1;
            CK(cuGraphAddMemcpyNode(&n1, pg_g, NULL, 0, &m, ctx));
            memset(&m, 0, sizeof(m));
            m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
            m.srcDevice = a;
            m.srcPitch = 8;
            m.dstMemoryType = CU_MEMORYTYPE_HOST;
            m.dstHost = out2d;
            m.dstPitch = 16;
            m.WidthInBytes = 8;
            m.Height = 2;
            m.Depth = 1;
            CK(cuGraphAddMemcpyNode(&n3, pg_g, &n1, 1, &m, ctx));
            CK(cuGraphInstantiateWithFlags(&pg_x, pg_g, 0));
            CK(cuGraphDestroy(pg_g));
            for (int rep = 0; rep < 2; rep++) {
                for (i = 0; i < 4; i++)
                    pg[i] = (float)(rep * 10 + i) + 0.5f;
                memset(out2d, 0x5a, sizeof(out2d));
                CK(cuGraphLaunch(pg_x, s));
                CK(cuStreamSynchronize(s));
                TRUE(memcmp(out2d, pg, 8) == 0);
                TRUE(memcmp(out2d + 16, (unsigned char *)pg + 8, 8) == 0);
                TRUE(out2d[8] == 0x5a && out2d[15] == 0x5a && out2d[24] == 0x5a);
            }
            CK(cuGraphExecDestroy(pg_x));
            m.dstMemoryType = CU_MEMORYTYPE_ARRAY;
            EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuGraphAddMemcpyNode(&n3, mg, NULL, 0, &m, ctx));
        }
        CK(cuGraphExecDestroy(mx));
        CK(cuGraphDestroy(mg));
        CK(cuMemHostUnregister(hout));
        CK(cuMemFreeHost(hin));
        free(hout);
    }
    CK(cuMemFree(scratch));
    CK(cuMemFree(scratch2));
    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    CK(cuEventDestroy(fork));
    CK(cuEventDestroy(join));
    CK(cuEventDestroy(ext));
    CK(cuStreamDestroy(s2));
    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    free(fatbin);
    printf("PASS drv_capgraph\n");
    return 0;
}
