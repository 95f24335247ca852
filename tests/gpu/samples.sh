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
#
#   build  unpack (again when the archive or the settings changed),
#          configure, build with make -k -j16 until VCU_SAMPLES_BUILD_S;
#          the build folder (build/samples) stays between calls on a warm
#          machine, so a build cut short goes on at the next call
#   run    run every built sample, VCU_SAMPLES_JOBS at a time
#   guest  a third column, the program in a TCG guest: not there yet
#          (run_guest below is where it goes)
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
#   VCU_LIBCUDA=PATH         the libcuda.so.1 under ours (default: the
#                            system's, from ldconfig)
#   VCU_CMAKE=PATH           cmake (default: the one on PATH, else the
#                            GPU machine's /opt/torch/.venv/bin/cmake)
#
# Output: a line per sample (native, ours, and for a failure the first
# error-looking line of our run), the same table as markdown in
# $OUT/samples.md, each run's log in $OUT/samples/.  Only samples that pass
# natively count; the last line is "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
top=$PWD
out=${OUT:-build/gpu-out}
case $out in /*) ;; *) out=$top/$out ;; esac
logs=$out/samples
work=$top/build/samples
src=$work/src/samples-src
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
for a in build/samples-src.tar.xz build/gpu-bundle/samples-src.tar.xz; do
    [ -f "$a" ] && { archive=$a; break; }
done

# unpack: a fresh tree when the archive, the architectures or the choice
# of samples changed; then the Python below rewrites its CMake files (the
# architectures; no add_subdirectory for a sample not built) and writes
# the plan, a line per sample: name, category, program, GPUs it needs,
# why it is skipped (or -), its runs' arguments (";" between runs).
unpack() {
    local stamp
    stamp="$(cksum <"$archive") archs=${VCU_SAMPLES_ARCHS:-} only=$only"
    stamp="$stamp skip=$(cksum <tests/gpu/samples-skip.txt)"
    if [ -f "$work/stamp" ] && [ "$(cat "$work/stamp")" = "$stamp" ] && [ -f "$work/plan.tsv" ]; then
        return 0
    fi
    rm -rf "$work/src" "$bld" "$res" "$work/stamp" "$work/plan.tsv" "$work/dropped.tsv" \
        "$work/configured" "$work/build-state"
    mkdir -p "$work/src"
    tar -xJf "$archive" -C "$work/src" || { say "cannot unpack $archive"; return 1; }
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
        print('\t'.join([name, cat, exe, str(conf.get('min_gpus', 1)), why,
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
            say "$d: not built: its CMake file fails here (samples/configure.log)"
        done
    done
    say "configure failed: samples/configure.log"
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

build() {
    local pid deadline
    if [ -z "$archive" ]; then
        say "no build/samples-src.tar.xz (tests/gpu/prepare.sh makes it from a cuda-samples mirror)"
        return 1
    fi
    unpack || return 1
    say "cuda-samples $(sed -n 's/^commit //p' "$src/vcu-packed.txt")"
    if [ -n "${VCU_SAMPLES_ARCHS:-}" ]; then
        say "architectures: $VCU_SAMPLES_ARCHS (VCU_SAMPLES_ARCHS; the samples' own list: $(theirs))"
    else
        say "architectures: $(theirs) (the samples' own list; VCU_SAMPLES_ARCHS=90 builds one)"
    fi
    configure || return 1
    # make in a session of its own, so the whole build (nvcc, cicc, ptxas)
    # stops when the time is up.
    deadline=$((t0 + build_s))
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
        say "build ended after $((SECONDS - t0)) s (samples/build.log)"
    fi
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

# run_guest NAME EXE RUNS...: the program in a TCG guest (tests/vm), its
# verdict in $res/NAME.guest.  Not there yet: the programs would go into
# a guest image the way tests/gpu/run.sh's suites do, with the samples'
# data files beside them.
run_guest() {
    echo "NOT-RUN - guest runs are not there yet (tests/gpu/samples.sh: run_guest)" >"$res/$1.guest"
}

# run_sample NAME CAT EXE RUNS: each run natively, then each on ours;
# a mode's verdict, in $res/NAME.MODE ("VERDICT EXIT-STATUS [WHY]"), is
# its first run's that does not pass.
run_sample() {
    local name=$1 dir=$bld/Samples/$2/$1 exe=$3 mode r rc st log
    local -a runs
    IFS=';' read -ra runs <<<"$4"
    [ ${#runs[@]} -gt 0 ] || runs=("")
    for mode in native ours; do
        log=$logs/$name.$mode.log
        : >"$log"
        if [ "$mode" = native ] && [ -z "$real" ]; then
            echo "NO-GPU - no GPU here" >"$res/$name.$mode"
            continue
        fi
        if [ "$mode" = ours ] && [ -n "$ours_why" ]; then
            echo "NOT-RUN - $ours_why" >"$res/$name.$mode"
            continue
        fi
        st=PASS
        rc=0
        for r in "${runs[@]}"; do
            if [ "$SECONDS" -ge $((t0 + time_s)) ]; then
                st="NOT-RUN"
                rc="- out of time (VCU_SAMPLES_TIME_S=$time_s)"
                break
            fi
            echo "== ./$exe $r" >>"$log"
            # shellcheck disable=SC2086 # the arguments are words
            if [ "$mode" = native ]; then
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
    done
    case ",$what," in *,guest,*) run_guest "$name" "$exe" "${runs[@]}" ;; esac
}

run() {
    local name cat exe gpus_min why runs n=0
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
    while IFS=$'\t' read -r name cat exe gpus_min why runs; do
        [ "$why" = - ] || continue
        [ -x "$bld/Samples/$cat/$name/$exe" ] || continue
        [ "$gpus" = 0 ] || [ "$gpus_min" -le "$gpus" ] || continue
        while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do
            wait -n
        done
        run_sample "$name" "$cat" "$exe" "$runs" </dev/null &
        n=$((n + 1))
    done <"$work/plan.tsv"
    wait
    say "$n samples run, $((SECONDS - t0)) s since the start"
}

# why_not NAME MODE: for the table, why a mode did not pass: the first
# error-looking line of its log, else its last line.
why_not() {
    local st rc why l
    read -r st rc why <"$res/$1.$2" 2>/dev/null || { echo "no verdict"; return; }
    if [ "$st" = NO-GPU ] || [ "$st" = NOT-RUN ]; then
        l=$why
    else
        l=$(grep -v '^== ' "$logs/$1.$2.log" 2>/dev/null | grep -i -m 1 -E 'not supported|error|fail')
        [ -n "$l" ] || l=$(grep -v -e '^== ' -e '^[[:space:]]*$' "$logs/$1.$2.log" 2>/dev/null | tail -n 1)
        [ -n "$l" ] || l="no output"
        [ "$st" != TIMEOUT ] || l="timed out after $tmo s; last: $l"
        [ "$st" != WAIVED ] || l="waived (exit status 2): $l"
        [ "$st" != FAIL ] || l="exit status $rc: $l"
    fi
    printf '%s' "$l" | tr -d '\r' | tr '|' '/' | cut -c1-200
}

# not_built NAME DIR: why a sample has no program.
not_built() {
    local l
    l=$(awk -F'\t' -v n="$1" '$1 == n { print $2; exit }' "$work/dropped.tsv" 2>/dev/null)
    [ -n "$l" ] || l=$(grep -m 1 -E "sample '$1'|build of the $1 sample" "$logs/configure.log" 2>/dev/null |
        sed 's/^-- //')
    [ -n "$l" ] || l=$(grep -E "Samples/$2/$1/" "$logs/build.log" 2>/dev/null |
        grep -m 1 -i -E 'error|undefined reference')
    if [ -z "$l" ] && [ "$(cat "$work/build-state" 2>/dev/null)" = cut ]; then
        l="the build was stopped before it (call again to go on)"
    fi
    [ -n "$l" ] || l="no program (samples/build.log)"
    printf '%s' "$l" | tr '|' '/' | cut -c1-200
}

table() {
    local name cat exe gpus_min why runs nat ours detail md=$out/samples.md
    local passed=0 failed=0 excluded='' nobuild='' noruns='' skipped=0 failures=''
    local g='' gh='' gl='' gv=''
    # The guest column (run_guest), when asked for.
    case ",$what," in *,guest,*) g=1 gh=' guest |' gl='---|' ;; esac
    {
        echo "# cuda-samples: natively and on ours"
        echo
        echo "cuda-samples $(sed -n 's/^commit //p' "$src/vcu-packed.txt" 2>/dev/null)," \
            "architectures ${VCU_SAMPLES_ARCHS:-$(theirs)}, $(date -u '+%Y-%m-%d %H:%M UTC')," \
            "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
                head -n 1 | grep . || echo none)"
        echo
        echo "| sample | native | ours |$gh first error-looking line of our run, or why not run |"
        echo "|---|---|---|$gl---|"
    } >"$md"
    while IFS=$'\t' read -r name cat exe gpus_min why runs; do
        if [ "$why" != - ]; then
            nat=SKIP ours=SKIP detail=$why
            skipped=$((skipped + 1))
        elif [ ! -x "$bld/Samples/$cat/$name/$exe" ]; then
            nat=NOT-BUILT ours=NOT-BUILT detail=$(not_built "$name" "$cat")
            nobuild="$nobuild $name"
        elif [ "${gpus:-0}" != 0 ] && [ "$gpus_min" -gt "$gpus" ]; then
            nat=SKIP ours=SKIP detail="needs $gpus_min GPUs, this machine has $gpus"
            skipped=$((skipped + 1))
        else
            nat=NOT-RUN ours=NOT-RUN
            read -r nat _ <"$res/$name.native" 2>/dev/null
            read -r ours _ <"$res/$name.ours" 2>/dev/null
            detail=
            [ "$ours" = PASS ] || detail=$(why_not "$name" ours)
            case $nat/$ours in
                PASS/PASS) passed=$((passed + 1)) ;;
                PASS/NOT-RUN | NO-GPU/* | NOT-RUN/*) noruns="$noruns $name" ;;
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
            gv=-
            read -r gv _ <"$res/$name.guest" 2>/dev/null
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
        [ -z "$noruns" ] || echo "Not run, not counted (no GPU, no ours, or out of time):$noruns."
        echo "Fail on ours:${failures:- none}."
        echo
        echo "$passed passed, $failed failed"
    } >>"$md"
    say "not built:${nobuild:- none}"
    say "excluded (do not pass natively):${excluded:- none}"
    [ -z "$noruns" ] || say "not run, not counted (no GPU, no ours, or out of time):$noruns"
    say "fail on ours:${failures:- none}"
    say "table: $md, logs: $logs/"
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
case ",$what," in *,guest,*) say "guest column: not there yet (run_guest)" ;; esac
case ",$what," in *,run,* | *,guest,*) table || rc=1 ;; esac
exit $rc
