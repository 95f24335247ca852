/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Modules (their lifetimes, loads and links), functions and launches.
 */
#include "cuda_int.h"

/* ---- module lifetimes --------------------------------------------------- */

/* Drops one count of m; the last unloads it (in its context, made
 * current) and returns what cuModuleUnload gave. */
CUresult vcu__mod_put(vcu__cuda_sess_t *cs, vcu__mod_t *m)
{
    CUresult r = CUDA_SUCCESS;

    if (--m->refs > 0)
        return CUDA_SUCCESS;
    vcu__grun_drop(cs, VCU_CU_MAX_DEVICES);
    r = vcu__cur(cs, cs->ctx[m->dev]);
    if (r == CUDA_SUCCESS)
        r = cs->cu->fn.cuModuleUnload(m->mod);
    vcu__uncharge(cs, m->dev, m->charge);
    free(m);
    vcu__mem_give(cs, sizeof(*m));
    return r;
}

static size_t vcu__mods_size(unsigned int cap)
{
    return sizeof(vcu__modset_t) + (size_t)cap * sizeof(vcu__mod_t *);
}

/* Adds m to *set, which counts it once; -1 over budget or out of memory. */
int vcu__mods_add(vcu__cuda_sess_t *cs, vcu__modset_t **set, vcu__mod_t *m)
{
    vcu__modset_t *s = *set, *n;
    unsigned int i, ncap;

    for (i = 0; s != NULL && i < s->n; i++)
        if (s->m[i] == m)
            return 0;
    if (s == NULL || s->n == s->cap) {
        ncap = s != NULL ? s->cap * 2 : 4;
        if (vcu__mem_take(cs, vcu__mods_size(ncap) - (s != NULL ? vcu__mods_size(s->cap) : 0)) != 0)
            return -1;
        n = realloc(s, vcu__mods_size(ncap));
        if (n == NULL) {
            vcu__mem_give(cs, vcu__mods_size(ncap) - (s != NULL ? vcu__mods_size(s->cap) : 0));
            return -1;
        }
        if (s == NULL)
            n->n = 0;
        n->cap = ncap;
        *set = s = n;
    }
    s->m[s->n++] = m;
    m->refs++;
    return 0;
}

int vcu__mods_add_all(vcu__cuda_sess_t *cs, vcu__modset_t **set, const vcu__modset_t *src)
{
    unsigned int i;

    for (i = 0; src != NULL && i < src->n; i++)
        if (vcu__mods_add(cs, set, src->m[i]) != 0)
            return -1;
    return 0;
}

/* Drops the set's counts (unloading what only it held) and frees it. */
void vcu__mods_free(vcu__cuda_sess_t *cs, vcu__modset_t *s)
{
    unsigned int i;

    if (s == NULL)
        return;
    for (i = 0; i < s->n; i++)
        vcu__mod_put(cs, s->m[i]);
    vcu__mem_give(cs, vcu__mods_size(s->cap));
    free(s);
}

/* Does the set hold a module of device d? */
int vcu__mods_on(const vcu__modset_t *s, uint32_t d)
{
    unsigned int i;

    for (i = 0; s != NULL && i < s->n; i++)
        if (s->m[i]->dev == d)
            return 1;
    return 0;
}

/*
 * Frees handle h (live) and what it holds: a function's parameter
 * layout, a module's count (the last unloads it), a graph's or graph
 * exec's module set, an array's charge, a texture or surface object's
 * record (their CUDA objects are the caller's to destroy first).
 */
void vcu__del(vcu__cuda_sess_t *cs, uint64_t h)
{
    vcu__hent_t *e = &cs->tab.ent[(uint32_t)h];
    vcu__modset_t *mods = NULL;
    vcu__mod_t *m = NULL;

    switch (e->type) {
    case VCU__H_FUNCTION:
        vcu__mem_give(cs, (size_t)e->u.fn.nparams * sizeof(struct vcu_cu_param));
        break;
    case VCU__H_MODULE:
        m = e->u.mod;
        break;
    case VCU__H_GRAPH:
        mods = e->u.graph.mods;
        if (e->u.graph.cap_id != 0)
            cs->cap_graphs--;
        free(e->u.graph.urefs);
        vcu__mem_give(cs, (size_t)e->u.graph.nurefs * sizeof(vcu__uref_t));
        break;
    case VCU__H_UOBJ:
        if (e->u.uobj.rec != NULL)
            vcu__uobj_put(cs, e->u.uobj.rec);
        break;
    case VCU__H_GRAPH_EXEC:
        mods = e->u.exec.mods;
        break;
    case VCU__H_ARRAY:
        vcu__uncharge(cs, e->dev, e->u.arr.charge);
        break;
    case VCU__H_MIPMAP:
        vcu__uncharge(cs, e->dev, e->u.mip.charge);
        break;
    case VCU__H_TEXOBJ:
    case VCU__H_SURFOBJ:
        vcu__pset_del(e->type == VCU__H_TEXOBJ ? &cs->texs : &cs->surfs, e->u.tex.obj);
        free(e->u.tex.desc);
        vcu__mem_give(cs, sizeof(*e->u.tex.desc));
        break;
    }
    vcu__htab_del(&cs->tab, h);
    if (m != NULL)
        vcu__mod_put(cs, m);
    vcu__mods_free(cs, mods);
}

/* --- modules, functions, launches --- */

/*
 * Loads img (len bytes and a NUL after them, of the session's budget:
 * the caller gives both back) as a new module of the session; its handle
 * goes to o->rb.u64.value (CU_MODULE_LOAD_KEEP's reply begins the same).
 * A module received in full (store) goes into the module cache, under
 * the hash computed here over the bytes received (into hash, if not
 * NULL), once the driver took it.
 */
static void vcu__module_image(vcu__op_t *o, char *img, uint64_t len, bool store,
                              unsigned char *hash)
{
    CUmodule mod = NULL;
    vcu__mod_t *m;
    vcu__hent_t *e;
    uint64_t h, cost = 0;
    size_t fr0 = 0, fr1 = 0, tot = 0;

    /* What the load takes of the GPU (code, constant banks, globals) is
     * measured: free memory before and after, in the session's context. */
    if (o->cu->acct != NULL && VCU__CU(o->cu, cuMemGetInfo, &fr0, &tot) != CUDA_SUCCESS)
        fr0 = 0;
    o->res = o->cu->fn.cuModuleLoadData(&mod, img);
    if (o->res == CUDA_SUCCESS && fr0 != 0 &&
        VCU__CU(o->cu, cuMemGetInfo, &fr1, &tot) == CUDA_SUCCESS && fr1 < fr0)
        cost = vcu__grain(fr0 - fr1);
    if (o->res == CUDA_SUCCESS && o->cu->capture && o->cs->out == NULL &&
        vcu_image_uses_printf(img, (size_t)len) && vcu__out_new(&o->cs->out) != 0)
        o->cs->out = NULL;          /* its output goes to our stdout, as without capture */
    /* Only what the driver loaded: a cache of images that fail would
     * only hold bytes nobody can use.  Its errors are not the load's. */
    if (o->res == CUDA_SUCCESS && store && o->cu->mc != NULL)
        (void)vcu_modcache_put(o->cu->mc, img, len, hash);
    else if (o->res == CUDA_SUCCESS && hash != NULL)
        vcu_sha256(img, (size_t)len, hash);
    if (o->res != CUDA_SUCCESS)
        return;
    if (cost > VCU__ACCT_MAX || vcu__charge(o->cs, vcu__dev_of(o), cost) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto err_unload;
    }
    if (vcu__mem_take(o->cs, sizeof(*m)) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto err_uncharge;
    }
    m = malloc(sizeof(*m));
    if (m == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto err_give;
    }
    e = vcu__new(o, VCU__H_MODULE, &h);
    if (e == NULL)
        goto err_free;
    m->mod = mod;
    m->dev = vcu__dev_of(o);
    m->refs = 1;                    /* the guest's handle */
    m->charge = cost;
    e->u.mod = m;
    o->rb.u64.value = h;
    return;

err_free:
    free(m);
err_give:
    vcu__mem_give(o->cs, sizeof(*m));
err_uncharge:
    vcu__uncharge(o->cs, vcu__dev_of(o), cost);
err_unload:
    o->cu->fn.cuModuleUnload(mod);
}

/* len bytes of an image and a NUL, of the session's budget; NULL (the
 * result says why) if it has not that much left. */
static char *vcu__image_buf(vcu__op_t *o, uint64_t len)
{
    char *img;

    if (vcu__mem_take(o->cs, (size_t)len + 1) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    img = malloc((size_t)len + 1);
    if (img == NULL) {
        vcu__mem_give(o->cs, (size_t)len + 1);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    img[len] = '\0';                /* PTX is loaded as a C string */
    return img;
}

static void vcu__image_free(vcu__op_t *o, char *img, uint64_t len)
{
    free(img);
    vcu__mem_give(o->cs, (size_t)len + 1);
}

/* A module sent whole: CU_MODULE_LOAD, and with hash CU_MODULE_LOAD_KEEP. */
static uint32_t vcu__module_sent(vcu__op_t *o, unsigned char *hash)
{
    struct vcu_cu_module_load_req rq;
    const vcu_segment_t *s;
    char *img;

    memcpy(&rq, o->p, sizeof(rq));
    s = vcu__seg(o, VCU_SEG_TO_DEVICE);
    if (s == NULL || rq.image_len == 0 || s->len != rq.image_len || rq.image_len > VCU_MAX_XFER)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    img = vcu__image_buf(o, rq.image_len);
    if (img == NULL)
        return VCU_S_OK;
    vcu__gather(s, img, (size_t)rq.image_len);
    vcu__module_image(o, img, rq.image_len, true, hash);
    vcu__image_free(o, img, rq.image_len);
    return VCU_S_OK;
}

/* The image's hash, which the module cache computes anyway, is kept for
 * migration's history (vcu__mig_note), which names the image by it. */
uint32_t vcu__op_CU_MODULE_LOAD(vcu__op_t *o)
{
    return vcu__module_sent(o, o->cu->mc != NULL ? o->cs->load_sha : NULL);
}

/* CU_MODULE_LOAD, and the SHA-256 of the image received in the reply:
 * the guest names it by that later (CU_MODULE_LOAD_HASH) without hashing
 * it itself, which under TCG costs more than sending it. */
uint32_t vcu__op_CU_MODULE_LOAD_KEEP(vcu__op_t *o)
{
    return vcu__module_sent(o, o->rb.keep.sha256);
}

/*
 * A module by the SHA-256 of its image, from the module cache: read
 * (counted in the session's host memory as a sent image is), hashed
 * again, and loaded; anything short of that is a miss,
 * CUDA_ERROR_FILE_NOT_FOUND, and the guest sends the image.
 */
uint32_t vcu__op_CU_MODULE_LOAD_HASH(vcu__op_t *o)
{
    struct vcu_cu_module_hash_req rq;
    char *img;

    memcpy(&rq, o->p, sizeof(rq));
    if (o->nsegs != 0 || rq.image_len == 0 || rq.image_len > VCU_MAX_XFER)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    if (o->cu->mc == NULL) {
        o->res = CUDA_ERROR_FILE_NOT_FOUND;
        return VCU_S_OK;
    }
    img = vcu__image_buf(o, rq.image_len);
    if (img == NULL)
        return VCU_S_OK;
    if (vcu_modcache_get(o->cu->mc, rq.sha256, img, rq.image_len) != 0)
        o->res = CUDA_ERROR_FILE_NOT_FOUND;
    else
        vcu__module_image(o, img, rq.image_len, false, NULL);
    vcu__image_free(o, img, rq.image_len);
    return VCU_S_OK;
}

/*
 * The guest's handle and its functions' go at once; the module itself
 * when nothing uses it any more (graphs, graph execs, captures in
 * progress: see vcu__mod_t).
 */
CUresult vcu__module_drop(vcu__op_t *o, uint64_t h)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, VCU__H_MODULE);
    vcu__mod_t *m;
    uint32_t i;

    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    m = e->u.mod;
    for (i = 0; i < o->cs->tab.cap; i++) {
        vcu__hent_t *f = &o->cs->tab.ent[i];

        if (f->type == VCU__H_FUNCTION && f->u.fn.mod == m)
            vcu__del(o->cs, vcu__htab_handle_at(&o->cs->tab, i));
    }
    vcu__htab_del(&o->cs->tab, h);
    return vcu__mod_put(o->cs, m);
}

uint32_t vcu__op_CU_MODULE_UNLOAD(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = vcu__module_drop(o, rq.value);
    return VCU_S_OK;
}

/* The NUL-terminated symbol name of a vcu_cu_name_req, or NULL (bad payload). */
static char *vcu__name(const vcu__op_t *o, struct vcu_cu_name_req *rq)
{
    char *name;

    memcpy(rq, o->p, sizeof(*rq));
    if (rq->name_len == 0 || rq->name_len > VCU_CU_NAME_MAX ||
        rq->name_len > o->plen - sizeof(*rq))
        return NULL;
    if (memchr(o->p + sizeof(*rq), '\0', rq->name_len) != NULL)
        return NULL;
    name = malloc((size_t)rq->name_len + 1);
    if (name == NULL)
        return NULL;
    memcpy(name, o->p + sizeof(*rq), rq->name_len);
    name[rq->name_len] = '\0';
    return name;
}

/*
 * With lazy loading (the driver's default) a kernel's code and the data
 * it uses reach the GPU when the function or global is first looked up,
 * not at the module's load.  Free memory before and after the lookup
 * (fr0: 0 if not measured) says what it took; it is recorded with the
 * module, and given back with it.  It is recorded, not admitted: it has
 * happened already, so past the quota the allocations after it fail.
 */
static size_t vcu__mod_free_before(vcu__op_t *o)
{
    size_t fr = 0, tot = 0;

    if (o->cu->acct == NULL || VCU__CU(o->cu, cuMemGetInfo, &fr, &tot) != CUDA_SUCCESS)
        return 0;
    return fr;
}

static void vcu__mod_grew(vcu__op_t *o, vcu__mod_t *m, size_t fr0)
{
    size_t fr1 = 0, tot = 0;
    uint64_t n;

    if (fr0 == 0 || VCU__CU(o->cu, cuMemGetInfo, &fr1, &tot) != CUDA_SUCCESS || fr1 >= fr0)
        return;
    n = vcu__grain(fr0 - fr1);
    (void)vcu__acct_add(o->cu->acct, o->cs->aslot, m->dev, n);
    m->charge += n;
}

/* The layout of f's parameters, into params (VCU_CU_MAX_PARAMS entries):
 * their count in *n, the end of the last in *end (both 0 on entry).  -1
 * (o->res set) for a layout the protocol cannot carry. */
static int vcu__param_layout(vcu__op_t *o, CUfunction f, struct vcu_cu_param *params,
                             uint32_t *n, uint32_t *end)
{
    for (;; (*n)++) {
        size_t off = 0, sz = 0;

        if (o->cu->fn.cuFuncGetParamInfo(f, *n, &off, &sz) != CUDA_SUCCESS)
            break;
        if (*n >= VCU_CU_MAX_PARAMS || sz == 0 || off > VCU_CU_MAX_PARAM_BYTES ||
            sz > VCU_CU_MAX_PARAM_BYTES - off) {
            o->res = CUDA_ERROR_NOT_SUPPORTED;
            return -1;
        }
        params[*n].offset = (uint32_t)off;
        params[*n].size = (uint32_t)sz;
        if (off + sz > *end)
            *end = (uint32_t)(off + sz);
    }
    return 0;
}

/* The n entries of params a handle keeps, exactly (the scratch had room
 * for the most any kernel may take: 8 KiB a handle, kept for its life);
 * NULL for none. */
static struct vcu_cu_param *vcu__params_fit(struct vcu_cu_param *params, uint32_t n)
{
    struct vcu_cu_param *fit;

    if (n == 0) {
        free(params);
        return NULL;
    }
    fit = realloc(params, (size_t)n * sizeof(*params));
    return fit != NULL ? fit : params;
}

uint32_t vcu__op_CU_MODULE_GET_FUNCTION(vcu__op_t *o)
{
    struct vcu_cu_name_req rq;
    struct vcu_cu_param *params = NULL;
    CUfunction f = NULL;
    uint32_t n = 0, end = 0;
    vcu__mod_t *mod;
    vcu__hent_t *e;
    uint64_t h;
    char *name;
    size_t need, fr0;

    name = vcu__name(o, &rq);
    if (name == NULL)
        return VCU_S_EINVAL;
    if (vcu__enter(o) != 0)
        goto out;
    e = vcu__get(o, rq.module, VCU__H_MODULE);
    if (e == NULL)
        goto out;
    mod = e->u.mod;
    fr0 = vcu__mod_free_before(o);
    o->res = o->cu->fn.cuModuleGetFunction(&f, mod->mod, name);
    vcu__mod_grew(o, mod, fr0);
    if (o->res != CUDA_SUCCESS)
        goto out;
    if (o->cu->fn.cuFuncGetParamInfo == NULL) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        goto out;
    }
    params = malloc(VCU_CU_MAX_PARAMS * sizeof(*params));
    if (params == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (vcu__param_layout(o, f, params, &n, &end) != 0)
        goto out;
    need = sizeof(struct vcu_cu_function_resp) + (size_t)n * sizeof(*params);
    if (need > o->cap) {
        free(params);
        free(name);
        return VCU_S_ERANGE;
    }
    o->res = vcu__stack_cover(o->cs, mod->dev, f);
    if (o->res != CUDA_SUCCESS)
        goto out;
    params = vcu__params_fit(params, n);
    if (vcu__mem_take(o->cs, (size_t)n * sizeof(*params)) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    e = vcu__new(o, VCU__H_FUNCTION, &h);
    if (e == NULL) {
        vcu__mem_give(o->cs, (size_t)n * sizeof(*params));
        goto out;
    }
    e->u.fn.f = f;
    e->u.fn.mod = mod;
    e->u.fn.nparams = n;
    e->u.fn.param_bytes = end;
    e->u.fn.params = params;
    if (n > 0)
        memcpy(o->out + sizeof(struct vcu_cu_function_resp), params, (size_t)n * sizeof(*params));
    params = NULL;
    o->rb.fn.function = h;
    o->rb.fn.nparams = n;
    o->rb.fn.param_bytes = end;
    o->len = need;
out:
    free(params);
    free(name);
    return VCU_S_OK;
}

/* The global named by the request: its address and size, with o->res. */
static uint32_t vcu__module_global(vcu__op_t *o, CUdeviceptr *p, size_t *sz)
{
    struct vcu_cu_name_req rq;
    char *name;

    *p = 0;
    *sz = 0;
    name = vcu__name(o, &rq);
    if (name == NULL)
        return VCU_S_EINVAL;
    if (vcu__enter(o) == 0) {
        vcu__hent_t *e = vcu__get(o, rq.module, VCU__H_MODULE);

        if (e != NULL) {
            size_t fr0 = vcu__mod_free_before(o);

            o->res = VCU__CU(o->cu, cuModuleGetGlobal, p, sz, e->u.mod->mod, name);
            vcu__mod_grew(o, e->u.mod, fr0);
        }
    }
    free(name);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MODULE_GET_GLOBAL(vcu__op_t *o)
{
    CUdeviceptr p;
    size_t sz;
    uint32_t st = vcu__module_global(o, &p, &sz);

    o->rb.range.base = p;
    o->rb.range.size = sz;
    return st;
}

/*
 * A managed global (__managed__) is managed memory of the driver's in this
 * worker: the guest, whose program's host code reads and writes it by its
 * address, gives the allocation holding it a host view (vcu_managed.c) and
 * keeps the two coherent as for cuMemAllocManaged.
 */
uint32_t vcu__op_CU_MODULE_GLOBAL_INFO(vcu__op_t *o)
{
    CUdeviceptr p, rb = 0;
    size_t sz, rs = 0;
    unsigned int managed = 0;
    uint32_t st = vcu__module_global(o, &p, &sz);

    o->rb.ginfo.base = p;
    o->rb.ginfo.size = sz;
    if (st != VCU_S_OK || o->res != CUDA_SUCCESS || o->cu->fn.cuPointerGetAttribute == NULL)
        return st;
    if (o->cu->fn.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) !=
            CUDA_SUCCESS || !managed ||
        VCU__CU(o->cu, cuMemGetAddressRange, &rb, &rs, p) != CUDA_SUCCESS)
        return st;
    o->rb.ginfo.flags = VCU_CU_GLOBAL_F_MANAGED;
    o->rb.ginfo.range_base = rb;
    o->rb.ginfo.range_size = rs;
    return st;
}

uint32_t vcu__op_CU_FUNC_GET_ATTRS(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    unsigned int i, n;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_FUNCTION);
    if (o->cu->fn.cuFuncGetAttribute == NULL) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    n = CU_FUNC_ATTRIBUTE_MAX < VCU_CU_NUM_FUNC_ATTRS ? (unsigned int)CU_FUNC_ATTRIBUTE_MAX
                                                      : VCU_CU_NUM_FUNC_ATTRS;
    for (i = 0; i < n; i++) {
        int v = 0;

        if (o->cu->fn.cuFuncGetAttribute(&v, (CUfunction_attribute)i, e->u.fn.f) == CUDA_SUCCESS)
            o->rb.fattr.attrs[i] = (uint32_t)v;
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_OCCUPANCY_BLOCK_SIZE(vcu__op_t *o)
{
    struct vcu_cu_occupancy_req rq;
    int grid = 0, block = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.function, VCU__H_FUNCTION);
    o->res = VCU__CU(o->cu, cuOccupancyMaxPotentialBlockSizeWithFlags, &grid, &block, e->u.fn.f,
                     NULL, (size_t)rq.dyn_smem, (int)rq.block_size, rq.flags);
    o->rb.occ.value0 = (uint32_t)grid;
    o->rb.occ.value1 = (uint32_t)block;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_LAUNCH(vcu__op_t *o)
{
    struct vcu_cu_launch_req rq;
    void **kp;

    memcpy(&rq, o->p, sizeof(rq));
    if (!vcu__param_bytes_ok(rq.param_bytes, o->plen - sizeof(rq)) ||
        (rq.flags & ~VCU_CU_LAUNCH_F_COOPERATIVE) || o->nsegs != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, fe, rq.function, VCU__H_FUNCTION);
    VCU__STREAM(o, st, rq.stream);
    /* It may become a kernel node of a captured graph. */
    if (o->cs->capture && vcu__mods_add(o->cs, &o->cs->cap_mods, fe->u.fn.mod) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    kp = vcu__params(o, fe, o->p + sizeof(rq), rq.param_bytes);
    if (kp == NULL)
        return VCU_S_OK;
    if (rq.flags & VCU_CU_LAUNCH_F_COOPERATIVE)
        o->res = VCU__CU(o->cu, cuLaunchCooperativeKernel, fe->u.fn.f, rq.grid[0], rq.grid[1],
                         rq.grid[2], rq.block[0], rq.block[1], rq.block[2], rq.shared_mem, st, kp);
    else
        o->res = o->cu->fn.cuLaunchKernel(fe->u.fn.f, rq.grid[0], rq.grid[1], rq.grid[2],
                                          rq.block[0], rq.block[1], rq.block[2], rq.shared_mem,
                                          st, kp, NULL);
    vcu__params_free(o, fe, kp);
    return VCU_S_OK;
}

/* One log line per attribute id a guest asked for that is not offered. */
static void vcu__attr_refused(uint32_t id)
{
    static uint64_t logged;

    if (id < 64 && (logged & (1ull << id)))
        return;
    if (id < 64)
        logged |= 1ull << id;
    fprintf(stderr, "vcu-backend: launch attribute %u (CUlaunchAttributeID) is not supported\n",
            id);
}

/* A launch attribute's event (PROGRAMMATIC_EVENT, LAUNCH_COMPLETION_EVENT):
 * the session's, on the request's device, with flags in range.  -1 with
 * o->res set where it is refused. */
static int vcu__launch_attr_event(vcu__op_t *o, const struct vcu_cu_launch_attr *a,
                                  CUlaunchAttributeValue *v)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, a->handle, VCU__H_EVENT);

    if (e == NULL || e->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_HANDLE;
        return -1;
    }
    if (a->v[0] > INT_MAX || (a->id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT && a->v[1] > 1))
        return -1;
    if (a->id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT) {
        v->programmaticEvent.event = e->u.ev;
        v->programmaticEvent.flags = (int)a->v[0];
        v->programmaticEvent.triggerAtBlockStart = (int)a->v[1];
    } else {
        v->launchCompletionEvent.event = e->u.ev;
        v->launchCompletionEvent.flags = (int)a->v[0];
    }
    return 0;
}

/* One launch attribute's value, checked and turned into the driver's.
 * -1 where it is refused: o->res says why if not CUDA_ERROR_INVALID_VALUE
 * (which the caller set). */
static int vcu__launch_attr(vcu__op_t *o, const struct vcu_cu_launch_attr *a,
                            CUlaunchAttributeValue *v)
{
    switch (a->id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
        break;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        v->cooperative = a->v[0] != 0;
        break;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        v->programmaticStreamSerializationAllowed = a->v[0] != 0;
        break;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        /* The driver clamps a priority to the context's range. */
        v->priority = (int)a->v[0];
        break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        if (a->v[0] > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
            return -1;
        v->memSyncDomain = (CUlaunchMemSyncDomain)a->v[0];
        break;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        if (a->v[0] > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE ||
            a->v[1] > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
            return -1;
        v->memSyncDomainMap.default_ = (unsigned char)a->v[0];
        v->memSyncDomainMap.remote = (unsigned char)a->v[1];
        break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (a->v[0] > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
            return -1;
        v->clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)a->v[0];
        break;
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        /* A percentage, or CU_SHAREDMEM_CARVEOUT_DEFAULT (-1). */
        if (a->v[0] > 100 && a->v[0] != (uint32_t)CU_SHAREDMEM_CARVEOUT_DEFAULT)
            return -1;
        v->sharedMemCarveout = a->v[0];
        break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        if (a->v[0] == 0 || a->v[1] == 0 || a->v[2] == 0 ||
            a->v[0] > VCU_CU_MAX_CLUSTER_BLOCKS || a->v[1] > VCU_CU_MAX_CLUSTER_BLOCKS ||
            a->v[2] > VCU_CU_MAX_CLUSTER_BLOCKS ||
            (uint64_t)a->v[0] * a->v[1] * a->v[2] > VCU_CU_MAX_CLUSTER_BLOCKS)
            return -1;
        v->clusterDim.x = a->v[0];
        v->clusterDim.y = a->v[1];
        v->clusterDim.z = a->v[2];
        break;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
    case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        return vcu__launch_attr_event(o, a, v);
    default:
        vcu__attr_refused(a->id);
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return -1;
    }
    return 0;
}

/*
 * The attributes of a CU_LAUNCH_EX-shaped request, checked and turned into
 * the driver's (out has VCU_CU_MAX_LAUNCH_ATTRS entries): ids offered,
 * values in range, events the session's on the request's device.  The
 * request's device is current.  -1 with o->res set where one is refused.
 */
static int vcu__launch_attrs(vcu__op_t *o, const unsigned char *wa, uint32_t n,
                             CUlaunchAttribute *out)
{
    uint32_t i;

    memset(out, 0, sizeof(*out) * n);
    for (i = 0; i < n; i++) {
        struct vcu_cu_launch_attr a;

        memcpy(&a, wa + (size_t)i * sizeof(a), sizeof(a));
        out[i].id = (CUlaunchAttributeID)a.id;
        o->res = CUDA_ERROR_INVALID_VALUE;
        if (a.reserved != 0 || (a.handle != 0 && a.id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT &&
                                a.id != CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT))
            return -1;
        if (vcu__launch_attr(o, &a, &out[i].value) != 0)
            return -1;
    }
    o->res = CUDA_SUCCESS;
    return 0;
}

/*
 * The fixed part and attributes of a CU_LAUNCH_EX-shaped request: sizes
 * within the payload (*params: where the parameters start), flags 0,
 * dims nonzero and within what any GPU takes, the function and stream the
 * session's; the request's device made current.  VCU_S_OK with o->res
 * set where the request is well formed but refused.
 */
static uint32_t vcu__launch_ex_prep(vcu__op_t *o, struct vcu_cu_launch_ex_req *rq,
                                    CUlaunchConfig *cfg, CUlaunchAttribute *attrs,
                                    vcu__hent_t **fe, size_t *params)
{
    uint64_t threads;
    size_t abytes;
    unsigned int i;

    memcpy(rq, o->p, sizeof(*rq));
    *fe = NULL;
    if (rq->nattrs > VCU_CU_MAX_LAUNCH_ATTRS || rq->reserved != 0 || rq->l.flags != 0 ||
        rq->l.param_bytes > VCU_CU_MAX_PARAM_BYTES || o->nsegs != 0)
        return VCU_S_EINVAL;
    abytes = (size_t)rq->nattrs * sizeof(struct vcu_cu_launch_attr);
    if (o->plen - sizeof(*rq) < abytes ||
        o->plen - sizeof(*rq) - abytes < (size_t)rq->l.param_bytes)
        return VCU_S_EINVAL;
    *params = sizeof(*rq) + abytes;
    VCU__ENTER(o);
    threads = (uint64_t)rq->l.block[0] * rq->l.block[1] * rq->l.block[2];
    for (i = 0; i < 3; i++)
        if (rq->l.grid[i] == 0 || rq->l.block[i] == 0)
            break;
    if (i < 3 || rq->l.grid[0] > INT_MAX || rq->l.grid[1] > 65535 || rq->l.grid[2] > 65535 ||
        threads > 1024) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    *fe = vcu__get(o, rq->l.function, VCU__H_FUNCTION);
    if (*fe == NULL)
        return VCU_S_OK;
    memset(cfg, 0, sizeof(*cfg));
    if (vcu__stream(o, rq->l.stream, &cfg->hStream) != 0) {
        *fe = NULL;
        return VCU_S_OK;
    }
    if (vcu__launch_attrs(o, o->p + sizeof(*rq), rq->nattrs, attrs) != 0) {
        *fe = NULL;
        return VCU_S_OK;
    }
    cfg->gridDimX = rq->l.grid[0];
    cfg->gridDimY = rq->l.grid[1];
    cfg->gridDimZ = rq->l.grid[2];
    cfg->blockDimX = rq->l.block[0];
    cfg->blockDimY = rq->l.block[1];
    cfg->blockDimZ = rq->l.block[2];
    cfg->sharedMemBytes = rq->l.shared_mem;
    cfg->attrs = rq->nattrs > 0 ? attrs : NULL;
    cfg->numAttrs = rq->nattrs;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_LAUNCH_EX(vcu__op_t *o)
{
    CUlaunchAttribute attrs[VCU_CU_MAX_LAUNCH_ATTRS];
    struct vcu_cu_launch_ex_req rq;
    CUlaunchConfig cfg;
    vcu__hent_t *fe;
    size_t at;
    uint32_t i, st = vcu__launch_ex_prep(o, &rq, &cfg, attrs, &fe, &at);
    void **kp;

    if (st != VCU_S_OK || fe == NULL)
        return st;
    if (o->cs->capture && vcu__mods_add(o->cs, &o->cs->cap_mods, fe->u.fn.mod) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    kp = vcu__params(o, fe, o->p + at, rq.l.param_bytes);
    if (kp == NULL)
        return VCU_S_OK;
    /* The launch records its events: as CU_EVENT_RECORD does, once
     * nothing can refuse the request any more. */
    for (i = 0; i < rq.nattrs; i++) {
        struct vcu_cu_launch_attr a;
        vcu__hent_t *e;

        memcpy(&a, o->p + sizeof(rq) + (size_t)i * sizeof(a), sizeof(a));
        if (a.id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT &&
            a.id != CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT)
            continue;
        e = vcu__htab_get(&o->cs->tab, a.handle, VCU__H_EVENT);
        vcu__event_rerecord(o, e);
        if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT)
            attrs[i].value.programmaticEvent.event = e->u.ev;
        else
            attrs[i].value.launchCompletionEvent.event = e->u.ev;
    }
    o->res = VCU__CU(o->cu, cuLaunchKernelEx, &cfg, fe->u.fn.f, kp, NULL);
    vcu__params_free(o, fe, kp);
    return VCU_S_OK;
}

/* The cluster occupancy queries: a launch's configuration with no
 * parameters; size picks cuOccupancyMaxPotentialClusterSize over
 * cuOccupancyMaxActiveClusters. */
static uint32_t vcu__occupancy_clusters(vcu__op_t *o, int size)
{
    CUlaunchAttribute attrs[VCU_CU_MAX_LAUNCH_ATTRS];
    struct vcu_cu_launch_ex_req rq;
    CUlaunchConfig cfg;
    vcu__hent_t *fe;
    size_t at;
    uint32_t st = vcu__launch_ex_prep(o, &rq, &cfg, attrs, &fe, &at);
    int n = 0;

    if (st != VCU_S_OK || fe == NULL)
        return st;
    if (rq.l.param_bytes != 0)
        return VCU_S_EINVAL;
    if (size)
        o->res = VCU__CU(o->cu, cuOccupancyMaxPotentialClusterSize, &n, fe->u.fn.f, &cfg);
    else
        o->res = VCU__CU(o->cu, cuOccupancyMaxActiveClusters, &n, fe->u.fn.f, &cfg);
    o->rb.u64.value = n > 0 ? (uint64_t)n : 0;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_OCCUPANCY_CLUSTERS(vcu__op_t *o)
{
    return vcu__occupancy_clusters(o, 0);
}

uint32_t vcu__op_CU_OCCUPANCY_CLUSTER_SIZE(vcu__op_t *o)
{
    return vcu__occupancy_clusters(o, 1);
}

/*
 * CU_TENSOR_MAP: the arrays are fixed in the request; rank says how many
 * entries the driver reads, so it is checked first, and the rest must be
 * zero.  The driver checks the values (alignment, ranges) itself.
 */
uint32_t vcu__op_CU_TENSOR_MAP(vcu__op_t *o)
{
    CUtensorMap map;
    struct vcu_cu_tmap_req rq;
    int lower[VCU_CU_TMAP_MAX_RANK - 2], upper[VCU_CU_TMAP_MAX_RANK - 2];
    unsigned int i, r;

    _Static_assert(sizeof(CUtensorMap) == VCU_CU_TMAP_BYTES, "CUtensorMap");
    memcpy(&rq, o->p, sizeof(rq));
    r = rq.rank;
    if (rq.reserved != 0 || o->nsegs != 0)
        return VCU_S_EINVAL;
    if (rq.kind == VCU_CU_TMAP_REPLACE_ADDRESS) {
        VCU__ENTER(o);
        memcpy(&map, rq.map, sizeof(map));
        o->res = VCU__CU(o->cu, cuTensorMapReplaceAddress, &map,
                         (void *)(uintptr_t)rq.global_address);
        if (o->res == CUDA_SUCCESS)
            memcpy(o->rb.tmap.map, &map, sizeof(map));
        return VCU_S_OK;
    }
    if ((rq.kind != VCU_CU_TMAP_TILED && rq.kind != VCU_CU_TMAP_IM2COL) || r == 0 ||
        r > VCU_CU_TMAP_MAX_RANK || (rq.kind == VCU_CU_TMAP_IM2COL && r < 3))
        return VCU_S_EINVAL;
    for (i = r; i < VCU_CU_TMAP_MAX_RANK; i++)
        if (rq.global_dim[i] != 0 || rq.box_dim[i] != 0 || rq.element_strides[i] != 0 ||
            rq.global_strides[i - 1] != 0)
            return VCU_S_EINVAL;
    for (i = 0; i < VCU_CU_TMAP_MAX_RANK - 2; i++) {
        if (rq.kind != VCU_CU_TMAP_IM2COL || i + 2 >= r) {
            if (rq.lower_corner[i] != 0 || rq.upper_corner[i] != 0)
                return VCU_S_EINVAL;
        }
        lower[i] = (int)rq.lower_corner[i];
        upper[i] = (int)rq.upper_corner[i];
    }
    if (rq.kind == VCU_CU_TMAP_TILED && (rq.channels_per_pixel != 0 || rq.pixels_per_column != 0))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    memset(&map, 0, sizeof(map));
    if (rq.kind == VCU_CU_TMAP_TILED)
        o->res = VCU__CU(o->cu, cuTensorMapEncodeTiled, &map, (CUtensorMapDataType)rq.data_type,
                         r, (void *)(uintptr_t)rq.global_address, rq.global_dim,
                         rq.global_strides, rq.box_dim, rq.element_strides,
                         (CUtensorMapInterleave)rq.interleave, (CUtensorMapSwizzle)rq.swizzle,
                         (CUtensorMapL2promotion)rq.l2_promotion,
                         (CUtensorMapFloatOOBfill)rq.oob_fill);
    else
        o->res = VCU__CU(o->cu, cuTensorMapEncodeIm2col, &map,
                         (CUtensorMapDataType)rq.data_type, r,
                         (void *)(uintptr_t)rq.global_address, rq.global_dim,
                         rq.global_strides, lower, upper, rq.channels_per_pixel,
                         rq.pixels_per_column, rq.element_strides,
                         (CUtensorMapInterleave)rq.interleave, (CUtensorMapSwizzle)rq.swizzle,
                         (CUtensorMapL2promotion)rq.l2_promotion,
                         (CUtensorMapFloatOOBfill)rq.oob_fill);
    if (o->res == CUDA_SUCCESS)
        memcpy(o->rb.tmap.map, &map, sizeof(map));
    return VCU_S_OK;
}

/* VCU_CU_LINK_PLAIN_OPTS names these options by number. */
_Static_assert(VCU_CU_LINK_OPT_PLAIN(CU_JIT_MAX_REGISTERS) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_OPTIMIZATION_LEVEL) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_TARGET_FROM_CUCONTEXT) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_TARGET) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_FALLBACK_STRATEGY) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_GENERATE_DEBUG_INFO) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_LOG_VERBOSE) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_GENERATE_LINE_INFO) &&
                   VCU_CU_LINK_OPT_PLAIN(CU_JIT_CACHE_MODE) &&
                   !VCU_CU_LINK_OPT_PLAIN(CU_JIT_THREADS_PER_BLOCK) &&
                   !VCU_CU_LINK_OPT_PLAIN(CU_JIT_WALL_TIME) &&
                   !VCU_CU_LINK_OPT_PLAIN(CU_JIT_INFO_LOG_BUFFER) &&
                   !VCU_CU_LINK_OPT_PLAIN(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) &&
                   !VCU_CU_LINK_OPT_PLAIN(CU_JIT_ERROR_LOG_BUFFER) &&
                   !VCU_CU_LINK_OPT_PLAIN(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES),
               "VCU_CU_LINK_PLAIN_OPTS");

/* Adds the link's ninputs input records, in buf (len bytes), to ls, each
 * checked against buf's bounds before the driver sees it (name: room for
 * the longest name); bytes after the last record are refused.  Sets
 * o->res. */
static void vcu__link_inputs(vcu__op_t *o, CUlinkState ls, unsigned char *buf, size_t len,
                             char *name, uint32_t ninputs)
{
    size_t off = 0;
    uint32_t i;

    for (i = 0; o->res == CUDA_SUCCESS && i < ninputs; i++) {
        struct vcu_cu_link_input r;

        if (len - off < sizeof(r)) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        memcpy(&r, buf + off, sizeof(r));
        off += sizeof(r);
        if (r.name_len > VCU_CU_NAME_MAX || r.name_len > len - off ||
            r.data_len == 0 || r.data_len > len - off - r.name_len ||
            r.type > CU_JIT_INPUT_LIBRARY) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        memcpy(name, buf + off, r.name_len);
        name[r.name_len] = '\0';
        off += r.name_len;
        o->res = VCU__CU(o->cu, cuLinkAddData, ls, (CUjitInputType)r.type, buf + off,
                         (size_t)r.data_len, name, 0, NULL, NULL);
        off += (size_t)r.data_len;
    }
    if (o->res == CUDA_SUCCESS && off != len)
        o->res = CUDA_ERROR_INVALID_VALUE;      /* bytes after the last record */
}

/*
 * CU_LINK: the whole link in the worker (struct vcu_cu_link_req).  Every
 * record is checked against the input's bounds before the driver sees
 * it; the inputs count against the session's host-memory budget.
 */
uint32_t vcu__op_CU_LINK(vcu__op_t *o)
{
    struct vcu_cu_link_req rq;
    CUjit_option opts[VCU_CU_MAX_LINK_OPTS + 2];
    void *vals[VCU_CU_MAX_LINK_OPTS + 2];
    const vcu_segment_t *in, *out;
    unsigned char *buf = NULL;
    char *name = NULL;
    CUlinkState ls = NULL;
    void *image = NULL;
    size_t image_len = 0, len;
    uint32_t i, n = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (o->nsegs != 2 || VCU_SEG_DIR(o->segs[0].flags) != VCU_SEG_TO_DEVICE ||
        VCU_SEG_DIR(o->segs[1].flags) != VCU_SEG_FROM_DEVICE)
        return VCU_S_EINVAL;
    in = &o->segs[0];
    out = &o->segs[1];
    if (rq.nopts > VCU_CU_MAX_LINK_OPTS || rq.ninputs == 0 ||
        rq.ninputs > VCU_CU_MAX_LINK_INPUTS || in->len > VCU_CU_MAX_LINK_BYTES) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    for (i = 0; i < rq.nopts; i++) {
        if (!VCU_CU_LINK_OPT_PLAIN(rq.opt[i].id)) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            return VCU_S_OK;
        }
        opts[n] = (CUjit_option)rq.opt[i].id;
        vals[n++] = (void *)(uintptr_t)rq.opt[i].value;
    }
    opts[n] = CU_JIT_ERROR_LOG_BUFFER;
    vals[n++] = o->rb.link.log;
    opts[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    vals[n++] = (void *)(uintptr_t)(VCU_CU_LINK_LOG - 1);
    VCU__ENTER(o);
    len = (size_t)in->len;
    if (vcu__mem_take(o->cs, len + VCU_CU_NAME_MAX + 1) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    buf = malloc(len ? len : 1);
    name = malloc(VCU_CU_NAME_MAX + 1);
    if (buf == NULL || name == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto done;
    }
    vcu__gather(in, buf, len);
    o->res = VCU__CU(o->cu, cuLinkCreate, n, opts, vals, &ls);
    if (o->res == CUDA_SUCCESS)
        vcu__link_inputs(o, ls, buf, len, name, rq.ninputs);
    if (o->res == CUDA_SUCCESS)
        o->res = VCU__CU(o->cu, cuLinkComplete, ls, &image, &image_len);
    if (o->res == CUDA_SUCCESS) {
        o->rb.link.image_len = image_len;
        if (image_len <= out->len)
            vcu__scatter(out, image, image_len);
    }
done:
    o->rb.link.log[VCU_CU_LINK_LOG - 1] = '\0';
    if (ls != NULL)
        VCU__CU(o->cu, cuLinkDestroy, ls);
    free(buf);
    free(name);
    vcu__mem_give(o->cs, len + VCU_CU_NAME_MAX + 1);
    return VCU_S_OK;
}

/* --- kernel parameters --- */

void **vcu__params(vcu__op_t *o, const vcu__hent_t *fe, const void *src, uint32_t nbytes)
{
    size_t body = ((size_t)nbytes + 15) & ~(size_t)15, need;
    unsigned char *buf;
    void **kp;
    uint32_t i;

    if (nbytes != fe->u.fn.param_bytes) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    /* aligned_alloc() wants a multiple of the alignment. */
    need = (body + ((size_t)fe->u.fn.nparams + 1) * sizeof(void *) + 15) & ~(size_t)15;
    buf = need <= sizeof(o->pscratch) ? o->pscratch : aligned_alloc(16, need);
    if (buf == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    if (nbytes > 0)
        memcpy(buf, src, nbytes);
    kp = (void **)(buf + body);
    for (i = 0; i < fe->u.fn.nparams; i++)
        kp[i] = buf + fe->u.fn.params[i].offset;
    kp[i] = NULL;
    return kp;
}

void vcu__params_free(vcu__op_t *o, const vcu__hent_t *fe, void **kp)
{
    unsigned char *buf;

    if (kp == NULL)
        return;
    buf = (unsigned char *)kp - (((size_t)fe->u.fn.param_bytes + 15) & ~(size_t)15);
    if (buf != o->pscratch)
        free(buf);
}

/* A kernel node's parameters for function fe with these dimensions and
 * the parameter pointers kp (vcu__params()). */
void vcu__kernel_node(CUDA_KERNEL_NODE_PARAMS *kn, const vcu__hent_t *fe,
                      const vcu_le32 grid[3], const vcu_le32 block[3], uint32_t smem,
                      void **kp)
{
    memset(kn, 0, sizeof(*kn));
    kn->func = fe->u.fn.f;
    kn->gridDimX = grid[0];
    kn->gridDimY = grid[1];
    kn->gridDimZ = grid[2];
    kn->blockDimX = block[0];
    kn->blockDimY = block[1];
    kn->blockDimZ = block[2];
    kn->sharedMemBytes = smem;
    kn->kernelParams = kp;
}
