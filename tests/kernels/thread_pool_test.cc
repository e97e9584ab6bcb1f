// ThreadPool: every index exactly once, chunks aligned to the grain, balanced, exceptions
// propagate, misuse is rejected, and many back-to-back calls neither hang nor lose work.
#include "kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "lynx/error.h"

namespace lynx::kernels {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnceInBalancedChunks) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 16, 17, 100, 1000, 12345}) {
      for (int64_t grain : {1, 3, 16, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::vector<std::atomic<int>> in_use(threads);
        std::mutex mu;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e, int tid) {
              ASSERT_GE(tid, 0);
              ASSERT_LT(tid, threads);
              ASSERT_EQ(in_use[tid].exchange(1), 0) << "thread id used twice at once";
              ASSERT_EQ(b % grain, 0) << "chunk not aligned to the grain";
              ASSERT_LT(b, e);
              for (int64_t i = b; i < e; ++i) hits[i]++;
              {
                std::lock_guard<std::mutex> lock(mu);
                chunks.emplace_back(b, e);
              }
              in_use[tid] = 0;
            },
            grain);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
        }
        // Balanced: chunk sizes differ by at most one grain (the last may be cut at n).
        std::sort(chunks.begin(), chunks.end());
        int64_t lo = INT64_MAX, hi = 0;
        for (size_t c = 0; c + 1 < chunks.size(); ++c) {
          lo = std::min(lo, chunks[c].second - chunks[c].first);
          hi = std::max(hi, chunks[c].second - chunks[c].first);
        }
        if (chunks.size() > 2) {
          EXPECT_LE(hi - lo, grain) << "threads=" << threads << " n=" << n;
        }
      }
    }
  }
}

// chunks_per_thread sets how many chunks a call is cut into (the fine setting of long
// prefill products), still covering every index once in balanced, grain-aligned chunks.
TEST(ThreadPool, ChunksPerThreadSetsTheChunkCount) {
  ThreadPool pool(2);
  for (int cpt : {1, ThreadPool::kChunksPerThread, ThreadPool::kFineChunksPerThread, 64}) {
    for (int64_t n : {5, 100, 4096, 98304}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      pool.parallel_for(
          n,
          [&](int64_t b, int64_t e, int) {
            ASSERT_EQ(b % 16, 0);
            for (int64_t i = b; i < e; ++i) hits[i]++;
            std::lock_guard<std::mutex> lock(mu);
            chunks.emplace_back(b, e);
          },
          16, cpt);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "cpt=" << cpt << " n=" << n;
      const int64_t units = (n + 15) / 16;
      EXPECT_EQ(int64_t(chunks.size()), std::min<int64_t>(units, 2 * cpt)) << "n=" << n;
    }
  }
  EXPECT_EQ(chunks_per_thread_for(1), ThreadPool::kChunksPerThread);
  EXPECT_EQ(chunks_per_thread_for(kFineChunkTokens - 1), ThreadPool::kChunksPerThread);
  EXPECT_EQ(chunks_per_thread_for(512), ThreadPool::kFineChunksPerThread);
  EXPECT_THROW(pool.parallel_for(
                   10, [](int64_t, int64_t, int) {}, 1, 0),
               Error);
  EXPECT_THROW(pool.parallel_for(
                   10, [](int64_t, int64_t, int) {}, 1, 65),
               Error);
}

// A worker that wakes late (descheduled) must not run a finished job's chunks or stall the
// caller: the caller takes over unclaimed chunks.
TEST(ThreadPool, CallerTakesOverWhenWorkersAreSlow) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int call = 0; call < 200; ++call) {
    pool.parallel_for(
        100,
        [&](int64_t b, int64_t e, int tid) {
          if (tid == 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
          total += e - b;
        },
        1);
  }
  EXPECT_EQ(total.load(), 200 * 100);
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
  for (int64_t bad : {0, 15, 29}) {  // whichever thread runs the chunk holding `bad`
    EXPECT_THROW(pool.parallel_for(
                     30,
                     [bad](int64_t b, int64_t e, int) {
                       if (b <= bad && bad < e) throw std::runtime_error("boom");
                     },
                     1),
                 std::runtime_error);
  }
  EXPECT_THROW(
      pool.parallel_for(30, [](int64_t, int64_t, int) { throw std::runtime_error("all"); }),
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

}  // namespace
}  // namespace lynx::kernels
