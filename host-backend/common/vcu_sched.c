/*
 * The share group (vcu_sched.h, which says how it works): opening and
 * mapping the area, its lock, the step that moves the grant, and each
 * party's calls but the launch path's, which stay inline in the header.
 */
#include "vcu_sched.h"

/* A worker in its jail sees no other process: every party named in the
 * area counts as alive, and the daemon, which reaps them all, frees the
 * slots and the lock of those that die (vcu__sched_party_gone()). */
static int vcu__sched_party_named(uint32_t pid)
{
    return pid != 0;
}

static int vcu__sched_pid_alive(uint32_t pid)
{
    if (pid == 0 || pid > (uint32_t)INT32_MAX)
        return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

void vcu__sched_view(vcu_sched_t *sc, void *p, uint32_t pid)
{
    memset(sc, 0, sizeof(*sc));
    sc->hdr = p;
    sc->vm = (struct vcu_sched_vm *)(sc->hdr + 1);
    sc->w = (struct vcu_sched_worker *)(sc->vm + VCU_SCHED_VMS);
    sc->vm_slot = -1;
    sc->w_slot = -1;
    sc->pid = pid;
    sc->alive = vcu__sched_pid_alive;
    sc->clock = vcu__sched_now;
}

void vcu__sched_format(void *p)
{
    struct vcu_sched_hdr *h = p;

    memset(p, 0, VCU_SCHED_LEN);
    h->nvms = VCU_SCHED_VMS;
    h->nworkers = VCU_SCHED_WORKERS;
    atomic_thread_fence(memory_order_seq_cst);
    h->magic = VCU_SCHED_MAGIC;
}

int vcu__sched_open(const char *path, int create, vcu_sched_t **out, char *err,
                    size_t errlen)
{
    vcu_sched_t *sc;
    struct stat st;
    void *p;
    int fd;

    *out = NULL;
    if (path == NULL || path[0] != '/') {
        snprintf(err, errlen, "share-group must be an absolute path");
        return -1;
    }
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT : 0), 0600);
    if (fd < 0) {
        snprintf(err, errlen, "share-group %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX) != 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "share-group %s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0022)) {
        snprintf(err, errlen, "share-group %s: not a regular file of ours, or writable by others",
                 path);
        goto fail;
    }
    if (st.st_size == 0 && create) {
        if (ftruncate(fd, (off_t)VCU_SCHED_LEN) != 0) {
            snprintf(err, errlen, "share-group %s: %s", path, strerror(errno));
            goto fail;
        }
        st.st_size = (off_t)VCU_SCHED_LEN;
        p = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "share-group %s: cannot map", path);
            goto fail;
        }
        vcu__sched_format(p);
    } else if ((uint64_t)st.st_size != VCU_SCHED_LEN) {
        snprintf(err, errlen, "share-group %s: not a share group (size)", path);
        goto fail;
    } else {
        p = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            snprintf(err, errlen, "share-group %s: cannot map", path);
            goto fail;
        }
        if (((struct vcu_sched_hdr *)p)->magic != VCU_SCHED_MAGIC) {
            munmap(p, VCU_SCHED_LEN);
            snprintf(err, errlen, "share-group %s: not a share group (magic)", path);
            goto fail;
        }
    }
    flock(fd, LOCK_UN);
    close(fd);
    sc = malloc(sizeof(*sc));
    if (sc == NULL) {
        munmap(p, VCU_SCHED_LEN);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    vcu__sched_view(sc, p, (uint32_t)getpid());
    *out = sc;
    return 0;

fail:
    close(fd);
    return -1;
}

int vcu__sched_map_fd(int fd, uint32_t party, vcu_sched_t **out, char *err,
                      size_t errlen)
{
    struct stat st;
    vcu_sched_t *sc;
    void *p;

    *out = NULL;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != VCU_SCHED_LEN || party == 0) {
        close(fd);
        snprintf(err, errlen, "the share group is not one (size, or no party id)");
        return -1;
    }
    p = mmap(NULL, VCU_SCHED_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED || ((struct vcu_sched_hdr *)p)->magic != VCU_SCHED_MAGIC) {
        if (p != MAP_FAILED)
            munmap(p, VCU_SCHED_LEN);
        snprintf(err, errlen, "the share group cannot be mapped, or is not one");
        return -1;
    }
    sc = malloc(sizeof(*sc));
    if (sc == NULL) {
        munmap(p, VCU_SCHED_LEN);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    vcu__sched_view(sc, p, party);
    sc->alive = vcu__sched_party_named;
    *out = sc;
    return 0;
}

void vcu__sched_close(vcu_sched_t *sc)
{
    if (sc == NULL)
        return;
    munmap(sc->hdr, VCU_SCHED_LEN);
    free(sc);
}

static void vcu__sched_lock(vcu_sched_t *sc)
{
    uint32_t cur = 0, seen = 0;
    uint64_t since = 0;
    unsigned int spins = 0;

    while (!atomic_compare_exchange_weak(&sc->hdr->lock, &cur, sc->pid)) {
        if (cur == 0)
            continue;
        if (++spins < 64) {
            cur = 0;
            continue;
        }
        /* Held a while: a dead holder, or one past the bound, loses it. */
        if (cur != seen) {
            seen = cur;
            since = sc->clock();
        }
        if (!sc->alive(cur) || sc->clock() - since > VCU__SCHED_LOCK_NS) {
            if (atomic_compare_exchange_strong(&sc->hdr->lock, &cur, sc->pid))
                return;
        }
        cur = 0;
        sched_yield();
    }
}

static void vcu__sched_unlock(vcu_sched_t *sc)
{
    uint32_t me = sc->pid;

    atomic_compare_exchange_strong(&sc->hdr->lock, &me, 0);
}

static bool vcu__sched_vm_live(vcu_sched_t *sc, uint32_t i)
{
    uint32_t pid = atomic_load(&sc->vm[i].pid);

    return pid != 0 && sc->alive(pid);
}

/* Worker slot j, if it is a live worker of VM i. */
static bool vcu__sched_w_of(vcu_sched_t *sc, uint32_t j, uint32_t i)
{
    uint32_t pid = atomic_load(&sc->w[j].pid);

    return pid != 0 && atomic_load(&sc->w[j].vm) == i && sc->alive(pid);
}

/* Whether VM i has a live worker with want (or busy) set. */
static bool vcu__sched_any(vcu_sched_t *sc, uint32_t i, bool busy)
{
    uint32_t j;

    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(busy ? &sc->w[j].busy : &sc->w[j].want) == 0)
            continue;
        if (vcu__sched_w_of(sc, j, i))
            return true;
    }
    return false;
}

static void vcu__sched_refill(vcu_sched_t *sc, uint32_t i, uint64_t now)
{
    struct vcu_sched_vm *v = &sc->vm[i];
    uint32_t cap = vcu__sched_cap(v);
    uint64_t last = atomic_load(&v->refill_ns);
    int64_t t = atomic_load(&v->tokens), add;

    atomic_store(&v->refill_ns, now);
    if (cap == 0 || now <= last)
        return;
    add = (now - last > VCU__SCHED_BURST_NS * 100) ? (int64_t)VCU__SCHED_BURST_NS
                                                    : (int64_t)((now - last) * cap / 100);
    /* A debt is at most a slice and a drain (a garbage one is bounded
     * too: the VM waits seconds, not forever). */
    if (t < -(int64_t)(VCU__SCHED_DRAIN_NS + VCU__SCHED_BURST_NS))
        t = -(int64_t)(VCU__SCHED_DRAIN_NS + VCU__SCHED_BURST_NS);
    t += add;
    if (t > (int64_t)VCU__SCHED_BURST_NS)
        t = (int64_t)VCU__SCHED_BURST_NS;
    atomic_store(&v->tokens, t);
}

/* Whether VM i may be granted now: alive, wanting, within its cap. */
static bool vcu__sched_eligible(vcu_sched_t *sc, uint32_t i)
{
    if (!vcu__sched_vm_live(sc, i) || !vcu__sched_any(sc, i, false))
        return false;
    return vcu__sched_cap(&sc->vm[i]) == 0 ||
           atomic_load(&sc->vm[i].tokens) >= (int64_t)VCU_SCHED_SLICE_NS;
}

static uint64_t vcu__sched_add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/*
 * Charges VM i the GPU time from..to: all of it to its used time and cap
 * budget, the part since contention began to its virtual time.  A charge
 * never covers time already charged.
 */
static void vcu__sched_charge(vcu_sched_t *sc, uint32_t i, uint64_t from, uint64_t to)
{
    struct vcu_sched_vm *v = &sc->vm[i];
    uint64_t until = atomic_load(&v->charged_until), cont = atomic_load(&sc->hdr->contended_ns);
    uint64_t d, dv;

    if (from < until)
        from = until;
    if (to <= from)
        return;
    d = to - from;
    atomic_store(&v->charged_until, to);
    atomic_store(&v->used_ns, vcu__sched_add_sat(atomic_load(&v->used_ns), d));
    if (d > VCU__SCHED_CHARGE_MAX)
        d = VCU__SCHED_CHARGE_MAX;
    if (vcu__sched_cap(v) != 0)
        atomic_store(&v->tokens, atomic_load(&v->tokens) - (int64_t)d);
    if (cont != 0 && cont < to) {
        dv = to - (cont > from ? cont : from);
        if (dv > VCU__SCHED_CHARGE_MAX)
            dv = VCU__SCHED_CHARGE_MAX;
        atomic_store(&v->vtime, vcu__sched_add_sat(atomic_load(&v->vtime),
                                                   dv * VCU__SCHED_WSCALE / vcu__sched_weight(v)));
    }
}

/* Latest drain of VM i's workers within [lo, hi], else lo. */
static uint64_t vcu__sched_drain_end(vcu_sched_t *sc, uint32_t i, uint64_t lo, uint64_t hi)
{
    uint64_t end = lo, t;
    uint32_t j;

    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(&sc->w[j].pid) == 0 || atomic_load(&sc->w[j].vm) != i)
            continue;
        t = atomic_load(&sc->w[j].drained_ns);
        if (t > end && t <= hi)
            end = t;
    }
    return end;
}

/* Whether holder v, charged so far, still has no more virtual time than
 * any other eligible VM would start a slice with. */
static bool vcu__sched_least(vcu_sched_t *sc, uint32_t v, uint64_t vclock)
{
    uint64_t mine = atomic_load(&sc->vm[v].vtime), eff;
    uint32_t i;

    for (i = 0; i < VCU_SCHED_VMS; i++) {
        if (i == v || !vcu__sched_eligible(sc, i))
            continue;
        eff = atomic_load(&sc->vm[i].vtime);
        if (eff < vclock)
            eff = vclock;
        if (eff < mine)
            return false;
    }
    return true;
}

/* The step's view of the grant's times, read once under the lock. */
struct vcu__sched_at {
    uint64_t now, start, first, held_from, vclock;
    bool others;
};

/* A holder not yet revoked: renews its slice, lets an idle lone holder
 * go, or starts the revoke.  Returns the grant word as it now stands. */
static uint32_t vcu__sched_hold_running(vcu_sched_t *sc, struct vcu__sched_at *t, uint32_t v,
                                        uint32_t g)
{
    struct vcu_sched_hdr *h = sc->hdr;
    uint64_t now = t->now, first = t->first, held_from = t->held_from;
    bool wants = vcu__sched_any(sc, v, false), busy = vcu__sched_any(sc, v, true);
    uint32_t cap = vcu__sched_cap(&sc->vm[v]);
    uint64_t dl = atomic_load(&h->deadline_ns);
    bool spent = cap != 0 && first <= now &&
                 atomic_load(&sc->vm[v].tokens) - (int64_t)(now - first) <= 0;

    if (t->others && atomic_load(&h->contended_ns) == 0)
        atomic_store(&h->contended_ns, now);
    /* At its deadline a holder that would be chosen again anyway
     * (weight 75 against 25: three slices in a row) goes on,
     * charged so far, without a drain. */
    if (t->others && wants && !spent && now >= dl) {
        vcu__sched_charge(sc, v, held_from, now);
        if (vcu__sched_least(sc, v, t->vclock))
            t->others = false;
    }
    if ((t->others && (now >= dl || !wants)) || spent) {
        g |= VCU_SCHED_REVOKING;
        atomic_store(&h->revoke_ns, now);
        atomic_store(&h->grant, g);
    } else if (!wants && !busy) {
        /* Idle and alone: let go, charging up to its last drain. */
        vcu__sched_charge(sc, v, first, vcu__sched_drain_end(sc, v, t->start, now));
        atomic_store(&h->grant, 0);
        g = 0;
    } else if (now >= dl) {
        /* Alone (or still the least served): a new slice, no
         * switch.  The time so far was held with work on the GPU. */
        int64_t tok;

        vcu__sched_charge(sc, v, held_from, now);
        tok = atomic_load(&sc->vm[v].tokens);
        atomic_store(&h->start_ns, now);
        atomic_store(&h->first_ns, first != UINT64_MAX ? now : 0);
        atomic_store(&h->deadline_ns,
                     now + (cap != 0 && tok < (int64_t)VCU_SCHED_SLICE_NS
                                ? (uint64_t)(tok > 0 ? tok : 0)
                                : VCU_SCHED_SLICE_NS));
    }
    return g;
}

/* A revoked holder: the grant goes once its workers have drained (or
 * past VCU__SCHED_DRAIN_NS).  Returns the grant word as it now stands. */
static uint32_t vcu__sched_hold_revoking(vcu_sched_t *sc, const struct vcu__sched_at *t,
                                         uint32_t v, uint32_t g)
{
    struct vcu_sched_hdr *h = sc->hdr;
    uint64_t now = t->now, rv = atomic_load(&h->revoke_ns);

    if (rv > now || rv < t->start)
        rv = now;
    if (!vcu__sched_any(sc, v, true) || now - rv > VCU__SCHED_DRAIN_NS) {
        /* A holder that never drained is charged until now: it
         * kept the others waiting that long. */
        uint64_t end = vcu__sched_any(sc, v, true) ? now : vcu__sched_drain_end(sc, v, rv, now);

        vcu__sched_charge(sc, v, t->held_from, end);
        atomic_store(&h->grant, 0);
        g = 0;
    }
    return g;
}

/* Nobody holds the grant: the eligible VM with the least virtual time, a
 * VM back from idle counting from the group's clock.  Returns its number
 * (slot + 1, 0 for none) and its virtual time in *beff. */
static uint32_t vcu__sched_pick(vcu_sched_t *sc, struct vcu__sched_at *t, uint64_t *beff)
{
    uint32_t i, best = 0;

    for (i = 0; i < VCU_SCHED_VMS; i++) {
        uint64_t eff;

        if (!vcu__sched_eligible(sc, i))
            continue;
        eff = atomic_load(&sc->vm[i].vtime);
        if (eff < t->vclock)
            eff = t->vclock;
        if (best == 0 || eff < *beff) {
            if (best != 0)
                t->others = true;
            best = i + 1;
            *beff = eff;
        } else {
            t->others = true;
        }
    }
    return best;
}

/* Grants the GPU to VM best (slot + 1) for a new slice from now. */
static void vcu__sched_grant(vcu_sched_t *sc, uint32_t best, uint64_t beff, bool others,
                             uint64_t now)
{
    struct vcu_sched_hdr *h = sc->hdr;
    struct vcu_sched_vm *v = &sc->vm[best - 1];
    uint64_t slice = VCU_SCHED_SLICE_NS;

    if (vcu__sched_cap(v) != 0 && atomic_load(&v->tokens) < (int64_t)slice)
        slice = (uint64_t)atomic_load(&v->tokens);
    atomic_store(&v->vtime, beff);
    atomic_store(&v->grants, atomic_load(&v->grants) + 1);
    atomic_store(&h->vclock, beff);
    atomic_store(&h->gen, atomic_load(&h->gen) + 1);
    atomic_store(&h->start_ns, now);
    atomic_store(&h->first_ns, 0);
    atomic_store(&h->deadline_ns, now + slice);
    atomic_store(&h->contended_ns, others ? now : 0);
    atomic_store(&h->revoke_ns, 0);
    atomic_store(&h->grant, best);
}

/*
 * The scheduler's one decision point, under the lock, at time now (any
 * party's CLOCK_MONOTONIC; tests simulate it).  Revokes a holder whose
 * slice is over while another VM wants (or at once if it has nothing to
 * run, or its cap is spent), renews a lone holder's slice, moves a revoked
 * grant on once its workers have drained (or past VCU__SCHED_DRAIN_NS),
 * and grants the GPU to the eligible VM with the least virtual time.
 */
static void vcu__sched_step_locked(vcu_sched_t *sc, uint64_t now)
{
    struct vcu_sched_hdr *h = sc->hdr;
    uint32_t g = atomic_load(&h->grant), hv = (g & ~VCU_SCHED_REVOKING), i, best;
    struct vcu__sched_at t = { .now = now, .others = false };
    uint64_t beff = 0;

    t.start = atomic_load(&h->start_ns);
    t.vclock = atomic_load(&h->vclock);
    t.first = atomic_load(&h->first_ns);
    if (hv > VCU_SCHED_VMS) {       /* garbage: no grant */
        atomic_store(&h->grant, 0);
        g = hv = 0;
    }
    if (t.start > now)
        t.start = now;
    /* Charges run from the grant's first issue (the time until the
     * holder's workers woke up is nobody's).  A holder that wanted the GPU
     * and issued nothing held it all the same: from the grant (held is
     * held, whatever a worker says it wants). */
    if (t.first != 0 && (t.first < t.start || t.first > now))
        t.first = t.start;
    t.held_from = t.first != 0 ? t.first : t.start;
    if (t.first == 0)
        t.first = UINT64_MAX;
    for (i = 0; i < VCU_SCHED_VMS; i++)
        if (vcu__sched_cap(&sc->vm[i]) != 0)
            vcu__sched_refill(sc, i, now);
    if (hv != 0) {
        uint32_t v = hv - 1;

        for (i = 0; i < VCU_SCHED_VMS; i++)
            if (i != v && vcu__sched_eligible(sc, i))
                t.others = true;
        if (!vcu__sched_vm_live(sc, v)) {
            atomic_store(&h->grant, 0);     /* its QEMU is gone, its workers too */
            g = hv = 0;
        } else if (!(g & VCU_SCHED_REVOKING)) {
            g = vcu__sched_hold_running(sc, &t, v, g);
            hv = g & ~VCU_SCHED_REVOKING;
        }
        if (hv != 0 && (g & VCU_SCHED_REVOKING)) {
            g = vcu__sched_hold_revoking(sc, &t, v, g);
            hv = g & ~VCU_SCHED_REVOKING;
        }
    }
    if (hv != 0)
        return;
    best = vcu__sched_pick(sc, &t, &beff);
    if (best == 0)
        return;
    vcu__sched_grant(sc, best, beff, t.others, now);
}

void vcu__sched_step(vcu_sched_t *sc, uint64_t now)
{
    vcu__sched_lock(sc);
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
}

int vcu__sched_vm_claim(vcu_sched_t *sc, uint32_t weight, uint32_t cap, uint64_t now)
{
    uint32_t i, pid;

    vcu__sched_lock(sc);
    for (i = 0; i < VCU_SCHED_VMS; i++) {
        pid = atomic_load(&sc->vm[i].pid);
        if (pid == 0 || !sc->alive(pid))
            break;
    }
    if (i == VCU_SCHED_VMS) {
        vcu__sched_unlock(sc);
        return -1;
    }
    if ((atomic_load(&sc->hdr->grant) & ~VCU_SCHED_REVOKING) == i + 1)
        atomic_store(&sc->hdr->grant, 0);
    memset((void *)&sc->vm[i], 0, sizeof(sc->vm[i]));
    atomic_store(&sc->vm[i].weight, weight);
    atomic_store(&sc->vm[i].cap, cap);
    atomic_store(&sc->vm[i].vtime, atomic_load(&sc->hdr->vclock));
    atomic_store(&sc->vm[i].tokens, (int64_t)VCU__SCHED_BURST_NS);
    atomic_store(&sc->vm[i].refill_ns, now);
    atomic_store(&sc->vm[i].pid, sc->pid);
    vcu__sched_unlock(sc);
    sc->vm_slot = (int)i;
    sc->mine = i + 1;
    sc->cap = cap >= 100 ? 0 : cap;
    return 0;
}

void vcu__sched_vm_release(vcu_sched_t *sc, uint64_t now)
{
    if (sc->vm_slot < 0)
        return;
    vcu__sched_lock(sc);
    atomic_store(&sc->vm[sc->vm_slot].pid, 0);
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
    sc->vm_slot = -1;
}

void vcu__sched_worker_gone(vcu_sched_t *sc, uint32_t pid, uint64_t now)
{
    uint32_t j;

    if (sc->vm_slot < 0 || pid == 0)
        return;
    vcu__sched_lock(sc);
    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(&sc->w[j].pid) != pid || atomic_load(&sc->w[j].vm) != (uint32_t)sc->vm_slot)
            continue;
        atomic_store(&sc->w[j].want, 0);
        atomic_store(&sc->w[j].busy, 0);
        atomic_store(&sc->w[j].pid, 0);
    }
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
}

void vcu__sched_party_gone(vcu_sched_t *sc, uint32_t party, uint64_t now)
{
    uint32_t j, held = party;

    if (party == 0)
        return;
    atomic_compare_exchange_strong(&sc->hdr->lock, &held, 0);
    vcu__sched_lock(sc);
    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        if (atomic_load(&sc->w[j].pid) != party)
            continue;
        atomic_store(&sc->w[j].want, 0);
        atomic_store(&sc->w[j].busy, 0);
        atomic_store(&sc->w[j].pid, 0);
    }
    vcu__sched_step_locked(sc, now);
    vcu__sched_unlock(sc);
}

void vcu__sched_vm_report(vcu_sched_t *sc, uint64_t *used_ns, uint64_t *all_ns,
                          uint64_t *grants)
{
    uint64_t all = 0;
    uint32_t i;

    *used_ns = *grants = 0;
    for (i = 0; i < VCU_SCHED_VMS; i++) {
        if (atomic_load(&sc->vm[i].pid) == 0)
            continue;
        all = vcu__sched_add_sat(all, atomic_load(&sc->vm[i].used_ns));
    }
    if (sc->vm_slot >= 0) {
        *used_ns = atomic_load(&sc->vm[sc->vm_slot].used_ns);
        *grants = atomic_load(&sc->vm[sc->vm_slot].grants);
        /* A VM running alone is charged at its pauses: the slice it holds
         * now counts too. */
        if (atomic_load(&sc->hdr->grant) == sc->mine && atomic_load(&sc->hdr->first_ns) != 0) {
            uint64_t from = atomic_load(&sc->hdr->first_ns), now = sc->clock();
            uint64_t until = atomic_load(&sc->vm[sc->vm_slot].charged_until);

            if (until > from)
                from = until;
            if (now > from && now - from < VCU__SCHED_CHARGE_MAX) {
                *used_ns = vcu__sched_add_sat(*used_ns, now - from);
                all = vcu__sched_add_sat(all, now - from);
            }
        }
    }
    *all_ns = all;
}

int vcu__sched_attach(vcu_sched_t *sc, uint32_t vm_slot, uint32_t parent,
                      uint32_t cap)
{
    uint32_t j, pid;

    if (vm_slot >= VCU_SCHED_VMS)
        return -1;
    vcu__sched_lock(sc);
    if (parent != 0 ? atomic_load(&sc->vm[vm_slot].pid) != parent
                    : atomic_load(&sc->vm[vm_slot].pid) == 0) {
        vcu__sched_unlock(sc);
        return -1;
    }
    for (j = 0; j < VCU_SCHED_WORKERS; j++) {
        pid = atomic_load(&sc->w[j].pid);
        if (pid == 0 || pid == sc->pid || !sc->alive(pid))
            break;
    }
    if (j == VCU_SCHED_WORKERS) {
        vcu__sched_unlock(sc);
        return -1;
    }
    atomic_store(&sc->w[j].want, 0);
    atomic_store(&sc->w[j].busy, 0);
    atomic_store(&sc->w[j].drained_ns, 0);
    atomic_store(&sc->w[j].vm, vm_slot);
    atomic_store(&sc->w[j].pid, sc->pid);
    vcu__sched_unlock(sc);
    sc->vm_slot = (int)vm_slot;
    sc->w_slot = (int)j;
    sc->mine = vm_slot + 1;
    sc->cap = cap >= 100 ? 0 : cap;
    return 0;
}

void vcu__sched_drained(vcu_sched_t *sc, uint64_t now)
{
    atomic_store(&sc->w[sc->w_slot].drained_ns, now);
    sc->issued = false;
    sc->busy = false;
    atomic_store(&sc->w[sc->w_slot].busy, 0);
    vcu__sched_step(sc, now);
}
