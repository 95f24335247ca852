/*
 * Failure paths: bad and destroyed handles, NULL and out-of-range
 * arguments, a bad image, error names and strings for every code, and an
 * unsupported entry point (CUDA_ERROR_NOT_SUPPORTED, its name logged once
 * on stderr).
 */
#include <fcntl.h>

#include "vcu_drv_test.h"

/* Lines of path that are exactly line. */
static int count_lines(const char *path, const char *line)
{
    char buf[512];
    FILE *f = fopen(path, "r");
    int n = 0;

    TRUE(f != NULL);
    while (fgets(buf, sizeof(buf), f) != NULL) {
        buf[strcspn(buf, "\n")] = '\0';
        n += strcmp(buf, line) == 0;
    }
    fclose(f);
    return n;
}

int main(void)
{
    static char garbage[64];
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream s;
    CUevent ev;
    CUdeviceptr p;
    CUarray plane;
    const char *str;
    char name[8], tmpl[] = "/tmp/vcu-drv-errors-XXXXXX";
    int fd, saved, v;
    size_t sz;
    float ms;
    void *fatbin;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuCtxCreate(&ctx, NULL, 0, dev));

    /* NULL and out-of-range arguments. */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetCount(NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetName(NULL, 8, dev));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetName(name, 0, dev));
    CK(cuDeviceGetName(name, sizeof(name), dev));        /* truncated, terminated */
    TRUE(strlen(name) == sizeof(name) - 1);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(&v, (CUdevice_attribute)0, dev));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, dev));
    EXPECT(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 99));
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
    TRUE(v == 32);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceTotalMem(NULL, dev));
    CK(cuDeviceTotalMem(&sz, dev));
    TRUE(sz > 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetPCIBusId(name, 0, dev));
    {
        /* cuDeviceGetByPCIBusId: the id cuDeviceGetPCIBusId gives, in each
         * form cuda.h lists, any case, NVML's eight-digit domain. */
        char id[32], alt[48];
        unsigned int dom, bus, dv, fn;
        CUdevice got = -1;

        CK(cuDeviceGetPCIBusId(id, sizeof(id), dev));
        TRUE(sscanf(id, "%x:%x:%x.%x", &dom, &bus, &dv, &fn) == 4);
        CK(cuDeviceGetByPCIBusId(&got, id));
        TRUE(got == dev);
        snprintf(alt, sizeof(alt), "%08X:%02X:%02X.%X", dom, bus, dv, fn);
        got = -1;
        CK(cuDeviceGetByPCIBusId(&got, alt));
        TRUE(got == dev);
        snprintf(alt, sizeof(alt), "%04x:%02x:%02x", dom, bus, dv);
        got = -1;
        CK(cuDeviceGetByPCIBusId(&got, alt));
        TRUE(got == dev);
        if (dom == 0) {
            snprintf(alt, sizeof(alt), "%02x:%02x.%x", bus, dv, fn);
            got = -1;
            CK(cuDeviceGetByPCIBusId(&got, alt));
            TRUE(got == dev);
        }
        snprintf(alt, sizeof(alt), "%04x:%02x:%02x.0", dom, (bus + 1) & 0xff, dv);
        TRUE(cuDeviceGetByPCIBusId(&got, alt) != CUDA_SUCCESS);
        TRUE(cuDeviceGetByPCIBusId(&got, "not a bus id") != CUDA_SUCCESS);
        TRUE(cuDeviceGetByPCIBusId(&got, "") != CUDA_SUCCESS);
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetByPCIBusId(NULL, id));
        EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceGetByPCIBusId(&got, NULL));
    }
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(NULL, 16));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&p, 0));
    CK(cuMemAlloc(&p, 64));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(p, NULL, 16));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(NULL, p, 16));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(p + 1, 0, 4));  /* misaligned */
    CK(cuMemcpyHtoD(p, garbage, 0));                          /* nothing to do */
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(&s, 0x100));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuEventCreate(&ev, 0x100));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuEventCreate(&ev, CU_EVENT_INTERPROCESS));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuModuleLoadData(&mod, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuModuleLoadData(NULL, garbage));

    /* Garbage and destroyed handles fail before anything is dereferenced. */
    memset(garbage, 0x5a, sizeof(garbage) - 1);
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuModuleGetFunction(&fn, (CUmodule)garbage, "k"));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuModuleUnload((CUmodule)garbage));
    EXPECT(CUDA_ERROR_INVALID_HANDLE,
           cuLaunchKernel((CUfunction)garbage, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamSynchronize((CUstream)garbage));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamDestroy((CUstream)garbage));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuMemcpyHtoDAsync(p, garbage, 4, (CUstream)garbage));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuEventRecord((CUevent)garbage, NULL));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuEventDestroy((CUevent)garbage));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent((CUcontext)garbage));
    EXPECT(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy((CUcontext)garbage));
    CK(cuStreamCreate(&s, 0));
    CK(cuStreamDestroy(s));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuStreamQuery(s));
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(ev, NULL));
    CK(cuEventSynchronize(ev));
    /* Timing disabled: no elapsed time (the host's answer, as NVIDIA's). */
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, ev, ev));
    CK(cuEventDestroy(ev));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, ev, ev));
    CK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
    CK(cuEventRecord(ev, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuEventElapsedTime(NULL, ev, ev));
    CK(cuEventDestroy(ev));
    /* A stream made in another context of the device serves this one
     * too, as NVIDIA's does (measured). */
    {
        CUcontext other;

        CK(cuCtxCreate(&other, NULL, 0, dev));
        CK(cuStreamCreate(&s, 0));
        CK(cuCtxPopCurrent(NULL));
        CK(cuStreamSynchronize(s));
        CK(cuMemsetD8Async(p, 0, 64, s));
        CK(cuStreamDestroy(s));
        CK(cuCtxDestroy(other));
    }

    /* Bad images (an ELF header that is not a cubin's, a truncated cubin
     * file); a kernel without parameters; bad launches. */
    {
        static unsigned char bad_elf[256] = { 0x7f, 'E', 'L', 'F' };
        char path[] = "/tmp/vcu-drv-cubin-XXXXXX";
        size_t clen;
        void *cubin = vcu_drv_read_beside("vcu_drv_kernels.cubin", &clen);
        int cfd = mkstemp(path);

        EXPECT(CUDA_ERROR_INVALID_IMAGE, cuModuleLoadData(&mod, bad_elf));
        TRUE(cfd >= 0 && write(cfd, cubin, clen / 2) == (ssize_t)(clen / 2));
        close(cfd);
        EXPECT(CUDA_ERROR_INVALID_IMAGE, cuModuleLoad(&mod, path));
        unlink(path);
        free(cubin);
    }
    fatbin = vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL);
    CK(cuModuleLoadData(&mod, fatbin));
    CK(cuModuleGetFunction(&fn, mod, "vcu_drv_vadd"));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(fn, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    {
        int n = 1;
        void *args[] = { &p, &p, &p, &n };
        void *extra[] = { CU_LAUNCH_PARAM_END };

        void *extra_buf[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_END };

        /* An extra of CU_LAUNCH_PARAM_END alone says nothing: NVIDIA's
         * driver takes kernelParams then (measured); with neither it
         * refuses, and so with both given for real. */
        CK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, extra));
        CK(cuCtxSynchronize());
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, extra_buf));
    }
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuModuleGetGlobal(NULL, NULL, mod, "vcu_drv_flag"));
    EXPECT(CUDA_ERROR_NOT_FOUND, cuModuleGetGlobal(&p, &sz, mod, "no_such_global"));
    CK(cuModuleUnload(mod));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuModuleGetFunction(&fn, mod, "vcu_drv_vadd"));
    EXPECT(CUDA_ERROR_INVALID_HANDLE,
           cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    free(fatbin);

    /* Every code has a name and a message; unknown codes have neither. */
    CK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &str));
    TRUE(strcmp(str, "CUDA_ERROR_INVALID_VALUE") == 0);
    CK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &str));
    TRUE(strcmp(str, "invalid argument") == 0);
    CK(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &str));
    TRUE(strcmp(str, "CUDA_ERROR_NOT_SUPPORTED") == 0);
    CK(cuGetErrorName(CUDA_ERROR_UNKNOWN, &str));
    TRUE(strcmp(str, "CUDA_ERROR_UNKNOWN") == 0);
    for (int e = 0; e <= 1000; e++) {
        const char *n1 = NULL, *n2 = NULL;
        CUresult r1 = cuGetErrorName((CUresult)e, &n1);
        CUresult r2 = cuGetErrorString((CUresult)e, &n2);

        TRUE(r1 == r2);
        TRUE(r1 == CUDA_SUCCESS ? n1 != NULL && n2 != NULL && strncmp(n1, "CUDA_", 5) == 0 &&
                                      n2[0] != '\0'
                                : r1 == CUDA_ERROR_INVALID_VALUE && n1 == NULL && n2 == NULL);
    }
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetErrorName((CUresult)12345, &str));
    TRUE(str == NULL);
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuGetErrorString(CUDA_SUCCESS, NULL));

    /* Unsupported: CUDA_ERROR_NOT_SUPPORTED each time, the name logged
     * once (stderr goes to a file for this). */
    fflush(stderr);
    fd = mkstemp(tmpl);
    TRUE(fd >= 0);
    saved = dup(2);
    TRUE(saved >= 0 && dup2(fd, 2) == 2);
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuArrayGetPlane(&plane, NULL, 0));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuArrayGetPlane(&plane, NULL, 0));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuArrayGetPlane(&plane, NULL, 0));
    EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuDestroyExternalMemory(NULL));
    fflush(stderr);
    TRUE(dup2(saved, 2) == 2);
    close(saved);
    close(fd);
    TRUE(count_lines(tmpl, "libcuda (virtio-cuda): cuArrayGetPlane is not supported") == 1);
    TRUE(count_lines(tmpl, "libcuda (virtio-cuda): cuDestroyExternalMemory is not supported") == 1);
    unlink(tmpl);

    CK(cuCtxDestroy(ctx));
    printf("PASS drv_errors\n");
    return 0;
}
