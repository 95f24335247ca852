/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Migration: a session's state as a byte stream, and a session rebuilt
 * from one (docs/design.md, "Live migration").
 *
 * Device addresses are the driver's to choose, and the guest keeps them
 * (in its memory, in kernel parameters, in data on the GPU); handles are
 * ours, and the guest keeps those too.  A worker of the same binary on
 * the same driver, started without address randomization, that makes the
 * same calls in the same order gets the same addresses and handles
 * (measured: tests/gpu/probe-migrate.c).  So the session keeps, in order,
 * every call that placed memory or named an object (vcu__mig_note), with
 * its reply; the destination makes them again and checks that each reply
 * is the one kept (vcu__cuda_sess_load), then writes the contents of the
 * session's allocations and of its modules' globals.  Whatever the
 * history cannot carry (graph memory, stream-ordered allocations, registered
 * host memory, ...) makes the session refuse to be saved, saying why.
 *
 * The stream (host-endian: both ends are one build on one kind of host):
 *   vcu__mig_head
 *   per call kept: vcu__mig_call, payload, reply, module image (8-aligned)
 *   per allocation: vcu__mig_mem, its bytes; then a vcu__mig_mem of addr 0
 *   per module global: vcu__mig_glob, name, its bytes; then one of module 0
 *   vcu__mig_head's magic again
 * A whole state (VCU__MIG_WHOLE) has all of it.  The pass before the
 * pause (docs/design.md, "Live migration") splits it: a pre-state
 * (VCU__MIG_PRE: the history so far, no contents) while the guest runs;
 * chunks of device memory (VCU__MIG_CHUNKS: memory records only, each a
 * VCU__MIG_MEM_PART of an allocation the pre-state made), each chunk's
 * hash kept; then at the pause the rest (VCU__MIG_REST: the calls kept
 * since, every allocation the pre-pass did not carry, and of those it
 * did only the chunks whose hash changed, then the globals).
 *
 * Worker thread only, like the rest of the session's state.
 */
#define _GNU_SOURCE                 /* memmem */
#include <unistd.h>
#include <elf.h>
#include <sys/mman.h>
#include <pthread.h>
#include <time.h>

#include "cuda_int.h"
#include "vcu_fatbin.h"
#include "vcu_sha256.h"

#define VCU__MIG_MAGIC 0x3130676d75637600ull    /* "\0vcumg01" */
#define VCU__MIG_VERSION 2u
#define VCU__MIG_CHUNK ((size_t)8 << 20)
/* What one VCU_BACKEND_OP_PRE_COPY passes at most: the guest's requests
 * to the worker wait behind it. */
#define VCU__MIG_PRE_BUDGET ((uint64_t)64 << 20)
#define VCU__MIG_NAME_MAX 1024u
/* How long a save waits for the session's GPU work (vcu__mig_drain). */
#define VCU__MIG_QUIESCE_NS (20ull * 1000000000ull)

enum { VCU__MIG_WHOLE, VCU__MIG_PRE, VCU__MIG_CHUNKS, VCU__MIG_REST };

struct vcu__mig_head {
    uint64_t magic;
    uint32_t version;
    int32_t driver_version;
    uint32_t ndev;
    uint32_t kind;                  /* VCU__MIG_WHOLE, _PRE, _CHUNKS or _REST */
    uint64_t first;                 /* _REST: the calls its pre-state carried */
    uint64_t ncalls;
};

struct vcu__mig_call {
    struct vcu_req_hdr h;           /* opcode, flags, payload_len; nsegs 0 */
    uint32_t rlen;                  /* reply bytes */
    uint32_t reserved;
    uint64_t ilen;                  /* module image bytes, else 0 */
};

struct vcu__mig_mem {
    uint64_t addr;                  /* 0: the end of the list */
    uint64_t bytes;
    uint32_t dev;
    uint32_t flags;                 /* VCU__MIG_MEM_PART: a chunk of an allocation */
};
#define VCU__MIG_MEM_PART 1u

struct vcu__mig_glob {
    uint64_t module;                /* the guest's handle; 0: the end */
    uint64_t addr;
    uint64_t bytes;
    uint32_t name_len;
    uint32_t reserved;
};

/* One call kept: payload and reply in one allocation; a module load's
 * image stays in the module cache, named by its hash, until a save. */
typedef struct vcu__mrec_s {
    struct vcu__mig_call c;
    unsigned char *b;
    unsigned char sha[VCU_SHA256_LEN];
} vcu__mrec_t;

/* An allocation the pass before the pause carries: the hash of each
 * chunk it sent (the bytes sent, not the memory since), in order. */
typedef struct vcu__mpre_s {
    uint64_t addr, bytes;
    uint32_t dev;
    bool live;                      /* false once freed: its chunks count no more */
    uint64_t sent;                  /* bytes passed, from the start */
    uint64_t *hash;                 /* one per VCU__MIG_CHUNK */
} vcu__mpre_t;

struct vcu__mig_s {
    vcu__mrec_t *rec;
    size_t n, cap;
    size_t held;                    /* of the session's host budget */
    vcu__pset_t used;               /* functions whose first use is kept */
    char why[128];                  /* why the session cannot migrate, or "" */
    /* The pass before the pause.  Source: pre is set by a pre-state, which
     * carried pre_calls calls; pre_mem, sorted by address, the allocations
     * then live, pre_next the first not passed whole; pre_held, the budget
     * the list takes.  Destination: pre_loaded once a pre-state loaded. */
    bool pre, pre_loaded;
    size_t pre_calls;
    vcu__mpre_t *pre_mem;
    size_t pre_n, pre_next, pre_held;
};

enum { VCU__MIG_IGNORE, VCU__MIG_REPLAY, VCU__MIG_REFUSE };

/* ---- which calls the history keeps ------------------------------------- */

/* A generated call (CU_CALL) by its number; *why as vcu__mig_class's. */
static int vcu__mig_call_class(uint32_t call, const char **why)
{
    switch (call) {
    case VCU_CALL_cuMemPoolTrimTo:
        *why = "stream-ordered allocations";
        return VCU__MIG_REFUSE;
    case VCU_CALL_cuStreamSetAttribute:
    case VCU_CALL_cuStreamCopyAttributes:
    case VCU_CALL_cuFuncSetSharedMemConfig:
    case VCU_CALL_cuFuncLoad:
    case VCU_CALL_cuFuncSetAttribute:
    case VCU_CALL_cuCtxSetSharedMemConfig:
    case VCU_CALL_cuGraphKernelNodeSetAttribute:
    case VCU_CALL_cuGraphKernelNodeCopyAttributes:
    case VCU_CALL_cuGraphNodeSetEnabled:
    case VCU_CALL_cuGraphExecEventRecordNodeSetEvent:
    case VCU_CALL_cuGraphExecEventWaitNodeSetEvent:
    /* Queries that load the function (lazy loading, the driver's
     * default): its code takes device memory there, so they are made
     * again where they were, or later allocations land elsewhere. */
    case VCU_CALL_cuOccupancyAvailableDynamicSMemPerBlock:
    case VCU_CALL_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags:
        return VCU__MIG_REPLAY;
    case VCU_CALL_cuStreamGetAttribute:
    case VCU_CALL_cuCtxResetPersistingL2Cache:
    case VCU_CALL_cuDeviceGetP2PAttribute:
    case VCU_CALL_cuDeviceGetTexture1DLinearMaxWidth:
    case VCU_CALL_cuDeviceCanAccessPeer:
    case VCU_CALL_cuStreamWriteValue32_v2:
    case VCU_CALL_cuStreamWriteValue64_v2:
    case VCU_CALL_cuStreamWaitValue32_v2:
    case VCU_CALL_cuStreamWaitValue64_v2:
    case VCU_CALL_cuProfilerStart:
    case VCU_CALL_cuProfilerStop:
    case VCU_CALL_cuEventElapsedTime_v2:
    case VCU_CALL_cuCtxGetLimit:
    case VCU_CALL_cuCtxGetSharedMemConfig:
    case VCU_CALL_cuFuncIsLoaded:
    case VCU_CALL_cuCtxGetStreamPriorityRange:
    case VCU_CALL_cuGraphExecGetFlags:
    case VCU_CALL_cuGraphKernelNodeGetAttribute:
    case VCU_CALL_cuGraphNodeGetEnabled:
    case VCU_CALL_cuGraphNodeGetType:
    case VCU_CALL_cuStreamQuery:
    case VCU_CALL_cuEventQuery:
    case VCU_CALL_cuMemGetAddressRange_v2:
    case VCU_CALL_cuGraphMemFreeNodeGetParams:
        return VCU__MIG_IGNORE;
    default:
        return VCU__MIG_REFUSE;
    }
}

/*
 * What each opcode that succeeded means for migration: nothing (it placed
 * no memory and named no object: copies, launches, queries, waits), a call
 * to make again on the destination, a generated call (classed by its
 * number), or one the history cannot carry, for the reason named.  An
 * opcode not listed (VCU__MC_NEW: one added since) is refused until the
 * history is taught to carry it.
 */
enum {
    VCU__MC_NEW,
    VCU__MC_IGNORE,
    VCU__MC_REPLAY,
    VCU__MC_CALL,
    VCU__MC_POOLS,
    VCU__MC_HOST_DPTR,
    VCU__MC_LINK,
    VCU__MC_GRAPH_MEM,
    VCU__MC_USER_OBJ,
    VCU__MC_VMM,
    VCU__MC_ARRAYS,
};

static const char *const vcu__mc_why[] = {
    [VCU__MC_NEW] = "a call migration does not carry yet",
    [VCU__MC_POOLS] = "stream-ordered allocations",
    [VCU__MC_HOST_DPTR] = "device pointers to host memory",
    [VCU__MC_LINK] = "modules linked on the host",
    [VCU__MC_GRAPH_MEM] = "graph memory nodes",
    /* Where the references are (graphs, execs still running) is the
     * driver's to know, and the destructor is a guest function. */
    [VCU__MC_USER_OBJ] = "user objects",
    [VCU__MC_VMM] = "the virtual memory API",
    /* An array's contents and an object's driver value (which the guest
     * holds and passes to kernels) do not move. */
    [VCU__MC_ARRAYS] = "CUDA arrays and textures",
};

static const uint8_t vcu__mig_ops[0x0800] = {
    [VCU_OP_CU_CTX_SET_FLAGS] = VCU__MC_REPLAY,
    [VCU_OP_CU_CTX_SET_LIMIT] = VCU__MC_REPLAY,
    [VCU_OP_CU_CTX_RESET] = VCU__MC_REPLAY,
    [VCU_OP_CU_MEM_ALLOC] = VCU__MC_REPLAY,
    [VCU_OP_CU_MEM_FREE] = VCU__MC_REPLAY,
    [VCU_OP_CU_MEMPOOL_GET_DEFAULT] = VCU__MC_REPLAY,
    [VCU_OP_CU_MODULE_LOAD] = VCU__MC_REPLAY,
    [VCU_OP_CU_MODULE_LOAD_KEEP] = VCU__MC_REPLAY,
    [VCU_OP_CU_MODULE_LOAD_HASH] = VCU__MC_REPLAY,
    [VCU_OP_CU_MODULE_UNLOAD] = VCU__MC_REPLAY,
    [VCU_OP_CU_MODULE_GET_FUNCTION] = VCU__MC_REPLAY,
    [VCU_OP_CU_MODULE_GET_GLOBAL] = VCU__MC_REPLAY,
    [VCU_OP_CU_MODULE_GLOBAL_INFO] = VCU__MC_REPLAY,
    [VCU_OP_CU_STREAM_CREATE] = VCU__MC_REPLAY,
    [VCU_OP_CU_STREAM_DESTROY] = VCU__MC_REPLAY,
    [VCU_OP_CU_EVENT_CREATE] = VCU__MC_REPLAY,
    [VCU_OP_CU_EVENT_DESTROY] = VCU__MC_REPLAY,
    [VCU_OP_CU_THREAD_CAPTURE_MODE] = VCU__MC_REPLAY,
    /* Captures: what they record is kept too (vcu__mig_note). */
    [VCU_OP_CU_STREAM_BEGIN_CAPTURE] = VCU__MC_REPLAY,
    [VCU_OP_CU_STREAM_CAPTURE_TO_GRAPH] = VCU__MC_REPLAY,
    [VCU_OP_CU_STREAM_END_CAPTURE] = VCU__MC_REPLAY,
    [VCU_OP_CU_STREAM_CAPTURE_GRAPH] = VCU__MC_REPLAY,
    [VCU_OP_CU_STREAM_CAPTURE_DEPS] = VCU__MC_REPLAY,
    [VCU_OP_CU_STREAM_UPDATE_DEPS] = VCU__MC_REPLAY,
    /* Graphs and their execs, the same handles from the same calls; a
     * listing names the nodes it lists. */
    [VCU_OP_CU_GRAPH_CREATE] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_DESTROY] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_ADD_NODE] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_CLONE] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_INSTANTIATE] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_EXEC_DESTROY] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_NODE_SET] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_EXEC_UPDATE] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_LIST] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_EDGES] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_EDGES_DATA] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_NODE_DESTROY] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_COND_HANDLE] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_ADD_COND_NODE] = VCU__MC_REPLAY,
    /* A child node's graph gets its handle again; an upload is made
     * again (on a stream the history made). */
    [VCU_OP_CU_GRAPH_CHILD_GRAPH] = VCU__MC_REPLAY,
    [VCU_OP_CU_GRAPH_INSTANTIATE_PARAMS] = VCU__MC_REPLAY,
    /* Peer access: the contexts are made again, and so is the link. */
    [VCU_OP_CU_CTX_PEER_ACCESS] = VCU__MC_REPLAY,
    [VCU_OP_CU_DRIVER_INFO] = VCU__MC_IGNORE,
    [VCU_OP_CU_DEVICE_INFO] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEM_GET_INFO] = VCU__MC_IGNORE,
    [VCU_OP_CU_CTX_SYNCHRONIZE] = VCU__MC_IGNORE,
    [VCU_OP_CU_GET_DEFERRED_ERROR] = VCU__MC_IGNORE,
    [VCU_OP_CU_TAKE_OUTPUT] = VCU__MC_IGNORE,
    [VCU_OP_CU_SLICE_INFO] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMCPY_HTOD] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMCPY_DTOH] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMCPY_DTOD] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMSET] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMCPY_2D] = VCU__MC_IGNORE,
    /* A copy; an array it names was refused already. */
    [VCU_OP_CU_MEMCPY_3D] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMCPY_PEER] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMCPY_3D_PEER] = VCU__MC_IGNORE,
    [VCU_OP_CU_STREAM_MEMOPS] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEMPOOL_GET_ATTR] = VCU__MC_IGNORE,
    [VCU_OP_CU_FUNC_GET_ATTRS] = VCU__MC_IGNORE,
    [VCU_OP_CU_OCCUPANCY_BLOCK_SIZE] = VCU__MC_IGNORE,
    [VCU_OP_CU_LAUNCH] = VCU__MC_IGNORE,
    [VCU_OP_CU_LAUNCH_EX] = VCU__MC_IGNORE,
    [VCU_OP_CU_OCCUPANCY_CLUSTERS] = VCU__MC_IGNORE,
    [VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE] = VCU__MC_IGNORE,
    [VCU_OP_CU_TENSOR_MAP] = VCU__MC_IGNORE,
    [VCU_OP_CU_STREAM_SYNCHRONIZE] = VCU__MC_IGNORE,
    [VCU_OP_CU_STREAM_WAIT_EVENT] = VCU__MC_IGNORE,
    [VCU_OP_CU_STREAM_CAPTURE_INFO] = VCU__MC_IGNORE,
    [VCU_OP_CU_STREAM_HOST_FUNC] = VCU__MC_IGNORE,
    [VCU_OP_CU_GRAPH_LAUNCH] = VCU__MC_IGNORE,
    [VCU_OP_CU_GRAPH_NODE_COUNT] = VCU__MC_IGNORE,
    [VCU_OP_CU_GRAPH_MEM_NODE_PARAMS] = VCU__MC_IGNORE,
    [VCU_OP_CU_GRAPH_MEM_ATTR] = VCU__MC_IGNORE,
    [VCU_OP_CU_CALLBACK_WAIT] = VCU__MC_IGNORE,
    [VCU_OP_CU_CALLBACK_DONE] = VCU__MC_IGNORE,
    [VCU_OP_CU_EVENT_RECORD] = VCU__MC_IGNORE,
    [VCU_OP_CU_EVENT_SYNCHRONIZE] = VCU__MC_IGNORE,
    [VCU_OP_CU_BATCH] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEM_GET_ACCESS] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEM_GRANULARITY] = VCU__MC_IGNORE,
    [VCU_OP_CU_MEM_GET_PROPS] = VCU__MC_IGNORE,
    [VCU_OP_CU_CALL] = VCU__MC_CALL,
    [VCU_OP_CU_MEM_ALLOC_ASYNC] = VCU__MC_POOLS,
    [VCU_OP_CU_MEM_FREE_ASYNC] = VCU__MC_POOLS,
    [VCU_OP_CU_MEMPOOL_SET_ATTR] = VCU__MC_POOLS,
    [VCU_OP_CU_MEMPOOL_CREATE] = VCU__MC_POOLS,
    [VCU_OP_CU_MEMPOOL_DESTROY] = VCU__MC_POOLS,
    [VCU_OP_CU_HOST_DEVICE_POINTER] = VCU__MC_HOST_DPTR,
    [VCU_OP_CU_HOST_DEVICE_POINTER_AT] = VCU__MC_HOST_DPTR,
    [VCU_OP_CU_LINK] = VCU__MC_LINK,
    [VCU_OP_CU_GRAPH_ADD_MEM_NODE] = VCU__MC_GRAPH_MEM,
    [VCU_OP_CU_USER_OBJECT_CREATE] = VCU__MC_USER_OBJ,
    [VCU_OP_CU_USER_OBJECT_REF] = VCU__MC_USER_OBJ,
    [VCU_OP_CU_MEM_CREATE] = VCU__MC_VMM,
    [VCU_OP_CU_MEM_RELEASE] = VCU__MC_VMM,
    [VCU_OP_CU_MEM_ADDRESS_RESERVE] = VCU__MC_VMM,
    [VCU_OP_CU_MEM_ADDRESS_FREE] = VCU__MC_VMM,
    [VCU_OP_CU_MEM_MAP] = VCU__MC_VMM,
    [VCU_OP_CU_MEM_UNMAP] = VCU__MC_VMM,
    [VCU_OP_CU_MEM_SET_ACCESS] = VCU__MC_VMM,
    [VCU_OP_CU_MEM_RETAIN] = VCU__MC_VMM,
    [VCU_OP_CU_ARRAY_CREATE] = VCU__MC_ARRAYS,
    [VCU_OP_CU_ARRAY_DESTROY] = VCU__MC_ARRAYS,
    [VCU_OP_CU_TEXOBJ_CREATE] = VCU__MC_ARRAYS,
    [VCU_OP_CU_TEXOBJ_DESTROY] = VCU__MC_ARRAYS,
    [VCU_OP_CU_TEXOBJ_GET] = VCU__MC_ARRAYS,
    [VCU_OP_CU_MIPMAP_CREATE] = VCU__MC_ARRAYS,
    [VCU_OP_CU_MIPMAP_DESTROY] = VCU__MC_ARRAYS,
    [VCU_OP_CU_MIPMAP_LEVEL] = VCU__MC_ARRAYS,
};

/* An opcode's class (vcu__mig_ops), a generated call's by its number;
 * *why says what a refused one used. */
static int vcu__mig_class(uint32_t op, const unsigned char *p, size_t plen, const char **why)
{
    struct vcu_cu_call_req cr;
    unsigned c = op < sizeof(vcu__mig_ops) ? vcu__mig_ops[op] : VCU__MC_NEW;

    switch (c) {
    case VCU__MC_IGNORE:
        return VCU__MIG_IGNORE;
    case VCU__MC_REPLAY:
        return VCU__MIG_REPLAY;
    case VCU__MC_CALL:
        if (plen < sizeof(cr))
            return VCU__MIG_IGNORE;
        memcpy(&cr, p, sizeof(cr));
        *why = "a Driver API call migration does not carry";
        return vcu__mig_call_class(cr.call, why);
    default:
        *why = vcu__mc_why[c];
        return VCU__MIG_REFUSE;
    }
}

static void vcu__mig_refuse(vcu__mig_t *m, const char *what, uint32_t op)
{
    if (m->why[0] == '\0')
        snprintf(m->why, sizeof(m->why), "the session used %s (opcode 0x%04x)", what, op);
}

/*
 * The hash a module load's image is kept under in the module cache (the
 * load put it there): from the reply of CU_MODULE_LOAD_KEEP, the request
 * of CU_MODULE_LOAD_HASH, or what CU_MODULE_LOAD computed for the cache
 * (cs->load_sha).  0, or -1.
 */
static int vcu__mig_image_hash(vcu__cuda_sess_t *cs, uint32_t op, const unsigned char *p,
                               const unsigned char *out, size_t out_len,
                               unsigned char sha[VCU_SHA256_LEN])
{
    struct vcu_cu_module_hash_req hq;
    struct vcu_cu_module_keep_resp kr;

    if (op == VCU_OP_CU_MODULE_LOAD_HASH) {
        memcpy(&hq, p, sizeof(hq));
        memcpy(sha, hq.sha256, VCU_SHA256_LEN);
        return 0;
    }
    if (op == VCU_OP_CU_MODULE_LOAD_KEEP) {
        if (out_len < sizeof(kr))
            return -1;
        memcpy(&kr, out, sizeof(kr));
        memcpy(sha, kr.sha256, VCU_SHA256_LEN);
        return 0;
    }
    memcpy(sha, cs->load_sha, VCU_SHA256_LEN);
    return 0;
}

static uint64_t vcu__mig_ilen(uint32_t op, const unsigned char *p)
{
    struct vcu_cu_module_load_req lq;

    if (op != VCU_OP_CU_MODULE_LOAD && op != VCU_OP_CU_MODULE_LOAD_KEEP &&
        op != VCU_OP_CU_MODULE_LOAD_HASH)
        return 0;
    memcpy(&lq, p, sizeof(lq));     /* the hash request starts alike */
    return lq.image_len;
}

static int vcu__mig_grow(vcu__mig_t *m)
{
    vcu__mrec_t *g;
    size_t nc;

    if (m->n < m->cap)
        return 0;
    nc = m->cap ? m->cap * 2 : 64;
    g = realloc(m->rec, nc * sizeof(*g));
    if (g == NULL)
        return -1;
    m->rec = g;
    m->cap = nc;
    return 0;
}

/*
 * A capture records what is done to its streams instead of doing it, so
 * the captured graph is made of calls the history otherwise passes over
 * (launches, copies, host functions): while a capture may be in progress
 * they are kept when they named a capturing stream (captured), failures
 * included (an unsafe call invalidates the capture: made again, it does
 * the same).  Recording an event and waiting for one are kept while a
 * capture may be in progress whatever the stream (a wait is how another
 * stream joins the capture; made again outside one, neither does
 * anything).  A capture's end and an exec's update are kept failed too:
 * the first ends the capture either way, the second names its error
 * nodes.  The capture's state query stays out (its id is the driver's).
 */
/*
 * VCU_MIG_TRACE in the worker's environment, for an operator to see where
 * two workers' histories part (an allocation placed elsewhere): 1, each
 * call of the history on the worker's stderr (the daemon's log) as saved
 * and as made again, with the first value of its reply; 2, every request
 * the session makes too, kept or not.
 */
static int vcu__mig_trace_level(void)
{
    static int level = -1;

    if (level < 0) {
        const char *s = getenv("VCU_MIG_TRACE");

        level = s != NULL && (s[0] == '1' || s[0] == '2') && s[1] == '\0' ? s[0] - '0' : 0;
    }
    return level;
}

static void vcu__mig_trace(const char *side, size_t i, const struct vcu_req_hdr *h,
                           const unsigned char *p, const unsigned char *reply, size_t rlen)
{
    uint32_t call = 0;
    uint64_t v = 0;

    if (h->opcode == VCU_OP_CU_CALL && h->payload_len >= sizeof(struct vcu_cu_call_req))
        memcpy(&call, p + offsetof(struct vcu_cu_call_req, call), 4);
    if (rlen >= 16)
        memcpy(&v, reply + 8, 8);
    fprintf(stderr, "vcu-worker: migration %s %zu: opcode 0x%04x call 0x%04x reply 0x%llx\n",
            side, i, h->opcode, call, (unsigned long long)v);
}

/* With the trace on, the worker's mappings too: device memory the driver
 * places shares the process's address space with its host mappings. */
static void vcu__mig_trace_maps(const char *side)
{
    char line[512];
    FILE *f;

    if (vcu__mig_trace_level() == 0 || (f = fopen("/proc/self/maps", "re")) == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL)
        fprintf(stderr, "vcu-worker: migration %s maps: %s", side, line);
    fclose(f);
}

static int vcu__mig_keep(vcu__cuda_sess_t *cs, uint32_t op, int cls, bool captured, bool *failed)
{
    *failed = op == VCU_OP_CU_STREAM_END_CAPTURE || op == VCU_OP_CU_GRAPH_EXEC_UPDATE;
    if (cls != VCU__MIG_IGNORE || op == VCU_OP_CU_STREAM_CAPTURE_INFO)
        return cls;
    if (captured) {
        *failed = true;
        return VCU__MIG_REPLAY;
    }
    if (cs->capture && (op == VCU_OP_CU_EVENT_RECORD || op == VCU_OP_CU_STREAM_WAIT_EVENT))
        return VCU__MIG_REPLAY;
    return VCU__MIG_IGNORE;
}

static void vcu__mig_append(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                            const unsigned char *p, const void *out, size_t out_len,
                            uint64_t ilen);

/*
 * The driver loads a function's code lazily (CUDA_MODULE_LOADING=LAZY,
 * its default), into device memory, at its first use: a launch, or a
 * query of its attributes or occupancy.  Launches and queries are not
 * made again on the destination, so the first use of each function that
 * succeeded is kept as a cuFuncLoad at its place, so that code the driver
 * places in device memory there is placed there again (the CPU stand-in
 * loads code lazily too: unit test migrate_first_use).
 * Each of these requests names its function right after its header.
 */
static void vcu__mig_first_use(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                               const unsigned char *p, const void *out, size_t out_len)
{
    struct vcu_call_cuFuncLoad_req lr;
    struct vcu_req_hdr lh;
    struct vcu_cu_resp r, ok;
    vcu__mig_t *m = cs->mig;
    uint64_t fn;

    switch (h->opcode) {
    case VCU_OP_CU_LAUNCH:
    case VCU_OP_CU_LAUNCH_EX:
    case VCU_OP_CU_FUNC_GET_ATTRS:
    case VCU_OP_CU_OCCUPANCY_BLOCK_SIZE:
    case VCU_OP_CU_OCCUPANCY_CLUSTERS:
    case VCU_OP_CU_OCCUPANCY_CLUSTER_SIZE:
        break;
    default:
        return;
    }
    if (m == NULL || m->why[0] != '\0' || out_len < sizeof(r) ||
        h->payload_len < sizeof(struct vcu_cu_hdr) + 8)
        return;
    memcpy(&r, out, sizeof(r));
    memcpy(&fn, p + sizeof(struct vcu_cu_hdr), 8);
    if (r.result != CUDA_SUCCESS || fn == 0 || fn == VCU__PSET_TOMB ||
        vcu__pset_find(&m->used, fn, NULL))
        return;
    if (vcu__mem_take(cs, 16) != 0 || vcu__pset_add(&m->used, fn, 0) != 0) {
        vcu__mig_refuse(m, "more history than its host memory budget holds", h->opcode);
        return;
    }
    memset(&lr, 0, sizeof(lr));
    memcpy(&lr.c.hdr, p, sizeof(lr.c.hdr));     /* the device it named */
    lr.c.call = VCU_CALL_cuFuncLoad;
    lr.c.hash = VCU_CALLS_HASH;
    lr.function = fn;
    memset(&lh, 0, sizeof(lh));
    lh.opcode = VCU_OP_CU_CALL;
    lh.session = h->session;
    lh.payload_len = sizeof(lr);
    memset(&ok, 0, sizeof(ok));
    vcu__mig_append(cs, &lh, (const unsigned char *)&lr, &ok, sizeof(ok), 0);
}

void vcu__mig_note(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h, const void *payload,
                   const void *out, size_t out_len, bool captured)
{
    const unsigned char *p = payload;
    const char *why = NULL;
    struct vcu_cu_resp r;
    vcu__mig_t *m;
    uint64_t ilen;
    bool failed, seen;
    int cls;

    if (vcu__mig_trace_level() > 1)
        vcu__mig_trace("seen", cs->mig->n, h, p, out, out_len);
    vcu__mig_first_use(cs, h, p, out, out_len);
    /* Most calls (launches, copies) stop at the first test. */
    cls = vcu__mig_class(h->opcode, p, h->payload_len, &why);
    if ((cls == VCU__MIG_IGNORE && !cs->capture) || out_len < sizeof(r))
        return;
    seen = cls == VCU__MIG_IGNORE;
    cls = vcu__mig_keep(cs, h->opcode, cls, captured, &failed);
    if (cls == VCU__MIG_IGNORE)
        return;
    memcpy(&r, out, sizeof(r));
    if (r.result != CUDA_SUCCESS && !failed)
        return;                     /* a failed call changed nothing */
    m = cs->mig;
    if (m->why[0] != '\0')
        return;
    if (cls == VCU__MIG_REFUSE) {
        vcu__mig_refuse(m, why, h->opcode);
        return;
    }
    if (seen && h->nsegs != 0) {
        /* A copy from or to guest memory in a capture (the guest library
         * makes those graph nodes of their own). */
        vcu__mig_refuse(m, "a copy of guest memory in a stream capture", h->opcode);
        return;
    }
    ilen = vcu__mig_ilen(h->opcode, p);
    if (ilen > 0 && cs->cu->mc == NULL) {
        vcu__mig_refuse(m, "modules, with no module cache to keep their images", h->opcode);
        return;
    }
    vcu__mig_append(cs, h, p, out, out_len, ilen);
}

/* Keeps a call: its request, payload p and reply out. */
static void vcu__mig_append(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                            const unsigned char *p, const void *out, size_t out_len,
                            uint64_t ilen)
{
    vcu__mig_t *m = cs->mig;
    vcu__mrec_t *e;
    size_t need;

    need = h->payload_len + out_len;
    if (ilen > VCU_MAX_XFER || vcu__mig_grow(m) != 0 || vcu__mem_take(cs, need) != 0) {
        vcu__mig_refuse(m, "more history than its host memory budget holds", h->opcode);
        return;
    }
    e = &m->rec[m->n];
    memset(e, 0, sizeof(*e));
    e->c.h = *h;
    e->c.h.nsegs = 0;
    e->c.h.flags = 0;
    e->c.rlen = (uint32_t)out_len;
    e->c.ilen = ilen;
    e->b = malloc(need ? need : 1);
    if (e->b == NULL ||
        (ilen > 0 && vcu__mig_image_hash(cs, h->opcode, p, out, out_len, e->sha) != 0)) {
        free(e->b);
        vcu__mem_give(cs, need);
        vcu__mig_refuse(m, "a module image it could not name", h->opcode);
        return;
    }
    memcpy(e->b, p, h->payload_len);
    memcpy(e->b + h->payload_len, out, out_len);
    m->held += need;
    m->n++;
}

vcu__mig_t *vcu__mig_new(void)
{
    vcu__mig_t *m = calloc(1, sizeof(vcu__mig_t));

    if (m != NULL)
        vcu__pset_init(&m->used);
    return m;
}

/* Forgets a pass before the pause (a new one begins, or the session ends). */
static void vcu__mig_pre_drop(vcu__cuda_sess_t *cs)
{
    vcu__mig_t *m = cs->mig;
    size_t i;

    for (i = 0; i < m->pre_n; i++)
        free(m->pre_mem[i].hash);
    free(m->pre_mem);
    vcu__mem_give(cs, m->pre_held);
    m->pre_mem = NULL;
    m->pre_n = m->pre_next = m->pre_held = 0;
    m->pre = false;
    m->pre_calls = 0;
}

/* The pre-pass entry of the allocation at addr, or NULL. */
static vcu__mpre_t *vcu__mig_pre_find(vcu__mig_t *m, uint64_t addr)
{
    size_t lo = 0, hi = m->pre_n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (m->pre_mem[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->pre_n && m->pre_mem[lo].addr == addr ? &m->pre_mem[lo] : NULL;
}

/*
 * The session freed the allocation at addr: what the pass before the
 * pause sent of it counts no more.  The destination frees it too when it
 * makes the call again, and an allocation made there later at the same
 * address need not hold those bytes.
 */
void vcu__mig_freed(vcu__cuda_sess_t *cs, uint64_t addr)
{
    vcu__mpre_t *e;

    if (cs->mig != NULL && cs->mig->pre && (e = vcu__mig_pre_find(cs->mig, addr)) != NULL)
        e->live = false;
}

void vcu__mig_free(vcu__cuda_sess_t *cs)
{
    vcu__mig_t *m = cs->mig;
    size_t i;

    if (m == NULL)
        return;
    vcu__mig_pre_drop(cs);
    for (i = 0; i < m->n; i++)
        free(m->rec[i].b);
    free(m->rec);
    vcu__mem_give(cs, m->held + (size_t)m->used.live * 16);
    vcu__pset_fini(&m->used);
    free(m);
    cs->mig = NULL;
}

/* ---- a module's globals, from its image -------------------------------- */

typedef int (*vcu__glob_cb)(void *arg, const char *name, size_t len);

/* The data symbols of a cubin: objects in .nv.global* and .nv.constant*
 * sections other than .nv.constant0 (a kernel's parameters).  0, or -1
 * if the ELF is malformed or cb failed. */
static int vcu__elf_globals(const unsigned char *img, size_t len, vcu__glob_cb cb, void *arg)
{
    Elf64_Ehdr eh;
    Elf64_Shdr sh, ss, st, shs;
    unsigned int i;
    uint64_t k, nsym;

    if (len < sizeof(eh))
        return -1;
    memcpy(&eh, img, sizeof(eh));
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len ||
        (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > len - eh.e_shoff ||
        eh.e_shstrndx >= eh.e_shnum)
        return -1;
    memcpy(&shs, img + eh.e_shoff + (size_t)eh.e_shstrndx * sizeof(shs), sizeof(shs));
    if (shs.sh_offset > len || shs.sh_size > len - shs.sh_offset)
        return -1;
    for (i = 0; i < eh.e_shnum; i++) {
        memcpy(&ss, img + eh.e_shoff + (size_t)i * sizeof(ss), sizeof(ss));
        if (ss.sh_type != SHT_SYMTAB)
            continue;
        if (ss.sh_link >= eh.e_shnum || ss.sh_offset > len || ss.sh_size > len - ss.sh_offset)
            return -1;
        memcpy(&st, img + eh.e_shoff + (size_t)ss.sh_link * sizeof(st), sizeof(st));
        if (st.sh_offset > len || st.sh_size > len - st.sh_offset)
            return -1;
        nsym = ss.sh_size / sizeof(Elf64_Sym);
        for (k = 0; k < nsym; k++) {
            Elf64_Sym sym;
            const char *nm, *sn;
            size_t nl;

            memcpy(&sym, img + ss.sh_offset + k * sizeof(sym), sizeof(sym));
            if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_shndx == SHN_UNDEF ||
                sym.st_shndx >= eh.e_shnum || sym.st_name >= st.sh_size)
                continue;
            memcpy(&sh, img + eh.e_shoff + (size_t)sym.st_shndx * sizeof(sh), sizeof(sh));
            if (sh.sh_name >= shs.sh_size)
                continue;
            sn = (const char *)img + shs.sh_offset + sh.sh_name;
            if (strnlen(sn, shs.sh_size - sh.sh_name) == shs.sh_size - sh.sh_name)
                continue;
            if (strncmp(sn, ".nv.global", 10) != 0 &&
                (strncmp(sn, ".nv.constant", 12) != 0 || strncmp(sn, ".nv.constant0", 13) == 0))
                continue;
            nm = (const char *)img + st.sh_offset + sym.st_name;
            nl = strnlen(nm, st.sh_size - sym.st_name);
            if (nl == 0 || nl == st.sh_size - sym.st_name)
                continue;
            if (cb(arg, nm, nl) != 0)
                return -1;
        }
    }
    return 0;
}

/* Whether the words of [l, e) include w. */
static bool vcu__ptx_word(const char *l, const char *e, const char *w)
{
    size_t n = strlen(w);
    const char *q;

    for (q = l; (q = memmem(q, (size_t)(e - q), w, n)) != NULL; q += n)
        if ((q == l || q[-1] == ' ' || q[-1] == '\t') &&
            (q + n == e || q[n] == ' ' || q[n] == '\t'))
            return true;
    return false;
}

/* The variables a PTX text defines in global or constant space: a line
 * with the word .global or .const (not .extern), the name being the last
 * word before '[', '=', ';' or the line's end. */
static int vcu__ptx_globals(const unsigned char *img, size_t len, vcu__glob_cb cb, void *arg)
{
    const char *t = (const char *)img, *e = t + strnlen(t, len), *l, *nl, *n1, *n0;

    for (l = t; l < e; l = nl + 1) {
        nl = memchr(l, '\n', (size_t)(e - l));
        if (nl == NULL)
            nl = e;
        while (l < nl && (*l == ' ' || *l == '\t'))
            l++;
        if (l == nl || *l != '.' || vcu__ptx_word(l, nl, ".extern") ||
            (!vcu__ptx_word(l, nl, ".global") && !vcu__ptx_word(l, nl, ".const")))
            continue;
        for (n1 = l; n1 < nl && *n1 != '[' && *n1 != '=' && *n1 != ';'; n1++)
            ;
        while (n1 > l && (n1[-1] == ' ' || n1[-1] == '\t' || n1[-1] == '\r'))
            n1--;
        for (n0 = n1; n0 > l && n0[-1] != ' ' && n0[-1] != '\t'; n0--)
            ;
        if (n1 > n0 && *n0 != '.' && cb(arg, n0, (size_t)(n1 - n0)) != 0)
            return -1;
    }
    return 0;
}

/*
 * The globals of a module's image: from its first entry that can be read
 * (a cubin, or PTX) when it is a fatbin container, else from the image
 * itself.  1 if none could be read (all compressed), 0, or -1.
 */
static int vcu__image_globals(const unsigned char *img, size_t len, vcu__glob_cb cb, void *arg)
{
    struct vcu_fatbin_hdr fh;
    struct vcu_fatbin_entry fe;
    uint64_t off;

    if (len >= 4 && memcmp(img, ELFMAG, SELFMAG) == 0)
        return vcu__elf_globals(img, len, cb, arg);
    if (len < sizeof(fh))
        return vcu__ptx_globals(img, len, cb, arg);
    memcpy(&fh, img, sizeof(fh));
    if (fh.magic != VCU_FATBIN_MAGIC)
        return vcu__ptx_globals(img, len, cb, arg);
    if (fh.header_size > len || fh.fat_size > len - fh.header_size)
        return -1;
    for (off = fh.header_size; off + sizeof(fe) <= (uint64_t)fh.header_size + fh.fat_size;) {
        memcpy(&fe, img + off, sizeof(fe));
        if (fe.header_size < sizeof(fe) || fe.header_size > len - off ||
            fe.size > len - off - fe.header_size)
            return -1;
        if ((fe.flags & VCU_FATBIN_F_COMPRESSED) == 0 && fe.kind == VCU_FATBIN_KIND_ELF)
            return vcu__elf_globals(img + off + fe.header_size, (size_t)fe.size, cb, arg);
        if ((fe.flags & VCU_FATBIN_F_COMPRESSED) == 0 && fe.kind == VCU_FATBIN_KIND_PTX)
            return vcu__ptx_globals(img + off + fe.header_size, (size_t)fe.size, cb, arg);
        off += fe.header_size + fe.size;
    }
    return 1;
}

/* ---- the stream --------------------------------------------------------- */

/*
 * The staging buffer of a save or a load, page-locked where the driver
 * lets it be (copies at DMA speed, the stream being the bound), counted
 * in the session's host budget; NULL when there is not that much.  It is
 * mapped at an address of its own, below the worker's guest window
 * (worker_reg.c): never where the driver places device memory, so a
 * buffer mapped while the guest runs (the pass before the pause) moves
 * none of the allocations the guest makes meanwhile.
 */
#define VCU__MIG_BUF_AT 0x0f0000000000ull       /* 15 TiB */

static unsigned char *vcu__mig_buf(vcu__cuda_sess_t *cs)
{
    unsigned char *b;
    uint32_t d;

    if (vcu__mem_take(cs, VCU__MIG_CHUNK) != 0)
        return NULL;
    b = mmap((void *)(uintptr_t)VCU__MIG_BUF_AT, VCU__MIG_CHUNK, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (b == MAP_FAILED)            /* another session's, in this process */
        b = mmap(NULL, VCU__MIG_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
    if (b == MAP_FAILED) {
        vcu__mem_give(cs, VCU__MIG_CHUNK);
        return NULL;
    }
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS) {
            (void)VCU__CU(cs->cu, cuMemHostRegister, b, VCU__MIG_CHUNK,
                          CU_MEMHOSTREGISTER_PORTABLE);
            break;
        }
    }
    return b;
}

static void vcu__mig_buf_free(vcu__cuda_sess_t *cs, unsigned char *b)
{
    uint32_t d;

    if (b == NULL)
        return;
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS) {
            (void)VCU__CU(cs->cu, cuMemHostUnregister, b);
            break;
        }
    }
    munmap(b, VCU__MIG_CHUNK);
    vcu__mem_give(cs, VCU__MIG_CHUNK);
}

/*
 * A chunk's fingerprint: four lanes of xxHash64's round over 32-byte
 * stripes, merged, then the tail and the length.  It tells whether a
 * chunk changed since the pass before the pause sent it; a guest that
 * forged a collision would only keep its own old bytes.
 */
#define VCU__H1 0x9e3779b185ebca87ull
#define VCU__H2 0xc2b2ae3d27d4eb4full
#define VCU__H3 0x165667b19e3779f9ull

static inline uint64_t vcu__rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t vcu__round(uint64_t acc, uint64_t w)
{
    return vcu__rotl(acc + w * VCU__H2, 31) * VCU__H1;
}

static uint64_t vcu__mig_hash(const unsigned char *p, size_t n)
{
    uint64_t a = VCU__H1 + VCU__H2, b = VCU__H2, c = 0, d = 0 - VCU__H1, h, w[4];
    size_t i = 0;

    for (; i + 32 <= n; i += 32) {
        memcpy(w, p + i, 32);
        a = vcu__round(a, w[0]);
        b = vcu__round(b, w[1]);
        c = vcu__round(c, w[2]);
        d = vcu__round(d, w[3]);
    }
    h = vcu__rotl(a, 1) + vcu__rotl(b, 7) + vcu__rotl(c, 12) + vcu__rotl(d, 18);
    h = (h ^ vcu__round(0, a)) * VCU__H1 + VCU__H3;
    h = (h ^ vcu__round(0, b)) * VCU__H1 + VCU__H3;
    h = (h ^ vcu__round(0, c)) * VCU__H1 + VCU__H3;
    h = (h ^ vcu__round(0, d)) * VCU__H1 + VCU__H3;
    for (; i < n; i++)
        h = vcu__rotl(h ^ (p[i] * VCU__H3), 11) * VCU__H1;
    h ^= (uint64_t)n;
    h ^= h >> 33;
    h *= VCU__H2;
    h ^= h >> 29;
    h *= VCU__H3;
    return h ^ (h >> 32);
}

/*
 * A chunk's hash is that of its four quarters (lanes), combined: three
 * threads of a small pool hash three of them while the caller hashes the
 * first, so that the pause, which reads every chunk the pass before it
 * sent back to hash it again, is bound by the copies rather than by one
 * core.  Without the pool (its threads could not be made) the caller
 * hashes all four: the same value.
 */
#define VCU__MIG_LANES 4

typedef struct vcu__hpool_s vcu__hpool_t;

typedef struct vcu__hlane_s {
    vcu__hpool_t *pool;
    unsigned int lane;
    pthread_t t;
} vcu__hlane_t;

struct vcu__hpool_s {
    pthread_mutex_t mu;             /* guards what follows but h[] */
    pthread_cond_t go, done;
    unsigned int gen, busy, nt;
    bool stop;
    const unsigned char *p;
    size_t n;
    uint64_t h[VCU__MIG_LANES];     /* each lane writes its own, read after done */
    vcu__hlane_t lanes[VCU__MIG_LANES - 1];
};

static void vcu__hlane_span(size_t n, unsigned int lane, size_t *off, size_t *len)
{
    size_t part = (n / VCU__MIG_LANES) & ~(size_t)31;

    *off = part * lane;
    *len = lane == VCU__MIG_LANES - 1 ? n - *off : part;
}

static void vcu__hlane_do(vcu__hpool_t *hp, unsigned int lane)
{
    size_t off, len;

    vcu__hlane_span(hp->n, lane, &off, &len);
    hp->h[lane] = vcu__mig_hash(hp->p + off, len);
}

static void *vcu__hlane_run(void *arg)
{
    vcu__hlane_t *l = arg;
    vcu__hpool_t *hp = l->pool;
    unsigned int seen = 0;

    for (;;) {
        pthread_mutex_lock(&hp->mu);
        while (hp->gen == seen && !hp->stop)
            pthread_cond_wait(&hp->go, &hp->mu);
        if (hp->stop) {
            pthread_mutex_unlock(&hp->mu);
            return NULL;
        }
        seen = hp->gen;
        pthread_mutex_unlock(&hp->mu);
        vcu__hlane_do(hp, l->lane);
        pthread_mutex_lock(&hp->mu);
        if (--hp->busy == 0)
            pthread_cond_signal(&hp->done);
        pthread_mutex_unlock(&hp->mu);
    }
}

static void vcu__hpool_init(vcu__hpool_t *hp)
{
    unsigned int i;

    memset(hp, 0, sizeof(*hp));
    pthread_mutex_init(&hp->mu, NULL);
    pthread_cond_init(&hp->go, NULL);
    pthread_cond_init(&hp->done, NULL);
    for (i = 0; i < VCU__MIG_LANES - 1; i++) {
        hp->lanes[i].pool = hp;
        hp->lanes[i].lane = i + 1;
        if (pthread_create(&hp->lanes[i].t, NULL, vcu__hlane_run, &hp->lanes[i]) != 0)
            break;
        hp->nt++;
    }
}

static void vcu__hpool_fini(vcu__hpool_t *hp)
{
    unsigned int i;

    pthread_mutex_lock(&hp->mu);
    hp->stop = true;
    pthread_cond_broadcast(&hp->go);
    pthread_mutex_unlock(&hp->mu);
    for (i = 0; i < hp->nt; i++)
        pthread_join(hp->lanes[i].t, NULL);
    pthread_cond_destroy(&hp->go);
    pthread_cond_destroy(&hp->done);
    pthread_mutex_destroy(&hp->mu);
}

/* The hash of a chunk: its lanes' hashes, hashed with its length. */
static uint64_t vcu__mig_chunk_hash(vcu__hpool_t *hp, const unsigned char *p, size_t n)
{
    unsigned int i;

    hp->p = p;
    hp->n = n;
    if (hp->nt == VCU__MIG_LANES - 1 && n >= ((size_t)1 << 20)) {
        pthread_mutex_lock(&hp->mu);
        hp->busy = hp->nt;
        hp->gen++;
        pthread_cond_broadcast(&hp->go);
        pthread_mutex_unlock(&hp->mu);
        vcu__hlane_do(hp, 0);
        pthread_mutex_lock(&hp->mu);
        while (hp->busy > 0)
            pthread_cond_wait(&hp->done, &hp->mu);
        pthread_mutex_unlock(&hp->mu);
    } else {
        for (i = 0; i < VCU__MIG_LANES; i++)
            vcu__hlane_do(hp, i);
    }
    return vcu__mig_hash((const unsigned char *)hp->h, sizeof(hp->h)) ^ ((uint64_t)n * VCU__H3);
}

static int vcu__mig_write(int fd, const void *b, size_t n)
{
    const char *p = b;

    while (n > 0) {
        ssize_t k = write(fd, p, n);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int vcu__mig_read(int fd, void *b, size_t n)
{
    char *p = b;

    while (n > 0) {
        ssize_t k = read(fd, p, n);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

#define VCU__MIG_FAIL(...)                        \
    do {                                          \
        snprintf(why, whylen, __VA_ARGS__);       \
        goto out;                                 \
    } while (0)

/* Device memory [addr, addr + n) of device d to fd (save) or from it:
 * 0, -1, or -2 when the stream ends first. */
static int vcu__mig_bytes(vcu__cuda_sess_t *cs, uint32_t d, uint64_t addr, uint64_t n, int fd,
                          int save, unsigned char *buf)
{
    vcu__cu_fns_t *fn = &cs->cu->fn;

    if (d >= cs->cu->ndev || cs->ctx[d] == NULL || vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS)
        return -1;
    while (n > 0) {
        size_t k = n < VCU__MIG_CHUNK ? (size_t)n : VCU__MIG_CHUNK;

        if (!save && vcu__mig_read(fd, buf, k) != 0)
            return -2;              /* the stream ended */
        if (save ? fn->cuMemcpyDtoH(buf, (CUdeviceptr)addr, k) != CUDA_SUCCESS ||
                       vcu__mig_write(fd, buf, k) != 0
                 : fn->cuMemcpyHtoD((CUdeviceptr)addr, buf, k) != CUDA_SUCCESS)
            return -1;
        addr += k;
        n -= k;
    }
    return 0;
}

/* The module handle a kept load call's reply names. */
static uint64_t vcu__mig_rec_module(const vcu__mrec_t *e)
{
    uint64_t h = 0;

    if (e->c.ilen == 0 || e->c.rlen < sizeof(struct vcu_cu_resp) + 8)
        return 0;
    memcpy(&h, e->b + e->c.h.payload_len + sizeof(struct vcu_cu_resp), 8);
    return h;
}

typedef struct vcu__gsave_s {
    vcu__cuda_sess_t *cs;
    vcu__mod_t *mod;
    uint64_t handle;
    int fd;
    unsigned char *buf;
    char *why;
    size_t whylen;
} vcu__gsave_t;

static int vcu__mig_save_glob(void *arg, const char *name, size_t len)
{
    vcu__gsave_t *g = arg;
    struct vcu__mig_glob gh;
    char nm[VCU__MIG_NAME_MAX + 1];
    CUdeviceptr a = 0;
    size_t n = 0;
    CUresult r;

    if (len > VCU__MIG_NAME_MAX) {
        snprintf(g->why, g->whylen, "a module global's name is longer than %u bytes",
                 VCU__MIG_NAME_MAX);
        return -1;
    }
    memcpy(nm, name, len);
    nm[len] = '\0';
    r = VCU__CU(g->cs->cu, cuModuleGetGlobal, &a, &n, g->mod->mod, nm);
    if (r != CUDA_SUCCESS) {
        snprintf(g->why, g->whylen, "module global %.64s cannot be read (CUresult %d)", nm, (int)r);
        return -1;
    }
    memset(&gh, 0, sizeof(gh));
    gh.module = g->handle;
    gh.addr = a;
    gh.bytes = n;
    gh.name_len = (uint32_t)len;
    if (vcu__mig_write(g->fd, &gh, sizeof(gh)) != 0 || vcu__mig_write(g->fd, nm, len) != 0 ||
        vcu__mig_bytes(g->cs, g->mod->dev, a, n, g->fd, 1, g->buf) != 0) {
        snprintf(g->why, g->whylen, "writing module global %.64s failed", nm);
        return -1;
    }
    return 0;
}

/* The kept calls from the first on, each module load's image read back
 * from the cache. */
static int vcu__mig_save_calls(vcu__cuda_sess_t *cs, int fd, size_t first, char *why,
                               size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    size_t i, len, pad;
    static const unsigned char zero[8];
    unsigned char *img;
    int rc;

    for (i = first; i < m->n; i++) {
        const vcu__mrec_t *e = &m->rec[i];

        len = e->c.h.payload_len + e->c.rlen;
        pad = (8 - (len + e->c.ilen) % 8) % 8;
        if (vcu__mig_trace_level() > 0)
            vcu__mig_trace("saved", i, &e->c.h, e->b, e->b + e->c.h.payload_len, e->c.rlen);
        if (vcu__mig_write(fd, &e->c, sizeof(e->c)) != 0 || vcu__mig_write(fd, e->b, len) != 0)
            goto err_write;
        if (e->c.ilen > 0) {
            if (vcu__mem_take(cs, (size_t)e->c.ilen) != 0) {
                snprintf(why, whylen, "a module image is larger than the host memory left");
                return -1;
            }
            img = malloc((size_t)e->c.ilen);
            rc = img == NULL || vcu_modcache_get(cs->cu->mc, e->sha, img, e->c.ilen) != 0
                     ? -1
                     : vcu__mig_write(fd, img, (size_t)e->c.ilen);
            free(img);
            vcu__mem_give(cs, (size_t)e->c.ilen);
            if (rc != 0) {
                snprintf(why, whylen, "a module image of %llu bytes is no longer in the module "
                         "cache, or writing it failed", (unsigned long long)e->c.ilen);
                return -1;
            }
        }
        if (vcu__mig_write(fd, zero, pad) != 0)
            goto err_write;
    }
    return 0;
err_write:
    snprintf(why, whylen, "writing the session's history failed");
    return -1;
}

/* The bytes of allocation p of device d, as the driver has it (what was
 * asked for, which copies may not pass), or 0. */
static uint64_t vcu__mig_size(vcu__cuda_sess_t *cs, uint32_t d, uint64_t p)
{
    CUdeviceptr base = 0;
    size_t n = 0;

    if (d >= cs->cu->ndev || cs->ctx[d] == NULL || vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS ||
        VCU__CU(cs->cu, cuMemGetAddressRange, &base, &n, (CUdeviceptr)p) != CUDA_SUCCESS ||
        base != p)
        return 0;
    return n;
}

/* What the save at the pause works with: two staging buffers (the
 * second may be NULL), the hash pool, and where the bytes went (for the
 * log). */
typedef struct vcu__mig_io_s {
    unsigned char *buf[2];
    vcu__hpool_t hp;
    uint64_t same, sent;
} vcu__mig_io_t;

/* Starts reading [addr, addr + k) of device d into b: on the context's
 * migration stream when there is one (finished by vcu__mig_fetch_wait),
 * else at once. */
static CUresult vcu__mig_fetch(vcu__cuda_sess_t *cs, uint32_t d, uint64_t addr, size_t k,
                               unsigned char *b)
{
    if (cs->mstream[d] != NULL)
        return VCU__CU(cs->cu, cuMemcpyDtoHAsync, b, (CUdeviceptr)addr, k, cs->mstream[d]);
    return cs->cu->fn.cuMemcpyDtoH(b, (CUdeviceptr)addr, k);
}

static CUresult vcu__mig_fetch_wait(vcu__cuda_sess_t *cs, uint32_t d)
{
    return cs->mstream[d] != NULL ? cs->cu->fn.cuStreamSynchronize(cs->mstream[d])
                                  : CUDA_SUCCESS;
}

/*
 * An allocation the pass before the pause carried (e), at the pause: each
 * chunk read again, and sent only if it was never sent or its hash is
 * not the one sent.  With two buffers, the next chunk is read while this
 * one is hashed.  0 or -1.
 */
static int vcu__mig_save_parts(vcu__cuda_sess_t *cs, const vcu__mpre_t *e, int fd,
                               vcu__mig_io_t *io)
{
    struct vcu__mig_mem mh;
    uint64_t off, next;
    unsigned int cur = 0;
    size_t k, kn;

    if (vcu__cur(cs, cs->ctx[e->dev]) != CUDA_SUCCESS)
        return -1;
    k = e->bytes < VCU__MIG_CHUNK ? (size_t)e->bytes : VCU__MIG_CHUNK;
    if (vcu__mig_fetch(cs, e->dev, e->addr, k, io->buf[0]) != CUDA_SUCCESS)
        return -1;
    for (off = 0; off < e->bytes; off = next) {
        unsigned char *b = io->buf[cur];

        if (vcu__mig_fetch_wait(cs, e->dev) != CUDA_SUCCESS)
            return -1;
        next = off + k;
        kn = e->bytes - next < VCU__MIG_CHUNK ? (size_t)(e->bytes - next) : VCU__MIG_CHUNK;
        if (next < e->bytes && io->buf[1] != NULL &&
            vcu__mig_fetch(cs, e->dev, e->addr + next, kn, io->buf[cur ^ 1]) != CUDA_SUCCESS)
            return -1;
        if (off < e->sent &&
            vcu__mig_chunk_hash(&io->hp, b, k) == e->hash[off / VCU__MIG_CHUNK]) {
            io->same += k;
        } else {
            memset(&mh, 0, sizeof(mh));
            mh.addr = e->addr + off;
            mh.bytes = k;
            mh.dev = e->dev;
            mh.flags = VCU__MIG_MEM_PART;
            if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 || vcu__mig_write(fd, b, k) != 0)
                return -1;
            io->sent += k;
        }
        if (next < e->bytes && io->buf[1] == NULL &&
            vcu__mig_fetch(cs, e->dev, e->addr + next, kn, b) != CUDA_SUCCESS)
            return -1;
        if (io->buf[1] != NULL)
            cur ^= 1;
        k = kn;
    }
    return 0;
}

/* Every allocation's bytes; with rest, those the pass before the pause
 * carried only where they changed. */
static int vcu__mig_save_mem(vcu__cuda_sess_t *cs, int fd, bool rest, vcu__mig_io_t *io)
{
    struct vcu__mig_mem mh;
    const vcu__mpre_t *e;
    uint32_t i;

    for (i = 0; i < cs->allocs.cap; i++) {
        uint64_t k = cs->allocs.keys[i], v = cs->allocs.vals[i];

        if (k == 0 || k == VCU__PSET_TOMB)
            continue;
        memset(&mh, 0, sizeof(mh));
        mh.addr = k;
        mh.dev = VCU__ALLOC_DEV(v);
        mh.bytes = vcu__mig_size(cs, mh.dev, k);
        if (mh.bytes == 0)
            return -1;
        e = rest ? vcu__mig_pre_find(cs->mig, k) : NULL;
        if (e != NULL && e->live && e->dev == mh.dev && e->bytes == mh.bytes) {
            if (vcu__mig_save_parts(cs, e, fd, io) != 0)
                return -1;
            continue;
        }
        if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 ||
            vcu__mig_bytes(cs, mh.dev, mh.addr, mh.bytes, fd, 1, io->buf[0]) != 0)
            return -1;
        io->sent += mh.bytes;
    }
    memset(&mh, 0, sizeof(mh));
    return vcu__mig_write(fd, &mh, sizeof(mh));
}

static int vcu__mig_save_globals(vcu__cuda_sess_t *cs, int fd, unsigned char *buf, char *why,
                                 size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    struct vcu__mig_glob end;
    unsigned char *img;
    size_t i;

    for (i = 0; i < m->n; i++) {
        const vcu__mrec_t *e = &m->rec[i];
        uint64_t h = vcu__mig_rec_module(e);
        vcu__hent_t *he = h ? vcu__htab_get(&cs->tab, h, VCU__H_MODULE) : NULL;
        vcu__gsave_t g = { cs, NULL, h, fd, buf, why, whylen };
        int rc;

        if (he == NULL)
            continue;               /* unloaded since */
        g.mod = he->u.mod;
        if (vcu__mem_take(cs, (size_t)e->c.ilen) != 0) {
            snprintf(why, whylen, "a module image is larger than the host memory left");
            return -1;
        }
        img = malloc((size_t)e->c.ilen);
        if (img == NULL || vcu_modcache_get(cs->cu->mc, e->sha, img, e->c.ilen) != 0)
            rc = -1;
        else
            rc = vcu__image_globals(img, (size_t)e->c.ilen, vcu__mig_save_glob, &g);
        free(img);
        vcu__mem_give(cs, (size_t)e->c.ilen);
        if (rc > 0)
            snprintf(why, whylen, "a module image is compressed: its globals cannot be listed");
        else if (rc < 0 && why[0] == '\0')
            snprintf(why, whylen, "a module image cannot be read");
        if (rc != 0)
            return -1;
    }
    memset(&end, 0, sizeof(end));
    return vcu__mig_write(fd, &end, sizeof(end));
}

/* Does a host function of the session wait for the guest: reached, its
 * cookie handed to the guest or queued for it? */
static bool vcu__mig_cb_busy(vcu__cuda_sess_t *cs)
{
    vcu__gate_t *g = &cs->gate;
    bool busy;

    pthread_mutex_lock(&g->mu);
    busy = g->ntramp > 0 || g->nq > 0;
    pthread_mutex_unlock(&g->mu);
    return busy;
}

static uint64_t vcu__mig_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define VCU__MIG_CB_WHY                                                                   \
    "a host function (CU_STREAM_HOST_FUNC or a graph host node) waits for the guest: a " \
    "save is made again once it returned"

/*
 * The session's GPU work, waited for without blocking: a host function
 * the work reaches waits for the guest, which is stopped while its VM
 * migrates, so a blocking synchronize would never return.  Events behind
 * every stream's work are polled for up to VCU__MIG_QUIESCE_NS; a host
 * function reached meanwhile refuses the save (the source runs on and
 * the guest answers it), and so does work that takes longer.  0, or -1
 * with *why.
 */
static int vcu__mig_drain(vcu__cuda_sess_t *cs, char *why, size_t whylen)
{
    vcu__cuda_wait_t *w = vcu__wait_new(cs);
    struct timespec nap = { 0, 100 * 1000 };
    uint64_t t0 = vcu__mig_now_ns();
    CUresult res;
    uint32_t d;
    int rc = -1;

    if (w == NULL) {
        snprintf(why, whylen, "out of host memory");
        return -1;
    }
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] != NULL &&
            (vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS || vcu__park_ctx(cs, w, d) != 0)) {
            snprintf(why, whylen, "device %u's work cannot be waited for", d);
            goto out;
        }
    }
    while (!vcu__cuda_wait_poll(cs, w)) {
        if (vcu__mig_cb_busy(cs)) {
            snprintf(why, whylen, VCU__MIG_CB_WHY);
            goto out;
        }
        if (vcu__mig_now_ns() - t0 > VCU__MIG_QUIESCE_NS) {
            snprintf(why, whylen, "the session's GPU work did not finish within %llu s",
                     (unsigned long long)(VCU__MIG_QUIESCE_NS / 1000000000ull));
            goto out;
        }
        nanosleep(&nap, NULL);
    }
    res = w->res;
    if (res != CUDA_SUCCESS) {
        snprintf(why, whylen, "the session's GPU work failed (CUresult %d)", (int)res);
        goto out;
    }
    rc = 0;
out:
    vcu__wait_free(cs, w);
    return rc;
}

/* Why the session cannot move at all, or NULL. */
static const char *vcu__mig_refusal(vcu__cuda_sess_t *cs)
{
    if (cs->mig->why[0] != '\0')
        return cs->mig->why;
    /* An MPS client: its contexts, the MPS server's state and another
     * VM's clients on the same server are not what the history replays. */
    if (cs->cu->sms != 0)
        return "the session runs in packed mode (an MPS client on the VM's SMs), which a "
               "migration does not carry";
    return NULL;
}

/* Nothing of the session may be running or half done. */
static int vcu__mig_quiesce(vcu__cuda_sess_t *cs, char *why, size_t whylen)
{
    const char *no = vcu__mig_refusal(cs);
    uint32_t d;
    CUresult r;

    if (no != NULL) {
        snprintf(why, whylen, "%s", no);
        return -1;
    }
    if (cs->capture && vcu__any_capture(cs)) {
        snprintf(why, whylen, "a stream capture is in progress: a session is saved between "
                 "captures");
        return -1;
    }
    if (cs->waits != NULL || cs->orphans != NULL) {
        snprintf(why, whylen, "the session has GPU work still waited for");
        return -1;
    }
    if (vcu__mig_cb_busy(cs)) {
        snprintf(why, whylen, VCU__MIG_CB_WHY);
        return -1;
    }
    if (vcu__mig_drain(cs, why, whylen) != 0)
        return -1;
    /* All done: returns at once, and says if a context failed. */
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] == NULL)
            continue;
        r = vcu__cur(cs, cs->ctx[d]);
        if (r == CUDA_SUCCESS)
            r = cs->cu->fn.cuCtxSynchronize();
        if (r != CUDA_SUCCESS) {
            snprintf(why, whylen, "device %u's context failed (CUresult %d)", d, (int)r);
            return -1;
        }
    }
    return 0;
}

static int vcu__mig_head_write(vcu__cuda_sess_t *cs, int fd, uint32_t kind, uint64_t first,
                               uint64_t ncalls)
{
    struct vcu__mig_head hd;

    memset(&hd, 0, sizeof(hd));
    hd.magic = VCU__MIG_MAGIC;
    hd.version = VCU__MIG_VERSION;
    hd.driver_version = cs->cu->driver_version;
    hd.ndev = cs->cu->ndev;
    hd.kind = kind;
    hd.first = first;
    hd.ncalls = ncalls;
    return vcu__mig_write(fd, &hd, sizeof(hd));
}

int vcu__cuda_sess_save(vcu__cuda_sess_t *cs, int fd, bool rest, char *why, size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    uint64_t magic = VCU__MIG_MAGIC;
    vcu__mig_io_t io;
    size_t first = rest ? m->pre_calls : 0;
    int rc = VCU_EINVAL;

    why[0] = '\0';
    if (rest && !m->pre) {
        snprintf(why, whylen, "no pass before the pause began for this session");
        return VCU_EINVAL;
    }
    if (vcu__mig_quiesce(cs, why, whylen) != 0)
        return VCU_EBUSY;
    vcu__mig_trace_maps("saved");
    memset(&io, 0, sizeof(io));
    vcu__hpool_init(&io.hp);
    io.buf[0] = vcu__mig_buf(cs);
    if (io.buf[0] == NULL)
        VCU__MIG_FAIL("out of host memory");
    if (rest)
        io.buf[1] = vcu__mig_buf(cs);   /* NULL: one at a time */
    if (vcu__mig_head_write(cs, fd, rest ? VCU__MIG_REST : VCU__MIG_WHOLE, first,
                            m->n - first) != 0)
        VCU__MIG_FAIL("writing the stream failed");
    if (vcu__mig_save_calls(cs, fd, first, why, whylen) != 0)
        goto out;
    if (vcu__mig_save_mem(cs, fd, rest, &io) != 0)
        VCU__MIG_FAIL("writing the session's device memory failed");
    if (vcu__mig_save_globals(cs, fd, io.buf[0], why, whylen) != 0) {
        if (why[0] == '\0')
            snprintf(why, whylen, "writing the modules' globals failed");
        goto out;
    }
    if (vcu__mig_write(fd, &magic, sizeof(magic)) != 0)
        VCU__MIG_FAIL("writing the stream's end failed");
    if (rest)
        fprintf(stderr, "vcu-worker: migration: at the pause %llu bytes of device memory sent, "
                "%llu unchanged since the pass before it\n", (unsigned long long)io.sent,
                (unsigned long long)io.same);
    rc = 0;
out:
    vcu__mig_buf_free(cs, io.buf[1]);
    vcu__mig_buf_free(cs, io.buf[0]);
    vcu__hpool_fini(&io.hp);
    return rc;
}

/* ---- the pass before the pause ----------------------------------------- */

static int vcu__mig_pre_cmp(const void *a, const void *b)
{
    uint64_t x = ((const vcu__mpre_t *)a)->addr, y = ((const vcu__mpre_t *)b)->addr;

    return x < y ? -1 : x > y;
}

/* The bytes the pass before the pause has still to send. */
static uint64_t vcu__mig_pre_left(const vcu__mig_t *m)
{
    uint64_t n = 0;
    size_t i;

    for (i = m->pre_next; i < m->pre_n; i++)
        if (m->pre_mem[i].live)
            n += m->pre_mem[i].bytes - m->pre_mem[i].sent;
    return n;
}

/* The list of the session's allocations the pass will carry. */
static int vcu__mig_pre_list(vcu__cuda_sess_t *cs)
{
    vcu__mig_t *m = cs->mig;
    size_t cap = cs->allocs.live, need;
    uint32_t i;

    need = cap * sizeof(vcu__mpre_t);
    if (vcu__mem_take(cs, need) != 0)
        return -1;
    m->pre_held = need;
    m->pre_mem = calloc(cap ? cap : 1, sizeof(vcu__mpre_t));
    if (m->pre_mem == NULL)
        return -1;
    for (i = 0; i < cs->allocs.cap && m->pre_n < cap; i++) {
        uint64_t k = cs->allocs.keys[i], v = cs->allocs.vals[i];
        vcu__mpre_t *e = &m->pre_mem[m->pre_n];
        size_t nch;

        if (k == 0 || k == VCU__PSET_TOMB)
            continue;
        e->addr = k;
        e->dev = VCU__ALLOC_DEV(v);
        e->bytes = vcu__mig_size(cs, e->dev, k);
        if (e->bytes == 0)
            continue;               /* sent whole at the pause */
        nch = (size_t)((e->bytes + VCU__MIG_CHUNK - 1) / VCU__MIG_CHUNK);
        if (vcu__mem_take(cs, nch * 8) != 0)
            return -1;
        m->pre_held += nch * 8;
        if ((e->hash = calloc(nch, 8)) == NULL)
            return -1;
        e->live = true;
        m->pre_n++;
    }
    qsort(m->pre_mem, m->pre_n, sizeof(vcu__mpre_t), vcu__mig_pre_cmp);
    return 0;
}

int vcu__cuda_sess_presave(vcu__cuda_sess_t *cs, int fd, uint64_t *left, char *why,
                           size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    uint64_t magic = VCU__MIG_MAGIC;

    why[0] = '\0';
    *left = 0;
    vcu__mig_pre_drop(cs);
    /* Refused before a byte is written: the session then moves whole at
     * the pause, which says why if it still cannot. */
    if (vcu__mig_refusal(cs) != NULL) {
        snprintf(why, whylen, "%s", vcu__mig_refusal(cs));
        return VCU_EBUSY;
    }
    if (cs->capture && vcu__any_capture(cs)) {
        snprintf(why, whylen, "a stream capture is in progress");
        return VCU_EBUSY;
    }
    if (vcu__mig_pre_list(cs) != 0) {
        vcu__mig_pre_drop(cs);
        snprintf(why, whylen, "out of host memory");
        return VCU_EBUSY;
    }
    m->pre_calls = m->n;
    if (vcu__mig_head_write(cs, fd, VCU__MIG_PRE, 0, m->pre_calls) != 0 ||
        vcu__mig_save_calls(cs, fd, 0, why, whylen) != 0 ||
        vcu__mig_write(fd, &magic, sizeof(magic)) != 0) {
        if (why[0] == '\0')
            snprintf(why, whylen, "writing the stream failed");
        vcu__mig_pre_drop(cs);
        return VCU_EINVAL;
    }
    m->pre = true;
    *left = vcu__mig_pre_left(m);
    return 0;
}

/*
 * [addr, addr + k) of device d into buf while the guest runs: on the
 * context's own non-blocking stream, which waits for none of the guest's
 * work (a host function in it may wait for the guest's answer, which
 * this thread would then never serve), with the thread's capture mode
 * relaxed (the guest may be capturing on this thread's streams).
 */
static int vcu__mig_pre_read(vcu__cuda_sess_t *cs, uint32_t d, uint64_t addr, size_t k,
                             unsigned char *buf)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool swapped;
    CUresult r;

    if (d >= cs->cu->ndev || cs->ctx[d] == NULL || cs->mstream[d] == NULL ||
        vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS)
        return -1;
    swapped = VCU__CU(cs->cu, cuThreadExchangeStreamCaptureMode, &mode) == CUDA_SUCCESS;
    r = VCU__CU(cs->cu, cuMemcpyDtoHAsync, buf, (CUdeviceptr)addr, k, cs->mstream[d]);
    if (r == CUDA_SUCCESS)
        r = cs->cu->fn.cuStreamSynchronize(cs->mstream[d]);
    if (swapped)
        (void)VCU__CU(cs->cu, cuThreadExchangeStreamCaptureMode, &mode);
    return r == CUDA_SUCCESS ? 0 : -1;
}

int vcu__cuda_sess_precopy(vcu__cuda_sess_t *cs, int fd, uint64_t *left, char *why,
                           size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    uint64_t magic = VCU__MIG_MAGIC, budget = VCU__MIG_PRE_BUDGET, v;
    struct vcu__mig_mem mh;
    unsigned char *buf = NULL;
    vcu__hpool_t hp;
    int rc = VCU_EINVAL;

    why[0] = '\0';
    *left = 0;
    vcu__hpool_init(&hp);
    if (!m->pre)
        VCU__MIG_FAIL("no pass before the pause began for this session");
    buf = vcu__mig_buf(cs);
    if (buf == NULL)
        VCU__MIG_FAIL("out of host memory");
    if (vcu__mig_head_write(cs, fd, VCU__MIG_CHUNKS, 0, 0) != 0)
        VCU__MIG_FAIL("writing the stream failed");
    while (m->pre_next < m->pre_n && budget > 0) {
        vcu__mpre_t *e = &m->pre_mem[m->pre_next];
        size_t k;

        if (!e->live || e->sent >= e->bytes || !vcu__pset_find(&cs->allocs, e->addr, &v)) {
            m->pre_next++;
            continue;
        }
        k = e->bytes - e->sent < VCU__MIG_CHUNK ? (size_t)(e->bytes - e->sent) : VCU__MIG_CHUNK;
        if (vcu__mig_pre_read(cs, e->dev, e->addr + e->sent, k, buf) != 0)
            VCU__MIG_FAIL("device memory at 0x%llx cannot be read",
                          (unsigned long long)(e->addr + e->sent));
        memset(&mh, 0, sizeof(mh));
        mh.addr = e->addr + e->sent;
        mh.bytes = k;
        mh.dev = e->dev;
        mh.flags = VCU__MIG_MEM_PART;
        if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 || vcu__mig_write(fd, buf, k) != 0)
            VCU__MIG_FAIL("writing the stream failed");
        e->hash[e->sent / VCU__MIG_CHUNK] = vcu__mig_chunk_hash(&hp, buf, k);
        e->sent += k;
        budget -= k < budget ? k : budget;
    }
    memset(&mh, 0, sizeof(mh));
    if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 || vcu__mig_write(fd, &magic, sizeof(magic)) != 0)
        VCU__MIG_FAIL("writing the stream failed");
    *left = vcu__mig_pre_left(m);
    rc = 0;
out:
    vcu__mig_buf_free(cs, buf);
    vcu__hpool_fini(&hp);
    return rc;
}

/* ---- load --------------------------------------------------------------- */

/* Makes one kept call again; its reply must be the one kept but for the
 * deferred error (nothing earlier is pending on the destination). */
static int vcu__mig_replay(vcu__cuda_sess_t *cs, size_t i, const vcu__mrec_t *e,
                           unsigned char *out, size_t cap, char *why, size_t whylen)
{
    struct vcu_req_hdr h = e->c.h;
    const unsigned char *p = e->b, *want = e->b + e->c.h.payload_len;
    struct vcu_cu_module_load_req lq;
    vcu_segment_t seg;
    struct iovec iov;
    vcu__cuda_wait_t *w = NULL;
    size_t out_len = 0;
    uint32_t st;

    memset(&seg, 0, sizeof(seg));
    if (e->c.ilen > 0) {
        iov.iov_base = (void *)(e->b + e->c.h.payload_len + e->c.rlen);
        iov.iov_len = (size_t)e->c.ilen;
        seg.iov = &iov;
        seg.iovcnt = 1;
        seg.len = e->c.ilen;
        seg.flags = VCU_SEG_TO_DEVICE;
        h.nsegs = 1;
        if (h.opcode == VCU_OP_CU_MODULE_LOAD_HASH) {
            /* The image travelled with the stream: loaded as sent. */
            memset(&lq, 0, sizeof(lq));
            memcpy(&lq.hdr, p, sizeof(lq.hdr));
            lq.image_len = e->c.ilen;
            h.opcode = VCU_OP_CU_MODULE_LOAD;
            h.payload_len = sizeof(lq);
            p = (const unsigned char *)&lq;
        }
    }
    st = vcu__cuda_exec(cs, &h, p, h.nsegs ? &seg : NULL, h.nsegs, out, cap, &out_len, NULL, &w);
    if (st == VCU__WAITING && w != NULL) {
        while (!vcu__cuda_wait_poll(cs, w))
            ;
        st = vcu__cuda_wait_finish(cs, w, NULL, &out_len);
    }
    if (vcu__mig_trace_level() > 0)
        vcu__mig_trace("made", i, &e->c.h, e->b, out, out_len);
    /* A capture's id is the driver's count, of no use once it ended. */
    if (h.opcode == VCU_OP_CU_STREAM_CAPTURE_GRAPH && out_len == e->c.rlen &&
        out_len >= offsetof(struct vcu_cu_capture_graph_resp, graph))
        memcpy(out + offsetof(struct vcu_cu_capture_graph_resp, id),
               want + offsetof(struct vcu_cu_capture_graph_resp, id), 8);
    if (st != VCU_S_OK || out_len != e->c.rlen || out_len < sizeof(struct vcu_cu_resp) ||
        memcmp(out, want, 4) != 0 ||
        memcmp(out + sizeof(struct vcu_cu_resp), want + sizeof(struct vcu_cu_resp),
               out_len - sizeof(struct vcu_cu_resp)) != 0) {
        uint64_t got = 0, had = 0;
        uint32_t res = 0;

        if (out_len >= 4)
            memcpy(&res, out, 4);
        if (out_len >= 16 && e->c.rlen >= 16) {
            memcpy(&got, out + 8, 8);
            memcpy(&had, want + 8, 8);
        }
        vcu__mig_trace_maps("made");
        snprintf(why, whylen,
                 "call 0x%04x came out otherwise here (status %u, result %u, value 0x%llx where "
                 "the source had 0x%llx): another driver, library layout or history",
                 e->c.h.opcode, st, res, (unsigned long long)got, (unsigned long long)had);
        return -1;
    }
    return 0;
}

static int vcu__mig_load_calls(vcu__cuda_sess_t *cs, int fd, uint64_t n, char *why,
                               size_t whylen)
{
    unsigned char *out = malloc(VCU_MAX_PAYLOAD);
    vcu__mrec_t e;
    uint64_t i;
    size_t len;
    int rc = -1;

    if (out == NULL) {
        snprintf(why, whylen, "out of host memory");
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (vcu__mig_read(fd, &e.c, sizeof(e.c)) != 0) {
            snprintf(why, whylen, "the stream ends inside the history");
            goto out;
        }
        if (e.c.h.payload_len > VCU_MAX_PAYLOAD || e.c.rlen > VCU_MAX_PAYLOAD ||
            e.c.ilen > VCU_MAX_XFER || e.c.h.nsegs != 0 ||
            e.c.h.payload_len < sizeof(struct vcu_cu_hdr)) {
            snprintf(why, whylen, "the stream's history is malformed");
            goto out;
        }
        len = e.c.h.payload_len + e.c.rlen + (size_t)e.c.ilen;
        len += (8 - len % 8) % 8;
        if ((e.b = malloc(len ? len : 1)) == NULL) {
            snprintf(why, whylen, "out of host memory");
            goto out;
        }
        if (vcu__mig_read(fd, e.b, len) != 0 ||
            vcu__mig_replay(cs, (size_t)i, &e, out, VCU_MAX_PAYLOAD, why, whylen) != 0) {
            if (why[0] == '\0')
                snprintf(why, whylen, "the stream ends inside the history");
            free(e.b);
            goto out;
        }
        free(e.b);
    }
    rc = 0;
out:
    free(out);
    return rc;
}

/* Is [mh->addr, + mh->bytes) what the replayed history made: an
 * allocation of the session, or (VCU__MIG_MEM_PART) a piece of one? */
static bool vcu__mig_mem_here(vcu__cuda_sess_t *cs, const struct vcu__mig_mem *mh)
{
    CUdeviceptr base = 0;
    size_t n = 0;
    uint64_t v;

    if (mh->flags & ~VCU__MIG_MEM_PART)
        return false;
    if (!(mh->flags & VCU__MIG_MEM_PART))
        return vcu__pset_find(&cs->allocs, mh->addr, &v) && VCU__ALLOC_DEV(v) == mh->dev &&
               vcu__mig_size(cs, mh->dev, mh->addr) == mh->bytes;
    if (mh->bytes == 0 || mh->dev >= cs->cu->ndev || cs->ctx[mh->dev] == NULL ||
        vcu__cur(cs, cs->ctx[mh->dev]) != CUDA_SUCCESS ||
        VCU__CU(cs->cu, cuMemGetAddressRange, &base, &n, (CUdeviceptr)mh->addr) != CUDA_SUCCESS)
        return false;
    return vcu__pset_find(&cs->allocs, base, &v) && VCU__ALLOC_DEV(v) == mh->dev &&
           mh->bytes <= n && mh->addr - base <= n - mh->bytes;
}

static int vcu__mig_load_mem(vcu__cuda_sess_t *cs, int fd, unsigned char *buf, char *why,
                             size_t whylen)
{
    struct vcu__mig_mem mh;
    int rc;

    for (;;) {
        if (vcu__mig_read(fd, &mh, sizeof(mh)) != 0) {
            snprintf(why, whylen, "the stream ends inside the device memory");
            return -1;
        }
        if (mh.addr == 0 && mh.flags == 0)
            return 0;
        /* Only what the replayed history allocated, as it was. */
        if (!vcu__mig_mem_here(cs, &mh)) {
            snprintf(why, whylen, "%s 0x%llx of the stream is not one here",
                     mh.flags ? "memory" : "allocation", (unsigned long long)mh.addr);
            return -1;
        }
        rc = vcu__mig_bytes(cs, mh.dev, mh.addr, mh.bytes, fd, 0, buf);
        if (rc != 0) {
            snprintf(why, whylen, rc == -2 ? "the stream ends inside allocation 0x%llx"
                                           : "writing allocation 0x%llx failed",
                     (unsigned long long)mh.addr);
            return -1;
        }
    }
}

static int vcu__mig_load_globals(vcu__cuda_sess_t *cs, int fd, unsigned char *buf, char *why,
                                 size_t whylen)
{
    struct vcu__mig_glob gh;
    char nm[VCU__MIG_NAME_MAX + 1];
    vcu__hent_t *he;
    CUdeviceptr a;
    size_t n;

    for (;;) {
        if (vcu__mig_read(fd, &gh, sizeof(gh)) != 0) {
            snprintf(why, whylen, "the stream ends inside the modules' globals");
            return -1;
        }
        if (gh.module == 0)
            return 0;
        if (gh.name_len == 0 || gh.name_len > VCU__MIG_NAME_MAX ||
            vcu__mig_read(fd, nm, gh.name_len) != 0) {
            snprintf(why, whylen, "the stream's module globals are malformed");
            return -1;
        }
        nm[gh.name_len] = '\0';
        he = vcu__htab_get(&cs->tab, gh.module, VCU__H_MODULE);
        a = 0;
        n = 0;
        if (he == NULL || VCU__CU(cs->cu, cuModuleGetGlobal, &a, &n, he->u.mod->mod, nm) !=
                              CUDA_SUCCESS ||
            a != gh.addr || n != gh.bytes) {
            snprintf(why, whylen, "module global %.64s is not where the source had it", nm);
            return -1;
        }
        if (vcu__mig_bytes(cs, he->u.mod->dev, a, n, fd, 0, buf) != 0) {
            snprintf(why, whylen, "the stream ends inside module global %.64s, or writing it failed",
                     nm);
            return -1;
        }
    }
}

/* Has the session run nothing yet? */
static bool vcu__mig_fresh(vcu__cuda_sess_t *cs)
{
    uint32_t d;

    for (d = 0; d < cs->cu->ndev; d++)
        if (cs->ctx[d] != NULL)
            return false;
    return cs->tab.live == 0 && cs->allocs.live == 0 && cs->mig->n == 0 && !cs->mig->pre_loaded;
}

/* What each kind of stream asks of the session it loads into: 0, or -1
 * with why. */
static int vcu__mig_load_check(vcu__cuda_sess_t *cs, const struct vcu__mig_head *hd, char *why,
                               size_t whylen)
{
    vcu__mig_t *m = cs->mig;

    switch (hd->kind) {
    case VCU__MIG_WHOLE:
    case VCU__MIG_PRE:
        if (!vcu__mig_fresh(cs)) {
            snprintf(why, whylen, "the session has run CUDA calls already");
            return -1;
        }
        return 0;
    case VCU__MIG_CHUNKS:
    case VCU__MIG_REST:
        if (!m->pre_loaded) {
            snprintf(why, whylen, "no pre-state was loaded into the session");
            return -1;
        }
        if (hd->kind == VCU__MIG_REST && hd->first != m->pre_calls) {
            snprintf(why, whylen, "the state continues a history of %llu calls, the session "
                     "has %llu", (unsigned long long)hd->first,
                     (unsigned long long)m->pre_calls);
            return -1;
        }
        if (hd->kind == VCU__MIG_CHUNKS && hd->ncalls != 0) {
            snprintf(why, whylen, "the stream's history is malformed");
            return -1;
        }
        return 0;
    }
    snprintf(why, whylen, "not a kind of state this worker reads (%u)", hd->kind);
    return -1;
}

int vcu__cuda_sess_load(vcu__cuda_sess_t *cs, int fd, char *why, size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    struct vcu__mig_head hd;
    unsigned char *buf = NULL;
    uint64_t magic = 0;
    uint32_t d;
    int rc = VCU_EINVAL;

    why[0] = '\0';
    if (vcu__mig_read(fd, &hd, sizeof(hd)) != 0 || hd.magic != VCU__MIG_MAGIC)
        VCU__MIG_FAIL("not a session's state");
    if (hd.version != VCU__MIG_VERSION)
        VCU__MIG_FAIL("state version %u, this worker reads %u", hd.version, VCU__MIG_VERSION);
    if (hd.driver_version != cs->cu->driver_version || hd.ndev != cs->cu->ndev)
        VCU__MIG_FAIL("the source had driver %d and %u devices, here driver %d and %u devices",
                      hd.driver_version, hd.ndev, cs->cu->driver_version, cs->cu->ndev);
    if (vcu__mig_load_check(cs, &hd, why, whylen) != 0)
        goto out;
    if (vcu__mig_load_calls(cs, fd, hd.ncalls, why, whylen) != 0)
        goto out;
    if (hd.kind == VCU__MIG_PRE) {
        m->pre_loaded = true;
        m->pre_calls = hd.ncalls;
    } else {
        /* After the history: its contexts pin the buffer. */
        buf = vcu__mig_buf(cs);
        if (buf == NULL)
            VCU__MIG_FAIL("out of host memory");
        if (vcu__mig_load_mem(cs, fd, buf, why, whylen) != 0)
            goto out;
        if (hd.kind != VCU__MIG_CHUNKS && vcu__mig_load_globals(cs, fd, buf, why, whylen) != 0)
            goto out;
    }
    if (vcu__mig_read(fd, &magic, sizeof(magic)) != 0 || magic != VCU__MIG_MAGIC)
        VCU__MIG_FAIL("the stream does not end where it should");
    if (hd.kind == VCU__MIG_WHOLE || hd.kind == VCU__MIG_REST) {
        for (d = 0; d < cs->cu->ndev; d++)
            if (cs->ctx[d] != NULL && (vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS ||
                                       cs->cu->fn.cuCtxSynchronize() != CUDA_SUCCESS))
                VCU__MIG_FAIL("device %u's context failed while loading", d);
        m->pre_loaded = false;
        m->pre_calls = 0;
    }
    rc = 0;
out:
    vcu__mig_buf_free(cs, buf);
    return rc;
}
