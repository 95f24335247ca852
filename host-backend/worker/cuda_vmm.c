/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Virtual memory management: cuMemCreate's physical allocations (charged
 * to the VM's quota as cuMemAlloc's are), address reservations, mappings
 * and their access.
 *
 * The guest names an allocation only by a session handle (VCU__H_VMM).
 * The session keeps its reservations and mappings: a guest may map only
 * into a range it reserved and not mapped yet, unmap only whole mappings
 * of its own, set or ask access only over its own mappings, free only its
 * own reservations with nothing mapped in them.  Everything else the
 * driver judges (sizes and offsets against the granularity, flags).
 * Devices in locations are virtual ordinals, each translated to the host
 * device the VM is given.
 */
#include "cuda_int.h"

/* --- ranges --- */

/* Index of the first range with base > p. */
static uint32_t vcu__vr_upper(const vcu__vmm_ranges_t *v, uint64_t p)
{
    uint32_t lo = 0, hi = v->n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (v->r[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index of the range holding p, or -1. */
static int64_t vcu__vr_find(const vcu__vmm_ranges_t *v, uint64_t p)
{
    uint32_t i = vcu__vr_upper(v, p);

    if (i == 0 || p - v->r[i - 1].base >= v->r[i - 1].size)
        return -1;
    return i - 1;
}

/* Whether [p, p + n) (n > 0, no overflow) meets any range. */
static bool vcu__vr_overlaps(const vcu__vmm_ranges_t *v, uint64_t p, uint64_t n)
{
    uint32_t i = vcu__vr_upper(v, p);

    if (i > 0 && v->r[i - 1].base + v->r[i - 1].size > p)
        return true;
    return i < v->n && v->r[i].base < p + n;
}

/* Adds a range that overlaps none: 0, or -1 past the session's budget. */
static int vcu__vr_add(vcu__cuda_sess_t *cs, vcu__vmm_ranges_t *v, uint64_t base, uint64_t size,
                       vcu__vmm_alloc_t *a)
{
    uint32_t i;

    if (v->n == v->cap) {
        uint32_t cap = v->cap ? 2 * v->cap : 16;
        vcu__vmm_range_t *r;

        if (cap > (1u << 24) || vcu__mem_take(cs, (size_t)(cap - v->cap) * sizeof(*r)) != 0)
            return -1;
        r = realloc(v->r, (size_t)cap * sizeof(*r));
        if (r == NULL) {
            vcu__mem_give(cs, (size_t)(cap - v->cap) * sizeof(*r));
            return -1;
        }
        v->r = r;
        v->cap = cap;
    }
    i = vcu__vr_upper(v, base);
    memmove(&v->r[i + 1], &v->r[i], (size_t)(v->n - i) * sizeof(*v->r));
    v->r[i] = (vcu__vmm_range_t){ base, size, a };
    v->n++;
    return 0;
}

static void vcu__vr_del(vcu__vmm_ranges_t *v, uint32_t i, uint32_t n)
{
    memmove(&v->r[i], &v->r[i + n], (size_t)(v->n - i - n) * sizeof(*v->r));
    v->n -= n;
}

static void vcu__vr_fini(vcu__cuda_sess_t *cs, vcu__vmm_ranges_t *v)
{
    vcu__mem_give(cs, (size_t)v->cap * sizeof(*v->r));
    free(v->r);
    memset(v, 0, sizeof(*v));
}

/* [p, p + n) exactly covered by consecutive mappings of the session: 0,
 * the index of the first and their count; else -1. */
static int vcu__maps_cover(const vcu__vmm_ranges_t *m, uint64_t p, uint64_t n, uint32_t *first,
                           uint32_t *count)
{
    int64_t i = vcu__vr_find(m, p);
    uint64_t at = p, end = p + n;
    uint32_t k;

    if (i < 0 || m->r[i].base != p)
        return -1;
    for (k = (uint32_t)i; k < m->n && m->r[k].base == at && at < end; k++)
        at += m->r[k].size;
    if (at != end)
        return -1;
    *first = (uint32_t)i;
    *count = k - (uint32_t)i;
    return 0;
}

/* [p, p + n) within mappings of the session, with no gap (a sub-range
 * of them may be given): for access, which the driver sets per page. */
static bool vcu__maps_hold(const vcu__vmm_ranges_t *m, uint64_t p, uint64_t n)
{
    int64_t i = vcu__vr_find(m, p);
    uint64_t end = p + n, at;

    if (i < 0)
        return false;
    at = m->r[i].base + m->r[i].size;
    for (i++; at < end && (uint32_t)i < m->n && m->r[i].base == at; i++)
        at += m->r[i].size;
    return at >= end;
}

/* --- requests --- */

/* The request; its range [ptr, ptr + size) must be non-empty and not
 * wrap (else CUDA_ERROR_INVALID_VALUE, -1). */
static int vcu__vmm_range_req(vcu__op_t *o, struct vcu_cu_vmm_req *rq)
{
    memcpy(rq, o->p, sizeof(*rq));
    if (rq->size == 0 || rq->ptr == 0 || rq->size > UINT64_MAX - rq->ptr) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return -1;
    }
    return 0;
}

/* The allocation named by handle h, still held by the guest. */
static vcu__vmm_alloc_t *vcu__vmm_get(vcu__op_t *o, uint64_t h)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, VCU__H_VMM);

    /* A released handle is as unknown as any other value (the driver:
     * CUDA_ERROR_INVALID_VALUE, "If handle is not a valid handle the
     * behavior is undefined"). */
    if (e == NULL || e->u.vmm->grefs == 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return NULL;
    }
    return e->u.vmm;
}

/*
 * A location's device, a virtual ordinal, as the host's ordinal.  Only
 * device memory is offered: host allocations would be the host's RAM,
 * outside the VM's slice (CUDA_ERROR_NOT_SUPPORTED).
 */
static int vcu__vmm_loc(vcu__op_t *o, uint32_t type, uint32_t id, int *host)
{
    switch (type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return -1;
    default:
        o->res = CUDA_ERROR_INVALID_VALUE;
        return -1;
    }
    if (id >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return -1;
    }
    *host = o->cu->host_ordinal[id];
    return 0;
}

/*
 * The driver's allocation properties from the guest's: pinned device
 * memory, exportable at most as a POSIX file descriptor (which the guest
 * library never asks the host to export: a host descriptor means nothing
 * in the guest), no usage flags (tile pools are for CUDA arrays).
 */
static int vcu__vmm_prop(vcu__op_t *o, const struct vcu_cu_mem_prop *p, CUmemAllocationProp *out)
{
    int host = 0;

    memset(out, 0, sizeof(*out));
    if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->reserved != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return -1;
    }
    if ((p->handle_types & ~(uint32_t)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0 ||
        p->usage != 0) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return -1;
    }
    if (vcu__vmm_loc(o, p->loc_type, p->loc_id, &host) != 0)
        return -1;
    out->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    out->requestedHandleTypes = (CUmemAllocationHandleType)p->handle_types;
    out->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    out->location.id = host;
    out->allocFlags.compressionType = p->compression;
    out->allocFlags.gpuDirectRDMACapable = p->rdma;
    return 0;
}

/* Frees a record nothing holds any more (no guest reference, no
 * mapping): the driver has freed its memory, so its charge goes back. */
static void vcu__vmm_alloc_drop(vcu__cuda_sess_t *cs, vcu__vmm_alloc_t *a)
{
    vcu__uncharge(cs, a->dev, a->charge);
    if (vcu__htab_get(&cs->tab, a->gh, VCU__H_VMM) != NULL)
        vcu__htab_del(&cs->tab, a->gh);
    *a->pprev = a->next;
    if (a->next != NULL)
        a->next->pprev = a->pprev;
    free(a);
    vcu__mem_give(cs, sizeof(*a));
}

/*
 * The record of the driver's allocation h, charged ch on prop's device
 * already: its session handle is the reply's value.  Without room for it
 * the allocation and its charge go back (CUDA_ERROR_OUT_OF_MEMORY).
 */
static void vcu__vmm_alloc_new(vcu__op_t *o, CUmemGenericAllocationHandle h, uint64_t size,
                               uint64_t ch, const struct vcu_cu_mem_prop *prop)
{
    vcu__cuda_sess_t *cs = o->cs;
    vcu__vmm_alloc_t *a = NULL;
    vcu__hent_t *e;
    uint64_t gh;

    if (vcu__mem_take(cs, sizeof(*a)) == 0 && (a = calloc(1, sizeof(*a))) == NULL)
        vcu__mem_give(cs, sizeof(*a));
    e = a != NULL ? vcu__new(o, VCU__H_VMM, &gh) : NULL;
    if (e == NULL) {
        if (a != NULL) {
            free(a);
            vcu__mem_give(cs, sizeof(*a));
        }
        VCU__CU(o->cu, cuMemRelease, h);
        vcu__uncharge(cs, prop->loc_id, ch);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    a->h = h;
    a->gh = gh;
    a->dev = prop->loc_id;
    a->grefs = 1;
    a->size = size;
    a->charge = ch;
    a->prop = *prop;
    a->next = cs->vmm.allocs;
    if (a->next != NULL)
        a->next->pprev = &a->next;
    a->pprev = &cs->vmm.allocs;
    cs->vmm.allocs = a;
    e->u.vmm = a;
    o->rb.vmm.value = gh;
}

/*
 * Charged before the driver is asked, as cuMemAlloc: past the VM's quota
 * the guest gets CUDA_ERROR_OUT_OF_MEMORY and nothing else changes.  The
 * header's device must be the location's.
 */
uint32_t vcu__op_CU_MEM_CREATE(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h = 0;
    vcu__cuda_sess_t *cs = o->cs;
    uint32_t d = vcu__dev_of(o);
    uint64_t ch;

    memcpy(&rq, o->p, sizeof(rq));
    if (vcu__vmm_prop(o, &rq.prop, &prop) != 0)
        return VCU_S_OK;
    if (rq.prop.loc_id != d || rq.size == 0 || rq.flags != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    ch = vcu__grain(rq.size);
    if (ch > VCU__ACCT_MAX || vcu__charge(cs, d, ch) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuMemCreate, &h, (size_t)rq.size, &prop, 0);
    if (o->res != CUDA_SUCCESS) {
        vcu__uncharge(cs, d, ch);
        return VCU_S_OK;
    }
    vcu__vmm_alloc_new(o, h, rq.size, ch, &rq.prop);
    return VCU_S_OK;
}

/* The guest's last reference gives the driver's back; the memory (and
 * its charge) stays while a mapping of it does. */
uint32_t vcu__op_CU_MEM_RELEASE(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    vcu__vmm_alloc_t *a;

    memcpy(&rq, o->p, sizeof(rq));
    a = vcu__vmm_get(o, rq.handle);
    if (a == NULL)
        return VCU_S_OK;
    if (a->grefs > 1) {
        a->grefs--;
        o->res = CUDA_SUCCESS;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemRelease, a->h);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    a->grefs = 0;
    if (a->nmaps == 0 && !a->exported)
        vcu__vmm_alloc_drop(o->cs, a);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MEM_ADDRESS_RESERVE(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    CUdeviceptr p = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.size == 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemAddressReserve, &p, (size_t)rq.size, (size_t)rq.offset,
                     (CUdeviceptr)rq.handle, rq.flags);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    /* The driver gives only what is free in the process; another
     * session's reservation (in-process sessions) is not. */
    if (p == 0 || rq.size > UINT64_MAX - p || vcu__vr_overlaps(&o->cs->vmm.res, p, rq.size) ||
        vcu__vr_add(o->cs, &o->cs->vmm.res, p, rq.size, NULL) != 0) {
        if (p != 0)
            VCU__CU(o->cu, cuMemAddressFree, p, (size_t)rq.size);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->rb.vmm.value = p;
    return VCU_S_OK;
}

/* A whole reservation of the session, with nothing mapped in it. */
uint32_t vcu__op_CU_MEM_ADDRESS_FREE(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    vcu__vmm_t *v = &o->cs->vmm;
    int64_t i;

    if (vcu__vmm_range_req(o, &rq) != 0)
        return VCU_S_OK;
    i = vcu__vr_find(&v->res, rq.ptr);
    if (i < 0 || v->res.r[i].base != rq.ptr || v->res.r[i].size != rq.size ||
        vcu__vr_overlaps(&v->map, rq.ptr, rq.size)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemAddressFree, (CUdeviceptr)rq.ptr, (size_t)rq.size);
    if (o->res == CUDA_SUCCESS)
        vcu__vr_del(&v->res, (uint32_t)i, 1);
    return VCU_S_OK;
}

/* Into one reservation of the session, where nothing is mapped yet. */
uint32_t vcu__op_CU_MEM_MAP(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    vcu__vmm_t *v = &o->cs->vmm;
    vcu__vmm_alloc_t *a;
    int64_t i;

    if (vcu__vmm_range_req(o, &rq) != 0)
        return VCU_S_OK;
    a = vcu__vmm_get(o, rq.handle);
    if (a == NULL)
        return VCU_S_OK;
    i = vcu__vr_find(&v->res, rq.ptr);
    if (i < 0 || rq.size > v->res.r[i].size - (rq.ptr - v->res.r[i].base) ||
        vcu__vr_overlaps(&v->map, rq.ptr, rq.size) || rq.offset > a->size ||
        rq.size > a->size - rq.offset) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemMap, (CUdeviceptr)rq.ptr, (size_t)rq.size, (size_t)rq.offset,
                     a->h, rq.flags);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    if (vcu__vr_add(o->cs, &v->map, rq.ptr, rq.size, a) != 0) {
        VCU__CU(o->cu, cuMemUnmap, (CUdeviceptr)rq.ptr, (size_t)rq.size);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    a->nmaps++;
    return VCU_S_OK;
}

/* Whole mappings of the session, one or several back to back. */
uint32_t vcu__op_CU_MEM_UNMAP(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    vcu__vmm_t *v = &o->cs->vmm;
    uint32_t first, n, k;

    if (vcu__vmm_range_req(o, &rq) != 0)
        return VCU_S_OK;
    if (vcu__maps_cover(&v->map, rq.ptr, rq.size, &first, &n) != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemUnmap, (CUdeviceptr)rq.ptr, (size_t)rq.size);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    for (k = first; k < first + n; k++) {
        vcu__vmm_alloc_t *a = v->map.r[k].a;

        if (--a->nmaps == 0 && a->grefs == 0)
            vcu__vmm_alloc_drop(o->cs, a);
    }
    vcu__vr_del(&v->map, first, n);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MEM_SET_ACCESS(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    CUmemAccessDesc desc[VCU_CU_MAX_DEVICES];
    uint32_t i;
    int host = 0;

    if (vcu__vmm_range_req(o, &rq) != 0)
        return VCU_S_OK;
    if (rq.count == 0 || rq.count > VCU_CU_MAX_DEVICES ||
        !vcu__maps_hold(&o->cs->vmm.map, rq.ptr, rq.size)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    memset(desc, 0, sizeof(desc));
    for (i = 0; i < rq.count; i++) {
        const struct vcu_cu_mem_access *ac = &rq.access[i];

        if (ac->reserved != 0 ||
            (ac->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
             ac->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             ac->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
            o->res = CUDA_ERROR_INVALID_VALUE;
            return VCU_S_OK;
        }
        if (vcu__vmm_loc(o, ac->loc_type, ac->loc_id, &host) != 0)
            return VCU_S_OK;
        desc[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc[i].location.id = host;
        desc[i].flags = (CUmemAccess_flags)ac->flags;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemSetAccess, (CUdeviceptr)rq.ptr, (size_t)rq.size, desc,
                     (size_t)rq.count);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_MEM_GET_ACCESS(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    CUmemLocation loc;
    unsigned long long flags = 0;
    int host = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (vcu__vr_find(&o->cs->vmm.map, rq.ptr) < 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (vcu__vmm_loc(o, rq.prop.loc_type, rq.prop.loc_id, &host) != 0)
        return VCU_S_OK;
    VCU__ENTER(o);
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = host;
    o->res = VCU__CU(o->cu, cuMemGetAccess, &flags, &loc, (CUdeviceptr)rq.ptr);
    o->rb.vmm.value = flags;
    return VCU_S_OK;
}

/* A question about a device: no context is made for it. */
uint32_t vcu__op_CU_MEM_GRANULARITY(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    CUmemAllocationProp prop;
    size_t g = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (vcu__vmm_prop(o, &rq.prop, &prop) != 0)
        return VCU_S_OK;
    if (rq.flags != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
        rq.flags != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuMemGetAllocationGranularity, &g, &prop,
                     (CUmemAllocationGranularity_flags)rq.flags);
    o->rb.vmm.value = g;
    return VCU_S_OK;
}

/* What the allocation was created with, as the guest gave it. */
uint32_t vcu__op_CU_MEM_GET_PROPS(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    vcu__vmm_alloc_t *a;

    memcpy(&rq, o->p, sizeof(rq));
    a = vcu__vmm_get(o, rq.handle);
    if (a == NULL)
        return VCU_S_OK;
    o->res = CUDA_SUCCESS;
    o->rb.vmm.prop = a->prop;
    o->rb.vmm.size = a->size;
    return VCU_S_OK;
}

/* The handle of the allocation mapped at ptr, the one that mapped it,
 * counted once more.  An allocation the guest released while mapped
 * takes a driver reference again. */
uint32_t vcu__op_CU_MEM_RETAIN(vcu__op_t *o)
{
    struct vcu_cu_vmm_req rq;
    vcu__vmm_ranges_t *m = &o->cs->vmm.map;
    CUmemGenericAllocationHandle h = 0;
    vcu__vmm_alloc_t *a;
    int64_t i;

    memcpy(&rq, o->p, sizeof(rq));
    i = vcu__vr_find(m, rq.ptr);
    if (i < 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    a = m->r[i].a;
    if (a->grefs == UINT32_MAX) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    if (a->grefs == 0) {
        o->res = VCU__CU(o->cu, cuMemRetainAllocationHandle, &h, (void *)(uintptr_t)m->r[i].base);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
    }
    a->grefs++;
    o->rb.vmm.value = a->gh;
    return VCU_S_OK;
}

/* --- shareable handles (docs/design.md, "CUDA IPC") --- */

/*
 * The driver's descriptor goes to the daemon's keep (worker keep.c), which
 * names it by 128 random bits of its own for this VM's workers alone; the
 * guest gets those.  One allocation is exported once: later exports
 * answer the same name.  Kept until this process ends, so the allocation
 * stays charged to the session until then (vcu__vmm_alloc_t.exported).
 */
uint32_t vcu__op_CU_MEM_EXPORT_SHAREABLE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    struct vcu_cu_ipc_handle *out = &o->rb.ipc.h;
    vcu__vmm_alloc_t *a;
    int fd = -1, st;

    memcpy(&rq, o->p, sizeof(rq));
    a = vcu__vmm_get(o, rq.value);
    if (a == NULL)
        return VCU_S_OK;
    if (o->cu->keep_fd < 0 && !a->exported) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    if (!(a->prop.handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        o->res = CUDA_ERROR_INVALID_VALUE;      /* the driver's answer too */
        return VCU_S_OK;
    }
    if (!a->exported) {
        VCU__ENTER(o);
        o->res = VCU__CU(o->cu, cuMemExportToShareableHandle, &fd, a->h,
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
        st = vcu__keep_put(o->cu, VCU_CU_IPC_VMM, a->dev, a->size, fd, a->token);
        close(fd);
        if (st != VCU_S_OK) {
            o->res = st == VCU_S_EBUSY ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_OPERATING_SYSTEM;
            return VCU_S_OK;
        }
        a->exported = true;
    }
    out->magic = VCU_CU_IPC_MAGIC;
    out->kind = VCU_CU_IPC_VMM;
    memcpy(out->token, a->token, sizeof(out->token));
    o->res = CUDA_SUCCESS;
    return VCU_S_OK;
}

/*
 * The descriptor a worker of this VM exported, from the daemon's keep (a
 * name from another VM's, or one never given, is none there), imported as
 * an allocation of this session: charged to it as cuMemCreate's are,
 * before the driver is asked.
 */
uint32_t vcu__op_CU_MEM_IMPORT_SHAREABLE(vcu__op_t *o)
{
    struct vcu_cu_ipc_open_req rq;
    struct vcu_cu_mem_prop prop;
    CUmemGenericAllocationHandle h = 0;
    vcu__cuda_sess_t *cs = o->cs;
    uint64_t size = 0, ch;
    uint32_t dev = 0;
    int fd = -1, st;

    memcpy(&rq, o->p, sizeof(rq));
    if (!vcu__share_handle_ok(&rq, VCU_CU_IPC_VMM)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (o->cu->keep_fd < 0) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    st = vcu__keep_get(o->cu, VCU_CU_IPC_VMM, rq.h.token, &dev, &size, &fd);
    if (st != VCU_S_OK) {
        o->res = st == VCU_S_EINVAL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OPERATING_SYSTEM;
        return VCU_S_OK;
    }
    ch = vcu__grain(size);
    if (dev >= o->cu->ndev || size == 0 || ch > VCU__ACCT_MAX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (vcu__enter(o) != 0)
        goto out;
    if (vcu__charge(cs, dev, ch) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    o->res = VCU__CU(o->cu, cuMemImportFromShareableHandle, &h, (void *)(uintptr_t)fd,
                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (o->res != CUDA_SUCCESS) {
        vcu__uncharge(cs, dev, ch);
        goto out;
    }
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.loc_type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.loc_id = dev;
    prop.handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    vcu__vmm_alloc_new(o, h, size, ch, &prop);
out:
    close(fd);
    return VCU_S_OK;
}

/*
 * The session's end: its work done first (a kernel may still use a
 * mapping), then every mapping unmapped, every reservation freed and
 * every allocation released, their charges given back.
 */
void vcu__vmm_free(vcu__cuda_sess_t *cs)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__vmm_t *v = &cs->vmm;
    uint32_t d, i;

    for (d = 0; d < cu->ndev && (v->map.n != 0 || v->res.n != 0 || v->allocs != NULL); d++) {
        if (cs->ctx[d] == NULL || vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS)
            continue;
        cu->fn.cuCtxSynchronize();
    }
    for (i = 0; i < v->map.n; i++)
        VCU__CU(cu, cuMemUnmap, (CUdeviceptr)v->map.r[i].base, (size_t)v->map.r[i].size);
    for (i = 0; i < v->res.n; i++)
        VCU__CU(cu, cuMemAddressFree, (CUdeviceptr)v->res.r[i].base, (size_t)v->res.r[i].size);
    while (v->allocs != NULL) {
        vcu__vmm_alloc_t *a = v->allocs;

        if (a->grefs != 0)
            VCU__CU(cu, cuMemRelease, a->h);
        vcu__vmm_alloc_drop(cs, a);
    }
    vcu__vr_fini(cs, &v->map);
    vcu__vr_fini(cs, &v->res);
}
