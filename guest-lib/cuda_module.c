/*
 * libcuda.so.1: modules over the wire protocol: images (nvcc's wrapper,
 * fatbins) loaded from memory or files, their functions and globals.
 */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cuda_int.h"
#include "vcu_managed.h"
#include "vcu_fatbin.h"
#include "vcu_kernels.h"

/* ---- modules ------------------------------------------------------------- */

#define VCU__FATBINC_MAGIC 0x466243b1u
#define VCU__FATBIN_MAGIC 0xBA55ED50u

typedef struct vcu__fatbin_wrapper_s {
    uint32_t magic;
    uint32_t version;
    const void *data;
    void *filename_or_fatbins;
} vcu__fatbin_wrapper_t;

typedef struct vcu__fatbin_hdr_s {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;
} vcu__fatbin_hdr_t;

/* End of a 64-bit ELF (a cubin): its furthest header or section.  avail:
 * bytes known to be there (UINT64_MAX: unknown, as cuModuleLoadData's). */
static CUresult vcu__elf_size(const unsigned char *img, uint64_t avail, uint64_t *size)
{
    Elf64_Ehdr eh;
    uint64_t end, shend;

    if (avail < sizeof(eh))
        return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&eh, img, sizeof(eh));
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shoff > VCU_MAX_XFER || eh.e_phoff > VCU_MAX_XFER)
        return CUDA_ERROR_INVALID_IMAGE;
    shend = eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr);
    if (shend > avail)
        return CUDA_ERROR_INVALID_IMAGE;
    end = sizeof(eh);
    if (shend > end)
        end = shend;
    if (eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize > end)
        end = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
    for (unsigned int i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;

        memcpy(&sh, img + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        if (sh.sh_type == SHT_NOBITS)
            continue;
        if (sh.sh_offset > VCU_MAX_XFER || sh.sh_size > VCU_MAX_XFER)
            return CUDA_ERROR_INVALID_IMAGE;
        if (sh.sh_offset + sh.sh_size > end)
            end = sh.sh_offset + sh.sh_size;
    }
    if (end > avail)
        return CUDA_ERROR_INVALID_IMAGE;
    *size = end;
    return CUDA_SUCCESS;
}

/*
 * cuModuleLoadData gets no length: it is read from the image, as the
 * driver does.  A fatbin (or the wrapper nvcc puts around one), a cubin
 * (ELF), or PTX (NUL-terminated text).  *image moves past a wrapper.
 * avail: bytes known to be at *image (a file's size), or UINT64_MAX.
 */
CUresult vcu__image_size(const void **image, uint64_t avail, uint64_t *size)
{
    const unsigned char *img = *image;
    uint32_t magic;

    if (avail < sizeof(vcu__fatbin_hdr_t))
        return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&magic, img, sizeof(magic));
    if (magic == VCU__FATBINC_MAGIC) {
        vcu__fatbin_wrapper_t w;

        /* The wrapper holds a pointer: it exists in memory, never in a file. */
        if (avail != UINT64_MAX || avail < sizeof(w))
            return CUDA_ERROR_INVALID_IMAGE;
        memcpy(&w, img, sizeof(w));
        if (w.data == NULL)
            return CUDA_ERROR_INVALID_IMAGE;
        img = w.data;
        memcpy(&magic, img, sizeof(magic));
        if (magic != VCU__FATBIN_MAGIC)
            return CUDA_ERROR_INVALID_IMAGE;
        *image = img;
    }
    if (magic == VCU__FATBIN_MAGIC) {
        vcu__fatbin_hdr_t h;

        memcpy(&h, img, sizeof(h));
        if (h.header_size < sizeof(h) || h.fat_size == 0 || h.fat_size > VCU_MAX_XFER ||
            (uint64_t)h.header_size + h.fat_size > avail)
            return CUDA_ERROR_INVALID_IMAGE;
        *size = (uint64_t)h.header_size + h.fat_size;
        return CUDA_SUCCESS;
    }
    if (memcmp(img, ELFMAG, SELFMAG) == 0)
        return vcu__elf_size(img, avail, size);
    *size = strnlen((const char *)img, avail < VCU_MAX_XFER + 1 ? avail : VCU_MAX_XFER + 1);
    if (*size == 0 || *size > VCU_MAX_XFER)
        return CUDA_ERROR_INVALID_IMAGE;
    return CUDA_SUCCESS;
}

/*
 * Asks the host for a new object (op with its request and data; the
 * reply's u64 is the handle, into *h) for the guest object obj, and
 * registers obj as kind.  If obj cannot be registered, the host's object
 * is dropped again (drop_op).  The caller frees obj on failure.
 */
static CUresult vcu__host_obj_new_r(const void *obj, int kind, int dev, uint32_t op, void *req,
                                    uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs,
                                    uint32_t drop_op, void *resp, uint32_t resp_len, uint64_t *h)
{
    struct vcu_cu_u64_resp o;
    CUresult e = vcu__call(dev, op, req, req_len, bufs, nbufs, resp, resp_len);

    if (e != CUDA_SUCCESS)
        return e;
    memcpy(&o, resp, sizeof(o));
    *h = o.value;
    if (vcu__reg_add(obj, kind) != 0) {
        struct vcu_cu_u64_req u = { .value = o.value };

        vcu__call(dev, drop_op, &u, sizeof(u), NULL, 0, NULL, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

/* The reply of op begins with a vcu_cu_u64_resp, and is nothing more. */
CUresult vcu__host_obj_new(const void *obj, int kind, int dev, uint32_t op, void *req,
                           uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs,
                           uint32_t drop_op, uint64_t *h)
{
    struct vcu_cu_u64_resp o;

    return vcu__host_obj_new_r(obj, kind, dev, op, req, req_len, bufs, nbufs, drop_op, &o,
                               sizeof(o), h);
}

/*
 * The code of image (len bytes) device dev loads, in *b: only that code
 * crosses to the host, in a copy *trim (the caller's to free; NULL: the
 * image goes as it is).  *cc: the device's compute capability (major * 10
 * + minor; 0 when unknown).  A fatbin with no code for the device is
 * refused here, as the driver would refuse it.
 */
static CUresult vcu__module_code(int dev, const void *image, uint64_t len, vcu_buf_t *b,
                                 void **trim, unsigned int *cc)
{
    int major = 0, minor = 0;
    size_t tlen;

    if (cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ==
            CUDA_SUCCESS &&
        cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ==
            CUDA_SUCCESS) {
        switch (vcu_fatbin_trim(image, (size_t)len, (unsigned int)(major * 10 + minor), trim,
                                &tlen)) {
        case VCU_FATBIN_NONE:
            return CUDA_ERROR_NO_BINARY_FOR_GPU;
        case VCU_FATBIN_TRIMMED:
            b->addr = *trim;
            b->len = tlen;
            break;
        }
    }
    *cc = (unsigned int)(major * 10 + minor);
    return CUDA_SUCCESS;
}

/*
 * Makes module m on the host from the code in *b (request *r): an image
 * the host's module cache holds is named by mn, not sent (the cache
 * answers CUDA_ERROR_FILE_NOT_FOUND for one it lacks); else it is sent,
 * with its hash kept where mn says so.  *how: how it went, for the trace.
 */
static CUresult vcu__module_send(vcu__module_t *m, int dev, vcu__modname_t *mn,
                                 struct vcu_cu_module_load_req *r, vcu_buf_t *b,
                                 const char **how)
{
    CUresult e = CUDA_ERROR_FILE_NOT_FOUND;

    if (mn->how != VCU__MN_SEND) {
        e = vcu__host_obj_new(m, VCU__K_MODULE, dev, VCU_OP_CU_MODULE_LOAD_HASH, &mn->req,
                              sizeof(mn->req), NULL, 0, VCU_OP_CU_MODULE_UNLOAD, &m->h);
        *how = e != CUDA_SUCCESS ? "sent, not in the host's cache"
               : mn->how == VCU__MN_REMEMBERED ? "by hash, not sent; hash remembered"
                                               : "by hash, not sent";
    }
    if (e == CUDA_ERROR_FILE_NOT_FOUND && mn->keep) {
        struct vcu_cu_module_keep_resp k;

        e = vcu__host_obj_new_r(m, VCU__K_MODULE, dev, VCU_OP_CU_MODULE_LOAD_KEEP, r, sizeof(*r),
                                b, 1, VCU_OP_CU_MODULE_UNLOAD, &k, sizeof(k), &m->h);
        if (e == CUDA_SUCCESS)
            vcu__module_remember(mn, k.sha256);
        if (mn->how == VCU__MN_SEND)
            *how = "sent; hash kept";
    } else if (e == CUDA_ERROR_FILE_NOT_FOUND) {
        e = vcu__host_obj_new(m, VCU__K_MODULE, dev, VCU_OP_CU_MODULE_LOAD, r, sizeof(*r), b, 1,
                              VCU_OP_CU_MODULE_UNLOAD, &m->h);
    }
    return e;
}

/* Keeps m's image (len bytes) for vcu__module_kernels: a library keeps
 * its own; the trimmed copy trim is taken over; else image is copied
 * (nothing kept without memory). */
static void vcu__module_keep(vcu__module_t *m, vcu__library_t *lib, const void *image, void *trim,
                             uint64_t len)
{
    if (lib != NULL) {
        m->lib = lib;
        free(trim);
    } else if (trim != NULL) {
        m->image = trim;
        m->image_len = len;
    } else if ((m->image = malloc(len)) != NULL) {
        memcpy(m->image, image, len);
        m->image_len = len;
    }
}

/* VCU_LIBCUDA_TRACE=modules: a module loaded, from t0, naming it done at
 * th (zero: not named). */
static void vcu__module_trace(uint64_t len, int trimmed, const char *how,
                              const struct timespec *t0, const struct timespec *th)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr,
            "libcuda (virtio-cuda): module loaded, %llu bytes (%s, %s), %.1f ms "
            "(naming %.1f ms)\n",
            (unsigned long long)len, trimmed ? "trimmed" : "as given", how,
            (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6,
            th->tv_sec == 0 && th->tv_nsec == 0
                ? 0.0
                : (double)(th->tv_sec - t0->tv_sec) * 1e3 +
                      (double)(th->tv_nsec - t0->tv_nsec) / 1e6);
}

CUresult vcu__module_load_dev(int dev, CUmodule *module, const void *image, uint64_t len,
                              vcu__library_t *lib)
{
    struct vcu_cu_module_load_req r;
    vcu__modname_t mn;
    vcu__module_t *m;
    vcu_buf_t b = { .addr = (void *)image, .len = len, .flags = VCU_SEG_TO_DEVICE };
    void *trim = NULL;
    unsigned int cc;
    struct timespec t0 = { 0, 0 }, th = { 0, 0 };
    const char *how = "sent";
    char id[VCU__SRC_ID_LEN];
    const char *src_id = id;
    int trimmed;
    CUresult e;

    /* The module cache names images by their place in a library's file
     * (a library's copy: where it was copied from). */
    id[0] = '\0';
    if (lib != NULL)
        src_id = lib->src_id;
    else if (vcu_conn_features(vcu__drv.conn) & VCU_FEAT_MODULE_CACHE)
        vcu__module_src_id(image, len, id, sizeof(id));

    e = vcu__module_code(dev, image, len, &b, &trim, &cc);
    if (e != CUDA_SUCCESS)
        return e;
    len = b.len;
    r.image_len = len;
    if (vcu__tracing_modules())
        clock_gettime(CLOCK_MONOTONIC, &t0);
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        free(trim);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->dev = dev;
    vcu__module_name(vcu__drv.conn, 0, b.addr, len, src_id, cc, &mn);
    /* A module of a created context goes with it; a library's stays. */
    r.hdr.ctx = lib == NULL ? vcu__cur_number(dev) : 0;
    mn.req.hdr.ctx = r.hdr.ctx;
    if (vcu__tracing_modules())
        clock_gettime(CLOCK_MONOTONIC, &th);
    e = vcu__module_send(m, dev, &mn, &r, &b, &how);
    if (e != CUDA_SUCCESS) {
        free(trim);
        free(m);
        return e;
    }
    vcu__printf_module(b.addr, len);
    trimmed = trim != NULL;
    vcu__module_keep(m, lib, image, trim, len);
    if (vcu__tracing_modules())
        vcu__module_trace(len, trimmed, how, &t0, &th);
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

CUresult vcu__module_load(CUmodule *module, const void *image, uint64_t len)
{
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    return vcu__module_load_dev(c->dev, module, image, len, NULL);
}

VCU__EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    uint64_t len;
    CUresult e;

    if (module == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__image_size(&image, UINT64_MAX, &len);
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__module_load(module, image, len);
}

/*
 * JIT options change nothing here (the host loads the image as it is);
 * they are checked, and the outputs a caller may read are filled: empty
 * logs, zero wall time.
 */
VCU__EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                                        unsigned int numOptions, CUjit_option *options,
                                        void **optionValues)
{
    if (numOptions > 0 && (options == NULL || optionValues == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numOptions; i++)
        if ((unsigned int)options[i] >= CU_JIT_NUM_OPTIONS)
            return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < numOptions; i++) {
        switch (options[i]) {
        case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
            optionValues[i] = NULL;
            break;
        case CU_JIT_INFO_LOG_BUFFER:
        case CU_JIT_ERROR_LOG_BUFFER:
            if (optionValues[i] != NULL)
                *(char *)optionValues[i] = '\0';
            break;
        case CU_JIT_WALL_TIME: {
            float zero = 0.0f;

            memcpy(&optionValues[i], &zero, sizeof(zero));
            break;
        }
        default:
            break;
        }
    }
    return cuModuleLoadData(module, image);
}

/*
 * A module image file read whole (cuModuleLoad, cuLibraryLoadFromFile),
 * with one NUL more (a PTX file is text): *buf, which the caller frees,
 * and its size *n.
 */
CUresult vcu__read_image(const char *fname, char **buf, size_t *n)
{
    struct stat sb;
    ssize_t got;
    size_t off = 0;
    int fd;

    fd = open(fname, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 ||
        (uint64_t)sb.st_size > VCU_MAX_XFER) {
        close(fd);
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *buf = calloc(1, (size_t)sb.st_size + 1);
    if (*buf == NULL) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    while (off < (size_t)sb.st_size &&
           (got = read(fd, *buf + off, (size_t)sb.st_size - off)) > 0)
        off += (size_t)got;
    close(fd);
    if (off != (size_t)sb.st_size) {
        free(*buf);
        *buf = NULL;
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    *n = off;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    const void *img;
    char *buf;
    size_t n;
    uint64_t len;
    CUresult e;

    if (module == NULL || fname == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__read_image(fname, &buf, &n);
    if (e != CUDA_SUCCESS)
        return e;
    img = buf;
    e = vcu__image_size(&img, (uint64_t)n, &len);
    if (e == CUDA_SUCCESS)
        e = vcu__module_load(module, img, len);
    free(buf);
    return e;
}

/* A fat binary is one of the images cuModuleLoadData takes. */
VCU__EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return cuModuleLoadData(module, fatCubin);
}

/* Modules are loaded whole, at load (the host's driver gets the whole
 * image): eager, whatever CUDA_MODULE_LOADING says. */
VCU__EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    CUresult e;

    if (mode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    *mode = CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
}

static void vcu__funcs_free(vcu__func_t *f)
{
    while (f != NULL) {
        vcu__func_t *next = f->next;

        vcu__reg_del(f);
        free(f->name);
        free(f->params);
        free(f);
        f = next;
    }
}

VCU__EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    vcu__module_t *m = (vcu__module_t *)hmod;
    struct vcu_cu_u64_req r;
    vcu__func_t *funcs;
    vcu__ctx_t *c;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(m, VCU__K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    r.value = m->h;
    e = vcu__call(m->dev, VCU_OP_CU_MODULE_UNLOAD, &r, sizeof(r), NULL, 0, NULL, 0);
    vcu__reg_del(m);
    vcu__m_drop_owner((uint64_t)(uintptr_t)m);
    pthread_mutex_lock(&vcu__drv.lock);
    funcs = m->funcs;
    m->funcs = NULL;
    pthread_mutex_unlock(&vcu__drv.lock);
    vcu__funcs_free(funcs);
    free(m->image);
    free(m);
    return e;
}

/* A module handle usable from ctx: its own context's, or another of the
 * same device (they share the host's). */
static CUresult vcu__module_here(vcu__ctx_t *ctx, CUmodule hmod, vcu__module_t **out)
{
    vcu__module_t *m = (vcu__module_t *)hmod;

    if (!vcu__reg_has(m, VCU__K_MODULE))
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->dev != ctx->dev)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = m;
    return CUDA_SUCCESS;
}

/* The function of that name in m (the host's context of m's device). */
CUresult vcu__module_function(vcu__module_t *m, const char *name, vcu__func_t **out)
{
    struct {
        struct vcu_cu_name_req r;
        char name[VCU_CU_NAME_MAX];
    } q;
    struct {
        struct vcu_cu_function_resp f;
        struct vcu_cu_param p[VCU_CU_MAX_PARAMS];
    } *o = NULL;
    vcu__func_t *f = NULL;
    size_t nlen;
    CUresult e;

    nlen = strnlen(name, VCU_CU_NAME_MAX + 1);
    if (nlen == 0 || nlen > VCU_CU_NAME_MAX)
        return CUDA_ERROR_NOT_FOUND;
    /* One handle per kernel and module, as CUDA gives; the lookup is
     * serialized so two threads asking at once get the same one. */
    pthread_mutex_lock(&vcu__drv.lock);
    for (f = m->funcs; f != NULL; f = f->next)
        if (strcmp(f->name, name) == 0)
            break;
    if (f != NULL)
        goto out;
    o = calloc(1, sizeof(*o));
    f = calloc(1, sizeof(*f));
    if (o == NULL || f == NULL || (f->name = strdup(name)) == NULL) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    memset(&q.r, 0, sizeof(q.r));
    q.r.module = m->h;
    q.r.name_len = (uint32_t)nlen;
    memcpy(q.name, name, nlen);
    e = vcu__call(m->dev, VCU_OP_CU_MODULE_GET_FUNCTION, &q, (uint32_t)(sizeof(q.r) + nlen),
                  NULL, 0, o, sizeof(*o));
    if (e != CUDA_SUCCESS)
        goto fail;
    /* The host's layout is checked before a launch trusts it. */
    if (o->f.nparams > VCU_CU_MAX_PARAMS || o->f.param_bytes > VCU_CU_MAX_PARAM_BYTES) {
        e = CUDA_ERROR_UNKNOWN;
        goto fail;
    }
    for (uint32_t i = 0; i < o->f.nparams; i++) {
        if ((uint64_t)o->p[i].offset + o->p[i].size > o->f.param_bytes) {
            e = CUDA_ERROR_UNKNOWN;
            goto fail;
        }
    }
    f->params = malloc(((size_t)o->f.nparams + 1) * sizeof(*f->params));
    if (f->params == NULL) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    memcpy(f->params, o->p, (size_t)o->f.nparams * sizeof(*f->params));
    f->nparams = o->f.nparams;
    f->param_bytes = o->f.param_bytes;
    f->h = o->f.function;
    f->mod = m;
    if (vcu__reg_add(f, VCU__K_FUNCTION) != 0) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    f->next = m->funcs;
    m->funcs = f;
out:
    pthread_mutex_unlock(&vcu__drv.lock);
    free(o);
    *out = f;
    return CUDA_SUCCESS;

fail:
    pthread_mutex_unlock(&vcu__drv.lock);
    if (f != NULL) {
        free(f->name);
        free(f->params);
        free(f);
    }
    free(o);
    return e;
}

/* The names vcu_image_kernels finds, each once.  VCU__NAMES_NOMEM stops
 * it (vcu_kernel_fn's negative results are its own). */
#define VCU__NAMES_NOMEM (-2)

typedef struct {
    char **names;
    unsigned int n, cap;
} vcu__names_t;

static int vcu__names_add(void *arg, const char *name, size_t len)
{
    vcu__names_t *v = arg;
    char *s;

    for (unsigned int i = 0; i < v->n; i++)
        if (strncmp(v->names[i], name, len) == 0 && v->names[i][len] == '\0')
            return 0;
    if (v->n == v->cap) {
        unsigned int cap = v->cap ? v->cap * 2 : 16;
        char **p = realloc(v->names, cap * sizeof(*p));

        if (p == NULL)
            return VCU__NAMES_NOMEM;
        v->names = p;
        v->cap = cap;
    }
    if ((s = strndup(name, len)) == NULL)
        return VCU__NAMES_NOMEM;
    v->names[v->n++] = s;
    return 0;
}

/* zstd, for fatbin entries compressed with it: the system's libzstd.so.1,
 * loaded at the first need (none: such entries are not read). */
static size_t (*vcu__zstd_decompress)(void *, size_t, const void *, size_t);
static unsigned (*vcu__zstd_is_error)(size_t);
static pthread_once_t vcu__zstd_once = PTHREAD_ONCE_INIT;

static void vcu__zstd_load(void)
{
    void *lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL)
        return;
    *(void **)&vcu__zstd_is_error = dlsym(lib, "ZSTD_isError");
    *(void **)&vcu__zstd_decompress = dlsym(lib, "ZSTD_decompress");
    if (vcu__zstd_is_error == NULL)
        vcu__zstd_decompress = NULL;
}

static size_t vcu__unzstd(void *dst, size_t cap, const void *src, size_t n)
{
    size_t r;

    pthread_once(&vcu__zstd_once, vcu__zstd_load);
    if (vcu__zstd_decompress == NULL)
        return 0;
    r = vcu__zstd_decompress(dst, cap, src, n);
    return vcu__zstd_is_error(r) ? 0 : r;
}

CUresult vcu__image_kernel_names(const void *img, uint64_t len, int dev, char ***names,
                                 unsigned int *n)
{
    static int logged;
    vcu__names_t v = { NULL, 0, 0 };
    int major = 0, minor = 0;
    CUresult e;
    long r;

    *names = NULL;
    *n = 0;
    if (img == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;       /* the copy failed at the load */
    e = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (e == CUDA_SUCCESS)
        e = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    if (e != CUDA_SUCCESS)
        return e;
    r = vcu_image_kernels(img, (size_t)len, (unsigned int)(major * 10 + minor), vcu__names_add,
                          &v, vcu__unzstd);
    if (r == VCU__NAMES_NOMEM) {
        e = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (r < 0) {
        vcu__log_once(&logged, "libcuda (virtio-cuda): a module's kernels cannot be listed "
                               "(its image is not read here; zstd needs libzstd.so.1)\n");
        e = CUDA_ERROR_NOT_SUPPORTED;
    }
    if (e != CUDA_SUCCESS) {
        vcu__names_free(v.names, v.n);
        return e;
    }
    *names = v.names;
    *n = v.n;
    return CUDA_SUCCESS;
}

void vcu__names_free(char **names, unsigned int n)
{
    for (unsigned int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

CUresult vcu__module_kernels(vcu__module_t *m, void (*fn)(void *arg, CUfunction f), void *arg,
                             unsigned int *count)
{
    const void *img = m->lib != NULL ? m->lib->image : m->image;
    uint64_t len = m->lib != NULL ? m->lib->len : m->image_len;
    char **names;
    unsigned int n;
    CUresult e;

    *count = 0;
    e = vcu__image_kernel_names(img, len, m->dev, &names, &n);
    if (e == CUDA_SUCCESS && fn == NULL)
        *count = n;
    for (unsigned int i = 0; i < n && fn != NULL && e == CUDA_SUCCESS; i++) {
        vcu__func_t *f;

        e = vcu__module_function(m, names[i], &f);
        if (e == CUDA_SUCCESS) {
            fn(arg, (CUfunction)f);
            (*count)++;
        }
    }
    vcu__names_free(names, n);
    return e;
}

/* vcu__module_kernels' callback for cuModuleEnumerateFunctions. */
typedef struct {
    CUfunction *out;
    unsigned int cap, n;
} vcu__fn_list_t;

static void vcu__fn_list_add(void *arg, CUfunction f)
{
    vcu__fn_list_t *l = arg;

    if (l->n < l->cap)
        l->out[l->n++] = f;
}

/* How many kernels the module has, as its image lists them (no function
 * is made for it). */
VCU__EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
    vcu__module_t *m;
    vcu__ctx_t *c;
    CUresult e;

    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__module_here(c, mod, &m);
    return e == CUDA_SUCCESS ? vcu__module_kernels(m, NULL, NULL, count) : e;
}

/* Its kernels' functions, up to numFunctions, each the handle
 * cuModuleGetFunction gives for its name. */
VCU__EXPORT CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions,
                                                CUmodule mod)
{
    vcu__fn_list_t l = { functions, numFunctions, 0 };
    unsigned int n;
    vcu__module_t *m;
    vcu__ctx_t *c;
    CUresult e;

    if (functions == NULL && numFunctions > 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__module_here(c, mod, &m);
    return e == CUDA_SUCCESS ? vcu__module_kernels(m, vcu__fn_list_add, &l, &n) : e;
}

VCU__EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    vcu__module_t *m;
    vcu__func_t *f;
    vcu__ctx_t *c;
    CUresult e;

    if (hfunc == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__module_here(c, hmod, &m);
    if (e == CUDA_SUCCESS)
        e = vcu__module_function(m, name, &f);
    if (e != CUDA_SUCCESS)
        return e;
    *hfunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

/*
 * A module global; managed (not NULL) says whether it is managed memory
 * with a host view here (vcu_managed.c), which it then has.
 */
CUresult vcu__module_global(CUdeviceptr *dptr, size_t *bytes, int *managed, CUmodule hmod,
                            const char *name)
{
    struct {
        struct vcu_cu_name_req r;
        char name[VCU_CU_NAME_MAX];
    } q;
    struct vcu_cu_global_info_resp o;
    vcu__module_t *m;
    vcu__ctx_t *c;
    size_t nlen;
    CUresult e;

    if (name == NULL || (dptr == NULL && bytes == NULL && managed == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    nlen = strnlen(name, VCU_CU_NAME_MAX + 1);
    if (nlen == 0 || nlen > VCU_CU_NAME_MAX)
        return CUDA_ERROR_NOT_FOUND;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__module_here(c, hmod, &m);
    if (e != CUDA_SUCCESS)
        return e;
    memset(&q.r, 0, sizeof(q.r));
    q.r.module = m->h;
    q.r.name_len = (uint32_t)nlen;
    memcpy(q.name, name, nlen);
    e = vcu__call(c->dev, VCU_OP_CU_MODULE_GLOBAL_INFO, &q, (uint32_t)(sizeof(q.r) + nlen), NULL,
                  0, &o, sizeof(o));
    if (e != CUDA_SUCCESS)
        return e;
    if (managed != NULL)
        *managed = 0;
    if ((o.flags & VCU_CU_GLOBAL_F_MANAGED) && o.base >= o.range_base &&
        o.base - o.range_base < o.range_size) {
        static int logged;

        /* The program's host code reaches a managed global by its address,
         * as natively: the allocation holding it gets a host view. */
        if (vcu__m_adopt(c->dev, o.range_base, o.range_size, (uint64_t)(uintptr_t)m) == 0) {
            if (managed != NULL)
                *managed = 1;
        } else {
            vcu__log_once(&logged, "libcuda (virtio-cuda): managed global %s at 0x%llx has no "
                                   "host view here (its pages are taken in this process)\n",
                          name, (unsigned long long)o.range_base);
        }
    }
    if (dptr != NULL)
        *dptr = (CUdeviceptr)o.base;
    if (bytes != NULL)
        *bytes = (size_t)o.size;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                          const char *name)
{
    return vcu__module_global(dptr, bytes, NULL, hmod, name);
}
