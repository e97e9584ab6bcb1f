// Which rank holds which expert of every MoE layer. Contiguous by default (rank r holds
// experts [r N / R, (r + 1) N / R)); or read from the JSON that `lynx-moe place` writes:
//   {"ranks": R, "experts": N, "layers": [[rank of expert 0, ..., of expert N-1], ...]}
// with one array per MoE layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lynx::dist {

struct Placement {
  int ranks = 0;
  int experts = 0;
  std::vector<std::vector<int>> owner;  // [MoE layer][expert] -> rank

  static Placement contiguous(int ranks, int experts, int moe_layers);
  // Parses and validates the JSON text (lynx::Error naming `origin` and the defect); the
  // ranks, experts and layer count must match the run's.
  static Placement parse(const std::string& json, const std::string& origin, int ranks, int experts,
                         int moe_layers);

  int rank_of(int moe_layer, int expert) const { return owner[size_t(moe_layer)][size_t(expert)]; }
  // Experts of `rank` in one layer, ascending.
  std::vector<int> experts_of(int moe_layer, int rank) const;
  // 64-bit FNV-1a over the whole table (compared between ranks at start).
  uint64_t hash() const;
};

}  // namespace lynx::dist
