/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Device printf: which images use it and which calls flush it, decided the
 * same way by the guest library (to know when to send CU_TAKE_OUTPUT) and
 * the host backend (to know when to collect the output): see
 * CU_TAKE_OUTPUT in vcu_proto.h.  User space only.
 */
#ifndef VCU_PRINTF_H
#define VCU_PRINTF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vcu_fatbin.h"
#include "vcu_proto.h"

/* memmem() without _GNU_SOURCE. */
static inline int vcu__has_vprintf(const void *p, size_t len)
{
    const unsigned char *b = p, *q;

    while (len >= 7 && (q = memchr(b, 'v', len - 6)) != NULL) {
        if (memcmp(q, "vprintf", 7) == 0)
            return 1;
        len -= (size_t)(q + 1 - b);
        b = q + 1;
    }
    return 0;
}

/*
 * Does a module image (fatbin, cubin or PTX) call printf?  A cubin's
 * symbol table and PTX name "vprintf"; a fatbin is judged by its cubins,
 * or by its PTX where it has no cubin.  A compressed payload cannot be
 * read here: it counts as a yes (the cost is only that the session's
 * synchronizing calls block and are followed by a CU_TAKE_OUTPUT).
 */
static inline int vcu_image_uses_printf(const void *img, size_t len)
{
    const unsigned char *b = img;
    struct vcu_fatbin_hdr h;
    struct vcu_fatbin_entry e;
    size_t off, end;
    int elf = 0, elf_yes = 0, ptx_yes = 0;

    if (len < sizeof(h))
        return vcu__has_vprintf(img, len);
    memcpy(&h, b, sizeof(h));
    if (h.magic != VCU_FATBIN_MAGIC || h.header_size < sizeof(h) || h.header_size > len ||
        h.fat_size > len - h.header_size)
        return vcu__has_vprintf(img, len);
    off = h.header_size;
    end = off + (size_t)h.fat_size;
    while (end - off >= sizeof(e)) {
        int yes;

        memcpy(&e, b + off, sizeof(e));
        if (e.header_size < 16 || e.header_size > end - off || e.size > end - off - e.header_size)
            return 1;               /* not what we know: assume it does */
        yes = (e.flags & VCU_FATBIN_F_COMPRESSED) || e.decompressed_size != 0 ||
              vcu__has_vprintf(b + off + e.header_size, (size_t)e.size);
        if (e.kind == VCU_FATBIN_KIND_ELF) {
            elf = 1;
            elf_yes |= yes;
        } else {
            ptx_yes |= yes;
        }
        off += e.header_size + (size_t)e.size;
    }
    return elf ? elf_yes : ptx_yes;
}

/*
 * Does this request flush device printf output, as the blocking CUDA
 * calls do (context, stream and event synchronize, synchronous copies,
 * context reset)?  payload holds at least the opcode's request struct.
 */
static inline int vcu_op_flushes_printf(uint32_t op, const void *payload)
{
    struct vcu_cu_memcpy_req m;
    struct vcu_cu_memcpy2d_req m2;
    struct vcu_cu_memcpy3d_req m3;

    switch (op) {
    case VCU_OP_CU_CTX_SYNCHRONIZE:
    case VCU_OP_CU_CTX_RESET:
    case VCU_OP_CU_STREAM_SYNCHRONIZE:
    case VCU_OP_CU_EVENT_SYNCHRONIZE:
        return 1;
    case VCU_OP_CU_MEMCPY_HTOD:
    case VCU_OP_CU_MEMCPY_DTOH:
    case VCU_OP_CU_MEMCPY_DTOD:
    case VCU_OP_CU_MEMCPY_PEER:     /* starts with CU_MEMCPY_DTOD's struct */
        memcpy(&m, payload, sizeof(m));
        return !(m.flags & VCU_CU_MEMCPY_F_ASYNC);
    case VCU_OP_CU_MEMCPY_2D:
        memcpy(&m2, payload, sizeof(m2));
        return !(m2.flags & VCU_CU_MEMCPY_F_ASYNC);
    case VCU_OP_CU_MEMCPY_3D:
    case VCU_OP_CU_MEMCPY_3D_PEER:
        memcpy(&m3, payload, sizeof(m3));
        return !(m3.flags & VCU_CU_MEMCPY_F_ASYNC);
    }
    return 0;
}

#endif /* VCU_PRINTF_H */
