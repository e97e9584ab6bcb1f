#!/usr/bin/env bash
# Expert-parallel decode measured at R = 1, 2, 4 on this machine, beside what route-sim's cost
# model predicts for the same model, trace, ranks and batch sizes (docs/distributed.md,
# "Cost model against the runtime"). Needs an MPI build (scripts/install-deps.sh installs
# OpenMPI; ep_comm_bench is built with the dist tests).
#
#   scripts/ep-measure.sh MODEL TRACE OUTDIR
#
# MODEL: a GGUF whose experts match the trace (e.g. `lynx-moe synth --shape olmoe-1b-7b
# --layers 4 --type q8_0` with the 64x8 model's trace: 64 experts, 8 per token, 4 layers).
# TRACE: `generate --record-trace`; bench replays it so the synthetic model routes like the
# trained router. Environment (defaults): EP_RANKS ("1 2 4"), EP_BATCHES (1,4,16),
# EP_POLICIES (topk;lynx), EP_PASSES (3), EP_GEN (8), EP_CORES (nproc), LYNX_BIN,
# COMM_BENCH (build/release/bin/...), EP_REUSE=1 (predict again from OUTDIR's measurements,
# without measuring).
#
# What it does:
# 1. Link: ep_comm_bench at each R > 1 (the combine's reduce-scatter + all-gather, median
#    over 200 iterations); latency per message and bandwidth per rank fitted to route-sim's
#    all-reduce formula, 2 ceil(log2 R) lat + 2 (R-1)/R T H 4 / bw, from T = 1 and T = 32.
# 2. Decode: EP_PASSES passes; each pass runs `mpirun -np R lynx-moe bench --expert-parallel`
#    for every R, in an order rotated per pass (the machine is shared: its load drifts, and
#    interleaving spreads the drift over the R values); per (R, policy, B) the median TPOT.
# 3. The model, parametrised for this machine from the R = 1 runs: memory bandwidth per rank
#    = bench's measured read bandwidth x min(1, cores / R) (ranks beyond the cores share them
#    in time), dense time per step = R = 1's TPOT minus its expert time, x max(1, R / cores)
#    (attention is replicated: every rank computes it), and a compute roof per rank
#    (--rank-gflops) = the expert GFLOP/s the R = 1 runs achieved at the largest batch (2 x
#    assignments x expert parameters / expert compute time, median), x min(1, cores / R). route-sim
#    --ranks R --measured prints measured vs predicted per policy and batch; a second table
#    without the compute roof shows the streaming-only model.
set -euo pipefail
model=$1 trace=$2 out=$3
bin=${LYNX_BIN:-build/release/bin/lynx-moe}
comm=${COMM_BENCH:-$(dirname "$bin")/ep_comm_bench}
ranks=${EP_RANKS:-1 2 4}
batches=${EP_BATCHES:-1,4,16}
policies=${EP_POLICIES:-topk;lynx}
passes=${EP_PASSES:-3}
gen=${EP_GEN:-8}
cores=${EP_CORES:-$(nproc)}
for f in "$model" "$trace" "$bin" "$comm"; do
  [[ -e $f ]] || { echo "ep-measure: $f not found" >&2; exit 2; }
done
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No --mca mpi_yield_when_idle 1: the step's collectives are waited for by lynx-moe's own loop,
# which yields and sleeps (src/dist/comm.cc); OpenMPI's yield inside every idle MPI_Test
# descheduled even a lone rank for milliseconds per collective on this loaded machine.
mpi=(mpirun --oversubscribe --bind-to none)
hidden=$("$bin" inspect -m "$model" 2>/dev/null | sed -nE 's/^embedding length *([0-9]+).*/\1/p' | head -1)
hidden=${hidden:-2048}

if [[ ${EP_REUSE:-0} != 1 ]]; then
echo "# ep-measure $(date -u +%FT%TZ) on $(hostname), $cores cores" | tee "$out/log.txt"
uptime | tee -a "$out/log.txt"

# 1. Link latency and bandwidth per R.
: >"$out/link.txt"
for r in $ranks; do
  ((r > 1)) || continue
  "${mpi[@]}" -np "$r" "$comm" "$hidden" 8 64 200 >"$out/comm-r$r.md"
  python3 - "$out/comm-r$r.md" "$r" "$hidden" >>"$out/link.txt" <<'EOF'
import math, sys
path, R, H = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = {}
for line in open(path):
    c = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(c) >= 3 and c[0].isdigit():
        t[int(c[0])] = float(c[2]) * 1e-6  # rs+ag column, seconds
rounds = 2 * math.ceil(math.log2(R))
lat = t[1] / rounds
vol = 2 * (R - 1) / R * (32 - 1) * H * 4
bw = vol / max(t[32] - t[1], 1e-9)
print(R, f"{lat * 1e6:.2f}", f"{bw / 1e9:.3f}")
EOF
done
echo "link (R, latency us, GB/s): $(tr '\n' ';' <"$out/link.txt")" | tee -a "$out/log.txt"

# 2. Decode, interleaved passes.
args=(-m "$model" --routing-trace "$trace" --batch "$batches" --routing "$policies"
  --threads 1 --gen "$gen" --prompt 4 -r 1 -o json --expert-parallel)
read -ra order <<<"$ranks"
for ((p = 1; p <= passes; ++p)); do
  for r in "${order[@]}"; do
    echo "ep-measure: pass $p, R = $r ($(uptime | sed 's/.*load/load/'))" | tee -a "$out/log.txt"
    "${mpi[@]}" -np "$r" "$bin" bench "${args[@]}" --save-json "$out/ep-r$r-p$p.json" \
      >/dev/null 2>>"$out/bench-stderr.txt"
  done
  order=("${order[@]:1}" "${order[0]}")  # rotate
done
uptime | tee -a "$out/log.txt"
fi

# Expert parameters (for the compute roof): bytes per expert and layer over the dominant
# weight type's bytes per parameter.
read -r k_used moe_layers expert_params < <("$bin" inspect -m "$model" 2>/dev/null | python3 -c '
import re, sys
t = sys.stdin.read()
layers = int(re.search(r"^layers\s+(\d+)", t, re.M).group(1))
k = int(re.search(r"^experts\s+\d+, (\d+) per token", t, re.M).group(1))
m = re.search(r"^bytes per expert\s+([\d.]+) (KiB|MiB|GiB)", t, re.M)
per = float(m.group(1)) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)] / layers
types = re.findall(r"^\s+(\w+)\s+\d+ tensors\s+[\d.]+ \w+\s+([\d.]+)%", t, re.M)
wt = max(types, key=lambda x: float(x[1]))[0]
bpp = {"f32": 4, "f16": 2, "bf16": 2, "q8_0": 34 / 32, "q4_0": 18 / 32}.get(wt, 1)
print(k, layers, per / bpp)')

# Medians per (R, policy, B) as route-sim --measured CSV; the R = 1 parameters.
python3 - "$out" "$ranks" "$passes" "$k_used" "$moe_layers" "$expert_params" \
  >"$out/params.txt" <<'EOF'
import glob, json, statistics, sys
out, ranks, passes = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
k, L, params = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
med = statistics.median
bw, dense, gflops = [], [], []
for r in ranks:
    rows = {}
    for p in range(1, passes + 1):
        d = json.load(open(f"{out}/ep-r{r}-p{p}.json"))
        if r == "1":
            bw.append(max(d["peak_read_bandwidth_gbps"].values()))
        for row in d["rows"]:
            rows.setdefault((row["policy"], row["batch"]), []).append(row)
    with open(f"{out}/measured-r{r}.csv", "w") as f:
        f.write("policy,batch,ranks,tpot_ms,tpot_min,tpot_max,max_rank_compute_ms,"
                "max_rank_comm_ms,busiest_rank_share\n")
        for (pol, b), rs in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            t = [x["tpot_ms"] for x in rs]
            f.write(f"\"{pol}\",{b},{r},{med(t):.3f},{min(t):.3f},{max(t):.3f},"
                    f"{med(x.get('max_rank_compute_ms', 0) for x in rs):.3f},"
                    f"{med(x.get('max_rank_comm_ms', 0) for x in rs):.3f},"
                    f"{med(x.get('busiest_rank_share', 1) for x in rs):.3f}\n")
            if r == "1":
                dense.extend(x["tpot_ms"] - x["expert_ms"] for x in rs)
                if b == max(bb for _, bb in rows):  # where compute, not streaming, dominates
                    gflops.extend(2 * b * k * L * params / (x["max_rank_compute_ms"] * 1e-3) / 1e9
                                  for x in rs if x.get("max_rank_compute_ms", 0) > 0)
print(f"{med(bw):.3f} {med(dense):.3f} {med(gflops):.3f}")
EOF
read -r bw dense gflops <"$out/params.txt"
{
  echo
  echo "R = 1 (medians): read bandwidth $bw GB/s, time outside the experts $dense ms per step," \
    "expert compute $gflops GFLOP/s ($expert_params parameters per expert, k $k_used, $moe_layers layers)"
} | tee -a "$out/log.txt"

# 3. Predicted vs measured, per R.
: >"$out/result.md"
for r in $ranks; do
  read -r rbw rdense rgf < <(python3 -c "c=$cores; r=$r; print($bw*min(1, c/r), $dense*max(1, r/c), $gflops*min(1, c/r))")
  lat=0.5 lbw=10
  if ((r > 1)); then read -r _ lat lbw < <(grep "^$r " "$out/link.txt"); fi
  {
    echo
    echo "### R = $r: memory bandwidth per rank $rbw GB/s, compute $rgf GFLOP/s, dense $rdense ms, link $lat us, $lbw GB/s"
    echo
    sim=("$bin" route-sim --trace "$trace" -m "$model" --routing "$policies" --ranks "$r"
      --placement contiguous --mem-bw "$rbw" --dense-ms "$rdense" --link-bw "$lbw"
      --link-lat "$lat" --measured "$out/measured-r$r.csv")
    "${sim[@]}" --rank-gflops "$rgf"
    echo
    echo "Streaming only (no compute roof):"
    echo
    "${sim[@]}" | grep '^|'
    echo
    echo "Measured spread (min / median / max over $passes passes) and the busiest rank:"
    echo
    echo '| policy | B | TPOT min | median | max | max compute ms | max comm ms | busiest share |'
    echo '|---|--:|--:|--:|--:|--:|--:|--:|'
    tail -n +2 "$out/measured-r$r.csv" | tr -d '"' |
      awk -F, '{printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1,$2,$5,$4,$6,$7,$8,$9}'
  } | tee -a "$out/result.md"
done
echo "ep-measure: tables in $out/result.md"
