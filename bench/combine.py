#!/usr/bin/env python3
"""Combine the benchmark CSVs into one table: bench/results.csv.

    combine.py NATIVE.csv GUEST.csv OVERHEAD.csv [GUEST_NVRT.csv] [-o results.csv]

Inputs are "metric,size_bytes,value,unit" (cudabench, backend_overhead);
'#' lines are comments.  A missing or empty input leaves its column empty.
Output columns: metric,size_bytes,native,guest,unit,ratio.

Meaning of the columns:
  cudabench rows (h2d_pinned, memcpy4_latency, launch_rate, ...):
      native = the program on the host against NVIDIA's libcudart,
      guest  = the same binary in the virtio-cuda guest.
  backend rows, named "backend:X" (from backend_overhead, no VM):
      native = the CUDA Driver API call made directly,
      guest  = the same call as a request through the host backend
               (vcu_backend_execute / vcu_backend_submit).
      backend:echo has only the guest column: an ECHO request with no data.
  nvrt rows, named "nvrt:X" (GUEST_NVRT.csv): the same cudabench binary
      in the guest on NVIDIA's own libcudart.so.13 over virtio-cuda's
      libcuda.so.1 instead of on virtio-cuda's libcudart.so.13; native as
      for X.
  proxy rows, named "proxy:X" (backend_overhead, no VM): as backend:X,
      but the request goes through the QEMU device's proxy to a worker
      process (vcu_proxy_submit), as in the product.
  backend_overhead* / proxy_overhead* rows: the guest column holds
      backend (proxy) - direct in us per request (per launch for
      *_overhead_launch); native and ratio are empty.  So are
      proxy_launch_rate_vs_direct (%), worker_start_proxy (SESSION_OPEN
      to its reply: the worker's spawn, driver load, cuInit) and
      first_kernel_proxy (a new session's open, context, module, first
      launch and synchronize).

ratio: higher is better, 1.0 = as fast as native.  For rates (GB/s,
kernels/s) guest/native; for times (us) native/guest.  Printed with a
table on stdout.
"""
import csv
import os
import sys

HIGHER_BETTER = ("GB/s", "kernels/s")
# Differences and start costs: the guest column alone.
NO_RATIO = ("backend_overhead", "proxy_overhead", "proxy_launch_rate", "worker_start",
            "first_kernel")
BANDWIDTH = ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")


def read_rows(path):
    """[(metric, size, value, unit)] from a 4-column CSV; [] if unreadable."""
    rows = []
    if not path or not os.path.exists(path):
        if path:
            print("combine: %s: missing, column left empty" % path, file=sys.stderr)
        return rows
    with open(path, newline="") as f:
        for rec in csv.reader(line for line in f if not line.lstrip().startswith("#")):
            if len(rec) < 4 or rec[0] == "metric":
                continue
            try:
                size = int(rec[1])
                value = float(rec[2])
            except ValueError:
                print("combine: %s: bad row %r" % (path, rec), file=sys.stderr)
                continue
            rows.append((rec[0].strip(), size, value, rec[3].strip()))
    return rows


def ratio(native, guest, unit):
    if native is None or guest is None or native <= 0 or guest <= 0:
        return None
    return guest / native if unit in HIGHER_BETTER else native / guest


def combine(native_rows, guest_rows, overhead_rows, nvrt_rows=()):
    """[(metric, size, native, guest, unit, ratio)] in a stable order."""
    table = {}
    order = []

    def put(metric, size, col, value, unit):
        key = (metric, size)
        if key not in table:
            table[key] = {"native": None, "guest": None, "unit": unit}
            order.append(key)
        table[key][col] = value

    for rows, col in ((native_rows, "native"), (guest_rows, "guest")):
        for metric, size, value, unit in rows:
            put(metric, size, col, value, unit)

    native = {(m, sz): v for m, sz, v, u in native_rows}
    for metric, size, value, unit in nvrt_rows:
        put("nvrt:" + metric, size, "native", native.get((metric, size)), unit)
        put("nvrt:" + metric, size, "guest", value, unit)

    direct = {}
    for metric, size, value, unit in overhead_rows:
        if metric.endswith("_direct"):
            direct[(metric[: -len("_direct")], size)] = value
    for metric, size, value, unit in overhead_rows:
        if metric.startswith(NO_RATIO):
            put(metric, size, "guest", value, unit)
        elif metric.endswith("_direct"):
            put("backend:" + metric[: -len("_direct")], size, "native", value, unit)
        elif metric.endswith("_backend"):
            put("backend:" + metric[: -len("_backend")], size, "guest", value, unit)
        elif metric.endswith("_proxy") and not metric.startswith(("worker_start", "first_kernel")):
            base = metric[: -len("_proxy")]
            put("proxy:" + base, size, "native", direct.get((base, size)), unit)
            put("proxy:" + base, size, "guest", value, unit)
        else:
            put(metric, size, "guest", value, unit)

    out = []
    for key in order:
        e = table[key]
        r = None if key[0].startswith(NO_RATIO) else ratio(e["native"], e["guest"], e["unit"])
        out.append((key[0], key[1], e["native"], e["guest"], e["unit"], r))
    return out


def fmt_num(v):
    if v is None:
        return ""
    a = abs(v)
    if a >= 1e4:
        return "%.0f" % v
    if a >= 100:
        return "%.1f" % v
    if a >= 1 or a == 0:
        return "%.2f" % v
    return "%.3g" % v


def fmt_size(n):
    if n == 0:
        return "-"
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["metric", "size_bytes", "native", "guest", "unit", "ratio"])
        for metric, size, native, guest, unit, r in rows:
            w.writerow([metric, size,
                        "" if native is None else "%.6g" % native,
                        "" if guest is None else "%.6g" % guest,
                        unit,
                        "" if r is None else "%.4f" % r])


def print_table(rows, out=sys.stdout):
    head = ("metric", "size", "native", "guest", "unit", "guest vs native")
    body = [(m, fmt_size(s), fmt_num(n), fmt_num(g), u,
             "" if r is None else "%.3fx" % r) for m, s, n, g, u, r in rows]
    widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head))]
    right = (False, True, True, True, False, True)

    def line(cells):
        return "  ".join(str(c).rjust(w) if rj else str(c).ljust(w)
                         for c, w, rj in zip(cells, widths, right)).rstrip()

    print(line(head), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    prev = None
    for cells in body:
        m = cells[0]
        group = (m if m in BANDWIDTH else "backend" if m.startswith("backend")
                 else "nvrt" if m.startswith("nvrt:") else "runtime")
        if prev is not None and group != prev:
            print("", file=out)
        prev = group
        print(line(cells), file=out)
    print("(guest vs native: higher is better, 1.000x = native speed; "
          "backend:* rows compare the backend with direct driver calls)", file=out)


def main(argv):
    args = []
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.csv")
    i = 1
    while i < len(argv):
        if argv[i] in ("-o", "--output") and i + 1 < len(argv):
            out = argv[i + 1]
            i += 2
        elif argv[i] in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            args.append(argv[i])
            i += 1
    if not 1 <= len(args) <= 4:
        print("usage: combine.py NATIVE.csv [GUEST.csv [OVERHEAD.csv [GUEST_NVRT.csv]]] "
              "[-o results.csv]", file=sys.stderr)
        return 2
    args += [None] * (4 - len(args))
    rows = combine(read_rows(args[0]), read_rows(args[1]), read_rows(args[2]),
                   read_rows(args[3]) if args[3] else ())
    if not rows:
        print("combine: no data", file=sys.stderr)
        return 1
    write_csv(out, rows)
    print_table(rows)
    print("combine: wrote %s" % out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
