#!/usr/bin/env python3
"""Generates libcuda.so.1's tables from the one call list.

    gen-cuda.py LIST CUDA_INCLUDE CUDART_ERRLIST OUT.c

LIST (cuda_calls.list) names every Driver API entry point and how ours
provides it (local: by hand; unsupported: a generated stub).  From CUDA's
headers it derives:

  - the cuGetProcAddress table: every (base name, CUDA version, per-thread)
    variant the toolkit's typedef headers declare (PFN_<base>_v<version>
    [_ptds|_ptsz]), each mapped to the exported name that implements that
    ABI.  Per base, the newest default variant is the name cuda.h's
    #define gives (cuMemAlloc -> cuMemAlloc_v2), older ones are <base>,
    <base>_v2, ... in version order; a per-thread variant is the default
    variant of its ABI (the newest one at or before its version) with the
    _ptds/_ptsz suffix.  Every mapped name must be in LIST;
  - the stubs of the unsupported names;
  - the CUresult names and messages (cuda.h's enum cudaError_enum; the
    message is NVIDIA's runtime wording from cudart_errlist.h where the
    runtime has the same number, else the first sentence of cuda.h's
    comment).

Fails (exit 1) with the reason if the headers and the list disagree.
"""
import os
import re
import sys


def die(msg):
    sys.stderr.write("gen-cuda.py: %s\n" % msg)
    sys.exit(1)


def read_list(path):
    calls = {}
    order = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or parts[1] not in ("local", "unsupported"):
                die("%s:%d: want 'NAME local|unsupported'" % (path, ln))
            name, how = parts
            if not re.fullmatch(r"cu[A-Za-z0-9_]+", name):
                die("%s:%d: bad name %s" % (path, ln, name))
            if name in calls:
                die("%s:%d: %s listed twice" % (path, ln, name))
            calls[name] = how
            order.append(name)
    return calls, order


# The graphics-interop headers count too: the toolkit's stub exports none of
# their names, NVIDIA's Linux driver does (and its runtime asks for them).
TYPEDEF_HEADERS = ["cudaTypedefs.h", "cudaProfilerTypedefs.h", "cudaGLTypedefs.h",
                   "cudaEGLTypedefs.h", "cudaVDPAUTypedefs.h"]
API_HEADERS = ["cuda.h", "cudaProfiler.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h"]
# Typedef'd, but not exported by NVIDIA's Linux driver (580.159.04,
# measured: docs/driver-api.md), so not by ours: a Windows call and one
# EGL call.
NOT_ON_LINUX = {"cuWGLGetDevice", "cuEventCreateFromEGLSync"}


def read_typedefs(inc):
    pfn = re.compile(r"\(\s*CUDAAPI\s*\*\s*PFN_(cu\w+)_v(\d+)(_ptds|_ptsz)?\s*\)")
    out = set()
    for h in TYPEDEF_HEADERS:
        p = os.path.join(inc, h)
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for m in pfn.finditer(f.read()):
                out.add((m.group(1), int(m.group(2)), m.group(3) or ""))
    if not out:
        die("no PFN_ typedefs in %s" % inc)
    return out


def count_params(text):
    text = text.strip()
    if text in ("", "void"):
        return 0
    depth = 0
    n = 1
    for c in text:
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            n += 1
    return n


def read_signatures(inc, defines):
    """Parameter counts: of each PFN typedef (by its full PFN name) and of
    each prototype in the API headers (by function name)."""
    pfn = re.compile(r"\(\s*CUDAAPI\s*\*\s*PFN_(cu\w+)\s*\)\s*\(([^;]*?)\)\s*;", re.S)
    proto = re.compile(r"CUresult\s+CUDAAPI\s+(cu\w+)\s*\(([^;]*?)\)\s*;", re.S)
    nparams, protos = {}, {}
    for h in TYPEDEF_HEADERS:
        p = os.path.join(inc, h)
        if os.path.exists(p):
            with open(p) as f:
                for m in pfn.finditer(f.read()):
                    nparams[m.group(1)] = count_params(m.group(2))
    for h in API_HEADERS:
        p = os.path.join(inc, h)
        if not os.path.exists(p):
            continue
        with open(p) as f:
            src = f.read()
        # Before its #undef, a prototype of a #defined name declares the
        # define's target (cuMemAlloc is cuMemAlloc_v2 there).
        undef = {m.group(1): m.start() for m in re.finditer(r"#\s*undef\s+(cu\w+)", src)}
        for m in proto.finditer(src):
            name = m.group(1)
            if name in defines and m.start() < undef.get(name, len(src)):
                name = defines[name]
            protos.setdefault(name, count_params(m.group(2)))
    return nparams, protos


def read_defines(inc):
    d = re.compile(r"^\s*#\s*define\s+(cu\w+)\s+(?:__CUDA_API_PT(?:DS|SZ)\(\s*(cu\w+)\s*\)|(cu\w+))\s*$",
                   re.M)
    out = {}
    for h in API_HEADERS:
        p = os.path.join(inc, h)
        if not os.path.exists(p):
            continue
        with open(p) as f:
            for m in d.finditer(f.read()):
                if (m.group(2) or m.group(3)) != m.group(1):
                    out.setdefault(m.group(1), m.group(2) or m.group(3))
    return out


def proc_table(typedefs, defines, calls, nparams, protos):
    bases = {}
    for base, ver, pt in typedefs:
        if base in NOT_ON_LINUX:
            continue
        bases.setdefault(base, {"": [], "_ptds": [], "_ptsz": []})[pt].append(ver)
    rows = []
    errors = []
    for base in sorted(bases):
        dflt = sorted(bases[base][""])
        names = {}
        for i, v in enumerate(dflt):
            n = base if i == 0 else "%s_v%d" % (base, i + 1)
            names[v] = n
            rows.append((base, v, 0, n, v))
        # cuda.h's #define names the newest ABI; it must agree.  A define
        # to another function (cuGraphInstantiate -> ...WithFlags) has no
        # typedef of this base behind it and says nothing here.
        want = defines.get(base)
        if want is not None and re.fullmatch(re.escape(base) + r"(_v\d+)?", want) and \
                want != names[dflt[-1]]:
            errors.append("%s: cuda.h says %s, the typedefs %s" % (base, want, names[dflt[-1]]))
        for suf in ("_ptds", "_ptsz"):
            for v in sorted(bases[base][suf]):
                abi = [d for d in dflt if d <= v]
                if not abi:
                    errors.append("%s%s at %d has no default variant" % (base, suf, v))
                    continue
                rows.append((base, v, 1, names[max(abi)] + suf, max(abi)))
    for base, v, pt, n, _ in rows:
        want = nparams.get("%s_v%d%s" % (base, v, "" if not pt else n[-5:]))
        have = protos.get(n)
        if want is not None and have is not None and want != have:
            errors.append("%s at %d: PFN has %d parameters, %s has %d" % (base, v, want, n, have))
        if n not in calls:
            errors.append("%s at %d%s maps to %s, which cuda_calls.list lacks" %
                          (base, v, " per-thread" if pt else "", n))
    if errors:
        die("; ".join(errors))
    rows.sort(key=lambda r: (r[0].encode(), r[2], r[1]))
    return rows


def read_errors(inc, errlist):
    with open(os.path.join(inc, "cuda.h")) as f:
        src = f.read()
    m = re.search(r"typedef enum cudaError_enum \{(.*?)\}\s*CUresult;", src, re.S)
    if not m:
        die("no enum cudaError_enum in cuda.h")
    body = m.group(1)
    runtime = {}
    with open(errlist) as f:
        for mm in re.finditer(r'XX\(\w+,\s*(\d+),\s*"((?:[^"\\]|\\.)*)"\)', f.read()):
            runtime.setdefault(int(mm.group(1)), mm.group(2))
    out = []
    for mm in re.finditer(r"/\*\*(.*?)\*/\s*(CUDA_\w+)\s*=\s*(\d+)", body, re.S):
        doc, name, val = mm.group(1), mm.group(2), int(mm.group(3))
        text = " ".join(l.strip().lstrip("*").strip() for l in doc.splitlines())
        text = re.sub(r"\\deprecated\s*", "", text)
        text = re.sub(r"::|\\p |\\ref ", "", text).strip()
        first = re.split(r"(?<=[a-z0-9)])\.\s", text + " ", maxsplit=1)[0].rstrip(". ")
        msg = runtime.get(val, first)
        out.append((val, name, msg.replace("\\", "\\\\").replace('"', '\\"')))
    if len(out) < 50:
        die("only %d CUresult values found in cuda.h" % len(out))
    return out


def main():
    if len(sys.argv) != 5:
        die("usage: gen-cuda.py LIST CUDA_INCLUDE CUDART_ERRLIST OUT.c")
    lst, inc, errlist, outp = sys.argv[1:]
    calls, order = read_list(lst)
    defines = read_defines(inc)
    nparams, protos = read_signatures(inc, defines)
    rows = proc_table(read_typedefs(inc), defines, calls, nparams, protos)
    errs = read_errors(inc, errlist)
    o = []
    o.append("/* Generated by guest-lib/gen-cuda.py from cuda_calls.list and CUDA's\n"
             " * headers (%s); do not edit. */\n" % inc)
    o.append('#include "cuda_gen.h"\n\n')
    o.append("/* The stubs: CUDA_ERROR_NOT_SUPPORTED, the name logged once. */\n")
    o.append("#define VCU__STUB(name)                                             \\\n"
             "    __attribute__((visibility(\"default\"))) int name(void);          \\\n"
             "    __attribute__((visibility(\"default\"))) int name(void)           \\\n"
             "    {                                                               \\\n"
             "        static int once;                                            \\\n"
             "        return vcu__cu_unsupported(&once, #name);                   \\\n"
             "    }\n\n")
    for n in order:
        if calls[n] == "unsupported":
            o.append("VCU__STUB(%s)\n" % n)
    o.append("\n/* The hand-written entry points, by address only (types in cuda.h). */\n")
    for n in order:
        if calls[n] == "local":
            o.append("void %s(void);\n" % n)
    o.append("\nconst vcu__proc_t vcu__procs[] = {\n")
    for base, v, pt, n, abi in rows:
        o.append('    { "%s", %d, %d, %d, (void *)%s },\n' % (base, v, pt, abi, n))
    o.append("};\nconst size_t vcu__nprocs = sizeof(vcu__procs) / sizeof(vcu__procs[0]);\n\n")
    o.append("const vcu__errname_t vcu__errnames[] = {\n")
    for val, name, msg in errs:
        o.append('    { %d, "%s", "%s" },\n' % (val, name, msg))
    o.append("};\nconst size_t vcu__nerrnames = sizeof(vcu__errnames) / sizeof(vcu__errnames[0]);\n")
    tmp = outp + ".tmp"
    with open(tmp, "w") as f:
        f.write("".join(o))
    os.replace(tmp, outp)


if __name__ == "__main__":
    main()
