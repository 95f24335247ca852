#!/bin/sh
# make install-guest: put the guest side of virtio-cuda in place, in a guest
# (as root) or under DESTDIR for a package or an image.
#
#   /usr/src/virtio-cuda-<version>/    module sources and dkms.conf; with no
#                                      DESTDIR and dkms installed, registered
#                                      with DKMS and built for the running
#                                      kernel (DKMS rebuilds it for new ones)
#   $PREFIX/lib/virtio-cuda/           libcudart.so.13, libcuda.so.1 and
#                                      libnvidia-ml.so.1 (guest-lib)
#   $PREFIX/bin/vcuda-smi              nvidia-smi's table from that NVML
#   /etc/ld.so.conf.d/virtio-cuda.conf puts that directory on the loader path
#   /etc/modules-load.d/virtio-cuda.conf   loads virtio_cuda at boot
#   /etc/udev/rules.d/70-virtio-cuda.rules /dev/vcudaN root-only (0600),
#                                      and /dev/nvidiaN linked to it (JAX)
#   /lib/modules/<kver>/updates/virtio_cuda.ko   only with KDIR: a module
#                                      built now against that kernel tree
#
# Environment (make passes its variables of the same names):
#   DESTDIR     staging root (default: none, install into /)
#   PREFIX      default /usr/local
#   SYSCONFDIR  default /etc
#   GUEST_LIB   the runtime to install (default build/guest-lib/libcudart.so.13)
#   GUEST_LIBCUDA  the Driver API library (default build/guest-lib/libcuda.so.1)
#   GUEST_LIBNVML  NVML (default build/guest-lib/libnvidia-ml.so.1; vcuda-smi
#               is taken from beside it)
#   KDIR        kernel tree: build and install a module for it, no DKMS
#   DKMS        auto (default): register with DKMS when dkms is installed and
#               DESTDIR is empty; no: never
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
SYSCONFDIR=${SYSCONFDIR:-/etc}
GUEST_LIB=${GUEST_LIB:-$root/build/guest-lib/libcudart.so.13}
GUEST_LIBCUDA=${GUEST_LIBCUDA:-$root/build/guest-lib/libcuda.so.1}
GUEST_LIBNVML=${GUEST_LIBNVML:-$root/build/guest-lib/libnvidia-ml.so.1}
GUEST_SMI=$(dirname "$GUEST_LIBNVML")/vcuda-smi
KDIR=${KDIR:-}
DKMS=${DKMS:-auto}

msg() { echo "install-guest: $*"; }
die() { echo "install-guest: error: $*" >&2; exit 1; }

case $PREFIX in /*) ;; *) die "PREFIX must be absolute, not $PREFIX" ;; esac
case $SYSCONFDIR in /*) ;; *) die "SYSCONFDIR must be absolute, not $SYSCONFDIR" ;; esac
case $DKMS in auto | no) ;; *) die "DKMS must be auto or no, not $DKMS" ;; esac
[ -f "$GUEST_LIB" ] || die "no guest library at $GUEST_LIB (make guest-lib)"
[ -f "$GUEST_LIBCUDA" ] || die "no guest library at $GUEST_LIBCUDA (make guest-lib)"
[ -f "$GUEST_LIBNVML" ] || die "no guest library at $GUEST_LIBNVML (make guest-lib)"
[ -f "$GUEST_SMI" ] || die "no vcuda-smi at $GUEST_SMI (make guest-lib)"

pkg=virtio-cuda
version=$(sed -n 's/^PACKAGE_VERSION="\([^"]*\)"$/\1/p' "$root/guest-driver/dkms.conf")
[ -n "$version" ] || die "no PACKAGE_VERSION in guest-driver/dkms.conf"
libdir=$PREFIX/lib/virtio-cuda

# Module sources: the same set guest-driver/build.sh builds from, laid out
# as Kbuild expects, with dkms.conf at the top.
src=$DESTDIR/usr/src/$pkg-$version
rm -rf "$src"
install -d -m 0755 "$src/include" "$src/guest-driver/uapi"
install -m 0644 "$root/guest-driver/dkms.conf" "$root/Kbuild" "$src/"
install -m 0644 "$root"/include/*.h "$src/include/"
install -m 0644 "$root"/guest-driver/*.c "$root"/guest-driver/*.h "$src/guest-driver/"
install -m 0644 "$root"/guest-driver/uapi/*.h "$src/guest-driver/uapi/"
msg "module sources in $src"

install -d -m 0755 "$DESTDIR$libdir"
install -m 0755 "$GUEST_LIB" "$DESTDIR$libdir/"
install -m 0755 "$GUEST_LIBCUDA" "$DESTDIR$libdir/"
install -m 0755 "$GUEST_LIBNVML" "$DESTDIR$libdir/"
msg "guest libraries in $DESTDIR$libdir"
install -d -m 0755 "$DESTDIR$PREFIX/bin"
install -m 0755 "$GUEST_SMI" "$DESTDIR$PREFIX/bin/"
msg "vcuda-smi in $DESTDIR$PREFIX/bin"

etc=$DESTDIR$SYSCONFDIR
install -d -m 0755 "$etc/ld.so.conf.d" "$etc/modules-load.d" "$etc/udev/rules.d"
cat >"$etc/ld.so.conf.d/virtio-cuda.conf" <<EOF
# virtio-cuda: the CUDA runtime, Driver API and NVML over /dev/vcudaN
# (libcudart.so.13, libcuda.so.1, libnvidia-ml.so.1)
$libdir
EOF
cat >"$etc/modules-load.d/virtio-cuda.conf" <<EOF
# virtio-cuda guest driver (/dev/vcudaN)
virtio_cuda
EOF
cat >"$etc/udev/rules.d/70-virtio-cuda.rules" <<'EOF'
# virtio-cuda: /dev/vcudaN is root-only by default.  Each process that opens
# it gets a host worker process of its own (its GPU memory, faults and the
# guest RAM it can reach stay its own: docs/design.md, Isolation, says what
# is and is not isolated).  To give a group access, replace the line below
# with, e.g.:
#   SUBSYSTEM=="vcuda", KERNEL=="vcuda[0-9]*", OWNER="root", GROUP="vcuda", MODE="0660", SYMLINK+="nvidia%n"
# (and creating that group: groupadd --system vcuda).
# /dev/nvidiaN links to /dev/vcudaN: JAX takes its CUDA backend only where
# an NVIDIA device node exists (jax/_src/hardware_utils.py) and otherwise
# falls back to the CPU without a word; only NVIDIA's own libcuda.so.1,
# which this guest does not use, would open it.
SUBSYSTEM=="vcuda", KERNEL=="vcuda[0-9]*", OWNER="root", GROUP="root", MODE="0600", SYMLINK+="nvidia%n"
EOF
chmod 0644 "$etc/ld.so.conf.d/virtio-cuda.conf" "$etc/modules-load.d/virtio-cuda.conf" \
    "$etc/udev/rules.d/70-virtio-cuda.rules"
msg "loader, modules-load and udev configuration in $etc"

if [ -n "$KDIR" ]; then
    # The release the module's vermagic will carry (Debian's
    # include/config/kernel.release holds only the upstream version).
    uts=$KDIR/include/generated/utsrelease.h
    kver=$(sed -n 's/^#define UTS_RELEASE "\([^"]*\)"$/\1/p' "$uts" 2>/dev/null)
    [ -n "$kver" ] || die "KDIR=$KDIR: no UTS_RELEASE in include/generated/utsrelease.h"
    out=$root/build/guest-driver/install-$kver
    mkdir -p "$out"
    "$root/guest-driver/build.sh" "$KDIR" "$out" >"$out.log" 2>&1 ||
        { tail -n 30 "$out.log" >&2; die "module build against $KDIR failed (log: $out.log)"; }
    install -d -m 0755 "$DESTDIR/lib/modules/$kver/updates"
    install -m 0644 "$out/virtio_cuda.ko" "$DESTDIR/lib/modules/$kver/updates/"
    msg "module for $kver in $DESTDIR/lib/modules/$kver/updates"
    [ -n "$DESTDIR" ] || depmod -a "$kver"
fi

[ -z "$DESTDIR" ] || {
    msg "staged under $DESTDIR; on the target, as root: ldconfig, then" \
        "dkms add $pkg/$version && dkms install $pkg/$version (or install a module with KDIR)"
    exit 0
}

ldconfig
if command -v udevadm >/dev/null 2>&1; then
    udevadm control --reload-rules 2>/dev/null || true
    udevadm trigger --subsystem-match=vcuda 2>/dev/null || true
fi
if [ "$DKMS" = auto ] && [ -z "$KDIR" ] && command -v dkms >/dev/null 2>&1; then
    # A reinstall of the same version must rebuild from the new sources.
    if [ -n "$(dkms status -m "$pkg" -v "$version" 2>/dev/null)" ]; then
        dkms remove -m "$pkg" -v "$version" --all
    fi
    dkms add -m "$pkg" -v "$version"
    if [ -e "/lib/modules/$(uname -r)/build" ]; then
        dkms install -m "$pkg" -v "$version"
    else
        msg "no headers for the running kernel $(uname -r): DKMS builds the module" \
            "when they are installed (linux-headers-$(uname -r))"
    fi
elif [ -z "$KDIR" ]; then
    msg "dkms is not installed: build the module with guest-driver/build.sh" \
        "or make install-guest KDIR=/lib/modules/\$(uname -r)/build"
fi
