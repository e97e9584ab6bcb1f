#!/usr/bin/env bash
# Runs the libFuzzer targets for a bounded time each (default 60 s), seeded with the GGUF
# fixtures in tests/. Fails if the fuzzer finds a crash, leak or hang.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
bin=build/fuzz/bin/fuzz_gguf
[[ -x $bin ]] || { echo "run-fuzz: $bin not built (make fuzz)"; exit 1; }
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
find tests -name '*.gguf' -size -2M -exec cp {} "$corpus"/ \; 2>/dev/null || true
"$bin" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 "$corpus" 2>&1 | tail -n 15
