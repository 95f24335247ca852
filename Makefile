# virtio-cuda: builds and tests everything.  See README.md.
#
#   make            build every part (QEMU with the device, guest module,
#                   guest library, host backend, tests)
#   make test       install build dependencies, build, run every suite that
#                   needs no GPU; last line "N passed, N failed"
#   make run        the main job: boot a guest and run a CUDA program in it
#   make fuzz       fuzz the host backend for FUZZ_SECONDS (600) with
#                   FUZZ_JOBS (1) processes; prints executions, exec/s,
#                   coverage and crashes (docs/fuzzing.md)
#   make gpu-suite  on a GPU host: the CUDA suite in a guest on the real GPU
#   make bench      on a GPU host: the native-vs-guest benchmark (bench/)

TOP := $(abspath .)
B := $(TOP)/build

.PHONY: all backend fakecuda guest-lib guest-lib-loopback cuda-tests qemu bench-build \
	bench test run fuzz gpu-suite clean

all: backend fakecuda guest-lib guest-lib-loopback cuda-tests qemu bench-build

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

qemu:
	qemu-device/build-qemu.sh $(B)/qemu

bench-build: backend
	$(MAKE) -C bench O=$(B)/bench

# On a GPU host, after make all and tests/vm/run.sh bench on the build
# machine: native vs guest figures into bench/results.csv and bandwidth.png.
bench:
	bench/run.sh


test:
	scripts/test.sh

run:
	scripts/run.sh

FUZZ_SECONDS ?= 600
FUZZ_JOBS ?= 1
fuzz:
	bash scripts/deps.sh
	FUZZ_JOBS=$(FUZZ_JOBS) tests/fuzz/run.sh campaign $(FUZZ_SECONDS)

gpu-suite:
	tests/gpu/run.sh

clean:
	rm -rf $(B)
