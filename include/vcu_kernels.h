/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * The kernels (entry functions) a module image holds, read in the guest:
 * what NVIDIA's driver enumerates for cuModuleEnumerateFunctions and for
 * the private module iterator cuFFT calls (docs/driver-api.md,
 * 6e163fbe [7]).  A cubin's kernels are its ELF symbols of type FUNC
 * marked as CUDA entries (st_other 0x10, as readelf shows them); PTX's
 * are its .entry directives; a fatbin's are those of the entries the
 * device loads (vcu_fatbin_trim's choice), LZ4- and zstd-compressed
 * payloads included.  User space only; everything read is bounds-checked.
 */
#ifndef VCU_KERNELS_H
#define VCU_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vcu_fatbin.h"

/* A payload compressed with LZ4 (raw blocks: nvcc's "speed" mode, and
 * cuFFT 12's PTX modules), or with zstd (a zstd frame: nvcc 13's default
 * mode). */
#define VCU_FATBIN_F_LZ4 0x2000ull
#define VCU_FATBIN_F_ZSTD 0x8000ull

/* Decompresses a zstd frame of n bytes into exactly cap bytes at dst;
 * returns cap, or anything else on failure.  The caller of
 * vcu_image_kernels supplies it (the guest library loads libzstd). */
typedef size_t (*vcu_unzstd_fn)(void *dst, size_t cap, const void *src, size_t n);
/* Larger payloads than this are not decompressed here. */
#define VCU_KERNELS_MAX_PAYLOAD (256u << 20)

/* Called for each kernel: its name, len bytes, not NUL-terminated.
 * Returns 0 to go on, or a negative number other than
 * VCU_KERNELS_UNREADABLE to stop (returned as it is). */
typedef int (*vcu_kernel_fn)(void *arg, const char *name, size_t len);

/* vcu_image_kernels' result where the image is not read here. */
#define VCU_KERNELS_UNREADABLE (-1)

/* LZ4 block format (lz4's doc/lz4_Block_format.md): out_len bytes
 * exactly, from in_len bytes.  0 on success, -1 on anything malformed. */
static inline int vcu_lz4_block(const unsigned char *in, size_t in_len, unsigned char *out,
                                size_t out_len)
{
    size_t i = 0, o = 0;

    while (i < in_len) {
        unsigned int token = in[i++];
        size_t lit = token >> 4, match, off;

        if (lit == 15) {
            unsigned char b;

            do {
                if (i >= in_len)
                    return -1;
                b = in[i++];
                lit += b;
            } while (b == 255);
        }
        if (lit > in_len - i || lit > out_len - o)
            return -1;
        memcpy(out + o, in + i, lit);
        i += lit;
        o += lit;
        if (i == in_len)
            break;              /* the last sequence has literals only */
        if (in_len - i < 2)
            return -1;
        off = in[i] | (size_t)in[i + 1] << 8;
        i += 2;
        match = token & 15;
        if (match == 15) {
            unsigned char b;

            do {
                if (i >= in_len)
                    return -1;
                b = in[i++];
                match += b;
            } while (b == 255);
        }
        match += 4;
        if (off == 0 || off > o || match > out_len - o)
            return -1;
        /* Overlapping copies repeat the last off bytes: byte by byte. */
        for (size_t k = 0; k < match; k++, o++)
            out[o] = out[o - off];
    }
    return o == out_len ? 0 : -1;
}

/* A cubin's kernels. */
static inline long vcu_elf_kernels(const unsigned char *b, size_t len, vcu_kernel_fn fn,
                                   void *arg)
{
    uint64_t shoff;
    uint16_t shentsize, shnum;
    long n = 0;

    /* ELF64, little-endian (e_ident[EI_CLASS] 2, [EI_DATA] 1). */
    if (len < 64 || memcmp(b, "\177ELF", 4) != 0 || b[4] != 2 || b[5] != 1)
        return VCU_KERNELS_UNREADABLE;
    memcpy(&shoff, b + 0x28, 8);
    memcpy(&shentsize, b + 0x3a, 2);
    memcpy(&shnum, b + 0x3c, 2);
    if (shentsize < 64 || shoff > len || shnum > (len - shoff) / shentsize)
        return VCU_KERNELS_UNREADABLE;
    for (unsigned int s = 0; s < shnum; s++) {
        const unsigned char *sh = b + shoff + (size_t)s * shentsize, *str;
        uint32_t type, link;
        uint64_t off, size, entsize, stroff, strsize;

        memcpy(&type, sh + 4, 4);
        if (type != 2)          /* SHT_SYMTAB */
            continue;
        memcpy(&off, sh + 0x18, 8);
        memcpy(&size, sh + 0x20, 8);
        memcpy(&link, sh + 0x28, 4);
        memcpy(&entsize, sh + 0x38, 8);
        if (entsize < 24 || off > len || size > len - off || link >= shnum)
            return VCU_KERNELS_UNREADABLE;
        memcpy(&stroff, b + shoff + (size_t)link * shentsize + 0x18, 8);
        memcpy(&strsize, b + shoff + (size_t)link * shentsize + 0x20, 8);
        if (stroff > len || strsize > len - stroff)
            return VCU_KERNELS_UNREADABLE;
        str = b + stroff;
        for (uint64_t k = 0; k + entsize <= size; k += entsize) {
            const unsigned char *sym = b + off + k;
            uint32_t name;
            const char *nm;
            size_t nlen;
            int r;

            /* st_info: type FUNC (2); st_other: CUDA entry (0x10). */
            if ((sym[4] & 0xf) != 2 || !(sym[5] & 0x10))
                continue;
            memcpy(&name, sym, 4);
            if (name >= strsize)
                return VCU_KERNELS_UNREADABLE;
            nm = (const char *)str + name;
            nlen = strnlen(nm, strsize - name);
            if (nlen == 0 || nlen == strsize - name)
                return VCU_KERNELS_UNREADABLE;
            r = fn(arg, nm, nlen);
            if (r != 0)
                return r;
            n++;
        }
    }
    return n;
}

static inline int vcu_ptx_ident(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '$' || c == '%';
}

/* PTX's kernels: each ".entry NAME" outside comments (up to a NUL or len). */
static inline long vcu_ptx_kernels(const unsigned char *p, size_t len, vcu_kernel_fn fn,
                                   void *arg)
{
    size_t i = 0;
    long n = 0;

    while (i < len && p[i] != '\0') {
        if (p[i] == '/' && i + 1 < len && p[i + 1] == '/') {
            while (i < len && p[i] != '\n' && p[i] != '\0')
                i++;
        } else if (p[i] == '/' && i + 1 < len && p[i + 1] == '*') {
            i += 2;
            while (i < len && p[i] != '\0' && !(p[i] == '*' && i + 1 < len && p[i + 1] == '/'))
                i++;
            i += 2;
        } else if (p[i] == '"') {
            i++;
            while (i < len && p[i] != '"' && p[i] != '\n' && p[i] != '\0')
                i++;
            i++;
        } else if (p[i] == '.' && len - i > 6 && memcmp(p + i, ".entry", 6) == 0 &&
                   (p[i + 6] == ' ' || p[i + 6] == '\t' || p[i + 6] == '\n' ||
                    p[i + 6] == '\r') &&
                   (i == 0 || !vcu_ptx_ident(p[i - 1]))) {
            size_t s;
            int r;

            i += 6;
            while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
                i++;
            s = i;
            while (i < len && vcu_ptx_ident(p[i]))
                i++;
            if (i == s)
                return VCU_KERNELS_UNREADABLE;
            r = fn(arg, (const char *)p + s, i - s);
            if (r != 0)
                return r;
            n++;
        } else {
            i++;
        }
    }
    return n;
}

/* One fatbin entry's payload (decompressed where it is compressed). */
static inline long vcu_fatbin_entry_kernels(const unsigned char *pay,
                                            const struct vcu_fatbin_entry *e,
                                            vcu_kernel_fn fn, void *arg, vcu_unzstd_fn unzstd)
{
    uint64_t how = e->flags & VCU_FATBIN_F_COMPRESSED;
    unsigned char *plain = NULL;
    size_t plen = (size_t)e->size;
    long n;

    if (how != 0) {
        if ((how != VCU_FATBIN_F_LZ4 && (how != VCU_FATBIN_F_ZSTD || unzstd == NULL)) ||
            e->decompressed_size == 0 || e->decompressed_size > VCU_KERNELS_MAX_PAYLOAD ||
            e->compressed_size > e->size)
            return VCU_KERNELS_UNREADABLE;
        plen = (size_t)e->decompressed_size;
        plain = malloc(plen);
        if (plain == NULL ||
            (how == VCU_FATBIN_F_LZ4 ? vcu_lz4_block(pay, e->compressed_size, plain, plen) != 0
                                     : unzstd(plain, plen, pay, e->compressed_size) != plen)) {
            free(plain);
            return VCU_KERNELS_UNREADABLE;
        }
        pay = plain;
    }
    n = e->kind == VCU_FATBIN_KIND_ELF ? vcu_elf_kernels(pay, plen, fn, arg)
                                       : vcu_ptx_kernels(pay, plen, fn, arg);
    free(plain);
    return n;
}

/*
 * Calls fn for each kernel of the image (len bytes: a fatbin, a cubin or
 * PTX) as a device of compute capability arch (major * 10 + minor) loads
 * it.  In a fatbin, the entries vcu_fatbin_trim would keep (several of
 * them may name the same kernel: the caller drops repeats); zstd payloads
 * through unzstd (NULL: not read).  Returns the
 * number of calls, fn's negative result where it stopped, or
 * VCU_KERNELS_UNREADABLE (a container, entry or compression not read
 * here, or nothing for arch).
 */
static inline long vcu_image_kernels(const void *img, size_t len, unsigned int arch,
                                     vcu_kernel_fn fn, void *arg, vcu_unzstd_fn unzstd)
{
    const unsigned char *b = img;
    struct vcu_fatbin_hdr h;
    struct vcu_fatbin_entry e;
    size_t off, end;
    unsigned int elf = 0, ptx = 0;
    long n = 0;

    if (len >= 4 && memcmp(b, "\177ELF", 4) == 0)
        return vcu_elf_kernels(b, len, fn, arg);
    if (len < sizeof(h))
        return vcu_ptx_kernels(b, len, fn, arg);
    memcpy(&h, b, sizeof(h));
    if (h.magic != VCU_FATBIN_MAGIC)
        return vcu_ptx_kernels(b, len, fn, arg);
    if (h.header_size < sizeof(h) || h.header_size > len || h.fat_size > len - h.header_size)
        return VCU_KERNELS_UNREADABLE;
    end = h.header_size + (size_t)h.fat_size;
    for (off = h.header_size; end - off >= sizeof(e); off += e.header_size + (size_t)e.size) {
        memcpy(&e, b + off, sizeof(e));
        if (e.header_size < sizeof(e) || e.header_size > end - off ||
            e.size > end - off - e.header_size)
            return VCU_KERNELS_UNREADABLE;
        if (e.kind == VCU_FATBIN_KIND_ELF && e.arch <= arch && e.arch / 10 == arch / 10 &&
            e.arch > elf)
            elf = e.arch;
        else if (e.kind == VCU_FATBIN_KIND_PTX && e.arch <= arch && e.arch > ptx)
            ptx = e.arch;
    }
    if (elf == 0 && ptx == 0)
        return VCU_KERNELS_UNREADABLE;
    for (off = h.header_size; end - off >= sizeof(e); off += e.header_size + (size_t)e.size) {
        long r;

        memcpy(&e, b + off, sizeof(e));
        if (!(elf ? (e.kind == VCU_FATBIN_KIND_ELF && e.arch == elf)
                  : (e.kind == VCU_FATBIN_KIND_PTX && e.arch == ptx)))
            continue;
        r = vcu_fatbin_entry_kernels(b + off + e.header_size, &e, fn, arg, unzstd);
        if (r < 0)
            return r;
        n += r;
    }
    return n;
}

#endif /* VCU_KERNELS_H */
