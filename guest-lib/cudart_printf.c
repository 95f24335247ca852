/*
 * Device printf.  The host's driver writes what kernels print to the host
 * process's stdout; the host keeps it per session instead (CU_TAKE_OUTPUT
 * in vcu_proto.h).  Once a module whose image uses printf is loaded, every
 * call that flushes device printf natively (vcu_op_flushes_printf: the
 * synchronize calls, synchronous copies, context reset) is followed by
 * CU_TAKE_OUTPUT, and what it returns goes to the program's stdout with
 * fwrite(): through the program's own stdio buffer, so that it lands in
 * order with what the program printed before the call.  At exit (fatbin
 * unregistration) the session is synchronized and emptied once more, as
 * the native runtime's context teardown flushes.
 *
 * The requests go straight to the connection (vcu__output_take(), shared
 * with libcuda.so.1), not through vcu__call(): they must not take an
 * earlier call's deferred error, nor set errors.
 */
#include <stdlib.h>
#include <string.h>

#include "cudart_int.h"
#include "vcu_printf.h"

/* Set once an image using printf was loaded; never cleared (a reset
 * loses modules, not the output they may have left). */
static int vcu__printf_on;

void vcu__printf_module(const void *image, uint64_t len)
{
    if (!__atomic_load_n(&vcu__printf_on, __ATOMIC_RELAXED) &&
        vcu_image_uses_printf(image, (size_t)len))
        __atomic_store_n(&vcu__printf_on, 1, __ATOMIC_RELAXED);
}

void vcu__printf_after(int dev, uint32_t op, const void *req)
{
    if (__atomic_load_n(&vcu__printf_on, __ATOMIC_RELAXED) && vcu_op_flushes_printf(op, req))
        vcu__output_take(vcu__rt.conn, vcu__rt.dev[dev].vord, 0);
}

void vcu__printf_exit(void)
{
    static int done;

    if (!__atomic_load_n(&vcu__printf_on, __ATOMIC_RELAXED) ||
        __atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
        return;
    /* A module was loaded, so init has run and succeeded. */
    if (vcu__rt.conn != NULL && vcu__rt.ndev > 0)
        vcu__output_take(vcu__rt.conn, vcu__rt.dev[0].vord, VCU_CU_TAKE_F_SYNC);
}
