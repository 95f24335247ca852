# Sourced by the GPU suites that boot share-suite VMs and judge them from
# the host (tests/gpu/share.sh, many.sh, packed.sh).
#
# vmcase_init TAG FAKE LOGROOT: sets $gpu_env for tests/vm/run.sh (the
# CPU stand-in when FAKE is 1, else the GPU, whose nvidia-smi must be
# there), checks for the share image and empties LOGROOT, the VMs' log
# folder; otherwise prints "TAG: why" and the failed count, and exits.
vmcase_init() {
    local tag=$1 fake=$2
    vmcase_tag=$tag
    vmcase_fake=$fake
    vmcase_root=$3
    if [ "$fake" = 1 ]; then
        gpu_env="VCU_REAL_GPU=0"
    else
        command -v nvidia-smi >/dev/null || { echo "$tag: no nvidia-smi"; echo "0 passed, 1 failed"; exit 1; }
        gpu_env="VCU_REAL_GPU=1"
    fi
    [ -f build/vm/initrd-share.img ] ||
        { echo "$tag: no build/vm/initrd-share.img (tests/gpu/prepare.sh)"; echo "0 passed, 1 failed"; exit 1; }
    rm -rf "$vmcase_root"
    mkdir -p "$vmcase_root"
}

# vmcase_daemon [DAEMON-OPTION...]: the host daemon every VM of the suite
# attaches to (tests/vm/daemon.sh): their compute-share group is the
# daemon's, as on a host where one daemon serves all VMs.  Its log is
# LOGROOT/daemon/daemon.log.  vmcase_end stops it (the suites' EXIT trap).
vmcase_daemon() {
    VCU_ROOT=$PWD
    . tests/vm/daemon.sh
    local extra=
    [ "$vmcase_fake" = 1 ] && extra="--libcuda $PWD/build/fakecuda/libcuda.so.1"
    # shellcheck disable=SC2086
    vcu_daemon_start "$vmcase_root/daemon" --cache-dir off $extra "$@" ||
        { echo "$vmcase_tag: the host daemon did not start"; echo "0 passed, 1 failed"; exit 1; }
    export VCU_DAEMON_SOCK
    vmcase_ctl="$vmcase_root/daemon/control.sock"
}
vmcase_end() { vcu_daemon_stop; }

# vmcase_workers NAME: the host pids of VM NAME's workers (the daemon's
# word, scripts/vcu-ctl).
vmcase_workers() { python3 scripts/vcu-ctl --socket "$vmcase_ctl" workers "$1" 2>/dev/null; }

# vmcase_boot NAME TIMEOUT APPEND [ENV=VALUE...] -- [DEVICE-OPTION...]:
# boots one VM of the share suite in the background ($! is its
# tests/vm/run.sh) with APPEND on the kernel command line, ENV in its
# environment and the options on its virtio-cuda-pci; its console goes
# to LOGROOT/NAME/share.log, run.sh's own output to LOGROOT/NAME.out.
vmcase_boot() {
    local name=$1 timeout=$2 app=$3 envs=()
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    mkdir -p "$vmcase_root/$name"
    env $gpu_env "${envs[@]}" VCU_NO_BUILD=1 VCU_VM_NAME="$name" \
        VCU_VM_LOGDIR="$vmcase_root/$name" VCU_VM_MEM=2048 \
        VCU_VM_TIMEOUT="$timeout" VCU_GUEST_APPEND="$app" \
        tests/vm/run.sh share "$@" >"$vmcase_root/$name.out" 2>&1 &
}
