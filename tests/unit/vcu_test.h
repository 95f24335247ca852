/*
 * Tiny unit-test framework for tests/unit (libuv style).
 *
 *   TEST(name) { ...; ASSERT_EQ(VCU_EBUSY, rc); return 0; }
 *
 * A test returns 0 on success; an ASSERT that fails prints file:line, the
 * expression and both values, and returns 1 from the enclosing function
 * (helpers that use ASSERT must return int too).  Every test is listed
 * once, in test_list.h (or test_list_cuda.h for the CUDA executor's).
 * The runner (runner.c) runs each test in a child process of its own, so
 * a crash, a hang (timeout) or a leak found by LeakSanitizer fails only
 * that test.
 */
#ifndef VCU_TEST_H
#define VCU_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define TEST(name) int test_##name(void)

#define VCU_TEST_FAIL_(fmt, ...)                                                        \
    do {                                                                                \
        fprintf(stderr, "%s:%d: " fmt "\n", __FILE__, __LINE__, __VA_ARGS__);          \
        return 1;                                                                       \
    } while (0)

/* Integers of any type up to 64 bits; printed signed and in hex. */
#define VCU_TEST_CMP_(op, a, b)                                                         \
    do {                                                                                \
        long long a_ = (long long)(a);                                                  \
        long long b_ = (long long)(b);                                                  \
        if (!(a_ op b_))                                                                \
            VCU_TEST_FAIL_("ASSERT(%s %s %s) failed: %lld (0x%llx) vs %lld (0x%llx)",   \
                           #a, #op, #b, a_, (unsigned long long)a_, b_,                 \
                           (unsigned long long)b_);                                     \
    } while (0)

#define ASSERT_EQ(a, b) VCU_TEST_CMP_(==, a, b)
#define ASSERT_NE(a, b) VCU_TEST_CMP_(!=, a, b)
#define ASSERT_LT(a, b) VCU_TEST_CMP_(<, a, b)
#define ASSERT_LE(a, b) VCU_TEST_CMP_(<=, a, b)
#define ASSERT_GT(a, b) VCU_TEST_CMP_(>, a, b)
#define ASSERT_GE(a, b) VCU_TEST_CMP_(>=, a, b)

/* Unsigned 64-bit values (hashes, sizes), printed in hex. */
#define ASSERT_EQ_U64(a, b)                                                             \
    do {                                                                                \
        uint64_t a_ = (uint64_t)(a);                                                    \
        uint64_t b_ = (uint64_t)(b);                                                    \
        if (a_ != b_)                                                                   \
            VCU_TEST_FAIL_("ASSERT_EQ_U64(%s, %s) failed: 0x%" PRIx64 " vs 0x%" PRIx64, \
                           #a, #b, a_, b_);                                             \
    } while (0)

#define ASSERT_NE_U64(a, b) ASSERT_TRUE((uint64_t)(a) != (uint64_t)(b))

#define ASSERT_TRUE(x)                                                                  \
    do {                                                                                \
        if (!(x))                                                                       \
            VCU_TEST_FAIL_("ASSERT_TRUE(%s) failed", #x);                               \
    } while (0)

#define ASSERT_NULL(p) ASSERT_TRUE((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT_TRUE((p) != NULL)

#define ASSERT_STR_EQ(a, b)                                                             \
    do {                                                                                \
        const char *a_ = (a);                                                           \
        const char *b_ = (b);                                                           \
        if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                            \
            VCU_TEST_FAIL_("ASSERT_STR_EQ(%s, %s) failed: \"%s\" vs \"%s\"", #a, #b,    \
                           a_ ? a_ : "(null)", b_ ? b_ : "(null)");                     \
    } while (0)

#define ASSERT_MEM_EQ(a, b, n)                                                          \
    do {                                                                                \
        size_t n_ = (n);                                                                \
        if (memcmp((a), (b), n_) != 0)                                                  \
            VCU_TEST_FAIL_("ASSERT_MEM_EQ(%s, %s, %zu) failed", #a, #b, n_);            \
    } while (0)

/* Propagates a failing helper (one returning int, 0 = ok). */
#define CHECK(call)                                                                     \
    do {                                                                                \
        if ((call) != 0)                                                                \
            VCU_TEST_FAIL_("CHECK(%s) failed", #call);                                  \
    } while (0)

#endif /* VCU_TEST_H */
