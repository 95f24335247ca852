#!/usr/bin/env bash
# The main job (README): build everything, boot a guest under TCG with the
# virtio-cuda-pci device and run CUDA programs in it (device_query and
# vector_add from tests/cuda, unchanged nvcc binaries on our runtime), on
# the host's GPU.  Without one, say so and use the CPU stand-in for libcuda
# (a test double) so the rest of the path still runs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Not "ldconfig -p | grep -q" under pipefail: grep -q exits at the first
# match and ldconfig, still writing, dies of SIGPIPE, which fails the test.
have_gpu() {
    [ -e /dev/nvidiactl ] && ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1 ' >/dev/null
}

if [ "${VCU_NO_BUILD:-0}" != 1 ]; then
    bash scripts/deps.sh
    make -s all
fi
if have_gpu; then
    export VCU_REAL_GPU=1
else
    echo "No NVIDIA GPU on this host: the guest runs against the CPU stand-in for libcuda (a test double) instead."
fi
rc=0
# An earlier run's log must not pass for this one's.
log=${VCU_VM_LOGDIR:-build/vm/logs}/demo.log
rm -f "$log"
tests/vm/run.sh demo || rc=$?
if [ -f "$log" ]; then
    echo "--- guest console: the programs' output ---"
    sed -n '/^VCU-SUITE-BEGIN demo/,/^VCU-SUITE-END demo/p' "$log" | { grep -v '^VCU-SUITE-\|^dmesg:' || true; }
fi
exit $rc
