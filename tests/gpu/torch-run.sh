#!/usr/bin/env bash
# On the GPU machine: PyTorch (VM suite torch), or JAX and CuPy (VM suite
# frameworks), in a guest.  The guest's root is a disk made here of this
# host's own files, as they are: its /usr (Python 3.12, glibc), /etc, and
# the virtual environment under /opt (torch, JAX with its CUDA 13 plugin,
# CuPy, NVIDIA's library wheels, Triton; the other suite's packages left
# out; for JAX the toolkit's ptxas, nvlink and libdevice); NVIDIA's driver
# libraries (libcuda, libnvidia-*) are left out, so the guest's only driver
# is ours.  Hard links into a staging folder, then mke2fs -d.
#
#   tests/gpu/torch-run.sh native [SUITE]   the checks natively, for the times to compare
#   tests/gpu/torch-run.sh guest [SUITE]    in a guest (needs build/vm/initrd-SUITE.img)
#
# SUITE: torch (the default) or frameworks.
# VCU_TORCH_VENV   the virtual environment [/opt/torch/.venv]
# VCU_TORCH_GPUS   the GPUs the guest is given (virtio-cuda-pci's gpus=,
#                  "0,,1" for two: the steps nccl and distributed run)
# VCU_GUEST_APPEND="VCU_TORCH_STEPS=nccl,distributed"  only those steps
set -uo pipefail
cd "$(dirname "$0")/../.."
venv=${VCU_TORCH_VENV:-/opt/torch/.venv}
what=${1:-guest}
suite=${2:-torch}
case $suite in
torch) checks=tests/torch/torch_check.py
    # What the check does not import (the environment holds JAX, CuPy, ...).
    drop="jax jaxlib jax_plugins cupy cupy_backends scipy" ;;
frameworks) checks="tests/frameworks/jax_check.py tests/frameworks/cupy_check.py"
    drop="torch torchvision torchaudio torchgen functorch triton" ;;
*) echo "torch-run: unknown suite $suite"; echo "0 passed, 1 failed"; exit 1 ;;
esac
[ -x "$venv/bin/python3" ] || { echo "torch-run: no $venv/bin/python3"; echo "0 passed, 1 failed"; exit 1; }

if [ "$what" = native ]; then
    rc=0
    for c in $checks; do
        JAX_PLATFORMS=cuda,cpu "$venv/bin/python3" "$c" || rc=1
    done
    exit $rc
fi

img=build/vm/initrd-$suite.img
[ -f "$img" ] || { echo "torch-run: no $img (tests/gpu/prepare.sh)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d /var/tmp/vcu-torch.XXXXXX)
trap 'rm -rf "$work"' EXIT
st=$work/root
t0=$(date +%s)
. tests/gpu/hostroot.sh
hostroot_stage "$st" || exit 1
# JAX compiles its kernels' PTX with the toolkit's ptxas and nvlink and
# links them with its libdevice (as natively, where it finds them under
# /usr/local/cuda; a guest user's jax[cuda13] brings them in wheels):
# those of the toolkit, no more.
if [ "$suite" = frameworks ]; then
    mkdir -p "$st/usr/local/cuda/bin" "$st/usr/local/cuda/nvvm"
    cp -rL /usr/local/cuda/nvvm/libdevice "$st/usr/local/cuda/nvvm/" ||
        echo "torch-run: no /usr/local/cuda/nvvm/libdevice (JAX will not compile)"
    for t in ptxas nvlink; do
        f=$(readlink -f "/usr/local/cuda/bin/$t") && [ -f "$f" ] &&
            cp -l "$f" "$st/usr/local/cuda/bin/$t" 2>/dev/null || cp "$f" "$st/usr/local/cuda/bin/$t" ||
            echo "torch-run: no /usr/local/cuda/bin/$t (JAX will not compile)"
    done
fi
hostroot_link "$venv" "$st"
for p in $drop pyarrow onnxruntime cv2 opencv_python_headless.libs \
    llvmlite transformers pandas cmake; do
    rm -rf "$st$venv"/lib/python3*/site-packages/"$p"
done
disk=$work/$suite.ext4
hostroot_disk "$st" "$disk" torch-run || exit 1
echo "torch-run: disk made in $(($(date +%s) - t0)) s"
VCU_NO_BUILD=1 VCU_VM_DISK=$disk VCU_VM_MEM=${VCU_VM_MEM:-12288} \
    VCU_VM_TIMEOUT=${VCU_VM_TIMEOUT:-480} tests/gpu/run.sh "$suite" \
    ${VCU_TORCH_GPUS:+"gpus=$VCU_TORCH_GPUS"}
