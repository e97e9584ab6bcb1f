// The routed-expert step of an MoE layer behind one interface: given the plan (which tokens
// go to which expert, with which weight), the layer's normed hidden states and the layer's
// expert weights, write the weighted sum of the experts' SwiGLU FFNs for every token. The
// forward pass (forward.cc) builds the plan and calls run; how and where the experts are
// computed is the executor's business. CpuExpertExecutor (cpu_expert_executor.h) runs them
// on this process's kernels; an executor over MPI ranks or a GPU is a new file implementing
// this interface (docs/architecture.md).
#pragma once
#include <functional>
#include <memory>

#include "kernels/expert_plan.h"
#include "kernels/thread_pool.h"
#include "lynx/context.h"
#include "lynx/model.h"
#include "model/weights.h"

namespace lynx {

class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;

  // out[t] (n_embd floats) = sum over the token's active slots s, in slot order, of
  //   plan.weight[t, s] * down_e(silu(gate_e x[t]) * up_e x[t]),   e = the slot's expert,
  // for t in [0, plan.n_tokens); x holds the [T x n_embd] normed hidden states (its Q8_0
  // quantization, when made, is shared with the layer's other products: an executor that
  // needs it calls x.quantize). `layer` gives gate_exps, up_exps, down_exps. The result must
  // not depend on the other tokens of the batch (the batch-invariance contract of the
  // goldens), only on the token's own slots. `layer` is the weights of the model's layer il
  // (an executor that keeps per-layer state, the expert tier's slots or a rank's share of the
  // experts, finds it by il).
  virtual void run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il,
                   const LayerWeights& layer, float* out) = 0;

  // Reports the grouped input rows of every expert product to the hook (Context::
  // set_activation_hook; the imatrix collector); nullptr: none. An executor that computes
  // only some experts here reports only those; the default reports nothing.
  virtual void set_activation_hook(const Context::ActivationHook* /*hook*/) {}

  // [N] 1 = expert e of layer il is in memory now, for the routing (RoutingInput::resident);
  // nullptr: every expert is (the default). Valid until the next call.
  virtual const uint8_t* resident(int /*il*/) { return nullptr; }
  // [N] RoutingInput::cost of the experts of layer il, as of the last resident(il) call;
  // nullptr: every expert costs the same (the default).
  virtual const float* cost(int /*il*/) { return nullptr; }
};

// ContextOptions::experts: makes a context's executor from its thread pool and product path
// (int_acts = !exact_activations). Made inside the engine (expert parallelism); the public
// API only passes it along.
class ExpertBackend {
 public:
  using Make = std::function<std::unique_ptr<ExpertExecutor>(kernels::ThreadPool& pool,
                                                             bool int_acts)>;
  explicit ExpertBackend(Make make) : make(std::move(make)) {}
  Make make;
};

}  // namespace lynx
