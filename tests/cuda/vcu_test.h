/*
 * Shared helpers for the CUDA test programs (tests/cuda/*.cu).
 *
 * Every program prints deterministic lines and ends with "PASS <name>", or
 * prints "FAIL <name>: <why>" and exits 1.  Lines starting with "info:" may
 * carry nondeterministic data (names, timings); run.sh ignores them.
 *
 * Each program defines TEST_NAME before including this file.
 */
#ifndef VCU_TEST_H
#define VCU_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <cuda_runtime.h>

#ifndef TEST_NAME
#error "define TEST_NAME before including vcu_test.h"
#endif

static void vcu_test_fail(const char *fmt, ...)
{
    va_list ap;

    printf("FAIL %s: ", TEST_NAME);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(1);
}

/* A runtime call that must succeed. */
#define CK(call)                                                            \
    do {                                                                    \
        cudaError_t ck_err_ = (call);                                       \
        if (ck_err_ != cudaSuccess)                                         \
            vcu_test_fail("line %d: %s -> %s", __LINE__, #call,             \
                          cudaGetErrorName(ck_err_));                       \
    } while (0)

/* A runtime call that must return exactly `want`. */
#define CK_EQ(want, call)                                                   \
    do {                                                                    \
        cudaError_t ck_err_ = (call);                                       \
        if (ck_err_ != (want))                                              \
            vcu_test_fail("line %d: %s -> %s, want %s", __LINE__, #call,    \
                          cudaGetErrorName(ck_err_),                        \
                          cudaGetErrorName(want));                          \
    } while (0)

/* A kernel launch: the launch itself, then the kernel's completion. */
#define CK_LAUNCH()                                                         \
    do {                                                                    \
        CK(cudaGetLastError());                                             \
        CK(cudaDeviceSynchronize());                                        \
    } while (0)

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond))                                                        \
            vcu_test_fail(__VA_ARGS__);                                     \
    } while (0)

static inline void vcu_test_pass(void)
{
    printf("PASS %s\n", TEST_NAME);
    fflush(stdout);
}

#endif /* VCU_TEST_H */
