/*
 * libcuda.so.1: the device memory this process was given (cuMemAlloc,
 * cuMemAllocPitch, stream-ordered allocations), so that a stream-ordered
 * copy or memset may go without waiting where NVIDIA's driver would find
 * nothing wrong at the call: a range inside one allocation of the device.
 * Anything else (module globals, pointers from elsewhere, memory freed
 * meanwhile) waits for the host's verdict, as before.  What is forgotten
 * here is only a copy that waits when it need not (and a buffer ID:
 * each allocation gets the next number of the process when it is made,
 * never reused, as CU_POINTER_ATTRIBUTE_BUFFER_ID promises).
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"

typedef struct {
    uint64_t base, size;
    uint64_t id;                    /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    int dev;
} vcu__dr_t;

static uint64_t vcu__buffer_ids;    /* the last handed out; atomic */

uint64_t vcu__buffer_id_new(void)
{
    return __atomic_add_fetch(&vcu__buffer_ids, 1, __ATOMIC_RELAXED);
}

static pthread_rwlock_t vcu__dr_lock = PTHREAD_RWLOCK_INITIALIZER;
static vcu__dr_t *vcu__drs;         /* sorted by base, never overlapping */
static size_t vcu__ndr, vcu__dr_cap;

/* Index of the first entry with base > p. */
static size_t vcu__dr_upper(uint64_t p)
{
    size_t lo = 0, hi = vcu__ndr;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (vcu__drs[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void vcu__dr_add(int dev, uint64_t base, uint64_t size)
{
    size_t i;

    if (base == 0 || size == 0 || size > UINT64_MAX - base)
        return;
    pthread_rwlock_wrlock(&vcu__dr_lock);
    i = vcu__dr_upper(base);
    /* An overlap means something was missed (a reset): the old goes. */
    while (i > 0 && vcu__drs[i - 1].base + vcu__drs[i - 1].size > base) {
        memmove(&vcu__drs[i - 1], &vcu__drs[i], (vcu__ndr - i) * sizeof(*vcu__drs));
        vcu__ndr--;
        i--;
    }
    while (i < vcu__ndr && vcu__drs[i].base < base + size) {
        memmove(&vcu__drs[i], &vcu__drs[i + 1], (vcu__ndr - i - 1) * sizeof(*vcu__drs));
        vcu__ndr--;
    }
    if (vcu__ndr == vcu__dr_cap) {
        size_t cap = vcu__dr_cap ? 2 * vcu__dr_cap : 64;
        vcu__dr_t *n = realloc(vcu__drs, cap * sizeof(*n));

        if (n == NULL) {
            pthread_rwlock_unlock(&vcu__dr_lock);
            return;                 /* not known: its copies wait */
        }
        vcu__drs = n;
        vcu__dr_cap = cap;
    }
    memmove(&vcu__drs[i + 1], &vcu__drs[i], (vcu__ndr - i) * sizeof(*vcu__drs));
    vcu__drs[i] = (vcu__dr_t){ base, size, vcu__buffer_id_new(), dev };
    vcu__ndr++;
    pthread_rwlock_unlock(&vcu__dr_lock);
}

void vcu__dr_del(uint64_t base)
{
    size_t i;

    pthread_rwlock_wrlock(&vcu__dr_lock);
    i = vcu__dr_upper(base);
    if (i > 0 && vcu__drs[i - 1].base == base) {
        memmove(&vcu__drs[i - 1], &vcu__drs[i], (vcu__ndr - i) * sizeof(*vcu__drs));
        vcu__ndr--;
    }
    pthread_rwlock_unlock(&vcu__dr_lock);
}

void vcu__dr_forget_dev(int dev)
{
    size_t i, j;

    pthread_rwlock_wrlock(&vcu__dr_lock);
    for (i = j = 0; i < vcu__ndr; i++)
        if (vcu__drs[i].dev != dev)
            vcu__drs[j++] = vcu__drs[i];
    vcu__ndr = j;
    pthread_rwlock_unlock(&vcu__dr_lock);
}

int vcu__dr_known(int dev, uint64_t p, uint64_t n)
{
    size_t i;
    int known = 0;

    if (n == 0 || n > UINT64_MAX - p)
        return 0;
    pthread_rwlock_rdlock(&vcu__dr_lock);
    i = vcu__dr_upper(p);
    if (i > 0) {
        const vcu__dr_t *r = &vcu__drs[i - 1];

        known = r->dev == dev && p - r->base < r->size && n <= r->size - (p - r->base);
    }
    pthread_rwlock_unlock(&vcu__dr_lock);
    return known;
}

int vcu__dr_find(uint64_t p, uint64_t *base, uint64_t *size, uint64_t *id, int *dev)
{
    size_t i;
    int found = 0;

    pthread_rwlock_rdlock(&vcu__dr_lock);
    i = vcu__dr_upper(p);
    if (i > 0 && p - vcu__drs[i - 1].base < vcu__drs[i - 1].size) {
        const vcu__dr_t *r = &vcu__drs[i - 1];

        *base = r->base;
        *size = r->size;
        *id = r->id;
        *dev = r->dev;
        found = 1;
    }
    pthread_rwlock_unlock(&vcu__dr_lock);
    return found;
}
