#!/usr/bin/env python3
"""fronts-plot.py TITLE OUT.svg EVAL.json [EVAL.json ...] > table.md

The accuracy fronts of routing policies from `lynx-moe eval -o json` runs over a parameter
sweep (on the same documents; the first file's topk rows are the baseline): per batch size, the distinct experts cut (x, % of exact top-k's) against the perplexity
change (y, %), one line per policy family through its settings; the Pareto front of each
family is drawn, the other settings as open points. Also prints a Markdown table with the
95% confidence interval of the per-document NLL change (eval's d_nll). Plain SVG, standard
library only."""
import json
import math
import sys

title, out, srcs = sys.argv[1], sys.argv[2], sys.argv[3:]
d = json.load(open(srcs[0]))
base = {r["batch"]: r for r in d["rows"] if r["policy"] == "topk"}
rows = list(d["rows"])
for f in srcs[1:]:
    rows += [r for r in json.load(open(f))["rows"] if r["policy"] != "topk"]
src = ", ".join(srcs)
colors = {"lynx": "#1f77b4", "oea": "#2ca02c", "budget": "#ff7f0e", "ser": "#9467bd",
          "static-k": "#8c564b", "cover": "#d62728", "subst": "#17becf"}


def family(p):
    return p.split(":")[0]


def point(r):
    b = base[r["batch"]]
    cut = 100 * (1 - r["distinct_experts"] / r["distinct_exact"])
    dppl = 100 * (r["ppl"] / b["ppl"] - 1)
    return cut, dppl


batches = sorted(base)
# Markdown table.
print(f"model {d['model']}, commit {d['commit']}, {d['documents']} documents ({src})\n")
print("| policy | B | experts/layer | exact | cut | PPL change | dNLL/token [95% CI] | KL |")
print("|---|---:|---:|---:|---:|---:|---|---:|")
for B in batches:
    for r in rows:
        if r["batch"] != B or r["policy"] == "topk":
            continue
        cut, dppl = point(r)
        dn = r["d_nll"]
        print(f"| {r['policy']} | {B} | {r['distinct_experts']:.2f} | {r['distinct_exact']:.2f} | "
              f"{-cut:+.1f}% | {dppl:+.2f}% | {dn[0]:+.4f} [{dn[1]:+.4f}, {dn[2]:+.4f}] | "
              f"{r['kl']:.4f} |")

# SVG: one panel per batch size.
W, H, PAD = 380, 300, 50
svg = []
for i, B in enumerate(batches):
    x0 = i * W
    pts = [(r["policy"],) + point(r) for r in rows if r["batch"] == B and r["policy"] != "topk"]
    xmax = max([p[1] for p in pts] + [10])
    xmax = 10 * math.ceil(xmax / 10)
    ymax = min(max([p[2] for p in pts] + [0.5]), 4.0)
    ymax = 0.5 * math.ceil(ymax / 0.5)
    sx = lambda v: x0 + PAD + (W - PAD - 20) * max(0, v) / xmax
    sy = lambda v: 30 + (H - PAD - 30) * (1 - min(max(v, 0), ymax) / ymax)
    svg.append(f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-size="13">'
               f'{title}, B = {B}</text>')
    svg.append(f'<rect x="{x0 + PAD}" y="30" width="{W - PAD - 20}" height="{H - PAD - 30}" '
               f'fill="none" stroke="#888"/>')
    for k in range(0, int(xmax) + 1, 10):
        svg.append(f'<text x="{sx(k)}" y="{H - PAD + 14}" text-anchor="middle" '
                   f'font-size="10">{k}</text>')
    for k in range(int(ymax / 0.5) + 1):
        v = 0.5 * k
        svg.append(f'<text x="{x0 + PAD - 4}" y="{sy(v) + 3}" text-anchor="end" '
                   f'font-size="10">{v:g}</text>')
        svg.append(f'<line x1="{x0 + PAD}" x2="{x0 + W - 20}" y1="{sy(v)}" y2="{sy(v)}" '
                   f'stroke="#eee"/>')
    svg.append(f'<text x="{x0 + PAD + (W - PAD) / 2}" y="{H - 12}" text-anchor="middle" '
               f'font-size="11">distinct experts cut (%)</text>')
    svg.append(f'<text x="{x0 + 12}" y="{30 + (H - PAD) / 2}" font-size="11" '
               f'transform="rotate(-90 {x0 + 12} {30 + (H - PAD) / 2})" '
               f'text-anchor="middle">perplexity change (%)</text>')
    fams = []
    for p in pts:
        if family(p[0]) not in fams:
            fams.append(family(p[0]))
    for j, f in enumerate(fams):
        c = colors.get(f, "#333")
        fp = sorted([p for p in pts if family(p[0]) == f], key=lambda p: p[1])
        # Pareto front of the family: no other setting cuts more for less.
        front = [p for p in fp if not any(q[1] >= p[1] and q[2] < p[2] or
                                          q[1] > p[1] and q[2] <= p[2] for q in fp)]
        if len(front) > 1:
            path = " ".join(f"{sx(p[1]):.1f},{sy(p[2]):.1f}" for p in front)
            svg.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="2"/>')
        for p in fp:
            fill = c if p in front else "white"
            clip = p[2] > ymax
            svg.append(f'<circle cx="{sx(p[1]):.1f}" cy="{sy(p[2]):.1f}" r="3.5" '
                       f'fill="{fill}" stroke="{c}"><title>{p[0]}: {p[1]:.1f}% cut, '
                       f'{p[2]:+.2f}%{" (off the chart)" if clip else ""}</title></circle>')
        svg.append(f'<rect x="{x0 + PAD + 8}" y="{36 + 14 * j}" width="10" height="3" '
                   f'fill="{c}"/><text x="{x0 + PAD + 22}" y="{41 + 14 * j}" '
                   f'font-size="10">{f}</text>')
doc = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(batches)}" height="{H}" '
       f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
       + "".join(svg) + "</svg>\n")
open(out, "w").write(doc)
