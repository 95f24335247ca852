#!/bin/sh
# Print the path of NVIDIA's nvml.h, the header guest-lib's
# libnvidia-ml.so.1 is built against (its types, prototypes and version
# macros; the library implements that API, it does not invent one).
# With the argument "pynvml": the folder holding pynvml.py (nvidia-ml-py's
# module, Debian's python3-pynvml from bookworm contrib, about 30 KB),
# which the nvml-loopback suite runs against the library; fetched the
# same way, or found importable already.
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

# fetch SUITE-LINE PACKAGE=VERSION DEST: the package's files unpacked into
# DEST, through apt-get with lists of its own in the cache.
fetch() {
    tmp=$cache/nvml-tmp
    rm -rf "$tmp"
    mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/dl"
    echo "$1" >"$tmp/sources.list"
    set -- "$1" "$2" "$3" -o Dir::Etc::SourceList="$tmp/sources.list" \
        -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists="$tmp/lists" \
        -o Dir::Cache="$tmp/cache" -o APT::Sandbox::User=root -q
    pkg=$2
    dest=$3
    shift 3
    msg "fetching Debian's $pkg"
    apt-get "$@" update >"$tmp/log" 2>&1 || { tail -n 5 "$tmp/log" >&2; exit 1; }
    (cd "$tmp/dl" && apt-get "$@" download "$pkg") >>"$tmp/log" 2>&1 ||
        { tail -n 5 "$tmp/log" >&2; exit 1; }
    dpkg-deb -x "$tmp"/dl/*.deb "$tmp/root"
    rm -rf "$dest"
    mv "$tmp/root" "$dest"
    rm -rf "$tmp"
}

if [ "${1:-}" = pynvml ]; then
    if python3 -c 'import pynvml' 2>/dev/null; then
        python3 -c 'import os, pynvml; print(os.path.dirname(pynvml.__file__))'
        exit 0
    fi
    pyver=11.525.112-1
    pydir=$cache/pynvml-$pyver
    mkdir -p "$cache"
    exec 9>"$cache/nvml.lock"
    flock 9
    [ -f "$pydir/usr/lib/python3/dist-packages/pynvml.py" ] ||
        fetch "deb http://deb.debian.org/debian bookworm contrib" "python3-pynvml=$pyver" "$pydir"
    [ -f "$pydir/usr/lib/python3/dist-packages/pynvml.py" ] || { msg "no pynvml.py in the package"; exit 1; }
    echo "$pydir/usr/lib/python3/dist-packages"
    exit 0
fi

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
    fetch "deb http://deb.debian.org/debian trixie non-free" "libnvidia-ml-dev=$pkgver" "$dir"
    [ -f "$dir/usr/include/nvml.h" ] || { msg "no nvml.h in the package"; exit 1; }
    msg "nvml.h in $dir/usr/include"
fi
echo "$dir/usr/include/nvml.h"
