/*
 * Workers in jails (vcu_jail.h).
 *
 * The child is made with a raw clone(2) that asks for the new namespaces
 * at once, so that it is PID 1 of its own PID namespace and the daemon's
 * direct child (the daemon reaps it, and has its pidfd).  The daemon is
 * single-threaded, so the child may use the C library freely until it
 * executes the program; every failure there is written to a close-on-exec
 * pipe (errno, then a line naming the step) and ends the child, so the
 * daemon knows within milliseconds whether the program runs.
 *
 * Mounts are built on cfg->base inside the child's own mount namespace:
 * nothing of it is seen from outside, and it goes away with the child.
 * Every read-only bind is made read-only mount by mount, submounts
 * included, keeping the flags a user namespace locks (nosuid, nodev,
 * noexec), as bubblewrap does.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include "vcu_jail.h"

#define VCU__JAIL_TMP_DEFAULT (64ull << 20)
#define VCU__JAIL_SHM_BYTES (16ull << 20)
#define VCU__JAIL_FSIZE_DEFAULT (1ull << 30)
#define VCU__JAIL_NOFILE_DEFAULT 4096u
/* Sources of the child's descriptors are moved up here first, so that no
 * dup2() onto fds 0..3+n overwrites another's source. */
#define VCU__JAIL_HIGH_FD 200
#define VCU__JAIL_NS                                                          \
    (CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)

/* The folders of the system's libraries, bound read-only (or recreated as
 * the same symbolic link where /lib is one, as on merged-/usr systems). */
static const char *const vcu__jail_sys[] = { "/usr", "/lib", "/lib64", "/lib32", "/libx32",
                                             "/bin", "/sbin" };
/* Device nodes every program may have. */
static const char *const vcu__jail_devnodes[] = { "null", "zero", "full", "random", "urandom" };

typedef struct vcu__jail_child_s {
    const vcu_jail_cfg_t *cfg;
    const char *path;               /* NULL: build the jail and exit 0 (a check) */
    char *const *argv;
    char *const *envp;
    const int *fds;
    unsigned int nfds;
    int log_fd;
    int err_fd;                     /* the error pipe's write end */
    int life_fd;                    /* read end of a pipe the daemon alone holds open */
    int sync_fd;                    /* user namespace: read until the maps are written */
    bool userns;
    char ro[VCU_JAIL_MAX_PATHS][PATH_MAX];      /* resolved by the parent */
    char rw[VCU_JAIL_MAX_PATHS][PATH_MAX];
    char shm[PATH_MAX];             /* cfg->shm_dir resolved; "": none */
} vcu__jail_child_t;

static __attribute__((noreturn)) void vcu__jail_die(const vcu__jail_child_t *c, const char *step,
                                                    const char *what)
{
    char buf[512];
    int e = errno, n;

    n = snprintf(buf, sizeof(buf), "%s%s%s: %s", step, what ? " " : "", what ? what : "",
                 strerror(e));
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof(buf))
        n = sizeof(buf) - 1;
    /* One write: the parent reads errno and the line together. */
    {
        char msg[sizeof(int) + sizeof(buf)];

        memcpy(msg, &e, sizeof(e));
        memcpy(msg + sizeof(e), buf, (size_t)n);
        if (write(c->err_fd, msg, sizeof(e) + (size_t)n) < 0) {
            /* Nobody to tell. */
        }
    }
    _exit(127);
}

/* Joins base and p ("/usr" -> base "/usr"). */
static void vcu__jail_under(const vcu__jail_child_t *c, const char *p, char *out)
{
    if ((size_t)snprintf(out, PATH_MAX, "%s%s", c->cfg->base, p) >= PATH_MAX) {
        errno = ENAMETOOLONG;
        vcu__jail_die(c, "path", p);
    }
}

/* mkdir -p of dst's folders (dst itself too when dir). */
static void vcu__jail_mkdirs(const vcu__jail_child_t *c, const char *dst, bool dir)
{
    char tmp[PATH_MAX];
    size_t i, n = strlen(dst);

    memcpy(tmp, dst, n + 1);
    for (i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        if (tmp[i] == '\0' && !dir)
            break;
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            vcu__jail_die(c, "mkdir", tmp);
        if (i < n)
            tmp[i] = '/';
    }
    if (!dir) {
        int fd = open(dst, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);

        if (fd < 0)
            vcu__jail_die(c, "create", dst);
        close(fd);
    }
}

/* The per-mount flags of the mount at p, as MS_* (those a bind remount
 * must keep: a user namespace locks them). */
static unsigned long vcu__jail_locked_flags(const char *p)
{
    struct statvfs sv;
    unsigned long f = 0;

    if (statvfs(p, &sv) != 0)
        return 0;
    if (sv.f_flag & ST_NOSUID)
        f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV)
        f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC)
        f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME)
        f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME)
        f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME)
        f |= MS_RELATIME;
    return f;
}

/* Makes the mount at dst and every mount under it read-only. */
static void vcu__jail_ro_tree(const vcu__jail_child_t *c, const char *dst)
{
    size_t n = strlen(dst);
    char line[4096];
    FILE *f;

    f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL)
        vcu__jail_die(c, "open", "/proc/self/mountinfo");
    while (fgets(line, sizeof(line), f) != NULL) {
        char *mp, *sp;
        unsigned int k;

        /* id parent major:minor root mountpoint ... */
        mp = line;
        for (k = 0; k < 4 && mp != NULL; k++) {
            mp = strchr(mp, ' ');
            if (mp != NULL)
                mp++;
        }
        if (mp == NULL)
            continue;
        sp = strchr(mp, ' ');
        if (sp == NULL)
            continue;
        *sp = '\0';
        /* Octal escapes (\040 for a space) are left as they are: such a
         * path does not match and is remounted with its parent's bind. */
        if (strncmp(mp, dst, n) != 0 || (mp[n] != '\0' && mp[n] != '/'))
            continue;
        if (mount(NULL, mp, NULL,
                  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV |
                      vcu__jail_locked_flags(mp),
                  NULL) != 0)
            vcu__jail_die(c, "remount read-only", mp);
    }
    fclose(f);
}

/* Binds src onto dst (made to match: a folder or a file), read-only
 * unless rw, never with devices or set-user-ID programs. */
static void vcu__jail_bind(const vcu__jail_child_t *c, const char *src, const char *dst, bool rw,
                           bool rec)
{
    struct stat st;

    if (stat(src, &st) != 0)
        vcu__jail_die(c, "stat", src);
    vcu__jail_mkdirs(c, dst, S_ISDIR(st.st_mode));
    if (mount(src, dst, NULL, MS_BIND | (rec ? MS_REC : 0), NULL) != 0)
        vcu__jail_die(c, "bind", src);
    if (rw) {
        if (mount(NULL, dst, NULL,
                  MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC |
                      vcu__jail_locked_flags(dst),
                  NULL) != 0)
            vcu__jail_die(c, "remount", dst);
        return;
    }
    vcu__jail_ro_tree(c, dst);
}

/* A device node of the host's, bound onto a file of the same name. */
static void vcu__jail_dev_node(const vcu__jail_child_t *c, const char *name, const char *devdir)
{
    char src[PATH_MAX], dst[PATH_MAX];
    struct stat st;

    snprintf(src, sizeof(src), "/dev/%s", name);
    if (snprintf(dst, sizeof(dst), "%s/%s", devdir, name) >= (int)sizeof(dst))
        return;
    if (lstat(src, &st) != 0)
        return;                     /* not on this host */
    if (S_ISCHR(st.st_mode)) {
        vcu__jail_mkdirs(c, dst, false);
        if (mount(src, dst, NULL, MS_BIND, NULL) != 0)
            vcu__jail_die(c, "bind", src);
    } else if (S_ISDIR(st.st_mode)) {
        vcu__jail_bind(c, src, dst, false, true);    /* /dev/nvidia-caps */
    }
}

static void vcu__jail_dev(const vcu__jail_child_t *c)
{
    char dev[PATH_MAX], shm[PATH_MAX], opt[64];
    unsigned int i;
    struct dirent *e;
    DIR *d;

    vcu__jail_under(c, "/dev", dev);
    vcu__jail_mkdirs(c, dev, true);
    if (mount("vcu-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") != 0)
        vcu__jail_die(c, "mount tmpfs", dev);
    for (i = 0; i < sizeof(vcu__jail_devnodes) / sizeof(vcu__jail_devnodes[0]); i++)
        vcu__jail_dev_node(c, vcu__jail_devnodes[i], dev);
    /* The NVIDIA driver's nodes: the control node, every GPU, UVM, the
     * capability folder (MIG). */
    d = opendir("/dev");
    if (d == NULL)
        vcu__jail_die(c, "opendir", "/dev");
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "nvidia", 6) == 0)
            vcu__jail_dev_node(c, e->d_name, dev);
    closedir(d);
    vcu__jail_under(c, "/dev/shm", shm);
    if (c->cfg->host_shm) {
        vcu__jail_bind(c, "/dev/shm", shm, true, false);
    } else if (c->shm[0] != '\0') {
        vcu__jail_bind(c, c->shm, shm, true, false);
    } else {
        vcu__jail_mkdirs(c, shm, true);
        snprintf(opt, sizeof(opt), "mode=1777,size=%llu",
                 (unsigned long long)VCU__JAIL_SHM_BYTES);
        if (mount("vcu-shm", shm, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opt) != 0)
            vcu__jail_die(c, "mount tmpfs", shm);
    }
    if (mount(NULL, dev, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) != 0)
        vcu__jail_die(c, "remount read-only", dev);
}

/* Whether p lies in a folder the system binds already cover. */
static bool vcu__jail_covered(const char *p)
{
    unsigned int i;

    for (i = 0; i < sizeof(vcu__jail_sys) / sizeof(vcu__jail_sys[0]); i++) {
        size_t n = strlen(vcu__jail_sys[i]);

        if (strncmp(p, vcu__jail_sys[i], n) == 0 && (p[n] == '/' || p[n] == '\0'))
            return true;
    }
    return false;
}

/* The system's folders, bound read-only (a link to one copied as a link). */
static void vcu__jail_sys_binds(const vcu__jail_child_t *c)
{
    char dst[PATH_MAX];
    unsigned int i;
    struct stat st;

    for (i = 0; i < sizeof(vcu__jail_sys) / sizeof(vcu__jail_sys[0]); i++) {
        const char *s = vcu__jail_sys[i];

        if (lstat(s, &st) != 0)
            continue;
        vcu__jail_under(c, s, dst);
        if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlink(s, target, sizeof(target) - 1);

            if (n < 0)
                vcu__jail_die(c, "readlink", s);
            target[n] = '\0';
            if (symlink(target, dst) != 0)
                vcu__jail_die(c, "symlink", dst);
        } else if (S_ISDIR(st.st_mode)) {
            vcu__jail_bind(c, s, dst, false, true);
        }
    }
}

/* A fresh /proc, sysfs read-only, a private /tmp of the configured size. */
static void vcu__jail_proc_sys_tmp(const vcu__jail_child_t *c)
{
    const vcu_jail_cfg_t *cfg = c->cfg;
    char dst[PATH_MAX], opt[64];

    vcu__jail_under(c, "/proc", dst);
    vcu__jail_mkdirs(c, dst, true);
    if (mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        vcu__jail_die(c, "mount", "/proc");
    /* sysfs alone, not what is mounted under it (cgroups, debugfs, ...):
     * the driver reads the PCI and NUMA topology there. */
    vcu__jail_under(c, "/sys", dst);
    vcu__jail_mkdirs(c, dst, true);
    if (mount("/sys", dst, NULL, MS_BIND, NULL) != 0 ||
        mount(NULL, dst, NULL,
              MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC |
                  vcu__jail_locked_flags(dst),
              NULL) != 0)
        vcu__jail_die(c, "bind read-only", "/sys");
    vcu__jail_under(c, "/tmp", dst);
    vcu__jail_mkdirs(c, dst, true);
    snprintf(opt, sizeof(opt), "mode=1777,size=%llu",
             (unsigned long long)(cfg->tmp_bytes ? cfg->tmp_bytes : VCU__JAIL_TMP_DEFAULT));
    if (mount("vcu-tmp", dst, "tmpfs", MS_NOSUID | MS_NODEV, opt) != 0)
        vcu__jail_die(c, "mount tmpfs", "/tmp");
}

/* The paths the daemon was given: read-only ones the system binds do not
 * cover already, then the writable ones. */
static void vcu__jail_given(const vcu__jail_child_t *c)
{
    const vcu_jail_cfg_t *cfg = c->cfg;
    char dst[PATH_MAX];
    unsigned int i;

    for (i = 0; i < cfg->nro; i++) {
        if (vcu__jail_covered(c->ro[i]))
            continue;
        vcu__jail_under(c, c->ro[i], dst);
        vcu__jail_bind(c, c->ro[i], dst, false, true);
    }
    for (i = 0; i < cfg->nrw; i++) {
        vcu__jail_under(c, c->rw[i], dst);
        vcu__jail_bind(c, c->rw[i], dst, true, false);
    }
}

/* The base becomes the root, read-only; the old root is let go. */
static void vcu__jail_pivot(const vcu__jail_child_t *c)
{
    const vcu_jail_cfg_t *cfg = c->cfg;
    char old[PATH_MAX];

    vcu__jail_under(c, "/.old-root", old);
    vcu__jail_mkdirs(c, old, true);
    if (syscall(SYS_pivot_root, cfg->base, old) != 0)
        vcu__jail_die(c, "pivot_root", cfg->base);
    if (chdir("/") != 0)
        vcu__jail_die(c, "chdir", "/");
    if (umount2("/.old-root", MNT_DETACH) != 0)
        vcu__jail_die(c, "detach", "the old root");
    if (rmdir("/.old-root") != 0)
        vcu__jail_die(c, "rmdir", "/.old-root");
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0)
        vcu__jail_die(c, "remount read-only", "/");
}

static void vcu__jail_root(const vcu__jail_child_t *c)
{
    const vcu_jail_cfg_t *cfg = c->cfg;
    char dst[PATH_MAX];
    struct stat st;

    /* The system's folders, /dev, /proc, /sys and /tmp first, then the
     * paths the daemon was given (which may lie under one of them). */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        vcu__jail_die(c, "make mounts private", NULL);
    if (mount("vcu-root", cfg->base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0)
        vcu__jail_die(c, "mount tmpfs", cfg->base);
    vcu__jail_sys_binds(c);
    if (stat("/etc/ld.so.cache", &st) == 0) {
        vcu__jail_under(c, "/etc/ld.so.cache", dst);
        vcu__jail_bind(c, "/etc/ld.so.cache", dst, false, false);
    }
    vcu__jail_dev(c);
    vcu__jail_proc_sys_tmp(c);
    /* The paths given last: one under /tmp (a build tree there) lands on
     * the private /tmp, not under it. */
    vcu__jail_given(c);
    vcu__jail_pivot(c);
    /* The next process this namespace makes (the program) gets ns_pid:
     * written while the child still has its capabilities in it. */
    if (cfg->ns_pid > 1) {
        char v[16];
        int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
        int n = snprintf(v, sizeof(v), "%d", (int)cfg->ns_pid - 1);

        if (fd < 0 || write(fd, v, (size_t)n) != n)
            vcu__jail_die(c, "write", "/proc/sys/kernel/ns_last_pid");
        close(fd);
    }
}

/* The jail's first process, when the program runs as its child (ns_pid):
 * holds no descriptor, waits for the program and ends as it did.  The
 * daemon's SIGKILL ends it, and the namespace's end ends the program. */
static __attribute__((noreturn)) void vcu__jail_init(pid_t prog)
{
    int st;
    pid_t p;

    syscall(SYS_close_range, 0u, ~0u, 0u);
    prctl(PR_SET_NAME, "vcu-jail", 0, 0, 0);
    for (;;) {
        p = waitpid(-1, &st, 0);
        if (p == prog)
            _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        if (p < 0 && errno != EINTR)
            _exit(127);
    }
}

/* The descriptors: fds[i] as 3 + i, log_fd as 2, /dev/null as 0 and 1,
 * the error pipe next (close-on-exec), nothing else. */
static void vcu__jail_fds(vcu__jail_child_t *c)
{
    int high[VCU_JAIL_MAX_PATHS + 8], nul, err_at, logh;
    unsigned int i;

    nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (nul < 0)
        vcu__jail_die(c, "open", "/dev/null");
    if (c->nfds > VCU_JAIL_MAX_PATHS) {
        errno = E2BIG;
        vcu__jail_die(c, "descriptors", NULL);
    }
    for (i = 0; i < c->nfds; i++) {
        high[i] = fcntl(c->fds[i], F_DUPFD_CLOEXEC, VCU__JAIL_HIGH_FD);
        if (high[i] < 0)
            vcu__jail_die(c, "dup", "a descriptor");
    }
    logh = fcntl(c->log_fd >= 0 ? c->log_fd : nul, F_DUPFD_CLOEXEC, VCU__JAIL_HIGH_FD);
    err_at = fcntl(c->err_fd, F_DUPFD_CLOEXEC, VCU__JAIL_HIGH_FD);
    if (logh < 0 || err_at < 0)
        vcu__jail_die(c, "dup", "a descriptor");
    c->err_fd = err_at;
    if (dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(logh, 2) < 0)
        vcu__jail_die(c, "dup2", "stdio");
    for (i = 0; i < c->nfds; i++)
        if (dup2(high[i], 3 + (int)i) < 0)
            vcu__jail_die(c, "dup2", "a descriptor");
    if (dup3(err_at, 3 + (int)c->nfds, O_CLOEXEC) < 0)
        vcu__jail_die(c, "dup2", "the error pipe");
    c->err_fd = 3 + (int)c->nfds;
    if (syscall(SYS_close_range, 4u + c->nfds, ~0u, 0u) != 0)
        vcu__jail_die(c, "close_range", NULL);
}

static void vcu__jail_limit(const vcu__jail_child_t *c, int res, uint64_t v, const char *what)
{
    struct rlimit rl = { (rlim_t)v, (rlim_t)v };

    if (setrlimit(res, &rl) != 0)
        vcu__jail_die(c, "setrlimit", what);
}

static __attribute__((noreturn)) void vcu__jail_child(vcu__jail_child_t *c)
{
    const vcu_jail_cfg_t *cfg = c->cfg;
    struct pollfd pfd;
    sigset_t none;
    int s;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    if (c->userns) {
        char b;

        /* The parent writes our uid and gid maps, then closes its end. */
        while (read(c->sync_fd, &b, 1) < 0 && errno == EINTR)
            ;
    }
    if (cfg->enable) {
        vcu__jail_root(c);
        if (sethostname("vcu-worker", 10) != 0)
            vcu__jail_die(c, "sethostname", NULL);
    }
    if (!c->userns && cfg->uid != (uid_t)-1 && geteuid() == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(cfg->gid, cfg->gid, cfg->gid) != 0 ||
            setresuid(cfg->uid, cfg->uid, cfg->uid) != 0)
            vcu__jail_die(c, "drop to the worker user", NULL);
    }
    /* After the credentials change, which clears it: never outlive the
     * daemon, even one that died before this line (its end of the life
     * pipe has closed then). */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        vcu__jail_die(c, "prctl", "PR_SET_PDEATHSIG");
    pfd.fd = c->life_fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    if (poll(&pfd, 1, 0) != 0)
        _exit(0);
    vcu__jail_fds(c);
    vcu__jail_limit(c, RLIMIT_CORE, 0, "RLIMIT_CORE");
    vcu__jail_limit(c, RLIMIT_NOFILE, cfg->nofile ? cfg->nofile : VCU__JAIL_NOFILE_DEFAULT,
                    "RLIMIT_NOFILE");
    vcu__jail_limit(c, RLIMIT_FSIZE, cfg->fsize_bytes ? cfg->fsize_bytes : VCU__JAIL_FSIZE_DEFAULT,
                    "RLIMIT_FSIZE");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        vcu__jail_die(c, "prctl", "PR_SET_NO_NEW_PRIVS");
    /* Kept across execve: the driver then places device memory where
     * the same calls placed it in another worker (migration). */
    if (cfg->no_aslr && personality(personality(0xffffffff) | ADDR_NO_RANDOMIZE) < 0)
        vcu__jail_die(c, "personality", "ADDR_NO_RANDOMIZE");
    if (cfg->enable && cfg->ns_pid > 1) {
        pid_t prog = fork();

        if (prog < 0)
            vcu__jail_die(c, "fork", "the program's process");
        if (prog > 0)
            vcu__jail_init(prog);
        if (getpid() != cfg->ns_pid)
            vcu__jail_die(c, "ns_last_pid", "(the program's pid)");
        /* The daemon gone, the first process ends, and the namespace with
         * it; this child's own parent-death signal is for the same. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
            vcu__jail_die(c, "prctl", "PR_SET_PDEATHSIG");
    }
    if (c->path == NULL)
        _exit(0);
    execve(c->path, c->argv, c->envp);
    vcu__jail_die(c, "execve", c->path);
}

/* Resolves the configured paths (the child must not follow links that
 * lead out of what it binds) and checks the base. */
static int vcu__jail_prepare(vcu__jail_child_t *c, char *err, size_t errlen)
{
    const vcu_jail_cfg_t *cfg = c->cfg;
    unsigned int i;

    if (cfg->nro > VCU_JAIL_MAX_PATHS || cfg->nrw > VCU_JAIL_MAX_PATHS) {
        snprintf(err, errlen, "too many paths for the jail");
        return -E2BIG;
    }
    if (!cfg->enable)
        return 0;
    if (cfg->base == NULL || cfg->base[0] != '/') {
        snprintf(err, errlen, "the jail needs an absolute base folder");
        return -EINVAL;
    }
    for (i = 0; i < cfg->nro; i++)
        if (cfg->ro[i] == NULL || realpath(cfg->ro[i], c->ro[i]) == NULL) {
            int e = errno;

            snprintf(err, errlen, "jail path %s: %s", cfg->ro[i] ? cfg->ro[i] : "(null)",
                     strerror(e));
            return -e;
        }
    for (i = 0; i < cfg->nrw; i++)
        if (cfg->rw[i] == NULL || realpath(cfg->rw[i], c->rw[i]) == NULL) {
            int e = errno;

            snprintf(err, errlen, "jail path %s: %s", cfg->rw[i] ? cfg->rw[i] : "(null)",
                     strerror(e));
            return -e;
        }
    if (cfg->shm_dir != NULL && realpath(cfg->shm_dir, c->shm) == NULL) {
        int e = errno;

        snprintf(err, errlen, "jail /dev/shm folder %s: %s", cfg->shm_dir, strerror(e));
        return -e;
    }
    return 0;
}

/* Writes s to the file path (a /proc/PID/ map). */
static int vcu__jail_write(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC), rc = 0;

    if (fd < 0)
        return -errno;
    if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
        rc = -errno;
    close(fd);
    return rc;
}

static int vcu__jail_maps(pid_t pid, char *err, size_t errlen)
{
    char p[64], m[64];
    int rc;

    snprintf(m, sizeof(m), "%u %u 1\n", (unsigned)getuid(), (unsigned)getuid());
    snprintf(p, sizeof(p), "/proc/%d/uid_map", (int)pid);
    rc = vcu__jail_write(p, m);
    if (rc == 0) {
        snprintf(p, sizeof(p), "/proc/%d/setgroups", (int)pid);
        rc = vcu__jail_write(p, "deny\n");
    }
    if (rc == 0) {
        snprintf(m, sizeof(m), "%u %u 1\n", (unsigned)getgid(), (unsigned)getgid());
        snprintf(p, sizeof(p), "/proc/%d/gid_map", (int)pid);
        rc = vcu__jail_write(p, m);
    }
    if (rc != 0)
        snprintf(err, errlen, "user namespace maps: %s", strerror(-rc));
    return rc;
}

/* Waits for child pid to end (its status is not wanted). */
static void vcu__jail_reap(pid_t pid)
{
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

/* Closes whichever ends of the three pipes are still open. */
static void vcu__jail_close_pipes(const int errp[2], const int life[2], const int sync[2])
{
    if (errp[0] >= 0)
        close(errp[0]);
    if (errp[1] >= 0)
        close(errp[1]);
    if (life[0] >= 0)
        close(life[0]);
    if (life[1] >= 0)
        close(life[1]);
    if (sync[0] >= 0)
        close(sync[0]);
    if (sync[1] >= 0)
        close(sync[1]);
}

/* After the clone: the child's word on the error pipe (EOF: the program
 * runs, or the check ended), then its pid and a pidfd for it. */
static int vcu__jail_started(const vcu__jail_child_t *c, pid_t pid, int err_rd, pid_t *pid_out,
                             int *pidfd_out, char *err, size_t errlen)
{
    char msg[sizeof(int) + 512];
    ssize_t n;
    int rc, st;

    /* EOF: the program runs (the pipe closed on exec) or the check ended. */
    do
        n = read(err_rd, msg, sizeof(msg));
    while (n < 0 && errno == EINTR);
    if (n > (ssize_t)sizeof(int)) {
        int e;

        memcpy(&e, msg, sizeof(e));
        snprintf(err, errlen, "jail: %.*s", (int)(n - (ssize_t)sizeof(int)), msg + sizeof(int));
        rc = e > 0 ? -e : -EIO;
        vcu__jail_reap(pid);
        return rc;
    }
    if (c->path == NULL) {
        while ((rc = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
            ;
        rc = rc == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
        if (rc != 0)
            snprintf(err, errlen, "jail check: the child ended without saying why");
        return rc;
    }
    *pidfd_out = (int)syscall(SYS_pidfd_open, pid, 0);
    if (*pidfd_out < 0) {
        rc = -errno;
        snprintf(err, errlen, "pidfd_open: %s", strerror(errno));
        kill(pid, SIGKILL);
        vcu__jail_reap(pid);
        return rc;
    }
    /* The daemon keeps its end of the life pipe for no one: the child has
     * looked already.  Close it. */
    *pid_out = pid;
    return 0;
}

static int vcu__jail_run(vcu__jail_child_t *c, pid_t *pid_out, int *pidfd_out, char *err,
                         size_t errlen)
{
    int errp[2] = { -1, -1 }, life[2] = { -1, -1 }, sync[2] = { -1, -1 };
    unsigned long flags = SIGCHLD;
    pid_t pid;
    int rc;

    rc = vcu__jail_prepare(c, err, errlen);
    if (rc != 0)
        return rc;
    c->userns = c->cfg->enable && geteuid() != 0;
    if (c->cfg->enable)
        flags |= VCU__JAIL_NS | (c->userns ? CLONE_NEWUSER : 0);
    if (pipe2(errp, O_CLOEXEC) != 0 || pipe2(life, O_CLOEXEC) != 0 ||
        (c->userns && pipe2(sync, O_CLOEXEC) != 0)) {
        rc = -errno;
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    c->err_fd = errp[1];
    c->life_fd = life[0];
    c->sync_fd = sync[0];
    pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid < 0) {
        rc = -errno;
        snprintf(err, errlen, "clone (namespaces%s): %s", c->userns ? ", user namespace" : "",
                 strerror(errno));
        goto out;
    }
    if (pid == 0)
        vcu__jail_child(c);
    close(errp[1]);
    errp[1] = -1;
    close(life[0]);
    life[0] = -1;
    if (c->userns) {
        close(sync[0]);
        sync[0] = -1;
        rc = vcu__jail_maps(pid, err, errlen);
        close(sync[1]);
        sync[1] = -1;
        if (rc != 0) {
            kill(pid, SIGKILL);
            vcu__jail_reap(pid);
            goto out;
        }
    }
    rc = vcu__jail_started(c, pid, errp[0], pid_out, pidfd_out, err, errlen);
out:
    vcu__jail_close_pipes(errp, life, sync);
    return rc;
}

int vcu_jail_spawn(const vcu_jail_cfg_t *cfg, const char *path, char *const argv[],
                   char *const envp[], const int *fds, unsigned int nfds, int log_fd,
                   pid_t *pid, int *pidfd, char *err, size_t errlen)
{
    static vcu__jail_child_t c;     /* large (paths): not on the stack */

    memset(&c, 0, sizeof(c));
    c.cfg = cfg;
    c.path = path;
    c.argv = argv;
    c.envp = envp;
    c.fds = fds;
    c.nfds = nfds;
    c.log_fd = log_fd;
    *pid = -1;
    *pidfd = -1;
    if (path == NULL) {
        snprintf(err, errlen, "no program to start");
        return -EINVAL;
    }
    return vcu__jail_run(&c, pid, pidfd, err, errlen);
}

pid_t vcu_jail_program_pid(pid_t pid)
{
    char p[64];
    long child = 0;
    FILE *f;

    snprintf(p, sizeof(p), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    f = fopen(p, "re");
    if (f == NULL)
        return pid;
    if (fscanf(f, "%ld", &child) != 1 || child <= 0)
        child = pid;
    fclose(f);
    return (pid_t)child;
}

int vcu_jail_check(const vcu_jail_cfg_t *cfg, char *err, size_t errlen)
{
    static vcu__jail_child_t c;
    pid_t pid;
    int pidfd;

    memset(&c, 0, sizeof(c));
    c.cfg = cfg;
    c.log_fd = -1;
    return vcu__jail_run(&c, &pid, &pidfd, err, errlen);
}
