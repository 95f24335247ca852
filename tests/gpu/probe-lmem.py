#!/usr/bin/env python3
"""GPU host probe behind the stack limit's cover of kernels' local memory
(host-backend/worker/cuda.c, vcu__stack_cover; docs/design.md "Memory
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
  k_rec: LOCAL_SIZE_BYTES 0, the launch grew nothing and faulted
  (CUDA_ERROR_ILLEGAL_ADDRESS: its frame overflowed the 1 KiB stack).
"""
import ctypes as C
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


def load(ptx, linked):
    mod = C.c_void_p()
    if not linked:
        ck(cu.cuModuleLoadData(C.byref(mod), ptx), 'cuModuleLoadData')
        return mod
    st, img, n = C.c_void_p(), C.c_void_p(), C.c_size_t()
    ck(fn('cuLinkCreate')(0, None, None, C.byref(st)), 'cuLinkCreate')
    ck(fn('cuLinkAddData')(st, CU_JIT_INPUT_PTX, ptx, C.c_size_t(len(ptx)), b'probe', 0, None,
                           None), 'cuLinkAddData')
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
    if mode in (1, 2, 4):
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
    case(RECUR, 'k_rec', False, 0, 0, 0)
    return 0


if __name__ == '__main__':
    sys.exit(main())
