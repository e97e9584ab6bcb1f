// oea: Opportunistic Expert Activation (Oncescu et al. 2025, arXiv 2511.02237;
// docs/routing.md). Each decode token keeps its top-k0 experts, the quality baseline; U0 is
// the union of those over the batch, the experts that are loaded anyway; each token then fills
// its remaining k - k0 slots with its best experts (by router logit) inside U0 ("piggyback").
// When U0 offers a token fewer than k candidates, its remaining slots take its next best
// experts overall (its exact top-k members not chosen yet), so every token keeps exactly k.
// Prefill and exact tokens keep exact top-k and do not contribute to U0.
// window=W (ours, not the paper's): a substitute replaces one of the token's dropped exact
// choices only when its key is at most W below that choice's (pairing the best substitute with
// the best dropped choice, and so on); otherwise the token keeps its own choice. The experts a
// token then reads beyond U0 cost a read each, so W trades reads against how far a substitute
// may be from what it replaces (on the expert tier, where a read is a disk read).
#include <algorithm>
#include <cmath>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

class OeaPolicy final : public RoutingPolicy {
 public:
  OeaPolicy(int k0, float window) : k0_(k0), window_(window) {}
  std::string spec() const override {
    return "oea:k0=" + std::to_string(k0_) +
           (std::isinf(window_) ? "" : ",window=" + fmt_float(window_));
  }
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
      if (!std::isinf(window_)) keep_close_choices(key, ids, k);
      keep_group_limit(g, key, ids, k, chosen_.data());
      if (std::equal(chosen_.begin(), chosen_.end(), ids)) continue;
      const RowGate& rg = gates_[t];
      const float target = g.norm_topk ? 0.f : prob_mass(z, rg, g.func, ids, k);
      std::copy(chosen_.begin(), chosen_.end(), ids);
      set_weights(z, rg, g, ids, k, target, out.weights + size_t(t) * k);
    }
  }

 private:
  // window: chosen_ (sorted by key) holds the token's kept exact choices and its substitutes;
  // a substitute more than window_ below the exact choice it stands for gives its place back.
  void keep_close_choices(const float* key, const int32_t* ids, int k) {
    auto in = [](const std::vector<int32_t>& v, int32_t e) {
      return std::find(v.begin(), v.end(), e) != v.end();
    };
    dropped_.clear();
    subs_.clear();
    for (int j = 0; j < k; ++j) {
      if (!in(chosen_, ids[j])) dropped_.push_back(ids[j]);  // ids: exact, best first
    }
    for (int32_t e : chosen_) {
      if (std::find(ids, ids + k, e) == ids + k) subs_.push_back(e);  // best first
    }
    bool changed = false;
    for (size_t i = 0; i < subs_.size() && i < dropped_.size(); ++i) {
      if (key[dropped_[i]] - key[subs_[i]] > window_) {
        *std::find(chosen_.begin(), chosen_.end(), subs_[i]) = dropped_[i];
        changed = true;
      }
    }
    if (changed) {
      std::sort(chosen_.begin(), chosen_.end(),
                [key](int32_t a, int32_t b) { return logit_before(key, a, b); });
    }
  }

  int k0_;
  float window_;
  std::vector<int32_t> dropped_, subs_;
  std::vector<uint8_t> in_u0_;
  std::vector<int32_t> u0_, chosen_;
  std::vector<RowGate> gates_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_oea_policy(SpecOptions& o) {
  const int k0 = o.get_int("k0", 0, 1, 1 << 16);
  if (k0 == 0) throw Error("routing spec 'oea': needs k0=K0 (experts each token keeps, < k)");
  const double w = o.get_number("window", INFINITY, 0, 1e6);
  return std::make_unique<OeaPolicy>(k0, float(w));
}

}  // namespace lynx::routing
