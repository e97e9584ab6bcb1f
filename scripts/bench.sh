#!/usr/bin/env bash
# Regenerates the measurements of docs/benchmarks.md: decode speed per routing policy and
# batch size on synthetic models at real shapes (OLMoE-1B-7B: 64 experts / 8 per token;
# Mixtral-8x7B: 8 / 2) whose routers replay router logits recorded from the trained models
# in models/ on real text, next to this machine's measured memory read bandwidth.
#
#   bash scripts/bench.sh [quick]      # quick: fewer batch sizes and repetitions
#
# Writes build/bench/*.md|json|svg; docs/benchmarks.md quotes them. Needs ~19 GB of disk.
set -euo pipefail
cd "$(dirname "$0")/.."
make build >/dev/null
bin=build/release/bin/lynx-moe
out=build/bench
mkdir -p "$out"
threads=${LYNX_BENCH_THREADS:-2}
batches="1,2,4,8,16,32,64"
reps=3
gen=8  # decode steps per repetition: each is 20-500 ms here, so 8 x 3 reps is plenty
if [[ "${1:-}" == quick ]]; then batches="1,4,16,64"; reps=2; gen=8; fi

uptime | tee "$out/uptime-start.txt"

# 1. Routing traces from the trained models on real prompts (the bundled demo prompts,
#    batch 16, 48 tokens each; prefill and decode steps are both recorded).
trace() {  # model -> trace file
  local m=$1 t=$2
  if [[ ! -f $t ]]; then
    $bin generate -m "$m" -f scripts/demo-prompts.txt --parallel 16 -n 48 --temp 0.8 \
      --seed 3 --ignore-eos -q --record-trace "$t" >/dev/null
  fi
}
trace models/lynx-moe-64x8.gguf "$out/trace-64x8.lxrt"
trace models/lynx-moe-8x2.gguf "$out/trace-8x2.lxrt"

# 2. Synthetic models at real shapes (4 OLMoE layers; 2 Mixtral layers to fit memory).
synth() {  # shape layers type file
  [[ -f $4 ]] || $bin synth --shape "$1" --layers "$2" --type "$3" -o "$4" 2>/dev/null
}
for t in f16 q8_0 q4_0; do synth olmoe-1b-7b 4 $t "$out/olmoe4-$t.gguf"; done
for t in f16 q8_0 q4_0; do synth mixtral-8x7b 2 $t "$out/mixtral2-$t.gguf"; done

# 3. Benchmarks: every policy interleaved in one run per model.
pol64="topk;lynx;oea:k0=4;budget:m=24;ser:kmin=4,t=0.2;static-k:k=6"
pol8="topk;lynx;oea:k0=1;budget:m=4;ser:kmin=1,t=0.3;static-k:k=1"
# On the F16 64-expert model (the lynx-vs-topk target) also Lynx with a 1-logit window and
# with a per-layer window (docs/routing.md); the trained router's accuracy cost of each
# setting is in docs/evaluation.md.
pol64f16="$pol64;lynx:alpha=2,beta=2;lynx:alpha=3,window=1.33/0.67/0.67/1.33"
run() {  # name model trace policies
  $bin bench -m "$2" --routing-trace "$3" --routing "$4" --batch "$batches" \
    --threads "$threads" --prompt 8 --gen "$gen" -r "$reps" -o md \
    --save-json "$out/$1.json" | tee "$out/$1.md"
  /usr/bin/python3 scripts/plot.py bench "$out/$1.json" "$out/$1.svg"
}
run olmoe4-f16 "$out/olmoe4-f16.gguf" "$out/trace-64x8.lxrt" "$pol64f16"
run olmoe4-q8_0 "$out/olmoe4-q8_0.gguf" "$out/trace-64x8.lxrt" "$pol64"
run olmoe4-q4_0 "$out/olmoe4-q4_0.gguf" "$out/trace-64x8.lxrt" "$pol64"
for t in f16 q8_0 q4_0; do run mixtral2-$t "$out/mixtral2-$t.gguf" "$out/trace-8x2.lxrt" "$pol8"; done

# 4. Policy cost per routing call (one layer), N = 64 and 128, B = 1, 16, 64.
$bin route-sim --experts 64,128 --k 8 --batch 1,16,64 --steps 200 --repeats 5 \
  --routing "topk;lynx;oea:k0=4;budget:m=24;ser:kmin=4,t=0.2;static-k:k=6" | tee "$out/policy-cost.md"

uptime | tee "$out/uptime-end.txt"

# 5. The tables and plots into docs/benchmarks.md and docs/img (prose is written by hand).
bash scripts/bench-doc.sh
