#!/usr/bin/python3
"""Held-out perplexity and router-confidence statistics of a trained model.

  /usr/bin/python3 scripts/train/router_stats.py --ckpt data/ckpt/lynx-moe-64x8.pt \
      [--gguf models/lynx-moe-64x8.gguf] [--out scripts/train/logs/lynx-moe-64x8.stats.json]

With --gguf the weights are taken from the exported file (F16-rounded, i.e. the shipped
model); otherwise from the checkpoint. Perplexity: every non-overlapping window of n_ctx
tokens of data/valid.u16 and data/test.u16 (each window starts a fresh context, so the first
tokens of a window have little context), exact top-k routing.
Router statistics on the first --stat-windows windows of data/test.u16, per layer and over
all layers, from the router's softmax p (sorted descending: p1 >= p2 >= ...) and logits z:
  p1 quantiles, P(p1 > 0.5), P(p1 > 0.9); median p1/p2, P(p1/p2 > 2); mean p at ranks 1..k+2;
  mean renormalized top-k weight at ranks 1..k; top-k mass (sum of the k probabilities);
  gap z_k - z_{k+1} (median, P(< 0.5), P(< 1)); gap z_1 - z_k (median);
  fraction of ranks 2..k within 1 logit of z_1 (the "as good as the best" choices).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export_gguf import load_ckpt, load_rounded  # noqa: E402


@torch.no_grad()
def perplexity(model, data, T, batch=8):
    n_win = (len(data) - 1) // T
    tot, cnt, correct = 0.0, 0, 0
    for i in range(0, n_win, batch):
        idx = range(i, min(n_win, i + batch))
        x = torch.from_numpy(np.stack([data[j * T:j * T + T + 1] for j in idx]).astype(np.int64))
        logits = model(x[:, :-1])[0]
        y = x[:, 1:]
        tot += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                     reduction="sum"))
        correct += int((logits.argmax(-1) == y).sum())
        cnt += y.numel()
    return {"tokens": cnt, "nll": tot / cnt, "ppl": math.exp(tot / cnt),
            "next_token_acc": correct / cnt}


def summarize(z, k):
    """z: (N, E) router logits as float64 numpy."""
    E = z.shape[1]
    zs = -np.sort(-z, axis=1)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ps = -np.sort(-p, axis=1)
    w = ps[:, :k] / ps[:, :k].sum(1, keepdims=True)
    r = min(E, k + 2)
    p1, p2 = ps[:, 0], ps[:, 1]
    gap_k = zs[:, k - 1] - zs[:, k] if k < E else np.full(len(z), np.inf)
    gap_1k = zs[:, 0] - zs[:, k - 1]
    within1 = (zs[:, 0:1] - zs[:, 1:k]) < 1.0
    q = lambda a, v: float(np.quantile(a, v))
    return {
        "tokens": int(len(z)),
        "p1_q10": q(p1, 0.1), "p1_median": q(p1, 0.5), "p1_q90": q(p1, 0.9),
        "p1_mean": float(p1.mean()),
        "p1_gt_0.5": float((p1 > 0.5).mean()), "p1_gt_0.9": float((p1 > 0.9).mean()),
        "p1_over_p2_median": q(p1 / p2, 0.5), "p1_over_p2_gt_2": float((p1 / p2 > 2).mean()),
        "mean_p_by_rank": [float(v) for v in ps[:, :r].mean(0)],
        "mean_weight_by_rank": [float(v) for v in w.mean(0)],
        "topk_mass_mean": float(ps[:, :k].sum(1).mean()),
        "gap_k_k1_median": q(gap_k, 0.5), "gap_k_k1_lt_0.5": float((gap_k < 0.5).mean()),
        "gap_k_k1_lt_1": float((gap_k < 1.0).mean()),
        "gap_1_k_median": q(gap_1k, 0.5),
        "ranks2k_within_1_logit": float(within1.mean()) if k > 1 else 0.0,
        "router_logit_std": float(z.std()),
    }


@torch.no_grad()
def router_stats(model, data, T, n_windows, batch=8):
    cfg = model.cfg
    n_win = min(n_windows, (len(data) - 1) // T)
    per_layer = [[] for _ in range(cfg.n_layer)]
    loads = np.zeros((cfg.n_layer, cfg.n_expert))
    for i in range(0, n_win, batch):
        idx = range(i, min(n_win, i + batch))
        x = torch.from_numpy(np.stack([data[j * T:j * T + T] for j in idx]).astype(np.int64))
        _, rls, idss = model(x)
        for l, (rl, ids) in enumerate(zip(rls, idss)):
            per_layer[l].append(rl.double().numpy())
            loads[l] += np.bincount(ids.reshape(-1).numpy(), minlength=cfg.n_expert)
    k = cfg.n_expert_used
    zl = [np.concatenate(a) for a in per_layer]
    loads /= loads.sum(1, keepdims=True)
    return {"layers": [summarize(z, k) for z in zl], "all": summarize(np.concatenate(zl), k),
            "load_max_over_mean": [float(v) for v in loads.max(1) * cfg.n_expert],
            "load_min_over_mean": [float(v) for v in loads.min(1) * cfg.n_expert]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--data", default="data")
    ap.add_argument("--stat-windows", type=int, default=128)
    ap.add_argument("--max-ppl-windows", type=int, default=0, help="0 = all")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, cfg, ck = load_ckpt(args.ckpt)
    if args.gguf:
        load_rounded(model, cfg, args.gguf)
    res = {"ckpt": args.ckpt, "gguf": args.gguf, "step": ck["step"],
           "train_elapsed_s": ck.get("elapsed_s"), "config": cfg.to_dict()}
    for split in ("valid", "test"):
        d = np.fromfile(os.path.join(args.data, split + ".u16"), dtype="<u2")
        if args.max_ppl_windows:
            d = d[: args.max_ppl_windows * cfg.n_ctx + 1]
        res[split] = perplexity(model, d, cfg.n_ctx)
        print(split, json.dumps(res[split]), flush=True)
    d = np.fromfile(os.path.join(args.data, "test.u16"), dtype="<u2")
    res["router"] = router_stats(model, d, cfg.n_ctx, args.stat_windows)
    print(json.dumps(res["router"]["all"], indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
