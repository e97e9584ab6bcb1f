// The element-wise pieces gpt-oss adds to the transformer layer, as small functions the
// forward pass and the expert executor call and the tests check by hand (tests/model/
// gpt_oss_test.cc): the softmax with an attention sink, the sliding window's first key, and
// the clamped SwiGLU of its experts.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace lynx {

// Softmax of x[0..n) with one more logit, `sink`, in the denominator only (ggml_soft_max_ext
// with sinks, as gpt-oss's attention runs it): m = max(max x, sink),
// x_j <- exp(x_j - m) / (sum_i exp(x_i - m) + exp(sink - m)). The weights sum to less than 1:
// the sink's share is attention paid to nothing.
inline void softmax_with_sink(float* x, int64_t n, float sink) {
  float mx = sink;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  double s = std::exp(double(sink) - mx);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    s += x[i];
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// The first key position a query at `pos` sees: pos - window + 1 under a sliding window
// (llama.cpp's LLAMA_SWA_TYPE_STANDARD masks key p0 when pos - p0 >= window), 0 without one.
inline int window_start(int pos, int window) {
  return window > 0 ? std::max(0, pos - window + 1) : 0;
}

// gpt-oss's expert activation (ggml_swiglu_oai, alpha 1.702, limit 7; Hugging Face's
// GptOssExperts): g = min(gate, 7), u = clamp(up, -7, 7), out = g sigmoid(1.702 g) (u + 1).
// The gate is clamped from above only; the "+ 1" on up is part of the trained model.
inline void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float kAlpha = 1.702f, kLimit = 7.f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = g / (1.f + std::exp(-kAlpha * g)) * (u + 1.f);
  }
}

}  // namespace lynx
