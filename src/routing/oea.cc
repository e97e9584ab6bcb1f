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
// mass=P (ours): k0 becomes a minimum; a token keeps the shortest prefix of its exact top-k
// (at least k0) whose router probability reaches P of its exact top-k mass, and only the
// rest may move. A fixed k0 moves the same number of choices from a token whose router is sure
// (its later choices carry next to no weight) as from one whose router is not (its 5th choice
// may carry a sixth of the mass); the mass prefix moves many choices of the first and few of
// the second. Measured on the tier it lands on the front of a fixed k0, not past it
// (docs/offload.md, "Mass-aware and per-layer oea on the tier"); kept as an option to compare.
// mass-resident (with mass=P; ours): the token's resident choices, which it keeps anyway (they
// are in U0), count toward P first, so the prefix adds only the non-resident choices (in exact
// order) still needed to reach P: a token whose slots hold much of its mass reads less.
// rescue=L (ours): a dropped choice that several tokens share is read after all when the mass
// it keeps for them, summed, reaches L times its read cost (see rescue()).
// k0=K0/K1/... (ours): one k0 per MoE layer. What moved the tier's front: layers differ in what
// a moved choice costs, so the reads are better spent on the layers that mind most.
#include <algorithm>
#include <cmath>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

class OeaPolicy final : public RoutingPolicy {
 public:
  OeaPolicy(std::vector<int> k0, float window, float mass, bool mass_resident, float rescue)
      : k0_(std::move(k0)),
        window_(window),
        mass_(mass),
        mass_resident_(mass_resident),
        rescue_(rescue) {}
  std::string spec() const override {
    std::string k0;
    for (size_t i = 0; i < k0_.size(); ++i) k0 += (i ? "/" : "") + std::to_string(k0_[i]);
    return "oea:k0=" + k0 + (std::isinf(window_) ? "" : ",window=" + fmt_float(window_)) +
           (mass_ > 0.f ? ",mass=" + fmt_float(mass_) : "") +
           (mass_resident_ ? ",mass-resident=1" : "") +
           (rescue_ > 0.f ? ",rescue=" + fmt_float(rescue_) : "");
  }
  void check(const GatingConfig& g) const override {
    check_at_most_k(spec(), "k0", *std::max_element(k0_.begin(), k0_.end()), g);
  }

  void route(const RoutingInput& in, RoutingOutput& out) override {
    route_topk_keep_gates(in, out, gates_);
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    // One k0 per MoE layer (K0/K1/...; the last holds for later layers): layers differ in
    // how much a moved choice costs.
    const int k0 = std::min(k0_[size_t(std::clamp(in.layer, 0, int(k0_.size()) - 1))], k);
    if (k0 >= k || mass_ >= 1.f) return;  // nothing to piggyback: exact top-k
    in_u0_.assign(n, 0);
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      const int32_t* ids = out.ids + size_t(t) * k;
      if (mass_ > 0.f) {
        mark_mass_kept(in.logits + size_t(t) * n, gates_[t], g.func, ids, k, k0,
                       mass_resident_ ? in.resident : nullptr);
      } else {
        for (int j = 0; j < k0; ++j) in_u0_[ids[j]] = 1;
      }
    }
    if (rescue_ > 0.f) rescue(in, out.ids);
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
      // The token's kept prefix (top-k0, or its mass prefix) holds its best keys overall and
      // lies in U0, so the top-k within U0 starts with it: one selection does both phases.
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
  // mass=P: marks in U0 the token's top-k0, then its next exact choices until their
  // probability reaches P of the exact top-k's. With `resident` (mass-resident), the resident
  // choices count first and only non-resident ones are added.
  void mark_mass_kept(const float* z, const RowGate& rg, GatingFunc func, const int32_t* ids, int k,
                      int k0, const uint8_t* resident) {
    const float need = mass_ * prob_mass(z, rg, func, ids, k);
    float cum = 0.f;
    for (int j = 0; j < k; ++j) {
      if (j < k0 || (resident && resident[ids[j]])) cum += gate_prob(z[ids[j]], rg, func);
    }
    for (int j = 0; j < k; ++j) {
      bool keep = j < k0 || (resident && resident[ids[j]]);
      if (!keep && cum < need) {
        keep = true;
        cum += gate_prob(z[ids[j]], rg, func);
      }
      if (keep) in_u0_[ids[j]] = 1;
    }
  }

  // rescue=L: an expert outside U0 and not resident that the batch's tokens chose (in their
  // exact top-k, beyond their kept prefixes) joins U0 when the shares of their exact top-k mass
  // it carries, summed over those tokens, reach L times its cost (1 without a tier): one read
  // then keeps what would otherwise move for several tokens.
  void rescue(const RoutingInput& in, const int32_t* all_ids) {
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    gain_.assign(n, 0.f);
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      const float* z = in.logits + size_t(t) * n;
      const int32_t* ids = all_ids + size_t(t) * k;
      const float m = prob_mass(z, gates_[t], g.func, ids, k);
      if (!(m > 0.f)) continue;
      for (int j = 0; j < k; ++j) {
        const int32_t e = ids[j];
        if (in_u0_[e] || (in.resident && in.resident[e])) continue;
        gain_[e] += gate_prob(z[e], gates_[t], g.func) / m;
      }
    }
    for (int32_t e = 0; e < n; ++e) {
      if (gain_[e] > 0.f && gain_[e] >= rescue_ * (in.cost ? in.cost[e] : 1.f)) in_u0_[e] = 1;
    }
  }

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

  std::vector<int> k0_;  // per MoE layer
  float window_;
  float mass_;  // 0: off
  bool mass_resident_;
  float rescue_;  // 0: off
  std::vector<float> gain_;
  std::vector<int32_t> dropped_, subs_;
  std::vector<uint8_t> in_u0_;
  std::vector<int32_t> u0_, chosen_;
  std::vector<RowGate> gates_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_oea_policy(SpecOptions& o) {
  const double mass = o.get_number("mass", 0, 0, 1);
  // With mass=P, k0 is the minimum prefix and defaults to the top-1.
  std::vector<int> k0;
  for (double v : o.get_number_list("k0", 1, 1 << 16, 1024)) {
    if (v != std::floor(v)) throw Error("routing spec 'oea': option 'k0' is not an integer");
    k0.push_back(int(v));
  }
  if (k0.empty() && mass > 0) k0.push_back(1);
  if (k0.empty()) {
    throw Error("routing spec 'oea': needs k0=K0 (experts each token keeps, < k) or mass=P");
  }
  const double w = o.get_number("window", INFINITY, 0, 1e6);
  const bool mass_resident = o.get_bool("mass-resident", false);
  if (mass_resident && mass == 0) throw Error("routing spec 'oea': mass-resident needs mass=P");
  const double rescue = o.get_number("rescue", 0, 0, 1e6);
  return std::make_unique<OeaPolicy>(std::move(k0), float(w), float(mass), mass_resident,
                                     float(rescue));
}

}  // namespace lynx::routing
