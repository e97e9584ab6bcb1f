// Shared helpers of the routing tests: random router logits and buffers for one step.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "lynx/routing.h"

namespace lynx::test {

// Router logits [T x N]: N(0, std) values, optionally rounded to a coarse grid so that ties
// (between experts, and across bin boundaries) occur often.
inline std::vector<float> random_logits(std::mt19937_64& rng, int T, int N, float std,
                                        bool coarse) {
  std::normal_distribution<float> nd(0.f, std);
  std::vector<float> z(size_t(T) * N);
  for (float& v : z) {
    v = nd(rng);
    if (coarse) v = std::round(v * 4.f) / 4.f;
  }
  return z;
}

struct Step {
  std::vector<float> logits;
  std::vector<uint8_t> flags;
  std::vector<float> cost;         // RoutingInput::cost; empty: nullptr
  std::vector<uint8_t> resident;  // RoutingInput::resident; empty: nullptr
  std::vector<int32_t> ids;
  std::vector<float> weights;
  GatingConfig gating;
  int T = 0;
  RoutingInput in() const {
    RoutingInput r;
    r.logits = logits.data();
    r.flags = flags.empty() ? nullptr : flags.data();
    r.cost = cost.empty() ? nullptr : cost.data();
    r.resident = resident.empty() ? nullptr : resident.data();
    r.n_tokens = T;
    r.gating = &gating;
    return r;
  }
  RoutingOutput out() { return {ids.data(), weights.data()}; }
  Step(std::vector<float> z, int T_, GatingConfig g) : logits(std::move(z)), gating(g), T(T_) {
    ids.assign(size_t(T) * g.n_expert_used, -7);
    weights.assign(size_t(T) * g.n_expert_used, -7.f);
  }
};

// Router probability of expert e for token row z (softmax over all N, or sigmoid), in double:
// an independent reference for the library's float arithmetic.
inline double ref_prob(const float* z, int N, int e, GatingFunc f) {
  if (f == GatingFunc::kSigmoid) return 1.0 / (1.0 + std::exp(-double(z[e])));
  double mx = z[0];
  for (int j = 1; j < N; ++j) mx = std::max(mx, double(z[j]));
  double s = 0;
  for (int j = 0; j < N; ++j) s += std::exp(double(z[j]) - mx);
  return std::exp(double(z[e]) - mx) / s;
}

}  // namespace lynx::test
