/*
 * The worker's seccomp filter (vcu_seccomp.h): installed by the worker on
 * itself, after its arguments are read and before it loads the driver or
 * reads anything a guest sent.
 *
 * An allowlist of x86-64 system calls: what the worker, the C library and
 * NVIDIA's driver (libcuda, its JIT, nvJitLink) were seen to make on the
 * GPU machine (docs/design.md, "Jails", says how the list was taken), plus
 * their near kin.  Everything else fails with EPERM, which the driver
 * treats as any other refusal; a few calls are narrowed by argument:
 *   clone     threads only: CLONE_THREAD set, no namespace flag;
 *   clone3    ENOSYS, so that the C library falls back to clone;
 *   socket    AF_UNIX only.  NVIDIA's driver 580 makes unix sockets
 *             (socket, bind, listen, connect) and symbolic links in cuInit:
 *             with them refused, cuInit fails with
 *             CUDA_ERROR_OPERATING_SYSTEM (measured on an H200).  A unix
 *             socket reaches nothing outside the jail: abstract names
 *             belong to the worker's own network namespace, paths to its
 *             own mount namespace (tests/jail checks both);
 *   kill, tgkill  this process only;
 *   prlimit64 this process only.
 * Not allowed, among others: execve, fork, ptrace, process_vm_*, mount,
 * pivot_root, chroot, unshare, setns, bpf, perf_event_open, userfaultfd,
 * io_uring, keyctl, module and kexec calls, the set*id family, personality.
 *
 * VCU_SECCOMP_LOG lets everything through and has the kernel log what is
 * not on the list (audit type 1326 in the kernel log): how the list is
 * kept complete on a new driver.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vcu_seccomp.h"

#ifndef SECCOMP_RET_LOG
#define SECCOMP_RET_LOG 0x7ffc0000u
#endif
#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS 0x80000000u
#endif
#define VCU__SC_X32_BIT 0x40000000u
#define VCU__SC_NS_FLAGS                                                                       \
    (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |              \
     CLONE_NEWPID | CLONE_NEWNET)
#define VCU__SC_MAX 512

/* Allowed with any arguments. */
static const int vcu__sc_allow[] = {
    /* files and descriptors */
    SYS_read, SYS_write, SYS_readv, SYS_writev, SYS_pread64, SYS_pwrite64, SYS_preadv,
    SYS_pwritev, SYS_preadv2, SYS_pwritev2, SYS_open, SYS_openat, SYS_close, SYS_close_range,
    SYS_stat, SYS_fstat, SYS_lstat, SYS_newfstatat, SYS_statx, SYS_access, SYS_faccessat,
    SYS_faccessat2, SYS_readlink, SYS_readlinkat, SYS_getdents, SYS_getdents64, SYS_lseek,
    SYS_fcntl, SYS_dup, SYS_dup2, SYS_dup3, SYS_pipe, SYS_pipe2, SYS_ftruncate, SYS_fallocate,
    SYS_fsync, SYS_fdatasync, SYS_rename, SYS_renameat, SYS_renameat2, SYS_unlink, SYS_unlinkat,
    SYS_mkdir, SYS_mkdirat, SYS_link, SYS_linkat, SYS_utimensat, SYS_flock, SYS_statfs,
    SYS_fstatfs, SYS_fadvise64, SYS_readahead, SYS_getcwd, SYS_umask, SYS_memfd_create,
    SYS_ioctl, SYS_fchmod, SYS_sync_file_range,
    /* memory */
    SYS_mmap, SYS_munmap, SYS_mprotect, SYS_mremap, SYS_madvise, SYS_msync, SYS_mlock,
    SYS_munlock, SYS_mincore, SYS_brk, SYS_get_mempolicy, SYS_set_mempolicy, SYS_mbind,
    SYS_membarrier,
    /* waiting and time */
    SYS_poll, SYS_ppoll, SYS_select, SYS_pselect6, SYS_epoll_create, SYS_epoll_create1,
    SYS_epoll_ctl, SYS_epoll_wait, SYS_epoll_pwait, SYS_eventfd, SYS_eventfd2, SYS_futex,
    SYS_nanosleep, SYS_clock_nanosleep, SYS_clock_gettime, SYS_clock_getres, SYS_gettimeofday,
    SYS_time, SYS_timerfd_create, SYS_timerfd_settime, SYS_timerfd_gettime, SYS_sched_yield,
    /* threads and signals */
    SYS_set_robust_list, SYS_get_robust_list, SYS_set_tid_address, SYS_rseq, SYS_exit,
    SYS_exit_group, SYS_rt_sigaction, SYS_rt_sigprocmask, SYS_rt_sigreturn, SYS_sigaltstack,
    SYS_rt_sigtimedwait, SYS_restart_syscall, SYS_arch_prctl, SYS_prctl, SYS_sched_getaffinity,
    SYS_sched_setaffinity, SYS_sched_getparam, SYS_sched_getscheduler,
    SYS_sched_get_priority_max, SYS_sched_get_priority_min, SYS_getcpu, SYS_getpriority,
    SYS_setpriority, SYS_wait4, SYS_waitid,
    /* who and where */
    SYS_getpid, SYS_gettid, SYS_getppid, SYS_getuid, SYS_geteuid, SYS_getgid, SYS_getegid,
    SYS_getresuid, SYS_getresgid, SYS_getgroups, SYS_getrusage, SYS_sysinfo, SYS_uname,
    SYS_getrandom,
    /* the descriptors it was given: the session socket, doorbells */
    SYS_sendmsg, SYS_recvmsg, SYS_sendto, SYS_recvfrom, SYS_shutdown, SYS_getsockopt,
    SYS_setsockopt, SYS_getsockname, SYS_getpeername, SYS_socketpair,
    /* unix sockets of the driver's own (socket itself: AF_UNIX only) */
    SYS_bind, SYS_listen, SYS_connect, SYS_accept, SYS_accept4, SYS_symlink, SYS_symlinkat,
};

typedef struct {
    struct sock_filter f[VCU__SC_MAX];
    unsigned int n;
    int overflow;
} vcu__sc_prog_t;

static void vcu__sc_put(vcu__sc_prog_t *p, struct sock_filter s)
{
    if (p->n >= VCU__SC_MAX) {
        p->overflow = 1;
        return;
    }
    p->f[p->n++] = s;
}

#define VCU__SC_STMT(code, k) ((struct sock_filter)BPF_STMT(code, k))
#define VCU__SC_JUMP(code, k, jt, jf) ((struct sock_filter)BPF_JUMP(code, k, jt, jf))
#define VCU__SC_ARG_LO(i) (offsetof(struct seccomp_data, args) + 8u * (i))
#define VCU__SC_ARG_HI(i) (VCU__SC_ARG_LO(i) + 4u)
#define VCU__SC_LOAD_NR VCU__SC_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))

/* if (nr == sys) return args[i] == v (64 bits) ? ALLOW : deny; other
 * numbers go on with A = nr. */
static void vcu__sc_arg_eq(vcu__sc_prog_t *p, int sys, unsigned int i, uint64_t v, uint32_t deny)
{
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)sys, 0, 6));
    vcu__sc_put(p, VCU__SC_STMT(BPF_LD | BPF_W | BPF_ABS, VCU__SC_ARG_HI(i)));
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(v >> 32), 0, 3));
    vcu__sc_put(p, VCU__SC_STMT(BPF_LD | BPF_W | BPF_ABS, VCU__SC_ARG_LO(i)));
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)v, 0, 1));
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, deny));
}

int vcu_seccomp_install(int mode)
{
    vcu__sc_prog_t *p;
    struct sock_fprog fp;
    uint32_t deny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
    uint64_t self = (uint64_t)getpid();
    unsigned int i;
    static vcu__sc_prog_t prog;

    if (mode == VCU_SECCOMP_OFF)
        return 0;
    if (mode == VCU_SECCOMP_LOG)
        deny = SECCOMP_RET_LOG;
    p = &prog;
    memset(p, 0, sizeof(*p));
    /* Only the x86-64 ABI; x32 numbers are refused outright. */
    vcu__sc_put(p, VCU__SC_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    vcu__sc_put(p, VCU__SC_LOAD_NR);
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JGE | BPF_K, VCU__SC_X32_BIT, 0, 1));
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, deny));
    for (i = 0; i < sizeof(vcu__sc_allow) / sizeof(vcu__sc_allow[0]); i++) {
        vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)vcu__sc_allow[i], 0, 1));
        vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    }
    /* clone: threads only (CLONE_THREAD, no namespace). */
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 5));
    vcu__sc_put(p, VCU__SC_STMT(BPF_LD | BPF_W | BPF_ABS, VCU__SC_ARG_LO(0)));
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JSET | BPF_K, VCU__SC_NS_FLAGS, 2, 0));
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1));
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, deny));
    /* clone3's flags are in memory, out of the filter's reach. */
    vcu__sc_put(p, VCU__SC_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)));
    /* Signals and limits: this process only. */
    vcu__sc_arg_eq(p, SYS_kill, 0, self, deny);
    vcu__sc_arg_eq(p, SYS_tgkill, 0, self, deny);
    vcu__sc_arg_eq(p, SYS_prlimit64, 0, 0, deny);
    vcu__sc_arg_eq(p, SYS_socket, 0, AF_UNIX, deny);
    vcu__sc_put(p, VCU__SC_STMT(BPF_RET | BPF_K, deny));
    if (p->overflow) {
        errno = E2BIG;
        return -E2BIG;
    }
    fp.len = (unsigned short)p->n;
    fp.filter = p->f;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -errno;
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &fp) != 0)
        return -errno;
    return 0;
}
