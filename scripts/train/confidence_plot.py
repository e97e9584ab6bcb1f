#!/usr/bin/python3
"""confidence_plot.py [--cost 0.5] DIR > curve.md   (also writes DIR/curve.svg)

Reads the TAG.stats.json (router_stats.py) / TAG.eval.json (`lynx-moe eval -o json`, B = 16,
a strength sweep per policy family) pairs of scripts/train/confidence_curve.sh and prints,
per model snapshot, the router's confidence (median top-1 probability, mean top-k mass) and
each family's distinct-expert cut at a perplexity cost of --cost %: the largest cut on the
family's front (its settings and exact routing at (0, 0), joined by straight lines) whose
perplexity change is at most the cost. The SVG plots that cut against the top-k mass.
Standard library only."""
import argparse
import glob
import json
import os
import re

ap = argparse.ArgumentParser()
ap.add_argument("--cost", type=float, default=0.5, help="perplexity change budget, %%")
ap.add_argument("dir")
args = ap.parse_args()


def cut_at(points, cost):
    """points: (cut %, dppl %) of one family's settings. The largest cut reachable at a
    perplexity change <= cost, reading straight lines between a setting within the cost
    (or exact routing at (0, 0)) and a stronger one beyond it."""
    pts = [(0.0, 0.0)] + list(points)
    best = max(c for c, d in pts if d <= cost)
    for c0, d0 in pts:
        if d0 > cost:
            continue
        for c1, d1 in pts:
            if d1 > cost and c1 > c0:
                best = max(best, c0 + (c1 - c0) * (cost - d0) / (d1 - d0))
    return best


rows = []
for stats_path in sorted(glob.glob(os.path.join(args.dir, "*.stats.json"))):
    tag = os.path.basename(stats_path)[: -len(".stats.json")]
    eval_path = os.path.join(args.dir, tag + ".eval.json")
    if not os.path.exists(eval_path):
        continue
    st = json.load(open(stats_path))
    ev = json.load(open(eval_path))
    base = next(r for r in ev["rows"] if r["policy"] == "topk")
    fam = {}
    for r in ev["rows"]:
        if r["policy"] == "topk":
            continue
        cut = 100 * (1 - r["distinct_experts"] / r["distinct_exact"])
        dppl = 100 * (r["ppl"] / base["ppl"] - 1)
        fam.setdefault(r["policy"].split(":")[0], []).append((cut, dppl))
    m = re.search(r"step(\d+)", tag)
    a = st["router"]["all"]
    rows.append({"tag": tag, "step": int(m.group(1)) if m else st.get("step", 0),
                 "p1": a["p1_median"], "mass": a["topk_mass_mean"],
                 "ppl": st["test"]["ppl"], "cuts": {f: cut_at(p, args.cost) for f, p in fam.items()}})

families = sorted({f for r in rows for f in r["cuts"]})
print(f"Distinct experts cut at B = 16 for at most +{args.cost:g}% perplexity "
      f"(data/eval; {args.dir})\n")
print("| model | step | test PPL | top-1 p (median) | top-k mass (mean) | "
      + " | ".join(families) + " |")
print("|---|---:|---:|---:|---:|" + "---:|" * len(families))
for r in rows:
    print(f"| {r['tag']} | {r['step']} | {r['ppl']:.2f} | {r['p1']:.3f} | {r['mass']:.3f} | "
          + " | ".join(f"{r['cuts'].get(f, 0):.1f}%" for f in families) + " |")

# SVG: cut at the cost (y) against the top-k mass (x), one series per family.
W, H, PAD = 520, 340, 55
colors = {"lynx": "#1f77b4", "oea": "#2ca02c", "cover": "#d62728", "budget": "#ff7f0e",
          "ser": "#9467bd", "static-k": "#8c564b"}
xs = [r["mass"] for r in rows] or [0, 1]
x_lo, x_hi = min(xs) - 0.02, max(xs) + 0.02
y_hi = max([10.0] + [c for r in rows for c in r["cuts"].values()])
y_hi = 10 * (int(y_hi / 10) + 1)
sx = lambda v: PAD + (W - PAD - 20) * (v - x_lo) / max(1e-9, x_hi - x_lo)
sy = lambda v: 30 + (H - PAD - 30) * (1 - v / y_hi)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
       f'font-family="sans-serif">',
       f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">cut at +{args.cost:g}% '
       f'perplexity vs router confidence, B = 16</text>',
       f'<rect x="{PAD}" y="30" width="{W - PAD - 20}" height="{H - PAD - 30}" fill="none" '
       f'stroke="#888"/>',
       f'<text x="{PAD + (W - PAD) / 2}" y="{H - 10}" text-anchor="middle" font-size="11">'
       f'mean top-k probability mass of the router</text>',
       f'<text x="14" y="{H / 2}" font-size="11" transform="rotate(-90 14 {H / 2})" '
       f'text-anchor="middle">distinct experts cut (%)</text>']
for k in range(0, int(y_hi) + 1, 10):
    svg.append(f'<text x="{PAD - 4}" y="{sy(k) + 3}" text-anchor="end" font-size="10">{k}</text>')
for i in range(5):
    v = x_lo + (x_hi - x_lo) * i / 4
    svg.append(f'<text x="{sx(v)}" y="{H - PAD + 14}" text-anchor="middle" '
               f'font-size="10">{v:.2f}</text>')
for j, f in enumerate(families):
    pts = sorted((r["mass"], r["cuts"].get(f, 0.0)) for r in rows)
    c = colors.get(f, "#444")
    svg.append('<polyline fill="none" stroke="%s" points="%s"/>' %
               (c, " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)))
    for x, y in pts:
        svg.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>')
    svg.append(f'<text x="{PAD + 8}" y="{46 + 14 * j}" font-size="11" fill="{c}">{f}</text>')
svg.append("</svg>")
with open(os.path.join(args.dir, "curve.svg"), "w") as fo:
    fo.write("\n".join(svg) + "\n")
