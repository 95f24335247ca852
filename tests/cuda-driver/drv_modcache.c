/*
 * The host's module cache (CU_MODULE_LOAD_HASH): a module one process
 * loaded is named by its SHA-256, not sent again, when a second process
 * (a session of its own, so a new host worker) loads it, and the module
 * works there.  The image is the test kernels' PTX padded with comments
 * to 6 MB and made unique to this run, so the first load is a miss
 * wherever the cache lives; it is loaded from a read-only mapping of a
 * file, as libraries' fatbins are.  The first process sends it and keeps
 * the hash the host answers (CU_MODULE_LOAD_KEEP) in the guest library's
 * memo (vcu_modhash.c); the second names it by that hash, hashing
 * nothing; a third, with VCU_MODULE_MEMO=off and VCU_MODULE_CACHE=all,
 * hashes it itself and names it; a fourth loads it as NVIDIA's runtime
 * does, with cuLibraryLoadData (which keeps a copy), and names it from
 * the memo too; after a chmod of the file (its ctime changes, as with any
 * write), a fifth finds no memo and sends it again.  Each process
 * reports its load with VCU_LIBCUDA_TRACE=modules (into a file); the
 * times go out as info: lines.  Where the host keeps no cache (the
 * feature is not agreed) every load is sent, which is checked as such.
 */
#include <cpuid.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "vcu_drv_test.h"

#define N 256
#define IMG_BYTES (6u << 20)

static double now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* One process: loads img, runs its fill kernel, checks the result, and
 * writes its module trace (stderr) into trace. */
static void load_and_run(const char *img, const char *trace, const char *what, const char *xdg,
                         int memo, int lib)
{
    CUlibrary l = NULL;
    CUkernel k;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr p;
    unsigned int host[N];
    unsigned long long v = 7;
    unsigned int step = 3;
    char pad = 0;
    int n = N;
    void *args[] = { &p, &pad, &v, &step, &n };
    double t0, t1;

    setenv("VCU_LIBCUDA_TRACE", "modules", 1);
    setenv("XDG_CACHE_HOME", xdg, 1);
    if (!memo) {
        const char *e = getenv("VCU_MODULE_CACHE");

        setenv("VCU_MODULE_MEMO", "off", 1);
        if (e == NULL || strcmp(e, "off") != 0)
            setenv("VCU_MODULE_CACHE", "all", 1);
    }
    TRUE(freopen(trace, "w", stderr) != NULL);
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    t0 = now_ms();
    if (lib)
        CK(cuLibraryLoadData(&l, img, NULL, NULL, 0, NULL, NULL, 0));
    else
        CK(cuModuleLoadData(&mod, img));
    t1 = now_ms();
    printf("info: drv_modcache: %s: %s of %u bytes took %.1f ms\n", what,
           lib ? "cuLibraryLoadData" : "cuModuleLoadData", (unsigned int)strlen(img) + 1, t1 - t0);
    if (lib) {
        CK(cuLibraryGetKernel(&k, l, "vcu_drv_fill"));
        CK(cuKernelGetFunction(&fill, k));
    } else {
        CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    }
    CK(cuMemAlloc(&p, sizeof(host)));
    CK(cuLaunchKernel(fill, 1, 1, 1, N, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(host, p, sizeof(host)));
    for (int i = 0; i < N; i++)
        TRUE(host[i] == 7u + 3u * (unsigned int)i);
    CK(cuMemFree(p));
    if (lib)
        CK(cuLibraryUnload(l));
    else
        CK(cuModuleUnload(mod));
    fflush(stdout);
    fflush(stderr);
}

static void in_child(const char *img, const char *trace, const char *what, const char *xdg,
                     int memo, int lib)
{
    pid_t pid;
    int st = 0;

    fflush(stdout);
    pid = fork();
    TRUE(pid >= 0);
    if (pid == 0) {
        load_and_run(img, trace, what, xdg, memo, lib);
        exit(0);
    }
    TRUE(waitpid(pid, &st, 0) == pid);
    TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The trace line of the module load, into line (the first). */
static void trace_line(const char *trace, char *line, size_t cap)
{
    FILE *f = fopen(trace, "r");

    TRUE(f != NULL);
    line[0] = '\0';
    while (fgets(line, (int)cap, f) != NULL)
        if (strstr(line, "module loaded") != NULL)
            break;
    fclose(f);
    TRUE(strstr(line, "module loaded") != NULL);
    line[strcspn(line, "\n")] = '\0';
}

static void rm_rf(const char *dir)
{
    char cmd[256];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    TRUE(system(cmd) == 0);
}

int main(void)
{
    size_t plen, off;
    char *ptx = vcu_drv_read_beside("vcu_drv_kernels.ptx", &plen);
    char *img = malloc(IMG_BYTES + 1), *mapped;
    char t[5][64], l[5][512], file[64], xdg[64];
    struct timespec ts;
    unsigned int line = 0;
    int fd;

    TRUE(img != NULL);
    clock_gettime(CLOCK_REALTIME, &ts);
    off = (size_t)snprintf(img, IMG_BYTES, "%s\n// drv_modcache run %ld.%09ld pid %ld\n", ptx,
                           (long)ts.tv_sec, ts.tv_nsec, (long)getpid());
    TRUE(off < IMG_BYTES / 2);
    /* Comment lines, all different, to the size of a library's module. */
    while (off + 80 < IMG_BYTES) {
        off += (size_t)snprintf(img + off, IMG_BYTES - off,
                                "// padding line %08u of the module cache test, %08x\n", line,
                                line * 2654435761u);
        line++;
    }
    img[off] = '\0';
    free(ptx);
    /* In a file, mapped read-only, as a library's fatbin section is. */
    snprintf(file, sizeof(file), "/tmp/drv_modcache.%ld.img", (long)getpid());
    snprintf(xdg, sizeof(xdg), "/tmp/drv_modcache.%ld.xdg", (long)getpid());
    fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
    TRUE(fd >= 0);
    TRUE(write(fd, img, off + 1) == (ssize_t)(off + 1));
    mapped = mmap(NULL, off + 1, PROT_READ, MAP_PRIVATE, fd, 0);
    TRUE(mapped != MAP_FAILED);
    close(fd);
    free(img);

    for (int i = 0; i < 5; i++)
        snprintf(t[i], sizeof(t[i]), "/tmp/drv_modcache.%ld.%d", (long)getpid(), i);
    in_child(mapped, t[0], "first process", xdg, 1, 0);
    in_child(mapped, t[1], "second process", xdg, 1, 0);
    in_child(mapped, t[2], "third process (hashing it itself)", xdg, 0, 0);
    in_child(mapped, t[3], "fourth process (a library)", xdg, 1, 1);
    usleep(20000);                  /* a ctime of its own, whatever the clock's grain */
    TRUE(chmod(file, 0400) == 0);
    in_child(mapped, t[4], "fifth process (the file changed)", xdg, 1, 0);
    for (int i = 0; i < 5; i++) {
        trace_line(t[i], l[i], sizeof(l[i]));
        unlink(t[i]);
    }
    munmap(mapped, off + 1);
    unlink(file);
    rm_rf(xdg);
    {
        unsigned int a, b = 0, c, d;

        /* Whether the guest library could hash on the SHA extensions. */
        printf("info: drv_modcache: CPU SHA extensions: %s\n",
               __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29)) ? "yes" : "no");
    }
    for (int i = 0; i < 5; i++)
        printf("info: drv_modcache: process %d: %s\n", i + 1, l[i]);
    if (strstr(l[0], "sent; hash kept") != NULL) {
        /* The host has a cache: the second and third processes sent
         * nothing; the second took the hash from the memo. */
        TRUE(strstr(l[1], "by hash, not sent; hash remembered") != NULL);
        TRUE(strstr(l[2], "by hash, not sent)") != NULL);
        TRUE(strstr(l[3], "by hash, not sent; hash remembered") != NULL);
        TRUE(strstr(l[4], "sent; hash kept") != NULL);
    } else {
        printf("info: drv_modcache: the host keeps no module cache; every load sent\n");
        for (int i = 0; i < 5; i++)
            TRUE(strstr(l[i], ", sent)") != NULL);
    }
    printf("PASS drv_modcache\n");
    return 0;
}
