#!/usr/bin/env bash
# Logits of lynx-moe beside a reference engine's (ik_llama.cpp, llama.cpp) on the same GGUF
# files and the same token ids: per file, one sequence of N random ids below the vocabulary
# (seeded, the same for every engine), prefilled in one batch, logits at every position;
# lynx-moe through `lynx-moe logits --all` (its default path, or LYNX_ARGS, e.g.
# LYNX_ARGS=--exact-acts), each peer through scripts/peer-decode.cc --logits. No tokenizer and no
# BOS enter: both engines read the ids. Prints one markdown row per file and peer: the
# normalised mean squared error sum((l - p)^2) / sum(p^2) per position (p the peer's logits),
# its median and maximum over positions, the positions above 1e-3 (with random routers, a
# token whose k-th and (k+1)-th expert scores nearly tie can pick another expert in one engine's
# rounding: an isolated position of 1e-2 among ones of 1e-6), and how often the arg-maxes agree.
#
#   IK_LLAMA_DIR=/path/to/ik_llama.cpp [LLAMA_CPP_DIR=/path/to/llama.cpp] \
#     bash scripts/peer-logits.sh [-n TOKENS] [-t THREADS] [-e ik,llama] FILE.gguf...
#
# The peers are not part of this project and this script does not build them (see
# scripts/compare-llamacpp.sh for how to build them beside it). A peer that cannot load a file
# (an architecture it lacks) shows its error in the row. Issue 33's bar: NMSE under 1e-3 on
# F16/BF16 files.
set -euo pipefail
cd "$(dirname "$0")/.."
ntok=32
threads=2
engines=ik,llama
while getopts "n:t:e:" opt; do
  case $opt in
    n) ntok=$OPTARG ;;
    t) threads=$OPTARG ;;
    e) engines=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -gt 0 ]] || { echo "usage: $0 [-n TOKENS] [-t THREADS] [-e ik,llama] FILE.gguf..." >&2; exit 2; }
lynx=${LYNX_MOE:-build/release/bin/lynx-moe}
[[ -x $lynx ]] || { echo "build lynx-moe first (make build) or set LYNX_MOE" >&2; exit 1; }
for f in "$@"; do [[ -f $f ]] || { echo "no such file: $f" >&2; exit 1; }; done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source scripts/peer-lib.sh
active=()
for e in ${engines//,/ }; do
  case $e in
    ik)
      if [[ -n ${IK_LLAMA_DIR:-} ]]; then
        peer_compile ik "$IK_LLAMA_DIR" "${IK_LLAMA_LIB:-}" -DPEER_IK "$work" && active+=(ik)
      else
        echo "IK_LLAMA_DIR not set: ik_llama.cpp skipped" >&2
      fi
      ;;
    llama)
      if [[ -n ${LLAMA_CPP_DIR:-} ]]; then
        peer_compile llama "$LLAMA_CPP_DIR" "${LLAMA_CPP_LIB:-}" "" "$work" && active+=(llama)
      else
        echo "LLAMA_CPP_DIR not set: llama.cpp skipped" >&2
      fi
      ;;
    *) echo "unknown engine $e (ik, llama)" >&2; exit 2 ;;
  esac
done
[[ ${#active[@]} -gt 0 ]] || { echo "no reference engine to compare with" >&2; exit 1; }

echo "| file | architecture | engine | positions | NMSE median | NMSE max | positions over 1e-3 | same arg-max |"
echo "|---|---|---|--:|--:|--:|--:|--:|"
for f in "$@"; do
  name=$(basename "$f")
  meta=$("$lynx" inspect -m "$f" 2>/dev/null || true)
  arch=$(awk '$1 == "architecture" { print $2; exit }' <<<"$meta")
  if ! "$lynx" logits -m "$f" --tokens 0 --out "$work/probe.f32" -t "$threads" \
      >/dev/null 2>"$work/lynx.err"; then
    echo "| $name | ${arch:-?} | lynx-moe | - | $(head -1 "$work/lynx.err") | | | |"
    continue
  fi
  vocab=$(($(stat -c %s "$work/probe.f32") / 4))
  ids=$(awk -v n="$ntok" -v v="$vocab" 'BEGIN { srand(20261206); s = "";
    for (i = 0; i < n; ++i) s = s (i ? "," : "") int(rand() * v); print s }')
  # shellcheck disable=SC2086
  "$lynx" logits -m "$f" --tokens "$ids" --all --out "$work/lynx.f32" -t "$threads" \
    ${LYNX_ARGS:-} >/dev/null 2>"$work/lynx.err" || {
    echo "| $name | ${arch:-?} | lynx-moe | - | $(head -1 "$work/lynx.err") | | | |"
    continue
  }
  for e in "${active[@]}"; do
    if ! "$work/peer-$e" -m "$f" --tokens "$ids" --logits "$work/$e.f32" -t "$threads" \
        >"$work/$e.log" 2>&1; then
      why=$(grep -iE "error|cannot|failed" "$work/$e.log" | grep -v "^llm_load_print_meta" | head -1)
      echo "| $name | ${arch:-?} | $e | - | ${why:-$(tail -1 "$work/$e.log")} | | | |"
      continue
    fi
    /usr/bin/python3 - "$work/lynx.f32" "$work/$e.f32" "$vocab" "$name" "${arch:-?}" "$e" <<'PY'
import sys
import numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32).astype(np.float64)
b = np.fromfile(sys.argv[2], dtype=np.float32).astype(np.float64)
v = int(sys.argv[3])
if a.size != b.size or a.size % v:
    print(f"| {sys.argv[4]} | {sys.argv[5]} | {sys.argv[6]} | - | sizes differ: {a.size} / {b.size} | | | |")
    sys.exit(0)
a, b = a.reshape(-1, v), b.reshape(-1, v)
nmse = ((a - b) ** 2).sum(1) / np.maximum((b ** 2).sum(1), 1e-30)
same = (a.argmax(1) == b.argmax(1)).mean()
print(f"| {sys.argv[4]} | {sys.argv[5]} | {sys.argv[6]} | {a.shape[0]} | {np.median(nmse):.2e} | "
      f"{nmse.max():.2e} | {(nmse > 1e-3).sum()} | {100 * same:.0f}% |")
PY
  done
done
