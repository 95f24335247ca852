/*
 * The backend targets' session (fz_session.c): one backend per process on
 * the CPU stand-in for libcuda (tests/fakecuda), devices "0,1", one session
 * with CUDA|ECHO|ASYNC|BATCH and a few handles made by well-formed setup
 * calls, rebuilt when an input ended it.  fuzz_backend.c and fuzz_batch.c
 * build requests into fz_reqs[] and run them with fz_run().
 */
#ifndef FZ_SESSION_H
#define FZ_SESSION_H

#include <stdint.h>
#include <sys/uio.h>

#include "vcu_backend.h"

#define FZ_MAX_REQS 8
#define FZ_DATA (64 * 1024)

typedef struct {
    vcu_request_t r;
    int done;                       /* under the session's lock; fz_run() waits on it */
    uint64_t reqbuf[(32 + VCU_MAX_PAYLOAD + 8 + 4 * 16) / 8];
    uint64_t respbuf[(24 + VCU_MAX_PAYLOAD) / 8];
    vcu_segment_t segs[4];
    struct iovec iov[4][4];
} fz_req_t;

/*
 * The handles fz_setup() made, by index (gen_corpus.py names them): 0
 * legacy stream, 1 per-thread stream, 2 a 4 KiB device buffer, 3 and 4
 * inside it (+1024, +4095), 5 a stream, 6 an event, 7 a graph, 8 the
 * default pool, 9 a module, 10 its function (no parameters), 11-15
 * numbers (16, all ones, 1 << 40, 4096, 0x7fffffff).
 */
extern uint64_t fz_handles[16];
extern uint64_t fz_sess;
extern vcu_backend_t *fz_be;
extern unsigned char fz_data[FZ_DATA];  /* what segments point into */
extern fz_req_t fz_reqs[FZ_MAX_REQS];
extern int fz_debug;                /* $FUZZ_DEBUG: print each request and its status */

/* LLVMFuzzerInitialize()'s part: the backend and the first session. */
void fz_session_init(void);

/* Before each input: the session rebuilt if the last input ended it (or
 * every $FUZZ_RESET_EVERY inputs).  1 if it was rebuilt. */
int fz_session_begin(void);

/* Runs a built request; 0 if it completed in time, else resets the
 * backend (the session is rebuilt before the next input) and returns -1. */
int fz_run(fz_req_t *t);

/* Whether the session is gone or unusable (a request timed out and the
 * backend was reset, a context poisoned): it is rebuilt before the next
 * input, and nothing more of this one can be judged. */
int fz_session_lost(void);

/* After request t ran: notes a session it closed or a context it
 * poisoned, so that the next input starts on a fresh one. */
void fz_after(fz_req_t *t);

/* A well-formed request: payload p, at most one segment; its u64 result
 * (a handle), or 0 if it failed. */
uint64_t fz_call(uint32_t op, uint64_t session, const void *p, uint32_t plen, uint32_t segflags,
                 void *seg, size_t seglen);

uint32_t fz_status(fz_req_t *t);
void *fz_resp(fz_req_t *t);

#endif /* FZ_SESSION_H */
