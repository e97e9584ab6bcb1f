#!/usr/bin/env python3
"""A joint coordinate search over cover's per-layer (tau, lambda) on validation documents.

docs/evaluation.md ("Tau per layer, a joint search, ..."): `lynx-moe calibrate` fits lambda per layer from single-layer
probes taken as additive; this search measures every candidate as a whole instead. From a
start setting it evaluates all neighbours (one layer's tau or lambda one grid step up or down,
or both) in one `lynx-moe eval` call, moves to the neighbour with the largest cut whose
perplexity change stays within the budget, and stops when no neighbour cuts 0.05 points more.
Measured on data/eval-valid; report the result on data/eval.

  python3 scripts/policy/cover_joint_search.py --budget 0.4 > search.log
"""
import argparse
import json
import subprocess

TAUS = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
LAMS = [0.02, 0.03, 0.045, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6]


def spec(s):
    return ("cover:tau=" + "/".join(str(TAUS[t]) for t, _ in s) + ",lambda=" +
            "/".join(str(LAMS[l]) for _, l in s))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/release/bin/lynx-moe")
    ap.add_argument("-m", "--model", default="models/lynx-moe-64x8.gguf")
    ap.add_argument("--data", default="data/eval-valid")
    ap.add_argument("--budget", type=float, default=0.4, help="perplexity change, percent")
    ap.add_argument("--tokens", default="128")
    ap.add_argument("--batch", default="16")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=12)
    a = ap.parse_args()
    cache = {}

    def run(states):
        todo = [s for s in states if spec(s) not in cache]
        if todo:
            cmd = [a.bin, "eval", "-m", a.model, "--data", a.data, "--batch", a.batch,
                   "--max-tokens", a.tokens, "--gen-prompts", "0", "--code-lines", "0", "-t", "2",
                   "-o", "json", "--routing", "topk;" + ";".join(spec(s) for s in todo)]
            rows = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                             check=True).stdout)["rows"]
            base = rows[0]
            for r in rows[1:]:
                cache[r["policy"]] = ((r["ppl"] / base["ppl"] - 1) * 100,
                                      (r["distinct_experts"] / r["distinct_exact"] - 1) * 100)
        return [cache[spec(s)] for s in states]

    # tau 0.5; lambda 0.06 / 0.15 / 0.15 / 0.08 (near cover's calibrated setting)
    cur = [(2, 3), (2, 6), (2, 6), (2, 4)][:a.layers]
    c = run([cur])[0]
    print(f"start {spec(cur)}: PPL {c[0]:+.3f}%, cut {c[1]:.2f}%", flush=True)
    for it in range(a.rounds):
        nb = []
        for l in range(len(cur)):
            t, la = cur[l]
            for dt, dl in [(0, 1), (0, -1), (1, 0), (-1, 0), (-1, 1), (1, 1)]:
                if 0 <= t + dt < len(TAUS) and 0 <= la + dl < len(LAMS):
                    s = list(cur)
                    s[l] = (t + dt, la + dl)
                    nb.append(s)
        res = run(nb)
        if c[0] > a.budget:  # over the budget: the cheapest neighbour
            cur = min(zip(nb, res), key=lambda x: x[1][0])[0]
        else:
            ok = [(r[1], s) for s, r in zip(nb, res) if r[0] <= a.budget]
            if not ok or min(ok)[0] >= c[1] - 0.05:
                break
            cur = min(ok)[1]
        c = cache[spec(cur)]
        print(f"{it + 1} {spec(cur)}: PPL {c[0]:+.3f}%, cut {c[1]:.2f}%", flush=True)
    print(f"final {spec(cur)}: PPL {c[0]:+.3f}%, cut {c[1]:.2f}%")


if __name__ == "__main__":
    main()
