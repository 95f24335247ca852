#!/usr/bin/env bash
# Install what building and testing virtio-cuda needs on a fresh Debian 12
# machine, as root.  Idempotent: when every package below is installed
# (asked of dpkg each time, not of a stamp file that outlives a removed
# package or a changed list) it does nothing but check.
#
# Debian's archive also serves bookworm-backports (meson >= 1.5 for QEMU 10,
# the 6.12 kernel headers) and trixie's source packages (QEMU 10.0); trixie is
# added as deb-src only, so no trixie binary can upgrade the system.
# dkms and pahole: the dkms suite builds the guest module through DKMS (pahole
# writes the BTF of modules for 6.12).  libvirt-clients and libxml2-utils:
# virt-xml-validate checks the libvirt domain example.
set -euo pipefail

pkgs=(build-essential pkg-config python3 python3-venv git ca-certificates
      ninja-build libglib2.0-dev libpcre2-dev libfdt-dev zlib1g-dev
      flex bison dpkg-dev busybox-static cpio xz-utils zstd kmod file
      qemu-system-data clang llvm libclang-rt-14-dev xxd patchelf
      dkms pahole libvirt-clients libxml2-utils)
backports=(meson python3-pycotap)
src=/etc/apt/sources.list.d/vcu.list

# True when every package is installed and meson is new enough.
all_there() {
    local st
    [ -f "$src" ] || return 1
    st=$(dpkg-query -W -f='${db:Status-Status}\n' "${pkgs[@]}" "${backports[@]}" 2>/dev/null) || return 1
    [ -z "$(printf '%s\n' "$st" | grep -v '^installed$')" ] || return 1
    dpkg --compare-versions "$(dpkg-query -W -f='${Version}' meson)" ge 1.5
}
all_there && exit 0

if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: must run as root (apt-get)" >&2
    exit 1
fi

if [ ! -f "$src" ]; then
    cat >"$src" <<LIST
deb http://deb.debian.org/debian bookworm-backports main
deb-src http://deb.debian.org/debian trixie main
LIST
fi

export DEBIAN_FRONTEND=noninteractive
echo "deps.sh: apt-get update and install (${#pkgs[@]} packages, then ${backports[*]} from bookworm-backports)"
apt-get update -q
apt-get install -q -y --no-install-recommends "${pkgs[@]}"
apt-get install -q -y --no-install-recommends -t bookworm-backports "${backports[@]}"
all_there || { echo "deps.sh: packages still missing after apt-get install" >&2; exit 1; }
