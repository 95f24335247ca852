#!/usr/bin/env python3
"""GPU host probe behind the stack limit's cover of kernels' local memory
(host-backend/worker/cuda_ctx.c, vcu__stack_cover; docs/design.md "Memory
quota").  Needs only python3 and NVIDIA's libcuda.so.1 (no compiler: the
kernels are PTX, compiled by the driver).

For a kernel with 16 KiB of local memory in its own frame (k_own) and one
whose 16 KiB are a callee's frame (k_call), each loaded whole
(cuModuleLoadData) and linked by the driver's linker (cuLink*, separate
compilation), in a fresh primary context each time:
  m0  launched with the default stack limit (flags 0, and
      CU_CTX_LMEM_RESIZE_TO_MAX): CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, the
      stack limit before and after, the GPU memory the launch took, and
      whether a later launch of a kernel without local memory gives it back;
  m1  the stack limit set to LOCAL_SIZE_BYTES first (the backend's cover):
      what the set took, what the launch takes on top;
  m2  set 16 bytes short of it;
  m3  launched, then the limit set back to 1024 and launched again;
  m4  the limit set to 16 KiB first.
Then dynamic parallelism: a parent kernel that launches, from the device,
a child with 16 KiB of local memory (linked with the toolkit's
libcudadevrt.a, which must be on the host), the parent launched with the
default limit and with the limit set to the child's local size first.
Last, a recursive kernel (k_rec, its stack unknown to the compiler) with
the default limit, once: it may fault, which ends the process's CUDA.
"Drop" is free memory lost (cuMemGetInfo), in MiB and in bytes per thread
of SMs x threads per SM.

    python3 tests/gpu/probe-lmem.py

Measured on an H200 (driver 580, 132 SMs x 2048 threads):
  LOCAL_SIZE_BYTES 16384 for both kernels, whole and linked; a launch with
  the default 1 KiB stack raised the stack limit to 16384 and took 15360
  bytes a thread (3960 MiB), kept after other launches, with or without
  CU_CTX_LMEM_RESIZE_TO_MAX; with the limit set to LOCAL_SIZE_BYTES first
  the launch took nothing, 16 bytes short it took 16 bytes a thread; set
  back to 1024 the memory came back, and the next launch grew it again.
  Dynamic parallelism: the parent's LOCAL_SIZE_BYTES was 16, the child's
  16384, and launching the parent grew the stack limit to 16384 (3960
  MiB) all the same; with the limit at 16384 first it took nothing.  So
  a parent grows the stack for the kernels it may launch, past its own
  LOCAL_SIZE_BYTES: the cover at lookup does not see it (an open hole,
  docs/design.md).
  k_rec: LOCAL_SIZE_BYTES 0, the launch grew nothing and faulted
  (CUDA_ERROR_ILLEGAL_ADDRESS: its frame overflowed the 1 KiB stack).
"""
import ctypes as C
import glob
import sys

OWN_CALL = b"""
.version 8.0
.target sm_90
.address_size 64
.func (.reg .b32 rv) deep(.reg .b32 i)
{
.local .align 4 .b8 buf[16384];
.reg .b32 t;
.reg .b64 a, o;
and.b32 t, i, 4095;
mul.wide.u32 o, t, 4;
mov.u64 a, buf;
cvta.local.u64 a, a;
add.u64 a, a, o;
st.volatile.u32 [a], i;
ld.volatile.u32 rv, [a];
ret;
}
.visible .entry k_call(.param .u64 po, .param .u32 pi)
{
.reg .b32 i, r;
.reg .b64 o;
ld.param.u64 o, [po];
ld.param.u32 i, [pi];
call (r), deep, (i);
cvta.to.global.u64 o, o;
st.global.u32 [o], r;
ret;
}
.visible .entry k_own(.param .u64 po, .param .u32 pi)
{
.local .align 4 .b8 buf[16384];
.reg .b32 i, t, r;
.reg .b64 a, o, g;
ld.param.u64 g, [po];
ld.param.u32 i, [pi];
and.b32 t, i, 4095;
mul.wide.u32 o, t, 4;
mov.u64 a, buf;
cvta.local.u64 a, a;
add.u64 a, a, o;
st.volatile.u32 [a], i;
ld.volatile.u32 r, [a];
cvta.to.global.u64 g, g;
st.global.u32 [g], r;
ret;
}
"""

RECUR = b"""
.version 8.0
.target sm_90
.address_size 64
.func (.reg .b32 rv) rec(.reg .b32 n)
{
.local .align 4 .b8 buf[4096];
.reg .b32 t, m;
.reg .b64 a, o;
.reg .pred p;
and.b32 t, n, 1023;
mul.wide.u32 o, t, 4;
mov.u64 a, buf;
cvta.local.u64 a, a;
add.u64 a, a, o;
st.volatile.u32 [a], n;
ld.volatile.u32 rv, [a];
setp.gt.s32 p, n, 0;
@!p ret;
sub.s32 m, n, 1;
call (t), rec, (m);
add.s32 rv, rv, t;
ret;
}
.visible .entry k_rec(.param .u64 po, .param .u32 pi)
{
.reg .b32 i, r;
.reg .b64 o;
ld.param.u64 o, [po];
ld.param.u32 i, [pi];
call (r), rec, (i);
cvta.to.global.u64 o, o;
st.global.u32 [o], r;
ret;
}
"""

# nvcc -rdc=true -ptx of: a child with 16 KiB of local memory, and a
# parent that launches it from the device (dynamic parallelism).
CDP = b"""
.version 9.0
.target sm_90
.address_size 64
.extern .func (.param .b64 func_retval0) __cudaCDP2GetParameterBufferV2
(
.param .b64 __cudaCDP2GetParameterBufferV2_param_0,
.param .align 4 .b8 __cudaCDP2GetParameterBufferV2_param_1[12],
.param .align 4 .b8 __cudaCDP2GetParameterBufferV2_param_2[12],
.param .b32 __cudaCDP2GetParameterBufferV2_param_3
)
;
.extern .func (.param .b32 func_retval0) __cudaCDP2LaunchDeviceV2
(
.param .b64 __cudaCDP2LaunchDeviceV2_param_0,
.param .b64 __cudaCDP2LaunchDeviceV2_param_1
)
;
.visible .entry c_child(
.param .u64 c_child_param_0,
.param .u32 c_child_param_1
)
{
.local .align 16 .b8 __local_depot0[16384];
.reg .b64 %SP;
.reg .b64 %SPL;
.reg .b32 %r<5>;
.reg .b64 %rd<11>;
mov.u64 %SPL, __local_depot0;
ld.param.u64 %rd1, [c_child_param_0];
ld.param.u32 %r1, [c_child_param_1];
cvta.to.global.u64 %rd2, %rd1;
add.u64 %rd4, %SPL, 0;
shl.b32 %r2, %r1, 2;
cvt.u64.u32 %rd5, %r2;
and.b64 %rd6, %rd5, 16380;
add.s64 %rd7, %rd4, %rd6;
st.local.u32 [%rd7], %r1;
mul.lo.s32 %r3, %r1, 28;
cvt.u64.u32 %rd8, %r3;
and.b64 %rd9, %rd8, 16380;
add.s64 %rd10, %rd4, %rd9;
ld.local.u32 %r4, [%rd10];
st.global.u32 [%rd2], %r4;
ret;
}
.visible .entry c_parent(
.param .u64 c_parent_param_0,
.param .u32 c_parent_param_1
)
{
.reg .pred %p<3>;
.reg .b32 %r<6>;
.reg .b64 %rd<4>;
ld.param.u64 %rd2, [c_parent_param_0];
ld.param.u32 %r1, [c_parent_param_1];
mov.u32 %r2, %tid.x;
mov.u32 %r3, %ctaid.x;
or.b32 %r4, %r2, %r3;
setp.ne.s32 %p1, %r4, 0;
@%p1 bra $L__BB1_3;
mov.u64 %rd3, c_child;
{ // callseq 0, 0
.reg .b32 temp_param_reg;
.param .b64 param0;
st.param.b64 [param0+0], %rd3;
.param .align 4 .b8 param1[12];
st.param.b32 [param1+0], 1;
st.param.b32 [param1+4], 1;
st.param.b32 [param1+8], 1;
.param .align 4 .b8 param2[12];
st.param.b32 [param2+0], 1;
st.param.b32 [param2+4], 1;
st.param.b32 [param2+8], 1;
.param .b32 param3;
st.param.b32 [param3+0], 0;
.param .b64 retval0;
call.uni (retval0),
__cudaCDP2GetParameterBufferV2,
(
param0,
param1,
param2,
param3
);
ld.param.b64 %rd1, [retval0+0];
} // callseq 0
setp.eq.s64 %p2, %rd1, 0;
@%p2 bra $L__BB1_3;
st.u64 [%rd1], %rd2;
st.u32 [%rd1+8], %r1;
{ // callseq 1, 0
.reg .b32 temp_param_reg;
.param .b64 param0;
st.param.b64 [param0+0], %rd1;
.param .b64 param1;
st.param.b64 [param1+0], 0;
.param .b32 retval0;
call.uni (retval0),
__cudaCDP2LaunchDeviceV2,
(
param0,
param1
);
ld.param.b32 %r5, [retval0+0];
} // callseq 1
$L__BB1_3:
ret;
}
"""

NONE = b"""
.visible .entry k_none(.param .u64 po, .param .u32 pi)
{
.reg .b32 i;
.reg .b64 g;
ld.param.u64 g, [po];
ld.param.u32 i, [pi];
cvta.to.global.u64 g, g;
st.global.u32 [g], i;
ret;
}
"""

CU_LIMIT_STACK_SIZE = 0
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39
CU_JIT_INPUT_PTX = 1
CU_JIT_INPUT_LIBRARY = 4
CU_CTX_LMEM_RESIZE_TO_MAX = 0x10

cu = C.CDLL('libcuda.so.1')


def fn(name):
    """The _v2 entry point where the driver has one (as cuda.h maps them)."""
    return getattr(cu, name + '_v2') if hasattr(cu, name + '_v2') else getattr(cu, name)


def ck(r, what):
    if r:
        print(what, '->', r)
    return r


ck(cu.cuInit(0), 'cuInit')
dev = C.c_int()
ck(cu.cuDeviceGet(C.byref(dev), 0), 'cuDeviceGet')
dev = dev.value


def attr(a):
    v = C.c_int()
    cu.cuDeviceGetAttribute(C.byref(v), a, dev)
    return v.value


THREADS = (attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) *
           attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR))


def free_mem():
    f, t = C.c_size_t(), C.c_size_t()
    fn('cuMemGetInfo')(C.byref(f), C.byref(t))
    return f.value


def stack():
    v = C.c_size_t()
    cu.cuCtxGetLimit(C.byref(v), CU_LIMIT_STACK_SIZE)
    return v.value


def drop(a, b):
    return '%.1f MiB (%.0f B a thread)' % ((a - b) / 2**20, (a - b) / THREADS)


def load(ptx, linked, lib=None):
    mod = C.c_void_p()
    if not linked:
        ck(cu.cuModuleLoadData(C.byref(mod), ptx), 'cuModuleLoadData')
        return mod
    st, img, n = C.c_void_p(), C.c_void_p(), C.c_size_t()
    ck(fn('cuLinkCreate')(0, None, None, C.byref(st)), 'cuLinkCreate')
    ck(fn('cuLinkAddData')(st, CU_JIT_INPUT_PTX, ptx, C.c_size_t(len(ptx)), b'probe', 0, None,
                           None), 'cuLinkAddData')
    if lib is not None:
        ck(fn('cuLinkAddFile')(st, CU_JIT_INPUT_LIBRARY, lib, 0, None, None), 'cuLinkAddFile')
    ck(cu.cuLinkComplete(st, C.byref(img), C.byref(n)), 'cuLinkComplete')
    ck(cu.cuModuleLoadData(C.byref(mod), img), 'cuModuleLoadData (linked)')
    cu.cuLinkDestroy(st)
    return mod


def case(ptx, name, linked, flags, mode, arg):
    fn('cuDevicePrimaryCtxReset')(dev)
    fn('cuDevicePrimaryCtxSetFlags')(dev, flags)
    ctx = C.c_void_p()
    ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), 'cuDevicePrimaryCtxRetain')
    cu.cuCtxSetCurrent(ctx)
    mod = load(ptx + NONE + b'\0', linked)
    f, plain = C.c_void_p(), C.c_void_p()
    ck(cu.cuModuleGetFunction(C.byref(f), mod, name.encode()), 'cuModuleGetFunction')
    ck(cu.cuModuleGetFunction(C.byref(plain), mod, b'k_none'), 'cuModuleGetFunction')
    out = C.c_uint64()
    fn('cuMemAlloc')(C.byref(out), C.c_size_t(1 << 20))
    ls = C.c_int()
    cu.cuFuncGetAttribute(C.byref(ls), CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f)
    a = C.c_uint32(arg)
    params = (C.c_void_p * 2)(C.cast(C.pointer(out), C.c_void_p), C.cast(C.pointer(a), C.c_void_p))

    def run(k):
        r = cu.cuLaunchKernel(k, 132, 1, 1, 256, 1, 1, 0, None, params, None)
        return r or cu.cuCtxSynchronize()

    tag = '%s %s flags=%#x m%d:' % (name, 'linked' if linked else 'whole', flags, mode)
    run(plain)
    s0, f0 = stack(), free_mem()
    if mode == 4 or (mode in (1, 2) and ls.value > 16):
        v = 16384 if mode == 4 else ls.value - (16 if mode == 2 else 0)
        r = cu.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, C.c_size_t(v))
        f1 = free_mem()
        print(tag, 'set', v, '->', r, 'reads', stack(), 'drop', drop(f0, f1))
        s0, f0 = stack(), f1
    r = run(f)
    f1, s1 = free_mem(), stack()
    if r:
        print(tag, 'LOCAL_SIZE_BYTES', ls.value, 'stack', s0, 'launch ->', r)
        return False
    run(plain)
    print(tag, 'LOCAL_SIZE_BYTES', ls.value, 'stack', s0, 'launch: stack', s1, 'drop',
          drop(f0, f1), '; after a plain launch', drop(f0, free_mem()))
    if mode == 3:
        r = cu.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, C.c_size_t(1024))
        print(tag, '  set back to 1024 ->', r, 'reads', stack(), 'drop', drop(f0, free_mem()))
        r = run(f)
        print(tag, '  launched again ->', r, 'stack', stack(), 'drop', drop(f0, free_mem()))
    fn('cuDevicePrimaryCtxRelease')(dev)
    return True


def case_cdp(limit):
    """The parent launched from the host, its child from the device."""
    libs = (glob.glob('/usr/local/cuda*/lib64/libcudadevrt.a') +
            glob.glob('/usr/local/cuda*/targets/*/lib/libcudadevrt.a'))
    if not libs:
        print('cdp: no libcudadevrt.a')
        return
    fn('cuDevicePrimaryCtxReset')(dev)
    ctx = C.c_void_p()
    ck(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), 'cuDevicePrimaryCtxRetain')
    cu.cuCtxSetCurrent(ctx)
    mod = load(CDP + NONE + b'\0', True, libs[0].encode())
    fs = {}
    for name in ('c_parent', 'c_child', 'k_none'):
        f, ls = C.c_void_p(), C.c_int()
        ck(cu.cuModuleGetFunction(C.byref(f), mod, name.encode()), 'cuModuleGetFunction')
        cu.cuFuncGetAttribute(C.byref(ls), CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f)
        fs[name] = f
        print('cdp:', name, 'LOCAL_SIZE_BYTES', ls.value)
    out = C.c_uint64()
    fn('cuMemAlloc')(C.byref(out), C.c_size_t(4096))
    a = C.c_int(3)
    params = (C.c_void_p * 2)(C.cast(C.pointer(out), C.c_void_p), C.cast(C.pointer(a), C.c_void_p))

    def run(k):
        return (cu.cuLaunchKernel(k, 1, 1, 1, 1, 1, 1, 0, None, params, None) or
                cu.cuCtxSynchronize())

    run(fs['k_none'])
    if limit:
        print('cdp: set', limit, '->', cu.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, C.c_size_t(limit)))
    s0, f0 = stack(), free_mem()
    r = run(fs['c_parent'])
    print('cdp: parent launched ->', r, 'stack', s0, '->', stack(), 'drop', drop(f0, free_mem()))
    fn('cuDevicePrimaryCtxRelease')(dev)


def main():
    name = C.create_string_buffer(100)
    ver = C.c_int()
    cu.cuDeviceGetName(name, 100, dev)
    cu.cuDriverGetVersion(C.byref(ver))
    print(name.value.decode(), 'driver API', ver.value, 'threads', THREADS)
    for k in ('k_own', 'k_call'):
        for linked in (False, True):
            for flags, mode in ((0, 0), (CU_CTX_LMEM_RESIZE_TO_MAX, 0), (0, 1), (0, 2), (0, 3),
                                (0, 4)):
                case(OWN_CALL, k, linked, flags, mode, 5)
    case_cdp(0)
    case_cdp(16384)
    case(RECUR, 'k_rec', False, 0, 0, 0)
    return 0


if __name__ == '__main__':
    sys.exit(main())
