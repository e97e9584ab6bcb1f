// Grouped matrix products over an ExpertPlan (ggml's mul_mat_id): each active expert's
// matrix is streamed once for all the grouped rows routed to it, and the work is split over
// the concatenated output rows of all active experts, so the threads stay balanced whatever
// the distribution of tokens over experts.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/expert_plan.h"
#include "kernels/kernels.h"
#include "kernels/matmul_bf16.h"
#include "kernels/thread_pool.h"

namespace lynx::kernels {

// n_mat matrices [rows x cols] of `type` back to back, mat_bytes apart, stored in `layout`
// (an expert tensor: matrix e is expert e); or, when `mats` is set, matrix e wherever
// mats[e] points (the expert tier's slots, src/model/expert_tier.h).
struct ExpertMatrices {
  TensorType type = TensorType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  size_t mat_bytes = 0;
  WeightLayout layout = WeightLayout::kRows;
  const uint8_t* const* mats = nullptr;  // [n_mat] or nullptr
  const uint8_t* mat(int64_t e) const {
    return mats ? mats[size_t(e)] : data + size_t(e) * mat_bytes;
  }
};

// One product of matmul_id: y[row * w.rows + r] = W_e[r] . x[row] for every grouped row `row`
// of every active expert e. x is [plan.rows() x w.cols], as F32 rows (`x`) or, for the integer
// path (has_int_path weights), quantized in the form the type reads (`xq`, which then takes
// precedence).
struct MatIdJob {
  ExpertMatrices w;
  const float* x = nullptr;
  const QuantizedActs* xq = nullptr;
  float* y = nullptr;
  // The BF16 fast mode (matmul_bf16.h; BF16/F16 weights in panels): x rounded to BF16, which
  // an expert with at least kBf16MinTokens grouped rows reads instead of x (x stays needed),
  // on kernel bf16 (not kNone when xb is set).
  const Bf16Acts* xb = nullptr;
  Bf16Kernel bf16 = Bf16Kernel::kNone;
};

// Runs the jobs over the plan, rows split across the pool. The jobs must have the same
// number of rows (they run in the same chunks: gate and up share their input, so a chunk
// reads it once for both). Each output is what matmul_rows / matmul_rows_q8 over the whole
// matrix gives (bit-identical for any pool size and any plan). Throws lynx::Error when the
// jobs' row counts differ. `experts` (a subset of plan.active) limits the products to those
// experts' grouped rows, the others' rows left as they are: each row's result is the same
// whichever subset computes it (the expert tier runs a plan in parts that fit its slots).
void matmul_id(ThreadPool& pool, const ExpertPlan& plan, std::span<const MatIdJob> jobs);
void matmul_id(ThreadPool& pool, const ExpertPlan& plan, std::span<const MatIdJob> jobs,
               std::span<const int32_t> experts);

// out[t * cols ...] = sum over the token's slots s, in slot order, of plan.weight[t, s] *
// y[plan.assign_row[t, s]] (inactive slots skipped; a token without active slots gets
// zeros). y is [plan.rows() x cols], out [plan.n_tokens x cols]. The order depends only on
// the token's own slots, not on the rest of the batch.
void mix_id(const ExpertPlan& plan, const float* y, int64_t cols, float* out);
// The same with the tokens split across the pool (each token's sum as above: the same bits).
void mix_id(ThreadPool& pool, const ExpertPlan& plan, const float* y, int64_t cols, float* out);

}  // namespace lynx::kernels
