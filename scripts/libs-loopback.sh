#!/usr/bin/env bash
# NVIDIA's libraries (the toolkit's copies; tests/libs): cuBLAS and
# cuBLASLt (libs_check), cuRAND and cuSPARSE (libs_more), cuFFT
# (libs_fft), cuDNN (libs_dnn) and cuBLAS's first GEMM (first_gemm),
# through guest-lib's libcuda.so.1 + the host backend + the CPU stand-in
# in its diagnostic mode (VCU_FAKECUDA_ANY_KERNEL=1: kernels and globals
# it has no twin for exist and do nothing), under the call tracer
# (tests/gpu/trace), no VM.  The libraries' kernels do nothing here, so
# their numbers are not checked; what is checked is that every Driver API
# call and private table they ask for is answered, which is the same on a
# GPU, and that each check reached its comparison with the CPU.  A
# library missing from the toolkit fails its program's checks (named), it
# is not skipped.  Last line: "N passed, N failed".
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
# prog, the libraries it needs, then the checks it must bring to their
# comparison with the CPU (first_gemm's check is named after its
# argument).
specs=(
    "libs_check|libcublas.so.13 libcublasLt.so.13|cublas_sgemm cublaslt_hgemm"
    "libs_more|libcurand.so.10 libcusparse.so.12|curand_uniform curand_normal cusparse_spmv"
    "libs_fft|libcufft.so.12|cufft_c2c cufft_r2c_2d"
    "libs_dnn|libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_cnn.so.9 libcudnn_heuristic.so.9 libcudnn_engines_precompiled.so.9 libcudnn_engines_runtime_compiled.so.9|cudnn_conv_fwd"
    "first_gemm|libcublas.so.13 libcublasLt.so.13|first_gemm_loopback"
)
if ! make -s -C tests/libs O="$PWD/build/libs-tests" "$PWD/build/libs-tests/trace/libcuda.so.1" \
    >build/libs-loopback.build 2>&1; then
    cat build/libs-loopback.build
    check 1 build "the call tracer (tests/libs) did not build"
    finish
fi
for spec in "${specs[@]}"; do
    IFS='|' read -r prog libs checks <<<"$spec"
    missing=
    for l in $libs; do
        [ -e "$cuda/lib64/$l" ] || missing="$missing $l"
    done
    if [ -n "$missing" ]; then
        for c in $checks; do
            check 1 "$prog/$c" "not in $cuda/lib64:$missing"
        done
        continue
    fi
    if ! make -s -C tests/libs O="$PWD/build/libs-tests" "$PWD/build/libs-tests/$prog" \
        >"build/libs-loopback-$prog.build" 2>&1; then
        cat "build/libs-loopback-$prog.build"
        check 1 "$prog/build" "tests/libs/$prog did not build"
        continue
    fi
    out=build/libs-loopback-$prog.out
    arg=
    [ "$prog" = first_gemm ] && arg=loopback
    VCU_FAKECUDA_ANY_KERNEL=1 VCU_TRANSPORT=loopback \
        VCU_LIBCUDA=$PWD/build/fakecuda/libcuda.so.1 \
        VCU_TRACE_LIBCUDA=$PWD/build/guest-lib-loopback/libcuda.so.1 \
        LD_LIBRARY_PATH=$PWD/build/libs-tests/trace:$PWD/build/guest-lib-loopback:$cuda/lib64 \
        timeout 300 build/libs-tests/$prog $arg >"$out" 2>&1
    rc=$?
    # 0 or 1 (the numbers): it ran to the end; a signal or a timeout did not.
    [ $rc -le 1 ]
    check $? "$prog/runs" "$prog ended with status $rc"
    # Failed driver calls, refused calls and tables, but the one the
    # stand-in alone gives (its do-nothing kernels declare no cluster
    # size), the refused slot cuBLASLt goes on after, and cuDNN's kernels
    # of libraries with no code for the GPU (NO_BINARY_FOR_GPU, as
    # NVIDIA's driver answers them).
    bad=$(grep -E '^trace-call |is not supported|slot [0-9]+ called|cannot be listed' "$out" |
        grep -v -e '^trace-call cuOccupancyMaxActiveClusters -> 912$' \
            -e '^trace-call cuLibraryGetKernel -> 209$' \
            -e 'export table 1734dc26-800d-4745-8726-c0f1e7dd8bca slot 4 called' | sort -u)
    [ -z "$bad" ]
    check $? "$prog/calls-answered" "$(echo "$bad" | sed -n 1,5p | tr '\n' ';')"
    # Each check reached its comparison with the CPU: every library call
    # before it succeeded.
    for c in $checks; do
        grep -qE "^(PASS $c\$|FAIL $c .*against the CPU\$)" "$out"
        check $? "$prog/$c" "$(grep -E "^FAIL $c " "$out" | sed -n 1p)"
    done
    if [ "$prog" = first_gemm ]; then
        grep -qE '^first_gemm loopback: process start to first SGEMM [0-9.]+ s ' "$out"
        check $? "$prog/times" "no times printed"
    fi
done
finish
