/*
 * The host's content-addressed module cache (vcu_modcache.h): one file
 * per image, named by the lowercase hex SHA-256 of its bytes, in a
 * directory of the host user's own.
 *
 * Concurrency: any number of workers (processes) use one directory.
 * Files appear whole: an image is written to an unnamed file (O_TMPFILE)
 * and linked under its name once complete, through /proc/self/fd (which
 * the workers' jail mounts: linkat() of the descriptor itself with
 * AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH), so a reader sees a whole
 * image or none, and a worker killed while writing leaves nothing: the
 * kernel frees an unnamed file with its last descriptor.  Two workers
 * storing the same image: the second link finds the first's file, with
 * the same bytes.  Where the file system has no O_TMPFILE (or /proc is
 * missing), the image goes to a ".tmp-" file that its writer holds an
 * advisory lock (flock) on until it is renamed into place: one that
 * nobody holds locked is a dead writer's, and the next look removes it
 * before it counts (a look that catches a writer between its create and
 * its lock costs that one store, never a wrong file).  Eviction takes
 * an advisory lock on the directory, so two workers do not both count
 * and evict; readers take no lock (a file evicted while open stays
 * readable through its descriptor).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE                 /* O_TMPFILE */
#endif
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
    bool no_tmpfile;                /* O_TMPFILE or /proc is missing: named temporaries */
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

/*
 * Creates dir if missing (mode 0700; with mkparents its missing parents
 * too), opens it (O_DIRECTORY, into *fd, the caller closes it) and checks
 * that it is this process's user's and writable by nobody else: another
 * user's directory, or one others may write to, would let them plant or
 * swap the images our workers load.  0, or VCU_EINVAL (refused) or
 * VCU_EIO with a one-line reason naming the directory in err.
 */
static int vcu_modcache_dir_open(const char *dir, int mkparents, int *fd, char *err,
                                 size_t errlen)
{
    struct stat st;
    int e = 0;

    *fd = -1;
    if (dir == NULL || dir[0] != '/') {
        snprintf(err, errlen, "module cache %s: not an absolute path", dir ? dir : "(none)");
        return VCU_EINVAL;
    }
    if (mkparents) {
        char *p = strdup(dir), *s;

        if (p == NULL)
            e = ENOMEM;
        for (s = p != NULL ? p + 1 : NULL; s != NULL && e == 0; s++) {
            char c = *s;

            if (c != '/' && c != '\0')
                continue;
            *s = '\0';
            if (mkdir(p, 0700) != 0 && errno != EEXIST)
                e = errno;
            *s = c;
            if (c == '\0')
                break;
        }
        free(p);
    } else if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        e = errno;
    }
    if (e != 0) {
        snprintf(err, errlen, "module cache %s: cannot create it: %s", dir, strerror(e));
        return VCU_EIO;
    }
    *fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0 || fstat(*fd, &st) != 0) {
        e = errno;
        snprintf(err, errlen, "module cache %s: %s", dir, strerror(e));
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
        return e == ENOTDIR ? VCU_EINVAL : VCU_EIO;
    }
    if (st.st_uid != geteuid()) {
        snprintf(err, errlen,
                 "module cache %s: owned by uid %u, not by this process's uid %u: refused "
                 "(give module-cache a directory of your own, or module-cache=off)",
                 dir, (unsigned int)st.st_uid, (unsigned int)geteuid());
        e = 1;
    } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(err, errlen,
                 "module cache %s: writable by group or others (mode %03o): refused "
                 "(chmod go-w it, or module-cache=off)",
                 dir, (unsigned int)(st.st_mode & 0777));
        e = 1;
    }
    if (e != 0) {
        close(*fd);
        *fd = -1;
        return VCU_EINVAL;
    }
    return 0;
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

void vcu__modcache_named_only(vcu_modcache_t *mc)
{
    pthread_mutex_lock(&mc->mu);
    mc->no_tmpfile = true;
    pthread_mutex_unlock(&mc->mu);
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

/* Whether the temporary file name is a dead writer's (nobody holds it
 * locked); if so it is removed, while this process holds its lock. */
static bool vcu__mc_tmp_reap(vcu_modcache_t *mc, const char *name)
{
    struct stat a, b;
    bool dead = false;
    int fd = openat(mc->dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

    if (fd < 0)
        return errno == ENOENT;     /* gone already */
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 &&
        fstatat(mc->dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev)
        dead = unlinkat(mc->dfd, name, 0) == 0 || errno == ENOENT;
    close(fd);
    return dead;
}

/* Counts the directory's files and removes the least recently used ones
 * while it is past the bound; a dead writer's temporary file goes first,
 * a live one's counts (it becomes a file).  Under the directory's lock. */
static void vcu__mc_look(vcu_modcache_t *mc)
{
    vcu__mc_ent_t *ent = NULL;
    size_t n = 0, cap = 0, i;
    uint64_t total = 0;
    struct dirent *d;
    DIR *dir;
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
            /* A store cut short (its worker was killed), or one going on. */
            if (!vcu__mc_tmp_reap(mc, d->d_name))
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

static int vcu__mc_write(vcu_modcache_t *mc, int fd, const void *img, uint64_t len)
{
    uint64_t off = 0;

    while (off < len) {
        ssize_t n = write(fd, (const char *)img + off, len - off);

        if (n <= 0) {
            vcu__mc_warn(mc, "write", n < 0 ? errno : ENOSPC);
            return VCU_EIO;
        }
        off += (uint64_t)n;
    }
    return 0;
}

/*
 * Links the complete unnamed file fd as name.  0; VCU_ENOTSUP when
 * /proc/self/fd cannot name it (no /proc: named temporaries from now
 * on); VCU_EIO.  A file already there of len bytes is another writer's
 * copy of these bytes; one of another size is damaged, and replaced.
 */
static int vcu__mc_link(vcu_modcache_t *mc, int fd, const char *name, uint64_t len)
{
    char p[64];
    struct stat st;
    int tries;

    snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
    for (tries = 0; tries < 2; tries++) {
        if (linkat(AT_FDCWD, p, mc->dfd, name, AT_SYMLINK_FOLLOW) == 0)
            return 0;
        if (errno == ENOENT) {
            mc->no_tmpfile = true;
            return VCU_ENOTSUP;
        }
        if (errno != EEXIST)
            break;
        if (fstatat(mc->dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            (uint64_t)st.st_size == len)
            return 0;
        if (unlinkat(mc->dfd, name, 0) != 0 && errno != ENOENT)
            break;
    }
    vcu__mc_warn(mc, "store", errno);
    return VCU_EIO;
}

/* Stores through an unnamed file: 0, VCU_ENOTSUP (no O_TMPFILE or no
 * /proc here: named temporaries, then) or VCU_EIO. */
static int vcu__mc_put_tmpfile(vcu_modcache_t *mc, const void *img, uint64_t len,
                               const char *name)
{
    int fd, rc;

    fd = openat(mc->dfd, ".", O_WRONLY | O_TMPFILE | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
            mc->no_tmpfile = true;
            return VCU_ENOTSUP;
        }
        vcu__mc_warn(mc, "create", errno);
        return VCU_EIO;
    }
    rc = vcu__mc_write(mc, fd, img, len);
    if (rc == 0)
        rc = vcu__mc_link(mc, fd, name, len);
    close(fd);
    return rc;
}

/* Stores through a named temporary file, locked while it is written. */
static int vcu__mc_put_named(vcu_modcache_t *mc, const void *img, uint64_t len,
                             const char *name)
{
    char tmp[64];
    int fd = -1, tries;

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
    if (flock(fd, LOCK_EX) != 0 || vcu__mc_write(mc, fd, img, len) != 0 ||
        renameat(mc->dfd, tmp, mc->dfd, name) != 0) {
        vcu__mc_warn(mc, "store", errno);
        unlinkat(mc->dfd, tmp, 0);
        close(fd);
        return VCU_EIO;
    }
    close(fd);                      /* the lock with it, once it has its name */
    return 0;
}

static int vcu__mc_put(vcu_modcache_t *mc, const void *img, uint64_t len,
                       const unsigned char hash[VCU_SHA256_LEN])
{
    char name[VCU__MC_NAME_LEN + 1];
    struct stat st;
    int rc = VCU_ENOTSUP;

    if (len == 0 || len > mc->max / 4)
        return VCU_E2BIG;
    vcu__mc_name(hash, name);
    if (fstatat(mc->dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        (uint64_t)st.st_size == len) {
        utimensat(mc->dfd, name, NULL, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    if (!mc->no_tmpfile)
        rc = vcu__mc_put_tmpfile(mc, img, len, name);
    if (rc == VCU_ENOTSUP)
        rc = vcu__mc_put_named(mc, img, len, name);
    if (rc != 0)
        return rc;
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
