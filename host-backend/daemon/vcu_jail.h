/*
 * Starting a worker in a jail of its own (jail.c): the daemon's side of
 * docs/design.md, "Jails".
 *
 * The child of vcu_jail_spawn() runs, before it executes the program:
 *   - in new mount, PID, network, IPC and UTS namespaces (and a user
 *     namespace when the daemon is not root), so that it sees no other
 *     process, no network and no file but what its root holds;
 *   - at the pid in that namespace the configuration asks (ns_pid);
 *   - on a root of its own: a tmpfs holding read-only binds of the system's
 *     library folders (/usr, /lib*), /etc/ld.so.cache, the program's and the
 *     driver's folders and any extra read-only path given, /sys read-only,
 *     a /proc of its PID namespace, a /dev with the null devices and the
 *     NVIDIA device nodes only and a /dev/shm of its own or its VM's
 *     (shm_dir), a private /tmp of bounded size, and the
 *     read-write paths given (the module cache); the tmpfs itself is then
 *     made read-only;
 *   - with exactly the descriptors given (as fds 3, 4, ...; stdin and
 *     stdout /dev/null, stderr the daemon's log) and every other closed,
 *     the environment given and nothing else, the user given (root daemon)
 *     or the daemon's own (user namespace), no_new_privs, RLIMIT_CORE 0,
 *     bounded open files and file size, and the parent-death signal, so
 *     that it never outlives the daemon.
 * Its seccomp filter is the program's own to install (worker/seccomp.c),
 * first thing, before it reads anything a guest sent.
 *
 * With jail off (vcu_jail_cfg_t.enable 0) only the descriptors, the
 * environment, the limits, no_new_privs and the death signal apply: for
 * hosts that refuse namespaces, and said so in the daemon's log and its
 * metrics.
 */
#ifndef VCU_JAIL_H
#define VCU_JAIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define VCU_JAIL_MAX_PATHS 16u

typedef struct vcu_jail_cfg_s {
    int enable;                     /* 1: namespaces and a root of its own */
    const char *base;               /* an empty directory of the daemon's, the mount
                                       point each child builds its root on */
    uid_t uid;                      /* a root daemon's workers run as this user */
    gid_t gid;                      /*   and group ((uid_t)-1: the daemon's own) */
    const char *ro[VCU_JAIL_MAX_PATHS];     /* more read-only binds (files or folders) */
    unsigned int nro;
    const char *rw[VCU_JAIL_MAX_PATHS];     /* read-write binds (folders) */
    unsigned int nrw;
    int host_shm;                   /* bind the host's /dev/shm (MPS clients need it) */
    const char *shm_dir;            /* else this folder as /dev/shm (one VM's workers
                                       share it: CUDA IPC); NULL: a tmpfs of its own */
    /* The program's pid in its PID namespace: 0 or 1, the namespace's
     * first process; else (2 ..) a child of a small first process of the
     * jail's (comm "vcu-jail"), which ends with it, passing on its exit
     * status (128 + the signal, for one that killed it).  The driver names
     * a process's IPC objects by its pid, and refuses to open, as its
     * own, a handle that carries the opener's pid: workers that open each
     * other's need pids of their own. */
    pid_t ns_pid;
    uint64_t tmp_bytes;             /* the private /tmp's size; 0: 64 MiB */
    uint64_t fsize_bytes;           /* RLIMIT_FSIZE; 0: 1 GiB */
    unsigned int nofile;            /* RLIMIT_NOFILE; 0: 4096 */
    int no_aslr;                    /* 1: without address randomization (a
                                       migrating worker's device addresses) */
} vcu_jail_cfg_t;

/*
 * Starts path (argv, envp) in a jail as cfg says, with fds[0..nfds) as its
 * fds 3.. and log_fd as its stderr.  On success *pid is the child's pid
 * (in the daemon's PID namespace) and *pidfd a descriptor of it (close-on-
 * exec): the caller reaps the child.  The call returns once the program
 * runs (or the jail failed: err says which step and why), a few
 * milliseconds.  0 or a negative errno.
 */
int vcu_jail_spawn(const vcu_jail_cfg_t *cfg, const char *path, char *const argv[],
                   char *const envp[], const int *fds, unsigned int nfds, int log_fd,
                   pid_t *pid, int *pidfd, char *err, size_t errlen);

/* The host pid of the program a jail started as pid (vcu_jail_spawn()):
 * the first process's child when the program runs at ns_pid, else pid
 * itself (also when the kernel does not list children). */
pid_t vcu_jail_program_pid(pid_t pid);

/* Whether this host lets the daemon build jails: tries one (a child that
 * builds the namespaces and the root and exits).  0, or a negative errno
 * with err saying what failed. */
int vcu_jail_check(const vcu_jail_cfg_t *cfg, char *err, size_t errlen);

#endif /* VCU_JAIL_H */
