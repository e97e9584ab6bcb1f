// Routing simulation without a model: policies side by side on the same router logits,
// synthetic (a stated distribution) or replayed from a routing trace (trace.h). Backs
// `lynx-moe route-sim`, and doubles as the policy-overhead micro-benchmark (time per call).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "analysis/ep_model.h"
#include "analysis/placement.h"
#include "lynx/routing.h"

namespace lynx::analysis {

// Synthetic router logits, one distribution per name:
//   gauss  z[t][e] ~ N(0, noise_std^2) i.i.d.: no shared preference, the hardest case for
//          batch-aware routing.
//   zipf   z[t][e] = -zipf_s * ln(1 + rank(e)) + N(0, noise_std^2), rank a fixed random
//          permutation: globally popular experts (Zipf-like load, as load-balanced routers
//          still show).
//   topic  n_topics topic vectors mu_c[e] ~ N(0, topic_std^2) fixed per run; each token draws
//          a topic uniformly, z[t][e] = mu_c[e] + N(0, noise_std^2): tokens of a topic share a
//          few preferred experts, like requests on similar text.
struct SynthDist {
  std::string name = "topic";
  float noise_std = 1.f;
  float zipf_s = 1.f;
  int n_topics = 4;
  float topic_std = 1.5f;
};

struct SimConfig {
  GatingConfig gating{64, 8, GatingFunc::kSoftmax, true, 1.f};  // ignored with a trace
  std::vector<int> batches = {1, 16, 64};
  int steps = 100;  // routing calls per (policy, batch)
  int repeats = 3;  // timed passes over the steps; the fastest is reported (a shared machine
                    // only ever adds time)
  uint64_t seed = 1;
  SynthDist dist;
  std::string trace_path;  // non-empty: batches of B token rows sampled from this trace
};

struct SimRow {
  std::string spec;  // canonical spec of the policy
  int n_expert = 0, k = 0, batch = 0;
  RoutingStats stats;
  double us_per_call = 0;  // wall time of route() per call, microseconds (fastest pass)
};

// Runs every policy on the same logits for every batch size; rows ordered by batch, then
// policy. Throws lynx::Error for bad specs, sizes or traces.
std::vector<SimRow> simulate_routing(const SimConfig& cfg, const std::vector<std::string>& specs);

// Draws logits from a SynthDist. The per-run structure (topic vectors, popularity ranks) is
// drawn once in the constructor, so all tokens of a run share the same preferences.
class SynthLogits {
 public:
  SynthLogits(const SynthDist& d, int n_expert, uint64_t seed);
  void fill(int n_tokens, float* logits);

 private:
  SynthDist d_;
  int n_;
  std::mt19937_64 rng_;
  std::normal_distribution<float> normal_{0.f, 1.f};
  std::vector<float> topics_, bias_;
};

// "md" (Markdown table), "csv" or "json".
std::string format_sim_rows(const std::vector<SimRow>& rows, const std::string& format);

// Expert parallelism past this machine (docs/distributed-simulation.md): the same policies on
// the same logits, their expert choices mapped onto R ranks by a placement, and the cost
// model's prediction per (batch, policy, R, placement).
struct EpConfig {
  std::vector<int> ranks = {8, 16, 64, 256};
  EpShape shape;
  CostParams cost;
  BalanceOptions balance;
  bool contiguous = true;  // rows with the contiguous placement
  bool balanced = true;    // rows with the balanced placement (from the trace, or from
                           // calib_tokens more synthetic tokens)
  int calib_tokens = 8192;
  // Placements from files (`lynx-moe place -o`): rows "file" at their rank count, which must
  // be listed in `ranks`. Layer l of the routing uses layers[l % layers.size()].
  std::vector<Placement> given;
};

struct EpRow {
  std::string spec;
  std::string placement;  // "contiguous", "balanced", "file", or "sliced" past one expert per
                          // rank
  int n_expert = 0, k = 0, batch = 0, ranks = 0, slices = 1;
  int64_t calls = 0;
  EpPrediction pred;
};

// Rows ordered by batch, then policy, then ranks, then placement. Throws lynx::Error for bad
// specs, sizes, ranks (< 1, or past N and not a multiple of N) or traces.
std::vector<EpRow> simulate_ep(const SimConfig& cfg, const std::vector<std::string>& specs,
                               const EpConfig& ep);
// "md", "csv" or "json".
std::string format_ep_rows(const std::vector<EpRow>& rows, const std::string& format);

// Measured TPOT of expert-parallel runs (`route-sim --measured FILE`), to check the cost
// model: CSV with a header naming at least policy, batch, ranks, tpot_ms; optional columns
// scheme (allreduce | alltoall, default allreduce) and placement (default contiguous);
// other columns are ignored, '#' lines are comments, policy specs with commas are quoted.
struct MeasuredRow {
  std::string spec;  // canonical
  int batch = 0, ranks = 0;
  double tpot_ms = 0;
  std::string scheme = "allreduce", placement = "contiguous";
};
// Throws lynx::Error naming `what` and the line for a malformed file.
std::vector<MeasuredRow> parse_measured_csv(const std::string& text, const std::string& what);
// One row per measured row: measured, predicted by the row's scheme, predicted / measured.
// A measured row without a simulated twin gets "-" for the prediction.
std::string format_comparison(const std::vector<MeasuredRow>& measured,
                              const std::vector<EpRow>& predicted, const std::string& format);

}  // namespace lynx::analysis
