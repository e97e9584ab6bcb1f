// Routing statistics: what a policy changed relative to exact top-k, per layer and step
// (issue 4 "Statistics"). Only active assignments (weight > 0) count, so the dropped slots of
// ser / static-k neither activate an expert nor keep probability mass.
#include "routing/gating.h"

namespace lynx {

void RoutingStats::add(const RoutingStats& o) {
  steps += o.steps;
  tokens += o.tokens;
  distinct_policy += o.distinct_policy;
  distinct_exact += o.distinct_exact;
  assignments += o.assignments;
  assignments_active += o.assignments_active;
  assignments_changed += o.assignments_changed;
  top1_kept += o.top1_kept;
  mass_kept += o.mass_kept;
}

RoutingStats operator-(RoutingStats a, const RoutingStats& b) {
  a.steps -= b.steps;
  a.tokens -= b.tokens;
  a.distinct_policy -= b.distinct_policy;
  a.distinct_exact -= b.distinct_exact;
  a.assignments -= b.assignments;
  a.assignments_active -= b.assignments_active;
  a.assignments_changed -= b.assignments_changed;
  a.top1_kept -= b.top1_kept;
  a.mass_kept -= b.mass_kept;
  return a;
}

void RoutingStatsAccumulator::add(const RoutingInput& in, const RoutingOutput& out,
                                  RoutingStats& stats) {
  routing::check_routing_args(in, out);
  const GatingConfig& g = *in.gating;
  const int n = g.n_expert, k = g.n_expert_used, T = in.n_tokens;
  exact_ids_.resize(size_t(T) * k);
  exact_w_.resize(size_t(T) * k);
  RoutingOutput exact{exact_ids_.data(), exact_w_.data()};
  route_topk(in, exact);

  enum : uint8_t { kPolicy = 1, kExact = 2 };
  mark_.assign(n, 0);
  for (int t = 0; t < T; ++t) {
    const float* z = in.logits + size_t(t) * n;
    const int32_t* pid = out.ids + size_t(t) * k;
    const float* pw = out.weights + size_t(t) * k;
    const int32_t* eid = exact_ids_.data() + size_t(t) * k;
    const routing::RowGate rg = routing::row_gate(z, n, g.func);
    auto active = [&](int32_t e) {
      for (int j = 0; j < k; ++j) {
        if (pid[j] == e && pw[j] > 0.f) return true;
      }
      return false;
    };
    float mass_p = 0, mass_e = 0;
    for (int j = 0; j < k; ++j) {
      mark_[eid[j]] |= kExact;
      mass_e += routing::gate_prob(z[eid[j]], rg, g.func);
      if (pw[j] > 0.f) {
        mark_[pid[j]] |= kPolicy;
        mass_p += routing::gate_prob(z[pid[j]], rg, g.func);
        ++stats.assignments_active;
      }
      if (!active(eid[j])) ++stats.assignments_changed;
    }
    stats.top1_kept += active(eid[0]);
    stats.mass_kept += mass_e > 0 ? double(mass_p) / mass_e : 1.0;
  }
  for (int e = 0; e < n; ++e) {
    stats.distinct_policy += (mark_[e] & kPolicy) != 0;
    stats.distinct_exact += (mark_[e] & kExact) != 0;
  }
  stats.steps += 1;
  stats.tokens += T;
  stats.assignments += int64_t(T) * k;
}

void accumulate_routing_stats(const RoutingInput& in, const RoutingOutput& out,
                              RoutingStats& stats) {
  RoutingStatsAccumulator acc;
  acc.add(in, out, stats);
}

}  // namespace lynx
