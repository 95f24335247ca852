#!/bin/sh
# Fails, listing them, if NVIDIA's libcudart.so.13 exports a name ours does
# not, or ours exports one without the version node libcudart.so.13.
#
#   guest-lib/check-exports.sh [OURLIB] [NVLIB]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
ours=${1:-$here/../build/guest-lib/libcudart.so.13}
nv=${2:-/usr/local/cuda/lib64/libcudart.so.13}

for f in "$ours" "$nv"; do
    if [ ! -r "$f" ]; then
        echo "check-exports: cannot read $f" >&2
        exit 2
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

names() {
    nm -D --defined-only "$1" | awk '{print $3}' | sed 's/@.*//' | LC_ALL=C sort -u
}
names "$nv" >"$tmp/nv"
names "$ours" >"$tmp/ours"
LC_ALL=C comm -23 "$tmp/nv" "$tmp/ours" >"$tmp/missing"
# Every CUDA name of ours carries the version node NVIDIA's does.
nm -D --defined-only "$ours" | awk '{print $3}' | grep -E '^_?_?cuda' |
    grep -v '@@libcudart\.so\.13$' >"$tmp/unversioned" || true

rc=0
if [ -s "$tmp/missing" ]; then
    echo "check-exports: $(wc -l <"$tmp/missing") NVIDIA names missing from $ours:"
    sed 's/^/  /' "$tmp/missing"
    rc=1
fi
if [ -s "$tmp/unversioned" ]; then
    echo "check-exports: names without version node libcudart.so.13:"
    sed 's/^/  /' "$tmp/unversioned"
    rc=1
fi
if [ $rc -eq 0 ]; then
    echo "check-exports: all $(wc -l <"$tmp/nv") NVIDIA names exported ($(wc -l <"$tmp/ours") in ours)"
fi
exit $rc
