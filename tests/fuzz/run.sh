#!/bin/sh
# The fuzz targets (docs/fuzzing.md): regression replay for the test
# suite, or an open-ended campaign.
#
#   tests/fuzz/run.sh replay            (make test's fuzz suite)
#   tests/fuzz/run.sh campaign [SECS]   (make fuzz; default 600 s in all)
#
# FUZZ_TARGETS="device proxy" limits either to those targets (default: all
# of them, `make -s -C tests/fuzz targets`).  Both build the targets and
# the stand-in for libcuda under $O (default build/fuzz) first.
#
# replay: for each target, every input of tests/fuzz/corpus/NAME and
# tests/fuzz/regressions/NAME once, in name order, with no mutation (for
# backend also gen_corpus.py's seeds and regressions, made under $O), so
# that an unchanged tree gives the same verdict every time whatever the
# machine's load: a backend request that does not complete within
# FUZZ_TIMEOUT_MS (1000 here, generous) ends by a backend reset, and an
# input gets -timeout=$FUZZ_INPUT_TIMEOUT (default 120) seconds before
# libFuzzer calls it hung.  Prints a line per target, then "N passed, M
# failed" (one each per target) and, for a failure, the failing input.
#
# campaign: each target in turn mutates from its corpus and regressions
# (a scratch copy: the committed files are never changed) for its share of
# SECS, then its line says executions, executions per second, coverage
# (cov: edges, ft: features), the units it added, peak RSS, the crashes
# (crash-, leak-, timeout-, oom- artifacts) and the slow units (slow-unit-:
# reported, not failures).  New units stay in $O/campaign/NAME/corpus
# (merge them into tests/fuzz/corpus/NAME with -merge=1).  A crash input
# belongs in tests/fuzz/regressions/NAME once fixed.  FUZZ_JOBS=N runs N
# processes of each target at once (libFuzzer -fork).  Exits 1 on a crash.
#
# Reproduce one input:
#   FUZZ_DEBUG=1 $O/fuzz_NAME FILE
# (VCU_LIBCUDA=$O/fakecuda/libcuda.so.1 for backend and batch; FUZZ_DEBUG
# makes each harness say what it does).
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
all=$(make -s -C "$here" targets)
targets=${FUZZ_TARGETS:-$all}
for t in $targets; do
    case " $all " in
    *" $t "*) ;;
    *) echo "fuzz: no target $t (targets: $all)"; echo "0 passed, 1 failed"; exit 1 ;;
    esac
done
export VCU_LIBCUDA="$O/fakecuda/libcuda.so.1"
# Many sessions in one process: a fault stays in its context (the stand-in
# makes faults process-wide by default, as driver 580 does).
export VCU_FAKECUDA_STICKY=context

# The hand-built seeds, made here from the protocol header and the call
# list as they are now (opcode indices and call numbers move when those
# change), never kept in git: gen_seeds.py's for every target but backend
# (hand/NAME/seed-*), gen_corpus.py's seeds and slow-* regressions for
# backend.
gen=$O/generated
rm -rf "$gen"
mkdir -p "$gen/hand" "$gen/seeds" "$gen/regressions"
if ! { python3 "$here/gen_seeds.py" "$gen/hand" &&
    python3 "$here/gen_corpus.py" "$gen/seeds" &&
    python3 "$here/gen_corpus.py" --regressions "$gen/regressions"; } >"$O/gen.log" 2>&1; then
    cat "$O/gen.log"
    echo "fuzz: gen_seeds.py or gen_corpus.py failed"
    echo "0 passed, 1 failed"
    exit 1
fi

# A target's inputs: its seeds, its corpus, then its regressions, each in
# name order (not README.md).
inputs() {
    dirs="$gen/hand/$1 $here/corpus/$1 $here/regressions/$1"
    [ "$1" = backend ] && dirs="$gen/seeds $gen/regressions $dirs"
    for d in $dirs; do
        [ -d "$d" ] || continue
        find "$d" -maxdepth 1 -type f ! -name '*.md' | LC_ALL=C sort
    done
}

passed=0
failed=0

if [ "$mode" = replay ]; then
    for t in $targets; do
        log=$O/replay-$t.log
        list=$O/replay-$t.list
        art=$O/replay-artifacts/$t
        rm -rf "$art"
        mkdir -p "$art"
        inputs "$t" >"$list"
        n=$(wc -l <"$list")
        if [ "$n" -eq 0 ]; then
            echo "fuzz: $t: no inputs in $here/corpus/$t"
            failed=$((failed + 1))
            continue
        fi
        t0=$(date +%s)
        # One process for every input; xargs would split a long list over
        # several processes, which is as good (each input still runs once).
        FUZZ_TIMEOUT_MS=${FUZZ_TIMEOUT_MS:-1000} xargs "$O/fuzz_$t" \
            -timeout="${FUZZ_INPUT_TIMEOUT:-120}" -rss_limit_mb=4096 -artifact_prefix="$art/" \
            <"$list" >"$log" 2>&1
        rc=$?
        ran=$(grep -c '^Executed ' "$log")
        echo "fuzz: $t: replayed $ran of $n inputs in $(($(date +%s) - t0)) s"
        if [ "$rc" -eq 0 ] && [ "$ran" -eq "$n" ]; then
            passed=$((passed + 1))
            continue
        fi
        failed=$((failed + 1))
        grep -E "ERROR|SUMMARY|runtime error|check failed|#[0-9]+ 0x" "$log" | sed -n '1,30p'
        last=$(sed -n 's/^Running: //p' "$log" | tail -n 1)
        echo "fuzz: $t: exit $rc, log $log"
        [ -n "$last" ] && echo "fuzz: $t: failing input $last"
    done
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
fi

# ---- campaign ------------------------------------------------------------------
secs=${2:-${FUZZ_SECONDS:-600}}
jobs=${FUZZ_JOBS:-1}
ntargets=$(echo $targets | wc -w)
share=$((secs / ntargets))
[ "$share" -gt 0 ] || share=1
fork=
[ "$jobs" -gt 1 ] && fork="-fork=$jobs -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1"
echo "fuzz: campaign of $secs s: $share s for each of $targets"
for t in $targets; do
    work=$O/campaign/$t/corpus
    art=$O/campaign/$t/artifacts
    log=$O/campaign/$t/log
    rm -rf "$work" "$art"
    mkdir -p "$work" "$art"
    inputs "$t" | while read -r f; do cp "$f" "$work/"; done
    # shellcheck disable=SC2086  # $fork is several options or none
    "$O/fuzz_$t" -max_total_time="$share" -timeout=30 -rss_limit_mb=4096 \
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
    echo "fuzz: $t: executions $execs, exec/s $rate, cov $cov, ft $ft, new units $(stat new_units_added)," \
        "peak RSS $(stat peak_rss_mb) MB, crashes $crashes, slow units $slow"
    if [ "$crashes" -gt 0 ] || { [ "$rc" -ne 0 ] && [ "$jobs" -le 1 ]; }; then
        failed=$((failed + 1))
        grep -E "ERROR|SUMMARY|runtime error|check failed|#[0-9]+ 0x" "$log" | sed -n '1,30p'
        find "$art" -type f ! -name 'slow-unit-*' | sed "s/^/fuzz: $t: crash input /"
        echo "fuzz: $t: exit $rc, log $log"
    else
        passed=$((passed + 1))
    fi
done
[ "$failed" -eq 0 ] || exit 1
exit 0
