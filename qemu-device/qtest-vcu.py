#!/usr/bin/env python3
"""Drive virtio-cuda-pci through QEMU's qtest protocol as a hostile guest."""
import base64, struct, subprocess, sys, time

QEMU = sys.argv[1]
BAR = 0xe0000000
DEV = 4  # PCI slot
p = subprocess.Popen([QEMU, '-machine', 'pc,accel=qtest', '-qtest', 'stdio', '-display', 'none',
                      '-nodefaults', '-m', '512',
                      '-object', 'memory-backend-memfd,id=mem,size=512M,share=on', '-machine', 'memory-backend=mem',
                      '-device', f'virtio-cuda-pci,addr={DEV}.0'] + sys.argv[2:],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, bufsize=1)

def cmd(s):
    p.stdin.write(s + '\n'); p.stdin.flush()
    while True:
        l = p.stdout.readline()
        if not l:
            raise SystemExit('qemu died on: ' + s)
        if l.startswith('OK') or l.startswith('FAIL') or l.startswith('ERR'):
            if not l.startswith('OK'):
                raise SystemExit(f'{s} -> {l}')
            return l.split()[1:] if len(l.split()) > 1 else []

def cfg_addr(off): return 0x80000000 | (DEV << 11) | off
def cfg_w32(off, v): cmd(f'outl 0xcf8 {cfg_addr(off):#x}'); cmd(f'outl 0xcfc {v:#x}')
def cfg_r32(off): cmd(f'outl 0xcf8 {cfg_addr(off & ~3):#x}'); return int(cmd('inl 0xcfc')[0], 16) >> (8 * (off & 3))
def w8(a, v): cmd(f'writeb {a:#x} {v:#x}')
def w16(a, v): cmd(f'writew {a:#x} {v:#x}')
def w32(a, v): cmd(f'writel {a:#x} {v:#x}')
def w64(a, v): cmd(f'writeq {a:#x} {v:#x}')
def r8(a): return int(cmd(f'readb {a:#x}')[0], 16)
def r16(a): return int(cmd(f'readw {a:#x}')[0], 16)
def r32(a): return int(cmd(f'readl {a:#x}')[0], 16)
def wmem(a, b):
    if b: cmd(f'b64write {a:#x} {len(b):#x} {base64.b64encode(b).decode()}')
def rmem(a, n): return bytes.fromhex(cmd(f'read {a:#x} {n:#x}')[0][2:])

ids = cfg_r32(0)
print(f'PCI id {ids & 0xffff:04x}:{ids >> 16:04x}')
assert ids == 0x107f1af4, hex(ids)
# Find the capabilities (vendor cap 0x09): type -> (bar, offset)
caps = {}
ptr = cfg_r32(0x34) & 0xff
while ptr:
    w = cfg_r32(ptr)
    if w & 0xff == 0x09:
        typ = (w >> 24) & 0xff
        bar = cfg_r32(ptr + 4) & 0xff
        off = cfg_r32(ptr + 8)
        caps.setdefault(typ, (bar, off, ptr))
    ptr = (w >> 8) & 0xff
print('caps', caps)
bar_idx = caps[1][0]
cfg_w32(0x10 + 4 * bar_idx, BAR)
cfg_w32(0x10 + 4 * bar_idx + 4, 0)
cfg_w32(0x04, 0x6)  # memory + bus master
COMMON = BAR + caps[1][1]
NOTIFY = BAR + caps[2][1]
mult = cfg_r32(caps[2][2] + 16)

Q = 16
DESC, AVAIL, USED = 0x100000, 0x104000, 0x105000
def setup():
    w8(COMMON + 0x14, 0)
    w8(COMMON + 0x14, 1); w8(COMMON + 0x14, 3)
    w32(COMMON + 0x08, 1); w32(COMMON + 0x0c, 1)  # VERSION_1
    w8(COMMON + 0x14, 11)
    assert r8(COMMON + 0x14) & 8, 'FEATURES_OK refused'
    w16(COMMON + 0x16, 0)
    qmax = r16(COMMON + 0x18)
    w16(COMMON + 0x18, Q)
    w64(COMMON + 0x20, DESC); w64(COMMON + 0x28, AVAIL); w64(COMMON + 0x30, USED)
    wmem(DESC, bytes(16 * Q)); wmem(AVAIL, bytes(4 + 2 * Q)); wmem(USED, bytes(4 + 8 * Q))
    w16(COMMON + 0x1c, 1)
    w8(COMMON + 0x14, 15)
    return qmax
print('queue max', setup())
noff = r16(COMMON + 0x1e)

state = {'avail': 0, 'used': 0}
REQ, RESP, DATA = 0x200000, 0x800000, 0x1000000
COMPLETION_TIMEOUT = 60
def submit(out_parts, in_len, wait=True):
    """out_parts: list of (gpa, bytes or length); returns (used_len, reply bytes)."""
    descs = []
    for gpa, data in out_parts:
        if isinstance(data, bytes):
            wmem(gpa, data); n = len(data)
        else:
            n = data
        descs.append((gpa, n, 0))
    if in_len:
        wmem(RESP, b'\xee' * min(in_len, 64))
        descs.append((RESP, in_len, 2))
    head = (state['avail'] * 4) % Q
    for i, (a, n, f) in enumerate(descs):
        idx = (head + i) % Q
        nxt = (head + i + 1) % Q
        flags = f | (1 if i < len(descs) - 1 else 0)
        wmem(DESC + 16 * idx, struct.pack('<QIHH', a, n, flags, nxt))
    w16(AVAIL + 4 + 2 * (state['avail'] % Q), head)
    state['avail'] += 1
    w16(AVAIL + 2, state['avail'] & 0xffff)
    w16(NOTIFY + noff * mult, 0)
    if not wait:
        return None
    # A deadline in seconds, not a count of polls: on a loaded machine the
    # backend's thread may wait long for a CPU.
    deadline = time.monotonic() + COMPLETION_TIMEOUT
    while r16(USED + 2) == state['used']:
        if time.monotonic() > deadline:
            raise SystemExit(f'no completion in {COMPLETION_TIMEOUT} s')
        cmd('clock_step 1000000')
        time.sleep(0.001)
    e = state['used'] % Q
    _id, ln = struct.unpack('<II', rmem(USED + 4 + 8 * e, 8))
    state['used'] += 1
    return ln, rmem(RESP, min(max(ln, 24), 256))

def hdr(opcode=3, payload_len=16, nsegs=0, req_id=0x1234, session=0):
    return struct.pack('<IIQQIHH', opcode, 0, session, req_id, payload_len, nsegs, 0)
def seg(ln, nr, flags): return struct.pack('<QII', ln, nr, flags)
def rng(gpa, ln): return struct.pack('<QQ', gpa, ln)
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
ok = dt < 0.1
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
def device_opts(props):
    q = subprocess.Popen([QEMU, '-machine', 'pc,accel=qtest', '-qtest', 'stdio', '-display', 'none',
                          '-nodefaults', '-m', '64',
                          '-object', 'memory-backend-memfd,id=mem,size=64M,share=on', '-machine', 'memory-backend=mem',
                          '-device', f'virtio-cuda-pci,libcuda={FAKECUDA},{props}'] + sys.argv[2:],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
print(f'{passes} passed, {fails} failed')
sys.exit(1 if fails else 0)
