/*
 * The keep: descriptors a worker hands the host daemon for the other
 * workers of its VM (host-backend/daemon/keep.c; the worker's end is
 * host-backend/worker/keep.c).  docs/design.md, "CUDA IPC".
 *
 * A shareable handle of CUDA's virtual memory API or of a memory pool is
 * a POSIX file descriptor of the driver's: the process that has it can
 * import the memory.  The guest must never hold one (a host descriptor means nothing
 * in a guest), and workers of one VM, each in a jail and a PID namespace
 * of its own, have no way to each other.  So an exporting worker gives
 * the descriptor to the daemon, which keeps it under 128 random bits of
 * its own choosing for that VM alone, and a worker of the same VM asks
 * for it by those bits.  The guest holds the bits.
 *
 * One SOCK_SEQPACKET socket per worker, made by the daemon when it starts
 * the worker; each message is one struct vcu_keep_msg.  The worker asks,
 * the daemon answers each question at once, in order:
 *
 *   PUT  kind, dev, size, and one descriptor (SCM_RIGHTS).  Answer: status,
 *        and on VCU_S_OK the token it is kept under.  Kept until the
 *        worker that put it ends (its process, and so its own hold of the
 *        memory, is gone; importers keep theirs).
 *   GET  kind and token.  Answer: status; on VCU_S_OK kind, dev, size and
 *        one descriptor, the kept one's duplicate.  A token of another
 *        VM's, of another kind, or none: VCU_S_EINVAL.
 *
 * The daemon trusts nothing in a message: a worker runs guest-chosen
 * CUDA work.  A message of the wrong size or op, or a PUT without exactly
 * one descriptor, is answered VCU_S_EINVAL; past its bounds (per worker,
 * per VM) VCU_S_EBUSY.  Both ends are on one host, built from one tree:
 * fields are host-endian.
 */
#ifndef VCU_KEEP_H
#define VCU_KEEP_H

#include <stdint.h>

enum {
    VCU_KEEP_PUT = 1,
    VCU_KEEP_GET = 2,
};

#define VCU_KEEP_TOKEN 16u
#define VCU_KEEP_PER_WORKER 1024u   /* descriptors one worker may have kept */
#define VCU_KEEP_PER_VM 4096u       /* and all of a VM's together */

struct vcu_keep_msg {
    uint32_t op;                    /* VCU_KEEP_* (the answer repeats it) */
    uint32_t status;                /* answer: VCU_S_* */
    uint32_t kind;                  /* what the descriptor is: VCU_CU_IPC_VMM or _POOL */
    uint32_t dev;                   /* the VM's device ordinal it is memory of */
    uint64_t size;                  /* its bytes (VMM; a pool: 0) */
    uint8_t token[VCU_KEEP_TOKEN];
};

_Static_assert(sizeof(struct vcu_keep_msg) == 40, "vcu_keep_msg");

#endif /* VCU_KEEP_H */
