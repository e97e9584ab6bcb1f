// How much memory this process may use: the limit of its memory cgroup (v1 or v2), less what
// the cgroup already holds, and MemAvailable, whichever is lower. The expert tier sizes its
// slots from it when a model file does not fit (docs/offload.md).
#pragma once
#include <cstddef>
#include <string>

namespace lynx {

struct MemoryBudget {
  size_t bytes = 0;    // what the process may still take
  std::string source;  // where the figure comes from ("cgroup v2 memory.max", "MemAvailable")
};

// Reads /proc/self/cgroup, the cgroup's limit and usage, and /proc/meminfo.
MemoryBudget detect_memory_budget();

// Parses "24G", "512M", "1.5GiB", "1000000" (bytes); binary units (K = 1024). Throws
// lynx::Error naming the text when it is not a size.
size_t parse_memory_size(const std::string& text);

}  // namespace lynx
