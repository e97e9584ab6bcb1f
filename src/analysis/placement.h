// Expert placement for expert parallelism: which rank holds each expert of each MoE layer.
// Contiguous (the default of the MPI runtime) or balanced from a recorded routing trace, in
// the spirit of vLLM's EPLB: count each expert's activations, then place experts
// largest-first, each on the least-loaded rank that still has room, every rank holding the
// same number of experts (docs/distributed-simulation.md).
//
// The placement file (`lynx-moe place -o F`; read by `route-sim --placement-file` and by the
// MPI runtime, src/dist, through placement_from_json) is JSON:
//   {"ranks": R, "experts": N, "layers": [[rank_of_expert_0, ..., rank_of_expert_N-1], ...]}
// with one array per layer, in layer order. This struct is the one in-memory form of it.
#pragma once
#include <string>
#include <vector>

#include "lynx/routing.h"

namespace lynx::analysis {

struct Placement {
  int ranks = 0;
  int experts = 0;
  std::vector<std::vector<int>> layers;  // [layer][expert] -> rank in [0, ranks)

  int rank_of(int layer, int expert) const { return layers[size_t(layer)][size_t(expert)]; }
  // Experts of `rank` in one layer, ascending.
  std::vector<int> experts_of(int layer, int rank) const;
};

// Experts rank r holds: N / R, plus one for the first N % R ranks (so counts differ by at most
// one when R does not divide N). Throws lynx::Error unless 1 <= R <= N.
int rank_capacity(int n_expert, int ranks, int rank);
// Expert e on rank r when r's slice [first(r), first(r) + capacity(r)) contains e: experts
// 0..N/R-1 on rank 0, and so on.
std::vector<int> contiguous_layer(int n_expert, int ranks);
Placement contiguous_placement(int n_layers, int n_expert, int ranks);

// Activation statistics of a routing trace under exact top-k (the routing every policy starts
// from), per layer: count[e] = active (token, e) assignments; coact[e * N + f] = tokens that
// activate both e and f (e != f).
struct ExpertLoad {
  int n_expert = 0;
  std::vector<std::vector<double>> count;  // [layer][N]
  std::vector<std::vector<double>> coact;  // [layer][N x N]
  std::vector<int64_t> tokens;             // [layer] token rows seen
};
ExpertLoad expert_load_from_trace(const std::string& trace_path);
// The same from router logits [n_tokens x N] of one layer (synthetic logits, tests).
void add_expert_load(const GatingConfig& g, const float* logits, int n_tokens,
                     std::vector<double>& count, std::vector<double>& coact);

struct BalanceOptions {
  // Co-activation weight W: a candidate rank's score is its load plus W times the
  // co-activation of the expert with the experts already on it. W > 0 spreads experts that
  // tokens use together over different ranks (fewer steps in which one rank streams both);
  // W < 0 groups them (fewer token rows to send in an all-to-all). 0: plain EPLB greedy.
  double coact_weight = 0;
};
// One layer: experts sorted by count (descending, ties by id), each to the rank with the
// lowest score that still has room (ties: fewer experts, then lower rank). `coact` may be
// empty when coact_weight is 0.
std::vector<int> balance_layer(const std::vector<double>& count, const std::vector<double>& coact,
                               int ranks, const BalanceOptions& opt = {});
Placement balanced_placement(const ExpertLoad& load, int ranks, const BalanceOptions& opt = {});

// max_r load_r / mean_r load_r for load_r = sum of count[e] over the experts on r; 1 when the
// layer saw no activations.
double imbalance_factor(const std::vector<int>& rank_of, const std::vector<double>& count,
                        int ranks);

// Checks that every layer places every expert exactly once on a rank in range with the
// counts rank_capacity() gives; throws lynx::Error naming the problem.
void validate_placement(const Placement& p);
// The placement file's text (validate_placement first): one line of JSON.
std::string placement_to_json(const Placement& p);

// What a reader of a placement file requires of it: the job's rank count, the model's experts
// per layer and its layer count.
struct PlacementFit {
  int ranks = 0;
  int experts = 0;
  int layers = 0;
};
// Parses a placement file's text. Checks its structure (an object with integer "ranks" and
// "experts", "layers" an array of arrays of one rank in [0, ranks) per expert) and, with `fit`,
// that ranks, experts and the layer count are the job's; lynx::Error "placement <origin>:
// <defect>" otherwise. Whether every rank holds its share is validate_placement's check: the
// MPI runtime accepts any rank per expert.
Placement placement_from_json(const std::string& text, const std::string& origin,
                              const PlacementFit* fit = nullptr);

}  // namespace lynx::analysis
