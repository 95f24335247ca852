/*
 * CUDA executor, part of cuda.c (cuda_int.h).
 * Migration: a session's state written as a byte stream, whole or its
 * rest after the pass before the pause, and a session rebuilt from such
 * streams (the layout: cuda_migrate.c; docs/design.md, "Live migration").
 * Worker thread only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cuda_migrate_int.h"

/* ---- the stream --------------------------------------------------------- */

/*
 * The staging buffer of a save or a load, page-locked where the driver
 * lets it be (copies at DMA speed, the stream being the bound), counted
 * in the session's host budget; NULL when there is not that much.  It is
 * mapped at an address of its own, below the worker's guest window
 * (worker_reg.c): never where the driver places device memory, so a
 * buffer mapped while the guest runs (the pass before the pause) moves
 * none of the allocations the guest makes meanwhile.
 */
#define VCU__MIG_BUF_AT 0x0f0000000000ull       /* 15 TiB */

unsigned char *vcu__mig_buf(vcu__cuda_sess_t *cs)
{
    unsigned char *b;
    uint32_t d;

    if (vcu__mem_take(cs, VCU__MIG_CHUNK) != 0)
        return NULL;
    b = mmap((void *)(uintptr_t)VCU__MIG_BUF_AT, VCU__MIG_CHUNK, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (b == MAP_FAILED)            /* another session's, in this process */
        b = mmap(NULL, VCU__MIG_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
    if (b == MAP_FAILED) {
        vcu__mem_give(cs, VCU__MIG_CHUNK);
        return NULL;
    }
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS) {
            (void)VCU__CU(cs->cu, cuMemHostRegister, b, VCU__MIG_CHUNK,
                          CU_MEMHOSTREGISTER_PORTABLE);
            break;
        }
    }
    return b;
}

void vcu__mig_buf_free(vcu__cuda_sess_t *cs, unsigned char *b)
{
    uint32_t d;

    if (b == NULL)
        return;
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] != NULL && vcu__cur(cs, cs->ctx[d]) == CUDA_SUCCESS) {
            (void)VCU__CU(cs->cu, cuMemHostUnregister, b);
            break;
        }
    }
    munmap(b, VCU__MIG_CHUNK);
    vcu__mem_give(cs, VCU__MIG_CHUNK);
}

/* All n bytes to fd (out) or from it: 0, or -1 (the stream failed or
 * ended). */
static int vcu__mig_io(int fd, void *b, size_t n, bool out)
{
    char *p = b;

    while (n > 0) {
        ssize_t k = out ? write(fd, p, n) : read(fd, p, n);

        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int vcu__mig_write(int fd, const void *b, size_t n)
{
    return vcu__mig_io(fd, (void *)b, n, true);
}

int vcu__mig_read(int fd, void *b, size_t n)
{
    return vcu__mig_io(fd, b, n, false);
}

/* Device memory [addr, addr + n) of device d to fd (save) or from it:
 * 0, -1, or -2 when the stream ends first. */
static int vcu__mig_bytes(vcu__cuda_sess_t *cs, uint32_t d, uint64_t addr, uint64_t n, int fd,
                          int save, unsigned char *buf)
{
    vcu__cu_fns_t *fn = &cs->cu->fn;

    if (d >= cs->cu->ndev || cs->ctx[d] == NULL || vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS)
        return -1;
    while (n > 0) {
        size_t k = n < VCU__MIG_CHUNK ? (size_t)n : VCU__MIG_CHUNK;

        if (!save && vcu__mig_read(fd, buf, k) != 0)
            return -2;              /* the stream ended */
        if (save ? fn->cuMemcpyDtoH(buf, (CUdeviceptr)addr, k) != CUDA_SUCCESS ||
                       vcu__mig_write(fd, buf, k) != 0
                 : fn->cuMemcpyHtoD((CUdeviceptr)addr, buf, k) != CUDA_SUCCESS)
            return -1;
        addr += k;
        n -= k;
    }
    return 0;
}

/* The module handle a kept load call's reply names. */
static uint64_t vcu__mig_rec_module(const vcu__mrec_t *e)
{
    uint64_t h = 0;

    if (e->c.ilen == 0 || e->c.rlen < sizeof(struct vcu_cu_resp) + 8)
        return 0;
    memcpy(&h, e->b + e->c.h.payload_len + sizeof(struct vcu_cu_resp), 8);
    return h;
}

typedef struct vcu__gsave_s {
    vcu__cuda_sess_t *cs;
    vcu__mod_t *mod;
    uint64_t handle;
    int fd;
    unsigned char *buf;
    char *why;
    size_t whylen;
} vcu__gsave_t;

static int vcu__mig_save_glob(void *arg, const char *name, size_t len)
{
    vcu__gsave_t *g = arg;
    struct vcu__mig_glob gh;
    char nm[VCU__MIG_NAME_MAX + 1];
    CUdeviceptr a = 0;
    size_t n = 0;
    CUresult r;

    if (len > VCU__MIG_NAME_MAX) {
        snprintf(g->why, g->whylen, "a module global's name is longer than %u bytes",
                 VCU__MIG_NAME_MAX);
        return -1;
    }
    memcpy(nm, name, len);
    nm[len] = '\0';
    r = VCU__CU(g->cs->cu, cuModuleGetGlobal, &a, &n, g->mod->mod, nm);
    if (r != CUDA_SUCCESS) {
        snprintf(g->why, g->whylen, "module global %.64s cannot be read (CUresult %d)", nm, (int)r);
        return -1;
    }
    memset(&gh, 0, sizeof(gh));
    gh.module = g->handle;
    gh.addr = a;
    gh.bytes = n;
    gh.name_len = (uint32_t)len;
    if (vcu__mig_write(g->fd, &gh, sizeof(gh)) != 0 || vcu__mig_write(g->fd, nm, len) != 0 ||
        vcu__mig_bytes(g->cs, g->mod->dev, a, n, g->fd, 1, g->buf) != 0) {
        snprintf(g->why, g->whylen, "writing module global %.64s failed", nm);
        return -1;
    }
    return 0;
}

/* The kept calls from the first on, each module load's image read back
 * from the cache. */
int vcu__mig_save_calls(vcu__cuda_sess_t *cs, int fd, size_t first, char *why,
                               size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    size_t i, len, pad;
    static const unsigned char zero[8];
    unsigned char *img;
    int rc;

    for (i = first; i < m->n; i++) {
        const vcu__mrec_t *e = &m->rec[i];

        len = e->c.h.payload_len + e->c.rlen;
        pad = (8 - (len + e->c.ilen) % 8) % 8;
        if (vcu__mig_trace_level() > 0)
            vcu__mig_trace("saved", i, &e->c.h, e->b, e->b + e->c.h.payload_len, e->c.rlen);
        if (vcu__mig_write(fd, &e->c, sizeof(e->c)) != 0 || vcu__mig_write(fd, e->b, len) != 0)
            goto err_write;
        if (e->c.ilen > 0) {
            if (vcu__mem_take(cs, (size_t)e->c.ilen) != 0) {
                snprintf(why, whylen, "a module image is larger than the host memory left");
                return -1;
            }
            img = malloc((size_t)e->c.ilen);
            rc = img == NULL || vcu_modcache_get(cs->cu->mc, e->sha, img, e->c.ilen) != 0
                     ? -1
                     : vcu__mig_write(fd, img, (size_t)e->c.ilen);
            free(img);
            vcu__mem_give(cs, (size_t)e->c.ilen);
            if (rc != 0) {
                snprintf(why, whylen, "a module image of %llu bytes is no longer in the module "
                         "cache, or writing it failed", (unsigned long long)e->c.ilen);
                return -1;
            }
        }
        if (vcu__mig_write(fd, zero, pad) != 0)
            goto err_write;
    }
    return 0;
err_write:
    snprintf(why, whylen, "writing the session's history failed");
    return -1;
}

/* The bytes of allocation p of device d, as the driver has it (what was
 * asked for, which copies may not pass), or 0. */
uint64_t vcu__mig_size(vcu__cuda_sess_t *cs, uint32_t d, uint64_t p)
{
    CUdeviceptr base = 0;
    size_t n = 0;

    if (d >= cs->cu->ndev || cs->ctx[d] == NULL || vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS ||
        VCU__CU(cs->cu, cuMemGetAddressRange, &base, &n, (CUdeviceptr)p) != CUDA_SUCCESS ||
        base != p)
        return 0;
    return n;
}

/* What the save at the pause works with: two staging buffers (the
 * second may be NULL), the hash pool, and where the bytes went (for the
 * log). */
typedef struct vcu__mig_io_s {
    unsigned char *buf[2];
    vcu__hpool_t hp;
    uint64_t same, sent;
} vcu__mig_io_t;

/* Starts reading [addr, addr + k) of device d into b: on the context's
 * migration stream when there is one (finished by vcu__mig_fetch_wait),
 * else at once. */
CUresult vcu__mig_fetch(vcu__cuda_sess_t *cs, uint32_t d, uint64_t addr, size_t k,
                        unsigned char *b)
{
    if (cs->mstream[d] != NULL)
        return VCU__CU(cs->cu, cuMemcpyDtoHAsync, b, (CUdeviceptr)addr, k, cs->mstream[d]);
    return cs->cu->fn.cuMemcpyDtoH(b, (CUdeviceptr)addr, k);
}

CUresult vcu__mig_fetch_wait(vcu__cuda_sess_t *cs, uint32_t d)
{
    return cs->mstream[d] != NULL ? cs->cu->fn.cuStreamSynchronize(cs->mstream[d])
                                  : CUDA_SUCCESS;
}

/*
 * An allocation the pass before the pause carried (e), at the pause: each
 * chunk read again, and sent only if it was never sent or its hash is
 * not the one sent.  With two buffers, the next chunk is read while this
 * one is hashed.  0 or -1.
 */
static int vcu__mig_save_parts(vcu__cuda_sess_t *cs, const vcu__mpre_t *e, int fd,
                               vcu__mig_io_t *io)
{
    struct vcu__mig_mem mh;
    uint64_t off, next;
    unsigned int cur = 0;
    size_t k, kn;

    if (vcu__cur(cs, cs->ctx[e->dev]) != CUDA_SUCCESS)
        return -1;
    k = e->bytes < VCU__MIG_CHUNK ? (size_t)e->bytes : VCU__MIG_CHUNK;
    if (vcu__mig_fetch(cs, e->dev, e->addr, k, io->buf[0]) != CUDA_SUCCESS)
        return -1;
    for (off = 0; off < e->bytes; off = next) {
        unsigned char *b = io->buf[cur];

        if (vcu__mig_fetch_wait(cs, e->dev) != CUDA_SUCCESS)
            return -1;
        next = off + k;
        kn = e->bytes - next < VCU__MIG_CHUNK ? (size_t)(e->bytes - next) : VCU__MIG_CHUNK;
        if (next < e->bytes && io->buf[1] != NULL &&
            vcu__mig_fetch(cs, e->dev, e->addr + next, kn, io->buf[cur ^ 1]) != CUDA_SUCCESS)
            return -1;
        if (off < e->sent &&
            vcu__mig_chunk_hash(&io->hp, b, k) == e->hash[off / VCU__MIG_CHUNK]) {
            io->same += k;
        } else {
            memset(&mh, 0, sizeof(mh));
            mh.addr = e->addr + off;
            mh.bytes = k;
            mh.dev = e->dev;
            mh.flags = VCU__MIG_MEM_PART;
            if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 || vcu__mig_write(fd, b, k) != 0)
                return -1;
            io->sent += k;
        }
        if (next < e->bytes && io->buf[1] == NULL &&
            vcu__mig_fetch(cs, e->dev, e->addr + next, kn, b) != CUDA_SUCCESS)
            return -1;
        if (io->buf[1] != NULL)
            cur ^= 1;
        k = kn;
    }
    return 0;
}

/* Every allocation's bytes; with rest, those the pass before the pause
 * carried only where they changed. */
static int vcu__mig_save_mem(vcu__cuda_sess_t *cs, int fd, bool rest, vcu__mig_io_t *io)
{
    struct vcu__mig_mem mh;
    const vcu__mpre_t *e;
    uint32_t i;

    for (i = 0; i < cs->allocs.cap; i++) {
        uint64_t k = cs->allocs.keys[i], v = cs->allocs.vals[i];

        if (k == 0 || k == VCU__PSET_TOMB)
            continue;
        memset(&mh, 0, sizeof(mh));
        mh.addr = k;
        mh.dev = VCU__ALLOC_DEV(v);
        mh.bytes = vcu__mig_size(cs, mh.dev, k);
        if (mh.bytes == 0)
            return -1;
        e = rest ? vcu__mig_pre_find(cs->mig, k) : NULL;
        if (e != NULL && e->live && e->dev == mh.dev && e->bytes == mh.bytes) {
            if (vcu__mig_save_parts(cs, e, fd, io) != 0)
                return -1;
            continue;
        }
        if (vcu__mig_write(fd, &mh, sizeof(mh)) != 0 ||
            vcu__mig_bytes(cs, mh.dev, mh.addr, mh.bytes, fd, 1, io->buf[0]) != 0)
            return -1;
        io->sent += mh.bytes;
    }
    memset(&mh, 0, sizeof(mh));
    return vcu__mig_write(fd, &mh, sizeof(mh));
}

static int vcu__mig_save_globals(vcu__cuda_sess_t *cs, int fd, unsigned char *buf, char *why,
                                 size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    struct vcu__mig_glob end;
    unsigned char *img;
    size_t i;

    for (i = 0; i < m->n; i++) {
        const vcu__mrec_t *e = &m->rec[i];
        uint64_t h = vcu__mig_rec_module(e);
        vcu__hent_t *he = h ? vcu__htab_get(&cs->tab, h, VCU__H_MODULE) : NULL;
        vcu__gsave_t g = { cs, NULL, h, fd, buf, why, whylen };
        int rc;

        if (he == NULL)
            continue;               /* unloaded since */
        g.mod = he->u.mod;
        if (vcu__mem_take(cs, (size_t)e->c.ilen) != 0) {
            snprintf(why, whylen, "a module image is larger than the host memory left");
            return -1;
        }
        img = malloc((size_t)e->c.ilen);
        if (img == NULL || vcu_modcache_get(cs->cu->mc, e->sha, img, e->c.ilen) != 0)
            rc = -1;
        else
            rc = vcu__image_globals(img, (size_t)e->c.ilen, vcu__mig_save_glob, &g);
        free(img);
        vcu__mem_give(cs, (size_t)e->c.ilen);
        if (rc > 0)
            snprintf(why, whylen, "a module image is compressed: its globals cannot be listed");
        else if (rc < 0 && why[0] == '\0')
            snprintf(why, whylen, "a module image cannot be read");
        if (rc != 0)
            return -1;
    }
    memset(&end, 0, sizeof(end));
    return vcu__mig_write(fd, &end, sizeof(end));
}

/* Does a host function of the session wait for the guest: reached, its
 * cookie handed to the guest or queued for it? */
static bool vcu__mig_cb_busy(vcu__cuda_sess_t *cs)
{
    vcu__gate_t *g = &cs->gate;
    bool busy;

    pthread_mutex_lock(&g->mu);
    busy = g->ntramp > 0 || g->nq > 0;
    pthread_mutex_unlock(&g->mu);
    return busy;
}

static uint64_t vcu__mig_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define VCU__MIG_CB_WHY                                                                   \
    "a host function (CU_STREAM_HOST_FUNC or a graph host node) waits for the guest: a " \
    "save is made again once it returned"

/*
 * The session's GPU work, waited for without blocking: a host function
 * the work reaches waits for the guest, which is stopped while its VM
 * migrates, so a blocking synchronize would never return.  Events behind
 * every stream's work are polled for up to VCU__MIG_QUIESCE_NS; a host
 * function reached meanwhile refuses the save (the source runs on and
 * the guest answers it), and so does work that takes longer.  0, or -1
 * with *why.
 */
static int vcu__mig_drain(vcu__cuda_sess_t *cs, char *why, size_t whylen)
{
    vcu__cuda_wait_t *w = vcu__wait_new(cs);
    struct timespec nap = { 0, 100 * 1000 };
    uint64_t t0 = vcu__mig_now_ns();
    CUresult res;
    uint32_t d;
    int rc = -1;

    if (w == NULL) {
        snprintf(why, whylen, "out of host memory");
        return -1;
    }
    for (d = 0; d < cs->cu->ndev; d++) {
        if (cs->ctx[d] != NULL &&
            (vcu__cur(cs, cs->ctx[d]) != CUDA_SUCCESS || vcu__park_ctx(cs, w, d) != 0)) {
            snprintf(why, whylen, "device %u's work cannot be waited for", d);
            goto out;
        }
    }
    while (!vcu__cuda_wait_poll(cs, w)) {
        if (vcu__mig_cb_busy(cs)) {
            snprintf(why, whylen, VCU__MIG_CB_WHY);
            goto out;
        }
        if (vcu__mig_now_ns() - t0 > VCU__MIG_QUIESCE_NS) {
            snprintf(why, whylen, "the session's GPU work did not finish within %llu s",
                     (unsigned long long)(VCU__MIG_QUIESCE_NS / 1000000000ull));
            goto out;
        }
        nanosleep(&nap, NULL);
    }
    res = w->res;
    if (res != CUDA_SUCCESS) {
        snprintf(why, whylen, "the session's GPU work failed (CUresult %d)", (int)res);
        goto out;
    }
    rc = 0;
out:
    vcu__wait_free(cs, w);
    return rc;
}

/* Why the session cannot move at all, or NULL. */
const char *vcu__mig_refusal(vcu__cuda_sess_t *cs)
{
    if (cs->mig->why[0] != '\0')
        return cs->mig->why;
    /* An MPS client: its contexts, the MPS server's state and another
     * VM's clients on the same server are not what the history replays. */
    if (cs->cu->sms != 0)
        return "the session runs in packed mode (an MPS client on the VM's SMs), which a "
               "migration does not carry";
    return NULL;
}

/* Nothing of the session may be running or half done. */
static int vcu__mig_quiesce(vcu__cuda_sess_t *cs, char *why, size_t whylen)
{
    const char *no = vcu__mig_refusal(cs);
    uint32_t d;
    CUresult r;

    if (no != NULL) {
        snprintf(why, whylen, "%s", no);
        return -1;
    }
    if (cs->capture && vcu__any_capture(cs)) {
        snprintf(why, whylen, "a stream capture is in progress: a session is saved between "
                 "captures");
        return -1;
    }
    if (cs->waits != NULL || cs->orphans != NULL) {
        snprintf(why, whylen, "the session has GPU work still waited for");
        return -1;
    }
    if (vcu__mig_cb_busy(cs)) {
        snprintf(why, whylen, VCU__MIG_CB_WHY);
        return -1;
    }
    if (vcu__mig_drain(cs, why, whylen) != 0)
        return -1;
    /* All done: returns at once, and says if a context failed. */
    r = vcu__sync_all(cs, &d);
    if (r != CUDA_SUCCESS) {
        snprintf(why, whylen, "device %u's context failed (CUresult %d)", d, (int)r);
        return -1;
    }
    return 0;
}

int vcu__mig_head_write(vcu__cuda_sess_t *cs, int fd, uint32_t kind, uint64_t first,
                               uint64_t ncalls)
{
    struct vcu__mig_head hd;

    memset(&hd, 0, sizeof(hd));
    hd.magic = VCU__MIG_MAGIC;
    hd.version = VCU__MIG_VERSION;
    hd.driver_version = cs->cu->driver_version;
    hd.ndev = cs->cu->ndev;
    hd.kind = kind;
    hd.first = first;
    hd.ncalls = ncalls;
    return vcu__mig_write(fd, &hd, sizeof(hd));
}

int vcu__cuda_sess_save(vcu__cuda_sess_t *cs, int fd, bool rest, char *why, size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    uint64_t magic = VCU__MIG_MAGIC;
    vcu__mig_io_t io;
    size_t first = rest ? m->pre_calls : 0;
    int rc = VCU_EINVAL;

    why[0] = '\0';
    if (rest && !m->pre) {
        snprintf(why, whylen, "no pass before the pause began for this session");
        return VCU_EINVAL;
    }
    if (vcu__mig_quiesce(cs, why, whylen) != 0)
        return VCU_EBUSY;
    vcu__mig_trace_maps("saved");
    memset(&io, 0, sizeof(io));
    vcu__hpool_init(&io.hp);
    io.buf[0] = vcu__mig_buf(cs);
    if (io.buf[0] == NULL)
        VCU__MIG_FAIL("out of host memory");
    if (rest)
        io.buf[1] = vcu__mig_buf(cs);   /* NULL: one at a time */
    if (vcu__mig_head_write(cs, fd, rest ? VCU__MIG_REST : VCU__MIG_WHOLE, first,
                            m->n - first) != 0)
        VCU__MIG_FAIL("writing the stream failed");
    if (vcu__mig_save_calls(cs, fd, first, why, whylen) != 0)
        goto out;
    if (vcu__mig_save_mem(cs, fd, rest, &io) != 0)
        VCU__MIG_FAIL("writing the session's device memory failed");
    if (vcu__mig_save_globals(cs, fd, io.buf[0], why, whylen) != 0) {
        if (why[0] == '\0')
            snprintf(why, whylen, "writing the modules' globals failed");
        goto out;
    }
    if (vcu__mig_write(fd, &magic, sizeof(magic)) != 0)
        VCU__MIG_FAIL("writing the stream's end failed");
    if (rest)
        fprintf(stderr, "vcu-worker: migration: at the pause %llu bytes of device memory sent, "
                "%llu unchanged since the pass before it\n", (unsigned long long)io.sent,
                (unsigned long long)io.same);
    rc = 0;
out:
    vcu__mig_buf_free(cs, io.buf[1]);
    vcu__mig_buf_free(cs, io.buf[0]);
    vcu__hpool_fini(&io.hp);
    return rc;
}

/* ---- load --------------------------------------------------------------- */

/* Makes one kept call again; its reply must be the one kept but for the
 * deferred error (nothing earlier is pending on the destination). */
static int vcu__mig_replay(vcu__cuda_sess_t *cs, size_t i, const vcu__mrec_t *e,
                           unsigned char *out, size_t cap, char *why, size_t whylen)
{
    struct vcu_req_hdr h = e->c.h;
    const unsigned char *p = e->b, *want = e->b + e->c.h.payload_len;
    struct vcu_cu_module_load_req lq;
    vcu_segment_t seg;
    struct iovec iov;
    vcu__cuda_wait_t *w = NULL;
    size_t out_len = 0;
    uint32_t st;

    memset(&seg, 0, sizeof(seg));
    if (e->c.ilen > 0) {
        iov.iov_base = (void *)(e->b + e->c.h.payload_len + e->c.rlen);
        iov.iov_len = (size_t)e->c.ilen;
        seg.iov = &iov;
        seg.iovcnt = 1;
        seg.len = e->c.ilen;
        seg.flags = VCU_SEG_TO_DEVICE;
        h.nsegs = 1;
        if (h.opcode == VCU_OP_CU_MODULE_LOAD_HASH) {
            /* The image travelled with the stream: loaded as sent. */
            memset(&lq, 0, sizeof(lq));
            memcpy(&lq.hdr, p, sizeof(lq.hdr));
            lq.image_len = e->c.ilen;
            h.opcode = VCU_OP_CU_MODULE_LOAD;
            h.payload_len = sizeof(lq);
            p = (const unsigned char *)&lq;
        }
    }
    st = vcu__cuda_exec(cs, &h, p, h.nsegs ? &seg : NULL, h.nsegs, out, cap, &out_len, NULL, &w);
    if (st == VCU__WAITING && w != NULL) {
        while (!vcu__cuda_wait_poll(cs, w))
            ;
        st = vcu__cuda_wait_finish(cs, w, NULL, &out_len);
    }
    if (vcu__mig_trace_level() > 0)
        vcu__mig_trace("made", i, &e->c.h, e->b, out, out_len);
    /* A capture's id is the driver's count, of no use once it ended. */
    if (h.opcode == VCU_OP_CU_STREAM_CAPTURE_GRAPH && out_len == e->c.rlen &&
        out_len >= offsetof(struct vcu_cu_capture_graph_resp, graph))
        memcpy(out + offsetof(struct vcu_cu_capture_graph_resp, id),
               want + offsetof(struct vcu_cu_capture_graph_resp, id), 8);
    if (st != VCU_S_OK || out_len != e->c.rlen || out_len < sizeof(struct vcu_cu_resp) ||
        memcmp(out, want, 4) != 0 ||
        memcmp(out + sizeof(struct vcu_cu_resp), want + sizeof(struct vcu_cu_resp),
               out_len - sizeof(struct vcu_cu_resp)) != 0) {
        uint64_t got = 0, had = 0;
        uint32_t res = 0;

        if (out_len >= 4)
            memcpy(&res, out, 4);
        if (out_len >= 16 && e->c.rlen >= 16) {
            memcpy(&got, out + 8, 8);
            memcpy(&had, want + 8, 8);
        }
        vcu__mig_trace_maps("made");
        snprintf(why, whylen,
                 "call 0x%04x came out otherwise here (status %u, result %u, value 0x%llx where "
                 "the source had 0x%llx): another driver, library layout or history",
                 e->c.h.opcode, st, res, (unsigned long long)got, (unsigned long long)had);
        return -1;
    }
    return 0;
}

static int vcu__mig_load_calls(vcu__cuda_sess_t *cs, int fd, uint64_t n, char *why,
                               size_t whylen)
{
    unsigned char *out = malloc(VCU_MAX_PAYLOAD);
    vcu__mrec_t e;
    uint64_t i;
    size_t len;
    int rc = -1;

    if (out == NULL) {
        snprintf(why, whylen, "out of host memory");
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (vcu__mig_read(fd, &e.c, sizeof(e.c)) != 0) {
            snprintf(why, whylen, "the stream ends inside the history");
            goto out;
        }
        if (e.c.h.payload_len > VCU_MAX_PAYLOAD || e.c.rlen > VCU_MAX_PAYLOAD ||
            e.c.ilen > VCU_MAX_XFER || e.c.h.nsegs != 0 ||
            e.c.h.payload_len < sizeof(struct vcu_cu_hdr)) {
            snprintf(why, whylen, "the stream's history is malformed");
            goto out;
        }
        len = e.c.h.payload_len + e.c.rlen + (size_t)e.c.ilen;
        len += (8 - len % 8) % 8;
        if ((e.b = malloc(len ? len : 1)) == NULL) {
            snprintf(why, whylen, "out of host memory");
            goto out;
        }
        if (vcu__mig_read(fd, e.b, len) != 0 ||
            vcu__mig_replay(cs, (size_t)i, &e, out, VCU_MAX_PAYLOAD, why, whylen) != 0) {
            if (why[0] == '\0')
                snprintf(why, whylen, "the stream ends inside the history");
            free(e.b);
            goto out;
        }
        free(e.b);
    }
    rc = 0;
out:
    free(out);
    return rc;
}

/* Is [mh->addr, + mh->bytes) what the replayed history made: an
 * allocation of the session, or (VCU__MIG_MEM_PART) a piece of one? */
static bool vcu__mig_mem_here(vcu__cuda_sess_t *cs, const struct vcu__mig_mem *mh)
{
    CUdeviceptr base = 0;
    size_t n = 0;
    uint64_t v;

    if (mh->flags & ~VCU__MIG_MEM_PART)
        return false;
    if (!(mh->flags & VCU__MIG_MEM_PART))
        return vcu__pset_find(&cs->allocs, mh->addr, &v) && VCU__ALLOC_DEV(v) == mh->dev &&
               vcu__mig_size(cs, mh->dev, mh->addr) == mh->bytes;
    if (mh->bytes == 0 || mh->dev >= cs->cu->ndev || cs->ctx[mh->dev] == NULL ||
        vcu__cur(cs, cs->ctx[mh->dev]) != CUDA_SUCCESS ||
        VCU__CU(cs->cu, cuMemGetAddressRange, &base, &n, (CUdeviceptr)mh->addr) != CUDA_SUCCESS)
        return false;
    return vcu__pset_find(&cs->allocs, base, &v) && VCU__ALLOC_DEV(v) == mh->dev &&
           mh->bytes <= n && mh->addr - base <= n - mh->bytes;
}

static int vcu__mig_load_mem(vcu__cuda_sess_t *cs, int fd, unsigned char *buf, char *why,
                             size_t whylen)
{
    struct vcu__mig_mem mh;
    int rc;

    for (;;) {
        if (vcu__mig_read(fd, &mh, sizeof(mh)) != 0) {
            snprintf(why, whylen, "the stream ends inside the device memory");
            return -1;
        }
        if (mh.addr == 0 && mh.flags == 0)
            return 0;
        /* Only what the replayed history allocated, as it was. */
        if (!vcu__mig_mem_here(cs, &mh)) {
            snprintf(why, whylen, "%s 0x%llx of the stream is not one here",
                     mh.flags ? "memory" : "allocation", (unsigned long long)mh.addr);
            return -1;
        }
        rc = vcu__mig_bytes(cs, mh.dev, mh.addr, mh.bytes, fd, 0, buf);
        if (rc != 0) {
            snprintf(why, whylen, rc == -2 ? "the stream ends inside allocation 0x%llx"
                                           : "writing allocation 0x%llx failed",
                     (unsigned long long)mh.addr);
            return -1;
        }
    }
}

static int vcu__mig_load_globals(vcu__cuda_sess_t *cs, int fd, unsigned char *buf, char *why,
                                 size_t whylen)
{
    struct vcu__mig_glob gh;
    char nm[VCU__MIG_NAME_MAX + 1];
    vcu__hent_t *he;
    CUdeviceptr a;
    size_t n;

    for (;;) {
        if (vcu__mig_read(fd, &gh, sizeof(gh)) != 0) {
            snprintf(why, whylen, "the stream ends inside the modules' globals");
            return -1;
        }
        if (gh.module == 0)
            return 0;
        if (gh.name_len == 0 || gh.name_len > VCU__MIG_NAME_MAX ||
            vcu__mig_read(fd, nm, gh.name_len) != 0) {
            snprintf(why, whylen, "the stream's module globals are malformed");
            return -1;
        }
        nm[gh.name_len] = '\0';
        he = vcu__htab_get(&cs->tab, gh.module, VCU__H_MODULE);
        a = 0;
        n = 0;
        if (he == NULL || VCU__CU(cs->cu, cuModuleGetGlobal, &a, &n, he->u.mod->mod, nm) !=
                              CUDA_SUCCESS ||
            a != gh.addr || n != gh.bytes) {
            snprintf(why, whylen, "module global %.64s is not where the source had it", nm);
            return -1;
        }
        if (vcu__mig_bytes(cs, he->u.mod->dev, a, n, fd, 0, buf) != 0) {
            snprintf(why, whylen, "the stream ends inside module global %.64s, or writing it failed",
                     nm);
            return -1;
        }
    }
}

/* Has the session run nothing yet? */
static bool vcu__mig_fresh(vcu__cuda_sess_t *cs)
{
    uint32_t d;

    for (d = 0; d < cs->cu->ndev; d++)
        if (cs->ctx[d] != NULL)
            return false;
    return cs->tab.live == 0 && cs->allocs.live == 0 && cs->mig->n == 0 && !cs->mig->pre_loaded;
}

/* What each kind of stream asks of the session it loads into: 0, or -1
 * with why. */
static int vcu__mig_load_check(vcu__cuda_sess_t *cs, const struct vcu__mig_head *hd, char *why,
                               size_t whylen)
{
    vcu__mig_t *m = cs->mig;

    switch (hd->kind) {
    case VCU__MIG_WHOLE:
    case VCU__MIG_PRE:
        if (!vcu__mig_fresh(cs)) {
            snprintf(why, whylen, "the session has run CUDA calls already");
            return -1;
        }
        return 0;
    case VCU__MIG_CHUNKS:
    case VCU__MIG_REST:
        if (!m->pre_loaded) {
            snprintf(why, whylen, "no pre-state was loaded into the session");
            return -1;
        }
        if (hd->kind == VCU__MIG_REST && hd->first != m->pre_calls) {
            snprintf(why, whylen, "the state continues a history of %llu calls, the session "
                     "has %llu", (unsigned long long)hd->first,
                     (unsigned long long)m->pre_calls);
            return -1;
        }
        if (hd->kind == VCU__MIG_CHUNKS && hd->ncalls != 0) {
            snprintf(why, whylen, "the stream's history is malformed");
            return -1;
        }
        return 0;
    }
    snprintf(why, whylen, "not a kind of state this worker reads (%u)", hd->kind);
    return -1;
}

int vcu__cuda_sess_load(vcu__cuda_sess_t *cs, int fd, char *why, size_t whylen)
{
    vcu__mig_t *m = cs->mig;
    struct vcu__mig_head hd;
    unsigned char *buf = NULL;
    uint64_t magic = 0;
    uint32_t d;
    int rc = VCU_EINVAL;

    why[0] = '\0';
    if (vcu__mig_read(fd, &hd, sizeof(hd)) != 0 || hd.magic != VCU__MIG_MAGIC)
        VCU__MIG_FAIL("not a session's state");
    if (hd.version != VCU__MIG_VERSION)
        VCU__MIG_FAIL("state version %u, this worker reads %u", hd.version, VCU__MIG_VERSION);
    if (hd.driver_version != cs->cu->driver_version || hd.ndev != cs->cu->ndev)
        VCU__MIG_FAIL("the source had driver %d and %u devices, here driver %d and %u devices",
                      hd.driver_version, hd.ndev, cs->cu->driver_version, cs->cu->ndev);
    if (vcu__mig_load_check(cs, &hd, why, whylen) != 0)
        goto out;
    if (vcu__mig_load_calls(cs, fd, hd.ncalls, why, whylen) != 0)
        goto out;
    if (hd.kind == VCU__MIG_PRE) {
        m->pre_loaded = true;
        m->pre_calls = hd.ncalls;
    } else {
        /* After the history: its contexts pin the buffer. */
        buf = vcu__mig_buf(cs);
        if (buf == NULL)
            VCU__MIG_FAIL("out of host memory");
        if (vcu__mig_load_mem(cs, fd, buf, why, whylen) != 0)
            goto out;
        if (hd.kind != VCU__MIG_CHUNKS && vcu__mig_load_globals(cs, fd, buf, why, whylen) != 0)
            goto out;
    }
    if (vcu__mig_read(fd, &magic, sizeof(magic)) != 0 || magic != VCU__MIG_MAGIC)
        VCU__MIG_FAIL("the stream does not end where it should");
    if (hd.kind == VCU__MIG_WHOLE || hd.kind == VCU__MIG_REST) {
        if (vcu__sync_all(cs, &d) != CUDA_SUCCESS)
            VCU__MIG_FAIL("device %u's context failed while loading", d);
        m->pre_loaded = false;
        m->pre_calls = 0;
    }
    rc = 0;
out:
    vcu__mig_buf_free(cs, buf);
    return rc;
}
