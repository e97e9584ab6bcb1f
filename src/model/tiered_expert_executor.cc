// TieredExpertExecutor (see tiered_expert_executor.h).
#include "model/tiered_expert_executor.h"

#include <algorithm>

#include "kernels/matmul_id.h"
#include "lynx/error.h"

namespace lynx {

TieredExpertExecutor::TieredExpertExecutor(ExpertTier& tier, const Model& model,
                                           kernels::ThreadPool& pool, bool int_acts,
                                           kernels::Bf16Kernel bf16)
    : tier_(tier), model_(model), cpu_(pool, int_acts, bf16) {
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

void TieredExpertExecutor::run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il,
                               const LayerWeights& layer, float* out) {
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
  while (!want_.empty()) {
    claims_.clear();
    Release release{tier_, claims_};
    tier_.claim(il, want_, claims_);
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
  kernels::mix_id(plan, rows, x.cols, out);
}

}  // namespace lynx
