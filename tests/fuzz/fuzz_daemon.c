/*
 * libFuzzer target for the daemon's side of the QEMU link (host-backend/
 * daemon/vm.c): vcu_vm_input() reading frames and descriptors from a QEMU
 * that may be compromised, vcu__vm_frame() and vcu__vm_hello() checking
 * them (HELLO, SPAWN with its descriptors, KILL), and the probe worker's
 * hello (vcu_vm_probe_input()).  vm.c is built as the daemon builds it;
 * what it calls outside itself is stubbed here at link time:
 * vcu_jail_spawn() starts nothing (it checks what a worker would have been
 * given and hands back a pid no process can have, so the daemon's kill()s
 * reach nobody), vcu_dmn_log() is quiet unless FUZZ_DEBUG is set.
 *
 * Each input is one VM's connection, from accept to its end: the daemon's
 * options for it, how the probe answers, then chunks of bytes written to
 * the link, each with a number of /dev/null descriptors, and events between
 * them (a session's worker ends).  After each chunk the daemon reads what
 * the link holds, as its poll loop would; at the end the harness closes the
 * link, reaps every worker the daemon thinks it started, and checks that
 * the VM is gone with every descriptor it held (an fd count).
 *
 * Input:
 *   u8 cfg     bit 0: allowed GPUs "0,1,GPU-fz"; 1: an MPS pipe folder;
 *              2: quota bounds; 3: a module cache folder; 4: spawning fails;
 *              5: 2 sessions per VM; 6: no room for a VM; 7: a host quota
 *   u8 probe   bits 0-6 % 6: 0 a good hello, 1 a good hello saying CUDA is
 *              not there, 2 nothing, 3 the next u8 n and n bytes, 4 the
 *              probe times out, 5 the probe's process ends before it says
 *              anything; bit 7: QEMU reads nothing the daemon sends (its
 *              end then closes with bytes unread: the daemon's read fails)
 *   [u8 n, n bytes]  with probe 3
 *   chunks until the input ends:
 *     u8 c     bits 0-2: descriptors with the chunk; bits 3-4: then 1 the
 *              oldest session's worker ends, 2 the newest's, 3 every one's
 *     u16 len  bytes that follow (at most what is left)
 *
 * Checked (besides the sanitizers): the daemon never holds more received
 * descriptors or link bytes than its buffers; it sends QEMU only WELCOME,
 * SPAWNED and SLICE frames of their sizes, with the descriptors their
 * status says; a worker gets a GPU list of [A-Za-z0-9:,-] and descriptors
 * that are open; the VM and all it holds go once its link closed and its
 * workers are reaped.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vcu_daemon.h"
#include "vcu_fdpass.h"
#include "vcu_ipc.h"
#include "vcu_seccomp.h"
#include "fz_input.h"

#define FZ_CHECK(c)                                                               \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_daemon: %s:%d: check failed: %s\n", __FILE__,    \
                    __LINE__, #c);                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

/* Above PID_MAX_LIMIT (2^22): kill() of it reaches no process. */
#define FZ_PID_BASE 0x40000000

static vcu_dmn_t d;
static int fz_debug;
static int devnull = -1;
static char fz_listen_name[64];
static char fz_cache[64];
static int fz_spawn_fails;
static const unsigned char *fz_probe_bytes;
static size_t fz_probe_len;
static int fz_probe_kind;
static int fz_next_pid;

/* ---- what vm.c calls outside itself ----------------------------------------- */

uint64_t vcu_dmn_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vcu_dmn_log(const char *fmt, ...)
{
    va_list ap;

    if (!fz_debug)
        return;
    va_start(ap, fmt);
    fprintf(stderr, "vcu-daemon: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static int fz_gpus_ok(const char *s)
{
    if (*s == '\0')
        return 0;
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == ':' || *s == ','))
            return 0;
    return 1;
}

pid_t vcu_jail_program_pid(pid_t pid)
{
    return pid;
}

int vcu_jail_spawn(const vcu_jail_cfg_t *cfg, const char *path, char *const argv[],
                   char *const envp[], const int *fds, unsigned int nfds, int log_fd,
                   pid_t *pid, int *pidfd, char *err, size_t errlen)
{
    unsigned int i;
    int probe = 0;

    (void)cfg;
    (void)log_fd;
    FZ_CHECK(strcmp(path, d.worker) == 0 && argv[0] != NULL && strcmp(argv[0], path) == 0);
    /* As the worker reads its command line: options, each but --probe and --jail-parent
     * with a value (which may look like an option: a GPU list "--probe"
     * is a value still). */
    for (i = 1; argv[i] != NULL; i++) {
        FZ_CHECK(i < 48 && strncmp(argv[i], "--", 2) == 0);
        if (strcmp(argv[i], "--probe") == 0) {
            probe = 1;
            continue;
        }
        if (strcmp(argv[i], "--jail-parent") == 0)
            continue;
        FZ_CHECK(argv[i + 1] != NULL);
        if (strcmp(argv[i], "--gpus") == 0)
            FZ_CHECK(fz_gpus_ok(argv[i + 1]));
        i++;
    }
    for (i = 0; envp[i] != NULL; i++)
        FZ_CHECK(i < 64);
    FZ_CHECK(nfds >= 1 && nfds <= 9);
    for (i = 0; i < nfds; i++)
        FZ_CHECK(fcntl(fds[i], F_GETFD) != -1);
    if (fz_spawn_fails) {
        snprintf(err, errlen, "spawning is off in this run");
        return -EPERM;
    }
    if (probe) {
        FZ_CHECK(nfds == 1);
        if (fz_probe_kind == 0 || fz_probe_kind == 1) {
            struct {
                struct vcu_ipc_hdr h;
                struct vcu_ipc_hello hello;
            } m;

            memset(&m, 0, sizeof(m));
            m.h.type = VCU_IPC_HELLO;
            m.h.len = sizeof(m.hello);
            m.hello.version = VCU_IPC_VERSION;
            m.hello.pid = 1;
            if (fz_probe_kind == 1)
                snprintf(m.hello.cuda_error, sizeof(m.hello.cuda_error), "no GPU here");
            FZ_CHECK(send(fds[0], &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) ==
                     (ssize_t)sizeof(m));
        } else if (fz_probe_kind == 3 && fz_probe_len > 0) {
            FZ_CHECK(send(fds[0], fz_probe_bytes, fz_probe_len, MSG_NOSIGNAL | MSG_DONTWAIT) ==
                     (ssize_t)fz_probe_len);
        }
    }
    *pid = FZ_PID_BASE + fz_next_pid++;
    *pidfd = fcntl(devnull, F_DUPFD_CLOEXEC, 0);
    FZ_CHECK(*pidfd >= 0);
    return 0;
}

/* ---- the harness ---------------------------------------------------------------- */

static unsigned int fz_nfds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    unsigned int n = 0;

    FZ_CHECK(dir != NULL);
    while ((e = readdir(dir)) != NULL)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

static int fz_readable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };

    return poll(&p, 1, 0) > 0;
}

/* What the daemon's poll loop does when the link or the probe has input. */
static void fz_pump(vcu_vm_t *vm)
{
    unsigned int rounds;

    for (rounds = 0; vm->fd >= 0 && fz_readable(vm->fd); rounds++) {
        FZ_CHECK(rounds < 100000);
        vcu_vm_input(vm);
        FZ_CHECK(vm->nrfds <= sizeof(vm->rfds) / sizeof(vm->rfds[0]));
        FZ_CHECK(vm->rhave <= sizeof(vm->rbuf));
    }
    if (vm->state != VCU_VM_PROBING || vm->probe_fd < 0)
        return;
    if (fz_probe_kind == 4) {
        vcu_vm_tick(&d, UINT64_MAX);
    } else if (fz_probe_kind == 5) {
        vcu_vm_reaped(&d, vm->probe_pid, SIGKILL);
    } else {
        for (rounds = 0; vm->state == VCU_VM_PROBING && vm->probe_fd >= 0 &&
                         fz_readable(vm->probe_fd);
             rounds++) {
            FZ_CHECK(rounds < 100);
            vcu_vm_probe_input(vm);
        }
    }
}

/* A session's worker ends: the oldest (which 1), the newest (2), all (3). */
static void fz_reap(vcu_vm_t *vm, int which)
{
    vcu_sess_t *s = vm->sessions, *last = NULL;

    if (s == NULL)
        return;
    if (which == 3) {
        while (vm->sessions != NULL)
            vcu_vm_reaped(&d, vm->sessions->pid, 0);
        return;
    }
    /* Sessions are listed newest first. */
    for (; s != NULL; s = s->next)
        last = s;
    vcu_vm_reaped(&d, which == 1 ? last->pid : vm->sessions->pid, SIGKILL);
}

static void fz_clean_cache(void)
{
    DIR *dir = opendir(fz_cache);
    struct dirent *e;
    char p[256];

    if (dir == NULL)
        return;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || strcmp(e->d_name, "..") == 0))
            continue;
        snprintf(p, sizeof(p), "%s/%s", fz_cache, e->d_name);
        (void)rmdir(p);
    }
    closedir(dir);
}

static void fz_fini(void)
{
    fz_clean_cache();
    (void)rmdir(fz_cache);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct sockaddr_un sa;

    (void)argc;
    (void)argv;
    fz_debug = getenv("FUZZ_DEBUG") != NULL;
    signal(SIGPIPE, SIG_IGN);
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    FZ_CHECK(devnull >= 0);
    memset(&d, 0, sizeof(d));
    d.worker = "/nonexistent/vcu-worker";
    d.seccomp = VCU_SECCOMP_ON;
    d.jail.uid = (uid_t)-1;
    d.jail.gid = (gid_t)-1;
    d.next_party = VCU_DMN_PARTY_BASE;
    d.vm_listen = d.ctl_listen = d.metrics_listen = d.sigfd = -1;
    /* The share group, as main.c makes it. */
    d.share_fd = (int)syscall(SYS_memfd_create, "vcu-share", MFD_CLOEXEC);
    FZ_CHECK(d.share_fd >= 0 && ftruncate(d.share_fd, (off_t)VCU_SCHED_LEN) == 0);
    d.share_map = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, d.share_fd, 0);
    FZ_CHECK(d.share_map != MAP_FAILED);
    vcu__sched_format(d.share_map);
    vcu__sched_view(&d.share, d.share_map, (uint32_t)getpid());
    /* The VMs' socket: an abstract name of this process's. */
    snprintf(fz_listen_name, sizeof(fz_listen_name), "vcu-fuzz-daemon-%d", (int)getpid());
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, fz_listen_name, strlen(fz_listen_name));
    d.vm_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FZ_CHECK(d.vm_listen >= 0);
    FZ_CHECK(bind(d.vm_listen, (struct sockaddr *)&sa,
                  (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                              strlen(fz_listen_name))) == 0);
    FZ_CHECK(listen(d.vm_listen, 4) == 0);
    snprintf(fz_cache, sizeof(fz_cache), "/tmp/vcu-fuzz-cache-%d", (int)getpid());
    FZ_CHECK(mkdir(fz_cache, 0700) == 0 || errno == EEXIST);
    {
        char mods[128];

        snprintf(mods, sizeof(mods), "%s/modules", fz_cache);
        (void)mkdir(mods, 0700);
    }
    atexit(fz_fini);
    return 0;
}

/* Writes len bytes to the link with n /dev/null descriptors. */
static void fz_send(int fd, const uint8_t *p, size_t len, unsigned int n)
{
    int fds[8];
    unsigned int i;

    for (i = 0; i < n && i < 8; i++)
        fds[i] = devnull;
    /* A closed link (the daemon ended it) takes nothing more. */
    (void)vcu__fd_send(fd, p, len, fds, i, 0);
}

/* QEMU's side: what the daemon sent, frame by frame. */
static unsigned char fz_rx[2 * (sizeof(struct vcu_link_hdr) + VCU_LINK_MAX_BODY)];
static size_t fz_rxn;
static unsigned int fz_rx_fds, fz_rx_fds_due;

static void fz_drain(int fd)
{
    for (;;) {
        struct vcu_link_hdr h;
        int fds[VCU_FDPASS_MAX], mflags = 0;
        unsigned int nfd = 0, k;
        ssize_t n;

        n = vcu__fd_recv(fd, fz_rx + fz_rxn, sizeof(fz_rx) - fz_rxn, MSG_DONTWAIT, fds, &nfd,
                         VCU_FDPASS_MAX, &mflags);
        for (k = 0; k < nfd; k++) {
            close(fds[k]);
            fz_rx_fds++;
        }
        if (n <= 0)
            return;
        FZ_CHECK(!(mflags & MSG_CTRUNC));
        fz_rxn += (size_t)n;
        while (fz_rxn >= sizeof(h)) {
            uint32_t status;

            memcpy(&h, fz_rx, sizeof(h));
            FZ_CHECK((h.type == VCU_LINK_WELCOME && h.len == sizeof(struct vcu_link_welcome)) ||
                     (h.type == VCU_LINK_SPAWNED && h.len == sizeof(struct vcu_link_spawned)) ||
                     (h.type == VCU_LINK_SLICE && h.len == sizeof(struct vcu_link_slice)));
            if (fz_rxn < sizeof(h) + h.len)
                break;
            if (h.type == VCU_LINK_WELCOME) {
                memcpy(&status, fz_rx + sizeof(h) + 4, sizeof(status));
                fz_rx_fds_due += status == VCU_S_OK ? VCU_LINK_WELCOME_FDS : 0;
            } else if (h.type == VCU_LINK_SPAWNED) {
                memcpy(&status, fz_rx + sizeof(h), sizeof(status));
                fz_rx_fds_due += status == VCU_S_OK ? VCU_LINK_SPAWNED_FDS : 0;
            }
            memmove(fz_rx, fz_rx + sizeof(h) + h.len, fz_rxn - sizeof(h) - h.len);
            fz_rxn -= sizeof(h) + h.len;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = { data, size };
    struct sockaddr_un sa;
    unsigned int fds0 = fz_nfds();
    uint8_t cfg = (uint8_t)in_u(&in, 1), probe = (uint8_t)in_u(&in, 1);
    int reads = !(probe & 0x80);
    vcu_vm_t *vm;
    int cli;

    fz_probe_kind = (probe & 0x7f) % 6;
    fz_probe_len = 0;
    if (fz_probe_kind == 3) {
        fz_probe_len = (size_t)in_u(&in, 1);
        if (fz_probe_len > in.n)
            fz_probe_len = in.n;
        fz_probe_bytes = in.p;
        in.p += fz_probe_len;
        in.n -= fz_probe_len;
    }
    d.allowed_gpus = cfg & 1 ? "0,1,GPU-fz" : NULL;
    d.mps_pipe = cfg & 2 ? "/tmp/vcu-fuzz-mps" : NULL;
    d.max_quota = cfg & 4 ? 1ull << 30 : 0;
    d.default_quota = cfg & 4 ? 1ull << 20 : 0;
    d.cache_dir = cfg & 8 ? fz_cache : NULL;
    fz_spawn_fails = (cfg & 16) != 0;
    d.max_sessions = cfg & 32 ? 2 : VCU_DMN_MAX_SESSIONS;
    d.max_vms = cfg & 64 ? 0 : VCU_DMN_MAX_VMS;
    d.host_quota = cfg & 128 ? 1ull << 32 : 0;
    fz_rxn = 0;
    fz_rx_fds = fz_rx_fds_due = 0;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path + 1, fz_listen_name, strlen(fz_listen_name));
    cli = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FZ_CHECK(cli >= 0);
    FZ_CHECK(connect(cli, (struct sockaddr *)&sa,
                     (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                                 strlen(fz_listen_name))) == 0);
    vcu_vm_accept(&d);
    vm = d.vms;
    FZ_CHECK(vm != NULL && vm->fd >= 0);

    while (in.n > 0) {
        uint8_t c = (uint8_t)in_u(&in, 1);
        size_t len = (size_t)in_u(&in, 2);

        if (len > in.n)
            len = in.n;
        if (len > 0)
            fz_send(cli, in.p, len, c & 7);
        in.p += len;
        in.n -= len;
        fz_pump(vm);
        if ((c >> 3) & 3)
            fz_reap(vm, (c >> 3) & 3);
        if (reads)
            fz_drain(cli);
    }

    /* QEMU goes: the link ends, the workers are killed and reaped. */
    if (reads) {
        fz_drain(cli);
        FZ_CHECK(fz_rx_fds == fz_rx_fds_due);
    }
    close(cli);
    fz_pump(vm);
    FZ_CHECK(vm->fd < 0 && vm->state == VCU_VM_GONE);
    fz_reap(vm, 3);
    if (vm->probe_pid > 0)
        vcu_vm_reaped(&d, vm->probe_pid, SIGKILL);
    vcu_vm_free_gone(&d);
    FZ_CHECK(d.vms == NULL && d.nvms == 0);
    if (cfg & 8)
        fz_clean_cache();
    FZ_CHECK(fz_nfds() == fds0);
    return 0;
}
