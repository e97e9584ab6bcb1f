#!/usr/bin/env bash
# Requests per second of two server builds, interleaved: `ab` (apache2-utils) from 4 clients
# at /health with keep-alive, /health with a connection per request, and a streamed
# 16-token completion. Both servers run at once on the bundled model; each round measures A
# then B, and the medians (with ranges) over ROUNDS are printed.
#   scripts/http-rps.sh BIN_A BIN_B [ROUNDS]   (BIN = a lynx-moe binary)
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 rounds=${3:-5}
model=models/lynx-moe-8x2.gguf
command -v ab >/dev/null || { echo "http-rps: needs ab (apt install apache2-utils)"; exit 1; }
tmp=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
start() {  # start BIN PORT
  "$1" serve -m "$model" -t 1 --port "$2" >"$tmp/serve-$2.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$2/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "http-rps: server on port $2 did not start"; cat "$tmp/serve-$2.log"; exit 1
}
start "$a" 18301
start "$b" 18302
printf '{"prompt":"hello","max_tokens":16,"stream":true,"temperature":0,"ignore_eos":true}' \
  >"$tmp/stream.json"
rps() {  # rps PORT LOAD
  local url=http://127.0.0.1:$1
  case $2 in
    keepalive) ab -q -k -c 4 -n 20000 "$url/health" ;;
    connect) ab -q -c 4 -n 5000 "$url/health" ;;
    stream) ab -q -c 4 -n 200 -p "$tmp/stream.json" -T application/json "$url/v1/completions" ;;
  esac 2>/dev/null | awk '/Requests per second/ {print int($4)}'
}
for load in keepalive connect stream; do
  : >"$tmp/$load-a"
  : >"$tmp/$load-b"
done
for _ in $(seq "$rounds"); do
  for load in keepalive connect stream; do
    rps 18301 "$load" >>"$tmp/$load-a"
    rps 18302 "$load" >>"$tmp/$load-b"
  done
done
summary() { sort -n "$1" | awk '{v[NR]=$1} END {printf "%d (%d-%d)", v[int((NR+1)/2)], v[1], v[NR]}'; }
echo "| Load | A: $a | B: $b |"
echo "|---|---|---|"
for load in keepalive connect stream; do
  echo "| $load | $(summary "$tmp/$load-a") | $(summary "$tmp/$load-b") |"
done
