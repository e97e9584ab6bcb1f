# Sourced by the scripts that run engines inside a memory cgroup (offload-bench.sh,
# offload-policies.sh). memory_cgroup NAME BYTES makes a cgroup (v1 or v2) limited to BYTES,
# page cache included, with no swap, sets $cg to its directory and moves this shell into it;
# memory_cgroup_leave moves the shell back and removes it; memory_cgroup_peak prints its peak.
# Needs root and a memory controller.
memory_cgroup() {
  local name=$1 bytes=$2
  if [[ -d /sys/fs/cgroup/memory ]]; then
    cg=/sys/fs/cgroup/memory/$name-$$
    mkdir "$cg"
    echo "$bytes" >"$cg/memory.limit_in_bytes"
    echo 0 >"$cg/memory.swappiness" 2>/dev/null || true
  elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cg=/sys/fs/cgroup/$name-$$
    mkdir "$cg"
    echo "$bytes" >"$cg/memory.max"
    echo 0 >"$cg/memory.swap.max" 2>/dev/null || true
  else
    echo "no memory cgroup controller here (run as root on a machine with cgroup v1 or v2 memory)" >&2
    exit 2
  fi
  echo $$ >"$cg/cgroup.procs"
}
memory_cgroup_leave() {
  echo $$ >"$(dirname "$cg")/cgroup.procs" 2>/dev/null || true
  rmdir "$cg" 2>/dev/null || true
}
memory_cgroup_peak() {
  local f
  for f in memory.max_usage_in_bytes memory.peak; do
    if [[ -f $cg/$f ]]; then
      echo "peak memory of the cgroup: $(numfmt --to=iec "$(cat "$cg/$f")")" >&2
    fi
  done
}
