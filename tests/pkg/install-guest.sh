#!/usr/bin/env bash
# The install-guest suite: `make install-guest` into a DESTDIR installs
# exactly the files it should, with the right contents and modes; the
# loader finds the guest library through the installed configuration (a
# cache built by ldconfig inside the staged root); the udev rule is well
# formed and matches the driver's nodes; KDIR installs a module built for
# that kernel; bad settings are refused.  Last line: N passed, N failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
work=$root/build/pkg-install
lib=$root/build/guest-lib/libcudart.so.13
passed=0
failed=0

ok() { echo "PASS $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
expect() { # name, command...: passes when the command succeeds
    local name=$1
    shift
    if "$@" >"$work/last.log" 2>&1; then ok "$name"; else bad "$name"; tail -n 20 "$work/last.log"; fi
}
refuse() { # name, command...: passes when the command fails
    local name=$1
    shift
    if "$@" >"$work/last.log" 2>&1; then bad "$name (it succeeded)"; else ok "$name"; fi
}

rm -rf "$work"
mkdir -p "$work"
version=$(sed -n 's/^PACKAGE_VERSION="\([^"]*\)"$/\1/p' guest-driver/dkms.conf)
src=usr/src/virtio-cuda-$version

# --- default PREFIX, through make -------------------------------------------
d=$work/root
expect "make install-guest DESTDIR=..." make -s install-guest DESTDIR="$d"

(cd "$d" && find . \( -type f -o -type l \) | sed 's|^\./||' | LC_ALL=C sort) >"$work/got"
{
    echo etc/ld.so.conf.d/virtio-cuda.conf
    echo etc/modules-load.d/virtio-cuda.conf
    echo etc/udev/rules.d/70-virtio-cuda.rules
    echo usr/local/lib/virtio-cuda/libcudart.so.13
    echo usr/local/lib/virtio-cuda/libcuda.so.1
    echo usr/local/lib/virtio-cuda/libnvidia-ml.so.1
    echo usr/local/bin/vcuda-smi
    echo "$src/Kbuild"
    echo "$src/dkms.conf"
    for f in guest-driver/*.c guest-driver/*.h guest-driver/uapi/*.h include/*.h; do echo "$src/$f"; done
} | LC_ALL=C sort >"$work/want"
if diff -u "$work/want" "$work/got" >"$work/list.diff"; then
    ok "file list ($(wc -l <"$work/want") files)"
else
    bad "file list"
    cat "$work/list.diff"
fi

same=1
for f in Kbuild guest-driver/*.c guest-driver/*.h guest-driver/uapi/*.h include/*.h; do
    cmp -s "$f" "$d/$src/$f" || { echo "differs: $f"; same=0; }
done
cmp -s guest-driver/dkms.conf "$d/$src/dkms.conf" || { echo "differs: dkms.conf"; same=0; }
[ $same = 1 ] && ok "module sources are the repository's" || bad "module sources are the repository's"
cmp -s "$lib" "$d/usr/local/lib/virtio-cuda/libcudart.so.13" &&
    ok "guest library is build/guest-lib's" || bad "guest library is build/guest-lib's"
cmp -s "$root/build/guest-lib/libcuda.so.1" "$d/usr/local/lib/virtio-cuda/libcuda.so.1" &&
    ok "guest libcuda.so.1 is build/guest-lib's" || bad "guest libcuda.so.1 is build/guest-lib's"
cmp -s "$root/build/guest-lib/libnvidia-ml.so.1" "$d/usr/local/lib/virtio-cuda/libnvidia-ml.so.1" &&
    cmp -s "$root/build/guest-lib/vcuda-smi" "$d/usr/local/bin/vcuda-smi" &&
    ok "guest libnvidia-ml.so.1 and vcuda-smi are build/guest-lib's" ||
    bad "guest libnvidia-ml.so.1 and vcuda-smi are build/guest-lib's"

mode() { stat -c %a "$1"; }
modes_ok=1
for f in etc/ld.so.conf.d/virtio-cuda.conf etc/modules-load.d/virtio-cuda.conf \
    etc/udev/rules.d/70-virtio-cuda.rules "$src/dkms.conf" "$src/guest-driver/virtio_cuda.c"; do
    [ "$(mode "$d/$f")" = 644 ] || { echo "mode $(mode "$d/$f"): $f"; modes_ok=0; }
done
for f in lib/virtio-cuda/libcudart.so.13 lib/virtio-cuda/libcuda.so.1 \
    lib/virtio-cuda/libnvidia-ml.so.1 bin/vcuda-smi; do
    [ "$(mode "$d/usr/local/$f")" = 755 ] || { echo "library mode: $f"; modes_ok=0; }
done
[ $modes_ok = 1 ] && ok "modes (0644 data, 0755 library)" || bad "modes"

[ "$(grep -v '^#' "$d/etc/ld.so.conf.d/virtio-cuda.conf")" = /usr/local/lib/virtio-cuda ] &&
    ok "ld.so.conf.d names /usr/local/lib/virtio-cuda" || bad "ld.so.conf.d content"
[ "$(grep -v '^#' "$d/etc/modules-load.d/virtio-cuda.conf")" = virtio_cuda ] &&
    ok "modules-load.d loads virtio_cuda" || bad "modules-load.d content"

# The loader's view: ldconfig inside the staged root, with only our file.
if ldconfig -r "$d" -X -f /etc/ld.so.conf.d/virtio-cuda.conf -C /etc/ld.so.cache >"$work/ldconfig.log" 2>&1 &&
    ldconfig -p -C "$d/etc/ld.so.cache" | grep 'libcudart.so.13 (libc6,x86-64) => /usr/local/lib/virtio-cuda/libcudart.so.13$' >/dev/null; then
    ok "ldconfig finds libcudart.so.13 through the installed configuration"
else
    bad "ldconfig finds libcudart.so.13 through the installed configuration"
    cat "$work/ldconfig.log"
fi
if ldconfig -p -C "$d/etc/ld.so.cache" | grep 'libcuda.so.1 (libc6,x86-64) => /usr/local/lib/virtio-cuda/libcuda.so.1$' >/dev/null; then
    ok "ldconfig finds libcuda.so.1 through the installed configuration"
else
    bad "ldconfig finds libcuda.so.1 through the installed configuration"
fi
if ldconfig -p -C "$d/etc/ld.so.cache" | grep 'libnvidia-ml.so.1 (libc6,x86-64) => /usr/local/lib/virtio-cuda/libnvidia-ml.so.1$' >/dev/null; then
    ok "ldconfig finds libnvidia-ml.so.1 through the installed configuration"
else
    bad "ldconfig finds libnvidia-ml.so.1 through the installed configuration"
fi
rm -f "$d/etc/ld.so.cache"

rules=$d/etc/udev/rules.d/70-virtio-cuda.rules
expect "udev rule: syntax, driver's class and nodes, root-only 0600" \
    python3 tests/pkg/check-udev-rule.py "$rules" guest-driver/virtio_cuda.c 0600
# The group form its comment documents is a valid rule too.
sed -n 's/^#   \(SUBSYSTEM==.*GROUP="vcuda".*\)$/\1/p' "$rules" >"$work/group.rules"
if [ -s "$work/group.rules" ] && grep -q 'MODE="0660"' "$work/group.rules"; then
    expect "udev rule: the documented group form" \
        python3 tests/pkg/check-udev-rule.py "$work/group.rules" guest-driver/virtio_cuda.c 0660
else
    bad "udev rule: the comment documents a group form (GROUP=\"vcuda\", MODE=\"0660\")"
fi

# --- PREFIX and SYSCONFDIR ---------------------------------------------------
d2=$work/root2
expect "install-guest PREFIX=/opt/vcu SYSCONFDIR=/etc/vcu" \
    make -s install-guest DESTDIR="$d2" PREFIX=/opt/vcu SYSCONFDIR=/etc/vcu
[ -f "$d2/opt/vcu/lib/virtio-cuda/libcudart.so.13" ] &&
    [ "$(grep -v '^#' "$d2/etc/vcu/ld.so.conf.d/virtio-cuda.conf")" = /opt/vcu/lib/virtio-cuda ] &&
    [ ! -e "$d2/usr/local" ] && [ ! -e "$d2/etc/ld.so.conf.d" ] &&
    ok "PREFIX and SYSCONFDIR are honoured" || bad "PREFIX and SYSCONFDIR are honoured"

# --- KDIR: a prebuilt module instead of DKMS ---------------------------------
if env61=$(tests/vm/guest-kernel.sh 2>"$work/guest-kernel.log"); then
    eval "$env61"
    d3=$work/root3
    expect "install-guest KDIR=<$VCU_GUEST_KVER headers>" \
        make -s install-guest DESTDIR="$d3" KDIR="$VCU_GUEST_KDIR"
    ko=$d3/lib/modules/$VCU_GUEST_KVER/updates/virtio_cuda.ko
    vm=$(modinfo -F vermagic "$ko" 2>/dev/null)
    [ "${vm%% *}" = "$VCU_GUEST_KVER" ] && ok "KDIR: module for $VCU_GUEST_KVER in updates/" ||
        bad "KDIR: module for $VCU_GUEST_KVER in updates/ (vermagic '$vm')"
else
    tail -n 20 "$work/guest-kernel.log"
    bad "6.1 guest kernel headers (tests/vm/guest-kernel.sh)"
fi

# --- into / with DKMS, in a private mount namespace ---------------------------
# Overlays over /etc, /usr (with /lib/modules) and /var/lib/dkms catch every
# write; what lands in their upper layers is what an install into / writes.
# The host kernel has no headers here, so DKMS registers the module and the
# build waits for them.
ns=$work/ns
mkdir -p "$ns"
cat >"$ns/inside.sh" <<EOF
set -e
for t in etc usr var/lib/dkms; do
    mkdir -p "$ns/upper/\$t" "$ns/work/\$t"
    mount -t overlay overlay -o lowerdir=/\$t,upperdir=$ns/upper/\$t,workdir=$ns/work/\$t /\$t
done
GUEST_LIB="$lib" scripts/install-guest.sh >"$ns/first.log" 2>&1
# A second install of the same version replaces the first.
GUEST_LIB="$lib" scripts/install-guest.sh >"$ns/second.log" 2>&1
dkms status -m virtio-cuda -v "$version" >"$ns/status"
ldconfig -p >"$ns/ldconfig"
EOF
if [ -d /var/lib/dkms ] && unshare --mount --propagation private true 2>/dev/null; then
    expect "install-guest into / (twice)" unshare --mount --propagation private bash "$ns/inside.sh"
    grep -q "^virtio-cuda/$version: added" "$ns/status" 2>/dev/null &&
        ok "the module is registered with DKMS" ||
        bad "the module is registered with DKMS: $(cat "$ns/status" 2>/dev/null)"
    grep -q "no headers for the running kernel" "$ns/second.log" 2>/dev/null &&
        ok "without headers for the running kernel it says how DKMS goes on" ||
        bad "without headers for the running kernel it says how DKMS goes on"
    grep -q "libcudart.so.13 (libc6,x86-64) => /usr/local/lib/virtio-cuda/libcudart.so.13$" \
        "$ns/ldconfig" 2>/dev/null &&
        ok "ldconfig ran: the loader cache has the guest library" ||
        bad "ldconfig ran: the loader cache has the guest library"
    (cd "$ns/upper" && find . -type f | sed 's|^\./||' |
        grep -v -e "^usr/src/virtio-cuda-$version/" -e "^var/lib/dkms/virtio-cuda/" | LC_ALL=C sort) \
        >"$ns/written"
    printf '%s\n' etc/ld.so.cache etc/ld.so.conf.d/virtio-cuda.conf etc/modules-load.d/virtio-cuda.conf \
        etc/udev/rules.d/70-virtio-cuda.rules usr/local/lib/virtio-cuda/libcudart.so.13 \
        usr/local/lib/virtio-cuda/libcuda.so.1 usr/local/lib/virtio-cuda/libnvidia-ml.so.1 \
        usr/local/bin/vcuda-smi |
        LC_ALL=C sort >"$ns/want"
    if diff -u "$ns/want" "$ns/written" >"$ns/diff" &&
        [ -f "$ns/upper/usr/src/virtio-cuda-$version/dkms.conf" ]; then
        ok "an install into / writes only its own files"
    else
        bad "an install into / writes only its own files"
        cat "$ns/diff"
    fi
    [ ! -e "/usr/src/virtio-cuda-$version" ] && ok "the host itself was left alone" ||
        bad "the host itself was left alone"
else
    bad "unshare --mount and dkms (/var/lib/dkms) for the install-into-/ case"
fi

# --- refused settings ----------------------------------------------------------
refuse "relative PREFIX is refused" env DESTDIR="$work/r1" PREFIX=usr GUEST_LIB="$lib" scripts/install-guest.sh
refuse "missing library is refused" env DESTDIR="$work/r2" GUEST_LIB="$work/nope.so" scripts/install-guest.sh
refuse "DKMS=maybe is refused" env DESTDIR="$work/r3" DKMS=maybe GUEST_LIB="$lib" scripts/install-guest.sh
refuse "KDIR without a kernel tree is refused" env DESTDIR="$work/r4" KDIR="$work" GUEST_LIB="$lib" \
    scripts/install-guest.sh

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
