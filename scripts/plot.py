#!/usr/bin/python3
"""plot.py KIND ...: every figure of the project, drawn by matplotlib (Debian's
python3-matplotlib) from the JSON the commands write. The commands emit data only.

  plot.py bench BENCH.json OUT.svg
      `lynx-moe bench --save-json` (or -o json): TPOT and distinct experts per layer versus
      batch size, one line per policy (at the largest thread count), and heatmaps of tokens
      per expert at the largest batch for the first two policies.
  plot.py ep ROUTE_SIM.json OUT.svg [--title TEXT]
      `lynx-moe route-sim --ranks ... -o json`: per batch size, predicted TPOT with all-reduce
      and with all-to-all, and the busiest rank's experts per layer, versus ranks.
  plot.py fronts TITLE OUT.svg EVAL.json [EVAL.json ...] > table.md
      `lynx-moe eval` JSON over a parameter sweep on the same documents (the first file's
      topk rows are the baseline): per batch size, distinct experts cut against perplexity
      change, one colour per policy family, its Pareto front joined and filled, the other
      settings open. Prints a Markdown table with the 95% interval of eval's d_nll.
  plot.py slo DIR TARGET_MS OUT.svg
      The loadgen JSON files scripts/slo-sweep.sh leaves in DIR (SPEC-rRATE.json): P99 TPOT
      and output tokens/s versus offered request rate, one line per routing policy.

Text stays text in the SVG (svg.fonttype none), so a figure can be searched and diffed."""
import glob
import json
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import MaxNLocator  # noqa: E402

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.grid": True,
                     "grid.color": "#e6e6e6", "svg.hashsalt": "lynx-moe"})
FAMILY_COLORS = {"topk": "#444444", "lynx": "#1f77b4", "oea": "#2ca02c", "budget": "#ff7f0e",
                 "ser": "#9467bd", "static-k": "#8c564b", "cover": "#d62728", "subst": "#17becf"}


def die(msg):
    print(f"plot.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        die(f"cannot read {path}: {e}")


def save(fig, out):
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {out}", file=sys.stderr)


def log2_batches(ax, xs, label):
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel(label)


def bench(args):
    if len(args) != 2:
        die("usage: plot.py bench BENCH.json OUT.svg")
    doc = load_json(args[0])
    rows = doc.get("rows", doc if isinstance(doc, list) else [])
    if not rows:
        die(f"{args[0]} has no bench rows")
    threads = max(r["threads"] for r in rows)
    rows = [r for r in rows if r["threads"] == threads]
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    batches = sorted({r["batch"] for r in rows})
    heat = [p for p in policies[:2] if any(r["policy"] == p and r.get("expert_tokens")
                                           for r in rows)]
    fig = plt.figure(figsize=(14, 4.2 + 2.6 * len(heat)), layout="constrained")
    grid = fig.add_gridspec(1 + len(heat), 2, height_ratios=[4.2] + [2.6] * len(heat))
    model = rows[0].get("model", "")
    trace = ", replayed trace" if doc.get("routing_trace") else ""
    for col, (key, title, ylabel) in enumerate([
            ("tpot_ms", f"TPOT vs batch ({model}{trace}, {threads} threads)",
             "time per output token step (ms)"),
            ("distinct_experts", "Distinct experts per layer per step", "distinct experts")]):
        ax = fig.add_subplot(grid[0, col])
        for p in policies:
            pts = sorted((r["batch"], r[key]) for r in rows if r["policy"] == p)
            ax.plot([b for b, _ in pts], [v for _, v in pts], marker="o", label=p,
                    color=FAMILY_COLORS.get(p.split(":")[0]))
        log2_batches(ax, batches, "batch size")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.legend()
    bmax = batches[-1]
    for i, p in enumerate(heat):
        row = next(r for r in rows if r["policy"] == p and r["batch"] == bmax)
        ax = fig.add_subplot(grid[1 + i, :])
        im = ax.imshow(row["expert_tokens"], aspect="auto", cmap="viridis",
                       interpolation="nearest")
        ax.set_title(f"Tokens per expert, {p}, batch {bmax}")
        ax.set_xlabel("expert")
        ax.set_ylabel("layer")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(False)
        fig.colorbar(im, ax=ax)
    save(fig, args[1])


def ep(args):
    title = ""
    if "--title" in args:
        i = args.index("--title")
        if i + 1 >= len(args):
            die("--title needs a value")
        title = args[i + 1]
        args = args[:i] + args[i + 2:]
    if len(args) != 2:
        die("usage: plot.py ep ROUTE_SIM.json OUT.svg [--title TEXT]")
    rows = load_json(args[0])
    if not isinstance(rows, list) or not rows or "ranks" not in rows[0]:
        die(f"{args[0]} has no route-sim --ranks rows")
    # One rank, then the balanced placement where there is one (R <= N), slices past it.
    rows = [r for r in rows if r["placement"] != "contiguous" or r["ranks"] == 1]
    batches = sorted({r["batch"] for r in rows})
    specs = list(dict.fromkeys(r["policy"] for r in rows))
    ranks = sorted({r["ranks"] for r in rows})
    fig, axes = plt.subplots(len(batches), 3, figsize=(16, 3.6 * len(batches)), squeeze=False,
                             layout="constrained")
    for bi, b in enumerate(batches):
        for col, (key, name, ylabel) in enumerate([
                ("tpot_allreduce_ms", "Predicted TPOT, all-reduce", "ms per token step"),
                ("tpot_a2a_ms", "Predicted TPOT, all-to-all", "ms per token step"),
                ("experts_max", "Busiest rank's experts per layer", "distinct experts")]):
            ax = axes[bi][col]
            for s in specs:
                pts = sorted((r["ranks"], r[key]) for r in rows
                             if r["policy"] == s and r["batch"] == b)
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=s,
                        color=FAMILY_COLORS.get(s.split(":")[0]))
            log2_batches(ax, ranks, "ranks")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{name}, B = {b}")
            ax.set_ylim(bottom=0)
            ax.legend()
    if title:  # the caption names the inputs, so a committed figure says what made it
        fig.suptitle(title, fontsize=9)
    save(fig, args[1])


def fronts(args):
    if len(args) < 3:
        die("usage: plot.py fronts TITLE OUT.svg EVAL.json [EVAL.json ...] > table.md")
    title, out, srcs = args[0], args[1], args[2:]
    d = load_json(srcs[0])
    base = {r["batch"]: r for r in d["rows"] if r["policy"] == "topk"}
    if not base:
        die(f"{srcs[0]} has no topk rows (the baseline)")
    rows = [r for r in d["rows"] if r["policy"] != "topk"]
    for f in srcs[1:]:
        rows += [r for r in load_json(f)["rows"] if r["policy"] != "topk"]

    def point(r):
        b = base[r["batch"]]
        return (100 * (1 - r["distinct_experts"] / r["distinct_exact"]),
                100 * (r["ppl"] / b["ppl"] - 1))

    batches = sorted(base)
    print(f"model {d['model']}, commit {d['commit']}, {d['documents']} documents "
          f"({', '.join(srcs)})\n")
    print("| policy | B | experts/layer | exact | cut | PPL change | dNLL/token [95% CI] | KL |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for B in batches:
        for r in rows:
            if r["batch"] != B:
                continue
            cut, dppl = point(r)
            dn = r["d_nll"]
            print(f"| {r['policy']} | {B} | {r['distinct_experts']:.2f} | "
                  f"{r['distinct_exact']:.2f} | {-cut:+.1f}% | {dppl:+.2f}% | "
                  f"{dn[0]:+.4f} [{dn[1]:+.4f}, {dn[2]:+.4f}] | {r['kl']:.4f} |")

    fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 3.4), squeeze=False,
                             layout="constrained")
    for ax, B in zip(axes[0], batches):
        pts = [(r["policy"],) + point(r) for r in rows if r["batch"] == B]
        ymax = 0.5 * math.ceil(min(max([p[2] for p in pts] + [0.5]), 4.0) / 0.5)
        for fam in dict.fromkeys(p[0].split(":")[0] for p in pts):
            c = FAMILY_COLORS.get(fam, "#333333")
            fp = sorted((p for p in pts if p[0].split(":")[0] == fam), key=lambda p: p[1])
            # The family's Pareto front: no other setting cuts more for less.
            front = [p for p in fp if not any(q[1] >= p[1] and q[2] < p[2] or
                                              q[1] > p[1] and q[2] <= p[2] for q in fp)]
            ax.plot([p[1] for p in front], [min(p[2], ymax) for p in front], color=c,
                    marker="o", label=fam)
            rest = [p for p in fp if p not in front]
            ax.scatter([p[1] for p in rest], [min(p[2], ymax) for p in rest],
                       facecolors="white", edgecolors=c, zorder=3)
        ax.set_xlim(left=0)
        ax.set_ylim(0, ymax)
        ax.set_xlabel("distinct experts cut (%)")
        ax.set_ylabel("perplexity change (%)")
        ax.set_title(f"{title}, B = {B}")
        ax.legend(fontsize=8)
    save(fig, out)


def slo(args):
    if len(args) != 3:
        die("usage: plot.py slo DIR TARGET_MS OUT.svg")
    out_dir, target, out = args[0], float(args[1]), args[2]
    series = {}
    for f in sorted(glob.glob(os.path.join(out_dir, "*-r*.json"))):
        m = re.match(r"(.*)-r([0-9.]+)\.json$", os.path.basename(f))
        r = load_json(f)
        if not m or not r.get("tpot_s"):
            continue
        series.setdefault(m.group(1), []).append(
            (r["rate"], 1e3 * r["tpot_s"]["p99"], r["throughput"]["output_tokens_per_s"]))
    if not series:
        die(f"no loadgen results (SPEC-rRATE.json) in {out_dir}")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), layout="constrained")
    for ax, idx, title, ylabel in [(axes[0], 1, "P99 time per output token", "ms"),
                                   (axes[1], 2, "Output throughput", "tokens/s")]:
        for name, s in sorted(series.items()):
            s.sort()
            ax.plot([p[0] for p in s], [p[idx] for p in s], marker="o", label=name)
        if idx == 1:
            ax.axhline(target, color="#888888", linestyle="--", label=f"SLO {target:g} ms")
        ax.set_xlabel("offered load (requests/s)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.legend()
    save(fig, out)


KINDS = {"bench": bench, "ep": ep, "fronts": fronts, "slo": slo}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in KINDS:
        die("usage: plot.py {" + ",".join(KINDS) + "} ... (see the script's docstring)")
    KINDS[sys.argv[1]](sys.argv[2:])
