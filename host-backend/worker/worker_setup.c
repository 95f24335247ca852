/*
 * vcu-worker's start (see worker.c): its command line, the VM's memory
 * account and compute-share group it joins, and the lock-down before it
 * reads anything a guest sent.  Nothing here is on the request path.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vcu_account.h"
#include "vcu_sched.h"
#include "vcu_seccomp.h"
#include "vcu_worker.h"

/* The VM's memory account, for the backend to charge this session's GPU
 * memory to (vcu_account.h), and the VM's policy page (read-only: the
 * daemon's word), whose quota is enforced. */
void vcu__map_account(vcu_backend_config_t *cfg, int fd, const char *slot, int pfd)
{
    const struct vcu_policy *pol;
    vcu_account_t *a;
    struct stat st;
    char *end;
    long n;

    if (fd < 0)
        return;
    if (slot == NULL || pfd < 0)
        vcu__die("--account needs --account-slot and --policy");
    n = strtol(slot, &end, 10);
    if (*end != '\0' || n < 0 || n > INT_MAX)
        vcu__die("bad --account-slot");
    if (fstat(pfd, &st) != 0 || st.st_size < (off_t)sizeof(struct vcu_policy))
        vcu__die("bad --policy");
    pol = mmap(NULL, sizeof(*pol), PROT_READ, MAP_SHARED, pfd, 0);
    close(pfd);
    if (pol == MAP_FAILED || pol->magic != VCU_POLICY_MAGIC)
        vcu__die("cannot map the VM's policy");
    if (vcu__acct_map(fd, 0, &a) != 0 || (uint32_t)n >= a->nslots)
        vcu__die("cannot map the memory account");
    vcu__acct_set_policy(a, pol);
    cfg->account = a;
    cfg->account_slot = (int)n;
}

/* The compute-share group, this worker's slot in it (vcu_sched.h).  The
 * VM slot is the daemon's (it claimed it for the VM); the cap is read
 * from the VM's policy page as it is now. */
void vcu__map_share(vcu_backend_config_t *cfg, int fd, const char *vm, const char *party)
{
    vcu_sched_t *sc;
    char err[256], *end;
    unsigned long v, p;

    if (fd < 0)
        return;
    if (vm == NULL || party == NULL)
        vcu__die("--share needs --share-vm and --share-party");
    v = strtoul(vm, &end, 10);
    if (*end != '\0' || vm[0] == '-' || v >= VCU_SCHED_VMS)
        vcu__die("bad --share-vm");
    p = strtoul(party, &end, 10);
    if (*end != '\0' || party[0] == '-' || p == 0 || p > UINT32_MAX)
        vcu__die("bad --share-party");
    if (vcu__sched_map_fd(fd, (uint32_t)p, &sc, err, sizeof(err)) != 0)
        vcu__die(err);
    if (vcu__sched_attach(sc, (uint32_t)v, 0, 0) != 0)
        vcu__die("cannot join the share group");
    if (cfg->account != NULL && cfg->account->policy != NULL)
        sc->cap_src = &cfg->account->policy->compute_cap;
    cfg->sched = sc;
}

void vcu__usage(void)
{
    fprintf(stderr, "usage: vcu-worker --fd N [--shm FD --wake-req FD --wake-resp FD] "
                    "[--spin-us N]\n"
                    "                  [--account FD --account-slot N --policy FD]\n"
                    "                  [--gpus LIST] [--libcuda PATH] "
                    "[--capture-printf 0|1]\n"
                    "                  [--module-cache DIR --module-cache-size BYTES]\n"
                    "                  [--share FD --share-vm N --share-party ID]\n"
                    "                  [--sms N --mps-pipe DIR] [--seccomp on|log|off] "
                    "[--probe]\n"
                    "                  [--ctx-bytes N] [--ipc-dir DIR] [--keep FD] [--jail-parent]\n"
                    "Started by vcu-daemon, one per guest session, in a jail.\n");
    exit(2);
}

/* A descriptor number argument. */
static int vcu__fd_arg(const char *v)
{
    char *end;
    long n = strtol(v, &end, 10);

    if (*end != '\0' || n < 0 || n > INT_MAX)
        vcu__usage();
    return (int)n;
}

/* The options that name a descriptor (or, --spin-us, a count); false if
 * a is none of them. */
static bool vcu__opt_fd(vcu__opts_t *o, const char *a, const char *v)
{
    if (strcmp(a, "--fd") == 0)
        o->fd = vcu__fd_arg(v);
    else if (strcmp(a, "--shm") == 0)
        o->shm_fd = vcu__fd_arg(v);
    else if (strcmp(a, "--wake-req") == 0)
        o->wake_req = vcu__fd_arg(v);
    else if (strcmp(a, "--wake-resp") == 0)
        o->wake_resp = vcu__fd_arg(v);
    else if (strcmp(a, "--account") == 0)
        o->acct_fd = vcu__fd_arg(v);
    else if (strcmp(a, "--policy") == 0)
        o->policy_fd = vcu__fd_arg(v);
    else if (strcmp(a, "--share") == 0)
        o->share_fd = vcu__fd_arg(v);
    else if (strcmp(a, "--keep") == 0)
        o->keep_fd = vcu__fd_arg(v);
    else if (strcmp(a, "--spin-us") == 0)
        o->spin_ns = (uint64_t)vcu__fd_arg(v) * 1000u;
    else
        return false;
    return true;
}

/* The options taken as they are written; false if a is none of them. */
static bool vcu__opt_str(vcu_backend_config_t *cfg, vcu__opts_t *o, const char *a, const char *v)
{
    if (strcmp(a, "--gpus") == 0)
        cfg->gpus = v;
    else if (strcmp(a, "--libcuda") == 0)
        cfg->libcuda = v;
    else if (strcmp(a, "--capture-printf") == 0)
        cfg->capture_printf = strcmp(v, "0") != 0;
    else if (strcmp(a, "--account-slot") == 0)
        o->aslot = v;
    else if (strcmp(a, "--share-vm") == 0)
        o->share_vm = v;
    else if (strcmp(a, "--share-party") == 0)
        o->share_party = v;
    else if (strcmp(a, "--mps-pipe") == 0)
        o->mps_pipe = v;
    else if (strcmp(a, "--module-cache") == 0)
        cfg->module_cache = v;
    else if (strcmp(a, "--ipc-dir") == 0)
        cfg->ipc_dir = v;
    else
        return false;
    return true;
}

/* The options with a value to check; false if a is none of them. */
static bool vcu__opt_num(vcu_backend_config_t *cfg, vcu__opts_t *o, const char *a, const char *v)
{
    char *end;

    if (strcmp(a, "--seccomp") == 0) {
        o->seccomp = strcmp(v, "on") == 0    ? VCU_SECCOMP_ON
                     : strcmp(v, "log") == 0 ? VCU_SECCOMP_LOG
                     : strcmp(v, "off") == 0 ? VCU_SECCOMP_OFF
                                             : (vcu__usage(), 0);
    } else if (strcmp(a, "--sms") == 0) {
        unsigned long n = strtoul(v, &end, 10);

        if (*end != '\0' || v[0] == '-' || n == 0 || n > 1u << 20)
            vcu__usage();
        cfg->sms = (uint32_t)n;
    } else if (strcmp(a, "--ctx-bytes") == 0) {
        errno = 0;
        cfg->ctx_bytes = strtoull(v, &end, 10);
        if (*end != '\0' || v[0] == '-' || errno != 0 || cfg->ctx_bytes == 0)
            vcu__usage();
    } else if (strcmp(a, "--module-cache-size") == 0) {
        cfg->module_cache_bytes = strtoull(v, &end, 10);
        if (*end != '\0' || v[0] == '-')
            vcu__usage();
    } else {
        return false;
    }
    return true;
}

/* vcu_worker.h */
void vcu__parse_args(int argc, char **argv, vcu_backend_config_t *cfg, vcu__opts_t *o)
{
    int i;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(a, "--probe") == 0) {
            o->probe = true;
            continue;
        }
        if (strcmp(a, "--jail-parent") == 0) {
            o->jail_parent = true;
            continue;
        }
        if (v == NULL)
            vcu__usage();
        if (!vcu__opt_fd(o, a, v) && !vcu__opt_str(cfg, o, a, v) && !vcu__opt_num(cfg, o, a, v))
            vcu__usage();
        i++;
    }
    if (o->fd < 0 || (!o->probe && (o->shm_fd < 0 || o->wake_req < 0 || o->wake_resp < 0)))
        vcu__usage();
}

/* vcu_worker.h */
bool vcu__lock_down(int seccomp, bool jail_parent)
{
    int rc;

    /* The driver, and every byte a guest sends, only ever see the
     * filter's system calls. */
    rc = vcu_seccomp_install(seccomp);
    if (rc != 0) {
        errno = -rc;
        vcu__die("cannot install the seccomp filter");
    }
    /* Not dumpable: no core file (RLIMIT_CORE is 0 too), no ptrace by
     * another process of our user, no /proc/PID/mem for it. */
    prctl(PR_SET_DUMPABLE, 0);

    /* Dies with the daemon (the jail asked for it already; a worker
     * started without one too), and never outlives it: a parent of pid 1
     * is the host's init, the daemon gone, unless it is the jail's first
     * process (which the daemon's end ends, and the namespace with it). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1 && !jail_parent)
        return false;
    prctl(PR_SET_NAME, "vcu-worker");
    signal(SIGPIPE, SIG_IGN);
    return true;
}
