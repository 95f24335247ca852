/*
 * CUDA executor: runs the CUDA opcodes of include/vcu_proto.h on the host
 * GPU through the CUDA Driver API, loaded at run time with dlopen().
 *
 * One CUDA context per session and virtual device, created lazily on the
 * session's worker thread (never the primary context: sessions must not
 * share state).  Guests name host objects only through the typed,
 * generation-checked handles of cuda_tab.c.
 *
 * Host callbacks (CU_STREAM_HOST_FUNC, graph host nodes) run in the guest:
 * CUDA calls vcu__cb_trampoline() on a thread of its own, which hands the
 * guest's cookie to a CU_CALLBACK_WAIT request and blocks until the
 * matching CU_CALLBACK_DONE arrives.  WAIT and DONE run inline on the
 * submitting thread, so DONE is never stuck behind the worker's
 * cuStreamSynchronize() that waits for that very callback.
 *
 * Copies from and to VCU_SEG_F_STABLE segments on a stream return without
 * waiting for the stream: the guest keeps those pages until SESSION_FENCE,
 * which waits for all GPU work of the session (vcu__cuda_sess_fence).
 * Other segments are mapped only until the reply, so their async copies
 * still finish before it.
 *
 * The worker never blocks on the GPU.  Whatever must wait (synchronize
 * calls, synchronous copies, async copies from segments that are not
 * stable, fences) is issued, asynchronously where CUDA allows, and an
 * event from the session's pool (CU_EVENT_DISABLE_TIMING, reused) is
 * recorded right behind it on the same stream; the request becomes a
 * wait (vcu__cuda_wait_t) that the core polls.  A context-wide wait
 * records one event on every stream of the context: non-blocking
 * streams do not synchronize with the legacy stream.  Streams the guest
 * destroyed with work still queued stay alive, unnamed (cs->orphans),
 * until that work is done, so that a fence still sees it.  An event the
 * guest synchronizes on is polled itself; recording or destroying it
 * while such a wait is parked hands the old CUevent to the wait and gives
 * the guest's handle a new one (CUDA waits for the record current when
 * the synchronize was called).
 *
 * The exception: a session that loaded an image using device printf,
 * where the backend captures it (capture.c).  Its synchronizing calls
 * block until their work is done, since only a blocking call makes sure
 * the driver has written the output; what it wrote meanwhile is the
 * session's, for CU_TAKE_OUTPUT.
 *
 * Locks, in order:
 *   vcu__cuda_t.mu    the RAM registration list (vcu__cuda_add_ram,
 *                     vcu__cuda_remove_ram, fini) and a worker's context
 *                     references.
 *   vcu__gate_t.mu    a session's callback gate: queued cookies, the parked
 *                     WAIT, the waiting trampolines, "ending".  Taken by
 *                     the trampolines (CUDA threads), the inline opcodes
 *                     (submitting thread) and vcu__cuda_sess_free (worker).
 *                     Never held across a CUDA call or vcu__complete().
 *   vcu__cuda_sess_t.hostmu  the session's host memory count and its
 *                     charge: the worker and the trampolines (a one-shot
 *                     record given back).
 *   the account's admission lock (vcu_account.h), last: taken under
 *                     vcu__cuda_t.mu (a worker's context charged) and
 *                     under hostmu (host memory charged), never the other
 *                     way round.
 * Everything else in a session (contexts, tables, deferred error, event
 * pools, waits, orphans, module counts) belongs to its worker thread
 * alone.
 *
 * What a hostile guest must not reach (docs/design.md, "Isolation"):
 * core dump settings (context flags are allow-listed, dumps are off
 * process-wide), other sessions' memory through the device's shared
 * default pool (each session has pools of its own), modules freed under
 * graphs that still run their code (counted, see vcu__mod_t), host
 * memory without bound (VCU__SESS_HOST_BUDGET, and the VM's host quota),
 * GPU memory past the VM's quota (the account of vcu_account.h: every
 * allocation, every context and every context limit that reserves GPU
 * memory is charged to it first, vcu__charge()).
 */
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
/* Generated from guest-lib/cuda_calls.list (host-backend/Makefile). */
#include "vcu_calls.h"
#include "cuda_calls_fns.h"

#define VCU__STR2(x) #x
#define VCU__STR(x) VCU__STR2(x)

/*
 * Every driver function the executor uses, with whether the backend can
 * work without it (0: optional, calls give CUDA_ERROR_NOT_SUPPORTED).  The
 * names go through cuda.h's macros, so cuMemAlloc resolves as
 * "cuMemAlloc_v2" and has that function's type.
 */
#define VCU__CU_FUNCS(XX)                                                    \
    XX(cuInit, 1)                                                            \
    XX(cuGetErrorName, 0)                                                    \
    XX(cuDriverGetVersion, 1)                                                \
    XX(cuDeviceGetCount, 1)                                                  \
    XX(cuDeviceGet, 1)                                                       \
    XX(cuDeviceGetUuid, 0)                                                   \
    XX(cuDeviceGetName, 0)                                                   \
    XX(cuDeviceTotalMem, 0)                                                  \
    XX(cuDeviceGetAttribute, 0)                                              \
    XX(cuCtxCreate, 1)                                                       \
    XX(cuCtxGetExecAffinity, 0)                                              \
    XX(cuDeviceGetExecAffinitySupport, 0)                                    \
    XX(cuDevicePrimaryCtxRetain, 0)                                          \
    XX(cuDevicePrimaryCtxRelease, 0)                                         \
    XX(cuDevicePrimaryCtxSetFlags, 0)                                        \
    XX(cuCtxDestroy, 1)                                                      \
    XX(cuCtxSetCurrent, 1)                                                   \
    XX(cuCtxGetCurrent, 0)                                                   \
    XX(cuCtxPushCurrent, 0)                                                  \
    XX(cuCtxPopCurrent, 0)                                                   \
    XX(cuCtxSynchronize, 1)                                                  \
    XX(cuCtxSetFlags, 0)                                                     \
    XX(cuCtxSetLimit, 0)                                                     \
    XX(cuCtxGetLimit, 0)                                                     \
    XX(cuMemGetInfo, 0)                                                      \
    XX(cuMemAlloc, 1)                                                        \
    XX(cuMemFree, 1)                                                         \
    XX(cuMemcpyHtoD, 1)                                                      \
    XX(cuMemcpyDtoH, 1)                                                      \
    XX(cuMemcpyDtoD, 0)                                                      \
    XX(cuMemcpyHtoDAsync, 0)                                                 \
    XX(cuMemcpyDtoHAsync, 0)                                                 \
    XX(cuMemcpyDtoDAsync, 0)                                                 \
    XX(cuMemcpy2D, 0)                                                        \
    XX(cuMemcpy2DAsync, 0)                                                   \
    XX(cuMemsetD8, 0)                                                        \
    XX(cuMemsetD16, 0)                                                       \
    XX(cuMemsetD32, 0)                                                       \
    XX(cuMemsetD8Async, 0)                                                   \
    XX(cuMemsetD16Async, 0)                                                  \
    XX(cuMemsetD32Async, 0)                                                  \
    XX(cuMemsetD2D8, 0)                                                      \
    XX(cuMemsetD2D16, 0)                                                     \
    XX(cuMemsetD2D32, 0)                                                     \
    XX(cuMemsetD2D8Async, 0)                                                 \
    XX(cuMemsetD2D16Async, 0)                                                \
    XX(cuMemsetD2D32Async, 0)                                                \
    XX(cuMemAllocFromPoolAsync, 0)                                           \
    XX(cuMemFreeAsync, 0)                                                    \
    XX(cuMemPoolSetAttribute, 0)                                             \
    XX(cuMemPoolGetAttribute, 0)                                             \
    XX(cuMemPoolTrimTo, 0)                                                   \
    XX(cuMemPoolCreate, 0)                                                   \
    XX(cuMemPoolDestroy, 0)                                                  \
    XX(cuCoredumpSetAttributeGlobal, 0)                                      \
    XX(cuMemGetAddressRange, 0)                                              \
    XX(cuMemHostRegister, 0)                                                 \
    XX(cuMemHostUnregister, 0)                                               \
    XX(cuMemHostGetDevicePointer, 0)                                         \
    XX(cuModuleLoadData, 1)                                                  \
    XX(cuLinkCreate, 0)                                                      \
    XX(cuLinkAddData, 0)                                                     \
    XX(cuLinkComplete, 0)                                                    \
    XX(cuLinkDestroy, 0)                                                     \
    XX(cuModuleUnload, 1)                                                    \
    XX(cuModuleGetFunction, 1)                                               \
    XX(cuModuleGetGlobal, 0)                                                 \
    XX(cuFuncGetParamInfo, 0)                                                \
    XX(cuFuncGetAttribute, 0)                                                \
    XX(cuOccupancyMaxPotentialBlockSizeWithFlags, 0)                         \
    XX(cuLaunchKernel, 1)                                                    \
    XX(cuLaunchCooperativeKernel, 0)                                         \
    XX(cuLaunchKernelEx, 0)                                                  \
    XX(cuOccupancyMaxActiveClusters, 0)                                      \
    XX(cuOccupancyMaxPotentialClusterSize, 0)                                \
    XX(cuTensorMapEncodeTiled, 0)                                            \
    XX(cuTensorMapEncodeIm2col, 0)                                           \
    XX(cuTensorMapReplaceAddress, 0)                                         \
    XX(cuLaunchHostFunc, 0)                                                  \
    XX(cuStreamCreateWithPriority, 0)                                        \
    XX(cuStreamDestroy, 0)                                                   \
    XX(cuStreamSynchronize, 1)                                               \
    XX(cuStreamQuery, 0)                                                     \
    XX(cuStreamWaitEvent, 0)                                                 \
    XX(cuStreamBeginCapture, 0)                                              \
    XX(cuStreamEndCapture, 0)                                                \
    XX(cuStreamGetCaptureInfo, 0)                                            \
    XX(cuStreamUpdateCaptureDependencies, 0)                                 \
    XX(cuThreadExchangeStreamCaptureMode, 0)                                 \
    XX(cuEventCreate, 0)                                                     \
    XX(cuEventDestroy, 0)                                                    \
    XX(cuEventRecordWithFlags, 0)                                            \
    XX(cuEventSynchronize, 0)                                                \
    XX(cuEventQuery, 0)                                                      \
    XX(cuGraphCreate, 0)                                                     \
    XX(cuGraphDestroy, 0)                                                    \
    XX(cuGraphAddKernelNode, 0)                                              \
    XX(cuGraphAddMemcpyNode, 0)                                              \
    XX(cuGraphAddMemsetNode, 0)                                              \
    XX(cuGraphAddHostNode, 0)                                                \
    XX(cuGraphAddEmptyNode, 0)                                               \
    XX(cuGraphAddChildGraphNode, 0)                                          \
    XX(cuGraphClone, 0)                                                      \
    XX(cuGraphInstantiate, 0)                                                \
    XX(cuGraphExecUpdate, 0)                                                 \
    XX(cuGraphLaunch, 0)                                                     \
    XX(cuGraphExecDestroy, 0)                                                \
    XX(cuGraphGetNodes, 0)

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

struct vcu__cuda_sess_s {
    vcu__cuda_t *cu;
    CUcontext ctx[VCU_CU_MAX_DEVICES];      /* NULL until first used */
    unsigned int ctx_flags[VCU_CU_MAX_DEVICES];
    /* The session's own memory pool per device (never the device's
     * default pool, which every context of the process shares: a block
     * freed there reaches the next allocation, of any session, with its
     * data), and its handle; NULL/0 until first used. */
    CUmemoryPool mpool[VCU_CU_MAX_DEVICES];
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
    /* The session's slot in the VM's memory account (-1: none), and
     * whether it claimed it itself (in-process) rather than being given
     * it (a worker).  Per device: what its pool's live blocks were
     * charged, what the pool is charged in all (at least what it
     * reserves), and the context limits that take GPU memory (malloc
     * heap, printf FIFO, stack: VCU__LIM_*): their values before the
     * guest first set them, the values set since (lim_val, the base
     * until then), and the charge for what was set above the base; the
     * most local memory a thread of a function handed out in the
     * context needs, which the stack limit is kept at (lmem, see
     * vcu__stack_cover).  See "Memory quota" in docs/design.md. */
    int aslot;
    bool aowned;
    uint64_t pool_live[VCU_CU_MAX_DEVICES];
    uint64_t pool_charge[VCU_CU_MAX_DEVICES];
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
};

/* Tracked allocations: vcu__pset value = dev | flags | the bytes charged
 * for it, in VCU__ACCT_GRAIN units, from bit VCU__ALLOC_SHIFT. */
#define VCU__ALLOC_ASYNC 0x10000u
#define VCU__ALLOC_DEV(v) ((uint32_t)(v) & 0xffffu)
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
static uint64_t vcu__grain(uint64_t n)
{
    if (n > VCU__ACCT_MAX)
        return VCU__ACCT_MAX + 1;
    return (n + VCU__ACCT_GRAIN - 1) & ~(uint64_t)(VCU__ACCT_GRAIN - 1);
}

/* Charges n bytes of device d to the session: 0, or -1 past the VM's
 * quota (nothing charged).  Without an account, always 0. */
static int vcu__charge(vcu__cuda_sess_t *cs, uint32_t d, uint64_t n)
{
    if (cs->cu->acct == NULL || n == 0)
        return 0;
    if (n > VCU__ACCT_MAX)
        return -1;
    return vcu__acct_charge(cs->cu->acct, cs->aslot, d, n);
}

static void vcu__uncharge(vcu__cuda_sess_t *cs, uint32_t d, uint64_t n)
{
    if (cs->cu->acct != NULL)
        vcu__acct_uncharge(cs->cu->acct, cs->aslot, d, n);
}

/* Host bytes charged to the session's slot: 0, or -1 past the VM's host
 * quota (nothing charged).  Without an account, always 0. */
static int vcu__host_charge(vcu__cuda_sess_t *cs, uint64_t n)
{
    if (cs->cu->acct == NULL || n == 0)
        return 0;
    return vcu__acct_host_charge(cs->cu->acct, cs->aslot, n);
}

static void vcu__host_uncharge(vcu__cuda_sess_t *cs, uint64_t n)
{
    if (cs->cu->acct != NULL)
        vcu__acct_host_uncharge(cs->cu->acct, cs->aslot, n);
}

/* Takes n bytes of the session's budget: 0, or -1 (nothing taken) past
 * the budget or the VM's host quota. */
static int vcu__mem_take(vcu__cuda_sess_t *cs, size_t n)
{
    uint64_t want, grow;

    pthread_mutex_lock(&cs->hostmu);
    if (n > VCU__SESS_HOST_BUDGET - cs->hostmem) {
        pthread_mutex_unlock(&cs->hostmu);
        return -1;
    }
    want = cs->hostmem + n;
    if (want > cs->hostres) {
        grow = (want - cs->hostres + VCU__HOST_GRAIN - 1) & ~(VCU__HOST_GRAIN - 1);
        if (vcu__host_charge(cs, grow) != 0) {
            pthread_mutex_unlock(&cs->hostmu);
            return -1;
        }
        cs->hostres += grow;
    }
    cs->hostmem = want;
    pthread_mutex_unlock(&cs->hostmu);
    return 0;
}

static void vcu__mem_give(vcu__cuda_sess_t *cs, size_t n)
{
    uint64_t keep;

    pthread_mutex_lock(&cs->hostmu);
    cs->hostmem = n < cs->hostmem ? cs->hostmem - n : 0;
    keep = (cs->hostmem + VCU__HOST_GRAIN - 1) & ~(VCU__HOST_GRAIN - 1);
    if (cs->hostres >= keep + 2 * VCU__HOST_GRAIN) {
        vcu__host_uncharge(cs, cs->hostres - keep - VCU__HOST_GRAIN);
        cs->hostres = keep + VCU__HOST_GRAIN;
    }
    pthread_mutex_unlock(&cs->hostmu);
}

/* ---- error translation -------------------------------------------------- */

/* The one CUresult -> VCU_E* translation (init and RAM registration). */
static int vcu__cu_err(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return VCU_ENOMEM;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
        return VCU_EINVAL;
    case CUDA_ERROR_NOT_SUPPORTED:
        return VCU_ENOTSUP;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        return VCU_ENODEV;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
        return 0;
    default:
        return VCU_EIO;
    }
}

static const char *vcu__cu_name(const vcu__cuda_t *cu, CUresult r)
{
    const char *s = NULL;

    if (cu->fn.cuGetErrorName == NULL || cu->fn.cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL)
        return "CUDA error";
    return s;
}

/* ---- init --------------------------------------------------------------- */

static void vcu__uuid_str(const CUuuid *u, char *out, size_t len)
{
    const unsigned char *b = (const unsigned char *)u->bytes;

    snprintf(out, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
             b[12], b[13], b[14], b[15]);
}

/* Resolves one entry of cfg->gpus to a host ordinal. */
static int vcu__parse_gpu(vcu__cuda_t *cu, const char *tok, size_t len, int count, int *ord,
                          char *err, size_t errlen)
{
    char buf[128];
    int i;

    if (len == 0 || len >= sizeof(buf)) {
        snprintf(err, errlen, "gpus: empty or overlong entry");
        return VCU_ENODEV;
    }
    memcpy(buf, tok, len);
    buf[len] = '\0';
    if (strncasecmp(buf, "GPU-", 4) == 0) {
        for (i = 0; i < count; i++) {
            CUdevice d;
            CUuuid u;
            char s[64];

            if (cu->fn.cuDeviceGet(&d, i) != CUDA_SUCCESS ||
                VCU__CU(cu, cuDeviceGetUuid, &u, d) != CUDA_SUCCESS)
                continue;
            vcu__uuid_str(&u, s, sizeof(s));
            if (strcasecmp(s, buf) == 0) {
                *ord = i;
                return 0;
            }
        }
        snprintf(err, errlen, "gpus: no host GPU has UUID %s", buf);
        return VCU_ENODEV;
    } else {
        char *end;
        long v;

        errno = 0;
        v = strtol(buf, &end, 10);
        if (errno != 0 || *end != '\0' || end == buf || v < 0 || v >= count) {
            snprintf(err, errlen, "gpus: \"%s\" is not a host GPU ordinal below %d", buf, count);
            return VCU_ENODEV;
        }
        *ord = (int)v;
        return 0;
    }
}

/*
 * GPU core dumps off for good, before the driver is loaded: with them
 * one faulting guest kernel makes the driver write a dump (GPU memory of
 * every session) into this process's working directory and abort() the
 * process, and user-triggered dumps make it create a named pipe.  Values
 * set in the environment before the driver initializes take precedence
 * over anything set later through the API (cuda.h), so no later call can
 * turn them back on.  Runs when the backend is created, before the
 * threads of its sessions exist.
 */
static void vcu__coredump_env(void)
{
    setenv("CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "0", 1);
    setenv("CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION", "0", 1);
    setenv("CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "0", 1);
    unsetenv("CUDA_COREDUMP_PIPE");
}

/* The same through the API, for a driver that this process initialized
 * before the backend (it read its environment then).  Best effort: older
 * drivers lack the call. */
static void vcu__coredump_off(vcu__cuda_t *cu)
{
    static const CUcoredumpSettings off[] = {CU_COREDUMP_ENABLE_ON_EXCEPTION,
                                             CU_COREDUMP_TRIGGER_HOST,
                                             CU_COREDUMP_ENABLE_USER_TRIGGER};
    int flags = CU_COREDUMP_SKIP_ABORT;
    bool no = false;
    size_t sz;
    unsigned int i;

    for (i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        sz = sizeof(no);
        (void)VCU__CU(cu, cuCoredumpSetAttributeGlobal, off[i], &no, &sz);
    }
    sz = sizeof(flags);
    (void)VCU__CU(cu, cuCoredumpSetAttributeGlobal, CU_COREDUMP_GENERATION_FLAGS, &flags, &sz);
}

/* How long a packed worker waits for an MPS server that recovers from a
 * fault: it takes new clients once every client that saw the fault has
 * gone (SHARING-FACTS P20), and the guest processes of those are ending. */
#define VCU__MPS_WAIT_MS 15000

/* Runs call again while the MPS server is not ready, for at most
 * VCU__MPS_WAIT_MS; what it last returned. */
#define vcu__mps_retry(call)                                                        \
    ({                                                                              \
        CUresult r_ = (call);                                                       \
        for (int t_ = 0; r_ == CUDA_ERROR_MPS_SERVER_NOT_READY && t_ < VCU__MPS_WAIT_MS; \
             t_ += 50) {                                                            \
            usleep(50000);                                                          \
            r_ = (call);                                                            \
        }                                                                           \
        r_;                                                                         \
    })

/*
 * Packed mode: a new context on device d running on exactly cu->sms SMs
 * (an execution affinity, which the driver gives only to an MPS client),
 * left current on the calling thread.  A driver that would round the
 * count (to its SM granularity) gets the context destroyed and
 * CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, with the count it gives in *got.
 */
static CUresult vcu__sms_ctx_create(vcu__cuda_t *cu, uint32_t d, unsigned int flags,
                                    CUcontext *out, unsigned int *got)
{
    CUexecAffinityParam ap, q;
    CUctxCreateParams cp;
    CUresult r;

    *got = 0;
    if (cu->fn.cuCtxGetExecAffinity == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    memset(&ap, 0, sizeof(ap));
    memset(&cp, 0, sizeof(cp));
    ap.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    ap.param.smCount.val = cu->sms;
    cp.execAffinityParams = &ap;
    cp.numExecAffinityParams = 1;
    r = vcu__mps_retry(cu->fn.cuCtxCreate(out, &cp, flags, cu->dev[d]));
    if (r != CUDA_SUCCESS)
        return r;
    memset(&q, 0, sizeof(q));
    r = cu->fn.cuCtxGetExecAffinity(&q, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    if (r == CUDA_SUCCESS && q.param.smCount.val != cu->sms) {
        *got = q.param.smCount.val;
        r = CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    }
    if (r != CUDA_SUCCESS) {
        cu->fn.cuCtxDestroy(*out);
        *out = NULL;
    }
    return r;
}

/* For vcu__wctx_get(): take the context with whatever flags it has. */
#define VCU__WCTX_ANY_FLAGS (~0u)

/*
 * A context's own GPU memory (cu->ctx_bytes), charged to the account's
 * slot on device d before the driver is asked for the context: 0, or -1
 * past the VM's quota.  Reported as the slot's context part.
 */
static int vcu__ctx_charge(vcu__cuda_t *cu, int slot, uint32_t d)
{
    if (cu->acct == NULL)
        return 0;
    if (vcu__acct_charge(cu->acct, slot, d, cu->ctx_bytes) != 0)
        return -1;
    vcu__acct_set_ctx(cu->acct, slot, d, cu->ctx_bytes);
    return 0;
}

static void vcu__ctx_uncharge(vcu__cuda_t *cu, int slot, uint32_t d)
{
    if (cu->acct == NULL)
        return;
    vcu__acct_set_ctx(cu->acct, slot, d, 0);
    vcu__acct_uncharge(cu->acct, slot, d, cu->ctx_bytes);
}

/*
 * Caller holds cu->mu.  A worker's context on device d with one more
 * reference: the device's primary context (isolated mode), or in packed
 * mode the context on the VM's SMs, made at the first reference with
 * these flags (later ones set what cuCtxSetFlags can; VCU__WCTX_ANY_FLAGS
 * sets none).  The first reference charges the context's memory to the
 * worker's slot (CUDA_ERROR_OUT_OF_MEMORY past the VM's quota, nothing
 * made), whoever takes it: the session, or the registration of guest
 * memory.  As a retain, it leaves the calling thread's current context
 * as it was.
 */
static CUresult vcu__wctx_get_locked(vcu__cuda_t *cu, uint32_t d, unsigned int flags,
                                     CUcontext *out)
{
    CUcontext prev = NULL;
    unsigned int got;
    CUresult r;

    if (cu->wrefs[d] == 0 && vcu__ctx_charge(cu, cu->acct_slot, d) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (cu->sms == 0) {
        if (flags != VCU__WCTX_ANY_FLAGS && cu->fn.cuDevicePrimaryCtxSetFlags != NULL)
            cu->fn.cuDevicePrimaryCtxSetFlags(cu->dev[d], flags);
        r = cu->fn.cuDevicePrimaryCtxRetain(out, cu->dev[d]);
        goto out;
    }
    if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(&prev) != CUDA_SUCCESS)
        prev = NULL;
    if (cu->pctx[d] != NULL) {
        if (flags != VCU__WCTX_ANY_FLAGS && cu->fn.cuCtxSetFlags != NULL &&
            cu->fn.cuCtxSetCurrent(cu->pctx[d]) == CUDA_SUCCESS)
            (void)cu->fn.cuCtxSetFlags(flags);
        cu->fn.cuCtxSetCurrent(prev);
        *out = cu->pctx[d];
        r = CUDA_SUCCESS;
        goto out;
    }
    r = vcu__sms_ctx_create(cu, d, flags != VCU__WCTX_ANY_FLAGS ? flags : 0, &cu->pctx[d], &got);
    cu->fn.cuCtxSetCurrent(prev);
    if (r != CUDA_SUCCESS && got != 0)
        fprintf(stderr, "vcu: sms=%u: the driver gives %u SMs on host GPU %d, not %u\n",
                cu->sms, got, cu->host_ordinal[d], cu->sms);
    if (r == CUDA_SUCCESS)
        *out = cu->pctx[d];
out:
    if (r != CUDA_SUCCESS) {
        if (cu->wrefs[d] == 0)
            vcu__ctx_uncharge(cu, cu->acct_slot, d);
        return r;
    }
    cu->wrefs[d]++;
    return CUDA_SUCCESS;
}

static CUresult vcu__wctx_get(vcu__cuda_t *cu, uint32_t d, unsigned int flags, CUcontext *out)
{
    CUresult r;

    pthread_mutex_lock(&cu->mu);
    r = vcu__wctx_get_locked(cu, d, flags, out);
    pthread_mutex_unlock(&cu->mu);
    return r;
}

/* Caller holds cu->mu.  Drops a reference of vcu__wctx_get_locked(); the
 * last one ends the context (a packed one is destroyed, a primary one
 * released for the last time) and gives its charge back. */
static void vcu__wctx_put_locked(vcu__cuda_t *cu, uint32_t d)
{
    if (cu->wrefs[d] == 0)
        return;
    if (cu->sms == 0)
        cu->fn.cuDevicePrimaryCtxRelease(cu->dev[d]);
    if (--cu->wrefs[d] > 0)
        return;
    if (cu->sms != 0) {
        cu->fn.cuCtxDestroy(cu->pctx[d]);
        cu->pctx[d] = NULL;
    }
    vcu__ctx_uncharge(cu, cu->acct_slot, d);
}

static void vcu__wctx_put(vcu__cuda_t *cu, uint32_t d)
{
    pthread_mutex_lock(&cu->mu);
    vcu__wctx_put_locked(cu, d);
    pthread_mutex_unlock(&cu->mu);
}

/*
 * A worker's check of its mode, once the devices are known.  Packed: the
 * driver must offer SM-count affinity (an MPS daemon answers) and each
 * device have the SMs; a probe also makes and checks one context per
 * device.  Isolated: the process must not be an MPS client.  0, or
 * VCU_ENODEV with the reason in err.
 */
static int vcu__mode_check(vcu__cuda_t *cu, const vcu_backend_config_t *cfg, char *err,
                           size_t errlen)
{
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    unsigned int d;

    for (d = 0; d < cu->ndev; d++) {
        int aff = 0, mps = 0, sms = 0;

        if (cu->fn.cuDeviceGetExecAffinitySupport == NULL ||
            cu->fn.cuDeviceGetExecAffinitySupport(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT,
                                                  cu->dev[d]) != CUDA_SUCCESS)
            aff = 0;
        if (cu->fn.cuDeviceGetAttribute == NULL ||
            cu->fn.cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, cu->dev[d]) !=
                CUDA_SUCCESS)
            mps = 0;
        if (cu->sms == 0) {
            if (aff != 0 || mps != 0) {
                snprintf(err, errlen, "host GPU %d: this worker is an MPS client (%s), which "
                         "isolated mode never is", cu->host_ordinal[d],
                         pipe != NULL ? pipe : "no pipe directory");
                return VCU_ENODEV;
            }
            continue;
        }
        if (aff == 0) {
            snprintf(err, errlen, "sms=%u (packed mode) needs NVIDIA's MPS control daemon, and "
                     "none answers at %s: start it with CUDA_MPS_PIPE_DIRECTORY=%s "
                     "nvidia-cuda-mps-control -d, or name its directory with mps-pipe",
                     cu->sms, pipe != NULL ? pipe : "?", pipe != NULL ? pipe : "DIR");
            return VCU_ENODEV;
        }
        if (cu->fn.cuDeviceGetAttribute == NULL ||
            cu->fn.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                        cu->dev[d]) != CUDA_SUCCESS || sms <= 0 ||
            cu->sms > (uint32_t)sms) {
            snprintf(err, errlen, "sms=%u: host GPU %d has %d SMs", cu->sms,
                     cu->host_ordinal[d], sms);
            return VCU_ENODEV;
        }
        if (cfg->probe) {
            CUcontext c = NULL, prev = NULL;
            unsigned int got = 0;
            CUresult r;

            if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(&prev) != CUDA_SUCCESS)
                prev = NULL;
            r = vcu__sms_ctx_create(cu, d, 0, &c, &got);
            if (r == CUDA_SUCCESS)
                cu->fn.cuCtxDestroy(c);
            cu->fn.cuCtxSetCurrent(prev);
            if (got != 0) {
                snprintf(err, errlen, "sms=%u: the driver gives %u SMs on host GPU %d, not %u "
                         "(its granularity): use sms=%u", cu->sms, got, cu->host_ordinal[d],
                         cu->sms, got);
                return VCU_ENODEV;
            }
            if (r != CUDA_SUCCESS) {
                snprintf(err, errlen, "sms=%u: a context on %u SMs of host GPU %d: %s",
                         cu->sms, cu->sms, cu->host_ordinal[d], vcu__cu_name(cu, r));
                return VCU_ENODEV;
            }
        }
    }
    return 0;
}

int vcu__cuda_init(const vcu_backend_config_t *cfg, vcu__cuda_t **out, char *err, size_t errlen)
{
    const char *path = cfg != NULL ? cfg->libcuda : NULL;
    const char *gpus = cfg != NULL ? cfg->gpus : NULL;
    vcu__cuda_t *cu;
    CUresult r;
    int count = 0, rc = VCU_ENODEV;
    const char *p;

    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    if (path == NULL || path[0] == '\0')
        path = getenv("VCU_LIBCUDA");
    if (path == NULL || path[0] == '\0')
        path = "libcuda.so.1";
    if (gpus == NULL || gpus[0] == '\0')
        gpus = "0";

    cu = calloc(1, sizeof(*cu));
    if (cu == NULL) {
        snprintf(err, errlen, "out of memory");
        return VCU_ENOMEM;
    }
    pthread_mutex_init(&cu->mu, NULL);
    vcu__coredump_env();
    cu->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (cu->dl == NULL) {
        const char *e = dlerror();

        snprintf(err, errlen, "%s", e != NULL ? e : path);
        goto err_dl;
    }
#define VCU__FN_LOAD(name, req)                                                      \
    *(void **)(&cu->fn.name) = dlsym(cu->dl, VCU__STR(name));                        \
    if (cu->fn.name == NULL && (req)) {                                              \
        snprintf(err, errlen, "%s: no symbol %s", path, VCU__STR(name));             \
        goto err_sym;                                                                \
    }
    VCU__CU_FUNCS(VCU__FN_LOAD)
#undef VCU__FN_LOAD
#define VCU__GEN_LOAD(name) *(void **)(&cu->gfn.p_##name) = dlsym(cu->dl, #name);
    VCU__GEN_FUNCS(VCU__GEN_LOAD)
#undef VCU__GEN_LOAD

    r = cfg != NULL && cfg->worker && cfg->sms != 0 ? vcu__mps_retry(cu->fn.cuInit(0))
                                                    : cu->fn.cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cuInit failed: %s (%d)", vcu__cu_name(cu, r), (int)r);
        goto err_sym;
    }
    vcu__coredump_off(cu);
    cu->fn.cuDriverGetVersion(&cu->driver_version);
    r = cu->fn.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count <= 0) {
        snprintf(err, errlen, "no CUDA device on the host (%s)",
                 r != CUDA_SUCCESS ? vcu__cu_name(cu, r) : "count 0");
        goto err_sym;
    }

    /* Entries are separated by ',' or ':'.  QEMU's -device parser splits
     * on ',' (a literal one is written ",,"), so "0:1" is the form that
     * needs no escaping; a GPU- UUID has no ':' in it. */
    for (p = gpus;;) {
        const char *q = strpbrk(p, ",:");
        size_t len = q != NULL ? (size_t)(q - p) : strlen(p);
        int ord;
        unsigned int i;

        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        rc = vcu__parse_gpu(cu, p, len, count, &ord, err, errlen);
        if (rc != 0)
            goto err_sym;
        for (i = 0; i < cu->ndev; i++)
            if (cu->host_ordinal[i] == ord) {
                snprintf(err, errlen, "gpus: host GPU %d given twice", ord);
                rc = VCU_ENODEV;
                goto err_sym;
            }
        if (cu->ndev >= VCU_CU_MAX_DEVICES) {
            snprintf(err, errlen, "gpus: more than %u devices", VCU_CU_MAX_DEVICES);
            rc = VCU_ENODEV;
            goto err_sym;
        }
        r = cu->fn.cuDeviceGet(&cu->dev[cu->ndev], ord);
        if (r != CUDA_SUCCESS) {
            snprintf(err, errlen, "cuDeviceGet(%d) failed: %s", ord, vcu__cu_name(cu, r));
            rc = VCU_ENODEV;
            goto err_sym;
        }
        cu->host_ordinal[cu->ndev++] = ord;
        if (q == NULL)
            break;
        p = q + 1;
    }
    cu->worker = cfg != NULL && cfg->worker;
    cu->sms = cu->worker ? cfg->sms : 0;
    {
        const char *e = getenv("VCU_LAUNCH_GRAPHS");

        cu->graphs = cu->fn.cuGraphExecUpdate != NULL && (e == NULL || strcmp(e, "0") != 0);
    }
    cu->acct = cfg != NULL ? cfg->account : NULL;
    cu->sched = cfg != NULL ? cfg->sched : NULL;
    cu->acct_slot = cfg != NULL ? cfg->account_slot : -1;
    cu->ctx_bytes = cfg != NULL && cfg->ctx_bytes != 0 ? cfg->ctx_bytes : VCU_BACKEND_CTX_BYTES;
    if (cu->ctx_bytes > VCU__ACCT_MAX)
        cu->ctx_bytes = VCU__ACCT_MAX;
    {
        unsigned int i;

        for (i = 0; i < cu->ndev; i++) {
            int sms = 0, thr = 0;

            if (cu->fn.cuDeviceGetAttribute == NULL ||
                cu->fn.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                            cu->dev[i]) != CUDA_SUCCESS ||
                cu->fn.cuDeviceGetAttribute(&thr, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                            cu->dev[i]) != CUDA_SUCCESS ||
                sms <= 0 || thr <= 0)
                cu->stack_threads[i] = VCU__STACK_THREADS_UNKNOWN;
            else
                cu->stack_threads[i] = (uint64_t)sms * (uint64_t)thr;
        }
    }
    if (cu->worker) {
        unsigned int i;

        if (cu->fn.cuDevicePrimaryCtxRetain == NULL || cu->fn.cuDevicePrimaryCtxRelease == NULL) {
            snprintf(err, errlen, "%s: no primary context entry points", path);
            rc = VCU_ENODEV;
            goto err_sym;
        }
        /* The worker maps all of the VM's RAM; that must stay out of the
         * reach of the session's kernels, which a device that reads
         * pageable memory (HMM, ATS) would give them. */
        for (i = 0; i < cu->ndev; i++) {
            int v = 0;

            if (cu->fn.cuDeviceGetAttribute != NULL &&
                cu->fn.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
                                            cu->dev[i]) == CUDA_SUCCESS && v != 0) {
                snprintf(err, errlen, "host GPU %d can access pageable host memory (HMM or ATS): "
                         "not supported, guest RAM would be reachable from its kernels",
                         cu->host_ordinal[i]);
                rc = VCU_ENODEV;
                goto err_sym;
            }
        }
        rc = vcu__mode_check(cu, cfg, err, errlen);
        if (rc != 0)
            goto err_sym;
    }
    /* Without it device printf goes to this process's stdout: a warning
     * would only add to it, and nothing else depends on it. */
    cu->capture = cfg != NULL && cfg->capture_printf && vcu__cap_start() == 0;
    /* Without its cache a worker sends whole images, as before: said
     * once, never a reason to refuse CUDA. */
    if (cfg != NULL && cfg->module_cache != NULL && cfg->module_cache[0] != '\0') {
        char mcerr[256];

        if (vcu_modcache_open(cfg->module_cache, cfg->module_cache_bytes, 1, &cu->mc, mcerr,
                              sizeof(mcerr)) != 0)
            fprintf(stderr, "vcu: %s; running without it\n", mcerr);
    }
    *out = cu;
    return 0;

err_sym:
    /* Left loaded, as vcu__cuda_fini() leaves it: cuInit may have
     * started driver threads. */
err_dl:
    pthread_mutex_destroy(&cu->mu);
    free(cu);
    return rc;
}

/* Makes the RAM context current on the calling thread (a QEMU thread, not
 * a worker), keeping what was current for vcu__ram_leave(). */
static CUresult vcu__ram_enter(vcu__cuda_t *cu, CUcontext *prev)
{
    *prev = NULL;
    if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(prev) != CUDA_SUCCESS)
        *prev = NULL;
    return cu->fn.cuCtxSetCurrent(cu->ram_ctx);
}

static void vcu__ram_leave(vcu__cuda_t *cu, CUcontext prev)
{
    cu->fn.cuCtxSetCurrent(prev);
}

int vcu__cuda_has_modcache(const vcu__cuda_t *cu)
{
    return cu->mc != NULL;
}

void vcu__cuda_fini(vcu__cuda_t *cu)
{
    vcu__ram_t *r, *n;

    if (cu == NULL)
        return;
    vcu_modcache_free(cu->mc);
    if (cu->ram_ctx != NULL) {
        CUcontext prev;

        if (vcu__ram_enter(cu, &prev) == CUDA_SUCCESS)
            for (r = cu->ram; r != NULL; r = r->next)
                VCU__CU(cu, cuMemHostUnregister, r->hva);
        vcu__ram_leave(cu, prev == cu->ram_ctx ? NULL : prev);
        if (cu->worker)
            vcu__wctx_put(cu, 0);
        else
            cu->fn.cuCtxDestroy(cu->ram_ctx);
    }
    for (r = cu->ram; r != NULL; r = n) {
        n = r->next;
        free(r);
    }
    /* No dlclose(): the driver keeps threads of its own that may still be
     * inside it, and unloading it loses what it allocated (a leak report
     * under LeakSanitizer).  dlopen() counts references, so a backend
     * created again reuses the loaded library. */
    if (cu->capture)
        vcu__cap_stop();
    pthread_mutex_destroy(&cu->mu);
    free(cu);
}

/* Caller holds cu->mu.  The registration of exactly [hva, hva+len). */
static vcu__ram_t **vcu__ram_find_locked(vcu__cuda_t *cu, void *hva, size_t len)
{
    vcu__ram_t **pp;

    for (pp = &cu->ram; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->hva == hva && (*pp)->len == len)
            return pp;
    return NULL;
}

int vcu__cuda_add_ram(vcu__cuda_t *cu, void *hva, size_t len)
{
    vcu__ram_t *ram, **pp;
    CUresult r = CUDA_SUCCESS;
    int rc;

    if (cu == NULL || hva == NULL || len == 0)
        return VCU_EINVAL;
    ram = malloc(sizeof(*ram));
    if (ram == NULL)
        return VCU_ENOMEM;
    pthread_mutex_lock(&cu->mu);
    pp = vcu__ram_find_locked(cu, hva, len);
    if (pp != NULL) {
        /* The same RAM seen twice (an alias): one registration. */
        (*pp)->refs++;
        pthread_mutex_unlock(&cu->mu);
        free(ram);
        return 0;
    }
    if (cu->ram_ctx == NULL) {
        CUcontext prev = NULL;

        /* Created current on this thread; the caller's thread is then left
         * as it was. */
        if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(&prev) != CUDA_SUCCESS)
            prev = NULL;
        if (cu->worker)
            r = vcu__wctx_get_locked(cu, 0, VCU__WCTX_ANY_FLAGS, &cu->ram_ctx);
        else
            r = cu->fn.cuCtxCreate(&cu->ram_ctx, NULL, 0, cu->dev[0]);
        if (r != CUDA_SUCCESS)
            cu->ram_ctx = NULL;
        cu->fn.cuCtxSetCurrent(prev);
    }
    if (r == CUDA_SUCCESS) {
        CUcontext prev;

        r = vcu__ram_enter(cu, &prev);
        if (r == CUDA_SUCCESS)
            /* Portable: pinned for every context, the sessions' included;
             * device-mapped: kernels may reach guest memory directly
             * (CU_HOST_DEVICE_POINTER). */
            r = VCU__CU(cu, cuMemHostRegister, hva, len,
                        CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
        vcu__ram_leave(cu, prev);
    }
    rc = vcu__cu_err(r);
    if (r == CUDA_SUCCESS) {
        ram->hva = hva;
        ram->len = len;
        ram->refs = 1;
        ram->next = cu->ram;
        cu->ram = ram;
        ram = NULL;
    }
    pthread_mutex_unlock(&cu->mu);
    free(ram);
    return rc;
}

int vcu__cuda_remove_ram(vcu__cuda_t *cu, void *hva, size_t len)
{
    vcu__ram_t **pp, *ram = NULL;
    CUresult r = CUDA_SUCCESS;

    if (cu == NULL || hva == NULL || len == 0)
        return VCU_EINVAL;
    pthread_mutex_lock(&cu->mu);
    pp = vcu__ram_find_locked(cu, hva, len);
    if (pp == NULL) {
        pthread_mutex_unlock(&cu->mu);
        return VCU_EINVAL;
    }
    if (--(*pp)->refs == 0) {
        ram = *pp;
        *pp = ram->next;
        CUcontext prev;

        r = vcu__ram_enter(cu, &prev);
        if (r == CUDA_SUCCESS)
            r = VCU__CU(cu, cuMemHostUnregister, hva);
        vcu__ram_leave(cu, prev);
    }
    pthread_mutex_unlock(&cu->mu);
    free(ram);
    return vcu__cu_err(r);
}

int vcu__cuda_host_charge(vcu__cuda_t *cu, uint64_t n)
{
    if (cu->acct == NULL || cu->acct_slot < 0 || n == 0)
        return 0;
    return vcu__acct_host_charge(cu->acct, cu->acct_slot, n) == 0 ? 0 : VCU_ENOMEM;
}

void vcu__cuda_host_uncharge(vcu__cuda_t *cu, uint64_t n)
{
    if (cu->acct != NULL && cu->acct_slot >= 0)
        vcu__acct_host_uncharge(cu->acct, cu->acct_slot, n);
}

/* ---- sessions ----------------------------------------------------------- */

int vcu__cuda_sess_new(vcu__cuda_t *cu, uint64_t id, vcu__cuda_sess_t **out)
{
    vcu__cuda_sess_t *cs;

    *out = NULL;
    if (cu == NULL)
        return VCU_ENODEV;
    cs = calloc(1, sizeof(*cs));
    if (cs == NULL)
        return VCU_ENOMEM;
    cs->cu = cu;
    cs->aslot = -1;
    if (cu->acct != NULL && cu->acct_slot >= 0) {
        cs->aslot = cu->acct_slot;
    } else if (cu->acct != NULL) {
        cs->aslot = vcu__acct_claim(cu->acct, id);
        cs->aowned = cs->aslot >= 0;
        if (cs->aslot < 0) {
            free(cs);
            return VCU_EBUSY;
        }
    }
    vcu__htab_init(&cs->tab);
    vcu__pset_init(&cs->allocs);
    pthread_mutex_init(&cs->hostmu, NULL);
    pthread_mutex_init(&cs->gate.mu, NULL);
    pthread_cond_init(&cs->gate.cv, NULL);
    *out = cs;
    return 0;
}

/*
 * Makes ctx current on the worker thread (the only thread that calls
 * this); a request costs no driver call when it is already.
 */
static CUresult vcu__cur(vcu__cuda_sess_t *cs, CUcontext ctx)
{
    CUresult r;

    if (ctx == cs->cur && ctx != NULL)
        return CUDA_SUCCESS;
    r = cs->cu->fn.cuCtxSetCurrent(ctx);
    cs->cur = r == CUDA_SUCCESS ? ctx : NULL;
    return r;
}

/* Destroys a kept run's executable graph, in its device's context; the
 * slot stays.  (May switch the current context.) */
static void vcu__grun_exec_drop(vcu__cuda_sess_t *cs, vcu__grun_t *g)
{
    if (g->ex == NULL)
        return;
    if (cs->ctx[g->dev] != NULL && vcu__cur(cs, cs->ctx[g->dev]) == CUDA_SUCCESS)
        cs->cu->fn.cuGraphExecDestroy(g->ex);
    vcu__mem_give(cs, VCU__GRUN_BYTES);
    g->ex = NULL;
}

/* Frees a slot, its executable graph first. */
static void vcu__grun_free(vcu__cuda_sess_t *cs, vcu__grun_t *g)
{
    vcu__grun_exec_drop(cs, g);
    memset(g, 0, sizeof(*g));
}

/* Forgets the kept runs of device d (VCU_CU_MAX_DEVICES: of all): before
 * a module is unloaded (their kernel nodes may name its functions), a
 * context limit changes or the context goes. */
static void vcu__grun_drop(vcu__cuda_sess_t *cs, uint32_t d)
{
    unsigned int i;

    for (i = 0; i < VCU__GRUN_SLOTS; i++)
        if (cs->grun[i].n != 0 && (d == VCU_CU_MAX_DEVICES || cs->grun[i].dev == d))
            vcu__grun_free(cs, &cs->grun[i]);
}

/* Makes device d's context current, creating it first if needed. */
static CUresult vcu__ctx(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    CUresult r;

    if (d >= cu->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (cs->ctx[d] == NULL) {
        if (cu->worker) {
            /* The process is the session's alone: its primary context is
             * the session's, as a native program's is (packed mode: the
             * one on the VM's SMs).  Charged there, once per process. */
            r = vcu__wctx_get(cu, d, cs->ctx_flags[d], &cs->ctx[d]);
        } else if (vcu__ctx_charge(cu, cs->aslot, d) != 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            r = cu->fn.cuCtxCreate(&cs->ctx[d], NULL, cs->ctx_flags[d], cu->dev[d]);
            if (r != CUDA_SUCCESS)
                vcu__ctx_uncharge(cu, cs->aslot, d);
        }
        if (r != CUDA_SUCCESS) {
            cs->ctx[d] = NULL;
            return r;
        }
    }
    return vcu__cur(cs, cs->ctx[d]);
}

/* ---- module lifetimes --------------------------------------------------- */

/* Drops one count of m; the last unloads it (in its context, made
 * current) and returns what cuModuleUnload gave. */
static CUresult vcu__mod_put(vcu__cuda_sess_t *cs, vcu__mod_t *m)
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
static int vcu__mods_add(vcu__cuda_sess_t *cs, vcu__modset_t **set, vcu__mod_t *m)
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

static int vcu__mods_add_all(vcu__cuda_sess_t *cs, vcu__modset_t **set, const vcu__modset_t *src)
{
    unsigned int i;

    for (i = 0; src != NULL && i < src->n; i++)
        if (vcu__mods_add(cs, set, src->m[i]) != 0)
            return -1;
    return 0;
}

/* Drops the set's counts (unloading what only it held) and frees it. */
static void vcu__mods_free(vcu__cuda_sess_t *cs, vcu__modset_t *s)
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
static int vcu__mods_on(const vcu__modset_t *s, uint32_t d)
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
 * exec's module set (their CUDA objects are the caller's to destroy
 * first).
 */
static void vcu__del(vcu__cuda_sess_t *cs, uint64_t h)
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
        break;
    case VCU__H_GRAPH_EXEC:
        mods = e->u.exec.mods;
        break;
    }
    vcu__htab_del(&cs->tab, h);
    if (m != NULL)
        vcu__mod_put(cs, m);
    vcu__mods_free(cs, mods);
}

/* ---- waits -------------------------------------------------------------- */

static void vcu__scatter(const vcu_segment_t *s, const void *src, size_t len);

/* A pool event of device d, whose context is current. */
static CUresult vcu__ev_get(vcu__cuda_sess_t *cs, uint32_t d, CUevent *out)
{
    vcu__evpool_t *p = &cs->pool[d];

    if (p->n > 0) {
        *out = p->ev[--p->n];
        return CUDA_SUCCESS;
    }
    return VCU__CU(cs->cu, cuEventCreate, out, CU_EVENT_DISABLE_TIMING);
}

/* Back to the pool; its context is alive (a record may still be pending:
 * recording it again is allowed). */
static void vcu__ev_put(vcu__cuda_sess_t *cs, uint32_t d, CUevent ev)
{
    vcu__evpool_t *p = &cs->pool[d];

    if (p->n == p->cap) {
        unsigned int ncap = p->cap ? p->cap * 2 : 8;
        CUevent *n = realloc(p->ev, ncap * sizeof(*n));

        if (n == NULL) {
            if (vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS)
                VCU__CU(cs->cu, cuEventDestroy, ev);
            return;
        }
        p->ev = n;
        p->cap = ncap;
    }
    p->ev[p->n++] = ev;
}

static vcu__cuda_wait_t *vcu__wait_new(vcu__cuda_sess_t *cs)
{
    vcu__cuda_wait_t *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    w->ev = w->ev1;
    w->capev = sizeof(w->ev1) / sizeof(w->ev1[0]);
    w->next = cs->waits;
    if (w->next != NULL)
        w->next->pprev = &w->next;
    w->pprev = &cs->waits;
    cs->waits = w;
    return w;
}

/* Records a pool event of device d (current) on st for w to wait on. */
static CUresult vcu__wait_record(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, uint32_t d, CUstream st)
{
    vcu__cuda_t *cu = cs->cu;
    CUevent ev;
    CUresult r;

    if (cu->fn.cuEventQuery == NULL || cu->fn.cuEventRecordWithFlags == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (w->nev == w->capev) {
        unsigned int ncap = w->capev * 2;
        vcu__wev_t *n;

        /* One per stream of a context: counted, a guest may have many. */
        if (vcu__mem_take(cs, ncap * sizeof(*n)) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        n = malloc(ncap * sizeof(*n));
        if (n == NULL) {
            vcu__mem_give(cs, ncap * sizeof(*n));
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(n, w->ev, w->nev * sizeof(*n));
        if (w->ev != w->ev1) {
            free(w->ev);
            vcu__mem_give(cs, w->capev * sizeof(*n));
        }
        w->ev = n;
        w->capev = ncap;
    }
    r = vcu__ev_get(cs, d, &ev);
    if (r != CUDA_SUCCESS)
        return r;
    r = cu->fn.cuEventRecordWithFlags(ev, st, 0);
    if (r != CUDA_SUCCESS) {
        vcu__ev_put(cs, d, ev);
        return r;
    }
    w->ev[w->nev].ev = ev;
    w->ev[w->nev].dev = d;
    w->nev++;
    return CUDA_SUCCESS;
}

/* w is done with the guest's event: hands it to another wait on it, or
 * destroys it if it was w's own. */
static void vcu__wait_drop_gev(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    vcu__cuda_wait_t *o;

    if (w->gev == NULL)
        return;
    if (w->own_gev) {
        for (o = cs->waits; o != NULL; o = o->next)
            if (o != w && o->gev == w->gev)
                break;
        if (o != NULL)
            o->own_gev = 1;
        else if (vcu__cur(cs, cs->ctx[w->gdev]) == CUDA_SUCCESS)
            VCU__CU(cs->cu, cuEventDestroy, w->gev);
    }
    w->gev = NULL;
    w->own_gev = 0;
    cs->ngev--;
}

/* Unlinks and frees w; its pool events go back to the pool. */
static void vcu__wait_free(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    unsigned int i;

    for (i = 0; i < w->nev; i++)
        vcu__ev_put(cs, w->ev[i].dev, w->ev[i].ev);
    vcu__wait_drop_gev(cs, w);
    *w->pprev = w->next;
    if (w->next != NULL)
        w->next->pprev = w->pprev;
    if (w->ev != w->ev1) {
        free(w->ev);
        vcu__mem_give(cs, w->capev * sizeof(*w->ev));
    }
    free(w->bounce);
    vcu__mem_give(cs, w->bounce_len);
    free(w);
}

/* A pending wait on the guest's event ev, or NULL. */
static vcu__cuda_wait_t *vcu__gev_waiter(vcu__cuda_sess_t *cs, CUevent ev)
{
    vcu__cuda_wait_t *w;

    if (cs->ngev == 0)
        return NULL;
    for (w = cs->waits; w != NULL; w = w->next)
        if (w->gev == ev)
            return w;
    return NULL;
}

int vcu__cuda_wait_poll(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    vcu__cuda_t *cu = cs->cu;
    uint32_t cur = UINT32_MAX;
    unsigned int i = 0;
    int pending = 0;
    CUresult r;

    while (i < w->nev) {
        vcu__wev_t *e = &w->ev[i];

        if (e->dev != cur) {
            vcu__cur(cs, cs->ctx[e->dev]);
            cur = e->dev;
        }
        r = cu->fn.cuEventQuery(e->ev);
        if (r == CUDA_ERROR_NOT_READY) {
            pending = 1;
            i++;
            continue;
        }
        /* A failure (a sticky fault) is what the blocking call gave. */
        if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
            w->res = r;
        vcu__ev_put(cs, e->dev, e->ev);
        w->ev[i] = w->ev[--w->nev];
    }
    if (w->gev != NULL) {
        if (w->gdev != cur)
            vcu__cur(cs, cs->ctx[w->gdev]);
        r = cu->fn.cuEventQuery(w->gev);
        if (r == CUDA_ERROR_NOT_READY) {
            pending = 1;
        } else {
            if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
                w->res = r;
            vcu__wait_drop_gev(cs, w);
        }
    }
    return !pending;
}

/* Blocks until everything w waits for is done: vcu__cuda_wait_poll()
 * then finds it done.  For printf sessions (see vcu__cuda_exec). */
static void vcu__wait_block(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w)
{
    unsigned int i;

    for (i = 0; i < w->nev; i++)
        if (vcu__cur(cs, cs->ctx[w->ev[i].dev]) == CUDA_SUCCESS)
            (void)VCU__CU(cs->cu, cuEventSynchronize, w->ev[i].ev);
    if (w->gev != NULL && vcu__cur(cs, cs->ctx[w->gdev]) == CUDA_SUCCESS)
        (void)VCU__CU(cs->cu, cuEventSynchronize, w->gev);
}

uint32_t vcu__cuda_wait_finish(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, vcu_request_t *req,
                               size_t *out_len)
{
    size_t len = w->out_len;
    uint32_t status = w->status;
    CUresult res = w->res;

    /* The copy has landed in the staging buffer: now into guest pages. */
    if (w->seg != NULL && w->bounce != NULL && res == CUDA_SUCCESS)
        vcu__scatter(w->seg, w->bounce, w->span);
    if (w->fence || w->async) {
        if (res != CUDA_SUCCESS && cs->deferred == 0)
            cs->deferred = (uint32_t)res;
    } else if (res != CUDA_SUCCESS && req != NULL && len >= sizeof(struct vcu_cu_resp) &&
               req->resp_cap >= sizeof(struct vcu_resp_hdr) + len) {
        struct vcu_cu_resp r;

        memcpy(&r, vcu__resp_payload(req), sizeof(r));
        if (r.result == CUDA_SUCCESS) {
            r.result = (uint32_t)res;
            memcpy(vcu__resp_payload(req), &r, sizeof(r));
        }
    }
    vcu__wait_free(cs, w);
    *out_len = len;
    return status;
}

/* Is st in a stream capture?  An event recorded there would become a
 * graph node: such a stream gets the blocking call (an error at once). */
static int vcu__capturing(vcu__cuda_t *cu, CUstream st)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;

    if (cu->fn.cuStreamGetCaptureInfo == NULL ||
        cu->fn.cuStreamGetCaptureInfo(st, &status, NULL, NULL, NULL, NULL, NULL) != CUDA_SUCCESS)
        return 0;
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Destroys the orphaned streams whose work has finished. */
static void vcu__orphans_prune(vcu__cuda_sess_t *cs)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__orphan_t **pp = &cs->orphans, *o;

    while ((o = *pp) != NULL) {
        if (vcu__cur(cs, cs->ctx[o->dev]) == CUDA_SUCCESS &&
            cu->fn.cuEventQuery(o->ev) == CUDA_ERROR_NOT_READY) {
            pp = &o->next;
            continue;
        }
        VCU__CU(cu, cuStreamDestroy, o->st);
        vcu__ev_put(cs, o->dev, o->ev);
        *pp = o->next;
        free(o);
        vcu__mem_give(cs, sizeof(*o));
    }
}

/*
 * Records, on device d's context (current), an event behind the work of
 * every stream: the legacy and per-thread ones, the guest's, and the
 * orphans.  -1 where that cannot be done (a capture in progress, no
 * events): the caller synchronizes instead.
 */
static int vcu__park_ctx(vcu__cuda_sess_t *cs, vcu__cuda_wait_t *w, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__orphan_t *o;
    uint32_t i;

    if (cu->fn.cuEventQuery == NULL || cu->fn.cuEventRecordWithFlags == NULL)
        return -1;
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_STREAM && e->dev == d && vcu__capturing(cu, e->u.st))
            return -1;
    }
    if (cs->orphans != NULL) {
        vcu__orphans_prune(cs);
        if (vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS)
            return -1;
    }
    if (vcu__wait_record(cs, w, d, CU_STREAM_LEGACY) != CUDA_SUCCESS ||
        vcu__wait_record(cs, w, d, CU_STREAM_PER_THREAD) != CUDA_SUCCESS)
        return -1;
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_STREAM && e->dev == d &&
            vcu__wait_record(cs, w, d, e->u.st) != CUDA_SUCCESS)
            return -1;
    }
    for (o = cs->orphans; o != NULL; o = o->next)
        if (o->dev == d && vcu__wait_record(cs, w, d, o->st) != CUDA_SUCCESS)
            return -1;
    return 0;
}

/*
 * Device d's context is idle (synchronized) and about to go: finishes
 * what every wait had on it, destroys its orphans and forgets its pool
 * (the context takes its events along).
 */
static void vcu__waits_ctx_gone(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__cuda_wait_t *w;
    vcu__orphan_t **pp = &cs->orphans, *o;
    unsigned int i;
    CUresult r;

    for (w = cs->waits; w != NULL; w = w->next) {
        for (i = 0; i < w->nev;) {
            if (w->ev[i].dev != d) {
                i++;
                continue;
            }
            r = VCU__CU(cu, cuEventQuery, w->ev[i].ev);
            if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
                w->res = r;
            w->ev[i] = w->ev[--w->nev];
        }
        if (w->gev != NULL && w->gdev == d) {
            r = VCU__CU(cu, cuEventQuery, w->gev);
            if (r != CUDA_SUCCESS && w->res == CUDA_SUCCESS)
                w->res = r;
            w->gev = NULL;
            w->own_gev = 0;
            cs->ngev--;
        }
    }
    while ((o = *pp) != NULL) {
        if (o->dev != d) {
            pp = &o->next;
            continue;
        }
        VCU__CU(cu, cuStreamDestroy, o->st);
        *pp = o->next;
        free(o);
        vcu__mem_give(cs, sizeof(*o));
    }
    cs->pool[d].n = 0;
}

/*
 * Brings the charge of the session's pool on device d down to what the
 * pool holds now: its live blocks' charges, or what the driver says it
 * reserves where that is more (freed blocks it keeps until a
 * synchronization, or past the guest's release threshold).
 */
static void vcu__pool_settle(vcu__cuda_sess_t *cs, uint32_t d)
{
    cuuint64_t res = 0;
    uint64_t want = cs->pool_live[d];

    if (cs->mpool[d] != NULL &&
        VCU__CU(cs->cu, cuMemPoolGetAttribute, cs->mpool[d], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                &res) == CUDA_SUCCESS && vcu__grain(res) > want)
        want = vcu__grain(res);
    if (want < cs->pool_charge[d]) {
        vcu__uncharge(cs, d, cs->pool_charge[d] - want);
        cs->pool_charge[d] = want;
    }
}

/* Does entry e go with device d's context: made there, or (a function, a
 * graph, an exec) using a module loaded there? */
static int vcu__on_dev(const vcu__hent_t *e, uint32_t d)
{
    switch (e->type) {
    case VCU__H_FUNCTION:
        return e->dev == d || e->u.fn.mod->dev == d;
    case VCU__H_GRAPH:
        return e->dev == d || vcu__mods_on(e->u.graph.mods, d);
    case VCU__H_GRAPH_EXEC:
        return e->dev == d || vcu__mods_on(e->u.exec.mods, d);
    case VCU__H_POOL:
        return 0;                   /* the session's, across resets */
    default:
        return e->dev == d;
    }
}

/*
 * Releases everything of device d's context: graphs and execs explicitly
 * (graphs are not owned by the context), and those of other devices too
 * whose kernel nodes use a module of d, as well as functions named
 * through another device (the module goes with the context); the modules
 * once nothing uses them, stream-ordered allocations (pool memory
 * outlives contexts), then the context with all else it holds.
 */
static void vcu__ctx_destroy(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    uint32_t i;
    int pass;

    if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS)
        cu->fn.cuCtxSynchronize();
    vcu__grun_drop(cs, d);
    if (cs->ctx[d] != NULL)
        vcu__waits_ctx_gone(cs, d);
    /* What uses modules first: a module's record goes with its last
     * count, and a live function's module always has its guest handle. */
    for (pass = 0; pass < 2; pass++) {
        for (i = 0; i < cs->tab.cap; i++) {
            vcu__hent_t *e = &cs->tab.ent[i];
            uint64_t h = vcu__htab_handle_at(&cs->tab, i);
            int users = e->type == VCU__H_FUNCTION || e->type == VCU__H_GRAPH ||
                        e->type == VCU__H_GRAPH_EXEC;

            if (h == 0 || users != (pass == 0) || !vcu__on_dev(e, d))
                continue;
            if (cs->ctx[e->dev] != NULL) {
                if (e->type == VCU__H_GRAPH_EXEC)
                    VCU__CU(cu, cuGraphExecDestroy, e->u.exec.ge);
                else if (e->type == VCU__H_GRAPH && e->u.graph.cap_id == 0)
                    VCU__CU(cu, cuGraphDestroy, e->u.graph.g);
            }
            vcu__del(cs, h);
        }
    }
    /* Captures of d's context end with it. */
    for (i = 0; cs->cap_mods != NULL && i < cs->cap_mods->n;) {
        vcu__mod_t *m = cs->cap_mods->m[i];

        if (m->dev != d) {
            i++;
            continue;
        }
        cs->cap_mods->m[i] = cs->cap_mods->m[--cs->cap_mods->n];
        vcu__mod_put(cs, m);
    }
    if (cs->ctx[d] != NULL)
        vcu__cur(cs, cs->ctx[d]);   /* unloads may have switched */
    for (i = 0; i < cs->allocs.cap; i++) {
        uint64_t k = cs->allocs.keys[i];

        if (k == 0 || k == VCU__PSET_TOMB || VCU__ALLOC_DEV(cs->allocs.vals[i]) != d)
            continue;
        /* A worker's context may outlive the session's hold on it (the
         * registrations of guest memory hold it too): what is given back
         * here must be gone, not left to the context's end. */
        if (cs->ctx[d] != NULL && (cu->worker || (cs->allocs.vals[i] & VCU__ALLOC_ASYNC)))
            cu->fn.cuMemFree((CUdeviceptr)k);
        if (cs->allocs.vals[i] & VCU__ALLOC_ASYNC)
            cs->pool_live[d] -= VCU__ALLOC_CHARGE(cs->allocs.vals[i]);
        else
            vcu__uncharge(cs, d, VCU__ALLOC_CHARGE(cs->allocs.vals[i]));
        vcu__pset_del(&cs->allocs, k);
    }
    /* Limits go back to their defaults with the context (a worker's, which
     * may live on, by being set back), the stack's cover of its
     * functions' local memory included. */
    for (i = 0; i < VCU__LIMS; i++) {
        if (cu->worker && cs->ctx[d] != NULL && cs->lim_known[d][i])
            VCU__CU(cu, cuCtxSetLimit, vcu__lim_id[i], cs->lim_base[d][i]);
        vcu__uncharge(cs, d, cs->lim_charge[d][i]);
        cs->lim_charge[d][i] = 0;
        cs->lim_known[d][i] = false;
    }
    cs->lmem[d] = 0;
    if (cs->ctx[d] != NULL) {
        vcu__pool_settle(cs, d);
        vcu__cur(cs, NULL);
        if (cu->worker) {
            vcu__wctx_put(cu, d);
        } else {
            cu->fn.cuCtxDestroy(cs->ctx[d]);
            vcu__ctx_uncharge(cu, cs->aslot, d);
        }
        cs->ctx[d] = NULL;
    }
}

void vcu__cuda_sess_cancel(vcu__cuda_sess_t *cs)
{
    vcu__gate_t *g;
    vcu_request_t *parked;

    if (cs == NULL)
        return;
    g = &cs->gate;
    pthread_mutex_lock(&g->mu);
    g->ending = 1;
    g->nq = 0;                      /* cookies nobody will run now */
    parked = g->parked;
    g->parked = NULL;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (parked != NULL)
        vcu__complete(parked, VCU_S_ECANCELED, 0);
}

void vcu__cuda_sess_free(vcu__cuda_sess_t *cs)
{
    vcu__gate_t *g;
    vcu__cb_t *cb, *n;
    uint32_t d;

    if (cs == NULL)
        return;
    g = &cs->gate;
    /* Release every trampoline and the parked wait before anything waits
     * for the GPU: a blocked trampoline would stall the synchronize below. */
    vcu__cuda_sess_cancel(cs);

    /* A pool destroyed with blocks still out is released once they are
     * freed, which the contexts' end does. */
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->mpool[d] == NULL)
            continue;
        if (cs->ctx[d] != NULL)
            vcu__cur(cs, cs->ctx[d]);
        VCU__CU(cs->cu, cuMemPoolDestroy, cs->mpool[d]);
        cs->mpool[d] = NULL;
    }
    for (d = 0; d < cs->cu->ndev; d++) {
        vcu__ctx_destroy(cs, d);
        vcu__uncharge(cs, d, cs->pool_charge[d]);  /* pools gone with the contexts */
        cs->pool_charge[d] = 0;
    }
    vcu__mods_free(cs, cs->cap_mods);   /* emptied by the contexts' end */
    cs->cap_mods = NULL;
    /* Contexts gone, and the waits' events with them: what is left of a
     * wait is memory; its request the core cancels. */
    while (cs->waits != NULL)
        vcu__wait_free(cs, cs->waits);
    for (d = 0; d < VCU_CU_MAX_DEVICES; d++)
        free(cs->pool[d].ev);

    /* Contexts are gone: CUDA starts no more trampolines; wait for the
     * ones still on their way out of the gate. */
    pthread_mutex_lock(&g->mu);
    while (g->ntramp > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);

    for (cb = g->persistent; cb != NULL; cb = n) {
        n = cb->next;
        free(cb);
    }
    free(g->queue);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    vcu__htab_fini(&cs->tab);
    vcu__pset_fini(&cs->allocs);
    vcu__out_free(cs->out);
    free(cs->op);
    /* Nothing of the session is left to give back: its host charge goes;
     * a slot it claimed (in-process) is free again, a worker's is the
     * daemon's to free, once the process is gone. */
    vcu__host_uncharge(cs, cs->hostres);
    if (cs->aowned)
        vcu__acct_release(cs->cu->acct, cs->aslot);
    pthread_mutex_destroy(&cs->hostmu);
    free(cs);
}

int vcu__cuda_sess_fence(vcu__cuda_sess_t *cs, vcu__cuda_wait_t **wait)
{
    vcu__cuda_t *cu;
    vcu__cuda_wait_t *w;
    CUresult first = CUDA_SUCCESS;
    uint32_t d;

    *wait = NULL;
    if (cs == NULL)
        return 0;
    cu = cs->cu;
    w = vcu__wait_new(cs);
    if (w != NULL)
        w->fence = 1;
    for (d = 0; d < cu->ndev; d++) {
        CUresult r;

        if (cs->ctx[d] == NULL)
            continue;
        r = vcu__cur(cs, cs->ctx[d]);
        if (r == CUDA_SUCCESS && (w == NULL || vcu__park_ctx(cs, w, d) != 0))
            r = cu->fn.cuCtxSynchronize();
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
            first = r;
    }
    if (first != CUDA_SUCCESS && cs->deferred == 0)
        cs->deferred = (uint32_t)first;
    if (w != NULL && w->nev == 0) {
        vcu__wait_free(cs, w);
        w = NULL;
    }
    *wait = w;
    return vcu__cu_err(first);
}

/* ---- host callback gate ------------------------------------------------- */

static void vcu__write_u64_resp(void *out, uint32_t result, uint64_t value)
{
    struct vcu_cu_u64_resp r;

    memset(&r, 0, sizeof(r));
    r.r.result = result;
    r.value = value;
    memcpy(out, &r, sizeof(r));
}

/* Frees a one-shot record, giving its bytes back to its session. */
static void vcu__cb_free(vcu__cb_t *cb)
{
    vcu__cuda_sess_t *cs = (vcu__cuda_sess_t *)((char *)cb->gate - offsetof(vcu__cuda_sess_t, gate));

    free(cb);
    vcu__mem_give(cs, sizeof(*cb));
}

/* Runs on a CUDA thread (or wherever the driver runs host functions). */
static void CUDA_CB vcu__cb_trampoline(void *arg)
{
    vcu__cb_t *cb = arg;
    vcu__gate_t *g = cb->gate;
    uint64_t cookie = cb->cookie;
    vcu__waiter_t w = { cookie, 0, NULL }, **pp;
    vcu_request_t *req = NULL;

    if (cb->oneshot)
        vcu__cb_free(cb);
    pthread_mutex_lock(&g->mu);
    if (g->ending) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    g->ntramp++;
    w.next = g->waiters;
    g->waiters = &w;
    if (g->parked != NULL) {
        req = g->parked;
        g->parked = NULL;
    } else {
        if (g->nq == g->capq) {
            size_t ncap = g->capq ? g->capq * 2 : 16;
            uint64_t *nq = realloc(g->queue, ncap * sizeof(*nq));

            if (nq != NULL) {
                g->queue = nq;
                g->capq = ncap;
            }
        }
        /* Without room the cookie is lost: the guest can only learn of it
         * by a WAIT that never returns, so give up on this callback. */
        if (g->nq < g->capq)
            g->queue[g->nq++] = cookie;
        else
            w.done = 1;
    }
    if (req != NULL) {
        pthread_mutex_unlock(&g->mu);
        vcu__write_u64_resp(vcu__resp_payload(req), CUDA_SUCCESS, cookie);
        vcu__complete(req, VCU_S_OK, sizeof(struct vcu_cu_u64_resp));
        pthread_mutex_lock(&g->mu);
    }
    while (!w.done && !g->ending)
        pthread_cond_wait(&g->cv, &g->mu);
    for (pp = &g->waiters; *pp != NULL; pp = &(*pp)->next)
        if (*pp == &w) {
            *pp = w.next;
            break;
        }
    if (--g->ntramp == 0 && g->ending)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int vcu__cuda_is_inline(uint32_t opcode)
{
    return opcode == VCU_OP_CU_CALLBACK_WAIT || opcode == VCU_OP_CU_CALLBACK_DONE;
}

/*
 * CU_CALLBACK_WAIT: the oldest reached cookie, or park until one is
 * reached.  One parked WAIT per session (the guest library has one
 * callback thread per session); a second gets CUDA_ERROR_INVALID_VALUE.
 * Inline replies carry no deferred error (that belongs to the worker).
 */
static uint32_t vcu__cb_wait(vcu__cuda_sess_t *cs, void *out, size_t out_cap, size_t *out_len,
                             vcu_request_t *req)
{
    vcu__gate_t *g = &cs->gate;
    uint64_t cookie;

    if (out_cap < sizeof(struct vcu_cu_u64_resp))
        return VCU_S_ERANGE;
    pthread_mutex_lock(&g->mu);
    if (g->nq > 0) {
        cookie = g->queue[0];
        memmove(g->queue, g->queue + 1, (g->nq - 1) * sizeof(*g->queue));
        g->nq--;
        pthread_mutex_unlock(&g->mu);
        vcu__write_u64_resp(out, CUDA_SUCCESS, cookie);
        *out_len = sizeof(struct vcu_cu_u64_resp);
        return VCU_S_OK;
    }
    if (g->ending) {
        pthread_mutex_unlock(&g->mu);
        *out_len = 0;
        return VCU_S_ECANCELED;
    }
    if (g->parked != NULL || req == NULL || req->resp_cap < sizeof(struct vcu_resp_hdr) ||
        vcu__resp_cap(req) < sizeof(struct vcu_cu_u64_resp)) {
        pthread_mutex_unlock(&g->mu);
        vcu__write_u64_resp(out, CUDA_ERROR_INVALID_VALUE, 0);
        *out_len = sizeof(struct vcu_cu_u64_resp);
        return VCU_S_OK;
    }
    g->parked = req;
    pthread_mutex_unlock(&g->mu);
    return VCU__PARKED;
}

/* CU_CALLBACK_DONE: releases the oldest trampoline blocked on the cookie. */
static uint32_t vcu__cb_done(vcu__cuda_sess_t *cs, const void *payload, void *out, size_t *out_len)
{
    vcu__gate_t *g = &cs->gate;
    struct vcu_cu_u64_req rq;
    struct vcu_cu_resp rp;
    vcu__waiter_t *w, *found = NULL;
    size_t i;

    memcpy(&rq, payload, sizeof(rq));
    pthread_mutex_lock(&g->mu);
    for (w = g->waiters; w != NULL; w = w->next)
        if (w->cookie == rq.value && !w->done)
            found = w;              /* list is newest first: keep the oldest */
    if (found != NULL) {
        found->done = 1;
        /* DONE without a WAIT: do not hand the cookie out later. */
        for (i = 0; i < g->nq; i++)
            if (g->queue[i] == rq.value) {
                memmove(g->queue + i, g->queue + i + 1, (g->nq - i - 1) * sizeof(*g->queue));
                g->nq--;
                break;
            }
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    memset(&rp, 0, sizeof(rp));
    rp.result = found != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    memcpy(out, &rp, sizeof(rp));
    *out_len = sizeof(rp);
    return VCU_S_OK;
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
    struct vcu_cu_mem_range_resp range;
    struct vcu_cu_function_resp fn;
    struct vcu_cu_func_attrs_resp fattr;
    struct vcu_cu_occupancy_resp occ;
    struct vcu_cu_capture_info_resp cap;
    struct vcu_cu_capture_graph_resp capg;
    struct vcu_cu_capture_deps_resp capd;
    struct vcu_cu_output_resp out;
    struct vcu_cu_tmap_resp tmap;
    struct vcu_cu_link_resp link;
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
    vcu__resp_t rb;
    CUresult res;
    /* Kernel parameters of a launch that fit (not cleared per request). */
    _Alignas(16) unsigned char pscratch[2048];
} vcu__op_t;

/* Sizes of each opcode's request and reply structs, from the one map. */
static size_t vcu__req_size(uint32_t op)
{
    switch (op) {
#define VCU__REQ_SZ(name, num, rq, rp) case VCU_OP_##name: return sizeof(struct rq);
        VCU_OP_MAP(VCU__REQ_SZ)
#undef VCU__REQ_SZ
    }
    return 0;
}

static size_t vcu__resp_size(uint32_t op)
{
    switch (op) {
#define VCU__RESP_SZ(name, num, rq, rp) case VCU_OP_##name: return sizeof(struct rp);
        VCU_OP_MAP(VCU__RESP_SZ)
#undef VCU__RESP_SZ
    }
    return 0;
}

/* Makes the request's device current; on failure the result says why. */
/* The capture interaction mode this thread was given here. */
static __thread CUstreamCaptureMode vcu__thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static int vcu__enter(vcu__op_t *o)
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

static uint32_t vcu__dev_of(const vcu__op_t *o)
{
    struct vcu_cu_hdr hd;

    memcpy(&hd, o->p, sizeof(hd));
    return hd.device;
}

/* Typed lookup; on failure the result is CUDA_ERROR_INVALID_HANDLE. */
static vcu__hent_t *vcu__get(vcu__op_t *o, uint64_t h, uint8_t type)
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

static int vcu__stream(vcu__op_t *o, uint64_t h, CUstream *out)
{
    vcu__hent_t *e;

    if (h == VCU_CU_STREAM_LEGACY) {
        *out = CU_STREAM_LEGACY;
        return 0;
    }
    if (h == VCU_CU_STREAM_PER_THREAD) {
        *out = CU_STREAM_PER_THREAD;
        return 0;
    }
    e = vcu__get(o, h, VCU__H_STREAM);
    if (e == NULL)
        return -1;
    *out = e->u.st;
    return 0;
}

#define VCU__STREAM(o, var, h)              \
    CUstream var;                           \
    if (vcu__stream((o), (h), &var) != 0)   \
    return VCU_S_OK

/*
 * New handle for a fresh CUDA object; NULL (result OUT_OF_MEMORY) over
 * quota or budget.  The table's growth is counted in the budget for the
 * session's life (it never shrinks).  Entries may move: pointers to
 * other entries are stale after it.
 */
static vcu__hent_t *vcu__new(vcu__op_t *o, uint8_t type, uint64_t *h)
{
    vcu__cuda_sess_t *cs = o->cs;
    size_t grow = vcu__htab_grow_bytes(&cs->tab);
    vcu__hent_t *e = NULL;

    *h = 0;
    if (vcu__mem_take(cs, grow) == 0) {
        *h = vcu__htab_add(&cs->tab, type, vcu__dev_of(o), &e);
        if (*h == 0)
            vcu__mem_give(cs, grow);
    }
    if (*h == 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    return e;
}

/* The request's one segment, which must have the given direction. */
static const vcu_segment_t *vcu__seg(const vcu__op_t *o, uint32_t dir)
{
    if (o->nsegs != 1 || VCU_SEG_DIR(o->segs[0].flags) != dir)
        return NULL;
    return &o->segs[0];
}

static void vcu__gather(const vcu_segment_t *s, void *dst, size_t len)
{
    size_t off = 0;
    unsigned int i;

    for (i = 0; i < s->iovcnt && off < len; i++) {
        size_t n = s->iov[i].iov_len < len - off ? s->iov[i].iov_len : len - off;

        memcpy((char *)dst + off, s->iov[i].iov_base, n);
        off += n;
    }
}

static void vcu__scatter(const vcu_segment_t *s, const void *src, size_t len)
{
    size_t off = 0;
    unsigned int i;

    for (i = 0; i < s->iovcnt && off < len; i++) {
        size_t n = s->iov[i].iov_len < len - off ? s->iov[i].iov_len : len - off;

        memcpy(s->iov[i].iov_base, (const char *)src + off, n);
        off += n;
    }
}

/*
 * Makes the request wait, without blocking, for the work issued on st so
 * far (device of the request, current).  -1 where it cannot: the caller
 * synchronizes instead.
 */
static int vcu__park_stream(vcu__op_t *o, CUstream st)
{
    if (vcu__capturing(o->cu, st))
        return -1;
    if (o->wait == NULL && (o->wait = vcu__wait_new(o->cs)) == NULL)
        return -1;
    if (vcu__wait_record(o->cs, o->wait, vcu__dev_of(o), st) != CUDA_SUCCESS) {
        if (o->wait->nev == 0 && o->wait->gev == NULL) {
            vcu__wait_free(o->cs, o->wait);
            o->wait = NULL;
        }
        return -1;
    }
    return 0;
}

/* --- device and context --- */

static uint32_t vcu__op_CU_DRIVER_INFO(vcu__op_t *o)
{
    o->rb.drv.driver_version = (uint32_t)o->cu->driver_version;
    o->rb.drv.device_count = o->cu->ndev;
    o->res = CUDA_SUCCESS;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_DEVICE_INFO(vcu__op_t *o)
{
    vcu__cuda_t *cu = o->cu;
    struct vcu_cu_device_info_resp *r = &o->rb.dev;
    uint32_t d = vcu__dev_of(o), n, i;
    CUdevice dev;
    CUuuid u;
    size_t total = 0;

    if (d >= cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return VCU_S_OK;
    }
    dev = cu->dev[d];
    o->res = VCU__CU(cu, cuDeviceGetName, r->name, (int)sizeof(r->name), dev);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    r->name[sizeof(r->name) - 1] = '\0';
    if (VCU__CU(cu, cuDeviceGetUuid, &u, dev) == CUDA_SUCCESS)
        memcpy(r->uuid, u.bytes, sizeof(r->uuid));
    if (VCU__CU(cu, cuDeviceTotalMem, &total, dev) == CUDA_SUCCESS)
        r->total_mem = total;
    /* The VM's slice: what cuDeviceTotalMem and totalGlobalMem say in
     * the guest (as CU_MEM_GET_INFO's total). */
    if (cu->acct != NULL && vcu__acct_quota(cu->acct) != 0 &&
        vcu__acct_quota(cu->acct) < (uint64_t)r->total_mem)
        r->total_mem = vcu__acct_quota(cu->acct);
    r->host_ordinal = (uint32_t)cu->host_ordinal[d];
    n = CU_DEVICE_ATTRIBUTE_MAX < VCU_CU_NUM_DEV_ATTRS ? (uint32_t)CU_DEVICE_ATTRIBUTE_MAX
                                                        : VCU_CU_NUM_DEV_ATTRS;
    r->num_attrs = n;
    for (i = 1; i < n; i++) {
        int v = 0;

        /* The guest library substitutes its own virtual PCI location. */
        if (i == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID || i == CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID ||
            i == CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)
            continue;
        if (VCU__CU(cu, cuDeviceGetAttribute, &v, (CUdevice_attribute)i, dev) == CUDA_SUCCESS)
            r->attrs[i] = (uint32_t)v;
    }
    /* Packed mode: the SMs the VM's contexts run on (the driver keeps
     * answering the whole GPU's count under an execution affinity). */
    if (cu->sms != 0 && CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT < n)
        r->attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = cu->sms;
    return VCU_S_OK;
}

/*
 * What the guest is told of device d's memory: with a quota, total is
 * the quota (never more than the GPU has) and free what the VM's charges
 * leave of it (never more than the GPU has free); without, the GPU's.
 */
static void vcu__mem_view(vcu__cuda_sess_t *cs, uint32_t d, size_t *fr, size_t *tot)
{
    vcu_account_t *a = cs->cu->acct;
    uint64_t used;

    if (a == NULL || vcu__acct_quota(a) == 0)
        return;
    vcu__pool_settle(cs, d);
    if (vcu__acct_quota(a) < *tot)
        *tot = (size_t)vcu__acct_quota(a);
    used = vcu__acct_used(a, d);
    if (used >= *tot)
        *fr = 0;
    else if (*tot - used < *fr)
        *fr = (size_t)(*tot - used);
}

static uint32_t vcu__op_CU_MEM_GET_INFO(vcu__op_t *o)
{
    size_t fr = 0, tot = 0;

    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemGetInfo, &fr, &tot);
    if (o->res == CUDA_SUCCESS)
        vcu__mem_view(o->cs, vcu__dev_of(o), &fr, &tot);
    o->rb.mem.free = fr;
    o->rb.mem.total = tot;
    return VCU_S_OK;
}

/*
 * The host's NVIDIA kernel driver version as nvidia-smi shows it
 * ("580.159.04"), read once from the module's sysfs file
 * ($VCU_NVIDIA_VERSION_FILE instead, for tests); digits and dots only,
 * else "".
 */
static char vcu__nv_version[16];
static pthread_once_t vcu__nv_version_once = PTHREAD_ONCE_INIT;

static void vcu__nv_version_read(void)
{
    const char *path = getenv("VCU_NVIDIA_VERSION_FILE");
    char buf[32] = "";
    FILE *f = fopen(path != NULL ? path : "/sys/module/nvidia/version", "re");
    size_t n;

    if (f == NULL)
        return;
    if (fgets(buf, sizeof(buf), f) == NULL)
        buf[0] = '\0';
    fclose(f);
    n = strcspn(buf, "\n");
    if (n == 0 || n >= sizeof(vcu__nv_version) || strspn(buf, "0123456789.") != n)
        return;
    memcpy(vcu__nv_version, buf, n);
    vcu__nv_version[n] = '\0';
}

static void vcu__slice_driver_version(struct vcu_cu_slice_info_resp *r)
{
    pthread_once(&vcu__nv_version_once, vcu__nv_version_read);
    memcpy(r->driver_version, vcu__nv_version, sizeof(r->driver_version));
}

/*
 * From the VM's account: its quota, what is charged to it (each live
 * session's part), its workers' context overhead, and the sessions that
 * ended by a GPU fault.  Without one (a backend on its own: loopback,
 * tests) the slice is the whole GPU and this session the only one known.
 */
/*
 * The VM's GPU utilization, percent of the last second: the host driver's
 * own per-process SM utilization (NVML's process samples), summed over
 * the VM's workers (the account's pids), so the guest's NVML reports the
 * VM's use of the GPU, not the GPU's.  NVML is the host's
 * libnvidia-ml.so.1, loaded at the first ask; the few declarations are
 * NVML's stable ABI (nvml.h: nvmlProcessUtilizationSample_t, NVML 7 on).
 * VCU_SLICE_UNKNOWN32 where it cannot tell (no host NVML: the stand-in).
 */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;   /* us since the epoch */
    unsigned int smUtil, memUtil, encUtil, decUtil;
} vcu__nvml_sample_t;

static struct {
    pthread_once_t once;
    int ok;
    int (*by_uuid)(const char *uuid, void **dev);
    int (*proc_util)(void *dev, vcu__nvml_sample_t *s, unsigned int *n,
                     unsigned long long since);
} vcu__nvml = { .once = PTHREAD_ONCE_INIT };

static void vcu__nvml_load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*init)(void);

    if (lib == NULL)
        return;
    init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    vcu__nvml.by_uuid = (int (*)(const char *, void **))dlsym(lib, "nvmlDeviceGetHandleByUUID");
    vcu__nvml.proc_util = (int (*)(void *, vcu__nvml_sample_t *, unsigned int *,
                                   unsigned long long))dlsym(lib,
                                                             "nvmlDeviceGetProcessUtilization");
    vcu__nvml.ok = init != NULL && vcu__nvml.by_uuid != NULL && vcu__nvml.proc_util != NULL &&
                   init() == 0;
}

static uint32_t vcu__vm_util(vcu__op_t *o, uint32_t d, vcu_account_t *a)
{
    enum { MAX_PIDS = 256 };
    uint32_t pids[MAX_PIDS], npids = 0, sum = 0, i, j;
    uint64_t usum[MAX_PIDS] = { 0 }, ucnt[MAX_PIDS] = { 0 };
    vcu__nvml_sample_t *smp = NULL;
    unsigned int n = 0;
    struct timespec ts;
    CUuuid u;
    char uuid[48];
    void *dev = NULL;
    int r;

    pthread_once(&vcu__nvml.once, vcu__nvml_load);
    if (!vcu__nvml.ok || VCU__CU(o->cu, cuDeviceGetUuid, &u, o->cu->dev[d]) != CUDA_SUCCESS)
        return VCU_SLICE_UNKNOWN32;
    vcu__uuid_str(&u, uuid, sizeof(uuid));
    if (vcu__nvml.by_uuid(uuid, &dev) != 0)
        return VCU_SLICE_UNKNOWN32;
    for (i = 0; i < a->nslots && npids < MAX_PIDS; i++)
        if (atomic_load(&a->slot[i].session) != 0 && atomic_load(&a->slot[i].pid) != 0)
            pids[npids++] = atomic_load(&a->slot[i].pid);
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Samples of the last second (NVML keeps about 1/6 s each). */
    /* The buffer's size first (NVML_ERROR_INSUFFICIENT_SIZE, 7, or
     * success); NVML_ERROR_NOT_FOUND (6): no process ran lately. */
    r = vcu__nvml.proc_util(dev, NULL, &n, 0);
    if (r == 6 || ((r == 0 || r == 7) && n == 0))
        return 0;
    if (r != 0 && r != 7)
        return VCU_SLICE_UNKNOWN32;
    if (n > 4096)
        n = 4096;
    smp = calloc(n, sizeof(*smp));
    if (smp == NULL)
        return VCU_SLICE_UNKNOWN32;
    r = vcu__nvml.proc_util(dev, smp, &n,
                            (unsigned long long)ts.tv_sec * 1000000ull +
                                (unsigned long long)ts.tv_nsec / 1000 - 1000000ull);
    if (r != 0) {
        free(smp);
        /* NVML_ERROR_NOT_FOUND: no sample in the window. */
        return r == 6 ? 0 : VCU_SLICE_UNKNOWN32;
    }
    for (i = 0; i < n; i++)
        for (j = 0; j < npids; j++)
            if (smp[i].pid == pids[j] && smp[i].smUtil <= 100) {
                usum[j] += smp[i].smUtil;
                ucnt[j]++;
            }
    free(smp);
    for (j = 0; j < npids; j++)
        if (ucnt[j] > 0)
            sum += (uint32_t)(usum[j] / ucnt[j]);
    return sum > 100 ? 100 : sum;
}

static uint32_t vcu__op_CU_SLICE_INFO(vcu__op_t *o)
{
    struct vcu_cu_slice_info_resp *r = &o->rb.slice;
    vcu_account_t *a = o->cu->acct;
    size_t fr = 0, tot = 0;
    uint32_t d = vcu__dev_of(o), i, n = 0;
    int sms = 0;

    vcu__slice_driver_version(r);
    if (a != NULL) {
        /* From the account, with no context of its own: a guest's NVML
         * (nvidia-smi, a monitoring agent) costs the GPU nothing. */
        if (d >= o->cu->ndev) {
            o->res = CUDA_ERROR_INVALID_DEVICE;
            return VCU_S_OK;
        }
        if (o->cs->ctx[d] != NULL && vcu__ctx(o->cs, d) == CUDA_SUCCESS)
            vcu__pool_settle(o->cs, d);
        o->res = VCU__CU(o->cu, cuDeviceTotalMem, &tot, o->cu->dev[d]);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
        if (vcu__acct_quota(a) != 0 && vcu__acct_quota(a) < tot)
            tot = (size_t)vcu__acct_quota(a);
        if (VCU__CU(o->cu, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                    o->cu->dev[d]) != CUDA_SUCCESS)
            sms = 0;
        r->mem_quota = vcu__acct_quota(a);
        r->mem_total = tot;
        r->mem_used = vcu__acct_used(a, d);
        r->ctx_bytes = vcu__acct_ctx(a, d);
        /* The VM's weight, as its QEMU wrote it in the group, clamped as
         * the scheduler reads it: for reporting only. */
        r->compute_share = o->cu->sched != NULL && o->cu->sched->vm_slot >= 0
                               ? vcu__sched_weight(&o->cu->sched->vm[o->cu->sched->vm_slot])
                               : 0;
        r->sm_count = o->cu->sms != 0 ? o->cu->sms : (uint32_t)sms;
        r->util_percent = vcu__vm_util(o, d, a);
        r->faults = atomic_load(&a->hdr->faults);
        for (i = 0; i < a->nslots && n < VCU_SLICE_MAX_SESSIONS; i++) {
            uint64_t id = atomic_load(&a->slot[i].session);

            if (id == 0)
                continue;
            r->sessions[n].session = id;
            r->sessions[n].mem_used = atomic_load(&a->slot[i].charged[d]);
            r->sessions[n].ctx_bytes = atomic_load(&a->slot[i].ctx[d]);
            r->sessions[n].gpu_time_ns = VCU_SLICE_UNKNOWN64;
            n++;
        }
        r->num_sessions = n;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemGetInfo, &fr, &tot);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    if (VCU__CU(o->cu, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                o->cu->dev[vcu__dev_of(o)]) != CUDA_SUCCESS)
        sms = 0;
    r->mem_quota = 0;
    r->mem_total = tot;
    r->mem_used = VCU_SLICE_UNKNOWN64;
    r->ctx_bytes = VCU_SLICE_UNKNOWN64;
    r->compute_share = 0;
    r->sm_count = o->cu->sms != 0 ? o->cu->sms : (uint32_t)sms;
    r->util_percent = VCU_SLICE_UNKNOWN32;
    r->faults = VCU_SLICE_UNKNOWN64;
    r->num_sessions = 1;
    r->sessions[0].session = o->h->session;
    r->sessions[0].mem_used = VCU_SLICE_UNKNOWN64;
    r->sessions[0].ctx_bytes = VCU_SLICE_UNKNOWN64;
    r->sessions[0].gpu_time_ns = VCU_SLICE_UNKNOWN64;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_CTX_SYNCHRONIZE(vcu__op_t *o)
{
    VCU__ENTER(o);
    o->wait = vcu__wait_new(o->cs);
    if (o->wait != NULL && vcu__park_ctx(o->cs, o->wait, vcu__dev_of(o)) == 0)
        return VCU_S_OK;
    if (o->wait != NULL) {
        vcu__wait_free(o->cs, o->wait);
        o->wait = NULL;
    }
    o->res = o->cu->fn.cuCtxSynchronize();
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_CTX_RESET(vcu__op_t *o)
{
    uint32_t d = vcu__dev_of(o);

    if (d >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return VCU_S_OK;
    }
    vcu__ctx_destroy(o->cs, d);
    o->res = CUDA_SUCCESS;
    return VCU_S_OK;
}

/*
 * Synchronizes every context of the session, as a blocking call (only a
 * blocking call makes sure the driver has written the contexts' device
 * printf output).  The first failure.
 */
static CUresult vcu__sync_all(vcu__cuda_sess_t *cs)
{
    CUresult r, first = CUDA_SUCCESS;
    uint32_t d;

    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] == NULL)
            continue;
        r = vcu__cur(cs, cs->ctx[d]);
        if (r == CUDA_SUCCESS)
            r = cs->cu->fn.cuCtxSynchronize();
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS)
            first = r;
    }
    return first;
}

static uint32_t vcu__op_CU_TAKE_OUTPUT(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    size_t room = o->cap - sizeof(struct vcu_cu_output_resp), n = 0;
    int more = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.value & ~(uint64_t)VCU_CU_TAKE_F_SYNC)
        return VCU_S_EINVAL;
    if (o->cs->out == NULL)
        return VCU_S_OK;            /* nothing captured: len 0 */
    if (rq.value & VCU_CU_TAKE_F_SYNC) {
        vcu__out_sync_begin(o->cs->out);
        o->res = vcu__sync_all(o->cs);
        vcu__out_sync_end(o->cs->out);
    }
    if (room > VCU_MAX_PAYLOAD - sizeof(struct vcu_cu_output_resp))
        room = VCU_MAX_PAYLOAD - sizeof(struct vcu_cu_output_resp);
    n = vcu__out_take(o->cs->out, o->out + sizeof(struct vcu_cu_output_resp), room, &more);
    o->rb.out.len = (uint32_t)n;
    o->rb.out.more = (uint32_t)more;
    o->len = sizeof(struct vcu_cu_output_resp) + n;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_CTX_SET_FLAGS(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    uint32_t d = vcu__dev_of(o);

    memcpy(&rq, o->p, sizeof(rq));
    if (d >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return VCU_S_OK;
    }
    if (rq.value & ~(uint64_t)VCU__CTX_GUEST_FLAGS) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (o->cs->ctx[d] != NULL) {
        VCU__ENTER(o);
        o->res = VCU__CU(o->cu, cuCtxSetFlags, (unsigned int)rq.value);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
    }
    o->cs->ctx_flags[d] = (unsigned int)rq.value;
    o->res = CUDA_SUCCESS;
    return VCU_S_OK;
}

/*
 * GPU memory a stack limit of v bytes per thread makes the driver reserve
 * on device d, with the margin of VCU__STACK_MARGIN; above VCU__ACCT_MAX
 * for a size no GPU has.
 */
static uint64_t vcu__stack_bytes(const vcu__cuda_t *cu, uint32_t d, uint64_t v)
{
    uint64_t t = cu->stack_threads[d] + cu->stack_threads[d] / VCU__STACK_MARGIN;

    if (t == 0 || v > VCU__ACCT_MAX / t)
        return VCU__ACCT_MAX + 1;
    return v * t;
}

/* What the charge of limit k is at value v above base (v, base: bytes). */
static uint64_t vcu__lim_cost(const vcu__cuda_t *cu, uint32_t d, int k, uint64_t v, uint64_t base)
{
    if (v <= base)
        return 0;
    if (k == VCU__LIM_STACK)
        return vcu__grain(vcu__stack_bytes(cu, d, v) - vcu__stack_bytes(cu, d, base));
    return vcu__grain(v - base);
}

/* Reads limit k of device d's context (current) the first time the
 * account needs it: its value before the guest's first set, which the
 * charge counts from, and its value now until then. */
static CUresult vcu__lim_learn(vcu__cuda_sess_t *cs, uint32_t d, int k)
{
    size_t v = 0;
    CUresult r;

    if (cs->lim_known[d][k])
        return CUDA_SUCCESS;
    r = VCU__CU(cs->cu, cuCtxGetLimit, &v, vcu__lim_id[k]);
    if (r != CUDA_SUCCESS)
        return r;
    cs->lim_base[d][k] = v;
    cs->lim_val[d][k] = v;
    cs->lim_known[d][k] = true;
    return CUDA_SUCCESS;
}

/*
 * The malloc heap, the printf FIFO and the threads' stacks are GPU memory
 * the context holds for the guest: what is set above their values before
 * the first set (part of the context's own cost, cu->ctx_bytes) is
 * charged before the driver is asked, like an allocation, and given back
 * when they are lowered or the context ends.  A stack limit is also
 * bounded outright: one whose whole reservation passes the VM's quota
 * (with none, the device's memory) is refused, as the driver refuses one
 * it cannot reserve, unless it is no more than the limit already holds.
 * The stack limit is never set below the local memory of the functions
 * handed out in the context (cs->lmem, vcu__stack_cover): the driver
 * would grow it back, uncharged, at their next launch.  Device d's
 * context is made current; the result is the guest's.
 */
static CUresult vcu__lim_set(vcu__cuda_sess_t *cs, uint32_t d, CUlimit lim, uint64_t value)
{
    vcu__cuda_t *cu = cs->cu;
    uint64_t ch, old, cap = 0;
    size_t tot = 0;
    CUresult r;
    int k;

    vcu__grun_drop(cs, d);
    r = vcu__cur(cs, cs->ctx[d]);   /* the drop may have switched */
    if (r != CUDA_SUCCESS)
        return r;
    k = lim == CU_LIMIT_MALLOC_HEAP_SIZE   ? VCU__LIM_HEAP
        : lim == CU_LIMIT_PRINTF_FIFO_SIZE ? VCU__LIM_FIFO
        : lim == CU_LIMIT_STACK_SIZE       ? VCU__LIM_STACK
                                           : -1;
    if (k == VCU__LIM_STACK) {
        if (value < cs->lmem[d])
            value = cs->lmem[d];
        if (cu->acct != NULL)
            cap = vcu__acct_quota(cu->acct);
        if (cap == 0 && VCU__CU(cu, cuDeviceTotalMem, &tot, cu->dev[d]) == CUDA_SUCCESS)
            cap = tot;
        if (cap == 0 || cap > VCU__ACCT_MAX)
            cap = VCU__ACCT_MAX;
        if (vcu__stack_bytes(cu, d, value) > cap &&
            !(cs->lim_known[d][k] && value <= cs->lim_val[d][k]))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (k < 0 || cu->acct == NULL)
        return VCU__CU(cu, cuCtxSetLimit, lim, (size_t)value);
    r = vcu__lim_learn(cs, d, k);
    if (r != CUDA_SUCCESS)
        return r;
    ch = vcu__lim_cost(cu, d, k, value, cs->lim_base[d][k]);
    old = cs->lim_charge[d][k];
    if (ch > VCU__ACCT_MAX || (ch > old && vcu__charge(cs, d, ch - old) != 0))
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = VCU__CU(cu, cuCtxSetLimit, lim, (size_t)value);
    if (r != CUDA_SUCCESS) {
        if (ch > old)
            vcu__uncharge(cs, d, ch - old);
        return r;
    }
    if (ch < old)
        vcu__uncharge(cs, d, old - ch);
    cs->lim_charge[d][k] = ch;
    cs->lim_val[d][k] = (size_t)value;
    return CUDA_SUCCESS;
}

static uint32_t vcu__op_CU_CTX_SET_LIMIT(vcu__op_t *o)
{
    struct vcu_cu_limit_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = vcu__lim_set(o->cs, vcu__dev_of(o), (CUlimit)rq.limit, rq.value);
    return VCU_S_OK;
}

/*
 * A kernel whose local memory per thread passes its context's stack
 * limit makes the driver grow the context's local memory at its launch
 * to that size for every thread the device holds at once (as the stack
 * limit's, vcu__stack_bytes: 256 KiB a thread is 67 GiB on an H200), and
 * keep it.  On an H200 with driver 580 the size it grew to was exactly
 * LOCAL_SIZE_BYTES, callees' frames included, and a stack limit set to
 * that first left the launch nothing to grow (tests/gpu/probe-lmem.py; a
 * recursive kernel reports 0 and is not grown for: the guest sets the
 * limit it needs, charged).  So before a function is handed out, device
 * d's stack limit (the context of its module) is raised to cover its
 * local memory, through vcu__lim_set: charged as a guest's set is, kept
 * at least that (cs->lmem) while the context lives, given back with the
 * context; the driver then has nothing to grow at the launch, and what it
 * reserves is what is charged.  Past the VM's quota the lookup fails as
 * out of memory.  Here and not at the launch: every way to a launch
 * from the host (a launch, a batch, a run made a graph, a graph's kernel
 * node, a captured launch; the guest library's cuLibraryGetKernel and
 * cuKernelGetFunction too) starts with a function handed out here, while
 * launches are stream-ordered, mostly sent without a reply and their
 * errors deferred, so a check there would cost every launch and fail far
 * from its cause.  Not covered: a kernel that launches others from the
 * device grows the stack at its launch for them, past its own local size
 * (measured, docs/design.md "Memory quota": an open hole).
 * A program sees the error from the runtime call that looked the kernel
 * up (NVIDIA's runtime does so as it first uses a kernel: a launch, an
 * attribute query), as cudaErrorMemoryAllocation.  Without an account
 * nothing is charged and the driver grows the limit itself, as it does
 * natively.
 */
static CUresult vcu__stack_cover(vcu__cuda_sess_t *cs, uint32_t d, CUfunction f)
{
    vcu__cuda_t *cu = cs->cu;
    int ls = 0;
    CUresult r;

    if (cu->acct == NULL)
        return CUDA_SUCCESS;
    r = VCU__CU(cu, cuFuncGetAttribute, &ls, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
    if (r != CUDA_SUCCESS || ls <= 0 || (size_t)ls <= cs->lmem[d])
        return r;
    r = vcu__ctx(cs, d);
    if (r == CUDA_SUCCESS)
        r = vcu__lim_learn(cs, d, VCU__LIM_STACK);
    if (r == CUDA_SUCCESS && (size_t)ls > cs->lim_val[d][VCU__LIM_STACK])
        r = vcu__lim_set(cs, d, CU_LIMIT_STACK_SIZE, (uint64_t)ls);
    if (r == CUDA_SUCCESS)
        cs->lmem[d] = (size_t)ls;
    return r;
}

static uint32_t vcu__op_CU_GET_DEFERRED_ERROR(vcu__op_t *o)
{
    o->res = (CUresult)o->cs->deferred;
    o->cs->deferred = 0;
    return VCU_S_OK;
}

/* --- memory --- */

/* Records p, charged ch bytes; on failure frees it (the caller gives
 * the charge back). */
static int vcu__track(vcu__op_t *o, CUdeviceptr p, uint32_t flags, uint64_t ch)
{
    uint64_t v = vcu__dev_of(o) | flags | ((ch / VCU__ACCT_GRAIN) << VCU__ALLOC_SHIFT);

    if (p == 0 || vcu__pset_add(&o->cs->allocs, p, v) == 0)
        return 0;
    o->cu->fn.cuMemFree(p);
    o->res = CUDA_ERROR_OUT_OF_MEMORY;
    return -1;
}

/* Charged before the driver is asked: past the VM's quota the guest gets
 * CUDA_ERROR_OUT_OF_MEMORY, as from a full GPU, and nothing else
 * changes.  Size 0 charges nothing (the driver refuses it). */
static uint32_t vcu__op_CU_MEM_ALLOC(vcu__op_t *o)
{
    struct vcu_cu_mem_alloc_req rq;
    CUdeviceptr p = 0;
    uint32_t d = vcu__dev_of(o);
    uint64_t ch;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    ch = vcu__grain(rq.size);
    if (ch > VCU__ACCT_MAX || vcu__charge(o->cs, d, ch) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = o->cu->fn.cuMemAlloc(&p, (size_t)rq.size);
    if (o->res == CUDA_SUCCESS && vcu__track(o, p, 0, ch) == 0) {
        o->rb.u64.value = p;
        if (p == 0)
            vcu__uncharge(o->cs, d, ch);
        return VCU_S_OK;
    }
    vcu__uncharge(o->cs, d, ch);
    return VCU_S_OK;
}

/* Only pointers this session allocated may be freed (CUDA would refuse
 * others anyway; pool memory, though, is not bound to one context). */
static int vcu__untrack(vcu__op_t *o, CUdeviceptr p, uint64_t *val)
{
    if (!vcu__pset_find(&o->cs->allocs, p, val)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return -1;
    }
    return 0;
}

static uint32_t vcu__op_CU_MEM_FREE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    uint64_t v = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (vcu__untrack(o, rq.value, &v) != 0)
        return VCU_S_OK;
    o->res = o->cu->fn.cuMemFree((CUdeviceptr)rq.value);
    if (o->res == CUDA_SUCCESS) {
        vcu__pset_del(&o->cs->allocs, rq.value);
        if (v & VCU__ALLOC_ASYNC) {
            o->cs->pool_live[VCU__ALLOC_DEV(v)] -= VCU__ALLOC_CHARGE(v);
            vcu__pool_settle(o->cs, VCU__ALLOC_DEV(v));
        } else {
            vcu__uncharge(o->cs, VCU__ALLOC_DEV(v), VCU__ALLOC_CHARGE(v));
        }
    }
    return VCU_S_OK;
}

static uint32_t vcu__memcpy_host(vcu__op_t *o, int htod)
{
    struct vcu_cu_memcpy_req rq;
    const vcu_segment_t *s;
    CUstream st = NULL;
    int async, use_async, issued = 0;
    uint64_t off = 0;
    unsigned int i;
    CUresult r = CUDA_SUCCESS;

    memcpy(&rq, o->p, sizeof(rq));
    async = (rq.flags & VCU_CU_MEMCPY_F_ASYNC) != 0;
    if (rq.flags & ~VCU_CU_MEMCPY_F_ASYNC)
        return VCU_S_EINVAL;
    if (rq.size == 0 && o->nsegs == 0) {
        o->res = CUDA_SUCCESS;
        return VCU_S_OK;
    }
    s = vcu__seg(o, htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE);
    if (s == NULL || s->len != rq.size)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    if (async && vcu__stream(o, rq.stream, &st) != 0)
        return VCU_S_OK;
    /* A synchronous copy is issued where the blocking call would run,
     * on the legacy stream, and waited for without blocking. */
    use_async = async || (htod ? o->cu->fn.cuMemcpyHtoDAsync != NULL
                               : o->cu->fn.cuMemcpyDtoHAsync != NULL);
    if (!async)
        st = CU_STREAM_LEGACY;
    for (i = 0; i < s->iovcnt && r == CUDA_SUCCESS; i++) {
        CUdeviceptr dp = (CUdeviceptr)((htod ? rq.dst : rq.src) + off);
        size_t n = s->iov[i].iov_len;

        if (n == 0)
            continue;
        if (htod)
            r = use_async ? VCU__CU(o->cu, cuMemcpyHtoDAsync, dp, s->iov[i].iov_base, n, st)
                          : o->cu->fn.cuMemcpyHtoD(dp, s->iov[i].iov_base, n);
        else
            r = use_async ? VCU__CU(o->cu, cuMemcpyDtoHAsync, s->iov[i].iov_base, dp, n, st)
                          : o->cu->fn.cuMemcpyDtoH(s->iov[i].iov_base, dp, n);
        if (r == CUDA_SUCCESS)
            issued = 1;
        off += n;
    }
    /* The guest's pages are mapped only until the reply: nothing may
     * touch them after it, so the reply waits for the copy, unless the
     * guest keeps them until its next SESSION_FENCE (stable). */
    if (issued && use_async && (!async || !(s->flags & VCU_SEG_F_STABLE)) &&
        vcu__park_stream(o, st) != 0) {
        CUresult r2 = o->cu->fn.cuStreamSynchronize(st);

        if (r == CUDA_SUCCESS)
            r = r2;
    }
    o->res = r;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_MEMCPY_HTOD(vcu__op_t *o)
{
    return vcu__memcpy_host(o, 1);
}

static uint32_t vcu__op_CU_MEMCPY_DTOH(vcu__op_t *o)
{
    return vcu__memcpy_host(o, 0);
}

static uint32_t vcu__op_CU_MEMCPY_DTOD(vcu__op_t *o)
{
    struct vcu_cu_memcpy_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    if (o->nsegs != 0 || (rq.flags & ~VCU_CU_MEMCPY_F_ASYNC))
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    if (rq.flags & VCU_CU_MEMCPY_F_ASYNC) {
        VCU__STREAM(o, st, rq.stream);
        o->res = VCU__CU(o->cu, cuMemcpyDtoDAsync, rq.dst, rq.src, (size_t)rq.size, st);
    } else if (o->cu->fn.cuMemcpyDtoDAsync != NULL) {
        /* Synchronous: on the legacy stream, waited for by the core. */
        o->res = o->cu->fn.cuMemcpyDtoDAsync(rq.dst, rq.src, (size_t)rq.size, CU_STREAM_LEGACY);
        if (o->res == CUDA_SUCCESS && vcu__park_stream(o, CU_STREAM_LEGACY) != 0)
            o->res = o->cu->fn.cuStreamSynchronize(CU_STREAM_LEGACY);
    } else {
        o->res = VCU__CU(o->cu, cuMemcpyDtoD, rq.dst, rq.src, (size_t)rq.size);
    }
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_MEMSET(vcu__op_t *o)
{
    struct vcu_cu_memset_req rq;
    vcu__cuda_t *cu = o->cu;
    CUstream st = NULL;
    int async;
    size_t w, hgt, pitch;

    memcpy(&rq, o->p, sizeof(rq));
    if (o->nsegs != 0 || (rq.flags & ~VCU_CU_MEMCPY_F_ASYNC) ||
        (rq.elem_size != 1 && rq.elem_size != 2 && rq.elem_size != 4))
        return VCU_S_EINVAL;
    async = (rq.flags & VCU_CU_MEMCPY_F_ASYNC) != 0;
    w = (size_t)rq.width;
    hgt = (size_t)rq.height;
    pitch = (size_t)rq.pitch;
    VCU__ENTER(o);
    if (async && vcu__stream(o, rq.stream, &st) != 0)
        return VCU_S_OK;
    if (hgt == 1) {
        switch (rq.elem_size) {
        case 1:
            o->res = async ? VCU__CU(cu, cuMemsetD8Async, rq.dst, (unsigned char)rq.value, w, st)
                           : VCU__CU(cu, cuMemsetD8, rq.dst, (unsigned char)rq.value, w);
            break;
        case 2:
            o->res = async ? VCU__CU(cu, cuMemsetD16Async, rq.dst, (unsigned short)rq.value, w, st)
                           : VCU__CU(cu, cuMemsetD16, rq.dst, (unsigned short)rq.value, w);
            break;
        default:
            o->res = async ? VCU__CU(cu, cuMemsetD32Async, rq.dst, rq.value, w, st)
                           : VCU__CU(cu, cuMemsetD32, rq.dst, rq.value, w);
            break;
        }
    } else {
        switch (rq.elem_size) {
        case 1:
            o->res = async ? VCU__CU(cu, cuMemsetD2D8Async, rq.dst, pitch, (unsigned char)rq.value, w, hgt, st)
                           : VCU__CU(cu, cuMemsetD2D8, rq.dst, pitch, (unsigned char)rq.value, w, hgt);
            break;
        case 2:
            o->res = async ? VCU__CU(cu, cuMemsetD2D16Async, rq.dst, pitch, (unsigned short)rq.value, w, hgt, st)
                           : VCU__CU(cu, cuMemsetD2D16, rq.dst, pitch, (unsigned short)rq.value, w, hgt);
            break;
        default:
            o->res = async ? VCU__CU(cu, cuMemsetD2D32Async, rq.dst, pitch, rq.value, w, hgt, st)
                           : VCU__CU(cu, cuMemsetD2D32, rq.dst, pitch, rq.value, w, hgt);
            break;
        }
    }
    return VCU_S_OK;
}

/* Bytes rows of width at pitch span, or 0 with *bad set on overflow. */
static uint64_t vcu__span(uint64_t pitch, uint64_t width, uint64_t height, int *bad)
{
    uint64_t rows;

    *bad = 0;
    if (height == 0 || width == 0)
        return 0;
    if (__builtin_mul_overflow(height - 1, pitch, &rows) ||
        __builtin_add_overflow(rows, width, &rows)) {
        *bad = 1;
        return 0;
    }
    return rows;
}

static uint32_t vcu__op_CU_MEMCPY_2D(vcu__op_t *o)
{
    struct vcu_cu_memcpy2d_req rq;
    const vcu_segment_t *s = NULL;
    CUDA_MEMCPY2D m;
    CUstream st = NULL;
    void *host = NULL, *bounce = NULL;
    uint64_t span = 0;
    int async, bad = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.flags & ~VCU_CU_MEMCPY_F_ASYNC)
        return VCU_S_EINVAL;
    async = (rq.flags & VCU_CU_MEMCPY_F_ASYNC) != 0;
    memset(&m, 0, sizeof(m));
    m.WidthInBytes = (size_t)rq.width;
    m.Height = (size_t)rq.height;
    m.srcPitch = (size_t)rq.spitch;
    m.dstPitch = (size_t)rq.dpitch;
    switch (rq.kind) {
    case VCU_CU_COPY_HTOD:
        s = vcu__seg(o, VCU_SEG_TO_DEVICE);
        span = vcu__span(rq.spitch, rq.width, rq.height, &bad);
        m.srcMemoryType = CU_MEMORYTYPE_HOST;
        m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        m.dstDevice = rq.dst;
        break;
    case VCU_CU_COPY_DTOH:
        s = vcu__seg(o, VCU_SEG_FROM_DEVICE);
        span = vcu__span(rq.dpitch, rq.width, rq.height, &bad);
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m.srcDevice = rq.src;
        m.dstMemoryType = CU_MEMORYTYPE_HOST;
        break;
    case VCU_CU_COPY_DTOD:
        if (o->nsegs != 0)
            return VCU_S_EINVAL;
        m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
        m.srcDevice = rq.src;
        m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        m.dstDevice = rq.dst;
        break;
    default:
        return VCU_S_EINVAL;
    }
    if (rq.kind != VCU_CU_COPY_DTOD) {
        if (s == NULL || bad || span > s->len)
            return VCU_S_EINVAL;
        if (s->iovcnt == 1) {
            host = s->iov[0].iov_base;
        } else if (span > 0) {
            /* Held until the copy is done, which the guest may put
             * behind work that never ends: counted. */
            if (vcu__mem_take(o->cs, (size_t)span) != 0) {
                o->res = CUDA_ERROR_OUT_OF_MEMORY;
                return VCU_S_OK;
            }
            bounce = malloc((size_t)span);
            if (bounce == NULL) {
                vcu__mem_give(o->cs, (size_t)span);
                o->res = CUDA_ERROR_OUT_OF_MEMORY;
                return VCU_S_OK;
            }
            /* DTOH too: the gaps between rows keep the guest's bytes. */
            vcu__gather(s, bounce, (size_t)span);
            host = bounce;
        }
        if (rq.kind == VCU_CU_COPY_HTOD)
            m.srcHost = host;
        else
            m.dstHost = host;
    }
    if (vcu__enter(o) != 0)
        goto out;
    if (async && vcu__stream(o, rq.stream, &st) != 0)
        goto out;
    if (async || o->cu->fn.cuMemcpy2DAsync != NULL) {
        /* A synchronous copy on the legacy stream, waited for too. */
        if (!async)
            st = CU_STREAM_LEGACY;
        o->res = VCU__CU(o->cu, cuMemcpy2DAsync, &m, st);
        /* Host pages (and the bounce buffer) must be done with before
         * the reply, unless they stay until SESSION_FENCE (stable, no
         * bounce). */
        if (o->res == CUDA_SUCCESS &&
            (!async || (rq.kind != VCU_CU_COPY_DTOD &&
                        (bounce != NULL || !(s->flags & VCU_SEG_F_STABLE))))) {
            if (vcu__park_stream(o, st) == 0) {
                /* The wait owns the staging buffer now. */
                o->wait->bounce = bounce;
                o->wait->bounce_len = bounce != NULL ? (size_t)span : 0;
                if (bounce != NULL && rq.kind == VCU_CU_COPY_DTOH) {
                    o->wait->seg = s;
                    o->wait->span = (size_t)span;
                }
                bounce = NULL;
            } else {
                o->res = o->cu->fn.cuStreamSynchronize(st);
            }
        }
    } else {
        o->res = VCU__CU(o->cu, cuMemcpy2D, &m);
    }
    if (o->res == CUDA_SUCCESS && bounce != NULL && rq.kind == VCU_CU_COPY_DTOH)
        vcu__scatter(s, bounce, (size_t)span);
out:
    if (bounce != NULL) {
        free(bounce);
        vcu__mem_give(o->cs, (size_t)span);
    }
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_MEM_FREE_ASYNC(vcu__op_t *o)
{
    struct vcu_cu_memcpy_req rq;
    uint64_t v = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (o->nsegs != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    if (vcu__untrack(o, rq.dst, &v) != 0)
        return VCU_S_OK;
    o->res = VCU__CU(o->cu, cuMemFreeAsync, (CUdeviceptr)rq.dst, st);
    if (o->res == CUDA_SUCCESS) {
        vcu__pset_del(&o->cs->allocs, rq.dst);
        /* Pool memory stays charged while the pool keeps it reserved. */
        if (v & VCU__ALLOC_ASYNC) {
            o->cs->pool_live[VCU__ALLOC_DEV(v)] -= VCU__ALLOC_CHARGE(v);
            vcu__pool_settle(o->cs, VCU__ALLOC_DEV(v));
        } else {
            vcu__uncharge(o->cs, VCU__ALLOC_DEV(v), VCU__ALLOC_CHARGE(v));
        }
    }
    return VCU_S_OK;
}

/*
 * The session's memory pool on device d, made on first use.  Never the
 * device's default pool: that one is shared by every context of the
 * process, so a block one session freed reached another's next
 * allocation with its data, and any session could set its attributes
 * or trim it for all.  Pool handles a guest holds name only these.
 */
static CUresult vcu__sess_pool(vcu__cuda_sess_t *cs, uint32_t d, CUmemoryPool *out)
{
    CUmemPoolProps props;
    CUresult r;

    if (cs->mpool[d] == NULL) {
        memset(&props, 0, sizeof(props));
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = cs->cu->host_ordinal[d];
        r = VCU__CU(cs->cu, cuMemPoolCreate, &cs->mpool[d], &props);
        if (r != CUDA_SUCCESS) {
            cs->mpool[d] = NULL;
            return r;
        }
    }
    *out = cs->mpool[d];
    return CUDA_SUCCESS;
}

/*
 * A session's pool is charged for at least what it reserves (driver's
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) and for every live block: before
 * the allocation, for the block on top of the live ones (or what is
 * reserved already, if more); after it, for anything more the pool
 * reserved to serve it.  If that pushed the VM past its quota the block is
 * given back and the guest gets CUDA_ERROR_OUT_OF_MEMORY.  Freed blocks
 * stay charged while the pool keeps them (vcu__pool_settle).
 */
static uint32_t vcu__op_CU_MEM_ALLOC_ASYNC(vcu__op_t *o)
{
    struct vcu_cu_mem_alloc_req rq;
    vcu__cuda_sess_t *cs = o->cs;
    CUmemoryPool pool;
    CUdeviceptr p = 0;
    uint32_t d = vcu__dev_of(o);
    cuuint64_t res = 0;
    uint64_t ch, want;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    if (rq.pool == 0) {
        /* The device's current pool, as the guest sees it: the session's. */
        o->res = vcu__sess_pool(cs, d, &pool);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
    } else {
        VCU__GET(o, e, rq.pool, VCU__H_POOL);
        pool = e->u.pool;
    }
    ch = vcu__grain(rq.size);
    if (ch > VCU__ACCT_MAX || d >= VCU_CU_MAX_DEVICES) {   /* d: checked by VCU__ENTER */
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    if (o->cu->acct != NULL) {
        want = cs->pool_live[d] + ch;
        if (VCU__CU(o->cu, cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                    &res) == CUDA_SUCCESS && vcu__grain(res) > want)
            want = vcu__grain(res);
        if (want > cs->pool_charge[d]) {
            if (vcu__charge(cs, d, want - cs->pool_charge[d]) != 0) {
                o->res = CUDA_ERROR_OUT_OF_MEMORY;
                return VCU_S_OK;
            }
            cs->pool_charge[d] = want;
        }
    }
    o->res = VCU__CU(o->cu, cuMemAllocFromPoolAsync, &p, (size_t)rq.size, pool, st);
    if (o->res == CUDA_SUCCESS && vcu__track(o, p, VCU__ALLOC_ASYNC, ch) == 0) {
        o->rb.u64.value = p;
        if (p != 0)
            cs->pool_live[d] += ch;
    }
    if (o->cu->acct != NULL && o->res == CUDA_SUCCESS &&
        VCU__CU(o->cu, cuMemPoolGetAttribute, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                &res) == CUDA_SUCCESS && vcu__grain(res) > cs->pool_charge[d]) {
        int over = vcu__acct_add(o->cu->acct, cs->aslot, d, vcu__grain(res) - cs->pool_charge[d]);

        cs->pool_charge[d] = vcu__grain(res);
        if (over != 0 && p != 0) {
            VCU__CU(o->cu, cuMemFreeAsync, p, st);
            vcu__pset_del(&cs->allocs, p);
            cs->pool_live[d] -= ch;
            o->rb.u64.value = 0;
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    vcu__pool_settle(cs, d);
    return VCU_S_OK;
}

/* The device's default pool, as the guest sees it: the session's own
 * (vcu__sess_pool), one handle for the session's life. */
static uint32_t vcu__op_CU_MEMPOOL_GET_DEFAULT(vcu__op_t *o)
{
    uint32_t d = vcu__dev_of(o);
    CUmemoryPool pool = NULL;
    vcu__hent_t *e;
    uint64_t h;

    VCU__ENTER(o);
    if (o->cs->pool_h[d] != 0 && vcu__htab_get(&o->cs->tab, o->cs->pool_h[d], VCU__H_POOL)) {
        o->rb.u64.value = o->cs->pool_h[d];
        return VCU_S_OK;
    }
    o->res = vcu__sess_pool(o->cs, d, &pool);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    e = vcu__new(o, VCU__H_POOL, &h);
    if (e == NULL)
        return VCU_S_OK;
    e->u.pool = pool;
    o->cs->pool_h[d] = h;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/* CUmemPool_attribute value types (cuda.h): the REUSE_* ones are int,
 * the rest cuuint64_t; 0 for an attribute this code does not know. */
static int vcu__pool_attr_kind(uint32_t a)
{
    switch (a) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        return 1;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        return 2;
    }
    return 0;
}

static uint32_t vcu__op_CU_MEMPOOL_SET_ATTR(vcu__op_t *o)
{
    struct vcu_cu_attr_req rq;
    int kind, iv;
    cuuint64_t uv;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.handle, VCU__H_POOL);
    kind = vcu__pool_attr_kind(rq.attr);
    if (kind == 1) {
        iv = (int)rq.value;
        o->res = VCU__CU(o->cu, cuMemPoolSetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &iv);
    } else if (kind == 2) {
        uv = rq.value;
        o->res = VCU__CU(o->cu, cuMemPoolSetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &uv);
    } else {
        o->res = CUDA_ERROR_INVALID_VALUE;
    }
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_MEMPOOL_GET_ATTR(vcu__op_t *o)
{
    struct vcu_cu_attr_req rq;
    int kind, iv = 0;
    cuuint64_t uv = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.handle, VCU__H_POOL);
    kind = vcu__pool_attr_kind(rq.attr);
    if (kind == 1) {
        o->res = VCU__CU(o->cu, cuMemPoolGetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &iv);
        o->rb.u64.value = (uint64_t)(int64_t)iv;
    } else if (kind == 2) {
        o->res = VCU__CU(o->cu, cuMemPoolGetAttribute, e->u.pool, (CUmemPool_attribute)rq.attr, &uv);
        o->rb.u64.value = uv;
    } else {
        o->res = CUDA_ERROR_INVALID_VALUE;
    }
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_MEMPOOL_TRIM(vcu__op_t *o)
{
    struct vcu_cu_attr_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.handle, VCU__H_POOL);
    o->res = VCU__CU(o->cu, cuMemPoolTrimTo, e->u.pool, (size_t)rq.value);
    vcu__pool_settle(o->cs, vcu__dev_of(o));
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_MEM_GET_RANGE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUdeviceptr base = 0;
    size_t size = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemGetAddressRange, &base, &size, (CUdeviceptr)rq.value);
    o->rb.range.base = base;
    o->rb.range.size = size;
    return VCU_S_OK;
}

/* Guest memory in the device's address space (zero copy).  Only a stable
 * segment is held by the guest past the reply, and only one contiguous
 * host range has one device pointer. */
static uint32_t vcu__op_CU_HOST_DEVICE_POINTER(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    const vcu_segment_t *s;
    CUdeviceptr p = 0;

    memcpy(&rq, o->p, sizeof(rq));
    s = vcu__seg(o, VCU_SEG_TO_DEVICE);
    if (s == NULL)
        return VCU_S_EINVAL;
    if (!(s->flags & VCU_SEG_F_STABLE) || s->iovcnt != 1 || rq.value != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemHostGetDevicePointer, &p, s->iov[0].iov_base, 0);
    if (o->res == CUDA_SUCCESS)
        o->rb.u64.value = p;
    return VCU_S_OK;
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

static uint32_t vcu__op_CU_MODULE_LOAD(vcu__op_t *o)
{
    return vcu__module_sent(o, NULL);
}

/* CU_MODULE_LOAD, and the SHA-256 of the image received in the reply:
 * the guest names it by that later (CU_MODULE_LOAD_HASH) without hashing
 * it itself, which under TCG costs more than sending it. */
static uint32_t vcu__op_CU_MODULE_LOAD_KEEP(vcu__op_t *o)
{
    return vcu__module_sent(o, o->rb.keep.sha256);
}

/*
 * A module by the SHA-256 of its image, from the module cache: read
 * (counted in the session's host memory as a sent image is), hashed
 * again, and loaded; anything short of that is a miss,
 * CUDA_ERROR_FILE_NOT_FOUND, and the guest sends the image.
 */
static uint32_t vcu__op_CU_MODULE_LOAD_HASH(vcu__op_t *o)
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
static uint32_t vcu__op_CU_MODULE_UNLOAD(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    vcu__mod_t *m;
    uint32_t i;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_MODULE);
    m = e->u.mod;
    for (i = 0; i < o->cs->tab.cap; i++) {
        vcu__hent_t *f = &o->cs->tab.ent[i];

        if (f->type == VCU__H_FUNCTION && f->u.fn.mod == m)
            vcu__del(o->cs, vcu__htab_handle_at(&o->cs->tab, i));
    }
    vcu__htab_del(&o->cs->tab, rq.value);
    o->res = vcu__mod_put(o->cs, m);
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

static uint32_t vcu__op_CU_MODULE_GET_FUNCTION(vcu__op_t *o)
{
    struct vcu_cu_name_req rq;
    struct vcu_cu_param *params = NULL, *fit;
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
    for (;; n++) {
        size_t off = 0, sz = 0;

        if (o->cu->fn.cuFuncGetParamInfo(f, n, &off, &sz) != CUDA_SUCCESS)
            break;
        if (n >= VCU_CU_MAX_PARAMS || sz == 0 || off > VCU_CU_MAX_PARAM_BYTES ||
            sz > VCU_CU_MAX_PARAM_BYTES - off) {
            o->res = CUDA_ERROR_NOT_SUPPORTED;
            goto out;
        }
        params[n].offset = (uint32_t)off;
        params[n].size = (uint32_t)sz;
        if (off + sz > end)
            end = (uint32_t)(off + sz);
    }
    need = sizeof(struct vcu_cu_function_resp) + (size_t)n * sizeof(*params);
    if (need > o->cap) {
        free(params);
        free(name);
        return VCU_S_ERANGE;
    }
    o->res = vcu__stack_cover(o->cs, mod->dev, f);
    if (o->res != CUDA_SUCCESS)
        goto out;
    /* The handle keeps exactly its n entries (the scratch had room for
     * the most any kernel may take: 8 KiB a handle, kept for its life). */
    if (n == 0) {
        free(params);
        params = NULL;
    } else if ((fit = realloc(params, (size_t)n * sizeof(*params))) != NULL) {
        params = fit;
    }
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

static uint32_t vcu__op_CU_MODULE_GET_GLOBAL(vcu__op_t *o)
{
    struct vcu_cu_name_req rq;
    CUdeviceptr p = 0;
    size_t sz = 0;
    char *name;

    name = vcu__name(o, &rq);
    if (name == NULL)
        return VCU_S_EINVAL;
    if (vcu__enter(o) == 0) {
        vcu__hent_t *e = vcu__get(o, rq.module, VCU__H_MODULE);

        if (e != NULL) {
            size_t fr0 = vcu__mod_free_before(o);

            o->res = VCU__CU(o->cu, cuModuleGetGlobal, &p, &sz, e->u.mod->mod, name);
            vcu__mod_grew(o, e->u.mod, fr0);
            o->rb.range.base = p;
            o->rb.range.size = sz;
        }
    }
    free(name);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_FUNC_GET_ATTRS(vcu__op_t *o)
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

static uint32_t vcu__op_CU_OCCUPANCY_BLOCK_SIZE(vcu__op_t *o)
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

/*
 * Kernel parameters: param_bytes bytes at src (already checked to lie in
 * the payload) copied to a 16-byte-aligned buffer, and the pointer array
 * CUDA wants built from the function's remembered layout.  Both in one
 * allocation, freed by the caller.  The size must be what the function
 * takes.
 */
/* A launch's or kernel node's parameter byte count: within the limit and
 * within the room left in its request. */
static bool vcu__param_bytes_ok(uint32_t nbytes, size_t room)
{
    return nbytes <= VCU_CU_MAX_PARAM_BYTES && nbytes <= room;
}

static void **vcu__params(vcu__op_t *o, const vcu__hent_t *fe, const void *src, uint32_t nbytes)
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

static void vcu__params_free(vcu__op_t *o, const vcu__hent_t *fe, void **kp)
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
static void vcu__kernel_node(CUDA_KERNEL_NODE_PARAMS *kn, const vcu__hent_t *fe,
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

static uint32_t vcu__op_CU_LAUNCH(vcu__op_t *o)
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

static void vcu__event_rerecord(vcu__op_t *o, vcu__hent_t *e);

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
        CUlaunchAttributeValue *v = &out[i].value;
        vcu__hent_t *e = NULL;

        memcpy(&a, wa + (size_t)i * sizeof(a), sizeof(a));
        out[i].id = (CUlaunchAttributeID)a.id;
        o->res = CUDA_ERROR_INVALID_VALUE;
        if (a.reserved != 0 || (a.handle != 0 && a.id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT &&
                                a.id != CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT))
            return -1;
        switch (a.id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
            break;
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            v->cooperative = a.v[0] != 0;
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
            v->programmaticStreamSerializationAllowed = a.v[0] != 0;
            break;
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
            /* The driver clamps a priority to the context's range. */
            v->priority = (int)a.v[0];
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
            if (a.v[0] > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
                return -1;
            v->memSyncDomain = (CUlaunchMemSyncDomain)a.v[0];
            break;
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
            if (a.v[0] > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE ||
                a.v[1] > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
                return -1;
            v->memSyncDomainMap.default_ = (unsigned char)a.v[0];
            v->memSyncDomainMap.remote = (unsigned char)a.v[1];
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
            if (a.v[0] > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
                return -1;
            v->clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)a.v[0];
            break;
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            /* A percentage, or CU_SHAREDMEM_CARVEOUT_DEFAULT (-1). */
            if (a.v[0] > 100 && a.v[0] != (uint32_t)CU_SHAREDMEM_CARVEOUT_DEFAULT)
                return -1;
            v->sharedMemCarveout = a.v[0];
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
            if (a.v[0] == 0 || a.v[1] == 0 || a.v[2] == 0 ||
                a.v[0] > VCU_CU_MAX_CLUSTER_BLOCKS || a.v[1] > VCU_CU_MAX_CLUSTER_BLOCKS ||
                a.v[2] > VCU_CU_MAX_CLUSTER_BLOCKS ||
                (uint64_t)a.v[0] * a.v[1] * a.v[2] > VCU_CU_MAX_CLUSTER_BLOCKS)
                return -1;
            v->clusterDim.x = a.v[0];
            v->clusterDim.y = a.v[1];
            v->clusterDim.z = a.v[2];
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
            e = vcu__htab_get(&o->cs->tab, a.handle, VCU__H_EVENT);
            if (e == NULL || e->dev != vcu__dev_of(o)) {
                o->res = CUDA_ERROR_INVALID_HANDLE;
                return -1;
            }
            if (a.v[0] > INT_MAX ||
                (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT && a.v[1] > 1))
                return -1;
            if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT) {
                v->programmaticEvent.event = e->u.ev;
                v->programmaticEvent.flags = (int)a.v[0];
                v->programmaticEvent.triggerAtBlockStart = (int)a.v[1];
            } else {
                v->launchCompletionEvent.event = e->u.ev;
                v->launchCompletionEvent.flags = (int)a.v[0];
            }
            break;
        default:
            vcu__attr_refused(a.id);
            o->res = CUDA_ERROR_NOT_SUPPORTED;
            return -1;
        }
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

static uint32_t vcu__op_CU_LAUNCH_EX(vcu__op_t *o)
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

static uint32_t vcu__op_CU_OCCUPANCY_CLUSTERS(vcu__op_t *o)
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
    o->res = VCU__CU(o->cu, cuOccupancyMaxActiveClusters, &n, fe->u.fn.f, &cfg);
    o->rb.u64.value = n > 0 ? (uint64_t)n : 0;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_OCCUPANCY_CLUSTER_SIZE(vcu__op_t *o)
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
    o->res = VCU__CU(o->cu, cuOccupancyMaxPotentialClusterSize, &n, fe->u.fn.f, &cfg);
    o->rb.u64.value = n > 0 ? (uint64_t)n : 0;
    return VCU_S_OK;
}

/*
 * CU_TENSOR_MAP: the arrays are fixed in the request; rank says how many
 * entries the driver reads, so it is checked first, and the rest must be
 * zero.  The driver checks the values (alignment, ranges) itself.
 */
static uint32_t vcu__op_CU_TENSOR_MAP(vcu__op_t *o)
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

/* --- streams and host callbacks --- */

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

/*
 * CU_LINK: the whole link in the worker (struct vcu_cu_link_req).  Every
 * record is checked against the input's bounds before the driver sees
 * it; the inputs count against the session's host-memory budget.
 */
static uint32_t vcu__op_CU_LINK(vcu__op_t *o)
{
    struct vcu_cu_link_req rq;
    CUjit_option opts[VCU_CU_MAX_LINK_OPTS + 2];
    void *vals[VCU_CU_MAX_LINK_OPTS + 2];
    const vcu_segment_t *in, *out;
    unsigned char *buf = NULL;
    char *name = NULL;
    CUlinkState ls = NULL;
    void *image = NULL;
    size_t image_len = 0, len, off = 0;
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
    for (i = 0; o->res == CUDA_SUCCESS && i < rq.ninputs; i++) {
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

static uint32_t vcu__op_CU_STREAM_CREATE(vcu__op_t *o)
{
    struct vcu_cu_stream_create_req rq;
    CUstream s = NULL;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuStreamCreateWithPriority, &s, rq.flags, (int)rq.priority);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    e = vcu__new(o, VCU__H_STREAM, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuStreamDestroy, s);
        return VCU_S_OK;
    }
    e->u.st = s;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

/*
 * Keeps a destroyed stream with work still queued as an orphan, so that
 * context-wide waits still see that work (CUDA releases such a stream
 * once its work is done, too).  -1: destroy it now.
 */
static int vcu__orphan(vcu__op_t *o, CUstream st)
{
    vcu__cuda_t *cu = o->cu;
    uint32_t d = vcu__dev_of(o);
    vcu__orphan_t *or;

    if (o->cs->orphans != NULL)
        vcu__orphans_prune(o->cs);
    if (vcu__cur(o->cs, o->cs->ctx[d]) != CUDA_SUCCESS || cu->fn.cuStreamQuery == NULL ||
        cu->fn.cuStreamQuery(st) != CUDA_ERROR_NOT_READY || vcu__capturing(cu, st))
        return -1;
    if (vcu__mem_take(o->cs, sizeof(*or)) != 0)
        return -1;
    or = calloc(1, sizeof(*or));
    if (or == NULL)
        goto err_mem;
    if (vcu__ev_get(o->cs, d, &or->ev) != CUDA_SUCCESS)
        goto err_ev;
    if (VCU__CU(cu, cuEventRecordWithFlags, or->ev, st, 0) != CUDA_SUCCESS) {
        vcu__ev_put(o->cs, d, or->ev);
        goto err_ev;
    }
    or->st = st;
    or->dev = d;
    or->next = o->cs->orphans;
    o->cs->orphans = or;
    return 0;

err_ev:
    free(or);
err_mem:
    vcu__mem_give(o->cs, sizeof(*or));
    return -1;
}

/* Forgets graph entry h and its nodes' entries. */
static void vcu__graph_drop(vcu__cuda_sess_t *cs, uint64_t h)
{
    uint32_t i;

    vcu__del(cs, h);
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *n = &cs->tab.ent[i];

        if (n->type == VCU__H_GRAPH_NODE && n->u.node.graph == h)
            vcu__htab_del(&cs->tab, vcu__htab_handle_at(&cs->tab, i));
    }
}

/* Is capture id in progress on a stream of the session?  (Switches
 * contexts.) */
static bool vcu__cap_live(vcu__cuda_sess_t *cs, uint64_t id)
{
    CUstreamCaptureStatus status;
    cuuint64_t sid;
    uint32_t d, i;

    if (cs->cu->fn.cuStreamGetCaptureInfo == NULL)
        return false;
    for (d = 0; d < cs->cu->ndev; d++) {
        status = CU_STREAM_CAPTURE_STATUS_NONE;
        sid = 0;
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS &&
            cs->cu->fn.cuStreamGetCaptureInfo(CU_STREAM_PER_THREAD, &status, &sid, NULL, NULL,
                                              NULL, NULL) == CUDA_SUCCESS &&
            status != CU_STREAM_CAPTURE_STATUS_NONE && sid == id)
            return true;
    }
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        status = CU_STREAM_CAPTURE_STATUS_NONE;
        sid = 0;
        if (e->type == VCU__H_STREAM && vcu__cur(cs, cs->ctx[e->dev]) == CUDA_SUCCESS &&
            cs->cu->fn.cuStreamGetCaptureInfo(e->u.st, &status, &sid, NULL, NULL, NULL, NULL) ==
                CUDA_SUCCESS &&
            status != CU_STREAM_CAPTURE_STATUS_NONE && sid == id)
            return true;
    }
    return false;
}

/*
 * Forgets the graph entries of captures that ended (failed, or their
 * streams destroyed): the driver destroyed or owns those graphs, and a
 * later use of the handle is refused as stale.  After END_CAPTURE and
 * STREAM_DESTROY; nothing to do unless a capture's graph was asked for.
 */
static void vcu__cap_graphs_prune(vcu__cuda_sess_t *cs)
{
    uint32_t i;

    for (i = 0; cs->cap_graphs > 0 && i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_GRAPH && e->u.graph.cap_id != 0 &&
            !vcu__cap_live(cs, e->u.graph.cap_id))
            vcu__graph_drop(cs, vcu__htab_handle_at(&cs->tab, i));
    }
}

static uint32_t vcu__op_CU_STREAM_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_STREAM);
    if (vcu__orphan(o, e->u.st) == 0) {
        vcu__htab_del(&o->cs->tab, rq.value);
        vcu__cap_graphs_prune(o->cs);       /* an orphan's capture is out of reach */
        o->res = CUDA_SUCCESS;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuStreamDestroy, e->u.st);
    if (o->res == CUDA_SUCCESS) {
        vcu__htab_del(&o->cs->tab, rq.value);
        vcu__cap_graphs_prune(o->cs);
    }
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_STREAM_SYNCHRONIZE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    if (vcu__park_stream(o, st) != 0)
        o->res = o->cu->fn.cuStreamSynchronize(st);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_STREAM_QUERY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamQuery, st);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_STREAM_WAIT_EVENT(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.a);
    VCU__GET(o, e, rq.b, VCU__H_EVENT);
    o->res = VCU__CU(o->cu, cuStreamWaitEvent, st, e->u.ev, (unsigned int)rq.c);
    return VCU_S_OK;
}

/*
 * CU_STREAM_CAPTURE_MODE_GLOBAL forbids unsafe calls (cuMemAlloc...) in
 * every thread of the process: one session's capture made the others'
 * fail, and the RAM registration's.  All of a session's driver calls are
 * made by its worker, the thread that begins the capture, so
 * THREAD_LOCAL forbids exactly the calls of the session that GLOBAL
 * did (the worker's own mode stays the default: the guest library keeps
 * cudaThreadExchangeStreamCaptureMode to itself), and nothing of other
 * sessions.
 */
static uint32_t vcu__op_CU_STREAM_BEGIN_CAPTURE(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUstreamCaptureMode mode;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.a);
    mode = (CUstreamCaptureMode)rq.b;
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
        mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    o->res = VCU__CU(o->cu, cuStreamBeginCapture, st, mode);
    if (o->res == CUDA_SUCCESS)
        o->cs->capture = true;
    return VCU_S_OK;
}

/* Is any stream of the session capturing?  (Switches contexts.) */
static bool vcu__any_capture(vcu__cuda_sess_t *cs)
{
    uint32_t d, i;

    for (d = 0; d < cs->cu->ndev; d++)
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS &&
            vcu__capturing(cs->cu, CU_STREAM_PER_THREAD))
            return true;
    for (i = 0; i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_STREAM && vcu__cur(cs, cs->ctx[e->dev]) == CUDA_SUCCESS &&
            vcu__capturing(cs->cu, e->u.st))
            return true;
    }
    return false;
}

/*
 * Which launches a capture recorded is not known here (streams join a
 * capture through events, across the session's streams): while any may
 * be in progress, every module launched is pinned in cs->cap_mods, and
 * each captured graph holds all of them.  Conservative, and bounded by
 * the session's modules.  Let go once no stream captures.
 */
static void vcu__capture_settle(vcu__cuda_sess_t *cs)
{
    if (!cs->capture || vcu__any_capture(cs))
        return;
    cs->capture = false;
    vcu__mods_free(cs, cs->cap_mods);
    cs->cap_mods = NULL;
}

static uint32_t vcu__graph_put(vcu__op_t *o, CUgraph g, const vcu__modset_t *mods);

/* The handle of the entry a capture owns for graph g, or 0. */
static uint64_t vcu__cap_graph_find(vcu__cuda_sess_t *cs, CUgraph g)
{
    uint32_t i;

    for (i = 0; cs->cap_graphs > 0 && i < cs->tab.cap; i++) {
        vcu__hent_t *e = &cs->tab.ent[i];

        if (e->type == VCU__H_GRAPH && e->u.graph.cap_id != 0 && e->u.graph.g == g)
            return vcu__htab_handle_at(&cs->tab, i);
    }
    return 0;
}

/*
 * A successful capture's graph: the entry CU_STREAM_CAPTURE_GRAPH made
 * for it becomes the caller's (the same handle), or a new one.  Its
 * kernel nodes may use any module launched during captures.
 */
static void vcu__cap_graph_adopt(vcu__op_t *o, CUgraph g)
{
    vcu__cuda_sess_t *cs = o->cs;
    uint64_t h = vcu__cap_graph_find(cs, g);
    vcu__hent_t *e;

    if (h == 0) {
        vcu__graph_put(o, g, cs->cap_mods);
        return;
    }
    e = &cs->tab.ent[(uint32_t)h];
    e->u.graph.cap_id = 0;
    cs->cap_graphs--;
    if (vcu__mods_add_all(cs, &e->u.graph.mods, cs->cap_mods) != 0) {
        VCU__CU(o->cu, cuGraphDestroy, g);
        vcu__graph_drop(cs, h);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    o->rb.u64.value = h;
}

static uint32_t vcu__op_CU_STREAM_END_CAPTURE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraph g = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamEndCapture, st, &g);
    if (o->res == CUDA_SUCCESS && g != NULL)
        vcu__cap_graph_adopt(o, g);
    vcu__cap_graphs_prune(o->cs);
    vcu__capture_settle(o->cs);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_STREAM_CAPTURE_INFO(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamGetCaptureInfo, st, &status, &id, NULL, NULL, NULL, NULL);
    o->rb.cap.status = (uint32_t)status;
    o->rb.cap.id = id;
    return VCU_S_OK;
}

/*
 * The capture's graph under a handle the capture owns: the same entry
 * each time, and the one END_CAPTURE hands over (vcu__cap_graph_adopt).
 * The dependencies are counted only: their nodes have no handles.
 */
/* The handle of capture id's graph g, made at the first ask; 0 (result
 * OUT_OF_MEMORY) over quota. */
static uint64_t vcu__cap_graph_handle(vcu__op_t *o, CUgraph g, uint64_t id)
{
    uint64_t h = vcu__cap_graph_find(o->cs, g);
    vcu__hent_t *e;

    if (h == 0) {
        e = vcu__new(o, VCU__H_GRAPH, &h);
        if (e == NULL)
            return 0;
        e->u.graph.g = g;
        e->u.graph.cap_id = id;
        o->cs->cap_graphs++;
    }
    return h;
}

static uint32_t vcu__op_CU_STREAM_CAPTURE_GRAPH(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CUgraph g = NULL;
    size_t ndeps = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamGetCaptureInfo, st, &status, &id, &g, NULL, NULL, &ndeps);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    o->rb.capg.status = (uint32_t)status;
    o->rb.capg.id = id;
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || g == NULL || id == 0)
        return VCU_S_OK;
    o->rb.capg.ndeps = ndeps;
    o->rb.capg.graph = vcu__cap_graph_handle(o, g, id);
    return VCU_S_OK;
}

/* The handle of node n of the graph with handle gh: the one it has, or a
 * new one (0, result OUT_OF_MEMORY, over quota).  Nodes go with their
 * graph (vcu__graph_drop). */
static uint64_t vcu__node_handle(vcu__op_t *o, CUgraphNode n, uint64_t gh)
{
    vcu__cuda_sess_t *cs = o->cs;
    vcu__hent_t *e;
    uint32_t i;
    uint64_t h;

    for (i = 0; i < cs->tab.cap; i++) {
        e = &cs->tab.ent[i];
        if (e->type == VCU__H_GRAPH_NODE && e->u.node.n == n && e->u.node.graph == gh)
            return vcu__htab_handle_at(&cs->tab, i);
    }
    e = vcu__new(o, VCU__H_GRAPH_NODE, &h);
    if (e == NULL)
        return 0;
    e->u.node.n = n;
    e->u.node.graph = gh;
    return h;
}

static uint32_t vcu__op_CU_STREAM_CAPTURE_DEPS(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUgraphNode *deps = NULL;
    cuuint64_t id = 0;
    CUgraph g = NULL;
    size_t ndeps = 0, i;
    uint64_t gh;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.value);
    o->res = VCU__CU(o->cu, cuStreamGetCaptureInfo, st, &status, &id, &g, &deps, NULL, &ndeps);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    o->rb.capd.status = (uint32_t)status;
    if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || g == NULL || id == 0)
        return VCU_S_OK;
    gh = vcu__cap_graph_handle(o, g, id);
    if (gh == 0)
        return VCU_S_OK;
    o->rb.capd.graph = gh;
    o->rb.capd.ndeps = ndeps;
    for (i = 0; deps != NULL && i < ndeps && i < VCU_CU_MAX_CAPTURE_DEPS; i++) {
        o->rb.capd.node[i] = vcu__node_handle(o, deps[i], gh);
        if (o->rb.capd.node[i] == 0)
            return VCU_S_OK;
    }
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_STREAM_UPDATE_DEPS(vcu__op_t *o)
{
    struct vcu_cu_update_deps_req rq;
    CUgraphNode nodes[VCU_CU_MAX_CAPTURE_DEPS];
    uint32_t i;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.ndeps > VCU_CU_MAX_CAPTURE_DEPS ||
        (rq.flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES &&
         rq.flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.stream);
    for (i = 0; i < rq.ndeps; i++) {
        VCU__GET(o, e, rq.node[i], VCU__H_GRAPH_NODE);
        nodes[i] = e->u.node.n;
    }
    o->res = VCU__CU(o->cu, cuStreamUpdateCaptureDependencies, st, nodes, NULL, rq.ndeps,
                     rq.flags);
    return VCU_S_OK;
}

/*
 * The session's capture interaction mode: one thread makes all of the
 * session's calls, so the mode a guest thread set last stands for the
 * session (cudaMalloc under a RELAXED guard during a capture, as
 * PyTorch's allocator does).  Set on the thread by vcu__enter, for this
 * session's calls only.  The previous one is returned.
 */
static uint32_t vcu__op_CU_THREAD_CAPTURE_MODE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUstreamCaptureMode prev = o->cs->cap_mode;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.value > CU_STREAM_CAPTURE_MODE_RELAXED) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (o->cu->fn.cuThreadExchangeStreamCaptureMode == NULL) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    o->cs->cap_mode = (CUstreamCaptureMode)rq.value;
    o->rb.u64.value = (uint64_t)prev;
    return VCU_S_OK;
}

/* Counted in the budget until freed: a one-shot record by its
 * trampoline or a failed launch (vcu__cb_free), a persistent one with
 * the session. */
static vcu__cb_t *vcu__cb_new(vcu__cuda_sess_t *cs, uint64_t cookie, int oneshot)
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

static uint32_t vcu__op_CU_STREAM_HOST_FUNC(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    vcu__cb_t *cb;
    int oneshot;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__STREAM(o, st, rq.a);
    if (o->cu->fn.cuLaunchHostFunc == NULL) {
        o->res = CUDA_ERROR_NOT_SUPPORTED;
        return VCU_S_OK;
    }
    /* In a stream capture the call becomes a host node of the graph,
     * which may run any number of times (or never): the record must then
     * live as long as the session, as a graph's HOST node's does. */
    oneshot = !vcu__capturing(o->cu, st);
    cb = vcu__cb_new(o->cs, rq.b, oneshot);
    if (cb == NULL) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = o->cu->fn.cuLaunchHostFunc(st, vcu__cb_trampoline, cb);
    /* On failure CUDA never calls it, so a one-shot record is still ours
     * (a persistent one is on the session's list, freed with it). */
    if (o->res != CUDA_SUCCESS && oneshot)
        vcu__cb_free(cb);
    return VCU_S_OK;
}

static uint32_t vcu__op_inline(vcu__op_t *o)
{
    (void)o;
    return VCU_S_EINVAL;            /* never reached: exec routes them first */
}
#define vcu__op_CU_CALLBACK_WAIT vcu__op_inline
#define vcu__op_CU_CALLBACK_DONE vcu__op_inline

/* --- events --- */

static uint32_t vcu__op_CU_EVENT_CREATE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUevent ev = NULL;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.value > UINT32_MAX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuEventCreate, &ev, (unsigned int)rq.value);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    e = vcu__new(o, VCU__H_EVENT, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuEventDestroy, ev);
        return VCU_S_OK;
    }
    e->u.ev = ev;
    e->xflags = (uint32_t)rq.value;
    o->rb.u64.value = h;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_EVENT_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    vcu__cuda_wait_t *w;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_EVENT);
    w = vcu__gev_waiter(o->cs, e->u.ev);
    if (w != NULL) {
        /* A parked synchronize still looks at it: it destroys it. */
        w->own_gev = 1;
        vcu__htab_del(&o->cs->tab, rq.value);
        o->res = CUDA_SUCCESS;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuEventDestroy, e->u.ev);
    if (o->res == CUDA_SUCCESS)
        vcu__htab_del(&o->cs->tab, rq.value);
    return VCU_S_OK;
}

/* Before e is recorded again: a parked synchronize waits for the record
 * before this one, so it keeps the old CUevent and the guest's handle
 * gets a new one. */
static void vcu__event_rerecord(vcu__op_t *o, vcu__hent_t *e)
{
    vcu__cuda_wait_t *w = vcu__gev_waiter(o->cs, e->u.ev);
    CUevent ev = NULL;

    if (w != NULL && VCU__CU(o->cu, cuEventCreate, &ev, e->xflags) == CUDA_SUCCESS) {
        w->own_gev = 1;
        e->u.ev = ev;
    }
}

static uint32_t vcu__op_CU_EVENT_RECORD(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.c & ~(uint64_t)CU_EVENT_RECORD_EXTERNAL) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    VCU__GET(o, e, rq.a, VCU__H_EVENT);
    VCU__STREAM(o, st, rq.b);
    vcu__event_rerecord(o, e);
    o->res = VCU__CU(o->cu, cuEventRecordWithFlags, e->u.ev, st, (unsigned int)rq.c);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_EVENT_SYNCHRONIZE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_EVENT);
    if (o->cu->fn.cuEventQuery == NULL || (o->wait = vcu__wait_new(o->cs)) == NULL) {
        o->res = VCU__CU(o->cu, cuEventSynchronize, e->u.ev);
        return VCU_S_OK;
    }
    /* Polled itself: it has no stream of its own to record behind. */
    o->wait->gev = e->u.ev;
    o->wait->gdev = e->dev;
    o->cs->ngev++;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_EVENT_QUERY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_EVENT);
    o->res = VCU__CU(o->cu, cuEventQuery, e->u.ev);
    return VCU_S_OK;
}

/* --- graphs --- */

/* A handle for a new graph whose kernel nodes use the modules in mods. */
static uint32_t vcu__graph_put(vcu__op_t *o, CUgraph g, const vcu__modset_t *mods)
{
    vcu__hent_t *e;
    uint64_t h;

    e = vcu__new(o, VCU__H_GRAPH, &h);
    if (e == NULL) {
        VCU__CU(o->cu, cuGraphDestroy, g);
        return VCU_S_OK;
    }
    e->u.graph.g = g;
    if (vcu__mods_add_all(o->cs, &e->u.graph.mods, mods) != 0) {
        VCU__CU(o->cu, cuGraphDestroy, g);
        vcu__del(o->cs, h);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->rb.u64.value = h;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_GRAPH_CREATE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraph g = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    if (rq.value > UINT32_MAX) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphCreate, &g, (unsigned int)rq.value);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    return vcu__graph_put(o, g, NULL);
}

static uint32_t vcu__op_CU_GRAPH_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH);
    /* A capture's graph is the capture's (cuda.h). */
    if (e->u.graph.cap_id != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphDestroy, e->u.graph.g);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    vcu__graph_drop(o->cs, rq.value);
    return VCU_S_OK;
}

/*
 * A MEMCPY node's shape (vcu_proto.h) as a copy between device
 * addresses: 0, or VCU_S_EINVAL for a shape no copy has, or one whose
 * extent wraps the address space on either side.
 */
static uint32_t vcu__node_copy(const struct vcu_cu_graph_node_req *rq, CUDA_MEMCPY3D *m)
{
    uint64_t h = rq->height ? rq->height : 1, d = rq->depth ? rq->depth : 1;
    uint64_t sp = rq->src_pitch ? rq->src_pitch : rq->width;
    uint64_t dp = rq->dst_pitch ? rq->dst_pitch : rq->width;
    uint64_t sr = rq->src_rows ? rq->src_rows : h, dr = rq->dst_rows ? rq->dst_rows : h;
    const uint64_t side[2][3] = { { rq->src, sp, sr }, { rq->dst, dp, dr } };

    if (rq->width == 0 || rq->reserved != 0 || rq->stage > VCU_CU_STAGE_OUT ||
        (rq->stage != VCU_CU_STAGE_NONE && rq->cookie == 0))
        return VCU_S_EINVAL;
    if (h > (uint64_t)INT32_MAX || d > (uint64_t)INT32_MAX)
        return VCU_S_EINVAL;
    for (int i = 0; i < 2; i++) {
        uint64_t base = side[i][0], pitch = side[i][1], rows = side[i][2], span, t;

        if ((h > 1 || d > 1) && pitch < rq->width)
            return VCU_S_EINVAL;
        if (d > 1 && rows < h)
            return VCU_S_EINVAL;
        /* The last byte: base + ((d-1)*rows + h-1)*pitch + width - 1. */
        if (__builtin_mul_overflow(d - 1, rows, &t) || __builtin_add_overflow(t, h - 1, &t) ||
            __builtin_mul_overflow(t, pitch, &span) ||
            __builtin_add_overflow(span, rq->width - 1, &span) ||
            __builtin_add_overflow(base, span, &t))
            return VCU_S_EINVAL;
    }
    memset(m, 0, sizeof(*m));
    m->srcMemoryType = CU_MEMORYTYPE_DEVICE;
    m->srcDevice = rq->src;
    m->srcPitch = (size_t)sp;
    m->srcHeight = (size_t)sr;
    m->dstMemoryType = CU_MEMORYTYPE_DEVICE;
    m->dstDevice = rq->dst;
    m->dstPitch = (size_t)dp;
    m->dstHeight = (size_t)dr;
    m->WidthInBytes = (size_t)rq->width;
    m->Height = (size_t)h;
    m->Depth = (size_t)d;
    return 0;
}

/*
 * A copy staged through a guest host function (VCU_CU_STAGE_IN: the
 * function, then the copy; OUT: the copy, then the function), as one
 * child-graph node of g: one node to the guest, as NVIDIA's one memcpy
 * node with pageable memory is.  The child graph is cloned into the node.
 */
static CUresult vcu__staged_copy(vcu__op_t *o, CUgraphNode *node, CUgraph g,
                                 const CUgraphNode *deps, uint32_t ndeps,
                                 const CUDA_MEMCPY3D *m, uint32_t stage, vcu__cb_t *cb)
{
    vcu__cuda_t *cu = o->cu;
    CUcontext ctx = o->cs->ctx[vcu__dev_of(o)];
    CUDA_HOST_NODE_PARAMS hp = { .fn = vcu__cb_trampoline, .userData = cb };
    CUgraph child = NULL;
    CUgraphNode a = NULL, b = NULL;
    CUresult r;

    r = VCU__CU(cu, cuGraphCreate, &child, 0);
    if (r != CUDA_SUCCESS)
        return r;
    if (stage == VCU_CU_STAGE_IN) {
        r = VCU__CU(cu, cuGraphAddHostNode, &a, child, NULL, 0, &hp);
        if (r == CUDA_SUCCESS)
            r = VCU__CU(cu, cuGraphAddMemcpyNode, &b, child, &a, 1, m, ctx);
    } else {
        r = VCU__CU(cu, cuGraphAddMemcpyNode, &a, child, NULL, 0, m, ctx);
        if (r == CUDA_SUCCESS)
            r = VCU__CU(cu, cuGraphAddHostNode, &b, child, &a, 1, &hp);
    }
    if (r == CUDA_SUCCESS)
        r = VCU__CU(cu, cuGraphAddChildGraphNode, node, g, deps, ndeps, child);
    VCU__CU(cu, cuGraphDestroy, child);
    return r;
}

static uint32_t vcu__op_CU_GRAPH_ADD_NODE(vcu__op_t *o)
{
    struct vcu_cu_graph_node_req rq;
    vcu__cuda_t *cu = o->cu;
    CUDA_MEMCPY3D copy;
    CUgraphNode *deps = NULL, node = NULL;
    const unsigned char *tail;
    size_t room = o->plen - sizeof(rq);
    uint32_t i;
    vcu__hent_t *e;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.ndeps > VCU_CU_MAX_DEPS)
        return VCU_S_E2BIG;
    if ((size_t)rq.ndeps * 8 > room)
        return VCU_S_EINVAL;
    room -= (size_t)rq.ndeps * 8;
    tail = o->p + sizeof(rq) + (size_t)rq.ndeps * 8;
    if (rq.kind == VCU_CU_NODE_KERNEL &&
        !vcu__param_bytes_ok(rq.param_bytes, room))
        return VCU_S_EINVAL;
    if (rq.kind == VCU_CU_NODE_MEMSET && rq.elem_size != 1 && rq.elem_size != 2 &&
        rq.elem_size != 4)
        return VCU_S_EINVAL;
    if (rq.kind < VCU_CU_NODE_KERNEL || rq.kind > VCU_CU_NODE_EMPTY)
        return VCU_S_EINVAL;
    if (rq.kind == VCU_CU_NODE_MEMCPY && vcu__node_copy(&rq, &copy) != 0)
        return VCU_S_EINVAL;
    VCU__ENTER(o);
    VCU__GET(o, ge, rq.graph, VCU__H_GRAPH);
    if (rq.ndeps > 0) {
        deps = calloc(rq.ndeps, sizeof(*deps));
        if (deps == NULL) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            return VCU_S_OK;
        }
    }
    for (i = 0; i < rq.ndeps; i++) {
        uint64_t dh;
        vcu__hent_t *de;

        memcpy(&dh, o->p + sizeof(rq) + (size_t)i * 8, 8);
        de = vcu__get(o, dh, VCU__H_GRAPH_NODE);
        if (de == NULL)
            goto out;
        deps[i] = de->u.node.n;
    }
    switch (rq.kind) {
    case VCU_CU_NODE_KERNEL: {
        CUDA_KERNEL_NODE_PARAMS kn;
        vcu__hent_t *fe = vcu__get(o, rq.function, VCU__H_FUNCTION);
        void **kp;

        if (fe == NULL)
            goto out;
        /* The graph holds the module for as long as it (or an exec made
         * from it) may run the function. */
        if (vcu__mods_add(o->cs, &ge->u.graph.mods, fe->u.fn.mod) != 0) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        kp = vcu__params(o, fe, tail, rq.param_bytes);
        if (kp == NULL)
            goto out;
        vcu__kernel_node(&kn, fe, rq.grid, rq.block, rq.shared_mem, kp);
        /* CUDA copies the parameter values into the node. */
        o->res = VCU__CU(cu, cuGraphAddKernelNode, &node, ge->u.graph.g, deps, rq.ndeps, &kn);
        vcu__params_free(o, fe, kp);
        break;
    }
    case VCU_CU_NODE_MEMCPY: {
        vcu__cb_t *cb;

        if (rq.stage == VCU_CU_STAGE_NONE) {
            o->res = VCU__CU(cu, cuGraphAddMemcpyNode, &node, ge->u.graph.g, deps, rq.ndeps,
                             &copy, o->cs->ctx[vcu__dev_of(o)]);
            break;
        }
        cb = vcu__cb_new(o->cs, rq.cookie, 0);
        if (cb == NULL) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        o->res = vcu__staged_copy(o, &node, ge->u.graph.g, deps, rq.ndeps, &copy, rq.stage, cb);
        break;
    }
    case VCU_CU_NODE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS ms;

        memset(&ms, 0, sizeof(ms));
        ms.dst = rq.dst;
        ms.pitch = (size_t)rq.pitch;
        ms.value = rq.value;
        ms.elementSize = rq.elem_size;
        ms.width = (size_t)rq.width;
        ms.height = (size_t)rq.height;
        o->res = VCU__CU(cu, cuGraphAddMemsetNode, &node, ge->u.graph.g, deps, rq.ndeps, &ms,
                         o->cs->ctx[vcu__dev_of(o)]);
        break;
    }
    case VCU_CU_NODE_HOST: {
        CUDA_HOST_NODE_PARAMS hp;
        vcu__cb_t *cb = vcu__cb_new(o->cs, rq.cookie, 0);

        if (cb == NULL) {
            o->res = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        memset(&hp, 0, sizeof(hp));
        hp.fn = vcu__cb_trampoline;
        hp.userData = cb;
        o->res = VCU__CU(cu, cuGraphAddHostNode, &node, ge->u.graph.g, deps, rq.ndeps, &hp);
        break;
    }
    default:
        o->res = VCU__CU(cu, cuGraphAddEmptyNode, &node, ge->u.graph.g, deps, rq.ndeps);
        break;
    }
    if (o->res != CUDA_SUCCESS)
        goto out;
    e = vcu__new(o, VCU__H_GRAPH_NODE, &h);
    if (e == NULL)
        goto out;                   /* the node stays in the graph, unnamed */
    e->u.node.n = node;
    e->u.node.graph = rq.graph;
    o->rb.u64.value = h;
out:
    free(deps);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_GRAPH_CLONE(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    CUgraph g = NULL;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH);
    if (e->u.graph.cap_id != 0 && vcu__mods_add_all(o->cs, &e->u.graph.mods, o->cs->cap_mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphClone, &g, e->u.graph.g);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    return vcu__graph_put(o, g, e->u.graph.mods);
}

static uint32_t vcu__op_CU_GRAPH_INSTANTIATE(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUgraphExec ge = NULL;
    const vcu__modset_t *mods;
    vcu__hent_t *x;
    uint64_t h;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.a, VCU__H_GRAPH);
    if (e->u.graph.cap_id != 0 && vcu__mods_add_all(o->cs, &e->u.graph.mods, o->cs->cap_mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphInstantiate, &ge, e->u.graph.g, (unsigned long long)rq.b);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    mods = e->u.graph.mods;         /* e may move in vcu__new */
    x = vcu__new(o, VCU__H_GRAPH_EXEC, &h);
    if (x == NULL) {
        VCU__CU(o->cu, cuGraphExecDestroy, ge);
        return VCU_S_OK;
    }
    x->u.exec.ge = ge;
    if (vcu__mods_add_all(o->cs, &x->u.exec.mods, mods) != 0) {
        VCU__CU(o->cu, cuGraphExecDestroy, ge);
        vcu__del(o->cs, h);
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->rb.u64.value = h;
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_GRAPH_LAUNCH(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.a, VCU__H_GRAPH_EXEC);
    VCU__STREAM(o, st, rq.b);
    /* Launched into a capture, its nodes join the captured graph. */
    if (o->cs->capture && vcu__mods_add_all(o->cs, &o->cs->cap_mods, e->u.exec.mods) != 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return VCU_S_OK;
    }
    o->res = VCU__CU(o->cu, cuGraphLaunch, e->u.exec.ge, st);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_GRAPH_EXEC_DESTROY(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH_EXEC);
    o->res = VCU__CU(o->cu, cuGraphExecDestroy, e->u.exec.ge);
    if (o->res == CUDA_SUCCESS)
        vcu__del(o->cs, rq.value);
    return VCU_S_OK;
}

static uint32_t vcu__op_CU_GRAPH_NODE_COUNT(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    size_t n = 0;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    VCU__GET(o, e, rq.value, VCU__H_GRAPH);
    o->res = VCU__CU(o->cu, cuGraphGetNodes, e->u.graph.g, NULL, &n);
    o->rb.u64.value = n;
    return VCU_S_OK;
}

/* --- the generated calls (CU_CALL) --- */

/* A handle argument of a generated call: the session's, of that type and
 * made on the request's device; else CUDA_ERROR_INVALID_HANDLE. */
static vcu__hent_t *vcu__gen_get(vcu__op_t *o, uint64_t h, uint8_t type)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, type);

    if (e == NULL || e->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    return e;
}

/* A stream argument: a default stream, or a stream handle as above. */
static int vcu__gen_stream(vcu__op_t *o, uint64_t h, CUstream *out)
{
    vcu__hent_t *e;

    if (h == VCU_CU_STREAM_LEGACY || h == VCU_CU_STREAM_PER_THREAD)
        return vcu__stream(o, h, out);
    e = vcu__gen_get(o, h, VCU__H_STREAM);
    if (e == NULL)
        return -1;
    *out = e->u.st;
    return 0;
}

/* A device argument: a virtual ordinal of the VM's, as the host's device. */
static int vcu__gen_dev(vcu__op_t *o, uint64_t v, CUdevice *out)
{
    if (v >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return -1;
    }
    *out = o->cu->dev[v];
    return 0;
}

/* A generated call's driver function; a missing one: not supported. */
#define VCU__GEN_CU(cu, name, ...)                                                     \
    ((cu)->gfn.p_##name != NULL ? (cu)->gfn.p_##name(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

/* The call's reply struct after its vcu_cu_resp (which exec writes). */
static void vcu__gen_reply(vcu__op_t *o, const void *rp, size_t len)
{
    memcpy(o->out + sizeof(struct vcu_cu_resp), (const unsigned char *)rp + sizeof(struct vcu_cu_resp),
           len - sizeof(struct vcu_cu_resp));
    o->len = len;
}

#include "cuda_calls.inc"

/* --- dispatch --- */

/* Transport opcodes are the core's; they never reach the executor. */
static uint32_t vcu__op_transport(vcu__op_t *o)
{
    (void)o;
    return VCU_S_ENOTSUP;
}
#define vcu__op_SESSION_OPEN vcu__op_transport
#define vcu__op_SESSION_CLOSE vcu__op_transport
#define vcu__op_ECHO vcu__op_transport
#define vcu__op_SESSION_FENCE vcu__op_transport
/* Run by vcu__batch before dispatch. */
#define vcu__op_CU_BATCH vcu__op_transport

static uint32_t vcu__dispatch(vcu__op_t *o, uint32_t op)
{
    switch (op) {
#define VCU__OP_CASE(name, num, rq, rp) case VCU_OP_##name: return vcu__op_##name(o);
        VCU_OP_MAP(VCU__OP_CASE)
#undef VCU__OP_CASE
    }
    return VCU_S_ENOTSUP;
}

/* A GPU fault that ends the context (the account counts sessions that
 * saw one: CU_SLICE_INFO's faults). */
static bool vcu__sticky(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
        return true;
    default:
        return false;
    }
}

/*
 * The deferred error and a reply: an async request has no reader, so its
 * failure res (the first one kept) waits for the next reply, and its own
 * reply carries none; any other reply takes what waits.
 */
static uint32_t vcu__deferred(vcu__cuda_sess_t *cs, int async, uint32_t res)
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
static vcu__op_t *vcu__op_scratch(vcu__cuda_sess_t *cs)
{
    if (cs->op == NULL)
        cs->op = malloc(sizeof(*cs->op));
    return cs->op;
}

/* ---- runs of launches as graphs ---------------------------------------- */

/*
 * A batch's consecutive launches into one stream cost the driver one
 * cuLaunchKernel each, 3.5-4.5 us of CPU on the H100 and H200 (what bounds
 * a burst of small kernels, natively too).  As the kernel nodes of one
 * executable graph, updated for each run (cuGraphExecUpdate) and launched
 * whole, the same run costs a fraction of that (docs/benchmarks.md,
 * "Launch runs as graphs").  It is the same work in the same order:
 *
 *   - A chain of kernel nodes launched into the stream runs as the
 *     launches would, ordered after the stream's earlier work, before its
 *     later work, with the legacy stream's implicit synchronization.
 *     Launches of one executable graph are ordered among themselves, so a
 *     kept graph serves one stream only: no dependency across streams.
 *   - Every error cuLaunchKernel gives at once, the graph calls give
 *     before anything runs (invalid values and handles when a node is
 *     added, a launch out of resources at instantiation or update; measured
 *     on driver 580): then the run's launches are issued one by one, as
 *     before, and the first failure is the deferred error.  Faults in the
 *     kernels are the context's sticky error either way.
 *   - Not while a capture may be in progress (the captured graph would get
 *     one child-graph node, not the kernels), nor for a printf session
 *     (its launches are marked one by one), cooperative launches or
 *     launches with attributes (CU_LAUNCH_EX: not batched as runs).
 *
 * Instantiation costs about what the run's launches would, so a run is
 * made a graph only the second time a run of its length on its stream
 * comes; at most VCU__GRUN_SLOTS kept, each counted in the session's host
 * budget.  VCU_LAUNCH_GRAPHS=0 in the worker's environment turns it off.
 */

/* How many entries from off, at most left, are plain launches of one
 * device and stream that could go as one graph; 0 when the session may
 * not run them so. */
static uint32_t vcu__grun_len(const vcu__cuda_sess_t *cs, const unsigned char *p, size_t off,
                              size_t plen, uint32_t left)
{
    struct vcu_cu_launch_req first;
    uint32_t n;

    if (!cs->cu->graphs || cs->capture || cs->out != NULL)
        return 0;
    for (n = 0; n < left; n++) {
        struct vcu_cu_batch_entry e;
        struct vcu_cu_launch_req rq;

        memcpy(&e, p + off, sizeof(e));
        if (e.opcode != VCU_OP_CU_LAUNCH || e.len < sizeof(rq))
            break;
        memcpy(&rq, p + off + sizeof(e), sizeof(rq));
        if (rq.flags != 0 || (n > 0 && (rq.stream != first.stream ||
                                        rq.hdr.device != first.hdr.device)))
            break;
        if (n == 0)
            first = rq;
        off += sizeof(e) + e.len + (8 - e.len % 8) % 8;
        if (off > plen)
            break;
    }
    return n;
}

/* The kept run for (stream, dev, n), made the most recently used; or a
 * slot taken for it (ex NULL), the least recently used one freed. */
static vcu__grun_t *vcu__grun_slot(vcu__cuda_sess_t *cs, uint64_t stream, uint32_t dev,
                                   uint32_t n, bool *found)
{
    vcu__grun_t *g, *victim = &cs->grun[0];
    unsigned int i;

    for (i = 0; i < VCU__GRUN_SLOTS; i++) {
        g = &cs->grun[i];
        if (g->n == n && g->stream == stream && g->dev == dev) {
            g->used = ++cs->grun_tick;
            *found = true;
            return g;
        }
        if (g->used < victim->used)
            victim = g;
    }
    vcu__grun_free(cs, victim);
    victim->stream = stream;
    victim->dev = dev;
    victim->n = n;
    victim->used = ++cs->grun_tick;
    *found = false;
    return victim;
}

/*
 * Issues the n launch entries from off (vcu__grun_len() found them) as
 * one graph; *end is then the offset after them.  -1 when it did not
 * launch (nothing of the run has run): the caller issues them one by one.
 */
static int vcu__grun(vcu__cuda_sess_t *cs, const unsigned char *p, size_t off, uint32_t n,
                     size_t *end)
{
    vcu__cuda_t *cu = cs->cu;
    vcu__op_t *o = cs->op;
    struct vcu_cu_launch_req rq;
    CUgraphExecUpdateResultInfo info;
    CUgraphNode prev = NULL, node;
    CUgraph gr = NULL;
    vcu__grun_t *g;
    CUstream st;
    bool found;
    uint32_t i, dev;
    CUresult r = CUDA_SUCCESS;

    memcpy(&rq, p + off + sizeof(struct vcu_cu_batch_entry), sizeof(rq));
    dev = rq.hdr.device;
    g = vcu__grun_slot(cs, rq.stream, dev, n, &found);
    if (!found || o == NULL)
        return -1;
    if (g->skip > 0) {
        g->skip--;
        return -1;
    }
    /* As vcu__op_CU_LAUNCH: the device's context current, the stream's.
     * A stream or function of another device's context, which the driver
     * refuses a launch, could be a graph's node there: launch by launch. */
    memset(o, 0, offsetof(vcu__op_t, rb));
    o->cs = cs;
    o->cu = cu;
    o->p = p + off + sizeof(struct vcu_cu_batch_entry);
    o->plen = sizeof(rq);
    if (vcu__enter(o) != 0 || vcu__stream(o, rq.stream, &st) != 0)
        return -1;
    if (rq.stream != VCU_CU_STREAM_LEGACY && rq.stream != VCU_CU_STREAM_PER_THREAD) {
        const vcu__hent_t *se = vcu__htab_get(&cs->tab, rq.stream, VCU__H_STREAM);

        if (se == NULL || se->dev != dev)
            return -1;
    }
    if (g->ex == NULL && vcu__mem_take(cs, VCU__GRUN_BYTES) != 0)
        return -1;
    if (cu->fn.cuGraphCreate(&gr, 0) != CUDA_SUCCESS)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    for (i = 0; i < n && r == CUDA_SUCCESS; i++) {
        struct vcu_cu_batch_entry e;
        CUDA_KERNEL_NODE_PARAMS kn;
        const vcu__hent_t *fe;
        void **kp;

        memcpy(&e, p + off, sizeof(e));
        memcpy(&rq, p + off + sizeof(e), sizeof(rq));
        fe = vcu__htab_get(&cs->tab, rq.function, VCU__H_FUNCTION);
        if (fe == NULL || fe->u.fn.mod->dev != dev ||
            !vcu__param_bytes_ok(rq.param_bytes, e.len - sizeof(rq)) ||
            (kp = vcu__params(o, fe, p + off + sizeof(e) + sizeof(rq), rq.param_bytes)) == NULL) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        vcu__kernel_node(&kn, fe, rq.grid, rq.block, rq.shared_mem, kp);
        /* The node keeps a copy of the parameters. */
        r = cu->fn.cuGraphAddKernelNode(&node, gr, i > 0 ? &prev : NULL, i > 0, &kn);
        vcu__params_free(o, fe, kp);
        prev = node;
        off += sizeof(e) + e.len + (8 - e.len % 8) % 8;
    }
    /* A graph the driver will not instantiate or update (a launch out of
     * resources, a kernel a graph may not hold or change to): this shape
     * goes launch by launch a while, then is made anew. */
    if (g->ex == NULL) {
        /* Its budget taken above. */
        if (r == CUDA_SUCCESS && (r = cu->fn.cuGraphInstantiate(&g->ex, gr, 0)) != CUDA_SUCCESS) {
            g->ex = NULL;
            g->skip = VCU__GRUN_BACKOFF;
        }
        if (r != CUDA_SUCCESS)
            vcu__mem_give(cs, VCU__GRUN_BYTES);
    } else if (r == CUDA_SUCCESS &&
               (r = cu->fn.cuGraphExecUpdate(g->ex, gr, &info)) != CUDA_SUCCESS) {
        vcu__grun_exec_drop(cs, g);
        g->skip = VCU__GRUN_BACKOFF;
    }
    if (r == CUDA_SUCCESS)
        r = cu->fn.cuGraphLaunch(g->ex, st);
    if (gr != NULL)
        cu->fn.cuGraphDestroy(gr);
    if (r != CUDA_SUCCESS)
        return -1;
    *end = off;
    return 0;
}

/*
 * CU_BATCH: the framing is checked whole before any entry runs; then each
 * entry runs as the same request sent alone with VCU_REQ_F_ASYNC (its
 * failure becomes the deferred error, the first one kept), or a run of
 * launches as one graph (vcu__grun()), which fails only before any of
 * them ran.  The reply is the batch's own, with the deferred error as any
 * reply's.
 */
static uint32_t vcu__batch(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                           const unsigned char *p, unsigned int nsegs, void *out,
                           size_t *out_len)
{
    struct vcu_cu_batch_req b;
    struct vcu_cu_resp r = { (uint32_t)CUDA_ERROR_INVALID_VALUE, 0 };
    size_t plen = h->payload_len, off, pad;
    int async = (h->flags & VCU_REQ_F_ASYNC) != 0;
    uint32_t i, alone, st = VCU_S_EINVAL;

    memcpy(&b, p, sizeof(b));
    if (nsegs != 0 || b.hdr.device != 0 || b.hdr.reserved != 0 || b.reserved != 0 ||
        b.count == 0 || b.count > VCU_CU_BATCH_MAX || plen > VCU_CU_BATCH_BYTES)
        goto reply;
    for (i = 0, off = sizeof(b); i < b.count; i++) {
        struct vcu_cu_batch_entry e;

        if (plen - off < sizeof(e))
            goto reply;
        memcpy(&e, p + off, sizeof(e));
        off += sizeof(e);
        if (!vcu_batch_op_ok(e.opcode) || e.len < vcu__req_size(e.opcode) || e.len > plen - off)
            goto reply;
        off += e.len;
        pad = (8 - e.len % 8) % 8;
        if (pad > plen - off)
            goto reply;
        off += pad;
    }
    if (off != plen)
        goto reply;

    (void)vcu__op_scratch(cs);       /* for the runs' graphs; without it, none */
    for (i = 0, off = sizeof(b), alone = 0; i < b.count; i++) {
        struct vcu_cu_batch_entry e;
        struct vcu_req_hdr sh = *h;
        struct vcu_cu_resp er;
        vcu__cuda_wait_t *w = NULL;
        size_t elen = 0;

        if (alone == 0) {
            uint32_t n = vcu__grun_len(cs, p, off, plen, b.count - i);

            if (n >= VCU__GRUN_MIN && vcu__grun(cs, p, off, n, &off) == 0) {
                i += n - 1;
                continue;
            }
            /* Not as a graph: the run's launches one by one. */
            alone = n > 0 ? n : 1;
        }
        alone--;
        memcpy(&e, p + off, sizeof(e));
        off += sizeof(e);
        sh.opcode = e.opcode;
        sh.flags = VCU_REQ_F_ASYNC;
        sh.payload_len = e.len;
        sh.nsegs = 0;
        /* Entries never wait (vcu_batch_op_ok): none comes back with w. */
        (void)vcu__cuda_exec(cs, &sh, p + off, NULL, 0, &er, sizeof(er), &elen, NULL, &w);
        if (w != NULL)
            vcu__wait_free(cs, w);
        off += e.len + (8 - e.len % 8) % 8;
    }
    r.result = CUDA_SUCCESS;
    st = VCU_S_OK;
reply:
    r.deferred = vcu__deferred(cs, async, r.result);
    memcpy(out, &r, sizeof(r));
    *out_len = sizeof(r);
    return st;
}

uint32_t vcu__cuda_exec(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h, const void *payload,
                        const vcu_segment_t *segs, unsigned int nsegs, void *out, size_t out_cap,
                        size_t *out_len, vcu_request_t *req, vcu__cuda_wait_t **wait)
{
    uint32_t op = h->opcode, st;
    size_t rqsz = vcu__req_size(op), rpsz = vcu__resp_size(op);
    int async = (h->flags & VCU_REQ_F_ASYNC) != 0;
    vcu__op_t *o;

    *out_len = 0;
    *wait = NULL;
    if (cs == NULL)
        return VCU_S_ENOTSUP;
    if (op < 0x0100 || rpsz < sizeof(struct vcu_cu_resp))
        return VCU_S_ENOTSUP;
    if (h->payload_len < rqsz || payload == NULL || (nsegs > 0 && segs == NULL))
        return VCU_S_EINVAL;
    /* A parked request is completed later into req->resp, which must be
     * the guest's own buffer: an async request's reply is redirected by
     * the core into its queue item, freed once exec returns.  An async
     * WAIT has no reader anyway (a cookie handed to it would be lost). */
    if (op == VCU_OP_CU_CALLBACK_WAIT && async)
        return VCU_S_EINVAL;
    if (out_cap < rpsz)
        return VCU_S_ERANGE;
    if (op == VCU_OP_CU_CALLBACK_WAIT)
        return vcu__cb_wait(cs, out, out_cap, out_len, req);
    if (op == VCU_OP_CU_CALLBACK_DONE)
        return vcu__cb_done(cs, payload, out, out_len);
    if (op == VCU_OP_CU_BATCH)
        return vcu__batch(cs, h, payload, nsegs, out, out_len);

    if ((o = vcu__op_scratch(cs)) == NULL)
        return VCU_S_ENOMEM;
    /* Handlers write only their opcode's reply struct (rpsz bytes). */
    memset(o, 0, offsetof(vcu__op_t, rb));
    memset(&o->rb, 0, rpsz);
    o->cs = cs;
    o->cu = cs->cu;
    o->h = h;
    o->p = payload;
    o->plen = h->payload_len;
    o->segs = segs;
    o->nsegs = nsegs;
    o->out = out;
    o->cap = out_cap;
    o->len = rpsz;
    o->res = CUDA_SUCCESS;
    if (cs->out != NULL && vcu_op_flushes_printf(op, payload)) {
        /* A printf session's synchronizing call blocks until its GPU
         * work is done, and the output the driver wrote meanwhile is the
         * session's (CU_TAKE_OUTPUT). */
        vcu__out_sync_begin(cs->out);
        st = vcu__dispatch(o, op);
        if (o->wait != NULL)
            vcu__wait_block(cs, o->wait);
        vcu__out_sync_end(cs->out);
    } else {
        if (cs->out != NULL && (op == VCU_OP_CU_LAUNCH || op == VCU_OP_CU_LAUNCH_EX ||
                                 op == VCU_OP_CU_GRAPH_LAUNCH))
            vcu__out_touch(cs->out);
        st = vcu__dispatch(o, op);
    }

    if (cs->cu->acct != NULL && (vcu__sticky(o->res) || vcu__sticky((CUresult)cs->deferred)))
        vcu__acct_fault(cs->cu->acct, cs->aslot);

    /* An async request has no reader: its first failure waits for the
     * next reply.  A malformed one counts as CUDA_ERROR_INVALID_VALUE. */
    if (async || (op != VCU_OP_CU_GET_DEFERRED_ERROR && op != VCU_OP_CU_TAKE_OUTPUT))
        /* TAKE_OUTPUT: the guest library's own, after the program's call. */
        o->rb.r.deferred = vcu__deferred(
            cs, async, st != VCU_S_OK ? (uint32_t)CUDA_ERROR_INVALID_VALUE : (uint32_t)o->res);
    if (st != VCU_S_OK) {
        /* Still a vcu_cu_resp, for a guest that reads it regardless. */
        struct vcu_cu_resp r = { (uint32_t)CUDA_ERROR_INVALID_VALUE, o->rb.r.deferred };

        memcpy(out, &r, sizeof(r));
        *out_len = sizeof(r);
    } else {
        o->rb.r.result = (uint32_t)o->res;
        memcpy(out, &o->rb, rpsz);
        *out_len = o->len;
    }
    if (o->wait != NULL) {
        /* Replied when the GPU work it issued is done. */
        o->wait->out_len = *out_len;
        o->wait->async = async;
        o->wait->status = st;
        *wait = o->wait;
        return VCU__WAITING;
    }
    return st;
}
