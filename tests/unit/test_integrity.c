/*
 * guest-lib's MD2 and the integrity check of NVIDIA's INTEGRITY_CHECK
 * export table (guest-lib/cuda_integrity.c, built into this binary on
 * its own): MD2 against RFC 1319's test suite (appendix A.5), and the
 * steps of the check against the intermediate states published with
 * ZLUDA's implementation (vosen/ZLUDA dark_api/src/lib.rs, tests
 * integrity_check_pass2/pass3/pass5: its 66-byte state is MD2's 48-byte
 * state, 16-byte checksum, block fill and last checksum byte).  The
 * whole check was compared with NVIDIA's driver on a GPU host
 * (tests/gpu/probe-integrity.c, docs/driver-api.md).
 */
#include <stdint.h>
#include <string.h>

#include "../../guest-lib/cuda_integrity.h"
#include "vcu_test.h"

static int md2_hex(const void *msg, size_t len, size_t piece, const char *want)
{
    uint8_t d[16];
    char hex[33];
    vcu__md2_t m;

    vcu__md2_init(&m);
    for (size_t off = 0; off < len; off += piece)
        vcu__md2_update(&m, (const uint8_t *)msg + off, len - off < piece ? len - off : piece);
    vcu__md2_final(&m, d);
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (strcmp(hex, want) != 0) {
        fprintf(stderr, "MD2(\"%.*s\") = %s, want %s\n", (int)len, (const char *)msg, hex, want);
        return 1;
    }
    return 0;
}

TEST(md2_rfc1319)
{
    static const struct {
        const char *msg, *digest;
    } v[] = {
        { "", "8350e5a3e24c153df2275c9f80692773" },
        { "a", "32ec01ec4a6dac72c0ab96fb34c0b5d1" },
        { "abc", "da853b0d3f88d99b30283a69e6ded6bb" },
        { "message digest", "ab4f496bfb2a530b219ff33031fe06b0" },
        { "abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b" },
        { "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
          "da33def2a42df13975352846c30338cd" },
        { "1234567890123456789012345678901234567890"
          "1234567890123456789012345678901234567890",
          "d5976f79d83d3a0dc9806c3c66f3efd8" },
    };

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        size_t len = strlen(v[i].msg);

        /* Whole, byte by byte, and in pieces that straddle blocks. */
        ASSERT_EQ(0, md2_hex(v[i].msg, len, len ? len : 1, v[i].digest));
        ASSERT_EQ(0, md2_hex(v[i].msg, len, 1, v[i].digest));
        ASSERT_EQ(0, md2_hex(v[i].msg, len, 7, v[i].digest));
    }
    return 0;
}

static const uint8_t key[16] = { 0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f };

/* ZLUDA's states after its pass 2 (the key ^ 0x36) and pass 3 (the
 * 48-byte input), and its pass 5 (MD2's end) input and result. */
static const uint8_t after_pass2[66] = {
    0x8b, 0x21, 0x9a, 0x49, 0xe8, 0x6d, 0x1a, 0xee, 0xf2, 0x37, 0xf9, 0xb5, 0x4a, 0x8c, 0x3c, 0x75,
    0xc7, 0x1e, 0xee, 0x21, 0xcf, 0x29, 0x8a, 0xe5, 0x13, 0x83, 0xf4, 0xec, 0x33, 0x04, 0xe2, 0xfd,
    0xb0, 0x2f, 0x09, 0x01, 0x4f, 0xf7, 0x68, 0x6d, 0x69, 0x46, 0x43, 0x7e, 0xb6, 0x2b, 0x21, 0xed,
    0x57, 0xa1, 0x10, 0x86, 0x0e, 0x60, 0x44, 0x1e, 0x70, 0x5f, 0x67, 0xd1, 0xeb, 0x67, 0xa1, 0x3d,
    0x00, 0x3d,
};

static const uint8_t after_pass3[66] = {
    0x0a, 0xfd, 0xab, 0xc9, 0xff, 0x9b, 0xa0, 0xbe, 0x4d, 0x30, 0x32, 0x82, 0x74, 0x4f, 0xa7, 0x48,
    0x9d, 0x23, 0x82, 0xa3, 0x87, 0xfa, 0x6c, 0xdb, 0x92, 0x49, 0xd9, 0xb5, 0x4b, 0x2b, 0x5e, 0x51,
    0x6e, 0xf7, 0xf9, 0x4d, 0x28, 0x8a, 0x64, 0x06, 0x19, 0xb3, 0xe6, 0xbe, 0xa4, 0xec, 0x7e, 0x54,
    0x64, 0x28, 0xd9, 0xe1, 0xd4, 0x34, 0xc0, 0xa9, 0x49, 0x88, 0xc9, 0x61, 0x58, 0xdd, 0x66, 0x74,
    0x00, 0x74,
};

static const uint8_t before_pass5[66] = {
    0x3e, 0x4b, 0xf2, 0x95, 0x71, 0xf5, 0x6b, 0x51, 0x07, 0xbf, 0x4b, 0xf1, 0x04, 0x0e, 0x8e, 0x0b,
    0x5f, 0x4d, 0x30, 0x0c, 0x0f, 0x0c, 0xae, 0xfb, 0x48, 0xaf, 0x23, 0xb5, 0xea, 0x4c, 0xc2, 0xdb,
    0xd7, 0xdf, 0x88, 0x74, 0x39, 0x58, 0x16, 0x3a, 0x1f, 0x7c, 0x9b, 0x20, 0x7e, 0x7e, 0x94, 0xc8,
    0x8b, 0xc6, 0xb2, 0x38, 0x0d, 0x07, 0x7d, 0xbd, 0x90, 0xd5, 0x39, 0x63, 0xeb, 0x1d, 0x4f, 0x40,
    0x00, 0x40,
};

static const uint8_t pass5_digest[16] = { 0x00, 0x23, 0x53, 0x06, 0x5e, 0x96, 0xf6, 0x9c,
                                          0x61, 0xaa, 0x96, 0x2d, 0x2e, 0xcd, 0xa8, 0x58 };

/* Our state against one of ZLUDA's (between whole blocks). */
static int same_state(const vcu__md2_t *m, const uint8_t z[66])
{
    ASSERT_EQ(0, m->n);
    ASSERT_EQ(0, z[64]);
    ASSERT_EQ(0, memcmp(m->x, z, 48));
    ASSERT_EQ(0, memcmp(m->c, z + 48, 16));
    ASSERT_EQ(z[65], m->l);
    return 0;
}

TEST(integrity_steps)
{
    vcu__integrity_in_t in = {
        .driver_version = 0x2f30,
        .version = 12082,
        .pid = 0x002fa423,
        .tid = 0xf79c1000,
        .cudart_table = (const void *)0x00007ffff6958240,
        .integrity_table = (const void *)0x00007ffff6958220,
        .integrity_fn = (const void *)0x00007ffff2aaf4a0,
        .unix_seconds = 0x682b9cee,
    };
    uint8_t pad[16], d[16];
    vcu__md2_t m;

    ASSERT_EQ(48, sizeof(vcu__integrity_in_t));
    ASSERT_EQ(28, sizeof(vcu__integrity_dev_t));
    for (int i = 0; i < 16; i++)
        pad[i] = key[i] ^ 0x36;
    vcu__md2_init(&m);
    vcu__md2_update(&m, pad, sizeof(pad));
    ASSERT_EQ(0, same_state(&m, after_pass2));
    vcu__md2_update(&m, &in, sizeof(in));
    ASSERT_EQ(0, same_state(&m, after_pass3));

    vcu__md2_init(&m);
    memcpy(m.x, before_pass5, 48);
    memcpy(m.c, before_pass5 + 48, 16);
    m.l = before_pass5[65];
    vcu__md2_final(&m, d);
    ASSERT_EQ(0, memcmp(d, pass5_digest, 16));
    return 0;
}

/* The whole check is HMAC-MD2 of the input and the devices; versions
 * ending in 0 or 1 get constants. */
TEST(integrity_hmac)
{
    vcu__integrity_in_t in;
    vcu__integrity_dev_t devs[2];
    uint8_t msg[sizeof(in) + sizeof(devs)], mac[16];
    uint64_t out[2], again[2];

    memset(&in, 0, sizeof(in));
    memset(devs, 0, sizeof(devs));
    in.driver_version = 13000;
    in.version = 13000;
    vcu__integrity(&in, devs, 2, out);
    ASSERT_EQ(0x3341181C03CB675Cull, out[0]);
    ASSERT_EQ(0x8ED383AA1F4CD1E8ull, out[1]);
    in.version = 12081;
    vcu__integrity(&in, devs, 2, out);
    ASSERT_EQ(0x1841181C03CB675Cull, out[0]);
    ASSERT_EQ(0x8ED383AA1F4CD1E8ull, out[1]);

    in.version = 13002;
    in.pid = 1234;
    in.unix_seconds = 1700000000;
    devs[0].uuid[0] = 0x8a;
    devs[0].pci_bus = 2;
    devs[1].pci_device = 5;
    memcpy(msg, &in, sizeof(in));
    memcpy(msg + sizeof(in), devs, sizeof(devs));
    vcu__hmac_md2(key, msg, sizeof(msg), mac);
    vcu__integrity(&in, devs, 2, out);
    ASSERT_EQ(0, memcmp(out, mac, 16));
    /* Every input counts: one device fewer, another second. */
    vcu__integrity(&in, devs, 1, again);
    ASSERT_NE(0, memcmp(out, again, 16));
    in.unix_seconds++;
    vcu__integrity(&in, devs, 2, again);
    ASSERT_NE(0, memcmp(out, again, 16));
    /* No devices, and a count out of range, are not read past. */
    vcu__integrity(&in, devs, 0, again);
    vcu__integrity(&in, devs, -3, out);
    ASSERT_EQ(0, memcmp(out, again, 16));
    return 0;
}
