/*
 * The generated remote calls (cuda_calls.list's "remote" names, one
 * CU_CALL each): stream attributes (the L2 access policy window within
 * the device's reported limits, the synchronization policy, copies
 * between streams, the per-thread forms), the persisting L2 cache reset,
 * a function's shared memory configuration, peer attributes, a graph
 * exec's flags, stream memory operations, the profiler, graph node types
 * and kernel node attributes, function loading, execution affinity, graph
 * memory trims, RDMA flushes, shared memory banks; and what the
 * guest and the host refuse: NULL results, garbage and destroyed
 * handles, devices out of range, selectors the list does not carry.
 */
#include <cudaProfiler.h>
#include <stdint.h>

#include "vcu_drv_test.h"

typedef CUresult (*get_attr_fn)(CUstream, CUstreamAttrID, CUstreamAttrValue *);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

static void *pt_proc(const char *name)
{
    CUdriverProcAddressQueryResult st;
    void *fn = NULL;

    CK(cuGetProcAddress(name, &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    TRUE(st == CU_GET_PROC_ADDRESS_SUCCESS && fn != NULL);
    return fn;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    CUstream s, s2, gone;
    CUstreamAttrValue v, w;
    CUdeviceptr p;
    CUgraph g;
    CUgraphNode n;
    CUgraphExec x;
    cuuint64_t flags = 0;
    unsigned int u32 = 0;
    unsigned long long u64 = 0;
    int maxw = 0, l2 = 0, val = -1, prio = 0, prio2 = 0;
    void *fatbin;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    CK(cuMemAlloc(&p, 1 << 20));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, -1));

    /* The access policy window, against the limits the device reports. */
    CK(cuDeviceGetAttribute(&maxw, CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, dev));
    CK(cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, dev));
    TRUE(maxw > 0 && l2 > 0);
    CK(cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, (size_t)l2));
    memset(&v, 0, sizeof(v));
    v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)p;
    v.accessPolicyWindow.num_bytes = (size_t)maxw;
    v.accessPolicyWindow.hitRatio = 0.625f;
    v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
    v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
    CK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    memset(&w, 0xff, sizeof(w));
    CK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &w));
    TRUE(w.accessPolicyWindow.base_ptr == v.accessPolicyWindow.base_ptr);
    TRUE(w.accessPolicyWindow.num_bytes == (size_t)maxw);
    TRUE(w.accessPolicyWindow.hitRatio == 0.625f);
    TRUE(w.accessPolicyWindow.hitProp == CU_ACCESS_PROPERTY_PERSISTING);
    TRUE(w.accessPolicyWindow.missProp == CU_ACCESS_PROPERTY_STREAMING);
    v.accessPolicyWindow.num_bytes = (size_t)maxw + 1;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    v.accessPolicyWindow.num_bytes = (size_t)maxw;
    v.accessPolicyWindow.hitRatio = 1.5f;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
    CK(cuCtxResetPersistingL2Cache());

    /* Copied to another stream; the synchronization policy.  Before the
     * copy, s2's priority is the one it was made with, both ways. */
    memset(&w, 0, sizeof(w));
    CK(cuStreamGetAttribute(s2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &w));
    CK(cuStreamGetPriority(s2, &prio));
    TRUE(prio == -1 && w.priority == -1);
    CK(cuStreamCopyAttributes(s2, s));
    memset(&w, 0, sizeof(w));
    CK(cuStreamGetAttribute(s2, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &w));
    TRUE(w.accessPolicyWindow.num_bytes == (size_t)maxw && w.accessPolicyWindow.hitRatio == 0.625f);
    memset(&v, 0, sizeof(v));
    v.syncPolicy = CU_SYNC_POLICY_YIELD;
    CK(cuStreamSetAttribute(s2, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
    CK(cuStreamGetAttribute(s2, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &w));
    TRUE(w.syncPolicy == CU_SYNC_POLICY_YIELD);
    /* The copy took the source's priority too, and cuStreamGetPriority
     * says so (s2 was made with -1, s with 0). */
    CK(cuStreamGetAttribute(s2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &w));
    CK(cuStreamGetPriority(s2, &prio));
    TRUE(w.priority == prio);
    CK(cuStreamGetPriority(s, &prio2));
    TRUE(prio == prio2);
    CK(cuStreamGetAttribute(NULL, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &w));
    CK(((get_attr_fn)pt_proc("cuStreamGetAttribute"))(NULL, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &w));

    /* Not carried: the priority is the guest's to keep (cuStreamGetPriority),
     * an event member would name a guest object; and refusals. */
    v.priority = 0;
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuStreamSetAttribute(s2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
    memset(&v, 0, sizeof(v));
    v.programmaticEvent.event = (CUevent)(uintptr_t)0x1234;
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuStreamSetAttribute(s2, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT, &v));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuStreamGetAttribute(s2, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &w));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamGetAttribute(s2, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamSetAttribute(s2, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, NULL));
    EXPECT(CUDA_ERROR_INVALID_HANDLE,
           cuStreamGetAttribute((CUstream)(uintptr_t)0xdead0, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &w));
    CK(cuStreamCreate(&gone, 0));
    CK(cuStreamDestroy(gone));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamGetAttribute(gone, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &w));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamCopyAttributes(s2, gone));

    /* A function's shared memory configuration (deprecated, still offered). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CK(cuFuncSetSharedMemConfig(fill, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuFuncSetSharedMemConfig(fill, (CUsharedconfig)7));
    EXPECT(CUDA_ERROR_INVALID_HANDLE,
           cuFuncSetSharedMemConfig((CUfunction)(uintptr_t)0xdead0, CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE));
#pragma GCC diagnostic pop

    /* Peers: the VM has one device here. */
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetP2PAttribute(&val, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, dev));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetP2PAttribute(&val, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, 5));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetP2PAttribute(NULL, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, dev));
    CK(cuDeviceCanAccessPeer(&val, dev, dev));
    TRUE(val == 0);
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDeviceCanAccessPeer(&val, dev, 9));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDeviceCanAccessPeer(&val, -1, dev));

    /* A graph exec's flags. */
    CK(cuGraphCreate(&g, 0));
    CK(cuGraphAddEmptyNode(&n, g, NULL, 0));
    CK(cuGraphInstantiateWithFlags(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
    CK(cuGraphExecGetFlags(x, &flags));
    TRUE(flags == CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecGetFlags(x, NULL));
    CK(cuGraphExecDestroy(x));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecGetFlags(x, &flags));
    CK(cuGraphDestroy(g));

    /* Stream memory operations, in stream order. */
    CK(cuStreamWriteValue32(s, p, 0x12345678u, 0));
    CK(cuStreamWriteValue64(s, p + 8, 0x1122334455667788ull, 0));
    CK(cuStreamWaitValue32(s, p, 0x12345678u, CU_STREAM_WAIT_VALUE_EQ));
    CK(cuStreamWaitValue64(s, p + 8, 0x1122334455667788ull, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(&u32, p, sizeof(u32)));
    CK(cuMemcpyDtoH(&u64, p + 8, sizeof(u64)));
    TRUE(u32 == 0x12345678u && u64 == 0x1122334455667788ull);
    CK(((write32_fn)pt_proc("cuStreamWriteValue32"))(NULL, p, 7, 0));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(&u32, p, sizeof(u32)));
    TRUE(u32 == 7);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamWriteValue32(s, p + 1, 1, 0));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamWriteValue32(gone, p, 1, 0));

    CK(cuProfilerStart());
    CK(cuProfilerStop());

    /* Graph node types and kernel node attributes. */
    {
        char pad = 0;
        unsigned long long fv = 3;
        unsigned int step = 1;
        int cnt = 64;
        void *args[] = { &p, &pad, &fv, &step, &cnt };
        CUDA_KERNEL_NODE_PARAMS kp;
        CUgraphNode kn, kn2, en;
        CUgraphNodeType type;

        CK(cuGraphCreate(&g, 0));
        memset(&kp, 0, sizeof(kp));
        kp.func = fill;
        kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = 64;
        kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = args;
        CK(cuGraphAddKernelNode(&kn, g, NULL, 0, &kp));
        CK(cuGraphAddKernelNode(&kn2, g, &kn, 1, &kp));
        CK(cuGraphAddEmptyNode(&en, g, &kn2, 1));
        CK(cuGraphNodeGetType(kn, &type));
        TRUE(type == CU_GRAPH_NODE_TYPE_KERNEL);
        CK(cuGraphNodeGetType(en, &type));
        TRUE(type == CU_GRAPH_NODE_TYPE_EMPTY);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphNodeGetType((CUgraphNode)(uintptr_t)0xdead0, &type));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphNodeGetType(kn, NULL));
        memset(&v, 0, sizeof(v));
        v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)p;
        v.accessPolicyWindow.num_bytes = 4096;
        v.accessPolicyWindow.hitRatio = 1.0f;
        v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
        CK(cuGraphKernelNodeSetAttribute(kn, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
        memset(&v, 0, sizeof(v));
        v.priority = -2;
        CK(cuGraphKernelNodeSetAttribute(kn, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
        CK(cuGraphKernelNodeCopyAttributes(kn2, kn));
        memset(&w, 0, sizeof(w));
        CK(cuGraphKernelNodeGetAttribute(kn2, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &w));
        TRUE(w.accessPolicyWindow.num_bytes == 4096 && w.accessPolicyWindow.hitRatio == 1.0f);
        CK(cuGraphKernelNodeGetAttribute(kn2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &w));
        TRUE(w.priority == -2);
        CK(cuGraphKernelNodeGetAttribute(kn, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &w));
        TRUE(w.cooperative == 0);
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuGraphKernelNodeSetAttribute(en, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));
        EXPECT(CUDA_ERROR_NOT_SUPPORTED,
               cuGraphKernelNodeSetAttribute(kn, CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT, &v));
        EXPECT(CUDA_ERROR_NOT_SUPPORTED,
               cuGraphKernelNodeSetAttribute(kn, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuGraphKernelNodeGetAttribute((CUgraphNode)(uintptr_t)0xdead0, CU_LAUNCH_ATTRIBUTE_PRIORITY, &w));
        /* The graph still runs, its attributes with it. */
        CK(cuGraphInstantiateWithFlags(&x, g, 0));
        CK(cuGraphLaunch(x, s));
        CK(cuStreamSynchronize(s));
        CK(cuMemcpyDtoH(&u32, p, sizeof(u32)));
        TRUE(u32 == 3);
        CK(cuGraphExecDestroy(x));
        CK(cuGraphDestroy(g));
    }

    /* Loading state, execution affinity, graph memory, RDMA flushes,
     * shared memory banks. */
    {
        CUfunctionLoadingState ls = CU_FUNCTION_LOADING_STATE_UNLOADED;
        CUsharedconfig sc = CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE;

        CK(cuFuncIsLoaded(&ls, fill));
        TRUE(ls == CU_FUNCTION_LOADING_STATE_LOADED);
        CK(cuFuncLoad(fill));
        EXPECT(CUDA_ERROR_INVALID_HANDLE, cuFuncLoad((CUfunction)(uintptr_t)0xdead0));
        val = -1;
        CK(cuDeviceGetExecAffinitySupport(&val, CU_EXEC_AFFINITY_TYPE_SM_COUNT, dev));
        TRUE(val == 0);
        EXPECT(CUDA_ERROR_INVALID_DEVICE,
               cuDeviceGetExecAffinitySupport(&val, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 9));
        CK(cuDeviceGraphMemTrim(dev));
        CK(cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                      CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuFlushGPUDirectRDMAWrites(CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
                                          (CUflushGPUDirectRDMAWritesScope)7));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        /* Taken; what it reads back is the GPU's (the stand-in keeps it,
         * the H100, whose banks are fixed, does not): a valid config,
         * written through. */
        CK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE));
        sc = (CUsharedconfig)0x7f;
        CK(cuCtxGetSharedMemConfig(&sc));
        TRUE(sc == CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ||
             sc == CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE ||
             sc == CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE);
        CK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE));
#pragma GCC diagnostic pop
    }

    CK(cuStreamDestroy(s));
    CK(cuStreamDestroy(s2));
    CK(cuMemFree(p));
    CK(cuModuleUnload(mod));
    free(fatbin);
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_remote\n");
    return 0;
}
