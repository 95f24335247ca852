#!/usr/bin/env bash
# The test command (README): installs what it needs, builds everything and
# runs every suite that needs no GPU, then prints the total as the last line:
#   N passed, N failed
# Suites: unit (host backend under ASan/UBSan), jail (a probe in a worker's
# jail, started by the real host daemon, tries to get out: tests/jail/run.py),
# daemon (vcu-daemon's folders cannot be squatted, a hostile QEMU loses only
# its own link, bounds and live changes: tests/daemon/run.py), fuzz (every
# fuzz target replays its committed corpus and past failures, each input
# once: no random run, so the verdict does not depend on luck or load; the
# open-ended campaign is `make fuzz`), qtest (the QEMU device, sandboxed
# as libvirt starts it and on host daemons the suite starts, driven as a
# hostile guest would, through QEMU's qtest interface, no guest kernel; and
# its daemon link answered as a hostile daemon would), twins (the CPU
# stand-in's kernel twins match the parameter
# layouts nvcc gave the test kernels), exports (our libcudart.so.13 exports
# every name NVIDIA's does, with its symbol version), libcuda-exports (our
# libcuda.so.1 exports every name the toolkit's stub libcuda does, and
# cuda_calls.list lists exactly those), cuda-loopback (the CUDA test
# programs against guest-lib + backend + the CPU stand-in for libcuda, no
# VM), driver-loopback (the Driver API programs of tests/cuda-driver against
# guest-lib's libcuda.so.1 + backend + the stand-in, no VM), nvrt-loopback
# (NVIDIA's own CUDA runtime, shared and static, running tests/cuda
# programs on guest-lib's libcuda.so.1 + backend + the stand-in, no VM),
# libs-loopback (NVIDIA's cuBLAS, cuBLASLt, cuRAND, cuSPARSE, cuFFT, cuDNN on guest-lib's libcuda.so.1 +
# backend + the stand-in's do-nothing kernels: every driver call they make
# is answered), nvml-loopback (guest-lib's libnvidia-ml.so.1 and vcuda-smi
# against our libcuda.so.1 + backend + the stand-in, no VM), cold (the
# first-run path of build-qemu.sh and guest-kernel.sh
# against an empty cache, with local fixtures in place of the network, and
# no pipeline under pipefail whose reader stops early; tests/cold/run.sh),
# packaging: dkms (the guest module through DKMS against the 6.1 and 6.12
# headers), install-guest (make install-guest into a DESTDIR), libvirt
# (Debian's libvirtd, started by hand, runs a domain made from the example
# with its default seccomp sandbox, against vcu-daemon: the CUDA suite in a
# TCG guest; tests/pkg/libvirt.sh), and in a TCG guest: echo,
# badinput, hostmem, quota (two guest processes against mem-quota), cuda,
# nvrt, nvml (libnvidia-ml.so.1, vcuda-smi and the driver's sessions file),
# demo (the main job's program); hostile (a VM raising every limit and
# allocating every way beside one that checks it keeps its slice, on the
# stand-in: tests/gpu/hostile.sh); migrate (a TCG guest running a checker
# live-migrated between two sandboxed QEMUs on two daemons that share
# nothing, and a migration the destination refuses leaving the source
# running: tests/vm/migrate.py); relocatable (the carried outputs boot the
# echo suite from a copy at another path).
# VCU_SUITES="unit echo" limits the run to the suites named.
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD

suites=${VCU_SUITES:-"cold unit jail daemon fuzz qtest twins exports libcuda-exports cuda-loopback driver-loopback nvrt-loopback libs-loopback nvml-loopback dkms install-guest libvirt echo badinput hostmem quota cuda nvrt nvml demo hostile migrate relocatable"}
passed=0
failed=0
log_dir=$top/build/test-logs
mkdir -p "$log_dir"

# Adds a suite's "N passed, N failed" to the totals; a suite that ended
# without that line counts as one failure.
count() {
    local name=$1 rc=$2 line p f
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log_dir/$name.log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "suite $name: no result line (rc=$rc), see $log_dir/$name.log"
        tail -n 30 "$log_dir/$name.log"
        failed=$((failed + 1))
        return
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        f=1
    fi
    echo "suite $name: $p passed, $f failed"
    passed=$((passed + p))
    failed=$((failed + f))
}

# A check that passes or fails as a whole.
one_check() {
    if "$@"; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; return 1; fi
}

run_suite() {
    local name=$1
    shift
    echo "== $name"
    "$@" 2>&1 | tee "$log_dir/$name.log"
    count "$name" "${PIPESTATUS[0]}"
}

bash scripts/deps.sh || { echo "0 passed, 1 failed"; exit 1; }
make -s all || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }

for s in $suites; do
    case $s in
    cold) run_suite cold tests/cold/run.sh ;;
    unit) run_suite unit make -s -C tests/unit O="$top/build/unit" run ;;
    daemon) run_suite daemon timeout 300 python3 tests/daemon/run.py build/qemu/bin/vcu-daemon \
        build/qemu/libexec/vcu-worker build/fakecuda/libcuda.so.1 ;;
    jail) run_suite jail sh -c "make -s -C tests/jail O='$top/build/jail' &&
        timeout 120 python3 tests/jail/run.py build/qemu/bin/vcu-daemon build/jail/jail_probe" ;;
    fuzz) run_suite fuzz tests/fuzz/run.sh replay ;;
    qtest) run_suite qtest timeout 300 python3 qemu-device/qtest-vcu.py \
        build/qemu/bin/qemu-system-x86_64 -L build/qemu/share -bios qboot.rom ;;
    twins) run_suite twins one_check tests/cuda/check-twins.sh build/cuda-tests ;;
    exports) run_suite exports one_check guest-lib/check-exports.sh ;;
    libcuda-exports) run_suite libcuda-exports one_check guest-lib/check-libcuda-exports.sh ;;
    cuda-loopback) run_suite cuda-loopback scripts/cuda-loopback.sh ;;
    driver-loopback) run_suite driver-loopback scripts/driver-loopback.sh ;;
    nvrt-loopback) run_suite nvrt-loopback scripts/nvrt-loopback.sh ;;
    libs-loopback) run_suite libs-loopback scripts/libs-loopback.sh ;;
    nvml-loopback) run_suite nvml-loopback scripts/nvml-loopback.sh ;;
    dkms) run_suite dkms timeout 600 tests/pkg/dkms.sh ;;
    install-guest) run_suite install-guest timeout 300 tests/pkg/install-guest.sh ;;
    # About 1.5 min warm (a minute of it the guest); a cold install, a
    # first guest build and a slow machine may take several.
    libvirt) run_suite libvirt timeout -k 30 720 tests/pkg/libvirt.sh ;;
    relocatable) run_suite relocatable timeout 300 tests/pkg/relocatable.sh ;;
    hostile) VCU_VM_BUILD_ONLY=1 tests/vm/run.sh share >"$log_dir/hostile-image.log" 2>&1
        run_suite hostile env VCU_HOSTILE_FAKE=1 VCU_HOSTILE_SECS=20 timeout 600 \
            tests/gpu/hostile.sh ;;
    # The checker runs 45 s: a move under TCG on 2 cores takes 17-22 s
    # after its first 5 s tick, and the destination must print ticks of
    # its own (with 30 s it printed none once).
    migrate) VCU_VM_BUILD_ONLY=1 tests/vm/run.sh migrate >"$log_dir/migrate-image.log" 2>&1
        run_suite migrate env VCU_MIG_SECS=45 timeout 900 python3 tests/vm/migrate.py ;;
    echo | badinput | hostmem | quota | cuda | nvrt | nvml | demo) run_suite "vm-$s" tests/vm/run.sh "$s" ;;
    *) echo "unknown suite $s"; failed=$((failed + 1)) ;;
    esac
done

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
