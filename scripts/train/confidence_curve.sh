#!/usr/bin/env bash
# Router confidence vs what batch-aware routing saves (issue 20 part 3). For each weight
# snapshot of a model trained with --snapshot-every (scripts/train/train_128x8.sh) and for the
# shipped models: the router's confidence profile (router_stats.py: top-1 probability, top-k
# mass, entropy proxies per layer) and each policy family's distinct-expert cut at B = 16 over
# a strength sweep on the held-out documents (data/eval); confidence_plot.py then reads off
# each family's cut at a fixed perplexity cost and plots it against the router's confidence.
#
#   bash scripts/train/confidence_curve.sh        # build/confidence/{*.json, curve.md, curve.svg}
# MODEL (lynx-moe-128x8) names the snapshots, LYNX_CONF_TOKENS the tokens per document (96),
# LYNX_EVAL_THREADS the threads (2), COST the perplexity cost in % (0.5). Steps whose output
# exists are skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh --train
PY=/usr/bin/python3
bin=build/release/bin/lynx-moe
[[ -x $bin ]] || make build >/dev/null
[[ -d data/eval ]] || $PY scripts/train/extract_data.py
[[ -f data/test.u16 ]] || $PY scripts/train/train_tokenizer.py
name=${MODEL:-lynx-moe-128x8}
out=build/confidence
mkdir -p "$out"
t=${LYNX_EVAL_THREADS:-2}
# Each family from mild to strong (the sweep of scripts/fronts.sh, scaled to k = 8).
sweep="topk;lynx;lynx:alpha=2,beta=2;lynx:alpha=3,beta=3;oea:k0=6;oea:k0=5;oea:k0=4;oea:k0=3;cover:lambda=0.03;cover;cover:lambda=0.1;cover:lambda=0.2"

measure() {  # measure TAG GGUF CKPT
  local tag=$1 gguf=$2 ckpt=$3
  [[ -s $out/$tag.stats.json ]] ||
    nice $PY scripts/train/router_stats.py --ckpt "$ckpt" --gguf "$gguf" --stat-windows 32 \
      --max-ppl-windows 16 --out "$out/$tag.stats.json" >/dev/null
  [[ -s $out/$tag.eval.json ]] ||
    nice $bin eval -m "$gguf" --data data/eval --batch 16 --max-tokens "${LYNX_CONF_TOKENS:-96}" \
      --gen-prompts 0 --code-lines 0 -t "$t" -o json --routing "$sweep" >"$out/$tag.eval.json"
}

for snap in data/ckpt/"$name".step*.pt; do
  [[ -f $snap ]] || continue
  tag=$(basename "$snap" .pt)
  [[ -s $out/$tag.gguf ]] ||
    nice $PY scripts/train/export_gguf.py --ckpt "$snap" --out "$out/$tag.gguf" >/dev/null
  measure "$tag" "$out/$tag.gguf" "$snap"
done
for m in 64x8; do  # the shipped k = 8 model: from its checkpoint, else its committed stats
  ck=data/ckpt/lynx-moe-$m.pt
  if [[ -f $ck ]]; then
    measure "lynx-moe-$m" "models/lynx-moe-$m.gguf" "$ck"
  elif [[ -f scripts/train/logs/lynx-moe-$m.stats.json ]]; then
    cp -n scripts/train/logs/lynx-moe-$m.stats.json "$out/lynx-moe-$m.stats.json"
    measure "lynx-moe-$m" "models/lynx-moe-$m.gguf" "$ck"
  fi
done
$PY scripts/train/confidence_plot.py --cost "${COST:-0.5}" "$out" >"$out/curve.md"
cat "$out/curve.md"
