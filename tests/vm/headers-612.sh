#!/bin/sh
# Fetch and unpack the newest 6.12 cloud kernel headers from
# bookworm-backports, for compile checks of the guest module (virtio_find_vqs
# changed in 6.11).  They are unpacked, not installed: the headers package
# depends on its kernel image, which has no business on the build host.
#
# linux-headers-<kver>, its -common package and linux-kbuild-* are unpacked
# into ${VCU_CACHE:-/var/cache/vcu}/headers-<kver>/root, and the one
# absolute path in the headers' Makefile is pointed into that root.  A
# second run finds the env file and does nothing.
#
# Output (stdout): shell assignments
#   VCU_K612_KVER   kernel release, e.g. 6.12.95+deb12-cloud-amd64
#   VCU_K612_KDIR   the kernel tree to build modules against
# Use: eval "$(tests/vm/headers-612.sh)"
set -eu

cache=${VCU_CACHE:-/var/cache/vcu}
msg() { echo "headers-612: $*" >&2; }
die() { msg "$*"; exit 1; }

# Highest bookworm-backports version of linux-headers-cloud-amd64 in 6.12.
mver=$(apt-cache madison linux-headers-cloud-amd64 2>/dev/null |
    awk -F'|' '$3 ~ /bookworm-backports\/main/ { gsub(/ /, "", $2); print $2 }' | {
        best=
        while read -r v; do
            case $v in 6.12.*) ;; *) continue ;; esac
            if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$best"; then best=$v; fi
        done
        echo "$best"
    })
[ -n "$mver" ] || die "no 6.12 linux-headers-cloud-amd64 in bookworm-backports (apt-get update? scripts/deps.sh adds it)"
hdr=$(apt-cache show "linux-headers-cloud-amd64=$mver" |
    sed -n 's/^Depends:.*\(linux-headers-[0-9][^ ,]*-cloud-amd64\).*/\1/p' | head -n 1)
[ -n "$hdr" ] || die "cannot read the headers package from linux-headers-cloud-amd64=$mver"
kver=${hdr#linux-headers-}

dir=$cache/headers-$kver
env=$dir/env
kdir=$dir/root/usr/src/$hdr
mkdir -p "$dir"
# One unpacker at a time; the others wait and then find the env file.
exec 9>"$dir/lock"
flock 9
if [ -s "$env" ] && [ -f "$kdir/Makefile" ]; then
    cat "$env"
    exit 0
fi

msg "unpacking $hdr=$mver into $dir"
deps=$(apt-cache show "$hdr=$mver" | sed -n 's/^Depends: //p' | head -n 1 | tr ',' '\n' |
    sed -n 's/^ *\(linux-headers-[^ ]*-common\|linux-kbuild-[^ ]*\).*/\1/p')
[ "$(echo "$deps" | wc -w)" = 2 ] || die "$hdr: expected a -common and a linux-kbuild dependency, got: $deps"
rm -rf "$dir/debs" "$dir/root"
mkdir -p "$dir/debs" "$dir/root"
for p in "$hdr" $deps; do
    (cd "$dir/debs" && apt-get download "$p=$mver" 2>&1 | grep -v "unsandboxed as root" >&2 || true)
    deb=$(ls "$dir/debs/${p}_"*.deb 2>/dev/null | head -n 1)
    [ -n "$deb" ] || die "could not download $p=$mver"
    dpkg-deb -x "$deb" "$dir/root"
done
common=$(echo "$deps" | grep -- '-common$')
[ -f "$kdir/Makefile" ] && [ -d "$dir/root/usr/src/$common" ] || die "unexpected layout in $hdr"
# The Makefile is one line, "include /usr/src/<common>/Makefile"; the
# other links (scripts, tools) are relative and hold inside the root.
echo "include $dir/root/usr/src/$common/Makefile" >"$kdir/Makefile"
rm -rf "$dir/debs"

tmp=$env.tmp
{
    echo "VCU_K612_KVER='$kver'"
    echo "VCU_K612_KDIR='$kdir'"
} >"$tmp"
mv "$tmp" "$env"
cat "$env"
