/*
 * The VMs the daemon serves (vcu_daemon.h): each QEMU device's link
 * (vcu_link.h), its slice, its sessions' workers.
 *
 * A VM's life: its device connects and says HELLO; the daemon checks what
 * it asks for against its own bounds, makes its slice (the memory account
 * and policy page its workers map, a slot in the share group), runs a
 * probe worker with the VM's GPUs to see whether CUDA works so, and
 * answers WELCOME.  Then each SPAWN starts a jailed worker with the ends
 * of the session's channel QEMU made, and SPAWNED hands QEMU the worker's
 * pidfd: QEMU knows from it, not from us, when the worker is gone.  KILL
 * ends one.  When the link closes (QEMU ended, reset its device's
 * connection, or broke the protocol) every worker of the VM is killed; the
 * VM's slice goes once the last one is reaped, since a dying worker's
 * memory still counts.
 *
 * Everything QEMU sends is checked here before use: frame types and sizes,
 * descriptor counts, the VM's name and GPU list (they end up on a
 * worker's command line), every number against the daemon's bounds.  A
 * QEMU that breaks the protocol loses its link, nothing more.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vcu_daemon.h"
#include "vcu_fdpass.h"
#include "vcu_ipc.h"
#include "vcu_seccomp.h"

#define VCU__VM_PROXY_MAX_SMS 4096u

static void vcu__vm_close(vcu_vm_t *vm, const char *why);

/* ---- sending ----------------------------------------------------------- */

/* One non-blocking send of what is left of q: bytes sent, 0 when the
 * socket is full, -1 when the link is broken. */
static ssize_t vcu__vm_send_some(int fd, vcu_txq_t *q)
{
    ssize_t n = vcu__fd_send(fd, q->buf + q->off, q->len - q->off, q->fds,
                             q->off == 0 ? q->nfds : 0, MSG_DONTWAIT);

    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    return n;
}

static void vcu__txq_free(vcu_txq_t *q)
{
    unsigned int i;

    for (i = 0; i < q->nfds; i++)
        close(q->fds[i]);
    free(q->buf);
    free(q);
}

/* Sends what is queued; the poll loop calls again when the link can
 * take more. */
void vcu_vm_output(vcu_vm_t *vm)
{
    vcu_txq_t *q;

    while ((q = vm->txq) != NULL && vm->fd >= 0) {
        ssize_t n = vcu__vm_send_some(vm->fd, q);

        if (n < 0) {
            vcu__vm_close(vm, "the link broke while sending");
            return;
        }
        if (n == 0)
            return;
        if (q->off == 0) {
            /* The descriptors went with the first byte. */
            unsigned int i;

            for (i = 0; i < q->nfds; i++)
                close(q->fds[i]);
            q->nfds = 0;
        }
        q->off += (size_t)n;
        if (q->off < q->len)
            continue;
        vm->txq = q->next;
        if (vm->txq == NULL)
            vm->txq_tail = NULL;
        vcu__txq_free(q);
    }
}

/* Queues a frame (its fds are ours now: sent, then closed) and sends what
 * the link takes. */
static void vcu__vm_send(vcu_vm_t *vm, uint32_t type, uint64_t id, const void *body, size_t len,
                         const int *fds, unsigned int nfds)
{
    struct vcu_link_hdr h = { .type = type, .len = (uint32_t)len, .id = id };
    vcu_txq_t *q;
    unsigned int i;

    q = calloc(1, sizeof(*q));
    if (q != NULL)
        q->buf = malloc(sizeof(h) + len);
    if (q == NULL || q->buf == NULL || vm->fd < 0 || nfds > VCU_LINK_MAX_FDS) {
        for (i = 0; i < nfds; i++)
            close(fds[i]);
        if (q != NULL)
            free(q->buf);
        free(q);
        if (vm->fd >= 0)
            vcu__vm_close(vm, "out of memory");
        return;
    }
    memcpy(q->buf, &h, sizeof(h));
    if (len > 0)
        memcpy(q->buf + sizeof(h), body, len);
    q->len = sizeof(h) + len;
    for (i = 0; i < nfds; i++)
        q->fds[i] = fds[i];
    q->nfds = nfds;
    if (vm->txq_tail != NULL)
        vm->txq_tail->next = q;
    else
        vm->txq = q;
    vm->txq_tail = q;
    vcu_vm_output(vm);
}

/* ---- sessions ---------------------------------------------------------- */

static vcu_sess_t *vcu__vm_sess(vcu_vm_t *vm, uint64_t id)
{
    vcu_sess_t *s;

    for (s = vm->sessions; s != NULL; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

static uint32_t vcu__vm_live(const vcu_vm_t *vm)
{
    const vcu_sess_t *s;
    uint32_t n = 0;

    for (s = vm->sessions; s != NULL; s = s->next)
        if (!s->killed)
            n++;
    return n;
}

static void vcu__vm_kill_all(vcu_vm_t *vm)
{
    vcu_sess_t *s;

    for (s = vm->sessions; s != NULL; s = s->next)
        if (s->pid > 0) {
            kill(s->pid, SIGKILL);
            s->killed = true;
        }
    if (vm->probe_pid > 0)
        kill(vm->probe_pid, SIGKILL);
}

/* A descriptor that reads what fd names and cannot write it. */
static int vcu__vm_reopen_ro(int fd)
{
    char p[64];

    snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    return open(p, O_RDONLY | O_CLOEXEC);
}

/* The environment of a worker: its own, and what the operator gave the
 * daemon for its workers (library path, the backend's VCU_* tunables,
 * the sanitizers' options of a test build, the GPUs CUDA may see). */
static char **vcu__vm_env(void)
{
    static char *env[64];
    static const char *const pass[] = { "LD_LIBRARY_PATH=", "ASAN_OPTIONS=", "UBSAN_OPTIONS=",
                                        "LSAN_OPTIONS=", "CUDA_VISIBLE_DEVICES=",
                                        "CUDA_DEVICE_ORDER=", "VCU_" };
    extern char **environ;
    unsigned int n = 0, i;
    char **e;

    env[n++] = (char *)"HOME=/tmp";
    env[n++] = (char *)"TMPDIR=/tmp";
    env[n++] = (char *)"PATH=/usr/bin:/bin";
    for (e = environ; *e != NULL && n < 63; e++)
        for (i = 0; i < sizeof(pass) / sizeof(pass[0]); i++)
            if (strncmp(*e, pass[i], strlen(pass[i])) == 0) {
                env[n++] = *e;
                break;
            }
    env[n] = NULL;
    return env;
}

typedef struct {
    char *argv[48];
    unsigned int argc;
    char num[16][32];
    unsigned int nnum;
} vcu__argv_t;

static void vcu__arg(vcu__argv_t *a, const char *s)
{
    if (a->argc < 47)
        a->argv[a->argc++] = (char *)s;
    a->argv[a->argc] = NULL;
}

static void vcu__arg_u(vcu__argv_t *a, const char *opt, unsigned long long v)
{
    if (a->nnum >= 16)
        return;
    snprintf(a->num[a->nnum], sizeof(a->num[0]), "%llu", v);
    vcu__arg(a, opt);
    vcu__arg(a, a->num[a->nnum++]);
}

/* The options every worker of the VM gets, probe or not. */
static void vcu__vm_common_args(vcu_vm_t *vm, vcu__argv_t *a)
{
    vcu_dmn_t *d = vm->d;

    vcu__arg(a, d->worker);
    vcu__arg(a, "--fd");
    vcu__arg(a, "3");
    vcu__arg(a, "--gpus");
    vcu__arg(a, vm->gpus);
    if (d->libcuda != NULL) {
        vcu__arg(a, "--libcuda");
        vcu__arg(a, d->libcuda);
    }
    vcu__arg(a, "--seccomp");
    vcu__arg(a, d->seccomp == VCU_SECCOMP_ON ? "on" : d->seccomp == VCU_SECCOMP_LOG ? "log" : "off");
    vcu__arg_u(a, "--ctx-bytes", d->ctx_bytes);
    if (vm->sms != 0) {
        vcu__arg_u(a, "--sms", vm->sms);
        vcu__arg(a, "--mps-pipe");
        vcu__arg(a, d->mps_pipe);
    }
}

/* The jail of one of the VM's workers: the daemon's, plus what the VM's
 * settings need (its module cache, packed mode's MPS pipes). */
static void vcu__vm_jail(const vcu_vm_t *vm, vcu_jail_cfg_t *j)
{
    *j = vm->d->jail;
    if (vm->ipc_dir[0] != '\0')
        j->shm_dir = vm->ipc_dir;
    if (vm->modcache_dir[0] != '\0' && j->nrw < VCU_JAIL_MAX_PATHS)
        j->rw[j->nrw++] = vm->modcache_dir;
    if (vm->sms != 0) {
        if (j->nrw < VCU_JAIL_MAX_PATHS)
            j->rw[j->nrw++] = vm->d->mps_pipe;
        j->host_shm = 1;
    }
}

static void vcu__vm_spawned(vcu_vm_t *vm, uint64_t id, uint32_t status, uint32_t pid, int slot,
                            int pidfd)
{
    struct vcu_link_spawned r = { .status = status, .pid = pid, .acct_slot = slot };

    vcu__vm_send(vm, VCU_LINK_SPAWNED, id, &r, sizeof(r), pidfd >= 0 ? &pidfd : NULL,
                 pidfd >= 0 ? 1u : 0u);
}

/* The worker's command line: the shared options, then the session's
 * descriptors by their numbers in the worker and its account slot. */
static void vcu__vm_spawn_args(vcu_vm_t *vm, vcu__argv_t *a, int slot)
{
    memset(a, 0, sizeof(*a));
    vcu__vm_common_args(vm, a);
    vcu__arg(a, "--shm");
    vcu__arg(a, "4");
    vcu__arg(a, "--wake-req");
    vcu__arg(a, "5");
    vcu__arg(a, "--wake-resp");
    vcu__arg(a, "6");
    vcu__arg_u(a, "--spin-us", vm->hello.spin_us);
    if (vm->d->jail.enable)
        vcu__arg(a, "--jail-parent");   /* it runs at a pid of its own (ns_pid) */
    vcu__arg(a, "--account");
    vcu__arg(a, "7");
    vcu__arg_u(a, "--account-slot", (unsigned)slot);
    vcu__arg(a, "--policy");
    vcu__arg(a, "8");
    vcu__arg(a, "--capture-printf");
    vcu__arg(a, vm->flags & VCU_LINK_F_CAPTURE_PRINTF ? "1" : "0");
    if (vm->modcache_dir[0] != '\0') {
        vcu__arg(a, "--module-cache");
        vcu__arg(a, vm->modcache_dir);
        vcu__arg_u(a, "--module-cache-size", vm->d->modcache_bytes);
    }
    /* Packed mode's workers see the host's /dev/shm (MPS), not their
     * VM's folder: no IPC there. */
    if (vm->ipc_dir[0] != '\0' && vm->sms == 0) {
        vcu__arg(a, "--ipc-dir");
        vcu__arg(a, vm->d->jail.enable ? "/dev/shm" : vm->ipc_dir);
    }
}

/* The descriptors the worker gets, in order, into all; for a VM in the
 * share group the session's party and the group's area (9) too, and its
 * end of the keep socket when it has one.  Returns how many. */
static int vcu__vm_spawn_fds(vcu_vm_t *vm, vcu_sess_t *s, vcu__argv_t *a,
                             const int fds[VCU_LINK_SPAWN_FDS], int ro_pol, int keep_theirs,
                             int all[10])
{
    vcu_dmn_t *d = vm->d;
    int i, nall = 0;

    for (i = 0; i < (int)VCU_LINK_SPAWN_FDS; i++)
        all[nall++] = fds[i];
    all[nall++] = vm->acct->fd;
    all[nall++] = ro_pol;
    s->party = 0;
    if (vm->sched.vm_slot >= 0) {
        s->party = d->next_party++;
        if (d->next_party == 0)
            d->next_party = VCU_DMN_PARTY_BASE;
        vcu__arg(a, "--share");
        vcu__arg(a, "9");
        vcu__arg_u(a, "--share-vm", (unsigned)vm->sched.vm_slot);
        vcu__arg_u(a, "--share-party", s->party);
        all[nall++] = d->share_fd;
    }
    /* The keep (vcu_keep.h), with CUDA IPC: the VM's folder, not packed. */
    if (s->keep_fd >= 0) {
        vcu__arg_u(a, "--keep", (unsigned)(3 + nall));
        all[nall++] = keep_theirs;
    }
    return nall;
}

/* A worker started: its session joins the VM's list, its pid the account. */
static void vcu__vm_spawn_record(vcu_vm_t *vm, vcu_sess_t *s, uint64_t id, pid_t pid, int slot)
{
    s->id = id;
    s->pid = pid;
    s->pidfd = -1;
    s->acct_slot = slot;
    s->next = vm->sessions;
    vm->sessions = s;
    vm->nsessions++;
    vm->spawned++;
    vm->d->workers_started++;
    vcu__acct_set_pid(vm->acct, slot, (uint32_t)s->prog_pid);
}

/* May vm start a worker for session id?  Its account slot; -1 with
 * *status when refused; -2 when the SPAWN was wrong and the link is
 * closed for it. */
static int vcu__vm_spawn_admit(vcu_vm_t *vm, uint64_t id, uint32_t *status)
{
    int slot;

    if (vm->state != VCU_VM_READY) {
        *status = VCU_S_ENODEV;
        return -1;
    }
    if (id == 0 || vcu__vm_sess(vm, id) != NULL) {
        vcu__vm_close(vm, "SPAWN of a session id that is 0 or in use");
        return -2;
    }
    if (vcu__vm_live(vm) >= vm->policy->max_sessions ||
        (slot = vcu__acct_claim(vm->acct, id)) < 0) {
        *status = VCU_S_EBUSY;
        vm->refused++;
        return -1;
    }
    return slot;
}

/* Starts s's worker in its jail, with the link's descriptors and
 * keep_peer (the worker's end of the keep, or -1), both still the
 * caller's.  VCU_S_OK with *pid and *pidfd, or why not (logged). */
static uint32_t vcu__vm_spawn_start(vcu_vm_t *vm, vcu_sess_t *s, int slot,
                                    int fds[VCU_LINK_SPAWN_FDS], int keep_peer, pid_t *pid,
                                    int *pidfd)
{
    vcu_dmn_t *d = vm->d;
    vcu__argv_t a;
    vcu_jail_cfg_t j;
    char err[512];
    int all[10], nall, rc, ro_pol;

    /* The account and the policy: the account writable (the worker charges
     * its own slot), the policy read-only (the daemon alone sets it). */
    ro_pol = vcu__vm_reopen_ro(vm->policy_fd);
    if (ro_pol < 0)
        return VCU_S_ENOMEM;
    vcu__vm_spawn_args(vm, &a, slot);
    nall = vcu__vm_spawn_fds(vm, s, &a, fds, ro_pol, keep_peer, all);
    vcu__vm_jail(vm, &j);
    j.ns_pid = d->next_ns_pid;
    d->next_ns_pid = d->next_ns_pid >= VCU_DMN_NS_PID_LAST ? VCU_DMN_NS_PID_FIRST
                                                            : d->next_ns_pid + 1;
    rc = vcu_jail_spawn(&j, d->worker, a.argv, vcu__vm_env(), all, (unsigned int)nall,
                        STDERR_FILENO, pid, pidfd, err, sizeof(err));
    close(ro_pol);
    if (rc != 0) {
        vcu_dmn_log("vm %llu (%s): cannot start a worker: %s", (unsigned long long)vm->id,
                    vm->name, err);
        d->workers_failed++;
        vm->spawn_failed++;
        return VCU_S_EIO;
    }
    s->ns_pid = j.enable ? j.ns_pid : *pid;
    s->prog_pid = j.enable ? vcu_jail_program_pid(*pid) : *pid;
    return VCU_S_OK;
}

static void vcu__vm_spawn(vcu_vm_t *vm, uint64_t id, int fds[VCU_LINK_SPAWN_FDS])
{
    vcu_sess_t *s = NULL;
    int slot, pidfd = -1, i;
    int keep[2] = { -1, -1 };
    uint32_t status = VCU_S_ENOMEM;
    pid_t pid = -1;

    slot = vcu__vm_spawn_admit(vm, id, &status);
    if (slot == -2)
        goto close_fds;
    if (slot < 0)
        goto fail;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto fail;
    s->keep_fd = -1;
    if (vm->ipc_dir[0] != '\0' && vm->sms == 0) {
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, keep) != 0)
            goto fail;
        s->keep_fd = keep[0];
    }
    status = vcu__vm_spawn_start(vm, s, slot, fds, keep[1], &pid, &pidfd);
    if (keep[1] >= 0)
        close(keep[1]);
    keep[1] = -1;
    if (status != VCU_S_OK)
        goto fail;
    vcu__vm_spawn_record(vm, s, id, pid, slot);
    for (i = 0; i < (int)VCU_LINK_SPAWN_FDS; i++)
        close(fds[i]);
    vcu__vm_spawned(vm, id, VCU_S_OK, (uint32_t)s->prog_pid, slot, pidfd);
    return;

fail:
    for (i = 0; i < 2; i++)
        if (keep[i] >= 0)
            close(keep[i]);
    if (slot >= 0)
        vcu__acct_release(vm->acct, slot);
    free(s);
    vcu__vm_spawned(vm, id, status, 0, -1, -1);
close_fds:
    for (i = 0; i < (int)VCU_LINK_SPAWN_FDS; i++)
        close(fds[i]);
}

/* ---- the welcome --------------------------------------------------------- */

static void vcu__vm_welcome(vcu_vm_t *vm, uint32_t status, const char *error)
{
    struct vcu_link_welcome w;
    int fds[VCU_LINK_WELCOME_FDS] = { -1, -1 };

    memset(&w, 0, sizeof(w));
    w.version = VCU_LINK_VERSION;
    w.status = status;
    w.vm_id = vm->id;
    snprintf(w.error, sizeof(w.error), "%s", error != NULL ? error : "");
    snprintf(w.cuda_error, sizeof(w.cuda_error), "%.*s", (int)sizeof(w.cuda_error) - 1,
             vm->cuda_error);
    if (status == VCU_S_OK) {
        w.slice.mem_quota = atomic_load(&vm->policy->mem_quota);
        w.slice.max_sessions = atomic_load(&vm->policy->max_sessions);
        w.slice.compute_share = atomic_load(&vm->policy->compute_share);
        w.slice.compute_cap = atomic_load(&vm->policy->compute_cap);
        w.slice.sms = vm->sms;
        fds[0] = vcu__vm_reopen_ro(vm->acct->fd);
        fds[1] = vcu__vm_reopen_ro(vm->policy_fd);
        if (fds[0] < 0 || fds[1] < 0) {
            if (fds[0] >= 0)
                close(fds[0]);
            if (fds[1] >= 0)
                close(fds[1]);
            w.status = VCU_S_EIO;
            snprintf(w.error, sizeof(w.error), "cannot share the VM's account: %s",
                     strerror(errno));
        }
    }
    if (w.status == VCU_S_OK) {
        vm->state = VCU_VM_READY;
        vcu__vm_send(vm, VCU_LINK_WELCOME, 0, &w, sizeof(w), fds, VCU_LINK_WELCOME_FDS);
        vcu_dmn_log("vm %llu (%s, QEMU pid %d, uid %u): welcome; gpus %s, mem-quota %llu, "
                    "sessions %u, share %u, cap %u, sms %u%s%s",
                    (unsigned long long)vm->id, vm->name, (int)vm->peer_pid,
                    (unsigned)vm->peer_uid, vm->gpus, (unsigned long long)w.slice.mem_quota,
                    w.slice.max_sessions, w.slice.compute_share, w.slice.compute_cap, vm->sms,
                    vm->cuda_error[0] ? "; CUDA unavailable: " : "", vm->cuda_error);
        return;
    }
    vm->d->vms_refused++;
    vcu_dmn_log("vm %llu (%s): refused: %s", (unsigned long long)vm->id, vm->name, w.error);
    vcu__vm_send(vm, VCU_LINK_WELCOME, 0, &w, sizeof(w), NULL, 0);
    /* The answer goes out before the link closes: QEMU prints the reason. */
    vcu_vm_output(vm);
    vcu__vm_close(vm, NULL);
}

/* ---- the probe ------------------------------------------------------------ */

static void vcu__vm_probe_done(vcu_vm_t *vm, const char *cuda_error)
{
    char err[300];

    if (vm->probe_fd >= 0) {
        close(vm->probe_fd);
        vm->probe_fd = -1;
    }
    if (vm->probe_pid > 0)
        kill(vm->probe_pid, SIGKILL);
    if (vm->state != VCU_VM_PROBING)
        return;
    snprintf(vm->cuda_error, sizeof(vm->cuda_error), "%s", cuda_error);
    /* Packed mode is asked for by name: a VM that would not have it must
     * not start as if it had the GPU. */
    if (vm->sms != 0 && vm->cuda_error[0] != '\0') {
        snprintf(err, sizeof(err), "packed mode (sms=%u): %s", vm->sms, vm->cuda_error);
        vcu__vm_welcome(vm, VCU_S_ENODEV, err);
        return;
    }
    vcu__vm_welcome(vm, VCU_S_OK, NULL);
}

void vcu_vm_probe_input(vcu_vm_t *vm)
{
    struct vcu_ipc_hdr h;
    struct vcu_ipc_hello hello;
    ssize_t n;

    n = recv(vm->probe_fd, vm->probe_buf + vm->probe_have,
             sizeof(vm->probe_buf) - vm->probe_have, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        vcu__vm_probe_done(vm, "the worker ended before it said whether CUDA works (see the "
                               "daemon's log)");
        return;
    }
    vm->probe_have += (size_t)n;
    if (vm->probe_have < sizeof(h) + sizeof(hello))
        return;
    memcpy(&h, vm->probe_buf, sizeof(h));
    memcpy(&hello, vm->probe_buf + sizeof(h), sizeof(hello));
    if (h.type != VCU_IPC_HELLO || h.len != sizeof(hello) || hello.version != VCU_IPC_VERSION) {
        vcu__vm_probe_done(vm, "the worker's hello is malformed");
        return;
    }
    hello.cuda_error[sizeof(hello.cuda_error) - 1] = '\0';
    vcu__vm_probe_done(vm, hello.cuda_error);
}

static void vcu__vm_probe(vcu_vm_t *vm)
{
    vcu__argv_t a;
    vcu_jail_cfg_t j;
    char err[512];
    int sv[2], rc;

    vm->state = VCU_VM_PROBING;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        vcu__vm_probe_done(vm, "cannot make the probe's socket");
        return;
    }
    memset(&a, 0, sizeof(a));
    vcu__vm_common_args(vm, &a);
    vcu__arg(&a, "--probe");
    vcu__vm_jail(vm, &j);
    rc = vcu_jail_spawn(&j, vm->d->worker, a.argv, vcu__vm_env(), &sv[1], 1, STDERR_FILENO,
                        &vm->probe_pid, &vm->probe_pidfd, err, sizeof(err));
    close(sv[1]);
    if (rc != 0) {
        char msg[600];

        close(sv[0]);
        vm->probe_pid = -1;
        snprintf(msg, sizeof(msg), "cannot start a worker: %s", err);
        vcu_dmn_log("vm %llu (%s): %s", (unsigned long long)vm->id, vm->name, msg);
        vcu__vm_probe_done(vm, msg);
        return;
    }
    close(vm->probe_pidfd);
    vm->probe_pidfd = -1;
    vm->probe_fd = sv[0];
    vm->probe_have = 0;
    vm->probe_deadline_ns = vcu_dmn_now() + (uint64_t)VCU_DMN_PROBE_MS * 1000000u;
}

/* ---- HELLO ----------------------------------------------------------------- */

static bool vcu__vm_name_ok(const char *s, size_t cap, bool gpus)
{
    size_t i;

    for (i = 0; i < cap && s[i] != '\0'; i++) {
        char c = s[i];

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || (gpus ? (c == ':' || c == ',') : (c == '.' || c == '_')))
            continue;
        return false;
    }
    return i < cap;                 /* NUL-terminated within the field */
}

/* Whether every GPU of list (':' or ',' separated) is in allowed. */
static bool vcu__vm_gpus_allowed(const char *list, const char *allowed)
{
    char item[256];
    const char *p = list;

    if (allowed == NULL)
        return true;
    while (*p != '\0') {
        size_t n = strcspn(p, ":,"), an;
        const char *q = allowed;
        bool found = false;

        if (n == 0 || n >= sizeof(item))
            return false;
        memcpy(item, p, n);
        item[n] = '\0';
        while (*q != '\0') {
            an = strcspn(q, ":,");
            if (an == n && memcmp(q, item, n) == 0)
                found = true;
            q += an;
            if (*q != '\0')
                q++;
        }
        if (!found)
            return false;
        p += n;
        if (*p != '\0')
            p++;
    }
    return true;
}

static int vcu__vm_policy_new(vcu_vm_t *vm)
{
    vm->policy_fd = (int)syscall(SYS_memfd_create, "vcu-policy", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (vm->policy_fd < 0 || ftruncate(vm->policy_fd, 4096) != 0)
        return -1;
    vm->policy = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, vm->policy_fd, 0);
    if (vm->policy == MAP_FAILED) {
        vm->policy = NULL;
        return -1;
    }
    /* Nobody grows or shrinks it under a reader's mapping. */
    (void)fcntl(vm->policy_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
    vm->policy->magic = VCU_POLICY_MAGIC;
    return 0;
}

/* The VM's module cache folder: the daemon's shared one, one of its own
 * (by name) or none.  Made and checked here (the workers' user owns it). */
static int vcu__vm_modcache(vcu_vm_t *vm, char *err, size_t errlen)
{
    vcu_dmn_t *d = vm->d;
    struct stat st;

    vm->modcache_dir[0] = '\0';
    if (d->cache_dir == NULL || (vm->flags & VCU_LINK_F_NO_MODCACHE))
        return 0;
    if (!(vm->flags & VCU_LINK_F_PRIVATE_MODCACHE)) {
        snprintf(vm->modcache_dir, sizeof(vm->modcache_dir), "%s/modules", d->cache_dir);
        return 0;
    }
    snprintf(vm->modcache_dir, sizeof(vm->modcache_dir), "%s/vm-%s", d->cache_dir, vm->name);
    if (mkdir(vm->modcache_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "module cache %.150s: %s", vm->modcache_dir, strerror(errno));
        return -1;
    }
    if (lstat(vm->modcache_dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        (st.st_mode & 0077) != 0) {
        snprintf(err, errlen, "module cache %.150s: not a private folder", vm->modcache_dir);
        return -1;
    }
    if (d->jail.uid != (uid_t)-1 && st.st_uid != d->jail.uid &&
        chown(vm->modcache_dir, d->jail.uid, d->jail.gid) != 0) {
        snprintf(err, errlen, "module cache %.150s: chown: %s", vm->modcache_dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* Whether name is one of worker pid's IPC files: "vcu-ipc.PID." (its
 * handles' records, cuda_ipc.c) or the driver's "cuda.shm.X.PID.N" (an
 * interprocess event's memory, which the driver leaves behind when its
 * process ends), PID in hex. */
static bool vcu__vm_ipc_file_of(const char *name, pid_t pid)
{
    char want[32];
    unsigned int x, p, n;
    int end = 0;

    snprintf(want, sizeof(want), "vcu-ipc.%x.", (unsigned int)pid);
    if (strncmp(name, want, strlen(want)) == 0)
        return true;
    return sscanf(name, "cuda.shm.%x.%x.%x%n", &x, &p, &n, &end) == 3 && name[end] == '\0' &&
           p == (unsigned int)pid;
}

/* Removes from the VM's IPC folder the files of worker pid, or (pid -1)
 * every file and the folder itself. */
static void vcu__vm_ipc_clean(vcu_vm_t *vm, pid_t pid)
{
    struct dirent *e;
    DIR *dir;
    int dfd;

    if (vm->ipc_dir[0] == '\0')
        return;
    dir = opendir(vm->ipc_dir);
    if (dir != NULL) {
        dfd = dirfd(dir);
        while ((e = readdir(dir)) != NULL)
            if (e->d_name[0] != '.' && (pid < 0 || vcu__vm_ipc_file_of(e->d_name, pid)))
                unlinkat(dfd, e->d_name, 0);
        closedir(dir);
    }
    if (pid < 0) {
        rmdir(vm->ipc_dir);
        vm->ipc_dir[0] = '\0';
    }
}

/* The VM's IPC folder (vcu_vm_t.ipc_dir), made empty, its workers' own. */
static int vcu__vm_ipc_dir(vcu_vm_t *vm, char *err, size_t errlen)
{
    vcu_dmn_t *d = vm->d;
    char dir[sizeof(vm->ipc_dir)];

    snprintf(dir, sizeof(dir), "%s/vm-%llu", d->ipc_root, (unsigned long long)vm->id);
    memcpy(vm->ipc_dir, dir, sizeof(dir));
    vcu__vm_ipc_clean(vm, -1);          /* a former daemon's of the same pid */
    memcpy(vm->ipc_dir, dir, sizeof(dir));
    if (mkdir(vm->ipc_dir, 0700) != 0 ||
        (d->jail.uid != (uid_t)-1 && chown(vm->ipc_dir, d->jail.uid, d->jail.gid) != 0)) {
        snprintf(err, errlen, "IPC folder %.150s: %s", vm->ipc_dir, strerror(errno));
        vm->ipc_dir[0] = '\0';
        return -1;
    }
    return 0;
}

/* What the daemon refuses in a HELLO: the first bad field's reason into
 * err, which stays empty when all is well. */
static void vcu__vm_hello_check(const vcu_vm_t *vm, const struct vcu_link_hello *h, char *err,
                                size_t errlen)
{
    const vcu_dmn_t *d = vm->d;

    if (h->flags & ~VCU_LINK_F_ALL)
        snprintf(err, errlen, "unknown flags 0x%x", h->flags & ~VCU_LINK_F_ALL);
    else if (!vcu__vm_gpus_allowed(vm->gpus, d->allowed_gpus))
        snprintf(err, errlen, "GPUs %.100s: this daemon gives only %.100s", vm->gpus,
                 d->allowed_gpus);
    else if (h->compute_share > VCU_SCHED_WEIGHT_MAX)
        snprintf(err, errlen, "compute-share must be 1..%u", VCU_SCHED_WEIGHT_MAX);
    else if (h->compute_cap > 100)
        snprintf(err, errlen, "compute-cap must be a percentage, 1..100");
    else if (h->sms > VCU__VM_PROXY_MAX_SMS)
        snprintf(err, errlen, "sms must be 1..%u (0: isolated mode)", VCU__VM_PROXY_MAX_SMS);
    else if (h->sms != 0 && (h->compute_share != 0 || h->compute_cap != 0))
        snprintf(err, errlen, "sms (packed mode) does not go with compute-share or "
                              "compute-cap: a packed VM's share is its SMs");
    else if (h->sms != 0 && d->mps_pipe == NULL)
        snprintf(err, errlen, "packed mode (sms=%u): this daemon has no MPS pipe folder "
                              "(--mps-pipe)", h->sms);
    else if (h->max_sessions > VCU_DMN_MAX_SESSIONS_CAP)
        snprintf(err, errlen, "at most %u sessions", VCU_DMN_MAX_SESSIONS_CAP);
    else if (h->ring_bytes < VCU_IPC_REQ_RING_MIN || h->ring_bytes > VCU_IPC_REQ_RING_MAX ||
             (h->ring_bytes & (h->ring_bytes - 1)) != 0)
        snprintf(err, errlen, "bad request ring size %u", h->ring_bytes);
    else if (h->spin_us > 10000000)
        snprintf(err, errlen, "spin of %u us: at most 10 s", h->spin_us);
    else if (d->nvms > d->max_vms)
        snprintf(err, errlen, "this daemon serves at most %u VMs", d->max_vms);
}

/* A VM with a compute share or cap joins the share group.  0, or -1 with
 * the reason in err when the group is full. */
static int vcu__vm_hello_share(vcu_vm_t *vm, const struct vcu_link_hello *h, char *err,
                               size_t errlen)
{
    if (h->compute_share != 0 || (h->compute_cap != 0 && h->compute_cap != 100)) {
        uint32_t w = h->compute_share != 0 ? h->compute_share : 100;

        vcu__sched_view(&vm->sched, vm->d->share_map, (uint32_t)getpid());
        if (vcu__sched_vm_claim(&vm->sched, w, atomic_load(&vm->policy->compute_cap),
                                vcu__sched_now()) != 0) {
            vm->sched.vm_slot = -1;
            snprintf(err, errlen, "the share group is full (%u VMs at most)", VCU_SCHED_VMS);
            return -1;
        }
        atomic_store(&vm->policy->compute_share, w);
    }
    return 0;
}

static void vcu__vm_hello(vcu_vm_t *vm, const unsigned char *body)
{
    vcu_dmn_t *d = vm->d;
    struct vcu_link_hello *h = &vm->hello;
    uint64_t quota;
    uint32_t maxs;
    char err[240];

    memcpy(h, body, sizeof(*h));
    err[0] = '\0';
    if (h->version != VCU_LINK_VERSION) {
        snprintf(err, sizeof(err), "link version %u, the daemon speaks %u", h->version,
                 VCU_LINK_VERSION);
        vcu__vm_welcome(vm, VCU_S_EVERSION, err);
        return;
    }
    if (!vcu__vm_name_ok(h->name, sizeof(h->name), false) ||
        !vcu__vm_name_ok(h->gpus, sizeof(h->gpus), true)) {
        vcu__vm_welcome(vm, VCU_S_EINVAL, "the VM's name must be [A-Za-z0-9._-] and its GPU "
                                          "list [A-Za-z0-9:,-], NUL-terminated");
        return;
    }
    if (h->name[0] != '\0')
        snprintf(vm->name, sizeof(vm->name), "%s", h->name);
    else
        snprintf(vm->name, sizeof(vm->name), "vm%llu", (unsigned long long)vm->id);
    snprintf(vm->gpus, sizeof(vm->gpus), "%s", h->gpus[0] != '\0' ? h->gpus : "0");
    vm->flags = h->flags;
    vcu__vm_hello_check(vm, h, err, sizeof(err));
    if (err[0] != '\0') {
        vcu__vm_welcome(vm, VCU_S_EINVAL, err);
        return;
    }
    vm->sms = h->sms;
    /* What the daemon gives: its bounds over what the VM asked for. */
    quota = h->mem_quota != 0 ? h->mem_quota : d->default_quota;
    if (d->max_quota != 0 && (quota == 0 || quota > d->max_quota))
        quota = d->max_quota;
    maxs = h->max_sessions != 0 ? h->max_sessions : d->max_sessions;
    if (maxs > d->max_sessions)
        maxs = d->max_sessions;
    if (vcu__vm_policy_new(vm) != 0 ||
        vcu__acct_new(quota, maxs * 2, &vm->acct) != 0) {
        vcu__vm_welcome(vm, VCU_S_ENOMEM, "cannot make the VM's account");
        return;
    }
    vcu__acct_set_policy(vm->acct, vm->policy);
    atomic_store(&vm->policy->mem_quota, quota);
    atomic_store(&vm->policy->host_quota, d->host_quota);
    atomic_store(&vm->policy->max_sessions, maxs);
    atomic_store(&vm->policy->compute_share, h->compute_share);
    atomic_store(&vm->policy->compute_cap, h->compute_cap == 100 ? 0 : h->compute_cap);
    atomic_fetch_add(&vm->policy->gen, 1);
    if (vcu__vm_hello_share(vm, h, err, sizeof(err)) != 0) {
        vcu__vm_welcome(vm, VCU_S_EBUSY, err);
        return;
    }
    if (vcu__vm_modcache(vm, err, sizeof(err)) != 0 || vcu__vm_ipc_dir(vm, err, sizeof(err)) != 0) {
        vcu__vm_welcome(vm, VCU_S_EIO, err);
        return;
    }
    vcu__vm_probe(vm);
}

/* ---- the link ------------------------------------------------------------ */

/* Takes n received descriptors, oldest first; false if fewer came. */
static bool vcu__vm_take_fds(vcu_vm_t *vm, int *out, unsigned int n)
{
    if (vm->nrfds < n)
        return false;
    memcpy(out, vm->rfds, n * sizeof(int));
    memmove(vm->rfds, vm->rfds + n, (vm->nrfds - n) * sizeof(int));
    vm->nrfds -= n;
    return true;
}

/* One whole frame.  false: the link is to close (done here). */
static bool vcu__vm_frame(vcu_vm_t *vm, const struct vcu_link_hdr *h, const unsigned char *body)
{
    int fds[VCU_LINK_SPAWN_FDS];
    vcu_sess_t *s;

    switch (h->type) {
    case VCU_LINK_HELLO:
        if (vm->state != VCU_VM_HELLO || h->len != sizeof(struct vcu_link_hello) || h->id != 0)
            break;
        vcu__vm_hello(vm, body);
        return vm->fd >= 0;
    case VCU_LINK_SPAWN:
        if (vm->state == VCU_VM_HELLO || h->len != 0)
            break;
        if (!vcu__vm_take_fds(vm, fds, VCU_LINK_SPAWN_FDS)) {
            vcu__vm_close(vm, "SPAWN without its 4 descriptors");
            return false;
        }
        vcu__vm_spawn(vm, h->id, fds);
        return vm->fd >= 0;
    case VCU_LINK_KILL:
        if (h->len != 0)
            break;
        s = vcu__vm_sess(vm, h->id);
        if (s != NULL && s->pid > 0) {
            kill(s->pid, SIGKILL);
            s->killed = true;
        }
        return true;
    default:
        break;
    }
    vcu__vm_close(vm, "a frame of the wrong type, state or size");
    return false;
}

void vcu_vm_input(vcu_vm_t *vm)
{
    int mflags;
    ssize_t n;

    n = vcu__fd_recv(vm->fd, vm->rbuf + vm->rhave, sizeof(vm->rbuf) - vm->rhave, MSG_DONTWAIT,
                     vm->rfds, &vm->nrfds, sizeof(vm->rfds) / sizeof(vm->rfds[0]), &mflags);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        vcu__vm_close(vm, n == 0 ? NULL : "the link failed");
        return;
    }
    if (mflags & MSG_CTRUNC) {
        vcu__vm_close(vm, "descriptors were lost (too many in one message, or unclaimed)");
        return;
    }
    vm->rhave += (size_t)n;
    while (vm->fd >= 0 && vm->rhave >= sizeof(struct vcu_link_hdr)) {
        struct vcu_link_hdr h;
        size_t flen;

        memcpy(&h, vm->rbuf, sizeof(h));
        if (h.len > VCU_LINK_MAX_BODY) {
            vcu__vm_close(vm, "an oversized frame");
            return;
        }
        flen = sizeof(h) + h.len;
        if (vm->rhave < flen)
            break;
        if (!vcu__vm_frame(vm, &h, vm->rbuf + sizeof(h)))
            return;
        memmove(vm->rbuf, vm->rbuf + flen, vm->rhave - flen);
        vm->rhave -= flen;
    }
}

/* The link is gone (why: for the log; NULL for an ordinary end): every
 * worker of the VM is killed, the VM goes once they are reaped. */
static void vcu__vm_close(vcu_vm_t *vm, const char *why)
{
    vcu_txq_t *q;

    if (vm->fd < 0)
        return;
    if (why != NULL)
        vcu_dmn_log("vm %llu (%s): link closed: %s", (unsigned long long)vm->id,
                    vm->name[0] ? vm->name : "?", why);
    else
        vcu_dmn_log("vm %llu (%s): link closed", (unsigned long long)vm->id,
                    vm->name[0] ? vm->name : "?");
    close(vm->fd);
    vm->fd = -1;
    while (vm->nrfds > 0)
        close(vm->rfds[--vm->nrfds]);
    while ((q = vm->txq) != NULL) {
        vm->txq = q->next;
        vcu__txq_free(q);
    }
    vm->txq_tail = NULL;
    if (vm->probe_fd >= 0) {
        close(vm->probe_fd);
        vm->probe_fd = -1;
    }
    vm->state = VCU_VM_GONE;
    vcu__vm_kill_all(vm);
}

void vcu_vm_accept(vcu_dmn_t *d)
{
    struct ucred cr;
    socklen_t crl = sizeof(cr);
    vcu_vm_t *vm;
    int fd;

    fd = accept4(d->vm_listen, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    vm = calloc(1, sizeof(*vm));
    if (vm == NULL) {
        close(fd);
        return;
    }
    vm->d = d;
    vm->fd = fd;
    vm->id = ++d->next_vm_id;
    vm->state = VCU_VM_HELLO;
    vm->policy_fd = -1;
    vm->probe_fd = -1;
    vm->probe_pid = -1;
    vm->probe_pidfd = -1;
    vm->sched.vm_slot = -1;
    vm->connected_ns = vcu_dmn_now();
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0) {
        vm->peer_uid = cr.uid;
        vm->peer_pid = cr.pid;
    }
    vm->next = d->vms;
    d->vms = vm;
    d->nvms++;
}

/* ---- workers' ends ------------------------------------------------------- */

void vcu_vm_reaped(vcu_dmn_t *d, pid_t pid, int status)
{
    vcu_vm_t *vm;

    for (vm = d->vms; vm != NULL; vm = vm->next) {
        vcu_sess_t **pp, *s;

        if (vm->probe_pid == pid) {
            vm->probe_pid = -1;
            if (vm->state == VCU_VM_PROBING && vm->probe_fd >= 0) {
                /* Anything it said before it went still counts. */
                vcu_vm_probe_input(vm);
                if (vm->state == VCU_VM_PROBING)
                    vcu__vm_probe_done(vm, "the worker ended before it said whether CUDA "
                                           "works (see the daemon's log)");
            }
            return;
        }
        for (pp = &vm->sessions; (s = *pp) != NULL; pp = &s->next) {
            if (s->pid != pid)
                continue;
            if (!s->killed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                vcu_dmn_log("vm %llu (%s): worker %d of session %llx ended (%s %d)",
                            (unsigned long long)vm->id, vm->name, (int)pid,
                            (unsigned long long)s->id,
                            WIFSIGNALED(status) ? "signal" : "status",
                            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            /* The process is gone, and with it every byte the driver held
             * for it: its charges come back, its IPC files go. */
            vcu__acct_release(vm->acct, s->acct_slot);
            vcu__vm_ipc_clean(vm, s->ns_pid);
            vcu_keep_drop(vm, s);
            if (s->party != 0)
                vcu__sched_party_gone(&d->share, s->party, vcu__sched_now());
            *pp = s->next;
            vm->nsessions--;
            free(s);
            return;
        }
    }
}

/* The daemon ends: every VM's IPC folder goes, and the folder of them. */
void vcu_vm_ipc_remove_all(vcu_dmn_t *d)
{
    vcu_vm_t *vm;

    for (vm = d->vms; vm != NULL; vm = vm->next)
        vcu__vm_ipc_clean(vm, -1);
    rmdir(d->ipc_root);
}

/* Frees the VMs whose link is closed and whose workers are all gone. */
void vcu_vm_free_gone(vcu_dmn_t *d)
{
    vcu_vm_t **pp = &d->vms, *vm;

    while ((vm = *pp) != NULL) {
        if (vm->state != VCU_VM_GONE || vm->sessions != NULL || vm->probe_pid > 0) {
            pp = &vm->next;
            continue;
        }
        *pp = vm->next;
        d->nvms--;
        if (vm->sched.vm_slot >= 0)
            vcu__sched_vm_release(&vm->sched, vcu__sched_now());
        vcu__acct_put(vm->acct);
        vcu__vm_ipc_clean(vm, -1);
        vcu_keep_drop(vm, NULL);
        if (vm->policy != NULL)
            munmap(vm->policy, 4096);
        if (vm->policy_fd >= 0)
            close(vm->policy_fd);
        if (vm->probe_pidfd >= 0)
            close(vm->probe_pidfd);
        free(vm);
    }
}

/* Probes past their time. */
void vcu_vm_tick(vcu_dmn_t *d, uint64_t now)
{
    vcu_vm_t *vm;

    for (vm = d->vms; vm != NULL; vm = vm->next)
        if (vm->state == VCU_VM_PROBING && vm->probe_fd >= 0 && now > vm->probe_deadline_ns)
            vcu__vm_probe_done(vm, "the worker did not say within 60 s whether CUDA works");
}

/* ---- the operator's view ----------------------------------------------- */

vcu_vm_t *vcu_vm_find(vcu_dmn_t *d, const char *key)
{
    vcu_vm_t *vm, *found = NULL;
    char *end;
    unsigned long long id = strtoull(key, &end, 10);

    for (vm = d->vms; vm != NULL; vm = vm->next) {
        if (vm->state != VCU_VM_READY)
            continue;
        if ((*end == '\0' && key[0] != '\0' && vm->id == id) || strcmp(vm->name, key) == 0) {
            if (found != NULL)
                return NULL;        /* ambiguous: two VMs of that name */
            found = vm;
        }
    }
    return found;
}

int vcu_vm_set_slice(vcu_vm_t *vm, const uint64_t *mem_quota, const uint32_t *share,
                     const uint32_t *cap, char *err, size_t errlen)
{
    vcu_dmn_t *d = vm->d;
    struct vcu_link_slice sl;

    if (mem_quota != NULL && d->max_quota != 0 && (*mem_quota == 0 || *mem_quota > d->max_quota)) {
        snprintf(err, errlen, "mem-quota above this daemon's bound (%llu)",
                 (unsigned long long)d->max_quota);
        return -1;
    }
    if (share != NULL && (*share == 0 || *share > VCU_SCHED_WEIGHT_MAX)) {
        snprintf(err, errlen, "compute-share must be 1..%u", VCU_SCHED_WEIGHT_MAX);
        return -1;
    }
    if (cap != NULL && *cap > 100) {
        snprintf(err, errlen, "compute-cap must be 0..100");
        return -1;
    }
    if ((share != NULL || cap != NULL) && vm->sched.vm_slot < 0) {
        snprintf(err, errlen, "the VM is not in the share group (start it with compute-share "
                              "or compute-cap)");
        return -1;
    }
    if (mem_quota != NULL) {
        atomic_store(&vm->policy->mem_quota, *mem_quota);
        vm->acct->quota = *mem_quota;
    }
    if (share != NULL) {
        atomic_store(&vm->policy->compute_share, *share);
        atomic_store(&vm->sched.vm[vm->sched.vm_slot].weight, *share);
    }
    if (cap != NULL) {
        uint32_t c = *cap == 100 ? 0 : *cap;

        atomic_store(&vm->policy->compute_cap, c);
        atomic_store(&vm->sched.vm[vm->sched.vm_slot].cap, c);
    }
    atomic_fetch_add(&vm->policy->gen, 1);
    memset(&sl, 0, sizeof(sl));
    sl.mem_quota = atomic_load(&vm->policy->mem_quota);
    sl.max_sessions = atomic_load(&vm->policy->max_sessions);
    sl.compute_share = atomic_load(&vm->policy->compute_share);
    sl.compute_cap = atomic_load(&vm->policy->compute_cap);
    sl.sms = vm->sms;
    vcu__vm_send(vm, VCU_LINK_SLICE, 0, &sl, sizeof(sl), NULL, 0);
    vcu_dmn_log("vm %llu (%s): slice now mem-quota %llu, share %u, cap %u",
                (unsigned long long)vm->id, vm->name, (unsigned long long)sl.mem_quota,
                sl.compute_share, sl.compute_cap);
    return 0;
}

uint64_t vcu_vm_gpu_ns(const vcu_vm_t *vm)
{
    if (vm->sched.vm_slot < 0)
        return 0;
    return atomic_load(&vm->sched.vm[vm->sched.vm_slot].used_ns);
}
