#!/bin/sh
# Fails, listing them, if the CUDA toolkit's stub libcuda.so exports a
# name our libcuda.so.1 or cuda_calls.list (the one list the library is
# generated from) lacks, or the list and the library disagree.  The list
# may hold more than the stub (graphics interop, which NVIDIA's Linux
# driver exports and its stub does not).
#
#   guest-lib/check-libcuda-exports.sh [OURLIB] [STUB]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
ours=${1:-$here/../build/guest-lib/libcuda.so.1}
stub=${2:-/usr/local/cuda/lib64/stubs/libcuda.so}

for f in "$ours" "$stub" "$here/cuda_calls.list"; do
    if [ ! -r "$f" ]; then
        echo "check-libcuda-exports: cannot read $f" >&2
        exit 2
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

names() {
    nm -D --defined-only "$1" | awk '{print $3}' | sed 's/@.*//' | LC_ALL=C sort -u
}
names "$stub" >"$tmp/stub"
names "$ours" >"$tmp/ours"
sed 's/#.*//' "$here/cuda_calls.list" | awk 'NF {print $1}' | LC_ALL=C sort -u >"$tmp/list"
LC_ALL=C comm -23 "$tmp/stub" "$tmp/ours" >"$tmp/missing"
LC_ALL=C comm -23 "$tmp/stub" "$tmp/list" >"$tmp/unlisted"
LC_ALL=C comm -3 "$tmp/list" "$tmp/ours" >"$tmp/listdiff"

rc=0
if [ -s "$tmp/missing" ]; then
    echo "check-libcuda-exports: $(wc -l <"$tmp/missing") names of the stub missing from $ours:"
    sed 's/^/  /' "$tmp/missing"
    rc=1
fi
if [ -s "$tmp/unlisted" ]; then
    echo "check-libcuda-exports: names of the stub missing from cuda_calls.list:"
    sed 's/^/  /' "$tmp/unlisted"
    rc=1
fi
if [ -s "$tmp/listdiff" ]; then
    echo "check-libcuda-exports: cuda_calls.list and $ours differ (left: list only, right: library only):"
    sed 's/^/  /' "$tmp/listdiff"
    rc=1
fi
if [ $rc -eq 0 ]; then
    echo "check-libcuda-exports: all $(wc -l <"$tmp/stub") names of the stub exported ($(wc -l <"$tmp/ours") in ours, as cuda_calls.list says)"
fi
exit $rc
