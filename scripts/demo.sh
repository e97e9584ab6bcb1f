#!/usr/bin/env bash
# The main job on the bundled model: a batch of prompts generated together, with exact
# routing and with Lynx, printing the texts, tokens/s and distinct experts per layer.
# Uses the trained fine-grained model in models/ when present; otherwise a random-weight
# model at a small OLMoE-like shape (64 experts, 8 per token) that `lynx-moe synth` writes.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/release/bin/lynx-moe
model=${LYNX_DEMO_MODEL:-}
if [[ -z $model ]]; then
  for m in models/*-64x8*.gguf; do
    [[ -f $m ]] && model=$m && break
  done
fi
if [[ -z $model ]]; then
  model=build/models/tiny-moe-f16.gguf
  if [[ ! -f $model ]]; then
    mkdir -p build/models
    $bin synth --shape tiny-moe --type f16 --seed 7 -o "$model"
  fi
  echo "(no trained model in models/: using random weights, so the text is noise; the speed"
  echo " and expert counts are real)"
fi
$bin inspect -m "$model" | head -n 20
echo
$bin generate -m "$model" -f scripts/demo-prompts.txt --parallel 16 -n 32 \
  --routing "topk;lynx" "$@"
echo
echo "The bundled model (22 MB) fits in the CPU caches, so its step time is not bound by memory"
echo "bandwidth and fewer experts per step do not show up as speed here; the distinct-expert"
echo "counts do. Speed at real model sizes: docs/benchmarks.md (bash scripts/bench.sh)."
