/*
 * CUDA executor, part of cuda.c (cuda_int.h): migration's shared parts.
 * cuda_migrate.c keeps the session's history; cuda_migrate_stream.c
 * writes a session's state as a byte stream and rebuilds a session from
 * one; cuda_migrate_pre.c is the pass before the pause.  The stream's
 * layout: cuda_migrate.c.  Worker thread only, like the rest of the
 * session's state (the hash pool's threads but read a buffer).
 */
#ifndef VCU_CUDA_MIGRATE_INT_H
#define VCU_CUDA_MIGRATE_INT_H

#include <pthread.h>

#include "cuda_int.h"
#include "vcu_sha256.h"

#define VCU__MIG_MAGIC 0x3130676d75637600ull    /* "\0vcumg01" */
#define VCU__MIG_VERSION 2u
#define VCU__MIG_CHUNK ((size_t)8 << 20)
/* What one VCU_BACKEND_OP_PRE_COPY passes at most: the guest's requests
 * to the worker wait behind it. */
#define VCU__MIG_PRE_BUDGET ((uint64_t)64 << 20)
#define VCU__MIG_NAME_MAX 1024u
/* How long a save waits for the session's GPU work (vcu__mig_drain). */
#define VCU__MIG_QUIESCE_NS (20ull * 1000000000ull)

enum { VCU__MIG_WHOLE, VCU__MIG_PRE, VCU__MIG_CHUNKS, VCU__MIG_REST };

struct vcu__mig_head {
    uint64_t magic;
    uint32_t version;
    int32_t driver_version;
    uint32_t ndev;
    uint32_t kind;                  /* VCU__MIG_WHOLE, _PRE, _CHUNKS or _REST */
    uint64_t first;                 /* _REST: the calls its pre-state carried */
    uint64_t ncalls;
};

struct vcu__mig_call {
    struct vcu_req_hdr h;           /* opcode, flags, payload_len; nsegs 0 */
    uint32_t rlen;                  /* reply bytes */
    uint32_t reserved;
    uint64_t ilen;                  /* module image bytes, else 0 */
};

struct vcu__mig_mem {
    uint64_t addr;                  /* 0: the end of the list */
    uint64_t bytes;
    uint32_t dev;
    uint32_t flags;                 /* VCU__MIG_MEM_PART: a chunk of an allocation */
};
#define VCU__MIG_MEM_PART 1u

struct vcu__mig_glob {
    uint64_t module;                /* the guest's handle; 0: the end */
    uint64_t addr;
    uint64_t bytes;
    uint32_t name_len;
    uint32_t reserved;
};

/* One call kept: payload and reply in one allocation; a module load's
 * image stays in the module cache, named by its hash, until a save. */
typedef struct vcu__mrec_s {
    struct vcu__mig_call c;
    unsigned char *b;
    unsigned char sha[VCU_SHA256_LEN];
} vcu__mrec_t;

/* An allocation the pass before the pause carries: the hash of each
 * chunk it sent (the bytes sent, not the memory since), in order. */
typedef struct vcu__mpre_s {
    uint64_t addr, bytes;
    uint32_t dev;
    bool live;                      /* false once freed: its chunks count no more */
    uint64_t sent;                  /* bytes passed, from the start */
    uint64_t *hash;                 /* one per VCU__MIG_CHUNK */
} vcu__mpre_t;

struct vcu__mig_s {
    vcu__mrec_t *rec;
    size_t n, cap;
    size_t held;                    /* of the session's host budget */
    vcu__pset_t used;               /* functions whose first use is kept */
    char why[128];                  /* why the session cannot migrate, or "" */
    /* The pass before the pause.  Source: pre is set by a pre-state, which
     * carried pre_calls calls; pre_mem, sorted by address, the allocations
     * then live, pre_next the first not passed whole; pre_held, the budget
     * the list takes.  Destination: pre_loaded once a pre-state loaded. */
    bool pre, pre_loaded;
    size_t pre_calls;
    vcu__mpre_t *pre_mem;
    size_t pre_n, pre_next, pre_held;
};

enum { VCU__MIG_IGNORE, VCU__MIG_REPLAY, VCU__MIG_REFUSE };

#define VCU__MIG_FAIL(...)                        \
    do {                                          \
        snprintf(why, whylen, __VA_ARGS__);       \
        goto out;                                 \
    } while (0)

/* cuda_migrate.c: the history's trace (VCU_MIG_TRACE) and a module
 * image's global variables, by name (0; 1 when the image is compressed;
 * -1 malformed or cb's failure). */
int vcu__mig_trace_level(void);
void vcu__mig_trace(const char *side, size_t i, const struct vcu_req_hdr *h,
                    const unsigned char *p, const unsigned char *reply, size_t rlen);
void vcu__mig_trace_maps(const char *side);
typedef int (*vcu__glob_cb)(void *arg, const char *name, size_t len);
int vcu__image_globals(const unsigned char *img, size_t len, vcu__glob_cb cb, void *arg);

/* cuda_migrate_stream.c: the stream's pieces. */
unsigned char *vcu__mig_buf(vcu__cuda_sess_t *cs);
void vcu__mig_buf_free(vcu__cuda_sess_t *cs, unsigned char *b);
int vcu__mig_write(int fd, const void *b, size_t n);
int vcu__mig_read(int fd, void *b, size_t n);
uint64_t vcu__mig_size(vcu__cuda_sess_t *cs, uint32_t d, uint64_t p);
CUresult vcu__mig_fetch(vcu__cuda_sess_t *cs, uint32_t d, uint64_t addr, size_t k,
                        unsigned char *b);
CUresult vcu__mig_fetch_wait(vcu__cuda_sess_t *cs, uint32_t d);
int vcu__mig_head_write(vcu__cuda_sess_t *cs, int fd, uint32_t kind, uint64_t first,
                        uint64_t ncalls);
int vcu__mig_save_calls(vcu__cuda_sess_t *cs, int fd, size_t first, char *why, size_t whylen);
const char *vcu__mig_refusal(vcu__cuda_sess_t *cs);

/* cuda_migrate_pre.c: the pass's state, and chunk hashes. */
#define VCU__MIG_LANES 4
typedef struct vcu__hpool_s vcu__hpool_t;

typedef struct vcu__hlane_s {
    vcu__hpool_t *pool;
    unsigned int lane;
    pthread_t t;
} vcu__hlane_t;

struct vcu__hpool_s {
    pthread_mutex_t mu;             /* guards gen, busy, stop; publishes p and n with gen */
    pthread_cond_t go, done;
    unsigned int gen, busy, nt;
    bool stop;
    const unsigned char *p;
    size_t n;
    uint64_t h[VCU__MIG_LANES];     /* each lane writes its own, read after done */
    vcu__hlane_t lanes[VCU__MIG_LANES - 1];
};

void vcu__mig_pre_drop(vcu__cuda_sess_t *cs);
vcu__mpre_t *vcu__mig_pre_find(vcu__mig_t *m, uint64_t addr);
void vcu__hpool_init(vcu__hpool_t *hp);
void vcu__hpool_fini(vcu__hpool_t *hp);
uint64_t vcu__mig_chunk_hash(vcu__hpool_t *hp, const unsigned char *p, size_t n);

#endif
