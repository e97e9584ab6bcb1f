// What the benchmarks share: the --simd option, main's error handling, the wall clock.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "../tests/simd_target.h"  // the tests' switch of the dispatched target
#include "kernels/kernels.h"

namespace lynx::bench {

// --simd NAME: one of kernels::available_simd_targets() instead of the best one.
inline void add_simd_option(CLI::App& app, std::string& simd) {
  app.add_option("--simd", simd, "force an instruction set (AVX3_DL, AVX3, AVX2, ...)");
}

// Restricts kernel dispatch to the target named by --simd (empty: leave the best one); a
// name this CPU lacks is a CLI11 validation error.
inline void apply_simd_option(const std::string& simd) {
  if (simd.empty()) return;
  bool found = false;
  for (int64_t t : kernels::available_simd_targets()) {
    if (simd == kernels::simd_target_name(t)) {
      test::force_simd_target(t);
      found = true;
    }
  }
  if (!found) throw CLI::ValidationError("--simd", simd + " is not available here");
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Runs run(argc, argv), which parses with CLI11_PARSE (so --help and parse errors exit as
// CLI11 has them), and reports what it throws after the parse, a bad option value (an unknown
// type or shape, an instruction set this CPU lacks) or a failure, as "name: message" on
// stderr, never as an uncaught exception: exit code 2 for a CLI11 error, 1 for anything else.
inline int run_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const CLI::Error& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace lynx::bench
