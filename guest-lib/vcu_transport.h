/*
 * guest-lib transport: one session with the virtio-cuda device.
 *
 * A connection is an open /dev/vcudaN with its session opened and the
 * protocol version checked.  vcu_conn_call() is thread safe: many threads
 * may have calls in flight on one connection.
 *
 * Tests can run the same library with no VM: when the environment names a
 * loopback transport (VCU_TRANSPORT=loopback, only in builds made with
 * VCU_WITH_LOOPBACK, which link the host backend in), calls go straight to
 * an in-process host backend instead of the kernel.
 */
#ifndef VCU_TRANSPORT_H
#define VCU_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "vcu_proto.h"


typedef struct vcu_conn_s vcu_conn_t;

typedef struct vcu_buf_s {
    void *addr;                     /* guest user memory */
    uint64_t len;
    uint32_t flags;                 /* VCU_SEG_TO_DEVICE or VCU_SEG_FROM_DEVICE */
} vcu_buf_t;

/*
 * Opens the device (path NULL: $VCU_DEVICE, else "/dev/vcuda0"), opens a
 * session asking for features, checks the protocol version.  Returns 0 or a
 * VCU_E* code; on success the caller owns *out and frees it with
 * vcu_conn_close().
 */
int vcu_conn_open(const char *path, uint64_t features, vcu_conn_t **out);
void vcu_conn_close(vcu_conn_t *c);

uint64_t vcu_conn_features(const vcu_conn_t *c);

/* Calls flags (VCU_CALL_*). */
#define VCU_CALL_ASYNC (1u << 0)    /* do not wait for the reply (resp ignored) */

/*
 * Sends one request and waits for its reply.  req/resp are the opcode's
 * payloads (without the wire headers); *resp_len gets the reply payload
 * length (may be NULL).  Returns 0 when the device answered VCU_S_OK,
 * otherwise the VCU_E* code of the device's status or of the local failure.
 */
int vcu_conn_call(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                  uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                  uint32_t resp_cap, uint32_t *resp_len);

/*
 * Page-locked host memory for cudaMallocHost: len bytes (rounded up to
 * pages, zeroed) mapped from the driver (mmap of the connection's file),
 * physically contiguous in chunks and never moved.  *stable is set to 1
 * when segments inside the block may be used by the host after the reply
 * (the driver sends them as VCU_SEG_F_STABLE; loopback runs every request
 * to its end before returning, so there all memory counts as stable), and
 * to 0 for the fallback: anonymous locked memory, for a driver without
 * mmap (ENODEV, EINVAL).  Returns 0 or a VCU_E* code; the caller owns *out
 * and gives it back with vcu_conn_hostmem_free(c, *out, len) after the
 * work that uses it has finished.
 */
int vcu_conn_hostmem_alloc(vcu_conn_t *c, size_t len, void **out, int *stable);
void vcu_conn_hostmem_free(vcu_conn_t *c, void *p, size_t len);

/*
 * cudaHostRegister: the driver pins [p, p + len) until
 * vcu_conn_host_unregister(c, p, len) or the connection closes, and sends
 * segments inside it as stable (VCUDA_IOC_HOST_REGISTER).  *stable says
 * whether it did: 0 (and 0 returned) with a driver without the ioctl
 * (ENOTTY); in loopback, whether the in-process backend's driver
 * registered it.  Returns 0 or a VCU_E* code,
 * VCU_EBUSY when the range overlaps a registration already there.
 */
int vcu_conn_host_register(vcu_conn_t *c, void *p, size_t len, int *stable);
void vcu_conn_host_unregister(vcu_conn_t *c, void *p, size_t len);

/* errno (positive or negative) -> VCU_E* code: the one translation. */
int vcu_errno_to_err(int errnum);

#endif /* VCU_TRANSPORT_H */
