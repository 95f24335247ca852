#!/bin/sh
# The host backend's fuzz target (fuzz_backend.c): regression replay for
# the test suite, or an open-ended campaign.
#
#   tests/fuzz/run.sh replay            (make test's fuzz suite)
#   tests/fuzz/run.sh campaign [SECS]   (make fuzz; default 600 s)
#
# Both build the target and the stand-in for libcuda under $O (default
# build/fuzz) first.
#
# replay: runs gen_corpus.py's seeds and regressions (made under $O) and
# every input of tests/fuzz/corpus and tests/fuzz/regressions once, in name order, with no mutation, so that an unchanged tree gives
# the same verdict every time whatever the machine's load: a request that
# does not complete within FUZZ_TIMEOUT_MS (1000 here, generous) ends by a
# backend reset, and an input gets -timeout=$FUZZ_INPUT_TIMEOUT (default
# 120) seconds before libFuzzer calls it hung.  Prints
# "1 passed, 0 failed", or the failing input and "0 passed, 1 failed".
#
# campaign: mutates from the corpus and the regressions (a scratch copy:
# the committed files are never changed) for SECS seconds, then prints
# executions, executions per second, coverage (cov: edges, ft: features),
# the units it added, peak RSS, the crashes (crash-, leak-, timeout-, oom-
# artifacts) and the slow units (slow-unit-: reported, not failures).  New
# units stay in $O/campaign-corpus (merge them into tests/fuzz/corpus with
# -merge=1).  A crash input belongs in tests/fuzz/regressions once fixed.
# FUZZ_JOBS=N runs N processes at once (libFuzzer -fork).  Exits 1 on a
# crash.
#
# Reproduce one input:
#   FUZZ_DEBUG=1 VCU_LIBCUDA=$O/fakecuda/libcuda.so.1 $O/fuzz_backend FILE
# (FUZZ_DEBUG prints each request and its status).
set -u
mode=${1:-replay}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
O=${O:-$root/build/fuzz}

case $mode in
replay | campaign) ;;
*) echo "usage: $0 replay | campaign [SECONDS]" >&2; exit 2 ;;
esac

mkdir -p "$O"
if ! make -s -C "$here" O="$O" >"$O/build.log" 2>&1; then
    cat "$O/build.log"
    echo "fuzz: build failed (needs clang with libFuzzer: libclang-rt-14-dev)"
    echo "0 passed, 1 failed"
    exit 1
fi
export VCU_LIBCUDA="$O/fakecuda/libcuda.so.1"
# Many sessions in one process: a fault stays in its context (the stand-in
# makes faults process-wide by default, as driver 580 does).
export VCU_FAKECUDA_STICKY=context

# gen_corpus.py's hand-written seeds and slow-* regressions, made here
# from the protocol header and the call list as they are now (opcode
# indices and call numbers move when those change), then the committed
# inputs (campaign units, crash regressions), in name order (not README.md).
gen=$O/generated
rm -rf "$gen"
mkdir -p "$gen/seeds" "$gen/regressions"
if ! { python3 "$here/gen_corpus.py" "$gen/seeds" &&
    python3 "$here/gen_corpus.py" --regressions "$gen/regressions"; } >"$O/gen.log" 2>&1; then
    cat "$O/gen.log"
    echo "fuzz: gen_corpus.py failed"
    echo "0 passed, 1 failed"
    exit 1
fi
inputs() {
    for d in "$gen/seeds" "$gen/regressions" "$here/corpus" "$here/regressions"; do
        [ -d "$d" ] || continue
        find "$d" -maxdepth 1 -type f ! -name '*.md' | LC_ALL=C sort
    done
}

if [ "$mode" = replay ]; then
    log=$O/replay.log
    list=$O/replay.list
    art=$O/replay-artifacts
    rm -rf "$art"
    mkdir -p "$art"
    inputs >"$list"
    n=$(wc -l <"$list")
    [ "$n" -gt 0 ] || { echo "fuzz: no inputs in $here/corpus"; echo "0 passed, 1 failed"; exit 1; }
    t0=$(date +%s)
    # One process for every input; xargs would split a long list over
    # several processes, which is as good (each input still runs once).
    FUZZ_TIMEOUT_MS=${FUZZ_TIMEOUT_MS:-1000} xargs "$O/fuzz_backend" \
        -timeout="${FUZZ_INPUT_TIMEOUT:-120}" -rss_limit_mb=4096 -artifact_prefix="$art/" \
        <"$list" >"$log" 2>&1
    rc=$?
    ran=$(grep -c '^Executed ' "$log")
    echo "fuzz: replayed $ran of $n inputs (corpus and regressions) in $(($(date +%s) - t0)) s"
    if [ "$rc" -eq 0 ] && [ "$ran" -eq "$n" ]; then
        echo "1 passed, 0 failed"
        exit 0
    fi
    grep -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$log" | sed -n '1,30p'
    last=$(sed -n 's/^Running: //p' "$log" | tail -n 1)
    echo "fuzz: exit $rc, log $log"
    [ -n "$last" ] && echo "fuzz: failing input $last"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- campaign ------------------------------------------------------------------
secs=${2:-${FUZZ_SECONDS:-600}}
work=$O/campaign-corpus
art=$O/campaign-artifacts
log=$O/campaign.log
rm -rf "$work" "$art"
mkdir -p "$work" "$art"
inputs | while read -r f; do cp "$f" "$work/"; done
jobs=${FUZZ_JOBS:-1}
fork=
[ "$jobs" -gt 1 ] && fork="-fork=$jobs -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1"
echo "fuzz: campaign of $secs s from $(ls "$work" | wc -l) inputs, log $log"
# shellcheck disable=SC2086  # $fork is several options or none
"$O/fuzz_backend" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$art/" $fork "$work" >"$log" 2>&1
rc=$?
done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$log" | tail -n 1)
stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
execs=$(stat number_of_executed_units)
rate=$(stat average_exec_per_sec)
[ -n "$execs" ] || execs=$(echo "$done_line" | sed -n 's/^#\([0-9]*\).*/\1/p')
[ -n "$rate" ] || rate=$(echo "$done_line" | sed -n 's/.*exec\/s: \([0-9]*\).*/\1/p')
cov=$(echo "$done_line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
ft=$(echo "$done_line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
crashes=$(find "$art" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
slow=$(find "$art" -type f -name 'slow-unit-*' | wc -l)
echo "fuzz: executions $execs, exec/s $rate, cov $cov, ft $ft, new units $(stat new_units_added)," \
    "peak RSS $(stat peak_rss_mb) MB, crashes $crashes, slow units $slow"
if [ "$crashes" -gt 0 ] || { [ "$rc" -ne 0 ] && [ "$jobs" -le 1 ]; }; then
    grep -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$log" | sed -n '1,30p'
    find "$art" -type f ! -name 'slow-unit-*' | sed 's/^/fuzz: crash input /'
    echo "fuzz: exit $rc"
    exit 1
fi
exit 0
