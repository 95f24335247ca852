/* SPDX-License-Identifier: (GPL-2.0-only WITH Linux-syscall-note) OR MIT */
/*
 * ioctl ABI of /dev/vcudaN, the virtio-cuda guest driver.
 *
 * One session per open file.  VCUDA_IOC_SESSION_OPEN must come first; every
 * other command fails with -ENOTCONN before it.  Each command returns 0 or a
 * negative errno; where the device answered, its wire status (VCU_S_*,
 * include/vcu_proto.h) is returned in the params struct as well.
 *
 * New behaviour gets a new command number, never a changed struct.
 */
#ifndef _UAPI_VCUDA_IOCTL_H
#define _UAPI_VCUDA_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define VCUDA_IOC_MAGIC 0xCD

/* Largest data segment, and largest sum of segments, per request. */
#define VCUDA_MAX_XFER (1ULL << 30)
/* Segments up to this size are copied through kernel bounce buffers. */
#define VCUDA_BOUNCE_MAX (64u * 1024)
#define VCUDA_MAX_SEGS 16u
#define VCUDA_MAX_PAYLOAD (64u * 1024)

/*
 * VCUDA_IOC_SESSION_OPEN: open this file's session on the device and agree
 * on a protocol version and feature bits.  -EBUSY if already open.
 */
struct vcuda_session_open {
	__u32 version_min;	/* IN: oldest protocol version wanted */
	__u32 version_max;	/* IN: newest */
	__u64 features;		/* IN: VCU_FEAT_* wanted; OUT: agreed */
	__u32 version;		/* OUT: agreed version */
	__u32 status;		/* OUT: device's VCU_S_* */
	__u64 max_xfer;		/* OUT: data bytes per request */
	__u32 max_payload;	/* OUT: payload bytes per request and reply */
	__u32 max_segs;		/* OUT: data segments per request */
	__u64 reserved[4];	/* IN: must be 0 */
};

#define VCUDA_SEG_TO_DEVICE (1u << 0)	/* the device reads the user buffer */
#define VCUDA_SEG_FROM_DEVICE (1u << 1)	/* the device writes the user buffer */

struct vcuda_seg {
	__u64 addr;		/* IN: user address; any alignment */
	__u64 len;		/* IN: bytes; 0 allowed */
	__u32 flags;		/* IN: exactly one of VCUDA_SEG_* */
	__u32 reserved;		/* IN: must be 0 */
};

/* vcuda_submit.flags */
#define VCUDA_SUBMIT_ASYNC (1u << 0)	/* return once queued; no reply is read */

/*
 * VCUDA_IOC_SUBMIT: send one request and (unless VCUDA_SUBMIT_ASYNC) wait
 * for its reply.  Several threads may submit on one file at once.
 * An async request's FROM_DEVICE segments are always pinned, whatever
 * their size (nobody is left to copy a bounce buffer out).
 * -EINTR if a signal arrives while waiting: the request still completes
 * on the device, and its pages stay pinned until it has.
 */
struct vcuda_submit {
	__u32 opcode;		/* IN: VCU_OP_*, not a transport opcode */
	__u32 flags;		/* IN: VCUDA_SUBMIT_* */
	__u64 req_addr;		/* IN: user address of the request payload */
	__u32 req_len;		/* IN: payload bytes, <= max_payload */
	__u32 nsegs;		/* IN: entries at segs_addr, <= max_segs */
	__u64 segs_addr;	/* IN: user address of struct vcuda_seg[nsegs] */
	__u64 resp_addr;	/* IN: user address for the reply payload */
	__u32 resp_cap;		/* IN: bytes at resp_addr, <= max_payload */
	__u32 resp_len;		/* OUT: reply payload bytes written */
	__u32 status;		/* OUT: device's VCU_S_* */
	__u32 reserved0;	/* IN: must be 0 */
	__u64 reserved[2];	/* IN: must be 0 */
};

/*
 * VCUDA_IOC_RAW_SUBMIT: test-only path, refused with -EPERM unless the
 * module was loaded with allow_raw=1.  Sends req_len bytes at req_addr to
 * the device exactly as given, header and ranges included, so tests can
 * forge requests the driver would never build.  The reply (header
 * included) is copied to resp_addr.
 */
struct vcuda_raw_submit {
	__u64 req_addr;		/* IN */
	__u32 req_len;		/* IN: <= 1 MiB */
	__u32 resp_cap;		/* IN: <= max_payload + reply header */
	__u64 resp_addr;	/* IN */
	__u32 resp_len;		/* OUT */
	__u32 reserved0;	/* IN: must be 0 */
	__u64 reserved[2];	/* IN: must be 0 */
};

/*
 * mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), after
 * VCUDA_IOC_SESSION_OPEN: allocates len bytes (rounded up to pages) of
 * zeroed memory owned by the driver, in physically contiguous chunks of up
 * to VCUDA_HOSTMEM_CHUNK: the guest side of cudaMallocHost.  A data segment
 * that lies inside one such mapping travels as its chunks' physical ranges,
 * without pinning, and the host may use it asynchronously (the pages stay
 * put until the mapping goes away, when the driver fences the session's
 * work on the host before it frees them).  The offset must be 0; the
 * mapping cannot be split, moved or expanded (munmap the whole of it).
 * Errors: -ENOTCONN before SESSION_OPEN, -EINVAL bad flags or offset,
 * -ENOMEM.
 */
#define VCUDA_HOSTMEM_CHUNK (4u << 20)

/*
 * VCUDA_IOC_HOST_REGISTER: pins [addr, addr + len) of the caller's memory
 * (whole pages) until VCUDA_IOC_HOST_UNREGISTER or close, as the device's
 * pinned memory: SUBMIT sends segments inside it as stable physical
 * ranges (copies at DMA speed, a device pointer for mapped use), as it
 * does for mmap()ed memory.  Counts against the same per-file limit
 * (hostmem_max_mib).  Ranges may not overlap another registration (EEXIST).
 * VCUDA_IOC_HOST_UNREGISTER: addr inside a registration ends it; its
 * pages are unpinned once the host has stopped using them.
 */
struct vcuda_host_register {
	__u64 addr;		/* IN: user address; any alignment */
	__u64 len;		/* IN: bytes, > 0 */
	__u64 reserved[2];	/* IN: must be 0 */
};

#define VCUDA_IOC_SESSION_OPEN _IOWR(VCUDA_IOC_MAGIC, 0x00, struct vcuda_session_open)
#define VCUDA_IOC_SUBMIT _IOWR(VCUDA_IOC_MAGIC, 0x01, struct vcuda_submit)
#define VCUDA_IOC_RAW_SUBMIT _IOWR(VCUDA_IOC_MAGIC, 0x02, struct vcuda_raw_submit)
#define VCUDA_IOC_HOST_REGISTER _IOW(VCUDA_IOC_MAGIC, 0x03, struct vcuda_host_register)
#define VCUDA_IOC_HOST_UNREGISTER _IOW(VCUDA_IOC_MAGIC, 0x04, struct vcuda_host_register)

#endif /* _UAPI_VCUDA_IOCTL_H */
