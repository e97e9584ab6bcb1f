// What one routing decision costs each rank under expert parallelism, and a cost model that
// turns it into a predicted time per output token (docs/distributed-simulation.md).
//
// Ranks R <= N hold whole experts (a Placement layer maps expert -> rank). Past R = N the
// model shards each expert over s = R / N ranks along its FFN width (R must be a multiple of
// N): rank e * s + j holds slice j of expert e, streams 1/s of its bytes when e is active and
// gets all of e's tokens.
//
// Two ways to combine the ranks' outputs (issue 19):
//   all-reduce  every rank holds every token row (the dense part is replicated); each rank
//               computes its experts' part of the MoE output, an all-reduce sums B x H values.
//   all-to-all  token t lives on rank t mod R (data-parallel attention); its row is sent to
//               every other rank holding one of its active experts (dispatch), and that rank's
//               weighted partial sum comes back (combine): one row each way per (token, rank).
#pragma once
#include <cstdint>
#include <vector>

namespace lynx::analysis {

// Sizes the cost model needs, from a model file or a known shape (the command computes them).
struct EpShape {
  double expert_bytes = 0;   // one expert of one MoE layer: gate + up + down weights
  double expert_params = 0;  // its weights (3 H F): 2 x this FLOPs per token it serves
  int hidden = 0;            // model width H: a token row in the collectives has H elements
  double act_bytes = 4;      // bytes per element on the wire (F32 rows)
  int moe_layers = 1;        // MoE layers per decode step
  double dense_bytes = 0;    // weights streamed per step outside the routed experts
};

struct CostParams {
  double mem_bw = 200e9;    // bytes/s each rank streams weights at
  double link_bw = 12.5e9;  // bytes/s each rank sends (and, at once, receives)
  double link_lat = 2e-6;   // seconds per message
  double dense_s = -1;      // seconds per step outside the MoE layers; < 0: dense_bytes / mem_bw
  double flops = 0;         // FLOP/s of a rank's expert kernels; 0: streaming only (no compute
                            // roof)
};

// Ranks per expert: 1 for R <= N, R / N past it. Throws lynx::Error when R < 1 or R > N is not
// a multiple of N.
int expert_slices(int n_expert, int ranks);

// Per-rank counts of one routing call (T tokens, one MoE layer).
struct EpStep {
  std::vector<int> experts;      // [R] distinct active experts (slices) on the rank
  std::vector<int> tokens;       // [R] tokens with at least one active expert on the rank
  std::vector<int> assignments;  // [R] active (token, expert) pairs the rank computes
  std::vector<int> rows_out;     // [R] all-to-all dispatch rows the rank sends (= combine rows in)
  std::vector<int> rows_in;      // [R] dispatch rows it receives (= combine rows out)
  std::vector<int> peers;        // [R] ranks it exchanges rows with in one phase
};

// Fills EpStep from a policy's output: ids/weights [T x k] (weight 0 = inactive assignment),
// rank_of [N] (ignored when R > N: slices are placed contiguously). Reuses its scratch.
class EpStepCounter {
 public:
  EpStepCounter(int n_expert, int ranks);
  void count(const int32_t* ids, const float* weights, int n_tokens, int k,
             const std::vector<int>& rank_of, EpStep& out);
  int ranks() const { return ranks_; }
  int slices() const { return slices_; }

 private:
  int n_, ranks_, slices_;
  std::vector<uint8_t> seen_;    // [N] expert active this step
  std::vector<uint8_t> tok_on_;  // [R] rank touched by the current token
  std::vector<int> touched_;     // ranks touched by the current token
  std::vector<int64_t> pairs_;   // owner * R + holder of every dispatch row this step
  std::vector<int> out_deg_, in_deg_;
};

// Cost formulas (seconds), for one MoE layer and step.
// Expert time on rank r: experts_r * expert_bytes / slices / mem_bw (streaming), or, when
// CostParams::flops > 0 and larger, the compute roof 2 * assignments_r * expert_params /
// slices / flops.
double expert_seconds(int experts_on_rank, int slices, const EpShape& s, const CostParams& c,
                      int assignments_on_rank = 0);
// All-reduce of B x H x act_bytes (reduce-scatter + all-gather, Rabenseifner): each rank
// sends and receives 2 (R-1)/R of it, in 2 ceil(log2 R) rounds: that many latencies.
double allreduce_bytes_per_rank(int ranks, int batch, const EpShape& s);
double allreduce_seconds(int ranks, int batch, const EpShape& s, const CostParams& c);
// All-to-all, dispatch then combine: each phase lasts as long as its slowest rank, whose
// time is max(rows out, rows in) x row bytes / link_bw plus one latency per peer.
double all_to_all_seconds(const EpStep& st, const EpShape& s, const CostParams& c);
// Dense time per step: dense_s when given, else dense_bytes / mem_bw.
double dense_seconds(const EpShape& s, const CostParams& c);

// Sums over the routing calls of one (policy, batch, R, placement) run. Per-rank maxima are
// taken per call, then averaged: a step waits for its busiest rank.
struct EpAccum {
  int64_t calls = 0;
  double experts_max = 0, experts_mean = 0;  // distinct experts (slices) per rank
  double tokens_max = 0, tokens_mean = 0;    // tokens routed to a rank
  double a2a_rows_max = 0;                   // rows a rank sends (dispatch + combine), busiest
  double expert_s = 0;                       // max over ranks of expert time
  double a2a_s = 0;
  void add(const EpStep& st, int slices, const EpShape& s, const CostParams& c);
};

// Figures per decode step (all MoE layers) from an accumulation.
struct EpPrediction {
  double experts_max = 0, experts_mean = 0, imbalance = 1;  // per layer call
  double tokens_max = 0, tokens_mean = 0;                   // per layer call
  double stream_bytes_max = 0, stream_bytes_mean = 0;       // per rank and step
  double allreduce_bytes = 0;  // each rank sends (and receives) per step
  double a2a_bytes_max = 0;    // busiest rank sends (and receives) per step
  double expert_ms = 0, allreduce_ms = 0, a2a_ms = 0, dense_ms = 0;
  double tpot_allreduce_ms = 0, tpot_a2a_ms = 0;
};
EpPrediction predict(const EpAccum& a, int ranks, int slices, int batch, const EpShape& s,
                     const CostParams& c);

}  // namespace lynx::analysis
