/*
 * virtio-cuda session proxy: the host daemon's link (vcu_link.h).  The
 * proxy says HELLO at each connection (and again when the transport's
 * link comes back up), takes the daemon's WELCOME (the VM's slice, its
 * account and policy), SPAWNED (a session's worker, or why none) and SLICE;
 * it sends SPAWN and KILL for sessions.  The link is the transport's
 * (QEMU's chardev) or, for native users (cfg.daemon), a socket of its own
 * read by a thread here.  Also the proxy itself, made from its config and
 * freed.
 */
#include "proxy_int.h"

/* ---- the link: sending --------------------------------------------------- */

/* Sends one frame to the daemon; fds are copied (the caller keeps its
 * own).  0, or -1 when the link is down. */
int vcu__px_link_send(vcu_proxy_t *px, uint32_t type, uint64_t id, const void *body, size_t len,
                      const int *fds, unsigned int nfds)
{
    struct vcu_link_hdr h = { .type = type, .len = (uint32_t)len, .id = id };
    unsigned char buf[sizeof(h) + sizeof(struct vcu_link_hello)];
    size_t off = 0;
    int rc = 0;

    if (len > sizeof(buf) - sizeof(h) || nfds > VCU_LINK_MAX_FDS)
        return -1;
    memcpy(buf, &h, sizeof(h));
    if (len > 0)
        memcpy(buf + sizeof(h), body, len);
    if (px->lfd < 0)
        return px->link.send(px->link.opaque, buf, sizeof(h) + len, fds, nfds);
    /* The native link: small frames, a daemon that reads them at once. */
    pthread_mutex_lock(&px->lmu);
    while (off < sizeof(h) + len) {
        ssize_t n = vcu__fd_send(px->lfd, buf + off, sizeof(h) + len - off, fds,
                                 off == 0 ? nfds : 0, 0);

        if (n <= 0) {
            rc = -1;
            break;
        }
        off += (size_t)n;
    }
    pthread_mutex_unlock(&px->lmu);
    return rc;
}

/* ---- the link: what the daemon says -------------------------------------- */

static void vcu__px_close_fds(int *fds, unsigned int nfds)
{
    unsigned int i;

    for (i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

/* Maps the VM's account and policy (read-only fds from the daemon). */
static int vcu__px_map_slice(vcu_proxy_t *px, int *acct_fdp, int pol_fd, char *err,
                             size_t errlen)
{
    const struct vcu_policy *pol;
    int acct_fd = *acct_fdp, rc;
    vcu_account_t *a;
    struct stat st;

    if (fstat(pol_fd, &st) != 0 || st.st_size < (off_t)sizeof(*pol)) {
        snprintf(err, errlen, "the daemon's policy page is not one");
        return VCU_EIO;
    }
    /* Both are mapped for as long as the VM runs: they must not shrink
     * under the mapping (a load past the end would kill QEMU). */
    if (!vcu__acct_sealed(pol_fd) || !vcu__acct_sealed(acct_fd)) {
        snprintf(err, errlen, "the daemon's policy page or memory account is not sealed "
                              "against shrinking (F_SEAL_SHRINK)");
        return VCU_EIO;
    }
    pol = mmap(NULL, sizeof(*pol), PROT_READ, MAP_SHARED, pol_fd, 0);
    if (pol == MAP_FAILED || pol->magic != VCU_POLICY_MAGIC) {
        if (pol != MAP_FAILED)
            munmap((void *)pol, sizeof(*pol));
        snprintf(err, errlen, "the daemon's policy page cannot be mapped, or is not one");
        return VCU_EIO;
    }
    rc = vcu__acct_map_ro(acct_fd, &a);
    *acct_fdp = -1;                 /* closed by the map */
    if (rc != 0) {
        munmap((void *)pol, sizeof(*pol));
        snprintf(err, errlen, "the daemon's memory account cannot be mapped");
        return VCU_EIO;
    }
    vcu__acct_set_policy(a, pol);
    pthread_mutex_lock(&px->mu);
    if (px->acct != NULL && px->nold < sizeof(px->old_acct) / sizeof(px->old_acct[0])) {
        /* A reader may still look at the old ones: kept until free. */
        px->old_acct[px->nold] = px->acct;
        px->old_policy[px->nold++] = px->policy;
    } else if (px->acct != NULL) {
        vcu__acct_put(px->acct);
        munmap((void *)px->policy, sizeof(*px->policy));
    }
    px->acct = a;
    px->policy = pol;
    pthread_mutex_unlock(&px->mu);
    return 0;
}

static int vcu__px_welcome(vcu_proxy_t *px, const struct vcu_link_welcome *w, int *fds,
                           unsigned int nfds, char *err, size_t errlen)
{
    int rc;

    if (w->status != VCU_S_OK) {
        char why[sizeof(w->error) + 1];

        memcpy(why, w->error, sizeof(w->error));
        why[sizeof(w->error)] = '\0';
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "the host daemon refuses this VM: %s",
                 why[0] ? why : vcu_status_str((int)w->status));
        return w->status < VCU_S_COUNT_ && w->status != 0 ? -(int)w->status : VCU_EIO;
    }
    if (nfds != VCU_LINK_WELCOME_FDS || w->version != VCU_LINK_VERSION) {
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "the host daemon's welcome is malformed");
        return VCU_EIO;
    }
    rc = vcu__px_map_slice(px, &fds[0], fds[1], err, errlen);
    vcu__px_close_fds(fds, nfds);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&px->mu);
    px->slice = w->slice;
    px->vm_id = w->vm_id;
    memcpy(px->cuda_error, w->cuda_error,
           sizeof(px->cuda_error) < sizeof(w->cuda_error) ? sizeof(px->cuda_error)
                                                         : sizeof(w->cuda_error));
    px->cuda_error[sizeof(px->cuda_error) - 1] = '\0';
    px->link_gen++;
    px->link_up = true;
    pthread_mutex_unlock(&px->mu);
    return 0;
}

/* SPAWNED: the daemon's word on a session's worker. */
static int vcu__px_spawned(vcu_proxy_t *px, uint64_t id, const struct vcu_link_spawned *r,
                           int *fds, unsigned int nfds)
{
    vcu__psess_t *s = NULL, *c;
    uint64_t slot = id & 0xffffffffu;

    if ((r->status == VCU_S_OK) != (nfds == VCU_LINK_SPAWNED_FDS) ||
        (r->status != VCU_S_OK && nfds != 0)) {
        vcu__px_close_fds(fds, nfds);
        return VCU_EIO;
    }
    pthread_mutex_lock(&px->mu);
    if (slot >= 1 && slot <= px->max_sessions && px->sessions[slot - 1] != NULL &&
        px->sessions[slot - 1]->id == id)
        s = px->sessions[slot - 1];
    for (c = px->closing; s == NULL && c != NULL; c = c->zombie_next)
        if (c->id == id)
            s = c;
    for (c = px->zombies; s == NULL && c != NULL; c = c->zombie_next)
        if (c->id == id)
            s = c;
    if (s != NULL) {
        pthread_mutex_lock(&s->mu);
        if (s->spawn == VCU__PX_SPAWN_PENDING) {
            if (r->status == VCU_S_OK) {
                s->spawn = VCU__PX_SPAWN_OK;
                s->pidfd = fds[0];
                s->pid = r->pid;
                s->acct_slot = r->acct_slot;
                fds[0] = -1;
            } else {
                s->spawn = VCU__PX_SPAWN_FAILED;
                s->spawn_status = r->status < VCU_S_COUNT_ && r->status != 0 ? r->status
                                                                            : VCU_S_EIO;
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&px->mu);
    /* A session reset meanwhile: its worker was asked to end already. */
    vcu__px_close_fds(fds, nfds);
    return 0;
}

VCU_EXPORT int vcu_proxy_link_input(vcu_proxy_t *px, const void *frame, size_t len, int *fds,
                                    unsigned int nfds, char *err, size_t errlen)
{
    struct vcu_link_hdr h;
    const unsigned char *body = (const unsigned char *)frame + sizeof(h);

    if (len < sizeof(h)) {
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "a short frame from the host daemon");
        return VCU_EIO;
    }
    memcpy(&h, frame, sizeof(h));
    if (h.len != len - sizeof(h)) {
        vcu__px_close_fds(fds, nfds);
        snprintf(err, errlen, "a frame from the host daemon of the wrong length");
        return VCU_EIO;
    }
    switch (h.type) {
    case VCU_LINK_WELCOME: {
        struct vcu_link_welcome w;

        if (h.len != sizeof(w))
            break;
        memcpy(&w, body, sizeof(w));
        return vcu__px_welcome(px, &w, fds, nfds, err, errlen);
    }
    case VCU_LINK_SPAWNED: {
        struct vcu_link_spawned r;

        if (h.len != sizeof(r))
            break;
        memcpy(&r, body, sizeof(r));
        if (vcu__px_spawned(px, h.id, &r, fds, nfds) != 0) {
            snprintf(err, errlen, "a SPAWNED from the host daemon with the wrong descriptors");
            return VCU_EIO;
        }
        return 0;
    }
    case VCU_LINK_SLICE:
        if (h.len != sizeof(struct vcu_link_slice) || nfds != 0)
            break;
        pthread_mutex_lock(&px->mu);
        memcpy(&px->slice, body, sizeof(px->slice));
        pthread_mutex_unlock(&px->mu);
        return 0;
    default:
        break;
    }
    vcu__px_close_fds(fds, nfds);
    snprintf(err, errlen, "a frame from the host daemon of the wrong type or size (type %u)",
             h.type);
    return VCU_EIO;
}

VCU_EXPORT void vcu_proxy_link_down(vcu_proxy_t *px)
{
    pthread_mutex_lock(&px->mu);
    px->link_up = false;
    pthread_mutex_unlock(&px->mu);
}

VCU_EXPORT void vcu_proxy_link_up(vcu_proxy_t *px)
{
    (void)vcu__px_link_send(px, VCU_LINK_HELLO, 0, &px->hello, sizeof(px->hello), NULL, 0);
}

VCU_EXPORT int vcu_proxy_link_ready(vcu_proxy_t *px)
{
    int up;

    pthread_mutex_lock(&px->mu);
    up = px->link_up;
    pthread_mutex_unlock(&px->mu);
    return up;
}

/* ---- the native link (cfg.daemon) ----------------------------------------- */

/* Reads one whole frame (and the descriptors that came with its bytes)
 * from the native link.  0, or -1 when the link ended or broke. */
static int vcu__px_link_read(vcu_proxy_t *px, unsigned char *buf, size_t cap, size_t *len,
                             int *fds, unsigned int *nfds)
{
    size_t have = 0, want = sizeof(struct vcu_link_hdr);

    *nfds = 0;
    while (have < want) {
        ssize_t n = vcu__fd_recv(px->lfd, buf + have, want - have, 0, fds, nfds,
                                 VCU_LINK_MAX_FDS, NULL);

        if (n <= 0)
            goto broken;
        have += (size_t)n;
        if (have == sizeof(struct vcu_link_hdr) && want == have) {
            struct vcu_link_hdr h;

            memcpy(&h, buf, sizeof(h));
            if (h.len > cap - sizeof(h) || h.len > VCU_LINK_MAX_BODY)
                goto broken;
            want += h.len;
        }
    }
    *len = have;
    return 0;
broken:
    vcu__px_close_fds(fds, *nfds);
    *nfds = 0;
    return -1;
}

static void *vcu__px_link_thread(void *arg)
{
    vcu_proxy_t *px = arg;
    unsigned char buf[sizeof(struct vcu_link_hdr) + VCU_LINK_MAX_BODY];

    for (;;) {
        int fds[VCU_LINK_MAX_FDS];
        unsigned int nfds;
        size_t len;
        char err[256];

        if (vcu__px_link_read(px, buf, sizeof(buf), &len, fds, &nfds) != 0)
            break;
        if (vcu_proxy_link_input(px, buf, len, fds, nfds, err, sizeof(err)) != 0) {
            fprintf(stderr, "vcu-proxy: %s\n", err);
            break;
        }
    }
    vcu_proxy_link_down(px);
    return NULL;
}

/* Connects to the daemon, says HELLO and takes its WELCOME (timeout_ms at
 * most), then serves the link on a thread. */
static int vcu__px_connect(vcu_proxy_t *px, const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa;
    unsigned char buf[sizeof(struct vcu_link_hdr) + VCU_LINK_MAX_BODY];
    struct pollfd p;
    int fds[VCU_LINK_MAX_FDS];
    unsigned int nfds;
    size_t len;
    int rc;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errlen, "daemon socket path too long: %s", path);
        return VCU_EINVAL;
    }
    strcpy(sa.sun_path, path);
    px->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (px->lfd < 0 || connect(px->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(err, errlen, "cannot reach the host daemon at %s: %s (is vcu-daemon running?)",
                 path, strerror(errno));
        return VCU_ENODEV;
    }
    if (vcu__px_link_send(px, VCU_LINK_HELLO, 0, &px->hello, sizeof(px->hello), NULL, 0) != 0) {
        snprintf(err, errlen, "the host daemon at %s closed the link", path);
        return VCU_ENODEV;
    }
    p.fd = px->lfd;
    p.events = POLLIN;
    p.revents = 0;
    if (poll(&p, 1, VCU__PX_WELCOME_MS) <= 0) {
        snprintf(err, errlen, "the host daemon at %s did not answer", path);
        return VCU_ENODEV;
    }
    if (vcu__px_link_read(px, buf, sizeof(buf), &len, fds, &nfds) != 0) {
        snprintf(err, errlen, "the host daemon at %s closed the link", path);
        return VCU_ENODEV;
    }
    rc = vcu_proxy_link_input(px, buf, len, fds, nfds, err, errlen);
    if (rc != 0)
        return rc;
    if (!vcu_proxy_link_ready(px)) {
        snprintf(err, errlen, "the host daemon at %s did not welcome this VM", path);
        return VCU_EIO;
    }
    if (pthread_create(&px->lthread, NULL, vcu__px_link_thread, px) != 0) {
        snprintf(err, errlen, "out of threads");
        return VCU_ENOMEM;
    }
    px->lthread_on = true;
    return 0;
}

/* ---- the proxy --------------------------------------------------------- */

static bool vcu__px_name_ok(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '.' || *s == '_'))
            return false;
    return true;
}

static bool vcu__px_gpus_ok(const char *s)
{
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == ':' || *s == ','))
            return false;
    return true;
}

/* The config's checks, and the HELLO it makes. */
static int vcu__px_hello(vcu_proxy_t *px, const vcu_proxy_config_t *cfg, char *err, size_t errlen)
{
    struct vcu_link_hello *h = &px->hello;
    const char *name = cfg->name != NULL ? cfg->name : "";
    const char *gpus = cfg->gpus != NULL ? cfg->gpus : "0";

    if (cfg->compute_share > 10000) {
        snprintf(err, errlen, "compute-share must be 1..10000");
        return VCU_EINVAL;
    }
    if (cfg->compute_cap > 100) {
        snprintf(err, errlen, "compute-cap must be a percentage, 1..100");
        return VCU_EINVAL;
    }
    if (cfg->sms > VCU_PROXY_MAX_SMS) {
        snprintf(err, errlen, "sms must be 1..%u (0: isolated mode), not %u", VCU_PROXY_MAX_SMS,
                 cfg->sms);
        return VCU_EINVAL;
    }
    /* A packed VM's share of the GPU is its SMs, side by side with the
     * others: there is no turn to take. */
    if (cfg->sms != 0 && (cfg->compute_share != 0 || cfg->compute_cap != 0)) {
        snprintf(err, errlen, "sms (packed mode) does not go with compute-share or compute-cap "
                              "(isolated mode): a packed VM's share is its SMs");
        return VCU_EINVAL;
    }
    if (strlen(name) >= sizeof(h->name) || !vcu__px_name_ok(name)) {
        snprintf(err, errlen, "the VM's name must be at most %zu of [A-Za-z0-9._-]",
                 sizeof(h->name) - 1);
        return VCU_EINVAL;
    }
    if (strlen(gpus) >= sizeof(h->gpus) || !vcu__px_gpus_ok(gpus)) {
        snprintf(err, errlen, "gpus must be host indices or GPU- UUIDs separated by ':'");
        return VCU_EINVAL;
    }
    if (cfg->max_sessions > VCU__PX_MAX_SESSIONS) {
        snprintf(err, errlen, "at most %u sessions", VCU__PX_MAX_SESSIONS);
        return VCU_EINVAL;
    }
    if (cfg->module_cache < VCU_PROXY_MODCACHE_SHARED ||
        cfg->module_cache > VCU_PROXY_MODCACHE_PRIVATE) {
        snprintf(err, errlen, "module-cache must be shared, private or off");
        return VCU_EINVAL;
    }
    memset(h, 0, sizeof(*h));
    h->version = VCU_LINK_VERSION;
    h->flags = (cfg->capture_printf ? VCU_LINK_F_CAPTURE_PRINTF : 0) |
               (cfg->module_cache == VCU_PROXY_MODCACHE_OFF ? VCU_LINK_F_NO_MODCACHE : 0) |
               (cfg->module_cache == VCU_PROXY_MODCACHE_PRIVATE ? VCU_LINK_F_PRIVATE_MODCACHE : 0);
    h->mem_quota = cfg->mem_quota;
    h->max_sessions = px->max_sessions;
    h->compute_share = cfg->compute_share;
    h->compute_cap = cfg->compute_cap;
    h->sms = cfg->sms;
    h->ring_bytes = px->ring_bytes;
    h->spin_us = px->spin_us;
    h->qemu_pid = (uint32_t)getpid();
    snprintf(h->name, sizeof(h->name), "%s", name);
    snprintf(h->gpus, sizeof(h->gpus), "%s", gpus);
    return 0;
}

/* The reader's spin and the submitter's poll: the config's, else the
 * environment's (VCU_SPIN_US, VCU_POLL_US), else as the CPUs allow. */
static void vcu__px_spin_config(vcu_proxy_t *px, const vcu_proxy_config_t *cfg)
{
    const char *e;
    unsigned long poll_us;

    px->spin_us = cfg->spin_us;
    if (px->spin_us == 0) {
        e = getenv("VCU_SPIN_US");
        /* A spinning consumer holds a CPU that the producer may need:
         * with few CPUs (a vCPU thread, the reader, the worker and its
         * executor all want one) it only delays the wake-up. */
        if (e != NULL && e[0] != '\0')
            px->spin_us = (unsigned int)strtoul(e, NULL, 10);
        else
            px->spin_us = sysconf(_SC_NPROCESSORS_ONLN) >= VCU__PX_SPIN_MIN_CPUS
                              ? VCU__PX_SPIN_US_DEFAULT
                              : 0;
        if (px->spin_us > 1000)
            px->spin_us = 1000;
    }
    e = getenv("VCU_POLL_US");
    poll_us = e != NULL && e[0] != '\0' ? strtoul(e, NULL, 10) : VCU__PX_POLL_US;
    /* Bounded: QEMU's thread holds the BQL meanwhile. */
    if (poll_us > 100)
        poll_us = 100;
    if (poll_us > px->spin_us)
        poll_us = px->spin_us;
    px->poll_ns = (uint64_t)poll_us * 1000u;
}

VCU_EXPORT int vcu_proxy_new(const vcu_proxy_config_t *cfg, vcu_proxy_t **out, char *err,
                             size_t errlen)
{
    vcu_proxy_t *px;
    int rc;

    *out = NULL;
    if (cfg == NULL || (cfg->daemon == NULL) == (cfg->link == NULL) ||
        (cfg->link != NULL && cfg->link->send == NULL)) {
        snprintf(err, errlen, "the proxy needs the host daemon's socket or a link to it");
        return VCU_EINVAL;
    }
    if (cfg->ring_bytes != 0 &&
        (cfg->ring_bytes < VCU_IPC_REQ_RING_MIN || cfg->ring_bytes > VCU_IPC_REQ_RING_MAX ||
         (cfg->ring_bytes & (cfg->ring_bytes - 1)) != 0)) {
        snprintf(err, errlen, "the request ring must be a power of two of %u..%u bytes",
                 VCU_IPC_REQ_RING_MIN, VCU_IPC_REQ_RING_MAX);
        return VCU_EINVAL;
    }
    px = calloc(1, sizeof(*px));
    if (px == NULL)
        goto enomem;
    px->lfd = -1;
    px->max_sessions = cfg->max_sessions ? cfg->max_sessions : VCU__PX_DEFAULT_SESSIONS;
    px->capture_printf = cfg->capture_printf;
    px->ring_bytes = cfg->ring_bytes ? cfg->ring_bytes : VCU_IPC_REQ_RING_DEFAULT;
    vcu__px_spin_config(px, cfg);
    px->next_gen = 1;
    px->pbuf = malloc(VCU_IPC_MAX_RESP_BODY);
    px->sessions = calloc(px->max_sessions, sizeof(*px->sessions));
    if (px->sessions == NULL || px->pbuf == NULL || pthread_mutex_init(&px->mu, NULL) != 0 ||
        pthread_mutex_init(&px->lmu, NULL) != 0) {
        free(px->pbuf);
        free(px->sessions);
        free(px);
        goto enomem;
    }
    rc = vcu__px_hello(px, cfg, err, errlen);
    if (rc != 0) {
        vcu_proxy_free(px);
        return rc;
    }
    if (cfg->link != NULL) {
        px->link = *cfg->link;
        vcu_proxy_link_up(px);
    } else {
        rc = vcu__px_connect(px, cfg->daemon, err, errlen);
        if (rc != 0) {
            vcu_proxy_free(px);
            return rc;
        }
    }
    *out = px;
    return 0;
enomem:
    snprintf(err, errlen, "out of memory");
    return VCU_ENOMEM;
}

VCU_EXPORT void vcu_proxy_free(vcu_proxy_t *px)
{
    unsigned int i;

    if (px == NULL)
        return;
    vcu_proxy_reset(px);
    if (px->lfd >= 0) {
        /* The daemon ends our workers when the link closes. */
        shutdown(px->lfd, SHUT_RDWR);
        if (px->lthread_on)
            pthread_join(px->lthread, NULL);
        close(px->lfd);
    }
    pthread_mutex_destroy(&px->lmu);
    pthread_mutex_destroy(&px->mu);
    for (i = 0; i < px->nold; i++) {
        vcu__acct_put(px->old_acct[i]);
        munmap((void *)px->old_policy[i], sizeof(struct vcu_policy));
    }
    if (px->acct != NULL) {
        vcu__acct_put(px->acct);
        munmap((void *)px->policy, sizeof(struct vcu_policy));
    }
    free(px->sessions);
    free(px->pbuf);
    free(px);
}

VCU_EXPORT const char *vcu_proxy_cuda_error(const vcu_proxy_t *px)
{
    return px->cuda_error[0] ? px->cuda_error : NULL;
}
