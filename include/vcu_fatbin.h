/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * nvcc's fatbin container, as the guest library reads it: to tell which
 * images use device printf (vcu_printf.h) and to send a device only the
 * code it can load (vcu_fatbin_trim).  User space only.
 */
#ifndef VCU_FATBIN_H
#define VCU_FATBIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* nvcc's fatbin container and entry headers (as cuobjdump reads them). */
#define VCU_FATBIN_MAGIC 0xBA55ED50u
#define VCU_FATBIN_KIND_PTX 1u
#define VCU_FATBIN_KIND_ELF 2u
/* Entry flags of a compressed payload: 0x2000 (LZ4), 0x8000 (CUDA 12.8+). */
#define VCU_FATBIN_F_COMPRESSED 0xa000ull

struct vcu_fatbin_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size;              /* entries that follow the header */
};

struct vcu_fatbin_entry {
    uint16_t kind;                  /* VCU_FATBIN_KIND_* */
    uint16_t unknown0;
    uint32_t header_size;           /* payload follows at this offset */
    uint64_t size;                  /* payload bytes */
    uint32_t compressed_size;
    uint32_t unknown1;
    uint16_t minor, major;
    uint32_t arch;
    uint32_t name_offset, name_len;
    uint64_t flags;
    uint64_t zero;
    uint64_t decompressed_size;     /* non-zero when compressed */
};

/*
 * The entries of a fatbin container that a device of compute capability
 * arch (major * 10 + minor) loads, in a new container: its cubins for
 * exactly that architecture; else its cubins for the nearest lower one of
 * the same major (a cubin runs on later minors of its major); else, where
 * it has no such cubin, its PTX of the highest version not above arch (the
 * driver compiles it).  That is the code NVIDIA's driver picks; the rest
 * never needs to cross to the host (libraries carry code for every GPU
 * generation: 14% of cuBLAS 13's fatbins is for sm_90).
 *
 * Returns VCU_FATBIN_TRIMMED with the new container in *out (*out_len
 * bytes, the caller frees it); VCU_FATBIN_NONE where the container holds
 * nothing the device loads (cubins and PTX for other GPUs only: the
 * driver's CUDA_ERROR_NO_BINARY_FOR_GPU); VCU_FATBIN_AS_IS where the image
 * goes as it is: not a container read here (a header or an entry out of
 * bounds, an entry kind other than cubin or PTX), or nothing to drop.
 */
enum { VCU_FATBIN_AS_IS = 0, VCU_FATBIN_TRIMMED = 1, VCU_FATBIN_NONE = -1 };

static inline int vcu_fatbin_trim(const void *img, size_t len, unsigned int arch, void **out,
                                  size_t *out_len)
{
    const unsigned char *b = img;
    struct vcu_fatbin_hdr h;
    struct vcu_fatbin_entry e;
    size_t off, end, nlen, all = 0, keep = 0;
    unsigned int elf = 0, ptx = 0;
    unsigned char *n;

    *out = NULL;
    *out_len = 0;
    if (len < sizeof(h))
        return VCU_FATBIN_AS_IS;
    memcpy(&h, b, sizeof(h));
    if (h.magic != VCU_FATBIN_MAGIC || h.header_size < sizeof(h) || h.header_size > len ||
        h.fat_size > len - h.header_size)
        return VCU_FATBIN_AS_IS;
    end = h.header_size + (size_t)h.fat_size;
    /* First the architecture to keep: the best cubin, else the best PTX. */
    for (off = h.header_size; end - off >= sizeof(e); off += e.header_size + (size_t)e.size) {
        memcpy(&e, b + off, sizeof(e));
        if (e.header_size < sizeof(e) || e.header_size > end - off ||
            e.size > end - off - e.header_size)
            return VCU_FATBIN_AS_IS;
        if (e.kind == VCU_FATBIN_KIND_ELF) {
            if (e.arch <= arch && e.arch / 10 == arch / 10 && e.arch > elf)
                elf = e.arch;
        } else if (e.kind == VCU_FATBIN_KIND_PTX) {
            if (e.arch <= arch && e.arch > ptx)
                ptx = e.arch;
        } else {
            return VCU_FATBIN_AS_IS;
        }
        all++;
    }
    if (off != end || all == 0)
        return VCU_FATBIN_AS_IS;
    if (elf == 0 && ptx == 0)
        return VCU_FATBIN_NONE;
    nlen = h.header_size;
    for (off = h.header_size; off < end; off += e.header_size + (size_t)e.size) {
        memcpy(&e, b + off, sizeof(e));
        if (elf ? (e.kind == VCU_FATBIN_KIND_ELF && e.arch == elf)
                : (e.kind == VCU_FATBIN_KIND_PTX && e.arch == ptx)) {
            nlen += e.header_size + (size_t)e.size;
            keep++;
        }
    }
    if (keep == all || (n = malloc(nlen)) == NULL)
        return VCU_FATBIN_AS_IS;
    h.fat_size = nlen - h.header_size;
    memcpy(n, b, h.header_size);
    memcpy(n, &h, sizeof(h));
    nlen = h.header_size;
    for (off = h.header_size; off < end; off += e.header_size + (size_t)e.size) {
        memcpy(&e, b + off, sizeof(e));
        if (elf ? (e.kind == VCU_FATBIN_KIND_ELF && e.arch == elf)
                : (e.kind == VCU_FATBIN_KIND_PTX && e.arch == ptx)) {
            memcpy(n + nlen, b + off, e.header_size + (size_t)e.size);
            nlen += e.header_size + (size_t)e.size;
        }
    }
    *out = n;
    *out_len = nlen;
    return VCU_FATBIN_TRIMMED;
}

#endif /* VCU_FATBIN_H */
