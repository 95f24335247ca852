/*
 * Graph memcpy nodes with pageable host memory, for both libraries.  No
 * worker can reach pageable guest memory when a graph runs, so such a
 * copy goes through a page-locked buffer of the library: a host function
 * the graph runs right before the copy (host to device) or right after
 * it (device to host) moves the bytes between the pageable memory and
 * the buffer, and the host makes the pair one node (CU_GRAPH_ADD_NODE
 * with VCU_CU_STAGE_IN or _OUT).  As natively, the graph reads and writes
 * the pageable memory each time it runs.
 *
 * A stage belongs to the graph that made it and to every graph and exec
 * copied from that graph (clones, instantiations), each holding a
 * reference in its vcu__stages_t: the buffer and the host function go
 * with the last of them.
 */
#ifndef VCU_STAGE_H
#define VCU_STAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct vcu__stage_s vcu__stage_t;

struct vcu__stage_s {
    unsigned char *host;            /* the pageable side's first byte */
    size_t pitch, rows;             /* its bytes row to row, rows slice to slice */
    size_t width, height, depth;    /* the copy */
    unsigned char *buf;             /* page-locked, width x height x depth, dense */
    int in;                         /* 1: host to buf, before the copy */
    int refs;                       /* under the stage lock */
    uint64_t cookie;                /* the library's host-function record */
    /* The library's: frees buf and the cookie (after the device's work on
     * them is done).  Called once, with no lock held. */
    void (*release)(vcu__stage_t *st);
};

typedef struct vcu__stages_s {
    vcu__stage_t **v;
    size_t n;
} vcu__stages_t;

/* The bytes of the copy's pageable side (the span the copy touches), or
 * 0 if that overflows. */
size_t vcu__stage_span(size_t width, size_t height, size_t depth, size_t pitch, size_t rows);

/* A copy side's first byte from its base: z slices of rows rows, y rows
 * of pitch bytes, x bytes.  0, or -1 if that overflows. */
int vcu__copy_offset(size_t x, size_t y, size_t z, size_t pitch, size_t rows, size_t *off);

/* A new stage (no buffer, cookie or reference yet) for a copy of width x
 * height x depth whose pageable side starts at host; *bytes the buffer's
 * size.  NULL: no memory, or a size that overflows. */
vcu__stage_t *vcu__stage_new_of(unsigned char *host, size_t pitch, size_t rows, size_t width,
                                size_t height, size_t depth, int in,
                                void (*release)(vcu__stage_t *), size_t *bytes);

/* The host function (a CUhostFn): moves one copy's bytes. */
void vcu__stage_run(void *arg);

/* A new stage's first reference, taken by set: 0, or -1 (no memory; the
 * stage is not taken). */
int vcu__stages_add(vcu__stages_t *set, vcu__stage_t *st);

/* dst (empty) gets a reference to each of src's stages: 0 or -1. */
int vcu__stages_copy(vcu__stages_t *dst, const vcu__stages_t *src);

/* Drops set's references (releasing the stages no one else holds) and
 * empties it. */
void vcu__stages_drop(vcu__stages_t *set);

#endif
