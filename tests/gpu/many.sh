#!/usr/bin/env bash
# GPU suite: many VMs on one GPU.  Four TCG guests of two guest processes
# each, with mixed memory quotas and compute shares, run together for
# VCU_MANY_SECS seconds (600): in each VM the compute-bound kernel loop
# (tests/share/share_loop.cu) and the checker (tests/many/many_work.cu:
# every result checked, the quota probed); halfway, vm1's checker faults
# (a new one goes on after it) and vm2 is reset through QMP and runs its
# suite again until the end.
#
#   vm0  mem-quota=3G  compute-share=10
#   vm1  mem-quota=4G  compute-share=20   (its checker faults at SECS/2)
#   vm2  mem-quota=3G  compute-share=30   (reset at SECS/2)
#   vm3  mem-quota=6G  compute-share=40
#
# First the loop runs natively for 20 s (the GPU's throughput without
# VMs).  tests/gpu/many_watch.py follows and judges the run (share
# accuracy ±5 points, wrong results 0, quota violations 0, lost work 0,
# the fault kept to its process, the reset VM back at work); then the
# GPU's memory and process list must be back to the baseline.  One line
# per check, "many: WHAT ... PASS|FAIL", then "N passed, N failed".
# Needs build/qemu, build/vm/initrd-share.img and build/vm/share_loop
# (tests/gpu/prepare.sh).  It runs longer than one call on the GPU
# machine: start it in a session of its own (setsid) and collect its log.
set -u
cd "$(dirname "$0")/../.."
secs=${VCU_MANY_SECS:-600}
half=$((secs / 2))
qmp=$(mktemp -u /tmp/vcu-many-qmp.XXXXXX)
logroot=build/vm/logs/many-run
slack_mib=${VCU_LEAK_SLACK_MIB:-64}
passed=0
failed=0

. tests/gpu/vmcase.sh
vmcase_init many "${VCU_MANY_FAKE:-0}" "$logroot"
vmcase_daemon
trap 'vmcase_end; rm -f "$qmp"' EXIT

mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | awk 'NR == 1 { print $1 }'; }
apps() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c '[0-9]'; }
workers() { pgrep -c -x vcu-worker || true; }
count() {
    if [ "$1" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

base=0
[ "${VCU_MANY_FAKE:-0}" = 1 ] || base=$(mem_used)
echo "info: baseline ${base} MiB used, $( [ "${VCU_MANY_FAKE:-0}" = 1 ] && echo 0 || apps) GPU processes"

# The loop natively, alone: the GPU's throughput without VMs.
native=0
if [ "${VCU_MANY_FAKE:-0}" != 1 ] && [ -x build/vm/share_loop ] && [ -f build/nvidia/libcudart.so.13 ]; then
    out=$(LD_LIBRARY_PATH=build/nvidia build/vm/share_loop native 20 2>&1 | tail -n 1)
    native=$(printf '%s\n' "$out" | awk '/ done / { for (i = 1; i <= NF; i++) { if ($i ~ /^kernels=/) k = substr($i, 9); if ($i ~ /^secs=/) s = substr($i, 6) } } END { if (s > 0) printf "%.1f", k / s; else print 0 }')
    echo "info: native: the loop alone, $native kernels/s ($out)"
fi

# start_vm NAME MANY [DEVICE-OPTION...]: one VM in the background, its
# console log in $logroot/NAME/share.log; $! is its tests/vm/run.sh.
start_vm() {
    local name=$1 many=$2
    shift 2
    vmcase_boot "$name" "${VM_TIMEOUT:-$((secs + 240))}" \
        "vcu.share_procs=1 vcu.share_secs=$secs vcu.many=$many" \
        ${QMP_FOR:+VCU_QMP=$QMP_FOR VCU_VM_REBOOT=1} -- "$@"
}

start_vm vm0 3072,0 mem-quota=3G compute-share=10
p0=$!
start_vm vm1 4096,$half mem-quota=4G compute-share=20
p1=$!
# The reset VM runs its suite once more after the reset, from the start:
# its QEMU is stopped soon after the others are done (its timeout),
# mid-work, which must leave nothing behind either.
VM_TIMEOUT=$((secs + 40)) QMP_FOR=$qmp start_vm vm2 3072,0 mem-quota=3G compute-share=30
p2=$!
start_vm vm3 6144,0 mem-quota=6G compute-share=40
p3=$!

python3 tests/gpu/many_watch.py "$secs" vm2 "$qmp" "$native" "$p0,$p1,$p2,$p3" \
    vm0="$logroot/vm0/share.log:10" vm1="$logroot/vm1/share.log:20" \
    vm2="$logroot/vm2/share.log:30" vm3="$logroot/vm3/share.log:40" -- 5 >"$logroot/watch.out" 2>&1
cat "$logroot/watch.out"
passed=$((passed + $(grep -c '^many: .* PASS$' "$logroot/watch.out")))
failed=$((failed + $(grep -c '^many: .* FAIL$' "$logroot/watch.out")))
[ -s "$logroot/watch.out" ] || failed=$((failed + 1))
wait
for name in vm0 vm1 vm3; do
    echo "info: $name: $(grep -E 'passed' "$logroot/$name.out" | tail -n 1)"
done

# Back to the baseline within 15 s: no compute process, no worker, the
# GPU's memory as before.
if [ "${VCU_MANY_FAKE:-0}" != 1 ]; then
    i=0
    while [ $i -lt 150 ]; do
        m=$(mem_used)
        a=$(apps)
        w=$(workers)
        [ "$a" = 0 ] && [ "$w" = 0 ] && [ "$m" -le $((base + slack_mib)) ] && break
        sleep 0.1
        i=$((i + 1))
    done
    if [ "$a" = 0 ] && [ "$w" = 0 ] && [ "$m" -le $((base + slack_mib)) ]; then
        echo "many: clean after the run: ${m} MiB used (baseline $base), no GPU process, no worker PASS"
        count 0
    else
        echo "many: clean after the run: ${m} MiB used (baseline $base), $a GPU processes, $w workers FAIL"
        count 1
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
