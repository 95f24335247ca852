/*
 * TEST DOUBLE ONLY: a CPU stand-in for the CUDA driver library
 * (libcuda.so.1), for machines without a GPU (CI).  Not part of the
 * product, never shipped, never loaded unless a test points the backend
 * at it.  It reports itself as "virtio-cuda CPU stand-in (test double)".
 *
 * What it models, and how:
 *  - two devices with H100 (sm_90) limits, so that device selection and
 *    launch validation behave as on a real GPU;
 *  - device memory is host memory: a CUdeviceptr is a host address, and
 *    every allocation is in one table so that frees, address ranges and
 *    copies are validated (a bad pointer is an error, never a crash);
 *    each device has 80 GiB, or $VCU_FAKECUDA_MEM_MB (the fuzz target
 *    keeps it small: under ASan a huge allocation is slow to free);
 *  - kernels are "twins" (vcu_twin.h): C functions found by the kernel's
 *    mangled name, run synchronously on the calling thread;
 *  - streams run their work at once on the calling thread, so stream
 *    order holds trivially; events record a CLOCK_MONOTONIC time;
 *  - stream capture records graph nodes instead of running them, and a
 *    graph launch runs its nodes in the order they were added (a valid
 *    topological order, since a node's dependencies exist before it);
 *  - a twin that reports a fault makes it the sticky error of every
 *    context of the process, those created later too, as a GPU exception
 *    does with NVIDIA's driver 580 (measured: tests/gpu/probe-ctxfault.cu);
 *    VCU_FAKECUDA_STICKY=context confines it to the launching context
 *    (for the fuzzer, which runs many sessions in one process).
 *  - memory pools cache what is freed into them and hand it out again
 *    without clearing it, as CUDA's pools do (data survives a free/alloc
 *    through the same pool);
 *  - a graph node running a function of an unloaded module aborts the
 *    process, as the real driver segfaults there;
 *  - a CU_STREAM_CAPTURE_MODE_GLOBAL capture makes potentially unsafe
 *    calls (cuMemAlloc, cuMemFree) fail on every thread of the process,
 *    a THREAD_LOCAL one only on the thread that began it;
 *  - GPU core dump settings (cuCoredump*AttributeGlobal) are kept, for
 *    tests to read back;
 *  - VCU_FAKECUDA_HOST_THREAD=1 runs a host function on a thread of its
 *    own, as the driver does, and the work submitted after it (every
 *    context's: one queue is enough for the tests) waits until it
 *    returns: events and streams report CUDA_ERROR_NOT_READY,
 *    synchronizing calls and new work block meanwhile (a graph's later
 *    nodes do not wait).
 *
 * Only the entry points the project needs exist; the backend reports any
 * other as missing, as it would with an old driver.  The exported names
 * are the ones cuda.h's version macros give (cuMemAlloc -> cuMemAlloc_v2),
 * because the functions are defined under their cuda.h names.
 *
 * Locking: one mutex, g_lock, protects every table and every object.  It
 * is dropped while a twin or a host function runs: host functions may
 * block (the backend's callbacks wait for the guest) and other threads
 * must go on meanwhile.  Code that drops it re-validates what it holds.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The header's declarations carry the exported visibility; the rest of
 * this library is built with -fvisibility=hidden. */
#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaProfiler.h>
#pragma GCC visibility pop

#include "vcu_twin.h"

/* Weak, so that the library loads (with no twins) before twins.c exists. */
#pragma weak vcu_twins
#pragma weak vcu_twin_globals

#define FC_DEVICE_NAME      "virtio-cuda CPU stand-in (test double)"
#define FC_NDEV             2
#define FC_TOTAL_MEM_DEFAULT (80ull << 30)
#define FC_ALIGN            256
#define FC_SMS              132
#define FC_MAX_THREADS      1024
#define FC_THREADS_PER_SM   2048
#define FC_BLOCKS_PER_SM    32
#define FC_REGS_PER_SM      65536
#define FC_SHARED_DEFAULT   49152       /* per block without opt-in */
#define FC_SHARED_OPTIN     232448      /* per block with opt-in: 227 KiB */
#define FC_SHARED_PER_SM    233472      /* 228 KiB */
#define FC_SHARED_RESERVED  1024        /* per block, taken by the system */
#define FC_MAX_PARAM_BYTES  32764       /* kernel parameter space, sm_70+ */
#define FC_PRIO_LEAST       0
#define FC_PRIO_GREATEST    (-5)

/*
 * Device memory comes from one arena the stand-in maps at a fixed address
 * when it loads, as the driver reserves its virtual range, and is handed
 * out first fit in FC_ALIGN steps: the addresses a process gets depend
 * only on the calls it made, as the driver's do without address
 * randomization (docs/design.md, "Live migration"), so a test can replay
 * a session's history and check them.  Freed memory is cleared (its
 * whole pages given back), so fresh memory reads as zeros, as calloc's.
 */
#define FC_ARENA_BASE 0x7e0000000000ull
#define FC_ARENA_SIZE (1ull << 40)

typedef struct fc_ext_s {
    uintptr_t off, len;
} fc_ext_t;

static pthread_mutex_t g_arena_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *g_arena;          /* protected by g_arena_lock, as below */
/* The arena's file once a handle of it was exported (fc_ipc_share): the
 * arena is then a shared mapping of it; -1 before.  g_arena_lock. */
static int g_arena_fd = -1;
/* The arena's first bytes that file covers (fc_ipc_share). */
#define FC_IPC_SHARED (512ull << 20)
static fc_ext_t *g_free;                /* free extents, sorted, coalesced */
static size_t g_nfree, g_capfree;
static fc_ext_t *g_used;                /* blocks handed out, sorted */
static size_t g_nused, g_capused;

static int fc_ext_insert(fc_ext_t **v, size_t *n, size_t *cap, size_t at, fc_ext_t e)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        fc_ext_t *g = realloc(*v, nc * sizeof(**v));

        if (!g)
            return -1;
        *v = g;
        *cap = nc;
    }
    memmove(&(*v)[at + 1], &(*v)[at], (*n - at) * sizeof(**v));
    (*v)[at] = e;
    (*n)++;
    return 0;
}

static void fc_ext_remove(fc_ext_t *v, size_t *n, size_t at)
{
    memmove(&v[at], &v[at + 1], (*n - at - 1) * sizeof(*v));
    (*n)--;
}

static int fc_arena_init_locked(void)
{
    void *p;

    if (g_arena)
        return 0;
    p = mmap((void *)(uintptr_t)FC_ARENA_BASE, FC_ARENA_SIZE, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)    /* taken: anywhere, still deterministic within it */
        p = mmap(NULL, FC_ARENA_SIZE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    g_arena = p;
    g_nfree = 0;
    if (fc_ext_insert(&g_free, &g_nfree, &g_capfree, 0, (fc_ext_t){ 0, FC_ARENA_SIZE }) != 0) {
        munmap(p, FC_ARENA_SIZE);
        g_arena = NULL;
        return -1;
    }
    return 0;
}

__attribute__((destructor)) static void fc_arena_fini(void)
{
    if (g_arena)
        munmap(g_arena, FC_ARENA_SIZE);
    g_arena = NULL;
    free(g_free);
    free(g_used);
    g_free = g_used = NULL;
    g_nfree = g_capfree = g_nused = g_capused = 0;
}

/* size bytes of zeroed device memory, FC_ALIGN aligned, or NULL. */
static void *fc_dev_alloc(size_t size)
{
    uintptr_t len = (size + FC_ALIGN - 1) & ~(uintptr_t)(FC_ALIGN - 1);
    void *out = NULL;
    size_t i, at;

    if (len < size || len == 0)
        return NULL;
    pthread_mutex_lock(&g_arena_lock);
    if (fc_arena_init_locked() != 0)
        goto out;
    for (i = 0; i < g_nfree && g_free[i].len < len; i++)
        ;
    if (i == g_nfree)
        goto out;
    for (at = 0; at < g_nused && g_used[at].off < g_free[i].off; at++)
        ;
    if (fc_ext_insert(&g_used, &g_nused, &g_capused, at, (fc_ext_t){ g_free[i].off, len }) != 0)
        goto out;
    out = g_arena + g_free[i].off;
    g_free[i].off += len;
    g_free[i].len -= len;
    if (g_free[i].len == 0)
        fc_ext_remove(g_free, &g_nfree, i);
out:
    pthread_mutex_unlock(&g_arena_lock);
    return out;
}

/* Gives back a block fc_dev_alloc() returned (NULL: nothing). */
static void fc_dev_free(void *p)
{
    uintptr_t off, len, pg = (uintptr_t)sysconf(_SC_PAGESIZE), a, b;
    size_t i;

    if (!p)
        return;
    pthread_mutex_lock(&g_arena_lock);
    off = (uintptr_t)((unsigned char *)p - g_arena);
    for (i = 0; i < g_nused && g_used[i].off != off; i++)
        ;
    if (i == g_nused) {
        pthread_mutex_unlock(&g_arena_lock);
        return;
    }
    len = g_used[i].len;
    fc_ext_remove(g_used, &g_nused, i);
    /* Cleared: whole pages given back, the partial ones written. */
    a = (off + pg - 1) & ~(pg - 1);
    b = (off + len) & ~(pg - 1);
    if (a < b) {
        uintptr_t in_file = g_arena_fd < 0 || a >= FC_IPC_SHARED ? a
                            : b < FC_IPC_SHARED                   ? b
                                                                  : FC_IPC_SHARED;

        memset(g_arena + off, 0, a - off);
        /* A shared file's pages stay in the file: punched out. */
        if (in_file > a && fallocate(g_arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                     (off_t)a, (off_t)(in_file - a)) != 0)
            memset(g_arena + a, 0, in_file - a);
        if (b > in_file)
            madvise(g_arena + in_file, b - in_file, MADV_DONTNEED);
        memset(g_arena + b, 0, off + len - b);
    } else {
        memset(g_arena + off, 0, len);
    }
    for (i = 0; i < g_nfree && g_free[i].off < off; i++)
        ;
    if (i > 0 && g_free[i - 1].off + g_free[i - 1].len == off) {
        g_free[i - 1].len += len;
        if (i < g_nfree && g_free[i - 1].off + g_free[i - 1].len == g_free[i].off) {
            g_free[i - 1].len += g_free[i].len;
            fc_ext_remove(g_free, &g_nfree, i);
        }
    } else if (i < g_nfree && off + len == g_free[i].off) {
        g_free[i].off = off;
        g_free[i].len += len;
    } else {
        (void)fc_ext_insert(&g_free, &g_nfree, &g_capfree, i, (fc_ext_t){ off, len });
    }
    pthread_mutex_unlock(&g_arena_lock);
}

/* Device memory per device: set once, when the library loads. */
static unsigned long long g_total_mem = FC_TOTAL_MEM_DEFAULT;
#define FC_TOTAL_MEM g_total_mem

__attribute__((constructor)) static void fc_init_total_mem(void)
{
    const char *e = getenv("VCU_FAKECUDA_MEM_MB");
    unsigned long long mb = e ? strtoull(e, NULL, 10) : 0;

    if (mb > 0 && mb < (1ull << 24))
        g_total_mem = mb << 20;
}

/* ------------------------------------------------------------------ */
/* Objects and lists                                                   */

/*
 * Every handle given out is a pointer to one of these, and every live
 * one is on its type's list: a handle is valid if it is on the list and
 * has the id it had when given out (the id guards against a freed
 * object's address coming back for a new one).
 */
typedef struct fc_obj_s {
    struct fc_obj_s *next;
    uint64_t id;
} fc_obj_t;

typedef struct fc_ctx_s fc_ctx_t;
typedef struct fc_stream_s fc_stream_t;
typedef struct fc_event_s fc_event_t;
typedef struct fc_module_s fc_module_t;
typedef struct fc_func_s fc_func_t;
typedef struct fc_graph_s fc_graph_t;
typedef struct fc_node_s fc_node_t;
typedef struct fc_exec_s fc_exec_t;
typedef struct fc_cap_s fc_cap_t;

/* A stream capture in progress: the graph being built. */
struct fc_cap_s {
    fc_obj_t hdr;
    fc_graph_t *graph;
    fc_stream_t *origin;
    CUstreamCaptureMode mode;
    pthread_t thread;           /* that began it (THREAD_LOCAL) */
    int invalidated;            /* a forbidden call was made during it */
    int to_graph;               /* into a listed graph (cuStreamBeginCaptureToGraph):
                                 * the caller's, never freed here */
};

struct fc_stream_s {
    fc_obj_t hdr;
    fc_ctx_t *ctx;
    unsigned int flags;
    int priority;
    fc_cap_t *cap;              /* capture this stream takes part in */
    fc_node_t **deps;           /* capture: what the next node depends on */
    size_t ndeps;
    /* cuStreamSetAttribute's values (priority apart), by attribute id. */
    CUstreamAttrValue attrs[CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING + 1];
};

struct fc_ctx_s {
    fc_obj_t hdr;
    CUdevice dev;
    unsigned int flags;
    CUresult sticky;            /* a twin's fault; ends with the context */
    size_t limits[CU_LIMIT_MAX];
    size_t stack_res;           /* device memory its stack limit reserves past the default's */
    CUsharedconfig smem_config; /* cuCtxSetSharedMemConfig's, kept */
    unsigned int sms;           /* SMs its kernels run on (an execution affinity) */
    uint64_t peer_id[8];        /* contexts it has peer access to (cuCtxEnablePeerAccess) */
    unsigned int npeer;
    fc_stream_t null_stream;    /* NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD */
};

struct fc_event_s {
    fc_obj_t hdr;
    fc_ctx_t *ctx;
    unsigned int flags;
    int recorded;
    uint64_t ns;                /* CLOCK_MONOTONIC at the last record */
    uint64_t cap_id;            /* recorded in this capture, or 0 */
    fc_node_t **cap_deps;       /* the capturing stream's deps then */
    size_t ncap_deps;
};

/* A CUDA array: host memory, rows of Width elements, Height (at least 1)
 * rows per slice, Depth (at least 1) slices, packed. */
typedef struct fc_array_s {
    fc_obj_t hdr;
    fc_ctx_t *ctx;
    CUDA_ARRAY3D_DESCRIPTOR d;
    size_t elem, row, rows, slices;
    unsigned char *data;
} fc_array_t;

/* A mipmapped array: its levels, each an array of its own on g_arrays
 * (freed with it). */
typedef struct fc_mipmap_s {
    fc_obj_t hdr;
    fc_ctx_t *ctx;
    unsigned int levels;
    fc_array_t *lv[32];
} fc_mipmap_t;

/* A texture or surface object: its descriptors, nothing to sample. */
typedef struct fc_texobj_s {
    fc_obj_t hdr;
    fc_ctx_t *ctx;
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view;
    int has_view;
} fc_texobj_t;

typedef struct fc_global_s {
    const vcu_twin_global_t *def;
    void *mem;                  /* FC_ALIGN-aligned storage, in g_mem */
    void *raw;                  /* what to free */
} fc_global_t;

struct fc_module_s {
    fc_obj_t hdr;
    fc_ctx_t *ctx;
    unsigned char *image;       /* private copy of the image */
    size_t size;
    int compressed;             /* names can't be checked in the bytes */
    fc_global_t *globals;
    size_t nglobals;
};

/* The page managed globals are packed in, for every module of the
 * process, as driver 580 packs them (under g_lock; never given back). */
static unsigned char *g_mpage;
static size_t g_mpage_used;

struct fc_func_s {
    fc_obj_t hdr;
    fc_module_t *mod;
    const vcu_twin_t *twin;
    int max_dyn_shared;         /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int carveout;
    int cluster[3];
    int non_portable_cluster;
    int cluster_policy;
    void *code;                 /* its code in device memory from its first use */
};

typedef enum {
    FC_NODE_KERNEL,
    FC_NODE_MEMCPY,
    FC_NODE_MEMSET,
    FC_NODE_HOST,
    FC_NODE_EMPTY,
    FC_NODE_CHILD,
    FC_NODE_MEMALLOC,
    FC_NODE_MEMFREE,
    FC_NODE_COND,
    FC_NODE_EVENT_RECORD,
    FC_NODE_EVENT_WAIT,
} fc_node_type_t;

/* A user object: its references, wherever held (the caller's, graphs',
 * execs'); the destructor runs when the last goes.  On g_uobjs. */
typedef struct fc_uobj_s {
    struct fc_obj_s *next;      /* fc_obj_t's layout */
    uint64_t id;
    unsigned int refs;
    void *ptr;
    CUhostFn destroy;
} fc_uobj_t;

/* count references of a graph to a user object. */
typedef struct fc_uref_s {
    fc_uobj_t *obj;
    unsigned int count;
} fc_uref_t;

/* A conditional handle: its value lives in host memory, which a twin
 * (the stand-in's device code) writes as cudaGraphSetConditional does.
 * The handle is its number among the handles made on its graph (1, 2,
 * ...), as NVIDIA's driver 580 numbers them: two graphs' handles may be
 * equal.  Kept until the process ends. */
typedef struct fc_cond_s {
    unsigned int value;
    unsigned int dflt;
    unsigned int flags;
    unsigned long long seen;    /* the graph launch that last applied dflt */
    struct fc_graph_s *graph;   /* made on; NULL once that graph is freed */
    unsigned int idx;           /* the handle: its number in graph, from 1 */
    struct fc_cond_s *next;
} fc_cond_t;

typedef struct fc_kernel_s {
    fc_func_t *func;
    uint64_t func_id;
    unsigned int grid[3], block[3];
    unsigned int shared;
    int cooperative;
    unsigned int cluster[3];    /* blocks per cluster; 0s: none given */
    void *params;               /* packed, owned by the node */
    size_t params_len;
} fc_kernel_t;

struct fc_node_s {
    fc_graph_t *graph;
    size_t index;               /* in graph->nodes */
    fc_node_type_t type;
    size_t *deps;               /* indices of the nodes it depends on */
    size_t ndeps;
    /* Each dependency's edge data (CUgraphEdgeData's from_port, to_port,
     * type: bytes 0-2); NULL: all the default.  The stand-in runs every
     * edge as a full dependency. */
    uint32_t *dep_data;
    int disabled;               /* an exec's node: cuGraphNodeSetEnabled(0) */
    /* A kernel node's cuGraphKernelNodeSetAttribute values, by id. */
    CUkernelNodeAttrValue attrs[CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING + 1];
    union {
        fc_kernel_t kernel;
        CUDA_MEMCPY3D copy;
        CUDA_MEMSET_NODE_PARAMS set;
        CUDA_HOST_NODE_PARAMS host;
        fc_graph_t *child;      /* a private clone, on no list */
        struct {
            CUdeviceptr dptr;   /* a FC_MEM_GRAPH range, counted by the node */
            size_t size;
            int dev;
        } alloc;
        CUdeviceptr free_dptr;
        struct fc_event_s *event;   /* EVENT_RECORD, EVENT_WAIT */
        struct {
            fc_cond_t *cond;
            CUgraphConditionalNodeType type;
            unsigned int size;
            fc_graph_t **bodies;
            int listed;         /* the bodies are on g_graphs (the node's
                                 * first graph), else private clones */
        } cond;
    } u;
};

struct fc_graph_s {
    fc_obj_t hdr;
    fc_node_t **nodes;          /* in the order added: a topological order */
    size_t n, cap;
    int body;                   /* a conditional node's: not destroyed alone */
    struct fc_graph_s *parent;  /* a body's: the graph of its node */
    unsigned int nconds;        /* conditional handles made on it */
    fc_uref_t *urefs;           /* user object references it owns */
    size_t nurefs;
};

struct fc_exec_s {
    fc_obj_t hdr;
    fc_graph_t *graph;          /* a private clone, on no list */
    unsigned long long flags;   /* as instantiated (cuGraphExecGetFlags) */
};

/* FC_MEM_VMM: a cuMemMap mapping while some device may access it; the
 * mapping owns the memory.  Such ranges back to back make one range for
 * copies and kernels, as the GPU's page tables do. */
/* FC_MEM_IPC: another process's cuMemAlloc memory, opened by
 * cuIpcOpenMemHandle (its arena mapped here, see fc_ipc_share). */
typedef enum {
    FC_MEM_DEVICE, FC_MEM_GLOBAL, FC_MEM_HOSTREG, FC_MEM_VMM, FC_MEM_GRAPH, FC_MEM_IPC
} fc_mem_kind_t;

/* One range of memory a device pointer may point into. */
typedef struct fc_mem_s {
    uintptr_t base;
    size_t size;
    fc_mem_kind_t kind;
    fc_ctx_t *ctx;              /* freed with it (DEVICE, HOSTREG) */
    void *raw;                  /* DEVICE: what to free */
    size_t cap;                 /* DEVICE: usable bytes from base */
    int dev;
    struct fc_pool_s *pool;     /* cuMemAllocAsync, FromPoolAsync: its pool */
    int managed;                /* GLOBAL: a __managed__ one (IS_MANAGED) */
    /* GRAPH: an allocation node's address range, fixed when the node is
     * made and held by it and its copies (refs); mapped from a launch
     * that ran the node until a trim finds it unused; live between the
     * node's run and its free. */
    unsigned int refs;
    int mapped, live;
} fc_mem_t;

/* A block freed into a pool, kept for reuse with its contents. */
typedef struct fc_cached_s {
    struct fc_cached_s *next;
    void *raw;
    size_t cap;                 /* usable bytes from the aligned base */
} fc_cached_t;

typedef struct fc_pool_s {
    fc_obj_t hdr;               /* created pools: on g_upools */
    int dev;
    int dead;                   /* destroyed with blocks out: freed with the last */
    int share;                  /* made with POSIX descriptors */
    uint32_t src_pid;           /* imported: the exporting process's (0: not imported) */
    size_t nlive;               /* blocks handed out and not yet freed */
    fc_cached_t *cache;
    int reuse_follow, reuse_opportunistic, reuse_internal;
    cuuint64_t release_threshold, reserved_high, used, used_high;
} fc_pool_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init;
static uint64_t g_next_id = 1;
static fc_obj_t *g_ctxs, *g_streams, *g_events, *g_modules, *g_funcs, *g_graphs, *g_execs,
    *g_caps, *g_upools, *g_arrays, *g_texobjs, *g_surfobjs, *g_mipmaps, *g_uobjs;
static fc_mem_t *g_mem;         /* sorted by base, ranges disjoint */
static size_t g_nmem, g_capmem;
static size_t g_dev_used[FC_NDEV];
/* Graph memory per device: mapped (RESERVED_MEM_CURRENT), live
 * (USED_MEM_CURRENT) and their high marks. */
static size_t g_gmem_res[FC_NDEV], g_gmem_used[FC_NDEV], g_gmem_res_high[FC_NDEV],
    g_gmem_used_high[FC_NDEV];
static fc_cond_t *g_conds;
static fc_pool_t g_pools[FC_NDEV];

/* Current context of this thread; the id catches a destroyed one. */
static __thread fc_ctx_t *tls_ctx;
static __thread uint64_t tls_ctx_id;

static void fc_list_add(fc_obj_t **head, void *p)
{
    fc_obj_t *o = p;

    o->id = g_next_id++;
    o->next = *head;
    *head = o;
}

static void fc_list_del(fc_obj_t **head, void *p)
{
    for (fc_obj_t **pp = head; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = ((fc_obj_t *)p)->next;
            return;
        }
    }
}

/* Compares addresses only: p is never dereferenced unless on the list. */
static int fc_list_has(fc_obj_t *head, const void *p)
{
    for (fc_obj_t *o = head; o; o = o->next)
        if (o == p)
            return 1;
    return 0;
}

static uint64_t fc_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ */
/* Memory table                                                        */

/* Index of the entry containing addr, or -1. */
static ssize_t fc_mem_find(uintptr_t addr)
{
    size_t lo = 0, hi = g_nmem;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (g_mem[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    lo--;
    if (addr - g_mem[lo].base < g_mem[lo].size)
        return (ssize_t)lo;
    return -1;
}

static CUresult fc_mem_insert(const fc_mem_t *m)
{
    size_t i = 0;

    while (i < g_nmem && g_mem[i].base < m->base)
        i++;
    if ((i > 0 && g_mem[i - 1].base + g_mem[i - 1].size > m->base) ||
        (i < g_nmem && m->base + m->size > g_mem[i].base))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (g_nmem == g_capmem) {
        size_t ncap = g_capmem ? g_capmem * 2 : 64;
        fc_mem_t *n = realloc(g_mem, ncap * sizeof(*n));

        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g_mem = n;
        g_capmem = ncap;
    }
    memmove(&g_mem[i + 1], &g_mem[i], (g_nmem - i) * sizeof(*g_mem));
    g_mem[i] = *m;
    g_nmem++;
    return CUDA_SUCCESS;
}

static void fc_pool_free_cache(fc_pool_t *p)
{
    fc_cached_t *c;

    while ((c = p->cache) != NULL) {
        p->cache = c->next;
        fc_dev_free(c->raw);
        free(c);
    }
}

/* A block of p is freed: kept, contents and all, for the pool's next
 * allocation (as CUDA's pools reuse memory without clearing it). */
static void fc_pool_put(fc_pool_t *p, void *raw, size_t cap, size_t size)
{
    fc_cached_t *c;

    p->used -= size;
    p->nlive--;
    if (p->dead) {
        fc_dev_free(raw);
        if (p->nlive == 0) {
            fc_pool_free_cache(p);
            free(p);
        }
        return;
    }
    c = malloc(sizeof(*c));
    if (!c) {
        fc_dev_free(raw);
        return;
    }
    c->raw = raw;
    c->cap = cap;
    c->next = p->cache;
    p->cache = c;
}

/* Removes entry i, freeing what it owns and giving back its bytes. */
static void fc_mem_remove(size_t i)
{
    fc_mem_t m = g_mem[i];

    memmove(&g_mem[i], &g_mem[i + 1], (g_nmem - i - 1) * sizeof(*g_mem));
    g_nmem--;
    if (m.kind == FC_MEM_DEVICE) {
        g_dev_used[m.dev] -= m.size;
        if (m.pool)
            fc_pool_put(m.pool, m.raw, m.cap, m.size);
        else
            fc_dev_free(m.raw);
    } else if (m.kind == FC_MEM_GLOBAL) {
        g_dev_used[m.dev] -= m.size;    /* the module frees the memory itself */
    } else if (m.kind == FC_MEM_GRAPH) {
        if (m.mapped) {
            g_gmem_res[m.dev] -= m.size;
            g_dev_used[m.dev] -= m.size;
        }
        if (m.live)
            g_gmem_used[m.dev] -= m.size;
        free(m.raw);
    }
}

/*
 * Checks that [addr, addr + len) lies inside one range a device pointer
 * may name.  len 0 still needs addr inside one.
 */
/* Bytes from addr (in entry i) to the end of its range, through the
 * mappings that follow it back to back. */
static size_t fc_mem_span(size_t i, uintptr_t addr)
{
    size_t n = g_mem[i].size - (addr - g_mem[i].base);

    while (g_mem[i].kind == FC_MEM_VMM && i + 1 < g_nmem && g_mem[i + 1].kind == FC_MEM_VMM &&
           g_mem[i + 1].base == g_mem[i].base + g_mem[i].size) {
        i++;
        n += g_mem[i].size;
    }
    return n;
}

static CUresult fc_mem_check(uintptr_t addr, size_t len)
{
    ssize_t i = fc_mem_find(addr);

    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (len > fc_mem_span((size_t)i, addr))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* pool: NULL for cuMemAlloc, else the stream-ordered allocation's pool,
 * whose cached blocks are reused first, not cleared. */
static CUresult fc_mem_alloc(fc_ctx_t *ctx, size_t size, fc_pool_t *pool, CUdeviceptr *out)
{
    fc_mem_t m = { 0 };
    fc_cached_t *c = NULL, **pc;
    size_t rounded;
    void *raw = NULL;
    CUresult rc;

    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    rounded = (size + FC_ALIGN - 1) & ~(size_t)(FC_ALIGN - 1);
    if (rounded < size || rounded > FC_TOTAL_MEM - g_dev_used[ctx->dev])
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (pool) {
        for (pc = &pool->cache; *pc; pc = &(*pc)->next)
            if ((*pc)->cap >= rounded) {
                c = *pc;
                *pc = c->next;
                break;
            }
    }
    if (c) {
        raw = c->raw;
        rounded = c->cap;
        free(c);
    } else {
        /* Fresh device memory reads as zeros, and large blocks stay
         * lazily mapped. */
        raw = fc_dev_alloc(rounded);
    }
    if (!raw)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m.base = ((uintptr_t)raw + FC_ALIGN - 1) & ~(uintptr_t)(FC_ALIGN - 1);
    /* The exact size, so that a copy one byte past the end fails. */
    m.size = size;
    m.cap = rounded;
    m.kind = FC_MEM_DEVICE;
    m.ctx = ctx;
    m.raw = raw;
    m.dev = ctx->dev;
    m.pool = pool;
    rc = fc_mem_insert(&m);
    if (rc != CUDA_SUCCESS) {
        fc_dev_free(raw);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g_dev_used[ctx->dev] += size;
    if (pool) {
        pool->nlive++;
        pool->used += size;
        if (pool->used > pool->used_high)
            pool->used_high = pool->used;
        if (pool->used > pool->reserved_high)
            pool->reserved_high = pool->used;
    }
    *out = (CUdeviceptr)m.base;
    return CUDA_SUCCESS;
}

/* The GRAPH range starting at dptr, or NULL. */
static fc_mem_t *fc_gmem_find(CUdeviceptr dptr)
{
    ssize_t i = fc_mem_find((uintptr_t)dptr);

    if (i < 0 || g_mem[i].base != (uintptr_t)dptr || g_mem[i].kind != FC_MEM_GRAPH)
        return NULL;
    return &g_mem[i];
}

/* A new GRAPH range of size bytes on dev, held once: its address (an
 * address range only: device memory is taken when a launch maps it). */
static CUresult fc_gmem_new(int dev, size_t size, CUdeviceptr *out)
{
    fc_mem_t m = { 0 };
    size_t rounded;
    void *raw;

    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    rounded = (size + FC_ALIGN - 1) & ~(size_t)(FC_ALIGN - 1);
    if (rounded < size || rounded > FC_TOTAL_MEM)
        return CUDA_ERROR_OUT_OF_MEMORY;
    raw = calloc(1, rounded + FC_ALIGN);
    if (!raw)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m.base = ((uintptr_t)raw + FC_ALIGN - 1) & ~(uintptr_t)(FC_ALIGN - 1);
    m.size = size;
    m.cap = rounded;
    m.kind = FC_MEM_GRAPH;
    m.raw = raw;
    m.dev = dev;
    m.refs = 1;
    if (fc_mem_insert(&m) != CUDA_SUCCESS) {
        free(raw);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (CUdeviceptr)m.base;
    return CUDA_SUCCESS;
}

static void fc_gmem_ref(CUdeviceptr dptr, int delta)
{
    fc_mem_t *m = fc_gmem_find(dptr);

    if (!m)
        return;
    if (delta > 0) {
        m->refs++;
    } else if (--m->refs == 0) {
        fc_mem_remove((size_t)(m - g_mem));
    }
}

/* Graph memory freed (a free node, or cuMemFree[Async] after a launch). */
static CUresult fc_gmem_release(fc_mem_t *m)
{
    if (!m->live)
        return CUDA_ERROR_INVALID_VALUE;
    m->live = 0;
    g_gmem_used[m->dev] -= m->size;
    return CUDA_SUCCESS;
}

static CUresult fc_mem_free(CUdeviceptr dptr)
{
    ssize_t i = fc_mem_find((uintptr_t)dptr);

    if (i >= 0 && g_mem[i].base == (uintptr_t)dptr && g_mem[i].kind == FC_MEM_GRAPH)
        return fc_gmem_release(&g_mem[i]);
    /* Device memory, or another process's pool block imported here. */
    if (i < 0 || g_mem[i].base != (uintptr_t)dptr ||
        (g_mem[i].kind != FC_MEM_DEVICE && (g_mem[i].kind != FC_MEM_IPC || !g_mem[i].pool)))
        return CUDA_ERROR_INVALID_VALUE;
    fc_mem_remove((size_t)i);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Contexts, streams, entry checks                                     */

static int fc_ctx_live(const fc_ctx_t *ctx, uint64_t id)
{
    return ctx && fc_list_has(g_ctxs, ctx) && ctx->hdr.id == id;
}

/* The calling thread's context, checked; g_lock held. */
static CUresult fc_cur(fc_ctx_t **out)
{
    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!fc_ctx_live(tls_ctx, tls_ctx_id))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_ctx->sticky != CUDA_SUCCESS)
        return tls_ctx->sticky;
    *out = tls_ctx;
    return CUDA_SUCCESS;
}

static int fc_is_null_stream(CUstream h)
{
    return h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD;
}

/*
 * Resolves a stream handle for the calling thread: the current context
 * must be usable, and the work then runs in the stream's own context.
 */
static CUresult fc_stream_get(CUstream h, fc_ctx_t **ctx_out, fc_stream_t **out)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc = fc_cur(&ctx);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (fc_is_null_stream(h)) {
        s = &ctx->null_stream;
    } else {
        if (!fc_list_has(g_streams, h))
            return CUDA_ERROR_INVALID_HANDLE;
        s = (fc_stream_t *)h;
        if (s->ctx->sticky != CUDA_SUCCESS)
            return s->ctx->sticky;
    }
    *ctx_out = s->ctx;
    *out = s;
    return CUDA_SUCCESS;
}

static void fc_stream_init(fc_stream_t *s, fc_ctx_t *ctx, unsigned int flags, int prio)
{
    memset(s, 0, sizeof(*s));
    s->ctx = ctx;
    s->flags = flags;
    s->priority = prio;
}

static void fc_graph_free(fc_graph_t *g);
/* cuFakeGraphCounts(), under g_lock. */
static unsigned long long g_graph_launches, g_graph_instantiations, g_graph_updates;
static fc_graph_t *fc_graph_clone(const fc_graph_t *src);
static void fc_cap_end(fc_cap_t *cap);

/* Takes s out of its capture; the capture ends when no stream is left. */
static void fc_stream_leave_capture(fc_stream_t *s)
{
    fc_cap_t *cap = s->cap;

    free(s->deps);
    s->deps = NULL;
    s->ndeps = 0;
    s->cap = NULL;
    if (!cap)
        return;
    if (cap->origin == s)
        cap->origin = NULL;
    for (fc_obj_t *o = g_streams; o; o = o->next)
        if (((fc_stream_t *)o)->cap == cap)
            return;
    if (!cap->to_graph)
        fc_graph_free(cap->graph);
    fc_cap_end(cap);
}

static void fc_cap_end(fc_cap_t *cap)
{
    fc_list_del(&g_caps, cap);
    free(cap);
}

static void fc_cap_invalidate(fc_stream_t *s)
{
    if (s->cap)
        s->cap->invalidated = 1;
}

/*
 * The legacy NULL stream waits for every blocking stream of its context:
 * with one of them capturing, that is an implicit dependency a capture
 * can't have.  Invalidates those captures, as CUDA does.
 */
static CUresult fc_legacy_check(fc_ctx_t *ctx)
{
    CUresult rc = CUDA_SUCCESS;

    for (fc_obj_t *o = g_streams; o; o = o->next) {
        fc_stream_t *s = (fc_stream_t *)o;

        if (s->ctx == ctx && s->cap && !(s->flags & CU_STREAM_NON_BLOCKING)) {
            s->cap->invalidated = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
    }
    return rc;
}

/* Like fc_stream_get, for work: adds the legacy-stream check. */
static CUresult fc_stream_work(CUstream h, fc_ctx_t **ctx, fc_stream_t **s)
{
    CUresult rc = fc_stream_get(h, ctx, s);

    /* NULL is the legacy stream: the backend doesn't build for the
     * per-thread default stream. */
    if (rc == CUDA_SUCCESS && (h == NULL || h == CU_STREAM_LEGACY))
        rc = fc_legacy_check(*ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Graphs                                                              */

static void fc_node_free(fc_node_t *n)
{
    if (n->type == FC_NODE_KERNEL)
        free(n->u.kernel.params);
    if (n->type == FC_NODE_CHILD)
        fc_graph_free(n->u.child);
    if (n->type == FC_NODE_MEMALLOC)
        fc_gmem_ref(n->u.alloc.dptr, -1);
    if (n->type == FC_NODE_COND && n->u.cond.bodies) {
        for (unsigned int i = 0; i < n->u.cond.size; i++) {
            if (!n->u.cond.bodies[i])
                continue;
            if (n->u.cond.listed)
                fc_list_del(&g_graphs, n->u.cond.bodies[i]);
            fc_graph_free(n->u.cond.bodies[i]);
        }
        free(n->u.cond.bodies);
    }
    free(n->deps);
    free(n->dep_data);
    free(n);
}

/* Drops count references to o; the last runs its destructor (on the
 * calling thread, g_lock held: a destructor may not call CUDA). */
static void fc_uobj_unref(fc_uobj_t *o, unsigned int count)
{
    o->refs -= count;
    if (o->refs == 0) {
        fc_list_del(&g_uobjs, o);
        o->destroy(o->ptr);
        free(o);
    }
}

static void fc_graph_free(fc_graph_t *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->nurefs; i++)
        if (g->urefs[i].count > 0)
            fc_uobj_unref(g->urefs[i].obj, g->urefs[i].count);
    free(g->urefs);
    for (fc_cond_t *c = g_conds; c; c = c->next)
        if (c->graph == g)
            c->graph = NULL;
    for (size_t i = 0; i < g->n; i++)
        fc_node_free(g->nodes[i]);
    free(g->nodes);
    free(g);
}

static int fc_graph_has_node(const fc_graph_t *g, const fc_node_t *n)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i] == n)
            return 1;
    return 0;
}

/*
 * Adds a node (taking it over, also on failure) whose dependencies are
 * deps[], all nodes of g.
 */
static CUresult fc_graph_add(fc_graph_t *g, fc_node_t *n, fc_node_t *const *deps, size_t ndeps)
{
    if (ndeps) {
        n->deps = calloc(ndeps, sizeof(*n->deps));
        if (!n->deps)
            goto err_nomem;
    }
    for (size_t i = 0; i < ndeps; i++) {
        if (!deps[i] || !fc_graph_has_node(g, deps[i])) {
            fc_node_free(n);
            return CUDA_ERROR_INVALID_VALUE;
        }
        n->deps[i] = deps[i]->index;
    }
    n->ndeps = ndeps;
    if (g->n == g->cap) {
        size_t ncap = g->cap ? g->cap * 2 : 16;
        fc_node_t **nn = realloc(g->nodes, ncap * sizeof(*nn));

        if (!nn)
            goto err_nomem;
        g->nodes = nn;
        g->cap = ncap;
    }
    n->graph = g;
    n->index = g->n;
    g->nodes[g->n++] = n;
    return CUDA_SUCCESS;

err_nomem:
    fc_node_free(n);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static fc_node_t *fc_node_clone(const fc_node_t *src)
{
    fc_node_t *n = malloc(sizeof(*n));

    if (!n)
        return NULL;
    *n = *src;
    n->deps = NULL;
    n->dep_data = NULL;
    if (src->ndeps) {
        n->deps = malloc(src->ndeps * sizeof(*n->deps));
        if (src->dep_data)
            n->dep_data = malloc(src->ndeps * sizeof(*n->dep_data));
        if (!n->deps || (src->dep_data && !n->dep_data)) {
            free(n->deps);
            free(n->dep_data);
            free(n);
            return NULL;
        }
        memcpy(n->deps, src->deps, src->ndeps * sizeof(*n->deps));
        if (src->dep_data)
            memcpy(n->dep_data, src->dep_data, src->ndeps * sizeof(*n->dep_data));
    }
    if (src->type == FC_NODE_KERNEL) {
        n->u.kernel.params = malloc(src->u.kernel.params_len ? src->u.kernel.params_len : 1);
        if (!n->u.kernel.params) {
            free(n->deps);
            free(n->dep_data);
            free(n);
            return NULL;
        }
        memcpy(n->u.kernel.params, src->u.kernel.params, src->u.kernel.params_len);
    }
    if (src->type == FC_NODE_CHILD) {
        n->u.child = fc_graph_clone(src->u.child);
        if (!n->u.child) {
            free(n->deps);
            free(n->dep_data);
            free(n);
            return NULL;
        }
    }
    if (src->type == FC_NODE_MEMALLOC)
        fc_gmem_ref(src->u.alloc.dptr, 1);  /* the same address: the node's */
    if (src->type == FC_NODE_COND) {
        n->u.cond.listed = 0;
        n->u.cond.bodies = calloc(src->u.cond.size, sizeof(*n->u.cond.bodies));
        for (unsigned int i = 0; n->u.cond.bodies && i < src->u.cond.size; i++)
            if (!(n->u.cond.bodies[i] = fc_graph_clone(src->u.cond.bodies[i]))) {
                fc_node_free(n);
                return NULL;
            }
        if (!n->u.cond.bodies) {
            free(n->deps);
            free(n->dep_data);
            free(n);
            return NULL;
        }
    }
    return n;
}

/*
 * Appends copies of all of src's nodes to dst; the ones without
 * dependencies in src depend on roots[].  Dependencies are kept as
 * indices, shifted by where src starts in dst.
 */
static CUresult fc_graph_append(fc_graph_t *dst, const fc_graph_t *src, fc_node_t *const *roots,
                                size_t nroots)
{
    size_t base = dst->n;

    for (size_t i = 0; i < src->n; i++) {
        fc_node_t *n = fc_node_clone(src->nodes[i]);
        fc_node_t **deps;
        uint32_t *data;
        size_t ndeps;
        CUresult rc;

        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        ndeps = n->ndeps ? n->ndeps : nroots;
        deps = calloc(ndeps ? ndeps : 1, sizeof(*deps));
        if (!deps) {
            fc_node_free(n);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        /* The node's own edges keep their data; edges from roots[] are
         * the default. */
        data = n->ndeps ? n->dep_data : NULL;
        if (!n->ndeps)
            free(n->dep_data);
        for (size_t d = 0; d < ndeps; d++)
            deps[d] = n->ndeps ? dst->nodes[base + n->deps[d]] : roots[d];
        free(n->deps);
        n->deps = NULL;
        n->dep_data = NULL;
        n->ndeps = 0;
        rc = fc_graph_add(dst, n, deps, ndeps);
        free(deps);
        if (rc != CUDA_SUCCESS) {
            free(data);
            return rc;
        }
        n->dep_data = data;
    }
    return CUDA_SUCCESS;
}

static fc_graph_t *fc_graph_new(void)
{
    return calloc(1, sizeof(fc_graph_t));
}

static fc_graph_t *fc_graph_clone(const fc_graph_t *src)
{
    fc_graph_t *g = fc_graph_new();

    if (!g)
        return NULL;
    if (fc_graph_append(g, src, NULL, 0) != CUDA_SUCCESS) {
        fc_graph_free(g);
        return NULL;
    }
    /* A copy owns the references its source owns (child graph nodes,
     * execs, clones). */
    if (src->nurefs) {
        g->urefs = malloc(src->nurefs * sizeof(*g->urefs));
        if (!g->urefs) {
            fc_graph_free(g);
            return NULL;
        }
        memcpy(g->urefs, src->urefs, src->nurefs * sizeof(*g->urefs));
        g->nurefs = src->nurefs;
        for (size_t i = 0; i < g->nurefs; i++)
            g->urefs[i].obj->refs += g->urefs[i].count;
    }
    return g;
}

/* ------------------------------------------------------------------ */
/* Capture                                                             */

static CUresult fc_node_exec(fc_ctx_t *ctx, fc_node_t *n);

/*
 * Runs a node now, or records it if s is capturing; takes the node over
 * either way.  g_lock held (dropped while a twin or host function runs).
 */
static void fc_host_drain(void);

static CUresult fc_submit(fc_ctx_t *ctx, fc_stream_t *s, fc_node_t *n)
{
    CUresult rc;

    if (!s->cap) {
        fc_host_drain();
        rc = fc_node_exec(ctx, n);
        fc_node_free(n);
        return rc;
    }
    if (s->cap->invalidated) {
        fc_node_free(n);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    rc = fc_graph_add(s->cap->graph, n, s->deps, s->ndeps);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!s->deps || s->ndeps != 1) {
        fc_node_t **d = realloc(s->deps, sizeof(*d));

        if (!d)
            return CUDA_ERROR_OUT_OF_MEMORY;
        s->deps = d;
    }
    s->deps[0] = n;
    s->ndeps = 1;
    return CUDA_SUCCESS;
}

static fc_node_t *fc_node_new(fc_node_type_t type)
{
    fc_node_t *n = calloc(1, sizeof(*n));

    if (n)
        n->type = type;
    return n;
}

/* ------------------------------------------------------------------ */
/* Copies and sets                                                     */

/*
 * Checks one side of a 3D copy and gives the address of its first byte.
 * Device memory must lie inside one range of the table; host memory
 * can't be checked; unified memory is checked if it is in the table.
 */
static CUresult fc_copy_side(CUmemorytype type, uintptr_t base, size_t x, size_t y, size_t z,
                             size_t pitch, size_t height, const CUDA_MEMCPY3D *p, uintptr_t *start)
{
    size_t off, last, span;

    if (type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE &&
        type != CU_MEMORYTYPE_UNIFIED)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->Height > 1 && pitch < x + p->WidthInBytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->Depth > 1 && height < y + p->Height)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->Height <= 1 && p->Depth <= 1 && pitch == 0)
        pitch = x + p->WidthInBytes;
    if (__builtin_mul_overflow(z, height, &off) || __builtin_add_overflow(off, y, &off) ||
        __builtin_mul_overflow(off, pitch, &off) || __builtin_add_overflow(off, x, &off))
        return CUDA_ERROR_INVALID_VALUE;
    if (__builtin_mul_overflow(p->Depth - 1, height, &last) ||
        __builtin_add_overflow(last, p->Height - 1, &last) ||
        __builtin_mul_overflow(last, pitch, &last) ||
        __builtin_add_overflow(last, p->WidthInBytes, &span) ||
        __builtin_add_overflow(base, off, start))
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEMORYTYPE_HOST)
        return base ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (type == CU_MEMORYTYPE_UNIFIED && fc_mem_find(*start) < 0)
        return base ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    return fc_mem_check(*start, span);
}

static CUresult fc_copy3d(const CUDA_MEMCPY3D *p)
{
    uintptr_t src, dst, sbase, dbase;
    size_t spitch, dpitch, sheight, dheight;
    CUresult rc;

    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0)
        return CUDA_SUCCESS;
    sbase = p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->srcHost
                                                   : (uintptr_t)p->srcDevice;
    dbase = p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->dstHost
                                                   : (uintptr_t)p->dstDevice;
    rc = fc_copy_side(p->srcMemoryType, sbase, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
                      p->srcHeight, p, &src);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = fc_copy_side(p->dstMemoryType, dbase, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
                      p->dstHeight, p, &dst);
    if (rc != CUDA_SUCCESS)
        return rc;
    spitch = p->srcPitch ? p->srcPitch : p->WidthInBytes;
    dpitch = p->dstPitch ? p->dstPitch : p->WidthInBytes;
    sheight = p->srcHeight ? p->srcHeight : p->Height;
    dheight = p->dstHeight ? p->dstHeight : p->Height;
    for (size_t z = 0; z < p->Depth; z++) {
        for (size_t y = 0; y < p->Height; y++) {
            memmove((void *)(dst + (z * dheight + y) * dpitch),
                    (const void *)(src + (z * sheight + y) * spitch), p->WidthInBytes);
        }
    }
    return CUDA_SUCCESS;
}

static void fc_copy1d_params(CUDA_MEMCPY3D *p, CUmemorytype dt, uintptr_t dst, CUmemorytype st,
                             uintptr_t src, size_t n)
{
    memset(p, 0, sizeof(*p));
    p->dstMemoryType = dt;
    p->srcMemoryType = st;
    if (dt == CU_MEMORYTYPE_HOST)
        p->dstHost = (void *)dst;
    else
        p->dstDevice = (CUdeviceptr)dst;
    if (st == CU_MEMORYTYPE_HOST)
        p->srcHost = (const void *)src;
    else
        p->srcDevice = (CUdeviceptr)src;
    p->WidthInBytes = n;
    p->Height = 1;
    p->Depth = 1;
}

static void fc_copy2d_params(CUDA_MEMCPY3D *p, const CUDA_MEMCPY2D *c)
{
    memset(p, 0, sizeof(*p));
    p->srcXInBytes = c->srcXInBytes;
    p->srcY = c->srcY;
    p->srcMemoryType = c->srcMemoryType;
    p->srcHost = c->srcHost;
    p->srcDevice = c->srcDevice;
    p->srcArray = c->srcArray;
    p->srcPitch = c->srcPitch;
    p->dstXInBytes = c->dstXInBytes;
    p->dstY = c->dstY;
    p->dstMemoryType = c->dstMemoryType;
    p->dstHost = c->dstHost;
    p->dstDevice = c->dstDevice;
    p->dstArray = c->dstArray;
    p->dstPitch = c->dstPitch;
    p->WidthInBytes = c->WidthInBytes;
    p->Height = c->Height;
    p->Depth = 1;
}

static CUresult fc_copy_validate(const CUDA_MEMCPY3D *p)
{
    uintptr_t a;
    CUresult rc;

    if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0)
        return CUDA_SUCCESS;
    if (p->srcArray || p->dstArray || p->srcMemoryType == CU_MEMORYTYPE_ARRAY ||
        p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_copy_side(p->srcMemoryType,
                      p->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->srcHost
                                                             : (uintptr_t)p->srcDevice,
                      p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight, p, &a);
    if (rc != CUDA_SUCCESS)
        return rc;
    return fc_copy_side(p->dstMemoryType,
                        p->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)p->dstHost
                                                               : (uintptr_t)p->dstDevice,
                        p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight, p, &a);
}

static CUresult fc_memset_validate(const CUDA_MEMSET_NODE_PARAMS *p)
{
    size_t row, span;

    if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->width == 0 || p->height == 0)
        return CUDA_SUCCESS;
    if (__builtin_mul_overflow(p->width, (size_t)p->elementSize, &row))
        return CUDA_ERROR_INVALID_VALUE;
    if (p->height > 1 && p->pitch < row)
        return CUDA_ERROR_INVALID_VALUE;
    /* Elements are naturally aligned, as the GPU needs them. */
    if (p->dst % p->elementSize || (p->height > 1 && p->pitch % p->elementSize))
        return CUDA_ERROR_INVALID_VALUE;
    if (__builtin_mul_overflow(p->height - 1, p->pitch, &span) ||
        __builtin_add_overflow(span, row, &span))
        return CUDA_ERROR_INVALID_VALUE;
    return fc_mem_check((uintptr_t)p->dst, span);
}

static CUresult fc_memset(const CUDA_MEMSET_NODE_PARAMS *p)
{
    CUresult rc = fc_memset_validate(p);

    if (rc != CUDA_SUCCESS || p->width == 0 || p->height == 0)
        return rc;
    for (size_t y = 0; y < p->height; y++) {
        unsigned char *row = (unsigned char *)(uintptr_t)(p->dst + y * p->pitch);

        if (p->elementSize == 1) {
            memset(row, (int)(p->value & 0xff), p->width);
        } else if (p->elementSize == 2) {
            uint16_t v = (uint16_t)p->value;

            for (size_t x = 0; x < p->width; x++)
                memcpy(row + x * 2, &v, 2);
        } else {
            uint32_t v = p->value;

            for (size_t x = 0; x < p->width; x++)
                memcpy(row + x * 4, &v, 4);
        }
    }
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Kernels                                                             */

static const vcu_twin_t *fc_twin_find(const char *name)
{
    if (!vcu_twins)
        return NULL;
    for (const vcu_twin_t *t = vcu_twins; t->name; t++)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

/*
 * VCU_FAKECUDA_ANY_KERNEL=1, a diagnostic mode for tracing what NVIDIA's
 * libraries ask of a driver (tests/gpu/trace) without a GPU: a kernel
 * with no twin gets one that does nothing and takes no parameters, made
 * once per name (kept for the process's life).  Results are then
 * meaningless; only the calls matter.
 */
static void fc_twin_noop(vcu_twin_launch_t *l, const void *params)
{
    (void)l;
    (void)params;
}

static const vcu_twin_t *fc_twin_any(const char *name)
{
    static struct fc_any_s {
        vcu_twin_t t;
        struct fc_any_s *next;
    } *any;
    const char *env = getenv("VCU_FAKECUDA_ANY_KERNEL");
    struct fc_any_s *a;

    if (env == NULL || strcmp(env, "1") != 0)
        return NULL;
    for (a = any; a != NULL; a = a->next)
        if (strcmp(a->t.name, name) == 0)
            return &a->t;
    a = calloc(1, sizeof(*a));
    if (a == NULL || (a->t.name = strdup(name)) == NULL) {
        free(a);
        return NULL;
    }
    a->t.fn = fc_twin_noop;
    a->t.num_regs = 32;
    a->next = any;
    any = a;
    return &a->t;
}

static int fc_ident_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '$';
}

/* Whether name occurs in the module's image as a whole symbol. */
static int fc_image_has(const fc_module_t *m, const char *name)
{
    size_t len = strlen(name);
    const unsigned char *p = m->image, *end = m->image + m->size;

    if (m->compressed)
        return 1;
    if (len == 0)
        return 0;
    while (p < end) {
        const unsigned char *hit = memmem(p, (size_t)(end - p), name, len);

        if (!hit)
            return 0;
        if ((hit == m->image || !fc_ident_char(hit[-1])) &&
            (hit + len == end || !fc_ident_char(hit[len])))
            return 1;
        p = hit + 1;
    }
    return 0;
}

static int fc_func_live(const fc_func_t *f, uint64_t id)
{
    return f && fc_list_has(g_funcs, f) && f->hdr.id == id;
}

static size_t fc_params_len(const vcu_twin_t *t)
{
    size_t len = 0;

    for (unsigned int i = 0; i < t->nparams && i < VCU_TWIN_MAX_PARAMS; i++) {
        size_t end = (size_t)t->params[i].offset + t->params[i].size;

        if (end > len)
            len = end;
    }
    return len;
}

/* Packs the arguments into a buffer laid out as the twin says. */
static CUresult fc_pack_params(const vcu_twin_t *t, void **kernelParams, void **extra,
                               void **out, size_t *out_len)
{
    size_t len = fc_params_len(t);
    unsigned char *buf;

    if (len > FC_MAX_PARAM_BYTES || t->nparams > VCU_TWIN_MAX_PARAMS)
        return CUDA_ERROR_INVALID_VALUE;
    if (kernelParams && extra)
        return CUDA_ERROR_INVALID_VALUE;
    buf = calloc(1, len ? len : 1);
    if (!buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (kernelParams) {
        for (unsigned int i = 0; i < t->nparams; i++) {
            if (!kernelParams[i])
                goto err_inval;
            memcpy(buf + t->params[i].offset, kernelParams[i], t->params[i].size);
        }
    } else if (extra) {
        const void *ptr = NULL;
        size_t size = 0;
        int have_size = 0;

        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
                ptr = extra[i + 1];
            } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
                if (!extra[i + 1])
                    goto err_inval;
                size = *(const size_t *)extra[i + 1];
                have_size = 1;
            } else {
                goto err_inval;
            }
        }
        if (len && (!ptr || !have_size || size < len))
            goto err_inval;
        if (len)
            memcpy(buf, ptr, len);
    } else if (t->nparams) {
        goto err_inval;
    }
    *out = buf;
    *out_len = len;
    return CUDA_SUCCESS;

err_inval:
    free(buf);
    return CUDA_ERROR_INVALID_VALUE;
}

static int fc_regs(const vcu_twin_t *t)
{
    return t->num_regs > 0 ? t->num_regs : 32;
}

/* Largest block the function's register use allows (warp multiples). */
static int fc_func_max_threads(const fc_func_t *f)
{
    int per_warp = ((fc_regs(f->twin) * 32 + 255) / 256) * 256;
    int warps = FC_REGS_PER_SM / per_warp;
    int threads = warps * 32;

    return threads < FC_MAX_THREADS ? threads : FC_MAX_THREADS;
}

/* Resident blocks per SM: the tightest of threads, blocks, registers and
 * shared memory, with the allocation granularities of sm_90. */
static int fc_occupancy(const fc_func_t *f, int block, size_t dyn)
{
    int warps, n, per_warp;
    size_t smem;

    if (block <= 0 || block > fc_func_max_threads(f) || dyn > (size_t)f->max_dyn_shared)
        return 0;
    warps = (block + 31) / 32;
    n = FC_THREADS_PER_SM / (warps * 32);
    if (n > FC_BLOCKS_PER_SM)
        n = FC_BLOCKS_PER_SM;
    per_warp = ((fc_regs(f->twin) * 32 + 255) / 256) * 256;
    if (FC_REGS_PER_SM / (per_warp * warps) < n)
        n = FC_REGS_PER_SM / (per_warp * warps);
    smem = f->twin->static_shared + dyn + FC_SHARED_RESERVED;
    if (FC_SHARED_PER_SM / smem < (size_t)n)
        n = (int)(FC_SHARED_PER_SM / smem);
    return n;
}

static void *fc_twin_global(const vcu_twin_launch_t *launch, const char *name)
{
    const fc_module_t *m = launch->module;

    /* No lock: a module's globals don't change while it is loaded. */
    for (size_t i = 0; m && name && i < m->nglobals; i++)
        if (strcmp(m->globals[i].def->name, name) == 0)
            return m->globals[i].mem;
    return NULL;
}

/* Checks a launch's shape against the device's and the function's limits. */
static CUresult fc_launch_check(const fc_func_t *f, const unsigned int grid[3],
                                const unsigned int block[3], unsigned int shared)
{
    static const unsigned int gmax[3] = { 2147483647u, 65535u, 65535u };
    static const unsigned int bmax[3] = { 1024u, 1024u, 64u };
    uint64_t threads = 1;

    for (int i = 0; i < 3; i++) {
        if (grid[i] == 0 || grid[i] > gmax[i] || block[i] == 0 || block[i] > bmax[i])
            return CUDA_ERROR_INVALID_VALUE;
        threads *= block[i];
    }
    if (threads > FC_MAX_THREADS)
        return CUDA_ERROR_INVALID_VALUE;
    if (threads > (uint64_t)fc_func_max_threads(f))
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    if (shared > (unsigned int)f->max_dyn_shared)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/*
 * Runs a kernel node's twin: g_lock is dropped meanwhile, then the
 * context is looked up again before a fault is made its sticky error.
 * The launch itself succeeds, as an asynchronous GPU launch would: the
 * fault shows from the next call on.
 */
/* A fault of the whole process (see the top of this file), or 0. */
static CUresult g_proc_sticky;

static int fc_twin_addressable(const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    ssize_t i;
    int ok;

    pthread_mutex_lock(&g_lock);
    i = fc_mem_find(a);
    ok = i >= 0 && len <= fc_mem_span((size_t)i, a);
    pthread_mutex_unlock(&g_lock);
    return ok;
}

/* The graph (an exec's) whose launch runs on this thread: device code's
 * handles are its conditional nodes'. */
static __thread fc_graph_t *t_cond_graph;

/* The handle h of a conditional node in g (at any depth), g_lock held. */
static fc_cond_t *fc_cond_in(fc_graph_t *g, CUgraphConditionalHandle h, int depth)
{
    fc_cond_t *c;

    if (g == NULL || depth > 64)
        return NULL;
    for (size_t i = 0; i < g->n; i++) {
        fc_node_t *n = g->nodes[i];

        if (n->type == FC_NODE_CHILD && (c = fc_cond_in(n->u.child, h, depth + 1)))
            return c;
        if (n->type != FC_NODE_COND)
            continue;
        if (n->u.cond.cond->idx == h)
            return n->u.cond.cond;
        for (unsigned int b = 0; b < n->u.cond.size; b++)
            if ((c = fc_cond_in(n->u.cond.bodies[b], h, depth + 1)))
                return c;
    }
    return NULL;
}

static int fc_twin_set_conditional(uint64_t handle, unsigned int value)
{
    fc_cond_t *c;

    pthread_mutex_lock(&g_lock);
    c = fc_cond_in(t_cond_graph, handle, 0);
    if (c)
        c->value = value;
    pthread_mutex_unlock(&g_lock);
    return c ? 0 : -1;
}

/* g_lock held. */
static void fc_fault(fc_ctx_t *ctx, CUresult fault)
{
    const char *mode = getenv("VCU_FAKECUDA_STICKY");
    fc_obj_t *o;

    if (mode != NULL && strcmp(mode, "context") == 0) {
        if (ctx->sticky == CUDA_SUCCESS)
            ctx->sticky = fault;
        return;
    }
    if (g_proc_sticky == CUDA_SUCCESS)
        g_proc_sticky = fault;
    for (o = g_ctxs; o != NULL; o = o->next)
        if (((fc_ctx_t *)o)->sticky == CUDA_SUCCESS)
            ((fc_ctx_t *)o)->sticky = g_proc_sticky;
}

static CUresult fc_stack_set(fc_ctx_t *ctx, size_t value);

static void fc_func_use(fc_func_t *f);

static CUresult fc_kernel_run(fc_ctx_t *ctx, const fc_kernel_t *k)
{
    vcu_twin_launch_t launch;
    uint64_t ctx_id = ctx->hdr.id;
    const fc_func_t *f = k->func;

    if (!fc_func_live(f, k->func_id)) {
        /* Only a graph node can still name it (launches check first):
         * NVIDIA's driver follows the dangling function and segfaults. */
        fprintf(stderr, "fakecuda: graph kernel node of an unloaded module's function "
                        "(the driver crashes here)\n");
        abort();
    }
    if (f->mod->ctx != ctx)
        return CUDA_ERROR_INVALID_HANDLE;
    fc_func_use((fc_func_t *)f);
    /* A kernel needing more local memory a thread than the stack limit:
     * the driver grows the limit to it at the launch, reserving it for
     * every thread the device holds, and keeps it (CUDA 12 on, whatever
     * CU_CTX_LMEM_RESIZE_TO_MAX says); out of memory if it cannot. */
    if (f->twin->local_size > ctx->limits[CU_LIMIT_STACK_SIZE]) {
        CUresult rc = fc_stack_set(ctx, f->twin->local_size);

        if (rc != CUDA_SUCCESS)
            return rc;
    }
    memset(&launch, 0, sizeof(launch));
    launch.grid = (vcu_twin_dim3_t){ k->grid[0], k->grid[1], k->grid[2] };
    launch.block = (vcu_twin_dim3_t){ k->block[0], k->block[1], k->block[2] };
    launch.shared_mem = k->shared;
    launch.shared = calloc(1, k->shared ? k->shared : 1);
    if (!launch.shared)
        return CUDA_ERROR_OUT_OF_MEMORY;
    launch.cooperative = k->cooperative;
    launch.cluster = (vcu_twin_dim3_t){ k->cluster[0] ? k->cluster[0] : 1,
                                        k->cluster[1] ? k->cluster[1] : 1,
                                        k->cluster[2] ? k->cluster[2] : 1 };
    launch.global = fc_twin_global;
    launch.module = f->mod;
    launch.addressable = fc_twin_addressable;
    launch.set_conditional = fc_twin_set_conditional;
    launch.sms = ctx->sms;

    pthread_mutex_unlock(&g_lock);
    f->twin->fn(&launch, k->params);
    pthread_mutex_lock(&g_lock);

    free(launch.shared);
    if (launch.fault != 0 && fc_ctx_live(ctx, ctx_id))
        fc_fault(ctx, (CUresult)launch.fault);
    return CUDA_SUCCESS;
}

/* Host functions running on threads of their own (VCU_FAKECUDA_HOST_THREAD),
 * under g_lock; g_host_cv says when one returns. */
static unsigned int g_host_busy;
static pthread_cond_t g_host_cv = PTHREAD_COND_INITIALIZER;

typedef struct fc_host_job_s {
    CUhostFn fn;
    void *data;
} fc_host_job_t;

static void *fc_host_thread(void *arg)
{
    fc_host_job_t j = *(fc_host_job_t *)arg;

    free(arg);
    j.fn(j.data);
    pthread_mutex_lock(&g_lock);
    g_host_busy--;
    pthread_cond_broadcast(&g_host_cv);
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* Until no host function runs on a thread of its own (g_lock held). */
static void fc_host_drain(void)
{
    while (g_host_busy > 0)
        pthread_cond_wait(&g_host_cv, &g_lock);
}

static void fc_host_run(CUhostFn fn, void *data)
{
    const char *e = getenv("VCU_FAKECUDA_HOST_THREAD");
    fc_host_job_t *j;
    pthread_attr_t a;
    pthread_t t;

    fc_host_drain();
    if (e != NULL && strcmp(e, "1") == 0 && (j = malloc(sizeof(*j))) != NULL) {
        j->fn = fn;
        j->data = data;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &a, fc_host_thread, j) == 0) {
            g_host_busy++;
            pthread_attr_destroy(&a);
            return;
        }
        pthread_attr_destroy(&a);
        free(j);
    }
    pthread_mutex_unlock(&g_lock);
    fn(data);
    pthread_mutex_lock(&g_lock);
}

static CUresult fc_graph_run(fc_ctx_t *ctx, fc_graph_t *g);
static CUresult fc_cond_run(fc_ctx_t *ctx, fc_node_t *n);

static CUresult fc_node_exec(fc_ctx_t *ctx, fc_node_t *n)
{
    if (n->disabled)
        return CUDA_SUCCESS;        /* as an empty node */
    switch (n->type) {
    case FC_NODE_KERNEL:
        return fc_kernel_run(ctx, &n->u.kernel);
    case FC_NODE_MEMCPY:
        return fc_copy3d(&n->u.copy);
    case FC_NODE_MEMSET:
        return fc_memset(&n->u.set);
    case FC_NODE_HOST:
        fc_host_run(n->u.host.fn, n->u.host.userData);
        return CUDA_SUCCESS;
    case FC_NODE_EMPTY:
        return CUDA_SUCCESS;
    case FC_NODE_CHILD:
        return fc_graph_run(ctx, n->u.child);
    case FC_NODE_MEMALLOC: {
        /* Mapped at its first run, kept until a trim. */
        fc_mem_t *m = fc_gmem_find(n->u.alloc.dptr);

        if (!m || m->live)
            return CUDA_ERROR_ILLEGAL_STATE;    /* allocated twice */
        if (!m->mapped) {
            if (m->size > FC_TOTAL_MEM - g_dev_used[m->dev])
                return CUDA_ERROR_OUT_OF_MEMORY;
            g_dev_used[m->dev] += m->size;
            m->mapped = 1;
            g_gmem_res[m->dev] += m->size;
            if (g_gmem_res[m->dev] > g_gmem_res_high[m->dev])
                g_gmem_res_high[m->dev] = g_gmem_res[m->dev];
        }
        m->live = 1;
        g_gmem_used[m->dev] += m->size;
        if (g_gmem_used[m->dev] > g_gmem_used_high[m->dev])
            g_gmem_used_high[m->dev] = g_gmem_used[m->dev];
        return CUDA_SUCCESS;
    }
    case FC_NODE_MEMFREE: {
        fc_mem_t *m = fc_gmem_find(n->u.free_dptr);

        return m ? fc_gmem_release(m) : CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    case FC_NODE_COND:
        return fc_cond_run(ctx, n);
    case FC_NODE_EVENT_RECORD:
        /* An event destroyed since: the driver's behaviour is undefined. */
        if (!fc_list_has(g_events, n->u.event))
            return CUDA_ERROR_INVALID_HANDLE;
        n->u.event->cap_id = 0;
        n->u.event->recorded = 1;
        n->u.event->ns = fc_now_ns();
        return CUDA_SUCCESS;
    case FC_NODE_EVENT_WAIT:
        /* Recorded work is done work. */
        return fc_list_has(g_events, n->u.event) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* A graph's nodes in the order added, as cuGraphLaunch runs a graph. */
static CUresult fc_graph_run(fc_ctx_t *ctx, fc_graph_t *g)
{
    CUresult rc = CUDA_SUCCESS;

    for (size_t i = 0; i < g->n && rc == CUDA_SUCCESS; i++)
        rc = fc_node_exec(ctx, g->nodes[i]);
    return rc;
}

/*
 * A conditional node: its handle's value (the default, first in each
 * graph launch, if the handle was made with CU_GRAPH_COND_ASSIGN_DEFAULT;
 * then what a twin wrote) picks the body: if/else, while (at most
 * FC_WHILE_MAX rounds: a loop the device code never ends is a hang on a
 * GPU, an error here), switch.
 */
#define FC_WHILE_MAX 100000u

static CUresult fc_cond_run(fc_ctx_t *ctx, fc_node_t *n)
{
    fc_cond_t *c = n->u.cond.cond;
    CUresult rc = CUDA_SUCCESS;
    unsigned int rounds = 0;

    if (c->seen != g_graph_launches) {
        c->seen = g_graph_launches;
        if (c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT)
            c->value = c->dflt;
    }
    switch (n->u.cond.type) {
    case CU_GRAPH_COND_TYPE_IF:
        if (c->value)
            return fc_graph_run(ctx, n->u.cond.bodies[0]);
        return n->u.cond.size == 2 ? fc_graph_run(ctx, n->u.cond.bodies[1]) : CUDA_SUCCESS;
    case CU_GRAPH_COND_TYPE_WHILE:
        while (c->value && rc == CUDA_SUCCESS) {
            if (++rounds > FC_WHILE_MAX)
                return CUDA_ERROR_LAUNCH_TIMEOUT;
            rc = fc_graph_run(ctx, n->u.cond.bodies[0]);
        }
        return rc;
    case CU_GRAPH_COND_TYPE_SWITCH:
        return c->value < n->u.cond.size ? fc_graph_run(ctx, n->u.cond.bodies[c->value])
                                         : CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* Builds a kernel node from launch arguments, validated. */
static CUresult fc_kernel_node(CUfunction hf, const unsigned int grid[3],
                               const unsigned int block[3], unsigned int shared,
                               void **kernelParams, void **extra, int coop, fc_node_t **out)
{
    fc_func_t *f = (fc_func_t *)hf;
    fc_node_t *n;
    CUresult rc;

    if (!f || !fc_list_has(g_funcs, f))
        return CUDA_ERROR_INVALID_HANDLE;
    rc = fc_launch_check(f, grid, block, shared);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (coop) {
        int threads = (int)(block[0] * block[1] * block[2]);
        uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];

        if (blocks > (uint64_t)fc_occupancy(f, threads, shared) * FC_SMS)
            return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
    }
    n = fc_node_new(FC_NODE_KERNEL);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = fc_pack_params(f->twin, kernelParams, extra, &n->u.kernel.params,
                        &n->u.kernel.params_len);
    if (rc != CUDA_SUCCESS) {
        free(n);
        return rc;
    }
    n->u.kernel.func = f;
    n->u.kernel.func_id = f->hdr.id;
    memcpy(n->u.kernel.grid, grid, sizeof(n->u.kernel.grid));
    memcpy(n->u.kernel.block, block, sizeof(n->u.kernel.block));
    n->u.kernel.shared = shared;
    n->u.kernel.cooperative = coop;
    *out = n;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */

/* Every CUresult of cuda.h 13.0, with the driver's own message where
 * tests are likely to print it. */
#define FC_ERRORS(X) \
    X(CUDA_SUCCESS, "no error") \
    X(CUDA_ERROR_INVALID_VALUE, "invalid argument") \
    X(CUDA_ERROR_OUT_OF_MEMORY, "out of memory") \
    X(CUDA_ERROR_NOT_INITIALIZED, "initialization error") \
    X(CUDA_ERROR_DEINITIALIZED, "driver shutting down") \
    X(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled") \
    X(CUDA_ERROR_PROFILER_NOT_INITIALIZED, "profiler not initialized") \
    X(CUDA_ERROR_PROFILER_ALREADY_STARTED, "profiler already started") \
    X(CUDA_ERROR_PROFILER_ALREADY_STOPPED, "profiler already stopped") \
    X(CUDA_ERROR_STUB_LIBRARY, "stub library") \
    X(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "call requires newer driver") \
    X(CUDA_ERROR_DEVICE_UNAVAILABLE, "device unavailable") \
    X(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected") \
    X(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal") \
    X(CUDA_ERROR_DEVICE_NOT_LICENSED, "device not licensed") \
    X(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid") \
    X(CUDA_ERROR_INVALID_CONTEXT, "invalid device context") \
    X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current") \
    X(CUDA_ERROR_MAP_FAILED, "map failed") \
    X(CUDA_ERROR_UNMAP_FAILED, "unmap failed") \
    X(CUDA_ERROR_ARRAY_IS_MAPPED, "array is mapped") \
    X(CUDA_ERROR_ALREADY_MAPPED, "already mapped") \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device") \
    X(CUDA_ERROR_ALREADY_ACQUIRED, "already acquired") \
    X(CUDA_ERROR_NOT_MAPPED, "not mapped") \
    X(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "not mapped as array") \
    X(CUDA_ERROR_NOT_MAPPED_AS_POINTER, "not mapped as pointer") \
    X(CUDA_ERROR_ECC_UNCORRECTABLE, "ecc uncorrectable") \
    X(CUDA_ERROR_UNSUPPORTED_LIMIT, "unsupported limit") \
    X(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "context already in use") \
    X(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access unsupported") \
    X(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed") \
    X(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "invalid graphics context") \
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE, "nvlink uncorrectable") \
    X(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "jit compiler not found") \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "unsupported ptx version") \
    X(CUDA_ERROR_JIT_COMPILATION_DISABLED, "jit compilation disabled") \
    X(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "unsupported exec affinity") \
    X(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "unsupported devside sync") \
    X(CUDA_ERROR_CONTAINED, "contained") \
    X(CUDA_ERROR_INVALID_SOURCE, "invalid source") \
    X(CUDA_ERROR_FILE_NOT_FOUND, "file not found") \
    X(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found") \
    X(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object init failed") \
    X(CUDA_ERROR_OPERATING_SYSTEM, "operating system") \
    X(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle") \
    X(CUDA_ERROR_ILLEGAL_STATE, "illegal state") \
    X(CUDA_ERROR_LOSSY_QUERY, "lossy query") \
    X(CUDA_ERROR_NOT_FOUND, "named symbol not found") \
    X(CUDA_ERROR_NOT_READY, "device not ready") \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered") \
    X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch") \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, "launch timeout") \
    X(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "launch incompatible texturing") \
    X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access already enabled") \
    X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access not enabled") \
    X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "primary context active") \
    X(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed") \
    X(CUDA_ERROR_ASSERT, "assert") \
    X(CUDA_ERROR_TOO_MANY_PEERS, "too many peers") \
    X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "host memory already registered") \
    X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "host memory not registered") \
    X(CUDA_ERROR_HARDWARE_STACK_ERROR, "hardware stack error") \
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION, "illegal instruction") \
    X(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address") \
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE, "invalid address space") \
    X(CUDA_ERROR_INVALID_PC, "invalid pc") \
    X(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure") \
    X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch") \
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK, "tensor memory leak") \
    X(CUDA_ERROR_NOT_PERMITTED, "not permitted") \
    X(CUDA_ERROR_NOT_SUPPORTED, "operation not supported") \
    X(CUDA_ERROR_SYSTEM_NOT_READY, "system not ready") \
    X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system driver mismatch") \
    X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "compat not supported on device") \
    X(CUDA_ERROR_MPS_CONNECTION_FAILED, "mps connection failed") \
    X(CUDA_ERROR_MPS_RPC_FAILURE, "mps rpc failure") \
    X(CUDA_ERROR_MPS_SERVER_NOT_READY, "mps server not ready") \
    X(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "mps max clients reached") \
    X(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "mps max connections reached") \
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED, "mps client terminated") \
    X(CUDA_ERROR_CDP_NOT_SUPPORTED, "cdp not supported") \
    X(CUDA_ERROR_CDP_VERSION_MISMATCH, "cdp version mismatch") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "stream capture unsupported") \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "stream capture invalidated") \
    X(CUDA_ERROR_STREAM_CAPTURE_MERGE, "stream capture merge") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "stream capture unmatched") \
    X(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "stream capture unjoined") \
    X(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "stream capture isolation") \
    X(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "stream capture implicit") \
    X(CUDA_ERROR_CAPTURED_EVENT, "captured event") \
    X(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "stream capture wrong thread") \
    X(CUDA_ERROR_TIMEOUT, "timeout") \
    X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "graph exec update failure") \
    X(CUDA_ERROR_EXTERNAL_DEVICE, "external device") \
    X(CUDA_ERROR_INVALID_CLUSTER_SIZE, "invalid cluster size") \
    X(CUDA_ERROR_FUNCTION_NOT_LOADED, "function not loaded") \
    X(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type") \
    X(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration") \
    X(CUDA_ERROR_KEY_ROTATION, "key rotation") \
    X(CUDA_ERROR_UNKNOWN, "unknown error") \

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define FC_NAME(e, s) case e: *pStr = #e; return CUDA_SUCCESS;
    FC_ERRORS(FC_NAME)
#undef FC_NAME
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
#define FC_STR(e, s) case e: *pStr = s; return CUDA_SUCCESS;
    FC_ERRORS(FC_STR)
#undef FC_STR
    }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ */
/* Initialization, devices                                             */

/* GPU core dump settings (cuCoredump*AttributeGlobal): kept, not acted
 * upon, so that tests can see what the backend set. */
static int g_cd_enable, g_cd_trigger_host = 1, g_cd_user_trigger, g_cd_lightweight;
static int g_cd_flags;

static int *fc_coredump_bool(CUcoredumpSettings attrib)
{
    switch (attrib) {
    case CU_COREDUMP_ENABLE_ON_EXCEPTION:
        return &g_cd_enable;
    case CU_COREDUMP_TRIGGER_HOST:
        return &g_cd_trigger_host;
    case CU_COREDUMP_ENABLE_USER_TRIGGER:
        return &g_cd_user_trigger;
    case CU_COREDUMP_LIGHTWEIGHT:
        return &g_cd_lightweight;
    default:
        return NULL;
    }
}

/* Booleans as bool, the generation flags as int; others refused. */
static CUresult fc_coredump_attr(CUcoredumpSettings attrib, void *value, size_t *size, int set)
{
    int *b = fc_coredump_bool(attrib);
    CUresult rc = CUDA_SUCCESS;

    if (!value || !size)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (b && *size == sizeof(bool)) {
        if (set)
            *b = *(bool *)value;
        else
            *(bool *)value = *b != 0;
    } else if (attrib == CU_COREDUMP_GENERATION_FLAGS && *size == sizeof(int)) {
        if (set)
            g_cd_flags = *(int *)value;
        else
            *(int *)value = g_cd_flags;
    } else {
        rc = CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCoredumpSetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
    return fc_coredump_attr(attrib, value, size, 1);
}

CUresult CUDAAPI cuCoredumpGetAttributeGlobal(CUcoredumpSettings attrib, void *value, size_t *size)
{
    return fc_coredump_attr(attrib, value, size, 0);
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    g_init = 1;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = 13000;
    return CUDA_SUCCESS;
}

static CUresult fc_dev_check(CUdevice dev)
{
    int init;

    pthread_mutex_lock(&g_lock);
    init = g_init;
    pthread_mutex_unlock(&g_lock);
    if (!init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= FC_NDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    CUresult rc = fc_dev_check(0);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = FC_NDEV;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = fc_dev_check(0);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= FC_NDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = fc_dev_check(dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, FC_DEVICE_NAME, (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

/* Fixed and distinct per device: "vcu-test-double" and the ordinal. */
static void fc_uuid(CUuuid *uuid, CUdevice dev)
{
    static const char tag[15] = "vcu-test-double";

    memcpy(uuid->bytes, tag, sizeof(tag));
    uuid->bytes[15] = (char)dev;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = fc_dev_check(dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    fc_uuid(uuid, dev);
    return CUDA_SUCCESS;
}

/* The pre-11.4 name, which cuda.h's macro hides: an old caller may
 * still look it up.  Same answer (the versions differ only for MIG). */
#undef cuDeviceGetUuid
__attribute__((visibility("default"))) CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid,
                                                                        CUdevice dev);
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    CUresult rc = fc_dev_check(dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = FC_TOTAL_MEM;
    return CUDA_SUCCESS;
}

/* H100 SXM5 (sm_90) values, as deviceQuery shows them; 0 where a
 * feature is absent.  Every attribute of cuda.h 13.0 has an entry. */
#define FC_A(name, v) [CU_DEVICE_ATTRIBUTE_##name] = { 1, (v) }
static const struct {
    int known;
    int value;
} fc_attrs[CU_DEVICE_ATTRIBUTE_MAX] = {
    FC_A(MAX_THREADS_PER_BLOCK, FC_MAX_THREADS),
    FC_A(MAX_BLOCK_DIM_X, 1024),
    FC_A(MAX_BLOCK_DIM_Y, 1024),
    FC_A(MAX_BLOCK_DIM_Z, 64),
    FC_A(MAX_GRID_DIM_X, 2147483647),
    FC_A(MAX_GRID_DIM_Y, 65535),
    FC_A(MAX_GRID_DIM_Z, 65535),
    FC_A(MAX_SHARED_MEMORY_PER_BLOCK, FC_SHARED_DEFAULT),
    FC_A(TOTAL_CONSTANT_MEMORY, 65536),
    FC_A(WARP_SIZE, 32),
    FC_A(MAX_PITCH, 2147483647),
    FC_A(MAX_REGISTERS_PER_BLOCK, FC_REGS_PER_SM),
    FC_A(CLOCK_RATE, 1980000),
    FC_A(TEXTURE_ALIGNMENT, 512),
    FC_A(GPU_OVERLAP, 1),
    FC_A(MULTIPROCESSOR_COUNT, FC_SMS),
    FC_A(KERNEL_EXEC_TIMEOUT, 0),
    FC_A(INTEGRATED, 0),
    FC_A(CAN_MAP_HOST_MEMORY, 1),
    FC_A(COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT),
    FC_A(MAXIMUM_TEXTURE1D_WIDTH, 131072),
    FC_A(MAXIMUM_TEXTURE2D_WIDTH, 131072),
    FC_A(MAXIMUM_TEXTURE2D_HEIGHT, 65536),
    FC_A(MAXIMUM_TEXTURE3D_WIDTH, 16384),
    FC_A(MAXIMUM_TEXTURE3D_HEIGHT, 16384),
    FC_A(MAXIMUM_TEXTURE3D_DEPTH, 16384),
    FC_A(MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 32768),
    FC_A(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 32768),
    FC_A(MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048),
    FC_A(SURFACE_ALIGNMENT, 512),
    FC_A(CONCURRENT_KERNELS, 1),
    FC_A(ECC_ENABLED, 1),
    FC_A(PCI_BUS_ID, 0),                    /* per device, below */
    FC_A(PCI_DEVICE_ID, 0),
    FC_A(TCC_DRIVER, 0),
    FC_A(MEMORY_CLOCK_RATE, 2619000),
    FC_A(GLOBAL_MEMORY_BUS_WIDTH, 5120),
    FC_A(L2_CACHE_SIZE, 50 << 20),
    FC_A(MAX_THREADS_PER_MULTIPROCESSOR, FC_THREADS_PER_SM),
    FC_A(ASYNC_ENGINE_COUNT, 2),
    FC_A(UNIFIED_ADDRESSING, 1),
    FC_A(MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 32768),
    FC_A(MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 2048),
    FC_A(CAN_TEX2D_GATHER, 1),
    FC_A(MAXIMUM_TEXTURE2D_GATHER_WIDTH, 32768),
    FC_A(MAXIMUM_TEXTURE2D_GATHER_HEIGHT, 32768),
    FC_A(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE, 8192),
    FC_A(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE, 8192),
    FC_A(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, 32768),
    FC_A(PCI_DOMAIN_ID, 0),
    FC_A(TEXTURE_PITCH_ALIGNMENT, 32),
    FC_A(MAXIMUM_TEXTURECUBEMAP_WIDTH, 32768),
    FC_A(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, 32768),
    FC_A(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, 2046),
    FC_A(MAXIMUM_SURFACE1D_WIDTH, 32768),
    FC_A(MAXIMUM_SURFACE2D_WIDTH, 131072),
    FC_A(MAXIMUM_SURFACE2D_HEIGHT, 65536),
    FC_A(MAXIMUM_SURFACE3D_WIDTH, 16384),
    FC_A(MAXIMUM_SURFACE3D_HEIGHT, 16384),
    FC_A(MAXIMUM_SURFACE3D_DEPTH, 16384),
    FC_A(MAXIMUM_SURFACE1D_LAYERED_WIDTH, 32768),
    FC_A(MAXIMUM_SURFACE1D_LAYERED_LAYERS, 2048),
    FC_A(MAXIMUM_SURFACE2D_LAYERED_WIDTH, 32768),
    FC_A(MAXIMUM_SURFACE2D_LAYERED_HEIGHT, 32768),
    FC_A(MAXIMUM_SURFACE2D_LAYERED_LAYERS, 2048),
    FC_A(MAXIMUM_SURFACECUBEMAP_WIDTH, 32768),
    FC_A(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH, 32768),
    FC_A(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS, 2046),
    FC_A(MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 268435456),
    FC_A(MAXIMUM_TEXTURE2D_LINEAR_WIDTH, 131072),
    FC_A(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, 65000),
    FC_A(MAXIMUM_TEXTURE2D_LINEAR_PITCH, 2097120),
    FC_A(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, 32768),
    FC_A(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT, 32768),
    FC_A(COMPUTE_CAPABILITY_MAJOR, 9),
    FC_A(COMPUTE_CAPABILITY_MINOR, 0),
    FC_A(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH, 32768),
    FC_A(STREAM_PRIORITIES_SUPPORTED, 1),
    FC_A(GLOBAL_L1_CACHE_SUPPORTED, 1),
    FC_A(LOCAL_L1_CACHE_SUPPORTED, 1),
    FC_A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, FC_SHARED_PER_SM),
    FC_A(MAX_REGISTERS_PER_MULTIPROCESSOR, FC_REGS_PER_SM),
    FC_A(MANAGED_MEMORY, 1),
    FC_A(MULTI_GPU_BOARD, 0),
    FC_A(MULTI_GPU_BOARD_GROUP_ID, 0),      /* per device, below */
    FC_A(HOST_NATIVE_ATOMIC_SUPPORTED, 0),
    FC_A(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2),
    FC_A(PAGEABLE_MEMORY_ACCESS, 0),
    FC_A(CONCURRENT_MANAGED_ACCESS, 1),
    FC_A(COMPUTE_PREEMPTION_SUPPORTED, 1),
    FC_A(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 1),
    FC_A(CAN_USE_STREAM_MEM_OPS_V1, 0),
    FC_A(CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 0),
    FC_A(CAN_USE_STREAM_WAIT_VALUE_NOR_V1, 0),
    FC_A(COOPERATIVE_LAUNCH, 1),
    FC_A(COOPERATIVE_MULTI_DEVICE_LAUNCH, 1),
    FC_A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, FC_SHARED_OPTIN),
    FC_A(CAN_FLUSH_REMOTE_WRITES, 0),
    FC_A(HOST_REGISTER_SUPPORTED, 1),
    FC_A(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0),
    FC_A(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0),
    FC_A(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
    FC_A(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1),
    FC_A(HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 0),
    FC_A(HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 0),
    FC_A(MAX_BLOCKS_PER_MULTIPROCESSOR, FC_BLOCKS_PER_SM),
    FC_A(GENERIC_COMPRESSION_SUPPORTED, 1),
    FC_A(MAX_PERSISTING_L2_CACHE_SIZE, 32 << 20),
    FC_A(MAX_ACCESS_POLICY_WINDOW_SIZE, 134213632),
    FC_A(GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 1),
    FC_A(RESERVED_SHARED_MEMORY_PER_BLOCK, FC_SHARED_RESERVED),
    FC_A(SPARSE_CUDA_ARRAY_SUPPORTED, 1),
    FC_A(READ_ONLY_HOST_REGISTER_SUPPORTED, 1),
    FC_A(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, 1),
    FC_A(MEMORY_POOLS_SUPPORTED, 1),
    FC_A(GPU_DIRECT_RDMA_SUPPORTED, 1),
    FC_A(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 1),
    FC_A(GPU_DIRECT_RDMA_WRITES_ORDERING, 0),
    FC_A(MEMPOOL_SUPPORTED_HANDLE_TYPES, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
    FC_A(CLUSTER_LAUNCH, 1),
    FC_A(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, 1),
    FC_A(CAN_USE_64_BIT_STREAM_MEM_OPS, 1),
    FC_A(CAN_USE_STREAM_WAIT_VALUE_NOR, 1),
    FC_A(DMA_BUF_SUPPORTED, 1),
    FC_A(IPC_EVENT_SUPPORTED, 1),
    FC_A(MEM_SYNC_DOMAIN_COUNT, 4),
    FC_A(TENSOR_MAP_ACCESS_SUPPORTED, 1),
    FC_A(HANDLE_TYPE_FABRIC_SUPPORTED, 0),
    FC_A(UNIFIED_FUNCTION_POINTERS, 1),
    FC_A(NUMA_CONFIG, 0),
    FC_A(NUMA_ID, -1),
    FC_A(MULTICAST_SUPPORTED, 0),
    FC_A(MPS_ENABLED, 0),
    FC_A(HOST_NUMA_ID, -1),
    FC_A(D3D12_CIG_SUPPORTED, 0),
    FC_A(MEM_DECOMPRESS_ALGORITHM_MASK, 0),
    FC_A(MEM_DECOMPRESS_MAXIMUM_LENGTH, 0),
    FC_A(VULKAN_CIG_SUPPORTED, 0),
    FC_A(GPU_PCI_DEVICE_ID, 0x233010de),    /* H100 SXM5 80GB, NVIDIA */
    FC_A(GPU_PCI_SUBSYSTEM_ID, 0x16c110de),
    FC_A(HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
    FC_A(HOST_NUMA_MEMORY_POOLS_SUPPORTED, 0),
    FC_A(HOST_NUMA_MULTINODE_IPC_SUPPORTED, 0),
    FC_A(HOST_MEMORY_POOLS_SUPPORTED, 0),
    FC_A(HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
    FC_A(HOST_ALLOC_DMA_BUF_SUPPORTED, 0),
    FC_A(ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, 0),
};
#undef FC_A

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = fc_dev_check(dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX || !fc_attrs[attrib].known)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        /* Distinct slots, so that bus-id based selection can be tested. */
        *pi = 0x19 + 0x20 * dev;
        break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
        *pi = dev;
        break;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
        /* VCU_FAKECUDA_PAGEABLE_ACCESS=1: a GPU that reads pageable host
         * memory (HMM, ATS), which the worker must refuse. */
        *pi = getenv("VCU_FAKECUDA_PAGEABLE_ACCESS") != NULL &&
              strcmp(getenv("VCU_FAKECUDA_PAGEABLE_ACCESS"), "1") == 0;
        break;
    default:
        *pi = fc_attrs[attrib].value;
        break;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    CUresult rc = fc_dev_check(dev);

    if (rc == CUDA_SUCCESS)
        rc = fc_dev_check(peerDev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    /* As CUDA: a device is not its own peer. */
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    CUresult rc = fc_dev_check(dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    *pool_out = (CUmemoryPool)&g_pools[dev];
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Contexts                                                            */

static const size_t fc_limit_defaults[CU_LIMIT_MAX] = {
    [CU_LIMIT_STACK_SIZE] = 1024,
    [CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20,
    [CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20,
    [CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
    [CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
    [CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64,
    [CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0,
    [CU_LIMIT_SHMEM_SIZE] = 0,
    [CU_LIMIT_CIG_ENABLED] = 0,
    [CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED] = 1,
};

/*
 * Whether this process would be a client of NVIDIA's MPS: the stand-in
 * takes a daemon to answer when its pipe directory
 * ($CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps) holds a "control"
 * entry, where NVIDIA's client looks for it.  Only then is an execution
 * affinity offered, as on the real driver (SHARING-FACTS P4).
 */
static int fc_mps(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char path[4096];

    snprintf(path, sizeof(path), "%s/control", dir != NULL && dir[0] ? dir : "/tmp/nvidia-mps");
    return access(path, F_OK) == 0;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                             unsigned int flags, CUdevice dev)
{
    fc_ctx_t *ctx;
    CUresult rc = fc_dev_check(dev);
    unsigned int sms = FC_SMS;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx || (flags & ~(unsigned int)CU_CTX_FLAGS_MASK))
        return CUDA_ERROR_INVALID_VALUE;
    if (ctxCreateParams && ctxCreateParams->numExecAffinityParams > 0) {
        const CUexecAffinityParam *ap = ctxCreateParams->execAffinityParams;

        if (ap == NULL || ctxCreateParams->numExecAffinityParams != 1 ||
            ap->type != CU_EXEC_AFFINITY_TYPE_SM_COUNT || ap->param.smCount.val == 0)
            return CUDA_ERROR_INVALID_VALUE;
        if (!fc_mps())
            return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
        /* Rounded up to the stand-in's granularity of 2 SMs. */
        sms = (ap->param.smCount.val + 1) & ~1u;
        if (sms > FC_SMS)
            sms = FC_SMS;
    }
    if (ctxCreateParams && ctxCreateParams->cigParams)
        return CUDA_ERROR_NOT_SUPPORTED;
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx->dev = dev;
    ctx->flags = flags;
    ctx->sms = sms;
    memcpy(ctx->limits, fc_limit_defaults, sizeof(ctx->limits));
    ctx->sticky = g_proc_sticky;        /* read unlocked: set once, never cleared */
    fc_stream_init(&ctx->null_stream, ctx, 0, FC_PRIO_LEAST);
    pthread_mutex_lock(&g_lock);
    fc_list_add(&g_ctxs, ctx);
    tls_ctx = ctx;
    tls_ctx_id = ctx->hdr.id;
    pthread_mutex_unlock(&g_lock);
    *pctx = (CUcontext)ctx;
    return CUDA_SUCCESS;
}

static void fc_module_free(fc_module_t *m);

/* Frees everything a context owns; g_lock held. */
static void fc_ctx_free_all(fc_ctx_t *ctx)
{
    fc_obj_t **pp;

    for (pp = &g_streams; *pp;) {
        fc_stream_t *s = (fc_stream_t *)*pp;

        if (s->ctx == ctx) {
            *pp = s->hdr.next;
            fc_stream_leave_capture(s);
            free(s);
        } else {
            pp = &(*pp)->next;
        }
    }
    for (pp = &g_events; *pp;) {
        fc_event_t *e = (fc_event_t *)*pp;

        if (e->ctx == ctx) {
            *pp = e->hdr.next;
            free(e->cap_deps);
            free(e);
        } else {
            pp = &(*pp)->next;
        }
    }
    for (fc_obj_t **lists[] = { &g_texobjs, &g_surfobjs, &g_arrays }, ***l = lists;
         l < lists + 3; l++) {
        for (pp = *l; *pp;) {
            fc_texobj_t *t = (fc_texobj_t *)*pp;
            fc_array_t *a = (fc_array_t *)*pp;

            if ((*l == &g_arrays ? a->ctx : t->ctx) == ctx) {
                *pp = (*pp)->next;
                if (*l == &g_arrays)
                    free(a->data);
                free(*l == &g_arrays ? (void *)a : (void *)t);
            } else {
                pp = &(*pp)->next;
            }
        }
    }
    for (pp = &g_mipmaps; *pp;) {
        fc_mipmap_t *m = (fc_mipmap_t *)*pp;

        if (m->ctx == ctx) {
            *pp = m->hdr.next;
            free(m);
        } else {
            pp = &(*pp)->next;
        }
    }
    for (pp = &g_modules; *pp;) {
        fc_module_t *m = (fc_module_t *)*pp;

        if (m->ctx == ctx) {
            *pp = m->hdr.next;
            fc_module_free(m);
        } else {
            pp = &(*pp)->next;
        }
    }
    for (size_t i = 0; i < g_nmem;) {
        if (g_mem[i].ctx == ctx && g_mem[i].kind != FC_MEM_GLOBAL)
            fc_mem_remove(i);
        else
            i++;
    }
    g_dev_used[ctx->dev] -= ctx->stack_res;
    ctx->stack_res = 0;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    fc_ctx_t *c = (fc_ctx_t *)ctx;

    pthread_mutex_lock(&g_lock);
    if (!g_init) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (!c || !fc_list_has(g_ctxs, c)) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    fc_ctx_free_all(c);
    fc_list_del(&g_ctxs, c);
    if (tls_ctx == c)
        tls_ctx = NULL;
    pthread_mutex_unlock(&g_lock);
    free(c);
    return CUDA_SUCCESS;
}

/*
 * Primary contexts: one per device, created at the first retain and
 * destroyed at the last release, as the driver does; its flags can be set
 * while it is not active.
 */
static fc_ctx_t *g_primary[FC_NDEV];
static unsigned int g_primary_refs[FC_NDEV];
static unsigned int g_primary_flags[FC_NDEV];

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    CUresult rc = fc_dev_check(dev);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags & ~(unsigned int)CU_CTX_FLAGS_MASK)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    g_primary_flags[dev] = flags;
    if (g_primary[dev])
        g_primary[dev]->flags = flags;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult rc = fc_dev_check(dev);
    CUcontext prev = NULL;

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (g_primary[dev]) {
        g_primary_refs[dev]++;
        *pctx = (CUcontext)g_primary[dev];
        pthread_mutex_unlock(&g_lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    /* cuCtxCreate makes it current; a retain does not. */
    cuCtxGetCurrent(&prev);
    rc = cuCtxCreate(pctx, NULL, g_primary_flags[dev], dev);
    cuCtxSetCurrent(prev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_lock);
    g_primary[dev] = (fc_ctx_t *)*pctx;
    g_primary_refs[dev] = 1;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    CUresult rc = fc_dev_check(dev);
    fc_ctx_t *c = NULL;

    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_lock);
    if (!g_primary[dev] || g_primary_refs[dev] == 0) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--g_primary_refs[dev] == 0) {
        c = g_primary[dev];
        g_primary[dev] = NULL;
    }
    pthread_mutex_unlock(&g_lock);
    return c ? cuCtxDestroy((CUcontext)c) : CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    fc_ctx_t *c = (fc_ctx_t *)ctx;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!g_init) {
        rc = CUDA_ERROR_NOT_INITIALIZED;
    } else if (!c) {
        tls_ctx = NULL;
    } else if (!fc_list_has(g_ctxs, c)) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        tls_ctx = c;
        tls_ctx_id = c->hdr.id;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult rc = CUDA_SUCCESS;

    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (!g_init)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else
        *pctx = fc_ctx_live(tls_ctx, tls_ctx_id) ? (CUcontext)tls_ctx : NULL;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxGetExecAffinity(CUexecAffinityParam *pExecAffinity, CUexecAffinityType type)
{
    fc_ctx_t *ctx;
    CUresult rc;

    if (!pExecAffinity || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS) {
        pExecAffinity->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
        pExecAffinity->param.smCount.val = ctx->sms;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && !device)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *device = ctx->dev;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Capturing streams can't be waited for: invalidates their captures. */
static CUresult fc_sync_capture_check(fc_ctx_t *ctx)
{
    CUresult rc = CUDA_SUCCESS;

    for (fc_obj_t *o = g_streams; o; o = o->next) {
        fc_stream_t *s = (fc_stream_t *)o;

        if (s->ctx == ctx && s->cap) {
            s->cap->invalidated = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return rc;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS)
        rc = fc_sync_capture_check(ctx);
    if (rc == CUDA_SUCCESS)
        fc_host_drain();
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * The stack limit reserves device memory, as the driver does: the stack
 * of every thread the device holds at once (SMs x threads per SM); what
 * the default's takes is part of a context's cost, which the stand-in
 * does not count, so only the part past it shows in cuMemGetInfo.  Out
 * of memory when the device cannot take it.  g_lock held.
 */
static CUresult fc_stack_set(fc_ctx_t *ctx, size_t value)
{
    const size_t threads = (size_t)FC_SMS * FC_THREADS_PER_SM;
    size_t base = fc_limit_defaults[CU_LIMIT_STACK_SIZE], res = 0;

    if (value > base) {
        if (value - base > FC_TOTAL_MEM / threads)
            return CUDA_ERROR_OUT_OF_MEMORY;
        res = (value - base) * threads;
    }
    if (res > ctx->stack_res && res - ctx->stack_res > FC_TOTAL_MEM - g_dev_used[ctx->dev])
        return CUDA_ERROR_OUT_OF_MEMORY;
    g_dev_used[ctx->dev] = g_dev_used[ctx->dev] - ctx->stack_res + res;
    ctx->stack_res = res;
    ctx->limits[CU_LIMIT_STACK_SIZE] = value;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED) {
        rc = CUDA_ERROR_UNSUPPORTED_LIMIT;       /* query only */
    } else if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE && value > (size_t)(32 << 20)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (limit == CU_LIMIT_STACK_SIZE) {
        rc = fc_stack_set(ctx, value);
    } else {
        ctx->limits[limit] = value;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && (!pvalue || (int)limit < 0 || limit >= CU_LIMIT_MAX))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pvalue = ctx->limits[limit];
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    pthread_mutex_unlock(&g_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (leastPriority)
        *leastPriority = FC_PRIO_LEAST;
    if (greatestPriority)
        *greatestPriority = FC_PRIO_GREATEST;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetFlags(unsigned int flags)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && (flags & ~(unsigned int)CU_CTX_FLAGS_MASK))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        ctx->flags = flags;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Memory                                                              */

CUresult CUDAAPI cuMemGetInfo(size_t *free_out, size_t *total)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS) {
        if (free_out)
            *free_out = FC_TOTAL_MEM - g_dev_used[ctx->dev];
        if (total)
            *total = FC_TOTAL_MEM;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * A "potentially unsafe" call (cuMemAlloc, cuMemFree) while a capture
 * forbids it: any GLOBAL capture of the process, or a THREAD_LOCAL one
 * this thread began, unless this thread's mode is RELAXED.  The call fails and invalidates those captures, as
 * CUDA does.  g_lock held.
 */
/* This thread's interaction mode (cuThreadExchangeStreamCaptureMode):
 * RELAXED lets it make unsafe calls during any capture. */
static __thread CUstreamCaptureMode fc_thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    CUstreamCaptureMode prev = fc_thread_mode;

    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    fc_thread_mode = *mode;
    *mode = prev;
    return CUDA_SUCCESS;
}

static CUresult fc_unsafe_check(void)
{
    CUresult rc = CUDA_SUCCESS;

    if (fc_thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return rc;
    for (fc_obj_t *o = g_caps; o; o = o->next) {
        fc_cap_t *cap = (fc_cap_t *)o;

        if (cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
            (cap->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
             pthread_equal(cap->thread, pthread_self()))) {
            cap->invalidated = 1;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return rc;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS)
        rc = fc_unsafe_check();
    if (rc == CUDA_SUCCESS)
        rc = fc_mem_alloc(ctx, bytesize, NULL, dptr);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS)
        rc = fc_unsafe_check();
    if (rc == CUDA_SUCCESS)
        rc = fc_mem_free(dptr);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_alloc_node(int dev, size_t size, fc_node_t **out);

/* Captured, a stream-ordered allocation is an allocation node of the
 * capture's graph (its address fixed now), as CUDA makes one. */
static CUresult fc_alloc_captured(fc_ctx_t *ctx, fc_stream_t *s, size_t size,
                                  CUdeviceptr *dptr)
{
    fc_node_t *n;
    CUdeviceptr d;
    CUresult rc;

    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->cap->invalidated)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    rc = fc_alloc_node(ctx->dev, size, &n);
    if (rc != CUDA_SUCCESS)
        return rc;
    d = n->u.alloc.dptr;
    rc = fc_submit(ctx, s, n);
    if (rc == CUDA_SUCCESS)
        *dptr = d;
    return rc;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && s->cap) {
        rc = fc_alloc_captured(ctx, s, bytesize, dptr);
        goto out;
    }
    if (rc == CUDA_SUCCESS)
        rc = fc_mem_alloc(ctx, bytesize, &g_pools[ctx->dev], dptr);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static struct fc_pool_s *fc_pool(CUmemoryPool pool);

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && (fc_pool(pool) == NULL || fc_pool(pool)->src_pid != 0))
        rc = CUDA_ERROR_INVALID_VALUE;      /* an imported pool makes no blocks */
    if (rc == CUDA_SUCCESS && s->cap)
        rc = fc_alloc_captured(ctx, s, bytesize, dptr);     /* the pool's properties */
    else if (rc == CUDA_SUCCESS)
        rc = fc_mem_alloc(ctx, bytesize, fc_pool(pool), dptr);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && dptr == 0)
        goto out;   /* nothing to free: success, as the driver answers cuSPARSE */
    if (rc == CUDA_SUCCESS && s->cap && fc_gmem_find(dptr)) {
        /* Graph memory: a free node of the capture's graph. */
        fc_node_t *n = fc_node_new(FC_NODE_MEMFREE);

        if (!n) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            n->u.free_dptr = dptr;
            rc = fc_submit(ctx, s, n);
        }
        goto out;
    }
    if (rc == CUDA_SUCCESS && s->cap) {
        fc_cap_invalidate(s);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (rc == CUDA_SUCCESS)
        rc = fc_mem_free(dptr);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static fc_pool_t *fc_pool(CUmemoryPool pool)
{
    for (int i = 0; i < FC_NDEV; i++)
        if ((fc_pool_t *)pool == &g_pools[i])
            return &g_pools[i];
    if (pool && fc_list_has(g_upools, pool))
        return (fc_pool_t *)pool;
    return NULL;
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    fc_pool_t *p;
    CUresult rc;

    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_dev_check(props->location.id);
    if (rc != CUDA_SUCCESS)
        return rc;
    p = calloc(1, sizeof(*p));
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = props->location.id;
    p->share = (props->handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
    pthread_mutex_lock(&g_lock);
    fc_list_add(&g_upools, p);
    pthread_mutex_unlock(&g_lock);
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

/* Blocks still out keep the pool's memory until they are freed (CUDA
 * releases it then); the handle is dead at once. */
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
    fc_pool_t *p = (fc_pool_t *)pool;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!p || !fc_list_has(g_upools, p)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        fc_list_del(&g_upools, p);
        fc_pool_free_cache(p);
        if (p->nlive > 0)
            p->dead = 1;
        else
            free(p);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Other devices' access, checked as CUDA checks it (its own device keeps
 * read-write); the stand-in's devices are peers of each other, and its
 * kernels reach every device's memory, so nothing is kept. */
CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    fc_pool_t *p;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    p = fc_pool(pool);
    if (!p || (!map && count > 0)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        const CUmemAccessDesc *d = &map[i];

        if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE || d->location.id < 0 ||
            d->location.id >= FC_NDEV ||
            (d->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
            (d->location.id == p->dev && d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    fc_pool_t *p;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    p = fc_pool(pool);
    if (!g_init) {
        rc = CUDA_ERROR_NOT_INITIALIZED;
        goto out;
    }
    if (!p || !value) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        p->reuse_follow = *(int *)value;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        p->reuse_opportunistic = *(int *)value;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse_internal = *(int *)value;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->release_threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* Only a reset (to the current value) may be asked for. */
        if (*(cuuint64_t *)value != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
            p->used_high = p->used;
        else
            p->reserved_high = p->used;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    fc_pool_t *p;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    p = fc_pool(pool);
    if (!g_init) {
        rc = CUDA_ERROR_NOT_INITIALIZED;
        goto out;
    }
    if (!p || !value) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        *(int *)value = p->reuse_follow;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        *(int *)value = p->reuse_opportunistic;
        break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse_internal;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = p->release_threshold;
        break;
    /* Nothing is cached: what is reserved is what is in use. */
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = p->used;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = p->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = p->used_high;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Drops every cached block (minBytesToKeep is a lower bound CUDA may
 * exceed; nothing cached is "in use"). */
CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc = CUDA_SUCCESS;

    (void)minBytesToKeep;
    pthread_mutex_lock(&g_lock);
    if (!g_init)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!fc_pool(pool))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        fc_pool_free_cache(fc_pool(pool));
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Only what the host backend asks (CU_MODULE_GLOBAL_INFO): whether memory
 * is managed; the stand-in's only managed memory is __managed__ globals. */
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    if (attribute != CU_POINTER_ATTRIBUTE_IS_MANAGED)
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS) {
        i = fc_mem_find((uintptr_t)ptr);
        if (i < 0)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            *(unsigned int *)data = g_mem[i].kind == FC_MEM_GLOBAL && g_mem[i].managed;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    i = fc_mem_find((uintptr_t)dptr);
    /* As CUDA: NOT_FOUND for an address no allocation contains; host
     * memory registered device-mapped is found whole (driver 580). */
    if (i < 0) {
        rc = CUDA_ERROR_NOT_FOUND;
        goto out;
    }
    if (pbase)
        *pbase = (CUdeviceptr)g_mem[i].base;
    if (psize)
        *psize = g_mem[i].size;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* CUDA IPC                                                            */

/*
 * Memory: once this process exports a handle, its arena becomes a shared
 * mapping of a file in /dev/shm (a jailed worker's is its VM's folder),
 * named by its pid as the daemon's cleanup expects ("vcu-ipc.PID."); an
 * opening process maps that file and finds the allocation at the
 * handle's offset.  The file covers the arena's first FC_IPC_SHARED bytes
 * (a worker's jail limits the size of the files it writes): memory past
 * them has no handle.  As the driver, a process may not open its own handle
 * (CUDA_ERROR_INVALID_CONTEXT): the handle carries the exporter's pid.
 * Events: the stand-in runs work when it is issued, so an opened event
 * is a new event of this process, complete.
 */
#define FC_IPC_MEM_MAGIC 0x6d637066u     /* "fpcm" */
#define FC_IPC_EVENT_MAGIC 0x65637066u   /* "fpce" */
#define FC_IPC_MAPS 16

typedef struct {
    uint32_t magic;
    uint32_t pid;
    uint64_t off;                   /* memory: the allocation in the exporter's arena */
    uint64_t size;
} fc_ipc_handle_t;

_Static_assert(sizeof(fc_ipc_handle_t) <= sizeof(CUipcMemHandle), "fc_ipc_handle_t");

/* Other processes' arenas this one mapped (g_lock). */
static struct {
    uint32_t pid;
    unsigned char *map;
} g_ipc_maps[FC_IPC_MAPS];

static void fc_ipc_name(uint32_t pid, char *out, size_t len)
{
    snprintf(out, len, "/dev/shm/vcu-ipc.%x.fakecuda-arena", pid);
}

static void fc_ipc_unlink(void)
{
    char name[64];

    fc_ipc_name((uint32_t)getpid(), name, sizeof(name));
    unlink(name);
}

/* The arena made a shared mapping of its file, what it holds copied in
 * first: 0, or -1 (as it was). */
static int fc_ipc_share(void)
{
    char name[64];
    size_t i;
    int fd, rc = -1;

    pthread_mutex_lock(&g_arena_lock);
    if (g_arena_fd >= 0 || g_arena == NULL) {
        rc = g_arena_fd >= 0 ? 0 : -1;
        goto out;
    }
    fc_ipc_name((uint32_t)getpid(), name, sizeof(name));
    fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        goto out;
    if (ftruncate(fd, (off_t)FC_IPC_SHARED) != 0)
        goto fail;
    for (i = 0; i < g_nused && g_used[i].off < FC_IPC_SHARED; i++) {
        size_t done = 0, len = g_used[i].len;

        if (len > FC_IPC_SHARED - g_used[i].off)
            len = FC_IPC_SHARED - g_used[i].off;
        while (done < len) {
            ssize_t n = pwrite(fd, g_arena + g_used[i].off + done, len - done,
                               (off_t)(g_used[i].off + done));

            if (n <= 0)
                goto fail;
            done += (size_t)n;
        }
    }
    if (mmap(g_arena, FC_IPC_SHARED, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE,
             fd, 0) == MAP_FAILED)
        goto fail;
    g_arena_fd = fd;
    atexit(fc_ipc_unlink);
    rc = 0;
    goto out;
fail:
    close(fd);
    unlink(name);
out:
    pthread_mutex_unlock(&g_arena_lock);
    return rc;
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    fc_ipc_handle_t h = { .magic = FC_IPC_MEM_MAGIC };
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    i = fc_mem_find((uintptr_t)dptr);
    if (!pHandle || i < 0 || g_mem[i].kind != FC_MEM_DEVICE || g_mem[i].pool != NULL ||
        g_mem[i].base + g_mem[i].size > (uintptr_t)g_arena + FC_IPC_SHARED) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (fc_ipc_share() != 0) {
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    h.pid = (uint32_t)getpid();
    h.off = g_mem[i].base - (uintptr_t)g_arena;
    h.size = g_mem[i].size;
    memset(pHandle, 0, sizeof(*pHandle));
    memcpy(pHandle->reserved, &h, sizeof(h));
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The arena of process pid, mapped here; NULL if it has none. */
static unsigned char *fc_ipc_map(uint32_t pid)
{
    char name[64];
    void *p;
    int i, fd;

    for (i = 0; i < FC_IPC_MAPS; i++)
        if (g_ipc_maps[i].map != NULL && g_ipc_maps[i].pid == pid)
            return g_ipc_maps[i].map;
    for (i = 0; i < FC_IPC_MAPS && g_ipc_maps[i].map != NULL; i++)
        ;
    if (i == FC_IPC_MAPS)
        return NULL;
    fc_ipc_name(pid, name, sizeof(name));
    fd = open(name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    p = mmap(NULL, FC_IPC_SHARED, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return NULL;
    g_ipc_maps[i].pid = pid;
    g_ipc_maps[i].map = p;
    return p;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    fc_ipc_handle_t h;
    fc_mem_t m = { 0 };
    unsigned char *map;
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    memcpy(&h, handle.reserved, sizeof(h));
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!pdptr || (Flags & ~(unsigned int)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ||
        h.magic != FC_IPC_MEM_MAGIC || h.size == 0 || h.off > FC_IPC_SHARED ||
        h.size > FC_IPC_SHARED - h.off) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (h.pid == (uint32_t)getpid()) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    map = fc_ipc_map(h.pid);
    if (map == NULL) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    i = fc_mem_find((uintptr_t)(map + h.off));
    if (i >= 0) {
        rc = g_mem[i].kind == FC_MEM_IPC && g_mem[i].base == (uintptr_t)(map + h.off)
                 ? CUDA_ERROR_ALREADY_MAPPED
                 : CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    m.base = (uintptr_t)(map + h.off);
    m.size = h.size;
    m.kind = FC_MEM_IPC;
    m.ctx = ctx;
    m.dev = ctx->dev;
    rc = fc_mem_insert(&m);
    if (rc == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)m.base;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS) {
        i = fc_mem_find((uintptr_t)dptr);
        if (i < 0 || g_mem[i].kind != FC_MEM_IPC || g_mem[i].base != (uintptr_t)dptr)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            fc_mem_remove((size_t)i);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    fc_ipc_handle_t h = { .magic = FC_IPC_EVENT_MAGIC };
    fc_event_t *e = (fc_event_t *)event;
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && !fc_list_has(g_events, e))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS && !pHandle)
        rc = CUDA_ERROR_INVALID_VALUE;
    /* As driver 580: an event made without CU_EVENT_INTERPROCESS. */
    if (rc == CUDA_SUCCESS && !(e->flags & CU_EVENT_INTERPROCESS))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        h.pid = (uint32_t)getpid();
        memset(pHandle, 0, sizeof(*pHandle));
        memcpy(pHandle->reserved, &h, sizeof(h));
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    fc_ipc_handle_t h;
    fc_event_t *e;
    fc_ctx_t *ctx;
    CUresult rc;

    memcpy(&h, handle.reserved, sizeof(h));
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && (!phEvent || h.magic != FC_IPC_EVENT_MAGIC))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && h.pid == (uint32_t)getpid())
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc != CUDA_SUCCESS)
        goto out;
    e = calloc(1, sizeof(*e));
    if (!e) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    e->ctx = ctx;
    e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
    e->recorded = 1;
    fc_list_add(&g_events, e);
    *phEvent = (CUevent)e;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * Shareable pools: a pool's descriptor is a memfd naming the exporting
 * process (and the pool's device); a block's export data its place in
 * that process's arena, shared as cuIpcGetMemHandle's memory is.  An
 * imported block is an FC_MEM_IPC range of the importing pool, which
 * cuMemFree[Async] removes.
 */
#define FC_IPC_POOL_MAGIC 0x6c637066u    /* "fpcl" */
#define FC_IPC_PTR_MAGIC 0x78637066u     /* "fpcx" */

CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags)
{
    fc_ipc_handle_t h = { .magic = FC_IPC_POOL_MAGIC };
    fc_pool_t *p;
    int fd;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&g_lock);
    p = fc_pool(pool);
    if (p)
        h.off = (uint64_t)p->dev;
    pthread_mutex_unlock(&g_lock);
    if (!p || !handle_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        !p->share || p->src_pid != 0)
        return CUDA_ERROR_INVALID_VALUE;
    h.pid = (uint32_t)getpid();
    fd = memfd_create("fakecuda-pool", MFD_CLOEXEC);
    if (fd < 0 || pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)handle_out = fd;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                    CUmemAllocationHandleType handleType,
                                                    unsigned long long flags)
{
    fc_ipc_handle_t h;
    fc_pool_t *p;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        pread((int)(intptr_t)handle, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
        h.magic != FC_IPC_POOL_MAGIC || h.off >= FC_NDEV || h.pid == 0)
        return CUDA_ERROR_INVALID_VALUE;
    p = calloc(1, sizeof(*p));
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = (int)h.off;
    p->src_pid = h.pid;
    pthread_mutex_lock(&g_lock);
    fc_list_add(&g_upools, p);
    pthread_mutex_unlock(&g_lock);
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    fc_ipc_handle_t h = { .magic = FC_IPC_PTR_MAGIC };
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    _Static_assert(sizeof(h) <= sizeof(shareData_out->reserved), "fc_ipc_handle_t");
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    i = fc_mem_find((uintptr_t)ptr);
    if (!shareData_out || i < 0 || g_mem[i].base != (uintptr_t)ptr ||
        g_mem[i].kind != FC_MEM_DEVICE || !g_mem[i].pool || !g_mem[i].pool->share ||
        g_mem[i].base + g_mem[i].size > (uintptr_t)g_arena + FC_IPC_SHARED) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (fc_ipc_share() != 0) {
        rc = CUDA_ERROR_OPERATING_SYSTEM;
        goto out;
    }
    h.pid = (uint32_t)getpid();
    h.off = g_mem[i].base - (uintptr_t)g_arena;
    h.size = g_mem[i].size;
    memset(shareData_out, 0, sizeof(*shareData_out));
    memcpy(shareData_out->reserved, &h, sizeof(h));
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                        CUmemPoolPtrExportData *shareData)
{
    fc_ipc_handle_t h;
    fc_mem_t m = { 0 };
    unsigned char *map;
    fc_pool_t *p;
    fc_ctx_t *ctx;
    CUresult rc;

    if (!shareData)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&h, shareData->reserved, sizeof(h));
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    p = fc_pool(pool);
    if (!ptr_out || !p || p->src_pid == 0 || h.magic != FC_IPC_PTR_MAGIC || h.pid != p->src_pid ||
        h.size == 0 || h.off > FC_IPC_SHARED || h.size > FC_IPC_SHARED - h.off ||
        (map = fc_ipc_map(h.pid)) == NULL || fc_mem_find((uintptr_t)(map + h.off)) >= 0) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    m.base = (uintptr_t)(map + h.off);
    m.size = h.size;
    m.kind = FC_MEM_IPC;
    m.ctx = ctx;
    m.dev = p->dev;
    m.pool = p;
    rc = fc_mem_insert(&m);
    if (rc == CUDA_SUCCESS)
        *ptr_out = (CUdeviceptr)m.base;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Virtual memory management                                           */

/*
 * A physical allocation is a memfd of its size (lazily backed, so a large
 * one costs nothing until touched), counted in the device's used memory
 * from cuMemCreate until its handle is released and its last mapping is
 * gone.  A reservation is an inaccessible anonymous mapping of the
 * process; cuMemMap maps the memfd over part of it (inaccessible still),
 * cuMemSetAccess makes it readable or writable and enters it in the
 * memory table for copies and kernels.  The granularity is 2 MiB.
 * Access is set on whole mappings only.
 */
#define FC_VMM_GRAN ((size_t)2 << 20)

typedef struct fc_phys_s {
    fc_obj_t hdr;
    int dev;
    int fd;
    size_t size;
    unsigned int refs;          /* the handle's: create, retains, less releases */
    unsigned int nmaps;
    unsigned int htypes;        /* requestedHandleTypes */
} fc_phys_t;

typedef struct fc_va_s {
    fc_obj_t hdr;
    uintptr_t base;
    size_t size;
    void *raw;                  /* the whole anonymous mapping */
    size_t raw_len;
} fc_va_t;

typedef struct fc_vmap_s {
    fc_obj_t hdr;
    uintptr_t base;
    size_t size;
    fc_phys_t *phys;
    unsigned int access[FC_NDEV];   /* CUmemAccess_flags per device */
} fc_vmap_t;

static fc_obj_t *g_phys, *g_vas, *g_vmaps;

static fc_phys_t *fc_phys_get(CUmemGenericAllocationHandle h)
{
    fc_phys_t *p = (fc_phys_t *)(uintptr_t)h;

    if (h == 0 || !fc_list_has(g_phys, p) || p->refs == 0)
        return NULL;
    return p;
}

static void fc_phys_maybe_free(fc_phys_t *p)
{
    if (p->refs != 0 || p->nmaps != 0)
        return;
    fc_list_del(&g_phys, p);
    g_dev_used[p->dev] -= p->size;
    close(p->fd);
    free(p);
}

static fc_vmap_t *fc_vmap_at(uintptr_t a)
{
    for (fc_obj_t *o = g_vmaps; o; o = o->next) {
        fc_vmap_t *m = (fc_vmap_t *)o;

        if (a - m->base < m->size)
            return m;
    }
    return NULL;
}

static int fc_vmap_meets(uintptr_t a, size_t n)
{
    for (fc_obj_t *o = g_vmaps; o; o = o->next) {
        fc_vmap_t *m = (fc_vmap_t *)o;

        if (m->base < a + n && a < m->base + m->size)
            return 1;
    }
    return 0;
}

/* The mappings exactly covering [a, a + n), into out (up to max): their
 * count, or 0 if they do not. */
static size_t fc_vmaps_cover(uintptr_t a, size_t n, fc_vmap_t **out, size_t max)
{
    uintptr_t at = a;
    size_t k = 0;
    fc_vmap_t *m;

    while (at < a + n && (m = fc_vmap_at(at)) != NULL && m->base == at && k < max) {
        out[k++] = m;
        at += m->size;
    }
    return at == a + n ? k : 0;
}

static CUresult fc_vmm_prop_check(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->win32HandleMetaData != NULL ||
        (prop->requestedHandleTypes &
         ~(CUmemAllocationHandleType)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    return fc_dev_check(prop->location.id);
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    CUresult rc;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_vmm_prop_check(prop);
    if (rc == CUDA_SUCCESS)
        *granularity = FC_VMM_GRAN;
    return rc;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    fc_phys_t *p;
    CUresult rc;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || flags != 0 || size == 0 || size % FC_VMM_GRAN != 0)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_vmm_prop_check(prop);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_lock);
    if (size > FC_TOTAL_MEM - g_dev_used[prop->location.id]) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p = calloc(1, sizeof(*p));
    if (p)
        p->fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
    if (!p || p->fd < 0 || ftruncate(p->fd, (off_t)size) != 0) {
        if (p && p->fd >= 0)
            close(p->fd);
        free(p);
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    p->dev = prop->location.id;
    p->size = size;
    p->refs = 1;
    p->htypes = (unsigned int)prop->requestedHandleTypes;
    fc_list_add(&g_phys, p);
    g_dev_used[p->dev] += size;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
    fc_phys_t *p;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&g_lock);
    p = fc_phys_get(handle);
    if (p) {
        p->refs--;
        fc_phys_maybe_free(p);
    }
    pthread_mutex_unlock(&g_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/*
 * Shareable handles: the POSIX descriptor is a duplicate of the
 * allocation's memfd, so another process that imports it maps the same
 * pages (as the driver's descriptor names the same device memory).
 */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    fc_phys_t *p;
    int fd = -1;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!shareableHandle || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    p = fc_phys_get(handle);
    if (p && (p->htypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
    pthread_mutex_unlock(&g_lock);
    if (fd < 0)
        return p ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    struct stat st;
    fc_phys_t *p;
    fc_ctx_t *ctx;
    int fd = (int)(intptr_t)osHandle;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
        fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size % FC_VMM_GRAN != 0)
        return CUDA_ERROR_INVALID_VALUE;
    p = calloc(1, sizeof(*p));
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (p->fd < 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&g_lock);
    p->dev = fc_cur(&ctx) == CUDA_SUCCESS ? ctx->dev : 0;
    p->size = (size_t)st.st_size;
    p->refs = 1;
    p->htypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    fc_list_add(&g_phys, p);
    g_dev_used[p->dev] += p->size;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    size_t align = alignment > FC_VMM_GRAN ? alignment : FC_VMM_GRAN;
    fc_va_t *v;
    void *raw;
    uintptr_t base;

    (void)addr;                 /* a hint */
    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || flags != 0 || size == 0 || size % FC_VMM_GRAN != 0 ||
        (alignment & (alignment - 1)) != 0 || size > ((size_t)1 << 46) || align > ((size_t)1 << 40))
        return CUDA_ERROR_INVALID_VALUE;
    raw = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v = calloc(1, sizeof(*v));
    if (!v) {
        munmap(raw, size + align);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    base = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    v->base = base;
    v->size = size;
    v->raw = raw;
    v->raw_len = size + align;
    pthread_mutex_lock(&g_lock);
    fc_list_add(&g_vas, v);
    pthread_mutex_unlock(&g_lock);
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    fc_va_t *v = NULL;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    pthread_mutex_lock(&g_lock);
    for (fc_obj_t *o = g_vas; o; o = o->next)
        if (((fc_va_t *)o)->base == (uintptr_t)ptr && ((fc_va_t *)o)->size == size)
            v = (fc_va_t *)o;
    if (!v || fc_vmap_meets(v->base, v->size)) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    fc_list_del(&g_vas, v);
    pthread_mutex_unlock(&g_lock);
    munmap(v->raw, v->raw_len);
    free(v);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    uintptr_t a = (uintptr_t)ptr;
    fc_phys_t *p;
    fc_vmap_t *m;
    int inside = 0;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags != 0 || size == 0 || a % FC_VMM_GRAN || offset % FC_VMM_GRAN)
        return CUDA_ERROR_INVALID_VALUE;
    if (size % FC_VMM_GRAN)
        return CUDA_ERROR_NOT_SUPPORTED;    /* NVIDIA's driver 580 answers so */
    pthread_mutex_lock(&g_lock);
    p = fc_phys_get(handle);
    for (fc_obj_t *o = g_vas; o; o = o->next) {
        fc_va_t *v = (fc_va_t *)o;

        if (a - v->base < v->size && size <= v->size - (a - v->base))
            inside = 1;
    }
    if (!p || !inside || fc_vmap_meets(a, size) || offset > p->size || size > p->size - offset)
        goto out;
    m = calloc(1, sizeof(*m));
    if (!m || mmap((void *)a, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, (off_t)offset) ==
                  MAP_FAILED) {
        free(m);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    m->base = a;
    m->size = size;
    m->phys = p;
    p->nmaps++;
    fc_list_add(&g_vmaps, m);
    rc = CUDA_SUCCESS;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Drops m's entry in the memory table, if it has one; g_lock held. */
static void fc_vmap_untable(fc_vmap_t *m)
{
    ssize_t i = fc_mem_find(m->base);

    if (i >= 0 && g_mem[i].kind == FC_MEM_VMM && g_mem[i].base == m->base)
        fc_mem_remove((size_t)i);
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    fc_vmap_t *ms[256];
    size_t n, k;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    n = fc_vmaps_cover((uintptr_t)ptr, size, ms, 256);
    for (k = 0; k < n; k++) {
        fc_vmap_t *m = ms[k];

        fc_vmap_untable(m);
        /* Back to an inaccessible part of its reservation. */
        mmap((void *)m->base, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
             MAP_NORESERVE, -1, 0);
        fc_list_del(&g_vmaps, m);
        m->phys->nmaps--;
        fc_phys_maybe_free(m->phys);
        free(m);
    }
    pthread_mutex_unlock(&g_lock);
    return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    fc_vmap_t *ms[256];
    size_t n, k, j;
    CUresult rc = CUDA_SUCCESS;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (j = 0; j < count; j++) {
        if (desc[j].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            (desc[j].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
             desc[j].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             desc[j].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
        rc = fc_dev_check(desc[j].location.id);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    pthread_mutex_lock(&g_lock);
    n = fc_vmaps_cover((uintptr_t)ptr, size, ms, 256);
    if (n == 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    for (k = 0; k < n; k++) {
        fc_vmap_t *m = ms[k];
        unsigned int any = 0;
        int prot;

        for (j = 0; j < count; j++)
            m->access[desc[j].location.id] = desc[j].flags;
        for (j = 0; j < FC_NDEV; j++)
            any |= m->access[j];
        prot = any == CU_MEM_ACCESS_FLAGS_PROT_NONE ? PROT_NONE
             : (any & 2) ? PROT_READ | PROT_WRITE : PROT_READ;
        mprotect((void *)m->base, m->size, prot);
        fc_vmap_untable(m);
        if (any) {
            fc_mem_t e = { 0 };

            e.base = m->base;
            e.size = m->size;
            e.cap = m->size;
            e.kind = FC_MEM_VMM;
            e.dev = m->phys->dev;
            if (fc_mem_insert(&e) != CUDA_SUCCESS)
                rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                                CUdeviceptr ptr)
{
    fc_vmap_t *m;
    CUresult rc;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_dev_check(location->id);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_lock);
    m = fc_vmap_at((uintptr_t)ptr);
    if (m)
        *flags = m->access[location->id];
    pthread_mutex_unlock(&g_lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    fc_vmap_t *m;

    if (!g_init)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    m = fc_vmap_at((uintptr_t)addr);
    if (m) {
        m->phys->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
    }
    pthread_mutex_unlock(&g_lock);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Registered host memory may serve as device memory (unified
 * addressing), so it goes into the same table. */
CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    fc_ctx_t *ctx;
    fc_mem_t m = { 0 };
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    /* Potentially unsafe during a capture (driver 580: refused in GLOBAL
     * mode, and the capture invalidated). */
    rc = fc_unsafe_check();
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!p || bytesize == 0 ||
        (Flags & ~(unsigned int)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                 CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY))) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    m.base = (uintptr_t)p;
    m.size = bytesize;
    m.kind = FC_MEM_HOSTREG;
    m.ctx = ctx;
    m.dev = ctx->dev;
    if (m.base + bytesize < m.base) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = fc_mem_insert(&m);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    rc = fc_unsafe_check();
    if (rc != CUDA_SUCCESS)
        goto out;
    i = fc_mem_find((uintptr_t)p);
    if (!p || i < 0 || g_mem[i].kind != FC_MEM_HOSTREG || g_mem[i].base != (uintptr_t)p)
        rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    else
        fc_mem_remove((size_t)i);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The stand-in's device memory is host memory: a registered range's
 * device pointer is its host address. */
CUresult CUDAAPI cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    fc_ctx_t *ctx;
    ssize_t i;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    i = fc_mem_find((uintptr_t)p);
    if (!pdptr || !p || Flags != 0 || i < 0 || g_mem[i].kind != FC_MEM_HOSTREG)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *pdptr = (CUdeviceptr)(uintptr_t)p;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * A copy's array sides as the host memory that holds them (g_lock held):
 * the copy within the array's extent, else CUDA_ERROR_INVALID_VALUE; an
 * array that is not live, CUDA_ERROR_INVALID_HANDLE.
 */
static CUresult fc_array_side(CUarray h, size_t x, size_t y, size_t z, const CUDA_MEMCPY3D *p,
                              const void **host, size_t *pitch, size_t *height)
{
    fc_array_t *a = (fc_array_t *)h;

    if (!a || !fc_list_has(g_arrays, a))
        return CUDA_ERROR_INVALID_HANDLE;
    if (x % a->elem || p->WidthInBytes % a->elem || x > a->row ||
        p->WidthInBytes > a->row - x || y > a->rows || p->Height > a->rows - y ||
        z > a->slices || p->Depth > a->slices - z)
        return CUDA_ERROR_INVALID_VALUE;
    *host = a->data;
    *pitch = a->row;
    *height = a->rows;
    return CUDA_SUCCESS;
}

static CUresult fc_copy_arrays(const CUDA_MEMCPY3D *in, CUDA_MEMCPY3D *out)
{
    CUresult rc = CUDA_SUCCESS;

    *out = *in;
    if (in->WidthInBytes == 0 || in->Height == 0 || in->Depth == 0)
        return CUDA_SUCCESS;
    if (in->srcMemoryType == CU_MEMORYTYPE_ARRAY) {
        rc = fc_array_side(in->srcArray, in->srcXInBytes, in->srcY, in->srcZ, in, &out->srcHost,
                           &out->srcPitch, &out->srcHeight);
        out->srcMemoryType = CU_MEMORYTYPE_HOST;
        out->srcArray = NULL;
    }
    if (rc == CUDA_SUCCESS && in->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
        const void *h = NULL;

        rc = fc_array_side(in->dstArray, in->dstXInBytes, in->dstY, in->dstZ, in, &h,
                           &out->dstPitch, &out->dstHeight);
        out->dstHost = (void *)h;
        out->dstMemoryType = CU_MEMORYTYPE_HOST;
        out->dstArray = NULL;
    }
    return rc;
}

/*
 * One copy, synchronous (hStream NULL: the legacy stream) or on a
 * stream, where a capture records it.  Validated before it is recorded,
 * and again when it runs.
 */
static CUresult fc_copy_submit(CUstream hStream, const CUDA_MEMCPY3D *in)
{
    CUDA_MEMCPY3D arr, *p = &arr;
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS)
        rc = fc_copy_arrays(in, &arr);
    if (rc == CUDA_SUCCESS)
        rc = fc_copy_validate(p);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!s->cap) {
        rc = fc_copy3d(p);
        goto out;
    }
    n = fc_node_new(FC_NODE_MEMCPY);
    if (!n) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.copy = *p;
    rc = fc_submit(ctx, s, n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * A host range that starts in registered host memory must end in the same
 * registration, as the driver checks (CUDA_ERROR_INVALID_VALUE): a copy
 * may not run from registered memory into memory that is not.
 */
static CUresult fc_host_range_check(uintptr_t p, size_t n)
{
    CUresult rc = CUDA_SUCCESS;
    ssize_t i;

    pthread_mutex_lock(&g_lock);
    i = fc_mem_find(p);
    if (i >= 0 && g_mem[i].kind == FC_MEM_HOSTREG && n > g_mem[i].size - (p - g_mem[i].base))
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_copy1d(CUstream h, CUmemorytype dt, uintptr_t dst, CUmemorytype st,
                          uintptr_t src, size_t n)
{
    CUDA_MEMCPY3D p;
    CUresult rc = CUDA_SUCCESS;

    if (dt == CU_MEMORYTYPE_HOST)
        rc = fc_host_range_check(dst, n);
    if (rc == CUDA_SUCCESS && st == CU_MEMORYTYPE_HOST)
        rc = fc_host_range_check(src, n);
    if (rc != CUDA_SUCCESS)
        return rc;

    fc_copy1d_params(&p, dt, dst, st, src, n);
    return fc_copy_submit(h, &p);
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return fc_copy1d(NULL, CU_MEMORYTYPE_DEVICE, (uintptr_t)dstDevice, CU_MEMORYTYPE_HOST,
                     (uintptr_t)srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoH(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return fc_copy1d(NULL, CU_MEMORYTYPE_HOST, (uintptr_t)dstHost, CU_MEMORYTYPE_DEVICE,
                     (uintptr_t)srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return fc_copy1d(NULL, CU_MEMORYTYPE_DEVICE, (uintptr_t)dstDevice, CU_MEMORYTYPE_DEVICE,
                     (uintptr_t)srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream)
{
    return fc_copy1d(hStream, CU_MEMORYTYPE_DEVICE, (uintptr_t)dstDevice, CU_MEMORYTYPE_HOST,
                     (uintptr_t)srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    return fc_copy1d(hStream, CU_MEMORYTYPE_HOST, (uintptr_t)dstHost, CU_MEMORYTYPE_DEVICE,
                     (uintptr_t)srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                   size_t ByteCount, CUstream hStream)
{
    return fc_copy1d(hStream, CU_MEMORYTYPE_DEVICE, (uintptr_t)dstDevice, CU_MEMORYTYPE_DEVICE,
                     (uintptr_t)srcDevice, ByteCount);
}

/* A context of the process, or NULL (the handle is compared, never
 * followed, before it is found); g_lock held. */
static fc_ctx_t *fc_ctx_find(CUcontext h)
{
    fc_ctx_t *c = (fc_ctx_t *)h;

    return c && fc_list_has(g_ctxs, c) ? c : NULL;
}

static CUresult fc_peer_ctxs(CUcontext a, CUcontext b)
{
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!g_init)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!fc_ctx_find(a) || !fc_ctx_find(b))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Peer copies: every context's memory is this process's, so a copy
 * between contexts (of one device or two) is a device-to-device copy.
 * (The stand-in calls its own entry points only through its static
 * helpers: by name, the guest library's, loaded first in loopback,
 * would answer.) */
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                              CUcontext srcContext, size_t ByteCount)
{
    CUresult rc = fc_peer_ctxs(dstContext, srcContext);

    return rc != CUDA_SUCCESS ? rc
                              : fc_copy1d(NULL, CU_MEMORYTYPE_DEVICE, (uintptr_t)dstDevice,
                                          CU_MEMORYTYPE_DEVICE, (uintptr_t)srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                   CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
                                   CUstream hStream)
{
    CUresult rc = fc_peer_ctxs(dstContext, srcContext);

    return rc != CUDA_SUCCESS ? rc
                              : fc_copy1d(hStream, CU_MEMORYTYPE_DEVICE, (uintptr_t)dstDevice,
                                          CU_MEMORYTYPE_DEVICE, (uintptr_t)srcDevice, ByteCount);
}

static CUresult fc_copy3d_peer(const CUDA_MEMCPY3D_PEER *q, CUstream hStream)
{
    CUDA_MEMCPY3D p;
    CUresult rc;

    if (!q)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_peer_ctxs(q->srcContext, q->dstContext);
    if (rc != CUDA_SUCCESS)
        return rc;
    memset(&p, 0, sizeof(p));
    p.srcXInBytes = q->srcXInBytes;
    p.srcY = q->srcY;
    p.srcZ = q->srcZ;
    p.srcLOD = q->srcLOD;
    p.srcMemoryType = q->srcMemoryType;
    p.srcHost = q->srcHost;
    p.srcDevice = q->srcDevice;
    p.srcArray = q->srcArray;
    p.srcPitch = q->srcPitch;
    p.srcHeight = q->srcHeight;
    p.dstXInBytes = q->dstXInBytes;
    p.dstY = q->dstY;
    p.dstZ = q->dstZ;
    p.dstLOD = q->dstLOD;
    p.dstMemoryType = q->dstMemoryType;
    p.dstHost = q->dstHost;
    p.dstDevice = q->dstDevice;
    p.dstArray = q->dstArray;
    p.dstPitch = q->dstPitch;
    p.dstHeight = q->dstHeight;
    p.WidthInBytes = q->WidthInBytes;
    p.Height = q->Height;
    p.Depth = q->Depth;
    return fc_copy_submit(hStream, &p);
}

CUresult CUDAAPI cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy)
{
    return fc_copy3d_peer(pCopy, NULL);
}

CUresult CUDAAPI cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
    return fc_copy3d_peer(pCopy, hStream);
}

/* Peer access, as the driver keeps it: from the current context to a
 * context of another device (cuDeviceCanAccessPeer), once. */
CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    fc_ctx_t *c, *p;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&c);
    p = fc_ctx_find(peerContext);
    if (rc == CUDA_SUCCESS && !p)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else if (rc == CUDA_SUCCESS && Flags != 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (rc == CUDA_SUCCESS && p->dev == c->dev)
        rc = CUDA_ERROR_INVALID_DEVICE;
    for (unsigned int i = 0; rc == CUDA_SUCCESS && i < c->npeer; i++)
        if (c->peer_id[i] == p->hdr.id)
            rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if (rc == CUDA_SUCCESS && c->npeer == sizeof(c->peer_id) / sizeof(c->peer_id[0]))
        rc = CUDA_ERROR_TOO_MANY_PEERS;
    if (rc == CUDA_SUCCESS)
        c->peer_id[c->npeer++] = p->hdr.id;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
    fc_ctx_t *c, *p;
    CUresult rc;
    unsigned int i;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&c);
    p = fc_ctx_find(peerContext);
    if (rc == CUDA_SUCCESS && !p)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS) {
        for (i = 0; i < c->npeer && c->peer_id[i] != p->hdr.id; i++)
            ;
        if (i == c->npeer)
            rc = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
        else
            c->peer_id[i] = c->peer_id[--c->npeer];
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemcpy2D(const CUDA_MEMCPY2D *pCopy)
{
    CUDA_MEMCPY3D p;

    if (!pCopy)
        return CUDA_ERROR_INVALID_VALUE;
    fc_copy2d_params(&p, pCopy);
    return fc_copy_submit(NULL, &p);
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
    CUDA_MEMCPY3D p;

    if (!pCopy)
        return CUDA_ERROR_INVALID_VALUE;
    fc_copy2d_params(&p, pCopy);
    return fc_copy_submit(hStream, &p);
}

CUresult CUDAAPI cuMemcpy3D(const CUDA_MEMCPY3D *pCopy)
{
    if (!pCopy)
        return CUDA_ERROR_INVALID_VALUE;
    return fc_copy_submit(NULL, pCopy);
}

CUresult CUDAAPI cuMemcpy3DAsync(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
    if (!pCopy)
        return CUDA_ERROR_INVALID_VALUE;
    return fc_copy_submit(hStream, pCopy);
}

/* ------------------------------------------------------------------ */
/* Arrays, texture and surface objects                                  */

static size_t fc_format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 0;
    }
}

/* The entry points' bodies, called inside the stand-in by name: its own
 * calls to an exported name would reach the loopback library's. */
static CUresult fc_array_create(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d);
static CUresult fc_array_destroy(CUarray hArray);

CUresult CUDAAPI cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    return fc_array_create(pHandle, d);
}

static CUresult fc_array_create(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    fc_ctx_t *ctx;
    fc_array_t *a;
    size_t eb, bytes;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    eb = d ? fc_format_bytes(d->Format) : 0;
    if (!pHandle || eb == 0 || (d->NumChannels != 1 && d->NumChannels != 2 &&
                                d->NumChannels != 4) ||
        d->Width == 0 || (d->Flags & ~(unsigned int)0x3f) ||
        ((d->Flags & CUDA_ARRAY3D_CUBEMAP) && (d->Width != d->Height || d->Depth % 6))) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    a = calloc(1, sizeof(*a));
    if (!a) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    a->ctx = ctx;
    a->d = *d;
    a->elem = eb * d->NumChannels;
    a->row = a->elem * d->Width;
    a->rows = d->Height ? d->Height : 1;
    a->slices = d->Depth ? d->Depth : 1;
    if (__builtin_mul_overflow(a->row, a->rows, &bytes) ||
        __builtin_mul_overflow(bytes, a->slices, &bytes) ||
        bytes > FC_TOTAL_MEM - g_dev_used[ctx->dev] ||
        !(a->data = calloc(1, bytes))) {
        free(a);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    fc_list_add(&g_arrays, a);
    *pHandle = (CUarray)a;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    CUDA_ARRAY3D_DESCRIPTOR ld;
    fc_mipmap_t *m;
    CUresult rc = CUDA_SUCCESS;
    size_t big;
    unsigned int most = 1;

    if (!pHandle || !d || levels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    big = d->Width > d->Height ? d->Width : d->Height;
    if (!(d->Flags & CUDA_ARRAY3D_LAYERED) && d->Depth > big)
        big = d->Depth;
    while (most < 32 && (big >> most))
        most++;
    if (levels > most)
        return CUDA_ERROR_INVALID_VALUE;
    m = calloc(1, sizeof(*m));
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned int l = 0; l < levels && rc == CUDA_SUCCESS; l++) {
        ld = *d;
        ld.Width = d->Width >> l ? d->Width >> l : 1;
        if (d->Height)
            ld.Height = d->Height >> l ? d->Height >> l : 1;
        if (d->Depth && !(d->Flags & CUDA_ARRAY3D_LAYERED))
            ld.Depth = d->Depth >> l ? d->Depth >> l : 1;
        rc = fc_array_create((CUarray *)&m->lv[l], &ld);
    }
    pthread_mutex_lock(&g_lock);
    if (rc == CUDA_SUCCESS) {
        m->ctx = m->lv[0]->ctx;
        m->levels = levels;
        fc_list_add(&g_mipmaps, m);
        *pHandle = (CUmipmappedArray)m;
    }
    pthread_mutex_unlock(&g_lock);
    if (rc != CUDA_SUCCESS) {
        for (unsigned int l = 0; l < levels; l++)
            if (m->lv[l])
                fc_array_destroy((CUarray)m->lv[l]);
        free(m);
    }
    return rc;
}

CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray,
                                          unsigned int level)
{
    fc_mipmap_t *m = (fc_mipmap_t *)hMipmappedArray;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!m || !fc_list_has(g_mipmaps, m))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!pLevelArray || level >= m->levels)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *pLevelArray = (CUarray)m->lv[level];
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    fc_mipmap_t *m = (fc_mipmap_t *)hMipmappedArray;

    pthread_mutex_lock(&g_lock);
    if (!m || !fc_list_has(g_mipmaps, m)) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    fc_list_del(&g_mipmaps, m);
    pthread_mutex_unlock(&g_lock);
    for (unsigned int l = 0; l < m->levels; l++)
        fc_array_destroy((CUarray)m->lv[l]);
    free(m);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    CUDA_ARRAY3D_DESCRIPTOR d3 = { 0 };

    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    d3.Width = d->Width;
    d3.Height = d->Height;
    d3.Format = d->Format;
    d3.NumChannels = d->NumChannels;
    return fc_array_create(pHandle, &d3);
}

/* An object on a live array cannot be made, but may outlive it, as with
 * the driver (using it then is the program's error). */
CUresult CUDAAPI cuArrayDestroy(CUarray hArray)
{
    return fc_array_destroy(hArray);
}

static CUresult fc_array_destroy(CUarray hArray)
{
    fc_array_t *a = (fc_array_t *)hArray;

    pthread_mutex_lock(&g_lock);
    if (!a || !fc_list_has(g_arrays, a)) {
        pthread_mutex_unlock(&g_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    fc_list_del(&g_arrays, a);
    pthread_mutex_unlock(&g_lock);
    free(a->data);
    free(a);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR *pd, CUarray hArray)
{
    fc_array_t *a = (fc_array_t *)hArray;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!a || !fc_list_has(g_arrays, a))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else if (!pd)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *pd = a->d;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_res_check(const CUDA_RESOURCE_DESC *r, int surf)
{
    size_t eb;

    if (!r || r->flags)
        return CUDA_ERROR_INVALID_VALUE;
    switch (r->resType) {
    case CU_RESOURCE_TYPE_ARRAY:
        if (!fc_list_has(g_arrays, r->res.array.hArray))
            return CUDA_ERROR_INVALID_HANDLE;
        if (surf && !(((fc_array_t *)r->res.array.hArray)->d.Flags & CUDA_ARRAY3D_SURFACE_LDST))
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        if (!fc_list_has(g_mipmaps, r->res.mipmap.hMipmappedArray))
            return CUDA_ERROR_INVALID_HANDLE;
        return surf ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    case CU_RESOURCE_TYPE_LINEAR:
        eb = fc_format_bytes(r->res.linear.format);
        if (surf || eb == 0 || r->res.linear.sizeInBytes == 0)
            return CUDA_ERROR_INVALID_VALUE;
        /* As the driver: the memory must begin in an allocation; how far
         * it reaches is not held to it. */
        return fc_mem_check((uintptr_t)r->res.linear.devPtr, 1);
    case CU_RESOURCE_TYPE_PITCH2D:
        eb = fc_format_bytes(r->res.pitch2D.format);
        if (surf || eb == 0 || r->res.pitch2D.width == 0 || r->res.pitch2D.height == 0 ||
            r->res.pitch2D.pitchInBytes < r->res.pitch2D.width * eb * r->res.pitch2D.numChannels)
            return CUDA_ERROR_INVALID_VALUE;
        return fc_mem_check((uintptr_t)r->res.pitch2D.devPtr, 1);
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult fc_obj_new(fc_obj_t **list, uint64_t *out, const CUDA_RESOURCE_DESC *r,
                           const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v)
{
    fc_ctx_t *ctx;
    fc_texobj_t *o;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && (!out || (list == &g_texobjs && !t)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = fc_res_check(r, list == &g_surfobjs);
    if (rc != CUDA_SUCCESS)
        goto out;
    o = calloc(1, sizeof(*o));
    if (!o) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    o->ctx = ctx;
    o->res = *r;
    if (t)
        o->tex = *t;
    if (v) {
        o->view = *v;
        o->has_view = 1;
    }
    fc_list_add(list, o);
    /* The object's id is its value, as the driver's are small numbers. */
    *out = o->hdr.id;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static fc_texobj_t *fc_obj_find(fc_obj_t *list, uint64_t v)
{
    for (fc_obj_t *o = list; o; o = o->next)
        if (o->id == v)
            return (fc_texobj_t *)o;
    return NULL;
}

static CUresult fc_obj_destroy(fc_obj_t **list, uint64_t v)
{
    fc_texobj_t *o;

    pthread_mutex_lock(&g_lock);
    o = fc_obj_find(*list, v);
    if (o)
        fc_list_del(list, o);
    pthread_mutex_unlock(&g_lock);
    free(o);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                                   const CUDA_TEXTURE_DESC *pTexDesc,
                                   const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
    uint64_t v = 0;
    CUresult rc = fc_obj_new(&g_texobjs, pTexObject ? &v : NULL, pResDesc, pTexDesc,
                             pResViewDesc);

    if (rc == CUDA_SUCCESS)
        *pTexObject = (CUtexObject)v;
    return rc;
}

CUresult CUDAAPI cuTexObjectDestroy(CUtexObject texObject)
{
    return fc_obj_destroy(&g_texobjs, texObject);
}

CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
    uint64_t v = 0;
    CUresult rc = fc_obj_new(&g_surfobjs, pSurfObject ? &v : NULL, pResDesc, NULL, NULL);

    if (rc == CUDA_SUCCESS)
        *pSurfObject = (CUsurfObject)v;
    return rc;
}

CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject surfObject)
{
    return fc_obj_destroy(&g_surfobjs, surfObject);
}

static CUresult fc_memset_submit(CUstream hStream, CUdeviceptr dst, size_t pitch,
                                 unsigned int value, unsigned int esize, size_t width,
                                 size_t height)
{
    CUDA_MEMSET_NODE_PARAMS p = { 0 };
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_node_t *n;
    CUresult rc;

    p.dst = dst;
    p.pitch = height > 1 ? pitch : width * esize;
    p.value = value;
    p.elementSize = esize;
    p.width = width;
    p.height = height;
    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS)
        rc = fc_memset_validate(&p);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!s->cap) {
        rc = fc_memset(&p);
        goto out;
    }
    n = fc_node_new(FC_NODE_MEMSET);
    if (!n) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.set = p;
    rc = fc_submit(ctx, s, n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return fc_memset_submit(NULL, dstDevice, 0, uc, 1, N, 1);
}

CUresult CUDAAPI cuMemsetD16(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return fc_memset_submit(NULL, dstDevice, 0, us, 2, N, 1);
}

CUresult CUDAAPI cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return fc_memset_submit(NULL, dstDevice, 0, ui, 4, N, 1);
}

CUresult CUDAAPI cuMemsetD2D8(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                              size_t Width, size_t Height)
{
    return fc_memset_submit(NULL, dstDevice, dstPitch, uc, 1, Width, Height);
}

CUresult CUDAAPI cuMemsetD2D16(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                               size_t Width, size_t Height)
{
    return fc_memset_submit(NULL, dstDevice, dstPitch, us, 2, Width, Height);
}

CUresult CUDAAPI cuMemsetD2D32(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                               size_t Width, size_t Height)
{
    return fc_memset_submit(NULL, dstDevice, dstPitch, ui, 4, Width, Height);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
    return fc_memset_submit(hStream, dstDevice, 0, uc, 1, N, 1);
}

CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                  CUstream hStream)
{
    return fc_memset_submit(hStream, dstDevice, 0, us, 2, N, 1);
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream)
{
    return fc_memset_submit(hStream, dstDevice, 0, ui, 4, N, 1);
}

CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                   size_t Width, size_t Height, CUstream hStream)
{
    return fc_memset_submit(hStream, dstDevice, dstPitch, uc, 1, Width, Height);
}

CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                    size_t Width, size_t Height, CUstream hStream)
{
    return fc_memset_submit(hStream, dstDevice, dstPitch, us, 2, Width, Height);
}

CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                    size_t Width, size_t Height, CUstream hStream)
{
    return fc_memset_submit(hStream, dstDevice, dstPitch, ui, 4, Width, Height);
}

/* ------------------------------------------------------------------ */
/* Modules and functions                                               */

#define FC_FATBIN_MAGIC         0xBA55ED50u
#define FC_FATBIN_WRAPPER_MAGIC 0x466243B1u
/* Entry flags of a compressed fatbin payload (LZ4, then ZSTD). */
#define FC_FATBIN_FLAG_LZ4      0x2000u
#define FC_FATBIN_FLAG_ZSTD     0x8000u
#define FC_IMAGE_MAX            (1ull << 31)

/* The fatbin header and entry header, as nvcc writes them. */
typedef struct fc_fatbin_hdr_s {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;          /* bytes after the header */
} fc_fatbin_hdr_t;

typedef struct fc_fatbin_entry_s {
    uint16_t kind;              /* 1 PTX, 2 ELF */
    uint16_t version;
    uint32_t header_size;
    uint64_t payload_size;
    uint32_t compressed_size;   /* 0 unless compressed */
    uint32_t unknown0;
    uint16_t minor, major;
    uint32_t arch;
    uint32_t name_offset, name_len;
    uint64_t flags;
} fc_fatbin_entry_t;

/* The __fatbinwrap struct nvcc puts in a host object. */
typedef struct fc_fatbin_wrapper_s {
    uint32_t magic;
    uint32_t version;
    const void *data;
    void *filename;
} fc_fatbin_wrapper_t;

/*
 * Size of a fatbin, and whether all its entries are compressed.  nvcc 13
 * compresses the PTX entry by default but not the cubin next to it; the
 * entries hold the same kernels, so one plain entry is enough to check
 * names against.  Only with none can a name's presence not be checked.
 */
static CUresult fc_fatbin_size(const unsigned char *img, size_t *size, int *compressed)
{
    fc_fatbin_hdr_t h;
    size_t off;
    int plain = 0, packed = 0;

    memcpy(&h, img, sizeof(h));
    if (h.header_size < sizeof(h) || h.fat_size > FC_IMAGE_MAX)
        return CUDA_ERROR_INVALID_IMAGE;
    *size = (size_t)h.header_size + h.fat_size;
    for (off = h.header_size; off + sizeof(fc_fatbin_entry_t) <= *size;) {
        fc_fatbin_entry_t e;

        memcpy(&e, img + off, sizeof(e));
        if (e.header_size < sizeof(e) || e.payload_size > *size)
            return CUDA_ERROR_INVALID_IMAGE;
        if (e.compressed_size || (e.flags & (FC_FATBIN_FLAG_LZ4 | FC_FATBIN_FLAG_ZSTD)))
            packed = 1;
        else
            plain = 1;
        off += e.header_size + e.payload_size;
    }
    *compressed = packed && !plain;
    return CUDA_SUCCESS;
}

/* Size of a 64-bit ELF (a cubin): the end of its furthest part. */
static CUresult fc_elf_size(const unsigned char *img, size_t *size)
{
    Elf64_Ehdr eh;
    size_t end;

    memcpy(&eh, img, sizeof(eh));
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_shoff > FC_IMAGE_MAX || eh.e_phoff > FC_IMAGE_MAX)
        return CUDA_ERROR_INVALID_IMAGE;
    end = sizeof(eh);
    if (eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr) > end)
        end = eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
    if (eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize > end)
        end = eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize;
    for (unsigned int i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;

        memcpy(&sh, img + eh.e_shoff + i * sizeof(sh), sizeof(sh));
        if (sh.sh_type == SHT_NOBITS)
            continue;
        if (sh.sh_offset > FC_IMAGE_MAX || sh.sh_size > FC_IMAGE_MAX)
            return CUDA_ERROR_INVALID_IMAGE;
        if (sh.sh_offset + sh.sh_size > end)
            end = sh.sh_offset + sh.sh_size;
    }
    *size = end;
    return CUDA_SUCCESS;
}

/* Works out what kind of image this is and how long. */
static CUresult fc_image_size(const void **image, size_t *size, int *compressed)
{
    const unsigned char *img = *image;
    uint32_t magic;

    *compressed = 0;
    memcpy(&magic, img, sizeof(magic));
    if (magic == FC_FATBIN_WRAPPER_MAGIC) {
        fc_fatbin_wrapper_t w;

        memcpy(&w, img, sizeof(w));
        if (!w.data)
            return CUDA_ERROR_INVALID_IMAGE;
        img = w.data;
        memcpy(&magic, img, sizeof(magic));
        if (magic != FC_FATBIN_MAGIC)
            return CUDA_ERROR_INVALID_IMAGE;
        *image = img;
    }
    if (magic == FC_FATBIN_MAGIC)
        return fc_fatbin_size(img, size, compressed);
    if (memcmp(img, ELFMAG, SELFMAG) == 0)
        return fc_elf_size(img, size);
    /* PTX: NUL-terminated text with a .version directive. */
    if (img[0] == '/' || img[0] == '.' || img[0] == '\n' || img[0] == ' ' || img[0] == '\t') {
        if (!strstr((const char *)img, ".version"))
            return CUDA_ERROR_INVALID_PTX;
        *size = strlen((const char *)img) + 1;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_IMAGE;
}

static void fc_module_free(fc_module_t *m)
{
    for (fc_obj_t **pp = &g_funcs; *pp;) {
        fc_func_t *f = (fc_func_t *)*pp;

        if (f->mod == m) {
            *pp = f->hdr.next;
            fc_dev_free(f->code);
            free(f);
        } else {
            pp = &(*pp)->next;
        }
    }
    for (size_t i = 0; i < m->nglobals; i++) {
        ssize_t j = fc_mem_find((uintptr_t)m->globals[i].mem);

        if (j >= 0)
            fc_mem_remove((size_t)j);
        fc_dev_free(m->globals[i].raw);
    }
    free(m->globals);
    free(m->image);
    free(m);
}

/* Gives the module its own copy of each device symbol its image names. */
/* Appends a copy of global g to m (zeroed or g's initial bytes). */
static CUresult fc_module_add_global(fc_module_t *m, const vcu_twin_global_t *g)
{
    size_t size = g->size ? g->size : 1;
    fc_global_t *mg, *grown;
    fc_mem_t e = { 0 };

    grown = realloc(m->globals, (m->nglobals + 1) * sizeof(*m->globals));
    if (!grown)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->globals = grown;
    mg = &m->globals[m->nglobals];
    memset(mg, 0, sizeof(*mg));
    /* Managed ones are packed as driver 580 packs them (measured,
     * tests/gpu/probe-managed-globals.c): each an allocation of its own,
     * 512 bytes apart in a page they share, the first at its start, those
     * of a module loaded later in the same page (a library's copy of a
     * module's managed global came out there on the H200). */
    if (g->managed && (g_mpage == NULL || g_mpage_used + size > 4096)) {
        void *raw;

        if (size > 4096)
            return CUDA_ERROR_NOT_SUPPORTED;
        raw = fc_dev_alloc(2 * 4096);
        if (!raw)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g_mpage = (unsigned char *)(((uintptr_t)raw + 4095) & ~(uintptr_t)4095);
        g_mpage_used = 0;
    } else if (!g->managed) {
        mg->raw = fc_dev_alloc(size);
        if (!mg->raw)
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (g->managed) {
        mg->mem = g_mpage + g_mpage_used;
        g_mpage_used += (size + 511) & ~(size_t)511;
    } else {
        mg->mem = mg->raw;
    }
    mg->def = g;
    if (g->init)
        memcpy(mg->mem, g->init, g->size);
    e.base = (uintptr_t)mg->mem;
    e.size = size;
    e.kind = FC_MEM_GLOBAL;
    e.managed = g->managed;
    e.ctx = m->ctx;
    e.dev = m->ctx->dev;
    if (fc_mem_insert(&e) != CUDA_SUCCESS) {
        fc_dev_free(mg->raw);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* Module globals are device memory: cuMemGetInfo shows them. */
    g_dev_used[e.dev] += size;
    m->nglobals++;
    return CUDA_SUCCESS;
}

static CUresult fc_module_globals(fc_module_t *m)
{
    if (!vcu_twin_globals)
        return CUDA_SUCCESS;
    for (const vcu_twin_global_t *g = vcu_twin_globals; g->name; g++) {
        CUresult rc;

        if (!fc_image_has(m, g->name))
            continue;
        rc = fc_module_add_global(m, g);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return CUDA_SUCCESS;
}

/* VCU_FAKECUDA_ANY_KERNEL=1 (fc_twin_any): a global with no twin is 64
 * KiB of zeros, one definition per name. */
static const vcu_twin_global_t *fc_global_any(const char *name)
{
    static struct fc_anyg_s {
        vcu_twin_global_t g;
        struct fc_anyg_s *next;
    } *any;
    const char *env = getenv("VCU_FAKECUDA_ANY_KERNEL");
    struct fc_anyg_s *a;

    if (env == NULL || strcmp(env, "1") != 0)
        return NULL;
    for (a = any; a != NULL; a = a->next)
        if (strcmp(a->g.name, name) == 0)
            return &a->g;
    a = calloc(1, sizeof(*a));
    if (a == NULL || (a->g.name = strdup(name)) == NULL) {
        free(a);
        return NULL;
    }
    a->g.size = 64 << 10;
    a->next = any;
    any = a;
    return &a->g;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    fc_ctx_t *ctx;
    fc_module_t *m = NULL;
    size_t size = 0;
    int compressed = 0;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!module || !image) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    rc = fc_image_size(&image, &size, &compressed);
    if (rc != CUDA_SUCCESS)
        goto out;
    m = calloc(1, sizeof(*m));
    if (!m || !(m->image = malloc(size))) {
        free(m);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    memcpy(m->image, image, size);
    m->size = size;
    m->compressed = compressed;
    m->ctx = ctx;
    rc = fc_module_globals(m);
    if (rc != CUDA_SUCCESS) {
        fc_module_free(m);
        goto out;
    }
    fc_list_add(&g_modules, m);
    *module = (CUmodule)m;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && !fc_list_has(g_modules, hmod))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        fc_list_del(&g_modules, hmod);
        fc_module_free((fc_module_t *)hmod);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    fc_ctx_t *ctx;
    fc_module_t *m = (fc_module_t *)hmod;
    const vcu_twin_t *t;
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!hfunc || !name) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!fc_list_has(g_modules, m)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    t = fc_twin_find(name);
    if (!t)
        t = fc_twin_any(name);
    if (!t || !fc_image_has(m, name)) {
        rc = CUDA_ERROR_NOT_FOUND;
        goto out;
    }
    /* One handle per kernel and module, as CUDA gives. */
    for (fc_obj_t *o = g_funcs; o; o = o->next) {
        f = (fc_func_t *)o;
        if (f->mod == m && f->twin == t) {
            *hfunc = (CUfunction)f;
            goto out;
        }
    }
    f = calloc(1, sizeof(*f));
    if (!f) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    f->mod = m;
    f->twin = t;
    f->max_dyn_shared = (int)(FC_SHARED_DEFAULT > t->static_shared
                                  ? FC_SHARED_DEFAULT - t->static_shared : 0);
    f->carveout = -1;
    fc_list_add(&g_funcs, f);
    *hfunc = (CUfunction)f;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                   const char *name)
{
    fc_ctx_t *ctx;
    fc_module_t *m = (fc_module_t *)hmod;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!name) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!fc_list_has(g_modules, m)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    rc = CUDA_ERROR_NOT_FOUND;
    for (int pass = 0; pass < 2 && rc == CUDA_ERROR_NOT_FOUND; pass++) {
        const vcu_twin_global_t *any;

        for (size_t i = 0; i < m->nglobals; i++) {
            if (strcmp(m->globals[i].def->name, name) == 0) {
                if (dptr)
                    *dptr = (CUdeviceptr)(uintptr_t)m->globals[i].mem;
                if (bytes)
                    *bytes = m->globals[i].def->size;
                rc = CUDA_SUCCESS;
                break;
            }
        }
        if (rc == CUDA_ERROR_NOT_FOUND && pass == 0 && (any = fc_global_any(name)) != NULL &&
            fc_module_add_global(m, any) != CUDA_SUCCESS)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The function, checked, for the calling thread's context. */
static CUresult fc_func_get(CUfunction hfunc, fc_func_t **out)
{
    fc_ctx_t *ctx;
    CUresult rc = fc_cur(&ctx);

    if (rc != CUDA_SUCCESS)
        return rc;
    if (!fc_list_has(g_funcs, hfunc))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (fc_func_t *)hfunc;
    return CUDA_SUCCESS;
}

/*
 * Lazy loading, as NVIDIA's driver does it by default
 * (CUDA_MODULE_LOADING=LAZY): a function's code goes to device memory at
 * its first use (a launch, a query of its attributes or occupancy,
 * cuFuncLoad), not with its module, so where later allocations land
 * depends on which functions were used before them.  g_lock held.
 */
#define FC_CODE_BYTES (64u << 10)

static void fc_func_use(fc_func_t *f)
{
    if (f->code == NULL)
        f->code = fc_dev_alloc(FC_CODE_BYTES);
}

static CUresult fc_func_get_used(CUfunction hfunc, fc_func_t **out)
{
    CUresult rc = fc_func_get(hfunc, out);

    if (rc == CUDA_SUCCESS)
        fc_func_use(*out);
    return rc;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get(func, &f);
    if (rc == CUDA_SUCCESS &&
        (paramIndex >= f->twin->nparams || paramIndex >= VCU_TWIN_MAX_PARAMS))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        if (paramOffset)
            *paramOffset = f->twin->params[paramIndex].offset;
        if (paramSize)
            *paramSize = f->twin->params[paramIndex].size;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get_used(hfunc, &f);
    if (rc == CUDA_SUCCESS && !pi)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        goto out;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = fc_func_max_threads(f);
        break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
        *pi = (int)f->twin->static_shared;
        break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
        *pi = (int)f->twin->local_size;
        break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
        *pi = 0;
        break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = fc_regs(f->twin);
        break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = 90;
        break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        *pi = f->max_dyn_shared;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        *pi = f->carveout;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        *pi = f->cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        *pi = f->non_portable_cluster;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        *pi = f->cluster_policy;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get(hfunc, &f);
    if (rc != CUDA_SUCCESS)
        goto out;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || (size_t)value + f->twin->static_shared > FC_SHARED_OPTIN)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            f->max_dyn_shared = value;
        break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            f->carveout = value;
        break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
        if (value < 0 || value > 8)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            f->cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
        break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        f->non_portable_cluster = value != 0;
        break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT ||
            value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            f->cluster_policy = value;
        break;
    default:
        rc = CUDA_ERROR_INVALID_VALUE;
        break;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
                                                                      CUfunction func,
                                                                      int blockSize,
                                                                      size_t dynamicSMemSize,
                                                                      unsigned int flags)
{
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get_used(func, &f);
    /* A block of no threads is refused, as NVIDIA's driver refuses it
     * (drv_vector_add on an H100). */
    if (rc == CUDA_SUCCESS &&
        (!numBlocks || blockSize <= 0 || (flags & ~(unsigned int)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *numBlocks = fc_occupancy(f, blockSize, dynamicSMemSize);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Dynamic shared memory each of numBlocks blocks can have on one SM, as
 * fc_occupancy() counts shared memory (0 when the blocks cannot fit). */
CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func,
                                                         int numBlocks, int blockSize)
{
    fc_func_t *f;
    CUresult rc;
    size_t per, need;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get_used(func, &f);
    if (rc == CUDA_SUCCESS && (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        per = FC_SHARED_PER_SM / (size_t)numBlocks;
        need = f->twin->static_shared + FC_SHARED_RESERVED;
        per = per > need ? per - need : 0;
        *dynamicSmemSize = per < (size_t)f->max_dyn_shared ? per : (size_t)f->max_dyn_shared;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * The block size (a warp multiple up to blockSizeLimit) that keeps the
 * most threads resident per SM; ties go to the larger block.  The
 * callback is the caller's pure function and runs under g_lock.
 */
CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags)
{
    fc_func_t *f;
    int limit, best = 0, best_blocks = 0;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get_used(func, &f);
    if (rc == CUDA_SUCCESS &&
        (!minGridSize || !blockSize || blockSizeLimit < 0 ||
         (flags & ~(unsigned int)CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        goto out;
    limit = fc_func_max_threads(f);
    if (blockSizeLimit > 0 && blockSizeLimit < limit)
        limit = blockSizeLimit;
    for (int bs = limit; bs > 0; bs = (bs % 32) ? bs - bs % 32 : bs - 32) {
        size_t dyn = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(bs)
                                                : dynamicSMemSize;
        int blocks = fc_occupancy(f, bs, dyn);

        if (blocks * bs > best_blocks * best) {
            best = bs;
            best_blocks = blocks;
        }
    }
    *blockSize = best;
    *minGridSize = best_blocks * FC_SMS;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Launches                                                            */

static CUresult fc_event_check(CUevent hEvent, int block);
static CUresult fc_event_record(CUevent hEvent, CUstream hStream, unsigned int flags);

/* cluster: blocks per cluster (cuLaunchKernelEx), already checked; NULL
 * for none. */
static CUresult fc_launch_cl(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz,
                             unsigned int shared, CUstream hStream, void **kernelParams,
                             void **extra, int coop, const unsigned int *cluster)
{
    const unsigned int grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS)
        rc = fc_kernel_node(f, grid, block, shared, kernelParams, extra, coop, &n);
    if (rc == CUDA_SUCCESS && ((fc_func_t *)f)->mod->ctx != ctx) {
        fc_node_free(n);
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == CUDA_SUCCESS)
        fc_func_use((fc_func_t *)f);
    if (rc == CUDA_SUCCESS && cluster != NULL)
        memcpy(n->u.kernel.cluster, cluster, sizeof(n->u.kernel.cluster));
    if (rc == CUDA_SUCCESS)
        rc = fc_submit(ctx, s, n);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                          unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                          CUstream hStream, void **kernelParams, void **extra, int coop)
{
    return fc_launch_cl(f, gx, gy, gz, bx, by, bz, shared, hStream, kernelParams, extra, coop,
                        NULL);
}

/* Largest cluster sm_90 runs: 8 blocks, 16 where the kernel allows a
 * non-portable size. */
static unsigned int fc_cluster_max(const fc_func_t *f)
{
    return f->non_portable_cluster ? 16u : 8u;
}

/*
 * The launch attributes of a config, as cuda.h describes them: *coop,
 * cluster[3] (0s: none; the kernel's required dims otherwise), events
 * to record after the launch.  Caller holds nothing.
 */
static CUresult fc_config(const CUlaunchConfig *config, const fc_func_t *f, int *coop,
                          unsigned int cluster[3], CUevent ev[2])
{
    const unsigned int grid[3] = { config->gridDimX, config->gridDimY, config->gridDimZ };

    *coop = 0;
    memset(cluster, 0, 3 * sizeof(*cluster));
    ev[0] = ev[1] = NULL;
    if (config->numAttrs > 0 && config->attrs == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < config->numAttrs; i++) {
        const CUlaunchAttribute *a = &config->attrs[i];

        switch (a->id) {
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            *coop = a->value.cooperative != 0;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            cluster[0] = a->value.clusterDim.x;
            cluster[1] = a->value.clusterDim.y;
            cluster[2] = a->value.clusterDim.z;
            if (!cluster[0] || !cluster[1] || !cluster[2])
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
            ev[0] = a->value.programmaticEvent.event;
            break;
        case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
            ev[1] = a->value.launchCompletionEvent.event;
            break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
            if (a->value.clusterSchedulingPolicyPreference >
                CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
                return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
        case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
        case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
            break;
        default:
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    if (cluster[0] == 0 && f->cluster[0] > 0) {
        for (int i = 0; i < 3; i++)
            cluster[i] = f->cluster[i] > 0 ? (unsigned int)f->cluster[i] : 1u;
    }
    if (cluster[0] == 0)
        return CUDA_SUCCESS;
    if ((uint64_t)cluster[0] * cluster[1] * cluster[2] > fc_cluster_max(f))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    for (int i = 0; i < 3; i++)
        if (grid[i] % cluster[i] != 0)
            return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    return CUDA_SUCCESS;
}

static CUresult fc_launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                             void **extra)
{
    unsigned int cluster[3];
    CUevent ev[2];
    CUresult rc;
    int coop;

    if (config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = (f && fc_list_has(g_funcs, f)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS)
        rc = fc_config(config, (fc_func_t *)f, &coop, cluster, ev);
    for (int i = 0; i < 2 && rc == CUDA_SUCCESS; i++)
        if (ev[i] != NULL)
            rc = fc_event_check(ev[i], 0);
    if (rc == CUDA_SUCCESS)
        rc = fc_launch_cl(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                          config->blockDimX, config->blockDimY, config->blockDimZ,
                          config->sharedMemBytes, config->hStream, kernelParams, extra, coop,
                          cluster[0] ? cluster : NULL);
    /* The stand-in runs the whole kernel at once: both events mean done. */
    for (int i = 0; i < 2 && rc == CUDA_SUCCESS; i++)
        if (ev[i] != NULL)
            rc = fc_event_record(ev[i], config->hStream, CU_EVENT_RECORD_DEFAULT);
    return rc;
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                  void **kernelParams, void **extra)
{
    return fc_launch_ex(config, f, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    return fc_launch_ex(config, f, kernelParams, extra);
}

/*
 * Clusters of the config's size resident at once: the blocks one SM
 * holds times the SMs, in whole clusters, on 8 GPCs of 16 SMs (a cluster
 * never spans GPCs).
 */
CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                              const CUlaunchConfig *config)
{
    unsigned int cluster[3], size;
    CUevent ev[2];
    CUresult rc;
    int coop, per_sm;

    if (numClusters == NULL || config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = (func && fc_list_has(g_funcs, func)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS)
        rc = fc_config(config, (fc_func_t *)func, &coop, cluster, ev);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (cluster[0] == 0)
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    size = cluster[0] * cluster[1] * cluster[2];
    pthread_mutex_lock(&g_lock);
    per_sm = fc_occupancy((fc_func_t *)func,
                          (int)(config->blockDimX * config->blockDimY * config->blockDimZ),
                          config->sharedMemBytes);
    pthread_mutex_unlock(&g_lock);
    *numClusters = (int)(8u * (16u * (unsigned int)per_sm / size));
    return CUDA_SUCCESS;
}

/* The largest cluster the kernel can run with the config's blocks. */
CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                                    const CUlaunchConfig *config)
{
    unsigned int cluster[3];
    CUevent ev[2];
    CUresult rc;
    int coop, per_sm;

    if (clusterSize == NULL || config == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = (func && fc_list_has(g_funcs, func)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_unlock(&g_lock);
    if (rc == CUDA_SUCCESS)
        rc = fc_config(config, (fc_func_t *)func, &coop, cluster, ev);
    if (rc != CUDA_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_lock);
    per_sm = fc_occupancy((fc_func_t *)func,
                          (int)(config->blockDimX * config->blockDimY * config->blockDimZ),
                          config->sharedMemBytes);
    *clusterSize = per_sm > 0 ? (int)fc_cluster_max((fc_func_t *)func) : 0;
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    return fc_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                     sharedMemBytes, hStream, kernelParams, extra, 0);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    return fc_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                     sharedMemBytes, hStream, kernelParams, NULL, 1);
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && !fn)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        goto out;
    n = fc_node_new(FC_NODE_HOST);
    if (!n) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.host.fn = fn;
    n->u.host.userData = userData;
    rc = fc_submit(ctx, s, n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Streams                                                             */

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && (!phStream || (flags & ~(unsigned int)CU_STREAM_NON_BLOCKING)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        goto out;
    s = malloc(sizeof(*s));
    if (!s) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* As CUDA: a priority out of range is clamped, not refused. */
    if (priority > FC_PRIO_LEAST)
        priority = FC_PRIO_LEAST;
    if (priority < FC_PRIO_GREATEST)
        priority = FC_PRIO_GREATEST;
    fc_stream_init(s, ctx, flags, priority);
    fc_list_add(&g_streams, s);
    *phStream = (CUstream)s;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return cuStreamCreateWithPriority(phStream, Flags, FC_PRIO_LEAST);
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    fc_ctx_t *ctx;
    fc_stream_t *s = (fc_stream_t *)hStream;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && (fc_is_null_stream(hStream) || !fc_list_has(g_streams, s)))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        fc_list_del(&g_streams, s);
        /* As the driver: a stream that joined a capture may go (its work
         * stays in the graph; NVIDIA's graphMemoryNodes does that); the
         * capture's origin may not. */
        if (s->cap && s->cap->origin == s)
            s->cap->invalidated = 1;
        fc_stream_leave_capture(s);
        free(s);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Work is done when it is submitted; only a capture stops a wait. */
static CUresult fc_stream_wait(CUstream hStream, int block)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && s->cap) {
        fc_cap_invalidate(s);
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (rc == CUDA_SUCCESS && block)
        fc_host_drain();
    else if (rc == CUDA_SUCCESS && g_host_busy > 0)
        rc = CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    return fc_stream_wait(hStream, 1);
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    return fc_stream_wait(hStream, 0);
}

static fc_cap_t *fc_cap_by_id(uint64_t id)
{
    for (fc_obj_t *o = g_caps; o; o = o->next)
        if (o->id == id)
            return (fc_cap_t *)o;
    return NULL;
}

/* Adds deps[] to s's capture dependencies, without duplicates. */
static CUresult fc_deps_merge(fc_stream_t *s, fc_node_t *const *deps, size_t n)
{
    fc_node_t **d = realloc(s->deps, (s->ndeps + n + 1) * sizeof(*d));

    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->deps = d;
    for (size_t i = 0; i < n; i++) {
        size_t j;

        for (j = 0; j < s->ndeps && s->deps[j] != deps[i]; j++)
            ;
        if (j == s->ndeps)
            s->deps[s->ndeps++] = deps[i];
    }
    return CUDA_SUCCESS;
}

/*
 * Outside a capture a wait is a no-op (the event's work is done).  In
 * one, it is the fork/join of stream capture: a stream waiting for an
 * event recorded in a capture joins it, taking the event's dependencies.
 */
CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_event_t *e = (fc_event_t *)hEvent;
    fc_cap_t *cap;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!fc_list_has(g_events, e)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (Flags & ~(unsigned int)CU_EVENT_WAIT_EXTERNAL) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    cap = e->cap_id ? fc_cap_by_id(e->cap_id) : NULL;
    if (!cap)
        goto out;
    if (s->cap && s->cap != cap) {
        rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        goto out;
    }
    if (fc_is_null_stream(hStream)) {
        cap->invalidated = 1;
        rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        goto out;
    }
    s->cap = cap;
    rc = fc_deps_merge(s, e->cap_deps, e->ncap_deps);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* g_lock held.  (Not the exported call from inside: in a process that
 * also loads the guest's libcuda, that name can bind to the guest's.) */
static CUresult fc_begin_capture(CUstream hStream, CUstreamCaptureMode mode)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_cap_t *cap;
    CUresult rc;

    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (fc_is_null_stream(hStream)) {
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        goto out;
    }
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (s->cap) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    cap = calloc(1, sizeof(*cap));
    if (!cap || !(cap->graph = fc_graph_new())) {
        free(cap);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    cap->origin = s;
    cap->mode = mode;
    cap->thread = pthread_self();
    fc_list_add(&g_caps, cap);
    s->cap = cap;
out:
    return rc;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream, CUstreamCaptureMode mode)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_begin_capture(hStream, mode);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* A capture into hGraph, a listed graph: its nodes go after deps. */
CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData,
                                             size_t numDependencies, CUstreamCaptureMode mode)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_cap_t *cap;
    CUresult rc;

    if (dependencyData || (numDependencies && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = fc_begin_capture(hStream, mode);
    if (rc != CUDA_SUCCESS)
        goto out;
    rc = fc_stream_get(hStream, &ctx, &s);
    cap = rc == CUDA_SUCCESS ? s->cap : NULL;
    if (!cap || !fc_list_has(g_graphs, hGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (size_t i = 0; i < numDependencies; i++)
            if (!dependencies[i] ||
                !fc_graph_has_node((fc_graph_t *)hGraph, (fc_node_t *)dependencies[i]))
                rc = CUDA_ERROR_INVALID_VALUE;
        if (rc == CUDA_SUCCESS && numDependencies &&
            !(s->deps = calloc(numDependencies, sizeof(*s->deps))))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
        if (cap)
            fc_stream_leave_capture(s);     /* its own empty graph goes */
        goto out;
    }
    fc_graph_free(cap->graph);
    cap->graph = (fc_graph_t *)hGraph;
    cap->to_graph = 1;
    for (size_t i = 0; i < numDependencies; i++)
        s->deps[i] = (fc_node_t *)dependencies[i];
    s->ndeps = numDependencies;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * Ends the capture on its origin stream, taking every stream that joined
 * out of it too (CUDA would insist they had joined back first).
 */
CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_cap_t *cap;
    fc_graph_t *g;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc != CUDA_SUCCESS)
        goto out;
    cap = s->cap;
    if (!cap) {
        rc = CUDA_ERROR_ILLEGAL_STATE;
        goto out;
    }
    /* Into a graph of the caller's, the graph need not be asked for. */
    if (!phGraph && !cap->to_graph) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (cap->origin != s) {
        cap->invalidated = 1;
        rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
        goto out;
    }
    g = cap->graph;
    cap->graph = NULL;
    for (fc_obj_t *o = g_streams; o; o = o->next) {
        fc_stream_t *t = (fc_stream_t *)o;

        if (t->cap == cap && t != s) {
            free(t->deps);
            t->deps = NULL;
            t->ndeps = 0;
            t->cap = NULL;
        }
    }
    if (phGraph)
        *phGraph = NULL;
    if (cap->to_graph) {
        /* The caller's graph, listed already, kept either way. */
        if (cap->invalidated)
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (phGraph)
            *phGraph = (CUgraph)g;
    } else if (cap->invalidated) {
        fc_graph_free(g);
        rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else {
        fc_list_add(&g_graphs, g);
        *phGraph = (CUgraph)g;
    }
    fc_stream_leave_capture(s);         /* frees cap: s was the last */
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out,
                                        const CUgraphEdgeData **edgeData_out,
                                        size_t *numDependencies_out)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && !captureStatus_out)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!s->cap) {
        *captureStatus_out = CU_STREAM_CAPTURE_STATUS_NONE;
        goto out;
    }
    *captureStatus_out = s->cap->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                             : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id_out)
        *id_out = s->cap->hdr.id;
    /* The graph under construction; it becomes a listed graph at the end. */
    if (graph_out)
        *graph_out = (CUgraph)s->cap->graph;
    if (dependencies_out)
        *dependencies_out = (const CUgraphNode *)s->deps;
    /* NULL: all edges are default ones. */
    if (edgeData_out)
        *edgeData_out = NULL;
    if (numDependencies_out)
        *numDependencies_out = s->ndeps;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Test double: the capture's open dependencies replaced (SET) or added
 * to (ADD); each node must be of the capture's graph. */
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
                                                      const CUgraphEdgeData *dependencyData,
                                                      size_t numDependencies, unsigned int flags)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && (flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES ||
                               (numDependencies && !dependencies) || dependencyData))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && (!s->cap || s->cap->invalidated))
        rc = CUDA_ERROR_ILLEGAL_STATE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < numDependencies; i++) {
        fc_node_t *n = (fc_node_t *)dependencies[i];
        fc_graph_t *g = s->cap->graph;

        if (!n || n->graph != g || n->index >= g->n || g->nodes[n->index] != n)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS) {
        if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES)
            s->ndeps = 0;
        rc = fc_deps_merge(s, (fc_node_t *const *)dependencies, numDependencies);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && !captureStatus)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        if (!s->cap)
            *captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
        else if (s->cap->invalidated)
            *captureStatus = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        else
            *captureStatus = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Events                                                              */

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    fc_ctx_t *ctx;
    fc_event_t *e;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS &&
        (!phEvent ||
         (Flags & ~(unsigned int)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING |
                                  CU_EVENT_INTERPROCESS)) ||
         ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc != CUDA_SUCCESS)
        goto out;
    e = calloc(1, sizeof(*e));
    if (!e) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    e->ctx = ctx;
    e->flags = Flags;
    fc_list_add(&g_events, e);
    *phEvent = (CUevent)e;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    fc_ctx_t *ctx;
    fc_event_t *e = (fc_event_t *)hEvent;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && !fc_list_has(g_events, e))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        fc_list_del(&g_events, e);
        free(e->cap_deps);
        free(e);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Called inside the stand-in too: cuEventRecord* may resolve to another
 * libcuda.so.1 loaded first (the loopback guest library). */
static CUresult fc_event_record(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_event_t *e = (fc_event_t *)hEvent;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && !fc_list_has(g_events, e))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS && (flags & ~(unsigned int)CU_EVENT_RECORD_EXTERNAL))
        rc = CUDA_ERROR_INVALID_VALUE;
    /* EXTERNAL is for captures (NVIDIA's driver 580: ILLEGAL_STATE). */
    if (rc == CUDA_SUCCESS && (flags & CU_EVENT_RECORD_EXTERNAL) && !s->cap)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (rc != CUDA_SUCCESS)
        goto out;
    if (s->cap) {
        /* A record in a capture only marks a point to fork or join at. */
        fc_node_t **d = malloc((s->ndeps ? s->ndeps : 1) * sizeof(*d));

        if (!d) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        memcpy(d, s->deps, s->ndeps * sizeof(*d));
        free(e->cap_deps);
        e->cap_deps = d;
        e->ncap_deps = s->ndeps;
        e->cap_id = s->cap->hdr.id;
        goto out;
    }
    e->cap_id = 0;
    e->recorded = 1;
    e->ns = fc_now_ns();
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return fc_event_record(hEvent, hStream, flags);
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return fc_event_record(hEvent, hStream, CU_EVENT_RECORD_DEFAULT);
}

/* Recorded work is done work: nothing to wait for. */
static CUresult fc_event_check(CUevent hEvent, int block)
{
    fc_ctx_t *ctx;
    fc_event_t *e = (fc_event_t *)hEvent;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && !fc_list_has(g_events, e))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS && block)
        fc_host_drain();
    else if (rc == CUDA_SUCCESS && g_host_busy > 0)
        rc = CUDA_ERROR_NOT_READY;
    if (rc == CUDA_SUCCESS && e->ctx->sticky != CUDA_SUCCESS)
        rc = e->ctx->sticky;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    return fc_event_check(hEvent, 1);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    return fc_event_check(hEvent, 0);
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    fc_ctx_t *ctx;
    fc_event_t *a = (fc_event_t *)hStart, *b = (fc_event_t *)hEnd;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc != CUDA_SUCCESS)
        goto out;
    if (!pMilliseconds) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (!fc_list_has(g_events, a) || !fc_list_has(g_events, b)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    /* As CUDA: no timestamps, or never recorded -> INVALID_HANDLE. */
    if ((a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING) ||
        !a->recorded || !b->recorded) {
        rc = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    *pMilliseconds = (float)((double)((int64_t)(b->ns - a->ns)) / 1e6);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Graphs                                                              */

CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    fc_graph_t *g;

    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    g = fc_graph_new();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    fc_list_add(&g_graphs, g);
    pthread_mutex_unlock(&g_lock);
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!fc_list_has(g_graphs, hGraph) || ((fc_graph_t *)hGraph)->body) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        fc_list_del(&g_graphs, hGraph);
        fc_graph_free((fc_graph_t *)hGraph);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Adds a node built by the caller (taking it over) to a listed graph. */
/* A graph nodes may be added to: a listed one, or a capture's (cuda.h:
 * every operation but destroying it and removing nodes is allowed on
 * the graph of a capture in progress). */
static fc_graph_t *fc_graph_lookup(CUgraph h);
static int fc_graph_in(const fc_graph_t *g, const fc_graph_t *want, int depth);

static int fc_graph_addable(CUgraph hGraph)
{
    return fc_graph_lookup(hGraph) != NULL;
}

static CUresult fc_graph_add_api(CUgraphNode *phGraphNode, CUgraph hGraph,
                                 const CUgraphNode *dependencies, size_t numDependencies,
                                 fc_node_t *n)
{
    CUresult rc;

    if (!phGraphNode || !fc_graph_addable(hGraph) || (numDependencies && !dependencies)) {
        fc_node_free(n);
        return CUDA_ERROR_INVALID_VALUE;
    }
    rc = fc_graph_add((fc_graph_t *)hGraph, n, (fc_node_t *const *)dependencies,
                      numDependencies);
    if (rc == CUDA_SUCCESS)
        *phGraphNode = (CUgraphNode)n;
    return rc;
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    fc_ctx_t *ctx;
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS && (!nodeParams || !nodeParams->func))
        rc = CUDA_ERROR_INVALID_VALUE;      /* CUkernel (library API): not here */
    if (rc == CUDA_SUCCESS) {
        const unsigned int grid[3] = { nodeParams->gridDimX, nodeParams->gridDimY,
                                       nodeParams->gridDimZ };
        const unsigned int block[3] = { nodeParams->blockDimX, nodeParams->blockDimY,
                                        nodeParams->blockDimZ };

        rc = fc_kernel_node(nodeParams->func, grid, block, nodeParams->sharedMemBytes,
                            nodeParams->kernelParams, nodeParams->extra, 0, &n);
    }
    if (rc == CUDA_SUCCESS)
        rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    fc_ctx_t *cur;
    fc_node_t *n;
    CUresult rc;

    (void)ctx;
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&cur);
    if (rc == CUDA_SUCCESS && !copyParams)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = fc_copy_validate(copyParams);
    if (rc != CUDA_SUCCESS)
        goto out;
    n = fc_node_new(FC_NODE_MEMCPY);
    if (!n) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.copy = *copyParams;
    rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
    fc_ctx_t *cur;
    fc_node_t *n;
    CUresult rc;

    (void)ctx;
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&cur);
    if (rc == CUDA_SUCCESS && !memsetParams)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = fc_memset_validate(memsetParams);
    if (rc != CUDA_SUCCESS)
        goto out;
    n = fc_node_new(FC_NODE_MEMSET);
    if (!n) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.set = *memsetParams;
    rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                    const CUgraphNode *dependencies, size_t numDependencies,
                                    const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    fc_node_t *n;
    CUresult rc;

    if (!nodeParams || !nodeParams->fn)
        return CUDA_ERROR_INVALID_VALUE;
    n = fc_node_new(FC_NODE_HOST);
    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    n->u.host = *nodeParams;
    pthread_mutex_lock(&g_lock);
    rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies, size_t numDependencies)
{
    fc_node_t *n = fc_node_new(FC_NODE_EMPTY);
    CUresult rc;

    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_lock);
    rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The child graph is cloned into the node (cuda.h). */
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies,
                                          size_t numDependencies, CUgraph childGraph)
{
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    /* A graph may not hold itself: hGraph is not childGraph nor in it. */
    if (!fc_graph_lookup(childGraph) || !fc_graph_lookup(hGraph) ||
        fc_graph_in((fc_graph_t *)childGraph, (fc_graph_t *)hGraph, 0)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    n = fc_node_new(FC_NODE_CHILD);
    if (!n) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.child = fc_graph_clone((fc_graph_t *)childGraph);
    if (!n->u.child) {
        free(n);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static fc_node_t *fc_node_find(CUgraphNode h);

/* The node's own graph: changes to it are the node's (cuda.h). */
CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    if (!n || n->type != FC_NODE_CHILD || !phGraph)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *phGraph = (CUgraph)n->u.child;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_event_node(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              CUevent event, fc_node_type_t type)
{
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    if (!fc_list_has(g_events, event)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    n = fc_node_new(type);
    if (!n) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.event = (fc_event_t *)event;
    rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                           const CUgraphNode *dependencies,
                                           size_t numDependencies, CUevent event)
{
    return fc_event_node(phGraphNode, hGraph, dependencies, numDependencies, event,
                         FC_NODE_EVENT_RECORD);
}

CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies,
                                         size_t numDependencies, CUevent event)
{
    return fc_event_node(phGraphNode, hGraph, dependencies, numDependencies, event,
                         FC_NODE_EVENT_WAIT);
}

/* Graph memory: an allocation node's address is fixed here, its range
 * held by the node (and its copies). */
static CUresult fc_alloc_node(int dev, size_t size, fc_node_t **out)
{
    fc_node_t *n = fc_node_new(FC_NODE_MEMALLOC);
    CUresult rc;

    if (!n)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = fc_gmem_new(dev, size, &n->u.alloc.dptr);
    if (rc != CUDA_SUCCESS) {
        free(n);
        return rc;
    }
    n->u.alloc.size = size;
    n->u.alloc.dev = dev;
    *out = n;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    fc_ctx_t *ctx;
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS &&
        (!nodeParams || nodeParams->bytesize == 0 ||
         nodeParams->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
         nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
         nodeParams->poolProps.location.id < 0 || nodeParams->poolProps.location.id >= FC_NDEV ||
         nodeParams->poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = fc_alloc_node(nodeParams->poolProps.location.id, nodeParams->bytesize, &n);
    if (rc == CUDA_SUCCESS) {
        CUdeviceptr d = n->u.alloc.dptr;

        rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
        if (rc == CUDA_SUCCESS)
            nodeParams->dptr = d;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies, size_t numDependencies,
                                       CUdeviceptr dptr)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!fc_gmem_find(dptr))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(n = fc_node_new(FC_NODE_MEMFREE)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        n->u.free_dptr = dptr;
        rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static fc_node_t *fc_node_find(CUgraphNode h);

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
                                              CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    if (!n || n->type != FC_NODE_MEMALLOC || !params_out) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        memset(params_out, 0, sizeof(*params_out));
        params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        params_out->poolProps.location.id = n->u.alloc.dev;
        params_out->bytesize = n->u.alloc.size;
        params_out->dptr = n->u.alloc.dptr;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    if (!n || n->type != FC_NODE_MEMFREE || !dptr_out)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *dptr_out = n->u.free_dptr;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_graph_mem_attr(CUdevice device, CUgraphMem_attribute attr, void *value,
                                  int set)
{
    size_t *v;

    if (device < 0 || device >= FC_NDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        v = &g_gmem_used[device];
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        v = &g_gmem_used_high[device];
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        v = &g_gmem_res[device];
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        v = &g_gmem_res_high[device];
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!set) {
        *(cuuint64_t *)value = *v;
        return CUDA_SUCCESS;
    }
    /* Only the high marks, only to 0 (cuda.h). */
    if ((attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) ||
        *(cuuint64_t *)value != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                              void *value)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_graph_mem_attr(device, attr, value, 0);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                              void *value)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_graph_mem_attr(device, attr, value, 1);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out,
                                                CUgraph hGraph, CUcontext ctx,
                                                unsigned int defaultLaunchValue,
                                                unsigned int flags)
{
    fc_cond_t *c;
    CUresult rc = CUDA_SUCCESS;

    (void)ctx;
    if (!pHandle_out || (flags & ~(unsigned int)CU_GRAPH_COND_ASSIGN_DEFAULT))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (!fc_graph_addable(hGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (!(c = calloc(1, sizeof(*c)))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        c->dflt = defaultLaunchValue;
        c->value = defaultLaunchValue;
        c->flags = flags;
        c->next = g_conds;
        g_conds = c;
        c->graph = (fc_graph_t *)hGraph;
        c->idx = ++c->graph->nconds;
        *pHandle_out = c->idx;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Handle h made on graph g or a graph holding it (g a body); g_lock held. */
static fc_cond_t *fc_cond_find(fc_graph_t *g, CUgraphConditionalHandle h)
{
    for (int depth = 0; g != NULL && depth < 64; g = g->parent, depth++)
        for (fc_cond_t *c = g_conds; c; c = c->next)
            if (c->graph == g && c->idx == h)
                return c;
    return NULL;
}

/* Only conditional nodes, what the backend adds through it. */
CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                const CUgraphNode *dependencies,
                                const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                CUgraphNodeParams *nodeParams)
{
    CUDA_CONDITIONAL_NODE_PARAMS *cp;
    fc_node_t *n;
    fc_cond_t *c;
    CUresult rc = CUDA_SUCCESS;

    if (dependencyData || !nodeParams)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodeParams->type != CU_GRAPH_NODE_TYPE_CONDITIONAL)
        return CUDA_ERROR_NOT_SUPPORTED;
    cp = &nodeParams->conditional;
    pthread_mutex_lock(&g_lock);
    c = fc_graph_addable(hGraph) ? fc_cond_find((fc_graph_t *)hGraph, cp->handle) : NULL;
    if (!c || cp->size == 0 || cp->type > CU_GRAPH_COND_TYPE_SWITCH ||
        (cp->type == CU_GRAPH_COND_TYPE_WHILE && cp->size != 1) ||
        (cp->type == CU_GRAPH_COND_TYPE_IF && cp->size > 2)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    n = fc_node_new(FC_NODE_COND);
    if (!n || !(n->u.cond.bodies = calloc(cp->size, sizeof(*n->u.cond.bodies)))) {
        free(n);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    n->u.cond.cond = c;
    n->u.cond.type = cp->type;
    n->u.cond.size = cp->size;
    n->u.cond.listed = 1;
    for (unsigned int i = 0; i < cp->size; i++) {
        fc_graph_t *b = fc_graph_new();

        if (!b) {
            fc_node_free(n);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        b->body = 1;
        b->parent = (fc_graph_t *)hGraph;
        fc_list_add(&g_graphs, b);
        n->u.cond.bodies[i] = b;
    }
    rc = fc_graph_add_api(phGraphNode, hGraph, dependencies, numDependencies, n);
    /* The node's own array (cuda.h: CUDA-owned, valid for its life). */
    if (rc == CUDA_SUCCESS)
        cp->phGraph_out = (CUgraph *)n->u.cond.bodies;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
    fc_graph_t *g;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!phGraphClone || !fc_graph_lookup(originalGraph)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    g = fc_graph_clone((fc_graph_t *)originalGraph);
    if (!g) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    fc_list_add(&g_graphs, g);
    *phGraphClone = (CUgraph)g;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Is want g, or the graph of a child graph node in g, at any depth? */
static int fc_graph_in(const fc_graph_t *g, const fc_graph_t *want, int depth)
{
    if (g == want)
        return 1;
    if (depth > 64)
        return 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->type == FC_NODE_CHILD && fc_graph_in(g->nodes[i]->u.child, want, depth + 1))
            return 1;
    return 0;
}

/* Also answers for the graph a capture is building (see GetCaptureInfo)
 * and a child graph node's own (cuGraphChildGraphNodeGetGraph). */
static fc_graph_t *fc_graph_lookup(CUgraph h)
{
    for (fc_obj_t *o = g_graphs; o; o = o->next)
        if (fc_graph_in((fc_graph_t *)o, (fc_graph_t *)h, 0))
            return (fc_graph_t *)h;
    for (fc_obj_t *o = g_caps; o; o = o->next)
        if (((fc_cap_t *)o)->graph && fc_graph_in(((fc_cap_t *)o)->graph, (fc_graph_t *)h, 0))
            return (fc_graph_t *)h;
    return NULL;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    fc_graph_t *g;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    g = fc_graph_lookup(hGraph);
    if (!g || !numNodes) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (nodes) {
        size_t n = *numNodes < g->n ? *numNodes : g->n;

        for (size_t i = 0; i < n; i++)
            nodes[i] = (CUgraphNode)g->nodes[i];
        /* As CUDA: unused slots are NULL, the count is what was written. */
        for (size_t i = n; i < *numNodes; i++)
            nodes[i] = NULL;
        *numNodes = n;
    } else {
        *numNodes = g->n;
    }
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Called inside the stand-in too (cuGraphInstantiateWithParams): the
 * name may resolve to the loopback guest library's. */
static CUresult fc_instantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                               unsigned long long flags)
{
    fc_exec_t *x;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!phGraphExec || !fc_graph_lookup(hGraph) ||
        (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY))) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    x = calloc(1, sizeof(*x));
    if (!x || !(x->graph = fc_graph_clone((fc_graph_t *)hGraph))) {
        free(x);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    x->flags = flags;
    fc_list_add(&g_execs, x);
    g_graph_instantiations++;
    *phGraphExec = (CUgraphExec)x;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * Runs the nodes in the order they were added.  On a capturing stream
 * the graph's nodes are appended to the capture instead (CUDA would add
 * one child-graph node): its roots depend on the stream's dependencies,
 * and the stream then depends on all of its nodes.
 */
CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    fc_exec_t *x = (fc_exec_t *)hGraphExec;
    uint64_t x_id;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && !fc_list_has(g_execs, x))
        rc = CUDA_ERROR_INVALID_HANDLE;
    if (rc != CUDA_SUCCESS)
        goto out;
    g_graph_launches++;
    if (s->cap) {
        fc_graph_t *cg = s->cap->graph;
        size_t first = cg->n;

        if (s->cap->invalidated) {
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            goto out;
        }
        rc = fc_graph_append(cg, x->graph, s->deps, s->ndeps);
        if (rc == CUDA_SUCCESS && cg->n > first) {
            free(s->deps);
            s->deps = NULL;
            s->ndeps = 0;
            rc = fc_deps_merge(s, &cg->nodes[first], cg->n - first);
        }
        goto out;
    }
    x_id = x->hdr.id;
    t_cond_graph = x->graph;
    for (size_t i = 0; i < x->graph->n && rc == CUDA_SUCCESS; i++) {
        rc = fc_node_exec(ctx, x->graph->nodes[i]);
        /* g_lock was dropped if the node ran a twin or a host function. */
        if (!fc_list_has(g_execs, x) || x->hdr.id != x_id)
            break;
    }
    t_cond_graph = NULL;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The upload flag is cuGraphInstantiateWithParams' only: driver 580
 * refuses it here (measured on the H200). */
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                    unsigned long long flags)
{
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
        return CUDA_ERROR_INVALID_VALUE;
    return fc_instantiate(phGraphExec, hGraph, flags);
}

/* As cuGraphInstantiate; an upload has nothing to do here (no device
 * memory to put the graph in), but its stream must be one. */
CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    if (!instantiateParams)
        return CUDA_ERROR_INVALID_VALUE;
    instantiateParams->hErrNode_out = NULL;
    instantiateParams->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
    if (instantiateParams->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
        pthread_mutex_lock(&g_lock);
        rc = fc_stream_get(instantiateParams->hUploadStream, &ctx, &s);
        pthread_mutex_unlock(&g_lock);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    rc = fc_instantiate(phGraphExec, hGraph, instantiateParams->flags);
    if (rc == CUDA_SUCCESS)
        instantiateParams->result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS;
    return rc;
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    fc_exec_t *x = (fc_exec_t *)hGraphExec;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!fc_list_has(g_execs, x)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        fc_list_del(&g_execs, x);
        fc_graph_free(x->graph);
        free(x);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/*
 * Whole-graph update: the new graph must have the exec's topology (as
 * many nodes, each of the same type with the same dependencies); the
 * exec then runs a copy of it.  Kernel nodes may change function, shape
 * and parameters (CUDA forbids a few changes, none the stand-in models).
 */
CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                   CUgraphExecUpdateResultInfo *resultInfo)
{
    fc_exec_t *x = (fc_exec_t *)hGraphExec;
    fc_graph_t *g = (fc_graph_t *)hGraph, *c;
    CUgraphExecUpdateResult res = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!resultInfo || !fc_list_has(g_execs, x) || !fc_list_has(g_graphs, g)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    memset(resultInfo, 0, sizeof(*resultInfo));
    /* VCU_FAKECUDA_GRAPH_UPDATE=fail: every update refused, as the driver
     * refuses one it cannot make (the unit tests' back-off case). */
    if (getenv("VCU_FAKECUDA_GRAPH_UPDATE") != NULL &&
        strcmp(getenv("VCU_FAKECUDA_GRAPH_UPDATE"), "fail") == 0)
        res = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
    else if (g->n != x->graph->n)
        res = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    for (size_t i = 0; res == CU_GRAPH_EXEC_UPDATE_SUCCESS && i < g->n; i++) {
        const fc_node_t *a = g->nodes[i], *b = x->graph->nodes[i];

        if (a->type != b->type)
            res = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
        else if (a->ndeps != b->ndeps ||
                 (a->ndeps && memcmp(a->deps, b->deps, a->ndeps * sizeof(*a->deps)) != 0))
            res = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    }
    if (res != CU_GRAPH_EXEC_UPDATE_SUCCESS) {
        resultInfo->result = res;
        rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
        goto out;
    }
    if (!(c = fc_graph_clone(g))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    /* A node's enabled state is the exec's (cuda.h). */
    for (size_t i = 0; i < c->n; i++)
        c->nodes[i]->disabled = x->graph->nodes[i]->disabled;
    fc_graph_free(x->graph);
    x->graph = c;
    g_graph_updates++;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* TEST DOUBLE ONLY, for the unit tests: how many graphs were launched,
 * instantiated and updated in this process. */
__attribute__((visibility("default"))) void cuFakeGraphCounts(unsigned long long out[3])
{
    pthread_mutex_lock(&g_lock);
    out[0] = g_graph_launches;
    out[1] = g_graph_instantiations;
    out[2] = g_graph_updates;
    pthread_mutex_unlock(&g_lock);
}

CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
    fc_exec_t *x = (fc_exec_t *)hGraphExec;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!flags || !fc_list_has(g_execs, x))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = x->flags;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Stream attributes, the L2 persisting cache, stream memory operations */

/*
 * The attributes cuda.h says are valid for streams, checked as the
 * driver documents them: an access policy window of at most the
 * device's CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE bytes, a hit
 * ratio in [0, 1], a miss property that is not persisting.
 */
static CUresult fc_stream_attr_check(CUstreamAttrID attr, const CUstreamAttrValue *v)
{
    const CUaccessPolicyWindow *w = &v->accessPolicyWindow;

    switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        if (w->num_bytes > (size_t)134213632 || !(w->hitRatio >= 0.0f && w->hitRatio <= 1.0f) ||
            (unsigned int)w->hitProp > CU_ACCESS_PROPERTY_PERSISTING ||
            (unsigned int)w->missProp > CU_ACCESS_PROPERTY_STREAMING)
            return CUDA_ERROR_INVALID_VALUE;
        return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
        return v->syncPolicy >= CU_SYNC_POLICY_AUTO && v->syncPolicy <= CU_SYNC_POLICY_BLOCKING_SYNC
                   ? CUDA_SUCCESS
                   : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        return (unsigned int)v->memSyncDomain <= CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE ? CUDA_SUCCESS
                                                                                 : CUDA_ERROR_INVALID_VALUE;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult CUDAAPI cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS && (!value_out || (attr != CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW &&
                                              attr != CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY &&
                                              attr != CU_LAUNCH_ATTRIBUTE_PRIORITY &&
                                              attr != CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP &&
                                              attr != CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        *value_out = s->attrs[attr];
        if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY)
            value_out->priority = s->priority;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(hStream, &ctx, &s);
    if (rc == CUDA_SUCCESS)
        rc = value ? fc_stream_attr_check(attr, value) : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY)
            s->priority = value->priority;
        else
            s->attrs[attr] = *value;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamCopyAttributes(CUstream dst, CUstream src)
{
    fc_ctx_t *cd, *cs;
    fc_stream_t *d, *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_get(dst, &cd, &d);
    if (rc == CUDA_SUCCESS)
        rc = fc_stream_get(src, &cs, &s);
    if (rc == CUDA_SUCCESS && cd != cs)
        rc = CUDA_ERROR_INVALID_CONTEXT;
    /* Every attribute, the priority too (NVIDIA's driver 580, measured). */
    if (rc == CUDA_SUCCESS) {
        memcpy(d->attrs, s->attrs, sizeof(d->attrs));
        d->priority = s->priority;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* TEST DOUBLE: a link of one image.  The stand-in cannot link code: a
 * link whose inputs hold exactly one cubin, fatbin or PTX image completes
 * to a copy of that image (which cuModuleLoadData takes as it would the
 * input); anything else fails as the driver fails a link it cannot
 * resolve, with a message in the error log. */
typedef struct fc_link_s {
    void *image;
    size_t len;
    int n;
    char *errlog;
    size_t errlog_size;
} fc_link_t;

CUresult CUDAAPI cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options,
                                 void **optionValues, CUlinkState *stateOut)
{
    fc_link_t *l;

    if (!stateOut || (numOptions && (!options || !optionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    l = calloc(1, sizeof(*l));
    if (!l)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned int i = 0; i < numOptions; i++) {
        if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
            l->errlog = optionValues[i];
        else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            l->errlog_size = (size_t)(uintptr_t)optionValues[i];
        else if ((unsigned int)options[i] >= CU_JIT_NUM_OPTIONS) {
            free(l);
            return CUDA_ERROR_INVALID_VALUE;
        }
    }
    *stateOut = (CUlinkState)l;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
                                  const char *name, unsigned int numOptions, CUjit_option *options,
                                  void **optionValues)
{
    fc_link_t *l = (fc_link_t *)state;

    (void)name;
    (void)options;
    (void)optionValues;
    if (!l || !data || size == 0 || numOptions || (unsigned int)type >= CU_JIT_NUM_INPUT_TYPES)
        return CUDA_ERROR_INVALID_VALUE;
    if (type == CU_JIT_INPUT_CUBIN || type == CU_JIT_INPUT_FATBINARY || type == CU_JIT_INPUT_PTX) {
        void *c = malloc(size);

        if (!c)
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(c, data, size);
        free(l->image);
        l->image = c;
        l->len = size;
        l->n++;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    fc_link_t *l = (fc_link_t *)state;

    if (!l || !cubinOut || !sizeOut)
        return CUDA_ERROR_INVALID_VALUE;
    if (l->n != 1) {
        if (l->errlog && l->errlog_size)
            snprintf(l->errlog, l->errlog_size, "stand-in: cannot link %d images", l->n);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *cubinOut = l->image;
    *sizeOut = l->len;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkDestroy(CUlinkState state)
{
    fc_link_t *l = (fc_link_t *)state;

    if (!l)
        return CUDA_ERROR_INVALID_VALUE;
    free(l->image);
    free(l);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxResetPersistingL2Cache(void)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get(hfunc, &f);
    if (rc == CUDA_SUCCESS && (unsigned int)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The two devices may reach each other (cuDeviceCanAccessPeer, peer
 * access): access supported; no link to rank, no native atomics, no
 * arrays over it. */
CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                         CUdevice dstDevice)
{
    if (!value || (unsigned int)attrib > CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED)
        return CUDA_ERROR_INVALID_VALUE;
    if (srcDevice < 0 || srcDevice >= FC_NDEV || dstDevice < 0 || dstDevice >= FC_NDEV ||
        srcDevice == dstDevice)
        return CUDA_ERROR_INVALID_DEVICE;
    *value = attrib == CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED;
    return CUDA_SUCCESS;
}

/* The widest 1D texture over linear memory, in elements: the stand-in's
 * MAXIMUM_TEXTURE1D_LINEAR_WIDTH, for the channel counts a texture has. */
CUresult CUDAAPI cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements,
                                                    CUarray_format format, unsigned numChannels,
                                                    CUdevice dev)
{
    (void)format;
    if (!maxWidthInElements || (numChannels != 1 && numChannels != 2 && numChannels != 4))
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= FC_NDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    *maxWidthInElements = (size_t)1 << 28;
    return CUDA_SUCCESS;
}

/* A stream memory operation on an allocation (the stream's work runs at
 * once); n bytes at addr, naturally aligned. */
static CUresult fc_memop(CUstream stream, CUdeviceptr addr, size_t n, unsigned int flags,
                         unsigned int maxflag, void **p)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc = fc_stream_work(stream, &ctx, &s);

    if (rc == CUDA_SUCCESS && (flags > maxflag || addr % n))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = fc_mem_check((uintptr_t)addr, n);
    if (rc == CUDA_SUCCESS && s->cap)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    *p = (void *)(uintptr_t)addr;
    return rc;
}

/* A write of n (4 or 8) bytes of value. */
static CUresult fc_write_value(CUstream stream, CUdeviceptr addr, uint64_t value, size_t n,
                               unsigned int flags)
{
    uint32_t v32 = (uint32_t)value;
    void *p;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_memop(stream, addr, n, flags, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER, &p);
    if (rc == CUDA_SUCCESS)
        memcpy(p, n == 4 ? (const void *)&v32 : (const void *)&value, n);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return fc_write_value(stream, addr, value, 4, flags);
}

CUresult CUDAAPI cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return fc_write_value(stream, addr, value, 8, flags);
}

/* Whether a wait's condition holds (cuda.h's CUstreamWaitValue_flags). */
static int fc_wait_holds(uint64_t have, uint64_t want, unsigned int flags, uint64_t mask)
{
    switch (flags & 3u) {
    case CU_STREAM_WAIT_VALUE_GEQ:
        return have >= want;
    case CU_STREAM_WAIT_VALUE_EQ:
        return have == want;
    case CU_STREAM_WAIT_VALUE_AND:
        return (have & want) != 0;
    default:
        return (~(have | want) & mask) != 0;
    }
}

/*
 * The stand-in runs a stream's work at once, so a wait whose condition
 * does not hold yet would wait forever: it fails with
 * CUDA_ERROR_NOT_SUPPORTED instead (tests wait for values already
 * written).
 */
/* A wait on n (4 or 8) bytes. */
static CUresult fc_wait_value(CUstream stream, CUdeviceptr addr, uint64_t value, size_t n,
                              unsigned int flags)
{
    uint64_t have = 0;
    uint32_t h32;
    void *p;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_memop(stream, addr, n, flags & ~(unsigned int)CU_STREAM_WAIT_VALUE_FLUSH,
                  CU_STREAM_WAIT_VALUE_NOR, &p);
    if (rc == CUDA_SUCCESS) {
        if (n == 4) {
            memcpy(&h32, p, 4);
            have = h32;
        } else {
            memcpy(&have, p, 8);
        }
        if (!fc_wait_holds(have, value, flags, n == 4 ? UINT32_MAX : UINT64_MAX))
            rc = CUDA_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return fc_wait_value(stream, addr, value, 4, flags);
}

CUresult CUDAAPI cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return fc_wait_value(stream, addr, value, 8, flags);
}

/*
 * A batch: each operation as its single call does it, in order; the
 * first failure stops the batch (the stand-in runs a stream's work at
 * once).  Operations the v2 API does not have, or flags it does not
 * define for them: CUDA_ERROR_INVALID_VALUE, as are more than 255.
 */
CUresult CUDAAPI cuStreamBatchMemOp(CUstream stream, unsigned int count,
                                    CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
    fc_ctx_t *ctx;
    fc_stream_t *s;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_stream_work(stream, &ctx, &s);
    pthread_mutex_unlock(&g_lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (flags != 0 || count >= 256 || (count > 0 && !paramArray))
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned int i = 0; i < count && rc == CUDA_SUCCESS; i++) {
        const CUstreamBatchMemOpParams *p = &paramArray[i];

        switch (p->operation) {
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
            rc = fc_wait_value(stream, p->waitValue.address, p->waitValue.value, 4,
                               p->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WAIT_VALUE_64:
            rc = fc_wait_value(stream, p->waitValue.address, p->waitValue.value64, 8,
                               p->waitValue.flags);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
            rc = p->writeValue.flags != 0
                     ? CUDA_ERROR_INVALID_VALUE
                     : fc_write_value(stream, p->writeValue.address, p->writeValue.value, 4, 0);
            break;
        case CU_STREAM_MEM_OP_WRITE_VALUE_64:
            rc = p->writeValue.flags != 0
                     ? CUDA_ERROR_INVALID_VALUE
                     : fc_write_value(stream, p->writeValue.address, p->writeValue.value64, 8, 0);
            break;
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
            rc = p->flushRemoteWrites.flags != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
            break;
        case CU_STREAM_MEM_OP_BARRIER:
            rc = p->memoryBarrier.flags > CU_STREAM_MEMORY_BARRIER_TYPE_GPU
                     ? CUDA_ERROR_INVALID_VALUE
                     : CUDA_SUCCESS;
            break;
        default:
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
    }
    return rc;
}

/* ------------------------------------------------------------------ */
/* Graph node queries and kernel node attributes                       */

/* A node of a live graph, or NULL (the handle is compared, never
 * followed, before it is found). */
static int fc_graph_has_node_in(const fc_graph_t *g, const fc_node_t *h, int depth)
{
    if (fc_graph_has_node(g, h))
        return 1;
    if (depth > 64)
        return 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->nodes[i]->type == FC_NODE_CHILD &&
            fc_graph_has_node_in(g->nodes[i]->u.child, h, depth + 1))
            return 1;
    return 0;
}

static fc_node_t *fc_node_find(CUgraphNode h)
{
    for (fc_obj_t *o = g_graphs; o; o = o->next)
        if (fc_graph_has_node_in((fc_graph_t *)o, (const fc_node_t *)h, 0))
            return (fc_node_t *)h;
    return NULL;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    static const CUgraphNodeType types[] = {
        [FC_NODE_KERNEL] = CU_GRAPH_NODE_TYPE_KERNEL, [FC_NODE_MEMCPY] = CU_GRAPH_NODE_TYPE_MEMCPY,
        [FC_NODE_MEMSET] = CU_GRAPH_NODE_TYPE_MEMSET, [FC_NODE_HOST] = CU_GRAPH_NODE_TYPE_HOST,
        [FC_NODE_EMPTY] = CU_GRAPH_NODE_TYPE_EMPTY, [FC_NODE_CHILD] = CU_GRAPH_NODE_TYPE_GRAPH,
        [FC_NODE_MEMALLOC] = CU_GRAPH_NODE_TYPE_MEM_ALLOC,
        [FC_NODE_MEMFREE] = CU_GRAPH_NODE_TYPE_MEM_FREE,
        [FC_NODE_COND] = CU_GRAPH_NODE_TYPE_CONDITIONAL,
        [FC_NODE_EVENT_RECORD] = CU_GRAPH_NODE_TYPE_EVENT_RECORD,
        [FC_NODE_EVENT_WAIT] = CU_GRAPH_NODE_TYPE_WAIT_EVENT,
    };
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    if (!n || !type)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *type = types[n->type];
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The attributes cuda.h says are valid for graph nodes. */
static CUresult fc_node_attr_check(CUkernelNodeAttrID attr, const CUkernelNodeAttrValue *v)
{
    switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        return fc_stream_attr_check(attr, v);
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static fc_node_t *fc_kernel_node_find(CUgraphNode h)
{
    fc_node_t *n = fc_node_find(h);

    return n && n->type == FC_NODE_KERNEL ? n : NULL;
}

CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               CUkernelNodeAttrValue *value_out)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_kernel_node_find(hNode);
    if (!n || !value_out || (unsigned int)attr > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING ||
        fc_node_attr_check(attr, &n->attrs[attr]) == CUDA_ERROR_INVALID_VALUE)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *value_out = n->attrs[attr];
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
                                               const CUkernelNodeAttrValue *value)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_kernel_node_find(hNode);
    if (!n || !value || (unsigned int)attr > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        rc = fc_node_attr_check(attr, value);
    if (rc == CUDA_SUCCESS)
        n->attrs[attr] = *value;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
    fc_node_t *d, *s;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    d = fc_kernel_node_find(dst);
    s = fc_kernel_node_find(src);
    if (!d || !s)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        memcpy(d->attrs, s->attrs, sizeof(d->attrs));
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Graph topology, node parameters and executable graph updates        */

/* The node at index i of an exec made from the graph of n (nodes keep
 * their indices in the exec's copy), of n's type; NULL if none. */
static fc_node_t *fc_exec_node(CUgraphExec hExec, CUgraphNode hNode)
{
    fc_exec_t *x = (fc_exec_t *)hExec;
    fc_node_t *n = fc_node_find(hNode);

    if (!n || !fc_list_has(g_execs, x) || n->index >= x->graph->n ||
        x->graph->nodes[n->index]->type != n->type)
        return NULL;
    return x->graph->nodes[n->index];
}

/* Lists into out[] (room for *num; NULL: count only) the nodes for which
 * keep(g, i, arg) holds; *num is then how many there are (NULL-filled
 * past them). */
static CUresult fc_node_list(const fc_graph_t *g, int (*keep)(const fc_graph_t *, size_t, size_t),
                             size_t arg, CUgraphNode *out, size_t *num)
{
    size_t k = 0;

    if (!num)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < g->n; i++) {
        if (!keep(g, i, arg))
            continue;
        if (out && k < *num)
            out[k] = (CUgraphNode)g->nodes[i];
        k++;
    }
    if (out) {
        for (size_t i = k; i < *num; i++)
            out[i] = NULL;
        if (k > *num)
            k = *num;
    }
    *num = k;
    return CUDA_SUCCESS;
}

static int fc_is_root(const fc_graph_t *g, size_t i, size_t arg)
{
    (void)arg;
    return g->nodes[i]->ndeps == 0;
}

static int fc_depends_on(const fc_graph_t *g, size_t i, size_t arg)
{
    for (size_t d = 0; d < g->nodes[i]->ndeps; d++)
        if (g->nodes[i]->deps[d] == arg)
            return 1;
    return 0;
}

static int fc_is_dep_of(const fc_graph_t *g, size_t i, size_t arg)
{
    return fc_depends_on(g, arg, i);
}

CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
    fc_graph_t *g;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    g = fc_graph_lookup(hGraph);
    rc = g ? fc_node_list(g, fc_is_root, 0, rootNodes, numRootNodes) : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static void fc_edge_unpack(uint32_t v, CUgraphEdgeData *e)
{
    memset(e, 0, sizeof(*e));
    e->from_port = (unsigned char)v;
    e->to_port = (unsigned char)(v >> 8);
    e->type = (unsigned char)(v >> 16);
}

/* Node b's edge from node index fi: its data, packed. */
static uint32_t fc_edge_get(const fc_node_t *b, size_t fi)
{
    for (size_t d = 0; b->dep_data && d < b->ndeps; d++)
        if (b->deps[d] == fi)
            return b->dep_data[d];
    return 0;
}

/* The data of the edges listed in out[0..n-1]: from each to node n
 * (into, 1) or from n to each.  With no d to take it, edges with data
 * other than the default make the listing CUDA_ERROR_LOSSY_QUERY, as the
 * driver does. */
static CUresult fc_edge_data_list(CUgraphEdgeData *d, const fc_node_t *n, CUgraphNode *out,
                                  size_t k, int into)
{
    for (size_t i = 0; out && i < k; i++) {
        const fc_node_t *o = (const fc_node_t *)out[i];
        uint32_t v = into ? fc_edge_get(n, o->index) : fc_edge_get(o, n->index);

        if (d)
            fc_edge_unpack(v, &d[i]);
        else if (v != 0)
            return CUDA_ERROR_LOSSY_QUERY;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                            CUgraphEdgeData *edgeData, size_t *numDependencies)
{
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    rc = n ? fc_node_list(n->graph, fc_is_dep_of, n->index, dependencies, numDependencies)
           : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = fc_edge_data_list(edgeData, n, dependencies, *numDependencies, 1);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
                                              CUgraphEdgeData *edgeData,
                                              size_t *numDependentNodes)
{
    fc_node_t *n;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    rc = n ? fc_node_list(n->graph, fc_depends_on, n->index, dependentNodes, numDependentNodes)
           : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = fc_edge_data_list(edgeData, n, dependentNodes, *numDependentNodes, 0);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
                                 CUgraphEdgeData *edgeData, size_t *numEdges)
{
    fc_graph_t *g;
    size_t k = 0;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    g = fc_graph_lookup(hGraph);
    if (!g || !numEdges || (!from) != (!to)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < g->n; i++)
        for (size_t d = 0; d < g->nodes[i]->ndeps; d++, k++)
            if (from && k < *numEdges) {
                uint32_t v = g->nodes[i]->dep_data ? g->nodes[i]->dep_data[d] : 0;

                from[k] = (CUgraphNode)g->nodes[g->nodes[i]->deps[d]];
                to[k] = (CUgraphNode)g->nodes[i];
                if (edgeData)
                    fc_edge_unpack(v, &edgeData[k]);
                else if (v != 0)
                    rc = CUDA_ERROR_LOSSY_QUERY;
            }
    if (from) {
        for (size_t i = k; i < *numEdges; i++)
            from[i] = to[i] = NULL;
        if (k > *numEdges)
            k = *numEdges;
    }
    *numEdges = k;
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* A clone keeps its original's nodes at the same indices. */
CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode,
                                        CUgraph hClonedGraph)
{
    fc_node_t *n;
    fc_graph_t *c;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hOriginalNode);
    c = fc_graph_lookup(hClonedGraph);
    if (!phNode || !n || !c || c == n->graph || n->index >= c->n ||
        c->nodes[n->index]->type != n->type)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *phNode = (CUgraphNode)c->nodes[n->index];
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Edges between nodes of g, each as (from, to) indices; -1 where a node
 * is not g's. */
static int fc_edge_idx(fc_graph_t *g, CUgraphNode f, CUgraphNode t, size_t *fi, size_t *ti)
{
    fc_node_t *a = (fc_node_t *)f, *b = (fc_node_t *)t;

    if (!f || !t || f == t || !fc_graph_has_node(g, a) || !fc_graph_has_node(g, b))
        return -1;
    *fi = a->index;
    *ti = b->index;
    return 0;
}

/* Edge data as the driver takes it, packed (fc_node_t.dep_data), or -1:
 * reserved bytes 0, a known type and ports, and anything but the default
 * only from a kernel node to a kernel node. */
static long fc_edge_pack(const CUgraphEdgeData *e, const fc_node_t *a, const fc_node_t *b)
{
    static const unsigned char zero[sizeof(e->reserved)];

    if (!e)
        return 0;
    if (memcmp(e->reserved, zero, sizeof(zero)) != 0 ||
        e->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ||
        e->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER || e->to_port != 0)
        return -1;
    if ((e->type != 0 || e->from_port != 0) &&
        (a->type != FC_NODE_KERNEL || b->type != FC_NODE_KERNEL))
        return -1;
    return (long)(e->from_port | (uint32_t)e->to_port << 8 | (uint32_t)e->type << 16);
}

/* The stand-in runs nodes in the order they were added: an edge must go
 * from an older node to a newer one (else CUDA_ERROR_NOT_SUPPORTED). */
CUresult CUDAAPI cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from,
                                        const CUgraphNode *to, const CUgraphEdgeData *edgeData,
                                        size_t numDependencies)
{
    fc_graph_t *g;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    g = fc_graph_lookup(hGraph);
    if (!g || (numDependencies && (!from || !to)))
        rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < numDependencies; i++) {
        size_t fi, ti, *nd;
        uint32_t *dd;
        fc_node_t *b;
        long v;

        if (fc_edge_idx(g, from[i], to[i], &fi, &ti) != 0 ||
            (v = fc_edge_pack(edgeData ? &edgeData[i] : NULL, g->nodes[fi], g->nodes[ti])) < 0) {
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if (fi > ti) {
            rc = CUDA_ERROR_NOT_SUPPORTED;
            break;
        }
        b = g->nodes[ti];
        if (fc_depends_on(g, ti, fi)) {
            rc = CUDA_ERROR_INVALID_VALUE;      /* already there */
            break;
        }
        nd = realloc(b->deps, (b->ndeps + 1) * sizeof(*nd));
        if (!nd) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        b->deps = nd;
        if (v != 0 || b->dep_data) {
            dd = b->dep_data ? realloc(b->dep_data, (b->ndeps + 1) * sizeof(*dd))
                             : calloc(b->ndeps + 1, sizeof(*dd));
            if (!dd) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            dd[b->ndeps] = (uint32_t)v;
            b->dep_data = dd;
        }
        nd[b->ndeps++] = fi;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static void fc_dep_drop(fc_node_t *b, size_t fi)
{
    for (size_t d = 0; d < b->ndeps; d++)
        if (b->deps[d] == fi) {
            b->deps[d] = b->deps[--b->ndeps];
            if (b->dep_data)
                b->dep_data[d] = b->dep_data[b->ndeps];
            return;
        }
}

CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from,
                                           const CUgraphNode *to,
                                           const CUgraphEdgeData *edgeData,
                                           size_t numDependencies)
{
    fc_graph_t *g;
    CUresult rc = CUDA_SUCCESS;

    (void)edgeData;
    pthread_mutex_lock(&g_lock);
    g = fc_list_has(g_graphs, hGraph) ? (fc_graph_t *)hGraph : NULL;
    if (!g || (numDependencies && (!from || !to)))
        rc = CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; rc == CUDA_SUCCESS && i < numDependencies; i++) {
        size_t fi, ti;

        if (fc_edge_idx(g, from[i], to[i], &fi, &ti) != 0 || !fc_depends_on(g, ti, fi))
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            fc_dep_drop(g->nodes[ti], fi);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* The node goes with its edges; the later nodes move down one index. */
CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode hNode)
{
    fc_node_t *n;
    fc_graph_t *g;
    size_t at;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    if (!n) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    g = n->graph;
    at = n->index;
    for (size_t i = at + 1; i < g->n; i++) {
        fc_node_t *b = g->nodes[i];

        fc_dep_drop(b, at);
        for (size_t d = 0; d < b->ndeps; d++)
            if (b->deps[d] > at)
                b->deps[d]--;
        b->index = i - 1;
        g->nodes[i - 1] = b;
    }
    g->n--;
    fc_node_free(n);
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Kernel node parameters into node n (of a graph or an exec). */
static CUresult fc_kernel_set(fc_node_t *n, const CUDA_KERNEL_NODE_PARAMS *p)
{
    fc_node_t *k;
    CUresult rc;

    if (!n || n->type != FC_NODE_KERNEL || !p || !p->func)
        return CUDA_ERROR_INVALID_VALUE;
    {
        const unsigned int grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
        const unsigned int block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };

        rc = fc_kernel_node(p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra,
                            0, &k);
    }
    if (rc != CUDA_SUCCESS)
        return rc;
    free(n->u.kernel.params);
    n->u.kernel = k->u.kernel;
    free(k);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode,
                                            const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_kernel_set(fc_node_find(hNode), nodeParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_kernel_set(fc_exec_node(hGraphExec, hNode), nodeParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_copy_set(fc_node_t *n, const CUDA_MEMCPY3D *p)
{
    CUresult rc;

    if (!n || n->type != FC_NODE_MEMCPY || !p)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_copy_validate(p);
    if (rc == CUDA_SUCCESS)
        n->u.copy = *p;
    return rc;
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_copy_set(fc_node_find(hNode), nodeParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
    CUresult rc;

    (void)ctx;
    pthread_mutex_lock(&g_lock);
    rc = fc_copy_set(fc_exec_node(hGraphExec, hNode), copyParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_memset_set(fc_node_t *n, const CUDA_MEMSET_NODE_PARAMS *p)
{
    CUresult rc;

    if (!n || n->type != FC_NODE_MEMSET || !p)
        return CUDA_ERROR_INVALID_VALUE;
    rc = fc_memset_validate(p);
    if (rc == CUDA_SUCCESS)
        n->u.set = *p;
    return rc;
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode hNode,
                                            const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_memset_set(fc_node_find(hNode), nodeParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                                CUcontext ctx)
{
    CUresult rc;

    (void)ctx;
    pthread_mutex_lock(&g_lock);
    rc = fc_memset_set(fc_exec_node(hGraphExec, hNode), memsetParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_host_set(fc_node_t *n, const CUDA_HOST_NODE_PARAMS *p)
{
    if (!n || n->type != FC_NODE_HOST || !p || !p->fn)
        return CUDA_ERROR_INVALID_VALUE;
    n->u.host = *p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_host_set(fc_node_find(hNode), nodeParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                              const CUDA_HOST_NODE_PARAMS *nodeParams)
{
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_host_set(fc_exec_node(hGraphExec, hNode), nodeParams);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static CUresult fc_event_get(CUgraphNode hNode, fc_node_type_t type, CUevent *out)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_node_find(hNode);
    if (!n || n->type != type || !out)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *out = (CUevent)n->u.event;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* An event node's event, in its graph (hExec NULL) or an exec's copy. */
static CUresult fc_event_set(CUgraphExec hExec, CUgraphNode hNode, fc_node_type_t type,
                             CUevent event)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = hExec ? fc_exec_node(hExec, hNode) : fc_node_find(hNode);
    if (!n || n->type != type || !fc_list_has(g_events, event))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        n->u.event = (fc_event_t *)event;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return fc_event_get(hNode, FC_NODE_EVENT_RECORD, event_out);
}

CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
    return fc_event_get(hNode, FC_NODE_EVENT_WAIT, event_out);
}

CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return fc_event_set(NULL, hNode, FC_NODE_EVENT_RECORD, event);
}

CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
    return fc_event_set(NULL, hNode, FC_NODE_EVENT_WAIT, event);
}

CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUevent event)
{
    return hGraphExec ? fc_event_set(hGraphExec, hNode, FC_NODE_EVENT_RECORD, event)
                      : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  CUevent event)
{
    return hGraphExec ? fc_event_set(hGraphExec, hNode, FC_NODE_EVENT_WAIT, event)
                      : CUDA_ERROR_INVALID_VALUE;
}

/* Same shape: as many nodes, each of the same type and dependencies. */
static int fc_graph_same_shape(const fc_graph_t *a, const fc_graph_t *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        const fc_node_t *x = a->nodes[i], *y = b->nodes[i];

        if (x->type != y->type || x->ndeps != y->ndeps ||
            (x->ndeps && memcmp(x->deps, y->deps, x->ndeps * sizeof(*x->deps)) != 0))
            return 0;
    }
    return 1;
}

/* The exec's copy of a child graph node runs a copy of childGraph, whose
 * shape must be the node's graph's (cuda.h). */
CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                    CUgraph childGraph)
{
    fc_node_t *n;
    fc_graph_t *c = NULL;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_exec_node(hGraphExec, hNode);
    if (!n || n->type != FC_NODE_CHILD || !fc_graph_lookup(childGraph) ||
        !fc_graph_same_shape(n->u.child, (fc_graph_t *)childGraph))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!(c = fc_graph_clone((fc_graph_t *)childGraph)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (c) {
        fc_graph_free(n->u.child);
        n->u.child = c;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ---- user objects ---- */

CUresult CUDAAPI cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
                                    unsigned int initialRefcount, unsigned int flags)
{
    fc_uobj_t *o;

    if (!object_out || !destroy || initialRefcount == 0 || initialRefcount > INT_MAX ||
        flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    o = calloc(1, sizeof(*o));
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->refs = initialRefcount;
    o->ptr = ptr;
    o->destroy = destroy;
    pthread_mutex_lock(&g_lock);
    fc_list_add(&g_uobjs, o);
    pthread_mutex_unlock(&g_lock);
    *object_out = (CUuserObject)o;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuUserObjectRetain(CUuserObject object, unsigned int count)
{
    fc_uobj_t *o = (fc_uobj_t *)object;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!fc_list_has(g_uobjs, o) || count == 0 || count > INT_MAX - o->refs)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        o->refs += count;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Releasing more than there are is undefined in CUDA: refused here. */
CUresult CUDAAPI cuUserObjectRelease(CUuserObject object, unsigned int count)
{
    fc_uobj_t *o = (fc_uobj_t *)object;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    if (!fc_list_has(g_uobjs, o) || count == 0 || count > o->refs)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        fc_uobj_unref(o, count);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static fc_uref_t *fc_uref_find(fc_graph_t *g, fc_uobj_t *o)
{
    for (size_t i = 0; i < g->nurefs; i++)
        if (g->urefs[i].obj == o)
            return &g->urefs[i];
    return NULL;
}

CUresult CUDAAPI cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count,
                                         unsigned int flags)
{
    fc_uobj_t *o = (fc_uobj_t *)object;
    fc_graph_t *g;
    fc_uref_t *r;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    g = fc_graph_lookup(graph);
    if (!g || !fc_list_has(g_uobjs, o) || count == 0 || count > INT_MAX ||
        (flags != 0 && flags != CU_GRAPH_USER_OBJECT_MOVE) ||
        (flags == 0 && count > INT_MAX - o->refs)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    r = fc_uref_find(g, o);
    if (!r) {
        fc_uref_t *n = realloc(g->urefs, (g->nurefs + 1) * sizeof(*n));

        if (!n) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        g->urefs = n;
        r = &n[g->nurefs++];
        r->obj = o;
        r->count = 0;
    }
    r->count += count;
    if (flags == 0)
        o->refs += count;           /* else moved from the caller's */
out:
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count)
{
    fc_uobj_t *o = (fc_uobj_t *)object;
    fc_graph_t *g;
    fc_uref_t *r;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    g = fc_graph_lookup(graph);
    r = g && fc_list_has(g_uobjs, o) ? fc_uref_find(g, o) : NULL;
    if (!r || count == 0 || count > r->count) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        r->count -= count;
        fc_uobj_unref(o, count);
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Kernel, copy and memset nodes may be disabled (cuda.h). */
CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                       unsigned int isEnabled)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_exec_node(hGraphExec, hNode);
    if (!n || (n->type != FC_NODE_KERNEL && n->type != FC_NODE_MEMCPY &&
               n->type != FC_NODE_MEMSET))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        n->disabled = !isEnabled;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                       unsigned int *isEnabled)
{
    fc_node_t *n;
    CUresult rc = CUDA_SUCCESS;

    pthread_mutex_lock(&g_lock);
    n = fc_exec_node(hGraphExec, hNode);
    if (!n || !isEnabled || (n->type != FC_NODE_KERNEL && n->type != FC_NODE_MEMCPY &&
                             n->type != FC_NODE_MEMSET))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *isEnabled = !n->disabled;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Loading state, affinity, flushes, shared memory banks               */

/* Loaded from its first use (fc_func_use). */
CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get(function, &f);
    if (rc == CUDA_SUCCESS && !state)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *state = f->code != NULL ? CU_FUNCTION_LOADING_STATE_LOADED
                                 : CU_FUNCTION_LOADING_STATE_UNLOADED;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuFuncLoad(CUfunction function)
{
    fc_func_t *f;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_func_get_used(function, &f);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* An SM-count affinity to an MPS client only (fc_mps()), as NVIDIA's. */
CUresult CUDAAPI cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
    if (!pi || (unsigned int)type >= CU_EXEC_AFFINITY_TYPE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= FC_NDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    *pi = type == CU_EXEC_AFFINITY_TYPE_SM_COUNT && fc_mps();
    return CUDA_SUCCESS;
}

/* Unmaps the graph memory of device that no allocation holds now. */
CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device)
{
    if (device < 0 || device >= FC_NDEV)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nmem; i++)
        if (g_mem[i].kind == FC_MEM_GRAPH && g_mem[i].dev == device && g_mem[i].mapped &&
            !g_mem[i].live) {
            g_mem[i].mapped = 0;
            g_gmem_res[device] -= g_mem[i].size;
            g_dev_used[device] -= g_mem[i].size;
        }
    pthread_mutex_unlock(&g_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                            CUflushGPUDirectRDMAWritesScope scope)
{
    fc_ctx_t *ctx;
    CUresult rc;

    if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
        (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER &&
         scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
    fc_ctx_t *ctx;
    CUresult rc;

    if (!pConfig)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS)
        *pConfig = ctx->smem_config;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    fc_ctx_t *ctx;
    CUresult rc;

    if ((unsigned int)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    if (rc == CUDA_SUCCESS)
        ctx->smem_config = config;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Profiler: nothing to profile                                        */

/* Not cuProfilerStop calling cuProfilerStart: in a loopback process the
 * guest library's exported cuProfilerStart would answer that call. */
static CUresult fc_profiler(void)
{
    fc_ctx_t *ctx;
    CUresult rc;

    pthread_mutex_lock(&g_lock);
    rc = fc_cur(&ctx);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

CUresult CUDAAPI cuProfilerStart(void)
{
    return fc_profiler();
}

CUresult CUDAAPI cuProfilerStop(void)
{
    return fc_profiler();
}

/* ------------------------------------------------------------------ */
/* Tensor maps                                                         */

/*
 * The checks cuda.h lists for cuTensorMapEncode*, and an encoding of the
 * stand-in's own (opaque[0] the address, [1..5] the dims, [6..9] the
 * strides, [10] the box or corners, [11] the element strides, [12] the
 * enums, [13] the kind): no kernel of the stand-in reads it.
 */
static CUresult fc_tmap(CUtensorMap *map, int kind, CUtensorMapDataType type, cuuint32_t rank,
                        void *addr, const cuuint64_t *dim, const cuuint64_t *strides,
                        const cuuint32_t *box, const cuuint32_t *estrides,
                        CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                        CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob, uint64_t extra)
{
    static const unsigned int esize[] = { 1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4, 1, 1, 1 };
    uintptr_t align = il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;

    if (map == NULL || (unsigned int)type > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B ||
        rank == 0 || rank > 5 || (il != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3) ||
        (unsigned int)il > CU_TENSOR_MAP_INTERLEAVE_32B ||
        (unsigned int)sw > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B ||
        (unsigned int)l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
        (unsigned int)oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA ||
        addr == NULL || (uintptr_t)addr % align != 0 || dim == NULL || estrides == NULL ||
        (rank > 1 && strides == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    memset(map, 0, sizeof(*map));
    for (cuuint32_t i = 0; i < rank; i++) {
        if (dim[i] == 0 || dim[i] > (1ull << 32) || estrides[i] == 0 || estrides[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
        if (i + 1 < rank && (strides[i] % 16 != 0 || strides[i] >= (1ull << 40)))
            return CUDA_ERROR_INVALID_VALUE;
        if (box != NULL && (box[i] == 0 || box[i] > 256))
            return CUDA_ERROR_INVALID_VALUE;
        map->opaque[1 + i] = dim[i];
        if (i + 1 < rank)
            map->opaque[6 + i] = strides[i];
        if (box != NULL)
            map->opaque[10] |= (uint64_t)box[i] << (12 * i);
        map->opaque[11] |= (uint64_t)estrides[i] << (4 * i);
    }
    if (box != NULL && il == CU_TENSOR_MAP_INTERLEAVE_NONE &&
        (box[0] * esize[type]) % 16 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (box == NULL)
        map->opaque[10] = extra;
    map->opaque[0] = (uint64_t)(uintptr_t)addr;
    map->opaque[12] = (uint64_t)type | (uint64_t)rank << 8 | (uint64_t)il << 16 |
                      (uint64_t)sw << 24 | (uint64_t)l2 << 32 | (uint64_t)oob << 40;
    map->opaque[13] = (uint64_t)kind;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress,
                                        const cuuint64_t *globalDim,
                                        const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
                                        const cuuint32_t *elementStrides,
                                        CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle,
                                        CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    if (boxDim == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return fc_tmap(tensorMap, 1, tensorDataType, tensorRank, globalAddress, globalDim,
                   globalStrides, boxDim, elementStrides, interleave, swizzle, l2Promotion,
                   oobFill, 0);
}

CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap *tensorMap,
                                         CUtensorMapDataType tensorDataType,
                                         cuuint32_t tensorRank, void *globalAddress,
                                         const cuuint64_t *globalDim,
                                         const cuuint64_t *globalStrides,
                                         const int *pixelBoxLowerCorner,
                                         const int *pixelBoxUpperCorner,
                                         cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
                                         const cuuint32_t *elementStrides,
                                         CUtensorMapInterleave interleave,
                                         CUtensorMapSwizzle swizzle,
                                         CUtensorMapL2promotion l2Promotion,
                                         CUtensorMapFloatOOBfill oobFill)
{
    uint64_t corners = 0;

    if (tensorRank < 3 || pixelBoxLowerCorner == NULL || pixelBoxUpperCorner == NULL ||
        channelsPerPixel == 0 || channelsPerPixel > 256 || pixelsPerColumn == 0 ||
        pixelsPerColumn > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i + 2 < tensorRank; i++)
        corners |= (uint64_t)(pixelBoxLowerCorner[i] & 0xff) << (16 * i) |
                   (uint64_t)(pixelBoxUpperCorner[i] & 0xff) << (16 * i + 8);
    return fc_tmap(tensorMap, 2, tensorDataType, tensorRank, globalAddress, globalDim,
                   globalStrides, NULL, elementStrides, interleave, swizzle, l2Promotion,
                   oobFill, corners);
}

CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    if (tensorMap == NULL || globalAddress == NULL || (uintptr_t)globalAddress % 16 != 0 ||
        tensorMap->opaque[13] == 0)
        return CUDA_ERROR_INVALID_VALUE;
    tensorMap->opaque[0] = (uint64_t)(uintptr_t)globalAddress;
    return CUDA_SUCCESS;
}
