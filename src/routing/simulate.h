// Routing simulation without a model: policies side by side on the same router logits,
// synthetic (a stated distribution) or replayed from a routing trace (trace.h). Backs
// `lynx-moe route-sim`, and doubles as the policy-overhead micro-benchmark (time per call).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "lynx/routing.h"

namespace lynx::routing {

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

}  // namespace lynx::routing
