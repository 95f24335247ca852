/*
 * The keep (host-backend/common/vcu_keep.h): descriptors a VM's workers
 * hand over for the VM's other workers, each under 128 random bits the
 * daemon chose.  A VM's kept descriptors are found only through its own
 * workers' sockets; each goes when the worker that put it is reaped, or
 * with its VM.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vcu_daemon.h"
#include "vcu_fdpass.h"
#include "vcu_keep.h"
#include "vcu_proto.h"

/* One message from the worker's socket, and the descriptors that came
 * with it (up to 2 kept, the rest closed): its length, 0 at the end of
 * the socket, -1 when nothing is there.  A truncated message (longer
 * than ours, or with more descriptors) counts as a wrong one. */
static ssize_t vcu__keep_recv(int fd, struct vcu_keep_msg *m, int *fds, unsigned int *nfds)
{
    int mflags;
    ssize_t n;

    memset(m, 0, sizeof(*m));
    *nfds = 0;
    n = vcu__fd_recv(fd, m, sizeof(*m), MSG_DONTWAIT, fds, nfds, 2, &mflags);
    if (n > 0 && (mflags & (MSG_TRUNC | MSG_CTRUNC)))
        return (ssize_t)sizeof(*m) + 1;
    return n;
}

/* The worker waits for each answer before it asks again, so the socket
 * always has room; one it cannot take is its loss. */
static void vcu__keep_answer(int fd, const struct vcu_keep_msg *m, int pass)
{
    (void)vcu__fd_send(fd, m, sizeof(*m), &pass, pass >= 0 ? 1 : 0, MSG_DONTWAIT);
}

static void vcu__keep_put(vcu_vm_t *vm, vcu_sess_t *s, struct vcu_keep_msg *m, int fd)
{
    vcu_kept_t *k;

    if ((m->kind != VCU_CU_IPC_VMM && m->kind != VCU_CU_IPC_POOL) ||
        (m->kind == VCU_CU_IPC_VMM && m->size == 0) || m->dev >= VCU_CU_MAX_DEVICES) {
        m->status = VCU_S_EINVAL;
        return;
    }
    if (s->nkept >= VCU_KEEP_PER_WORKER || vm->nkept >= VCU_KEEP_PER_VM ||
        vm->d->nkept >= vm->d->keep_max) {
        m->status = VCU_S_EBUSY;
        return;
    }
    if (vm->nkept == vm->kept_cap) {
        uint32_t cap = vm->kept_cap ? 2 * vm->kept_cap : 16;
        vcu_kept_t *n = realloc(vm->kept, (size_t)cap * sizeof(*n));

        if (n == NULL) {
            m->status = VCU_S_ENOMEM;
            return;
        }
        vm->kept = n;
        vm->kept_cap = cap;
    }
    k = &vm->kept[vm->nkept];
    if (getrandom(k->token, sizeof(k->token), 0) != (ssize_t)sizeof(k->token)) {
        m->status = VCU_S_EIO;
        return;
    }
    k->fd = fd;
    k->owner = s->id;
    k->kind = m->kind;
    k->dev = m->dev;
    k->size = m->size;
    vm->nkept++;
    s->nkept++;
    vm->d->nkept++;
    memcpy(m->token, k->token, sizeof(m->token));
    m->status = VCU_S_OK;
}

/* The kept descriptor the GET in m names, or -1 (m->status says why). */
static int vcu__keep_get(vcu_vm_t *vm, struct vcu_keep_msg *m)
{
    uint32_t i;

    for (i = 0; i < vm->nkept; i++) {
        vcu_kept_t *k = &vm->kept[i];

        if (k->kind != m->kind || memcmp(k->token, m->token, sizeof(k->token)) != 0)
            continue;
        m->dev = k->dev;
        m->size = k->size;
        m->status = VCU_S_OK;
        return k->fd;
    }
    m->status = VCU_S_EINVAL;
    return -1;
}

static void vcu__keep_input(vcu_vm_t *vm, vcu_sess_t *s)
{
    struct vcu_keep_msg m;
    unsigned int nfds, i;
    int fds[2], pass = -1;
    ssize_t n = vcu__keep_recv(s->keep_fd, &m, fds, &nfds);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n <= 0) {
        /* The worker closed its end: it is ending.  What it put stays
         * until it is reaped (an importer may still be asking). */
        close(s->keep_fd);
        s->keep_fd = -1;
        for (i = 0; i < nfds; i++)
            close(fds[i]);
        return;
    }
    if (n != (ssize_t)sizeof(m) || (m.op == VCU_KEEP_PUT && nfds != 1) ||
        (m.op != VCU_KEEP_PUT && nfds != 0)) {
        m.status = VCU_S_EINVAL;
    } else if (m.op == VCU_KEEP_PUT) {
        vcu__keep_put(vm, s, &m, fds[0]);
        if (m.status == VCU_S_OK)
            nfds = 0;               /* kept */
    } else if (m.op == VCU_KEEP_GET) {
        pass = vcu__keep_get(vm, &m);
    } else {
        m.status = VCU_S_EINVAL;
    }
    for (i = 0; i < nfds; i++)
        close(fds[i]);
    if (m.status != VCU_S_OK)
        memset(m.token, 0, sizeof(m.token));
    vcu__keep_answer(s->keep_fd, &m, pass);
}

void vcu_keep_ready(vcu_vm_t *vm, int fd)
{
    vcu_sess_t *s;

    for (s = vm->sessions; s != NULL; s = s->next)
        if (s->keep_fd == fd) {
            vcu__keep_input(vm, s);
            return;
        }
}

void vcu_keep_drop(vcu_vm_t *vm, vcu_sess_t *s)
{
    uint32_t i = 0;

    if (s != NULL && s->keep_fd >= 0) {
        close(s->keep_fd);
        s->keep_fd = -1;
    }
    while (i < vm->nkept) {
        if (s != NULL && vm->kept[i].owner != s->id) {
            i++;
            continue;
        }
        close(vm->kept[i].fd);
        vm->kept[i] = vm->kept[vm->nkept - 1];
        vm->nkept--;
        vm->d->nkept--;
        if (s != NULL)
            s->nkept--;
    }
    if (s == NULL) {
        free(vm->kept);
        vm->kept = NULL;
        vm->kept_cap = 0;
    }
}
