#!/usr/bin/env bash
# Models larger than memory (docs/offload.md): decode tokens/s of lynx-moe with its expert
# tier, lynx-moe on the file mapping (--no-repack --expert-cache 0) and, when their trees are
# given, ik_llama.cpp and llama.cpp on the file mapping (no -rtr: a repacked copy would not
# fit), all inside one memory cgroup of SIZE bytes (page cache included), B distinct
# sequences, engines interleaved pass by pass (scripts/compare-llamacpp.sh does the runs and
# the table; its -p/-b/-t/-g/-P/-q/-e options pass through).
#
#   sudo bash scripts/offload-bench.sh -M 2G [compare-llamacpp.sh options] FILE.gguf...
#
# LYNX2_ARGS replaces the second lynx-moe engine's flags (default: the file mapping), e.g.
# LYNX2_ARGS=--no-expert-prefetch to compare the tier with and without its prefetch.
# Needs root (a cgroup v1 memory controller under /sys/fs/cgroup/memory, or cgroup v2 with the
# memory controller enabled). The page cache is dropped before the runs; the bandwidth probes
# use 128 MiB buffers so that they fit the limit. Besides the table, lynx-moe's tier counters
# (hits, misses, bytes read per token) are in the JSON of its bench runs (bench -o json).
set -euo pipefail
cd "$(dirname "$0")/.."
limit=2G
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -M) limit=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
bytes=$(numfmt --from=iec "${limit%B}")
# shellcheck source=scripts/memory-cgroup.sh
source scripts/memory-cgroup.sh
trap memory_cgroup_leave EXIT
sync
echo 3 >/proc/sys/vm/drop_caches
memory_cgroup lynx-offload "$bytes"
echo "memory cgroup $cg: limit $limit ($bytes bytes)" >&2
BW_SIZES=128 IK_RTR=0 LYNX_ARGS="--bw-sizes 128 ${LYNX_ARGS:-}" \
  LYNX2_ARGS="--bw-sizes 128 ${LYNX2_ARGS:---no-repack --expert-cache 0}" \
  bash scripts/compare-llamacpp.sh "${args[@]}"
memory_cgroup_peak
