// Counting sort of the routed assignments by expert (see expert_plan.h).
#include "kernels/expert_plan.h"

#include <algorithm>
#include <string>

#include "lynx/error.h"

namespace lynx::kernels {
namespace {

template <typename V>
void ensure(V& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

void ExpertPlan::build(const int32_t* ids, const float* weights, int T, int k, int N) {
  n_tokens = T;
  n_used = k;
  n_expert = N;
  const size_t TK = size_t(T) * size_t(k);
  ensure(count, size_t(N));
  ensure(offset, size_t(N) + 1);
  ensure(fill_, size_t(N));
  ensure(row_token, TK);
  ensure(assign_row, TK);
  ensure(weight, TK);
  std::fill(count.begin(), count.begin() + N, 0);
  for (size_t i = 0; i < TK; ++i) {
    if (weights[i] > 0.f) {
      if (ids[i] < 0 || ids[i] >= N) {
        throw Error("expert plan: expert id " + std::to_string(ids[i]) + " outside [0, " +
                    std::to_string(N) + ")");
      }
      ++count[size_t(ids[i])];
    }
  }
  offset[0] = 0;
  active.clear();
  for (int e = 0; e < N; ++e) {
    offset[size_t(e) + 1] = offset[size_t(e)] + count[size_t(e)];
    if (count[size_t(e)] > 0) active.push_back(e);
  }
  std::copy(offset.begin(), offset.begin() + N, fill_.begin());
  for (size_t i = 0; i < TK; ++i) {
    weight[i] = weights[i];
    if (weights[i] > 0.f) {
      const int32_t r = fill_[size_t(ids[i])]++;
      assign_row[i] = r;
      row_token[size_t(r)] = int32_t(i / size_t(k));
    } else {
      assign_row[i] = -1;
    }
  }
}

}  // namespace lynx::kernels
