/*
 * Unit test (ASan/UBSan) of libnvidia-ml's process list: the guest
 * driver's sessions file joined with CU_SLICE_INFO's sessions[], for
 * hosts that list the VM's sessions and hosts that cannot (only the
 * asking session, or ids of their own), a process with two sessions,
 * this library's own session left out, and a file with junk in it.
 * guest-lib/nvml.c is compiled in, its transport replaced by a test double.
 * Last line: "N passed, N failed".
 */
#include "../../guest-lib/nvml.c"

#include <stdarg.h>

/* The transport nvml.c links against: never reached here. */
int vcu_conn_open(const char *path, uint64_t features, vcu_conn_t **out)
{
    (void)path;
    (void)features;
    *out = NULL;
    return VCU_ENODEV;
}
void vcu_conn_close(vcu_conn_t *c)
{
    (void)c;
}
uint64_t vcu_conn_features(const vcu_conn_t *c)
{
    (void)c;
    return 0;
}
int vcu_conn_call(vcu_conn_t *c, uint32_t opcode, uint32_t flags, const void *req,
                  uint32_t req_len, const vcu_buf_t *bufs, unsigned int nbufs, void *resp,
                  uint32_t resp_cap, uint32_t *resp_len)
{
    (void)c, (void)opcode, (void)flags, (void)req, (void)req_len, (void)bufs, (void)nbufs;
    (void)resp, (void)resp_cap, (void)resp_len;
    return VCU_ENODEV;
}

static int passed, failed;

static void check(int cond, const char *fmt, ...)
{
    va_list ap;

    if (cond) {
        passed++;
        return;
    }
    failed++;
    printf("FAIL: ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

static char path[] = "/tmp/vcu-nvml-join-XXXXXX";

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");

    fputs(text, f);
    fclose(f);
}

static struct vcu_cu_slice_info_resp *slice(unsigned int n, const uint64_t *ids,
                                            const uint64_t *mem, const uint64_t *ctx)
{
    static struct vcu_cu_slice_info_resp s;

    memset(&s, 0, sizeof(s));
    s.num_sessions = n;
    for (unsigned int i = 0; i < n; i++) {
        s.sessions[i].session = ids[i];
        s.sessions[i].mem_used = mem[i];
        s.sessions[i].ctx_bytes = ctx[i];
    }
    return &s;
}

#define NA ((unsigned long long)NVML_VALUE_NOT_AVAILABLE)
#define U64 VCU_SLICE_UNKNOWN64

int main(void)
{
    vcu__nvml_proc_t p[8];
    int fd = mkstemp(path), n;

    if (fd < 0)
        return 1;
    close(fd);
    snprintf(vcu__nvml.sessions_path, sizeof(vcu__nvml.sessions_path), "%s", path);
    /* pid 10: two sessions (runtime and driver library); pid 20 one;
     * pid 30 our own process, 5 being this library's session; a file not
     * yet opened (session 0); junk. */
    write_file("10 1 trainer\n10 2 trainer\n20 3 smi-user\n30 5 monitor\n40 0 opening\n"
               "garbage line\n\n50\n");
    vcu__nvml.own = 5;

    /* A host with the VM's account: figures per session (its context's
     * included: ctx is only their part), summed per process, a session
     * it does not list left out. */
    {
        uint64_t ids[] = { 1, 2, 5, 3 }, mem[] = { 100, 50, 0, 7 }, ctx[] = { 10, U64, 3, U64 };

        n = vcu__nvml_procs(slice(4, ids, mem, ctx), p, 8);
        check(n == 2, "VM list: %d processes", n);
        check(n >= 1 && p[0].pid == 10 && p[0].mem == 150, "pid 10: %u %llu", p[0].pid,
              p[0].mem);
        check(n >= 2 && p[1].pid == 20 && p[1].mem == 7, "pid 20: %u %llu", p[1].pid, p[1].mem);
        /* Session 3 gone from the host's list: process 20 not shown. */
        n = vcu__nvml_procs(slice(3, ids, mem, ctx), p, 8);
        check(n == 1 && p[0].pid == 10, "without session 3: %d", n);
        /* One of pid 10's sessions unknown to the host: the other's figure. */
        mem[1] = U64;
        n = vcu__nvml_procs(slice(4, ids, mem, ctx), p, 8);
        check(n == 2 && p[0].mem == 100, "pid 10 with one unknown: %llu", p[0].mem);
        mem[0] = U64;
        n = vcu__nvml_procs(slice(4, ids, mem, ctx), p, 8);
        check(n == 2 && p[0].mem == NA, "pid 10 all unknown: %llu", p[0].mem);
    }

    /* A host that lists only the asking session: everyone, memory N/A. */
    {
        uint64_t ids[] = { 5 }, mem[] = { 0 }, ctx[] = { 0 };

        n = vcu__nvml_procs(slice(1, ids, mem, ctx), p, 8);
        check(n == 2 && p[0].pid == 10 && p[0].mem == NA && p[1].pid == 20 && p[1].mem == NA,
              "asking only: %d", n);
    }
    /* A host whose ids are its own (a worker's): not the guest's. */
    {
        uint64_t ids[] = { 1, 0x100000001ull }, mem[] = { 4096, 4096 }, ctx[] = { 0, 0 };

        n = vcu__nvml_procs(slice(2, ids, mem, ctx), p, 8);
        check(n == 2 && p[0].mem == NA && p[1].mem == NA, "foreign ids: %d, %llu", n, p[0].mem);
    }
    /* Own session unknown: the guest's ids decide. */
    {
        uint64_t ids[] = { 1, 3 }, mem[] = { 1, 2 }, ctx[] = { 0, 0 };

        vcu__nvml.own = 0;
        n = vcu__nvml_procs(slice(2, ids, mem, ctx), p, 8);
        check(n == 2 && p[0].mem == 1 && p[1].mem == 2, "own unknown: %d", n);
        /* Session 5 is then a process of its own. */
        n = vcu__nvml_procs(slice(0, ids, mem, ctx), p, 8);
        check(n == 3 && p[2].pid == 30, "own unknown, no list: %d", n);
        vcu__nvml.own = 5;
    }
    /* Room for one only. */
    {
        uint64_t ids[] = { 5 }, mem[] = { 0 }, ctx[] = { 0 };

        n = vcu__nvml_procs(slice(1, ids, mem, ctx), p, 1);
        check(n == 1 && p[0].pid == 10, "max 1: %d", n);
    }
    /* No file (loopback): nobody. */
    {
        uint64_t ids[] = { 5 }, mem[] = { 0 }, ctx[] = { 0 };

        vcu__nvml.sessions_path[0] = '\0';
        n = vcu__nvml_procs(slice(1, ids, mem, ctx), p, 8);
        check(n == 0, "no file: %d", n);
    }
    /* Own-session detection: the one of this process that appeared. */
    {
        vcu__nvml_sess_t before[4] = { { (unsigned int)getpid(), 7 }, { 99, 8 } };
        char text[128];

        snprintf(vcu__nvml.sessions_path, sizeof(vcu__nvml.sessions_path), "%s", path);
        snprintf(text, sizeof(text), "%d 7 me\n99 8 other\n%d 9 me\n99 11 other\n",
                 (int)getpid(), (int)getpid());
        write_file(text);
        check(vcu__nvml_own_session(before, 2) == 9, "own session");
        snprintf(text, sizeof(text), "%d 7 me\n%d 9 me\n%d 10 me\n", (int)getpid(),
                 (int)getpid(), (int)getpid());
        write_file(text);
        check(vcu__nvml_own_session(before, 2) == 0, "two new ones: unknown");
    }
    unlink(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
