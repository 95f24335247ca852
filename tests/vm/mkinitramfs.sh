#!/bin/sh
# Build the guest initramfs for the VM suites.
#
#   tests/vm/mkinitramfs.sh OUT.img SUITE...  (SUITE: echo badinput hostmem cuda nvrt nvml demo bench ...)
#
# Contents: busybox-static, /init (below), the virtio modules of the guest
# kernel and virtio_cuda.ko, the guest test programs with the glibc
# libraries they link (copied from this Debian 12 host: the same glibc as
# the bookworm guest), and for the cuda, demo and bench suites their CUDA
# programs and our libcudart.so.13.  Compressed with zstd when the guest
# kernel unpacks it, else gzip -9.
#
# Inputs (environment; defaults in brackets):
#   VCU_GUEST_*      from tests/vm/guest-kernel.sh [run it]
#   VCU_MODULE       virtio_cuda.ko [build/guest-driver/$VCU_GUEST_KVER/virtio_cuda.ko]
#   VCU_VM_BIN       echo_test, badinput_test [build/vm]
#   VCU_CUDA_TESTS   CUDA test programs [build/cuda-tests]
#   VCU_DRIVER_TESTS Driver API test programs [build/cuda-driver]
#   VCU_CUDART       libcudart.so.13 [build/guest-lib/libcudart.so.13]
#   VCU_GUEST_LIBCUDA our libcuda.so.1 [build/guest-lib/libcuda.so.1]
#   VCU_NVML_TESTS   NVML test programs [build/nvml-tests]
#   VCU_NVRT_TESTS   NVIDIA's runtime test programs [build/nvrt-tests]
#   VCU_NVIDIA_CUDART NVIDIA's libcudart.so.13 [/usr/local/cuda/lib64/libcudart.so.13,
#                    else build/nvidia/libcudart.so.13]
#   VCU_BENCH_BIN    cudabench [build/bench/cudabench]
#   VCU_DEMO_BIN     the main job's demo [build/vm/vcu_demo]
set -eu

[ $# -ge 2 ] || { echo "usage: $0 OUT.img SUITE..." >&2; exit 2; }
out=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
die() { echo "mkinitramfs: $*" >&2; exit 1; }

if [ -z "${VCU_GUEST_KVER:-}" ]; then
    eval "$("$here/guest-kernel.sh")"
fi
module=${VCU_MODULE:-$root/build/guest-driver/$VCU_GUEST_KVER/virtio_cuda.ko}
vmbin=${VCU_VM_BIN:-$root/build/vm}
cudatests=${VCU_CUDA_TESTS:-$root/build/cuda-tests}
drvtests=${VCU_DRIVER_TESTS:-$root/build/cuda-driver}
cudart=${VCU_CUDART:-$root/build/guest-lib/libcudart.so.13}
glibcuda=${VCU_GUEST_LIBCUDA:-$root/build/guest-lib/libcuda.so.1}
nvrttests=${VCU_NVRT_TESTS:-$root/build/nvrt-tests}
nvmltests=${VCU_NVML_TESTS:-$root/build/nvml-tests}
libstests=${VCU_LIBS_TESTS:-$root/build/libs-tests}
nvcudart=${VCU_NVIDIA_CUDART:-/usr/local/cuda/lib64/libcudart.so.13}
[ -f "$nvcudart" ] || nvcudart=$root/build/nvidia/libcudart.so.13
benchbin=${VCU_BENCH_BIN:-$root/build/bench/cudabench}
demobin=${VCU_DEMO_BIN:-$root/build/vm/vcu_demo}
[ -f "$module" ] || die "no module $module"

work=$(mktemp -d "${TMPDIR:-/tmp}/vcu-initramfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
r=$work/root
mkdir -p "$r/bin" "$r/sbin" "$r/proc" "$r/sys" "$r/dev" "$r/tmp" "$r/modules" "$r/tests" \
    "$r/lib64" "$r/lib/x86_64-linux-gnu" "$r/usr/lib/x86_64-linux-gnu"

bb=$(command -v busybox || true)
[ -n "$bb" ] && file -L "$bb" 2>/dev/null | grep -q 'statically linked' ||
    bb=/bin/busybox
file -L "$bb" | grep -q 'statically linked' || die "need busybox-static"
cp "$bb" "$r/bin/busybox"
for a in $("$bb" --list); do
    [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"
done

for m in $VCU_GUEST_MODULES_CORE; do
    cp "$VCU_GUEST_MODDIR/$m" "$r/modules/"
done
echo "$VCU_GUEST_MODULES_CORE" >"$r/modules/order"
cp "$module" "$r/modules/virtio_cuda.ko"

# Copies a dynamically linked program's libraries (ldd) into the image at
# the same paths, the loader included.
copy_libs() {
    ldd "$1" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' |
        while read -r lib; do
            # Already in the image (a library found there first).
            case $lib in "$r"/*) continue ;; esac
            [ -e "$r$lib" ] && continue
            mkdir -p "$r$(dirname "$lib")"
            cp -L "$lib" "$r$lib"
        done
}

# Our runtime, and CUDA programs (unchanged nvcc binaries) next to it.
add_cudart() {
    [ -f "$cudart" ] || die "no $cudart"
    mkdir -p "$r/cuda/lib"
    [ -f "$r/cuda/lib/libcudart.so.13" ] && return 0
    cp "$cudart" "$r/cuda/lib/libcudart.so.13"
    copy_libs "$cudart"
}

add_cuda_prog() {
    [ -x "$1" ] || die "no CUDA program $1"
    cp "$1" "$r/cuda/"
    LD_LIBRARY_PATH=$r/cuda/lib copy_libs "$1"
}

# The system's libzstd.so.1, which our libcuda.so.1 opens to read
# zstd-compressed fatbin entries (include/vcu_kernels.h).
add_libzstd() {
    for lib in /lib/x86_64-linux-gnu/libzstd.so.1 /usr/lib/x86_64-linux-gnu/libzstd.so.1; do
        if [ -e "$lib" ] && [ ! -e "$r$lib" ]; then
            mkdir -p "$r$(dirname "$lib")"
            cp -L "$lib" "$r$lib"
            return 0
        fi
    done
}

# The virtio-blk driver, from the guest kernel's package (the torch and
# libs suites' disks).
add_virtio_blk() {
    kdeb=
    for f in "$(dirname "$VCU_GUEST_MODDIR")"/linux-image-*.deb; do [ -f "$f" ] && kdeb=$f; done
    [ -n "$kdeb" ] || die "no guest kernel package beside $VCU_GUEST_MODDIR"
    dpkg-deb --fsys-tarfile "$kdeb" |
        tar -xO --wildcards '*/kernel/drivers/block/virtio_blk.ko' >"$r/modules/virtio_blk.ko" ||
        die "no virtio_blk.ko in $kdeb"
    [ -s "$r/modules/virtio_blk.ko" ] || die "no virtio_blk.ko in $kdeb"
}

for s in "$@"; do
    case $s in
    echo | badinput | hostmem | quota)
        prog=${s}_test
        [ -x "$vmbin/$prog" ] || die "no $vmbin/$prog"
        cp "$vmbin/$prog" "$r/tests/"
        copy_libs "$vmbin/$prog"
        ;;
    cuda)
        add_cudart
        [ -f "$cudatests/tests.list" ] && [ -f "$cudatests/run.sh" ] ||
            die "no tests.list/run.sh in $cudatests"
        cp "$cudatests/tests.list" "$cudatests/run.sh" "$r/cuda/"
        n=0
        for t in $(grep -v '^[[:space:]]*\(#\|$\)' "$cudatests/tests.list"); do
            add_cuda_prog "$cudatests/$t"
            n=$((n + 1))
        done
        [ "$n" -gt 0 ] || die "no CUDA test programs in $cudatests"
        # The Driver API programs, on our libcuda.so.1, their kernels
        # beside them.
        [ -f "$glibcuda" ] || die "no $glibcuda"
        [ -f "$drvtests/tests.list" ] && [ -f "$drvtests/run.sh" ] ||
            die "no tests.list/run.sh in $drvtests"
        cp "$glibcuda" "$r/cuda/lib/libcuda.so.1"
        mkdir -p "$r/cuda-driver"
        cp "$drvtests/tests.list" "$drvtests/run.sh" "$drvtests/vcu_drv_kernels.fatbin" \
            "$drvtests/vcu_drv_kernels.cubin" "$drvtests/vcu_drv_kernels_multi.fatbin" \
            "$drvtests/vcu_drv_kernels_sm80.fatbin" "$drvtests/vcu_drv_kernels_ptx_lz4.fatbin" \
            "$drvtests/vcu_drv_kernels_ptx_zstd.fatbin" "$drvtests/vcu_drv_kernels.ptx" \
            "$r/cuda-driver/"
        # Our libcuda.so.1 reads zstd-compressed fatbins with it.
        add_libzstd
        for t in $(grep -v '^[[:space:]]*\(#\|$\)' "$drvtests/tests.list"); do
            [ -x "$drvtests/$t" ] || die "no Driver API program $drvtests/$t"
            cp "$drvtests/$t" "$r/cuda-driver/"
            LD_LIBRARY_PATH=$r/cuda/lib copy_libs "$drvtests/$t"
        done
        ;;
    nvrt)
        # NVIDIA's runtime on our libcuda.so.1: the shared-runtime builds
        # of tests/cuda that tests/nvrt/shared.list names, unchanged, and
        # the default (static runtime) builds of tests/nvrt; no
        # libcudart.so.13 of ours in the image.
        [ -f "$glibcuda" ] || die "no $glibcuda"
        [ -f "$nvcudart" ] || die "no NVIDIA libcudart.so.13 at $nvcudart"
        [ -f "$nvrttests/shared.list" ] && [ -x "$nvrttests/static/run.sh" ] ||
            die "no $nvrttests/shared.list or static/run.sh (make nvrt-tests)"
        mkdir -p "$r/nvrt/lib" "$r/nvrt/shared" "$r/nvrt/static"
        cp "$glibcuda" "$r/nvrt/lib/libcuda.so.1"
        cp -L "$nvcudart" "$r/nvrt/lib/libcudart.so.13"
        copy_libs "$nvcudart"
        cp "$cudatests/run.sh" "$r/nvrt/shared/"
        grep -v '^[[:space:]]*\(#\|$\)' "$nvrttests/shared.list" >"$r/nvrt/shared/tests.list"
        for t in $(cat "$r/nvrt/shared/tests.list"); do
            [ -x "$cudatests/$t" ] || die "no CUDA program $cudatests/$t"
            cp "$cudatests/$t" "$r/nvrt/shared/"
            LD_LIBRARY_PATH=$r/nvrt/lib copy_libs "$cudatests/$t"
        done
        cp "$nvrttests/static/run.sh" "$nvrttests/static/tests.list" "$r/nvrt/static/"
        for t in $(grep -v '^[[:space:]]*\(#\|$\)' "$nvrttests/static/tests.list"); do
            [ -x "$nvrttests/static/$t" ] || die "no program $nvrttests/static/$t"
            cp "$nvrttests/static/$t" "$r/nvrt/static/"
            LD_LIBRARY_PATH=$r/nvrt/lib copy_libs "$nvrttests/static/$t"
        done
        ;;
    libs)
        # NVIDIA's libraries on our libcuda.so.1 (GPU suite only): the
        # libraries themselves are the GPU host's, on a disk
        # tests/gpu/libs-run.sh makes there; here the programs, our
        # libcuda.so.1, the call tracer, the virtio-blk driver, and what
        # the programs and NVIDIA's libraries link but NVIDIA's own
        # (glibc, libstdc++, zlib for cuDNN), from here.
        [ -f "$glibcuda" ] || die "no $glibcuda"
        mkdir -p "$r/nvrt/lib" "$r/libs-test/trace"
        cp "$glibcuda" "$r/nvrt/lib/libcuda.so.1"
        cp "$libstests/trace/libcuda.so.1" "$r/libs-test/trace/" ||
            die "no $libstests/trace/libcuda.so.1 (make -C tests/libs)"
        for prog in libs_check libs_more libs_fft libs_dnn first_gemm; do
            [ -x "$libstests/$prog" ] || die "no $libstests/$prog (make -C tests/libs)"
            cp "$libstests/$prog" "$r/libs-test/"
        done
        for f in "$libstests"/libs_check "$libstests"/libs_more "$libstests"/libs_fft \
            "$libstests"/libs_dnn "$libstests"/first_gemm /usr/local/cuda/lib64/libcudnn_graph.so.9; do
            [ -e "$f" ] || continue
            ldd "$f" 2>/dev/null | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
        done | grep -v -e '/libcu' -e '/libnv' | sort -u | while read -r lib; do
            [ -e "$r$lib" ] && continue
            mkdir -p "$r$(dirname "$lib")"
            cp -L "$lib" "$r$lib"
        done
        # cuDNN opens zlib; without the toolkit's cuDNN here, ldd did not see it.
        for lib in /lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libz.so.1; do
            if [ -e "$lib" ] && [ ! -e "$r$lib" ]; then
                mkdir -p "$r$(dirname "$lib")"
                cp -L "$lib" "$r$lib"
            fi
        done
        add_libzstd
        add_virtio_blk
        ;;
    demo)
        add_cudart
        add_cuda_prog "$demobin"
        ;;
    bench)
        add_cudart
        add_cuda_prog "$benchbin"
        # The same binary again on NVIDIA's runtime over our libcuda.so.1
        # (bench rows nvrt:*), where NVIDIA's runtime is at hand.
        if [ -f "$nvcudart" ] && [ -f "$glibcuda" ]; then
            mkdir -p "$r/nvrt/lib"
            cp "$glibcuda" "$r/nvrt/lib/libcuda.so.1"
            cp -L "$nvcudart" "$r/nvrt/lib/libcudart.so.13"
            LD_LIBRARY_PATH=$r/nvrt/lib copy_libs "$benchbin"
        fi
        ;;
    torch)
        # PyTorch runs from a disk of the GPU host's own files
        # (tests/gpu/torch-run.sh); here only what the guest adds to it:
        # our libcuda.so.1 and libnvidia-ml.so.1, the check, and the
        # virtio-blk driver, from the guest kernel's package.
        glnvml=$(dirname "$glibcuda")/libnvidia-ml.so.1
        for f in "$glibcuda" "$glnvml" "$root/tests/torch/torch_check.py"; do
            [ -f "$f" ] || die "no $f"
        done
        mkdir -p "$r/torch/lib"
        cp "$glibcuda" "$glnvml" "$r/torch/lib/"
        cp "$root/tests/torch/torch_check.py" "$r/torch/"
        add_virtio_blk
        ;;
    frameworks)
        # JAX and CuPy from the same kind of disk as torch's.
        glnvml=$(dirname "$glibcuda")/libnvidia-ml.so.1
        for f in "$glibcuda" "$glnvml" "$root/tests/frameworks/jax_check.py" \
            "$root/tests/frameworks/cupy_check.py" "$root/tests/frameworks/steps.py"; do
            [ -f "$f" ] || die "no $f"
        done
        mkdir -p "$r/fw/lib"
        cp "$glibcuda" "$glnvml" "$r/fw/lib/"
        cp "$root/tests/frameworks/jax_check.py" "$root/tests/frameworks/cupy_check.py" \
            "$root/tests/frameworks/steps.py" "$r/fw/"
        add_virtio_blk
        ;;
    samples)
        # NVIDIA's cuda-samples from a disk of the GPU host's own files
        # with the samples built there (tests/gpu/samples.sh guest): here
        # our libcuda.so.1 and libnvidia-ml.so.1, and virtio-blk.
        glnvml=$(dirname "$glibcuda")/libnvidia-ml.so.1
        for f in "$glibcuda" "$glnvml"; do
            [ -f "$f" ] || die "no $f"
        done
        mkdir -p "$r/samples/lib"
        cp "$glibcuda" "$glnvml" "$r/samples/lib/"
        add_virtio_blk
        ;;
    nvml)
        # Our libcuda.so.1 and libnvidia-ml.so.1 (with vcuda-smi from
        # beside it), the NVML test and the program that holds the device.
        glnvml=$(dirname "$glibcuda")/libnvidia-ml.so.1
        for f in "$glibcuda" "$glnvml" "$(dirname "$glnvml")/vcuda-smi" "$nvmltests/nvml_api" \
            "$nvmltests/nvml_hold"; do
            [ -f "$f" ] || die "no $f"
        done
        mkdir -p "$r/nvml/lib"
        cp "$glibcuda" "$glnvml" "$r/nvml/lib/"
        for f in "$(dirname "$glnvml")/vcuda-smi" "$nvmltests/nvml_api" "$nvmltests/nvml_hold"; do
            cp "$f" "$r/nvml/"
            LD_LIBRARY_PATH=$r/nvml/lib copy_libs "$f"
        done
        copy_libs "$glnvml"
        ;;
    leaks)
        add_cudart
        add_cuda_prog "$cudatests/spin"
        ;;
    share)
        add_cudart
        add_cuda_prog "$cudatests/share_loop"
        # The guest's NVML and vcuda-smi: the VM's utilization, asked
        # while the loops run.
        glnvml=$(dirname "$glibcuda")/libnvidia-ml.so.1
        [ -f "$glnvml" ] && [ -f "$(dirname "$glnvml")/vcuda-smi" ] || die "no $glnvml or vcuda-smi"
        mkdir -p "$r/nvml/lib"
        cp "$glibcuda" "$glnvml" "$r/nvml/lib/"
        cp "$(dirname "$glnvml")/vcuda-smi" "$r/nvml/"
        LD_LIBRARY_PATH=$r/nvml/lib copy_libs "$r/nvml/vcuda-smi"
        copy_libs "$glnvml"
        add_cuda_prog "$cudatests/many_work"
        add_cuda_prog "$cudatests/hostile_work"
        add_cuda_prog "$cudatests/packed_check"
        ;;
    migrate)
        add_cudart
        add_cuda_prog "$cudatests/many_work"
        ;;
    *) die "unknown suite $s" ;;
    esac
done
# ldd follows the loader's own symlink; the programs ask for the
# interpreter by its ABI path.
[ -e "$r/lib64/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$r/lib64/"

cp "$here/init.sh" "$r/init"
chmod 755 "$r/init"

mkdir -p "$(dirname "$out")"
case ${VCU_GUEST_INITRD_COMPRESS:-gzip} in
zstd) comp="zstd -q -10 -T0 -c" ;;
*) comp="gzip -9 -c" ;;
esac
(cd "$r" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --quiet -R 0:0) | $comp >"$out.tmp"
mv "$out.tmp" "$out"
echo "mkinitramfs: $out ($(du -h "$out" | cut -f1), suites: $*)" >&2
