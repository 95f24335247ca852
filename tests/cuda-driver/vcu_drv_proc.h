/*
 * Helpers of the Driver API tests that run a second process of their own
 * (drv_ipc, drv_vmm_ipc, drv_pool_ipc): the program started again with
 * other arguments, and a descriptor with a few bytes over a unix socket,
 * as programs pass CUDA's shareable handles (SCM_RIGHTS).
 */
#ifndef VCU_DRV_PROC_H
#define VCU_DRV_PROC_H

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "vcu_drv_test.h"

/* Whether this run is against the loopback build (VCU_TRANSPORT=loopback,
 * scripts/driver-loopback.sh): no host daemon, so no shareable handles. */
static inline int vcu_drv_loopback(void)
{
    const char *t = getenv("VCU_TRANSPORT");

    return t != NULL && strcmp(t, "loopback") == 0;
}

/* This program again, with args (NULL-terminated, after argv[0]): its pid. */
static inline pid_t vcu_drv_run_self(char *const args[])
{
    char self[PATH_MAX], *argv[8];
    ssize_t n;
    pid_t pid;
    int i;

    fflush(stdout);
    pid = fork();
    TRUE(pid >= 0);
    if (pid != 0)
        return pid;
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        argv[0] = self;
        for (i = 0; i < 6 && args[i] != NULL; i++)
            argv[i + 1] = args[i];
        argv[i + 1] = NULL;
        execv(self, argv);
    }
    _exit(127);
}

/* fd and the len bytes at data, in one message. */
static inline void vcu_drv_send_fd(int sock, int fd, const void *data, size_t len)
{
    char buf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { (void *)data, len };
    struct msghdr h;

    memset(&h, 0, sizeof(h));
    memset(buf, 0, sizeof(buf));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = buf;
    h.msg_controllen = sizeof(buf);
    CMSG_FIRSTHDR(&h)->cmsg_level = SOL_SOCKET;
    CMSG_FIRSTHDR(&h)->cmsg_type = SCM_RIGHTS;
    CMSG_FIRSTHDR(&h)->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(CMSG_FIRSTHDR(&h)), &fd, sizeof(int));
    TRUE(sendmsg(sock, &h, 0) == (ssize_t)len);
}

/* The descriptor and len bytes vcu_drv_send_fd sent. */
static inline int vcu_drv_recv_fd(int sock, void *data, size_t len)
{
    char buf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { data, len };
    struct msghdr h;
    int fd = -1;

    memset(&h, 0, sizeof(h));
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = buf;
    h.msg_controllen = sizeof(buf);
    TRUE(recvmsg(sock, &h, MSG_WAITALL) == (ssize_t)len);
    TRUE(CMSG_FIRSTHDR(&h) != NULL && CMSG_FIRSTHDR(&h)->cmsg_type == SCM_RIGHTS);
    memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&h)), sizeof(int));
    return fd;
}

/* A memfd holding a copy of fd's 64 bytes (a shareable handle this
 * library gave) with one bit of byte `at` changed: a handle that names
 * nothing.  -1 where fd is not 64 bytes (not this library's). */
static inline int vcu_drv_forged(int fd, int at)
{
    unsigned char b[64];
    struct stat st;
    int f;

    if (fstat(fd, &st) != 0 || st.st_size != (off_t)sizeof(b) ||
        pread(fd, b, sizeof(b), 0) != (ssize_t)sizeof(b))
        return -1;
    b[at] ^= 1;
    f = memfd_create("forged", 0);
    TRUE(f >= 0 && pwrite(f, b, sizeof(b), 0) == (ssize_t)sizeof(b));
    return f;
}

#endif /* VCU_DRV_PROC_H */
