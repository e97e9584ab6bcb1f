#!/usr/bin/env bash
# Regenerates the tables of docs/evaluation.md: every routing policy at batch 1, 4, 16, 32 on
# both shipped models, on the held-out documents (data/eval, extracted from Debian-shipped
# text by scripts/train/extract_data.py, split by document; never seen in training).
#
#   bash scripts/eval.sh            # writes build/eval/{64x8,8x2}.md and .json
set -euo pipefail
cd "$(dirname "$0")/.."
make build >/dev/null
bin=build/release/bin/lynx-moe
[[ -d data/eval ]] || /usr/bin/python3 scripts/train/extract_data.py
out=build/eval
mkdir -p "$out"
common=(--data data/eval --batch 1,4,16,32 --max-tokens 256 --gen-prompts 32 --gen-tokens 32
        --code-lines 200 -t "${LYNX_EVAL_THREADS:-2}")
# Peers at comparable strength: OEA keeps half of k, budget gets about what lynx uses at
# B=16, SER drops weak secondary choices, static-k removes a quarter (64x8) / half (8x2).
$bin eval -m models/lynx-moe-64x8.gguf "${common[@]}" \
  --routing "topk;lynx;lynx:protect-top1=0;oea:k0=4;budget:m=24;ser:kmin=4,t=0.2;static-k:k=6" \
  -o json >"$out/64x8.json"
$bin eval -m models/lynx-moe-8x2.gguf "${common[@]}" \
  --routing "topk;lynx;lynx:protect-top1=0;oea:k0=1;budget:m=4;ser:kmin=1,t=0.3;static-k:k=1" \
  -o json >"$out/8x2.json"
for m in 64x8 8x2; do
  /usr/bin/python3 - "$out/$m.json" >"$out/$m.md" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"model {d['model']}, commit {d['commit']}, {d['documents']} documents\n")
print("| policy | B | PPL | acc | KL | dNLL/token [95% CI] | experts/layer | exact | mass kept | changed | greedy agree | code EM |")
print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for r in d["rows"]:
    dn = r["d_nll"]
    print(f"| {r['policy']} | {r['batch']} | {r['ppl']:.3f} | {r['accuracy']:.4f} | {r['kl']:.4f} | "
          f"{dn[0]:+.4f} [{dn[1]:+.4f}, {dn[2]:+.4f}] | {r['distinct_experts']:.2f} | "
          f"{r['distinct_exact']:.2f} | {r['mass_kept']:.3f} | {r['frac_changed']:.3f} | "
          f"{r['gen_agreement']:.3f} | {r['code_exact_match']:.3f} |")
PY
  echo "== $m"; cat "$out/$m.md"
done
