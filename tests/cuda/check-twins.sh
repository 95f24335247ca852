#!/bin/sh
# Compares the kernels and device symbols of the built CUDA test programs,
# the main job's demo (tests/demo) and the Driver API tests' cubin
# (tests/cuda-driver) with the twins table of the CPU stand-in
# (tests/fakecuda/twins.c):
# mangled names, parameter offsets and sizes (EIATTR_KPARAM_INFO), static
# shared size, and __device__/__constant__ names, sizes and initial bytes.
# Needs a C compiler, not a GPU nor cuobjdump.
#
#   tests/cuda/check-twins.sh [BINDIR [DEMO [CUBIN]]]
#
# BINDIR is the O= of `make -C tests/cuda` [build/cuda-tests]; DEMO the
# demo program [BINDIR/../vm/vcu_demo, where `make` puts it]; CUBIN the
# Driver API tests' kernels [BINDIR/../cuda-driver/vcu_drv_kernels.cubin].
set -eu

here=$(cd "$(dirname "$0")" && pwd)
bindir=${1:-$here/../../build/cuda-tests}
demo=${2:-$bindir/../vm/vcu_demo}
cubin=${3:-$bindir/../cuda-driver/vcu_drv_kernels.cubin}
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

$cc -std=c11 -O1 -Wall -Wextra -o "$tmp/check_twins" \
    "$here/check_twins.c" "$here/../fakecuda/twins.c" -lm

progs=
for t in $(grep -v '^[[:space:]]*\(#\|$\)' "$here/tests.list"); do
    if [ ! -f "$bindir/$t" ]; then
        echo "check-twins: $bindir/$t not built (make -C tests/cuda O=...)" >&2
        exit 2
    fi
    progs="$progs $bindir/$t"
done
# The share suite's kernel loop (tests/share), built beside them.
if [ ! -f "$bindir/share_loop" ]; then
    echo "check-twins: $bindir/share_loop not built (make -C tests/cuda O=...)" >&2
    exit 2
fi
progs="$progs $bindir/share_loop"
# The many-VM run's checker (tests/many), built beside them.
if [ ! -f "$bindir/many_work" ]; then
    echo "check-twins: $bindir/many_work not built (make -C tests/cuda O=...)" >&2
    exit 2
fi
progs="$progs $bindir/many_work"
# The packed suite's check (tests/packed), built beside them.
if [ ! -f "$bindir/packed_check" ]; then
    echo "check-twins: $bindir/packed_check not built (make -C tests/cuda O=...)" >&2
    exit 2
fi
progs="$progs $bindir/packed_check"
if [ ! -f "$demo" ]; then
    echo "check-twins: $demo not built (make -C tests/demo O=...)" >&2
    exit 2
fi
if [ ! -f "$cubin" ]; then
    echo "check-twins: $cubin not built (make -C tests/cuda-driver O=...)" >&2
    exit 2
fi
# shellcheck disable=SC2086  # one word per program
"$tmp/check_twins" $progs "$demo" "$cubin"
