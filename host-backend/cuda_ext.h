/*
 * Executor entry points beyond vcu_backend_int.h, for the core to adopt
 * (proposed for vcu_backend_int.h; see cuda.c).
 */
#ifndef VCU_CUDA_EXT_H
#define VCU_CUDA_EXT_H

#include "vcu_backend_int.h"

/*
 * Ends the session's host callbacks now: every trampoline blocked on a
 * CU_CALLBACK_DONE returns, the parked CU_CALLBACK_WAIT completes with
 * VCU_S_ECANCELED, later WAITs are cancelled and later callbacks return at
 * once.  Any thread, any number of times, while cs is alive (the same
 * guarantee as for the inline opcodes).  Meant for the moment SESSION_CLOSE
 * is queued or a reset starts: otherwise a worker blocked in a stream
 * synchronize behind a guest callback that will never be DONE (the guest
 * process died) never reaches the close.  vcu__cuda_sess_free() calls it
 * itself.
 */
void vcu__cuda_sess_cancel(vcu__cuda_sess_t *cs);

#endif /* VCU_CUDA_EXT_H */
