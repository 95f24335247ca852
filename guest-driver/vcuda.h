/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * virtio-cuda guest driver: private declarations shared by virtio_cuda.c
 * (virtio driver, character device, ioctls, host memory mappings) and
 * vcuda_req.c (building, queueing and completing requests).
 *
 * Lock order (outer first):
 *   vcuda_dev.files_lock   (mutex; open, release and the sessions file only,
 *                           nothing else taken under it)
 *   vcuda_file.open_lock   (mutex; SESSION_OPEN only)
 *   mm->mmap_lock          (mmap() runs under it; SUBMIT takes it for reading
 *                           to look up host memory mappings)
 *   vcuda_file.hostmem_lock (spinlock; process context only)
 *   vcuda_dev.reqs xa_lock (plain spinlock; never taken in interrupt context)
 *   vcuda_dev.vq_lock      (spinlock, irq-safe; taken by the vq callback)
 * Nothing sleeps under a spinlock, and no lock is held while the host works
 * on a request.
 */
#ifndef VCUDA_H
#define VCUDA_H

#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/scatterlist.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/virtio.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "vcu_proto.h"
#include "vcuda_ioctl.h"

/* Request stream chunk: order-4 at most, one scatterlist entry each. */
#define VCUDA_CHUNK_SIZE (64u * 1024)
/* Largest VCUDA_IOC_RAW_SUBMIT request stream. */
#define VCUDA_RAW_MAX (1u << 20)
/* Requests one open file may have on the device before SUBMIT waits. */
#define VCUDA_FILE_MAX_INFLIGHT 256
/* How long release() waits for ring space to send SESSION_CLOSE. */
#define VCUDA_CLOSE_WAIT (5 * HZ)

struct vcuda_dev {
	struct kref ref;		/* probe, and each open file and request */
	struct virtio_device *vdev;	/* valid until remove() */
	struct virtqueue *vq;		/* valid while !gone, under vq_lock */
	bool indirect;			/* VIRTIO_RING_F_INDIRECT_DESC negotiated */
	unsigned int vring_size;

	/*
	 * Protects vq (add, kick, get_buf, detach), gone, vq_gen and every
	 * request's queued/completed/orphan state.  Taken in process context
	 * with irqs off and by the vq callback in interrupt context.
	 */
	spinlock_t vq_lock;
	bool gone;			/* remove() has started; no new requests */
	unsigned long vq_gen;		/* bumped when the callback frees ring space */
	/* What the guest pays per call (sysfs stats), under vq_lock. */
	u64 stat_requests;		/* requests queued */
	u64 stat_kicks;			/* notifications sent to the device (exits) */
	u64 stat_irqs;			/* queue interrupts taken */
	wait_queue_head_t vq_wait;	/* submitters waiting for ring space */

	/*
	 * Every request the driver owns, from build to free, keyed by req_id
	 * (ids allocated cyclically, 1..U32_MAX, never two live at once).
	 * Own xa_lock; process context only.
	 */
	struct xarray reqs;
	u32 next_id;			/* xa_alloc_cyclic cursor, under reqs' xa_lock */

	atomic_t inflight;		/* requests on the device now */
	atomic_long_t pinned_pages;	/* user pages pinned now */
	atomic_long_t hostmem_pages;	/* pages of host memory mappings not yet freed */

	u32 minor;
	struct cdev *cdev;
	struct device *class_dev;

	/*
	 * Every open file of this device, for the sessions attribute (which
	 * guest process holds which session: the guest's NVML joins it with
	 * the host's per-session figures).  Taken by open(), release() and
	 * the attribute's reader; no other lock is taken under it.
	 */
	struct mutex files_lock;
	struct list_head files;		/* vcuda_file.node */
};

/* One per open file: the session. */
struct vcuda_file {
	struct kref ref;		/* the open file, and each request it sent */
	struct vcuda_dev *dev;		/* holds a device reference */
	struct list_head node;		/* on dev->files from open() to release() */
	struct pid *pid;		/* opener's thread group, referenced */
	char comm[TASK_COMM_LEN];	/* opener's name at open() */
	struct mutex open_lock;		/* serialises SESSION_OPEN */
	u64 session;			/* 0 until opened; set once under open_lock */
	atomic_t inflight;		/* this file's requests on the device */
	wait_queue_head_t slot_wait;	/* SUBMIT waiting for inflight to drop */

	/* Protects the fields below.  Process context only. */
	spinlock_t hostmem_lock;
	u64 hostmem_bytes;		/* of this file's host memory, not yet freed */
	bool released;			/* release() ran: no more fences */
	bool close_lost;		/* SESSION_CLOSE could not be sent */
	/*
	 * Host memory whose fence failed or was never sent: the host may use
	 * it until the session ends, so it is freed when vf is (after the
	 * SESSION_CLOSE request, which holds a reference, completed).
	 */
	struct list_head hostmem_dead;
	/* Registered user memory (VCUDA_IOC_HOST_REGISTER), by ->reg. */
	struct list_head regs;
};

/* Physically contiguous piece of a host memory mapping. */
struct vcuda_hostmem_chunk {
	struct page *page;		/* 2^order pages, not compound */
	unsigned int order;
	u64 off;			/* byte offset in the mapping */
};

/*
 * One mmap() of /dev/vcudaN: driver-owned memory that SUBMIT sends as
 * physical ranges without pinning.  Never split, moved or expanded, so it
 * always covers its VMA exactly.  When the last reference goes, a
 * SESSION_FENCE request takes the chunks and frees them once the host has
 * stopped using them.  Or (user) registered user memory: the chunks are
 * its pinned pages, one each, unpinned instead of freed.
 */
struct vcuda_hostmem {
	struct kref ref;		/* each VMA mapping it, each request using it */
	struct vcuda_file *vf;		/* holds a file reference until freed or parked */
	u64 len;
	unsigned int nchunks;
	unsigned int cap;		/* entries allocated in chunks */
	struct vcuda_hostmem_chunk *chunks;
	struct list_head dead;		/* on vf->hostmem_dead once parked */
	struct work_struct release_work;
	bool user;			/* pinned user pages (HOST_REGISTER) */
	u64 uaddr;			/* user: its first page */
	struct list_head reg;		/* user: on vf->regs until unregistered */
};

/* One user data segment of a request. */
struct vcuda_seg_buf {
	u64 uaddr;
	u64 len;
	u32 flags;			/* VCUDA_SEG_* */
	u32 nranges;
	void *bounce;			/* kmalloc copy, or NULL */
	struct page **pages;		/* pinned pages, or NULL */
	unsigned long npinned;		/* entries of pages actually pinned */
	struct vcuda_hostmem *hm;	/* host memory holding the segment, referenced */
	u64 hm_off;			/* where in hm it starts */
	bool stable;			/* hm belongs to this file: VCU_SEG_F_STABLE */
	bool hm_borrowed;		/* hm set by the caller, no reference held */
};

struct vcuda_req {
	struct vcuda_dev *dev;		/* holds a device reference */
	struct vcuda_file *vf;		/* holds a file reference; NULL for driver-made */
	u32 id;				/* req_id on the wire; 0 = not in dev->reqs */
	u32 opcode;
	bool raw;			/* RAW_SUBMIT: reply req_id is not ours to check */
	bool file_slot;			/* counted in vf->inflight while on the device */
	bool close_if_orphan;		/* orphaned SESSION_OPEN: close what it opens */
	struct vcuda_hostmem *fence_hm;	/* SESSION_FENCE: memory freed once it completes */

	/* Device-readable stream, split into chunks of VCUDA_CHUNK_SIZE. */
	void **chunks;
	unsigned int nchunks;
	size_t stream_len;
	struct scatterlist *out_sg;	/* nchunks entries */
	struct scatterlist in_sg;

	/* Device-writable reply buffer, zeroed: header + payload. */
	struct vcu_resp_hdr *resp;
	size_t resp_size;

	unsigned int nsegs;
	struct vcuda_seg_buf segs[VCU_MAX_SEGS];

	/* Completion state, under dev->vq_lock. */
	bool queued;			/* added to the vq */
	bool completed;			/* the device returned it, or remove() did */
	bool orphan;			/* nobody waits: the completion path frees it */
	int err;			/* 0, or -ENODEV when remove() completed it */
	u32 used_len;			/* as the device reported it (distrusted) */
	struct completion done;
	struct work_struct free_work;
};

extern struct workqueue_struct *vcuda_wq;

struct vcuda_req *vcuda_req_alloc(struct vcuda_dev *dev, struct vcuda_file *vf, u32 opcode);
int vcuda_req_build(struct vcuda_req *req, u64 session, u32 req_flags, const void *kpayload,
		    const void __user *upayload, u32 payload_len, const struct vcuda_seg *usegs,
		    unsigned int nsegs, bool async, u32 resp_cap);
int vcuda_req_build_raw(struct vcuda_req *req, const void __user *ubuf, u32 len, u32 resp_cap);
int vcuda_req_queue(struct vcuda_req *req, bool interruptible);
int vcuda_req_wait(struct vcuda_req *req);
int vcuda_req_reply(struct vcuda_req *req, u32 *status, u32 *payload_len);
int vcuda_req_copy_out(struct vcuda_req *req);
void vcuda_req_free(struct vcuda_req *req);
void vcuda_req_done_locked(struct vcuda_dev *dev, struct vcuda_req *req, u32 len, int err);
int vcuda_send_close(struct vcuda_dev *dev, struct vcuda_file *vf, u64 session);
struct vcuda_hostmem *vcuda_hostmem_get(u64 uaddr, u64 len, bool write, u64 *off);
struct vcuda_hostmem *vcuda_hostreg_get(struct vcuda_file *vf, u64 uaddr, u64 len, u64 *off);
void vcuda_hostmem_put(struct vcuda_hostmem *hm);
void vcuda_hostmem_fenced(struct vcuda_hostmem *hm, bool done);
void vcuda_dev_put(struct vcuda_dev *dev);
void vcuda_file_put(struct vcuda_file *vf);

#endif /* VCUDA_H */
