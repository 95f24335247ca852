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
 * The requests go straight to the connection, not through vcu__call():
 * they must not take an earlier call's deferred error, nor set errors.
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

/* Moves the session's captured output to stdout. */
static void vcu__printf_take(int dev, uint64_t flags)
{
    struct vcu_cu_u64_req r;
    struct vcu_cu_output_resp o;
    unsigned char *buf;
    uint32_t rlen;
    int more = 1;

    buf = malloc(VCU_MAX_PAYLOAD);
    if (buf == NULL)
        return;
    while (more) {
        memset(&r, 0, sizeof(r));
        r.hdr.device = vcu__rt.dev[dev].vord;
        r.value = flags;
        rlen = 0;
        if (vcu_conn_call(vcu__rt.conn, VCU_OP_CU_TAKE_OUTPUT, 0, &r, sizeof(r), NULL, 0, buf,
                          VCU_MAX_PAYLOAD, &rlen) != 0 || rlen < sizeof(o))
            break;
        memcpy(&o, buf, sizeof(o));
        if (o.len > rlen - sizeof(o))
            break;
        if (o.len > 0)
            fwrite(buf + sizeof(o), 1, o.len, stdout);
        more = o.more != 0 && o.len > 0;
        flags = 0;                  /* synchronized once is enough */
    }
    free(buf);
}

void vcu__printf_after(int dev, uint32_t op, const void *req)
{
    if (__atomic_load_n(&vcu__printf_on, __ATOMIC_RELAXED) && vcu_op_flushes_printf(op, req))
        vcu__printf_take(dev, 0);
}

void vcu__printf_exit(void)
{
    static int done;

    if (!__atomic_load_n(&vcu__printf_on, __ATOMIC_RELAXED) ||
        __atomic_exchange_n(&done, 1, __ATOMIC_RELAXED))
        return;
    /* A module was loaded, so init has run and succeeded. */
    if (vcu__rt.conn != NULL && vcu__rt.ndev > 0)
        vcu__printf_take(0, VCU_CU_TAKE_F_SYNC);
}
