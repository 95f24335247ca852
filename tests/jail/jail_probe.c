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
#include <sys/mman.h>
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
#include "vcu_keep.h"
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

static int keep_fd = -1;            /* --keep: the daemon's keep (vcu_keep.h) */

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
         * account, the policy (3..8), its keep socket. */
        if (fd > 8 && fd != keep_fd)
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

/* ---- the daemon's keep, as a compromised worker would use it ---------- */

/* One message (len bytes of m, with fd if >= 0) and the answer: its
 * status, the descriptor that came with it into *got; ~0u if none came. */
static uint32_t keep_ask(const void *m, size_t len, int fd, struct vcu_keep_msg *a, int *got)
{
    char buf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { (void *)m, len };
    struct msghdr h;

    *got = -1;
    memset(&h, 0, sizeof(h));
    memset(buf, 0, sizeof(buf));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    if (fd >= 0) {
        h.msg_control = buf;
        h.msg_controllen = sizeof(buf);
        CMSG_FIRSTHDR(&h)->cmsg_level = SOL_SOCKET;
        CMSG_FIRSTHDR(&h)->cmsg_type = SCM_RIGHTS;
        CMSG_FIRSTHDR(&h)->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(CMSG_FIRSTHDR(&h)), &fd, sizeof(int));
    }
    if (sendmsg(keep_fd, &h, MSG_NOSIGNAL) != (ssize_t)len)
        return ~0u;
    memset(&h, 0, sizeof(h));
    iov.iov_base = a;
    iov.iov_len = sizeof(*a);
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = buf;
    h.msg_controllen = sizeof(buf);
    if (recvmsg(keep_fd, &h, 0) != (ssize_t)sizeof(*a))
        return ~0u;
    if (CMSG_FIRSTHDR(&h) != NULL && CMSG_FIRSTHDR(&h)->cmsg_type == SCM_RIGHTS)
        memcpy(got, CMSG_DATA(CMSG_FIRSTHDR(&h)), sizeof(int));
    return a->status;
}

static uint32_t keep_get(const uint8_t *token, int *got)
{
    struct vcu_keep_msg q = { .op = VCU_KEEP_GET, .kind = 3 }, a;

    memcpy(q.token, token, sizeof(q.token));
    return keep_ask(&q, sizeof(q), -1, &a, got);
}

static void hex16(const uint8_t *t, char *out)
{
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", t[i]);
}

/* What the keep takes and gives, and what it refuses; its token of a
 * descriptor of this worker's into token. */
static void check_keep(uint8_t *token)
{
    struct vcu_keep_msg q = { .op = VCU_KEEP_PUT, .kind = 3, .size = 4096 }, a;
    char text[32] = "";
    uint32_t st;
    int mfd = memfd_create("keep-probe", 0), got = -1, n = 0;

    if (mfd < 0 || write(mfd, "keep-probe", 10) != 10) {
        say("keep_put", 0, "memfd: %s", strerror(errno));
        return;
    }
    st = keep_ask(&q, sizeof(q), mfd, &a, &got);
    say("keep_put", st == 0, "status %u", st);
    memcpy(token, a.token, 16);
    st = keep_get(token, &got);
    if (got >= 0 && pread(got, text, 10, 0) != 10)
        text[0] = '\0';
    say("keep_get_own_vm", st == 0 && strcmp(text, "keep-probe") == 0, "status %u, \"%s\"", st,
        text);
    if (got >= 0)
        close(got);
    st = keep_ask(&q, 8, mfd, &a, &got);
    say("keep_refuses_short", st == 1, "status %u", st);
    st = keep_ask(&q, sizeof(q), -1, &a, &got);
    say("keep_refuses_put_without_fd", st == 1, "status %u", st);
    q.kind = 99;
    st = keep_ask(&q, sizeof(q), mfd, &a, &got);
    say("keep_refuses_other_kind", st == 1, "status %u", st);
    q.kind = 3;
    q.op = 77;
    st = keep_ask(&q, sizeof(q), -1, &a, &got);
    say("keep_refuses_unknown_op", st == 1, "status %u", st);
    q.op = VCU_KEEP_GET;
    memcpy(q.token, token, 16);
    st = keep_ask(&q, sizeof(q), mfd, &a, &got);
    say("keep_refuses_get_with_fd", st == 1 && got < 0, "status %u", st);
    memset(q.token, 0x5a, 16);
    st = keep_get(q.token, &got);
    say("keep_get_unknown", st == 1 && got < 0, "status %u", st);
    /* A worker that puts without end: bounded (VCU_KEEP_PER_WORKER). */
    q.op = VCU_KEEP_PUT;
    while ((st = keep_ask(&q, sizeof(q), mfd, &a, &got)) == 0 && n < 5000)
        n++;
    say("keep_bounded", st == 8 && n + 1 == (int)VCU_KEEP_PER_WORKER,
        "%d more kept, then status %u", n, st);
    close(mfd);
}

/* After JAIL-END: commands from the test on fd 3, one line each:
 * "GET <32 hex>" (another VM's token: must get nothing) or "QUIT". */
static void keep_commands(void)
{
    char line[128];
    size_t have = 0;

    for (;;) {
        ssize_t n = read(OUT_FD, line + have, 1);
        uint8_t t[16];
        int got = -1;
        uint32_t st;

        if (n <= 0)
            return;
        if (line[have] != '\n' && have + 1 < sizeof(line)) {
            have++;
            continue;
        }
        line[have] = '\0';
        have = 0;
        if (strncmp(line, "GET ", 4) != 0 || strlen(line) != 36)
            return;
        for (int i = 0; i < 16; i++) {
            unsigned int b;

            sscanf(line + 4 + 2 * i, "%2x", &b);
            t[i] = (uint8_t)b;
        }
        st = keep_get(t, &got);
        say("keep_other_vm_token", st == 1 && got < 0, "status %u", st);
        if (write(OUT_FD, "JAIL-KEEP-END\n", 14) != 14)
            return;
    }
}

int main(int argc, char **argv)
{
    uint8_t token[16];
    char hex[33];
    const char *secret = getenv("VCU_JAIL_SECRET");
    struct rlimit rl;
    int i, fd, rc;

    for (i = 1; i < argc; i++)
        if (strcmp(argv[i], "--probe") == 0)
            probe_hello();
        else if (strcmp(argv[i], "--keep") == 0 && i + 1 < argc)
            keep_fd = atoi(argv[i + 1]);
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

    if (keep_fd >= 0) {
        char line[64];
        int n;

        check_keep(token);
        hex16(token, hex);
        n = snprintf(line, sizeof(line), "JAIL-KEEP-TOKEN %s\n", hex);
        if (write(OUT_FD, line, (size_t)n) != n)
            return 3;
    } else {
        say("keep", 0, "the daemon gave no --keep");
    }
    if (write(OUT_FD, "JAIL-END\n", 9) != 9)
        return 3;
    if (keep_fd >= 0)
        keep_commands();
    return fails ? 1 : 0;
}
