"""CuPy on a GPU, step by step: run natively on the GPU host and in a
virtio-cuda guest (VM suite frameworks, tests/gpu/torch-run.sh), each step
printing "PASS cupy/<step> <seconds>" or "FAIL cupy/<step> <why>".

Steps: import, devices, elementwise (an ElementwiseKernel, compiled by
NVRTC), raw (a RawKernel), fft (against NumPy), solve (cuSOLVER, against
NumPy), each result checked on the CPU.
"""
from steps import Steps

steps = Steps("cupy")

cp = np = None


def s_import():
    global cp, np
    import cupy as c
    import numpy as n
    cp, np = c, n
    return "cupy %s" % cp.__version__


def s_devices():
    n = cp.cuda.runtime.getDeviceCount()
    if n < 1:
        raise RuntimeError("no device")
    p = cp.cuda.runtime.getDeviceProperties(0)
    return "%d, %s" % (n, p["name"].decode().replace(" ", "_"))


def s_elementwise():
    k = cp.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x * x + 2 * y",
                             "vcu_axpy2")
    x = cp.arange(1 << 20, dtype=cp.float32) / 1024
    y = cp.ones(1 << 20, dtype=cp.float32)
    z = cp.asnumpy(k(x, y))
    xn = np.arange(1 << 20, dtype=np.float32) / 1024
    if not np.allclose(z, xn * xn + 2, rtol=1e-6):
        raise RuntimeError("wrong result")


def s_raw():
    src = r'''
    extern "C" __global__ void vcu_rev(const int *a, int *b, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) b[n - 1 - i] = a[i] * 3;
    }'''
    k = cp.RawKernel(src, "vcu_rev")
    n = 100000
    a = cp.arange(n, dtype=cp.int32)
    b = cp.zeros(n, dtype=cp.int32)
    k(((n + 255) // 256,), (256,), (a, b, cp.int32(n)))
    if not np.array_equal(cp.asnumpy(b), (np.arange(n, dtype=np.int32) * 3)[::-1]):
        raise RuntimeError("wrong result")


def s_fft():
    rs = np.random.RandomState(0)
    x = rs.standard_normal((256, 256)).astype(np.complex64)
    got = cp.asnumpy(cp.fft.fft2(cp.asarray(x)))
    want = np.fft.fft2(x)
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    if err > 1e-4:
        raise RuntimeError("relative error %g" % err)
    return "256x256, rel err %.2g" % err


def s_solve():
    rs = np.random.RandomState(1)
    a = rs.standard_normal((256, 256)) + 256 * np.eye(256)
    b = rs.standard_normal((256, 4))
    x = cp.asnumpy(cp.linalg.solve(cp.asarray(a), cp.asarray(b)))
    err = float(np.max(np.abs(a @ x - b)))
    if err > 1e-8:
        raise RuntimeError("residual %g" % err)
    return "256x256 float64, residual %.2g" % err


steps.step("import", s_import)
if cp is not None:
    steps.run((("devices", s_devices), ("elementwise", s_elementwise), ("raw", s_raw),
               ("fft", s_fft), ("solve", s_solve)), "devices")
steps.done()
