/*
 * Session-local tables of the CUDA executor (cuda.c): typed handles and
 * the set of device allocations a session made.  Used on the session's
 * worker thread only: no locks.
 */
#ifndef VCU_CUDA_TAB_H
#define VCU_CUDA_TAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "vcu_proto.h"

/* Handle types; 0 marks a free slot. */
enum {
    VCU__H_FREE = 0,
    VCU__H_MODULE,
    VCU__H_FUNCTION,
    VCU__H_STREAM,
    VCU__H_EVENT,
    VCU__H_GRAPH,
    VCU__H_GRAPH_EXEC,
    VCU__H_GRAPH_NODE,
    VCU__H_POOL,
    VCU__H_VMM,                     /* a cuMemCreate allocation (cuda_vmm.c) */
    VCU__H_ARRAY,                   /* a CUDA array (cuda_array.c) */
    VCU__H_TEXOBJ,                  /* a texture object (cuda_array.c) */
    VCU__H_SURFOBJ,                 /* a surface object (cuda_array.c) */
    VCU__H_MIPMAP,                  /* a mipmapped array (cuda_array.c) */
    VCU__H_UOBJ,                    /* a user object (cuda_graph.c) */
    VCU__H_NTYPES
};

/* Most live handles per session (a quota: the guest cannot grow host
 * memory without bound). */
#define VCU__MAX_HANDLES (1u << 20)

/* cuda.c: a loaded module, counted by its guest handle and by the graphs
 * and graph execs whose kernel nodes use it; and a set of such modules. */
struct vcu__mod_s;
struct vcu__modset_s;
struct vcu__vmm_alloc_s;
struct vcu_cu_texobj_req;
struct vcu__uobj_s;
struct vcu__uref_s;

typedef struct vcu__hent_s {
    uint32_t gen;                   /* bumped when the slot is freed */
    uint8_t type;                   /* VCU__H_*; VCU__H_FREE when free */
    uint32_t dev;                   /* virtual device whose context owns it */
    /* The guest context number its request named (vcu_cu_hdr.ctx; 0: a
     * primary context): CU_CTX_DESTROY frees that number's modules,
     * streams and events.  Set by vcu__new. */
    uint32_t ctx;
    uint32_t next_free;             /* free list link (index + 1, 0 = end) */
    uint32_t xflags;                /* VCU__H_EVENT: its cuEventCreate flags */
    union {
        struct vcu__mod_s *mod;     /* holds one count of it */
        struct {
            CUfunction f;
            struct vcu__mod_s *mod; /* the module it came from (no count) */
            uint32_t nparams;
            uint32_t param_bytes;
            struct vcu_cu_param *params;    /* malloc'd, nparams entries */
        } fn;
        CUstream st;
        CUevent ev;
        struct {
            CUgraph g;
            struct vcu__modset_s *mods;     /* modules its kernel nodes use */
            /* Nonzero: the graph of this capture (CU_STREAM_CAPTURE_GRAPH),
             * the capture's, never destroyed here. */
            uint64_t cap_id;
            /* Nonzero: a body graph of a conditional node of graph
             * parent (the driver's, destroyed with it, never here); root
             * is the graph at the top of its parents, whose modules set
             * holds the body's kernels' modules too. */
            uint64_t parent;
            uint64_t root;
            /* Nonzero: a child graph node's own graph (parent: the node's
             * graph; root as a body's), named for the guest by
             * CU_GRAPH_CHILD_GRAPH; goes with node, its owner. */
            uint64_t owner;
            /* References to user objects the guest gave it (malloc'd, in
             * the budget): what it may release, and at least what it
             * holds. */
            struct vcu__uref_s *urefs;
            uint32_t nurefs;
        } graph;
        struct {
            CUgraphExec ge;
            struct vcu__modset_s *mods;
            uint64_t gmem;          /* bytes of its graph's allocation nodes */
            bool gmapped;           /* launched since graph memory was last released */
        } exec;
        struct {
            CUgraphNode n;
            uint64_t graph;         /* handle of the graph it belongs to */
            uint64_t child;         /* a child graph node's graph handle, or 0 */
        } node;
        struct {
            struct vcu__uobj_s *rec;        /* shared with the destructor */
            uint32_t grefs;                 /* references the guest holds */
        } uobj;
        CUmemoryPool pool;
        struct vcu__vmm_alloc_s *vmm;       /* the record, which owns the entry */
        struct {
            CUarray a;
            uint64_t charge;        /* of the VM's quota, on dev */
            uint32_t width, height, depth;  /* as created */
            uint8_t elem;           /* bytes per element */
            uint32_t level;         /* a mipmapped array's level: which */
            uint64_t parent;        /* ... and its handle (the owner), else 0 */
        } arr;
        struct {
            CUmipmappedArray m;
            uint64_t charge;        /* of the VM's quota, on dev, every level */
            uint32_t width, height, depth;  /* level 0 */
            uint32_t flags;         /* CUDA_ARRAY3D_* */
            uint32_t levels;
            uint8_t elem;
        } mip;
        struct {
            uint64_t obj;           /* the driver's CUtexObject or CUsurfObject */
            struct vcu_cu_texobj_req *desc;  /* as created (malloc'd, in the budget) */
        } tex;
    } u;
} vcu__hent_t;

typedef struct vcu__htab_s {
    vcu__hent_t *ent;
    uint32_t cap;
    uint32_t live;
    uint32_t free_head;             /* index + 1 of the first free slot, 0 = none */
} vcu__htab_t;

void vcu__htab_init(vcu__htab_t *t);
/* Frees the table and every function's parameter layout; does not call CUDA. */
void vcu__htab_fini(vcu__htab_t *t);
/* New slot of the given type; returns its handle (>= VCU_CU_HANDLE_MIN) or
 * 0 when out of memory or over VCU__MAX_HANDLES. */
uint64_t vcu__htab_add(vcu__htab_t *t, uint8_t type, uint32_t dev, vcu__hent_t **out);
/* Bytes the next vcu__htab_add() allocates (0 when it reuses a slot):
 * the table grows by doubling and never shrinks. */
size_t vcu__htab_grow_bytes(const vcu__htab_t *t);
/* The live entry of that type, index and generation, or NULL. */
vcu__hent_t *vcu__htab_get(vcu__htab_t *t, uint64_t h, uint8_t type);
/* Frees the slot of a handle vcu__htab_get() accepted. */
void vcu__htab_del(vcu__htab_t *t, uint64_t h);
/* Handle of entry index i (for scans), or 0 if the slot is free. */
uint64_t vcu__htab_handle_at(const vcu__htab_t *t, uint32_t i);

/* Set of device pointers: key -> value (device, flags, bytes charged). */
typedef struct vcu__pset_s {
    uint64_t *keys;                 /* 0 empty, VCU__PSET_TOMB deleted */
    uint64_t *vals;
    uint32_t cap;                   /* power of two, or 0 */
    uint32_t used;                  /* live + tombstones */
    uint32_t live;
} vcu__pset_t;

#define VCU__PSET_TOMB UINT64_MAX

void vcu__pset_init(vcu__pset_t *s);
void vcu__pset_fini(vcu__pset_t *s);
/* 0 or VCU_ENOMEM. key must not be 0 or VCU__PSET_TOMB. */
int vcu__pset_add(vcu__pset_t *s, uint64_t key, uint64_t val);
/* 1 and *val if present, else 0. */
int vcu__pset_find(const vcu__pset_t *s, uint64_t key, uint64_t *val);
void vcu__pset_del(vcu__pset_t *s, uint64_t key);

#endif /* VCU_CUDA_TAB_H */
