#!/usr/bin/env bash
# Runs the libFuzzer targets for a bounded time each (default 60 s), seeded from tests/ (GGUF
# files) and docs/ (text for the tokenizers). Fails if a fuzzer finds a crash, leak or hang.
# Longer offline runs: docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {  # run TARGET MAX_LEN "EXTRA FLAGS" SEED_FILES...
  local bin=build/fuzz/bin/$1 corpus=$tmp/$1 max_len=$2 flags=$3
  shift 3
  [[ -x $bin ]] || { echo "run-fuzz: $bin not built (make fuzz)"; exit 1; }
  mkdir -p "$corpus"
  cp "$@" "$corpus"/ 2>/dev/null || true
  echo "== $(basename "$bin") ($secs s)"
  "$bin" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 $flags "$corpus" 2>&1 | tail -n 15
}
run fuzz_gguf 65536 "" $(find tests -name '*.gguf' -size -2M)
# Short texts: many more inputs per second than whole documents (seeds are cut to 4 KiB).
run fuzz_tokenizer 4096 "" docs/*.md scripts/demo-prompts.txt
# The server's request parser, seeded with a few valid bodies (byte 0 picks the endpoint).
seeds=$tmp/request-seeds
mkdir -p "$seeds"
printf '\x00{"prompt":"hi","max_tokens":4,"stop":["x"],"n":2,"seed":1}' >"$seeds/cmpl"
printf '\x00{"prompt":[[104,105]],"logprobs":2,"stream":true,"stream_options":{"include_usage":true}}' >"$seeds/ids"
printf '\x01{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"response_format":{"type":"text"}}' >"$seeds/chat"
run fuzz_request 4096 "-dict=fuzz/request.dict" "$seeds"/*
# The server's HTTP request parsing, seeded with raw requests (pipelined, chunked, HTTP/1.0);
# byte 0 sets the slice size the input is also fed in.
printf '\x07GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n' >"$seeds/http-get"
printf '\x01POST /v1/completions HTTP/1.1\r\nContent-Length: 14\r\nExpect: 100-continue\r\n\r\n{"prompt":"a"}' >"$seeds/http-cl"
printf '\x03POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n' >"$seeds/http-chunked"
printf '\x40GET / HTTP/1.0\r\nConnection: keep-alive\r\nX-A: a\tb\r\n\r\n' >"$seeds/http-10"
run fuzz_http 4096 "-dict=fuzz/http.dict" "$seeds"/http-*
