#!/usr/bin/env python3
"""tests/gpu/hostile.sh's watcher: polls the host daemon's metrics while the
hostile and victim VMs run, then judges.

    hostile_watch.py HOST:PORT QUOTA RUNNER_PIDS FAKE HOSTILE_LOG VICTIM_LOG MAXS PROCS

Prints "PASS|FAIL hostile/NAME detail" lines and "N passed, N failed".
"""
import os
import re
import sys
import time
import urllib.request

SIZE = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}


def size(s):
    return int(s[:-1]) * SIZE[s[-1].upper()] if s[-1].upper() in SIZE else int(s)


def alive(pids):
    for p in pids:
        try:
            os.kill(p, 0)
            return True
        except OSError:
            pass
    return False


def metrics(addr):
    try:
        text = urllib.request.urlopen(f'http://{addr}/metrics', timeout=5).read().decode()
    except OSError:
        return None
    out = {}
    for l in text.splitlines():
        m = re.match(r'(\w+)\{vm="([^"]*)",id="\d+"\} (\S+)$', l)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def main():
    addr, quota, pids, fake, hlog, vlog, maxs, procs = sys.argv[1:9]
    quota, maxs, procs = size(quota), int(maxs), int(procs)
    pids = [int(p) for p in pids.split(',')]
    fake = fake == '1'
    max_nvml = max_used = 0.0
    samples = nv_samples = 0
    refused = 0.0
    t0 = time.time()
    while alive(pids) and time.time() - t0 < 3600:
        m = metrics(addr)
        if m:
            samples += 1
            used = m.get(('vcu_vm_mem_used_bytes', 'hostile'))
            if used is not None:
                max_used = max(max_used, used)
            nv = m.get(('vcu_vm_nvml_mem_bytes', 'hostile'))
            if nv is not None:
                nv_samples += 1
                max_nvml = max(max_nvml, nv)
            refused = max(refused, m.get(('vcu_vm_sessions_refused_total', 'hostile'), 0))
        time.sleep(0.25)
    passes = fails = 0

    def verdict(name, ok, detail):
        nonlocal passes, fails
        print(('PASS' if ok else 'FAIL'), 'hostile/' + name, detail)
        passes += bool(ok)
        fails += not ok

    gib = 1 << 30
    verdict('account-within-quota', samples > 0 and max_used <= quota,
            f'max {max_used / gib:.2f} GiB charged of {quota / gib:.2f} GiB ({samples} samples)')
    if not fake:
        verdict('nvml-within-quota', nv_samples > 0 and max_nvml <= quota,
                f'max {max_nvml / gib:.2f} GiB held by its workers (NVML) of {quota / gib:.2f} GiB '
                f'({nv_samples} samples)')
    verdict('attack-reached-its-quota', max_used >= quota * 0.9,
            f'max {max_used / gib:.2f} GiB: the quota, not the attack, was the bound')
    h = open(hlog, errors='replace').read().replace('\r', '')
    started = len(re.findall(r'VCU-HOSTILE \S+ context ok', h))
    verdict('sessions-past-max-refused', started <= maxs and (procs <= maxs or
                                                             'context failed' in h),
            f'{started} of {procs} processes got a context (max-sessions {maxs}; the daemon '
            f'refused {int(refused)}, QEMU the rest)')
    verdict('stack-limit-bounded',
            re.search(r'limit stack \d+ refused', h) is not None or
            'context failed' in h,
            'a stack size the slice cannot hold was refused')
    if not fake:
        verdict('local-memory-bounded',
                re.search(r'limit lmem \d+ refused', h) is not None or
                'context failed' in h,
                'a kernel whose local memory the slice cannot hold was refused')
    v = open(vlog, errors='replace').read().replace('\r', '')
    m = re.search(r'victim rounds=(\d+) refused=(\d+) wrong=(\d+) min_free_mib=(\d+)', v)
    verdict('victim-keeps-its-slice', m is not None and int(m.group(2)) == 0 and
            int(m.group(3)) == 0 and int(m.group(1)) > 0,
            m.group(0) if m else 'no victim result')
    print(f'{passes} passed, {fails} failed')
    sys.exit(1 if fails else 0)


if __name__ == '__main__':
    main()
