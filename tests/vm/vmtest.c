/* Helpers for the tests/vm guest programs; see vmtest.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "vmtest.h"

const char *vt_suite = "unknown";
static unsigned int vt__npass, vt__nfail;

static void vt__line(const char *prefix, const char *name, const char *fmt, va_list ap)
{
    char buf[1024];
    int n;

    if (name != NULL)
        n = snprintf(buf, sizeof(buf), prefix, vt_suite, name);
    else
        n = snprintf(buf, sizeof(buf), "%s", prefix);
    if (n < 0)
        return;
    if (fmt != NULL && (size_t)n < sizeof(buf) - 2)
        n += vsnprintf(buf + n, sizeof(buf) - 2 - n, fmt, ap);
    if ((size_t)n > sizeof(buf) - 2)
        n = sizeof(buf) - 2;
    /* A reason must stay on its line. */
    for (int i = 0; i < n; i++)
        if (buf[i] == '\n' || buf[i] == '\r')
            buf[i] = ' ';
    buf[n++] = '\n';
    if (write(STDOUT_FILENO, buf, n) < 0)
        return;
}

void vt_pass(const char *name)
{
    va_list ap;

    __atomic_add_fetch(&vt__npass, 1, __ATOMIC_RELAXED);
    memset(&ap, 0, sizeof(ap));
    vt__line("VCU-TEST %s/%s PASS", name, NULL, ap);
}

void vt_fail(const char *name, const char *fmt, ...)
{
    va_list ap;

    __atomic_add_fetch(&vt__nfail, 1, __ATOMIC_RELAXED);
    va_start(ap, fmt);
    vt__line("VCU-TEST %s/%s FAIL ", name, fmt, ap);
    va_end(ap);
}

void vt_info(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vt__line("info: ", NULL, fmt, ap);
    va_end(ap);
}

unsigned int vt_npass(void)
{
    return __atomic_load_n(&vt__npass, __ATOMIC_RELAXED);
}

unsigned int vt_nfail(void)
{
    return __atomic_load_n(&vt__nfail, __ATOMIC_RELAXED);
}

uint64_t vt_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void vt_sleep_ms(unsigned int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int vt_sysfs_u64(const char *attr, uint64_t *out)
{
    char path[256], buf[64];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), VT_SYSFS "%s", attr);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return n < 0 ? -errno : -EIO;
    buf[n] = '\0';
    errno = 0;
    *out = strtoull(buf, NULL, 10);
    return errno ? -errno : 0;
}

int vt_wait_zero(const char *attr, unsigned int timeout_ms, uint64_t *last)
{
    uint64_t t0 = vt_now_us(), v = ~0ull;
    int err;

    for (;;) {
        err = vt_sysfs_u64(attr, &v);
        if (last)
            *last = v;
        if (err)
            return err;
        if (v == 0)
            return 0;
        if (vt_now_us() - t0 > (uint64_t)timeout_ms * 1000u)
            return -ETIMEDOUT;
        vt_sleep_ms(20);
    }
}

void *vt_alloc(size_t len)
{
    size_t pg = 4096, span = ((len + pg - 1) & ~(pg - 1)) + 2 * pg;
    char *p;

    p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (len && mprotect(p + pg, span - 2 * pg, PROT_READ | PROT_WRITE) != 0) {
        munmap(p, span);
        return NULL;
    }
    if (len)
        memset(p + pg, 0, span - 2 * pg);
    return p + pg;
}

void vt_free(void *p, size_t len)
{
    size_t pg = 4096, span = ((len + pg - 1) & ~(pg - 1)) + 2 * pg;

    if (p)
        munmap((char *)p - pg, span);
}

uint64_t vt_fnv(uint64_t h, const void *buf, size_t len)
{
    const unsigned char *b = buf;

    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= VCU_FNV64_PRIME;
    }
    return h;
}

void vt_pattern(void *buf, size_t len, uint64_t seed)
{
    unsigned char *b = buf;
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 0x1234567;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(b + i, &x, 8);
    }
    for (; i < len; i++)
        b[i] = (unsigned char)(x >> (8 * (i & 7)));
}

long long vt_check_fill(const void *buf, size_t len, uint64_t seed, uint64_t off0)
{
    const unsigned char *b = buf;

    for (size_t i = 0; i < len; i++)
        if (b[i] != vcu_echo_byte(seed, off0 + i))
            return (long long)i;
    return -1;
}

long long vt_check_byte(const void *buf, size_t len, unsigned char c)
{
    const unsigned char *b = buf;

    for (size_t i = 0; i < len; i++)
        if (b[i] != c)
            return (long long)i;
    return -1;
}
