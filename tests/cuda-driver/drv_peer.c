/*
 * Peer access, peer copies and stream memory operations at the Driver
 * API, against a CPU reference: cuMemcpyPeer[Async] and cuMemcpy3DPeer
 * [Async] between two contexts of one device (a device-to-device copy
 * there) and, where the VM has two devices, between devices with and
 * without peer access; cuCtxEnablePeerAccess / cuCtxDisablePeerAccess
 * (a device is not its own peer); with two devices, another device's
 * pointer attributes, a stream of one waiting for the other's event, and
 * a pool of device 0 that device 1's kernel reads (cuMemPoolSetAccess); cuStreamBatchMemOp_v2 with writes,
 * waits for values already written and a barrier, the unversioned ABI
 * (cuStreamBatchMemOp, cuStreamWriteValue32 and the others, found by
 * cuGetProcAddress at 11000) and the per-thread forms; counts, flags and
 * operations cuda.h does not define refused.  One device is enough.
 */
#include <stdint.h>

#include "vcu_drv_test.h"

#define N 4096u                     /* 32-bit words per buffer */
#define W 96u                       /* the 3D copy's box: bytes, rows, slices */
#define H 5u
#define D 3u
#define PITCH 128u
#define ROWS 7u                     /* rows per slice of the buffers */

typedef CUresult (*batch_fn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*peer_async_fn)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t,
                                  CUstream);

static void *proc(const char *name, int version, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult st;
    void *fn = NULL;

    CK(cuGetProcAddress(name, &fn, version, flags, &st));
    TRUE(st == CU_GET_PROC_ADDRESS_SUCCESS && fn != NULL);
    return fn;
}

static void fill(uint32_t *h, uint32_t seed)
{
    for (uint32_t i = 0; i < N; i++)
        h[i] = seed * 2654435761u + i * 40503u;
}

static void check_words(CUdeviceptr p, const uint32_t *want)
{
    static uint32_t got[N];

    memset(got, 0, sizeof(got));
    CK(cuMemcpyDtoH(got, p, sizeof(got)));
    TRUE(memcmp(got, want, sizeof(got)) == 0);
}

/* A memset of dst in its own context dc: from another device's context
 * the host's driver answered CUDA_ERROR_INVALID_VALUE (two H200, a
 * guest with both), where copies of that memory are taken. */
static void set_in(CUcontext dc, CUdeviceptr dst, unsigned int v, size_t words, int bytes)
{
    CK(cuCtxPushCurrent(dc));
    if (bytes)
        CK(cuMemsetD8(dst, (unsigned char)v, words));
    else
        CK(cuMemsetD32(dst, v, words));
    CK(cuCtxPopCurrent(NULL));
}

/* A 1D peer copy between contexts dc and sc, checked against a CPU copy. */
static void peer_1d(CUcontext dc, CUcontext sc, CUdeviceptr dst, CUdeviceptr src, CUstream s,
                    uint32_t seed)
{
    static uint32_t h[N], want[N];

    fill(h, seed);
    CK(cuMemcpyHtoD(src, h, sizeof(h)));
    set_in(dc, dst, 0, N, 0);
    memcpy(want, h, sizeof(h));
    CK(cuMemcpyPeer(dst, dc, src, sc, sizeof(h)));
    check_words(dst, want);

    /* Async, on a stream: a piece in the middle. */
    set_in(dc, dst, 0xdeadbeefu, N, 0);
    for (uint32_t i = 0; i < N; i++)
        want[i] = i >= 100 && i < 1100 ? h[i] : 0xdeadbeefu;
    CK(cuMemcpyPeerAsync(dst + 400, dc, src + 400, sc, 4000, s));
    CK(cuStreamSynchronize(s));
    check_words(dst, want);
}

/* A 3D peer copy of a W x H x D box between pitched buffers (the source
 * at (8, 1, 0), the destination at (0, 2, 1)), against a CPU copy. */
static void peer_3d(CUcontext dc, CUcontext sc, CUdeviceptr dst, CUdeviceptr src, CUstream s,
                    int async)
{
    static unsigned char h[PITCH * ROWS * (D + 1)], got[sizeof(h)], want[sizeof(h)];
    CUDA_MEMCPY3D_PEER p;

    for (size_t i = 0; i < sizeof(h); i++)
        h[i] = (unsigned char)(i * 7u + 3u + (unsigned)async);
    CK(cuMemcpyHtoD(src, h, sizeof(h)));
    set_in(dc, dst, 0x5a, sizeof(h), 1);
    memset(want, 0x5a, sizeof(want));
    for (size_t z = 0; z < D; z++)
        for (size_t y = 0; y < H; y++)
            memcpy(want + ((z + 1) * ROWS + y + 2) * PITCH,
                   h + (z * ROWS + y + 1) * PITCH + 8, W);
    memset(&p, 0, sizeof(p));
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = src;
    p.srcXInBytes = 8;
    p.srcY = 1;
    p.srcPitch = PITCH;
    p.srcHeight = ROWS;
    p.srcContext = sc;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = dst;
    p.dstY = 2;
    p.dstZ = 1;
    p.dstPitch = PITCH;
    p.dstHeight = ROWS;
    p.dstContext = dc;
    p.WidthInBytes = W;
    p.Height = H;
    p.Depth = D;
    if (async) {
        CK(cuMemcpy3DPeerAsync(&p, s));
        CK(cuStreamSynchronize(s));
    } else {
        CK(cuMemcpy3DPeer(&p));
    }
    CK(cuMemcpyDtoH(got, dst, sizeof(got)));
    TRUE(memcmp(got, want, sizeof(got)) == 0);
}

static void memops(CUstream s, CUdeviceptr f)
{
    CUstreamBatchMemOpParams op[4];
    uint64_t got[4];
    batch_fn v1 = (batch_fn)proc("cuStreamBatchMemOp", 11000, 0);
    batch_fn v2pt = (batch_fn)proc("cuStreamBatchMemOp", 13000,
                                   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    write32_fn w32 = (write32_fn)proc("cuStreamWriteValue32", 11000, 0);
    write64_fn w64 = (write64_fn)proc("cuStreamWriteValue64", 11000, 0);
    write32_fn wait32 = (write32_fn)proc("cuStreamWaitValue32", 11000, 0);

    CK(cuMemsetD8(f, 0, sizeof(got)));
    /* Two writes, then waits for what they wrote, then a barrier. */
    memset(op, 0, sizeof(op));
    op[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op[0].writeValue.address = f;
    op[0].writeValue.value = 0x11223344u;
    op[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op[1].writeValue.address = f + 8;
    op[1].writeValue.value64 = 0x0102030405060708ull;
    op[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op[2].waitValue.address = f;
    op[2].waitValue.value = 0x11223344u;
    op[2].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    op[3].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    op[3].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    CK(cuStreamBatchMemOp(s, 4, op, 0));
    memset(op, 0, sizeof(op));
    op[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    op[0].waitValue.address = f + 8;
    op[0].waitValue.value64 = 0x0102030405060708ull;
    op[0].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    op[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op[1].writeValue.address = f + 16;
    op[1].writeValue.value = 0xcafef00du;
    CK(cuStreamBatchMemOp(s, 2, op, 0));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(got, f, sizeof(got)));
    TRUE((uint32_t)got[0] == 0x11223344u);
    TRUE(got[1] == 0x0102030405060708ull);
    TRUE((uint32_t)got[2] == 0xcafef00du);

    /* The per-thread form, on the per-thread stream. */
    memset(op, 0, sizeof(op));
    op[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op[0].writeValue.address = f + 24;
    op[0].writeValue.value64 = 42;
    CK(v2pt(NULL, 1, op, 0));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CK(cuMemcpyDtoH(got, f, sizeof(got)));
    TRUE(got[3] == 42);

    /* The unversioned ABI: its writes may ask for no memory barrier. */
    memset(op, 0, sizeof(op));
    op[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op[0].writeValue.address = f;
    op[0].writeValue.value = 5;
    op[0].writeValue.flags = CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER;
    CK(v1(s, 1, op, 0));
    CK(w32(s, f + 16, 6, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    CK(w64(s, f + 8, 7, 0));
    CK(wait32(s, f, 5, CU_STREAM_WAIT_VALUE_EQ));
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(got, f, sizeof(got)));
    TRUE((uint32_t)got[0] == 5 && got[1] == 7 && (uint32_t)got[2] == 6);
    /* The barrier is of the v2 API only. */
    op[0].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    op[0].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
    EXPECT(CUDA_ERROR_INVALID_VALUE, v1(s, 1, op, 0));

    /* What cuda.h does not allow. */
    memset(op, 0, sizeof(op));
    op[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op[0].writeValue.address = f;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamBatchMemOp(s, 1, op, 1));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamBatchMemOp(s, 256, op, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamBatchMemOp(s, 1, NULL, 0));
    op[0].writeValue.address = f + 2;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamBatchMemOp(s, 1, op, 0));
    op[0].writeValue.address = f;
    op[0].operation = (CUstreamBatchMemOpType)99;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamBatchMemOp(s, 1, op, 0));
    op[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op[0].waitValue.flags = 0x100;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamBatchMemOp(s, 1, op, 0));
    CK(cuStreamSynchronize(s));
}

/* Device 1's memory x, asked of with device 0's context current: its
 * device, its context and a buffer ID of its own (cuFFT's multi-GPU
 * plans ask for it). */
static void pointer_of_peer(CUdeviceptr a, CUdeviceptr x, CUcontext c1)
{
    unsigned long long ida = 0, idx = 0, idx2 = 0;
    CUcontext pc = NULL;
    int ord = -1;

    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, x + 64));
    TRUE(ord == 1);
    CK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, x));
    TRUE(pc == c1);
    CK(cuPointerGetAttribute(&idx, CU_POINTER_ATTRIBUTE_BUFFER_ID, x));
    CK(cuPointerGetAttribute(&idx2, CU_POINTER_ATTRIBUTE_BUFFER_ID, x + 64));
    CK(cuPointerGetAttribute(&ida, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
    TRUE(idx != 0 && idx == idx2 && ida != 0 && idx != ida);
}

/* A stream of device 1 waits for an event of device 0's stream (cuda.h:
 * the event may be of another device), then its own work runs.  With
 * c0 current. */
static void wait_on_peer(CUcontext c0, CUcontext c1, CUstream s0)
{
    static const unsigned int in[4] = { 1, 2, 3, 4 };
    unsigned int out[16];
    CUdeviceptr y;
    CUevent ev, ev1;
    CUstream s1;

    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(ev, s0));
    CK(cuCtxSetCurrent(c1));
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamWaitEvent(s1, ev, 0));
    CK(cuStreamSynchronize(s1));
    /* The stream names its device, not the current context
     * (p2pBandwidthLatencyTest waits on device j's stream with device i
     * current). */
    CK(cuCtxSetCurrent(c0));
    CK(cuEventRecord(ev, s0));
    CK(cuStreamWaitEvent(s1, ev, 0));
    CK(cuStreamSynchronize(s1));
    /* So does an event: device 1's, recorded on device 1's stream,
     * synchronized and destroyed with device 0 current; device 0's event
     * on device 1's stream is refused. */
    CK(cuCtxSetCurrent(c1));
    CK(cuEventCreate(&ev1, 0));
    CK(cuCtxSetCurrent(c0));
    CK(cuEventRecord(ev1, s1));
    CK(cuEventSynchronize(ev1));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuEventRecord(ev, s1));
    CK(cuEventDestroy(ev1));
    /* Copies and memsets on device 1's stream with device 0 current, as
     * cuFFT's multi-GPU copies are made. */
    CK(cuCtxSetCurrent(c1));
    CK(cuMemAlloc(&y, sizeof(out)));
    CK(cuCtxSetCurrent(c0));
    CK(cuMemsetD32Async(y, 7, 16, s1));
    CK(cuMemsetD2D32Async(y + 32, 16, 9, 2, 2, s1));
    CK(cuMemcpyHtoDAsync(y, in, sizeof(in), s1));
    memset(out, 0, sizeof(out));
    CK(cuMemcpyDtoHAsync(out, y, sizeof(out), s1));
    CK(cuStreamSynchronize(s1));
    for (int i = 0; i < 16; i++)
        TRUE(out[i] == (i < 4 ? in[i] : i == 8 || i == 9 || i == 12 || i == 13 ? 9u : 7u));
    CK(cuCtxSetCurrent(c1));
    CK(cuMemFree(y));
    CK(cuCtxSetCurrent(c0));
    CK(cuStreamDestroy(s1));
    CK(cuEventDestroy(ev));
}

/*
 * A pool of device 0 that device 1 reads (cuMemPoolSetAccess): none
 * until it is given, its own device refused anything but read-write,
 * then device 1's kernel adds two of the pool's blocks into x, against
 * the CPU's sums; access taken back after.  With c0 current.
 */
static void pool_of_peer(CUcontext c0, CUcontext c1, CUdeviceptr x, CUstream s)
{
    static float ha[N], hb[N], got[N];
    CUmemPoolProps pp;
    CUmemoryPool pool;
    CUmemAccessDesc ad;
    CUmemLocation loc;
    CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUdeviceptr pa, pb;
    CUmodule mod;
    CUfunction vadd;
    int n = (int)N;
    void *args[] = { &pa, &pb, &x, &n };
    void *fatbin;
    size_t flen;

    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 0;
    CK(cuMemPoolCreate(&pool, &pp));
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = 1;
    CK(cuMemPoolGetAccess(&fl, pool, &loc));
    TRUE(fl == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    ad.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    ad.location.id = 0;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPoolSetAccess(pool, &ad, 1));
    ad.location.id = 1;
    ad.flags = (CUmemAccess_flags)2;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemPoolSetAccess(pool, &ad, 1));
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemPoolSetAccess(pool, &ad, 1));
    CK(cuMemPoolGetAccess(&fl, pool, &loc));
    TRUE(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

    CK(cuMemAllocFromPoolAsync(&pa, N * 4, pool, s));
    CK(cuMemAllocFromPoolAsync(&pb, N * 4, pool, s));
    for (uint32_t i = 0; i < N; i++) {
        ha[i] = (float)i * 0.5f;
        hb[i] = 3.0f - (float)(i % 7);
    }
    CK(cuMemcpyHtoDAsync(pa, ha, sizeof(ha), s));
    CK(cuMemcpyHtoDAsync(pb, hb, sizeof(hb), s));
    CK(cuStreamSynchronize(s));

    CK(cuCtxSetCurrent(c1));
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", &flen);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&vadd, mod, "vcu_drv_vadd"));
    CK(cuMemsetD32(x, 0, N));
    CK(cuLaunchKernel(vadd, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(got, x, sizeof(got)));
    for (uint32_t i = 0; i < N; i++)
        TRUE(got[i] == ha[i] + hb[i]);
    CK(cuModuleUnload(mod));
    free(fatbin);

    CK(cuCtxSetCurrent(c0));
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CK(cuMemPoolSetAccess(pool, &ad, 1));
    CK(cuMemPoolGetAccess(&fl, pool, &loc));
    TRUE(fl == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CK(cuMemFreeAsync(pa, s));
    CK(cuMemFreeAsync(pb, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(pool));
}

int main(void)
{
    CUdevice dev, dev1;
    CUcontext c0, c0b, c1;
    CUdeviceptr a, b, f, x;
    CUstream s;
    int n = 0, can = 0;
    peer_async_fn pt;

    CK(cuInit(0));
    CK(cuDeviceGetCount(&n));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&c0, dev));
    CK(cuCtxSetCurrent(c0));
    CK(cuMemAlloc(&a, N * 4));
    CK(cuMemAlloc(&b, N * 4));
    CK(cuMemAlloc(&f, 64));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    /* A second context of the device: its memory and the primary's are
     * the device's. */
    CK(cuCtxCreate(&c0b, NULL, 0, dev));
    CK(cuCtxSetCurrent(c0));
    peer_1d(c0b, c0, b, a, s, 1);
    peer_1d(c0, c0b, a, b, s, 2);
    peer_1d(c0, c0, b, a, s, 3);
    peer_3d(c0b, c0, b, a, s, 0);
    peer_3d(c0, c0b, b, a, s, 1);
    /* The per-thread form of the async copy. */
    pt = (peer_async_fn)proc("cuMemcpyPeerAsync", 13000,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    CK(cuMemsetD32(b, 0, N));
    CK(pt(b, c0b, a, c0, N * 4, NULL));
    CK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    {
        static uint32_t h[N];

        CK(cuMemcpyDtoH(h, a, sizeof(h)));
        check_words(b, h);
    }
    CK(cuMemcpyPeer(b, c0b, a, c0, 0));

    /* A device is not its own peer (NVIDIA's driver 580 on two H200:
     * CUDA_ERROR_PEER_ACCESS_UNSUPPORTED). */
    EXPECT(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cuCtxEnablePeerAccess(c0b, 0));
    EXPECT(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cuCtxDisablePeerAccess(c0b));

    memops(s, f);

    if (n >= 2) {
        /* Two devices: copies between them with and without peer access. */
        CK(cuDeviceGet(&dev1, 1));
        CK(cuDeviceCanAccessPeer(&can, dev, dev1));
        CK(cuDevicePrimaryCtxRetain(&c1, dev1));
        CK(cuCtxSetCurrent(c1));
        CK(cuMemAlloc(&x, N * 4));
        CK(cuCtxSetCurrent(c0));
        peer_1d(c1, c0, x, a, s, 4);
        peer_1d(c0, c1, b, x, s, 5);
        peer_3d(c1, c0, x, a, s, 1);
        pointer_of_peer(a, x, c1);
        wait_on_peer(c0, c1, s);
        if (can) {
            pool_of_peer(c0, c1, x, s);
            CK(cuCtxEnablePeerAccess(c1, 0));
            EXPECT(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cuCtxEnablePeerAccess(c1, 0));
            peer_1d(c1, c0, x, a, s, 6);
            peer_3d(c1, c0, x, a, s, 0);
            CK(cuCtxDisablePeerAccess(c1));
            EXPECT(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cuCtxDisablePeerAccess(c1));
        }
        CK(cuCtxSetCurrent(c1));
        CK(cuMemFree(x));
        CK(cuCtxSetCurrent(c0));
        CK(cuDevicePrimaryCtxRelease(dev1));
        printf("two devices: copied between them (peer access %s)\n", can ? "too" : "not offered");
    }

    CK(cuStreamDestroy(s));
    CK(cuMemFree(f));
    CK(cuMemFree(b));
    CK(cuMemFree(a));
    CK(cuCtxDestroy(c0b));
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("PASS drv_peer\n");
    return 0;
}
