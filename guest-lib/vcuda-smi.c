/*
 * vcuda-smi: nvidia-smi's summary table for the VM's GPUs, from NVML
 * calls only, through whatever libnvidia-ml.so.1 the loader finds
 * (guest-lib's in a guest: it also exercises the library).
 *
 *   vcuda-smi        the table: versions, per GPU name, bus id, memory
 *                    used/total and utilization, then the processes
 *   vcuda-smi -L     one line per GPU: index, name, UUID
 *   vcuda-smi -q     details per GPU
 *   vcuda-smi --query-gpu=FIELD,... --format=csv[,noheader][,nounits]
 *                    nvidia-smi's CSV for the fields query_csv() knows
 *
 * Exit status: 0, 1 when NVML cannot be loaded or initialized, 2 for a
 * bad command line.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

static struct {
    nvmlReturn_t (*Init_v2)(void);
    nvmlReturn_t (*Shutdown)(void);
    const char *(*ErrorString)(nvmlReturn_t);
    nvmlReturn_t (*SystemGetDriverVersion)(char *, unsigned int);
    nvmlReturn_t (*SystemGetNVMLVersion)(char *, unsigned int);
    nvmlReturn_t (*SystemGetCudaDriverVersion_v2)(int *);
    nvmlReturn_t (*SystemGetProcessName)(unsigned int, char *, unsigned int);
    nvmlReturn_t (*DeviceGetCount_v2)(unsigned int *);
    nvmlReturn_t (*DeviceGetHandleByIndex_v2)(unsigned int, nvmlDevice_t *);
    nvmlReturn_t (*DeviceGetName)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*DeviceGetUUID)(nvmlDevice_t, char *, unsigned int);
    nvmlReturn_t (*DeviceGetPciInfo_v3)(nvmlDevice_t, nvmlPciInfo_t *);
    nvmlReturn_t (*DeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
    nvmlReturn_t (*DeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t *);
    nvmlReturn_t (*DeviceGetComputeRunningProcesses_v3)(nvmlDevice_t, unsigned int *,
                                                        nvmlProcessInfo_t *);
    nvmlReturn_t (*DeviceGetCudaComputeCapability)(nvmlDevice_t, int *, int *);
    nvmlReturn_t (*DeviceGetComputeMode)(nvmlDevice_t, nvmlComputeMode_t *);
    nvmlReturn_t (*DeviceGetMigMode)(nvmlDevice_t, unsigned int *, unsigned int *);
    nvmlReturn_t (*DeviceGetMinorNumber)(nvmlDevice_t, unsigned int *);
    nvmlReturn_t (*DeviceGetTemperature)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *);
    nvmlReturn_t (*DeviceGetPowerUsage)(nvmlDevice_t, unsigned int *);
} nv;

#define LOAD(lib, name)                                                        \
    do {                                                                       \
        *(void **)&nv.name = dlsym(lib, "nvml" #name);                         \
        if (nv.name == NULL) {                                                 \
            fprintf(stderr, "vcuda-smi: libnvidia-ml.so.1 lacks nvml%s\n", #name); \
            return -1;                                                         \
        }                                                                      \
    } while (0)

static int load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);

    if (lib == NULL) {
        fprintf(stderr, "vcuda-smi: cannot load libnvidia-ml.so.1: %s\n", dlerror());
        return -1;
    }
    LOAD(lib, Init_v2);
    LOAD(lib, Shutdown);
    LOAD(lib, ErrorString);
    LOAD(lib, SystemGetDriverVersion);
    LOAD(lib, SystemGetNVMLVersion);
    LOAD(lib, SystemGetCudaDriverVersion_v2);
    LOAD(lib, SystemGetProcessName);
    LOAD(lib, DeviceGetCount_v2);
    LOAD(lib, DeviceGetHandleByIndex_v2);
    LOAD(lib, DeviceGetName);
    LOAD(lib, DeviceGetUUID);
    LOAD(lib, DeviceGetPciInfo_v3);
    LOAD(lib, DeviceGetMemoryInfo);
    LOAD(lib, DeviceGetUtilizationRates);
    LOAD(lib, DeviceGetComputeRunningProcesses_v3);
    LOAD(lib, DeviceGetCudaComputeCapability);
    LOAD(lib, DeviceGetComputeMode);
    LOAD(lib, DeviceGetMigMode);
    LOAD(lib, DeviceGetMinorNumber);
    LOAD(lib, DeviceGetTemperature);
    LOAD(lib, DeviceGetPowerUsage);
    return 0;
}

static const char *line_eq =
    "|=========================================+====================+==========================|";
static const char *line_sep =
    "+-----------------------------------------+--------------------+--------------------------+";
static const char *line_full =
    "+-----------------------------------------------------------------------------------------+";

static unsigned long long mib(unsigned long long b)
{
    return b / (1024 * 1024);
}

static int table(unsigned int n)
{
    char drv[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "N/A", head[128];
    int cuda = 0, nproc = 0;

    if (nv.SystemGetDriverVersion(drv, sizeof(drv)) != NVML_SUCCESS)
        strcpy(drv, "N/A");
    if (nv.SystemGetCudaDriverVersion_v2(&cuda) != NVML_SUCCESS)
        cuda = 0;
    puts(line_full);
    snprintf(head, sizeof(head), "VCUDA-SMI (virtio-cuda)   Driver Version: %s   CUDA Version: %d.%d",
             drv, cuda / 1000, (cuda % 1000) / 10);
    printf("| %-87s |\n", head);
    puts(line_sep);
    printf("| %-39s | %-18s | %-19s %4s |\n", "GPU  Name", "Bus-Id", "Memory-Usage", "Util");
    puts(line_eq);
    for (unsigned int i = 0; i < n; i++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "N/A", cell[64], util[16] = "N/A";
        nvmlPciInfo_t pci;
        nvmlMemory_t mem;
        nvmlUtilization_t u;
        nvmlDevice_t d;

        if (nv.DeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS)
            continue;
        nv.DeviceGetName(d, name, sizeof(name));
        if (nv.DeviceGetPciInfo_v3(d, &pci) != NVML_SUCCESS)
            strcpy(pci.busId, "N/A");
        if (nv.DeviceGetMemoryInfo(d, &mem) == NVML_SUCCESS)
            snprintf(cell, sizeof(cell), "%lluMiB / %lluMiB", mib(mem.used), mib(mem.total));
        else
            strcpy(cell, "N/A");
        if (nv.DeviceGetUtilizationRates(d, &u) == NVML_SUCCESS)
            snprintf(util, sizeof(util), "%u%%", u.gpu);
        snprintf(head, sizeof(head), "%3u  %.34s", i, name);
        printf("| %-39s | %-18s | %19s %4s |\n", head, pci.busId, cell, util);
        puts(line_sep);
    }
    puts("");
    puts(line_full);
    printf("| %-87s |\n", "Processes:");
    printf("|  %-3s %10s   %-58s %10s |\n", "GPU", "PID", "Process name", "GPU Memory");
    puts("|=========================================================================================|");
    for (unsigned int i = 0; i < n; i++) {
        nvmlProcessInfo_t procs[256];
        unsigned int cnt = 256;
        nvmlDevice_t d;

        if (nv.DeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS ||
            nv.DeviceGetComputeRunningProcesses_v3(d, &cnt, procs) != NVML_SUCCESS)
            continue;
        for (unsigned int k = 0; k < cnt; k++) {
            char pname[256] = "N/A", memcell[32];

            nv.SystemGetProcessName(procs[k].pid, pname, sizeof(pname));
            if (procs[k].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
                strcpy(memcell, "N/A");
            else
                snprintf(memcell, sizeof(memcell), "%lluMiB", mib(procs[k].usedGpuMemory));
            printf("|  %3u %10u   %-58.58s %10s |\n", i, procs[k].pid, pname, memcell);
            nproc++;
        }
    }
    if (nproc == 0)
        printf("|  %-86s |\n", "No running processes found");
    puts(line_full);
    return 0;
}

static void q_val(const char *key, const char *val)
{
    printf("    %-34s: %s\n", key, val);
}

static int query(unsigned int n)
{
    char drv[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "N/A", nvml[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "N/A";
    int cuda = 0;

    nv.SystemGetDriverVersion(drv, sizeof(drv));
    nv.SystemGetNVMLVersion(nvml, sizeof(nvml));
    nv.SystemGetCudaDriverVersion_v2(&cuda);
    printf("==============NVSMI LOG==============\n\n");
    printf("%-38s: %s\n", "Driver Version", drv);
    printf("%-38s: %s\n", "NVML Version", nvml);
    printf("%-38s: %d.%d\n", "CUDA Version", cuda / 1000, (cuda % 1000) / 10);
    printf("\n%-38s: %u\n", "Attached GPUs", n);
    for (unsigned int i = 0; i < n; i++) {
        char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "N/A", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "N/A";
        char buf[128];
        nvmlPciInfo_t pci;
        nvmlMemory_t mem;
        nvmlUtilization_t u;
        nvmlComputeMode_t cm;
        unsigned int cur, pend, minor, v;
        int maj, min;
        nvmlDevice_t d;

        if (nv.DeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS)
            continue;
        nv.DeviceGetName(d, name, sizeof(name));
        nv.DeviceGetUUID(d, uuid, sizeof(uuid));
        memset(&pci, 0, sizeof(pci));
        nv.DeviceGetPciInfo_v3(d, &pci);
        printf("GPU %s\n", pci.busId);
        q_val("Product Name", name);
        q_val("GPU UUID", uuid);
        snprintf(buf, sizeof(buf), "%u", nv.DeviceGetMinorNumber(d, &minor) == NVML_SUCCESS ? minor : 0);
        q_val("Minor Number", buf);
        if (nv.DeviceGetCudaComputeCapability(d, &maj, &min) == NVML_SUCCESS) {
            snprintf(buf, sizeof(buf), "%d.%d", maj, min);
            q_val("Compute Capability", buf);
        }
        if (nv.DeviceGetMigMode(d, &cur, &pend) == NVML_SUCCESS)
            q_val("MIG Mode", cur ? "Enabled" : "Disabled");
        if (nv.DeviceGetComputeMode(d, &cm) == NVML_SUCCESS)
            q_val("Compute Mode", cm == NVML_COMPUTEMODE_DEFAULT ? "Default" : "Other");
        printf("    PCI\n");
        snprintf(buf, sizeof(buf), "%02X", pci.bus);
        q_val("    Bus", buf);
        snprintf(buf, sizeof(buf), "%02X", pci.device);
        q_val("    Device", buf);
        snprintf(buf, sizeof(buf), "%04X", pci.domain);
        q_val("    Domain", buf);
        snprintf(buf, sizeof(buf), "%08X", pci.pciDeviceId);
        q_val("    Device Id", buf);
        q_val("    Bus Id", pci.busId);
        printf("    FB Memory Usage\n");
        if (nv.DeviceGetMemoryInfo(d, &mem) == NVML_SUCCESS) {
            snprintf(buf, sizeof(buf), "%llu MiB", mib(mem.total));
            q_val("    Total", buf);
            snprintf(buf, sizeof(buf), "%llu MiB", mib(mem.used));
            q_val("    Used", buf);
            snprintf(buf, sizeof(buf), "%llu MiB", mib(mem.free));
            q_val("    Free", buf);
        }
        printf("    Utilization\n");
        if (nv.DeviceGetUtilizationRates(d, &u) == NVML_SUCCESS) {
            snprintf(buf, sizeof(buf), "%u %%", u.gpu);
            q_val("    Gpu", buf);
        } else {
            q_val("    Gpu", "N/A");
        }
        if (nv.DeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
            snprintf(buf, sizeof(buf), "%u C", v);
        else
            strcpy(buf, "N/A");
        q_val("GPU Current Temp", buf);
        if (nv.DeviceGetPowerUsage(d, &v) == NVML_SUCCESS)
            snprintf(buf, sizeof(buf), "%.2f W", v / 1000.0);
        else
            strcpy(buf, "N/A");
        q_val("Power Draw", buf);
        printf("    Processes\n");
        {
            nvmlProcessInfo_t procs[256];
            unsigned int cnt = 256;

            if (nv.DeviceGetComputeRunningProcesses_v3(d, &cnt, procs) != NVML_SUCCESS)
                cnt = 0;
            if (cnt == 0)
                printf("        None\n");
            for (unsigned int k = 0; k < cnt; k++) {
                char pname[256] = "N/A";

                nv.SystemGetProcessName(procs[k].pid, pname, sizeof(pname));
                snprintf(buf, sizeof(buf), "%u", procs[k].pid);
                q_val("    Process ID", buf);
                q_val("        Name", pname);
                if (procs[k].usedGpuMemory == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
                    strcpy(buf, "N/A");
                else
                    snprintf(buf, sizeof(buf), "%llu MiB", mib(procs[k].usedGpuMemory));
                q_val("        Used GPU Memory", buf);
            }
        }
        printf("\n");
    }
    return 0;
}

/*
 * --query-gpu=FIELD,... --format=csv[,noheader][,nounits]: one CSV line
 * per GPU, nvidia-smi's field names and header wording for the fields
 * below; what NVML does not answer is "[N/A]", as nvidia-smi writes it.
 */
static const char *const csv_fields[] = {
    "index", "name", "uuid", "pci.bus_id", "driver_version", "compute_cap",
    "memory.total", "memory.used", "memory.free", "utilization.gpu",
};
static const char *const csv_heads[] = {
    "index", "name", "uuid", "pci.bus_id", "driver_version", "compute_cap",
    "memory.total [MiB]", "memory.used [MiB]", "memory.free [MiB]", "utilization.gpu [%]",
};
#define NFIELDS (sizeof(csv_fields) / sizeof(csv_fields[0]))

static void csv_value(nvmlDevice_t d, unsigned int i, size_t f, int units, char *out, size_t len)
{
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlPciInfo_t pci;
    nvmlMemory_t mem;
    nvmlUtilization_t u;
    int maj, min, ok;

    snprintf(out, len, "[N/A]");
    switch (f) {
    case 0:
        snprintf(out, len, "%u", i);
        break;
    case 1:
        if (nv.DeviceGetName(d, buf, sizeof(buf)) == NVML_SUCCESS)
            snprintf(out, len, "%s", buf);
        break;
    case 2:
        if (nv.DeviceGetUUID(d, buf, sizeof(buf)) == NVML_SUCCESS)
            snprintf(out, len, "%s", buf);
        break;
    case 3:
        if (nv.DeviceGetPciInfo_v3(d, &pci) == NVML_SUCCESS)
            snprintf(out, len, "%s", pci.busId);
        break;
    case 4:
        if (nv.SystemGetDriverVersion(buf, sizeof(buf)) == NVML_SUCCESS)
            snprintf(out, len, "%s", buf);
        break;
    case 5:
        if (nv.DeviceGetCudaComputeCapability(d, &maj, &min) == NVML_SUCCESS)
            snprintf(out, len, "%d.%d", maj, min);
        break;
    case 6: case 7: case 8:
        if (nv.DeviceGetMemoryInfo(d, &mem) == NVML_SUCCESS)
            snprintf(out, len, units ? "%llu MiB" : "%llu",
                     mib(f == 6 ? mem.total : f == 7 ? mem.used : mem.free));
        break;
    case 9:
        ok = nv.DeviceGetUtilizationRates(d, &u) == NVML_SUCCESS;
        if (ok)
            snprintf(out, len, units ? "%u %%" : "%u", u.gpu);
        break;
    }
}

static int query_csv(unsigned int n, const char *fields, const char *format)
{
    size_t sel[32], nsel = 0;
    char *copy = strdup(fields), *tok, *save = NULL;
    int header = strstr(format, "noheader") == NULL, units = strstr(format, "nounits") == NULL;

    if (copy == NULL)
        return 1;
    for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        size_t f;

        for (f = 0; f < NFIELDS && strcmp(tok, csv_fields[f]) != 0; f++)
            ;
        if (f == NFIELDS || nsel == sizeof(sel) / sizeof(sel[0])) {
            fprintf(stderr, "vcuda-smi: field \"%s\" is not a valid field to query\n", tok);
            free(copy);
            return 2;
        }
        sel[nsel++] = f;
    }
    free(copy);
    for (size_t k = 0; header && k < nsel; k++)
        printf("%s%s", k ? ", " : "", csv_heads[sel[k]]);
    if (header)
        printf("\n");
    for (unsigned int i = 0; i < n; i++) {
        nvmlDevice_t d;

        if (nv.DeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS)
            continue;
        for (size_t k = 0; k < nsel; k++) {
            char v[128];

            csv_value(d, i, sel[k], units, v, sizeof(v));
            printf("%s%s", k ? ", " : "", v);
        }
        printf("\n");
    }
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: vcuda-smi [-L | -q | --query-gpu=FIELD,... --format=csv[,noheader][,nounits]]\n"
                    "fields: index, name, uuid, pci.bus_id, driver_version, compute_cap,\n"
                    "        memory.total, memory.used, memory.free, utilization.gpu\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "", *fields = NULL, *format = NULL;
    unsigned int n = 0;
    nvmlReturn_t r;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--query-gpu=", 12) == 0)
            fields = argv[i] + 12;
        else if (strncmp(argv[i], "--format=", 9) == 0)
            format = argv[i] + 9;
        else if (argc > 2)
            return usage();
    }
    if (fields != NULL || format != NULL) {
        if (fields == NULL || format == NULL || strncmp(format, "csv", 3) != 0)
            return usage();
        mode = "csv";
    } else if (strcmp(mode, "") != 0 && strcmp(mode, "-L") != 0 && strcmp(mode, "-q") != 0) {
        return usage();
    }
    if (load() != 0)
        return 1;
    r = nv.Init_v2();
    if (r != NVML_SUCCESS) {
        fprintf(stderr, "vcuda-smi: NVML initialization failed: %s\n", nv.ErrorString(r));
        return 1;
    }
    nv.DeviceGetCount_v2(&n);
    if (strcmp(mode, "-L") == 0) {
        for (unsigned int i = 0; i < n; i++) {
            char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "N/A", uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = "N/A";
            nvmlDevice_t d;

            if (nv.DeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS)
                continue;
            nv.DeviceGetName(d, name, sizeof(name));
            nv.DeviceGetUUID(d, uuid, sizeof(uuid));
            printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        }
        rc = 0;
    } else if (strcmp(mode, "-q") == 0) {
        rc = query(n);
    } else if (strcmp(mode, "csv") == 0) {
        rc = query_csv(n, fields, format);
    } else {
        rc = table(n);
    }
    nv.Shutdown();
    return rc;
}
