/*
 * The module cache: SHA-256 against FIPS 180-4's vectors
 * (include/vcu_sha256.h); the store itself (host-backend/modcache.c:
 * store, hit, miss, a damaged file, eviction, directories it must
 * refuse); and CU_MODULE_LOAD_HASH through the executor against the CPU
 * stand-in, hostile requests included.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "ut.h"
#include "vcu_modcache.h"
#include "vcu_sha256.h"

static void mc_hex(const unsigned char *h, char *out)
{
    for (int i = 0; i < VCU_SHA256_LEN; i++)
        sprintf(out + 2 * i, "%02x", h[i]);
}

static int mc_check(const void *data, size_t len, const char *want)
{
    unsigned char h[VCU_SHA256_LEN];
    char hex[2 * VCU_SHA256_LEN + 1];

    vcu_sha256(data, len, h);
    mc_hex(h, hex);
    if (strcmp(hex, want) != 0)
        VCU_TEST_FAIL_("sha256 of %zu bytes: %s, want %s", len, hex, want);
    return 0;
}

TEST(sha256_vectors)
{
    static const char m448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    static const char m896[] = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                               "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    unsigned char *a = malloc(1000000), one[VCU_SHA256_LEN], parts[VCU_SHA256_LEN];
    vcu_sha256_t s;

    ASSERT_TRUE(a != NULL);
    ASSERT_EQ(0, mc_check("", 0,
                          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    ASSERT_EQ(0, mc_check("abc", 3,
                          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    ASSERT_EQ(0, mc_check(m448, strlen(m448),
                          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    ASSERT_EQ(0, mc_check(m896, strlen(m896),
                          "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
    memset(a, 'a', 1000000);
    ASSERT_EQ(0, mc_check(a, 1000000,
                          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
    /* In pieces of every size from 1 to 130 bytes: the same digest. */
    for (size_t i = 0; i < 1000000; i++)
        a[i] = (unsigned char)(i * 131 + (i >> 9));
    vcu_sha256(a, 100000, one);
    vcu_sha256_init(&s);
    for (size_t off = 0, step = 1; off < 100000; off += step, step = step % 130 + 1)
        vcu_sha256_update(&s, a + off, off + step <= 100000 ? step : 100000 - off);
    vcu_sha256_final(&s, parts);
    ASSERT_EQ(0, memcmp(one, parts, sizeof(one)));
#ifdef VCU_SHA256_NI
    /* The SHA extensions' path and the C one agree, where both run. */
    if (vcu__sha256_has_ni()) {
        uint32_t hc[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, hn[8];

        memcpy(hn, hc, sizeof(hc));
        vcu__sha256_blocks_c(hc, a, 1000000 / 64);
        vcu__sha256_blocks_ni(hn, a, 1000000 / 64);
        ASSERT_EQ(0, memcmp(hc, hn, sizeof(hc)));
    } else {
        printf("info: no SHA extensions on this CPU: the C path alone was checked\n");
    }
#endif
    free(a);
    return 0;
}

/* A fresh directory under /tmp (mode 0700, ours). */
static char *mc_tmpdir(void)
{
    char *d = strdup("/tmp/vcu-unit-mc-XXXXXX");

    if (d == NULL || mkdtemp(d) == NULL)
        abort();
    return d;
}

static void mc_rmrf(char *d)
{
    DIR *dir = opendir(d);
    struct dirent *e;
    char p[512];

    while (dir != NULL && (e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", d, e->d_name);
        unlink(p);
    }
    if (dir != NULL)
        closedir(dir);
    rmdir(d);
    free(d);
}

static void mc_path(const char *dir, const void *img, size_t len, char *out, size_t cap)
{
    unsigned char h[VCU_SHA256_LEN];
    char hex[2 * VCU_SHA256_LEN + 1];

    vcu_sha256(img, len, h);
    mc_hex(h, hex);
    snprintf(out, cap, "%s/%s", dir, hex);
}

static unsigned int mc_count(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned int n = 0;

    /* Cache files: 64 hex digits, nothing else. */
    while (d != NULL && (e = readdir(d)) != NULL)
        n += strlen(e->d_name) == 2 * VCU_SHA256_LEN;
    if (d != NULL)
        closedir(d);
    return n;
}

TEST(modcache_store_hit_miss)
{
    char *dir = mc_tmpdir(), err[256], path[512], sub[512];
    static const char img[] = "an image of some bytes";
    unsigned char h[VCU_SHA256_LEN], buf[sizeof(img)];
    vcu_modcache_t *mc;
    struct stat st;

    /* A directory that does not exist yet is made, 0700. */
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    ASSERT_EQ(0, vcu_modcache_open(sub, 0, 1, &mc, err, sizeof(err)));
    ASSERT_EQ(0, stat(sub, &st));
    ASSERT_EQ(0700, st.st_mode & 0777);
    vcu_modcache_free(mc);

    ASSERT_EQ(0, vcu_modcache_open(dir, 1 << 20, 0, &mc, err, sizeof(err)));
    vcu_sha256(img, sizeof(img), h);
    ASSERT_EQ(VCU_EINVAL, vcu_modcache_get(mc, h, buf, sizeof(img)));
    ASSERT_EQ(0, vcu_modcache_put(mc, img, sizeof(img), NULL));
    mc_path(dir, img, sizeof(img), path, sizeof(path));
    ASSERT_EQ(0, stat(path, &st));
    ASSERT_EQ(0600, st.st_mode & 0777);
    ASSERT_EQ(sizeof(img), st.st_size);
    memset(buf, 0, sizeof(buf));
    ASSERT_EQ(0, vcu_modcache_get(mc, h, buf, sizeof(img)));
    ASSERT_EQ(0, memcmp(buf, img, sizeof(img)));
    /* Storing it again changes nothing; no temporary file is left. */
    ASSERT_EQ(0, vcu_modcache_put(mc, img, sizeof(img), NULL));
    ASSERT_EQ(1, mc_count(dir));
    /* The guest's length is wrong: a miss, and the file stays. */
    ASSERT_EQ(VCU_EINVAL, vcu_modcache_get(mc, h, buf, sizeof(img) - 1));
    ASSERT_EQ(0, stat(path, &st));
    /* Another hash: a miss. */
    h[0] ^= 1;
    ASSERT_EQ(VCU_EINVAL, vcu_modcache_get(mc, h, buf, sizeof(img)));
    /* Too large for the bound's quarter: not stored. */
    {
        size_t big = (1 << 20) / 4 + 1;
        char *b = calloc(1, big);

        ASSERT_TRUE(b != NULL);
        ASSERT_EQ(VCU_E2BIG, vcu_modcache_put(mc, b, big, NULL));
        free(b);
    }
    ASSERT_EQ(VCU_E2BIG, vcu_modcache_put(mc, img, 0, NULL));
    ASSERT_EQ(1, mc_count(dir));
    vcu_modcache_free(mc);
    rmdir(sub);
    snprintf(sub, sizeof(sub), "%s/a", dir);
    rmdir(sub);
    mc_rmrf(dir);
    return 0;
}

/* A file whose bytes no longer match its name is a miss, and goes. */
TEST(modcache_corrupt_file)
{
    char *dir = mc_tmpdir(), err[256], path[512];
    static const char img[] = "bytes that will be damaged on disk";
    unsigned char h[VCU_SHA256_LEN], buf[sizeof(img)];
    vcu_modcache_t *mc;
    struct stat st;
    int fd;

    ASSERT_EQ(0, vcu_modcache_open(dir, 0, 0, &mc, err, sizeof(err)));
    ASSERT_EQ(0, vcu_modcache_put(mc, img, sizeof(img), NULL));
    mc_path(dir, img, sizeof(img), path, sizeof(path));
    fd = open(path, O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(1, pwrite(fd, "X", 1, 3));
    close(fd);
    vcu_sha256(img, sizeof(img), h);
    ASSERT_EQ(VCU_EIO, vcu_modcache_get(mc, h, buf, sizeof(img)));
    ASSERT_NE(0, stat(path, &st));
    /* A symbolic link in its place is not followed. */
    ASSERT_EQ(0, symlink("/etc/hostname", path));
    ASSERT_NE(0, vcu_modcache_get(mc, h, buf, sizeof(img)));
    unlink(path);
    /* Stored again after that, it is found again. */
    ASSERT_EQ(0, vcu_modcache_put(mc, img, sizeof(img), NULL));
    ASSERT_EQ(0, vcu_modcache_get(mc, h, buf, sizeof(img)));
    vcu_modcache_free(mc);
    mc_rmrf(dir);
    return 0;
}

/* Sets a cache file's times to t seconds after the epoch. */
static int mc_age(const char *dir, const void *img, size_t len, time_t t)
{
    char path[512];
    struct timespec ts[2] = { { t, 0 }, { t, 0 } };

    mc_path(dir, img, len, path, sizeof(path));
    return utimensat(AT_FDCWD, path, ts, 0);
}

static int mc_has(const char *dir, const void *img, size_t len)
{
    char path[512];
    struct stat st;

    mc_path(dir, img, len, path, sizeof(path));
    return stat(path, &st) == 0;
}

/*
 * Past its bound the cache drops the least recently used files, a hit
 * counting as a use; a guest loading endless distinct modules fills no
 * more than the bound.
 */
TEST(modcache_eviction_lru)
{
    enum { SZ = 10000, BOUND = 64 * 1024 };
    char *dir = mc_tmpdir(), err[256];
    static unsigned char img[40][SZ];
    unsigned char h[VCU_SHA256_LEN];
    static unsigned char buf[SZ];
    vcu_modcache_t *mc;
    int i;

    for (i = 0; i < 40; i++)
        memset(img[i], i + 1, SZ);
    ASSERT_EQ(0, vcu_modcache_open(dir, BOUND, 0, &mc, err, sizeof(err)));
    for (i = 0; i < 6; i++) {
        ASSERT_EQ(0, vcu_modcache_put(mc, img[i], SZ, NULL));
        ASSERT_EQ(0, mc_age(dir, img[i], SZ, 1000 + i));
    }
    ASSERT_EQ(6, mc_count(dir));
    /* img[0] is the oldest, but used now: img[1] goes first. */
    vcu_sha256(img[0], SZ, h);
    ASSERT_EQ(0, vcu_modcache_get(mc, h, buf, SZ));
    ASSERT_EQ(0, vcu_modcache_put(mc, img[6], SZ, NULL));
    ASSERT_EQ(0, vcu_modcache_put(mc, img[7], SZ, NULL));
    ASSERT_LE(vcu_modcache_bytes(mc), BOUND);
    ASSERT_TRUE(mc_has(dir, img[0], SZ));
    ASSERT_TRUE(!mc_has(dir, img[1], SZ));
    ASSERT_TRUE(mc_has(dir, img[7], SZ));
    /* Many more: the directory stays within its bound, give or take what
     * one worker stores between looks (a sixteenth of it). */
    for (i = 8; i < 40; i++) {
        ASSERT_EQ(0, vcu_modcache_put(mc, img[i], SZ, NULL));
        ASSERT_LE((unsigned long long)mc_count(dir) * SZ, BOUND + BOUND / 16 + SZ);
    }
    ASSERT_TRUE(mc_has(dir, img[39], SZ));
    /* Another process's leftover temporary file, an hour old, goes at
     * the next look. */
    {
        char tmp[512];
        struct timespec ts[2] = { { 1, 0 }, { 1, 0 } };
        int fd;

        snprintf(tmp, sizeof(tmp), "%s/.tmp-1-2-3", dir);
        fd = open(tmp, O_WRONLY | O_CREAT, 0600);
        ASSERT_GE(fd, 0);
        close(fd);
        ASSERT_EQ(0, utimensat(AT_FDCWD, tmp, ts, 0));
        for (i = 0; i < 8; i++)
            ASSERT_EQ(0, vcu_modcache_put(mc, img[i], SZ, NULL));
        ASSERT_NE(0, access(tmp, F_OK));
    }
    vcu_modcache_free(mc);
    mc_rmrf(dir);
    return 0;
}

/* Makes dir/name, of n bytes; returns its descriptor (open) or -1. */
static int mc_plant(const char *dir, const char *name, size_t n)
{
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0 && ftruncate(fd, (off_t)n) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int mc_exists(const char *dir, const char *name)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

/* Entries whose name starts with prefix. */
static unsigned int mc_count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    unsigned int n = 0;

    while (d != NULL && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL)
        closedir(d);
    return n;
}

/*
 * A store cut short leaves nothing that counts against the bound.  A
 * named temporary file nobody holds locked (a killed writer's, of the
 * fallback or of an older worker) goes at the next look, however new,
 * before the files are counted: the valid entries survive it.  One a
 * live writer holds locked is counted and left alone until its lock
 * goes.  A writer killed halfway through real stores leaves no file.
 */
TEST(modcache_dead_writer)
{
    enum { SZ = 10000, BOUND = 128 * 1024 };
    static unsigned char img[8][SZ];
    char *dir = mc_tmpdir(), err[256];
    vcu_modcache_t *mc;
    int i, dead, live;

    for (i = 0; i < 8; i++)
        memset(img[i], 0x40 + i, SZ);
    ASSERT_EQ(0, vcu_modcache_open(dir, BOUND, 0, &mc, err, sizeof(err)));
    for (i = 0; i < 4; i++)
        ASSERT_EQ(0, vcu_modcache_put(mc, img[i], SZ, NULL));
    vcu_modcache_free(mc);
    /* A killed writer's 100000 bytes, just now; a live one's 100. */
    dead = mc_plant(dir, ".tmp-1-0-0", 100000);
    ASSERT_GE(dead, 0);
    close(dead);
    live = mc_plant(dir, ".tmp-2-0-0", 100);
    ASSERT_GE(live, 0);
    ASSERT_EQ(0, flock(live, LOCK_EX));
    /* Another worker's first store looks: the dead one goes first, and
     * nothing valid is evicted for it. */
    ASSERT_EQ(0, vcu_modcache_open(dir, BOUND, 0, &mc, err, sizeof(err)));
    ASSERT_EQ(0, vcu_modcache_put(mc, img[4], SZ, NULL));
    ASSERT_TRUE(!mc_exists(dir, ".tmp-1-0-0"));
    ASSERT_TRUE(mc_exists(dir, ".tmp-2-0-0"));
    for (i = 0; i < 5; i++)
        ASSERT_TRUE(mc_has(dir, img[i], SZ));
    ASSERT_EQ_U64(5 * SZ + 100, vcu_modcache_bytes(mc));
    /* Its writer gone, the live one goes at the next look too. */
    close(live);
    ASSERT_EQ(0, vcu_modcache_put(mc, img[5], SZ, NULL));
    ASSERT_TRUE(!mc_exists(dir, ".tmp-2-0-0"));
    ASSERT_EQ_U64(6 * SZ, vcu_modcache_bytes(mc));
    for (i = 0; i < 6; i++)
        ASSERT_TRUE(mc_has(dir, img[i], SZ));
    /* Where there is no O_TMPFILE: a named temporary file, renamed. */
    vcu__modcache_named_only(mc);
    ASSERT_EQ(0, vcu_modcache_put(mc, img[7], SZ, NULL));
    ASSERT_TRUE(mc_has(dir, img[7], SZ));
    ASSERT_EQ(0, (int)mc_count_prefix(dir, ".tmp-"));
    {
        unsigned char h[VCU_SHA256_LEN], buf[SZ];

        vcu_sha256(img[7], SZ, h);
        ASSERT_EQ(0, vcu_modcache_get(mc, h, buf, SZ));
        ASSERT_EQ(0, memcmp(buf, img[7], SZ));
    }
    vcu_modcache_free(mc);

    /* A worker killed while it stores 4 MiB images, again and again. */
    {
        enum { BIG = 4 << 20 };
        pid_t pid = fork();
        int st;

        ASSERT_GE(pid, 0);
        if (pid == 0) {
            unsigned char *b = malloc(BIG);
            unsigned int k;

            if (b == NULL || vcu_modcache_open(dir, 1ull << 30, 0, &mc, err, sizeof(err)) != 0)
                _exit(1);
            for (k = 0;; k++) {
                memset(b, (int)k, BIG);
                b[0] = (unsigned char)(k >> 8);
                vcu_modcache_put(mc, b, BIG, NULL);
            }
        }
        usleep(200 * 1000);
        ASSERT_EQ(0, kill(pid, SIGKILL));
        ASSERT_EQ(pid, waitpid(pid, &st, 0));
        ASSERT_EQ(0, (int)mc_count_prefix(dir, ".tmp-"));
        ASSERT_EQ(0, vcu_modcache_open(dir, 1ull << 30, 0, &mc, err, sizeof(err)));
        ASSERT_EQ(0, vcu_modcache_put(mc, img[6], SZ, NULL));
        for (i = 0; i < 8; i++)
            ASSERT_TRUE(mc_has(dir, img[i], SZ));
        ASSERT_EQ_U64(8 * SZ + (uint64_t)(mc_count(dir) - 8) * BIG, vcu_modcache_bytes(mc));
        vcu_modcache_free(mc);
    }
    mc_rmrf(dir);
    return 0;
}

/* Directories others may write to, or that are not ours, are refused. */
TEST(modcache_bad_dir)
{
    char *dir = mc_tmpdir(), err[256], file[512];
    vcu_modcache_t *mc = NULL;
    int fd;

    ASSERT_EQ(0, chmod(dir, 0777));
    ASSERT_EQ(VCU_EINVAL, vcu_modcache_open(dir, 0, 0, &mc, err, sizeof(err)));
    ASSERT_TRUE(mc == NULL);
    ASSERT_TRUE(strstr(err, "writable by group or others") != NULL);
    ASSERT_EQ(0, chmod(dir, 0720));
    ASSERT_EQ(VCU_EINVAL, vcu_modcache_open(dir, 0, 0, &mc, err, sizeof(err)));
    ASSERT_EQ(0, chmod(dir, 0755));
    ASSERT_EQ(0, vcu_modcache_open(dir, 0, 0, &mc, err, sizeof(err)));
    vcu_modcache_free(mc);
    mc = NULL;
    /* Not a directory, not absolute. */
    snprintf(file, sizeof(file), "%s/f", dir);
    fd = open(file, O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
    ASSERT_NE(0, vcu_modcache_open(file, 0, 0, &mc, err, sizeof(err)));
    ASSERT_EQ(VCU_EINVAL, vcu_modcache_open("relative/dir", 0, 1, &mc, err, sizeof(err)));
    ASSERT_TRUE(mc == NULL);
    unlink(file);
    /* Another user's (only root can give it away). */
    if (geteuid() == 0) {
        ASSERT_EQ(0, chown(dir, 65534, 65534));
        ASSERT_EQ(VCU_EINVAL, vcu_modcache_open(dir, 0, 0, &mc, err, sizeof(err)));
        ASSERT_TRUE(strstr(err, "owned by uid 65534") != NULL);
        ASSERT_TRUE(mc == NULL);
    }
    mc_rmrf(dir);
    return 0;
}

/* ---- through the executor (CPU stand-in) -------------------------------- */

#define MC_IMG "//\n.version 8.0\n.target sm_90\n.visible .entry _Z10vector_addPKfS0_Pfi()\n{\n}\n"

typedef struct {
    vcu_backend_t *be;
    uint64_t s;
    uint64_t feat;
} mc_be_t;

/* A backend (a worker, or another VM) with the cache in dir (NULL: none). */
static int mc_be_open(mc_be_t *b, const char *dir)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.module_cache = dir;
    b->be = NULL;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &b->be));
    if (vcu_backend_cuda_error(b->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s",
                       vcu_backend_cuda_error(b->be));
    ASSERT_EQ(VCU_S_OK, ut_open_ex(b->be, 1, 1,
                                   VCU_FEAT_CUDA | VCU_FEAT_ASYNC | VCU_FEAT_MODULE_CACHE, &b->s,
                                   &b->feat));
    return 0;
}

static void mc_be_close(mc_be_t *b)
{
    ut_close(b->be, b->s);
    vcu_backend_free(b->be);
}

/* CU_MODULE_LOAD_HASH of rq (plus a segment of seg_len bytes if not 0):
 * the CUresult, or 0x10000 + the wire status. */
static uint32_t mc_by_hash(mc_be_t *b, const struct vcu_cu_module_hash_req *rq, size_t seg_len,
                           uint64_t *mod)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_u64_resp rp;
    static char seg[64];
    uint32_t st;

    if (seg_len != 0)
        ut_req_add_seg(t, VCU_SEG_TO_DEVICE, seg, seg_len);
    ut_req_build(t, VCU_OP_CU_MODULE_LOAD_HASH, b->s, rq, sizeof(*rq));
    vcu_backend_execute(b->be, &t->r);
    st = ut_status(t);
    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    if (st != VCU_S_OK)
        return 0x10000 + st;
    if (mod != NULL)
        *mod = rp.value;
    return rp.r.result;
}

static uint32_t mc_full(mc_be_t *b, const char *img, uint64_t *mod)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_module_load_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t st;

    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, (void *)img, strlen(img));
    memset(&rq, 0, sizeof(rq));
    rq.image_len = strlen(img);
    ut_req_build(t, VCU_OP_CU_MODULE_LOAD, b->s, &rq, sizeof(rq));
    vcu_backend_execute(b->be, &t->r);
    st = ut_status(t);
    memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *mod = rp.value;
    return rp.r.result;
}

/* CU_MODULE_LOAD_KEEP of img: the CUresult (or 0x10000 + status); the
 * module and the hash the host returned. */
static uint32_t mc_keep(mc_be_t *b, const char *img, uint64_t *mod, unsigned char *hash)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_module_load_req rq;
    struct vcu_cu_module_keep_resp rp;
    uint32_t st;

    ut_req_add_seg(t, VCU_SEG_TO_DEVICE, (void *)img, strlen(img));
    memset(&rq, 0, sizeof(rq));
    rq.image_len = strlen(img);
    ut_req_build(t, VCU_OP_CU_MODULE_LOAD_KEEP, b->s, &rq, sizeof(rq));
    vcu_backend_execute(b->be, &t->r);
    st = ut_status(t);
    memset(&rp, 0, sizeof(rp));
    if (ut_resp(t)->payload_len >= sizeof(rp))
        memcpy(&rp, ut_resp_payload(t), sizeof(rp));
    free(t);
    if (st != VCU_S_OK)
        return 0x10000 + st;
    *mod = rp.module;
    memcpy(hash, rp.sha256, VCU_SHA256_LEN);
    return rp.r.result;
}

static uint32_t mc_func(mc_be_t *b, uint64_t mod, const char *name)
{
    unsigned char p[sizeof(struct vcu_cu_name_req) + 64];
    struct vcu_cu_name_req rq;
    ut_req_t *t = ut_req_new();
    uint32_t st, res;

    memset(&rq, 0, sizeof(rq));
    rq.module = mod;
    rq.name_len = (uint32_t)strlen(name);
    memcpy(p, &rq, sizeof(rq));
    memcpy(p + sizeof(rq), name, strlen(name));
    ut_req_build(t, VCU_OP_CU_MODULE_GET_FUNCTION, b->s, p,
                 (uint32_t)(sizeof(rq) + strlen(name)));
    vcu_backend_execute(b->be, &t->r);
    st = ut_status(t);
    res = ((struct vcu_cu_resp *)ut_resp_payload(t))->result;
    free(t);
    return st != VCU_S_OK ? 0x10000 + st : res;
}

/*
 * The first load of an image by hash misses; sent whole, it is stored;
 * a new backend (another worker, another VM on the same directory) loads
 * it by hash, and its functions are there.
 */
TEST(cuda_module_cache_hit)
{
    char *dir = mc_tmpdir();
    struct vcu_cu_module_hash_req rq;
    mc_be_t a, b;
    uint64_t mod = 0;

    if (mc_be_open(&a, dir) != 0)
        return 1;
    ASSERT_TRUE(a.feat & VCU_FEAT_MODULE_CACHE);
    memset(&rq, 0, sizeof(rq));
    rq.image_len = strlen(MC_IMG);
    vcu_sha256(MC_IMG, strlen(MC_IMG), rq.sha256);
    ASSERT_EQ(CUDA_ERROR_FILE_NOT_FOUND, mc_by_hash(&a, &rq, 0, &mod));
    ASSERT_EQ(CUDA_SUCCESS, mc_full(&a, MC_IMG, &mod));
    ASSERT_EQ(1, mc_count(dir));
    mc_be_close(&a);

    if (mc_be_open(&b, dir) != 0)
        return 1;
    mod = 0;
    ASSERT_EQ(CUDA_SUCCESS, mc_by_hash(&b, &rq, 0, &mod));
    ASSERT_NE(0, mod);
    ASSERT_EQ(CUDA_SUCCESS, mc_func(&b, mod, "_Z10vector_addPKfS0_Pfi"));
    /* An image the driver refuses is not stored. */
    ASSERT_NE(CUDA_SUCCESS, mc_full(&b, "//\nno version directive\n", &mod));
    ASSERT_EQ(1, mc_count(dir));
    mc_be_close(&b);
    mc_rmrf(dir);
    return 0;
}

/*
 * CU_MODULE_LOAD_KEEP loads what it is sent, stores it, and answers the
 * hash it stored it under, by which the next session loads it.
 */
TEST(cuda_module_cache_keep)
{
    char *dir = mc_tmpdir();
    struct vcu_cu_module_hash_req rq;
    unsigned char want[VCU_SHA256_LEN];
    mc_be_t a, b;
    uint64_t mod = 0;

    if (mc_be_open(&a, dir) != 0)
        return 1;
    memset(&rq, 0, sizeof(rq));
    rq.image_len = strlen(MC_IMG);
    ASSERT_EQ(CUDA_SUCCESS, mc_keep(&a, MC_IMG, &mod, rq.sha256));
    ASSERT_NE(0, mod);
    vcu_sha256(MC_IMG, strlen(MC_IMG), want);
    ASSERT_EQ(0, memcmp(want, rq.sha256, sizeof(want)));
    ASSERT_EQ(CUDA_SUCCESS, mc_func(&a, mod, "_Z10vector_addPKfS0_Pfi"));
    ASSERT_EQ(1, mc_count(dir));
    /* An image the driver refuses: its error, no hash, nothing stored. */
    ASSERT_NE(CUDA_SUCCESS, mc_keep(&a, "//\nno version directive\n", &mod, want));
    ASSERT_EQ(1, mc_count(dir));
    mc_be_close(&a);
    if (mc_be_open(&b, dir) != 0)
        return 1;
    ASSERT_EQ(CUDA_SUCCESS, mc_by_hash(&b, &rq, 0, &mod));
    mc_be_close(&b);
    mc_rmrf(dir);
    return 0;
}

/* What a hostile guest may put in CU_MODULE_LOAD_HASH. */
TEST(cuda_module_cache_hostile)
{
    char *dir = mc_tmpdir();
    struct vcu_cu_module_hash_req rq;
    mc_be_t a, n;
    uint64_t mod;

    if (mc_be_open(&a, dir) != 0)
        return 1;
    ASSERT_EQ(CUDA_SUCCESS, mc_full(&a, MC_IMG, &mod));
    memset(&rq, 0, sizeof(rq));
    vcu_sha256(MC_IMG, strlen(MC_IMG), rq.sha256);
    /* No length, or more than a request may carry: refused. */
    rq.image_len = 0;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, mc_by_hash(&a, &rq, 0, NULL));
    rq.image_len = VCU_MAX_XFER + 1;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, mc_by_hash(&a, &rq, 0, NULL));
    rq.image_len = UINT64_MAX;
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, mc_by_hash(&a, &rq, 0, NULL));
    /* Data segments have no place in it. */
    rq.image_len = strlen(MC_IMG);
    ASSERT_EQ(0x10000 + VCU_S_EINVAL, mc_by_hash(&a, &rq, 16, NULL));
    /* The right hash with a wrong length: a miss, nothing read. */
    rq.image_len = strlen(MC_IMG) + 1;
    ASSERT_EQ(CUDA_ERROR_FILE_NOT_FOUND, mc_by_hash(&a, &rq, 0, NULL));
    /* A length past the session's host memory budget (256 MiB): out of
     * memory, as the full send of such an image would be. */
    rq.image_len = (uint64_t)512 << 20;
    ASSERT_EQ(CUDA_ERROR_OUT_OF_MEMORY, mc_by_hash(&a, &rq, 0, NULL));
    /* A device the session lacks. */
    rq.image_len = strlen(MC_IMG);
    rq.hdr.device = 7;
    ASSERT_NE(CUDA_SUCCESS, mc_by_hash(&a, &rq, 0, NULL));
    rq.hdr.device = 0;
    ASSERT_EQ(CUDA_SUCCESS, mc_by_hash(&a, &rq, 0, &mod));
    mc_be_close(&a);

    /* Without a cache the feature is not offered, and the opcode is
     * refused. */
    if (mc_be_open(&n, NULL) != 0)
        return 1;
    ASSERT_EQ(0, n.feat & VCU_FEAT_MODULE_CACHE);
    ASSERT_EQ(0x10000 + VCU_S_ENOTSUP, mc_by_hash(&n, &rq, 0, NULL));
    {
        unsigned char h[VCU_SHA256_LEN];

        ASSERT_EQ(0x10000 + VCU_S_ENOTSUP, mc_keep(&n, MC_IMG, &mod, h));
    }
    mc_be_close(&n);
    mc_rmrf(dir);
    return 0;
}

/* A cache directory the backend may not use leaves loads working. */
TEST(cuda_module_cache_bad_dir)
{
    char *dir = mc_tmpdir();
    struct vcu_cu_module_hash_req rq;
    mc_be_t a;
    uint64_t mod;

    ASSERT_EQ(0, chmod(dir, 0777));
    if (mc_be_open(&a, dir) != 0)
        return 1;
    ASSERT_EQ(0, a.feat & VCU_FEAT_MODULE_CACHE);
    ASSERT_EQ(CUDA_SUCCESS, mc_full(&a, MC_IMG, &mod));
    ASSERT_EQ(0, mc_count(dir));
    memset(&rq, 0, sizeof(rq));
    rq.image_len = strlen(MC_IMG);
    ASSERT_EQ(0x10000 + VCU_S_ENOTSUP, mc_by_hash(&a, &rq, 0, NULL));
    mc_be_close(&a);
    mc_rmrf(dir);
    return 0;
}
