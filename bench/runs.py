#!/usr/bin/env python3
"""Merge the CSVs of several runs of one program into one: each row's median.

    runs.py -o OUT.csv RUN1.csv RUN2.csv ...

Inputs are "metric,size_bytes,value,unit" ('#' lines are comments), as
backend_overhead prints them.  Each run starts a fresh worker process
and the threads of both sides land wherever the scheduler puts them: on
the GPU machine a run's figures move with that placement (launch-rate
ratios 72-118 % between runs of the same build, docs/benchmarks.md), so
one run says little.  OUT.csv has, for each (metric, size) seen, the
median over the runs that have it, and a '#' line before it with the
count, minimum, quartiles and maximum.  A run that printed nothing
counts for nothing; with no usable run, exit status 1.
"""
import argparse
import statistics
import sys

from combine import read_rows


def quartiles(v):
    """(q1, q3) of the sorted list v, by the median-of-halves rule."""
    h = len(v) // 2
    lo, hi = v[:h], v[len(v) - h:]
    if not lo:
        return v[0], v[-1]
    return statistics.median(lo), statistics.median(hi)


def merge(runs):
    order, vals, units = [], {}, {}
    for rows in runs:
        for metric, size, value, unit in rows:
            key = (metric, size)
            if key not in vals:
                order.append(key)
                vals[key] = []
                units[key] = unit
            vals[key].append(value)
    out = []
    for key in order:
        v = sorted(vals[key])
        q1, q3 = quartiles(v)
        out.append((key[0], key[1], statistics.median(v), units[key], len(v), v[0], q1, q3, v[-1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = [r for r in (read_rows(p) for p in a.runs) if r]
    if not runs:
        print("runs: no usable run", file=sys.stderr)
        return 1
    with open(a.output, "w") as f:
        f.write("metric,size_bytes,value,unit\n")
        f.write("# the median of %d runs per row (runs.py)\n" % len(runs))
        for m, size, med, unit, n, lo, q1, q3, hi in merge(runs):
            f.write("# %s: n=%d min=%.6g q1=%.6g q3=%.6g max=%.6g\n" % (m, n, lo, q1, q3, hi))
            f.write("%s,%d,%.6g,%s\n" % (m, size, med, unit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
