#!/bin/sh
# The benchmark on the GPU machine, from carried build outputs: one command.
#
#   bench/run.sh [--quick] [OUTDIR]
#
#  1. cudabench natively, against NVIDIA's libcudart.so.13   -> OUTDIR/native.csv
#  2. backend_overhead natively (no VM): direct, in-process backend, and
#     proxy + worker process as QEMU runs them, VCU_BENCH_RUNS times, each
#     row the median of the runs (runs.py); then ring_rtt, the session
#     rings' round trip alone                                  -> OUTDIR/overhead.csv
#  3. cudabench in the guest, against virtio-cuda's libcudart -> OUTDIR/guest.csv,
#     then on NVIDIA's libcudart over virtio-cuda's libcuda.so.1 -> OUTDIR/guest-nvrt.csv
#  4. combine.py -> OUTDIR/results.csv (and a table), plot.py -> OUTDIR/bandwidth.png;
#     both are copied to bench/ as well.
# A step that fails is reported and leaves its CSV empty; the others still run.
#
# Environment:
#   VCU_BENCH_BIN=DIR     cudabench, backend_overhead  [this script's dir if
#                         they are there, else build/bench]
#   VCU_NVIDIA_CUDART=DIR holds NVIDIA's libcudart.so.13 [/usr/local/cuda/lib64,
#                         else DIR of VCU_BENCH_BIN/nvidia]
#   VCU_BENCH_BUDGET=S    cudabench --budget-seconds in the guest [60; 20 with --quick]
#   VCU_GPU=ORD           host GPU for backend_overhead [0]
#   VCU_BENCH_RUNS=N      runs of backend_overhead, a fresh worker each [9]
#   VCU_BENCH_QUICK=1     as --quick
#   (the proxy rows start build/qemu/bin/vcu-daemon, whose workers are jailed)
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
quick=
[ "${VCU_BENCH_QUICK:-0}" = 1 ] && quick=--quick
if [ "${1:-}" = "--quick" ]; then quick=--quick; shift; fi
out=${1:-$root/build/bench/results}
# Run from the source tree or from the build output (make copies run.sh there).
if [ -x "$here/cudabench" ]; then dflt_bin=$here; else dflt_bin=$root/build/bench; fi
bin=${VCU_BENCH_BIN:-$dflt_bin}
if [ -n "$quick" ]; then budget=${VCU_BENCH_BUDGET:-20}; else budget=${VCU_BENCH_BUDGET:-60}; fi
failed=0

step() { echo "bench: $*" >&2; }
mkdir -p "$out"

nvidia_cudart_dir() {
    for d in "${VCU_NVIDIA_CUDART:-}" /usr/local/cuda/lib64 /usr/local/cuda/lib \
        /usr/local/cuda/targets/x86_64-linux/lib "$bin/nvidia"; do
        [ -n "$d" ] && [ -e "$d/libcudart.so.13" ] && { echo "$d"; return 0; }
    done
    return 1
}

# Runs "$@" (a cudabench command line) in a virtio-cuda guest on the real
# GPU and writes the program's stdout (the CSV) to $VCU_GUEST_CSV: the VM
# harness's bench suite boots the guest with cudabench in its initramfs and
# prints the CSV between VCU-BENCH-BEGIN / VCU-BENCH-END on the console.
# The guest image is built beforehand (tests/vm/run.sh bench on a build
# machine); VCU_NO_BUILD=0 builds it here instead.
run_in_guest() {
    VCU_REAL_GPU=1 VCU_NO_BUILD=${VCU_NO_BUILD:-1} VCU_VM_TIMEOUT=${VCU_VM_TIMEOUT:-1200} \
        VCU_BENCH_ARGS=$(echo "$*" | tr ' ' ',') "$root/tests/vm/run.sh" bench >&2 ||
        step "guest: a run failed (build/vm/logs/bench.log); taking what it printed"
    [ -f "$root/build/vm/logs/bench.log" ] || return 1
    sed -n '/^VCU-BENCH-BEGIN/,/^VCU-BENCH-END/{//!p}' "$root/build/vm/logs/bench.log" \
        >"$VCU_GUEST_CSV"
    sed -n '/^VCU-BENCH-NVRT-BEGIN/,/^VCU-BENCH-NVRT-END/{//!p}' "$root/build/vm/logs/bench.log" \
        >"$VCU_GUEST_CSV.nvrt"
}

# ---- 1. native cudabench ----------------------------------------------------------
if [ ! -x "$bin/cudabench" ]; then
    step "no $bin/cudabench (make -C bench O=$bin)"; exit 1
fi
if nvdir=$(nvidia_cudart_dir); then
    step "cudabench natively (libcudart.so.13 from $nvdir)"
    if LD_LIBRARY_PATH="$nvdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$bin/cudabench" $quick >"$out/native.csv.tmp"; then
        mv "$out/native.csv.tmp" "$out/native.csv"
    else
        step "native cudabench failed"; failed=1; : >"$out/native.csv"
    fi
else
    step "NVIDIA's libcudart.so.13 not found: set VCU_NVIDIA_CUDART"; failed=1
    : >"$out/native.csv"
fi

# ---- 2. backend overhead ---------------------------------------------------------------
# The proxy rows go through the host daemon and a jailed worker, as QEMU's
# device does (make qemu installs both).
VCU_ROOT=$root
[ -f "$VCU_ROOT/tests/vm/daemon.sh" ] || VCU_ROOT=$(cd "$root/.." && pwd)
. "$VCU_ROOT/tests/vm/daemon.sh"
if [ -x "$VCU_ROOT/build/qemu/bin/vcu-daemon" ] &&
    vcu_daemon_start "${TMPDIR:-/tmp}/vcu-bench-daemon.$$" --cache-dir off ${VCU_LIBCUDA:+--libcuda "$VCU_LIBCUDA"}; then
    trap 'vcu_daemon_stop; rm -rf "${TMPDIR:-/tmp}/vcu-bench-daemon.$$"' EXIT
    worker_arg="--daemon $VCU_DAEMON_SOCK"
else
    step "no host daemon (make qemu): backend_overhead without the proxy rows"; worker_arg=--no-proxy
fi
# Each run draws its own placement of the threads on the machine's CPUs,
# which moves its figures more than most changes would: the median of
# several runs is what counts (runs.py keeps the spread as comments).
runs=${VCU_BENCH_RUNS:-9}
step "backend_overhead ($worker_arg), $runs runs"
rm -f "$out"/overhead-run*.csv
i=1
while [ "$i" -le "$runs" ]; do
    "$bin/backend_overhead" $quick --gpu "${VCU_GPU:-0}" $worker_arg >"$out/overhead-run$i.csv" ||
        { step "backend_overhead run $i failed"; failed=1; }
    i=$((i + 1))
done
if python3 "$here/runs.py" -o "$out/overhead.csv.tmp" "$out"/overhead-run*.csv; then
    mv "$out/overhead.csv.tmp" "$out/overhead.csv"
else
    step "backend_overhead: no results"; failed=1; : >"$out/overhead.csv"
fi
if [ -x "$bin/ring_rtt" ]; then
    step "ring_rtt"
    "$bin/ring_rtt" >"$out/ring.csv" || { step "ring_rtt failed"; failed=1; }
    grep -v '^metric,' "$out/ring.csv" >>"$out/overhead.csv"
fi

# ---- 3. cudabench in the guest ---------------------------------------------------------
step "cudabench in the guest (budget ${budget} s)"
if VCU_GUEST_CSV="$out/guest.csv.tmp" run_in_guest $quick --budget-seconds "$budget" &&
    grep -q '^metric,' "$out/guest.csv.tmp" 2>/dev/null; then
    mv "$out/guest.csv.tmp" "$out/guest.csv"
    if grep -q '^metric,' "$out/guest.csv.tmp.nvrt" 2>/dev/null; then
        mv "$out/guest.csv.tmp.nvrt" "$out/guest-nvrt.csv"
    else
        step "guest cudabench on NVIDIA's runtime: no results"; : >"$out/guest-nvrt.csv"
    fi
else
    step "guest cudabench: no results"; failed=1; : >"$out/guest.csv"
fi

# ---- 4. combine, plot ------------------------------------------------------------------
step "combine"
python3 "$here/combine.py" "$out/native.csv" "$out/guest.csv" "$out/overhead.csv" "$out/guest-nvrt.csv" \
    -o "$out/results.csv" | tee "$out/results.txt" || failed=1
if [ -s "$out/results.csv" ]; then
    python3 "$here/plot.py" "$out/results.csv" -o "$out/bandwidth.png" || failed=1
    # The figures are kept in git (bench/results.csv); the plot is drawn
    # from them and stays in OUTDIR, a build output.
    cp "$out/results.csv" "$here/results.csv"
fi
step "results in $out (results.csv, results.txt, bandwidth.png; raw: native.csv guest.csv guest-nvrt.csv overhead.csv, overhead-run*.csv, ring.csv)"
exit $failed
