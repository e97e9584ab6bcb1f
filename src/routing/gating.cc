#include "routing/gating.h"

#include <limits>
#include <string>

namespace lynx::routing {

void check_routing_args(const RoutingInput& in, const RoutingOutput& out) {
  if (in.gating == nullptr) throw Error("routing: RoutingInput.gating is null");
  const GatingConfig& g = *in.gating;
  if (g.n_expert < 1)
    throw Error("routing: n_expert must be >= 1, got " + std::to_string(g.n_expert));
  if (g.n_expert_used < 1 || g.n_expert_used > g.n_expert) {
    throw Error("routing: n_expert_used (k) must be in [1, " + std::to_string(g.n_expert) +
                "], got " + std::to_string(g.n_expert_used));
  }
  if (in.n_tokens < 0) throw Error("routing: negative token count");
  if (in.n_tokens > 0 && (in.logits == nullptr || out.ids == nullptr || out.weights == nullptr)) {
    throw Error("routing: null logits or output buffers");
  }
}

RowGate row_gate(const float* z, int n, GatingFunc func) {
  RowGate rg;
  // NaN compares false, so it never becomes the maximum; for finite rows this is the same
  // maximum (and Z the same sum, term by term) as before the non-finite rules.
  float m = -std::numeric_limits<float>::infinity();
  for (int e = 0; e < n; ++e) m = z[e] > m ? z[e] : m;
  rg.zmax = m;
  if (func == GatingFunc::kSoftmax) {
    float sum = 0;
    for (int e = 0; e < n; ++e) {
      const float d = z[e] - m;
      sum += d == d ? std::exp(d) : (z[e] == m ? 1.f : 0.f);
    }
    rg.inv_z = sum > 0 ? 1.f / sum : 0.f;
  }
  return rg;
}

void topk_row(const float* z, int n, int k, int32_t* ids) {
  int len = 0;
  for (int32_t e = 0; e < n; ++e) {
    if (len == k && !logit_before(z, e, ids[k - 1])) continue;
    int pos = len < k ? len++ : k - 1;
    while (pos > 0 && logit_before(z, e, ids[pos - 1])) {
      ids[pos] = ids[pos - 1];
      --pos;
    }
    ids[pos] = e;
  }
}

int topk_among(const float* z, const int32_t* cand, int n_cand, int k, int32_t* ids) {
  int len = 0;
  for (int i = 0; i < n_cand; ++i) {
    const int32_t e = cand[i];
    if (len == k && !logit_before(z, e, ids[k - 1])) continue;
    int pos = len < k ? len++ : k - 1;
    while (pos > 0 && logit_before(z, e, ids[pos - 1])) {
      ids[pos] = ids[pos - 1];
      --pos;
    }
    ids[pos] = e;
  }
  return len;
}

void set_weights(const float* z, const RowGate& rg, const GatingConfig& g, const int32_t* ids,
                 int n_active, float target, float* w) {
  const int k = g.n_expert_used;
  float sum = 0;
  for (int j = 0; j < n_active; ++j) {
    w[j] = gate_prob(z[ids[j]], rg, g.func);
    sum += w[j];
  }
  // A selection of probability 0 (a row of NaN logits) keeps weights 0 rather than 0 / 0.
  if (!(sum > 0)) {
    for (int j = 0; j < k; ++j) w[j] = 0.f;
    return;
  }
  float factor = 1.f;
  if (g.norm_topk) {
    factor = 1.f / sum;
  } else if (target > 0) {
    factor = target / sum;
  }
  if (factor != 1.f) {
    for (int j = 0; j < n_active; ++j) w[j] = g.norm_topk ? w[j] / sum : w[j] * factor;
  }
  if (g.weights_scale != 1.f) {
    for (int j = 0; j < n_active; ++j) w[j] *= g.weights_scale;
  }
  for (int j = n_active; j < k; ++j) w[j] = 0.f;
}

RowGate route_token_exact(const float* z, const GatingConfig& g, int32_t* ids, float* w) {
  topk_row(z, g.n_expert, g.n_expert_used, ids);
  const RowGate rg = row_gate(z, g.n_expert, g.func);
  set_weights(z, rg, g, ids, g.n_expert_used, 0.f, w);
  return rg;
}

void route_topk_keep_gates(const RoutingInput& in, RoutingOutput& out,
                           std::vector<RowGate>& gates) {
  check_routing_args(in, out);
  const GatingConfig& g = *in.gating;
  const int n = g.n_expert, k = g.n_expert_used;
  gates.resize(in.n_tokens);
  for (int t = 0; t < in.n_tokens; ++t) {
    gates[t] = route_token_exact(in.logits + size_t(t) * n, g, out.ids + size_t(t) * k,
                                 out.weights + size_t(t) * k);
  }
}

float prob_mass(const float* z, const RowGate& rg, GatingFunc func, const int32_t* ids, int n) {
  float s = 0;
  for (int j = 0; j < n; ++j) s += gate_prob(z[ids[j]], rg, func);
  return s;
}

}  // namespace lynx::routing
