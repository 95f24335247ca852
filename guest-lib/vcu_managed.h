/*
 * Managed memory emulated by shadowing (vcu_managed.c), shared by
 * libcudart.so.13 and libcuda.so.1.  Private names: vcu__.
 *
 * Errors: the functions return 0 or the library's own error code, the
 * one its vcu__m_ops.call returned or its .oom and .unknown: the layer
 * passes them on unchanged, so each library keeps its one translation.
 */
#ifndef VCU_MANAGED_H
#define VCU_MANAGED_H

#include <stddef.h>
#include <stdint.h>

#include "vcu_transport.h"

typedef struct vcu__m_ops_s {
    /*
     * One call to the host for program device dev, waited for, with none
     * of the library's own hooks (no managed coherence, no printf): req
     * starts with struct vcu_cu_hdr, resp (may be NULL) with struct
     * vcu_cu_resp.  Returns 0 or the library's error code.
     */
    int (*call)(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                unsigned int nbufs, void *resp, uint32_t resp_cap);
    /* The transport is loopback: device pointers are host pointers. */
    int (*loopback)(void);
    /* Bytes one copy request may carry. */
    uint64_t (*max_xfer)(void);
    /* Called under the layer's lock once a new allocation is ready: 0, or
     * non-zero to undo it (out of memory).  May be NULL. */
    int (*track)(int dev, uint64_t base, uint64_t size, unsigned int flags);
    int oom;                        /* the library's out-of-memory code */
    int unknown;                    /* its code for "the host said nonsense" */
    const char *name;               /* the allocating call, for messages */
} vcu__m_ops_t;

/* Defined by each library. */
extern const vcu__m_ops_t vcu__m_ops;

/* A managed allocation of size bytes on program device dev, zeroed;
 * freed by vcu__m_release and the device memory's CU_MEM_FREE. */
int vcu__m_alloc(int dev, size_t size, unsigned int flags, void **out);
/*
 * Forgets the managed allocation at base (its shadow goes): 0 with its
 * device and the device pointer to CU_MEM_FREE, which is the caller's;
 * -1 if base is no managed allocation's start.
 */
int vcu__m_release(uint64_t base, int *dev, uint64_t *dptr);
/*
 * Managed memory the driver made on the host (a module's __managed__
 * global: the allocation [base, base + size) on device dev) given a host
 * view here, kept coherent as the layer's own: the pages holding it are
 * mapped at their address, and only its bytes are copied (the driver packs
 * managed globals, each an allocation of its own, in shared pages, those
 * of several modules too: they share the view).  owner (not 0) names what
 * holds it (a module), for vcu__m_drop_owner.  0; -1 where it cannot have
 * one (the pages taken here by anything else); or the library's error
 * code.  Adopting it again is 0.  vcu__m_release refuses it.
 */
int vcu__m_adopt(int dev, uint64_t base, uint64_t size, uint64_t owner);
/* Forgets what owner adopted (its module was unloaded); a view goes with
 * the last of what it holds. */
void vcu__m_drop_owner(uint64_t owner);
/* 1 and the allocation holding p, or 0. */
int vcu__m_find(uint64_t p, uint64_t *base, uint64_t *size, int *dev);
/* Some managed allocation lives. */
int vcu__m_any(void);
/* Attachments (cudaMemAttach* and CU_MEM_ATTACH_* have these values). */
#define VCU__M_ATTACH_GLOBAL 0x1
#define VCU__M_ATTACH_HOST 0x2
#define VCU__M_ATTACH_SINGLE 0x4

/* Device work on dev's stream ws may touch managed memory (the regions
 * attached so, and those holding a or b, the managed ranges a copy names,
 * 0 for none): the host's writes go to the device first, and those
 * regions are busy until a wait covers them. */
int vcu__m_use(int dev, uint64_t ws, uint64_t a, uint64_t b);
/* A wait on dev's stream ws (UINT64_MAX: none known) returned, or on
 * all of the device (full): the device's writes come back. */
int vcu__m_sync(int dev, uint64_t ws, int full);
/* The allocation holding base is attached (VCU__M_ATTACH_*) to the host,
 * to device work on stream ws only, or to all of it
 * (cudaStreamAttachMemAsync: as of the call). */
int vcu__m_attach_to(uint64_t base, uint64_t ws, unsigned int flags);
/* The host's writes of the allocation at base go to the device now
 * (prefetch to the device). */
int vcu__m_flush_one(uint64_t base);
/* The device was reset: its managed allocations are gone. */
void vcu__m_forget_dev(int dev);

#endif /* VCU_MANAGED_H */
