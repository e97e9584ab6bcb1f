// The clamped SwiGLU of step35 (Hugging Face's Step3p5MLP / Step3p5MoEMLP with a
// swiglu_limit; llama.cpp's build_ffn / build_moe_ffn for LLM_ARCH_STEP35): the SiLU of the
// gate clamped from above only, the up projection from both sides, before their product. A
// small function the forward pass (dense FFN, shared expert) and the expert executor call and
// the tests check by hand (tests/model/step35_test.cc).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace lynx {

// out[i] = min(silu(gate[i]), limit) * clamp(up[i], -limit, limit); limit > 0.
inline void swiglu_limited(const float* gate, const float* up, float* out, int64_t n, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i] / (1.f + std::exp(-gate[i]));
    out[i] = std::min(g, limit) * std::clamp(up[i], -limit, limit);
  }
}

}  // namespace lynx
