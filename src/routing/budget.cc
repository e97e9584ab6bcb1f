// budget: an expert budget per step, XShare-like (docs/routing.md, "Policies"). A set C of at
// most M experts is chosen greedily for the whole batch of decode tokens:
//   1. every decode token's exact top-1 joins C first (top-1 always kept, even if that makes
//      |C| > M);
//   2. then the experts with the largest coverage
//        cov(e) = sum over decode tokens t with e in exact_topk(t) of p[t][e]
//      (router probability of the assignments e would serve), ties to the lower id, until
//      |C| = max(M, k). cov is additive over experts, so the greedy on marginal coverage is
//      exactly this ordering. Experts with cov = 0 are added only while |C| < k. With the
//      expert tier (RoutingInput::cost) the order is cov(e) / cost(e): a resident expert
//      takes a slot before a missing one that serves less than cost times its mass.
//   3. each decode token takes its top-k by router logit within C; |C| >= k so every token
//      keeps exactly k distinct experts (M < k therefore still gives k per token).
// Weights follow the remap rule (gating over the chosen set, renormalized or rescaled to the
// token's original top-k mass). Prefill and exact tokens keep exact top-k outside the budget.
#include <algorithm>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

class BudgetPolicy final : public RoutingPolicy {
 public:
  explicit BudgetPolicy(int m) : m_(m) {}
  std::string spec() const override { return "budget:m=" + std::to_string(m_); }
  void check(const GatingConfig& g) const override {
    if (m_ > g.n_expert) {
      throw Error("routing spec '" + spec() + "': m = " + std::to_string(m_) +
                  " is more than the model's " + std::to_string(g.n_expert) + " experts");
    }
  }

  void route(const RoutingInput& in, RoutingOutput& out) override {
    route_topk_keep_gates(in, out, gates_);
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    if (k == n) return;
    cov_.assign(n, 0.f);
    in_c_.assign(n, 0);
    int n_c = 0, n_rows = 0;
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      ++n_rows;
      const float* z = in.logits + size_t(t) * n;
      const int32_t* ids = out.ids + size_t(t) * k;
      const RowGate& rg = gates_[t];
      for (int j = 0; j < k; ++j) cov_[ids[j]] += gate_prob(z[ids[j]], rg, g.func);
      n_c += in_c_[ids[0]] == 0;
      in_c_[ids[0]] = 1;
    }
    if (n_rows == 0) return;
    const int target = std::max(m_, k);
    if (n_c < target) {
      cand_.clear();
      for (int32_t e = 0; e < n; ++e) {
        if (!in_c_[e]) cand_.push_back(e);
      }
      const int need = std::min(target - n_c, int(cand_.size()));
      if (in.cost) {
        for (int32_t e : cand_) cov_[e] /= in.cost[e];
      }
      std::partial_sort(cand_.begin(), cand_.begin() + need, cand_.end(),
                        [this](int32_t a, int32_t b) {
                          return cov_[a] > cov_[b] || (cov_[a] == cov_[b] && a < b);
                        });
      for (int i = 0; i < need; ++i) {
        if (cov_[cand_[i]] <= 0.f && n_c >= k) break;
        in_c_[cand_[i]] = 1;
        ++n_c;
      }
    }
    c_.clear();
    for (int32_t e = 0; e < n; ++e) {
      if (in_c_[e]) c_.push_back(e);
    }
    chosen_.resize(k);
    for (int t = 0; t < in.n_tokens; ++t) {
      if (!is_remappable(in, t)) continue;
      const float* z = in.logits + size_t(t) * n;
      const float* key = key_row(in, t);
      int32_t* ids = out.ids + size_t(t) * k;
      topk_among(key, c_.data(), int(c_.size()), k, chosen_.data());
      keep_group_limit(g, key, ids, k, chosen_.data());
      if (std::equal(chosen_.begin(), chosen_.end(), ids)) continue;
      const RowGate& rg = gates_[t];
      const float target_mass = g.norm_topk ? 0.f : prob_mass(z, rg, g.func, ids, k);
      std::copy(chosen_.begin(), chosen_.end(), ids);
      set_weights(z, rg, g, ids, k, target_mass, out.weights + size_t(t) * k);
    }
  }

 private:
  int m_;
  std::vector<float> cov_;
  std::vector<uint8_t> in_c_;
  std::vector<int32_t> cand_, c_, chosen_;
  std::vector<RowGate> gates_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_budget_policy(SpecOptions& o) {
  const int m = o.get_int("m", 0, 1, 1 << 16);
  if (m == 0) throw Error("routing spec 'budget': needs m=M (experts per step for the batch)");
  return std::make_unique<BudgetPolicy>(m);
}

}  // namespace lynx::routing
