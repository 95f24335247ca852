/*
 * Bytes with file descriptors over a unix socket (SCM_RIGHTS): the one
 * place the daemon, the workers and QEMU's session proxy build and read
 * the control message.  Both calls retry on EINTR and leave everything
 * else (partial sends, EAGAIN, what the bytes mean) to the caller.
 */
#ifndef VCU_FDPASS_H
#define VCU_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* Most descriptors one message carries either way.  A message with more
 * comes with MSG_CTRUNC and the kernel closes the rest. */
#define VCU_FDPASS_MAX 8u

/*
 * sendmsg of buf[0..len) with fds[0..nfds) attached to its first byte
 * (none when nfds is 0).  MSG_NOSIGNAL always, flags on top of it
 * (MSG_DONTWAIT).  Bytes sent, or -1 with errno (EINVAL when nfds is
 * over VCU_FDPASS_MAX).  The descriptors stay the caller's: the
 * receiver gets copies.
 */
ssize_t vcu__fd_send(int sock, const void *buf, size_t len, const int *fds, unsigned int nfds,
                     int flags);

/*
 * recvmsg into buf[0..cap), MSG_CMSG_CLOEXEC always, flags on top of it.
 * The descriptors that came are appended to fds[*nfds..max) and counted
 * in *nfds; those beyond max are closed.  Returns what recvmsg does
 * (bytes, 0 at the end, -1 with errno).  *mflags, when not NULL, gets
 * the message's flags: MSG_TRUNC for bytes lost, MSG_CTRUNC for
 * descriptors lost (more than VCU_FDPASS_MAX came, or more than max).
 */
ssize_t vcu__fd_recv(int sock, void *buf, size_t cap, int flags, int *fds, unsigned int *nfds,
                     unsigned int max, int *mflags);

#endif
