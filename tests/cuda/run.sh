#!/bin/sh
# Runs the CUDA test programs: run.sh [BINDIR [TEST...]]
# A passing program's "info:" lines (measurements) follow its PASS line,
# indented.
#
# POSIX sh; runs under busybox in the guest.  BINDIR (default: this
# script's folder) holds the programs and tests.list.  Each program must
# exit 0 with "PASS <name>" as its last line other than "info:" lines.
# Then two programs run at once, as two processes sharing the device.  Tests
# whose kernels fault on purpose run in list order: a fault stays in the
# process that made it (each guest process has a host process of its own).
# Ends with "N passed, N failed"; exits 1 if anything failed.
#
# Environment: VCU_TEST_TIMEOUT, seconds per program (default 300).

bindir=${1:-$(dirname "$0")}
[ $# -gt 0 ] && shift
limit=${VCU_TEST_TIMEOUT:-300}
passed=0
failed=0

if [ ! -f "$bindir/tests.list" ]; then
    echo "run.sh: no $bindir/tests.list" >&2
    exit 2
fi

# busybox before 1.30 spells it "timeout -t SECS".
tmo=
if timeout 5 true >/dev/null 2>&1; then
    tmo="timeout $limit"
elif timeout -t 5 true >/dev/null 2>&1; then
    tmo="timeout -t $limit"
fi

tmp=$(mktemp -d 2>/dev/null) || tmp=/tmp/vcu-run.$$
mkdir -p "$tmp" || exit 2
trap 'rm -rf "$tmp"' EXIT

# check NAME RC FILE: judge one finished program and print its verdict.
check() {
    last=$(grep -v '^info:' "$3" | tail -n 1)
    if [ "$2" = 0 ] && [ "$last" = "PASS $1" ]; then
        echo "PASS $1"
        grep '^info:' "$3" | sed 's/^/    /'
        passed=$((passed + 1))
    else
        echo "FAIL $1 (rc=$2)"
        sed 's/^/    /' "$3"
        failed=$((failed + 1))
    fi
}

if [ $# -gt 0 ]; then
    tests=$*
else
    tests=$(grep -v '^[[:space:]]*\(#\|$\)' "$bindir/tests.list")
fi

run_one() {
    if [ ! -x "$bindir/$1" ]; then
        echo "FAIL $1 (rc=missing)"
        failed=$((failed + 1))
        return
    fi
    $tmo "$bindir/$1" >"$tmp/$1.out" 2>&1
    check "$1" $? "$tmp/$1.out"
}

for t in $tests; do
    run_one "$t"
done

# Two processes at once, each with its own context on the one device.
if [ $# -eq 0 ] && [ -x "$bindir/vector_add" ] && [ -x "$bindir/matmul" ]; then
    $tmo "$bindir/vector_add" >"$tmp/p1.out" 2>&1 &
    p1=$!
    $tmo "$bindir/matmul" >"$tmp/p2.out" 2>&1 &
    p2=$!
    wait $p1
    rc1=$?
    wait $p2
    rc2=$?
    l1=$(grep -v '^info:' "$tmp/p1.out" | tail -n 1)
    l2=$(grep -v '^info:' "$tmp/p2.out" | tail -n 1)
    if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$l1" = "PASS vector_add" ] &&
       [ "$l2" = "PASS matmul" ]; then
        echo "PASS two_processes"
        passed=$((passed + 1))
    else
        echo "FAIL two_processes (rc=$rc1,$rc2)"
        sed 's/^/    vector_add: /' "$tmp/p1.out"
        sed 's/^/    matmul: /' "$tmp/p2.out"
        failed=$((failed + 1))
    fi
fi

echo "$passed passed, $failed failed"
[ $failed = 0 ]
