// TieredExpertExecutor (see tiered_expert_executor.h).
#include "model/tiered_expert_executor.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/matmul_id.h"
#include "lynx/error.h"
#include "lynx/routing.h"

namespace lynx {

TieredExpertExecutor::TieredExpertExecutor(ExpertTier& tier, const Model& model,
                                           kernels::ThreadPool& pool, bool int_acts,
                                           kernels::Bf16Kernel bf16)
    : tier_(tier), pool_(pool), model_(model), cpu_(pool, int_acts, bf16) {
  const size_t n = size_t(model.config().n_expert);
  gate_.assign(n, nullptr);
  up_.assign(n, nullptr);
  down_.assign(n, nullptr);
}

void TieredExpertExecutor::set_activation_hook(const Context::ActivationHook* h) {
  user_hook_ = h;
  if (!h) {
    cpu_.set_activation_hook(nullptr);
    return;
  }
  hook_ = [this](const Weight& w, const float* x, int64_t n_rows,
                 std::span<const int32_t> per_expert) {
    const LayerWeights& l = model_.layer(hook_layer_);
    const Weight* own = &w == &view_.gate_exps   ? &l.gate_exps
                        : &w == &view_.up_exps   ? &l.up_exps
                        : &w == &view_.down_exps ? &l.down_exps
                                                 : &w;
    (*user_hook_)(*own, x, n_rows, per_expert);
  };
  cpu_.set_activation_hook(&hook_);
}

const uint8_t* TieredExpertExecutor::resident(int il) {
  tier_.resident(il, resident_);
  return resident_.data();
}

const float* TieredExpertExecutor::cost(int /*il*/) {
  const float miss = tier_.miss_cost();
  cost_.resize(resident_.size());
  for (size_t e = 0; e < resident_.size(); ++e) cost_[e] = resident_[e] ? 1.f : miss;
  return cost_.data();
}

// The residual stream changes little in one layer, so the next routed layer's router applied
// to this layer's input (renormed with the next layer's norm weights: x / w_il * w_next is
// RMSNorm(h) * w_next) ranks the experts that layer will want (pre-gated MoE, Hwang et al.
// 2024, predict the same way). Each token's first P experts by the next router's selection
// order (P = ExpertTier::prefetch_per_token), most voted first, at most max(2k, P) reads per
// layer, so a batch does not flood the readers with guesses ahead of the reads it needs.
void TieredExpertExecutor::prefetch_next(int il, const kernels::ActRows& x) {
  const ModelConfig& c = model_.config();
  int next = il + 1;
  while (next < c.n_layer && !c.layer_routed(next)) ++next;
  if (next >= c.n_layer || tier_.layer(next).layer < 0) return;
  // What the experts of il read and what the router of `next` reads are the same RMSNorm(h)
  // times a weight per dimension: the FFN norm; on gemma4 (kMoeDense) the experts read it
  // times pre_ffw_norm_2 and the router times router_scale / sqrt(E) (1 without a scale).
  const LayerWeights& cur = model_.layer(il);
  const LayerWeights& nl = model_.layer(next);
  const bool cur_g = c.layer_kinds[size_t(il)].ffn == FfnKind::kMoeDense;
  const bool next_g = c.layer_kinds[size_t(next)].ffn == FfnKind::kMoeDense;
  const float* in = cur_g ? cur.pre_ffw_norm_2 : cur.ffn_norm;
  const float* out = next_g ? nl.router_scale : nl.ffn_norm;
  if (!in || (!out && !next_g) || nl.router.rows != c.n_expert) return;
  const int T = x.n_tok, N = c.n_expert, K = c.n_expert_used;
  const int P = std::min(tier_.prefetch_per_token(), N);
  const int64_t E = x.cols;
  if (T <= 0 || nl.router.cols != E) return;
  const float root = next_g ? 1.f / std::sqrt(float(E)) : 1.f;
  pre_x_.resize(size_t(T) * size_t(E));
  for (int t = 0; t < T; ++t) {
    const float* src = x.x + size_t(t) * size_t(E);
    float* dst = &pre_x_[size_t(t) * size_t(E)];
    for (int64_t i = 0; i < E; ++i) {
      const float w = out ? out[i] * root : 1.f;
      dst[i] = in[i] != 0.f ? src[i] / in[i] * w : 0.f;
    }
  }
  pre_logits_.resize(size_t(T) * size_t(N));
  kernels::matmul(pool_, nl.router.type, nl.router.mat(0), nl.router.rows, nl.router.cols,
                  pre_x_.data(), E, T, pre_logits_.data(), N, nl.router.layout);
  const float* keys = pre_logits_.data();
  for (int t = 0; t < T && nl.router_b; ++t) {
    for (int e = 0; e < N; ++e) pre_logits_[size_t(t) * N + size_t(e)] += nl.router_b[e];
  }
  if (needs_selection_keys(c.gating) && (!c.gating.select_bias || nl.exp_probs_b)) {
    pre_keys_.resize(pre_logits_.size());
    selection_keys(c.gating, pre_logits_.data(), nl.exp_probs_b, T, pre_keys_.data());
    keys = pre_keys_.data();
  }
  pre_votes_.assign(size_t(N), 0);
  pre_order_.resize(size_t(N));
  for (int t = 0; t < T; ++t) {
    const float* row = keys + size_t(t) * N;
    for (int e = 0; e < N; ++e) pre_order_[size_t(e)] = e;
    std::partial_sort(pre_order_.begin(), pre_order_.begin() + P, pre_order_.end(),
                      [row](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int j = 0; j < P; ++j) ++pre_votes_[size_t(pre_order_[size_t(j)])];
  }
  pre_order_.clear();
  for (int e = 0; e < N; ++e) {
    if (pre_votes_[size_t(e)] > 0) pre_order_.push_back(e);
  }
  std::stable_sort(pre_order_.begin(), pre_order_.end(), [this](int32_t a, int32_t b) {
    return pre_votes_[size_t(a)] > pre_votes_[size_t(b)];
  });
  tier_.prefetch(next, pre_order_, std::max(2 * K, P));
}

void TieredExpertExecutor::run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il,
                               const LayerWeights& layer, float* out) {
  kernels::mix_id(plan, rows(plan, x, il, layer), x.cols, out);
}

const float* TieredExpertExecutor::rows(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                                        int il, const LayerWeights& layer) {
  const TierLayer& tl = tier_.layer(il);
  hook_layer_ = il;
  view_ = layer;
  view_.gate_exps.mats = gate_.data();
  view_.up_exps.mats = up_.data();
  view_.down_exps.mats = down_.data();
  view_.gate_exps.layout = tl.gate.layout;
  view_.up_exps.layout = tl.up.layout;
  view_.down_exps.layout = tl.down.layout;

  // Claims hold slots pinned: released on every way out, a failed read included.
  struct Release {
    ExpertTier& tier;
    std::vector<ExpertTier::Claim>& claims;
    ~Release() {
      tier.release(claims);
      claims.clear();
    }
  };
  const float* rows = cpu_.rows(plan, x, view_, {});  // sizes the rows when nothing is active
  want_.assign(plan.active.begin(), plan.active.end());
  bool first_claim = true;
  while (!want_.empty()) {
    claims_.clear();
    Release release{tier_, claims_};
    tier_.claim(il, want_, claims_);
    // This layer's reads are queued first; the guesses for the next layer go behind them.
    if (first_claim && tier_.prefetch_per_token() > 0) prefetch_next(il, x);
    first_claim = false;
    for (const ExpertTier::Claim& c : claims_) {
      gate_[size_t(c.expert)] = tier_.gate(c.slot);
      up_[size_t(c.expert)] = tier_.up(c.slot, il);
      down_[size_t(c.expert)] = tier_.down(c.slot, il);
    }
    // What is resident now, computed while the rest is read; then each part that has been
    // read by the time the previous part is done.
    done_.assign(claims_.size(), 0);
    std::vector<uint8_t>& done = done_;
    size_t left = claims_.size();
    while (left > 0) {
      part_.clear();
      for (size_t i = 0; i < claims_.size(); ++i) {
        if (!done[i] && tier_.ready(claims_[i])) {
          part_.push_back(claims_[i].expert);
          done[i] = 1;
        }
      }
      if (part_.empty()) {  // nothing read yet: wait for the first one still out
        for (size_t i = 0; i < claims_.size(); ++i) {
          if (done[i]) continue;
          tier_.wait(claims_[i]);
          part_.push_back(claims_[i].expert);
          done[i] = 1;
          break;
        }
      }
      std::sort(part_.begin(), part_.end());
      left -= part_.size();
      rows = cpu_.rows(plan, x, view_, part_);
    }
  }
  return rows;
}

}  // namespace lynx
