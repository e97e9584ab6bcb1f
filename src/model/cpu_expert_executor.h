// The expert step on this process's CPU kernels: grouped matmuls over the plan
// (kernels::matmul_id), SwiGLU, and the weighted mix (kernels::mix_id).
#pragma once
#include <vector>

#include "lynx/context.h"
#include "model/expert_executor.h"

namespace lynx {

class CpuExpertExecutor final : public ExpertExecutor {
 public:
  // int_acts: products with Q8_0/Q4_0 weights take the integer path (activations quantized
  // to Q8_0 blocks, ContextOptions::exact_activations off).
  CpuExpertExecutor(kernels::ThreadPool& pool, bool int_acts) : pool_(pool), int_acts_(int_acts) {}

  void run(const kernels::ExpertPlan& plan, kernels::ActRows& x, const LayerWeights& layer,
           float* out) override;
  // Reports the grouped input rows of the gate/up and down products (Context::
  // set_activation_hook); nullptr: none.
  void set_activation_hook(const Context::ActivationHook* h) { act_hook_ = h; }

 private:
  kernels::ThreadPool& pool_;
  bool int_acts_;
  const Context::ActivationHook* act_hook_ = nullptr;  // owned by the Context
  // Grouped rows (plan order), grown to the largest plan seen and reused.
  std::vector<float> xin_;            // [rows x E] F32 input rows (float path)
  std::vector<float> gate_, up_;      // [rows x F]
  std::vector<float> down_;           // [rows x E]
  kernels::QuantizedActs xq_rows_;    // [rows x E] quantized input rows (integer path)
  kernels::QuantizedActs xq_hidden_;  // [rows x F] quantized SwiGLU output (integer path)
};

}  // namespace lynx
