/*
 * A memory pool shared between two processes, as cuda-samples'
 * streamOrderedAllocationIPC shares one: this program makes a pool with
 * POSIX descriptors, allocates a block from it in stream order and fills
 * it, exports the pool (a descriptor) and the block (64 bytes of export
 * data), and runs itself again as a second process, to which it passes
 * both over a unix socket.  The second process imports the pool, finds
 * its access as the first left it, imports the block, reads the first
 * one's words, writes its own, frees the block and destroys the pool;
 * the first finds the words in its block.
 * Along the way: a pool made without the handle type has no descriptor
 * and its blocks no export data; an imported pool makes no blocks; a
 * pipe, a forged memfd and export data with one bit changed import
 * nothing.
 *
 *   drv_pool_ipc             the exporter (what run.sh starts)
 *   drv_pool_ipc import FD   the importer (FD: its end of the socket)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "vcu_drv_proc.h"

#define SIZE (4u << 20)
#define FIRST 0x2468ace0u
#define SECOND 0x13579bdfu

/* What the exporter tells the importer besides the descriptor. */
typedef struct {
    CUmemPoolPtrExportData data;
} msg_t;

static CUmemPoolProps pool_props(int share)
{
    CUmemPoolProps p;

    memset(&p, 0, sizeof(p));
    p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.handleTypes = share ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static int importer(int sock)
{
    CUmemPoolPtrExportData bad;
    CUmemAccess_flags flags;
    CUmemLocation loc;
    CUmemoryPool pool;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr p = 0, q = 0;
    msg_t m;
    int fd, f, pp[2];
    char one = 1;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    fd = vcu_drv_recv_fd(sock, &m, sizeof(m));
    TRUE(fd >= 0);

    TRUE(pipe(pp) == 0);
    EXPECT(CUDA_ERROR_INVALID_VALUE,
           cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)pp[0],
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    f = vcu_drv_forged(fd, 21);
    if (f >= 0) {
        EXPECT(CUDA_ERROR_INVALID_VALUE,
               cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)f,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        close(f);
    }
    CK(cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
    memset(&loc, 0, sizeof(loc));
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = 0;
    CK(cuMemPoolGetAccess(&flags, pool, &loc));
    TRUE(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    TRUE(cuMemAllocFromPoolAsync(&q, SIZE, pool, s) != CUDA_SUCCESS);
    bad = m.data;
    bad.reserved[22] ^= 1;
    TRUE(cuMemPoolImportPointer(&q, pool, &bad) != CUDA_SUCCESS);
    CK(cuMemPoolImportPointer(&p, pool, &m.data));
    TRUE(p != 0);
    vcu_drv_expect_words(p, SIZE, FIRST);
    CK(cuMemsetD32Async(p, SECOND, SIZE / 4, s));
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(pool));
    TRUE(write(sock, &one, 1) == 1);
    CK(cuStreamDestroy(s));
    return 0;
}

int main(int argc, char **argv)
{
    CUmemPoolProps share = pool_props(1), plain = pool_props(0);
    CUmemoryPool pool, pool0;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr p, p0;
    char sockarg[16], got;
    int sv[2], st, v = 0, fd = -1;
    msg_t m;
    pid_t pid;

    if (argc == 3 && strcmp(argv[1], "import") == 0)
        return importer(atoi(argv[2]));
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev));
    if (vcu_drv_loopback()) {
        /* No host daemon to keep descriptors: not offered, and said so. */
        TRUE(v == 0);
        EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuMemPoolCreate(&pool, &share));
        printf("loopback: shareable pools not offered\nPASS drv_pool_ipc\n");
        return 0;
    }
    TRUE(v & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    /* A pool made without the handle type: no descriptor, nor export
     * data for its blocks. */
    CK(cuMemPoolCreate(&pool0, &plain));
    CK(cuMemAllocFromPoolAsync(&p0, SIZE, pool0, s));
    TRUE(cuMemPoolExportToShareableHandle(&fd, pool0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                          0) != CUDA_SUCCESS);
    TRUE(cuMemPoolExportPointer(&m.data, p0) != CUDA_SUCCESS);
    CK(cuMemFreeAsync(p0, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(pool0));

    CK(cuMemPoolCreate(&pool, &share));
    CK(cuMemAllocFromPoolAsync(&p, SIZE, pool, s));
    CK(cuMemsetD32Async(p, FIRST, SIZE / 4, s));
    CK(cuStreamSynchronize(s));
    TRUE(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_FABRIC, 0) !=
         CUDA_SUCCESS);
    CK(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    TRUE(fd >= 0);
    memset(&m, 0, sizeof(m));
    CK(cuMemPoolExportPointer(&m.data, p));

    TRUE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    snprintf(sockarg, sizeof(sockarg), "%d", sv[1]);
    {
        char *args[] = { (char *)"import", sockarg, NULL };

        pid = vcu_drv_run_self(args);
    }
    close(sv[1]);
    vcu_drv_send_fd(sv[0], fd, &m, sizeof(m));
    close(fd);
    if (read(sv[0], &got, 1) != 1) {
        TRUE(waitpid(pid, &st, 0) == pid);
        printf("FAIL the importing process ended with status 0x%x before writing\n", st);
        return 1;
    }
    vcu_drv_expect_words(p, SIZE, SECOND);
    TRUE(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL the importing process ended with status 0x%x\n", st);
        return 1;
    }
    CK(cuMemFreeAsync(p, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemPoolDestroy(pool));
    CK(cuStreamDestroy(s));
    printf("PASS drv_pool_ipc\n");
    return 0;
}
