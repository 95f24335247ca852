#!/usr/bin/env bash
# The main job (README): build everything, then show what virtio-cuda does.
#
#  1. On a host with an NVIDIA GPU: the demo program (tests/demo/vcu_demo.cu)
#     natively, on NVIDIA's libcudart.so.13: the host's GPUs and the
#     workload's figures there.  Without one: a line saying so; the guest's
#     device then runs on the CPU stand-in for libcuda (a test double).
#  2. The same binary in a TCG guest with the virtio-cuda-pci device, on our
#     libcudart.so.13 (tests/vm/run.sh demo, which starts the host daemon
#     vcu-daemon first, as an operator does): what the guest sees (devices,
#     memory, versions) and the workload's figures, each result checked
#     against a CPU reference.
#  3. With a GPU: which host GPU is behind each guest device (by UUID) and a
#     table of native and guest figures side by side.
#  4. One verdict line, "virtio-cuda: OK ..." or "virtio-cuda: FAILED ...";
#     the exit status is non-zero when anything failed.
#
# Environment:
#   VCU_NO_BUILD=1         use build/ as it is: no packages, no compiler (a GPU
#                          host with the outputs of tests/gpu/prepare.sh)
#   VCU_NVIDIA_CUDART=DIR  NVIDIA's libcudart.so.13 for the native run
#                          [/usr/local/cuda/lib64, else build/nvidia]
# Logs: build/run/ (native.log, guest.log, vm-run.log).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

demo=build/vm/vcu_demo
logs=build/run
keys="h2d d2h saxpy sgemm launch"

verdict_fail() {
    echo
    echo "virtio-cuda: FAILED — $*"
    exit 1
}

# grep reads ldconfig's whole listing: a quiet grep would exit at the first
# match and ldconfig, still writing, would die of SIGPIPE under pipefail.
have_gpu() {
    [ -e /dev/nvidiactl ] && ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1 ' >/dev/null
}

nvidia_cudart_dir() {
    for d in "${VCU_NVIDIA_CUDART:-}" /usr/local/cuda/lib64 \
        /usr/local/cuda/targets/x86_64-linux/lib "$PWD/build/nvidia"; do
        [ -n "$d" ] && [ -e "$d/libcudart.so.13" ] && { echo "$d"; return 0; }
    done
    return 1
}

# field FILE KEY N: the demo's figure row KEY in FILE; N: 1 value, 2 unit,
# 3 check, 4 label.
field() {
    awk -v k="$2" -v n="$3" '
        $1 == k && /^  [a-z0-9]+ / {
            if (n == 1) print $(NF - 2)
            else if (n == 2) print $(NF - 1)
            else if (n == 3) print $NF
            else { s = $2; for (i = 3; i <= NF - 3; i++) s = s " " $i; print s }
            exit
        }' "$1"
}

# The UUIDs of the devices a demo run listed, in order.
uuids() {
    awk '$1 == "UUID" { print $2 }' "$1"
}

# device_name FILE N, device_bus FILE N: device N as a demo run listed it.
device_name() {
    awk -v d="  device $2: " 'index($0, d) == 1 { print substr($0, length(d) + 1); exit }' "$1"
}
device_bus() {
    awk -v d="  device $2: " 'index($0, d) == 1 { f = 1 } f && $1 == "PCI" { print $4; exit }' "$1"
}

if [ "${VCU_NO_BUILD:-0}" != 1 ]; then
    bash scripts/deps.sh || verdict_fail "installing the build dependencies (scripts/deps.sh) failed"
    make -s all || verdict_fail "the build (make all) failed"
fi
[ -x "$demo" ] || verdict_fail "no $demo (make demo)"
mkdir -p "$logs"
rm -f "$logs/native.log" "$logs/guest.log" "$logs/vm-run.log"
problems=()

# ---- 1. natively on the host -------------------------------------------------
gpu=no
if have_gpu; then
    gpu=yes
    export VCU_REAL_GPU=1
    echo "== the host"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total \
            --format=csv,noheader | sed 's/^/  GPU /'
    fi
    echo
    if nvdir=$(nvidia_cudart_dir); then
        echo "== natively on the host: $demo on NVIDIA's libcudart.so.13 ($nvdir)"
        LD_LIBRARY_PATH="$nvdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            timeout 300 "$demo" >"$logs/native.log" 2>&1
        nrc=$?
        cat "$logs/native.log"
        [ $nrc -eq 0 ] || problems+=("the demo failed natively on the host (exit status $nrc)")
    else
        problems+=("NVIDIA's libcudart.so.13 not found for the native run (set VCU_NVIDIA_CUDART)")
    fi
    echo
    path_end="the host's GPU"
else
    echo "No NVIDIA GPU on this host: running the guest against the CPU stand-in for libcuda (a test double)"
    path_end="the CPU stand-in for libcuda.so.1"
fi

# ---- 2. in the guest ---------------------------------------------------------
echo "== in the guest: the same $demo, unchanged, on virtio-cuda's libcudart.so.13"
echo "   path: guest program -> libcudart.so.13 (guest-lib) -> /dev/vcuda0 (virtio_cuda.ko)"
echo "         -> virtqueue -> QEMU virtio-cuda-pci (seccomp sandbox, spawn=deny)"
echo "         -> vcu-worker (a jailed host process per guest process, started by vcu-daemon) -> $path_end"
echo "   (starting the host daemon and booting a TCG guest; the harness's log: $logs/vm-run.log)"
tests/vm/run.sh demo >"$logs/vm-run.log" 2>&1
grc=$?
sed -n '/^VCU-SUITE-BEGIN demo/,/^VCU-SUITE-END demo/p' build/vm/logs/demo.log 2>/dev/null |
    grep -av '^VCU-\|^dmesg:' >"$logs/guest.log"
cat "$logs/guest.log"
grep -a '^suite demo: VM wall' "$logs/vm-run.log" | sed 's/^suite demo: /   /'
if [ $grc -ne 0 ]; then
    echo "--- the VM harness (tests/vm/run.sh demo) ---"
    if [ -s "$logs/guest.log" ]; then
        grep -a '^VCU-TEST \|^suite demo\|^vm-run: \|^[0-9]* passed, ' "$logs/vm-run.log"
    else
        tail -n 25 "$logs/vm-run.log"
    fi
    why=$(grep -a '^VCU-TEST demo/.* FAIL\|^suite demo: FAIL\|^vm-run: ' "$logs/vm-run.log" | tail -n 1)
    problems+=("the guest run failed${why:+ ($why)}")
fi
for k in $keys; do
    c=$(field "$logs/guest.log" "$k" 3)
    if [ "$c" != ok ] && [ $grc -eq 0 ]; then
        problems+=("the guest printed no good $k figure")
    fi
done
echo

# ---- 3. side by side ---------------------------------------------------------
if [ $gpu = yes ] && [ -s "$logs/native.log" ] && [ -s "$logs/guest.log" ]; then
    echo "== which host GPU is behind each guest device (matched by UUID)"
    i=0
    mapfile -t host_uuids < <(uuids "$logs/native.log")
    while read -r u; do
        h=-1
        for j in "${!host_uuids[@]}"; do
            [ "${host_uuids[$j]}" = "$u" ] && h=$j
        done
        if [ "$h" -ge 0 ]; then
            echo "  guest device $i = host GPU $h: $(device_name "$logs/native.log" "$h")," \
                "host PCI $(device_bus "$logs/native.log" "$h"), $u"
        else
            echo "  guest device $i: $u is none of the host's GPUs"
            problems+=("guest device $i's UUID matches no host GPU")
        fi
        i=$((i + 1))
    done < <(uuids "$logs/guest.log")
    echo
    echo "== device 0, native vs guest (medians; guest speed as a share of native)"
    printf '  %-40s %10s %-7s %10s %-7s %12s\n' workload native "" guest "" guest/native
    for k in $keys; do
        nv=$(field "$logs/native.log" "$k" 1)
        gv=$(field "$logs/guest.log" "$k" 1)
        unit=$(field "$logs/guest.log" "$k" 2)
        label=$(field "$logs/guest.log" "$k" 4)
        [ -n "$label" ] || label=$(field "$logs/native.log" "$k" 4)
        [ -n "$unit" ] || unit=$(field "$logs/native.log" "$k" 2)
        # Rates: guest / native; a time (us): native / guest.
        pct=$(awk -v n="$nv" -v g="$gv" -v u="$unit" 'BEGIN {
            if (n == "" || g == "" || n + 0 <= 0 || g + 0 <= 0) { print "-"; exit }
            printf "%.0f%%", 100 * (u == "us" ? n / g : g / n) }')
        printf '  %-40s %10s %-7s %10s %-7s %12s\n' "$label" "${nv:--}" "$unit" "${gv:--}" "$unit" \
            "$pct"
        if [ -n "$nv" ] && [ "$(field "$logs/native.log" "$k" 4)" != "$label" ]; then
            problems+=("native and guest ran $k at different sizes")
        fi
        [ "$k" = sgemm ] && sgemm_pct=$pct
    done
    echo
fi

# ---- 4. the verdict ----------------------------------------------------------
if [ ${#problems[@]} -gt 0 ]; then
    msg=${problems[0]}
    for p in "${problems[@]:1}"; do msg="$msg; $p"; done
    verdict_fail "$msg"
fi
if [ $gpu = yes ]; then
    echo "virtio-cuda: OK — guest ran SGEMM on $(device_name "$logs/guest.log" 0)" \
        "at ${sgemm_pct:-?} of native, results match the CPU reference"
else
    echo "virtio-cuda: OK — path works end to end against the CPU stand-in"
fi
