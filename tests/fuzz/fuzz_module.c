/*
 * libFuzzer target for what the host backend reads of a module image
 * itself (include/vcu_printf.h): the backend hands a guest's image (fatbin,
 * cubin or PTX) to the driver as it came, and the only parse of it that is
 * its own is vcu_image_uses_printf(), which decides, for a session that
 * captures device printf, whether the module writes printf output
 * (host-backend/worker/cuda.c, vcu__module_image(); the guest library
 * asks the same).  It walks nvcc's fatbin container (include/
 * vcu_fatbin.h) and searches payloads for "vprintf".
 *
 * An input is an image, in a buffer of exactly its length (the backend
 * gives the function len bytes; AddressSanitizer sees a read past them).
 * The result is checked against a second reading of the container written
 * here from the rules in vcu_printf.h's comment, and vcu__has_vprintf()
 * against memmem().
 */
#define _GNU_SOURCE                 /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vcu_printf.h"

#define FZ_CHECK(c)                                                               \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_module: %s:%d: check failed: %s\n", __FILE__,    \
                    __LINE__, #c);                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

static int fz_has(const unsigned char *p, size_t n)
{
    return memmem(p, n, "vprintf", 7) != NULL;
}

static uint64_t fz_ld(const unsigned char *p, unsigned int n)
{
    uint64_t v = 0;

    while (n-- > 0)
        v = v << 8 | p[n];
    return v;
}

/* The rules, read again: a container whose header holds is judged by its
 * cubins, or by its PTX where it has none; an entry whose header or
 * payload leaves the container counts as a yes, and so does a compressed
 * payload; anything else is searched whole. */
static int fz_reference(const unsigned char *b, size_t len)
{
    uint64_t hsize, fat, off, end;
    int elf = 0, elf_yes = 0, ptx_yes = 0;

    if (len < 16 || fz_ld(b, 4) != VCU_FATBIN_MAGIC)
        return fz_has(b, len);
    hsize = fz_ld(b + 6, 2);
    fat = fz_ld(b + 8, 8);
    if (hsize < 16 || hsize > len || fat > len - hsize)
        return fz_has(b, len);
    for (off = hsize, end = hsize + fat; end - off >= 64;) {
        uint64_t ehsize = fz_ld(b + off + 4, 4), esize = fz_ld(b + off + 8, 8);
        uint64_t flags = fz_ld(b + off + 40, 8), dsize = fz_ld(b + off + 56, 8);
        int yes;

        if (ehsize < 16 || ehsize > end - off || esize > end - off - ehsize)
            return 1;
        yes = (flags & VCU_FATBIN_F_COMPRESSED) != 0 || dsize != 0 ||
              fz_has(b + off + ehsize, (size_t)esize);
        if (fz_ld(b + off, 2) == VCU_FATBIN_KIND_ELF) {
            elf = 1;
            elf_yes |= yes;
        } else {
            ptx_yes |= yes;
        }
        off += ehsize + esize;
    }
    return elf ? elf_yes : ptx_yes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned char *img = malloc(size ? size : 1);
    int got;

    if (img == NULL)
        return 0;
    memcpy(img, data, size);
    FZ_CHECK(vcu__has_vprintf(img, size) == fz_has(img, size));
    got = vcu_image_uses_printf(img, size);
    FZ_CHECK(got == 0 || got == 1);
    FZ_CHECK(got == fz_reference(img, size));
    free(img);
    return 0;
}
