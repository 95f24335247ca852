/*
 * The worker's end of the keep (host-backend/common/vcu_keep.h): it hands
 * the daemon a shareable handle's descriptor, or asks for one another
 * worker of its VM handed over.  One question at a time, on the session's
 * worker thread; the daemon answers at once, and an answer that does not
 * come within VCU__KEEP_WAIT_MS ends the keep for this process (a late
 * one would be taken for the next question's).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cuda_int.h"
#include "vcu_fdpass.h"
#include "vcu_keep.h"

#define VCU__KEEP_WAIT_MS 10000

/* Sends q (with fd, if >= 0), waits for the answer into a (with its
 * descriptor into *got, if any).  0, or -1: the keep is gone. */
static int vcu__keep_ask(vcu__cuda_t *cu, const struct vcu_keep_msg *q, int fd,
                         struct vcu_keep_msg *a, int *got)
{
    struct pollfd p = { .fd = cu->keep_fd, .events = POLLIN };
    unsigned int ngot = 0;
    ssize_t n;

    *got = -1;
    n = vcu__fd_send(cu->keep_fd, q, sizeof(*q), &fd, fd >= 0 ? 1 : 0, 0);
    if (n != (ssize_t)sizeof(*q))
        goto gone;
    do
        n = poll(&p, 1, VCU__KEEP_WAIT_MS);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        goto gone;
    n = vcu__fd_recv(cu->keep_fd, a, sizeof(*a), 0, got, &ngot, 1, NULL);
    if (n != (ssize_t)sizeof(*a) || a->op != q->op) {
        if (*got >= 0)
            close(*got);
        *got = -1;
        goto gone;
    }
    return 0;

gone:
    close(cu->keep_fd);
    cu->keep_fd = -1;
    return -1;
}

int vcu__keep_put(vcu__cuda_t *cu, uint32_t kind, uint32_t dev, uint64_t size, int fd,
                  uint8_t token[VCU_KEEP_TOKEN])
{
    struct vcu_keep_msg q = { .op = VCU_KEEP_PUT, .kind = kind, .dev = dev, .size = size }, a;
    int got;

    if (cu->keep_fd < 0)
        return VCU_S_ENOTSUP;
    if (vcu__keep_ask(cu, &q, fd, &a, &got) != 0)
        return VCU_S_EIO;
    if (got >= 0)
        close(got);
    if (a.status == VCU_S_OK)
        memcpy(token, a.token, VCU_KEEP_TOKEN);
    return (int)a.status;
}

int vcu__keep_get(vcu__cuda_t *cu, uint32_t kind, const uint8_t token[VCU_KEEP_TOKEN],
                  uint32_t *dev, uint64_t *size, int *fd)
{
    struct vcu_keep_msg q = { .op = VCU_KEEP_GET, .kind = kind }, a;
    int got;

    *fd = -1;
    if (cu->keep_fd < 0)
        return VCU_S_ENOTSUP;
    memcpy(q.token, token, VCU_KEEP_TOKEN);
    if (vcu__keep_ask(cu, &q, -1, &a, &got) != 0)
        return VCU_S_EIO;
    if (a.status != VCU_S_OK || got < 0 || a.kind != kind) {
        if (got >= 0)
            close(got);
        return a.status != VCU_S_OK ? (int)a.status : VCU_S_EIO;
    }
    *dev = a.dev;
    *size = a.size;
    *fd = got;
    return VCU_S_OK;
}
