#!/usr/bin/env bash
# NVIDIA's cuBLAS, cuBLASLt, cuRAND and cuSPARSE (the toolkit's copies;
# tests/libs: libs_check and libs_more) through guest-lib's
# libcuda.so.1 + the host backend + the CPU stand-in in its diagnostic
# mode (VCU_FAKECUDA_ANY_KERNEL=1: kernels and globals it has no twin for
# exist and do nothing), under the call tracer (tests/gpu/trace), no VM.
# The libraries' kernels do nothing here, so their numbers are not
# checked; what is checked is that every Driver API call and private
# table they ask for is answered, which is the same on a GPU.
# Last line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
cuda=${CUDA:-/usr/local/cuda}
passed=0
failed=0
check() {
    if [ "$1" = 0 ]; then
        echo "PASS libs-loopback/$2"
        passed=$((passed + 1))
    else
        echo "FAIL libs-loopback/$2: $3"
        failed=$((failed + 1))
    fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit
}

if [ ! -e build/guest-lib-loopback/libcuda.so.1 ] || [ ! -e build/fakecuda/libcuda.so.1 ]; then
    check 1 build "build first (make all)"
    finish
fi
if [ ! -e "$cuda/lib64/libcublasLt.so.13" ]; then
    check 1 toolkit "no cuBLAS 13 under $cuda/lib64"
    finish
fi
if ! make -s -C tests/libs O="$PWD/build/libs-tests" >build/libs-loopback.build 2>&1; then
    cat build/libs-loopback.build
    check 1 build "tests/libs did not build"
    finish
fi
# prog, then the checks it must bring to their comparison with the CPU.
for spec in "libs_check cublas_sgemm cublaslt_hgemm" "libs_more curand_uniform cusparse_spmv"; do
    set -- $spec
    prog=$1
    shift
    out=build/libs-loopback-$prog.out
    VCU_FAKECUDA_ANY_KERNEL=1 VCU_TRANSPORT=loopback \
        VCU_LIBCUDA=$PWD/build/fakecuda/libcuda.so.1 \
        VCU_TRACE_LIBCUDA=$PWD/build/guest-lib-loopback/libcuda.so.1 \
        LD_LIBRARY_PATH=$PWD/build/libs-tests/trace:$PWD/build/guest-lib-loopback:$cuda/lib64 \
        timeout 300 build/libs-tests/$prog >"$out" 2>&1
    rc=$?
    # 0 or 1 (the numbers): it ran to the end; a signal or a timeout did not.
    [ $rc -le 1 ]
    check $? "$prog/runs" "$prog ended with status $rc"
    # Failed driver calls, refused calls and tables, but the one the
    # stand-in alone gives (its do-nothing kernels declare no cluster
    # size) and the refused slot cuBLASLt goes on after.
    bad=$(grep -E '^trace-call |is not supported|slot [0-9]+ called' "$out" |
        grep -v -e '^trace-call cuOccupancyMaxActiveClusters -> 912$' \
            -e 'export table 1734dc26-800d-4745-8726-c0f1e7dd8bca slot 4 called' | sort -u)
    [ -z "$bad" ]
    check $? "$prog/calls-answered" "$(echo "$bad" | sed -n 1,5p | tr '\n' ';')"
    # Each check reached its comparison with the CPU: every library call
    # before it succeeded.
    for c in "$@"; do
        grep -qE "^(PASS $c\$|FAIL $c .*against the CPU\$)" "$out"
        check $? "$prog/$c" "$(grep -E "^FAIL $c " "$out" | sed -n 1p)"
    done
done
finish
