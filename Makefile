# virtio-cuda: builds and tests everything.  See README.md.
#
#   make            build every part (QEMU with the device, guest module,
#                   guest library, host backend, tests)
#   make test       install build dependencies, build, run every suite that
#                   needs no GPU; last line "N passed, N failed"
#   make run        the main job: what a guest sees of the GPU, a workload
#                   in the guest next to the same one natively, a verdict
#   make fuzz       fuzz every parser a guest or a peer process reaches
#                   (the fuzz targets, FUZZ_TARGETS: all) for FUZZ_SECONDS
#                   (600) in all, FUZZ_JOBS (1) processes each; prints
#                   executions, exec/s, coverage and crashes per target
#                   (docs/fuzzing.md)
#   make gpu-suite  on a GPU host: the CUDA suite in a guest on the real GPU
#   make bench      on a GPU host: the native-vs-guest benchmark (bench/)
#   make install-guest  in a guest (or with DESTDIR=stage): the module
#                   sources under DKMS, the guest library, its loader,
#                   modules-load and udev configuration (scripts/install-guest.sh)

TOP := $(abspath .)
B := $(TOP)/build

.PHONY: all backend fakecuda guest-lib guest-lib-loopback cuda-tests cuda-driver-tests nvrt-tests \
	nvml-tests \
	demo qemu \
	bench-build \
	bench test run fuzz gpu-suite install-guest clean

all: backend fakecuda guest-lib guest-lib-loopback cuda-tests cuda-driver-tests nvrt-tests nvml-tests demo qemu \
	bench-build

backend:
	$(MAKE) -C host-backend O=$(B)/host-backend

fakecuda:
	$(MAKE) -C tests/fakecuda O=$(B)/fakecuda

guest-lib:
	$(MAKE) -C guest-lib O=$(B)/guest-lib

guest-lib-loopback: backend
	$(MAKE) -C guest-lib O=$(B)/guest-lib-loopback LOOPBACK=1 \
		BACKEND=$(B)/host-backend/libvcu_backend.a

cuda-tests:
	$(MAKE) -C tests/cuda O=$(B)/cuda-tests

# Driver API programs and their kernels (run by scripts/driver-loopback.sh).
cuda-driver-tests:
	$(MAKE) -C tests/cuda-driver O=$(B)/cuda-driver

# The NVML test program (run by scripts/nvml-loopback.sh and in a guest).
nvml-tests: guest-lib
	$(MAKE) -C tests/nvml O=$(B)/nvml-tests NVMLLIB=$(B)/guest-lib

# tests/cuda programs built with nvcc's default static runtime, for
# NVIDIA's runtime on our libcuda.so.1 (run by scripts/nvrt-loopback.sh).
nvrt-tests:
	$(MAKE) -C tests/nvrt O=$(B)/nvrt-tests

# Into build/vm, which travels to a GPU host with the guest images.
demo:
	$(MAKE) -C tests/demo O=$(B)/vm

# QEMU with the device, the host daemon beside it (bin/vcu-daemon) and the
# worker the daemon starts for each guest session (libexec/vcu-worker).
qemu: backend
	qemu-device/build-qemu.sh $(B)/qemu
	install -D -m 755 $(B)/host-backend/vcu-daemon $(B)/qemu/bin/vcu-daemon
	install -D -m 755 $(B)/host-backend/vcu-worker $(B)/qemu/libexec/vcu-worker

bench-build: backend
	$(MAKE) -C bench O=$(B)/bench

# On a GPU host, after make all and tests/vm/run.sh bench on the build
# machine: native vs guest figures into bench/results.csv, and the plot
# (build/bench-results/bandwidth.png, not kept in git).
bench:
	bench/run.sh


test:
	scripts/test.sh

# DESTDIR, PREFIX (default /usr/local), SYSCONFDIR, KDIR and DKMS: see
# scripts/install-guest.sh.
PREFIX ?= /usr/local
install-guest: guest-lib
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" SYSCONFDIR="$(SYSCONFDIR)" KDIR="$(KDIR)" \
		DKMS="$(DKMS)" GUEST_LIB="$(B)/guest-lib/libcudart.so.13" scripts/install-guest.sh

run:
	scripts/run.sh

FUZZ_SECONDS ?= 600
FUZZ_JOBS ?= 1
FUZZ_TARGETS ?=
fuzz:
	bash scripts/deps.sh
	FUZZ_JOBS=$(FUZZ_JOBS) FUZZ_TARGETS="$(FUZZ_TARGETS)" tests/fuzz/run.sh campaign $(FUZZ_SECONDS)

gpu-suite:
	tests/gpu/run.sh; rc=$$?; tests/gpu/leaks.sh || rc=1; exit $$rc

clean:
	rm -rf $(B)
