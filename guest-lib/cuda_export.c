/*
 * NVIDIA's private tables (cuGetExportTable), answered in the guest:
 * their function pointers are this process's, and the integrity check
 * hashes this process's pointers, pid and thread with what this library
 * reports of its devices, so none of it can come from the host
 * (docs/driver-api.md says which slot does what and how that was
 * checked against NVIDIA's driver).  A slot whose purpose is not known
 * is a function that says once on stderr that it was called and returns
 * CUDA_ERROR_NOT_SUPPORTED.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_integrity.h"
#include "cuda_int.h"

/* Each table, by UUID in memory byte order. */
enum {
    VCU__T_F8CFF951,                /* no name known; CUDA 13.0's runtime asks first */
    VCU__T_CUDART,                  /* CUDART_INTERFACE */
    VCU__T_HOOKS,                   /* TOOLS_RUNTIME_CALLBACK_HOOKS */
    VCU__T_TLS,                     /* TOOLS_TLS */
    VCU__T_CLS,                     /* context-local storage (V0301) */
    VCU__T_CHECKS,                  /* CONTEXT_CHECKS */
    VCU__T_INTEGRITY,               /* INTEGRITY_CHECK */
    VCU__T_21318C60,                /* no name known; CUDA 13 libraries ask */
    VCU__T_1734DC26,                /* no name known; cuBLASLt 13 asks */
    VCU__T_6E163FBE,                /* "private module iterator" (LUPINE); cuFFT 12 asks */
    VCU__NTABLES
};

#define VCU__MAX_SLOTS 95

static const unsigned char vcu__table_ids[VCU__NTABLES][16] = {
    [VCU__T_F8CFF951] = { 0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e,
                          0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9 },
    [VCU__T_CUDART] = { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                        0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 },
    [VCU__T_HOOKS] = { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                       0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 },
    [VCU__T_TLS] = { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                     0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc },
    [VCU__T_CLS] = { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                     0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 },
    [VCU__T_CHECKS] = { 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
                        0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e },
    [VCU__T_INTEGRITY] = { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                           0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 },
    [VCU__T_21318C60] = { 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                          0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2 },
    [VCU__T_1734DC26] = { 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                          0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca },
    [VCU__T_6E163FBE] = { 0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                          0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e },
};

void vcu__uuid_fmt(const void *id, char buf[37])
{
    const unsigned char *u = id;

    snprintf(buf, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
             u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

/* ---- slots of unknown purpose ------------------------------------------- */

static CUresult vcu__slot_unknown(int table, int slot)
{
    static int logged[VCU__NTABLES][VCU__MAX_SLOTS];
    char id[37];

    if (!__atomic_exchange_n(&logged[table][slot], 1, __ATOMIC_RELAXED)) {
        vcu__uuid_fmt(vcu__table_ids[table], id);
        fprintf(stderr, "libcuda (virtio-cuda): export table %s slot %d called\n", id, slot);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* One function per slot, so the message can name it.  Callers pass
 * arguments these ignore (the caller cleans up the stack on x86-64). */
#define VCU__UNKNOWN(t, n)                                 \
    static CUresult vcu__unk_##t##_##n(void)               \
    {                                                      \
        return vcu__slot_unknown(VCU__T_##t, n);           \
    }

VCU__UNKNOWN(F8CFF951, 2)
VCU__UNKNOWN(CUDART, 3)
VCU__UNKNOWN(CUDART, 4)
VCU__UNKNOWN(CUDART, 5)
VCU__UNKNOWN(CUDART, 9)
VCU__UNKNOWN(CUDART, 11)
VCU__UNKNOWN(HOOKS, 1)
VCU__UNKNOWN(HOOKS, 3)
VCU__UNKNOWN(HOOKS, 4)
VCU__UNKNOWN(HOOKS, 5)
VCU__UNKNOWN(TLS, 1)
VCU__UNKNOWN(CHECKS, 1)
VCU__UNKNOWN(CHECKS, 4)
VCU__UNKNOWN(CHECKS, 5)
VCU__UNKNOWN(CHECKS, 6)
VCU__UNKNOWN(CHECKS, 7)
VCU__UNKNOWN(CHECKS, 8)
VCU__UNKNOWN(CHECKS, 9)
VCU__UNKNOWN(CHECKS, 10)
VCU__UNKNOWN(CHECKS, 11)
VCU__UNKNOWN(CHECKS, 12)
VCU__UNKNOWN(CHECKS, 13)
VCU__UNKNOWN(CHECKS, 14)
VCU__UNKNOWN(INTEGRITY, 2)
VCU__UNKNOWN(21318C60, 1)
VCU__UNKNOWN(6E163FBE, 1)
VCU__UNKNOWN(6E163FBE, 2)
VCU__UNKNOWN(6E163FBE, 3)
VCU__UNKNOWN(6E163FBE, 4)
VCU__UNKNOWN(6E163FBE, 5)
VCU__UNKNOWN(6E163FBE, 6)
VCU__UNKNOWN(6E163FBE, 8)
VCU__UNKNOWN(6E163FBE, 9)
VCU__UNKNOWN(6E163FBE, 10)
VCU__UNKNOWN(6E163FBE, 11)
VCU__UNKNOWN(6E163FBE, 12)
VCU__UNKNOWN(6E163FBE, 13)
VCU__UNKNOWN(6E163FBE, 14)
VCU__UNKNOWN(6E163FBE, 15)
VCU__UNKNOWN(1734DC26, 1)
VCU__UNKNOWN(1734DC26, 2)
VCU__UNKNOWN(1734DC26, 3)
VCU__UNKNOWN(1734DC26, 4)
VCU__UNKNOWN(1734DC26, 5)
VCU__UNKNOWN(1734DC26, 6)
VCU__UNKNOWN(1734DC26, 7)
VCU__UNKNOWN(1734DC26, 8)
VCU__UNKNOWN(1734DC26, 9)
VCU__UNKNOWN(1734DC26, 10)
VCU__UNKNOWN(1734DC26, 11)
VCU__UNKNOWN(1734DC26, 12)
VCU__UNKNOWN(1734DC26, 13)
VCU__UNKNOWN(1734DC26, 14)
VCU__UNKNOWN(1734DC26, 15)
VCU__UNKNOWN(1734DC26, 16)
VCU__UNKNOWN(1734DC26, 17)
VCU__UNKNOWN(1734DC26, 18)
VCU__UNKNOWN(1734DC26, 19)
VCU__UNKNOWN(1734DC26, 20)
VCU__UNKNOWN(1734DC26, 21)
VCU__UNKNOWN(1734DC26, 22)
VCU__UNKNOWN(1734DC26, 23)
VCU__UNKNOWN(1734DC26, 24)
VCU__UNKNOWN(1734DC26, 25)
VCU__UNKNOWN(1734DC26, 26)
VCU__UNKNOWN(1734DC26, 27)
VCU__UNKNOWN(1734DC26, 28)
VCU__UNKNOWN(1734DC26, 29)
VCU__UNKNOWN(1734DC26, 30)
VCU__UNKNOWN(1734DC26, 31)
VCU__UNKNOWN(21318C60, 2)
VCU__UNKNOWN(21318C60, 3)
VCU__UNKNOWN(21318C60, 5)
VCU__UNKNOWN(21318C60, 6)
VCU__UNKNOWN(21318C60, 7)
VCU__UNKNOWN(21318C60, 8)
VCU__UNKNOWN(21318C60, 9)
VCU__UNKNOWN(21318C60, 10)
VCU__UNKNOWN(21318C60, 11)
VCU__UNKNOWN(21318C60, 12)
VCU__UNKNOWN(21318C60, 13)
VCU__UNKNOWN(21318C60, 14)
VCU__UNKNOWN(21318C60, 15)
VCU__UNKNOWN(21318C60, 16)
VCU__UNKNOWN(21318C60, 17)
VCU__UNKNOWN(21318C60, 18)
VCU__UNKNOWN(21318C60, 19)
VCU__UNKNOWN(21318C60, 20)
VCU__UNKNOWN(21318C60, 21)
VCU__UNKNOWN(21318C60, 22)
VCU__UNKNOWN(21318C60, 23)
VCU__UNKNOWN(21318C60, 24)
VCU__UNKNOWN(21318C60, 25)
VCU__UNKNOWN(21318C60, 26)
VCU__UNKNOWN(21318C60, 27)
VCU__UNKNOWN(21318C60, 28)
VCU__UNKNOWN(21318C60, 29)
VCU__UNKNOWN(21318C60, 30)
VCU__UNKNOWN(21318C60, 31)
VCU__UNKNOWN(21318C60, 32)
VCU__UNKNOWN(21318C60, 33)
VCU__UNKNOWN(21318C60, 34)
VCU__UNKNOWN(21318C60, 35)
VCU__UNKNOWN(21318C60, 36)
VCU__UNKNOWN(21318C60, 37)
VCU__UNKNOWN(21318C60, 38)
VCU__UNKNOWN(21318C60, 40)
VCU__UNKNOWN(21318C60, 41)
VCU__UNKNOWN(21318C60, 42)
VCU__UNKNOWN(21318C60, 43)
VCU__UNKNOWN(21318C60, 44)
VCU__UNKNOWN(21318C60, 45)
VCU__UNKNOWN(21318C60, 46)
VCU__UNKNOWN(21318C60, 47)
VCU__UNKNOWN(21318C60, 48)
VCU__UNKNOWN(21318C60, 49)
VCU__UNKNOWN(21318C60, 50)
VCU__UNKNOWN(21318C60, 52)
VCU__UNKNOWN(21318C60, 53)
VCU__UNKNOWN(21318C60, 54)
VCU__UNKNOWN(21318C60, 55)
VCU__UNKNOWN(21318C60, 56)
VCU__UNKNOWN(21318C60, 57)
VCU__UNKNOWN(21318C60, 58)
VCU__UNKNOWN(21318C60, 59)
VCU__UNKNOWN(21318C60, 60)
VCU__UNKNOWN(21318C60, 61)
VCU__UNKNOWN(21318C60, 62)
VCU__UNKNOWN(21318C60, 63)
VCU__UNKNOWN(21318C60, 64)
VCU__UNKNOWN(21318C60, 65)
VCU__UNKNOWN(21318C60, 66)
VCU__UNKNOWN(21318C60, 67)
VCU__UNKNOWN(21318C60, 68)
VCU__UNKNOWN(21318C60, 69)
VCU__UNKNOWN(21318C60, 70)
VCU__UNKNOWN(21318C60, 71)
VCU__UNKNOWN(21318C60, 72)
VCU__UNKNOWN(21318C60, 73)
VCU__UNKNOWN(21318C60, 74)
VCU__UNKNOWN(21318C60, 75)
VCU__UNKNOWN(21318C60, 76)
VCU__UNKNOWN(21318C60, 77)
VCU__UNKNOWN(21318C60, 78)
VCU__UNKNOWN(21318C60, 79)
VCU__UNKNOWN(21318C60, 80)
VCU__UNKNOWN(21318C60, 81)
VCU__UNKNOWN(21318C60, 82)
VCU__UNKNOWN(21318C60, 83)
VCU__UNKNOWN(21318C60, 84)
VCU__UNKNOWN(21318C60, 85)
VCU__UNKNOWN(21318C60, 86)
VCU__UNKNOWN(21318C60, 87)
VCU__UNKNOWN(21318C60, 88)
VCU__UNKNOWN(21318C60, 89)
VCU__UNKNOWN(21318C60, 90)
VCU__UNKNOWN(21318C60, 91)
VCU__UNKNOWN(21318C60, 92)
VCU__UNKNOWN(21318C60, 93)
VCU__UNKNOWN(21318C60, 94)

#define VCU__FN(f) ((const void *)(f))
#define VCU__SIZE(n) ((const void *)(uintptr_t)((n) * sizeof(void *)))

/* ---- CUDART_INTERFACE ------------------------------------------------------ */

/* [1]: a module from nvcc's fatbin wrapper (what __cudaRegisterFatBinary
 * gets). */
static CUresult vcu__cudart_module(CUmodule *module, const void *wrapper)
{
    if (module == NULL || wrapper == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadData(module, wrapper);
}

/* Arguments 3 to 5 of [6] and [8]: what they carry is not known; the
 * runtime has passed none (NULL, NULL, 0) in every run seen. */
static CUresult vcu__cudart_extra(const char *slot, void *a3, void *a4, unsigned int a5)
{
    static int logged;

    if (a3 == NULL && a4 == NULL && a5 == 0)
        return CUDA_SUCCESS;
    vcu__log_once(&logged,
                  "libcuda (virtio-cuda): CUDART_INTERFACE %s with arguments %p %p %u: "
                  "not supported\n", slot, a3, a4, a5);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* [6]: [1] with three more arguments. */
static CUresult vcu__cudart_module_ext1(CUmodule *module, const void *wrapper, void *a3,
                                        void *a4, unsigned int a5)
{
    CUresult e = vcu__cudart_extra("[6]", a3, a4, a5);

    return e != CUDA_SUCCESS ? e : vcu__cudart_module(module, wrapper);
}

/* [8]: the image first (a fatbin, or its wrapper), then the result. */
static CUresult vcu__cudart_module_ext2(const void *image, CUmodule *module, void *a3, void *a4,
                                        unsigned int a5)
{
    CUresult e = vcu__cudart_extra("[8]", a3, a4, a5);

    return e != CUDA_SUCCESS ? e : vcu__cudart_module(module, image);
}

/* [2]: the device's primary context, not retained (NVIDIA's driver
 * leaves it inactive: measured). */
static CUresult vcu__cudart_primary(CUcontext *pctx, CUdevice dev)
{
    vcu__ctx_t *c;
    CUresult e;

    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__primary(dev, &c);
    if (e != CUDA_SUCCESS)
        return e;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

/* [7]: takes one word and does nothing the runtime can see. */
static CUresult vcu__cudart_fn7(size_t arg)
{
    (void)arg;
    return CUDA_SUCCESS;
}

/* [12]: NVIDIA's loads its JIT compilers here; the host's driver has its
 * own. */
static CUresult vcu__cudart_load_compilers(void)
{
    return CUDA_SUCCESS;
}

static const void *const vcu__cudart_table[13] = {
    VCU__SIZE(13),
    VCU__FN(vcu__cudart_module),
    VCU__FN(vcu__cudart_primary),
    VCU__FN(vcu__unk_CUDART_3),
    VCU__FN(vcu__unk_CUDART_4),
    VCU__FN(vcu__unk_CUDART_5),
    VCU__FN(vcu__cudart_module_ext1),
    VCU__FN(vcu__cudart_fn7),
    VCU__FN(vcu__cudart_module_ext2),
    VCU__FN(vcu__unk_CUDART_9),
    NULL,                           /* NULL in NVIDIA's too */
    VCU__FN(vcu__unk_CUDART_11),
    VCU__FN(vcu__cudart_load_compilers),
};

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS, TOOLS_TLS ------------------------------- */

/* Buffers tools (CUPTI) would fill; all zero: no tool is attached. */
static uint64_t vcu__hooks_buf2[1024];
static uint8_t vcu__hooks_buf6[14];

static void vcu__hooks_fn2(void **ptr, size_t *size)
{
    if (ptr != NULL)
        *ptr = vcu__hooks_buf2;
    if (size != NULL)
        *size = sizeof(vcu__hooks_buf2);
}

static void vcu__hooks_fn6(void **ptr, size_t *size)
{
    if (ptr != NULL)
        *ptr = vcu__hooks_buf6;
    if (size != NULL)
        *size = sizeof(vcu__hooks_buf6);
}

static const void *const vcu__hooks_table[7] = {
    VCU__SIZE(7),
    VCU__FN(vcu__unk_HOOKS_1),
    VCU__FN(vcu__hooks_fn2),
    VCU__FN(vcu__unk_HOOKS_3),
    VCU__FN(vcu__unk_HOOKS_4),
    VCU__FN(vcu__unk_HOOKS_5),
    VCU__FN(vcu__hooks_fn6),
};

/*
 * TOOLS_TLS [2]: the calling thread's current context into *pctx, as
 * cuCtxGetCurrent.  cuBLASLt 13 calls it for its kernel registry (seen
 * against the stand-in: its first argument points at a zeroed slot; with
 * the call refused every matmul is CUBLAS_STATUS_NOT_SUPPORTED); public
 * tracers name the slot "get thread context".  Not measured on NVIDIA's
 * driver.
 */
static CUresult vcu__tls_current_context(CUcontext *pctx)
{
    if (pctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return cuCtxGetCurrent(pctx);
}

static const void *const vcu__tls_table[3] = {
    VCU__SIZE(3),
    VCU__FN(vcu__unk_TLS_1),
    VCU__FN(vcu__tls_current_context),
};

/*
 * 21318c60 [51] (ctx, which, void **out): cuBLAS 13 calls it from
 * cublasSgemm with the current context, 0 and a slot to fill, and fails
 * with CUBLAS_STATUS_INTERNAL_ERROR when it is refused (seen against the
 * stand-in).  What the object is, is not known; LUPINE answers with a
 * zeroed 512-byte object (and CUDA_ERROR_INVALID_HANDLE for which = ~0),
 * which is what this does: one per process, never written here.
 */
static CUresult vcu__21318c60_51(CUcontext ctx, uint64_t which, void **out)
{
    static _Alignas(64) unsigned char obj[512];
    vcu__ctx_t *c = (vcu__ctx_t *)ctx;
    CUresult e;

    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (which == UINT64_MAX)
        return CUDA_ERROR_INVALID_HANDLE;
    if (c == NULL) {
        e = vcu__cur(&c);
        if (e != CUDA_SUCCESS)
            return e;
    } else if (!vcu__reg_has(c, VCU__K_CTX)) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    *out = obj;
    return CUDA_SUCCESS;
}

/*
 * 21318c60 [39] (ctx, object, uint64_t *out): cuBLAS 13 calls it after
 * [51] with the current context and, it seems, [51]'s object (seen
 * against the stand-in, *out zero before).  Answered as LUPINE does:
 * *out = 0.
 */
static CUresult vcu__21318c60_39(CUcontext ctx, const void *object, uint64_t *out)
{
    (void)ctx;
    (void)object;
    if (out == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *out = 0;
    return CUDA_SUCCESS;
}

/*
 * 21318c60: asked for by CUDA 13 libraries (cuBLASLt 13); 95 slots with
 * the size, as on NVIDIA's driver 595.99.02 (DRIVER-API-FACTS.md: not
 * measured on 580).  [4] is a context's unique number, as cuCtxGetId
 * (ctx, &id) (cuBLASLt calls it right after TOOLS_TLS [2]; public tracers
 * name it "get context number", LUPINE answers it with a nonzero
 * value), [39] and [51] above.  What the other slots do is not known: each says
 * once that it was called and returns CUDA_ERROR_NOT_SUPPORTED.
 */
static const void *const vcu__21318c60_table[95] = {
    VCU__SIZE(95),
    VCU__FN(vcu__unk_21318C60_1),
    VCU__FN(vcu__unk_21318C60_2),
    VCU__FN(vcu__unk_21318C60_3),
    VCU__FN(cuCtxGetId),
    VCU__FN(vcu__unk_21318C60_5),
    VCU__FN(vcu__unk_21318C60_6),
    VCU__FN(vcu__unk_21318C60_7),
    VCU__FN(vcu__unk_21318C60_8),
    VCU__FN(vcu__unk_21318C60_9),
    VCU__FN(vcu__unk_21318C60_10),
    VCU__FN(vcu__unk_21318C60_11),
    VCU__FN(vcu__unk_21318C60_12),
    VCU__FN(vcu__unk_21318C60_13),
    VCU__FN(vcu__unk_21318C60_14),
    VCU__FN(vcu__unk_21318C60_15),
    VCU__FN(vcu__unk_21318C60_16),
    VCU__FN(vcu__unk_21318C60_17),
    VCU__FN(vcu__unk_21318C60_18),
    VCU__FN(vcu__unk_21318C60_19),
    VCU__FN(vcu__unk_21318C60_20),
    VCU__FN(vcu__unk_21318C60_21),
    VCU__FN(vcu__unk_21318C60_22),
    VCU__FN(vcu__unk_21318C60_23),
    VCU__FN(vcu__unk_21318C60_24),
    VCU__FN(vcu__unk_21318C60_25),
    VCU__FN(vcu__unk_21318C60_26),
    VCU__FN(vcu__unk_21318C60_27),
    VCU__FN(vcu__unk_21318C60_28),
    VCU__FN(vcu__unk_21318C60_29),
    VCU__FN(vcu__unk_21318C60_30),
    VCU__FN(vcu__unk_21318C60_31),
    VCU__FN(vcu__unk_21318C60_32),
    VCU__FN(vcu__unk_21318C60_33),
    VCU__FN(vcu__unk_21318C60_34),
    VCU__FN(vcu__unk_21318C60_35),
    VCU__FN(vcu__unk_21318C60_36),
    VCU__FN(vcu__unk_21318C60_37),
    VCU__FN(vcu__unk_21318C60_38),
    VCU__FN(vcu__21318c60_39),
    VCU__FN(vcu__unk_21318C60_40),
    VCU__FN(vcu__unk_21318C60_41),
    VCU__FN(vcu__unk_21318C60_42),
    VCU__FN(vcu__unk_21318C60_43),
    VCU__FN(vcu__unk_21318C60_44),
    VCU__FN(vcu__unk_21318C60_45),
    VCU__FN(vcu__unk_21318C60_46),
    VCU__FN(vcu__unk_21318C60_47),
    VCU__FN(vcu__unk_21318C60_48),
    VCU__FN(vcu__unk_21318C60_49),
    VCU__FN(vcu__unk_21318C60_50),
    VCU__FN(vcu__21318c60_51),
    VCU__FN(vcu__unk_21318C60_52),
    VCU__FN(vcu__unk_21318C60_53),
    VCU__FN(vcu__unk_21318C60_54),
    VCU__FN(vcu__unk_21318C60_55),
    VCU__FN(vcu__unk_21318C60_56),
    VCU__FN(vcu__unk_21318C60_57),
    VCU__FN(vcu__unk_21318C60_58),
    VCU__FN(vcu__unk_21318C60_59),
    VCU__FN(vcu__unk_21318C60_60),
    VCU__FN(vcu__unk_21318C60_61),
    VCU__FN(vcu__unk_21318C60_62),
    VCU__FN(vcu__unk_21318C60_63),
    VCU__FN(vcu__unk_21318C60_64),
    VCU__FN(vcu__unk_21318C60_65),
    VCU__FN(vcu__unk_21318C60_66),
    VCU__FN(vcu__unk_21318C60_67),
    VCU__FN(vcu__unk_21318C60_68),
    VCU__FN(vcu__unk_21318C60_69),
    VCU__FN(vcu__unk_21318C60_70),
    VCU__FN(vcu__unk_21318C60_71),
    VCU__FN(vcu__unk_21318C60_72),
    VCU__FN(vcu__unk_21318C60_73),
    VCU__FN(vcu__unk_21318C60_74),
    VCU__FN(vcu__unk_21318C60_75),
    VCU__FN(vcu__unk_21318C60_76),
    VCU__FN(vcu__unk_21318C60_77),
    VCU__FN(vcu__unk_21318C60_78),
    VCU__FN(vcu__unk_21318C60_79),
    VCU__FN(vcu__unk_21318C60_80),
    VCU__FN(vcu__unk_21318C60_81),
    VCU__FN(vcu__unk_21318C60_82),
    VCU__FN(vcu__unk_21318C60_83),
    VCU__FN(vcu__unk_21318C60_84),
    VCU__FN(vcu__unk_21318C60_85),
    VCU__FN(vcu__unk_21318C60_86),
    VCU__FN(vcu__unk_21318C60_87),
    VCU__FN(vcu__unk_21318C60_88),
    VCU__FN(vcu__unk_21318C60_89),
    VCU__FN(vcu__unk_21318C60_90),
    VCU__FN(vcu__unk_21318C60_91),
    VCU__FN(vcu__unk_21318C60_92),
    VCU__FN(vcu__unk_21318C60_93),
    VCU__FN(vcu__unk_21318C60_94),
};

/*
 * f8cff951 [1]: where the runtime reports its error messages (measured:
 * called as ("CUDA", 0, printf format, va_list) when cudaSetDevice gets
 * a bad ordinal, with the message the runtime's cudaGetErrorString does
 * not give).  NVIDIA's driver keeps such messages for cuLogs*, which this
 * library does not offer: they go to stderr with VCU_LIBCUDA_TRACE=1 and
 * are dropped otherwise.
 */
static CUresult vcu__rt_log(const char *component, uintptr_t arg, const char *fmt, va_list ap)
{
    (void)arg;
    if (fmt == NULL || !vcu__tracing())
        return CUDA_SUCCESS;
    fprintf(stderr, "libcuda (virtio-cuda): trace: %s: ", component != NULL ? component : "?");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    return CUDA_SUCCESS;
}

static const void *const vcu__f8cff951_table[3] = {
    VCU__SIZE(3),
    VCU__FN(vcu__rt_log),
    VCU__FN(vcu__unk_F8CFF951_2),
};

/* ---- context-local storage -------------------------------------------------- */

/* One value per (context, key); each runtime instance in the process uses
 * its own key.  Lists hang off the context, under vcu__drv.lock. */
struct vcu__cls_s {
    void *key;
    void *value;
    vcu__cls_dtor_t dtor;
    vcu__cls_t *next;
};

static CUresult vcu__cls_ctx(CUcontext ctx, vcu__ctx_t **out)
{
    CUresult e;

    if (ctx == NULL)
        return vcu__cur(out);
    e = vcu__check_init();
    if (e != CUDA_SUCCESS)
        return e;
    if (!vcu__reg_has(ctx, VCU__K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = (vcu__ctx_t *)ctx;
    return CUDA_SUCCESS;
}

/* [0]: put(ctx, key, value, dtor); a key already there gets the new value. */
static CUresult vcu__cls_put(CUcontext ctx, void *key, void *value, vcu__cls_dtor_t dtor)
{
    vcu__cls_t *n;
    vcu__ctx_t *c;
    CUresult e = vcu__cls_ctx(ctx, &c);

    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    for (n = c->cls; n != NULL; n = n->next)
        if (n->key == key)
            break;
    if (n == NULL) {
        n = calloc(1, sizeof(*n));
        if (n == NULL) {
            pthread_mutex_unlock(&vcu__drv.lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        n->key = key;
        n->next = c->cls;
        c->cls = n;
    }
    n->value = value;
    n->dtor = dtor;
    pthread_mutex_unlock(&vcu__drv.lock);
    return CUDA_SUCCESS;
}

/* [1]: delete(ctx, key): forgets the value without calling its destructor. */
static CUresult vcu__cls_delete(CUcontext ctx, void *key)
{
    vcu__cls_t **p, *n = NULL;
    vcu__ctx_t *c;
    CUresult e = vcu__cls_ctx(ctx, &c);

    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    for (p = &c->cls; *p != NULL; p = &(*p)->next) {
        if ((*p)->key == key) {
            n = *p;
            *p = n->next;
            break;
        }
    }
    pthread_mutex_unlock(&vcu__drv.lock);
    free(n);
    return n != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* [2]: get(&value, ctx, key); no value is CUDA_ERROR_INVALID_HANDLE. */
static CUresult vcu__cls_get(void **value, CUcontext ctx, void *key)
{
    vcu__cls_t *n;
    vcu__ctx_t *c;
    CUresult e;

    if (value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cls_ctx(ctx, &c);
    if (e != CUDA_SUCCESS)
        return e;
    pthread_mutex_lock(&vcu__drv.lock);
    for (n = c->cls; n != NULL; n = n->next)
        if (n->key == key)
            break;
    if (n != NULL)
        *value = n->value;
    pthread_mutex_unlock(&vcu__drv.lock);
    return n != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void vcu__cls_destroy(vcu__ctx_t *c)
{
    vcu__cls_t *n;

    pthread_mutex_lock(&vcu__drv.lock);
    n = c->cls;
    c->cls = NULL;
    pthread_mutex_unlock(&vcu__drv.lock);
    /* Without the lock: a destructor calls back into this library. */
    while (n != NULL) {
        vcu__cls_t *next = n->next;

        if (n->dtor != NULL)
            n->dtor((CUcontext)c, n->key, n->value);
        free(n);
        n = next;
    }
}

/* No size slot in this one; [3] is NULL in NVIDIA's too. */
static const void *const vcu__cls_table[4] = {
    VCU__FN(vcu__cls_put),
    VCU__FN(vcu__cls_delete),
    VCU__FN(vcu__cls_get),
    NULL,
};

/* ---- CONTEXT_CHECKS --------------------------------------------------------- */

/* [2]: is ctx (NULL: the current one) a wrapper around another context?
 * Never here.  As NVIDIA's driver answered: *is_wrapped = 0 and
 * *unwrapped untouched; no current context is CUDA_ERROR_INVALID_CONTEXT
 * with nothing written. */
static CUresult vcu__checks_context(CUcontext ctx, uint32_t *is_wrapped, CUcontext *unwrapped)
{
    vcu__ctx_t *c;
    CUresult e;

    (void)unwrapped;
    if (is_wrapped == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    e = vcu__cls_ctx(ctx, &c);
    if (e != CUDA_SUCCESS)
        return e;
    *is_wrapped = 0;
    return CUDA_SUCCESS;
}

/* [3]: NVIDIA's returns 0. */
static int vcu__checks_fn3(void)
{
    return 0;
}

static const void *const vcu__checks_table[15] = {
    VCU__SIZE(15),
    VCU__FN(vcu__unk_CHECKS_1),
    VCU__FN(vcu__checks_context),
    VCU__FN(vcu__checks_fn3),
    VCU__FN(vcu__unk_CHECKS_4),
    VCU__FN(vcu__unk_CHECKS_5),
    VCU__FN(vcu__unk_CHECKS_6),
    VCU__FN(vcu__unk_CHECKS_7),
    VCU__FN(vcu__unk_CHECKS_8),
    VCU__FN(vcu__unk_CHECKS_9),
    VCU__FN(vcu__unk_CHECKS_10),
    VCU__FN(vcu__unk_CHECKS_11),
    VCU__FN(vcu__unk_CHECKS_12),
    VCU__FN(vcu__unk_CHECKS_13),
    VCU__FN(vcu__unk_CHECKS_14),
};

/* ---- INTEGRITY_CHECK -------------------------------------------------------- */

static CUresult vcu__integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t *result);

static const void *const vcu__integrity_table[3] = {
    VCU__SIZE(3),
    VCU__FN(vcu__integrity_check),
    VCU__FN(vcu__unk_INTEGRITY_2),
};

/*
 * [1]: the runtime checks that the driver it talks to computes this from
 * the same values it sees (cuda_integrity.c): this library's version,
 * tables and devices as this library reports them.  Checked against
 * NVIDIA's driver with tests/gpu/probe-integrity.c.
 */
static CUresult vcu__integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t *result)
{
    vcu__integrity_dev_t devs[VCU_CU_MAX_DEVICES];
    vcu__integrity_in_t in;
    int drv = 0, ndev = 0;

    if (result == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    cuDriverGetVersion(&drv);
    if (cuDeviceGetCount(&ndev) != CUDA_SUCCESS)
        ndev = 0;
    if (ndev > (int)VCU_CU_MAX_DEVICES)
        ndev = (int)VCU_CU_MAX_DEVICES;
    memset(devs, 0, sizeof(devs));
    for (int d = 0; d < ndev; d++) {
        CUuuid u;
        int v;

        if (cuDeviceGetUuid_v2(&u, d) == CUDA_SUCCESS)
            memcpy(devs[d].uuid, u.bytes, sizeof(devs[d].uuid));
        if (cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d) == CUDA_SUCCESS)
            devs[d].pci_domain = v;
        if (cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d) == CUDA_SUCCESS)
            devs[d].pci_bus = v;
        if (cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d) == CUDA_SUCCESS)
            devs[d].pci_device = v;
    }
    memset(&in, 0, sizeof(in));
    in.driver_version = (uint32_t)drv;
    in.version = version;
    in.pid = (uint32_t)getpid();
    in.tid = (uint32_t)(uintptr_t)pthread_self();
    in.cudart_table = vcu__cudart_table;
    in.integrity_table = vcu__integrity_table;
    in.integrity_fn = vcu__integrity_table[1];
    in.unix_seconds = unix_seconds;
    vcu__integrity(&in, devs, ndev, result);
    return CUDA_SUCCESS;
}

/*
 * 1734dc26: cuBLASLt 13 asks for it and crashes when refused (it follows
 * the NULL pointer; seen against the stand-in).  Its size and slots on
 * NVIDIA's driver are not known: 32 slots, each saying once that it was
 * called and refusing, so that what a library calls shows in the log.
 */
static const void *const vcu__1734dc26_table[32] = {
    VCU__SIZE(32),
    VCU__FN(vcu__unk_1734DC26_1),
    VCU__FN(vcu__unk_1734DC26_2),
    VCU__FN(vcu__unk_1734DC26_3),
    VCU__FN(vcu__unk_1734DC26_4),
    VCU__FN(vcu__unk_1734DC26_5),
    VCU__FN(vcu__unk_1734DC26_6),
    VCU__FN(vcu__unk_1734DC26_7),
    VCU__FN(vcu__unk_1734DC26_8),
    VCU__FN(vcu__unk_1734DC26_9),
    VCU__FN(vcu__unk_1734DC26_10),
    VCU__FN(vcu__unk_1734DC26_11),
    VCU__FN(vcu__unk_1734DC26_12),
    VCU__FN(vcu__unk_1734DC26_13),
    VCU__FN(vcu__unk_1734DC26_14),
    VCU__FN(vcu__unk_1734DC26_15),
    VCU__FN(vcu__unk_1734DC26_16),
    VCU__FN(vcu__unk_1734DC26_17),
    VCU__FN(vcu__unk_1734DC26_18),
    VCU__FN(vcu__unk_1734DC26_19),
    VCU__FN(vcu__unk_1734DC26_20),
    VCU__FN(vcu__unk_1734DC26_21),
    VCU__FN(vcu__unk_1734DC26_22),
    VCU__FN(vcu__unk_1734DC26_23),
    VCU__FN(vcu__unk_1734DC26_24),
    VCU__FN(vcu__unk_1734DC26_25),
    VCU__FN(vcu__unk_1734DC26_26),
    VCU__FN(vcu__unk_1734DC26_27),
    VCU__FN(vcu__unk_1734DC26_28),
    VCU__FN(vcu__unk_1734DC26_29),
    VCU__FN(vcu__unk_1734DC26_30),
    VCU__FN(vcu__unk_1734DC26_31),
};

/*
 * 6e163fbe [7] (ctx, module, callback, arg): calls callback(arg, f) for
 * each kernel f of the module and returns how many; 0 for a bad context
 * or module.  cuFFT 12 calls it for each module it loads from PTX (one
 * kernel each) with a callback that keeps f, uses f
 * as a CUfunction (launches), and takes any result but 1 as
 * CUFFT_INTERNAL_ERROR (read in its code: so the result is a count or a
 * boolean, not a CUresult; for one kernel both are 1).  NVIDIA's driver
 * hands the callback its own function objects, which a CUfunction is;
 * here it is this library's CUfunction, the one cuModuleGetFunction
 * gives for that name.  Public tracers call the table "ToolsModule"
 * (CU_ETID_ToolsModule).  Measured on NVIDIA's driver 580
 * (tests/gpu/probe-libs.c): the count of kernels, also with a NULL
 * context and with a NULL callback (no calls); 0 for a bad module; the
 * callback gets (arg, f, ...) with f what cuModuleGetFunction gives, and
 * further arguments (the name, the module) cuFFT does not read.
 */
/* With no callback, NVIDIA's driver still counts (measured). */
static void vcu__6e163fbe_7_count(void *arg, CUfunction f)
{
    (void)arg;
    (void)f;
}

static int vcu__6e163fbe_7(CUcontext ctx, CUmodule hmod, void (*cb)(void *arg, CUfunction f),
                           void *arg)
{
    vcu__ctx_t *c = (vcu__ctx_t *)ctx;
    vcu__module_t *m = (vcu__module_t *)hmod;
    unsigned int n = 0;

    if (cb == NULL)
        cb = vcu__6e163fbe_7_count;
    if (c == NULL) {
        if (vcu__cur(&c) != CUDA_SUCCESS)
            return 0;
    } else if (!vcu__reg_has(c, VCU__K_CTX)) {
        return 0;
    }
    if (!vcu__reg_has(m, VCU__K_MODULE) || m->dev != c->dev)
        return 0;
    /* A kernel that cannot be had stops the walk: n says how far it got. */
    vcu__module_kernels(m, cb, arg, &n);
    return (int)n;
}

/*
 * 6e163fbe: cuFFT 12 asks for it (cufftPlan1d fails without it); LUPINE
 * calls it a private module iterator.  16 slots (cuFFT checks there are
 * more than 7); [7] above, the others each say once that they were
 * called and refuse.
 */
static const void *const vcu__6e163fbe_table[16] = {
    VCU__SIZE(16),
    VCU__FN(vcu__unk_6E163FBE_1),
    VCU__FN(vcu__unk_6E163FBE_2),
    VCU__FN(vcu__unk_6E163FBE_3),
    VCU__FN(vcu__unk_6E163FBE_4),
    VCU__FN(vcu__unk_6E163FBE_5),
    VCU__FN(vcu__unk_6E163FBE_6),
    VCU__FN(vcu__6e163fbe_7),
    VCU__FN(vcu__unk_6E163FBE_8),
    VCU__FN(vcu__unk_6E163FBE_9),
    VCU__FN(vcu__unk_6E163FBE_10),
    VCU__FN(vcu__unk_6E163FBE_11),
    VCU__FN(vcu__unk_6E163FBE_12),
    VCU__FN(vcu__unk_6E163FBE_13),
    VCU__FN(vcu__unk_6E163FBE_14),
    VCU__FN(vcu__unk_6E163FBE_15),
};

/* ---- cuGetExportTable ------------------------------------------------------- */

static const void *const *const vcu__tables[VCU__NTABLES] = {
    [VCU__T_F8CFF951] = vcu__f8cff951_table,
    [VCU__T_CUDART] = vcu__cudart_table,
    [VCU__T_HOOKS] = vcu__hooks_table,
    [VCU__T_TLS] = vcu__tls_table,
    [VCU__T_CLS] = vcu__cls_table,
    [VCU__T_CHECKS] = vcu__checks_table,
    [VCU__T_INTEGRITY] = vcu__integrity_table,
    [VCU__T_21318C60] = vcu__21318c60_table,
    [VCU__T_1734DC26] = vcu__1734dc26_table,
    [VCU__T_6E163FBE] = vcu__6e163fbe_table,
};

const void *vcu__export_table(const CUuuid *id)
{
    for (int i = 0; i < VCU__NTABLES; i++)
        if (memcmp(vcu__table_ids[i], id->bytes, sizeof(id->bytes)) == 0)
            return vcu__tables[i];
    return NULL;
}
