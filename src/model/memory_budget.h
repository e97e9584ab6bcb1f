// How much memory this process may use: the limit of its memory cgroup (v1 or v2), less what
// the cgroup already holds, and MemAvailable, whichever is lower. The expert tier sizes its
// slots from it when a model file does not fit (docs/offload.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lynx {

struct MemoryBudget {
  size_t bytes = 0;    // what the process may still take
  std::string source;  // where the figure comes from ("cgroup v2 memory.max", "MemAvailable")
};

// Reads /proc/self/cgroup, the cgroup's limit and usage, and /proc/meminfo.
MemoryBudget detect_memory_budget();

// Bytes of memory that reading shows RAM's rate rather than a cache's: four times the
// last-level cache (sysfs), within 16-128 MiB.
size_t ram_probe_bytes();
// Bytes per second one thread reads the n bytes at p (8-byte aligned, already written): the
// best of three passes summing them. The expert tier prices a miss by it
// (ExpertTier::miss_cost); over n >= ram_probe_bytes() it is RAM's rate.
double measure_read_rate(const uint8_t* p, size_t n);

// Parses "24G", "512M", "1.5GiB", "1000000" (bytes); binary units (K = 1024). Throws
// lynx::Error naming the text when it is not a size.
size_t parse_memory_size(const std::string& text);

}  // namespace lynx
