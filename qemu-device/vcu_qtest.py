"""A guest with no kernel for virtio-cuda-pci, driven through QEMU's qtest
protocol: PCI setup, one virtqueue, requests built byte by byte (the qtest
suites, qemu-device/qtest-vcu.py)."""
import base64, struct, subprocess, sys, time

BAR = 0xe0000000
DEV = 4  # PCI slot
Q = 16
DESC, AVAIL, USED = 0x100000, 0x104000, 0x105000
REQ, RESP, DATA = 0x200000, 0x800000, 0x1000000
COMPLETION_TIMEOUT = 60


def hdr(opcode=3, payload_len=16, nsegs=0, req_id=0x1234, session=0):
    return struct.pack('<IIQQIHH', opcode, 0, session, req_id, payload_len, nsegs, 0)


def seg(ln, nr, flags):
    return struct.pack('<QII', ln, nr, flags)


def rng(gpa, ln):
    return struct.pack('<QQ', gpa, ln)


class Guest:
    """One QEMU with the device at slot DEV, its queue set up."""

    def __init__(self, qemu, extra, mem_mib=512, device_opts='', quiet=False):
        self.p = subprocess.Popen(
            [qemu, '-machine', 'pc,accel=qtest', '-qtest', 'stdio', '-display', 'none',
             '-nodefaults', '-m', str(mem_mib),
             '-object', f'memory-backend-memfd,id=mem,size={mem_mib}M,share=on',
             '-machine', 'memory-backend=mem',
             '-device', f'virtio-cuda-pci,addr={DEV}.0{device_opts}'] + list(extra),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, bufsize=1)
        self.state = {'avail': 0, 'used': 0}
        ids = self.cfg_r32(0)
        if not quiet:
            print(f'PCI id {ids & 0xffff:04x}:{ids >> 16:04x}')
        assert ids == 0x107f1af4, hex(ids)
        # The capabilities (vendor cap 0x09): type -> (bar, offset, cap)
        caps = {}
        ptr = self.cfg_r32(0x34) & 0xff
        while ptr:
            w = self.cfg_r32(ptr)
            if w & 0xff == 0x09:
                caps.setdefault((w >> 24) & 0xff,
                                (self.cfg_r32(ptr + 4) & 0xff, self.cfg_r32(ptr + 8), ptr))
            ptr = (w >> 8) & 0xff
        if not quiet:
            print('caps', caps)
        bar_idx = caps[1][0]
        self.cfg_w32(0x10 + 4 * bar_idx, BAR)
        self.cfg_w32(0x10 + 4 * bar_idx + 4, 0)
        self.cfg_w32(0x04, 0x6)  # memory + bus master
        self.common = BAR + caps[1][1]
        self.notify = BAR + caps[2][1]
        self.mult = self.cfg_r32(caps[2][2] + 16)
        qmax = self.setup()
        if not quiet:
            print('queue max', qmax)
        self.noff = self.r16(self.common + 0x1e)

    def cmd(self, s):
        self.p.stdin.write(s + '\n')
        self.p.stdin.flush()
        while True:
            l = self.p.stdout.readline()
            if not l:
                raise SystemExit('qemu died on: ' + s)
            if l.startswith('OK') or l.startswith('FAIL') or l.startswith('ERR'):
                if not l.startswith('OK'):
                    raise SystemExit(f'{s} -> {l}')
                return l.split()[1:] if len(l.split()) > 1 else []

    def cfg_addr(self, off): return 0x80000000 | (DEV << 11) | off
    def cfg_w32(self, off, v): self.cmd(f'outl 0xcf8 {self.cfg_addr(off):#x}'); self.cmd(f'outl 0xcfc {v:#x}')
    def cfg_r32(self, off):
        self.cmd(f'outl 0xcf8 {self.cfg_addr(off & ~3):#x}')
        return int(self.cmd('inl 0xcfc')[0], 16) >> (8 * (off & 3))
    def w8(self, a, v): self.cmd(f'writeb {a:#x} {v:#x}')
    def w16(self, a, v): self.cmd(f'writew {a:#x} {v:#x}')
    def w32(self, a, v): self.cmd(f'writel {a:#x} {v:#x}')
    def w64(self, a, v): self.cmd(f'writeq {a:#x} {v:#x}')
    def r8(self, a): return int(self.cmd(f'readb {a:#x}')[0], 16)
    def r16(self, a): return int(self.cmd(f'readw {a:#x}')[0], 16)
    def r32(self, a): return int(self.cmd(f'readl {a:#x}')[0], 16)
    def wmem(self, a, b):
        if b:
            self.cmd(f'b64write {a:#x} {len(b):#x} {base64.b64encode(b).decode()}')
    def rmem(self, a, n): return bytes.fromhex(self.cmd(f'read {a:#x} {n:#x}')[0][2:])

    def setup(self):
        c = self.common
        self.w8(c + 0x14, 0)
        self.w8(c + 0x14, 1); self.w8(c + 0x14, 3)
        self.w32(c + 0x08, 1); self.w32(c + 0x0c, 1)  # VERSION_1
        self.w8(c + 0x14, 11)
        assert self.r8(c + 0x14) & 8, 'FEATURES_OK refused'
        self.w16(c + 0x16, 0)
        qmax = self.r16(c + 0x18)
        self.w16(c + 0x18, Q)
        self.w64(c + 0x20, DESC); self.w64(c + 0x28, AVAIL); self.w64(c + 0x30, USED)
        self.wmem(DESC, bytes(16 * Q)); self.wmem(AVAIL, bytes(4 + 2 * Q)); self.wmem(USED, bytes(4 + 8 * Q))
        self.w16(c + 0x1c, 1)
        self.w8(c + 0x14, 15)
        return qmax

    def submit(self, out_parts, in_len, wait=True):
        """out_parts: list of (gpa, bytes or length); returns (used_len, reply bytes)."""
        state = self.state
        descs = []
        for gpa, data in out_parts:
            if isinstance(data, bytes):
                self.wmem(gpa, data); n = len(data)
            else:
                n = data
            descs.append((gpa, n, 0))
        if in_len:
            self.wmem(RESP, b'\xee' * min(in_len, 64))
            descs.append((RESP, in_len, 2))
        head = (state['avail'] * 4) % Q
        for i, (a, n, f) in enumerate(descs):
            idx = (head + i) % Q
            nxt = (head + i + 1) % Q
            flags = f | (1 if i < len(descs) - 1 else 0)
            self.wmem(DESC + 16 * idx, struct.pack('<QIHH', a, n, flags, nxt))
        self.w16(AVAIL + 4 + 2 * (state['avail'] % Q), head)
        state['avail'] += 1
        self.w16(AVAIL + 2, state['avail'] & 0xffff)
        self.w16(self.notify + self.noff * self.mult, 0)
        if not wait:
            return None
        # A deadline in seconds, not a count of polls: on a loaded machine
        # the backend's thread may wait long for a CPU.
        deadline = time.monotonic() + COMPLETION_TIMEOUT
        while self.r16(USED + 2) == state['used']:
            if time.monotonic() > deadline:
                raise SystemExit(f'no completion in {COMPLETION_TIMEOUT} s')
            self.cmd('clock_step 1000000')
            time.sleep(0.001)
        e = state['used'] % Q
        _id, ln = struct.unpack('<II', self.rmem(USED + 4 + 8 * e, 8))
        state['used'] += 1
        return ln, self.rmem(RESP, min(max(ln, 24), 256))

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
