#!/usr/bin/env bash
# Regenerates the accuracy fronts of docs/evaluation.md ("Fronts"): every routing policy over
# a sweep of its strength at B = 4, 16, 32 on the shipped models, on the held-out test
# documents (data/eval), and the cover setting that `lynx-moe calibrate` fits on the
# validation documents (data/eval-valid) at B = 16 for a +0.5% perplexity budget, as it is and
# with growth=0.75.
#
# Then subst (docs/evaluation.md "subst"): value=exact with lambda fitted per layer on the
# validation documents, and substitutes by expert similarity at cover's calibrated lambda.
#
#   bash scripts/fronts.sh   # build/fronts/<model>{-sweep,-calib,-growth,-subst}.json, .md, .svg,
#                            # -calib.txt, -subst-calib.txt, -sim.txt
# LYNX_FRONTS_MODELS="64x8" chooses the models (default "64x8 8x2"; 128x8 is the third),
# LYNX_FRONTS_TOKENS the tokens per document (128), LYNX_EVAL_THREADS the threads (2). Steps
# whose output exists are skipped (delete build/fronts to redo them).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/release/bin/lynx-moe
[[ -x $bin ]] || make build >/dev/null
[[ -d data/eval ]] || /usr/bin/python3 scripts/train/extract_data.py
[[ -d data/eval-valid ]] || /usr/bin/python3 scripts/train/valid_docs.py
out=build/fronts
mkdir -p "$out"
t=${LYNX_EVAL_THREADS:-2}
common=(--max-tokens "${LYNX_FRONTS_TOKENS:-128}" --gen-prompts 0 --code-lines 0
        -t "$t" -o json)

# Each peer from mild to strong. budget's m is absolute (experts per step), so its points
# move along the front with B.
declare -A sweep
sweep[64x8]="topk;lynx;lynx:alpha=2,beta=2;lynx:alpha=3,window=1.33/0.67/0.67/1.33;oea:k0=5;oea:k0=4;oea:k0=3;budget:m=40;ser:kmin=4,t=0.2;static-k:k=6;cover:lambda=0.03;cover;cover:lambda=0.1"
sweep[128x8]="topk;lynx;lynx:alpha=2,beta=2;oea:k0=6;oea:k0=5;oea:k0=4;oea:k0=3;budget:m=80;ser:kmin=4,t=0.2;static-k:k=6;cover:lambda=0.03;cover;cover:lambda=0.1"
sweep[8x2]="topk;lynx;lynx:alpha=2,beta=1;oea:k0=1;budget:m=6;budget:m=4;ser:kmin=1,t=0.3;static-k:k=1;cover:lambda=0.1;cover:lambda=0.2;cover:lambda=0.4;cover:lambda=0.8"

for m in ${LYNX_FRONTS_MODELS:-64x8 8x2}; do
  model=models/lynx-moe-$m.gguf
  [[ -s $out/$m-sweep.json ]] ||
    $bin eval -m "$model" --data data/eval --batch 4,16,32 "${common[@]}" --routing "${sweep[$m]}" \
      >"$out/$m-sweep.json"
  # Fitted on validation documents only, then measured on the test documents.
  [[ -s $out/$m-calib.txt ]] ||
    $bin calibrate -m "$model" --data data/eval-valid --budget 0.5% --batch 16 -t "$t" \
      --max-tokens "${LYNX_FRONTS_TOKENS:-128}" \
      -o "$out/$m-calib.txt" >"$out/$m-calib.log"
  [[ -s $out/$m-calib.json ]] ||
    $bin eval -m "$model" --data data/eval --batch 4,16,32 "${common[@]}" \
      --routing "topk;$(cat "$out/$m-calib.txt")" >"$out/$m-calib.json"
  # The same setting with strength growing with B: lambda x (B / 16)^0.75 (the exponent read
  # off the validation sweep of docs/evaluation.md); at B = 16 it is the calibrated setting.
  [[ -s $out/$m-growth.json ]] ||
    $bin eval -m "$model" --data data/eval "${common[@]}" --batch 4,32 \
      --routing "topk;$(cat "$out/$m-calib.txt"),growth=0.75" >"$out/$m-growth.json"
  # subst: the exact-mass gain (value=exact) calibrated like cover (its gains are larger than
  # cover's, so its ladder is higher), and substitutes chosen by similarity of the experts'
  # outputs on random inputs, at cover's calibrated lambda.
  [[ -s $out/$m-sim.txt ]] || $bin expert-sim -m "$model" -o "$out/$m-sim.txt" >/dev/null
  [[ -s $out/$m-subst-calib.txt ]] ||
    $bin calibrate -m "$model" --data data/eval-valid --budget 0.5% --batch 16 -t "$t" \
      --max-tokens "${LYNX_FRONTS_TOKENS:-128}" --policy subst --options value=exact \
      --ladder 0.1/0.15/0.2/0.3/0.5 -o "$out/$m-subst-calib.txt" >"$out/$m-subst-calib.log"
  cover_fit=$(cat "$out/$m-calib.txt")
  [[ -s $out/$m-subst.json ]] ||
    $bin eval -m "$model" --data data/eval --batch 4,16,32 "${common[@]}" \
      --routing "topk;$(cat "$out/$m-subst-calib.txt");subst:${cover_fit#cover:},sim=$out/$m-sim.txt,beta=0.3" \
      >"$out/$m-subst.json"
  /usr/bin/python3 scripts/plot.py fronts "lynx-moe-$m" "$out/$m.svg" "$out/$m-sweep.json" \
    "$out/$m-calib.json" "$out/$m-growth.json" "$out/$m-subst.json" >"$out/$m.md"
  echo "== $m (cover calibrated on data/eval-valid: $(cat "$out/$m-calib.txt"))"
  cat "$out/$m.md"
done
