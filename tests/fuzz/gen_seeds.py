#!/usr/bin/env python3
"""Writes the hand-built seeds of the fuzz targets other than fuzz_backend
(whose seeds gen_corpus.py makes) into DIR/NAME/seed-*: well-formed
inputs in each harness's input format (the comment at the top of
fuzz_NAME.c), from which libFuzzer's mutations start.

   gen_seeds.py DIR

run.sh makes them at each run, from the protocol header as it is, beside
the committed corpus (campaign units merged with -merge=1); they are not
kept in git.  Only seed-* files in DIR are rewritten.
"""
import os, re, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..")
if len(sys.argv) != 2:
    sys.exit("usage: gen_seeds.py DIR")
out = sys.argv[1]
proto = open(os.path.join(root, "include", "vcu_proto.h")).read()
OP = {m.group(1): int(m.group(2), 16) for m in re.finditer(r"XX\((\w+), (0x[0-9a-f]+),", proto)}

u8 = lambda v: struct.pack("<B", v & 0xff)
u16 = lambda v: struct.pack("<H", v & 0xffff)
u32 = lambda v: struct.pack("<I", v & 0xffffffff)
u64 = lambda v: struct.pack("<Q", v & 0xffffffffffffffff)
def pad8(b): return b + b"\0" * (-len(b) % 8)
def cstr(s, n): return s.encode() + b"\0" * (n - len(s))

SEG_TO, SEG_FROM, SEG_STABLE = 1, 2, 4
seeds = {}

def seed(target, name, data):
    seeds.setdefault(target, {})[name] = data

# ---- the protocol's request stream (fuzz_device, fuzz_worker) -------------------

def req_hdr(op, plen, nsegs, session=1, req_id=7, flags=0):
    return u32(op) + u32(flags) + u64(session) + u64(req_id) + u32(plen) + u16(nsegs) + u16(0)

def request(op, payload=b"", segs=()):
    """segs: (flags, [range lengths]); ranges at made-up guest addresses."""
    b = req_hdr(op, len(payload), len(segs)) + pad8(payload)
    for flags, lens in segs:
        b += u64(sum(lens)) + u32(len(lens)) + u32(flags)
    gpa = 0x100000
    for flags, lens in segs:
        for ln in lens:
            b += u64(gpa) + u64(ln)
            gpa += (ln + 0xfff) & ~0xfff
    return b

echo = u64(1) + u32(0) + u32(0)
seed("device", "seed-header-only", request(OP["SESSION_CLOSE"]))
seed("device", "seed-echo-one-seg", request(OP["ECHO"], echo + b"hello", [(SEG_TO, [100, 4096])]))
seed("device", "seed-two-segs", request(OP["ECHO"], echo, [(SEG_TO | SEG_STABLE, [8192]),
                                                           (SEG_FROM, [1, 4095, 4096])]))
seed("device", "seed-refuse-second", request(OP["ECHO"], echo, [(SEG_TO, [10, 20, 30])]) + u8(1))
seed("device", "seed-sixteen-segs", request(OP["ECHO"], echo, [(SEG_FROM, [64])] * 16))

# ---- the ring (fuzz_ring) -------------------------------------------------------------

def ipc_hdr(t, ln, tag=0): return u32(t) + u32(ln) + u64(tag)
def frame(t, body, tag=0): return pad8(ipc_hdr(t, len(body), tag) + body)

frames = frame(4, b"\0" * 24, 1) + frame(4, b"x" * 40, 2) + frame(4, b"", 3)
# consumer: mode (size 64 << 6 = 4096), start, max_body, cap, ntails-1, tails, bytes
def consumer(sizelog, start, ring, tails, max_body=4096, cap=4096):
    b = u8(sizelog) + u64(start) + u16(max_body) + u16(cap) + u8(len(tails) - 1)
    for kind, v in tails:
        b += u8(kind) + (u64(v) if kind & 1 else u16(v))
    return b + ring
seed("ring", "seed-consumer", consumer(6, 0, frames, [(0, len(frames))]))
seed("ring", "seed-consumer-wraps", consumer(2, 256 - 16, frames, [(0, len(frames))]))
seed("ring", "seed-consumer-moving-tail", consumer(6, 1 << 40, frames, [(0, 24), (0, len(frames)), (1, 0)]))
seed("ring", "seed-consumer-rewrites", consumer(3, 0, frames, [(0, 40), (2, len(frames))], 64, 64))
# producer: mode 0x80 | size, start, head seen (back from start), then frames
def producer(sizelog, start, back, puts):
    b = u8(0x80 | sizelog) + u64(start) + u16(back)
    for kind, ln, head in puts:
        b += u8(kind) + u16(ln)
        if kind & 1:
            b += u64(head) if kind & 2 else u16(head)
    return b
seed("ring", "seed-producer", producer(6, 0, 0, [(0, 24, 0), (0, 100, 0), (1, 4000, 0), (0, 8, 0)]))
seed("ring", "seed-producer-full", producer(1, 1 << 63, 100, [(0, 64, 0), (1, 64, 64), (3, 8, 5)]))

# ---- module images (fuzz_module) -----------------------------------------------------

def fatbin(entries):
    body = b""
    for kind, arch, payload, flags, dsize in entries:
        eh = (u16(kind) + u16(0x101) + u32(64) + u64(len(payload)) + u32(0) + u32(0) +
              u16(arch % 10) + u16(arch // 10) + u32(arch) + u32(0) + u32(0) + u64(flags) +
              u64(0) + u64(dsize))
        body += eh + payload
    return u32(0xBA55ED50) + u16(1) + u16(16) + u64(len(body)) + body

ptx_printf = b".version 8.0\n.target sm_90\n.extern .func (.param .b32 r) vprintf(.param .b64 f, .param .b64 a);\n"
ptx_plain = b".version 8.0\n.target sm_90\n.visible .entry k()\n{\nret;\n}\n"
elf = b"\x7fELF\x02\x01\x01" + b"\0" * 57 + b".symtab\0k\0"
seed("module", "seed-ptx-printf", ptx_printf)
seed("module", "seed-ptx-plain", ptx_plain)
seed("module", "seed-fatbin-elf-ptx", fatbin([(2, 90, elf, 0, 0), (1, 90, ptx_printf, 0, 0)]))
seed("module", "seed-fatbin-ptx-only", fatbin([(1, 80, ptx_plain, 0, 0), (1, 90, ptx_printf, 0, 0)]))
seed("module", "seed-fatbin-compressed", fatbin([(2, 90, elf, 0x2000, 0), (2, 80, elf, 0, 4096)]))

# ---- the daemon's link (fuzz_daemon) ---------------------------------------------------

def link(t, body=b"", id_=0): return u32(t) + u32(len(body)) + u64(id_) + body

def hello(name="vm1", gpus="0", flags=0, quota=0, maxs=0, share=0, cap=0, sms=0,
          ring=1 << 20, spin=0, version=1):
    return (u32(version) + u32(flags) + u64(quota) + u32(maxs) + u32(share) + u32(cap) +
            u32(sms) + u32(ring) + u32(spin) + u32(4242) + u32(0) + cstr(name, 64) +
            cstr(gpus, 256))

def chunk(data, fds=0, then=0): return u8(fds | then << 3) + u16(len(data)) + data

S1, S2 = (1 << 32) | 1, (2 << 32) | 2
HELLO, WELCOME, SPAWN, SPAWNED, KILL, SLICE = 1, 2, 3, 4, 5, 6
def daemon(cfg, probe, chunks, probe_bytes=None):
    b = u8(cfg) + u8(probe)
    if (probe & 0x7f) % 6 == 3:
        b += u8(len(probe_bytes)) + probe_bytes
    return b + b"".join(chunks)
seed("daemon", "seed-hello-spawn-kill", daemon(0, 0, [
    chunk(link(HELLO, hello())), chunk(link(SPAWN, id_=S1), 4), chunk(link(SPAWN, id_=S2), 4),
    chunk(link(KILL, id_=S1), 0, 1), chunk(link(KILL, id_=S2))]))
seed("daemon", "seed-frames-in-one-write", daemon(0, 1, [
    chunk(link(HELLO, hello(name="a.b_c-d", gpus="0:1")) + link(SPAWN, id_=S1), 4, 2)]))
seed("daemon", "seed-share-cap", daemon(1 | 4, 0, [
    chunk(link(HELLO, hello(gpus="0,1", quota=1 << 28, share=100, cap=50, maxs=8))),
    chunk(link(SPAWN, id_=S1), 4), chunk(link(SPAWN, id_=S1), 4)]))
seed("daemon", "seed-packed", daemon(2, 0, [chunk(link(HELLO, hello(sms=8))),
                                             chunk(link(SPAWN, id_=S1), 4)]))
seed("daemon", "seed-private-cache", daemon(8, 0, [chunk(link(HELLO, hello(name="vmx", flags=4))),
                                                    chunk(link(SPAWN, id_=S1), 4, 3)]))
seed("daemon", "seed-spawn-fails", daemon(16 | 32, 2, [
    chunk(link(HELLO, hello())), chunk(link(SPAWN, id_=S1), 4), chunk(link(SPAWN, id_=S2), 4)]))
seed("daemon", "seed-probe-bytes", daemon(0, 3, [chunk(link(HELLO, hello()))],
                                          frame(3, u32(1) + u32(5) + cstr("x", 240))[:100]))
seed("daemon", "seed-qemu-reads-nothing", daemon(0, 0x80, [
    chunk(link(HELLO, hello())), chunk(link(SPAWN, id_=S1), 4)]))
seed("daemon", "seed-bad-version", daemon(0, 0, [chunk(link(HELLO, hello(version=2)))]))
seed("daemon", "seed-split-frame", daemon(0, 4, [
    chunk(link(HELLO, hello())[:7]), chunk(link(HELLO, hello())[7:]),
    chunk(link(SPAWN, id_=S1)[:3], 4), chunk(link(SPAWN, id_=S1)[3:])]))

# ---- the proxy (fuzz_proxy) ---------------------------------------------------------------

def slice_(quota=1 << 30, maxs=8, share=0, cap=0, sms=0):
    return u64(quota) + u32(maxs) + u32(share) + u32(cap) + u32(sms)
def welcome(status=0, error=""):
    return u32(1) + u32(status) + u64(7) + slice_() + cstr(error, 240) + cstr("", 240)
def spawned(status=0, pid=1234, slot=0): return u32(status) + u32(pid) + struct.pack("<i", slot) + u32(0)
def pframe(data, fds=0, kind=0, file=None):
    b = u8(fds | kind << 3)
    if file is not None:
        b += u16(len(file)) + file
    return b + u16(len(data)) + data

F_NULL, F_SLICE, F_ACCT_IN, F_POLICY_IN, F_SWAPPED, F_EMPTY, F_PIDFD = range(7)
acct = u64(0x31746363612d7576) + u64(1 << 30) + u32(4) + u32(0) + u64(0) + b"\0" * 32
acct += (u64(S1) + u32(1234) + u32(1) + u64(1 << 20) * 32) * 4
policy = u64(0x31796c6f702d7576) + u64(1) + u64(1 << 30) + u64(0) + u32(0) * 4 + u64(0) * 2
welcomed = [pframe(link(WELCOME, welcome()), 2, F_SLICE),
            pframe(link(SPAWNED, spawned(), S1), 1, F_PIDFD),
            pframe(link(SPAWNED, spawned(8, 0, -1), S2)),
            pframe(link(SLICE, slice_(share=10, cap=20)))]
seed("proxy", "seed-link", u8(0) + u8(2 | 0 << 2 | 1 << 4) + u8(0) + b"".join(welcomed))
seed("proxy", "seed-link-native", u8(0) + u8(3 | 2 << 6) + u8(1) + b"".join(welcomed))
seed("proxy", "seed-link-refused", u8(0) + u8(0) + u8(4) +
     pframe(link(WELCOME, welcome(8, "the VM has all its sessions"))) + welcomed[0])
seed("proxy", "seed-link-account", u8(0) + u8(1) + u8(0) +
     pframe(link(WELCOME, welcome()), 2, F_ACCT_IN, acct) +
     pframe(link(SPAWNED, spawned(0, 99, 3), S1), 1, F_NULL) +
     pframe(link(WELCOME, welcome()), 2, F_POLICY_IN, policy))
def resp(status, body=b"", req_id=0): return u32(status) + u32(len(body)) + u64(req_id) + u64(0) + body
open_resp = u32(1) + u32(65536) + u64(0x17) + u64(0x5000000001) + u64(1 << 30) + u32(16) + u32(0)
ring_frames = frame(4, resp(0, open_resp, 100), 1) + frame(4, resp(0, b"", 101), 2) + \
    frame(4, resp(0, b"r" * 64, 102), 3) + frame(4, resp(0, b"", 103), 9)
worker_hello = frame(3, u32(1) + u32(77) + cstr("", 240))
def replies(npend, caps, start, ring, sock, tail=None):
    b = u8(npend) + b"".join(u8(c) for c in caps) + u16(start // 8)
    b += u8(0) + u16(len(ring) if tail is None else tail) + u16(len(ring)) + ring + sock
    return u8(1) + b
seed("proxy", "seed-replies", replies(3, [7 | 8, 6, 2, 0], 0, ring_frames, worker_hello))
seed("proxy", "seed-replies-poll-wrap", replies(3 | 8 | 16, [7 | 8, 1, 5, 0], 0x1ff00 * 8 % (1 << 19),
                                                ring_frames, worker_hello[:40]))
seed("proxy", "seed-replies-broken", replies(1, [7, 7], 0, ring_frames[:40], b"", len(ring_frames)))

# ---- the worker (fuzz_worker) ---------------------------------------------------------------

REGION, REQ, SOCK = 1, 2, 5
def ipc_req(op, payload, segs, ranges, resp_cap=4096):
    """segs: (flags, len, nranges); ranges: (region, off, len)."""
    r = req_hdr(op, len(payload), len(segs)) + pad8(payload)
    for flags, ln, n in segs:
        r += u64(ln) + u32(n) + u32(flags)
    body = u32(len(r)) + u32(len(ranges)) + u64(resp_cap) + pad8(r)
    for reg, off, ln in ranges:
        body += u32(reg) + u32(0) + u64(off) + u64(ln)
    return body
def region(id_, size): return frame(REGION, u32(id_) + u32(0) + u64(size))
def worker(flags, start, ring, rfds, sock, shm=None, head=None):
    b = u8(flags)
    if shm is not None:
        b += shm
    b += u8(start // 16) + u8(0) + u16(len(ring))
    if head is not None:
        b += u64(head)
    return b + u16(len(ring)) + ring + u8(rfds) + sock
echo_req = ipc_req(OP["ECHO"], echo, [(SEG_TO, 300, 2), (SEG_FROM, 4096, 1)],
                   [(1, 0, 100), (1, 8192, 200), (1, 4096, 4096)])
fence = ipc_req(OP["SESSION_FENCE"], b"", [(SEG_TO, 4096, 1)], [(1, 4096, 4096)])
stable = ipc_req(OP["CU_HOST_DEVICE_POINTER"], pad8(b"") + u64(0) + u64(0),
                 [(SEG_TO | SEG_STABLE, 8192 + 100, 2)], [(1, 4096, 4096), (1, 16384, 4096 + 100)])
stable_at = ipc_req(OP["CU_HOST_DEVICE_POINTER_AT"], pad8(b"") + u64(0) + u64(0x4a0000000000),
                    [(SEG_TO | SEG_STABLE, 8192 + 100, 2)], [(1, 4096, 4096), (1, 16384, 4096 + 100)])
r1 = 1 | 1 << 3                     # one file, of 65536 bytes
seed("worker", "seed-echo", worker(0, 0, frame(REQ, echo_req, 1), r1, region(1, 65536)))
seed("worker", "seed-stable-fence", worker(0, 64, frame(REQ, stable, 1) + frame(REQ, fence, 2) +
                                           frame(REQ, stable, 3), r1, region(1, 65536)))
seed("worker", "seed-stable-at-fence", worker(0, 64, frame(REQ, stable_at, 1) + frame(REQ, fence, 2) +
                                              frame(REQ, stable_at, 3), r1, region(1, 65536)))
seed("worker", "seed-sock-request", worker(0, 0, frame(SOCK, b"") + frame(REQ, echo_req, 2), r1,
                                           region(1, 65536) + frame(REQ, echo_req, 1)))
seed("worker", "seed-wraps-two-regions", worker(1 | 8, 4000, frame(REQ, echo_req, 1) + frame(REQ, ipc_req(
    OP["ECHO"], echo, [(SEG_FROM, 50, 1)], [(2, 0, 50)]), 2), 2 | 1 << 3,
    region(1, 65536) + region(2, 8192)))
seed("worker", "seed-shm-head", worker(4 | 2, 0, frame(REQ, echo_req, 1), r1, region(1, 65536),
                                       u64(0x32676e6972756376) + u32(4096) + u32(256 << 10), 5))

# ---- CU_BATCH (fuzz_batch) ------------------------------------------------------------------

def entry(sel, extra=0, op=None, lie=None, flip=None):
    b = u8(sel)
    if sel & 7 == 7:
        b += u32(op)
    b += u8(extra)
    if sel & 0x40:
        b += u8(lie)
    if sel & 0x80:
        b += u8(flip[0]) + u8(flip[1])
    return b
LAUNCH, MEMSET, FREE, WAIT, RECORD, GLAUNCH = 0, 2, 3, 4, 5, 6
seed("batch", "seed-launch-run", u8(0) + entry(LAUNCH) * 10)
seed("batch", "seed-run-twice", u8(0x10 | 0x08) + entry(LAUNCH, 16) * 9 + entry(RECORD))
seed("batch", "seed-mixed", u8(0x08) + entry(LAUNCH) * 3 + entry(MEMSET) + entry(RECORD) +
     entry(WAIT | 3 << 3) + entry(GLAUNCH) + entry(LAUNCH | 1 << 3) * 8 + entry(FREE))
seed("batch", "seed-devices", u8(0) + entry(LAUNCH | 0x20) * 8 + entry(LAUNCH) * 8)
seed("batch", "seed-async", u8(0x01 | 0x08) + entry(LAUNCH) * 12 + entry(MEMSET, 3))
seed("batch", "seed-bad-entry", u8(0) + entry(LAUNCH) + entry(7, 0, OP["CU_MEMCPY_HTOD"]) + entry(LAUNCH))
seed("batch", "seed-lies", u8(0x02 | 0x04 | 0x20) + u8(3) + u8(0) * 8 + u8(5) +
     entry(LAUNCH | 0x40, 0, lie=0x81) + entry(MEMSET | 0x80, 0, flip=(0, 1)))

for target, files in seeds.items():
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.remove(os.path.join(d, f))
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as fh:
            fh.write(data)
print("gen_seeds: %s" % ", ".join("%s %d" % (t, len(f)) for t, f in sorted(seeds.items())))
