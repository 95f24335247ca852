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
one=$(mktemp /tmp/vcu-drvlb.XXXXXX) || exit 1
two=$(mktemp /tmp/vcu-drvlb.XXXXXX) || exit 1
trap 'rm -rf "$VCU_LOOPBACK_MODULE_CACHE" "$one" "$two"' EXIT
sh build/cuda-driver/run.sh build/cuda-driver >"$one"
sed '$d' "$one"
# drv_peer again with two stand-in devices: copies between devices and
# peer access (with one device it runs only its first half).
echo "with two devices (VCU_GPUS=0,1):"
VCU_GPUS=0,1 sh build/cuda-driver/run.sh build/cuda-driver drv_peer >"$two"
sed '$d' "$two"
# One summary line for both runs.
tail -n 1 "$one" "$two" | awk '/passed,/ { p += $1; f += $3 }
    END { printf "%d passed, %d failed\n", p, f; exit f > 0 }'
