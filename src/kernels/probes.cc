#include "kernels/probes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/kernels.h"
#include "lynx/error.h"

namespace lynx::kernels {

double measure_fma_gflops(ThreadPool& pool, int runs) {
  if (runs < 1) throw Error("measure_fma_gflops: runs must be >= 1");
  // About 20 ms per thread per run at 250 GFLOPS per core with 16 lanes.
  constexpr int64_t kIters = int64_t{1} << 24;
  const int n = pool.size();
  std::vector<double> flops(static_cast<size_t>(n));
  std::vector<float> sink(static_cast<size_t>(n));
  double best = 0.0;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(n, [&](int64_t b, int64_t e, int tid) {
      for (int64_t i = b; i < e; ++i) {
        flops[size_t(i)] = fma_chains(kIters, 1e-3f * float(tid + 1), &sink[size_t(i)]);
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / s / 1e9);
  }
  float check = 0.0f;
  for (float v : sink) check += v;
  if (!std::isfinite(check)) throw Error("measure_fma_gflops: the chains overflowed");
  return best;
}

double measure_read_bandwidth_gbps(ThreadPool& pool, size_t bytes, int runs) {
  // The buffer is read in segments of a few MiB, each timed on its own, and each segment's
  // best time over the runs is kept: on a shared machine some segment reads are slowed by
  // other processes, and best-of-runs per short segment filters that out where best-of-runs
  // per whole pass cannot. A segment is re-read only after the whole buffer (>> LLC) has been
  // streamed, so every timed read comes from DRAM.
  constexpr int64_t kSegFloats = int64_t{8} << 20 >> 2;  // 8 MiB
  if (runs < 1) throw Error("measure_read_bandwidth_gbps: runs must be >= 1");
  const int64_t n_seg = std::max<int64_t>(1, static_cast<int64_t>(bytes) / 4 / kSegFloats);
  const int64_t n = n_seg * kSegFloats;
  std::unique_ptr<float[]> buf(new float[n]);
  const int64_t grain = 1 << 14;
  // Pages are first touched by the threads that will read them (NUMA placement).
  pool.parallel_for(
      n, [&](int64_t b, int64_t e, int) { std::fill(buf.get() + b, buf.get() + e, 1.0f); }, grain);
  std::vector<float> partial(pool.size());
  std::vector<double> best(n_seg, 1e30);
  float check = 0.0f;
  for (int run = 0; run < runs; ++run) {
    for (int64_t s = 0; s < n_seg; ++s) {
      const float* seg = buf.get() + s * kSegFloats;
      const auto t0 = std::chrono::steady_clock::now();
      pool.parallel_for(
          kSegFloats, [&](int64_t b, int64_t e, int tid) { partial[tid] += sum(seg + b, e - b); },
          grain);
      const auto t1 = std::chrono::steady_clock::now();
      best[s] = std::min(best[s], std::chrono::duration<double>(t1 - t0).count());
    }
  }
  for (float v : partial) check += v;
  if (!(check > 0.0f)) throw Error("measure_read_bandwidth_gbps: reduction lost data");
  double total = 0.0;
  for (double t : best) total += t;
  return static_cast<double>(n) * sizeof(float) / total / 1e9;
}

}  // namespace lynx::kernels
