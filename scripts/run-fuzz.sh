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

# The server's request parser, seeded with a few valid bodies (byte 0 picks the endpoint).
req=build/fuzz/bin/fuzz_request
if [[ -x $req ]]; then
  rcorpus=$(mktemp -d)
  trap 'rm -rf "$corpus" "$rcorpus"' EXIT
  printf '\x00{"prompt":"hi","max_tokens":4,"stop":["x"],"n":2,"seed":1}' >"$rcorpus/cmpl"
  printf '\x00{"prompt":[[104,105]],"logprobs":2,"stream":true,"stream_options":{"include_usage":true}}' >"$rcorpus/ids"
  printf '\x01{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"response_format":{"type":"text"}}' >"$rcorpus/chat"
  "$req" -max_total_time="$secs" -max_len=4096 -dict=fuzz/request.dict -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 "$rcorpus" 2>&1 | tail -n 15
fi
