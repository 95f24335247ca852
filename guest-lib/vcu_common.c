/*
 * Shared by libcudart.so.13 and libcuda.so.1 (vcu_common.h): the handle
 * registry, log-once messages, the device's description and the
 * attributes the library answers itself, CUDA_VISIBLE_DEVICES, virtual
 * PCI addresses and device printf output.
 */
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cuda.h>

#include "vcu_common.h"
#include "vcu_proto.h"

void vcu__log_once(int *flag, const char *fmt, ...)
{
    va_list ap;

    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED))
        return;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* ---- the launch buffer ---------------------------------------------------- */

static __thread vcu__launch_req_t *vcu__lbuf;
static __thread int vcu__lbuf_taken;
static pthread_key_t vcu__lbuf_key;
static pthread_once_t vcu__lbuf_once = PTHREAD_ONCE_INIT;
static int vcu__lbuf_keyed;

static void vcu__lbuf_init(void)
{
    vcu__lbuf_keyed = pthread_key_create(&vcu__lbuf_key, free) == 0;
}

vcu__launch_req_t *vcu__launch_buf(void)
{
    if (vcu__lbuf_taken)
        return malloc(sizeof(vcu__launch_req_t));
    if (vcu__lbuf == NULL) {
        pthread_once(&vcu__lbuf_once, vcu__lbuf_init);
        if (!vcu__lbuf_keyed)
            return malloc(sizeof(vcu__launch_req_t));
        vcu__lbuf = malloc(sizeof(vcu__launch_req_t));
        if (vcu__lbuf == NULL)
            return NULL;
        if (pthread_setspecific(vcu__lbuf_key, vcu__lbuf) != 0) {
            vcu__launch_req_t *b = vcu__lbuf;

            vcu__lbuf = NULL;
            return b;               /* freed by vcu__launch_buf_put() */
        }
    }
    vcu__lbuf_taken = 1;
    return vcu__lbuf;
}

void vcu__launch_buf_put(vcu__launch_req_t *buf)
{
    if (buf != NULL && buf == vcu__lbuf)
        vcu__lbuf_taken = 0;
    else
        free(buf);
}

/*
 * The device attributes this library answers itself, the same for both
 * runtimes: what it provides over the host's (mapped and registered host
 * memory, managed memory emulated in the guest, not concurrently with the
 * device), and what it does not provide whatever the GPU does, so that
 * programs take their other path: concurrent managed access, pageable
 * memory access, the guest CPU's atomics on device memory, a registered
 * pointer used as its device pointer (it differs outside loopback), and
 * shareable handles but POSIX descriptors of cuMemCreate's allocations
 * and of pools (docs/design.md, "CUDA IPC"; the host says whether it
 * offers those and interprocess events).
 */
static const struct {
    uint32_t attr;
    uint32_t value;
} vcu__attr_fixed[] = {
    { CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1 },
    { CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1 },
    { CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1 },
    { CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0 },
    { CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0 },
    { CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0 },
    { CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0 },
    { CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0 },
    { CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0 },
    { CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 0 },
    { CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 0 },
    { CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0 },
};

int vcu__device_info(vcu_conn_t *conn, uint32_t vord, struct vcu_cu_device_info_resp *out)
{
    struct vcu_cu_hdr h = { .device = vord };
    int err;

    memset(out, 0, sizeof(*out));
    err = vcu_conn_call(conn, VCU_OP_CU_DEVICE_INFO, 0, &h, sizeof(h), NULL, 0, out,
                        sizeof(*out), NULL);
    if (err != 0)
        return err;
    out->name[sizeof(out->name) - 1] = '\0';
    for (size_t i = 0; i < sizeof(vcu__attr_fixed) / sizeof(vcu__attr_fixed[0]); i++)
        if (vcu__attr_fixed[i].attr < out->num_attrs && vcu__attr_fixed[i].attr < VCU_CU_NUM_DEV_ATTRS)
            out->attrs[vcu__attr_fixed[i].attr] = vcu__attr_fixed[i].value;
    return 0;
}

const char *vcu__dev_path(void)
{
    const char *p = getenv("VCU_DEVICE");

    return p != NULL && p[0] ? p : "/dev/vcuda0";
}

void vcu__uuid_str(const uint8_t *u, char *buf, size_t len)
{
    snprintf(buf, len,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

int vcu__visible_devices(const char *env, uint32_t n,
                         int (*uuid_of)(void *arg, uint32_t vord, uint8_t uuid[16]),
                         void *arg, uint32_t *vord, int max)
{
    char *copy, *tok, *save = NULL;
    int k = 0, j;

    if (env == NULL) {
        for (uint32_t i = 0; i < n && k < max; i++)
            vord[k++] = i;
        return k;
    }
    copy = strdup(env);
    if (copy == NULL)
        return 0;
    for (tok = strtok_r(copy, ",", &save); tok != NULL && k < max;
         tok = strtok_r(NULL, ",", &save)) {
        long idx = -1;
        char *end;

        while (isspace((unsigned char)*tok))
            tok++;
        if (isdigit((unsigned char)*tok)) {
            idx = strtol(tok, &end, 10);
            while (isspace((unsigned char)*end))
                end++;
            if (*end != '\0' || idx < 0 || idx >= (long)n)
                break;
        } else if (strncmp(tok, "GPU-", 4) == 0 && tok[4] != '\0') {
            uint8_t uuid[16];
            char u[64];
            int match = -1, nmatch = 0;

            for (uint32_t i = 0; i < n; i++) {
                if (uuid_of(arg, i, uuid) != 0)
                    continue;
                vcu__uuid_str(uuid, u, sizeof(u));
                if (strncasecmp(u, tok, strlen(tok)) == 0) {
                    match = (int)i;
                    nmatch++;
                }
            }
            if (nmatch != 1)
                break;
            idx = match;
        } else {
            break;
        }
        for (j = 0; j < k; j++)
            if (vord[j] == (uint32_t)idx)
                break;
        if (j < k)
            break;      /* a repeated device ends the list, as NVIDIA's does */
        vord[k++] = (uint32_t)idx;
    }
    free(copy);
    return k;
}

/* The class device's parent is the virtio device
 * (.../0000:00:03.0/virtio0): the PCI function is the nearest ancestor
 * whose name is a PCI address. */
int vcu__pci_addr(const char *devpath, unsigned int *dom, unsigned int *bus,
                  unsigned int *slot)
{
    const char *base = strrchr(devpath, '/');
    char sys[PATH_MAX], real[PATH_MAX];
    unsigned int fn;
    int have = 0;

    base = base != NULL ? base + 1 : devpath;
    snprintf(sys, sizeof(sys), "/sys/class/vcuda/%s/device", base);
    if (realpath(sys, real) == NULL)
        return 0;
    while (!have) {
        char *b = strrchr(real, '/');
        char tail;

        if (b == NULL)
            break;
        have = sscanf(b + 1, "%x:%x:%x.%x%c", dom, bus, slot, &fn, &tail) == 4;
        *b = '\0';
    }
    return have;
}

/* Handle registry: an open-addressing hash set of (pointer, kind). */
typedef struct vcu__slot_s {
    uintptr_t p;                    /* 0 empty, 1 deleted */
    int kind;
} vcu__slot_t;

static pthread_mutex_t vcu__reg_mu = PTHREAD_MUTEX_INITIALIZER;  /* protects the set */
static vcu__slot_t *vcu__set;
static size_t vcu__set_cap, vcu__set_used;

static size_t vcu__hash(uintptr_t p)
{
    uint64_t x = (uint64_t)p * 0x9e3779b97f4a7c15ULL;

    return (size_t)(x >> 17);
}

static int vcu__set_grow(void)
{
    size_t ncap = vcu__set_cap ? vcu__set_cap * 2 : 256, i, j;
    vcu__slot_t *n = calloc(ncap, sizeof(*n));

    if (n == NULL)
        return -1;
    for (i = 0; i < vcu__set_cap; i++) {
        if (vcu__set[i].p <= 1)
            continue;
        for (j = vcu__hash(vcu__set[i].p) & (ncap - 1); n[j].p; j = (j + 1) & (ncap - 1))
            ;
        n[j] = vcu__set[i];
    }
    free(vcu__set);
    vcu__set = n;
    vcu__set_cap = ncap;
    return 0;
}

static vcu__slot_t *vcu__set_find(uintptr_t p)
{
    size_t j, n;

    if (vcu__set_cap == 0)
        return NULL;
    for (j = vcu__hash(p) & (vcu__set_cap - 1), n = 0; n < vcu__set_cap;
         j = (j + 1) & (vcu__set_cap - 1), n++) {
        if (vcu__set[j].p == p)
            return &vcu__set[j];
        if (vcu__set[j].p == 0)
            return NULL;
    }
    return NULL;
}

int vcu__reg_add(const void *p, int kind)
{
    uintptr_t v = (uintptr_t)p;
    size_t j;
    int ret = 0;

    pthread_mutex_lock(&vcu__reg_mu);
    if ((vcu__set_used + 1) * 2 > vcu__set_cap && vcu__set_grow() != 0) {
        ret = VCU_ENOMEM;
        goto out;
    }
    for (j = vcu__hash(v) & (vcu__set_cap - 1); vcu__set[j].p > 1; j = (j + 1) & (vcu__set_cap - 1))
        ;
    if (vcu__set[j].p == 0)
        vcu__set_used++;
    vcu__set[j].p = v;
    vcu__set[j].kind = kind;
out:
    pthread_mutex_unlock(&vcu__reg_mu);
    return ret;
}

int vcu__reg_has(const void *p, int kind)
{
    vcu__slot_t *s;
    int ret;

    if ((uintptr_t)p <= 1)
        return 0;
    pthread_mutex_lock(&vcu__reg_mu);
    s = vcu__set_find((uintptr_t)p);
    ret = s != NULL && s->kind == kind;
    pthread_mutex_unlock(&vcu__reg_mu);
    return ret;
}

void vcu__reg_del(const void *p)
{
    vcu__slot_t *s;

    if ((uintptr_t)p <= 1)
        return;
    pthread_mutex_lock(&vcu__reg_mu);
    s = vcu__set_find((uintptr_t)p);
    if (s != NULL)
        s->p = 1;
    pthread_mutex_unlock(&vcu__reg_mu);
}

void vcu__output_take(vcu_conn_t *c, uint32_t vord, uint64_t flags)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_output_resp o;
    unsigned char *buf;
    uint32_t rlen;
    int more = 1;

    buf = malloc(VCU_MAX_PAYLOAD);
    if (buf == NULL)
        return;
    while (more) {
        memset(&r, 0, sizeof(r));
        r.hdr.device = vord;
        r.value = flags;
        rlen = 0;
        if (vcu_conn_call(c, VCU_OP_CU_TAKE_OUTPUT, 0, &r, sizeof(r), NULL, 0, buf,
                          VCU_MAX_PAYLOAD, &rlen) != 0 || rlen < sizeof(o))
            break;
        memcpy(&o, buf, sizeof(o));
        if (o.len > rlen - sizeof(o))
            break;
        if (o.len > 0)
            fwrite(buf + sizeof(o), 1, o.len, stdout);
        more = o.more != 0 && o.len > 0;
        flags = 0;                  /* synchronized once is enough */
    }
    free(buf);
}
