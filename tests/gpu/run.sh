#!/usr/bin/env bash
# GPU suite, for a host with an NVIDIA GPU (CUDA 13 driver): the CUDA test
# programs in a TCG guest whose device runs them on the real GPU.
#
# On a build machine: make all && tests/vm/run.sh cuda,demo (builds the
# guest images), then carry build/qemu and build/vm to the GPU host and run
# this there with VCU_NO_BUILD=1: it needs no compiler and no packages.
# The main job (scripts/run.sh, make run) runs there from the same outputs.
# Logs: build/vm/logs (or $VCU_VM_LOGDIR).
set -uo pipefail
cd "$(dirname "$0")/../.."

# grep without -q reads to the end: under pipefail, grep -q's early exit
# would kill ldconfig with SIGPIPE and fail the test on a GPU machine.
if ! ldconfig -p 2>/dev/null | grep 'libcuda\.so\.1 ' >/dev/null; then
    echo "gpu-suite: no libcuda.so.1 on this host: not a GPU machine" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
export VCU_REAL_GPU=1
# A second argument: one more virtio-cuda-pci option ("module-cache=DIR").
VCU_ECHO_MIB=${VCU_ECHO_MIB:-256} tests/vm/run.sh "${1:-cuda,nvrt,nvml,quota,demo,echo,badinput}" ${2:+"$2"}
