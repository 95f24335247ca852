/*
 * virtio-cuda: paravirtualized GPU compute device
 *
 * Guest requests (include/vcu_proto.h) arrive on one virtqueue; their data
 * segments are mapped here and handed to the host backend library
 * (host-backend/vcu_backend.h), which runs each session's requests on a
 * worker thread of its own.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef QEMU_VIRTIO_CUDA_H
#define QEMU_VIRTIO_CUDA_H

#include "hw/virtio/virtio.h"
#include "exec/memory.h"
#include "qemu/thread.h"
#include "qemu/queue.h"

#define TYPE_VIRTIO_CUDA "virtio-cuda-device"
OBJECT_DECLARE_SIMPLE_TYPE(VirtIOCuda, VIRTIO_CUDA)
#define VIRTIO_CUDA_GET_PARENT_CLASS(obj) \
        OBJECT_GET_PARENT_CLASS(obj, TYPE_VIRTIO_CUDA)

#define VIRTIO_CUDA_QUEUE_SIZE 1024

typedef struct VirtIOCudaReq VirtIOCudaReq;
typedef struct vcu_proxy_s VirtIOCudaProxy;

struct VirtIOCuda {
    VirtIODevice parent_obj;

    VirtQueue *vq;

    /* Properties */
    char *gpus;
    char *libcuda;
    char *worker;           /* vcu-worker; default beside the QEMU binary */
    bool capture_printf;    /* device printf to the guest, not our stdout */
    uint32_t max_sessions;
    uint64_t mem_quota;     /* GPU memory of all sessions together, per GPU; 0: none */
    char *module_cache;     /* module cache directory; NULL: the default, "off": none */
    uint64_t module_cache_size;
    char *share_group;      /* compute-share group's file; NULL: the default */
    uint32_t compute_share; /* weight among the group's VMs; 0: not in a group */
    uint32_t compute_cap;   /* percent of the GPU's time at most; 0: none */
    uint32_t sms;           /* packed mode: SMs of the VM's contexts; 0: isolated */
    char *mps_pipe;         /* packed mode: the MPS control daemon's pipe directory */

    /* One worker process per guest session (host-backend/vcu_proxy.h). */
    VirtIOCudaProxy *proxy;
    Error *migration_blocker;

    /*
     * Requests handed to the backend and not yet completed, so that reset
     * and unrealize know what is outstanding.  Main loop (BQL) only.
     */
    QTAILQ_HEAD(, VirtIOCudaReq) inflight;
    unsigned int ninflight;
    /* Mapped ranges of the requests in flight (bounded, see .c). */
    uint64_t inflight_ranges;
    /* Popping stopped for lack of room; the completion BH resumes it. */
    bool throttled;

    /*
     * Requests the backend has finished, waiting for the bottom half.
     * Filled by the backend's done callback on any thread; emptied by
     * the BH and by reset on the main loop.  complete_lock protects this
     * list only; it is taken with or without the BQL and nothing else is
     * taken while holding it.
     */
    QemuMutex complete_lock;
    QSIMPLEQ_HEAD(, VirtIOCudaReq) completed;
    QEMUBH *complete_bh;
};

#endif
