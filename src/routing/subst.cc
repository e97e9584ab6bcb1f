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
//      group limit): the substitutes; ids in that order, active ones first. With sim=FILE
//      (per-layer expert similarities, `lynx-moe expert-sim`), each dropped expert d takes
//      instead the free expert c of U with the largest q[c] + beta * sim[d][c].
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
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>

#include "routing/cover_greedy.h"
#include "routing/gating.h"
#include "routing/policies.h"
#include "util/file.h"

namespace lynx::routing {
namespace {

constexpr float kDefaultTau = 0.5f;
constexpr float kDefaultLambda = 0.05f;

enum class Value : int { kMass, kExact };
constexpr const char* kValueNames[] = {"mass", "exact"};
enum class Weights : int { kRenorm, kInherit, kOwn, kDrop, kDropRenorm };
constexpr const char* kWeightNames[] = {"renorm", "inherit", "own", "drop", "drop-renorm"};

// Per MoE layer, an [N x N] similarity of experts (row d: how well each expert stands in for
// d), read from the file `lynx-moe expert-sim` writes:
//   lynx-moe-expert-similarity 1
//   layers L experts N
//   L * N * N numbers, layer by layer, row-major
struct ExpertSimilarity {
  std::string path;
  int n_expert = 0;
  std::vector<std::vector<float>> layers;
};

std::shared_ptr<const ExpertSimilarity> read_similarity(const std::string& path) {
  // Text: n_layer x n x n numbers (256 experts x 100 layers is under 100 MiB).
  std::istringstream f(
      util::read_file_bounded(path, 1 * util::kGiB, "routing spec 'subst': similarity file"));
  std::string magic, w_layers, w_experts;
  int version = 0, n_layer = 0, n = 0;
  f >> magic >> version >> w_layers >> n_layer >> w_experts >> n;
  if (!f || magic != "lynx-moe-expert-similarity" || version != 1 || w_layers != "layers" ||
      w_experts != "experts" || n_layer < 1 || n_layer > 4096 || n < 1 || n > 65536) {
    throw Error("routing spec 'subst': '" + path +
                "' is not an expert similarity file (lynx-moe expert-sim writes them)");
  }
  auto sim = std::make_shared<ExpertSimilarity>();
  sim->path = path;
  sim->n_expert = n;
  sim->layers.assign(size_t(n_layer), std::vector<float>(size_t(n) * n));
  for (auto& layer : sim->layers) {
    for (float& v : layer) {
      if (!(f >> v) || !std::isfinite(v)) {
        throw Error("routing spec 'subst': '" + path + "' is truncated or holds a non-number");
      }
    }
  }
  std::string extra;
  if (f >> extra) throw Error("routing spec 'subst': '" + path + "' has data after its last layer");
  return sim;
}

class SubstPolicy final : public RoutingPolicy {
 public:
  SubstPolicy(float tau, std::vector<float> lambda, bool piggyback, float growth, Value value,
              Weights weights, std::shared_ptr<const ExpertSimilarity> sim, float beta)
      : tau_(tau),
        lambda_(std::move(lambda)),
        piggyback_(piggyback),
        growth_(growth),
        value_(value),
        weights_(weights),
        sim_(std::move(sim)),
        beta_(beta) {}

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
    if (sim_) {
      add("sim=" + sim_->path);
      add("beta=" + fmt_float(beta_));
    }
    return opts.empty() ? "subst" : "subst:" + opts;
  }

  void check(const GatingConfig& g) const override {
    if (sim_ && sim_->n_expert != g.n_expert) {
      throw Error("routing spec '" + spec() + "': the similarity file has " +
                  std::to_string(sim_->n_expert) + " experts, the model " +
                  std::to_string(g.n_expert));
    }
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
    greedy_.grow(q_.data(), B, n, k, lambda, in.cost, in_u_, n_u, u_);
  }

  // The similarity rows of `layer` ([N x N], row d = the dropped expert), or nullptr when the
  // policy has none for it.
  const float* sim_rows(int layer, int n) const {
    if (!sim_ || beta_ <= 0.f || sim_->n_expert != n || layer < 0 ||
        layer >= int(sim_->layers.size())) {
      return nullptr;
    }
    return sim_->layers[size_t(layer)].data();
  }

  // Fills chosen_[0..k) for token t (kept exact experts and substitutes, in key order) with
  // inh_ = the exact weight a substitute inherits (a kept expert: its own) and kept_ flags.
  // Returns false when the token keeps its exact top-k.
  bool choose(const RoutingInput& in, const RoutingOutput& out, int t, const float* sim) {
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    const int32_t* ids = out.ids + size_t(t) * k;
    const float* w = out.weights + size_t(t) * k;
    const float* key = key_row(in, t);
    if (sim == nullptr) {
      // Every exact expert in U is among the token's top-k by selection key within U (it
      // beats every non-exact expert), so this keeps them, in front, and fills the rest with
      // the best substitutes; the group limit, if any, puts exact experts back for
      // substitutes outside the token's groups.
      topk_among(key, u_.data(), int(u_.size()), k, chosen_.data());
      keep_group_limit(g, key, ids, k, chosen_.data());
      if (std::equal(chosen_.begin(), chosen_.end(), ids)) return false;
      // Substitutes (in key order) inherit the dropped experts' weights (in exact order).
      int d = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t* at = std::find(ids, ids + k, chosen_[j]);
        kept_[j] = at != ids + k;
        if (kept_[j]) {
          inh_[j] = w[at - ids];
          continue;
        }
        while (d < k && std::find(chosen_.begin(), chosen_.end(), ids[d]) != chosen_.end()) ++d;
        inh_[j] = d < k ? w[d++] : 0.f;
      }
      return true;
    }
    // With similarities: each dropped expert d (exact order) takes the free expert c of U
    // with the largest q[c] + beta * sim[d][c], q the router probability over the top-k mass.
    int c_n = 0;
    for (int j = 0; j < k; ++j) {
      if (!in_u_[ids[j]]) continue;
      chosen_[c_n] = ids[j];
      inh_[c_n] = w[j];
      kept_[c_n++] = 1;
      taken_[ids[j]] = 1;
    }
    if (c_n == k) {
      for (int j = 0; j < k; ++j) taken_[ids[j]] = 0;
      return false;
    }
    const RowGate& rg = gates_[t];
    const float* z = in.logits + size_t(t) * n;
    const float m = prob_mass(z, rg, g.func, ids, k);
    const float inv = m > 0.f ? 1.f / m : 0.f;
    for (int j = 0; j < k; ++j) {
      const int32_t d = ids[j];
      if (in_u_[d]) continue;
      const float* srow = sim + size_t(d) * n;
      int32_t best = -1;
      float best_s = 0.f;
      for (int32_t c : u_) {
        if (taken_[c] || key[c] == -INFINITY) continue;  // -inf: outside the token's groups
        const float sc = gate_prob(z[c], rg, g.func) * inv + beta_ * srow[c];
        if (best < 0 || sc > best_s) {
          best = c;
          best_s = sc;
        }
      }
      if (best < 0) best = d;  // no free expert of U: keep the exact one (costs an expert)
      chosen_[c_n] = best;
      inh_[c_n] = w[j];
      kept_[c_n++] = best == d;
      taken_[best] = 1;
    }
    for (int j = 0; j < k; ++j) taken_[chosen_[j]] = 0;
    // Key order, carrying the inherited weights and flags along.
    for (int i = 1; i < k; ++i) {
      const int32_t e = chosen_[i];
      const float we = inh_[i];
      const uint8_t ke = kept_[i];
      int j = i;
      for (; j > 0 && logit_before(key, e, chosen_[j - 1]); --j) {
        chosen_[j] = chosen_[j - 1];
        inh_[j] = inh_[j - 1];
        kept_[j] = kept_[j - 1];
      }
      chosen_[j] = e;
      inh_[j] = we;
      kept_[j] = ke;
    }
    return true;
  }

  void remap(const RoutingInput& in, RoutingOutput& out) {
    const GatingConfig& g = *in.gating;
    const int n = g.n_expert, k = g.n_expert_used;
    chosen_.resize(k);
    inh_.resize(k);
    kept_.resize(k);
    exact_.resize(k);
    taken_.assign(n, 0);
    const float* sim = sim_rows(in.layer, n);
    for (int t : rows_) {
      if (!choose(in, out, t, sim)) continue;
      const float* z = in.logits + size_t(t) * n;
      int32_t* ids = out.ids + size_t(t) * k;
      float* w = out.weights + size_t(t) * k;
      const RowGate& rg = gates_[t];
      if (weights_ == Weights::kRenorm) {
        const float target = g.norm_topk ? 0.f : prob_mass(z, rg, g.func, ids, k);
        std::copy(chosen_.begin(), chosen_.end(), ids);
        set_weights(z, rg, g, ids, k, target, w);
        continue;
      }
      std::copy(ids, ids + k, exact_.begin());
      const float m_exact = prob_mass(z, rg, g.func, exact_.data(), k);
      const float scale_own = m_exact > 0.f ? g.weights_scale / m_exact : 0.f;
      float kept_sum = 0.f, exact_sum = 0.f;
      for (int j = 0; j < k; ++j) exact_sum += w[j];
      // Active experts first, in key order; substitutes of the drop modes after them with
      // weight 0 (inactive).
      const bool sub_active = weights_ == Weights::kInherit || weights_ == Weights::kOwn;
      int a = 0;
      for (int pass = 0; pass < 2; ++pass) {
        for (int j = 0; j < k; ++j) {
          const bool active = kept_[j] || sub_active;
          if ((pass == 0) != active) continue;
          const int32_t e = chosen_[j];
          ids[a] = e;
          if (kept_[j]) {
            w[a] = inh_[j];
            kept_sum += inh_[j];
          } else if (weights_ == Weights::kInherit) {
            w[a] = inh_[j];
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
  std::vector<int> rows_;
  std::vector<uint8_t> in_u_;
  CoverGreedy greedy_;
  std::shared_ptr<const ExpertSimilarity> sim_;
  float beta_;
  std::vector<float> q_, inh_;
  std::vector<int32_t> u_, chosen_, exact_;
  std::vector<uint8_t> kept_, taken_;
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
  const std::string path = o.get_string("sim", "");
  bool beta_default = false;
  const float beta = float(o.get_number("beta", 1, 0, 1e6, &beta_default));
  if (path.empty() && !beta_default) {
    throw Error("routing spec 'subst': option 'beta' needs a similarity file (sim=PATH)");
  }
  auto sim = path.empty() ? nullptr : read_similarity(path);
  return std::make_unique<SubstPolicy>(tau, std::move(lambda), piggyback, growth, value, weights,
                                       std::move(sim), beta);
}

}  // namespace lynx::routing
