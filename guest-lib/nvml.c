/*
 * libnvidia-ml.so.1 for the guest: NVIDIA's management API answered from
 * the VM's slice of the GPU, so nvidia-smi-like tools, pynvml and
 * PyTorch's NVML checks work in a VM with the virtio-cuda device.
 *
 * Where the answers come from (docs/nvml.md):
 *   - one session of its own on the device file (vcu_conn_open, as
 *     libcuda opens one): CU_DRIVER_INFO (CUDA driver version, device
 *     count) and CU_DEVICE_INFO (name, UUID, attributes) once, at
 *     nvmlInit; CU_SLICE_INFO (memory, utilization, sessions) and
 *     CU_MEM_GET_INFO at each query;
 *   - the device file's PCI function in sysfs: the virtual PCI addresses
 *     our libcuda reports (its slot + the virtual ordinal) and PCI ids;
 *   - /sys/class/vcuda/vcudaN/sessions (the guest driver): which guest
 *     process holds which session, joined with CU_SLICE_INFO's sessions.
 * NVML indices are the VM's virtual ordinals: like NVIDIA's, this library
 * ignores CUDA_VISIBLE_DEVICES.  Every other name of nvml.h is generated
 * (gen-nvml.py): NVML_ERROR_NOT_SUPPORTED, setters NVML_ERROR_NO_PERMISSION.
 */
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cuda.h>

#include "nvml_int.h"
#include "vcu_common.h"
#include "vcu_proto.h"
#include "vcu_calls.h"
#include "vcu_transport.h"

#ifndef VCU_VERSION
#define VCU_VERSION "0.0.0"
#endif

/* One virtual GPU; a handle is a pointer into vcu__nvml.dev. */
struct nvmlDevice_st {
    unsigned int index;             /* NVML index = the VM's virtual ordinal */
    struct vcu_cu_device_info_resp info;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned int domain, bus, device;
    unsigned int pci_id;            /* device << 16 | vendor, as the guest sees the function */
    unsigned int pci_subsys;        /* subsystem device << 16 | subsystem vendor */
    int links_asked;                /* links holds the host's answer (vcu__nvml_link_mu) */
    struct vcu_cu_nvlink_info_resp links;
};

/* A guest process's session, from the guest driver's sessions file. */
typedef struct vcu__nvml_sess_s {
    unsigned int pid;
    uint64_t session;
} vcu__nvml_sess_t;

#define VCU__NVML_MAX_SESS 256

/*
 * Library state.  mu serializes nvmlInit and nvmlShutdown (the reference
 * count and everything they set).  Queries read the rest without it:
 * it is written only while refs goes from 0 to 1 or from 1 to 0, and a
 * program that shuts NVML down while another thread still queries it
 * breaks NVML's own rules.
 */
static struct {
    pthread_mutex_t mu;
    int refs;                       /* nvmlInit calls not yet shut down */
    vcu_conn_t *conn;
    int cuda_version;               /* cuDriverGetVersion of the host, e.g. 13000 */
    char driver_version[16];        /* the host's NVIDIA driver; "" if unknown */
    unsigned int ndev;
    uint64_t own;                   /* this library's session, 0 if unknown */
    char sessions_path[PATH_MAX];   /* "" where there is none (loopback) */
    struct nvmlDevice_st dev[VCU_CU_MAX_DEVICES];
} vcu__nvml = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int vcu__nvml_inited(void)
{
    return __atomic_load_n(&vcu__nvml.refs, __ATOMIC_ACQUIRE) > 0;
}

nvmlReturn_t vcu__nvml_default(int kind, const char *name)
{
    if (getenv("VCU_NVML_TRACE") != NULL)
        fprintf(stderr, "libnvidia-ml (virtio-cuda): %s is not supported\n", name);
    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    return kind == VCU__NVML_SETTER ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_NOT_SUPPORTED;
}

/*
 * The one translation from the transport's VCU_E* codes (and the host
 * driver's CUresult inside a reply) to NVML's.
 */
static nvmlReturn_t vcu__nvml_from_vcu(int err, uint32_t cu)
{
    switch (err) {
    case VCU_OK:
        return cu == CUDA_SUCCESS ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
    case VCU_EVERSION:
        return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    case VCU_ENODEV:
        return NVML_ERROR_DRIVER_NOT_LOADED;
    case VCU_ENOMEM:
        return NVML_ERROR_MEMORY;
    case VCU_ENOTSUP:
        return NVML_ERROR_NOT_SUPPORTED;
    case VCU_ECANCELED:             /* device reset or removed under the session */
    case VCU_ENOSESSION:
        return NVML_ERROR_GPU_IS_LOST;
    default:
        return NVML_ERROR_UNKNOWN;
    }
}

/* One CU_* request of device dev: req (len bytes) starts with struct
 * vcu_cu_hdr, resp with struct vcu_cu_resp. */
static nvmlReturn_t vcu__nvml_req(uint32_t opcode, uint32_t dev, struct vcu_cu_hdr *req,
                                  uint32_t len, void *resp, uint32_t cap)
{
    struct vcu_cu_resp r;
    int err;

    req->device = dev;
    memset(resp, 0, cap);
    err = vcu_conn_call(vcu__nvml.conn, opcode, 0, req, len, NULL, 0, resp, cap, NULL);
    memcpy(&r, resp, sizeof(r));
    return vcu__nvml_from_vcu(err, r.result);
}

/* A CU_* query of device dev that carries nothing but the header. */
static nvmlReturn_t vcu__nvml_call(uint32_t opcode, uint32_t dev, void *resp, uint32_t cap)
{
    struct vcu_cu_hdr h;

    memset(&h, 0, sizeof(h));
    return vcu__nvml_req(opcode, dev, &h, sizeof(h), resp, cap);
}

/* A handle this library gave out, of a device that exists. */
static nvmlReturn_t vcu__nvml_check(nvmlDevice_t d)
{
    uintptr_t p = (uintptr_t)d, base = (uintptr_t)&vcu__nvml.dev[0];

    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    if (p < base || p >= (uintptr_t)&vcu__nvml.dev[vcu__nvml.ndev] ||
        (p - base) % sizeof(vcu__nvml.dev[0]) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

static unsigned int vcu__nvml_attr(nvmlDevice_t d, unsigned int a)
{
    if (a >= VCU_CU_NUM_DEV_ATTRS || a >= d->info.num_attrs)
        return 0;
    return d->info.attrs[a];
}

/* Copies s into buf of len bytes, or says it does not fit. */
static nvmlReturn_t vcu__nvml_str(char *buf, unsigned int len, const char *s)
{
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

/* A hex number from a sysfs file, or 0. */
static unsigned int vcu__nvml_sysfs_hex(const char *dir, const char *name)
{
    char path[PATH_MAX];
    unsigned int v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "re");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%x", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

/* The PCI ids of the device file's PCI function (the virtio device). */
static void vcu__nvml_pci_ids(const char *devpath, unsigned int *id, unsigned int *subsys)
{
    const char *base = strrchr(devpath, '/');
    char sys[PATH_MAX], real[PATH_MAX], *b;

    *id = *subsys = 0;
    base = base != NULL ? base + 1 : devpath;
    snprintf(sys, sizeof(sys), "/sys/class/vcuda/%s/device", base);
    if (realpath(sys, real) == NULL)
        return;
    /* .../0000:00:03.0/virtio0: the function is the parent. */
    b = strrchr(real, '/');
    if (b == NULL)
        return;
    *b = '\0';
    *id = vcu__nvml_sysfs_hex(real, "device") << 16 | vcu__nvml_sysfs_hex(real, "vendor");
    *subsys = vcu__nvml_sysfs_hex(real, "subsystem_device") << 16 |
              vcu__nvml_sysfs_hex(real, "subsystem_vendor");
}

/*
 * Reads the sessions file into s[] (at most max), returns how many, or -1
 * when there is no file.  Lines are "<pid> <session> <comm>"; sessions
 * not yet opened (0) are left out.
 */
static int vcu__nvml_read_sessions(vcu__nvml_sess_t *s, int max)
{
    char line[256];
    FILE *f;
    int n = 0;

    if (vcu__nvml.sessions_path[0] == '\0')
        return -1;
    f = fopen(vcu__nvml.sessions_path, "re");
    if (f == NULL)
        return -1;
    while (n < max && fgets(line, sizeof(line), f) != NULL) {
        unsigned long long sess;
        unsigned int pid;

        if (sscanf(line, "%u %llu", &pid, &sess) != 2 || sess == 0)
            continue;
        s[n].pid = pid;
        s[n].session = sess;
        n++;
    }
    fclose(f);
    return n;
}

/*
 * This library's own session: the one of this process that appeared in
 * the sessions file while it opened it (another thread of the process
 * opening one at the same moment makes it unknown, 0).
 */
static uint64_t vcu__nvml_own_session(const vcu__nvml_sess_t *before, int nbefore)
{
    vcu__nvml_sess_t after[VCU__NVML_MAX_SESS];
    unsigned int me = (unsigned int)getpid();
    uint64_t own = 0;
    int n = vcu__nvml_read_sessions(after, VCU__NVML_MAX_SESS), found = 0;

    for (int i = 0; i < n; i++) {
        int old = 0;

        if (after[i].pid != me)
            continue;
        for (int j = 0; j < nbefore && !old; j++)
            old = before[j].session == after[i].session;
        if (!old) {
            own = after[i].session;
            found++;
        }
    }
    return found == 1 ? own : 0;
}

static void vcu__nvml_close(void)
{
    if (vcu__nvml.conn != NULL)
        vcu_conn_close(vcu__nvml.conn);
    vcu__nvml.conn = NULL;
    vcu__nvml.ndev = 0;
    vcu__nvml.own = 0;
}

/* Opens the session and reads what does not change; under mu. */
static nvmlReturn_t vcu__nvml_open(unsigned int flags)
{
    struct vcu_cu_driver_info_resp di;
    vcu__nvml_sess_t before[VCU__NVML_MAX_SESS];
    const char *path = vcu__dev_path(), *t = getenv("VCU_TRANSPORT");
    unsigned int dom = 0, bus = 0, slot = 0, pci_id, subsys;
    int nbefore, have, err;
    nvmlReturn_t r;

    vcu__nvml.sessions_path[0] = '\0';
    if (t == NULL || strcmp(t, "loopback") != 0) {
        const char *base = strrchr(path, '/');

        snprintf(vcu__nvml.sessions_path, sizeof(vcu__nvml.sessions_path),
                 "/sys/class/vcuda/%s/sessions", base != NULL ? base + 1 : path);
    }
    nbefore = vcu__nvml_read_sessions(before, VCU__NVML_MAX_SESS);
    err = vcu_conn_open(NULL, VCU_FEAT_CUDA, &vcu__nvml.conn);
    if (err != 0) {
        vcu__nvml.conn = NULL;
        /* The device file is there but not ours to open (udev's 0600). */
        if (vcu__nvml.sessions_path[0] != '\0' && access(path, F_OK) == 0 &&
            access(path, R_OK | W_OK) != 0)
            return NVML_ERROR_NO_PERMISSION;
        /* No device file, or no session on it: no driver, as NVIDIA's says. */
        r = vcu__nvml_from_vcu(err, CUDA_SUCCESS);
        return r == NVML_ERROR_LIB_RM_VERSION_MISMATCH ? r : NVML_ERROR_DRIVER_NOT_LOADED;
    }
    vcu__nvml.own = nbefore >= 0 ? vcu__nvml_own_session(before, nbefore) : 0;
    if (!(vcu_conn_features(vcu__nvml.conn) & VCU_FEAT_CUDA)) {
        /* The device is there, the host's GPU driver is not. */
        vcu__nvml_close();
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (vcu__nvml_call(VCU_OP_CU_DRIVER_INFO, 0, &di, sizeof(di)) != NVML_SUCCESS) {
        /* The host's driver failed: as if none were loaded. */
        vcu__nvml_close();
        return NVML_ERROR_DRIVER_NOT_LOADED;
    }
    vcu__nvml.cuda_version = (int)di.driver_version;
    /* The host's NVIDIA driver version, as NVIDIA's NVML reports it. */
    vcu__nvml.driver_version[0] = '\0';
    if (di.device_count > 0) {
        struct vcu_cu_slice_info_resp *si = calloc(1, sizeof(*si));

        if (si != NULL &&
            vcu__nvml_call(VCU_OP_CU_SLICE_INFO, 0, si, sizeof(*si)) == NVML_SUCCESS) {
            memcpy(vcu__nvml.driver_version, si->driver_version,
                   sizeof(vcu__nvml.driver_version));
            vcu__nvml.driver_version[sizeof(vcu__nvml.driver_version) - 1] = '\0';
        }
        free(si);
    }
    have = vcu__pci_addr(path, &dom, &bus, &slot);
    vcu__nvml_pci_ids(path, &pci_id, &subsys);
    for (uint32_t i = 0; i < di.device_count && i < VCU_CU_MAX_DEVICES; i++) {
        struct nvmlDevice_st *d = &vcu__nvml.dev[vcu__nvml.ndev];

        memset(d, 0, sizeof(*d));
        if (vcu__device_info(vcu__nvml.conn, i, &d->info) != 0 ||
            d->info.r.result != CUDA_SUCCESS)
            break;
        d->index = i;
        vcu__uuid_str(d->info.uuid, d->uuid, sizeof(d->uuid));
        /* As cuda_drv.c numbers them: consecutive slots from the function's. */
        d->domain = have ? dom : 0;
        d->bus = have ? bus : 0;
        d->device = have ? slot + i : i;
        d->pci_id = pci_id;
        d->pci_subsys = subsys;
        vcu__nvml.ndev++;
    }
    if (vcu__nvml.ndev == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS)) {
        vcu__nvml_close();
        return NVML_ERROR_GPU_NOT_FOUND;
    }
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t r = NVML_SUCCESS;

    pthread_mutex_lock(&vcu__nvml.mu);
    if (vcu__nvml.refs == 0)
        r = vcu__nvml_open(flags);
    if (r == NVML_SUCCESS)
        __atomic_store_n(&vcu__nvml.refs, vcu__nvml.refs + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&vcu__nvml.mu);
    return r;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r = NVML_SUCCESS;

    pthread_mutex_lock(&vcu__nvml.mu);
    if (vcu__nvml.refs == 0) {
        r = NVML_ERROR_UNINITIALIZED;
    } else {
        __atomic_store_n(&vcu__nvml.refs, vcu__nvml.refs - 1, __ATOMIC_RELEASE);
        if (vcu__nvml.refs == 0)
            vcu__nvml_close();
    }
    pthread_mutex_unlock(&vcu__nvml.mu);
    return r;
}

VCU__NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "Not supported when ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    default: return "Unknown Error";
    }
}

/* ---- system ------------------------------------------------------------ */

/*
 * The driver version is this guest stack's (the host's NVIDIA driver
 * version does not travel on the wire); the NVML version is NVML's API
 * version and that.
 */
VCU__NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    /* The host's driver where it says, else this project's version. */
    return vcu__nvml_str(version, length,
                         vcu__nvml.driver_version[0] != '\0' ? vcu__nvml.driver_version
                                                             : VCU_VERSION);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return vcu__nvml_str(version, length, NVML_API_VERSION_STR "." VCU_VERSION);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    *cudaDriverVersion = vcu__nvml.cuda_version;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

/* The executable's path (nvidia-smi shows it), else the process's name. */
VCU__NVML_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name,
                                                       unsigned int length)
{
    char path[64], buf[PATH_MAX];
    ssize_t n;
    FILE *f;

    if (name == NULL || length == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    snprintf(path, sizeof(path), "/proc/%u/exe", pid);
    n = readlink(path, buf, sizeof(buf) - 1);
    if (n <= 0) {
        snprintf(path, sizeof(path), "/proc/%u/comm", pid);
        f = fopen(path, "re");
        if (f == NULL)
            return NVML_ERROR_NOT_FOUND;
        n = fgets(buf, sizeof(buf), f) != NULL ? (ssize_t)strcspn(buf, "\n") : 0;
        fclose(f);
        if (n == 0)
            return NVML_ERROR_NOT_FOUND;
    }
    buf[n] = '\0';
    snprintf(name, length, "%s", buf);   /* NVIDIA's truncates too */
    return NVML_SUCCESS;
}

/* ---- devices: enumeration ---------------------------------------------- */

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = vcu__nvml.ndev;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                            nvmlDevice_t *device)
{
    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= vcu__nvml.ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &vcu__nvml.dev[index];
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                         nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < vcu__nvml.ndev; i++) {
        if (strcasecmp(uuid, vcu__nvml.dev[i].uuid) == 0) {
            *device = &vcu__nvml.dev[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* "domain:bus:device.function" or "bus:device.function" (domain 0), hex. */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                               nvmlDevice_t *device)
{
    unsigned int dom = 0, bus, dev, fn;
    char tail;

    if (!vcu__nvml_inited())
        return NVML_ERROR_UNINITIALIZED;
    if (pciBusId == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &tail) != 4) {
        dom = 0;
        if (sscanf(pciBusId, "%x:%x.%x%c", &bus, &dev, &fn, &tail) != 3)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < vcu__nvml.ndev; i++) {
        const struct nvmlDevice_st *d = &vcu__nvml.dev[i];

        if (d->domain == dom && d->bus == bus && d->device == dev && fn == 0) {
            *device = &vcu__nvml.dev[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId,
                                                            nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ---- devices: identity --------------------------------------------------- */

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name,
                                                unsigned int length)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    return r != NVML_SUCCESS ? r : vcu__nvml_str(name, length, device->info.name);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid,
                                                unsigned int length)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    return r != NVML_SUCCESS ? r : vcu__nvml_str(uuid, length, device->uuid);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

/* /dev/nvidiaN's N on NVIDIA's; here the index. */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device,
                                                       unsigned int *minorNumber)
{
    return nvmlDeviceGetIndex(device, minorNumber);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof(*pci));
    pci->domain = device->domain;
    pci->bus = device->bus;
    pci->device = device->device;
    pci->pciDeviceId = device->pci_id;
    pci->pciSubSystemId = device->pci_subsys;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             NVML_DEVICE_PCI_BUS_ID_FMT_ARGS(pci));
    snprintf(pci->busId, sizeof(pci->busId), NVML_DEVICE_PCI_BUS_ID_FMT,
             NVML_DEVICE_PCI_BUS_ID_FMT_ARGS(pci));
    return NVML_SUCCESS;
}

/* Same layout as _v3 (the first nvmlPciInfo_t, v1, was smaller: not offered). */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device,
                                                                 int *major, int *minor)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (major == NULL || minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)vcu__nvml_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    *minor = (int)vcu__nvml_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device,
                                                        nvmlDeviceArchitecture_t *arch)
{
    nvmlReturn_t r = vcu__nvml_check(device);
    unsigned int cc;

    if (r != NVML_SUCCESS)
        return r;
    if (arch == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    cc = vcu__nvml_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
         vcu__nvml_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    if (cc >= 90 && cc < 100)
        *arch = NVML_DEVICE_ARCH_HOPPER;
    else if (cc == 89)
        *arch = NVML_DEVICE_ARCH_ADA;
    else if (cc >= 80)
        *arch = cc < 90 ? NVML_DEVICE_ARCH_AMPERE : NVML_DEVICE_ARCH_UNKNOWN;
    else if (cc == 75)
        *arch = NVML_DEVICE_ARCH_TURING;
    else if (cc >= 70)
        *arch = NVML_DEVICE_ARCH_VOLTA;
    else if (cc >= 60)
        *arch = NVML_DEVICE_ARCH_PASCAL;
    else
        *arch = NVML_DEVICE_ARCH_UNKNOWN;
    return NVML_SUCCESS;
}

static nvmlReturn_t vcu__nvml_slice(nvmlDevice_t d, struct vcu_cu_slice_info_resp *s);

/*
 * The SMs the slice may use (CU_SLICE_INFO; the device's count where the
 * host does not say) times the CUDA cores of one SM of the architecture.
 */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device,
                                                       unsigned int *numCores)
{
    nvmlReturn_t r = vcu__nvml_check(device);
    struct vcu_cu_slice_info_resp *s;
    unsigned int cc, per_sm, sms;

    if (r != NVML_SUCCESS)
        return r;
    if (numCores == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    cc = vcu__nvml_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
         vcu__nvml_attr(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    switch (cc) {
    case 60: case 70: case 72: case 75: case 80: per_sm = 64; break;
    case 61: case 62: case 86: case 87: case 89: case 90: case 100: case 103: case 120:
        per_sm = 128; break;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
    sms = vcu__nvml_attr(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    s = malloc(sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    if (vcu__nvml_slice(device, s) == NVML_SUCCESS && s->sm_count != VCU_SLICE_UNKNOWN32 &&
        s->sm_count != 0 && s->sm_count < sms)
        sms = s->sm_count;
    free(s);
    *numCores = per_sm * sms;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device,
                                                         unsigned int *multiGpuBool)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (multiGpuBool == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *multiGpuBool = 0;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (type == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *type = NVML_BRAND_NVIDIA;
    return NVML_SUCCESS;
}

/* Several processes may use the device at once: the default mode. */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device,
                                                       nvmlComputeMode_t *mode)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (mode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
}

static nvmlReturn_t vcu__nvml_disabled(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (mode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device,
                                                           nvmlEnableState_t *mode)
{
    return vcu__nvml_disabled(device, mode);
}

/* No display on a compute slice. */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device,
                                                       nvmlEnableState_t *display)
{
    return vcu__nvml_disabled(device, display);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device,
                                                         nvmlEnableState_t *isActive)
{
    return vcu__nvml_disabled(device, isActive);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                                   unsigned int *pendingMode)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (currentMode == NULL || pendingMode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = NVML_DEVICE_MIG_DISABLE;
    *pendingMode = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device,
                                                          unsigned int *isMigDevice)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (isMigDevice == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

/* ---- devices: the slice's figures ---------------------------------------- */

static nvmlReturn_t vcu__nvml_slice(nvmlDevice_t d, struct vcu_cu_slice_info_resp *s)
{
    nvmlReturn_t r = vcu__nvml_call(VCU_OP_CU_SLICE_INFO, d->index, s, sizeof(*s));

    if (r != NVML_SUCCESS)
        return r;
    if (s->num_sessions > VCU_SLICE_MAX_SESSIONS)
        s->num_sessions = VCU_SLICE_MAX_SESSIONS;
    return NVML_SUCCESS;
}

/*
 * total: the slice's (the VM's quota, else the GPU's); used: what the
 * host charges the VM, its workers' contexts included (as NVIDIA counts
 * contexts in used); free: the rest.  A host that cannot tell the VM's use
 * gives cuMemGetInfo's figures for the device (the whole GPU's).
 */
static nvmlReturn_t vcu__nvml_mem(nvmlDevice_t device, unsigned long long *total,
                                  unsigned long long *used, unsigned long long *fr)
{
    struct vcu_cu_slice_info_resp *s;
    nvmlReturn_t r;

    s = malloc(sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    r = vcu__nvml_slice(device, s);
    if (r == NVML_SUCCESS && s->mem_used != VCU_SLICE_UNKNOWN64 &&
        s->mem_total != VCU_SLICE_UNKNOWN64) {
        *total = s->mem_total;
        *used = s->mem_used;
        if (*used > *total)
            *used = *total;
        *fr = *total - *used;
    } else {
        struct vcu_cu_mem_info_resp mi;

        r = vcu__nvml_call(VCU_OP_CU_MEM_GET_INFO, device->index, &mi, sizeof(mi));
        *total = mi.total;
        *fr = mi.free < mi.total ? mi.free : mi.total;
        *used = *total - *fr;
    }
    free(s);
    return r;
}

/* ---- NVLink ------------------------------------------------------------- */

/*
 * The device's NVLinks as the host reports them for this VM
 * (CU_NVLINK_INFO, vcu_proto.h): links to the VM's other GPUs and to
 * NVSwitches, nothing of what else the host's GPU is linked to.  Asked
 * once per device; links do not change while the VM runs.
 */
static pthread_mutex_t vcu__nvml_link_mu = PTHREAD_MUTEX_INITIALIZER;

static nvmlReturn_t vcu__nvml_links(nvmlDevice_t d, const struct vcu_cu_nvlink_info_resp **out)
{
    nvmlReturn_t r = NVML_SUCCESS;

    pthread_mutex_lock(&vcu__nvml_link_mu);
    if (!d->links_asked) {
        r = vcu__nvml_call(VCU_OP_CU_NVLINK_INFO, d->index, &d->links, sizeof(d->links));
        d->links_asked = r == NVML_SUCCESS;
    }
    pthread_mutex_unlock(&vcu__nvml_link_mu);
    *out = &d->links;
    return r;
}

/* Link `link` of d: NVML_ERROR_NOT_SUPPORTED where the VM has no such
 * link (as NVIDIA's NVML for a link a GPU does not have) or the host
 * cannot tell. */
static nvmlReturn_t vcu__nvml_link(nvmlDevice_t d, unsigned int link,
                                   const struct vcu_cu_nvlink **out)
{
    const struct vcu_cu_nvlink_info_resp *l;
    nvmlReturn_t r = vcu__nvml_check(d);

    if (r != NVML_SUCCESS)
        return r;
    if (link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = vcu__nvml_links(d, &l);
    if (r != NVML_SUCCESS)
        return r;
    if (!l->known || l->links[link].remote == VCU_NVLINK_NONE)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = &l->links[link];
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                                       nvmlEnableState_t *isActive)
{
    const struct vcu_cu_nvlink *k;
    nvmlReturn_t r = vcu__nvml_link(device, link, &k);

    if (r != NVML_SUCCESS)
        return r;
    if (isActive == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = k->active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device,
                                                            unsigned int link,
                                                            nvmlNvLinkCapability_t capability,
                                                            unsigned int *capResult)
{
    const struct vcu_cu_nvlink *k;
    nvmlReturn_t r = vcu__nvml_link(device, link, &k);

    if (r != NVML_SUCCESS)
        return r;
    if (capResult == NULL || (unsigned int)capability >= NVML_NVLINK_CAP_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *capResult = (k->caps >> (unsigned int)capability) & 1u;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(
    nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
    const struct vcu_cu_nvlink *k;
    nvmlReturn_t r = vcu__nvml_link(device, link, &k);

    if (r != NVML_SUCCESS)
        return r;
    if (pNvLinkDeviceType == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pNvLinkDeviceType = k->remote == VCU_NVLINK_GPU ? NVML_NVLINK_DEVICE_TYPE_GPU
                                                     : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    return NVML_SUCCESS;
}

/* A GPU of the VM at its end: that GPU's PCI information, as this
 * library gives it.  An NVSwitch: an address no function of the VM has
 * (domain 0xffffffff), not the host's: NCCL, finding no such device,
 * takes it for an NVSwitch outside the VM, which it is. */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device,
                                                                  unsigned int link,
                                                                  nvmlPciInfo_t *pci)
{
    const struct vcu_cu_nvlink *k;
    nvmlReturn_t r = vcu__nvml_link(device, link, &k);

    if (r != NVML_SUCCESS)
        return r;
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (k->remote == VCU_NVLINK_GPU && k->remote_dev < vcu__nvml.ndev)
        return nvmlDeviceGetPciInfo_v3(&vcu__nvml.dev[k->remote_dev], pci);
    memset(pci, 0, sizeof(*pci));
    pci->domain = 0xffffffffu;
    pci->bus = 0xff;
    pci->device = 0xff;
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus,
             pci->device);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", 0xffffu, pci->bus,
             pci->device);
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device,
                                                               unsigned int link,
                                                               nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

/* Whether d1 reaches d2 over NVLink: a link between them, or both on
 * NVSwitches (one fabric on one host). */
static nvmlReturn_t vcu__nvml_p2p_nvlink(nvmlDevice_t d1, nvmlDevice_t d2,
                                         nvmlGpuP2PStatus_t *st)
{
    const struct vcu_cu_nvlink_info_resp *l1, *l2;
    int sw1 = 0, sw2 = 0, direct = 0;
    nvmlReturn_t r = vcu__nvml_links(d1, &l1);

    if (r == NVML_SUCCESS)
        r = vcu__nvml_links(d2, &l2);
    if (r != NVML_SUCCESS)
        return r;
    if (!l1->known || !l2->known) {
        *st = NVML_P2P_STATUS_UNKNOWN;
        return NVML_SUCCESS;
    }
    for (unsigned int i = 0; i < VCU_NVLINK_MAX; i++) {
        const struct vcu_cu_nvlink *a = &l1->links[i], *b = &l2->links[i];
        const unsigned int p2p = 1u << NVML_NVLINK_CAP_P2P_SUPPORTED;

        direct |= a->remote == VCU_NVLINK_GPU && a->active && (a->caps & p2p) &&
                  a->remote_dev == d2->index;
        sw1 |= a->remote == VCU_NVLINK_SWITCH && a->active && (a->caps & p2p);
        sw2 |= b->remote == VCU_NVLINK_SWITCH && b->active && (b->caps & p2p);
    }
    *st = direct || (sw1 && sw2) ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/*
 * Field values: the NVLink state of a link (NVML_FI_DEV_NVLINK_GET_STATE,
 * scopeId the link: how NCCL asks on Hopper) and the number of the VM's
 * links (NVML_FI_DEV_NVLINK_LINK_COUNT); any other field is
 * NVML_ERROR_NOT_SUPPORTED in its own nvmlReturn, as NVIDIA's does for a
 * field a GPU lacks.
 */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                                       nvmlFieldValue_t *values)
{
    const struct vcu_cu_nvlink_info_resp *l;
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (valuesCount < 0 || (valuesCount > 0 && values == NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        nvmlEnableState_t on = NVML_FEATURE_DISABLED;
        unsigned int n = 0;

        v->timestamp = 0;
        v->latencyUsec = 0;
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        switch (v->fieldId) {
        case NVML_FI_DEV_NVLINK_GET_STATE:
            v->nvmlReturn = nvmlDeviceGetNvLinkState(device, v->scopeId, &on);
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = (unsigned int)on;
            break;
        case NVML_FI_DEV_NVLINK_LINK_COUNT:
            v->nvmlReturn = vcu__nvml_links(device, &l);
            if (v->nvmlReturn == NVML_SUCCESS && !l->known)
                v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            for (unsigned int k = 0; v->nvmlReturn == NVML_SUCCESS && k < VCU_NVLINK_MAX; k++)
                n += l->links[k].remote != VCU_NVLINK_NONE;
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = n;
            break;
        default:
            break;
        }
    }
    return NVML_SUCCESS;
}

/*
 * Peer-to-peer between two GPUs of the VM, as the host's driver says of
 * them (cuDeviceGetP2PAttribute): reads, writes and PCI as peer access
 * is supported, atomics as native atomics are; NVLink as the links the
 * host reports say (vcu__nvml_p2p_nvlink).  A GPU and itself
 * is OK, as NVIDIA's answers (NCCL asks every pair, a GPU with itself
 * too, and gives up on an error).
 */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                     nvmlGpuP2PCapsIndex_t p2pIndex,
                                                     nvmlGpuP2PStatus_t *p2pStatus)
{
    struct vcu_call_cuDeviceGetP2PAttribute_req r;
    struct vcu_call_cuDeviceGetP2PAttribute_resp o;
    nvmlReturn_t e = vcu__nvml_check(device1);
    CUdevice_P2PAttribute a;

    if (e == NVML_SUCCESS)
        e = vcu__nvml_check(device2);
    if (e != NVML_SUCCESS)
        return e;
    if (p2pStatus == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_READ:
    case NVML_P2P_CAPS_INDEX_WRITE:
    case NVML_P2P_CAPS_INDEX_PCI:
        a = CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        a = CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_NVLINK:
        if (device1 == device2) {
            *p2pStatus = NVML_P2P_STATUS_OK;
            return NVML_SUCCESS;
        }
        return vcu__nvml_p2p_nvlink(device1, device2, p2pStatus);
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device1 == device2) {
        *p2pStatus = NVML_P2P_STATUS_OK;
        return NVML_SUCCESS;
    }
    VCU_CALL_INIT(r, cuDeviceGetP2PAttribute);
    r.attrib = (uint64_t)a;
    r.srcDevice = device1->index;
    r.dstDevice = device2->index;
    e = vcu__nvml_req(VCU_OP_CU_CALL, device1->index, &r.c.hdr, sizeof(r), &o, sizeof(o));
    if (e != NVML_SUCCESS)
        return e;
    *p2pStatus = o.value != 0 ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t r = vcu__nvml_check(device);
    unsigned long long total, used, fr;

    if (r != NVML_SUCCESS)
        return r;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = vcu__nvml_mem(device, &total, &used, &fr);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->used = used;
    memory->free = fr;
    return NVML_SUCCESS;
}

/* Nothing is set aside for the system on a slice: reserved 0. */
VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                         nvmlMemory_v2_t *memory)
{
    nvmlReturn_t r = vcu__nvml_check(device);
    unsigned long long total, used, fr;

    if (r != NVML_SUCCESS)
        return r;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    r = vcu__nvml_mem(device, &total, &used, &fr);
    if (r != NVML_SUCCESS)
        return r;
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = fr;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                            nvmlUtilization_t *utilization)
{
    struct vcu_cu_slice_info_resp *s;
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (utilization == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    s = malloc(sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    r = vcu__nvml_slice(device, s);
    if (r == NVML_SUCCESS && s->util_percent == VCU_SLICE_UNKNOWN32)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        utilization->gpu = s->util_percent > 100 ? 100 : s->util_percent;
        utilization->memory = 0;    /* memory-controller time is not measured */
    }
    free(s);
    return r;
}

/* ---- devices: processes ------------------------------------------------- */

typedef struct vcu__nvml_proc_s {
    unsigned int pid;
    unsigned long long mem;         /* bytes, or NVML_VALUE_NOT_AVAILABLE */
} vcu__nvml_proc_t;

/*
 * Whether sessions[] is the VM's list, by the guest's session ids: it
 * has more than the asking session, and the asking one (this library's)
 * is among them; where this library's own is unknown, one of the guest's
 * is.  A host without a per-VM account lists only the asking session, or
 * an id of its own making (a worker process's): it cannot say which
 * process uses which GPU, or how much.
 */
static int vcu__nvml_lists_vm(const struct vcu_cu_slice_info_resp *s,
                              const vcu__nvml_sess_t *sess, int n)
{
    if (s->num_sessions < 2)
        return 0;
    for (uint32_t k = 0; k < s->num_sessions; k++) {
        if (vcu__nvml.own != 0 && s->sessions[k].session == vcu__nvml.own)
            return 1;
        for (int i = 0; i < n && vcu__nvml.own == 0; i++)
            if (sess[i].session == s->sessions[k].session)
                return 1;
    }
    return 0;
}

/*
 * The guest processes holding sessions (the sessions file), but this
 * library's own, one entry per process.  Where sessions[] is the VM's
 * list: those of its sessions, with the GPU memory the host charges them
 * (memory and context).  Otherwise every process holding the device,
 * memory NVML_VALUE_NOT_AVAILABLE.  Returns how many, at most max.
 */
static int vcu__nvml_procs(const struct vcu_cu_slice_info_resp *s, vcu__nvml_proc_t *out,
                           int max)
{
    vcu__nvml_sess_t sess[VCU__NVML_MAX_SESS];
    int n = vcu__nvml_read_sessions(sess, VCU__NVML_MAX_SESS), np = 0, lists_vm;

    lists_vm = vcu__nvml_lists_vm(s, sess, n);
    for (int i = 0; i < n; i++) {
        unsigned long long mem = (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
        int found = 0, j;

        if (sess[i].session == vcu__nvml.own || sess[i].pid == 0)
            continue;
        for (uint32_t k = 0; lists_vm && k < s->num_sessions && !found; k++) {
            const struct vcu_cu_slice_session *ss = &s->sessions[k];

            if (ss->session != sess[i].session)
                continue;
            found = 1;
            if (ss->mem_used != VCU_SLICE_UNKNOWN64)
                mem = ss->mem_used;         /* its context's included */
        }
        if (lists_vm && !found)
            continue;
        for (j = 0; j < np && out[j].pid != sess[i].pid; j++)
            ;
        if (j == np) {
            if (np == max)
                break;
            out[np].pid = sess[i].pid;
            out[np].mem = mem;
            np++;
        } else if (mem != (unsigned long long)NVML_VALUE_NOT_AVAILABLE) {
            out[j].mem = out[j].mem == (unsigned long long)NVML_VALUE_NOT_AVAILABLE
                             ? mem : out[j].mem + mem;
        }
    }
    return np;
}

/* ver: 1 (nvmlProcessInfo_v1_t) or 2 (nvmlProcessInfo_v2_t, also _v3's). */
static nvmlReturn_t vcu__nvml_running(nvmlDevice_t device, unsigned int *count, void *infos,
                                      int ver)
{
    struct vcu_cu_slice_info_resp *s;
    vcu__nvml_proc_t procs[VCU__NVML_MAX_SESS];
    nvmlReturn_t r = vcu__nvml_check(device);
    int np;

    if (r != NVML_SUCCESS)
        return r;
    if (count == NULL || (*count > 0 && infos == NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    s = malloc(sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    r = vcu__nvml_slice(device, s);
    np = r == NVML_SUCCESS ? vcu__nvml_procs(s, procs, VCU__NVML_MAX_SESS) : 0;
    free(s);
    if (r != NVML_SUCCESS)
        return r;
    if (*count < (unsigned int)np) {
        *count = (unsigned int)np;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < np; i++) {
        if (ver == 1) {
            nvmlProcessInfo_v1_t *p = &((nvmlProcessInfo_v1_t *)infos)[i];

            memset(p, 0, sizeof(*p));
            p->pid = procs[i].pid;
            p->usedGpuMemory = procs[i].mem;
        } else {
            nvmlProcessInfo_v2_t *p = &((nvmlProcessInfo_v2_t *)infos)[i];

            memset(p, 0, sizeof(*p));
            p->pid = procs[i].pid;
            p->usedGpuMemory = procs[i].mem;
            p->gpuInstanceId = 0xFFFFFFFFu;     /* MIG off */
            p->computeInstanceId = 0xFFFFFFFFu;
        }
    }
    *count = (unsigned int)np;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                      unsigned int *infoCount,
                                                                      nvmlProcessInfo_t *infos)
{
    return vcu__nvml_running(device, infoCount, infos, 2);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                      unsigned int *infoCount,
                                                                      nvmlProcessInfo_v2_t *infos)
{
    return vcu__nvml_running(device, infoCount, infos, 2);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                   unsigned int *infoCount,
                                                                   nvmlProcessInfo_v1_t *infos)
{
    return vcu__nvml_running(device, infoCount, infos, 1);
}

/* No graphics and no MPS server in the guest: empty lists. */
static nvmlReturn_t vcu__nvml_none(nvmlDevice_t device, unsigned int *count, const void *infos)
{
    nvmlReturn_t r = vcu__nvml_check(device);

    if (r != NVML_SUCCESS)
        return r;
    if (count == NULL || (*count > 0 && infos == NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    return NVML_SUCCESS;
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                                       unsigned int *infoCount,
                                                                       nvmlProcessInfo_t *infos)
{
    return vcu__nvml_none(device, infoCount, infos);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                                       unsigned int *infoCount,
                                                                       nvmlProcessInfo_v2_t *infos)
{
    return vcu__nvml_none(device, infoCount, infos);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device,
                                                                    unsigned int *infoCount,
                                                                    nvmlProcessInfo_v1_t *infos)
{
    return vcu__nvml_none(device, infoCount, infos);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                         unsigned int *infoCount,
                                                                         nvmlProcessInfo_t *infos)
{
    return vcu__nvml_none(device, infoCount, infos);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(
    nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos)
{
    return vcu__nvml_none(device, infoCount, infos);
}

VCU__NVML_EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device,
                                                                      unsigned int *infoCount,
                                                                      nvmlProcessInfo_v1_t *infos)
{
    return vcu__nvml_none(device, infoCount, infos);
}
