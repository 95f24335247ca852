/*
 * The host's content-addressed module cache (vcu_modcache.h): one file
 * per image, named by the lowercase hex SHA-256 of its bytes, in a
 * directory of the host user's own.
 *
 * Concurrency: any number of workers (processes) use one directory.
 * Files appear by rename() of a complete temporary file, so a reader sees
 * a whole image or none; two workers storing the same image both rename
 * theirs, and either wins with the same bytes.  Eviction takes an
 * advisory lock (flock) on the directory, so two workers do not both
 * count and evict; readers take no lock (a file evicted while open stays
 * readable through its descriptor).  A worker killed while writing leaves
 * a ".tmp-" file: counted, and removed by the next look once it is an
 * hour old.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vcu_proto.h"
#include "vcu_modcache.h"

#define VCU__MC_NAME_LEN (2 * VCU_SHA256_LEN)
#define VCU__MC_TMP ".tmp-"
#define VCU__MC_TMP_AGE_S 3600

struct vcu_modcache_s {
    /* Serializes get and put (the in-process backend runs sessions on
     * threads of their own; a worker has one session). */
    pthread_mutex_t mu;
    int dfd;                        /* the directory, O_DIRECTORY */
    char *dir;                      /* its path, for messages */
    uint64_t max;                   /* bound on the files' bytes */
    uint64_t bytes;                 /* at the last look, plus our stores since */
    uint64_t since;                 /* our stores since the last look */
    bool looked;
    bool warned;                    /* an I/O error was logged (once) */
    unsigned int seq;               /* temporary file names */
};

static void vcu__mc_warn(vcu_modcache_t *mc, const char *what, int err)
{
    if (mc->warned)
        return;
    mc->warned = true;
    fprintf(stderr,
            "vcu: module cache %s: %s: %s (loads go on, sending whole images; "
            "reported once)\n",
            mc->dir, what, strerror(err));
}

static void vcu__mc_name(const unsigned char hash[VCU_SHA256_LEN], char name[VCU__MC_NAME_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";

    for (unsigned int i = 0; i < VCU_SHA256_LEN; i++) {
        name[2 * i] = hex[hash[i] >> 4];
        name[2 * i + 1] = hex[hash[i] & 15];
    }
    name[VCU__MC_NAME_LEN] = '\0';
}

static bool vcu__mc_is_name(const char *s)
{
    size_t i;

    for (i = 0; i < VCU__MC_NAME_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[i] == '\0';
}

int vcu_modcache_open(const char *dir, uint64_t max_bytes, int mkparents, vcu_modcache_t **out,
                      char *err, size_t errlen)
{
    vcu_modcache_t *mc;
    int fd, rc;

    *out = NULL;
    rc = vcu_modcache_dir_open(dir, mkparents, &fd, err, errlen);
    if (rc != 0)
        return rc;
    mc = calloc(1, sizeof(*mc));
    if (mc == NULL || (mc->dir = strdup(dir)) == NULL) {
        free(mc);
        close(fd);
        snprintf(err, errlen, "module cache: out of memory");
        return VCU_ENOMEM;
    }
    pthread_mutex_init(&mc->mu, NULL);
    mc->dfd = fd;
    mc->max = max_bytes != 0 ? max_bytes : VCU_MODCACHE_DEFAULT_BYTES;
    *out = mc;
    return 0;
}

void vcu_modcache_free(vcu_modcache_t *mc)
{
    if (mc == NULL)
        return;
    pthread_mutex_destroy(&mc->mu);
    close(mc->dfd);
    free(mc->dir);
    free(mc);
}

uint64_t vcu_modcache_bytes(const vcu_modcache_t *mc)
{
    return mc->bytes;
}

static int vcu__mc_get(vcu_modcache_t *mc, const unsigned char hash[VCU_SHA256_LEN], void *buf,
                       uint64_t len)
{
    char name[VCU__MC_NAME_LEN + 1];
    unsigned char got[VCU_SHA256_LEN];
    struct stat st;
    uint64_t off = 0;
    int fd;

    vcu__mc_name(hash, name);
    fd = openat(mc->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT)
            return VCU_EINVAL;
        vcu__mc_warn(mc, "open", errno);
        return VCU_EIO;
    }
    /* A size other than the guest's says only that the guest's claim is
     * wrong: a miss, and the file stays. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (uint64_t)st.st_size != len) {
        close(fd);
        return VCU_EINVAL;
    }
    while (off < len) {
        ssize_t n = pread(fd, (char *)buf + off, len - off, (off_t)off);

        if (n <= 0) {
            vcu__mc_warn(mc, "read", n < 0 ? errno : EIO);
            close(fd);
            return VCU_EIO;
        }
        off += (uint64_t)n;
    }
    vcu_sha256(buf, len, got);
    if (memcmp(got, hash, VCU_SHA256_LEN) != 0) {
        /* The name is the hash of what was stored: these bytes changed. */
        vcu__mc_warn(mc, "a file does not match its name (removed)", EIO);
        unlinkat(mc->dfd, name, 0);
        close(fd);
        return VCU_EIO;
    }
    futimens(fd, NULL);             /* used now (eviction order) */
    close(fd);
    return 0;
}

typedef struct vcu__mc_ent_s {
    struct timespec mtime;
    uint64_t size;
    char name[VCU__MC_NAME_LEN + 1];
} vcu__mc_ent_t;

static int vcu__mc_older(const void *a, const void *b)
{
    const vcu__mc_ent_t *x = a, *y = b;

    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Counts the directory's files and removes the least recently used ones
 * while it is past the bound.  Under the directory's lock. */
static void vcu__mc_look(vcu_modcache_t *mc)
{
    vcu__mc_ent_t *ent = NULL;
    size_t n = 0, cap = 0, i;
    uint64_t total = 0;
    struct dirent *d;
    DIR *dir;
    time_t now = time(NULL);
    int fd;

    if (flock(mc->dfd, LOCK_EX) != 0) {
        vcu__mc_warn(mc, "lock", errno);
        return;
    }
    fd = openat(mc->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        vcu__mc_warn(mc, "list", errno);
        if (fd >= 0)
            close(fd);
        goto out;
    }
    while ((d = readdir(dir)) != NULL) {
        struct stat st;
        bool tmp = strncmp(d->d_name, VCU__MC_TMP, strlen(VCU__MC_TMP)) == 0;

        if ((!tmp && !vcu__mc_is_name(d->d_name)) ||
            fstatat(mc->dfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (tmp) {
            /* A store cut short (its worker was killed). */
            if (now - st.st_mtime > VCU__MC_TMP_AGE_S && unlinkat(mc->dfd, d->d_name, 0) == 0)
                continue;
            total += (uint64_t)st.st_size;
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            vcu__mc_ent_t *ne = realloc(ent, nc * sizeof(*ent));

            if (ne == NULL) {
                vcu__mc_warn(mc, "list", ENOMEM);
                closedir(dir);
                goto out;
            }
            ent = ne;
            cap = nc;
        }
        ent[n].mtime = st.st_mtim;
        ent[n].size = (uint64_t)st.st_size;
        memcpy(ent[n].name, d->d_name, sizeof(ent[n].name));
        total += ent[n].size;
        n++;
    }
    closedir(dir);
    if (total > mc->max) {
        qsort(ent, n, sizeof(*ent), vcu__mc_older);
        for (i = 0; i < n && total > mc->max; i++)
            if (unlinkat(mc->dfd, ent[i].name, 0) == 0 || errno == ENOENT)
                total -= ent[i].size;
    }
    mc->bytes = total;
    mc->since = 0;
    mc->looked = true;
out:
    free(ent);
    flock(mc->dfd, LOCK_UN);
}

static int vcu__mc_put(vcu_modcache_t *mc, const void *img, uint64_t len,
                       const unsigned char hash[VCU_SHA256_LEN])
{
    char name[VCU__MC_NAME_LEN + 1], tmp[64];
    struct stat st;
    uint64_t off = 0;
    int fd = -1, tries;

    if (len == 0 || len > mc->max / 4)
        return VCU_E2BIG;
    vcu__mc_name(hash, name);
    if (fstatat(mc->dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size == len) {
        utimensat(mc->dfd, name, NULL, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    for (tries = 0; tries < 16 && fd < 0; tries++) {
        snprintf(tmp, sizeof(tmp), VCU__MC_TMP "%ld-%u-%lx", (long)getpid(), mc->seq++,
                 (unsigned long)random());
        fd = openat(mc->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        vcu__mc_warn(mc, "create", errno);
        return VCU_EIO;
    }
    while (off < len) {
        ssize_t n = write(fd, (const char *)img + off, len - off);

        if (n <= 0) {
            vcu__mc_warn(mc, "write", n < 0 ? errno : ENOSPC);
            close(fd);
            unlinkat(mc->dfd, tmp, 0);
            return VCU_EIO;
        }
        off += (uint64_t)n;
    }
    if (close(fd) != 0 || renameat(mc->dfd, tmp, mc->dfd, name) != 0) {
        vcu__mc_warn(mc, "store", errno);
        unlinkat(mc->dfd, tmp, 0);
        return VCU_EIO;
    }
    mc->bytes += len;
    mc->since += len;
    if (!mc->looked || mc->bytes > mc->max || mc->since > mc->max / 16)
        vcu__mc_look(mc);
    return 0;
}

int vcu_modcache_get(vcu_modcache_t *mc, const unsigned char hash[VCU_SHA256_LEN], void *buf,
                     uint64_t len)
{
    int rc;

    pthread_mutex_lock(&mc->mu);
    rc = vcu__mc_get(mc, hash, buf, len);
    pthread_mutex_unlock(&mc->mu);
    return rc;
}

int vcu_modcache_put(vcu_modcache_t *mc, const void *img, uint64_t len,
                     unsigned char hash[VCU_SHA256_LEN])
{
    unsigned char h[VCU_SHA256_LEN];
    int rc;

    vcu_sha256(img, (size_t)len, h);
    if (hash != NULL)
        memcpy(hash, h, sizeof(h));
    pthread_mutex_lock(&mc->mu);
    rc = vcu__mc_put(mc, img, len, h);
    pthread_mutex_unlock(&mc->mu);
    return rc;
}
