/*
 * Bytes with file descriptors over a unix socket (vcu_fdpass.h).
 */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vcu_fdpass.h"

typedef union {
    struct cmsghdr h;
    char b[CMSG_SPACE(sizeof(int) * VCU_FDPASS_MAX)];
} vcu__fd_ctl_t;

ssize_t vcu__fd_send(int sock, const void *buf, size_t len, const int *fds, unsigned int nfds,
                     int flags)
{
    vcu__fd_ctl_t c;
    struct iovec iov = { (void *)buf, len };
    struct msghdr m;
    ssize_t n;

    if (nfds > VCU_FDPASS_MAX) {
        errno = EINVAL;
        return -1;
    }
    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (nfds > 0) {
        memset(&c, 0, sizeof(c));
        m.msg_control = c.b;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        CMSG_FIRSTHDR(&m)->cmsg_level = SOL_SOCKET;
        CMSG_FIRSTHDR(&m)->cmsg_type = SCM_RIGHTS;
        CMSG_FIRSTHDR(&m)->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), fds, sizeof(int) * nfds);
    }
    do
        n = sendmsg(sock, &m, MSG_NOSIGNAL | flags);
    while (n < 0 && errno == EINTR);
    return n;
}

ssize_t vcu__fd_recv(int sock, void *buf, size_t cap, int flags, int *fds, unsigned int *nfds,
                     unsigned int max, int *mflags)
{
    vcu__fd_ctl_t c;
    struct iovec iov = { buf, cap };
    struct msghdr m;
    struct cmsghdr *cm;
    int lost = 0;
    ssize_t n;

    memset(&m, 0, sizeof(m));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = c.b;
    m.msg_controllen = sizeof(c.b);
    do
        n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | flags);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (mflags != NULL)
            *mflags = 0;
        return n;
    }
    for (cm = CMSG_FIRSTHDR(&m); cm != NULL; cm = CMSG_NXTHDR(&m, cm)) {
        size_t k, nin;

        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
            cm->cmsg_len < CMSG_LEN(0))
            continue;
        nin = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (k = 0; k < nin; k++) {
            int fd;

            memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int), sizeof(int));
            if (*nfds < max) {
                fds[(*nfds)++] = fd;
            } else {
                close(fd);
                lost = MSG_CTRUNC;
            }
        }
    }
    if (mflags != NULL)
        *mflags = m.msg_flags | lost;
    return n;
}
