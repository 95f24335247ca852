#!/usr/bin/env bash
# GPU suite: a VM's slice bounds everything it can reserve (docs/design.md,
# "A VM's slice").  One host daemon, two TCG guests:
#   hostile  mem-quota=$quota, max-sessions=$maxs: $procs guest processes
#            of tests/hostile/hostile_work attack at once, each raising
#            every limit (stack up to 1 MiB a thread, malloc heap, printf
#            FIFO), launching a kernel with 256 KiB of local memory a
#            thread, and allocating device, stream-ordered and pinned host
#            memory until refused, then holding it;
#   victim   mem-quota=$quota: hostile_work victim, round after round
#            allocating all its slice says is free, checked.
# From the host, every 250 ms (tests/gpu/hostile_watch.py, the daemon's
# Prometheus endpoint): the GPU memory NVML sees the hostile VM's workers
# hold (vcu_vm_nvml_mem_bytes) and the VM's account never pass its quota.
# Verdicts: that; the victim never refused and never wrong; sessions past
# max-sessions refused; the attack reached its quota (so the bound was
# what held it); on a GPU, the local memory kernel refused.  Ends with
# "N passed, N failed".
#
#   VCU_HOSTILE_SECS=S     seconds of the attack's hold and the victim's rounds [60]
#   VCU_HOSTILE_QUOTA=Q    both VMs' mem-quota [8G; 1G on the stand-in]
#   VCU_HOSTILE_FAKE=1     on the CPU stand-in (no NVML: the account only; the
#                          victim's data is not checked, the stand-in runs
#                          its kernels as no-ops); in make test
set -u
cd "$(dirname "$0")/../.."
fake=${VCU_HOSTILE_FAKE:-0}
secs=${VCU_HOSTILE_SECS:-60}
if [ "$fake" = 1 ]; then quota=${VCU_HOSTILE_QUOTA:-1G}; else quota=${VCU_HOSTILE_QUOTA:-8G}; fi
maxs=6
procs=9
port=$((20000 + $$ % 20000))
logroot=build/vm/logs/hostile-run

. tests/gpu/vmcase.sh
vmcase_init hostile "$fake" "$logroot"
# The stand-in has no C twins of hostile_work's kernels: it runs them as
# no-ops (the victim's check then sees its memset's zeros).
[ "$fake" = 1 ] && export VCU_FAKECUDA_ANY_KERNEL=1
# On the stand-in a context is charged 8 MiB (the daemon's --ctx-bytes),
# so that more than one fits its small quota and the session bound shows.
if [ "$fake" = 1 ]; then
    vmcase_daemon --metrics "127.0.0.1:$port" --ctx-bytes 8M
else
    vmcase_daemon --metrics "127.0.0.1:$port"
fi
trap vmcase_end EXIT

vmcase_boot hostile $((secs + 240)) "vcu.share_procs=0 vcu.hostile=attack,$procs,$secs" -- \
    "mem-quota=$quota" "max-sessions=$maxs"
p0=$!
sleep 2
vmcase_boot victim $((secs + 240)) "vcu.share_procs=0 vcu.hostile=victim,1,$((secs + 20))" -- \
    "mem-quota=$quota"
p1=$!
python3 tests/gpu/hostile_watch.py "127.0.0.1:$port" "$quota" "$p0,$p1" "$fake" \
    "$logroot/hostile/share.log" "$logroot/victim/share.log" "$maxs" "$procs"
rc=$?
wait
echo "info: hostile VM: $(grep -aE 'VCU-HOSTILE .* (holding|context failed)' "$logroot/hostile/share.log" | tr -d '\r' | cut -d' ' -f2- | tr '\n' ';' | cut -c1-900)"
echo "info: victim VM: $(grep -a 'victim rounds' "$logroot/victim/share.log" | tr -d '\r')"
echo "info: daemon: $(grep -a 'refused\|slice' "$logroot/daemon/daemon.log" | tail -n 3 | tr '\n' ' ')"
exit $rc
