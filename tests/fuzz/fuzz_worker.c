/*
 * libFuzzer target for a session worker's side of its link to QEMU
 * (host-backend/worker/worker.c), against a QEMU that may be compromised:
 * the request ring's frames (vcu__take_frames(): vcu__ring_get() of
 * vcu_ring.h, VCU_IPC_REQ and VCU_IPC_SOCK entries), the socket's frames
 * and descriptors (vcu__sock_pump(), vcu__sock_fill(): VCU_IPC_REGION with
 * a guest RAM file, requests too large for the ring), each request's
 * ranges turned into iovecs of the mapped RAM (vcu__handle_req(), with
 * registrations and aliases), the reply ring's head as the proxy left it,
 * and the shared area's header (vcu__map_shm()).
 *
 * worker.c, worker_link.c and worker_reg.c are included whole (for their
 * static functions, and so that the macros below reach them), with main()
 * renamed and VCU__W_EXIT, how the worker ends, going back here: a worker
 * ends at the first frame that breaks the link's rules, and at its
 * socket's end, and either is a normal end for an input.  The backend is
 * stubbed at link time: vcu_backend_submit() checks what the worker hands
 * it against vcu_backend.h's contract and completes the request at once;
 * vcu_backend_add_ram() and _remove_ram() check theirs.  Staging
 * (stage.c) is the backend's and does nothing here.
 *
 * Input:
 *   u8 flags      W_* below
 *   [u8 x 16]     with W_SHM: the shared area's magic (8), ring sizes (4, 4)
 *   u8 start      the request ring's position we start at (x 16)
 *   u8 t, u16/u64 the tail QEMU wrote: t bit 0: absolute u64, else start + u16
 *   [u64 head]    with W_HEAD: the reply ring's head QEMU wrote
 *   u16 n, n bytes  the request ring's bytes from our position on
 *   u8 r          bits 0-2: guest RAM files sent with the socket's first
 *                 byte; bits 3-5: which sizes
 *   the rest      the socket's bytes (then QEMU closes it)
 *
 * Checked (besides the sanitizers): every segment the backend gets is as
 * long as its iovecs and each iovec lies in a mapped region or alias;
 * what is registered is page aligned and unregistered exactly as it was
 * registered; replies are whole reply frames.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sanitizer/lsan_interface.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int fz_debug;

/* The worker's messages, only with FUZZ_DEBUG (it ends on most inputs). */
static int fz_log(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fz_log(FILE *f, const char *fmt, ...)
{
    va_list ap;
    int n = 0;

    if (fz_debug) {
        va_start(ap, fmt);
        n = vfprintf(f, fmt, ap);
        va_end(ap);
    }
    return n;
}

/* The worker's last mapping: one it made just before it ended is the
 * harness's to undo (its process would be gone). */
static void *fz_last_map;
static size_t fz_last_len;

static void *fz_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p = mmap(addr, len, prot, flags, fd, off);

    if (p != MAP_FAILED) {
        fz_last_map = p;
        fz_last_len = len;
    }
    return p;
}

static void fz_worker_exit(int code) __attribute__((noreturn));
#define VCU__W_EXIT(code) fz_worker_exit(code)
#define main vcu__worker_main
#define fprintf fz_log
#define mmap fz_mmap
#include "worker.c"
#include "worker_link.c"
#include "worker_reg.c"
#include "fz_input.h"
#undef mmap
#undef fprintf
#undef main

#define FZ_CHECK(c)                                                               \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_worker: %s:%d: check failed: %s\n", __FILE__,    \
                    __LINE__, #c);                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

#define W_ADD_FAILS 0x01            /* the driver refuses registrations */
#define W_HEAD 0x02                 /* the reply ring's head from the input */
#define W_SHM 0x04                  /* the shared area's header from the input */
#define W_NEAR_END 0x08             /* positions near 2^64 */

#define FZ_REQ_RING VCU_IPC_REQ_RING_MIN
#define FZ_MAX_ADDS 4096

static jmp_buf fz_jmp;
static int fz_in_worker;
static int fz_add_fails;
/* Guest RAM files of several sizes (page multiples or not, empty). */
static const size_t fz_region_sizes[6] = { 8192, 65536, 100, 0, 3 * 4096 + 1, 1 << 20 };
static int fz_region_fd[6];
/* What is registered now: the backend's references. */
static struct {
    void *hva;
    size_t len;
    unsigned int refs;
} fz_adds[FZ_MAX_ADDS];
static unsigned int fz_nadds;
static unsigned int fz_replies;

static void fz_worker_exit(int code)
{
    FZ_CHECK(fz_in_worker);
    if (fz_debug)
        fprintf(stderr, "fuzz: the worker ends (%d)\n", code);
    longjmp(fz_jmp, code + 1);
}

/* ---- the backend, as far as the worker calls it --------------------------------- */

int vcu_seccomp_install(int mode)
{
    (void)mode;
    return 0;
}

/* Host memory charged to the VM (aliases): the stub keeps no account. */
int vcu_backend_host_charge(vcu_backend_t *be, uint64_t n)
{
    (void)be;
    (void)n;
    return 0;
}

void vcu_backend_host_uncharge(vcu_backend_t *be, uint64_t n)
{
    (void)be;
    (void)n;
}

int vcu_backend_new(const vcu_backend_config_t *cfg, vcu_backend_t **out)
{
    (void)cfg;
    *out = NULL;
    return VCU_ENODEV;
}

const char *vcu_backend_cuda_error(const vcu_backend_t *be)
{
    (void)be;
    return "the fuzz target has no backend";
}

int vcu_backend_drive(vcu_backend_t *be)
{
    (void)be;
    return VCU_ENOSESSION;
}

int vcu_stage_in(vcu_backend_t *be, uint32_t opcode, uint32_t req_flags, vcu_segment_t *segs,
                 unsigned int nsegs, vcu_stage_t *st)
{
    (void)be;
    (void)opcode;
    (void)req_flags;
    (void)segs;
    (void)nsegs;
    memset(st, 0, sizeof(*st));
    return 0;
}

void vcu_stage_out(vcu_stage_t *st, const void *resp, size_t resp_len)
{
    (void)st;
    (void)resp;
    (void)resp_len;
}

int vcu_backend_add_ram(vcu_backend_t *be, void *hva, size_t len)
{
    unsigned int i;

    (void)be;
    /* vcu_backend.h: "hva and len page aligned". */
    FZ_CHECK(((uintptr_t)hva & (VCU__W_PAGE - 1)) == 0 && (len & (VCU__W_PAGE - 1)) == 0);
    FZ_CHECK(len > 0);
    if (fz_add_fails)
        return VCU_EIO;
    for (i = 0; i < fz_nadds; i++)
        if (fz_adds[i].hva == hva && fz_adds[i].len == len) {
            fz_adds[i].refs++;
            return 0;
        }
    FZ_CHECK(fz_nadds < FZ_MAX_ADDS);
    fz_adds[fz_nadds].hva = hva;
    fz_adds[fz_nadds].len = len;
    fz_adds[fz_nadds++].refs = 1;
    return 0;
}

int vcu_backend_remove_ram(vcu_backend_t *be, void *hva, size_t len)
{
    unsigned int i;

    (void)be;
    for (i = 0; i < fz_nadds; i++)
        if (fz_adds[i].hva == hva && fz_adds[i].len == len) {
            if (--fz_adds[i].refs == 0)
                fz_adds[i] = fz_adds[--fz_nadds];
            return 0;
        }
    /* The same hva and len as registered, always. */
    FZ_CHECK(!"remove_ram of a range never added");
    return VCU_EINVAL;
}

/* Whether [p, p+len) lies in a mapped region or alias of the worker's. */
static int fz_mapped(const unsigned char *p, size_t len)
{
    const vcu__alias_t *a;
    unsigned int i;

    for (i = 0; i < vcu__w.nregions; i++) {
        const vcu__region_t *r = &vcu__w.regions[i];

        if (p >= r->base && len <= r->size && (size_t)(p - r->base) <= r->size - len)
            return 1;
    }
    for (a = vcu__w.aliases; a != NULL; a = a->next)
        if (p >= a->base && len <= a->len && (size_t)(p - a->base) <= a->len - len)
            return 1;
    return 0;
}

void vcu_backend_submit(vcu_backend_t *be, vcu_request_t *req)
{
    const unsigned char *q = req->req;
    struct vcu_resp_hdr h;
    struct vcu_req_hdr rh;
    volatile unsigned char sum = 0;
    unsigned int i, k;
    size_t n;

    (void)be;
    FZ_CHECK(req->req_len >= sizeof(rh) && req->resp_cap >= sizeof(h));
    for (n = 0; n < req->req_len; n++)
        sum ^= q[n];
    memcpy(&rh, q, sizeof(rh));
    if (fz_debug)
        fprintf(stderr, "fuzz: the backend gets op 0x%x, %u segments\n", rh.opcode, req->nsegs);
    FZ_CHECK(req->nsegs <= VCU_MAX_SEGS && (req->nsegs == 0 || req->segs != NULL));
    for (i = 0; i < req->nsegs; i++) {
        const vcu_segment_t *s = &req->segs[i];
        uint64_t total = 0;

        for (k = 0; k < s->iovcnt; k++) {
            const unsigned char *b = s->iov[k].iov_base;
            size_t l = s->iov[k].iov_len;

            /* Host memory of the lengths the worker says: its own mapping
             * of the guest's RAM, every byte of it there. */
            FZ_CHECK(l > 0 && fz_mapped(b, l));
            sum ^= b[0];
            sum ^= b[l - 1];
            total += l;
        }
        /* vcu_backend.h: a segment's len is the sum of its iovecs'. */
        FZ_CHECK(total == s->len);
    }
    (void)sum;
    memset(req->resp, 0xab, req->resp_cap);
    memset(&h, 0, sizeof(h));
    h.status = VCU_S_OK;
    h.req_id = rh.req_id;
    memcpy(req->resp, &h, sizeof(h));
    req->resp_len = sizeof(h);
    req->done(req);
}

/* A migration frame (VCU_IPC_STATE) reaches the backend with a descriptor
 * the worker took from the socket; answered at once, refused. */
void vcu_backend_submit_state(vcu_backend_t *be, vcu_request_t *req, int fd)
{
    struct vcu_resp_hdr h;

    (void)be;
    FZ_CHECK(fd >= 0 && req->req_len >= sizeof(struct vcu_req_hdr) &&
             req->resp_cap >= sizeof(h));
    memset(&h, 0, sizeof(h));
    h.status = VCU_S_EINVAL;
    memcpy(req->resp, &h, sizeof(h));
    req->resp_len = sizeof(h);
    req->done(req);
}

/* ---- the harness ---------------------------------------------------------------- */

static struct vcu_ipc_ring_ctl *fz_req_ctl, *fz_resp_ctl;
static unsigned char *fz_req_data, *fz_resp_data;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    unsigned int i;

    (void)argc;
    (void)argv;
    fz_debug = getenv("FUZZ_DEBUG") != NULL;
    signal(SIGPIPE, SIG_IGN);
    for (i = 0; i < 6; i++) {
        fz_region_fd[i] = memfd_create("fz-ram", MFD_CLOEXEC);
        FZ_CHECK(fz_region_fd[i] >= 0 && ftruncate(fz_region_fd[i], (off_t)fz_region_sizes[i]) == 0);
    }
    /* The rings as heap buffers of their exact size. */
    fz_req_ctl = calloc(1, sizeof(*fz_req_ctl));
    fz_resp_ctl = calloc(1, sizeof(*fz_resp_ctl));
    fz_req_data = malloc(FZ_REQ_RING);
    fz_resp_data = malloc(VCU_IPC_RESP_RING);
    vcu__w.rbuf = malloc(FZ_REQ_RING);
    FZ_CHECK(fz_req_ctl && fz_resp_ctl && fz_req_data && fz_resp_data && vcu__w.rbuf);
    return 0;
}

/* What a worker holds that outlives a request: gone with its process. */
static void fz_worker_reset(void)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    vcu__alias_t *a;
    unsigned int i;

    /* A worker may end holding wlock (a broken reply ring). */
    vcu__w.wlock = m;
    for (i = 0; i < vcu__w.nregions; i++) {
        munmap(vcu__w.regions[i].base, (size_t)vcu__w.regions[i].size);
        close(vcu__w.regions[i].fd);
    }
    vcu__w.nregions = 0;
    for (i = 0; i < vcu__w.nfdq; i++)
        close(vcu__w.fdq[i]);
    vcu__w.nfdq = 0;
    while ((a = vcu__w.aliases) != NULL) {
        vcu__w.aliases = a->next;
        munmap(a->base, a->len);
        free(a);
    }
    vcu__w.nregs = 0;
    vcu__w.shave = 0;
    fz_nadds = 0;
    if (vcu__w.fd >= 0)
        close(vcu__w.fd);
    vcu__w.fd = -1;
}

/* Sends the socket's bytes with n guest RAM files, then QEMU's end closes. */
static void fz_sock(int fd, const uint8_t *p, size_t len, uint8_t r)
{
    unsigned int n = r & 7, i;
    int fds[8];

    for (i = 0; i < n; i++)
        fds[i] = fz_region_fd[((r >> 3) + i) % 6];
    if (len > 0)
        FZ_CHECK(vcu__fd_send(fd, p, len, fds, n, 0) == (ssize_t)len);
    close(fd);
}

/* The shared area as QEMU made it, with the header's fields from the
 * input: the worker checks it (and ends if it is not one). */
static void fz_shm(fz_in_t *in)
{
    struct vcu_ipc_shm shm;
    uint64_t size;
    int fd;

    memset(&shm, 0, sizeof(shm));
    shm.magic = in_u(in, 8);
    shm.req_size = (uint32_t)in_u(in, 4);
    shm.resp_size = (uint32_t)in_u(in, 4);
    size = VCU_IPC_SHM_HDR + (uint64_t)(shm.req_size % (1u << 20)) + VCU_IPC_RESP_RING;
    fd = memfd_create("fz-shm", MFD_CLOEXEC);
    FZ_CHECK(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
    FZ_CHECK(pwrite(fd, &shm, sizeof(shm), 0) == (ssize_t)sizeof(shm));
    fz_last_map = NULL;
    fz_in_worker = 1;
    if (setjmp(fz_jmp) == 0)
        vcu__map_shm(fd, -1, -1);
    fz_in_worker = 0;
    /* Good or not, the area goes (the harness's own rings are bound after
     * this), and so does the file if the worker ended before it closed it. */
    if (fz_last_map != NULL)
        munmap(fz_last_map, fz_last_len);
    if (fcntl(fd, F_GETFD) != -1)
        close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = { data, size };
    uint8_t flags = (uint8_t)in_u(&in, 1), tk, r;
    uint64_t start, tail, head = 0, ring_len, i;
    struct vcu_ipc_hdr h;
    unsigned char *body;
    int sv[2];

    if (flags & W_SHM)
        fz_shm(&in);
    fz_add_fails = (flags & W_ADD_FAILS) != 0;
    start = in_u(&in, 1) * 16;
    if (flags & W_NEAR_END)
        start -= 2 * FZ_REQ_RING;
    tk = (uint8_t)in_u(&in, 1);
    tail = tk & 1 ? in_u(&in, 8) : start + in_u(&in, 2);
    if (flags & W_HEAD)
        head = in_u(&in, 8);
    ring_len = in_u(&in, 2);
    if (ring_len > in.n)
        ring_len = in.n;
    if (ring_len > FZ_REQ_RING)
        ring_len = FZ_REQ_RING;
    memset(fz_req_data, 0, FZ_REQ_RING);
    for (i = 0; i < ring_len; i++)
        fz_req_data[(start + i) & (FZ_REQ_RING - 1)] = in.p[i];
    in.p += ring_len;
    in.n -= ring_len;
    r = (uint8_t)in_u(&in, 1);

    /* The channel: rings, and the socket QEMU writes the rest to. */
    memset(fz_req_ctl, 0, sizeof(*fz_req_ctl));
    memset(fz_resp_ctl, 0, sizeof(*fz_resp_ctl));
    vcu__ring_init(&vcu__w.req, fz_req_ctl, fz_req_data, FZ_REQ_RING, -1);
    vcu__ring_init(&vcu__w.resp, fz_resp_ctl, fz_resp_data, VCU_IPC_RESP_RING, -1);
    vcu__w.req.pos = start;
    fz_req_ctl->head = start;
    fz_req_ctl->tail = tail;
    vcu__w.resp.pos = vcu__w.resp.head_seen = start;
    fz_resp_ctl->head = start;
    fz_resp_ctl->tail = start;
    if (flags & W_HEAD) {
        /* The producer looks at the head when the room it saw last is too
         * little: a ring it saw nearly full.  A head that leaves room is
         * the empty ring's (a full one would have the worker wait for the
         * proxy's reader forever); any other is impossible. */
        vcu__w.resp.head_seen = start - VCU_IPC_RESP_RING + 16;
        fz_resp_ctl->head = head - vcu__w.resp.head_seen <= start - vcu__w.resp.head_seen
                                ? start
                                : head;
    }
    vcu__w.rings = true;
    FZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    vcu__w.fd = sv[0];
    fz_sock(sv[1], in.p, in.n, r);

    fz_replies = 0;
    fz_in_worker = 1;
    /* The worker's end leaves what it held; its process would be gone. */
    __lsan_disable();
    if (setjmp(fz_jmp) == 0)
        (void)vcu__take_frames();
    __lsan_enable();
    fz_in_worker = 0;

    /* Its replies: whole frames of a reply each. */
    body = malloc(VCU_IPC_MAX_RESP_BODY);
    FZ_CHECK(body != NULL);
    {
        vcu__ring_t c;

        vcu__ring_init(&c, fz_resp_ctl, fz_resp_data, VCU_IPC_RESP_RING, -1);
        c.pos = fz_resp_ctl->head;
        if (!(flags & W_HEAD) || fz_resp_ctl->head == start) {
            int rc;

            while ((rc = vcu__ring_get(&c, &h, body, VCU_IPC_MAX_RESP_BODY,
                                       VCU_IPC_MAX_RESP_BODY)) > 0) {
                FZ_CHECK(h.type == VCU_IPC_RESP && h.len >= sizeof(struct vcu_resp_hdr));
                fz_replies++;
            }
            FZ_CHECK(rc == 0);
        }
    }
    free(body);
    fz_worker_reset();
    return 0;
}
