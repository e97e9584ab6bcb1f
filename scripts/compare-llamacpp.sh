#!/usr/bin/env bash
# Decode tokens/s of lynx-moe next to llama.cpp's llama-batched-bench on the same GGUF files,
# same thread count, exact routing, interleaved pass by pass so that the machine's drift hits
# both engines alike; prints the median over passes and the ratio per file and batch size.
#
#   LLAMA_BATCHED_BENCH=/path/to/llama-batched-bench \
#     bash scripts/compare-llamacpp.sh [-p PASSES] [-b 1,2,4,8,16,32] [-t THREADS] [-g TOKENS] \
#       FILE.gguf...
#
# llama.cpp is not part of this project: build it yourself beside the project (CPU backend,
# native instructions) and point LLAMA_BATCHED_BENCH at the binary (its shared libraries must be
# findable, e.g. through LD_LIBRARY_PATH). Both engines prefill 32 tokens per sequence and decode
# -g tokens (default 16; at B=1 a 16-token decode lasts under 0.1 s, so on a noisy machine use
# 64); llama.cpp's S_TG column and lynx-moe's decode_tps are the same quantity (decode tokens of
# all sequences per second of decode time).
set -euo pipefail
cd "$(dirname "$0")/.."
passes=3
batches=1,2,4,8,16,32
threads=2
gen=16
while getopts "p:b:t:g:" opt; do
  case $opt in
    p) passes=$OPTARG ;;
    b) batches=$OPTARG ;;
    t) threads=$OPTARG ;;
    g) gen=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
llama=${LLAMA_BATCHED_BENCH:?set LLAMA_BATCHED_BENCH to a llama-batched-bench binary}
lynx=build/release/bin/lynx-moe
[[ -x $lynx ]] || { echo "build lynx-moe first (make build)" >&2; exit 1; }
[[ $# -gt 0 ]] || { echo "usage: $0 [-p N] [-b LIST] [-t N] [-g N] FILE.gguf..." >&2; exit 2; }

raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for pass in $(seq 1 "$passes"); do
  for f in "$@"; do
    echo "pass $pass $(basename "$f") $(uptime | sed 's/.*load/load/')" >&2
    "$llama" -m "$f" -c 4096 -b 512 -ub 512 -npp 32 -ntg "$gen" -npl "$batches" -t "$threads" \
      2>/dev/null | awk -F'|' -v f="$f" '$2 ~ /^ *32 *$/ {gsub(/ /,"",$4); gsub(/ /,"",$9);
        print f, "llama", $4, $9}' >>"$raw"
    "$lynx" bench -m "$f" --batch "$batches" --threads "$threads" --prompt 32 --gen "$gen" -r 1 \
      --bandwidth 1 -o csv 2>/dev/null | awk -F, -v f="$f" 'NR > 1 {print f, "lynx", $4, $6}' \
      >>"$raw"
  done
done

echo "| file | B | llama.cpp tok/s | lynx-moe tok/s | lynx-moe / llama.cpp | passes |"
echo "|---|--:|--:|--:|--:|--:|"
# Median per (file, engine, batch), then one row per (file, batch).
sort -k1,1 -k3,3n -k2,2 -k4,4g "$raw" | awk '
  function median(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  function flush() {
    if (key == "") return
    med[key] = median(vals, n); cnt[key] = n
  }
  { k = $1 SUBSEP $2 SUBSEP $3
    if (k != key) { flush(); key = k; n = 0 }
    vals[++n] = $4
    if (!(($1 SUBSEP $3) in seen)) { seen[$1 SUBSEP $3] = 1; order[++m] = $1 SUBSEP $3 } }
  END {
    flush()
    for (i = 1; i <= m; ++i) {
      split(order[i], p, SUBSEP)
      l = med[p[1] SUBSEP "llama" SUBSEP p[2]]; y = med[p[1] SUBSEP "lynx" SUBSEP p[2]]
      c = cnt[p[1] SUBSEP "lynx" SUBSEP p[2]]
      name = p[1]; sub(".*/", "", name)
      printf "| %s | %s | %.1f | %.1f | %.2f | %d |\n", name, p[2], l, y, (l > 0 ? y / l : 0), c
    }
  }'
