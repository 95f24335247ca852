#!/bin/sh
# Resolve, fetch and unpack the guest kernel for the VM suites.
#
# The guest runs Debian bookworm's cloud kernel (not backports): the newest
# linux-image-<abi>-cloud-amd64 that bookworm or bookworm-security offers,
# or the ABI named by VCU_GUEST_KVER (e.g. 6.1.0-56-cloud-amd64).  The
# image .deb is unpacked into ${VCU_CACHE:-/var/cache/vcu}/guest-<kver>/,
# the virtio modules and their dependencies are decompressed into mods/,
# the matching linux-headers package is installed, and an env file is
# written.  A second run finds the env file and does nothing.  Downloads
# say what they fetch and how big, and every 10 s how far along they are;
# they land in a scratch folder first, so an interrupted one is never
# taken for a finished one.  When the apt lists are too old for a
# download, they are refreshed once.
#
# Environment: VCU_CACHE, VCU_GUEST_KVER (above); VCU_KHEADERS, where the
# linux-headers packages put their trees [/usr/src].
#
# Output (stdout): the env file's contents, shell assignments:
#   VCU_GUEST_KVER      kernel release, e.g. 6.1.0-56-cloud-amd64
#   VCU_GUEST_VMLINUZ   the kernel image
#   VCU_GUEST_MODDIR    directory of the decompressed .ko files
#   VCU_GUEST_MODULES   load order, space separated file names in MODDIR
#   VCU_GUEST_MODULES_CORE  the prefix of that order virtio_pci needs
#   VCU_GUEST_KDIR      kernel headers to build modules against
#   VCU_GUEST_INITRD_COMPRESS  gzip or zstd (what the kernel unpacks)
# Use: eval "$(tests/vm/guest-kernel.sh)"
set -eu

cache=${VCU_CACHE:-/var/cache/vcu}
msg() { echo "guest-kernel: $*" >&2; }
die() { msg "$*"; exit 1; }
mib() { awk -v b="${1:-0}" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# Downloads package version $1 (name=version) into folder $2: says how big
# it is and how far along every 10 s; the .deb appears in $2 only whole.
fetch_deb() {
    size=$(apt-cache show "$1" 2>/dev/null | sed -n 's/^Size: //p' | sed -n 1p)
    msg "downloading $1 ($(mib "$size"))"
    dl=$2/download.tmp
    rm -rf "$dl"
    mkdir -p "$dl"
    (cd "$dl" && exec apt-get download "$1") >"$dl.log" 2>&1 &
    pid=$!
    t=0
    while kill -0 $pid 2>/dev/null; do
        sleep 1
        t=$((t + 1))
        [ $((t % 10)) -ne 0 ] || msg "  ... $(mib "$(du -sb "$dl" | cut -f1)") of $(mib "$size") after ${t}s"
    done
    if ! wait $pid; then
        grep -v "unsandboxed as root" "$dl.log" | tail -n 5 >&2
        return 1
    fi
    for f in "$dl"/*.deb; do
        [ -f "$f" ] || return 1
        mv "$f" "$2/"
    done
    rm -rf "$dl" "$dl.log"
    msg "downloaded $1 in ${t}s"
}

# Highest version of $1 offered by bookworm or bookworm-security (never
# backports, whatever the pins say).
bookworm_version() {
    apt-cache madison "$1" 2>/dev/null |
        awk -F'|' '$3 ~ /bookworm(-security|-updates)?\/main/ && $3 !~ /backports/ {
            gsub(/ /, "", $2); print $2 }' |
        while read -r v; do echo "$v"; done |
        sort -V -r | {
            # sort -V does not know Debian ordering; let dpkg pick the max.
            best=
            while read -r v; do
                if [ -z "$best" ] || dpkg --compare-versions "$v" gt "$best"; then best=$v; fi
            done
            echo "$best"
        }
}

if [ -n "${VCU_GUEST_KVER:-}" ]; then
    kver=$VCU_GUEST_KVER
else
    mver=$(bookworm_version linux-image-cloud-amd64)
    [ -n "$mver" ] || die "no bookworm linux-image-cloud-amd64 in apt-cache (apt-get update?)"
    kver=$(apt-cache show "linux-image-cloud-amd64=$mver" |
        sed -n 's/^Depends:.*linux-image-\([0-9][^ ,]*-cloud-amd64\).*/\1/p' | head -n 1)
    [ -n "$kver" ] || die "cannot read the ABI from linux-image-cloud-amd64=$mver"
fi

dir=$cache/guest-$kver
env=$dir/env
ready() {
    [ -s "$env" ] && [ -f "$(. "$env"; echo "$VCU_GUEST_VMLINUZ")" ] &&
        [ -d "$(. "$env"; echo "$VCU_GUEST_KDIR")" ]
}
if ready; then
    cat "$env"
    exit 0
fi

# The cache is shared (other worktrees, other jobs): one preparer at a
# time, and whoever waited may find the work done.
mkdir -p "$dir"
exec 9>"$dir.lock"
if ! flock -n 9; then
    msg "waiting for another guest-kernel.sh preparing $dir"
    flock 9
    if ready; then
        cat "$env"
        exit 0
    fi
fi
msg "preparing guest kernel $kver in $dir"
img=linux-image-$kver
hdr=linux-headers-$kver
iver=$(bookworm_version "$img")
[ -n "$iver" ] || die "$img is not in bookworm/bookworm-security"
hver=$(bookworm_version "$hdr")
[ "$hver" = "$iver" ] || die "$hdr ($hver) does not match $img ($iver) in the same suite"

# Headers: only ask apt when missing (other jobs may hold the dpkg lock).
if [ "$(dpkg-query -W -f='${Status} ${Version}' "$hdr" 2>/dev/null)" != "install ok installed $iver" ]; then
    msg "installing $hdr=$iver (apt-get install: the headers and what they need)"
    headers() { DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=300 "$hdr=$iver" >&2; }
    headers || { msg "retrying after apt-get update"; apt-get update -q >&2; headers; } ||
        die "apt-get install $hdr=$iver failed"
fi
kdir=${VCU_KHEADERS:-/usr/src}/linux-headers-$kver
[ -f "$kdir/Makefile" ] || die "$kdir missing after installing $hdr"

deb=
for f in "$dir"/"${img}"_*.deb; do [ -f "$f" ] && deb=$f; done
if [ -z "$deb" ]; then
    fetch_deb "$img=$iver" "$dir" ||
        { msg "retrying after apt-get update"; apt-get update -q >&2; fetch_deb "$img=$iver" "$dir"; } ||
        die "apt-get download $img=$iver failed"
    for f in "$dir"/"${img}"_*.deb; do [ -f "$f" ] && deb=$f; done
    [ -n "$deb" ] || die "no $img .deb in $dir after the download"
fi

rm -rf "$dir/root" "$dir/mods"
mkdir -p "$dir/root" "$dir/mods"
if ! dpkg-deb -x "$deb" "$dir/root"; then
    # A cache written before downloads went through a scratch folder may
    # hold a truncated .deb.
    msg "$deb does not unpack: fetching it again"
    rm -rf "$deb" "$dir/root"
    mkdir -p "$dir/root"
    fetch_deb "$img=$iver" "$dir" || die "apt-get download $img=$iver failed"
    for f in "$dir"/"${img}"_*.deb; do [ -f "$f" ] && deb=$f; done
    dpkg-deb -x "$deb" "$dir/root" || die "$deb does not unpack"
fi
vmlinuz=$dir/root/boot/vmlinuz-$kver
[ -f "$vmlinuz" ] || die "no vmlinuz in $deb"
mroot=$dir/root/lib/modules/$kver
[ -d "$mroot" ] || mroot=$dir/root/usr/lib/modules/$kver
depf=$mroot/modules.dep
if [ ! -s "$depf" ]; then
    # Debian generates modules.dep in postinst; build it ourselves.
    depmod -b "$dir/root" "$kver" >&2 || true
    [ -s "$depf" ] || depf=
fi

# modules.dep: "path: dep1 dep2 ..." where each dependency's own
# dependencies come after it, so loading a line's deps in reverse order
# and then the module itself is a valid order.
wanted=$(cd "$mroot" && ls kernel/drivers/virtio/*.ko* 2>/dev/null || true)
[ -n "$wanted" ] || die "no kernel/drivers/virtio modules in $deb (built in?)"
order=$dir/mods/order
: >"$order"
add_mod() { # $1: path relative to $mroot; appends deps first, then itself
    grep -qx "$1" "$order" && return 0
    if [ -n "$depf" ]; then
        deps=$(awk -v m="$1:" '$1 == m { for (i = NF; i > 1; i--) print $i }' "$depf")
        for d in $deps; do add_mod "$d"; done
    fi
    grep -qx "$1" "$order" || echo "$1" >>"$order"
}
# virtio_pci first so the required chain comes first in the order; the
# rest of drivers/virtio is there for completeness.
for m in $wanted; do
    case $m in */virtio_pci.ko*) add_mod "$m" ;; esac
done
ncore=$(wc -l <"$order")
for m in $wanted; do add_mod "$m"; done

names=
core=
n=0
while read -r m; do
    base=$(basename "$m")
    case $base in
    *.ko.xz) xz -dc "$mroot/$m" >"$dir/mods/${base%.xz}"; base=${base%.xz} ;;
    *.ko.zst) zstd -qdc "$mroot/$m" >"$dir/mods/${base%.zst}"; base=${base%.zst} ;;
    *.ko.gz) gzip -dc "$mroot/$m" >"$dir/mods/${base%.gz}"; base=${base%.gz} ;;
    *.ko) cp "$mroot/$m" "$dir/mods/$base" ;;
    *) die "unexpected module file $m" ;;
    esac
    names="$names $base"
    n=$((n + 1))
    [ "$n" -gt "$ncore" ] || core="$core $base"
done <"$order"

# Which initramfs compression the kernel unpacks (config in the image .deb).
comp=gzip
cfg=$dir/root/boot/config-$kver
if [ -f "$cfg" ] && grep -q '^CONFIG_RD_ZSTD=y' "$cfg" && command -v zstd >/dev/null; then
    comp=zstd
fi

tmp=$env.tmp
{
    echo "VCU_GUEST_KVER='$kver'"
    echo "VCU_GUEST_VMLINUZ='$vmlinuz'"
    echo "VCU_GUEST_MODDIR='$dir/mods'"
    echo "VCU_GUEST_MODULES='${names# }'"
    echo "VCU_GUEST_MODULES_CORE='${core# }'"
    echo "VCU_GUEST_KDIR='$kdir'"
    echo "VCU_GUEST_INITRD_COMPRESS='$comp'"
} >"$tmp"
mv "$tmp" "$env"
# The unpacked tree is large and no longer needed; keep the .deb.
rm -rf "$dir/root/lib" "$dir/root/usr/lib/modules" "$dir/root/usr/share"
cat "$env"
