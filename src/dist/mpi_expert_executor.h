// The routed-expert step spread over the ranks of an MPI job (expert parallelism). Every rank
// runs the same forward pass on the same batch (attention, router, routing policy, dense and
// shared weights are replicated), so every rank builds the same plan; each rank computes only
// the plan's rows of the experts it holds (Placement) and the ranks combine:
//  * kAllReduce: each rank mixes its rows into a partial [T x n_embd] sum, and the partials
//    are summed (reduce-scatter, then all-gather, so every rank ends with the same bits).
//    Traffic n_embd floats per token, whatever k is. The sum's order differs from the single
//    process's slot order, so results differ from it by float rounding.
//  * kGather: the ranks all-gather their expert output rows (k n_embd floats per token) and
//    every rank mixes them in slot order: bit-identical to the single process.
// The plan's digest travels with the combine: ranks whose routing diverged (which would mean
// different inputs, builds or hardware results) raise a CollectiveError at that layer. So do
// each rank's running totals (RankStats, 48 bytes): every rank knows every rank's figures as
// of the last MoE layer without a message of their own (`serve`'s /metrics on rank 0).
// The collectives are non-blocking and waited for under Mpi's deadline (PeerFailure).
// docs/distributed.md has the measurements behind the choice.
//
// The routing's view of the ranks' expert tiers (RoutingInput::resident, cost; docs/offload.md
// "Under expert parallelism"): each rank knows only what its own tier holds, yet every rank
// must route with the same mask, bit for bit, or the plans differ and the step fails. So the
// heads of every combine also carry the rank's residency of the NEXT routed layer (one bit per
// expert and its tier's miss cost); every rank receives the same heads and builds the same
// [N] mask and costs from them, each expert's bit and cost from the rank that holds it. The
// snapshot is the one each rank had when it sent its combine: its read-ahead of the next layer
// included, as the single process sees it when it routes that layer. Why in the combine and not
// a message of its own: the combine is a synchronisation every layer pays already; a few dozen
// more bytes in it cost nothing measurable, where an all-gather per layer (or per step, and
// then staler) adds a round trip of latency each time. The last layer's combine carries the
// first routed layer's residency for the next step; only when no combine has carried the
// layer about to be routed (the first step, a step after a failed one) is it gathered alone.
#pragma once
#include <cstdint>
#include <mutex>
#include <vector>

#include "dist/comm.h"
#include "dist/placement.h"
#include "model/cpu_expert_executor.h"
#include "model/tiered_expert_executor.h"

namespace lynx::dist {

enum class Combine : uint8_t { kAllReduce, kGather };

// One rank's share of the steps since the last take_stats() (or since the start: totals()).
// Trivially copyable: it travels in the combine messages.
struct RankStats {
  int64_t tokens = 0;       // (token, slot) assignments routed to this rank's experts
  int64_t experts = 0;      // distinct local experts computed, summed over the MoE layers
  uint64_t bytes = 0;       // expert weight bytes this rank streamed
  uint64_t comm_bytes = 0;  // bytes this rank received in the combines
  double compute_s = 0;     // in the local expert computation (and the mix)
  double comm_s = 0;        // in the combine collectives
};
static_assert(std::is_trivially_copyable_v<RankStats>);

class MpiExpertExecutor final : public ExpertExecutor {
 public:
  MpiExpertExecutor(const Mpi& mpi, const Model& model, const Placement& placement, Combine combine,
                    kernels::ThreadPool& pool, bool int_acts);

  void run(const kernels::ExpertPlan& plan, kernels::ActRows& x, int il, const LayerWeights& layer,
           float* out) override;
  // Every rank's residency of layer il's experts, gathered (above): identical on every rank.
  // nullptr when no rank has an expert tier (every expert is in memory). Collective when the
  // last combine did not carry layer il: every rank calls it at the same point (the forward
  // pass, before routing layer il).
  const uint8_t* resident(int il) override;
  // [N] 1 for a resident expert, its holder's miss cost otherwise (as of resident(il)).
  const float* cost(int il) override;
  // How many times resident() had to gather the residency in a message of its own.
  int64_t residency_gathers() const { return residency_gathers_; }

  // This rank's experts only (their rows go through cpu_ or tiered_).
  void set_activation_hook(const Context::ActivationHook* hook) override {
    cpu_.set_activation_hook(hook);
    if (tiered_) tiered_->set_activation_hook(hook);
  }

  RankStats take_stats();
  // Every rank's totals since the start, as received in the last combine (rank order; empty
  // before the first MoE layer). Each rank's tokens, experts and bytes include that layer;
  // its compute and communication times lag by one layer. Safe from any thread.
  std::vector<RankStats> totals() const;

 private:
  void local_plan(const kernels::ExpertPlan& plan, int il);
  uint64_t plan_digest(const kernels::ExpertPlan& plan) const;
  void check_digests(const std::vector<uint64_t>& digests, int il) const;
  void add(const RankStats& d);
  // A rank's residency of one layer: its tier's miss cost, whether it has a tier, one bit per
  // expert (1: in memory; the bits of experts other ranks hold are ignored).
  struct ResidencyHead {
    float miss_cost = 0;
    uint32_t tiered = 0;
  };
  int next_routed(int il) const;
  void pack_residency(uint8_t* dst, int il);
  // Builds res_ / res_cost_ for layer il from every rank's residency (at offsets `at` of base).
  void unpack_residency(const uint8_t* base, const std::vector<size_t>& at, int il);
  // The head of a combine message: digest, totals, the residency of the next routed layer.
  size_t pack_head(uint8_t* dst, uint64_t digest, int il);
  // Reads every rank's head (at offsets `at` of `base`): checks the digests, keeps the totals
  // and the residency.
  void unpack_heads(const uint8_t* base, const std::vector<size_t>& at, int il);
  void combine_reduce(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                      const LayerWeights& layer, uint64_t digest, int il, float* out);
  void combine_gather(const kernels::ExpertPlan& plan, kernels::ActRows& x,
                      const LayerWeights& layer, uint64_t digest, int il, float* out);

  const Mpi& mpi_;
  const Model& model_;
  const Placement& placement_;
  Combine combine_;
  CpuExpertExecutor cpu_;
  // This rank's experts through its own expert tier, when the model has one (each rank's
  // tier holds slots for its shard only). The routing sees every rank's tier through the
  // residency gathered in the combines (above).
  std::unique_ptr<TieredExpertExecutor> tiered_;
  size_t res_bytes_ = 0;            // one rank's residency: ResidencyHead and the bits
  size_t head_ = 0;                 // a combine message's head: digest, RankStats, residency
  int res_layer_ = -1;              // the layer res_ describes (-1: none yet)
  bool res_tiered_ = false;         // some rank has a tier: res_ and res_cost_ are offered
  std::vector<uint8_t> res_, own_;  // [N] the gathered mask; this rank's tier's mask
  std::vector<float> res_cost_;     // [N]
  int64_t residency_gathers_ = 0;
  RankStats stats_, total_;
  mutable std::mutex totals_mu_;
  std::vector<RankStats> totals_;  // guarded by totals_mu_
  // Scratch reused across layers and steps.
  std::vector<int32_t> row_expert_, ids_;
  std::vector<float> weights_, partial_, chunk_;
  std::vector<uint8_t> send_, recv_;
  std::vector<int> counts_, displs_;
  kernels::ExpertPlan local_;
  std::vector<float> rows_;  // [plan rows x n_embd] gathered rows, plan order
};

}  // namespace lynx::dist
