#include "routing/cover_greedy.h"

#include <cstddef>

namespace lynx::routing {

void CoverGreedy::grow(const float* q, int B, int n, int k, float lambda, const float* cost,
                       std::vector<uint8_t>& in_u, int& n_u, std::vector<int32_t>& u) {
  best.assign(size_t(B) * k, 0.f);
  n_best.assign(size_t(B), 0);
  auto offer = [&](int r, float v) {
    float* b = best.data() + size_t(r) * k;
    int& c = n_best[size_t(r)];
    if (c == k && v <= b[k - 1]) return;
    int j = c < k ? c++ : k - 1;
    for (; j > 0 && b[j - 1] < v; --j) b[j] = b[j - 1];
    b[j] = v;
  };
  for (int r = 0; r < B; ++r) {
    const float* qr = q + size_t(r) * n;
    for (int32_t e = 0; e < n; ++e) {
      if (in_u[size_t(e)]) offer(r, qr[e]);
    }
  }
  // One expert per round, O(B * N) a round, at most N rounds.
  for (;;) {
    int32_t best_e = -1;
    float best_g = -1.f;
    for (int32_t e = 0; e < n; ++e) {
      if (in_u[size_t(e)]) continue;
      float gain = 0.f;
      for (int r = 0; r < B; ++r) {
        const float v = q[size_t(r) * n + e];
        const float floor = n_best[size_t(r)] < k ? 0.f : best[size_t(r) * k + k - 1];
        if (v > floor) gain += v - floor;
      }
      // Per unit of what streaming e costs this step (the expert tier's misses cost more).
      if (cost) gain /= cost[e];
      if (gain > best_g) {
        best_g = gain;
        best_e = e;
      }
    }
    if (best_e < 0) break;
    if (n_u >= k && !(best_g >= lambda && best_g > 0.f)) break;
    n_u += in_u[size_t(best_e)] == 0;
    in_u[size_t(best_e)] = 1;
    for (int r = 0; r < B; ++r) offer(r, q[size_t(r) * n + best_e]);
  }
  u.clear();
  for (int32_t e = 0; e < n; ++e) {
    if (in_u[size_t(e)]) u.push_back(e);
  }
}

}  // namespace lynx::routing
