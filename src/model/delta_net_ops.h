// Scalar helpers of the Gated DeltaNet block (Qwen3-Next's linear attention; the conv and
// delta-rule steps themselves are kernels, kernels/delta_net.h).
#pragma once
#include <cmath>

namespace lynx {

// softplus(x) = ln(1 + e^x), linear above 20 as torch's (threshold 20) and ggml's.
inline float softplus(float x) {
  return x > 20.f ? x : std::log1p(std::exp(x));
}

// x /= sqrt(sum x^2 + 1e-6) (Hugging Face's l2norm, eps 1e-6), then times `scale`.
inline void l2_normalize(float* x, int n, float scale) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float f = float(scale / std::sqrt(ss + 1e-6));
  for (int i = 0; i < n; ++i) x[i] *= f;
}

}  // namespace lynx
