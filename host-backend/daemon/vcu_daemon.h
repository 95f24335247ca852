/*
 * vcu-daemon's internals: the VMs it serves, their sessions, and what the
 * operator's surfaces (control socket, metrics) read.  docs/design.md,
 * "The host daemon".
 *
 * One thread: a poll() loop over the listening sockets, every VM's link,
 * every probe, the operator's connections and a signalfd (SIGCHLD,
 * SIGTERM, SIGINT).  Nothing in it blocks for long: a worker starts in a
 * few milliseconds (vcu_jail_spawn() waits for its exec), a link that
 * cannot take a frame at once gets it queued.
 */
#ifndef VCU_DAEMON_H
#define VCU_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vcu_account.h"
#include "vcu_jail.h"
#include "vcu_link.h"
#include "vcu_sched.h"

#define VCU_DMN_VERSION "0.2.0"
/* Defaults. */
#define VCU_DMN_MAX_SESSIONS 64u        /* per VM */
#define VCU_DMN_MAX_SESSIONS_CAP 4096u
#define VCU_DMN_MAX_VMS 256u
#define VCU_DMN_PROBE_MS 60000
#define VCU_DMN_METRICS_DEFAULT "127.0.0.1:9477"
#define VCU_DMN_MODCACHE_BYTES ((uint64_t)1 << 30)   /* as VCU_MODCACHE_DEFAULT_BYTES */
/* GPU memory one worker's CUDA context takes, charged to its VM's quota
 * (as VCU_BACKEND_CTX_BYTES: an H100's, driver 580). */
#define VCU_DMN_CTX_BYTES ((uint64_t)524 << 20)
/*
 * Host memory a VM's workers may hold for what its guests ask (each
 * session's budget as taken, up to 256 MiB; its staging buffers, up to
 * 256 MiB; its aliases of guest memory), summed over the VM.  4 GiB: the
 * full bounds of eight sessions at once, or a little of each of the 64
 * a VM may open by default, where those bounds alone would let one VM
 * hold 32 GiB of the host.  What the driver and the worker need for
 * themselves is not counted.
 */
#define VCU_DMN_HOST_QUOTA ((uint64_t)4 << 30)
/* First id handed to a worker for the share group (its pid inside its
 * jail is 1, as every other's): above any host pid. */
#define VCU_DMN_PARTY_BASE 0x40000000u
/* Workers' pids in their jails, handed out in turn from this range, so
 * that workers alive at once have pids of their own (vcu_jail_cfg_t). */
#define VCU_DMN_NS_PID_FIRST 2
#define VCU_DMN_NS_PID_LAST 32767

typedef struct vcu_dmn_s vcu_dmn_t;
typedef struct vcu_vm_s vcu_vm_t;

/* A frame waiting for the link to take it. */
typedef struct vcu_txq_s {
    struct vcu_txq_s *next;
    unsigned char *buf;
    size_t len, off;
    int fds[VCU_LINK_MAX_FDS];      /* sent with the first byte; closed after */
    unsigned int nfds;
} vcu_txq_t;

/* One guest session: its worker. */
typedef struct vcu_sess_s {
    struct vcu_sess_s *next;
    uint64_t id;                    /* the guest's session id (QEMU's) */
    pid_t pid;                      /* the worker's jail (its first process); -1 once reaped */
    pid_t prog_pid;                 /* the worker program itself, for reports */
    int pidfd;
    int acct_slot;                  /* in vm->acct; released once reaped */
    uint32_t party;                 /* its id in the share group */
    pid_t ns_pid;                   /* its pid in its jail (the names of its IPC files) */
    int keep_fd;                    /* the daemon's end of its keep socket (keep.c); -1: none */
    uint32_t nkept;                 /* descriptors it put in its VM's keep */
    bool killed;
} vcu_sess_t;

/* A descriptor in a VM's keep (vcu_keep.h): until its owner is reaped. */
typedef struct vcu_kept_s {
    uint8_t token[16];
    uint64_t owner;                 /* the session that put it */
    uint64_t size;
    uint32_t kind, dev;
    int fd;
} vcu_kept_t;

enum {
    VCU_VM_HELLO,                   /* connected, no HELLO yet */
    VCU_VM_PROBING,                 /* a probe worker checks CUDA as the VM asks */
    VCU_VM_READY,                   /* welcomed: sessions may start */
    VCU_VM_GONE,                    /* link closed: waiting for its workers to go */
};

struct vcu_vm_s {
    vcu_vm_t *next;
    vcu_dmn_t *d;
    uint64_t id;
    int state;
    int fd;                         /* the link; -1 once closed */
    uid_t peer_uid;
    pid_t peer_pid;
    /* What the VM asked for and got. */
    struct vcu_link_hello hello;
    char name[64];
    char gpus[256];
    uint32_t flags;
    uint32_t sms;
    char modcache_dir[4096];        /* "" : none */
    /* The folder its workers share as /dev/shm: the driver's interprocess
     * events and the IPC handles' records (host-backend/worker/cuda_ipc.c),
     * which no other VM's worker can reach.  Removed with the VM. */
    char ipc_dir[4096];             /* "" : not made */
    /* Its keep: shareable handles its workers exported (keep.c). */
    vcu_kept_t *kept;
    uint32_t nkept, kept_cap;
    /* Its slice, kept where its workers read it. */
    vcu_account_t *acct;            /* the memory account (vcu_account.h) */
    int policy_fd;
    struct vcu_policy *policy;      /* the daemon writes it */
    vcu_sched_t sched;              /* its view of the share group; vm_slot -1: none */
    /* Sessions. */
    vcu_sess_t *sessions;
    uint32_t nsessions;
    uint64_t spawned, spawn_failed, refused;
    /* The link's reader and writer. */
    unsigned char rbuf[sizeof(struct vcu_link_hdr) + VCU_LINK_MAX_BODY];
    size_t rhave;
    int rfds[16];
    unsigned int nrfds;
    vcu_txq_t *txq, *txq_tail;
    /* The probe. */
    pid_t probe_pid;
    int probe_pidfd;
    int probe_fd;
    uint64_t probe_deadline_ns;
    unsigned char probe_buf[16 + 256 + 1024];
    size_t probe_have;
    char cuda_error[256];
    uint64_t connected_ns;
};

/* An operator's connection (control socket or metrics). */
typedef struct vcu_op_s {
    struct vcu_op_s *next;
    int fd;
    int kind;                       /* 0: control (JSON lines), 1: metrics (HTTP) */
    char in[8192];
    size_t have;
    char *out;
    size_t outlen, outoff;
    bool close_after;
} vcu_op_t;

struct vcu_dmn_s {
    /* Options. */
    const char *socket_path;
    const char *control_path;
    const char *metrics;            /* "HOST:PORT", "unix:PATH" or "off" */
    const char *run_dir;
    const char *cache_dir;          /* module cache root; NULL: none */
    uint64_t modcache_bytes;
    const char *libcuda;
    const char *worker;
    const char *mps_pipe;
    const char *allowed_gpus;       /* NULL: any */
    uint32_t max_sessions;          /* per VM, default for those that ask none */
    uint32_t max_vms;
    uint64_t default_quota;         /* for a VM that asks none; 0: none */
    uint64_t max_quota;             /* most a VM may ask; 0: any */
    uint64_t host_quota;            /* host memory per VM for its workers; 0: none */
    uint64_t ctx_bytes;             /* charged per worker context (--ctx-bytes) */
    int seccomp;                    /* VCU_SECCOMP_* for the workers */
    int socket_mode;
    gid_t socket_gid;
    vcu_jail_cfg_t jail;
    char jail_base[4096];
    char jail_note[256];            /* why the jail is off, if it is */
    char ipc_root[4000];            /* /dev/shm/virtio-cuda.PID: the VMs' IPC folders */
    char worker_dir[4096];
    char libcuda_dir[4096];
    /* State. */
    int vm_listen, ctl_listen, metrics_listen, sigfd;
    vcu_vm_t *vms;
    uint32_t nvms;
    uint64_t next_vm_id;
    uint32_t next_party;
    pid_t next_ns_pid;              /* the next worker's pid in its jail */
    uint32_t nkept, keep_max;       /* descriptors kept for all VMs, and the most */
    vcu_op_t *ops;
    /* The host's compute-share group: a memfd of the daemon's, mapped by
     * the workers of every VM in it. */
    int share_fd;
    void *share_map;
    vcu_sched_t share;              /* the daemon's own view: cleaning up */
    uint64_t started_ns;
    uint64_t workers_started, workers_failed, vms_refused;
    bool stop;
};

/* vm.c */
void vcu_vm_accept(vcu_dmn_t *d);
void vcu_vm_input(vcu_vm_t *vm);
void vcu_vm_output(vcu_vm_t *vm);
void vcu_vm_probe_input(vcu_vm_t *vm);
void vcu_vm_tick(vcu_dmn_t *d, uint64_t now);
void vcu_vm_reaped(vcu_dmn_t *d, pid_t pid, int status);
void vcu_vm_free_gone(vcu_dmn_t *d);
/* Removes every VM's IPC folder and the daemon's folder of them (it ends). */
void vcu_vm_ipc_remove_all(vcu_dmn_t *d);
vcu_vm_t *vcu_vm_find(vcu_dmn_t *d, const char *key);
int vcu_vm_set_slice(vcu_vm_t *vm, const uint64_t *mem_quota, const uint32_t *share,
                     const uint32_t *cap, char *err, size_t errlen);
uint64_t vcu_vm_gpu_ns(const vcu_vm_t *vm);

/* keep.c: a question on the keep socket fd of one of vm's workers (none
 * if the worker is gone: fd is then no session's); dropping what a worker
 * (s) or, s NULL, the whole VM put there */
void vcu_keep_ready(vcu_vm_t *vm, int fd);
void vcu_keep_drop(vcu_vm_t *vm, vcu_sess_t *s);

/* report.c: the control socket and the metrics endpoint */
void vcu_op_accept(vcu_dmn_t *d, int listen_fd, int kind);
void vcu_op_input(vcu_dmn_t *d, vcu_op_t *op);
void vcu_op_output(vcu_dmn_t *d, vcu_op_t *op);
void vcu_op_free_closed(vcu_dmn_t *d);

/* main.c */
uint64_t vcu_dmn_now(void);
void vcu_dmn_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* VCU_DAEMON_H */
