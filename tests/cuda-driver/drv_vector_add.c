/*
 * A driver-API program end to end: the fatbin through cuModuleLoadData,
 * the cubin through cuModuleLoad, kernels launched with kernelParams and
 * with extra (a packed buffer, a parameter layout with padding), a module
 * global read and written, memsets, synchronous and stream-ordered
 * copies, a stream, events and their elapsed time.
 */
#include "vcu_drv_test.h"

#define N 1000

static CUresult host_cb_status = CUDA_ERROR_UNKNOWN;

static void host_fn(void *arg)
{
    (*(int *)arg)++;
}

/* The program's callback for cuOccupancyMaxPotentialBlockSize: it runs in
 * this process, for each block size tried. */
static int b2d_calls, b2d_odd;

static size_t b2d(int block)
{
    b2d_calls++;
    if (block <= 0 || block % 32)
        b2d_odd++;
    return (size_t)block * 8;
}

/* The best block size found the way cuda_runtime.h's
 * cudaOccupancyMaxPotentialBlockSizeVariableSMem looks for it. */
static void best_block(CUfunction f, int limit, size_t (*smem)(int), size_t fixed, int *grid,
                       int *block)
{
    int per_sm, sms, best = 0, best_blocks = 0, blocks;
    CUdevice d;

    CK(cuCtxGetDevice(&d));
    CK(cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, d));
    CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
    for (int bs = limit; bs > 0; bs -= 32) {
        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, bs,
                                                        smem ? smem(bs) : fixed));
        if (bs * blocks > best * best_blocks) {
            best = bs;
            best_blocks = blocks;
        }
        if (best * best_blocks == per_sm)
            break;
    }
    *grid = best_blocks * sms;
    *block = best;
}

static void host_cb(CUstream s, CUresult status, void *arg)
{
    (void)s;
    host_cb_status = status;
    (*(int *)arg)++;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx, cur;
    CUmodule mod, mod2;
    CUfunction vadd, vadd_again, fill, bump;
    CUdeviceptr a, b, c, flag;
    CUstream s;
    CUevent e0, e1;
    size_t flen, flag_size, freeb, total;
    float ha[N], hb[N], hc[N];
    unsigned int hu[N], out;
    int n = N;
    float ms;
    void *fatbin;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuCtxGetCurrent(&cur));
    TRUE(cur == ctx);
    CK(cuMemGetInfo(&freeb, &total));
    TRUE(total > 0 && freeb <= total);

    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", &flen);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&vadd, mod, "vcu_drv_vadd"));
    CK(cuModuleGetFunction(&vadd_again, mod, "vcu_drv_vadd"));
    TRUE(vadd == vadd_again);       /* one handle per kernel and module */
    CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    CK(cuModuleGetFunction(&bump, mod, "vcu_drv_flag_bump"));
    EXPECT(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&vadd_again, mod, "no_such_kernel"));
    /* The parameter layout with padding, name and module of a function. */
    {
        static const size_t off[5] = { 0, 8, 16, 24, 28 }, sz[5] = { 8, 1, 8, 4, 4 };
        size_t po = 99, ps = 99;
        const char *fname = NULL;
        CUmodule fmod = NULL;

        for (size_t i = 0; i < 5; i++) {
            CK(cuFuncGetParamInfo(fill, i, &po, &ps));
            TRUE(po == off[i] && ps == sz[i]);
        }
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuFuncGetParamInfo(fill, 5, &po, &ps));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuFuncGetParamInfo(fill, 0, NULL, &ps));
        EXPECT(CUDA_ERROR_INVALID_HANDLE, cuFuncGetParamInfo((CUfunction)&po, 0, &po, &ps));
        CK(cuFuncGetName(&fname, fill));
        TRUE(fname != NULL && strcmp(fname, "vcu_drv_fill") == 0);
        CK(cuFuncGetModule(&fmod, fill));
        TRUE(fmod == mod);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuFuncGetName(NULL, fill));
        EXPECT(CUDA_ERROR_INVALID_HANDLE, cuFuncGetModule(&fmod, (CUfunction)&po));
    }

    for (int i = 0; i < N; i++) {
        ha[i] = (float)i;
        hb[i] = 0.5f * (float)i;
    }
    CK(cuMemAlloc(&a, sizeof(ha)));
    CK(cuMemAlloc(&b, sizeof(hb)));
    CK(cuMemAlloc(&c, sizeof(hc)));
    {
        /* The allocation holding a pointer; either result may be NULL. */
        CUdeviceptr base = 0;
        size_t size = 0;

        CK(cuMemGetAddressRange(&base, &size, b + 100));
        TRUE(base == b && size >= sizeof(hb));
        base = 0;
        CK(cuMemGetAddressRange(&base, NULL, a));
        TRUE(base == a);
        CK(cuMemGetAddressRange(NULL, &size, c));
        TRUE(size >= sizeof(hc));
        TRUE(cuMemGetAddressRange(&base, &size, 0) != CUDA_SUCCESS);
    }
    CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
    CK(cuMemcpyHtoD(b, hb, sizeof(hb)));
    {
        void *args[] = { &a, &b, &c, &n };

        CK(cuLaunchKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    }
    memset(hc, 0, sizeof(hc));
    CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
    for (int i = 0; i < N; i++)
        TRUE(hc[i] == 1.5f * (float)i);

    /* Occupancy, and the same launch as a cooperative one. */
    {
        void *args[] = { &a, &b, &c, &n };
        int per_sm = 0;

        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vadd, 128, 0));
        TRUE(per_sm > 0);
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vadd, 0, 0));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&per_sm, vadd, 128, 0, 8));
        /* The best block size, its callback run here. */
        {
            int grid = -1, block = -1, want_grid, want_block, fmax;

            CK(cuFuncGetAttribute(&fmax, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, vadd));
            CK(cuOccupancyMaxPotentialBlockSize(&grid, &block, vadd, NULL, 0, 0));
            best_block(vadd, fmax, NULL, 0, &want_grid, &want_block);
            TRUE(grid == want_grid && block == want_block && block > 0 && grid > 0);
            CK(cuOccupancyMaxPotentialBlockSize(&grid, &block, vadd, NULL, 1024, 256));
            best_block(vadd, 256, NULL, 1024, &want_grid, &want_block);
            TRUE(grid == want_grid && block == want_block && block <= 256);
            CK(cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, vadd, b2d, 0, 0,
                                                         CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
            TRUE(b2d_calls > 0 && b2d_odd == 0);
            b2d_calls = 0;
            best_block(vadd, fmax, b2d, 0, &want_grid, &want_block);
            TRUE(grid == want_grid && block == want_block);
            EXPECT(CUDA_ERROR_INVALID_VALUE,
                   cuOccupancyMaxPotentialBlockSize(NULL, &block, vadd, NULL, 0, 0));
            EXPECT(CUDA_ERROR_INVALID_VALUE,
                   cuOccupancyMaxPotentialBlockSizeWithFlags(&grid, &block, vadd, NULL, 0, 0, 8));
            printf("info: best block %d, grid %d\n", block, grid);
        }
        CK(cuMemsetD8(c, 0, sizeof(hc)));
        CK(cuLaunchCooperativeKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args));
        memset(hc, 0, sizeof(hc));
        CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
        for (int i = 0; i < N; i++)
            TRUE(hc[i] == 1.5f * (float)i);
    }

    /* The same kernel through extra: the buffer as the ABI lays it out. */
    {
        struct {
            CUdeviceptr a, b, c;
            int n;
            int pad;
        } buf = { b, a, c, N / 2, 0 };
        size_t size = 28;
        void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE,
                          &size, CU_LAUNCH_PARAM_END };

        CK(cuMemsetD32(c, 0, N));
        CK(cuLaunchKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
        CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
        for (int i = 0; i < N; i++)
            TRUE(hc[i] == (i < N / 2 ? 1.5f * (float)i : 0.0f));
        /* A buffer shorter than the parameters (n left out): taken, as
         * NCCL's 4 KiB parameter struct of which it passes the used head.
         * What the kernel finds for n is not said, so only the launch is
         * checked; its 32 threads stay inside a, b and c whatever n is. */
        size = 24;
        CK(cuLaunchKernel(vadd, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
        CK(cuCtxSynchronize());
    }

    /* Padding in the layout: char at 8, u64 at 16. */
    {
        char pad = 3;
        unsigned long long v = 100;
        unsigned int step = 2;
        void *args[] = { &c, &pad, &v, &step, &n };

        CK(cuLaunchKernel(fill, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
        CK(cuMemcpyDtoH(hu, c, sizeof(hu)));
        for (int i = 0; i < N; i++)
            TRUE(hu[i] == 103u + 2u * (unsigned int)i);
    }

    /* Memsets. */
    CK(cuMemsetD8(c, 0xab, sizeof(hu)));
    CK(cuMemcpyDtoH(hu, c, sizeof(hu)));
    for (int i = 0; i < N; i++)
        TRUE(hu[i] == 0xababababu);
    CK(cuMemsetD32(c, 0x12345678u, N));
    CK(cuMemcpyDtoD(a, c, sizeof(hu)));
    CK(cuMemcpyDtoH(hu, a, sizeof(hu)));
    for (int i = 0; i < N; i++)
        TRUE(hu[i] == 0x12345678u);

    /* The module global: its initial value, then the kernel's. */
    CK(cuModuleGetGlobal(&flag, &flag_size, mod, "vcu_drv_flag"));
    TRUE(flag_size == sizeof(unsigned int));
    CK(cuMemcpyDtoH(&out, flag, sizeof(out)));
    TRUE(out == 7);
    {
        void *args[] = { &c };

        CK(cuLaunchKernel(bump, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CK(cuMemcpyDtoH(&out, c, sizeof(out)));
        TRUE(out == 7);
        CK(cuMemcpyDtoH(&out, flag, sizeof(out)));
        TRUE(out == 8);
        out = 41;
        CK(cuMemcpyHtoD(flag, &out, sizeof(out)));
        CK(cuLaunchKernel(bump, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
        CK(cuMemcpyDtoH(&out, c, sizeof(out)));
        TRUE(out == 41);
    }

    /* Stream priorities and flags, context limits. */
    {
        int least = 1, greatest = 1, prio = 7;
        unsigned int fl = 7;
        size_t stack = 0, stack2 = 0;
        CUstream hi, lo;

        CK(cuCtxGetStreamPriorityRange(&least, &greatest));
        TRUE(greatest <= least);
        CK(cuCtxGetStreamPriorityRange(NULL, &greatest));
        CK(cuStreamCreateWithPriority(&hi, CU_STREAM_NON_BLOCKING, greatest - 100));
        CK(cuStreamCreateWithPriority(&lo, 0, least + 100));
        CK(cuStreamGetPriority(hi, &prio));
        TRUE(prio == greatest);                 /* clamped, as the driver does */
        CK(cuStreamGetPriority(lo, &prio));
        TRUE(prio == least);
        CK(cuStreamGetFlags(hi, &fl));
        TRUE(fl == CU_STREAM_NON_BLOCKING);
        CK(cuStreamGetFlags(lo, &fl));
        TRUE(fl == 0);
        CK(cuStreamGetPriority(NULL, &prio));
        TRUE(prio == 0);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamGetPriority(hi, NULL));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamGetFlags(hi, NULL));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamCreateWithPriority(&lo, 4, 0));
        /* Context, device and id of streams. */
        {
            unsigned long long id1 = 0, id2 = 0, id3 = 0, cid = 0, cid2 = 0;
            CUcontext sc = NULL;
            CUdevice sd = -1;

            CK(cuStreamGetId(hi, &id1));
            CK(cuStreamGetId(lo, &id2));
            CK(cuStreamGetId(NULL, &id3));
            TRUE(id1 != 0 && id2 != 0 && id1 != id2 && id3 != id1 && id3 != id2);
            CK(cuStreamGetCtx(hi, &sc));
            TRUE(sc == ctx);
            CK(cuStreamGetCtx(NULL, &sc));
            TRUE(sc == ctx);
            CK(cuStreamGetDevice(hi, &sd));
            TRUE(sd == dev);
            CK(cuCtxGetId(ctx, &cid));
            CK(cuCtxGetId(NULL, &cid2));
            TRUE(cid != 0 && cid == cid2);
            EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamGetId(hi, NULL));
            EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxGetId(ctx, NULL));
            EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamGetCtx((CUstream)&sc, &sc));
            EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxGetId((CUcontext)&sc, &cid));
        }
        CK(cuMemsetD8Async(c, 0, 16, hi));
        CK(cuStreamSynchronize(hi));
        CK(cuStreamDestroy(hi));
        CK(cuStreamDestroy(lo));
        EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamGetPriority(hi, &prio));
        CK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
        TRUE(stack > 0);
        CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack + 1024));
        CK(cuCtxGetLimit(&stack2, CU_LIMIT_STACK_SIZE));
        TRUE(stack2 >= stack + 1024);
        CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE));
        TRUE(cuCtxGetLimit(&stack, (CUlimit)1000) != CUDA_SUCCESS);
    }

    /* A stream, async copies, events. */
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    CK(cuEventRecord(e0, s));
    CK(cuMemcpyHtoDAsync(a, hb, sizeof(hb), s));
    CK(cuMemcpyHtoDAsync(b, ha, sizeof(ha), s));
    {
        void *args[] = { &a, &b, &c, &n };

        CK(cuLaunchKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
    }
    memset(hc, 0, sizeof(hc));
    CK(cuMemcpyDtoHAsync(hc, c, sizeof(hc), s));
    CK(cuEventRecord(e1, s));
    CK(cuStreamSynchronize(s));
    CK(cuStreamQuery(s));
    CK(cuEventSynchronize(e1));
    CK(cuEventElapsedTime(&ms, e0, e1));
    TRUE(ms >= 0.0f);
    for (int i = 0; i < N; i++)
        TRUE(hc[i] == 1.5f * (float)i);
    CK(cuMemsetD8Async(c, 0, sizeof(hc), s));
    CK(cuMemsetD32Async(a, 5, N, s));
    CK(cuMemcpyDtoDAsync(b, a, sizeof(hu), s));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(hu, b, sizeof(hu)));
    TRUE(hu[0] == 5 && hu[N - 1] == 5);
    /* Host functions run in stream order, after the work before them. */
    {
        static int nord;

        nord = 0;
        CK(cuLaunchHostFunc(s, host_fn, &nord));
        CK(cuStreamAddCallback(s, host_cb, &nord, 0));
        CK(cuLaunchHostFunc(NULL, host_fn, &nord));
        CK(cuStreamSynchronize(s));
        CK(cuStreamSynchronize(NULL));
        TRUE(nord == 3 && host_cb_status == CUDA_SUCCESS);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchHostFunc(s, NULL, NULL));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamAddCallback(s, host_cb, NULL, 1));
    }
    /* A graph captured from the stream, and one built node by node. */
    {
        void *args[] = { &a, &b, &c, &n };
        CUstreamCaptureStatus st;
        CUgraph g, g2;
        CUgraphExec x;
        CUgraphNode ms, k, hn, list[4], deps[2];
        CUDA_MEMSET_NODE_PARAMS mp;
        CUDA_KERNEL_NODE_PARAMS kp;
        CUDA_HOST_NODE_PARAMS hp;
        size_t nn = 0;
        static int hits;

        CK(cuMemsetD32(a, 1, N));
        CK(cuMemsetD32(b, 2, N));
        cuuint64_t cap_id = 0, cap_id2 = 0;
        CUgraph cap_g = (CUgraph)&cap_id;
        const CUgraphNode *cap_deps = (const CUgraphNode *)&cap_id;
        size_t cap_n = 99;

        CK(cuStreamGetCaptureInfo_v3(s, &st, &cap_id, &cap_g, &cap_deps, NULL, &cap_n));
        TRUE(st == CU_STREAM_CAPTURE_STATUS_NONE && cap_g == NULL && cap_deps == NULL &&
             cap_n == 0);
        CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CK(cuStreamIsCapturing(s, &st));
        TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
        /* cuStreamGetCaptureInfo's three ABIs (the older two as a runtime
         * built for CUDA 10.1 and 11.3 finds them): the same id. */
        {
            CUresult (*v1)(CUstream, CUstreamCaptureStatus *, cuuint64_t *) = NULL;
            CUresult (*v2)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,
                           const CUgraphNode **, size_t *) = NULL;

            CK(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v1, 10010, 0, NULL));
            CK(cuGetProcAddress("cuStreamGetCaptureInfo", (void **)&v2, 11030, 0, NULL));
            TRUE(v1 != NULL && v2 != NULL);
            st = CU_STREAM_CAPTURE_STATUS_NONE;
            CK(v1(s, &st, &cap_id));
            TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && cap_id != 0);
            CK(v2(s, &st, &cap_id2, NULL, NULL, NULL));
            TRUE(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && cap_id2 == cap_id);
        }
        cap_id2 = 0;
        CK(cuStreamGetCaptureInfo_v3(s, &st, &cap_id2, NULL, NULL, NULL, NULL));
        TRUE(cap_id2 == cap_id);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamGetCaptureInfo_v3(s, NULL, &cap_id2, NULL,
                                                                   NULL, NULL, NULL));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamGetCaptureInfo_v3(s, &st, NULL, NULL, NULL,
                                                                   (const CUgraphEdgeData **)&cap_deps,
                                                                   NULL));
        /* The graph being captured, owned by the capture. */
        cap_g = NULL;
        CK(cuStreamGetCaptureInfo_v3(s, &st, NULL, &cap_g, NULL, NULL, NULL));
        TRUE(cap_g != NULL);
        CK(cuMemsetD8Async(c, 0, sizeof(hc), s));
        CK(cuLaunchKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, args, NULL));
        CK(cuStreamEndCapture(s, &g));
        TRUE(g == cap_g);
        CK(cuStreamIsCapturing(s, &st));
        TRUE(st == CU_STREAM_CAPTURE_STATUS_NONE);
        CK(cuStreamGetCaptureInfo(s, &st, &cap_id2, NULL, NULL, NULL, NULL));
        TRUE(st == CU_STREAM_CAPTURE_STATUS_NONE);
        CK(cuGraphGetNodes(g, NULL, &nn));
        TRUE(nn == 2);
        /* A captured graph's nodes are listed too, each a memset or a kernel. */
        CK(cuGraphGetNodes(g, list, &nn));
        TRUE(nn == 2);
        {
            CUgraphNodeType t0, t1;

            CK(cuGraphNodeGetType(list[0], &t0));
            CK(cuGraphNodeGetType(list[1], &t1));
            TRUE((t0 == CU_GRAPH_NODE_TYPE_MEMSET && t1 == CU_GRAPH_NODE_TYPE_KERNEL) ||
                 (t1 == CU_GRAPH_NODE_TYPE_MEMSET && t0 == CU_GRAPH_NODE_TYPE_KERNEL));
        }
        CK(cuGraphInstantiate(&x, g, 0));
        CK(cuGraphLaunch(x, s));
        CK(cuGraphLaunch(x, s));
        CK(cuStreamSynchronize(s));
        CK(cuMemcpyDtoH(hu, c, sizeof(hu)));
        /* The float kernel over ints' bits: compare with one run here. */
        {
            float fa, fb, fc;
            unsigned int one = 1, two = 2, want;

            memcpy(&fa, &one, 4);
            memcpy(&fb, &two, 4);
            fc = fa + fb;
            memcpy(&want, &fc, 4);
            TRUE(hu[0] == want && hu[N - 1] == want);
        }
        CK(cuGraphExecDestroy(x));
        CK(cuGraphDestroy(g));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy(g));
        EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
               cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL));

        CK(cuGraphCreate(&g, 0));
        memset(&mp, 0, sizeof(mp));
        mp.dst = c;
        mp.value = 0;
        mp.elementSize = 4;
        mp.width = N;
        mp.height = 1;
        CK(cuGraphAddMemsetNode(&ms, g, NULL, 0, &mp, NULL));
        memset(&kp, 0, sizeof(kp));
        kp.func = vadd;
        kp.gridDimX = (N + 127) / 128;
        kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = 128;
        kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = args;
        deps[0] = ms;
        CK(cuGraphAddKernelNode(&k, g, deps, 1, &kp));
        hp.fn = host_fn;
        hp.userData = &hits;
        deps[0] = k;
        CK(cuGraphAddHostNode(&hn, g, deps, 1, &hp));
        nn = 4;
        CK(cuGraphGetNodes(g, list, &nn));
        TRUE(nn == 3 && list[0] == ms && list[1] == k && list[2] == hn && list[3] == NULL);
        CK(cuGraphClone(&g2, g));
        CK(cuGraphInstantiate(&x, g2, 0));
        CK(cuGraphLaunch(x, s));
        CK(cuGraphLaunch(x, NULL));
        CK(cuStreamSynchronize(s));
        CK(cuStreamSynchronize(NULL));
        TRUE(hits == 2);
        deps[0] = (CUgraphNode)&hits;
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddHostNode(&hn, g, deps, 1, &hp));
        CK(cuGraphExecDestroy(x));
        CK(cuGraphDestroy(g2));
        CK(cuGraphDestroy(g));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphLaunch(x, s));
    }
    CK(cuEventDestroy(e0));
    CK(cuEventDestroy(e1));
    CK(cuStreamDestroy(s));

    /* The same kernels from the cubin, through cuModuleLoad. */
    CK(cuModuleLoad(&mod2, vcu_drv_beside("vcu_drv_kernels.cubin")));
    CK(cuModuleGetFunction(&vadd_again, mod2, "vcu_drv_vadd"));
    TRUE(vadd_again != vadd);
    {
        void *args[] = { &a, &b, &c, &n };

        CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
        CK(cuMemcpyHtoD(b, ha, sizeof(ha)));
        CK(cuLaunchKernel(vadd_again, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
        for (int i = 0; i < N; i++)
            TRUE(hc[i] == 2.0f * (float)i);
    }
    CK(cuModuleUnload(mod2));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuModuleUnload(mod2));
    EXPECT(CUDA_ERROR_FILE_NOT_FOUND, cuModuleLoad(&mod2, "/nonexistent/kernels.cubin"));

    /* The same again from a library loaded from the cubin's file, and
     * from the fat binary through cuModuleLoadFatBinary. */
    {
        CUlibrary lib;
        CUkernel kern;
        CUfunction fk, ff;
        void *args[] = { &a, &b, &c, &n };

        CK(cuLibraryLoadFromFile(&lib, vcu_drv_beside("vcu_drv_kernels.cubin"), NULL, NULL, 0,
                                 NULL, NULL, 0));
        CK(cuLibraryGetKernel(&kern, lib, "vcu_drv_vadd"));
        CK(cuKernelGetFunction(&fk, kern));
        CK(cuMemsetD32(c, 0, N));
        CK(cuLaunchKernel(fk, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
        for (int i = 0; i < N; i++)
            TRUE(hc[i] == 2.0f * (float)i);
        CK(cuLibraryUnload(lib));
        EXPECT(CUDA_ERROR_FILE_NOT_FOUND,
               cuLibraryLoadFromFile(&lib, "/nonexistent/kernels.cubin", NULL, NULL, 0, NULL,
                                     NULL, 0));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuLibraryLoadFromFile(&lib, NULL, NULL, NULL, 0, NULL, NULL, 0));

        CK(cuModuleLoadFatBinary(&mod2, fatbin));
        CK(cuModuleGetFunction(&ff, mod2, "vcu_drv_vadd"));
        CK(cuMemsetD32(c, 0, N));
        CK(cuLaunchKernel(ff, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
        CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
        for (int i = 0; i < N; i++)
            TRUE(hc[i] == 2.0f * (float)i);
        CK(cuModuleUnload(mod2));
    }

    /* Pinned host memory and unified copies (host or device told apart
     * by the library). */
    {
        unsigned int *pin, *pin2, flags = 99, page[64];
        CUdeviceptr d, d2;

        CK(cuMemHostAlloc((void **)&pin, 4096, CU_MEMHOSTALLOC_PORTABLE));
        CK(cuMemAllocHost((void **)&pin2, 4096));
        CK(cuMemHostGetFlags(&flags, pin + 10));
        TRUE(flags == CU_MEMHOSTALLOC_PORTABLE);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostGetFlags(&flags, page));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemHostAlloc((void **)&pin, 4096, 8));
        CK(cuMemAlloc(&d, 4096));
        CK(cuMemAlloc(&d2, 4096));
        for (int i = 0; i < 1024; i++)
            pin[i] = (unsigned int)i * 7u;
        CK(cuMemcpy(d, (CUdeviceptr)(uintptr_t)pin, 4096));           /* pinned -> device */
        CK(cuMemcpyAsync(d2, d, 4096, NULL));                         /* device -> device */
        CK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)pin2, d2, 4096, NULL)); /* -> pinned */
        CK(cuStreamSynchronize(NULL));
        TRUE(pin2[0] == 0 && pin2[1023] == 1023u * 7u);
        CK(cuMemcpy((CUdeviceptr)(uintptr_t)page, d2, sizeof(page)));   /* -> pageable */
        TRUE(page[63] == 63u * 7u);
        CK(cuMemcpy((CUdeviceptr)(uintptr_t)pin, (CUdeviceptr)(uintptr_t)page, sizeof(page)));
        TRUE(pin[5] == 35);
        CK(cuMemFree(d));
        CK(cuMemFree(d2));
        CK(cuMemFreeHost(pin));
        CK(cuMemFreeHost(pin2));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(pin));
    }

    /* The default pool and stream-ordered allocation from it. */
    {
        CUmemoryPool pool, cur;
        cuuint64_t thr = 32ull << 20, got = 0;
        unsigned int back[256];
        CUdeviceptr d;

        CK(cuDeviceGetDefaultMemPool(&pool, dev));
        CK(cuDeviceGetMemPool(&cur, dev));
        TRUE(pool == cur);
        CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
        CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
        TRUE(got == thr);
        CK(cuMemAllocAsync(&d, sizeof(back), NULL));
        CK(cuMemsetD32Async(d, 0xabcd, 256, NULL));
        CK(cuMemcpyDtoH(back, d, sizeof(back)));
        TRUE(back[0] == 0xabcd && back[255] == 0xabcd);
        CK(cuMemFreeAsync(d, NULL));
        CK(cuMemAllocFromPoolAsync(&d, 4096, pool, NULL));
        CK(cuMemFreeAsync(d, NULL));
        /* A null pointer is freed as the driver frees it: nothing to do,
         * success (cuSPARSE's cusparseDestroyCsric02Info relies on it). */
        CK(cuMemFreeAsync(0, NULL));
        CK(cuStreamSynchronize(NULL));
        CK(cuMemPoolTrimTo(pool, 0));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocFromPoolAsync(&d, 4096, NULL, NULL));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuMemPoolTrimTo((CUmemoryPool)&got, 0));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocAsync(&d, 0, NULL));
    }

    /* A pool the program makes: blocks from it, as the device's current
     * pool too, and destroyed while a block of it is out (the block
     * stays good until freed, and the device's default pool is current
     * again). */
    {
        CUmemPoolProps props;
        CUmemoryPool mine, cur, def, other;
        cuuint64_t thr = ~0ull, res = 0;
        unsigned int back[256];
        CUdeviceptr d, d2;
        CUresult r;

        memset(&props, 0, sizeof(props));
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        CK(cuMemPoolCreate(&mine, &props));
        CK(cuMemPoolSetAttribute(mine, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
        CK(cuMemAllocFromPoolAsync(&d, sizeof(back), mine, NULL));
        CK(cuMemsetD32Async(d, 0x1234, 256, NULL));
        CK(cuMemcpyDtoH(back, d, sizeof(back)));
        TRUE(back[0] == 0x1234 && back[255] == 0x1234);
        CK(cuMemPoolGetAttribute(mine, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &res));
        TRUE(res >= sizeof(back));

        CK(cuDeviceGetDefaultMemPool(&def, dev));
        TRUE(def != mine);
        CK(cuDeviceSetMemPool(dev, mine));
        CK(cuDeviceGetMemPool(&cur, dev));
        TRUE(cur == mine);
        CK(cuMemAllocAsync(&d2, 4096, NULL));
        CK(cuMemsetD32Async(d2, 7, 1024, NULL));
        CK(cuMemFreeAsync(d2, NULL));
        CK(cuDeviceSetMemPool(dev, def));
        CK(cuDeviceGetMemPool(&cur, dev));
        TRUE(cur == def);
        {
            /* CUDA 13's by-location names of the same, and access. */
            CUmemLocation loc;
            CUmemAccessDesc acc;
            CUmemAccess_flags af = CU_MEM_ACCESS_FLAGS_PROT_NONE;

            memset(&loc, 0, sizeof(loc));
            loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
            loc.id = dev;
            CK(cuMemGetDefaultMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
            TRUE(cur == def);
            CK(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, mine));
            CK(cuMemGetMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
            TRUE(cur == mine);
            CK(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, def));
            EXPECT(CUDA_ERROR_INVALID_VALUE,
                   cuMemGetDefaultMemPool(&cur, &loc, CU_MEM_ALLOCATION_TYPE_INVALID));
            memset(&acc, 0, sizeof(acc));
            acc.location = loc;
            acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            CK(cuMemPoolSetAccess(mine, &acc, 1));
            CK(cuMemPoolGetAccess(&af, mine, &loc));
            TRUE(af == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        }

        /* Shareable handles: natively made, here refused as not supported. */
        props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        r = cuMemPoolCreate(&other, &props);
        TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_SUPPORTED);
        if (r == CUDA_SUCCESS)
            CK(cuMemPoolDestroy(other));
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.reserved[3] = 1;
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPoolCreate(&other, &props));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPoolCreate(NULL, &props));

        CK(cuDeviceSetMemPool(dev, mine));
        CK(cuMemPoolDestroy(mine));
        CK(cuDeviceGetMemPool(&cur, dev));
        TRUE(cur == def);
        CK(cuMemsetD32(d, 0x5678, 256));
        CK(cuMemcpyDtoH(back, d, sizeof(back)));
        TRUE(back[0] == 0x5678 && back[255] == 0x5678);
        CK(cuMemFreeAsync(d, NULL));
        CK(cuStreamSynchronize(NULL));
    }

    /* Pitched memory, a 2D memset and 2D copies (a sub-rectangle). */
    {
        enum { W = 100, H = 37 };
        static unsigned char host[H][W], back[H][W];
        CUDA_MEMCPY2D cp;
        CUdeviceptr d;
        size_t pitch;

        CK(cuMemAllocPitch(&d, &pitch, W, H, 4));
        TRUE(pitch >= W && pitch % 4 == 0);
        CK(cuMemsetD2D8(d, pitch, 0x5a, W, H));
        memset(&cp, 0, sizeof(cp));
        cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        cp.srcDevice = d;
        cp.srcPitch = pitch;
        cp.dstMemoryType = CU_MEMORYTYPE_HOST;
        cp.dstHost = back;
        cp.dstPitch = W;
        cp.WidthInBytes = W;
        cp.Height = H;
        CK(cuMemcpy2D(&cp));
        TRUE(back[0][0] == 0x5a && back[H - 1][W - 1] == 0x5a);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                host[y][x] = (unsigned char)(x + 3 * y);
        memset(&cp, 0, sizeof(cp));
        cp.srcMemoryType = CU_MEMORYTYPE_HOST;
        cp.srcHost = host;
        cp.srcPitch = W;
        cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        cp.dstDevice = d;
        cp.dstPitch = pitch;
        cp.WidthInBytes = W;
        cp.Height = H;
        CK(cuMemcpy2DAsync(&cp, NULL));
        memset(back, 0, sizeof(back));
        memset(&cp, 0, sizeof(cp));
        cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        cp.srcDevice = d;
        cp.srcXInBytes = 10;
        cp.srcY = 5;
        cp.srcPitch = pitch;
        cp.dstMemoryType = CU_MEMORYTYPE_HOST;
        cp.dstHost = back;
        cp.dstPitch = W;
        cp.WidthInBytes = 20;
        cp.Height = 7;
        CK(cuMemcpy2DUnaligned(&cp));
        for (int y = 0; y < 7; y++)
            for (int x = 0; x < 20; x++)
                TRUE(back[y][x] == host[y + 5][x + 10]);
        cp.WidthInBytes = W + 1;    /* wider than the destination's pitch */
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(&cp));
        cp.WidthInBytes = 20;
        cp.srcMemoryType = CU_MEMORYTYPE_ARRAY;    /* naming no array */
        EXPECT(CUDA_ERROR_INVALID_HANDLE, cuMemcpy2D(&cp));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpy2D(NULL));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&d, &pitch, W, H, 3));
        CK(cuMemFree(d));
    }

    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    CK(cuModuleUnload(mod));
    free(fatbin);
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_vector_add\n");
    return 0;
}
