/*
 * One side of a shared-memory frame ring (vcu_ipc.h, "The hot path"): the
 * proxy and the worker each hold a producer of one ring and the consumer
 * of the other.  Private to host-backend (proxy*.c, worker.c, the tests).
 *
 * Not thread safe: each side serializes its producers itself, and its
 * consumers too (the proxy's reader and a submitter polling for its own
 * reply); vcu__ring_ready(), vcu__ring_past() and the waits may run
 * beside the thread that consumes.  The peer is not trusted: every index it wrote
 * is checked, and a check that fails reads as VCU__RING_BROKEN.
 *
 * All inline: QEMU links proxy*.c alone, the worker worker.c.
 *
 * Memory ordering: the producer's frame bytes are ordered before its tail
 * by the release store; the consumer's copy-out before its head likewise.
 * The sleep/wake handshake is Dekker's: the producer stores tail then
 * loads sleeping, the consumer stores sleeping then loads tail, each pair
 * separated by a full fence, so at least one of them sees the other's
 * store: either the consumer sees the new frame and does not block, or
 * the producer sees the flag and rings the doorbell.  A wake-up that
 * finds nothing (the consumer saw the frame after all) costs one extra
 * loop, never a lost frame.
 */
#ifndef VCU_RING_H
#define VCU_RING_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* ppoll */
#endif
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "vcu_ipc.h"

typedef struct vcu__ring_s {
    struct vcu_ipc_ring_ctl *ctl;   /* in the shared area */
    unsigned char *data;            /* size bytes in the shared area */
    uint64_t size;                  /* a power of two */
    /* Producer: our tail; consumer: our head, changed only by the one
     * thread consuming at a time, read atomically (vcu__ring_ready()) by
     * others that may wait on the same ring. */
    uint64_t pos;
    uint64_t head_seen;             /* producer: the consumer's head at our last look */
    int wake_fd;                    /* this side's end of the ring's doorbell */
} vcu__ring_t;

#define VCU__RING_EMPTY 0           /* get: nothing published */
#define VCU__RING_FULL 0            /* put: no room now */
#define VCU__RING_BROKEN (-1)       /* the peer broke the ring's rules */

/* Bytes a frame of body len takes in a ring (8-aligned). */
static inline uint64_t vcu__ring_frame_bytes(uint64_t len)
{
    return (sizeof(struct vcu_ipc_hdr) + len + 7u) & ~(uint64_t)7u;
}

#define VCU__LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define VCU__STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define VCU__FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)

static inline void vcu__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A monotonic clock in ns. */
static inline uint64_t vcu__ring_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Binds r to one ring of the shared area; pos starts at 0. */
static inline void vcu__ring_init(vcu__ring_t *r, struct vcu_ipc_ring_ctl *ctl, unsigned char *data,
                                  uint64_t size, int wake_fd)
{
    r->ctl = ctl;
    r->data = data;
    r->size = size;
    r->pos = 0;
    r->head_seen = 0;
    r->wake_fd = wake_fd;
}

/* Copies n bytes into the ring at position pos, wrapping. */
static inline void vcu__ring_write(vcu__ring_t *r, uint64_t pos, const void *src, size_t n)
{
    uint64_t off = pos & (r->size - 1);
    size_t first = n < r->size - off ? n : (size_t)(r->size - off);

    memcpy(r->data + off, src, first);
    memcpy(r->data, (const unsigned char *)src + first, n - first);
}

static inline void vcu__ring_read(const vcu__ring_t *r, uint64_t pos, void *dst, size_t n)
{
    uint64_t off = pos & (r->size - 1);
    size_t first = n < r->size - off ? n : (size_t)(r->size - off);

    memcpy(dst, r->data + off, first);
    memcpy((unsigned char *)dst + first, r->data, n - first);
}

/*
 * Producer: publishes the frame h + body (h->len bytes) if it fits, and
 * wakes the consumer if it sleeps.  Returns 1 when published,
 * VCU__RING_FULL when there is no room now, VCU__RING_BROKEN when the
 * consumer's head is impossible.
 */
static inline int vcu__ring_put(vcu__ring_t *r, const struct vcu_ipc_hdr *h, const void *body)
{
    uint64_t need = vcu__ring_frame_bytes(h->len);

    /* The consumer's head only moves forward: room seen at the last look
     * is still there, so its cache line is read only when that is not
     * enough (see struct vcu_ipc_ring_ctl). */
    if (need > r->size - (r->pos - r->head_seen)) {
        uint64_t head = VCU__LOAD(&r->ctl->head);

        if (r->pos - head > r->size || head - r->head_seen > r->pos - r->head_seen ||
            (head & 7u) != 0)
            return VCU__RING_BROKEN;
        r->head_seen = head;
        if (need > r->size - (r->pos - head))
            return VCU__RING_FULL;
    }
    vcu__ring_write(r, r->pos, h, sizeof(*h));
    vcu__ring_write(r, r->pos + sizeof(*h), body, h->len);
    r->pos += need;
    VCU__STORE(&r->ctl->tail, r->pos);
    VCU__FENCE();
    if (__atomic_load_n(&r->ctl->sleeping, __ATOMIC_RELAXED)) {
        ssize_t n;

        /* A full doorbell (EAGAIN) rings already; a closed one means the
         * peer is gone, which the session's socket says too. */
        do {
            n = send(r->wake_fd, "", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
    }
    return 1;
}

/*
 * Consumer: copies the next frame out: its header to *h, its body to buf
 * (cap bytes).  Returns 1 for a frame, VCU__RING_EMPTY, or
 * VCU__RING_BROKEN when the producer's tail or the frame is impossible
 * (more than the ring, a body over max_body or cap, a frame beyond what
 * was published).
 */
static inline int vcu__ring_get(vcu__ring_t *r, struct vcu_ipc_hdr *h, unsigned char *buf, size_t cap,
                  uint64_t max_body)
{
    uint64_t tail = VCU__LOAD(&r->ctl->tail);
    uint64_t avail = tail - r->pos;

    if (avail == 0)
        return VCU__RING_EMPTY;
    if (avail > r->size || avail < sizeof(*h) || (avail & 7u) != 0)
        return VCU__RING_BROKEN;
    /* Copied out before checking: the peer may change the bytes. */
    vcu__ring_read(r, r->pos, h, sizeof(*h));
    if (h->len > max_body || h->len > cap || vcu__ring_frame_bytes(h->len) > avail)
        return VCU__RING_BROKEN;
    vcu__ring_read(r, r->pos + sizeof(*h), buf, h->len);
    __atomic_store_n(&r->pos, r->pos + vcu__ring_frame_bytes(h->len), __ATOMIC_RELAXED);
    VCU__STORE(&r->ctl->head, r->pos);
    return 1;
}

/* Consumer: whether something is published past our head (a hint). */
/* Whether the producer's tail has moved past from (a hint): the ready
 * test of a consumer that shares the consumer side and must not read the
 * other's position while it waits (the proxy's reader, vcu_ipc.h). */
static inline int vcu__ring_past(const vcu__ring_t *r, uint64_t from)
{
    return VCU__LOAD(&r->ctl->tail) != from;
}

static inline int vcu__ring_ready(const vcu__ring_t *r)
{
    return vcu__ring_past(r, __atomic_load_n(&r->pos, __ATOMIC_RELAXED));
}

/*
 * Consumer, idle: waits until the ring's tail is past from or sock is
 * readable (data or its end), at most timeout_ns (-1: no limit).  Spins
 * first for spin_ns (checking the tail alone; never longer than the
 * timeout), then sets the sleeping flag and blocks in ppoll() on the
 * ring's doorbell and sock.  Returns ppoll()'s revents for sock (0 if
 * the ring woke us or the time ran out).
 */
static inline short vcu__ring_wait_from(vcu__ring_t *r, uint64_t from, int sock, uint64_t spin_ns,
                                        int64_t timeout_ns)
{
    struct pollfd pfd[2];
    struct timespec ts, *tsp = NULL;
    uint64_t t0 = vcu__ring_now_ns(), spent;
    unsigned int i = 0;

    if (timeout_ns >= 0 && (uint64_t)timeout_ns < spin_ns)
        spin_ns = (uint64_t)timeout_ns;
    while (spin_ns > 0) {
        if (vcu__ring_past(r, from))
            return 0;
        vcu__cpu_relax();
        if ((++i & 63u) == 0 && vcu__ring_now_ns() - t0 > spin_ns)
            break;
    }
    if (timeout_ns >= 0) {
        spent = vcu__ring_now_ns() - t0;
        if (spent >= (uint64_t)timeout_ns)
            return 0;
        ts.tv_sec = (time_t)(((uint64_t)timeout_ns - spent) / 1000000000u);
        ts.tv_nsec = (long)(((uint64_t)timeout_ns - spent) % 1000000000u);
        tsp = &ts;
    }
    __atomic_store_n(&r->ctl->sleeping, 1u, __ATOMIC_RELAXED);
    VCU__FENCE();
    if (vcu__ring_past(r, from)) {
        __atomic_store_n(&r->ctl->sleeping, 0u, __ATOMIC_RELAXED);
        return 0;
    }
    pfd[0].fd = r->wake_fd;
    pfd[0].events = POLLIN;
    pfd[0].revents = 0;
    pfd[1].fd = sock;
    pfd[1].events = POLLIN;
    pfd[1].revents = 0;
    if (ppoll(pfd, 2, tsp, NULL) <= 0)
        pfd[0].revents = pfd[1].revents = 0;
    __atomic_store_n(&r->ctl->sleeping, 0u, __ATOMIC_RELAXED);
    if (pfd[0].revents & POLLIN) {
        char drain[64];
        ssize_t rd = recv(r->wake_fd, drain, sizeof(drain), MSG_DONTWAIT);

        (void)rd;                   /* what rang is taken; the ring says why */
    }
    return pfd[1].revents;
}

/* The same until the ring holds something past our head. */
static inline short vcu__ring_wait(vcu__ring_t *r, int sock, uint64_t spin_ns, int64_t timeout_ns)
{
    return vcu__ring_wait_from(r, __atomic_load_n(&r->pos, __ATOMIC_RELAXED), sock, spin_ns,
                               timeout_ns);
}

#endif /* VCU_RING_H */
