// matmul_id and mix_id (see matmul_id.h).
#include "kernels/matmul_id.h"

#include <algorithm>

#include "kernels/thread_pool.h"
#include "lynx/error.h"

namespace lynx::kernels {
namespace {

// Output rows [r0, r1) of job j for one expert's `cnt` grouped rows starting at `off`.
void expert_rows(const MatIdJob& j, int ex, int64_t r0, int64_t r1, int off, int cnt,
                 Scratch& scratch) {
  const ExpertMatrices& w = j.w;
  float* y = j.y + size_t(off) * size_t(w.rows);
  if (j.xb && cnt >= kBf16MinTokens) {
    matmul_rows_bf16(j.bf16, w.type, w.mat(ex), w.cols, r0, r1, *j.xb, off, cnt, y, w.rows,
                     &scratch);
  } else if (j.xq) {
    matmul_rows_q8(w.type, w.mat(ex), w.cols, r0, r1, *j.xq, off, cnt, y, w.rows, w.layout,
                   &scratch);
  } else {
    matmul_rows(w.type, w.mat(ex), w.cols, r0, r1, j.x + size_t(off) * size_t(w.cols), w.cols, cnt,
                y, w.rows, w.layout, &scratch);
  }
}

}  // namespace

void matmul_id(ThreadPool& pool, const ExpertPlan& plan, std::span<const MatIdJob> jobs) {
  matmul_id(pool, plan, jobs, plan.active);
}

void matmul_id(ThreadPool& pool, const ExpertPlan& plan, std::span<const MatIdJob> jobs,
               std::span<const int32_t> experts) {
  if (jobs.empty()) return;
  const int64_t R = jobs[0].w.rows;
  for (const MatIdJob& j : jobs) {
    if (j.w.rows != R) throw Error("matmul_id: the jobs' matrices differ in rows");
  }
  const int64_t n_active = int64_t(experts.size());
  pool.parallel_for(
      n_active * R,
      [&](int64_t b, int64_t e, int tid) {
        Scratch& scratch = pool.scratch(tid);
        while (b < e) {
          const int64_t ai = b / R, r0 = b % R, r1 = std::min<int64_t>(R, r0 + (e - b));
          const int ex = experts[size_t(ai)];
          const int off = plan.offset[size_t(ex)], cnt = plan.count[size_t(ex)];
          for (const MatIdJob& j : jobs) expert_rows(j, ex, r0, r1, off, cnt, scratch);
          b += r1 - r0;
        }
      },
      16, chunks_per_thread_for(plan.n_tokens));
}

namespace {

// mix_id over tokens [t0, t1).
void mix_tokens(const ExpertPlan& plan, const float* y, int64_t cols, float* out, int t0, int t1) {
  const int K = plan.n_used;
  for (int t = t0; t < t1; ++t) {
    float* o = out + size_t(t) * size_t(cols);
    std::fill(o, o + cols, 0.f);
    for (int s = 0; s < K; ++s) {
      const size_t i = size_t(t) * size_t(K) + size_t(s);
      const int r = plan.assign_row[i];
      if (r >= 0) axpy(plan.weight[i], y + size_t(r) * size_t(cols), o, cols);
    }
  }
}

}  // namespace

void mix_id(const ExpertPlan& plan, const float* y, int64_t cols, float* out) {
  mix_tokens(plan, y, cols, out, 0, plan.n_tokens);
}

void mix_id(ThreadPool& pool, const ExpertPlan& plan, const float* y, int64_t cols, float* out) {
  // A prefill's mix reads [T*k x cols] rows (32 MiB per layer at 512 tokens of the
  // Qwen3-30B-A3B shape): serial, the other threads waited for it.
  pool.parallel_for(
      plan.n_tokens,
      [&](int64_t t0, int64_t t1, int) { mix_tokens(plan, y, cols, out, int(t0), int(t1)); },
      std::max<int64_t>(1, 4096 / std::max<int64_t>(cols, 1)),
      chunks_per_thread_for(plan.n_tokens));
}

}  // namespace lynx::kernels
