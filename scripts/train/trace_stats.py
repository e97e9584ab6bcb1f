#!/usr/bin/python3
"""Router-confidence statistics of a recorded routing trace (any model lynx-moe runs).

  build/release/bin/lynx-moe generate -m MODEL.gguf -f PROMPTS --parallel 16 -n 64 \
      --ignore-eos -q --record-trace T.lxrt
  /usr/bin/python3 scripts/train/trace_stats.py T.lxrt [--decode-only] [--out T.stats.json]

Computes, from the raw router logits in the trace, the same numbers as router_stats.py does
for the project's own checkpoints (its summarize(): median top-1 probability, top-k mass, ...),
per layer and over all layers, so that a real model (OLMoE, Qwen, Mixtral after `lynx-moe
convert`) lands on the same axes as the trained snapshots in docs/models.md.

Trace format: src/analysis/trace.h (version 1). The statistics are of the router's softmax
over all N experts; a trace of a sigmoid router (DeepSeek-V3, GLM-4.5) is refused, because
its per-expert scores are not a distribution and "top-1 probability" is not defined for it.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from router_stats import summarize  # noqa: E402

HEADER = struct.Struct("<4sIIIIBBHf")  # 28 bytes, see src/analysis/trace.h
RECORD = struct.Struct("<III")
FLAG_PREFILL = 1


def read_trace(path, decode_only):
    """Returns (header dict, list of per-layer (T, N) float64 logit arrays)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER.size:
        raise ValueError(f"{path}: shorter than the 28-byte header")
    magic, version, n_layers, n_expert, k, gating, norm_topk, _, scale = HEADER.unpack_from(data)
    if magic != b"LXRT" or version != 1:
        raise ValueError(f"{path}: not a version-1 LXRT routing trace")
    if not (0 < k <= n_expert) or n_layers <= 0:
        raise ValueError(f"{path}: impossible header (layers {n_layers}, N {n_expert}, k {k})")
    if gating != 0:
        raise ValueError(f"{path}: sigmoid-gated router; the statistics here are defined for "
                         "softmax routers only")
    per_layer = [[] for _ in range(n_layers)]
    off = HEADER.size
    while off < len(data):
        if off + RECORD.size > len(data):
            raise ValueError(f"{path}: truncated record header at byte {off}")
        _, layer, t = RECORD.unpack_from(data, off)
        off += RECORD.size
        need = t + 4 * t * n_expert
        if layer >= n_layers or off + need > len(data):
            raise ValueError(f"{path}: bad or truncated record at byte {off - RECORD.size}")
        flags = np.frombuffer(data, np.uint8, t, off)
        z = np.frombuffer(data, "<f4", t * n_expert, off + t).reshape(t, n_expert)
        off += need
        if decode_only:
            z = z[(flags & FLAG_PREFILL) == 0]
        if len(z):
            per_layer[layer].append(z.astype(np.float64))
    head = {"n_layers": n_layers, "n_expert": n_expert, "n_expert_used": k,
            "norm_topk": bool(norm_topk), "weights_scale": scale}
    return head, [np.concatenate(a) if a else np.zeros((0, n_expert)) for a in per_layer]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--decode-only", action="store_true", help="skip prompt (prefill) tokens")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    try:
        head, zl = read_trace(args.trace, args.decode_only)
    except (OSError, ValueError) as e:
        print(f"trace_stats: {e}", file=sys.stderr)
        return 1
    zl = [z for z in zl if len(z)]
    if not zl:
        print(f"trace_stats: {args.trace}: no token rows", file=sys.stderr)
        return 1
    k = head["n_expert_used"]
    if not np.isfinite(np.concatenate(zl)).all():
        print(f"trace_stats: {args.trace}: non-finite logits", file=sys.stderr)
        return 1
    res = {"trace": args.trace, "decode_only": args.decode_only, **head,
           "layers": [summarize(z, k) for z in zl], "all": summarize(np.concatenate(zl), k)}
    a = res["all"]
    print(f"{args.trace}: N={head['n_expert']} k={k}, {a['tokens']} (token, layer) rows")
    print(f"top-1 p median {a['p1_median']:.3f} (mean {a['p1_mean']:.3f}), "
          f"top-k mass mean {a['topk_mass_mean']:.3f}, median p1/p2 "
          f"{a['p1_over_p2_median']:.2f}, renormalized top-1 weight mean "
          f"{a['mean_weight_by_rank'][0]:.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
