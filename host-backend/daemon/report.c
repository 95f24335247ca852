/*
 * The operator's surfaces (docs/design.md, "The host's view"): the
 * control socket (one JSON object per line each way) and the Prometheus
 * metrics endpoint (HTTP GET /metrics).  Both read the same state the VMs'
 * workers write (their accounts, the share group) and the daemon's own
 * records; the figures a worker wrote are reported as found, each sum
 * saturating.  What a node agent (a Kubernetes DRA driver, a cluster
 * scheduler) needs: the GPUs with what is left of them, the VMs' slices,
 * and a way to change a running VM's weight, cap and quota.
 *
 * Control requests:
 *   {"cmd":"status"}
 *   {"cmd":"list-gpus"}
 *   {"cmd":"list-vms"}
 *   {"cmd":"set-vm","vm":"NAME or ID","mem_quota":BYTES,"compute_share":N,
 *    "compute_cap":PERCENT}          (any of the three)
 * Each answer is {"ok":true,...} or {"ok":false,"error":"..."}.
 *
 * GPU figures come from NVML (libnvidia-ml.so.1), loaded by the daemon
 * for monitoring only (it never loads the CUDA driver); without it the
 * GPU list holds what the VMs name, without memory figures.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vcu_daemon.h"
#include "vcu_seccomp.h"

#define VCU__OP_MAX_OUT (4u << 20)

/* ---- NVML, for the GPUs' figures ----------------------------------------- */

typedef struct {
    unsigned long long total, free, used;
} vcu__nvml_mem_t;

typedef struct {
    unsigned int pid;
    unsigned long long used;
    unsigned int gi, ci;
} vcu__nvml_proc_t;

static struct {
    int tried, ok;
    int (*count)(unsigned int *);
    int (*handle)(unsigned int, void **);
    int (*mem)(void *, vcu__nvml_mem_t *);
    int (*uuid)(void *, char *, unsigned int);
    int (*name)(void *, char *, unsigned int);
    int (*procs)(void *, unsigned int *, vcu__nvml_proc_t *);
} vcu__nvml;

static int vcu__nvml_load(void)
{
    void *h;
    int (*init)(void);

    if (vcu__nvml.tried)
        return vcu__nvml.ok;
    vcu__nvml.tried = 1;
    h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return 0;
    init = (int (*)(void))dlsym(h, "nvmlInit_v2");
    vcu__nvml.count = (int (*)(unsigned int *))dlsym(h, "nvmlDeviceGetCount_v2");
    vcu__nvml.handle = (int (*)(unsigned int, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    vcu__nvml.mem = (int (*)(void *, vcu__nvml_mem_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    vcu__nvml.uuid = (int (*)(void *, char *, unsigned int))dlsym(h, "nvmlDeviceGetUUID");
    vcu__nvml.name = (int (*)(void *, char *, unsigned int))dlsym(h, "nvmlDeviceGetName");
    vcu__nvml.procs = (int (*)(void *, unsigned int *, vcu__nvml_proc_t *))dlsym(
        h, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (init == NULL || vcu__nvml.count == NULL || vcu__nvml.handle == NULL ||
        vcu__nvml.mem == NULL || vcu__nvml.uuid == NULL || vcu__nvml.name == NULL ||
        init() != 0)
        return 0;
    vcu__nvml.ok = 1;
    vcu_dmn_log("NVML loaded: GPU figures in the metrics and list-gpus");
    return 1;
}

typedef struct {
    unsigned int index;
    char uuid[96];
    char name[96];
    unsigned long long total, used, free;
    int have_mem;
} vcu__gpu_t;

/* The host's GPUs (NVML), at most cap; how many. */
static unsigned int vcu__gpus(vcu__gpu_t *g, unsigned int cap)
{
    unsigned int n = 0, i;

    if (!vcu__nvml_load() || vcu__nvml.count(&n) != 0)
        return 0;
    if (n > cap)
        n = cap;
    for (i = 0; i < n; i++) {
        void *h;
        vcu__nvml_mem_t m;

        memset(&g[i], 0, sizeof(g[i]));
        g[i].index = i;
        if (vcu__nvml.handle(i, &h) != 0)
            continue;
        vcu__nvml.uuid(h, g[i].uuid, sizeof(g[i].uuid));
        vcu__nvml.name(h, g[i].name, sizeof(g[i].name));
        if (vcu__nvml.mem(h, &m) == 0) {
            g[i].total = m.total;
            g[i].used = m.used;
            g[i].free = m.free;
            g[i].have_mem = 1;
        }
    }
    return n;
}

/* GPU memory NVML sees the VM's workers hold, on every GPU. */
static unsigned long long vcu__nvml_vm_bytes(const vcu_vm_t *vm, int *ok)
{
    static vcu__nvml_proc_t procs[1024];
    unsigned long long sum = 0;
    unsigned int n, i, k;

    *ok = 0;
    if (!vcu__nvml_load() || vcu__nvml.procs == NULL || vcu__nvml.count(&n) != 0)
        return 0;
    for (i = 0; i < n; i++) {
        unsigned int np = sizeof(procs) / sizeof(procs[0]);
        void *h;

        if (vcu__nvml.handle(i, &h) != 0 || vcu__nvml.procs(h, &np, procs) != 0)
            continue;
        for (k = 0; k < np; k++) {
            const vcu_sess_t *s;

            for (s = vm->sessions; s != NULL; s = s->next)
                if (s->pid > 0 && (unsigned int)s->prog_pid == procs[k].pid)
                    sum += procs[k].used;
        }
    }
    *ok = 1;
    return sum;
}

/* Whether the VM's GPU list names GPU g (by index or UUID). */
static int vcu__vm_on_gpu(const vcu_vm_t *vm, const vcu__gpu_t *g)
{
    const char *p = vm->gpus;
    char idx[16];

    snprintf(idx, sizeof(idx), "%u", g->index);
    while (*p != '\0') {
        size_t n = strcspn(p, ":,");

        if ((n == strlen(idx) && memcmp(p, idx, n) == 0) ||
            (g->uuid[0] != '\0' && n == strlen(g->uuid) && memcmp(p, g->uuid, n) == 0))
            return 1;
        p += n;
        if (*p != '\0')
            p++;
    }
    return 0;
}

/* ---- output ---------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} vcu__sb_t;

static void vcu__sb_printf(vcu__sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void vcu__sb_printf(vcu__sb_t *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->oom)
        return;
    for (;;) {
        size_t room = b->cap - b->len;

        va_start(ap, fmt);
        n = vsnprintf(b->buf ? b->buf + b->len : NULL, b->buf ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->buf != NULL && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        {
            size_t ncap = b->cap ? b->cap * 2 : 4096;
            char *nb;

            while (ncap < b->len + (size_t)n + 1)
                ncap *= 2;
            if (ncap > VCU__OP_MAX_OUT || (nb = realloc(b->buf, ncap)) == NULL) {
                b->oom = 1;
                return;
            }
            b->buf = nb;
            b->cap = ncap;
        }
    }
}

/* s as a JSON string body (quotes not included). */
static void vcu__sb_json_str(vcu__sb_t *b, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            vcu__sb_printf(b, "\\%c", c);
        else if (c < 0x20)
            vcu__sb_printf(b, "\\u%04x", c);
        else
            vcu__sb_printf(b, "%c", c);
    }
}

static uint64_t vcu__sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

typedef struct {
    uint64_t used, ctx, host;
    uint64_t dev_used[VCU_ACCT_DEVS];
    uint64_t faults;
} vcu__vm_fig_t;

static void vcu__vm_figures(const vcu_vm_t *vm, vcu__vm_fig_t *f)
{
    unsigned int dv;

    memset(f, 0, sizeof(*f));
    if (vm->acct == NULL)
        return;
    for (dv = 0; dv < VCU_ACCT_DEVS; dv++) {
        f->dev_used[dv] = vcu__acct_used(vm->acct, dv);
        f->used = vcu__sat_add(f->used, f->dev_used[dv]);
        f->ctx = vcu__sat_add(f->ctx, vcu__acct_ctx(vm->acct, dv));
    }
    f->host = vcu__acct_host_used(vm->acct);
    f->faults = atomic_load(&vm->acct->hdr->faults);
}

static const char *vcu__seccomp_name(int m)
{
    return m == VCU_SECCOMP_ON ? "on" : m == VCU_SECCOMP_LOG ? "log" : "off";
}

/* ---- metrics --------------------------------------------------------------- */

/* One ready VM's series, labelled with its name and id. */
static void vcu__metrics_vm(vcu__sb_t *b, const vcu_vm_t *vm)
{
    vcu__vm_fig_t f;
    char lab[160];
    int nv_ok;
    unsigned long long nv;
    unsigned int i;

    vcu__vm_figures(vm, &f);
    snprintf(lab, sizeof(lab), "vm=\"%s\",id=\"%llu\"", vm->name, (unsigned long long)vm->id);
    vcu__sb_printf(b, "vcu_vm_mem_quota_bytes{%s} %llu\n", lab,
                   (unsigned long long)atomic_load(&vm->policy->mem_quota));
    vcu__sb_printf(b, "vcu_vm_mem_used_bytes{%s} %llu\n", lab, (unsigned long long)f.used);
    for (i = 0; i < VCU_ACCT_DEVS; i++)
        if (f.dev_used[i] != 0)
            vcu__sb_printf(b, "vcu_vm_mem_used_bytes{%s,device=\"%u\"} %llu\n", lab, i,
                           (unsigned long long)f.dev_used[i]);
    vcu__sb_printf(b, "vcu_vm_ctx_bytes{%s} %llu\n", lab, (unsigned long long)f.ctx);
    vcu__sb_printf(b, "vcu_vm_host_quota_bytes{%s} %llu\n", lab,
                   (unsigned long long)atomic_load(&vm->policy->host_quota));
    vcu__sb_printf(b, "vcu_vm_host_used_bytes{%s} %llu\n", lab, (unsigned long long)f.host);
    nv = vcu__nvml_vm_bytes(vm, &nv_ok);
    if (nv_ok)
        vcu__sb_printf(b, "vcu_vm_nvml_mem_bytes{%s} %llu\n", lab, nv);
    vcu__sb_printf(b, "vcu_vm_sessions{%s} %u\n", lab, vm->nsessions);
    vcu__sb_printf(b, "vcu_vm_max_sessions{%s} %u\n", lab,
                   atomic_load(&vm->policy->max_sessions));
    vcu__sb_printf(b, "vcu_vm_sessions_refused_total{%s} %llu\n", lab,
                   (unsigned long long)vm->refused);
    vcu__sb_printf(b, "vcu_vm_compute_share{%s} %u\n", lab,
                   atomic_load(&vm->policy->compute_share));
    vcu__sb_printf(b, "vcu_vm_compute_cap{%s} %u\n", lab, atomic_load(&vm->policy->compute_cap));
    vcu__sb_printf(b, "vcu_vm_gpu_seconds_total{%s} %.6f\n", lab,
                   (double)vcu_vm_gpu_ns(vm) / 1e9);
    vcu__sb_printf(b, "vcu_vm_faults_total{%s} %llu\n", lab, (unsigned long long)f.faults);
    vcu__sb_printf(b, "vcu_vm_sms{%s} %u\n", lab, vm->sms);
}

/* GPU i's series: its memory as NVML sees it, the quotas and share
 * weights of the ready VMs on it. */
static void vcu__metrics_gpu(const vcu_dmn_t *d, vcu__sb_t *b, const vcu__gpu_t *gpu,
                             unsigned int i)
{
    uint64_t committed = 0, weights = 0;
    const vcu_vm_t *vm;

    for (vm = d->vms; vm != NULL; vm = vm->next)
        if (vm->state == VCU_VM_READY && vcu__vm_on_gpu(vm, gpu)) {
            committed = vcu__sat_add(committed, atomic_load(&vm->policy->mem_quota));
            weights += atomic_load(&vm->policy->compute_share);
        }
    if (gpu->have_mem) {
        vcu__sb_printf(b, "vcu_gpu_memory_total_bytes{gpu=\"%u\",uuid=\"%s\"} %llu\n", i,
                       gpu->uuid, gpu->total);
        vcu__sb_printf(b, "vcu_gpu_memory_used_bytes{gpu=\"%u\",uuid=\"%s\"} %llu\n", i,
                       gpu->uuid, gpu->used);
    }
    vcu__sb_printf(b, "vcu_gpu_committed_bytes{gpu=\"%u\",uuid=\"%s\"} %llu\n", i, gpu->uuid,
                   (unsigned long long)committed);
    vcu__sb_printf(b, "vcu_gpu_share_weight_sum{gpu=\"%u\",uuid=\"%s\"} %llu\n", i, gpu->uuid,
                   (unsigned long long)weights);
}

static void vcu__metrics(vcu_dmn_t *d, vcu__sb_t *b)
{
    static vcu__gpu_t gpus[64];
    unsigned int ng = vcu__gpus(gpus, 64), i;
    const vcu_vm_t *vm;

    vcu__sb_printf(b, "# HELP vcu_daemon_info The daemon's version and how it jails workers.\n"
                      "# TYPE vcu_daemon_info gauge\n"
                      "vcu_daemon_info{version=\"%s\",jail=\"%s\",seccomp=\"%s\"} 1\n",
                   VCU_DMN_VERSION, d->jail.enable ? "on" : "off", vcu__seccomp_name(d->seccomp));
    vcu__sb_printf(b, "# TYPE vcu_vms gauge\nvcu_vms %u\n", d->nvms);
    vcu__sb_printf(b, "# TYPE vcu_workers_started_total counter\nvcu_workers_started_total %llu\n",
                   (unsigned long long)d->workers_started);
    vcu__sb_printf(b, "# TYPE vcu_workers_failed_total counter\nvcu_workers_failed_total %llu\n",
                   (unsigned long long)d->workers_failed);
    vcu__sb_printf(b, "# TYPE vcu_vms_refused_total counter\nvcu_vms_refused_total %llu\n",
                   (unsigned long long)d->vms_refused);
    vcu__sb_printf(b,
                   "# HELP vcu_vm_mem_quota_bytes GPU memory the VM may hold per GPU (0: none).\n"
                   "# TYPE vcu_vm_mem_quota_bytes gauge\n"
                   "# HELP vcu_vm_mem_used_bytes GPU memory charged to the VM, contexts included.\n"
                   "# TYPE vcu_vm_mem_used_bytes gauge\n"
                   "# HELP vcu_vm_ctx_bytes Of that, the workers' CUDA contexts.\n"
                   "# TYPE vcu_vm_ctx_bytes gauge\n"
                   "# HELP vcu_vm_host_quota_bytes Host memory the VM's workers may hold for it "
                   "(0: none).\n"
                   "# TYPE vcu_vm_host_quota_bytes gauge\n"
                   "# HELP vcu_vm_host_used_bytes Host memory charged to the VM.\n"
                   "# TYPE vcu_vm_host_used_bytes gauge\n"
                   "# HELP vcu_vm_nvml_mem_bytes GPU memory NVML sees the VM's workers hold.\n"
                   "# TYPE vcu_vm_nvml_mem_bytes gauge\n"
                   "# TYPE vcu_vm_sessions gauge\n# TYPE vcu_vm_max_sessions gauge\n"
                   "# TYPE vcu_vm_sessions_refused_total counter\n"
                   "# TYPE vcu_vm_compute_share gauge\n# TYPE vcu_vm_compute_cap gauge\n"
                   "# HELP vcu_vm_gpu_seconds_total GPU time charged to the VM by the share group.\n"
                   "# TYPE vcu_vm_gpu_seconds_total counter\n"
                   "# TYPE vcu_vm_faults_total counter\n# TYPE vcu_vm_sms gauge\n");
    for (vm = d->vms; vm != NULL; vm = vm->next)
        if (vm->state == VCU_VM_READY)
            vcu__metrics_vm(b, vm);
    if (ng > 0)
        vcu__sb_printf(b, "# HELP vcu_gpu_memory_total_bytes The GPU's memory (NVML).\n"
                          "# TYPE vcu_gpu_memory_total_bytes gauge\n"
                          "# TYPE vcu_gpu_memory_used_bytes gauge\n"
                          "# HELP vcu_gpu_committed_bytes The quotas of the VMs on the GPU.\n"
                          "# TYPE vcu_gpu_committed_bytes gauge\n"
                          "# TYPE vcu_gpu_share_weight_sum gauge\n");
    for (i = 0; i < ng; i++)
        vcu__metrics_gpu(d, b, &gpus[i], i);
}

/* ---- control ----------------------------------------------------------------- */

/* The value of key in a flat JSON object line: a string (unescaped into
 * out) or a bare number/word.  0, or -1 if absent or malformed. */
static int vcu__json_get(const char *line, const char *key, char *out, size_t cap)
{
    char pat[80];
    const char *p;
    size_t n = 0;

    snprintf(pat, sizeof(pat), "\"%s\"", key);
    p = strstr(line, pat);
    if (p == NULL)
        return -1;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p++ != ':')
        return -1;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p == '"') {
        for (p++; *p != '\0' && *p != '"'; p++) {
            if (*p == '\\' && p[1] != '\0')
                p++;
            if (n + 1 >= cap)
                return -1;
            out[n++] = *p;
        }
        if (*p != '"')
            return -1;
    } else {
        while (*p != '\0' && *p != ',' && *p != '}' && *p != ' ') {
            if (n + 1 >= cap)
                return -1;
            out[n++] = *p++;
        }
        if (n == 0)
            return -1;
    }
    out[n] = '\0';
    return 0;
}

static int vcu__json_u64(const char *line, const char *key, uint64_t *v, bool *have)
{
    char buf[32], *end;

    *have = false;
    if (vcu__json_get(line, key, buf, sizeof(buf)) != 0)
        return strstr(line, key) == NULL ? 0 : -1;
    errno = 0;
    *v = strtoull(buf, &end, 10);
    if (errno != 0 || *end != '\0' || buf[0] == '-')
        return -1;
    *have = true;
    return 0;
}

static void vcu__ctl_vm(vcu__sb_t *b, const vcu_vm_t *vm)
{
    vcu__vm_fig_t f;
    int nv_ok;
    unsigned long long nv;

    vcu__vm_figures(vm, &f);
    nv = vcu__nvml_vm_bytes(vm, &nv_ok);
    vcu__sb_printf(b, "{\"id\":%llu,\"name\":\"", (unsigned long long)vm->id);
    vcu__sb_json_str(b, vm->name);
    vcu__sb_printf(b, "\",\"qemu_pid\":%d,\"gpus\":\"", (int)vm->peer_pid);
    vcu__sb_json_str(b, vm->gpus);
    vcu__sb_printf(b,
                   "\",\"mem_quota\":%llu,\"mem_used\":%llu,\"ctx_bytes\":%llu,"
                   "\"sessions\":%u,\"max_sessions\":%u,\"compute_share\":%u,"
                   "\"compute_cap\":%u,\"sms\":%u,\"gpu_ns\":%llu,\"faults\":%llu,"
                   "\"host_quota\":%llu,\"host_used\":%llu",
                   (unsigned long long)atomic_load(&vm->policy->mem_quota),
                   (unsigned long long)f.used, (unsigned long long)f.ctx, vm->nsessions,
                   atomic_load(&vm->policy->max_sessions), atomic_load(&vm->policy->compute_share),
                   atomic_load(&vm->policy->compute_cap), vm->sms,
                   (unsigned long long)vcu_vm_gpu_ns(vm), (unsigned long long)f.faults,
                   (unsigned long long)atomic_load(&vm->policy->host_quota),
                   (unsigned long long)f.host);
    if (nv_ok)
        vcu__sb_printf(b, ",\"nvml_mem\":%llu", nv);
    vcu__sb_printf(b, ",\"workers\":[");
    {
        const vcu_sess_t *s;
        bool first = true;

        for (s = vm->sessions; s != NULL; s = s->next) {
            vcu__sb_printf(b, "%s{\"session\":%llu,\"pid\":%d,\"killed\":%s}", first ? "" : ",",
                           (unsigned long long)s->id, (int)s->prog_pid, s->killed ? "true" : "false");
            first = false;
        }
    }
    vcu__sb_printf(b, "]");
    if (vm->cuda_error[0] != '\0') {
        vcu__sb_printf(b, ",\"cuda_error\":\"");
        vcu__sb_json_str(b, vm->cuda_error);
        vcu__sb_printf(b, "\"");
    }
    vcu__sb_printf(b, "}");
}

/* The "status" command: the daemon's version, counters and jail. */
static void vcu__ctl_status(const vcu_dmn_t *d, vcu__sb_t *b)
{
    vcu__sb_printf(b,
                   "{\"ok\":true,\"version\":\"%s\",\"uptime_s\":%llu,\"vms\":%u,"
                   "\"workers_started\":%llu,\"workers_failed\":%llu,\"jail\":\"",
                   VCU_DMN_VERSION,
                   (unsigned long long)((vcu_dmn_now() - d->started_ns) / 1000000000u), d->nvms,
                   (unsigned long long)d->workers_started, (unsigned long long)d->workers_failed);
    vcu__sb_json_str(b, d->jail_note);
    vcu__sb_printf(b, "\",\"seccomp\":\"%s\",\"worker_uid\":%d,\"ctx_bytes\":%llu,"
                   "\"host_mem_quota\":%llu}\n",
                   vcu__seccomp_name(d->seccomp),
                   d->jail.uid == (uid_t)-1 ? (int)geteuid() : (int)d->jail.uid,
                   (unsigned long long)d->ctx_bytes, (unsigned long long)d->host_quota);
}

/* The "list-vms" command: every ready VM. */
static void vcu__ctl_list_vms(const vcu_dmn_t *d, vcu__sb_t *b)
{
    const vcu_vm_t *cvm;
    bool first = true;

    vcu__sb_printf(b, "{\"ok\":true,\"vms\":[");
    for (cvm = d->vms; cvm != NULL; cvm = cvm->next) {
        if (cvm->state != VCU_VM_READY)
            continue;
        if (!first)
            vcu__sb_printf(b, ",");
        vcu__ctl_vm(b, cvm);
        first = false;
    }
    vcu__sb_printf(b, "]}\n");
}

/* The "list-gpus" command: each GPU's memory and what the ready VMs on it
 * were promised. */
static void vcu__ctl_list_gpus(const vcu_dmn_t *d, vcu__sb_t *b)
{
    static vcu__gpu_t gpus[64];
    const vcu_vm_t *cvm;
    unsigned int i, ng;

    ng = vcu__gpus(gpus, 64);
    vcu__sb_printf(b, "{\"ok\":true,\"nvml\":%s,\"gpus\":[", vcu__nvml.ok ? "true" : "false");
    for (i = 0; i < ng; i++) {
        uint64_t committed = 0, weights = 0;

        for (cvm = d->vms; cvm != NULL; cvm = cvm->next)
            if (cvm->state == VCU_VM_READY && vcu__vm_on_gpu(cvm, &gpus[i])) {
                committed = vcu__sat_add(committed, atomic_load(&cvm->policy->mem_quota));
                weights += atomic_load(&cvm->policy->compute_share);
            }
        vcu__sb_printf(b, "%s{\"index\":%u,\"uuid\":\"", i ? "," : "", i);
        vcu__sb_json_str(b, gpus[i].uuid);
        vcu__sb_printf(b, "\",\"name\":\"");
        vcu__sb_json_str(b, gpus[i].name);
        vcu__sb_printf(b,
                       "\",\"memory_total\":%llu,\"memory_used\":%llu,\"memory_free\":%llu,"
                       "\"committed\":%llu,\"uncommitted\":%llu,\"share_weights\":%llu}",
                       gpus[i].total, gpus[i].used, gpus[i].free, (unsigned long long)committed,
                       (unsigned long long)(gpus[i].total > committed ? gpus[i].total - committed
                                                                      : 0),
                       (unsigned long long)weights);
    }
    vcu__sb_printf(b, "]}\n");
}

/* The "set-vm" command: a VM's memory quota, compute share or cap. */
static void vcu__ctl_set_vm(vcu_dmn_t *d, const char *line, vcu__sb_t *b)
{
    char key[80], err[240];
    uint64_t q = 0, sh = 0, cap = 0;
    bool hq, hs, hc;
    uint32_t s32, c32;
    vcu_vm_t *vm;

    if (vcu__json_get(line, "vm", key, sizeof(key)) != 0) {
        vcu__sb_printf(b, "{\"ok\":false,\"error\":\"set-vm needs \\\"vm\\\"\"}\n");
        return;
    }
    vm = vcu_vm_find(d, key);
    if (vm == NULL) {
        vcu__sb_printf(b, "{\"ok\":false,\"error\":\"no VM named or numbered so (or two "
                          "of that name: give its id)\"}\n");
        return;
    }
    if (vcu__json_u64(line, "mem_quota", &q, &hq) != 0 ||
        vcu__json_u64(line, "compute_share", &sh, &hs) != 0 ||
        vcu__json_u64(line, "compute_cap", &cap, &hc) != 0 || sh > UINT32_MAX ||
        cap > UINT32_MAX) {
        vcu__sb_printf(b, "{\"ok\":false,\"error\":\"values must be unsigned integers\"}\n");
        return;
    }
    if (!hq && !hs && !hc) {
        vcu__sb_printf(b, "{\"ok\":false,\"error\":\"nothing to set (mem_quota, "
                          "compute_share, compute_cap)\"}\n");
        return;
    }
    s32 = (uint32_t)sh;
    c32 = (uint32_t)cap;
    if (vcu_vm_set_slice(vm, hq ? &q : NULL, hs ? &s32 : NULL, hc ? &c32 : NULL, err,
                         sizeof(err)) != 0) {
        vcu__sb_printf(b, "{\"ok\":false,\"error\":\"");
        vcu__sb_json_str(b, err);
        vcu__sb_printf(b, "\"}\n");
        return;
    }
    vcu__sb_printf(b, "{\"ok\":true,\"vm\":");
    vcu__ctl_vm(b, vm);
    vcu__sb_printf(b, "}\n");
}

static void vcu__ctl(vcu_dmn_t *d, const char *line, vcu__sb_t *b)
{
    char cmd[32];

    if (vcu__json_get(line, "cmd", cmd, sizeof(cmd)) != 0) {
        vcu__sb_printf(b, "{\"ok\":false,\"error\":\"no cmd\"}\n");
        return;
    }
    if (strcmp(cmd, "status") == 0)
        vcu__ctl_status(d, b);
    else if (strcmp(cmd, "list-vms") == 0)
        vcu__ctl_list_vms(d, b);
    else if (strcmp(cmd, "list-gpus") == 0)
        vcu__ctl_list_gpus(d, b);
    else if (strcmp(cmd, "set-vm") == 0)
        vcu__ctl_set_vm(d, line, b);
    else
        vcu__sb_printf(b, "{\"ok\":false,\"error\":\"unknown cmd (status, list-gpus, list-vms, "
                          "set-vm)\"}\n");
}

/* ---- connections ------------------------------------------------------------ */

void vcu_op_accept(vcu_dmn_t *d, int listen_fd, int kind)
{
    vcu_op_t *op;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd < 0)
        return;
    op = calloc(1, sizeof(*op));
    if (op == NULL) {
        close(fd);
        return;
    }
    op->fd = fd;
    op->kind = kind;
    op->next = d->ops;
    d->ops = op;
}

static void vcu__op_close(vcu_op_t *op)
{
    if (op->fd >= 0)
        close(op->fd);
    op->fd = -1;
}

static void vcu__op_reply(vcu_op_t *op, vcu__sb_t *b)
{
    if (b->oom) {
        free(b->buf);
        vcu__op_close(op);
        return;
    }
    op->out = b->buf;
    op->outlen = b->len;
    op->outoff = 0;
}

void vcu_op_input(vcu_dmn_t *d, vcu_op_t *op)
{
    ssize_t n = recv(op->fd, op->in + op->have, sizeof(op->in) - 1 - op->have, MSG_DONTWAIT);
    char *nl;

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        vcu__op_close(op);
        return;
    }
    op->have += (size_t)n;
    op->in[op->have] = '\0';
    if (op->kind == 1) {
        vcu__sb_t b = { 0 }, body = { 0 };

        /* HTTP: the request line is enough; one answer, then close. */
        if (strstr(op->in, "\r\n\r\n") == NULL && strstr(op->in, "\n\n") == NULL) {
            if (op->have >= sizeof(op->in) - 1)
                vcu__op_close(op);
            return;
        }
        op->close_after = true;
        if (strncmp(op->in, "GET /metrics", 12) != 0 && strncmp(op->in, "GET / ", 6) != 0) {
            vcu__sb_printf(&b, "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                               "Content-Length: 24\r\n\r\nonly /metrics is served\n");
            vcu__op_reply(op, &b);
            return;
        }
        vcu__metrics(d, &body);
        if (body.oom) {
            free(body.buf);
            vcu__op_close(op);
            return;
        }
        vcu__sb_printf(&b, "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                           "Content-Length: %zu\r\n\r\n%s", body.len, body.buf ? body.buf : "");
        free(body.buf);
        vcu__op_reply(op, &b);
        return;
    }
    nl = strchr(op->in, '\n');
    if (nl == NULL) {
        if (op->have >= sizeof(op->in) - 1)
            vcu__op_close(op);
        return;
    }
    *nl = '\0';
    {
        vcu__sb_t b = { 0 };
        size_t used = (size_t)(nl + 1 - op->in);

        vcu__ctl(d, op->in, &b);
        memmove(op->in, nl + 1, op->have - used);
        op->have -= used;
        op->in[op->have] = '\0';
        vcu__op_reply(op, &b);
    }
}

void vcu_op_output(vcu_dmn_t *d, vcu_op_t *op)
{
    ssize_t n = send(op->fd, op->out + op->outoff, op->outlen - op->outoff,
                     MSG_DONTWAIT | MSG_NOSIGNAL);

    (void)d;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        vcu__op_close(op);
        return;
    }
    op->outoff += (size_t)n;
    if (op->outoff < op->outlen)
        return;
    free(op->out);
    op->out = NULL;
    if (op->close_after)
        vcu__op_close(op);
}

void vcu_op_free_closed(vcu_dmn_t *d)
{
    vcu_op_t **pp = &d->ops, *op;

    while ((op = *pp) != NULL) {
        if (op->fd >= 0) {
            pp = &op->next;
            continue;
        }
        *pp = op->next;
        free(op->out);
        free(op);
    }
}
