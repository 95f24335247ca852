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
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/fs.h>
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

struct workqueue_struct *vcuda_wq;	/* frees orphaned requests */
static dev_t vcuda_devt;
static struct class *vcuda_class;
/* minor -> struct vcuda_dev; allocates N of /dev/vcudaN.  Own xa_lock. */
static DEFINE_XARRAY_ALLOC(vcuda_minors);

static void vcuda_dev_release(struct kref *ref)
{
	struct vcuda_dev *dev = container_of(ref, struct vcuda_dev, ref);

	WARN_ON(!xa_empty(&dev->reqs));
	xa_destroy(&dev->reqs);
	kfree(dev);
}

void vcuda_dev_put(struct vcuda_dev *dev)
{
	kref_put(&dev->ref, vcuda_dev_release);
}

static void vcuda_file_release(struct kref *ref)
{
	struct vcuda_file *vf = container_of(ref, struct vcuda_file, ref);

	mutex_destroy(&vf->open_lock);
	vcuda_dev_put(vf->dev);
	kfree(vf);
}

void vcuda_file_put(struct vcuda_file *vf)
{
	kref_put(&vf->ref, vcuda_file_release);
}

/* ---- ioctls ------------------------------------------------------------- */

static long vcuda_ioctl_session_open(struct vcuda_file *vf, void __user *arg)
{
	struct vcuda_session_open so;
	struct vcu_session_open_req oreq = {};
	struct vcu_session_open_resp oresp = {};
	struct vcuda_req *req;
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

	err = -ENOMEM;
	req = vcuda_req_alloc(vf->dev, vf, VCU_OP_SESSION_OPEN);
	if (!req)
		goto err_lock;
	req->file_slot = true;
	req->close_if_orphan = true;
	oreq.version_min = cpu_to_le32(so.version_min);
	oreq.version_max = cpu_to_le32(so.version_max);
	oreq.features = cpu_to_le64(so.features);
	err = vcuda_req_build(req, 0, 0, &oreq, NULL, sizeof(oreq), NULL, 0, false,
			      sizeof(oresp));
	if (err)
		goto err_req;
	err = vcuda_req_queue(req, true);
	if (err)
		goto err_req;
	err = vcuda_req_wait(req);
	if (err == -EINTR)
		goto err_lock;	/* orphaned: the completion path closes and frees it */
	if (err)
		goto err_req;
	err = vcuda_req_reply(req, &status, &plen);
	if (err)
		goto err_req;
	memcpy(&oresp, req->resp + 1, min_t(size_t, plen, sizeof(oresp)));
	vcuda_req_free(req);

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
		vcuda_send_close(vf->dev, session);
	goto err_lock;
err_req:
	vcuda_req_free(req);
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

static long vcuda_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct vcuda_file *vf = filp->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case VCUDA_IOC_SESSION_OPEN:
	case VCUDA_IOC_SUBMIT:
	case VCUDA_IOC_RAW_SUBMIT:
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
	default:
		return vcuda_ioctl_raw_submit(vf, uarg);
	}
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
	filp->private_data = vf;
	return nonseekable_open(inode, filp);
}

static int vcuda_release(struct inode *inode, struct file *filp)
{
	struct vcuda_file *vf = filp->private_data;

	/* Requests still in flight hold their own reference to vf. */
	if (vf->session && !READ_ONCE(vf->dev->gone))
		vcuda_send_close(vf->dev, vf->session);
	vcuda_file_put(vf);
	return 0;
}

static const struct file_operations vcuda_fops = {
	.owner = THIS_MODULE,
	.open = vcuda_open,
	.release = vcuda_release,
	.unlocked_ioctl = vcuda_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
};

/* ---- sysfs: leak checks for tests --------------------------------------- */

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

static struct attribute *vcuda_attrs[] = {
	&dev_attr_inflight.attr,
	&dev_attr_pinned_pages.attr,
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
