/*
 * virtio-cuda session proxy, private to its three files: proxy.c (the
 * request path: submit, the worker's rings and socket, replies),
 * proxy_session.c (sessions opened, reset and reported) and proxy_link.c
 * (the host daemon's link; the proxy made and freed).  proxy.c says how
 * the threads work and how long sessions live.
 *
 * Lock order: vcu_proxy_t.mu -> vcu__psess_t.mu; rx_busy ->
 * vcu__psess_t.mu; any of them -> vcu_proxy_t.lmu.  Neither mutex is held
 * across a done callback, a wait for a process or a blocking socket call;
 * rx_busy is held across done callbacks (so they must not submit).
 *   vcu_proxy_t.mu   the session table, the zombie list, counters, the
 *                    link's state (up, the slice, the account's mapping).
 *   vcu__psess_t.mu  the session's send queue, its pending requests, the
 *                    regions it was sent, wid, its close request, stop,
 *                    what the daemon said of its worker (spawn, pidfd).
 *   rx_busy          the reply ring's consumer side (resp), and
 *                    vcu_proxy_t.pbuf while the submitter polls.
 *   vcu_proxy_t.lmu  the native link's socket, for sending (cfg.daemon).
 */
#ifndef VCU_PROXY_INT_H
#define VCU_PROXY_INT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* memfd_create */
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "vcu_account.h"
#include "vcu_fdpass.h"
#include "vcu_ipc.h"
#include "vcu_link.h"
#include "vcu_proxy.h"
#include "vcu_ring.h"

#define VCU_EXPORT __attribute__((visibility("default")))

#define VCU__PX_DEFAULT_SESSIONS 64u
#define VCU__PX_MAX_SESSIONS VCU_PROXY_MAX_SESSIONS
#define VCU__PX_SPIN_US_DEFAULT 20u
#define VCU__PX_SPIN_MIN_CPUS 4     /* fewer online CPUs: no spinning */
/* How long a submitter polls for the reply of a synchronous request, at
 * most (never longer than the spin): a bounded busy wait on QEMU's
 * thread, as virtio's poll mode, long enough for a short driver call. */
#define VCU__PX_POLL_US 10u
/* A request frame up to this size (a full CU_BATCH fits) is built in
 * its session's own buffer and copied onto the ring from there; one that
 * must wait for room is copied out.  So the hot path allocates nothing. */
#define VCU__PX_FBUF (24u * 1024u)
/* Pending entries a session keeps for reuse. */
#define VCU__PX_PCACHE 64u
/* How long vcu_proxy_new() waits for the daemon's WELCOME (its probe of
 * CUDA loads the driver). */
#define VCU__PX_WELCOME_MS 120000
/* A worker whose fate the daemon can no longer tell (the link went down
 * before it answered SPAWN) counts as gone this long after its socket
 * closed: it was killed with the daemon, or by it. */
#define VCU__PX_ORPHAN_NS (200ull * 1000 * 1000)

/* What the daemon said of a session's worker. */
enum {
    VCU__PX_SPAWN_PENDING = 0,      /* SPAWN sent, no answer yet */
    VCU__PX_SPAWN_OK = 1,           /* running (or was): pidfd tells when it is gone */
    VCU__PX_SPAWN_FAILED = 2,       /* never started */
};

typedef struct vcu__pframe_s {
    struct vcu__pframe_s *next;
    unsigned char *buf;
    size_t len;
    size_t off;                     /* bytes already sent */
    int fd;                         /* sent with the first byte, or -1 */
    bool own_fd;                    /* closed with the frame (a state's) */
} vcu__pframe_t;

typedef struct vcu__preq_s {
    struct vcu__preq_s *next;
    vcu_request_t *req;
    uint64_t tag;
    uint64_t req_id;
    bool open;                      /* the session's SESSION_OPEN */
} vcu__preq_t;

typedef struct vcu__psess_s vcu__psess_t;

struct vcu_proxy_s {
    int capture_printf;
    uint32_t ring_bytes;            /* request ring per session */
    unsigned int spin_us;
    uint64_t poll_ns;               /* the submitter's poll; 0: none */
    unsigned char *pbuf;            /* a reply body, copied out while polling */

    pthread_mutex_t mu;             /* see the lock order above */
    vcu__psess_t **sessions;        /* max_sessions slots */
    unsigned int max_sessions;
    unsigned int nlive;
    uint64_t next_gen;
    vcu__psess_t *zombies;          /* closed, threads to join */
    vcu__psess_t *closing;          /* SESSION_CLOSE sent, worker not yet gone */

    /* The link (vcu_link.h): the transport's, or the native one below. */
    vcu_proxy_link_t link;
    struct vcu_link_hello hello;    /* sent at each connection */
    bool link_up;                   /* welcomed (mu) */
    bool link_gen_down;             /* the link went down since the session's spawn (mu) */
    uint64_t link_gen;              /* counts welcomes (mu) */
    struct vcu_link_slice slice;    /* what the daemon gave (mu) */
    uint64_t vm_id;                 /* (mu) */
    char cuda_error[256];           /* the daemon's probe: "" when CUDA works (mu) */
    /* The VM's account and policy as the daemon shares them, read-only;
     * replaced at each welcome, the old ones kept until free (readers
     * hold no reference). */
    vcu_account_t *acct;
    const struct vcu_policy *policy;
    vcu_account_t *old_acct[8];
    const struct vcu_policy *old_policy[8];
    unsigned int nold;

    /* The native link (cfg.daemon). */
    int lfd;                        /* -1: the transport's link */
    pthread_mutex_t lmu;            /* sending on lfd */
    pthread_t lthread;
    bool lthread_on;
};

struct vcu__psess_s {
    vcu_proxy_t *px;
    uint64_t id;                    /* the guest's session id */
    unsigned int slot;
    int fd;
    void *shm;                      /* the shared area, shm_len bytes */
    size_t shm_len;
    int wake_req;                   /* request ring's doorbell: we ring it */
    int wake_resp;                  /* reply ring's doorbell: the reader sleeps on it */
    vcu__ring_t resp;               /* consumed under rx_busy */
    int rx_busy;                    /* taken (trylock only) to consume resp */
    /* Until when (vcu__ring_now_ns()) a submitter polls for its reply, or
     * 0: written by the submitter before its request goes on the ring,
     * read by the reader, which meanwhile stays off the consumer side
     * (see vcu__px_reader()).  A line of its own. */
    _Alignas(64) uint64_t poll_until;
    uint8_t poll_pad[56];
    pthread_t reader;
    pthread_t sender;

    pthread_mutex_t mu;             /* see the lock order above */
    pthread_cond_t cond;            /* the sender waits on it */
    uint64_t wid;                   /* the worker's session id, 0 before the open reply */
    uint64_t next_tag;
    vcu__pframe_t *qhead, *qtail;   /* not yet (wholly) sent, in order */
    vcu__ring_t req;                /* the request ring's producer side */
    vcu__pframe_t *rqhead, *rqtail; /* for the request ring, behind a full one */
    vcu__preq_t *pending;           /* sent, not answered, oldest first: */
    vcu__preq_t *pending_tail;      /* replies mostly come in order */
    vcu__preq_t *pfree;             /* entries for reuse, npfree of them */
    unsigned int npfree;
    int sent_fds[VCU_IPC_MAX_REGIONS];
    unsigned int nsent;
    vcu_request_t *close_req;       /* SESSION_CLOSE waiting for the exit */
    /* The guest's SESSION_OPEN, as a destination opens the session again
     * (migration); constant once the open is sent. */
    struct vcu_session_open_req open_req;
    /* The worker, as the daemon told (mu). */
    int spawn;                      /* VCU__PX_SPAWN_* */
    uint32_t spawn_status;          /* why it failed: the open's status */
    uint64_t spawn_gen;             /* px->link_gen when SPAWN went out */
    int pidfd;                      /* readable once the worker is gone; -1: none */
    uint32_t pid;                   /* its host pid, for reports */
    int acct_slot;                  /* its slot in the VM's account; -1: none */
    bool kill_sent;
    bool stop;                      /* reset: threads end now */
    bool broken;                    /* a send failed or a ring broke: the link is gone */
    bool dead;                      /* the reader has ended: nothing more is answered */
    bool closing;                   /* on px->closing (px->mu) */

    vcu__psess_t *zombie_next;
    _Alignas(8) unsigned char fbuf[VCU__PX_FBUF];  /* s->mu: a frame being built */
};

/* proxy.c: the request path. */
void vcu__px_kill_locked(vcu__psess_t *s);
void vcu__px_complete(vcu_request_t *req, uint64_t req_id, uint32_t status);
void vcu__px_cancel_all(vcu__psess_t *s, uint32_t status);
void vcu__px_frame_free(vcu__pframe_t *f);
void *vcu__px_sender(void *arg);
void *vcu__px_reader(void *arg);
void vcu__px_forward(vcu__psess_t *s, vcu_request_t *req, const struct vcu_req_hdr *hp,
                     bool open);

/* proxy.c: the session of a guest's id (px->mu held), or NULL. */
vcu__psess_t *vcu__px_lookup_locked(vcu_proxy_t *px, uint64_t id);

/* proxy.c: a save or a load of the session's state (VCU_IPC_STATE) with
 * a copy of fd, completing req with the worker's reply; s->wid known. */
void vcu__px_state(vcu__psess_t *s, vcu_request_t *req, uint32_t op, int fd);

/* proxy_session.c: sessions. */
void vcu__px_open(vcu_proxy_t *px, vcu_request_t *req, const struct vcu_req_hdr *h);

/* proxy_link.c: the daemon's link. */
int vcu__px_link_send(vcu_proxy_t *px, uint32_t type, uint64_t id, const void *body, size_t len,
                      const int *fds, unsigned int nfds);

#endif /* VCU_PROXY_INT_H */
