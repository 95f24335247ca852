#!/usr/bin/env bash
# guest-lib's libnvidia-ml.so.1 and vcuda-smi natively against the loopback
# build (the host backend and the CPU stand-in for NVIDIA's libcuda in one
# process, no VM): the library exports every name of NVIDIA's nvml.h and
# nothing else, the process-list join (tests/nvml/nvml_join) holds,
# tests/nvml/nvml_api agrees with our libcuda.so.1, pynvml and PyTorch's
# ctypes calls work (tests/nvml/pynvml_check.py), and
# vcuda-smi prints the table, the list and the details, or fails cleanly
# with no device.  Last line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
b=$PWD/build
lib=$b/guest-lib-loopback/libnvidia-ml.so.1
smi=$b/guest-lib-loopback/vcuda-smi
passed=0
failed=0

ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

if [ ! -e "$lib" ] || [ ! -x "$b/nvml-tests/nvml_api" ] || [ ! -x "$b/nvml-tests/nvml_join" ]; then
    echo "nvml-loopback: build first (make all)"
    echo "0 passed, 1 failed"
    exit 1
fi

# Exports: nvml.h's names (nvml.names) and nvmlErrorString, all of them,
# only them; the hand-written ones strong, not the generated defaults.
exp=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | sort)
want=$( (cat "$b/guest-lib-loopback/nvml.names"; echo nvmlErrorString) | sort)
if [ "$exp" = "$want" ]; then ok; else bad "exports differ from nvml.h: $(diff <(echo "$want") <(echo "$exp") | sed -n 1,5p)"; fi
syms=$(nm -D --defined-only "$lib")
if grep -q ' T nvmlDeviceGetMemoryInfo_v2$' <<<"$syms" &&
    grep -q ' W nvmlDeviceSetPersistenceMode$' <<<"$syms"; then ok; else
    bad "nvmlDeviceGetMemoryInfo_v2 should be ours, nvmlDeviceSetPersistenceMode the default"; fi
if [ "$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')" = libnvidia-ml.so.1 ]; then ok; else
    bad "soname"; fi

export VCU_TRANSPORT=loopback
export VCU_LIBCUDA=$b/fakecuda/libcuda.so.1
export LD_LIBRARY_PATH=$b/guest-lib-loopback

# A test program's own "N passed, N failed", added to ours.
run_prog() {
    local out rc line f
    out=$("$@" 2>&1)
    rc=$?
    echo "$out" | grep -v '^[0-9]* passed, [0-9]* failed$'
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -n "$line" ]; then
        passed=$((passed + ${line%% passed*}))
        f=${line#*passed, }
        failed=$((failed + ${f%% failed*}))
        [ "$rc" = 0 ] || [ "${f%% failed*}" != 0 ] || bad "$1 exited $rc"
    else
        bad "$1 gave no result line (rc $rc)"
    fi
}

# The process-list join (nvml.c compiled in, ASan/UBSan), then the API.
run_prog "$b/nvml-tests/nvml_join"
# The stand-in's host has no NVML: no NVLink is known.
export VCU_TEST_NVLINK=unknown
run_prog "$b/nvml-tests/nvml_api"
# Two GPUs (the stand-in has two): NVML's index is the VM's ordinal,
# whatever order the host gives them and whatever CUDA_VISIBLE_DEVICES
# makes of CUDA's ordinals (PyTorch maps one onto the other).
VCU_GPUS=0:1 run_prog "$b/nvml-tests/nvml_api"
VCU_GPUS=1:0 CUDA_VISIBLE_DEVICES=1,0 run_prog "$b/nvml-tests/nvml_api"
# NVLink from a host NVML (tests/nvml/fakenvml.c, a test double): the
# links among the VM's GPUs and to switches, whatever order the host
# gives them; none to a GPU the VM was not given, nor a CPU.
VCU_HOST_NVML=$b/nvml-tests/fakenvml.so VCU_TEST_NVLINK=fake:0 run_prog "$b/nvml-tests/nvml_api"
VCU_HOST_NVML=$b/nvml-tests/fakenvml.so VCU_TEST_NVLINK=fake:0,1 VCU_GPUS=0:1 \
    run_prog "$b/nvml-tests/nvml_api"
VCU_HOST_NVML=$b/nvml-tests/fakenvml.so VCU_TEST_NVLINK=fake:1,0 VCU_GPUS=1:0 \
    run_prog "$b/nvml-tests/nvml_api"
# The host's NVIDIA driver version reaches nvmlSystemGetDriverVersion;
# a version file with anything but digits and dots is not passed on.
vfile=$(mktemp)
echo 580.159.04 >"$vfile"
VCU_NVIDIA_VERSION_FILE=$vfile VCU_TEST_DRIVER_VERSION=580.159.04 run_prog "$b/nvml-tests/nvml_api"
printf '580.1; echo owned %%n\n' >"$vfile"
ours=$(sed -n 's/^PACKAGE_VERSION="\([^"]*\)"$/\1/p' guest-driver/dkms.conf)
VCU_NVIDIA_VERSION_FILE=$vfile VCU_TEST_DRIVER_VERSION=$ours run_prog "$b/nvml-tests/nvml_api"
rm -f "$vfile"

# Its Python users: pynvml, and PyTorch's ctypes path re-created.
if pyd=$(scripts/nvml-header.sh pynvml); then
    PYTHONPATH=$pyd run_prog python3 tests/nvml/pynvml_check.py
else
    bad "no pynvml (scripts/nvml-header.sh pynvml)"
fi

list=$("$smi" -L 2>&1)
if [ $? = 0 ] && grep -Eq '^GPU 0: .+ \(UUID: GPU-[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}\)$' <<<"$list"; then
    ok; else bad "vcuda-smi -L: $list"; fi
name=$(echo "$list" | sed -n 's/^GPU 0: \(.*\) (UUID: .*/\1/p' | cut -c1-34)
table=$("$smi" 2>&1)
if [ $? = 0 ] && grep -q "CUDA Version: 13.0" <<<"$table" &&
    grep -Fq "|   0  $name" <<<"$table" &&
    grep -Eq '\| +[0-9]+MiB / [0-9]+MiB +N/A \|' <<<"$table" &&
    grep -q 'No running processes found' <<<"$table"; then
    ok; else bad "vcuda-smi table:"; echo "$table"; fi
echo "$table"
q=$("$smi" -q 2>&1)
if grep -Eq '^ +Total +: [0-9]+ MiB$' <<<"$q"; then ok; else bad "vcuda-smi -q"; fi
if ! "$smi" -x >/dev/null 2>&1; then ok; else bad "vcuda-smi -x accepted"; fi
# nvidia-smi's CSV: the same figures as -q and -L.
csv=$("$smi" --query-gpu=memory.total,uuid --format=csv,noheader,nounits 2>&1)
qtotal=$(sed -n 's/^ *Total *: \([0-9]*\) MiB$/\1/p' <<<"$q")
luuid=$(sed -n 's/^GPU 0: .* (UUID: \(.*\))$/\1/p' <<<"$list")
if [ "$csv" = "$qtotal, $luuid" ]; then ok; else bad "csv '$csv', -q total $qtotal, -L $luuid"; fi
csvh=$("$smi" --query-gpu=index,name,memory.used,utilization.gpu --format=csv 2>&1)
if [ "$(sed -n 1p <<<"$csvh")" = "index, name, memory.used [MiB], utilization.gpu [%]" ] &&
    grep -Eq '^0, .+, [0-9]+ MiB, \[N/A\]$' <<<"$csvh"; then ok; else bad "csv with header: $csvh"; fi
"$smi" --query-gpu=bogus --format=csv >/dev/null 2>&1
if [ $? = 2 ]; then ok; else bad "an unknown field accepted"; fi

# No device: NVML says the driver is not loaded, vcuda-smi fails cleanly.
nodev=$(VCU_TRANSPORT= VCU_DEVICE=/nonexistent/vcuda0 "$smi" 2>&1)
rc=$?
if [ "$rc" = 1 ] && grep -q "Driver Not Loaded" <<<"$nodev"; then ok; else
    bad "vcuda-smi without a device: rc $rc: $nodev"; fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
