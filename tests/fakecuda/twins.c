/*
 * TEST DOUBLE ONLY.  C twins of every __global__ kernel in tests/cuda/ and
 * tests/demo/, and the device symbols they use (interface: vcu_twin.h).
 *
 * Each twin runs the whole grid on the CPU, block after block and thread
 * after thread, and splits its loops wherever the kernel synchronises
 * (__syncthreads: per block; grid.sync: per grid), so every thread sees
 * what the GPU would let it see.  Floating-point a * b + c is written
 * fmaf()/fma() where nvcc contracts it to an FMA.
 *
 * Parameter offsets and sizes are the compiler's (EIATTR_KPARAM_INFO of
 * the sm_90 cubins); tests/cuda/check-twins.sh compares this table with
 * the built programs, so a kernel changed in tests/cuda/ without its twin
 * fails CI.  num_regs and static_shared are what cudaFuncGetAttributes
 * reports for nvcc 13.0's sm_90 code (static_shared excludes the 1 KiB
 * system reserve, as on the GPU); local_size is the kernel's stack frame
 * (EIATTR_FRAME_SIZE), 0 unless given.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "vcu_twin.h"

/* CUresult values a twin reports through launch->fault. */
#define TW_ILLEGAL_ADDRESS 700
#define TW_ILLEGAL_INSTRUCTION 715
#define TW_LAUNCH_FAILED 719

/* Parameter readers: params may be unaligned for the type. */
#define TW_GETTER(fn, type)                                                 \
    static type fn(const void *params, uint32_t off)                        \
    {                                                                       \
        type v;                                                             \
        memcpy(&v, (const char *)params + off, sizeof(v));                  \
        return v;                                                           \
    }
TW_GETTER(tw_ptr, void *)
TW_GETTER(tw_i8, int8_t)
TW_GETTER(tw_u8, uint8_t)
TW_GETTER(tw_i16, int16_t)
TW_GETTER(tw_u16, uint16_t)
TW_GETTER(tw_i32, int32_t)
TW_GETTER(tw_u32, uint32_t)
TW_GETTER(tw_i64, int64_t)
TW_GETTER(tw_u64, uint64_t)
TW_GETTER(tw_f32, float)
TW_GETTER(tw_f64, double)

/* Every block b, then every thread t of it, z outermost as on the GPU. */
#define TW_FOR_BLOCKS(l, b)                                                 \
    for ((b).z = 0; (b).z < (l)->grid.z; (b).z++)                           \
        for ((b).y = 0; (b).y < (l)->grid.y; (b).y++)                       \
            for ((b).x = 0; (b).x < (l)->grid.x; (b).x++)
#define TW_FOR_THREADS(l, t)                                                \
    for ((t).z = 0; (t).z < (l)->block.z; (t).z++)                          \
        for ((t).y = 0; (t).y < (l)->block.y; (t).y++)                      \
            for ((t).x = 0; (t).x < (l)->block.x; (t).x++)

/* blockIdx.x * blockDim.x + threadIdx.x, in int as the kernels compute it. */
#define TW_GID_X(l, b, t) ((int32_t)((b).x * (l)->block.x + (t).x))

/* A device symbol of the launching module; a missing one fails the launch. */
static void *tw_global(vcu_twin_launch_t *l, const char *name)
{
    void *p = l->global ? l->global(l, name) : NULL;

    if (!p)
        l->fault = TW_LAUNCH_FAILED;
    return p;
}

/* vector_add.cu: vector_add(const float *a, const float *b, float *c, int n) */
static void tw_vector_add(vcu_twin_launch_t *l, const void *pb)
{
    const float *a = tw_ptr(pb, 0), *b = tw_ptr(pb, 8);
    float *c = tw_ptr(pb, 16);
    int32_t n = tw_i32(pb, 24);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            c[i] = a[i] + b[i];
    }
}

/* matmul.cu: matmul_tiled(const float *a, const float *b, float *c, int n),
 * 16x16 tiles in __shared__, two __syncthreads() per tile. */
#define TW_TILE 16
static void tw_matmul_tiled(vcu_twin_launch_t *l, const void *pb)
{
    const float *a = tw_ptr(pb, 0), *b = tw_ptr(pb, 8);
    float *c = tw_ptr(pb, 16);
    int32_t n = tw_i32(pb, 24);
    float ta[TW_TILE][TW_TILE], tb[TW_TILE][TW_TILE];
    float acc[TW_TILE][TW_TILE];
    vcu_twin_dim3_t bi, ti;

    /* Threads past 16 in x or y would index the tiles out of bounds. */
    if (l->block.x > TW_TILE || l->block.y > TW_TILE || l->block.z != 1) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    TW_FOR_BLOCKS(l, bi) {
        memset(ta, 0, sizeof(ta));
        memset(tb, 0, sizeof(tb));
        memset(acc, 0, sizeof(acc));
        for (int32_t t = 0; t < (n + TW_TILE - 1) / TW_TILE; t++) {
            TW_FOR_THREADS(l, ti) {
                int32_t row = bi.y * TW_TILE + ti.y, col = bi.x * TW_TILE + ti.x;
                int32_t ac = t * TW_TILE + ti.x, br = t * TW_TILE + ti.y;

                ta[ti.y][ti.x] = (row < n && ac < n) ? a[row * n + ac] : 0.0f;
                tb[ti.y][ti.x] = (br < n && col < n) ? b[br * n + col] : 0.0f;
            }
            /* __syncthreads() */
            TW_FOR_THREADS(l, ti) {
                for (int k = 0; k < TW_TILE; k++)
                    acc[ti.y][ti.x] = fmaf(ta[ti.y][k], tb[k][ti.x],
                                           acc[ti.y][ti.x]);
            }
            /* __syncthreads() */
        }
        TW_FOR_THREADS(l, ti) {
            int32_t row = bi.y * TW_TILE + ti.y, col = bi.x * TW_TILE + ti.x;

            if (row < n && col < n)
                c[row * n + col] = acc[ti.y][ti.x];
        }
    }
}

/* symbols.cu: sym_apply(float *out, int n), using sym_coef, sym_init and
 * atomicAdd(&sym_counter, 1). */
static void tw_sym_apply(vcu_twin_launch_t *l, const void *pb)
{
    float *out = tw_ptr(pb, 0);
    int32_t n = tw_i32(pb, 8);
    const float *coef = tw_global(l, "sym_coef");
    const int32_t *init = tw_global(l, "sym_init");
    int32_t *counter = tw_global(l, "sym_counter");
    vcu_twin_dim3_t bi, ti;

    if (!coef || !init || !counter)
        return;
    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n) {
            out[i] = fmaf(coef[i % 16], (float)i, (float)*init);
            (*counter)++;
        }
    }
}

/* symbols.cu: sym_scale_table(float s), sym_table[256] *= s */
static void tw_sym_scale_table(vcu_twin_launch_t *l, const void *pb)
{
    float s = tw_f32(pb, 0);
    float *table = tw_global(l, "sym_table");
    vcu_twin_dim3_t bi, ti;

    if (!table)
        return;
    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < 256)
            table[i] *= s;
    }
}

/* templates.cu: tmpl_axpy<T>(T a, const T *x, T *y, int n), y = a * x + y */
#define TW_AXPY(fn, T, get, madd)                                           \
    static void fn(vcu_twin_launch_t *l, const void *pb)                    \
    {                                                                       \
        T a = get(pb, 0);                                                   \
        const T *x = tw_ptr(pb, 8);                                         \
        T *y = tw_ptr(pb, 16);                                              \
        int32_t n = tw_i32(pb, 24);                                         \
        vcu_twin_dim3_t bi, ti;                                             \
                                                                            \
        TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {                        \
            int32_t i = TW_GID_X(l, bi, ti);                                \
                                                                            \
            if (i < n)                                                      \
                y[i] = madd(a, x[i], y[i]);                                 \
        }                                                                   \
    }
/* int arithmetic wraps on the GPU: do it unsigned. */
#define TW_IMADD(a, x, y) ((int32_t)((uint32_t)(a) * (uint32_t)(x) + (uint32_t)(y)))
TW_AXPY(tw_axpy_int, int32_t, tw_i32, TW_IMADD)
TW_AXPY(tw_axpy_float, float, tw_f32, fmaf)
TW_AXPY(tw_axpy_double, double, tw_f64, fma)

/* params.cu: struct ParamStruct, 48 bytes, as the device lays it out. */
struct tw_param_struct {
    char tag;
    double d;
    int32_t i;
    int16_t s;
    float f[3];
    int64_t ll;
};
_Static_assert(sizeof(struct tw_param_struct) == 48, "ParamStruct layout");
_Static_assert(offsetof(struct tw_param_struct, ll) == 40, "ParamStruct layout");

/* params.cu: params_struct(ParamStruct p, ParamStruct *out) */
static void tw_params_struct(vcu_twin_launch_t *l, const void *pb)
{
    struct tw_param_struct p, *out = tw_ptr(pb, 48);
    vcu_twin_dim3_t bi, ti;

    memcpy(&p, pb, sizeof(p));
    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        out->tag = (char)(p.tag + 1);
        out->d = p.d * 2.0;
        out->i = p.i + 1;
        out->s = (int16_t)(p.s - 1);
        for (int k = 0; k < 3; k++)
            out->f[k] = p.f[k] + (float)k;
        out->ll = (int64_t)((uint64_t)p.ll * 3);
    }
}

/* params.cu: params_many(char, short, int, long long, float, double, int *,
 * ... x3 ..., unsigned char, unsigned short, long long *lout, double *dout) */
static void tw_params_many(vcu_twin_launch_t *l, const void *pb)
{
    int64_t *lout = tw_ptr(pb, 120);
    double *dout = tw_ptr(pb, 128);
    int32_t *p0 = tw_ptr(pb, 32), *p1 = tw_ptr(pb, 72);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        lout[0] = tw_i8(pb, 0);
        lout[1] = tw_i16(pb, 2);
        lout[2] = tw_i32(pb, 4);
        lout[3] = tw_i64(pb, 8);
        lout[4] = tw_i8(pb, 40);
        lout[5] = tw_i16(pb, 42);
        lout[6] = tw_i32(pb, 44);
        lout[7] = tw_i64(pb, 48);
        lout[8] = tw_i8(pb, 80);
        lout[9] = tw_i16(pb, 82);
        lout[10] = tw_i32(pb, 84);
        lout[11] = tw_i64(pb, 88);
        lout[12] = tw_u8(pb, 112);
        lout[13] = tw_u16(pb, 114);
        dout[0] = tw_f32(pb, 16);
        dout[1] = tw_f64(pb, 24);
        dout[2] = tw_f32(pb, 56);
        dout[3] = tw_f64(pb, 64);
        dout[4] = tw_f32(pb, 96);
        dout[5] = tw_f64(pb, 104);
        *p0 = 1234;
        *p1 = 5678;
    }
}

/* params.cu: params_big(BigParam b, float *out); BigParam is float v[1100]
 * then int n: 4404 bytes. */
static void tw_params_big(vcu_twin_launch_t *l, const void *pb)
{
    int32_t n = tw_i32(pb, 4400);
    float *out = tw_ptr(pb, 4408);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            out[i] = fmaf(tw_f32(pb, (uint32_t)i * 4), 2.0f, (float)i);
    }
}

/* dynshared.cu: dyn_reverse(const float *in, float *out) through 64 KiB of
 * dynamic shared memory per block. */
#define TW_SMEM_FLOATS (64 * 1024 / 4)
static void tw_dyn_reverse(vcu_twin_launch_t *l, const void *pb)
{
    const float *in = tw_ptr(pb, 0);
    float *out = tw_ptr(pb, 8);
    float *buf = l->shared;
    vcu_twin_dim3_t bi, ti;

    /* The kernel uses 64 KiB whatever it was given. */
    if (l->shared_mem < TW_SMEM_FLOATS * sizeof(float) || !buf) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    TW_FOR_BLOCKS(l, bi) {
        const float *src = in + (size_t)bi.x * TW_SMEM_FLOATS;
        float *dst = out + (size_t)bi.x * TW_SMEM_FLOATS;

        TW_FOR_THREADS(l, ti)
            for (uint32_t i = ti.x; i < TW_SMEM_FLOATS; i += l->block.x)
                buf[i] = src[i];
        /* __syncthreads() */
        TW_FOR_THREADS(l, ti)
            for (uint32_t i = ti.x; i < TW_SMEM_FLOATS; i += l->block.x)
                dst[i] = buf[TW_SMEM_FLOATS - 1 - i];
    }
}

/* p[i] = base + k * i: se_fill (k 1), mp_fill (k 3). */
static void tw_fill_affine(vcu_twin_launch_t *l, const void *pb, int32_t k)
{
    int32_t *p = tw_ptr(pb, 0);
    int32_t n = tw_i32(pb, 8), base = tw_i32(pb, 12);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            p[i] = (int32_t)((uint32_t)base + (uint32_t)k * (uint32_t)i);
    }
}

/* streams_events.cu: se_fill(int *p, int n, int base) */
static void tw_se_fill(vcu_twin_launch_t *l, const void *pb)
{
    tw_fill_affine(l, pb, 1);
}

/* mempool.cu: mp_fill(int *p, int n, int base) */
static void tw_mp_fill(vcu_twin_launch_t *l, const void *pb)
{
    tw_fill_affine(l, pb, 3);
}

/* dst[i] += k * src[i]: se_add (k 2), g_accum (k 1); (int *, const int *, int) */
static void tw_add_scaled(vcu_twin_launch_t *l, const void *pb, int32_t k)
{
    int32_t *dst = tw_ptr(pb, 0);
    const int32_t *src = tw_ptr(pb, 8);
    int32_t n = tw_i32(pb, 16);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            dst[i] = (int32_t)((uint32_t)dst[i] + (uint32_t)k * (uint32_t)src[i]);
    }
}

static void tw_se_add(vcu_twin_launch_t *l, const void *pb)
{
    tw_add_scaled(l, pb, 2);
}

/* graphs.cu and graph_update.cu: g_accum(int *acc, const int *src, int n) */
static void tw_g_accum(vcu_twin_launch_t *l, const void *pb)
{
    tw_add_scaled(l, pb, 1);
}

/* p[i] = p[i] * mul + add, ints: thr_mul_add, g_add (mul 1), mtu_kernel_*. */
static void tw_mul_add(vcu_twin_launch_t *l, int32_t *p, int32_t n,
                       int32_t mul, int32_t add)
{
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            p[i] = TW_IMADD(p[i], mul, add);
    }
}

/* threads.cu: thr_mul_add(int *p, int n, int mul, int add) */
static void tw_thr_mul_add(vcu_twin_launch_t *l, const void *pb)
{
    tw_mul_add(l, tw_ptr(pb, 0), tw_i32(pb, 8), tw_i32(pb, 12), tw_i32(pb, 16));
}

/* graphs.cu and graph_update.cu: g_add(int *p, int n, int v), p[i] += v */
static void tw_g_add(vcu_twin_launch_t *l, const void *pb)
{
    tw_mul_add(l, tw_ptr(pb, 0), tw_i32(pb, 8), 1, tw_i32(pb, 12));
}

/* multi_tu_a.cu: mtu_kernel_a(int *p, int n), p = p * mtu_a_scale + 1 */
static void tw_mtu_kernel_a(vcu_twin_launch_t *l, const void *pb)
{
    const int32_t *scale = tw_global(l, "mtu_a_scale");

    if (scale)
        tw_mul_add(l, tw_ptr(pb, 0), tw_i32(pb, 8), *scale, 1);
}

/* multi_tu_b.cu: mtu_kernel_b(int *p, int n),
 * p = p * mtu_b_scale + mtu_b_offset */
static void tw_mtu_kernel_b(vcu_twin_launch_t *l, const void *pb)
{
    const int32_t *scale = tw_global(l, "mtu_b_scale");
    const int32_t *offset = tw_global(l, "mtu_b_offset");

    if (scale && offset)
        tw_mul_add(l, tw_ptr(pb, 0), tw_i32(pb, 8), *scale, *offset);
}

/* errors.cu: err_fill(int *p, int n, int v) */
static void tw_err_fill(vcu_twin_launch_t *l, const void *pb)
{
    tw_mul_add(l, tw_ptr(pb, 0), tw_i32(pb, 8), 0, tw_i32(pb, 12));
}

/* errors.cu: err_oob_write(int *p), p[1ull << 40] = 1: the store faults. */
static void tw_err_oob_write(vcu_twin_launch_t *l, const void *pb)
{
    (void)pb;
    l->fault = TW_ILLEGAL_ADDRESS;
}

/* async_pinned.cu: ap_scale(float *p, float s, int n), p = p * s + 1 */
static void tw_ap_scale(vcu_twin_launch_t *l, const void *pb)
{
    float *p = tw_ptr(pb, 0);
    float s = tw_f32(pb, 8);
    int32_t n = tw_i32(pb, 12);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            p[i] = fmaf(p[i], s, 1.0f);
    }
}

/* memset.cu: ms_count(const unsigned char *p, int n, unsigned char v,
 * int *counts), atomicAdd(&counts[p[i] == v ? 0 : 1], 1) */
static void tw_ms_count(vcu_twin_launch_t *l, const void *pb)
{
    const uint8_t *p = tw_ptr(pb, 0);
    int32_t n = tw_i32(pb, 8);
    uint8_t v = tw_u8(pb, 12);
    int32_t *counts = tw_ptr(pb, 16);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            counts[p[i] == v ? 0 : 1]++;
    }
}

/* memcpy2d.cu: m2_inc(float *p, size_t pitch, int w, int h),
 * row y of pitch bytes: row[x] += 1 + y */
static void tw_m2_inc(vcu_twin_launch_t *l, const void *pb)
{
    char *p = tw_ptr(pb, 0);
    uint64_t pitch = tw_u64(pb, 8);
    int32_t w = tw_i32(pb, 16), h = tw_i32(pb, 20);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t x = TW_GID_X(l, bi, ti);
        int32_t y = (int32_t)(bi.y * l->block.y + ti.y);

        if (x < w && y < h) {
            float *row = (float *)(p + (int64_t)y * pitch);

            row[x] += 1.0f + (float)y;
        }
    }
}

/* cooperative.cu: coop_sum(const int *in, int *partial, int *mixed,
 * int *out, int n): three phases separated by grid.sync(). */
static void tw_coop_sum(vcu_twin_launch_t *l, const void *pb)
{
    const int32_t *in = tw_ptr(pb, 0);
    int32_t *partial = tw_ptr(pb, 8), *mixed = tw_ptr(pb, 16);
    int32_t *out = tw_ptr(pb, 24);
    int32_t n = tw_i32(pb, 32);
    int32_t total = (int32_t)(l->grid.x * l->block.x);
    vcu_twin_dim3_t bi, ti;

    /* grid.sync() outside a cooperative launch traps. */
    if (!l->cooperative) {
        l->fault = TW_ILLEGAL_INSTRUCTION;
        return;
    }
    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t g = TW_GID_X(l, bi, ti);
        uint32_t s = 0;

        for (int32_t i = g; i < n; i += total)
            s += (uint32_t)in[i];
        partial[g] = (int32_t)s;
    }
    /* grid.sync() */
    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t g = TW_GID_X(l, bi, ti);

        mixed[g] = (int32_t)((uint32_t)partial[g] +
                             (uint32_t)partial[total - 1 - g]);
    }
    /* grid.sync() */
    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        if (TW_GID_X(l, bi, ti) == 0) {
            uint32_t t = 0;

            for (int32_t i = 0; i < total; i++)
                t += (uint32_t)mixed[i];
            out[0] = (int32_t)t;
        }
    }
}

/* callbacks.cu: cb_set(int *dst, int v), dst[threadIdx.x] = v + threadIdx.x */
static void tw_cb_set(vcu_twin_launch_t *l, const void *pb)
{
    int32_t *dst = tw_ptr(pb, 0);
    int32_t v = tw_i32(pb, 8);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti)
        dst[ti.x] = v + (int32_t)ti.x;
}

/* batching.cu: bt_step(int *p, int i): p[0] = i + 1 if p[0] was i, else
 * p[1] + 1. */
static void tw_bt_step(vcu_twin_launch_t *l, const void *pb)
{
    int32_t *p = tw_ptr(pb, 0);
    int32_t i = tw_i32(pb, 8);

    (void)l;
    if (p[0] == i)
        p[0] = i + 1;
    else
        p[1] += 1;
}

/* batching.cu: bt_flag(int *flag, int v), *flag = v, seen by the host. */
static void tw_bt_flag(vcu_twin_launch_t *l, const void *pb)
{
    (void)l;
    __atomic_store_n((int32_t *)tw_ptr(pb, 0), tw_i32(pb, 8), __ATOMIC_SEQ_CST);
}

/* device_query.cu: dq_noop(int *p), p[threadIdx.x] = threadIdx.x */
static void tw_dq_noop(vcu_twin_launch_t *l, const void *pb)
{
    int32_t *p = tw_ptr(pb, 0);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti)
        p[ti.x] = (int32_t)ti.x;
}

/*
 * printf.cu: pf_hello(int launch, int *out): block 1 thread 2 prints,
 * every thread stores out[gid] = launch.  The output is flushed at once:
 * NVIDIA's driver write()s device printf to fd 1 itself, never through a
 * stdio buffer (and in loopback, where stdout is the program's own, the
 * program's earlier lines are then ahead of it, as natively).
 */
static void tw_pf_hello(vcu_twin_launch_t *l, const void *pb)
{
    int32_t launch = tw_i32(pb, 0);
    int32_t *out = tw_ptr(pb, 8);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        if (bi.x == 1 && ti.x == 2) {
            printf("hello from block %d thread %d launch %d\n", (int)bi.x, (int)ti.x,
                   (int)launch);
            fflush(stdout);
        }
        out[TW_GID_X(l, bi, ti)] = launch;
    }
}

/* managed.cu: mm_add(int n, const float *x, float *y), grid-stride. */
static void tw_mm_add(vcu_twin_launch_t *l, const void *pb)
{
    int32_t n = tw_i32(pb, 0);
    const float *x = tw_ptr(pb, 8);
    float *y = tw_ptr(pb, 16);
    int32_t stride = (int32_t)(l->block.x * l->grid.x);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        for (int32_t i = TW_GID_X(l, bi, ti); i < n; i += stride)
            y[i] = x[i] + y[i];
    }
}

/* managed_streams.cu: ms_atomics(int *p, int loops): per thread and loop
 * p[0] += 10 and p[1] = max(p[1], thread). */
static void tw_ms_atomics(vcu_twin_launch_t *l, const void *pb)
{
    int32_t *p = tw_ptr(pb, 0);
    int32_t loops = tw_i32(pb, 8);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t tid = TW_GID_X(l, bi, ti);

        for (int32_t i = 0; i < loops; i++) {
            p[0] += 10;
            if (p[1] < tid)
                p[1] = tid;
        }
    }
}

/* managed_streams.cu: ms_gemv(int n, const double *A, const double *x,
 * double *y), y = A x, grid-stride over rows. */
static void tw_ms_gemv(vcu_twin_launch_t *l, const void *pb)
{
    int32_t n = tw_i32(pb, 0);
    const double *a = tw_ptr(pb, 8), *x = tw_ptr(pb, 16);
    double *y = tw_ptr(pb, 24);
    int32_t stride = (int32_t)(l->block.x * l->grid.x);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        for (int32_t i = TW_GID_X(l, bi, ti); i < n; i += stride) {
            double s = 0.0;

            for (int32_t j = 0; j < n; j++)
                s += a[(size_t)i * (size_t)n + (size_t)j] * x[j];
            y[i] = s;
        }
    }
}

/* zerocopy.cu: zc_add(const float *a, const float *b, float *c, int n) on
 * mapped host memory. */
static void tw_zc_add(vcu_twin_launch_t *l, const void *pb)
{
    tw_vector_add(l, pb);
}

/* zerocopy.cu: zc_through(const zc_comm *c, unsigned *out): out[0] =
 * c->flag[0], c->flag[1] = out[0] + 1, c->flag being page-locked host
 * memory no call named: an illegal address unless it is mapped. */
static void tw_zc_through(vcu_twin_launch_t *l, const void *pb)
{
    const void *c = tw_ptr(pb, 0);
    uint32_t *out = tw_ptr(pb, 8), *flag;

    if (!l->addressable(c, sizeof(flag)) || !l->addressable(out, sizeof(*out))) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    memcpy(&flag, c, sizeof(flag));
    if (!l->addressable(flag, 2 * sizeof(*flag))) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    out[0] = flag[0];
    flag[1] = out[0] + 1;
}

/* isolation.cu: iso_fill(unsigned *p, unsigned v, int n) */
static void tw_iso_fill(vcu_twin_launch_t *l, const void *pb)
{
    tw_mul_add(l, tw_ptr(pb, 0), tw_i32(pb, 12), 0, tw_i32(pb, 8));
}

/* isolation.cu: iso_read(const unsigned *p, unsigned *out), out[0] = p[0],
 * with p possibly another process's: an illegal address unless this
 * process may reach it. */
static void tw_iso_read(vcu_twin_launch_t *l, const void *pb)
{
    const uint32_t *p = tw_ptr(pb, 0);
    uint32_t *out = tw_ptr(pb, 8);

    if (!l->addressable(p, sizeof(*p)) || !l->addressable(out, sizeof(*out))) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    out[0] = p[0];
}

/* tests/demo/vcu_demo.cu: demo_saxpy(int n, float a, const float *x,
 * float *y), y = a * x + y; n == 0 is the empty kernel of the launch figure. */
static void tw_demo_saxpy(vcu_twin_launch_t *l, const void *pb)
{
    int32_t n = tw_i32(pb, 0);
    float a = tw_f32(pb, 4);
    const float *x = tw_ptr(pb, 8);
    float *y = tw_ptr(pb, 16);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            y[i] = fmaf(a, x[i], y[i]);
    }
}

/* tests/demo/vcu_demo.cu: demo_sgemm(const float *a, const float *b,
 * float *c, int n), the same 16x16 tiling as matmul.cu. */
static void tw_demo_sgemm(vcu_twin_launch_t *l, const void *pb)
{
    tw_matmul_tiled(l, pb);
}

#define P(off, size) { (off), (size) }

/* tests/cuda-driver/vcu_drv_kernels.cu (extern "C"): vcu_drv_vadd is
 * vector_add; vcu_drv_fill(unsigned *p, char pad, unsigned long long v,
 * unsigned step, int n); vcu_drv_flag_bump(unsigned *out). */
static void tw_drv_fill(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *p = tw_ptr(pb, 0);
    int8_t pad = tw_i8(pb, 8);
    uint64_t v = tw_u64(pb, 16);
    uint32_t step = (uint32_t)tw_i32(pb, 24);
    int32_t n = tw_i32(pb, 28);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n) {
            /* A store outside device memory faults, as on the GPU. */
            if (!l->addressable(&p[i], sizeof(p[i]))) {
                l->fault = TW_ILLEGAL_ADDRESS;
                return;
            }
            p[i] = (uint32_t)v + (uint32_t)i * step + (uint32_t)(int32_t)pad;
        }
    }
}

static void tw_drv_flag_bump(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *out = tw_ptr(pb, 0);
    uint32_t *flag = tw_global(l, "vcu_drv_flag");

    if (flag == NULL)
        return;
    *out = *flag;
    *flag += 1;
}

/* vcu_drv_managed_add(unsigned v): the managed word and the pair's second
 * += v. */
static void tw_drv_managed_add(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *w = tw_global(l, "vcu_drv_managed_word");
    uint32_t *pair = tw_global(l, "vcu_drv_managed_pair");

    if (w != NULL)
        *w += tw_u32(pb, 0);
    if (pair != NULL)
        pair[1] += tw_u32(pb, 0);
}

/* graph_mem.cu: gm_fill(unsigned *p, int n, unsigned v): p[i] = v + i. */
static void tw_gm_fill(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *p = tw_ptr(pb, 0);
    int32_t n = tw_i32(pb, 8);
    uint32_t v = (uint32_t)tw_i32(pb, 12);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n) {
            if (!l->addressable(&p[i], sizeof(p[i]))) {
                l->fault = TW_ILLEGAL_ADDRESS;
                return;
            }
            p[i] = v + (uint32_t)i;
        }
    }
}

/* graph_mem.cu's gm_count and vcu_drv_cond_count(unsigned *ctr, unsigned n,
 * cudaGraphConditionalHandle h):
 * ++*ctr, and the handle's condition becomes *ctr < n. */
static void tw_drv_cond_count(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *ctr = tw_ptr(pb, 0);
    uint32_t n = (uint32_t)tw_i32(pb, 8);

    if (!l->addressable(ctr, sizeof(*ctr))) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    *ctr += 1;
    if (l->set_conditional(tw_u64(pb, 16), *ctr < n) != 0)
        l->fault = TW_ILLEGAL_ADDRESS;
}

/* vcu_drv_cluster(unsigned *out), and cluster.cu's cluster_ids: each block's rank in its cluster, the
 * cluster's size and its linear index, numbered as sm_90 numbers them. */
static void tw_drv_cluster(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *out = tw_ptr(pb, 0);
    const vcu_twin_dim3_t c = l->cluster, g = l->grid;
    uint32_t ncx = g.x / c.x, ncy = g.y / c.y;
    vcu_twin_dim3_t bi;

    TW_FOR_BLOCKS(l, bi) {
        uint32_t b = bi.x + g.x * (bi.y + g.y * bi.z);
        uint32_t rank = bi.x % c.x + c.x * (bi.y % c.y + c.y * (bi.z % c.z));
        uint32_t id = bi.x / c.x + ncx * (bi.y / c.y + ncy * (bi.z / c.z));

        out[b] = rank | (c.x * c.y * c.z) << 8 | id << 16;
    }
}

/* tests/share/share_loop.cu: share_burn(float *out, int iters): ITERS
 * dependent FMAs per thread.  On the CPU, a stand-in for GPU time: one
 * thread's chain, so that a kernel takes a moment (about a millisecond at
 * the loop's default) and a VM's work can be measured at all. */
static void tw_share_burn(vcu_twin_launch_t *l, const void *pb)
{
    float *out = tw_ptr(pb, 0);
    int32_t iters = tw_i32(pb, 8), i;
    volatile float a = 1e-3f, b = 2e-3f;

    (void)l;
    for (i = 0; i < iters * 4; i++) {
        a = a * 0.9999f + 0.0001f;
        b = b * 0.9998f + 0.0002f;
    }
    if (a + b == 12345.0f)
        out[0] = a;
}

/* tests/many/many_work.cu: many_saxpy(float a, const float *x, float *y,
 * int n), y = a * x + y (an FMA). */
static void tw_many_saxpy(vcu_twin_launch_t *l, const void *pb)
{
    float a = tw_f32(pb, 0);
    const float *x = tw_ptr(pb, 8);
    float *y = tw_ptr(pb, 16);
    int32_t n = tw_i32(pb, 24);
    vcu_twin_dim3_t bi, ti;

    TW_FOR_BLOCKS(l, bi) TW_FOR_THREADS(l, ti) {
        int32_t i = TW_GID_X(l, bi, ti);

        if (i < n)
            y[i] = fmaf(a, x[i], y[i]);
    }
}

/* many_sum(const int *x, int n, unsigned long long *out): *out += the sum
 * of x's elements as unsigned ints (the order of an integer sum does not
 * matter). */
static void tw_many_sum(vcu_twin_launch_t *l, const void *pb)
{
    const int32_t *x = tw_ptr(pb, 0);
    int32_t n = tw_i32(pb, 8), i;
    unsigned long long *out = tw_ptr(pb, 16), s = 0;

    (void)l;
    for (i = 0; i < n; i++)
        s += (uint32_t)x[i];
    *out += s;
}

/* many_fault(int *p): a write where no allocation is. */
static void tw_many_fault(vcu_twin_launch_t *l, const void *pb)
{
    (void)pb;
    l->fault = TW_ILLEGAL_ADDRESS;
}

/* tests/packed/packed_check.cu: packed_smid(unsigned *seen, long long
 * spin): block b runs on SM b % sms of its context; seen[] gets a bit per
 * SM, seen[64] the highest. */
static void tw_packed_smid(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *seen = tw_ptr(pb, 0);
    uint64_t nb = (uint64_t)l->grid.x * l->grid.y * l->grid.z, b;
    unsigned int sms = l->sms ? l->sms : 1;

    if (!l->addressable(seen, 65 * sizeof(uint32_t))) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    for (b = 0; b < nb; b++) {
        uint32_t smid = (uint32_t)(b % sms);

        if (smid < 64 * 32)
            seen[smid / 32] |= 1u << (smid % 32);
        if (smid > seen[64])
            seen[64] = smid;
    }
}

/* lmem.cu: lmem_walk(unsigned *out, unsigned seed), 16 KiB of local
 * memory a thread written and read back: out[i] = the sum over j of
 * (seed ^ (i + 4095 - j)) * (j | 1). */
#define TW_LMEM_WORDS 4096u
static void tw_lmem_walk(vcu_twin_launch_t *l, const void *pb)
{
    uint32_t *out = tw_ptr(pb, 0);
    uint32_t seed = (uint32_t)tw_i32(pb, 8);
    uint64_t n = (uint64_t)l->grid.x * l->block.x;

    if (!l->addressable(out, n * sizeof(*out))) {
        l->fault = TW_ILLEGAL_ADDRESS;
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint32_t s = 0;

        for (uint32_t j = 0; j < TW_LMEM_WORDS; j++)
            s += (seed ^ ((uint32_t)i + TW_LMEM_WORDS - 1 - j)) * (j | 1);
        out[i] = s;
    }
}

/* texture.cu: tx_sample and tx_surf_write sample a texture and write a
 * surface, which the stand-in does not model; texture.cu launches them
 * on a GPU only.  Never launched here: a launch would report a fault. */
static void tw_tx_none(vcu_twin_launch_t *l, const void *params)
{
    (void)params;
    l->fault = 801;                 /* CUDA_ERROR_NOT_SUPPORTED */
}

const vcu_twin_t vcu_twins[] = {
    { "_Z10vector_addPKfS0_Pfi", tw_vector_add, 4,
      { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 12, 0, 0 },
    { "_Z12matmul_tiledPKfS0_Pfi", tw_matmul_tiled, 4,
      { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 32, 2048, 0 },
    { "_Z9sym_applyPfi", tw_sym_apply, 2,
      { P(0, 8), P(8, 4) }, 16, 0, 0 },
    { "_Z15sym_scale_tablef", tw_sym_scale_table, 1,
      { P(0, 4) }, 8, 0, 0 },
    { "_Z9tmpl_axpyIiEvT_PKS0_PS0_i", tw_axpy_int, 4,
      { P(0, 4), P(8, 8), P(16, 8), P(24, 4) }, 10, 0, 0 },
    { "_Z9tmpl_axpyIfEvT_PKS0_PS0_i", tw_axpy_float, 4,
      { P(0, 4), P(8, 8), P(16, 8), P(24, 4) }, 10, 0, 0 },
    { "_Z9tmpl_axpyIdEvT_PKS0_PS0_i", tw_axpy_double, 4,
      { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 10, 0, 0 },
    { "_Z13params_struct11ParamStructPS_", tw_params_struct, 2,
      { P(0, 48), P(48, 8) }, 20, 0, 0 },
    { "_Z11params_manycsixfdPicsixfdS_csixfdhtPxPd", tw_params_many, 24,
      { P(0, 1), P(2, 2), P(4, 4), P(8, 8), P(16, 4), P(24, 8), P(32, 8),
        P(40, 1), P(42, 2), P(44, 4), P(48, 8), P(56, 4), P(64, 8), P(72, 8),
        P(80, 1), P(82, 2), P(84, 4), P(88, 8), P(96, 4), P(104, 8),
        P(112, 1), P(114, 2), P(120, 8), P(128, 8) }, 32, 0, 0 },
    { "_Z10params_big8BigParamPf", tw_params_big, 2,
      { P(0, 4404), P(4408, 8) }, 8, 0, 0 },
    { "_Z11dyn_reversePKfPf", tw_dyn_reverse, 2,
      { P(0, 8), P(8, 8) }, 14, 0, 0 },
    { "_Z7se_fillPiii", tw_se_fill, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 8, 0, 0 },
    { "_Z6se_addPiPKii", tw_se_add, 3,
      { P(0, 8), P(8, 8), P(16, 4) }, 10, 0, 0 },
    { "_Z8ap_scalePffi", tw_ap_scale, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 8, 0, 0 },
    { "_Z8ms_countPKhihPi", tw_ms_count, 4,
      { P(0, 8), P(8, 4), P(12, 1), P(16, 8) }, 12, 0, 0 },
    { "_Z6m2_incPfmii", tw_m2_inc, 4,
      { P(0, 8), P(8, 8), P(16, 4), P(20, 4) }, 12, 0, 0 },
    { "_Z12mtu_kernel_aPii", tw_mtu_kernel_a, 2,
      { P(0, 8), P(8, 4) }, 8, 0, 0 },
    { "_Z12mtu_kernel_bPii", tw_mtu_kernel_b, 2,
      { P(0, 8), P(8, 4) }, 10, 0, 0 },
    { "_Z5g_addPiii", tw_g_add, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 8, 0, 0 },
    { "_Z7g_accumPiPKii", tw_g_accum, 3,
      { P(0, 8), P(8, 8), P(16, 4) }, 10, 0, 0 },
    { "_Z8coop_sumPKiPiS1_S1_i", tw_coop_sum, 5,
      { P(0, 8), P(8, 8), P(16, 8), P(24, 8), P(32, 4) }, 32, 0, 0 },
    { "_Z11thr_mul_addPiiii", tw_thr_mul_add, 4,
      { P(0, 8), P(8, 4), P(12, 4), P(16, 4) }, 8, 0, 0 },
    { "_Z6cb_setPii", tw_cb_set, 2,
      { P(0, 8), P(8, 4) }, 8, 0, 0 },
    { "_Z7bt_stepPii", tw_bt_step, 2,
      { P(0, 8), P(8, 4) }, 8, 0, 0 },
    { "_Z7bt_flagPii", tw_bt_flag, 2,
      { P(0, 8), P(8, 4) }, 8, 0, 0 },
    { "_Z7dq_noopPi", tw_dq_noop, 1,
      { P(0, 8) }, 8, 0, 0 },
    { "_Z10share_burnPfi", tw_share_burn, 2,
      { P(0, 8), P(8, 4) }, 11, 0, 0 },
    { "_Z10many_saxpyfPKfPfi", tw_many_saxpy, 4,
      { P(0, 4), P(8, 8), P(16, 8), P(24, 4) }, 10, 0, 0 },
    { "_Z8many_sumPKiiPy", tw_many_sum, 3,
      { P(0, 8), P(8, 4), P(16, 8) }, 14, 2048, 0 },
    { "_Z10many_faultPi", tw_many_fault, 1,
      { P(0, 8) }, 8, 0, 0 },
    { "_Z7mp_fillPiii", tw_mp_fill, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 10, 0, 0 },
    { "_Z8err_fillPiii", tw_err_fill, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 10, 0, 0 },
    { "_Z13err_oob_writePi", tw_err_oob_write, 1,
      { P(0, 8) }, 8, 0, 0 },
    { "_Z8pf_helloiPi", tw_pf_hello, 2,
      { P(0, 4), P(8, 8) }, 24, 0, 16 },
    { "_Z6mm_addiPKfPf", tw_mm_add, 3,
      { P(0, 4), P(8, 8), P(16, 8) }, 24, 0, 0 },
    { "_Z10ms_atomicsPii", tw_ms_atomics, 2,
      { P(0, 8), P(8, 4) }, 14, 0, 0 },
    { "_Z7ms_gemviPKdS0_Pd", tw_ms_gemv, 4,
      { P(0, 4), P(8, 8), P(16, 8), P(24, 8) }, 28, 0, 0 },
    { "_Z6zc_addPKfS0_Pfi", tw_zc_add, 4,
      { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 12, 0, 0 },
    { "_Z10zc_throughPK7zc_commPj", tw_zc_through, 2,
      { P(0, 8), P(8, 8) }, 14, 0, 0 },
    { "_Z8iso_fillPjji", tw_iso_fill, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 10, 0, 0 },
    { "_Z8iso_readPKjPj", tw_iso_read, 2,
      { P(0, 8), P(8, 8) }, 8, 0, 0 },
    { "_Z10demo_saxpyifPKfPf", tw_demo_saxpy, 4,
      { P(0, 4), P(4, 4), P(8, 8), P(16, 8) }, 10, 0, 0 },
    { "_Z10demo_sgemmPKfS0_Pfi", tw_demo_sgemm, 4,
      { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 32, 2048, 0 },
    { "vcu_drv_vadd", tw_vector_add, 4,
      { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 12, 0, 0 },
    { "vcu_drv_fill", tw_drv_fill, 5,
      { P(0, 8), P(8, 1), P(16, 8), P(24, 4), P(28, 4) }, 8, 0, 0 },
    { "vcu_drv_flag_bump", tw_drv_flag_bump, 1,
      { P(0, 8) }, 12, 0, 0 },
    { "vcu_drv_managed_add", tw_drv_managed_add, 1,
      { P(0, 4) }, 12, 0, 0 },
    { "_Z7gm_fillPjij", tw_gm_fill, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 8, 0, 0 },
    { "_Z8gm_countPjjy", tw_drv_cond_count, 3,
      { P(0, 8), P(8, 4), P(16, 8) }, 24, 0, 0 },
    { "vcu_drv_cond_count", tw_drv_cond_count, 3,
      { P(0, 8), P(8, 4), P(16, 8) }, 24, 0, 0 },
    { "vcu_drv_cluster", tw_drv_cluster, 1,
      { P(0, 8) }, 15, 0, 0 },
    { "_Z11cluster_idsPj", tw_drv_cluster, 1,
      { P(0, 8) }, 15, 0, 0 },
    { "packed_smid", tw_packed_smid, 2,
      { P(0, 8), P(8, 8) }, 14, 0, 0 },
    { "_Z9lmem_walkPjj", tw_lmem_walk, 2,
      { P(0, 8), P(8, 4) }, 32, 0, 16384 },
    { "_Z9tx_sampleyPfii", tw_tx_none, 4,
      { P(0, 8), P(8, 8), P(16, 4), P(20, 4) }, 17, 0, 0 },
    { "_Z13tx_surf_writeyii", tw_tx_none, 3,
      { P(0, 8), P(8, 4), P(12, 4) }, 8, 0, 0 },
    { NULL, NULL, 0, { P(0, 0) }, 0, 0, 0 },
};

static const int32_t tw_init_sym_init = 42;
static const int32_t tw_init_mtu_a_scale = 3;
static const int32_t tw_init_mtu_b_scale = 5;
static const uint32_t tw_init_vcu_drv_flag = 7;
static const uint32_t tw_init_vcu_drv_managed_word = 10;
static const uint32_t tw_init_vcu_drv_managed_pair[2] = { 20, 30 };

const vcu_twin_global_t vcu_twin_globals[] = {
    /* symbols.cu */
    { "sym_coef", 16 * sizeof(float), NULL, 0 },
    { "sym_counter", sizeof(int32_t), NULL, 0 },
    { "sym_init", sizeof(int32_t), &tw_init_sym_init, 0 },
    { "sym_table", 256 * sizeof(float), NULL, 0 },
    /* multi_tu_a.cu, multi_tu_b.cu */
    { "mtu_a_scale", sizeof(int32_t), &tw_init_mtu_a_scale, 0 },
    { "mtu_b_scale", sizeof(int32_t), &tw_init_mtu_b_scale, 0 },
    { "mtu_b_offset", sizeof(int32_t), NULL, 0 },
    /* tests/cuda-driver/vcu_drv_kernels.cu */
    { "vcu_drv_flag", sizeof(uint32_t), &tw_init_vcu_drv_flag, 0 },
    { "vcu_drv_managed_word", sizeof(uint32_t), &tw_init_vcu_drv_managed_word, 1 },
    { "vcu_drv_managed_pair", 2 * sizeof(uint32_t), tw_init_vcu_drv_managed_pair, 1 },
    { NULL, 0, NULL, 0 },
};
