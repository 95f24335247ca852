#!/usr/bin/env bash
# Build QEMU (x86_64-softmmu) with the virtio-cuda-pci device and the host
# backend linked in, from Debian's pinned qemu source package.
#
#   qemu-device/build-qemu.sh [OUTDIR]        (default: <repo>/build/qemu)
#
# Result: OUTDIR/bin/qemu-system-x86_64 (stripped, RPATH $ORIGIN/../lib),
# OUTDIR/lib (the non-glibc shared libraries it needs), OUTDIR/share (the
# firmware a -nodefaults TCG guest needs: qboot.rom, linuxboot_dma.bin,
# kvmvapic.bin; use -L OUTDIR/share).
#
# Environment:
#   QEMU_DEB_VERSION  Debian source version (default 1:10.0.13+ds-0+deb13u1)
#   VCU_CACHE         cache root (default /var/cache/vcu): the source package,
#                     the unpacked tree and its configured build directory,
#                     reused by later runs (incremental ninja)
#   CUDA_INC          directory with cuda.h (default /usr/local/cuda/include)
#   JOBS              ninja -j (default: nproc)
#
# QEMU runs with its seccomp sandbox (configured --enable-seccomp, as
# libvirt expects: -sandbox on,...,spawn=deny): the device never forks,
# the host daemon (vcu-daemon) starts the workers.
#
# OUTDIR/.vcu-stamp records the QEMU version and a hash of qemu-device/,
# host-backend/common/, include/ and this script; when it matches, nothing
# is done.
set -euo pipefail

log() { printf 'build-qemu: %s\n' "$*"; }
die() { printf 'build-qemu: error: %s\n' "$*" >&2; exit 1; }
mib() { awk -v b="${1:-0}" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# Waits for background job $1 (a download into folder $2, $3 bytes in
# all), saying every 10 s how far along it is; returns the job's status.
wait_download() {
    local pid=$1 dir=$2 total=$3 t=0 got
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        t=$((t + 1))
        if [ $((t % 10)) -eq 0 ]; then
            got=$(du -sb "$dir" 2>/dev/null | cut -f1)
            log "  ... $(mib "$got") of $(mib "$total") after ${t}s"
        fi
    done
    wait "$pid"
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
script="$root/qemu-device/build-qemu.sh"
outdir=${1:-$root/build/qemu}
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)

QEMU_DEB_VERSION=${QEMU_DEB_VERSION:-1:10.0.13+ds-0+deb13u1}
cache=${VCU_CACHE:-/var/cache/vcu}
cuda_inc=${CUDA_INC:-/usr/local/cuda/include}
jobs=${JOBS:-$(nproc)}
ver_s=${QEMU_DEB_VERSION//:/_}
srccache="$cache/qemu-src-$ver_s"
work="$cache/qemu-work-$ver_s"
tree="$work/src"
bld="$tree/build"

[ -f "$root/qemu-device/proxy.c" ] || die "no qemu-device/proxy.c (the session proxy QEMU links)"
[ -f "$root/qemu-device/proxy_int.h" ] || die "no qemu-device/proxy_int.h (the session proxy's private header)"

# ---- cache key --------------------------------------------------------------
hash_dir() { (cd "$1" && find . -type f ! -name '*~' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum); }
key=$( {
    echo "qemu $QEMU_DEB_VERSION"
    echo "cuda_inc $cuda_inc"
    hash_dir "$root/qemu-device"
    hash_dir "$root/host-backend/common"
    sha256sum <"$root/host-backend/worker/vcu_backend.h"
    hash_dir "$root/include"
    sha256sum <"$script"
} | sha256sum | cut -d' ' -f1)
stamp="$outdir/.vcu-stamp"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] && [ -x "$outdir/bin/qemu-system-x86_64" ]; then
    log "up to date ($outdir, key ${key:0:12})"
    exit 0
fi

mkdir -p "$work"
exec 9>"$work/.lock"
if ! flock -n 9; then
    log "waiting for another build-qemu.sh using $work (lock $work/.lock)"
    flock 9
fi

# ---- host tools ---------------------------------------------------------------
need_pkgs=()
command -v patchelf >/dev/null || need_pkgs+=(patchelf)
command -v dpkg-source >/dev/null || need_pkgs+=(dpkg-dev)
# QEMU's -sandbox (libvirt passes it by default).
[ -f /usr/include/seccomp.h ] || need_pkgs+=(libseccomp-dev)
[ -f /usr/share/qemu/qboot.rom ] || need_pkgs+=(qemu-system-data)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    log "step 0: apt-get install ${need_pkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -q -y --no-install-recommends "${need_pkgs[@]}" >/dev/null \
        || die "apt-get install ${need_pkgs[*]} failed"
fi
meson_ver=$(meson --version 2>/dev/null || echo 0)
dpkg --compare-versions "$meson_ver" ge 1.5 || die "meson >= 1.5 needed (have $meson_ver): scripts/deps.sh installs it from bookworm-backports"

# ---- 1. source package ----------------------------------------------------------
# Downloaded into a scratch folder that is renamed when complete: an
# interrupted download must not look like a cached source package.
dsc="$srccache/qemu_${QEMU_DEB_VERSION#*:}.dsc"
if [ -f "$dsc" ]; then
    log "step 1: source package cached ($srccache)"
else
    # The whole listing is read into a variable first: under pipefail, a
    # quiet grep fed by a pipe fails whenever it exits before its writer.
    showsrc=$(apt-cache showsrc qemu 2>/dev/null || true)
    if ! printf '%s\n' "$showsrc" | grep -x "Version: $QEMU_DEB_VERSION" >/dev/null; then
        # Lists older than the version pinned here: refresh them once.
        log "step 1: qemu $QEMU_DEB_VERSION not in the apt lists: apt-get update"
        apt-get update -q >/dev/null 2>&1 || true
        showsrc=$(apt-cache showsrc qemu 2>/dev/null || true)
    fi
    if ! printf '%s\n' "$showsrc" | grep -x "Version: $QEMU_DEB_VERSION" >/dev/null; then
        avail=$(printf '%s\n' "$showsrc" | sed -n 's/^Version: //p' | tr '\n' ' ')
        die "qemu source $QEMU_DEB_VERSION is not in the apt sources (available: ${avail:-none}; is trixie deb-src configured and apt-get update run?). Set QEMU_DEB_VERSION to one of those."
    fi
    # "Files:" lines of our version's stanza: " md5 size name".
    total=$(printf '%s\n' "$showsrc" | awk -v v="$QEMU_DEB_VERSION" '
        /^Package:/ { ours = 0 } $0 == "Version: " v { ours = 1 }
        /^[^ ]/ { files = ($1 == "Files:") } files && ours && /^ / { n += $2 }
        END { print n + 0 }')
    log "step 1: downloading the qemu $QEMU_DEB_VERSION source package ($(mib "$total"), apt-get source)"
    dl="$srccache.download"
    rm -rf "$dl"
    mkdir -p "$dl"
    t0=$(date +%s)
    (cd "$dl" && exec apt-get source -q --download-only "qemu=$QEMU_DEB_VERSION" >"$work/download.log" 2>&1) &
    wait_download $! "$dl" "$total" \
        || { tail -n 20 "$work/download.log" >&2; die "apt-get source --download-only qemu=$QEMU_DEB_VERSION failed"; }
    [ -f "$dl/${dsc##*/}" ] || die "download did not produce ${dsc##*/}"
    rm -rf "$srccache"
    mv "$dl" "$srccache"
    log "step 1: downloaded in $(( $(date +%s) - t0 ))s"
fi

# ---- 2. unpack ------------------------------------------------------------------
if [ -f "$tree/.vcu-unpacked" ]; then
    log "step 2: source tree present ($tree)"
else
    log "step 2: dpkg-source -x into $tree"
    rm -rf "$tree"
    dpkg-source -x "$dsc" "$tree" >"$work/unpack.log" 2>&1 \
        || { tail -20 "$work/unpack.log" >&2; die "dpkg-source -x $dsc failed"; }
    touch "$tree/.vcu-unpacked"
fi

# ---- 3. integration -------------------------------------------------------------
log "step 3: integrate virtio-cuda (from $root/qemu-device and host-backend/common)"

# Copies src to dst only when the content differs, so ninja rebuilds only
# what changed.
sync_file() {
    if ! cmp -s "$1" "$2"; then
        mkdir -p "$(dirname "$2")"
        cp "$1" "$2"
    fi
}
# Writes stdin to $1 only when the content differs.
put_file() {
    local tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; chmod 644 "$1"; fi
}
# Pristine copy of a file we patch, kept beside it; the patch is always
# re-applied to the pristine copy, so it is idempotent.
orig() {
    [ -f "$tree/$1.vcu-orig" ] || cp "$tree/$1" "$tree/$1.vcu-orig"
    cat "$tree/$1.vcu-orig"
}

for f in "$root"/qemu-device/virtio-cuda*.c; do sync_file "$f" "$tree/hw/virtio/$(basename "$f")"; done
sync_file "$root/qemu-device/virtio-cuda.h" "$tree/include/hw/virtio/virtio-cuda.h"
sync_file "$root/qemu-device/virtio-cuda-int.h" "$tree/hw/virtio/virtio-cuda-int.h"

# QEMU links the device, the session proxy (proxy*.c), the request
# check (vcu_reqcheck.c), and the memory account and share group it
# reports from (host-backend/common/*.c): each guest session's CUDA work runs in a
# vcu-worker process the host daemon starts (host-backend/), never in
# QEMU, which neither forks nor loads the CUDA driver.
bdir="$tree/hw/virtio/vcu-backend"
mkdir -p "$bdir"
declare -A want=()
for f in vcu_proto.h vcu_proto_graph.h vcu_sha256.h; do
    sync_file "$root/include/$f" "$bdir/$f"; want[$f]=1
done
for f in "$root"/host-backend/common/*.h "$root"/host-backend/common/*.c \
         "$root"/host-backend/worker/vcu_backend.h \
         "$root"/qemu-device/proxy*.c "$root"/qemu-device/proxy_int.h \
         "$root"/qemu-device/vcu_proxy.h \
         "$root"/qemu-device/vcu_reqcheck.c "$root"/qemu-device/vcu_reqcheck.h; do
    [ -e "$f" ] || continue
    sync_file "$f" "$bdir/$(basename "$f")"
    want[$(basename "$f")]=1
done
want[meson.build]=1
for f in "$bdir"/*; do
    [ -n "${want[$(basename "$f")]:-}" ] || rm -f "$f"
done
cuda_inc_line="vcu_backend_cinc = []"
if [ -f "$cuda_inc/cuda.h" ]; then
    cuda_inc_line="vcu_backend_cinc = [include_directories('$cuda_inc')]"
elif grep -qs '#include <cuda.h>' "$bdir"/*.c "$bdir"/*.h; then
    die "the backend includes cuda.h but $cuda_inc/cuda.h does not exist (set CUDA_INC)"
fi
{
    echo "# Generated by qemu-device/build-qemu.sh: the virtio-cuda host backend."
    echo "$cuda_inc_line"
    echo "vcu_backend_lib = static_library('vcu-backend',"
    echo "    files("
    for f in "$bdir"/*.c; do echo "        '$(basename "$f")',"; done
    echo "    ),"
    echo "    include_directories: [include_directories('.')] + vcu_backend_cinc,"
    echo "    c_args: ['-DVCU_IN_QEMU=1'],"
    echo "    dependencies: [threads],"
    echo "    build_by_default: false)"
    echo "vcu_backend_dep = declare_dependency(link_with: vcu_backend_lib,"
    echo "    include_directories: include_directories('.'),"
    echo "    dependencies: [threads], link_args: ['-ldl'])"
} | put_file "$bdir/meson.build"

orig hw/virtio/meson.build | awk '
    { print }
    /^virtio_pci_ss = ss.source_set\(\)$/ && !done {
        print "# virtio-cuda (qemu-device/build-qemu.sh)"
        print "subdir(\x27vcu-backend\x27)"
        print "specific_virtio_ss.add(when: \x27CONFIG_VIRTIO_CUDA\x27, if_true: [files(\x27virtio-cuda.c\x27, \x27virtio-cuda-migrate.c\x27), vcu_backend_dep])"
        print "virtio_pci_ss.add(when: \x27CONFIG_VIRTIO_CUDA\x27, if_true: files(\x27virtio-cuda-pci.c\x27))"
        done = 1
    }' | put_file "$tree/hw/virtio/meson.build"
grep -q "CONFIG_VIRTIO_CUDA" "$tree/hw/virtio/meson.build" || die "could not patch hw/virtio/meson.build"

{
    orig hw/virtio/Kconfig
    printf '\nconfig VIRTIO_CUDA\n    bool\n    default y if I386\n    depends on VIRTIO_PCI\n'
} | put_file "$tree/hw/virtio/Kconfig"

orig include/standard-headers/linux/virtio_ids.h | awk '
    { print }
    /^#define VIRTIO_ID_GPIO/ { print "#define VIRTIO_ID_CUDA\t\t\t63 /* virtio-cuda (out of tree, qemu-device/) */" }
' | put_file "$tree/include/standard-headers/linux/virtio_ids.h"
grep -q "VIRTIO_ID_CUDA" "$tree/include/standard-headers/linux/virtio_ids.h" || die "could not patch virtio_ids.h"

orig hw/virtio/virtio.c | sed 's/^\(    \[VIRTIO_ID_GPIO\] = "virtio-gpio"\)$/\1,\n    [VIRTIO_ID_CUDA] = "virtio-cuda"/' \
    | put_file "$tree/hw/virtio/virtio.c"
grep -q '\[VIRTIO_ID_CUDA\] = "virtio-cuda"' "$tree/hw/virtio/virtio.c" || die "could not patch virtio_device_names[] in hw/virtio/virtio.c"

{
    orig hw/virtio/trace-events
    echo
    cat "$root/qemu-device/trace-events"
} | put_file "$tree/hw/virtio/trace-events"

# The +ds tarball has no firmware; Debian's patch already skips the edk2
# blobs, make sure of it for other versions.
orig pc-bios/meson.build | sed 's/^if unpack_edk2_blobs$/if unpack_edk2_blobs and false/' \
    | put_file "$tree/pc-bios/meson.build"

# ---- 4. configure ---------------------------------------------------------------
conf_args=(--target-list=x86_64-softmmu --without-default-features --enable-tcg --enable-kvm
           --enable-seccomp --disable-docs --python=/usr/bin/python3 --disable-werror
           --disable-install-blobs --disable-user)
conf_key="${conf_args[*]}"
# meson refuses a build folder that another meson version made.
bld_meson=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["meson_version"]["full"])' \
    "$bld/meson-info/meson-info.json" 2>/dev/null || echo none)
if [ -f "$bld/build.ninja" ] && [ "$(cat "$work/configured" 2>/dev/null)" = "$conf_key" ] &&
    [ "$bld_meson" = "$meson_ver" ]; then
    log "step 4: configured build tree reused ($bld)"
else
    log "step 4: configure ${conf_args[*]}"
    rm -rf "$bld"
    mkdir -p "$bld"
    (cd "$bld" && ../configure "${conf_args[@]}" >"$work/configure.log" 2>&1) \
        || { tail -30 "$work/configure.log" >&2; die "configure failed (log: $work/configure.log)"; }
    echo "$conf_key" >"$work/configured"
fi

# ---- 5. build -------------------------------------------------------------------
# Reads ninja's output to the end: all of it into $1, and a progress line
# every 10 % of the steps, or after 30 s without one.
ninja_progress() {
    local line part= n=0 m=0 shown=-10 last=$SECONDS
    exec 8>"$1"
    while :; do
        if IFS= read -r -t 30 line; then
            line=$part$line
            part=
            printf '%s\n' "$line" >&8
            if [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
                n=${BASH_REMATCH[1]}
                m=${BASH_REMATCH[2]}
            fi
        elif [ $? -gt 128 ]; then
            part=$part$line     # timed out, maybe inside a line
        else
            line=$part$line
            [ -z "$line" ] || printf '%s\n' "$line" >&8
            break
        fi
        if [ "$m" -gt 0 ] && { [ $((n * 100 / m)) -ge $((shown + 10)) ] || [ $((SECONDS - last)) -ge 30 ]; }; then
            shown=$((n * 100 / m / 10 * 10))
            last=$SECONDS
            log "  [$n/$m] $((n * 100 / m))% after $((SECONDS - t0s))s"
        fi
    done
    exec 8>&-
}

log "step 5: ninja -j$jobs qemu-system-x86_64 (a first build is about 1600 steps, minutes on 2 cores; log: $work/ninja.log)"
t0=$(date +%s)
t0s=$SECONDS
if ! ninja -C "$bld" -j"$jobs" qemu-system-x86_64 2>&1 | ninja_progress "$work/ninja.log"; then
    # sed prints the first lines and reads on: a reader that exits early
    # would make the pipeline fail under pipefail.
    grep -E -A8 'error|FAILED' "$work/ninja.log" | sed -n '1,60p' >&2 || true
    die "build failed (log: $work/ninja.log)"
fi
log "step 5: built in $(( $(date +%s) - t0 ))s"

# ---- 6. install -----------------------------------------------------------------
log "step 6: install into $outdir"
rm -rf "$outdir/bin" "$outdir/lib" "$outdir/share" "$stamp"
mkdir -p "$outdir/bin" "$outdir/lib" "$outdir/share"
strip -o "$outdir/bin/qemu-system-x86_64" "$bld/qemu-system-x86_64"
# Bring every shared library that is not part of glibc.
ldd "$bld/qemu-system-x86_64" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    case "$name" in
        libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|libutil.so.*|ld-linux*|libanl.so.*) continue ;;
    esac
    cp -L "$path" "$outdir/lib/$name"
    chmod 644 "$outdir/lib/$name"
    patchelf --set-rpath '$ORIGIN' "$outdir/lib/$name"
done
# DT_RPATH (not RUNPATH) so that it also covers the libraries' own needs.
patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$outdir/bin/qemu-system-x86_64"
for f in qboot.rom linuxboot_dma.bin kvmvapic.bin; do
    src=""
    for d in /usr/share/qemu /usr/share/seabios; do
        [ -f "$d/$f" ] && { src="$d/$f"; break; }
    done
    [ -n "$src" ] || die "$f not found in /usr/share/qemu or /usr/share/seabios (qemu-system-data)"
    cp -L "$src" "$outdir/share/$f"
done
# SeaBIOS too where present, for runs without -bios.
[ -f /usr/share/seabios/bios-256k.bin ] && cp -L /usr/share/seabios/bios-256k.bin "$outdir/share/"
# QEMU also looks in <bindir>/../share/qemu: make that find the same files.
ln -sfn . "$outdir/share/qemu"
"$outdir/bin/qemu-system-x86_64" -device virtio-cuda-pci,help >/dev/null \
    || die "the installed binary does not run or lacks virtio-cuda-pci"
# libvirt passes -sandbox: a binary without seccomp would refuse it.  With
# it, this QEMU waits (-S) until timeout ends it.
timeout 2 "$outdir/bin/qemu-system-x86_64" -sandbox on,spawn=deny -machine none -display none \
    -nodefaults -monitor none -serial none -S </dev/null >/dev/null 2>"$outdir/.sandbox-check.err" || true
if grep -q "sandbox" "$outdir/.sandbox-check.err" 2>/dev/null; then
    die "the installed binary has no seccomp sandbox: $(cat "$outdir/.sandbox-check.err")"
fi
rm -f "$outdir/.sandbox-check.err"
echo "$key" >"$stamp"
log "done: $outdir/bin/qemu-system-x86_64 ($(du -sh "$outdir" | cut -f1) in all; libs: $(ls "$outdir/lib" | tr '\n' ' '))"
