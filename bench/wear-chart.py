#!/usr/bin/env python3
"""KiB written a job, per filesystem, as grouped bars: one SVG from several steadq-bench runs.

    bench/wear-chart.py OUT.svg LABEL=DIR [LABEL=DIR ...]

Each DIR holds a run's results.tsv (steadq-bench --out DIR). The bars: SteadQ strict with one
worker and with 8, SQLite FULL with one connection, Redis always with one client, and SteadQ
batched; a case a run lacks (or without device counts, as on tmpfs) is left out.
"""
import csv
import sys

CASES = [
    (("steadq", "strict", "1"), "SteadQ strict, 1 worker", "#1f77b4"),
    (("steadq", "strict", "8"), "SteadQ strict, 8 workers", "#6baed6"),
    (("steadq", "batched", "1"), "SteadQ batched (64)", "#c6dbef"),
    (("sqlite", "full", "1"), "SQLite WAL FULL, 1 connection", "#ff7f0e"),
    (("redis", "always", "1"), "Redis appendfsync always, 1 client", "#2ca02c"),
]


def kib(run_dir):
    rows = csv.DictReader(open(f"{run_dir}/results.tsv"), delimiter="\t")
    out = {}
    for r in rows:
        if r["kib_written_per_job"]:
            out[(r["system"], r["mode"], r["workers"])] = float(r["kib_written_per_job"])
    return out


def main(out, specs):
    runs = [(s.split("=", 1)[0], kib(s.split("=", 1)[1])) for s in specs]
    top = max(v for _, k in runs for v in k.values())
    W, H, left, base, bw = 120 + 150 * len(runs), 420, 60, 330, 22
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W + 260}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="20" font-size="14">KiB written to the device a job, 64-byte payloads (lower is less wear)</text>']
    scale = (base - 40) / top
    for t in range(0, int(top) + 1, 20):
        y = base - t * scale
        svg.append(f'<line x1="{left}" x2="{W}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t}</text>')
    for i, (label, k) in enumerate(runs):
        x0 = left + 20 + i * 150
        for j, (case, _, color) in enumerate(CASES):
            if case not in k:
                continue
            h = k[case] * scale
            x = x0 + j * bw
            svg.append(f'<rect x="{x}" y="{base - h:.1f}" width="{bw - 3}" height="{h:.1f}" fill="{color}"/>')
            svg.append(f'<text x="{x + (bw - 3) / 2:.1f}" y="{base - h - 3:.1f}" text-anchor="middle" font-size="9">{k[case]:.0f}</text>')
        svg.append(f'<text x="{x0 + len(CASES) * bw / 2:.1f}" y="{base + 18}" text-anchor="middle">{label}</text>')
    for j, (_, name, color) in enumerate(CASES):
        y = 50 + j * 20
        svg.append(f'<rect x="{W + 10}" y="{y - 10}" width="12" height="12" fill="{color}"/>')
        svg.append(f'<text x="{W + 28}" y="{y}">{name}</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
