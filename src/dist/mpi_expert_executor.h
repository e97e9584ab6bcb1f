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
  static constexpr size_t kHead = sizeof(uint64_t) + sizeof(RankStats);
  size_t pack_head(uint8_t* dst, uint64_t digest) const;
  // Reads every rank's head (at offsets `at` of `base`): checks the digests, keeps the totals.
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
  // tier holds slots for its shard only). The routing does not see its residency: every rank
  // must route alike, and each rank's slots hold different experts (docs/offload.md).
  std::unique_ptr<TieredExpertExecutor> tiered_;
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
