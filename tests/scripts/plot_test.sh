#!/usr/bin/env bash
# plot_test.sh LYNX_MOE PYTHON3 SOURCE_DIR: scripts/plot.py draws each kind of figure from the
# JSON the commands of this build write (bench, route-sim, eval; loadgen's shape for slo), and
# each SVG parses and carries its titles; bad input is exit 2 with a message, not a traceback.
set -euo pipefail
bin=$1 py=$2 src=$3
plot="$py $src/scripts/plot.py"
model=$src/models/lynx-moe-8x2.gguf
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# has SVG TEXT...: the file parses as XML and every TEXT appears in it (text stays text).
has() {
  local f=$1
  shift
  "$py" -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' "$f" ||
    fail "$f is not XML"
  for t in "$@"; do grep -qF -- "$t" "$f" || fail "$f lacks '$t'"; done
}

"$bin" bench -m "$model" --batch 1,4 --gen 3 --prompt 4 -r 1 --threads 1 --bandwidth 10 \
  --routing 'topk;lynx' -o json --save-json "$d/bench.json" >/dev/null
$plot bench "$d/bench.json" "$d/bench.svg"
has "$d/bench.svg" "TPOT vs batch (lynx-moe-8x2, 1 threads)" "Distinct experts per layer" \
  "Tokens per expert, topk, batch 4" "Tokens per expert, lynx, batch 4"

"$bin" route-sim --routing 'topk;lynx' --experts 8 --k 2 --expert-bytes 1e6 --hidden 256 \
  --ranks 1,2,4 --batch 4,8 --steps 20 -o json >"$d/ep.json" 2>"$d/ep.txt"
$plot ep "$d/ep.json" "$d/ep.svg" --title "$(cat "$d/ep.txt")"
has "$d/ep.svg" "Predicted TPOT, all-reduce, B = 8" "Busiest rank's experts per layer, B = 4" \
  "route-sim EP: synthetic"

mkdir "$d/docs"
head -c 3000 "$src/docs/routing.md" >"$d/docs/a.txt"
head -c 3000 "$src/docs/serving.md" >"$d/docs/b.txt"
"$bin" eval -m "$model" --data "$d/docs" --batch 2 --max-tokens 24 --gen-prompts 0 \
  --code-lines 0 -t 1 --routing 'topk;lynx;oea:k0=1' -o json >"$d/eval.json" 2>/dev/null
$plot fronts lynx-moe-8x2 "$d/fronts.svg" "$d/eval.json" >"$d/fronts.md"
has "$d/fronts.svg" "lynx-moe-8x2, B = 2" "distinct experts cut (%)"
grep -q '^| lynx | 2 |' "$d/fronts.md" || fail "the fronts table has no lynx row"
grep -q '^| oea:k0=1 | 2 |' "$d/fronts.md" || fail "the fronts table has no oea row"

mkdir "$d/slo"
for spec in topk lynx; do
  for r in 1 2; do
    printf '{"rate": %s, "tpot_s": {"p99": 0.0%s}, "throughput": {"output_tokens_per_s": %s0}}' \
      "$r" "$r" "$r" >"$d/slo/$spec-r$r.json"
  done
done
$plot slo "$d/slo" 150 "$d/slo.svg"
has "$d/slo.svg" "P99 time per output token" "SLO 150 ms" "offered load (requests/s)"

# Bad input: exit 2 with a one-line message.
printf 'not json' >"$d/bad.json"
for args in "bench $d/bad.json $d/x.svg" "ep $d/eval.json $d/x.svg" "slo $d/docs 150 $d/x.svg" \
  "nosuch" "bench $d/nonexistent.json $d/x.svg"; do
  rc=0
  $plot $args >"$d/out" 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "plot.py $args: exit $rc, not 2: $(cat "$d/out")"
  grep -q '^plot.py: ' "$d/out" || fail "plot.py $args: no message: $(cat "$d/out")"
  ! grep -q Traceback "$d/out" || fail "plot.py $args: a traceback"
done
echo "plot_test: ok"
