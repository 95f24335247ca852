/*
 * GPU host probe behind docs/design.md "Live migration": what each way of
 * moving a worker's GPU state can carry.
 *
 *   probe-migrate addrs DIR       one session's history (context, four
 *                                 allocations, a module with globals, one
 *                                 more allocation): every device address
 *                                 it got, one line
 *   probe-migrate place DIR LINE  a fresh process puts the same objects at
 *                                 the addresses LINE (from addrs) names:
 *                                 allocations through the virtual memory
 *                                 API at fixed addresses, before and after
 *                                 the module is loaded; says which landed
 *   probe-migrate hist DIR [LINE]  a history with a free in it, run whole
 *                                 (prints what lives), or with LINE only
 *                                 what lives put back: where it lands
 *   probe-migrate ckpt MIB        NVIDIA's checkpoint API from a parent on a
 *                                 child holding MIB of device memory and a
 *                                 module: lock, checkpoint, restore, unlock,
 *                                 each timed; the child checks its memory,
 *                                 its module global and a launch after
 *
 *   nvcc -fatbin -gencode arch=compute_90,code=sm_90 \
 *       -o probe-migrate.fatbin tests/gpu/probe-migrate-kernels.cu
 *   cc -O1 -I/usr/local/cuda/include -o probe-migrate tests/gpu/probe-migrate.c \
 *       -L/usr/local/cuda/lib64/stubs -lcuda
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    const char *s_ = "?"; cuGetErrorName(r_, &s_); \
    printf("FAIL %s: %s (line %d)\n", #x, s_, __LINE__); exit(1); } } while (0)

static const size_t sizes[] = { 256, 1 << 20, 64 << 20, 3 << 20 };
#define NS (sizeof(sizes) / sizeof(sizes[0]))

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *slurp(const char *dir, size_t *n)
{
    char p[4096];
    FILE *f;
    void *b;

    snprintf(p, sizeof(p), "%s/probe-migrate.fatbin", dir);
    f = fopen(p, "rb");
    if (!f) {
        printf("FAIL cannot open %s\n", p);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b = malloc(*n);
    if (fread(b, 1, *n, f) != *n)
        exit(1);
    fclose(f);
    return b;
}

static CUcontext ctx_new(void)
{
    CUdevice d;
    CUcontext c;

    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuCtxCreate(&c, NULL, 0, d));
    return c;
}

static int addrs(const char *dir)
{
    CUdeviceptr p[NS + 1], g, t;
    CUmodule m;
    size_t n, gs;
    void *img = slurp(dir, &n);
    unsigned i;

    ctx_new();
    for (i = 0; i < NS; i++)
        CK(cuMemAlloc(&p[i], sizes[i]));
    CK(cuModuleLoadData(&m, img));
    CK(cuModuleGetGlobal(&g, &gs, m, "g_counter"));
    CK(cuModuleGetGlobal(&t, &gs, m, "g_table"));
    CK(cuMemAlloc(&p[NS], 256));
    printf("ADDRS");
    for (i = 0; i <= NS; i++)
        printf(" %llx", (unsigned long long)p[i]);
    printf(" %llx %llx\n", (unsigned long long)g, (unsigned long long)t);
    return 0;
}

/* One allocation at a fixed address through the virtual memory API: the
 * granularity-aligned range around it reserved at that address, backed
 * and mapped.  1 if it landed there. */
static CUdeviceptr placed_base[16];
static size_t placed_len[16];
static unsigned nplaced;

static int fixed(CUdeviceptr want, size_t size)
{
    CUmemAllocationProp pr;
    CUmemAccessDesc ad;
    CUmemGenericAllocationHandle h;
    CUdeviceptr base, got = 0;
    size_t gran, len;
    CUresult r;

    memset(&pr, 0, sizeof(pr));
    pr.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    pr.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pr.location.id = 0;
    CK(cuMemGetAllocationGranularity(&gran, &pr, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    base = want & ~(CUdeviceptr)(gran - 1);
    len = ((want + size - base) + gran - 1) & ~(gran - 1);
    for (unsigned i = 0; i < nplaced; i++)      /* a granule placed already */
        if (want >= placed_base[i] && want + size <= placed_base[i] + placed_len[i])
            return 1;
    r = cuMemAddressReserve(&got, len, gran, base, 0);
    if (r != CUDA_SUCCESS || got != base) {
        printf("  reserve %llx+%zx: r=%d got %llx\n", (unsigned long long)base, len, r,
               (unsigned long long)got);
        if (r == CUDA_SUCCESS)
            cuMemAddressFree(got, len);
        return 0;
    }
    CK(cuMemCreate(&h, len, &pr, 0));
    CK(cuMemMap(base, len, 0, h, 0));
    memset(&ad, 0, sizeof(ad));
    ad.location = pr.location;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(base, len, &ad, 1));
    if (nplaced < 16) {
        placed_base[nplaced] = base;
        placed_len[nplaced++] = len;
    }
    return 1;
}

static int place(const char *dir, char **av, int ac, int module_first)
{
    unsigned long long a[NS + 3];
    CUdeviceptr g, t;
    CUmodule m;
    size_t n, gs;
    void *img = slurp(dir, &n);
    unsigned i, ok = 0;

    if (ac < (int)NS + 3)
        return printf("FAIL place wants %zu addresses\n", NS + 3), 1;
    for (i = 0; i < NS + 3; i++)
        a[i] = strtoull(av[i], NULL, 16);
    ctx_new();
    if (module_first)
        CK(cuModuleLoadData(&m, img));
    for (i = 0; i <= NS; i++)
        ok += fixed(a[i], i < NS ? sizes[i] : 256);
    if (!module_first)
        CK(cuModuleLoadData(&m, img));
    CK(cuModuleGetGlobal(&g, &gs, m, "g_counter"));
    CK(cuModuleGetGlobal(&t, &gs, m, "g_table"));
    printf("PLACE %s: %u/%zu allocations at their address; globals %s (%llx %llx)\n",
           module_first ? "module first" : "module last", ok, NS + 1,
           g == a[NS + 1] && t == a[NS + 2] ? "at their address" : "moved",
           (unsigned long long)g, (unsigned long long)t);
    return 0;
}

/* A history with a free in it: 64 MiB, 1 MiB, the 64 MiB freed, the
 * module, 256 bytes.  "hist" runs it and prints what lives (the 1 MiB,
 * the globals, the 256 bytes); "hist-compact LINE" puts only what lives
 * back (the 1 MiB at its address, then the module, then the 256 bytes)
 * and says whether the rest landed where LINE has it. */
static int hist(const char *dir, char **av, int ac)
{
    CUdeviceptr a, b, c, g, t;
    CUmodule m;
    size_t n, gs;
    void *img = slurp(dir, &n);
    unsigned long long w[4];

    ctx_new();
    if (ac >= 4) {
        for (int i = 0; i < 4; i++)
            w[i] = strtoull(av[i], NULL, 16);
        printf("HIST compact: 1 MiB %s\n", fixed(w[0], 1 << 20) ? "at its address" : "moved");
        b = w[0];
    } else {
        CK(cuMemAlloc(&a, 64 << 20));
        CK(cuMemAlloc(&b, 1 << 20));
        CK(cuMemFree(a));
    }
    CK(cuModuleLoadData(&m, img));
    CK(cuModuleGetGlobal(&g, &gs, m, "g_counter"));
    CK(cuModuleGetGlobal(&t, &gs, m, "g_table"));
    CK(cuMemAlloc(&c, 256));
    if (ac >= 4)
        printf("HIST compact: globals %s, 256 B %s\n",
               g == w[1] && t == w[2] ? "at their address" : "moved",
               c == w[3] ? "at its address" : "moved");
    else
        printf("HIST %llx %llx %llx %llx\n", (unsigned long long)b, (unsigned long long)g,
               (unsigned long long)t, (unsigned long long)c);
    return 0;
}

static int ckpt(size_t mib)
{
    int up[2], down[2];
    char c;
    pid_t pid;
    double t0, t1, t2, t3, t4;
    CUprocessState st;
    int status;

    if (pipe(up) || pipe(down))
        return 1;
    pid = fork();
    if (pid == 0) {
        CUdeviceptr p, g;
        CUmodule m;
        CUfunction f;
        size_t n, gs, count = mib << 18, i, bad = 0;
        unsigned int *h, add = 3, nn = 1 << 20;
        unsigned long long gv = 0;
        void *img = slurp(getenv("PROBE_DIR"), &n);
        void *args[3];

        ctx_new();
        CK(cuModuleLoadData(&m, img));
        CK(cuModuleGetFunction(&f, m, "bump"));
        CK(cuModuleGetGlobal(&g, &gs, m, "g_counter"));
        CK(cuMemAlloc(&p, mib << 20));
        CK(cuMemsetD32(p, 0x5a5a5a5a, count));
        args[0] = &p; args[1] = &nn; args[2] = &add;
        CK(cuLaunchKernel(f, nn / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
        if (write(up[1], "r", 1) != 1 || read(down[0], &c, 1) != 1)
            exit(2);
        CK(cuLaunchKernel(f, nn / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CK(cuCtxSynchronize());
        h = malloc(mib << 20);
        CK(cuMemcpyDtoH(h, p, mib << 20));
        for (i = 0; i < count; i++)
            if (h[i] != (i < nn ? 0x5a5a5a5a + 6 : 0x5a5a5a5a))
                bad++;
        CK(cuMemcpyDtoH(&gv, g, sizeof(gv)));
        printf("CKPT child: %zu of %zu words wrong, counter %llu (want 6)\n", bad, count, gv);
        exit(bad || gv != 6);
    }
    if (read(up[0], &c, 1) != 1)
        return 1;
    CK(cuInit(0));
    t0 = now();
    CK(cuCheckpointProcessLock(pid, NULL));
    t1 = now();
    CK(cuCheckpointProcessCheckpoint(pid, NULL));
    t2 = now();
    CK(cuCheckpointProcessGetState(pid, &st));
    printf("CKPT state after checkpoint %d\n", (int)st);
    CK(cuCheckpointProcessRestore(pid, NULL));
    t3 = now();
    CK(cuCheckpointProcessUnlock(pid, NULL));
    t4 = now();
    printf("CKPT %zu MiB: lock %.3f s, checkpoint %.3f s, restore %.3f s, unlock %.3f s\n",
           mib, t1 - t0, t2 - t1, t3 - t2, t4 - t3);
    if (write(down[1], "g", 1) != 1)
        return 1;
    waitpid(pid, &status, 0);
    printf("CKPT child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}

int main(int ac, char **av)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ac >= 3 && !strcmp(av[1], "addrs"))
        return addrs(av[2]);
    if (ac >= 3 && !strcmp(av[1], "place"))
        return place(av[2], av + 3, ac - 3, 0);
    if (ac >= 3 && !strcmp(av[1], "place-mf"))
        return place(av[2], av + 3, ac - 3, 1);
    if (ac >= 3 && !strcmp(av[1], "hist"))
        return hist(av[2], av + 3, ac - 3);
    if (ac >= 3 && !strcmp(av[1], "ckpt"))
        return ckpt(strtoull(av[2], NULL, 0));
    fprintf(stderr, "usage: probe-migrate addrs|place|place-mf|ckpt ...\n");
    return 2;
}
