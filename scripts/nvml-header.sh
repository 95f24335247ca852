#!/bin/sh
# Print the path of NVIDIA's nvml.h, the header guest-lib's
# libnvidia-ml.so.1 is built against (its types, prototypes and version
# macros; the library implements that API, it does not invent one).
#
# The CUDA toolkit here (pip wheels) has no nvml.h.  In order: $NVML_H,
# the toolkit's $CUDA/include/nvml.h, /usr/include/nvml.h (Debian's
# libnvidia-ml-dev installed), else Debian's libnvidia-ml-dev package
# (non-free, trixie: NVML 12.4, about 90 KB) fetched with apt-get into
# ${VCU_CACHE:-/var/cache/vcu}/nvml-<version>/ and unpacked there.  The
# package's own dependency (NVIDIA's libnvidia-ml1) is not installed, and
# the machine's apt sources are left alone: the package lists for the one
# suite live in the cache folder too.  A second run finds the header and
# does nothing.
set -eu

pkgver=12.4.127~12.4.1-2
cache=${VCU_CACHE:-/var/cache/vcu}
dir=$cache/nvml-$pkgver
msg() { echo "nvml-header: $*" >&2; }

for h in "${NVML_H:-}" "${CUDA:-/usr/local/cuda}/include/nvml.h" /usr/include/nvml.h \
    "$dir/usr/include/nvml.h"; do
    if [ -n "$h" ] && [ -f "$h" ]; then
        echo "$h"
        exit 0
    fi
done

mkdir -p "$cache"
exec 9>"$cache/nvml.lock"
flock 9
if [ ! -f "$dir/usr/include/nvml.h" ]; then
    tmp=$cache/nvml-tmp
    rm -rf "$tmp"
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/dl"
    echo "deb http://deb.debian.org/debian trixie non-free" >"$tmp/sources.list"
    set -- -o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
        -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache" \
        -o APT::Sandbox::User=root -q
    msg "fetching Debian's libnvidia-ml-dev $pkgver (nvml.h, about 90 KB)"
    apt-get "$@" update >"$tmp/log" 2>&1 || { tail -n 5 "$tmp/log" >&2; exit 1; }
    (cd "$tmp/dl" && apt-get "$@" download "libnvidia-ml-dev=$pkgver") >>"$tmp/log" 2>&1 ||
        { tail -n 5 "$tmp/log" >&2; exit 1; }
    dpkg-deb -x "$tmp"/dl/libnvidia-ml-dev_*.deb "$tmp/root"
    [ -f "$tmp/root/usr/include/nvml.h" ] || { msg "no nvml.h in the package"; exit 1; }
    rm -rf "$dir"
    mv "$tmp/root" "$dir"
    rm -rf "$tmp"
    msg "nvml.h in $dir/usr/include"
fi
echo "$dir/usr/include/nvml.h"
