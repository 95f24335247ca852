#!/bin/sh
# Run VM suites: the one entry point.
#
#   tests/vm/run.sh SUITE[,SUITE...] [extra -device options for virtio-cuda-pci]
#   SUITE: echo | badinput | hostmem (driver-owned pinned memory) |
#          quota (two guest processes against mem-quota: 64 MiB of data and
#          their two contexts) | cuda |
#          nvrt (tests/cuda on NVIDIA's runtime over our libcuda.so.1) | demo (the main job's tests/demo) |
#          libs (NVIDIA's libraries: GPU host only, tests/gpu/libs-run.sh) |
#          nvml (libnvidia-ml.so.1, vcuda-smi and the driver's sessions file) |
#          bench (bench/cudabench in the guest; VCU_BENCH_ARGS=a,b its arguments) |
#          share (the compute-bound kernel loop: GPU host only, tests/gpu/share.sh) |
#          samples (NVIDIA's cuda-samples from a disk: tests/gpu/samples.sh guest) |
#          migrate (tests/many's checker, for tests/vm/migrate.sh: migrated while it runs)
#
# Builds what is missing or stale (guest kernel, module for its headers and
# a compile check against the 6.12 headers, guest-lib, the guest programs,
# fakecuda, the initramfs), then boots one VM per suite under TCG with the
# virtio-cuda-pci device, and checks its serial log: every
# "VCU-TEST <suite>/<name> PASS|FAIL" line, the "VCU-SUITE-END <suite>"
# marker, QEMU's exit status and the absence of kernel oopses.  Prints
# "N passed, N failed" per suite; exits non-zero on any failure.
#
# Environment:
#   VCU_REAL_GPU=1      the daemon's workers use the host's libcuda.so.1
#   VCU_LIBCUDA=PATH    libcuda for the daemon's workers [build/fakecuda/libcuda.so.1]
#   VCU_DAEMON_SOCK=S   use the host daemon already listening on S (the GPU
#                       scripts share one among their VMs) instead of starting
#                       one for this run (tests/vm/daemon.sh; its log is
#                       printed when a suite fails)
#   VCU_QUOTA_MEM=SIZE  the quota suite's mem-quota: 64 MiB of data and the two
#                       contexts the daemon charges [80M on the stand-in, whose
#                       daemon here charges 8 MiB a context; 1112M with
#                       VCU_REAL_GPU=1, at the daemon's default 524 MiB]
#   VCU_VM_TIMEOUT=S    seconds per VM [600]
#   VCU_ECHO_MIB=N      largest echo transfer in MiB [256]
#   VCU_NO_BUILD=1      use build/ as it is, no apt, no compiler (the GPU
#                       machine: copy build/qemu, build/vm, build/fakecuda)
#   VCU_QEMU=PATH       [build/qemu/bin/qemu-system-x86_64, built by
#                       make qemu (qemu-device/build-qemu.sh) unless VCU_SKIP_QEMU_BUILD=1]
#   VCU_QEMU_SHARE=DIR  firmware: qboot.rom, linuxboot_dma.bin [QEMU's ../share]
#   VCU_VM_LOGDIR=DIR   where serial logs go [build/vm/logs]
#   VCU_QMP=PATH        a QMP socket for the VM (tests/gpu/leaks.sh)
#   VCU_VM_REBOOT=1     a reset reboots the guest instead of ending QEMU
#                       (tests/gpu/many.sh)
#   VCU_GUEST_APPEND=S  more kernel command line (VCU_LIBS_DEBUG=1: the libs suite traces)
#   VCU_VM_MEM=MIB      guest RAM [3072]
#   VCU_VM_NAME=NAME    the VM's name (QEMU's -name: the daemon reports it so)
#   VCU_VM_DISK=IMG     a raw disk image the guest sees read-only as /dev/vda
#                       (the torch and frameworks suites' root: tests/gpu/torch-run.sh;
#                       the samples suite's: tests/gpu/samples.sh guest)
#   VCU_VM_BUILD_ONLY=1 build everything, the suites' initramfs images
#                       (build/vm/initrd-SUITE.img) included, and boot
#                       nothing (tests/pkg/libvirt.sh boots its guest
#                       through libvirt)
set -u

[ $# -ge 1 ] || { echo "usage: $0 SUITE[,SUITE...] [extra -device options]" >&2; exit 2; }
suites=$(echo "$1" | tr ',' ' ')
shift
extra=
for o in "$@"; do extra="$extra,$o"; done
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
qemu=${VCU_QEMU:-$build/qemu/bin/qemu-system-x86_64}
share=${VCU_QEMU_SHARE:-$(dirname "$qemu")/../share}
logdir=${VCU_VM_LOGDIR:-$build/vm/logs}
vm_timeout=${VCU_VM_TIMEOUT:-600}
noreboot=-no-reboot
[ -n "${VCU_VM_REBOOT:-}" ] && noreboot=
jobs=$(nproc 2>/dev/null || echo 2)

die() { echo "vm-run: $*" >&2; exit 1; }
step() { echo "vm-run: $*" >&2; }
t_start=$(date +%s)
mkdir -p "$build/vm"

for s in $suites; do
    case $s in echo | badinput | hostmem | quota | cuda | nvrt | nvml | libs | torch | frameworks | samples | demo | bench | leaks | share | migrate) ;; *) die "unknown suite '$s'" ;; esac
done
want_cuda=no
case " $suites " in *" cuda "* | *" nvrt "* | *" nvml "* | *" libs "* | *" torch "* | *" frameworks "* | *" samples "* | *" demo "* | *" bench "* | *" share "*) want_cuda=yes ;; esac

# ---- build -----------------------------------------------------------------
# build/vm/guest.env + build/vm/vmlinuz-*: the guest kernel travels with
# build/, so VCU_NO_BUILD=1 needs neither apt nor the cache.
# guest.env holds no path: the outputs run from wherever they are unpacked.
if [ "${VCU_NO_BUILD:-0}" = 1 ]; then
    [ -f "$build/vm/guest.env" ] || die "VCU_NO_BUILD=1 but no $build/vm/guest.env"
    . "$build/vm/guest.env"
    VCU_GUEST_VMLINUZ=$build/vm/vmlinuz-$VCU_GUEST_KVER
    [ -f "$VCU_GUEST_VMLINUZ" ] || die "no $VCU_GUEST_VMLINUZ (the guest kernel of build/vm/guest.env)"
else
    eval "$("$here/guest-kernel.sh")" || die "guest-kernel.sh failed"
    cp "$VCU_GUEST_VMLINUZ" "$build/vm/vmlinuz-$VCU_GUEST_KVER"
    VCU_GUEST_VMLINUZ=$build/vm/vmlinuz-$VCU_GUEST_KVER
    echo "VCU_GUEST_KVER='$VCU_GUEST_KVER'" >"$build/vm/guest.env"
fi
export VCU_GUEST_KVER VCU_GUEST_VMLINUZ VCU_GUEST_MODDIR VCU_GUEST_MODULES \
    VCU_GUEST_MODULES_CORE VCU_GUEST_KDIR VCU_GUEST_INITRD_COMPRESS
moddir=$build/guest-driver/$VCU_GUEST_KVER

if [ "${VCU_NO_BUILD:-0}" != 1 ]; then
    [ -x "$root/guest-driver/build.sh" ] || die "guest-driver/build.sh missing"
    step "module for $VCU_GUEST_KVER"
    "$root/guest-driver/build.sh" "$VCU_GUEST_KDIR" "$moddir" >"$build/vm/module.log" 2>&1 ||
        { tail -n 40 "$build/vm/module.log"; die "guest-driver/build.sh $VCU_GUEST_KDIR failed"; }
    # Compile check only: the newest 6.12 headers (bookworm-backports),
    # unpacked by headers-612.sh.
    k612=$( (eval "$("$here/headers-612.sh" 2>"$build/vm/headers-612.log")" && echo "$VCU_K612_KDIR") || true)
    if [ -n "$k612" ]; then
        step "module compile check against ${k612##*/}"
        "$root/guest-driver/build.sh" "$k612" "$build/guest-driver/${k612##*/linux-headers-}" \
            >"$build/vm/module-612.log" 2>&1 ||
            { tail -n 40 "$build/vm/module-612.log"; die "module does not build against $k612"; }
    else
        step "WARNING: no 6.12 headers; compile check skipped"
    fi

    step "guest-lib"
    if [ $want_cuda = yes ]; then gl_target=all; else gl_target=$build/guest-lib/libvcu_transport.a; fi
    make -s -j"$jobs" -C "$root/guest-lib" O="$build/guest-lib" "$gl_target" >&2 ||
        die "guest-lib build failed"
    step "guest programs"
    make -s -j"$jobs" -C "$here" O="$build/vm" TRANSPORT="$build/guest-lib/libvcu_transport.a" >&2 ||
        die "tests/vm build failed"
    case " $suites " in *" bench "*)
        step "benchmark"
        make -s -C "$root/bench" O="$build/bench" >&2 || die "bench build failed" ;;
    esac
    if [ $want_cuda = yes ]; then
        step "CUDA test programs"
        make -s -j"$jobs" -C "$root/tests/cuda" O="$build/cuda-tests" >&2 ||
            die "tests/cuda build failed"
        make -s -C "$root/tests/cuda-driver" O="$build/cuda-driver" >&2 ||
            die "tests/cuda-driver build failed"
        make -s -C "$root/tests/nvrt" O="$build/nvrt-tests" >&2 ||
            die "tests/nvrt build failed"
        make -s -C "$root/tests/nvml" O="$build/nvml-tests" NVMLLIB="$build/guest-lib" >&2 ||
            die "tests/nvml build failed"
        case " $suites " in *" libs "*)
            make -s -C "$root/tests/libs" O="$build/libs-tests" >&2 || die "tests/libs build failed" ;;
        esac
    fi
    case " $suites " in *" demo "*)
        step "demo program"
        make -s -C "$root/tests/demo" O="$build/vm" >&2 || die "tests/demo build failed" ;;
    esac
    if [ "${VCU_REAL_GPU:-0}" != 1 ] && [ -z "${VCU_LIBCUDA:-}" ] && [ -f "$root/tests/fakecuda/Makefile" ]; then
        step "fakecuda"
        make -s -C "$root/tests/fakecuda" O="$build/fakecuda" >&2 || die "fakecuda build failed"
    fi
    # build-qemu.sh keeps a stamp: a no-op when nothing changed.  A rebuild
    # empties build/qemu/bin, so the host daemon and its worker go in again
    # (make qemu: both steps).
    if [ "${VCU_SKIP_QEMU_BUILD:-0}" != 1 ] && [ -z "${VCU_QEMU:-}" ]; then
        step "QEMU and the host daemon (make qemu)"
        make -s -C "$root" qemu >"$build/vm/qemu-build.log" 2>&1 ||
            { tail -n 40 "$build/vm/qemu-build.log"; die "make qemu failed"; }
    fi
fi
[ -x "$qemu" ] || die "no QEMU at $qemu"

# The suite's initramfs, build/vm/initrd-SUITE.img.
make_image() {
    VCU_MODULE=$moddir/virtio_cuda.ko VCU_VM_BIN=$build/vm "$here/mkinitramfs.sh" \
        "$build/vm/initrd-$1.img" "$1" || die "mkinitramfs failed"
}
if [ "${VCU_VM_BUILD_ONLY:-0}" = 1 ]; then
    [ "${VCU_NO_BUILD:-0}" != 1 ] || die "VCU_VM_BUILD_ONLY=1 and VCU_NO_BUILD=1: nothing to do"
    for s in $suites; do
        make_image "$s"
    done
    step "build done in $(($(date +%s) - t_start)) s"
    exit 0
fi
[ -f "$share/qboot.rom" ] || die "no $share/qboot.rom"

# The host daemon: QEMU runs sandboxed (spawn=deny, as libvirt starts it)
# and reaches the daemon through its chardev; the daemon starts the
# workers.  One daemon for the whole run unless the caller has one.
VCU_ROOT=$root
. "$here/daemon.sh"
if [ -z "${VCU_DAEMON_SOCK:-}" ]; then
    dargs="--cache-dir $build/vm/daemon-cache"
    if [ "${VCU_REAL_GPU:-0}" != 1 ]; then
        libcuda=${VCU_LIBCUDA:-$build/fakecuda/libcuda.so.1}
        [ -f "$libcuda" ] || die "no $libcuda (set VCU_REAL_GPU=1 on a GPU machine)"
        # The stand-in's contexts cost no GPU memory: each is charged a
        # small figure, so that the quota suite's VM holds two of them.
        dargs="$dargs --libcuda $libcuda --ctx-bytes 8M"
    fi
    mkdir -p "$build/vm/daemon-cache"
    drun=${TMPDIR:-/tmp}/vcu-run.$$
    # shellcheck disable=SC2086
    vcu_daemon_start "$drun" $dargs || die "the host daemon did not start"
    trap 'vcu_daemon_stop; cp "$drun/daemon.log" "$logdir/daemon.log" 2>/dev/null; rm -rf "$drun"' EXIT
fi
dev="virtio-cuda-pci,chardev=vcud$extra"
mkdir -p "$logdir"
step "build done in $(($(date +%s) - t_start)) s"

# ---- one VM per suite ------------------------------------------------------
oops_re='Oops|BUG:|kernel BUG|Kernel panic|general protection fault|WARNING: CPU|Call Trace|UBSAN|KASAN|refcount_t:|list_add corruption|list_del corruption|blocked for more than'
total_fail=0
for s in $suites; do
    img=$build/vm/initrd-$s.img
    log=$logdir/$s.log
    qlog=$logdir/$s.qemu.log
    if [ "${VCU_NO_BUILD:-0}" = 1 ]; then
        [ -f "$img" ] || die "VCU_NO_BUILD=1 but no $img"
    else
        make_image "$s"
    fi
    rm -f "$log" "$qlog"
    # The quota suite's VM has a GPU memory quota (tests/vm/quota_test.c),
    # its contexts charged to it.
    sdev=$dev
    if [ "${VCU_REAL_GPU:-0}" = 1 ]; then quota_mem=${VCU_QUOTA_MEM:-1112M}; else quota_mem=${VCU_QUOTA_MEM:-80M}; fi
    [ "$s" = quota ] && sdev="$dev,mem-quota=$quota_mem"
    step "booting VM for suite $s (log: $log)"
    t0=$(date +%s)
    timeout -k 10 "$vm_timeout" "$qemu" \
        -accel tcg -cpu max -smp 2 -m "${VCU_VM_MEM:-3072}" \
        ${VCU_VM_NAME:+-name "$VCU_VM_NAME"} \
        -object memory-backend-memfd,id=mem,size="${VCU_VM_MEM:-3072}M",share=on \
        -machine memory-backend=mem \
        ${VCU_VM_DISK:+-drive "file=$VCU_VM_DISK,if=none,id=vd0,format=raw,readonly=on"} \
        ${VCU_VM_DISK:+-device virtio-blk-pci,drive=vd0} \
        -display none -nodefaults -monitor none -serial "file:$log" $noreboot \
        ${VCU_QMP:+-qmp "unix:$VCU_QMP,server=on,wait=off"} \
        -bios "$share/qboot.rom" -L "$share" \
        -chardev "socket,id=vcud,path=$VCU_DAEMON_SOCK,reconnect-ms=1000" \
        -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny \
        -kernel "$VCU_GUEST_VMLINUZ" -initrd "$img" \
        -append "console=ttyS0 panic=-1 quiet vcu.suite=$s vcu.echo_mib=${VCU_ECHO_MIB:-256} vcu.bench_args=${VCU_BENCH_ARGS:-} ${VCU_GUEST_APPEND:-}" \
        -device "$sdev" </dev/null >"$qlog" 2>&1
    qrc=$?
    secs=$(($(date +%s) - t0))
    [ -f "$log" ] || : >"$log"
    # The guest tty writes CR LF.
    tr -d '\r' <"$log" >"$log.tmp" && mv "$log.tmp" "$log"

    npass=$(grep -c "^VCU-TEST $s/[^ ]* PASS" "$log")
    nfail=$(grep -c "^VCU-TEST $s/[^ ]* FAIL" "$log")
    grep -a "^VCU-TEST $s/" "$log"
    # Device printf belongs to the guest program that made it, never to
    # QEMU's stdout (the printf test's kernels print "hello from block").
    if grep -a "hello from block" "$qlog" >/dev/null; then
        echo "VCU-TEST $s/qemu_stdout FAIL device printf output reached QEMU's stdout"
        nfail=$((nfail + 1))
    fi
    problems=
    if [ $qrc -eq 124 ] || [ $qrc -eq 137 ]; then
        problems="$problems; VM timed out after $vm_timeout s (QEMU killed)"
    elif [ $qrc -ne 0 ]; then
        problems="$problems; QEMU exited with status $qrc"
    fi
    grep -aq "^VCU-SUITE-END $s" "$log" || problems="$problems; no VCU-SUITE-END $s marker"
    if grep -aEq "$oops_re" "$log"; then
        problems="$problems; guest kernel oops/BUG/WARNING in the log"
    fi
    [ $((npass + nfail)) -gt 0 ] || problems="$problems; no test results"
    if [ -s "$qlog" ]; then
        echo "--- QEMU stdout/stderr ($s) ---"
        tail -n 20 "$qlog"
    fi
    if { [ -n "$problems" ] || [ "$nfail" -gt 0 ]; } && [ -n "${VCU_DAEMON_LOG:-}" ]; then
        echo "--- host daemon log tail ($VCU_DAEMON_LOG) ---"
        tail -n 30 "$VCU_DAEMON_LOG"
    fi
    if [ -n "$problems" ] || [ "$nfail" -gt 0 ]; then
        grep -aE "$oops_re" "$log" | head -n 20
        echo "--- serial log tail ($s) ---"
        grep -av '^VCU-TEST ' "$log" | tail -n 40
    fi
    boot=$(sed -n 's/^VCU-INIT device ready=[a-z]* \([0-9.]*\)s.*/\1/p' "$log" | head -n 1)
    end=$(sed -n "s/^VCU-SUITE-END $s \\([0-9.]*\\)s.*/\\1/p" "$log" | head -n 1)
    echo "suite $s: VM wall ${secs} s (guest uptime at device ready ${boot:-?} s, at suite end ${end:-?} s)"
    if [ -n "$problems" ]; then
        echo "suite $s: FAIL${problems}"
        nfail=$((nfail + 1))
    fi
    echo "$npass passed, $nfail failed"
    total_fail=$((total_fail + nfail))
done
[ $total_fail -eq 0 ]
