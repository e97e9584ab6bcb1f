#!/usr/bin/env bash
# Browser test of the chat page (docs/serving.md, "Chat page"): synthesizes a tiny model that
# carries Qwen3's released chat template, starts `lynx-moe serve` on a free loopback port with
# an API key, and drives the page at / in Debian's chromium (headless, through playwright-core
# from npm; test.mjs says what it checks). Exits non-zero on failure, 77 (skip) only when
# chromium, node or npm is missing or playwright-core cannot be installed (offline machine);
# scripts/install-deps.sh installs chromium.
# Usage: scripts/e2e-chatpage/run.sh [path/to/lynx-moe]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:-$here/../../build/release/bin/lynx-moe}"
chromium="${CHROMIUM:-$(command -v chromium || true)}"
[[ -n "$chromium" && -x "$chromium" ]] || { echo "skip: chromium not found"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "skip: node/npm not found"; exit 77; }
command -v curl >/dev/null || { echo "skip: curl not found"; exit 77; }
if [[ ! -d "$here/node_modules/playwright-core" ]]; then
  (cd "$here" && npm ci --no-audit --no-fund --silent) || { echo "skip: npm ci failed"; exit 77; }
fi

work="$(mktemp -d)"
pid=""
cleanup() { [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
# Qwen3's template: <think> blocks, which the server returns as reasoning_content.
"$bin" synth --shape tiny-moe --layers 1 --vocab 300 -o "$work/model.gguf" \
  --chat-template "$here/../../tests/template/templates/Qwen-Qwen3-0.6B.jinja" >/dev/null 2>&1

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
key="e2e-key"
# A context long enough for the answer test.mjs stops halfway.
"$bin" serve -m "$work/model.gguf" --port "$port" --api-key "$key" -t 1 --max-batch 4 -c 32768 \
  --model-name tiny --routing "lynx:alpha=3,beta=4" 2>"$work/serve.log" &
pid=$!
url="http://127.0.0.1:$port"
for _ in $(seq 1 200); do
  curl -sf "$url/health" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log"; echo "FAIL: server exited"; exit 1; }
  sleep 0.05
done

fail() { echo "FAIL: $*"; cat "$work/serve.log"; exit 1; }
CHROMIUM="$chromium" node "$here/test.mjs" "$url" "$key" || fail "chat page checks"

kill -TERM "$pid"
wait "$pid" || fail "server exit status $?"
pid=""
grep -q "stopped" "$work/serve.log" || fail "no clean shutdown"
echo "e2e-chatpage: passed"
