/*
 * Descriptors over a unix socket (host-backend/common/vcu_fdpass.c), as
 * the daemon, the workers and QEMU's session proxy pass them: bytes and
 * descriptors arrive together; descriptors beyond what the receiver takes
 * are closed and reported, never left open in it; a sender asking for
 * more than one message carries is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vcu_fdpass.h"
#include "vcu_test.h"

/* Descriptors open in this process. */
static int open_fds(void)
{
    int n = 0;

    for (int fd = 0; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            n++;
    return n;
}

/* Do a and b name one open file? */
static int same_file(int a, int b)
{
    struct stat sa, sb;

    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

TEST(fdpass_roundtrip)
{
    int sv[2], p[2], got[4] = { -1, -1, -1, -1 }, mflags = -1;
    unsigned int n = 1;
    char buf[8] = { 0 };

    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    ASSERT_EQ(0, pipe(p));
    got[0] = 99;                    /* already there: the new ones come after it */
    ASSERT_EQ(5, vcu__fd_send(sv[0], "hello", 5, p, 2, 0));
    ASSERT_EQ(5, vcu__fd_recv(sv[1], buf, sizeof(buf), 0, got, &n, 4, &mflags));
    ASSERT_EQ(0, memcmp(buf, "hello", 5));
    ASSERT_EQ(3, n);
    ASSERT_EQ(99, got[0]);
    ASSERT_EQ(0, mflags & (MSG_CTRUNC | MSG_TRUNC));
    ASSERT_TRUE(same_file(got[1], p[0]));
    ASSERT_TRUE(same_file(got[2], p[1]));
    ASSERT_TRUE(got[1] != p[0] && got[2] != p[1]);
    ASSERT_EQ(FD_CLOEXEC, fcntl(got[1], F_GETFD) & FD_CLOEXEC);
    /* Plain bytes: no descriptors, no flags. */
    ASSERT_EQ(3, vcu__fd_send(sv[1], "abc", 3, NULL, 0, 0));
    n = 0;
    ASSERT_EQ(3, vcu__fd_recv(sv[0], buf, sizeof(buf), 0, got, &n, 4, &mflags));
    ASSERT_EQ(0, n);
    ASSERT_EQ(0, mflags & (MSG_CTRUNC | MSG_TRUNC));
    close(got[1]);
    close(got[2]);
    close(p[0]);
    close(p[1]);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

/* Three descriptors to a receiver that takes one: one kept, two closed,
 * MSG_CTRUNC said; then more than a message carries, from a raw sender. */
TEST(fdpass_excess_closed)
{
    int sv[2], p[2], three[3], got = -1, mflags = 0, before;
    unsigned int n = 0;
    char buf[4];

    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    ASSERT_EQ(0, pipe(p));
    three[0] = p[0];
    three[1] = p[1];
    three[2] = p[0];
    before = open_fds();
    ASSERT_EQ(1, vcu__fd_send(sv[0], "x", 1, three, 3, MSG_DONTWAIT));
    ASSERT_EQ(1, vcu__fd_recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT, &got, &n, 1, &mflags));
    ASSERT_EQ(1, n);
    ASSERT_TRUE(same_file(got, p[0]));
    ASSERT_EQ(MSG_CTRUNC, mflags & MSG_CTRUNC);
    ASSERT_EQ(before + 1, open_fds());
    close(got);
    close(p[0]);
    close(p[1]);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

/* Over VCU_FDPASS_MAX: the sender refuses, nothing is sent; a raw
 * sendmsg of that many arrives truncated and nothing stays open. */
TEST(fdpass_over_max)
{
    int sv[2], many[VCU_FDPASS_MAX + 1], got[VCU_FDPASS_MAX + 1], mflags = 0, before;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(many))];
    } c;
    struct iovec iov = { "y", 1 };
    struct msghdr m;
    unsigned int n = 0, i;
    char buf[4];

    ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
    for (i = 0; i < VCU_FDPASS_MAX + 1; i++)
        many[i] = sv[0];
    errno = 0;
    ASSERT_EQ(-1, vcu__fd_send(sv[0], "y", 1, many, VCU_FDPASS_MAX + 1, MSG_DONTWAIT));
    ASSERT_EQ(EINVAL, errno);
    ASSERT_EQ(-1, vcu__fd_recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT, got, &n, 1, &mflags));
    ASSERT_EQ(EAGAIN, errno);

    memset(&m, 0, sizeof(m));
    memset(&c, 0, sizeof(c));
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = c.b;
    m.msg_controllen = sizeof(c.b);
    CMSG_FIRSTHDR(&m)->cmsg_level = SOL_SOCKET;
    CMSG_FIRSTHDR(&m)->cmsg_type = SCM_RIGHTS;
    CMSG_FIRSTHDR(&m)->cmsg_len = CMSG_LEN(sizeof(many));
    memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), many, sizeof(many));
    ASSERT_EQ(1, sendmsg(sv[0], &m, 0));
    before = open_fds();
    ASSERT_EQ(1, vcu__fd_recv(sv[1], buf, sizeof(buf), 0, got, &n, VCU_FDPASS_MAX + 1, &mflags));
    ASSERT_EQ(MSG_CTRUNC, mflags & MSG_CTRUNC);
    ASSERT_LE(n, VCU_FDPASS_MAX);
    ASSERT_EQ(before + (int)n, open_fds());
    for (i = 0; i < n; i++)
        close(got[i]);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
