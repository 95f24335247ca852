/*
 * GPU host probe: NVIDIA's own answers from the private tables our
 * libcuda.so.1 serves (docs/driver-api.md), next to ours:
 *  - INTEGRITY_CHECK [1] for several versions, compared with
 *    guest-lib/cuda_integrity.c fed with the driver's own inputs (its
 *    version, pid, thread, table pointers, devices' UUIDs and PCI ids);
 *  - CUDART_INTERFACE [2] (the primary context: retained or not?);
 *  - CONTEXT_CHECKS [2] and [3] on the primary context;
 *  - which slots of every table the runtime asks for are set.
 *
 *   cc -O1 -Iguest-lib -o probe-integrity tests/gpu/probe-integrity.c \
 *       guest-lib/cuda_integrity.c -ldl -lpthread
 *   ./probe-integrity [/path/to/libcuda.so.1]
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_integrity.h"

typedef int (*fn_i)(int);
typedef int (*fn_pi)(int *);
typedef int (*fn_get_table)(const void **, const uint8_t *);
typedef int (*fn_attr)(int *, int, int);
typedef int (*fn_uuid)(uint8_t *, int);
typedef int (*fn_state)(int, unsigned int *, int *);
typedef int (*fn_integrity)(uint32_t, uint64_t, uint64_t *);
typedef int (*fn_primary)(void **, int);
typedef int (*fn_check)(void *, uint32_t *, void **);
typedef int (*fn_void)(void);

static const struct {
    const char *name;
    uint8_t id[16];
} tables[] = {
    { "f8cff951", { 0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e,
                    0x7c, 0x0d, 0xd9 } },
    { "CUDART_INTERFACE", { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39,
                            0x12, 0xfd, 0x9d, 0xf9 } },
    { "TOOLS_RUNTIME_CALLBACK_HOOKS", { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2,
                                        0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 } },
    { "TOOLS_TLS", { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a,
                     0x3a, 0xec, 0xdc } },
    { "CLS", { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8,
               0x95, 0x93 } },
    { "CONTEXT_CHECKS", { 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5,
                          0x00, 0x6d, 0xfa, 0x7e } },
    { "INTEGRITY_CHECK", { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12,
                           0x3c, 0x66, 0xe1, 0xf2 } },
};

#define NT (sizeof(tables) / sizeof(tables[0]))

int main(int argc, char **argv)
{
    void *lib = dlopen(argc > 1 ? argv[1] : "libcuda.so.1", RTLD_NOW);
    const void *t[NT];
    vcu__integrity_dev_t devs[16];
    int ndev = 0, drv = 0, rc, bad = 0;

    if (lib == NULL) {
        fprintf(stderr, "probe: %s\n", dlerror());
        return 2;
    }
    fn_get_table get = (fn_get_table)dlsym(lib, "cuGetExportTable");
    fn_attr attr = (fn_attr)dlsym(lib, "cuDeviceGetAttribute");
    fn_uuid uuid = (fn_uuid)dlsym(lib, "cuDeviceGetUuid_v2");
    fn_state state = (fn_state)dlsym(lib, "cuDevicePrimaryCtxGetState");
    fn_i release = (fn_i)dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
    printf("cuInit %d\n", ((fn_i)dlsym(lib, "cuInit"))(0));
    ((fn_pi)dlsym(lib, "cuDriverGetVersion"))(&drv);
    ((fn_pi)dlsym(lib, "cuDeviceGetCount"))(&ndev);
    printf("driver %d devices %d\n", drv, ndev);
    for (int d = 0; d < ndev && d < 16; d++) {
        uuid(devs[d].uuid, d);
        attr(&devs[d].pci_domain, 50, d);   /* CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID */
        attr(&devs[d].pci_bus, 33, d);      /* PCI_BUS_ID */
        attr(&devs[d].pci_device, 34, d);   /* PCI_DEVICE_ID */
    }
    for (size_t i = 0; i < NT; i++) {
        const void *const *s;
        size_t n;

        rc = get(&t[i], tables[i].id);
        s = t[i];
        n = rc == 0 && i != 4 ? (size_t)s[0] / sizeof(void *) : 4;
        printf("%s rc=%d", tables[i].name, rc);
        for (size_t k = 0; rc == 0 && k < n && k < 32; k++)
            printf(" [%zu]=%s", k, k == 0 && i != 4 ? "size" : s[k] != NULL ? "fn" : "NULL");
        printf("\n");
    }
    /* The integrity check, theirs and ours. */
    const void *const *it = t[6];
    static const uint32_t versions[] = { 13000, 13001, 13002, 12082, 13005, 13009 };
    for (size_t v = 0; v < sizeof(versions) / sizeof(versions[0]); v++) {
        uint64_t theirs[2] = { 0, 0 }, ours[2];
        uint64_t secs = 0x682b9cee + v;
        vcu__integrity_in_t in = {
            .driver_version = (uint32_t)drv,
            .version = versions[v],
            .pid = (uint32_t)getpid(),
            .tid = (uint32_t)pthread_self(),
            .cudart_table = t[1],
            .integrity_table = t[6],
            .integrity_fn = it[1],
            .unix_seconds = secs,
        };
        rc = ((fn_integrity)it[1])(versions[v], secs, theirs);
        vcu__integrity(&in, devs, ndev, ours);
        printf("integrity %u: rc=%d theirs %016llx %016llx ours %016llx %016llx %s\n",
               versions[v], rc, (unsigned long long)theirs[0], (unsigned long long)theirs[1],
               (unsigned long long)ours[0], (unsigned long long)ours[1],
               memcmp(theirs, ours, 16) == 0 ? "MATCH" : "DIFFER");
        bad |= memcmp(theirs, ours, 16) != 0;
    }
    /* The primary context through CUDART_INTERFACE [2]: retained? */
    const void *const *ci = t[1];
    void *ctx = NULL;
    unsigned int flags = 0;
    int active = -1;
    state(0, &flags, &active);
    printf("before [2]: active %d\n", active);
    rc = ((fn_primary)ci[2])(&ctx, 0);
    state(0, &flags, &active);
    printf("cudart[2] rc=%d ctx=%p, after: active %d\n", rc, ctx, active);
    printf("release rc=%d\n", release(0));
    state(0, &flags, &active);
    printf("after release: active %d\n", active);
    /* CONTEXT_CHECKS */
    const void *const *cc = t[5];
    uint32_t wrapped = 77;
    void *unwrapped = (void *)1;
    rc = ((fn_check)cc[2])(ctx, &wrapped, &unwrapped);
    printf("checks[2](primary) rc=%d wrapped=%u unwrapped=%p\n", rc, wrapped, unwrapped);
    wrapped = 77;
    unwrapped = (void *)1;
    rc = ((fn_check)cc[2])(NULL, &wrapped, &unwrapped);
    printf("checks[2](NULL) rc=%d wrapped=%u unwrapped=%p\n", rc, wrapped, unwrapped);
    printf("checks[3]() = %d\n", ((fn_void)cc[3])());
    return bad;
}
