#!/usr/bin/env bash
# On the build machine, offline: packs NVIDIA's sample programs from a local
# git mirror for tests/gpu/samples.sh on the GPU machine (which has no
# network).
#
#   tests/gpu/samples-pack.sh [cuda|libs]      (default cuda)
#
#   cuda  NVIDIA/cuda-samples (VCU_SAMPLES_MIRROR: the bare mirror) into
#         build/samples-src.tar.xz: one folder, samples-src/, the tree at
#         the mirror's HEAD less what no sample that runs without a display
#         needs (documents, Windows binaries, the Jetson-only samples, the
#         data files of the samples in tests/gpu/samples-skip.txt, outputs
#         committed next to their sources)
#   libs  NVIDIA/CUDALibrarySamples (VCU_LIBSAMPLES_MIRROR) into
#         build/libsamples-src.tar.xz: libsamples-src/, the cuBLASLt,
#         cuSPARSE, cuSOLVER and cuFFT folders less documents and pictures,
#         at commit VCU_LIBSAMPLES_COMMIT (default caa6575, 2025-11-24: the
#         last before the samples moved to CUDA 13.1's cuBLASLt, which the
#         GPU machine's CUDA 13.0 does not have: at the mirror's HEAD no
#         cuBLASLt sample builds there)
#
# Each archive's folder also holds vcu-packed.txt: the commit, and the files
# the mirror lists but does not hold.  No mirror: says so and exits 0 (the
# samples case on the GPU machine then says the archive is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
set=${1:-cuda}
case $set in
    cuda)
        mirror=${VCU_SAMPLES_MIRROR:-/work/.mirror/NVIDIA+cuda-samples/repo}
        rev=HEAD
        dir=samples-src
        ;;
    libs)
        mirror=${VCU_LIBSAMPLES_MIRROR:-/work/.mirror/NVIDIA+CUDALibrarySamples/repo}
        rev=${VCU_LIBSAMPLES_COMMIT:-caa6575f0e6be91f0b00cc63250610418d205d0f}
        dir=libsamples-src
        ;;
    *)
        echo "samples-pack: no set $set (cuda or libs)" >&2
        exit 2
        ;;
esac
out=build/$dir.tar.xz

if ! commit=$(git -C "$mirror" rev-parse -q --verify "$rev^{commit}" 2>/dev/null); then
    echo "samples-pack: no $set mirror at $mirror: $out not made"
    exit 0
fi
stage=$(mktemp -d "${TMPDIR:-/tmp}/vcu-samples-pack.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$dir" build

python3 - "$mirror" "$commit" tests/gpu/samples-skip.txt "$stage/$dir" "$set" <<'PY'
import os, subprocess, sys

mirror, commit, skipfile, dest, which = sys.argv[1:6]
skipped = set()
for line in open(skipfile):
    line = line.split('#', 1)[0].split()
    if line:
        skipped.add(line[0])

TOP = ('CMakeLists.txt', 'LICENSE', 'README.md', 'test_args.json', 'run_tests.py')
DOCS = ('.doc', '.docx', '.pdf', '.vsd', '.xls')
DATA = ('.ppm', '.pgm', '.bmp', '.bin', '.raw', '.dat', '.nv12', '.yuv', '.rgba',
        '.flo', '.dds', '.png', '.jpg', '.gif', '.spv', '.mtx')
# Written by the sample itself on each run; committed by mistake.
OUTPUTS = ('Samples/5_Domain_Specific/HSOpticalFlow/FlowCPU.flo',
           'Samples/5_Domain_Specific/HSOpticalFlow/FlowGPU.flo')

LIBS = ('cuBLASLt', 'cuSPARSE', 'cuSOLVER', 'cuFFT')

def wanted_lib(path):
    parts = path.split('/')
    if len(parts) == 1:
        return path == 'LICENSE.md'
    return parts[0] in LIBS and not path.lower().endswith(DOCS + ('.png', '.md'))

def wanted(path):
    if which == 'libs':
        return wanted_lib(path)
    parts = path.split('/')
    if len(parts) == 1:
        return path in TOP
    if parts[0] == 'cmake':
        return True
    if parts[0] == 'Common':
        return parts[1] not in ('GL', 'lib')        # GL headers, Windows libraries
    if parts[0] != 'Samples':
        return False
    if len(parts) == 2:
        return parts[1] == 'CMakeLists.txt'
    if parts[1] == '8_Platform_Specific':
        return False
    if 'doc' in parts or '.vscode' in parts or path.lower().endswith(DOCS):
        return False
    if path in OUTPUTS:
        return False
    if len(parts) > 3 and parts[2] in skipped and path.lower().endswith(DATA):
        return False
    return True

ls = subprocess.run(['git', '-C', mirror, 'ls-tree', '-r', '-z', commit],
                    check=True, capture_output=True).stdout
entries = []
for rec in ls.split(b'\0'):
    if not rec:
        continue
    meta, path = rec.split(b'\t', 1)
    mode, kind, oid = meta.split()
    path = path.decode()
    if kind == b'blob' and wanted(path):
        entries.append((mode.decode(), oid.decode(), path))

# One git process answers every blob: "<oid> blob <size>\n<bytes>\n", or
# "<oid> missing" for an object the mirror lists but does not hold.
cat = subprocess.Popen(['git', '-C', mirror, 'cat-file', '--batch'],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
absent = []
nbytes = 0
for mode, oid, path in entries:
    cat.stdin.write(oid.encode() + b'\n')
    cat.stdin.flush()
    head = cat.stdout.readline().split()
    if len(head) < 3 or head[1] != b'blob':
        absent.append(path)
        continue
    data = cat.stdout.read(int(head[2]))
    cat.stdout.read(1)
    target = os.path.join(dest, path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if mode == '120000':
        os.symlink(data.decode(), target)
        continue
    with open(target, 'wb') as f:
        f.write(data)
    os.chmod(target, 0o755 if mode == '100755' else 0o644)
    nbytes += len(data)
cat.stdin.close()
cat.wait()

with open(os.path.join(dest, 'vcu-packed.txt'), 'w') as f:
    f.write(f'commit {commit}\n')
    for path in absent:
        f.write(f'absent {path}\n')
print(f'samples-pack: {len(entries) - len(absent)} files, {nbytes / 1048576:.1f} MiB, '
      f'{len(absent)} absent from the mirror')
for path in absent:
    print(f'samples-pack: absent from the mirror: {path}')
PY

tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$dir" |
    xz -9 -T2 >"$out.tmp"
mv "$out.tmp" "$out"
echo "samples-pack: $out: $set $commit, $(du -k "$out" | cut -f1) KiB"
