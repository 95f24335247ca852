/* One template kernel, instantiated for int, float and double. */
#define TEST_NAME "templates"
#include "vcu_test.h"

template <typename T>
__global__ void tmpl_axpy(T a, const T *x, T *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n)
        y[i] = a * x[i] + y[i];
}

template <typename T>
static void run(const char *type, T a)
{
    const int n = 4096;
    T hx[n], hy[n], out[n];
    T *dx, *dy;
    int bad = 0;

    for (int i = 0; i < n; i++) {
        hx[i] = (T)(i % 100);
        hy[i] = (T)(i % 37) - (T)5;
    }
    CK(cudaMalloc(&dx, sizeof(hx)));
    CK(cudaMalloc(&dy, sizeof(hy)));
    CK(cudaMemcpy(dx, hx, sizeof(hx), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy, hy, sizeof(hy), cudaMemcpyHostToDevice));
    tmpl_axpy<T><<<n / 256, 256>>>(a, dx, dy, n);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dy, sizeof(out), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (out[i] != a * hx[i] + hy[i])
            bad++;
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    printf("%s: mismatches=%d\n", type, bad);
    EXPECT(bad == 0, "tmpl_axpy<%s> differs from the CPU reference", type);
}

int main(void)
{
    run<int>("int", 3);
    run<float>("float", 1.5f);
    run<double>("double", -2.25);
    vcu_test_pass();
    return 0;
}
