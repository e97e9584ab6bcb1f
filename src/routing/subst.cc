// subst: cover's batch set with a choice of what a substitute is worth and what weight it
// gets (docs/routing.md, "subst").
//
// cover (cover.cc) chooses the batch's expert set U as a greedy weighted set cover of routed
// mass, then gives each token its top-k by logit within U with the weights renormalized over
// them. Whether a substitute (an expert of U outside the token's exact top-k) should carry
// weight at all, and how much, is a separate question from which experts to stream; this
// policy makes both explicit. With q[t][e] = p[t][e] / M_t (M_t the mass of the token's exact
// top-k):
//   1. confident experts: as cover, the shortest prefix of the exact top-k whose q reaches
//      tau (the top-1 always), plus the experts that the step's prefill/exact tokens load.
//   2. greedy cover with per-layer lambda (scaled by (B / 16)^growth): the expert of largest
//      summed gain joins U while the gain is >= lambda (and while |U| < k). The value of U to
//      a token depends on `value`:
//        mass   (cover's): the sum of its k largest q within U, substitutes included;
//        exact: the q of its exact top-k experts that are in U (a substitute is worth 0).
//   3. remap: the token keeps its exact experts that are in U and fills its other slots with
//      its best experts of U by selection key (the logit, for gatings without a bias or
//      group limit): the substitutes; ids in that order, active ones first.
//      Weights, by `weights`:
//        renorm  (cover's): the gating over the k chosen, renormalized (gating.h);
//        inherit: kept experts keep their exact weight, each substitute takes the exact
//                 weight of a dropped expert (the best substitute the best dropped one's);
//        own:     kept experts keep their exact weight, a substitute gets its own
//                 probability on the exact top-k's scale (p_c / M_t, times the model's
//                 scale), so the token's total weight falls by what the substitutes lack;
//        drop:    substitutes get weight 0 (inactive, not computed), kept experts keep
//                 their exact weight: the dropped experts' share is simply missing;
//        drop-renorm: substitutes inactive, kept experts renormalized to the exact total.
// Prefill and exact tokens keep exact top-k. tau = 1 or lambda = 0 routes a layer exactly.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "routing/gating.h"
#include "routing/policies.h"

namespace lynx::routing {
namespace {

constexpr float kDefaultTau = 0.5f;
constexpr float kDefaultLambda = 0.05f;

enum class Value : int { kMass, kExact };
constexpr const char* kValueNames[] = {"mass", "exact"};
enum class Weights : int { kRenorm, kInherit, kOwn, kDrop, kDropRenorm };
constexpr const char* kWeightNames[] = {"renorm", "inherit", "own", "drop", "drop-renorm"};

class SubstPolicy final : public RoutingPolicy {
 public:
  SubstPolicy(float tau, std::vector<float> lambda, bool piggyback, float growth, Value value,
              Weights weights)
      : tau_(tau),
        lambda_(std::move(lambda)),
        piggyback_(piggyback),
        growth_(growth),
        value_(value),
        weights_(weights) {}

  std::string spec() const override {
    std::string opts;
    auto add = [&](const std::string& s) { opts += (opts.empty() ? "" : ",") + s; };
    if (tau_ != kDefaultTau) add("tau=" + fmt_float(tau_));
    if (lambda_.size() != 1 || lambda_[0] != kDefaultLambda) {
      std::string l;
      for (size_t i = 0; i < lambda_.size(); ++i) l += (i ? "/" : "") + fmt_float(lambda_[i]);
      add("lambda=" + l);
    }
    if (growth_ != 0.f) add("growth=" + fmt_float(growth_));
    if (!piggyback_) add("piggyback-prefill=0");
    if (value_ != Value::kMass) add(std::string("value=").append(kValueNames[int(value_)]));
    if (weights_ != Weights::kRenorm)
      add(std::string("weights=").append(kWeightNames[int(weights_)]));
    return opts.empty() ? "subst" : "subst:" + opts;
  }

  void route(const RoutingInput& in, RoutingOutput& out) override {
    route_topk_keep_gates(in, out, gates_);
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    float lambda = lambda_[size_t(std::clamp(in.layer, 0, int(lambda_.size()) - 1))];
    if (k >= n || lambda <= 0.f || tau_ >= 1.f) return;
    rows_.clear();
    for (int t = 0; t < in.n_tokens; ++t) {
      if (is_remappable(in, t)) rows_.push_back(t);
    }
    const int B = int(rows_.size());
    if (B == 0) return;
    if (growth_ != 0.f) lambda *= float(std::pow(B / 16.0, double(growth_)));
    build_set(in, out, B, lambda);
    remap(in, out);
  }

 private:
  void build_set(const RoutingInput& in, const RoutingOutput& out, int B, float lambda) {
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    in_u_.assign(n, 0);
    int n_u = 0;
    auto join = [&](int32_t e) {
      n_u += in_u_[e] == 0;
      in_u_[e] = 1;
    };
    if (piggyback_ && B < in.n_tokens) {
      for (int t = 0; t < in.n_tokens; ++t) {
        if (is_remappable(in, t)) continue;
        for (int j = 0; j < k; ++j) join(out.ids[size_t(t) * k + j]);
      }
    }
    // q_: per row, q of every expert; with value=exact only the exact top-k's are non-zero,
    // which makes the "k best within U" value the kept exact mass.
    q_.assign(size_t(B) * n, 0.f);
    for (int r = 0; r < B; ++r) {
      const int t = rows_[r];
      const float* z = in.logits + size_t(t) * n;
      const int32_t* ids = out.ids + size_t(t) * k;
      const RowGate& rg = gates_[t];
      float* q = q_.data() + size_t(r) * n;
      const float m = prob_mass(z, rg, g.func, ids, k);
      const float inv = m > 0.f ? 1.f / m : 0.f;
      if (value_ == Value::kMass) {
        for (int e = 0; e < n; ++e) q[e] = gate_prob(z[e], rg, g.func) * inv;
      } else {
        for (int j = 0; j < k; ++j) q[ids[j]] = gate_prob(z[ids[j]], rg, g.func) * inv;
      }
      join(ids[0]);
      float cum = q[ids[0]];
      for (int j = 1; j < k && cum < tau_; ++j) {
        join(ids[j]);
        cum += q[ids[j]];
      }
    }
    best_.assign(size_t(B) * k, 0.f);
    n_best_.assign(B, 0);
    auto offer = [&](int r, float v) {
      float* b = best_.data() + size_t(r) * k;
      int& c = n_best_[r];
      if (c == k && v <= b[k - 1]) return;
      int j = c < k ? c++ : k - 1;
      for (; j > 0 && b[j - 1] < v; --j) b[j] = b[j - 1];
      b[j] = v;
    };
    for (int r = 0; r < B; ++r) {
      const float* q = q_.data() + size_t(r) * n;
      for (int32_t e = 0; e < n; ++e) {
        if (in_u_[e]) offer(r, q[e]);
      }
    }
    for (;;) {
      int32_t best_e = -1;
      float best_g = -1.f;
      for (int32_t e = 0; e < n; ++e) {
        if (in_u_[e]) continue;
        float gain = 0.f;
        for (int r = 0; r < B; ++r) {
          const float v = q_[size_t(r) * n + e];
          const float floor = n_best_[r] < k ? 0.f : best_[size_t(r) * k + k - 1];
          if (v > floor) gain += v - floor;
        }
        if (gain > best_g) {
          best_g = gain;
          best_e = e;
        }
      }
      if (best_e < 0) break;
      if (n_u >= k && !(best_g >= lambda && best_g > 0.f)) break;
      join(best_e);
      for (int r = 0; r < B; ++r) offer(r, q_[size_t(r) * n + best_e]);
    }
    u_.clear();
    for (int32_t e = 0; e < n; ++e) {
      if (in_u_[e]) u_.push_back(e);
    }
  }

  void remap(const RoutingInput& in, RoutingOutput& out) {
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    chosen_.resize(k);
    exact_.resize(k);
    exact_w_.resize(k);
    dropped_w_.resize(k);
    for (int t : rows_) {
      const float* z = in.logits + size_t(t) * n;
      int32_t* ids = out.ids + size_t(t) * k;
      float* w = out.weights + size_t(t) * k;
      // Every exact expert in U is among the token's top-k by selection key within U (it
      // beats every non-exact expert), so this keeps them, in front, and fills the rest with
      // the best substitutes; the group limit, if any, puts exact experts back for
      // substitutes outside the token's groups.
      const float* key = key_row(in, t);
      topk_among(key, u_.data(), int(u_.size()), k, chosen_.data());
      keep_group_limit(g, key, ids, k, chosen_.data());
      if (std::equal(chosen_.begin(), chosen_.end(), ids)) continue;
      const RowGate& rg = gates_[t];
      std::copy(ids, ids + k, exact_.begin());
      std::copy(w, w + k, exact_w_.begin());
      if (weights_ == Weights::kRenorm) {
        const float target = g.norm_topk ? 0.f : prob_mass(z, rg, g.func, ids, k);
        std::copy(chosen_.begin(), chosen_.end(), ids);
        set_weights(z, rg, g, ids, k, target, w);
        continue;
      }
      auto exact_weight = [&](int32_t e) {
        for (int j = 0; j < k; ++j) {
          if (exact_[j] == e) return exact_w_[j];
        }
        return -1.f;  // a substitute
      };
      // The dropped experts' exact weights in exact (descending logit) order.
      int n_drop = 0;
      for (int j = 0; j < k; ++j) {
        if (std::find(chosen_.begin(), chosen_.end(), exact_[j]) == chosen_.end()) {
          dropped_w_[n_drop++] = exact_w_[j];
        }
      }
      const float m_exact = prob_mass(z, rg, g.func, exact_.data(), k);
      const float scale_own = m_exact > 0.f ? g.weights_scale / m_exact : 0.f;
      float kept_sum = 0.f, exact_sum = 0.f;
      for (int j = 0; j < k; ++j) exact_sum += exact_w_[j];
      // chosen_ is in key order with the kept experts in front; active ones first, then
      // inactive substitutes with weight 0 (modes drop and drop-renorm).
      const bool sub_active = weights_ == Weights::kInherit || weights_ == Weights::kOwn;
      int a = 0, sub_rank = 0;
      for (int pass = 0; pass < 2; ++pass) {
        for (int j = 0; j < k; ++j) {
          const int32_t e = chosen_[j];
          const float we = exact_weight(e);
          const bool kept = we >= 0.f;
          const bool active = kept || sub_active;
          if ((pass == 0) != active) continue;
          ids[a] = e;
          if (kept) {
            w[a] = we;
            kept_sum += we;
          } else if (weights_ == Weights::kInherit) {
            w[a] = sub_rank < n_drop ? dropped_w_[sub_rank] : 0.f;
            ++sub_rank;
          } else if (weights_ == Weights::kOwn) {
            w[a] = gate_prob(z[e], rg, g.func) * scale_own;
          } else {
            w[a] = 0.f;
          }
          ++a;
        }
      }
      if (weights_ == Weights::kDropRenorm && kept_sum > 0.f) {
        const float f = exact_sum / kept_sum;
        for (int j = 0; j < k; ++j) w[j] *= f;
      }
    }
  }

  float tau_;
  std::vector<float> lambda_;  // per MoE layer; the last holds for later layers
  bool piggyback_;
  float growth_;
  Value value_;
  Weights weights_;
  std::vector<int> rows_, n_best_;
  std::vector<uint8_t> in_u_;
  std::vector<float> q_, best_, exact_w_, dropped_w_;
  std::vector<int32_t> u_, chosen_, exact_;
  std::vector<RowGate> gates_;
};

}  // namespace

std::unique_ptr<RoutingPolicy> make_subst_policy(SpecOptions& o) {
  const float tau = float(o.get_number("tau", kDefaultTau, 0, 1));
  std::vector<float> lambda;
  for (double v : o.get_number_list("lambda", 0, 1e6, 1024)) lambda.push_back(float(v));
  if (lambda.empty()) lambda.push_back(kDefaultLambda);
  const bool piggyback = o.get_bool("piggyback-prefill", true);
  const float growth = float(o.get_number("growth", 0, 0, 4));
  const auto value = Value(o.get_choice(
      "value", 0, std::vector<std::string>(std::begin(kValueNames), std::end(kValueNames))));
  const auto weights = Weights(o.get_choice(
      "weights", 0, std::vector<std::string>(std::begin(kWeightNames), std::end(kWeightNames))));
  return std::make_unique<SubstPolicy>(tau, std::move(lambda), piggyback, growth, value, weights);
}

}  // namespace lynx::routing
