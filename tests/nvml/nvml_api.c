/*
 * guest-lib's libnvidia-ml.so.1 against our libcuda.so.1, over loopback
 * (the host backend and the CPU stand-in in this process) or in a guest
 * (suite nvml, with nothing else holding the device): what NVML says
 * of each device is what libcuda says (name, UUID, PCI bus id, compute
 * capability, peer-to-peer status), memory figures are cuMemGetInfo's and follow an
 * allocation, the process list (in a guest: this process, once), setters
 * are refused, unimplemented names are not
 * supported, bad arguments and handles are NVML_ERROR_INVALID_ARGUMENT,
 * nothing works before nvmlInit or after the last nvmlShutdown.
 * Last line: "N passed, N failed".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cuda.h>
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

static int passed, failed;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            passed++;                                                          \
        } else {                                                               \
            failed++;                                                          \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);             \
            printf(__VA_ARGS__);                                               \
            printf("\n");                                                      \
        }                                                                      \
    } while (0)

#define EXPECT(want, call)                                                     \
    do {                                                                       \
        nvmlReturn_t r_ = (call);                                              \
        CHECK(r_ == (want), "%s gave %d (%s), wanted %d", #call, (int)r_,      \
              nvmlErrorString(r_), (int)(want));                               \
    } while (0)

#define CU(call)                                                               \
    do {                                                                       \
        CUresult c_ = (call);                                                  \
        CHECK(c_ == CUDA_SUCCESS, "%s gave %d", #call, (int)c_);               \
    } while (0)

/* NVML index i: its handle knows its index and minor number. */
static void check_index(unsigned int i)
{
    unsigned int idx = 99, minor = 99;
    nvmlDevice_t d;

    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(i, &d));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetIndex(d, &idx));
    CHECK(idx == i, "index %u of handle %u", idx, i);
    EXPECT(NVML_SUCCESS, nvmlDeviceGetMinorNumber(d, &minor));
    CHECK(minor == i, "minor %u", minor);
}

/*
 * NVML's index of CUDA's ordinal c, as PyTorch reads CUDA_VISIBLE_DEVICES
 * (NVML ignores it): the c-th number of the list, or c without one.
 * -1 for a list of UUIDs.
 */
static int nvml_index_of(int c)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    char *end;
    long idx = c;

    for (int k = 0; v != NULL && k <= c; k++) {
        idx = strtol(v, &end, 10);
        if (end == v)
            return -1;
        v = *end == ',' ? end + 1 : end;
    }
    return (int)idx;
}

/* CUDA's ordinal c: what NVML says of the same GPU, found by its UUID. */
static void check_device(int c)
{
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE], cuname[256];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], cuuuid[64], busid[32], small[4];
    nvmlDevice_t d, d2;
    nvmlPciInfo_t pci;
    CUuuid u;
    CUdevice cd;
    unsigned int idx = 99, mig = 9, pend = 9, multi = 9;
    int maj = 0, min = 0, cumaj = -1, cumin = -1, sms = 0;
    unsigned int cores = 0;
    nvmlComputeMode_t cm;
    nvmlDeviceArchitecture_t arch;

    CU(cuDeviceGet(&cd, c));
    CU(cuDeviceGetUuid_v2(&u, cd));
    snprintf(cuuuid, sizeof(cuuuid),
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             (unsigned char)u.bytes[0], (unsigned char)u.bytes[1], (unsigned char)u.bytes[2],
             (unsigned char)u.bytes[3], (unsigned char)u.bytes[4], (unsigned char)u.bytes[5],
             (unsigned char)u.bytes[6], (unsigned char)u.bytes[7], (unsigned char)u.bytes[8],
             (unsigned char)u.bytes[9], (unsigned char)u.bytes[10], (unsigned char)u.bytes[11],
             (unsigned char)u.bytes[12], (unsigned char)u.bytes[13], (unsigned char)u.bytes[14],
             (unsigned char)u.bytes[15]);
    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByUUID(cuuuid, &d));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetIndex(d, &idx));
    CHECK(nvml_index_of(c) < 0 || idx == (unsigned int)nvml_index_of(c),
          "CUDA ordinal %d is NVML index %u, wanted %d", c, idx, nvml_index_of(c));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetUUID(d, uuid, sizeof(uuid)));
    CHECK(strcmp(uuid, cuuuid) == 0, "NVML UUID %s, libcuda %s", uuid, cuuuid);
    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(idx, &d2));
    CHECK(d2 == d, "handle by index and by UUID");

    CU(cuDeviceGetName(cuname, sizeof(cuname), cd));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetName(d, name, sizeof(name)));
    CHECK(strcmp(name, cuname) == 0, "NVML name '%s', libcuda '%s'", name, cuname);
    EXPECT(NVML_ERROR_INSUFFICIENT_SIZE, nvmlDeviceGetName(d, small, sizeof(small)));

    CU(cuDeviceGetPCIBusId(busid, sizeof(busid), cd));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetPciInfo_v3(d, &pci));
    CHECK(strcasecmp(pci.busIdLegacy, busid) == 0, "NVML legacy bus id %s, libcuda %s",
          pci.busIdLegacy, busid);
    CHECK(strcasecmp(pci.busId + 4, busid) == 0 && strncmp(pci.busId, "0000", 4) == 0,
          "NVML bus id %s, libcuda %s", pci.busId, busid);
    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByPciBusId_v2(busid, &d2));
    CHECK(d2 == d, "handle by libcuda's bus id");
    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &d2));
    CHECK(d2 == d, "handle by NVML's bus id");

    CU(cuDeviceGetAttribute(&cumaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cd));
    CU(cuDeviceGetAttribute(&cumin, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cd));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetCudaComputeCapability(d, &maj, &min));
    CHECK(maj == cumaj && min == cumin, "NVML cc %d.%d, libcuda %d.%d", maj, min, cumaj, cumin);
    EXPECT(NVML_SUCCESS, nvmlDeviceGetArchitecture(d, &arch));
    CHECK(cumaj != 9 || arch == NVML_DEVICE_ARCH_HOPPER, "architecture %u", arch);
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cd));
    if (cumaj == 9 && cumin == 0) {
        EXPECT(NVML_SUCCESS, nvmlDeviceGetNumGpuCores(d, &cores));
        CHECK(cores == 128u * (unsigned int)sms, "%u cores for %d SMs", cores, sms);
    }
    EXPECT(NVML_SUCCESS, nvmlDeviceGetMigMode(d, &mig, &pend));
    CHECK(mig == NVML_DEVICE_MIG_DISABLE && pend == NVML_DEVICE_MIG_DISABLE, "MIG %u %u", mig,
          pend);
    EXPECT(NVML_SUCCESS, nvmlDeviceGetComputeMode(d, &cm));
    CHECK(cm == NVML_COMPUTEMODE_DEFAULT, "compute mode %d", (int)cm);
    EXPECT(NVML_SUCCESS, nvmlDeviceGetMultiGpuBoard(d, &multi));
    CHECK(multi == 0, "multi-GPU board %u", multi);
}

/*
 * Over loopback every session shares the stand-in's one memory account,
 * so NVML's figures are cuMemGetInfo's exactly, and follow an allocation.
 * In a guest each session has its own host process (and the stand-in an
 * account per process; a GPU changes under other work): the totals agree
 * and the figures add up.
 */
static void check_memory(int loop)
{
    nvmlDevice_t d;
    nvmlMemory_t m, m2;
    nvmlMemory_v2_t v2;
    size_t fr = 0, tot = 0;
    CUdeviceptr p;
    CUcontext ctx;
    CUdevice cd;
    char busid[32];

    CU(cuDeviceGet(&cd, 0));
    CU(cuCtxCreate(&ctx, NULL, 0, cd));
    /* The same GPU as CUDA's device 0, whatever CUDA_VISIBLE_DEVICES says. */
    CU(cuDeviceGetPCIBusId(busid, sizeof(busid), cd));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByPciBusId_v2(busid, &d));
    CU(cuMemGetInfo(&fr, &tot));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetMemoryInfo(d, &m));
    CHECK(m.total == tot && m.used + m.free == m.total,
          "NVML total %llu free %llu used %llu, cuMemGetInfo total %zu", m.total, m.free, m.used,
          tot);
    if (loop)
        CHECK(m.free == fr && m.used == tot - fr, "NVML free %llu, cuMemGetInfo free %zu",
              m.free, fr);

    CU(cuMemAlloc(&p, 64 << 20));
    CU(cuMemGetInfo(&fr, &tot));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetMemoryInfo(d, &m2));
    if (loop)
        CHECK(m2.free == fr && m2.used == m.used + (64 << 20),
              "after 64 MiB: NVML free %llu used %llu, cuMemGetInfo free %zu", m2.free, m2.used,
              fr);

    memset(&v2, 0, sizeof(v2));
    EXPECT(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, nvmlDeviceGetMemoryInfo_v2(d, &v2));
    v2.version = nvmlMemory_v2;
    EXPECT(NVML_SUCCESS, nvmlDeviceGetMemoryInfo_v2(d, &v2));
    CHECK(v2.total == tot && v2.reserved == 0 && v2.used + v2.free == v2.total,
          "v2 total %llu free %llu used %llu reserved %llu", v2.total, v2.free, v2.used,
          v2.reserved);
    if (loop)
        CHECK(v2.free == fr, "v2 free %llu, cuMemGetInfo free %zu", v2.free, fr);
    CU(cuMemFree(p));
    CU(cuCtxDestroy(ctx));
}

static void check_processes(int loop)
{
    nvmlProcessInfo_t p3[8];
    nvmlProcessInfo_v1_t p1[8];
    nvmlDevice_t d;
    unsigned int n;

    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &d));
    n = 8;
    EXPECT(NVML_SUCCESS, nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p3));
    if (loop) {
        /* No guest driver, so no sessions file: no process known. */
        CHECK(n == 0, "%u processes", n);
    } else {
        /* In a guest: this process, for libcuda's session (NVML's own
         * is never listed), once. */
        CHECK(n == 1 && p3[0].pid == (unsigned int)getpid(), "%u processes, first pid %u", n,
              n > 0 ? p3[0].pid : 0);
        CHECK(n == 0 || p3[0].gpuInstanceId == 0xFFFFFFFFu, "MIG ids");
        n = 0;
        EXPECT(NVML_ERROR_INSUFFICIENT_SIZE,
               nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL));
        CHECK(n == 1, "needed %u", n);
    }
    n = 0;
    EXPECT(loop ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE,
           nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL));
    n = 8;
    EXPECT(NVML_SUCCESS, nvmlDeviceGetComputeRunningProcesses_v2(d, &n, p3));
    n = 8;
    EXPECT(NVML_SUCCESS, nvmlDeviceGetComputeRunningProcesses(d, &n, p1));
    n = 8;
    EXPECT(NVML_SUCCESS, nvmlDeviceGetGraphicsRunningProcesses_v3(d, &n, p3));
    CHECK(n == 0, "%u graphics processes", n);
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetComputeRunningProcesses_v3(d, NULL, p3));
    n = 4;
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL));
}

/*
 * Peer-to-peer status of every pair of the VM's GPUs (NCCL asks them all
 * at its start and stops at an error): a GPU with itself OK; two GPUs as
 * cuDeviceGetP2PAttribute says (read, write, PCI: access supported;
 * atomics: native atomics); NVLink unknown where the host cannot tell
 * (check_nvlink checks it where it can); an index NVML does not
 * define refused.  NVML indices are CUDA ordinals where
 * CUDA_VISIBLE_DEVICES is not set.
 */
static void check_p2p(unsigned int n)
{
    static const nvmlGpuP2PCapsIndex_t idx[] = { NVML_P2P_CAPS_INDEX_READ,
                                                 NVML_P2P_CAPS_INDEX_WRITE,
                                                 NVML_P2P_CAPS_INDEX_ATOMICS,
                                                 NVML_P2P_CAPS_INDEX_PCI };
    nvmlDevice_t a, b;
    nvmlGpuP2PStatus_t st;

    for (unsigned int i = 0; i < n; i++) {
        EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(i, &a));
        for (unsigned int j = 0; j < n; j++) {
            EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(j, &b));
            for (size_t k = 0; k < sizeof(idx) / sizeof(idx[0]); k++) {
                CUdevice_P2PAttribute at = idx[k] == NVML_P2P_CAPS_INDEX_ATOMICS
                                               ? CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED
                                               : CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED;
                int v = -1;

                st = (nvmlGpuP2PStatus_t)-1;
                EXPECT(NVML_SUCCESS, nvmlDeviceGetP2PStatus(a, b, idx[k], &st));
                if (i == j) {
                    CHECK(st == NVML_P2P_STATUS_OK, "GPU %u with itself: status %d", i, (int)st);
                } else if (getenv("CUDA_VISIBLE_DEVICES") == NULL) {
                    CU(cuDeviceGetP2PAttribute(&v, at, (CUdevice)i, (CUdevice)j));
                    CHECK(st == (v ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED),
                          "GPUs %u, %u, index %d: status %d, CUDA says %d", i, j, (int)idx[k],
                          (int)st, v);
                }
            }
            EXPECT(NVML_SUCCESS, nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &st));
            if (i == j)
                CHECK(st == NVML_P2P_STATUS_OK, "NVLink status %d", (int)st);
        }
    }
    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &a));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT,
           nvmlDeviceGetP2PStatus(a, a, NVML_P2P_CAPS_INDEX_UNKNOWN, &st));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetP2PStatus(a, a, NVML_P2P_CAPS_INDEX_READ, NULL));
}

/*
 * NVLink as the VM may see it.  Always: a link is absent
 * (NVML_ERROR_NOT_SUPPORTED) or leads to one of the VM's GPUs (with that
 * GPU's PCI information as this library gives it) or to an NVSwitch (at
 * domain 0xffffffff, no address of the host's); link 18 is refused;
 * field values agree with the calls.  VCU_TEST_NVLINK=unknown (a host
 * without NVML): no link, and peer status over NVLink unknown.  With
 * VCU_TEST_NVLINK=fake:H0[,H1]
 * (the host backend on tests/nvml/fakenvml.so, the VM's GPU i being the
 * stand-in's GPU Hi): exactly fakenvml.c's links, less every link that
 * leaves the VM (to GPU 2, which the stand-in lacks, to a GPU the VM was
 * not given, to a CPU), and peer status over NVLink follows.
 */
struct nvl_want {
    int type;                       /* -1 absent, else NVML_NVLINK_DEVICE_TYPE_* */
    int up;
    int peer;                       /* host ordinal of the GPU at the far end */
};

static int fake_host[8], nfake = -1;

static struct nvl_want nvl_fake(int host, unsigned int l)
{
    struct nvl_want w = { -1, 0, -1 };
    const int G = NVML_NVLINK_DEVICE_TYPE_GPU, S = NVML_NVLINK_DEVICE_TYPE_SWITCH;

    if (host == 0 && l == 0) w = (struct nvl_want){ G, 1, 1 };
    if ((host == 0 || host == 1) && l == 1) w = (struct nvl_want){ S, 1, -1 };
    if (host == 0 && l == 3) w = (struct nvl_want){ S, 0, -1 };
    if (host == 1 && l == 0) w = (struct nvl_want){ G, 1, 0 };
    if (w.type == G) {
        int v = -1;

        for (int k = 0; k < nfake; k++)
            if (fake_host[k] == w.peer)
                v = k;
        if (v < 0)
            w.type = -1;            /* leaves the VM */
        w.peer = v;
    }
    return w;
}

static void check_nvlink(unsigned int n)
{
    const char *t = getenv("VCU_TEST_NVLINK");
    int any_up[8] = { 0 }, unknown = t != NULL && strcmp(t, "unknown") == 0;

    if (t != NULL && strncmp(t, "fake:", 5) == 0)
        for (nfake = 0; nfake < 8 && strlen(t + 5) > 2 * (size_t)nfake &&
                        sscanf(t + 5 + 2 * nfake, "%d", &fake_host[nfake]) == 1;
             nfake++)
            ;
    for (unsigned int i = 0; i < n && i < 8; i++) {
        nvmlDevice_t d;
        unsigned int count = 0, cap;
        nvmlEnableState_t st;
        nvmlFieldValue_t fv[3];

        EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(i, &d));
        EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetNvLinkState(d, NVML_NVLINK_MAX_LINKS, &st));
        for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
            nvmlIntNvLinkDeviceType_t type;
            nvmlPciInfo_t pci, own;
            nvmlReturn_t r = nvmlDeviceGetNvLinkState(d, l, &st);

            CHECK(r == NVML_SUCCESS || r == NVML_ERROR_NOT_SUPPORTED, "GPU %u link %u: %d", i, l,
                  (int)r);
            if (unknown)
                CHECK(r == NVML_ERROR_NOT_SUPPORTED, "GPU %u link %u: %d", i, l, (int)r);
            if (nfake >= 0) {
                struct nvl_want w = nvl_fake(fake_host[i], l);

                CHECK((r == NVML_SUCCESS) == (w.type >= 0), "GPU %u (host %d) link %u: %d", i,
                      fake_host[i], l, (int)r);
                if (r == NVML_SUCCESS && w.type >= 0)
                    CHECK((st == NVML_FEATURE_ENABLED) == w.up, "GPU %u link %u state %d", i, l,
                          (int)st);
            }
            if (r != NVML_SUCCESS) {
                EXPECT(r, nvmlDeviceGetNvLinkRemoteDeviceType(d, l, &type));
                EXPECT(r, nvmlDeviceGetNvLinkRemotePciInfo_v2(d, l, &pci));
                continue;
            }
            count++;
            any_up[i] |= st == NVML_FEATURE_ENABLED;
            EXPECT(NVML_SUCCESS, nvmlDeviceGetNvLinkRemoteDeviceType(d, l, &type));
            EXPECT(NVML_SUCCESS, nvmlDeviceGetNvLinkRemotePciInfo_v2(d, l, &pci));
            CHECK(type == NVML_NVLINK_DEVICE_TYPE_GPU || type == NVML_NVLINK_DEVICE_TYPE_SWITCH,
                  "GPU %u link %u leads to type %d", i, l, (int)type);
            if (type == NVML_NVLINK_DEVICE_TYPE_GPU) {
                nvmlDevice_t p;

                EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &p));
                EXPECT(NVML_SUCCESS, nvmlDeviceGetPciInfo_v3(p, &own));
                CHECK(strcmp(own.busId, pci.busId) == 0 && p != d, "GPU %u link %u to %s", i, l,
                      pci.busId);
                if (nfake >= 0) {
                    unsigned int pi = 99;

                    EXPECT(NVML_SUCCESS, nvmlDeviceGetIndex(p, &pi));
                    CHECK((int)pi == nvl_fake(fake_host[i], l).peer, "GPU %u link %u to GPU %u",
                          i, l, pi);
                }
            } else {
                CHECK(pci.domain == 0xffffffffu && strncmp(pci.busId, "FFFFFFFF:", 9) == 0,
                      "GPU %u link %u: a switch at %s", i, l, pci.busId);
            }
            if (nfake >= 0)
                CHECK((int)type == nvl_fake(fake_host[i], l).type, "GPU %u link %u type %d", i, l,
                      (int)type);
            EXPECT(NVML_SUCCESS,
                   nvmlDeviceGetNvLinkCapability(d, l, NVML_NVLINK_CAP_P2P_SUPPORTED, &cap));
            if (nfake >= 0) {
                CHECK(cap == 1, "P2P capability %u", cap);
                EXPECT(NVML_SUCCESS,
                       nvmlDeviceGetNvLinkCapability(d, l, NVML_NVLINK_CAP_SYSMEM_ACCESS, &cap));
                CHECK(cap == 0, "sysmem capability %u", cap);
            }
            EXPECT(NVML_ERROR_INVALID_ARGUMENT,
                   nvmlDeviceGetNvLinkCapability(d, l, NVML_NVLINK_CAP_COUNT, &cap));
            memset(fv, 0, sizeof(fv));
            fv[0].fieldId = NVML_FI_DEV_NVLINK_GET_STATE;
            fv[0].scopeId = l;
            fv[1].fieldId = NVML_FI_DEV_ECC_CURRENT;
            EXPECT(NVML_SUCCESS, nvmlDeviceGetFieldValues(d, 2, fv));
            CHECK(fv[0].nvmlReturn == NVML_SUCCESS && fv[0].value.uiVal == (unsigned int)st,
                  "field NVLINK_GET_STATE: %d, %u", (int)fv[0].nvmlReturn, fv[0].value.uiVal);
            CHECK(fv[1].nvmlReturn == NVML_ERROR_NOT_SUPPORTED, "field ECC_CURRENT: %d",
                  (int)fv[1].nvmlReturn);
        }
        memset(fv, 0, sizeof(fv));
        fv[0].fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT;
        EXPECT(NVML_SUCCESS, nvmlDeviceGetFieldValues(d, 1, fv));
        CHECK(count == 0 || (fv[0].nvmlReturn == NVML_SUCCESS && fv[0].value.uiVal == count),
              "field NVLINK_LINK_COUNT: %d, %u, %u links", (int)fv[0].nvmlReturn,
              fv[0].value.uiVal, count);
        if (nfake >= 0 && fake_host[i] <= 1)
            CHECK(count == (fake_host[i] == 0 ? 2u + (nfake == 2) : 1u + (nfake == 2)),
                  "GPU %u (host %d): %u links", i, fake_host[i], count);
    }
    /* Peer status over NVLink: the VM's two GPUs are linked in the fake
     * (and share a switch); a GPU without a link the VM may use is not
     * reached over NVLink. */
    for (unsigned int i = 0; i < n && i < 8; i++)
        for (unsigned int j = 0; j < n && j < 8; j++) {
            nvmlDevice_t a, b;
            nvmlGpuP2PStatus_t ps = (nvmlGpuP2PStatus_t)-1;

            if (i == j)
                continue;
            EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(i, &a));
            EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(j, &b));
            EXPECT(NVML_SUCCESS, nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &ps));
            if (nfake >= 0)
                CHECK(ps == NVML_P2P_STATUS_OK, "GPUs %u, %u over NVLink: %d", i, j, (int)ps);
            else if (unknown)
                CHECK(ps == NVML_P2P_STATUS_UNKNOWN, "GPUs %u, %u over NVLink: %d", i, j, (int)ps);
            else if (!any_up[i] || !any_up[j])
                CHECK(ps == NVML_P2P_STATUS_NOT_SUPPORTED, "GPUs %u, %u over NVLink: %d", i, j,
                      (int)ps);
            else
                CHECK(ps == NVML_P2P_STATUS_OK || ps == NVML_P2P_STATUS_NOT_SUPPORTED,
                      "GPUs %u, %u over NVLink: %d", i, j, (int)ps);
        }
}

int main(void)
{
    char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    nvmlDevice_t d, bad = (nvmlDevice_t)(void *)buf;
    nvmlMemory_t m;
    nvmlUtilization_t u;
    unsigned int n = 0, v;
    int cu_count = 0, cuver = 0, nvver = 0;
    nvmlEnableState_t en;
    nvmlReturn_t ret;
    const char *t = getenv("VCU_TRANSPORT");
    int loop = t != NULL && strcmp(t, "loopback") == 0;

    /* Before nvmlInit. */
    EXPECT(NVML_ERROR_UNINITIALIZED, nvmlDeviceGetCount_v2(&n));
    EXPECT(NVML_ERROR_UNINITIALIZED, nvmlShutdown());
    EXPECT(NVML_ERROR_UNINITIALIZED, nvmlDeviceGetPowerUsage(bad, &v));
    EXPECT(NVML_ERROR_UNINITIALIZED, nvmlDeviceSetPersistenceMode(bad, NVML_FEATURE_ENABLED));

    /* NVML first: its own session opens before libcuda's. */
    EXPECT(NVML_SUCCESS, nvmlInit_v2());
    EXPECT(NVML_SUCCESS, nvmlInitWithFlags(0));          /* counted */
    CU(cuInit(0));
    CU(cuDeviceGetCount(&cu_count));
    CU(cuDriverGetVersion(&cuver));

    EXPECT(NVML_SUCCESS, nvmlDeviceGetCount_v2(&n));
    /* NVML counts the VM's GPUs; CUDA those CUDA_VISIBLE_DEVICES leaves. */
    CHECK(n > 0 && (getenv("CUDA_VISIBLE_DEVICES") != NULL ? (int)n >= cu_count
                                                           : (int)n == cu_count),
          "NVML count %u, libcuda %d", n, cu_count);
    EXPECT(NVML_SUCCESS, nvmlSystemGetCudaDriverVersion_v2(&nvver));
    CHECK(nvver == cuver, "NVML CUDA version %d, libcuda %d", nvver, cuver);
    EXPECT(NVML_SUCCESS, nvmlSystemGetCudaDriverVersion(&nvver));
    EXPECT(NVML_SUCCESS, nvmlSystemGetDriverVersion(buf, sizeof(buf)));
    CHECK(buf[0] != '\0', "empty driver version");
    /* The host's NVIDIA driver, where the test set one (the backend reads
     * $VCU_NVIDIA_VERSION_FILE in place of the module's sysfs file). */
    if (getenv("VCU_TEST_DRIVER_VERSION") != NULL)
        CHECK(strcmp(buf, getenv("VCU_TEST_DRIVER_VERSION")) == 0, "driver version %s, want %s",
              buf, getenv("VCU_TEST_DRIVER_VERSION"));
    EXPECT(NVML_SUCCESS, nvmlSystemGetNVMLVersion(buf, sizeof(buf)));
    CHECK(strncmp(buf, NVML_API_VERSION_STR ".", 3) == 0, "NVML version %s", buf);
    EXPECT(NVML_ERROR_INSUFFICIENT_SIZE, nvmlSystemGetDriverVersion(buf, 1));

    for (unsigned int i = 0; i < n; i++)
        check_index(i);
    for (int c = 0; c < cu_count; c++)
        check_device(c);
    check_memory(loop);
    check_processes(loop);
    check_p2p(n);
    check_nvlink(n);

    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &d));
    /* Utilization: the VM's, from the host driver's per-process samples
     * (NVML on the host); a host without NVML (the stand-in) cannot
     * tell.  What the slice cannot tell at all: power, temperature, fans,
     * clocks. */
    u.gpu = u.memory = 0;
    ret = nvmlDeviceGetUtilizationRates(d, &u);
    CHECK(ret == NVML_ERROR_NOT_SUPPORTED || (ret == NVML_SUCCESS && u.gpu <= 100),
          "utilization: %d, %u%%", (int)ret, u.gpu);
    EXPECT(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetPowerUsage(d, &v));
    EXPECT(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v));
    EXPECT(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetFanSpeed(d, &v));
    EXPECT(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetClockInfo(d, NVML_CLOCK_SM, &v));
    EXPECT(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetSerial(d, buf, sizeof(buf)));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetPersistenceMode(d, &en));

    /* Setters: never the guest's to make. */
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceSetPersistenceMode(d, NVML_FEATURE_ENABLED));
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceSetComputeMode(d, NVML_COMPUTEMODE_PROHIBITED));
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceSetPowerManagementLimit(d, 100000));
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceSetApplicationsClocks(d, 1000, 1000));
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceResetApplicationsClocks(d));
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceSetMigMode(d, NVML_DEVICE_MIG_ENABLE, &ret));
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceClearEccErrorCounts(d, NVML_VOLATILE_ECC));
    EXPECT(NVML_ERROR_NO_PERMISSION, nvmlDeviceSetGpuLockedClocks(d, 1000, 1000));

    /* Bad arguments and handles. */
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetCount_v2(NULL));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByIndex_v2(n, &d));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByIndex_v2(0, NULL));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByUUID(NULL, &d));
    EXPECT(NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &d));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &d));
    EXPECT(NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByPciBusId_v2("0000:ff:1f.0", &d));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetName(bad, buf, sizeof(buf)));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetName(NULL, buf, sizeof(buf)));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetMemoryInfo(bad, &m));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetUUID(bad, buf, sizeof(buf)));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetIndex(bad, &v));
    EXPECT(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &d));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT,
           nvmlDeviceGetIndex((nvmlDevice_t)((char *)d + 1), &v));   /* inside a device */
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetName(d, NULL, 64));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetMemoryInfo(d, NULL));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetUtilizationRates(d, NULL));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetPciInfo_v3(d, NULL));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetCudaComputeCapability(d, NULL, NULL));
    EXPECT(NVML_ERROR_INVALID_ARGUMENT, nvmlSystemGetCudaDriverVersion_v2(NULL));
    CHECK(strcmp(nvmlErrorString(NVML_ERROR_NOT_SUPPORTED), "Not Supported") == 0, "string");
    CHECK(strcmp(nvmlErrorString((nvmlReturn_t)12345), "Unknown Error") == 0, "string");

    /* Two inits, two shutdowns; then nothing works. */
    EXPECT(NVML_SUCCESS, nvmlShutdown());
    EXPECT(NVML_SUCCESS, nvmlDeviceGetCount_v2(&n));
    EXPECT(NVML_SUCCESS, nvmlShutdown());
    EXPECT(NVML_ERROR_UNINITIALIZED, nvmlDeviceGetCount_v2(&n));
    EXPECT(NVML_ERROR_UNINITIALIZED, nvmlDeviceGetName(d, buf, sizeof(buf)));
    EXPECT(NVML_ERROR_UNINITIALIZED, nvmlShutdown());
    /* And again from the start. */
    EXPECT(NVML_SUCCESS, nvmlInit());
    EXPECT(NVML_SUCCESS, nvmlDeviceGetCount(&v));
    CHECK(v == n, "count after re-init %u", v);
    EXPECT(NVML_SUCCESS, nvmlShutdown());

    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
