/* Device and version queries, and an invalid device number. */
#define TEST_NAME "device_query"
#include <glob.h>
#include <string.h>
#include "vcu_test.h"

__global__ void dq_noop(int *p)
{
    p[threadIdx.x] = (int)threadIdx.x;
}

/*
 * In a guest, device 0's PCI bus id is the virtio-cuda function's address:
 * the PCI device whose virtio child holds the vcuda0 class device.  (No
 * such path natively or in the loopback build: nothing to compare.)
 */
static void pci_bus_id_is_the_device(void)
{
    const char *pat = "/sys/bus/pci/devices/*/virtio*/vcuda/vcuda0";
    char bus[32], want[32];
    const char *a;
    glob_t g;

    if (glob(pat, 0, NULL, &g) != 0)
        return;
    a = g.gl_pathv[0] + strlen("/sys/bus/pci/devices/");
    snprintf(want, sizeof(want), "%.*s", (int)strcspn(a, "/"), a);
    globfree(&g);
    CK(cudaDeviceGetPCIBusId(bus, sizeof(bus), 0));
    EXPECT(strcasecmp(bus, want) == 0, "PCI bus id %s, the device is at %s", bus, want);
    printf("info: PCI bus id %s, the virtio-cuda device's\n", bus);
}

static void attr_eq(cudaDeviceAttr a, const char *name, int want)
{
    int v = -1;

    CK(cudaDeviceGetAttribute(&v, a, 0));
    EXPECT(v == want, "%s: attribute %d, properties %d", name, v, want);
}

int main(void)
{
    int count = 0, dev = -1, drv = 0, rt = 0, h[32];
    size_t free_b = 0, total_b = 0;
    cudaDeviceProp p;
    int *d;

    CK(cudaGetDeviceCount(&count));
    EXPECT(count >= 1, "cudaGetDeviceCount = %d", count);
    printf("device count >= 1\n");
    printf("info: %d devices\n", count);
    CK(cudaGetDevice(&dev));
    EXPECT(dev == 0, "cudaGetDevice = %d", dev);

    CK(cudaGetDeviceProperties(&p, 0));
    printf("info: device 0: %s, sm_%d%d, %d SMs, %zu bytes\n", p.name, p.major,
           p.minor, p.multiProcessorCount, p.totalGlobalMem);
    EXPECT(p.major >= 7, "compute capability %d.%d", p.major, p.minor);
    EXPECT(p.name[0] != '\0', "empty device name");
    EXPECT(p.totalGlobalMem > 0 && p.multiProcessorCount > 0, "empty props");
    EXPECT(p.warpSize == 32, "warpSize %d", p.warpSize);
    EXPECT(p.maxThreadsPerBlock >= 1024, "maxThreadsPerBlock %d",
           p.maxThreadsPerBlock);
    attr_eq(cudaDevAttrComputeCapabilityMajor, "major", p.major);
    attr_eq(cudaDevAttrComputeCapabilityMinor, "minor", p.minor);
    attr_eq(cudaDevAttrMultiProcessorCount, "SMs", p.multiProcessorCount);
    attr_eq(cudaDevAttrMaxThreadsPerBlock, "max threads", p.maxThreadsPerBlock);
    attr_eq(cudaDevAttrWarpSize, "warp size", p.warpSize);
    attr_eq(cudaDevAttrMaxBlockDimX, "max block x", p.maxThreadsDim[0]);
    attr_eq(cudaDevAttrMaxGridDimX, "max grid x", p.maxGridSize[0]);
    attr_eq(cudaDevAttrMaxSharedMemoryPerBlock, "shared per block",
            (int)p.sharedMemPerBlock);
    attr_eq(cudaDevAttrL2CacheSize, "L2", p.l2CacheSize);
    printf("properties: major >= 7, attributes agree\n");

    pci_bus_id_is_the_device();

    CK(cudaMemGetInfo(&free_b, &total_b));
    EXPECT(total_b > 0 && free_b <= total_b, "cudaMemGetInfo %zu/%zu", free_b,
           total_b);
    printf("info: %zu of %zu bytes free\n", free_b, total_b);
    printf("memory info: free <= total\n");

    CK_EQ(cudaErrorInvalidDevice, cudaSetDevice(count));
    (void)cudaGetLastError();
    CK_EQ(cudaErrorInvalidDevice, cudaGetDeviceProperties(&p, count));
    (void)cudaGetLastError();
    CK(cudaSetDevice(0));
    printf("cudaSetDevice(count): cudaErrorInvalidDevice\n");

    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    EXPECT(drv >= 13000 && rt >= 13000, "versions driver %d runtime %d", drv, rt);
    printf("info: driver %d runtime %d\n", drv, rt);
    printf("versions >= 13000\n");

    CK(cudaMalloc(&d, sizeof(h)));
    dq_noop<<<1, 32>>>(d);
    CK_LAUNCH();
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 32; i++)
        EXPECT(h[i] == i, "kernel result h[%d] = %d", i, h[i]);
    CK(cudaFree(d));
    CK(cudaDeviceReset());
    vcu_test_pass();
    return 0;
}
