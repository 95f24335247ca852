/*
 * Helpers shared by the guest test programs of tests/vm (echo_test,
 * badinput_test).  They run inside the VM, started by the initramfs /init.
 *
 * Every test prints exactly one line on stdout (the serial console):
 *   VCU-TEST <suite>/<name> PASS
 *   VCU-TEST <suite>/<name> FAIL <reason>
 * run.sh counts those lines; lines starting "info:" are for people.
 */
#ifndef VCU_VMTEST_H
#define VCU_VMTEST_H

#include <stddef.h>
#include <stdint.h>

#include "vcu_proto.h"

#define VT_DEV "/dev/vcuda0"
#define VT_SYSFS "/sys/class/vcuda/vcuda0/"

/* Suite name printed in every VCU-TEST line; set once in main(). */
extern const char *vt_suite;

/* One result line; both are thread and fork safe (one write(2) each). */
void vt_pass(const char *name);
void vt_fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Counts of vt_pass/vt_fail calls in this process. */
unsigned int vt_npass(void);
unsigned int vt_nfail(void);

uint64_t vt_now_us(void);
void vt_sleep_ms(unsigned int ms);

/* Reads a decimal sysfs attribute of vcuda0; 0 or -errno. */
int vt_sysfs_u64(const char *attr, uint64_t *out);
/* Polls attr until it reads 0; returns 0, or -ETIMEDOUT with *last. */
int vt_wait_zero(const char *attr, unsigned int timeout_ms, uint64_t *last);

/* Anonymous private mapping, populated, with one PROT_NONE guard page on
 * each side; NULL on failure.  Free with vt_free(p, len). */
void *vt_alloc(size_t len);
void vt_free(void *p, size_t len);

/* FNV-1a 64 continuing from h (start with VCU_FNV64_INIT). */
uint64_t vt_fnv(uint64_t h, const void *buf, size_t len);
/* Fills buf with a cheap pseudo-random pattern derived from seed. */
void vt_pattern(void *buf, size_t len, uint64_t seed);
/* Offset of the first byte of buf that is not vcu_echo_byte(seed, off0 + i),
 * or -1 when all match. */
long long vt_check_fill(const void *buf, size_t len, uint64_t seed, uint64_t off0);
/* Offset of the first byte that is not c, or -1. */
long long vt_check_byte(const void *buf, size_t len, unsigned char c);

#endif /* VCU_VMTEST_H */
