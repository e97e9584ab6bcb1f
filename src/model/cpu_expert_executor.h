// The expert step on this process's CPU kernels: grouped matmuls over the plan
// (kernels::matmul_id), SwiGLU, and the weighted mix (kernels::mix_id).
#pragma once
#include <span>
#include <vector>

#include "kernels/matmul_bf16.h"
#include "lynx/context.h"
#include "model/expert_executor.h"
#include "model/scratch_vector.h"

namespace lynx {

class CpuExpertExecutor final : public ExpertExecutor {
 public:
  // int_acts: products with weights of a type that has an integer kernel (the type table's
  // int_kernel: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, IQ4_XS) take the integer path (activations
  // quantized to the type's activation blocks, ContextOptions::exact_activations off).
  // bf16: not kNone, BF16/F16 expert matrices in panels take the BF16 fast mode on that
  // kernel (ContextOptions::bf16_activations, kernels/matmul_bf16.h).
  CpuExpertExecutor(kernels::ThreadPool& pool, bool int_acts,
                    kernels::Bf16Kernel bf16 = kernels::Bf16Kernel::kNone)
      : pool_(pool), int_acts_(int_acts), bf16_(bf16) {}

  void run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il, const LayerWeights& layer,
           float* out) override;
  // The step before the mix: every grouped row's expert output, [plan.rows() x n_embd] in
  // plan order (valid until the next call). An executor that combines rows computed
  // elsewhere (src/dist) mixes them itself with kernels::mix_id.
  const float* rows(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                    const LayerWeights& layer);
  // The same for the rows of `experts` only (a subset of plan.active, ascending): their rows
  // of the returned [plan.rows() x n_embd] are written, the others' kept from earlier calls
  // with the same plan. Each row is bit-identical to what rows() gives it (the expert tier
  // computes a plan in parts that fit its slots).
  const float* rows(const kernels::ExpertPlan& plan, kernels::ActRows& x, const LayerWeights& layer,
                    std::span<const int32_t> experts);
  // Reports the grouped input rows of the gate/up and down products (Context::
  // set_activation_hook); nullptr: none.
  void set_activation_hook(const Context::ActivationHook* h) override { act_hook_ = h; }

 private:
  // rows() for `experts`; down_over_hidden: the caller mixes the result before the next call
  // (run()), so on the integer path the down rows may overwrite gate/up.
  const float* rows(const kernels::ExpertPlan& plan, kernels::ActRows& x, const LayerWeights& layer,
                    std::span<const int32_t> experts, bool down_over_hidden);

  kernels::ThreadPool& pool_;
  bool int_acts_;
  kernels::Bf16Kernel bf16_;
  const Context::ActivationHook* act_hook_ = nullptr;  // owned by the Context
  // Grouped rows (plan order), grown to the largest plan seen and reused.
  ScratchFloats xin_;                      // [rows x E] F32 input rows (float path)
  ScratchFloats hidden_;                   // [2 x rows x F]: gate, then up (see rows())
  ScratchFloats down_;                     // [rows x E]
  std::vector<int32_t> wave_rows_;         // the grouped rows of the experts computed
  std::vector<int32_t> hook_counts_;       // [N] rows per expert for one expert's hook call
  kernels::QuantizedActs xq_rows_;         // [rows x E] quantized input rows (integer path)
  kernels::QuantizedActs xq_hidden_;       // [rows x F] quantized SwiGLU output (integer path)
  kernels::Bf16Acts xb_rows_, xb_hidden_;  // the same two rounded to BF16 (BF16 fast mode)
};

}  // namespace lynx
