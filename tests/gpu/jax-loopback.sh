#!/usr/bin/env bash
# JAX (the GPU machine's /opt/torch/.venv: JAX 0.11 with its CUDA 13
# plugin) on our libcuda.so.1 natively, through the loopback build (our
# library, the host backend and the host's real libcuda.so.1 in one
# process, no VM): tests/gpu/jax-check.py.  Last line "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
py=${VCU_TORCH_PY:-/opt/torch/.venv/bin/python}
lib=$(dirname "$(find build -path '*loopback*' -name libcuda.so.1 | head -n 1)")
real=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')
if [ ! -x "$py" ] || [ ! -e "$lib/libcuda.so.1" ] || [ -z "$real" ]; then
    echo "jax-loopback: needs $py, the loopback libcuda.so.1 and the host's libcuda.so.1"
    echo "0 passed, 1 failed"
    exit 1
fi
out=$(VCU_TRANSPORT=loopback VCU_LIBCUDA=$real LD_LIBRARY_PATH=$lib JAX_PLATFORMS=cuda \
      timeout 300 "$py" tests/gpu/jax-check.py 2>&1)
rc=$?
echo "$out" | grep -v '^ *$' | tail -n 25
if [ $rc = 0 ] && echo "$out" | grep -q "^devices \[CudaDevice" &&
   echo "$out" | awk '/max rel err|max err/ { if ($NF + 0 > 1e-3) bad = 1 } END { exit bad }'; then
    echo "PASS jax-loopback"
    echo "1 passed, 0 failed"
else
    echo "FAIL jax-loopback (exit status $rc)"
    echo "0 passed, 1 failed"
    exit 1
fi
