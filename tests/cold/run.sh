#!/usr/bin/env bash
# The first-run path, as CI can afford it: seconds, no network.
#
#   tests/cold/run.sh        (make test's "cold" suite)
#
# 1. pipelines: no script that runs under pipefail has a pipeline whose
#    reader may stop early (a quiet or counted grep, head, a sed that quits):
#    the writer then dies of SIGPIPE and the pipeline fails at random.
# 2. qemu-device/build-qemu.sh with an empty cache (VCU_CACHE in a scratch
#    folder) and apt, dpkg-source, meson and ninja replaced by local
#    fixtures (written below; apt-cache's listing is 100000 lines long):
#    it says what it downloads and how big, shows the build's progress,
#    installs; a second run does nothing; an interrupted download, and a
#    failed build, leave nothing that a later run takes for done.
# 3. tests/vm/guest-kernel.sh the same way, with a fixture kernel package
#    built here by dpkg-deb: an empty cache gives the env file; a truncated
#    .deb left by an older cache is fetched again; a second run is a no-op;
#    two runs at once on one empty cache take turns (the cache is shared).
#
# What the fixtures cannot show (the real mirror, the real QEMU build),
# the full cold run does: scripts/cold-run.sh (README, "First run").
# Prints each check as "PASS name" or "FAIL name", then "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vcu-cold.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() {
    echo "FAIL $1: $2"
    failed=$((failed + 1))
    [ -z "${3:-}" ] || sed 's/^/    /' "$3" | tail -n 30
}

# ---- 1. pipelines under pipefail --------------------------------------------
scripts=$(cd "$root" && git ls-files 2>/dev/null | grep -E '\.sh$|^\.ci/run$')
[ -n "$scripts" ] || scripts=$(cd "$root" && find . -name '*.sh' -not -path './build/*' | sed 's,^\./,,')
# A pipe into: grep with -q, -m, --quiet or --max-count; head; sed -n NUMq.
early_reader=
for r in 'grep[[:space:]]+(-[a-zA-Z]*[qm]|--quiet|--max-count)' 'head([[:space:]]|$)' \
    'sed[[:space:]]+-n[[:space:]]+.?[0-9]+q'; do
    early_reader=${early_reader:+$early_reader|}$r
done
early_reader='\|[[:space:]]*('$early_reader')'
hits=$tmp/pipe-hits
: >"$hits"
for f in $scripts; do
    grep 'pipefail' "$root/$f" >/dev/null || continue
    { grep -nE "$early_reader" "$root/$f" || true; } |
        { grep -vE '^[0-9]+:[[:space:]]*#' || true; } | sed "s,^,$f:," >>"$hits"
done
if [ -s "$hits" ]; then bad pipefail-readers "readers that stop early, under pipefail" "$hits"; else ok pipefail-readers; fi

# ---- fixtures ---------------------------------------------------------------
fx=$tmp/bin
mkdir -p "$fx"
export FIXTURE_DIR=$tmp/fixture
mkdir -p "$FIXTURE_DIR"
kver=6.1.0-99-cloud-amd64
kpkg=6.1.999-1

cat >"$fx/apt-cache" <<'SH'
#!/bin/sh
case "$1 $2" in
"showsrc qemu")
    # Our version first, then a long tail: a reader that stops at the
    # match kills this writer with SIGPIPE.
    cat <<'LISTING'
Package: qemu
Binary: qemu-system
Version: 1:10.0.13+ds-0+deb13u1
Files:
 0123 12462 qemu_10.0.13+ds-0+deb13u1.dsc
 4567 3000000 qemu_10.0.13+ds.orig.tar.xz
 89ab 156096 qemu_10.0.13+ds-0+deb13u1.debian.tar.xz
Checksums-Sha256:
 cdef 12462 qemu_10.0.13+ds-0+deb13u1.dsc

Package: qemu
Version: 1:7.2+dfsg-7+deb12u18
Files:
LISTING
    seq 1 100000 | sed 's/^/ 0123 1 other-file-/'
    ;;
"madison linux-image-cloud-amd64")
    echo " linux-image-cloud-amd64 | 6.1.999-1 | http://deb.debian.org/debian bookworm/main amd64 Packages"
    echo " linux-image-cloud-amd64 | 6.12.9-1~bpo12+1 | http://deb.debian.org/debian bookworm-backports/main amd64 Packages"
    ;;
"madison linux-image-6.1.0-99-cloud-amd64" | "madison linux-headers-6.1.0-99-cloud-amd64")
    echo " $2 | 6.1.999-1 | http://deb.debian.org/debian bookworm/main amd64 Packages"
    ;;
"show linux-image-cloud-amd64=6.1.999-1")
    printf 'Package: linux-image-cloud-amd64\nDepends: linux-image-6.1.0-99-cloud-amd64 (= 6.1.999-1)\n'
    ;;
"show linux-image-6.1.0-99-cloud-amd64=6.1.999-1")
    printf 'Package: linux-image-6.1.0-99-cloud-amd64\nSize: %s\n' "$(stat -c %s "$FIXTURE_DIR/kernel.deb")"
    ;;
*) echo "fixture apt-cache: unexpected: $*" >&2; exit 100 ;;
esac
SH
cat >"$fx/apt-get" <<'SH'
#!/bin/sh
echo "apt-get $*" >>"$FIXTURE_DIR/apt.log"
for a in "$@"; do
    case $a in
    update) exit 0 ;;
    source)
        printf 'Format: 3.0 (quilt)\n' >qemu_10.0.13+ds-0+deb13u1.dsc
        head -c 1000000 /dev/zero >qemu_10.0.13+ds.orig.tar.xz
        [ -z "${FIXTURE_FAIL_DOWNLOAD:-}" ] || exit 100     # interrupted
        head -c 3000000 /dev/zero >qemu_10.0.13+ds.orig.tar.xz
        printf 'debian\n' >qemu_10.0.13+ds-0+deb13u1.debian.tar.xz
        exit 0
        ;;
    download)
        cp "$FIXTURE_DIR/kernel.deb" linux-image-6.1.0-99-cloud-amd64_6.1.999-1_amd64.deb
        exit 0
        ;;
    install) echo "fixture apt-get: no install here: $*" >&2; exit 100 ;;
    esac
done
exit 100
SH
cat >"$fx/dpkg-query" <<'SH'
#!/bin/sh
echo "install ok installed 6.1.999-1"
SH
cat >"$fx/dpkg-source" <<'SH'
#!/bin/sh
# dpkg-source -x DSC TREE: the files build-qemu.sh patches, and a configure.
[ "$1" = -x ] || exit 2
t=$3
mkdir -p "$t/hw/virtio" "$t/include/standard-headers/linux" "$t/pc-bios"
printf 'specific_virtio_ss = ss.source_set()\nvirtio_pci_ss = ss.source_set()\n' >"$t/hw/virtio/meson.build"
printf 'config VIRTIO\n    bool\n' >"$t/hw/virtio/Kconfig"
printf '#define VIRTIO_ID_GPIO\t\t\t41\n' >"$t/include/standard-headers/linux/virtio_ids.h"
printf 'static const char *names[] = {\n    [VIRTIO_ID_GPIO] = "virtio-gpio"\n};\n' >"$t/hw/virtio/virtio.c"
: >"$t/hw/virtio/trace-events"
printf 'if unpack_edk2_blobs\nendif\n' >"$t/pc-bios/meson.build"
printf '#!/bin/sh\nmkdir -p meson-info\nprintf %s >meson-info/meson-info.json\n: >build.ninja\n' \
    "'{\"meson_version\": {\"full\": \"1.7.0\"}}\n'" >"$t/configure"
chmod +x "$t/configure"
SH
cat >"$fx/meson" <<'SH'
#!/bin/sh
echo 1.7.0
SH
cat >"$fx/ninja" <<'SH'
#!/bin/sh
# ninja -C DIR -jN TARGET: 40 steps, as ninja prints them when not on a tty.
dir=$2
echo "ninja: Entering directory \`$dir'"
if [ -n "${FIXTURE_FAIL_BUILD:-}" ]; then
    echo "[1/40] Compiling C object hw/virtio/virtio-cuda.c.o"
    echo "FAILED: hw/virtio/virtio-cuda.c.o"
    echo "../hw/virtio/virtio-cuda.c:1:1: error: fixture failure"
    echo "ninja: build stopped: subcommand failed."
    exit 1
fi
i=1
while [ $i -le 40 ]; do echo "[$i/40] Compiling C object step$i.c.o"; i=$((i + 1)); done
printf '#!/bin/sh\nexit 0\n' >"$dir/qemu-system-x86_64"
chmod +x "$dir/qemu-system-x86_64"
SH
cat >"$fx/ldd" <<'SH'
#!/bin/sh
printf '\tlinux-vdso.so.1 (0x00007ffc00000000)\n'
SH
cat >"$fx/strip" <<'SH'
#!/bin/sh
[ "$1" = -o ] && cp "$3" "$2"
SH
cat >"$fx/patchelf" <<'SH'
#!/bin/sh
exit 0
SH
chmod +x "$fx"/*
export PATH=$fx:$PATH

# The fixture kernel package: image, config, virtio modules, modules.dep.
kt=$tmp/kernel-tree
m=$kt/lib/modules/$kver
d=kernel/drivers/virtio
mkdir -p "$kt/DEBIAN" "$kt/boot" "$m/$d"
printf 'Package: linux-image-%s\nVersion: %s\nArchitecture: amd64\nMaintainer: fixture <f@example.org>\nDescription: fixture\n' \
    "$kver" "$kpkg" >"$kt/DEBIAN/control"
head -c 200000 /dev/urandom >"$kt/boot/vmlinuz-$kver"
echo CONFIG_RD_ZSTD=y >"$kt/boot/config-$kver"
for mod in virtio virtio_ring virtio_pci virtio_pci_modern_dev virtio_pci_legacy_dev virtio_balloon; do
    echo "$mod" | xz >"$m/$d/$mod.ko.xz"
done
cat >"$m/modules.dep" <<DEP
$d/virtio.ko.xz:
$d/virtio_ring.ko.xz:
$d/virtio_pci_modern_dev.ko.xz:
$d/virtio_pci_legacy_dev.ko.xz:
$d/virtio_pci.ko.xz: $d/virtio_pci_legacy_dev.ko.xz $d/virtio_pci_modern_dev.ko.xz $d/virtio.ko.xz $d/virtio_ring.ko.xz
$d/virtio_balloon.ko.xz: $d/virtio.ko.xz $d/virtio_ring.ko.xz
DEP
if ! dpkg-deb --build --root-owner-group "$kt" "$FIXTURE_DIR/kernel.deb" >/dev/null; then
    bad fixture "dpkg-deb --build failed"
    echo "$passed passed, $failed failed"
    exit 1
fi
mkdir -p "$tmp/khdr/linux-headers-$kver"
: >"$tmp/khdr/linux-headers-$kver/Makefile"

# ---- 2. build-qemu.sh ---------------------------------------------------------
bq() { # LOG CACHE [VAR=VALUE...]: one build-qemu.sh run into $tmp/qemu-out
    local log=$1 cache=$2
    shift 2
    env "$@" VCU_CACHE="$cache" JOBS=2 "$root/qemu-device/build-qemu.sh" "$tmp/qemu-out" >"$log" 2>&1
}
c=$tmp/cache-q
out=$tmp/bq1.log
if bq "$out" "$c" && grep 'step 1: downloading .*(3\.0 MiB' "$out" >/dev/null &&
    [ "$(grep -c 'build-qemu:   \[[0-9]*/40\]' "$out")" -ge 5 ] && grep 'build-qemu: done:' "$out" >/dev/null &&
    [ -x "$tmp/qemu-out/bin/qemu-system-x86_64" ]; then
    ok build-qemu-empty-cache
else
    bad build-qemu-empty-cache "no download size, progress lines or install" "$out"
fi
out=$tmp/bq2.log
if bq "$out" "$c" && grep 'up to date' "$out" >/dev/null; then
    ok build-qemu-second-run
else
    bad build-qemu-second-run "not a no-op" "$out"
fi

c=$tmp/cache-q2
rm -rf "$tmp/qemu-out"
out=$tmp/bq3.log
if ! bq "$out" "$c" FIXTURE_FAIL_DOWNLOAD=1 && bq "$out.2" "$c" &&
    grep 'step 1: downloading' "$out.2" >/dev/null && grep 'build-qemu: done:' "$out.2" >/dev/null; then
    ok build-qemu-interrupted-download
else
    cat "$out.2" >>"$out" 2>/dev/null
    bad build-qemu-interrupted-download "a partial download was taken for the source package" "$out"
fi

c=$tmp/cache-q3
rm -rf "$tmp/qemu-out"
out=$tmp/bq4.log
if ! bq "$out" "$c" FIXTURE_FAIL_BUILD=1 && grep 'error: fixture failure' "$out" >/dev/null &&
    grep 'build failed' "$out" >/dev/null && [ ! -e "$tmp/qemu-out/.vcu-stamp" ] &&
    bq "$out.2" "$c" && grep 'build-qemu: done:' "$out.2" >/dev/null; then
    ok build-qemu-failed-build
else
    cat "$out.2" >>"$out" 2>/dev/null
    bad build-qemu-failed-build "the failure was not shown, or a later run did not build" "$out"
fi

# ---- 3. guest-kernel.sh ---------------------------------------------------------
gk() { # LOG CACHE: one guest-kernel.sh run; its stdout in LOG.env
    VCU_CACHE="$2" VCU_KHEADERS="$tmp/khdr" "$root/tests/vm/guest-kernel.sh" >"$1.env" 2>"$1"
}
c=$tmp/cache-k
out=$tmp/gk1.log
core="virtio_ring.ko virtio.ko virtio_pci_modern_dev.ko virtio_pci_legacy_dev.ko virtio_pci.ko"
if gk "$out" "$c" && grep "downloading linux-image-$kver=$kpkg ([0-9.]* MiB)" "$out" >/dev/null &&
    (. "$out.env" && [ "$VCU_GUEST_KVER" = "$kver" ] && [ -f "$VCU_GUEST_VMLINUZ" ] &&
        [ "$VCU_GUEST_MODULES_CORE" = "$core" ] && [ "$VCU_GUEST_INITRD_COMPRESS" = zstd ] &&
        [ "$(cat "$VCU_GUEST_MODDIR/virtio_pci.ko")" = virtio_pci ]); then
    ok guest-kernel-empty-cache
else
    cat "$out.env" >>"$out"
    bad guest-kernel-empty-cache "wrong env or no download line" "$out"
fi
out=$tmp/gk2.log
: >"$FIXTURE_DIR/apt.log"
if gk "$out" "$c" && cmp -s "$out.env" "$tmp/gk1.log.env" && [ ! -s "$FIXTURE_DIR/apt.log" ]; then
    ok guest-kernel-second-run
else
    bad guest-kernel-second-run "not a no-op" "$out"
fi
out=$tmp/gk3.log
for deb in "$c/guest-$kver"/*.deb; do truncate -s 3000 "$deb"; done
rm -f "$c/guest-$kver/env"
if gk "$out" "$c" && grep 'does not unpack: fetching it again' "$out" >/dev/null &&
    cmp -s "$out.env" "$tmp/gk1.log.env"; then
    ok guest-kernel-truncated-deb
else
    bad guest-kernel-truncated-deb "a truncated .deb in the cache was not replaced" "$out"
fi

c=$tmp/cache-k2
out=$tmp/gk4.log
gk "$out.a" "$c" &
pa=$!
gk "$out.b" "$c"
rb=$?
wait $pa
ra=$?
cat "$out.a" "$out.b" >"$out"
if [ $ra -eq 0 ] && [ $rb -eq 0 ] && cmp -s "$out.a.env" "$out.b.env" && [ -s "$out.a.env" ] &&
    [ "$(grep -c 'preparing guest kernel' "$out")" -eq 1 ]; then
    ok guest-kernel-concurrent
else
    bad guest-kernel-concurrent "two runs on one empty cache did not take turns" "$out"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
