// Internal state of a Context and the batched forward pass over it.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/expert_plan.h"
#include "kernels/thread_pool.h"
#include "lynx/context.h"
#include "model/expert_executor.h"

namespace lynx {

// KV cache of one sequence: per layer, [cap x kv_dim] keys and values (F32, grown on demand
// up to the context limit).
struct SequenceLayer {
  std::vector<float> k, v;
};
struct Sequence {
  bool in_use = false;
  int32_t len = 0;  // positions stored
  int32_t cap = 0;  // positions allocated
  std::vector<SequenceLayer> layers;
};

// Per-step scratch, grown to the largest batch seen and reused (no allocation per step in
// steady state).
struct StepBuffers {
  std::vector<float> x, xn, q, k, v, attn, tmp;  // [T x ...]
  std::vector<float> router;                     // [T x N]
  std::vector<int32_t> ids;                      // [T x k]
  std::vector<float> weights;                    // [T x k]
  kernels::ExpertPlan plan;                      // the routed assignments grouped by expert
  std::vector<float> rope_cs;                    // [T x hd/2 x 2] (cos, sin) per token
  std::vector<float> sh_gate, sh_up, sh_down;    // shared expert / dense FFN
  std::vector<float> out_in;                     // normed rows needing logits
  std::vector<int32_t> out_rows;                 // token index of each logits row
  // Activations quantized for the integer path (Q8_0/Q4_0 weights, exact_activations off):
  // a block's input (xq_in: normed x; xq_mid: attention output or FFN hidden).
  kernels::QuantizedActs xq_in, xq_mid;
};

struct Context::Impl {
  Impl(const Model& m, const ContextOptions& o);

  Sequence& sequence(int32_t seq);
  void validate(std::span<const BatchToken> batch);
  void reserve_cache(Sequence& s, int32_t need);
  void eval(std::span<const BatchToken> batch);

  const Model& model;
  kernels::ThreadPool pool;
  int n_ctx;
  bool record_trace;
  bool int_acts;  // !ContextOptions::exact_activations
  std::unique_ptr<RoutingPolicy> policy;
  std::unique_ptr<ExpertExecutor> experts;
  std::string routing_spec;
  std::vector<Sequence> seqs;
  StepBuffers buf;
  std::vector<std::vector<float>> thread_scores;  // attention scores, one per worker
  std::vector<float> out_logits;                  // [n_out x n_vocab]
  int n_out = 0;
  StepStats step;
  std::vector<RoutingStats> rstats;
  RoutingStatsAccumulator stats_acc;  // reusable scratch: no allocation per step
  std::vector<TraceRecord> trace;
  Context::RouterOverride router_override;
  std::vector<int64_t> expert_tokens;  // [n_layer x N]
};

// Runs the whole model over a validated batch whose cache space is reserved.
void forward(Context::Impl& ctx, std::span<const BatchToken> batch);

}  // namespace lynx
