#!/bin/sh
# Builds virtio_cuda.ko against one kernel tree, out of the source tree.
#   guest-driver/build.sh KDIR OUTDIR [make args...]
# Copies Kbuild, guest-driver/ and include/ to OUTDIR/src (fresh), builds
# there and leaves the module at OUTDIR/virtio_cuda.ko.
set -eu

if [ $# -lt 2 ]; then
	echo "usage: $0 KDIR OUTDIR [make args...]" >&2
	exit 2
fi
kdir=$1
out=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)

[ -d "$kdir" ] || { echo "$0: no kernel tree at $kdir" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/src" "$out/virtio_cuda.ko"
mkdir -p "$out/src/guest-driver"
cp "$root/Kbuild" "$out/src/"
cp -R "$root/include" "$out/src/"
# Sources only: no build products from an in-tree build.
for f in "$root"/guest-driver/*.c "$root"/guest-driver/*.h; do
	[ -e "$f" ] && cp "$f" "$out/src/guest-driver/"
done
cp -R "$root/guest-driver/uapi" "$out/src/guest-driver/"

make -C "$kdir" M="$out/src" "$@" modules
cp "$out/src/virtio_cuda.ko" "$out/virtio_cuda.ko"
echo "built $out/virtio_cuda.ko"
