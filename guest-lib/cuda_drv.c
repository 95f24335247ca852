/*
 * libcuda.so.1 core: the session, initialization, devices, contexts (the
 * per-thread stack, primary contexts), cuGetProcAddress, cuGetExportTable
 * and error names.  Memory: cuda_mem.c and cuda_copy2d.c, modules:
 * cuda_module.c, launches: cuda_exec.c, streams and events:
 * cuda_stream.c.  The entry points no list entry marks "local" are stubs
 * generated from cuda_calls.list (gen-cuda.py).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_int.h"
#include "vcu_printf.h"
#include "vcu_transport_int.h"

_Static_assert(sizeof(CUresult) == sizeof(int), "the generated stubs return int");

vcu__drv_t vcu__drv = {
    .once = PTHREAD_ONCE_INIT,
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* ---- messages ----------------------------------------------------------- */

int vcu__cu_unsupported(int *once, const char *name)
{
    vcu__log_once(once, "libcuda (virtio-cuda): %s is not supported\n", name);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* VCU_LIBCUDA_TRACE=1: every cuGetProcAddress and cuGetExportTable query
 * on stderr (what NVIDIA's runtime asks of a driver: docs/driver-api.md). */
/* VCU_LIBCUDA_TRACE=modules: each module load, its size as given and as
 * sent, and how long it took (the whole trace includes it). */
int vcu__tracing_modules(void)
{
    static int on = -1;

    if (__atomic_load_n(&on, __ATOMIC_RELAXED) < 0) {
        const char *t = getenv("VCU_LIBCUDA_TRACE");

        __atomic_store_n(&on, t != NULL && (strcmp(t, "1") == 0 || strcmp(t, "modules") == 0),
                         __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&on, __ATOMIC_RELAXED);
}

int vcu__tracing(void)
{
    static int on = -1;

    if (__atomic_load_n(&on, __ATOMIC_RELAXED) < 0) {
        const char *t = getenv("VCU_LIBCUDA_TRACE");

        __atomic_store_n(&on, t != NULL && strcmp(t, "1") == 0, __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&on, __ATOMIC_RELAXED);
}

/* VCU_LIBCUDA_TRACE=errors: each request the host answers with an error,
 * by opcode, on stderr (which call of a program the host refused). */
static int vcu__tracing_errors(void)
{
    static int on = -1;

    if (__atomic_load_n(&on, __ATOMIC_RELAXED) < 0) {
        const char *t = getenv("VCU_LIBCUDA_TRACE");

        __atomic_store_n(&on, t != NULL && (strcmp(t, "1") == 0 || strcmp(t, "errors") == 0),
                         __ATOMIC_RELAXED);
    }
    return __atomic_load_n(&on, __ATOMIC_RELAXED);
}

static const char *vcu__op_name(uint32_t op)
{
    switch (op) {
#define VCU__OP_NAME(name, num, req, resp) \
    case VCU_OP_##name:                   \
        return #name;
        VCU_OP_MAP(VCU__OP_NAME)
#undef VCU__OP_NAME
    default:
        return "?";
    }
}

/* The request's name and error, then its first words after the header:
 * what the call was asked to do. */
static void vcu__trace_error(uint32_t op, const void *req, uint32_t req_len, CUresult e)
{
    const char *n = NULL;
    uint64_t w;
    uint32_t off;

    if (!vcu__tracing_errors())
        return;
    cuGetErrorName(e, &n);
    flockfile(stderr);
    if (op == VCU_OP_CU_CALL)
        fprintf(stderr, "libcuda (virtio-cuda): trace: CU_CALL 0x%04x -> %s:",
                ((const struct vcu_cu_call_req *)req)->call, n != NULL ? n : "?");
    else
        fprintf(stderr, "libcuda (virtio-cuda): trace: %s (0x%04x) -> %s:", vcu__op_name(op),
                op, n != NULL ? n : "?");
    for (off = sizeof(struct vcu_cu_hdr); off + sizeof(w) <= req_len && off < 104;
         off += sizeof(w)) {
        memcpy(&w, (const char *)req + off, sizeof(w));
        fprintf(stderr, " %#" PRIx64, w);
    }
    fputc('\n', stderr);
    funlockfile(stderr);
}

/* A call that needs a current context made without one, and the entry
 * point nearest below its caller (dladdr: exported names only). */
static void vcu__trace_no_ctx(void *caller)
{
    Dl_info di;

    if (!vcu__tracing_errors())
        return;
    if (dladdr(caller, &di) != 0 && di.dli_sname != NULL)
        fprintf(stderr, "libcuda (virtio-cuda): trace: no current context in %s+%#lx\n",
                di.dli_sname, (unsigned long)((char *)caller - (char *)di.dli_saddr));
    else
        fprintf(stderr, "libcuda (virtio-cuda): trace: no current context (%p)\n", caller);
}

static void vcu__trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void vcu__trace(const char *fmt, ...)
{
    va_list ap;

    if (!vcu__tracing())
        return;
    va_start(ap, fmt);
    fputs("libcuda (virtio-cuda): trace: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* ---- errors --------------------------------------------------------------- */

CUresult vcu__from_vcu(int err)
{
    switch (err) {
    case VCU_OK:
        return CUDA_SUCCESS;
    case VCU_EINVAL:
    case VCU_E2BIG:
    case VCU_EFAULT:
    case VCU_ERANGE:
        return CUDA_ERROR_INVALID_VALUE;
    case VCU_ENOTSUP:
        return CUDA_ERROR_NOT_SUPPORTED;
    case VCU_ENOMEM:
        return CUDA_ERROR_OUT_OF_MEMORY;
    case VCU_EVERSION:
        return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
    case VCU_ENODEV:
    case VCU_ENOSESSION:
        return CUDA_ERROR_NO_DEVICE;
    case VCU_ECANCELED:
        return CUDA_ERROR_DEINITIALIZED;
    default:
        return CUDA_ERROR_UNKNOWN;
    }
}

static const vcu__errname_t *vcu__errname(CUresult e)
{
    for (size_t i = 0; i < vcu__nerrnames; i++)
        if (vcu__errnames[i].code == (int)e)
            return &vcu__errnames[i];
    return NULL;
}

VCU__EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    const vcu__errname_t *n;

    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    n = vcu__errname(error);
    *pStr = n != NULL ? n->name : NULL;
    return n != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

VCU__EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    const vcu__errname_t *n;

    if (pStr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    n = vcu__errname(error);
    *pStr = n != NULL ? n->msg : NULL;
    return n != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- session and devices ------------------------------------------------- */

static CUresult vcu__raw_info(uint32_t vord, struct vcu_cu_device_info_resp *out)
{
    int err = vcu__device_info(vcu__drv.conn, vord, out);

    return err != 0 ? vcu__from_vcu(err) : (CUresult)out->r.result;
}

static int vcu__uuid_of(void *arg, uint32_t vord, uint8_t uuid[16])
{
    struct vcu_cu_device_info_resp info;

    (void)arg;
    if (vcu__raw_info(vord, &info) != CUDA_SUCCESS)
        return -1;
    memcpy(uuid, info.uuid, 16);
    return 0;
}

static void vcu__connect_once(void)
{
    static int logged;
    struct vcu_cu_hdr h = { 0 };
    struct vcu_cu_driver_info_resp di;
    uint32_t vord[VCU_CU_MAX_DEVICES];
    unsigned int dom = 0, bus = 0, slot = 0;
    const char *sync;
    int err, have;

    err = vcu_conn_open(NULL, VCU_FEAT_CUDA | VCU_FEAT_ASYNC | VCU_FEAT_MODULE_CACHE,
                        &vcu__drv.conn);
    if (err != 0) {
        vcu__drv.conn_err = err == VCU_EVERSION ? CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
                                                : CUDA_ERROR_NO_DEVICE;
        vcu__log_once(&logged, "libcuda (virtio-cuda): cannot open a session on %s: %s\n",
                      getenv("VCU_TRANSPORT") ? getenv("VCU_TRANSPORT") : vcu__dev_path(),
                      vcu_status_str(err));
        return;
    }
    if (!(vcu_conn_features(vcu__drv.conn) & VCU_FEAT_CUDA)) {
        vcu__drv.conn_err = CUDA_ERROR_NO_DEVICE;
        vcu__log_once(&logged, "libcuda (virtio-cuda): the host offers no CUDA (no GPU driver on the host)\n");
        return;
    }
    vcu__drv.max_xfer = vcu__drv.conn->max_xfer ? vcu__drv.conn->max_xfer : VCU_MAX_XFER;
    /* As our runtime: VCU_SYNC_CALLS=1 makes every call wait, so that each
     * error shows at the call that caused it (debugging). */
    sync = getenv("VCU_SYNC_CALLS");
    vcu__drv.async = (vcu_conn_features(vcu__drv.conn) & VCU_FEAT_ASYNC) &&
                     !(sync != NULL && strcmp(sync, "1") == 0);
    memset(&di, 0, sizeof(di));
    err = vcu_conn_call(vcu__drv.conn, VCU_OP_CU_DRIVER_INFO, 0, &h, sizeof(h), NULL, 0, &di,
                        sizeof(di), NULL);
    if (err != 0 || di.r.result != 0) {
        vcu__drv.conn_err = err != 0 ? vcu__from_vcu(err) : (CUresult)di.r.result;
        vcu__log_once(&logged, "libcuda (virtio-cuda): the host's CUDA driver failed: %s\n",
                      err != 0 ? vcu_status_str(err) : "CUDA error");
        return;
    }
    vcu__drv.driver_version = (int)di.driver_version < VCU__API_VERSION ? (int)di.driver_version
                                                                       : VCU__API_VERSION;
    vcu__drv.ndev = vcu__visible_devices(getenv("CUDA_VISIBLE_DEVICES"), di.device_count,
                                         vcu__uuid_of, NULL, vord, VCU_CU_MAX_DEVICES);
    have = vcu__pci_addr(vcu__dev_path(), &dom, &bus, &slot);
    for (int i = 0; i < vcu__drv.ndev; i++) {
        vcu__dev_t *d = &vcu__drv.dev[i];

        d->vord = vord[i];
        d->pci_domain = have ? dom : 0;
        d->pci_bus = have ? bus : 0;
        d->pci_device = have ? slot + vord[i] : vord[i];
    }
}

CUresult vcu__connect(void)
{
    pthread_once(&vcu__drv.once, vcu__connect_once);
    return vcu__drv.conn_err;
}

VCU__EXPORT CUresult cuInit(unsigned int Flags)
{
    CUresult e;

    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__connect();
    if (e != CUDA_SUCCESS)
        return e;
    __atomic_store_n(&vcu__drv.initialized, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

/* Before cuInit too, as NVIDIA's: the host's version (at most the API
 * version this library implements), or that API version with no host. */
VCU__EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (driverVersion == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = vcu__connect() == CUDA_SUCCESS ? vcu__drv.driver_version : VCU__API_VERSION;
    return CUDA_SUCCESS;
}

CUresult vcu__check_init(void)
{
    return __atomic_load_n(&vcu__drv.initialized, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                                     : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult vcu__check_dev(CUdevice dev)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (dev < 0 || dev >= vcu__drv.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

/* Device dev's description (checked: initialized, a device we have),
 * asked of the host once. */
static CUresult vcu__dev_info(CUdevice dev, const struct vcu_cu_device_info_resp **out)
{
    vcu__dev_t *d;
    CUresult e = vcu__check_dev(dev);

    if (e != CUDA_SUCCESS)
        return e;
    d = &vcu__drv.dev[dev];
    pthread_mutex_lock(&vcu__drv.lock);
    if (!d->info_loaded) {
        e = vcu__raw_info(d->vord, &d->info);
        d->info_loaded = e == CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    *out = &d->info;
    return e;
}

VCU__EXPORT CUresult cuDeviceGetCount(int *count)
{
    CUresult e;

    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    *count = vcu__drv.ndev;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult e;

    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_dev(ordinal);
    if (e != CUDA_SUCCESS)
        return e;
    *device = ordinal;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    const struct vcu_cu_device_info_resp *info;
    CUresult e;

    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__dev_info(dev, &info);
    if (e != CUDA_SUCCESS)
        return e;
    snprintf(name, (size_t)len, "%s", info->name);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    const struct vcu_cu_device_info_resp *info;
    CUresult e;

    if (uuid == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__dev_info(dev, &info);
    if (e != CUDA_SUCCESS)
        return e;
    memcpy(uuid->bytes, info->uuid, sizeof(uuid->bytes));
    return CUDA_SUCCESS;
}

/* The same UUID: one device has no MIG instance here to tell apart. */
VCU__EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

VCU__EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    const struct vcu_cu_device_info_resp *info;
    CUresult e;

    if (bytes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__dev_info(dev, &info);
    if (e != CUDA_SUCCESS)
        return e;
    *bytes = (size_t)info->total_mem;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    const struct vcu_cu_device_info_resp *info;
    vcu__dev_t *d;
    CUresult e;

    if (pi == NULL || (int)attrib <= 0 || (int)attrib >= (int)CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__dev_info(dev, &info);
    if (e != CUDA_SUCCESS)
        return e;
    d = &vcu__drv.dev[dev];
    switch (attrib) {
    /* The virtual PCI address the guest sees, not the host's. */
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        *pi = (int)d->pci_bus;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        *pi = (int)d->pci_device;
        return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        *pi = (int)d->pci_domain;
        return CUDA_SUCCESS;
    /* Those the library answers itself: vcu__device_info. */
    default:
        break;
    }
    *pi = (uint32_t)attrib < info->num_attrs && (uint32_t)attrib < VCU_CU_NUM_DEV_ATTRS
              ? (int)info->attrs[attrib]
              : 0;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    CUresult e;

    if (major == NULL || minor == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    if (e == CUDA_SUCCESS)
        e = cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    return e;
}

VCU__EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult e;

    if (pciBusId == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_dev(dev);
    if (e != CUDA_SUCCESS)
        return e;
    snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", vcu__drv.dev[dev].pci_domain,
             vcu__drv.dev[dev].pci_bus, vcu__drv.dev[dev].pci_device);
    return CUDA_SUCCESS;
}

/*
 * The device whose (virtual) bus id cuDeviceGetPCIBusId gives, named in
 * one of the forms cuda.h lists, hexadecimal, any case:
 * domain:bus:device.function, domain:bus:device, bus:device.function (the
 * domain 0).  NVML's eight-digit domain parses the same.  The function
 * must be 0, as every device's is.
 */
VCU__EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    unsigned int dom = 0, bus, devno, fn = 0;
    char tail;
    CUresult e;

    if (dev == NULL || pciBusId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &dom, &bus, &devno, &fn, &tail) != 4 &&
        sscanf(pciBusId, "%x:%x:%x%c", &dom, &bus, &devno, &tail) != 3) {
        dom = 0;
        fn = 0;
        if (sscanf(pciBusId, "%x:%x.%x%c", &bus, &devno, &fn, &tail) != 3)
            return CUDA_ERROR_INVALID_VALUE;
    }
    for (int d = 0; d < vcu__drv.ndev; d++) {
        if (vcu__drv.dev[d].pci_domain == dom && vcu__drv.dev[d].pci_bus == bus &&
            vcu__drv.dev[d].pci_device == devno && fn == 0) {
            *dev = d;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* ---- device printf ------------------------------------------------------ */

/*
 * As our runtime does it (cudart_printf.c): the host's driver writes what
 * kernels print to the host process's stdout, and a host that captures it
 * (a VM's) keeps it per session.  Once a module whose image uses printf
 * is loaded, every call that flushes device printf natively
 * (vcu_op_flushes_printf(): the synchronize calls, synchronous copies,
 * context reset) is followed by CU_TAKE_OUTPUT, and what comes back goes
 * to stdout; at exit the session is synchronized and emptied once more,
 * as NVIDIA's context teardown flushes.  In loopback the host does not
 * capture (the output is already on this process's stdout) and answers
 * len 0.
 */
static int vcu__printf_on;          /* never cleared; atomic */

static void vcu__printf_exit(void)
{
    if (vcu__drv.conn != NULL && vcu__drv.ndev > 0)
        vcu__output_take(vcu__drv.conn, vcu__drv.dev[0].vord, VCU_CU_TAKE_F_SYNC);
}

void vcu__printf_module(const void *image, uint64_t len)
{
    if (__atomic_load_n(&vcu__printf_on, __ATOMIC_RELAXED) ||
        !vcu_image_uses_printf(image, (size_t)len))
        return;
    /* Registered after the runtime's own teardown (registered when it
     * loaded), so it runs before it, while the session is whole. */
    if (!__atomic_exchange_n(&vcu__printf_on, 1, __ATOMIC_RELAXED))
        atexit(vcu__printf_exit);
}

void vcu__printf_after(int dev, uint32_t op, const void *req)
{
    if (__atomic_load_n(&vcu__printf_on, __ATOMIC_RELAXED) && vcu_op_flushes_printf(op, req))
        vcu__output_take(vcu__drv.conn, vcu__drv.dev[dev].vord, 0);
}

/* ---- calls to the host ------------------------------------------------- */

CUresult vcu__call(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                   unsigned int nbufs, void *resp, uint32_t resp_cap)
{
    CUresult e = vcu__managed_before(dev, op, req);

    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call_raw(dev, op, req, req_len, bufs, nbufs, resp, resp_cap);
    /* A reset context's memory and streams are gone, whatever the result. */
    if (op == VCU_OP_CU_CTX_RESET) {
        vcu__dr_forget_dev(dev);
        __atomic_add_fetch(&vcu__drv.gen[dev], 1, __ATOMIC_RELEASE);
    }
    /* Whatever the result: a failed synchronize may have flushed output
     * (a fault after a printf). */
    vcu__printf_after(dev, op, req);
    if (e == CUDA_SUCCESS)
        e = vcu__managed_after(dev, op, req);
    return e;
}

CUresult vcu__call_async(int dev, uint32_t op, void *req, uint32_t req_len,
                         const vcu_buf_t *bufs, unsigned int nbufs)
{
    CUresult e;
    int err;

    if (!vcu__drv.async)
        return vcu__call(dev, op, req, req_len, bufs, nbufs, NULL, 0);
    e = vcu__managed_before(dev, op, req);
    if (e != CUDA_SUCCESS)
        return e;
    ((struct vcu_cu_hdr *)req)->device = vcu__drv.dev[dev].vord;
    ((struct vcu_cu_hdr *)req)->ctx = 0;
    err = vcu_conn_call(vcu__drv.conn, op, VCU_CALL_ASYNC, req, req_len, bufs, nbufs, NULL, 0,
                        NULL);
    if (err != 0)
        return vcu__from_vcu(err);
    return vcu__managed_after(dev, op, req);
}

CUresult vcu__call_raw(int dev, uint32_t op, void *req, uint32_t req_len, const vcu_buf_t *bufs,
                       unsigned int nbufs, void *resp, uint32_t resp_cap)
{
    struct vcu_cu_resp local;
    struct vcu_cu_resp *r;
    uint32_t rlen = 0;
    int err;

    ((struct vcu_cu_hdr *)req)->device = vcu__drv.dev[dev].vord;
    /* A context's number goes only with what is made in it (its caller
     * sets it); every other request says 0. */
    if (!VCU_CU_OP_NAMES_CTX(op))
        ((struct vcu_cu_hdr *)req)->ctx = 0;
    if (resp == NULL) {
        resp = &local;
        resp_cap = sizeof(local);
    }
    r = resp;
    memset(r, 0, sizeof(*r));
    err = vcu_conn_call(vcu__drv.conn, op, 0, req, req_len, bufs, nbufs, resp, resp_cap, &rlen);
    if (err != 0)
        return vcu__from_vcu(err);
    if (rlen < sizeof(*r))
        return CUDA_ERROR_UNKNOWN;
    if (r->result != 0 || r->deferred != 0)
        vcu__trace_error(op, req, req_len, (CUresult)(r->result != 0 ? r->result : r->deferred));
    if (r->deferred != 0 && r->result == 0)
        return (CUresult)r->deferred;
    return (CUresult)r->result;
}

/* ---- contexts ------------------------------------------------------------- */

/* The calling thread's context stack; [depth - 1] is current. */
#define VCU__CTX_STACK 64
static __thread vcu__ctx_t *vcu__stack[VCU__CTX_STACK];
static __thread int vcu__depth;

static CUresult vcu__cur_at(vcu__ctx_t **out, void *caller)
{
    CUresult e = vcu__check_init();
    vcu__ctx_t *c;

    *out = NULL;
    if (e != CUDA_SUCCESS)
        return e;
    c = vcu__depth > 0 ? vcu__stack[vcu__depth - 1] : NULL;
    if (c == NULL || !vcu__reg_has(c, VCU__K_CTX)) {
        if (caller != NULL)
            vcu__trace_no_ctx(caller);
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *out = c;
    return CUDA_SUCCESS;
}

CUresult vcu__cur(vcu__ctx_t **out)
{
    return vcu__cur_at(out, __builtin_return_address(0));
}

uint32_t vcu__cur_number(int dev)
{
    vcu__ctx_t *c = vcu__depth > 0 ? vcu__stack[vcu__depth - 1] : NULL;

    return c != NULL && !c->primary && c->dev == dev && vcu__reg_has(c, VCU__K_CTX) ? c->number
                                                                                  : 0;
}

CUresult vcu__cur_quiet(vcu__ctx_t **out)
{
    return vcu__cur_at(out, NULL);
}

unsigned long long vcu__next_id(void)
{
    static unsigned long long next = 16;

    return __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
}

static vcu__ctx_t *vcu__ctx_new(int dev, int primary)
{
    static uint32_t numbers;
    vcu__ctx_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->dev = dev;
    c->primary = primary;
    c->id = vcu__next_id();
    /* The host's name for a created context's allocations (never 0; after
     * 2^32 contexts numbers come round again, each long destroyed). */
    if (!primary)
        while ((c->number = __atomic_add_fetch(&numbers, 1, __ATOMIC_RELAXED)) == 0)
            ;
    if (vcu__reg_add(c, VCU__K_CTX) != 0) {
        free(c);
        return NULL;
    }
    return c;
}

static CUresult vcu__push(vcu__ctx_t *c)
{
    if (vcu__depth >= VCU__CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    vcu__stack[vcu__depth++] = c;
    return CUDA_SUCCESS;
}

/* Context flags cuda.h defines, with at most one scheduling mode. */
static int vcu__ctx_flags_ok(unsigned int flags)
{
    const unsigned int known = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                               CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE |
                               CU_CTX_SYNC_MEMOPS;
    unsigned int sched = flags & CU_CTX_SCHED_MASK;

    return !(flags & ~known) && (sched & (sched - 1)) == 0;
}

static CUresult vcu__ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    vcu__ctx_t *c;
    CUresult e;

    if (pctx == NULL || !vcu__ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_dev(dev);
    if (e != CUDA_SUCCESS)
        return e;
    c = vcu__ctx_new(dev, 0);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->flags = flags;
    e = vcu__push(c);
    if (e != CUDA_SUCCESS) {
        vcu__reg_del(c);
        free(c);
        return e;
    }
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return vcu__ctx_create(pctx, flags, dev);
}

VCU__EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return vcu__ctx_create(pctx, flags, dev);
}

/* Execution affinity (SM counts) is not offered: only none of it. */
VCU__EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                    int numParams, unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && paramsArray == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    if (numParams > 0)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    return vcu__ctx_create(pctx, flags, dev);
}

/* Nor CIG (shared graphics contexts). */
VCU__EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                    unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams != NULL) {
        if (ctxCreateParams->numExecAffinityParams < 0 ||
            (ctxCreateParams->numExecAffinityParams > 0 &&
             ctxCreateParams->execAffinityParams == NULL))
            return CUDA_ERROR_INVALID_VALUE;
        if (ctxCreateParams->numExecAffinityParams > 0)
            return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
        if (ctxCreateParams->cigParams != NULL)
            return CUDA_ERROR_NOT_SUPPORTED;
    }
    return vcu__ctx_create(pctx, flags, dev);
}

/*
 * None, as cuCtxCreate_v3/_v4 above refuse every affinity: the guest's
 * contexts are views of its session's one host context per device.  Not
 * the host worker's answer, which is 1 in packed mode (an MPS client,
 * docs/design.md "Packed mode"): there the SMs are the VM's already, as
 * the device's SM count says.
 */
VCU__EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type,
                                                    CUdevice dev)
{
    const struct vcu_cu_device_info_resp *info;
    CUresult e;

    if (pi == NULL || (unsigned int)type >= (unsigned int)CU_EXEC_AFFINITY_TYPE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__dev_info(dev, &info);
    if (e != CUDA_SUCCESS)
        return e;
    *pi = 0;
    return CUDA_SUCCESS;
}

/*
 * Waits for the device's work, then the handle dies (it is popped from
 * the calling thread's stack; another thread that still has it current
 * gets CUDA_ERROR_INVALID_CONTEXT), and what was made in it ends, as the
 * driver ends a context's: cuMemAlloc's memory, modules, streams and
 * events (CU_CTX_DESTROY).  The host context is the device's, shared with
 * its other contexts: what else was made in this one (graphs, arrays,
 * pools, managed and page-locked memory) stays until a primary context
 * reset or the end of the process.
 */
VCU__EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    vcu__ctx_t *c = (vcu__ctx_t *)ctx;
    struct vcu_cu_hdr h;
    struct vcu_cu_u64_req d;
    struct vcu_cu_u64_resp o;
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (c == NULL || !vcu__reg_has(c, VCU__K_CTX) || c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    vcu__cls_destroy(c);
    e = vcu__call(c->dev, VCU_OP_CU_CTX_SYNCHRONIZE, &h, sizeof(h), NULL, 0, NULL, 0);
    /* Whatever the wait gave: the context goes, and what it holds with
     * it.  The ranges this library knows of the device are forgotten, its
     * memory's among them (only a later copy waits that need not). */
    memset(&d, 0, sizeof(d));
    d.value = c->number;
    memset(&o, 0, sizeof(o));
    if (vcu__call(c->dev, VCU_OP_CU_CTX_DESTROY, &d, sizeof(d), NULL, 0, &o, sizeof(o)) ==
            CUDA_SUCCESS &&
        o.value > 0)
        vcu__dr_forget_dev(c->dev);
    vcu__reg_del(c);
    for (int i = 0; i < vcu__depth; i++) {
        if (vcu__stack[i] != c)
            continue;
        memmove(&vcu__stack[i], &vcu__stack[i + 1], (size_t)(vcu__depth - i - 1) * sizeof(c));
        vcu__depth--;
        i--;
    }
    free(c);
    return e;
}

VCU__EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

VCU__EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult e;

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    *pctx = vcu__depth > 0 ? (CUcontext)vcu__stack[vcu__depth - 1] : NULL;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (ctx == NULL) {
        if (vcu__depth > 0)
            vcu__depth--;
        return CUDA_SUCCESS;
    }
    if (!vcu__reg_has(ctx, VCU__K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (vcu__depth == 0)
        return vcu__push((vcu__ctx_t *)ctx);
    vcu__stack[vcu__depth - 1] = (vcu__ctx_t *)ctx;
    return CUDA_SUCCESS;
}

/*
 * Peer access from the current context to peer's, sent to the host
 * (CU_CTX_PEER_ACCESS), which sets it between its contexts of the two
 * devices: every context here of a device is the host's one of it.  A
 * device is not its own peer (cuDeviceCanAccessPeer): enabling another
 * context of it is CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, as NVIDIA's driver
 * 580 answers (measured on two H200); the current context itself
 * CUDA_ERROR_INVALID_DEVICE (NVIDIA's runtime passes
 * cudaDeviceEnablePeerAccess of the current device down as that; its
 * native answer is not measured).
 */
static CUresult vcu__peer_access(CUcontext peer, unsigned int flags, int enable)
{
    struct vcu_cu_pair_req r;
    vcu__ctx_t *c, *p = (vcu__ctx_t *)peer;
    CUresult e = vcu__cur(&c);

    if (e != CUDA_SUCCESS)
        return e;
    if (p == NULL || !vcu__reg_has(p, VCU__K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->dev == c->dev && !enable)
        return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    if (p->dev == c->dev)
        return p == c ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    memset(&r, 0, sizeof(r));
    r.a = vcu__drv.dev[p->dev].vord;
    r.c = enable ? 1 : 0;
    return vcu__call(c->dev, VCU_OP_CU_CTX_PEER_ACCESS, &r, sizeof(r), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
    return vcu__peer_access(peerContext, Flags, 1);
}

VCU__EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    return vcu__peer_access(peerContext, 0, 0);
}

VCU__EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;    /* as NVIDIA's answers */
    if (!vcu__reg_has(ctx, VCU__K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    return vcu__push((vcu__ctx_t *)ctx);
}

VCU__EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

VCU__EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult e = vcu__check_init();

    if (e != CUDA_SUCCESS)
        return e;
    if (vcu__depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    vcu__depth--;
    if (pctx != NULL)
        *pctx = (CUcontext)vcu__stack[vcu__depth];
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

VCU__EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    vcu__ctx_t *c;
    CUresult e;

    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    *device = c->dev;
    return CUDA_SUCCESS;
}

/* ctx, or the current context where ctx is NULL (the CUDA 13 _v2 calls). */
static CUresult vcu__ctx_or_cur(CUcontext ctx, vcu__ctx_t **out)
{
    CUresult e;

    if (ctx == NULL)
        return vcu__cur(out);
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(ctx, VCU__K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = (vcu__ctx_t *)ctx;
    return CUDA_SUCCESS;
}

/* The current context's flags: a primary context's are its device's
 * (cuDevicePrimaryCtxSetFlags), a created one's its own. */
VCU__EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    vcu__ctx_t *c;
    CUresult e;

    if (flags == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    *flags = c->primary ? vcu__drv.dev[c->dev].primary_flags : c->flags;
    pthread_mutex_unlock(&vcu__drv.lock);
    return CUDA_SUCCESS;
}

/* The current context's flags, set on the device's one host context as
 * cuDevicePrimaryCtxSetFlags sets them. */
VCU__EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    struct vcu_cu_u64_req r = { .value = flags };
    vcu__ctx_t *c;
    CUresult e;

    if (!vcu__ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cur(&c);
    if (e == CUDA_SUCCESS)
        e = vcu__call(c->dev, VCU_OP_CU_CTX_SET_FLAGS, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    if (c->primary)
        vcu__drv.dev[c->dev].primary_flags = flags;
    else
        c->flags = flags;
    pthread_mutex_unlock(&vcu__drv.lock);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    vcu__ctx_t *c;
    CUresult e;

    if (ctxId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__ctx_or_cur(ctx, &c);
    if (e != CUDA_SUCCESS)
        return e;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    vcu__ctx_t *c;
    CUresult e;

    if (device == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__ctx_or_cur(ctx, &c);
    if (e != CUDA_SUCCESS)
        return e;
    *device = c->dev;
    return CUDA_SUCCESS;
}

/* A context named that is no context (of this library) is taken for a
 * destroyed one, as NVIDIA's driver answers (580, measured). */
VCU__EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    struct vcu_cu_hdr h;
    vcu__ctx_t *c;
    CUresult e = vcu__ctx_or_cur(ctx, &c);

    if (e == CUDA_ERROR_INVALID_CONTEXT && ctx != NULL)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (e != CUDA_SUCCESS)
        return e;
    return vcu__call(c->dev, VCU_OP_CU_CTX_SYNCHRONIZE, &h, sizeof(h), NULL, 0, NULL, 0);
}

VCU__EXPORT CUresult cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

/* The docs' "3020": a context of the _v2 API (every context here). */
VCU__EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    vcu__ctx_t *c;
    CUresult e;

    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__ctx_or_cur(ctx, &c);
    if (e != CUDA_SUCCESS)
        return e;
    *version = 3020;
    return CUDA_SUCCESS;
}

/* ---- primary contexts ------------------------------------------------- */

/*
 * One per device, allocated at the first retain and never freed, so its
 * handle is the same for every caller for the life of the process.  A
 * release to zero makes it inactive (its flags may be set again); what
 * the host holds for the device stays until cuDevicePrimaryCtxReset.
 */
CUresult vcu__primary(CUdevice dev, vcu__ctx_t **out)
{
    vcu__dev_t *d;
    CUresult e = vcu__check_dev(dev);

    if (e != CUDA_SUCCESS)
        return e;
    d = &vcu__drv.dev[dev];
    pthread_mutex_lock(&vcu__drv.lock);
    if (d->primary == NULL)
        d->primary = vcu__ctx_new(dev, 1);
    *out = d->primary;
    pthread_mutex_unlock(&vcu__drv.lock);
    return *out != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

VCU__EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    vcu__ctx_t *c;
    CUresult e;

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__primary(dev, &c);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    vcu__drv.dev[dev].primary_refs++;
    pthread_mutex_unlock(&vcu__drv.lock);
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

/* A release to zero calls the context-local destructors, as a reset does. */
VCU__EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    vcu__dev_t *d;
    int last = 0;
    CUresult e = vcu__check_dev(dev);

    if (e != CUDA_SUCCESS)
        return e;
    d = &vcu__drv.dev[dev];
    pthread_mutex_lock(&vcu__drv.lock);
    if (d->primary_refs == 0) {
        e = CUDA_ERROR_INVALID_CONTEXT;
    } else {
        d->primary_refs--;
        last = d->primary_refs == 0;
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    if (last)
        vcu__cls_destroy(d->primary);
    return e;
}

VCU__EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

VCU__EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    vcu__dev_t *d;
    CUresult e;

    if (flags == NULL || active == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_dev(dev);
    if (e != CUDA_SUCCESS)
        return e;
    d = &vcu__drv.dev[dev];
    pthread_mutex_lock(&vcu__drv.lock);
    *flags = d->primary_flags;
    *active = d->primary_refs > 0;
    pthread_mutex_unlock(&vcu__drv.lock);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    struct vcu_cu_u64_req r = { .value = flags };
    CUresult e;

    if (!vcu__ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__check_dev(dev);
    if (e != CUDA_SUCCESS)
        return e;
    e = vcu__call(dev, VCU_OP_CU_CTX_SET_FLAGS, &r, sizeof(r), NULL, 0, NULL, 0);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    vcu__drv.dev[dev].primary_flags = flags;
    pthread_mutex_unlock(&vcu__drv.lock);
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/*
 * Destroys everything of the device on the host (its one host context is
 * reset): allocations, modules, streams and events of every context of
 * the device; their handles here then get CUDA_ERROR_INVALID_HANDLE from
 * the host.  The primary handle stays the same, inactive.
 */
VCU__EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    struct vcu_cu_hdr h;
    CUresult e = vcu__check_dev(dev);

    if (e != CUDA_SUCCESS)
        return e;
    /* The runtimes' destructors first: they free what they hold in it. */
    if (vcu__drv.dev[dev].primary != NULL)
        vcu__cls_destroy(vcu__drv.dev[dev].primary);
    e = vcu__call(dev, VCU_OP_CU_CTX_RESET, &h, sizeof(h), NULL, 0, NULL, 0);
    pthread_mutex_lock(&vcu__drv.lock);
    vcu__drv.dev[dev].primary_refs = 0;
    vcu__drv.dev[dev].primary_flags = 0;
    pthread_mutex_unlock(&vcu__drv.lock);
    return e;
}

VCU__EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

/* ---- entry points by name ----------------------------------------------- */

static const vcu__proc_t *vcu__proc_first(const char *base, size_t *n)
{
    size_t lo = 0, hi = vcu__nprocs, first;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (strcmp(vcu__procs[mid].base, base) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    first = lo;
    while (lo < vcu__nprocs && strcmp(vcu__procs[lo].base, base) == 0)
        lo++;
    *n = lo - first;
    return *n ? &vcu__procs[first] : NULL;
}

/*
 * As NVIDIA's driver resolves a name (cuda.h, cuGetProcAddress; checked
 * against driver 580.159.04 with tests/gpu/probe-procaddr.c, see
 * docs/driver-api.md): the newest ABI variant of the base name introduced
 * at or before cudaVersion.  With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 * (bit 1 of flags) a name that has _ptds/_ptsz variants resolves only to
 * those (none yet at that version: VERSION_NOT_SUFFICIENT), any other name
 * to its legacy variant.  A name or version not found is CUDA_SUCCESS
 * with *pfn NULL and the status saying why; only flags beyond the two
 * bits and versions past the driver's are CUDA_ERROR_INVALID_VALUE.
 */
static CUresult vcu__get_proc(const char *symbol, void **pfn, int cudaVersion,
                              cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    const vcu__proc_t *p, *best = NULL;
    CUdriverProcAddressQueryResult st;
    int driver, per_thread = 0, has_pt = 0;
    size_t n;

    if (symbol == NULL || pfn == NULL ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    cuDriverGetVersion(&driver);
    if (cudaVersion > driver) {
        vcu__trace("cuGetProcAddress(%s, %d, %llu): newer than the driver (%d)\n", symbol,
                   cudaVersion, (unsigned long long)flags, driver);
        return CUDA_ERROR_INVALID_VALUE;
    }
    p = vcu__proc_first(symbol, &n);
    for (size_t i = 0; i < n; i++)
        has_pt |= p[i].per_thread;
    if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && has_pt)
        per_thread = 1;
    for (size_t i = 0; i < n; i++)
        if (p[i].per_thread == per_thread && p[i].version <= cudaVersion &&
            (best == NULL || p[i].version > best->version))
            best = &p[i];
    st = best != NULL ? CU_GET_PROC_ADDRESS_SUCCESS
         : n > 0      ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (status != NULL)
        *status = st;
    *pfn = best != NULL ? best->fn : NULL;
    vcu__trace("cuGetProcAddress(%s, %d, %llu) -> %s\n", symbol, cudaVersion,
               (unsigned long long)flags,
               best != NULL                                     ? "found"
               : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
                                                                  : "not found");
    return CUDA_SUCCESS;
}

VCU__EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult *symbolStatus)
{
    return vcu__get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

VCU__EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags)
{
    return vcu__get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

/*
 * NVIDIA's private tables (keyed by UUID; cuda_export.c).  An unknown
 * UUID is logged once and answered CUDA_ERROR_NOT_SUPPORTED.
 */
#define VCU__MAX_UUIDS 64
VCU__EXPORT CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;  /* protects seen, nseen */
    static CUuuid seen[VCU__MAX_UUIDS];
    static int nseen;
    const void *t;
    char id[37];
    int i, log = 0;

    if (ppExportTable == NULL || pExportTableId == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    vcu__uuid_fmt(pExportTableId->bytes, id);
    t = vcu__export_table(pExportTableId);
    if (t != NULL) {
        vcu__trace("cuGetExportTable(%s) -> found\n", id);
        *ppExportTable = t;
        return CUDA_SUCCESS;
    }
    *ppExportTable = NULL;
    pthread_mutex_lock(&mu);
    for (i = 0; i < nseen; i++)
        if (memcmp(&seen[i], pExportTableId, sizeof(CUuuid)) == 0)
            break;
    if (i == nseen && nseen < VCU__MAX_UUIDS) {
        seen[nseen++] = *pExportTableId;
        log = 1;
    }
    pthread_mutex_unlock(&mu);
    if (log || vcu__tracing())
        fprintf(stderr, "libcuda (virtio-cuda): cuGetExportTable %s is not supported\n", id);
    return CUDA_ERROR_NOT_SUPPORTED;
}
