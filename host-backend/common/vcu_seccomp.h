/*
 * The worker's seccomp filter (seccomp.c).
 */
#ifndef VCU_SECCOMP_H
#define VCU_SECCOMP_H

enum {
    VCU_SECCOMP_OFF = 0,            /* no filter (--seccomp off: diagnosis only) */
    VCU_SECCOMP_ON = 1,             /* the allowlist; anything else fails with EPERM */
    VCU_SECCOMP_LOG = 2,            /* anything else is allowed and logged by the kernel */
};

/* Installs the filter on every thread of this process (and no_new_privs,
 * which it needs).  0 or a negative errno. */
int vcu_seccomp_install(int mode);

#endif /* VCU_SECCOMP_H */
