/*
 * On the GPU machine, natively: where NVIDIA's driver puts a module's
 * managed globals (__managed__), and what it answers about each: its
 * address and size, IS_MANAGED, and the allocation cuMemGetAddressRange
 * finds for it.  The guest gives managed globals a host view of the pages
 * holding them (guest-lib/vcu_managed.c, vcu__m_adopt): this says how they
 * share pages.  Driver 580.159.04, H200: each global is an allocation of
 * its own, 512 bytes apart, the first at the start of a page.
 *
 *   build/probes/probe-managed-globals build/probes/probe-managed-globals.fatbin
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    static const char *const names[] = { "xxx", "yyy", "zzz" };
    static char image[1 << 20];
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUresult r;
    FILE *f;

    if (argc != 2 || (f = fopen(argv[1], "rb")) == NULL) {
        fprintf(stderr, "usage: %s FATBIN\n", argv[0]);
        return 2;
    }
    if (fread(image, 1, sizeof(image), f) == 0)
        return 2;
    fclose(f);
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    r = cuModuleLoadData(&mod, image);
    printf("cuModuleLoadData: %d\n", r);
    for (int i = 0; i < 3; i++) {
        CUdeviceptr p = 0, base = 0;
        size_t size = 0, bsize = 0;
        unsigned int managed = 0;
        CUresult rg = cuModuleGetGlobal(&p, &size, mod, names[i]);
        CUresult rm = cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
        CUresult rr = cuMemGetAddressRange(&base, &bsize, p);

        printf("%s: cuModuleGetGlobal %d: 0x%llx, %zu bytes; IS_MANAGED %d: %u; "
               "cuMemGetAddressRange %d: 0x%llx, %zu bytes; offset in its page %llu\n",
               names[i], rg, (unsigned long long)p, size, rm, managed, rr,
               (unsigned long long)base, bsize, (unsigned long long)(base & 4095));
    }
    return 0;
}
