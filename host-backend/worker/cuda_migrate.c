/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Migration (docs/design.md, "Live migration"): the history of a
 * session's calls that its state is rebuilt from, and the stream's
 * layout.
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
 * This file keeps the history and reads module images' globals;
 * cuda_migrate_stream.c writes and reads the stream, cuda_migrate_pre.c
 * is the pass before the pause (cuda_migrate_int.h).  Worker thread only,
 * like the rest of the session's state.
 */
#define _GNU_SOURCE                 /* memmem */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_migrate_int.h"
#include "vcu_fatbin.h"

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
    VCU__MC_IPC,
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
    /* Another process of the VM holds the memory or event, on this host. */
    [VCU__MC_IPC] = "CUDA IPC",
};

static const uint8_t vcu__mig_ops[0x0800] = {
    [VCU_OP_CU_IPC_GET_MEM_HANDLE] = VCU__MC_IPC,
    [VCU_OP_CU_IPC_OPEN_MEM_HANDLE] = VCU__MC_IPC,
    [VCU_OP_CU_IPC_CLOSE_MEM_HANDLE] = VCU__MC_IPC,
    [VCU_OP_CU_IPC_GET_EVENT_HANDLE] = VCU__MC_IPC,
    [VCU_OP_CU_IPC_OPEN_EVENT_HANDLE] = VCU__MC_IPC,
    [VCU_OP_CU_MEM_EXPORT_SHAREABLE] = VCU__MC_IPC,
    [VCU_OP_CU_MEM_IMPORT_SHAREABLE] = VCU__MC_IPC,
    [VCU_OP_CU_MEMPOOL_EXPORT_SHAREABLE] = VCU__MC_IPC,
    [VCU_OP_CU_MEMPOOL_IMPORT_SHAREABLE] = VCU__MC_IPC,
    [VCU_OP_CU_MEMPOOL_EXPORT_POINTER] = VCU__MC_IPC,
    [VCU_OP_CU_MEMPOOL_IMPORT_POINTER] = VCU__MC_IPC,
    [VCU_OP_CU_CTX_SET_FLAGS] = VCU__MC_REPLAY,
    [VCU_OP_CU_CTX_SET_LIMIT] = VCU__MC_REPLAY,
    [VCU_OP_CU_CTX_RESET] = VCU__MC_REPLAY,
    [VCU_OP_CU_MEM_ALLOC] = VCU__MC_REPLAY,
    [VCU_OP_CU_MEM_FREE] = VCU__MC_REPLAY,
    [VCU_OP_CU_CTX_DESTROY] = VCU__MC_REPLAY,
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
    [VCU_OP_CU_NVLINK_INFO] = VCU__MC_IGNORE,
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
    [VCU_OP_CU_MEMPOOL_SET_ACCESS] = VCU__MC_POOLS,
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
int vcu__mig_trace_level(void)
{
    static int level = -1;

    if (level < 0) {
        const char *s = getenv("VCU_MIG_TRACE");

        level = s != NULL && (s[0] == '1' || s[0] == '2') && s[1] == '\0' ? s[0] - '0' : 0;
    }
    return level;
}

void vcu__mig_trace(const char *side, size_t i, const struct vcu_req_hdr *h,
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
void vcu__mig_trace_maps(const char *side)
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
int vcu__image_globals(const unsigned char *img, size_t len, vcu__glob_cb cb, void *arg)
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
