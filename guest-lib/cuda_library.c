/*
 * libcuda.so.1: libraries and kernels (cuLibrary*, cuKernel*), the
 * context-independent way to load code that NVIDIA's CUDA 13 runtime
 * uses for the fatbins a program registers.  A library keeps a copy of
 * its image and becomes a module of the host's context of a device the
 * first time it is used there (loaded whole: the host's driver gets the
 * whole image).  A kernel is a name in a library; its function in a
 * context is that module's function of that name.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

/* Library options this library takes: none changes anything here. */
static CUresult vcu__lib_options(CUjit_option *jitOptions, void **jitOptionsValues,
                                 unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                 void **libraryOptionValues, unsigned int numLibraryOptions)
{
    if (numJitOptions > 0 && (jitOptions == NULL || jitOptionsValues == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numJitOptions; i++)
        if ((unsigned int)jitOptions[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    /* No library option's value is read here, and cuBLASLt 13 passes
     * CU_LIBRARY_BINARY_IS_PRESERVED with no values array at all. */
    (void)libraryOptionValues;
    if (numLibraryOptions > 0 && libraryOptions == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numLibraryOptions; i++)
        if ((unsigned int)libraryOptions[i] >= CU_LIBRARY_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* The library's module in device dev, loaded at the first ask.  Two
 * threads asking at once may both load; the first to finish is kept. */
static CUresult vcu__lib_module_dev(vcu__library_t *l, int dev, vcu__module_t **out)
{
    vcu__module_t *m;
    CUmodule mod;
    CUresult e;

    pthread_mutex_lock(&vcu__drv.lock);
    m = l->mod[dev];
    e = l->nobin[dev] ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_SUCCESS;
    pthread_mutex_unlock(&vcu__drv.lock);
    if (m != NULL) {
        *out = m;
        return CUDA_SUCCESS;
    }
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__module_load_dev(dev, &mod, l->image, l->len, l);
    if (e == CUDA_ERROR_NO_BINARY_FOR_GPU) {
        pthread_mutex_lock(&vcu__drv.lock);
        l->nobin[dev] = 1;
        pthread_mutex_unlock(&vcu__drv.lock);
    }
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    if (l->mod[dev] == NULL) {
        l->mod[dev] = (vcu__module_t *)mod;
        mod = NULL;
    }
    m = l->mod[dev];
    pthread_mutex_unlock(&vcu__drv.lock);
    if (mod != NULL) {
        struct vcu_cu_u64_req u = { .value = ((vcu__module_t *)mod)->h };

        vcu__call(dev, VCU_OP_CU_MODULE_UNLOAD, &u, sizeof(u), NULL, 0, NULL, 0);
        vcu__reg_del(mod);
        free(mod);
    }
    *out = m;
    return CUDA_SUCCESS;
}

/* The same in the current context's device. */
static CUresult vcu__lib_module(vcu__library_t *l, vcu__module_t **out)
{
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__lib_module_dev(l, c->dev, out);
}

/* The module of a library handle from the program, in the current
 * context's device: the driver initialized, the handle checked. */
static CUresult vcu__lib_module_of(CUlibrary library, vcu__module_t **out)
{
    vcu__library_t *l = (vcu__library_t *)library;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(l, VCU__K_LIBRARY))
        return CUDA_ERROR_INVALID_HANDLE;
    return vcu__lib_module(l, out);
}

/*
 * Loaded into the current context's device now, if there is one (so a
 * bad image fails here, as NVIDIA's eager loading does), else at the
 * first use.
 */
VCU__EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                       CUjit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions,
                                       void **libraryOptionValues,
                                       unsigned int numLibraryOptions)
{
    vcu__library_t *l;
    vcu__module_t *m;
    vcu__ctx_t *c;
    uint64_t len;
    CUresult e;

    if (library == NULL || code == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__lib_options(jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                         libraryOptionValues, numLibraryOptions);
    if (e == CUDA_SUCCESS)
        e = vcu__check_init();
    if (e == CUDA_SUCCESS)
        e = vcu__image_size(&code, UINT64_MAX, &len);
    if (e != CUDA_SUCCESS)
        return e;
    l = calloc(1, sizeof(*l));
    if (l == NULL || (l->image = malloc(len)) == NULL) {
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(l->image, code, len);
    l->len = len;
    /* Where the copy came from, now that both hold the same bytes: the
     * module cache names images by their place in a library's file. */
    if (vcu_conn_features(vcu__drv.conn) & VCU_FEAT_MODULE_CACHE)
        vcu__module_src_id(code, len, l->src_id, sizeof(l->src_id));
    if (vcu__reg_add(l, VCU__K_LIBRARY) != 0) {
        free(l->image);
        free(l);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (vcu__cur_quiet(&c) == CUDA_SUCCESS) {
        e = vcu__lib_module(l, &m);
        /* A library may carry code for other GPUs only (cuBLAS registers
         * one per architecture family): as with NVIDIA's lazy loading, that
         * fails at the first use of one of its kernels, not here. */
        if (e == CUDA_ERROR_NO_BINARY_FOR_GPU)
            e = CUDA_SUCCESS;
        if (e != CUDA_SUCCESS) {
            vcu__reg_del(l);
            free(l->image);
            free(l);
            return e;
        }
    }
    *library = (CUlibrary)l;
    return CUDA_SUCCESS;
}

/* The file read whole, then as cuLibraryLoadData (which copies it). */
VCU__EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                           CUjit_option *jitOptions, void **jitOptionsValues,
                                           unsigned int numJitOptions,
                                           CUlibraryOption *libraryOptions,
                                           void **libraryOptionValues,
                                           unsigned int numLibraryOptions)
{
    char *buf;
    size_t n;
    CUresult e;

    if (library == NULL || fileName == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e == CUDA_SUCCESS)
        e = vcu__read_image(fileName, &buf, &n);
    if (e != CUDA_SUCCESS)
        return e;
    {
        /* The image must end within the file (cuLibraryLoadData trusts
         * its headers for the length). */
        const void *img = buf;
        uint64_t len;

        e = vcu__image_size(&img, (uint64_t)n, &len);
    }
    if (e == CUDA_SUCCESS)
        e = cuLibraryLoadData(library, buf, jitOptions, jitOptionsValues, numJitOptions,
                          libraryOptions, libraryOptionValues, numLibraryOptions);
    free(buf);
    return e;
}

/* Its modules are unloaded from every device (each in the host's
 * context of that device, which needs no current context here). */
VCU__EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    vcu__library_t *l = (vcu__library_t *)library;
    vcu__kernel_t *k;
    CUresult e = vcu__check_init(), r = CUDA_SUCCESS;

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(l, VCU__K_LIBRARY))
        return CUDA_ERROR_INVALID_HANDLE;
    vcu__reg_del(l);
    for (int d = 0; d < (int)VCU_CU_MAX_DEVICES; d++) {
        vcu__module_t *m = l->mod[d];
        struct vcu_cu_u64_req u;
        vcu__func_t *funcs;

        if (m == NULL)
            continue;
        u.value = m->h;
        e = vcu__call(m->dev, VCU_OP_CU_MODULE_UNLOAD, &u, sizeof(u), NULL, 0, NULL, 0);
        if (r == CUDA_SUCCESS)
            r = e;
        vcu__reg_del(m);
        pthread_mutex_lock(&vcu__drv.lock);
        funcs = m->funcs;
        m->funcs = NULL;
        pthread_mutex_unlock(&vcu__drv.lock);
        while (funcs != NULL) {
            vcu__func_t *next = funcs->next;

            vcu__reg_del(funcs);
            free(funcs->name);
            free(funcs->params);
            free(funcs);
            funcs = next;
        }
        free(m);
    }
    k = l->kernels;
    while (k != NULL) {
        vcu__kernel_t *next = k->next;

        vcu__reg_del(k);
        free(k->name);
        free(k);
        k = next;
    }
    free(l->image);
    free(l);
    return r;
}

VCU__EXPORT CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    vcu__module_t *m;
    CUresult e;

    if (pMod == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__lib_module_of(library, &m);
    if (e != CUDA_SUCCESS)
        return e;
    *pMod = (CUmodule)m;
    return CUDA_SUCCESS;
}

/*
 * One handle per name and library.  The name is looked up in the
 * current context's device (CUDA_ERROR_NOT_FOUND when the image has no
 * such kernel) where there is a current context and the library has code
 * for it.
 */
VCU__EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    vcu__library_t *l = (vcu__library_t *)library;
    vcu__kernel_t *k;
    vcu__module_t *m;
    vcu__ctx_t *c;
    CUfunction f;
    size_t nlen;
    CUresult e;

    if (pKernel == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(l, VCU__K_LIBRARY))
        return CUDA_ERROR_INVALID_HANDLE;
    nlen = strnlen(name, VCU_CU_NAME_MAX + 1);
    if (nlen == 0 || nlen > VCU_CU_NAME_MAX)
        return CUDA_ERROR_NOT_FOUND;
    /* A library with no code for this GPU: CUDA_ERROR_NO_BINARY_FOR_GPU
     * for every name, known or not, as NVIDIA's driver answers (measured,
     * tests/gpu/probe-libs.c).  cuDNN 9 asks for the kernels of its
     * libraries for every GPU generation (thousands at cudnnCreate) and
     * takes that answer; the library remembers it (nobin), so the image
     * is not trimmed again for each. */
    if (vcu__cur_quiet(&c) == CUDA_SUCCESS) {
        e = vcu__lib_module(l, &m);
        if (e == CUDA_SUCCESS)
            e = cuModuleGetFunction(&f, (CUmodule)m, name);
        if (e != CUDA_SUCCESS)
            return e;
    }
    pthread_mutex_lock(&vcu__drv.lock);
    for (k = l->kernels; k != NULL; k = k->next)
        if (strcmp(k->name, name) == 0)
            break;
    if (k == NULL) {
        k = calloc(1, sizeof(*k));
        if (k != NULL && (k->name = strdup(name)) != NULL && vcu__reg_add(k, VCU__K_KERNEL) == 0) {
            k->lib = l;
            k->next = l->kernels;
            l->kernels = k;
        } else {
            if (k != NULL)
                free(k->name);
            free(k);
            k = NULL;
        }
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    if (k == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pKernel = (CUkernel)k;
    return CUDA_SUCCESS;
}

/* The kernel's function in the current context (its library's module in
 * that device). */
VCU__EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    vcu__kernel_t *k = (vcu__kernel_t *)kernel;
    vcu__module_t *m;
    CUresult e;

    if (pFunc == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(k, VCU__K_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    e = vcu__lib_module(k->lib, &m);
    if (e != CUDA_SUCCESS)
        return e;
    return cuModuleGetFunction(pFunc, (CUmodule)m, k->name);
}

/* kernel's function in device dev (a graph's kernel node names the
 * kernel and its graph the device: no current context is needed, as
 * natively). */
CUresult vcu__kernel_function_dev(CUkernel kernel, int dev, CUfunction *out)
{
    vcu__kernel_t *k = (vcu__kernel_t *)kernel;
    vcu__module_t *m;
    vcu__func_t *f;
    CUresult e;

    if (!vcu__reg_has(k, VCU__K_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    e = vcu__lib_module_dev(k->lib, dev, &m);
    if (e == CUDA_SUCCESS)
        e = vcu__module_function(m, k->name, &f);
    if (e == CUDA_SUCCESS)
        *out = (CUfunction)f;
    return e;
}

VCU__EXPORT CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    vcu__kernel_t *k = (vcu__kernel_t *)kernel;
    CUresult e;

    if (pLib == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(k, VCU__K_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    *pLib = (CUlibrary)k->lib;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    vcu__kernel_t *k = (vcu__kernel_t *)hfunc;
    CUresult e;

    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(k, VCU__K_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    *name = k->name;
    return CUDA_SUCCESS;
}

/* A global of the library's module in the current context's device. */
VCU__EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                        const char *name)
{
    vcu__module_t *m;
    CUresult e;

    if (name == NULL || (dptr == NULL && bytes == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__lib_module_of(library, &m);
    if (e != CUDA_SUCCESS)
        return e;
    return cuModuleGetGlobal_v2(dptr, bytes, (CUmodule)m, name);
}

/* The library's kernel names, for the current context's device (device
 * 0 with no context: the names rarely differ between architectures). */
static CUresult vcu__lib_names(CUlibrary library, char ***names, unsigned int *n)
{
    vcu__library_t *l = (vcu__library_t *)library;
    vcu__ctx_t *c;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(l, VCU__K_LIBRARY))
        return CUDA_ERROR_INVALID_HANDLE;
    return vcu__image_kernel_names(l->image, l->len,
                                   vcu__cur_quiet(&c) == CUDA_SUCCESS ? c->dev : 0, names, n);
}

VCU__EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
    char **names;
    CUresult e;

    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__lib_names(lib, &names, count);
    if (e == CUDA_SUCCESS)
        vcu__names_free(names, *count);
    return e;
}

/* Its kernels, up to numKernels, each the handle cuLibraryGetKernel gives
 * for its name. */
VCU__EXPORT CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels,
                                               CUlibrary lib)
{
    char **names = NULL;
    unsigned int n = 0;
    CUresult e;

    if (kernels == NULL && numKernels > 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__lib_names(lib, &names, &n);
    for (unsigned int i = 0; i < n && i < numKernels && e == CUDA_SUCCESS; i++)
        e = cuLibraryGetKernel(&kernels[i], lib, names[i]);
    vcu__names_free(names, n);
    return e;
}

/*
 * A managed variable (__managed__) of the library: its device address,
 * which the program's host code uses too (it has a host view here:
 * vcu_managed.c).  A global that is not managed memory is not found, and
 * neither is one that cannot have a host view here.
 */
VCU__EXPORT CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                         const char *name)
{
    CUdeviceptr p = 0;
    size_t n = 0;
    vcu__module_t *m;
    int managed = 0;
    CUresult e;

    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__lib_module_of(library, &m);
    if (e == CUDA_SUCCESS)
        e = vcu__module_global(&p, &n, &managed, (CUmodule)m, name);
    if (e != CUDA_SUCCESS)
        return e;
    if (!managed)
        return CUDA_ERROR_NOT_FOUND;
    if (dptr != NULL)
        *dptr = p;
    if (bytes != NULL)
        *bytes = n;
    return CUDA_SUCCESS;
}

/* ---- function attributes ------------------------------------------------ */

static CUresult vcu__func_get_attr(vcu__func_t *f, CUfunction_attribute attrib, int *pi)
{
    struct vcu_cu_u64_req r = { .value = f->h };
    struct vcu_cu_func_attrs_resp o;
    CUresult e;

    if ((unsigned int)attrib >= VCU_CU_NUM_FUNC_ATTRS)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__call(f->mod->dev, VCU_OP_CU_FUNC_GET_ATTRS, &r, sizeof(r), NULL, 0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    *pi = (int)o.attrs[attrib];
    return CUDA_SUCCESS;
}

static CUresult vcu__func_set_attr(vcu__func_t *f, CUfunction_attribute attrib, int value)
{
    struct vcu_call_cuFuncSetAttribute_req r;
    CUresult e;

    if ((unsigned int)attrib >= VCU_CU_NUM_FUNC_ATTRS)
        return CUDA_ERROR_INVALID_VALUE;
    VCU_CALL_INIT(r, cuFuncSetAttribute);
    r.hfunc = f->h;
    r.attrib = (uint32_t)attrib;
    r.value = (uint64_t)(int64_t)value;
    e = vcu__call(f->mod->dev, VCU_OP_CU_CALL, &r, sizeof(r), NULL, 0, NULL, 0);
    /* The launch limits are asked again at the next launch. */
    __atomic_store_n(&f->lim, 0, __ATOMIC_RELEASE);
    return e;
}

/* The kernel's and the device's launch limits, asked once (see vcu__func_t.lim). */
static uint64_t vcu__launch_lim(vcu__func_t *f)
{
    static const CUdevice_attribute dattr[6] = {
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
        CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
    };
    struct vcu_cu_u64_req r = { .value = f->h };
    struct vcu_cu_func_attrs_resp o;
    uint64_t lim = __atomic_load_n(&f->lim, __ATOMIC_ACQUIRE);
    int v[6];

    if (lim != 0)
        return lim;
    for (int i = 0; i < 6; i++)
        if (cuDeviceGetAttribute(&v[i], dattr[i], f->mod->dev) != CUDA_SUCCESS || v[i] <= 0)
            return VCU__LIM_NEVER;
    if (vcu__call(f->mod->dev, VCU_OP_CU_FUNC_GET_ATTRS, &r, sizeof(r), NULL, 0, &o,
                  sizeof(o)) != CUDA_SUCCESS)
        return VCU__LIM_NEVER;      /* not stored: the launch will say why */
    for (int i = 0; i < 3; i++) {
        f->lim_block[i] = (uint32_t)v[i];
        f->lim_grid[i] = (uint32_t)v[3 + i];
    }
    if (o.attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] != 0 ||
        o.attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT] != 0 ||
        o.attrs[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH] != 0 ||
        o.attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] == 0 ||
        o.attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK] > 0x7fffffffu)
        lim = VCU__LIM_NEVER;
    else
        lim = VCU__LIM_KNOWN | (uint64_t)o.attrs[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES]
                                   << 32 |
              o.attrs[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
    __atomic_store_n(&f->lim, lim, __ATOMIC_RELEASE);
    return lim;
}

int vcu__launch_may_defer(vcu__func_t *f, const unsigned int grid[3], const unsigned int block[3],
                          unsigned int shmem, uint32_t flags)
{
    uint64_t lim, threads;

    if (!vcu__drv.async || flags != 0)
        return 0;
    lim = vcu__launch_lim(f);
    if (lim == VCU__LIM_NEVER)
        return 0;
    threads = (uint64_t)block[0] * block[1] * block[2];
    if (threads > (lim & 0x7fffffffu) || shmem > (lim >> 32))
        return 0;
    for (int i = 0; i < 3; i++)
        if (block[i] > f->lim_block[i] || grid[i] > f->lim_grid[i])
            return 0;
    return 1;
}

CUresult vcu__func_arg(CUfunction hfunc, vcu__func_t **out)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (vcu__reg_has(hfunc, VCU__K_KERNEL)) {
        e = cuKernelGetFunction(&hfunc, (CUkernel)hfunc);
        if (e != CUDA_SUCCESS)
            return e;
    }
    if (!vcu__reg_has(hfunc, VCU__K_FUNCTION))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (vcu__func_t *)hfunc;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    vcu__func_t *f;
    CUresult e;

    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__func_arg(hfunc, &f);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__func_get_attr(f, attrib, pi);
}

VCU__EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    vcu__func_t *f;
    CUresult e = vcu__func_arg(hfunc, &f);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__func_set_attr(f, attrib, value);
}

/* A kernel's function in device dev (no context needed). */
static CUresult vcu__kernel_func_dev(CUkernel kernel, CUdevice dev, vcu__func_t **out)
{
    vcu__kernel_t *k = (vcu__kernel_t *)kernel;
    vcu__module_t *m;
    CUresult e = vcu__check_dev(dev);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(k, VCU__K_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    e = vcu__lib_module_dev(k->lib, dev, &m);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__module_function(m, k->name, out);
}

VCU__EXPORT CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                                          CUdevice dev)
{
    vcu__func_t *f;
    CUresult e;

    if (pi == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__kernel_func_dev(kernel, dev, &f);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__func_get_attr(f, attrib, pi);
}

VCU__EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                          CUdevice dev)
{
    vcu__func_t *f;
    CUresult e = vcu__kernel_func_dev(kernel, dev, &f);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__func_set_attr(f, attrib, val);
}

/* A parameter's place from the layout the host reported with the
 * function (cuFuncGetParamInfo on the host). */
static CUresult vcu__param_info(const vcu__func_t *f, size_t i, size_t *off, size_t *size)
{
    if (off == NULL || size == NULL || i >= f->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    *off = f->params[i].offset;
    *size = f->params[i].size;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex,
                                        size_t *paramOffset, size_t *paramSize)
{
    vcu__func_t *f;
    CUresult e = vcu__func_arg(func, &f);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__param_info(f, paramIndex, paramOffset, paramSize);
}

/* The kernel's function in the current context's device. */
VCU__EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex,
                                          size_t *paramOffset, size_t *paramSize)
{
    vcu__func_t *f;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(kernel, VCU__K_KERNEL))
        return CUDA_ERROR_INVALID_HANDLE;
    e = vcu__func_arg((CUfunction)kernel, &f);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__param_info(f, paramIndex, paramOffset, paramSize);
}

VCU__EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    vcu__func_t *f;
    CUresult e;

    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__func_arg(hfunc, &f);
    if (e != CUDA_SUCCESS)
        return e;
    *name = f->name;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    vcu__func_t *f;
    CUresult e;

    if (hmod == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__func_arg(hfunc, &f);
    if (e != CUDA_SUCCESS)
        return e;
    *hmod = (CUmodule)f->mod;
    return CUDA_SUCCESS;
}

/*
 * Cache configurations are preferences the driver may ignore (cuda.h);
 * the host's driver picks the split per launch from the kernels' shared
 * memory.  Checked and accepted; the context's is kept for
 * cuCtxGetCacheConfig.
 */
static int vcu__cache_config_ok(CUfunc_cache config)
{
    return (unsigned int)config <= CU_FUNC_CACHE_PREFER_EQUAL;
}

VCU__EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    vcu__func_t *f;
    CUresult e = vcu__func_arg(hfunc, &f);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__cache_config_ok(config) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

VCU__EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    vcu__func_t *f;
    CUresult e = vcu__kernel_func_dev(kernel, dev, &f);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__cache_config_ok(config) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

VCU__EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__cache_config_ok(config))
        return CUDA_ERROR_INVALID_VALUE;
    c->cache_config = (int)config;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    vcu__ctx_t *c;
    CUresult e;

    if (pconfig == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    *pconfig = (CUfunc_cache)c->cache_config;
    return CUDA_SUCCESS;
}

/* ---- occupancy ------------------------------------------------------------ */

/* The flags form and cuOccupancyAvailableDynamicSMemPerBlock are remote
 * calls (cuda_calls.list). */
VCU__EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                                 int blockSize,
                                                                 size_t dynamicSMemSize)
{
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                dynamicSMemSize, 0);
}

/*
 * cuOccupancyMaxPotentialBlockSize[WithFlags] run here, since the
 * callback (dynamic shared memory per block size) is the program's: the
 * search of cuda_runtime.h's cudaOccupancyMaxPotentialBlockSize-
 * VariableSMemWithFlags, from the largest block the device and the
 * function allow down by warps, asking the host's driver the occupancy of
 * each (cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) and keeping
 * the size that keeps the most threads resident; it stops early once an
 * SM is full.
 */
static CUresult vcu__occupancy_best(int *minGridSize, int *blockSize, CUfunction func,
                                    CUoccupancyB2DSize b2d, size_t dynamicSMemSize,
                                    int blockSizeLimit, unsigned int flags)
{
    int per_sm, warp, dev_max, sms, fn_max, limit, aligned, best = 0, best_blocks = 0;
    int best_threads = 0;
    CUdevice dev;
    CUresult e;

    if (minGridSize == NULL || blockSize == NULL || func == NULL || blockSizeLimit < 0 ||
        (flags & ~(unsigned int)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE))
        return CUDA_ERROR_INVALID_VALUE;
    e = cuCtxGetDevice(&dev);
    if (e == CUDA_SUCCESS)
        e = cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
    if (e == CUDA_SUCCESS)
        e = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
    if (e == CUDA_SUCCESS)
        e = cuDeviceGetAttribute(&dev_max, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
    if (e == CUDA_SUCCESS)
        e = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    if (e == CUDA_SUCCESS)
        e = cuFuncGetAttribute(&fn_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
    if (e != CUDA_SUCCESS)
        return e;
    if (warp <= 0)
        return CUDA_ERROR_UNKNOWN;
    limit = blockSizeLimit == 0 || blockSizeLimit > dev_max ? dev_max : blockSizeLimit;
    if (fn_max < limit)
        limit = fn_max;
    aligned = limit / warp * warp + (limit % warp ? warp : 0);
    for (int a = aligned; a > 0; a -= warp) {
        int bs = a > limit ? limit : a, blocks;

        e = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
            &blocks, func, bs, b2d != NULL ? b2d(bs) : dynamicSMemSize, flags);
        if (e != CUDA_SUCCESS)
            return e;
        if (bs * blocks > best_threads) {
            best = bs;
            best_blocks = blocks;
            best_threads = bs * blocks;
        }
        if (best_threads == per_sm)
            break;
    }
    *minGridSize = best_blocks * sms;
    *blockSize = best;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
                                                      CUfunction func,
                                                      CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                      size_t dynamicSMemSize, int blockSizeLimit)
{
    return vcu__occupancy_best(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                               dynamicSMemSize, blockSizeLimit, CU_OCCUPANCY_DEFAULT);
}

VCU__EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags)
{
    return vcu__occupancy_best(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                               dynamicSMemSize, blockSizeLimit, flags);
}
