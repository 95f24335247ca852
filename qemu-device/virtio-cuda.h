/*
 * virtio-cuda: paravirtualized GPU compute device
 *
 * Guest requests (include/vcu_proto.h) arrive on one virtqueue; their data
 * segments are mapped here and handed to the session proxy (vcu_proxy.h),
 * which sends each session's requests to its worker process, started by the
 * host daemon (vcu-daemon) that the chardev property names.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef QEMU_VIRTIO_CUDA_H
#define QEMU_VIRTIO_CUDA_H

#include "hw/virtio/virtio.h"
#include "chardev/char-fe.h"
#include "exec/memory.h"
#include "qemu/thread.h"
#include "qemu/queue.h"
#include "system/runstate.h"

#define TYPE_VIRTIO_CUDA "virtio-cuda-device"
OBJECT_DECLARE_SIMPLE_TYPE(VirtIOCuda, VIRTIO_CUDA)
#define VIRTIO_CUDA_GET_PARENT_CLASS(obj) \
        OBJECT_GET_PARENT_CLASS(obj, TYPE_VIRTIO_CUDA)

#define VIRTIO_CUDA_QUEUE_SIZE 1024

typedef struct VirtIOCudaReq VirtIOCudaReq;
typedef struct VirtIOCudaTx VirtIOCudaTx;
typedef struct VirtIOCudaPre VirtIOCudaPre;
typedef struct vcu_proxy_s VirtIOCudaProxy;

struct VirtIOCuda {
    VirtIODevice parent_obj;

    VirtQueue *vq;

    /* Properties */
    CharBackend chr;        /* the host daemon's socket */
    char *gpus;
    bool capture_printf;    /* device printf to the guest, not our stdout */
    uint32_t max_sessions;
    uint64_t mem_quota;     /* GPU memory of all sessions together, per GPU; 0: none */
    char *module_cache;     /* "shared" (NULL), "private" or "off" */
    uint32_t compute_share; /* weight among the group's VMs; 0: not in a group */
    uint32_t compute_cap;   /* percent of the GPU's time at most; 0: none */
    uint32_t sms;           /* packed mode: SMs of the VM's contexts; 0: isolated */

    /* One worker process per guest session (qemu-device/vcu_proxy.h). */
    VirtIOCudaProxy *proxy;
    /* Migration: the VM's state changes (a stop for a migration or a
     * snapshot drains the requests first); while stopped, nothing more
     * is taken off the queue (main loop, BQL). */
    VMChangeStateEntry *vmstate_entry;
    bool stopped;
    /*
     * The pass before the pause (virtio-cuda-migrate.c).  On a source,
     * the sessions whose pre-state went out and what each has still to
     * send; on a destination, the sessions a pre-state was loaded into.
     * The migration's thread only (or the incoming one).
     */
    VirtIOCudaPre *pre;
    unsigned int npre;

    /*
     * The daemon's link.  link_connected: the chardev is open (set on the
     * main loop, read by the proxy's threads).  link_txq: frames for the
     * daemon, queued from any thread under link_lock, written by link_bh.
     * The reader's state (main loop only): a frame being put together,
     * where it starts in the stream (link_rpos counts the bytes read), and
     * the descriptors received, in order, each with the span of the read
     * that brought it (it belongs to the last frame starting there).
     */
    bool link_connected;
    QemuMutex link_lock;
    QSIMPLEQ_HEAD(, VirtIOCudaTx) link_txq;
    QEMUBH *link_bh;
    uint8_t link_rbuf[16 + 4096];
    size_t link_rhave;
    uint64_t link_rpos;
    uint64_t link_fstart;
    struct {
        int fd;
        uint64_t start, end;
    } link_rfds[16];
    unsigned int link_nrfds;

    /* What the guest costs us, for the stats property (atomics). */
    uint64_t stat_kicks;    /* queue notifications handled */
    uint64_t stat_notifies; /* used-buffer notifications offered the guest */
    uint64_t stat_requests; /* requests handed to the proxy */

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
