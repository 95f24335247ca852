/*
 * CUDA executor: runs the CUDA opcodes of include/vcu_proto.h on the host
 * GPU through the CUDA Driver API, loaded at run time with dlopen().
 *
 * One CUDA context per session and virtual device, created lazily on the
 * session's worker thread (never the primary context: sessions must not
 * share state).  Guests name host objects only through the typed,
 * generation-checked handles of cuda_tab.c.  This file is the core;
 * cuda_int.h names the parts that run the opcodes of each API section.
 *
 * Host callbacks (CU_STREAM_HOST_FUNC, graph host nodes) run in the guest:
 * CUDA calls vcu__cb_trampoline() on a thread of its own, which hands the
 * guest's cookie to a CU_CALLBACK_WAIT request and blocks until the
 * matching CU_CALLBACK_DONE arrives.  WAIT and DONE run inline on the
 * submitting thread, so DONE is never stuck behind the worker's
 * cuStreamSynchronize() that waits for that very callback.
 *
 * Copies from and to VCU_SEG_F_STABLE segments on a stream return without
 * waiting for the stream: the guest keeps those pages until SESSION_FENCE,
 * which waits for all GPU work of the session (vcu__cuda_sess_fence).
 * Other segments are mapped only until the reply, so their async copies
 * still finish before it.
 *
 * The worker never blocks on the GPU.  Whatever must wait (synchronize
 * calls, synchronous copies, async copies from segments that are not
 * stable, fences) is issued, asynchronously where CUDA allows, and an
 * event from the session's pool (CU_EVENT_DISABLE_TIMING, reused) is
 * recorded right behind it on the same stream; the request becomes a
 * wait (vcu__cuda_wait_t) that the core polls.  A context-wide wait
 * records one event on every stream of the context: non-blocking
 * streams do not synchronize with the legacy stream.  Streams the guest
 * destroyed with work still queued stay alive, unnamed (cs->orphans),
 * until that work is done, so that a fence still sees it.  An event the
 * guest synchronizes on is polled itself; recording or destroying it
 * while such a wait is parked hands the old CUevent to the wait and gives
 * the guest's handle a new one (CUDA waits for the record current when
 * the synchronize was called).
 *
 * The exception: a session that loaded an image using device printf,
 * where the backend captures it (capture.c).  Its synchronizing calls
 * block until their work is done, since only a blocking call makes sure
 * the driver has written the output; what it wrote meanwhile is the
 * session's, for CU_TAKE_OUTPUT.
 *
 * Locks, in order:
 *   vcu__cuda_t.mu    the RAM registration list (vcu__cuda_add_ram,
 *                     vcu__cuda_remove_ram, fini) and a worker's context
 *                     references.
 *   vcu__gate_t.mu    a session's callback gate: queued cookies, the parked
 *                     WAIT, the waiting trampolines, "ending".  Taken by
 *                     the trampolines (CUDA threads), the inline opcodes
 *                     (submitting thread) and vcu__cuda_sess_free (worker).
 *                     Never held across a CUDA call or vcu__complete().
 *   vcu__cuda_sess_t.hostmu  the session's host memory count and its
 *                     charge: the worker and the trampolines (a one-shot
 *                     record given back).
 *   the account's admission lock (vcu_account.h), last: taken under
 *                     vcu__cuda_t.mu (a worker's context charged) and
 *                     under hostmu (host memory charged), never the other
 *                     way round.
 * Everything else in a session (contexts, tables, deferred error, event
 * pools, waits, orphans, module counts) belongs to its worker thread
 * alone.
 *
 * What a hostile guest must not reach (docs/design.md, "Isolation"):
 * core dump settings (context flags are allow-listed, dumps are off
 * process-wide), other sessions' memory through the device's shared
 * default pool (each session has pools of its own), modules freed under
 * graphs that still run their code (counted, see vcu__mod_t), host
 * memory without bound (VCU__SESS_HOST_BUDGET, and the VM's host quota),
 * GPU memory past the VM's quota (the account of vcu_account.h: every
 * allocation, every context and every context limit that reserves GPU
 * memory is charged to it first, vcu__charge()).
 */
#include "cuda_int.h"
/* ---- error translation -------------------------------------------------- */

/* The one CUresult -> VCU_E* translation (init and RAM registration). */
int vcu__cu_err(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return 0;
    case CUDA_ERROR_OUT_OF_MEMORY:
        return VCU_ENOMEM;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
        return VCU_EINVAL;
    case CUDA_ERROR_NOT_SUPPORTED:
        return VCU_ENOTSUP;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        return VCU_ENODEV;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
        return 0;
    default:
        return VCU_EIO;
    }
}

static const char *vcu__cu_name(const vcu__cuda_t *cu, CUresult r)
{
    const char *s = NULL;

    if (cu->fn.cuGetErrorName == NULL || cu->fn.cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL)
        return "CUDA error";
    return s;
}

/* ---- init --------------------------------------------------------------- */

/* Resolves one entry of cfg->gpus to a host ordinal. */
static int vcu__parse_gpu(vcu__cuda_t *cu, const char *tok, size_t len, int count, int *ord,
                          char *err, size_t errlen)
{
    char buf[128];
    int i;

    if (len == 0 || len >= sizeof(buf)) {
        snprintf(err, errlen, "gpus: empty or overlong entry");
        return VCU_ENODEV;
    }
    memcpy(buf, tok, len);
    buf[len] = '\0';
    if (strncasecmp(buf, "GPU-", 4) == 0) {
        for (i = 0; i < count; i++) {
            CUdevice d;
            CUuuid u;
            char s[64];

            if (cu->fn.cuDeviceGet(&d, i) != CUDA_SUCCESS ||
                VCU__CU(cu, cuDeviceGetUuid, &u, d) != CUDA_SUCCESS)
                continue;
            vcu__uuid_str(&u, s, sizeof(s));
            if (strcasecmp(s, buf) == 0) {
                *ord = i;
                return 0;
            }
        }
        snprintf(err, errlen, "gpus: no host GPU has UUID %s", buf);
        return VCU_ENODEV;
    } else {
        char *end;
        long v;

        errno = 0;
        v = strtol(buf, &end, 10);
        if (errno != 0 || *end != '\0' || end == buf || v < 0 || v >= count) {
            snprintf(err, errlen, "gpus: \"%s\" is not a host GPU ordinal below %d", buf, count);
            return VCU_ENODEV;
        }
        *ord = (int)v;
        return 0;
    }
}

/*
 * GPU core dumps off for good, before the driver is loaded: with them
 * one faulting guest kernel makes the driver write a dump (GPU memory of
 * every session) into this process's working directory and abort() the
 * process, and user-triggered dumps make it create a named pipe.  Values
 * set in the environment before the driver initializes take precedence
 * over anything set later through the API (cuda.h), so no later call can
 * turn them back on.  Runs when the backend is created, before the
 * threads of its sessions exist.
 */
static void vcu__coredump_env(void)
{
    setenv("CUDA_ENABLE_COREDUMP_ON_EXCEPTION", "0", 1);
    setenv("CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION", "0", 1);
    setenv("CUDA_ENABLE_USER_TRIGGERED_COREDUMP", "0", 1);
    unsetenv("CUDA_COREDUMP_PIPE");
}

/* The same through the API, for a driver that this process initialized
 * before the backend (it read its environment then).  Best effort: older
 * drivers lack the call. */
static void vcu__coredump_off(vcu__cuda_t *cu)
{
    static const CUcoredumpSettings off[] = {CU_COREDUMP_ENABLE_ON_EXCEPTION,
                                             CU_COREDUMP_TRIGGER_HOST,
                                             CU_COREDUMP_ENABLE_USER_TRIGGER};
    int flags = CU_COREDUMP_SKIP_ABORT;
    bool no = false;
    size_t sz;
    unsigned int i;

    for (i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
        sz = sizeof(no);
        (void)VCU__CU(cu, cuCoredumpSetAttributeGlobal, off[i], &no, &sz);
    }
    sz = sizeof(flags);
    (void)VCU__CU(cu, cuCoredumpSetAttributeGlobal, CU_COREDUMP_GENERATION_FLAGS, &flags, &sz);
}

/* How long a packed worker waits for an MPS server that recovers from a
 * fault: it takes new clients once every client that saw the fault has
 * gone (SHARING-FACTS P20), and the guest processes of those are ending. */
#define VCU__MPS_WAIT_MS 15000

/* Runs call again while the MPS server is not ready, for at most
 * VCU__MPS_WAIT_MS; what it last returned. */
#define vcu__mps_retry(call)                                                        \
    ({                                                                              \
        CUresult r_ = (call);                                                       \
        for (int t_ = 0; r_ == CUDA_ERROR_MPS_SERVER_NOT_READY && t_ < VCU__MPS_WAIT_MS; \
             t_ += 50) {                                                            \
            usleep(50000);                                                          \
            r_ = (call);                                                            \
        }                                                                           \
        r_;                                                                         \
    })

/*
 * Packed mode: a new context on device d running on exactly cu->sms SMs
 * (an execution affinity, which the driver gives only to an MPS client),
 * left current on the calling thread.  A driver that would round the
 * count (to its SM granularity) gets the context destroyed and
 * CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, with the count it gives in *got.
 */
static CUresult vcu__sms_ctx_create(vcu__cuda_t *cu, uint32_t d, unsigned int flags,
                                    CUcontext *out, unsigned int *got)
{
    CUexecAffinityParam ap, q;
    CUctxCreateParams cp;
    CUresult r;

    *got = 0;
    if (cu->fn.cuCtxGetExecAffinity == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    memset(&ap, 0, sizeof(ap));
    memset(&cp, 0, sizeof(cp));
    ap.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
    ap.param.smCount.val = cu->sms;
    cp.execAffinityParams = &ap;
    cp.numExecAffinityParams = 1;
    r = vcu__mps_retry(cu->fn.cuCtxCreate(out, &cp, flags, cu->dev[d]));
    if (r != CUDA_SUCCESS)
        return r;
    memset(&q, 0, sizeof(q));
    r = cu->fn.cuCtxGetExecAffinity(&q, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
    if (r == CUDA_SUCCESS && q.param.smCount.val != cu->sms) {
        *got = q.param.smCount.val;
        r = CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    }
    if (r != CUDA_SUCCESS) {
        cu->fn.cuCtxDestroy(*out);
        *out = NULL;
    }
    return r;
}

/* For vcu__wctx_get(): take the context with whatever flags it has. */
#define VCU__WCTX_ANY_FLAGS (~0u)

/*
 * A context's own GPU memory (cu->ctx_bytes), charged to the account's
 * slot on device d before the driver is asked for the context: 0, or -1
 * past the VM's quota.  Reported as the slot's context part.
 */
static int vcu__ctx_charge(vcu__cuda_t *cu, int slot, uint32_t d)
{
    if (cu->acct == NULL)
        return 0;
    if (vcu__acct_charge(cu->acct, slot, d, cu->ctx_bytes) != 0)
        return -1;
    vcu__acct_set_ctx(cu->acct, slot, d, cu->ctx_bytes);
    return 0;
}

void vcu__ctx_uncharge(vcu__cuda_t *cu, int slot, uint32_t d)
{
    if (cu->acct == NULL)
        return;
    vcu__acct_set_ctx(cu->acct, slot, d, 0);
    vcu__acct_uncharge(cu->acct, slot, d, cu->ctx_bytes);
}

/*
 * Caller holds cu->mu.  A worker's context on device d with one more
 * reference: the device's primary context (isolated mode), or in packed
 * mode the context on the VM's SMs, made at the first reference with
 * these flags (later ones set what cuCtxSetFlags can; VCU__WCTX_ANY_FLAGS
 * sets none).  The first reference charges the context's memory to the
 * worker's slot (CUDA_ERROR_OUT_OF_MEMORY past the VM's quota, nothing
 * made), whoever takes it: the session, or the registration of guest
 * memory.  As a retain, it leaves the calling thread's current context
 * as it was.
 */
static CUresult vcu__wctx_get_locked(vcu__cuda_t *cu, uint32_t d, unsigned int flags,
                                     CUcontext *out)
{
    CUcontext prev = NULL;
    unsigned int got;
    CUresult r;

    if (cu->wrefs[d] == 0 && vcu__ctx_charge(cu, cu->acct_slot, d) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (cu->sms == 0) {
        if (flags != VCU__WCTX_ANY_FLAGS && cu->fn.cuDevicePrimaryCtxSetFlags != NULL)
            cu->fn.cuDevicePrimaryCtxSetFlags(cu->dev[d], flags);
        r = cu->fn.cuDevicePrimaryCtxRetain(out, cu->dev[d]);
        goto out;
    }
    if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(&prev) != CUDA_SUCCESS)
        prev = NULL;
    if (cu->pctx[d] != NULL) {
        if (flags != VCU__WCTX_ANY_FLAGS && cu->fn.cuCtxSetFlags != NULL &&
            cu->fn.cuCtxSetCurrent(cu->pctx[d]) == CUDA_SUCCESS)
            (void)cu->fn.cuCtxSetFlags(flags);
        cu->fn.cuCtxSetCurrent(prev);
        *out = cu->pctx[d];
        r = CUDA_SUCCESS;
        goto out;
    }
    r = vcu__sms_ctx_create(cu, d, flags != VCU__WCTX_ANY_FLAGS ? flags : 0, &cu->pctx[d], &got);
    cu->fn.cuCtxSetCurrent(prev);
    if (r != CUDA_SUCCESS && got != 0)
        fprintf(stderr, "vcu: sms=%u: the driver gives %u SMs on host GPU %d, not %u\n",
                cu->sms, got, cu->host_ordinal[d], cu->sms);
    if (r == CUDA_SUCCESS)
        *out = cu->pctx[d];
out:
    if (r != CUDA_SUCCESS) {
        if (cu->wrefs[d] == 0)
            vcu__ctx_uncharge(cu, cu->acct_slot, d);
        return r;
    }
    cu->wrefs[d]++;
    return CUDA_SUCCESS;
}

static CUresult vcu__wctx_get(vcu__cuda_t *cu, uint32_t d, unsigned int flags, CUcontext *out)
{
    CUresult r;

    pthread_mutex_lock(&cu->mu);
    r = vcu__wctx_get_locked(cu, d, flags, out);
    pthread_mutex_unlock(&cu->mu);
    return r;
}

/* Caller holds cu->mu.  Drops a reference of vcu__wctx_get_locked(); the
 * last one ends the context (a packed one is destroyed, a primary one
 * released for the last time) and gives its charge back. */
static void vcu__wctx_put_locked(vcu__cuda_t *cu, uint32_t d)
{
    if (cu->wrefs[d] == 0)
        return;
    if (cu->sms == 0)
        cu->fn.cuDevicePrimaryCtxRelease(cu->dev[d]);
    if (--cu->wrefs[d] > 0)
        return;
    if (cu->sms != 0) {
        cu->fn.cuCtxDestroy(cu->pctx[d]);
        cu->pctx[d] = NULL;
    }
    vcu__ctx_uncharge(cu, cu->acct_slot, d);
}

void vcu__wctx_put(vcu__cuda_t *cu, uint32_t d)
{
    pthread_mutex_lock(&cu->mu);
    vcu__wctx_put_locked(cu, d);
    pthread_mutex_unlock(&cu->mu);
}

/*
 * A worker's check of its mode, once the devices are known.  Packed: the
 * driver must offer SM-count affinity (an MPS daemon answers) and each
 * device have the SMs; a probe also makes and checks one context per
 * device.  Isolated: the process must not be an MPS client.  0, or
 * VCU_ENODEV with the reason in err.
 */
static int vcu__mode_check(vcu__cuda_t *cu, const vcu_backend_config_t *cfg, char *err,
                           size_t errlen)
{
    const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
    unsigned int d;

    for (d = 0; d < cu->ndev; d++) {
        int aff = 0, mps = 0, sms = 0;

        if (cu->fn.cuDeviceGetExecAffinitySupport == NULL ||
            cu->fn.cuDeviceGetExecAffinitySupport(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT,
                                                  cu->dev[d]) != CUDA_SUCCESS)
            aff = 0;
        if (cu->fn.cuDeviceGetAttribute == NULL ||
            cu->fn.cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, cu->dev[d]) !=
                CUDA_SUCCESS)
            mps = 0;
        if (cu->sms == 0) {
            if (aff != 0 || mps != 0) {
                snprintf(err, errlen, "host GPU %d: this worker is an MPS client (%s), which "
                         "isolated mode never is", cu->host_ordinal[d],
                         pipe != NULL ? pipe : "no pipe directory");
                return VCU_ENODEV;
            }
            continue;
        }
        if (aff == 0) {
            snprintf(err, errlen, "sms=%u (packed mode) needs NVIDIA's MPS control daemon, and "
                     "none answers at %s: start it with CUDA_MPS_PIPE_DIRECTORY=%s "
                     "nvidia-cuda-mps-control -d, or name its directory with mps-pipe",
                     cu->sms, pipe != NULL ? pipe : "?", pipe != NULL ? pipe : "DIR");
            return VCU_ENODEV;
        }
        if (cu->fn.cuDeviceGetAttribute == NULL ||
            cu->fn.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                        cu->dev[d]) != CUDA_SUCCESS || sms <= 0 ||
            cu->sms > (uint32_t)sms) {
            snprintf(err, errlen, "sms=%u: host GPU %d has %d SMs", cu->sms,
                     cu->host_ordinal[d], sms);
            return VCU_ENODEV;
        }
        if (cfg->probe) {
            CUcontext c = NULL, prev = NULL;
            unsigned int got = 0;
            CUresult r;

            if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(&prev) != CUDA_SUCCESS)
                prev = NULL;
            r = vcu__sms_ctx_create(cu, d, 0, &c, &got);
            if (r == CUDA_SUCCESS)
                cu->fn.cuCtxDestroy(c);
            cu->fn.cuCtxSetCurrent(prev);
            if (got != 0) {
                snprintf(err, errlen, "sms=%u: the driver gives %u SMs on host GPU %d, not %u "
                         "(its granularity): use sms=%u", cu->sms, got, cu->host_ordinal[d],
                         cu->sms, got);
                return VCU_ENODEV;
            }
            if (r != CUDA_SUCCESS) {
                snprintf(err, errlen, "sms=%u: a context on %u SMs of host GPU %d: %s",
                         cu->sms, cu->sms, cu->host_ordinal[d], vcu__cu_name(cu, r));
                return VCU_ENODEV;
            }
        }
    }
    return 0;
}

/* Loads the driver at path and resolves its entry points: 0, or
 * VCU_ENODEV with the reason in err. */
static int vcu__cu_load(vcu__cuda_t *cu, const char *path, char *err, size_t errlen)
{
    cu->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (cu->dl == NULL) {
        const char *e = dlerror();

        snprintf(err, errlen, "%s", e != NULL ? e : path);
        return VCU_ENODEV;
    }
    /* Not a CUDA driver at all: said by its entry point, whatever the
     * (generated, alphabetical) table's order. */
    if (dlsym(cu->dl, "cuInit") == NULL) {
        snprintf(err, errlen, "%s: no symbol cuInit", path);
        return VCU_ENODEV;
    }
#define VCU__FN_LOAD(name, req)                                                      \
    *(void **)(&cu->fn.name) = dlsym(cu->dl, VCU__STR(name));                        \
    if (cu->fn.name == NULL && (req)) {                                              \
        snprintf(err, errlen, "%s: no symbol %s", path, VCU__STR(name));             \
        return VCU_ENODEV;                                                           \
    }
    VCU__CU_FUNCS(VCU__FN_LOAD)
#undef VCU__FN_LOAD
#define VCU__GEN_LOAD(name) *(void **)(&cu->gfn.p_##name) = dlsym(cu->dl, #name);
    VCU__GEN_FUNCS(VCU__GEN_LOAD)
#undef VCU__GEN_LOAD
    return 0;
}

/* Initializes the driver, core dumps off, and counts the host's devices
 * (*count): 0, or VCU_ENODEV with the reason in err. */
static int vcu__cu_start(vcu__cuda_t *cu, const vcu_backend_config_t *cfg, int *count,
                         char *err, size_t errlen)
{
    CUresult r;

    r = cfg != NULL && cfg->worker && cfg->sms != 0 ? vcu__mps_retry(cu->fn.cuInit(0))
                                                    : cu->fn.cuInit(0);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cuInit failed: %s (%d)", vcu__cu_name(cu, r), (int)r);
        return VCU_ENODEV;
    }
    vcu__coredump_off(cu);
    cu->fn.cuDriverGetVersion(&cu->driver_version);
    r = cu->fn.cuDeviceGetCount(count);
    if (r != CUDA_SUCCESS || *count <= 0) {
        snprintf(err, errlen, "no CUDA device on the host (%s)",
                 r != CUDA_SUCCESS ? vcu__cu_name(cu, r) : "count 0");
        return VCU_ENODEV;
    }
    return 0;
}

/* Resolves the virtual devices, in order, from the gpus list (count host
 * devices): 0, or a VCU_E* code with the reason in err. */
static int vcu__parse_gpus(vcu__cuda_t *cu, const char *gpus, int count, char *err,
                           size_t errlen)
{
    const char *p;
    CUresult r;
    int rc;

    /* Entries are separated by ',' or ':'.  QEMU's -device parser splits
     * on ',' (a literal one is written ",,"), so "0:1" is the form that
     * needs no escaping; a GPU- UUID has no ':' in it. */
    for (p = gpus;;) {
        const char *q = strpbrk(p, ",:");
        size_t len = q != NULL ? (size_t)(q - p) : strlen(p);
        int ord;
        unsigned int i;

        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        rc = vcu__parse_gpu(cu, p, len, count, &ord, err, errlen);
        if (rc != 0)
            return rc;
        for (i = 0; i < cu->ndev; i++)
            if (cu->host_ordinal[i] == ord) {
                snprintf(err, errlen, "gpus: host GPU %d given twice", ord);
                return VCU_ENODEV;
            }
        if (cu->ndev >= VCU_CU_MAX_DEVICES) {
            snprintf(err, errlen, "gpus: more than %u devices", VCU_CU_MAX_DEVICES);
            return VCU_ENODEV;
        }
        r = cu->fn.cuDeviceGet(&cu->dev[cu->ndev], ord);
        if (r != CUDA_SUCCESS) {
            snprintf(err, errlen, "cuDeviceGet(%d) failed: %s", ord, vcu__cu_name(cu, r));
            return VCU_ENODEV;
        }
        cu->host_ordinal[cu->ndev++] = ord;
        if (q == NULL)
            break;
        p = q + 1;
    }
    return 0;
}

/* Takes the configuration's mode, account and limits, and each device's
 * thread count for the stack limit's charge. */
static void vcu__cfg_apply(vcu__cuda_t *cu, const vcu_backend_config_t *cfg)
{
    const char *e = getenv("VCU_LAUNCH_GRAPHS");
    unsigned int i;

    cu->worker = cfg != NULL && cfg->worker;
    cu->sms = cu->worker ? cfg->sms : 0;
    cu->graphs = cu->fn.cuGraphExecUpdate != NULL && (e == NULL || strcmp(e, "0") != 0);
    cu->acct = cfg != NULL ? cfg->account : NULL;
    cu->sched = cfg != NULL ? cfg->sched : NULL;
    cu->acct_slot = cfg != NULL ? cfg->account_slot : -1;
    cu->ctx_bytes = cfg != NULL && cfg->ctx_bytes != 0 ? cfg->ctx_bytes : VCU_BACKEND_CTX_BYTES;
    if (cfg != NULL && cfg->ipc_dir != NULL &&
        snprintf(cu->ipc_dir, sizeof(cu->ipc_dir), "%s", cfg->ipc_dir) >= (int)sizeof(cu->ipc_dir))
        cu->ipc_dir[0] = '\0';
    cu->keep_fd = cfg != NULL && cfg->keep_fd > 0 ? cfg->keep_fd : -1;
    if (cu->ctx_bytes > VCU__ACCT_MAX)
        cu->ctx_bytes = VCU__ACCT_MAX;
    for (i = 0; i < cu->ndev; i++) {
        int sms = 0, thr = 0;

        if (cu->fn.cuDeviceGetAttribute == NULL ||
            cu->fn.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                        cu->dev[i]) != CUDA_SUCCESS ||
            cu->fn.cuDeviceGetAttribute(&thr, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
                                        cu->dev[i]) != CUDA_SUCCESS ||
            sms <= 0 || thr <= 0)
            cu->stack_threads[i] = VCU__STACK_THREADS_UNKNOWN;
        else
            cu->stack_threads[i] = (uint64_t)sms * (uint64_t)thr;
    }
}

/* A worker's checks (primary contexts, no device reading pageable
 * memory, its mode): 0, or VCU_ENODEV with the reason in err. */
static int vcu__worker_check(vcu__cuda_t *cu, const vcu_backend_config_t *cfg, const char *path,
                             char *err, size_t errlen)
{
    unsigned int i;

    if (!cu->worker)
        return 0;
    if (cu->fn.cuDevicePrimaryCtxRetain == NULL || cu->fn.cuDevicePrimaryCtxRelease == NULL) {
        snprintf(err, errlen, "%s: no primary context entry points", path);
        return VCU_ENODEV;
    }
    /* The worker maps all of the VM's RAM; that must stay out of the
     * reach of the session's kernels, which a device that reads
     * pageable memory (HMM, ATS) would give them. */
    for (i = 0; i < cu->ndev; i++) {
        int v = 0;

        if (cu->fn.cuDeviceGetAttribute != NULL &&
            cu->fn.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
                                        cu->dev[i]) == CUDA_SUCCESS && v != 0) {
            snprintf(err, errlen, "host GPU %d can access pageable host memory (HMM or ATS): "
                     "not supported, guest RAM would be reachable from its kernels",
                     cu->host_ordinal[i]);
            return VCU_ENODEV;
        }
    }
    return vcu__mode_check(cu, cfg, err, errlen);
}

/* Device printf capture and the module cache, where configured: neither
 * is a reason to refuse CUDA. */
static void vcu__extras_open(vcu__cuda_t *cu, const vcu_backend_config_t *cfg)
{
    /* Without it device printf goes to this process's stdout: a warning
     * would only add to it, and nothing else depends on it. */
    cu->capture = cfg != NULL && cfg->capture_printf && vcu__cap_start() == 0;
    /* Without its cache a worker sends whole images, as before: said
     * once, never a reason to refuse CUDA. */
    if (cfg != NULL && cfg->module_cache != NULL && cfg->module_cache[0] != '\0') {
        char mcerr[256];

        if (vcu_modcache_open(cfg->module_cache, cfg->module_cache_bytes, 1, &cu->mc, mcerr,
                              sizeof(mcerr)) != 0)
            fprintf(stderr, "vcu: %s; running without it\n", mcerr);
    }
}

int vcu__cuda_init(const vcu_backend_config_t *cfg, vcu__cuda_t **out, char *err, size_t errlen)
{
    const char *path = cfg != NULL ? cfg->libcuda : NULL;
    const char *gpus = cfg != NULL ? cfg->gpus : NULL;
    vcu__cuda_t *cu;
    int count = 0, rc;

    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    if (path == NULL || path[0] == '\0')
        path = getenv("VCU_LIBCUDA");
    if (path == NULL || path[0] == '\0')
        path = "libcuda.so.1";
    if (gpus == NULL || gpus[0] == '\0')
        gpus = "0";

    cu = calloc(1, sizeof(*cu));
    if (cu == NULL) {
        snprintf(err, errlen, "out of memory");
        return VCU_ENOMEM;
    }
    pthread_mutex_init(&cu->mu, NULL);
    vcu__coredump_env();
    rc = vcu__cu_load(cu, path, err, errlen);
    if (rc != 0)
        goto err_cu;
    rc = vcu__cu_start(cu, cfg, &count, err, errlen);
    if (rc != 0)
        goto err_cu;
    rc = vcu__parse_gpus(cu, gpus, count, err, errlen);
    if (rc != 0)
        goto err_cu;
    vcu__cfg_apply(cu, cfg);
    rc = vcu__worker_check(cu, cfg, path, err, errlen);
    if (rc != 0)
        goto err_cu;
    vcu__extras_open(cu, cfg);
    *out = cu;
    return 0;

err_cu:
    /* The driver is left loaded, as vcu__cuda_fini() leaves it: cuInit
     * may have started driver threads. */
    pthread_mutex_destroy(&cu->mu);
    free(cu);
    return rc;
}

/* What vcu__ram_enter() changed on the calling thread. */
typedef struct vcu__ram_scope_s {
    CUcontext prev;
    CUstreamCaptureMode mode;
    bool relaxed;
} vcu__ram_scope_t;

/*
 * Makes the RAM context current on the calling thread, keeping what was
 * current for vcu__ram_leave(), and the thread's capture mode RELAXED: a
 * registration is the worker's own doing, and the driver refuses it (and
 * invalidates the capture) while a guest's stream captures in GLOBAL mode,
 * as when a guest's page-locked memory is first used inside a capture
 * (driver 580, tests/cuda/capture_copy in a guest).
 */
static CUresult vcu__ram_enter(vcu__cuda_t *cu, vcu__ram_scope_t *sc)
{
    sc->prev = NULL;
    if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(&sc->prev) != CUDA_SUCCESS)
        sc->prev = NULL;
    sc->mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    sc->relaxed = cu->fn.cuThreadExchangeStreamCaptureMode != NULL &&
                  cu->fn.cuThreadExchangeStreamCaptureMode(&sc->mode) == CUDA_SUCCESS;
    return cu->fn.cuCtxSetCurrent(cu->ram_ctx);
}

static void vcu__ram_leave(vcu__cuda_t *cu, vcu__ram_scope_t *sc)
{
    cu->fn.cuCtxSetCurrent(sc->prev);
    if (sc->relaxed)
        cu->fn.cuThreadExchangeStreamCaptureMode(&sc->mode);
}

int vcu__cuda_has_modcache(const vcu__cuda_t *cu)
{
    return cu->mc != NULL;
}

void vcu__cuda_fini(vcu__cuda_t *cu)
{
    vcu__ram_t *r, *n;

    if (cu == NULL)
        return;
    vcu_modcache_free(cu->mc);
    if (cu->ram_ctx != NULL) {
        vcu__ram_scope_t sc;

        if (vcu__ram_enter(cu, &sc) == CUDA_SUCCESS)
            for (r = cu->ram; r != NULL; r = r->next)
                VCU__CU(cu, cuMemHostUnregister, r->hva);
        if (sc.prev == cu->ram_ctx)
            sc.prev = NULL;
        vcu__ram_leave(cu, &sc);
        if (cu->worker)
            vcu__wctx_put(cu, 0);
        else
            cu->fn.cuCtxDestroy(cu->ram_ctx);
    }
    for (r = cu->ram; r != NULL; r = n) {
        n = r->next;
        free(r);
    }
    /* No dlclose(): the driver keeps threads of its own that may still be
     * inside it, and unloading it loses what it allocated (a leak report
     * under LeakSanitizer).  dlopen() counts references, so a backend
     * created again reuses the loaded library. */
    if (cu->capture)
        vcu__cap_stop();
    if (cu->keep_fd >= 0)
        close(cu->keep_fd);
    pthread_mutex_destroy(&cu->mu);
    free(cu);
}

/* Caller holds cu->mu.  The registration of exactly [hva, hva+len). */
static vcu__ram_t **vcu__ram_find_locked(vcu__cuda_t *cu, void *hva, size_t len)
{
    vcu__ram_t **pp;

    for (pp = &cu->ram; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->hva == hva && (*pp)->len == len)
            return pp;
    return NULL;
}

int vcu__cuda_add_ram(vcu__cuda_t *cu, void *hva, size_t len)
{
    vcu__ram_t *ram, **pp;
    CUresult r = CUDA_SUCCESS;
    int rc;

    if (cu == NULL || hva == NULL || len == 0)
        return VCU_EINVAL;
    ram = malloc(sizeof(*ram));
    if (ram == NULL)
        return VCU_ENOMEM;
    pthread_mutex_lock(&cu->mu);
    pp = vcu__ram_find_locked(cu, hva, len);
    if (pp != NULL) {
        /* The same RAM seen twice (an alias): one registration. */
        (*pp)->refs++;
        pthread_mutex_unlock(&cu->mu);
        free(ram);
        return 0;
    }
    if (cu->ram_ctx == NULL) {
        CUcontext prev = NULL;

        /* Created current on this thread; the caller's thread is then left
         * as it was. */
        if (cu->fn.cuCtxGetCurrent != NULL && cu->fn.cuCtxGetCurrent(&prev) != CUDA_SUCCESS)
            prev = NULL;
        if (cu->worker)
            r = vcu__wctx_get_locked(cu, 0, VCU__WCTX_ANY_FLAGS, &cu->ram_ctx);
        else
            r = cu->fn.cuCtxCreate(&cu->ram_ctx, NULL, 0, cu->dev[0]);
        if (r != CUDA_SUCCESS)
            cu->ram_ctx = NULL;
        cu->fn.cuCtxSetCurrent(prev);
    }
    if (r == CUDA_SUCCESS) {
        vcu__ram_scope_t sc;

        r = vcu__ram_enter(cu, &sc);
        if (r == CUDA_SUCCESS)
            /* Portable: pinned for every context, the sessions' included;
             * device-mapped: kernels may reach guest memory directly
             * (CU_HOST_DEVICE_POINTER). */
            r = VCU__CU(cu, cuMemHostRegister, hva, len,
                        CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
        vcu__ram_leave(cu, &sc);
    }
    rc = vcu__cu_err(r);
    if (r == CUDA_SUCCESS) {
        ram->hva = hva;
        ram->len = len;
        ram->refs = 1;
        ram->next = cu->ram;
        cu->ram = ram;
        ram = NULL;
    }
    pthread_mutex_unlock(&cu->mu);
    free(ram);
    return rc;
}

int vcu__cuda_remove_ram(vcu__cuda_t *cu, void *hva, size_t len)
{
    vcu__ram_t **pp, *ram = NULL;
    CUresult r = CUDA_SUCCESS;

    if (cu == NULL || hva == NULL || len == 0)
        return VCU_EINVAL;
    pthread_mutex_lock(&cu->mu);
    pp = vcu__ram_find_locked(cu, hva, len);
    if (pp == NULL) {
        pthread_mutex_unlock(&cu->mu);
        return VCU_EINVAL;
    }
    if (--(*pp)->refs == 0) {
        ram = *pp;
        *pp = ram->next;
        vcu__ram_scope_t sc;

        r = vcu__ram_enter(cu, &sc);
        if (r == CUDA_SUCCESS)
            r = VCU__CU(cu, cuMemHostUnregister, hva);
        vcu__ram_leave(cu, &sc);
    }
    pthread_mutex_unlock(&cu->mu);
    free(ram);
    return vcu__cu_err(r);
}

int vcu__cuda_host_charge(vcu__cuda_t *cu, uint64_t n)
{
    if (cu->acct == NULL || cu->acct_slot < 0 || n == 0)
        return 0;
    return vcu__acct_host_charge(cu->acct, cu->acct_slot, n) == 0 ? 0 : VCU_ENOMEM;
}

void vcu__cuda_host_uncharge(vcu__cuda_t *cu, uint64_t n)
{
    if (cu->acct != NULL && cu->acct_slot >= 0)
        vcu__acct_host_uncharge(cu->acct, cu->acct_slot, n);
}

/* ---- sessions ----------------------------------------------------------- */

int vcu__cuda_sess_new(vcu__cuda_t *cu, uint64_t id, vcu__cuda_sess_t **out)
{
    vcu__cuda_sess_t *cs;

    *out = NULL;
    if (cu == NULL)
        return VCU_ENODEV;
    cs = calloc(1, sizeof(*cs));
    if (cs == NULL)
        return VCU_ENOMEM;
    cs->cu = cu;
    cs->aslot = -1;
    if (cu->acct != NULL && cu->acct_slot >= 0) {
        cs->aslot = cu->acct_slot;
    } else if (cu->acct != NULL) {
        cs->aslot = vcu__acct_claim(cu->acct, id);
        cs->aowned = cs->aslot >= 0;
        if (cs->aslot < 0) {
            free(cs);
            return VCU_EBUSY;
        }
    }
    cs->mig = vcu__mig_new();
    if (cs->mig == NULL) {
        if (cs->aowned)
            vcu__acct_release(cu->acct, cs->aslot);
        free(cs);
        return VCU_ENOMEM;
    }
    vcu__htab_init(&cs->tab);
    vcu__pset_init(&cs->allocs);
    vcu__pset_init(&cs->ctx_allocs);
    vcu__pset_init(&cs->gallocs);
    vcu__pset_init(&cs->conds);
    vcu__pset_init(&cs->texs);
    vcu__pset_init(&cs->surfs);
    pthread_mutex_init(&cs->hostmu, NULL);
    pthread_mutex_init(&cs->gate.mu, NULL);
    pthread_cond_init(&cs->gate.cv, NULL);
    *out = cs;
    return 0;
}

/* Creates device d's context (vcu__ctx(): d valid, no context yet). */
CUresult vcu__ctx_open(vcu__cuda_sess_t *cs, uint32_t d)
{
    vcu__cuda_t *cu = cs->cu;
    CUresult r;

    if (cu->worker) {
        /* The process is the session's alone: its primary context is
         * the session's, as a native program's is (packed mode: the
         * one on the VM's SMs).  Charged there, once per process. */
        r = vcu__wctx_get(cu, d, cs->ctx_flags[d], &cs->ctx[d]);
    } else if (vcu__ctx_charge(cu, cs->aslot, d) != 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        r = cu->fn.cuCtxCreate(&cs->ctx[d], NULL, cs->ctx_flags[d], cu->dev[d]);
        if (r != CUDA_SUCCESS)
            vcu__ctx_uncharge(cu, cs->aslot, d);
    }
    if (r != CUDA_SUCCESS) {
        cs->ctx[d] = NULL;
        return r;
    }
    if (vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS ||
        VCU__CU(cu, cuStreamCreateWithPriority, &cs->mstream[d], CU_STREAM_NON_BLOCKING, 0) !=
            CUDA_SUCCESS)
        cs->mstream[d] = NULL;      /* no pass before the pause then */
    return r;
}

/* ---- opcode execution (its types and helpers: cuda_int.h) ------------- */

/* The size of each opcode's reply struct, from the one map. */
static size_t vcu__resp_size(uint32_t op)
{
    switch (op) {
#define VCU__RESP_SZ(name, num, rq, rp) case VCU_OP_##name: return sizeof(struct rp);
        VCU_OP_MAP(VCU__RESP_SZ)
#undef VCU__RESP_SZ
    }
    return 0;
}

/* The capture interaction mode this thread was given here. */
__thread CUstreamCaptureMode vcu__thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/*
 * New handle for a fresh CUDA object; NULL (result OUT_OF_MEMORY) over
 * quota or budget.  The table's growth is counted in the budget for the
 * session's life (it never shrinks).  Entries may move: pointers to
 * other entries are stale after it.
 */
vcu__hent_t *vcu__new(vcu__op_t *o, uint8_t type, uint64_t *h)
{
    vcu__cuda_sess_t *cs = o->cs;
    size_t grow = vcu__htab_grow_bytes(&cs->tab);
    vcu__hent_t *e = NULL;

    *h = 0;
    if (vcu__mem_take(cs, grow) == 0) {
        *h = vcu__htab_add(&cs->tab, type, vcu__dev_of(o), &e);
        if (*h == 0)
            vcu__mem_give(cs, grow);
        else
            e->ctx = vcu__ctx_of(o);
    }
    if (*h == 0) {
        o->res = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    return e;
}

/*
 * Makes the request wait, without blocking, for the work issued on st so
 * far (device of the request, current).  -1 where it cannot: the caller
 * synchronizes instead.
 */
int vcu__park_stream(vcu__op_t *o, CUstream st)
{
    if (vcu__capturing(o->cu, st))
        return -1;
    if (o->wait == NULL && (o->wait = vcu__wait_new(o->cs)) == NULL)
        return -1;
    if (vcu__wait_record(o->cs, o->wait, vcu__dev_of(o), st) != CUDA_SUCCESS) {
        if (o->wait->nev == 0 && o->wait->gev == NULL) {
            vcu__wait_free(o->cs, o->wait);
            o->wait = NULL;
        }
        return -1;
    }
    return 0;
}

/* --- the generated calls (CU_CALL) --- */

/* A handle argument of a generated call: the session's, of that type and
 * made on the request's device; else CUDA_ERROR_INVALID_HANDLE. */
static vcu__hent_t *vcu__gen_get(vcu__op_t *o, uint64_t h, uint8_t type)
{
    vcu__hent_t *e = vcu__htab_get(&o->cs->tab, h, type);

    if (e == NULL || e->dev != vcu__dev_of(o)) {
        o->res = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    return e;
}

/* A stream argument: a default stream, or a stream handle as above. */
static int vcu__gen_stream(vcu__op_t *o, uint64_t h, CUstream *out)
{
    vcu__hent_t *e;

    if (h == VCU_CU_STREAM_LEGACY || h == VCU_CU_STREAM_PER_THREAD)
        return vcu__stream(o, h, out);
    e = vcu__gen_get(o, h, VCU__H_STREAM);
    if (e == NULL)
        return -1;
    *out = e->u.st;
    vcu__stream_seen(o, *out);
    return 0;
}

/* A device argument: a virtual ordinal of the VM's, as the host's device. */
static int vcu__gen_dev(vcu__op_t *o, uint64_t v, CUdevice *out)
{
    if (v >= o->cu->ndev) {
        o->res = CUDA_ERROR_INVALID_DEVICE;
        return -1;
    }
    *out = o->cu->dev[v];
    return 0;
}

/* A generated call's driver function; a missing one: not supported. */
#define VCU__GEN_CU(cu, name, ...)                                                     \
    ((cu)->gfn.p_##name != NULL ? (cu)->gfn.p_##name(__VA_ARGS__) : CUDA_ERROR_NOT_SUPPORTED)

/* The call's reply struct after its vcu_cu_resp (which exec writes). */
static void vcu__gen_reply(vcu__op_t *o, const void *rp, size_t len)
{
    memcpy(o->out + sizeof(struct vcu_cu_resp), (const unsigned char *)rp + sizeof(struct vcu_cu_resp),
           len - sizeof(struct vcu_cu_resp));
    o->len = len;
}

#include "cuda_calls.inc"

/* --- dispatch --- */

/* Transport opcodes are the core's; they never reach the executor. */
static uint32_t vcu__op_transport(vcu__op_t *o)
{
    (void)o;
    return VCU_S_ENOTSUP;
}
#define vcu__op_SESSION_OPEN vcu__op_transport
#define vcu__op_SESSION_CLOSE vcu__op_transport
#define vcu__op_ECHO vcu__op_transport
#define vcu__op_SESSION_FENCE vcu__op_transport
/* Run by vcu__batch before dispatch. */
#define vcu__op_CU_BATCH vcu__op_transport

/* Run inline by exec (vcu__cb_wait, vcu__cb_done) before dispatch. */
static uint32_t vcu__op_inline(vcu__op_t *o)
{
    (void)o;
    return VCU_S_EINVAL;            /* never reached: exec routes them first */
}
#define vcu__op_CU_CALLBACK_WAIT vcu__op_inline
#define vcu__op_CU_CALLBACK_DONE vcu__op_inline

static uint32_t vcu__dispatch(vcu__op_t *o, uint32_t op)
{
    switch (op) {
#define VCU__OP_CASE(name, num, rq, rp) case VCU_OP_##name: return vcu__op_##name(o);
        VCU_OP_MAP(VCU__OP_CASE)
#undef VCU__OP_CASE
    }
    return VCU_S_ENOTSUP;
}

/* A GPU fault that ends the context (the account counts sessions that
 * saw one: CU_SLICE_INFO's faults). */
static bool vcu__sticky(CUresult r)
{
    switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
        return true;
    default:
        return false;
    }
}

/* The checks of a request before anything of it runs (rpsz: its reply
 * struct's size): VCU_S_OK, or the status it gets. */
static uint32_t vcu__exec_check(const vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                                const void *payload, const vcu_segment_t *segs,
                                unsigned int nsegs, size_t out_cap, size_t rpsz)
{
    uint32_t op = h->opcode;

    if (cs == NULL)
        return VCU_S_ENOTSUP;
    if (op < 0x0100 || rpsz < sizeof(struct vcu_cu_resp))
        return VCU_S_ENOTSUP;
    if (h->payload_len < vcu__req_size(op) || payload == NULL || (nsegs > 0 && segs == NULL))
        return VCU_S_EINVAL;
    /* A parked request is completed later into req->resp, which must be
     * the guest's own buffer: an async request's reply is redirected by
     * the core into its queue item, freed once exec returns.  An async
     * WAIT has no reader anyway (a cookie handed to it would be lost). */
    if (op == VCU_OP_CU_CALLBACK_WAIT && (h->flags & VCU_REQ_F_ASYNC) != 0)
        return VCU_S_EINVAL;
    if (out_cap < rpsz)
        return VCU_S_ERANGE;
    return VCU_S_OK;
}

/* Sets o up for the request; handlers write only their opcode's reply
 * struct (rpsz bytes). */
static void vcu__op_init(vcu__op_t *o, vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h,
                         const void *payload, const vcu_segment_t *segs, unsigned int nsegs,
                         void *out, size_t out_cap, size_t rpsz)
{
    memset(o, 0, offsetof(vcu__op_t, rb));
    memset(&o->rb, 0, rpsz);
    o->cs = cs;
    o->cu = cs->cu;
    o->h = h;
    o->p = payload;
    o->plen = h->payload_len;
    o->segs = segs;
    o->nsegs = nsegs;
    o->out = out;
    o->cap = out_cap;
    o->len = rpsz;
    o->res = CUDA_SUCCESS;
}

/* Runs the request's handler, as a printf session's call where it is one. */
static uint32_t vcu__exec_run(vcu__cuda_sess_t *cs, vcu__op_t *o, uint32_t op,
                              const void *payload)
{
    uint32_t st;

    if (cs->out != NULL && vcu_op_flushes_printf(op, payload)) {
        /* A printf session's synchronizing call blocks until its GPU
         * work is done, and the output the driver wrote meanwhile is the
         * session's (CU_TAKE_OUTPUT). */
        vcu__out_sync_begin(cs->out);
        st = vcu__dispatch(o, op);
        if (o->wait != NULL)
            vcu__wait_block(cs, o->wait);
        vcu__out_sync_end(cs->out);
    } else {
        if (cs->out != NULL && (op == VCU_OP_CU_LAUNCH || op == VCU_OP_CU_LAUNCH_EX ||
                                 op == VCU_OP_CU_GRAPH_LAUNCH))
            vcu__out_touch(cs->out);
        st = vcu__dispatch(o, op);
    }
    return st;
}

/* Writes the reply of a request that ran with status st into out. */
static void vcu__exec_reply(vcu__cuda_sess_t *cs, vcu__op_t *o, uint32_t op, int async,
                            uint32_t st, void *out, size_t *out_len, size_t rpsz)
{
    /* An async request has no reader: its first failure waits for the
     * next reply.  A malformed one counts as CUDA_ERROR_INVALID_VALUE. */
    if (async || (op != VCU_OP_CU_GET_DEFERRED_ERROR && op != VCU_OP_CU_TAKE_OUTPUT))
        /* TAKE_OUTPUT: the guest library's own, after the program's call. */
        o->rb.r.deferred = vcu__deferred(
            cs, async, st != VCU_S_OK ? (uint32_t)CUDA_ERROR_INVALID_VALUE : (uint32_t)o->res);
    if (st != VCU_S_OK) {
        /* Still a vcu_cu_resp, for a guest that reads it regardless. */
        struct vcu_cu_resp r = { (uint32_t)CUDA_ERROR_INVALID_VALUE, o->rb.r.deferred };

        memcpy(out, &r, sizeof(r));
        *out_len = sizeof(r);
    } else {
        o->rb.r.result = (uint32_t)o->res;
        memcpy(out, &o->rb, rpsz);
        *out_len = o->len;
    }
}

uint32_t vcu__cuda_exec(vcu__cuda_sess_t *cs, const struct vcu_req_hdr *h, const void *payload,
                        const vcu_segment_t *segs, unsigned int nsegs, void *out, size_t out_cap,
                        size_t *out_len, vcu_request_t *req, vcu__cuda_wait_t **wait)
{
    uint32_t op = h->opcode, st;
    size_t rpsz = vcu__resp_size(op);
    int async = (h->flags & VCU_REQ_F_ASYNC) != 0;
    vcu__op_t *o;

    *out_len = 0;
    *wait = NULL;
    st = vcu__exec_check(cs, h, payload, segs, nsegs, out_cap, rpsz);
    if (st != VCU_S_OK)
        return st;
    if (op == VCU_OP_CU_CALLBACK_WAIT)
        return vcu__cb_wait(cs, out, out_cap, out_len, req);
    if (op == VCU_OP_CU_CALLBACK_DONE)
        return vcu__cb_done(cs, payload, out, out_len);
    if (op == VCU_OP_CU_BATCH)
        return vcu__batch(cs, h, payload, nsegs, out, out_len);

    if ((o = vcu__op_scratch(cs)) == NULL)
        return VCU_S_ENOMEM;
    vcu__op_init(o, cs, h, payload, segs, nsegs, out, out_cap, rpsz);
    st = vcu__exec_run(cs, o, op, payload);
    if (cs->cu->acct != NULL && (vcu__sticky(o->res) || vcu__sticky((CUresult)cs->deferred)))
        vcu__acct_fault(cs->cu->acct, cs->aslot);
    vcu__exec_reply(cs, o, op, async, st, out, out_len, rpsz);
    if (st == VCU_S_OK)
        vcu__mig_note(cs, h, payload, out, *out_len, o->captured);
    if (o->wait != NULL) {
        /* Replied when the GPU work it issued is done. */
        o->wait->out_len = *out_len;
        o->wait->async = async;
        o->wait->status = st;
        *wait = o->wait;
        return VCU__WAITING;
    }
    return st;
}

/* --- the session's host budget --- */

/* Takes n bytes of the session's budget: 0, or -1 (nothing taken) past
 * the budget or the VM's host quota. */
int vcu__mem_take(vcu__cuda_sess_t *cs, size_t n)
{
    uint64_t want, grow;

    pthread_mutex_lock(&cs->hostmu);
    if (n > VCU__SESS_HOST_BUDGET - cs->hostmem) {
        pthread_mutex_unlock(&cs->hostmu);
        return -1;
    }
    want = cs->hostmem + n;
    if (want > cs->hostres) {
        grow = (want - cs->hostres + VCU__HOST_GRAIN - 1) & ~(VCU__HOST_GRAIN - 1);
        if (vcu__host_charge(cs, grow) != 0) {
            pthread_mutex_unlock(&cs->hostmu);
            return -1;
        }
        cs->hostres += grow;
    }
    cs->hostmem = want;
    pthread_mutex_unlock(&cs->hostmu);
    return 0;
}

void vcu__mem_give(vcu__cuda_sess_t *cs, size_t n)
{
    uint64_t keep;

    pthread_mutex_lock(&cs->hostmu);
    cs->hostmem = n < cs->hostmem ? cs->hostmem - n : 0;
    keep = (cs->hostmem + VCU__HOST_GRAIN - 1) & ~(VCU__HOST_GRAIN - 1);
    if (cs->hostres >= keep + 2 * VCU__HOST_GRAIN) {
        vcu__host_uncharge(cs, cs->hostres - keep - VCU__HOST_GRAIN);
        cs->hostres = keep + VCU__HOST_GRAIN;
    }
    pthread_mutex_unlock(&cs->hostmu);
}
