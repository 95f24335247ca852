#!/usr/bin/env python3
"""The workers' jail, measured: a real vcu-daemon starts tests/jail/jail_probe
(built from jail_probe.c) as it starts every vcu-worker, for a fake QEMU
(this script) that speaks the link protocol (host-backend/common/vcu_link.h):
HELLO, then SPAWN with the session's four descriptors.  The probe installs
the worker's seccomp filter and tries what a compromised worker would: open
a world-readable file outside its jail, create sockets, execute, fork, see or
signal other processes (the daemon, this test, a process standing in for
QEMU, another worker), keep a descriptor the daemon inherited, find a secret
in its environment, gain privileges.  Each attempt is one PASS or FAIL line.

The same probe is then run by a daemon with --jail off --seccomp off: most
attempts must succeed there, which shows each check can fail.

    tests/jail/run.py DAEMON PROBE
Prints "N passed, N failed" last; exits non-zero on a failure.
"""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

HELLO, WELCOME, SPAWN, SPAWNED, KILL = 1, 2, 3, 4, 5
RING = 1 << 20
SHM = 4096 + RING + (256 << 10)

passes = fails = 0


def report(name, ok, detail=''):
    global passes, fails
    print(('PASS' if ok else 'FAIL'), name, detail)
    passes += bool(ok)
    fails += not ok


def frame(typ, ident=0, body=b''):
    return struct.pack('<IIQ', typ, len(body), ident) + body


def hello(name):
    return struct.pack('<IIQIIIIIIII64s256s', 1, 0, 0, 0, 0, 0, 0, RING, 0, os.getpid(), 0,
                       name.encode(), b'0')


def recv_frame(s, nfds):
    """One frame and the descriptors that came with it."""
    data, fds, _, _ = socket.recv_fds(s, 16, nfds)
    while len(data) < 16:
        more = s.recv(16 - len(data))
        if not more:
            raise EOFError('the daemon closed the link')
        data += more
    typ, ln, ident = struct.unpack('<IIQ', data)
    body = b''
    while len(body) < ln:
        more = s.recv(ln - len(body))
        if not more:
            raise EOFError('the daemon closed the link')
        body += more
    return typ, ident, body, fds


def start_daemon(daemon, probe, run, extra, env, keep_fd):
    os.makedirs(run, mode=0o755, exist_ok=True)
    log = open(os.path.join(run, 'daemon.log'), 'w')
    p = subprocess.Popen([daemon, '--run-dir', run, '--metrics', 'off', '--cache-dir', 'off',
                          '--worker', probe, '--libcuda', '/nonexistent/libcuda.so.1'] + extra,
                         stdout=log, stderr=subprocess.STDOUT, env=env, pass_fds=(keep_fd,))
    sock = os.path.join(run, 'vcu.sock')
    for _ in range(200):
        if os.path.exists(sock):
            return p, sock
        if p.poll() is not None:
            break
        time.sleep(0.05)
    print(open(os.path.join(run, 'daemon.log')).read())
    raise SystemExit('vcu-daemon did not start')


def run_probe(sock, name='jail-test', keep=None):
    """Connects as QEMU, starts one session's 'worker', returns its lines.
    keep, a list: the VM's link and the probe's socket are appended to it
    and left open (the probe waits for commands, keep_command()); else the
    probe is told to quit and the link closed."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(sock)
    s.sendall(frame(HELLO, 0, hello(name)))
    typ, _, body, fds = recv_frame(s, 4)
    for fd in fds:
        os.close(fd)
    status = struct.unpack('<I', body[4:8])[0]
    cuda_error = body[280:520].split(b'\0')[0].decode()
    if typ != WELCOME or status != 0:
        raise SystemExit(f'no welcome: type {typ} status {status}')
    ours, theirs = socket.socketpair()
    shm = os.memfd_create('vcu-ring')
    os.ftruncate(shm, SHM)
    bells = [socket.socketpair() for _ in range(2)]
    socket.send_fds(s, [frame(SPAWN, (1 << 32) | 1)],
                    [theirs.fileno(), shm, bells[0][1].fileno(), bells[1][1].fileno()])
    theirs.close()
    os.close(shm)
    typ, ident, body, fds = recv_frame(s, 1)
    for fd in fds:
        os.close(fd)
    st, pid, _slot, _ = struct.unpack('<IIiI', body)
    if typ != SPAWNED or st != 0:
        raise SystemExit(f'no worker: type {typ} status {st}')
    ours.settimeout(60)
    out = b''
    while b'JAIL-END' not in out:
        more = ours.recv(65536)
        if not more:
            break
        out += more
    if keep is not None:
        keep += [s, ours]
    else:
        try:
            ours.sendall(b'QUIT\n')
        except OSError:
            pass
        ours.close()
        s.close()
    return cuda_error, pid, out.decode(errors='replace').splitlines()


def keep_command(ours, token):
    """Has a waiting probe ask the daemon's keep for token: its lines."""
    ours.sendall(b'GET ' + token.encode() + b'\n')
    out = b''
    while b'JAIL-KEEP-END' not in out:
        more = ours.recv(65536)
        if not more:
            break
        out += more
    return out.decode(errors='replace').splitlines()


def keep_token(lines):
    for l in lines:
        if l.startswith('JAIL-KEEP-TOKEN '):
            return l.split(' ')[1]
    return None


def main():
    daemon, probe = sys.argv[1], os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix='vcu-jail-')
    os.chmod(tmp, 0o755)
    secret = os.path.join(tmp, 'secret')
    with open(secret, 'w') as f:
        f.write('a file the worker must not read\n')
    os.chmod(secret, 0o644)                 # readable by anyone: only the jail keeps it out
    stand_in = subprocess.Popen(['sleep', '600'])   # a process like QEMU, not to be reached
    # Sockets in the host's namespaces the worker must not reach: an
    # abstract name and a path (its folder world-readable).
    abstract = f'vcu-jail-test-{os.getpid()}'
    host_abs = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    host_abs.bind('\0' + abstract)
    host_abs.listen(1)
    sockpath = os.path.join(tmp, 'host.sock')
    host_path = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    host_path.bind(sockpath)
    host_path.listen(1)
    os.chmod(sockpath, 0o777)
    keep_r, keep_w = os.pipe()
    os.set_inheritable(keep_w, True)        # a descriptor the daemon inherits, not CLOEXEC
    env = dict(os.environ, SECRET_TOKEN='do-not-leak', VCU_JAIL_SECRET=secret,
               VCU_JAIL_PIDS=f'{os.getpid()},{stand_in.pid}',
               VCU_JAIL_ABSTRACT=abstract, VCU_JAIL_SOCKPATH=sockpath)
    try:
        p, sock = start_daemon(daemon, probe, os.path.join(tmp, 'run-on'), [], env, keep_w)
        held = []
        try:
            cuda_error, pid, lines = run_probe(sock, 'jail-test', held)
            # The daemon's keep: another VM's worker, asking for what this
            # one put there, gets nothing (vcu_keep.h).
            run_probe(sock, 'jail-test-b', held)
            token = keep_token(lines)
            report('the probe put a descriptor in its VM\'s keep', token is not None,
                   repr(token))
            if token is not None:
                lines += [l for l in keep_command(held[3], token) if l.startswith('JAIL ')]
        finally:
            for h in held:
                h.close()
            p.terminate()
            p.wait()
        report('the probe ran jailed at HELLO (its answer came back)',
               cuda_error == 'jail probe: no CUDA here', repr(cuda_error))
        report('the worker is the daemon\'s child, not ours', pid != 0 and pid != os.getpid(),
               f'pid {pid}')
        seen = 0
        for l in lines:
            if l.startswith('JAIL ') and ' PASS ' in l or ' FAIL ' in l:
                w = l.split(' ', 3)
                report(f'jail: {w[1]}', w[2] == 'PASS', w[3] if len(w) > 3 else '')
                seen += 1
        report('the probe reported all its attempts', 'JAIL-END' in lines and seen >= 30,
               f'{seen} lines')

        # The checks can fail: without the jail and the filter, the same
        # probe gets through.  (It installs the filter itself, so the
        # daemon's --seccomp off does not matter; the jail's part shows.)
        p, sock = start_daemon(daemon, probe, os.path.join(tmp, 'run-off'),
                               ['--jail', 'off', '--seccomp', 'off'], env, keep_w)
        try:
            _, _, lines = run_probe(sock)
        finally:
            p.terminate()
            p.wait()
        failed = {l.split(' ')[1] for l in lines if l.startswith('JAIL ') and ' FAIL ' in l}
        want = {'open_secret', 'pid_namespace', 'open_etc_passwd', 'unix_abstract_host',
                'unix_path_host'}
        report('without the jail the probe reaches what the jail keeps from it',
               want <= failed, f'failed there: {sorted(failed)}')
    finally:
        stand_in.kill()
        host_abs.close()
        host_path.close()
        os.close(keep_r)
        os.close(keep_w)
        subprocess.run(['rm', '-rf', tmp])
    print(f'{passes} passed, {fails} failed')
    sys.exit(1 if fails else 0)


if __name__ == '__main__':
    main()
