/*
 * vcu-worker: the link to QEMU's device proxy: the socket (regions,
 * requests too large for the ring, the end of the session), the shared
 * rings, taking requests in, and the watch thread that stands in for a
 * main thread away from the ring.  See worker.c, "Threads".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* ppoll */
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "vcu_backend.h"
#include "vcu_fdpass.h"
#include "vcu_ipc.h"
#include "vcu_ring.h"
#include "vcu_seccomp.h"
#include "vcu_stage.h"
#include "vcu_worker.h"
#include "vcu_worker_int.h"

/* ---- the socket --------------------------------------------------------- */

/* Reads what the socket has (with block, waits for some) into sbuf, the
 * file descriptors that come with it into fdq.  Its end is ours. */
static void vcu__sock_fill(bool block)
{
    struct vcu_ipc_hdr h;
    size_t need = vcu__w.shave + 65536;
    int mflags;
    ssize_t n;

    if (vcu__w.shave >= sizeof(h)) {
        memcpy(&h, vcu__w.sbuf, sizeof(h));
        if (h.len > VCU_IPC_MAX_BODY)
            vcu__die("oversized message");
        if (sizeof(h) + h.len > need)
            need = sizeof(h) + h.len;
    }
    if (need > vcu__w.scap) {
        unsigned char *nb;

        if (need < 2 * vcu__w.scap)
            need = 2 * vcu__w.scap;
        nb = realloc(vcu__w.sbuf, need);

        if (nb == NULL)
            vcu__die("out of memory");
        vcu__w.sbuf = nb;
        vcu__w.scap = need;
    }
    n = vcu__fd_recv(vcu__w.fd, vcu__w.sbuf + vcu__w.shave, vcu__w.scap - vcu__w.shave,
                     block ? 0 : MSG_DONTWAIT, vcu__w.fdq, &vcu__w.nfdq, VCU_IPC_MAX_REGIONS,
                     &mflags);
    if (n < 0 && !block && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0)
        VCU__W_EXIT(0);             /* closed: the session ends with us */
    if (mflags & MSG_CTRUNC)
        vcu__die("file descriptors lost (too many in one message, or not yet claimed)");
    vcu__w.shave += (size_t)n;
}

/*
 * Takes frames from the socket, reading it as needed: each region is
 * mapped; with want_req the call ends after a request (the one a
 * VCU_IPC_SOCK entry announced), else after a region.  A request the
 * ring did not announce breaks the link's order.
 */
void vcu__sock_pump(bool want_req)
{
    for (;;) {
        struct vcu_ipc_hdr h;

        while (vcu__w.shave >= sizeof(h)) {
            size_t flen;

            memcpy(&h, vcu__w.sbuf, sizeof(h));
            if (h.len > VCU_IPC_MAX_BODY)
                vcu__die("oversized message");
            flen = sizeof(h) + h.len;
            if (vcu__w.shave < flen)
                break;
            if (h.type == VCU_IPC_REGION) {
                vcu__handle_region(vcu__w.sbuf + sizeof(h), h.len);
                memmove(vcu__w.sbuf, vcu__w.sbuf + flen, vcu__w.shave - flen);
                vcu__w.shave -= flen;
                if (!want_req)
                    return;
                continue;
            }
            if (h.type == VCU_IPC_STATE && want_req) {
                unsigned char sb[sizeof(struct vcu_ipc_state)];
                size_t n = h.len < sizeof(sb) ? h.len : sizeof(sb);

                memcpy(sb, vcu__w.sbuf + sizeof(h), n);
                memmove(vcu__w.sbuf, vcu__w.sbuf + flen, vcu__w.shave - flen);
                vcu__w.shave -= flen;
                vcu__handle_state(h.tag, sb, h.len);
                return;
            }
            if (h.type == VCU_IPC_REQ && want_req) {
                /* Out of sbuf first: a region wait reads the socket. */
                unsigned char *body = malloc(h.len ? h.len : 1);

                if (body == NULL)
                    vcu__die("out of memory");
                memcpy(body, vcu__w.sbuf + sizeof(h), h.len);
                memmove(vcu__w.sbuf, vcu__w.sbuf + flen, vcu__w.shave - flen);
                vcu__w.shave -= flen;
                vcu__handle_req(h.tag, body, h.len);
                free(body);
                return;
            }
            vcu__die("unexpected message on the socket");
        }
        vcu__sock_fill(true);
    }
}

/* Maps the shared area (fd) and binds the two rings to it. */
void vcu__map_shm(int fd, int wake_req, int wake_resp)
{
    struct vcu_ipc_shm *shm;
    struct stat st;
    uint32_t rq, rs;
    void *p;

    if (fstat(fd, &st) != 0 || st.st_size < (off_t)VCU_IPC_SHM_HDR)
        vcu__die("bad shared area");
    p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        vcu__die("cannot map the shared area");
    close(fd);
    shm = p;
    rq = shm->req_size;
    rs = shm->resp_size;
    if (shm->magic != VCU_IPC_SHM_MAGIC || rq < VCU_IPC_REQ_RING_MIN ||
        rq > VCU_IPC_REQ_RING_MAX || (rq & (rq - 1)) != 0 || rs != VCU_IPC_RESP_RING ||
        (uint64_t)st.st_size < (uint64_t)VCU_IPC_SHM_HDR + rq + rs)
        vcu__die("bad shared area");
    vcu__ring_init(&vcu__w.req, &shm->req, (unsigned char *)p + VCU_IPC_SHM_HDR, rq, wake_req);
    vcu__ring_init(&vcu__w.resp, &shm->resp, (unsigned char *)p + VCU_IPC_SHM_HDR + rq, rs,
                   wake_resp);
    vcu__w.rings = true;
}

/* ---- taking requests in ------------------------------------------------- */

/* Holder of rlock: submits every frame the ring holds; how many. */
static unsigned int vcu__take_frames(void)
{
    unsigned int n = 0;

    for (;;) {
        struct vcu_ipc_hdr h;
        int rc = vcu__ring_get(&vcu__w.req, &h, vcu__w.rbuf, vcu__w.req.size, VCU_IPC_MAX_BODY);

        if (rc < 0)
            vcu__die("request ring broken");
        if (rc == 0)
            return n;
        if (h.type == VCU_IPC_REQ)
            vcu__handle_req(h.tag, vcu__w.rbuf, h.len);
        else if (h.type == VCU_IPC_SOCK && h.len == 0)
            vcu__sock_pump(true);
        else
            vcu__die("unknown message");
        n++;
    }
}

/* Holder of rlock: takes in what has arrived, waiting at most timeout_ns
 * (-1: no limit) for something if nothing has.  How many frames. */
static unsigned int vcu__take(int64_t timeout_ns, uint64_t spin_ns)
{
    unsigned int n = vcu__take_frames();

    if (n > 0 || timeout_ns == 0)
        return n;
    for (;;) {
        uint64_t t0 = vcu__ring_now_ns();

        /* The socket alone (regions ahead of their request, or the end)
         * counts for nothing: wait on. */
        if (vcu__ring_wait(&vcu__w.req, vcu__w.fd, spin_ns, timeout_ns) != 0)
            vcu__sock_fill(false);
        n = vcu__take_frames();
        if (n > 0)
            return n;
        if (timeout_ns >= 0) {
            uint64_t spent = vcu__ring_now_ns() - t0;

            if (spent >= (uint64_t)timeout_ns)
                return 0;
            timeout_ns -= (int64_t)spent;
        }
    }
}

/* The backend's pump (vcu_backend_config_t), on the main thread. */
void vcu__pump(void *opaque, int64_t timeout_ns)
{
    uint64_t took;

    (void)opaque;
    atomic_store_explicit(&vcu__w.want, 1, memory_order_relaxed);
    pthread_mutex_lock(&vcu__w.rlock);
    atomic_store_explicit(&vcu__w.want, 0, memory_order_relaxed);
    atomic_store_explicit(&vcu__w.away_since, 0, memory_order_relaxed);
    took = atomic_load_explicit(&vcu__w.watch_took, memory_order_relaxed);
    /* The watch thread queued requests since the backend last looked:
     * no waiting before it has run them. */
    if (took != vcu__w.watch_seen) {
        vcu__w.watch_seen = took;
        timeout_ns = 0;
    }
    vcu__take(timeout_ns, vcu__w.spin_ns);
    /* Away now; then a parked watch thread is woken.  Both seq_cst, as is
     * the watch thread's pair (park, then look at away_since): one of the
     * two sees the other's store, so the watch thread never sleeps while
     * the main thread is away. */
    atomic_store(&vcu__w.away_since, vcu__ring_now_ns());
    pthread_mutex_unlock(&vcu__w.rlock);
    if (atomic_load(&vcu__w.watch_parked)) {
        pthread_mutex_lock(&vcu__w.watch_mu);
        atomic_store_explicit(&vcu__w.watch_parked, 0, memory_order_relaxed);
        pthread_cond_signal(&vcu__w.watch_cv);
        pthread_mutex_unlock(&vcu__w.watch_mu);
    }
}

/*
 * The watch thread: stands in for the main thread at the ring while a
 * request of the main thread's takes long (see "Threads").  Parks while
 * the main thread stays at the ring.
 */
void *vcu__watch(void *arg)
{
    const struct timespec period = { 0, VCU__W_WATCH_PERIOD_NS };
    unsigned int idle = 0;

    (void)arg;
    prctl(PR_SET_NAME, "vcu-watch");
    for (;;) {
        uint64_t since;

        if (idle >= VCU__W_WATCH_IDLE) {
            pthread_mutex_lock(&vcu__w.watch_mu);
            atomic_store(&vcu__w.watch_parked, 1);
            /* Only while the main thread is at the ring (see vcu__pump()). */
            while (atomic_load(&vcu__w.watch_parked) && atomic_load(&vcu__w.away_since) == 0)
                pthread_cond_wait(&vcu__w.watch_cv, &vcu__w.watch_mu);
            atomic_store(&vcu__w.watch_parked, 0);
            pthread_mutex_unlock(&vcu__w.watch_mu);
            idle = 0;
        }
        nanosleep(&period, NULL);
        since = atomic_load_explicit(&vcu__w.away_since, memory_order_relaxed);
        if (since == 0) {
            idle++;
            continue;
        }
        idle = 0;
        if (vcu__ring_now_ns() - since < VCU__W_WATCH_NS ||
            pthread_mutex_trylock(&vcu__w.rlock) != 0)
            continue;
        while (atomic_load_explicit(&vcu__w.away_since, memory_order_relaxed) == since &&
               !atomic_load_explicit(&vcu__w.want, memory_order_relaxed))
            atomic_fetch_add_explicit(&vcu__w.watch_took, vcu__take(VCU__W_WATCH_PERIOD_NS, 0),
                                      memory_order_relaxed);
        pthread_mutex_unlock(&vcu__w.rlock);
    }
    return NULL;
}
