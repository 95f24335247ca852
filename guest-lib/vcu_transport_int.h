/*
 * guest-lib transport internals shared by transport.c and loopback.c.
 * Private names: vcu__.
 */
#ifndef VCU_TRANSPORT_INT_H
#define VCU_TRANSPORT_INT_H

#include "vcu_transport.h"

typedef struct vcu__loop_s vcu__loop_t;

/* One session.  Every field is written by vcu_conn_open() only and read
 * afterwards without a lock: the kernel (or the loopback backend)
 * serializes what needs serializing, so calls may run in parallel. */
struct vcu_conn_s {
    int fd;                         /* /dev/vcudaN, or -1 for loopback */
    uint64_t features;              /* agreed VCU_FEAT_* */
    uint64_t max_xfer;
    uint32_t max_payload;
    uint32_t max_segs;
    vcu__loop_t *loop;              /* non-NULL: loopback transport */
};

/* Wire status (VCU_S_*) -> VCU_E* code: the one translation. */
int vcu__status_to_err(uint32_t status);

#ifdef VCU_WITH_LOOPBACK
/* loopback.c: an in-process host backend in place of the kernel. */
int vcu__loop_open(vcu_conn_t *c, uint64_t features);
void vcu__loop_close(vcu_conn_t *c);
int vcu__loop_call(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                   uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                   uint32_t resp_cap, uint32_t *resp_len, uint32_t *status);
#endif

#endif /* VCU_TRANSPORT_INT_H */
