// detect_memory_budget, measure_ram_read_rate and parse_memory_size (see memory_budget.h).
#include "model/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <chrono>
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

size_t ram_probe_bytes() {
  // The last-level cache of cpu0 (sysfs gives one CCD's L3 where sysconf may give the chip's).
  size_t llc = 0;
  for (int i = 3; i >= 2 && llc == 0; --i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string s;
    if (f >> s) {
      try {
        llc = parse_memory_size(s);
      } catch (const Error&) {
      }
    }
  }
  return std::clamp<size_t>(4 * (llc ? llc : size_t(32) << 20), size_t(16) << 20,
                            size_t(128) << 20);
}

double measure_read_rate(const uint8_t* bytes, size_t size) {
  const auto* p = reinterpret_cast<const uint64_t*>(bytes);
  const size_t n = size / sizeof(uint64_t) / 4 * 4;
  if (n == 0) return 0;
  double best = 0;
  uint64_t sink = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t a = 0, b = 0, c = 0, d = 0;  // four chains, so the adds do not bound the loop
    for (size_t i = 0; i < n; i += 4) {
      a += p[i];
      b += p[i + 1];
      c += p[i + 2];
      d += p[i + 3];
    }
    sink += a + b + c + d;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, double(n * sizeof(uint64_t)) / s);
  }
  volatile uint64_t used = sink;  // the sums are kept, so the loops are not optimized away
  (void)used;
  return best;
}

}  // namespace lynx
