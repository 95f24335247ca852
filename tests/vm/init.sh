#!/bin/sh
# /init of the VM-suite initramfs (copied there by mkinitramfs.sh).
#
# Kernel command line: vcu.suite=echo,badinput,hostmem,cuda,demo,bench (which suites
# to run), vcu.echo_mib=N, vcu.bench_args=ARG,ARG (cudabench's arguments)
#                      vcu.echo_mib=N                (largest echo, MiB)
# Prints on the console: each test's "VCU-TEST <suite>/<name> PASS|FAIL ..."
# line, "VCU-SUITE-END <suite>" after each suite, suspicious kernel log
# lines as "dmesg: ...", and powers off.
export PATH=/bin:/sbin
export HOME=/ TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
echo "VCU-INIT start $(cut -d' ' -f1 /proc/uptime)s"

suites=
echo_mib=256
bench_args=
for arg in $(cat /proc/cmdline); do
    case $arg in
    vcu.suite=*) suites=$(echo "${arg#vcu.suite=}" | tr ',' ' ') ;;
    vcu.echo_mib=*) echo_mib=${arg#vcu.echo_mib=} ;;
    vcu.bench_args=*) bench_args=$(echo "${arg#vcu.bench_args=}" | tr ',' ' ') ;;
    esac
done

setup_err=
for m in $(cat /modules/order); do
    insmod "/modules/$m" || setup_err="insmod $m failed"
done
insmod /modules/virtio_cuda.ko allow_raw=1 || setup_err="insmod virtio_cuda.ko failed"
i=0
while [ ! -c /dev/vcuda0 ] && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
[ -c /dev/vcuda0 ] || setup_err="${setup_err:+$setup_err; }no /dev/vcuda0 after 10 s"
echo "VCU-INIT device ready=$([ -c /dev/vcuda0 ] && echo yes || echo no) $(cut -d' ' -f1 /proc/uptime)s"

# tests/cuda/run.sh prints "PASS name" / "FAIL name (why)" per program,
# with the failing program's output indented below; turn those into
# VCU-TEST lines and keep the rest.
run_cuda() {
    LD_LIBRARY_PATH=/cuda/lib VCU_TEST_TIMEOUT=240 sh /cuda/run.sh /cuda 2>&1 |
        sed -e 's,^PASS \([^ ]*\)$,VCU-TEST cuda/\1 PASS,' \
            -e 's,^FAIL \([^ ]*\) *\(.*\)$,VCU-TEST cuda/\1 FAIL \2,'
    # The Driver API programs (tests/cuda-driver) on our libcuda.so.1.
    LD_LIBRARY_PATH=/cuda/lib VCU_TEST_TIMEOUT=240 sh /cuda-driver/run.sh /cuda-driver 2>&1 |
        sed -e 's,^PASS \([^ ]*\)$,VCU-TEST cuda/\1 PASS,' \
            -e 's,^FAIL \([^ ]*\) *\(.*\)$,VCU-TEST cuda/\1 FAIL \2,'
    # Every program has exited: nothing of theirs may stay pinned, mapped
    # or in flight in the driver (registered memory included).
    i=0
    while [ $i -lt 100 ]; do
        left=
        for f in pinned_pages hostmem_pages inflight; do
            v=$(cat /sys/class/vcuda/vcuda0/$f 2>/dev/null)
            [ "$v" = 0 ] || left="$left $f=$v"
        done
        [ -z "$left" ] && break
        sleep 0.1
        i=$((i + 1))
    done
    if [ -z "$left" ]; then
        echo "VCU-TEST cuda/driver_counters_zero PASS"
    else
        echo "VCU-TEST cuda/driver_counters_zero FAIL left:$left"
    fi
}

# NVIDIA's own runtime (libcudart.so.13, and programs built with its
# static one) on our libcuda.so.1: no runtime of ours on the path.
run_nvrt() {
    for part in shared static; do
        LD_LIBRARY_PATH=/nvrt/lib VCU_TEST_TIMEOUT=240 sh /nvrt/$part/run.sh /nvrt/$part 2>&1 |
            sed -e "s,^PASS \([^ ]*\)\$,VCU-TEST nvrt/$part-\1 PASS," \
                -e "s,^FAIL \([^ ]*\) *\(.*\)\$,VCU-TEST nvrt/$part-\1 FAIL \2,"
    done
}

# NVIDIA's libraries (from the GPU host, under /libs) on our libcuda.so.1.
run_libs() {
    if [ ! -e /libs/libcublas.so.13 ]; then
        echo "VCU-TEST libs/setup FAIL no NVIDIA libraries in the image (tests/gpu/libs-run.sh adds them)"
        return 0
    fi
    # VCU_LIBS_DEBUG=1 (kernel command line): cuBLAS's own log and every
    # failing Driver API call, on the console.
    lp=/nvrt/lib:/libs
    if grep -q 'VCU_LIBS_DEBUG=1' /proc/cmdline; then
        export CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=stderr CUBLASLT_LOG_LEVEL=5
        # Every failing Driver API call, by name (tests/gpu/trace).
        export VCU_TRACE_LIBCUDA=/nvrt/lib/libcuda.so.1
        lp=/libs-test/trace:/libs
    fi
    LD_LIBRARY_PATH=$lp timeout 600 /libs-test/libs_check 2>&1 |
        sed -e 's,^PASS \([^ ]*\)$,VCU-TEST libs/\1 PASS,' \
            -e 's,^FAIL \([^ ]*\) *\(.*\)$,VCU-TEST libs/\1 FAIL \2,'
}

# The main job's demonstration (tests/demo/vcu_demo.cu) as a user would
# run it, its output shown as it is: scripts/run.sh reads its figures.
run_demo() {
    if LD_LIBRARY_PATH=/cuda/lib timeout 420 /cuda/vcu_demo; then
        echo "VCU-TEST demo/vcu_demo PASS"
    else
        echo "VCU-TEST demo/vcu_demo FAIL exit status $?"
    fi
}

# GPU suite, leaks (tests/gpu/leaks.sh judges from the host): a process
# holding GPU memory and work is killed; then one is left running while
# the device is reset (driver unbind); then one is left running for the
# host to kill QEMU.  "VCU-LEAKS running|after PHASE" tell the host when
# to look.
spin_start() {
    LD_LIBRARY_PATH=/cuda/lib /cuda/spin 256 >/tmp/spin.out 2>&1 &
    spin_pid=$!
    i=0
    while ! grep -q spinning /tmp/spin.out && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if grep -q spinning /tmp/spin.out; then
        echo "VCU-TEST leaks/start-$1 PASS"
    else
        echo "VCU-TEST leaks/start-$1 FAIL $(cat /tmp/spin.out)"
        return 1
    fi
}
run_leaks() {
    spin_start killed || return 1
    echo "VCU-LEAKS running killed"
    sleep 8
    kill -9 $spin_pid
    wait $spin_pid 2>/dev/null
    echo "VCU-LEAKS after killed"
    sleep 8
    spin_start reset
    echo "VCU-LEAKS running reset"
    sleep 8
    dev=
    for d in /sys/bus/virtio/drivers/virtio_cuda/virtio*; do
        [ -e "$d" ] && dev=$(basename "$(readlink -f "$d/..")")
    done
    if [ -n "$dev" ] && echo "$dev" >/sys/bus/pci/drivers/virtio-pci/unbind; then
        echo "VCU-TEST leaks/unbind PASS"
    else
        echo "VCU-TEST leaks/unbind FAIL no virtio_cuda device to unbind"
    fi
    echo "VCU-LEAKS after reset"
    sleep 8
    kill -9 $spin_pid 2>/dev/null
    wait $spin_pid 2>/dev/null
    echo "$dev" >/sys/bus/pci/drivers/virtio-pci/bind
    i=0
    while [ ! -c /dev/vcuda0 ] && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    spin_start qemu-kill
    echo "VCU-LEAKS running qemu-kill"
    sleep 120
}

# The benchmark in the guest: its CSV between markers, for bench/run.sh.
run_bench() {
    echo "VCU-BENCH-BEGIN"
    LD_LIBRARY_PATH=/cuda/lib timeout 900 /cuda/cudabench $bench_args
    rc=$?
    echo "VCU-BENCH-END"
    if [ $rc -eq 0 ]; then
        echo "VCU-TEST bench/cudabench PASS"
    else
        echo "VCU-TEST bench/cudabench FAIL exit status $rc"
    fi
}

for s in $suites; do
    echo "VCU-SUITE-BEGIN $s $(cut -d' ' -f1 /proc/uptime)s"
    if [ -n "$setup_err" ]; then
        echo "VCU-TEST $s/setup FAIL $setup_err"
    else
        case $s in
        echo) timeout 540 /tests/echo_test "$echo_mib" ;;
        badinput) timeout 540 /tests/badinput_test ;;
        hostmem) timeout 540 /tests/hostmem_test "$echo_mib" ;;
        quota) timeout 540 /tests/quota_test 64 ;;
        cuda) run_cuda ;;
        nvrt) run_nvrt ;;
        libs) run_libs ;;
        demo) run_demo ;;
        bench) run_bench ;;
        leaks) run_leaks ;;
        *) echo "VCU-TEST $s/setup FAIL unknown suite" ;;
        esac
        rc=$?
        # A program that died (signal, timeout) may have skipped tests.
        [ $rc -le 1 ] || echo "VCU-TEST $s/exit FAIL test program ended with status $rc"
    fi
    dmesg | grep -v 'ommand line' | grep -E 'BUG|Oops|WARNING|Call Trace|panic|general protection|refcount_t|corruption|UBSAN|KASAN|hung_task|blocked for more|vcuda|virtio_cuda' |
        sed 's/^/dmesg: /'
    dmesg -c >/dev/null
    echo "VCU-SUITE-END $s $(cut -d' ' -f1 /proc/uptime)s"
done
sync
poweroff -f
