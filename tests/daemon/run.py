#!/usr/bin/env python3
"""The host daemon (vcu-daemon) against a hostile host and a hostile QEMU.

    tests/daemon/run.py DAEMON WORKER LIBCUDA

- Its folders cannot be squatted: a run folder or cache folder another user
  made first, one writable by others, a symbolic link, and an MPS pipe
  folder that is not root's or the daemon's, or writable by others: each
  refused at start with the reason.
- The options of the shipped systemd unit (host-backend/daemon/
  virtio-cuda.service) start it.
- A QEMU that breaks the link protocol (oversized and unknown frames, SPAWN
  without its descriptors, a second HELLO, names and GPU lists with shell
  or path characters, unknown flags, bounds past the daemon's) loses its
  link with a reason in the log, and nothing else: a well-behaved VM beside
  it keeps its session, the control socket and the metrics answer.
- Bounds: a VM asking more memory than --max-mem-quota gets the bound, one
  asking more sessions than --max-sessions gets that, and a session past it
  is refused (EBUSY).
- SIGTERM: the daemon kills and reaps its workers before it goes.
Prints "N passed, N failed" last.
"""
import json
import os
import pwd
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HELLO, WELCOME, SPAWN, SPAWNED, KILL = 1, 2, 3, 4, 5
RING = 1 << 20
SHM = 4096 + RING + (256 << 10)
passes = fails = 0


def report(name, ok, detail=''):
    global passes, fails
    print(('PASS' if ok else 'FAIL'), 'daemon/' + name, detail)
    passes += bool(ok)
    fails += not ok


def frame(typ, ident=0, body=b''):
    return struct.pack('<IIQ', typ, len(body), ident) + body


def hello(name=b'vm', gpus=b'0', flags=0, quota=0, maxs=0, share=0, cap=0, sms=0, ring=RING,
          spin=0, version=1):
    return struct.pack('<IIQIIIIIIII64s256s', version, flags, quota, maxs, share, cap, sms, ring,
                       spin, os.getpid(), 0, name, gpus)


def recv_frame(s, nfds=4):
    data, fds, _, _ = socket.recv_fds(s, 16, nfds)
    if not data:
        raise EOFError
    while len(data) < 16:
        more = s.recv(16 - len(data))
        if not more:
            raise EOFError
        data += more
    typ, ln, ident = struct.unpack('<IIQ', data)
    body = b''
    while len(body) < ln:
        more = s.recv(ln - len(body))
        if not more:
            raise EOFError
        body += more
    return typ, ident, body, fds


def connect(sock):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock)
    return s


def welcome(sock, **kw):
    """A VM's link: (socket, welcome status, slice (quota, max_sessions), error)."""
    s = connect(sock)
    s.sendall(frame(HELLO, 0, hello(**kw)))
    typ, _, body, fds = recv_frame(s)
    for fd in fds:
        os.close(fd)
    st = struct.unpack('<I', body[4:8])[0]
    quota, maxs = struct.unpack('<QI', body[16:28])
    err = body[40:280].split(b'\0')[0].decode()
    return s, st, (quota, maxs), err


def spawn(s, sid):
    """SPAWN one session: (status, our end of its socket)."""
    ours, theirs = socket.socketpair()
    shm = os.memfd_create('vcu-ring')
    os.ftruncate(shm, SHM)
    # The area's header as the proxy writes it (vcu_ipc.h): the worker
    # checks it and waits on the rings.
    os.pwrite(shm, struct.pack('<QII', 0x32676e6972756376, RING, 256 << 10), 0)
    bells = [socket.socketpair() for _ in range(2)]
    socket.send_fds(s, [frame(SPAWN, sid)], [theirs.fileno(), shm, bells[0][1].fileno(),
                                            bells[1][1].fileno()])
    theirs.close()
    os.close(shm)
    for b in bells:
        b[1].close()
    typ, ident, body, fds = recv_frame(s, 1)
    for fd in fds:
        os.close(fd)
    st = struct.unpack('<I', body[:4])[0]
    return st, ours


def closed(s, secs=10):
    """Whether the peer closes the link (EOF) within secs."""
    s.settimeout(secs)
    try:
        while True:
            d = s.recv(4096)
            if not d:
                return True
    except (socket.timeout, OSError):
        return False


def ctl(run, req):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(10)
    c.connect(os.path.join(run, 'control.sock'))
    c.sendall((json.dumps(req) + '\n').encode())
    buf = b''
    while b'\n' not in buf:
        more = c.recv(65536)
        if not more:
            break
        buf += more
    c.close()
    return json.loads(buf)


def start(daemon, args, wait=True):
    p = subprocess.Popen([daemon] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    if not wait:
        try:
            out, _ = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            return None, out
        return p.returncode, out
    run = args[args.index('--run-dir') + 1]
    for _ in range(200):
        if os.path.exists(os.path.join(run, 'vcu.sock')):
            return p, None
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit('vcu-daemon did not start: ' + p.stdout.read())


def refused(name, daemon, args, want):
    rc, out = start(daemon, args, wait=False)
    report(name, rc not in (None, 0) and want in out, f'rc {rc}: {out.strip()[-200:]}')


def main():
    daemon, worker, libcuda = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix='vcu-daemon-test-')
    os.chmod(tmp, 0o755)
    base = ['--worker', worker, '--libcuda', libcuda, '--metrics', 'off']
    nobody = pwd.getpwnam('nobody').pw_uid

    # ---- squatted folders --------------------------------------------------
    other = os.path.join(tmp, 'other-run')
    os.mkdir(other, 0o755)
    os.chown(other, nobody, -1)
    refused('run-dir-of-another-user-refused', daemon,
            base + ['--run-dir', other, '--cache-dir', 'off'], 'belongs to uid')
    loose = os.path.join(tmp, 'loose-run')
    os.mkdir(loose)
    os.chmod(loose, 0o777)
    refused('run-dir-writable-by-others-refused', daemon,
            base + ['--run-dir', loose, '--cache-dir', 'off'], 'writable by group or others')
    link = os.path.join(tmp, 'link-run')
    os.symlink(tmp, link)
    refused('run-dir-symlink-refused', daemon,
            base + ['--run-dir', link, '--cache-dir', 'off'], 'is not a folder')
    cache = os.path.join(tmp, 'other-cache')
    os.mkdir(cache, 0o755)
    os.chown(cache, nobody, -1)
    refused('cache-dir-of-another-user-refused', daemon,
            base + ['--run-dir', os.path.join(tmp, 'r1'), '--cache-dir', cache], 'belongs to uid')
    mps = os.path.join(tmp, 'mps')
    os.mkdir(mps)
    os.chmod(mps, 0o777)
    refused('mps-pipe-writable-by-others-refused', daemon,
            base + ['--run-dir', os.path.join(tmp, 'r2'), '--cache-dir', 'off', '--mps-pipe', mps],
            'writable by group or others')
    mps2 = os.path.join(tmp, 'mps2')
    os.mkdir(mps2, 0o755)
    os.chown(mps2, nobody, -1)
    refused('mps-pipe-of-another-user-refused', daemon,
            base + ['--run-dir', os.path.join(tmp, 'r3'), '--cache-dir', 'off', '--mps-pipe', mps2],
            'neither root nor')
    refused('mps-pipe-missing-refused', daemon,
            base + ['--run-dir', os.path.join(tmp, 'r4'), '--cache-dir', 'off', '--mps-pipe',
                    os.path.join(tmp, 'no-mps')], 'is nvidia-cuda-mps-control -d running')

    # ---- the shipped systemd unit's options ---------------------------------
    unit = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'host-backend',
                        'daemon', 'virtio-cuda.service')
    text = open(unit).read().replace('\\\n', ' ')
    exec_line = [l for l in text.splitlines() if l.startswith('ExecStart=')][0]
    argv = shlex.split(exec_line[len('ExecStart='):])[1:]
    run = os.path.join(tmp, 'unit-run')
    # Paths of this machine's build, no listener on the unit's port, and
    # root's group where the unit's is missing (no libvirt installed).
    import grp
    args = [a if a != '127.0.0.1:9477' else 'off' for a in argv]
    if '--socket-group' in args:
        i = args.index('--socket-group') + 1
        try:
            grp.getgrnam(args[i])
        except KeyError:
            args[i] = 'root'
    p, _ = start(daemon, args + ['--run-dir', run, '--cache-dir', os.path.join(tmp, 'unit-cache'),
                                 '--worker', worker, '--libcuda', libcuda])
    st = ctl(run, {'cmd': 'status'})
    report('systemd-unit-options-start-it', st.get('ok') and st.get('worker_uid') == nobody,
           json.dumps(st)[:200])
    p.terminate()
    p.wait()

    # ---- a hostile QEMU beside a good one -------------------------------------
    run = os.path.join(tmp, 'run')
    port = 20000 + os.getpid() % 20000
    p, _ = start(daemon, ['--worker', worker, '--libcuda', libcuda, '--run-dir', run,
                          '--cache-dir', 'off', '--metrics', f'127.0.0.1:{port}',
                          '--max-mem-quota', '1G', '--max-sessions', '2'])
    sock = os.path.join(run, 'vcu.sock')
    good, st, slc, err = welcome(sock, name=b'good-vm', quota=4 << 30, maxs=8)
    report('a VM is welcomed', st == 0, err)
    report('its quota is bounded by --max-mem-quota', slc[0] == 1 << 30, f'got {slc[0]}')
    report('its sessions are bounded by --max-sessions', slc[1] == 2, f'got {slc[1]}')
    st1, s1 = spawn(good, (1 << 32) | 1)
    st2, s2 = spawn(good, (2 << 32) | 2)
    st3, s3 = spawn(good, (3 << 32) | 3)
    report('sessions up to the bound start, the next is refused (EBUSY)',
           st1 == 0 and st2 == 0 and st3 == 8, f'{st1} {st2} {st3}')

    cases = [
        ('oversized-frame', lambda s: s.sendall(struct.pack('<IIQ', HELLO, 1 << 20, 0))),
        ('unknown-frame-type', lambda s: s.sendall(frame(99))),
        ('spawn-before-hello', lambda s: s.sendall(frame(SPAWN, 5))),
        ('hello-short-body', lambda s: s.sendall(frame(HELLO, 0, b'\1\0\0\0'))),
    ]
    for name, act in cases:
        s = connect(sock)
        act(s)
        report(f'hostile QEMU: {name}: link closed', closed(s))
        s.close()

    def refused_hello(label, **kw):
        s, st, _, err = welcome(sock, **kw)
        report(f'hostile QEMU: {label}: refused with a reason', st != 0 and err, err)
        report(f'hostile QEMU: {label}: link closed', closed(s))
        s.close()

    refused_hello('name with a slash', name=b'../../etc')
    refused_hello('name with a shell character', name=b'vm;rm -rf /')
    refused_hello('name not NUL-terminated', name=b'x' * 64)
    refused_hello('GPU list with an option', gpus=b'0 --libcuda /tmp/x')
    refused_hello('unknown flags', flags=0x100)
    refused_hello('a bad ring size', ring=12345)
    refused_hello('compute-share past its bound', share=10001)
    refused_hello('sms with a share', sms=8, share=10)
    refused_hello('a newer protocol', version=99)

    s, st, _, _ = welcome(sock, name=b'spawn-no-fds')
    s.sendall(frame(SPAWN, (9 << 32) | 1))
    report('hostile QEMU: SPAWN without descriptors: link closed', closed(s))
    s.close()
    s, st, _, _ = welcome(sock, name=b'twice')
    s.sendall(frame(HELLO, 0, hello()))
    report('hostile QEMU: a second HELLO: link closed', closed(s))
    s.close()
    s, st, _, _ = welcome(sock, name=b'dup-session')
    a, x = spawn(s, (4 << 32) | 1)
    try:
        spawn(s, (4 << 32) | 1)
        dup_closed = closed(s)
    except (EOFError, OSError):
        dup_closed = True
    report('hostile QEMU: a session id used twice: link closed', a == 0 and dup_closed)
    s.close()

    vms = ctl(run, {'cmd': 'list-vms'})
    names = [v['name'] for v in vms.get('vms', [])]
    report('the good VM keeps its sessions through all of it',
           'good-vm' in names and [len(v['workers']) for v in vms['vms']
                                   if v['name'] == 'good-vm'] == [2], json.dumps(names))
    text = urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics', timeout=10).read().decode()
    report('the metrics answer, with the good VM', 'vcu_vm_sessions{vm="good-vm"' in text and
           'vcu_vm_sessions_refused_total{vm="good-vm"' in text)
    bad = ctl(run, {'cmd': 'set-vm', 'vm': 'good-vm', 'mem_quota': 8 << 30})
    report('set-vm past --max-mem-quota is refused', not bad.get('ok'), json.dumps(bad)[:200])
    ok = ctl(run, {'cmd': 'set-vm', 'vm': 'good-vm', 'mem_quota': 512 << 20})
    report('set-vm within the bounds is applied', ok.get('ok') and
           ok['vm']['mem_quota'] == 512 << 20, json.dumps(ok)[:200])
    try:
        typ, _, body, fds = recv_frame(good, 0)
        slice_ok = typ == 6 and struct.unpack('<Q', body[:8])[0] == 512 << 20
    except (EOFError, OSError, struct.error):
        slice_ok = False
    report('the VM\'s QEMU is told its new slice (SLICE)', slice_ok)

    pids = [w['pid'] for v in ctl(run, {'cmd': 'list-vms'})['vms'] for w in v['workers']]
    # The VMs' IPC folders: on /dev/shm's tmpfs, one per VM, the workers'
    # own and no one else's (docs/design.md, "CUDA IPC").
    ipc_root = f'/dev/shm/virtio-cuda.{p.pid}'
    vm_dirs = sorted(os.listdir(ipc_root)) if os.path.isdir(ipc_root) else []
    modes = [os.stat(os.path.join(ipc_root, v)).st_mode & 0o777 for v in vm_dirs]
    report('each VM has an IPC folder of its own on /dev/shm, private to its workers',
           vm_dirs and all(m == 0o700 for m in modes), f'{ipc_root}: {vm_dirs} {modes}')
    # Without address randomization (--worker-aslr off, the default): a
    # migrating worker's device addresses are its source's.
    pers = []
    for q in pids:
        try:
            with open(f'/proc/{q}/personality') as f:
                pers.append(int(f.read().strip(), 16))
        except OSError:
            pass
    report('workers run without address randomization (ADDR_NO_RANDOMIZE)',
           pers and all(x & 0x0040000 for x in pers), f'personalities {[hex(x) for x in pers]}')
    p.terminate()
    try:
        p.wait(timeout=20)
        ended = True
    except subprocess.TimeoutExpired:
        p.kill()
        ended = False
    gone = all(not os.path.exists(f'/proc/{q}') for q in pids)
    report('SIGTERM: the daemon ends, its workers killed and reaped first',
           ended and gone and pids, f'workers {pids}')
    report('SIGTERM: the VMs\' IPC folders are removed', not os.path.exists(ipc_root), ipc_root)
    log = p.stdout.read()
    report('each refused QEMU is named in the log with its reason', log.count('refused:') >= 9,
           f'{log.count("refused:")} refusals logged')
    for s_ in (good, s1, s2, s3, x):
        try:
            s_.close()
        except OSError:
            pass
    subprocess.run(['rm', '-rf', tmp])
    print(f'{passes} passed, {fails} failed')
    sys.exit(1 if fails else 0)


if __name__ == '__main__':
    main()
