/*
 * Typed, generation-checked handle tables and the device pointer set of
 * one CUDA session (see cuda_tab.h).
 *
 * A handle is type << 56 | (generation & 0xffffff) << 32 | index.  type is
 * at least 1, so every handle is >= 2^56 > VCU_CU_HANDLE_MIN, and a value a
 * guest invents has to match the slot's type, index and generation all
 * three: stale, forged and wrongly typed handles are simply not found.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_tab.h"

#define VCU__GEN_MASK 0xffffffu

void vcu__htab_init(vcu__htab_t *t)
{
    memset(t, 0, sizeof(*t));
}

void vcu__htab_fini(vcu__htab_t *t)
{
    uint32_t i;

    for (i = 0; i < t->cap; i++)
        if (t->ent[i].type == VCU__H_FUNCTION)
            free(t->ent[i].u.fn.params);
    free(t->ent);
    memset(t, 0, sizeof(*t));
}

static uint64_t vcu__htab_mk(uint8_t type, uint32_t gen, uint32_t idx)
{
    return (uint64_t)type << 56 | (uint64_t)(gen & VCU__GEN_MASK) << 32 | idx;
}

static uint32_t vcu__htab_next_cap(const vcu__htab_t *t)
{
    uint32_t ncap = t->cap ? t->cap * 2 : 64;

    return ncap > VCU__MAX_HANDLES ? VCU__MAX_HANDLES : ncap;
}

size_t vcu__htab_grow_bytes(const vcu__htab_t *t)
{
    if (t->free_head != 0 || t->cap >= VCU__MAX_HANDLES)
        return 0;
    return (size_t)(vcu__htab_next_cap(t) - t->cap) * sizeof(vcu__hent_t);
}

uint64_t vcu__htab_add(vcu__htab_t *t, uint8_t type, uint32_t dev, vcu__hent_t **out)
{
    vcu__hent_t *e;
    uint32_t idx, i;

    if (t->free_head == 0) {
        uint32_t ncap = vcu__htab_next_cap(t);
        vcu__hent_t *n;

        if (t->cap >= VCU__MAX_HANDLES)
            return 0;
        n = realloc(t->ent, (size_t)ncap * sizeof(*n));
        if (n == NULL)
            return 0;
        memset(n + t->cap, 0, (size_t)(ncap - t->cap) * sizeof(*n));
        /* New slots go on the free list in index order. */
        for (i = ncap; i > t->cap; i--) {
            n[i - 1].gen = 1;
            n[i - 1].next_free = t->free_head;
            t->free_head = i;
        }
        t->ent = n;
        t->cap = ncap;
    }
    idx = t->free_head - 1;
    e = &t->ent[idx];
    t->free_head = e->next_free;
    e->next_free = 0;
    e->type = type;
    e->dev = dev;
    e->xflags = 0;
    memset(&e->u, 0, sizeof(e->u));
    t->live++;
    *out = e;
    return vcu__htab_mk(type, e->gen, idx);
}

vcu__hent_t *vcu__htab_get(vcu__htab_t *t, uint64_t h, uint8_t type)
{
    uint32_t idx = (uint32_t)h;
    vcu__hent_t *e;

    if (type == VCU__H_FREE || (uint8_t)(h >> 56) != type || idx >= t->cap)
        return NULL;
    e = &t->ent[idx];
    if (e->type != type || (e->gen & VCU__GEN_MASK) != ((h >> 32) & VCU__GEN_MASK))
        return NULL;
    return e;
}

void vcu__htab_del(vcu__htab_t *t, uint64_t h)
{
    uint32_t idx = (uint32_t)h;
    vcu__hent_t *e;

    if (idx >= t->cap || t->ent[idx].type == VCU__H_FREE)
        return;
    e = &t->ent[idx];
    if (e->type == VCU__H_FUNCTION)
        free(e->u.fn.params);
    memset(&e->u, 0, sizeof(e->u));
    e->type = VCU__H_FREE;
    e->gen = (e->gen + 1) & VCU__GEN_MASK;
    if (e->gen == 0)
        e->gen = 1;
    e->next_free = t->free_head;
    t->free_head = idx + 1;
    t->live--;
}

uint64_t vcu__htab_handle_at(const vcu__htab_t *t, uint32_t i)
{
    if (i >= t->cap || t->ent[i].type == VCU__H_FREE)
        return 0;
    return vcu__htab_mk(t->ent[i].type, t->ent[i].gen, i);
}

/* ---- pointer set: open addressing, linear probing ---------------------- */

void vcu__pset_init(vcu__pset_t *s)
{
    memset(s, 0, sizeof(*s));
}

void vcu__pset_fini(vcu__pset_t *s)
{
    free(s->keys);
    free(s->vals);
    memset(s, 0, sizeof(*s));
}

static uint32_t vcu__pset_hash(uint64_t k, uint32_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (uint32_t)k & (cap - 1);
}

static int vcu__pset_grow(vcu__pset_t *s)
{
    uint32_t ncap = 64, i;
    uint64_t *ok = s->keys;
    uint64_t *ov = s->vals;
    uint32_t ocap = s->cap;

    /* Rehashing drops the tombstones; size for a load of at most 1/4. */
    while ((uint64_t)(s->live + 1) * 4 > ncap)
        ncap *= 2;
    s->keys = calloc(ncap, sizeof(*s->keys));
    s->vals = calloc(ncap, sizeof(*s->vals));
    if (s->keys == NULL || s->vals == NULL) {
        free(s->keys);
        free(s->vals);
        s->keys = ok;
        s->vals = ov;
        return VCU_ENOMEM;
    }
    s->cap = ncap;
    s->used = 0;
    s->live = 0;
    for (i = 0; i < ocap; i++)
        if (ok[i] != 0 && ok[i] != VCU__PSET_TOMB)
            vcu__pset_add(s, ok[i], ov[i]);
    free(ok);
    free(ov);
    return 0;
}

int vcu__pset_add(vcu__pset_t *s, uint64_t key, uint64_t val)
{
    uint32_t i;

    if ((uint64_t)(s->used + 1) * 2 > s->cap && vcu__pset_grow(s) != 0)
        return VCU_ENOMEM;
    for (i = vcu__pset_hash(key, s->cap);; i = (i + 1) & (s->cap - 1)) {
        if (s->keys[i] == key) {
            s->vals[i] = val;
            return 0;
        }
        if (s->keys[i] == 0) {
            s->keys[i] = key;
            s->vals[i] = val;
            s->used++;
            s->live++;
            return 0;
        }
    }
}

static int vcu__pset_slot(const vcu__pset_t *s, uint64_t key, uint32_t *slot)
{
    uint32_t i, n;

    if (s->cap == 0 || key == 0 || key == VCU__PSET_TOMB)
        return 0;
    for (i = vcu__pset_hash(key, s->cap), n = 0; n < s->cap; i = (i + 1) & (s->cap - 1), n++) {
        if (s->keys[i] == 0)
            return 0;
        if (s->keys[i] == key) {
            *slot = i;
            return 1;
        }
    }
    return 0;
}

int vcu__pset_find(const vcu__pset_t *s, uint64_t key, uint64_t *val)
{
    uint32_t i;

    if (!vcu__pset_slot(s, key, &i))
        return 0;
    if (val != NULL)
        *val = s->vals[i];
    return 1;
}

void vcu__pset_del(vcu__pset_t *s, uint64_t key)
{
    uint32_t i;

    if (!vcu__pset_slot(s, key, &i))
        return;
    s->keys[i] = VCU__PSET_TOMB;
    s->live--;
}
