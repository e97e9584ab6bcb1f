// ThreadPool: every index exactly once, chunks aligned to the grain, balanced, exceptions
// propagate, misuse is rejected, and many back-to-back calls neither hang nor lose work.
#include "kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "lynx/error.h"

namespace lynx::kernels {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 16, 17, 100, 1000, 12345}) {
      for (int64_t grain : {1, 3, 16, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::vector<std::atomic<int>> per_thread(threads);
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e, int tid) {
              ASSERT_GE(tid, 0);
              ASSERT_LT(tid, threads);
              ASSERT_EQ(b % grain, 0) << "chunk not aligned to the grain";
              ASSERT_LT(b, e);
              per_thread[tid] += static_cast<int>(e - b);
              for (int64_t i = b; i < e; ++i) hits[i]++;
            },
            grain);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
        }
        // Balanced: no thread gets more than one grain above an even share.
        const int64_t units = (n + grain - 1) / grain;
        const int64_t max_units = (units + threads - 1) / threads;
        for (int t = 0; t < threads; ++t) EXPECT_LE(per_thread[t].load(), max_units * grain);
      }
    }
  }
}

TEST(ThreadPool, ManyBackToBackCalls) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 5000; ++call) {
    pool.parallel_for(
        64, [&](int64_t b, int64_t e, int) { total += e - b; }, 1);
  }
  EXPECT_EQ(total.load(), 5000 * 64);
}

TEST(ThreadPool, PropagatesExceptionsAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(
                   30,
                   [](int64_t b, int64_t, int tid) {
                     if (tid == 2) throw std::runtime_error("boom");
                   },
                   1),
               std::runtime_error);
  EXPECT_THROW(pool.parallel_for(30,
                                 [](int64_t, int64_t, int tid) {
                                   if (tid == 0) throw std::runtime_error("boom0");
                                 }),
               std::runtime_error);
  std::atomic<int> count{0};
  pool.parallel_for(30, [&](int64_t b, int64_t e, int) { count += static_cast<int>(e - b); });
  EXPECT_EQ(count.load(), 30);
}

TEST(ThreadPool, RejectsBadSizesAndNestedCalls) {
  EXPECT_THROW(ThreadPool(0), Error);
  ThreadPool pool(2);
  EXPECT_THROW(
      pool.parallel_for(
          10, [&](int64_t, int64_t, int) { pool.parallel_for(10, [](int64_t, int64_t, int) {}); }),
      Error);
  std::atomic<int> count{0};
  pool.parallel_for(10, [&](int64_t b, int64_t e, int) { count += static_cast<int>(e - b); });
  EXPECT_EQ(count.load(), 10);
}

TEST(ThreadPool, MeasuresPlausibleBandwidth) {
  ThreadPool pool(2);
  const double gbps = measure_read_bandwidth_gbps(pool, size_t{64} << 20);
  EXPECT_GT(gbps, 0.1);
  EXPECT_LT(gbps, 100000.0);
}

}  // namespace
}  // namespace lynx::kernels
