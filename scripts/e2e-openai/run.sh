#!/usr/bin/env bash
# End-to-end test: synthesizes a small model, starts `lynx-moe serve` on a free loopback port
# with an API key, drives it with curl and with the official OpenAI client (node), then
# stops it with SIGTERM and checks the shutdown. Exits non-zero on failure, 77 (skip) when
# node/npm are missing or the `openai` package cannot be installed (offline machine).
# Usage: scripts/e2e-openai/run.sh [path/to/lynx-moe]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-$here/../../build/release/bin/lynx-moe}"
command -v node >/dev/null && command -v npm >/dev/null || { echo "skip: node/npm not found"; exit 77; }
command -v curl >/dev/null || { echo "skip: curl not found"; exit 77; }
if [[ ! -d "$here/node_modules/openai" ]]; then
  (cd "$here" && npm ci --no-audit --no-fund --silent) || { echo "skip: npm ci failed"; exit 77; }
fi

work="$(mktemp -d)"
pid=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# Qwen2.5's released chat template: Hermes tool calls (<tool_call>{...}</tool_call>), which the
# server can force by grammar (tool_choice "required" / named in test.mjs).
"$bin" synth --shape tiny-moe --layers 1 --vocab 300 -o "$work/model.gguf" \
  --chat-template "$here/../../tests/template/templates/Qwen-Qwen2.5-7B-Instruct.jinja" >/dev/null 2>&1

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
key="e2e-key"
"$bin" serve -m "$work/model.gguf" --port "$port" --api-key "$key" -t 1 --max-batch 4 \
  --model-name tiny --routing "lynx:alpha=3,beta=4" 2>"$work/serve.log" &
pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 1 200); do
  curl -sf "$url/health" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log"; echo "FAIL: server exited"; exit 1; }
  sleep 0.05
done

fail() { echo "FAIL: $*"; cat "$work/serve.log"; exit 1; }
auth=(-H "Authorization: Bearer $key" -H "Content-Type: application/json")
# curl: non-streaming, streaming, 401, 400.
out=$(curl -sf "${auth[@]}" "$url/v1/completions" -d '{"model":"tiny","prompt":"hi","max_tokens":4,"ignore_eos":true}')
grep -q '"completion_tokens":4' <<<"$out" || fail "curl completion: $out"
out=$(curl -sfN "${auth[@]}" "$url/v1/chat/completions" \
  -d '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}')
[[ "$(tail -n 1 <<<"$out")" == "data: [DONE]" ]] || fail "curl stream did not end with [DONE]: $out"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models")
[[ "$code" == 401 ]] || fail "no key: got $code"
code=$(curl -s -o "$work/err.json" -w '%{http_code}' "${auth[@]}" "$url/v1/completions" -d '{"prompt":')
[[ "$code" == 400 ]] && grep -q '"error"' "$work/err.json" || fail "malformed JSON: got $code"
echo "ok   curl checks"

node "$here/test.mjs" "$url/v1" "$key" || fail "openai client checks"
# Fetch first, then grep: `curl | grep -q` under pipefail fails at random when grep exits
# early and curl gets SIGPIPE.
metrics=$(curl -sf "${auth[@]}" "$url/metrics") || fail "metrics fetch"
grep -q '^lynx_requests_finished_total{reason="length"}' <<<"$metrics" || fail "metrics"

# loadgen smoke: a second of open-loop load, every request completed.
"$bin" loadgen --url "$url" --api-key "$key" --rate 20 --duration 1 --prompt-len 8:16 \
  --gen-len 8 -o json --out-file "$work/load.json" >/dev/null || fail "loadgen"
python3 - "$work/load.json" <<'PY' || fail "loadgen result: $(cat "$work/load.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["sent"] > 0 and r["completed"] == r["sent"] and not r["errors"], r
assert 0 < r["tpot_s"]["p50"] <= r["tpot_s"]["p99"] and r["ttft_s"]["p99"] > 0, r
PY
echo "ok   loadgen"

kill -TERM "$pid"
wait "$pid" || fail "server exit status $?"
pid=""
grep -q "stopped" "$work/serve.log" || fail "no clean shutdown"
echo "e2e-openai: passed"
