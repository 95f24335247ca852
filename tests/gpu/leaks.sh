#!/usr/bin/env bash
# GPU suite: nothing leaks on the host.  Boots the guest suite "leaks"
# (tests/vm/init.sh) and, from the host, checks with nvidia-smi that the
# GPU's processes and memory come back to the baseline after
#   killed     a guest process killed mid-work (kill -9 in the guest);
#   reset      a device reset with a live session (driver unbind) whose
#              kernel never ends: QEMU's monitor (QMP) must answer within
#              100 ms all along;
#   qemu-kill  QEMU itself killed (SIGKILL) with a live session;
# and, so that each check could fail, that the session's worker shows on
# the GPU while its work runs.  Needs build/qemu and build/vm/initrd-leaks.img
# (tests/gpu/prepare.sh).  Ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
log=build/vm/logs/leaks.log
slack_mib=${VCU_LEAK_SLACK_MIB:-64}
passed=0
failed=0

verdict() {
    if [ "$1" = 0 ]; then
        echo "PASS leaks/$2"
        passed=$((passed + 1))
    else
        echo "FAIL leaks/$2 ${3:-}"
        failed=$((failed + 1))
    fi
}
mem_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk 'NR == 1 { print $1 }'; }
apps() { nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c '[0-9]'; }
workers() { pgrep -c -x vcu-worker || true; }

# Waits up to $2 seconds for line $1 in the guest's console log; gives up
# at once (status 2) when the VM's runner has ended without it: a guest
# that never started must not hold the suite for its timeouts.
wait_line() {
    local i=0
    while [ $i -lt $(($2 * 10)) ]; do
        [ -f "$log" ] && tr -d '\r' <"$log" | grep -qx "$1" && return 0
        if ! kill -0 "$runner" 2>/dev/null; then
            [ -f "$log" ] && tr -d '\r' <"$log" | grep -qx "$1" && return 0
            return 2
        fi
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}
# The VM ended early: what its runner said, once.
runner_gone() {
    echo "info: the VM's runner ended: $(tail -n 5 build/vm/leaks-run.out 2>/dev/null | tr '\n' ' ')"
}

# Back to baseline within 15 s: no compute process, no worker, memory.
check_clean() {
    local i=0 m a w
    while [ $i -lt 150 ]; do
        m=$(mem_used)
        a=$(apps)
        w=$(workers)
        if [ "$a" = 0 ] && [ "$w" = 0 ] && [ "$m" -le $((base + slack_mib)) ]; then
            verdict 0 "clean-after-$1"
            echo "info: after $1: ${m} MiB used (baseline $base), no GPU process, no worker"
            return
        fi
        sleep 0.1
        i=$((i + 1))
    done
    verdict 1 "clean-after-$1" "(${m} MiB used, baseline $base; $a GPU processes; $w workers)"
}

check_running() {
    local a m
    a=$(apps)
    m=$(mem_used)
    if [ "$a" -ge 1 ] && [ "$(workers)" -ge 1 ] && [ "$m" -gt $((base + 200)) ]; then
        verdict 0 "visible-while-running-$1"
        echo "info: while running ($1): $a GPU process(es), ${m} MiB used"
    else
        verdict 1 "visible-while-running-$1" "($a GPU processes, ${m} MiB used, baseline $base)"
    fi
}

command -v nvidia-smi >/dev/null || { echo "leaks: no nvidia-smi"; echo "0 passed, 1 failed"; exit 1; }
base=$(mem_used)
echo "info: baseline ${base} MiB used, $(apps) GPU processes"
rm -f "$log"
qmp=$(mktemp -u /tmp/vcu-leaks-qmp.XXXXXX)
VCU_QMP=$qmp VCU_REAL_GPU=1 VCU_NO_BUILD=1 tests/vm/run.sh leaks >build/vm/leaks-run.out 2>&1 &
runner=$!

gone=0
for phase in killed reset; do
    if [ $gone = 1 ]; then
        verdict 1 "$phase" "(the VM had ended)"
        continue
    fi
    wait_line "VCU-LEAKS running $phase" 240
    st=$?
    [ $st = 2 ] && { gone=1; runner_gone; }
    if [ $st = 0 ]; then
        check_running "$phase"
        if [ "$phase" = reset ]; then
            lat=$(python3 tests/gpu/qmp-latency.py "$qmp" "$log" "VCU-LEAKS after reset" 60 2>&1)
            ms=$(printf '%s\n' "$lat" | sed -n 's/^qmp-latency max_ms=\([0-9.]*\).*/\1/p')
            if [ -n "$ms" ] && awk -v m="$ms" 'BEGIN { exit !(m < 100) }'; then
                verdict 0 monitor-answers-during-reset
                echo "info: QMP during the reset: $lat"
            else
                verdict 1 monitor-answers-during-reset "($lat)"
            fi
        fi
        wait_line "VCU-LEAKS after $phase" 60 || verdict 1 "$phase" "(no 'after' line)"
        check_clean "$phase"
    else
        verdict 1 "$phase" "(the guest never got its work running)"
    fi
done
if [ $gone = 0 ] && wait_line "VCU-LEAKS running qemu-kill" 120; then
    check_running qemu-kill
    pkill -KILL -f 'vcu.suite=leaks' || true
    check_clean qemu-kill
else
    verdict 1 qemu-kill "(the guest never got its work running)"
fi
pkill -KILL -f 'vcu.suite=leaks' 2>/dev/null
wait "$runner" 2>/dev/null
rm -f "$qmp"
tr -d '\r' <"$log" 2>/dev/null | grep '^VCU-TEST leaks/' | sed 's/^VCU-TEST /guest: /'
tr -d '\r' <"$log" 2>/dev/null | grep -q '^VCU-TEST leaks/.* FAIL' && verdict 1 guest-steps "(see above)"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
