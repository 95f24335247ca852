/*
 * Unit-test runner: runs every test of test_list.h (and test_list_cuda.h
 * where it exists), or those named on the command line, each in a child
 * process of its own with a time limit.  Prints "PASS name" or
 * "FAIL name" per test and "N passed, N failed" last; exits 1 on any
 * failure.  VCU_TEST_NOFORK=1 runs the tests in-process (for gdb);
 * VCU_TEST_TIMEOUT sets the limit per test in seconds (default 120).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vcu_test.h"
#include "test_list.h"

/* The Makefile defines VCU_NO_CUDA_TESTS while test_cuda.c is missing. */
#if defined(__has_include) && !defined(VCU_NO_CUDA_TESTS)
#if __has_include("test_list_cuda.h")
#include "test_list_cuda.h"
#endif
#endif
#ifndef VCU_TESTS_CUDA
#define VCU_TESTS_CUDA(X)
#endif

#define VCU_TEST_DECL_(name) int test_##name(void);
VCU_TESTS(VCU_TEST_DECL_)
VCU_TESTS_CUDA(VCU_TEST_DECL_)

typedef struct {
    const char *name;
    int (*fn)(void);
} vcu_test_entry_t;

#define VCU_TEST_ENTRY_(name) {#name, test_##name},
static const vcu_test_entry_t tests[] = {VCU_TESTS(VCU_TEST_ENTRY_) VCU_TESTS_CUDA(VCU_TEST_ENTRY_)};

static int run_forked(const vcu_test_entry_t *t, unsigned int timeout)
{
    pid_t pid;
    int status;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        alarm(timeout);
        exit(t->fn() == 0 ? 0 : 1);
    }
    if (waitpid(pid, &status, 0) < 0) {
        perror("waitpid");
        return 1;
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status) != 0;
    fprintf(stderr, "%s: killed by signal %d%s\n", t->name, WTERMSIG(status),
            WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
    return 1;
}

int main(int argc, char **argv)
{
    size_t ntests = sizeof(tests) / sizeof(tests[0]);
    const char *env = getenv("VCU_TEST_TIMEOUT");
    unsigned int timeout = env ? (unsigned int)strtoul(env, NULL, 10) : 120;
    int nofork = getenv("VCU_TEST_NOFORK") && strcmp(getenv("VCU_TEST_NOFORK"), "0") != 0;
    unsigned int passed = 0, failed = 0;
    size_t i;
    int a;

    for (a = 1; a < argc; a++) {
        for (i = 0; i < ntests; i++)
            if (strcmp(argv[a], tests[i].name) == 0)
                break;
        if (i == ntests) {
            printf("FAIL %s\n", argv[a]);
            fprintf(stderr, "%s: no such test\n", argv[a]);
            failed++;
        }
    }
    for (i = 0; i < ntests; i++) {
        int fail;

        if (argc > 1) {
            for (a = 1; a < argc; a++)
                if (strcmp(argv[a], tests[i].name) == 0)
                    break;
            if (a == argc)
                continue;
        }
        fail = nofork ? tests[i].fn() != 0 : run_forked(&tests[i], timeout);
        printf("%s %s\n", fail ? "FAIL" : "PASS", tests[i].name);
        fflush(stdout);
        if (fail)
            failed++;
        else
            passed++;
    }
    printf("%u passed, %u failed\n", passed, failed);
    return failed ? 1 : 0;
}
