/*
 * Copies between device memory and ordinary (pageable) host memory in a
 * stream capture: captured as NVIDIA's runtime captures them, as memcpy
 * nodes that read and write the host memory each time the graph runs.
 * The capture: pageable in -> device a, a -> device b, b -> pageable out,
 * and out again into page-locked memory; replayed with new input.
 *
 * Through a worker only (a VM, or the GPU): in the loopback transport the
 * library hands host addresses as they are, which the CPU stand-in does
 * not take as device memory, where a worker registers them.
 */
#define TEST_NAME "capture_copy"
#include <string.h>
#include "vcu_test.h"

#define N 4096

int main(void)
{
    const char *t = getenv("VCU_TRANSPORT");
    int *in = (int *)malloc(N * sizeof(int)), *out = (int *)malloc(N * sizeof(int));
    int *pinned, *a, *b;
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t x;
    cudaStreamCaptureStatus st;
    size_t nodes = 0;

    EXPECT(in != NULL && out != NULL, "out of memory");
    if (t != NULL && strcmp(t, "loopback") == 0) {
        printf("skipped: the loopback stand-in cannot run staged copies\n");
        vcu_test_pass();
        return 0;
    }
    CK(cudaMalloc(&a, N * sizeof(int)));
    CK(cudaMalloc(&b, N * sizeof(int)));
    CK(cudaMallocHost(&pinned, N * sizeof(int)));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemcpyAsync(a, in, N * sizeof(int), cudaMemcpyHostToDevice, s));
    CK(cudaMemcpyAsync(b, a, N * sizeof(int), cudaMemcpyDeviceToDevice, s));
    CK(cudaMemcpyAsync(out, b, N * sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(pinned, b, N * sizeof(int), cudaMemcpyDefault, s));
    CK(cudaStreamIsCapturing(s, &st));
    EXPECT(st == cudaStreamCaptureStatusActive, "capture ended by a pageable copy (%d)",
           (int)st);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphGetNodes(g, NULL, &nodes));
    EXPECT(nodes == 4, "captured graph has %zu nodes, want 4", nodes);
    CK(cudaGraphInstantiate(&x, g, 0));
    /* Capture ran nothing: out is as it was. */
    memset(out, 0x5a, N * sizeof(int));
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < N; i++)
            in[i] = rep * 100000 + i * 3 - 7;
        memset(out, 0, N * sizeof(int));
        memset(pinned, 0, N * sizeof(int));
        CK(cudaGraphLaunch(x, s));
        CK(cudaStreamSynchronize(s));
        for (int i = 0; i < N; i++) {
            EXPECT(out[i] == in[i], "replay %d: out[%d] = %d, want %d", rep, i, out[i], in[i]);
            EXPECT(pinned[i] == in[i], "replay %d: pinned[%d] = %d, want %d", rep, i,
                   pinned[i], in[i]);
        }
    }
    printf("pageable copies captured, replayed 3 times\n");
    /* The graph outlives its capture's stages' users: freed cleanly. */
    CK(cudaGraphExecDestroy(x));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    CK(cudaFreeHost(pinned));
    CK(cudaFree(a));
    CK(cudaFree(b));
    free(in);
    free(out);
    vcu_test_pass();
    return 0;
}
