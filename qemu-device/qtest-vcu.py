#!/usr/bin/env python3
"""Drive virtio-cuda-pci through QEMU's qtest protocol as a hostile guest."""
import base64, os, struct, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vcu_qtest import (Guest, hdr, seg, rng, BAR, DEV, Q, DESC, AVAIL, USED,  # noqa: E402
                       REQ, RESP, DATA)

QEMU = sys.argv[1]
g = Guest(QEMU, sys.argv[2:])
p, state = g.p, g.state
cmd, cfg_r32, cfg_w32 = g.cmd, g.cfg_r32, g.cfg_w32
w8, w16, w32, w64, r8, r16, r32 = g.w8, g.w16, g.w32, g.w64, g.r8, g.r16, g.r32
wmem, rmem, setup, submit = g.wmem, g.rmem, g.setup, g.submit
COMMON = g.common

echo = struct.pack('<QII', 7, 0, 0)

fails = 0
passes = 0
def check(name, res, want_status, want_len=None):
    global fails
    ln, reply = res
    if want_status is None:
        ok = ln == want_len
        got = f'used len {ln}'
    else:
        st, plen, rid = struct.unpack('<IIQ', reply[:16])
        ok = ln >= 24 and st == want_status and rid == (0 if 'shorter than header' in name else 0x1234)
        got = f'used len {ln} status {st} req_id {rid:#x}'
    global passes
    print(('PASS' if ok else 'FAIL'), name, '->', got)
    fails += not ok
    passes += bool(ok)

S_OK, EINVAL, ENOTSUP, ENOSESSION, EFAULT, E2BIG = 0, 1, 2, 3, 5, 6
import os
VALID = [int(x) for x in os.environ.get('VALID_STATUS', '2,3').split(',')]
def check_valid(name, res):
    ln, reply = res
    st, _, rid = struct.unpack('<IIQ', reply[:16])
    ok = ln >= 24 and st in VALID and rid == 0x1234
    global fails
    global passes
    print(('PASS' if ok else 'FAIL'), name, '->', f'used len {ln} status {st} req_id {rid:#x} (backend reply)')
    fails += not ok
    passes += bool(ok)

check_valid('echo, no segments', submit([(REQ, hdr() + echo)], 256))
check('reply buffer 8 bytes', submit([(REQ, hdr() + echo)], 8), None, 0)
check('no reply buffer', submit([(REQ, hdr() + echo)], 0), None, 0)
check('request shorter than header', submit([(REQ, hdr()[:16])], 64), EINVAL)
check('payload_len > max', submit([(REQ, hdr(payload_len=0x10001) + echo)], 64), E2BIG)
check('payload_len past end', submit([(REQ, hdr(payload_len=64) + echo)], 64), EINVAL)
check('nsegs 17', submit([(REQ, hdr(nsegs=17) + echo + seg(8, 1, 1) * 17)], 64), E2BIG)
check('seg flags 3', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 3) + rng(DATA, 8))], 64), EINVAL)
check('seg flags 0', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 0) + rng(DATA, 8))], 64), EINVAL)
check('nranges > max', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 0xffffffff, 1))], 64), E2BIG)
check('nranges sum > max', submit([(REQ, hdr(nsegs=2) + echo + seg(8, 0x40000, 1) + seg(8, 0x40000, 1))], 64), E2BIG)
check('seg len > max xfer', submit([(REQ, hdr(nsegs=1) + echo + seg(1 << 31, 1, 1) + rng(DATA, 8))], 64), E2BIG)
check('xfer sum > max', submit([(REQ, hdr(nsegs=2) + echo + seg(1 << 30, 1, 1) + seg(1 << 30, 1, 2) + rng(DATA, 1 << 30) * 2)], 64), E2BIG)
check('range list missing', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 1))], 64), EINVAL)
check('range list trailing bytes', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 1) + rng(DATA, 8) + b'x' * 8)], 64), EINVAL)
check('range len 0', submit([(REQ, hdr(nsegs=1) + echo + seg(0, 1, 1) + rng(DATA, 0))], 64), EINVAL)
check('range len > seg len', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 1) + rng(DATA, 16))], 64), EINVAL)
check('range len < seg len', submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 1) + rng(DATA, 8))], 64), EINVAL)
check('sum overflow', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 2, 1) + rng(DATA, 1 << 30) + rng(DATA, (1 << 64) - (1 << 30) + 8))], 64), EINVAL)
check('range wraps', submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 1) + rng((1 << 64) - 8, 16))], 64), EFAULT)
check('range beyond RAM', submit([(REQ, hdr(nsegs=1) + echo + seg(4096, 1, 2) + rng(1 << 40, 4096))], 64), EFAULT)
check('range in MMIO (our BAR)', submit([(REQ, hdr(nsegs=1) + echo + seg(4096, 1, 2) + rng(BAR, 4096))], 64), EFAULT)
check('range in LAPIC', submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 1) + rng(0xfee00000, 16))], 64), EFAULT)
check('range in BIOS ROM, write', submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 2) + rng(0xfffff000, 16))], 64), EFAULT)
check('range past end of RAM', submit([(REQ, hdr(nsegs=1) + echo + seg(0x2000, 1, 2) + rng(0x20000000 - 0x1000, 0x2000))], 64), EFAULT)
check('2nd range bad (1st unmapped)', submit([(REQ, hdr(nsegs=2) + echo + seg(8, 1, 1) + seg(8, 1, 2) + rng(DATA, 8) + rng(BAR, 8))], 64), EFAULT)
check('out stream > max', submit([(REQ, hdr() + echo), (0x4000000, 5 << 20)], 64), E2BIG)
check_valid('echo with 2 segments in RAM', submit([(REQ, hdr(nsegs=2) + echo + seg(8192, 2, 1) + seg(4096, 1, 2) + rng(DATA, 4096) + rng(DATA + 8192, 4096) + rng(DATA + 0x10000, 4096))], 256))
check_valid('echo, request split over 3 descriptors', submit([(REQ, hdr(nsegs=1)), (REQ + 0x1000, echo), (REQ + 0x2000, seg(100, 1, 2) + rng(DATA, 100))], 256))
# VCU_SEG_F_STABLE (4): with exactly one direction bit, nothing else.
check('seg flags STABLE alone', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 4) + rng(DATA, 8))], 64), EINVAL)
check('seg flags STABLE|TO|FROM', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 7) + rng(DATA, 8))], 64), EINVAL)
check('seg flags STABLE|TO|bit 3', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 13) + rng(DATA, 8))], 64), EINVAL)
check_valid('seg flags STABLE|TO reaches the backend', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 5) + rng(DATA, 8))], 256))
# SESSION_FENCE (4) reaches the backend: unknown session, then a real one.
check('FENCE on an unknown session', submit([(REQ, hdr(opcode=4, payload_len=0, session=0x77))], 64), ENOSESSION)
open_req = struct.pack('<IIQQQ', 1, 1, 1, 0, 0)  # version 1, FEAT_ECHO
ln, reply = submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)
check('SESSION_OPEN', (ln, reply), S_OK)
sid = struct.unpack('<Q', reply[24 + 16:24 + 24])[0] if ln >= 64 else 0
pattern = bytes((i * 7 + 3) & 0xff for i in range(6000))
wmem(DATA, pattern)
wmem(DATA + 0x10000, bytes(6000))
res = submit([(REQ, hdr(nsegs=2, session=sid) + echo + seg(6000, 2, 5) + seg(6000, 1, 6) +
               rng(DATA, 4096) + rng(DATA + 4096, 6000 - 4096) + rng(DATA + 0x10000, 6000))], 256)
check('echo over STABLE segments', res, S_OK)
ok = rmem(DATA + 0x10000, 6000) == pattern
print(('PASS' if ok else 'FAIL'), 'echo over STABLE segments moved the data')
passes += ok
fails += not ok
check('FENCE on the session', submit([(REQ, hdr(opcode=4, payload_len=0, session=sid))], 64), S_OK)
# A fence may name memory it releases (TO_DEVICE, not STABLE), nothing else.
check('FENCE releasing a range', submit([(REQ, hdr(opcode=4, payload_len=0, nsegs=1, session=sid) + seg(8, 1, 1) + rng(DATA, 8))], 64), S_OK)
check('FENCE with a STABLE segment', submit([(REQ, hdr(opcode=4, payload_len=0, nsegs=1, session=sid) + seg(8, 1, 5) + rng(DATA, 8))], 64), EINVAL)
check('FENCE with a FROM_DEVICE segment', submit([(REQ, hdr(opcode=4, payload_len=0, nsegs=1, session=sid) + seg(8, 1, 2) + rng(DATA, 8))], 64), EINVAL)
check('SESSION_CLOSE', submit([(REQ, hdr(opcode=2, payload_len=0, session=sid))], 64), S_OK)
check('FENCE after close', submit([(REQ, hdr(opcode=4, payload_len=0, session=sid))], 64), ENOSESSION)
# Reset with requests queued but not kicked, then again usable.
submit([(REQ, hdr() + echo)], 256, wait=False)
w8(COMMON + 0x14, 0)
state.update(avail=0, used=0)
setup()
check_valid('echo after reset', submit([(REQ, hdr() + echo)], 256))
# Driver sets FAILED.
w8(COMMON + 0x14, 0x8f)
w8(COMMON + 0x14, 0)
state.update(avail=0, used=0)
setup()
check_valid('echo after FAILED+reset', submit([(REQ, hdr() + echo)], 256))
alive = p.poll() is None
print(('PASS' if alive else 'FAIL'), 'qemu alive after every hostile request')
passes += alive
fails += not alive

# ---- one worker process per session -----------------------------------
import os
def workers():
    """vcu-worker processes whose parent is this QEMU."""
    out = []
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            st = open(f'/proc/{d}/stat').read()
        except OSError:
            continue
        comm = st[st.index('(') + 1:st.rindex(')')]
        fields = st[st.rindex(')') + 2:].split()
        if comm == 'vcu-worker' and int(fields[1]) == p.pid and fields[0] != 'Z':
            out.append(int(d))
    return sorted(out)
def expect(name, cond, secs=5.0):
    global passes, fails
    t0 = time.time()
    while not cond() and time.time() - t0 < secs:
        time.sleep(0.02)
    ok = cond()
    print(('PASS' if ok else 'FAIL'), name)
    passes += ok
    fails += not ok
def open_session():
    ln, reply = submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)
    return struct.unpack('<Q', reply[24 + 16:24 + 24])[0] if ln >= 64 else 0
base = len(workers())
s1, s2 = open_session(), open_session()
check('echo on session 1', submit([(REQ, hdr(session=s1) + echo)], 256), S_OK)
expect('a worker process for each of two sessions', lambda: len(workers()) == base + 2)
w2 = set(workers())
check('SESSION_CLOSE of session 1', submit([(REQ, hdr(opcode=2, payload_len=0, session=s1))], 64), S_OK)
expect('its worker is gone once the close is answered', lambda: len(workers()) == base + 1, 0.5)
check('session 2 still works', submit([(REQ, hdr(session=s2) + echo)], 256), S_OK)
# A request that takes 10 s on the host, then a device reset: the reset
# must not wait for it (QEMU's main loop would stop for those 10 s).
slow = struct.pack('<QII', 7, 0, 10000)
submit([(REQ, hdr(session=s2) + slow)], 256, wait=False)
time.sleep(0.2)
t0 = time.time()
w8(COMMON + 0x14, 0)
cmd('readb 0xcfc')
dt = time.time() - t0
# Well under 100 ms on an idle machine (the GPU suite holds QEMU's monitor
# to 100 ms through a real reset); the bound here leaves room for a busy CI
# machine and still fails a reset that waits for the work (10 s).
ok = dt < 1.0
print(('PASS' if ok else 'FAIL'), f'reset with 10 s of work in flight answered in {dt * 1000:.1f} ms')
passes += ok
fails += not ok
expect('no worker left after reset', lambda: len(workers()) == base)
state.update(avail=0, used=0)
setup()
s3 = open_session()
check('a new session after reset', submit([(REQ, hdr(session=s3) + echo)], 256), S_OK)
left = workers()
p.kill(); p.wait()
expect('workers end with QEMU', lambda: all(not os.path.exists(f'/proc/{w}') or
                                            open(f'/proc/{w}/stat').read().split(') ')[1][0] == 'Z'
                                            for w in left))

# Guest RAM that workers cannot map is refused at start, with the options.
r = subprocess.run([QEMU, '-machine', 'pc,accel=qtest', '-qtest', 'null', '-display', 'none',
                    '-nodefaults', '-m', '256', '-device', 'virtio-cuda-pci'] + sys.argv[2:],
                   capture_output=True, text=True, timeout=60)
ok = r.returncode != 0 and 'memory-backend-memfd,id=mem,size=256M,share=on -machine memory-backend=mem' in r.stderr
print(('PASS' if ok else 'FAIL'), 'private guest RAM refused with the options to use:', r.stderr.strip()[:200])
passes += ok
fails += not ok
r = subprocess.run([QEMU, '-machine', 'pc,accel=qtest', '-qtest', 'null', '-display', 'none',
                    '-nodefaults', '-m', '256', '-object', 'memory-backend-memfd,id=mem,size=256M,share=off',
                    '-machine', 'memory-backend=mem', '-device', 'virtio-cuda-pci'] + sys.argv[2:],
                   capture_output=True, text=True, timeout=60)
ok = r.returncode != 0 and 'share=on' in r.stderr
print(('PASS' if ok else 'FAIL'), 'memfd RAM with share=off refused')
passes += ok
fails += not ok

# The gpus property through QEMU's own -device parser, as the README writes
# it, against the CPU stand-in for libcuda (two devices).  QEMU splits
# -device on ',', so a list is "0:1" or "0,,1" (its comma escape); the
# backend's complaint about the list (a warning: the device still comes up)
# tells whether the list it got was the one meant.
FAKECUDA = os.environ.get('VCU_QTEST_LIBCUDA',
                          os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       '..', 'build', 'fakecuda', 'libcuda.so.1'))
def device_opts(props, env=None):
    q = subprocess.Popen([QEMU, '-machine', 'pc,accel=qtest', '-qtest', 'stdio', '-display', 'none',
                          '-nodefaults', '-m', '64',
                          '-object', 'memory-backend-memfd,id=mem,size=64M,share=on', '-machine', 'memory-backend=mem',
                          '-device', f'virtio-cuda-pci,libcuda={FAKECUDA},{props}'] + sys.argv[2:],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    up = False
    try:
        q.stdin.write('endianness\n'); q.stdin.flush()
        up = q.stdout.readline().startswith('OK')
    except BrokenPipeError:
        pass
    if up:
        # QEMU never loads the driver (the stand-in here): the workers do.
        try:
            maps = open(f'/proc/{q.pid}/maps').read()
        except OSError:
            maps = ''
        device_opts.driver_in_qemu |= 'libcuda' in maps
    if q.poll() is None:
        q.kill()
    _, err = q.communicate(timeout=30)
    return up, err
device_opts.driver_in_qemu = False

def check_opts(name, props, want_up, want_err):
    global passes, fails
    up, err = device_opts(props)
    ok = up == want_up and (want_err in err if want_err else 'CUDA is not available' not in err)
    said = [l.split(': ', 2)[-1] for l in err.splitlines() if l.startswith(os.path.basename(QEMU) + ':')]
    print(('PASS' if ok else 'FAIL'), name, '->', 'up' if up else 'exited', ' | '.join(said)[:300])
    fails += not ok
    passes += bool(ok)

if not os.path.exists(FAKECUDA):
    print('FAIL gpus cases: no CPU stand-in at', FAKECUDA, '(make fakecuda)')
    fails += 1
else:
    check_opts('gpus=0:1 gives both GPUs', 'gpus=0:1', True, None)
    check_opts('gpus=0,,1 gives both GPUs', 'gpus=0,,1', True, None)
    check_opts('gpus=1 alone', 'gpus=1', True, None)
    check_opts('gpus=0:0 is split (GPU given twice)', 'gpus=0:0', True, 'host GPU 0 given twice')
    check_opts('gpus=0,,0 is split (GPU given twice)', 'gpus=0,,0', True, 'host GPU 0 given twice')
    check_opts('gpus=0:2 names a missing GPU', 'gpus=0:2', True, '"2" is not a host GPU ordinal below 2')
    check_opts('gpus=0,1 is refused by QEMU', 'gpus=0,1', False, "Property 'virtio-cuda-pci.1' not found")
    # Every -device line the README prints starts QEMU as it says.
    import re
    readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'README.md')
    forms = re.findall(r'-device virtio-cuda-pci,([^\s`]+)', open(readme).read())
    ok = len(forms) >= 2
    print(('PASS' if ok else 'FAIL'), 'README prints -device lines:', forms)
    fails += not ok
    passes += ok
    for props in forms:
        check_opts(f'README: -device virtio-cuda-pci,{props}', props, True, None)
    ok = not device_opts.driver_in_qemu
    print(('PASS' if ok else 'FAIL'), 'QEMU has not loaded the CUDA driver (the stand-in) itself')
    fails += not ok
    passes += ok
    # A GPU that reads pageable host memory could reach all guest RAM the
    # worker maps: CUDA is refused there, with the reason.
    up, err = device_opts('gpus=0', dict(os.environ, VCU_FAKECUDA_PAGEABLE_ACCESS='1'))
    ok = up and 'can access pageable host memory' in err
    print(('PASS' if ok else 'FAIL'), 'CUDA refused on a GPU that reaches pageable host memory:',
          ' '.join(err.split())[:160])
    fails += not ok
    passes += ok
# ---- another VM --------------------------------------------------------
# Two VMs on the stand-in: the second one's session copies from a device
# pointer the first one allocated and filled, and gets an error, not the
# data; the first one reads it back (so the copy itself works).
def cuda_session(v):
    ln, r = v.submit([(REQ, hdr(opcode=1, payload_len=32) + struct.pack('<IIQQQ', 1, 1, 3, 0, 0))], 256)
    return struct.unpack('<Q', r[24 + 16:24 + 24])[0] if ln >= 64 else 0
def cu_result(r): return struct.unpack('<I', r[24:28])[0]
def memcpy_req(dst, src, n): return struct.pack('<IIQQQQII', 0, 0, dst, src, n, 0, 0, 0)
if os.path.exists(FAKECUDA):
    va = Guest(QEMU, sys.argv[2:], mem_mib=256, device_opts=f',libcuda={FAKECUDA}', quiet=True)
    vb = Guest(QEMU, sys.argv[2:], mem_mib=256, device_opts=f',libcuda={FAKECUDA}', quiet=True)
    sa, sb = cuda_session(va), cuda_session(vb)
    alloc = struct.pack('<IIQQQ', 0, 0, 4096, 0, 0)
    ln, r = va.submit([(REQ, hdr(opcode=0x200, payload_len=len(alloc), session=sa) + alloc)], 256)
    ptr = struct.unpack('<Q', r[32:40])[0] if ln >= 40 and cu_result(r) == 0 else 0
    secret = bytes((0x5e + i) & 0xff for i in range(64))
    va.wmem(DATA, secret)
    ln, r = va.submit([(REQ, hdr(opcode=0x202, payload_len=48, nsegs=1, session=sa) + memcpy_req(ptr, 0, 64) +
                        seg(64, 1, 1) + rng(DATA, 64))], 256)
    wrote = ptr != 0 and cu_result(r) == 0
    vb.wmem(DATA, bytes(64))
    ln, r = vb.submit([(REQ, hdr(opcode=0x203, payload_len=48, nsegs=1, session=sb) + memcpy_req(0, ptr, 64) +
                        seg(64, 1, 2) + rng(DATA, 64))], 256)
    res_b, got_b = cu_result(r), vb.rmem(DATA, 64)
    va.wmem(DATA + 4096, bytes(64))
    ln, r = va.submit([(REQ, hdr(opcode=0x203, payload_len=48, nsegs=1, session=sa) + memcpy_req(0, ptr, 64) +
                        seg(64, 1, 2) + rng(DATA + 4096, 64))], 256)
    own = cu_result(r) == 0 and va.rmem(DATA + 4096, 64) == secret
    ok = wrote and own and res_b != 0 and got_b != secret
    print(('PASS' if ok else 'FAIL'), f'another VM copying from a VM\'s device pointer {ptr:#x}: '
          f'CUresult {res_b} (the owner reads it back: {own})')
    passes += ok
    fails += not ok
    va.close()
    vb.close()

# ---- module cache -----------------------------------------------------
# Two VMs naming one module-cache directory, on the stand-in: a module
# VM A's session loaded (sent whole) is loaded in VM B by its SHA-256
# alone, a request with no data segment at all (CU_MODULE_LOAD_HASH,
# 0x30e); before that, B's request misses (CUDA_ERROR_FILE_NOT_FOUND,
# 301).  A session that did not agree the feature gets ENOTSUP; a cache
# directory others may write to keeps QEMU from starting, and
# module-cache=off starts without a cache.
import hashlib, stat as stat_mod, tempfile
MC_IMG = (b'//\n.version 8.0\n.target sm_90\n.visible .entry _Z10vector_addPKfS0_Pfi()\n{\n}\n'
          b'// qtest module cache ' + str(time.time()).encode() + b'\n')
def cache_session(v, feat):
    ln, r = v.submit([(REQ, hdr(opcode=1, payload_len=32) + struct.pack('<IIQQQ', 1, 1, feat, 0, 0))], 256)
    return struct.unpack('<QQ', r[24 + 8:24 + 24]) if ln >= 64 else (0, 0)
def mc_check(name, ok):
    global passes, fails
    print(('PASS' if ok else 'FAIL'), name)
    passes += bool(ok)
    fails += not ok
def by_hash(v, sess, img):
    rq = struct.pack('<IIQ', 0, 0, len(img)) + hashlib.sha256(img).digest()
    ln, r = v.submit([(REQ, hdr(opcode=0x30e, payload_len=len(rq), session=sess) + rq)], 256)
    st = struct.unpack('<I', r[:4])[0]
    return st, (cu_result(r) if ln >= 32 and st == 0 else -1), (struct.unpack('<Q', r[32:40])[0] if ln >= 40 else 0)
if os.path.exists(FAKECUDA):
    mcdir = tempfile.mkdtemp(prefix='vcu-qtest-mc-')
    opts = f',libcuda={FAKECUDA},module-cache={mcdir}'
    ma = Guest(QEMU, sys.argv[2:], mem_mib=256, device_opts=opts, quiet=True)
    mb = Guest(QEMU, sys.argv[2:], mem_mib=256, device_opts=opts, quiet=True)
    feat_a, sa = cache_session(ma, 0xb)
    feat_b, sb = cache_session(mb, 0xb)
    mc_check(f'module cache: VCU_FEAT_MODULE_CACHE agreed ({feat_a:#x}, {feat_b:#x})',
                feat_a & 8 and feat_b & 8)
    mc_check('module cache: a module no VM loaded misses (301)', by_hash(mb, sb, MC_IMG)[:2] == (0, 301))
    ma.wmem(DATA, MC_IMG)
    rq = struct.pack('<IIQ', 0, 0, len(MC_IMG))
    ln, r = ma.submit([(REQ, hdr(opcode=0x30f, payload_len=len(rq), nsegs=1, session=sa) + rq +
                        seg(len(MC_IMG), 1, 1) + rng(DATA, len(MC_IMG)))], 256)
    mc_check('module cache: VM A sends the module whole (CU_MODULE_LOAD_KEEP), told its SHA-256',
             ln >= 72 and cu_result(r) == 0 and r[40:72] == hashlib.sha256(MC_IMG).digest())
    fpath = os.path.join(mcdir, hashlib.sha256(MC_IMG).hexdigest())
    mode = stat_mod.S_IMODE(os.stat(fpath).st_mode) if os.path.exists(fpath) else -1
    mc_check(f'module cache: stored under its SHA-256, mode {mode:o}', mode == 0o600)
    st, res, h = by_hash(mb, sb, MC_IMG)
    mc_check(f'module cache: VM B loads it by hash, no data segment (status {st}, CUresult {res})',
                st == 0 and res == 0 and h != 0)
    name = b'_Z10vector_addPKfS0_Pfi'
    rq = struct.pack('<IIQII', 0, 0, h, len(name), 0) + name
    ln, r = mb.submit([(REQ, hdr(opcode=0x302, payload_len=len(rq), session=sb) + rq +
                        bytes(-len(rq) % 8))], 256)
    mc_check('module cache: its function is there', ln >= 32 and cu_result(r) == 0)
    _, sc = cache_session(mb, 0x3)
    mc_check('module cache: refused (ENOTSUP) in a session without the feature',
                by_hash(mb, sc, MC_IMG)[0] == ENOTSUP)
    ma.close()
    mb.close()
    os.chmod(mcdir, 0o777)
    check_opts('module-cache writable by others is refused', f'module-cache={mcdir}', False,
               'writable by group or others')
    os.chmod(mcdir, 0o700)
    check_opts('module-cache=off', 'module-cache=off', True, None)
    import shutil
    shutil.rmtree(mcdir, ignore_errors=True)

# ---- mem-quota --------------------------------------------------------
# One VM with mem-quota=8M on the stand-in: two guest processes (a worker
# each) share the 8 MiB; one byte past fails as on a full GPU
# (CUDA_ERROR_OUT_OF_MEMORY, 2) and the session goes on; the guest is told
# total = 8 MiB and free = what is left; the first process's worker
# killed, its 6 MiB come back to the second.
def vm_workers(v):
    out = []
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            st = open(f'/proc/{d}/stat').read()
        except OSError:
            continue
        fields = st[st.rindex(')') + 2:].split()
        if st[st.index('(') + 1:st.rindex(')')] == 'vcu-worker' and int(fields[1]) == v.p.pid \
                and fields[0] != 'Z':
            out.append(int(d))
    return sorted(out)
def cu_alloc(v, sess, n):
    rq = struct.pack('<IIQQQ', 0, 0, n, 0, 0)
    ln, r = v.submit([(REQ, hdr(opcode=0x200, payload_len=len(rq), session=sess) + rq)], 256)
    return cu_result(r) if ln >= 32 else -1
def quota_check(name, ok):
    global passes, fails
    print(('PASS' if ok else 'FAIL'), name)
    passes += bool(ok)
    fails += not ok
if os.path.exists(FAKECUDA):
    vq = Guest(QEMU, sys.argv[2:], mem_mib=256, device_opts=f',libcuda={FAKECUDA},mem-quota=8M', quiet=True)
    qa = cuda_session(vq)
    wa = vm_workers(vq)
    qb = cuda_session(vq)
    quota_check('mem-quota: two processes fill the 8 MiB',
                cu_alloc(vq, qa, 6 << 20) == 0 and cu_alloc(vq, qb, 2 << 20) == 0)
    quota_check('mem-quota: one byte past it is CUDA_ERROR_OUT_OF_MEMORY, in either process',
                cu_alloc(vq, qb, 1) == 2 and cu_alloc(vq, qa, 1) == 2)
    ln, r = vq.submit([(REQ, hdr(opcode=0x102, payload_len=8, session=qb) + struct.pack('<II', 0, 0))], 256)
    fr, tot = struct.unpack('<QQ', r[32:48]) if ln >= 48 else (-1, -1)
    quota_check(f'mem-quota: cuMemGetInfo free {fr} total {tot}', cu_result(r) == 0 and (fr, tot) == (0, 8 << 20))
    ln, r = vq.submit([(REQ, hdr(opcode=0x101, payload_len=8, session=qb) + struct.pack('<II', 0, 0))], 8192)
    tm = struct.unpack('<Q', vq.rmem(RESP + 304, 8))[0] if ln >= 312 else -1   # past the 256 read
    quota_check(f'mem-quota: the device\'s total memory {tm}', cu_result(r) == 0 and tm == 8 << 20)
    ln, r = vq.submit([(REQ, hdr(opcode=0x10d, payload_len=8, session=qb) + struct.pack('<II', 0, 0))], 4096)
    q, tot, used, ctx = struct.unpack('<QQQQ', r[32:64]) if ln >= 64 else (0, 0, 0, 0)
    nsess = struct.unpack('<I', r[76:80])[0] if ln >= 80 else 0
    quota_check(f'mem-quota: CU_SLICE_INFO quota {q} total {tot} used {used} sessions {nsess}',
                cu_result(r) == 0 and (q, tot, used, nsess) == (8 << 20, 8 << 20, 8 << 20, 2) and ctx > 0)
    if len(wa) == 1:
        os.kill(wa[0], 9)
    t0 = time.time()
    while cu_alloc(vq, qb, 6 << 20) != 0 and time.time() - t0 < 10:
        time.sleep(0.05)
    quota_check('mem-quota: a killed process\'s charge comes back to the other',
                len(wa) == 1 and cu_alloc(vq, qb, 1) == 2 and time.time() - t0 < 10)
    vq.close()

# ---- monitoring: the VM's usage through QMP ---------------------------
# One VM with mem-quota=8M and a QMP socket: qom-get on the device's
# read-only properties before any session, with two sessions holding
# memory, after one is closed and the other's worker killed; then
# scripts/vcu-metrics against the same socket: Prometheus text that parses
# and carries the same numbers.
import importlib.machinery, importlib.util, re, tempfile
METRICS_TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'scripts', 'vcu-metrics')
def load_metrics_tool():
    loader = importlib.machinery.SourceFileLoader('vcu_metrics', METRICS_TOOL)
    spec = importlib.util.spec_from_loader('vcu_metrics', loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
PROM_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\} ([0-9]+)$')
def prom_parse(text):
    """{(name, frozenset(labels)): value}, or None if a line does not parse
    or a family's samples come before its # HELP and # TYPE."""
    out, helped, typed = {}, set(), set()
    for line in text.splitlines():
        if line.startswith('# HELP '):
            helped.add(line.split()[2])
            continue
        if line.startswith('# TYPE '):
            if len(line.split()) != 4 or line.split()[3] not in ('gauge', 'counter'):
                return None
            typed.add(line.split()[2])
            continue
        m = PROM_LINE.match(line)
        if not m or m.group(1) not in helped or m.group(1) not in typed:
            print('  bad line:', repr(line))
            return None
        lab = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out[(m.group(1), lab)] = int(m.group(3))
    return out
if os.path.exists(FAKECUDA):
    tmpd = tempfile.mkdtemp(prefix='vcu-qmp-')
    qsock = os.path.join(tmpd, 'vm.qmp')
    msock = os.path.join(tmpd, 'metrics.qmp')   # a QMP socket serves one client at a time
    vm = Guest(QEMU, sys.argv[2:] + ['-qmp', f'unix:{qsock},server=on,wait=off',
                                     '-qmp', f'unix:{msock},server=on,wait=off'], mem_mib=256,
               device_opts=f',id=vcu0,libcuda={FAKECUDA},mem-quota=8M', quiet=True)
    tool = load_metrics_tool()
    mon = tool.QMP(qsock, 10)
    DEVP = '/machine/peripheral/vcu0'
    def qget(prop, path=DEVP):
        return mon.execute('qom-get', path=path, property=prop)
    st = qget('stats')
    quota_check(f'qom-get before any session: mem-quota {qget("mem-quota")} mem-used {qget("mem-used")} '
                f'sessions {qget("sessions")} faults {qget("faults")} stats {st}',
                (qget('mem-quota'), qget('mem-used'), qget('mem-ctx-bytes'), qget('sessions'), qget('faults')) ==
                (8 << 20, 0, 0, 0, 0) and st['session-list'] == [] and st['workers'] == 0 and
                st['devices'] == [{'index': 0, 'mem-used': 0, 'mem-ctx-bytes': 0}])
    quota_check('qom-get on the virtio backend object too',
                qget('mem-quota', DEVP + '/virtio-backend') == 8 << 20 and
                qget('sessions', DEVP + '/virtio-backend') == 0)
    try:
        mon.execute('qom-set', path=DEVP, property='mem-used', value=1)
        ro = False
    except tool.QMPError:
        ro = True
    quota_check('mem-used is read-only', ro)
    ma = cuda_session(vm)
    wa = vm_workers(vm)
    mb = cuda_session(vm)
    wb = [w for w in vm_workers(vm) if w not in wa]
    allocs = cu_alloc(vm, ma, 3 << 20) == 0 and cu_alloc(vm, mb, 1 << 20) == 0
    st = qget('stats')
    sl = {x['session']: x for x in st['session-list']}
    quota_check(f'two sessions holding 3 + 1 MiB: mem-used {qget("mem-used")} sessions {qget("sessions")} '
                f'stats {st}',
                allocs and len(wa) == 1 and len(wb) == 1 and qget('mem-used') == 4 << 20 and
                qget('sessions') == 2 and st['mem-used'] == 4 << 20 and st['workers'] == 2 and
                set(sl) == {ma, mb} and sl[ma]['mem-used'] == 3 << 20 and sl[mb]['mem-used'] == 1 << 20 and
                sl[ma]['host-pid'] == wa[0] and sl[mb]['host-pid'] == wb[0] and
                sl[ma]['fault'] is False and st['devices'][0]['mem-used'] == 4 << 20 and
                qget('mem-ctx-bytes') == st['mem-ctx-bytes'] ==
                sl[ma]['mem-ctx-bytes'] + sl[mb]['mem-ctx-bytes'])
    r = subprocess.run([sys.executable, METRICS_TOOL, '--vm', f'vm1={msock}'],
                       capture_output=True, text=True, timeout=60)
    prom = prom_parse(r.stdout)
    L = lambda **kw: frozenset(dict(vm='vm1', device='vcu0', **kw).items())
    want = {('vcu_mem_quota_bytes', L()): 8 << 20, ('vcu_mem_used_bytes', L()): 4 << 20,
            ('vcu_sessions', L()): 2, ('vcu_workers', L()): 2, ('vcu_faults_total', L()): 0,
            ('vcu_ctx_bytes', L()): st['mem-ctx-bytes'],
            ('vcu_gpu_mem_used_bytes', L(gpu='0')): 4 << 20,
            ('vcu_session_mem_bytes', L(session=str(ma), host_pid=str(wa[0]) if wa else '')): 3 << 20,
            ('vcu_session_mem_bytes', L(session=str(mb), host_pid=str(wb[0]) if wb else '')): 1 << 20,
            ('vcu_up', frozenset({('vm', 'vm1')})): 1}
    miss = {k: v for k, v in want.items() if prom is None or prom.get(k) != v}
    quota_check(f'vcu-metrics: exit {r.returncode}, Prometheus text that parses, same numbers '
                f'(mismatched: {miss}) {r.stderr.strip()}',
                r.returncode == 0 and prom is not None and not miss)
    quota_check('vcu-metrics: no GPU time or share for a VM outside a compute-share group (not a made-up zero)',
                prom is not None and not any(k[0] in ('vcu_compute_share', 'vcu_gpu_time_ns_total',
                                                      'vcu_group_gpu_time_ns_total', 'vcu_grants_total')
                                             for k in prom))
    check('SESSION_CLOSE of the 3 MiB session',
          vm.submit([(REQ, hdr(opcode=2, payload_len=0, session=ma))], 64), S_OK)
    expect('its memory and session leave the count',
           lambda: qget('mem-used') == 1 << 20 and qget('sessions') == 1 and qget('stats')['workers'] == 1)
    if wb:
        os.kill(wb[0], 9)
    expect('a killed worker\'s memory leaves the count once reaped (the guest has not closed)',
           lambda: qget('mem-used') == 0 and qget('stats')['session-list'] == [] and qget('faults') == 0, 10)
    r = subprocess.run([sys.executable, METRICS_TOOL, '--vm', f'vm1={msock}',
                        '--vm', f'gone={os.path.join(tmpd, "none.qmp")}'],
                       capture_output=True, text=True, timeout=60)
    prom = prom_parse(r.stdout)
    quota_check(f'vcu-metrics with a VM that does not answer: exit {r.returncode}, vcu_up 0, the other VM read',
                r.returncode == 1 and prom is not None and
                prom.get(('vcu_up', frozenset({('vm', 'gone')}))) == 0 and
                prom.get(('vcu_mem_used_bytes', L())) == 0 and
                not any(('vm', 'gone') in k[1] for k in prom if k[0] != 'vcu_up'))
    mon.close()
    vm.close()
    for f in (qsock, msock):
        if os.path.exists(f):
            os.unlink(f)
    os.rmdir(tmpd)

# ---- compute share ----------------------------------------------------
# Bad compute-share, compute-cap and share-group values keep QEMU from
# starting, with the reason; a file that is not a share group is refused.
# Two VMs in one group (weights 25 and 75) on the stand-in: GPU work
# (memsets: gated by the group's grant) completes in both, taking turns,
# and qom-get reports each VM's weight and the GPU time charged.
def memset_req(ptr, n, val):
    return struct.pack('<IIQQQQQIIII', 0, 0, ptr, 0, n, 1, 0, val, 1, 0, 0)
def share_check(name, ok):
    global passes, fails
    print(('PASS' if ok else 'FAIL'), name)
    passes += bool(ok)
    fails += not ok
if os.path.exists(FAKECUDA):
    sgdir = tempfile.mkdtemp(prefix='vcu-qtest-share-')
    grp = os.path.join(sgdir, 'group')
    check_opts('compute-share=10001 is refused', f'compute-share=10001,share-group={grp}', False,
               'compute-share must be 1..10000')
    check_opts('compute-cap=101 is refused', 'compute-cap=101', False, 'compute-cap must be a percentage')
    check_opts('a relative share-group is refused', 'compute-share=5,share-group=rel/group', False,
               'share-group must be an absolute path')
    check_opts('a share-group in a missing directory is refused',
               f'compute-share=5,share-group={sgdir}/none/group', False, 'No such file')
    with open(os.path.join(sgdir, 'junk'), 'wb') as f:
        f.write(b'x' * 100)
    check_opts('a file that is not a share group is refused',
               f'compute-share=5,share-group={sgdir}/junk', False, 'not a share group')
    check_opts('compute-share=25 in a new group starts', f'compute-share=25,share-group={grp}', True, None)
    qa_sock, qb_sock = os.path.join(sgdir, 'a.qmp'), os.path.join(sgdir, 'b.qmp')
    sva = Guest(QEMU, sys.argv[2:] + ['-qmp', f'unix:{qa_sock},server=on,wait=off'], mem_mib=256,
                device_opts=f',id=vcu0,libcuda={FAKECUDA},compute-share=25,share-group={grp}', quiet=True)
    svb = Guest(QEMU, sys.argv[2:] + ['-qmp', f'unix:{qb_sock},server=on,wait=off'], mem_mib=256,
                device_opts=f',id=vcu0,libcuda={FAKECUDA},compute-share=75,compute-cap=90,share-group={grp}',
                quiet=True)
    ptrs = {}
    for name, v in (('a', sva), ('b', svb)):
        sess = cuda_session(v)
        rq = struct.pack('<IIQQQ', 0, 0, 4096, 0, 0)
        ln, r = v.submit([(REQ, hdr(opcode=0x200, payload_len=len(rq), session=sess) + rq)], 256)
        ptrs[name] = (sess, struct.unpack('<Q', r[32:40])[0] if ln >= 40 and cu_result(r) == 0 else 0)
    done = 0
    t0 = time.time()
    for i in range(20):
        for name, v in (('a', sva), ('b', svb)):
            sess, ptr = ptrs[name]
            ln, r = v.submit([(REQ, hdr(opcode=0x205, payload_len=64, session=sess) +
                               memset_req(ptr, 64, i + 1))], 256)
            done += ln >= 32 and cu_result(r) == 0
    elapsed = time.time() - t0
    ok_data = True
    for name, v in (('a', sva), ('b', svb)):
        sess, ptr = ptrs[name]
        v.wmem(DATA, bytes(64))
        ln, r = v.submit([(REQ, hdr(opcode=0x203, payload_len=48, nsegs=1, session=sess) + memcpy_req(0, ptr, 64) +
                           seg(64, 1, 2) + rng(DATA, 64))], 256)
        ok_data &= cu_result(r) == 0 and v.rmem(DATA, 64) == bytes([20]) * 64
    share_check(f'compute share: 40 memsets in two VMs of one group complete, taking turns ({done}/40, '
                f'{elapsed:.2f} s), and land', done == 40 and ok_data and elapsed < 20)
    tool = load_metrics_tool()
    mon = tool.QMP(qa_sock, 10)
    sta = mon.execute('qom-get', path='/machine/peripheral/vcu0', property='stats')
    gpa = mon.execute('qom-get', path='/machine/peripheral/vcu0', property='gpu-ns')
    mon.close()
    mon = tool.QMP(qb_sock, 10)
    stb = mon.execute('qom-get', path='/machine/peripheral/vcu0', property='stats')
    mon.close()
    r = subprocess.run([sys.executable, METRICS_TOOL, '--vm', f'b={qb_sock}'], capture_output=True, text=True,
                       timeout=60)
    prom = prom_parse(r.stdout)
    Lb = frozenset(dict(vm='b', device='vcu0').items())
    share_check(f'vcu-metrics exports the weight, cap and GPU time of a VM in a group ({r.stderr.strip()})',
                r.returncode == 0 and prom is not None and prom.get(('vcu_compute_share', Lb)) == 75 and
                prom.get(('vcu_compute_cap_percent', Lb)) == 90 and
                prom.get(('vcu_gpu_time_ns_total', Lb), -1) >= stb.get('gpu-ns', 0) and
                prom.get(('vcu_grants_total', Lb), 0) >= 1)
    share_check(f'compute share: qom-get reports weights, cap and GPU time (a {sta.get("compute-share")} '
                f'{sta.get("gpu-ns")} ns, b {stb.get("compute-share")} cap {stb.get("compute-cap")} '
                f'{stb.get("gpu-ns")} ns, group {sta.get("group-gpu-ns")} ns, grants {sta.get("grants")})',
                sta.get('compute-share') == 25 and stb.get('compute-share') == 75 and
                sta.get('compute-cap') == 0 and stb.get('compute-cap') == 90 and
                sta.get('grants', 0) >= 1 and stb.get('grants', 0) >= 1 and gpa == sta.get('gpu-ns') and
                sta.get('group-gpu-ns', 0) >= sta.get('gpu-ns', 1))
    sva.close()
    svb.close()
    import shutil
    shutil.rmtree(sgdir, ignore_errors=True)

# ---- packed mode ------------------------------------------------------
# sms=N: the worker is an MPS client and its context runs on N SMs.  The
# stand-in takes an MPS daemon to answer where the pipe directory holds a
# "control" entry.  Bad values and a missing daemon keep QEMU from
# starting, with the reason; with a daemon the guest is told N SMs, a
# session's context is made on them, and the monitor says so.  An
# isolated VM's workers stay out of a daemon running where they would
# find it by default.
if os.path.exists(FAKECUDA):
    import shutil
    pdir = tempfile.mkdtemp(prefix='vcu-qtest-mps-')
    nodaemon, daemon = os.path.join(pdir, 'none'), os.path.join(pdir, 'mps')
    os.mkdir(nodaemon)
    os.mkdir(daemon)
    open(os.path.join(daemon, 'control'), 'w').close()
    check_opts('sms without an MPS daemon is refused', f'sms=16,mps-pipe={nodaemon}', False,
               "needs NVIDIA's MPS control daemon")
    check_opts('sms beyond the GPU\'s SMs is refused', f'sms=200,mps-pipe={daemon}', False, 'has 132 SMs')
    check_opts('an SM count the driver would round is refused, with the one to use', f'sms=15,mps-pipe={daemon}',
               False, 'use sms=16')
    check_opts('sms with compute-share is refused', f'sms=16,compute-share=5,mps-pipe={daemon}', False,
               'does not go with')
    check_opts('sms=5000 is refused', 'sms=5000', False, 'sms must be 1..4096')
    check_opts('a relative mps-pipe is refused', 'sms=16,mps-pipe=rel', False, 'mps-pipe must be an absolute path')
    check_opts('mps-pipe without sms is refused', f'mps-pipe={daemon}', False, 'for packed mode')
    check_opts('sms=16 with a daemon starts', f'sms=16,mps-pipe={daemon}', True, None)
    up, err = device_opts('sms=16', env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=daemon))
    share_check(f'sms=16 finds the daemon by QEMU\'s CUDA_MPS_PIPE_DIRECTORY ({err.strip()[:200]})',
                up and 'CUDA is not available' not in err)
    up, err = device_opts('', env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=daemon))
    share_check(f'an isolated VM keeps CUDA, never an MPS client, where a daemon runs ({err.strip()[:200]})',
                up and 'CUDA is not available' not in err and 'MPS' not in err)
    pq = os.path.join(pdir, 'p.qmp')
    vp = Guest(QEMU, sys.argv[2:] + ['-qmp', f'unix:{pq},server=on,wait=off'], mem_mib=256,
               device_opts=f',id=vcu0,libcuda={FAKECUDA},sms=16,mps-pipe={daemon}', quiet=True)
    ps = cuda_session(vp)
    ln, r = vp.submit([(REQ, hdr(opcode=0x101, payload_len=8, session=ps) + struct.pack('<II', 0, 0))], 8192)
    sms_attr = struct.unpack('<I', vp.rmem(RESP + 320 + 4 * 16, 4))[0] if ln >= 384 else -1
    ln, r = vp.submit([(REQ, hdr(opcode=0x10d, payload_len=8, session=ps) + struct.pack('<II', 0, 0))], 4096)
    sms_slice = struct.unpack('<I', r[68:72])[0] if ln >= 72 and cu_result(r) == 0 else -1
    share_check(f'packed: the guest is told 16 SMs (device attribute {sms_attr}, slice {sms_slice})',
                sms_attr == 16 and sms_slice == 16)
    rq = struct.pack('<IIQQQ', 0, 0, 4096, 0, 0)
    ln, r = vp.submit([(REQ, hdr(opcode=0x200, payload_len=len(rq), session=ps) + rq)], 256)
    share_check(f'packed: a session\'s context is made on its SMs and allocates (result {cu_result(r)})',
                ln >= 40 and cu_result(r) == 0)
    mon = load_metrics_tool().QMP(pq, 10)
    st = mon.execute('qom-get', path='/machine/peripheral/vcu0', property='stats')
    mon.close()
    r = subprocess.run([sys.executable, METRICS_TOOL, '--vm', f'p={pq}'], capture_output=True, text=True,
                       timeout=60)
    prom = prom_parse(r.stdout)
    share_check(f'packed: qom-get stats says sms {st.get("sms")}, vcu-metrics vcu_sms '
                f'{prom.get(("vcu_sms", frozenset(dict(vm="p", device="vcu0").items()))) if prom else None}',
                st.get('sms') == 16 and prom is not None and
                prom.get(('vcu_sms', frozenset(dict(vm='p', device='vcu0').items()))) == 16)
    vp.close()
    vi = Guest(QEMU, sys.argv[2:], mem_mib=256, device_opts=f',libcuda={FAKECUDA}', quiet=True)
    ps = cuda_session(vi)
    ln, r = vi.submit([(REQ, hdr(opcode=0x101, payload_len=8, session=ps) + struct.pack('<II', 0, 0))], 8192)
    sms_attr = struct.unpack('<I', vi.rmem(RESP + 320 + 4 * 16, 4))[0] if ln >= 384 else -1
    share_check(f'isolated: the guest is told the GPU\'s 132 SMs ({sms_attr})', sms_attr == 132)
    vi.close()
    shutil.rmtree(pdir, ignore_errors=True)

print(f'{passes} passed, {fails} failed')
sys.exit(1 if fails else 0)
