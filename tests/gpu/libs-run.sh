#!/usr/bin/env bash
# On the GPU machine: NVIDIA's libraries in a guest on the guest's
# libcuda.so.1 (VM suite libs): cuBLAS, cuBLASLt, cuRAND, cuSPARSE, cuFFT
# and cuDNN, each program's checks against the CPU, and cuBLAS's first
# GEMM timed twice (a cold and a warm process).  The libraries are this
# host's own (about 2 GB, never carried): each is looked up on the
# loader path, under /usr/local/cuda*, then in a Python environment's
# NVIDIA wheels under /opt; where each came from, or that it is missing,
# is printed here and in the guest (a missing one fails its checks).
# They go on a disk (ext4, mke2fs -d from hard links) the guest mounts
# read-only: too big for an initrd in guest memory.
#
#   tests/gpu/libs-run.sh            the suite on the GPU (needs build/vm/initrd-libs.img,
#                                    tests/gpu/prepare.sh)
#   tests/gpu/libs-run.sh disk OUT   only the disk, as OUT
#   tests/gpu/libs-run.sh standin    a rehearsal with no GPU: the suite against the CPU
#                                    stand-in (VCU_FAKECUDA_ANY_KERNEL=1: the libraries'
#                                    kernels do nothing, so every check reaches its
#                                    comparison and fails there); its verdict: how many
#                                    checks reached their comparison
#
# VCU_LIBS_SRC=DIR      take the libraries from DIR only (e.g. /usr/local/cuda/lib64)
# VCU_GUEST_APPEND=VCU_LIBS_DEBUG=1   every failing Driver API call on the console
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-gpu}
t_start=$(date +%s)
say() { echo "libs-run: $*"; }
fail_setup() { say "$*"; echo "0 passed, 1 failed"; exit 1; }

# The libraries the programs load (cuDNN's sub-libraries and what they
# open at run time: NVRTC for its run-time compiled engines; cuSPARSE
# links nvJitLink).
libs="libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcusparse.so.12 libnvJitLink.so.13
      libcufft.so.12 libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_cnn.so.9
      libcudnn_adv.so.9 libcudnn_heuristic.so.9 libcudnn_engines_precompiled.so.9
      libcudnn_engines_runtime_compiled.so.9 libnvrtc.so.13 libnvrtc-builtins.so.13.0"

# The first copy of a library: the loader's, the toolkit's, a wheel's.
find_lib() {
    local name=$1 d
    if [ -n "${VCU_LIBS_SRC:-}" ]; then
        [ -e "$VCU_LIBS_SRC/$name" ] && readlink -f "$VCU_LIBS_SRC/$name"
        return
    fi
    for d in $(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF }') \
        /usr/local/cuda/lib64/"$name" /usr/local/cuda/targets/x86_64-linux/lib/"$name" \
        /usr/local/cuda-13*/lib64/"$name" /usr/local/cuda-13*/targets/x86_64-linux/lib/"$name" \
        /usr/lib/x86_64-linux-gnu/"$name" \
        /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/"$name" \
        /opt/*/lib/python3*/site-packages/nvidia/*/lib/"$name" \
        /opt/*/.venv/lib/python3*/site-packages/nvidia/*/*/lib/"$name"; do
        if [ -e "$d" ]; then
            readlink -f "$d"
            return 0
        fi
    done
    return 1
}

# make_disk OUT: the libraries under /libs of an ext4 image, with
# MANIFEST (one line per library: its name and where it came from, or
# "missing") and the unversioned names cuDNN and NVRTC open.
make_disk() {
    local out=$1 st n p size
    st=$(mktemp -d /var/tmp/vcu-libs.XXXXXX) || return 1
    mkdir -p "$st/libs"
    : >"$st/libs/MANIFEST"
    for n in $libs; do
        if p=$(find_lib "$n"); then
            # Hard links cost nothing; across file systems, a copy.
            ln "$p" "$st/libs/$n" 2>/dev/null || cp "$p" "$st/libs/$n" ||
                { rm -rf "$st"; return 1; }
            echo "$n $p $(du -h "$p" | cut -f1)" >>"$st/libs/MANIFEST"
        else
            echo "$n missing" >>"$st/libs/MANIFEST"
        fi
    done
    for n in "$st"/libs/*.so.*; do
        [ -e "$n" ] || continue
        case ${n##*/} in libcudnn*.so.9 | libnvrtc.so.13) ln -sf "${n##*/}" "${n%%.so.*}.so" ;; esac
    done
    sed 's/^/libs-run: /' "$st/libs/MANIFEST"
    size=$(du -sm "$st" | cut -f1)
    : >"$out"
    mke2fs -q -t ext4 -O ^has_journal,^metadata_csum -E root_owner=0:0 -d "$st" "$out" \
        "$((size + size / 8 + 64))M" || { rm -rf "$st"; return 1; }
    rm -rf "$st"
    say "disk $out: $size MiB of libraries, made in $(($(date +%s) - t_start)) s"
}

case $what in
disk)
    [ $# -ge 2 ] || fail_setup "usage: $0 disk OUT.ext4"
    make_disk "$2" || fail_setup "could not make the disk"
    exit 0
    ;;
gpu | standin) ;;
*) fail_setup "unknown mode '$what' (gpu, disk OUT, standin)" ;;
esac

[ -f build/vm/initrd-libs.img ] || fail_setup "no build/vm/initrd-libs.img (tests/gpu/prepare.sh)"
work=$(mktemp -d /var/tmp/vcu-libs-disk.XXXXXX) || fail_setup "no scratch folder"
trap 'rm -rf "$work"' EXIT
make_disk "$work/libs.ext4" || fail_setup "could not make the disk (mke2fs)"
# Each program is a process of its own; cuDNN's and cuBLASLt's
# libraries are read from the disk into the guest's page cache.
export VCU_VM_DISK=$work/libs.ext4 VCU_VM_MEM=${VCU_VM_MEM:-6144}
# Under the 10 minutes one command may take on the GPU machine, disk
# included (the suite took 45-56 s of guest time against the stand-in).
export VCU_VM_TIMEOUT=${VCU_VM_TIMEOUT:-480}
log=${VCU_VM_LOGDIR:-build/vm/logs}/libs.log
if [ "$what" = standin ]; then
    VCU_NO_BUILD=1 VCU_FAKECUDA_ANY_KERNEL=1 tests/vm/run.sh libs >"$work/run.out" 2>&1
else
    # A module cache of this run's own (the host daemon's --cache-dir):
    # first_gemm's cold run finds it empty (the usual one may hold cuBLAS
    # from an earlier run), its warm run finds what the cold one stored.
    mkdir -m 0755 "$work/modcache"
    VCU_DAEMON_ARGS="--cache-dir $work/modcache" VCU_NO_BUILD=1 tests/gpu/run.sh libs \
        >"$work/run.out" 2>&1
fi
rc=$?
cat "$work/run.out"
# What the guest said besides its checks: each program's status and
# time, first_gemm's times, cuDNN's choice (the serial log keeps it all).
grep -a '^libs: ' "$log" | grep -v '^libs: from the GPU host: '
say "done in $(($(date +%s) - t_start)) s"
if [ "$what" = standin ]; then
    # The stand-in's kernels do nothing: each check must reach its
    # comparison with the CPU (and fail there); that is the verdict.
    total=$(grep -c '^VCU-TEST libs/' "$log")
    reached=$(grep -cE '^VCU-TEST libs/[^ ]+ (PASS|FAIL .*against the CPU)$' "$log")
    say "stand-in: $reached of $total checks reached their comparison with the CPU"
    echo "$reached passed, $((total - reached)) failed"
    [ "$total" -ge 10 ] && [ "$reached" = "$total" ]
    exit
fi
# The guest suite's tally, last.
tail -n 1 "$work/run.out"
exit $rc
