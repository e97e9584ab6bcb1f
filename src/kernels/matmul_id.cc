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
      16);
}

void mix_id(const ExpertPlan& plan, const float* y, int64_t cols, float* out) {
  const int K = plan.n_used;
  for (int t = 0; t < plan.n_tokens; ++t) {
    float* o = out + size_t(t) * size_t(cols);
    std::fill(o, o + cols, 0.f);
    for (int s = 0; s < K; ++s) {
      const size_t i = size_t(t) * size_t(K) + size_t(s);
      const int r = plan.assign_row[i];
      if (r >= 0) axpy(plan.weight[i], y + size_t(r) * size_t(cols), o, cols);
    }
  }
}

}  // namespace lynx::kernels
