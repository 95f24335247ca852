/*
 * Device printf capture (CU_TAKE_OUTPUT).
 *
 * NVIDIA's driver writes what kernels printf() to file descriptor 1 of the
 * host process: measured with driver 580, write(2) straight to the fd (no
 * stdio buffer), from a driver thread shortly after the kernel ends, from
 * the next launch, and at the latest before a blocking synchronize
 * returns; polling an event does not wait for it.  In QEMU that fd is
 * QEMU's stdout, not the guest program's.  So, where the backend config
 * asks for it, fd 1 becomes a pipe: a reader thread takes what arrives and
 * appends it to the output of the session it belongs to, or writes it to
 * the original stdout (a dup kept here) when no session claims it, so that
 * QEMU's own output still gets there.
 *
 * Whose output: that of the session inside vcu__out_sync_begin/end (one at
 * a time), else that of the printf session that launched last.  Output of
 * two printf sessions whose kernels run at once can so land in the wrong
 * one; anything QEMU itself writes to stdout meanwhile does too.
 *
 * Locks, in order:
 *   vcu__cap.sync_mu  one printf session's synchronize at a time: held
 *                     across the blocking driver call, so that what the
 *                     driver writes meanwhile is that session's.
 *   vcu__cap.mu       the pipe's read end (every read is made under it, so
 *                     a drain under it sees everything written before),
 *                     the sinks and their buffers, owner, last, refs.
 *                     Never held across a blocking call.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                     /* pipe2, F_SETPIPE_SZ */
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vcu_backend_int.h"

#define VCU__OUT_MAX (1u << 20)         /* per session, note included */
#define VCU__OUT_NOTE_MAX 96u
#define VCU__PIPE_SIZE (1 << 20)
#define VCU__CHUNK 65536u

struct vcu__out_s {
    struct vcu__out_s *next;            /* vcu__cap.sinks */
    char *buf;
    size_t off, len, cap;               /* bytes [off, off + len) are pending */
    unsigned long long dropped;
    int told;                           /* the drop note is in buf, not yet taken */
};

static struct {
    pthread_mutex_t sync_mu;
    pthread_mutex_t mu;
    unsigned int refs;                  /* backends capturing */
    int stopping;                       /* the last stop: reader, finish */
    int rfd;                            /* the pipe's read end, non-blocking */
    int orig;                           /* the original fd 1 */
    pthread_t reader;
    vcu__out_t *sinks;
    vcu__out_t *owner;                  /* synchronizing now */
    vcu__out_t *last;                   /* launched last */
} vcu__cap = {
    .sync_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .rfd = -1,
    .orig = -1,
};

/* Caller holds mu.  Appends what fits in 1 MiB; says once what did not. */
static void vcu__out_append_locked(vcu__out_t *o, const char *p, size_t n)
{
    size_t room, want;

    if (o->off > 0) {
        memmove(o->buf, o->buf + o->off, o->len);
        o->off = 0;
    }
    room = VCU__OUT_MAX - VCU__OUT_NOTE_MAX - o->len;
    if (o->len > VCU__OUT_MAX - VCU__OUT_NOTE_MAX)
        room = 0;
    want = n < room ? n : room;
    if (o->len + want + VCU__OUT_NOTE_MAX > o->cap) {
        size_t ncap = o->cap ? o->cap : 4096;
        char *nb;

        while (ncap < o->len + want + VCU__OUT_NOTE_MAX)
            ncap *= 2;
        if (ncap > VCU__OUT_MAX)
            ncap = VCU__OUT_MAX;
        nb = realloc(o->buf, ncap);
        if (nb == NULL) {
            want = 0;
        } else {
            o->buf = nb;
            o->cap = ncap;
        }
    }
    if (want > 0) {
        memcpy(o->buf + o->len, p, want);
        o->len += want;
    }
    if (want < n) {
        o->dropped += n - want;
        if (!o->told && o->buf != NULL && o->len + VCU__OUT_NOTE_MAX <= o->cap) {
            int k = snprintf(o->buf + o->len, VCU__OUT_NOTE_MAX,
                             "\n[virtio-cuda: device printf output over %u KiB dropped]\n",
                             VCU__OUT_MAX >> 10);

            if (k > 0 && (size_t)k < VCU__OUT_NOTE_MAX)
                o->len += (size_t)k;
        }
        o->told = 1;
    }
}

/* Caller holds mu.  Reads what the pipe holds now into the session it
 * belongs to; returns at the first chunk no session claims, left in buf
 * for the caller to write to the original stdout without the lock. */
static size_t vcu__drain_locked(char *buf, size_t cap, int *eof)
{
    vcu__out_t *to = vcu__cap.owner ? vcu__cap.owner : vcu__cap.last;
    ssize_t n;

    *eof = 0;
    for (;;) {
        n = read(vcu__cap.rfd, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0)
            *eof = 1;
        if (n <= 0)
            return 0;
        if (to == NULL)
            return (size_t)n;
        vcu__out_append_locked(to, buf, (size_t)n);
    }
}

static void vcu__write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return;
        p += k;
        n -= (size_t)k;
    }
}

static void *vcu__reader(void *arg)
{
    static char buf[VCU__CHUNK];
    struct pollfd pf;
    int eof = 0;

    (void)arg;
    pf.fd = vcu__cap.rfd;
    pf.events = POLLIN;
    while (!eof) {
        size_t spill;
        int stop;

        /* Timed: a child process may hold the write end too, so the end
         * of the pipe need not come when we stop. */
        if (poll(&pf, 1, 100) < 0 && errno != EINTR)
            break;
        pthread_mutex_lock(&vcu__cap.mu);
        spill = vcu__drain_locked(buf, sizeof(buf), &eof);
        stop = vcu__cap.stopping;
        pthread_mutex_unlock(&vcu__cap.mu);
        /* Only this thread spills: QEMU's own output keeps its order. */
        if (spill > 0)
            vcu__write_all(vcu__cap.orig, buf, spill);
        else if (stop)
            break;
    }
    return NULL;
}

int vcu__cap_start(void)
{
    int p[2], rc = 0;

    pthread_mutex_lock(&vcu__cap.mu);
    if (vcu__cap.refs > 0) {
        vcu__cap.refs++;
        goto out;
    }
    if (pipe2(p, O_CLOEXEC) != 0) {
        rc = VCU_EIO;
        goto out;
    }
    (void)fcntl(p[1], F_SETPIPE_SZ, VCU__PIPE_SIZE);
    (void)fcntl(p[0], F_SETFL, O_NONBLOCK);
    fflush(stdout);
    vcu__cap.orig = fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (vcu__cap.orig < 0 || dup2(p[1], 1) < 0)
        goto err_pipe;
    close(p[1]);
    vcu__cap.rfd = p[0];
    if (pthread_create(&vcu__cap.reader, NULL, vcu__reader, NULL) != 0) {
        dup2(vcu__cap.orig, 1);
        p[1] = -1;
        goto err_pipe;
    }
    vcu__cap.refs = 1;
    goto out;

err_pipe:
    if (vcu__cap.orig >= 0)
        close(vcu__cap.orig);
    vcu__cap.orig = -1;
    vcu__cap.rfd = -1;
    close(p[0]);
    if (p[1] >= 0)
        close(p[1]);
    rc = VCU_EIO;
out:
    pthread_mutex_unlock(&vcu__cap.mu);
    return rc;
}

void vcu__cap_stop(void)
{
    pthread_mutex_lock(&vcu__cap.mu);
    if (vcu__cap.refs == 0 || --vcu__cap.refs > 0) {
        pthread_mutex_unlock(&vcu__cap.mu);
        return;
    }
    /* Our write end goes: the reader passes on what is left and exits. */
    fflush(stdout);
    dup2(vcu__cap.orig, 1);
    vcu__cap.stopping = 1;
    pthread_mutex_unlock(&vcu__cap.mu);
    pthread_join(vcu__cap.reader, NULL);
    pthread_mutex_lock(&vcu__cap.mu);
    vcu__cap.stopping = 0;
    close(vcu__cap.rfd);
    close(vcu__cap.orig);
    vcu__cap.rfd = vcu__cap.orig = -1;
    pthread_mutex_unlock(&vcu__cap.mu);
}

int vcu__out_new(vcu__out_t **out)
{
    vcu__out_t *o;

    *out = NULL;
    o = calloc(1, sizeof(*o));
    if (o == NULL)
        return VCU_ENOMEM;
    pthread_mutex_lock(&vcu__cap.mu);
    o->next = vcu__cap.sinks;
    vcu__cap.sinks = o;
    pthread_mutex_unlock(&vcu__cap.mu);
    *out = o;
    return 0;
}

void vcu__out_free(vcu__out_t *o)
{
    vcu__out_t **pp;

    if (o == NULL)
        return;
    pthread_mutex_lock(&vcu__cap.mu);
    for (pp = &vcu__cap.sinks; *pp != NULL; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    if (vcu__cap.owner == o)
        vcu__cap.owner = NULL;
    if (vcu__cap.last == o)
        vcu__cap.last = NULL;
    pthread_mutex_unlock(&vcu__cap.mu);
    free(o->buf);
    free(o);
}

void vcu__out_touch(vcu__out_t *o)
{
    pthread_mutex_lock(&vcu__cap.mu);
    vcu__cap.last = o;
    pthread_mutex_unlock(&vcu__cap.mu);
}

void vcu__out_sync_begin(vcu__out_t *o)
{
    pthread_mutex_lock(&vcu__cap.sync_mu);
    pthread_mutex_lock(&vcu__cap.mu);
    vcu__cap.owner = o;
    vcu__cap.last = o;
    pthread_mutex_unlock(&vcu__cap.mu);
}

void vcu__out_sync_end(vcu__out_t *o)
{
    char buf[4096];
    int eof;

    pthread_mutex_lock(&vcu__cap.mu);
    if (vcu__cap.refs > 0)
        (void)vcu__drain_locked(buf, sizeof(buf), &eof);  /* all goes to owner */
    if (vcu__cap.owner == o)
        vcu__cap.owner = NULL;
    pthread_mutex_unlock(&vcu__cap.mu);
    pthread_mutex_unlock(&vcu__cap.sync_mu);
}

size_t vcu__out_take(vcu__out_t *o, void *dst, size_t cap, int *more)
{
    size_t n;

    pthread_mutex_lock(&vcu__cap.mu);
    n = o->len < cap ? o->len : cap;
    if (n > 0)
        memcpy(dst, o->buf + o->off, n);
    o->off += n;
    o->len -= n;
    if (o->len == 0) {
        o->off = 0;
        o->told = 0;                /* the next overflow says so again */
    }
    *more = o->len > 0;
    pthread_mutex_unlock(&vcu__cap.mu);
    return n;
}
