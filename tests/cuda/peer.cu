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
