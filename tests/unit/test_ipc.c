/*
 * CUDA IPC in the CUDA executor (host-backend/worker/cuda_ipc.c), against
 * the CPU stand-in: two processes, each a backend as a worker is, sharing
 * one VM's IPC folder and memory account.  The exporter's memory is
 * opened, read and written by the other process, and its event opened;
 * the opener is charged what it opened (past the VM's quota it gets
 * CUDA_ERROR_OUT_OF_MEMORY); a handle reaches nothing from another VM's
 * folder, forged, of the wrong kind, or the process's own; records go
 * with their object and with the session; a session that exported
 * refuses to migrate, naming CUDA IPC.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

#include "ut.h"
#include "vcu_account.h"

#define MiB (1ull << 20)
#define TI_CTX (1 * MiB)            /* what each context is charged here */
#define TI_QUOTA (12 * MiB)
#define TI_SMALL (64u << 10)
#define TI_BIG (8 * MiB)
#define INVAL ((uint32_t)CUDA_ERROR_INVALID_VALUE)
#define WIRE_EINVAL (0x10000u + VCU_S_EINVAL)

typedef struct ti_s {
    vcu_backend_t *be;
    uint64_t s;
} ti_t;

/* What the exporter sends the other process. */
typedef struct ti_msg_s {
    struct vcu_cu_ipc_handle small, big, ev;
} ti_msg_t;

/* slot: the session's in the account, as the daemon gives a worker one. */
static int ti_open(ti_t *c, const char *dir, vcu_account_t *a, int slot)
{
    vcu_backend_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    cfg.gpus = "0";
    cfg.account = a;
    cfg.account_slot = slot;
    cfg.ctx_bytes = TI_CTX;
    cfg.ipc_dir = dir;
    c->be = NULL;
    ASSERT_EQ(0, vcu_backend_new(&cfg, &c->be));
    if (vcu_backend_cuda_error(c->be) != NULL)
        VCU_TEST_FAIL_("no CUDA (is VCU_LIBCUDA the stand-in?): %s", vcu_backend_cuda_error(c->be));
    ASSERT_EQ(VCU_S_OK, ut_open(c->be, &c->s));
    return 0;
}

static void ti_close(ti_t *c)
{
    ut_close(c->be, c->s);
    vcu_backend_free(c->be);
}

/* One request without segments; the CUresult or 0x10000 + the wire
 * status; the reply's first rlen bytes into resp. */
static uint32_t ti_do(ti_t *c, uint32_t op, const void *p, uint32_t plen, void *resp, size_t rlen)
{
    return ut_cu_do(c->be, c->s, op, p, plen, resp, rlen);
}

static uint32_t ti_u64(ti_t *c, uint32_t op, uint64_t v, uint64_t *out)
{
    struct vcu_cu_u64_req rq = { { 0, 0 }, v };
    struct vcu_cu_u64_resp rp;
    uint32_t r = ti_do(c, op, &rq, sizeof(rq), &rp, sizeof(rp));

    if (out != NULL)
        *out = rp.value;
    return r;
}

/* A migration state operation (VCU_BACKEND_OP_*) into fd: the wire
 * status, and the reply's reason into why. */
static uint32_t ti_state(ti_t *c, uint32_t op, int fd, char *why, size_t whylen)
{
    ut_req_t *t = ut_req_new();
    uint32_t st;

    ut_req_build(t, op, c->s, NULL, 0);
    vcu_backend_submit_state(c->be, &t->r, fd);
    if (ut_wait_count(&t->ndone, 1) != 0) {
        free(t);
        return VCU_S_EIO;
    }
    st = ut_status(t);
    snprintf(why, whylen, "%s", ut_resp(t)->payload_len > 0 ? (char *)ut_resp_payload(t) : "");
    free(t);
    return st;
}

static uint32_t ti_alloc(ti_t *c, uint64_t size, uint64_t *p)
{
    struct vcu_cu_mem_alloc_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.size = size;
    r = ti_do(c, VCU_OP_CU_MEM_ALLOC, &rq, sizeof(rq), &rp, sizeof(rp));
    *p = rp.value;
    return r;
}

/* A copy of n bytes between host and device. */
static uint32_t ti_copy(ti_t *c, int htod, uint64_t dptr, void *host, size_t n)
{
    ut_req_t *t = ut_req_new();
    struct vcu_cu_memcpy_req rq;
    struct iovec iov = { host, n };
    struct vcu_cu_resp r;
    uint32_t st;

    memset(&rq, 0, sizeof(rq));
    rq.dst = htod ? dptr : 0;
    rq.src = htod ? 0 : dptr;
    rq.size = n;
    ut_req_add_seg_iov(t, htod ? VCU_SEG_TO_DEVICE : VCU_SEG_FROM_DEVICE, &iov, 1);
    ut_req_build(t, htod ? VCU_OP_CU_MEMCPY_HTOD : VCU_OP_CU_MEMCPY_DTOH, c->s, &rq, sizeof(rq));
    vcu_backend_execute(c->be, &t->r);
    st = ut_status(t);
    memcpy(&r, ut_resp_payload(t), sizeof(r));
    free(t);
    return st != VCU_S_OK ? 0x10000 + st : r.result;
}

static uint32_t ti_get(ti_t *c, uint32_t op, uint64_t v, struct vcu_cu_ipc_handle *h)
{
    struct vcu_cu_u64_req rq = { { 0, 0 }, v };
    struct vcu_cu_ipc_handle_resp rp;
    uint32_t r = ti_do(c, op, &rq, sizeof(rq), &rp, sizeof(rp));

    *h = rp.h;
    return r;
}

static uint32_t ti_open_h(ti_t *c, uint32_t op, const struct vcu_cu_ipc_handle *h, uint32_t flags,
                          uint64_t *out)
{
    struct vcu_cu_ipc_open_req rq;
    struct vcu_cu_u64_resp rp;
    uint32_t r;

    memset(&rq, 0, sizeof(rq));
    rq.h = *h;
    rq.flags = flags;
    r = ti_do(c, op, &rq, sizeof(rq), &rp, sizeof(rp));
    if (out != NULL)
        *out = rp.value;
    return r;
}

/* Whether dir holds the record h names. */
static int ti_has_record(const char *dir, const struct vcu_cu_ipc_handle *h)
{
    char p[512];
    unsigned int i;
    int n;

    n = snprintf(p, sizeof(p), "%s/vcu-ipc.%x.", dir, h->pid);
    for (i = 0; i < VCU_CU_IPC_TOKEN; i++)
        n += snprintf(p + n, sizeof(p) - (size_t)n, "%02x", h->token[i]);
    return access(p, F_OK) == 0;
}

static uint64_t ti_charged(vcu_account_t *a)
{
    uint64_t sum = 0;
    uint32_t i;

    for (i = 0; i < a->nslots; i++)
        sum += atomic_load(&a->slot[i].charged[0]);
    return sum;
}

/* The other process: a backend of the same VM's folder and account
 * opens what it was sent, reads and writes it; one of another VM's
 * folder opens nothing.  Exit status 0: all as expected. */
static int ti_opener(int rd, int wr, const char *dir, const char *other, vcu_account_t *a)
{
    unsigned char buf[TI_SMALL];
    ti_msg_t m;
    ti_t c, x;
    uint64_t p = 0, q = 0, ev = 0;
    char done = 1;
    size_t i;

    ASSERT_EQ((ssize_t)sizeof(m), read(rd, &m, sizeof(m)));
    /* Another VM's folder: no such record. */
    CHECK(ti_open(&x, other, NULL, -1));
    ASSERT_EQ(INVAL, ti_open_h(&x, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.small, 0, &p));
    ASSERT_EQ(INVAL, ti_open_h(&x, VCU_OP_CU_IPC_OPEN_EVENT_HANDLE, &m.ev, 0, &ev));
    ti_close(&x);

    CHECK(ti_open(&c, dir, a, 1));
    ASSERT_EQ(CUDA_SUCCESS, ti_open_h(&c, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.small,
                                      CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, &p));
    ASSERT_TRUE(p != 0);
    ASSERT_EQ(CUDA_SUCCESS, ti_copy(&c, 0, p, buf, sizeof(buf)));
    for (i = 0; i < sizeof(buf); i++)
        ASSERT_EQ((unsigned char)(i * 7 + 1), buf[i]);
    /* Opened twice in one session: one answer. */
    ASSERT_EQ(CUDA_ERROR_ALREADY_MAPPED,
              ti_open_h(&c, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.small, 0, &q));
    /* The big one: charged to this process too, past the VM's quota. */
    ASSERT_EQ(CUDA_ERROR_OUT_OF_MEMORY,
              ti_open_h(&c, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.big, 0, &q));
    ASSERT_TRUE(ti_charged(a) <= TI_QUOTA);
    memset(buf, 0x5a, sizeof(buf));
    ASSERT_EQ(CUDA_SUCCESS, ti_copy(&c, 1, p, buf, sizeof(buf)));
    /* Not this session's memory to free; a pointer it did not open. */
    ASSERT_EQ(INVAL, ti_u64(&c, VCU_OP_CU_MEM_FREE, p, NULL));
    ASSERT_EQ(INVAL, ti_u64(&c, VCU_OP_CU_IPC_CLOSE_MEM_HANDLE, p + 256, NULL));
    ASSERT_EQ(CUDA_SUCCESS, ti_open_h(&c, VCU_OP_CU_IPC_OPEN_EVENT_HANDLE, &m.ev, 0, &ev));
    ASSERT_TRUE(ev != 0);
    ASSERT_EQ(CUDA_SUCCESS, ti_u64(&c, VCU_OP_CU_EVENT_SYNCHRONIZE, ev, NULL));
    ASSERT_EQ(CUDA_SUCCESS, ti_u64(&c, VCU_OP_CU_EVENT_DESTROY, ev, NULL));
    ASSERT_EQ(CUDA_SUCCESS, ti_u64(&c, VCU_OP_CU_IPC_CLOSE_MEM_HANDLE, p, NULL));
    ASSERT_EQ(INVAL, ti_u64(&c, VCU_OP_CU_IPC_CLOSE_MEM_HANDLE, p, NULL));
    ti_close(&c);
    ASSERT_EQ(1, (int)write(wr, &done, 1));
    return 0;
}

static int ti_mkdir(char *tmpl)
{
    ASSERT_TRUE(mkdtemp(tmpl) != NULL);
    return 0;
}

static void ti_rmdir(const char *dir)
{
    char p[512];
    struct dirent *e;
    DIR *d = opendir(dir);

    while (d != NULL && (e = readdir(d)) != NULL) {
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(p);
    }
    if (d != NULL)
        closedir(d);
    rmdir(dir);
}

static int ti_exporter(const char *dir, int wr, int rd, vcu_account_t *a)
{
    unsigned char buf[TI_SMALL];
    struct vcu_cu_ipc_handle h2, bad;
    ti_msg_t m;
    ti_t c, d;
    uint64_t small = 0, big = 0, ev = 0, plain = 0, other = 0, p = 0;
    char done;
    size_t i;

    CHECK(ti_open(&c, dir, a, 0));
    ASSERT_EQ(CUDA_SUCCESS, ti_alloc(&c, TI_SMALL, &small));
    ASSERT_EQ(CUDA_SUCCESS, ti_alloc(&c, TI_BIG, &big));
    for (i = 0; i < sizeof(buf); i++)
        buf[i] = (unsigned char)(i * 7 + 1);
    ASSERT_EQ(CUDA_SUCCESS, ti_copy(&c, 1, small, buf, sizeof(buf)));
    ASSERT_EQ(CUDA_SUCCESS, ti_get(&c, VCU_OP_CU_IPC_GET_MEM_HANDLE, small, &m.small));
    ASSERT_EQ(VCU_CU_IPC_MAGIC, m.small.magic);
    ASSERT_EQ(VCU_CU_IPC_MEM, m.small.kind);
    ASSERT_EQ((uint32_t)getpid(), m.small.pid);
    ASSERT_TRUE(ti_has_record(dir, &m.small));
    /* Inside the allocation: the same name. */
    ASSERT_EQ(CUDA_SUCCESS, ti_get(&c, VCU_OP_CU_IPC_GET_MEM_HANDLE, small + 512, &h2));
    ASSERT_EQ(0, memcmp(&h2, &m.small, sizeof(h2)));
    ASSERT_EQ(CUDA_SUCCESS, ti_get(&c, VCU_OP_CU_IPC_GET_MEM_HANDLE, big, &m.big));
    ASSERT_TRUE(memcmp(m.big.token, m.small.token, VCU_CU_IPC_TOKEN) != 0);
    ASSERT_EQ(CUDA_SUCCESS, ti_u64(&c, VCU_OP_CU_EVENT_CREATE,
                                   CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, &ev));
    ASSERT_EQ(CUDA_SUCCESS, ti_get(&c, VCU_OP_CU_IPC_GET_EVENT_HANDLE, ev, &m.ev));
    ASSERT_EQ(VCU_CU_IPC_EVENT, m.ev.kind);
    /* An event that is not interprocess: the driver refuses it. */
    ASSERT_EQ(CUDA_SUCCESS, ti_u64(&c, VCU_OP_CU_EVENT_CREATE, 0, &plain));
    ASSERT_EQ(CUDA_ERROR_INVALID_HANDLE, ti_get(&c, VCU_OP_CU_IPC_GET_EVENT_HANDLE, plain, &h2));

    /* Another session's memory, and memory of no one. */
    d.be = c.be;
    ASSERT_EQ(VCU_S_OK, ut_open(d.be, &d.s));
    ASSERT_EQ(CUDA_SUCCESS, ti_alloc(&d, 4096, &other));
    ASSERT_EQ(INVAL, ti_get(&c, VCU_OP_CU_IPC_GET_MEM_HANDLE, other, &h2));
    ASSERT_EQ(INVAL, ti_get(&c, VCU_OP_CU_IPC_GET_MEM_HANDLE, 0x1000, &h2));
    /* Its own handle: the record is found, and the driver refuses a
     * process's own handle (the stand-in with INVALID_CONTEXT). */
    ASSERT_EQ(CUDA_ERROR_INVALID_CONTEXT,
              ti_open_h(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.small, 0, &p));
    /* Forged: another token, another pid, the wrong kind, set reserved
     * bytes, flags CUDA does not have, a short payload. */
    bad = m.small;
    bad.token[5] ^= 1;
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &bad, 0, &p));
    bad = m.small;
    bad.pid ^= 0x100;
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &bad, 0, &p));
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_EVENT_HANDLE, &m.small, 0, &p));
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.ev, 0, &p));
    bad = m.small;
    bad.reserved2[31] = 1;
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &bad, 0, &p));
    bad = m.small;
    bad.magic ^= 1;
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &bad, 0, &p));
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.small, 0x80, &p));
    ASSERT_EQ(INVAL, ti_open_h(&d, VCU_OP_CU_IPC_OPEN_EVENT_HANDLE, &m.ev, 1, &p));
    ASSERT_EQ(WIRE_EINVAL, ti_do(&d, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &m.small, 40, NULL, 0));
    ASSERT_EQ(VCU_S_OK, ut_close(d.be, d.s));

    /* A session that exported refuses to migrate, saying why. */
    {
        char why[256];
        int fd = memfd_create("ti-save", MFD_CLOEXEC);

        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(VCU_S_EBUSY, ti_state(&c, VCU_BACKEND_OP_SAVE, fd, why, sizeof(why)));
        ASSERT_TRUE(strstr(why, "CUDA IPC") != NULL);
        close(fd);
    }

    /* The other process opens, reads and writes. */
    ASSERT_EQ((ssize_t)sizeof(m), write(wr, &m, sizeof(m)));
    ASSERT_EQ(1, (int)read(rd, &done, 1));
    ASSERT_EQ(CUDA_SUCCESS, ti_copy(&c, 0, small, buf, sizeof(buf)));
    for (i = 0; i < sizeof(buf); i++)
        ASSERT_EQ(0x5a, buf[i]);

    /* The records go with their objects, and the rest with the session. */
    ASSERT_EQ(CUDA_SUCCESS, ti_u64(&c, VCU_OP_CU_MEM_FREE, small, NULL));
    ASSERT_TRUE(!ti_has_record(dir, &m.small));
    ASSERT_TRUE(ti_has_record(dir, &m.big));
    ASSERT_TRUE(ti_has_record(dir, &m.ev));
    ti_close(&c);
    ASSERT_TRUE(!ti_has_record(dir, &m.big));
    ASSERT_TRUE(!ti_has_record(dir, &m.ev));
    return 0;
}

TEST(ipc_two_processes)
{
    char dir[] = "/tmp/vcu-ipc-test-XXXXXX", other[] = "/tmp/vcu-ipc-other-XXXXXX";
    int to[2], back[2], st = 0, rc;
    vcu_account_t *a;
    pid_t pid;

    CHECK(ti_mkdir(dir));
    CHECK(ti_mkdir(other));
    ASSERT_EQ(0, vcu__acct_new(TI_QUOTA, 8, &a));
    ASSERT_EQ(0, pipe(to));
    ASSERT_EQ(0, pipe(back));
    /* Before either process loads the stand-in: each has its own. */
    pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        close(to[1]);
        close(back[0]);
        _exit(ti_opener(to[0], back[1], dir, other, a) == 0 ? 0 : 1);
    }
    close(to[0]);
    close(back[1]);
    rc = ti_exporter(dir, to[1], back[0], a);
    close(to[1]);
    ASSERT_EQ(pid, waitpid(pid, &st, 0));
    ti_rmdir(dir);
    ti_rmdir(other);
    vcu__acct_put(a);
    ASSERT_EQ(0, rc);
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return 0;
}

/* A backend without a VM's folder (in-process, not a daemon's worker)
 * offers no IPC, and says so. */
TEST(ipc_not_offered)
{
    struct vcu_cu_ipc_handle h;
    ti_t c;
    uint64_t p = 0;

    CHECK(ti_open(&c, NULL, NULL, -1));
    ASSERT_EQ(CUDA_SUCCESS, ti_alloc(&c, 4096, &p));
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, ti_get(&c, VCU_OP_CU_IPC_GET_MEM_HANDLE, p, &h));
    memset(&h, 0, sizeof(h));
    ASSERT_EQ(CUDA_ERROR_NOT_SUPPORTED, ti_open_h(&c, VCU_OP_CU_IPC_OPEN_MEM_HANDLE, &h, 0, &p));
    ti_close(&c);
    return 0;
}
