#!/usr/bin/env python3
"""slo-plot.py OUT_DIR TARGET_MS > plot.svg: P99 TPOT and output tokens/s versus offered request
rate, one line per routing policy, from the loadgen JSON files slo-sweep.sh leaves in OUT_DIR
(named SPEC-rRATE.json). Plain SVG, standard library only."""
import glob, json, math, os, re, sys

out_dir, target = sys.argv[1], float(sys.argv[2])
series = {}
for f in sorted(glob.glob(os.path.join(out_dir, "*-r*.json"))):
    m = re.match(r"(.*)-r([0-9.]+)\.json$", os.path.basename(f))
    r = json.load(open(f))
    if not r.get("tpot_s"):
        continue
    series.setdefault(m.group(1), []).append(
        (r["rate"], 1e3 * r["tpot_s"]["p99"], r["throughput"]["output_tokens_per_s"]))
colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]

def chart(x0, title, ylabel, idx, hline=None):
    pts = [p for s in series.values() for p in s]
    if not pts:
        return ""
    xmax = max(p[0] for p in pts) * 1.05
    ymax = max(max(p[idx] for p in pts), hline or 0) * 1.1
    X = lambda v: x0 + 60 + v / xmax * 420
    Y = lambda v: 330 - v / ymax * 280
    o = [f'<text x="{x0 + 270}" y="22" font-size="14" text-anchor="middle" font-weight="bold">{title}</text>',
         f'<rect x="{x0 + 60}" y="50" width="420" height="280" fill="none" stroke="#444"/>',
         f'<text x="{x0 + 270}" y="365" font-size="12" text-anchor="middle">offered load (requests/s)</text>',
         f'<text x="{x0 + 15}" y="190" font-size="12" text-anchor="middle" transform="rotate(-90 {x0 + 15} 190)">{ylabel}</text>']
    for i in range(6):
        v = ymax * i / 5
        o.append(f'<text x="{x0 + 55}" y="{Y(v) + 4:.1f}" font-size="10" text-anchor="end">{v:.0f}</text>')
    for v in sorted({p[0] for p in pts}):
        o.append(f'<text x="{X(v):.1f}" y="345" font-size="10" text-anchor="middle">{v:g}</text>')
    if hline:
        o.append(f'<line x1="{x0 + 60}" x2="{x0 + 480}" y1="{Y(hline):.1f}" y2="{Y(hline):.1f}" stroke="#888" stroke-dasharray="4"/>')
        o.append(f'<text x="{x0 + 478}" y="{Y(hline) - 4:.1f}" font-size="10" text-anchor="end">SLO {hline:g} ms</text>')
    for k, (name, s) in enumerate(sorted(series.items())):
        s.sort()
        c = colors[k % len(colors)]
        pts = " ".join(f"{X(p[0]):.1f},{Y(p[idx]):.1f}" for p in s)
        o.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{pts}"/>')
        o.append(f'<text x="{x0 + 70}" y="{68 + 16 * k}" font-size="11" fill="{c}">{name}</text>')
    return "\n".join(o)

body = chart(0, "P99 time per output token", "ms", 1, target) + chart(540, "Output throughput", "tokens/s", 2)
print(f'<svg xmlns="http://www.w3.org/2000/svg" width="1080" height="380" font-family="sans-serif">'
      f'<rect width="100%" height="100%" fill="white"/>\n{body}\n</svg>')
