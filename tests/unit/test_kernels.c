/*
 * vcu_image_kernels (include/vcu_kernels.h): the kernels a module image
 * holds, as the guest lists them for cuFFT's module iterator: a cubin's
 * entry symbols, PTX's .entry directives (comments skipped), a fatbin's
 * entries for the device, compressed ones included; and that
 * whatever the bytes, it reads nothing past them (ASan) and says so when
 * it cannot read an image.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vcu_kernels.h"
#include "vcu_test.h"

/* The names seen, '|'-separated. */
typedef struct {
    char buf[512];
    int stop_at;                    /* > 0: stop (with -7) at this call */
    int calls;
} kn_seen_t;

static int kn_add(void *arg, const char *name, size_t len)
{
    kn_seen_t *s = arg;
    size_t o = strlen(s->buf);

    if (++s->calls == s->stop_at)
        return -7;
    if (o + len + 2 < sizeof(s->buf)) {
        memcpy(s->buf + o, name, len);
        s->buf[o + len] = '|';
        s->buf[o + len + 1] = '\0';
    }
    return 0;
}

/* A minimal ELF64 cubin: sections null, .symtab, .strtab; symbols: null,
 * a FUNC entry "ka", a FUNC non-entry "helper", an OBJECT "glob" with
 * the entry bit, a FUNC entry "kb". */
static size_t kn_elf(unsigned char *b)
{
    static const char str[] = "\0ka\0helper\0glob\0kb";
    const size_t symoff = 64, nsym = 5, stroff = symoff + nsym * 24;
    const size_t shoff = (stroff + sizeof(str) + 7) & ~(size_t)7;
    static const struct { uint32_t name; uint8_t info, other; } syms[] = {
        { 0, 0, 0 }, { 1, 0x12, 0x10 }, { 4, 0x02, 0 }, { 11, 0x11, 0x10 }, { 16, 0x12, 0x10 },
    };
    uint64_t v64;
    uint32_t v32;
    uint16_t v16;

    memset(b, 0, shoff + 3 * 64);
    memcpy(b, "\177ELF\2\1\1", 7);
    v64 = shoff;
    memcpy(b + 0x28, &v64, 8);
    v16 = 64;
    memcpy(b + 0x3a, &v16, 2);
    v16 = 3;
    memcpy(b + 0x3c, &v16, 2);
    for (size_t i = 0; i < nsym; i++) {
        memcpy(b + symoff + i * 24, &syms[i].name, 4);
        b[symoff + i * 24 + 4] = syms[i].info;
        b[symoff + i * 24 + 5] = syms[i].other;
    }
    memcpy(b + stroff, str, sizeof(str));
    /* [1] .symtab */
    v32 = 2;
    memcpy(b + shoff + 64 + 4, &v32, 4);
    v64 = symoff;
    memcpy(b + shoff + 64 + 0x18, &v64, 8);
    v64 = nsym * 24;
    memcpy(b + shoff + 64 + 0x20, &v64, 8);
    v32 = 2;
    memcpy(b + shoff + 64 + 0x28, &v32, 4);
    v64 = 24;
    memcpy(b + shoff + 64 + 0x38, &v64, 8);
    /* [2] .strtab */
    v32 = 3;
    memcpy(b + shoff + 128 + 4, &v32, 4);
    v64 = stroff;
    memcpy(b + shoff + 128 + 0x18, &v64, 8);
    v64 = sizeof(str);
    memcpy(b + shoff + 128 + 0x20, &v64, 8);
    return shoff + 3 * 64;
}

static const char kn_ptx[] =
    "//\n// .entry not_me(\n/* .entry nor_me( */\n.version 7.0\n.target sm_75\n"
    ".file 1 \".entry nor_this\"\n"
    ".func (.param .b32 r) helper(\n.param .b32 x\n)\n{\nret;\n}\n"
    ".visible .entry _Z4kernPf(\n.param .u64 p\n)\n{\nret;\n}\n"
    ".weak .entry\tk2 (\n)\n{\nret;\n}\n.entry k3(){ret;}\n";

/* LZ4 of the PTX above: every byte a literal (one sequence), which is a
 * valid block (kernels_lists has one with a match, by hand). */
static size_t kn_lz4_literals(unsigned char *out, const void *in, size_t n)
{
    size_t o = 0, l = n - 15;

    out[o++] = 0xf0;
    while (l >= 255) {
        out[o++] = 255;
        l -= 255;
    }
    out[o++] = (unsigned char)l;
    memcpy(out + o, in, n);
    return o + n;
}

/* A fatbin of one entry (kind, arch, payload; compressed: LZ4 with its
 * decompressed size). */
static size_t kn_fatbin(unsigned char *b, uint16_t kind, unsigned int arch, const void *pay,
                        size_t n, size_t plain, int lz4)
{
    struct vcu_fatbin_hdr h = { VCU_FATBIN_MAGIC, 1, sizeof(h), 0 };
    struct vcu_fatbin_entry e;
    size_t padded = (n + 7) & ~(size_t)7;

    memset(&e, 0, sizeof(e));
    e.kind = kind;
    e.header_size = sizeof(e);
    e.size = padded;
    e.arch = arch;
    if (lz4) {
        e.flags = VCU_FATBIN_F_LZ4;
        e.compressed_size = (uint32_t)n;
        e.decompressed_size = plain;
    }
    h.fat_size = sizeof(e) + padded;
    memcpy(b, &h, sizeof(h));
    memcpy(b + sizeof(h), &e, sizeof(e));
    memset(b + sizeof(h) + sizeof(e), 0, padded);
    memcpy(b + sizeof(h) + sizeof(e), pay, n);
    return sizeof(h) + sizeof(e) + padded;
}

/* A stand-in for zstd: the "compressed" payload is the plain one (the
 * plumbing: sizes, flags, the result checked). */
static size_t kn_unzstd(void *dst, size_t cap, const void *src, size_t n)
{
    if (n != cap)
        return 0;
    memcpy(dst, src, n);
    return n;
}

TEST(kernels_lists)
{
    static const unsigned char match[] = { 0x13, '\n', 1, 0, 0x20, 'a', 'b' };
    unsigned char *elf = calloc(1, 4096), *fb = calloc(1, 16384), *z = calloc(1, 4096);
    unsigned char out[16];
    kn_seen_t s;
    size_t n, zn;

    ASSERT_TRUE(elf != NULL && fb != NULL && z != NULL);
    /* LZ4: a match repeating the last byte, then literals. */
    ASSERT_EQ(0, vcu_lz4_block(match, sizeof(match), out, 10));
    ASSERT_MEM_EQ("\n\n\n\n\n\n\n\nab", out, 10);
    ASSERT_EQ(-1, vcu_lz4_block(match, sizeof(match), out, 9));    /* does not fit */
    ASSERT_EQ(-1, vcu_lz4_block(match, sizeof(match), out, 11));   /* short */

    n = kn_elf(elf);
    memset(&s, 0, sizeof(s));
    ASSERT_EQ(2, vcu_image_kernels(elf, n, 90, kn_add, &s, NULL));
    ASSERT_STR_EQ("ka|kb|", s.buf);
    memset(&s, 0, sizeof(s));
    ASSERT_EQ(3, vcu_image_kernels(kn_ptx, sizeof(kn_ptx), 90, kn_add, &s, NULL));
    ASSERT_STR_EQ("_Z4kernPf|k2|k3|", s.buf);
    /* Stopped by the callback: its result. */
    memset(&s, 0, sizeof(s));
    s.stop_at = 2;
    ASSERT_EQ(-7, vcu_image_kernels(kn_ptx, sizeof(kn_ptx), 90, kn_add, &s, NULL));

    /* Fatbins: a cubin for the device; LZ4 PTX, as cuFFT's; nothing for
     * it; another compression. */
    n = kn_fatbin(fb, VCU_FATBIN_KIND_ELF, 90, elf, kn_elf(elf), 0, 0);
    memset(&s, 0, sizeof(s));
    ASSERT_EQ(2, vcu_image_kernels(fb, n, 90, kn_add, &s, NULL));
    ASSERT_STR_EQ("ka|kb|", s.buf);
    ASSERT_EQ(VCU_KERNELS_UNREADABLE, vcu_image_kernels(fb, n, 80, kn_add, &s, NULL));
    zn = kn_lz4_literals(z, kn_ptx, sizeof(kn_ptx));
    n = kn_fatbin(fb, VCU_FATBIN_KIND_PTX, 75, z, zn, sizeof(kn_ptx), 1);
    memset(&s, 0, sizeof(s));
    ASSERT_EQ(3, vcu_image_kernels(fb, n, 90, kn_add, &s, NULL));
    ASSERT_STR_EQ("_Z4kernPf|k2|k3|", s.buf);
    /* zstd: through the caller's decompressor, none without one; a
     * compression not known here (both bits). */
    n = kn_fatbin(fb, VCU_FATBIN_KIND_PTX, 75, kn_ptx, sizeof(kn_ptx), sizeof(kn_ptx), 1);
    ((struct vcu_fatbin_entry *)(fb + sizeof(struct vcu_fatbin_hdr)))->flags = VCU_FATBIN_F_ZSTD;
    memset(&s, 0, sizeof(s));
    ASSERT_EQ(3, vcu_image_kernels(fb, n, 90, kn_add, &s, kn_unzstd));
    ASSERT_STR_EQ("_Z4kernPf|k2|k3|", s.buf);
    ASSERT_EQ(VCU_KERNELS_UNREADABLE, vcu_image_kernels(fb, n, 90, kn_add, &s, NULL));
    ((struct vcu_fatbin_entry *)(fb + sizeof(struct vcu_fatbin_hdr)))->flags = 0xa000;
    ASSERT_EQ(VCU_KERNELS_UNREADABLE, vcu_image_kernels(fb, n, 90, kn_add, &s, kn_unzstd));
    free(elf);
    free(fb);
    free(z);
    return 0;
}

TEST(kernels_hostile)
{
    unsigned char *elf = calloc(1, 4096), *fb = calloc(1, 16384), *z = calloc(1, 4096);
    unsigned char *m = malloc(16384);
    const unsigned char *imgs[3];
    size_t lens[3], zn;
    kn_seen_t s;

    ASSERT_TRUE(elf != NULL && fb != NULL && z != NULL && m != NULL);
    lens[0] = kn_elf(elf);
    imgs[0] = elf;
    imgs[1] = (const unsigned char *)kn_ptx;
    lens[1] = sizeof(kn_ptx);
    zn = kn_lz4_literals(z, kn_ptx, sizeof(kn_ptx));
    lens[2] = kn_fatbin(fb, VCU_FATBIN_KIND_PTX, 75, z, zn, sizeof(kn_ptx), 1);
    imgs[2] = fb;
    srand(11);
    for (int i = 0; i < 30000; i++) {
        int w = i % 3;
        size_t len = (size_t)rand() % (lens[w] + 1);
        long r;

        memcpy(m, imgs[w], lens[w]);
        for (int k = rand() % 4; k >= 0; k--)
            m[(size_t)rand() % lens[w]] = (unsigned char)rand();
        memset(&s, 0, sizeof(s));
        r = vcu_image_kernels(m, len, (unsigned int)(rand() % 130), kn_add, &s, kn_unzstd);
        ASSERT_TRUE(r == VCU_KERNELS_UNREADABLE || (r >= 0 && r == s.calls));
    }
    /* LZ4 garbage of every short length. */
    for (int i = 0; i < 30000; i++) {
        unsigned char in[24], out[64];
        size_t n = (size_t)rand() % sizeof(in);

        for (size_t k = 0; k < n; k++)
            in[k] = (unsigned char)rand();
        (void)vcu_lz4_block(in, n, out, (size_t)rand() % sizeof(out));
    }
    free(elf);
    free(fb);
    free(z);
    free(m);
    return 0;
}
