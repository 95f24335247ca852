#!/usr/bin/env bash
# NVIDIA's own CUDA runtime on guest-lib's libcuda.so.1, natively against
# the loopback build (the library, the host backend and the CPU stand-in
# for NVIDIA's libcuda in one process, no VM):
#  - shared: the tests/cuda programs of tests/nvrt/shared.list (their
#    --cudart=shared builds in build/cuda-tests, unchanged), with a
#    loader path holding only our libcuda.so.1 and NVIDIA's
#    libcudart.so.13, so our libcudart.so.13 cannot take their calls;
#  - static: tests/nvrt/static.list, the same programs built the default
#    nvcc way (libcudart_static.a), then two of them at once.
# Last line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
top=$PWD
cuda=${CUDA:-/usr/local/cuda}
export VCU_TRANSPORT=loopback
export VCU_LIBCUDA=$top/build/fakecuda/libcuda.so.1

if [ ! -x build/cuda-tests/run.sh ] || [ ! -x build/nvrt-tests/static/run.sh ] ||
   [ ! -e build/guest-lib-loopback/libcuda.so.1 ]; then
    echo "nvrt-loopback: build first (make all)"
    echo "0 passed, 1 failed"
    exit 1
fi
if [ ! -e "$cuda/lib64/libcudart.so.13" ]; then
    echo "nvrt-loopback: no NVIDIA runtime at $cuda/lib64/libcudart.so.13"
    echo "0 passed, 1 failed"
    exit 1
fi
lib=$top/build/nvrt-tests/lib
rm -rf "$lib"
mkdir -p "$lib"
ln -s "$top/build/guest-lib-loopback/libcuda.so.1" "$lib/libcuda.so.1"
ln -s "$cuda/lib64/libcudart.so.13" "$lib/libcudart.so.13"
export LD_LIBRARY_PATH=$lib

passed=0
failed=0
# part NAME BINDIR [TEST...]: tests/cuda/run.sh's verdicts, its total added.
part() {
    local name=$1 out rc total p f
    shift
    out=$top/build/nvrt-tests/$name.out
    sh "$1/run.sh" "$@" >"$out" 2>&1
    rc=$?
    sed -e '$d' -e "s/^/$name: /" "$out"
    total=$(tail -n 1 "$out")
    p=${total%% passed*}
    f=${total#*passed, }
    f=${f%% failed*}
    case "$p$f" in '' | *[!0-9]*) echo "$name: run.sh gave no total"; p=0; f=1 ;; esac
    [ "$rc" = 0 ] || [ "$f" != 0 ] || f=1
    passed=$((passed + p))
    failed=$((failed + f))
}

part shared build/cuda-tests $(grep -v '^[[:space:]]*\(#\|$\)' build/nvrt-tests/shared.list)
part static build/nvrt-tests/static
# peer again with two stand-in devices: NVIDIA's runtime copying between
# them and enabling peer access through this libcuda.
VCU_GPUS=0,1 part static-2dev build/nvrt-tests/static peer
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
