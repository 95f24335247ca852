/*
 * virtio-cuda-pci: what the device's parts share (virtio-cuda.c, the
 * queue and the link; virtio-cuda-migrate.c, its state in a migration).
 * Private to the device, not an interface.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef HW_VIRTIO_CUDA_INT_H
#define HW_VIRTIO_CUDA_INT_H

#include "hw/virtio/virtio-cuda.h"
#include "migration/vmstate.h"
#include "system/runstate.h"
#include "vcu_proxy.h"

/* A request the device took off the queue, until its reply is pushed. */
struct VirtIOCudaReq {
    VirtIOCuda *dev;
    VirtQueueElement *elem;
    vcu_request_t breq;

    /* The request stream, trimmed to header, payload and segment table. */
    uint8_t *buf;
    /* The reply, min(reply buffer, VIRTIO_CUDA_MAX_RESP) bytes. */
    uint8_t *resp;
    size_t resp_cap;
    uint64_t req_id;

    vcu_segment_t segs[VCU_MAX_SEGS];
    unsigned int nsegs;
    /* One iovec per range, in segment order; the first nmapped are mapped. */
    struct iovec *iov;
    /* Where each range lives in shared guest RAM, for the worker. */
    vcu_gref_t *ref;
    uint64_t niov;
    uint64_t nmapped;

    QTAILQ_ENTRY(VirtIOCudaReq) inflight_next;
    QSIMPLEQ_ENTRY(VirtIOCudaReq) complete_next;
};

/* virtio-cuda.c */
void virtio_cuda_notify(VirtIOCuda *s);
bool virtio_cuda_handle_req(VirtIOCuda *s, VirtQueueElement *elem);
void virtio_cuda_handle_output(VirtIODevice *vdev, VirtQueue *vq);
void virtio_cuda_complete_bh(void *opaque);
void virtio_cuda_link_bh(void *opaque);

/* virtio-cuda-migrate.c */
void virtio_cuda_vm_state_change(void *opaque, bool running, RunState state);
extern const VMStateDescription vmstate_virtio_cuda;
void virtio_cuda_migration_init(VirtIOCuda *s);
void virtio_cuda_migration_fini(VirtIOCuda *s);

#endif
