/*
 * vcu-daemon: the host's GPU side of every VM with a virtio-cuda-pci
 * device (docs/design.md, "The host daemon"; README, "Running the host
 * daemon").
 *
 *   vcu-daemon [--socket PATH] [--control PATH] [--metrics HOST:PORT|off]
 *              [--run-dir DIR] [--cache-dir DIR|off] [--module-cache-size BYTES]
 *              [--libcuda PATH] [--worker PATH] [--worker-user USER]
 *              [--socket-group GROUP] [--socket-mode OCTAL]
 *              [--gpus LIST] [--max-sessions N] [--max-vms N]
 *              [--mem-quota BYTES] [--max-mem-quota BYTES] [--host-mem-quota BYTES]
 *              [--ctx-bytes BYTES]
 *              [--mps-pipe DIR] [--jail on|off] [--seccomp on|log|off]
 *              [--worker-aslr on|off]
 *
 * --worker-aslr: whether workers run with address randomization (default
 * off: a worker that migrates must get the device addresses its source
 * had, which the driver gives only without it; docs/design.md, "Live
 * migration").  On, a migration's load is refused.
 * --ctx-bytes: the GPU memory each worker's CUDA context is charged to its
 * VM's mem-quota (default VCU_DMN_CTX_BYTES, an H100's with driver 580:
 * measure the host's with a native program if it differs).
 * --host-mem-quota: the host memory a VM's workers may hold for its
 * guests (default VCU_DMN_HOST_QUOTA; 0: none).
 *
 * QEMU's devices connect to --socket (a -chardev socket each); every guest
 * session runs in a worker (vcu-worker) the daemon starts in a jail of
 * its own (jail.c).  --control takes the operator's JSON requests,
 * --metrics serves Prometheus text (report.c).  The daemon stays in the
 * foreground (a service manager, or the shell, runs it), logs to stderr
 * and ends on SIGTERM or SIGINT, killing its workers first.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vcu_daemon.h"
#include "vcu_seccomp.h"

uint64_t vcu_dmn_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vcu_dmn_log(const char *fmt, ...)
{
    char buf[1024];
    struct timespec ts;
    va_list ap;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    n = snprintf(buf, sizeof(buf), "vcu-daemon[%d] %lld.%03ld: ", (int)getpid(),
                 (long long)ts.tv_sec, ts.tv_nsec / 1000000);
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n = (int)strlen(buf);
    buf[n++] = '\n';
    if (write(STDERR_FILENO, buf, (size_t)n) < 0) {
        /* Nowhere to say it. */
    }
}

static __attribute__((noreturn)) void vcu__dmn_die(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(stderr, "vcu-daemon: %s\n", buf);
    exit(1);
}

static void vcu__dmn_usage(void)
{
    fprintf(stderr,
            "usage: vcu-daemon [--socket PATH] [--control PATH] [--metrics HOST:PORT|off]\n"
            "                  [--run-dir DIR] [--cache-dir DIR|off] [--module-cache-size BYTES]\n"
            "                  [--libcuda PATH] [--worker PATH] [--worker-user USER]\n"
            "                  [--socket-group GROUP] [--socket-mode OCTAL]\n"
            "                  [--gpus LIST] [--max-sessions N] [--max-vms N]\n"
            "                  [--mem-quota BYTES] [--max-mem-quota BYTES] [--host-mem-quota BYTES]\n"
            "                  [--ctx-bytes BYTES]\n"
            "                  [--mps-pipe DIR] [--jail on|off] [--seccomp on|log|off]\n"
            "                  [--worker-aslr on|off]\n"
            "The host's GPU side of virtio-cuda: QEMU's virtio-cuda-pci devices connect to\n"
            "--socket; each guest process's CUDA work runs in a jailed worker of its own.\n");
    exit(2);
}

/* A size with an optional K, M, G or T suffix (powers of 1024). */
static uint64_t vcu__dmn_size(const char *s, const char *opt)
{
    char *end;
    unsigned long long v;
    unsigned int sh = 0;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        vcu__dmn_die("%s: not a size: %s", opt, s);
    switch (*end) {
    case 'K': case 'k': sh = 10; end++; break;
    case 'M': case 'm': sh = 20; end++; break;
    case 'G': case 'g': sh = 30; end++; break;
    case 'T': case 't': sh = 40; end++; break;
    default: break;
    }
    if (*end != '\0' || (sh != 0 && v > (UINT64_MAX >> sh)))
        vcu__dmn_die("%s: not a size: %s", opt, s);
    return (uint64_t)v << sh;
}

static uint32_t vcu__dmn_u32(const char *s, const char *opt, uint32_t lo, uint32_t hi)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno != 0 || *end != '\0' || s[0] == '-' || v < lo || v > hi)
        vcu__dmn_die("%s must be %u..%u, not %s", opt, lo, hi, s);
    return (uint32_t)v;
}

/*
 * A folder of the daemon's: made if missing (mode), and refused unless it
 * is a real folder (not a link) owned by us and writable by nobody else:
 * another local user who made it first must not get our sockets, our
 * jails' mount point or our module cache.
 */
static void vcu__dmn_own_dir(const char *dir, mode_t mode)
{
    struct stat st;

    if (mkdir(dir, mode) != 0 && errno != EEXIST)
        vcu__dmn_die("cannot make %s: %s", dir, strerror(errno));
    if (lstat(dir, &st) != 0)
        vcu__dmn_die("%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        vcu__dmn_die("%s is not a folder (a link or a file is refused)", dir);
    if (st.st_uid != geteuid())
        vcu__dmn_die("%s belongs to uid %u, not to the daemon's user (%u): refused", dir,
                     (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 022)
        vcu__dmn_die("%s is writable by group or others (mode %03o): refused", dir,
                     (unsigned)(st.st_mode & 0777));
}

/* The folder of a path, as text. */
static void vcu__dmn_dirname(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');

    if (slash == NULL || slash == path)
        snprintf(out, len, "%s", slash == path ? "/" : ".");
    else
        snprintf(out, len, "%.*s", (int)(slash - path), path);
}

/* vcu-worker: ../libexec beside the daemon, or beside it. */
static const char *vcu__dmn_default_worker(void)
{
    static char p[PATH_MAX + 32];
    char exe[PATH_MAX], dir[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (n <= 0)
        return "vcu-worker";
    exe[n] = '\0';
    vcu__dmn_dirname(exe, dir, sizeof(dir));
    snprintf(p, sizeof(p), "%s/../libexec/vcu-worker", dir);
    if (access(p, X_OK) == 0)
        return p;
    snprintf(p, sizeof(p), "%s/vcu-worker", dir);
    return p;
}

/*
 * MPS's pipe folder: a client connects to the control daemon's socket in
 * it, so it must be the control daemon's (root or ours) and writable by
 * nobody else, or another local user could stand in for MPS.
 */
static void vcu__dmn_check_mps(const char *dir)
{
    struct stat st;

    if (dir[0] != '/')
        vcu__dmn_die("--mps-pipe must be an absolute path");
    if (lstat(dir, &st) != 0)
        vcu__dmn_die("--mps-pipe %s: %s (is nvidia-cuda-mps-control -d running?)", dir,
                     strerror(errno));
    if (!S_ISDIR(st.st_mode))
        vcu__dmn_die("--mps-pipe %s is not a folder (a link is refused)", dir);
    if (st.st_uid != 0 && st.st_uid != geteuid())
        vcu__dmn_die("--mps-pipe %s belongs to uid %u, neither root nor the daemon's user: "
                     "refused", dir, (unsigned)st.st_uid);
    if (st.st_mode & 022)
        vcu__dmn_die("--mps-pipe %s is writable by group or others (mode %03o): refused", dir,
                     (unsigned)(st.st_mode & 0777));
}

/*
 * Listens on a socket at path.  It is made under a name of its own
 * (path.new), listening and with its owner and mode, then renamed over
 * path: whoever sees path finds a socket that takes connections, never
 * one bound and not yet listening (ECONNREFUSED) or not yet its mode.
 */
static int vcu__dmn_listen_unix(const char *path, int mode, gid_t gid)
{
    struct sockaddr_un sa;
    struct stat st;
    int fd;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.new", path) >= (int)sizeof(sa.sun_path))
        vcu__dmn_die("socket path too long: %s", path);
    /* A socket left by a daemon that died; anything else stays. */
    if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
        vcu__dmn_die("%s exists and is not a socket: refused", path);
    if (lstat(sa.sun_path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            vcu__dmn_die("%s exists and is not a socket: refused", sa.sun_path);
        unlink(sa.sun_path);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 64) != 0)
        vcu__dmn_die("cannot listen on %s: %s", sa.sun_path, strerror(errno));
    if (gid != (gid_t)-1 && chown(sa.sun_path, (uid_t)-1, gid) != 0)
        vcu__dmn_die("chgrp %s: %s", sa.sun_path, strerror(errno));
    if (chmod(sa.sun_path, (mode_t)mode) != 0)
        vcu__dmn_die("chmod %s: %s", sa.sun_path, strerror(errno));
    if (rename(sa.sun_path, path) != 0)
        vcu__dmn_die("rename %s to %s: %s", sa.sun_path, path, strerror(errno));
    return fd;
}

static int vcu__dmn_listen_tcp(const char *spec)
{
    struct sockaddr_in sa;
    char host[64];
    const char *colon = strrchr(spec, ':');
    int fd, one = 1;
    unsigned long port;
    char *end;

    if (colon == NULL || (size_t)(colon - spec) >= sizeof(host))
        vcu__dmn_die("--metrics must be HOST:PORT or off, not %s", spec);
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    port = strtoul(colon + 1, &end, 10);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (*end != '\0' || port > 65535 || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        vcu__dmn_die("--metrics must be an IPv4 HOST:PORT or off, not %s", spec);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        vcu__dmn_die("socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0)
        vcu__dmn_die("cannot listen on %s: %s", spec, strerror(errno));
    return fd;
}

/* The share group: the daemon's memfd, formatted once. */
static void vcu__dmn_share(vcu_dmn_t *d)
{
    d->share_fd = (int)syscall(SYS_memfd_create, "vcu-share", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    /* Workers hold it writable: sealed, so none can shrink it under the
     * daemon's mapping (vcu_account.h, VCU_ACCT_SEALS). */
    if (d->share_fd < 0 || ftruncate(d->share_fd, (off_t)VCU_SCHED_LEN) != 0 ||
        fcntl(d->share_fd, F_ADD_SEALS, VCU_ACCT_SEALS | F_SEAL_SEAL) != 0)
        vcu__dmn_die("cannot make the share group: %s", strerror(errno));
    d->share_map = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, d->share_fd, 0);
    if (d->share_map == MAP_FAILED)
        vcu__dmn_die("cannot map the share group: %s", strerror(errno));
    vcu__sched_format(d->share_map);
    vcu__sched_view(&d->share, d->share_map, (uint32_t)getpid());
}

/* Adds a read-only path the workers need (their program, the driver, the
 * library path), once. */
static void vcu__dmn_jail_ro(vcu_dmn_t *d, const char *p)
{
    unsigned int i;

    if (p == NULL || p[0] != '/' || access(p, F_OK) != 0)
        return;
    for (i = 0; i < d->jail.nro; i++)
        if (strcmp(d->jail.ro[i], p) == 0)
            return;
    if (d->jail.nro >= VCU_JAIL_MAX_PATHS)
        vcu__dmn_die("too many read-only paths for the workers' jail (%s)", p);
    d->jail.ro[d->jail.nro++] = strdup(p);
}

static void vcu__dmn_setup_jail(vcu_dmn_t *d, int jail_on, const char *user)
{
    const char *llp = getenv("LD_LIBRARY_PATH");
    vcu_jail_cfg_t check;
    char err[512];

    d->jail.uid = (uid_t)-1;
    d->jail.gid = (gid_t)-1;
    if (user != NULL) {
        struct passwd *pw = getpwnam(user);

        if (pw == NULL)
            vcu__dmn_die("--worker-user %s: no such user", user);
        if (geteuid() != 0)
            vcu__dmn_die("--worker-user needs the daemon to run as root");
        d->jail.uid = pw->pw_uid;
        d->jail.gid = pw->pw_gid;
    } else if (geteuid() == 0) {
        struct passwd *pw = getpwnam("nobody");

        /* Never root: a root daemon's workers run as nobody unless told. */
        if (pw == NULL)
            vcu__dmn_die("no user 'nobody': give --worker-user");
        d->jail.uid = pw->pw_uid;
        d->jail.gid = pw->pw_gid;
    }
    vcu__dmn_dirname(d->worker, d->worker_dir, sizeof(d->worker_dir));
    vcu__dmn_jail_ro(d, d->worker_dir);
    if (d->libcuda != NULL && d->libcuda[0] == '/') {
        vcu__dmn_dirname(d->libcuda, d->libcuda_dir, sizeof(d->libcuda_dir));
        vcu__dmn_jail_ro(d, d->libcuda_dir);
    }
    if (llp != NULL) {
        char *copy = strdup(llp), *save = NULL, *t;

        for (t = strtok_r(copy, ":", &save); t != NULL; t = strtok_r(NULL, ":", &save))
            vcu__dmn_jail_ro(d, t);
        free(copy);
    }
    d->jail.enable = jail_on;
    if (!jail_on) {
        snprintf(d->jail_note, sizeof(d->jail_note), "off (--jail off)");
        vcu_dmn_log("WARNING: workers run without a jail (--jail off): no namespaces, no root "
                    "of their own");
        return;
    }
    snprintf(d->jail_base, sizeof(d->jail_base), "%s/jail", d->run_dir);
    vcu__dmn_own_dir(d->jail_base, 0700);
    d->jail.base = d->jail_base;
    /* Checked as the workers get it: at a pid of its own in the jail. */
    check = d->jail;
    check.ns_pid = VCU_DMN_NS_PID_FIRST;
    if (vcu_jail_check(&check, err, sizeof(err)) != 0)
        vcu__dmn_die("this host will not build the workers' jail: %s (--jail off runs them "
                     "without one)", err);
    snprintf(d->jail_note, sizeof(d->jail_note), "on (mount, pid, net, ipc, uts%s)",
             geteuid() != 0 ? ", user" : "");
}

static void vcu__dmn_cache(vcu_dmn_t *d, const char *arg)
{
    char mods[PATH_MAX + 16];
    struct stat st;

    if (arg != NULL && strcmp(arg, "off") == 0) {
        d->cache_dir = NULL;
        return;
    }
    if (arg != NULL) {
        d->cache_dir = arg;
    } else if (geteuid() == 0) {
        d->cache_dir = "/var/cache/virtio-cuda";
    } else {
        static char def[PATH_MAX];
        const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");

        if (x != NULL && x[0] == '/')
            snprintf(def, sizeof(def), "%s/virtio-cuda", x);
        else if (h != NULL && h[0] == '/')
            snprintf(def, sizeof(def), "%s/.cache/virtio-cuda", h);
        else
            vcu__dmn_die("no default module cache folder (no HOME): give --cache-dir");
        d->cache_dir = def;
    }
    vcu__dmn_own_dir(d->cache_dir, 0755);
    {
        /* Absolute: the workers open it by this path inside their jails. */
        static char abs[PATH_MAX];

        if (realpath(d->cache_dir, abs) == NULL)
            vcu__dmn_die("--cache-dir %s: %s", d->cache_dir, strerror(errno));
        d->cache_dir = abs;
    }
    /* The workers write the shared folder: theirs, and nobody else's. */
    snprintf(mods, sizeof(mods), "%s/modules", d->cache_dir);
    if (mkdir(mods, 0700) != 0 && errno != EEXIST)
        vcu__dmn_die("cannot make %s: %s", mods, strerror(errno));
    if (lstat(mods, &st) != 0 || !S_ISDIR(st.st_mode))
        vcu__dmn_die("%s is not a folder: refused", mods);
    if (d->jail.uid != (uid_t)-1) {
        if ((st.st_uid != d->jail.uid || st.st_gid != d->jail.gid) &&
            chown(mods, d->jail.uid, d->jail.gid) != 0)
            vcu__dmn_die("chown %s: %s", mods, strerror(errno));
    } else if (st.st_uid != geteuid()) {
        vcu__dmn_die("%s belongs to uid %u: refused", mods, (unsigned)st.st_uid);
    }
    if (chmod(mods, 0700) != 0)
        vcu__dmn_die("chmod %s: %s", mods, strerror(errno));
}

/* The daemon's settings before its options. */
static void vcu__dmn_defaults(vcu_dmn_t *d)
{
    d->max_sessions = VCU_DMN_MAX_SESSIONS;
    d->max_vms = VCU_DMN_MAX_VMS;
    d->modcache_bytes = VCU_DMN_MODCACHE_BYTES;
    d->ctx_bytes = VCU_DMN_CTX_BYTES;
    d->host_quota = VCU_DMN_HOST_QUOTA;
    d->seccomp = VCU_SECCOMP_ON;
    d->socket_mode = 0660;
    d->socket_gid = (gid_t)-1;
    d->metrics = VCU_DMN_METRICS_DEFAULT;
}

/* One option a with its value v: into d, or into *jail, *user, *cache or
 * *group for the steps after; the usage for one not known. */
static void vcu__dmn_option(vcu_dmn_t *d, const char *a, const char *v, const char **jail,
                            const char **user, const char **cache, const char **group)
{
    if (strcmp(a, "--socket") == 0)
        d->socket_path = v;
    else if (strcmp(a, "--control") == 0)
        d->control_path = v;
    else if (strcmp(a, "--metrics") == 0)
        d->metrics = v;
    else if (strcmp(a, "--run-dir") == 0)
        d->run_dir = v;
    else if (strcmp(a, "--cache-dir") == 0)
        *cache = v;
    else if (strcmp(a, "--module-cache-size") == 0)
        d->modcache_bytes = vcu__dmn_size(v, a);
    else if (strcmp(a, "--libcuda") == 0)
        d->libcuda = v;
    else if (strcmp(a, "--worker") == 0)
        d->worker = v;
    else if (strcmp(a, "--worker-user") == 0)
        *user = v;
    else if (strcmp(a, "--socket-group") == 0)
        *group = v;
    else if (strcmp(a, "--socket-mode") == 0)
        d->socket_mode = (int)strtol(v, NULL, 8);
    else if (strcmp(a, "--gpus") == 0)
        d->allowed_gpus = v;
    else if (strcmp(a, "--max-sessions") == 0)
        d->max_sessions = vcu__dmn_u32(v, a, 1, VCU_DMN_MAX_SESSIONS_CAP);
    else if (strcmp(a, "--max-vms") == 0)
        d->max_vms = vcu__dmn_u32(v, a, 1, 4096);
    else if (strcmp(a, "--mem-quota") == 0)
        d->default_quota = vcu__dmn_size(v, a);
    else if (strcmp(a, "--max-mem-quota") == 0)
        d->max_quota = vcu__dmn_size(v, a);
    else if (strcmp(a, "--host-mem-quota") == 0)
        d->host_quota = vcu__dmn_size(v, a);
    else if (strcmp(a, "--ctx-bytes") == 0)
        d->ctx_bytes = vcu__dmn_size(v, a);
    else if (strcmp(a, "--mps-pipe") == 0)
        d->mps_pipe = v;
    else if (strcmp(a, "--jail") == 0)
        *jail = v;
    else if (strcmp(a, "--worker-aslr") == 0)
        d->jail.no_aslr = strcmp(v, "off") == 0  ? 1
                          : strcmp(v, "on") == 0 ? 0
                                                 : (vcu__dmn_usage(), 0);
    else if (strcmp(a, "--seccomp") == 0)
        d->seccomp = strcmp(v, "on") == 0    ? VCU_SECCOMP_ON
                     : strcmp(v, "log") == 0 ? VCU_SECCOMP_LOG
                     : strcmp(v, "off") == 0 ? VCU_SECCOMP_OFF
                                             : (vcu__dmn_usage(), 0);
    else
        vcu__dmn_usage();
}

/* The run folder (made, absolute), the sockets in it unless given, the
 * worker program and libcuda resolved. */
static void vcu__dmn_paths(vcu_dmn_t *d)
{
    static char sock[PATH_MAX + 16], ctl[PATH_MAX + 16], run[PATH_MAX];

    if (d->run_dir == NULL) {
        const char *x = getenv("XDG_RUNTIME_DIR");

        if (geteuid() == 0)
            snprintf(run, sizeof(run), "/run/virtio-cuda");
        else if (x != NULL && x[0] == '/')
            snprintf(run, sizeof(run), "%s/virtio-cuda", x);
        else
            vcu__dmn_die("no default run folder (no XDG_RUNTIME_DIR): give --run-dir");
        d->run_dir = run;
    }
    /* The run folder holds the sockets (QEMU must reach vcu.sock: the
     * folder is searchable, the socket's mode and group decide). */
    vcu__dmn_own_dir(d->run_dir, 0755);
    {
        /* Absolute from here: the jails mount on it, the workers bind by it. */
        static char abs[PATH_MAX];

        if (realpath(d->run_dir, abs) == NULL)
            vcu__dmn_die("--run-dir %s: %s", d->run_dir, strerror(errno));
        d->run_dir = abs;
    }
    if (d->socket_path == NULL) {
        snprintf(sock, sizeof(sock), "%s/vcu.sock", d->run_dir);
        d->socket_path = sock;
    }
    if (d->control_path == NULL) {
        snprintf(ctl, sizeof(ctl), "%s/control.sock", d->run_dir);
        d->control_path = ctl;
    }
    if (d->worker == NULL)
        d->worker = vcu__dmn_default_worker();
    {
        /* Resolved: the jail binds its folder and runs it by this path. */
        static char abs[PATH_MAX];

        if (realpath(d->worker, abs) == NULL)
            vcu__dmn_die("worker program %s: %s (give --worker)", d->worker, strerror(errno));
        d->worker = abs;
    }
    if (access(d->worker, X_OK) != 0)
        vcu__dmn_die("worker program %s: %s (give --worker)", d->worker, strerror(errno));
    if (d->libcuda != NULL && strchr(d->libcuda, '/') != NULL) {
        static char abs[PATH_MAX];

        /* One that is not there: the workers say so (no CUDA), as they
         * would for a host without the driver. */
        if (realpath(d->libcuda, abs) != NULL)
            d->libcuda = abs;
        else
            vcu_dmn_log("WARNING: --libcuda %s: %s", d->libcuda, strerror(errno));
    }
}

static void vcu__dmn_options(vcu_dmn_t *d, int argc, char **argv)
{
    const char *jail = "on", *user = NULL, *cache = NULL, *group = NULL;
    int i;

    vcu__dmn_defaults(d);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || v == NULL)
            vcu__dmn_usage();
        i++;
        vcu__dmn_option(d, a, v, &jail, &user, &cache, &group);
    }
    if (strcmp(jail, "on") != 0 && strcmp(jail, "off") != 0)
        vcu__dmn_usage();
    if (d->socket_mode <= 0 || d->socket_mode > 0777)
        vcu__dmn_die("--socket-mode must be octal 1..777");
    if (group != NULL) {
        struct group *g = getgrnam(group);

        if (g == NULL)
            vcu__dmn_die("--socket-group %s: no such group", group);
        d->socket_gid = g->gr_gid;
    }
    vcu__dmn_paths(d);
    if (d->mps_pipe != NULL)
        vcu__dmn_check_mps(d->mps_pipe);
    if (d->max_quota != 0 && d->default_quota > d->max_quota)
        vcu__dmn_die("--mem-quota is above --max-mem-quota");
    /* A context always takes memory; no GPU has 2^48 bytes. */
    if (d->ctx_bytes == 0 || d->ctx_bytes > ((uint64_t)1 << 48))
        vcu__dmn_die("--ctx-bytes must be 1..256T");
    vcu__dmn_setup_jail(d, strcmp(jail, "on") == 0, user);
    vcu__dmn_cache(d, cache);
}

/* Reaps every child that has ended. */
static void vcu__dmn_reap(vcu_dmn_t *d)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);

        if (pid <= 0)
            break;
        vcu_vm_reaped(d, pid, st);
    }
}

/* SIGTERM: every worker is killed and reaped before the daemon goes. */
static void vcu__dmn_shutdown(vcu_dmn_t *d)
{
    vcu_vm_t *vm;
    uint64_t until = vcu_dmn_now() + 10ull * 1000000000u;

    for (vm = d->vms; vm != NULL; vm = vm->next) {
        vcu_sess_t *s;

        for (s = vm->sessions; s != NULL; s = s->next)
            if (s->pid > 0)
                kill(s->pid, SIGKILL);
        if (vm->probe_pid > 0)
            kill(vm->probe_pid, SIGKILL);
    }
    while (vcu_dmn_now() < until) {
        int st;
        pid_t pid = waitpid(-1, &st, 0);

        if (pid < 0)
            break;
        vcu_vm_reaped(d, pid, st);
    }
    vcu_vm_ipc_remove_all(d);
    unlink(d->socket_path);
    unlink(d->control_path);
}

#define VCU__DMN_MAXFD 32768

/* The daemon's descriptor limit raised to its hard one: every worker's
 * keep socket and every descriptor kept for the VMs (keep.c) is one of
 * its own.  Half of what is left after its own needs may be kept. */
static void vcu__dmn_nofile(vcu_dmn_t *d)
{
    struct rlimit rl;
    rlim_t n = 1024;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0 || getrlimit(RLIMIT_NOFILE, &rl) == 0)
            n = rl.rlim_cur;
    }
    if (n > (rlim_t)1 << 21)
        n = (rlim_t)1 << 21;
    d->keep_max = n > 2048 ? (uint32_t)((n - 1024) / 2) : 0;
}

/* The signals as a descriptor, the listening sockets, the line that says
 * how the daemon serves. */
static void vcu__dmn_listen_all(vcu_dmn_t *d)
{
    sigset_t sigs;

    sigemptyset(&sigs);
    sigaddset(&sigs, SIGCHLD);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    d->sigfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d->sigfd < 0)
        vcu__dmn_die("signalfd: %s", strerror(errno));
    d->vm_listen = vcu__dmn_listen_unix(d->socket_path, d->socket_mode, d->socket_gid);
    d->ctl_listen = vcu__dmn_listen_unix(d->control_path, 0600, (gid_t)-1);
    d->metrics_listen = -1;
    if (strcmp(d->metrics, "off") != 0)
        d->metrics_listen = vcu__dmn_listen_tcp(d->metrics);
    vcu_dmn_log("serving on %s (control %s, metrics %s); worker %s as uid %d; jail %s; "
                "seccomp %s; worker address randomization %s; libcuda %s; module cache %s",
                d->socket_path, d->control_path, d->metrics, d->worker,
                d->jail.uid == (uid_t)-1 ? (int)geteuid() : (int)d->jail.uid, d->jail_note,
                d->seccomp == VCU_SECCOMP_ON ? "on" : d->seccomp == VCU_SECCOMP_LOG ? "log" : "off",
                d->jail.no_aslr ? "off (migratable)" : "on",
                d->libcuda ? d->libcuda : "libcuda.so.1 (the loader's search)",
                d->cache_dir ? d->cache_dir : "off");
}

/* The poll set: the signals, the listeners, every VM's link and probe,
 * every control or metrics connection, every worker's keep socket; what[]
 * says which kind each is (0..7), who[] its VM or connection (a keep
 * socket: its VM, since a session may be reaped, and freed, by an event
 * before its own in one round).  Returns how many. */
static nfds_t vcu__dmn_poll_set(vcu_dmn_t *d, struct pollfd *pfd, int *what, void **who)
{
    vcu_sess_t *s;
    vcu_vm_t *vm;
    vcu_op_t *op;
    nfds_t n = 0;

#define VCU__ADD(fd_, ev_, kind_, ptr_)                                                    \
    do {                                                                                  \
        if (n < VCU__DMN_MAXFD) {                                                         \
            pfd[n].fd = (fd_);                                                            \
            pfd[n].events = (short)(ev_);                                                 \
            pfd[n].revents = 0;                                                           \
            what[n] = (kind_);                                                            \
            who[n] = (ptr_);                                                              \
            n++;                                                                          \
        }                                                                                 \
    } while (0)
    VCU__ADD(d->sigfd, POLLIN, 0, NULL);
    if (d->nvms < d->max_vms + 1)
        VCU__ADD(d->vm_listen, POLLIN, 1, NULL);
    VCU__ADD(d->ctl_listen, POLLIN, 2, NULL);
    if (d->metrics_listen >= 0)
        VCU__ADD(d->metrics_listen, POLLIN, 3, NULL);
    for (vm = d->vms; vm != NULL; vm = vm->next) {
        if (vm->fd >= 0)
            VCU__ADD(vm->fd, POLLIN | (vm->txq ? POLLOUT : 0), 4, vm);
        if (vm->probe_fd >= 0)
            VCU__ADD(vm->probe_fd, POLLIN, 5, vm);
        for (s = vm->sessions; s != NULL; s = s->next)
            if (s->keep_fd >= 0)
                VCU__ADD(s->keep_fd, POLLIN, 7, vm);
    }
    for (op = d->ops; op != NULL; op = op->next)
        if (op->fd >= 0)
            VCU__ADD(op->fd, (op->out != NULL ? POLLOUT : POLLIN), 6, op);
#undef VCU__ADD
    return n;
}

/* The signals that came: SIGCHLD reaps, SIGHUP is ignored, the others
 * stop the daemon. */
static void vcu__dmn_signals(vcu_dmn_t *d)
{
    struct signalfd_siginfo si;

    while (read(d->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            vcu__dmn_reap(d);
        else if (si.ssi_signo != SIGHUP)
            d->stop = true;
    }
}

/* One ready descriptor of the poll set, of kind what, for who. */
static void vcu__dmn_event(vcu_dmn_t *d, short revents, int what, void *who, int fd)
{
    vcu_vm_t *vm;
    vcu_op_t *op;

    switch (what) {
    case 0:
        vcu__dmn_signals(d);
        break;
    case 1:
        vcu_vm_accept(d);
        break;
    case 2:
        vcu_op_accept(d, d->ctl_listen, 0);
        break;
    case 3:
        vcu_op_accept(d, d->metrics_listen, 1);
        break;
    case 4:
        vm = who;
        if (vm->fd >= 0 && (revents & POLLOUT))
            vcu_vm_output(vm);
        if (vm->fd >= 0 && (revents & (POLLIN | POLLHUP | POLLERR)))
            vcu_vm_input(vm);
        break;
    case 5:
        vm = who;
        if (vm->probe_fd >= 0)
            vcu_vm_probe_input(vm);
        break;
    case 6:
        op = who;
        if (op->fd >= 0 && op->out != NULL)
            vcu_op_output(d, op);
        else if (op->fd >= 0)
            vcu_op_input(d, op);
        break;
    case 7:
        vcu_keep_ready(who, fd);
        break;
    }
}

int main(int argc, char **argv)
{
    static vcu_dmn_t dmn;
    vcu_dmn_t *d = &dmn;
    static struct pollfd pfd[VCU__DMN_MAXFD];
    static void *who[VCU__DMN_MAXFD];
    static int what[VCU__DMN_MAXFD];

    signal(SIGPIPE, SIG_IGN);
    d->next_party = VCU_DMN_PARTY_BASE;
    d->next_ns_pid = VCU_DMN_NS_PID_FIRST;
    d->started_ns = vcu_dmn_now();
    d->jail.no_aslr = 1;            /* --worker-aslr off, the default */
    vcu__dmn_options(d, argc, argv);
    vcu__dmn_nofile(d);
    vcu__dmn_share(d);
    /* The VMs' IPC folders, on /dev/shm's tmpfs: the driver's interprocess
     * events live there, and it fails to make one in a folder of a disk's
     * file system (cuEventCreate: CUDA_ERROR_INVALID_VALUE, H200, driver
     * 580, a jail's /dev/shm on ext4).  Searchable, for workers without a
     * jail; the daemon's own, made once every option is taken, removed as
     * it ends. */
    snprintf(d->ipc_root, sizeof(d->ipc_root), "/dev/shm/virtio-cuda.%d", (int)getpid());
    vcu__dmn_own_dir(d->ipc_root, 0711);
    vcu__dmn_listen_all(d);

    while (!d->stop) {
        nfds_t n = vcu__dmn_poll_set(d, pfd, what, who);
        nfds_t i;
        int rc;

        rc = poll(pfd, n, 1000);
        if (rc < 0 && errno != EINTR)
            vcu__dmn_die("poll: %s", strerror(errno));
        for (i = 0; rc > 0 && i < n; i++) {
            if (pfd[i].revents == 0)
                continue;
            vcu__dmn_event(d, pfd[i].revents, what[i], who[i], pfd[i].fd);
        }
        /* A SIGCHLD may have come while the set was being built. */
        vcu__dmn_reap(d);
        vcu_vm_tick(d, vcu_dmn_now());
        vcu_vm_free_gone(d);
        vcu_op_free_closed(d);
    }
    vcu_dmn_log("ending: killing %u VMs' workers", d->nvms);
    vcu__dmn_shutdown(d);
    return 0;
}
