#!/usr/bin/env bash
# The CUDA test programs, unmodified nvcc binaries, run natively against the
# loopback build of guest-lib: the runtime, the host backend and the CPU
# stand-in for libcuda (a test double) in one process, no VM.
set -euo pipefail
cd "$(dirname "$0")/.."
export VCU_TRANSPORT=loopback
export VCU_LIBCUDA=$PWD/build/fakecuda/libcuda.so.1
export LD_LIBRARY_PATH=$PWD/build/guest-lib-loopback
exec sh build/cuda-tests/run.sh build/cuda-tests
