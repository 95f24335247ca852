/*
 * guest-lib transport internals shared by transport.c and the tests'
 * loopback transport (tests/loopback/loopback.c).
 * Private names: vcu__.
 */
#ifndef VCU_TRANSPORT_INT_H
#define VCU_TRANSPORT_INT_H

#include "vcu_transport.h"

typedef struct vcu__loop_s vcu__loop_t;
typedef struct vcu__batch_s vcu__batch_t;

/* One session.  Every field is written by vcu_conn_open() only and read
 * afterwards without a lock: the kernel (or the loopback backend)
 * serializes what needs serializing, so calls may run in parallel; the
 * batch (batch.c) has a lock of its own. */
struct vcu_conn_s {
    int fd;                         /* /dev/vcudaN, or -1 for loopback */
    uint64_t features;              /* agreed VCU_FEAT_* */
    uint64_t max_xfer;
    uint32_t max_payload;
    uint32_t max_segs;
    vcu__loop_t *loop;              /* non-NULL: loopback transport */
    vcu__batch_t *batch;            /* with VCU_FEAT_BATCH: the async requests coalesced */
};

/* Sends one request as it is (vcu_conn_call without the batch). */
int vcu__conn_send(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                   uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                   uint32_t resp_cap, uint32_t *resp_len);

/* batch.c.  vcu__batch_add() returns 0 (appended or sent), a VCU_E* code
 * (of this send or an earlier batch's), or VCU__BATCH_NOT_TAKEN: the
 * caller sends it.  vcu__batch_flush() sends the batch, if any, and
 * returns the error of a batch that could not be sent since the last
 * call, once. */
#define VCU__BATCH_NOT_TAKEN 1
int vcu__batch_open(vcu_conn_t *c);
void vcu__batch_close(vcu_conn_t *c);
int vcu__batch_add(vcu_conn_t *c, uint32_t opcode, const void *req, uint32_t req_len);
int vcu__batch_flush(vcu_conn_t *c);

/* What a connection's batch has done; all 0 without one (tests). */
typedef struct vcu__batch_stats_s {
    uint64_t batches;               /* CU_BATCH requests sent */
    uint64_t entries;               /* requests sent in them */
    uint64_t alone;                 /* batchable requests sent at once, alone */
    unsigned int pending;           /* entries waiting now */
} vcu__batch_stats_t;
void vcu__batch_stats(vcu_conn_t *c, vcu__batch_stats_t *st);

/* Wire status (VCU_S_*) -> VCU_E* code: the one translation. */
int vcu__status_to_err(uint32_t status);

#ifdef VCU_WITH_LOOPBACK
/* tests/loopback/loopback.c: an in-process host backend in place of the
 * kernel (test builds only). */
int vcu__loop_open(vcu_conn_t *c, uint64_t features);
void vcu__loop_close(vcu_conn_t *c);
int vcu__loop_call(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                   uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                   uint32_t resp_cap, uint32_t *resp_len, uint32_t *status);
/* Page-locked memory of this process registered with the in-process
 * backend's driver (as a worker registers guest RAM), so that the device
 * reaches it at its own address; 0 or a VCU_E* code. */
int vcu__loop_add_ram(vcu_conn_t *c, void *p, size_t len);
void vcu__loop_remove_ram(vcu_conn_t *c, void *p, size_t len);
#endif

#endif /* VCU_TRANSPORT_INT_H */
