/*
 * The host's module cache: module images (what a guest sent in
 * CU_MODULE_LOAD, after its trimming) stored in a directory under the
 * SHA-256 of their bytes, shared by every session and every VM that names
 * the same directory.  A guest names an image it has seen loaded by its
 * hash (CU_MODULE_LOAD_HASH) instead of sending it again.
 * docs/design.md, "Module cache".
 *
 * Trust: a file's name is always the hash the host computed over the
 * bytes it received, never one a guest gave (no guest can store bytes
 * under a hash they do not have), and an image read back is hashed again
 * before it is used (a damaged or replaced file is a miss, and is
 * removed).  The directory must be the process's user's and writable by
 * nobody else; files are created 0600.
 *
 * Bounded: after a store that brings the directory past max_bytes, the
 * files used least recently (mtime: set at store and at each hit) are
 * removed until it is within.  Workers share the directory: each knows
 * what it stored itself since it last looked, and looks again (under an
 * advisory lock on the directory) when that passes max_bytes / 16, so
 * the directory passes the bound by at most that much per storing
 * worker, until that worker's next store.
 *
 * Any failure of the cache's I/O leaves a load to the full send; the
 * cache never fails a load.  Thread safe (gets and puts of one cache
 * object are serialized).
 */
#ifndef VCU_MODCACHE_H
#define VCU_MODCACHE_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vcu_proto.h"
#include "vcu_sha256.h"

typedef struct vcu_modcache_s vcu_modcache_t;

/* Default bound on the directory's size. */
#define VCU_MODCACHE_DEFAULT_BYTES ((uint64_t)1 << 30)

/*
 * Opens the cache in dir (vcu_modcache_dir_open: created if missing,
 * refused if another user's or writable by others, err saying why).
 * max_bytes 0 means VCU_MODCACHE_DEFAULT_BYTES.
 * The caller frees *out with vcu_modcache_free().  0, VCU_EINVAL (refused),
 * VCU_EIO or VCU_ENOMEM.
 */
int vcu_modcache_open(const char *dir, uint64_t max_bytes, int mkparents, vcu_modcache_t **out,
                      char *err, size_t errlen);

void vcu_modcache_free(vcu_modcache_t *mc);

/*
 * Reads the image stored under hash into buf, which holds len bytes: 0
 * only if a file of exactly len bytes is there and its bytes hash to
 * hash (the file is then marked used now).  VCU_EINVAL: not there, or of
 * another size; VCU_EIO: unreadable, or its bytes do not match its name
 * (it is removed).  buf's contents are undefined on failure.
 */
int vcu_modcache_get(vcu_modcache_t *mc, const unsigned char hash[VCU_SHA256_LEN], void *buf,
                     uint64_t len);

/*
 * Stores len bytes of img under their SHA-256 (computed here, into hash
 * if not NULL, whatever the outcome), unless that file is there already
 * (then only marks it used).  Atomic: written to an unnamed file in the
 * directory and linked under its name once complete (else to a locked
 * temporary file, renamed); a reader never sees a partial file, and a
 * writer killed halfway leaves nothing the cache counts.  An image
 * larger than a quarter of the bound is not stored (VCU_E2BIG).  May
 * evict.  0, or VCU_E* (nothing stored).
 */
int vcu_modcache_put(vcu_modcache_t *mc, const void *img, uint64_t len,
                     unsigned char hash[VCU_SHA256_LEN]);

/* Bytes the cache's files took at its last look (tests, stats). */
uint64_t vcu_modcache_bytes(const vcu_modcache_t *mc);

/* Stores through named temporary files from now on, as where the file
 * system has no O_TMPFILE (tests). */
void vcu__modcache_named_only(vcu_modcache_t *mc);

#endif /* VCU_MODCACHE_H */
