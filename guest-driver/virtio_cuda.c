// SPDX-License-Identifier: GPL-2.0-only
/*
 * virtio-cuda guest driver: the virtio driver and /dev/vcudaN.
 *
 * A transport, not a CUDA interpreter: it frames the opaque requests that
 * guest-lib builds (include/vcu_proto.h), moves their data segments (small
 * ones through bounce buffers, large ones pinned and sent as guest-physical
 * ranges) and completes them.  One session per open file; the ioctl ABI is
 * guest-driver/uapi/vcuda_ioctl.h.
 *
 * Device lifetime: struct vcuda_dev is kref'd by probe, by every open file
 * and by every request.  remove() (unbind or module unload) marks the
 * device gone, resets it, completes every request still on the ring with
 * -ENODEV (freeing orphans, unpinning) and deletes the vq; files still open
 * get -ENODEV from then on and their release only frees.
 *
 * Host memory (mmap of /dev/vcudaN, the guest side of cudaMallocHost):
 * zeroed chunks of up to VCUDA_HOSTMEM_CHUNK, mapped with remap_pfn_range()
 * so that nothing else can pin (get_user_pages fails on VM_PFNMAP),
 * migrate (not on the LRU, not movable) or inherit (VM_DONTCOPY) them.  A
 * mapping is freed only after the host stopped using it: when the last VMA
 * and request drop it, a SESSION_FENCE request takes the chunks, and its
 * completion frees them; if the fence cannot tell (session closing, error
 * reply) they wait for SESSION_CLOSE to complete.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "vcuda.h"

#define VCUDA_MAX_DEVS 256

/*
 * Test-only: VCUDA_IOC_RAW_SUBMIT sends user bytes to the device unchanged,
 * guest-physical addresses included, so whoever can open /dev/vcudaN can
 * make the device read or write any guest memory.  Never enable it outside
 * a test VM.
 */
static bool allow_raw;
module_param(allow_raw, bool, 0444);
MODULE_PARM_DESC(allow_raw, "Allow VCUDA_IOC_RAW_SUBMIT (test-only, unsafe; default 0)");

static unsigned int hostmem_max_mib = 4096;
module_param(hostmem_max_mib, uint, 0644);
MODULE_PARM_DESC(hostmem_max_mib, "Host memory (mmap) one open file may hold, MiB (default 4096)");

#ifdef MAX_PAGE_ORDER
#define VCUDA_MAX_ORDER MAX_PAGE_ORDER
#elif LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
#define VCUDA_MAX_ORDER MAX_ORDER
#else
#define VCUDA_MAX_ORDER (MAX_ORDER - 1)
#endif

struct workqueue_struct *vcuda_wq;	/* frees orphaned requests, fences host memory */
static dev_t vcuda_devt;
static struct class *vcuda_class;
/* minor -> struct vcuda_dev; allocates N of /dev/vcudaN.  Own xa_lock. */
static DEFINE_XARRAY_ALLOC(vcuda_minors);

static void vcuda_dev_release(struct kref *ref)
{
	struct vcuda_dev *dev = container_of(ref, struct vcuda_dev, ref);

	WARN_ON(!xa_empty(&dev->reqs));
	WARN_ON(!list_empty(&dev->files));
	mutex_destroy(&dev->files_lock);
	xa_destroy(&dev->reqs);
	kfree(dev);
}

void vcuda_dev_put(struct vcuda_dev *dev)
{
	kref_put(&dev->ref, vcuda_dev_release);
}

static void vcuda_hostmem_free_chunks(struct vcuda_dev *dev, struct vcuda_hostmem *hm)
{
	unsigned int i;

	for (i = 0; i < hm->nchunks; i++) {
		if (hm->user) {
			unpin_user_pages_dirty_lock(&hm->chunks[i].page, 1, true);
			atomic_long_dec(&dev->pinned_pages);
			continue;
		}
		__free_pages(hm->chunks[i].page, hm->chunks[i].order);
		atomic_long_sub(1L << hm->chunks[i].order, &dev->hostmem_pages);
	}
	kvfree(hm->chunks);
	kfree(hm);
}

static void vcuda_file_release(struct kref *ref)
{
	struct vcuda_file *vf = container_of(ref, struct vcuda_file, ref);
	struct vcuda_hostmem *hm, *tmp;

	/*
	 * Every request holding vf is done, SESSION_CLOSE included: the
	 * session has ended (or the device is gone) and parked memory is
	 * free, unless the close never reached the host.
	 */
	list_for_each_entry_safe(hm, tmp, &vf->hostmem_dead, dead) {
		list_del(&hm->dead);
		if (vf->close_lost) {
			pr_warn("vcuda%u: session not closed, leaking %llu bytes of host memory\n",
				vf->dev->minor, hm->len);
			continue;
		}
		vcuda_hostmem_free_chunks(vf->dev, hm);
	}
	mutex_destroy(&vf->open_lock);
	put_pid(vf->pid);
	vcuda_dev_put(vf->dev);
	kfree(vf);
}

void vcuda_file_put(struct vcuda_file *vf)
{
	kref_put(&vf->ref, vcuda_file_release);
}

/* ---- ioctls ------------------------------------------------------------- */

/*
 * SESSION_OPEN's round trip: the reply's status, and its payload in
 * *oresp (zero past what the device sent, plen bytes).  Called with
 * vf->open_lock held; -EINTR leaves the request orphaned, for the
 * completion path to close the session it may have opened and free it.
 */
static long vcuda_session_open_req(struct vcuda_file *vf, const struct vcuda_session_open *so,
				   struct vcu_session_open_resp *oresp, u32 *status, u32 *plen)
{
	struct vcu_session_open_req oreq = {};
	struct vcuda_req *req;
	long err;

	req = vcuda_req_alloc(vf->dev, vf, VCU_OP_SESSION_OPEN);
	if (!req)
		return -ENOMEM;
	req->file_slot = true;
	req->close_if_orphan = true;
	oreq.version_min = cpu_to_le32(so->version_min);
	oreq.version_max = cpu_to_le32(so->version_max);
	oreq.features = cpu_to_le64(so->features);
	err = vcuda_req_build(req, 0, 0, &oreq, NULL, sizeof(oreq), NULL, 0, false,
			      sizeof(*oresp));
	if (err)
		goto err_req;
	err = vcuda_req_queue(req, true);
	if (err)
		goto err_req;
	err = vcuda_req_wait(req);
	if (err == -EINTR)
		return err;	/* orphaned: the completion path closes and frees it */
	if (err)
		goto err_req;
	err = vcuda_req_reply(req, status, plen);
	if (err)
		goto err_req;
	memcpy(oresp, req->resp + 1, min_t(size_t, *plen, sizeof(*oresp)));
err_req:
	vcuda_req_free(req);
	return err;
}

static long vcuda_ioctl_session_open(struct vcuda_file *vf, void __user *arg)
{
	struct vcuda_session_open so;
	struct vcu_session_open_resp oresp = {};
	u32 status, plen;
	u64 session = 0;
	long err;

	if (copy_from_user(&so, arg, sizeof(so)))
		return -EFAULT;
	if (so.reserved[0] || so.reserved[1] || so.reserved[2] || so.reserved[3])
		return -EINVAL;
	if (mutex_lock_interruptible(&vf->open_lock))
		return -EINTR;
	err = -EBUSY;
	if (vf->session)
		goto err_lock;
	err = vcuda_session_open_req(vf, &so, &oresp, &status, &plen);
	if (err)
		goto err_lock;

	so.status = status;
	so.version = 0;
	so.max_xfer = 0;
	so.max_payload = 0;
	so.max_segs = 0;
	if (status == VCU_S_OK) {
		session = le64_to_cpu(oresp.session);
		if (plen < sizeof(oresp) || !session) {
			err = -EIO;
			goto err_session;
		}
		/* What the device offers, never more than the driver carries. */
		so.version = le32_to_cpu(oresp.version);
		so.features &= le64_to_cpu(oresp.features);
		so.max_xfer = min_t(u64, le64_to_cpu(oresp.max_xfer), VCUDA_MAX_XFER);
		so.max_payload = min_t(u32, le32_to_cpu(oresp.max_payload), VCUDA_MAX_PAYLOAD);
		so.max_segs = min_t(u32, le32_to_cpu(oresp.max_segs), VCUDA_MAX_SEGS);
	} else {
		so.features = 0;
	}
	if (copy_to_user(arg, &so, sizeof(so))) {
		err = -EFAULT;
		goto err_session;
	}
	WRITE_ONCE(vf->session, session);
	mutex_unlock(&vf->open_lock);
	return 0;

err_session:
	if (session)
		vcuda_send_close(vf->dev, NULL, session);
err_lock:
	mutex_unlock(&vf->open_lock);
	return err;
}

static int vcuda_check_segs(const struct vcuda_seg *segs, unsigned int nsegs)
{
	u64 total = 0, end;
	unsigned int i;

	for (i = 0; i < nsegs; i++) {
		const struct vcuda_seg *s = &segs[i];

		if (s->reserved)
			return -EINVAL;
		if (s->flags != VCUDA_SEG_TO_DEVICE && s->flags != VCUDA_SEG_FROM_DEVICE)
			return -EINVAL;
		if (s->len > VCUDA_MAX_XFER)
			return -E2BIG;
		if (check_add_overflow(s->addr, s->len, &end))
			return -EFAULT;
		if (!access_ok(u64_to_user_ptr(s->addr), s->len))
			return -EFAULT;
		total += s->len;
		if (total > VCU_MAX_XFER)
			return -E2BIG;
	}
	return 0;
}

static long vcuda_ioctl_submit(struct vcuda_file *vf, void __user *arg)
{
	struct vcuda_seg segs[VCU_MAX_SEGS];
	struct vcuda_submit sub;
	struct vcuda_req *req;
	u32 status, plen;
	u64 session;
	bool async;
	long err;

	if (copy_from_user(&sub, arg, sizeof(sub)))
		return -EFAULT;
	if (sub.reserved0 || sub.reserved[0] || sub.reserved[1] ||
	    (sub.flags & ~VCUDA_SUBMIT_ASYNC))
		return -EINVAL;
	if (VCU_OP_IS_TRANSPORT(sub.opcode))
		return -EPERM;
	if (sub.req_len > VCU_MAX_PAYLOAD || sub.resp_cap > VCU_MAX_PAYLOAD ||
	    sub.nsegs > VCU_MAX_SEGS)
		return -E2BIG;
	session = READ_ONCE(vf->session);
	if (!session)
		return -ENOTCONN;
	if (sub.nsegs &&
	    copy_from_user(segs, u64_to_user_ptr(sub.segs_addr), sub.nsegs * sizeof(segs[0])))
		return -EFAULT;
	err = vcuda_check_segs(segs, sub.nsegs);
	if (err)
		return err;
	async = sub.flags & VCUDA_SUBMIT_ASYNC;

	req = vcuda_req_alloc(vf->dev, vf, sub.opcode);
	if (!req)
		return -ENOMEM;
	req->file_slot = true;
	err = vcuda_req_build(req, session, async ? VCU_REQ_F_ASYNC : 0, NULL,
			      u64_to_user_ptr(sub.req_addr), sub.req_len, segs, sub.nsegs, async,
			      sub.resp_cap);
	if (err)
		goto err_req;

	if (async) {
		req->orphan = true;
		err = vcuda_req_queue(req, true);
		if (err)
			goto err_req;
		sub.status = VCU_S_OK;
		sub.resp_len = 0;
		goto out;
	}

	err = vcuda_req_queue(req, true);
	if (err)
		goto err_req;
	err = vcuda_req_wait(req);
	if (err == -EINTR)
		return err;	/* orphaned: the completion path unpins and frees it */
	if (err)
		goto err_req;
	err = vcuda_req_reply(req, &status, &plen);
	if (err)
		goto err_req;
	plen = min(plen, sub.resp_cap);
	err = vcuda_req_copy_out(req);
	if (err)
		goto err_req;
	if (plen && copy_to_user(u64_to_user_ptr(sub.resp_addr), req->resp + 1, plen)) {
		err = -EFAULT;
		goto err_req;
	}
	vcuda_req_free(req);
	sub.status = status;
	sub.resp_len = plen;
out:
	if (copy_to_user(arg, &sub, sizeof(sub)))
		return -EFAULT;
	return 0;

err_req:
	vcuda_req_free(req);
	return err;
}

static long vcuda_ioctl_raw_submit(struct vcuda_file *vf, void __user *arg)
{
	struct vcuda_raw_submit raw;
	struct vcuda_req *req;
	u32 used;
	long err;

	if (!allow_raw)
		return -EPERM;
	if (copy_from_user(&raw, arg, sizeof(raw)))
		return -EFAULT;
	if (raw.reserved0 || raw.reserved[0] || raw.reserved[1])
		return -EINVAL;
	if (!raw.req_len || !raw.resp_cap)
		return -EINVAL;
	if (raw.req_len > VCUDA_RAW_MAX ||
	    raw.resp_cap > VCU_MAX_PAYLOAD + sizeof(struct vcu_resp_hdr))
		return -E2BIG;
	if (!READ_ONCE(vf->session))
		return -ENOTCONN;

	req = vcuda_req_alloc(vf->dev, vf, 0);
	if (!req)
		return -ENOMEM;
	req->file_slot = true;
	err = vcuda_req_build_raw(req, u64_to_user_ptr(raw.req_addr), raw.req_len, raw.resp_cap);
	if (err)
		goto err_req;
	err = vcuda_req_queue(req, true);
	if (err)
		goto err_req;
	err = vcuda_req_wait(req);
	if (err == -EINTR)
		return err;
	if (err)
		goto err_req;
	/* The buffer was zeroed, so even a lying used length leaks nothing. */
	used = min_t(u32, req->used_len, raw.resp_cap);
	if (used && copy_to_user(u64_to_user_ptr(raw.resp_addr), req->resp, used)) {
		err = -EFAULT;
		goto err_req;
	}
	vcuda_req_free(req);
	raw.resp_len = used;
	if (copy_to_user(arg, &raw, sizeof(raw)))
		return -EFAULT;
	return 0;

err_req:
	vcuda_req_free(req);
	return err;
}

static void vcuda_hostmem_release_work(struct work_struct *work);

/* The registration holding [start, end), or any overlapping it; hostmem_lock held. */
static struct vcuda_hostmem *vcuda_hostreg_find_locked(struct vcuda_file *vf, u64 start, u64 end)
{
	struct vcuda_hostmem *hm;

	list_for_each_entry(hm, &vf->regs, reg)
		if (start < hm->uaddr + hm->len && hm->uaddr < end)
			return hm;
	return NULL;
}

/*
 * Finds the registration that holds all of [uaddr, uaddr + len); returns
 * it with a reference taken and *off set, or NULL.
 */
struct vcuda_hostmem *vcuda_hostreg_get(struct vcuda_file *vf, u64 uaddr, u64 len, u64 *off)
{
	struct vcuda_hostmem *hm;

	if (!len || uaddr + len < uaddr)
		return NULL;
	spin_lock(&vf->hostmem_lock);
	hm = vcuda_hostreg_find_locked(vf, uaddr, uaddr + 1);
	if (hm && uaddr + len <= hm->uaddr + hm->len) {
		kref_get(&hm->ref);
		*off = uaddr - hm->uaddr;
	} else {
		hm = NULL;
	}
	spin_unlock(&vf->hostmem_lock);
	return hm;
}

/* Charges [start, end) to vf's registrations (bounded by max), unless
 * part of it is registered already. */
static long vcuda_hostreg_charge(struct vcuda_file *vf, u64 start, u64 end, u64 max)
{
	spin_lock(&vf->hostmem_lock);
	if (end - start > max || vf->hostmem_bytes > max - (end - start)) {
		spin_unlock(&vf->hostmem_lock);
		return -ENOMEM;
	}
	if (vcuda_hostreg_find_locked(vf, start, end)) {
		spin_unlock(&vf->hostmem_lock);
		return -EEXIST;
	}
	vf->hostmem_bytes += end - start;
	spin_unlock(&vf->hostmem_lock);
	return 0;
}

static void vcuda_hostreg_uncharge(struct vcuda_file *vf, u64 bytes)
{
	spin_lock(&vf->hostmem_lock);
	vf->hostmem_bytes -= bytes;
	spin_unlock(&vf->hostmem_lock);
}

/*
 * The user pages of [start, end) (page aligned) pinned, as host memory of
 * one-page chunks, referenced once, belonging to no file yet.  An
 * ERR_PTR, with nothing pinned, on failure.
 */
static struct vcuda_hostmem *vcuda_hostreg_pin(struct vcuda_dev *dev, u64 start, u64 end)
{
	unsigned long n = (end - start) >> PAGE_SHIFT, done = 0, i;
	struct vcuda_hostmem *hm;
	struct page **pages;
	long err = -ENOMEM;

	hm = kzalloc(sizeof(*hm), GFP_KERNEL);
	pages = kvmalloc_array(n, sizeof(*pages), GFP_KERNEL);
	if (!hm || !pages)
		goto err_alloc;
	hm->chunks = kvmalloc_array(n, sizeof(*hm->chunks), GFP_KERNEL);
	if (!hm->chunks)
		goto err_alloc;
	while (done < n) {
		int got = pin_user_pages_fast(start + (done << PAGE_SHIFT),
					      min_t(unsigned long, n - done, 512),
					      FOLL_WRITE | FOLL_LONGTERM, pages + done);

		if (got <= 0) {
			err = got ? got : -EFAULT;
			goto err_pin;
		}
		done += got;
	}
	atomic_long_add(n, &dev->pinned_pages);
	for (i = 0; i < n; i++) {
		hm->chunks[i].page = pages[i];
		hm->chunks[i].order = 0;
		hm->chunks[i].off = (u64)i << PAGE_SHIFT;
	}
	kvfree(pages);
	kref_init(&hm->ref);
	INIT_WORK(&hm->release_work, vcuda_hostmem_release_work);
	INIT_LIST_HEAD(&hm->dead);
	hm->len = end - start;
	hm->nchunks = n;
	hm->cap = n;
	hm->user = true;
	hm->uaddr = start;
	return hm;

err_pin:
	unpin_user_pages(pages, done);
err_alloc:
	if (hm)
		kvfree(hm->chunks);
	kvfree(pages);
	kfree(hm);
	return ERR_PTR(err);
}

/*
 * Lists hm, the registration of [start, end), among vf's, taking a
 * reference to vf for it; if vf was released or the range registered
 * meanwhile, hm is freed (its pages unpinned) instead.
 */
static long vcuda_hostreg_add(struct vcuda_dev *dev, struct vcuda_file *vf,
			      struct vcuda_hostmem *hm, u64 start, u64 end)
{
	long err;

	kref_get(&vf->ref);
	hm->vf = vf;

	spin_lock(&vf->hostmem_lock);
	if (vf->released || vcuda_hostreg_find_locked(vf, start, end)) {
		/* Raced with close, or with another registration of the range. */
		err = vf->released ? -EBADF : -EEXIST;
		spin_unlock(&vf->hostmem_lock);
		hm->vf = NULL;
		vcuda_file_put(vf);
		vcuda_hostmem_free_chunks(dev, hm);
		return err;
	}
	list_add_tail(&hm->reg, &vf->regs);
	spin_unlock(&vf->hostmem_lock);
	return 0;
}

static long vcuda_ioctl_host_register(struct vcuda_file *vf, void __user *arg)
{
	struct vcuda_dev *dev = vf->dev;
	u64 max = (u64)READ_ONCE(hostmem_max_mib) << 20;
	struct vcuda_host_register r;
	struct vcuda_hostmem *hm;
	u64 start, end;
	long err;

	if (copy_from_user(&r, arg, sizeof(r)))
		return -EFAULT;
	if (r.reserved[0] || r.reserved[1] || !r.len || r.addr + r.len < r.addr)
		return -EINVAL;
	if (!READ_ONCE(vf->session))
		return -ENOTCONN;
	start = r.addr & PAGE_MASK;
	end = PAGE_ALIGN(r.addr + r.len);
	if (end <= start || !access_ok(u64_to_user_ptr(start), end - start))
		return -EFAULT;

	err = vcuda_hostreg_charge(vf, start, end, max);
	if (err)
		return err;
	hm = vcuda_hostreg_pin(dev, start, end);
	if (IS_ERR(hm)) {
		err = PTR_ERR(hm);
		goto err_charge;
	}
	err = vcuda_hostreg_add(dev, vf, hm, start, end);
	if (err)
		goto err_charge;
	return 0;

err_charge:
	vcuda_hostreg_uncharge(vf, end - start);
	return err;
}

static long vcuda_ioctl_host_unregister(struct vcuda_file *vf, void __user *arg)
{
	struct vcuda_host_register r;
	struct vcuda_hostmem *hm;

	if (copy_from_user(&r, arg, sizeof(r)))
		return -EFAULT;
	if (r.reserved[0] || r.reserved[1])
		return -EINVAL;
	spin_lock(&vf->hostmem_lock);
	hm = vcuda_hostreg_find_locked(vf, r.addr, r.addr + 1);
	if (hm)
		list_del_init(&hm->reg);
	spin_unlock(&vf->hostmem_lock);
	if (!hm)
		return -ENOENT;
	/* Requests using it hold their own references; the last one fences. */
	vcuda_hostmem_put(hm);
	return 0;
}

static long vcuda_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct vcuda_file *vf = filp->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case VCUDA_IOC_SESSION_OPEN:
	case VCUDA_IOC_SUBMIT:
	case VCUDA_IOC_RAW_SUBMIT:
	case VCUDA_IOC_HOST_REGISTER:
	case VCUDA_IOC_HOST_UNREGISTER:
		break;
	default:
		return -ENOTTY;
	}
	if (READ_ONCE(vf->dev->gone))
		return -ENODEV;

	switch (cmd) {
	case VCUDA_IOC_SESSION_OPEN:
		return vcuda_ioctl_session_open(vf, uarg);
	case VCUDA_IOC_SUBMIT:
		return vcuda_ioctl_submit(vf, uarg);
	case VCUDA_IOC_HOST_REGISTER:
		return vcuda_ioctl_host_register(vf, uarg);
	case VCUDA_IOC_HOST_UNREGISTER:
		return vcuda_ioctl_host_unregister(vf, uarg);
	default:
		return vcuda_ioctl_raw_submit(vf, uarg);
	}
}

/* ---- host memory -------------------------------------------------------- */

/* Frees hm now: the host no longer uses it, or never saw it. */
static void vcuda_hostmem_free(struct vcuda_hostmem *hm)
{
	struct vcuda_file *vf = hm->vf;

	spin_lock(&vf->hostmem_lock);
	vf->hostmem_bytes -= hm->len;
	spin_unlock(&vf->hostmem_lock);
	vcuda_hostmem_free_chunks(vf->dev, hm);
	vcuda_file_put(vf);
}

/* The host may still use hm: keep it until vf goes, after the session. */
static void vcuda_hostmem_park(struct vcuda_hostmem *hm)
{
	struct vcuda_file *vf = hm->vf;

	spin_lock(&vf->hostmem_lock);
	list_add_tail(&hm->dead, &vf->hostmem_dead);
	spin_unlock(&vf->hostmem_lock);
	/* May free vf, and hm with it. */
	vcuda_file_put(vf);
}

/* Called by the completion path of hm's SESSION_FENCE. */
void vcuda_hostmem_fenced(struct vcuda_hostmem *hm, bool done)
{
	if (done)
		vcuda_hostmem_free(hm);
	else
		vcuda_hostmem_park(hm);
}

/*
 * Last reference gone (munmap, exit, or the last request using it freed):
 * fence the session and let the fence's completion free the chunks.  From
 * vcuda_wq, so that neither munmap nor a dying process waits for the ring.
 */
static void vcuda_hostmem_release_work(struct work_struct *work)
{
	struct vcuda_hostmem *hm = container_of(work, struct vcuda_hostmem, release_work);
	struct vcuda_file *vf = hm->vf;
	struct vcuda_seg fseg = {};
	struct vcuda_req *req;
	bool released;
	int err;

	spin_lock(&vf->hostmem_lock);
	released = vf->released;
	spin_unlock(&vf->hostmem_lock);
	if (released)
		goto park;	/* SESSION_CLOSE is on its way: no fence after it */

	req = vcuda_req_alloc(vf->dev, vf, VCU_OP_SESSION_FENCE);
	if (!req)
		goto park;
	/*
	 * The fence names the memory it releases, so that the host drops
	 * every way the session's GPU work could still reach those pages
	 * before it replies (their registration in the session's worker):
	 * after the reply they may belong to anyone.  hm's last reference is
	 * gone; the fence's completion frees it, so the segment only borrows it.
	 */
	req->segs[0].hm = hm;
	req->segs[0].hm_off = 0;
	req->segs[0].hm_borrowed = true;
	fseg.addr = 0;
	fseg.len = hm->len;
	fseg.flags = VCUDA_SEG_TO_DEVICE;
	err = vcuda_req_build(req, READ_ONCE(vf->session), 0, NULL, NULL, 0, &fseg, 1, true, 0);
	if (err)
		goto err_req;
	req->fence_hm = hm;
	req->orphan = true;
	/* Ring full for VCUDA_CLOSE_WAIT: try again; remove() ends the wait. */
	do {
		err = vcuda_req_queue(req, false);
	} while (err == -ETIMEDOUT);
	if (!err)
		return;		/* the fence's completion owns hm now */
	req->fence_hm = NULL;
err_req:
	vcuda_req_free(req);
	if (err == -ENODEV) {
		vcuda_hostmem_free(hm);
		return;
	}
park:
	vcuda_hostmem_park(hm);
}

static void vcuda_hostmem_release(struct kref *ref)
{
	struct vcuda_hostmem *hm = container_of(ref, struct vcuda_hostmem, ref);

	queue_work(vcuda_wq, &hm->release_work);
}

void vcuda_hostmem_put(struct vcuda_hostmem *hm)
{
	kref_put(&hm->ref, vcuda_hostmem_release);
}

/* Appends one chunk, growing the array as needed. */
static int vcuda_hostmem_add(struct vcuda_hostmem *hm, struct page *page, unsigned int order,
			     u64 off)
{
	struct vcuda_hostmem_chunk *c;

	if (hm->nchunks == hm->cap) {
		unsigned int cap = hm->cap ? 2 * hm->cap : 16;

		c = kvmalloc_array(cap, sizeof(*c), GFP_KERNEL);
		if (!c)
			return -ENOMEM;
		if (hm->nchunks)
			memcpy(c, hm->chunks, hm->nchunks * sizeof(*c));
		kvfree(hm->chunks);
		hm->chunks = c;
		hm->cap = cap;
	}
	c = &hm->chunks[hm->nchunks++];
	c->page = page;
	c->order = order;
	c->off = off;
	return 0;
}

/*
 * Allocates hm->len bytes, zeroed, in chunks as large as the allocator
 * gives (high orders tried without retrying or warning), never larger
 * than VCUDA_HOSTMEM_CHUNK nor than what is left.  On error the caller
 * frees what was allocated.
 */
static int vcuda_hostmem_alloc(struct vcuda_dev *dev, struct vcuda_hostmem *hm)
{
	unsigned int order = min_t(unsigned int, get_order(VCUDA_HOSTMEM_CHUNK), VCUDA_MAX_ORDER);
	unsigned long left = hm->len >> PAGE_SHIFT;
	u64 off = 0;
	int err;

	while (left) {
		gfp_t gfp = GFP_KERNEL | __GFP_ZERO;
		struct page *page;

		while ((1UL << order) > left)
			order--;
		if (order)
			gfp |= __GFP_NOWARN | __GFP_NORETRY;
		if (fatal_signal_pending(current))
			return -EINTR;
		page = alloc_pages(gfp, order);
		if (!page) {
			if (!order)
				return -ENOMEM;
			order--;	/* and stay there: larger ones just failed */
			continue;
		}
		err = vcuda_hostmem_add(hm, page, order, off);
		if (err) {
			__free_pages(page, order);
			return err;
		}
		atomic_long_add(1L << order, &dev->hostmem_pages);
		off += PAGE_SIZE << order;
		left -= 1UL << order;
		cond_resched();
	}
	return 0;
}

static void vcuda_vm_open(struct vm_area_struct *vma)
{
	struct vcuda_hostmem *hm = vma->vm_private_data;

	/* Only mremap's copy of the VMA, which vcuda_vm_mremap() then undoes. */
	kref_get(&hm->ref);
}

static void vcuda_vm_close(struct vm_area_struct *vma)
{
	vcuda_hostmem_put(vma->vm_private_data);
}

/* The mapping covers its VMA exactly: no partial munmap or mprotect. */
static int vcuda_vm_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	return -EINVAL;
}

/* The mapping does not move: the kernel moves the page tables back. */
static int vcuda_vm_mremap(struct vm_area_struct *vma)
{
	return -EINVAL;
}

static const struct vm_operations_struct vcuda_vm_ops = {
	.open = vcuda_vm_open,
	.close = vcuda_vm_close,
	.may_split = vcuda_vm_may_split,
	.mremap = vcuda_vm_mremap,
};

/*
 * Finds the host memory mapping of the current process that holds all of
 * [uaddr, uaddr + len) with the access the device needs; returns it with
 * a reference taken and *off set, or NULL.  Under mmap_lock the VMA holds
 * a reference, so the mapping cannot go away while it is taken.
 */
struct vcuda_hostmem *vcuda_hostmem_get(u64 uaddr, u64 len, bool write, u64 *off)
{
	struct mm_struct *mm = current->mm;
	struct vcuda_hostmem *hm = NULL;
	struct vm_area_struct *vma;

	if (!mm || !len)
		return NULL;
	mmap_read_lock(mm);
	vma = vma_lookup(mm, uaddr);
	if (vma && vma->vm_ops == &vcuda_vm_ops && len <= vma->vm_end - uaddr &&
	    (vma->vm_flags & (write ? VM_WRITE : VM_READ))) {
		hm = vma->vm_private_data;
		*off = uaddr - vma->vm_start;
		if (WARN_ON_ONCE(*off + len > hm->len))
			hm = NULL;
		else
			kref_get(&hm->ref);
	}
	mmap_read_unlock(mm);
	return hm;
}

static void vcuda_vm_flags_set(struct vm_area_struct *vma, unsigned long flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, flags);
#else
	vma->vm_flags |= flags;
#endif
}

static int vcuda_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct vcuda_file *vf = filp->private_data;
	struct vcuda_dev *dev = vf->dev;
	u64 len = vma->vm_end - vma->vm_start;
	u64 max = (u64)READ_ONCE(hostmem_max_mib) << 20;
	struct vcuda_hostmem *hm;
	unsigned int i;
	int err;

	if (!READ_ONCE(vf->session))
		return -ENOTCONN;
	if (READ_ONCE(dev->gone))
		return -ENODEV;
	/* Shared only: a private COW mapping of driver memory makes no sense. */
	if (!(vma->vm_flags & VM_SHARED) || vma->vm_pgoff)
		return -EINVAL;

	spin_lock(&vf->hostmem_lock);
	if (len > max || vf->hostmem_bytes > max - len) {
		spin_unlock(&vf->hostmem_lock);
		return -ENOMEM;
	}
	vf->hostmem_bytes += len;
	spin_unlock(&vf->hostmem_lock);

	err = -ENOMEM;
	hm = kzalloc(sizeof(*hm), GFP_KERNEL);
	if (!hm)
		goto err_charge;
	kref_init(&hm->ref);
	INIT_WORK(&hm->release_work, vcuda_hostmem_release_work);
	INIT_LIST_HEAD(&hm->dead);
	hm->len = len;
	err = vcuda_hostmem_alloc(dev, hm);
	if (err)
		goto err_chunks;

	/* remap_pfn_range() adds VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP. */
	vcuda_vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP);
	for (i = 0; i < hm->nchunks; i++) {
		const struct vcuda_hostmem_chunk *c = &hm->chunks[i];

		err = remap_pfn_range(vma, vma->vm_start + c->off, page_to_pfn(c->page),
				      PAGE_SIZE << c->order, vma->vm_page_prot);
		if (err)
			goto err_remap;
	}
	kref_get(&vf->ref);
	hm->vf = vf;
	vma->vm_private_data = hm;
	vma->vm_ops = &vcuda_vm_ops;
	return 0;

err_remap:
	/* Other threads may touch the range before mmap() fails: unmap first. */
	zap_vma_ptes(vma, vma->vm_start, len);
err_chunks:
	vcuda_hostmem_free_chunks(dev, hm);
err_charge:
	spin_lock(&vf->hostmem_lock);
	vf->hostmem_bytes -= len;
	spin_unlock(&vf->hostmem_lock);
	return err;
}

static int vcuda_open(struct inode *inode, struct file *filp)
{
	struct vcuda_dev *dev;
	struct vcuda_file *vf;

	xa_lock(&vcuda_minors);
	dev = xa_load(&vcuda_minors, iminor(inode));
	if (dev)
		kref_get(&dev->ref);
	xa_unlock(&vcuda_minors);
	if (!dev)
		return -ENODEV;

	vf = kzalloc(sizeof(*vf), GFP_KERNEL);
	if (!vf) {
		vcuda_dev_put(dev);
		return -ENOMEM;
	}
	kref_init(&vf->ref);
	vf->dev = dev;
	mutex_init(&vf->open_lock);
	atomic_set(&vf->inflight, 0);
	init_waitqueue_head(&vf->slot_wait);
	spin_lock_init(&vf->hostmem_lock);
	INIT_LIST_HEAD(&vf->hostmem_dead);
	INIT_LIST_HEAD(&vf->regs);
	vf->pid = get_pid(task_tgid(current));
	get_task_comm(vf->comm, current);
	mutex_lock(&dev->files_lock);
	list_add_tail(&vf->node, &dev->files);
	mutex_unlock(&dev->files_lock);
	filp->private_data = vf;
	return nonseekable_open(inode, filp);
}

static int vcuda_release(struct inode *inode, struct file *filp)
{
	struct vcuda_file *vf = filp->private_data;
	struct vcuda_hostmem *hm, *tmp;
	LIST_HEAD(regs);
	int err;

	mutex_lock(&vf->dev->files_lock);
	list_del(&vf->node);
	mutex_unlock(&vf->dev->files_lock);
	/*
	 * No VMA maps vf's memory any more (each held the file); fences not
	 * yet sent are not sent after the close.  Requests still in flight,
	 * the close among them, hold their own reference to vf.
	 */
	spin_lock(&vf->hostmem_lock);
	vf->released = true;
	list_splice_init(&vf->regs, &regs);
	spin_unlock(&vf->hostmem_lock);
	/* Registrations end with the file; released: they park until vf goes. */
	list_for_each_entry_safe(hm, tmp, &regs, reg) {
		list_del_init(&hm->reg);
		vcuda_hostmem_put(hm);
	}
	if (vf->session && !READ_ONCE(vf->dev->gone)) {
		err = vcuda_send_close(vf->dev, vf, vf->session);
		if (err && err != -ENODEV) {
			spin_lock(&vf->hostmem_lock);
			vf->close_lost = true;
			spin_unlock(&vf->hostmem_lock);
		}
	}
	vcuda_file_put(vf);
	return 0;
}

static const struct file_operations vcuda_fops = {
	.owner = THIS_MODULE,
	.open = vcuda_open,
	.release = vcuda_release,
	.unlocked_ioctl = vcuda_ioctl,
	.mmap = vcuda_mmap,
	.compat_ioctl = compat_ptr_ioctl,
};

/* ---- sysfs: leak checks for tests, open sessions ------------------------ */

static ssize_t inflight_show(struct device *d, struct device_attribute *attr, char *buf)
{
	struct vcuda_dev *dev = dev_get_drvdata(d);

	return sysfs_emit(buf, "%d\n", atomic_read(&dev->inflight));
}
static DEVICE_ATTR_RO(inflight);

static ssize_t pinned_pages_show(struct device *d, struct device_attribute *attr, char *buf)
{
	struct vcuda_dev *dev = dev_get_drvdata(d);

	return sysfs_emit(buf, "%ld\n", atomic_long_read(&dev->pinned_pages));
}
static DEVICE_ATTR_RO(pinned_pages);

static ssize_t hostmem_pages_show(struct device *d, struct device_attribute *attr, char *buf)
{
	struct vcuda_dev *dev = dev_get_drvdata(d);

	return sysfs_emit(buf, "%ld\n", atomic_long_read(&dev->hostmem_pages));
}
static DEVICE_ATTR_RO(hostmem_pages);

/*
 * One line per open file: "<pid> <session> <comm>", the opener's process
 * id as the reader's pid namespace sees it (0 if it cannot), the id
 * SESSION_OPEN gave the file (0 until then), its name.  Only whole lines:
 * files beyond a page are left out.  The guest's libnvidia-ml reads it.
 */
static ssize_t sessions_show(struct device *d, struct device_attribute *attr, char *buf)
{
	struct vcuda_dev *dev = dev_get_drvdata(d);
	struct vcuda_file *vf;
	char line[64];
	int len = 0, n;

	mutex_lock(&dev->files_lock);
	list_for_each_entry(vf, &dev->files, node) {
		n = scnprintf(line, sizeof(line), "%d %llu %s\n", pid_vnr(vf->pid),
			      READ_ONCE(vf->session), vf->comm);
		if (len + n >= PAGE_SIZE)
			break;
		memcpy(buf + len, line, n);
		len += n;
	}
	mutex_unlock(&dev->files_lock);
	return len;
}
static DEVICE_ATTR_RO(sessions);

/* Requests queued, notifications sent (each an exit to the host on KVM)
 * and queue interrupts taken, since the device appeared: what the guest
 * pays per call (bench/cudabench reads them around its loops). */
static ssize_t stats_show(struct device *d, struct device_attribute *attr, char *buf)
{
	struct vcuda_dev *dev = dev_get_drvdata(d);
	u64 rq, kicks, irqs;

	spin_lock_irq(&dev->vq_lock);
	rq = dev->stat_requests;
	kicks = dev->stat_kicks;
	irqs = dev->stat_irqs;
	spin_unlock_irq(&dev->vq_lock);
	return sysfs_emit(buf, "requests %llu\nkicks %llu\nirqs %llu\n", rq, kicks, irqs);
}
static DEVICE_ATTR_RO(stats);

static struct attribute *vcuda_attrs[] = {
	&dev_attr_inflight.attr,
	&dev_attr_stats.attr,
	&dev_attr_pinned_pages.attr,
	&dev_attr_hostmem_pages.attr,
	&dev_attr_sessions.attr,
	NULL,
};
ATTRIBUTE_GROUPS(vcuda);

/* ---- virtio driver ------------------------------------------------------ */

static void vcuda_vq_done(struct virtqueue *vq)
{
	struct vcuda_dev *dev = vq->vdev->priv;
	struct vcuda_req *req;
	unsigned long flags;
	unsigned int len;

	spin_lock_irqsave(&dev->vq_lock, flags);
	dev->stat_irqs++;
	do {
		virtqueue_disable_cb(vq);
		/* The ring only hands back tokens we queued; the reply is checked later. */
		while ((req = virtqueue_get_buf(vq, &len)) != NULL)
			vcuda_req_done_locked(dev, req, len, 0);
		if (unlikely(virtqueue_is_broken(vq)))
			break;
	} while (!virtqueue_enable_cb(vq));
	dev->vq_gen++;
	spin_unlock_irqrestore(&dev->vq_lock, flags);
	wake_up_all(&dev->vq_wait);
}

/*
 * Stops the device and completes everything it still holds with -ENODEV.
 * After this nothing touches dev->vq and no request of dev pins pages.
 */
static void vcuda_vq_teardown(struct vcuda_dev *dev)
{
	struct virtio_device *vdev = dev->vdev;
	struct vcuda_req *req;
	unsigned long id;

	spin_lock_irq(&dev->vq_lock);
	dev->gone = true;
	spin_unlock_irq(&dev->vq_lock);
	wake_up_all(&dev->vq_wait);

	/* Also waits for a callback running on another CPU. */
	virtio_reset_device(vdev);

	spin_lock_irq(&dev->vq_lock);
	while ((req = virtqueue_detach_unused_buf(dev->vq)) != NULL)
		vcuda_req_done_locked(dev, req, 0, -ENODEV);
	spin_unlock_irq(&dev->vq_lock);

	/* Every queued request came back from the ring; check it. */
	xa_lock(&dev->reqs);
	xa_for_each(&dev->reqs, id, req) {
		spin_lock_irq(&dev->vq_lock);
		if (WARN_ON_ONCE(req->queued && !req->completed))
			vcuda_req_done_locked(dev, req, 0, -ENODEV);
		spin_unlock_irq(&dev->vq_lock);
	}
	xa_unlock(&dev->reqs);

	vdev->config->del_vqs(vdev);
	dev->vq = NULL;
	/* Orphans: unpin and free them now, not at some later time. */
	flush_workqueue(vcuda_wq);
}

static int vcuda_validate(struct virtio_device *vdev)
{
	if (!virtio_has_feature(vdev, VIRTIO_F_VERSION_1)) {
		dev_err(&vdev->dev, "device lacks VIRTIO_F_VERSION_1\n");
		return -ENODEV;
	}
	/*
	 * Requests carry guest-physical addresses, which are only what the
	 * device sees when there is no platform IOMMU in between.
	 */
	if (virtio_has_feature(vdev, VIRTIO_F_ACCESS_PLATFORM)) {
		dev_err(&vdev->dev, "VIRTIO_F_ACCESS_PLATFORM is not supported\n");
		return -ENODEV;
	}
	return 0;
}

static int vcuda_probe(struct virtio_device *vdev)
{
	struct vcuda_dev *dev;
	dev_t devt;
	int err;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	kref_init(&dev->ref);
	dev->vdev = vdev;
	spin_lock_init(&dev->vq_lock);
	init_waitqueue_head(&dev->vq_wait);
	xa_init_flags(&dev->reqs, XA_FLAGS_ALLOC1);
	atomic_set(&dev->inflight, 0);
	atomic_long_set(&dev->pinned_pages, 0);
	atomic_long_set(&dev->hostmem_pages, 0);
	mutex_init(&dev->files_lock);
	INIT_LIST_HEAD(&dev->files);
	vdev->priv = dev;

	err = xa_alloc(&vcuda_minors, &dev->minor, dev, XA_LIMIT(0, VCUDA_MAX_DEVS - 1),
		       GFP_KERNEL);
	if (err)
		goto err_dev;
	devt = MKDEV(MAJOR(vcuda_devt), dev->minor);

	dev->vq = virtio_find_single_vq(vdev, vcuda_vq_done, "requests");
	if (IS_ERR(dev->vq)) {
		err = PTR_ERR(dev->vq);
		goto err_minor;
	}
	dev->vring_size = virtqueue_get_vring_size(dev->vq);
	dev->indirect = virtio_has_feature(vdev, VIRTIO_RING_F_INDIRECT_DESC);
	virtio_device_ready(vdev);

	err = -ENOMEM;
	dev->cdev = cdev_alloc();
	if (!dev->cdev)
		goto err_vq;
	dev->cdev->owner = THIS_MODULE;
	dev->cdev->ops = &vcuda_fops;
	err = cdev_add(dev->cdev, devt, 1);
	if (err) {
		kobject_put(&dev->cdev->kobj);
		goto err_vq;
	}

	dev->class_dev = device_create_with_groups(vcuda_class, &vdev->dev, devt, dev,
						   vcuda_groups, "vcuda%u", dev->minor);
	if (IS_ERR(dev->class_dev)) {
		err = PTR_ERR(dev->class_dev);
		goto err_cdev;
	}
	dev_info(&vdev->dev, "vcuda%u: %u descriptors%s\n", dev->minor, dev->vring_size,
		 dev->indirect ? ", indirect" : "");
	return 0;

err_cdev:
	cdev_del(dev->cdev);
err_vq:
	vcuda_vq_teardown(dev);
err_minor:
	xa_erase(&vcuda_minors, dev->minor);
err_dev:
	vdev->priv = NULL;
	/* Not kfree: a racing open may hold a reference. */
	vcuda_dev_put(dev);
	return err;
}

static void vcuda_remove(struct virtio_device *vdev)
{
	struct vcuda_dev *dev = vdev->priv;

	/* No new opens, then no /dev node or sysfs readers, then no requests. */
	xa_erase(&vcuda_minors, dev->minor);
	device_destroy(vcuda_class, MKDEV(MAJOR(vcuda_devt), dev->minor));
	cdev_del(dev->cdev);
	vcuda_vq_teardown(dev);
	vdev->priv = NULL;
	vcuda_dev_put(dev);
}

static const struct virtio_device_id vcuda_id_table[] = {
	{ VCU_VIRTIO_ID, VIRTIO_DEV_ANY_ID },
	{ 0 },
};
MODULE_DEVICE_TABLE(virtio, vcuda_id_table);

static struct virtio_driver vcuda_driver = {
	.driver.name = KBUILD_MODNAME,
	.driver.owner = THIS_MODULE,
	.id_table = vcuda_id_table,
	.validate = vcuda_validate,
	.probe = vcuda_probe,
	.remove = vcuda_remove,
};

static int __init vcuda_init(void)
{
	int err;

	vcuda_wq = alloc_workqueue("vcuda", 0, 0);
	if (!vcuda_wq)
		return -ENOMEM;
	err = alloc_chrdev_region(&vcuda_devt, 0, VCUDA_MAX_DEVS, "vcuda");
	if (err)
		goto err_wq;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 4, 0)
	vcuda_class = class_create("vcuda");
#else
	vcuda_class = class_create(THIS_MODULE, "vcuda");
#endif
	if (IS_ERR(vcuda_class)) {
		err = PTR_ERR(vcuda_class);
		goto err_region;
	}
	err = register_virtio_driver(&vcuda_driver);
	if (err)
		goto err_class;
	return 0;

err_class:
	class_destroy(vcuda_class);
err_region:
	unregister_chrdev_region(vcuda_devt, VCUDA_MAX_DEVS);
err_wq:
	destroy_workqueue(vcuda_wq);
	return err;
}

static void __exit vcuda_exit(void)
{
	unregister_virtio_driver(&vcuda_driver);
	class_destroy(vcuda_class);
	unregister_chrdev_region(vcuda_devt, VCUDA_MAX_DEVS);
	destroy_workqueue(vcuda_wq);
}

module_init(vcuda_init);
module_exit(vcuda_exit);

MODULE_DESCRIPTION("virtio-cuda paravirtualized GPU-compute transport");
MODULE_LICENSE("GPL");
