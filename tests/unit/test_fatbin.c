/*
 * vcu_fatbin_trim (include/vcu_fatbin.h): which entries of a fatbin the
 * guest sends for a device, as NVIDIA's driver picks code (the cubin of
 * the device's architecture, else the nearest lower one of its major,
 * else the highest PTX not above it), and that what it cannot read it
 * leaves alone, whatever the bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vcu_fatbin.h"
#include "vcu_test.h"

typedef struct {
    uint16_t kind;
    unsigned int arch;
} fb_ent_t;

/* A container of the entries given; entry i's payload is 13 + i bytes
 * of the value i (so each entry is recognisable) and its header is 64 or
 * 80 bytes (both occur in NVIDIA's libraries). */
static size_t fb_build(unsigned char *buf, const fb_ent_t *ents, unsigned int n)
{
    struct vcu_fatbin_hdr h = { VCU_FATBIN_MAGIC, 1, sizeof(h), 0 };
    size_t off = sizeof(h);

    for (unsigned int i = 0; i < n; i++) {
        struct vcu_fatbin_entry e;
        uint32_t hs = i % 2 ? 80 : 64;

        memset(&e, 0, sizeof(e));
        e.kind = ents[i].kind;
        e.header_size = hs;
        e.size = 13 + i;
        e.arch = ents[i].arch;
        memset(buf + off, 0xee, hs);
        memcpy(buf + off, &e, sizeof(e));
        memset(buf + off + hs, (int)i, 13 + i);
        off += hs + 13 + i;
    }
    h.fat_size = off - sizeof(h);
    memcpy(buf, &h, sizeof(h));
    return off;
}

/* Trims for arch and checks the result holds exactly the entries whose
 * indexes are listed (want == NULL: left as it is), bytes unchanged. */
static int fb_expect(const unsigned char *img, size_t len, unsigned int arch, const int *want,
                     unsigned int nwant)
{
    struct vcu_fatbin_hdr h;
    void *out = NULL;
    size_t n, off;
    int rc = vcu_fatbin_trim(img, len, arch, &out, &n);
    const unsigned char *o = out;

    if (want == NULL || nwant == 0) {
        ASSERT_EQ(want == NULL ? VCU_FATBIN_AS_IS : VCU_FATBIN_NONE, rc);
        ASSERT_EQ(0, n);
        ASSERT_TRUE(out == NULL);
        return 0;
    }
    ASSERT_EQ(VCU_FATBIN_TRIMMED, rc);
    ASSERT_GT(n, 0);
    ASSERT_TRUE(out != NULL);
    memcpy(&h, o, sizeof(h));
    ASSERT_EQ(VCU_FATBIN_MAGIC, h.magic);
    ASSERT_EQ(n, sizeof(h) + h.fat_size);
    off = sizeof(h);
    for (unsigned int k = 0; k < nwant; k++) {
        struct vcu_fatbin_entry e;
        unsigned int i = (unsigned int)want[k];

        ASSERT_TRUE(off + sizeof(e) <= n);
        memcpy(&e, o + off, sizeof(e));
        ASSERT_EQ(13 + i, e.size);
        for (size_t b = 0; b < e.size; b++)
            ASSERT_EQ(i, o[off + e.header_size + b]);
        off += e.header_size + e.size;
    }
    ASSERT_EQ(n, off);
    free(out);
    return 0;
}

TEST(fatbin_trim_choice)
{
    static const fb_ent_t lib[] = {
        { VCU_FATBIN_KIND_ELF, 75 }, { VCU_FATBIN_KIND_ELF, 80 }, { VCU_FATBIN_KIND_ELF, 86 },
        { VCU_FATBIN_KIND_ELF, 90 }, { VCU_FATBIN_KIND_ELF, 90 }, { VCU_FATBIN_KIND_ELF, 100 },
        { VCU_FATBIN_KIND_PTX, 90 }, { VCU_FATBIN_KIND_PTX, 120 },
    };
    static const fb_ent_t ptx_only[] = {
        { VCU_FATBIN_KIND_PTX, 75 }, { VCU_FATBIN_KIND_PTX, 80 }, { VCU_FATBIN_KIND_PTX, 120 },
    };
    static const fb_ent_t one[] = { { VCU_FATBIN_KIND_ELF, 90 } };
    static const int h100[] = { 3, 4 }, a100[] = { 1 }, rtx[] = { 2 }, b200[] = { 5 },
                     thor[] = { 6 }, p80[] = { 1 }, none[] = { -1 };
    unsigned char *buf = malloc(1 << 16);
    size_t n;

    ASSERT_TRUE(buf != NULL);
    n = fb_build(buf, lib, 8);
    CHECK(fb_expect(buf, n, 90, h100, 2));  /* both sm_90 cubins (sm_90, sm_90a) */
    CHECK(fb_expect(buf, n, 80, a100, 1));
    CHECK(fb_expect(buf, n, 86, rtx, 1));
    CHECK(fb_expect(buf, n, 100, b200, 1));
    CHECK(fb_expect(buf, n, 89, rtx, 1));   /* sm_86's cubin runs on 8.9 */
    CHECK(fb_expect(buf, n, 110, thor, 1)); /* no cubin of major 11: PTX 9.0 */
    CHECK(fb_expect(buf, n, 70, none, 0));  /* nothing it loads: refused in the guest */
    n = fb_build(buf, ptx_only, 3);
    CHECK(fb_expect(buf, n, 90, p80, 1));
    n = fb_build(buf, one, 1);
    CHECK(fb_expect(buf, n, 90, NULL, 0));  /* nothing to drop */
    free(buf);
    return 0;
}

TEST(fatbin_trim_refuses)
{
    static const fb_ent_t lib[] = {
        { VCU_FATBIN_KIND_ELF, 80 }, { VCU_FATBIN_KIND_ELF, 90 }, { VCU_FATBIN_KIND_PTX, 90 },
    };
    static const fb_ent_t odd[] = { { VCU_FATBIN_KIND_ELF, 90 }, { 4, 90 } };
    unsigned char *buf = malloc(1 << 16), *m;
    struct vcu_fatbin_hdr h;
    struct vcu_fatbin_entry e;
    void *out;
    size_t n, got;

    ASSERT_TRUE(buf != NULL);
    n = fb_build(buf, lib, 3);
    ASSERT_EQ(VCU_FATBIN_AS_IS, vcu_fatbin_trim(buf, sizeof(h) - 1, 90, &out, &got));   /* short */
    ASSERT_EQ(VCU_FATBIN_AS_IS, vcu_fatbin_trim(buf, n - 1, 90, &out, &got)); /* fat_size past the end */
    ASSERT_EQ(VCU_FATBIN_AS_IS, vcu_fatbin_trim("PTX text", 9, 90, &out, &got)); /* not a container */
    /* An entry whose size runs past the container. */
    memcpy(&e, buf + sizeof(h), sizeof(e));
    e.size = 1ull << 40;
    m = malloc(n);
    ASSERT_TRUE(m != NULL);
    memcpy(m, buf, n);
    memcpy(m + sizeof(h), &e, sizeof(e));
    ASSERT_EQ(VCU_FATBIN_AS_IS, vcu_fatbin_trim(m, n, 90, &out, &got));
    /* A header smaller than an entry header, or past the end. */
    memcpy(&e, buf + sizeof(h), sizeof(e));
    e.header_size = 16;
    memcpy(m, buf, n);
    memcpy(m + sizeof(h), &e, sizeof(e));
    ASSERT_EQ(VCU_FATBIN_AS_IS, vcu_fatbin_trim(m, n, 90, &out, &got));
    e.header_size = 0xffffffffu;
    memcpy(m + sizeof(h), &e, sizeof(e));
    ASSERT_EQ(VCU_FATBIN_AS_IS, vcu_fatbin_trim(m, n, 90, &out, &got));
    free(m);
    /* An entry kind not read here: the image goes as it is. */
    n = fb_build(buf, odd, 2);
    ASSERT_EQ(VCU_FATBIN_AS_IS, vcu_fatbin_trim(buf, n, 90, &out, &got));
    /* Whatever the bytes: never past them (ASan), never a bad container. */
    n = fb_build(buf, lib, 3);
    m = malloc(n);
    ASSERT_TRUE(m != NULL);
    srand(7);
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)rand() % (n + 1);
        int rc;

        memcpy(m, buf, n);
        for (int k = rand() % 4; k >= 0; k--)
            m[(size_t)rand() % n] = (unsigned char)rand();
        rc = vcu_fatbin_trim(m, len, (unsigned int)(rand() % 130), &out, &got);
        ASSERT_TRUE(rc == VCU_FATBIN_AS_IS || rc == VCU_FATBIN_NONE || rc == VCU_FATBIN_TRIMMED);
        ASSERT_EQ(rc == VCU_FATBIN_TRIMMED, out != NULL);
        if (rc == VCU_FATBIN_TRIMMED) {
            memcpy(&h, out, sizeof(h));
            ASSERT_EQ(VCU_FATBIN_MAGIC, h.magic);
            ASSERT_EQ(got, sizeof(h) + h.fat_size);
            ASSERT_TRUE(got < len);
            free(out);
        }
    }
    free(m);
    free(buf);
    return 0;
}
