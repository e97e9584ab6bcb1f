// oea: Opportunistic Expert Activation (Oncescu et al. 2025, arXiv 2511.02237;
// docs/routing.md). Each decode token keeps its top-k0 experts, the quality baseline; U0 is
// the union of those over the batch, the experts that are loaded anyway; each token then fills
// its remaining k - k0 slots with its best experts (by router logit) inside U0 ("piggyback").
// When U0 offers a token fewer than k candidates, its remaining slots take its next best
// experts overall (its exact top-k members not chosen yet), so every token keeps exactly k.
// Prefill and exact tokens keep exact top-k and do not contribute to U0.
#include <algorithm>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

class OeaPolicy final : public RoutingPolicy {
 public:
  explicit OeaPolicy(int k0) : k0_(k0) {}
  std::string spec() const override { return "oea:k0=" + std::to_string(k0_); }
  void check(const GatingConfig& g) const override { check_at_most_k(spec(), "k0", k0_, g); }

  void route(const RoutingInput& in, RoutingOutput& out) override {
    route_topk_keep_gates(in, out, gates_);
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    const int k0 = std::min(k0_, k);
    if (k0 >= k) return;  // nothing to piggyback: exact top-k
    in_u0_.assign(n, 0);
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      for (int j = 0; j < k0; ++j) in_u0_[out.ids[size_t(t) * k + j]] = 1;
    }
    u0_.clear();
    for (int32_t e = 0; e < n; ++e) {
      // With the expert tier, the experts in memory are loaded anyway too.
      if (in_u0_[e] || (in.resident && in.resident[e])) u0_.push_back(e);
    }
    chosen_.resize(k);
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      const float* z = in.logits + size_t(t) * n;
      const float* key = key_row(in, t);
      int32_t* ids = out.ids + size_t(t) * k;
      // The token's top-k0 are its best keys overall and lie in U0, so the top-k within U0
      // starts with them: one selection does both phases.
      int c = topk_among(key, u0_.data(), int(u0_.size()), k, chosen_.data());
      for (int j = 0; c < k && j < k; ++j) {  // fallback: next best overall
        if (std::find(chosen_.begin(), chosen_.begin() + c, ids[j]) == chosen_.begin() + c) {
          chosen_[c++] = ids[j];
        }
      }
      std::sort(chosen_.begin(), chosen_.end(),
                [key](int32_t a, int32_t b) { return logit_before(key, a, b); });
      keep_group_limit(g, key, ids, k, chosen_.data());
      if (std::equal(chosen_.begin(), chosen_.end(), ids)) continue;
      const RowGate& rg = gates_[t];
      const float target = g.norm_topk ? 0.f : prob_mass(z, rg, g.func, ids, k);
      std::copy(chosen_.begin(), chosen_.end(), ids);
      set_weights(z, rg, g, ids, k, target, out.weights + size_t(t) * k);
    }
  }

 private:
  int k0_;
  std::vector<uint8_t> in_u0_;
  std::vector<int32_t> u0_, chosen_;
  std::vector<RowGate> gates_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_oea_policy(SpecOptions& o) {
  const int k0 = o.get_int("k0", 0, 1, 1 << 16);
  if (k0 == 0) throw Error("routing spec 'oea': needs k0=K0 (experts each token keeps, < k)");
  return std::make_unique<OeaPolicy>(k0);
}

}  // namespace lynx::routing
