/*
 * Staging of large pageable copies in a session's worker process
 * (stage.c): a CU_MEMCPY_HTOD or CU_MEMCPY_DTOH whose one segment is many
 * scattered guest pages goes through a pinned buffer of the worker.
 */
#ifndef VCU_STAGE_H
#define VCU_STAGE_H

#include <sys/uio.h>

#include "vcu_backend.h"

typedef struct vcu_stage_s {
    void *buf;                      /* the staging buffer, NULL if not staged */
    vcu_segment_t guest;            /* the segment as it was */
    struct iovec one;               /* the segment's one iovec now */
    int out;                        /* DTOH: scatter at the reply (2: async) */
} vcu_stage_t;

/*
 * Before submission: if the request qualifies, points segs[0] at a
 * staging buffer (filled from the guest's pages for HTOD) and returns 1;
 * else changes nothing and returns 0.  st must then go to vcu_stage_out()
 * once the backend has completed the request, before the reply.
 */
int vcu_stage_in(vcu_backend_t *be, uint32_t opcode, uint32_t req_flags, vcu_segment_t *segs,
                 unsigned int nsegs, vcu_stage_t *st);

/* At completion: for a DTOH that succeeded, scatters the buffer to the
 * guest's pages; gives the buffer back.  resp is the backend's reply. */
void vcu_stage_out(vcu_stage_t *st, const void *resp, size_t resp_len);

#endif /* VCU_STAGE_H */
