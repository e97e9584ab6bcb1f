// Routing policies: the seam between an MoE layer's router and its expert computation.
//
// Per MoE layer and per step, a policy receives the router logits of every token in the
// step ([T x N], row-major), each token's phase, and the model's gating config, and returns
// for every token exactly k distinct expert ids with their mixing weights. With a group limit
// (GatingConfig::n_group) every active expert lies in one of the token's allowed groups. Exact
// top-k is the model as trained; Lynx and its peers (docs/routing.md) remap low-confidence choices
// so the batch activates fewer distinct experts. Shared experts are not routed and never pass
// through here.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lynx/error.h"

namespace lynx {

// How router logits z become expert probabilities p (llama.cpp's expert_gating_func).
//   kSoftmax        p = softmax(z) over all N
//   kSigmoid        p = sigmoid(z), per expert (DeepSeek-V3, GLM-4.5)
//   kSoftmaxWeight  experts chosen by z; the weights are a softmax over the chosen experts'
//                   logits only (gpt-oss). Its p, for statistics and thresholds, is the
//                   softmax over all N.
enum class GatingFunc : uint8_t { kSoftmax, kSigmoid, kSoftmaxWeight };

struct GatingConfig {
  int n_expert = 0;       // N
  int n_expert_used = 0;  // k
  GatingFunc func = GatingFunc::kSoftmax;
  bool norm_topk = true;      // renormalize the k selected weights to sum 1
  float weights_scale = 1.f;  // multiplies the final weights (DeepSeek's routed_scaling_factor)
  // Selection bias (DeepSeek-V3's e_score_correction_bias, llama.cpp's exp_probs_b): a
  // per-layer, per-expert term added to p to CHOOSE experts, never to weigh them. With it the
  // routing input needs selection keys (RoutingInput::select, selection_keys()).
  bool select_bias = false;
  // Group-limited top-k (expert_group_count / expert_group_used_count): the N experts form
  // n_group groups of N / n_group consecutive ids; a token may choose only inside its
  // n_group_used best groups, a group's score being the sum of its two best selection scores
  // (p + bias). n_group = 1: no limit.
  int n_group = 1;
  int n_group_used = 1;
};

// True when experts are not chosen by plain logit order (selection bias or group limit): the
// routing input then carries selection keys.
bool needs_selection_keys(const GatingConfig& g);

// The selection keys of T tokens ([T x N], written to `keys`): the order in which experts are
// chosen, higher first, in logit units (docs/routing.md "Selection keys").
//   no bias:   key = z
//   bias b:    key = L(p + b), L the log-odds for kSigmoid (the logarithm for kSoftmax),
//              extended linearly outside (1e-6, 1 - 1e-6): strictly increasing, so the order
//              is the order of p + b, and with b = 0 the key is z again (up to rounding)
//   group limit: experts outside the token's n_group_used best groups get key -inf.
// `bias` is the layer's [N] selection bias, nullptr when the gating has none.
void selection_keys(const GatingConfig& g, const float* logits, const float* bias, int n_tokens,
                    float* keys);

// Per-token flags of a step.
enum TokenFlags : uint8_t {
  kTokenDecode = 0,
  kTokenPrefill = 1 << 0,  // part of a prompt (prefill chunk): always exact top-k
  kTokenExact = 1 << 1,    // decode token of a request that asked for exact routing
};

struct RoutingInput {
  const float* logits = nullptr;  // [T x N] raw router logits (pre-softmax / pre-sigmoid)
  // [T x N] selection keys (selection_keys()): policies choose by them and weigh by the logits.
  // nullptr: the logits themselves; required when needs_selection_keys(*gating).
  const float* select = nullptr;
  const uint8_t* flags = nullptr;  // [T] TokenFlags; nullptr = all decode
  int n_tokens = 0;                // T
  int layer = 0;                   // MoE layer index (for layer-adaptive policies and stats)
  const GatingConfig* gating = nullptr;
  // [N] 1 = the expert is in memory, 0 = it would be read from the model file (the expert
  // tier, docs/offload.md); nullptr: every expert is in memory. Batch-aware policies count
  // resident experts as loaded anyway, so low-confidence choices move onto them (lynx, oea);
  // exact policies ignore it.
  const uint8_t* resident = nullptr;
  // [N] what streaming expert e costs this step, in units of a resident expert's stream from
  // RAM (1); an expert the tier must read from the file costs about the RAM-to-disk bandwidth
  // ratio (LoadOptions::expert_miss_cost). nullptr: 1 for every expert. cover grows its set
  // by routed mass per unit of cost and budget fills its slots in that order, so
  // low-confidence choices move onto cheap experts; a token's confident choices and exact
  // policies ignore it.
  const float* cost = nullptr;
};

// The contract every policy keeps: each token gets exactly k DISTINCT valid expert ids in
// [0, N), with finite non-negative weights. Policies that reduce k (ser, static-k) keep the
// ids of the slots they drop and give them weight exactly 0: an assignment with weight 0 is
// INACTIVE, the expert computation skips it and it costs nothing (it does not count as an
// active expert in the statistics either). Active ids come first, in descending logit order
// for topk / ser / static-k; batch-aware policies list their chosen ids in descending logit
// order too.
struct RoutingOutput {
  int32_t* ids = nullptr;    // [T x k]
  float* weights = nullptr;  // [T x k] final mixing weights (gating, norm and scale applied)
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  // The canonical spec string, e.g. "lynx:alpha=3,beta=4".
  virtual std::string spec() const = 0;
  // Fills out.ids/out.weights for every token. Must not allocate per call in steady state
  // (scratch lives in the policy object); a policy object is used by one thread at a time.
  virtual void route(const RoutingInput& in, RoutingOutput& out) = 0;
  // Throws lynx::Error when the policy's parameters do not fit a model with gating `g`
  // (static-k:k, ser:kmin or oea:k0 above the model's k; budget:m above its N).
  virtual void check(const GatingConfig& g) const { (void)g; }
};

// Creates a policy from a spec string: "topk", "lynx:alpha=3,beta=4", "oea:k0=4",
// "budget:m=24", "ser:kmin=4,t=0.2", "static-k:k=6". Throws lynx::Error naming the problem
// (unknown policy, unknown or malformed parameter).
std::unique_ptr<RoutingPolicy> make_routing_policy(std::string_view spec);
// The same, checked against a model's gating (RoutingPolicy::check): what the engine and the
// commands use once they know the model.
std::unique_ptr<RoutingPolicy> make_routing_policy(std::string_view spec, const GatingConfig& g);
// Names of the registered policies, for --help texts.
std::vector<std::string> routing_policy_names();

// Exact top-k with the model's gating; the reference every statistic compares against.
// ids/weights are [T x k]; ids of a token are in descending logit order.
void route_topk(const RoutingInput& in, RoutingOutput& out);

// Per layer and step statistics comparing a policy's output with exact top-k. Cheap enough
// to compute every step (O(T*N) for the exact top-k, O(T*k + N) for the rest). Only ACTIVE
// assignments (weight > 0) count: a dropped slot of ser / static-k is not an active expert.
struct RoutingStats {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t distinct_policy = 0;      // summed over steps: distinct experts the policy activated
  int64_t distinct_exact = 0;       // ... and what exact top-k would have activated
  int64_t assignments = 0;          // tokens * k
  int64_t assignments_active = 0;   // assignments with weight > 0
  int64_t assignments_changed = 0;  // exact top-k (token, expert) pairs the policy did not keep
                                    // active (replaced by another expert, or dropped)
  int64_t top1_kept = 0;            // tokens whose exact top-1 expert is among their active ones
  double mass_kept = 0;             // summed over tokens: router prob mass of the active experts
                                    // / prob mass of exact top-k (softmax probs over all N, or
                                    // sigmoid scores for sigmoid gating)
  void add(const RoutingStats& o);
  // Field by field: the statistics of an interval from two cumulative readings.
  friend RoutingStats operator-(RoutingStats a, const RoutingStats& b);
  double mean_distinct_policy() const { return steps ? double(distinct_policy) / steps : 0; }
  double mean_distinct_exact() const { return steps ? double(distinct_exact) / steps : 0; }
  double frac_changed() const {
    return assignments ? double(assignments_changed) / assignments : 0;
  }
  double frac_top1_kept() const { return tokens ? double(top1_kept) / tokens : 0; }
  double mean_mass_kept() const { return tokens ? mass_kept / tokens : 0; }
  double ratio_distinct() const {
    return distinct_exact ? double(distinct_policy) / double(distinct_exact) : 0;
  }
  // Active assignments per active expert: how well each streamed expert is amortized.
  double tokens_per_expert() const {
    return distinct_policy ? double(assignments_active) / double(distinct_policy) : 0;
  }
};

// Adds one step's statistics for `out` (the policy's choice) against exact top-k on `in`.
// Convenience form: allocates its scratch on every call.
void accumulate_routing_stats(const RoutingInput& in, const RoutingOutput& out,
                              RoutingStats& stats);

// The same with reusable scratch, for code that computes statistics every step (engine,
// simulator): no allocation in steady state. One object per thread.
class RoutingStatsAccumulator {
 public:
  void add(const RoutingInput& in, const RoutingOutput& out, RoutingStats& stats);

 private:
  std::vector<int32_t> exact_ids_;
  std::vector<float> exact_w_;
  std::vector<uint8_t> mark_;
};

}  // namespace lynx
