#!/usr/bin/env bash
# On the build machine: builds what the GPU machine needs and gathers it
# under build/ (build/qemu, build/vm with the guest images and the main
# job's demo program, build/bench, build/nvidia with NVIDIA's
# libcudart.so.13 for the native side of the benchmark and the main job).
# The GPU machine has no compiler and no package registry.
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s all
# Builds every guest image and checks it once here against the stand-in.
tests/vm/run.sh cuda,nvrt,nvml,quota,demo,echo,badinput
# The bench image; the stand-in has no twin for the benchmark's kernels,
# so this run is expected to stop at the first launch.
VCU_BENCH_ARGS=--quick tests/vm/run.sh bench >/dev/null 2>&1 || true
[ -f build/vm/initrd-bench.img ]
# The leaks image (judged from the GPU host by tests/gpu/leaks.sh): built
# and booted briefly, not run through here.
VCU_VM_TIMEOUT=15 tests/vm/run.sh leaks >/dev/null 2>&1 || true
[ -f build/vm/initrd-leaks.img ]
# The share image (judged from the GPU host by tests/gpu/share.sh): its
# kernel loop runs here briefly on the stand-in, so the image is checked.
VCU_VM_TIMEOUT=120 VCU_GUEST_APPEND="vcu.share_procs=2 vcu.share_secs=3 vcu.share_iters=2000" \
    tests/vm/run.sh share >/dev/null 2>&1 || true
[ -f build/vm/initrd-share.img ]
# The loop natively, for tests/gpu/many.sh's baseline.
cp build/cuda-tests/share_loop build/vm/
# The libs image: NVIDIA's libraries go on a disk made on the GPU host
# (tests/gpu/libs-run.sh), so here it stops at its setup check.
VCU_VM_TIMEOUT=30 tests/vm/run.sh libs >/dev/null 2>&1 || true
[ -f build/vm/initrd-libs.img ]
# The probe of NVIDIA's answers to what the libraries ask (docs/driver-api.md).
mkdir -p build/probes
cc -O1 -I/usr/local/cuda/include -o build/probes/probe-libs tests/gpu/probe-libs.c -ldl
# The probe of graphs against launches (docs/design.md "Runs of launches as graphs").
/usr/local/cuda/bin/nvcc -fatbin -maxrregcount=255 -gencode arch=compute_90,code=sm_90 \
    -o build/probes/probe-graphs.fatbin tests/gpu/probe-graphs-kernels.cu
cc -O1 -I/usr/local/cuda/include -o build/probes/probe-graphs tests/gpu/probe-graphs.c \
    -L/usr/local/cuda/lib64/stubs -lcuda
# The probe of what each way of migrating a worker's GPU state carries
# (docs/design.md "Live migration").
/usr/local/cuda/bin/nvcc -fatbin -gencode arch=compute_90,code=sm_90 \
    -o build/probes/probe-migrate.fatbin tests/gpu/probe-migrate-kernels.cu
cc -O1 -I/usr/local/cuda/include -o build/probes/probe-migrate tests/gpu/probe-migrate.c \
    -L/usr/local/cuda/lib64/stubs -lcuda
# Where the driver puts a module's managed globals (guest-lib/vcu_managed.c
# vcu__m_adopt).
/usr/local/cuda/bin/nvcc -fatbin -gencode arch=compute_90,code=sm_90 \
    -o build/probes/probe-managed-globals.fatbin tests/gpu/probe-managed-globals.cu
cc -O1 -I/usr/local/cuda/include -o build/probes/probe-managed-globals \
    tests/gpu/probe-managed-globals.c -L/usr/local/cuda/lib64/stubs -lcuda
# What CUDA IPC does between processes, the importer in a worker's
# namespaces (docs/design.md "CUDA IPC").
cc -O1 -I/usr/local/cuda/include -o build/probes/probe-ipc tests/gpu/probe-ipc.c \
    -L/usr/local/cuda/lib64/stubs -lcuda
# The worker's migration core on the real driver (tests/gpu/mig-core.sh).
cc -O1 -Iinclude -Ihost-backend/worker -Ihost-backend/common -I/usr/local/cuda/include \
    -o build/probes/mig-core tests/gpu/mig-core.c build/host-backend/libvcu_backend.a -ldl -lpthread
cp build/cuda-driver/vcu_drv_kernels.fatbin build/cuda-driver/vcu_drv_kernels_ptx_lz4.fatbin \
    build/cuda-driver/vcu_drv_kernels_sm80.fatbin build/probes/
# The torch image: its root disk is made on the GPU host
# (tests/gpu/torch-run.sh), so here it stops at its setup check.
VCU_VM_TIMEOUT=30 tests/vm/run.sh torch >/dev/null 2>&1 || true
[ -f build/vm/initrd-torch.img ]
VCU_VM_TIMEOUT=30 tests/vm/run.sh frameworks >/dev/null 2>&1 || true
[ -f build/vm/initrd-frameworks.img ]
# The samples image: its disk is made on the GPU host (tests/gpu/samples.sh
# guest), so here it stops at its setup check.
VCU_VM_TIMEOUT=30 tests/vm/run.sh samples >/dev/null 2>&1 || true
[ -f build/vm/initrd-samples.img ]
[ -x build/vm/vcu_demo ]
mkdir -p build/nvidia
cp -L /usr/local/cuda/lib64/libcudart.so.13 build/nvidia/
# NVIDIA's cuda-samples from the local mirror, for tests/gpu/samples.sh
# (about 9 MB; no mirror: a message and no archive).
tests/gpu/samples-pack.sh || echo "prepare: no build/samples-src.tar.xz (tests/gpu/samples-pack.sh failed)"
# NVIDIA's CUDALibrarySamples (cuBLASLt, cuSPARSE, cuSOLVER, cuFFT), about
# 80 KB, carried inside the bundle (tests/gpu/samples.sh with
# VCU_SAMPLES_SET=libs).
rm -f build/libsamples-src.tar.xz
tests/gpu/samples-pack.sh libs || echo "prepare: no build/libsamples-src.tar.xz (tests/gpu/samples-pack.sh libs failed)"
git rev-parse HEAD >build/commit
rm -rf build/vm/logs
# Not used on the GPU machine (the carried outputs must stay under 64 MiB).
rm -f build/vm/initrd-hostmem.img
du -sh build/qemu build/vm build/bench build/nvidia build/probes
# All of it as one archive (xz: about 47 MB), for a GPU machine that takes
# few or small carried files: carry build/gpu-bundle alone, and
# tests/gpu/device-run.sh unpacks it there.  With it: our libcuda.so.1 in
# its loopback build and the samples' archive as it is (tests/gpu/samples.sh
# finds it there): about 59 MB in all, under the 64 MiB carried.
rm -rf build/gpu-bundle
mkdir -p build/gpu-bundle
tar -cf - build/qemu build/vm build/bench build/nvidia build/probes build/commit \
    build/guest-lib-loopback/libcuda.so.1 $(ls build/libsamples-src.tar.xz 2>/dev/null) |
    xz -T0 -9 >build/gpu-bundle/outputs.tar.xz
[ ! -f build/samples-src.tar.xz ] || cp build/samples-src.tar.xz build/gpu-bundle/
du -sh build/gpu-bundle
