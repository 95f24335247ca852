/*
 * The fuzz input as a stream the harnesses read little-endian integers
 * from; past its end every read gives 0.
 */
#ifndef FZ_INPUT_H
#define FZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in_t;

/* The next `bytes` bytes (at most 8) as a little-endian integer. */
static inline uint64_t in_u(fz_in_t *in, unsigned int bytes)
{
    uint64_t v = 0;
    unsigned int i;

    for (i = 0; i < bytes && in->n > 0; i++, in->n--)
        v |= (uint64_t)*in->p++ << (8 * i);
    return v;
}

#endif /* FZ_INPUT_H */
