/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Devices and contexts: driver and device info, memory info, the VM's
 * slice, context synchronize, reset, flags and limits (charged).
 */
#include "cuda_int.h"

/* --- device and context --- */

uint32_t vcu__op_CU_DRIVER_INFO(vcu__op_t *o)
{
    o->rb.drv.driver_version = (uint32_t)o->cu->driver_version;
    o->rb.drv.device_count = o->cu->ndev;
    o->res = CUDA_SUCCESS;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_DEVICE_INFO(vcu__op_t *o)
{
    vcu__cuda_t *cu = o->cu;
    struct vcu_cu_device_info_resp *r = &o->rb.dev;
    uint32_t d = vcu__dev_of(o), n, i;
    CUdevice dev;
    CUuuid u;
    size_t total = 0;

    if (d >= cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return VCU_S_OK;
    }
    dev = cu->dev[d];
    o->res = VCU__CU(cu, cuDeviceGetName, r->name, (int)sizeof(r->name), dev);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    r->name[sizeof(r->name) - 1] = '\0';
    if (VCU__CU(cu, cuDeviceGetUuid, &u, dev) == CUDA_SUCCESS)
        memcpy(r->uuid, u.bytes, sizeof(r->uuid));
    if (VCU__CU(cu, cuDeviceTotalMem, &total, dev) == CUDA_SUCCESS)
        r->total_mem = total;
    /* The VM's slice: what cuDeviceTotalMem and totalGlobalMem say in
     * the guest (as CU_MEM_GET_INFO's total). */
    if (cu->acct != NULL && vcu__acct_quota(cu->acct) != 0 &&
        vcu__acct_quota(cu->acct) < (uint64_t)r->total_mem)
        r->total_mem = vcu__acct_quota(cu->acct);
    r->host_ordinal = (uint32_t)cu->host_ordinal[d];
    n = CU_DEVICE_ATTRIBUTE_MAX < VCU_CU_NUM_DEV_ATTRS ? (uint32_t)CU_DEVICE_ATTRIBUTE_MAX
                                                        : VCU_CU_NUM_DEV_ATTRS;
    r->num_attrs = n;
    for (i = 1; i < n; i++) {
        int v = 0;

        /* The guest library substitutes its own virtual PCI location. */
        if (i == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID || i == CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID ||
            i == CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)
            continue;
        if (VCU__CU(cu, cuDeviceGetAttribute, &v, (CUdevice_attribute)i, dev) == CUDA_SUCCESS)
            r->attrs[i] = (uint32_t)v;
    }
    /* Packed mode: the SMs the VM's contexts run on (the driver keeps
     * answering the whole GPU's count under an execution affinity). */
    if (cu->sms != 0 && CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT < n)
        r->attrs[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = cu->sms;
    /* Interprocess events need the VM's IPC folder (cuda_ipc.c). */
    if (cu->ipc_dir[0] == '\0' && CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED < n)
        r->attrs[CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED] = 0;
    /* Shareable handles travel through the daemon's keep (cuda_vmm.c,
     * cuda_mem.c): POSIX descriptors alone. */
    if (cu->keep_fd < 0 && CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED < n)
        r->attrs[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = 0;
    if (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES < n)
        r->attrs[CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] &=
            cu->keep_fd >= 0 ? (uint32_t)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0u;
    return VCU_S_OK;
}

/*
 * What the guest is told of device d's memory: with a quota, total is
 * the quota (never more than the GPU has) and free what the VM's charges
 * leave of it (never more than the GPU has free); without, the GPU's.
 */
static void vcu__mem_view(vcu__cuda_sess_t *cs, uint32_t d, size_t *fr, size_t *tot)
{
    vcu_account_t *a = cs->cu->acct;
    uint64_t used;

    if (a == NULL || vcu__acct_quota(a) == 0)
        return;
    vcu__pool_settle(cs, d);
    vcu__gmem_settle(cs, d);
    if (vcu__acct_quota(a) < *tot)
        *tot = (size_t)vcu__acct_quota(a);
    used = vcu__acct_used(a, d);
    if (used >= *tot)
        *fr = 0;
    else if (*tot - used < *fr)
        *fr = (size_t)(*tot - used);
}

uint32_t vcu__op_CU_MEM_GET_INFO(vcu__op_t *o)
{
    size_t fr = 0, tot = 0;

    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemGetInfo, &fr, &tot);
    if (o->res == CUDA_SUCCESS)
        vcu__mem_view(o->cs, vcu__dev_of(o), &fr, &tot);
    o->rb.mem.free = fr;
    o->rb.mem.total = tot;
    return VCU_S_OK;
}

/*
 * The host's NVIDIA kernel driver version as nvidia-smi shows it
 * ("580.159.04"), read once from the module's sysfs file
 * ($VCU_NVIDIA_VERSION_FILE instead, for tests); digits and dots only,
 * else "".
 */
static char vcu__nv_version[16];
static pthread_once_t vcu__nv_version_once = PTHREAD_ONCE_INIT;

static void vcu__nv_version_read(void)
{
    const char *path = getenv("VCU_NVIDIA_VERSION_FILE");
    char buf[32] = "";
    FILE *f = fopen(path != NULL ? path : "/sys/module/nvidia/version", "re");
    size_t n;

    if (f == NULL)
        return;
    if (fgets(buf, sizeof(buf), f) == NULL)
        buf[0] = '\0';
    fclose(f);
    n = strcspn(buf, "\n");
    if (n == 0 || n >= sizeof(vcu__nv_version) || strspn(buf, "0123456789.") != n)
        return;
    memcpy(vcu__nv_version, buf, n);
    vcu__nv_version[n] = '\0';
}

static void vcu__slice_driver_version(struct vcu_cu_slice_info_resp *r)
{
    pthread_once(&vcu__nv_version_once, vcu__nv_version_read);
    memcpy(r->driver_version, vcu__nv_version, sizeof(r->driver_version));
}

/*
 * From the VM's account: its quota, what is charged to it (each live
 * session's part), its workers' context overhead, and the sessions that
 * ended by a GPU fault.  Without one (a backend on its own: loopback,
 * tests) the slice is the whole GPU and this session the only one known.
 */
/*
 * The VM's GPU utilization, percent of the last second: the host driver's
 * own per-process SM utilization (NVML's process samples), summed over
 * the VM's workers (the account's pids), so the guest's NVML reports the
 * VM's use of the GPU, not the GPU's.  NVML is the host's
 * libnvidia-ml.so.1, loaded at the first ask; the few declarations are
 * NVML's stable ABI (nvml.h: nvmlProcessUtilizationSample_t, NVML 7 on).
 * VCU_SLICE_UNKNOWN32 where it cannot tell (no host NVML: the stand-in).
 */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;   /* us since the epoch */
    unsigned int smUtil, memUtil, encUtil, decUtil;
} vcu__nvml_sample_t;

/* nvmlPciInfo_t (nvml.h, NVML 2.285 on). */
typedef struct {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} vcu__nvml_pci_t;

static struct {
    pthread_once_t once;
    int ok;
    int (*by_uuid)(const char *uuid, void **dev);
    int (*proc_util)(void *dev, vcu__nvml_sample_t *s, unsigned int *n,
                     unsigned long long since);
    /* NVLink (any may be missing: no links are reported then). */
    int (*link_state)(void *dev, unsigned int link, int *active);
    int (*link_cap)(void *dev, unsigned int link, int cap, unsigned int *res);
    int (*link_type)(void *dev, unsigned int link, int *type);
    int (*link_pci)(void *dev, unsigned int link, vcu__nvml_pci_t *pci);
} vcu__nvml = { .once = PTHREAD_ONCE_INIT };

/* The host's NVML: libnvidia-ml.so.1, or in tests what VCU_HOST_NVML
 * names: the stand-in (tests/nvml/fakenvml.c, a TEST DOUBLE), or "none"
 * (the loopback fixture, whose process holds the guest's NVML under
 * that name). */
static void vcu__nvml_load(void)
{
    const char *path = getenv("VCU_HOST_NVML");
    void *lib;
    int (*init)(void);

    if (path != NULL && strcmp(path, "none") == 0)
        return;
    lib = dlopen(path != NULL && *path != '\0' ? path : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL)
        return;
    init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    vcu__nvml.by_uuid = (int (*)(const char *, void **))dlsym(lib, "nvmlDeviceGetHandleByUUID");
    vcu__nvml.proc_util = (int (*)(void *, vcu__nvml_sample_t *, unsigned int *,
                                   unsigned long long))dlsym(lib,
                                                             "nvmlDeviceGetProcessUtilization");
    vcu__nvml.link_state =
        (int (*)(void *, unsigned int, int *))dlsym(lib, "nvmlDeviceGetNvLinkState");
    vcu__nvml.link_cap = (int (*)(void *, unsigned int, int, unsigned int *))dlsym(
        lib, "nvmlDeviceGetNvLinkCapability");
    vcu__nvml.link_type =
        (int (*)(void *, unsigned int, int *))dlsym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
    vcu__nvml.link_pci = (int (*)(void *, unsigned int, vcu__nvml_pci_t *))dlsym(
        lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    vcu__nvml.ok = init != NULL && vcu__nvml.by_uuid != NULL && vcu__nvml.proc_util != NULL &&
                   init() == 0;
}

/* The host NVML's handle of the VM's device d: 0, or -1 (no NVML). */
static int vcu__nvml_dev(vcu__op_t *o, uint32_t d, void **dev)
{
    CUuuid u;
    char uuid[48];

    pthread_once(&vcu__nvml.once, vcu__nvml_load);
    if (!vcu__nvml.ok || VCU__CU(o->cu, cuDeviceGetUuid, &u, o->cu->dev[d]) != CUDA_SUCCESS)
        return -1;
    vcu__uuid_str(&u, uuid, sizeof(uuid));
    return vcu__nvml.by_uuid(uuid, dev) == 0 ? 0 : -1;
}

static uint32_t vcu__vm_util(vcu__op_t *o, uint32_t d, vcu_account_t *a)
{
    enum { MAX_PIDS = 256 };
    uint32_t pids[MAX_PIDS], npids = 0, sum = 0, i, j;
    uint64_t usum[MAX_PIDS] = { 0 }, ucnt[MAX_PIDS] = { 0 };
    vcu__nvml_sample_t *smp = NULL;
    unsigned int n = 0;
    struct timespec ts;
    void *dev = NULL;
    int r;

    if (vcu__nvml_dev(o, d, &dev) != 0)
        return VCU_SLICE_UNKNOWN32;
    for (i = 0; i < a->nslots && npids < MAX_PIDS; i++)
        if (atomic_load(&a->slot[i].session) != 0 && atomic_load(&a->slot[i].pid) != 0)
            pids[npids++] = atomic_load(&a->slot[i].pid);
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Samples of the last second (NVML keeps about 1/6 s each). */
    /* The buffer's size first (NVML_ERROR_INSUFFICIENT_SIZE, 7, or
     * success); NVML_ERROR_NOT_FOUND (6): no process ran lately. */
    r = vcu__nvml.proc_util(dev, NULL, &n, 0);
    if (r == 6 || ((r == 0 || r == 7) && n == 0))
        return 0;
    if (r != 0 && r != 7)
        return VCU_SLICE_UNKNOWN32;
    if (n > 4096)
        n = 4096;
    smp = calloc(n, sizeof(*smp));
    if (smp == NULL)
        return VCU_SLICE_UNKNOWN32;
    r = vcu__nvml.proc_util(dev, smp, &n,
                            (unsigned long long)ts.tv_sec * 1000000ull +
                                (unsigned long long)ts.tv_nsec / 1000 - 1000000ull);
    if (r != 0) {
        free(smp);
        /* NVML_ERROR_NOT_FOUND: no sample in the window. */
        return r == 6 ? 0 : VCU_SLICE_UNKNOWN32;
    }
    for (i = 0; i < n; i++)
        for (j = 0; j < npids; j++)
            if (smp[i].pid == pids[j] && smp[i].smUtil <= 100) {
                usum[j] += smp[i].smUtil;
                ucnt[j]++;
            }
    free(smp);
    for (j = 0; j < npids; j++)
        if (ucnt[j] > 0)
            sum += (uint32_t)(usum[j] / ucnt[j]);
    return sum > 100 ? 100 : sum;
}

/* The VM's device whose PCI address pci names, or -1 (none of them). */
static int vcu__vm_dev_at(vcu__op_t *o, const vcu__nvml_pci_t *pci)
{
    for (uint32_t k = 0; k < o->cu->ndev; k++) {
        int dom = -1, bus = -1, slot = -1;

        if (VCU__CU(o->cu, cuDeviceGetAttribute, &dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID,
                    o->cu->dev[k]) == CUDA_SUCCESS &&
            VCU__CU(o->cu, cuDeviceGetAttribute, &bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID,
                    o->cu->dev[k]) == CUDA_SUCCESS &&
            VCU__CU(o->cu, cuDeviceGetAttribute, &slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
                    o->cu->dev[k]) == CUDA_SUCCESS &&
            (unsigned int)dom == pci->domain && (unsigned int)bus == pci->bus &&
            (unsigned int)slot == pci->device)
            return (int)k;
    }
    return -1;
}

/* Link l of the host NVML's dev, as vcu_proto.h's CU_NVLINK_INFO tells
 * it: nothing of a link that is absent or leads outside the VM. */
static void vcu__nvlink(vcu__op_t *o, void *dev, unsigned int l, struct vcu_cu_nvlink *k)
{
    enum { NVML_GPU = 0, NVML_SWITCH = 2, NVML_CAPS = 6 };
    vcu__nvml_pci_t pci;
    unsigned int v;
    int active = 0, type = -1, peer;

    if (vcu__nvml.link_state(dev, l, &active) != 0 || vcu__nvml.link_type(dev, l, &type) != 0)
        return;
    if (type == NVML_SWITCH) {
        k->remote = VCU_NVLINK_SWITCH;
    } else if (type == NVML_GPU) {
        memset(&pci, 0, sizeof(pci));
        if (vcu__nvml.link_pci(dev, l, &pci) != 0 || (peer = vcu__vm_dev_at(o, &pci)) < 0)
            return;
        k->remote = VCU_NVLINK_GPU;
        k->remote_dev = (uint32_t)peer;
    } else {
        return;
    }
    k->active = active == 1;        /* NVML_FEATURE_ENABLED */
    for (int c = 0; c < NVML_CAPS; c++)
        if (vcu__nvml.link_cap(dev, l, c, &v) == 0 && v != 0)
            k->caps |= (uint8_t)(1u << c);
}

uint32_t vcu__op_CU_NVLINK_INFO(vcu__op_t *o)
{
    struct vcu_cu_nvlink_info_resp *r = &o->rb.nvlink;
    uint32_t d = vcu__dev_of(o);
    void *dev = NULL;

    if (d >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return VCU_S_OK;
    }
    if (vcu__nvml_dev(o, d, &dev) != 0 || vcu__nvml.link_state == NULL ||
        vcu__nvml.link_cap == NULL || vcu__nvml.link_type == NULL || vcu__nvml.link_pci == NULL)
        return VCU_S_OK;
    r->known = 1;
    for (unsigned int l = 0; l < VCU_NVLINK_MAX; l++)
        vcu__nvlink(o, dev, l, &r->links[l]);
    return VCU_S_OK;
}

uint32_t vcu__op_CU_SLICE_INFO(vcu__op_t *o)
{
    struct vcu_cu_slice_info_resp *r = &o->rb.slice;
    vcu_account_t *a = o->cu->acct;
    size_t fr = 0, tot = 0;
    uint32_t d = vcu__dev_of(o), i, n = 0;
    int sms = 0;

    vcu__slice_driver_version(r);
    if (a != NULL) {
        /* From the account, with no context of its own: a guest's NVML
         * (nvidia-smi, a monitoring agent) costs the GPU nothing. */
        if (d >= o->cu->ndev) {
            o->res = CUDA_ERROR_INVALID_DEVICE;
            return VCU_S_OK;
        }
        if (o->cs->ctx[d] != NULL && vcu__ctx(o->cs, d) == CUDA_SUCCESS)
            vcu__pool_settle(o->cs, d);
        o->res = VCU__CU(o->cu, cuDeviceTotalMem, &tot, o->cu->dev[d]);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
        if (vcu__acct_quota(a) != 0 && vcu__acct_quota(a) < tot)
            tot = (size_t)vcu__acct_quota(a);
        if (VCU__CU(o->cu, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                    o->cu->dev[d]) != CUDA_SUCCESS)
            sms = 0;
        r->mem_quota = vcu__acct_quota(a);
        r->mem_total = tot;
        r->mem_used = vcu__acct_used(a, d);
        r->ctx_bytes = vcu__acct_ctx(a, d);
        /* The VM's weight, as its QEMU wrote it in the group, clamped as
         * the scheduler reads it: for reporting only. */
        r->compute_share = o->cu->sched != NULL && o->cu->sched->vm_slot >= 0
                               ? vcu__sched_weight(&o->cu->sched->vm[o->cu->sched->vm_slot])
                               : 0;
        r->sm_count = o->cu->sms != 0 ? o->cu->sms : (uint32_t)sms;
        r->util_percent = vcu__vm_util(o, d, a);
        r->faults = atomic_load(&a->hdr->faults);
        for (i = 0; i < a->nslots && n < VCU_SLICE_MAX_SESSIONS; i++) {
            uint64_t id = atomic_load(&a->slot[i].session);

            if (id == 0)
                continue;
            r->sessions[n].session = id;
            r->sessions[n].mem_used = atomic_load(&a->slot[i].charged[d]);
            r->sessions[n].ctx_bytes = atomic_load(&a->slot[i].ctx[d]);
            r->sessions[n].gpu_time_ns = VCU_SLICE_UNKNOWN64;
            n++;
        }
        r->num_sessions = n;
        return VCU_S_OK;
    }
    VCU__ENTER(o);
    o->res = VCU__CU(o->cu, cuMemGetInfo, &fr, &tot);
    if (o->res != CUDA_SUCCESS)
        return VCU_S_OK;
    if (VCU__CU(o->cu, cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                o->cu->dev[vcu__dev_of(o)]) != CUDA_SUCCESS)
        sms = 0;
    r->mem_quota = 0;
    r->mem_total = tot;
    r->mem_used = VCU_SLICE_UNKNOWN64;
    r->ctx_bytes = VCU_SLICE_UNKNOWN64;
    r->compute_share = 0;
    r->sm_count = o->cu->sms != 0 ? o->cu->sms : (uint32_t)sms;
    r->util_percent = VCU_SLICE_UNKNOWN32;
    r->faults = VCU_SLICE_UNKNOWN64;
    r->num_sessions = 1;
    r->sessions[0].session = o->h->session;
    r->sessions[0].mem_used = VCU_SLICE_UNKNOWN64;
    r->sessions[0].ctx_bytes = VCU_SLICE_UNKNOWN64;
    r->sessions[0].gpu_time_ns = VCU_SLICE_UNKNOWN64;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_CTX_SYNCHRONIZE(vcu__op_t *o)
{
    VCU__ENTER(o);
    o->wait = vcu__wait_new(o->cs);
    if (o->wait != NULL && vcu__park_ctx(o->cs, o->wait, vcu__dev_of(o)) == 0)
        return VCU_S_OK;
    if (o->wait != NULL) {
        vcu__wait_free(o->cs, o->wait);
        o->wait = NULL;
    }
    o->res = o->cu->fn.cuCtxSynchronize();
    return VCU_S_OK;
}

uint32_t vcu__op_CU_CTX_RESET(vcu__op_t *o)
{
    uint32_t d = vcu__dev_of(o);

    if (d >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return VCU_S_OK;
    }
    vcu__ctx_destroy(o->cs, d);
    o->res = CUDA_SUCCESS;
    return VCU_S_OK;
}

/*
 * cuCtxEnablePeerAccess / cuCtxDisablePeerAccess from the request
 * device's context to the session's context of device a (every guest
 * context of a device is that one host context).  One device is not its
 * own peer: enabling is CUDA_ERROR_INVALID_DEVICE, as cuDeviceCanAccessPeer
 * says, and disabling finds nothing enabled.  The driver checks the
 * devices' link.
 */
uint32_t vcu__op_CU_CTX_PEER_ACCESS(vcu__op_t *o)
{
    struct vcu_cu_pair_req rq;
    CUcontext pc;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.c > 1 || (rq.c == 0 && rq.b != 0) || o->nsegs != 0)
        return VCU_S_EINVAL;
    if (rq.b != 0) {
        o->res = CUDA_ERROR_INVALID_VALUE;     /* cuda.h: flags must be 0 */
        return VCU_S_OK;
    }
    if (rq.a >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_CONTEXT;
        return VCU_S_OK;
    }
    if (rq.a == vcu__dev_of(o)) {
        o->res = rq.c ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
        return VCU_S_OK;
    }
    if (vcu__peer_ctx(o, (uint32_t)rq.a, &pc) != 0)
        return VCU_S_OK;
    VCU__ENTER(o);
    o->res = rq.c ? VCU__CU(o->cu, cuCtxEnablePeerAccess, pc, 0)
                  : VCU__CU(o->cu, cuCtxDisablePeerAccess, pc);
    return VCU_S_OK;
}

/*
 * Synchronizes every context of the session, as a blocking call (only a
 * blocking call makes sure the driver has written the contexts' device
 * printf output).  The first failure, and in *bad (if not NULL) its
 * device.
 */
CUresult vcu__sync_all(vcu__cuda_sess_t *cs, uint32_t *bad)
{
    CUresult r, first = CUDA_SUCCESS;
    uint32_t d;

    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] == NULL)
            continue;
        r = vcu__cur(cs, cs->ctx[d]);
        if (r == CUDA_SUCCESS)
            r = cs->cu->fn.cuCtxSynchronize();
        if (r != CUDA_SUCCESS && first == CUDA_SUCCESS) {
            first = r;
            if (bad != NULL)
                *bad = d;
        }
    }
    return first;
}

uint32_t vcu__op_CU_TAKE_OUTPUT(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    size_t room = o->cap - sizeof(struct vcu_cu_output_resp), n = 0;
    int more = 0;

    memcpy(&rq, o->p, sizeof(rq));
    if (rq.value & ~(uint64_t)VCU_CU_TAKE_F_SYNC)
        return VCU_S_EINVAL;
    if (o->cs->out == NULL)
        return VCU_S_OK;            /* nothing captured: len 0 */
    if (rq.value & VCU_CU_TAKE_F_SYNC) {
        vcu__out_sync_begin(o->cs->out);
        o->res = vcu__sync_all(o->cs, NULL);
        vcu__out_sync_end(o->cs->out);
    }
    if (room > VCU_MAX_PAYLOAD - sizeof(struct vcu_cu_output_resp))
        room = VCU_MAX_PAYLOAD - sizeof(struct vcu_cu_output_resp);
    n = vcu__out_take(o->cs->out, o->out + sizeof(struct vcu_cu_output_resp), room, &more);
    o->rb.out.len = (uint32_t)n;
    o->rb.out.more = (uint32_t)more;
    o->len = sizeof(struct vcu_cu_output_resp) + n;
    return VCU_S_OK;
}

uint32_t vcu__op_CU_CTX_SET_FLAGS(vcu__op_t *o)
{
    struct vcu_cu_u64_req rq;
    uint32_t d = vcu__dev_of(o);

    memcpy(&rq, o->p, sizeof(rq));
    if (d >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return VCU_S_OK;
    }
    if (rq.value & ~(uint64_t)VCU__CTX_GUEST_FLAGS) {
        o->res = CUDA_ERROR_INVALID_VALUE;
        return VCU_S_OK;
    }
    if (o->cs->ctx[d] != NULL) {
        VCU__ENTER(o);
        o->res = VCU__CU(o->cu, cuCtxSetFlags, (unsigned int)rq.value);
        if (o->res != CUDA_SUCCESS)
            return VCU_S_OK;
    }
    o->cs->ctx_flags[d] = (unsigned int)rq.value;
    o->res = CUDA_SUCCESS;
    return VCU_S_OK;
}

/*
 * GPU memory a stack limit of v bytes per thread makes the driver reserve
 * on device d, with the margin of VCU__STACK_MARGIN; above VCU__ACCT_MAX
 * for a size no GPU has.
 */
static uint64_t vcu__stack_bytes(const vcu__cuda_t *cu, uint32_t d, uint64_t v)
{
    uint64_t t = cu->stack_threads[d] + cu->stack_threads[d] / VCU__STACK_MARGIN;

    if (t == 0 || v > VCU__ACCT_MAX / t)
        return VCU__ACCT_MAX + 1;
    return v * t;
}

/* What the charge of limit k is at value v above base (v, base: bytes). */
static uint64_t vcu__lim_cost(const vcu__cuda_t *cu, uint32_t d, int k, uint64_t v, uint64_t base)
{
    if (v <= base)
        return 0;
    if (k == VCU__LIM_STACK)
        return vcu__grain(vcu__stack_bytes(cu, d, v) - vcu__stack_bytes(cu, d, base));
    return vcu__grain(v - base);
}

/* Reads limit k of device d's context (current) the first time the
 * account needs it: its value before the guest's first set, which the
 * charge counts from, and its value now until then. */
static CUresult vcu__lim_learn(vcu__cuda_sess_t *cs, uint32_t d, int k)
{
    size_t v = 0;
    CUresult r;

    if (cs->lim_known[d][k])
        return CUDA_SUCCESS;
    r = VCU__CU(cs->cu, cuCtxGetLimit, &v, vcu__lim_id[k]);
    if (r != CUDA_SUCCESS)
        return r;
    cs->lim_base[d][k] = v;
    cs->lim_val[d][k] = v;
    cs->lim_known[d][k] = true;
    return CUDA_SUCCESS;
}

/*
 * The malloc heap, the printf FIFO and the threads' stacks are GPU memory
 * the context holds for the guest: what is set above their values before
 * the first set (part of the context's own cost, cu->ctx_bytes) is
 * charged before the driver is asked, like an allocation, and given back
 * when they are lowered or the context ends.  A stack limit is also
 * bounded outright: one whose whole reservation passes the VM's quota
 * (with none, the device's memory) is refused, as the driver refuses one
 * it cannot reserve, unless it is no more than the limit already holds.
 * The stack limit is never set below the local memory of the functions
 * handed out in the context (cs->lmem, vcu__stack_cover): the driver
 * would grow it back, uncharged, at their next launch.  Device d's
 * context is made current; the result is the guest's.
 */
static CUresult vcu__lim_set(vcu__cuda_sess_t *cs, uint32_t d, CUlimit lim, uint64_t value)
{
    vcu__cuda_t *cu = cs->cu;
    uint64_t ch, old, cap = 0;
    size_t tot = 0;
    CUresult r;
    int k;

    vcu__grun_drop(cs, d);
    r = vcu__cur(cs, cs->ctx[d]);   /* the drop may have switched */
    if (r != CUDA_SUCCESS)
        return r;
    k = lim == CU_LIMIT_MALLOC_HEAP_SIZE   ? VCU__LIM_HEAP
        : lim == CU_LIMIT_PRINTF_FIFO_SIZE ? VCU__LIM_FIFO
        : lim == CU_LIMIT_STACK_SIZE       ? VCU__LIM_STACK
                                           : -1;
    if (k == VCU__LIM_STACK) {
        if (value < cs->lmem[d])
            value = cs->lmem[d];
        if (cu->acct != NULL)
            cap = vcu__acct_quota(cu->acct);
        if (cap == 0 && VCU__CU(cu, cuDeviceTotalMem, &tot, cu->dev[d]) == CUDA_SUCCESS)
            cap = tot;
        if (cap == 0 || cap > VCU__ACCT_MAX)
            cap = VCU__ACCT_MAX;
        if (vcu__stack_bytes(cu, d, value) > cap &&
            !(cs->lim_known[d][k] && value <= cs->lim_val[d][k]))
            return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (k < 0 || cu->acct == NULL)
        return VCU__CU(cu, cuCtxSetLimit, lim, (size_t)value);
    r = vcu__lim_learn(cs, d, k);
    if (r != CUDA_SUCCESS)
        return r;
    ch = vcu__lim_cost(cu, d, k, value, cs->lim_base[d][k]);
    old = cs->lim_charge[d][k];
    if (ch > VCU__ACCT_MAX || (ch > old && vcu__charge(cs, d, ch - old) != 0))
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = VCU__CU(cu, cuCtxSetLimit, lim, (size_t)value);
    if (r != CUDA_SUCCESS) {
        if (ch > old)
            vcu__uncharge(cs, d, ch - old);
        return r;
    }
    if (ch < old)
        vcu__uncharge(cs, d, old - ch);
    cs->lim_charge[d][k] = ch;
    cs->lim_val[d][k] = (size_t)value;
    return CUDA_SUCCESS;
}

uint32_t vcu__op_CU_CTX_SET_LIMIT(vcu__op_t *o)
{
    struct vcu_cu_limit_req rq;

    memcpy(&rq, o->p, sizeof(rq));
    VCU__ENTER(o);
    o->res = vcu__lim_set(o->cs, vcu__dev_of(o), (CUlimit)rq.limit, rq.value);
    return VCU_S_OK;
}

/*
 * A kernel whose local memory per thread passes its context's stack
 * limit makes the driver grow the context's local memory at its launch
 * to that size for every thread the device holds at once (as the stack
 * limit's, vcu__stack_bytes: 256 KiB a thread is 67 GiB on an H200), and
 * keep it.  On an H200 with driver 580 the size it grew to was exactly
 * LOCAL_SIZE_BYTES, callees' frames included, and a stack limit set to
 * that first left the launch nothing to grow (tests/gpu/probe-lmem.py; a
 * recursive kernel reports 0 and is not grown for: the guest sets the
 * limit it needs, charged).  So before a function is handed out, device
 * d's stack limit (the context of its module) is raised to cover its
 * local memory, through vcu__lim_set: charged as a guest's set is, kept
 * at least that (cs->lmem) while the context lives, given back with the
 * context; the driver then has nothing to grow at the launch, and what it
 * reserves is what is charged.  Past the VM's quota the lookup fails as
 * out of memory.  Here and not at the launch: every way to a launch
 * from the host (a launch, a batch, a run made a graph, a graph's kernel
 * node, a captured launch; the guest library's cuLibraryGetKernel and
 * cuKernelGetFunction too) starts with a function handed out here, while
 * launches are stream-ordered, mostly sent without a reply and their
 * errors deferred, so a check there would cost every launch and fail far
 * from its cause.  Not covered: a kernel that launches others from the
 * device grows the stack at its launch for them, past its own local size
 * (measured, docs/design.md "Memory quota": an open hole).
 * A program sees the error from the runtime call that looked the kernel
 * up (NVIDIA's runtime does so as it first uses a kernel: a launch, an
 * attribute query), as cudaErrorMemoryAllocation.  Without an account
 * nothing is charged and the driver grows the limit itself, as it does
 * natively.
 */
CUresult vcu__stack_cover(vcu__cuda_sess_t *cs, uint32_t d, CUfunction f)
{
    vcu__cuda_t *cu = cs->cu;
    int ls = 0;
    CUresult r;

    if (cu->acct == NULL)
        return CUDA_SUCCESS;
    r = VCU__CU(cu, cuFuncGetAttribute, &ls, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
    if (r != CUDA_SUCCESS || ls <= 0 || (size_t)ls <= cs->lmem[d])
        return r;
    r = vcu__ctx(cs, d);
    if (r == CUDA_SUCCESS)
        r = vcu__lim_learn(cs, d, VCU__LIM_STACK);
    if (r == CUDA_SUCCESS && (size_t)ls > cs->lim_val[d][VCU__LIM_STACK])
        r = vcu__lim_set(cs, d, CU_LIMIT_STACK_SIZE, (uint64_t)ls);
    if (r == CUDA_SUCCESS)
        cs->lmem[d] = (size_t)ls;
    return r;
}

uint32_t vcu__op_CU_GET_DEFERRED_ERROR(vcu__op_t *o)
{
    o->res = (CUresult)o->cs->deferred;
    o->cs->deferred = 0;
    return VCU_S_OK;
}
