#include "routing/gating.h"

#include <algorithm>
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
  if (g.n_group != 1) {
    const int per = g.n_group > 0 ? g.n_expert / g.n_group : 0;
    if (g.n_group < 1 || g.n_group > 64 || g.n_expert % g.n_group != 0 || g.n_group_used < 1 ||
        g.n_group_used > g.n_group || g.n_expert_used > g.n_group_used * per) {
      throw Error("routing: group limit " + std::to_string(g.n_group_used) + " of " +
                  std::to_string(g.n_group) + " groups does not fit " +
                  std::to_string(g.n_expert_used) + " of " + std::to_string(g.n_expert) +
                  " experts");
    }
  }
  if (in.n_tokens > 0 && in.select == nullptr && needs_selection_keys(g)) {
    throw Error("routing: the gating selects by bias or group, but no selection keys were given");
  }
}

RowGate row_gate(const float* z, int n, GatingFunc func) {
  RowGate rg;
  // NaN compares false, so it never becomes the maximum; for finite rows this is the same
  // maximum (and Z the same sum, term by term) as before the non-finite rules.
  float m = -std::numeric_limits<float>::infinity();
  for (int e = 0; e < n; ++e) m = z[e] > m ? z[e] : m;
  rg.zmax = m;
  if (func != GatingFunc::kSigmoid) {
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
  if (g.func == GatingFunc::kSoftmaxWeight && n_active > 0) {
    // A softmax over the active experts' logits: relative to their largest, as a softmax over
    // just those values computes it.
    float m = z[ids[0]];
    for (int j = 1; j < n_active; ++j) m = std::max(m, z[ids[j]]);
    for (int j = 0; j < n_active; ++j) {
      const float d = z[ids[j]] - m;
      w[j] = d == d ? std::exp(d) : (z[ids[j]] == m ? 1.f : 0.f);
      sum += w[j];
    }
    target = 0.f;
  } else {
    for (int j = 0; j < n_active; ++j) {
      w[j] = gate_prob(z[ids[j]], rg, g.func);
      sum += w[j];
    }
  }
  // A selection of probability 0 (a row of NaN logits) keeps weights 0 rather than 0 / 0.
  if (!(sum > 0)) {
    for (int j = 0; j < k; ++j) w[j] = 0.f;
    return;
  }
  const bool norm = g.norm_topk || g.func == GatingFunc::kSoftmaxWeight;
  float factor = 1.f;
  if (norm) {
    factor = 1.f / sum;
  } else if (target > 0) {
    factor = target / sum;
  }
  if (factor != 1.f) {
    for (int j = 0; j < n_active; ++j) w[j] = norm ? w[j] / sum : w[j] * factor;
  }
  if (g.weights_scale != 1.f) {
    for (int j = 0; j < n_active; ++j) w[j] *= g.weights_scale;
  }
  for (int j = n_active; j < k; ++j) w[j] = 0.f;
}

RowGate route_token_exact(const float* z, const float* key, const GatingConfig& g, int32_t* ids,
                          float* w) {
  topk_row(key, g.n_expert, g.n_expert_used, ids);
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
    gates[t] = route_token_exact(in.logits + size_t(t) * n, key_row(in, t), g,
                                 out.ids + size_t(t) * k, out.weights + size_t(t) * k);
  }
}

float prob_mass(const float* z, const RowGate& rg, GatingFunc func, const int32_t* ids, int n) {
  float s = 0;
  for (int j = 0; j < n; ++j) s += gate_prob(z[ids[j]], rg, func);
  return s;
}

void keep_group_limit(const GatingConfig& g, const float* key, const int32_t* exact, int k,
                      int32_t* chosen) {
  if (g.n_group <= 1) return;
  constexpr float kOut = -std::numeric_limits<float>::infinity();
  bool changed = false;
  for (int j = 0; j < k; ++j) {
    if (key[chosen[j]] != kOut) continue;
    for (int i = 0; i < k; ++i) {
      if (std::find(chosen, chosen + k, exact[i]) == chosen + k) {
        chosen[j] = exact[i];
        changed = true;
        break;
      }
    }
  }
  if (changed) {
    std::sort(chosen, chosen + k, [key](int32_t a, int32_t b) { return logit_before(key, a, b); });
  }
}

namespace {

// Strictly increasing maps of a selection score p + b into logit units (selection_keys): the
// log-odds (sigmoid gating) or the logarithm (softmax), linear outside [lo, hi] with the slope
// they have at the boundary, so scores outside (0, 1) (a bias can put them there) keep their
// order.
constexpr double kKeyEps = 1e-6;
double log_odds_ext(double s) {
  const double lo = kKeyEps, hi = 1 - kKeyEps, slope = 1 / (kKeyEps * (1 - kKeyEps));
  if (s < lo) return std::log(lo / (1 - lo)) + (s - lo) * slope;
  if (s > hi) return std::log(hi / (1 - hi)) + (s - hi) * slope;
  return std::log(s / (1 - s));
}
double log_ext(double s) {
  if (s < kKeyEps) return std::log(kKeyEps) + (s - kKeyEps) / kKeyEps;
  return std::log(s);
}

}  // namespace

}  // namespace lynx::routing

namespace lynx {

bool needs_selection_keys(const GatingConfig& g) {
  return g.select_bias || g.n_group > 1;
}

namespace {

// The sum of the two best scores of experts [b, e) (the one score of a one-expert group).
float group_score(const float* score, int b, int e) {
  float b1 = -std::numeric_limits<float>::infinity(), b2 = b1;
  for (int i = b; i < e; ++i) {
    if (score[i] > b1) {
      b2 = b1;
      b1 = score[i];
    } else if (score[i] > b2) {
      b2 = score[i];
    }
  }
  return e - b > 1 ? b1 + b2 : b1;
}

}  // namespace

void selection_keys(const GatingConfig& g, const float* logits, const float* bias, int n_tokens,
                    float* keys) {
  const int n = g.n_expert;
  if (g.select_bias && bias == nullptr) throw Error("routing: selection bias missing");
  if (g.n_group < 1 || g.n_group > 64 || n % g.n_group != 0) {
    throw Error("routing: " + std::to_string(g.n_group) + " expert groups do not divide " +
                std::to_string(n) + " experts (at most 64 groups)");
  }
  constexpr float kOut = -std::numeric_limits<float>::infinity();
  for (int t = 0; t < n_tokens; ++t) {
    const float* z = logits + size_t(t) * n;
    float* key = keys + size_t(t) * n;
    const routing::RowGate rg = routing::row_gate(z, n, g.func);
    // First the score llama.cpp chooses and ranks groups by: p + b (p is the logit itself for
    // kSoftmaxWeight, as there), held in key[] until the keys replace it.
    for (int e = 0; e < n; ++e) {
      const float p =
          g.func == GatingFunc::kSoftmaxWeight ? z[e] : routing::gate_prob(z[e], rg, g.func);
      key[e] = g.select_bias ? p + bias[e] : p;
    }
    // Group limit: a group's rank is the number of groups before it (higher score, or equal
    // and lower index); ranks from n_group_used on are masked. O(n_group * N), no scratch.
    uint64_t masked_groups = 0;  // bit gi: group gi masked (n_group <= 64, checked at load)
    if (g.n_group > 1) {
      const int per = n / g.n_group;
      for (int gi = 0; gi < g.n_group; ++gi) {
        const float s = group_score(key, gi * per, (gi + 1) * per);
        int rank = 0;
        for (int gj = 0; gj < g.n_group; ++gj) {
          const float o = group_score(key, gj * per, (gj + 1) * per);
          rank += o > s || (o == s && gj < gi);
        }
        if (rank >= g.n_group_used) masked_groups |= uint64_t(1) << gi;
      }
    }
    const int per = g.n_group > 1 ? n / g.n_group : n;
    for (int e = 0; e < n; ++e) {
      if (masked_groups >> (e / per) & 1) {
        key[e] = kOut;
      } else if (!g.select_bias) {
        key[e] = z[e];
      } else if (g.func == GatingFunc::kSigmoid) {
        key[e] = float(routing::log_odds_ext(double(key[e])));
      } else if (g.func == GatingFunc::kSoftmax) {
        key[e] = float(routing::log_ext(double(key[e])));
      }  // kSoftmaxWeight: the biased logit is already in logit units
    }
  }
}

}  // namespace lynx
