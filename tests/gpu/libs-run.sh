#!/usr/bin/env bash
# On the GPU machine: NVIDIA's libraries in a guest on the guest's
# libcuda.so.1 (VM suite libs).  The libraries are the GPU host's own
# (hundreds of MB, not carried): found on the host's loader path or under
# /usr/local/cuda*, put ahead of build/vm/initrd-libs.img as an
# uncompressed cpio archive under /libs (the kernel unpacks concatenated
# archives), then the suite runs on the real GPU.
#
#   tests/gpu/libs-run.sh       (after tests/gpu/prepare.sh built the image)
set -uo pipefail
cd "$(dirname "$0")/../.."
base=build/vm/initrd-libs.img
[ -f "$base" ] || { echo "libs-run: no $base (tests/gpu/prepare.sh)"; echo "0 passed, 1 failed"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The first copy of each library the host has.
find_lib() {
    local name=$1 d
    for d in $(ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n { print $NF }') \
        /usr/local/cuda/lib64/"$name" /usr/local/cuda/targets/x86_64-linux/lib/"$name" \
        /usr/local/cuda-13*/lib64/"$name" /usr/lib/x86_64-linux-gnu/"$name" \
        /opt/*/lib/python3*/site-packages/nvidia/*/lib/"$name"; do
        if [ -e "$d" ]; then
            readlink -f "$d"
            return 0
        fi
    done
    return 1
}
mkdir -p "$work/root/libs"
for n in libcublas.so.13 libcublasLt.so.13; do
    if p=$(find_lib "$n"); then
        echo "libs-run: $n from $p ($(du -h "$p" | cut -f1))"
        cp "$p" "$work/root/libs/$n"
    else
        echo "libs-run: no $n on this host"
    fi
done
python3 - "$work/root" "$work/libs.cpio" <<'PY'
import os, sys
root, out = sys.argv[1], sys.argv[2]
ino = 1000
def hdr(name, mode, size, nlink=1):
    global ino
    ino += 1
    fields = [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name) + 1, 0]
    h = b"070701" + b"".join(b"%08X" % f for f in fields) + name.encode() + b"\0"
    return h + b"\0" * ((4 - len(h) % 4) % 4)
with open(out, "wb") as f:
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel != ".":
            f.write(hdr(rel, 0o40755, 0, 2))
        for n in sorted(files):
            p = os.path.join(d, n)
            size = os.path.getsize(p)
            f.write(hdr(os.path.relpath(p, root), 0o100755, size))
            with open(p, "rb") as src:
                while True:
                    b = src.read(1 << 20)
                    if not b:
                        break
                    f.write(b)
            f.write(b"\0" * ((4 - size % 4) % 4))
    f.write(hdr("TRAILER!!!", 0, 0))
PY
cp "$base" "$work/base.img"
# Uncompressed first: after a compressed archive the kernel finds no
# next one ("invalid magic").
cat "$work/libs.cpio" "$work/base.img" >"$base"
rc=0
VCU_NO_BUILD=1 tests/gpu/run.sh libs || rc=1
cp "$work/base.img" "$base"
exit $rc
