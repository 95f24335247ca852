/*
 * Private interface of the vcu-worker process between its main (worker.c)
 * and its start (worker_setup.c).  Private names: vcu__.
 */
#ifndef VCU_WORKER_H
#define VCU_WORKER_H

#include <stdbool.h>
#include <stdint.h>

#include "vcu_backend.h"

/* The command line, besides what goes into the backend's config. */
typedef struct vcu__opts_s {
    bool probe;
    bool jail_parent;               /* --jail-parent: the parent is the jail's first process */
    int fd;                         /* the session's socket */
    int shm_fd, wake_req, wake_resp;
    int acct_fd, policy_fd, share_fd;
    int keep_fd;                    /* --keep: the daemon's keep (vcu_keep.h) */
    int seccomp;                    /* VCU_SECCOMP_* */
    uint64_t spin_ns;
    const char *aslot, *share_vm, *share_party, *mps_pipe;
} vcu__opts_t;

/* worker_setup.c.  The command line into cfg and o (o's defaults set by
 * the caller); vcu__usage() if it is not one.  Says how to start the
 * worker, and exits (2). */
void vcu__parse_args(int argc, char **argv, vcu_backend_config_t *cfg, vcu__opts_t *o);
void vcu__usage(void) __attribute__((noreturn));

/* worker_setup.c.  The VM's memory account and policy page (--account),
 * the compute-share group (--share), into cfg; nothing without fd. */
void vcu__map_account(vcu_backend_config_t *cfg, int fd, const char *slot, int pfd);
void vcu__map_share(vcu_backend_config_t *cfg, int fd, const char *vm, const char *party);

/* worker_setup.c.  Before anything else runs here: the seccomp filter, no
 * dumps, death with the daemon.  False if the daemon is gone already. */
bool vcu__lock_down(int seccomp, bool jail_parent);

/* worker.c.  Ends the process, saying why: a peer broke the link's rules,
 * or the start failed. */
void vcu__die(const char *what) __attribute__((noreturn));

#endif /* VCU_WORKER_H */
