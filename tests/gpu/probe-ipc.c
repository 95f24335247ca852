/*
 * What CUDA IPC does between two processes on the GPU machine, the
 * importer either a plain child ("plain") or in the namespaces a worker's
 * jail gives it ("jail": new mount, PID, network, IPC and UTS namespaces,
 * as host-backend/daemon/jail.c makes them, the importer being the first
 * process of the new PID namespace, with a fresh /proc and a private
 * /dev/shm as a worker has).  The exporter
 * sends, over a socket pair:
 *   - a legacy memory handle (cuIpcGetMemHandle of cuMemAlloc memory
 *     holding a pattern) and an event handle (cuIpcGetEventHandle of an
 *     interprocess event it records);
 *   - a virtual memory API allocation exported as a POSIX file descriptor
 *     (cuMemExportToShareableHandle), the descriptor passed with
 *     SCM_RIGHTS.
 * The importer opens each, reads the first word and prints what it got,
 * a line each; the exporter keeps its memory until the importer is done.
 * Needs root for "jail".  Prints "probe-ipc MODE: ..." lines.
 *
 * "vm" asks what the workers of one VM need for IPC between them: two
 * exporters and one importer, each the first process of PID namespaces of
 * its own (so two exporters have the same pid), sharing one /dev/shm (a
 * folder of the host's bound over it).  Each exporter prints its event
 * handle's bytes and what /dev/shm holds; the importer opens both memory
 * and event handles and waits on each event.  In "vm" each is a child of
 * its namespace's first process, at a pid of its own (100, 101, 102, set
 * through ns_last_pid); in "vm1" each is its namespace's first, pid 1.
 * Then exporter 0 frees its memory while the importer holds it open, and
 * the importer reads it again.  The shared folder lies in /dev/shm, or
 * in $PROBE_IPC_BASE.
 *
 *   probe-ipc plain|jail|vm|vm1
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PATTERN_LEGACY 0x12345678u
#define PATTERN_VMM 0xabcdef01u

static const char *mode;

struct msg {
    CUipcMemHandle mem;
    CUipcEventHandle ev;
    uint64_t vmm_size;
    int have_vmm;
};

static const char *err_name(CUresult r)
{
    const char *s = NULL;

    cuGetErrorName(r, &s);
    return s != NULL ? s : "?";
}

#define CK(x)                                                                   \
    do {                                                                        \
        CUresult r_ = (x);                                                      \
        if (r_ != CUDA_SUCCESS) {                                               \
            printf("probe-ipc %s: %s = %s\n", mode, #x, err_name(r_));          \
            return 1;                                                           \
        }                                                                       \
    } while (0)

static int send_msg(int s, const struct msg *m, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { (void *)m, sizeof(*m) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

    memset(cbuf, 0, sizeof(cbuf));
    if (fd >= 0) {
        struct cmsghdr *c;

        mh.msg_control = cbuf;
        mh.msg_controllen = sizeof(cbuf);
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(s, &mh, 0) == (ssize_t)sizeof(*m) ? 0 : -1;
}

static int recv_msg(int s, struct msg *m, int *fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { m, sizeof(*m) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                         .msg_controllen = sizeof(cbuf) };
    struct cmsghdr *c;

    *fd = -1;
    if (recvmsg(s, &mh, 0) != (ssize_t)sizeof(*m))
        return -1;
    for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

/* The importer: each handle opened, its first word read. */
static int importer(int s)
{
    struct msg m;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d = 0;
    CUevent ev = NULL;
    unsigned int word = 0;
    CUresult r;
    int fd = -1;
    char done = 1;

    if (recv_msg(s, &m, &fd) != 0) {
        printf("probe-ipc %s: importer: no message\n", mode);
        return 1;
    }
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    printf("probe-ipc %s: importer pid %d (in its namespace)\n", mode, (int)getpid());

    r = cuIpcOpenMemHandle(&d, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r == CUDA_SUCCESS) {
        r = cuMemcpyDtoH(&word, d, sizeof(word));
        printf("probe-ipc %s: legacy memory handle: opened, read %s, word 0x%08x (%s)\n", mode,
               err_name(r), word, word == PATTERN_LEGACY ? "the exporter's" : "WRONG");
        cuIpcCloseMemHandle(d);
    } else {
        printf("probe-ipc %s: legacy memory handle: cuIpcOpenMemHandle = %s\n", mode, err_name(r));
    }

    r = cuIpcOpenEventHandle(&ev, m.ev);
    if (r == CUDA_SUCCESS) {
        r = cuEventSynchronize(ev);
        printf("probe-ipc %s: legacy event handle: opened, synchronize %s\n", mode, err_name(r));
        cuEventDestroy(ev);
    } else {
        printf("probe-ipc %s: legacy event handle: cuIpcOpenEventHandle = %s\n", mode, err_name(r));
    }

    if (m.have_vmm && fd >= 0) {
        CUmemGenericAllocationHandle h;
        CUmemAccessDesc acc;

        r = cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        if (r == CUDA_SUCCESS) {
            CUdeviceptr va = 0;

            CK(cuMemAddressReserve(&va, m.vmm_size, 0, 0, 0));
            CK(cuMemMap(va, m.vmm_size, 0, h, 0));
            memset(&acc, 0, sizeof(acc));
            acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            acc.location.id = dev;
            acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            CK(cuMemSetAccess(va, m.vmm_size, &acc, 1));
            word = 0;
            r = cuMemcpyDtoH(&word, va, sizeof(word));
            printf("probe-ipc %s: POSIX fd handle: imported, read %s, word 0x%08x (%s)\n", mode,
                   err_name(r), word, word == PATTERN_VMM ? "the exporter's" : "WRONG");
            cuMemUnmap(va, m.vmm_size);
            cuMemAddressFree(va, m.vmm_size);
            cuMemRelease(h);
        } else {
            printf("probe-ipc %s: POSIX fd handle: cuMemImportFromShareableHandle = %s\n", mode,
                   err_name(r));
        }
    } else {
        printf("probe-ipc %s: POSIX fd handle: none sent\n", mode);
    }
    if (write(s, &done, 1) != 1)
        return 1;
    return 0;
}

static void importer_exit(int s)
{
    int rc = importer(s);

    fflush(stdout);
    _exit(rc);
}

/* The importer's process: a plain child, or (jail) the child of a process
 * that made new namespaces, as the daemon starts a worker. */
static int start_importer(int s, int other)
{
    pid_t pid = fork();
    int st;

    if (pid != 0)
        return pid;
    close(other);                       /* the exporter's end */
    if (strcmp(mode, "jail") == 0) {
        pid_t in;

        if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
            perror("probe-ipc: unshare");
            _exit(1);
        }
        in = fork();
        if (in == 0) {
            if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0 ||
                mount("probe-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m") != 0) {
                perror("probe-ipc: mount");
                _exit(1);
            }
            importer_exit(s);
        }
        if (in < 0 || waitpid(in, &st, 0) != in)
            _exit(1);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
    }
    importer_exit(s);
    return -1;
}

/* vm: enters new namespaces with shmdir bound over /dev/shm, and returns
 * (never in the others) in a process of pid want there (1: the namespace's
 * first; else a child of it, the pid set through ns_last_pid). */
static int vm_jail(const char *shmdir, int want)
{
    pid_t in;
    int st;

    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        perror("probe-ipc: unshare");
        _exit(1);
    }
    in = fork();
    if (in == 0) {
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0 ||
            mount(shmdir, "/dev/shm", NULL, MS_BIND, NULL) != 0) {
            perror("probe-ipc: mount");
            _exit(1);
        }
        if (want > 1) {
            FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");

            if (f == NULL || fprintf(f, "%d", want - 1) < 0 || fclose(f) != 0) {
                perror("probe-ipc: ns_last_pid");
                _exit(1);
            }
            in = fork();
            if (in == 0)
                return 0;
            if (in < 0 || waitpid(in, &st, 0) != in)
                _exit(1);
            _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
        }
        return 0;
    }
    if (in < 0 || waitpid(in, &st, 0) != in)
        _exit(1);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}

static void vm_ls(int k)
{
    DIR *dir = opendir("/dev/shm");
    struct dirent *e;

    while (dir != NULL && (e = readdir(dir)) != NULL)
        if (e->d_name[0] != '.')
            printf("probe-ipc vm: exporter %d sees /dev/shm/%s\n", k, e->d_name);
    if (dir != NULL)
        closedir(dir);
}

static int vm_exporter(int k, int s)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    CUevent ev;
    struct msg m;
    char line[200], done;
    int i, n = 0;

    memset(&m, 0, sizeof(m));
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&d, 1 << 20));
    CK(cuMemsetD32(d, PATTERN_LEGACY + k, (1 << 20) / 4));
    CK(cuIpcGetMemHandle(&m.mem, d));
    CK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(ev, NULL));
    CK(cuIpcGetEventHandle(&m.ev, ev));
    CK(cuCtxSynchronize());
    for (i = 0; i < 64; i++)
        n += snprintf(line + n, sizeof(line) - n, "%02x", (unsigned char)m.ev.reserved[i]);
    printf("probe-ipc vm: exporter %d pid %d event handle %s\n", k, (int)getpid(), line);
    vm_ls(k);
    fflush(stdout);
    if (send_msg(s, &m, -1) != 0 || read(s, &done, 1) != 1)
        printf("probe-ipc vm: exporter %d: the importer ended without a word\n", k);
    if (k == 0) {
        size_t fr0 = 0, fr1 = 0, tot;

        /* The importer holds the memory open: free it here, then let the
         * importer read again. */
        cuMemGetInfo(&fr0, &tot);
        printf("probe-ipc vm: exporter 0: cuMemFree while open = %s\n", err_name(cuMemFree(d)));
        cuCtxSynchronize();
        cuMemGetInfo(&fr1, &tot);
        printf("probe-ipc vm: exporter 0: free memory %+lld bytes after it\n",
               (long long)fr1 - (long long)fr0);
        fflush(stdout);
        if (write(s, &done, 1) != 1 || read(s, &done, 1) != 1)
            printf("probe-ipc vm: exporter 0: no second word\n");
        /* The importer recorded our event after its own kernel-free work. */
        printf("probe-ipc vm: exporter 0: own event synchronize %s\n",
               err_name(cuEventSynchronize(ev)));
    }
    return 0;
}

static int vm_importer(int s0, int s1)
{
    struct msg m[2];
    CUdevice dev;
    CUcontext ctx;
    int k, fd;
    char done = 1;

    for (k = 0; k < 2; k++)
        if (recv_msg(k == 0 ? s0 : s1, &m[k], &fd) != 0) {
            printf("probe-ipc vm: importer: no message from %d\n", k);
            return 1;
        }
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CUdeviceptr keep = 0;
    CUevent keep_ev = NULL;

    for (k = 0; k < 2; k++) {
        CUdeviceptr d = 0;
        CUevent ev = NULL;
        unsigned int word = 0;
        CUresult r = cuIpcOpenMemHandle(&d, m[k].mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);

        if (r == CUDA_SUCCESS) {
            r = cuMemcpyDtoH(&word, d, sizeof(word));
            printf("probe-ipc vm: memory of %d: read %s, word 0x%08x (%s)\n", k, err_name(r), word,
                   word == PATTERN_LEGACY + k ? "right" : "WRONG");
            if (k == 0)
                keep = d;
            else
                cuIpcCloseMemHandle(d);
        } else {
            printf("probe-ipc vm: memory of %d: cuIpcOpenMemHandle = %s\n", k, err_name(r));
        }
        r = cuIpcOpenEventHandle(&ev, m[k].ev);
        if (r == CUDA_SUCCESS) {
            r = cuEventSynchronize(ev);
            printf("probe-ipc vm: event of %d: opened, synchronize %s\n", k, err_name(r));
            r = cuEventRecord(ev, NULL);
            printf("probe-ipc vm: event of %d: recorded by the importer %s, query %s\n", k,
                   err_name(r), err_name(cuEventQuery(ev)));
            if (k == 0)
                keep_ev = ev;
            else
                cuEventDestroy(ev);
        } else {
            printf("probe-ipc vm: event of %d: cuIpcOpenEventHandle = %s\n", k, err_name(r));
        }
    }
    fflush(stdout);
    for (k = 0; k < 2; k++)
        if (write(k == 0 ? s0 : s1, &done, 1) != 1)
            return 1;
    if (keep != 0 && read(s0, &done, 1) == 1) {
        unsigned int word = 0;
        CUresult r = cuMemcpyDtoH(&word, keep, sizeof(word));

        printf("probe-ipc vm: memory of 0 after the exporter's free: read %s, word 0x%08x\n",
               err_name(r), word);
        printf("probe-ipc vm: close after the exporter's free = %s\n",
               err_name(cuIpcCloseMemHandle(keep)));
        if (keep_ev != NULL)
            printf("probe-ipc vm: importer records the exporter's event again = %s\n",
                   err_name(cuEventRecord(keep_ev, NULL)));
        cuCtxSynchronize();
        fflush(stdout);
        if (write(s0, &done, 1) != 1)
            return 1;
    }
    return 0;
}

static int vm_main(int same_pid)
{
    char shmdir[256];
    int a[2], b[2], k, st, rc = 0;
    pid_t pid[3];

    snprintf(shmdir, sizeof(shmdir), "%s/probe-ipc-vm-%d",
             getenv("PROBE_IPC_BASE") != NULL ? getenv("PROBE_IPC_BASE") : "/dev/shm", (int)getpid());
    if (mkdir(shmdir, 01777) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, a) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, b) != 0)
        return 1;
    for (k = 0; k < 3; k++) {
        pid[k] = fork();
        if (pid[k] == 0) {
            vm_jail(shmdir, same_pid ? 1 : 100 + k);
            fflush(stdout);
            if (k < 2)
                _exit(vm_exporter(k, k == 0 ? a[0] : b[0]));
            _exit(vm_importer(a[1], b[1]));
        }
        if (k < 2)
            usleep(500 * 1000);     /* the exporters' files made one after the other */
    }
    for (k = 0; k < 3; k++)
        if (waitpid(pid[k], &st, 0) != pid[k] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("probe-ipc vm: process %d failed (status 0x%x)\n", k, st);
            rc = 1;
        }
    printf("probe-ipc vm: done\n");
    return rc;
}

int main(int argc, char **argv)
{
    CUmemAllocationProp prop;
    CUmemGenericAllocationHandle h;
    CUmemAccessDesc acc;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d, va = 0;
    CUevent ev;
    struct msg m;
    size_t gran = 0;
    int sv[2], fd = -1, st;
    pid_t pid;
    char done;
    CUresult r;

    mode = argc > 1 ? argv[1] : "plain";
    if (strcmp(mode, "vm") == 0 || strcmp(mode, "vm1") == 0)
        return vm_main(strcmp(mode, "vm1") == 0);
    if (strcmp(mode, "plain") != 0 && strcmp(mode, "jail") != 0) {
        fprintf(stderr, "usage: probe-ipc plain|jail|vm|vm1\n");
        return 2;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 1;
    pid = start_importer(sv[1], sv[0]);        /* before cuInit: no CUDA across fork */
    if (pid < 0)
        return 1;
    close(sv[1]);                       /* the importer's end: EOF when it ends */
    memset(&m, 0, sizeof(m));
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&d, 1 << 20));
    CK(cuMemsetD32(d, PATTERN_LEGACY, (1 << 20) / 4));
    CK(cuIpcGetMemHandle(&m.mem, d));
    CK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(ev, NULL));
    CK(cuIpcGetEventHandle(&m.ev, ev));

    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    r = cuMemCreate(&h, gran, &prop, 0);
    if (r == CUDA_SUCCESS) {
        CK(cuMemAddressReserve(&va, gran, 0, 0, 0));
        CK(cuMemMap(va, gran, 0, h, 0));
        memset(&acc, 0, sizeof(acc));
        acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc.location.id = dev;
        acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CK(cuMemSetAccess(va, gran, &acc, 1));
        CK(cuMemsetD32(va, PATTERN_VMM, gran / 4));
        CK(cuCtxSynchronize());
        r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        printf("probe-ipc %s: exporter: cuMemExportToShareableHandle = %s\n", mode, err_name(r));
        m.have_vmm = r == CUDA_SUCCESS;
        m.vmm_size = gran;
    } else {
        printf("probe-ipc %s: exporter: cuMemCreate with a POSIX fd handle = %s\n", mode,
               err_name(r));
    }
    CK(cuCtxSynchronize());
    fflush(stdout);
    if (send_msg(sv[0], &m, m.have_vmm ? fd : -1) != 0) {
        printf("probe-ipc %s: cannot send\n", mode);
        return 1;
    }
    if (read(sv[0], &done, 1) != 1)
        printf("probe-ipc %s: the importer ended without a word\n", mode);
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        printf("probe-ipc %s: the importer failed (status 0x%x)\n", mode, st);
    printf("probe-ipc %s: done\n", mode);
    return 0;
}
