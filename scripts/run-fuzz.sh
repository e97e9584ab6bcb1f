#!/usr/bin/env bash
# Runs the libFuzzer targets for a bounded time each (default 60 s), seeded from tests/ (GGUF
# files), docs/ (text for the tokenizers) and a few request bodies and raw HTTP requests.
# Fails if a fuzzer finds a crash, leak or hang. Each fuzzer is single-threaded, so they run
# two at a time (CI has two cores); each one's output is printed when it ends.
# Longer offline runs: docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pids=()
names=()
start() {  # start TARGET MAX_LEN "EXTRA FLAGS" SEED_FILES...
  local name=$1 bin=build/asan/bin/$1 corpus=$tmp/$1 max_len=$2 flags=$3
  shift 3
  [[ -x $bin ]] || { echo "run-fuzz: $bin not built (make asan)"; exit 1; }
  mkdir -p "$corpus" build/asan/artifacts
  cp "$@" "$corpus"/ 2>/dev/null || true
  "$bin" -max_total_time="$secs" -max_len="$max_len" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 \
    -artifact_prefix="build/asan/artifacts/$name-" $flags "$corpus" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
}
finish() {  # waits for every started fuzzer; prints the end of each one's output
  local failed=0 i
  for i in "${!pids[@]}"; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    echo "== ${names[$i]} ($secs s, exit $rc)"
    tail -n 15 "$tmp/${names[$i]}.log"
    ((rc == 0)) || failed=1
  done
  pids=()
  names=()
  ((failed == 0)) || { echo "run-fuzz: a fuzzer failed (its output is above)"; exit 1; }
}
# Seeds for the server's request parser (byte 0 picks the endpoint) and its HTTP parsing (byte 0
# sets the slice size the input is also fed in; pipelined, chunked, HTTP/1.0).
seeds=$tmp/request-seeds http=$tmp/http-seeds
mkdir -p "$seeds" "$http"
printf '\x00{"prompt":"hi","max_tokens":4,"stop":["x"],"n":2,"seed":1}' >"$seeds/cmpl"
printf '\x00{"prompt":[[104,105]],"logprobs":2,"stream":true,"stream_options":{"include_usage":true}}' >"$seeds/ids"
printf '\x01{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"response_format":{"type":"text"}}' >"$seeds/chat"
printf '\x00{"prompt":"hi","logit_bias":{"120":5,"7":false},"frequency_penalty":0.5,"presence_penalty":-1,"repeat_penalty":1.1,"repeat_last_n":8,"min_p":0.1,"typical_p":0.9,"top_k":40}' >"$seeds/sampling"
printf '\x01{"messages":[{"role":"user","content":"x"}],"logit_bias":[[120,-100],["ab",false]],"repetition_penalty":1.2}' >"$seeds/bias-array"
printf '\x07GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n' >"$http/get"
printf '\x01POST /v1/completions HTTP/1.1\r\nContent-Length: 14\r\nExpect: 100-continue\r\n\r\n{"prompt":"a"}' >"$http/cl"
printf '\x03POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\nT: 1\r\n\r\n' >"$http/chunked"
printf '\x40GET / HTTP/1.0\r\nConnection: keep-alive\r\nX-A: a\tb\r\n\r\n' >"$http/http10"

start fuzz_gguf 65536 "" $(find tests -name '*.gguf' -size -2M)
# Short texts: many more inputs per second than whole documents (seeds are cut to 4 KiB).
start fuzz_tokenizer 4096 "" docs/*.md scripts/demo-prompts.txt
finish
start fuzz_request 4096 "-dict=fuzz/request.dict" "$seeds"/*
start fuzz_http 4096 "-dict=fuzz/http.dict" "$http"/*
finish
