/*
 * Pageable host memory in graph memcpy nodes: vcu_stage.h.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vcu_stage.h"

static pthread_mutex_t vcu__stage_mu = PTHREAD_MUTEX_INITIALIZER;  /* refs, and every set */

size_t vcu__stage_span(size_t width, size_t height, size_t depth, size_t pitch, size_t rows)
{
    size_t t, span;

    if (width == 0 || height == 0 || depth == 0)
        return 0;
    if (__builtin_mul_overflow(depth - 1, rows, &t) || __builtin_add_overflow(t, height - 1, &t) ||
        __builtin_mul_overflow(t, pitch, &span) || __builtin_add_overflow(span, width, &span))
        return 0;
    return span;
}

int vcu__copy_offset(size_t x, size_t y, size_t z, size_t pitch, size_t rows, size_t *off)
{
    size_t t;

    if (__builtin_mul_overflow(z, rows, &t) || __builtin_add_overflow(t, y, &t) ||
        __builtin_mul_overflow(t, pitch, &t) || __builtin_add_overflow(t, x, &t))
        return -1;
    *off = t;
    return 0;
}

vcu__stage_t *vcu__stage_new_of(unsigned char *host, size_t pitch, size_t rows, size_t width,
                                size_t height, size_t depth, int in,
                                void (*release)(vcu__stage_t *), size_t *bytes)
{
    vcu__stage_t *st;
    size_t n;

    if (__builtin_mul_overflow(width, height, &n) || __builtin_mul_overflow(n, depth, &n))
        return NULL;
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return NULL;
    st->host = host;
    st->pitch = pitch;
    st->rows = rows;
    st->width = width;
    st->height = height;
    st->depth = depth;
    st->in = in;
    st->release = release;
    *bytes = n;
    return st;
}

void vcu__stage_run(void *arg)
{
    const vcu__stage_t *st = arg;

    for (size_t z = 0; z < st->depth; z++) {
        for (size_t y = 0; y < st->height; y++) {
            unsigned char *h = st->host + (z * st->rows + y) * st->pitch;
            unsigned char *b = st->buf + (z * st->height + y) * st->width;

            if (st->in)
                memcpy(b, h, st->width);
            else
                memcpy(h, b, st->width);
        }
    }
}

static int vcu__stages_grow(vcu__stages_t *set, size_t more)
{
    vcu__stage_t **v = realloc(set->v, (set->n + more) * sizeof(*v));

    if (v == NULL)
        return -1;
    set->v = v;
    return 0;
}

int vcu__stages_add(vcu__stages_t *set, vcu__stage_t *st)
{
    int rc;

    pthread_mutex_lock(&vcu__stage_mu);
    rc = vcu__stages_grow(set, 1);
    if (rc == 0) {
        st->refs = 1;
        set->v[set->n++] = st;
    }
    pthread_mutex_unlock(&vcu__stage_mu);
    return rc;
}

int vcu__stages_copy(vcu__stages_t *dst, const vcu__stages_t *src)
{
    int rc = 0;

    pthread_mutex_lock(&vcu__stage_mu);
    if (src->n > 0)
        rc = vcu__stages_grow(dst, src->n);
    if (rc == 0) {
        for (size_t i = 0; i < src->n; i++) {
            src->v[i]->refs++;
            dst->v[dst->n++] = src->v[i];
        }
    }
    pthread_mutex_unlock(&vcu__stage_mu);
    return rc;
}

void vcu__stages_drop(vcu__stages_t *set)
{
    vcu__stage_t **v;
    size_t n, gone = 0;

    pthread_mutex_lock(&vcu__stage_mu);
    v = set->v;
    n = set->n;
    set->v = NULL;
    set->n = 0;
    for (size_t i = 0; i < n; i++)
        if (--v[i]->refs == 0)
            v[gone++] = v[i];
    pthread_mutex_unlock(&vcu__stage_mu);
    for (size_t i = 0; i < gone; i++) {
        v[i]->release(v[i]);
        free(v[i]);
    }
    free(v);
}
