/*
 * libcuda.so.1: launches and tensor maps over the wire protocol.
 * Launches whose configuration is known good here go without waiting for
 * the host's reply (vcu__call_async; the host runs them in order, and
 * what fails on the GPU is reported by a later call, as CUDA reports it);
 * every other call waits, so its error shows at the call that caused it.
 * Memory: cuda_mem.c, 2D copies: cuda_copy2d.c, modules: cuda_module.c,
 * streams and events: cuda_stream.c.
 */
#include <stdint.h>
#include <string.h>

#include "cuda_int.h"

/* ---- launches ------------------------------------------------------------ */

/*
 * The parameter buffer, laid out by the offsets the host reported for
 * the kernel (CU_MODULE_GET_FUNCTION, from cuFuncGetParamInfo): from
 * kernelParams (one pointer per parameter) or from extra's
 * CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE (the buffer as it is).
 */
static CUresult vcu__pack_params(const vcu__func_t *f, void **kernelParams, void **extra,
                                 char *buf)
{
    void *ebuf = NULL;
    size_t esize = 0;
    int have_size = 0;

    memset(buf, 0, f->param_bytes);
    /* An extra holding only CU_LAUNCH_PARAM_END says nothing (NVIDIA's
     * driver then takes kernelParams, measured). */
    if (extra != NULL && extra[0] == CU_LAUNCH_PARAM_END)
        extra = NULL;
    if (kernelParams != NULL && extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (extra != NULL) {
        for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (i >= 64)
                return CUDA_ERROR_INVALID_VALUE;
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
                ebuf = extra[i + 1];
            } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
                if (extra[i + 1] == NULL)
                    return CUDA_ERROR_INVALID_VALUE;
                esize = *(size_t *)extra[i + 1];
                have_size = 1;
            } else {
                return CUDA_ERROR_INVALID_VALUE;
            }
        }
        if (f->param_bytes == 0)
            return CUDA_SUCCESS;
        if (ebuf == NULL || !have_size)
            return CUDA_ERROR_INVALID_VALUE;
        /* A buffer shorter than the parameters is taken as NVIDIA's
         * driver takes it: NCCL passes a 4 KiB parameter struct's used
         * head only.  The rest is zero here. */
        memcpy(buf, ebuf, esize < f->param_bytes ? esize : f->param_bytes);
        return CUDA_SUCCESS;
    }
    if (f->nparams > 0 && kernelParams == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (uint32_t i = 0; i < f->nparams; i++) {
        if (kernelParams[i] == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        memcpy(buf + f->params[i].offset, kernelParams[i], f->params[i].size);
    }
    return CUDA_SUCCESS;
}

/* The parameter buffer (vcu__pack_params), with the page-locked host
 * pointers in it made device pointers (vcu__host_params). */
CUresult vcu__pack(const vcu__func_t *f, void **kernelParams, void **extra, char *buf)
{
    CUresult e = vcu__pack_params(f, kernelParams, extra, buf);

    return e == CUDA_SUCCESS ? vcu__host_params(buf, f->param_bytes) : e;
}

/* cuda.h's names of the launch attributes, for the refusals' log. */
static const char *vcu__attr_name(unsigned int id)
{
    static const char *const names[] = {
        "IGNORE", "ACCESS_POLICY_WINDOW", "COOPERATIVE", "SYNCHRONIZATION_POLICY",
        "CLUSTER_DIMENSION", "CLUSTER_SCHEDULING_POLICY_PREFERENCE",
        "PROGRAMMATIC_STREAM_SERIALIZATION", "PROGRAMMATIC_EVENT", "PRIORITY",
        "MEM_SYNC_DOMAIN_MAP", "MEM_SYNC_DOMAIN", "PREFERRED_CLUSTER_DIMENSION",
        "LAUNCH_COMPLETION_EVENT", "DEVICE_UPDATABLE_KERNEL_NODE",
        "PREFERRED_SHARED_MEMORY_CARVEOUT", "15", "NVLINK_UTIL_CENTRIC_SCHEDULING",
    };

    return id < sizeof(names) / sizeof(names[0]) ? names[id] : "unknown";
}

/*
 * A CUlaunchConfig's attributes on the wire (out: VCU_CU_MAX_LAUNCH_ATTRS
 * entries, *n those used; IGNORE entries are dropped).  Events must be of
 * the context's device.  An attribute this library does not carry is
 * CUDA_ERROR_NOT_SUPPORTED, logged once with its name.
 */
static CUresult vcu__attrs_wire(vcu__ctx_t *c, const CUlaunchConfig *cfg,
                                struct vcu_cu_launch_attr *out, uint32_t *n)
{
    static int logged[32], too_many;
    vcu__event_t *ev;

    *n = 0;
    if (cfg->numAttrs > 0 && cfg->attrs == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < cfg->numAttrs; i++) {
        const CUlaunchAttribute *a = &cfg->attrs[i];
        const CUlaunchAttributeValue *v = &a->value;
        struct vcu_cu_launch_attr w;

        memset(&w, 0, sizeof(w));
        w.id = (uint32_t)a->id;
        switch (a->id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
            continue;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            w.v[0] = (uint32_t)v->cooperative;
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            w.v[0] = (uint32_t)v->programmaticStreamSerializationAllowed;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            w.v[0] = (uint32_t)v->priority;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
            w.v[0] = (uint32_t)v->memSyncDomain;
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
            w.v[0] = v->memSyncDomainMap.default_;
            w.v[1] = v->memSyncDomainMap.remote;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
            w.v[0] = (uint32_t)v->clusterSchedulingPolicyPreference;
            break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            w.v[0] = v->sharedMemCarveout;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            w.v[0] = v->clusterDim.x;
            w.v[1] = v->clusterDim.y;
            w.v[2] = v->clusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
            w.v[0] = v->preferredClusterDim.x;
            w.v[1] = v->preferredClusterDim.y;
            w.v[2] = v->preferredClusterDim.z;
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
            ev = (vcu__event_t *)v->programmaticEvent.event;
            if (!vcu__reg_has(ev, VCU__K_EVENT) || ev->dev != c->dev)
                return CUDA_ERROR_INVALID_HANDLE;
            w.handle = ev->h;
            w.v[0] = (uint32_t)v->programmaticEvent.flags;
            w.v[1] = (uint32_t)v->programmaticEvent.triggerAtBlockStart;
            break;
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
            ev = (vcu__event_t *)v->launchCompletionEvent.event;
            if (!vcu__reg_has(ev, VCU__K_EVENT) || ev->dev != c->dev)
                return CUDA_ERROR_INVALID_HANDLE;
            w.handle = ev->h;
            w.v[0] = (uint32_t)v->launchCompletionEvent.flags;
            break;
        default:
            vcu__log_once(&logged[(unsigned int)a->id % 32],
                          "libcuda (virtio-cuda): cuLaunchKernelEx: launch attribute "
                          "CU_LAUNCH_ATTRIBUTE_%s (%u) is not supported\n",
                          vcu__attr_name((unsigned int)a->id), (unsigned int)a->id);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        if (*n == VCU_CU_MAX_LAUNCH_ATTRS) {
            vcu__log_once(&too_many, "libcuda (virtio-cuda): cuLaunchKernelEx: more than %u "
                                     "launch attributes are not supported\n",
                          VCU_CU_MAX_LAUNCH_ATTRS);
            return CUDA_ERROR_NOT_SUPPORTED;
        }
        out[(*n)++] = w;
    }
    return CUDA_SUCCESS;
}

/*
 * Every launch, and the cluster occupancy queries, which describe one:
 * the function (or a kernel's function in the current context), dims and
 * stream checked, then op sent.  CU_LAUNCH carries flags; CU_LAUNCH_EX
 * and the queries cfg's attributes (flags 0).  The queries send no
 * parameters and get *value back.
 */
static CUresult vcu__launch_op(uint32_t op, CUfunction fn, const CUlaunchConfig *cfg,
                               void **kernelParams, void **extra, int ptsz, uint32_t flags,
                               uint64_t *value)
{
    vcu__launch_req_t *q;
    vcu__func_t *f = (vcu__func_t *)fn;
    struct vcu_cu_u64_resp o;
    size_t head;
    char *params;
    uint32_t nattrs = 0;
    vcu__ctx_t *c;
    uint64_t wire;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    /* A CUkernel serves as a CUfunction of the current context (cuda.h). */
    if (!vcu__reg_has(f, VCU__K_FUNCTION) && vcu__reg_has(f, VCU__K_KERNEL)) {
        e = cuKernelGetFunction(&fn, (CUkernel)f);
        if (e != CUDA_SUCCESS)
            return e;
        f = (vcu__func_t *)fn;
    }
    if (!vcu__reg_has(f, VCU__K_FUNCTION))
        return CUDA_ERROR_INVALID_HANDLE;
    if (f->mod->dev != c->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (cfg->gridDimX == 0 || cfg->gridDimY == 0 || cfg->gridDimZ == 0 ||
        cfg->blockDimX == 0 || cfg->blockDimY == 0 || cfg->blockDimZ == 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__stream(c, cfg->hStream, ptsz, &wire);
    if (e != CUDA_SUCCESS)
        return e;
    q = vcu__launch_buf();
    if (q == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(&q->r, 0, sizeof(q->r));
    if (op == VCU_OP_CU_LAUNCH) {
        head = sizeof(q->r.l);
    } else {
        e = vcu__attrs_wire(c, cfg, q->attrs, &nattrs);
        head = sizeof(q->r) + nattrs * sizeof(q->attrs[0]);
    }
    /* The parameters follow the attributes (none for CU_LAUNCH). */
    params = (char *)q + head;
    if (e == CUDA_SUCCESS && op != VCU_OP_CU_OCCUPANCY_CLUSTERS &&
        op != VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE)
        e = vcu__pack(f, kernelParams, extra, params);
    if (e == CUDA_SUCCESS) {
        int query = op == VCU_OP_CU_OCCUPANCY_CLUSTERS || op == VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE;

        q->r.l.function = f->h;
        q->r.l.stream = wire;
        q->r.l.grid[0] = cfg->gridDimX;
        q->r.l.grid[1] = cfg->gridDimY;
        q->r.l.grid[2] = cfg->gridDimZ;
        q->r.l.block[0] = cfg->blockDimX;
        q->r.l.block[1] = cfg->blockDimY;
        q->r.l.block[2] = cfg->blockDimZ;
        q->r.l.shared_mem = cfg->sharedMemBytes;
        q->r.l.flags = flags;
        q->r.l.param_bytes = query ? 0 : f->param_bytes;
        if (op != VCU_OP_CU_LAUNCH)
            q->r.nattrs = nattrs;
        /* A plain launch whose configuration is known good goes without
         * waiting (vcu__launch_may_defer); launches with attributes and
         * the occupancy queries wait. */
        if (op == VCU_OP_CU_LAUNCH &&
            vcu__launch_may_defer(f, q->r.l.grid, q->r.l.block, cfg->sharedMemBytes, flags))
            e = vcu__call_async(c->dev, op, q, (uint32_t)(head + q->r.l.param_bytes), NULL, 0);
        else
            e = vcu__call(c->dev, op, q, (uint32_t)(head + q->r.l.param_bytes), NULL, 0,
                          query ? &o : NULL, query ? sizeof(o) : 0);
        if (e == CUDA_SUCCESS && query)
            *value = o.value;
    }
    vcu__launch_buf_put(q);
    return e;
}

static CUresult vcu__launch(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                            unsigned int bx, unsigned int by, unsigned int bz,
                            unsigned int shmem, CUstream stream, void **kernelParams,
                            void **extra, int ptsz, uint32_t flags)
{
    CUlaunchConfig cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = gx;
    cfg.gridDimY = gy;
    cfg.gridDimZ = gz;
    cfg.blockDimX = bx;
    cfg.blockDimY = by;
    cfg.blockDimZ = bz;
    cfg.sharedMemBytes = shmem;
    cfg.hStream = stream;
    return vcu__launch_op(VCU_OP_CU_LAUNCH, fn, &cfg, kernelParams, extra, ptsz, flags, NULL);
}

/* With launch attributes (CU_LAUNCH_EX); the host checks them again. */
VCU__EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__launch_op(VCU_OP_CU_LAUNCH_EX, f, config, kernelParams, extra, 0, 0, NULL);
}

VCU__EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                           void **kernelParams, void **extra)
{
    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return vcu__launch_op(VCU_OP_CU_LAUNCH_EX, f, config, kernelParams, extra, 1, 0, NULL);
}

/* The host's driver answers for the config (CU_OCCUPANCY_CLUSTERS). */
VCU__EXPORT CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                                  const CUlaunchConfig *config)
{
    uint64_t v = 0;
    CUresult e;

    if (numClusters == NULL || config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__launch_op(VCU_OP_CU_OCCUPANCY_CLUSTERS, func, config, NULL, NULL, 0, 0, &v);
    if (e == CUDA_SUCCESS)
        *numClusters = v > INT32_MAX ? INT32_MAX : (int)v;
    return e;
}

/* The host's driver answers for the config (CU_OCCUPANCY_CLUSTER_SIZE). */
VCU__EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                                        const CUlaunchConfig *config)
{
    uint64_t v = 0;
    CUresult e;

    if (clusterSize == NULL || config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__launch_op(VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE, func, config, NULL, NULL, 0, 0, &v);
    if (e == CUDA_SUCCESS)
        *clusterSize = v > INT32_MAX ? INT32_MAX : (int)v;
    return e;
}

VCU__EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, extra, 0, 0);
}

VCU__EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                         unsigned int gridDimY, unsigned int gridDimZ,
                                         unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes,
                                         CUstream hStream, void **kernelParams, void **extra)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, extra, 1, 0);
}

/* All blocks resident at once (the host's driver checks the grid). */
VCU__EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, NULL, 0,
                       VCU_CU_LAUNCH_F_COOPERATIVE);
}

VCU__EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                    unsigned int gridDimY, unsigned int gridDimZ,
                                                    unsigned int blockDimX,
                                                    unsigned int blockDimY,
                                                    unsigned int blockDimZ,
                                                    unsigned int sharedMemBytes,
                                                    CUstream hStream, void **kernelParams)
{
    return vcu__launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, NULL, 1,
                       VCU_CU_LAUNCH_F_COOPERATIVE);
}

/* ---- tensor maps ---------------------------------------------------------- */

/*
 * A CUtensorMap is made by the host's driver (CU_TENSOR_MAP) in the
 * current context's device: its 128 bytes come back and are passed to
 * kernels as they are.
 */
static CUresult vcu__tmap(struct vcu_cu_tmap_req *r, CUtensorMap *tensorMap)
{
    struct vcu_cu_tmap_resp o;
    vcu__ctx_t *c;
    CUresult e;

    if (tensorMap == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call(c->dev, VCU_OP_CU_TENSOR_MAP, r, sizeof(*r), NULL, 0, &o, sizeof(o));
    if (e == CUDA_SUCCESS)
        memcpy(tensorMap, o.map, sizeof(o.map));
    return e;
}

/* The fields the encoders share, checked; rank entries of each array. */
static CUresult vcu__tmap_common(struct vcu_cu_tmap_req *r, uint32_t kind,
                                 CUtensorMapDataType type, cuuint32_t rank, void *addr,
                                 const cuuint64_t *dim, const cuuint64_t *strides,
                                 const cuuint32_t *estrides, CUtensorMapInterleave il,
                                 CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                 CUtensorMapFloatOOBfill oob)
{
    memset(r, 0, sizeof(*r));
    if (rank == 0 || rank > VCU_CU_TMAP_MAX_RANK || dim == NULL || estrides == NULL ||
        (rank > 1 && strides == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    r->kind = kind;
    r->data_type = (uint32_t)type;
    r->rank = rank;
    r->interleave = (uint32_t)il;
    r->swizzle = (uint32_t)sw;
    r->l2_promotion = (uint32_t)l2;
    r->oob_fill = (uint32_t)oob;
    r->global_address = (uint64_t)(uintptr_t)addr;
    for (cuuint32_t i = 0; i < rank; i++) {
        r->global_dim[i] = dim[i];
        r->element_strides[i] = estrides[i];
        if (i + 1 < rank)
            r->global_strides[i] = strides[i];
    }
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap,
                                            CUtensorMapDataType tensorDataType,
                                            cuuint32_t tensorRank, void *globalAddress,
                                            const cuuint64_t *globalDim,
                                            const cuuint64_t *globalStrides,
                                            const cuuint32_t *boxDim,
                                            const cuuint32_t *elementStrides,
                                            CUtensorMapInterleave interleave,
                                            CUtensorMapSwizzle swizzle,
                                            CUtensorMapL2promotion l2Promotion,
                                            CUtensorMapFloatOOBfill oobFill)
{
    struct vcu_cu_tmap_req r;
    CUresult e = vcu__tmap_common(&r, VCU_CU_TMAP_TILED, tensorDataType, tensorRank,
                                  globalAddress, globalDim, globalStrides, elementStrides,
                                  interleave, swizzle, l2Promotion, oobFill);

    if (e != CUDA_SUCCESS)
        return e;
    if (boxDim == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < tensorRank; i++)
        r.box_dim[i] = boxDim[i];
    return vcu__tmap(&r, tensorMap);
}

VCU__EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap,
                                             CUtensorMapDataType tensorDataType,
                                             cuuint32_t tensorRank, void *globalAddress,
                                             const cuuint64_t *globalDim,
                                             const cuuint64_t *globalStrides,
                                             const int *pixelBoxLowerCorner,
                                             const int *pixelBoxUpperCorner,
                                             cuuint32_t channelsPerPixel,
                                             cuuint32_t pixelsPerColumn,
                                             const cuuint32_t *elementStrides,
                                             CUtensorMapInterleave interleave,
                                             CUtensorMapSwizzle swizzle,
                                             CUtensorMapL2promotion l2Promotion,
                                             CUtensorMapFloatOOBfill oobFill)
{
    struct vcu_cu_tmap_req r;
    CUresult e = vcu__tmap_common(&r, VCU_CU_TMAP_IM2COL, tensorDataType, tensorRank,
                                  globalAddress, globalDim, globalStrides, elementStrides,
                                  interleave, swizzle, l2Promotion, oobFill);

    if (e != CUDA_SUCCESS)
        return e;
    if (tensorRank < 3 || pixelBoxLowerCorner == NULL || pixelBoxUpperCorner == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i + 2 < tensorRank; i++) {
        r.lower_corner[i] = (uint32_t)pixelBoxLowerCorner[i];
        r.upper_corner[i] = (uint32_t)pixelBoxUpperCorner[i];
    }
    r.channels_per_pixel = channelsPerPixel;
    r.pixels_per_column = pixelsPerColumn;
    return vcu__tmap(&r, tensorMap);
}

VCU__EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    struct vcu_cu_tmap_req r;

    if (tensorMap == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    memset(&r, 0, sizeof(r));
    r.kind = VCU_CU_TMAP_REPLACE_ADDRESS;
    r.global_address = (uint64_t)(uintptr_t)globalAddress;
    memcpy(r.map, tensorMap, sizeof(r.map));
    return vcu__tmap(&r, tensorMap);
}
