// The expert step over the expert tier (expert_tier.h): the plan's experts are claimed in the
// tier's slots and computed in parts, first those already resident while the reader threads
// read the others, then each read expert as soon as it is there; every row is what the
// resident CpuExpertExecutor computes, bit for bit (the slots hold the same packed bytes).
#pragma once
#include <vector>

#include "model/cpu_expert_executor.h"
#include "model/expert_tier.h"

namespace lynx {

class TieredExpertExecutor final : public ExpertExecutor {
 public:
  TieredExpertExecutor(ExpertTier& tier, const Model& model, kernels::ThreadPool& pool,
                       bool int_acts, kernels::Bf16Kernel bf16 = kernels::Bf16Kernel::kNone);

  void run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il, const LayerWeights& layer,
           float* out) override;
  // The step before the mix, as CpuExpertExecutor::rows: every grouped row's expert output,
  // [plan.rows() x n_embd] in plan order (valid until the next call). Expert parallelism
  // (src/dist) gathers a rank's rows and mixes them itself.
  const float* rows(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il,
                    const LayerWeights& layer);
  // The hook sees the model's own expert weights (the imatrix collector finds them by
  // address), not the slot views this executor computes with.
  void set_activation_hook(const Context::ActivationHook* h) override;
  const uint8_t* resident(int il) override;
  const float* cost(int il) override;

 private:
  // Predicts the experts of the routed layer after il from this layer's normed rows x and
  // queues them for reading (ExpertTier::prefetch), so the reads overlap this layer's
  // compute and the next layer's attention.
  void prefetch_next(int il, const kernels::ActRows& x);

  ExpertTier& tier_;
  kernels::ThreadPool& pool_;
  const Model& model_;
  CpuExpertExecutor cpu_;
  LayerWeights view_;  // the layer with its experts' matrices in the slots
  std::vector<const uint8_t*> gate_, up_, down_;  // [N] slot matrices of the claimed experts
  std::vector<int32_t> want_, part_;
  std::vector<uint8_t> done_;  // per claim of a wave: computed already
  std::vector<ExpertTier::Claim> claims_;
  const Context::ActivationHook* user_hook_ = nullptr;
  Context::ActivationHook hook_;  // user_hook_ with the view's weights mapped back
  int hook_layer_ = -1;
  std::vector<uint8_t> resident_;  // resident(): the tier's snapshot
  std::vector<float> cost_;        // cost(): 1 resident, the tier's miss cost otherwise
  std::vector<float> pre_x_, pre_logits_, pre_keys_;  // prefetch_next's rows and router output
  std::vector<int32_t> pre_votes_, pre_order_;
};

}  // namespace lynx
