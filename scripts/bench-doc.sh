#!/usr/bin/env bash
# Writes the measured tables of build/bench (made by scripts/bench.sh) into docs/benchmarks.md,
# between the markers `<!-- bench:results -->` / `<!-- /bench:results -->` (and, when
# build/bench/cmp-llamacpp.md exists, `<!-- bench:llamacpp -->` / `<!-- /bench:llamacpp -->`),
# and copies the plots to docs/img. The prose around the markers is written by hand from
# these numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/bench
doc=docs/benchmarks.md

results=$(mktemp)
trap 'rm -f "$results"' EXIT
{
  echo "Run of $(date -u +%Y-%m-%d) by \`bash scripts/bench.sh\`; load average at start and end:"
  echo "\`$(cat "$out/uptime-start.txt" 2>/dev/null | sed 's/^ *//')\` /"
  echo "\`$(cat "$out/uptime-end.txt" 2>/dev/null | sed 's/^ *//')\`."
  echo
  for name in olmoe4-f16 olmoe4-q8_0 olmoe4-q4_0 mixtral2-f16 mixtral2-q8_0 mixtral2-q4_0; do
    [[ -s $out/$name.md ]] || continue
    case $name in
      olmoe4-*) shape="OLMoE-1B-7B shape (64 experts, 8 per token), 4 layers, trace of the trained 64x8 router" ;;
      mixtral2-*) shape="Mixtral-8x7B shape (8 experts, 2 per token), 2 layers, trace of the trained 8x2 router" ;;
    esac
    type=${name#*-}
    echo "### ${type^^}: $shape"
    echo
    echo "![$name](img/bench-$name.svg)"
    echo
    # The bench prints a progress line on stderr only; stdout is the header and the table.
    cat "$out/$name.md"
    echo
    cp "$out/$name.svg" "docs/img/bench-$name.svg"
  done
  if [[ -s $out/policy-cost.md ]]; then
    echo "### Policy cost per routing call (route-sim, one layer, synthetic Zipf-like logits)"
    echo
    cat "$out/policy-cost.md"
    echo
  fi
} >"$results"

# Replaces the lines between the begin and end markers of $doc by the file $2.
splice() {
  local tag=$1 file=$2 tmp
  grep -q "<!-- $tag -->" "$doc" || { echo "$doc lacks <!-- $tag -->" >&2; exit 1; }
  tmp=$(mktemp)
  awk -v b="<!-- $tag -->" -v e="<!-- /$tag -->" -v f="$file" '
    $0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
    $0 == e { skip = 0 }
    !skip { print }' "$doc" >"$tmp"
  mv "$tmp" "$doc"
}
splice bench:results "$results"
[[ -s $out/cmp-llamacpp.md ]] && splice bench:llamacpp "$out/cmp-llamacpp.md"
echo "updated $doc"
