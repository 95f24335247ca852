/*
 * A stand-in for vcu-worker that tries to break out of its jail
 * (tests/jail/run.py starts the daemon with --worker pointing here).
 *
 * The daemon starts it as it starts every worker: in its namespaces and
 * root, with the session's descriptors as fds 3.., its own environment
 * and limits.  It installs the worker's own seccomp filter (seccomp.c,
 * the same code) as vcu-worker does, then tries what a compromised worker
 * would, and writes one line per attempt to fd 3 (the session's socket,
 * whose other end the test holds):
 *   JAIL <name> PASS|FAIL <what happened>
 * then "JAIL-END".  With --probe (the daemon's CUDA check at a VM's
 * HELLO) it answers as a worker's probe does and exits.
 *
 * What the test puts in the daemon's environment for it to look for:
 *   VCU_JAIL_SECRET=PATH   a file outside the jail (must not open)
 *   VCU_JAIL_PIDS=A,B,...  host pids it must not reach (daemon, test, ...)
 *   SECRET_TOKEN=...       must not reach the worker's environment
 * and the daemon gets an extra inherited descriptor (not close-on-exec),
 * which must not reach the worker either.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "vcu_ipc.h"
#include "vcu_seccomp.h"

#define OUT_FD 3

static int fails;

static void say(const char *name, int ok, const char *fmt, ...)
{
    char buf[512], line[700];
    va_list ap;
    int n;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    n = snprintf(line, sizeof(line), "JAIL %s %s %s\n", name, ok ? "PASS" : "FAIL", buf);
    if (write(OUT_FD, line, (size_t)n) != n)
        _exit(3);
    fails += !ok;
}

/* An attempt that must fail: ok when rc < 0. */
static void must_fail(const char *name, long rc, const char *what)
{
    int e = errno;

    say(name, rc < 0, "%s -> %s", what, rc < 0 ? strerror(e) : "succeeded");
}

static void probe_hello(void)
{
    struct {
        struct vcu_ipc_hdr h;
        struct vcu_ipc_hello b;
    } m;

    memset(&m, 0, sizeof(m));
    m.h.type = VCU_IPC_HELLO;
    m.h.len = sizeof(m.b);
    m.b.version = VCU_IPC_VERSION;
    m.b.pid = (uint32_t)getpid();
    snprintf(m.b.cuda_error, sizeof(m.b.cuda_error), "jail probe: no CUDA here");
    if (write(OUT_FD, &m, sizeof(m)) != (ssize_t)sizeof(m))
        _exit(3);
    _exit(0);
}

static void check_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char open_fds[256] = "";
    int stray = 0;

    if (d == NULL) {
        say("fds", 0, "cannot list /proc/self/fd: %s", strerror(errno));
        return;
    }
    while ((e = readdir(d)) != NULL) {
        int fd;

        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        fd = atoi(e->d_name);
        if (fd == dirfd(d))
            continue;
        snprintf(open_fds + strlen(open_fds), sizeof(open_fds) - strlen(open_fds), "%d ", fd);
        /* 0-2, and the session's: socket, ring area, two doorbells, the
         * account, the policy (3..8). */
        if (fd > 8)
            stray++;
    }
    closedir(d);
    say("fds_allowlist", stray == 0, "open: %s", open_fds);
}

static void check_env(void)
{
    extern char **environ;
    char **e;
    int bad = 0;
    char seen[400] = "";

    for (e = environ; *e != NULL; e++) {
        if (strncmp(*e, "SECRET_TOKEN=", 13) == 0)
            bad++;
        if (strncmp(*e, "HOME=", 5) != 0 && strncmp(*e, "TMPDIR=", 7) != 0 &&
            strncmp(*e, "PATH=", 5) != 0 && strncmp(*e, "VCU_", 4) != 0 &&
            strncmp(*e, "LD_LIBRARY_PATH=", 16) != 0 && strncmp(*e, "ASAN_OPTIONS=", 13) != 0 &&
            strncmp(*e, "UBSAN_OPTIONS=", 14) != 0 && strncmp(*e, "LSAN_OPTIONS=", 13) != 0 &&
            strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0 &&
            strncmp(*e, "CUDA_DEVICE_ORDER=", 18) != 0)
            bad++;
        snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%.*s ",
                 (int)strcspn(*e, "="), *e);
    }
    say("environment", bad == 0, "variables: %s", seen);
}

static void check_status(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int nnp = -1, sec = -1;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        sscanf(line, "NoNewPrivs: %d", &nnp);
        sscanf(line, "Seccomp: %d", &sec);
    }
    if (f != NULL)
        fclose(f);
    say("no_new_privs", nnp == 1, "NoNewPrivs %d", nnp);
    say("seccomp_filter", sec == 2, "Seccomp %d", sec);
}

/* Whether process pid's name is want. */
static int vcu__comm_is(int pid, const char *want)
{
    char p[64], comm[64] = "";
    FILE *f;

    snprintf(p, sizeof(p), "/proc/%d/comm", pid);
    f = fopen(p, "r");
    if (f == NULL)
        return 0;
    if (fgets(comm, sizeof(comm), f) == NULL)
        comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    return strcmp(comm, want) == 0;
}

static void check_procs(void)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    int n = 0;
    const char *pids = getenv("VCU_JAIL_PIDS");

    while (d != NULL && (e = readdir(d)) != NULL)
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9')
            n++;
    if (d != NULL)
        closedir(d);
    /* Itself and the jail's first process, its parent, which holds the
     * namespace while the program runs at a pid of its own (vcu_jail.h). */
    say("pid_namespace", n == 2 && getppid() == 1 && getpid() > 1 && vcu__comm_is(1, "vcu-jail"),
        "processes seen %d, own pid %d, parent %d", n, (int)getpid(), (int)getppid());
    if (pids != NULL) {
        char *copy = strdup(pids), *save = NULL, *t;

        for (t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
            char name[64];

            snprintf(name, sizeof(name), "signal_host_pid_%s", t);
            errno = 0;
            must_fail(name, kill((pid_t)atoi(t), 0), "kill(pid, 0)");
        }
        free(copy);
    }
}

/*
 * The driver needs unix sockets, so the filter allows them: they must not
 * reach anything outside the jail.  The test listens on an abstract name
 * (VCU_JAIL_ABSTRACT) and on a path (VCU_JAIL_SOCKPATH) in the host's
 * namespaces; neither answers here.
 */
static void check_unix(void)
{
    const char *abs = getenv("VCU_JAIL_ABSTRACT"), *path = getenv("VCU_JAIL_SOCKPATH");
    struct sockaddr_un sa;
    socklen_t len;
    int fd;

    if (abs == NULL || path == NULL) {
        say("unix_abstract_host", 0, "no VCU_JAIL_ABSTRACT/VCU_JAIL_SOCKPATH given");
        return;
    }
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s", abs);
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(abs));
    errno = 0;
    must_fail("unix_abstract_host", fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, len),
              "connect to the host's abstract socket");
    if (fd >= 0)
        close(fd);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    errno = 0;
    must_fail("unix_path_host", fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa)),
              path);
    if (fd >= 0)
        close(fd);
}

int main(int argc, char **argv)
{
    const char *secret = getenv("VCU_JAIL_SECRET");
    struct rlimit rl;
    int i, fd, rc;

    for (i = 1; i < argc; i++)
        if (strcmp(argv[i], "--probe") == 0)
            probe_hello();
    /* As vcu-worker does, first thing. */
    rc = vcu_seccomp_install(VCU_SECCOMP_ON);
    say("seccomp_install", rc == 0, "rc %d", rc);
    prctl(PR_SET_DUMPABLE, 0);

    check_fds();
    check_env();
    check_status();
    check_procs();
    say("not_root", getuid() != 0 && geteuid() != 0, "uid %d euid %d", (int)getuid(),
        (int)geteuid());
    getrlimit(RLIMIT_CORE, &rl);
    say("no_core_dumps", rl.rlim_cur == 0 && rl.rlim_max == 0, "RLIMIT_CORE %llu/%llu",
        (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);

    /* Files outside the allowlist. */
    if (secret != NULL) {
        errno = 0;
        must_fail("open_secret", open(secret, O_RDONLY), secret);
    } else {
        say("open_secret", 0, "no VCU_JAIL_SECRET given");
    }
    must_fail("open_etc_passwd", open("/etc/passwd", O_RDONLY), "/etc/passwd");
    must_fail("open_root_home", open("/root", O_RDONLY | O_DIRECTORY), "/root");
    must_fail("write_usr", open("/usr/vcu-jail-probe", O_WRONLY | O_CREAT, 0644),
              "create /usr/vcu-jail-probe");
    must_fail("write_root", open("/vcu-jail-probe", O_WRONLY | O_CREAT, 0644),
              "create /vcu-jail-probe");
    fd = open("/tmp/vcu-jail-probe", O_WRONLY | O_CREAT, 0644);
    say("write_own_tmp", fd >= 0, "its private /tmp: %s", fd >= 0 ? "writable" : strerror(errno));
    if (fd >= 0)
        close(fd);
    must_fail("open_dev_mem", open("/dev/mem", O_RDONLY), "/dev/mem");
    must_fail("open_dev_sda", open("/dev/sda", O_RDONLY), "/dev/sda");

    /* Sockets, processes, privileges. */
    must_fail("socket_inet", socket(AF_INET, SOCK_STREAM, 0), "socket(AF_INET)");
    check_unix();
    must_fail("socket_netlink", socket(AF_NETLINK, SOCK_RAW, 0), "socket(AF_NETLINK)");
    {
        char *const av[] = { (char *)"/bin/sh", (char *)"-c", (char *)"true", NULL };

        must_fail("execve", execve("/bin/sh", av, NULL), "execve(/bin/sh)");
    }
    must_fail("fork", (long)syscall(SYS_fork), "fork()");
    must_fail("clone_newuser", (long)syscall(SYS_unshare, 0x10000000 /* CLONE_NEWUSER */),
              "unshare(CLONE_NEWUSER)");
    must_fail("ptrace", ptrace(PTRACE_TRACEME, 0, NULL, NULL), "ptrace(TRACEME)");
    must_fail("mount", mount("none", "/tmp", "tmpfs", 0, NULL), "mount(tmpfs)");
    must_fail("setuid_root", setuid(0), "setuid(0)");
    must_fail("chroot", chroot("/tmp"), "chroot(/tmp)");
    must_fail("bpf", syscall(SYS_bpf, 0, NULL, 0), "bpf()");
    must_fail("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0),
              "perf_event_open()");
    must_fail("userfaultfd", syscall(SYS_userfaultfd, 0), "userfaultfd()");
    must_fail("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL), "io_uring_setup()");
    must_fail("process_vm_readv", syscall(SYS_process_vm_readv, 1, NULL, 0, NULL, 0, 0),
              "process_vm_readv()");
    must_fail("kill_init_namespace_pid1_other", kill(-1, 0), "kill(-1, 0)");

    if (write(OUT_FD, "JAIL-END\n", 9) != 9)
        return 3;
    return fails ? 1 : 0;
}
