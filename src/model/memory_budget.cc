// detect_memory_budget and parse_memory_size (see memory_budget.h).
#include "model/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>

#include "lynx/error.h"

namespace lynx {
namespace {

// The first line of a file as a number of bytes; 0 when unreadable or "max" (no limit).
uint64_t read_bytes(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return 0;
  try {
    return std::stoull(s);
  } catch (const std::exception&) {
    return 0;
  }
}

// A memory limit below 2^60 bytes (cgroup v1 writes a huge number for "none").
bool real_limit(uint64_t v) {
  return v > 0 && v < (uint64_t(1) << 60);
}

}  // namespace

MemoryBudget detect_memory_budget() {
  MemoryBudget b;
  uint64_t avail = 0;
  {
    std::ifstream f("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (f >> key >> kb) {
      std::getline(f, unit);
      if (key == "MemAvailable:") avail = kb * 1024;
    }
  }
  b.bytes = size_t(avail);
  b.source = "MemAvailable";
  // /proc/self/cgroup: "0::/path" (v2) or "N:memory:/path" (v1).
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    const size_t a = line.find(':'), c = line.find(':', a + 1);
    if (a == std::string::npos || c == std::string::npos) continue;
    const std::string ctrl = line.substr(a + 1, c - a - 1), path = line.substr(c + 1);
    uint64_t limit = 0, usage = 0;
    std::string source;
    if (ctrl.empty()) {
      limit = read_bytes("/sys/fs/cgroup" + path + "/memory.max");
      usage = read_bytes("/sys/fs/cgroup" + path + "/memory.current");
      source = "cgroup v2 memory.max";
    } else if (("," + ctrl + ",").find(",memory,") != std::string::npos) {
      limit = read_bytes("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
      usage = read_bytes("/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
      source = "cgroup v1 memory.limit_in_bytes";
    }
    if (!real_limit(limit)) continue;
    const uint64_t left = limit > usage ? limit - usage : 0;
    if (left < b.bytes) {
      b.bytes = size_t(left);
      b.source = source;
    }
  }
  return b;
}

size_t parse_memory_size(const std::string& text) {
  std::istringstream in(text);
  double v = 0;
  if (!(in >> v) || !std::isfinite(v) || v < 0) {
    throw Error("'" + text + "' is not a memory size (e.g. 16G, 512M, 1.5GiB)");
  }
  std::string unit;
  in >> unit;
  std::string u;
  for (const char ch : unit) u.push_back(char(std::toupper(static_cast<unsigned char>(ch))));
  double mul = 1;
  if (u.empty() || u == "B") {
    mul = 1;
  } else if (u == "K" || u == "KB" || u == "KIB") {
    mul = 1024.0;
  } else if (u == "M" || u == "MB" || u == "MIB") {
    mul = 1024.0 * 1024;
  } else if (u == "G" || u == "GB" || u == "GIB") {
    mul = 1024.0 * 1024 * 1024;
  } else if (u == "T" || u == "TB" || u == "TIB") {
    mul = 1024.0 * 1024 * 1024 * 1024;
  } else {
    throw Error("'" + text + "' is not a memory size: unknown unit '" + unit + "'");
  }
  const double bytes = v * mul;
  if (bytes >= double(std::numeric_limits<size_t>::max() / 2)) {
    throw Error("'" + text + "' is too large a memory size");
  }
  return size_t(bytes);
}

}  // namespace lynx
