/*
 * ring_rtt: the round trip of one small frame each way between two
 * processes over the session rings (host-backend/vcu_ring.h), both sides
 * spinning, as a synchronous request crosses from the proxy to a worker
 * and back: the floor under backend_overhead's echo_proxy.  Natively, no
 * CUDA.  Each case runs in a fresh child, ROUNDS times, interleaved; the
 * threads are not pinned (the product does not pin them either), so each
 * round draws its own placement of the two processes.
 *
 *   ring_rtt [--rounds N] [--iters N]
 *
 * Cases (the request 64 bytes of body, the reply 32, as a stream query's):
 *   ring_rtt               the two sides alone
 *   ring_rtt_reader_pos    a third thread beside the requester spins on
 *                          the reply ring's tail and the consumer's
 *                          position, as the proxy's reader did while a
 *                          submitter polled (before poll_until)
 *   ring_rtt_reader_tail   the same thread spins on the tail alone, as the
 *                          reader now waits when idle (vcu__ring_wait_from)
 *   ring_rtt_reader_clock  the same thread spins on the clock alone, as the
 *                          reader now waits while a submitter polls
 *   ring_rtt_stamp         not the product's layout: each side spins on the
 *                          frame's own first line (a sequence number
 *                          written last), not on the ring's tail, which
 *                          saves one line transfer each way
 *
 * Prints CSV "metric,size_bytes,value,unit": the median over the rounds of
 * each round's median round trip, ns; '#' lines give every round's median,
 * 90th and 99th percentiles.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vcu_ring.h"

#define RR_RING (1u << 20)
#define RR_REQ 64
#define RR_REP 32
#define RR_WARM 1000
#define RR_MAX_ROUNDS 101

enum { RR_ALONE, RR_READER_POS, RR_READER_TAIL, RR_READER_CLOCK, RR_STAMP, RR_CASES };

static const char *const rr_name[RR_CASES] = { "ring_rtt", "ring_rtt_reader_pos",
                                               "ring_rtt_reader_tail", "ring_rtt_reader_clock",
                                               "ring_rtt_stamp" };

/* The shared area: the two rings' control blocks and bytes. */
typedef struct {
    struct vcu_ipc_ring_ctl c_req, c_rep;
    unsigned char d_req[RR_RING], d_rep[RR_RING];
} rr_area_t;

static rr_area_t *rr_a;
static atomic_int rr_stop;

static uint64_t rr_now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int rr_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

typedef struct {
    vcu__ring_t *r;
    int c;                          /* RR_READER_* */
} rr_reader_t;

/* The third thread: spins as a reader waiting for replies. */
static void *rr_reader(void *arg)
{
    rr_reader_t *rd = arg;
    uint64_t seen = VCU__LOAD(&rd->r->ctl->tail);

    while (!atomic_load_explicit(&rr_stop, memory_order_relaxed)) {
        if (rd->c == RR_READER_TAIL)
            (void)vcu__ring_past(rd->r, seen);
        else if (rd->c == RR_READER_CLOCK)
            (void)vcu__ring_now_ns();
        else
            (void)vcu__ring_ready(rd->r);
        vcu__cpu_relax();
    }
    return NULL;
}

/* Stamp layout: 128-byte slots, the sequence number in the first word,
 * written last (release), the body after it. */
static void rr_stamp_put(unsigned char *d, uint64_t seq, const void *body, size_t len)
{
    unsigned char *slot = d + ((seq * 128) & (RR_RING - 1));

    memcpy(slot + 8, body, len);
    __atomic_store_n((uint64_t *)(void *)slot, seq, __ATOMIC_RELEASE);
}

static void rr_stamp_get(unsigned char *d, uint64_t seq, void *body, size_t len)
{
    unsigned char *slot = d + ((seq * 128) & (RR_RING - 1));

    while (__atomic_load_n((uint64_t *)(void *)slot, __ATOMIC_ACQUIRE) != seq)
        vcu__cpu_relax();
    memcpy(body, slot + 8, len);
}

/* One round of case c: iters round trips; the median, p90, p99 in ns. */
static int rr_round(int c, long iters, uint64_t out[3])
{
    uint64_t *lat = malloc((size_t)iters * sizeof(*lat));
    unsigned char req[RR_REQ], rep[RR_REP], buf[256];
    vcu__ring_t to, from;
    rr_reader_t rd;
    pthread_t th;
    pid_t pid;
    long i;
    int reader;

    if (lat == NULL)
        return -1;
    memset(rr_a, 0, sizeof(*rr_a));
    memset(req, 7, sizeof(req));
    memset(rep, 9, sizeof(rep));
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* The worker's side: takes a request, puts a reply. */
        vcu__ring_t in, out;

        vcu__ring_init(&in, &rr_a->c_req, rr_a->d_req, RR_RING, -1);
        vcu__ring_init(&out, &rr_a->c_rep, rr_a->d_rep, RR_RING, -1);
        for (i = 1; i <= iters + RR_WARM; i++) {
            struct vcu_ipc_hdr h;

            if (c == RR_STAMP) {
                rr_stamp_get(rr_a->d_req, (uint64_t)i, buf, sizeof(req));
                rr_stamp_put(rr_a->d_rep, (uint64_t)i, rep, sizeof(rep));
                continue;
            }
            while (vcu__ring_get(&in, &h, buf, sizeof(buf), sizeof(buf)) != 1)
                vcu__cpu_relax();
            h.type = VCU_IPC_RESP;
            h.len = sizeof(rep);
            if (vcu__ring_put(&out, &h, rep) != 1)
                _exit(1);
        }
        _exit(0);
    }
    vcu__ring_init(&to, &rr_a->c_req, rr_a->d_req, RR_RING, -1);
    vcu__ring_init(&from, &rr_a->c_rep, rr_a->d_rep, RR_RING, -1);
    atomic_store(&rr_stop, 0);
    rd.r = &from;
    rd.c = c;
    reader = c == RR_READER_POS || c == RR_READER_TAIL || c == RR_READER_CLOCK;
    if (reader && pthread_create(&th, NULL, rr_reader, &rd) != 0)
        return -1;
    for (i = 1; i <= iters + RR_WARM; i++) {
        uint64_t t0 = rr_now();

        if (c == RR_STAMP) {
            rr_stamp_put(rr_a->d_req, (uint64_t)i, req, sizeof(req));
            rr_stamp_get(rr_a->d_rep, (uint64_t)i, buf, sizeof(rep));
        } else {
            struct vcu_ipc_hdr h = { .type = VCU_IPC_REQ, .len = sizeof(req), .tag = (uint64_t)i };

            if (vcu__ring_put(&to, &h, req) != 1)
                return -1;
            while (vcu__ring_get(&from, &h, buf, sizeof(buf), sizeof(buf)) != 1)
                vcu__cpu_relax();
        }
        if (i > RR_WARM)
            lat[i - RR_WARM - 1] = rr_now() - t0;
    }
    atomic_store(&rr_stop, 1);
    if (reader)
        pthread_join(th, NULL);
    waitpid(pid, NULL, 0);
    qsort(lat, (size_t)iters, sizeof(*lat), rr_cmp);
    out[0] = lat[iters / 2];
    out[1] = lat[iters * 9 / 10];
    out[2] = lat[iters * 99 / 100];
    free(lat);
    return 0;
}

int main(int argc, char **argv)
{
    static uint64_t res[RR_CASES][RR_MAX_ROUNDS][3];
    long rounds = 5, iters = 100000;
    int c, r, i;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: ring_rtt [--rounds N (1-%d)] [--iters N (>= 100)]\n",
                    RR_MAX_ROUNDS);
            return 2;
        }
    }
    if (rounds < 1 || rounds > RR_MAX_ROUNDS || iters < 100) {
        fprintf(stderr, "ring_rtt: --rounds 1-%d, --iters >= 100\n", RR_MAX_ROUNDS);
        return 2;
    }
    rr_a = mmap(NULL, sizeof(*rr_a), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rr_a == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    printf("metric,size_bytes,value,unit\n");
    printf("# ring_rtt: %ld rounds of %ld round trips per case, unpinned\n", rounds, iters);
    for (r = 0; r < rounds; r++)
        for (c = 0; c < RR_CASES; c++)
            if (rr_round(c, iters, res[c][r]) != 0) {
                fprintf(stderr, "ring_rtt: %s failed\n", rr_name[c]);
                return 1;
            }
    for (c = 0; c < RR_CASES; c++) {
        uint64_t med[RR_MAX_ROUNDS];

        printf("# %s rounds (p50/p90/p99 ns):", rr_name[c]);
        for (r = 0; r < rounds; r++) {
            printf(" %llu/%llu/%llu", (unsigned long long)res[c][r][0],
                   (unsigned long long)res[c][r][1], (unsigned long long)res[c][r][2]);
            med[r] = res[c][r][0];
        }
        printf("\n");
        qsort(med, (size_t)rounds, sizeof(med[0]), rr_cmp);
        printf("%s,0,%llu,ns\n", rr_name[c], (unsigned long long)med[rounds / 2]);
    }
    return 0;
}
