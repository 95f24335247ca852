/*
 * Peer copies and peer access at the runtime API, checked against a CPU
 * copy: cudaMemcpyPeer[Async] on one device (NVIDIA's runtime sends them
 * as cuMemcpyPeer[Async]), cudaDeviceEnablePeerAccess refused for a
 * device and itself; with two devices, copies between them, with and
 * without peer access, and cudaDeviceGetP2PAttribute agreeing with
 * cudaDeviceCanAccessPeer.  One device is enough.
 */
#define TEST_NAME "peer"
#include "vcu_test.h"

#include <stdint.h>

#define N (1u << 18)                /* 32-bit words */

static uint32_t h[N], got[N];

/* dst (on dd) = src (on sd), both ways of copying, checked. */
static void copy_check(uint32_t *dst, int dd, const uint32_t *src, int sd, cudaStream_t s,
                       uint32_t seed)
{
    for (uint32_t i = 0; i < N; i++)
        h[i] = seed * 2654435761u ^ (i * 40503u);
    CK(cudaSetDevice(sd));
    CK(cudaMemcpy((void *)src, h, sizeof(h), cudaMemcpyHostToDevice));
    CK(cudaSetDevice(dd));
    CK(cudaMemset(dst, 0, sizeof(h)));
    CK(cudaMemcpyPeer(dst, dd, src, sd, sizeof(h)));
    CK(cudaMemcpy(got, dst, sizeof(got), cudaMemcpyDeviceToHost));
    EXPECT(memcmp(got, h, sizeof(h)) == 0, "cudaMemcpyPeer %d <- %d: wrong data", dd, sd);
    CK(cudaMemset(dst, 0xff, sizeof(h)));
    CK(cudaMemcpyPeerAsync(dst + 1, dd, src + 1, sd, sizeof(h) - 8, s));
    CK(cudaStreamSynchronize(s));
    h[0] = h[N - 1] = 0xffffffffu;
    CK(cudaMemcpy(got, dst, sizeof(got), cudaMemcpyDeviceToHost));
    EXPECT(memcmp(got, h, sizeof(h)) == 0, "cudaMemcpyPeerAsync %d <- %d: wrong data", dd, sd);
}

/* A W x H x D box between pitched buffers of devices sd and dd
 * (cudaMemcpy3DPeer, then its async form), against a CPU copy. */
#define W 80u
#define H 6u
#define D 3u
#define PITCH 128u
#define ROWS 8u
static unsigned char hb[PITCH * ROWS * (D + 1)], gb[sizeof(hb)], wb[sizeof(hb)];

static void copy3d_check(void *dst, int dd, void *src, int sd, cudaStream_t s, int async)
{
    struct cudaMemcpy3DPeerParms p;

    for (size_t i = 0; i < sizeof(hb); i++)
        hb[i] = (unsigned char)(i * 13u + 7u + (unsigned)async);
    CK(cudaSetDevice(sd));
    CK(cudaMemcpy(src, hb, sizeof(hb), cudaMemcpyHostToDevice));
    CK(cudaSetDevice(dd));
    CK(cudaMemset(dst, 0x3c, sizeof(hb)));
    memset(wb, 0x3c, sizeof(wb));
    for (size_t z = 0; z < D; z++)
        for (size_t y = 0; y < H; y++)
            memcpy(wb + ((z + 1) * ROWS + y) * PITCH + 16, hb + (z * ROWS + y + 2) * PITCH + 4, W);
    memset(&p, 0, sizeof(p));
    p.srcPtr = make_cudaPitchedPtr(src, PITCH, PITCH, ROWS);
    p.srcPos = make_cudaPos(4, 2, 0);
    p.srcDevice = sd;
    p.dstPtr = make_cudaPitchedPtr(dst, PITCH, PITCH, ROWS);
    p.dstPos = make_cudaPos(16, 0, 1);
    p.dstDevice = dd;
    p.extent = make_cudaExtent(W, H, D);
    if (async) {
        CK(cudaMemcpy3DPeerAsync(&p, s));
        CK(cudaStreamSynchronize(s));
    } else {
        CK(cudaMemcpy3DPeer(&p));
    }
    CK(cudaMemcpy(gb, dst, sizeof(gb), cudaMemcpyDeviceToHost));
    EXPECT(memcmp(gb, wb, sizeof(gb)) == 0, "cudaMemcpy3DPeer%s %d <- %d: wrong data",
           async ? "Async" : "", dd, sd);
}

int main(void)
{
    uint32_t *a, *b, *x;
    cudaStream_t s;
    int n = 0, can = 0, attr = -1;

    CK(cudaGetDeviceCount(&n));
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&a, sizeof(h)));
    CK(cudaMalloc(&b, sizeof(h)));
    CK(cudaStreamCreate(&s));
    copy_check(b, 0, a, 0, s, 1);
    copy_check(a, 0, b, 0, s, 2);
    copy3d_check(b, 0, a, 0, s, 0);
    copy3d_check(b, 0, a, 0, s, 1);
    printf("copies on one device ok\n");

    /* A device is not its own peer. */
    CK_EQ(cudaErrorInvalidDevice, cudaDeviceEnablePeerAccess(0, 0));
    CK_EQ(cudaErrorPeerAccessNotEnabled, cudaDeviceDisablePeerAccess(0));
    (void)cudaGetLastError();

    if (n >= 2) {
        CK(cudaDeviceCanAccessPeer(&can, 0, 1));
        CK(cudaDeviceGetP2PAttribute(&attr, cudaDevP2PAttrAccessSupported, 0, 1));
        EXPECT(attr == can, "P2P access supported %d, can access %d", attr, can);
        CK(cudaSetDevice(1));
        CK(cudaMalloc(&x, sizeof(h)));
        copy_check(x, 1, a, 0, s, 3);
        copy_check(b, 0, x, 1, s, 4);
        copy3d_check(x, 1, a, 0, s, 0);
        copy3d_check(b, 0, x, 1, s, 1);
        if (can) {
            CK(cudaSetDevice(0));
            CK(cudaDeviceEnablePeerAccess(1, 0));
            CK_EQ(cudaErrorPeerAccessAlreadyEnabled, cudaDeviceEnablePeerAccess(1, 0));
            (void)cudaGetLastError();
            copy_check(x, 1, a, 0, s, 5);
            CK(cudaSetDevice(0));
            CK(cudaDeviceDisablePeerAccess(1));
        }
        CK(cudaSetDevice(1));
        CK(cudaFree(x));
        printf("copies between two devices ok (peer access %s)\n",
               can ? "too" : "not offered");
    }
    CK(cudaSetDevice(0));
    CK(cudaStreamDestroy(s));
    CK(cudaFree(a));
    CK(cudaFree(b));
    vcu_test_pass();
    return 0;
}
