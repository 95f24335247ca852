/*
 * Kernel parameters: a struct by value (padding inside), 24 scalars of
 * mixed sizes and alignments, and a 4.4 KiB parameter block.
 */
#define TEST_NAME "params"
#include <string.h>
#include "vcu_test.h"

/* Layout shared with tests/fakecuda/twins.c: 48 bytes, align 8. */
struct ParamStruct {
    char tag;
    double d;
    int i;
    short s;
    float f[3];
    long long ll;
};

#define BIG_N 1100

/* 4404 bytes: over the 4 KiB launch parameter limit of old CUDA. */
struct BigParam {
    float v[BIG_N];
    int n;
};

__global__ void params_struct(ParamStruct p, ParamStruct *out)
{
    out->tag = p.tag + 1;
    out->d = p.d * 2.0;
    out->i = p.i + 1;
    out->s = p.s - 1;
    for (int k = 0; k < 3; k++)
        out->f[k] = p.f[k] + (float)k;
    out->ll = p.ll * 3;
}

__global__ void params_many(char c0, short s0, int i0, long long l0,
                            float f0, double d0, int *p0,
                            char c1, short s1, int i1, long long l1,
                            float f1, double d1, int *p1,
                            char c2, short s2, int i2, long long l2,
                            float f2, double d2,
                            unsigned char u0, unsigned short u1,
                            long long *lout, double *dout)
{
    lout[0] = c0;  lout[1] = s0;  lout[2] = i0;  lout[3] = l0;
    lout[4] = c1;  lout[5] = s1;  lout[6] = i1;  lout[7] = l1;
    lout[8] = c2;  lout[9] = s2;  lout[10] = i2; lout[11] = l2;
    lout[12] = u0; lout[13] = u1;
    dout[0] = f0; dout[1] = d0;
    dout[2] = f1; dout[3] = d1;
    dout[4] = f2; dout[5] = d2;
    *p0 = 1234;
    *p1 = 5678;
}

__global__ void params_big(BigParam b, float *out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;

    if (i < b.n)
        out[i] = b.v[i] * 2.0f + (float)i;
}

static void test_struct(void)
{
    ParamStruct p, got, *dout;

    memset(&p, 0, sizeof(p));
    p.tag = 'A';
    p.d = 3.25;
    p.i = -77;
    p.s = 1000;
    p.f[0] = 0.5f; p.f[1] = 1.5f; p.f[2] = -2.5f;
    p.ll = 1234567890123LL;
    CK(cudaMalloc(&dout, sizeof(*dout)));
    CK(cudaMemset(dout, 0, sizeof(*dout)));
    params_struct<<<1, 1>>>(p, dout);
    CK_LAUNCH();
    CK(cudaMemcpy(&got, dout, sizeof(got), cudaMemcpyDeviceToHost));
    CK(cudaFree(dout));
    EXPECT(got.tag == 'B' && got.d == 6.5 && got.i == -76 && got.s == 999 &&
           got.f[0] == 0.5f && got.f[1] == 2.5f && got.f[2] == -0.5f &&
           got.ll == 3703703670369LL, "struct by value came back wrong");
    printf("struct: tag=%c d=%g i=%d s=%d f=%g,%g,%g ll=%lld\n", got.tag,
           got.d, got.i, got.s, got.f[0], got.f[1], got.f[2], got.ll);
}

static void test_many(void)
{
    const long long lwant[14] = { -5, -300, 70000, -(1LL << 40), 7, 301,
                                  -70001, (1LL << 41) + 3, -128, 32767,
                                  2147483647, -9223372036854775807LL, 200,
                                  65000 };
    const double dwant[6] = { 1.5, -2.75, 1e10f, 1e-300, -0.125, 6.02e23 };
    long long lout[14], *dl;
    double dout[6], *dd;
    int *dp, pv[2];

    CK(cudaMalloc(&dl, sizeof(lout)));
    CK(cudaMalloc(&dd, sizeof(dout)));
    CK(cudaMalloc(&dp, sizeof(pv)));
    params_many<<<1, 1>>>(-5, -300, 70000, -(1LL << 40), 1.5f, -2.75, dp,
                          7, 301, -70001, (1LL << 41) + 3, 1e10f, 1e-300,
                          dp + 1, -128, 32767, 2147483647,
                          -9223372036854775807LL, -0.125f, 6.02e23,
                          200, 65000, dl, dd);
    CK_LAUNCH();
    CK(cudaMemcpy(lout, dl, sizeof(lout), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dout, dd, sizeof(dout), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(pv, dp, sizeof(pv), cudaMemcpyDeviceToHost));
    for (int k = 0; k < 14; k++)
        EXPECT(lout[k] == lwant[k], "many: integer param %d = %lld, want %lld",
               k, lout[k], lwant[k]);
    for (int k = 0; k < 6; k++)
        EXPECT(dout[k] == dwant[k], "many: float param %d = %g, want %g", k,
               dout[k], dwant[k]);
    EXPECT(pv[0] == 1234 && pv[1] == 5678, "many: pointer params");
    CK(cudaFree(dl));
    CK(cudaFree(dd));
    CK(cudaFree(dp));
    printf("many: 24 params ok\n");
}

static void test_big(void)
{
    static BigParam b;
    static float out[BIG_N];
    float *dout;

    b.n = BIG_N;
    for (int i = 0; i < BIG_N; i++)
        b.v[i] = (float)(i % 50) - 20.0f;
    CK(cudaMalloc(&dout, sizeof(out)));
    params_big<<<(BIG_N + 127) / 128, 128>>>(b, dout);
    CK_LAUNCH();
    CK(cudaMemcpy(out, dout, sizeof(out), cudaMemcpyDeviceToHost));
    CK(cudaFree(dout));
    for (int i = 0; i < BIG_N; i++)
        EXPECT(out[i] == b.v[i] * 2.0f + (float)i, "big: out[%d] = %g", i,
               out[i]);
    printf("big: %zu-byte param ok\n", sizeof(b));
}

int main(void)
{
    test_struct();
    test_many();
    test_big();
    vcu_test_pass();
    return 0;
}
