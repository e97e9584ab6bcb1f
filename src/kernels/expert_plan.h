// The grouping of one MoE layer's routed assignments by expert, as data: which grouped rows
// (token copies) each expert computes, in which order, and where each (token, slot) result
// lands. Built from a routing output (ids and weights, [T x k] each) and nothing else, so any
// executor (the CPU kernels, a set of ranks, a GPU) can run the same plan and agree on what
// was computed. The ids of ggml's mul_mat_id, made explicit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lynx::kernels {

struct ExpertPlan {
  int n_tokens = 0;  // T
  int n_used = 0;    // k, slots per token
  int n_expert = 0;  // N
  // Per expert: grouped rows (assignments with weight > 0) and the first of them; the rows
  // of expert e are [offset[e], offset[e] + count[e]), experts in id order. [N], [N + 1]
  std::vector<int32_t> count, offset;
  std::vector<int32_t> active;      // experts with at least one row, ascending
  std::vector<int32_t> row_token;   // [rows] token of each grouped row
  std::vector<int32_t> assign_row;  // [T x k] grouped row of (token, slot); -1 if inactive
  std::vector<float> weight;        // [T x k] mixing weight of (token, slot)

  int rows() const { return n_expert > 0 ? offset[size_t(n_expert)] : 0; }
  int n_active() const { return int(active.size()); }

  // Groups the assignments with weight > 0 of ids/weights ([T x k], ids in [0, N)); inside an
  // expert, rows follow (token, slot) order. Storage is kept across calls (no allocation once
  // the largest batch was seen). Throws lynx::Error on an id outside [0, N).
  void build(const int32_t* ids, const float* weights, int T, int k, int N);

 private:
  std::vector<int32_t> fill_;  // [N] next free row per expert while building
};

}  // namespace lynx::kernels
