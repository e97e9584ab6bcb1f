// cover: the batch's expert set as a weighted set cover (docs/routing.md, "cover").
//
// Lynx, OEA and budget choose which experts a decode batch streams by ranks and logit windows;
// what the model loses is router probability mass, and what a step pays is one weight stream
// per distinct expert. This policy trades the two directly. With q[t][e] = p[t][e] / M_t, the
// router probability of expert e for decode token t divided by the mass M_t of the token's
// exact top-k (so every token's exact routing is worth 1, whatever its router's confidence):
//   1. confident experts: the shortest prefix of the token's exact top-k (descending logit)
//      whose mass reaches tau * M_t; the top-1 always. They and the experts that the step's
//      prefill/exact tokens load anyway start the set U.
//   2. greedy cover: a token is served by its k best experts within U, worth V_t(U) = sum of
//      its k largest q over U. The expert with the largest marginal gain
//      G(e) = sum_t (V_t(U + e) - V_t(U)) (ties: lower id) joins U while G(e) >= lambda of
//      the layer, and regardless of lambda while U holds fewer than k experts. So an expert
//      is streamed only when it gives back at least lambda tokens' worth of routed mass.
//      With the expert tier (RoutingInput::cost), gains are per unit of cost: the expert with
//      the largest G(e) / cost(e) joins while that is >= lambda, so an expert read from disk
//      must give back cost times more than a resident one.
//   3. remap: each decode token takes its top-k by logit within U (its confident prefix is
//      in U and ranks first); weights by the remap rule of gating.h.
// tau and lambda take one value per MoE layer (V0/V1/...; the last holds for later layers).
// lambda = 0 for a layer routes it exactly; with growth = G, lambda is scaled by (B / 16)^G.
// Prefill and exact tokens keep exact top-k.
#include <algorithm>
#include <cmath>

#include "routing/cover_greedy.h"
#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

// Defaults: a low-cost operating point on the trained 64x8 model at B = 16
// (docs/evaluation.md); `lynx-moe calibrate` fits lambda per layer for a budget.
constexpr float kDefaultTau = 0.5f;
constexpr float kDefaultLambda = 0.05f;

class CoverPolicy final : public RoutingPolicy {
 public:
  CoverPolicy(std::vector<float> tau, std::vector<float> lambda, bool piggyback, float growth)
      : tau_(std::move(tau)), lambda_(std::move(lambda)), piggyback_(piggyback), growth_(growth) {}

  std::string spec() const override {
    std::string opts;
    auto add = [&](const std::string& s) { opts += (opts.empty() ? "" : ",") + s; };
    auto list = [](const std::vector<float>& v) {
      std::string l;
      for (size_t i = 0; i < v.size(); ++i) l += (i ? "/" : "") + fmt_float(v[i]);
      return l;
    };
    if (tau_.size() != 1 || tau_[0] != kDefaultTau) add("tau=" + list(tau_));
    if (lambda_.size() != 1 || lambda_[0] != kDefaultLambda) add("lambda=" + list(lambda_));
    if (growth_ != 0.f) add("growth=" + fmt_float(growth_));
    if (!piggyback_) add("piggyback-prefill=0");
    return opts.empty() ? "cover" : "cover:" + opts;
  }

  void route(const RoutingInput& in, RoutingOutput& out) override {
    route_topk_keep_gates(in, out, gates_);
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    float lambda = lambda_[size_t(std::clamp(in.layer, 0, int(lambda_.size()) - 1))];
    const float tau = tau_[size_t(std::clamp(in.layer, 0, int(tau_.size()) - 1))];
    if (k >= n || lambda <= 0.f || tau >= 1.f) return;
    rows_.clear();
    for (int t = 0; t < in.n_tokens; ++t) {
      if (is_remappable(in, t)) rows_.push_back(t);
    }
    const int B = int(rows_.size());
    if (B == 0) return;
    // At one lambda both the cut and its cost fall with B (docs/evaluation.md); growth > 0
    // makes lambda the value at B = 16 and scales it as (B / 16)^growth.
    if (growth_ != 0.f) lambda *= float(std::pow(B / 16.0, double(growth_)));

    in_u_.assign(n, 0);
    int n_u = 0;
    auto join = [&](int32_t e) {
      n_u += in_u_[e] == 0;
      in_u_[e] = 1;
    };
    if (piggyback_ && B < in.n_tokens) {  // experts the step streams anyway
      for (int t = 0; t < in.n_tokens; ++t) {
        if (is_remappable(in, t)) continue;
        for (int j = 0; j < k; ++j) join(out.ids[size_t(t) * k + j]);
      }
    }
    // q of every expert for every row, and the confident prefixes.
    q_.resize(size_t(B) * n);
    for (int r = 0; r < B; ++r) {
      const int t = rows_[r];
      const float* z = in.logits + size_t(t) * n;
      const int32_t* ids = out.ids + size_t(t) * k;
      const RowGate& rg = gates_[t];
      float* q = q_.data() + size_t(r) * n;
      const float m = prob_mass(z, rg, g.func, ids, k);
      const float inv = m > 0.f ? 1.f / m : 0.f;
      for (int e = 0; e < n; ++e) q[e] = gate_prob(z[e], rg, g.func) * inv;
      join(ids[0]);
      float cum = q[ids[0]];
      for (int j = 1; j < k && cum < tau; ++j) {
        join(ids[j]);
        cum += q[ids[j]];
      }
    }
    greedy_.grow(q_.data(), B, n, k, lambda, in.cost, in_u_, n_u, u_);
    chosen_.resize(k);
    for (int t : rows_) {
      const float* z = in.logits + size_t(t) * n;
      int32_t* ids = out.ids + size_t(t) * k;
      topk_among(z, u_.data(), int(u_.size()), k, chosen_.data());
      if (std::equal(chosen_.begin(), chosen_.end(), ids)) continue;
      const RowGate& rg = gates_[t];
      const float target = g.norm_topk ? 0.f : prob_mass(z, rg, g.func, ids, k);
      std::copy(chosen_.begin(), chosen_.end(), ids);
      set_weights(z, rg, g, ids, k, target, out.weights + size_t(t) * k);
    }
  }

 private:
  std::vector<float> tau_;     // per MoE layer, like lambda_
  std::vector<float> lambda_;  // per MoE layer; the last holds for later layers
  bool piggyback_;
  float growth_;  // exponent of the B-scaling of lambda (0: none)
  std::vector<int> rows_;
  std::vector<uint8_t> in_u_;
  std::vector<float> q_;
  CoverGreedy greedy_;
  std::vector<int32_t> u_, chosen_;
  std::vector<RowGate> gates_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_cover_policy(SpecOptions& o) {
  // One value per MoE layer (V0/V1/...), else the default for all.
  auto per_layer = [&](const char* key, double hi, float def) {
    std::vector<float> v;
    for (double x : o.get_number_list(key, 0, hi, 1024)) v.push_back(float(x));
    if (v.empty()) v.push_back(def);
    return v;
  };
  std::vector<float> tau = per_layer("tau", 1, kDefaultTau);
  std::vector<float> lambda = per_layer("lambda", 1e6, kDefaultLambda);
  const bool piggyback = o.get_bool("piggyback-prefill", true);
  const float growth = float(o.get_number("growth", 0, 0, 4));
  return std::make_unique<CoverPolicy>(std::move(tau), std::move(lambda), piggyback, growth);
}

}  // namespace lynx::routing
