#!/bin/sh
# /init of the VM-suite initramfs (copied there by mkinitramfs.sh).
#
# Kernel command line: vcu.suite=echo,badinput,hostmem,cuda,nvml,demo,bench,share,migrate (which
# suites to run), vcu.echo_mib=N, vcu.bench_args=ARG,ARG (cudabench's arguments),
# vcu.share_procs=N vcu.share_secs=S vcu.share_iters=I (the share suite's loop)
# vcu.many=QUOTA_MIB,FAULT_AT (the share suite also runs tests/many's checker)
# vcu.hostile=MODE,PROCS,SECS (the share suite runs tests/hostile's
# hostile_work MODE in PROCS processes instead of its loops)
# vcu.packed=N (a packed VM of N SMs: the share suite checks them before and
# after its loops with tests/packed's packed_check)
# vcu.mig_secs=S vcu.mig_ballast=MIB (the migrate suite's checker runs S
# seconds, holding MIB more of device memory it checks at the end)
# vcu.trace=WHAT (VCU_LIBCUDA_TRACE=WHAT for every program: errors, the
# requests the host refused, on the console)
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
share_procs=1
share_secs=20
share_iters=
many=
packed=
hostile=
mig_secs=60
mig_ballast=0
for arg in $(cat /proc/cmdline); do
    case $arg in
    vcu.suite=*) suites=$(echo "${arg#vcu.suite=}" | tr ',' ' ') ;;
    vcu.echo_mib=*) echo_mib=${arg#vcu.echo_mib=} ;;
    vcu.bench_args=*) bench_args=$(echo "${arg#vcu.bench_args=}" | tr ',' ' ') ;;
    vcu.share_procs=*) share_procs=${arg#vcu.share_procs=} ;;
    vcu.share_secs=*) share_secs=${arg#vcu.share_secs=} ;;
    vcu.share_iters=*) share_iters=${arg#vcu.share_iters=} ;;
    vcu.many=*) many=${arg#vcu.many=} ;;
    vcu.packed=*) packed=${arg#vcu.packed=} ;;
    vcu.hostile=*) hostile=${arg#vcu.hostile=} ;;
    vcu.mig_secs=*) mig_secs=${arg#vcu.mig_secs=} ;;
    vcu.mig_ballast=*) mig_ballast=${arg#vcu.mig_ballast=} ;;
    vcu.trace=*) export VCU_LIBCUDA_TRACE=${arg#vcu.trace=} ;;
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

# NVIDIA's libraries (the GPU host's own, on the disk
# tests/gpu/libs-run.sh makes) on our libcuda.so.1.  One program per
# library family; each expected check gets a line: its own, or a FAIL
# naming the missing library or the program's exit status.
# libs_one PROG ARG "LIBRARIES" "CHECKS"
libs_one() {
    missing=
    for l in $3; do
        [ -e "/disk/libs/$l" ] || missing="$missing $l"
    done
    if [ -n "$missing" ]; then
        for c in $4; do
            echo "VCU-TEST libs/$c FAIL not found on the GPU host:$missing"
        done
        return 0
    fi
    t0=$(cut -d' ' -f1 /proc/uptime)
    LD_LIBRARY_PATH=$lp timeout 240 "/libs-test/$1" $2 >/tmp/libs.out 2>&1
    rc=$?
    t1=$(cut -d' ' -f1 /proc/uptime)
    echo "libs: $1${2:+ $2}: exit status $rc after $(echo "$t0 $t1" | awk '{ printf "%.1f", $2 - $1 }') s"
    # What the program said besides its checks (first_gemm's times,
    # cuDNN's choice, errors); all of it when tracing.
    if [ -n "$debug" ]; then
        grep -v -E '^(PASS|FAIL) ' /tmp/libs.out | sed "s,^,libs: $1: ,"
    else
        grep -v -E '^(PASS|FAIL) ' /tmp/libs.out | tail -n 20 | sed "s,^,libs: $1: ,"
    fi
    for c in $4; do
        if grep -q "^PASS $c\$" /tmp/libs.out; then
            echo "VCU-TEST libs/$c PASS"
        elif grep -q "^FAIL $c " /tmp/libs.out; then
            echo "VCU-TEST libs/$c FAIL $(grep -m 1 "^FAIL $c " /tmp/libs.out | cut -d' ' -f3-)"
        else
            echo "VCU-TEST libs/$c FAIL no result: $1 ended with status $rc"
        fi
    done
}
run_libs() {
    if ! insmod /modules/virtio_blk.ko || ! mkdir -p /disk ||
        ! mount -t ext4 -o ro /dev/vda /disk; then
        echo "VCU-TEST libs/setup FAIL no disk (tests/gpu/libs-run.sh attaches it)"
        return 0
    fi
    if [ ! -f /disk/libs/MANIFEST ]; then
        echo "VCU-TEST libs/setup FAIL no /libs/MANIFEST on the disk"
        return 0
    fi
    sed 's,^,libs: from the GPU host: ,' /disk/libs/MANIFEST
    # VCU_LIBS_DEBUG=1 (kernel command line): the libraries' own logs and
    # every failing Driver API call (tests/gpu/trace), on the console.
    lp=/nvrt/lib:/disk/libs
    debug=
    if grep -q 'VCU_LIBS_DEBUG=1' /proc/cmdline; then
        debug=1
        export CUBLAS_LOGINFO_DBG=1 CUBLAS_LOGDEST_DBG=stderr CUBLASLT_LOG_LEVEL=5
        export CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr
        export VCU_TRACE_LIBCUDA=/nvrt/lib/libcuda.so.1
        lp=/libs-test/trace:/disk/libs
    fi
    # first_gemm first, twice: the guest's first process to use cuBLAS
    # (cold), then the next (warm: what the host kept from the first).
    libs_one first_gemm cold "libcublas.so.13 libcublasLt.so.13" first_gemm_cold
    libs_one first_gemm warm "libcublas.so.13 libcublasLt.so.13" first_gemm_warm
    libs_one libs_check "" "libcublas.so.13 libcublasLt.so.13" "cublas_sgemm cublaslt_hgemm"
    libs_one libs_more "" "libcurand.so.10 libcusparse.so.12 libnvJitLink.so.13" \
        "curand_uniform curand_normal cusparse_spmv"
    libs_one libs_fft "" "libcufft.so.12" "cufft_c2c cufft_r2c_2d"
    libs_one libs_dnn "" "libcudnn.so.9 libcudnn_graph.so.9 libcudnn_ops.so.9 libcudnn_cnn.so.9 \
libcudnn_heuristic.so.9 libcudnn_engines_precompiled.so.9 libcudnn_engines_runtime_compiled.so.9" \
        cudnn_conv_fwd
}

# The disk tests/gpu/torch-run.sh makes of the GPU host's own files (its
# /usr, its Python, its virtual environment) mounted at /disk, with this
# suite's libraries (our libcuda.so.1 and libnvidia-ml.so.1) and checks
# from /$2 in /disk/tmp/vcu; suite $1.  Non-zero, with a failed setup
# test said, where it cannot be.
fw_disk() {
    if ! insmod /modules/virtio_blk.ko || ! mkdir -p /disk ||
        ! mount -t ext4 -o ro /dev/vda /disk; then
        echo "VCU-TEST $1/setup FAIL no disk (tests/gpu/torch-run.sh attaches it)"
        return 1
    fi
    mount -t proc proc /disk/proc && mount -t sysfs sysfs /disk/sys &&
        mount -t devtmpfs devtmpfs /disk/dev && mount -t tmpfs tmpfs /disk/tmp ||
        { echo "VCU-TEST $1/setup FAIL mounts in the disk"; return 1; }
    mkdir -p /disk/tmp/vcu/lib
    cp /"$2"/lib/* /disk/tmp/vcu/lib/ && ln -s libcuda.so.1 /disk/tmp/vcu/lib/libcuda.so &&
        for f in /"$2"/*.py; do
            [ ! -e "$f" ] || cp "$f" /disk/tmp/vcu/ || return 1
        done
}

# GPU suite, torch: PyTorch from the disk, on our libcuda.so.1 and
# libnvidia-ml.so.1.
run_torch() {
    fw_disk torch torch || return 0
    mkdir -p /disk/tmp/triton
    # VCU_TORCH_DEBUG=1 (kernel command line): module loads and a
    # watchdog's stacks and thread states every 60 s, on the console.
    dbg=
    grep -q 'VCU_TORCH_DEBUG=1' /proc/cmdline && dbg="VCU_LIBCUDA_TRACE=modules VCU_TORCH_WATCHDOG=60"
    # VCU_TORCH_DEBUG=errors: each request the host refused, and the
    # failing step's traceback.
    grep -q 'VCU_TORCH_DEBUG=errors' /proc/cmdline &&
        dbg="VCU_LIBCUDA_TRACE=errors VCU_TORCH_TRACEBACK=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P"
    # VCU_TORCH_STEPS=a,b (kernel command line): only those steps.
    steps=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^VCU_TORCH_STEPS=//p')
    [ -n "$steps" ] && dbg="$dbg VCU_TORCH_STEPS=$steps"
    # torch.distributed's processes meet over the loopback interface, and
    # share semaphores in /dev/shm; NCCL says why it fails.
    ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null
    mkdir -p /disk/dev/shm && mount -t tmpfs tmpfs /disk/dev/shm
    chroot /disk /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp TMPDIR=/tmp \
        LD_LIBRARY_PATH=/tmp/vcu/lib TRITON_CACHE_DIR=/tmp/triton TRITON_LIBCUDA_PATH=/tmp/vcu/lib \
        NCCL_DEBUG=WARN NCCL_SOCKET_IFNAME=lo \
        $dbg \
        timeout 1500 /opt/torch/.venv/bin/python3 /tmp/vcu/torch_check.py 2>&1 |
        sed -e 's,^PASS torch/\([^ ]*\)\(.*\)$,VCU-TEST torch/\1 PASS\2,' \
            -e 's,^FAIL torch/\([^ ]*\) *\(.*\)$,VCU-TEST torch/\1 FAIL \2,'
}

# GPU suite, frameworks: JAX (its CUDA 13 plugin) and CuPy from the disk,
# on our libcuda.so.1; each check's steps as tests frameworks/jax-STEP and
# frameworks/cupy-STEP.  VCU_FW_DEBUG=1 (kernel command line): the
# refused requests traced and the tracebacks shown.
run_frameworks() {
    fw_disk frameworks fw || return 0
    # What the guest package's udev rule makes (scripts/install-guest.sh):
    # /dev/nvidiaN linked to /dev/vcudaN, which JAX looks for.
    for n in /dev/vcuda[0-9]*; do
        [ -e "$n" ] && ln -sf "$(basename "$n")" "/dev/nvidia${n#/dev/vcuda}"
    done
    dbg=
    grep -q 'VCU_FW_DEBUG=1' /proc/cmdline &&
        dbg="VCU_LIBCUDA_TRACE=errors VCU_JAX_TRACEBACK=1 VCU_CUPY_TRACEBACK=1"
    for c in jax cupy; do
        chroot /disk /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp TMPDIR=/tmp \
            LD_LIBRARY_PATH=/tmp/vcu/lib JAX_PLATFORMS=cuda,cpu CUPY_CACHE_DIR=/tmp/cupy $dbg \
            timeout 900 /opt/torch/.venv/bin/python3 /tmp/vcu/${c}_check.py 2>&1 |
            sed -e "s,^PASS $c/\([^ ]*\)\(.*\)\$,VCU-TEST frameworks/$c-\1 PASS\2," \
                -e "s,^FAIL $c/\([^ ]*\) *\(.*\)\$,VCU-TEST frameworks/$c-\1 FAIL \2,"
    done
}

# GPU suite, samples (tests/gpu/samples.sh guest): NVIDIA's cuda-samples,
# built on the GPU host, from a disk of that host's files (its /usr, the
# toolkit's libraries, the samples' source and build folders at their
# host paths), each run as natively but on our libcuda.so.1.  The plan,
# /vcu-samples/plan.tsv on the disk (name, folder, program, its runs'
# arguments with ";" between runs), is shared out among the VMs:
# vcu.samples_part=K/N takes every Nth line from the Kth (from 0);
# vcu.samples_until=S starts no run after S seconds of uptime;
# vcu.samples_timeout=S bounds each run.  Each sample's output between
# "VCU-SAMPLE-BEGIN NAME" and "VCU-SAMPLE-END NAME VERDICT STATUS
# SECONDS" (the verdicts of tests/gpu/samples.sh classify).
run_samples() {
    fw_disk samples samples || return 0
    part=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^vcu.samples_part=//p')
    deadline=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^vcu.samples_until=//p')
    tmo=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^vcu.samples_timeout=//p')
    # vcu.samples_env=A=1,B=2: variables for every run (samples.sh checked
    # their characters).
    senv=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^vcu.samples_env=//p' | tr ',' ' ')
    k=${part%/*} n=${part#*/}
    for v in "$k" "$n" "$deadline" "$tmo"; do
        case $v in '' | *[!0-9]*)
            echo "VCU-TEST samples/setup FAIL vcu.samples_part=K/N, _until and _timeout must be numbers"
            return 0 ;;
        esac
    done
    [ "$n" -ge 1 ] || { echo "VCU-TEST samples/setup FAIL vcu.samples_part: no guests"; return 0; }
    [ -f /disk/vcu-samples/plan.tsv ] ||
        { echo "VCU-TEST samples/setup FAIL no /vcu-samples/plan.tsv on the disk"; return 0; }
    # POSIX shared memory (the IPC samples' slabs), and room for what a
    # sample writes into its folder (the disk is read-only).
    mkdir -p /disk/dev/shm && mount -t tmpfs tmpfs /disk/dev/shm ||
        { echo "VCU-TEST samples/setup FAIL no /dev/shm"; return 0; }
    tab=$(printf '\t')
    i=0
    while IFS="$tab" read -r name dir exe runs; do
        i=$((i + 1))
        [ $(((i - 1) % n)) -eq "$k" ] || continue
        sample_run "$name" "$dir" "$exe" "$runs"
    done </disk/vcu-samples/plan.tsv
}

# sample_run NAME DIR EXE RUNS: one sample's runs, in its folder, as the
# host runs it natively; the first run that does not pass gives the verdict.
sample_run() {
    t0=$(cut -d. -f1 /proc/uptime)
    st=PASS rc=0
    echo "VCU-SAMPLE-BEGIN $1"
    oifs=$IFS
    IFS=';'
    # shellcheck disable=SC2086 # the runs, split at ";"
    set -- "$1" "$2" "$3" $4
    IFS=$oifs
    name=$1 dir=$2 exe=$3
    shift 3
    [ $# -gt 0 ] || set -- ""
    # The sample's folder, writable: a copy in memory mounted over it.
    rm -rf /disk/tmp/run && mkdir -p /disk/tmp/run && cp -a "/disk$dir/." /disk/tmp/run/ &&
        mount -o bind /disk/tmp/run "/disk$dir" ||
        echo "== its folder stays read-only (no copy mounted over it)"
    for r in "$@"; do
        if [ "$(cut -d. -f1 /proc/uptime)" -ge "$deadline" ]; then
            st=NOT-RUN rc=-
            echo "== not started: out of time (vcu.samples_until=$deadline)"
            break
        fi
        echo "== ./$exe $r"
        # shellcheck disable=SC2086 # the variables, split at spaces
        chroot /disk /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp TMPDIR=/tmp \
            LD_LIBRARY_PATH=/tmp/vcu/lib $senv \
            /bin/sh -c "cd '$dir' && exec timeout -k 5 $tmo ./$exe $r" </dev/null >/tmp/sample.out 2>&1
        rc=$?
        # What the run printed: its first error-looking lines and its end.
        grep -i -m 3 -E 'not supported|error|fail' /tmp/sample.out
        echo "== ..."
        tail -n 30 /tmp/sample.out
        echo "== exit status $rc"
        case $rc in
        0) st=PASS ;;
        2) st=WAIVED ;;
        124 | 137) st=TIMEOUT ;;
        *) st=FAIL ;;
        esac
        [ $st = PASS ] || break
    done
    umount "/disk$dir" 2>/dev/null
    rm -rf /disk/tmp/run
    echo "VCU-SAMPLE-END $name $st $rc $(($(cut -d. -f1 /proc/uptime) - t0))"
    if [ $st = PASS ]; then
        echo "VCU-TEST samples/$name PASS"
    elif [ $st != NOT-RUN ]; then
        echo "VCU-TEST samples/$name FAIL $st, exit status $rc"
    fi
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

# GPU suite, share (tests/gpu/share.sh judges from the host): vcu.share_procs
# guest processes run the compute-bound kernel loop for vcu.share_secs
# seconds at once; their "VCU-SHARE" lines go to the console as they come.
run_share() {
    [ -n "$hostile" ] && { run_hostile; return; }
    i=0
    pids=
    [ -n "$packed" ] && packed_check check
    [ -n "$many" ] && { run_many & many_pid=$!; }
    # The VM's GPU utilization as its guest sees it (vcuda-smi over our
    # NVML), asked once the loops have run a while.
    if [ "$share_secs" -ge 12 ]; then
        (sleep 8; u=$(LD_LIBRARY_PATH=/nvml/lib timeout 60 /nvml/vcuda-smi \
            --query-gpu=utilization.gpu --format=csv,noheader,nounits 2>&1 | head -n 1)
         echo "VCU-SHARE util value=$(echo "$u" | tr -d ' ')") &
    fi
    while [ "$i" -lt "$share_procs" ]; do
        LD_LIBRARY_PATH=/cuda/lib /cuda/share_loop "p$i" "$share_secs" $share_iters &
        pids="$pids $!"
        i=$((i + 1))
    done
    i=0
    for p in $pids; do
        if wait "$p"; then
            echo "VCU-TEST share/loop-p$i PASS"
        else
            echo "VCU-TEST share/loop-p$i FAIL exit status $?"
        fi
        i=$((i + 1))
    done
    [ -n "$many" ] && wait "$many_pid"
    [ -n "$packed" ] && packed_check check-after
}

# A VM against its slice (vcu.hostile=MODE,PROCS,SECS, tests/gpu/hostile.sh
# judges from the host): PROCS processes of hostile_work MODE at once.  An
# attacker's process refused at its start (sessions, memory) is the slice
# holding, not a failure; a victim's must pass.
run_hostile() {
    h_mode=${hostile%%,*}
    h_rest=${hostile#*,}
    h_procs=${h_rest%%,*}
    h_secs=${h_rest#*,}
    i=0
    pids=
    while [ "$i" -lt "$h_procs" ]; do
        LD_LIBRARY_PATH=/cuda/lib /cuda/hostile_work "$h_mode" "p$i" "$h_secs" &
        pids="$pids $!"
        i=$((i + 1))
        sleep 0.2
    done
    i=0
    for p in $pids; do
        if wait "$p"; then
            echo "VCU-TEST share/hostile-$h_mode-p$i PASS"
        else
            echo "VCU-TEST share/hostile-$h_mode-p$i FAIL exit status $?"
        fi
        i=$((i + 1))
    done
}

# A packed VM's SMs as its guest sees them (tests/packed/packed_check.cu):
# properties, NVML and the SMs its kernels run on.
packed_check() {
    if LD_LIBRARY_PATH=/cuda/lib:/nvml/lib timeout 120 /cuda/packed_check "$packed"; then
        echo "VCU-TEST share/packed-$1 PASS"
    else
        echo "VCU-TEST share/packed-$1 FAIL exit status $?"
    fi
}

# The migrate suite (tests/vm/migrate.py migrates the VM while it runs):
# the checker tests/many/many_work for vcu.mig_secs seconds, every round's
# results checked, managed memory among them; it must see no wrong result
# across the move.
run_migrate() {
    if MANY_ROUNDS=1 MANY_MANAGED=1 MANY_BALLAST_MIB=$mig_ballast LD_LIBRARY_PATH=/cuda/lib /cuda/many_work mig "$mig_secs" 0; then
        echo "VCU-TEST migrate/checker PASS"
    else
        echo "VCU-TEST migrate/checker FAIL exit status $?"
    fi
}

# Beside the loops (vcu.many=QUOTA_MIB,FAULT_AT, tests/gpu/many.sh): the
# checker tests/many/many_work for the same time; one told to fault
# (FAULT_AT seconds, 0: never) must see the sticky error, and a new
# process after it must work for the time left.
run_many() {
    quota=${many%%,*}
    fault_at=${many#*,}
    t0=$(cut -d. -f1 /proc/uptime)
    if [ "$fault_at" != 0 ]; then
        LD_LIBRARY_PATH=/cuda/lib /cuda/many_work m0 "$share_secs" "$quota" "$fault_at"
        rc=$?
        if [ $rc = 3 ]; then echo "VCU-TEST share/many-fault-seen PASS"; else echo "VCU-TEST share/many-fault-seen FAIL exit status $rc"; fi
        left=$((share_secs - ($(cut -d. -f1 /proc/uptime) - t0)))
        [ "$left" -lt 5 ] && left=5
        tag=m1
    else
        left=$share_secs
        tag=m0
    fi
    if LD_LIBRARY_PATH=/cuda/lib /cuda/many_work "$tag" "$left" "$quota"; then
        echo "VCU-TEST share/many-checker-$tag PASS"
    else
        echo "VCU-TEST share/many-checker-$tag FAIL exit status $?"
    fi
}

# NVML in the guest: the driver's sessions file with two processes holding
# the device, vcuda-smi's table listing both, tests/nvml/nvml_api, the
# file read while sessions open and close, and empty again at the end.
t_nvml() {
    if [ "$2" = 0 ]; then echo "VCU-TEST nvml/$1 PASS"; else echo "VCU-TEST nvml/$1 FAIL $3"; fi
}
nvml_wait_hold() {
    i=0
    while ! grep -q holding "$1" && [ $i -lt 1200 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    grep -q holding "$1"
}
run_nvml() {
    export LD_LIBRARY_PATH=/nvml/lib
    sf=/sys/class/vcuda/vcuda0/sessions
    [ -r $sf ] && [ -z "$(cat $sf)" ]
    t_nvml sessions_empty $? "$(cat $sf 2>&1)"

    /nvml/nvml_hold 32 >/tmp/h1 2>&1 &
    p1=$!
    /nvml/nvml_hold 64 >/tmp/h2 2>&1 &
    p2=$!
    nvml_wait_hold /tmp/h1 && nvml_wait_hold /tmp/h2
    t_nvml holders_started $? "$(cat /tmp/h1 /tmp/h2)"
    cat $sf | sed 's/^/sessions: /'
    # One line each, "<pid> <session> nvml_hold", sessions nonzero and apart.
    s1=$(awk -v p=$p1 '$1 == p && $3 == "nvml_hold" && $2 != 0 { print $2 }' $sf)
    s2=$(awk -v p=$p2 '$1 == p && $3 == "nvml_hold" && $2 != 0 { print $2 }' $sf)
    [ -n "$s1" ] && [ -n "$s2" ] && [ "$s1" != "$s2" ] && [ "$(wc -l <$sf)" = 2 ]
    t_nvml sessions_two_holders $? "pids $p1 $p2: $(tr '\n' ';' <$sf)"

    timeout 120 /nvml/vcuda-smi >/tmp/smi 2>&1
    rc=$?
    sed 's/^/smi: /' /tmp/smi
    # Both holders in the process table, with their names; vcuda-smi's
    # own session is not.
    n=$(grep -cE '^\| +0 +[0-9]+ +/nvml/nvml_hold ' /tmp/smi)
    [ $rc = 0 ] && grep -qE "^\| +0 +$p1 +/nvml/nvml_hold " /tmp/smi &&
        grep -qE "^\| +0 +$p2 +/nvml/nvml_hold " /tmp/smi && [ "$n" = 2 ] &&
        [ "$(grep -cE '^\| +0 +[0-9]+ ' /tmp/smi)" = 2 ]
    t_nvml smi_lists_holders $? "rc $rc, $n holder lines"
    grep -qE '^\|   0  .* \| [0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0 +\| +[0-9]+MiB / [0-9]+MiB ' /tmp/smi
    t_nvml smi_device_row $? "no device row"
    timeout 120 /nvml/vcuda-smi -L >/tmp/smiL 2>&1 && grep -qE '^GPU 0: .* \(UUID: GPU-' /tmp/smiL
    t_nvml smi_list $? "$(cat /tmp/smiL)"
    timeout 120 /nvml/vcuda-smi -q >/tmp/smiq 2>&1 && grep -q 'Bus Id' /tmp/smiq &&
        grep -qE "^ +Process ID +: $p1\$" /tmp/smiq && grep -qE "^ +Process ID +: $p2\$" /tmp/smiq
    t_nvml smi_query $? "$(grep -A3 Processes /tmp/smiq | tr '\n' ';')"

    kill $p1 $p2
    wait $p1 $p2 2>/dev/null
    i=0
    while [ -n "$(cat $sf)" ] && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ -z "$(cat $sf)" ]
    t_nvml sessions_empty_after $? "$(tr '\n' ';' <$sf)"

    # The API test, nothing else holding the device: NVML's answers
    # against libcuda's, the process list holding this process only.
    timeout 240 /nvml/nvml_api >/tmp/api 2>&1
    rc=$?
    sed 's/^/nvml_api: /' /tmp/api
    t_nvml nvml_api $rc "$(grep FAIL /tmp/api | head -n 3)"

    # More open files than a page holds: whole lines only, the rest left out.
    pids=
    i=0
    while [ $i -lt 400 ]; do
        sleep 60 </dev/vcuda0 &   # opened by the forked shell: its name
        pids="$pids $!"
        i=$((i + 1))
    done
    sleep 1
    lines=$(wc -l <$sf)
    bad=$(grep -cvE '^[0-9]+ 0 [^ ]+$' $sf)
    kill $pids
    wait $pids 2>/dev/null
    [ "$lines" -gt 200 ] && [ "$lines" -lt 400 ] && [ "$bad" = 0 ]
    t_nvml sessions_page_full $? "$lines lines, $bad not whole"

    # Hostile: the file read in a loop while files open and close and
    # sessions open (vcuda-smi -L) for a while; the kernel log is checked
    # for oopses by the host.
    ( end=$(($(cut -d. -f1 /proc/uptime) + 20))
      while [ "$(cut -d. -f1 /proc/uptime)" -lt $end ]; do exec 3<>/dev/vcuda0; exec 3>&-; done ) &
    o1=$!
    ( end=$(($(cut -d. -f1 /proc/uptime) + 20))
      while [ "$(cut -d. -f1 /proc/uptime)" -lt $end ]; do /nvml/vcuda-smi -L >/dev/null 2>&1; done ) &
    o2=$!
    reads=0
    end=$(($(cut -d. -f1 /proc/uptime) + 20))
    while [ "$(cut -d. -f1 /proc/uptime)" -lt $end ]; do
        cat $sf >/dev/null || break
        reads=$((reads + 1))
    done
    wait $o1 $o2
    i=0
    while [ -n "$(cat $sf)" ] && [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    echo "nvml: $reads reads of the sessions file while it changed"
    [ $reads -gt 10 ] && [ -z "$(cat $sf)" ]
    t_nvml sessions_read_while_churning $? "$reads reads; left: $(tr '\n' ';' <$sf)"
    unset LD_LIBRARY_PATH
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
    [ -f /nvrt/lib/libcudart.so.13 ] || return 0
    # The same binary on NVIDIA's runtime over our libcuda.so.1.
    echo "VCU-BENCH-NVRT-BEGIN"
    LD_LIBRARY_PATH=/nvrt/lib timeout 900 /cuda/cudabench $bench_args
    rc=$?
    echo "VCU-BENCH-NVRT-END"
    if [ $rc -eq 0 ]; then
        echo "VCU-TEST bench/cudabench-nvrt PASS"
    else
        echo "VCU-TEST bench/cudabench-nvrt FAIL exit status $rc"
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
        quota) timeout 540 /tests/quota_test ;;
        cuda) run_cuda ;;
        nvrt) run_nvrt ;;
        nvml) run_nvml ;;
        libs) run_libs ;;
        torch) run_torch ;;
        frameworks) run_frameworks ;;
        samples) run_samples ;;
        demo) run_demo ;;
        bench) run_bench ;;
        leaks) run_leaks ;;
        share) run_share ;;
        migrate) run_migrate ;;
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
