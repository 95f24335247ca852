/*
 * The name of a module in the host's module cache (CU_MODULE_LOAD_HASH):
 * the SHA-256 of the image the guest would send.  Shared by libcuda.so.1
 * and libcudart.so.13 (vcu_common.h).
 *
 * Hashing is what the cache would cost the guest, and under TCG it costs
 * more than sending (6 MB: 110-120 ms against about 20 ms, docs/design.md
 * "Module cache").  So the guest does not hash: it sends an image the
 * first time with CU_MODULE_LOAD_KEEP, whose reply carries the SHA-256
 * the host computed to store it, and remembers that.  Most images come
 * from the fatbin sections of shared libraries, the same bytes in every
 * process, so what is remembered is the hash of an image read from a
 * read-only file mapping, per guest user, in
 * $XDG_CACHE_HOME/virtio-cuda/hashes (else ~/.cache/..., else
 * /tmp/virtio-cuda-hashes-<uid>): one small file per (file, offset,
 * length, architecture), named by the SHA-256 of that key.  Images from
 * anywhere else (heap buffers) are sent, unless VCU_MODULE_CACHE=all,
 * which hashes them here and names them.  The file is named by device, inode, size, mtime and ctime; any
 * write to it changes its ctime, which no unprivileged user can set back,
 * so a memo never outlives the bytes it describes.  A wrong memo could
 * only make this user's own processes name another module than they hold
 * (the host stores and serves only verified bytes), and the memo
 * directory is refused unless it is the user's own and closed to others.
 * VCU_MODULE_MEMO=off turns the memo off (every image is hashed).
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "vcu_common.h"
#include "vcu_proto.h"
#include "vcu_sha256.h"

/* A read-only file mapping of this process (/proc/self/maps). */
typedef struct vcu__fmap_s {
    uintptr_t start, end;
    uint64_t off;                   /* file offset of start */
    unsigned int major, minor;
    uint64_t ino;
    char *path;
} vcu__fmap_t;

/* What a memo file holds. */
struct vcu__memo {
    char magic[8];                  /* VCU__MEMO_MAGIC */
    uint64_t len;                   /* the image's length as sent */
    unsigned char sha256[VCU_SHA256_LEN];
};

#define VCU__MEMO_MAGIC "vcumh1\n"

/* Protects every static below; taken by module loads, on any thread. */
static pthread_mutex_t vcu__mh_lock = PTHREAD_MUTEX_INITIALIZER;
static vcu__fmap_t *vcu__maps;
static size_t vcu__nmaps;
static int vcu__memo_dfd = -2;      /* -2: not opened yet; -1: no memo */
static unsigned long long vcu__maps_gen = ~0ull;   /* loader's adds + subs at the last read */

static int vcu__gen_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(unsigned long long *)arg = info->dlpi_adds + info->dlpi_subs;
    return 1;
}

/* Changes whenever the loader maps or unmaps an object. */
static unsigned long long vcu__loader_gen(void)
{
    unsigned long long g = 0;

    dl_iterate_phdr(vcu__gen_cb, &g);
    return g;
}

static void vcu__maps_free(void)
{
    for (size_t i = 0; i < vcu__nmaps; i++)
        free(vcu__maps[i].path);
    free(vcu__maps);
    vcu__maps = NULL;
    vcu__nmaps = 0;
}

/* Reads this process's read-only file mappings.  Caller holds the lock. */
static void vcu__maps_read(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[4096 + 128];
    size_t cap = 0;

    vcu__maps_free();
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long start, end, off, ino;
        unsigned int ma, mi;
        char perm[5], *path;
        int n = 0;

        if (sscanf(line, "%lx-%lx %4s %lx %x:%x %lu %n", &start, &end, perm, &off, &ma, &mi,
                   &ino, &n) != 7 ||
            n == 0 || ino == 0 || perm[1] == 'w')
            continue;
        path = line + n;
        path[strcspn(path, "\n")] = '\0';
        if (path[0] != '/' || strstr(path, " (deleted)") != NULL)
            continue;
        if (vcu__nmaps == cap) {
            size_t nc = cap ? cap * 2 : 64;
            vcu__fmap_t *nm = realloc(vcu__maps, nc * sizeof(*nm));

            if (nm == NULL)
                break;
            vcu__maps = nm;
            cap = nc;
        }
        vcu__maps[vcu__nmaps] = (vcu__fmap_t){ start, end, off, ma, mi, ino, strdup(path) };
        if (vcu__maps[vcu__nmaps].path != NULL)
            vcu__nmaps++;
    }
    fclose(f);
}

static const vcu__fmap_t *vcu__maps_find(uintptr_t a, uint64_t len)
{
    for (size_t i = 0; i < vcu__nmaps; i++)
        if (a >= vcu__maps[i].start && a < vcu__maps[i].end && len <= vcu__maps[i].end - a)
            return &vcu__maps[i];
    return NULL;
}

/* The memo directory, made and checked once.  Caller holds the lock. */
static int vcu__memo_dir(void)
{
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME"), *off = getenv("VCU_MODULE_MEMO");
    char dir[4096];
    struct stat st;
    int n, fd;

    if (vcu__memo_dfd != -2)
        return vcu__memo_dfd;
    vcu__memo_dfd = -1;
    if (off != NULL && strcmp(off, "off") == 0)
        return -1;
    if (x != NULL && x[0] == '/')
        n = snprintf(dir, sizeof(dir), "%s/virtio-cuda/hashes", x);
    else if (h != NULL && h[0] == '/' && strcmp(h, "/") != 0)
        n = snprintf(dir, sizeof(dir), "%s/.cache/virtio-cuda/hashes", h);
    else
        n = snprintf(dir, sizeof(dir), "/tmp/virtio-cuda-hashes-%u", (unsigned int)geteuid());
    if (n < 0 || (size_t)n >= sizeof(dir))
        return -1;
    for (char *s = dir + 1;; s++) {
        char c = *s;

        if (c != '/' && c != '\0')
            continue;
        *s = '\0';
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return -1;
        *s = c;
        if (c == '\0')
            break;
    }
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        close(fd);
        return -1;
    }
    vcu__memo_dfd = fd;
    return fd;
}

/* Fills id from the mapping of src; caller holds the lock. */
static int vcu__src_id_locked(const void *src, uint64_t src_len, char *id, size_t cap)
{
    const vcu__fmap_t *m = vcu__maps_find((uintptr_t)src, src_len);
    struct stat st;
    int n;

    /* Not found: read the mappings again only if a library came or went
     * since (an image in the heap is never found, and reading them under
     * TCG costs). */
    if (m == NULL && vcu__loader_gen() != vcu__maps_gen) {
        vcu__maps_gen = vcu__loader_gen();
        vcu__maps_read();
        m = vcu__maps_find((uintptr_t)src, src_len);
    }
    if (m == NULL || stat(m->path, &st) != 0 || st.st_ino != m->ino ||
        major(st.st_dev) != m->major || minor(st.st_dev) != m->minor)
        return 0;
    n = snprintf(id, cap, "%u:%u %llu %lld %lld.%09ld %lld.%09ld %llu %llu", m->major, m->minor,
                 (unsigned long long)st.st_ino, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (long long)st.st_ctim.tv_sec,
                 st.st_ctim.tv_nsec, (unsigned long long)(m->off + ((uintptr_t)src - m->start)),
                 (unsigned long long)src_len);
    return n > 0 && (size_t)n < cap;
}

int vcu__module_src_id(const void *src, uint64_t src_len, char *id, size_t cap)
{
    const char *e = getenv("VCU_MODULE_MEMO");
    int ok;

    id[0] = '\0';
    if (e != NULL && strcmp(e, "off") == 0)
        return 0;
    pthread_mutex_lock(&vcu__mh_lock);
    ok = vcu__src_id_locked(src, src_len, id, cap);
    pthread_mutex_unlock(&vcu__mh_lock);
    if (!ok)
        id[0] = '\0';
    return ok;
}

/* The memo file name of the image from src_id trimmed for arch. */
static void vcu__memo_name(const char *src_id, unsigned int arch, char name[65])
{
    unsigned char h[VCU_SHA256_LEN];
    char key[256];
    int n = snprintf(key, sizeof(key), "trim1 %s %u", src_id, arch);

    vcu_sha256(key, n > 0 && (size_t)n < sizeof(key) ? (size_t)n : strlen(key), h);
    for (int i = 0; i < VCU_SHA256_LEN; i++)
        snprintf(name + 2 * i, 3, "%02x", h[i]);
}

static int vcu__memo_get(int dfd, const char *name, uint64_t len, unsigned char *sha)
{
    struct vcu__memo mm;
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t got;

    if (fd < 0)
        return 0;
    got = read(fd, &mm, sizeof(mm));
    close(fd);
    if (got != (ssize_t)sizeof(mm) || memcmp(mm.magic, VCU__MEMO_MAGIC, sizeof(mm.magic)) != 0 ||
        mm.len != len)
        return 0;
    memcpy(sha, mm.sha256, VCU_SHA256_LEN);
    return 1;
}

static void vcu__memo_put(int dfd, const char *name, uint64_t len, const unsigned char *sha)
{
    struct vcu__memo mm;
    char tmp[96];
    int fd;

    memset(&mm, 0, sizeof(mm));
    memcpy(mm.magic, VCU__MEMO_MAGIC, sizeof(mm.magic));
    mm.len = len;
    memcpy(mm.sha256, sha, VCU_SHA256_LEN);
    snprintf(tmp, sizeof(tmp), ".tmp-%ld-%s", (long)getpid(), name);
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    if (write(fd, &mm, sizeof(mm)) != (ssize_t)sizeof(mm) || close(fd) != 0 ||
        renameat(dfd, tmp, dfd, name) != 0)
        unlinkat(dfd, tmp, 0);
}

void vcu__module_name(const vcu_conn_t *c, uint32_t vord, const void *img, uint64_t len,
                      const char *src_id, unsigned int arch, vcu__modname_t *n)
{
    const char *e = getenv("VCU_MODULE_CACHE");

    memset(n, 0, sizeof(*n));
    n->how = VCU__MN_SEND;
    n->dfd = -1;
    if (!(vcu_conn_features(c) & VCU_FEAT_MODULE_CACHE) || (e != NULL && strcmp(e, "off") == 0))
        return;
    n->req.hdr.device = vord;
    n->req.image_len = len;
    if (src_id != NULL && src_id[0] != '\0') {
        pthread_mutex_lock(&vcu__mh_lock);
        n->dfd = vcu__memo_dir();
        pthread_mutex_unlock(&vcu__mh_lock);
    }
    if (n->dfd >= 0) {
        /* Named by the memo, or sent and its hash kept from the reply. */
        vcu__memo_name(src_id, arch, n->memo);
        n->how = vcu__memo_get(n->dfd, n->memo, len, n->req.sha256) ? VCU__MN_REMEMBERED
                                                                    : VCU__MN_SEND;
        n->keep = 1;
    } else if (e != NULL && strcmp(e, "all") == 0) {
        vcu_sha256(img, (size_t)len, n->req.sha256);
        n->how = VCU__MN_NAMED;
    }
}

void vcu__module_remember(const vcu__modname_t *n, const unsigned char *sha256)
{
    if (n->keep && n->dfd >= 0)
        vcu__memo_put(n->dfd, n->memo, n->req.image_len, sha256);
}
