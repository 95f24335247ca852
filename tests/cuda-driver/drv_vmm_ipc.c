/*
 * Shareable handles between two processes, as cuda-samples' memMapIPCDrv
 * and NCCL's cuMem paths use them: this program makes an allocation to be
 * exported as a POSIX file descriptor, maps and fills it, exports it,
 * releases its handle (the mapping keeps the memory), and runs itself
 * again as a second process, to which it passes the descriptor over a
 * unix socket (SCM_RIGHTS), and closes its own.  The second process
 * imports it, maps it, finds the first one's words, writes its own and
 * says so; the first finds them through its mapping.
 * The export and the release run with no context current, as
 * memMapIPCDrv's do.  Along the way: an allocation made without the
 * handle type has no descriptor; other handle types are not supported; a descriptor of
 * something else, or naming no allocation of the VM's, imports nothing.
 *
 *   drv_vmm_ipc              the exporter (what run.sh starts)
 *   drv_vmm_ipc import FD    the importer (FD: its end of the socket)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "vcu_drv_proc.h"

#define FIRST 0x1234abcdu
#define SECOND 0x5678ef01u

static CUmemAllocationProp prop_of(int exportable)
{
    CUmemAllocationProp p;

    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                        : CU_MEM_HANDLE_TYPE_NONE;
    return p;
}

/* h reserved, mapped and made read-write on device 0: its address. */
static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size)
{
    CUmemAccessDesc a;
    CUdeviceptr va = 0;

    memset(&a, 0, sizeof(a));
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CK(cuMemMap(va, size, 0, h, 0));
    CK(cuMemSetAccess(va, size, &a, 1));
    return va;
}

static void unmap(CUdeviceptr va, size_t size)
{
    CK(cuMemUnmap(va, size));
    CK(cuMemAddressFree(va, size));
}

static int importer(int sock)
{
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp got;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr va;
    size_t size = 0;
    int fd, f, p[2];
    char one = 1;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    fd = vcu_drv_recv_fd(sock, &size, sizeof(size));
    TRUE(fd >= 0);

    /* Not such a descriptor, forged, the wrong type, no result. */
    TRUE(pipe(p) == 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)p[0],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    f = vcu_drv_forged(fd, 20);
    if (f >= 0) {
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)f,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(f);
    }
    TRUE(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_FABRIC) !=
         CUDA_SUCCESS);
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemImportFromShareableHandle(NULL, (void *)(uintptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));

    CK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    TRUE(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0);
    va = map_rw(h, size);
    CK(cuMemRelease(h));                /* the mapping keeps it */
    vcu_drv_expect_words(va, size, FIRST);
    CK(cuMemsetD32(va, SECOND, size / 4));
    CK(cuCtxSynchronize());
    TRUE(write(sock, &one, 1) == 1);
    unmap(va, size);
    return 0;
}

int main(int argc, char **argv)
{
    CUmemGenericAllocationHandle h, h0;
    CUmemAllocationProp prop = prop_of(1), plain = prop_of(0);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr va;
    size_t size = 0;
    char sockarg[16], got;
    int sv[2], st, v = 0, fd = -1, fd2 = -1;
    pid_t pid;

    if (argc == 3 && strcmp(argv[1], "import") == 0)
        return importer(atoi(argv[2]));
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            dev));
    CK(cuMemGetAllocationGranularity(&size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size *= 2;
    CK(cuMemCreate(&h, size, &prop, 0));
    if (vcu_drv_loopback()) {
        /* No host daemon to keep descriptors: not offered, and said so. */
        TRUE(v == 0);
        EXPECT(CUDA_ERROR_NOT_SUPPORTED,
               cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CK(cuMemRelease(h));
        printf("loopback: shareable handles not offered\nPASS drv_vmm_ipc\n");
        return 0;
    }
    TRUE(v == 1);
    va = map_rw(h, size);
    CK(cuMemsetD32(va, FIRST, size / 4));
    CK(cuCtxSynchronize());

    /* Made without the handle type: no descriptor.  Other types: not
     * offered. */
    CK(cuMemCreate(&h0, size, &plain, 0));
    TRUE(cuMemExportToShareableHandle(&fd, h0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
         CUDA_SUCCESS);
    CK(cuMemRelease(h0));
    TRUE(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0) != CUDA_SUCCESS);
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemExportToShareableHandle(NULL, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1));
    TRUE(fd == -1);

    /* Exported twice: two descriptors of the one allocation; with no
     * context current, as memMapIPCDrv exports and releases (the virtual
     * memory calls need none). */
    CK(cuCtxSetCurrent(NULL));
    CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CK(cuMemExportToShareableHandle(&fd2, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    TRUE(fd >= 0 && fd2 >= 0 && fd != fd2);
    close(fd2);
    /* Released while mapped and exported: the memory stays. */
    CK(cuMemRelease(h));
    CK(cuCtxSetCurrent(ctx));

    TRUE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    snprintf(sockarg, sizeof(sockarg), "%d", sv[1]);
    {
        char *args[] = { (char *)"import", sockarg, NULL };

        pid = vcu_drv_run_self(args);
    }
    close(sv[1]);
    vcu_drv_send_fd(sv[0], fd, &size, sizeof(size));
    close(fd);
    if (read(sv[0], &got, 1) != 1) {
        TRUE(waitpid(pid, &st, 0) == pid);
        printf("FAIL the importing process ended with status 0x%x before writing\n", st);
        return 1;
    }
    vcu_drv_expect_words(va, size, SECOND);
    TRUE(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL the importing process ended with status 0x%x\n", st);
        return 1;
    }
    unmap(va, size);
    printf("PASS drv_vmm_ipc\n");
    return 0;
}
