#!/bin/sh
# Bounded fuzz run of the host backend (fuzz_backend.c) for the test suite.
#
#   tests/fuzz/run.sh [SECONDS]        default 60
#
# Builds the target and the stand-in for libcuda under $O (default
# build/fuzz), then fuzzes for SECONDS starting from tests/fuzz/corpus (a
# scratch copy: the committed corpus is never changed).  Prints
# "1 passed, 0 failed", or "0 passed, 1 failed" and the crashing input;
# exits 0 or 1.  Reproduce a crash: FUZZ_DEBUG=1 VCU_LIBCUDA=$O/fakecuda/libcuda.so.1
# $O/fuzz_backend CRASH_FILE (FUZZ_DEBUG prints each request).
set -u
secs=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
O=${O:-$root/build/fuzz}
log=$O/run.log

if ! make -s -C "$here" O="$O" >"$O.build.log" 2>&1; then
    cat "$O.build.log"
    echo "fuzz: build failed (needs clang with libFuzzer: libclang-rt-14-dev)"
    echo "0 passed, 1 failed"
    exit 1
fi
work=$O/run-corpus
art=$O/run-artifacts
rm -rf "$work" "$art"
mkdir -p "$work" "$art"
cp "$here"/corpus/* "$work"/

# -malloc_limit_mb: the stand-in backs device memory with (lazily mapped)
# host memory, so a guest's large cuMemAlloc is a large calloc.
VCU_LIBCUDA=$O/fakecuda/libcuda.so.1 VCU_FAKECUDA_STICKY=context \
    "$O/fuzz_backend" -max_total_time="$secs" -timeout=30 -rss_limit_mb=8192 \
    -malloc_limit_mb=131072 -print_final_stats=1 -artifact_prefix="$art/" \
    "$work" >"$log" 2>&1
rc=$?
grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)" "$log"
grep -E "^#[0-9]+ +DONE" "$log" | tail -n 1
crash=$(ls "$art" 2>/dev/null | head -n 1)
if [ "$rc" -eq 0 ] && [ -z "$crash" ]; then
    echo "1 passed, 0 failed"
    exit 0
fi
grep -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$log" | head -n 30
echo "fuzz: exit $rc, log $log"
[ -n "$crash" ] && echo "fuzz: crash input $art/$crash"
echo "0 passed, 1 failed"
exit 1
