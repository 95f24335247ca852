/*
 * vcu-worker: registrations of stable ranges (the guest's pinned
 * buffers registered with CUDA once, page-rounded, until a fence
 * releases them) and aliases (a pinned allocation of several ranges
 * mapped again at consecutive addresses).  See worker.c.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* ppoll */
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "vcu_backend.h"
#include "vcu_ipc.h"
#include "vcu_ring.h"
#include "vcu_seccomp.h"
#include "vcu_stage.h"
#include "vcu_worker.h"
#include "vcu_worker_int.h"

/* ---- where guest memory is mapped --------------------------------------- */

/*
 * The worker maps guest memory (its RAM regions, the aliases below) in a
 * window of its own, low in the address space, never where the CUDA
 * driver places device memory.  With unified addressing device memory and
 * host mappings share one address space, and the driver places each
 * allocation where nothing is mapped, top down from below the libraries:
 * the VM's RAM mapped there (at a session's start on a migration's
 * source, after the load on its destination) moved every allocation made
 * after it by the RAM's size, and a migrated session's allocations must
 * come out where they were (a 1 GiB allocation after 2 GiB of guest RAM,
 * on the H200: docs/design.md, "Live migration").  The window is used
 * bottom up and never reused, so the same mappings in the same order get
 * the same addresses in every worker; past its end, or where something
 * else sits, the kernel chooses.
 */
#define VCU__GUEST_WINDOW 0x100000000000ull         /* 16 TiB */
#define VCU__GUEST_WINDOW_END 0x400000000000ull     /* 64 TiB */
#define VCU__GUEST_ALIGN (2ull << 20)

/* Where an alias may go at the guest's asking: above the first 64 KiB
 * (mmap_min_addr) and below the end of x86-64's user half. */
#define VCU__ALIAS_AT_MIN 0x10000ull
#define VCU__ALIAS_AT_END 0x800000000000ull

static _Atomic uint64_t vcu__guest_next = VCU__GUEST_WINDOW;

void *vcu__guest_mmap(size_t len, int prot, int flags, int fd, off_t off)
{
    uint64_t span = ((uint64_t)len + 2 * VCU__GUEST_ALIGN - 1) & ~(VCU__GUEST_ALIGN - 1);
    unsigned int tries;
    void *p;

    for (tries = 0; tries < 8; tries++) {
        uint64_t at = atomic_fetch_add(&vcu__guest_next, span);

        if (at + span > VCU__GUEST_WINDOW_END || at + span < at)
            break;
        p = mmap((void *)(uintptr_t)at, len, prot, flags | MAP_FIXED_NOREPLACE, fd, off);
        if (p != MAP_FAILED)
            return p;
        if (errno != EEXIST)
            break;
    }
    return mmap(NULL, len, prot, flags, fd, off);
}

/* ---- registrations of stable ranges ------------------------------------ */

/* Index of the first registration of region (or after it) that ends
 * past off.  alock held. */
static size_t vcu__reg_lower_locked(uint32_t region, uint64_t off)
{
    size_t lo = 0, hi = vcu__w.nregs;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const vcu__reg_t *g = &vcu__w.regs[mid];

        if (g->region < region || (g->region == region && g->off + g->len <= off))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/*
 * Registers the pages of [off, off+len) of region r that no registration
 * holds yet, each gap as a registration of its own: registrations never
 * overlap (the driver refuses that), and a copy never spans memory that
 * is only partly registered, since vcu__reg_split() cuts it at their
 * edges.  A gap the driver refuses stays unregistered: its copies are
 * staged, which costs only speed.  alock held.
 */
void vcu__reg_cover_locked(const vcu__region_t *r, uint64_t off, uint64_t len)
{
    uint64_t pos = off & ~(VCU__W_PAGE - 1);
    uint64_t e = (off + len + VCU__W_PAGE - 1) & ~(VCU__W_PAGE - 1);
    size_t i;

    if (e > (r->size & ~(VCU__W_PAGE - 1)))
        e = r->size & ~(VCU__W_PAGE - 1);
    i = vcu__reg_lower_locked(r->id, pos);
    while (pos < e) {
        const vcu__reg_t *g = i < vcu__w.nregs ? &vcu__w.regs[i] : NULL;
        uint64_t gap_end;

        if (g != NULL && g->region == r->id && g->off <= pos) {
            pos = g->off + g->len;
            i++;
            continue;
        }
        gap_end = g != NULL && g->region == r->id && g->off < e ? g->off : e;
        if (vcu__w.nregs == vcu__w.capregs) {
            size_t ncap = vcu__w.capregs ? vcu__w.capregs * 2 : 64;
            vcu__reg_t *n = realloc(vcu__w.regs, ncap * sizeof(*n));

            if (n == NULL)
                return;
            vcu__w.regs = n;
            vcu__w.capregs = ncap;
        }
        if (vcu_backend_add_ram(vcu__w.be, r->base + pos, gap_end - pos) == 0) {
            memmove(&vcu__w.regs[i + 1], &vcu__w.regs[i], (vcu__w.nregs - i) * sizeof(vcu__reg_t));
            vcu__w.regs[i].region = r->id;
            vcu__w.regs[i].off = pos;
            vcu__w.regs[i].len = gap_end - pos;
            vcu__w.nregs++;
            i++;
        }
        pos = gap_end;
    }
}

/*
 * The iovecs of [off, off+len) of region r, cut where a registration
 * begins or ends, so that each lies wholly inside one registration or
 * wholly outside all: into out[] (NULL: only counted).  Returns how many.
 * alock held.
 */
size_t vcu__reg_split_locked(const vcu__region_t *r, uint64_t off, uint64_t len,
                             struct iovec *out)
{
    uint64_t pos = off, end = off + len;
    size_t i = vcu__reg_lower_locked(r->id, pos), n = 0;

    while (pos < end) {
        const vcu__reg_t *g = i < vcu__w.nregs && vcu__w.regs[i].region == r->id ?
                              &vcu__w.regs[i] : NULL;
        uint64_t to;

        if (g != NULL && g->off <= pos) {
            to = g->off + g->len < end ? g->off + g->len : end;
            i++;
        } else {
            to = g != NULL && g->off < end ? g->off : end;
        }
        if (out != NULL) {
            out[n].iov_base = r->base + pos;
            out[n].iov_len = to - pos;
        }
        n++;
        pos = to;
    }
    return n;
}

static bool vcu__overlaps(const struct vcu_ipc_range *rel, uint32_t n, uint32_t region,
                          uint64_t off, uint64_t len)
{
    uint32_t i;

    for (i = 0; i < n; i++)
        if (rel[i].region == region && rel[i].off < off + len && off < rel[i].off + rel[i].len)
            return true;
    return false;
}

/* alock held.  The counts of an alias of nr mappings and len bytes go. */
static void vcu__alias_uncount_locked(uint32_t nr, uint64_t len)
{
    vcu__w.naliases--;
    vcu__w.alias_maps -= nr;
    vcu__w.alias_bytes -= len;
}

/* An alias of nr mappings and len bytes is gone (or was never made):
 * its count, and its charge of cost. */
static void vcu__alias_uncount(uint32_t nr, uint64_t len, uint64_t cost)
{
    pthread_mutex_lock(&vcu__w.alock);
    vcu__alias_uncount_locked(nr, len);
    pthread_mutex_unlock(&vcu__w.alock);
    vcu_backend_host_uncharge(vcu__w.be, cost);
}

/* The page-rounded start and length of a range, as an alias maps it. */
static uint64_t vcu__page_start(const struct vcu_ipc_range *r)
{
    return r->off & ~(VCU__W_PAGE - 1);
}

static uint64_t vcu__page_len(const struct vcu_ipc_range *r)
{
    return ((r->off + r->len + VCU__W_PAGE - 1) & ~(VCU__W_PAGE - 1)) - vcu__page_start(r);
}

/* Whether the ranges join at page boundaries (the interior ones must be);
 * *total: the bytes of their pages. */
static bool vcu__alias_span(const struct vcu_ipc_range *rg, uint32_t n, uint64_t *total)
{
    uint32_t i;

    *total = 0;
    for (i = 0; i < n; i++) {
        if ((i > 0 && (rg[i].off & (VCU__W_PAGE - 1))) ||
            (i + 1 < n && ((rg[i].off + rg[i].len) & (VCU__W_PAGE - 1))))
            return false;
        *total += vcu__page_len(&rg[i]);
    }
    return true;
}

/* alock held.  An alias of the same ranges, for reuse: its address for
 * the first range's first byte, or NULL. */
static unsigned char *vcu__alias_find_locked(const struct vcu_ipc_range *rg, uint32_t n)
{
    vcu__alias_t *a;
    uint32_t i;

    for (a = vcu__w.aliases; a != NULL; a = a->next) {
        if (a->nr != n)
            continue;
        for (i = 0; i < n; i++)
            if (a->r[i].region != rg[i].region || a->r[i].off != vcu__page_start(&rg[i]) ||
                a->r[i].len != vcu__page_len(&rg[i]))
                break;
        if (i == n)
            return a->base + (rg[0].off & (VCU__W_PAGE - 1));
    }
    return NULL;
}

/* alock held.  Counts a new alias of n mappings and total bytes if it is
 * within the session's bounds (see vcu__alias_t); false if not. */
static bool vcu__alias_count_locked(uint32_t n, uint64_t total)
{
    uint64_t ram = 0;
    uint32_t i;

    for (i = 0; i < vcu__w.nregions; i++)
        ram += vcu__w.regions[i].size;
    if (vcu__w.naliases >= VCU__ALIAS_MAX || n > VCU__ALIAS_MAPS - vcu__w.alias_maps ||
        vcu__w.alias_bytes > ram || total > ram - vcu__w.alias_bytes)
        return false;
    vcu__w.naliases++;
    vcu__w.alias_maps += n;
    vcu__w.alias_bytes += total;
    return true;
}

/* Maps the ranges' pages again, one after the other, over the reserved
 * base; records them in a.  False if a range cannot be mapped. */
static bool vcu__alias_map(vcu__alias_t *a, unsigned char *base, const struct vcu_ipc_range *rg,
                           uint32_t n)
{
    uint64_t pos = 0;
    uint32_t i;

    for (i = 0; i < n; i++) {
        const vcu__region_t *r = vcu__region(rg[i].region);
        uint64_t a0 = vcu__page_start(&rg[i]);
        uint64_t len = vcu__page_len(&rg[i]);

        if (r == NULL || a0 + len > r->size ||
            mmap(base + pos, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r->fd,
                 (off_t)a0) == MAP_FAILED)
            return false;
        a->r[i].region = rg[i].region;
        a->r[i].off = a0;
        a->r[i].len = len;
        pos += len;
    }
    return true;
}

/*
 * Reserves total bytes for an alias: at `at` where that is a page
 * boundary, outside the guest window and free (the guest asked for its
 * own address: CU_HOST_DEVICE_POINTER_AT), else where vcu__guest_mmap
 * puts it.  MAP_FIXED_NOREPLACE never replaces a mapping of the worker or
 * of the driver; an address the guest names only decides where a mapping
 * of its own memory goes.
 */
static unsigned char *vcu__alias_reserve(uint64_t total, uint64_t at)
{
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p;

    if (at != 0 && (at & (VCU__W_PAGE - 1)) == 0 && at >= VCU__ALIAS_AT_MIN &&
        total <= VCU__ALIAS_AT_END - at &&
        (at + total <= VCU__GUEST_WINDOW || at >= VCU__GUEST_WINDOW_END)) {
        p = mmap((void *)(uintptr_t)at, total, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && (uintptr_t)p == at)
            return p;
        if (p != MAP_FAILED)        /* a kernel that took the flag as a hint */
            munmap(p, total);
    }
    return vcu__guest_mmap(total, PROT_NONE, flags, -1, 0);
}

/*
 * The alias of a stable segment whose ranges (rg[0..n)) join at page
 * boundaries: its address for the segment's first byte, or NULL (the
 * ranges do not join, or mapping or registering failed: the segment then
 * keeps one iovec per range).  want: the address the guest would have
 * that first byte at (0: anywhere), taken where it can be (see
 * vcu__alias_reserve).  An alias of the same ranges is reused, wherever
 * it is.
 */
unsigned char *vcu__alias_get(const struct vcu_ipc_range *rg, uint32_t n, uint64_t want)
{
    vcu__alias_t *a;
    unsigned char *base, *p;
    uint64_t total, cost;
    bool counted;

    if (!vcu__alias_span(rg, n, &total))
        return NULL;
    /* Within the session's bounds, counted now (the mappings are made
     * below, without the lock), and charged. */
    pthread_mutex_lock(&vcu__w.alock);
    p = vcu__alias_find_locked(rg, n);
    counted = p == NULL && vcu__alias_count_locked(n, total);
    pthread_mutex_unlock(&vcu__w.alock);
    if (!counted)
        return p;
    cost = VCU__ALIAS_COST(total, n);
    if (vcu_backend_host_charge(vcu__w.be, cost) != 0) {
        vcu__alias_uncount(n, total, 0);
        return NULL;
    }

    a = calloc(1, sizeof(*a) + n * sizeof(a->r[0]));
    if (a == NULL) {
        vcu__alias_uncount(n, total, cost);
        return NULL;
    }
    base = vcu__alias_reserve(total, (want & (VCU__W_PAGE - 1)) == (rg[0].off & (VCU__W_PAGE - 1))
                                         ? want & ~(VCU__W_PAGE - 1) : 0);
    if (base == MAP_FAILED) {
        free(a);
        vcu__alias_uncount(n, total, cost);
        return NULL;
    }
    if (!vcu__alias_map(a, base, rg, n) || madvise(base, total, MADV_DONTDUMP) != 0 ||
        vcu_backend_add_ram(vcu__w.be, base, total) != 0)
        goto fail;
    a->base = base;
    a->len = total;
    a->cost = cost;
    a->nr = n;
    pthread_mutex_lock(&vcu__w.alock);
    a->next = vcu__w.aliases;
    vcu__w.aliases = a;
    pthread_mutex_unlock(&vcu__w.alock);
    return base + (rg[0].off & (VCU__W_PAGE - 1));
fail:
    munmap(base, total);
    free(a);
    vcu__alias_uncount(n, total, cost);
    return NULL;
}

/* Drops every registration and alias that overlaps a released range. */
void vcu__reg_release(const struct vcu_ipc_range *rel, uint32_t n)
{
    vcu__reg_t *g;
    vcu__alias_t **ap, *a;
    size_t i, k;

    pthread_mutex_lock(&vcu__w.alock);
    for (ap = &vcu__w.aliases; (a = *ap) != NULL;) {
        bool hit = false;

        for (k = 0; k < a->nr && !hit; k++)
            hit = vcu__overlaps(rel, n, a->r[k].region, a->r[k].off, a->r[k].len);
        if (!hit) {
            ap = &a->next;
            continue;
        }
        *ap = a->next;
        vcu_backend_remove_ram(vcu__w.be, a->base, a->len);
        munmap(a->base, a->len);
        vcu__alias_uncount_locked(a->nr, a->len);
        vcu_backend_host_uncharge(vcu__w.be, a->cost);
        free(a);
    }
    for (k = 0, i = 0; i < vcu__w.nregs; i++) {
        g = &vcu__w.regs[i];
        if (vcu__overlaps(rel, n, g->region, g->off, g->len)) {
            vcu_backend_remove_ram(vcu__w.be, vcu__region(g->region)->base + g->off, g->len);
            continue;
        }
        vcu__w.regs[k++] = *g;
    }
    vcu__w.nregs = k;
    pthread_mutex_unlock(&vcu__w.alock);
}
