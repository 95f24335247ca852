#!/usr/bin/env bash
# GPU suite: packed mode (docs/design.md "Packed mode"), VMs of sms=N SMs
# each, clients of one MPS control daemon this script starts (and quits).
# Boots TCG guests whose processes run the compute-bound kernel loop
# (tests/share/share_loop.cu) and tests/packed/packed_check (the SMs the
# guest is told of and the %smid values its kernels run on), and judges
# from their consoles (tests/gpu/share_watch.py):
#   alone   one packed VM: its check passes before and after its loop; the
#           loop's rate is the baseline
#   pair    two packed VMs at once: each runs at its rate alone (95-105 %),
#           side by side (isolated VMs would take turns: 50 % each)
#   mixed   a packed VM and an isolated one at once, QEMU of the isolated
#           one told where the daemon is ($CUDA_MPS_PIPE_DIRECTORY): the
#           packed VM's workers are the daemon's clients, the isolated
#           VM's are not, and both VMs' suites pass
#   fault   two packed VMs and an isolated one; one packed VM's process
#           faults midway (tests/many's checker, FAULT_AT): it sees the
#           sticky error, a new process after it works, and so does a new
#           process in the other packed VM; the isolated VM's loop runs on
#           to its end.  What the fault did to the other packed VM's
#           running loop is reported (MPS: it is ended too, SHARING-FACTS
#           P20), not judged
#   cuda    the CUDA suite in a packed VM: all of it passes but the
#           isolation test, which must find another process's memory out
#           of reach; its attacker's kernel fault then ends the victim's
#           work too (MPS), which that test cannot pass
# One line per case: "packed: CASE ... PASS|FAIL", then "N passed, N
# failed".  About 3.5 minutes.  Needs build/qemu and
# build/vm/initrd-share.img (tests/gpu/prepare.sh) and nvidia-cuda-mps-control.
#
#   tests/gpu/packed.sh [CASE,...]          (default: all)
#   VCU_PACKED_SMS=N    SMs of each packed VM [64]
#   VCU_PACKED_SECS=S   seconds of each case's loops [20]
#   VCU_PACKED_FAKE=1   on the CPU stand-in, no GPU and no daemon (a
#                       "control" file stands for it; the plumbing only)
set -u
cd "$(dirname "$0")/../.."
cases=${1:-alone,pair,mixed,fault,cuda}
sms=${VCU_PACKED_SMS:-64}
secs=${VCU_PACKED_SECS:-20}
logroot=build/vm/logs/packed-run
passed=0
failed=0
base=0

. tests/gpu/vmcase.sh
vmcase_init packed "${VCU_PACKED_FAKE:-0}" "$logroot"
mps=$(mktemp -d /tmp/vcu-packed-mps.XXXXXX)
pipe=$mps/pipe
mkdir -p "$pipe" "$mps/log"
if [ "${VCU_PACKED_FAKE:-0}" = 1 ]; then
    : >"$pipe/control"
    ctl() { :; }
else
    command -v nvidia-cuda-mps-control >/dev/null ||
        { echo "packed: no nvidia-cuda-mps-control"; echo "0 passed, 1 failed"; rm -rf "$mps"; exit 1; }
    ctl() { CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$mps/log nvidia-cuda-mps-control "$@"; }
    ctl -d || { echo "packed: the MPS control daemon did not start"; echo "0 passed, 1 failed"; rm -rf "$mps"; exit 1; }
    sleep 1
fi
quit_mps() {
    [ "${VCU_PACKED_FAKE:-0}" = 1 ] || echo quit | ctl >/dev/null 2>&1
    sleep 1
    rm -rf "$mps"
}
# MPS serves clients of any user (the workers run as nobody): the pipe
# folder must be reachable by them, and writable by nobody else.
chmod 755 "$mps" "$pipe"
if [ "${VCU_PACKED_FAKE:-0}" = 1 ]; then vmcase_daemon; else vmcase_daemon --mps-pipe "$pipe"; fi
trap 'vmcase_end; quit_mps' EXIT

# start_vm NAME PROCS APPEND [ENV=VALUE...] -- [DEVICE-OPTION...]: boots
# one VM in the background ($! is its tests/vm/run.sh).
start_vm() {
    local name=$1 procs=$2 app=$3
    shift 3
    vmcase_boot "$name" $((secs + 150)) "vcu.share_procs=$procs vcu.share_secs=$secs $app" "$@"
}

judge() {
    local c=$1 target=$2 pids=$3 out
    shift 3
    out=$(python3 tests/gpu/share_watch.py "$c" $((secs + 200)) "$pids" "$@" -- "$target")
    local rc=$?
    printf '%s\n' "$out" | grep -v '^rate=\|^kernel_ms=' | sed 's/^share: /packed: /'
    rate=$(printf '%s\n' "$out" | sed -n 's/^rate=//p')
    if [ $rc = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

# vm_ok NAME: its suite passed whole (every VCU-TEST line).
vm_ok() { tail -n 1 "$logroot/$1.out" | grep -q ' 0 failed$'; }
vm_says() { echo "info: VM $1: $(grep -E 'FAIL|passed' "$logroot/$1.out" | tr '\n' ' ' | cut -c1-400)"; }
# result NAME TEST: PASS, FAIL or "none" for one VCU-TEST line of a VM.
result() {
    local r
    r=$(grep -a "^VCU-TEST share/$2 " "$logroot/$1/share.log" 2>/dev/null | tail -n 1 | awk '{print $3}')
    echo "${r:-none}"
}
verdict() {
    if [ "$1" = 0 ]; then echo "packed: $2 PASS"; passed=$((passed + 1)); else echo "packed: $2 FAIL"; failed=$((failed + 1)); fi
}
finish() {
    local name
    wait
    for name in "$@"; do
        vm_ok "$name" || { vm_says "$name"; failed=$((failed + 1)); }
    done
}
# The vcu-worker processes of VM NAME (the daemon's word).
vm_workers() { vmcase_workers "$1"; }
mps_clients() {
    local s
    for s in $(echo get_server_list | ctl 2>/dev/null); do
        echo "get_client_list $s" | ctl 2>/dev/null
    done
}

packed="sms=$sms"
case ",$cases," in *,alone,*)
    start_vm alone 1 "vcu.packed=$sms" -- "$packed"
    judge alone rate $! vm0="$logroot/alone/share.log"
    awk -v r="${rate:-0}" 'BEGIN { exit !(r > 0) }' && base=$rate
    wait
    echo "info: alone: $(grep -a '^VCU-PACKED' "$logroot/alone/share.log" | tr '\n' ' ')"
    vm_ok alone
    verdict $? "check: the guest sees $sms SMs (properties, NVML) and its kernels run on $sms (%smid), before and after its loop"
    ;;
esac
case ",$cases," in *,pair,*)
    start_vm pair-vm0 1 "" -- "$packed"
    p0=$!
    start_vm pair-vm1 1 "" -- "$packed"
    p1=$!
    if [ "$base" != 0 ]; then
        judge pair "ratio:$base,0.95,1.05" "$p0,$p1" vm0="$logroot/pair-vm0/share.log" vm1="$logroot/pair-vm1/share.log"
    else
        judge pair "pct:50,50,5" "$p0,$p1" vm0="$logroot/pair-vm0/share.log" vm1="$logroot/pair-vm1/share.log"
    fi
    finish pair-vm0 pair-vm1
    ;;
esac
case ",$cases," in *,mixed,*)
    start_vm mixed-packed 1 "" -- "$packed"
    start_vm mixed-isolated 1 "" CUDA_MPS_PIPE_DIRECTORY="$pipe" --
    # Asked once both VMs have workers, some seconds into their loops.
    clients= pw= iw=
    for i in $(seq 1 $((secs + 60))); do
        sleep 1
        pw=$(vm_workers mixed-packed | tr '\n' ' ')
        iw=$(vm_workers mixed-isolated | tr '\n' ' ')
        [ -n "$pw" ] && [ -n "$iw" ] && [ "$i" -ge 10 ] && break
    done
    clients=$(mps_clients | tr '\n' ' ')
    wait
    echo "info: mixed: MPS clients [$clients], packed VM's workers [$pw], isolated VM's [$iw]"
    rc=0
    if [ "${VCU_PACKED_FAKE:-0}" != 1 ]; then
        [ -n "$pw" ] && [ -n "$iw" ] || rc=1
        for p in $pw; do case " $clients " in *" $p "*) ;; *) rc=1 ;; esac; done
        for p in $iw; do case " $clients " in *" $p "*) rc=1 ;; esac; done
    fi
    for v in mixed-packed mixed-isolated; do vm_ok $v || { vm_says $v; rc=1; }; done
    verdict $rc "mixed: the packed VM's workers are MPS clients, the isolated VM's are not (told where the daemon is), both VMs' suites pass"
    ;;
esac
case ",$cases," in *,fault,*)
    start_vm fault-victim 1 "vcu.packed=$sms" -- "$packed"
    start_vm fault-faulter 0 "vcu.many=0,8" -- "$packed"
    start_vm fault-isolated 1 "" --
    wait
    seen=$(result fault-faulter many-fault-seen)
    after=$(result fault-faulter many-checker-m1)
    vafter=$(result fault-victim packed-check-after)
    loop=$(result fault-victim loop-p0)
    iloop=$(result fault-isolated loop-p0)
    echo "info: fault: the faulting process saw its fault: $seen; a new process in its VM: $after; a new process in the other VM: $vafter"
    echo "info: fault: the other packed VM's running loop: $( [ "$loop" = PASS ] && echo "ran on to its end" || echo "ended: $(grep -a 'VCU-SHARE p0 error' "$logroot/fault-victim/share.log" | head -n 1)")"
    echo "info: fault: the isolated VM's running loop: $iloop"
    [ "$seen" = PASS ] && [ "$after" = PASS ] && [ "$vafter" = PASS ] && [ "$iloop" = PASS ]
    verdict $? "fault: the faulting process sees the sticky error, new processes in both packed VMs work after it, and an isolated VM's loop beside them runs on"
    ;;
esac
case ",$cases," in *,cuda,*)
    # The CUDA suite (tests/cuda, tests/cuda-driver) in a packed VM.  Its
    # isolation test must find the other process's memory out of reach
    # (MPS clients have address spaces of their own); its attacker's
    # faulting kernel then ends the victim's work too, under MPS, so that
    # test's last checks fail by design and it is judged on the first.
    mkdir -p "$logroot/cuda"
    env $gpu_env VCU_NO_BUILD=1 VCU_VM_LOGDIR="$logroot/cuda" VCU_VM_TIMEOUT=600 \
        tests/vm/run.sh cuda "$packed" >"$logroot/cuda.out" 2>&1
    others=$(grep -a '^VCU-TEST cuda/' "$logroot/cuda/cuda.log" | grep -v ' PASS$' | grep -v '^VCU-TEST cuda/isolation ' | tr '\n' ' ')
    npass=$(grep -ac '^VCU-TEST cuda/.* PASS$' "$logroot/cuda/cuda.log")
    secret=$(grep -ac "another process got none of this process's memory" "$logroot/cuda/cuda.log")
    echo "info: cuda: $npass passed; isolation: $(grep -a '^VCU-TEST cuda/isolation ' "$logroot/cuda/cuda.log" | cut -c1-120); $(grep -a 'FAIL isolation' "$logroot/cuda/cuda.log" | head -n 1 | cut -c1-200)"
    # A passing test's output is not shown: then nothing was reached.
    grep -aq '^VCU-TEST cuda/isolation PASS' "$logroot/cuda/cuda.log" && secret=1
    [ -z "$others" ] && [ "$secret" -ge 1 ] && [ "$npass" -ge 40 ]
    verdict $? "cuda: the CUDA suite passes in a packed VM (${others:-nothing else failed}), and another process gets none of a process's memory"
    ;;
esac
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
