#!/usr/bin/env bash
# CPU time per decode step of lynx-moe and ik_llama.cpp on the same GGUF files, B distinct
# sequences: a figure that the machine's other work moves far less than tokens/s does. On a VM
# whose 2 vCPUs are shared with other sessions' builds and benchmarks, one engine's tokens/s
# differ up to 9x between passes (docs/benchmarks.md, issue 33), because what an engine gets
# is a share of the cores; the CPU time its threads spend on a step's work is what the engine
# itself costs. Per engine, file and B: two runs under `perf record -e task-clock`, with 1 and
# with G+1 decode steps (the same 32-id prompts, prefill included in both), and the user-space
# samples of the second minus the first, divided by G. Left out: kernel samples (page faults of
# the load) and the load's own user-space work (ik_llama.cpp's repack_q8_0, lynx-moe's
# repacking and its bandwidth / FMA probes, page copies), which differ between the two runs.
# What stays is the step's compute, the threads' spinning included (ik_llama.cpp's barrier
# spins; lynx-moe's pool spins ~10 us, then sleeps). It does not include time a thread waits
# descheduled, so it says what a step costs, not how fast it runs.
#
#   IK_LLAMA_DIR=/path/to/ik_llama.cpp bash scripts/decode-cpu.sh [-b 1,4] [-g 48] [-r 1]
#     [-t 2] [-V VOCAB] FILE.gguf...
#
# Prints one line per file, B, repetition and engine: tok/s of the G-step run (its own timer),
# CPU ms per step, and the load average. Needs perf (linux-perf) and jq; lynx-moe from
# build/release/bin/lynx-moe or LYNX_MOE; the ik_llama.cpp client is compiled as in
# scripts/compare-llamacpp.sh (scripts/peer-lib.sh), which this script does not build.
set -euo pipefail
cd "$(dirname "$0")/.."
batches=1,4
gen=48
reps=1
threads=2
vocab=32000
while getopts "b:g:r:t:V:" opt; do
  case $opt in
    b) batches=$OPTARG ;;
    g) gen=$OPTARG ;;
    r) reps=$OPTARG ;;
    t) threads=$OPTARG ;;
    V) vocab=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -gt 0 ]] || { echo "usage: $0 [-b LIST] [-g N] [-r N] [-t N] [-V N] FILE.gguf..." >&2; exit 2; }
lynx=${LYNX_MOE:-build/release/bin/lynx-moe}
[[ -x $lynx ]] || { echo "build lynx-moe first or set LYNX_MOE" >&2; exit 1; }
command -v perf >/dev/null || { echo "needs perf" >&2; exit 1; }
[[ -n ${IK_LLAMA_DIR:-} ]] || { echo "set IK_LLAMA_DIR" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source scripts/peer-lib.sh
peer_compile ik "$IK_LLAMA_DIR" "${IK_LLAMA_LIB:-}" -DPEER_IK "$work"
maxb=$(tr , '\n' <<<"$batches" | sort -n | tail -1)
awk -v n="$maxb" -v vocab="$vocab" 'BEGIN { srand(20261201)
  for (i = 0; i < n; ++i) { line = ""; for (j = 0; j < 32; ++j) line = line (j ? " " : "") int(rand() * vocab); print line } }' \
  >"$work/prompts"

user_ms() {  # user-space task-clock ms of a perf.data, less the load's own symbols
  perf report -i "$1" --no-children --sort dso,symbol -F period,dso,sym --stdio -g none 2>/dev/null |
    grep -v '^#' | grep '\[\.\]' |
    grep -v 'repack_q8_0\|interleave_group\|measure_\|FmaChainsT\|SumT\|File::prefetch\|memmove\|memset\|clear_page' |
    awk '{ s += $1 } END { printf "%.1f", s / 1e6 }'
}
run() {  # engine file B gen perf.data; prints tok/s
  rm -f "$5"
  if [[ $1 == lynx ]]; then
    perf record -q -e task-clock -o "$5" "$lynx" bench -m "$2" --batch "$3" --threads "$threads" \
      --prompt 32 --gen "$4" -r 1 --prompt-file "$work/prompts" --bandwidth 1 -o json 2>/dev/null |
      jq -r '.rows[0].decode_tps'
  else
    OMP_WAIT_POLICY=passive LD_LIBRARY_PATH="$(cat "$work/lib-ik")" perf record -q -e task-clock \
      -o "$5" "$work/peer-ik" -m "$2" -f "$work/prompts" -b "$3" -p 32 -g "$4" -t "$threads" --rtr \
      2>/dev/null | sed -n 's/.*decode_tps=\([0-9.]*\).*/\1/p'
  fi
}
for f in "$@"; do
  for b in ${batches//,/ }; do
    for r in $(seq 1 "$reps"); do
      order="lynx ik"
      ((r % 2 == 0)) && order="ik lynx"
      for e in $order; do
        run "$e" "$f" "$b" 1 "$work/p1.data" >/dev/null
        tps=$(run "$e" "$f" "$b" $((gen + 1)) "$work/p2.data")
        [[ -s $work/p1.data && -s $work/p2.data ]] || { echo "$e: no perf data for $f B=$b" >&2; continue; }
        a=$(user_ms "$work/p1.data")
        c=$(user_ms "$work/p2.data")
        echo "$(basename "$f" .gguf) B=$b rep=$r $e tok/s=$tps cpu_ms/step=$(awk -v a="$a" -v c="$c" \
          -v g="$gen" 'BEGIN { printf "%.1f", (c - a) / g }') load=$(cut -d' ' -f1 /proc/loadavg)"
      done
    done
  done
done
