# Sourced by the GPU scripts whose guest's root is a disk made of the GPU
# host's own files, as they are (tests/gpu/torch-run.sh: PyTorch, JAX,
# CuPy; tests/gpu/samples.sh: NVIDIA's cuda-samples).  Bash.
#
# hostroot_stage DIR: DIR (made) gets this host's /usr less /usr/local,
# /usr/src and /usr/share/doc, as hard links (they cost nothing), its
# /etc, the top-level links (bin, lib, lib64, sbin) and empty mount
# points.  NVIDIA's driver libraries (libcuda, libnvidia-*, the debugger's)
# are left out, so the guest's only driver is ours.  Non-zero, with the
# reason on stdout, where a folder cannot be linked.
hostroot_stage() {
    local st=$1 d l
    mkdir -p "$st"/{proc,sys,dev,tmp,opt,run,var,usr}
    for d in /usr/*; do
        case $d in /usr/local | /usr/src) continue ;; esac
        cp -al "$d" "$st/usr/" || { echo "hostroot: cannot link $d (another filesystem?)"; return 1; }
    done
    rm -rf "$st/usr/share/doc"
    find "$st/usr/lib" \( -name 'libcuda.so*' -o -name 'libnvidia-*' -o -name 'libcudadebugger*' \) \
        -exec rm -f {} +
    for l in bin sbin lib lib64; do [ -L "/$l" ] && ln -s "$(readlink "/$l")" "$st/$l"; done
    cp -a /etc "$st/etc" 2>/dev/null
    return 0
}

# hostroot_link SRC DIR: SRC (a file or a folder) into DIR at SRC's own
# path, as hard links where they can be made, else copied.
hostroot_link() {
    local src=$1 st=$2
    mkdir -p "$st$(dirname "$src")"
    cp -al "$src" "$st$src" 2>/dev/null || cp -a "$src" "$st$src"
}

# hostroot_headers CUDA STAGE: the toolkit's headers at CUDA/include and
# at the toolkit's real folder's include, each beside a bin folder, so that
# a path a program was built with (NVRTC's -I.../bin/../include) finds
# them in the guest; links are resolved here, never followed into the
# host's own folders.
hostroot_headers() {
    local cuda=$1 st=$2 inc root d
    inc=$(readlink -f "$cuda/include") && [ -d "$inc" ] || return 0
    root=$(readlink -f "$cuda")
    hostroot_link "$inc" "$st"
    for d in "$cuda" "$root"; do
        [ -L "$st$d" ] && continue
        mkdir -p "$st$d/bin"
        [ -e "$st$d/include" ] || [ -L "$st$d/include" ] || ln -s "$inc" "$st$d/include"
    done
}

# hostroot_disk DIR IMG TAG: IMG, an ext4 image of DIR sized to fit, DIR
# removed after.  TAG names the caller in the messages.
hostroot_disk() {
    local st=$1 img=$2 tag=$3 size
    size=$(du -sm "$st" | cut -f1)
    echo "$tag: guest root $size MiB staged"
    mke2fs -q -t ext4 -O ^has_journal,^metadata_csum -E root_owner=0:0 -d "$st" "$img" \
        "$((size + size / 8 + 256))M" || { echo "$tag: mke2fs failed"; return 1; }
    rm -rf "$st"
}
