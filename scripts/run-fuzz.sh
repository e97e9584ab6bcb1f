#!/usr/bin/env bash
# Runs the libFuzzer targets for a bounded time each (default 60 s), seeded from tests/ (GGUF
# files) and docs/ (text for the tokenizers). Fails if a fuzzer finds a crash, leak or hang.
# Longer offline runs: docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # run TARGET MAX_LEN SEED_FILES...
  local bin=build/fuzz/bin/$1 corpus=$tmp/$1 max_len=$2
  shift 2
  [[ -x $bin ]] || { echo "run-fuzz: $bin not built (make fuzz)"; exit 1; }
  mkdir -p "$corpus"
  cp "$@" "$corpus"/ 2>/dev/null || true
  echo "== $(basename "$bin") ($secs s)"
  "$bin" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 "$corpus" 2>&1 | tail -n 15
}
run fuzz_gguf 65536 $(find tests -name '*.gguf' -size -2M)
# Short texts: many more inputs per second than whole documents (seeds are cut to 4 KiB).
run fuzz_tokenizer 4096 docs/*.md scripts/demo-prompts.txt
