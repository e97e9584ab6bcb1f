// Step accounting: the one object that records what a step did (weight bytes read, time in
// the routing policy and in the routed experts, distinct experts per layer, tokens per
// expert, routing statistics against exact top-k, router-logit traces). The forward pass
// calls it at fixed points and never writes statistics itself; storage is sized at
// construction and reused, so a step allocates nothing here (except trace records, when
// recording is on).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/expert_plan.h"
#include "lynx/context.h"
#include "lynx/routing.h"
#include "model/weights.h"

namespace lynx {

class StepObserver {
 public:
  StepObserver(int n_layer, int n_expert, bool record_trace);

  // ---- The fixed points of a step, in the order the forward pass reaches them ----
  // Start of a step over `batch`: clears the last step's figures.
  void begin_step(std::span<const BatchToken> batch);
  // Weight bytes streamed (a matmul's matrix, embedding rows).
  void weights_read(size_t bytes) { step_.weight_bytes += bytes; }
  // Around the routing policy of an MoE layer: `in`/`out` are what the policy saw and chose
  // (statistics against exact top-k, trace record).
  void routing_begin() { t_route_ = Clock::now(); }
  void routed(const RoutingInput& in, const RoutingOutput& out);
  // Around the routed experts of layer `il` (plan, executor, residual add): `plan` is what
  // ran, `bytes_per_expert` the weight bytes of one expert's matrices.
  void experts_begin() { t_experts_ = Clock::now(); }
  void experts_done(int il, const kernels::ExpertPlan& plan, size_t bytes_per_expert);
  // The input rows of a product with `w` (Context::set_activation_hook); a no-op without a
  // hook. Expert inputs are reported by the executor, which forms them.
  void product_input(const Weight& w, const float* x, int64_t n_rows) const {
    if (act_hook_) (*act_hook_)(w, x, n_rows, {});
  }
  void set_activation_hook(const Context::ActivationHook* h) { act_hook_ = h; }
  bool has_activation_hook() const { return act_hook_ != nullptr; }

  // ---- What was recorded ----
  const StepStats& last_step() const { return step_; }
  const std::vector<RoutingStats>& routing_stats() const { return rstats_; }
  const std::vector<int64_t>& expert_tokens() const { return expert_tokens_; }  // [L x N]
  void reset_stats();
  std::vector<TraceRecord> take_trace();

 private:
  using Clock = std::chrono::steady_clock;
  static double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  int n_expert_;
  bool record_trace_;
  StepStats step_;                     // layers sized n_layer once
  std::vector<RoutingStats> rstats_;   // cumulative per layer since reset_stats
  RoutingStatsAccumulator stats_acc_;  // reusable scratch
  std::vector<int64_t> expert_tokens_;
  std::vector<TraceRecord> trace_;
  Clock::time_point t_route_{}, t_experts_{};
  const Context::ActivationHook* act_hook_ = nullptr;  // owned by the Context
};

}  // namespace lynx
