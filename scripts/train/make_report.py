#!/usr/bin/python3
"""Writes docs/models.md's generated tables and the loss plot from the committed logs.

Reads scripts/train/logs/NAME.jsonl (training log), NAME.stats.json (router_stats.py),
NAME.verify.json (export_gguf.py --verify), data/tokenizer_stats.json and data/manifest.tsv
(if present), models/NAME.gguf sizes. Writes scripts/train/logs/loss.svg and the part of
docs/models.md between the markers <!-- generated:begin --> and <!-- generated:end -->
(the rest of the file is kept as written).
Usage: /usr/bin/python3 scripts/train/make_report.py
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LOGS = os.path.join(HERE, "logs")
NAMES = ["lynx-moe-64x8", "lynx-moe-8x2"]
COLORS = {"lynx-moe-64x8": "#1f77b4", "lynx-moe-8x2": "#d62728"}
BEGIN, END = "<!-- generated:begin -->", "<!-- generated:end -->"


def load_log(name):
    path = os.path.join(LOGS, name + ".jsonl")
    if not os.path.exists(path):
        return None, []
    head, recs = None, []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "config" in r:
                head = r
            else:
                recs.append(r)
    return head, recs


def load_json(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return None


def svg_plot(series, path, width=640, height=360):
    """series: list of (label, color, dash, [(x, y)])."""
    pts = [p for _, _, _, s in series for p in s]
    if not pts:
        return
    x0, x1 = 0, max(p[0] for p in pts)
    y0 = math.floor(min(p[1] for p in pts) * 2) / 2
    y1 = min(9.0, math.ceil(max(p[1] for p in pts) * 2) / 2)
    L, R, T, B = 60, 20, 20, 50
    sx = lambda x: L + (x - x0) / (x1 - x0 or 1) * (width - L - R)
    sy = lambda y: T + (y1 - min(y, y1)) / (y1 - y0 or 1) * (height - T - B)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>']
    y = y0
    while y <= y1 + 1e-9:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>'
                   % (L, width - R, sy(y), sy(y)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (L - 5, sy(y) + 4, y))
        y += 0.5
    for i in range(6):
        xv = x0 + (x1 - x0) * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.1fM</text>'
                   % (sx(xv), height - B + 18, xv / 1e6))
    out.append('<text x="%d" y="%d" text-anchor="middle">training tokens</text>'
               % ((L + width - R) // 2, height - 8))
    out.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">'
               'loss (nats/token)</text>' % ((T + height - B) // 2, (T + height - B) // 2))
    for i, (label, color, dash, s) in enumerate(series):
        d = " ".join("%.1f,%.1f" % (sx(x), sy(y)) for x, y in s)
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5" %s points="%s"/>'
                   % (color, 'stroke-dasharray="5,3"' if dash else "", d))
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" %s stroke-width="2"/>'
                   % (width - 230, width - 205, T + 12 + 16 * i, T + 12 + 16 * i, color,
                      'stroke-dasharray="5,3"' if dash else ""))
        out.append('<text x="%d" y="%d">%s</text>' % (width - 200, T + 16 + 16 * i, label))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def f3(v):
    return "%.3f" % v


def main():
    lines = []
    series = []
    rows = []
    for name in NAMES:
        head, recs = load_log(name)
        if head is None:
            continue
        stats = load_json(os.path.join(LOGS, name + ".stats.json"))
        ver = load_json(os.path.join(LOGS, name + ".verify.json"))
        gguf = os.path.join(ROOT, "models", name + ".gguf")
        size = os.path.getsize(gguf) if os.path.exists(gguf) else None
        c = head["config"]
        a = head["args"]
        series.append((name + " train", COLORS[name], False,
                       [(r["tokens"], r["loss"]) for r in recs]))
        series.append((name + " valid (32 windows)", COLORS[name], True,
                       [(r["tokens"], r["valid_loss"]) for r in recs if "valid_loss" in r]))
        hd = c["n_embd"] // c["n_head"]
        attn = c["n_embd"] * hd * (2 * c["n_head"] + 2 * c["n_head_kv"])
        expert = 3 * c["n_embd"] * c["n_ff"]
        active = c["n_layer"] * (attn + c["n_expert_used"] * expert + c["n_embd"] * c["n_expert"]) \
            + 2 * c["n_vocab"] * c["n_embd"]
        last = recs[-1] if recs else {}
        rows.append((name, c, a, head, size, active, last, stats, ver, recs))
    svg_plot(series, os.path.join(LOGS, "loss.svg"))

    lines.append("| | " + " | ".join("`%s`" % r[0] for r in rows) + " |")
    lines.append("| --- |" + " --- |" * len(rows))

    def row(label, fn):
        vals = []
        for r in rows:
            try:
                vals.append(fn(*r))
            except (KeyError, TypeError, IndexError):
                vals.append("n/a")
        lines.append("| %s | %s |" % (label, " | ".join(vals)))

    row("experts, used per token", lambda n, c, *x: "%d, top-%d" % (c["n_expert"], c["n_expert_used"]))
    row("layers, n_embd, heads (kv)", lambda n, c, *x: "%d, %d, %d (%d)" % (
        c["n_layer"], c["n_embd"], c["n_head"], c["n_head_kv"]))
    row("expert FFN width (feed_forward_length)", lambda n, c, *x: str(c["n_ff"]))
    row("context, vocabulary", lambda n, c, *x: "%d, %d" % (c["n_ctx"], c["n_vocab"]))
    row("parameters (total)", lambda n, c, a, h, *x: "%.2f M" % (h["n_params"] / 1e6))
    row("parameters used per token", lambda n, c, a, h, s, act, *x: "%.2f M" % (act / 1e6))
    row("GGUF file (F16; norms, router F32)", lambda n, c, a, h, s, *x: "%.1f MB" % (s / 1e6))
    row("steps x batch x context", lambda n, c, a, *x: "%d x %d x %d" % (
        x[3]["step"], a["batch"], a["ctx"]) + ("" if x[3]["step"] == a["steps"] else
                                              " (of a %d-step schedule)" % a["steps"]))
    row("training tokens", lambda n, c, a, h, s, act, last, *x: "%.2f M (%.2f epochs)" % (
        last["tokens"] / 1e6, last["tokens"] / h["train_tokens_available"]))
    row("training time (1 thread, shared 2-core machine)", lambda n, c, a, h, s, act, last, *x:
        "%.0f min" % (last["elapsed_s"] / 60))
    row("final train loss (last %d steps)" % 20, lambda *x: f3(x[6]["loss"]))
    row("final aux loss / k (1.0 = balanced)", lambda *x: f3(x[6]["aux"]))
    row("valid perplexity (all %s tokens)" % (rows[0][7]["valid"]["tokens"] if rows and rows[0][7] else "?"),
        lambda *x: "%.2f" % x[7]["valid"]["ppl"])
    row("test perplexity", lambda *x: "%.2f" % x[7]["test"]["ppl"])
    row("test next-token accuracy", lambda *x: "%.1f %%" % (100 * x[7]["test"]["next_token_acc"]))
    row("NMSE PyTorch vs NumPy reference (GGUF)", lambda *x: "%.1e" % x[8]["nmse_torch_vs_reference"])
    row("NMSE lynx-moe vs NumPy reference", lambda *x: "%.1e" % x[8]["nmse_engine_vs_reference"])
    lines.append("")
    lines.append("![training and validation loss](../scripts/train/logs/loss.svg)")
    lines.append("")
    lines.append("Loss every 100 steps (training loss averaged over the last 20 steps; valid = "
                 "the 32 fixed windows of data/valid.u16 the trainer evaluates):")
    lines.append("")
    lines.append("| step | " + " | ".join("%s train | %s valid" % (r[0], r[0]) for r in rows) + " |")
    lines.append("| --- |" + " --- | --- |" * len(rows))
    steps = sorted({rec["step"] for r in rows for rec in r[9] if "valid_loss" in rec})
    for st in steps:
        cells = []
        for r in rows:
            rec = next((x for x in r[9] if x["step"] == st), None)
            cells.append("%s | %s" % (f3(rec["loss"]), f3(rec["valid_loss"])) if rec else "|")
        lines.append("| %d | %s |" % (st, " | ".join(cells)))
    lines.append("")
    lines.append("### Router confidence on held-out data")
    lines.append("")
    lines.append("Router softmax p over all experts, sorted p1 >= p2 >= ...; z = router logits. "
                 "Tokens: the first %s windows of data/test.u16, every layer pooled "
                 "(per-layer numbers in scripts/train/logs/NAME.stats.json)." %
                 (rows[0][7]["router"]["all"]["tokens"] // max(1, rows[0][1]["n_layer"]) // 256
                  if rows and rows[0][7] else "?"))
    lines.append("")
    lines.append("| statistic | " + " | ".join("`%s`" % r[0] for r in rows) + " |")
    lines.append("| --- |" + " --- |" * len(rows))
    keys = [("p1: 10% / median / 90% quantile", lambda s: "%.3f / %.3f / %.3f" % (
                s["p1_q10"], s["p1_median"], s["p1_q90"])),
            ("P(p1 > 0.5), P(p1 > 0.9)", lambda s: "%.3f, %.3f" % (s["p1_gt_0.5"], s["p1_gt_0.9"])),
            ("median p1/p2; P(p1/p2 > 2)", lambda s: "%.2f; %.3f" % (
                s["p1_over_p2_median"], s["p1_over_p2_gt_2"])),
            ("mean p at ranks 1..k+2", lambda s: " ".join("%.3f" % v for v in s["mean_p_by_rank"])),
            ("mean renormalized weight at ranks 1..k", lambda s: " ".join(
                "%.3f" % v for v in s["mean_weight_by_rank"])),
            ("top-k probability mass (mean)", lambda s: f3(s["topk_mass_mean"])),
            ("logit gap z_k - z_k+1: median", lambda s: f3(s["gap_k_k1_median"])),
            ("P(z_k - z_k+1 < 0.5), P(< 1)", lambda s: "%.3f, %.3f" % (
                s["gap_k_k1_lt_0.5"], s["gap_k_k1_lt_1"])),
            ("logit gap z_1 - z_k: median", lambda s: f3(s["gap_1_k_median"])),
            ("ranks 2..k within 1 logit of z_1", lambda s: f3(s["ranks2k_within_1_logit"])),
            ("router logit std", lambda s: f3(s["router_logit_std"]))]
    for label, fn in keys:
        vals = []
        for r in rows:
            try:
                vals.append(fn(r[7]["router"]["all"]))
            except (KeyError, TypeError):
                vals.append("n/a")
        lines.append("| %s | %s |" % (label, " | ".join(vals)))
    lines.append("")
    lines.append("Per layer (median p1, P(p1/p2 > 2), median z_k - z_k+1, expert load max/min "
                 "relative to uniform):")
    lines.append("")
    lines.append("| model | layer | median p1 | P(p1/p2 > 2) | median gap k/k+1 | load max / min |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        st = r[7]
        if not st:
            continue
        R = st["router"]
        for l, s in enumerate(R["layers"]):
            lines.append("| %s | %d | %.3f | %.3f | %.3f | %.2f / %.2f |" % (
                r[0], l, s["p1_median"], s["p1_over_p2_gt_2"], s["gap_k_k1_median"],
                R["load_max_over_mean"][l], R["load_min_over_mean"][l]))
    tokst = load_json(os.path.join(ROOT, "data", "tokenizer_stats.json"))
    if tokst:
        lines.append("")
        lines.append("Data (this machine's run): " + "; ".join(
            "%s %d documents, %.1f MB, %.2f M tokens (%.2f bytes/token)" % (
                s, tokst[s]["docs"], tokst[s]["bytes"] / 1e6, tokst[s]["tokens"] / 1e6,
                tokst[s]["bytes_per_token"]) for s in ("train", "valid", "test")) + ".")
    text = "\n".join(lines) + "\n"
    doc = os.path.join(ROOT, "docs", "models.md")
    if os.path.exists(doc):
        cur = open(doc).read()
        if BEGIN in cur and END in cur:
            pre = cur[: cur.index(BEGIN) + len(BEGIN)]
            post = cur[cur.index(END):]
            with open(doc, "w") as f:
                f.write(pre + "\n" + text + post)
            print("updated", doc)
            return 0
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
