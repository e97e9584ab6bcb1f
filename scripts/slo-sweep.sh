#!/usr/bin/env bash
# SLO sweep: for each routing policy, serve the model, offer open-loop load at increasing
# request rates with `lynx-moe loadgen`, and report the highest rate whose P99 TPOT stays
# under the target (and whose requests all succeeded). Prints a markdown table; the raw
# loadgen JSON of every point is kept in OUT_DIR.
#
# Usage: scripts/slo-sweep.sh -m MODEL [-b BIN] [-p "topk;lynx:alpha=3,beta=4"]
#          [-r "2 4 8 16"] [-t TPOT_P99_MS] [-d SECONDS] [-a poisson|bursty]
#          [--prompt-len DIST] [--gen-len DIST] [--threads N] [--max-batch N] [-o OUT_DIR]
#          [--routing-trace TRACE]   (replay recorded router logits: real-shape synthetic models)
#          [--plot FILE.svg]         (P99 TPOT and throughput vs offered rate per policy)
#          [--ladder "SPEC@PCT;..."] [--slo-ms MS]
# A policy named "adaptive" is the adaptive arm: `serve --tpot-slo MS` (MS = --slo-ms, default
# the -t target) over --ladder (default: the server's default ladder); its rows add the share
# of decode steps run at each routing level during that point (from /metrics).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../build/release/bin/lynx-moe"
model="" policies="topk;lynx:alpha=3,beta=4" rates="2 4 8 16" target_ms=20 duration=10
arrivals=poisson plen="32:128" glen="64" threads=0 max_batch=16 out="" trace="" plot=""
ladder="" slo_ms=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -m) model="$2"; shift 2 ;;
    -b) bin="$2"; shift 2 ;;
    -p) policies="$2"; shift 2 ;;
    -r) rates="$2"; shift 2 ;;
    -t) target_ms="$2"; shift 2 ;;
    -d) duration="$2"; shift 2 ;;
    -a) arrivals="$2"; shift 2 ;;
    --prompt-len) plen="$2"; shift 2 ;;
    --gen-len) glen="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --max-batch) max_batch="$2"; shift 2 ;;
    -o) out="$2"; shift 2 ;;
    --routing-trace) trace="$2"; shift 2 ;;
    --plot) plot="$2"; shift 2 ;;
    --ladder) ladder="$2"; shift 2 ;;
    --slo-ms) slo_ms="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "usage: $0 -m MODEL [...]" >&2; exit 2; }
out="${out:-$(mktemp -d)}"
mkdir -p "$out"
pid=""
trap '[[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true' EXIT

# Decode steps per routing level so far, "level=count ..." (empty without the metric).
level_steps() {
  curl -sf "http://127.0.0.1:$1/metrics" |
    sed -n 's/^lynx_routing_level_steps_total{level="\([0-9]*\)".*} \([0-9]*\)$/\1=\2/p' | tr '\n' ' '
}

echo "| routing | rate (req/s) | completed | errors | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | out tok/s | experts vs exact | decode steps per level |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
IFS=';' read -ra specs <<<"$policies"
summary=()
for spec in "${specs[@]}"; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  arm=(--routing "$spec")
  if [[ "$spec" == adaptive ]]; then
    arm=(--tpot-slo "${slo_ms:-$target_ms}" ${ladder:+--routing-ladder "$ladder"})
  fi
  "$bin" serve -m "$model" --port "$port" "${arm[@]}" -t "$threads" --max-batch "$max_batch" \
    --max-queue 1024 --max-connections-per-ip 1024 --max-connections 1024 \
    ${trace:+--routing-trace "$trace"} 2>"$out/serve-${spec//[:,=]/_}.log" &
  pid=$!
  for _ in $(seq 1 1200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
  best="none"
  for rate in $rates; do
    f="$out/${spec//[:,=]/_}-r$rate.json"
    before=$(level_steps "$port")
    "$bin" loadgen --url "http://127.0.0.1:$port" --rate "$rate" --duration "$duration" \
      --arrivals "$arrivals" --prompt-len "$plen" --gen-len "$glen" -o json --out-file "$f" >/dev/null
    after=$(level_steps "$port")
    row=$(python3 - "$f" "$spec" "$target_ms" "$before" "$after" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); spec = sys.argv[2]; target = float(sys.argv[3]) / 1e3
count = lambda s: {int(k): int(v) for k, v in (x.split("=") for x in s.split())}
b, a = count(sys.argv[4]), count(sys.argv[5])
d = {k: a[k] - b.get(k, 0) for k in a}
levels = " ".join("L%d %.0f%%" % (k, 100 * v / sum(d.values())) for k, v in sorted(d.items())
                  if v) if sum(d.values()) else "-"
ms = lambda k, p: "%.2f" % (1e3 * r[k][p]) if r.get(k) else "-"
errors = sum(r["errors"].values())
ok = bool(r.get("tpot_s")) and errors == 0 and r["tpot_s"]["p99"] <= target
ratio = "%.3f" % r["distinct_experts_ratio"] if "distinct_experts_ratio" in r else "-"
print("%s|| %s | %g | %d | %d | %s | %s | %s | %s | %.1f | %s | %s |" % (
    "ok" if ok else "miss", spec, r["rate"], r["completed"], errors, ms("ttft_s", "p50"),
    ms("ttft_s", "p99"), ms("tpot_s", "p50"), ms("tpot_s", "p99"),
    r["throughput"]["output_tokens_per_s"], ratio, levels))
PY
)
    echo "${row#*||}"
    [[ "${row%%||*}" == ok ]] && best="$rate"
  done
  summary+=("$spec: highest rate with P99 TPOT <= ${target_ms} ms: $best req/s")
  kill -INT "$pid"; wait "$pid" || true; pid=""
done
echo
for s in "${summary[@]}"; do echo "- $s"; done
echo "(raw results in $out)"
if [[ -n "$plot" ]]; then
  /usr/bin/python3 "$here/plot.py" slo "$out" "$target_ms" "$plot"
  echo "(plot: $plot)"
fi
