// The per-token steps of Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks";
// Qwen3-Next's linear attention, Hugging Face's torch_recurrent_gated_delta_rule), on one
// sequence's state slot. The recurrent form is exact for prefill too: a prompt runs token by
// token through the same state, so a prompt prefilled in chunks, or one token at a time, gives
// the same numbers as one pass.
#pragma once
#include <cmath>
#include <cstdint>

namespace lynx {

inline float silu(float x) {
  return x / (1.f + std::exp(-x));
}

// softplus(x) = ln(1 + e^x), linear above 20 as torch's (threshold 20) and ggml's.
inline float softplus(float x) {
  return x > 20.f ? x : std::log1p(std::exp(x));
}

// One position of the causal depthwise conv of channels [c0, c1): x (this position's raw
// channels, conv_dim wide) becomes silu(sum_j w[c][j] in_j) where in_0 .. in_{K-2} are the
// window's rows (oldest first) and in_{K-1} = x[c]; the window then drops its oldest row and
// takes x. w: [conv_dim x K] (ssm_conv1d), window: [(K-1) x conv_dim].
inline void conv_step(float* x, float* window, const float* w, int conv_dim, int K, int c0,
                      int c1) {
  for (int c = c0; c < c1; ++c) {
    const float* wc = w + int64_t(c) * K;
    const float in = x[c];
    float y = wc[K - 1] * in;
    for (int j = 0; j < K - 1; ++j) y += wc[j] * window[int64_t(j) * conv_dim + c];
    for (int j = 0; j + 1 < K - 1; ++j) {
      window[int64_t(j) * conv_dim + c] = window[int64_t(j + 1) * conv_dim + c];
    }
    if (K > 1) window[int64_t(K - 2) * conv_dim + c] = in;
    x[c] = silu(y);
  }
}

// x /= sqrt(sum x^2 + 1e-6) (Hugging Face's l2norm, eps 1e-6), then times `scale`.
inline void l2_normalize(float* x, int n, float scale) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float f = float(scale / std::sqrt(ss + 1e-6));
  for (int i = 0; i < n; ++i) x[i] *= f;
}

// One position of the gated delta rule on one value head's state S [dk x dv] (row i: key
// dimension i): S = decay S; d = beta (v - S^T k); S += k d^T; out = S^T q. q is already
// L2-normed and scaled by dk^-1/2, k L2-normed. mem: dv floats of scratch.
inline void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay,
                            float beta, int dk, int dv, float* mem, float* out) {
  for (int j = 0; j < dv; ++j) mem[j] = 0.f;
  for (int i = 0; i < dk; ++i) {
    float* row = S + int64_t(i) * dv;
    const float ki = k[i];
    for (int j = 0; j < dv; ++j) {
      row[j] *= decay;
      mem[j] += ki * row[j];
    }
  }
  for (int j = 0; j < dv; ++j) mem[j] = (v[j] - mem[j]) * beta;
  for (int j = 0; j < dv; ++j) out[j] = 0.f;
  for (int i = 0; i < dk; ++i) {
    float* row = S + int64_t(i) * dv;
    const float ki = k[i], qi = q[i];
    for (int j = 0; j < dv; ++j) {
      row[j] += ki * mem[j];
      out[j] += qi * row[j];
    }
  }
}

}  // namespace lynx
