#!/usr/bin/env python3
"""Drive virtio-cuda-pci through QEMU's qtest protocol as a hostile guest.

    qtest-vcu.py QEMU [QEMU options...]

Every QEMU runs as libvirt starts it (-sandbox on,...,spawn=deny) and
reaches a host daemon through its chardev (-chardev socket,id=vcud,path=
...,reconnect-ms=1000 and chardev=vcud on the device); the daemon
(vcu-daemon beside QEMU, or $VCU_DAEMON) starts the workers.  The suite
starts the daemons it needs in a temporary folder: one without CUDA (its
libcuda is a path that is not there), one on the CPU stand-in for libcuda
(build/fakecuda, or $VCU_QTEST_LIBCUDA) with a module cache and its
metrics endpoint, and short-lived ones for a case each; it ends them with
SIGTERM.  A stand-in daemon of the suite's own (vcu_qtest.FakeDaemon)
answers the link as a broken or hostile one would.  Each case prints PASS
or FAIL; the last line is "N passed, N failed".
"""
import hashlib, os, re, signal, socket, stat as stat_mod, struct, subprocess, sys, tempfile
import threading, time, traceback, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vcu_qtest import (Guest, Daemon, FakeDaemon, QMP, QMPError, hdr, seg, rng,  # noqa: E402
                       BAR, REQ, RESP, DATA, daemon_args, sandboxed, children, gone,
                       link_frame, welcome_body, spawned_body, slice_memfds,
                       LINK_HELLO, LINK_WELCOME, LINK_SPAWN, LINK_SPAWNED, LINK_SLICE,
                       LINK_HELLO_LEN, UP_WITHIN)

QEMU = sys.argv[1]
X = sys.argv[2:]
HERE = os.path.dirname(os.path.abspath(__file__))
DAEMON_BIN = os.environ.get('VCU_DAEMON', os.path.join(os.path.dirname(QEMU), 'vcu-daemon'))
FAKECUDA = os.path.abspath(os.environ.get('VCU_QTEST_LIBCUDA',
                                          os.path.join(HERE, '..', 'build', 'fakecuda',
                                                       'libcuda.so.1')))
ROOT = tempfile.mkdtemp(prefix='vcu-qtest-')
os.chmod(ROOT, 0o755)           # the workers (user nobody) reach the module cache in it
NOCUDA = os.path.join(ROOT, 'no-driver', 'libcuda.so.1')
T0 = time.monotonic()

S_OK, EINVAL, ENOTSUP, ENOSESSION, EFAULT, E2BIG, EBUSY, EIO, ENODEV = 0, 1, 2, 3, 5, 6, 8, 9, 10
VALID = [int(x) for x in os.environ.get('VALID_STATUS', '2,3').split(',')]
echo = struct.pack('<QII', 7, 0, 0)
open_req = struct.pack('<IIQQQ', 1, 1, 1, 0, 0)  # version 1, FEAT_ECHO

passes = fails = 0


def ok(name, cond):
    global passes, fails
    cond = bool(cond)
    print(('PASS' if cond else 'FAIL'), name, flush=True)
    passes += cond
    fails += not cond
    return cond


def check(name, res, want_status, want_len=None):
    ln, reply = res
    if want_status is None:
        good = ln == want_len
        got = f'used len {ln}'
    else:
        st, plen, rid = struct.unpack('<IIQ', reply[:16])
        good = ln >= 24 and st == want_status and rid == (0 if 'shorter than header' in name else 0x1234)
        got = f'used len {ln} status {st} req_id {rid:#x}'
    return ok(f'{name} -> {got}', good)


def check_valid(name, res):
    ln, reply = res
    st, _, rid = struct.unpack('<IIQ', reply[:16])
    return ok(f'{name} -> used len {ln} status {st} req_id {rid:#x} (backend reply)',
              ln >= 24 and st in VALID and rid == 0x1234)


def expect(name, cond, secs=5.0):
    t0 = time.time()
    while not cond() and time.time() - t0 < secs:
        time.sleep(0.02)
    return ok(name, cond())


def status(res):
    return struct.unpack('<I', res[1][:4])[0] if res[0] >= 24 else -1


# ---- daemons and QEMUs ----------------------------------------------------
DAEMONS, GUESTS = [], []


def start_daemon(name, libcuda=FAKECUDA, **kw):
    d = Daemon(DAEMON_BIN, ROOT, name, libcuda, **kw)
    DAEMONS.append(d)
    if not d.start():
        raise RuntimeError(f'vcu-daemon {name} did not start: {d.log()[-600:]}')
    return d


def guest(d, device_opts='', extra=(), mem_mib=256, **kw):
    """A Guest on daemon d (a Daemon or a socket path)."""
    sock = d if isinstance(d, str) else d.sock
    g = Guest(QEMU, X + list(extra), mem_mib=mem_mib, device_opts=device_opts, quiet=True,
              sock=sock, **kw)
    GUESTS.append(g)
    return g


def qemu_argv(sock, device, mem=64, extra=()):
    return ([QEMU, '-machine', 'pc,accel=qtest', '-qtest', 'stdio', '-qtest-log', '/dev/null',
             '-display', 'none', '-nodefaults', '-m', str(mem),
             '-object', f'memory-backend-memfd,id=mem,size={mem}M,share=on',
             '-machine', 'memory-backend=mem'] + daemon_args(sock) +
            ['-device', device] + list(extra) + X)


def device_opts(props, sock, env=None):
    """Starts a QEMU with the device and props on daemon socket sock:
    (whether it came up, what it said on stderr)."""
    dev = 'virtio-cuda-pci' + ('' if 'chardev=' in props else ',chardev=vcud') + \
          (',' + props if props else '')
    q = subprocess.Popen(qemu_argv(sock, dev), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    up = False
    watchdog = threading.Timer(UP_WITHIN, q.kill)
    watchdog.start()
    try:
        q.stdin.write('endianness\n')
        q.stdin.flush()
        up = q.stdout.readline().startswith('OK')
    except BrokenPipeError:
        pass
    finally:
        watchdog.cancel()
    if up:
        # QEMU never loads the driver (the stand-in here): the workers do.
        try:
            maps = open(f'/proc/{q.pid}/maps').read()
        except OSError:
            maps = ''
        device_opts.driver_in_qemu |= 'libcuda' in maps
        Guest.started.append((q.pid,) + sandboxed(q.pid))
    if q.poll() is None:
        q.kill()
    _, err = q.communicate(timeout=30)
    return up, err


device_opts.driver_in_qemu = False


def check_opts(name, props, want_up, want_err, sock):
    up, err = device_opts(props, sock)
    good = up == want_up and (want_err in err if want_err else 'CUDA is not available' not in err)
    said = [l.split(': ', 2)[-1] for l in err.splitlines() if l.startswith(os.path.basename(QEMU) + ':')]
    return ok(f'{name} -> {"up" if up else "exited"} {" | ".join(said)[:300]}', good)


def cuda_session(v):
    ln, r = v.submit([(REQ, hdr(opcode=1, payload_len=32) + struct.pack('<IIQQQ', 1, 1, 3, 0, 0))], 256)
    return struct.unpack('<Q', r[24 + 16:24 + 24])[0] if ln >= 64 else 0


def echo_session(v):
    ln, r = v.submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)
    return struct.unpack('<Q', r[24 + 16:24 + 24])[0] if ln >= 64 else 0


def cu_result(r): return struct.unpack('<I', r[24:28])[0]
def memcpy_req(dst, src, n): return struct.pack('<IIQQQQII', 0, 0, dst, src, n, 0, 0, 0)


def cu_alloc(v, sess, n):
    rq = struct.pack('<IIQQQ', 0, 0, n, 0, 0)
    ln, r = v.submit([(REQ, hdr(opcode=0x200, payload_len=len(rq), session=sess) + rq)], 256)
    return cu_result(r) if ln >= 32 else -1


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


PROM_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\})? '
                       r'(-?[0-9.eE+-]+)$')


def prom_parse(text):
    """{(name, frozenset(labels)): value}, or None if a line does not parse,
    a family's samples come before its # TYPE, or a sample is repeated."""
    out, typed = {}, set()
    for line in text.splitlines():
        if line.startswith('# HELP '):
            continue
        if line.startswith('# TYPE '):
            if len(line.split()) != 4 or line.split()[3] not in ('gauge', 'counter'):
                return None
            typed.add(line.split()[2])
            continue
        m = PROM_LINE.match(line)
        if not m or m.group(1) not in typed:
            print('  bad line:', repr(line))
            return None
        lab = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ''))
        if (m.group(1), lab) in out:
            print('  repeated sample:', repr(line))
            return None
        out[(m.group(1), lab)] = float(m.group(3))
    return out


def scrape(port, path='/metrics'):
    """(HTTP status, content type, Prometheus text parsed or None)."""
    try:
        with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}', timeout=10) as r:
            return r.status, r.headers.get('Content-Type', ''), prom_parse(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, '', None


def fd_count(pid):
    try:
        return len(os.listdir(f'/proc/{pid}/fd'))
    except OSError:
        return -1


def section(fn):
    """Runs one part of the suite; an exception in it (QEMU died, a daemon
    did not start) is one failure, and the suite goes on."""
    try:
        fn()
    except BaseException as e:     # noqa: B036 -- SystemExit from Guest.cmd too
        if isinstance(e, KeyboardInterrupt):
            raise
        traceback.print_exc()
        ok(f'{fn.__name__}: ran to its end ({type(e).__name__}: {e})', False)
    finally:
        for g in GUESTS:
            g.close()
        GUESTS.clear()
        print(f'  [{fn.__name__} done at {time.monotonic() - T0:.1f} s]', flush=True)


D = {}  # the run's daemons: 'none' (no CUDA), 'fake' (the stand-in)


# ---- hostile requests ---------------------------------------------------
def hostile_requests():
    # Not in GUESTS: workers_per_session() goes on with it.
    g = D['g'] = Guest(QEMU, X, mem_mib=512, quiet=True, sock=D['none'].sock)
    submit, w8 = g.submit, g.w8
    sp, sc = sandboxed(g.p.pid)
    ok(f'QEMU runs as libvirt starts it: -sandbox ...,spawn=deny in /proc/PID/cmdline ({sp}), '
       f'Seccomp: 2 in /proc/PID/status ({sc})', sp and sc)
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
    check('nranges sum > max',
          submit([(REQ, hdr(nsegs=2) + echo + seg(8, 0x40000, 1) + seg(8, 0x40000, 1))], 64), E2BIG)
    check('seg len > max xfer', submit([(REQ, hdr(nsegs=1) + echo + seg(1 << 31, 1, 1) + rng(DATA, 8))], 64), E2BIG)
    check('xfer sum > max', submit([(REQ, hdr(nsegs=2) + echo + seg(1 << 30, 1, 1) + seg(1 << 30, 1, 2) +
                                     rng(DATA, 1 << 30) * 2)], 64), E2BIG)
    check('range list missing', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 1))], 64), EINVAL)
    check('range list trailing bytes',
          submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 1) + rng(DATA, 8) + b'x' * 8)], 64), EINVAL)
    check('range len 0', submit([(REQ, hdr(nsegs=1) + echo + seg(0, 1, 1) + rng(DATA, 0))], 64), EINVAL)
    check('range len > seg len', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 1) + rng(DATA, 16))], 64), EINVAL)
    check('range len < seg len', submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 1) + rng(DATA, 8))], 64), EINVAL)
    check('sum overflow', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 2, 1) + rng(DATA, 1 << 30) +
                                   rng(DATA, (1 << 64) - (1 << 30) + 8))], 64), EINVAL)
    check('range wraps', submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 1) + rng((1 << 64) - 8, 16))], 64), EFAULT)
    check('range beyond RAM', submit([(REQ, hdr(nsegs=1) + echo + seg(4096, 1, 2) + rng(1 << 40, 4096))], 64), EFAULT)
    check('range in MMIO (our BAR)', submit([(REQ, hdr(nsegs=1) + echo + seg(4096, 1, 2) + rng(BAR, 4096))], 64),
          EFAULT)
    check('range in LAPIC', submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 1) + rng(0xfee00000, 16))], 64), EFAULT)
    check('range in BIOS ROM, write',
          submit([(REQ, hdr(nsegs=1) + echo + seg(16, 1, 2) + rng(0xfffff000, 16))], 64), EFAULT)
    check('range past end of RAM',
          submit([(REQ, hdr(nsegs=1) + echo + seg(0x2000, 1, 2) + rng(0x20000000 - 0x1000, 0x2000))], 64), EFAULT)
    check('2nd range bad (1st unmapped)',
          submit([(REQ, hdr(nsegs=2) + echo + seg(8, 1, 1) + seg(8, 1, 2) + rng(DATA, 8) + rng(BAR, 8))], 64),
          EFAULT)
    check('out stream > max', submit([(REQ, hdr() + echo), (0x4000000, 5 << 20)], 64), E2BIG)
    check_valid('echo with 2 segments in RAM',
                submit([(REQ, hdr(nsegs=2) + echo + seg(8192, 2, 1) + seg(4096, 1, 2) + rng(DATA, 4096) +
                         rng(DATA + 8192, 4096) + rng(DATA + 0x10000, 4096))], 256))
    check_valid('echo, request split over 3 descriptors',
                submit([(REQ, hdr(nsegs=1)), (REQ + 0x1000, echo), (REQ + 0x2000, seg(100, 1, 2) + rng(DATA, 100))],
                       256))
    # VCU_SEG_F_STABLE (4): with exactly one direction bit, nothing else.
    check('seg flags STABLE alone', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 4) + rng(DATA, 8))], 64), EINVAL)
    check('seg flags STABLE|TO|FROM', submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 7) + rng(DATA, 8))], 64), EINVAL)
    check('seg flags STABLE|TO|bit 3',
          submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 13) + rng(DATA, 8))], 64), EINVAL)
    check_valid('seg flags STABLE|TO reaches the backend',
                submit([(REQ, hdr(nsegs=1) + echo + seg(8, 1, 5) + rng(DATA, 8))], 256))
    # SESSION_FENCE (4) reaches the backend: unknown session, then a real one.
    check('FENCE on an unknown session', submit([(REQ, hdr(opcode=4, payload_len=0, session=0x77))], 64), ENOSESSION)
    ln, reply = submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)
    check('SESSION_OPEN', (ln, reply), S_OK)
    sid = struct.unpack('<Q', reply[24 + 16:24 + 24])[0] if ln >= 64 else 0
    pattern = bytes((i * 7 + 3) & 0xff for i in range(6000))
    g.wmem(DATA, pattern)
    g.wmem(DATA + 0x10000, bytes(6000))
    res = submit([(REQ, hdr(nsegs=2, session=sid) + echo + seg(6000, 2, 5) + seg(6000, 1, 6) +
                   rng(DATA, 4096) + rng(DATA + 4096, 6000 - 4096) + rng(DATA + 0x10000, 6000))], 256)
    check('echo over STABLE segments', res, S_OK)
    ok('echo over STABLE segments moved the data', g.rmem(DATA + 0x10000, 6000) == pattern)
    check('FENCE on the session', submit([(REQ, hdr(opcode=4, payload_len=0, session=sid))], 64), S_OK)
    # A fence may name memory it releases (TO_DEVICE, not STABLE), nothing else.
    check('FENCE releasing a range', submit([(REQ, hdr(opcode=4, payload_len=0, nsegs=1, session=sid) +
                                             seg(8, 1, 1) + rng(DATA, 8))], 64), S_OK)
    check('FENCE with a STABLE segment', submit([(REQ, hdr(opcode=4, payload_len=0, nsegs=1, session=sid) +
                                                 seg(8, 1, 5) + rng(DATA, 8))], 64), EINVAL)
    check('FENCE with a FROM_DEVICE segment', submit([(REQ, hdr(opcode=4, payload_len=0, nsegs=1, session=sid) +
                                                      seg(8, 1, 2) + rng(DATA, 8))], 64), EINVAL)
    check('SESSION_CLOSE', submit([(REQ, hdr(opcode=2, payload_len=0, session=sid))], 64), S_OK)
    check('FENCE after close', submit([(REQ, hdr(opcode=4, payload_len=0, session=sid))], 64), ENOSESSION)
    # Reset with requests queued but not kicked, then again usable.
    submit([(REQ, hdr() + echo)], 256, wait=False)
    w8(g.common + 0x14, 0)
    g.state.update(avail=0, used=0)
    g.setup()
    check_valid('echo after reset', submit([(REQ, hdr() + echo)], 256))
    # Driver sets FAILED.
    w8(g.common + 0x14, 0x8f)
    w8(g.common + 0x14, 0)
    g.state.update(avail=0, used=0)
    g.setup()
    check_valid('echo after FAILED+reset', submit([(REQ, hdr() + echo)], 256))
    ok('qemu alive after every hostile request', g.alive())


# ---- one worker process per session -------------------------------------
# The daemon starts them: its vcu-worker children that list-vms names for
# this QEMU's VM.  QEMU itself has no child at all.
def workers_per_session():
    g, dn = D['g'], D['none']
    submit = g.submit

    def workers():
        return dn.vm_workers(g)
    base = len(workers())
    s1, s2 = echo_session(g), echo_session(g)
    check('echo on session 1', submit([(REQ, hdr(session=s1) + echo)], 256), S_OK)
    expect('a worker process for each of two sessions, the daemon\'s children',
           lambda: len(workers()) == base + 2)
    v = dn.vm(g.p.pid)
    ok(f'list-vms: the VM of this QEMU, two sessions, their workers ({v and v["workers"]})',
       v is not None and v['sessions'] == 2 and
       sorted(w['pid'] for w in v['workers']) == workers())
    ok(f'QEMU has no child process (spawn=deny; the daemon starts workers): '
       f'{children(g.p.pid, None)}', children(g.p.pid, None) == [])
    check('SESSION_CLOSE of session 1', submit([(REQ, hdr(opcode=2, payload_len=0, session=s1))], 64), S_OK)
    expect('its worker is gone once the close is answered', lambda: len(workers()) == base + 1, 0.5)
    check('session 2 still works', submit([(REQ, hdr(session=s2) + echo)], 256), S_OK)
    # A request that takes 10 s on the host, then a device reset: the reset
    # must not wait for it (QEMU's main loop would stop for those 10 s).
    slow = struct.pack('<QII', 7, 0, 10000)
    submit([(REQ, hdr(session=s2) + slow)], 256, wait=False)
    time.sleep(0.2)
    t0 = time.time()
    g.w8(g.common + 0x14, 0)
    g.cmd('readb 0xcfc')
    dt = time.time() - t0
    # Well under 100 ms on an idle machine (the GPU suite holds QEMU's
    # monitor to 100 ms through a real reset); the bound here leaves room
    # for a busy CI machine and still fails a reset that waits for the
    # work (10 s).
    ok(f'reset with 10 s of work in flight answered in {dt * 1000:.1f} ms', dt < 1.0)
    expect('no worker left after reset', lambda: len(workers()) == base)
    g.state.update(avail=0, used=0)
    g.setup()
    s3 = echo_session(g)
    check('a new session after reset', submit([(REQ, hdr(session=s3) + echo)], 256), S_OK)
    # An open the worker refuses (protocol version 99): the guest gets no
    # session id to close, so nothing of it may stay: not its worker, not
    # its place among the VM's sessions.
    n0 = len(workers())
    ln, r = submit([(REQ, hdr(opcode=1, payload_len=32) + struct.pack('<IIQQQ', 99, 1, 1, 0, 0))], 256)
    st = struct.unpack('<I', r[:4])[0] if ln >= 24 else -1
    expect(f'an open the worker refuses (version 99: status {st}) leaves no worker and no session behind',
           lambda: st == 7 and len(workers()) == n0 and dn.vm(g.p.pid)['sessions'] == n0)
    left = workers()
    pid = g.p.pid
    g.p.kill()
    g.p.wait()
    expect(f'workers end with QEMU ({left})', lambda: left and all(gone(w) for w in left))
    expect('the daemon forgets the VM once its QEMU is gone', lambda: dn.vm(pid) is None)


# ---- refused opens ------------------------------------------------------
# A daemon that gives each VM one session (--max-sessions 1): the second
# process's open is refused (EBUSY) and leaves nothing behind in QEMU, its
# session count or its descriptors, however often it is tried; once the
# first process closes, an open works again.
def refused_opens():
    d1 = start_daemon('one-session', libcuda=NOCUDA, extra=['--max-sessions', '1'])
    qsock = os.path.join(ROOT, 'one.qmp')
    g = guest(d1, ',id=vcu0', extra=['-qmp', f'unix:{qsock},server=on,wait=off'])
    mon = QMP(qsock, 10)
    s1 = echo_session(g)
    check('the one session the daemon gives opens', g.submit([(REQ, hdr(session=s1) + echo)], 256), S_OK)
    nfd = fd_count(g.p.pid)
    sts = [status(g.submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)) for _ in range(70)]
    # The last refused one is freed by the next open (its three sockets
    # until then); a leak would hold three for each.
    expect(f'70 opens past the daemon\'s limit are EBUSY ({set(sts)}) and leave nothing behind: sessions '
           f'{mon.execute("qom-get", path="/machine/peripheral/vcu0", property="sessions")}, descriptors '
           f'{nfd} -> {fd_count(g.p.pid)}',
           lambda: set(sts) == {EBUSY} and fd_count(g.p.pid) <= nfd + 3 and
           mon.execute('qom-get', path='/machine/peripheral/vcu0', property='sessions') == 1)
    check('the first session still works', g.submit([(REQ, hdr(session=s1) + echo)], 256), S_OK)
    check('it closes', g.submit([(REQ, hdr(opcode=2, payload_len=0, session=s1))], 64), S_OK)
    s2 = echo_session(g)
    check('then a new open works', g.submit([(REQ, hdr(session=s2) + echo)], 256), S_OK)
    mon.close()
    g.close()
    d1.stop()


# ---- set-up errors --------------------------------------------------------
def setup_errors():
    sock = D['none'].sock
    # Guest RAM that workers cannot map is refused at start, with the options.
    base = [QEMU, '-machine', 'pc,accel=qtest', '-qtest', 'null', '-display', 'none', '-nodefaults',
            '-m', '256'] + daemon_args(sock)
    r = subprocess.run(base + ['-device', 'virtio-cuda-pci,chardev=vcud'] + X,
                       capture_output=True, text=True, timeout=60)
    ok('private guest RAM refused with the options to use: ' + r.stderr.strip()[:200],
       r.returncode != 0 and
       'memory-backend-memfd,id=mem,size=256M,share=on -machine memory-backend=mem' in r.stderr)
    r = subprocess.run(base + ['-object', 'memory-backend-memfd,id=mem,size=256M,share=off',
                               '-machine', 'memory-backend=mem', '-device', 'virtio-cuda-pci,chardev=vcud'] + X,
                       capture_output=True, text=True, timeout=60)
    ok('memfd RAM with share=off refused', r.returncode != 0 and 'share=on' in r.stderr)
    r = subprocess.run(base + ['-object', 'memory-backend-memfd,id=mem,size=256M,share=on',
                               '-machine', 'memory-backend=mem', '-device', 'virtio-cuda-pci'] + X,
                       capture_output=True, text=True, timeout=60)
    ok('no chardev: refused, naming the option to add: ' + r.stderr.strip()[:160],
       r.returncode != 0 and 'chardev property is required' in r.stderr and 'reconnect-ms' in r.stderr)
    # Properties that moved to the daemon are gone from the device: a
    # stale command line fails loudly rather than being ignored.
    for props, want in (('libcuda=/usr/lib/libcuda.so.1', "'virtio-cuda-pci.libcuda' not found"),
                        ('share-group=/run/vcu/group', "'virtio-cuda-pci.share-group' not found"),
                        ('mps-pipe=/tmp/nvidia-mps', "'virtio-cuda-pci.mps-pipe' not found"),
                        ('module-cache=/var/cache/vcu', 'module-cache must be shared, private or off'),
                        ('max-sessions=0', 'max-sessions must be 1..4096')):
        check_opts(f'{props} is refused', props, False, want, sock)


# ---- what the daemon's probe says: gpus, libcuda --------------------------
# The gpus property through QEMU's own -device parser, as the README
# writes it, against the CPU stand-in for libcuda (two devices).  QEMU
# splits -device on ',', so a list is "0:1" or "0,,1" (its comma escape);
# the daemon's probe worker complains about the list, and the device
# passes it on as a warning ("CUDA is not available (...)": the device
# still comes up), which tells whether the list it got was the one meant.
def gpus_and_probe():
    sock = D['fake'].sock
    check_opts('gpus=0:1 gives both GPUs', 'gpus=0:1', True, None, sock)
    check_opts('gpus=0,,1 gives both GPUs', 'gpus=0,,1', True, None, sock)
    check_opts('gpus=1 alone', 'gpus=1', True, None, sock)
    check_opts('gpus=0:0 is split (GPU given twice)', 'gpus=0:0', True, 'host GPU 0 given twice', sock)
    check_opts('gpus=0,,0 is split (GPU given twice)', 'gpus=0,,0', True, 'host GPU 0 given twice', sock)
    check_opts('gpus=0:2 names a missing GPU', 'gpus=0:2', True,
               '"2" is not a host GPU ordinal below 2', sock)
    check_opts('gpus=0,1 is refused by QEMU', 'gpus=0,1', False, "Property 'virtio-cuda-pci.1' not found", sock)
    check_opts('a daemon without the driver: the device comes up, told why CUDA is not there', '', True,
               'CUDA is not available (', D['none'].sock)
    # Every -device line the README prints starts QEMU as it says.
    readme = os.path.join(HERE, '..', 'README.md')
    forms = re.findall(r'-device virtio-cuda-pci,([^\s`]+)', open(readme).read())
    ok(f'README prints -device lines: {forms}', len(forms) >= 2)
    for props in forms:
        # The README names its chardev (vcu0, a -chardev line beside it):
        # here it is the suite's own, on this daemon.
        props = re.sub(r'chardev=[^,]*', 'chardev=vcud', props)
        check_opts(f'README: -device virtio-cuda-pci,{props}', props, True, None, sock)
    ok('QEMU has not loaded the CUDA driver (the stand-in) itself', not device_opts.driver_in_qemu)
    # A GPU that reads pageable host memory could reach all guest RAM the
    # worker maps: CUDA is refused there, with the reason.
    dp = start_daemon('pageable', env=dict(os.environ, VCU_FAKECUDA_PAGEABLE_ACCESS='1'))
    up, err = device_opts('gpus=0', dp.sock)
    ok('CUDA refused on a GPU that reaches pageable host memory: ' + ' '.join(err.split())[:160],
       up and 'can access pageable host memory' in err)
    dp.stop()


# ---- another VM ----------------------------------------------------------
# Two VMs on the stand-in: the second one's session copies from a device
# pointer the first one allocated and filled, and gets an error, not the
# data; the first one reads it back (so the copy itself works).
def another_vm():
    va, vb = guest(D['fake']), guest(D['fake'])
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
    ok(f'another VM copying from a VM\'s device pointer {ptr:#x}: CUresult {res_b} '
       f'(the owner reads it back: {own})', wrote and own and res_b != 0 and got_b != secret)


# ---- module cache -----------------------------------------------------
# The daemon's module cache (--cache-dir): two VMs on it (module-cache=
# shared, the default), on the stand-in: a module VM A's session loaded
# (sent whole) is loaded in VM B by its SHA-256 alone, a request with no
# data segment at all (CU_MODULE_LOAD_HASH, 0x30e); before that, B's
# request misses (CUDA_ERROR_FILE_NOT_FOUND, 301).  A session that did not
# agree the feature gets ENOTSUP; module-cache=private keeps a VM out of
# the shared cache; module-cache=off agrees no cache; a cache folder others
# may write to keeps the daemon from starting.
MC_IMG = (b'//\n.version 8.0\n.target sm_90\n.visible .entry _Z10vector_addPKfS0_Pfi()\n{\n}\n'
          b'// qtest module cache ' + str(time.time()).encode() + b'\n')


def cache_session(v, feat):
    ln, r = v.submit([(REQ, hdr(opcode=1, payload_len=32) + struct.pack('<IIQQQ', 1, 1, feat, 0, 0))], 256)
    return struct.unpack('<QQ', r[24 + 8:24 + 24]) if ln >= 64 else (0, 0)


def by_hash(v, sess, img):
    rq = struct.pack('<IIQ', 0, 0, len(img)) + hashlib.sha256(img).digest()
    ln, r = v.submit([(REQ, hdr(opcode=0x30e, payload_len=len(rq), session=sess) + rq)], 256)
    st = struct.unpack('<I', r[:4])[0]
    return st, (cu_result(r) if ln >= 32 and st == 0 else -1), (struct.unpack('<Q', r[32:40])[0] if ln >= 40 else 0)


def module_cache():
    cache = D['fake_cache']
    ma, mb = guest(D['fake']), guest(D['fake'])
    feat_a, sa = cache_session(ma, 0xb)
    feat_b, sb = cache_session(mb, 0xb)
    ok(f'module cache: VCU_FEAT_MODULE_CACHE agreed ({feat_a:#x}, {feat_b:#x})', feat_a & 8 and feat_b & 8)
    ok('module cache: a module no VM loaded misses (301)', by_hash(mb, sb, MC_IMG)[:2] == (0, 301))
    ma.wmem(DATA, MC_IMG)
    rq = struct.pack('<IIQ', 0, 0, len(MC_IMG))
    ln, r = ma.submit([(REQ, hdr(opcode=0x30f, payload_len=len(rq), nsegs=1, session=sa) + rq +
                        seg(len(MC_IMG), 1, 1) + rng(DATA, len(MC_IMG)))], 256)
    ok('module cache: VM A sends the module whole (CU_MODULE_LOAD_KEEP), told its SHA-256',
       ln >= 72 and cu_result(r) == 0 and r[40:72] == hashlib.sha256(MC_IMG).digest())
    fpath = os.path.join(cache, 'modules', hashlib.sha256(MC_IMG).hexdigest())
    mode = stat_mod.S_IMODE(os.stat(fpath).st_mode) if os.path.exists(fpath) else -1
    ok(f'module cache: stored in the daemon\'s cache under its SHA-256, mode {mode:o}', mode == 0o600)
    st, res, h = by_hash(mb, sb, MC_IMG)
    ok(f'module cache: VM B loads it by hash, no data segment (status {st}, CUresult {res})',
       st == 0 and res == 0 and h != 0)
    name = b'_Z10vector_addPKfS0_Pfi'
    rq = struct.pack('<IIQII', 0, 0, h, len(name), 0) + name
    ln, r = mb.submit([(REQ, hdr(opcode=0x302, payload_len=len(rq), session=sb) + rq +
                        bytes(-len(rq) % 8))], 256)
    ok('module cache: its function is there', ln >= 32 and cu_result(r) == 0)
    _, sc = cache_session(mb, 0x3)
    ok('module cache: refused (ENOTSUP) in a session without the feature', by_hash(mb, sc, MC_IMG)[0] == ENOTSUP)
    mp = guest(D['fake'], ',module-cache=private', extra=['-name', 'qtest-private'])
    feat_p, sp = cache_session(mp, 0xb)
    pdir = os.path.join(cache, 'vm-qtest-private')
    pmode = stat_mod.S_IMODE(os.stat(pdir).st_mode) if os.path.isdir(pdir) else -1
    ok(f'module-cache=private: a cache of the VM\'s own ({pdir}, mode {pmode:o}) that does not have '
       f'what the shared one has', feat_p & 8 and pmode == 0o700 and by_hash(mp, sp, MC_IMG)[:2] == (0, 301))
    mo = guest(D['fake'], ',module-cache=off')
    feat_o, so = cache_session(mo, 0xb)
    ok(f'module-cache=off: the feature is not agreed ({feat_o:#x}), a load by hash is ENOTSUP',
       not feat_o & 8 and by_hash(mo, so, MC_IMG)[0] == ENOTSUP)
    check_opts('module-cache=bogus is refused', 'module-cache=bogus', False,
               'module-cache must be shared, private or off', D['fake'].sock)
    bad = os.path.join(ROOT, 'badcache')
    os.mkdir(bad)
    os.chmod(bad, 0o777)
    db = Daemon(DAEMON_BIN, ROOT, 'badcache', NOCUDA, cache=bad)
    started = db.start()
    if started:
        db.stop()
    ok('a daemon --cache-dir writable by others is refused: ' + (db.log().strip().splitlines() or [''])[-1][:120],
       not started and 'writable by group or others' in db.log())


# ---- mem-quota --------------------------------------------------------
# One VM with mem-quota=8M on the stand-in (its daemon charges a context
# 1 MiB): two guest processes (a worker each) share the 8 MiB, their
# contexts included; one byte past fails as on a full GPU
# (CUDA_ERROR_OUT_OF_MEMORY, 2) and the session goes on; the guest is told
# total = 8 MiB and free = what is left; the first process's worker
# killed, its 4 MiB and its context come back to the second.
def mem_quota():
    df = D['fake']
    vq = guest(df, ',mem-quota=8M')
    qa = cuda_session(vq)
    wa = df.vm_workers(vq)
    qb = cuda_session(vq)
    ok('mem-quota: two processes fill the 8 MiB (4 + 2 MiB and two 1 MiB contexts)',
       cu_alloc(vq, qa, 4 << 20) == 0 and cu_alloc(vq, qb, 2 << 20) == 0)
    ok('mem-quota: one byte past it is CUDA_ERROR_OUT_OF_MEMORY, in either process',
       cu_alloc(vq, qb, 1) == 2 and cu_alloc(vq, qa, 1) == 2)
    ln, r = vq.submit([(REQ, hdr(opcode=0x102, payload_len=8, session=qb) + struct.pack('<II', 0, 0))], 256)
    fr, tot = struct.unpack('<QQ', r[32:48]) if ln >= 48 else (-1, -1)
    ok(f'mem-quota: cuMemGetInfo free {fr} total {tot}', cu_result(r) == 0 and (fr, tot) == (0, 8 << 20))
    ln, r = vq.submit([(REQ, hdr(opcode=0x101, payload_len=8, session=qb) + struct.pack('<II', 0, 0))], 8192)
    tm = struct.unpack('<Q', vq.rmem(RESP + 304, 8))[0] if ln >= 312 else -1   # past the 256 read
    ok(f'mem-quota: the device\'s total memory {tm}', cu_result(r) == 0 and tm == 8 << 20)
    ln, r = vq.submit([(REQ, hdr(opcode=0x10d, payload_len=8, session=qb) + struct.pack('<II', 0, 0))], 4096)
    q, tot, used, ctx = struct.unpack('<QQQQ', r[32:64]) if ln >= 64 else (0, 0, 0, 0)
    nsess = struct.unpack('<I', r[76:80])[0] if ln >= 80 else 0
    ok(f'mem-quota: CU_SLICE_INFO quota {q} total {tot} used {used} sessions {nsess}',
       cu_result(r) == 0 and (q, tot, used, nsess) == (8 << 20, 8 << 20, 8 << 20, 2) and
       ctx == 2 << 20)
    if len(wa) == 1:
        os.kill(wa[0], 9)
    t0 = time.time()
    while cu_alloc(vq, qb, 5 << 20) != 0 and time.time() - t0 < 10:
        time.sleep(0.05)
    ok('mem-quota: a killed process\'s charge comes back to the other',
       len(wa) == 1 and cu_alloc(vq, qb, 1) == 2 and time.time() - t0 < 10)


# ---- monitoring: QOM stats and the daemon's metrics ----------------------
# One VM (-name qtest-mon) with mem-quota=8M and a QMP socket: qom-get on
# the device's read-only properties before any session, with two sessions
# holding memory, after one is closed and the other's worker killed; its
# counters (requests, kicks, notifies) move as the guest works.  The
# daemon's metrics endpoint (GET /metrics) carries the same per-VM
# figures.  A worker that tries to shrink its VM's memory account (QEMU
# and the daemon map it) is refused.
def monitoring():
    df, port = D['fake'], D['fake_port']
    qsock = os.path.join(ROOT, 'mon.qmp')
    vm = guest(df, ',id=vcu0,mem-quota=8M',
               extra=['-name', 'qtest-mon', '-qmp', f'unix:{qsock},server=on,wait=off'])
    mon = QMP(qsock, 10)
    DEVP = '/machine/peripheral/vcu0'

    def qget(prop, path=DEVP):
        return mon.execute('qom-get', path=path, property=prop)
    st = qget('stats')
    entry = df.vm(vm.p.pid)
    vm_id = entry['id'] if entry else -1
    ok(f'qom-get before any session: mem-quota {qget("mem-quota")} mem-used {qget("mem-used")} '
       f'sessions {qget("sessions")} faults {qget("faults")} stats {st}',
       (qget('mem-quota'), qget('mem-used'), qget('mem-ctx-bytes'), qget('sessions'), qget('faults')) ==
       (8 << 20, 0, 0, 0, 0) and st['session-list'] == [] and st['workers'] == 0 and
       st['devices'] == [{'index': 0, 'mem-used': 0, 'mem-ctx-bytes': 0}])
    ok(f'stats: the daemon\'s link is up, the VM\'s id is the daemon\'s ({st.get("vm-id")}, list-vms {vm_id}), '
       f'no gpu-ns', st.get('daemon-link') is True and st.get('vm-id') == vm_id and vm_id > 0 and
       'gpu-ns' not in st and all(k in st for k in ('requests', 'kicks', 'notifies')))
    ok('qom-get on the virtio backend object too',
       qget('mem-quota', DEVP + '/virtio-backend') == 8 << 20 and qget('sessions', DEVP + '/virtio-backend') == 0)
    try:
        mon.execute('qom-set', path=DEVP, property='mem-used', value=1)
        ro = False
    except QMPError:
        ro = True
    ok('mem-used is read-only', ro)
    ma = cuda_session(vm)
    wa = df.vm_workers(vm)
    mb = cuda_session(vm)
    wb = [w for w in df.vm_workers(vm) if w not in wa]
    allocs = cu_alloc(vm, ma, 3 << 20) == 0 and cu_alloc(vm, mb, 1 << 20) == 0
    st = qget('stats')
    sl = {x['session']: x for x in st['session-list']}
    # mem-used counts the contexts (1 MiB each here); mem-ctx-bytes is
    # how much of it they are.
    ok(f'two sessions holding 3 + 1 MiB: mem-used {qget("mem-used")} sessions {qget("sessions")} stats {st}',
       allocs and len(wa) == 1 and len(wb) == 1 and qget('mem-used') == 6 << 20 and
       qget('sessions') == 2 and st['mem-used'] == 6 << 20 and st['workers'] == 2 and
       set(sl) == {ma, mb} and sl[ma]['mem-used'] == 4 << 20 and sl[mb]['mem-used'] == 2 << 20 and
       sl[ma]['host-pid'] == wa[0] and sl[mb]['host-pid'] == wb[0] and
       sl[ma]['fault'] is False and st['devices'][0]['mem-used'] == 6 << 20 and
       qget('mem-ctx-bytes') == st['mem-ctx-bytes'] == 2 << 20 and
       sl[ma]['mem-ctx-bytes'] + sl[mb]['mem-ctx-bytes'] == 2 << 20)
    # The counters: one request handed on is one request, one kick, one
    # notification; a malformed one is a kick and a notification only.
    c0 = qget('stats')
    vm.submit([(REQ, hdr(session=ma) + echo)], 256)
    c1 = qget('stats')
    vm.submit([(REQ, hdr()[:16])], 64)
    c2 = qget('stats')
    d1 = {k: c1[k] - c0[k] for k in ('requests', 'kicks', 'notifies')}
    d2 = {k: c2[k] - c1[k] for k in ('requests', 'kicks', 'notifies')}
    ok(f'stats counters: an echo moves them by {d1}, a malformed request by {d2}',
       d1 == {'requests': 1, 'kicks': 1, 'notifies': 1} and d2 == {'requests': 0, 'kicks': 1, 'notifies': 1}
       and c0['requests'] >= 4)
    v = df.vm(vm.p.pid)
    ok(f'list-vms agrees: {v}', v is not None and v['name'] == 'qtest-mon' and v['mem_used'] == 6 << 20 and
       v['sessions'] == 2 and v['mem_quota'] == 8 << 20 and v['ctx_bytes'] == st['mem-ctx-bytes'] and
       sorted(w['pid'] for w in v['workers']) == sorted(wa + wb))
    code, ctype, prom = scrape(port)
    L = lambda **kw: frozenset(dict(vm='qtest-mon', id=str(vm_id), **kw).items())
    want = {('vcu_vm_mem_quota_bytes', L()): 8 << 20, ('vcu_vm_mem_used_bytes', L()): 6 << 20,
            ('vcu_vm_mem_used_bytes', L(device='0')): 6 << 20, ('vcu_vm_ctx_bytes', L()): st['mem-ctx-bytes'],
            ('vcu_vm_sessions', L()): 2, ('vcu_vm_max_sessions', L()): 64, ('vcu_vm_faults_total', L()): 0,
            ('vcu_vm_sms', L()): 0, ('vcu_vm_compute_share', L()): 0, ('vcu_vm_compute_cap', L()): 0}
    miss = {k: (v, prom.get(k)) for k, v in want.items() if prom is None or prom.get(k) != v} \
        if prom is not None else 'no parse'
    ok(f'daemon metrics (GET /metrics, HTTP {code}, {ctype}): Prometheus text that parses, the VM\'s '
       f'figures as QOM says them (mismatched: {miss})',
       code == 200 and ctype.startswith('text/plain') and prom is not None and not miss and
       prom.get(('vcu_vms', frozenset())) >= 1 and prom.get(('vcu_workers_started_total', frozenset())) >= 2)
    code, _, _ = scrape(port, '/other')
    ok(f'daemon metrics: another path is HTTP {code}', code == 404)
    # A worker holds its VM's account writable (it charges its slot); QEMU
    # and the daemon map it too: shrinking it would kill both on their
    # next read (SIGBUS).  The account is sealed.  (The worker is not
    # dumpable, so its descriptor is taken here from the daemon's.)
    acct = None
    for fd in os.listdir(f'/proc/{df.p.pid}/fd'):
        try:
            if os.readlink(f'/proc/{df.p.pid}/fd/{fd}').startswith('/memfd:vcu-account'):
                acct = f'/proc/{df.p.pid}/fd/{fd}'
        except OSError:
            pass
    err = None
    if acct:
        f = os.open(acct, os.O_RDWR)
        try:
            os.ftruncate(f, 0)
        except OSError as e:
            err = e.errno
        os.close(f)
    st2 = qget('stats')
    ok(f'a worker cannot shrink its VM\'s memory account ({acct}: {os.strerror(err) if err else "shrunk"}); '
       f'QEMU and the daemon read it on', acct and err == 1 and st2['mem-used'] == 6 << 20 and
       df.vm(vm.p.pid) is not None)
    check('SESSION_CLOSE of the 3 MiB session', vm.submit([(REQ, hdr(opcode=2, payload_len=0, session=ma))], 64), S_OK)
    expect('its memory and session leave the count',
           lambda: qget('mem-used') == 2 << 20 and qget('sessions') == 1 and qget('stats')['workers'] == 1)
    if wb:
        os.kill(wb[0], 9)
    expect('a killed worker\'s memory leaves the count once reaped (the guest has not closed)',
           lambda: qget('mem-used') == 0 and qget('stats')['session-list'] == [] and qget('faults') == 0, 10)
    _, _, prom = scrape(port)
    ok('daemon metrics: the closed and the killed session are gone from the VM\'s figures',
       prom is not None and prom.get(('vcu_vm_sessions', L())) == 0 and
       prom.get(('vcu_vm_mem_used_bytes', L())) == 0)
    mon.close()
    vm.close()

    def vm_gone():
        p = scrape(port)[2]
        return p is not None and not any(('vm', 'qtest-mon') in k[1] for k in p)
    expect('daemon metrics: a VM whose QEMU ended leaves them', vm_gone)


# ---- compute share ----------------------------------------------------
# Bad compute-share and compute-cap values keep QEMU from starting, with
# the reason.  Two VMs in the daemon's group (weights 25 and 75, the
# second capped at 90 %) on the stand-in: GPU work (memsets: gated by the
# group's grant) completes in both, taking turns; qom-get reports each
# VM's weight and cap, the daemon each VM's weight, cap and GPU time.
def memset_req(ptr, n, val):
    return struct.pack('<IIQQQQQIIII', 0, 0, ptr, 0, n, 1, 0, val, 1, 0, 0)


def compute_share():
    df, port = D['fake'], D['fake_port']
    check_opts('compute-share=10001 is refused', 'compute-share=10001', False,
               'compute-share must be 1..10000', df.sock)
    check_opts('compute-cap=101 is refused', 'compute-cap=101', False, 'compute-cap must be a percentage', df.sock)
    qa_sock, qb_sock = os.path.join(ROOT, 'a.qmp'), os.path.join(ROOT, 'b.qmp')
    sva = guest(df, ',id=vcu0,compute-share=25',
                extra=['-name', 'qtest-share-a', '-qmp', f'unix:{qa_sock},server=on,wait=off'])
    svb = guest(df, ',id=vcu0,compute-share=75,compute-cap=90',
                extra=['-name', 'qtest-share-b', '-qmp', f'unix:{qb_sock},server=on,wait=off'])
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
    ok(f'compute share: 40 memsets in two VMs of one group complete, taking turns ({done}/40, '
       f'{elapsed:.2f} s), and land', done == 40 and ok_data and elapsed < 20)
    stats = {}
    for name, path in (('a', qa_sock), ('b', qb_sock)):
        mon = QMP(path, 10)
        stats[name] = mon.execute('qom-get', path='/machine/peripheral/vcu0', property='stats')
        mon.close()
    sta, stb = stats['a'], stats['b']
    ok(f'compute share: qom-get reports weights and cap (a {sta.get("compute-share")} cap '
       f'{sta.get("compute-cap")}, b {stb.get("compute-share")} cap {stb.get("compute-cap")})',
       (sta.get('compute-share'), sta.get('compute-cap'), stb.get('compute-share'), stb.get('compute-cap')) ==
       (25, 0, 75, 90))
    va, vb = df.vm(sva.p.pid), df.vm(svb.p.pid)
    ok(f'compute share: list-vms reports weights, cap and GPU time (a {va and va["compute_share"]} '
       f'{va and va["gpu_ns"]} ns, b {vb and vb["compute_share"]} cap {vb and vb["compute_cap"]} '
       f'{vb and vb["gpu_ns"]} ns)',
       va and vb and (va['compute_share'], va['compute_cap'], vb['compute_share'], vb['compute_cap']) ==
       (25, 0, 75, 90) and va['gpu_ns'] > 0 and vb['gpu_ns'] > 0)
    _, _, prom = scrape(port)
    Lb = frozenset(dict(vm='qtest-share-b', id=str(vb['id'] if vb else -1)).items())
    ok(f'daemon metrics export the weight, cap and GPU time of a VM in the group '
       f'({prom and {k[0]: v for k, v in prom.items() if k[1] == Lb and ("compute" in k[0] or "gpu_sec" in k[0])}})',
       prom is not None and prom.get(('vcu_vm_compute_share', Lb)) == 75 and
       prom.get(('vcu_vm_compute_cap', Lb)) == 90 and
       prom.get(('vcu_vm_gpu_seconds_total', Lb), 0) * 1e9 >= vb['gpu_ns'] * 0.999 > 0)


# ---- packed mode ------------------------------------------------------
# sms=N: the worker is an MPS client and its context runs on N SMs.  The
# daemon names the MPS pipe folder (--mps-pipe); the stand-in takes an MPS
# control daemon to answer where that folder holds a "control" entry.  Bad
# values, a daemon without the folder or a missing control daemon keep
# QEMU from starting, with the reason; with one, the guest is told N SMs,
# a session's context is made on them, and the monitor says so.  An
# isolated VM's workers stay out of MPS on the same daemon.
def packed_mode():
    df = D['fake']
    pdir = os.path.join(ROOT, 'mps')
    os.mkdir(pdir, 0o755)
    control = os.path.join(pdir, 'control')
    check_opts('sms on a daemon without --mps-pipe is refused', 'sms=16', False,
               'this daemon has no MPS pipe folder', df.sock)
    dr = Daemon(DAEMON_BIN, ROOT, 'mps-rel', NOCUDA, extra=['--mps-pipe', 'rel'])
    started = dr.start()
    if started:
        dr.stop()
    ok('a daemon with a relative --mps-pipe is refused: ' + (dr.log().strip().splitlines() or [''])[-1][:100],
       not started and 'must be an absolute path' in dr.log())
    dm = start_daemon('mps', extra=['--mps-pipe', pdir])
    check_opts('sms without an MPS control daemon is refused', 'sms=16', False,
               "needs NVIDIA's MPS control daemon", dm.sock)
    open(control, 'w').close()
    check_opts('sms beyond the GPU\'s SMs is refused', 'sms=200', False, 'has 132 SMs', dm.sock)
    check_opts('an SM count the driver would round is refused, with the one to use', 'sms=15', False,
               'use sms=16', dm.sock)
    check_opts('sms with compute-share is refused', 'sms=16,compute-share=5', False, 'does not go with', dm.sock)
    check_opts('sms=5000 is refused', 'sms=5000', False, 'sms must be 1..4096', dm.sock)
    check_opts('sms=16 with a control daemon starts', 'sms=16', True, None, dm.sock)
    up, err = device_opts('', dm.sock)
    ok(f'an isolated VM keeps CUDA, never an MPS client, where a control daemon runs ({err.strip()[:200]})',
       up and 'CUDA is not available' not in err and 'MPS' not in err)
    pq = os.path.join(ROOT, 'p.qmp')
    vp = guest(dm, ',id=vcu0,sms=16', extra=['-qmp', f'unix:{pq},server=on,wait=off'])
    ps = cuda_session(vp)
    ln, r = vp.submit([(REQ, hdr(opcode=0x101, payload_len=8, session=ps) + struct.pack('<II', 0, 0))], 8192)
    sms_attr = struct.unpack('<I', vp.rmem(RESP + 320 + 4 * 16, 4))[0] if ln >= 384 else -1
    ln, r = vp.submit([(REQ, hdr(opcode=0x10d, payload_len=8, session=ps) + struct.pack('<II', 0, 0))], 4096)
    sms_slice = struct.unpack('<I', r[68:72])[0] if ln >= 72 and cu_result(r) == 0 else -1
    ok(f'packed: the guest is told 16 SMs (device attribute {sms_attr}, slice {sms_slice})',
       sms_attr == 16 and sms_slice == 16)
    rq = struct.pack('<IIQQQ', 0, 0, 4096, 0, 0)
    ln, r = vp.submit([(REQ, hdr(opcode=0x200, payload_len=len(rq), session=ps) + rq)], 256)
    ok(f'packed: a session\'s context is made on its SMs and allocates (result {cu_result(r)})',
       ln >= 40 and cu_result(r) == 0)
    mon = QMP(pq, 10)
    st = mon.execute('qom-get', path='/machine/peripheral/vcu0', property='stats')
    mon.close()
    v = dm.vm(vp.p.pid)
    ok(f'packed: qom-get stats says sms {st.get("sms")}, list-vms {v and v["sms"]}',
       st.get('sms') == 16 and v is not None and v['sms'] == 16)
    vp.close()
    vi = guest(dm)
    ps = cuda_session(vi)
    ln, r = vi.submit([(REQ, hdr(opcode=0x101, payload_len=8, session=ps) + struct.pack('<II', 0, 0))], 8192)
    sms_attr = struct.unpack('<I', vi.rmem(RESP + 320 + 4 * 16, 4))[0] if ln >= 384 else -1
    ok(f'isolated: the guest is told the GPU\'s 132 SMs ({sms_attr})', sms_attr == 132)
    dm.stop()


# ---- a hostile daemon -------------------------------------------------
# A stand-in daemon (a unix socket served here) that QEMU's chardev
# reaches.  A bad WELCOME keeps QEMU from starting, with the reason.
# After a good one, frames a broken or hostile daemon might send: QEMU
# never crashes or hangs (it answers qtest), closes the link where the
# frame breaks the protocol (then reconnects and says HELLO again), and
# keeps none of the descriptors it was sent with such a frame.
def pipe_pair():
    """(read end, write end): the read end goes to QEMU; once QEMU and we
    have closed it, a write to the other gets EPIPE."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    return r, w


def released(w, secs=3.0):
    """QEMU has closed the read end of w's pipe."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < secs:
        try:
            os.write(w, b'x')
        except BrokenPipeError:
            return True
        except BlockingIOError:
            pass
        time.sleep(0.02)
    return False


def hostile_daemon_welcome():
    fdir = os.path.join(ROOT, 'hostile')
    os.mkdir(fdir, 0o755)
    fake = FakeDaemon(os.path.join(fdir, 'vcu.sock'))

    def refused(name, answer, want, hello_check=False):
        q = subprocess.Popen(qemu_argv(fake.path, 'virtio-cuda-pci,chardev=vcud'), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        link = fake.accept(20)
        fr = link.read_frame() if link else None
        if hello_check:
            ver, flags = struct.unpack('<II', fr[2][:8]) if fr and len(fr[2]) >= 8 else (0, 0)
            pid = struct.unpack('<I', fr[2][40:44])[0] if fr and len(fr[2]) >= 44 else 0
            ok(f'QEMU says HELLO first: type {fr and fr[0]}, {fr and len(fr[2])} bytes, version {ver}, '
               f'its pid {pid}', fr and fr[0] == LINK_HELLO and len(fr[2]) == LINK_HELLO_LEN and ver == 1 and
               pid == q.pid)
        t0 = time.monotonic()
        if link and fr:
            try:
                answer(link)
            except OSError:
                pass
        try:
            rc = q.wait(15)
        except subprocess.TimeoutExpired:
            rc = None
            q.kill()
            q.wait()
        dt = time.monotonic() - t0
        err = q.stderr.read()
        q.stdin.close()
        q.stdout.close()
        q.stderr.close()
        if link:
            link.close()
        said = ' '.join(l.split(': ', 2)[-1] for l in err.splitlines() if 'virtio-cuda' in l)
        ok(f'{name}: QEMU refuses to start ({"exit %s" % rc if rc is not None else "still running"}, '
           f'{dt:.1f} s): {said[:200]}', rc not in (None, 0) and want in err and dt < 10 and
           'core dumped' not in err)

    def send_welcome(body, fds=None, split=False):
        def answer(link):
            own = fds if fds is not None else slice_memfds()
            try:
                frame = link_frame(LINK_WELCOME, body)
                (link.send_split(frame, own, piece=7) if split else link.send(frame, own))
            finally:
                for f in own:
                    os.close(f)
        return answer

    refused('an oversized WELCOME (16 MiB)', lambda l: l.send(link_frame(LINK_WELCOME, b'', blen=1 << 24)),
            'did not welcome this VM', hello_check=True)
    refused('a SPAWNED where the WELCOME belongs',
            lambda l: l.send(link_frame(LINK_SPAWNED, spawned_body(), fid=1)), 'did not welcome this VM')
    refused('a WELCOME with status OK and no descriptors', send_welcome(welcome_body(), fds=[]),
            "welcome is malformed")
    refused('a WELCOME with status OK and one descriptor', send_welcome(welcome_body(), fds=[slice_memfds()[0]]),
            "welcome is malformed")
    refused('a WELCOME with status OK and five descriptors',
            send_welcome(welcome_body(), fds=list(slice_memfds()) + list(slice_memfds()) + [os.dup(0)]),
            "welcome is malformed")
    refused('a WELCOME whose descriptors are pipes, not shared pages', send_welcome(welcome_body(), fds=pipe_pair()),
            "policy page is not one")
    refused('a WELCOME of link version 2', send_welcome(welcome_body(version=2)), 'welcome is malformed')
    refused('a WELCOME whose pages are not sealed (the daemon could shrink them under QEMU)',
            send_welcome(welcome_body(), fds=slice_memfds(seal=False)), 'not sealed against shrinking')

    def plain_files():
        out = []
        for f in slice_memfds(seal=False):
            path = os.path.join(fdir, f'page{len(out)}')
            with open(path, 'wb') as w:
                w.write(os.pread(f, os.fstat(f).st_size, 0))
            os.close(f)
            out.append(os.open(path, os.O_RDONLY))
            os.unlink(path)
        return out
    refused('a WELCOME whose pages are plain files (no seals at all)', send_welcome(welcome_body(), fds=plain_files()),
            'not sealed against shrinking')

    def cut(link):
        link.send(link_frame(LINK_WELCOME, welcome_body())[:100])
        link.c.shutdown(socket.SHUT_RDWR)
    refused('a WELCOME cut short (the link closes mid-frame)', cut, 'closed the link')
    refused('a refusal whose reason fills its field, unterminated',
            send_welcome(welcome_body(status=EINVAL, error=b'R' * 300), fds=[]),
            'refuses this VM: ' + 'R' * 240 + '\n')
    refused('a refusal with descriptors it should not carry',
            send_welcome(welcome_body(status=EBUSY, error=b'full'), fds=list(pipe_pair())), 'refuses this VM: full')
    D['fake_link'] = fake


def hostile_daemon_link():
    fake = D['fake_link']
    box = {}

    def welcome(split=False):
        link = fake.accept(20)
        fr = link.read_frame() if link else None
        if fr and fr[0] == LINK_HELLO:
            acct, pol = slice_memfds()
            frame = link_frame(LINK_WELCOME, welcome_body(vm_id=42))
            (link.send_split(frame, (acct, pol), piece=7) if split else link.send(frame, (acct, pol)))
            os.close(acct)
            os.close(pol)
        box['link'], box['hello'] = link, fr

    qsock = os.path.join(ROOT, 'fake.qmp')
    errpath = os.path.join(ROOT, 'fake-qemu.log')
    errf = open(errpath, 'w')
    t = threading.Thread(target=welcome, args=(True,))
    t.start()
    gf = guest(fake.path, ',id=vcu0', extra=['-qmp', f'unix:{qsock},server=on,wait=off'], stderr=errf)
    t.join()
    ok('a WELCOME split over 75 writes, its descriptors with the first: QEMU comes up', gf.alive())
    mon = QMP(qsock, 10)

    def stats():
        return mon.execute('qom-get', path='/machine/peripheral/vcu0', property='stats')
    st = stats()
    ok(f'stats: link up, the VM id the daemon gave ({st["vm-id"]})', st['daemon-link'] is True and st['vm-id'] == 42)
    nfd0 = fd_count(gf.p.pid)

    def frame_case(name, send, closes, fds_back=()):
        link = box['link']
        try:
            send(link)
        except OSError:
            pass
        closed = link.closed(5 if closes else 1)
        alive = gf.alive()
        back = all(released(w) for w in fds_back)
        ok(f'{name}: {"QEMU closes the link" if closes else "the link stays"}'
           f'{", keeps none of its descriptors" if fds_back else ""}, and answers qtest',
           closed == closes and alive and back)
        for w in fds_back:
            os.close(w)
        if closed:
            link.close()
            welcome()
            fr = box['hello']
            ok(f'  ... then reconnects and says HELLO again ({fr and fr[0]})', fr and fr[0] == LINK_HELLO)

    frame_case('a frame longer than the link allows (4097 bytes)',
               lambda l: l.send(link_frame(LINK_SLICE, b'', blen=4097)), True)
    frame_case('a frame of an unknown type (99)', lambda l: l.send(link_frame(99, b'')), True)
    frame_case('a HELLO from the daemon', lambda l: l.send(link_frame(LINK_HELLO, bytes(LINK_HELLO_LEN))), True)
    frame_case('a SPAWNED with an 8-byte body', lambda l: l.send(link_frame(LINK_SPAWNED, bytes(8), fid=1)), True)
    frame_case('a second WELCOME, unasked for', lambda l: l.send(link_frame(LINK_WELCOME, welcome_body())), True)

    def one_fd(ftype, body, fid=0, n=1):
        pairs = [pipe_pair() for _ in range(n)]

        def send(link):
            link.send(link_frame(ftype, body, fid=fid), [r for r, _ in pairs])
            for r, _ in pairs:
                os.close(r)
        return send, [w for _, w in pairs]
    send, back = one_fd(LINK_SPAWNED, spawned_body(pid=1), fid=0x500000003)
    frame_case('a SPAWNED (OK) for a session that does not exist', send, False, back)
    send, back = one_fd(LINK_SPAWNED, spawned_body(status=EBUSY), fid=0x500000003)
    frame_case('a SPAWNED that is not OK, with a descriptor', send, True, back)
    frame_case('a SPAWNED (OK) without its descriptor',
               lambda l: l.send(link_frame(LINK_SPAWNED, spawned_body(pid=1), fid=0x500000003)), True)
    send, back = one_fd(LINK_SLICE, struct.pack('<QIIII', 0, 64, 0, 0, 0))
    frame_case('a SLICE with a descriptor', send, True, back)
    send, back = one_fd(LINK_SPAWNED, spawned_body(pid=1), fid=0x500000003, n=20)
    frame_case('a SPAWNED with 20 descriptors', send, True, back)
    frame_case('a SLICE split over 40 writes',
               lambda l: l.send_split(link_frame(LINK_SLICE, struct.pack('<QIIII', 0, 7, 3, 0, 0)), piece=1), False)
    st = stats()
    ok(f'  ... and the split SLICE took effect (max-sessions {st["max-sessions"]}, '
       f'compute-share {st["compute-share"]})', st['max-sessions'] == 7 and st['compute-share'] == 3)
    # A guest's SESSION_OPEN: QEMU hands the daemon the worker's four ends;
    # a refusal split over many writes reaches the guest as its status.
    res = {}

    def refuse_spawn():
        fr = box['link'].read_frame(10)
        res['spawn'] = fr
        if fr and fr[0] == LINK_SPAWN:
            box['link'].send_split(link_frame(LINK_SPAWNED, spawned_body(status=EBUSY), fid=fr[1]), piece=1)
            for f in fr[3]:
                os.close(f)
    t = threading.Thread(target=refuse_spawn)
    t.start()
    t0 = time.monotonic()
    r = gf.submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)
    dt = time.monotonic() - t0
    t.join()
    fr = res.get('spawn')
    ok(f'SESSION_OPEN: a SPAWN with 4 descriptors ({fr and len(fr[3])}); a refusal split over 32 writes '
       f'answers the guest EBUSY (status {status(r)}, {dt:.2f} s)',
       fr and fr[0] == LINK_SPAWN and len(fr[3]) == 4 and status(r) == EBUSY and dt < 5)
    # The daemon goes away: the guest's processes get ENODEV at once; QEMU
    # reconnects and says HELLO again.
    box['link'].close()
    time.sleep(0.2)
    t0 = time.monotonic()
    r = gf.submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)
    dt = time.monotonic() - t0
    st = stats()
    ok(f'the daemon gone: SESSION_OPEN is ENODEV at once (status {status(r)}, {dt:.2f} s), '
       f'daemon-link {st["daemon-link"]}', status(r) == ENODEV and dt < 2 and st['daemon-link'] is False)
    welcome()
    fr = box['hello']
    ok(f'  ... QEMU reconnects and says HELLO again ({fr and fr[0]})', fr and fr[0] == LINK_HELLO)
    expect('  ... and the link is up again', lambda: stats()['daemon-link'] is True)
    nfd1 = fd_count(gf.p.pid)
    ok(f'QEMU holds no more descriptors after it all than before ({nfd0} -> {nfd1})', 0 < nfd1 <= nfd0)
    mon.close()
    gf.close()
    errf.close()
    said = open(errpath).read()
    ok('QEMU said why it closed the link each time: ' +
       ' | '.join(sorted({l.split('virtio-cuda: ', 1)[-1][:60] for l in said.splitlines()
                          if 'closing the link' in l or 'wrong type' in l})),
       said.count('closing the link') + said.count('wrong type or size') >= 8)
    box['link'].close()
    fake.close()


# ---- the daemon killed, and back ------------------------------------------
# The daemon dies (SIGKILL) while a session is open: its worker goes with
# it, the guest's requests on that session fail at once, new sessions are
# ENODEV, QEMU stays up; a new daemon on the same socket (the chardev
# reconnects) serves new sessions.
def daemon_killed():
    dk = start_daemon('killed', libcuda=NOCUDA)
    qsock = os.path.join(ROOT, 'killed.qmp')
    gk = guest(dk, ',id=vcu0', extra=['-qmp', f'unix:{qsock},server=on,wait=off'])
    mon = QMP(qsock, 10)

    def link_up():
        return mon.execute('qom-get', path='/machine/peripheral/vcu0', property='stats')['daemon-link']
    s = echo_session(gk)
    check('an echo session on the daemon', gk.submit([(REQ, hdr(session=s) + echo)], 256), S_OK)
    wk = dk.vm_workers(gk)
    dk.signal(signal.SIGKILL)
    dk.p.wait()
    # The worker ends with its jail's first process, which the daemon's
    # end kills: a request may still be answered in between, for a few
    # milliseconds.
    t0 = time.monotonic()
    r = gk.submit([(REQ, hdr(session=s) + echo)], 256)
    while status(r) in (S_OK, -1) and time.monotonic() - t0 < 2:
        time.sleep(0.01)
        r = gk.submit([(REQ, hdr(session=s) + echo)], 256)
    dt = time.monotonic() - t0
    ok(f'daemon killed: a request on the open session fails (status {status(r)}) in {dt:.2f} s',
       status(r) not in (S_OK, -1) and dt < 5)
    expect(f'daemon killed: its worker {wk} goes with it', lambda: wk and all(gone(w) for w in wk))
    t0 = time.monotonic()
    r = gk.submit([(REQ, hdr(opcode=1, payload_len=32) + open_req)], 256)
    dt = time.monotonic() - t0
    ok(f'daemon killed: QEMU answers qtest, a new session is ENODEV (status {status(r)}, {dt:.2f} s), '
       f'daemon-link {link_up()}', gk.alive() and status(r) == ENODEV and dt < 2 and link_up() is False)
    check('daemon killed: the dead session closes', gk.submit([(REQ, hdr(opcode=2, payload_len=0, session=s))], 64),
          S_OK)
    t0 = time.monotonic()
    ok('a new daemon on the same socket starts', dk.start())
    expect('the chardev reconnects, the new daemon welcomes the VM', link_up, 10)
    dt = time.monotonic() - t0
    s = echo_session(gk)
    check(f'a new session works on the new daemon (back after {dt:.1f} s)',
          gk.submit([(REQ, hdr(session=s) + echo)], 256), S_OK)
    ok(f'its worker is the new daemon\'s child ({dk.vm_workers(gk)})', len(dk.vm_workers(gk)) == 1)
    mon.close()


# ---- QEMU before its daemon ---------------------------------------------
# A QEMU started before any daemon listens (the socket is not there yet)
# waits in its chardev's reconnect loop, and comes up once one does.
def qemu_before_daemon():
    dl = Daemon(DAEMON_BIN, ROOT, 'late', NOCUDA)
    DAEMONS.append(dl)
    timer = threading.Timer(2.0, dl.start)
    t0 = time.monotonic()
    timer.start()
    gl = guest(dl.sock, mem_mib=64)
    dt = time.monotonic() - t0
    timer.join()
    s = echo_session(gl)
    ok(f'QEMU started before its daemon waited for it and came up ({dt:.1f} s, the daemon after 2 s)',
       dt >= 1.9 and gl.alive())
    check('  ... and a session works', gl.submit([(REQ, hdr(session=s) + echo)], 256), S_OK)


def main():
    df_cache = os.path.join(ROOT, 'cache')
    port = free_port()
    try:
        D['none'] = start_daemon('none', libcuda=NOCUDA)
        if not os.path.exists(FAKECUDA):
            raise RuntimeError(f'no CPU stand-in at {FAKECUDA} (make fakecuda)')
        # Contexts charged at 1 MiB each: the quota cases count them.
        D['fake'] = start_daemon('fake', cache=df_cache, metrics=f'127.0.0.1:{port}',
                                 extra=['--ctx-bytes', '1M'])
        D['fake_cache'], D['fake_port'] = df_cache, port
    except RuntimeError as e:
        ok(str(e), False)
        return
    for fn in (hostile_requests, workers_per_session, refused_opens, setup_errors, gpus_and_probe, another_vm, module_cache,
               mem_quota, monitoring, compute_share, packed_mode, hostile_daemon_welcome, hostile_daemon_link,
               daemon_killed, qemu_before_daemon):
        if fn is hostile_daemon_link and 'fake_link' not in D:
            continue
        section(fn)
    bad = [s for s in Guest.started if not (s[1] and s[2])]
    ok(f'every QEMU of the suite ({len(Guest.started)}) ran with -sandbox ...,spawn=deny and a seccomp filter '
       f'(Seccomp: 2){": not " + str(bad) if bad else ""}', Guest.started and not bad)


if __name__ == '__main__':
    try:
        main()
    finally:
        for g in GUESTS + ([D['g']] if 'g' in D else []):
            g.close()
        left = []
        for d in DAEMONS:
            if d.p is not None and d.p.poll() is None:
                w = d.workers()
                rc = d.stop()
                left += [x for x in w if not gone(x)]
                if rc != 0:
                    left.append(f'{d.name} exit {rc}')
        ok(f'the daemons end on SIGTERM, their workers with them {left if left else ""}', not left)
        import shutil
        shutil.rmtree(ROOT, ignore_errors=True)
        print(f'suite time {time.monotonic() - T0:.1f} s')
        print(f'{passes} passed, {fails} failed')
    sys.exit(1 if fails else 0)
