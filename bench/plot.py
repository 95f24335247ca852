#!/usr/bin/env python3
"""Plot host<->device bandwidth against transfer size, native vs guest.

    plot.py [results.csv] [-o bandwidth.png]

Reads bench/results.csv (combine.py's output) and writes bench/bandwidth.png
(defaults: next to this script; a build output, not kept in git): h2d/d2h
x pinned/pageable, native (solid) and guest (dashed), 8 lines.  x: size on
a log2 scale; y: GB/s, on a log scale when the values span more than a
factor of 20, else linear.

Python 3 standard library only: the PNG is written with zlib and struct,
lines are drawn by hand, and labels use the small bitmap font below
(capitals only; lower case is drawn as capitals).
"""
import csv
import math
import os
import struct
import sys
import zlib

SERIES = (
    # metric, column, colour, dashed
    ("h2d_pinned", "native", (31, 119, 180), False),
    ("d2h_pinned", "native", (214, 39, 40), False),
    ("h2d_pageable", "native", (44, 160, 44), False),
    ("d2h_pageable", "native", (148, 103, 189), False),
    ("h2d_pinned", "guest", (23, 190, 207), True),
    ("d2h_pinned", "guest", (255, 127, 14), True),
    ("h2d_pageable", "guest", (188, 189, 34), True),
    ("d2h_pageable", "guest", (227, 119, 194), True),
)

# 5x7 glyphs: the character, then its 7 rows ('#' = ink).
FONT_SRC = r"""
0 .###. #...# #..## #.#.# ##..# #...# .###.
1 ..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.
2 .###. #...# ....# ...#. ..#.. .#... #####
3 ####. ....# ....# .###. ....# ....# ####.
4 ...#. ..##. .#.#. #..#. ##### ...#. ...#.
5 ##### #.... ####. ....# ....# #...# .###.
6 .###. #.... #.... ####. #...# #...# .###.
7 ##### ....# ...#. ..#.. .#... .#... .#...
8 .###. #...# #...# .###. #...# #...# .###.
9 .###. #...# #...# .#### ....# ....# .###.
A .###. #...# #...# ##### #...# #...# #...#
B ####. #...# #...# ####. #...# #...# ####.
C .###. #...# #.... #.... #.... #...# .###.
D ####. #...# #...# #...# #...# #...# ####.
E ##### #.... #.... ####. #.... #.... #####
F ##### #.... #.... ####. #.... #.... #....
G .###. #...# #.... #.### #...# #...# .####
H #...# #...# #...# ##### #...# #...# #...#
I .###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.
J ..### ...#. ...#. ...#. ...#. #..#. .##..
K #...# #..#. #.#.. ##... #.#.. #..#. #...#
L #.... #.... #.... #.... #.... #.... #####
M #...# ##.## #.#.# #.#.# #...# #...# #...#
N #...# #...# ##..# #.#.# #..## #...# #...#
O .###. #...# #...# #...# #...# #...# .###.
P ####. #...# #...# ####. #.... #.... #....
Q .###. #...# #...# #...# #.#.# #..#. .##.#
R ####. #...# #...# ####. #.#.. #..#. #...#
S .###. #...# #.... .###. ....# #...# .###.
T ##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..
U #...# #...# #...# #...# #...# #...# .###.
V #...# #...# #...# #...# #...# .#.#. ..#..
W #...# #...# #...# #.#.# #.#.# #.#.# .#.#.
X #...# #...# .#.#. ..#.. .#.#. #...# #...#
Y #...# #...# .#.#. ..#.. ..#.. ..#.. ..#..
Z ##### ....# ...#. ..#.. .#... #.... #####
. ..... ..... ..... ..... ..... .##.. .##..
, ..... ..... ..... ..... .##.. ..#.. .#...
/ ....# ....# ...#. ..#.. .#... #.... #....
( ...#. ..#.. .#... .#... .#... ..#.. ...#.
) .#... ..#.. ...#. ...#. ...#. ..#.. .#...
- ..... ..... ..... ##### ..... ..... .....
_ ..... ..... ..... ..... ..... ..... #####
: ..... .##.. .##.. ..... .##.. .##.. .....
% ##..# ##..# ...#. ..#.. .#... #..## #..##
+ ..... ..#.. ..#.. ##### ..#.. ..#.. .....
= ..... ..... ##### ..... ##### ..... .....
< ...#. ..#.. .#... #.... .#... ..#.. ...#.
> .#... ..#.. ...#. ....# ...#. ..#.. .#...
? .###. #...# ....# ...#. ..#.. ..... ..#..
"""


def load_font():
    font = {" ": ["....."] * 7}
    for line in FONT_SRC.strip().splitlines():
        parts = line.split()
        assert len(parts) == 8 and all(len(r) == 5 for r in parts[1:]), line
        font[parts[0]] = parts[1:]
    return font


FONT = load_font()

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
GRID = (225, 225, 225)
GREY = (110, 110, 110)


class Canvas:
    def __init__(self, w, h, bg=WHITE):
        self.w, self.h = w, h
        self.px = bytearray(bytes(bg) * (w * h))

    def set(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0, y0, x1, y1, c):
        for y in range(max(0, y0), min(self.h, y1 + 1)):
            for x in range(max(0, x0), min(self.w, x1 + 1)):
                self.set(x, y, c)

    def hline(self, x0, x1, y, c):
        self.rect(min(x0, x1), y, max(x0, x1), y, c)

    def vline(self, x, y0, y1, c):
        self.rect(x, min(y0, y1), x, max(y0, y1), c)

    def line(self, x0, y0, x1, y1, c, width=2, dash=None, phase=0.0):
        """Bresenham with a square pen; dash = (on, off) in pixels along
        the line, phase carried between segments.  Returns the phase."""
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx = 1 if x0 < x1 else -1
        sy = 1 if y0 < y1 else -1
        err = dx + dy
        step = math.hypot(x1 - x0, y1 - y0) / max(dx, -dy, 1)
        lo, hi = -(width // 2), (width - 1) // 2
        while True:
            if dash is None or (phase % (dash[0] + dash[1])) < dash[0]:
                for oy in range(lo, hi + 1):
                    for ox in range(lo, hi + 1):
                        self.set(x0 + ox, y0 + oy, c)
            if x0 == x1 and y0 == y1:
                break
            phase += step
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy
        return phase

    def text(self, x, y, s, c=BLACK, scale=2):
        """Draws s with its top-left corner at (x, y); returns the end x."""
        for ch in s.upper():
            glyph = FONT.get(ch, FONT["?"])
            for gy, row in enumerate(glyph):
                for gx, bit in enumerate(row):
                    if bit == "#":
                        self.rect(x + gx * scale, y + gy * scale,
                                  x + gx * scale + scale - 1, y + gy * scale + scale - 1, c)
            x += 6 * scale
        return x

    def png(self, path):
        raw = bytearray()
        stride = self.w * 3
        for y in range(self.h):
            raw.append(0)                   # filter: none
            raw += self.px[y * stride:(y + 1) * stride]

        def chunk(tag, data):
            return (struct.pack(">I", len(data)) + tag + data +
                    struct.pack(">I", zlib.crc32(tag + data) & 0xffffffff))

        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)))
            f.write(chunk(b"IDAT", zlib.compress(bytes(raw), 9)))
            f.write(chunk(b"IEND", b""))


def text_width(s, scale=2):
    return len(s) * 6 * scale - scale


def fmt_size(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d%s" % (n // div, unit)
    return str(n)


def fmt_tick(v):
    if v >= 1:
        return "%d" % round(v) if abs(v - round(v)) < 1e-9 else "%g" % v
    return ("%.6f" % v).rstrip("0").rstrip(".") or "0"


def read_results(path):
    """{(metric, column): [(size, GB/s)]} for the bandwidth metrics."""
    data = {}
    with open(path, newline="") as f:
        for rec in csv.DictReader(line for line in f if not line.startswith("#")):
            if rec.get("unit") != "GB/s":
                continue
            for col in ("native", "guest"):
                v = (rec.get(col) or "").strip()
                if not v:
                    continue
                try:
                    size, val = int(rec["size_bytes"]), float(v)
                except ValueError:
                    continue
                if size > 0 and val > 0:
                    data.setdefault((rec["metric"], col), []).append((size, val))
    for pts in data.values():
        pts.sort()
    return data


def nice_step(span, n=6):
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def plot(data, path):
    W, H = 1040, 640
    L, R, T, B = 100, 730, 70, 540         # plot area
    c = Canvas(W, H)
    title = "VIRTIO-CUDA: HOST/DEVICE BANDWIDTH, NATIVE VS GUEST"
    c.text((W - text_width(title)) // 2, 20, title)

    pts = [p for (m, col, _, _) in SERIES for p in data.get((m, col), [])]
    if not pts:
        c.rect(L, T, R, B, WHITE)
        c.text(L + 200, (T + B) // 2, "NO BANDWIDTH DATA", GREY)
        c.png(path)
        return
    sizes = sorted({s for s, _ in pts})
    vals = [v for _, v in pts]
    x_lo, x_hi = math.log2(sizes[0]) - 0.5, math.log2(sizes[-1]) + 0.5
    logy = max(vals) / min(vals) > 20
    if logy:
        y_lo = 10 ** math.floor(math.log10(min(vals) / 1.3))
        y_hi = 10 ** math.ceil(math.log10(max(vals) * 1.3))
        fy = lambda v: math.log10(v)
    else:
        step = nice_step(max(vals))
        y_lo, y_hi = 0.0, step * math.ceil(max(vals) * 1.05 / step)
        fy = lambda v: v

    def X(size):
        return L + (math.log2(size) - x_lo) / (x_hi - x_lo) * (R - L)

    def Y(v):
        return B - (fy(v) - fy(y_lo)) / (fy(y_hi) - fy(y_lo)) * (B - T)

    # y grid and labels
    if logy:
        ticks = []
        d = y_lo
        while d <= y_hi * 1.0001:
            ticks.append(d)
            for m in (2, 5):
                if d * m < y_hi:
                    c.hline(L, R, int(round(Y(d * m))), (240, 240, 240))
            d *= 10
    else:
        step = nice_step(y_hi)
        ticks = [i * step for i in range(int(round(y_hi / step)) + 1)]
    for v in ticks:
        y = int(round(Y(v)))
        c.hline(L, R, y, GRID)
        c.hline(L - 6, L, y, BLACK)
        s = fmt_tick(v)
        c.text(L - 10 - text_width(s), y - 7, s)
    # x grid and labels: every size measured
    for s in sizes:
        x = int(round(X(s)))
        c.vline(x, T, B, GRID)
        c.vline(x, B, B + 6, BLACK)
        lab = fmt_size(s)
        c.text(x - text_width(lab) // 2, B + 12, lab)
    # frame
    c.hline(L, R, T, BLACK)
    c.hline(L, R, B, BLACK)
    c.vline(L, T, B, BLACK)
    c.vline(R, T, B, BLACK)
    # axis labels
    c.text(L - 90, T - 30, "GB/S" + (" (LOG)" if logy else ""))
    xl = "TRANSFER SIZE (BYTES, LOG2 SCALE)"
    c.text((L + R - text_width(xl)) // 2, B + 45, xl)

    # series
    for metric, col, colour, dashed in SERIES:
        p = data.get((metric, col), [])
        phase = 0.0
        for (s0, v0), (s1, v1) in zip(p, p[1:]):
            phase = c.line(X(s0), Y(v0), X(s1), Y(v1), colour, width=3,
                           dash=(10, 6) if dashed else None, phase=phase)
        for s, v in p:
            x, y = int(round(X(s))), int(round(Y(v)))
            if dashed:
                c.rect(x - 4, y - 4, x + 4, y + 4, WHITE)
                c.rect(x - 3, y - 3, x + 3, y + 3, colour)
                c.rect(x - 1, y - 1, x + 1, y + 1, WHITE)
            else:
                c.rect(x - 4, y - 4, x + 4, y + 4, colour)

    # legend, right of the plot
    lx, ly = R + 20, T
    c.text(lx, ly, "LEGEND", GREY)
    ly += 30
    for metric, col, colour, dashed in SERIES:
        c.line(lx, ly + 7, lx + 40, ly + 7, colour, width=3, dash=(10, 6) if dashed else None)
        have = (metric, col) in data
        c.text(lx + 50, ly, "%s %s" % (metric.replace("_", " "), col), BLACK if have else GREY)
        if not have:
            c.text(lx + 50, ly + 18, "(NO DATA)", GREY, scale=1)
        ly += 32
    ly += 10
    c.text(lx, ly, "SOLID: NATIVE", GREY, scale=1)
    c.text(lx, ly + 12, "DASHED: GUEST (VIRTIO-CUDA)", GREY, scale=1)
    c.text(lx, ly + 24, "MEDIAN OF N REPS", GREY, scale=1)
    c.png(path)


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    src, out = os.path.join(here, "results.csv"), os.path.join(here, "bandwidth.png")
    args = argv[1:]
    if "-o" in args:
        i = args.index("-o")
        if i + 1 >= len(args):
            print("usage: plot.py [results.csv] [-o bandwidth.png]", file=sys.stderr)
            return 2
        out = args[i + 1]
        del args[i:i + 2]
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: plot.py [results.csv] [-o bandwidth.png]", file=sys.stderr)
        return 2
    if args:
        src = args[0]
    plot(read_results(src), out)
    print("plot: wrote %s" % out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
