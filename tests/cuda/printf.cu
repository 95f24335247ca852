/*
 * Device printf reaches the program's own stdout, in order with what the
 * program prints itself, after each kind of call that flushes it
 * (cudaDeviceSynchronize, cudaStreamSynchronize, a blocking cudaMemcpy).
 * One thread per launch prints: the order of several threads' printf is
 * not defined on a GPU.
 *
 * A host function runs ahead of the first synchronize: on the host, a
 * session that uses device printf synchronizes with a blocking call, and
 * the host function it waits for needs the guest's CALLBACK_DONE to be
 * taken in meanwhile (host-backend/worker.c, "Threads"), after an idle
 * spell in which the worker's watch thread parks.
 *
 * run.sh sees only the last line, so the program checks its own output:
 * it runs itself again with stdout going to a file, line buffered as on
 * a terminal (so a native run gives the same order), and compares.
 */
#define TEST_NAME "printf"
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "vcu_test.h"

__global__ void pf_hello(int launch, int *out)
{
    if (blockIdx.x == 1 && threadIdx.x == 2)
        printf("hello from block %d thread %d launch %d\n", (int)blockIdx.x, (int)threadIdx.x,
               launch);
    out[blockIdx.x * blockDim.x + threadIdx.x] = launch;
}

static const char expected[] =
    "start\n"
    "hello from block 1 thread 2 launch 0\n"
    "host after cudaDeviceSynchronize\n"
    "hello from block 1 thread 2 launch 1\n"
    "host after cudaStreamSynchronize\n"
    "hello from block 1 thread 2 launch 2\n"
    "host after cudaMemcpy\n"
    "done\n";

static volatile int noted;

static void CUDART_CB note(void *arg)
{
    (void)arg;
    noted = 1;
}

static int child(void)
{
    int *d, h[8];

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("start\n");
    CK(cudaMalloc(&d, sizeof(h)));
    /* Idle long enough for the host's watch thread to park first. */
    usleep(300 * 1000);
    pf_hello<<<2, 4>>>(0, d);
    CK(cudaLaunchHostFunc(0, note, NULL));
    CK(cudaDeviceSynchronize());
    EXPECT(noted == 1, "the host function had not run at cudaDeviceSynchronize");
    printf("host after cudaDeviceSynchronize\n");
    pf_hello<<<2, 4>>>(1, d);
    CK(cudaStreamSynchronize(0));
    printf("host after cudaStreamSynchronize\n");
    pf_hello<<<2, 4>>>(2, d);
    CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    printf("host after cudaMemcpy\n");
    for (int i = 0; i < 8; i++)
        EXPECT(h[i] == 2, "h[%d] = %d", i, h[i]);
    CK(cudaFree(d));
    printf("done\n");
    return 0;
}

int main(int argc, char **argv)
{
    char path[] = "/tmp/vcu-printf-XXXXXX", got[4096];
    int fd, status = 0;
    ssize_t n;
    pid_t pid;

    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child();
    fd = mkstemp(path);
    EXPECT(fd >= 0, "mkstemp failed");
    unlink(path);
    fflush(stdout);
    pid = fork();
    EXPECT(pid >= 0, "fork failed");
    if (pid == 0) {
        dup2(fd, 1);
        execl(argv[0], argv[0], "child", (char *)NULL);
        _exit(127);
    }
    EXPECT(waitpid(pid, &status, 0) == pid, "waitpid failed");
    n = pread(fd, got, sizeof(got) - 1, 0);
    close(fd);
    got[n > 0 ? n : 0] = '\0';
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || strcmp(got, expected) != 0) {
        printf("--- got (status %d) ---\n%s--- expected ---\n%s", status, got, expected);
        vcu_test_fail("the program's stdout is not as expected");
    }
    printf("device printf in order with host output\n");
    printf("PASS %s\n", TEST_NAME);
    return 0;
}
