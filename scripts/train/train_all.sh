#!/usr/bin/env bash
# Reproduces lynx-moe's shipped models from scratch on a CPU (see docs/models.md):
#   bash scripts/train/train_all.sh            # both models, one after the other
#   PARALLEL=1 bash scripts/train/train_all.sh # both at once (2 cores)
#   MODELS=8x2 bash scripts/train/train_all.sh # one of them
# Steps: data extraction -> tokenizer -> training (resumes from data/ckpt/ if stopped) ->
# GGUF export (F16) with the PyTorch-vs-NumPy-reference check (and the engine, if built) ->
# held-out perplexity and router statistics -> docs/models.md and the loss plot.
# STEPS (default 1000) and STOP_AT (stop early on the same schedule) pass through.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh --train
PY=/usr/bin/python3
MODELS=${MODELS:-"64x8 8x2"}
STEPS=${STEPS:-1000}
STOP=${STOP_AT:+--stop-at $STOP_AT}
NICE="nice -n 10"
ENGINE=${ENGINE:-}
if [[ -z "$ENGINE" ]]; then
  for b in build/release/bin/lynx-moe build/*/bin/lynx-moe; do
    if [[ -x "$b" ]]; then ENGINE=$b; break; fi
  done
fi

[[ -f data/train.jsonl ]] || $PY scripts/train/extract_data.py
[[ -f data/train.u16 ]] || $NICE $PY scripts/train/train_tokenizer.py

pids=()
for m in $MODELS; do
  cmd=($NICE $PY scripts/train/train_moe.py --preset "$m" --steps "$STEPS" $STOP)
  if [[ "${PARALLEL:-0}" == 1 ]]; then "${cmd[@]}" & pids+=($!); else "${cmd[@]}"; fi
done
for p in "${pids[@]}"; do wait "$p"; done

mkdir -p models
for m in $MODELS; do
  n=lynx-moe-$m
  $NICE $PY scripts/train/export_gguf.py --ckpt data/ckpt/$n.pt --out models/$n.gguf \
    --verify --verify-out scripts/train/logs/$n.verify.json ${ENGINE:+--engine $ENGINE}
  $NICE $PY scripts/train/router_stats.py --ckpt data/ckpt/$n.pt --gguf models/$n.gguf \
    --out scripts/train/logs/$n.stats.json
  if [[ -n "$ENGINE" ]]; then
    $PY scripts/train/check_tokenizer.py --model models/$n.gguf --bin "$ENGINE"
  fi
done
$PY scripts/train/make_report.py
