/*
 * Helpers of the Driver API tests: each program prints "PASS <name>" as
 * its last line and exits 0, or prints what failed and exits 1
 * (tests/cuda/run.sh judges them).
 */
#ifndef VCU_DRV_TEST_H
#define VCU_DRV_TEST_H

#include <cuda.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline const char *vcu_drv_name(CUresult r)
{
    const char *n = NULL;

    if (cuGetErrorName(r, &n) != CUDA_SUCCESS || n == NULL)
        return "?";
    return n;
}

/* Built with -DVCU_DRV_GO_ON (by hand, to compare with another driver):
 * every failure is printed and the program goes on. */
#ifdef VCU_DRV_GO_ON
#define VCU_DRV_STOP() ((void)0)
#else
#define VCU_DRV_STOP() exit(1)
#endif

/* The call must give want. */
#define EXPECT(want, call)                                                             \
    do {                                                                               \
        CUresult r_ = (call);                                                          \
        if (r_ != (want)) {                                                            \
            printf("FAIL %s:%d: %s = %d (%s), want %d (%s)\n", __FILE__, __LINE__, #call, \
                   (int)r_, vcu_drv_name(r_), (int)(want), vcu_drv_name(want));        \
            VCU_DRV_STOP();                                                            \
        }                                                                              \
    } while (0)

#define CK(call) EXPECT(CUDA_SUCCESS, call)

#define TRUE(cond)                                                                     \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                     \
            VCU_DRV_STOP();                                                            \
        }                                                                              \
    } while (0)

/* Reads a file that lies next to this program; the caller frees it. */
static inline void *vcu_drv_read_beside(const char *name, size_t *len)
{
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    char *slash, *buf;
    FILE *f;
    long sz;

    TRUE(n > 0);
    path[n] = '\0';
    slash = strrchr(path, '/');
    TRUE(slash != NULL && (size_t)(slash - path) + 2 + strlen(name) < sizeof(path));
    strcpy(slash + 1, name);
    f = fopen(path, "rb");
    TRUE(f != NULL);
    TRUE(fseek(f, 0, SEEK_END) == 0);
    sz = ftell(f);
    TRUE(sz > 0);
    rewind(f);
    buf = malloc((size_t)sz + 1);
    TRUE(buf != NULL);
    TRUE(fread(buf, 1, (size_t)sz, f) == (size_t)sz);
    buf[sz] = '\0';
    fclose(f);
    if (len != NULL)
        *len = (size_t)sz;
    return buf;
}

/* Path of a file next to this program (static buffer). */
static inline const char *vcu_drv_beside(const char *name)
{
    static char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    char *slash;

    TRUE(n > 0);
    path[n] = '\0';
    slash = strrchr(path, '/');
    TRUE(slash != NULL && (size_t)(slash - path) + 2 + strlen(name) < sizeof(path));
    strcpy(slash + 1, name);
    return path;
}

/* Every 32-bit word of the bytes at p (device memory) is v; else the
 * first that is not is printed and the test ends. */
static inline void vcu_drv_expect_words(CUdeviceptr p, size_t bytes, unsigned int v)
{
    unsigned int *host = malloc(bytes);

    TRUE(host != NULL);
    CK(cuMemcpyDtoH(host, p, bytes));
    for (size_t i = 0; i < bytes / sizeof(*host); i++)
        if (host[i] != v) {
            printf("FAIL word %zu = 0x%x, want 0x%x\n", i, host[i], v);
            exit(1);
        }
    free(host);
}

#endif /* VCU_DRV_TEST_H */
