// SPDX-License-Identifier: GPL-2.0-only
/*
 * virtio-cuda guest driver: requests.
 *
 * A request is framed as include/vcu_proto.h says: header, payload padded
 * to 8, segment table, range table, all in one device-readable stream that
 * lives in VCUDA_CHUNK_SIZE kmalloc chunks (one out descriptor each, so a
 * 4 MiB range table needs no high-order allocation and ~70 descriptors),
 * then one zeroed device-writable reply buffer.
 *
 * Guest-physical addresses: the device does not offer
 * VIRTIO_F_ACCESS_PLATFORM (probe refuses to bind if it does), so there is
 * no IOMMU between the device and guest RAM and the ranges carry
 * page_to_phys()/virt_to_phys() addresses directly.
 *
 * Life of a request: vcuda_req_alloc() -> vcuda_req_build*() ->
 * vcuda_req_queue() -> either the submitter waits (vcuda_req_wait()) and
 * frees it, or it is an orphan (async, interrupted wait, driver-made) and
 * the completion path frees it from vcuda_wq.  Pinned pages are released
 * only in vcuda_req_free(), which runs only after the device returned the
 * request or the device was reset (remove()).
 *
 * A segment inside one host memory mapping (mmap of /dev/vcudaN) is sent
 * as the mapping's physical chunks, unpinned; the request holds a
 * reference on the mapping until it is freed, and when the mapping is the
 * submitting file's own, the segment is marked VCU_SEG_F_STABLE: the
 * memory then outlives the request until a SESSION_FENCE completes.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "vcuda.h"

/* Pages pinned per pin_user_pages_fast() call. */
#define VCUDA_PIN_BATCH 512

static void vcuda_req_free_work(struct work_struct *work);

struct vcuda_req *vcuda_req_alloc(struct vcuda_dev *dev, struct vcuda_file *vf, u32 opcode)
{
	struct vcuda_req *req;
	int err;

	req = kzalloc(sizeof(*req), GFP_KERNEL);
	if (!req)
		return NULL;
	init_completion(&req->done);
	INIT_WORK(&req->free_work, vcuda_req_free_work);
	req->opcode = opcode;

	err = xa_alloc_cyclic(&dev->reqs, &req->id, req, XA_LIMIT(1, U32_MAX), &dev->next_id,
			      GFP_KERNEL);
	if (err < 0) {
		kfree(req);
		return NULL;
	}
	kref_get(&dev->ref);
	req->dev = dev;
	if (vf) {
		kref_get(&vf->ref);
		req->vf = vf;
	}
	return req;
}

void vcuda_req_free(struct vcuda_req *req)
{
	struct vcuda_dev *dev = req->dev;
	struct vcuda_file *vf = req->vf;
	unsigned int i;

	for (i = 0; i < req->nsegs; i++) {
		struct vcuda_seg_buf *s = &req->segs[i];

		if (s->npinned) {
			unpin_user_pages_dirty_lock(s->pages, s->npinned,
						    s->flags & VCUDA_SEG_FROM_DEVICE);
			atomic_long_sub(s->npinned, &dev->pinned_pages);
		}
		kvfree(s->pages);
		kfree(s->bounce);
		if (s->hm && !s->hm_borrowed)
			vcuda_hostmem_put(s->hm);
	}
	for (i = 0; i < req->nchunks; i++)
		kfree(req->chunks[i]);
	kfree(req->chunks);
	kfree(req->out_sg);
	kfree(req->resp);
	xa_erase(&dev->reqs, req->id);
	kfree(req);
	if (vf)
		vcuda_file_put(vf);
	vcuda_dev_put(dev);
}

/* ---- the request stream ------------------------------------------------- */

static int vcuda_stream_alloc(struct vcuda_req *req, size_t len)
{
	unsigned int n = DIV_ROUND_UP(len, VCUDA_CHUNK_SIZE);
	unsigned int i;

	req->chunks = kcalloc(n, sizeof(*req->chunks), GFP_KERNEL);
	req->out_sg = kmalloc_array(n, sizeof(*req->out_sg), GFP_KERNEL);
	if (!req->chunks || !req->out_sg)
		return -ENOMEM;
	sg_init_table(req->out_sg, n);
	for (i = 0; i < n; i++) {
		size_t sz = min_t(size_t, len - (size_t)i * VCUDA_CHUNK_SIZE, VCUDA_CHUNK_SIZE);

		/* Zeroed: the payload's padding goes to the device. */
		req->chunks[i] = kzalloc(sz, GFP_KERNEL);
		if (!req->chunks[i])
			return -ENOMEM;
		req->nchunks = i + 1;
		sg_set_buf(&req->out_sg[i], req->chunks[i], sz);
	}
	req->stream_len = len;
	return 0;
}

/* Copies into the stream at off; from user space when ubuf is set. */
static int vcuda_stream_put(struct vcuda_req *req, size_t off, const void *kbuf,
			    const void __user *ubuf, size_t len)
{
	size_t done = 0;

	if (WARN_ON_ONCE(off > req->stream_len || len > req->stream_len - off))
		return -EINVAL;
	while (done < len) {
		size_t pos = off + done;
		size_t co = pos % VCUDA_CHUNK_SIZE;
		size_t n = min_t(size_t, len - done, VCUDA_CHUNK_SIZE - co);
		void *dst = req->chunks[pos / VCUDA_CHUNK_SIZE] + co;

		if (ubuf) {
			if (copy_from_user(dst, ubuf + done, n))
				return -EFAULT;
		} else {
			memcpy(dst, kbuf + done, n);
		}
		done += n;
	}
	return 0;
}

static int vcuda_resp_alloc(struct vcuda_req *req, size_t size)
{
	/* Zeroed: bytes the device does not write must not be kernel memory. */
	req->resp = kzalloc(size, GFP_KERNEL);
	if (!req->resp)
		return -ENOMEM;
	req->resp_size = size;
	sg_init_one(&req->in_sg, req->resp, size);
	return 0;
}

/* ---- data segments ------------------------------------------------------ */

static int vcuda_seg_pin(struct vcuda_dev *dev, struct vcuda_seg_buf *s)
{
	unsigned long first = s->uaddr >> PAGE_SHIFT;
	unsigned long npages = ((s->uaddr + s->len - 1) >> PAGE_SHIFT) - first + 1;
	unsigned int gup = FOLL_LONGTERM;
	int ret;

	if (s->flags & VCUDA_SEG_FROM_DEVICE)
		gup |= FOLL_WRITE;
	s->pages = kvmalloc_array(npages, sizeof(*s->pages), GFP_KERNEL);
	if (!s->pages)
		return -ENOMEM;
	while (s->npinned < npages) {
		int batch = min_t(unsigned long, npages - s->npinned, VCUDA_PIN_BATCH);

		if (fatal_signal_pending(current))
			return -EINTR;
		ret = pin_user_pages_fast((first + s->npinned) << PAGE_SHIFT, batch, gup,
					  s->pages + s->npinned);
		if (ret <= 0)
			return ret ? ret : -EFAULT;
		s->npinned += ret;
		atomic_long_add(ret, &dev->pinned_pages);
	}
	return 0;
}

/* Builds a segment's range list, merging physically contiguous pieces. */
struct vcuda_range_walk {
	struct vcuda_req *req;		/* NULL: only count */
	size_t *off;			/* where the next range goes in the stream */
	u64 gpa, len;			/* the range being merged */
	u32 n;				/* ranges finished */
};

static int vcuda_range_flush(struct vcuda_range_walk *w)
{
	struct vcu_range r;
	int err;

	if (w->req) {
		r.gpa = cpu_to_le64(w->gpa);
		r.len = cpu_to_le64(w->len);
		err = vcuda_stream_put(w->req, *w->off, &r, NULL, sizeof(r));
		if (err)
			return err;
		*w->off += sizeof(r);
	}
	w->n++;
	return 0;
}

static int vcuda_range_add(struct vcuda_range_walk *w, u64 phys, u64 len)
{
	int err;

	if (w->len && w->gpa + w->len == phys) {
		w->len += len;
		return 0;
	}
	if (w->len) {
		err = vcuda_range_flush(w);
		if (err)
			return err;
	}
	w->gpa = phys;
	w->len = len;
	return 0;
}

/* Index of the chunk of hm that holds byte off (< hm->len). */
static unsigned int vcuda_hostmem_chunk_at(const struct vcuda_hostmem *hm, u64 off)
{
	unsigned int lo = 0, hi = hm->nchunks - 1;

	while (lo < hi) {
		unsigned int mid = lo + (hi - lo + 1) / 2;

		if (hm->chunks[mid].off <= off)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/*
 * Walks a segment's memory as guest-physical ranges, merging physically
 * contiguous pieces.  Counts them, and writes them at *off when req is set.
 */
static int vcuda_seg_ranges(const struct vcuda_seg_buf *s, struct vcuda_req *req, size_t *off,
			    u32 *count)
{
	struct vcuda_range_walk w = { .req = req, .off = off };
	u64 pos, left;
	unsigned long i;
	int err;

	if (!s->len)
		goto out;
	if (s->bounce) {
		err = vcuda_range_add(&w, virt_to_phys(s->bounce), s->len);
		if (err)
			return err;
	} else if (s->hm) {
		const struct vcuda_hostmem *hm = s->hm;

		pos = s->hm_off;
		left = s->len;
		for (i = vcuda_hostmem_chunk_at(hm, pos); i < hm->nchunks && left; i++) {
			const struct vcuda_hostmem_chunk *c = &hm->chunks[i];
			u64 in_chunk = pos - c->off;
			u64 n = min_t(u64, (PAGE_SIZE << c->order) - in_chunk, left);

			err = vcuda_range_add(&w, page_to_phys(c->page) + in_chunk, n);
			if (err)
				return err;
			pos += n;
			left -= n;
		}
		if (WARN_ON_ONCE(left))
			return -EINVAL;
	} else {
		pos = s->uaddr;
		left = s->len;
		for (i = 0; i < s->npinned && left; i++) {
			u64 in_page = offset_in_page(pos);
			u64 n = min_t(u64, PAGE_SIZE - in_page, left);

			err = vcuda_range_add(&w, page_to_phys(s->pages[i]) + in_page, n);
			if (err)
				return err;
			pos += n;
			left -= n;
		}
	}
	err = vcuda_range_flush(&w);
	if (err)
		return err;
out:
	*count = w.n;
	return 0;
}

/*
 * The memory of segment s (its address, length and flags set; not empty)
 * as the device will reach it: the caller's host memory (hm_borrowed),
 * this driver's page-locked or registered memory, a bounce buffer for a
 * small one, or its pages pinned; then its guest-physical ranges counted
 * (s->nranges).
 */
static int vcuda_seg_take(struct vcuda_req *req, struct vcuda_seg_buf *s, bool async)
{
	bool from = s->flags & VCUDA_SEG_FROM_DEVICE;
	int err;

	/* SUBMIT only: driver-made requests carry no user segments. */
	if (s->hm_borrowed)
		s->stable = false;	/* the caller's: see vcuda_hostmem_release_work */
	else if (req->vf) {
		s->hm = vcuda_hostmem_get(s->uaddr, s->len, from, &s->hm_off);
		if (!s->hm)
			s->hm = vcuda_hostreg_get(req->vf, s->uaddr, s->len, &s->hm_off);
	}
	if (s->hm_borrowed) {
	} else if (s->hm) {
		s->stable = s->hm->vf == req->vf;
	} else if (s->len <= VCUDA_BOUNCE_MAX && !(async && from)) {
		s->bounce = kmalloc(s->len, GFP_KERNEL);
		if (!s->bounce)
			return -ENOMEM;
		/*
		 * FROM_DEVICE too: the device may write less than the
		 * whole segment, and what it leaves must go back to
		 * user space unchanged, never as kernel memory.
		 */
		if (copy_from_user(s->bounce, u64_to_user_ptr(s->uaddr), s->len))
			return -EFAULT;
	} else {
		err = vcuda_seg_pin(req->dev, s);
		if (err)
			return err;
	}
	return vcuda_seg_ranges(s, NULL, NULL, &s->nranges);
}

/* The request's header and payload (padded to 8 bytes) at the stream's
 * start; *off: where they end. */
static int vcuda_req_put_head(struct vcuda_req *req, u64 session, u32 req_flags,
			      const void *kpayload, const void __user *upayload, u32 payload_len,
			      unsigned int nsegs, size_t *off)
{
	struct vcu_req_hdr hdr = {};
	int err;

	hdr.opcode = cpu_to_le32(req->opcode);
	hdr.flags = cpu_to_le32(req_flags);
	hdr.session = cpu_to_le64(session);
	hdr.req_id = cpu_to_le64(req->id);
	hdr.payload_len = cpu_to_le32(payload_len);
	hdr.nsegs = cpu_to_le16(nsegs);
	*off = 0;
	err = vcuda_stream_put(req, *off, &hdr, NULL, sizeof(hdr));
	if (err)
		return err;
	*off += sizeof(hdr);
	if (payload_len) {
		err = vcuda_stream_put(req, *off, kpayload, upayload, payload_len);
		if (err)
			return err;
	}
	*off += ALIGN(payload_len, 8);
	return 0;
}

/* The segments' descriptors, then each segment's ranges, at *off. */
static int vcuda_req_put_segs(struct vcuda_req *req, unsigned int nsegs, size_t *off)
{
	unsigned int i;
	int err;

	for (i = 0; i < nsegs; i++) {
		const struct vcuda_seg_buf *s = &req->segs[i];
		u32 wflags = s->flags & VCUDA_SEG_TO_DEVICE ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE;
		struct vcu_seg ws = {
			.len = cpu_to_le64(s->len),
			.nranges = cpu_to_le32(s->nranges),
			.flags = cpu_to_le32(wflags | (s->stable ? VCU_SEG_F_STABLE : 0)),
		};

		err = vcuda_stream_put(req, *off, &ws, NULL, sizeof(ws));
		if (err)
			return err;
		*off += sizeof(ws);
	}
	for (i = 0; i < nsegs; i++) {
		u32 n;

		err = vcuda_seg_ranges(&req->segs[i], req, off, &n);
		if (err)
			return err;
		if (WARN_ON_ONCE(n != req->segs[i].nranges))
			return -EINVAL;
	}
	return 0;
}

/*
 * Frames a request.  usegs were validated by the caller (flags, lengths,
 * access_ok, total); payload comes from kpayload or from user space.
 */
int vcuda_req_build(struct vcuda_req *req, u64 session, u32 req_flags, const void *kpayload,
		    const void __user *upayload, u32 payload_len, const struct vcuda_seg *usegs,
		    unsigned int nsegs, bool async, u32 resp_cap)
{
	size_t plen_padded = ALIGN(payload_len, 8);
	size_t nranges = 0, len, off;
	unsigned int i;
	int err;

	if (WARN_ON_ONCE(nsegs > VCU_MAX_SEGS || payload_len > VCU_MAX_PAYLOAD))
		return -EINVAL;

	for (i = 0; i < nsegs; i++) {
		struct vcuda_seg_buf *s = &req->segs[i];

		s->uaddr = usegs[i].addr;
		s->len = usegs[i].len;
		s->flags = usegs[i].flags;
		req->nsegs = i + 1;
		if (!s->len)
			continue;
		err = vcuda_seg_take(req, s, async);
		if (err)
			return err;
		nranges += s->nranges;
	}

	len = sizeof(struct vcu_req_hdr) + plen_padded + nsegs * sizeof(struct vcu_seg) +
	      nranges * sizeof(struct vcu_range);
	err = vcuda_stream_alloc(req, len);
	if (err)
		return err;
	err = vcuda_resp_alloc(req, sizeof(struct vcu_resp_hdr) + resp_cap);
	if (err)
		return err;
	err = vcuda_req_put_head(req, session, req_flags, kpayload, upayload, payload_len, nsegs,
				 &off);
	if (err)
		return err;
	err = vcuda_req_put_segs(req, nsegs, &off);
	if (err)
		return err;
	return WARN_ON_ONCE(off != len) ? -EINVAL : 0;
}

/* RAW_SUBMIT: the user's bytes are the whole stream. */
int vcuda_req_build_raw(struct vcuda_req *req, const void __user *ubuf, u32 len, u32 resp_cap)
{
	int err;

	req->raw = true;
	err = vcuda_stream_alloc(req, len);
	if (err)
		return err;
	err = vcuda_stream_put(req, 0, NULL, ubuf, len);
	if (err)
		return err;
	return vcuda_resp_alloc(req, resp_cap);
}

/* ---- queueing and completion -------------------------------------------- */

static void vcuda_slot_put(struct vcuda_req *req)
{
	atomic_dec(&req->vf->inflight);
	wake_up(&req->vf->slot_wait);
}

static int vcuda_slot_get(struct vcuda_req *req)
{
	struct vcuda_file *vf = req->vf;

	for (;;) {
		if (atomic_add_unless(&vf->inflight, 1, VCUDA_FILE_MAX_INFLIGHT))
			return 0;
		if (READ_ONCE(req->dev->gone))
			return -ENODEV;
		if (wait_event_interruptible(vf->slot_wait,
					     READ_ONCE(req->dev->gone) ||
					     atomic_read(&vf->inflight) < VCUDA_FILE_MAX_INFLIGHT))
			return -EINTR;
	}
}

/*
 * Puts the request on the ring, waiting for room.  After it returns 0 an
 * orphan request belongs to the completion path: the caller must not touch
 * it again.  On error the caller still owns it.
 */
int vcuda_req_queue(struct vcuda_req *req, bool interruptible)
{
	struct vcuda_dev *dev = req->dev;
	struct scatterlist *sgs[2] = { req->out_sg, &req->in_sg };
	unsigned long gen;
	long left;
	int err;

	if (!dev->indirect && req->nchunks + 1 > dev->vring_size)
		return -E2BIG;
	if (req->file_slot) {
		err = vcuda_slot_get(req);
		if (err)
			return err;
	}
	for (;;) {
		spin_lock_irq(&dev->vq_lock);
		if (dev->gone) {
			err = -ENODEV;
			break;
		}
		err = virtqueue_add_sgs(dev->vq, sgs, 1, 1, req, GFP_ATOMIC);
		if (!err) {
			req->queued = true;
			atomic_inc(&dev->inflight);
			dev->stat_requests++;
			/* Kick under the lock: remove() may delete the vq once we drop it.
			 * Counted only when the device wants it (an exit on KVM). */
			if (virtqueue_kick_prepare(dev->vq)) {
				dev->stat_kicks++;
				virtqueue_notify(dev->vq);
			}
			spin_unlock_irq(&dev->vq_lock);
			return 0;
		}
		if (err != -ENOSPC)
			break;
		gen = dev->vq_gen;
		spin_unlock_irq(&dev->vq_lock);

		if (interruptible) {
			if (wait_event_interruptible(dev->vq_wait, READ_ONCE(dev->vq_gen) != gen ||
								   READ_ONCE(dev->gone))) {
				err = -EINTR;
				goto err_slot;
			}
		} else {
			left = wait_event_timeout(dev->vq_wait, READ_ONCE(dev->vq_gen) != gen ||
								READ_ONCE(dev->gone),
						  VCUDA_CLOSE_WAIT);
			if (!left) {
				err = -ETIMEDOUT;
				goto err_slot;
			}
		}
	}
	spin_unlock_irq(&dev->vq_lock);
err_slot:
	if (req->file_slot)
		vcuda_slot_put(req);
	return err;
}

/*
 * The device returned req (len = its used length), or remove() reset the
 * device (err = -ENODEV).  Caller holds dev->vq_lock; may be in interrupt
 * context, so nothing here sleeps or unpins.
 */
void vcuda_req_done_locked(struct vcuda_dev *dev, struct vcuda_req *req, u32 len, int err)
{
	lockdep_assert_held(&dev->vq_lock);
	if (WARN_ON_ONCE(!req->queued || req->completed))
		return;
	req->completed = true;
	req->used_len = len;
	req->err = err;
	atomic_dec(&dev->inflight);
	if (req->file_slot)
		vcuda_slot_put(req);
	if (req->orphan)
		queue_work(vcuda_wq, &req->free_work);
	else
		complete(&req->done);
}

/*
 * Waits for the reply.  Returns req->err once completed, or -EINTR if a
 * signal came first: the request is then an orphan that the completion
 * path frees, and the caller must not touch it again.
 */
int vcuda_req_wait(struct vcuda_req *req)
{
	struct vcuda_dev *dev = req->dev;

	if (wait_for_completion_interruptible(&req->done)) {
		spin_lock_irq(&dev->vq_lock);
		if (!req->completed) {
			req->orphan = true;
			spin_unlock_irq(&dev->vq_lock);
			return -EINTR;
		}
		spin_unlock_irq(&dev->vq_lock);
	}
	return req->err;
}

/*
 * Reads the reply header of a completed request, distrusting it: the used
 * length must cover a header, req_id must be ours, and the payload length
 * is clamped to the buffer and to what the device says it wrote.
 */
int vcuda_req_reply(struct vcuda_req *req, u32 *status, u32 *payload_len)
{
	size_t used = min_t(size_t, req->used_len, req->resp_size);
	size_t hdr = sizeof(struct vcu_resp_hdr);
	size_t plen;

	if (used < hdr) {
		pr_warn_ratelimited("vcuda%u: req %u: reply of %u bytes\n", req->dev->minor,
				    req->id, req->used_len);
		return -EIO;
	}
	if (le64_to_cpu(req->resp->req_id) != req->id) {
		pr_warn_ratelimited("vcuda%u: req %u: reply for req_id %llu\n", req->dev->minor,
				    req->id, le64_to_cpu(req->resp->req_id));
		return -EIO;
	}
	plen = min_t(size_t, le32_to_cpu(req->resp->payload_len), used - hdr);
	*status = le32_to_cpu(req->resp->status);
	*payload_len = plen;
	return 0;
}

/* Copies FROM_DEVICE bounce buffers back to user space. */
int vcuda_req_copy_out(struct vcuda_req *req)
{
	unsigned int i;

	for (i = 0; i < req->nsegs; i++) {
		const struct vcuda_seg_buf *s = &req->segs[i];

		if (!s->bounce || !(s->flags & VCUDA_SEG_FROM_DEVICE))
			continue;
		if (copy_to_user(u64_to_user_ptr(s->uaddr), s->bounce, s->len))
			return -EFAULT;
	}
	return 0;
}

/*
 * Sends SESSION_CLOSE without waiting for it; the completion path frees
 * it.  The request holds a reference to vf when given, so vf (and the host
 * memory parked on it) outlives the session.  Waits at most
 * VCUDA_CLOSE_WAIT for ring room; on failure the host keeps the session
 * until the device is reset.
 */
int vcuda_send_close(struct vcuda_dev *dev, struct vcuda_file *vf, u64 session)
{
	struct vcuda_req *req;
	int err = -ENOMEM;

	req = vcuda_req_alloc(dev, vf, VCU_OP_SESSION_CLOSE);
	if (!req)
		goto err_alloc;
	err = vcuda_req_build(req, session, 0, NULL, NULL, 0, NULL, 0, true, 0);
	if (err)
		goto err_build;
	req->orphan = true;
	err = vcuda_req_queue(req, false);
	if (err)
		goto err_build;
	return 0;

err_build:
	vcuda_req_free(req);
err_alloc:
	if (err != -ENODEV)
		pr_warn("vcuda%u: session %llu not closed: %d\n", dev->minor, session, err);
	return err;
}

static void vcuda_req_free_work(struct work_struct *work)
{
	struct vcuda_req *req = container_of(work, struct vcuda_req, free_work);
	struct vcu_session_open_resp oresp;
	u32 status, plen;

	/* A SESSION_OPEN whose caller left: close what the device opened. */
	if (req->close_if_orphan && !req->err && !vcuda_req_reply(req, &status, &plen) &&
	    status == VCU_S_OK && plen >= sizeof(oresp)) {
		memcpy(&oresp, req->resp + 1, sizeof(oresp));
		if (oresp.session)
			vcuda_send_close(req->dev, NULL, le64_to_cpu(oresp.session));
	}
	/*
	 * A SESSION_FENCE: the host is done with the memory once it answered
	 * OK, or once the device was reset; otherwise it waits for the
	 * session to end.
	 */
	if (req->fence_hm) {
		bool done = req->err == -ENODEV ||
			    (!req->err && !vcuda_req_reply(req, &status, &plen) &&
			     status == VCU_S_OK);

		vcuda_hostmem_fenced(req->fence_hm, done);
		req->fence_hm = NULL;
	}
	vcuda_req_free(req);
}
