#!/usr/bin/env bash
# Install what building and testing virtio-cuda needs on a fresh Debian 12
# machine, as root.  Idempotent: a second run does nothing but check.
#
# Debian's archive also serves bookworm-backports (meson >= 1.5 for QEMU 10,
# the 6.12 kernel headers) and trixie's source packages (QEMU 10.0); trixie is
# added as deb-src only, so no trixie binary can upgrade the system.
# dkms and pahole: the dkms suite builds the guest module through DKMS (pahole
# writes the BTF of modules for 6.12).  libvirt-clients and libxml2-utils:
# virt-xml-validate checks the libvirt domain example.
set -euo pipefail

stamp=/var/lib/vcu-deps.v4
[ -f "$stamp" ] && exit 0

if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: must run as root (apt-get)" >&2
    exit 1
fi

src=/etc/apt/sources.list.d/vcu.list
if [ ! -f "$src" ]; then
    cat >"$src" <<LIST
deb http://deb.debian.org/debian bookworm-backports main
deb-src http://deb.debian.org/debian trixie main
LIST
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -q -y --no-install-recommends \
    build-essential pkg-config python3 python3-venv git ca-certificates \
    ninja-build libglib2.0-dev libpcre2-dev libfdt-dev zlib1g-dev \
    flex bison dpkg-dev busybox-static cpio xz-utils zstd kmod \
    qemu-system-data clang llvm libclang-rt-14-dev xxd patchelf \
    dkms pahole libvirt-clients libxml2-utils
apt-get install -q -y --no-install-recommends -t bookworm-backports \
    meson python3-pycotap
touch "$stamp"
