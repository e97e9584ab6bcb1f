#!/usr/bin/env python3
"""Pools repeated SLO points (docs/serving.md section 9): ROOT/<round>/r<RATE>/<arm>/*-r<RATE>.json
are `lynx-moe loadgen` results (as scripts/slo-sweep.sh writes them, arms `topk` and
`adaptive`); prints, per rate, each arm's P99 TPOT over the pooled requests of all rounds
(nearest rank) with every round's own P99, the pooled median, the adaptive arm's distinct
experts against exact's, and for each target the highest rate held with every lower measured
rate held too.

  python3 scripts/slo-pool.py ROOT 100,150,200
"""
import json, glob, sys, math, collections
root = sys.argv[1]; targets = [float(x) for x in sys.argv[2].split(',')]
pool = collections.defaultdict(list); per = collections.defaultdict(list)
for f in sorted(glob.glob(root + "/*/r*/*/*-r*.json")):
    p = f.split("/"); rep, rate, arm = p[-4], float(p[-3][1:]), p[-2]
    d = json.load(open(f))
    t = [q["tpot_s"] for q in d["requests"] if q.get("status") == 200 and q.get("tpot_s") is not None]
    pool[(rate, arm)] += t
    per[(rate, arm)].append((d["tpot_s"]["p99"] * 1e3, d.get("distinct_experts_ratio", 1.0)))
def pct(v, q):
    v = sorted(v); return v[max(1, math.ceil(q * len(v))) - 1]
rates = sorted({k[0] for k in pool}); arms = ["topk", "adaptive"]
print("| rate (req/s) | exact: P99 pooled (rounds) | exact P50 | adaptive: P99 pooled (rounds) | adaptive P50 | adaptive experts vs exact (rounds) | requests per arm |")
print("|--:|--:|--:|--:|--:|--:|--:|")
for r in rates:
    cells = []
    for a in arms:
        if (r, a) in pool:
            v = pool[(r, a)]
            cells += ["%.0f (%s)" % (1e3 * pct(v, .99), " / ".join("%.0f" % x[0] for x in per[(r, a)])), "%.0f" % (1e3 * pct(v, .5))]
        else:
            cells += ["-", "-"]
    ex = " / ".join("%.2f" % x[1] for x in per.get((r, "adaptive"), []))
    n = max(len(pool.get((r, a), [])) for a in arms)
    print("| %g | %s | %s | %s | %s | %s | %d |" % (r, cells[0], cells[1], cells[2], cells[3], ex or "-", n))
print()
for T in targets:
    out = []
    for a in arms:
        # highest rate held with every lower measured rate held too
        ok = None
        for r in rates:
            if (r, a) not in pool: continue
            if 1e3 * pct(pool[(r, a)], .99) <= T: ok = r
            else: break
        out.append("%s: %s" % (a, ok))
    print("target %g ms: %s" % (T, ", ".join(out)))
