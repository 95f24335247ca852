/*
 * cuLaunchKernelEx and its launch attributes: thread-block clusters
 * checked on the GPU by what the kernel reads from the hardware
 * (%cluster_ctarank, %cluster_nctarank, %clusterid; the stand-in's twin
 * numbers blocks the same way), the other attributes carried, the
 * cluster occupancy queries, the cluster function attributes, and the
 * refusals (bad configs, foreign and destroyed events, attributes not
 * carried, too many attributes).
 */
#include "vcu_drv_test.h"

#define NB 64

static CUlaunchConfig config(unsigned int gx, unsigned int gy, unsigned int gz,
                             CUlaunchAttribute *attrs, unsigned int n)
{
    CUlaunchConfig c;

    memset(&c, 0, sizeof(c));
    c.gridDimX = gx;
    c.gridDimY = gy;
    c.gridDimZ = gz;
    c.blockDimX = 32;
    c.blockDimY = 1;
    c.blockDimZ = 1;
    c.attrs = attrs;
    c.numAttrs = n;
    return c;
}

static CUlaunchAttribute cluster_attr(unsigned int x, unsigned int y, unsigned int z)
{
    CUlaunchAttribute a;

    memset(&a, 0, sizeof(a));
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = x;
    a.value.clusterDim.y = y;
    a.value.clusterDim.z = z;
    return a;
}

/* Launches a grid in clusters of cx*cy*cz and checks every block's word. */
static void check_clusters(CUfunction k, CUdeviceptr out, unsigned int gx, unsigned int gy,
                           unsigned int gz, unsigned int cx, unsigned int cy, unsigned int cz,
                           int with_attr)
{
    CUlaunchAttribute a = cluster_attr(cx, cy, cz);
    CUlaunchConfig c = config(gx, gy, gz, &a, with_attr ? 1 : 0);
    unsigned int h[NB], ncx = gx / cx, ncy = gy / cy;
    void *args[] = { &out };

    TRUE(gx * gy * gz <= NB);
    CK(cuMemsetD32(out, 0xffffffffu, NB));
    CK(cuLaunchKernelEx(&c, k, args, NULL));
    CK(cuMemcpyDtoH(h, out, sizeof(h)));
    for (unsigned int z = 0; z < gz; z++)
        for (unsigned int y = 0; y < gy; y++)
            for (unsigned int x = 0; x < gx; x++) {
                unsigned int b = x + gx * (y + gy * z);
                unsigned int rank = x % cx + cx * (y % cy + cy * (z % cz));
                unsigned int id = x / cx + ncx * (y / cy + ncy * (z / cz));
                unsigned int want = rank | (cx * cy * cz) << 8 | id << 16;

                if (h[b] != want) {
                    printf("FAIL grid %ux%ux%u cluster %ux%ux%u: block %u: 0x%x, want 0x%x\n",
                           gx, gy, gz, cx, cy, cz, b, h[b], want);
                    exit(1);
                }
            }
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction k, vadd;
    CUdeviceptr out;
    CUevent ev, gone;
    CUstream s;
    CUlaunchAttribute at[20];
    CUlaunchConfig c;
    int v, cc_major = 0, clusters = -1, size = -1;
    void *args[1];

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev));
    if (cc_major < 9 || v == 0) {
        printf("SKIP drv_cluster: device %d.x has no cluster launch\n", cc_major);
        printf("PASS drv_cluster\n");
        return 0;
    }
    CK(cuModuleLoadData(&mod, vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL)));
    CK(cuModuleGetFunction(&k, mod, "vcu_drv_cluster"));
    CK(cuModuleGetFunction(&vadd, mod, "vcu_drv_vadd"));
    CK(cuMemAlloc(&out, NB * sizeof(unsigned int)));
    args[0] = &out;

    /* Function attributes of clusters: none required, non-portable off
     * until set. */
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, k));
    TRUE(v == 0);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, k));
    TRUE(v == 0);
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, k));
    CK(cuFuncSetAttribute(k, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
    CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, k));
    TRUE(v == 1);
    CK(cuFuncSetAttribute(k, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 0));

    /* Clusters as the GPU numbers them. */
    check_clusters(k, out, 8, 1, 1, 1, 1, 1, 0);     /* no attribute: clusters of one */
    check_clusters(k, out, 8, 1, 1, 2, 1, 1, 1);
    check_clusters(k, out, 16, 1, 1, 8, 1, 1, 1);
    check_clusters(k, out, 4, 4, 2, 2, 2, 1, 1);
    check_clusters(k, out, 4, 2, 4, 1, 2, 2, 1);

    /* The cluster occupancy queries. */
    at[0] = cluster_attr(2, 1, 1);
    c = config(8, 1, 1, at, 1);
    CK(cuOccupancyMaxActiveClusters(&clusters, k, &c));
    TRUE(clusters > 0);
    CK(cuOccupancyMaxPotentialClusterSize(&size, k, &c));
    TRUE(size >= 8);
    printf("clusters of 2: %d resident at once; largest cluster %d\n", clusters, size);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuOccupancyMaxActiveClusters(NULL, k, &c));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuOccupancyMaxActiveClusters(&clusters, k, NULL));
    EXPECT(CUDA_ERROR_INVALID_HANDLE,
           cuOccupancyMaxActiveClusters(&clusters, (CUfunction)&c, &c));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuOccupancyMaxPotentialClusterSize(NULL, k, &c));

    /* The other attributes this library carries, together. */
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    memset(at, 0, sizeof(at));
    at[0] = cluster_attr(2, 1, 1);
    at[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    at[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    at[2].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    at[2].value.priority = 0;
    at[3].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
    at[3].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_DEFAULT;
    at[4].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP;
    at[4].value.memSyncDomainMap.default_ = 0;
    at[4].value.memSyncDomainMap.remote = 1;
    at[5].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT;
    at[5].value.sharedMemCarveout = 50;
    at[6].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    at[6].value.programmaticStreamSerializationAllowed = 1;
    at[7].id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
    at[7].value.launchCompletionEvent.event = ev;
    at[8].id = CU_LAUNCH_ATTRIBUTE_IGNORE;
    c = config(8, 1, 1, at, 9);
    c.hStream = s;
    CK(cuLaunchKernelEx(&c, k, args, NULL));
    CK(cuEventSynchronize(ev));
    CK(cuStreamSynchronize(s));
    /* A programmatic event, triggered as each block starts. */
    memset(at, 0, sizeof(at));
    at[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    at[0].value.programmaticEvent.event = ev;
    at[0].value.programmaticEvent.triggerAtBlockStart = 1;
    c = config(8, 1, 1, at, 1);
    c.hStream = s;
    CK(cuLaunchKernelEx(&c, k, args, NULL));
    CK(cuStreamSynchronize(s));
    CK(cuEventSynchronize(ev));
    /* Cooperative through the attribute, on the per-thread stream. */
    memset(at, 0, sizeof(at));
    at[0].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    at[0].value.cooperative = 1;
    c = config(8, 1, 1, at, 1);
    c.hStream = CU_STREAM_PER_THREAD;
    {
        CUresult (*ex_ptsz)(const CUlaunchConfig *, CUfunction, void **, void **) = NULL;
        CUdriverProcAddressQueryResult q;

        CK(cuGetProcAddress("cuLaunchKernelEx", (void **)&ex_ptsz, 12000,
                            CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
        TRUE(ex_ptsz != NULL && q == CU_GET_PROC_ADDRESS_SUCCESS);
        CK(ex_ptsz(&c, k, args, NULL));
    }
    CK(cuCtxSynchronize());
    /* With extra instead of kernelParams. */
    {
        size_t sz = sizeof(out);
        void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &out, CU_LAUNCH_PARAM_BUFFER_SIZE,
                          &sz, CU_LAUNCH_PARAM_END };

        c = config(8, 1, 1, NULL, 0);
        CK(cuLaunchKernelEx(&c, k, NULL, extra));
        CK(cuCtxSynchronize());
    }

    /* Refusals. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(NULL, k, args, NULL));
    c = config(0, 1, 1, NULL, 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(&c, k, args, NULL));
    c = config(8, 1, 1, NULL, 0);
    c.blockDimY = 0;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(&c, k, args, NULL));
    c = config(8, 1, 1, NULL, 2);                   /* attributes missing */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(&c, k, args, NULL));
    c = config(8, 1, 1, NULL, 0);
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuLaunchKernelEx(&c, (CUfunction)&c, args, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchKernelEx(&c, vadd, NULL, NULL));
    at[0] = cluster_attr(2, 1, 1);                  /* 7 blocks: not whole clusters */
    c = config(7, 1, 1, at, 1);
    EXPECT(CUDA_ERROR_INVALID_CLUSTER_SIZE, cuLaunchKernelEx(&c, k, args, NULL));
    at[0] = cluster_attr(0, 1, 1);
    c = config(8, 1, 1, at, 1);
    {
        CUresult r = cuLaunchKernelEx(&c, k, args, NULL);

        TRUE(r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_CLUSTER_SIZE);
    }
    CK(cuEventCreate(&gone, 0));
    CK(cuEventDestroy(gone));
    memset(at, 0, sizeof(at));
    at[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    at[0].value.programmaticEvent.event = gone;
    c = config(8, 1, 1, at, 1);
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuLaunchKernelEx(&c, k, args, NULL));
    at[0].value.programmaticEvent.event = (CUevent)&c;   /* not an event */
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuLaunchKernelEx(&c, k, args, NULL));
    at[0].id = CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW;  /* not carried: logged */
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuLaunchKernelEx(&c, k, args, NULL));
    at[0].id = (CUlaunchAttributeID)1000;
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuLaunchKernelEx(&c, k, args, NULL));
    for (int i = 0; i < 17; i++) {                  /* more than the wire carries */
        memset(&at[i], 0, sizeof(at[i]));
        at[i].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    }
    c = config(8, 1, 1, at, 17);
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuLaunchKernelEx(&c, k, args, NULL));
    c.numAttrs = 16;
    CK(cuLaunchKernelEx(&c, k, args, NULL));
    CK(cuCtxSynchronize());
    at[0] = cluster_attr(0, 1, 1);                  /* occupancy of a bad config */
    c = config(8, 1, 1, at, 1);
    TRUE(cuOccupancyMaxActiveClusters(&clusters, k, &c) != CUDA_SUCCESS);

    CK(cuEventDestroy(ev));
    CK(cuStreamDestroy(s));
    CK(cuMemFree(out));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_cluster\n");
    return 0;
}
