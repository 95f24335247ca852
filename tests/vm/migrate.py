#!/usr/bin/env python3
"""Live migration of a VM whose guest process is running CUDA work
(docs/design.md, "Live migration"), as an operator moves a VM: two host
daemons that share nothing (run folders, module caches, workers of their
own), a source QEMU running the migrate suite (tests/many's checker,
every round's results checked, and 64 MiB more device memory written
once) and a destination QEMU started with -incoming defer, both sandboxed
as libvirt starts QEMU.  Once the checker has done a few rounds, QMP
migrate moves the VM over TCP; the checker must go on in the destination
and end with no wrong result, and the memory written once must have gone
before the pause, but for what QEMU leaves to it within its downtime
limit (the source's worker says at the pause how many bytes were
unchanged since the pass before it).  Then migrations
that cannot complete must leave the source running, its checker
unharmed: one the destination refuses (its daemon gives the VM less GPU
memory than its session holds), and one whose stream breaks at the
switchover (the destination QEMU killed while the source holds the
stopped VM, about to send the device's state).

Then the VM is suspended and resumed as `virsh save` and `virsh restore`
do it: paused while its checker runs, its whole state written to a file
(QMP migrate to file:), its QEMU ended, its guest's worker gone; a new
QEMU on the same daemon loads the file (-incoming defer, migrate-incoming
file:) and is resumed (cont); the checker must go on, every result right.

    tests/vm/migrate.py [--real-gpu] [--ballast MIB[,MIB...]] [--no-refusal] [--no-save]
                        [--other-gpu]

--other-gpu (a host of two GPUs): one more migration, from a VM given the
host's GPU 0 to one given GPU 1 (the device's gpus= property), the
guest's device 0 either way.

--ballast: one more migration per size, each of a VM whose checker also
holds that much device memory (a model's weights), checked at the end;
the downtime of each is printed.  --no-refusal: skip the refused
and the broken migration.  Run from the checkout after tests/vm/run.sh has built the
guest (it builds build/vm/initrd-migrate.img when missing; on a GPU
host's carried outputs the share image, which holds the same checker,
serves).  Prints one "PASS name" or
"FAIL name why" per check, the downtime QEMU reports and the longest gap
the guest saw between two rounds, and last "N passed, N failed".
Environment: VCU_LIBCUDA (the daemons' libcuda; default the CPU stand-in,
build/fakecuda/libcuda.so.1; --real-gpu: the host's), VCU_MIG_SECS (the
checker's seconds, default 90), VCU_VM_LOGDIR (default build/vm/logs).
"""
import json, os, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B = os.path.join(ROOT, 'build')
REAL = '--real-gpu' in sys.argv
BALLAST = []
# The first move's checker holds this much more, written once: memory that
# goes before the pause.
MOVE_BALLAST = 64
if '--ballast' in sys.argv:
    BALLAST = [int(x) for x in sys.argv[sys.argv.index('--ballast') + 1].split(',') if x]
REFUSAL = '--no-refusal' not in sys.argv
SAVE = '--no-save' not in sys.argv
OTHER_GPU = '--other-gpu' in sys.argv
SECS = int(os.environ.get('VCU_MIG_SECS', '90'))
LOGDIR = os.environ.get('VCU_VM_LOGDIR', os.path.join(B, 'vm', 'logs'))
results = []


def report(name, ok, detail=''):
    results.append(bool(ok))
    print(f"{'PASS' if ok else 'FAIL'} migrate/{name}{' ' + detail if detail else ''}", flush=True)


def die(msg):
    print(f'migrate: {msg}', flush=True)
    print(f'{sum(results)} passed, {len(results) - sum(results) + 1} failed')
    sys.exit(1)


def guest_kernel():
    env = open(os.path.join(B, 'vm', 'guest.env')).read()
    m = re.search(r'VCU_GUEST_KVER=(\S+)', env)
    if not m:
        die('no VCU_GUEST_KVER in build/vm/guest.env')
    return os.path.join(B, 'vm', 'vmlinuz-' + m.group(1).strip('"\''))


def start_daemon(run, extra):
    os.makedirs(run, exist_ok=True)
    os.chmod(run, 0o755)
    args = [os.path.join(B, 'qemu', 'bin', 'vcu-daemon'), '--run-dir', run, '--metrics', 'off',
            '--cache-dir', os.path.join(run, 'cache')] + extra
    if not REAL:
        args += ['--libcuda', os.environ.get('VCU_LIBCUDA', os.path.join(B, 'fakecuda', 'libcuda.so.1')),
                 '--ctx-bytes', '8M']
    log = open(os.path.join(run, 'daemon.log'), 'w')
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(os.path.join(run, 'vcu.sock')):
            return p
        if p.poll() is not None:
            die('a daemon ended at start: ' + open(os.path.join(run, 'daemon.log')).read()[-2000:])
        time.sleep(0.1)
    die('a daemon did not start')


def image():
    for n in ('migrate', 'share'):
        p = os.path.join(B, 'vm', f'initrd-{n}.img')
        if os.path.exists(p):
            return p
    die('no build/vm/initrd-migrate.img')


def start_qemu(name, sock, qmp, serial, incoming, ballast=0, gpus=None):
    share = os.path.join(B, 'qemu', 'share')
    args = [os.path.join(B, 'qemu', 'bin', 'qemu-system-x86_64'),
            '-accel', 'tcg', '-cpu', 'max', '-smp', '2', '-m', '2048', '-name', name,
            '-object', 'memory-backend-memfd,id=mem,size=2048M,share=on',
            '-machine', 'memory-backend=mem',
            '-display', 'none', '-nodefaults', '-monitor', 'none', '-no-reboot',
            '-serial', 'file:' + serial, '-qmp', f'unix:{qmp},server=on,wait=off',
            '-bios', os.path.join(share, 'qboot.rom'), '-L', share,
            '-chardev', f'socket,id=vcud,path={sock},reconnect-ms=1000',
            '-sandbox', 'on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny',
            '-kernel', guest_kernel(), '-initrd', image(),
            '-append', f'console=ttyS0 panic=-1 quiet vcu.suite=migrate vcu.mig_secs={SECS} '
                       f'vcu.mig_ballast={ballast}',
            '-device', 'virtio-cuda-pci,chardev=vcud' + (f',gpus={gpus}' if gpus is not None else '')]
    if incoming:
        args += ['-incoming', 'defer']
    qlog = open(serial + '.qemu', 'w')
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=qlog, stderr=subprocess.STDOUT)


class Qmp:
    def __init__(self, path):
        for _ in range(300):
            try:
                self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.s.connect(path)
                break
            except OSError:
                time.sleep(0.1)
        else:
            die(f'no QMP at {path}')
        self.f = self.s.makefile('rw')
        json.loads(self.f.readline())
        self.cmd('qmp_capabilities')

    def cmd(self, name, **args):
        self.f.write(json.dumps({'execute': name, 'arguments': args}) + '\n')
        self.f.flush()
        while True:
            m = json.loads(self.f.readline())
            if 'return' in m or 'error' in m:
                return m


def lines(path):
    try:
        return open(path, errors='replace').read().replace('\r', '').splitlines()
    except OSError:
        return []


def wait_line(path, pat, secs):
    end = time.time() + secs
    while time.time() < end:
        if any(re.search(pat, l) for l in lines(path)):
            return True
        time.sleep(0.5)
    return False


def wait_migration(m, secs=600):
    end = time.time() + secs
    while time.time() < end:
        q = m.cmd('query-migrate')['return']
        if q.get('status') in ('completed', 'failed', 'cancelled'):
            return q
        time.sleep(0.2)
    return {'status': 'timeout'}


def migrate(src, dst, port, secs=600):
    """Moves the VM; the final query-migrate answer."""
    # The return path: a destination that cannot load the state says so,
    # and the source runs on (without it the source cannot know).
    caps = [{'capability': 'return-path', 'state': True}]
    dst.cmd('migrate-set-capabilities', capabilities=caps)
    src.cmd('migrate-set-capabilities', capabilities=caps)
    r = dst.cmd('migrate-incoming', uri=f'tcp:127.0.0.1:{port}')
    if 'error' in r:
        return {'status': 'failed', 'error-desc': 'migrate-incoming: ' + json.dumps(r['error'])}
    src.cmd('migrate-set-capabilities', capabilities=[{'capability': 'events', 'state': True}])
    # As libvirt does: no bandwidth cap of QEMU's own (128 MiB/s by
    # default), so that device memory goes before the pause at the
    # stream's speed.
    src.cmd('migrate-set-parameters', **{'max-bandwidth': 16 << 30})
    r = src.cmd('migrate', uri=f'tcp:127.0.0.1:{port}')
    if 'error' in r:
        return {'status': 'failed', 'error-desc': 'migrate: ' + json.dumps(r['error'])}
    return wait_migration(src, secs)


class RoundWatch(threading.Thread):
    """When each of the checker's rounds reached the host, from the serial
    logs of the source and the destination (QEMU writes the guest's serial
    output to them as it comes): what a client of the guest sees of the
    pause, which the guest's own clock, stopped with the VM, cannot show."""

    def __init__(self, paths, tag='mig'):
        super().__init__(daemon=True)
        self.paths, self.prefix = paths, f'VCU-MANY {tag} round '
        self.times, self.halt = [], threading.Event()

    def run(self):
        seen = 0
        while not self.halt.is_set():
            n = sum(sum(1 for l in lines(p) if l.startswith(self.prefix)) for p in self.paths)
            if n > seen:
                self.times += [time.time()] * (n - seen)
                seen = n
            time.sleep(0.01)

    def stop(self):
        """(the longest gap between two rounds' arrivals, the median gap)"""
        self.halt.set()
        self.join(timeout=5)
        d = sorted(b - a for a, b in zip(self.times, self.times[1:]) if b > a)
        return (d[-1], d[len(d) // 2]) if d else (None, None)


def pause_lines(path):
    """The workers' account of each session saved at a pause."""
    return [m for m in (re.search(r'at the pause (\d+) bytes of device memory sent, (\d+) unchanged', l)
                        for l in lines(path)) if m]


def gaps(path, tag='mig'):
    """The checker's rounds as the guest printed them: (ticks, done line)."""
    ticks = [l for l in lines(path) if l.startswith(f'VCU-MANY {tag} tick')]
    done = [l for l in lines(path) if l.startswith(f'VCU-MANY {tag} done')]
    return ticks, done[-1] if done else None


def main():
    for f in ('qemu/bin/qemu-system-x86_64', 'qemu/bin/vcu-daemon', 'vm/guest.env'):
        if not os.path.exists(os.path.join(B, f)):
            die(f'no build/{f}: build first (make all; tests/vm/run.sh builds the guest)')
    if not os.path.exists(os.path.join(B, 'vm', 'initrd-migrate.img')) and \
            not os.path.exists(os.path.join(B, 'vm', 'initrd-share.img')):
        r = subprocess.run([os.path.join(ROOT, 'tests', 'vm', 'run.sh'), 'migrate'],
                           env=dict(os.environ, VCU_VM_BUILD_ONLY='1'), capture_output=True, text=True)
        if r.returncode != 0:
            die('building the migrate image failed: ' + r.stdout[-2000:])
    os.makedirs(LOGDIR, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix='vcu-mig-')
    procs = []
    try:
        run(tmp, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
        for n in ('a', 'b', 'c'):
            src = os.path.join(tmp, n, 'daemon.log')
            if os.path.exists(src):
                shutil.copy(src, os.path.join(LOGDIR, f'migrate-daemon-{n}.log'))
        shutil.rmtree(tmp, ignore_errors=True)
    print(f'{sum(results)} passed, {len(results) - sum(results)} failed')
    sys.exit(0 if all(results) else 1)


def checker_went_on(tag, sa, sb, where=('on the source', 'on the destination')):
    """The checks of a guest whose checker must go on in sb (begun in sa)
    with no wrong result; its done line."""
    ok = wait_line(sb, r'^VCU-SUITE-END migrate', SECS + 600)
    ticks_a, _ = gaps(sa)
    ticks_b, done = gaps(sb)
    passed = any(l.startswith('VCU-TEST migrate/checker PASS') for l in lines(sb))
    report(f'{tag}-checker-goes-on', ok and passed and len(ticks_b) > 0 and done is not None,
           f"ticks {where[0]} {len(ticks_a)}, {where[1]} {len(ticks_b)}; {done}")
    m = re.search(r'wrong=(\d+)', done or '')
    report(f'{tag}-no-wrong-result', m is not None and m.group(1) == '0', done or 'no done line')
    oops = [l for l in lines(sb) + lines(sa) if re.search(r'Oops|BUG:|Call Trace|panic', l)]
    report(f'{tag}-no-guest-oops', not oops, '; '.join(oops[:3]))
    return done


def one(tmp, procs, da_sock, db_sock, tag, ballast=0, gpus=(None, None)):
    """A VM moved from the daemon at da_sock to the one at db_sock while
    its checker runs: the checks of a migration that must complete."""
    sa, sb = (os.path.join(LOGDIR, f'migrate-{tag}-{n}.log') for n in ('src', 'dst'))
    for f in (sa, sb):
        if os.path.exists(f):
            os.remove(f)
    qa = start_qemu(f'{tag}-src', da_sock, os.path.join(tmp, f'{tag}-qa'), sa, False, ballast,
                    gpus[0])
    qb = start_qemu(f'{tag}-dst', db_sock, os.path.join(tmp, f'{tag}-qb'), sb, True, ballast,
                    gpus[1])
    procs += [qa, qb]
    ma, mb = Qmp(os.path.join(tmp, f'{tag}-qa')), Qmp(os.path.join(tmp, f'{tag}-qb'))
    if not wait_line(sa, r'^VCU-MANY mig tick', 600):
        report(f'{tag}-source-running', False, 'the checker printed no round in 600 s: ' +
               ' | '.join(lines(sa)[-8:]))
        return
    watch = RoundWatch((sa, sb))
    watch.start()
    dlog = os.path.join(os.path.dirname(da_sock), 'daemon.log')
    seen = len(pause_lines(dlog))
    t0 = time.time()
    q = migrate(ma, mb, 40000 + (os.getpid() + len(results)) % 20000)
    report(f'{tag}-completed', q.get('status') == 'completed',
           f"status {q.get('status')} {q.get('error-desc', '')}".strip())
    if q.get('status') != 'completed':
        watch.stop()
        return
    print(f"info: {tag}: {ballast} MiB more device memory: QEMU's downtime {q.get('downtime')} ms, "
          f"total {q.get('total-time')} ms, {time.time() - t0:.1f} s from the migrate command",
          flush=True)
    # The pass before the pause: the ballast, written once, went before
    # it; at the pause only its hash was compared.  QEMU switches over once
    # what is left would go within its downtime limit (300 ms by default),
    # so up to a few hundred MiB may still go at the pause.
    pauses = pause_lines(dlog)[seen:]
    same = sum(int(m.group(2)) for m in pauses)
    sent = sum(int(m.group(1)) for m in pauses)
    print(f"info: {tag}: at the pause {sent} bytes of device memory sent, {same} unchanged since "
          f"the pass before it", flush=True)
    if ballast > 0:
        want = max((ballast << 20) // 2, (ballast - 512) << 20)
        report(f'{tag}-ballast-before-pause', same >= want,
               f'{same} bytes unchanged at the pause, the ballast {ballast << 20}')
    ma.cmd('quit')
    wait_line(sb, r'^VCU-MANY mig tick', 60)
    time.sleep(2)
    longest, median = watch.stop()
    if longest is not None:
        print(f"info: {tag}: the pause as the guest's rounds reached the host: the longest gap "
              f"between two rounds {longest:.2f} s (rounds every {median:.2f} s otherwise)",
              flush=True)
    done = checker_went_on(tag, sa, sb)
    g = re.search(r'maxgap=([0-9.]+)', done or '')
    r = re.search(r'rounds=(\d+)', done or '')
    print(f"info: {tag}: the guest's longest gap between two checked rounds "
          f"{g.group(1) if g else '?'} s (a round takes {SECS / max(1, int(r.group(1))) if r else 0:.2f} s "
          f"on average)", flush=True)
    qb.wait(timeout=60)


def save_restore(tmp, procs, sock):
    """Suspend to a file and resume, as virsh save and virsh restore do:
    the VM paused, its state written to a file, its QEMU ended; a new QEMU
    on the same daemon loads the file and is resumed."""
    sa, sb = (os.path.join(LOGDIR, f'migrate-saved-{n}.log') for n in ('src', 'dst'))
    state = os.path.join(tmp, 'saved.state')
    for f in (sa, sb):
        if os.path.exists(f):
            os.remove(f)
    qa = start_qemu('saved-src', sock, os.path.join(tmp, 'sqa'), sa, False)
    procs.append(qa)
    ma = Qmp(os.path.join(tmp, 'sqa'))
    if not wait_line(sa, r'^VCU-MANY mig tick', 600):
        report('saved-source-running', False, ' | '.join(lines(sa)[-8:]))
        return
    # virsh save: pause, then write the state (the VM stays paused).
    ma.cmd('stop')
    r = ma.cmd('migrate', uri='file:' + state)
    q = wait_migration(ma) if 'error' not in r else {'status': 'failed', 'error-desc': json.dumps(r)}
    report('saved-written', q.get('status') == 'completed' and os.path.getsize(state) > 0,
           f"status {q.get('status')} {q.get('error-desc', '')}; "
           f"{os.path.getsize(state) if os.path.exists(state) else 0} bytes".strip())
    if q.get('status') != 'completed':
        return
    ma.cmd('quit')
    qa.wait(timeout=60)
    # Its sessions are gone from the daemon (the file holds them) for a
    # while before the restore.
    time.sleep(2)
    qb = start_qemu('saved-dst', sock, os.path.join(tmp, 'sqb'), sb, True)
    procs.append(qb)
    mb = Qmp(os.path.join(tmp, 'sqb'))
    r = mb.cmd('migrate-incoming', uri='file:' + state)
    q = wait_migration(mb) if 'error' not in r else {'status': 'failed', 'error-desc': json.dumps(r)}
    st = mb.cmd('query-status')['return']
    report('saved-restored', q.get('status') == 'completed' and st.get('status') == 'paused',
           f"status {q.get('status')} {q.get('error-desc', '')}; VM {st.get('status')}".strip())
    if q.get('status') != 'completed':
        return
    mb.cmd('cont')                  # virsh restore resumes (unless --paused)
    checker_went_on('saved', sa, sb, ('before the save', 'after the restore'))
    qb.wait(timeout=60)


def run(tmp, procs):
    da = start_daemon(os.path.join(tmp, 'a'), [])
    db = start_daemon(os.path.join(tmp, 'b'), [])
    procs += [da, db]
    sa_sock, sb_sock = os.path.join(tmp, 'a', 'vcu.sock'), os.path.join(tmp, 'b', 'vcu.sock')
    one(tmp, procs, sa_sock, sb_sock, 'move', MOVE_BALLAST)
    for mib in BALLAST:
        one(tmp, procs, sb_sock, sa_sock, f'ballast{mib}', mib)
    if OTHER_GPU:
        one(tmp, procs, sa_sock, sb_sock, 'other-gpu', 0, (0, 1))
    if SAVE:
        save_restore(tmp, procs, sa_sock)
    if not REFUSAL:
        return

    # A destination that cannot take the state (its daemon's quota for the
    # VM holds less than the session's memory): the source runs on.
    dc = start_daemon(os.path.join(tmp, 'c'), ['--mem-quota', '16M'])
    procs.append(dc)
    sa2, sc = os.path.join(LOGDIR, 'migrate-refused-src.log'), os.path.join(LOGDIR, 'migrate-refused-dst.log')
    for f in (sa2, sc):
        if os.path.exists(f):
            os.remove(f)
    qa2 = start_qemu('refused-src', sb_sock, os.path.join(tmp, 'qa2'), sa2, False)
    qc = start_qemu('refused-dst', os.path.join(tmp, 'c', 'vcu.sock'), os.path.join(tmp, 'qc'), sc,
                    True)
    procs += [qa2, qc]
    ma2, mc = Qmp(os.path.join(tmp, 'qa2')), Qmp(os.path.join(tmp, 'qc'))
    if not wait_line(sa2, r'^VCU-MANY mig tick', 600):
        report('refused-source-running', False, ' | '.join(lines(sa2)[-8:]))
        return
    q = migrate(ma2, mc, 40000 + (os.getpid() + 7) % 20000)
    report('refused-fails', q.get('status') == 'failed',
           f"status {q.get('status')} {q.get('error-desc', '')}".strip())
    time.sleep(1)
    st = ma2.cmd('query-status')['return']
    report('refused-source-runs-on', st.get('running') is True, json.dumps(st))
    ok = wait_line(sa2, r'^VCU-SUITE-END migrate', SECS + 600)
    _, done = gaps(sa2)
    passed = any(l.startswith('VCU-TEST migrate/checker PASS') for l in lines(sa2))
    report('refused-checker-unharmed', ok and passed, done or ' | '.join(lines(sa2)[-6:]))
    why = [l for l in open(sc + '.qemu', errors='replace').read().splitlines()
           if 'could not be loaded' in l]
    report('refused-reason-named', bool(why), why[0] if why else 'no reason from the destination')
    qa2.wait(timeout=60)            # the guest powers off at its suite's end
    stream_break(tmp, procs, sa_sock, sb_sock)


def stream_break(tmp, procs, da_sock, db_sock, ballast=64):
    """A migration whose stream breaks once the source has stopped the VM
    to send the rest of its RAM and the device's state: the destination
    QEMU is killed at the switchover (pause-before-switchover holds the
    source there), then the source goes on, finds the stream broken, and
    must resume the VM with its device as it was, the checker unharmed."""
    sa, sb = (os.path.join(LOGDIR, f'migrate-broken-{n}.log') for n in ('src', 'dst'))
    for f in (sa, sb):
        if os.path.exists(f):
            os.remove(f)
    qa = start_qemu('broken-src', da_sock, os.path.join(tmp, 'bqa'), sa, False, ballast)
    qb = start_qemu('broken-dst', db_sock, os.path.join(tmp, 'bqb'), sb, True, ballast)
    procs += [qa, qb]
    ma, mb = Qmp(os.path.join(tmp, 'bqa')), Qmp(os.path.join(tmp, 'bqb'))
    if not wait_line(sa, r'^VCU-MANY mig tick', 600):
        report('broken-source-running', False, ' | '.join(lines(sa)[-8:]))
        return
    ma.cmd('migrate-set-capabilities',
           capabilities=[{'capability': 'pause-before-switchover', 'state': True}])
    port = 40000 + (os.getpid() + 13) % 20000
    r = mb.cmd('migrate-incoming', uri=f'tcp:127.0.0.1:{port}')
    r2 = ma.cmd('migrate', uri=f'tcp:127.0.0.1:{port}') if 'error' not in r else r
    end = time.time() + 600
    st = ''
    while 'error' not in r2 and time.time() < end:
        st = ma.cmd('query-migrate')['return'].get('status', '')
        if st in ('pre-switchover', 'failed', 'completed', 'cancelled'):
            break
        time.sleep(0.1)
    report('broken-reached-switchover', st == 'pre-switchover',
           json.dumps(r2.get('error')) if 'error' in r2 else f'status {st}')
    if st != 'pre-switchover':
        return
    qb.kill()
    qb.wait(timeout=60)
    ma.cmd('migrate-continue', state='pre-switchover')
    q = wait_migration(ma, 300)
    report('broken-fails', q.get('status') == 'failed',
           f"status {q.get('status')} {q.get('error-desc', '')}".strip())
    time.sleep(1)
    st = ma.cmd('query-status')['return']
    report('broken-source-runs-on', st.get('running') is True, json.dumps(st))
    checker_went_on('broken', sa, sa, ('on the source', 'on the source after the break'))
    qa.wait(timeout=60)


if __name__ == '__main__':
    main()
