/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * SHA-256 (FIPS 180-4), small and self-contained: the key of the host's
 * module cache (docs/design.md, "Module cache").  The guest library hashes
 * the image it would send; the host hashes what it received before it
 * stores it and what it read back before it loads it.  User space only.
 *
 * Portable C, about 280 MB/s on the build machine; on x86-64 CPUs with
 * the SHA extensions (Intel since Ice Lake and Goldmont, AMD since Zen)
 * their instructions, several times that: a guest hashes each module it
 * loads, and 40 MB of cuBLASLt modules took 140 ms in C.
 *
 *   vcu_sha256(data, len, digest);               one buffer
 *   vcu_sha256_init / _update / _final            in pieces
 */
#ifndef VCU_SHA256_H
#define VCU_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define VCU_SHA256_NI 1
#endif

#define VCU_SHA256_LEN 32

typedef struct vcu_sha256_s {
    uint32_t h[8];
    uint64_t bytes;                 /* hashed so far */
    unsigned char buf[64];          /* a partial block */
    size_t nbuf;
} vcu_sha256_t;

static inline uint32_t vcu__sha_ror(uint32_t x, unsigned int n)
{
    return (x >> n) | (x << (32 - n));
}

static inline uint32_t vcu__sha_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const uint32_t vcu__sha256_k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
};

#ifdef VCU_SHA256_NI
/*
 * The SHA extensions: two rounds per SHA256RNDS2, the message schedule
 * by SHA256MSG1/MSG2 (Intel's "New Instructions Supporting the Secure
 * Hash Algorithm on Intel Architecture Processors", 2013).  The state
 * lives as ABEF and CDGH.  Group g of four rounds uses the message words
 * in m[g % 4]; from g = 3 on it completes the words of group g + 1, and
 * groups 1 to 12 start those of group g + 3.
 */
__attribute__((target("sha,sse4.1,ssse3"))) static inline void
vcu__sha256_blocks_ni(uint32_t h[8], const unsigned char *p, size_t n)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
    __m128i s0, s1, t, m[4];

    t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xb1);   /* CDAB */
    s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1b);  /* EFGH */
    s0 = _mm_alignr_epi8(t, s1, 8);                                        /* ABEF */
    s1 = _mm_blend_epi16(s1, t, 0xf0);                                     /* CDGH */
    for (; n > 0; n--, p += 64) {
        __m128i abef = s0, cdgh = s1;

        for (unsigned int g = 0; g < 16; g++) {
            __m128i w, msg;

            if (g < 4)
                m[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
            w = m[g & 3];
            msg = _mm_add_epi32(w, _mm_loadu_si128((const __m128i *)&vcu__sha256_k[4 * g]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, msg);
            if (g >= 3 && g <= 14) {
                __m128i *nx = &m[(g + 1) & 3];

                *nx = _mm_add_epi32(*nx, _mm_alignr_epi8(w, m[(g + 3) & 3], 4));
                *nx = _mm_sha256msg2_epu32(*nx, w);
            }
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(msg, 0x0e));
            if (g >= 1 && g <= 12)
                m[(g + 3) & 3] = _mm_sha256msg1_epu32(m[(g + 3) & 3], w);
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    t = _mm_shuffle_epi32(s0, 0x1b);                                       /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xb1);                                      /* DCHG */
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(t, s1, 0xf0));      /* DCBA */
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(s1, t, 8));         /* HGFE */
}

/* 1 where the CPU has the SHA extensions, SSSE3 and SSE4.1; once. */
static inline int vcu__sha256_has_ni(void)
{
    static int has = -1;
    int v = __atomic_load_n(&has, __ATOMIC_RELAXED);

    if (v < 0) {
        unsigned int a, b, c, d;

        v = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSSE3) && (c & bit_SSE4_1) &&
            __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
        __atomic_store_n(&has, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

/* Hashes n whole 64-byte blocks at p into h, in C. */
static inline void vcu__sha256_blocks_c(uint32_t h[8], const unsigned char *p, size_t n)
{
    const uint32_t *k = vcu__sha256_k;

    for (; n > 0; n--, p += 64) {
        uint32_t w[64], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6],
                        hh = h[7];
        unsigned int i;

        for (i = 0; i < 16; i++)
            w[i] = vcu__sha_be32(p + 4 * i);
        for (; i < 64; i++) {
            uint32_t s0 = vcu__sha_ror(w[i - 15], 7) ^ vcu__sha_ror(w[i - 15], 18) ^
                          (w[i - 15] >> 3);
            uint32_t s1 = vcu__sha_ror(w[i - 2], 17) ^ vcu__sha_ror(w[i - 2], 19) ^
                          (w[i - 2] >> 10);

            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        for (i = 0; i < 64; i++) {
            uint32_t s1 = vcu__sha_ror(e, 6) ^ vcu__sha_ror(e, 11) ^ vcu__sha_ror(e, 25);
            uint32_t t1 = hh + s1 + ((e & f) ^ (~e & g)) + k[i] + w[i];
            uint32_t s0 = vcu__sha_ror(a, 2) ^ vcu__sha_ror(a, 13) ^ vcu__sha_ror(a, 22);
            uint32_t t2 = s0 + ((a & b) ^ (a & c) ^ (b & c));

            hh = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        h[0] += a;
        h[1] += b;
        h[2] += c;
        h[3] += d;
        h[4] += e;
        h[5] += f;
        h[6] += g;
        h[7] += hh;
    }
}

/* Hashes n whole 64-byte blocks at p into h. */
static inline void vcu__sha256_blocks(uint32_t h[8], const unsigned char *p, size_t n)
{
#ifdef VCU_SHA256_NI
    if (n > 0 && vcu__sha256_has_ni()) {
        vcu__sha256_blocks_ni(h, p, n);
        return;
    }
#endif
    vcu__sha256_blocks_c(h, p, n);
}

static inline void vcu_sha256_init(vcu_sha256_t *s)
{
    static const uint32_t iv[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };

    memcpy(s->h, iv, sizeof(iv));
    s->bytes = 0;
    s->nbuf = 0;
}

static inline void vcu_sha256_update(vcu_sha256_t *s, const void *data, size_t len)
{
    const unsigned char *p = (const unsigned char *)data;

    s->bytes += len;
    if (s->nbuf > 0) {
        size_t n = 64 - s->nbuf < len ? 64 - s->nbuf : len;

        memcpy(s->buf + s->nbuf, p, n);
        s->nbuf += n;
        p += n;
        len -= n;
        if (s->nbuf < 64)
            return;
        vcu__sha256_blocks(s->h, s->buf, 1);
        s->nbuf = 0;
    }
    vcu__sha256_blocks(s->h, p, len / 64);
    p += len & ~(size_t)63;
    len &= 63;
    memcpy(s->buf, p, len);
    s->nbuf = len;
}

static inline void vcu_sha256_final(vcu_sha256_t *s, unsigned char out[VCU_SHA256_LEN])
{
    uint64_t bits = s->bytes * 8;
    unsigned int i;

    s->buf[s->nbuf++] = 0x80;
    if (s->nbuf > 56) {
        memset(s->buf + s->nbuf, 0, 64 - s->nbuf);
        vcu__sha256_blocks(s->h, s->buf, 1);
        s->nbuf = 0;
    }
    memset(s->buf + s->nbuf, 0, 56 - s->nbuf);
    for (i = 0; i < 8; i++)
        s->buf[56 + i] = (unsigned char)(bits >> (56 - 8 * i));
    vcu__sha256_blocks(s->h, s->buf, 1);
    for (i = 0; i < 8; i++) {
        out[4 * i] = (unsigned char)(s->h[i] >> 24);
        out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
        out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
        out[4 * i + 3] = (unsigned char)s->h[i];
    }
}

static inline void vcu_sha256(const void *data, size_t len, unsigned char out[VCU_SHA256_LEN])
{
    vcu_sha256_t s;

    vcu_sha256_init(&s);
    vcu_sha256_update(&s, data, len);
    vcu_sha256_final(&s, out);
}

#endif /* VCU_SHA256_H */
