// The element-wise pieces Gemma adds to the transformer layer, as small functions the forward
// pass and the expert executor call and the tests check by hand (tests/model/gemma4_test.cc):
// GELU's tanh form and the GeGLU built on it, and the logits' soft cap.
#pragma once
#include <cmath>
#include <cstdint>

namespace lynx {

// GELU, tanh approximation (PyTorch's gelu(approximate="tanh"), Hugging Face's
// gelu_pytorch_tanh, ggml_gelu): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// out = gelu_tanh(gate) * up over n values (out may alias gate).
inline void geglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

// x <- cap tanh(x / cap) (Gemma's final_logit_softcapping; cap > 0).
inline void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

}  // namespace lynx
