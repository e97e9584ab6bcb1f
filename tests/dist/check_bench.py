"""check_bench.py JSON R K LAYERS: the per-rank statistics of `bench --expert-parallel -o json`.

Every row has R rank entries; under topk every token keeps its k experts, so the tokens
routed to the ranks add up to batch x k x MoE layers per step; the busiest rank's share lies
in [1/R, 1]; compute and communication times are non-negative."""
import json
import sys

doc = json.load(open(sys.argv[1]))
R, K, L = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
assert doc["expert_parallel"]["ranks"] == R, doc["expert_parallel"]
rows = doc["rows"]
assert rows, "no rows"
for row in rows:
    ranks = row["ranks"]
    assert len(ranks) == R, (row["policy"], row["batch"], len(ranks))
    total = sum(r["tokens_per_step"] for r in ranks)
    if row["policy"] == "topk":
        want = row["batch"] * K * L
        assert abs(total - want) < 1e-6, (row["batch"], total, want)
    assert 1.0 / R - 1e-9 <= row["busiest_rank_share"] <= 1.0 + 1e-9, row["busiest_rank_share"]
    for r in ranks:
        assert r["compute_ms"] >= 0 and r["comm_ms"] >= 0 and r["expert_mb_per_step"] >= 0, r
print(f"check_bench: {len(rows)} rows, {R} ranks each, consistent")
