// Wall-clock seconds for timings and timestamps (internal; header-only).
#pragma once
#include <chrono>

namespace lynx::util {

// Seconds on the monotonic clock: differences are durations; the origin is arbitrary.
inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace lynx::util
