#!/usr/bin/env bash
# The dkms suite: the guest module's DKMS packaging builds and installs
# against the guest kernel's headers (bookworm cloud 6.1, from
# tests/vm/guest-kernel.sh) and the newest 6.12 cloud headers (backports,
# from tests/vm/headers-612.sh).  The source tree is the one
# `make install-guest` stages under /usr/src/virtio-cuda-<version>.  DKMS
# runs on trees of its own under build/ (--dkmstree, --sourcetree,
# --installtree): the host's /var/lib/dkms and /lib/modules are left alone.
# Last line: N passed, N failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$root/build/pkg-dkms
pkg=virtio-cuda
passed=0
failed=0

ok() { echo "PASS $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
check() { # name, command...
    local name=$1
    shift
    if "$@" >"$work/last.log" 2>&1; then ok "$name"; else bad "$name"; tail -n 20 "$work/last.log"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" = 0 ]; exit; }

rm -rf "$work"
mkdir -p "$work/dkms" "$work/lib"
command -v dkms >/dev/null || { bad "dkms is installed (scripts/deps.sh)"; finish; }

version=$(sed -n 's/^PACKAGE_VERSION="\([^"]*\)"$/\1/p' guest-driver/dkms.conf)
[ -n "$version" ] && ok "dkms.conf has a PACKAGE_VERSION ($version)" || { bad "dkms.conf has a PACKAGE_VERSION"; finish; }
# dkms.conf names what Kbuild builds.
obj=$(sed -n 's/^obj-m += \(.*\)\.o$/\1/p' Kbuild)
[ "$obj" = "$(sed -n 's/^BUILT_MODULE_NAME\[0\]="\(.*\)"$/\1/p' guest-driver/dkms.conf)" ] &&
    ok "BUILT_MODULE_NAME is Kbuild's module ($obj)" || bad "BUILT_MODULE_NAME is Kbuild's module ($obj)"

check "install-guest stages the module sources" \
    env DESTDIR="$work/stage" GUEST_LIB="$root/build/guest-lib/libcudart.so.13" scripts/install-guest.sh
srctree=$work/stage/usr/src
[ -f "$srctree/$pkg-$version/dkms.conf" ] || { bad "dkms.conf at the top of $srctree/$pkg-$version"; finish; }

D=(--dkmstree "$work/dkms" --sourcetree "$srctree" --installtree "$work/lib")
check "dkms add" dkms add -m "$pkg" -v "$version" "${D[@]}"
dkms status -m "$pkg" -v "$version" "${D[@]}" 2>/dev/null | grep "^$pkg/$version: added" >/dev/null &&
    ok "dkms status: added" || bad "dkms status: added"

# The kernels: the guest's 6.1 and the newest 6.12.
kernels=()
if env61=$(tests/vm/guest-kernel.sh 2>"$work/guest-kernel.log"); then
    eval "$env61"
    kernels+=("$VCU_GUEST_KVER=$VCU_GUEST_KDIR")
else
    tail -n 20 "$work/guest-kernel.log"
    bad "6.1 guest kernel headers (tests/vm/guest-kernel.sh)"
fi
if env612=$(tests/vm/headers-612.sh 2>"$work/headers-612.log"); then
    eval "$env612"
    kernels+=("$VCU_K612_KVER=$VCU_K612_KDIR")
else
    tail -n 20 "$work/headers-612.log"
    bad "6.12 kernel headers (tests/vm/headers-612.sh)"
fi

for k in "${kernels[@]}"; do
    kver=${k%%=*}
    kdir=${k#*=}
    check "dkms build for $kver" dkms build -m "$pkg" -v "$version" -k "$kver" \
        --kernelsourcedir "$kdir" "${D[@]}"
    ko=$work/dkms/$pkg/$version/$kver/$(uname -m)/module/virtio_cuda.ko
    if [ -f "$ko" ]; then
        vm=$(modinfo -F vermagic "$ko")
        [ "${vm%% *}" = "$kver" ] && ok "$kver: module built for that kernel (vermagic $vm)" ||
            bad "$kver: vermagic '$vm'"
        modinfo -F alias "$ko" | grep '^virtio:d' >/dev/null && ok "$kver: module has its virtio alias" ||
            bad "$kver: no virtio alias in $ko"
    else
        bad "$kver: no module at $ko"
    fi
    # dkms install wants the kernel's directory in the install tree.
    mkdir -p "$work/lib/$kver"
    check "dkms install for $kver" dkms install -m "$pkg" -v "$version" -k "$kver" \
        --kernelsourcedir "$kdir" --no-depmod "${D[@]}"
    [ -f "$work/lib/$kver/updates/dkms/virtio_cuda.ko" ] &&
        ok "$kver: installed under updates/dkms" || bad "$kver: not installed under updates/dkms"
    dkms status -m "$pkg" -v "$version" -k "$kver" "${D[@]}" 2>/dev/null | grep ": installed" >/dev/null &&
        ok "$kver: dkms status installed" || bad "$kver: dkms status installed"
done
[ "${#kernels[@]}" = 2 ] || bad "both kernels tried (${#kernels[@]} of 2)"

check "dkms remove --all" dkms remove -m "$pkg" -v "$version" --all --no-depmod "${D[@]}"
[ -z "$(find "$work/lib" -name 'virtio_cuda.ko*')" ] && [ ! -e "$work/dkms/$pkg/$version" ] &&
    ok "remove leaves no module behind" || bad "remove leaves no module behind"
finish
