#!/usr/bin/env bash
# The Driver API test programs (tests/cuda-driver) run natively against
# the loopback build of guest-lib's libcuda.so.1: the library, the host
# backend and the CPU stand-in for NVIDIA's libcuda (a test double) in one
# process, no VM.  Last line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export VCU_TRANSPORT=loopback
export VCU_LIBCUDA=$PWD/build/fakecuda/libcuda.so.1
export LD_LIBRARY_PATH=$PWD/build/guest-lib-loopback
# The in-process backend's module cache (drv_modcache), fresh each run.
VCU_LOOPBACK_MODULE_CACHE=$(mktemp -d /tmp/vcu-modcache.XXXXXX) || exit 1
export VCU_LOOPBACK_MODULE_CACHE
trap 'rm -rf "$VCU_LOOPBACK_MODULE_CACHE"' EXIT

if [ ! -x build/cuda-driver/run.sh ] || [ ! -e build/guest-lib-loopback/libcuda.so.1 ]; then
    echo "driver-loopback: build first (make all)"
    echo "0 passed, 1 failed"
    exit 1
fi
sh build/cuda-driver/run.sh build/cuda-driver
