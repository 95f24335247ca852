/*
 * The CUDA executor's private header, shared by its parts: cuda.c (driver
 * loading, RAM registration, sessions, the opcode execution core, the
 * generated calls, dispatch), cuda_ctx.c (devices and contexts),
 * cuda_mem.c (memory), cuda_module.c (modules, functions, launches),
 * cuda_wait.c (waits, orphans, context teardown, fences, the host
 * callback gate), cuda_stream.c (streams, captures, host callbacks,
 * events), cuda_graph.c (graphs, graph memory), cuda_graph_cond.c
 * (conditional nodes) and cuda_batch.c (CU_BATCH, runs of launches as
 * graphs).  How the executor works, and its locks: cuda.c.
 */
#ifndef VCU_CUDA_INT_H
#define VCU_CUDA_INT_H

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cuda.h>
#include <cudaProfiler.h>

#include "vcu_account.h"
#include "vcu_sched.h"
#include "vcu_backend_int.h"
#include "vcu_modcache.h"
#include "vcu_printf.h"
#include "cuda_tab.h"
/* Generated from include/cuda_calls.list (host-backend/Makefile). */
#include "vcu_calls.h"
#include "cuda_calls_fns.h"

#define VCU__STR2(x) #x
#define VCU__STR(x) VCU__STR2(x)

/*
 * Every driver function the executor calls by hand, with whether the
 * backend can work without it (0: optional, calls give
 * CUDA_ERROR_NOT_SUPPORTED): the host-calls and host-needs lines of
 * include/cuda_calls.list (generated, cuda_calls_fns.h).  The names are
 * the driver's exported ones; cuda.h's macros give the same to the code
 * (fn.cuMemAlloc is fn.cuMemAlloc_v2).
 */
#define VCU__CU_FUNCS(XX) VCU__HOST_FUNCS(XX)

typedef struct vcu__cu_fns_s {
#define VCU__FN_FIELD(name, req) __typeof__(name) *name;
    VCU__CU_FUNCS(VCU__FN_FIELD)
#undef VCU__FN_FIELD
} vcu__cu_fns_t;

/* A call through the table; a function the driver lacks is "not supported". */
#define VCU__CU(cu, name, ...) \
    ((cu)->fn.name != NULL ? (cu)->fn.name(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

typedef struct vcu__ram_s {
    void *hva;
    size_t len;
    unsigned int refs;                      /* add_ram calls of this very range */
    struct vcu__ram_s *next;
} vcu__ram_t;

struct vcu__cuda_s {
    void *dl;
    vcu__cu_fns_t fn;
    vcu__gen_fns_t gfn;                     /* the generated calls' (cuda_calls.inc) */
    unsigned int ndev;
    CUdevice dev[VCU_CU_MAX_DEVICES];       /* virtual ordinal -> host device */
    int host_ordinal[VCU_CU_MAX_DEVICES];
    int driver_version;
    int capture;                            /* device printf captured (capture.c) */
    int worker;                             /* vcu_backend_config_t.worker */
    vcu_account_t *acct;                    /* the VM's memory account, or NULL */
    struct vcu_sched_s *sched;              /* the compute-share group, or NULL */
    int acct_slot;                          /* vcu_backend_config_t.account_slot */
    uint64_t ctx_bytes;                     /* charged per context (vcu_backend_config_t) */
    /* Per device: threads whose stacks the driver reserves for the
     * stack limit (SMs x threads per SM), see vcu__stack_bytes(). */
    uint64_t stack_threads[VCU_CU_MAX_DEVICES];
    vcu_modcache_t *mc;                     /* the module cache, or NULL */
    uint32_t sms;                           /* packed mode's SMs; 0: isolated */
    int graphs;                             /* launch runs as graphs (VCU_LAUNCH_GRAPHS) */
    /* The VM's IPC folder (vcu_backend_config_t.ipc_dir); "": no IPC. */
    char ipc_dir[256];
    int keep_fd;                            /* the daemon's keep (keep.c); -1: none */

    pthread_mutex_t mu;                     /* protects ram_ctx, ram, pctx, wrefs */
    CUcontext ram_ctx;                      /* backend-wide, for cuMemHostRegister */
    vcu__ram_t *ram;
    /* Packed mode: each device's one context, made with the VM's SMs and
     * shared by the session and ram_ctx as a primary context would be. */
    CUcontext pctx[VCU_CU_MAX_DEVICES];
    /* A worker's references to each device's one context (the session's
     * and ram_ctx): the context's memory is charged from the first to
     * the last. */
    unsigned int wrefs[VCU_CU_MAX_DEVICES];
};

/* A guest function CUDA will call: one stream host func (freed by the
 * trampoline) or one graph host node (kept until the session ends, since
 * an instantiated graph may run it any number of times). */
typedef struct vcu__cb_s {
    struct vcu__gate_s *gate;
    uint64_t cookie;
    int oneshot;
    struct vcu__cb_s *next;                 /* gate.persistent */
} vcu__cb_t;

/* A trampoline blocked until its cookie's CU_CALLBACK_DONE (on its stack). */
typedef struct vcu__waiter_s {
    uint64_t cookie;
    int done;
    struct vcu__waiter_s *next;
} vcu__waiter_t;

typedef struct vcu__gate_s {
    pthread_mutex_t mu;                     /* protects every field below */
    pthread_cond_t cv;                      /* waiters' done, ending, ntramp */
    int ending;                             /* session ending: release all */
    uint64_t *queue;                        /* reached cookies nobody waited for */
    size_t nq, capq;
    vcu_request_t *parked;                  /* the one parked CU_CALLBACK_WAIT */
    vcu__waiter_t *waiters;
    unsigned int ntramp;                    /* trampolines inside the gate */
    vcu__cb_t *persistent;                  /* graph host node records */
} vcu__gate_t;

/* One event a wait looks at, of device dev's context. */
typedef struct vcu__wev_s {
    CUevent ev;
    uint32_t dev;
} vcu__wev_t;

struct vcu__cuda_wait_s {
    struct vcu__cuda_wait_s *next;          /* cs->waits */
    struct vcu__cuda_wait_s **pprev;
    vcu__wev_t *ev;                         /* pool events not yet seen done */
    unsigned int nev, capev;
    vcu__wev_t ev1[2];                      /* ev for the usual one or two */
    CUevent gev;                            /* EVENT_SYNCHRONIZE: the guest's event */
    uint32_t gdev;
    int own_gev;                            /* destroy gev when done with it */
    CUresult res;                           /* first failure seen */
    int fence;                              /* failures go to the deferred error */
    int async;                              /* VCU_REQ_F_ASYNC: likewise */
    size_t out_len;                         /* reply payload, written at issue */
    uint32_t status;                        /* wire status of the reply */
    void *bounce;                           /* 2D copy staging, freed at finish */
    size_t bounce_len;                      /* of the session's budget */
    const vcu_segment_t *seg;               /* scattered into at finish (DTOH) */
    size_t span;
};

/* A stream the guest destroyed while its work may still run. */
typedef struct vcu__orphan_s {
    struct vcu__orphan_s *next;
    CUstream st;
    CUevent ev;                             /* pool event behind its last work */
    uint32_t dev;
} vcu__orphan_t;

/*
 * A run of a batch's launches issued as one graph (see vcu__grun()): the
 * executable graph last made for runs of n launches on one stream, kept
 * to be updated with the next such run.  n 0: a free slot; ex NULL: the
 * run was seen once, and is made a graph when it comes again.
 */
typedef struct vcu__grun_s {
    uint64_t stream;                        /* the guest's stream handle */
    uint32_t dev, n;
    CUgraphExec ex;
    uint64_t used;                          /* the least recently used goes first */
    uint32_t skip;                          /* runs to go launch by launch (back-off) */
} vcu__grun_t;

/* Runs kept per session; the shortest run made a graph; what one kept
 * executable graph is counted as in the session's host budget; how many
 * runs of a shape go launch by launch after the driver refused to
 * instantiate or update a graph of it. */
#define VCU__GRUN_SLOTS 8u
#define VCU__GRUN_MIN 8u
#define VCU__GRUN_BYTES ((size_t)64 << 10)
#define VCU__GRUN_BACKOFF 64u

typedef struct vcu__evpool_s {
    CUevent *ev;
    unsigned int n, cap;
} vcu__evpool_t;

/*
 * A loaded module.  Counted: one for the guest's handle (dropped by
 * CU_MODULE_UNLOAD), one for each graph and graph exec whose kernel nodes
 * use its functions (and one in cs->cap_mods while captures may run);
 * unloaded when the last goes.  The driver keeps only a pointer to the
 * function in a kernel node: a graph launched after its module was
 * unloaded follows it into freed memory and crashes the process.
 */
typedef struct vcu__mod_s {
    CUmodule mod;
    uint32_t dev;
    unsigned int refs;
    uint64_t charge;                        /* GPU memory its load took (account) */
} vcu__mod_t;

/* Modules, each counted once by the set (graphs, execs, captures). */
typedef struct vcu__modset_s {
    unsigned int n, cap;
    vcu__mod_t *m[];
} vcu__modset_t;

/* The context limits that reserve GPU memory, charged (see
 * vcu__op_CU_CTX_SET_LIMIT), and the driver's name of each. */
enum { VCU__LIM_HEAP, VCU__LIM_FIFO, VCU__LIM_STACK, VCU__LIMS };
static const CUlimit vcu__lim_id[VCU__LIMS] = {
    CU_LIMIT_MALLOC_HEAP_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_STACK_SIZE,
};

/*
 * Virtual memory management (cuda_vmm.c).  An allocation of cuMemCreate:
 * named to the guest by one session handle (VCU__H_VMM) for as long as
 * the record lives, which is while the guest holds a reference (grefs:
 * its create and retains, less its releases) or a mapping of it exists
 * (nmaps): the driver frees the memory only then, so only then is its
 * charge given back.  The session holds one driver reference while grefs
 * is not 0.
 */
typedef struct vcu__vmm_alloc_s {
    CUmemGenericAllocationHandle h;         /* the driver's */
    uint64_t gh;                            /* the session handle */
    uint32_t dev;                           /* virtual device of its memory */
    uint32_t grefs;
    uint64_t nmaps;
    uint64_t size;
    uint64_t charge;                        /* of the VM's quota, on dev */
    struct vcu_cu_mem_prop prop;            /* as created (virtual ordinal) */
    /* Exported (CU_MEM_EXPORT_SHAREABLE): the daemon keeps the driver's
     * descriptor, and with it the memory, until this process ends; so
     * the record and its charge stay until the session's end. */
    bool exported;
    uint8_t token[16];                      /* the keep's name of it */
    struct vcu__vmm_alloc_s *next;          /* the session's list */
    struct vcu__vmm_alloc_s **pprev;
} vcu__vmm_alloc_t;

/* An address range: a reservation, or a mapping of allocation a. */
typedef struct vcu__vmm_range_s {
    uint64_t base, size;
    vcu__vmm_alloc_t *a;                    /* mappings only */
} vcu__vmm_range_t;

/* Sorted by base, disjoint; counted in the session's host budget. */
typedef struct vcu__vmm_ranges_s {
    vcu__vmm_range_t *r;
    uint32_t n, cap;
} vcu__vmm_ranges_t;

typedef struct vcu__vmm_s {
    vcu__vmm_ranges_t res;                  /* cuMemAddressReserve's */
    vcu__vmm_ranges_t map;                  /* cuMemMap's */
    vcu__vmm_alloc_t *allocs;
} vcu__vmm_t;

/*
 * A memory pool of the session's, and its charge: what its live blocks
 * were charged, and what it is charged in all (at least what the driver
 * says it reserves: vcu__pool_settle).  pool NULL: the slot is free, or
 * (gone) the guest destroyed the pool while blocks of it were live, which
 * stay charged, with all the pool was charged then, until the last is
 * freed.  Worker thread only, like the rest of the session.
 */
#define VCU__GUEST_POOLS 32u                /* pools a session may make */
#define VCU__POOL_SLOTS (VCU_CU_MAX_DEVICES + VCU__GUEST_POOLS)
typedef struct {
    CUmemoryPool pool;
    uint32_t dev;
    bool gone;
    bool share;                             /* made with POSIX descriptors */
    bool imported;                          /* another process's (no blocks of its own) */
    /* Exported: the daemon's keep holds the driver's descriptor, and with
     * it the pool, until this process ends; so its charge stays as long,
     * destroyed or not (vcu__pool_settle_slot). */
    bool exported;
    uint8_t token[16];                      /* the keep's name of it */
    uint64_t live, charge;
} vcu__pool_t;

/* CUDA IPC (cuda_ipc.c): an object the session exported, by its record's
 * name, or memory it opened, by the name it opened. */
typedef struct vcu__ipc_ent_s {
    uint64_t key;                           /* export: memory's base or the event's
                                               handle; opened: the pointer */
    uint32_t kind;                          /* VCU_CU_IPC_MEM or _EVENT */
    uint32_t dev;                           /* opened: its device */
    uint64_t charge;                        /* opened: charged to the session */
    uint32_t pid;                           /* the record's exporter */
    uint8_t token[VCU_CU_IPC_TOKEN];
} vcu__ipc_ent_t;

typedef struct vcu__ipc_list_s {
    vcu__ipc_ent_t *e;
    uint32_t n, cap;
} vcu__ipc_list_t;

/* Exports and opens a session may hold at once (each export is a file
 * of its VM's folder). */
#define VCU__IPC_MAX 4096u

struct vcu__cuda_sess_s {
    vcu__cuda_t *cu;
    CUcontext ctx[VCU_CU_MAX_DEVICES];      /* NULL until first used */
    unsigned int ctx_flags[VCU_CU_MAX_DEVICES];
    /* Each context's stream of the migration's own copies (non-blocking,
     * made with the context on every worker, so that the destination's
     * allocations come out as the source's: cuda_migrate.c), or NULL. */
    CUstream mstream[VCU_CU_MAX_DEVICES];
    /* The session's pools (vcu__pool_t): slot d < VCU_CU_MAX_DEVICES its
     * own pool of device d (never the device's default pool, which every
     * context of the process shares: a block freed there reaches the next
     * allocation, of any session, with its data), made on first use, with
     * its handle in pool_h[d] (0 until asked); the slots after, the pools
     * the guest made (CU_MEMPOOL_CREATE). */
    vcu__pool_t pools[VCU__POOL_SLOTS];
    uint64_t pool_h[VCU_CU_MAX_DEVICES];
    /* Host memory the session holds (see VCU__SESS_HOST_BUDGET), and
     * what of the VM's host quota it has charged for it (whole
     * VCU__HOST_GRAIN steps, at least hostmem).  hostmu protects both:
     * taken and given on the worker, given by the callback trampolines. */
    pthread_mutex_t hostmu;
    size_t hostmem;
    uint64_t hostres;
    /* A capture may be in progress: every module launched from now on
     * (or in a graph launched) is in cap_mods, which the graph a capture
     * ends with copies.  Cleared when no stream of the session captures. */
    bool capture;
    vcu__modset_t *cap_mods;
    uint32_t cap_graphs;                    /* graph entries with a cap_id */
    /* The interaction mode the guest set (CU_THREAD_CAPTURE_MODE), made
     * the thread's by vcu__enter: a driven backend runs many sessions on
     * one thread.  Worker only. */
    CUstreamCaptureMode cap_mode;
    vcu__htab_t tab;
    vcu__pset_t allocs;                     /* device pointers this session owns */
    /* Those of allocs a CU_MEM_ALLOC made in a context the guest created:
     * pointer -> the context's number (vcu_cu_hdr.ctx), for
     * CU_CTX_DESTROY.  Kept exact: an entry goes with its allocation
     * (vcu__alloc_forget). */
    vcu__pset_t ctx_allocs;
    vcu__vmm_t vmm;                         /* reservations, mappings, allocations */
    /* The session's slot in the VM's memory account (-1: none), and
     * whether it claimed it itself (in-process) rather than being given
     * it (a worker).  Per device: the context limits that take GPU memory (malloc
     * heap, printf FIFO, stack: VCU__LIM_*): their values before the
     * guest first set them, the values set since (lim_val, the base
     * until then), and the charge for what was set above the base; the
     * most local memory a thread of a function handed out in the
     * context needs, which the stack limit is kept at (lmem, see
     * vcu__stack_cover).  See "Memory quota" in docs/design.md. */
    int aslot;
    bool aowned;
    /* Graph memory (allocation nodes, captured stream-ordered
     * allocations): what device d's graph memory is charged, at least
     * what the driver reserves for the session's graphs there
     * (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT; see vcu__gmem_settle);
     * the addresses of the session's graph allocations, which it may
     * free (value: device); the conditional handles it made (key:
     * handle + 1; value: the graph's handle); whether any graph memory
     * was made (else instantiation need not look for it). */
    uint64_t gmem_charge[VCU_CU_MAX_DEVICES];
    vcu__pset_t gallocs;
    vcu__pset_t conds;
    bool gmem_seen;
    /* The texture and surface objects the session made (key: the
     * driver's value; value: the session handle of its record). */
    vcu__pset_t texs;
    vcu__pset_t surfs;
    /* CUDA IPC (cuda_ipc.c): the objects the session exported, the
     * memory it opened.  Worker thread only. */
    vcu__ipc_list_t ipc_out, ipc_in;
    size_t lim_base[VCU_CU_MAX_DEVICES][VCU__LIMS];
    size_t lim_val[VCU_CU_MAX_DEVICES][VCU__LIMS];
    bool lim_known[VCU_CU_MAX_DEVICES][VCU__LIMS];
    uint64_t lim_charge[VCU_CU_MAX_DEVICES][VCU__LIMS];
    size_t lmem[VCU_CU_MAX_DEVICES];
    uint32_t deferred;                      /* pending CUresult of an async request */
    vcu__gate_t gate;
    struct vcu__op_s *op;                   /* the worker's scratch for vcu__cuda_exec */
    CUcontext cur;                          /* current on the worker thread, or NULL */
    vcu__cuda_wait_t *waits;                /* pending waits, newest first */
    unsigned int ngev;                      /* waits with a gev */
    vcu__orphan_t *orphans;
    vcu__evpool_t pool[VCU_CU_MAX_DEVICES];
    vcu__grun_t grun[VCU__GRUN_SLOTS];
    uint64_t grun_tick;
    /* Device printf output, once an image using printf is loaded and the
     * backend captures; its synchronizing calls then block (see
     * vcu__cuda_exec). */
    vcu__out_t *out;
    /* What migration needs of the session's history (cuda_migrate.c). */
    struct vcu__mig_s *mig;
    /* The SHA-256 of the image the last CU_MODULE_LOAD loaded (with a
     * module cache): the history's name for it.  Worker only. */
    unsigned char load_sha[VCU_SHA256_LEN];
};

/* Tracked allocations: vcu__pset value = dev | flags | the bytes charged
 * for it, in VCU__ACCT_GRAIN units, from bit VCU__ALLOC_SHIFT. */
#define VCU__ALLOC_ASYNC 0x10000u
#define VCU__ALLOC_DEV(v) ((uint32_t)(v) & 0xffffu)
/* A stream-ordered block's pool: its slot in pools[]. */
#define VCU__ALLOC_POOL_SHIFT 17
#define VCU__ALLOC_POOL(v) (((uint32_t)(v) >> VCU__ALLOC_POOL_SHIFT) & 0x7fu)
_Static_assert(VCU__POOL_SLOTS <= 0x80u, "a pool slot fits its bits");
#define VCU__ALLOC_SHIFT 24
#define VCU__ALLOC_CHARGE(v) (((v) >> VCU__ALLOC_SHIFT) * VCU__ACCT_GRAIN)

/*
 * Memory account (vcu_account.h).  Allocations are charged in steps of
 * VCU__ACCT_GRAIN bytes (what the driver aligns every allocation to, at
 * least); no GPU has VCU__ACCT_MAX bytes, and a request for more fails as
 * the driver fails it.  Each context the session makes is charged
 * cu->ctx_bytes before the driver makes it (the daemon's --ctx-bytes;
 * VCU_BACKEND_CTX_BYTES by default), and reported as the contexts' part
 * of the charges: cuMemGetInfo cannot be asked what a context takes
 * before one exists, so the figure is a measured one.
 */
#define VCU__ACCT_GRAIN 512u
#define VCU__ACCT_MAX ((uint64_t)1 << 48)

/*
 * CU_LIMIT_STACK_SIZE: the driver reserves the stack of every thread the
 * device can hold at once, about stack size x SMs x threads per SM
 * (measured on an H200 with driver 580: 16 KiB took 3.9 GiB, 64 KiB
 * 16.6 GiB, 256 KiB 67 GiB, for 132 SMs x 2048 threads; the default's
 * share is part of a context's cost, VCU_BACKEND_CTX_BYTES).  The charge
 * takes the device's own attributes and 1/VCU__STACK_MARGIN more, since
 * the measured figures run up to 2% above the product; a device whose
 * attributes cannot be read is taken as VCU__STACK_THREADS_UNKNOWN
 * threads, more than any GPU of 2026 holds.
 */
#define VCU__STACK_MARGIN 16u
#define VCU__STACK_THREADS_UNKNOWN ((uint64_t)256 * 2048)

/*
 * Context flags a guest may set (CU_CTX_SET_FLAGS, kept for cuCtxCreate):
 * scheduling, and behaviour of its own context.  Not the core dump
 * flags: CU_CTX_COREDUMP_ENABLE makes one faulting kernel write a GPU
 * core dump into this process's working directory and abort() it,
 * CU_CTX_USER_COREDUMP_ENABLE makes the driver create a named pipe.
 *
 * CU_CTX_LMEM_RESIZE_TO_MAX stays allowed.  All it asks is that the
 * driver keep the local memory a launch grew for a kernel needing more
 * than the stack limit, and vcu__stack_cover() leaves no launch anything
 * to grow: a function is handed out only once the context's stack limit,
 * charged, covers its local memory.  Nor does the flag change what the
 * driver does: CUDA 13's cuda.h has its behaviour "now the default" that
 * "cannot be disabled" (a grown stack stays, as the stack limit; measured
 * the same with and without it, tests/gpu/probe-lmem.py).  So
 * refusing it would break programs that set cudaDeviceLmemResizeToMax
 * and masking it would keep nothing off the GPU.
 */
#define VCU__CTX_GUEST_FLAGS                                                    \
    ((unsigned int)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | \
                    CU_CTX_SYNC_MEMOPS))

/*
 * Host memory one session may hold, so that a guest cannot grow this
 * process without bound: staging buffers of 2D copies (held by copies
 * parked behind GPU work), module images being loaded, the handle table,
 * functions' parameter layouts, the event lists of parked waits, orphaned
 * streams, host callback records and module sets.  Past it a request
 * fails with CUDA_ERROR_OUT_OF_MEMORY (cudaErrorMemoryAllocation in the
 * guest).  What the driver allocates for the session is not counted.
 * docs/design.md, "Isolation".
 */
#define VCU__SESS_HOST_BUDGET ((size_t)256 << 20)

/*
 * What of the session's budget it holds is charged to the VM's host
 * quota (the account's host column) in steps of VCU__HOST_GRAIN, so that
 * a small record costs no admission; what it no longer holds goes back
 * once two steps are free.  Past the VM's quota a take fails as past the
 * budget.
 */
#define VCU__HOST_GRAIN ((uint64_t)1 << 20)

/* n rounded up to the account's grain; above VCU__ACCT_MAX for a size no
 * GPU has (or that overflows). */
static inline uint64_t vcu__grain(uint64_t n)
{
    if (n > VCU__ACCT_MAX)
        return VCU__ACCT_MAX + 1;
    return (n + VCU__ACCT_GRAIN - 1) & ~(uint64_t)(VCU__ACCT_GRAIN - 1);
}

/* Charges n bytes of device d to the session: 0, or -1 past the VM's
 * quota (nothing charged).  Without an account, always 0. */
static inline int vcu__charge(vcu__cuda_sess_t *cs, uint32_t d, uint64_t n)
{
    if (cs->cu->acct == NULL || n == 0)
        return 0;
    if (n > VCU__ACCT_MAX)
        return -1;
    return vcu__acct_charge(cs->cu->acct, cs->aslot, d, n);
}

static inline void vcu__uncharge(vcu__cuda_sess_t *cs, uint32_t d, uint64_t n)
{
    if (cs->cu->acct != NULL)
        vcu__acct_uncharge(cs->cu->acct, cs->aslot, d, n);
}

/* Host bytes charged to the session's slot: 0, or -1 past the VM's host
 * quota (nothing charged).  Without an account, always 0. */
static inline int vcu__host_charge(vcu__cuda_sess_t *cs, uint64_t n)
{
    if (cs->cu->acct == NULL || n == 0)
        return 0;
    return vcu__acct_host_charge(cs->cu->acct, cs->aslot, n);
}

static inline void vcu__host_uncharge(vcu__cuda_sess_t *cs, uint64_t n)
{
    if (cs->cu->acct != NULL)
        vcu__acct_host_uncharge(cs->cu->acct, cs->aslot, n);
}

/* Takes n bytes of the session's budget: 0, or -1 (nothing taken) past
 * the budget or the VM's host quota (cuda.c). */
int vcu__mem_take(vcu__cuda_sess_t *cs, size_t n);
/* Gives n bytes back to the session's budget (cuda.c). */
void vcu__mem_give(vcu__cuda_sess_t *cs, size_t n);

/*
 * Makes ctx current on the worker thread (the only thread that calls
 * this); a request costs no driver call when it is already.
 */
static inline CUresult vcu__cur(vcu__cuda_sess_t *cs, CUcontext ctx)
{
    CUresult r;

    if (ctx == cs->cur && ctx != NULL)
        return CUDA_SUCCESS;
    r = cs->cu->fn.cuCtxSetCurrent(ctx);
    cs->cur = r == CUDA_SUCCESS ? ctx : NULL;
    return r;
}

/* ---- opcode execution --------------------------------------------------- */

typedef union vcu__resp_u {
    struct vcu_cu_resp r;
    struct vcu_cu_u64_resp u64;
    struct vcu_cu_module_keep_resp keep;
    struct vcu_cu_driver_info_resp drv;
    struct vcu_cu_device_info_resp dev;
    struct vcu_cu_mem_info_resp mem;
    struct vcu_cu_slice_info_resp slice;
    struct vcu_cu_nvlink_info_resp nvlink;
    struct vcu_cu_mem_range_resp range;
    struct vcu_cu_global_info_resp ginfo;
    struct vcu_cu_function_resp fn;
    struct vcu_cu_func_attrs_resp fattr;
    struct vcu_cu_occupancy_resp occ;
    struct vcu_cu_capture_info_resp cap;
    struct vcu_cu_capture_graph_resp capg;
    struct vcu_cu_capture_deps_resp capd;
    struct vcu_cu_output_resp out;
    struct vcu_cu_tmap_resp tmap;
    struct vcu_cu_link_resp link;
    struct vcu_cu_graph_update_resp gupd;
    struct vcu_cu_graph_list_resp glist;
    struct vcu_cu_vmm_resp vmm;
    struct vcu_cu_graph_mem_node_resp gmem;
    struct vcu_cu_graph_cond_resp cond;
    struct vcu_cu_texobj_resp texobj;
    struct vcu_cu_graph_inst_resp ginst;
    struct vcu_cu_ipc_handle_resp ipc;
    struct vcu_cu_ipc_import_resp ipcimp;
} vcu__resp_t;

/* One request being executed. */
typedef struct vcu__op_s {
    vcu__cuda_sess_t *cs;
    vcu__cuda_t *cu;
    const struct vcu_req_hdr *h;
    const unsigned char *p;         /* payload */
    size_t plen;
    const vcu_segment_t *segs;
    unsigned int nsegs;
    unsigned char *out;             /* trailing reply data goes here directly */
    size_t cap;
    size_t len;                     /* reply bytes; fixed part comes from rb */
    vcu__cuda_wait_t *wait;         /* the request waits for GPU work it issued */
    bool captured;                  /* named a stream that captures (vcu__stream_seen) */
    vcu__resp_t rb;
    CUresult res;
    /* Kernel parameters of a launch that fit (not cleared per request). */
    _Alignas(16) unsigned char pscratch[2048];
} vcu__op_t;

/* A device's UUID as NVIDIA tools print it ("GPU-" and 32 hex digits). */
static inline void vcu__uuid_str(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;

    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
             b[12], b[13], b[14], b[15]);
}

/* Frees a one-shot record, giving its bytes back to its session. */
static inline void vcu__cb_free(vcu__cb_t *cb)
{
    vcu__cuda_sess_t *cs = (vcu__cuda_sess_t *)((char *)cb->gate - offsetof(vcu__cuda_sess_t, gate));

    free(cb);
    vcu__mem_give(cs, sizeof(*cb));
}

/* Counted in the budget until freed: a one-shot record by its
 * trampoline or a failed launch (vcu__cb_free), a persistent one with
 * the session. */
static inline vcu__cb_t *vcu__cb_new(vcu__cuda_sess_t *cs, uint64_t cookie, int oneshot)
{
    vcu__cb_t *cb;

    if (vcu__mem_take(cs, sizeof(*cb)) != 0)
        return NULL;
    cb = calloc(1, sizeof(*cb));
    if (cb == NULL) {
        vcu__mem_give(cs, sizeof(*cb));
        return NULL;
    }
    cb->gate = &cs->gate;
    cb->cookie = cookie;
    cb->oneshot = oneshot;
    if (!oneshot) {
        /* Only the worker adds to the list and only sess_free reads it;
         * the lock keeps the rule simple. */
        pthread_mutex_lock(&cs->gate.mu);
        cb->next = cs->gate.persistent;
        cs->gate.persistent = cb;
        pthread_mutex_unlock(&cs->gate.mu);
    }
    return cb;
}

/* What one part of the executor calls in another, by the file that has it. */

/* cuda.c */
int vcu__cu_err(CUresult r);
void vcu__ctx_uncharge(vcu__cuda_t *cu, int slot, uint32_t d);
void vcu__wctx_put(vcu__cuda_t *cu, uint32_t d);
CUresult vcu__ctx_open(vcu__cuda_sess_t *cs, uint32_t d);
vcu__hent_t *vcu__new(vcu__op_t *o, uint8_t type, uint64_t *h);
int vcu__park_stream(vcu__op_t *o, CUstream st);

/* cuda_ctx.c */
uint32_t vcu__op_CU_DRIVER_INFO(vcu__op_t *o);
uint32_t vcu__op_CU_DEVICE_INFO(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_GET_INFO(vcu__op_t *o);
uint32_t vcu__op_CU_SLICE_INFO(vcu__op_t *o);
uint32_t vcu__op_CU_NVLINK_INFO(vcu__op_t *o);
uint32_t vcu__op_CU_CTX_DESTROY(vcu__op_t *o);
/* The guest's module, stream or event handle h goes, as the op that
 * destroys it does (the request's context current): the driver's result,
 * or CUDA_ERROR_INVALID_HANDLE. */
CUresult vcu__module_drop(vcu__op_t *o, uint64_t h);
CUresult vcu__stream_drop(vcu__op_t *o, uint64_t h);
CUresult vcu__event_drop(vcu__op_t *o, uint64_t h);
uint32_t vcu__op_CU_CTX_SYNCHRONIZE(vcu__op_t *o);
uint32_t vcu__op_CU_CTX_RESET(vcu__op_t *o);
uint32_t vcu__op_CU_CTX_PEER_ACCESS(vcu__op_t *o);
uint32_t vcu__op_CU_TAKE_OUTPUT(vcu__op_t *o);
uint32_t vcu__op_CU_CTX_SET_FLAGS(vcu__op_t *o);
uint32_t vcu__op_CU_CTX_SET_LIMIT(vcu__op_t *o);
CUresult vcu__stack_cover(vcu__cuda_sess_t *cs, uint32_t d, CUfunction f);
uint32_t vcu__op_CU_GET_DEFERRED_ERROR(vcu__op_t *o);

/* cuda_mem.c */
uint32_t vcu__op_CU_MEM_ALLOC(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_FREE(vcu__op_t *o);
uint32_t vcu__op_CU_MEMCPY_HTOD(vcu__op_t *o);
uint32_t vcu__op_CU_MEMCPY_DTOH(vcu__op_t *o);
uint32_t vcu__op_CU_MEMCPY_DTOD(vcu__op_t *o);
uint32_t vcu__op_CU_MEMCPY_PEER(vcu__op_t *o);
uint32_t vcu__op_CU_MEMSET(vcu__op_t *o);
uint32_t vcu__op_CU_MEMCPY_2D(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_FREE_ASYNC(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_ALLOC_ASYNC(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_GET_DEFAULT(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_SET_ATTR(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_SET_ACCESS(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_GET_ATTR(vcu__op_t *o);
uint32_t vcu__op_CU_HOST_DEVICE_POINTER(vcu__op_t *o);
uint32_t vcu__op_CU_HOST_DEVICE_POINTER_AT(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_EXPORT_SHAREABLE(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_IMPORT_SHAREABLE(vcu__op_t *o);
/* The slot of a pool of the session's, or VCU__POOL_SLOTS. */
uint32_t vcu__pool_slot(const vcu__cuda_sess_t *cs, CUmemoryPool pool);
/* Tracks allocation p of device d (flags VCU__ALLOC_*, charged ch): 0, or
 * -1 with p freed and CUDA_ERROR_OUT_OF_MEMORY. */
int vcu__track_dev(vcu__op_t *o, CUdeviceptr p, uint32_t d, uint32_t flags, uint64_t ch);
/* Allocation p is gone: out of allocs and ctx_allocs, and of the
 * migration's pass before the pause. */
void vcu__alloc_forget(vcu__cuda_sess_t *cs, uint64_t p);

/* cuda_mem.c: a 2D or 3D copy's host side (see its comment) */
int vcu__2d_host(vcu__op_t *o, const vcu_segment_t *s, uint64_t span, void **host,
                 void **bounce);

/* cuda_array.c */
uint32_t vcu__op_CU_ARRAY_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_ARRAY_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_MEMCPY_3D(vcu__op_t *o);
uint32_t vcu__op_CU_MEMCPY_3D_PEER(vcu__op_t *o);
int vcu__owned_range(vcu__op_t *o, uint64_t p, uint64_t n);
uint32_t vcu__op_CU_TEXOBJ_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_TEXOBJ_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_TEXOBJ_GET(vcu__op_t *o);
uint32_t vcu__op_CU_MIPMAP_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_MIPMAP_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_MIPMAP_LEVEL(vcu__op_t *o);
/* Destroys the driver's object of an array, mipmapped array, texture or
 * surface entry (its context current; a mipmapped array's level goes
 * with it); vcu__del does the rest. */
void vcu__array_obj_destroy(vcu__cuda_sess_t *cs, vcu__hent_t *e);

/* cuda_vmm.c */
uint32_t vcu__op_CU_MEM_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_RELEASE(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_ADDRESS_RESERVE(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_ADDRESS_FREE(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_MAP(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_UNMAP(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_SET_ACCESS(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_GET_ACCESS(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_GRANULARITY(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_GET_PROPS(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_RETAIN(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_EXPORT_SHAREABLE(vcu__op_t *o);
uint32_t vcu__op_CU_MEM_IMPORT_SHAREABLE(vcu__op_t *o);
void vcu__vmm_free(vcu__cuda_sess_t *cs);

/* cuda_ipc.c */
uint32_t vcu__op_CU_IPC_GET_MEM_HANDLE(vcu__op_t *o);
uint32_t vcu__op_CU_IPC_OPEN_MEM_HANDLE(vcu__op_t *o);
uint32_t vcu__op_CU_IPC_CLOSE_MEM_HANDLE(vcu__op_t *o);
uint32_t vcu__op_CU_IPC_GET_EVENT_HANDLE(vcu__op_t *o);
uint32_t vcu__op_CU_IPC_OPEN_EVENT_HANDLE(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_EXPORT_POINTER(vcu__op_t *o);
uint32_t vcu__op_CU_MEMPOOL_IMPORT_POINTER(vcu__op_t *o);
/* Whether a shareable handle (kind VCU_CU_IPC_VMM or _POOL) is one as
 * the host writes them: the daemon's keep judges its name. */
bool vcu__share_handle_ok(const struct vcu_cu_ipc_open_req *rq, uint32_t kind);
/* The object key (memory's base, an event's handle) of kind is gone. */
void vcu__ipc_gone(vcu__cuda_sess_t *cs, uint32_t kind, uint64_t key);
/* Closes what the session opened and removes its records. */
void vcu__ipc_sess_end(vcu__cuda_sess_t *cs);

/* keep.c: a shareable handle's descriptor handed to the daemon's keep
 * (its token into token; fd stays the caller's), or one of the VM's
 * taken from it (*fd the caller's to close).  VCU_S_OK, VCU_S_ENOTSUP
 * (no keep), or the daemon's refusal. */
int vcu__keep_put(vcu__cuda_t *cu, uint32_t kind, uint32_t dev, uint64_t size, int fd,
                  uint8_t token[16]);
int vcu__keep_get(vcu__cuda_t *cu, uint32_t kind, const uint8_t token[16], uint32_t *dev,
                  uint64_t *size, int *fd);

/* cuda_module.c */
CUresult vcu__mod_put(vcu__cuda_sess_t *cs, vcu__mod_t *m);
int vcu__mods_add(vcu__cuda_sess_t *cs, vcu__modset_t **set, vcu__mod_t *m);
int vcu__mods_add_all(vcu__cuda_sess_t *cs, vcu__modset_t **set, const vcu__modset_t *src);
void vcu__mods_free(vcu__cuda_sess_t *cs, vcu__modset_t *s);
int vcu__mods_on(const vcu__modset_t *s, uint32_t d);
void vcu__del(vcu__cuda_sess_t *cs, uint64_t h);
uint32_t vcu__op_CU_MODULE_LOAD(vcu__op_t *o);
uint32_t vcu__op_CU_MODULE_LOAD_KEEP(vcu__op_t *o);
uint32_t vcu__op_CU_MODULE_LOAD_HASH(vcu__op_t *o);
uint32_t vcu__op_CU_MODULE_UNLOAD(vcu__op_t *o);
uint32_t vcu__op_CU_MODULE_GET_FUNCTION(vcu__op_t *o);
uint32_t vcu__op_CU_MODULE_GET_GLOBAL(vcu__op_t *o);
uint32_t vcu__op_CU_MODULE_GLOBAL_INFO(vcu__op_t *o);
uint32_t vcu__op_CU_FUNC_GET_ATTRS(vcu__op_t *o);
uint32_t vcu__op_CU_OCCUPANCY_BLOCK_SIZE(vcu__op_t *o);
uint32_t vcu__op_CU_LAUNCH(vcu__op_t *o);
uint32_t vcu__op_CU_LAUNCH_EX(vcu__op_t *o);
uint32_t vcu__op_CU_OCCUPANCY_CLUSTERS(vcu__op_t *o);
uint32_t vcu__op_CU_OCCUPANCY_CLUSTER_SIZE(vcu__op_t *o);
uint32_t vcu__op_CU_TENSOR_MAP(vcu__op_t *o);
uint32_t vcu__op_CU_LINK(vcu__op_t *o);

/* cuda_wait.c */
CUresult vcu__ev_get(vcu__cuda_sess_t *cs, uint32_t d, CUevent *out);
void vcu__ev_put(vcu__cuda_sess_t *cs, uint32_t d, CUevent ev);
vcu__cuda_wait_t *vcu__wait_new(vcu__cuda_sess_t *cs);
CUresult vcu__wait_record(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, uint32_t d, CUstream st);
void vcu__wait_free(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w);
vcu__cuda_wait_t *vcu__gev_waiter(vcu__cuda_sess_t *cs, CUevent ev);
void vcu__wait_block(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w);
int vcu__capturing(vcu__cuda_t *cu, CUstream st);
void vcu__orphans_prune(vcu__cuda_sess_t *cs);
int vcu__park_ctx(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, uint32_t d);
void vcu__pool_settle(vcu__cuda_sess_t *cs, uint32_t d);
void vcu__pool_settle_slot(vcu__cuda_sess_t *cs, uint32_t slot);
void vcu__pool_block_freed(vcu__cuda_sess_t *cs, uint64_t v);
void vcu__pool_trimmed(vcu__op_t *o);
void vcu__ctx_destroy(vcu__cuda_sess_t *cs, uint32_t d);
CUresult vcu__sync_all(vcu__cuda_sess_t *cs, uint32_t *bad);

/* cuda_migrate.c: the session's history, kept from each call's request
 * and reply (vcu__cuda_exec), and freed with the session. */
typedef struct vcu__mig_s vcu__mig_t;
void vcu__mig_note(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h, const void *payload,
                   const void *out, size_t out_len, bool captured);
vcu__mig_t *vcu__mig_new(void);
void vcu__mig_free(vcu__cuda_sess_t *cs);
void vcu__mig_freed(vcu__cuda_sess_t *cs, uint64_t addr);
void CUDA_CB vcu__cb_trampoline(void *arg);
uint32_t vcu__cb_wait(vcu__cuda_sess_t *cs, void *out, size_t out_cap, size_t *out_len,
                      vcu_request_t *req);
uint32_t vcu__cb_done(vcu__cuda_sess_t *cs, const void *payload, void *out, size_t *out_len);
void vcu__cb_post(vcu__gate_t *g, uint64_t cookie);

/* cuda_stream.c */
uint32_t vcu__op_CU_STREAM_CREATE(vcu__op_t *o);
/* Is any stream of the session capturing?  (Switches contexts.) */
bool vcu__any_capture(vcu__cuda_sess_t *cs);
void vcu__graph_drop(vcu__cuda_sess_t *cs, uint64_t h);
/* The handle of node n of the graph with handle gh: the one it has, or a
 * new one (0, o->res set, when none can be made). */
uint64_t vcu__node_handle(vcu__op_t *o, CUgraphNode n, uint64_t gh);
uint32_t vcu__op_CU_STREAM_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_SYNCHRONIZE(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_MEMOPS(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_WAIT_EVENT(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_BEGIN_CAPTURE(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_CAPTURE_TO_GRAPH(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_END_CAPTURE(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_CAPTURE_INFO(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_CAPTURE_GRAPH(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_CAPTURE_DEPS(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_UPDATE_DEPS(vcu__op_t *o);
uint32_t vcu__op_CU_THREAD_CAPTURE_MODE(vcu__op_t *o);
uint32_t vcu__op_CU_STREAM_HOST_FUNC(vcu__op_t *o);
uint32_t vcu__op_CU_EVENT_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_EVENT_DESTROY(vcu__op_t *o);
void vcu__event_rerecord(vcu__op_t *o, vcu__hent_t *e);
uint32_t vcu__op_CU_EVENT_RECORD(vcu__op_t *o);
uint32_t vcu__op_CU_EVENT_SYNCHRONIZE(vcu__op_t *o);

/* cuda_graph.c */
uint32_t vcu__graph_put(vcu__op_t *o, CUgraph g, const vcu__modset_t *mods);
uint32_t vcu__op_CU_GRAPH_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_ADD_NODE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_CLONE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_INSTANTIATE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_LAUNCH(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_EXEC_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_NODE_COUNT(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_NODE_SET(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_EXEC_UPDATE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_LIST(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_EDGES(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_EDGES_DATA(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_NODE_DESTROY(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_ADD_MEM_NODE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_MEM_NODE_PARAMS(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_MEM_ATTR(vcu__op_t *o);
void vcu__gmem_settle(vcu__cuda_sess_t *cs, uint32_t d);
int vcu__galloc_has(const vcu__cuda_sess_t *cs, uint64_t dptr);
int vcu__deps_at(vcu__op_t *o, size_t off, uint32_t ndeps, CUgraphNode **deps);
int vcu__galloc_captured(vcu__op_t *o, uint64_t dptr);
/* cuda_graph.c, for cuda_graph_cond.c (each described where defined). */
uint64_t vcu__gmem_bytes(vcu__cuda_t *cu, CUgraph g, int depth);
int vcu__gmem_precharge(vcu__cuda_sess_t *cs, uint32_t d, vcu__hent_t *x);
uint32_t vcu__node_check(const struct vcu_cu_graph_node_req *rq, const unsigned char *after,
                         size_t room, CUDA_MEMCPY3D *copy, const unsigned char **tail);
void vcu__node_memset(const struct vcu_cu_graph_node_req *rq, CUDA_MEMSET_NODE_PARAMS *ms);
/* A HOST node's parameters: the guest's cookie gets a record of its own,
 * kept with the session.  0, or -1 with o->res set. */
int vcu__node_host(vcu__op_t *o, uint64_t cookie, CUDA_HOST_NODE_PARAMS *hp);
uint64_t vcu__node_name(vcu__op_t *o, uint64_t gh, CUgraphNode n);
int vcu__mods_of_child(vcu__op_t *o, vcu__modset_t **set, vcu__hent_t *ce);
uint32_t vcu__op_CU_GRAPH_CHILD_GRAPH(vcu__op_t *o);
/* User objects (cuda_graph.c): the record the driver's destructor gets,
 * and the references the guest gave a graph (vcu__hent_t graph.urefs). */
typedef struct vcu__uobj_s vcu__uobj_t;
typedef struct vcu__uref_s {
    uint64_t obj;                   /* the object's handle */
    uint32_t count;
    uint32_t reserved;
} vcu__uref_t;
uint32_t vcu__op_CU_USER_OBJECT_CREATE(vcu__op_t *o);
uint32_t vcu__op_CU_USER_OBJECT_REF(vcu__op_t *o);
void vcu__uobj_put(vcu__cuda_sess_t *cs, vcu__uobj_t *u);
void vcu__uobj_sess_end(vcu__cuda_sess_t *cs);
/* cuda_graph_cond.c */
uint32_t vcu__op_CU_GRAPH_COND_HANDLE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_ADD_COND_NODE(vcu__op_t *o);
uint32_t vcu__op_CU_GRAPH_INSTANTIATE_PARAMS(vcu__op_t *o);
/* cuda_batch.c */
void vcu__grun_drop(vcu__cuda_sess_t *cs, uint32_t d);
uint32_t vcu__batch(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                    const unsigned char *p, unsigned int nsegs, void *out,
                    size_t *out_len);

/* Makes device d's context current, creating it first if needed. */
static inline CUresult vcu__ctx(vcu__cuda_sess_t *cs, uint32_t d)
{
    CUresult r;

    if (d >= cs->cu->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (cs->ctx[d] == NULL) {
        r = vcu__ctx_open(cs, d);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return vcu__cur(cs, cs->ctx[d]);
}

/*
 * Device d's context of the session, made if need be, into *out: the
 * other side of a peer call.  d comes from the guest: a device the VM was
 * not given is CUDA_ERROR_INVALID_CONTEXT.  Leaves d's context current
 * (vcu__enter the request's device after).  0, or -1 with o->res set.
 */
static inline int vcu__peer_ctx(vcu__op_t *o, uint32_t d, CUcontext *out)
{
    if (d >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_CONTEXT;
        return -1;
    }
    o->res = vcu__ctx(o->cs, d);
    if (o->res != CUDA_SUCCESS)
        return -1;
    *out = o->cs->ctx[d];
    return 0;
}

/* Sizes of each opcode's request and reply structs, from the one map. */
static inline size_t vcu__req_size(uint32_t op)
{
    switch (op) {
#define VCU__REQ_SZ(name, num, rq, rp) case VCU_OP_##name: return sizeof(struct rq);
        VCU_OP_MAP(VCU__REQ_SZ)
#undef VCU__REQ_SZ
    }
    return 0;
}

/* The capture interaction mode this thread was given (vcu__enter). */
extern __thread CUstreamCaptureMode vcu__thread_mode;

/* Makes the request's device current; on failure the result says why. */
static inline int vcu__enter(vcu__op_t *o)
{
    struct vcu_cu_hdr hd;

    memcpy(&hd, o->p, sizeof(hd));
    o->res = vcu__ctx(o->cs, hd.device);
    if (o->res == CUDA_SUCCESS && vcu__thread_mode != o->cs->cap_mode) {
        CUstreamCaptureMode m = o->cs->cap_mode;

        o->res = VCU__CU(o->cu, cuThreadExchangeStreamCaptureMode, &m);
        if (o->res == CUDA_SUCCESS)
            vcu__thread_mode = o->cs->cap_mode;
    }
    return o->res == CUDA_SUCCESS ? 0 : -1;
}

#define VCU__ENTER(o)              \
    do {                           \
        if (vcu__enter(o) != 0)    \
            return VCU_S_OK;       \
    } while (0)

static inline uint32_t vcu__dev_of(const vcu__op_t *o)
{
    struct vcu_cu_hdr hd;

    memcpy(&hd, o->p, sizeof(hd));
    return hd.device;
}

/* The guest context the request names (vcu_cu_hdr.ctx): 0, the device's
 * primary one, or a number of the guest's choosing; 0 for a request that
 * names none (VCU_CU_OP_NAMES_CTX), whatever it says. */
static inline uint32_t vcu__ctx_of(const vcu__op_t *o)
{
    struct vcu_cu_hdr hd;

    if (!VCU_CU_OP_NAMES_CTX(o->h->opcode))
        return 0;
    memcpy(&hd, o->p, sizeof(hd));
    return hd.ctx;
}

/* Typed lookup; on failure the result is CUDA_ERROR_INVALID_HANDLE. */
static inline vcu__hent_t *vcu__get(vcu__op_t *o, uint64_t h, uint8_t type)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, type);

    if (e == NULL)
        o->res = CUDA_ERROR_INVALID_HANDLE;
    return e;
}

#define VCU__GET(o, var, h, type)                  \
    vcu__hent_t *var = vcu__get((o), (h), (type)); \
    if (var == NULL)                               \
    return VCU_S_OK

/* A request names stream st: while a capture may be in progress, the
 * migration history keeps what it does to a capturing stream (the
 * captured graph is made of it). */
static inline void vcu__stream_seen(vcu__op_t *o, CUstream st)
{
    if (o->cs->capture && !o->captured && vcu__capturing(o->cu, st))
        o->captured = true;
}

static inline int vcu__stream(vcu__op_t *o, uint64_t h, CUstream *out)
{
    vcu__hent_t *e;

    if (h == VCU_CU_STREAM_LEGACY) {
        *out = CU_STREAM_LEGACY;
        return 0;
    }
    if (h == VCU_CU_STREAM_PER_THREAD) {
        *out = CU_STREAM_PER_THREAD;
        vcu__stream_seen(o, *out);
        return 0;
    }
    e = vcu__get(o, h, VCU__H_STREAM);
    if (e == NULL)
        return -1;
    *out = e->u.st;
    vcu__stream_seen(o, *out);
    return 0;
}

#define VCU__STREAM(o, var, h)              \
    CUstream var;                           \
    if (vcu__stream((o), (h), &var) != 0)   \
    return VCU_S_OK

/* The request's one segment, which must have the given direction. */
static inline const vcu_segment_t *vcu__seg(const vcu__op_t *o, uint32_t dir)
{
    if (o->nsegs != 1 || VCU_SEG_DIR(o->segs[0].flags) != dir)
        return NULL;
    return &o->segs[0];
}

static inline void vcu__gather(const vcu_segment_t *s, void *dst, size_t len)
{
    size_t off = 0;
    unsigned int i;

    for (i = 0; i < s->iovcnt && off < len; i++) {
        size_t n = s->iov[i].iov_len < len - off ? s->iov[i].iov_len : len - off;

        memcpy((char *)dst + off, s->iov[i].iov_base, n);
        off += n;
    }
}

static inline void vcu__scatter(const vcu_segment_t *s, const void *src, size_t len)
{
    size_t off = 0;
    unsigned int i;

    for (i = 0; i < s->iovcnt && off < len; i++) {
        size_t n = s->iov[i].iov_len < len - off ? s->iov[i].iov_len : len - off;

        memcpy(s->iov[i].iov_base, (const char *)src + off, n);
        off += n;
    }
}

/* A launch's or kernel node's parameter byte count: within the limit and
 * within the room left in its request. */
static inline bool vcu__param_bytes_ok(uint32_t nbytes, size_t room)
{
    return nbytes <= VCU_CU_MAX_PARAM_BYTES && nbytes <= room;
}

/*
 * Kernel parameters: param_bytes bytes at src (already checked to lie in
 * the payload) copied to a 16-byte-aligned buffer, and the pointer array
 * CUDA wants built from the function's remembered layout.  Both in one
 * allocation, freed by the caller (vcu__params_free).  The size must be
 * what the function takes (cuda_module.c).
 */
void **vcu__params(vcu__op_t *o, const vcu__hent_t *fe, const void *src, uint32_t nbytes);
/* Frees what vcu__params() allocated for kp (cuda_module.c). */
void vcu__params_free(vcu__op_t *o, const vcu__hent_t *fe, void **kp);
/* A kernel node's parameters for function fe with these dimensions and
 * the parameter pointers kp (vcu__params(); cuda_module.c). */
void vcu__kernel_node(CUDA_KERNEL_NODE_PARAMS *kn, const vcu__hent_t *fe, const vcu_le32 grid[3],
                      const vcu_le32 block[3], uint32_t smem, void **kp);

/*
 * The deferred error and a reply: an async request has no reader, so its
 * failure res (the first one kept) waits for the next reply, and its own
 * reply carries none; any other reply takes what waits.
 */
static inline uint32_t vcu__deferred(vcu__cuda_sess_t *cs, int async, uint32_t res)
{
    uint32_t d = cs->deferred;

    if (async) {
        if (res != 0 && d == 0)
            cs->deferred = res;
        return 0;
    }
    cs->deferred = 0;
    return d;
}

/* The reply union is close to 1 KiB: the worker's scratch for a request
 * is kept off its stack, in the session, made once (only the worker gets
 * here); NULL out of memory. */
static inline vcu__op_t *vcu__op_scratch(vcu__cuda_sess_t *cs)
{
    if (cs->op == NULL)
        cs->op = malloc(sizeof(*cs->op));
    return cs->op;
}

#endif /* VCU_CUDA_INT_H */
