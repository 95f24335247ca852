/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * CUDA IPC between processes of one VM (docs/design.md, "CUDA IPC").
 *
 * The driver's IPC handle names memory or an event to any process of the
 * host that presents it: a guest must never see one, nor have one it
 * forged opened.  So the exporting worker keeps the driver's handle in a
 * record in its VM's IPC folder (the daemon makes one per VM and gives it
 * to the VM's workers alone, as their /dev/shm: host-backend/daemon/vm.c),
 * named by its own pid and 128 random bits, and the guest gets that name
 * (struct vcu_cu_ipc_handle).  An opening worker reads the record by the
 * name the guest gave it: a name from another VM, or a guessed one, is
 * no file of this VM's folder.
 *
 * The driver refuses to open a handle that carries the opener's own pid
 * (CUDA_ERROR_INVALID_CONTEXT), and names an interprocess event's shared
 * memory in /dev/shm by its process's pid: the daemon starts each worker
 * at a pid of its own in its jail (vcu_jail_cfg_t.ns_pid).
 *
 * Memory opened stays charged to the opener too, while it holds it: the
 * driver keeps the memory for as long as any process has it open, even
 * once the exporter has freed it (measured, tests/gpu/probe-ipc.c "vm").
 */
#include <sys/random.h>

#include "cuda_int.h"

/* A record: what the exporting worker writes, host-endian (both ends are
 * workers of one build). */
#define VCU__IPC_REC_MAGIC 0x3163657263706976ull   /* "vipcrec1" */

struct vcu__ipc_rec {
    uint64_t magic;
    uint32_t kind;                  /* VCU_CU_IPC_MEM or _EVENT */
    uint32_t reserved;
    uint64_t size;                  /* memory: the allocation's bytes */
    unsigned char handle[64];       /* the driver's CUipcMemHandle or CUipcEventHandle */
};

_Static_assert(sizeof(CUipcMemHandle) == 64 && sizeof(CUipcEventHandle) == 64,
               "the driver's IPC handles");

/* The record's path for the guest's handle h: "DIR/vcu-ipc.PID.TOKEN". */
static int vcu__ipc_path(const vcu__cuda_t *cu, uint32_t pid, const uint8_t *token, char *out,
                         size_t len)
{
    char hex[2 * VCU_CU_IPC_TOKEN + 1];
    unsigned int i;

    for (i = 0; i < VCU_CU_IPC_TOKEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", token[i]);
    return snprintf(out, len, "%s/vcu-ipc.%x.%s", cu->ipc_dir, pid, hex) < (int)len ? 0 : -1;
}

/* The entry of kind and key in l, or NULL. */
static vcu__ipc_ent_t *vcu__ipc_find(vcu__ipc_list_t *l, uint32_t kind, uint64_t key)
{
    uint32_t i;

    for (i = 0; i < l->n; i++)
        if (l->e[i].kind == kind && l->e[i].key == key)
            return &l->e[i];
    return NULL;
}

/* The entry of l that names record (pid, token), or NULL. */
static vcu__ipc_ent_t *vcu__ipc_named(vcu__ipc_list_t *l, uint32_t pid, const uint8_t *token)
{
    uint32_t i;

    for (i = 0; i < l->n; i++)
        if (l->e[i].pid == pid && memcmp(l->e[i].token, token, VCU_CU_IPC_TOKEN) == 0)
            return &l->e[i];
    return NULL;
}

/* A new zeroed entry at the end of l (n not yet counted: the caller
 * counts it once it is whole), or NULL with the result OUT_OF_MEMORY. */
static vcu__ipc_ent_t *vcu__ipc_slot(vcu__op_t *o, vcu__ipc_list_t *l)
{
    vcu__cuda_sess_t *cs = o->cs;

    if (l->n >= VCU__IPC_MAX) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 16;
        size_t more = (cap - l->cap) * sizeof(*l->e);
        vcu__ipc_ent_t *n;

        if (vcu__mem_take(cs, more) != 0) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return NULL;
        }
        n = realloc(l->e, cap * sizeof(*n));
        if (n == NULL) {
            vcu__mem_give(cs, more);
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return NULL;
        }
        l->e = n;
        l->cap = cap;
    }
    memset(&l->e[l->n], 0, sizeof(l->e[0]));
    return &l->e[l->n];
}

static void vcu__ipc_drop(vcu__ipc_list_t *l, vcu__ipc_ent_t *x)
{
    *x = l->e[--l->n];
}

static void vcu__ipc_list_free(vcu__cuda_sess_t *cs, vcu__ipc_list_t *l)
{
    free(l->e);
    vcu__mem_give(cs, l->cap * sizeof(*l->e));
    memset(l, 0, sizeof(*l));
}

static void vcu__ipc_answer(const vcu__ipc_ent_t *x, struct vcu_cu_ipc_handle *h)
{
    memset(h, 0, sizeof(*h));
    h->magic = VCU_CU_IPC_MAGIC;
    h->kind = x->kind;
    h->pid = x->pid;
    memcpy(h->token, x->token, VCU_CU_IPC_TOKEN);
}

/*
 * Writes the record of the driver's handle dh and answers the guest with
 * its name; the same object exported again keeps its first name.  A
 * record is written whole before the guest has its name, so a reader
 * finds it whole or not at all.
 */
static void vcu__ipc_export(vcu__op_t *o, uint32_t kind, uint64_t key, uint64_t size,
                            const void *dh)
{
    vcu__cuda_sess_t *cs = o->cs;
    vcu__ipc_ent_t *x = vcu__ipc_find(&cs->ipc_out, kind, key);
    struct vcu__ipc_rec rec;
    char path[PATH_MAX];
    int fd;

    if (x != NULL) {
        vcu__ipc_answer(x, &o->rb.ipc.h);
        return;
    }
    x = vcu__ipc_slot(o, &cs->ipc_out);
    if (x == NULL)
        return;
    x->kind = kind;
    x->key = key;
    x->pid = (uint32_t)getpid();
    if (getrandom(x->token, sizeof(x->token), 0) != (ssize_t)sizeof(x->token) ||
        vcu__ipc_path(o->cu, x->pid, x->token, path, sizeof(path)) != 0) {
        o->res = CUDA_ERROR_OPERATING_SYSTEM;
        return;
    }
    memset(&rec, 0, sizeof(rec));
    rec.magic = VCU__IPC_REC_MAGIC;
    rec.kind = kind;
    rec.size = size;
    memcpy(rec.handle, dh, sizeof(rec.handle));
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || write(fd, &rec, sizeof(rec)) != (ssize_t)sizeof(rec)) {
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        o->res = CUDA_ERROR_OPERATING_SYSTEM;
        return;
    }
    close(fd);
    cs->ipc_out.n++;
    vcu__ipc_answer(x, &o->rb.ipc.h);
}

/* Removes export x's record (its object is gone). */
static void vcu__ipc_unexport(vcu__cuda_sess_t *cs, vcu__ipc_ent_t *x)
{
    char path[PATH_MAX];

    if (vcu__ipc_path(cs->cu, x->pid, x->token, path, sizeof(path)) == 0)
        unlink(path);
    vcu__ipc_drop(&cs->ipc_out, x);
}

/* The object key of kind is gone: its record too. */
void vcu__ipc_gone(vcu__cuda_sess_t *cs, uint32_t kind, uint64_t key)
{
    vcu__ipc_ent_t *x;

    if (cs->ipc_out.n != 0 && (x = vcu__ipc_find(&cs->ipc_out, kind, key)) != NULL)
        vcu__ipc_unexport(cs, x);
}

/*
 * The record the guest's handle names, of the kind asked: the handle
 * checked field by field, the record read whole.  On failure the result
 * is CUDA_ERROR_INVALID_VALUE, as the driver answers a handle it does not
 * know.
 */
static int vcu__ipc_lookup(vcu__op_t *o, const struct vcu_cu_ipc_open_req *rq, uint32_t kind,
                           struct vcu__ipc_rec *rec)
{
    static const uint8_t zero[32];
    char path[PATH_MAX];
    ssize_t n;
    int fd;

    o->res = CUDA_ERROR_INVALID_VALUE;
    if (rq->h.magic != VCU_CU_IPC_MAGIC || rq->h.kind != kind || rq->h.reserved != 0 ||
        memcmp(rq->h.reserved2, zero, sizeof(zero)) != 0 || rq->reserved != 0 ||
        vcu__ipc_path(o->cu, rq->h.pid, rq->h.token, path, sizeof(path)) != 0)
        return -1;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    n = read(fd, rec, sizeof(*rec) + 1);
    close(fd);
    if (n != (ssize_t)sizeof(*rec) || rec->magic != VCU__IPC_REC_MAGIC || rec->kind != kind)
        return -1;
    o->res = CUDA_SUCCESS;
    return 0;
}

bool vcu__share_handle_ok(const struct vcu_cu_ipc_open_req *rq, uint32_t kind)
{
    static const uint8_t zero[sizeof(rq->h.reserved2)];

    return rq->h.magic == VCU_CU_IPC_MAGIC && rq->h.kind == kind && rq->h.pid == 0 &&
           rq->h.reserved == 0 && memcmp(rq->h.reserved2, zero, sizeof(zero)) == 0 &&
           rq->flags == 0 && rq->reserved == 0;
}

/* IPC needs the VM's folder (a worker of the daemon). */
static int vcu__ipc_on(vcu__op_t *o)
{
    if (o->cu->ipc_dir[0] != '\0')
        return 0;
    o->res = CUDA_ERROR_NOT_SUPPORTED;
    return -1;
}

uint32_t vcu__op_CU_IPC_GET_MEM_HANDLE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUipcMemHandle dh;
    CUdeviceptr base = 0;
    size_t size = 0;
    uint64_t v = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (vcu__ipc_on(o) != 0)
        return VCU_S_OK;
    /* Memory of the session's own cuMemAlloc on this device: the driver
     * exports the whole allocation. */
    if (VCU__CU(o->cu, cuMemGetAddressRange, &base, &size, (CUdeviceptr)rq.value) !=
            CUDA_SUCCESS ||
        !vcu__pset_find(&o->cs->allocs, base, &v) || (v & VCU__ALLOC_ASYNC) ||
        VCU__ALLOC_DEV(v) != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuIpcGetMemHandle, &dh, base);
    if (o->res == CUDA_SUCCESS)
        vcu__ipc_export(o, VCU_CU_IPC_MEM, base, size, dh.reserved);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_IPC_OPEN_MEM_HANDLE(vcu__op_t *o)
{
    struct vcu_cu_ipc_open_req rq;
    struct vcu__ipc_rec rec;
    vcu__ipc_ent_t *x;
    CUipcMemHandle dh;
    CUdeviceptr p = 0, base = 0;
    size_t size = 0;
    uint32_t d = vcu__dev_of(o);
    uint64_t ch;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (vcu__ipc_on(o) != 0)
        return VCU_S_OK;
    if (rq.flags & ~(uint32_t)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (vcu__ipc_lookup(o, &rq, VCU_CU_IPC_MEM, &rec) != 0)
        return VCU_S_OK;
    /* Once per session and handle: the driver's answer to a second open
     * in one process is its own business; this one is one answer. */
    if (vcu__ipc_named(&o->cs->ipc_in, rq.h.pid, rq.h.token) != NULL) {
        o->res = CUDA_ERROR_ALREADY_MAPPED;
        return VCU_S_OK;
    }
    x = vcu__ipc_slot(o, &o->cs->ipc_in);
    if (x == NULL)
        return VCU_S_OK;
    /* Charged before the driver maps it, at the record's size; then at
     * least at the size of the range the driver mapped. */
    ch = vcu__grain(rec.size);
    if (ch == 0 || ch > VCU__ACCT_MAX || vcu__charge(o->cs, d, ch) != 0) {
        o->res = ch == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    memcpy(dh.reserved, rec.handle, sizeof(dh.reserved));
    o->res = VCU__CU(o->cu, cuIpcOpenMemHandle, &p, dh, rq.flags);
    if (o->res == CUDA_SUCCESS &&
        (VCU__CU(o->cu, cuMemGetAddressRange, &base, &size, p) != CUDA_SUCCESS ||
         vcu__grain(size) > VCU__ACCT_MAX ||
         (vcu__grain(size) > ch && vcu__charge(o->cs, d, vcu__grain(size) - ch) != 0))) {
        VCU__CU(o->cu, cuIpcCloseMemHandle, p);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (o->res == CUDA_SUCCESS && vcu__grain(size) > ch) {
        ch = vcu__grain(size);
    }
    if (o->res != CUDA_SUCCESS) {
        vcu__uncharge(o->cs, d, ch);
        return VCU_S_OK;
    }
    x->key = p;
    x->kind = VCU_CU_IPC_MEM;
    x->dev = d;
    x->charge = ch;
    x->pid = rq.h.pid;
    memcpy(x->token, rq.h.token, VCU_CU_IPC_TOKEN);
    o->cs->ipc_in.n++;
    o->rb.u64.value = p;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_IPC_CLOSE_MEM_HANDLE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    vcu__ipc_ent_t *x;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    /* Only what this session opened, on this device. */
    x = vcu__ipc_find(&o->cs->ipc_in, VCU_CU_IPC_MEM, rq.value);
    if (x == NULL || x->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuIpcCloseMemHandle, (CUdeviceptr)rq.value);
    if (o->res == CUDA_SUCCESS) {
        vcu__uncharge(o->cs, x->dev, x->charge);
        vcu__ipc_drop(&o->cs->ipc_in, x);
    }
    return VCU_S_OK;
}

uint32_t vcu__op_CU_IPC_GET_EVENT_HANDLE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUipcEventHandle dh;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (vcu__ipc_on(o) != 0)
        return VCU_S_OK;
    VCU__GET(o, e, rq.value, VCU__H_EVENT);
    if (e->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_HANDLE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuIpcGetEventHandle, &dh, e->u.ev);
    if (o->res == CUDA_SUCCESS)
        vcu__ipc_export(o, VCU_CU_IPC_EVENT, rq.value, 0, dh.reserved);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_IPC_OPEN_EVENT_HANDLE(vcu__op_t *o)
{
    struct vcu_cu_ipc_open_req rq;
    struct vcu__ipc_rec rec;
    CUipcEventHandle dh;
    CUevent ev = NULL;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (vcu__ipc_on(o) != 0)
        return VCU_S_OK;
    if (rq.flags != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (vcu__ipc_lookup(o, &rq, VCU_CU_IPC_EVENT, &rec) != 0)
        return VCU_S_OK;
    memcpy(dh.reserved, rec.handle, sizeof(dh.reserved));
    o->res = VCU__CU(o->cu, cuIpcOpenEventHandle, &ev, dh);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    e = vcu__new(o, VCU__H_EVENT, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuEventDestroy, ev);
        return VCU_S_OK;
    }
    e->u.ev = ev;
    e->xflags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/* The session ends: what it opened is closed (its context still current
 * on each device: before the contexts go), its records removed. */
/*
 * A block of a shareable pool of the session's (CU_MEMPOOL_CREATE with
 * the POSIX handle type): the driver's export data into a record of the
 * VM's folder, as a memory handle's, with the block's charge as its size.
 */
uint32_t vcu__op_CU_MEMPOOL_EXPORT_POINTER(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUmemPoolPtrExportData dd;
    vcu__cuda_sess_t *cs = o->cs;
    uint64_t v = 0;
    uint32_t slot;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (vcu__ipc_on(o) != 0)
        return VCU_S_OK;
    if (!vcu__pset_find(&cs->allocs, rq.value, &v) || !(v & VCU__ALLOC_ASYNC) ||
        (slot = VCU__ALLOC_POOL(v)) >= VCU__POOL_SLOTS || !cs->pools[slot].share) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    memset(&dd, 0, sizeof(dd));
    o->res = VCU__CU(o->cu, cuMemPoolExportPointer, &dd, (CUdeviceptr)rq.value);
    if (o->res == CUDA_SUCCESS)
        vcu__ipc_export(o, VCU_CU_IPC_POOL_PTR, rq.value, VCU__ALLOC_CHARGE(v), dd.reserved);
    return VCU_S_OK;
}

/*
 * A block another process of the VM exported, into a pool this session
 * imported: charged to the session at the record's size before the
 * driver maps it, and tracked as its own memory, whose free gives the
 * charge back.
 */
uint32_t vcu__op_CU_MEMPOOL_IMPORT_POINTER(vcu__op_t *o)
{
    struct vcu_cu_pool_ptr_req rq;
    struct vcu_cu_ipc_open_req oq;
    struct vcu__ipc_rec rec;
    CUmemPoolPtrExportData dd;
    vcu__cuda_sess_t *cs = o->cs;
    CUdeviceptr p = 0;
    uint32_t slot, d;
    uint64_t ch;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (vcu__ipc_on(o) != 0)
        return VCU_S_OK;
    VCU__GET(o, e, rq.pool, VCU__H_POOL);
    slot = vcu__pool_slot(cs, e->u.pool);
    if (slot >= VCU__POOL_SLOTS || !cs->pools[slot].imported) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    memset(&oq, 0, sizeof(oq));
    oq.h = rq.h;
    if (vcu__ipc_lookup(o, &oq, VCU_CU_IPC_POOL_PTR, &rec) != 0)
        return VCU_S_OK;
    d = cs->pools[slot].dev;
    ch = vcu__grain(rec.size);
    if (ch == 0 || ch > VCU__ACCT_MAX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (vcu__charge(cs, d, ch) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    _Static_assert(sizeof(dd.reserved) == sizeof(rec.handle), "CUmemPoolPtrExportData");
    memcpy(dd.reserved, rec.handle, sizeof(dd.reserved));
    o->res = VCU__CU(o->cu, cuMemPoolImportPointer, &p, e->u.pool, &dd);
    if (o->res != CUDA_SUCCESS || vcu__track_dev(o, p, d, 0, ch) != 0) {
        vcu__uncharge(cs, d, ch);
        return VCU_S_OK;
    }
    o->rb.ipcimp.value = p;
    o->rb.ipcimp.size = rec.size;
    return VCU_S_OK;
}

void vcu__ipc_sess_end(vcu__cuda_sess_t *cs)
{
    uint32_t i;

    for (i = 0; i < cs->ipc_in.n; i++) {
        vcu__ipc_ent_t *x = &cs->ipc_in.e[i];

        if (x->dev < cs->cu->ndev && cs->ctx[x->dev] != NULL &&
            vcu__cur(cs, cs->ctx[x->dev]) == CUDA_SUCCESS)
            VCU__CU(cs->cu, cuIpcCloseMemHandle, (CUdeviceptr)x->key);
        vcu__uncharge(cs, x->dev, x->charge);
    }
    while (cs->ipc_out.n > 0)
        vcu__ipc_unexport(cs, &cs->ipc_out.e[cs->ipc_out.n - 1]);
    vcu__ipc_list_free(cs, &cs->ipc_in);
    vcu__ipc_list_free(cs, &cs->ipc_out);
}
