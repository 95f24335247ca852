/*
 * libFuzzer target for the shared-memory frame ring (host-backend/common/
 * vcu_ring.h) against a hostile peer: the proxy in QEMU and a session's
 * worker each consume a ring the other produces into, and each reads the
 * other's index when it produces.  Either peer may be compromised (a
 * worker runs guest-chosen CUDA work; QEMU runs a guest), so everything it
 * wrote into the shared area is arbitrary here.
 *
 * The ring's bytes and its control block are heap buffers of exactly
 * their size, so that AddressSanitizer sees any access outside them.
 *
 * Consumer (vcu__ring_get(), as worker.c's vcu__take_frames() and
 * proxy.c's vcu__px_reader() call it): a ring of 64..4096 bytes, our head
 * anywhere in the 64-bit position space, the ring's bytes and a sequence of
 * tail values from the input (the peer moving its tail between our calls,
 * and rewriting bytes it has published).  Checked at every call:
 *   - a frame is returned only if its body fits max_body and the caller's
 *     buffer, lies within what was published and within one ring's size,
 *     and is the bytes at our position (header and body, wrapping);
 *   - our position and the head we publish move by exactly the frame's
 *     ring bytes, and do not move on EMPTY or BROKEN;
 *   - EMPTY only when the tail is our position;
 *   - with the tail unchanged, the ring is empty or broken after at most
 *     size / 16 frames: a hostile ring ends, it does not loop.
 *
 * Producer (vcu__ring_put(), the proxy's request ring and the worker's
 * reply ring): our tail anywhere, the consumer's head as the input says,
 * frames of the input's lengths.  Checked: a frame is published only when
 * it fits between the consumer's head and our new tail; the head we keep
 * never goes back nor passes our tail; an impossible head is reported
 * as BROKEN and publishes nothing.
 */
#define _GNU_SOURCE                 /* ppoll, in vcu_ring.h */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vcu_ring.h"
#include "fz_input.h"

#define FZ_CHECK(c)                                                               \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "fuzz_ring: %s:%d: check failed: %s\n", __FILE__,      \
                    __LINE__, #c);                                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

#define FZ_MAX_CAP 8192u
#define FZ_MAX_TAILS 8u

/* The bytes at ring position pos, wrapping (the reference copy). */
static void fz_ring_bytes(const unsigned char *data, uint64_t size, uint64_t pos, void *dst,
                          size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        ((unsigned char *)dst)[i] = data[(pos + i) & (size - 1)];
}

static void fz_consumer(fz_in_t *in, uint64_t size)
{
    struct vcu_ipc_ring_ctl *ctl = calloc(1, sizeof(*ctl));
    unsigned char *data = malloc(size), *buf, *ref;
    uint64_t start = in_u(in, 8), tails[FZ_MAX_TAILS];
    uint64_t max_body = in_u(in, 2), cap = in_u(in, 2) % (FZ_MAX_CAP + 1);
    unsigned int ntails = (unsigned int)(in_u(in, 1) % FZ_MAX_TAILS) + 1, t, i;
    uint8_t rewrite[FZ_MAX_TAILS];
    vcu__ring_t r;

    buf = malloc(cap ? cap : 1);
    ref = malloc(size);
    if (ctl == NULL || data == NULL || buf == NULL || ref == NULL)
        goto out;
    if (max_body == 0xffff)
        max_body = UINT64_MAX;
    /* Each tail: absolute (any value the peer may write) or just past our
     * start, where the frames are. */
    for (t = 0; t < ntails; t++) {
        uint8_t kind = (uint8_t)in_u(in, 1);
        uint64_t v = in_u(in, kind & 1 ? 8 : 2);

        tails[t] = kind & 1 ? v : start + (v % (2 * size + 17));
        rewrite[t] = kind & 2 ? (uint8_t)(kind | 1) : 0;
    }
    memset(data, 0, size);
    for (i = 0; i < size && in->n > 0; i++)
        data[(start + i) & (size - 1)] = (uint8_t)in_u(in, 1);
    vcu__ring_init(&r, ctl, data, size, -1);
    r.pos = start;
    ctl->head = start;

    for (t = 0; t < ntails; t++) {
        unsigned int frames = 0;

        ctl->tail = tails[t];
        /* The peer rewrites what it has published since our last look. */
        if (rewrite[t] != 0)
            for (i = 0; i < size; i++)
                data[i] ^= rewrite[t];
        for (;;) {
            struct vcu_ipc_hdr h, rh;
            uint64_t pos = r.pos, avail = ctl->tail - pos;
            int rc;

            memset(&h, 0xa5, sizeof(h));
            memcpy(ref, data, size);
            rc = vcu__ring_get(&r, &h, buf, (size_t)cap, max_body);
            FZ_CHECK(rc == 1 || rc == VCU__RING_EMPTY || rc == VCU__RING_BROKEN);
            if (rc != 1) {
                FZ_CHECK(r.pos == pos && ctl->head == pos);
                if (rc == VCU__RING_EMPTY)
                    FZ_CHECK(ctl->tail == pos);
                break;
            }
            FZ_CHECK(avail <= size && avail >= sizeof(h));
            FZ_CHECK(h.len <= max_body && h.len <= cap);
            FZ_CHECK(vcu__ring_frame_bytes(h.len) <= avail);
            FZ_CHECK(r.pos == pos + vcu__ring_frame_bytes(h.len) && ctl->head == r.pos);
            fz_ring_bytes(ref, size, pos, &rh, sizeof(rh));
            FZ_CHECK(memcmp(&rh, &h, sizeof(h)) == 0);
            for (i = 0; i < h.len; i++)
                FZ_CHECK(buf[i] == ref[(pos + sizeof(h) + i) & (size - 1)]);
            /* Each frame takes 16 bytes at least of at most size published. */
            FZ_CHECK(++frames <= size / sizeof(h));
        }
    }
out:
    free(ctl);
    free(data);
    free(buf);
    free(ref);
}

static void fz_producer(fz_in_t *in, uint64_t size)
{
    struct vcu_ipc_ring_ctl *ctl = calloc(1, sizeof(*ctl));
    unsigned char *data = malloc(size), *body = malloc(size + 64);
    uint64_t start = in_u(in, 8), seen = start - in_u(in, 2) % (size + 1);
    vcu__ring_t r;
    unsigned int n;

    if (ctl == NULL || data == NULL || body == NULL)
        goto out;
    memset(body, 0x3c, size + 64);
    vcu__ring_init(&r, ctl, data, size, -1);
    r.pos = start;
    r.head_seen = seen;
    ctl->head = seen;
    ctl->tail = start;
    for (n = 0; n < 16 && in->n > 0; n++) {
        uint8_t kind = (uint8_t)in_u(in, 1);
        struct vcu_ipc_hdr h = { .type = VCU_IPC_RESP, .len = (uint32_t)in_u(in, 2), .tag = n };
        uint64_t pos = r.pos, seen0 = r.head_seen;
        int rc;

        /* The consumer's head: kept, moved up to our tail, or anything. */
        if (kind & 1)
            ctl->head = kind & 2 ? in_u(in, 8) : pos - in_u(in, 2) % (size + 1);
        if (h.len > size + 64 - 1)
            h.len %= (uint32_t)size;
        rc = vcu__ring_put(&r, &h, body);
        FZ_CHECK(rc == 1 || rc == VCU__RING_FULL || rc == VCU__RING_BROKEN);
        /* What we know of the head never goes back nor passes our tail. */
        FZ_CHECK(r.head_seen - seen0 <= pos - seen0);
        if (rc != 1) {
            FZ_CHECK(r.pos == pos && ctl->tail == pos);
            if (rc == VCU__RING_BROKEN)
                break;
            continue;
        }
        FZ_CHECK(r.pos == pos + vcu__ring_frame_bytes(h.len) && ctl->tail == r.pos);
        FZ_CHECK(r.pos - r.head_seen <= size);
    }
out:
    free(ctl);
    free(data);
    free(body);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in_t in = { data, size };
    uint8_t mode = (uint8_t)in_u(&in, 1);
    uint64_t rsize = 64ull << (mode % 7);   /* 64 .. 4096 */

    if (mode & 0x80)
        fz_producer(&in, rsize);
    else
        fz_consumer(&in, rsize);
    return 0;
}
