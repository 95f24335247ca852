#!/usr/bin/env python3
"""Judges one case of tests/gpu/share.sh from the VMs' serial logs.

    share_watch.py CASE TIMEOUT PID,PID.. VM=LOG [VM=LOG ...] -- TARGET

Follows each VM's console log while its QEMU runs (the PIDs: the VMs'
tests/vm/run.sh), stamping every "VCU-SHARE TAG tick kernels=K" line with
the host's clock as it arrives, so that VMs booted at different moments are
compared over the same stretch of host time: from when the last process
of all started ticking (plus 2 s) to when the first one stopped.  Each
process's kernels in that window are read off its cumulative counts
(interpolated between ticks) and summed per VM.  Prints

    share: CASE vm0=X% vm1=Y% (target ...) PASS|FAIL
    info: CASE window S s, kernels/s vm0=R0 vm1=R1 ...

TARGET is "pct:25,75,5" (each VM's share of the total throughput, within
5 points), "rate" (one VM: just report its rate, the baseline),
"ratio:BASE,LO,HI" (each VM's rate over BASE kernels/s within [LO, HI])
or "busy:MS,LO,HI" (one VM: the part of wall time its kernels kept the GPU
busy, at MS milliseconds a kernel as timed alone, within [LO, HI]).
The last lines "rate=R" (the VMs' summed kernels/s) and "kernel_ms=K"
(the first process's own timing of one kernel, from its batch_ms) are for
the caller.
"""
import os
import re
import sys
import time

TICK = re.compile(r'^VCU-SHARE (\S+) (tick|done) kernels=(\d+)')
START = re.compile(r'^VCU-SHARE (\S+) start (.*)$')
BATCH_MS = re.compile(r'batch_ms=([0-9.]+)')
BATCH = 8                       # kernels per batch (tests/share/share_loop.cu)
ERROR = re.compile(r'^VCU-SHARE (\S+) error (.*)$')


def at(series, t):
    """A cumulative count at host time t, from [(time, count)] ticks,
    interpolated between the two around t."""
    for (ta, ka), (tb, kb) in zip(series, series[1:]):
        if ta <= t <= tb:
            return ka + (kb - ka) * ((t - ta) / (tb - ta) if tb > ta else 0)
    return series[0][1] if t < series[0][0] else series[-1][1]


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


class Follower:
    """Reads the lines that have arrived in growing log files since the
    last call, whole lines only (a guest console writes CR LF)."""

    def __init__(self, paths):
        self.paths = dict(paths)
        self.pos = {k: 0 for k in self.paths}
        self.part = {k: '' for k in self.paths}

    def new_lines(self, key):
        try:
            with open(self.paths[key], 'rb') as f:
                f.seek(self.pos[key])
                data = f.read()
        except OSError:
            return []
        self.pos[key] += len(data)
        lines = (self.part[key] + data.decode('utf-8', 'replace').replace('\r', '')).split('\n')
        self.part[key] = lines.pop()
        return lines


def main():
    case, timeout = sys.argv[1], float(sys.argv[2])
    pids = [int(p) for p in sys.argv[3].split(',') if p]
    sep = sys.argv.index('--')
    logs = [a.split('=', 1) for a in sys.argv[4:sep]]
    target = sys.argv[sep + 1]
    follow = Follower(logs)
    ticks = {}          # (vm, tag) -> [(host time, cumulative kernels)]
    done = set()
    notes = []
    kernel_ms = 0.0
    t_end = time.time() + timeout
    while True:
        running = any(alive(p) for p in pids)
        now = time.time()
        for vm, _ in logs:
            for line in follow.new_lines(vm):
                m = TICK.match(line)
                if m:
                    ticks.setdefault((vm, m.group(1)), []).append((now, int(m.group(3))))
                    if m.group(2) == 'done':
                        done.add((vm, m.group(1)))
                    continue
                m = START.match(line)
                b = BATCH_MS.search(line) if m else None
                if b and kernel_ms == 0.0:
                    kernel_ms = float(b.group(1)) / BATCH
                m = m or ERROR.match(line)
                if m:
                    notes.append(f'{vm}/{line[len("VCU-SHARE "):]}')
        if not running or now > t_end:
            break
        time.sleep(0.1)
    for n in notes:
        print(f'info: {case} {n}')
    vms = [vm for vm, _ in logs]
    procs = sorted(ticks)
    ok_data = bool(procs) and all(len(ticks[p]) >= 4 for p in procs) and \
        all(any(p[0] == vm for p in procs) for vm in vms)
    rates = {}
    if ok_data:
        # Every process ticks from its start (plus 2 s, past the first
        # slices) to its "done": the window is where all of them run.
        w0 = max(ticks[p][0][0] for p in procs) + 2.0
        w1 = min(ticks[p][-1][0] for p in procs)
        if w1 - w0 >= 4.0:
            for vm in vms:
                done_in = [at(ticks[p], w1) - at(ticks[p], w0) for p in procs if p[0] == vm]
                rates[vm] = sum(done_in) / (w1 - w0)
            print(f'info: {case} window {w1 - w0:.1f} s, kernels/s ' +
                  ' '.join(f'{vm}={rates[vm]:.1f}' for vm in vms) +
                  f' (processes: {", ".join(f"{v}/{t}" for v, t in procs)})')
        else:
            print(f'info: {case} the VMs ran together for {max(w1 - w0, 0):.1f} s only')
    total = sum(rates.values())
    verdict = bool(rates) and total > 0
    kind, _, args = target.partition(':')
    if kind == 'pct':
        want = [float(x) for x in args.split(',')]
        tol = want.pop()
        shares = [100.0 * rates.get(vm, 0) / total if total else 0 for vm in vms]
        verdict = verdict and all(abs(s - w) <= tol for s, w in zip(shares, want))
        shown = ' '.join(f'{vm}={s:.1f}%' for vm, s in zip(vms, shares))
        tgt = '/'.join(f'{w:g}' for w in want) + f' ±{tol:g}'
    elif kind == 'busy':
        ms, lo, hi = (float(x) for x in args.split(','))
        busy = total * ms / 1000.0
        verdict = verdict and lo <= busy <= hi
        shown = f'{vms[0]}={100 * busy:.1f}% of the GPU\'s time'
        tgt = f'{100 * lo:g}..{100 * hi:g}%'
    elif kind == 'ratio':
        # Each VM's rate against BASE (one VM alone: its whole rate).
        base, lo, hi = (float(x) for x in args.split(','))
        rs = [rates.get(vm, 0) / base if base > 0 else 0 for vm in vms]
        verdict = verdict and all(lo <= r <= hi for r in rs)
        shown = ' '.join(f'{vm}={100 * r:.1f}% of alone' for vm, r in zip(vms, rs))
        tgt = f'{100 * lo:g}..{100 * hi:g}% of alone' + (' each' if len(vms) > 1 else '')
    else:
        shown = f'{vms[0]}=100%'
        tgt = 'baseline, alone'
    print(f'share: {case} {shown} (target {tgt}) {"PASS" if verdict else "FAIL"}')
    print(f'rate={total:.1f}')
    print(f'kernel_ms={kernel_ms:.4f}')
    return 0 if verdict else 1


if __name__ == '__main__':
    sys.exit(main())
