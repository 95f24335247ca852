#!/usr/bin/env python3
"""Asks QEMU's QMP monitor query-status every 10 ms until a line appears in
a file (or a time limit), and prints the slowest answer in milliseconds:
"qmp-latency max_ms=N answers=N".  Used by tests/gpu/leaks.sh around a
device reset with a never-ending kernel, which must not stall QEMU's main
loop.

    qmp-latency.py SOCKET UNTIL_FILE UNTIL_LINE [MAX_SECONDS]
"""
import json, socket, sys, time

sock_path, until_file, until_line = sys.argv[1:4]
limit = float(sys.argv[4]) if len(sys.argv) > 4 else 120.0

s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sock_path)
f = s.makefile('rw')

def reply():
    while True:
        m = json.loads(f.readline())
        if 'return' in m or 'error' in m:
            return m

json.loads(f.readline())  # greeting
f.write(json.dumps({'execute': 'qmp_capabilities'}) + '\n'); f.flush()
reply()

def seen():
    try:
        with open(until_file, errors='replace') as lf:
            return any(l.strip().replace('\r', '') == until_line for l in lf)
    except OSError:
        return False

worst, n, t_end = 0.0, 0, time.time() + limit
done_at = None
while time.time() < t_end:
    t0 = time.monotonic()
    f.write(json.dumps({'execute': 'query-status'}) + '\n'); f.flush()
    reply()
    worst = max(worst, time.monotonic() - t0)
    n += 1
    if done_at is None and seen():
        done_at = time.time()
    # A little past the line too: the reset's effects come after it.
    if done_at is not None and time.time() - done_at > 2.0:
        break
    time.sleep(0.01)
print(f'qmp-latency max_ms={worst * 1000:.1f} answers={n}')
