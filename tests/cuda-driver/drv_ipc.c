/*
 * CUDA IPC between two processes, as simpleIPC and NCCL's single-node
 * paths use it: this program exports cuMemAlloc memory and an
 * interprocess event, and runs itself again as a second process, which
 * opens both, reads the memory, fills it with a kernel behind a long run
 * of other work, records the event and says so before that work is done.
 * The first process waits on its own event, then finds the second's data.
 * Along the way: a process cannot open its own handle, a handle with one bit
 * changed opens nothing, opened memory is not the opener's to free, and a
 * handle closed once cannot be closed again.
 *
 *   drv_ipc                  the exporter (what run.sh starts)
 *   drv_ipc open FD MEM EV   the opener (hex handles; FD: write a byte when
 *                            the event is recorded)
 */
#define _GNU_SOURCE /* memfd_create (vcu_drv_proc.h) */
#include <sys/wait.h>

#include "vcu_drv_proc.h"

#define N (1u << 20)                /* words shared */
#define WORK (16u << 20)            /* words of the opener's own work before */
#define ROUNDS 32
#define FIRST 0x1234u
#define SECOND 0x5678u

static CUresult fill(CUfunction f, CUstream s, CUdeviceptr p, unsigned long long v, int n)
{
    char pad = 0;
    unsigned int step = 0;
    void *args[] = { &p, &pad, &v, &step, &n };

    return cuLaunchKernel(f, (unsigned int)n / 256, 1, 1, 256, 1, 1, 0, s, args, NULL);
}

static void hex(const char *h, char *out)
{
    for (int i = 0; i < 64; i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)h[i]);
}

static void unhex(const char *s, char *h)
{
    unsigned int b;

    TRUE(strlen(s) == 128);
    for (int i = 0; i < 64; i++) {
        TRUE(sscanf(s + 2 * i, "%2x", &b) == 1);
        h[i] = (char)b;
    }
}

static CUfunction load_fill(void)
{
    CUmodule mod;
    CUfunction f;

    CK(cuModuleLoadData(&mod, vcu_drv_read_beside("vcu_drv_kernels.fatbin", NULL)));
    CK(cuModuleGetFunction(&f, mod, "vcu_drv_fill"));
    return f;
}

static int opener(int fd, const char *mem_hex, const char *ev_hex)
{
    CUipcMemHandle mh, bad;
    CUipcEventHandle eh;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p = 0, q = 0, work;
    CUstream s;
    CUevent ev;
    CUfunction f;
    char one = 1;

    unhex(mem_hex, mh.reserved);
    unhex(ev_hex, eh.reserved);
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    f = load_fill();
    bad = mh;
    bad.reserved[20] ^= 1;
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(&q, bad, 0));
    CK(cuIpcOpenMemHandle(&p, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    TRUE(p != 0);
    vcu_drv_expect_words(p, (size_t)N * 4, FIRST);
    TRUE(cuMemFree(p) != CUDA_SUCCESS);
    CK(cuIpcOpenEventHandle(&ev, eh));

    /* The shared memory's fill waits behind this process's own work, and
     * the event is recorded after it: the other process knows when it is
     * done only through the event. */
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&work, (size_t)WORK * sizeof(unsigned int)));
    for (int r = 0; r < ROUNDS; r++)
        CK(fill(f, s, work, (unsigned long long)r, WORK));
    CK(fill(f, s, p, SECOND, N));
    CK(cuEventRecord(ev, s));
    TRUE(write(fd, &one, 1) == 1);
    CK(cuStreamSynchronize(s));
    CK(cuEventDestroy(ev));
    CK(cuIpcCloseMemHandle(p));
    EXPECT(CUDA_ERROR_INVALID_VALUE, cuIpcCloseMemHandle(p));
    CK(cuMemFree(work));
    return 0;
}

int main(int argc, char **argv)
{
    CUipcMemHandle mh;
    CUipcEventHandle eh;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p, q = 0;
    CUevent ev, ev2;
    char mem_hex[129], ev_hex[129], fdarg[16], got;
    int pipefd[2], st, v = 0;
    pid_t pid;

    if (argc == 5 && strcmp(argv[1], "open") == 0)
        return opener(atoi(argv[2]), argv[3], argv[4]);
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, dev));
    TRUE(v == 1);
    CK(cuMemAlloc(&p, (size_t)N * sizeof(unsigned int)));
    CK(cuMemsetD32(p, FIRST, N));
    CK(cuIpcGetMemHandle(&mh, p));
    /* An event that is not interprocess has no handle (driver 580's
     * answer, H200). */
    CK(cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
    EXPECT(CUDA_ERROR_INVALID_HANDLE, cuIpcGetEventHandle(&eh, ev2));
    CK(cuEventDestroy(ev2));
    CK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(ev, NULL));
    CK(cuIpcGetEventHandle(&eh, ev));
    /* Its own handle: refused (the stand-in says INVALID_CONTEXT, the
     * H200's driver 580 INVALID_VALUE). */
    TRUE(cuIpcOpenMemHandle(&q, mh, 0) != CUDA_SUCCESS);
    CK(cuCtxSynchronize());

    hex(mh.reserved, mem_hex);
    hex(eh.reserved, ev_hex);
    TRUE(pipe(pipefd) == 0);
    snprintf(fdarg, sizeof(fdarg), "%d", pipefd[1]);
    {
        char *args[] = { (char *)"open", fdarg, mem_hex, ev_hex, NULL };

        pid = vcu_drv_run_self(args);
    }
    close(pipefd[1]);
    TRUE(read(pipefd[0], &got, 1) == 1);
    /* Recorded there, after the fill: waiting on it here waits for it. */
    CK(cuEventSynchronize(ev));
    vcu_drv_expect_words(p, (size_t)N * 4, SECOND);
    TRUE(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL the opening process ended with status 0x%x\n", st);
        return 1;
    }
    CK(cuEventDestroy(ev));
    CK(cuMemFree(p));
    printf("PASS drv_ipc\n");
    return 0;
}
