/*
 * A host daemon (vcu-daemon, built with the backend under the sanitizers)
 * for the tests that go through the session proxy: one per libcuda path,
 * started on first use in a scratch run folder, with its workers jailed as
 * in production, and ended (SIGTERM) when the tests end.
 */
#ifndef VCU_UT_DAEMON_H
#define VCU_UT_DAEMON_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ut.h"
#include "vcu_proxy.h"

#ifndef VCU_TEST_DAEMON
#define VCU_TEST_DAEMON "build/unit/backend/vcu-daemon"
#endif
#ifndef VCU_TEST_WORKER
#define VCU_TEST_WORKER "build/unit/backend/vcu-worker"
#endif

/* What each worker's context is charged (the daemon's --ctx-bytes): small,
 * so that the tests' quotas of a few MiB hold a context and their data. */
#define UT_CTX_BYTES "1M"
#define UT_CTX_BYTES_N (1ull << 20)

typedef struct {
    char libcuda[256];
    char dir[64];
    char sock[128];
    pid_t pid;
} ut_daemon_t;

static ut_daemon_t ut_daemons[4];
static unsigned int ut_ndaemons;

static void ut_daemons_end(void)
{
    unsigned int i;

    for (i = 0; i < ut_ndaemons; i++) {
        char cmd[128];

        kill(ut_daemons[i].pid, SIGTERM);
        waitpid(ut_daemons[i].pid, NULL, 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", ut_daemons[i].dir);
        if (system(cmd) != 0) {
            /* A scratch folder left in /tmp. */
        }
    }
    ut_ndaemons = 0;
}

/* The socket of a daemon whose workers load libcuda (extra: more
 * daemon options, or NULL; they come after the defaults and override
 * them), started if need be; NULL if it would not start. */
static inline const char *ut_daemon_with(const char *libcuda, const char *const *extra)
{
    ut_daemon_t *d;
    char run[96];
    unsigned int i;
    struct stat st;

    for (i = 0; i < ut_ndaemons && extra == NULL; i++)
        if (strcmp(ut_daemons[i].libcuda, libcuda) == 0)
            return ut_daemons[i].sock;
    if (ut_ndaemons == sizeof(ut_daemons) / sizeof(ut_daemons[0]))
        ut_daemons_end();
    if (ut_ndaemons == 0)
        atexit(ut_daemons_end);
    d = &ut_daemons[ut_ndaemons];
    snprintf(d->libcuda, sizeof(d->libcuda), "%s", extra != NULL ? "" : libcuda);
    snprintf(d->dir, sizeof(d->dir), "/tmp/vcu-ut-daemon-XXXXXX");
    if (mkdtemp(d->dir) == NULL)
        return NULL;
    chmod(d->dir, 0755);
    snprintf(run, sizeof(run), "%s/run", d->dir);
    snprintf(d->sock, sizeof(d->sock), "%s/vcu.sock", run);
    d->pid = fork();
    if (d->pid == 0) {
        const char *argv[40] = { VCU_TEST_DAEMON, "--run-dir", run, "--cache-dir", "off",
                                 "--metrics", "off", "--worker", VCU_TEST_WORKER,
                                 "--libcuda", libcuda, "--ctx-bytes", UT_CTX_BYTES };
        int n = 13;

        for (i = 0; extra != NULL && extra[i] != NULL && n < 38; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        execv(VCU_TEST_DAEMON, (char *const *)argv);
        _exit(127);
    }
    if (d->pid < 0)
        return NULL;
    ut_ndaemons++;
    for (i = 0; i < 1000; i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };

        if (stat(d->sock, &st) == 0)
            return d->sock;
        if (waitpid(d->pid, NULL, WNOHANG) == d->pid) {
            fprintf(stderr, "ut: %s did not start\n", VCU_TEST_DAEMON);
            ut_ndaemons--;
            return NULL;
        }
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static inline const char *ut_daemon(const char *libcuda)
{
    return ut_daemon_with(libcuda, NULL);
}

/* The stand-in the tests run CUDA on (the Makefile's VCU_LIBCUDA). */
static inline const char *ut_daemon_cuda(void)
{
    const char *l = getenv("VCU_LIBCUDA");

    return ut_daemon(l != NULL ? l : "libcuda.so.1");
}

/* The host pid of the newest worker of px's sessions (the daemon's word,
 * from SPAWNED), waiting up to 10 s for it; -1 if none. */
static inline pid_t ut_px_worker_pid(vcu_proxy_t *px)
{
    vcu_proxy_session_stats_t ss[16];
    vcu_proxy_stats_t st;
    unsigned int i;

    for (i = 0; i < 1000; i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };

        if (vcu_proxy_stats(px, &st, ss, 16) == 0 && st.nsess > 0 && ss[st.nsess - 1].pid != 0)
            return (pid_t)ss[st.nsess - 1].pid;
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* Submits t to px and waits for its reply, the reply buffer as large as
 * the link allows (the worker refuses larger ones, as QEMU never asks
 * for them): the wire status, or 0xdead where no reply came. */
static inline uint32_t ut_px_exec(vcu_proxy_t *px, ut_req_t *t)
{
    int n = atomic_load(&t->ndone);

    t->r.resp_cap = sizeof(struct vcu_resp_hdr) + VCU_MAX_PAYLOAD;
    vcu_proxy_submit(px, &t->r);
    if (ut_wait_count(&t->ndone, n + 1) != 0)
        return 0xdeadu;
    return ut_status(t);
}

/* A session through px that offers CUDA: its id in *sid; 0, or -1. */
static inline int ut_px_open(vcu_proxy_t *px, uint64_t *sid)
{
    ut_req_t *t = ut_req_new();
    struct vcu_session_open_req o;
    struct vcu_session_open_resp r;
    int rc = -1;

    memset(&o, 0, sizeof(o));
    o.version_min = o.version_max = VCU_PROTO_VERSION;
    o.features = VCU_FEAT_ECHO | VCU_FEAT_CUDA;
    ut_req_build(t, VCU_OP_SESSION_OPEN, 0, &o, sizeof(o));
    if (ut_px_exec(px, t) == VCU_S_OK) {
        memcpy(&r, ut_resp_payload(t), sizeof(r));
        *sid = r.session;
        rc = (r.features & VCU_FEAT_CUDA) ? 0 : -1;
    }
    if (rc != 0)
        fprintf(stderr, "ut_px_open: no CUDA session\n");
    free(t);
    return rc;
}

/* Waits (10 s at most) for pid to be gone, reaped by the daemon; 0 or -1. */
static inline int ut_wait_gone(pid_t pid)
{
    unsigned int i;

    for (i = 0; i < 1000; i++) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };

        if (kill(pid, 0) != 0)
            return 0;
        nanosleep(&ts, NULL);
    }
    return -1;
}

/* One request on the control socket of the daemon behind sock (its run
 * folder's control.sock); the answer line into out.  0 or -1. */
static inline int ut_daemon_ctl(const char *sock, const char *req, char *out, size_t cap)
{
    struct sockaddr_un sa;
    size_t have = 0;
    int fd;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%.*s/control.sock",
             (int)(strrchr(sock, '/') - sock), sock);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        write(fd, req, strlen(req)) != (ssize_t)strlen(req) || write(fd, "\n", 1) != 1) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    while (have + 1 < cap) {
        ssize_t n = read(fd, out + have, cap - 1 - have);

        if (n <= 0)
            break;
        have += (size_t)n;
        if (memchr(out, '\n', have) != NULL)
            break;
    }
    close(fd);
    out[have] = '\0';
    return have > 0 ? 0 : -1;
}

/* A number the daemon reports of VM id in list-vms ("gpu_ns", ...);
 * UINT64_MAX if the VM or the key is not there. */
static inline uint64_t ut_daemon_vm_u64(const char *sock, uint64_t id, const char *key)
{
    static char buf[1 << 16];
    char pat[64], kp[64];
    const char *p, *e, *k;

    if (ut_daemon_ctl(sock, "{\"cmd\":\"list-vms\"}", buf, sizeof(buf)) != 0)
        return UINT64_MAX;
    snprintf(pat, sizeof(pat), "{\"id\":%llu,", (unsigned long long)id);
    p = strstr(buf, pat);
    if (p == NULL)
        return UINT64_MAX;
    e = strstr(p + 1, "{\"id\":");
    snprintf(kp, sizeof(kp), "\"%s\":", key);
    k = strstr(p, kp);
    if (k == NULL || (e != NULL && k > e))
        return UINT64_MAX;
    return strtoull(k + strlen(kp), NULL, 10);
}

#endif /* VCU_UT_DAEMON_H */
