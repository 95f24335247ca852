/*
 * Isolation between guest processes: a second process (the attacker,
 * this program run again with "attacker") tries to reach the first one's
 * memory every way a CUDA program can:
 *   - its device allocation, by address, with cudaMemcpy;
 *   - the same address from a kernel (on the GPU: an illegal address,
 *     which poisons the attacker's own context and nothing else);
 *   - guest RAM outside its own buffers, with requests of its own making
 *     on /dev/vcuda0: the device pointer of its own mapped page, the
 *     address range around it, and copies from there to the victim's
 *     page (by guest-physical address) and to host addresses.  Were guest
 *     RAM registered with CUDA as a whole, the range would be all of it;
 *   - a graph copy node of its own making from the victim's allocation
 *     and from host addresses into its own mapped page.
 * None of it may give the secret.  Then the victim's memory and CUDA work
 * are checked intact, and a third, fresh process works.
 *
 * Guest-physical addresses come from /proc/self/pagemap (root, in the
 * guest); without /dev/vcuda0 (natively, in loopback) that attack is
 * skipped.
 */
#define TEST_NAME "isolation"
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cuda.h>
#include "vcu_proto.h"
#include "vcu_calls.h"
#include "vcuda_ioctl.h"
#include "vcu_test.h"

#define SECRET 0x5ec7e75du
#define N (256 * 1024)

extern char **environ;

__global__ void iso_fill(unsigned *p, unsigned v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        p[i] = v;
}

__global__ void iso_read(const unsigned *p, unsigned *out)
{
    out[0] = p[0];
}

/* The guest-physical address of the byte at p, or 0 if unknown. */
static uint64_t gpa_of(const void *p)
{
    uint64_t e = 0, page = (uint64_t)sysconf(_SC_PAGESIZE);
    int fd = open("/proc/self/pagemap", O_RDONLY);

    if (fd < 0)
        return 0;
    if (pread(fd, &e, sizeof(e), (off_t)((uintptr_t)p / page * sizeof(e))) != sizeof(e))
        e = 0;
    close(fd);
    if (!(e & (1ull << 63)) || (e & ((1ull << 55) - 1)) == 0)
        return 0;
    return (e & ((1ull << 55) - 1)) * page + (uintptr_t)p % page;
}

static int run(char *const argv[])
{
    pid_t pid;
    int st;

    fflush(stdout);
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0)
        return -1;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* One CUDA request on the raw device: 0 and the reply, or -1. */
static int raw(int f, uint32_t op, const void *req, uint32_t len, void *seg, uint64_t seg_len,
               uint32_t seg_flags, void *resp, uint32_t resp_cap)
{
    struct vcuda_seg sg = { (uintptr_t)seg, seg_len, seg_flags, 0 };
    struct vcuda_submit sub;

    memset(&sub, 0, sizeof(sub));
    sub.opcode = op;
    sub.req_addr = (uintptr_t)req;
    sub.req_len = len;
    sub.nsegs = seg != NULL ? 1 : 0;
    sub.segs_addr = (uintptr_t)&sg;
    sub.resp_addr = (uintptr_t)resp;
    sub.resp_cap = resp_cap;
    if (ioctl(f, VCUDA_IOC_SUBMIT, &sub) != 0 || sub.status != VCU_S_OK)
        return -1;
    return 0;
}

/* CU_MEMCPY_DTOH of 16 bytes from src: the CUresult, v filled on success. */
static unsigned raw_read(int f, uint64_t src, unsigned v[4])
{
    struct vcu_cu_memcpy_req rq;
    struct vcu_cu_resp rs;

    memset(&rq, 0, sizeof(rq));
    rq.src = src;
    rq.size = 16;
    memset(&rs, 0, sizeof(rs));
    if (raw(f, VCU_OP_CU_MEMCPY_DTOH, &rq, sizeof(rq), v, 16, VCUDA_SEG_FROM_DEVICE, &rs,
            sizeof(rs)) != 0)
        return 999;
    return rs.result;
}

/*
 * A graph copy node of its own making (no library in the way) from src
 * into the attacker's own mapped page (device pointer own, memory m),
 * instantiated and run: the CUresult of the first step that failed, or
 * 0 when the copy ran (then m holds what it read).
 */
static unsigned raw_graph_copy(int f, uint64_t src, uint64_t own)
{
    struct vcu_cu_u64_req q;
    struct vcu_cu_u64_resp g, n, x;
    struct vcu_cu_graph_node_req nq;
    struct vcu_cu_pair_req pq;
    struct vcu_cu_resp rs;
    struct vcu_cu_hdr h;

    memset(&q, 0, sizeof(q));
    memset(&g, 0, sizeof(g));
    if (raw(f, VCU_OP_CU_GRAPH_CREATE, &q, sizeof(q), NULL, 0, 0, &g, sizeof(g)) != 0)
        return 999;
    if (g.r.result != 0)
        return g.r.result;
    memset(&nq, 0, sizeof(nq));
    nq.graph = g.value;
    nq.kind = VCU_CU_NODE_MEMCPY;
    nq.dst = own;
    nq.src = src;
    nq.width = 16;
    memset(&n, 0, sizeof(n));
    if (raw(f, VCU_OP_CU_GRAPH_ADD_NODE, &nq, sizeof(nq), NULL, 0, 0, &n, sizeof(n)) != 0)
        return 999;
    if (n.r.result != 0)
        return n.r.result;
    memset(&pq, 0, sizeof(pq));
    pq.a = g.value;
    memset(&x, 0, sizeof(x));
    if (raw(f, VCU_OP_CU_GRAPH_INSTANTIATE, &pq, sizeof(pq), NULL, 0, 0, &x, sizeof(x)) != 0)
        return 999;
    if (x.r.result != 0)
        return x.r.result;
    pq.a = x.value;
    pq.b = VCU_CU_STREAM_LEGACY;
    memset(&rs, 0, sizeof(rs));
    if (raw(f, VCU_OP_CU_GRAPH_LAUNCH, &pq, sizeof(pq), NULL, 0, 0, &rs, sizeof(rs)) != 0)
        return 999;
    if (rs.result != 0)
        return rs.result;
    memset(&h, 0, sizeof(h));
    memset(&rs, 0, sizeof(rs));
    if (raw(f, VCU_OP_CU_CTX_SYNCHRONIZE, &h, sizeof(h), NULL, 0, 0, &rs, sizeof(rs)) != 0)
        return 999;
    return rs.result;
}

/*
 * Guest RAM by guest-physical address and host addresses, from the range
 * around this process's own mapped page.  Returns 1 if the range is more
 * than the page or any read succeeded where it must not.
 */
static int raw_ram_attack(uint64_t victim_gpa, uint64_t victim_dev)
{
    struct vcuda_session_open so;
    struct vcu_cu_u64_req q;
    struct vcu_cu_u64_resp dp;
    struct vcu_call_cuMemGetAddressRange_v2_req rq;
    struct vcu_call_cuMemGetAddressRange_v2_resp rg;
    unsigned v[4];
    uint64_t g0s[] = { 0, 0x100000 }, probes[4];
    unsigned char *m;
    int f = open("/dev/vcuda0", O_RDWR | O_CLOEXEC), hit = 0;
    unsigned i, r;

    if (f < 0) {
        printf("info: attacker: no /dev/vcuda0: raw attack skipped\n");
        return 0;
    }
    memset(&so, 0, sizeof(so));
    so.version_min = so.version_max = VCU_PROTO_VERSION;
    so.features = VCU_FEAT_CUDA;
    if (ioctl(f, VCUDA_IOC_SESSION_OPEN, &so) != 0 || so.status != VCU_S_OK)
        vcu_test_fail("attacker: raw session");
    m = (unsigned char *)mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (m == MAP_FAILED)
        vcu_test_fail("attacker: mmap of /dev/vcuda0");
    memset(m, 0, 4096);
    memset(&q, 0, sizeof(q));
    memset(&dp, 0, sizeof(dp));
    if (raw(f, VCU_OP_CU_HOST_DEVICE_POINTER, &q, sizeof(q), m, 4096, VCUDA_SEG_TO_DEVICE, &dp,
            sizeof(dp)) != 0 || dp.r.result != 0)
        vcu_test_fail("attacker: device pointer of its own mapped page (%u)", dp.r.result);
    VCU_CALL_INIT(rq, cuMemGetAddressRange_v2);
    rq.dptr = dp.value;
    memset(&rg, 0, sizeof(rg));
    if (raw(f, VCU_OP_CU_CALL, &rq, sizeof(rq), NULL, 0, 0, &rg, sizeof(rg)) != 0)
        vcu_test_fail("attacker: address range request");
    printf("info: attacker: own mapped page's range: %llu bytes (result %u)\n",
           (unsigned long long)rg.psize, rg.r.result);
    if (rg.r.result == 0 && rg.psize > 2 * 4096) {
        printf("info: attacker: BREACH: the range around one mapped page is more than the page\n");
        hit = 1;
    }
    for (i = 0; victim_gpa != 0 && rg.r.result == 0 && i < 2; i++) {
        memset(v, 0, sizeof(v));
        r = raw_read(f, rg.pbase + victim_gpa - g0s[i], v);
        printf("info: attacker: read at range base + victim GPA - %#llx: %u\n",
               (unsigned long long)g0s[i], r);
        if (r == 0 && v[0] == SECRET) {
            printf("info: attacker: BREACH: that is the victim's page\n");
            hit = 1;
        }
    }
    probes[0] = dp.value - 0x100000;
    probes[1] = dp.value + 0x100000;
    probes[2] = 0x7f0000000000ull;
    probes[3] = 0x555555554000ull;
    for (i = 0; i < 4; i++) {
        memset(v, 0, sizeof(v));
        r = raw_read(f, probes[i], v);
        printf("info: attacker: read at host address %#llx: %u\n",
               (unsigned long long)probes[i], r);
        if (r == 0) {
            printf("info: attacker: BREACH: a read at a host address succeeded\n");
            hit = 1;
        }
    }
    /* A graph copy node naming the victim's device allocation and the
     * same host addresses, into the attacker's own page: an error (or a
     * copy that does not bring the secret), never the victim's data. */
    probes[0] = victim_dev;
    for (i = 0; i < 4; i++) {
        memset(m, 0, 16);
        r = raw_graph_copy(f, probes[i], dp.value);
        printf("info: attacker: graph copy node from %#llx: %u\n",
               (unsigned long long)probes[i], r);
        if (r == 0 && ((unsigned *)m)[0] == SECRET) {
            printf("info: attacker: BREACH: a graph copy node read the victim's memory\n");
            hit = 1;
        }
        if (r == 0 && i > 0) {
            printf("info: attacker: BREACH: a graph copy node read a host address\n");
            hit = 1;
        }
    }
    munmap(m, 4096);
    close(f);
    return hit;
}

static int attacker(unsigned long long dev, unsigned long long victim_gpa)
{
    unsigned v[4] = { 0 }, *own, *out;
    cudaError_t e;

    CK(cudaMalloc(&own, 4096));
    CK(cudaMemset(own, 0, 4096));
    CK(cudaMalloc(&out, 4096));
    CK(cudaMemset(out, 0, 4096));

    /* 1. The victim's allocation, by address. */
    e = cudaMemcpy(v, (void *)(uintptr_t)dev, sizeof(v), cudaMemcpyDeviceToHost);
    printf("info: attacker: cudaMemcpy from the victim's pointer: %s\n", cudaGetErrorName(e));
    if (e == cudaSuccess && v[0] == SECRET)
        vcu_test_fail("read another process's device memory by address");

    /* 2. Guest RAM outside its own buffers, and host addresses. */
    if (raw_ram_attack(victim_gpa, dev))
        vcu_test_fail("reached guest RAM outside its own buffers (see the BREACH lines)");

    /* 3. The victim's allocation from a kernel: the attacker's fault. */
    iso_read<<<1, 1>>>((const unsigned *)(uintptr_t)dev, out);
    e = cudaDeviceSynchronize();
    printf("info: attacker: kernel reading the victim's pointer: %s\n", cudaGetErrorName(e));
    if (e == cudaSuccess) {
        CK(cudaMemcpy(v, out, sizeof(v), cudaMemcpyDeviceToHost));
        if (v[0] == SECRET)
            vcu_test_fail("a kernel read another process's device memory");
    }
    return 0;
}

static int fresh(void)
{
    unsigned *d, h[64];

    CK(cudaMalloc(&d, sizeof(h)));
    iso_fill<<<1, 64>>>(d, 7u, 64);
    CK_LAUNCH();
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++)
        EXPECT(h[i] == 7u, "fresh process: h[%d] = %u", i, h[i]);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned *d, *host, *h, *page;
    char devs[32], gpas[32];
    char *aargv[] = { argv[0], (char *)"attacker", devs, gpas, NULL };
    char *fargv[] = { argv[0], (char *)"fresh", NULL };
    int rc;

    if (argc == 4 && strcmp(argv[1], "attacker") == 0)
        return attacker(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
    if (argc == 2 && strcmp(argv[1], "fresh") == 0)
        return fresh();

    h = (unsigned *)malloc(N * sizeof(unsigned));
    EXPECT(h != NULL, "malloc");
    CK(cudaMalloc(&d, N * sizeof(unsigned)));
    iso_fill<<<N / 256, 256>>>(d, SECRET, N);
    CK_LAUNCH();
    CK(cudaHostAlloc((void **)&host, 4096, cudaHostAllocMapped));
    for (int i = 0; i < 1024; i++)
        host[i] = SECRET;
    snprintf(devs, sizeof(devs), "%#llx", (unsigned long long)(uintptr_t)d);
    /* A pageable page: its guest-physical address is in pagemap. */
    page = (unsigned *)aligned_alloc(4096, 4096);
    EXPECT(page != NULL, "aligned_alloc");
    for (int i = 0; i < 1024; i++)
        page[i] = SECRET;
    mlock(page, 4096);
    snprintf(gpas, sizeof(gpas), "%#llx", (unsigned long long)gpa_of(page));

    rc = run(aargv);
    EXPECT(rc == 0, "the attacker process ended with %d", rc);
    printf("another process got none of this process's memory\n");

    /* Whatever the attacker's kernel did stayed in its process. */
    CK(cudaMemcpy(h, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == SECRET, "victim's memory changed: h[%d] = %#x", i, h[i]);
    for (int i = 0; i < 1024; i++)
        EXPECT(host[i] == SECRET, "victim's pinned memory changed: [%d] = %#x", i, host[i]);
    iso_fill<<<N / 256, 256>>>(d, 3u, N);
    CK_LAUNCH();
    CK(cudaMemcpy(h, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        EXPECT(h[i] == 3u, "victim after the attacker: h[%d] = %u", i, h[i]);
    printf("this process works on after the other one's fault\n");

    rc = run(fargv);
    EXPECT(rc == 0, "a fresh process ended with %d", rc);
    printf("a new process works\n");
    CK(cudaFreeHost(host));
    CK(cudaFree(d));
    free(page);
    free(h);
    vcu_test_pass();
    return 0;
}
