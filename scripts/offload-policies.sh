#!/usr/bin/env bash
# Routing policies on the expert tier (docs/offload.md): decode tokens/s, bytes read from the
# file per token and tier misses per step of each policy, every policy in a process of its own
# (a fresh, cold tier each, so no policy inherits another's slots), policies interleaved pass by
# pass, all inside one memory cgroup of SIZE bytes (page cache included). With a routing trace
# the routers replay recorded logits of a trained model, so that a random-weight file at a
# real shape routes like a trained one. With -i the tier's read backends (--expert-io) are
# crossed with the policies, each pair a row of its own ("topk/uring"), interleaved the same
# way.
#
#   sudo bash scripts/offload-policies.sh -M 2G -T trace.lxrt -r "topk;oea:k0=4" \
#     [-i "threads;uring"] [-b 1,4,16,32] [-p 2] [-g 16] [-P 32] [-t 2] [-x "extra bench flags"] \
#     FILE.gguf
#
# Prints a Markdown table: per policy and B, tok/s median (min-max over the passes), the ratio
# of medians to the first row's, disk MB per token, tier misses per step, the step's wait
# for reads, the readers' GB/s (bytes over the summed time of each read: per reader thread,
# per read in flight with io_uring) and its TPOT, and the limit: the step's disk bytes at the disk's bandwidth (4
# O_DIRECT streams of the same file, probed right before each bench run) plus the step's
# compute (TPOT less the wait), as a share of the TPOT reached (medians over the passes).
# Needs root and a memory cgroup controller (v1 or v2), like scripts/offload-bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=2G trace="" policies="topk;lynx" batches=1,4,16,32 passes=2 gen=16 prompt=32 threads=2
extra="" ios=""
while getopts "M:T:r:i:b:p:g:P:t:x:" o; do
  case $o in
    M) limit=$OPTARG ;;
    T) trace=$OPTARG ;;
    r) policies=$OPTARG ;;
    i) ios=$OPTARG ;;
    b) batches=$OPTARG ;;
    p) passes=$OPTARG ;;
    g) gen=$OPTARG ;;
    P) prompt=$OPTARG ;;
    t) threads=$OPTARG ;;
    x) extra=$OPTARG ;;
    *) sed -n 2,20p "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -eq 1 ]] || { echo "one model file expected" >&2; exit 2; }
file=$1
lynx=${LYNX_MOE:-build/release/bin/lynx-moe}
command -v jq >/dev/null || { echo "needs jq (scripts/install-deps.sh)" >&2; exit 1; }
bytes=$(numfmt --from=iec "${limit%B}")
out=$(mktemp)
# shellcheck source=scripts/memory-cgroup.sh
source scripts/memory-cgroup.sh
cleanup() {
  memory_cgroup_leave
  rm -f "$out"
}
trap cleanup EXIT
memory_cgroup lynx-policies "$bytes"
IFS=';' read -ra pols <<<"$policies"
iov=("")
[[ -n $ios ]] && IFS=';' read -ra iov <<<"$ios"
targs=()
[[ -n $trace ]] && targs=(--routing-trace "$trace")
# The disk's read rate now: 4 streams of 64 MiB with O_DIRECT at spread offsets of the file.
probe_disk() {
  local size blocks t0 t1 i
  size=$(stat -c %s "$file")
  blocks=$((size / 4194304 - 16))
  t0=$(date +%s.%N)
  for i in 0 1 2 3; do
    dd if="$file" of=/dev/null bs=4M count=16 iflag=direct \
      skip=$(((RANDOM * 32768 + RANDOM) % blocks)) 2>/dev/null &
  done
  wait
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{ printf "%.3f", 4 * 64 * 1048576 / ($2 - $1) / 1e9 }'
}
for ((pass = 1; pass <= passes; pass++)); do
  for pol in "${pols[@]}"; do
    for io in "${iov[@]}"; do
      label=$pol iargs=()
      [[ -n $io ]] && label="$pol/$io" iargs=(--expert-io "$io")
      sync
      echo 3 >/proc/sys/vm/drop_caches
      bw=$(probe_disk)
      # shellcheck disable=SC2086  # extra bench flags, word-split on purpose
      if ! "$lynx" bench -m "$file" --batch "$batches" --threads "$threads" --prompt "$prompt" \
        --gen "$gen" -r 1 --bw-sizes 128 --routing "$pol" "${targs[@]}" "${iargs[@]}" $extra \
        -o json 2>/dev/null | jq -r --arg p "$label" --arg bw "$bw" '.rows[] | [$p, .batch,
          .decode_tps, (.disk_bytes_per_token // 0), (.tier_misses_per_step // 0),
          (.tier_wait_ms_per_step // 0), .tpot_ms, ($bw | tonumber),
          (.tier_read_gbps // 0)] | @tsv' >>"$out"; then
        echo "pass $pass, $label: bench failed" >&2
      fi
      echo "pass $pass, $label done (disk $bw GB/s before it; load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    done
  done
done
first=${pols[0]}
[[ -n ${iov[0]} ]] && first="${pols[0]}/${iov[0]}"
echo "| policy | B | tok/s median (min-max) | / $first | disk MB/token | tier misses/step | wait ms/step (min-max) | read GB/s | TPOT ms | disk GB/s | limit ms | limit / TPOT |"
echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
awk -F'\t' -v first="$first" '
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function lo(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
  function hi(s,   a, n, i, m) { n = split(s, a, " "); m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
  {
    k = $1 SUBSEP $2
    if (!(k in tps)) { order[++n] = k }
    tps[k] = tps[k] " " $3; disk[k] = disk[k] " " $4; miss[k] = miss[k] " " $5
    wait_[k] = wait_[k] " " $6; tpot[k] = tpot[k] " " $7; bw[k] = bw[k] " " $8
    rd[k] = rd[k] " " $9
    # this run: the disk bytes of a step at the probed rate, plus the step less its wait
    lim = ($4 * $2) / ($8 * 1e9) * 1e3 + ($7 - $6)
    limit[k] = limit[k] " " lim; share[k] = share[k] " " lim / $7
  }
  END {
    for (i = 1; i <= n; i++) {
      split(order[i], pb, SUBSEP)
      base = first SUBSEP pb[2]
      m = median(tps[order[i]])
      r = (base in tps) ? sprintf("%.2fx", m / median(tps[base])) : "-"
      k = order[i]
      printf "| %s | %d | %.2f (%.2f-%.2f) | %s | %.1f | %.1f | %.1f (%.1f-%.1f) | %.2f | %.1f | %.2f | %.1f | %.0f%% |\n",
        pb[1], pb[2], m, lo(tps[k]), hi(tps[k]), r, median(disk[k]) / 1e6, median(miss[k]),
        median(wait_[k]), lo(wait_[k]), hi(wait_[k]), median(rd[k]), median(tpot[k]), median(bw[k]),
        median(limit[k]), 100 * median(share[k])
    }
  }' "$out" | sort -t'|' -k3,3n -s
memory_cgroup_peak
