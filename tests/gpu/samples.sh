#!/usr/bin/env bash
# On the GPU machine: NVIDIA's cuda-samples as a conformance suite.  The
# samples (build/samples-src.tar.xz, made by tests/gpu/samples-pack.sh) are
# built with their own CMake files, less those in tests/gpu/samples-skip.txt,
# then each program runs twice, each run under a timeout: natively, on
# NVIDIA's libcuda.so.1, and "ours": on guest-lib's libcuda.so.1 in its
# loopback build (the library and the host backend in one process, over
# NVIDIA's libcuda.so.1; the programs keep the static NVIDIA runtime they
# were linked with).  Arguments come from the samples' own test_args.json
# (as their run_tests.py uses them); each program runs in its build folder.
#
#   tests/gpu/samples.sh [build,run,guest]     (default build,run)
#   VCU_SAMPLES_SET=libs tests/gpu/samples.sh [build,run,guest]
#
# The set (VCU_SAMPLES_SET): "cuda" (the default), NVIDIA's cuda-samples,
# from build/samples-src.tar.xz, in build/samples, results in
# $OUT/samples.md and $OUT/samples/; or "libs", NVIDIA's
# CUDALibrarySamples for cuBLASLt, cuSPARSE, cuSOLVER and cuFFT
# (build/libsamples-src.tar.xz, samples-pack.sh libs), each sample folder
# its own CMake project as its README builds it, in build/libsamples,
# results in $OUT/libsamples.md and $OUT/libsamples/.  Every program a
# library sample builds is a row; they take no arguments.
#
#   build  unpack (again when the archive or the settings changed),
#          configure, build with make -k -j16 until VCU_SAMPLES_BUILD_S;
#          the build folder (build/samples) stays between calls on a warm
#          machine, so a build cut short goes on at the next call
#   run    run every built sample, VCU_SAMPLES_JOBS at a time
#   guest  a third column: each sample that passed natively (every one
#          built, with no native results) in TCG guests on this host's
#          GPU, on our libcuda.so.1 through the device and the host
#          daemon, as a user's program runs in a VM.  The guests' root is
#          a disk of this host's own files (tests/gpu/hostroot.sh) with
#          the toolkit's libraries the programs load and the samples'
#          source and build folders at their paths here; the samples are
#          shared out among VCU_SAMPLES_VMS guests (tests/vm/init.sh
#          run_samples).  Needs build/vm/initrd-samples.img and
#          build/qemu (tests/gpu/prepare.sh); on its own ("guest") it
#          takes the native and ours verdicts of an earlier "run"
#
# Environment:
#   VCU_SAMPLES_ARCHS="90"   the CUDA architectures to build (default: the
#                            samples' own list, 9 of them)
#   VCU_SAMPLES_ONLY="a b"   only these samples (folder names)
#   VCU_SAMPLES_BUILD_S=330  seconds from the start (unpack and configure
#                            included) the build may take in this call
#   VCU_SAMPLES_TIME_S=520   no run starts after this many seconds (NOT-RUN):
#                            the whole script ends within one 600 s call
#   VCU_SAMPLES_TIMEOUT=30   seconds each run may take
#   VCU_SAMPLES_JOBS=8       samples run at once (a sample's own runs, native
#                            then ours, one after another)
#   VCU_SAMPLES_VMS=N        guests at once for the guest column (default
#                            three quarters of the CPUs, at least 1)
#   VCU_SAMPLES_GUEST_S=550  seconds the guest column may take, its disk
#                            included (no run starts in a guest after it
#                            less VCU_SAMPLES_GUEST_TIMEOUT: NOT-RUN)
#   VCU_SAMPLES_END_S=N      seconds from the start the whole script may
#                            take (the guest column's time shrinks to fit)
#   VCU_SAMPLES_GUEST_TIMEOUT=240  seconds each run may take in a guest
#                            (its CPU is emulated: host code runs 10-50x
#                            slower than natively)
#   VCU_SAMPLES_GPUS=LIST    the GPUs each guest is given (virtio-cuda-pci's
#                            gpus=, e.g. "0,,1" for both of a two-GPU
#                            machine; default: the device's default, GPU 0)
#   VCU_SAMPLES_GUEST_ENV="A=1 B=x"  variables for each run in a guest
#                            (VCU_LIBCUDA_TRACE=errors VCU_SYNC_CALLS=1 shows
#                            which call the host refused); letters, digits
#                            and _=.:/- only
#   VCU_REAL_GPU=0           the guests' daemon on the CPU stand-in
#                            (build/fakecuda): the script's own check
#   VCU_LIBCUDA=PATH         the libcuda.so.1 under ours (default: the
#                            system's, from ldconfig)
#   VCU_CMAKE=PATH           cmake (default: the one on PATH, else the
#                            GPU machine's /opt/torch/.venv/bin/cmake)
#
# Output: a line per sample (native, ours, and for a failure the first
# error-looking line of our run), the same table as markdown in
# $OUT/samples.md, each run's log in $OUT/samples/ (NAME.guest.log: what
# the guest printed of it).  Only samples that pass natively count, on
# the guest column when there is one, else on ours; the last line is
# "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
top=$PWD
out=${OUT:-build/gpu-out}
case $out in /*) ;; *) out=$top/$out ;; esac
sset=${VCU_SAMPLES_SET:-cuda}
case $sset in
    cuda) sname=samples title=cuda-samples ;;
    libs) sname=libsamples title=CUDALibrarySamples ;;
    *)
        echo "samples: no set $sset (VCU_SAMPLES_SET: cuda or libs)"
        echo "0 passed, 1 failed"
        exit 1
        ;;
esac
logs=$out/$sname
work=$top/build/$sname
src=$work/src/$sname-src
bld=$work/build
res=$work/results
what=${1:-build,run}
t0=$SECONDS
build_s=${VCU_SAMPLES_BUILD_S:-330}
time_s=${VCU_SAMPLES_TIME_S:-520}
tmo=${VCU_SAMPLES_TIMEOUT:-30}
njobs=${VCU_SAMPLES_JOBS:-8}
cuda=${CUDA:-/usr/local/cuda}
only=${VCU_SAMPLES_ONLY:-}
say() { echo "samples: $*"; }
mkdir -p "$logs" "$work"

archive=
for a in "build/$sname-src.tar.xz" "build/gpu-bundle/$sname-src.tar.xz"; do
    [ -f "$a" ] && { archive=$a; break; }
done

# unpack: a fresh tree when the archive, the architectures or the choice
# of samples changed; then the Python below rewrites its CMake files (the
# architectures; no add_subdirectory for a sample not built) and writes
# the plan, a line per sample: name, its folder under the build folder,
# program, GPUs it needs, why it is skipped (or -), its runs' arguments
# (";" between runs).  The library samples' plan comes after their build
# (libs_plan); unpack writes their build's Makefile (libs_unpack).
unpack() {
    local stamp
    stamp="$(cksum <"$archive") archs=${VCU_SAMPLES_ARCHS:-} only=$only"
    stamp="$stamp skip=$(cksum <tests/gpu/samples-skip.txt)"
    if [ -f "$work/stamp" ] && [ "$(cat "$work/stamp")" = "$stamp" ] &&
        { [ -f "$work/plan.tsv" ] || [ -f "$work/projects.tsv" ]; }; then
        return 0
    fi
    rm -rf "$work/src" "$bld" "$res" "$work/stamp" "$work/plan.tsv" "$work/projects.tsv" "$work/dropped.tsv" \
        "$work/configured" "$work/build-state"
    mkdir -p "$work/src"
    tar -xJf "$archive" -C "$work/src" || { say "cannot unpack $archive"; return 1; }
    if [ "$sset" = libs ]; then
        libs_unpack || return 1
        echo "$stamp" >"$work/stamp"
        return 0
    fi
    python3 - "$src" tests/gpu/samples-skip.txt "${VCU_SAMPLES_ARCHS:-}" "$only" \
        >"$work/plan.tsv" <<'PY' || { say "cannot read the samples' CMake files"; return 1; }
import json, os, re, sys

src, skipfile, archs, only = sys.argv[1:5]
only = set(only.split())
skipped = {}
for line in open(skipfile):
    f = line.split('#', 1)[0].split(None, 1)
    if f:
        skipped[f[0]] = f[1].strip() if len(f) > 1 else 'tests/gpu/samples-skip.txt'
args = json.load(open(os.path.join(src, 'test_args.json')))
# A file the mirror did not hold (samples-pack.sh): its sample cannot run.
for line in open(os.path.join(src, 'vcu-packed.txt')):
    f = line.split()
    if f[0] == 'absent' and len(f[1].split('/')) > 3:
        skipped.setdefault(f[1].split('/')[2], 'not in the packed source: ' + f[1])
set_archs = re.compile(r'set\(CMAKE_CUDA_ARCHITECTURES\s+([0-9 ]+)\)')
with open(os.path.join(os.path.dirname(src), 'theirs'), 'w') as f:
    f.write(set_archs.search(open(os.path.join(src, 'CMakeLists.txt')).read()).group(1) + '\n')

def rewrite(path, fn):
    with open(path) as f:
        text = f.read()
    new = fn(text)
    if new != text:
        with open(path, 'w') as f:
            f.write(new)

def built(name):
    return name not in skipped and (not only or name in only)

def subdirs(text):
    return re.sub(r'^(\s*)add_subdirectory\((\S+)\)', lambda m: m.group(0) if built(m.group(2))
                  else f'{m.group(1)}# not built here: add_subdirectory({m.group(2)})',
                  text, flags=re.M)

for dirpath, dirs, files in os.walk(src):
    dirs.sort()
    if 'CMakeLists.txt' in files:
        p = os.path.join(dirpath, 'CMakeLists.txt')
        if archs:
            rewrite(p, lambda t: set_archs.sub(f'set(CMAKE_CUDA_ARCHITECTURES {archs})', t))
        if os.path.dirname(dirpath) == os.path.join(src, 'Samples'):
            rewrite(p, subdirs)             # Samples/CATEGORY/CMakeLists.txt

samples = os.path.join(src, 'Samples')
for cat in sorted(os.listdir(samples)):
    if cat == '8_Platform_Specific' or not os.path.isdir(os.path.join(samples, cat)):
        continue
    for name in sorted(os.listdir(os.path.join(samples, cat)), key=str.lower):
        p = os.path.join(samples, cat, name, 'CMakeLists.txt')
        if not os.path.isfile(p) or (only and name not in only):
            continue
        m = re.search(r'add_executable\(\s*([A-Za-z0-9_.-]+)', open(p).read())
        exe = m.group(1) if m else '-'
        conf = args.get(exe, {})
        why = skipped.get(name, '-')
        if why == '-' and conf.get('skip'):
            why = "test_args.json: skip"
        if why == '-' and exe == '-':
            why = 'no program of its own'
        if 'args' in conf:
            runs = [conf['args']]
        else:
            runs = [r.get('args', []) for r in conf.get('runs', []) if not r.get('skip')] or [[]]
        print('\t'.join([name, f'Samples/{cat}/{name}', exe, str(conf.get('min_gpus', 1)), why,
                         ';'.join(' '.join(r) for r in runs)]))
PY
    echo "$stamp" >"$work/stamp"
}

# Samples a configure error names (a library missing from this toolkit,
# say) are dropped and the configure made again: one sample's error ends
# the whole configure otherwise.
configure() {
    local cmake=${VCU_CMAKE:-} dirs d
    [ -n "$cmake" ] || cmake=$(command -v cmake || echo /opt/torch/.venv/bin/cmake)
    [ -f "$work/configured" ] && return 0
    for _ in 1 2 3; do
        mkdir -p "$bld"
        if "$cmake" -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release \
            -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc" -DCUDAToolkit_ROOT="$cuda" \
            >"$logs/configure.log" 2>&1; then
            touch "$work/configured"
            return 0
        fi
        dirs=$(configure_errors <"$logs/configure.log" | tee -a "$work/dropped.tsv" | cut -f1)
        [ -n "$dirs" ] || break
        for d in $dirs; do
            sed -i "s|^\( *\)add_subdirectory($d)|\1# not built here: add_subdirectory($d)|" \
                "$src"/Samples/*/CMakeLists.txt
            say "$d: not built: its CMake file fails here ($sname/configure.log)"
        done
    done
    say "configure failed: $sname/configure.log"
    tail -n 20 "$logs/configure.log"
    return 1
}

# configure_errors <LOG: a line per sample CMake's errors name: its
# folder, then the error's first line.  The forms: "CMake Error at (or
# in) Samples/CAT/NAME/CMakeLists.txt:..." with the message on the next
# lines; "VARIABLE" ... "linked by target "T" in directory .../Samples/CAT/NAME"
# for a library not found.
configure_errors() {
    python3 -c '
import re, sys
seen = {}
lines = sys.stdin.read().splitlines()
var = None
for i, l in enumerate(lines):
    m = re.match(r"CMake Error (?:at|in) Samples/[^/]+/([^/]+)/", l)
    if m:
        msg = " ".join([x.strip() for x in lines[i + 1:i + 6] if x.strip()][:2])
        seen.setdefault(m.group(1), "configure: " + msg)
        continue
    if re.match(r"\S", l):
        var = l.strip()
    m = re.search(r"linked by target \S+ in directory .*/Samples/[^/]+/([^/]+)$", l)
    if m:
        seen.setdefault(m.group(1), f"configure: {var} not found")
for d, why in seen.items():
    print(f"{d}\t{why}")
'
}

# libs_unpack: the library samples' build, a Makefile in the build folder
# with a target per sample folder (its own CMake project, configured and
# built in a folder of its own, as its README says: cmake, then make), so
# that build() runs them as it runs the cuda-samples' make; and the
# projects, a line each: folder under the source, GPUs it needs (the
# multi-GPU ones by name: cuFFT's *_mgpu_*, cuSOLVER's Mg*).
libs_unpack() {
    local cmake=${VCU_CMAKE:-} archs='' lib d rel name
    [ -n "$cmake" ] || cmake=$(command -v cmake || echo /opt/torch/.venv/bin/cmake)
    [ -z "${VCU_SAMPLES_ARCHS:-}" ] || archs="-DCMAKE_CUDA_ARCHITECTURES=$VCU_SAMPLES_ARCHS"
    echo "each project's own" >"$work/src/theirs"
    mkdir -p "$bld" "$logs/build"
    : >"$work/projects.tsv"
    for lib in cuBLASLt cuSPARSE cuSOLVER cuFFT; do
        for d in "$src/$lib"/*/; do
            d=${d%/}
            [ -f "$d/CMakeLists.txt" ] || continue
            rel=${d#"$src"/}
            name=${rel//\//-}
            if [ -n "$only" ] && [[ " $only " != *" ${rel##*/} "* ]]; then continue; fi
            case $rel in cuFFT/*mgpu* | cuSOLVER/Mg*) echo "$rel	2" ;; *) echo "$rel	1" ;; esac >>"$work/projects.tsv"
            printf '%s:\n\t@%s -S %s -B %s -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER=%s -DCUDAToolkit_ROOT=%s %s >%s 2>&1 && %s --build %s >>%s 2>&1\n' \
                "$name" "$cmake" "$d" "$bld/$rel" "$cuda/bin/nvcc" "$cuda" "$archs" \
                "$logs/build/$name.log" "$cmake" "$bld/$rel" "$logs/build/$name.log"
        done
    done >"$bld/Makefile.projects"
    {
        echo "all: $(cut -f1 "$work/projects.tsv" | tr / - | tr '\n' ' ')"
        echo ".PHONY: all $(cut -f1 "$work/projects.tsv" | tr / - | tr '\n' ' ')"
        cat "$bld/Makefile.projects"
    } >"$bld/Makefile"
    say "$(wc -l <"$work/projects.tsv") library sample projects"
}

# libs_plan: after the build, the plan: a line per program each project
# built (an executable ELF file outside CMakeFiles), named as the program;
# a project that built none keeps a line (its folder's name, no program:
# NOT-BUILT).
libs_plan() {
    local rel gpus f n
    while IFS=$'\t' read -r rel gpus; do
        n=0
        while read -r f; do
            [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = 177ELF ] || continue
            printf '%s\t%s\t%s\t%s\t-\t\n' "${f##*/}" "$(dirname "${f#"$bld"/}")" "${f##*/}" "$gpus"
            n=$((n + 1))
        done < <(find "$bld/$rel" -path '*/CMakeFiles' -prune -o -type f -perm -u+x -print 2>/dev/null | sort)
        [ "$n" -gt 0 ] || printf '%s\t%s\t-\t%s\t-\t\n' "${rel//\//-}" "$rel" "$gpus"
    done <"$work/projects.tsv" >"$work/plan.tsv"
    say "$(awk -F'\t' '$3 != "-"' "$work/plan.tsv" | wc -l) library sample programs built"
}

build() {
    local pid deadline
    if [ -z "$archive" ]; then
        say "no build/$sname-src.tar.xz (tests/gpu/prepare.sh makes it from a $title mirror)"
        return 1
    fi
    unpack || return 1
    say "$title $(sed -n 's/^commit //p' "$src/vcu-packed.txt")"
    if [ -n "${VCU_SAMPLES_ARCHS:-}" ]; then
        say "architectures: $VCU_SAMPLES_ARCHS (VCU_SAMPLES_ARCHS; the samples' own list: $(theirs))"
    else
        say "architectures: $(theirs) (the samples' own list; VCU_SAMPLES_ARCHS=90 builds one)"
    fi
    [ "$sset" = libs ] || configure || return 1
    # make in a session of its own, so the whole build (nvcc, cicc, ptxas)
    # stops when the time is up.
    deadline=$((t0 + build_s))
    # Some library samples link -lcudart and their library by name, and
    # include the toolkit's headers from C and C++ files (their README:
    # cmake .., make), which works where the toolkit's folders are on the
    # compiler's paths, as a user with the toolkit sets them.
    LIBRARY_PATH=$cuda/lib64${LIBRARY_PATH:+:$LIBRARY_PATH} CPATH=$cuda/include${CPATH:+:$CPATH} \
        setsid make -C "$bld" -k -j16 all >"$logs/build.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 2
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null
        sleep 3
        kill -KILL -- "-$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        echo cut >"$work/build-state"
        say "build stopped after ${build_s} s (VCU_SAMPLES_BUILD_S): what is built runs now;" \
            "the next call on this machine goes on with the build"
    else
        wait "$pid"
        echo 'done' >"$work/build-state"
        say "build ended after $((SECONDS - t0)) s ($sname/build.log)"
    fi
    [ "$sset" != libs ] || libs_plan
}

# The samples' own architectures, as unpack read them.
theirs() {
    cat "$work/src/theirs" 2>/dev/null
}

# classify RC: a run's verdict from its exit status (EXIT_WAIVED is 2 in
# the samples: a requirement the device does not meet).
classify() {
    case $1 in
        0) echo PASS ;;
        2) echo WAIVED ;;
        124 | 137) echo TIMEOUT ;;
        *) echo FAIL ;;
    esac
}

# guest: the guest column.  The plan (samples that passed natively, the
# longest native first, so that the guests' shares even out), a disk, one
# host daemon and VCU_SAMPLES_VMS guests; each guest's console says each
# sample's verdict, and what the sample printed, between
# "VCU-SAMPLE-BEGIN NAME" and "VCU-SAMPLE-END NAME VERDICT STATUS SECONDS".
guest() {
    local name dir exe gpus_min why runs nat secs n=0 g gs gt deadline vms
    local disk stage left pids=()
    if [ ! -f "$work/plan.tsv" ] || [ ! -d "$bld" ]; then
        say "guest: nothing built yet (tests/gpu/samples.sh build)"
        return 1
    fi
    gs=${VCU_SAMPLES_GUEST_S:-550}
    # The whole script's end, when one call runs every step.
    if [ "${VCU_SAMPLES_END_S:-0}" -gt 0 ] && [ $((VCU_SAMPLES_END_S - (t_guest - t0))) -lt "$gs" ]; then
        gs=$((VCU_SAMPLES_END_S - (t_guest - t0)))
    fi
    gt=${VCU_SAMPLES_GUEST_TIMEOUT:-240}
    vms=${VCU_SAMPLES_VMS:-$(($(nproc) * 3 / 4))}
    [ "$vms" -ge 1 ] || vms=1
    if [ -z "${gpus:-}" ]; then
        gpus=0
        command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    fi
    # Where /usr is, so that its files are linked, not copied.
    gdir=$(mktemp -d /var/tmp/vcu-samples.XXXXXX) || { say "guest: no /var/tmp"; return 1; }
    mkdir -p "$res"
    rm -f "$res"/*.guest
    for f in build/vm/initrd-samples.img build/qemu/bin/qemu-system-x86_64; do
        [ -e "$f" ] || { say "guest: no $f (tests/gpu/prepare.sh)"; return 1; }
    done
    while IFS=$'\t' read -r name dir exe gpus_min why runs; do
        [ "$why" = - ] || continue
        [ -x "$bld/$dir/$exe" ] || continue
        nat=
        [ ! -f "$res/$name.native" ] || read -r nat _ <"$res/$name.native"
        case $nat in PASS | NO-GPU | '') ;; *) continue ;; esac
        # With no native verdict (a "guest" with no "run" before it, or
        # none for this sample): every sample built, within the GPUs.
        if [ -z "$nat" ] && [ "${gpus:-0}" != 0 ] && [ "$gpus_min" -gt "$gpus" ]; then continue; fi
        secs=$(cat "$res/$name.native.secs" 2>/dev/null || echo 0)
        printf '%s\t%s\t%s\t%s\t%s\n' "$secs" "$name" "$bld/$dir" "$exe" "$runs"
        echo "NOT-RUN - its guest did not reach it ($sname/guest-*.log)" >"$res/$name.guest"
        n=$((n + 1))
    done <"$work/plan.tsv" | sort -t $'\t' -k1,1 -n -r | cut -f2- >"$gdir/plan.tsv"
    n=$(wc -l <"$gdir/plan.tsv")
    [ "$n" -gt 0 ] || { say "guest: no sample to run"; return 1; }
    [ "$vms" -le "$n" ] || vms=$n

    # The disk: this host's /usr and /etc, the libraries outside /usr/lib
    # the programs load (the toolkit's: every library of each folder they
    # come from, for what they open later, NVRTC's builtins say), the
    # samples' source and build folders at their own paths (the programs
    # find their data relative to both), less the objects; the plan.
    stage=$gdir/root
    . tests/gpu/hostroot.sh
    hostroot_stage "$stage" >"$logs/guest-disk.log" 2>&1 || { say "guest: $(tail -n 1 "$logs/guest-disk.log")"; return 1; }
    cut -f2,3 "$gdir/plan.tsv" | while IFS=$'\t' read -r d exe; do
        ldd "$d/$exe" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
    done | xargs -r -n1 dirname | sort -u | while read -r d; do
        case $d in /lib | /lib/* | /lib64 | /lib64/* | /usr/lib | /usr/lib/* | /usr/lib64 | /usr/lib64/*) continue ;; esac
        mkdir -p "$stage$d"
        for f in "$d"/*.so*; do
            [ -e "$f" ] && { cp -al "$f" "$stage$d/" 2>/dev/null || cp -a "$f" "$stage$d/"; }
        done
        echo "guest root: the libraries of $d"
    done >>"$logs/guest-disk.log" 2>&1
    # What programs read from the toolkit at run time (device-side-launch
    # links with libcudadevrt, ptxgen reads libdevice, cuFFT's NVRTC
    # callback sample compiles with the toolkit's headers), as a guest
    # with the toolkit installed has them.
    for f in "$cuda/lib64/libcudadevrt.a" "$cuda/nvvm/libdevice"; do
        [ -e "$f" ] && hostroot_link "$f" "$stage"
    done
    hostroot_headers "$cuda" "$stage"
    hostroot_link "$src" "$stage"
    tar -C / --exclude=CMakeFiles --exclude='*.o' -cf - "${bld#/}" | tar -C "$stage" -xf - ||
        { say "guest: cannot copy $bld"; return 1; }
    mkdir -p "$stage/vcu-samples"
    cp "$gdir/plan.tsv" "$stage/vcu-samples/plan.tsv"
    disk=$gdir/samples.ext4
    hostroot_disk "$stage" "$disk" samples >>"$logs/guest-disk.log" 2>&1 ||
        { say "guest: $(tail -n 1 "$logs/guest-disk.log")"; return 1; }
    left=$((gs - (SECONDS - t_guest)))
    deadline=$((left - gt - 30))
    if [ "$deadline" -lt 30 ]; then
        say "guest: out of time after making the disk ($((SECONDS - t_guest)) s of VCU_SAMPLES_GUEST_S=$gs)"
        return 1
    fi
    say "guest: $n samples in $vms guests, disk made in $((SECONDS - t_guest)) s;" \
        "no run starts after ${deadline} s of a guest's uptime, each run within $gt s"

    # One host daemon for every guest, as on a host where one serves all
    # VMs: the real GPU, or the CPU stand-in with VCU_REAL_GPU=0.
    VCU_ROOT=$top
    . tests/vm/daemon.sh
    local dargs="--cache-dir $gdir/cache" genv="VCU_REAL_GPU=1"
    if [ "${VCU_REAL_GPU:-1}" = 0 ]; then
        dargs="$dargs --libcuda $top/build/fakecuda/libcuda.so.1 --ctx-bytes 8M"
        genv="VCU_REAL_GPU=0"
    fi
    mkdir -p "$gdir/cache"
    # shellcheck disable=SC2086
    vcu_daemon_start "$gdir/daemon" $dargs >"$logs/guest-daemon-start.log" 2>&1 ||
        { say "guest: the host daemon did not start ($sname/guest-daemon-start.log)"; return 1; }
    local genv_arg=
    if [ -n "${VCU_SAMPLES_GUEST_ENV:-}" ]; then
        case $VCU_SAMPLES_GUEST_ENV in *[!A-Za-z0-9_=.:/\ -]*)
            say "guest: VCU_SAMPLES_GUEST_ENV may hold letters, digits, spaces and _=.:/- only"
            return 1 ;;
        esac
        genv_arg=" vcu.samples_env=$(echo $VCU_SAMPLES_GUEST_ENV | tr ' ' ',')"
    fi
    for ((g = 0; g < vms; g++)); do
        env "$genv" VCU_DAEMON_SOCK="$VCU_DAEMON_SOCK" VCU_NO_BUILD=1 VCU_VM_NAME="samples-$g" \
            VCU_VM_LOGDIR="$gdir/vm-$g" VCU_VM_MEM="${VCU_SAMPLES_VM_MEM:-3072}" VCU_VM_DISK="$disk" \
            VCU_VM_TIMEOUT=$((left - 5)) \
            VCU_GUEST_APPEND="vcu.samples_part=$g/$vms vcu.samples_until=$deadline vcu.samples_timeout=$gt$genv_arg" \
            tests/vm/run.sh samples ${VCU_SAMPLES_GPUS:+"gpus=$VCU_SAMPLES_GPUS"} \
            >"$logs/guest-$g.out" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    cp "$VCU_DAEMON_LOG" "$logs/guest-daemon.log" 2>/dev/null
    vcu_daemon_stop
    for ((g = 0; g < vms; g++)); do
        cp "$gdir/vm-$g/samples.log" "$logs/guest-$g.log" 2>/dev/null || continue
        # A log per sample, and its verdict.
        awk -v dir="$logs" -v res="$res" '
            /^VCU-SAMPLE-BEGIN / { name = $2; f = dir "/" name ".guest.log"; printf "" >f; next }
            /^VCU-SAMPLE-END / {
                print $3, $4 >(res "/" $2 ".guest"); close(res "/" $2 ".guest")
                if (f != "") close(f)
                name = ""; f = ""; next
            }
            name != "" { print >>f }
        ' "$logs/guest-$g.log"
    done
    say "guest: $vms guests ended $((SECONDS - t_guest)) s after the column began" \
        "(consoles: $sname/guest-N.log, run.sh: $sname/guest-N.out)"
}

# run_sample NAME DIR EXE RUNS: each run natively, then each on ours;
# a mode's verdict, in $res/NAME.MODE ("VERDICT EXIT-STATUS [WHY]"), is
# its first run's that does not pass.
run_sample() {
    local name=$1 dir=$bld/$2 exe=$3 mode r rc st log ts
    local -a runs
    IFS=';' read -ra runs <<<"$4"
    [ ${#runs[@]} -gt 0 ] || runs=("")
    local modes="native ours"
    # A library sample's output is compared with native's (same_output):
    # a second native run says whether it is the same from run to run.
    [ "$sset" != libs ] || modes="native native2 ours"
    for mode in $modes; do
        log=$logs/$name.$mode.log
        : >"$log"
        if [ "${mode#native}" != "$mode" ] && [ -z "$real" ]; then
            echo "NO-GPU - no GPU here" >"$res/$name.$mode"
            continue
        fi
        if [ "$mode" = ours ] && [ -n "$ours_why" ]; then
            echo "NOT-RUN - $ours_why" >"$res/$name.$mode"
            continue
        fi
        st=PASS
        rc=0
        ts=$SECONDS
        for r in "${runs[@]}"; do
            if [ "$SECONDS" -ge $((t0 + time_s)) ]; then
                st="NOT-RUN"
                rc="- out of time (VCU_SAMPLES_TIME_S=$time_s)"
                break
            fi
            echo "== ./$exe $r" >>"$log"
            # shellcheck disable=SC2086 # the arguments are words
            if [ "${mode#native}" != "$mode" ]; then
                (cd "$dir" && timeout -k 5 "$tmo" "./$exe" $r </dev/null >>"$log" 2>&1)
            else
                (cd "$dir" && VCU_TRANSPORT=loopback VCU_LIBCUDA=$ours_real \
                    LD_LIBRARY_PATH=$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
                    timeout -k 5 "$tmo" "./$exe" $r </dev/null >>"$log" 2>&1)
            fi
            rc=$?
            echo "== exit status $rc" >>"$log"
            st=$(classify "$rc")
            [ "$st" = PASS ] || break
        done
        echo "$st $rc" >"$res/$name.$mode"
        # The guest column hands out the longest first.
        [ "$mode" = native ] && echo $((SECONDS - ts)) >"$res/$name.native.secs"
    done
}

run() {
    local name dir exe gpus_min why runs n=0
    if [ ! -f "$work/plan.tsv" ] || [ ! -d "$bld" ]; then
        say "nothing built yet (tests/gpu/samples.sh build)"
        return 1
    fi
    rm -rf "$res"
    mkdir -p "$res" "$work/lib"
    # Ours: only our libcuda.so.1 on the loader path, so that NVIDIA's
    # runtime (static in each program) and libraries take its calls.
    ln -sfn "$top/build/guest-lib-loopback/libcuda.so.1" "$work/lib/libcuda.so.1"
    ln -sfn libcuda.so.1 "$work/lib/libcuda.so"
    real=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{ print $NF; exit }')
    gpus=0
    if [ -n "$real" ] && command -v nvidia-smi >/dev/null; then
        gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    fi
    if [ "$gpus" = 0 ]; then
        say "no GPU here (no libcuda.so.1 or no GPU in nvidia-smi -L): no native runs"
        real=
    else
        say "$gpus GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1)"
    fi
    ours_real=${VCU_LIBCUDA:-$real}
    ours_why=
    if [ ! -e "$top/build/guest-lib-loopback/libcuda.so.1" ]; then
        ours_why="no build/guest-lib-loopback/libcuda.so.1 (make guest-lib-loopback; tests/gpu/prepare.sh bundles it)"
    elif [ -z "$ours_real" ]; then
        ours_why="no libcuda.so.1 for ours to run over (VCU_LIBCUDA)"
    fi
    if [ -n "$ours_why" ]; then
        say "$ours_why: no runs on ours"
    else
        say "ours: build/guest-lib-loopback/libcuda.so.1 over $ours_real"
    fi
    while IFS=$'\t' read -r name dir exe gpus_min why runs; do
        [ "$why" = - ] || continue
        [ -x "$bld/$dir/$exe" ] || continue
        [ "$gpus" = 0 ] || [ "$gpus_min" -le "$gpus" ] || continue
        while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do
            wait -n
        done
        run_sample "$name" "$dir" "$exe" "$runs" </dev/null &
        n=$((n + 1))
    done <"$work/plan.tsv"
    wait
    say "$n samples run, $((SECONDS - t0)) s since the start"
}

# why_not NAME MODE: for the table, why a mode did not pass: the first
# error-looking line of its log, else its last line.
why_not() {
    local st rc why l t
    read -r st rc why <"$res/$1.$2" 2>/dev/null || { echo "no verdict"; return; }
    if [ "$st" = NO-GPU ] || [ "$st" = NOT-RUN ]; then
        l=$why
    else
        l=$(grep -v '^== ' "$logs/$1.$2.log" 2>/dev/null | grep -i -m 1 -E 'not supported|error|fail')
        [ -n "$l" ] || l=$(grep -v -e '^== ' -e '^[[:space:]]*$' "$logs/$1.$2.log" 2>/dev/null | tail -n 1)
        [ -n "$l" ] || l="no output"
        t=$tmo
        [ "$2" != guest ] || t=${VCU_SAMPLES_GUEST_TIMEOUT:-240}
        [ "$st" != TIMEOUT ] || l="timed out after $t s; last: $l"
        [ "$st" != WAIVED ] || l="waived (exit status 2): $l"
        [ "$st" != FAIL ] || l="exit status $rc: $l"
    fi
    printf '%s' "$l" | tr -d '\r' | tr '|' '/' | cut -c1-200
}

# prog_tail LOG: of the last 30 lines a run printed (a guest's log holds
# those after "== ..."), the last 24 of those that name no time or rate
# and are not our library's own notes ("libcuda (virtio-cuda): ...", on
# stderr: the program's output is what is compared).
prog_tail() {
    if grep -q '^== \.\.\.$' "$1" 2>/dev/null; then
        sed -n '/^== \.\.\.$/,$p' "$1" | grep -v '^== '
    else
        grep -v '^== ' "$1" 2>/dev/null
    fi | tr -d '\r' | tail -n 30 | grep -v '^libcuda (virtio-cuda): ' |
        grep -v -i -E 'time|[0-9.] *(ms|us|s|sec|seconds)\b|flop|gb/s|bandwidth|elapsed|speed' |
        tail -n 24
}

# Library samples whose output depends on timing, not compared:
# LtSgemmSimpleAutoTuning prints the algorithm it timed fastest.
varying_output="sample_cublasLt_LtSgemmSimpleAutoTuning"

# same_output NAME MODE: a library sample's MODE run printed what its native
# run did (or its two native runs differ, or it is one of $varying_output,
# so that nothing can be said); otherwise prints the first line that
# differs.
same_output() {
    local n m
    [[ " $varying_output " != *" $1 "* ]] || return 0
    n=$(prog_tail "$logs/$1.native.log")
    [ "$n" = "$(prog_tail "$logs/$1.native2.log")" ] || return 0
    m=$(prog_tail "$logs/$1.$2.log")
    [ "$n" != "$m" ] || return 0
    diff <(printf '%s\n' "$n") <(printf '%s\n' "$m") | grep -m 1 '^>' | cut -c3-
    return 1
}

# not_built NAME DIR: why a sample has no program.
not_built() {
    local l
    if [ "$sset" = libs ]; then
        l=$(grep -m 1 -i -E 'error|undefined reference' "$logs/build/$1.log" 2>/dev/null)
        [ -n "$l" ] || l="no program ($sname/build/$1.log)"
        printf '%s' "$l" | tr '|' '/' | cut -c1-200
        return
    fi
    l=$(awk -F'\t' -v n="$1" '$1 == n { print $2; exit }' "$work/dropped.tsv" 2>/dev/null)
    [ -n "$l" ] || l=$(grep -m 1 -E "sample '$1'|build of the $1 sample" "$logs/configure.log" 2>/dev/null |
        sed 's/^-- //')
    [ -n "$l" ] || l=$(grep -E "$2/" "$logs/build.log" 2>/dev/null |
        grep -m 1 -i -E 'error|undefined reference')
    if [ -z "$l" ] && [ "$(cat "$work/build-state" 2>/dev/null)" = cut ]; then
        l="the build was stopped before it (call again to go on)"
    fi
    [ -n "$l" ] || l="no program ($sname/build.log)"
    printf '%s' "$l" | tr '|' '/' | cut -c1-200
}

table() {
    local name dir exe gpus_min why runs nat ours detail md=$out/$sname.md
    local passed=0 failed=0 excluded='' nobuild='' noruns='' skipped=0 failures=''
    local g='' gh='' gl='' gv=- cnt=ours cv
    # With the guest column, the guest's verdicts count; ours (loopback)
    # stays beside them.
    case ",$what," in *,guest,*) g=1 gh=' guest |' gl='---|' cnt=guest ;; esac
    {
        echo "# $title: natively, on ours${g:+ and in a guest}"
        echo
        echo "$title $(sed -n 's/^commit //p' "$src/vcu-packed.txt" 2>/dev/null)," \
            "architectures ${VCU_SAMPLES_ARCHS:-$(theirs)}, $(date -u '+%Y-%m-%d %H:%M UTC')," \
            "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
                head -n 1 | grep . || echo none)"
        echo
        echo "| sample | native | ours |$gh first error-looking line of the $cnt run, or why not run |"
        echo "|---|---|---|$gl---|"
    } >"$md"
    while IFS=$'\t' read -r name dir exe gpus_min why runs; do
        gv=-
        if [ "$why" != - ]; then
            nat=SKIP ours=SKIP detail=$why
            skipped=$((skipped + 1))
        elif [ ! -x "$bld/$dir/$exe" ]; then
            nat=NOT-BUILT ours=NOT-BUILT detail=$(not_built "$name" "$dir")
            nobuild="$nobuild $name"
        elif [ "${gpus:-0}" != 0 ] && [ "$gpus_min" -gt "$gpus" ]; then
            nat=SKIP ours=SKIP detail="needs $gpus_min GPUs, this machine has $gpus"
            skipped=$((skipped + 1))
        else
            nat=NOT-RUN ours=NOT-RUN
            read -r nat _ <"$res/$name.native" 2>/dev/null
            read -r ours _ <"$res/$name.ours" 2>/dev/null
            [ -z "$g" ] || read -r gv _ <"$res/$name.guest" 2>/dev/null
            cv=$ours
            [ -z "$g" ] || cv=$gv
            detail=
            [ "$cv" = PASS ] || detail=$(why_not "$name" "$cnt")
            if [ "$sset" = libs ] && [ "$nat/$cv" = PASS/PASS ] && ! detail=$(same_output "$name" "$cnt"); then
                detail="output differs from native's, first: $(printf '%s' "$detail" | tr '|' '/' | cut -c1-160)"
                cv=DIFF
                if [ -n "$g" ]; then gv=DIFF; else ours=DIFF; fi
            fi
            case $nat/$cv in
                PASS/PASS) passed=$((passed + 1)) ;;
                PASS/NOT-RUN | PASS/- | NO-GPU/* | NOT-RUN/*) noruns="$noruns $name" ;;
                PASS/*)
                    failed=$((failed + 1))
                    failures="$failures $name"
                    ;;
                *)
                    excluded="$excluded $name"
                    detail="excluded, $nat natively: $(why_not "$name" native)"
                    ;;
            esac
        fi
        if [ -n "$g" ]; then
            printf '%-32s %-9s %-9s %-9s %s\n' "$name" "$nat" "$ours" "$gv" "$detail"
            echo "| $name | $nat | $ours | $gv | $detail |" >>"$md"
        else
            printf '%-32s %-9s %-9s %s\n' "$name" "$nat" "$ours" "$detail"
            echo "| $name | $nat | $ours | $detail |" >>"$md"
        fi
    done <"$work/plan.tsv"
    {
        echo
        echo "Skipped: $skipped (tests/gpu/samples-skip.txt, test_args.json, GPUs)."
        echo "Not built:${nobuild:- none}."
        echo "Excluded (do not pass natively):${excluded:- none}."
        [ -z "$noruns" ] || echo "Not run, not counted (no GPU, no $cnt run, or out of time):$noruns."
        echo "Fail on $cnt:${failures:- none}."
        echo
        echo "$passed passed, $failed failed"
    } >>"$md"
    say "not built:${nobuild:- none}"
    say "excluded (do not pass natively):${excluded:- none}"
    [ -z "$noruns" ] || say "not run, not counted (no GPU, no $cnt run, or out of time):$noruns"
    say "fail on $cnt:${failures:- none}"
    say "table: $md, logs: $logs/; counted: the $cnt column"
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
}

rc=0
case ",$what," in *,build,*) build || rc=1 ;; esac
if [ ! -f "$work/plan.tsv" ]; then
    echo "0 passed, 1 failed"
    exit 1
fi
case ",$what," in *,run,*) run || rc=1 ;; esac
t_guest=$SECONDS
gdir=
case ",$what," in *,guest,*) guest || rc=1 ;; esac
[ -z "$gdir" ] || rm -rf "$gdir"
case ",$what," in *,run,* | *,guest,*) table || rc=1 ;; esac
exit $rc
