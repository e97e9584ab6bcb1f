// Restricting the kernels' dynamic dispatch to one instruction set, for the tests (each SIMD
// path against its scalar twin, the goldens on every target) and the benchmarks (--simd).
//
// Highway's dispatch state is process-wide by design: every HWY_DYNAMIC_DISPATCH table and the
// mask of supported targets are globals of the process, so a switch over them is process-wide
// too. It lives here, outside the engine's libraries, so that no engine code (and no client of
// them) can flip the instruction set under a running model; the engine only asks which targets
// exist (kernels::available_simd_targets) and which one runs (kernels::simd_target_name).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "kernels/kernels.h"
#include "lynx/error.h"

namespace lynx::test {

// Restricts dispatch to one of kernels::available_simd_targets(); 0 restores the CPU's best.
// Throws lynx::Error for a target this machine lacks. Call it between runs, never while
// another thread computes.
inline void force_simd_target(int64_t target) {
  hwy::SetSupportedTargetsForTest(0);  // back to the CPU's real set
  if (target == 0) return;
  const std::vector<int64_t> targets = kernels::available_simd_targets();
  if (std::find(targets.begin(), targets.end(), target) == targets.end()) {
    throw Error(std::string("force_simd_target: target ") + hwy::TargetName(target) +
                " is not available on this machine");
  }
  hwy::SetSupportedTargetsForTest(target);
}

}  // namespace lynx::test
