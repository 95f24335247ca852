#!/usr/bin/env python3
"""Generates libcuda.so.1's tables and the remote calls from the one call list.

    gen-cuda.py LIST CUDA_INCLUDE CUDART_ERRLIST OUT.c FWD.c CALLS.h
    gen-cuda.py --host LIST CUDA_INCLUDE OUTDIR
    gen-cuda.py --counts LIST [DOC [--write]]
    gen-cuda.py --host-fns LIST CUDA_INCLUDE SOURCE...

LIST (cuda_calls.list) names every Driver API entry point and how ours
provides it (local: by hand; unsupported: generated, each returning
CUDA_ERROR_NOT_SUPPORTED and naming itself; remote: a generated
forwarder over the generic opcode CU_CALL).  From CUDA's headers it
derives:

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
    comment);
  - for the remote names, from each prototype in cuda.h: the wire structs
    and call numbers both sides share (CALLS.h, vcu_calls.h), the guest's
    entry points (FWD.c) and, with --host, the host's decoding, checks and
    driver calls (cuda_calls.inc, included by host-backend/worker/cuda.c) and
    its table of driver functions (cuda_calls_fns.h).  An argument the
    generator cannot carry (guest memory of no fixed size, arrays,
    callbacks, new objects) fails the build with the reason.

With --counts, the list's counts (generated, hand-written with the
reason, not supported; the reasons; the host's driver functions) as
docs/driver-api.md shows them: printed, checked against DOC's (the unit
suite's call_list_counts and check-libcuda-exports.sh) or written there.

Fails (exit 1) with the reason if the headers and the list disagree.
"""
import os
import re
import sys


def die(msg):
    sys.stderr.write("gen-cuda.py: %s\n" % msg)
    sys.exit(1)


# Call numbers no longer used ("# retired 0xNNNN ..." lines of the list):
# never given again, since an older guest may still send them.
RETIRED = set()
# The reasons a call is local ("# why KEY: text" lines), in the list's
# order, and each local call's.
WHYS = {}
LOCAL_WHY = {}
# The driver functions the host calls by hand (host-calls, host-needs):
# name -> whether the backend needs it to start, in the list's order.
HOST_FNS = {}
# A remote call's host step after its driver call (after=FN: FN(o), in
# the worker, whatever the result).
AFTER = {}


def read_list(path):
    """calls: name -> local|unsupported|remote; remote: name -> (call
    number or None for a per-thread variant, {argument: [allowed enum
    values]}, line, whether the entry point is hand-written) for the
    remote names and the local names that have a number."""
    calls = {}
    order = []
    remote = {}
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            m = re.match(r"#\s*retired\s+(0x[0-9a-fA-F]{4})\b", line)
            if m:
                RETIRED.add(int(m.group(1), 16))
            m = re.match(r"#\s*why\s+([a-z][a-z-]*):\s*(\S.*?)\s*$", line)
            if m:
                if m.group(1) in WHYS:
                    die("%s:%d: reason %s given twice" % (path, ln, m.group(1)))
                WHYS[m.group(1)] = m.group(2)
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            marks = [m for m in parts[2:] if m in ("host-calls", "host-needs")]
            if len(marks) > 1:
                die("%s:%d: host-calls or host-needs, once" % (path, ln))
            if marks:
                HOST_FNS[parts[0]] = marks[0] == "host-needs"
                parts.remove(marks[0])
            if len(parts) < 2 or parts[1] not in ("local", "unsupported", "remote") or \
                    (parts[1] == "unsupported" and len(parts) != 2):
                die("%s:%d: want 'NAME unsupported', 'NAME local [NUMBER [ARG=V|V...]] WHY' or "
                    "'NAME remote [NUMBER] [ARG=V|V...]'" % (path, ln))
            name, how = parts[:2]
            if not re.fullmatch(r"cu[A-Za-z0-9_]+", name):
                die("%s:%d: bad name %s" % (path, ln, name))
            # A local call's last word: why it is written by hand.
            if how == "local":
                if len(parts) < 3 or not re.fullmatch(r"[a-z][a-z-]*", parts[-1]):
                    die("%s:%d: %s: a local call needs its reason (a '# why' key) last" %
                        (path, ln, name))
                if parts[-1] not in WHYS:
                    die("%s:%d: %s: no '# why %s:' line above" % (path, ln, name, parts[-1]))
                LOCAL_WHY[name] = parts.pop()
            if name in calls:
                die("%s:%d: %s listed twice" % (path, ln, name))
            calls[name] = how
            order.append(name)
            if how == "unsupported" or (how == "local" and len(parts) == 2):
                continue
            rest = parts[2:]
            num = None
            if rest and re.fullmatch(r"0x[0-9a-fA-F]{4}", rest[0]):
                num = int(rest.pop(0), 16)
            if how == "local" and num is None:
                die("%s:%d: a local call with a generated host side needs its number" % (path, ln))
            allow = {}
            for a in rest:
                m = re.fullmatch(r"after=(vcu__\w+)", a)
                if m:
                    AFTER[name] = m.group(1)
                    continue
                m = re.fullmatch(r"(\w+)=(CU_\w+(?:\|CU_\w+)*)", a)
                if not m:
                    die("%s:%d: bad annotation %s (want ARG=CU_VALUE|CU_VALUE...)" % (path, ln, a))
                allow[m.group(1)] = m.group(2).split("|")
            remote[name] = (num, allow, ln, how == "local")
    unused = [k for k in WHYS if k not in LOCAL_WHY.values()]
    if unused:
        die("%s: no local call gives the reason %s" % (path, ", ".join(unused)))
    return calls, order, remote


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
    nparams, protos, ptext = {}, {}, {}
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
            ptext.setdefault(name, " ".join(m.group(2).split()))
    return nparams, protos, ptext


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


# ---- remote calls: plain forwarders, one generic opcode (CU_CALL) --------

# Handle types: the guest's object kind and the host's table type and the
# field of a table entry that holds the driver's object.  A handle names
# an object of the request's device (the guest checks, the host again).
HANDLES = {
    "CUstream": ("VCU__K_STREAM", "VCU__H_STREAM", "st"),
    "CUevent": ("VCU__K_EVENT", "VCU__H_EVENT", "ev"),
    "CUfunction": ("VCU__K_FUNCTION", "VCU__H_FUNCTION", "fn.f"),
    "CUgraph": ("VCU__K_GRAPH", "VCU__H_GRAPH", "graph.g"),
    "CUgraphExec": ("VCU__K_GEXEC", "VCU__H_GRAPH_EXEC", "exec.ge"),
    "CUgraphNode": ("VCU__K_GNODE", "VCU__H_GRAPH_NODE", "node.n"),
    "CUmemoryPool": ("VCU__K_POOL", "VCU__H_POOL", "pool"),
}
# Scalar types and how they travel in their 64-bit slot: i32 sign
# extended, u32 and enums zero extended, f32 as its IEEE bits; the host
# refuses a slot its type cannot hold (VCU_S_EINVAL).
SCALARS = {
    "int": "i32", "unsigned int": "u32", "unsigned": "u32", "cuuint32_t": "u32", "size_t": "u64",
    "CUdeviceptr": "u64", "cuuint64_t": "u64", "unsigned long long": "u64", "float": "f32",
}
# Fixed-size structs and unions that may travel as bytes (a pointer to
# one: in if const, else out).  These unions hold a guest event handle
# in one member (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT and
# LAUNCH_COMPLETION_EVENT), which must never reach the host's driver:
# a call passing one must name the selector values it carries
# (ARG=CU_...|...), and the host refuses every other value.
BLOBS = {"CUstreamAttrValue", "CUkernelNodeAttrValue", "CUlaunchAttributeValue"}


def read_enums(inc):
    """Enum type names of cuda.h, typedef chains followed."""
    with open(os.path.join(inc, "cuda.h")) as f:
        src = f.read()
    enums = set(m.group(1) for m in re.finditer(r"typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;", src))
    alias = dict((m.group(2), m.group(1)) for m in re.finditer(r"typedef\s+(\w+)\s+(\w+)\s*;", src))
    changed = True
    while changed:
        changed = False
        for new, old in alias.items():
            if old in enums and new not in enums:
                enums.add(new)
                changed = True
    values = set(m.group(1) for m in re.finditer(r"\b(CU_[A-Z0-9_]+)\s*=", src))
    return enums, values


def parse_param(text):
    t = " ".join(text.replace("*", " * ").split())
    if "[" in t or "(" in t or t.count("*") > 1:
        return None
    m = re.fullmatch(r"(const )?([A-Za-z_][\w ]*?)( \*)? (\w+)", t)
    if not m:
        return None
    return {"const": bool(m.group(1)), "type": m.group(2), "ptr": bool(m.group(3)),
            "name": m.group(4)}


def remote_calls(remote, ptext, inc):
    """The remote calls by number: name, params with their wire class,
    allow-lists, per-thread variants.  Dies with the reason for anything
    that is not plain."""
    enums, values = read_enums(inc)
    bynum, byname, errors = {}, {}, []
    for name, (num, allow, ln, local) in sorted(remote.items(), key=lambda kv: kv[1][2]):
        m = re.fullmatch(r"(\w+?)(_ptsz|_ptds)", name)
        if m and not local:
            if num is not None or allow:
                errors.append("line %d: %s: a per-thread variant takes its base's number "
                              "and annotations" % (ln, name))
            continue
        if num is None:
            errors.append("line %d: %s: a remote call needs a number (0x0001..0xffff)" % (ln, name))
            continue
        if num == 0 or num in bynum or num in RETIRED:
            errors.append("line %d: %s: call number 0x%04x is 0, taken or retired" % (ln, name, num))
            continue
        if name not in ptext:
            errors.append("line %d: %s: no prototype in the API headers" % (ln, name))
            continue
        params = []
        raw = ptext[name]
        plist = [] if raw.strip() in ("", "void") else split_params(raw)
        for p in plist:
            q = parse_param(p)
            if q is None:
                errors.append("%s: argument '%s' is not plain (an array, a function or a "
                              "pointer to a pointer): keep the call local" % (name, p))
                break
            ty = q["type"]
            if q["name"] in ("c", "r"):
                errors.append("%s: argument name %s is reserved" % (name, q["name"]))
                break
            if not q["ptr"] and ty in HANDLES:
                q["cls"] = "handle"
            elif not q["ptr"] and ty == "CUdevice":
                q["cls"] = "dev"
            elif not q["ptr"] and (ty in SCALARS or ty in enums):
                q["cls"] = "scalar"
            elif q["ptr"] and not q["const"] and (ty in SCALARS or ty in enums):
                q["cls"] = "out"
            elif q["ptr"] and ty in BLOBS:
                q["cls"] = "inblob" if q["const"] else "outblob"
            else:
                what = "a new object (its handle is made by hand)" if q["ptr"] and ty in HANDLES \
                    else "guest memory of no fixed size" if ty in ("void", "char") \
                    else "a type the generator does not carry (a callback, a struct by value, an opaque value)"
                errors.append("%s: argument '%s' is %s: keep the call local" % (name, p, what))
                break
            q["wire"] = "u32" if ty in enums else SCALARS.get(ty, "")
            params.append(q)
        else:
            # A pointer beside a count is an array, whatever its type says.
            counts = [q["name"] for q in params if not q["ptr"] and q["type"] == "size_t" and
                      re.fullmatch(r"count|num[A-Z]\w*|\w+Count", q["name"])]
            if counts and any(q["cls"] in ("out", "outblob") for q in params):
                errors.append("%s: a pointer beside the count '%s' is an array: keep the call "
                              "local" % (name, counts[0]))
            names = [q["name"] for q in params]
            for a, vals in allow.items():
                q = next((q for q in params if q["name"] == a), None)
                if q is None or q["cls"] != "scalar" or q["type"] not in enums:
                    errors.append("line %d: %s: %s is not an enum argument" % (ln, name, a))
                for v in vals:
                    if v not in values:
                        errors.append("line %d: %s: %s is not in cuda.h" % (ln, name, v))
                q and q.setdefault("allow", vals)
            if any(q["cls"] in ("inblob", "outblob") for q in params) and not allow:
                errors.append("line %d: %s: a union argument needs its selector's allowed "
                              "values (ARG=CU_...|...)" % (ln, name))
            if len(names) != len(set(names)):
                errors.append("%s: repeated argument names" % name)
            c = {"name": name, "num": num, "params": params, "local": local,
                 "variants": [] if local else [(name, 0)]}
            bynum[num] = c
            byname[name] = c
    for name, (num, allow, ln, local) in remote.items():
        m = re.fullmatch(r"(\w+?)(_ptsz|_ptds)", name)
        if not m or local:
            continue
        base = byname.get(m.group(1))
        if base is None or base["local"]:
            errors.append("line %d: %s: its base %s is not a remote call" % (ln, name, m.group(1)))
            continue
        if not any(q["type"] == "CUstream" for q in base["params"]):
            errors.append("line %d: %s: a per-thread variant of a call without a stream" % (ln, name))
        base["variants"].append((name, 1))
    if errors:
        die("; ".join(errors))
    return [bynum[n] for n in sorted(bynum)]


def split_params(text):
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p.strip() for p in out]


def fnv32(data):
    h = 0x811c9dc5
    for b in data.encode():
        h = ((h ^ b) * 0x01000193) & 0xffffffff
    return h


def calls_hash(calls):
    text = ";".join("%d %s%s %s %s" % (c["num"], c["name"], " local" if c["local"] else "",
                                      ",".join("%s%s%s %s" % ("const " if q["const"] else "", q["type"],
                                                            "*" if q["ptr"] else "", q["cls"])
                                               for q in c["params"]),
                                      ",".join("%s=%s" % (q["name"], "|".join(q["allow"]))
                                               for q in c["params"] if "allow" in q))
                    for c in calls)
    return fnv32(text)


def proto_of(c, name):
    ps = ", ".join("%s%s %s%s" % ("const " if q["const"] else "", q["type"], "*" if q["ptr"] else "",
                                  q["name"]) for q in c["params"])
    return "CUresult CUDAAPI %s(%s)" % (name, ps or "void")


def gen_calls_h(calls, inc):
    o = ["/* Generated by include/gen-cuda.py from cuda_calls.list and CUDA's\n"
         " * headers (%s); do not edit.\n *\n"
         " * The remote calls: each a Driver API call carried by CU_CALL (vcu_proto.h)\n"
         " * as its number, then one 64-bit slot per handle, device and scalar\n"
         " * argument in the prototype's order, then the bytes of each struct it\n"
         " * reads (padded to 8).  The reply: vcu_cu_resp, then a slot per scalar\n"
         " * result, then the bytes of each struct it fills.  Include after cuda.h. */\n" % inc,
         "#ifndef VCU_CALLS_H\n#define VCU_CALLS_H\n\n#include \"vcu_proto.h\"\n\n",
         "#ifndef CUDA_VERSION\n#error \"include cuda.h before vcu_calls.h\"\n#endif\n\n",
         "/* Both sides are built from one list; CU_CALL carries this hash of it\n"
         " * and a host built from another list refuses the request. */\n",
         "#define VCU_CALLS_HASH 0x%08xu\n\n" % calls_hash(calls),
         "/* A struct argument's bytes on the wire. */\n#define VCU_CALL_BLOB(T) ((sizeof(T) + 7) / 8 * 8)\n\n",
         "/* A request of call name, zeroed but for its number and the hash\n"
         " * (memset: string.h). */\n"
         "#define VCU_CALL_INIT(rq, name)                                      \\\n"
         "    do {                                                             \\\n"
         "        memset(&(rq), 0, sizeof(rq));                                \\\n"
         "        (rq).c.call = VCU_CALL_##name;                               \\\n"
         "        (rq).c.hash = VCU_CALLS_HASH;                                \\\n"
         "    } while (0)\n\n",
         "/* XX(name, number) */\n#define VCU_CALLS_MAP(XX) \\\n"]
    o.append("".join("    XX(%s, 0x%04x) \\\n" % (c["name"], c["num"]) for c in calls))
    o.append("\n\n#define VCU_CALL_ENUM_(name, num) VCU_CALL_##name = (num),\n"
             "enum { VCU_CALLS_MAP(VCU_CALL_ENUM_) };\n#undef VCU_CALL_ENUM_\n\n")
    for c in calls:
        n = c["name"]
        o.append("/* %s%s */\n" % (proto_of(c, n), "\n * (the guest's entry point is written by hand)"
                                     if c["local"] else ""))
        o.append("struct vcu_call_%s_req {\n    struct vcu_cu_call_req c;\n" % n)
        size = "16"
        for q in c["params"]:
            if q["cls"] in ("handle", "dev", "scalar"):
                o.append("    vcu_le64 %s;\n" % q["name"])
                size += " + 8"
        for q in c["params"]:
            if q["cls"] == "inblob":
                o.append("    vcu_u8 %s[VCU_CALL_BLOB(%s)];\n" % (q["name"], q["type"]))
                size += " + VCU_CALL_BLOB(%s)" % q["type"]
        o.append("};\nVCU_PROTO_ASSERT(sizeof(struct vcu_call_%s_req) == %s, \"%s req\");\n" %
                 (n, size, n))
        o.append("struct vcu_call_%s_resp {\n    struct vcu_cu_resp r;\n" % n)
        size = "8"
        for q in c["params"]:
            if q["cls"] == "out":
                o.append("    vcu_le64 %s;\n" % q["name"])
                size += " + 8"
        for q in c["params"]:
            if q["cls"] == "outblob":
                o.append("    vcu_u8 %s[VCU_CALL_BLOB(%s)];\n" % (q["name"], q["type"]))
                size += " + VCU_CALL_BLOB(%s)" % q["type"]
        o.append("};\nVCU_PROTO_ASSERT(sizeof(struct vcu_call_%s_resp) == %s, \"%s resp\");\n\n" %
                 (n, size, n))
    o.append("#endif /* VCU_CALLS_H */\n")
    return "".join(o)


def enc(q, expr):
    """C expression: argument -> its 64-bit slot."""
    w = q["wire"]
    if w == "i32":
        return "(uint64_t)(int64_t)%s" % expr
    if w == "u32":
        return "(uint64_t)(uint32_t)%s" % expr
    return "(uint64_t)%s" % expr


def gen_fwd(calls, inc):
    o = ["/* Generated by include/gen-cuda.py from cuda_calls.list and CUDA's\n"
         " * headers (%s); do not edit.\n *\n"
         " * The remote calls' entry points: check the result pointers, name the\n"
         " * device, translate handles, send one CU_CALL and wait for its reply\n"
         " * (cuda_remote.c has the helpers). */\n" % inc,
         "#include <string.h>\n\n#include \"cuda_int.h\"\n#include \"vcu_calls.h\"\n"]
    for c in calls:
        n = c["name"]
        ps = c["params"]
        for vname, ptsz in c["variants"]:
            o.append("\nVCU__EXPORT %s\n{\n" % proto_of(c, vname).replace("CUresult CUDAAPI", "CUresult"))
            o.append("    struct vcu_call_%s_req r;\n    struct vcu_call_%s_resp o;\n" % (n, n))
            o.append("    vcu__rc_t rc;\n    CUresult e;\n\n")
            ptrs = [q["name"] for q in ps if q["cls"] in ("out", "inblob", "outblob")]
            if ptrs:
                o.append("    if (%s)\n        return CUDA_ERROR_INVALID_VALUE;\n" %
                         " || ".join("%s == NULL" % p for p in ptrs))
            o.append("    memset(&r, 0, sizeof(r));\n    memset(&o, 0, sizeof(o));\n")
            dev = next((q for q in ps if q["cls"] == "dev"), None)
            h = next((q for q in ps if q["cls"] == "handle"), None)
            if dev is not None:
                o.append("    e = vcu__rc_at_dev(&rc, %s);\n" % dev["name"])
            elif h is not None:
                o.append("    e = vcu__rc_at_obj(&rc, %s, (const void *)%s, %d);\n" %
                         (HANDLES[h["type"]][0], h["name"], ptsz))
            else:
                o.append("    e = vcu__rc_at_ctx(&rc);\n")
            for q in ps:
                if q["cls"] == "handle":
                    o.append("    if (e == CUDA_SUCCESS)\n        e = vcu__rc_handle(&rc, %s, "
                             "(const void *)%s, %d, &r.%s);\n" %
                             (HANDLES[q["type"]][0], q["name"], ptsz, q["name"]))
                elif q["cls"] == "dev":
                    o.append("    if (e == CUDA_SUCCESS)\n        e = vcu__rc_device(%s, &r.%s);\n" %
                             (q["name"], q["name"]))
            o.append("    if (e != CUDA_SUCCESS)\n        return e;\n")
            for q in ps:
                if q["cls"] == "scalar":
                    if q["wire"] == "f32":
                        o.append("    {\n        uint32_t b;\n\n        memcpy(&b, &%s, sizeof(b));\n"
                                 "        r.%s = b;\n    }\n" % (q["name"], q["name"]))
                    else:
                        o.append("    r.%s = %s;\n" % (q["name"], enc(q, q["name"])))
                elif q["cls"] == "inblob":
                    o.append("    memcpy(r.%s, %s, sizeof(*%s));\n" % (q["name"], q["name"], q["name"]))
            o.append("    e = vcu__rc_call(&rc, VCU_CALL_%s, &r.c, sizeof(r), &o.r, sizeof(o));\n" % n)
            o.append("    if (e != CUDA_SUCCESS)\n        return e;\n")
            for q in ps:
                if q["cls"] == "out":
                    if q["wire"] == "f32":
                        o.append("    {\n        uint32_t b = (uint32_t)o.%s;\n\n"
                                 "        memcpy(%s, &b, sizeof(b));\n    }\n" % (q["name"], q["name"]))
                    else:
                        o.append("    *%s = (%s)o.%s;\n" % (q["name"], q["type"], q["name"]))
                elif q["cls"] == "outblob":
                    o.append("    memcpy(%s, o.%s, sizeof(*%s));\n" % (q["name"], q["name"], q["name"]))
            o.append("    return CUDA_SUCCESS;\n}\n")
    return "".join(o)


def gen_host_fns(calls, inc):
    o = ["/* Generated by include/gen-cuda.py from cuda_calls.list and CUDA's\n"
         " * headers (%s); do not edit.\n *\n"
         " * The driver functions of the remote calls, resolved as the executor's own (cuda.c): a missing one makes\n"
         " * its call CUDA_ERROR_NOT_SUPPORTED. */\n" % inc,
         "typedef struct vcu__gen_fns_s {\n"]
    for c in calls:
        ps = ", ".join("%s%s%s" % ("const " if q["const"] else "", q["type"], " *" if q["ptr"] else "")
                       for q in c["params"]) or "void"
        o.append("    CUresult (CUDAAPI *p_%s)(%s);\n" % (c["name"], ps))
    o.append("} vcu__gen_fns_t;\n\n#define VCU__GEN_FUNCS(XX) \\\n")
    o.append("".join("    XX(%s) \\\n" % c["name"] for c in calls))
    o.append("\n")
    o.append("/* The driver functions the executor calls by hand (the list's host-calls\n"
             " * and host-needs lines): XX(name, whether the backend needs it to start;\n"
             " * else a missing one makes its calls CUDA_ERROR_NOT_SUPPORTED).  Each\n"
             " * name is the one the driver exports (cuMemAlloc_v2), which cuda.h's\n"
             " * macros also give the worker's code (cuMemAlloc). */\n"
             "#define VCU__HOST_FUNCS(XX) \\\n")
    o.append("".join("    XX(%s, %d) \\\n" % (n, r) for n, r in HOST_FNS.items()))
    o.append("\n")
    return "".join(o)


def gen_host(calls, inc):
    o = ["/* Generated by include/gen-cuda.py from cuda_calls.list and CUDA's\n"
         " * headers (%s); do not edit.\n *\n"
         " * Included by cuda.c: CU_CALL's decoding, checks and calls.  Each\n"
         " * call: the payload exactly its size, every slot a value of its\n"
         " * type, selectors within their allowed values,\n"
         " * devices the VM's, handles the session's of their type and of the\n"
         " * request's device; then the driver function, in the request\n"
         " * device's context (a call on devices alone, with no handle, makes\n"
         " * no context). */\n\n" % inc]
    for c in calls:
        n = c["name"]
        ps = c["params"]
        o.append("static uint32_t vcu__run_%s(vcu__op_t *o, const struct vcu_call_%s_req *rq,\n"
                 "        struct vcu_call_%s_resp *rp)\n{\n" % (n, n, n))
        for q in ps:
            if q["cls"] == "handle" and q["type"] == "CUstream":
                o.append("    CUstream a_%s;\n" % q["name"])
            elif q["cls"] == "handle":
                o.append("    vcu__hent_t *e_%s;\n" % q["name"])
            elif q["cls"] == "dev":
                o.append("    CUdevice a_%s;\n" % q["name"])
            elif q["cls"] == "scalar" and q["wire"] == "f32":
                o.append("    float a_%s;\n" % q["name"])
            elif q["cls"] in ("out",):
                o.append("    %s v_%s = 0;\n" % (q["type"], q["name"]))
            elif q["cls"] in ("inblob", "outblob"):
                o.append("    %s b_%s;\n" % (q["type"], q["name"]))
        if not any(q["cls"] in ("out", "outblob") for q in ps):
            o.append("    (void)rp;\n")
        if not any(q["cls"] in ("handle", "dev", "scalar", "inblob") for q in ps):
            o.append("    (void)rq;\n")
        o.append("\n")
        for q in ps:
            if q["cls"] != "scalar":
                continue
            w = q["wire"]
            if w == "i32":
                o.append("    if ((int64_t)rq->%s < INT_MIN || (int64_t)rq->%s > INT_MAX)\n"
                         "        return VCU_S_EINVAL;\n" % (q["name"], q["name"]))
            elif w in ("u32", "f32"):
                o.append("    if (rq->%s > UINT32_MAX)\n        return VCU_S_EINVAL;\n" % q["name"])
            if w == "f32":
                o.append("    {\n        uint32_t b = (uint32_t)rq->%s;\n\n"
                         "        memcpy(&a_%s, &b, sizeof(b));\n    }\n" % (q["name"], q["name"]))
        for q in ps:
            if "allow" in q:
                o.append("    switch (rq->%s) {\n" % q["name"])
                o.append("".join("    case %s:\n" % v for v in q["allow"]))
                o.append("        break;\n    default:\n        o->res = CUDA_ERROR_NOT_SUPPORTED;\n"
                         "        return VCU_S_OK;\n    }\n")
        for q in ps:
            if q["cls"] == "dev":
                o.append("    if (vcu__gen_dev(o, rq->%s, &a_%s) != 0)\n        return VCU_S_OK;\n" %
                         (q["name"], q["name"]))
        if any(q["cls"] == "dev" for q in ps) and not any(q["cls"] == "handle" for q in ps):
            # A device's own call needs no context: none is made for it
            # (a context costs GPU memory), the header's device is checked.
            o.append("    if (vcu__dev_of(o) >= o->cu->ndev) {\n"
                     "        o->res = CUDA_ERROR_INVALID_DEVICE;\n        return VCU_S_OK;\n    }\n")
        else:
            o.append("    VCU__ENTER(o);\n")
        for q in ps:
            if q["cls"] == "handle" and q["type"] == "CUstream":
                o.append("    if (vcu__gen_stream(o, rq->%s, &a_%s) != 0)\n        return VCU_S_OK;\n" %
                         (q["name"], q["name"]))
            elif q["cls"] == "handle":
                o.append("    if ((e_%s = vcu__gen_get(o, rq->%s, %s)) == NULL)\n        return VCU_S_OK;\n" %
                         (q["name"], q["name"], HANDLES[q["type"]][1]))
            elif q["cls"] == "inblob":
                o.append("    memcpy(&b_%s, rq->%s, sizeof(b_%s));\n" % (q["name"], q["name"], q["name"]))
            elif q["cls"] == "outblob":
                o.append("    memset(&b_%s, 0, sizeof(b_%s));\n" % (q["name"], q["name"]))
        args = []
        for q in ps:
            cl = q["cls"]
            if cl == "handle":
                args.append("a_%s" % q["name"] if q["type"] == "CUstream" else
                            "e_%s->u.%s" % (q["name"], HANDLES[q["type"]][2]))
            elif cl == "dev":
                args.append("a_%s" % q["name"])
            elif cl == "scalar":
                args.append("a_%s" % q["name"] if q["wire"] == "f32" else
                            "(%s)rq->%s" % (q["type"], q["name"]))
            elif cl == "out":
                args.append("&v_%s" % q["name"])
            else:
                args.append("&b_%s" % q["name"])
        o.append("    o->res = VCU__GEN_CU(o->cu, %s%s);\n" % (n, "".join(", " + a for a in args)))
        if n in AFTER:
            o.append("    %s(o);\n" % AFTER[n])
        outs = [q for q in ps if q["cls"] in ("out", "outblob")]
        if outs:
            o.append("    if (o->res != CUDA_SUCCESS)\n        return VCU_S_OK;\n")
        for q in outs:
            if q["cls"] == "outblob":
                o.append("    memcpy(rp->%s, &b_%s, sizeof(b_%s));\n" % (q["name"], q["name"], q["name"]))
            elif q["wire"] == "f32":
                o.append("    {\n        uint32_t b;\n\n        memcpy(&b, &v_%s, sizeof(b));\n"
                         "        rp->%s = b;\n    }\n" % (q["name"], q["name"]))
            else:
                o.append("    rp->%s = %s;\n" % (q["name"], enc(q, "v_" + q["name"])))
        o.append("    return VCU_S_OK;\n}\n\n")
        o.append("static uint32_t vcu__call_%s(vcu__op_t *o)\n{\n"
                 "    struct vcu_call_%s_req rq;\n    struct vcu_call_%s_resp rp;\n    uint32_t st;\n\n"
                 "    if (o->plen != sizeof(rq))\n        return VCU_S_EINVAL;\n"
                 "    if (o->cap < sizeof(rp))\n        return VCU_S_ERANGE;\n"
                 "    memcpy(&rq, o->p, sizeof(rq));\n    memset(&rp, 0, sizeof(rp));\n"
                 "    st = vcu__run_%s(o, &rq, &rp);\n"
                 "    if (st == VCU_S_OK)\n        vcu__gen_reply(o, &rp, sizeof(rp));\n"
                 "    return st;\n}\n\n" % (n, n, n, n))
    o.append("/* CU_CALL: the call's number, then its own decoder. */\n"
             "static uint32_t vcu__op_CU_CALL(vcu__op_t *o)\n{\n"
             "    struct vcu_cu_call_req c;\n\n    memcpy(&c, o->p, sizeof(c));\n"
             "    if (c.hash != VCU_CALLS_HASH)\n        return VCU_S_EVERSION;\n"
             "    switch (c.call) {\n"
             "#define VCU__CALL_CASE(name, num) case VCU_CALL_##name: return vcu__call_##name(o);\n"
             "    VCU_CALLS_MAP(VCU__CALL_CASE)\n#undef VCU__CALL_CASE\n    }\n"
             "    return VCU_S_ENOTSUP;\n}\n")
    return "".join(o)


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main_host(argv):
    """gen-cuda.py --host LIST CUDA_INCLUDE OUTDIR: vcu_calls.h,
    cuda_calls_fns.h and cuda_calls.inc for the host backend."""
    if len(argv) != 3:
        die("usage: gen-cuda.py --host LIST CUDA_INCLUDE OUTDIR")
    lst, inc, outd = argv
    calls, order, remote = read_list(lst)
    defines = read_defines(inc)
    _, _, ptext = read_signatures(inc, defines)
    rc = remote_calls(remote, ptext, inc)
    write(os.path.join(outd, "vcu_calls.h"), gen_calls_h(rc, inc))
    write(os.path.join(outd, "cuda_calls_fns.h"), gen_host_fns(rc, inc))
    write(os.path.join(outd, "cuda_calls.inc"), gen_host(rc, inc))


COUNTS_BEGIN = "<!-- counts: include/gen-cuda.py --counts, from the list; do not edit -->"
COUNTS_END = "<!-- end of counts -->"


def counts_md(calls, order, remote):
    """docs/driver-api.md's counts, as a markdown block."""
    names = {k: [n for n in order if calls[n] == k] for k in ("remote", "local", "unsupported")}
    numbered = [n for n in names["remote"] if remote[n][0] is not None]
    hostgen = [n for n in names["local"] if n in remote]
    o = [COUNTS_BEGIN, "",
         "| how ours provides it | names | |", "| --- | ---: | --- |",
         "| generated on both sides (`remote`) | %d | %d calls, %d per-thread forms of them |" %
         (len(names["remote"]), len(numbered), len(names["remote"]) - len(numbered)),
         "| written by hand, with its reason (`local`) | %d | %d of them with a generated "
         "host side (`local NUMBER`) |" % (len(names["local"]), len(hostgen)),
         "| not supported (`unsupported`) | %d | generated: `CUDA_ERROR_NOT_SUPPORTED`, naming the call |" % len(names["unsupported"]),
         "| all | %d | |" % len(order), "",
         "| why a call is local (`# why`) | names |", "| --- | ---: |"]
    for k, text in WHYS.items():
        o.append("| `%s`: %s | %d |" % (k, text, sum(1 for v in LOCAL_WHY.values() if v == k)))
    o += ["", "The host calls %d driver functions by hand (`host-calls`, `host-needs`; %d of them "
          "needed to start), and those of the %d generated calls through their own table." %
          (len(HOST_FNS), sum(1 for r in HOST_FNS.values() if r),
           len(numbered) + len(hostgen)), "", COUNTS_END]
    return "\n".join(o) + "\n"


def main_counts(argv):
    """gen-cuda.py --counts LIST [DOC [--write]]: prints the counts block,
    or checks DOC's (exit 1 if it differs), or rewrites it."""
    if len(argv) not in (1, 2, 3) or (len(argv) == 3 and argv[2] != "--write"):
        die("usage: gen-cuda.py --counts LIST [DOC [--write]]")
    calls, order, remote = read_list(argv[0])
    block = counts_md(calls, order, remote)
    if len(argv) == 1:
        sys.stdout.write(block)
        return
    with open(argv[1]) as f:
        doc = f.read()
    i, j = doc.find(COUNTS_BEGIN), doc.find(COUNTS_END)
    if i < 0 or j < i:
        die("%s: no counts block (%s ... %s)" % (argv[1], COUNTS_BEGIN, COUNTS_END))
    j += len(COUNTS_END) + 1
    if doc[i:j] == block:
        return
    if len(argv) == 3:
        write(argv[1], doc[:i] + block + doc[j:])
        return
    die("%s: its counts are not the list's; rewrite them with: include/gen-cuda.py --counts "
        "%s %s --write" % (argv[1], argv[0], argv[1]))


def main_host_fns(argv):
    """gen-cuda.py --host-fns LIST CUDA_INCLUDE SOURCE...: fails unless the
    list's host-calls and host-needs lines are exactly the driver
    functions the sources call by hand (fn.NAME, VCU__CU(cu, NAME, ...),
    NAME through cuda.h's macros).  That every one called is marked, the
    compiler says too; that none is marked for nothing, only this."""
    if len(argv) < 3:
        die("usage: gen-cuda.py --host-fns LIST CUDA_INCLUDE SOURCE...")
    read_list(argv[0])
    defines = read_defines(argv[1])
    used = set()
    pat = re.compile(r"\bfn\.(cu\w+)|\bVCU__CU\(\s*[^,()]+,\s*(cu\w+)")
    for src in argv[2:]:
        with open(src) as f:
            for m in pat.finditer(f.read()):
                n = m.group(1) or m.group(2)
                used.add(defines.get(n, n))
    stale = sorted(set(HOST_FNS) - used)
    missing = sorted(used - set(HOST_FNS))
    if stale or missing:
        die("%s: %s%s%s" % (argv[0], "marked host-calls/host-needs but called by no source: %s"
                            % ", ".join(stale) if stale else "", "; " if stale and missing else "",
                            "called but not marked: %s" % ", ".join(missing) if missing else ""))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--host":
        main_host(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--host-fns":
        main_host_fns(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--counts":
        main_counts(sys.argv[2:])
        return
    if len(sys.argv) != 7:
        die("usage: gen-cuda.py LIST CUDA_INCLUDE CUDART_ERRLIST OUT.c FWD.c CALLS.h")
    lst, inc, errlist, outp, fwdp, callsp = sys.argv[1:]
    calls, order, remote = read_list(lst)
    defines = read_defines(inc)
    nparams, protos, ptext = read_signatures(inc, defines)
    rc = remote_calls(remote, ptext, inc)
    rows = proc_table(read_typedefs(inc), defines, calls, nparams, protos)
    errs = read_errors(inc, errlist)
    o = []
    o.append("/* Generated by include/gen-cuda.py from cuda_calls.list and CUDA's\n"
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
    o.append("\n/* The hand-written and remote entry points, by address only (types in\n"
             " * cuda.h). */\n")
    for n in order:
        if calls[n] in ("local", "remote"):
            o.append("void %s(void);\n" % n)
    o.append("\nconst vcu__proc_t vcu__procs[] = {\n")
    for base, v, pt, n, abi in rows:
        o.append('    { "%s", %d, %d, %d, (void *)%s },\n' % (base, v, pt, abi, n))
    o.append("};\nconst size_t vcu__nprocs = sizeof(vcu__procs) / sizeof(vcu__procs[0]);\n\n")
    o.append("const vcu__errname_t vcu__errnames[] = {\n")
    for val, name, msg in errs:
        o.append('    { %d, "%s", "%s" },\n' % (val, name, msg))
    o.append("};\nconst size_t vcu__nerrnames = sizeof(vcu__errnames) / sizeof(vcu__errnames[0]);\n")
    write(outp, "".join(o))
    write(fwdp, gen_fwd(rc, inc))
    write(callsp, gen_calls_h(rc, inc))


if __name__ == "__main__":
    main()
