#!/usr/bin/env bash
# The worker's migration core on the GPU (tests/gpu/mig-core.c): a
# session saved by one process and loaded by a fresh one, each with a
# module cache of its own, goes on with its rounds (launches, a graph
# built node by node and one captured from a stream, each launched from
# its exec made before the save) at the same addresses and handles; with address randomization the load is refused, saying
# why; and the time of a save and a load with 1 GiB more device memory.
# Run from the carried build (tests/gpu/prepare.sh: build/probes).
# Last line "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
dir=$PWD/build/probes
bin=$dir/mig-core
st=$(mktemp -d /dev/shm/vcu-mig.XXXXXX 2>/dev/null || mktemp -d)
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
ko() { echo "FAIL $1"; failed=$((failed + 1)); }

if [ ! -x "$bin" ] || [ ! -f "$dir/probe-migrate.fatbin" ]; then
    echo "mig-core: build/probes lacks mig-core (run tests/gpu/prepare.sh)"
    echo "0 passed, 1 failed"
    exit 1
fi
if setarch -R true 2>/dev/null; then
    norand="setarch -R"
else
    echo "mig-core: setarch -R does not work here"
    echo "0 passed, 1 failed"
    exit 1
fi

out=$($norand "$bin" save "$dir" "$st/a" 5 2>&1 && $norand "$bin" load "$dir" "$st/a" 5 2>&1)
echo "$out" | sed 's/^/    /'
if echo "$out" | grep -q '^PASS load'; then ok "mig-core: saved, loaded by a fresh process, rounds and graphs go on"; else ko "mig-core: roundtrip"; fi

out=$("$bin" save "$dir" "$st/b" 2 2>&1; "$bin" load "$dir" "$st/b" 2 2>&1)
echo "$out" | sed 's/^/    /'
if echo "$out" | grep -q '^FAIL load: .*came out otherwise'; then
    ok "mig-core: with address randomization the load is refused with its reason"
elif echo "$out" | grep -q '^PASS load'; then
    ok "mig-core: with address randomization the addresses happened to match (load checked them)"
else
    ko "mig-core: load with address randomization"
fi

out=$(MIG_EXTRA_MIB=1024 $norand "$bin" save "$dir" "$st/c" 2 2>&1 && $norand "$bin" load "$dir" "$st/c" 2 2>&1)
echo "$out" | sed 's/^/    /'
if echo "$out" | grep -q '^PASS load'; then ok "mig-core: 1 GiB more device memory carried"; else ko "mig-core: 1 GiB"; fi
rm -rf "$st"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
