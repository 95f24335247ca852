/*
 * The VM's memory account (vcu_account.h, which says what it is and who
 * trusts what): the code of the daemon, the worker and QEMU's reports.
 */
#include "vcu_account.h"

int vcu__acct_sealed(int fd)
{
    int seals = fcntl(fd, F_GET_SEALS);

    return seals >= 0 && (seals & VCU_ACCT_SEALS) == VCU_ACCT_SEALS;
}

static vcu_account_t *vcu__acct_alloc(void)
{
    vcu_account_t *a = calloc(1, sizeof(*a));

    if (a == NULL)
        return NULL;
    a->fd = -1;
    pthread_mutex_init(&a->mu, NULL);
    return a;
}

int vcu__acct_new(uint64_t quota, uint32_t nslots, vcu_account_t **out)
{
    vcu_account_t *a;
    void *p;

    *out = NULL;
    if (nslots == 0)
        return VCU_EINVAL;
    a = vcu__acct_alloc();
    if (a == NULL)
        return VCU_ENOMEM;
    a->len = vcu__acct_len(nslots);
    a->busy = calloc(nslots, 1);
    a->own_session = calloc(nslots, sizeof(*a->own_session));
    a->own_pid = calloc(nslots, sizeof(*a->own_pid));
    /* The syscall itself: memfd_create() needs _GNU_SOURCE before every
     * header of the file that includes this one. */
    a->fd = (int)syscall(SYS_memfd_create, "vcu-account", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (a->busy == NULL || a->own_session == NULL || a->own_pid == NULL || a->fd < 0 ||
        ftruncate(a->fd, (off_t)a->len) != 0 ||
        fcntl(a->fd, F_ADD_SEALS, VCU_ACCT_SEALS | F_SEAL_SEAL) != 0)
        goto fail;
    p = mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (p == MAP_FAILED)
        goto fail;
    a->hdr = p;
    a->slot = (struct vcu_acct_slot *)(a->hdr + 1);
    a->quota = quota;
    a->nslots = nslots;
    a->hdr->magic = VCU_ACCT_MAGIC;
    a->hdr->quota = quota;
    a->hdr->nslots = nslots;
    *out = a;
    return 0;

fail:
    if (a->fd >= 0)
        close(a->fd);
    free(a->busy);
    free(a->own_session);
    free(a->own_pid);
    pthread_mutex_destroy(&a->mu);
    free(a);
    return VCU_EIO;
}

/* Maps an account's memfd (closed here) with prot; read-only mappings need
 * its seals (vcu__acct_sealed). */
static int vcu__acct_map_fd(int fd, int prot, vcu_account_t **out)
{
    vcu_account_t *a;
    struct stat st;
    void *p;

    *out = NULL;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)vcu__acct_len(1) ||
        (uint64_t)st.st_size > vcu__acct_len(1u << 20) ||
        (!(prot & PROT_WRITE) && !vcu__acct_sealed(fd))) {
        close(fd);
        return VCU_EINVAL;
    }
    p = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return VCU_EIO;
    a = vcu__acct_alloc();
    if (a == NULL) {
        munmap(p, (size_t)st.st_size);
        return VCU_ENOMEM;
    }
    a->hdr = p;
    a->slot = (struct vcu_acct_slot *)(a->hdr + 1);
    a->len = (size_t)st.st_size;
    a->nslots = (uint32_t)((a->len - sizeof(struct vcu_acct_hdr)) / sizeof(struct vcu_acct_slot));
    *out = a;
    return 0;
}

int vcu__acct_map(int fd, uint64_t quota, vcu_account_t **out)
{
    int rc = vcu__acct_map_fd(fd, PROT_READ | PROT_WRITE, out);

    if (rc == 0)
        (*out)->quota = quota;
    return rc;
}

int vcu__acct_map_ro(int fd, vcu_account_t **out)
{
    return vcu__acct_map_fd(fd, PROT_READ, out);
}

void vcu__acct_put(vcu_account_t *a)
{
    if (a == NULL)
        return;
    munmap(a->hdr, a->len);
    if (a->fd >= 0)
        close(a->fd);
    free(a->busy);
    free(a->own_session);
    free(a->own_pid);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

int vcu__acct_claim(vcu_account_t *a, uint64_t session)
{
    struct vcu_acct_slot *s;
    uint32_t i;
    unsigned int d;

    pthread_mutex_lock(&a->mu);
    for (i = 0; i < a->nslots && a->busy[i]; i++)
        ;
    if (i == a->nslots) {
        pthread_mutex_unlock(&a->mu);
        return -1;
    }
    a->busy[i] = 1;
    a->own_session[i] = session;
    a->own_pid[i] = 0;
    pthread_mutex_unlock(&a->mu);
    s = &a->slot[i];
    for (d = 0; d < VCU_ACCT_DEVS; d++) {
        atomic_store(&s->charged[d], 0);
        atomic_store(&s->ctx[d], 0);
    }
    atomic_store(&s->host, 0);
    atomic_store(&s->flags, 0);
    atomic_store(&s->pid, 0);
    atomic_store(&s->session, session);
    return (int)i;
}

void vcu__acct_set_pid(vcu_account_t *a, int slot, uint32_t pid)
{
    if (slot < 0 || (uint32_t)slot >= a->nslots)
        return;
    atomic_store(&a->slot[slot].pid, pid);
    pthread_mutex_lock(&a->mu);
    if (a->own_pid != NULL)
        a->own_pid[slot] = pid;
    pthread_mutex_unlock(&a->mu);
}

void vcu__acct_release(vcu_account_t *a, int slot)
{
    struct vcu_acct_slot *s;
    uint32_t mine = (uint32_t)slot + 1;
    unsigned int d;

    if (slot < 0 || (uint32_t)slot >= a->nslots)
        return;
    s = &a->slot[slot];
    if (atomic_load(&s->flags) & VCU_ACCT_F_FAULT)
        atomic_fetch_add(&a->hdr->faults, 1);
    for (d = 0; d < VCU_ACCT_DEVS; d++) {
        atomic_store(&s->charged[d], 0);
        atomic_store(&s->ctx[d], 0);
    }
    atomic_store(&s->host, 0);
    atomic_store(&s->flags, 0);
    atomic_store(&s->pid, 0);
    atomic_store(&s->session, 0);
    atomic_compare_exchange_strong(&a->hdr->lock, &mine, 0);
    pthread_mutex_lock(&a->mu);
    if (a->busy != NULL) {
        a->busy[slot] = 0;
        a->own_session[slot] = 0;
        a->own_pid[slot] = 0;
    }
    pthread_mutex_unlock(&a->mu);
}

uint64_t vcu__acct_used(const vcu_account_t *a, uint32_t dev)
{
    uint64_t sum = 0, v;
    uint32_t i;

    if (dev >= VCU_ACCT_DEVS)
        return 0;
    for (i = 0; i < a->nslots; i++) {
        v = atomic_load(&a->slot[i].charged[dev]);
        sum = v > UINT64_MAX - sum ? UINT64_MAX : sum + v;
    }
    return sum;
}

uint64_t vcu__acct_ctx(const vcu_account_t *a, uint32_t dev)
{
    uint64_t sum = 0, v;
    uint32_t i;

    if (dev >= VCU_ACCT_DEVS)
        return 0;
    for (i = 0; i < a->nslots; i++) {
        v = atomic_load(&a->slot[i].ctx[dev]);
        sum = v > UINT64_MAX - sum ? UINT64_MAX : sum + v;
    }
    return sum;
}

uint64_t vcu__acct_host_used(const vcu_account_t *a)
{
    uint64_t sum = 0, v;
    uint32_t i;

    for (i = 0; i < a->nslots; i++) {
        v = atomic_load(&a->slot[i].host);
        sum = v > UINT64_MAX - sum ? UINT64_MAX : sum + v;
    }
    return sum;
}

uint32_t vcu__acct_report(vcu_account_t *a, struct vcu__acct_seen *out, uint32_t cap)
{
    uint32_t i, n = 0;
    unsigned int d;

    if (a->busy == NULL)
        return 0;
    pthread_mutex_lock(&a->mu);
    for (i = 0; i < a->nslots; i++) {
        const struct vcu_acct_slot *s = &a->slot[i];
        struct vcu__acct_seen *o;

        if (!a->busy[i])
            continue;
        if (n++ >= cap)
            continue;
        o = &out[n - 1];
        o->session = a->own_session[i];
        o->pid = a->own_pid[i];
        o->fault = (atomic_load(&s->flags) & VCU_ACCT_F_FAULT) != 0;
        for (d = 0; d < VCU_ACCT_DEVS; d++) {
            o->charged[d] = atomic_load(&s->charged[d]);
            o->ctx[d] = atomic_load(&s->ctx[d]);
        }
        o->host = atomic_load(&s->host);
    }
    pthread_mutex_unlock(&a->mu);
    return n;
}

/* Worker side: the admission lock, for slot.  0, or -1 when another
 * holds it past VCU__ACCT_LOCK_NS. */
static int vcu__acct_lock(vcu_account_t *a, int slot)
{
    uint32_t mine = (uint32_t)slot + 1, free_ = 0;
    uint64_t t0 = 0;
    unsigned int spins = 0;

    while (!atomic_compare_exchange_weak(&a->hdr->lock, &free_, mine)) {
        free_ = 0;
        if (++spins < 64)
            continue;
        if (t0 == 0)
            t0 = vcu__acct_now_ns();
        else if (vcu__acct_now_ns() - t0 > VCU__ACCT_LOCK_NS)
            return -1;
        sched_yield();
    }
    return 0;
}

static void vcu__acct_unlock(vcu_account_t *a)
{
    atomic_store(&a->hdr->lock, 0);
}

int vcu__acct_charge(vcu_account_t *a, int slot, uint32_t dev, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t quota = vcu__acct_quota(a);

    if (slot < 0 || (uint32_t)slot >= a->nslots || dev >= VCU_ACCT_DEVS)
        return -1;
    s = &a->slot[slot];
    if (n == 0)
        return 0;
    if (quota == 0) {
        atomic_fetch_add(&s->charged[dev], n);
        return 0;
    }
    if (n > quota || vcu__acct_lock(a, slot) != 0)
        return -1;
    if (vcu__acct_used(a, dev) > quota - n) {
        vcu__acct_unlock(a);
        return -1;
    }
    atomic_fetch_add(&s->charged[dev], n);
    vcu__acct_unlock(a);
    return 0;
}

int vcu__acct_host_charge(vcu_account_t *a, int slot, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t quota = vcu__acct_host_quota(a);

    if (slot < 0 || (uint32_t)slot >= a->nslots)
        return -1;
    s = &a->slot[slot];
    if (n == 0)
        return 0;
    if (quota == 0) {
        atomic_fetch_add(&s->host, n);
        return 0;
    }
    if (n > quota || vcu__acct_lock(a, slot) != 0)
        return -1;
    if (vcu__acct_host_used(a) > quota - n) {
        vcu__acct_unlock(a);
        return -1;
    }
    atomic_fetch_add(&s->host, n);
    vcu__acct_unlock(a);
    return 0;
}

void vcu__acct_host_uncharge(vcu_account_t *a, int slot, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t cur;

    if (slot < 0 || (uint32_t)slot >= a->nslots || n == 0)
        return;
    s = &a->slot[slot];
    cur = atomic_load(&s->host);
    while (!atomic_compare_exchange_weak(&s->host, &cur, cur > n ? cur - n : 0))
        ;
}

int vcu__acct_add(vcu_account_t *a, int slot, uint32_t dev, uint64_t n)
{
    if (slot < 0 || (uint32_t)slot >= a->nslots || dev >= VCU_ACCT_DEVS)
        return -1;
    atomic_fetch_add(&a->slot[slot].charged[dev], n);
    uint64_t quota = vcu__acct_quota(a);

    return quota != 0 && vcu__acct_used(a, dev) > quota ? -1 : 0;
}

void vcu__acct_uncharge(vcu_account_t *a, int slot, uint32_t dev, uint64_t n)
{
    struct vcu_acct_slot *s;
    uint64_t cur;

    if (slot < 0 || (uint32_t)slot >= a->nslots || dev >= VCU_ACCT_DEVS || n == 0)
        return;
    s = &a->slot[slot];
    cur = atomic_load(&s->charged[dev]);
    while (!atomic_compare_exchange_weak(&s->charged[dev], &cur, cur > n ? cur - n : 0))
        ;
}

void vcu__acct_set_ctx(vcu_account_t *a, int slot, uint32_t dev, uint64_t bytes)
{
    if (slot >= 0 && (uint32_t)slot < a->nslots && dev < VCU_ACCT_DEVS)
        atomic_store(&a->slot[slot].ctx[dev], bytes);
}

void vcu__acct_fault(vcu_account_t *a, int slot)
{
    if (slot >= 0 && (uint32_t)slot < a->nslots)
        atomic_fetch_or(&a->slot[slot].flags, VCU_ACCT_F_FAULT);
}
