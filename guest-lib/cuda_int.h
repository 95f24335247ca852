/*
 * libcuda.so.1 internals: the CUDA Driver API over the wire protocol's
 * CUDA opcodes (the same transport libcudart.so.13 uses).  Private names:
 * vcu__.
 *
 * Handles (CUcontext, CUmodule, CUfunction, CUstream, CUevent) are
 * pointers to objects this library allocates, validated through the
 * handle registry (vcu_common.h) before they are dereferenced; the host's
 * handles stay inside them.  The host runs one context per device per
 * session: every context of a device here shares it (docs/driver-api.md).
 *
 * Lock order: vcu__drv.lock (devices, primary contexts, module function
 * lists) -> the registry's own lock (a leaf).  vcu__drv.lock is held
 * across a call to the host in two places only, both rare: the first
 * CU_DEVICE_INFO of a device and a module function's first lookup
 * (neither an opcode the managed hooks act on).  The managed memory lock
 * (vcu_managed.c) is taken by vcu__call's hooks and cuda_managed.c with
 * no other lock of this library held, and held across calls to the host
 * (vcu__call_raw only).  cuda_hostmem.c's list lock is a leaf, never held
 * across a call to the host.
 */
#ifndef VCU_CUDA_INT_H
#define VCU_CUDA_INT_H

#include <pthread.h>
#include <stdint.h>

/* As NVIDIA builds its driver: cuda.h then declares every ABI variant
 * under its own exported name (cuMemAlloc and cuMemAlloc_v2, ..._ptds)
 * instead of mapping the plain names to the newest. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "cuda_gen.h"
#include "vcu_calls.h"
#include "vcu_common.h"
#include "vcu_stage.h"
#include "vcu_transport.h"

#define VCU__EXPORT __attribute__((visibility("default")))
/* The Driver API version this library implements (the headers it is
 * built against): the most cuDriverGetVersion reports. */
#define VCU__API_VERSION CUDA_VERSION

/* Registry kinds (vcu_common.h). */
enum {
    VCU__K_CTX = 1,
    VCU__K_MODULE,
    VCU__K_FUNCTION,
    VCU__K_STREAM,
    VCU__K_EVENT,
    VCU__K_LIBRARY,
    VCU__K_KERNEL,
    VCU__K_POOL,
    VCU__K_GRAPH,
    VCU__K_GNODE,
    VCU__K_GEXEC,
    VCU__K_ARRAY,
    VCU__K_MIPMAP,
    VCU__K_UOBJ,
};

/* A context-local storage entry (cuda_export.c). */
typedef struct vcu__cls_s vcu__cls_t;

typedef struct vcu__ctx_s {
    int dev;                        /* program ordinal */
    int primary;
    vcu__cls_t *cls;                /* under vcu__drv.lock */
    int cache_config;               /* CUfunc_cache: cuCtxSetCacheConfig's hint */
    unsigned int flags;             /* a created context's, as made or set (cuCtxGetFlags) */
    unsigned long long id;          /* cuCtxGetId: unique in the process, set once */
    uint32_t number;                /* a created context's vcu_cu_hdr.ctx; 0: primary */
} vcu__ctx_t;

/* What a runtime registers with a context-local value: called with the
 * context, the key and the value when the context goes (destroyed,
 * primary released to zero or reset). */
typedef void (*vcu__cls_dtor_t)(CUcontext ctx, void *key, void *value);

typedef struct vcu__dev_s {
    uint32_t vord;                  /* virtual ordinal on the wire */
    int info_loaded;                /* under vcu__drv.lock */
    struct vcu_cu_device_info_resp info;
    unsigned int pci_domain, pci_bus, pci_device;
    vcu__ctx_t *primary;            /* allocated at first retain, never freed */
    int primary_refs;               /* under vcu__drv.lock */
    unsigned int primary_flags;
} vcu__dev_t;

typedef struct vcu__drv_s {
    pthread_once_t once;
    CUresult conn_err;              /* written once in the once routine */
    int initialized;                /* cuInit succeeded; atomic */
    vcu_conn_t *conn;
    uint64_t max_xfer;
    int driver_version;             /* the host's, at most VCU__API_VERSION */
    unsigned int gen[VCU_CU_MAX_DEVICES];   /* bumped at each context reset: the
                                             * host's streams of the device are gone;
                                             * atomic */
    int async;                      /* stream-ordered calls may go without waiting:
                                     * VCU_FEAT_ASYNC agreed, VCU_SYNC_CALLS not 1 */
    int ndev;
    vcu__dev_t dev[VCU_CU_MAX_DEVICES];
    pthread_mutex_t lock;
} vcu__drv_t;

extern vcu__drv_t vcu__drv;

typedef struct vcu__func_s vcu__func_t;

/* Objects keep the device of the context that made them: the host's
 * context of that device holds them, and every context of the device may
 * use them. */
typedef struct vcu__module_s {
    int dev;
    uint64_t h;                     /* host handle */
    vcu__func_t *funcs;             /* under vcu__drv.lock */
    /* What its kernels are read from (vcu__module_kernels): a library's
     * module, its library's image; any other, a copy of the image as
     * sent, owned.  Set at the load, read-only after. */
    struct vcu__library_s *lib;
    void *image;
    uint64_t image_len;
} vcu__module_t;

struct vcu__func_s {
    vcu__module_t *mod;
    uint64_t h;
    char *name;
    uint32_t nparams;
    uint32_t param_bytes;
    struct vcu_cu_param *params;
    vcu__func_t *next;
    /* What a launch must respect to go without waiting (vcu__launch_may_defer):
     * 0 not asked yet, VCU__LIM_NEVER never (the kernel needs clusters),
     * else VCU__LIM_KNOWN | max dynamic shared memory << 32 | max threads
     * per block.  Atomic; cleared when an attribute is set. */
    uint64_t lim;
    uint32_t lim_block[3], lim_grid[3];     /* the device's, written before lim */
};

#define VCU__LIM_KNOWN (1ull << 31)
#define VCU__LIM_NEVER UINT64_MAX

/* A stream serves every context of its device, as NVIDIA's may be
 * synchronized, queried and destroyed from any context. */
typedef struct vcu__stream_s {
    int dev;
    uint64_t h;
    unsigned int flags;             /* as created */
    int priority;                   /* as the host's driver clamped it */
    unsigned long long id;          /* cuStreamGetId: unique in the process */
} vcu__stream_t;

/* Ids of contexts and streams (cuCtxGetId, cuStreamGetId); the default
 * streams have 1 (legacy) and 2 (per-thread). */
unsigned long long vcu__next_id(void);

typedef struct vcu__event_s {
    int dev;
    uint64_t h;
    /* Interprocess (created so, or opened by handle): its records wait
     * for the host, so that another process told of a record finds it
     * made, as natively (docs/design.md, "CUDA IPC"). */
    int ipc;
} vcu__event_t;

/* A pool handle names the host's pool of one device: the session's own
 * (the default pool, made at the first ask and kept for the life of the
 * process) or one cuMemPoolCreate made or another process's this one
 * imported (created; freed by cuMemPoolDestroy) (cuda_pool.c). */
typedef struct vcu__pool_s {
    int dev;
    int created;
    int imported;                   /* another process's (cuMemPoolImportFromShareableHandle) */
    uint64_t h;
    /* Other devices' access (CUmemAccess_flags), as cuMemPoolSetAccess
     * last set it; atomic. */
    unsigned char access[VCU_CU_MAX_DEVICES];
} vcu__pool_t;

/* Graphs, their nodes and executable graphs (cuda_graph.c). */
typedef struct vcu__gnode_s {
    uint64_t h;
    struct vcu__graph_s *g;
    struct vcu__gnode_s *next;
    /* What cuGraph*NodeGetParams answer: the parameters last given here,
     * of kind VCU_CU_NODE_* (0: not known here, as a captured node's).
     * A kernel's kernelParams point into kbuf, its packed copy.  Under
     * vcu__drv.lock. */
    uint32_t kind;
    union {
        CUDA_KERNEL_NODE_PARAMS kernel;
        CUDA_MEMCPY3D copy;
        CUDA_MEMSET_NODE_PARAMS set;
        CUDA_HOST_NODE_PARAMS host;
        CUevent event;              /* EVENT_RECORD, EVENT_WAIT */
    } p;
    char *kbuf;
    CUgraph *bodies;                /* a conditional node's phGraph_out, freed with it */
    /* A child graph node's graph (cuGraphChildGraphNodeGetGraph), made at
     * the first ask, on g's bodies; goes with the node.  Under
     * vcu__drv.lock. */
    struct vcu__graph_s *child;
} vcu__gnode_t;

typedef struct vcu__graph_s {
    int dev;
    uint64_t h;
    vcu__gnode_t *nodes;            /* newest first; under vcu__drv.lock */
    size_t nnodes;
    /* A capture's graph (cuStreamGetCaptureInfo's graph_out): nonzero
     * capture id while the capture owns it, and on vcu__cap_graphs.  Both
     * under vcu__drv.lock. */
    uint64_t cap_id;
    struct vcu__graph_s *cap_next;
    /* cuStreamGetCaptureInfo's dependency list (and its default edges),
     * valid until the next such call: made at the first ask. */
    CUgraphNode *deps_out;
    CUgraphEdgeData *edges_out;
    vcu__stages_t stages;           /* its pageable copies' (vcu_stage.h) */
    /* A conditional node's body graph: the graph holding the node (it
     * goes with it; never destroyed by itself).  A graph's bodies, linked
     * by body_next.  Under vcu__drv.lock. */
    struct vcu__graph_s *parent;
    struct vcu__graph_s *bodies;
    struct vcu__graph_s *body_next;
} vcu__graph_t;

typedef struct vcu__gexec_s {
    int dev;
    uint64_t h;
    vcu__stages_t stages;           /* its graph's, when instantiated */
} vcu__gexec_t;

/* A library (cuda_library.c): context-independent; a module of its own
 * image in each device where it is used, loaded at the first use. */
typedef struct vcu__kernel_s vcu__kernel_t;

typedef struct vcu__library_s {
    void *image;                    /* a copy */
    uint64_t len;
    char src_id[160];               /* where the copy came from (vcu__module_src_id) */
    vcu__module_t *mod[VCU_CU_MAX_DEVICES];     /* under vcu__drv.lock */
    /* 1: it has no code for that device (found at the first ask, in the
     * guest: vcu__module_load_dev).  Under vcu__drv.lock. */
    unsigned char nobin[VCU_CU_MAX_DEVICES];
    vcu__kernel_t *kernels;         /* under vcu__drv.lock */
} vcu__library_t;

struct vcu__kernel_s {
    vcu__library_t *lib;
    char *name;
    vcu__kernel_t *next;
};

/* A function handle, or a kernel's function in the current context
 * (cuda_library.c). */
CUresult vcu__func_arg(CUfunction hfunc, vcu__func_t **out);

/*
 * The generated remote calls' helpers (cuda_remote.c, used by the
 * forwarders gen-cuda.py writes from cuda_calls.list).  A call runs on
 * one device: its first CUdevice argument's (vcu__rc_at_dev), else its
 * first handle's (vcu__rc_at_obj: an object's own device; a default
 * stream or a CUkernel, the current context's), else the current
 * context's (vcu__rc_at_ctx).  Every handle argument must be of that
 * device.
 */
typedef struct vcu__rc_s {
    int dev;
} vcu__rc_t;

CUresult vcu__rc_at_ctx(vcu__rc_t *rc);
CUresult vcu__rc_at_dev(vcu__rc_t *rc, CUdevice dev);
CUresult vcu__rc_at_obj(vcu__rc_t *rc, int kind, const void *h, int ptsz);
/* A handle argument of kind VCU__K_* -> its wire handle; ptsz: NULL is
 * the per-thread default stream. */
CUresult vcu__rc_handle(vcu__rc_t *rc, int kind, const void *h, int ptsz, uint64_t *wire);
/* A device argument -> its virtual ordinal. */
CUresult vcu__rc_device(CUdevice dev, uint64_t *wire);
/* Sends a CU_CALL request (req starts with its struct vcu_cu_call_req)
 * and waits for the reply (resp starts with struct vcu_cu_resp). */
CUresult vcu__rc_call(vcu__rc_t *rc, uint32_t call, struct vcu_cu_call_req *req, uint32_t req_len,
                      struct vcu_cu_resp *resp, uint32_t resp_cap);

/* Opens the session once (no cuInit needed); returns its result. */
CUresult vcu__connect(void);
/* CUDA_ERROR_NOT_INITIALIZED before cuInit. */
CUresult vcu__check_init(void);
/* cuInit done and the device valid. */
CUresult vcu__check_dev(CUdevice dev);
/* The calling thread's current context: CUDA_ERROR_NOT_INITIALIZED
 * before cuInit, CUDA_ERROR_INVALID_CONTEXT with none or a destroyed one. */
CUresult vcu__cur(vcu__ctx_t **out);
/* vcu__cur for a caller that goes on without a context (not traced). */
CUresult vcu__cur_quiet(vcu__ctx_t **out);
/* The calling thread's current context's number (vcu_cu_hdr.ctx) where it
 * is a created context of device dev, else 0: what a request that makes
 * something in it says, for a caller that has no context at hand. */
uint32_t vcu__cur_number(int dev);
/*
 * One call to the host for program device dev, waiting for the reply.
 * req starts with struct vcu_cu_hdr (filled here), resp (may be NULL)
 * with struct vcu_cu_resp.  Returns the call's CUresult, or an earlier
 * async call's deferred one.
 */
CUresult vcu__call(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                   unsigned int nbufs, void *resp, uint32_t resp_cap);
/*
 * A stream-ordered call sent without waiting for its reply where the
 * session agreed to that (else exactly vcu__call with no reply): the
 * caller has checked everything CUDA checks at the call, so that only
 * what happens on the GPU is left to fail, and that is reported by a
 * later call, as CUDA reports it (the host defers it to the next reply).
 */
CUresult vcu__call_async(int dev, uint32_t op, void *req, uint32_t req_len,
                         const vcu_buf_t *bufs, unsigned int nbufs);
/* vcu__call without its hooks (device printf, managed memory): for the
 * managed layer's own calls. */
CUresult vcu__call_raw(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                       unsigned int nbufs, void *resp, uint32_t resp_cap);
/*
 * May this launch go without waiting (cuda_library.c)?  Only where
 * everything the driver checks at the call is known to pass here: the
 * kernel's thread and shared memory limits (asked of the host once per
 * function), the device's block and grid limits, no cluster the kernel
 * requires, no launch flags.
 */
int vcu__launch_may_defer(vcu__func_t *f, const unsigned int grid[3], const unsigned int block[3],
                          unsigned int shmem, uint32_t flags);
/* cuda_graph.c, for cuda_graph_mem.c: the graph record behind a CUgraph
 * (checked; initialized); a record for node h just added to g, kept by
 * g (NULL: out of memory); a record for host graph h of device dev. */
CUresult vcu__graph_arg(CUgraph graph, vcu__graph_t **out);
vcu__gnode_t *vcu__gnode_new(vcu__graph_t *g, uint64_t h);
CUresult vcu__graph_wrap(int dev, uint64_t h, CUgraph *out);
/* hNode, checked to be a node record, in *out. */
CUresult vcu__gnode_arg(CUgraphNode hNode, vcu__gnode_t **out);
/* A request of struct size n, then the dependencies' host handles (each a
 * node of g), then extra_len bytes of extra, in a new buffer (*out, *len;
 * the caller frees it). */
CUresult vcu__deps_req(vcu__graph_t *g, const void *req, size_t n, const CUgraphNode *deps,
                       size_t ndeps, const void *extra, size_t extra_len, void **out,
                       size_t *len);
/* Between cuda_graph.c (graphs, nodes), cuda_capture.c (stream capture)
 * and cuda_graph_edit.c (editing, updates); each is described where it is
 * defined.  cuda_graph.c: */
void vcu__graph_free(vcu__graph_t *g);
void vcu__keep_kernel(vcu__gnode_t *n, const CUDA_KERNEL_NODE_PARAMS *p, const vcu__func_t *f,
                      const char *params);
void vcu__keep(vcu__gnode_t *n, uint32_t kind, const void *p, size_t len);
CUresult vcu__kernel_req(vcu__graph_t *g, const CUDA_KERNEL_NODE_PARAMS *p, CUkernel kern,
                         struct vcu_cu_graph_node_req *r, char *params, vcu__func_t **fo);
CUresult vcu__copy_req(vcu__graph_t *g, const CUDA_MEMCPY3D *m, struct vcu_cu_graph_node_req *r,
                       const char *who);
CUresult vcu__memset_req(const CUDA_MEMSET_NODE_PARAMS *p, struct vcu_cu_graph_node_req *r);
/* cuda_capture.c: */
vcu__gnode_t *vcu__gnode_of(vcu__graph_t *g, uint64_t h);
/* cuda_graph_edit.c: */
/* Whether every edge's data is the default (ed NULL: yes). */
int vcu__edges_default(const CUgraphEdgeData *ed, size_t n);
/* cuGraphAdd/RemoveDependencies (add 1/0) of n edges, with their data
 * (cuda_graph_edit.c); who names the call in a log line. */
CUresult vcu__graph_edges(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                          const CUgraphEdgeData *ed, size_t n, int add, const char *who);
CUresult vcu__list(vcu__graph_t *g, uint64_t gh, uint64_t nh, uint32_t what, CUgraphNode *a,
                   CUgraphNode *b, size_t *num);
/* cuda_graph_mem.c, for cuda_capture.c: the caller's graph the capture on
 * stream (host handle) of dev goes into, taken off the list as the
 * capture ends, or NULL; the caller's graph of host handle h some
 * capture goes into, or NULL. */
vcu__graph_t *vcu__cap_to_take(int dev, uint64_t stream);
vcu__graph_t *vcu__cap_to_find(int dev, uint64_t h);
/* The device memory this process was given (cuda_ranges.c): a stream-
 * ordered copy or memset of a known range may go without waiting. */
void vcu__dr_add(int dev, uint64_t base, uint64_t size);

/* cuda_ipc.c: shareable handles.  Whether device dev offers POSIX
 * descriptors by attr (said once per call, once the caller's flag); the
 * calling thread's device, else 0; the program's descriptor for a host's
 * handle (a sealed memfd holding it); a descriptor's handle back
 * (CUDA_ERROR_INVALID_VALUE if it is no such memfd). */
CUresult vcu__share_on(const char *call, CUdevice_attribute attr, int dev, int *once);
int vcu__share_dev(void);
CUresult vcu__share_fd(const struct vcu_cu_ipc_handle *h, int *out);
CUresult vcu__share_read(void *osHandle, struct vcu_cu_ipc_handle *h);
/* The program's ordinal of the VM's virtual one, or -1. */
int vcu__prog_of(uint32_t vord);
void vcu__dr_del(uint64_t base);
void vcu__dr_forget_dev(int dev);
int vcu__dr_known(int dev, uint64_t p, uint64_t n);
/* Is p device memory (cuda_hostmem.c): this library's pinned and
 * registered memory is not; else where the host knows an allocation. */
CUresult vcu__is_device(int dev, CUdeviceptr p, int *is_dev);
/* cuMemcpy2D* with an array or unified side, as a 3D copy (cuda_array.c). */
CUresult vcu__copy2d_array(const CUDA_MEMCPY2D *p, int async, CUstream stream, int ptsz);
/* The allocation of this process's holding p, of any device (its
 * range, buffer ID and device): 1, or 0 where none is known; and a new
 * buffer ID for an allocation made elsewhere (unique in the process). */
int vcu__dr_find(uint64_t p, uint64_t *base, uint64_t *size, uint64_t *id, int *dev);
uint64_t vcu__buffer_id_new(void);
/* Whether [p, p + n) lies in page-locked memory of this library's own
 * (cuMemHostAlloc) that copies may use after their call (cuda_hostmem.c). */
int vcu__hm_stable(const void *p, size_t n);
/* The device pointer through which the device reaches [p, p + n), all in
 * one page-locked or registered allocation of this library's (the host
 * maps it at the first ask); CUDA_ERROR_INVALID_VALUE for any other host
 * memory (cuda_hostmem.c). */
CUresult vcu__host_range_dptr(const void *p, size_t n, CUdeviceptr *out);
/* *p, if it is in this library's host memory (span bytes), made the
 * device pointer it is mapped at, as unified addressing lets a program
 * name it (cuda_hostmem.c). */
CUresult vcu__host_as_dev(uint64_t *p, uint64_t span);
/* Each word of a kernel's parameters (n bytes) that points into this
 * library's host memory: that memory mapped on the device, and the word
 * made its device pointer (cuda_hostmem.c). */
CUresult vcu__host_params(char *buf, size_t n);
/* VCU_E* -> CUresult: the one translation. */
CUresult vcu__from_vcu(int err);
/* Program stream -> wire handle, for work of ctx (a stream of another
 * device is CUDA_ERROR_INVALID_HANDLE).  ptsz: NULL means the per-thread
 * default stream. */
CUresult vcu__stream(vcu__ctx_t *ctx, CUstream s, int ptsz, uint64_t *wire);
CUresult vcu__stream_alone(CUstream s, int ptsz, int *dev, uint64_t *wire);
CUresult vcu__stream_ctx(vcu__ctx_t **c, CUstream s, int ptsz, uint64_t *wire);

/*
 * Asks the host for a new object (op with its request and data; the
 * reply, a vcu_cu_u64_resp and nothing more, is the handle, into *h) for
 * the guest object obj, and registers obj as kind.  If obj cannot be
 * registered, the host's object is dropped again (drop_op).  The caller
 * frees obj on failure (cuda_module.c).
 */
CUresult vcu__host_obj_new(const void *obj, int kind, int dev, uint32_t op, void *req,
                           uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs,
                           uint32_t drop_op, uint64_t *h);
/* cuModuleLoadData's size of an image (cuda_module.c): *image moves past
 * nvcc's wrapper; avail is what is known to be there, or UINT64_MAX. */
CUresult vcu__image_size(const void **image, uint64_t avail, uint64_t *size);
/* A module image file read whole, one NUL more; the caller frees *buf
 * (cuda_module.c). */
CUresult vcu__read_image(const char *fname, char **buf, size_t *n);
/* A module from len bytes of image, in the current context's device or
 * in device dev (for a library's module: lib, whose image it is). */
CUresult vcu__module_load(CUmodule *module, const void *image, uint64_t len);
/* lib: the library whose copy image is (its module keeps it, and the
 * module cache names it by where the copy came from), or NULL. */
CUresult vcu__module_load_dev(int dev, CUmodule *module, const void *image, uint64_t len,
                              struct vcu__library_s *lib);
/* The function of that name in m (one handle per name and module). */
CUresult vcu__module_function(vcu__module_t *m, const char *name, vcu__func_t **out);
/* A module global; managed (may be NULL): managed memory, given a host view here
 * (cuda_module.c). */
CUresult vcu__module_global(CUdeviceptr *dptr, size_t *bytes, int *managed, CUmodule hmod,
                            const char *name);
/* kernel's function in device dev, with no current context needed
 * (cuda_library.c). */
CUresult vcu__kernel_function_dev(CUkernel kernel, int dev, CUfunction *out);
/* Each kernel of m, in its image's order, once each: fn(arg, f) (with
 * vcu__drv.lock not held); *count the number of calls (fn NULL: only
 * counted, no function made).  Read from the image in the guest
 * (include/vcu_kernels.h): CUDA_ERROR_NOT_SUPPORTED where that is not read
 * here (logged once). */
CUresult vcu__module_kernels(vcu__module_t *m, void (*fn)(void *arg, CUfunction f), void *arg,
                             unsigned int *count);
/* The kernel names of an image for device dev's architecture, each once,
 * in its order: *names (n of them) the caller's, for vcu__names_free. */
CUresult vcu__image_kernel_names(const void *img, uint64_t len, int dev, char ***names,
                                 unsigned int *n);
void vcu__names_free(char **names, unsigned int n);

/*
 * One copy kind (VCU_OP_CU_MEMCPY_HTOD/DTOH/DTOD) of n bytes, in pieces of
 * the session's transfer limit (cuda_mem.c).  host: the host side (NULL
 * for DTOD).  async: ordered in stream (ptsz: NULL names the per-thread
 * default stream), else synchronous.
 */
CUresult vcu__copy(uint32_t op, uint64_t dst, uint64_t src, void *host, size_t n, int async,
                   CUstream stream, int ptsz);
/*
 * A copy between device memory dptr and host memory on stream hs while
 * it captures: a memcpy node of the capture's graph (cuda_capture.c).
 * *done 0: hs does not capture, the copy is the caller's.
 */
CUresult vcu__capture_copy(vcu__ctx_t *c, uint64_t hs, uint32_t op, uint64_t dptr, void *host,
                           size_t n, int *done);
/* 1 if stream hs (host handle) of c is capturing (cuda_capture.c; asks the
 * host only while a capture begun here has not ended). */
int vcu__stream_capturing(vcu__ctx_t *c, uint64_t hs);

/* A launch's parameter buffer (f->param_bytes) from kernelParams or
 * extra (cuda_exec.c). */
CUresult vcu__pack(const vcu__func_t *f, void **kernelParams, void **extra, char *buf);
/* A persistent host-function cookie for a graph host node, or 0
 * (cuda_hostfn.c). */
uint64_t vcu__hostfn_cookie(CUhostFn fn, void *arg);
/* Frees a graph host node's cookie (a stage's, once no graph runs it). */
void vcu__hostfn_forget(uint64_t cookie);
/* A function the host hands over once, with no stream (a user object's
 * destructor): its cookie, forgotten when it runs; 0 if out of memory. */
uint64_t vcu__hostfn_once(CUhostFn fn, void *arg);

/* The device's primary context, made at the first ask and never freed;
 * not retained here. */
CUresult vcu__primary(CUdevice dev, vcu__ctx_t **out);

/* Device printf (cuda_drv.c): a module image was loaded (see whether it
 * uses printf); a call to the host returned (take the captured output
 * after one that flushes it). */
void vcu__printf_module(const void *image, uint64_t len);
void vcu__printf_after(int dev, uint32_t op, const void *req);

/* Managed memory (cuda_managed.c).  Around a call to the host: before
 * it, the host's writes of managed memory the call's device work may
 * touch go to the device; after a wait, the device's come back. */
CUresult vcu__managed_before(int dev, uint32_t op, const void *req);
CUresult vcu__managed_after(int dev, uint32_t op, const void *req);
/* p is a managed allocation's start: 1, it is freed, *res the result;
 * else 0. */
int vcu__managed_free(CUdeviceptr p, CUresult *res);
/* 1 and the managed allocation holding p, or 0. */
int vcu__managed_find(CUdeviceptr p, uint64_t *base, uint64_t *size, int *dev);

/* VCU_LIBCUDA_TRACE=1 is set. */
int vcu__tracing(void);
int vcu__tracing_modules(void);

/* cuda_export.c: the private table with this UUID, or NULL. */
const void *vcu__export_table(const CUuuid *id);
/* Calls and forgets every context-local value of c (the caller holds no
 * lock: the destructors call back into this library). */
void vcu__cls_destroy(vcu__ctx_t *c);
/* A UUID in memory byte order, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void vcu__uuid_fmt(const void *id, char buf[37]);

#endif /* VCU_CUDA_INT_H */
