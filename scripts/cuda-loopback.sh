#!/usr/bin/env bash
# The CUDA test programs, unmodified nvcc binaries, run natively against the
# loopback build of guest-lib: the runtime, the host backend and the CPU
# stand-in for libcuda (a test double) in one process, no VM.  Then the main
# job's demo (tests/demo) the same way: its results checked against its CPU
# reference.  Last line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export VCU_TRANSPORT=loopback
export VCU_LIBCUDA=$PWD/build/fakecuda/libcuda.so.1
export LD_LIBRARY_PATH=$PWD/build/guest-lib-loopback

# tests/cuda/run.sh's own total becomes an ordinary line; ours comes last.
sh build/cuda-tests/run.sh build/cuda-tests | tee build/cuda-loopback.out |
    sed 's/^\([0-9]* passed, [0-9]* failed\)$/tests\/cuda: \1/'
rc=${PIPESTATUS[0]}
total=$(tail -n 1 build/cuda-loopback.out)
passed=${total%% passed*}
failed=${total#*passed, }
failed=${failed%% failed*}
case "$passed$failed" in '' | *[!0-9]*) echo "cuda-loopback: run.sh gave no total"; passed=0; failed=1 ;; esac
[ "$rc" = 0 ] || [ "$failed" != 0 ] || failed=1

out=$(timeout 300 build/vm/vcu_demo 2>&1)
drc=$?
if [ $drc = 0 ] && [ "$(echo "$out" | tail -n 1)" = "PASS vcu_demo" ]; then
    echo "PASS vcu_demo"
    passed=$((passed + 1))
else
    echo "FAIL vcu_demo (rc=$drc)"
    echo "$out" | sed 's/^/    /'
    failed=$((failed + 1))
fi
# peer again with two stand-in devices: copies between them, peer access.
out=$(VCU_GPUS=0,1 timeout 300 build/cuda-tests/peer 2>&1)
drc=$?
if [ $drc = 0 ] && [ "$(echo "$out" | tail -n 1)" = "PASS peer" ]; then
    echo "PASS peer (two devices)"
    passed=$((passed + 1))
else
    echo "FAIL peer (two devices) (rc=$drc)"
    echo "$out" | sed 's/^/    /'
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
