/*
 * libcudart.so.13 internals: the CUDA runtime API built on the Driver API
 * opcodes of the wire protocol.  Private names: vcu__.
 *
 * Lock order (outer first): vcu__rt.reg_lock (fatbins, kernels, module
 * loads) -> vcu__rt.dev_lock (device info cache) -> the handle registry's
 * and the allocation table's own locks (leaf locks, never held across a
 * call to the host).  The managed memory lock (vcu_managed.c) is taken
 * with none of the first two held, before the allocation table's, and is
 * held across calls to the host.
 */
#ifndef VCU_CUDART_INT_H
#define VCU_CUDART_INT_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime_api.h>
/* The wire structs of the generated calls (CU_CALL) name driver types. */
#include <cuda.h>

#include "vcu_common.h"
#include "vcu_transport.h"
#include "vcu_calls.h"

#define VCU__EXPORT __attribute__((visibility("default")))
#define VCU__CUDART_VERSION 13000

/* One device the program sees (after CUDA_VISIBLE_DEVICES). */
typedef struct vcu__dev_s {
    uint32_t vord;                  /* virtual ordinal on the wire */
    int info_loaded;                /* under dev_lock */
    struct vcu_cu_device_info_resp info;
    int pci_domain, pci_bus, pci_device;
    cudaError_t sticky;             /* a sticky context error, until reset */
    unsigned int flags;             /* cudaSetDeviceFlags */
    void *default_pool;             /* vcu__pool_t *, under dev_lock */
    int pending;                    /* async calls sent since the last context
                                     * synchronize; atomic, may be stale high */
} vcu__dev_t;

typedef struct vcu__rt_s {
    pthread_once_t once;
    cudaError_t init_err;           /* written once in the once routine */
    vcu_conn_t *conn;
    uint64_t max_xfer;
    int async;                      /* send stream-ordered calls without waiting:
                                     * VCU_FEAT_ASYNC agreed and VCU_SYNC_CALLS
                                     * not 1 */
    int driver_version;
    int ndev;                       /* visible devices */
    vcu__dev_t dev[VCU_CU_MAX_DEVICES];
    pthread_mutex_t reg_lock;
    pthread_mutex_t dev_lock;
} vcu__rt_t;

extern vcu__rt_t vcu__rt;

/* ---- errors (cudart_err.c) ---------------------------------------------- */
cudaError_t vcu__from_cu(uint32_t cu_result);       /* CUresult -> cudaError_t */
cudaError_t vcu__from_vcu(int err);                 /* VCU_E* -> cudaError_t */
/* Records e as the thread's last error (and a sticky one on the current
 * device) and returns it: every entry point returns through it. */
cudaError_t vcu__err(cudaError_t e);
cudaError_t vcu__err_dev(int dev, cudaError_t e);
int vcu__is_sticky(cudaError_t e);

#define VCU__NOT_SUPPORTED(name, why)                                                \
    do {                                                                             \
        static int vcu__once_;                                                       \
        vcu__log_once(&vcu__once_, "virtio-cuda: %s is not supported%s%s\n", name,   \
                      (why)[0] ? ": " : "", why);                                    \
        return vcu__err(cudaErrorNotSupported);                                      \
    } while (0)

/* ---- core (cudart.c) ---------------------------------------------------- */
extern __thread int vcu__cur_dev;

cudaError_t vcu__init(void);
/* Init, check the current device and its sticky error; *dev = current. */
cudaError_t vcu__enter(int *dev);
cudaError_t vcu__check_dev(int dev);
/*
 * One CUDA call to the host on program device dev.  req starts with
 * struct vcu_cu_hdr (filled here), resp (may be NULL) with struct
 * vcu_cu_resp.  Returns the call's result, or the deferred error of an
 * earlier async call.  async: may be sent without waiting.
 */
cudaError_t vcu__call(int dev, uint32_t op, int async, void *req, uint32_t req_len,
                      const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                      uint32_t resp_cap);
cudaError_t vcu__dev_info(int dev, const struct vcu_cu_device_info_resp **out);
int vcu__dev_attr(int dev, int attr);

/*
 * Synchronizes every device that async calls were sent to since its last
 * synchronize (cudaFreeHost: the host may still use the memory).  Returns
 * the first error, deferred ones included.
 */
cudaError_t vcu__sync_pending(void);

/* Occupancy answers kept per function: a cooperative launch checks its
 * grid against them before it is sent without waiting. */
#define VCU__OCC_CACHE 4
typedef struct vcu__occ_s {
    uint32_t block;
    uint32_t dyn_smem;
    uint32_t blocks;                /* per SM; valid where block != 0 */
} vcu__occ_t;

/*
 * Kernels registered by __cudaRegisterFunction, per device.  fn, nparams,
 * param_bytes and params are written once (under reg_lock) before fn
 * becomes non-zero and read without a lock after; attrs and occ change
 * with cudaFuncSetAttribute and are read and written under reg_lock.
 */
typedef struct vcu__kfn_s {
    uint64_t fn;                    /* host handle; 0 until looked up */
    uint32_t nparams;
    uint32_t param_bytes;
    struct vcu_cu_param *params;
    int have_attrs;                 /* attrs valid: launches may go async */
    int32_t attrs[VCU_CU_NUM_FUNC_ATTRS];   /* CU_FUNC_GET_ATTRS */
    vcu__occ_t occ[VCU__OCC_CACHE];
    unsigned int occ_next;          /* round-robin slot to replace */
} vcu__kfn_t;

typedef struct vcu__kernel_s vcu__kernel_t;
vcu__kernel_t *vcu__kernel_by_host(const void *hostfn);
/* The kernel's function on dev, loading its module first if needed. */
cudaError_t vcu__kernel_fn(vcu__kernel_t *k, int dev, const vcu__kfn_t **out);
/* Packs args into buf (VCU_CU_MAX_PARAM_BYTES) by the host's offsets. */
cudaError_t vcu__pack_params(const vcu__kfn_t *f, void **args, void *buf);
cudaError_t vcu__symbol(const void *sym, int dev, uint64_t *dptr, uint64_t *size);

/* ---- kinds of the handle registry (vcu_common.h) ---------------------- */
enum {
    VCU__H_STREAM = 1,
    VCU__H_EVENT,
    VCU__H_GRAPH,
    VCU__H_GRAPH_EXEC,
    VCU__H_NODE,
    VCU__H_KERNEL,
    VCU__H_POOL,
    VCU__H_UOBJ,
};

/* ---- graphs (cudart_graph.c), for cudart_graph_mem.c -------------------- */
/* Node kinds of this library beyond the protocol's VCU_CU_NODE_*. */
#define VCU__RT_NODE_MEM_ALLOC 0x101u
#define VCU__RT_NODE_MEM_FREE 0x102u
#define VCU__RT_NODE_COND 0x103u
/* The device and host handle of a graph (checked). */
cudaError_t vcu__graph_host(cudaGraph_t graph, int *dev, uint64_t *h);
/* The host handles of ndeps nodes of graph, into out. */
cudaError_t vcu__graph_deps(cudaGraph_t graph, const cudaGraphNode_t *deps, size_t ndeps,
                            uint64_t *out);
/* A record for node h (of kind) just added to graph, kept by it. */
cudaError_t vcu__graph_node_new(cudaGraph_t graph, uint64_t h, uint32_t kind,
                                cudaGraphNode_t *out);
cudaError_t vcu__graph_node_host(cudaGraphNode_t node, int *dev, uint64_t *h, uint32_t *kind);
/* Gives node p (malloc'd), freed with it. */
void vcu__graph_node_own(cudaGraphNode_t node, void *p);
/* cudart_graph_mem.c: the caller's graph the capture on stream (host
 * handle) of dev goes into, taken off the list as it ends, or NULL; the
 * caller's graph of host handle h some capture goes into, or NULL. */
cudaGraph_t vcu__cap_to_take(int dev, uint64_t stream);
cudaGraph_t vcu__cap_to_find(int dev, uint64_t h);
/* A record for body graph h of a conditional node of parent, freed with it. */
cudaError_t vcu__graph_body_new(cudaGraph_t parent, uint64_t h, cudaGraph_t *out);

/* ---- memory (cudart_mem.c) ---------------------------------------------- */
enum { VCU__M_DEVICE = 1, VCU__M_HOST, VCU__M_REGISTERED, VCU__M_SYMBOL, VCU__M_MANAGED };
typedef struct vcu__alloc_s {
    uint64_t base, size;
    int dev;
    int kind;
    unsigned int flags;
    int stable;                     /* VCU__M_HOST from the driver: async copies allowed */
    uint64_t dptr;                  /* VCU__M_HOST: device pointer of base, 0 not asked yet */
} vcu__alloc_t;
int vcu__mem_add(const vcu__alloc_t *a);
int vcu__mem_find(uint64_t addr, vcu__alloc_t *out);
/* The device pointer of [p, p + len) of one page-locked or registered
 * allocation (the host maps it at the first ask); 0: none such. */
uint64_t vcu__rt_host_range_dptr(uint64_t p, uint64_t len);
/* The page-locked host pointers among a kernel's parameters (n bytes)
 * mapped on the device, and made its device pointers where they differ. */
void vcu__rt_host_params(void *buf, size_t n);
int vcu__mem_del(uint64_t base, int kind, vcu__alloc_t *out);
void vcu__mem_forget_dev(int dev);
/* [p, p + len) lies inside one known device allocation or symbol of dev. */
int vcu__dev_range_known(int dev, uint64_t p, uint64_t len);
/* [p, p + len) lies inside one stable host allocation. */
int vcu__host_range_stable(const void *p, uint64_t len);
/* 1 if p is in a device allocation, symbol or managed allocation (its
 * device in *dev, unless NULL). */
int vcu__is_dev_ptr(const void *p, int *dev);
/* A device allocation of dev (async: ordered in stream, from pool),
 * tracked; cudaMalloc's and the stream-ordered allocator's
 * (cudart_pool.c). */
cudaError_t vcu__malloc(int dev, void **p, size_t size, int async, uint64_t stream,
                        uint64_t pool);

/* A copy between device and host memory (kind HostToDevice or
 * DeviceToHost) on stream ws of dev while it captures: a memcpy node of
 * the capture's graph (cudart_capture.c).  *done 0: ws does not capture,
 * the copy is the caller's. */
cudaError_t vcu__capture_copy(int dev, uint64_t ws, void *dst, const void *src, size_t n,
                              enum cudaMemcpyKind kind, int *done);
/* 1 if stream ws of dev is capturing (cudart_capture.c; asks the host only
 * while a capture begun here has not ended). */
int vcu__stream_capturing(int dev, uint64_t ws);

/* ---- managed memory (cudart_managed.c over vcu_managed.c) --------------- */
/* Before device work on stream ws of dev that may touch managed memory:
 * sends the host's writes, counts the device as writing. */
cudaError_t vcu__managed_use(int dev, uint64_t ws);
/* vcu__managed_use where a or b (may be NULL) is managed memory. */
cudaError_t vcu__managed_touch(int dev, uint64_t ws, const void *a, const void *b);
/* After a wait for stream ws of dev (full: for the whole device): copies
 * back what the device may have written. */
cudaError_t vcu__managed_sync(int dev, uint64_t ws, int full);
/* Managed pointers are device memory to a copy: rewrites *kind. */
void vcu__managed_kind(const void *dst, const void *src, enum cudaMemcpyKind *kind);
/* cudaFree of a managed pointer; cudaErrorInvalidValue if it is not one. */
cudaError_t vcu__managed_free(void *p);
void vcu__managed_forget_dev(int dev);

/* ---- streams (cudart_stream.c) ------------------------------------------ */
typedef struct vcu__stream_s {
    int dev;
    uint64_t h;
    unsigned int flags;
    int priority;
    unsigned long long id;          /* cudaStreamGetId; unique in the process */
    int sync_policy;                /* cudaSynchronizationPolicy: recorded only */
} vcu__stream_t;
/* Program stream -> device and wire handle.  ptsz: stream 0 means the
 * per-thread default stream. */
cudaError_t vcu__stream(cudaStream_t s, int ptsz, int *dev, uint64_t *wire);
/* A host callback record for CU_STREAM_HOST_FUNC and graph host nodes. */
uint64_t vcu__cb_new(void (*fn)(void *), cudaStreamCallback_t cb, cudaStream_t s, void *arg,
                     int persistent);
void vcu__cb_free(uint64_t cookie);
cudaError_t vcu__cb_start(void);
/* An event's device and wire handle (cudart_stream.c). */
cudaError_t vcu__event_host(cudaEvent_t ev, int *dev, uint64_t *h);

/* Launch shared by cudaLaunchKernel, graphs and __cudaLaunchKernel. */
cudaError_t vcu__launch(vcu__kernel_t *k, dim3 grid, dim3 block, void **args, size_t shmem,
                        cudaStream_t stream, int ptsz, uint32_t flags);
cudaError_t vcu__check_config(int dev, dim3 grid, dim3 block, size_t shmem);

/* ---- device printf (cudart_printf.c) ------------------------------------ */
/* A module image was loaded: notes whether it uses printf. */
void vcu__printf_module(const void *image, uint64_t len);
/* After a call to the host that returned (vcu__call): if it flushes
 * device printf, writes the output the host collected to stdout. */
void vcu__printf_after(int dev, uint32_t op, const void *req);
/* At exit: synchronizes and writes what is left, once. */
void vcu__printf_exit(void);

#endif /* VCU_CUDART_INT_H */
