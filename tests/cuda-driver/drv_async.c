/*
 * Stream-ordered calls that go without waiting for the host (launches,
 * event records, stream waits, copies and memsets of known ranges): what
 * CUDA refuses at the call is still refused at the call (block and grid
 * limits, the kernel's thread and shared memory limits, also after
 * cuFuncSetAttribute raises one; device ranges outside an allocation or
 * freed), a copy from pageable memory still reads its source before it
 * returns, the work runs in order, and what fails on the GPU shows at
 * the next call that waits, as CUDA reports it.
 */
#include "vcu_drv_test.h"

#define N 4096
#define LAUNCHES 2000
#define BIG (4u << 20)
#define HUGE ((size_t)(150u << 20) + 12345)     /* several pieces and an odd end */

static CUresult fill_launch3(CUfunction fill, CUstream s, unsigned int bx, unsigned int by,
                             unsigned int gx, unsigned int gz, unsigned int shmem, CUdeviceptr p,
                             unsigned long long v, int n)
{
    char pad = 0;
    unsigned int step = 1;
    void *args[] = { &p, &pad, &v, &step, &n };

    return cuLaunchKernel(fill, gx, 1, gz, bx, by, 1, shmem, s, args, NULL);
}

static CUresult fill_launch(CUfunction fill, CUstream s, unsigned int bx, unsigned int by,
                            unsigned int gx, unsigned int shmem, CUdeviceptr p, unsigned long long v,
                            int n)
{
    return fill_launch3(fill, s, bx, by, gx, 1, shmem, p, v, n);
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr p, big, gone, huge;
    unsigned char *hp, *hq;
    CUstream s1, s2;
    unsigned int *pin, *pin2;
    char *page;
    CUevent ev;
    unsigned int host[N];
    int maxthr = 0, maxdyn = 0, optin = 0;
    void *fatbin;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    CK(cuMemAlloc(&p, N * sizeof(unsigned int)));
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuFuncGetAttribute(&maxthr, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fill));
    CK(cuFuncGetAttribute(&maxdyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fill));
    CK(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    TRUE(maxthr > 0 && maxdyn >= 0 && optin > maxdyn + 1024);

    /* A limit raised is a limit the next launch may use, and one lowered
     * again refuses it again (the first launch learns the raised one). */
    CK(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, maxdyn + 1024));
    CK(fill_launch(fill, s1, 64, 1, 1, (unsigned int)maxdyn + 1024, p, 0, N));
    CK(cuFuncSetAttribute(fill, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, maxdyn));
    TRUE(fill_launch(fill, s1, 64, 1, 1, (unsigned int)maxdyn + 1024, p, 0, N) != CUDA_SUCCESS);
    CK(cuStreamSynchronize(s1));

    /* Refused at the call, asynchronous or not. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, fill_launch(fill, s1, 2048, 1, 1, 0, p, 0, N));
    TRUE(fill_launch(fill, s1, 1024, 2, 1, 0, p, 0, N) != CUDA_SUCCESS);
    TRUE(fill_launch(fill, s1, 64, 1, 1, (unsigned int)maxdyn + 1024, p, 0, N) != CUDA_SUCCESS);
    TRUE(fill_launch3(fill, s1, 64, 1, 1, 65536, 0, p, 0, N) != CUDA_SUCCESS);
    /* Nothing of those ran or is reported later. */
    CK(cuStreamSynchronize(s1));

    /* Many launches in a row run in order: the last value stays.  An
     * event recorded after them orders a second stream's work. */
    for (int i = 0; i < LAUNCHES; i++)
        CK(fill_launch(fill, s1, 256, 1, N / 256, 0, p, (unsigned long long)i * 10, N));
    CK(cuEventRecord(ev, s1));
    CK(cuStreamWaitEvent(s2, ev, 0));
    CK(fill_launch(fill, s2, 256, 1, N / 256, 0, p, 5, N / 2));
    CK(cuStreamSynchronize(s2));
    CK(cuEventQuery(ev));
    CK(cuMemcpyDtoH(host, p, sizeof(host)));
    for (int i = 0; i < N; i++) {
        unsigned int want = i < N / 2 ? 5u + (unsigned int)i
                                      : (unsigned int)(LAUNCHES - 1) * 10u + (unsigned int)i;

        if (host[i] != want) {
            printf("FAIL element %d = %u, want %u\n", i, host[i], want);
            return 1;
        }
    }

    /* Stream-ordered copies and memsets: from page-locked memory they may
     * go without waiting, and arrive in order. */
    CK(cuMemAllocHost((void **)&pin, BIG));
    CK(cuMemAllocHost((void **)&pin2, BIG));
    CK(cuMemAlloc(&big, BIG));
    for (size_t i = 0; i < BIG / 4; i++)
        pin[i] = (unsigned int)i * 3u;
    CK(cuMemsetD32Async(big, 0xdeadbeef, BIG / 4, s1));
    CK(cuMemcpyHtoDAsync(big, pin, BIG / 2, s1));
    CK(cuMemcpyDtoDAsync(big + BIG / 2, big, BIG / 4, s1));
    CK(cuMemcpyDtoHAsync(pin2, big, BIG, s1));
    CK(cuStreamSynchronize(s1));
    for (size_t i = 0; i < BIG / 4; i++) {
        unsigned int want = i < BIG / 8 ? (unsigned int)i * 3u
                            : i < 3 * BIG / 16 ? (unsigned int)(i - BIG / 8) * 3u
                                               : 0xdeadbeefu;

        if (pin2[i] != want) {
            printf("FAIL word %zu = %#x, want %#x\n", i, pin2[i], want);
            return 1;
        }
    }
    /* 16-bit memsets, stream-ordered and not (XLA fills half-precision
     * buffers this way), over words 0..3 = 0, 3, 6, 9. */
    CK(cuMemsetD16Async(big + 2, 0xbeef, 3, s1));
    CK(cuStreamSynchronize(s1));
    CK(cuMemsetD16_v2(big + 8, 0x1234, 1));
    CK(cuMemcpyDtoH(pin2, big, 16));
    if (pin2[0] != 0xbeef0000u || pin2[1] != 0xbeefbeefu || pin2[2] != 0x1234u ||
        pin2[3] != 9u) {
        printf("FAIL 16-bit memset: %#x %#x %#x %#x\n", pin2[0], pin2[1], pin2[2], pin2[3]);
        return 1;
    }
    /* From pageable memory a stream-ordered copy is synchronous, as in
     * CUDA: the source may change once it returns. */
    page = malloc(BIG);
    TRUE(page != NULL);
    memset(page, 0x11, BIG);
    CK(cuMemcpyHtoDAsync(big, page, BIG, s1));
    memset(page, 0x22, BIG);
    CK(cuMemcpyDtoH(pin2, big, BIG));
    for (size_t i = 0; i < BIG / 4; i++)
        if (pin2[i] != 0x11111111u) {
            printf("FAIL pageable source read after the call: word %zu = %#x\n", i, pin2[i]);
            return 1;
        }
    /* A large copy from and to pageable memory, sent in pieces of which
     * only some wait: every byte where it belongs, and in place once the
     * synchronous copy returns. */
    CK(cuMemAlloc(&huge, HUGE));
    hp = malloc(HUGE);
    hq = malloc(HUGE);
    TRUE(hp != NULL && hq != NULL);
    for (size_t i = 0; i < HUGE; i += 4099)     /* a byte per page-ish run, cheap under TCG */
        memset(hp + i, (int)(i / 4099 * 7 + 1), HUGE - i < 4099 ? HUGE - i : 4099);
    CK(cuMemcpyHtoD(huge, hp, HUGE));
    memset(hq, 0, HUGE);
    CK(cuMemcpyDtoH(hq, huge, HUGE));
    TRUE(memcmp(hp, hq, HUGE) == 0);
    memset(hq, 0, HUGE);
    CK(cuMemcpyHtoDAsync(huge, hq, HUGE, s1));
    CK(cuMemcpyDtoHAsync(hp, huge, HUGE, s1));
    for (size_t i = 0; i < HUGE; i += 4093)
        TRUE(hp[i] == 0);
    free(hp);
    free(hq);
    CK(cuMemFree(huge));

    /* Ranges not known good are refused at the call: past an allocation's
     * end, not device memory, memory freed already. */
    TRUE(cuMemcpyHtoDAsync(big + BIG - 8, pin, 64, s1) != CUDA_SUCCESS);
    TRUE(cuMemcpyDtoHAsync(pin2, (CUdeviceptr)0x1000, 64, s1) != CUDA_SUCCESS);
    CK(cuMemAlloc(&gone, 4096));
    CK(cuMemFree(gone));
    TRUE(cuMemsetD8Async(gone, 1, 4096, s1) != CUDA_SUCCESS);
    TRUE(cuMemcpyDtoDAsync(big, gone, 64, s1) != CUDA_SUCCESS);
    CK(cuStreamSynchronize(s1));
    free(page);
    CK(cuMemFreeHost(pin));
    CK(cuMemFreeHost(pin2));
    CK(cuMemFree(big));

    /* What fails on the GPU shows at the next call that waits. */
    CK(fill_launch(fill, s1, 32, 1, 1, 0, (CUdeviceptr)16, 0, 32));
    EXPECT(CUDA_ERROR_ILLEGAL_ADDRESS, cuStreamSynchronize(s1));
    printf("PASS drv_async\n");
    return 0;
}
