/*
 * What the library checks share (tests/libs): the verdict lines the
 * suites read, "PASS <name>" or "FAIL <name> <why>" (a FAIL that reached
 * the comparison ends with "against the CPU"), and reproducible inputs.
 */
#ifndef LIBS_TEST_H
#define LIBS_TEST_H

#include <stdio.h>

static int failed;

#define CHECK(name, cond, ...)                       \
    do {                                             \
        if (cond) {                                  \
            printf("PASS %s\n", name);               \
        } else {                                     \
            printf("FAIL %s ", name);                \
            printf(__VA_ARGS__);                     \
            printf("\n");                            \
            failed = 1;                              \
        }                                            \
        fflush(stdout);                              \
    } while (0)

/* A float input in [-1, 1): the same numbers on every run. */
static inline float input(unsigned i, unsigned salt)
{
    unsigned x = i * 2654435761u + salt * 40503u + 12345u;

    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (float)(x & 0xffff) / 32768.0f - 1.0f;
}

#endif /* LIBS_TEST_H */
