#!/bin/sh
# Resolve, fetch and unpack the guest kernel for the VM suites.
#
# The guest runs Debian bookworm's cloud kernel (not backports): the newest
# linux-image-<abi>-cloud-amd64 that bookworm or bookworm-security offers,
# or the ABI named by VCU_GUEST_KVER (e.g. 6.1.0-56-cloud-amd64).  The
# image .deb is unpacked into ${VCU_CACHE:-/var/cache/vcu}/guest-<kver>/,
# the virtio modules and their dependencies are decompressed into mods/,
# the matching linux-headers package is installed, and an env file is
# written.  A second run finds the env file and does nothing.
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
if [ -s "$env" ] && [ -f "$(. "$env"; echo "$VCU_GUEST_VMLINUZ")" ] &&
    [ -d "$(. "$env"; echo "$VCU_GUEST_KDIR")" ]; then
    cat "$env"
    exit 0
fi

msg "preparing guest kernel $kver in $dir"
mkdir -p "$dir"
img=linux-image-$kver
hdr=linux-headers-$kver
iver=$(bookworm_version "$img")
[ -n "$iver" ] || die "$img is not in bookworm/bookworm-security"
hver=$(bookworm_version "$hdr")
[ "$hver" = "$iver" ] || die "$hdr ($hver) does not match $img ($iver) in the same suite"

# Headers: only ask apt when missing (other jobs may hold the dpkg lock).
if [ "$(dpkg-query -W -f='${Status} ${Version}' "$hdr" 2>/dev/null)" != "install ok installed $iver" ]; then
    msg "installing $hdr=$iver"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -o DPkg::Lock::Timeout=300 "$hdr=$iver" >&2
fi
kdir=/usr/src/linux-headers-$kver
[ -f "$kdir/Makefile" ] || die "$kdir missing after installing $hdr"

deb=$(ls "$dir"/"${img}"_*.deb 2>/dev/null | head -n 1 || true)
if [ -z "$deb" ]; then
    msg "downloading $img=$iver"
    (cd "$dir" && apt-get download "$img=$iver" 2>&1 | grep -v "unsandboxed as root" >&2 || true)
    deb=$(ls "$dir"/"${img}"_*.deb | head -n 1)
fi

rm -rf "$dir/root" "$dir/mods"
mkdir -p "$dir/root" "$dir/mods"
dpkg-deb -x "$deb" "$dir/root"
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
