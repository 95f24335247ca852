#!/usr/bin/env python3
"""guest-lib's libnvidia-ml.so.1 as its Python users load it.

- pynvml (nvidia-ml-py, Debian's python3-pynvml; PYTHONPATH names it):
  what torch.cuda.list_gpu_processes(), memory_usage(), utilization() and
  monitoring agents call, with the exceptions they expect for what is not
  supported or not permitted;
- PyTorch's own ctypes path, as torch/cuda/__init__.py writes it
  (_raw_device_count_nvml, _raw_device_uuid_nvml: nvmlInit,
  nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID
  into a 96-byte buffer), re-created here: PyTorch is not installed.

Runs over loopback or in a guest.  Last line: "N passed, N failed".
"""
import ctypes
import re
import sys

import pynvml as N

passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def raises(exc, fn, *args):
    try:
        fn(*args)
    except exc:
        return True
    except Exception as e:  # noqa: BLE001 - any other error is the failure
        print("  raised", type(e).__name__, e)
        return False
    return False


def torch_style():
    """torch.cuda._raw_device_count_nvml and _raw_device_uuid_nvml."""
    h = ctypes.CDLL("libnvidia-ml.so.1")
    check(h.nvmlInit() == 0, "torch-style nvmlInit")
    count = ctypes.c_int(-1)
    check(h.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0, "torch-style count")
    uuids = []
    for idx in range(count.value):
        dev = ctypes.c_void_p()
        check(h.nvmlDeviceGetHandleByIndex_v2(idx, ctypes.byref(dev)) == 0, "torch-style handle")
        buf = ctypes.create_string_buffer(96)
        check(h.nvmlDeviceGetUUID(dev, buf, 96) == 0, "torch-style UUID")
        uuids.append(buf.raw.decode("ascii").strip("\0"))
    check(h.nvmlShutdown() == 0, "torch-style shutdown")
    return count.value, uuids


def main():
    tcount, tuuids = torch_style()

    N.nvmlInit()
    n = N.nvmlDeviceGetCount()
    check(n >= 1 and n == tcount, "count %d, torch-style %d" % (n, tcount))
    check(N.nvmlSystemGetCudaDriverVersion() >= 12000, "CUDA driver version")
    check(len(N.nvmlSystemGetDriverVersion()) > 0, "driver version")
    for i in range(n):
        h = N.nvmlDeviceGetHandleByIndex(i)
        uuid = N.nvmlDeviceGetUUID(h)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        check(re.fullmatch(r"GPU-[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}", uuid) is not None,
              "UUID form %s" % uuid)
        check(uuid == tuuids[i], "UUID %s, torch-style %s" % (uuid, tuuids[i]))
        check(N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(uuid)) == i, "by UUID")
        pci = N.nvmlDeviceGetPciInfo(h)
        bus = pci.busId.decode() if isinstance(pci.busId, bytes) else pci.busId
        check(N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(bus)) == i, "by bus id")
        m = N.nvmlDeviceGetMemoryInfo(h)
        check(m.total > 0 and m.used + m.free == m.total, "memory %d %d %d" %
              (m.total, m.used, m.free))
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        check(m2.total == m.total and m2.reserved == 0, "memory v2")
        check(isinstance(N.nvmlDeviceGetComputeRunningProcesses(h), list), "processes")
        check(N.nvmlDeviceGetGraphicsRunningProcesses(h) == [], "graphics processes")
        check(N.nvmlDeviceGetCudaComputeCapability(h)[0] >= 5, "compute capability")
        check(list(N.nvmlDeviceGetMigMode(h)) == [0, 0], "MIG off")
        check(N.nvmlDeviceGetComputeMode(h) == N.NVML_COMPUTEMODE_DEFAULT, "compute mode")
        # torch.cuda.temperature / power_draw / clock_rate: not the slice's.
        check(raises(N.NVMLError_NotSupported, N.nvmlDeviceGetTemperature, h,
                     N.NVML_TEMPERATURE_GPU), "temperature not supported")
        check(raises(N.NVMLError_NotSupported, N.nvmlDeviceGetPowerUsage, h), "power")
        check(raises(N.NVMLError_NotSupported, N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_SM),
              "clock")
        check(raises(N.NVMLError_NoPermission, N.nvmlDeviceSetPersistenceMode, h, 1),
              "setter refused")
        check(raises(N.NVMLError_NoPermission, N.nvmlDeviceSetComputeMode, h,
                     N.NVML_COMPUTEMODE_PROHIBITED), "setter refused")
        try:
            u = N.nvmlDeviceGetUtilizationRates(h)
            check(0 <= u.gpu <= 100, "utilization %d" % u.gpu)
        except N.NVMLError_NotSupported:
            check(True, "")
    check(raises(N.NVMLError_InvalidArgument, N.nvmlDeviceGetHandleByIndex, n), "bad index")
    check(raises(N.NVMLError_NotFound, N.nvmlDeviceGetHandleByUUID,
                 "GPU-00000000-0000-0000-0000-000000000000"), "unknown UUID")
    N.nvmlShutdown()
    check(raises(N.NVMLError_Uninitialized, N.nvmlDeviceGetCount), "after shutdown")
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
