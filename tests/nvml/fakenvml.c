/*
 * TEST DOUBLE ONLY: a host NVML for the host backend's NVLink report
 * (CU_NVLINK_INFO), loaded in place of libnvidia-ml.so.1 where
 * VCU_HOST_NVML names it.  It knows the CPU stand-in's GPUs
 * (tests/fakecuda: UUID "vcu-test-double" + the ordinal, PCI bus
 * 0x19 + 0x20 * ordinal) and links them as below, so that a test can
 * tell what the guest may see from what it must not:
 *
 *   GPU 0  link 0: GPU 1, up          link 1: NVSwitch, up
 *          link 2: GPU 2, up          link 3: NVSwitch, down
 *          link 4: a CPU (IBM NPU), up
 *   GPU 1  link 0: GPU 0, up          link 1: NVSwitch, up
 *   GPU 2  link 0: GPU 0, up
 *
 * Every other link is absent (NVML_ERROR_NOT_SUPPORTED).  Capabilities
 * of a link that is there: P2P (0), P2P atomics (2) and valid (5).
 * Only the calls the backend makes are here; NVML's return codes and
 * struct layout are nvml.h's, written out so that no header is needed.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define FN_EXPORT __attribute__((visibility("default")))

enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6 };
enum { T_GPU = 0, T_NPU = 1, T_SWITCH = 2 };

typedef struct {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} fake_pci_t;

struct fake_link {
    int type;                       /* T_*; -1: absent */
    int up;
    int peer;                       /* T_GPU: the stand-in's ordinal */
};

#define NGPU 3
#define NLINK 18

static const struct fake_link *fake_link(uintptr_t h, unsigned int l)
{
    static const struct fake_link absent = { -1, 0, 0 };
    static const struct fake_link g0[] = {
        { T_GPU, 1, 1 }, { T_SWITCH, 1, 0 }, { T_GPU, 1, 2 }, { T_SWITCH, 0, 0 }, { T_NPU, 1, 0 },
    };
    static const struct fake_link g1[] = { { T_GPU, 1, 0 }, { T_SWITCH, 1, 0 } };
    static const struct fake_link g2[] = { { T_GPU, 1, 0 } };

    if (h == 1 && l < sizeof(g0) / sizeof(g0[0]))
        return &g0[l];
    if (h == 2 && l < sizeof(g1) / sizeof(g1[0]))
        return &g1[l];
    if (h == 3 && l < sizeof(g2) / sizeof(g2[0]))
        return &g2[l];
    return &absent;
}

FN_EXPORT int nvmlInit_v2(void)
{
    return OK;
}

/* "GPU-7663752d-...-6f75626c65NN" ("vcu-test-double", then the
 * stand-in's ordinal NN); a handle is the ordinal + 1. */
FN_EXPORT int nvmlDeviceGetHandleByUUID(const char *uuid, void **dev)
{
    static const char head[] = "GPU-7663752d-7465-7374-2d64-6f75626c65";
    unsigned int ord;

    if (uuid == NULL || dev == NULL || strncmp(uuid, head, sizeof(head) - 1) != 0 ||
        strlen(uuid) != sizeof(head) - 1 + 2 || sscanf(uuid + sizeof(head) - 1, "%2x", &ord) != 1 ||
        ord >= NGPU)
        return NOT_FOUND;
    *dev = (void *)(uintptr_t)(ord + 1);
    return OK;
}

FN_EXPORT int nvmlDeviceGetProcessUtilization(void *dev, void *samples, unsigned int *n,
                                              unsigned long long since)
{
    (void)dev;
    (void)samples;
    (void)since;
    if (n != NULL)
        *n = 0;
    return NOT_FOUND;
}

FN_EXPORT int nvmlDeviceGetNvLinkState(void *dev, unsigned int link, int *active)
{
    const struct fake_link *k = fake_link((uintptr_t)dev, link);

    if (link >= NLINK || active == NULL)
        return INVALID_ARGUMENT;
    if (k->type < 0)
        return NOT_SUPPORTED;
    *active = k->up;
    return OK;
}

FN_EXPORT int nvmlDeviceGetNvLinkCapability(void *dev, unsigned int link, int cap,
                                            unsigned int *res)
{
    const struct fake_link *k = fake_link((uintptr_t)dev, link);

    if (link >= NLINK || res == NULL || cap < 0 || cap > 5)
        return INVALID_ARGUMENT;
    if (k->type < 0)
        return NOT_SUPPORTED;
    *res = cap == 0 || cap == 2 || cap == 5;
    return OK;
}

FN_EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(void *dev, unsigned int link, int *type)
{
    const struct fake_link *k = fake_link((uintptr_t)dev, link);

    if (link >= NLINK || type == NULL)
        return INVALID_ARGUMENT;
    if (k->type < 0)
        return NOT_SUPPORTED;
    *type = k->type;
    return OK;
}

/* The far end's address: a GPU's as the stand-in gives it; a switch's
 * and a CPU's where no GPU is, which the guest must never see. */
FN_EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *dev, unsigned int link, fake_pci_t *pci)
{
    const struct fake_link *k = fake_link((uintptr_t)dev, link);

    if (link >= NLINK || pci == NULL)
        return INVALID_ARGUMENT;
    if (k->type < 0)
        return NOT_SUPPORTED;
    memset(pci, 0, sizeof(*pci));
    pci->bus = k->type == T_GPU ? 0x19 + 0x20 * (unsigned int)k->peer : 0xc5;
    snprintf(pci->bus_id, sizeof(pci->bus_id), "00000000:%02X:00.0", pci->bus);
    snprintf(pci->bus_id_legacy, sizeof(pci->bus_id_legacy), "0000:%02X:00.0", pci->bus);
    return OK;
}
