#!/bin/sh
# Fails, listing them, if the CUDA toolkit's stub libcuda.so exports a
# name our libcuda.so.1 or cuda_calls.list (the one list the library is
# generated from) lacks, or the list and the library disagree.  The list
# may hold more than the stub (graphics interop, which NVIDIA's Linux
# driver exports and its stub does not).  Also fails if gen-cuda.py
# accepts a "remote" line it cannot carry (guest memory of no fixed size,
# a new object, a callback, an array beside its count, a number taken
# twice, a union without its selector's values), or a "local" line
# without its reason, instead of failing the build with the reason.
#
#   guest-lib/check-libcuda-exports.sh [OURLIB] [STUB]
set -eu

here=$(cd "$(dirname "$0")" && pwd)
ours=${1:-$here/../build/guest-lib/libcuda.so.1}
stub=${2:-/usr/local/cuda/lib64/stubs/libcuda.so}

for f in "$ours" "$stub" "$here/../include/cuda_calls.list"; do
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
sed 's/#.*//' "$here/../include/cuda_calls.list" | awk 'NF {print $1}' | LC_ALL=C sort -u >"$tmp/list"
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
# The generator refuses what is not plain, naming the argument.
inc=${CUDA_INC:-/usr/local/cuda/include}
refuse() {
    local what=$1 want=$2
    shift 2
    sed "$@" "$here/../include/cuda_calls.list" >"$tmp/bad.list"
    if python3 "$here/../include/gen-cuda.py" --host "$tmp/bad.list" "$inc" "$tmp" 2>"$tmp/gen.err"; then
        echo "check-libcuda-exports: gen-cuda.py accepted $what"
        rc=1
    elif ! grep -q "$want" "$tmp/gen.err"; then
        echo "check-libcuda-exports: gen-cuda.py refused $what without saying \"$want\":"
        sed 's/^/  /' "$tmp/gen.err"
        rc=1
    fi
}
refuse "cuMemcpyHtoD_v2 as remote" "srcHost' is guest memory of no fixed size" \
    -e 's/^cuMemcpyHtoD_v2 .*/cuMemcpyHtoD_v2 remote 0x7f00/'
refuse "cuStreamCreate as remote" "phStream' is a new object" \
    -e 's/^cuStreamCreate .*/cuStreamCreate remote 0x7f01/'
refuse "cuLaunchHostFunc as remote" "CUhostFn fn' is a type the generator does not carry" \
    -e 's/^cuLaunchHostFunc .*/cuLaunchHostFunc remote 0x7f02/'
refuse "cuMemDiscardBatchAsync as remote" "beside the count 'count' is an array" \
    -e 's/^cuMemDiscardBatchAsync .*/cuMemDiscardBatchAsync remote 0x7f03/'
refuse "a call number given twice" "call number 0x0001 is 0, taken or retired" \
    -e 's/^cuGraphExecGetFlags .*/cuGraphExecGetFlags remote 0x0001/'
refuse "a retired call number given again" "call number 0x0019 is 0, taken or retired" \
    -e 's/^cuDeviceGetExecAffinitySupport .*/cuDeviceGetExecAffinitySupport remote 0x0019/'
refuse "a union argument without its selector's values" "needs its selector's allowed values" \
    -e 's/^\(cuStreamGetAttribute  *remote 0x0001\).*/\1/'
refuse "a local call without its reason" "a local call needs its reason" \
    -e 's/^\(cuArrayDestroy  *local\) .*/\1/'
refuse "a local call with an unknown reason" "no '# why nosuch:' line" \
    -e 's/^\(cuArrayDestroy  *local\) .*/\1 nosuch/'
refuse "a reason no local call gives" "no local call gives the reason spare" \
    -e 's/^# why lib:/# why spare: unused\n&/'
# docs/driver-api.md's counts are the list's.
if ! python3 "$here/../include/gen-cuda.py" --counts "$here/../include/cuda_calls.list" \
        "$here/../docs/driver-api.md"; then
    rc=1
fi

if [ $rc -eq 0 ]; then
    echo "check-libcuda-exports: all $(wc -l <"$tmp/stub") names of the stub exported ($(wc -l <"$tmp/ours") in ours, as cuda_calls.list says); gen-cuda.py refuses 6 calls it cannot carry and 3 ill-given reasons"
fi
exit $rc
