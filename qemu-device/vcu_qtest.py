"""A guest with no kernel for virtio-cuda-pci, driven through QEMU's qtest
protocol: PCI setup, one virtqueue, requests built byte by byte (the qtest
suites, qemu-device/qtest-vcu.py).  Also the host's side of it: the host
daemon (vcu-daemon) a QEMU reaches through its chardev, a QMP client, and
a stand-in daemon that speaks the link (vcu_link.h) as a hostile one would."""
import base64, json, os, signal, socket, struct, subprocess, sys, threading, time

BAR = 0xe0000000
DEV = 4  # PCI slot
Q = 16
DESC, AVAIL, USED = 0x100000, 0x104000, 0x105000
REQ, RESP, DATA = 0x200000, 0x800000, 0x1000000
COMPLETION_TIMEOUT = 60
UP_WITHIN = 60      # seconds for a QEMU to come up (its device realized)


def hdr(opcode=3, payload_len=16, nsegs=0, req_id=0x1234, session=0):
    return struct.pack('<IIQQIHH', opcode, 0, session, req_id, payload_len, nsegs, 0)


def seg(ln, nr, flags):
    return struct.pack('<QII', ln, nr, flags)


def rng(gpa, ln):
    return struct.pack('<QQ', gpa, ln)


# QEMU's sandbox as libvirt starts it (seccomp_sandbox = 1): no fork, no
# exec; the daemon starts the workers.
SANDBOX = 'on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny'


def daemon_args(sock, reconnect_ms=1000):
    """QEMU's options for the host daemon's link and its sandbox; the
    device needs ",chardev=vcud"."""
    return ['-chardev', f'socket,id=vcud,path={sock},reconnect-ms={reconnect_ms}',
            '-sandbox', SANDBOX]


def sandboxed(pid):
    """(spawn=deny on the command line, seccomp filter mode 2) of a QEMU."""
    try:
        argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0')
        status = open(f'/proc/{pid}/status').read()
    except OSError:
        return False, False
    return (SANDBOX.encode() in argv,
            any(l.split() == ['Seccomp:', '2'] for l in status.splitlines()))


class Guest:
    """One QEMU with the device at slot DEV, its queue set up.  sock: the
    host daemon's socket (the chardev and the sandbox are added), or None
    when extra says it all.  stderr: where QEMU's messages go."""

    # (pid, spawn=deny given, seccomp mode 2) of every QEMU started here.
    started = []

    def __init__(self, qemu, extra, mem_mib=512, device_opts='', quiet=False, sock=None,
                 stderr=None, reconnect_ms=1000, up_within=UP_WITHIN):
        link = daemon_args(sock, reconnect_ms) if sock else []
        chardev = ',chardev=vcud' if sock and 'chardev=' not in device_opts else ''
        self.p = subprocess.Popen(
            [qemu, '-machine', 'pc,accel=qtest', '-qtest', 'stdio', '-qtest-log', '/dev/null',
             '-display', 'none', '-nodefaults', '-m', str(mem_mib),
             '-object', f'memory-backend-memfd,id=mem,size={mem_mib}M,share=on',
             '-machine', 'memory-backend=mem'] + link +
            ['-device', f'virtio-cuda-pci,addr={DEV}.0{chardev}{device_opts}'] + list(extra),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=stderr if stderr is not None else sys.stderr, text=True, bufsize=1)
        self.state = {'avail': 0, 'used': 0}
        # A QEMU whose device never gets its daemon's WELCOME waits in
        # realize: killed after up_within seconds, it fails the case
        # rather than hanging the suite.
        watchdog = threading.Timer(up_within, self.p.kill)
        watchdog.start()
        try:
            ids = self.cfg_r32(0)
        finally:
            watchdog.cancel()
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
        Guest.started.append((self.p.pid,) + sandboxed(self.p.pid))

    def alive(self):
        """QEMU runs and answers a qtest command."""
        if self.p.poll() is not None:
            return False
        try:
            self.cmd('endianness')
        except (SystemExit, BrokenPipeError, OSError):
            return False
        return True

    def cmd(self, s):
        self.p.stdin.write(s + '\n')
        self.p.stdin.flush()
        while True:
            l = self.p.stdout.readline()
            if not l:
                raise SystemExit(f'qemu died on: {s} (exit {self.p.poll()})')
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


def children(ppid, comm='vcu-worker'):
    """Live (not zombie) processes named comm (None: any) whose parent is
    ppid."""
    out = []
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            st = open(f'/proc/{d}/stat').read()
        except OSError:
            continue
        fields = st[st.rindex(')') + 2:].split()
        if comm in (None, st[st.index('(') + 1:st.rindex(')')]) and int(fields[1]) == ppid \
                and fields[0] != 'Z':
            out.append(int(d))
    return sorted(out)


def gone(pid):
    """The process has ended (or is a zombie waiting for its parent)."""
    try:
        return open(f'/proc/{pid}/stat').read().split(') ')[1][0] == 'Z'
    except (OSError, IndexError):
        return True


class Daemon:
    """One vcu-daemon, started as tests/vm/daemon.sh starts one: its run
    folder under root (socket root/name/vcu.sock, control socket beside it),
    its log in root/name.log, the CUDA driver libcuda (a path that is not
    there: no CUDA), module cache cache ('off' or a folder), metrics 'off' or
    HOST:PORT.  start() returns False if it ended at start (see log())."""

    def __init__(self, binary, root, name, libcuda, cache='off', metrics='off', extra=(),
                 env=None):
        self.binary, self.name = binary, name
        self.run = os.path.join(root, name)
        self.sock = os.path.join(self.run, 'vcu.sock')
        self.ctl = os.path.join(self.run, 'control.sock')
        self.logpath = os.path.join(root, name + '.log')
        self.args = [binary, '--run-dir', self.run, '--metrics', metrics, '--cache-dir', cache,
                     '--libcuda', libcuda] + list(extra)
        self.env = env
        self.p = None

    def start(self, wait=True):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        with open(self.logpath, 'a') as log:
            self.p = subprocess.Popen(self.args, stdout=log, stderr=log, env=self.env)
        if not wait:
            return True
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            if os.path.exists(self.sock) and os.path.exists(self.ctl):
                return True
            if self.p.poll() is not None:
                return False
            time.sleep(0.01)
        return False

    def log(self):
        try:
            return open(self.logpath).read()
        except OSError:
            return ''

    def pid(self):
        return self.p.pid if self.p else -1

    def workers(self):
        """Its live vcu-worker processes (probes included): its children,
        and the children of its jails' first processes (vcu-jail), as a
        session's worker runs at a pid of its own in its jail."""
        pid = self.pid()
        return sorted(children(pid) + [w for j in children(pid, 'vcu-jail') for w in children(j)])

    def control(self, **req):
        """One request on the control socket: the answer as JSON."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect(self.ctl)
            s.sendall(json.dumps(req).encode() + b'\n')
            buf = b''
            while not buf.endswith(b'\n'):
                b = s.recv(65536)
                if not b:
                    break
                buf += b
        finally:
            s.close()
        return json.loads(buf)

    def vm(self, qemu_pid):
        """list-vms' entry for the VM of that QEMU, or None."""
        for v in self.control(cmd='list-vms').get('vms', []):
            if v.get('qemu_pid') == qemu_pid:
                return v
        return None

    def vm_workers(self, guest):
        """Live workers of guest's sessions: in list-vms for its QEMU and
        children of this daemon."""
        v = self.vm(guest.p.pid)
        pids = {w['pid'] for w in v['workers']} if v else set()
        return sorted(p for p in self.workers() if p in pids)

    def signal(self, sig):
        if self.p and self.p.poll() is None:
            os.kill(self.p.pid, sig)

    def stop(self):
        """SIGTERM (it kills its workers first); its exit status."""
        if self.p is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


class QMPError(Exception):
    pass


class QMP:
    """A QMP client on a unix socket (-qmp unix:PATH,server=on,wait=off)."""

    def __init__(self, path, timeout=10):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        t0 = time.monotonic()
        while True:
            try:
                self.sock.connect(path)
                break
            except OSError:
                if time.monotonic() - t0 > timeout:
                    raise
                time.sleep(0.02)
        self.f = self.sock.makefile('rb')
        if 'QMP' not in self._read():
            raise QMPError('no QMP greeting')
        self.execute('qmp_capabilities')

    def _read(self):
        line = self.f.readline()
        if not line:
            raise QMPError('connection closed')
        return json.loads(line)

    def execute(self, cmd, **args):
        msg = {'execute': cmd}
        if args:
            msg['arguments'] = args
        self.sock.sendall(json.dumps(msg).encode() + b'\n')
        while True:
            r = self._read()
            if 'event' in r:
                continue
            if 'error' in r:
                raise QMPError(f'{cmd}: {r["error"].get("desc", r["error"])}')
            return r.get('return')

    def close(self):
        self.f.close()
        self.sock.close()


# ---- the link (host-backend/common/vcu_link.h) -----------------------------
LINK_HELLO, LINK_WELCOME, LINK_SPAWN, LINK_SPAWNED, LINK_KILL, LINK_SLICE = 1, 2, 3, 4, 5, 6
LINK_HELLO_LEN, LINK_WELCOME_LEN, LINK_SPAWNED_LEN, LINK_SLICE_LEN = 368, 520, 16, 24
POLICY_MAGIC = 0x31796c6f702d7576
ACCT_MAGIC = 0x31746363612d7576
ACCT_SLOT = 16 + 16 * 16       # struct vcu_acct_slot, VCU_CU_MAX_DEVICES 16


def link_frame(ftype, body=b'', fid=0, blen=None):
    """A frame: vcu_link_hdr (type, len, id), then the body; blen lies
    about the body's length if given."""
    return struct.pack('<IIQ', ftype, len(body) if blen is None else blen, fid) + body


def welcome_body(status=0, vm_id=7, mem_quota=0, max_sessions=64, error=b'', cuda_error=b'',
                 version=1):
    slice_ = struct.pack('<QIIII', mem_quota, max_sessions, 0, 0, 0)
    return (struct.pack('<IIQ', version, status, vm_id) + slice_ +
            error.ljust(240, b'\0')[:240] + cuda_error.ljust(240, b'\0')[:240])


def spawned_body(status=0, pid=0, slot=0):
    return struct.pack('<IIiI', status, pid, slot, 0)


def slice_memfds(nslots=128, seal=True, mem_quota=0):
    """The memory account and policy page a daemon shares with QEMU (two
    memfds), sealed against shrinking unless seal is False."""
    import fcntl
    flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if seal else 0)
    acct = os.memfd_create('qtest-account', flags)
    os.ftruncate(acct, 64 + nslots * ACCT_SLOT)
    os.pwrite(acct, struct.pack('<QQI', ACCT_MAGIC, mem_quota, nslots), 0)
    pol = os.memfd_create('qtest-policy', flags)
    os.ftruncate(pol, 4096)
    os.pwrite(pol, struct.pack('<QQQQIII', POLICY_MAGIC, 1, mem_quota, 0, 0, 0, 64), 0)
    if seal:
        for fd in (acct, pol):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                        fcntl.F_SEAL_SEAL)
    return acct, pol


class FakeLink:
    """One connection QEMU's chardev made to a stand-in daemon."""

    def __init__(self, conn):
        self.c = conn
        self.c.settimeout(10)
        self.buf = b''
        self.fds = []

    def read_frame(self, timeout=10):
        """(type, id, body, fds) of the next frame from QEMU; None at EOF or
        when nothing comes in time."""
        self.c.settimeout(timeout)
        try:
            while True:
                if len(self.buf) >= 16:
                    t, ln, fid = struct.unpack('<IIQ', self.buf[:16])
                    if len(self.buf) >= 16 + ln:
                        body, self.buf = self.buf[16:16 + ln], self.buf[16 + ln:]
                        want = 4 if t == LINK_SPAWN else 0
                        fds, self.fds = self.fds[:want], self.fds[want:]
                        return t, fid, body, fds
                data, fds, _, _ = socket.recv_fds(self.c, 65536, 16)
                self.fds += fds
                if not data:
                    return None
                self.buf += data
        except (socket.timeout, OSError):
            return None

    def send(self, data, fds=()):
        socket.send_fds(self.c, [data], list(fds)) if fds else self.c.sendall(data)

    def send_split(self, data, fds=(), piece=1, pause=0.002):
        """data in pieces of piece bytes, the fds with the first one."""
        for i in range(0, len(data), piece):
            self.send(data[i:i + piece], fds if i == 0 else ())
            time.sleep(pause)

    def closed(self, timeout=5):
        """True once QEMU has closed this connection (what it sends meanwhile
        is read and dropped)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            self.c.settimeout(max(0.01, timeout - (time.monotonic() - t0)))
            try:
                data, fds, _, _ = socket.recv_fds(self.c, 65536, 16)
            except socket.timeout:
                return False
            except OSError:
                return True
            for fd in fds:
                os.close(fd)
            if not data:
                return True
        return False

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        self.c.close()


class FakeDaemon:
    """A unix socket a QEMU chardev connects to, served by the test: each
    accept() gives a FakeLink."""

    def __init__(self, path):
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.bind(path)
        self.s.listen(8)

    def accept(self, timeout=20):
        self.s.settimeout(timeout)
        try:
            c, _ = self.s.accept()
        except socket.timeout:
            return None
        return FakeLink(c)

    def close(self):
        self.s.close()
        if os.path.exists(self.path):
            os.unlink(self.path)
