/*
 * JIT linking: cuLinkCreate with logs and plain options, cuLinkAddFile of
 * the kernels' PTX, cuLinkComplete, the image loaded and its kernel run;
 * the refusals (an option that is not a plain value, an empty input, a
 * missing file, a link with nothing in it) and a link that fails with its
 * error log filled (the same PTX twice: its symbols defined twice).
 */
#include "vcu_drv_test.h"

#define N 1024

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr p;
    CUlinkState ls;
    unsigned int host[N];
    unsigned long long v = 7;
    unsigned int step = 3;
    char pad = 0, errlog[512], infolog[512];
    int n = N;
    void *args[] = { &p, &pad, &v, &step, &n };
    void *image = NULL;
    size_t size = 0;
    const char *ptx = vcu_drv_beside("vcu_drv_kernels.ptx");
    char ptxpath[4096];

    snprintf(ptxpath, sizeof(ptxpath), "%s", ptx);
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&p, sizeof(host)));

    {
        CUjit_option o[6] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                              CU_JIT_LOG_VERBOSE, CU_JIT_OPTIMIZATION_LEVEL };
        void *ov[6] = { errlog, (void *)(uintptr_t)sizeof(errlog), infolog,
                        (void *)(uintptr_t)sizeof(infolog), (void *)(uintptr_t)1,
                        (void *)(uintptr_t)3 };

        CK(cuLinkCreate(6, o, ov, &ls));
    }
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLinkComplete(ls, &image, &size));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLinkAddData(ls, CU_JIT_INPUT_PTX, ptxpath, 0, "x", 0,
                                                   NULL, NULL));
    EXPECT(CUDA_ERROR_FILE_NOT_FOUND,
           cuLinkAddFile(ls, CU_JIT_INPUT_PTX, "/nonexistent/kernels.ptx", 0, NULL, NULL));
    CK(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, ptxpath, 0, NULL, NULL));
    CK(cuLinkComplete(ls, &image, &size));
    TRUE(image != NULL && size > 0);
    CK(cuModuleLoadData(&mod, image));
    CK(cuLinkDestroy(ls));          /* the image goes; the module stays */
    CK(cuModuleGetFunction(&fill, mod, "vcu_drv_fill"));
    CK(cuLaunchKernel(fill, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(host, p, sizeof(host)));
    for (int i = 0; i < N; i++)
        TRUE(host[i] == 7u + 3u * (unsigned int)i);
    CK(cuModuleUnload(mod));

    /* An option that is not a plain value: refused, no state. */
    {
        CUjit_option o[1] = { CU_JIT_THREADS_PER_BLOCK };
        void *ov[1] = { (void *)(uintptr_t)128 };

        ls = NULL;
        EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuLinkCreate(1, o, ov, &ls));
        TRUE(ls == NULL);
    }
    /* The same PTX twice: the link fails and says why in the error log. */
    {
        CUjit_option o[2] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
        void *ov[2] = { errlog, (void *)(uintptr_t)sizeof(errlog) };
        CUresult r;

        CK(cuLinkCreate(2, o, ov, &ls));
        CK(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, ptxpath, 0, NULL, NULL));
        CK(cuLinkAddFile(ls, CU_JIT_INPUT_PTX, ptxpath, 0, NULL, NULL));
        image = NULL;
        r = cuLinkComplete(ls, &image, &size);
        TRUE(r != CUDA_SUCCESS && image == NULL && errlog[0] != '\0');
        printf("info: two copies: %d, \"%.80s\"\n", (int)r, errlog);
        CK(cuLinkDestroy(ls));
    }
    CK(cuMemFree(p));
    printf("PASS drv_link\n");
    return 0;
}
