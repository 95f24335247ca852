#!/usr/bin/env bash
# The README's commands as a new user meets them: a fresh clone of HEAD
# and an empty cache, so that nothing an earlier run left behind helps.
#
#   scripts/cold-run.sh [TARGET...]      (default: run test)
#
# Clones HEAD (committed work only) into a scratch folder, points VCU_CACHE
# at an empty folder beside it, runs `make TARGET` there for each target
# in turn, and prints each one's duration and last line.  The clone and
# the cache are removed after a success and kept after a failure.  Run as
# root on a Debian 12 machine with the CUDA toolkit, like `make test`;
# scripts/deps.sh's packages are checked, not removed (a really fresh
# machine also installs them: add the minutes apt takes).  It downloads the
# QEMU source package (about 40 MB) and the guest kernel (about 26 MB) and
# builds QEMU, so it needs the network and takes minutes (README,
# "First run").
#
# Environment: VCU_COLD_DIR, where the scratch folder goes [/var/tmp].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(run test)

work=$(mktemp -d "${VCU_COLD_DIR:-/var/tmp}/vcu-cold-run.XXXXXX")
echo "cold-run: clone of $(git -C "$root" rev-parse --short HEAD) in $work/src, empty cache $work/cache"
git clone -q --no-local "$root" "$work/src"
mkdir -p "$work/cache"
export VCU_CACHE=$work/cache

status=0
summary=
for t in "${targets[@]}"; do
    echo "cold-run: make $t"
    t0=$(date +%s)
    rc=0
    make --no-print-directory -C "$work/src" "$t" 2>&1 | tee "$work/make-$t.log" || rc=$?
    secs=$(($(date +%s) - t0))
    # make test's "N passed, N failed", else the last line.
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$work/make-$t.log" | tail -n 1)
    [ -n "$last" ] || last=$(tail -n 1 "$work/make-$t.log")
    summary="$summary
cold-run: make $t: exit $rc after ${secs}s; last line: $last"
    [ "$rc" -eq 0 ] || status=1
done
echo "$summary" | sed '/^$/d'
if [ "$status" -eq 0 ]; then
    rm -rf "$work"
    echo "cold-run: all passed"
else
    echo "cold-run: kept $work (logs: $work/make-*.log)"
fi
exit $status
