/*
 * The link between a QEMU device (its session proxy, qemu-device/proxy_link.c)
 * and the host daemon (vcu-daemon, host-backend/daemon/): one unix stream
 * socket per device, which QEMU reaches as a -chardev socket.  The daemon
 * owns the GPU side of every VM it serves: it starts each session's
 * worker in a jail of its own, keeps the VM's slice (memory account,
 * compute share, session count) and answers for it.  QEMU never forks,
 * execs or loads CUDA: it hands the daemon the ends of a new session's
 * channel, the daemon hands them to the worker it starts.
 *
 * Frames: struct vcu_link_hdr, then len bytes of body.  File descriptors
 * travel by SCM_RIGHTS with the first byte of the frame that names them,
 * and each frame type says how many it carries; a reader keeps received
 * descriptors in arrival order and takes them as frames need them.  Both
 * ends are on one host and built from one tree: fields are host-endian.
 * Each side checks every length and every count the other sent: QEMU
 * runs a guest, the daemon runs guests' CUDA work in its workers, and
 * neither trusts the other to be well.
 *
 *   QEMU -> daemon
 *     HELLO    body vcu_link_hello; first, and again after a reconnect
 *     SPAWN    id: the session; no body; 4 fds: the worker's ends of the
 *              session's channel (vcu_ipc.h): socket, ring area, request
 *              doorbell, reply doorbell
 *     KILL     id: the session; no body
 *   daemon -> QEMU
 *     WELCOME  body vcu_link_welcome; the answer to HELLO; with status OK,
 *              2 fds: the VM's memory account and its policy page, both
 *              read-only (for QEMU's own reports)
 *     SPAWNED  id: the session; body vcu_link_spawned; with status OK, 1 fd:
 *              the worker's pidfd (readable once the process is gone)
 *     SLICE    body vcu_link_slice: the VM's slice as it is now, after an
 *              operator changed it (control socket)
 *
 * A frame of an unknown type, a body of the wrong size or a descriptor
 * count that does not match ends the link (the side that sees it closes
 * the socket).  The daemon ends every worker of a VM whose link ends.
 */
#ifndef VCU_LINK_H
#define VCU_LINK_H

#include <stdint.h>

#include "vcu_fdpass.h"

#define VCU_LINK_VERSION 1u

enum {
    VCU_LINK_HELLO = 1,
    VCU_LINK_WELCOME = 2,
    VCU_LINK_SPAWN = 3,
    VCU_LINK_SPAWNED = 4,
    VCU_LINK_KILL = 5,
    VCU_LINK_SLICE = 6,
};

/* Descriptors each frame carries. */
#define VCU_LINK_SPAWN_FDS 4u
#define VCU_LINK_WELCOME_FDS 2u
#define VCU_LINK_SPAWNED_FDS 1u
#define VCU_LINK_MAX_FDS 4u

struct vcu_link_hdr {
    uint32_t type;                  /* VCU_LINK_* */
    uint32_t len;                   /* body bytes after this header */
    uint64_t id;                    /* SPAWN, KILL, SPAWNED: the guest's session id */
};

/* vcu_link_hello.flags */
#define VCU_LINK_F_CAPTURE_PRINTF 1u    /* kernels' printf goes to the guest */
#define VCU_LINK_F_NO_MODCACHE 2u       /* the VM uses no module cache */
#define VCU_LINK_F_PRIVATE_MODCACHE 4u  /* a module cache of the VM's own */
#define VCU_LINK_F_ALL 7u

/* What the VM's device asks for; the daemon may give less (its own
 * bounds, an operator's setting for the VM's name). */
struct vcu_link_hello {
    uint32_t version;               /* VCU_LINK_VERSION */
    uint32_t flags;                 /* VCU_LINK_F_* */
    uint64_t mem_quota;             /* GPU memory per device, bytes; 0: none asked */
    uint32_t max_sessions;          /* 0: the daemon's default */
    uint32_t compute_share;         /* weight in the host's group; 0: not in it */
    uint32_t compute_cap;           /* percent of the GPU's time; 0: none */
    uint32_t sms;                   /* packed mode's SMs; 0: isolated mode */
    uint32_t ring_bytes;            /* the proxy's request ring (for the worker) */
    uint32_t spin_us;               /* the ring consumers' spin */
    uint32_t qemu_pid;              /* for the operator's reports only */
    uint32_t reserved;
    char name[64];                  /* the VM's name, NUL-terminated ([A-Za-z0-9._-]) */
    char gpus[256];                 /* host GPUs, as the device property; NUL-terminated */
};

struct vcu_link_slice {
    uint64_t mem_quota;             /* bytes per device; 0: none */
    uint32_t max_sessions;
    uint32_t compute_share;         /* 0: not in the group */
    uint32_t compute_cap;           /* 0: none */
    uint32_t sms;
};

struct vcu_link_welcome {
    uint32_t version;               /* VCU_LINK_VERSION */
    uint32_t status;                /* VCU_S_*: OK, or why the VM is refused */
    uint64_t vm_id;                 /* the daemon's name for this VM, for its reports */
    struct vcu_link_slice slice;    /* what the VM got */
    char error[240];                /* status != OK: the reason, for QEMU's log */
    char cuda_error[240];           /* "": CUDA works as configured; else why not */
};

struct vcu_link_spawned {
    uint32_t status;                /* VCU_S_*: OK, EBUSY (the VM's sessions), ... */
    uint32_t pid;                   /* the worker's host pid, for reports */
    int32_t acct_slot;              /* its slot in the VM's memory account */
    uint32_t reserved;
};

/* A frame longer than this is a broken peer. */
#define VCU_LINK_MAX_BODY 4096u

_Static_assert(sizeof(struct vcu_link_hdr) == 16, "vcu_link_hdr");
_Static_assert(VCU_LINK_MAX_FDS <= VCU_FDPASS_MAX, "a frame's descriptors fit one message");
_Static_assert(sizeof(struct vcu_link_hello) == 368, "vcu_link_hello");
_Static_assert(sizeof(struct vcu_link_slice) == 24, "vcu_link_slice");
_Static_assert(sizeof(struct vcu_link_welcome) == 520, "vcu_link_welcome");
_Static_assert(sizeof(struct vcu_link_spawned) == 16, "vcu_link_spawned");

/*
 * The VM's policy page: written by the daemon alone (an operator may change
 * the slice while the VM runs), mapped read-only by the VM's workers, which
 * enforce it, and by QEMU, which reports it.  One load per field; gen
 * moves on with every change.
 */
struct vcu_policy {
    uint64_t magic;                 /* VCU_POLICY_MAGIC */
    _Atomic uint64_t gen;
    _Atomic uint64_t mem_quota;     /* bytes per device; 0: none */
    _Atomic uint64_t host_quota;    /* host memory the VM's workers may hold; 0: none */
    _Atomic uint32_t compute_share;
    _Atomic uint32_t compute_cap;
    _Atomic uint32_t max_sessions;
    uint32_t reserved;
    uint64_t pad[2];
};

#define VCU_POLICY_MAGIC 0x31796c6f702d7576ull   /* "vu-poly1" */

_Static_assert(sizeof(struct vcu_policy) == 64, "vcu_policy");

#endif /* VCU_LINK_H */
