#!/usr/bin/env bash
# Everything one call on the GPU machine runs, from carried build outputs
# (build/qemu, build/vm, build/bench, build/nvidia: see tests/gpu/prepare.sh,
# or its one archive build/gpu-bundle/outputs.tar.xz, unpacked here first):
# the GPU suite (CUDA programs, the demo and the echo suite in a guest on the
# real GPU), the main job (scripts/run.sh: the demo natively and in a guest,
# side by side), then the benchmark; on request NVIDIA's libraries (libs),
# PyTorch (torch) in a guest, JAX and CuPy (frameworks) natively and in a
# guest, compute share between VMs (share:
# tests/gpu/share.sh, about 3 minutes), packed VMs (packed:
# tests/gpu/packed.sh, about 3 minutes), live migration (migrate: the
# worker's migration core, tests/gpu/mig-core.sh, seconds; then
# tests/vm/migrate.py on the GPU, VMs moved between two daemons, with
# 1, 8 and 32 GiB of device memory, from GPU 0 to GPU 1 on a host of two,
# and saved to a file and restored, about 6 minutes) and NVIDIA's
# cuda-samples natively and on our libcuda.so.1 in loopback (samples:
# tests/gpu/samples.sh, up to the whole call; docs/conformance.md) and in
# TCG guests (samples-guest, the next call: the whole call), and NVIDIA's
# library samples natively, on ours and in guests (libsamples: about 8
# minutes).  Logs
# and results go to $OUT.
#
#   tests/gpu/device-run.sh [suite,main,bench,libs,torch,frameworks,share,packed,hostile,many,many-wait,migrate,seccomp-log,samples,samples-guest,libsamples]
#   (default suite,main,bench)
#
# seccomp-log: the daemon's workers run with --seccomp log for the whole
# call (every system call off the allowlist is let through and logged by
# the kernel), and the calls logged are listed in $OUT/seccomp.txt: how
# the allowlist (host-backend/worker/seccomp.c) is checked on a new driver.
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-build/gpu-out}
mkdir -p "$out"
what=${1:-suite,main,bench}
if [ -f build/gpu-bundle/outputs.tar.xz ] && [ ! -x build/qemu/bin/qemu-system-x86_64 ]; then
    tar -xJf build/gpu-bundle/outputs.tar.xz || { echo "device-run: cannot unpack the bundle"; exit 1; }
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv >"$out/gpu.txt" 2>&1
# The commit the carried build outputs were made from (prepare.sh); the
# working tree's git metadata here may be older.
if [ -f build/commit ]; then
    echo "commit $(cat build/commit)" >>"$out/gpu.txt"
else
    git log -1 --format='commit %H' >>"$out/gpu.txt" 2>/dev/null
fi
rc=0
case ",$what," in *,seccomp-log,*)
    export VCU_DAEMON_ARGS="${VCU_DAEMON_ARGS:-} --seccomp log"
    dmesg -c >/dev/null 2>&1 || dmesg >"$out/dmesg-before.txt" 2>&1
    ;;
esac
case ",$what," in *,suite,*)
    VCU_NO_BUILD=1 tests/gpu/run.sh cuda,nvrt,nvml,quota,demo,echo,badinput >"$out/gpu-suite.log" 2>&1 || rc=1
    tail -n 5 "$out/gpu-suite.log"
    tests/gpu/leaks.sh >"$out/leaks.log" 2>&1 || rc=1
    tail -n 12 "$out/leaks.log"
    ;;
esac
case ",$what," in *,main,*)
    # The README's main job, as a user runs it on a GPU host, from the
    # carried build (build/vm holds the demo program): its summary (the host
    # GPU behind the guest's device, native vs guest figures, the verdict).
    VCU_NO_BUILD=1 scripts/run.sh >"$out/main-job.log" 2>&1 || rc=1
    if grep -q '^== which host GPU' "$out/main-job.log"; then
        sed -n '/^== which host GPU/,$p' "$out/main-job.log"
    else
        tail -n 30 "$out/main-job.log"
    fi
    ;;
esac
case ",$what," in *,bench,*)
    VCU_NVIDIA_CUDART=$PWD/build/nvidia VCU_NO_BUILD=1 bench/run.sh "$PWD/build/bench-results" \
        >"$out/bench.log" 2>&1 || rc=1
    tail -n 40 "$out/bench.log"
    cp build/bench-results/results.csv build/bench-results/bandwidth.png "$out/" 2>/dev/null
    ;;
esac
case ",$what," in *,migrate,*)
    tests/gpu/mig-core.sh >"$out/migrate.log" 2>&1 || rc=1
    cat "$out/migrate.log"
    VCU_VM_LOGDIR=$out/migrate-vm VCU_MIG_SECS=${VCU_MIG_SECS:-45} \
        python3 tests/vm/migrate.py --real-gpu --ballast "${VCU_MIG_BALLAST:-1024,8192,32768}" \
        $([ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 2 ] && echo --other-gpu) \
        >"$out/migrate-vm.log" 2>&1 || rc=1
    cat "$out/migrate-vm.log"
    ;;
esac
case ",$what," in *,libs,*)
    tests/gpu/libs-run.sh >"$out/libs.log" 2>&1 || rc=1
    grep -E 'VCU-TEST|first_gemm:|passed' "$out/libs.log" | tail -n 16
    ;;
esac
case ",$what," in *,torch,*)
    tests/gpu/torch-run.sh guest >"$out/torch.log" 2>&1 || rc=1
    grep -E 'VCU-TEST|passed' "$out/torch.log" | cut -c1-300 | tail -n 12
    ;;
esac
case ",$what," in *,frameworks,*)
    tests/gpu/torch-run.sh native frameworks >"$out/frameworks-native.log" 2>&1 || rc=1
    grep -E '^(PASS|FAIL)' "$out/frameworks-native.log" | cut -c1-200
    tests/gpu/torch-run.sh guest frameworks >"$out/frameworks.log" 2>&1 || rc=1
    grep -E 'VCU-TEST|passed' "$out/frameworks.log" | cut -c1-300 | tail -n 14
    ;;
esac
case ",$what," in *,share,*)
    tests/gpu/share.sh >"$out/share.log" 2>&1 || rc=1
    grep -E '^(share:|info:)|passed' "$out/share.log" | cut -c1-300 | tail -n 40
    ;;
esac
case ",$what," in *,hostile,*)
    tests/gpu/hostile.sh >"$out/hostile.log" 2>&1 || rc=1
    grep -E '^(PASS|FAIL|info:)|passed' "$out/hostile.log" | cut -c1-600 | tail -n 20
    ;;
esac
case ",$what," in *,packed,*)
    tests/gpu/packed.sh >"$out/packed.log" 2>&1 || rc=1
    grep -E '^(packed:|info:)|passed' "$out/packed.log" | cut -c1-400 | tail -n 40
    ;;
esac
case ",$what," in *,samples,* | *,samples-guest,*)
    # samples: built, run natively and on ours (loopback); samples-guest
    # (the next call, while the machine is warm and build/samples still
    # there): the guest column.  The table's rows that are not a pass on
    # every side, nor skipped nor unbuilt (those are named on the
    # "samples:" lines); all of it is in $OUT/samples.md.
    steps=build,run
    case ",$what," in *,samples-guest,*) steps=guest ;; esac
    case ",$what," in *,samples,*,samples-guest,* | *,samples-guest,*,samples,*) steps=build,run,guest ;; esac
    tests/gpu/samples.sh "$steps" >"$out/samples.log" 2>&1 || rc=1
    grep -v -E '^[^ ]+ +(PASS +PASS( +PASS)?|SKIP +SKIP|NOT-BUILT +NOT-BUILT)( |$)' "$out/samples.log" |
        cut -c1-240 | tail -n 80
    tar -C "$out" -czf "$out/samples-logs.tgz" samples && rm -rf "$out/samples"
    ;;
esac
case ",$what," in *,libsamples,*)
    # NVIDIA's CUDALibrarySamples (cuBLASLt, cuSPARSE, cuSOLVER, cuFFT):
    # built, run natively, on ours and in TCG guests, in one call (their
    # archive comes in the bundle); the rows not a pass on every side.
    VCU_SAMPLES_SET=libs VCU_SAMPLES_ARCHS=${VCU_SAMPLES_ARCHS:-90} VCU_SAMPLES_BUILD_S=200 \
        VCU_SAMPLES_TIME_S=280 VCU_SAMPLES_END_S=560 VCU_SAMPLES_GUEST_TIMEOUT=150 \
        tests/gpu/samples.sh build,run,guest >"$out/libsamples.log" 2>&1 || rc=1
    grep -v -E '^[^ ]+ +(PASS +PASS( +PASS)?|SKIP +SKIP|NOT-BUILT +NOT-BUILT)( |$)' "$out/libsamples.log" |
        cut -c1-240 | tail -n 60
    # Hundreds of logs come back as one file.
    tar -C "$out" -czf "$out/libsamples-logs.tgz" libsamples && rm -rf "$out/libsamples"
    ;;
esac
# Many VMs (tests/gpu/many.sh) runs past one call: "many" starts it in a
# session of its own and waits for it up to VCU_MANY_WAIT seconds (540);
# "many-wait" (the next call, while the machine is still warm) waits for
# the rest.  Either shows its result once it has ended.
many_wait() {
    local i=0
    while [ $i -lt "${VCU_MANY_WAIT:-540}" ] && ! grep -q ' passed, ' build/many.log 2>/dev/null; do
        sleep 1
        i=$((i + 1))
    done
    cp build/many.log "$out/many.log" 2>/dev/null
    if grep -q ' passed, ' build/many.log 2>/dev/null; then
        grep -E '^(many:|info:)|passed' build/many.log | cut -c1-300 | tail -n 30
        grep -q ' 0 failed$' build/many.log || rc=1
    else
        echo "many: still running after this call's wait (tests/gpu/device-run.sh many-wait)"
    fi
}
case ",$what," in *,many,*)
    rm -f build/many.log
    setsid nohup tests/gpu/many.sh >build/many.log 2>&1 </dev/null &
    many_wait
    ;;
esac
case ",$what," in *,many-wait,*) many_wait ;; esac
case ",$what," in *,seccomp-log,*)
    # audit type 1326: "... comm=\"vcu-worker\" ... syscall=N ..."
    dmesg 2>&1 | grep 'type=1326' >"$out/seccomp-raw.txt"
    python3 - "$out/seccomp-raw.txt" >"$out/seccomp.txt" <<'PY'
import re, sys
names = {}
try:
    for l in open('/usr/include/x86_64-linux-gnu/asm/unistd_64.h'):
        m = re.match(r'#define __NR_(\w+) (\d+)', l)
        if m:
            names[int(m.group(2))] = m.group(1)
except OSError:
    pass
seen = {}
for l in open(sys.argv[1]):
    m = re.search(r'comm="([^"]*)".*syscall=(\d+)', l)
    if m:
        k = (m.group(1), int(m.group(2)))
        seen[k] = seen.get(k, 0) + 1
for (comm, nr), n in sorted(seen.items()):
    print(f'{comm} syscall {nr} {names.get(nr, "?")} logged {n} times')
print(f'{len(seen)} distinct (comm, syscall) pairs off the allowlist')
PY
    cat "$out/seccomp.txt"
    ;;
esac
tar czf "$out/vm-logs.tgz" build/vm/logs 2>/dev/null
exit $rc
