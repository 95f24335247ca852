/*
 * The registration ABI nvcc 13 emits (crt/host_runtime.h,
 * crt/device_functions.h), kernels and launches, device symbols, function
 * attributes and occupancy.
 *
 * Fatbins, kernels and variables are registered before main() and never
 * freed: handles to them (cudaKernel_t, host function pointers) stay
 * valid for the life of the process.  Modules are loaded on the host at
 * first use per device, functions and symbols looked up at first use.
 * vcu__rt.reg_lock protects every list and per-device slot here.
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_int.h"
#include "vcu_fatbin.h"

struct textureReference;
struct surfaceReference;

#define VCU__FATBINC_MAGIC 0x466243b1
#define VCU__FATBIN_MAGIC 0xBA55ED50u

typedef struct vcu__fatbin_wrapper_s {
    int magic;
    int version;
    const unsigned long long *data;
    void *filename_or_fatbins;
} vcu__fatbin_wrapper_t;

typedef struct vcu__fatbin_hdr_s {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
} vcu__fatbin_hdr_t;

typedef struct vcu__fatbin_s {
    const void *image;
    uint64_t len;
    uint64_t module[VCU_CU_MAX_DEVICES];    /* 0: not loaded */
    struct vcu__fatbin_s *next;
} vcu__fatbin_t;

struct vcu__kernel_s {
    vcu__fatbin_t *fb;
    const void *host;
    char *name;
    vcu__kfn_t f[VCU_CU_MAX_DEVICES];
    vcu__kernel_t *next;            /* hash chain */
};

typedef struct vcu__var_s {
    vcu__fatbin_t *fb;
    const void *host;
    char *name;
    size_t size;
    int managed;                    /* VCU__VAR_* */
    uint64_t dptr[VCU_CU_MAX_DEVICES];
    uint64_t dsize[VCU_CU_MAX_DEVICES];
    struct vcu__var_s *next;
} vcu__var_t;

enum { VCU__VAR_DEVICE, VCU__VAR_MANAGED, VCU__VAR_HOST };

#define VCU__KHASH 1024
static vcu__fatbin_t *vcu__fatbins;
static vcu__kernel_t *vcu__khash[VCU__KHASH];
static vcu__var_t *vcu__vars;

static size_t vcu__phash(const void *p)
{
    return (size_t)(((uintptr_t)p * 0x9e3779b97f4a7c15ULL) >> 40) & (VCU__KHASH - 1);
}

VCU__EXPORT void **__cudaRegisterFatBinary(void *fatCubin);
VCU__EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
    const vcu__fatbin_wrapper_t *w = fatCubin;
    const vcu__fatbin_hdr_t *h;
    vcu__fatbin_t *fb = calloc(1, sizeof(*fb));

    if (fb == NULL)
        return NULL;
    if (w != NULL && w->magic == VCU__FATBINC_MAGIC && w->data != NULL) {
        h = (const vcu__fatbin_hdr_t *)w->data;
        if (h->magic == VCU__FATBIN_MAGIC) {
            fb->image = h;
            fb->len = (uint64_t)h->header_size + h->fat_size;
        }
    }
    pthread_mutex_lock(&vcu__rt.reg_lock);
    fb->next = vcu__fatbins;
    vcu__fatbins = fb;
    pthread_mutex_unlock(&vcu__rt.reg_lock);
    return (void **)fb;
}

VCU__EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
VCU__EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    (void)fatCubinHandle;
}

VCU__EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle);
VCU__EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    /* Runs from atexit: the session ends with the process and takes the
     * modules with it; the records stay for any late callers.  Device
     * printf output still waiting goes out first, as the native
     * context teardown flushes it. */
    (void)fatCubinHandle;
    vcu__printf_exit();
}

VCU__EXPORT char __cudaInitModule(void **fatCubinHandle);
VCU__EXPORT char __cudaInitModule(void **fatCubinHandle)
{
    (void)fatCubinHandle;
    return 1;
}

VCU__EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
                                        char *deviceFun, const char *deviceName,
                                        int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
                                        dim3 *gDim, int *wSize);
VCU__EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
                                        char *deviceFun, const char *deviceName,
                                        int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim,
                                        dim3 *gDim, int *wSize)
{
    vcu__kernel_t *k;
    const char *name = deviceFun != NULL ? deviceFun : deviceName;
    size_t b;

    (void)thread_limit;
    (void)tid;
    (void)bid;
    (void)bDim;
    (void)gDim;
    (void)wSize;
    if (fatCubinHandle == NULL || name == NULL || hostFun == NULL)
        return;
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return;
    k->fb = (vcu__fatbin_t *)fatCubinHandle;
    k->host = hostFun;
    k->name = strdup(name);
    if (k->name == NULL) {
        free(k);
        return;
    }
    b = vcu__phash(hostFun);
    pthread_mutex_lock(&vcu__rt.reg_lock);
    k->next = vcu__khash[b];
    vcu__khash[b] = k;
    pthread_mutex_unlock(&vcu__rt.reg_lock);
    vcu__reg_add(k, VCU__H_KERNEL);
}

static void vcu__add_var(void **handle, const void *host, const char *name, size_t size,
                         int managed)
{
    vcu__var_t *v;

    if (handle == NULL || host == NULL || name == NULL)
        return;
    v = calloc(1, sizeof(*v));
    if (v == NULL)
        return;
    v->fb = (vcu__fatbin_t *)handle;
    v->host = host;
    v->name = strdup(name);
    v->size = size;
    v->managed = managed;
    if (v->name == NULL) {
        free(v);
        return;
    }
    pthread_mutex_lock(&vcu__rt.reg_lock);
    v->next = vcu__vars;
    vcu__vars = v;
    pthread_mutex_unlock(&vcu__rt.reg_lock);
}

VCU__EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                   const char *deviceName, int ext, size_t size, int constant,
                                   int global);
VCU__EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                   const char *deviceName, int ext, size_t size, int constant,
                                   int global)
{
    (void)ext;
    (void)constant;
    (void)global;
    vcu__add_var(fatCubinHandle, hostVar, deviceAddress != NULL ? deviceAddress : deviceName,
                 size, VCU__VAR_DEVICE);
}

VCU__EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                          char *deviceAddress, const char *deviceName, int ext,
                                          size_t size, int constant, int global);
VCU__EXPORT void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                          char *deviceAddress, const char *deviceName, int ext,
                                          size_t size, int constant, int global)
{
    (void)ext;
    (void)constant;
    (void)global;
    vcu__add_var(fatCubinHandle, hostVarPtrAddress,
                 deviceAddress != NULL ? deviceAddress : deviceName, size, 1);
}

VCU__EXPORT void __cudaRegisterTexture(void **fatCubinHandle, const struct textureReference *hostVar,
                                       const void **deviceAddress, const char *deviceName,
                                       int dim, int norm, int ext);
VCU__EXPORT void __cudaRegisterTexture(void **fatCubinHandle, const struct textureReference *hostVar,
                                       const void **deviceAddress, const char *deviceName,
                                       int dim, int norm, int ext)
{
    static int once;

    (void)fatCubinHandle; (void)hostVar; (void)deviceAddress; (void)dim; (void)norm; (void)ext;
    vcu__log_once(&once, "virtio-cuda: texture references are not supported (%s)\n",
                  deviceName ? deviceName : "?");
}

VCU__EXPORT void __cudaRegisterSurface(void **fatCubinHandle, const struct surfaceReference *hostVar,
                                       const void **deviceAddress, const char *deviceName,
                                       int dim, int ext);
VCU__EXPORT void __cudaRegisterSurface(void **fatCubinHandle, const struct surfaceReference *hostVar,
                                       const void **deviceAddress, const char *deviceName,
                                       int dim, int ext)
{
    static int once;

    (void)fatCubinHandle; (void)hostVar; (void)deviceAddress; (void)dim; (void)ext;
    vcu__log_once(&once, "virtio-cuda: surface references are not supported (%s)\n",
                  deviceName ? deviceName : "?");
}

/*
 * A host variable a device extern maps to (unified memory builds): kept so
 * that symbol calls naming it say why they fail; nothing reaches the host.
 */
VCU__EXPORT void __cudaRegisterHostVar(void **fatCubinHandle, const char *deviceName,
                                       char *hostVar, size_t size);
VCU__EXPORT void __cudaRegisterHostVar(void **fatCubinHandle, const char *deviceName,
                                       char *hostVar, size_t size)
{
    vcu__add_var(fatCubinHandle, hostVar, deviceName, size, VCU__VAR_HOST);
}

/* Loads fb on dev if needed.  Caller holds reg_lock. */
static cudaError_t vcu__module_locked(vcu__fatbin_t *fb, int dev, uint64_t *mod)
{
    struct vcu_cu_module_load_req r;
    vcu__modname_t mn;
    char id[VCU__SRC_ID_LEN];
    struct vcu_cu_u64_resp o;
    vcu_buf_t b;
    void *trim = NULL;
    size_t tlen;
    int arch;
    cudaError_t e;

    if (fb->module[dev] != 0) {
        *mod = fb->module[dev];
        return cudaSuccess;
    }
    if (fb->image == NULL || fb->len == 0)
        return cudaErrorInvalidKernelImage;
    r.image_len = fb->len;
    b.addr = (void *)fb->image;
    b.len = fb->len;
    b.flags = VCU_SEG_TO_DEVICE;
    /* Only the code the device loads crosses to the host; a fatbin with
     * none is refused here, as the driver would refuse it. */
    arch = vcu__dev_attr(dev, cudaDevAttrComputeCapabilityMajor) * 10 +
           vcu__dev_attr(dev, cudaDevAttrComputeCapabilityMinor);
    switch (vcu_fatbin_trim(fb->image, (size_t)fb->len, (unsigned int)arch, &trim, &tlen)) {
    case VCU_FATBIN_NONE:
        return cudaErrorNoKernelImageForDevice;
    case VCU_FATBIN_TRIMMED:
        b.addr = trim;
        b.len = r.image_len = tlen;
        break;
    }
    /* An image the host's module cache holds is named, not sent
     * (CUDA_ERROR_FILE_NOT_FOUND: the cache lacks it; vcu_modhash.c). */
    e = cudaErrorFileNotFound;
    id[0] = '\0';
    if (vcu_conn_features(vcu__rt.conn) & VCU_FEAT_MODULE_CACHE)
        vcu__module_src_id(fb->image, fb->len, id, sizeof(id));
    vcu__module_name(vcu__rt.conn, 0, b.addr, b.len, id, (unsigned int)arch, &mn);
    if (mn.how != VCU__MN_SEND)
        e = vcu__call(dev, VCU_OP_CU_MODULE_LOAD_HASH, 0, &mn.req, sizeof(mn.req), NULL, 0, &o,
                      sizeof(o));
    if (e == cudaErrorFileNotFound && mn.keep) {
        struct vcu_cu_module_keep_resp k;

        e = vcu__call(dev, VCU_OP_CU_MODULE_LOAD_KEEP, 0, &r, sizeof(r), &b, 1, &k, sizeof(k));
        if (e == cudaSuccess) {
            o.value = k.module;
            vcu__module_remember(&mn, k.sha256);
        }
    } else if (e == cudaErrorFileNotFound) {
        e = vcu__call(dev, VCU_OP_CU_MODULE_LOAD, 0, &r, sizeof(r), &b, 1, &o, sizeof(o));
    }
    if (e == cudaSuccess) {
        fb->module[dev] = o.value;
        *mod = o.value;
        vcu__printf_module(b.addr, b.len);
    }
    free(trim);
    return e;
}

void vcu__kernels_forget_dev(int dev)
{
    vcu__fatbin_t *fb;
    vcu__var_t *v;

    for (fb = vcu__fatbins; fb != NULL; fb = fb->next)
        fb->module[dev] = 0;
    for (size_t i = 0; i < VCU__KHASH; i++)
        for (vcu__kernel_t *k = vcu__khash[i]; k != NULL; k = k->next) {
            free(k->f[dev].params);
            memset(&k->f[dev], 0, sizeof(k->f[dev]));
        }
    for (v = vcu__vars; v != NULL; v = v->next)
        v->dptr[dev] = v->dsize[dev] = 0;
}

vcu__kernel_t *vcu__kernel_by_host(const void *hostfn)
{
    vcu__kernel_t *k;

    if (hostfn == NULL)
        return NULL;
    if (vcu__reg_has(hostfn, VCU__H_KERNEL))
        return (vcu__kernel_t *)hostfn;     /* a cudaKernel_t from __cudaGetKernel */
    pthread_mutex_lock(&vcu__rt.reg_lock);
    for (k = vcu__khash[vcu__phash(hostfn)]; k != NULL; k = k->next)
        if (k->host == hostfn)
            break;
    pthread_mutex_unlock(&vcu__rt.reg_lock);
    return k;
}

/*
 * Fills the function's attribute cache (launch checks) and empties its
 * occupancy cache.  Without attributes launches wait for the host's
 * verdict.  Caller holds reg_lock.
 */
static void vcu__kfn_load_attrs_locked(vcu__kfn_t *f, uint64_t fn, int dev)
{
    struct vcu_cu_u64_req r = { .value = fn };
    struct vcu_cu_func_attrs_resp o;

    memset(f->occ, 0, sizeof(f->occ));
    f->have_attrs = 0;
    if (vcu__call(dev, VCU_OP_CU_FUNC_GET_ATTRS, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o)) !=
        cudaSuccess)
        return;
    memcpy(f->attrs, o.attrs, sizeof(f->attrs));
    f->have_attrs = 1;
}

cudaError_t vcu__kernel_fn(vcu__kernel_t *k, int dev, const vcu__kfn_t **out)
{
    struct {
        struct vcu_cu_name_req r;
        char name[VCU_CU_NAME_MAX];
    } q;
    struct {
        struct vcu_cu_function_resp f;
        struct vcu_cu_param p[VCU_CU_MAX_PARAMS];
    } *o = NULL;
    vcu__kfn_t *f = &k->f[dev];
    size_t nlen = strlen(k->name);
    cudaError_t e = cudaSuccess;
    uint64_t mod;

    pthread_mutex_lock(&vcu__rt.reg_lock);
    if (f->fn != 0)
        goto out;
    if (nlen == 0 || nlen > VCU_CU_NAME_MAX) {
        e = cudaErrorInvalidDeviceFunction;
        goto out;
    }
    e = vcu__module_locked(k->fb, dev, &mod);
    if (e != cudaSuccess)
        goto out;
    o = calloc(1, sizeof(*o));
    if (o == NULL) {
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    memset(&q.r, 0, sizeof(q.r));
    q.r.module = mod;
    q.r.name_len = (uint32_t)nlen;
    memcpy(q.name, k->name, nlen);
    e = vcu__call(dev, VCU_OP_CU_MODULE_GET_FUNCTION, 0, &q, (uint32_t)(sizeof(q.r) + nlen),
                  NULL, 0, o, sizeof(*o));
    if (e == cudaErrorSymbolNotFound)
        e = cudaErrorInvalidDeviceFunction;
    if (e != cudaSuccess)
        goto out;
    if (o->f.nparams > VCU_CU_MAX_PARAMS || o->f.param_bytes > VCU_CU_MAX_PARAM_BYTES) {
        e = cudaErrorUnknown;
        goto out;
    }
    for (uint32_t i = 0; i < o->f.nparams; i++) {
        if ((uint64_t)o->p[i].offset + o->p[i].size > o->f.param_bytes) {
            e = cudaErrorUnknown;
            goto out;
        }
    }
    f->params = malloc((o->f.nparams + 1) * sizeof(*f->params));
    if (f->params == NULL) {
        e = cudaErrorMemoryAllocation;
        goto out;
    }
    memcpy(f->params, o->p, o->f.nparams * sizeof(*f->params));
    f->nparams = o->f.nparams;
    f->param_bytes = o->f.param_bytes;
    vcu__kfn_load_attrs_locked(f, o->f.function, dev);
    f->fn = o->f.function;
out:
    pthread_mutex_unlock(&vcu__rt.reg_lock);
    free(o);
    *out = f;
    return e;
}

cudaError_t vcu__pack_params(const vcu__kfn_t *f, void **args, void *buf)
{
    if (f->nparams > 0 && args == NULL)
        return cudaErrorInvalidValue;
    memset(buf, 0, f->param_bytes);
    for (uint32_t i = 0; i < f->nparams; i++) {
        if (args[i] == NULL)
            return cudaErrorInvalidValue;
        memcpy((char *)buf + f->params[i].offset, args[i], f->params[i].size);
    }
    vcu__rt_host_params(buf, f->param_bytes);
    return cudaSuccess;
}

cudaError_t vcu__symbol(const void *sym, int dev, uint64_t *dptr, uint64_t *size)
{
    struct {
        struct vcu_cu_name_req r;
        char name[VCU_CU_NAME_MAX];
    } q;
    struct vcu_cu_mem_range_resp o;
    vcu__var_t *v;
    cudaError_t e = cudaSuccess;
    uint64_t mod;
    size_t nlen;

    pthread_mutex_lock(&vcu__rt.reg_lock);
    for (v = vcu__vars; v != NULL; v = v->next)
        if (v->host == sym)
            break;
    if (v == NULL) {
        e = cudaErrorInvalidSymbol;
        goto out;
    }
    if (v->managed) {
        static int once;

        vcu__log_once(&once, "virtio-cuda: %s variables are not supported (%s)\n",
                      v->managed == VCU__VAR_MANAGED ? "__managed__" : "unified host",
                      v->name);
        e = cudaErrorNotSupported;
        goto out;
    }
    if (v->dptr[dev] == 0) {
        nlen = strlen(v->name);
        if (nlen == 0 || nlen > VCU_CU_NAME_MAX) {
            e = cudaErrorInvalidSymbol;
            goto out;
        }
        e = vcu__module_locked(v->fb, dev, &mod);
        if (e != cudaSuccess)
            goto out;
        memset(&q.r, 0, sizeof(q.r));
        q.r.module = mod;
        q.r.name_len = (uint32_t)nlen;
        memcpy(q.name, v->name, nlen);
        e = vcu__call(dev, VCU_OP_CU_MODULE_GET_GLOBAL, 0, &q, (uint32_t)(sizeof(q.r) + nlen),
                      NULL, 0, &o, sizeof(o));
        if (e == cudaErrorSymbolNotFound)
            e = cudaErrorInvalidSymbol;
        if (e != cudaSuccess)
            goto out;
        v->dptr[dev] = o.base;
        v->dsize[dev] = o.size;
        {
            vcu__alloc_t a = { .base = o.base, .size = o.size, .dev = dev,
                               .kind = VCU__M_SYMBOL };

            vcu__mem_add(&a);
        }
    }
    *dptr = v->dptr[dev];
    *size = v->dsize[dev];
out:
    pthread_mutex_unlock(&vcu__rt.reg_lock);
    return e;
}

/* ---- launches ----------------------------------------------------------- */

typedef struct vcu__callcfg_s {
    dim3 grid, block;
    size_t shmem;
    void *stream;
} vcu__callcfg_t;

#define VCU__CFG_DEPTH 32
static __thread vcu__callcfg_t vcu__cfg[VCU__CFG_DEPTH];
static __thread unsigned int vcu__ncfg;

VCU__EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                 struct CUstream_st *stream);
VCU__EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                                 struct CUstream_st *stream)
{
    vcu__callcfg_t *c;

    if (vcu__ncfg >= VCU__CFG_DEPTH)
        return 1;
    c = &vcu__cfg[vcu__ncfg++];
    c->grid = gridDim;
    c->block = blockDim;
    c->shmem = sharedMem;
    c->stream = stream;
    return 0;
}

VCU__EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
                                                   size_t *sharedMem, void *stream);
VCU__EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
                                                   size_t *sharedMem, void *stream)
{
    vcu__callcfg_t *c;

    if (vcu__ncfg == 0)
        return vcu__err(cudaErrorMissingConfiguration);
    c = &vcu__cfg[--vcu__ncfg];
    *gridDim = c->grid;
    *blockDim = c->block;
    *sharedMem = c->shmem;
    *(void **)stream = c->stream;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
VCU__EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    vcu__kernel_t *k;

    if (kernel == NULL)
        return vcu__err(cudaErrorInvalidValue);
    k = vcu__kernel_by_host(hostFun);
    if (k == NULL)
        return vcu__err(cudaErrorInvalidDeviceFunction);
    *kernel = (cudaKernel_t)k;
    return cudaSuccess;
}

/* CUDA 13 reports every bad launch configuration as cudaErrorInvalidValue
 * (measured on an H200 with NVIDIA's runtime), not InvalidConfiguration. */
cudaError_t vcu__check_config(int dev, dim3 grid, dim3 block, size_t shmem)
{
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    int mt = vcu__dev_attr(dev, cudaDevAttrMaxThreadsPerBlock);

    (void)shmem;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 ||
        block.z == 0)
        return cudaErrorInvalidValue;
    if (mt > 0 && threads > (uint64_t)mt)
        return cudaErrorInvalidValue;
#define VCU__LIM(v, a)                                                               \
    do {                                                                             \
        int l_ = vcu__dev_attr(dev, cudaDevAttr##a);                                 \
        if (l_ > 0 && (uint64_t)(v) > (uint64_t)(unsigned int)l_)                    \
            return cudaErrorInvalidValue;                                    \
    } while (0)
    VCU__LIM(block.x, MaxBlockDimX);
    VCU__LIM(block.y, MaxBlockDimY);
    VCU__LIM(block.z, MaxBlockDimZ);
    VCU__LIM(grid.x, MaxGridDimX);
    VCU__LIM(grid.y, MaxGridDimY);
    VCU__LIM(grid.z, MaxGridDimZ);
#undef VCU__LIM
    return cudaSuccess;
}

/*
 * What CUDA checks at launch and the host would refuse, checked here so a
 * launch can go without waiting and still fail at the call: the function's
 * thread limit, its dynamic shared memory limit (48 KiB less static by
 * default, what cudaFuncSetAttribute set otherwise) and, cooperative, the
 * grid against occupancy.  *nowait: all of it could be checked.
 */
static cudaError_t vcu__check_fn_launch(vcu__kfn_t *f, int dev, dim3 grid, dim3 block,
                                        size_t shmem, uint32_t flags, int *nowait)
{
    uint64_t threads = (uint64_t)block.x * block.y * block.z;
    uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
    cudaError_t e = cudaSuccess;
    int sms;

    *nowait = 0;
    pthread_mutex_lock(&vcu__rt.reg_lock);
    if (!f->have_attrs)
        goto out;
    /* CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: registers, __launch_bounds__. */
    if (f->attrs[0] > 0 && threads > (uint64_t)f->attrs[0]) {
        e = cudaErrorLaunchOutOfResources;
        goto out;
    }
    /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    if (f->attrs[8] >= 0 && shmem > (uint64_t)f->attrs[8]) {
        e = cudaErrorInvalidValue;
        goto out;
    }
    if (flags & VCU_CU_LAUNCH_F_COOPERATIVE) {
        struct vcu_call_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_req r;
        struct vcu_call_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_resp o;
        vcu__occ_t *c = NULL;

        if (vcu__dev_attr(dev, cudaDevAttrCooperativeLaunch) != 1) {
            e = cudaErrorNotSupported;
            goto out;
        }
        for (unsigned int i = 0; i < VCU__OCC_CACHE; i++)
            if (f->occ[i].block == threads && f->occ[i].dyn_smem == shmem)
                c = &f->occ[i];
        if (c == NULL) {
            VCU_CALL_INIT(r, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
            r.func = f->fn;
            r.blockSize = (uint64_t)threads;
            r.dynamicSMemSize = shmem;
            if (vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o)) !=
                cudaSuccess)
                goto out;   /* the host decides, synchronously */
            c = &f->occ[f->occ_next++ % VCU__OCC_CACHE];
            c->block = (uint32_t)threads;
            c->dyn_smem = (uint32_t)shmem;
            c->blocks = (uint32_t)o.numBlocks;
        }
        sms = vcu__dev_attr(dev, cudaDevAttrMultiProcessorCount);
        if (sms <= 0)
            goto out;
        if (blocks > (uint64_t)c->blocks * (uint64_t)sms) {
            e = cudaErrorCooperativeLaunchTooLarge;
            goto out;
        }
    }
    *nowait = 1;
out:
    pthread_mutex_unlock(&vcu__rt.reg_lock);
    return e;
}

/*
 * A launch; with launch attributes (nattrs > 0, wire form) it is a
 * CU_LAUNCH_EX, cooperative then one of them.  The runtime's attribute
 * ids are the driver's, which the wire carries.
 */
_Static_assert((int)cudaLaunchAttributeCooperative == 2 &&
               (int)cudaLaunchAttributeClusterDimension == 4 &&
               (int)cudaLaunchAttributeClusterSchedulingPolicyPreference == 5,
               "cudaLaunchAttributeID is CUlaunchAttributeID");
static cudaError_t vcu__launch_attrs(vcu__kernel_t *k, dim3 grid, dim3 block, void **args,
                                     size_t shmem, cudaStream_t stream, int ptsz, uint32_t flags,
                                     const struct vcu_cu_launch_attr *attrs, uint32_t nattrs)
{
    vcu__launch_req_t *q;
    size_t head;
    uint8_t *params;
    const vcu__kfn_t *f;
    uint64_t ws;
    int dev, nowait;
    cudaError_t e;

    e = vcu__stream(stream, ptsz, &dev, &ws);
    if (e != cudaSuccess)
        return e;
    e = vcu__check_dev(dev);
    if (e != cudaSuccess)
        return e;
    if (k == NULL)
        return cudaErrorInvalidDeviceFunction;
    e = vcu__check_config(dev, grid, block, shmem);
    if (e != cudaSuccess)
        return e;
    if (shmem > UINT32_MAX)
        return cudaErrorInvalidValue;
    e = vcu__kernel_fn(k, dev, &f);
    if (e != cudaSuccess)
        return e;
    e = vcu__check_fn_launch((vcu__kfn_t *)f, dev, grid, block, shmem, flags, &nowait);
    if (e == cudaSuccess)
        e = vcu__managed_use(dev, ws);
    if (e != cudaSuccess)
        return e;
    if (nattrs > VCU_CU_MAX_LAUNCH_ATTRS)
        return cudaErrorNotSupported;
    /* The host checks attributes the runtime does not (a grid in whole
     * clusters): wait for its answer, so that a refusal shows at the
     * launch as NVIDIA's runtime reports it. */
    if (nattrs > 0)
        nowait = 0;
    q = vcu__launch_buf();
    if (q == NULL)
        return cudaErrorMemoryAllocation;
    memset(&q->r, 0, sizeof(q->r));
    if (nattrs > 0) {
        memcpy(q->attrs, attrs, nattrs * sizeof(*attrs));
        if (flags & VCU_CU_LAUNCH_F_COOPERATIVE) {
            memset(&q->attrs[nattrs], 0, sizeof(q->attrs[0]));
            q->attrs[nattrs].id = cudaLaunchAttributeCooperative;
            q->attrs[nattrs++].v[0] = 1;
        }
        q->r.nattrs = nattrs;
        head = sizeof(q->r) + nattrs * sizeof(q->attrs[0]);
    } else {
        head = sizeof(q->r.l);
        q->r.l.flags = flags;
    }
    params = (uint8_t *)q + head;
    e = vcu__pack_params(f, args, params);
    if (e == cudaSuccess) {
        q->r.l.function = f->fn;
        q->r.l.stream = ws;
        q->r.l.grid[0] = grid.x;
        q->r.l.grid[1] = grid.y;
        q->r.l.grid[2] = grid.z;
        q->r.l.block[0] = block.x;
        q->r.l.block[1] = block.y;
        q->r.l.block[2] = block.z;
        q->r.l.shared_mem = (uint32_t)shmem;
        q->r.l.param_bytes = f->param_bytes;
        e = vcu__call(dev, nattrs > 0 ? VCU_OP_CU_LAUNCH_EX : VCU_OP_CU_LAUNCH, nowait, q,
                      (uint32_t)(head + f->param_bytes), NULL, 0, NULL, 0);
    }
    vcu__launch_buf_put(q);
    return e;
}

cudaError_t vcu__launch(vcu__kernel_t *k, dim3 grid, dim3 block, void **args, size_t shmem,
                        cudaStream_t stream, int ptsz, uint32_t flags)
{
    return vcu__launch_attrs(k, grid, block, args, shmem, stream, ptsz, flags, NULL, 0);
}

VCU__EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                           void **args, size_t sharedMem, cudaStream_t stream);
VCU__EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                           void **args, size_t sharedMem, cudaStream_t stream)
{
    if (!vcu__reg_has(kernel, VCU__H_KERNEL))
        return vcu__err(cudaErrorInvalidDeviceFunction);
    return vcu__err(vcu__launch((vcu__kernel_t *)kernel, gridDim, blockDim, args, sharedMem,
                                stream, 0, 0));
}

VCU__EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem,
                                                cudaStream_t stream);
VCU__EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem,
                                                cudaStream_t stream)
{
    if (!vcu__reg_has(kernel, VCU__H_KERNEL))
        return vcu__err(cudaErrorInvalidDeviceFunction);
    return vcu__err(vcu__launch((vcu__kernel_t *)kernel, gridDim, blockDim, args, sharedMem,
                                stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream)
{
    return vcu__err(vcu__launch(vcu__kernel_by_host(func), gridDim, blockDim, args, sharedMem,
                                stream, 0, 0));
}

VCU__EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream)
{
    return vcu__err(vcu__launch(vcu__kernel_by_host(func), gridDim, blockDim, args, sharedMem,
                                stream, 1, 0));
}

VCU__EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim,
                                                    dim3 blockDim, void **args, size_t sharedMem,
                                                    cudaStream_t stream)
{
    return vcu__err(vcu__launch(vcu__kernel_by_host(func), gridDim, blockDim, args, sharedMem,
                                stream, 0, VCU_CU_LAUNCH_F_COOPERATIVE));
}

VCU__EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
                                                         dim3 blockDim, void **args,
                                                         size_t sharedMem, cudaStream_t stream);
VCU__EXPORT cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim,
                                                         dim3 blockDim, void **args,
                                                         size_t sharedMem, cudaStream_t stream)
{
    return vcu__err(vcu__launch(vcu__kernel_by_host(func), gridDim, blockDim, args, sharedMem,
                                stream, 1, VCU_CU_LAUNCH_F_COOPERATIVE));
}

/* ---- function attributes and occupancy ---------------------------------- */

static cudaError_t vcu__func_here(const void *func, int *dev, const vcu__kfn_t **f)
{
    vcu__kernel_t *k;
    cudaError_t e = vcu__enter(dev);

    if (e != cudaSuccess)
        return e;
    k = vcu__kernel_by_host(func);
    if (k == NULL)
        return cudaErrorInvalidDeviceFunction;
    return vcu__kernel_fn(k, *dev, f);
}

VCU__EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_func_attrs_resp o;
    const vcu__kfn_t *f;
    int dev;
    cudaError_t e;

    if (attr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__func_here(func, &dev, &f);
    if (e != cudaSuccess)
        return vcu__err(e);
    r.value = f->fn;
    e = vcu__call(dev, VCU_OP_CU_FUNC_GET_ATTRS, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != cudaSuccess)
        return vcu__err(e);
    memset(attr, 0, sizeof(*attr));
    /* Indices are CUfunction_attribute values. */
    attr->maxThreadsPerBlock = (int32_t)o.attrs[0];
    attr->sharedSizeBytes = (size_t)o.attrs[1];
    attr->constSizeBytes = (size_t)o.attrs[2];
    attr->localSizeBytes = (size_t)o.attrs[3];
    attr->numRegs = (int32_t)o.attrs[4];
    attr->ptxVersion = (int32_t)o.attrs[5];
    attr->binaryVersion = (int32_t)o.attrs[6];
    attr->cacheModeCA = (int32_t)o.attrs[7];
    attr->maxDynamicSharedSizeBytes = (int32_t)o.attrs[8];
    attr->preferredShmemCarveout = (int32_t)o.attrs[9];
    attr->clusterDimMustBeSet = (int32_t)o.attrs[10];
    attr->requiredClusterWidth = (int32_t)o.attrs[11];
    attr->requiredClusterHeight = (int32_t)o.attrs[12];
    attr->requiredClusterDepth = (int32_t)o.attrs[13];
    attr->nonPortableClusterSizeAllowed = (int32_t)o.attrs[14];
    attr->clusterSchedulingPolicyPreference = (int32_t)o.attrs[15];
    return cudaSuccess;
}

static cudaError_t vcu__func_set_attr(vcu__kernel_t *k, int dev, enum cudaFuncAttribute attr,
                                      int value)
{
    struct vcu_call_cuFuncSetAttribute_req r;
    const vcu__kfn_t *f;
    cudaError_t e;

    if (k == NULL)
        return cudaErrorInvalidDeviceFunction;
    e = vcu__kernel_fn(k, dev, &f);
    if (e != cudaSuccess)
        return e;
    VCU_CALL_INIT(r, cuFuncSetAttribute);
    r.hfunc = f->fn;
    r.attrib = (uint32_t)attr;  /* cudaFuncAttribute values equal CUfunction_attribute's */
    r.value = (uint64_t)(int64_t)value;
    e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e == cudaSuccess) {
        /* The limits launches are checked against may have moved. */
        pthread_mutex_lock(&vcu__rt.reg_lock);
        vcu__kfn_load_attrs_locked((vcu__kfn_t *)f, f->fn, dev);
        pthread_mutex_unlock(&vcu__rt.reg_lock);
    }
    return e;
}

VCU__EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
                                             int value)
{
    int dev;
    cudaError_t e = vcu__enter(&dev);

    if (e == cudaSuccess)
        e = vcu__func_set_attr(vcu__kernel_by_host(func), dev, attr, value);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel,
                                                        enum cudaFuncAttribute attr, int value,
                                                        int device)
{
    cudaError_t e = vcu__check_dev(device);

    if (e == cudaSuccess && !vcu__reg_has(kernel, VCU__H_KERNEL))
        e = cudaErrorInvalidDeviceFunction;
    if (e == cudaSuccess)
        e = vcu__func_set_attr((vcu__kernel_t *)kernel, device, attr, value);
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
    (void)cacheConfig;          /* a hint, as on every GPU since sm_70 */
    if (vcu__kernel_by_host(func) == NULL)
        return vcu__err(cudaErrorInvalidDeviceFunction);
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int *numBlocks, const void *func, int blockSize, size_t dynamicSMemSize, unsigned int flags)
{
    struct vcu_call_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_req r;
    struct vcu_call_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_resp o;
    const vcu__kfn_t *f;
    int dev;
    cudaError_t e;

    if (numBlocks == NULL || blockSize <= 0)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__func_here(func, &dev, &f);
    if (e != cudaSuccess)
        return vcu__err(e);
    VCU_CALL_INIT(r, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
    r.func = f->fn;
    r.blockSize = (uint64_t)(int64_t)blockSize;
    r.flags = flags;
    r.dynamicSMemSize = dynamicSMemSize;
    e = vcu__call(dev, VCU_OP_CU_CALL, 0, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e == cudaSuccess)
        *numBlocks = (int)o.numBlocks;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks,
                                                                      const void *func,
                                                                      int blockSize,
                                                                      size_t dynamicSMemSize)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                  dynamicSMemSize, 0);
}

/* ---- symbols ------------------------------------------------------------ */

VCU__EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    uint64_t p, s;
    int dev;
    cudaError_t e;

    if (devPtr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e == cudaSuccess)
        e = vcu__symbol(symbol, dev, &p, &s);
    if (e == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return vcu__err(e);
}

VCU__EXPORT cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
    uint64_t p, s;
    int dev;
    cudaError_t e;

    if (size == NULL)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__enter(&dev);
    if (e == cudaSuccess)
        e = vcu__symbol(symbol, dev, &p, &s);
    if (e == cudaSuccess)
        *size = s;
    return vcu__err(e);
}

/* ---- kernels by handle, parameters, extensible launches ----------------- */

VCU__EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
    return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

/* The kernel's record stands for its function: it is what every entry
 * point taking a function accepts. */
VCU__EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
    vcu__kernel_t *k;

    if (functionPtr == NULL)
        return vcu__err(cudaErrorInvalidValue);
    k = vcu__kernel_by_host(symbolPtr);
    if (k == NULL)
        return vcu__err(cudaErrorInvalidDeviceFunction);
    *functionPtr = (cudaFunction_t)k;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func)
{
    vcu__kernel_t *k;

    if (name == NULL)
        return vcu__err(cudaErrorInvalidValue);
    k = vcu__kernel_by_host(func);
    if (k == NULL)
        return vcu__err(cudaErrorInvalidDeviceFunction);
    *name = k->name;            /* registered for the life of the process */
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex,
                                             size_t *paramOffset, size_t *paramSize)
{
    const vcu__kfn_t *f;
    int dev;
    cudaError_t e;

    e = vcu__func_here(func, &dev, &f);
    if (e != cudaSuccess)
        return vcu__err(e);
    if (paramIndex >= f->nparams)
        return vcu__err(cudaErrorInvalidValue);
    if (paramOffset != NULL)
        *paramOffset = f->params[paramIndex].offset;
    if (paramSize != NULL)
        *paramSize = f->params[paramIndex].size;
    return cudaSuccess;
}

VCU__EXPORT cudaError_t cudaFuncSetSharedMemConfig(const void *func,
                                                   enum cudaSharedMemConfig config)
{
    if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte)
        return vcu__err(cudaErrorInvalidValue);
    if (vcu__kernel_by_host(func) == NULL)
        return vcu__err(cudaErrorInvalidDeviceFunction);
    return cudaSuccess;         /* deprecated; a no-op since sm_70 */
}

/*
 * Launch attributes: cooperative becomes a cooperative launch; clusters
 * and their scheduling policy travel (CU_LAUNCH_EX); hints whose absence
 * only makes the launch more conservative are accepted and dropped; what
 * would change the result otherwise (events triggered by the launch,
 * device-updatable nodes) is not supported.
 */
static cudaError_t vcu__launch_ex(const cudaLaunchConfig_t *c, const void *func, void **args,
                                  int ptsz)
{
    struct vcu_cu_launch_attr w[2];
    uint32_t flags = 0, nw = 0;

    if (c == NULL || (c->numAttrs > 0 && c->attrs == NULL))
        return cudaErrorInvalidValue;
    memset(w, 0, sizeof(w));
    for (unsigned int i = 0; i < c->numAttrs; i++) {
        const cudaLaunchAttribute *a = &c->attrs[i];
        static int once;

        switch (a->id) {
        case cudaLaunchAttributeClusterSchedulingPolicyPreference:
            w[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
            w[1].v[0] = (uint32_t)a->val.clusterSchedulingPolicyPreference;
            break;
        case cudaLaunchAttributeIgnore:
        case cudaLaunchAttributeAccessPolicyWindow:
        case cudaLaunchAttributeSynchronizationPolicy:
        case cudaLaunchAttributeProgrammaticStreamSerialization:
        case cudaLaunchAttributePriority:
        case cudaLaunchAttributeMemSyncDomainMap:
        case cudaLaunchAttributeMemSyncDomain:
        case cudaLaunchAttributePreferredClusterDimension:
        case cudaLaunchAttributePreferredSharedMemoryCarveout:
        case cudaLaunchAttributeNvlinkUtilCentricScheduling:
            break;
        case cudaLaunchAttributeCooperative:
            if (a->val.cooperative)
                flags |= VCU_CU_LAUNCH_F_COOPERATIVE;
            break;
        case cudaLaunchAttributeClusterDimension:
            w[0].id = cudaLaunchAttributeClusterDimension;
            w[0].v[0] = a->val.clusterDim.x;
            w[0].v[1] = a->val.clusterDim.y;
            w[0].v[2] = a->val.clusterDim.z;
            break;
        default:
            vcu__log_once(&once, "virtio-cuda: cudaLaunchKernelExC with launch attribute %d "
                                 "is not supported\n", (int)a->id);
            return cudaErrorNotSupported;
        }
    }
    /* Clusters of one block and a policy without clusters are plain
     * launches. */
    if (w[0].id != 0 &&
        (uint64_t)w[0].v[0] * w[0].v[1] * w[0].v[2] == 1)
        w[0].id = 0;
    if (w[0].id != 0) {
        nw = 1;
        if (w[1].id != 0)
            w[nw++] = w[1];
    }
    return vcu__launch_attrs(vcu__kernel_by_host(func), c->gridDim, c->blockDim, args,
                             c->dynamicSmemBytes, c->stream, ptsz, flags, w, nw);
}

VCU__EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                            void **args)
{
    return vcu__err(vcu__launch_ex(config, func, args, 0));
}

VCU__EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config,
                                                 const void *func, void **args);
VCU__EXPORT cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config,
                                                 const void *func, void **args)
{
    return vcu__err(vcu__launch_ex(config, func, args, 1));
}

/*
 * Dynamic shared memory left per block with numBlocks blocks of blockSize
 * threads resident on one SM: the SM's shared memory split evenly, less
 * each block's reservation and static use, capped by the function's
 * dynamic limit; 0 where that many blocks cannot be resident at all.
 */
VCU__EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
                                                                  const void *func,
                                                                  int numBlocks, int blockSize)
{
    const vcu__kfn_t *f;
    int64_t per_sm, reserved, warp, threads_sm, blocks_sm, avail;
    int32_t max_threads, static_smem, max_dyn;
    int dev;
    cudaError_t e;

    if (dynamicSmemSize == NULL || numBlocks <= 0 || blockSize <= 0)
        return vcu__err(cudaErrorInvalidValue);
    e = vcu__func_here(func, &dev, &f);
    if (e != cudaSuccess)
        return vcu__err(e);
    pthread_mutex_lock(&vcu__rt.reg_lock);
    if (!f->have_attrs)
        vcu__kfn_load_attrs_locked((vcu__kfn_t *)f, f->fn, dev);
    e = f->have_attrs ? cudaSuccess : cudaErrorUnknown;
    max_threads = f->attrs[0];      /* CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK */
    static_smem = f->attrs[1];      /* CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES */
    max_dyn = f->attrs[8];          /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    pthread_mutex_unlock(&vcu__rt.reg_lock);
    if (e != cudaSuccess)
        return vcu__err(e);
    per_sm = vcu__dev_attr(dev, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
    reserved = vcu__dev_attr(dev, cudaDevAttrReservedSharedMemoryPerBlock);
    warp = vcu__dev_attr(dev, cudaDevAttrWarpSize);
    threads_sm = vcu__dev_attr(dev, cudaDevAttrMaxThreadsPerMultiProcessor);
    blocks_sm = vcu__dev_attr(dev, cudaDevAttrMaxBlocksPerMultiprocessor);
    if (warp <= 0)
        warp = 32;
    *dynamicSmemSize = 0;
    if ((max_threads > 0 && blockSize > max_threads) ||
        (blocks_sm > 0 && numBlocks > blocks_sm) ||
        (threads_sm > 0 &&
         (int64_t)numBlocks * ((blockSize + warp - 1) / warp * warp) > threads_sm))
        return cudaSuccess;
    avail = per_sm / numBlocks - reserved - static_smem;
    if (avail < 0)
        avail = 0;
    if (max_dyn >= 0 && avail > max_dyn)
        avail = max_dyn;
    *dynamicSmemSize = (size_t)avail;
    return cudaSuccess;
}
