#!/usr/bin/env python3
"""Follows and judges tests/gpu/many.sh's run: four VMs on one GPU.

    many_watch.py SECS RESET_VM QMP NATIVE_RATE PID,PID.. VM=LOG:WEIGHT ... -- TOL

Follows each VM's console log while its QEMU runs (PIDS: the VMs'
tests/vm/run.sh), stamping each line with the host's clock as it
arrives.  Once RESET_VM's loop has ticked for SECS/2 seconds it resets that
VM through its QMP socket (system_reset).  Then judges, one line each
("many: WHAT ... PASS|FAIL"):

  share      each VM's share of the kernels all VMs' loops completed, over
             the host time all four ran in (until the reset), against its
             weight's share, within TOL points
  throughput the VMs' kernels/s together over that window, against
             NATIVE_RATE (the loop alone natively): reported
  results    no checker saw a wrong result (wrong=0 in every line)
  quota      no checker saw its VM's quota exceeded (violations=0)
  lost       no process failed ("error" lines), but those the reset or the
             fault ended by design
  fault      the faulting checker saw cudaErrorIllegalAddress, a new one
             after it ran to its end, and every other VM's loop kept
             ticking after the fault
  reset      the reset VM booted again and its loop and checker ran again
  complete   every VM but the reset one ended its suite with its loop and
             checker passed
"""
import json
import re
import socket
import sys
import time

from share_watch import Follower, alive, at   # this folder's: the same window arithmetic

LINE = re.compile(r'^VCU-(SHARE|MANY) (\S+) (\S+)(.*)$')
KV = re.compile(r'(\w+)=(\S+)')



def qmp(path, cmd):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    f = s.makefile('rwb')
    f.readline()
    for c in ('qmp_capabilities', cmd):
        f.write((json.dumps({'execute': c}) + '\n').encode())
        f.flush()
        while True:
            r = json.loads(f.readline())
            if 'return' in r or 'error' in r:
                break
    s.close()
    return r


def main():
    secs, reset_vm, qsock = float(sys.argv[1]), sys.argv[2], sys.argv[3]
    native = float(sys.argv[4])
    pids = [int(p) for p in sys.argv[5].split(',') if p]
    sep = sys.argv.index('--')
    vms, logs, weight = [], {}, {}
    for a in sys.argv[6:sep]:
        vm, rest = a.split('=', 1)
        path, w = rest.rsplit(':', 1)
        vms.append(vm)
        logs[vm] = path
        weight[vm] = float(w)
    tol = float(sys.argv[sep + 1])
    follow = Follower(logs)
    lines = {vm: [] for vm in vms}     # (host time, line)
    reset_at = None
    first_tick = None
    while any(alive(p) for p in pids):
        now = time.time()
        for vm in vms:
            for ln in follow.new_lines(vm):
                lines[vm].append((now, ln))
                if vm == reset_vm and first_tick is None and ln.startswith('VCU-SHARE p0 tick'):
                    first_tick = now
        if reset_at is None and first_tick is not None and now - first_tick >= secs / 2:
            try:
                r = qmp(qsock, 'system_reset')
                print(f'info: reset {reset_vm} at {now - first_tick:.0f} s of its loop: {r}')
            except OSError as e:
                print(f'info: reset {reset_vm} failed: {e}')
            reset_at = now
        time.sleep(0.1)

    ok_all = True

    def verdict(what, ok, detail):
        nonlocal ok_all
        ok_all = ok_all and ok
        print(f'many: {what} {detail} {"PASS" if ok else "FAIL"}')

    def events(vm, kind=None, tag=None):
        out = []
        for t, ln in lines[vm]:
            m = LINE.match(ln)
            if m and (kind is None or m.group(1) == kind) and (tag is None or m.group(2) == tag):
                out.append((t, m.group(2), m.group(3), dict(KV.findall(m.group(4)))))
        return out

    # Share: the loops' kernels over the window all four ran in, before
    # the reset.
    ticks = {}
    for vm in vms:
        ticks[vm] = [(t, int(kv['kernels'])) for t, tag, what, kv in events(vm, 'SHARE', 'p0')
                     if what in ('tick', 'done') and (reset_at is None or t < reset_at)]
    rates = {}
    if all(len(ticks[vm]) >= 4 for vm in vms):
        w0 = max(ticks[vm][0][0] for vm in vms) + 2.0
        w1 = min(ticks[vm][-1][0] for vm in vms)
        if w1 - w0 >= 10:
            for vm in vms:
                rates[vm] = (at(ticks[vm], w1) - at(ticks[vm], w0)) / (w1 - w0)
            print(f'info: window {w1 - w0:.0f} s, kernels/s ' +
                  ' '.join(f'{vm}={rates[vm]:.1f}' for vm in vms))
    total = sum(rates.values())
    wsum = sum(weight.values())
    if total > 0:
        shares = {vm: 100 * rates[vm] / total for vm in vms}
        want = {vm: 100 * weight[vm] / wsum for vm in vms}
        ok = all(abs(shares[vm] - want[vm]) <= tol for vm in vms)
        verdict('share', ok, ' '.join(f'{vm}={shares[vm]:.1f}%' for vm in vms) +
                ' (target ' + '/'.join(f'{want[vm]:g}' for vm in vms) + f' ±{tol:g})')
        if native > 0:
            print(f'info: throughput: the VMs together {total:.1f} kernels/s, '
                  f'{100 * total / native:.1f}% of the loop alone natively ({native:.1f})')
    else:
        verdict('share', False, '(the VMs did not run together long enough)')

    # Results and quota: every checker line.
    wrong = viol = rounds = 0
    for vm in vms:
        last = {}
        for t, tag, what, kv in events(vm, 'MANY'):
            if what in ('tick', 'done', 'fault-seen'):
                last[(tag, reset_at is not None and t >= reset_at)] = kv
        for kv in last.values():
            wrong += int(kv.get('wrong', 0))
            viol += int(kv.get('violations', 0))
            rounds += int(kv.get('rounds', 0))
    verdict('results', wrong == 0 and rounds > 0, f'{rounds} checked rounds, {wrong} wrong')
    verdict('quota', viol == 0 and rounds > 0, f'{viol} violations')

    # Lost work: error lines (the reset VM's processes end with it, silently).
    errs = [f'{vm}: {ln}' for vm in vms for t, ln in lines[vm]
            if re.match(r'^VCU-(SHARE|MANY) \S+ error', ln)]
    verdict('lost', not errs, f'{len(errs)} processes failed' + (': ' + '; '.join(errs[:3]) if errs else ''))

    # The fault.
    fvm = [vm for vm in vms if any(what == 'fault-seen' for _, _, what, _ in events(vm, 'MANY'))]
    fault_ok = False
    detail = 'no checker faulted'
    if fvm:
        vm = fvm[0]
        ft, _, _, _ = [e for e in events(vm, 'MANY') if e[2] == 'fault-seen'][0]
        seen = [ln for _, ln in lines[vm] if 'fault-seen' in ln][0]
        after = [e for e in events(vm, 'MANY', 'm1') if e[2] == 'done']
        others = [o for o in vms if o != vm and
                  any(w == 'tick' and t > ft + 5 for t, _, w, _ in events(o, 'SHARE', 'p0'))]
        fault_ok = 'cudaErrorIllegalAddress' in seen and bool(after) and len(others) == len(vms) - 1
        detail = (f'{vm}: {seen.split(" ")[3]}; a new checker after it ' +
                  ('ran to its end' if after else 'did not end') +
                  f'; the other VMs kept running: {len(others)}/{len(vms) - 1}')
    verdict('fault', fault_ok, detail)

    # The reset.
    if reset_at is not None:
        boots = [t for t, ln in lines[reset_vm] if ln.startswith('VCU-INIT start')]
        again = [t for t, tag, what, kv in events(reset_vm, 'SHARE', 'p0') if what == 'tick' and t > reset_at]
        again_m = [t for t, tag, what, kv in events(reset_vm, 'MANY') if what == 'tick' and t > reset_at]
        verdict('reset', len(boots) >= 2 and bool(again) and bool(again_m),
                f'{reset_vm}: booted {len(boots)} times, loop ticks after the reset {len(again)}, '
                f'checker ticks {len(again_m)}')
    else:
        verdict('reset', False, 'no reset was made')

    # Every other VM's suite complete.
    incomplete = []
    for vm in vms:
        if vm == reset_vm:
            continue
        text = '\n'.join(ln for _, ln in lines[vm])
        if not re.search(r'^VCU-TEST share/loop-p0 PASS', text, re.M) or \
           not re.search(r'^VCU-TEST share/many-checker-\S+ PASS', text, re.M):
            incomplete.append(vm)
    verdict('complete', not incomplete, 'all VMs but the reset one' +
            (f'; incomplete: {" ".join(incomplete)}' if incomplete else ''))
    return 0 if ok_all else 1


if __name__ == '__main__':
    sys.exit(main())
