// ExpertPlan (grouping of routed assignments by expert) and the grouped ops over it
// (matmul_id, mix_id), against per-token products written out here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/expert_plan.h"
#include "kernels/matmul_id.h"
#include "kernels/thread_pool.h"
#include "lynx/error.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

TEST(ExpertPlan, GroupsActiveAssignmentsByExpertInTokenOrder) {
  // T = 3 tokens, k = 2 slots, N = 4 experts; token 1 slot 1 inactive (weight 0).
  const int32_t ids[] = {2, 0, 2, 3, 0, 2};
  const float w[] = {0.6f, 0.4f, 1.0f, 0.0f, 0.3f, 0.7f};
  ExpertPlan p;
  p.build(ids, w, 3, 2, 4);
  EXPECT_EQ(p.rows(), 5);
  EXPECT_EQ(p.count, (std::vector<int32_t>{2, 0, 3, 0}));
  EXPECT_EQ(std::vector<int32_t>(p.offset.begin(), p.offset.begin() + 5),
            (std::vector<int32_t>{0, 2, 2, 5, 5}));
  EXPECT_EQ(p.active, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(p.n_active(), 2);
  // Expert 0: (t0, s1), (t2, s0); expert 2: (t0, s0), (t1, s0), (t2, s1).
  EXPECT_EQ(std::vector<int32_t>(p.row_token.begin(), p.row_token.begin() + 5),
            (std::vector<int32_t>{0, 2, 0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(p.assign_row.begin(), p.assign_row.begin() + 6),
            (std::vector<int32_t>{2, 0, 3, -1, 1, 4}));
  EXPECT_EQ(p.weight[5], 0.7f);
}

TEST(ExpertPlan, RebuildReusesStorageAndForgetsThePreviousBatch) {
  ExpertPlan p;
  const int32_t ids_big[] = {0, 1, 2, 3, 1, 2, 3, 0};
  const float w_big[] = {1, 1, 1, 1, 1, 1, 1, 1};
  p.build(ids_big, w_big, 4, 2, 4);
  EXPECT_EQ(p.rows(), 8);
  const int32_t* storage = p.row_token.data();
  const int32_t ids[] = {3, 1};
  const float w[] = {0.5f, 0.5f};
  p.build(ids, w, 1, 2, 4);
  EXPECT_EQ(p.rows(), 2);
  EXPECT_EQ(p.active, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(p.assign_row[0], 1);
  EXPECT_EQ(p.assign_row[1], 0);
  EXPECT_EQ(p.row_token.data(), storage);  // no reallocation for a smaller batch
}

TEST(ExpertPlan, NoActiveAssignmentGivesAnEmptyPlan) {
  const int32_t ids[] = {1, 2};
  const float w[] = {0.f, -1.f};
  ExpertPlan p;
  p.build(ids, w, 1, 2, 3);
  EXPECT_EQ(p.rows(), 0);
  EXPECT_TRUE(p.active.empty());
  EXPECT_EQ(p.assign_row[0], -1);
  EXPECT_EQ(p.assign_row[1], -1);
}

TEST(ExpertPlan, RejectsAnExpertIdOutOfRange) {
  const int32_t ids[] = {0, 4};
  const float w[] = {1.f, 1.f};
  ExpertPlan p;
  EXPECT_THROW(p.build(ids, w, 1, 2, 4), Error);
}

// Random routing of T tokens over N experts, k distinct slots per token, some slots off.
void random_routing(int T, int k, int N, uint32_t seed, std::vector<int32_t>& ids,
                    std::vector<float>& w) {
  std::mt19937 rng(seed);
  ids.assign(size_t(T) * k, 0);
  w.assign(size_t(T) * k, 0.f);
  for (int t = 0; t < T; ++t) {
    std::vector<int32_t> perm(static_cast<size_t>(N));
    for (int e = 0; e < N; ++e) perm[size_t(e)] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int s = 0; s < k; ++s) {
      ids[size_t(t) * k + s] = perm[size_t(s)];
      w[size_t(t) * k + s] = rng() % 5 == 0 ? 0.f : float(rng() % 100 + 1) / 100.f;
    }
  }
}

// matmul_id gives, for every grouped row, what one matmul_rows over the expert's whole
// matrix gives for that token alone (bit for bit), for each pool size; mix_id the
// slot-ordered weighted sum.
TEST(MatmulId, EqualsPerTokenProductsForEveryTypeAndPoolSize) {
  const int T = 7, k = 3, N = 5;
  const int64_t rows = 48, cols = 64;
  std::vector<int32_t> ids;
  std::vector<float> rw;
  random_routing(T, k, N, 11, ids, rw);
  ExpertPlan plan;
  plan.build(ids.data(), rw.data(), T, k, N);
  const std::vector<float> x = testing::random_floats(size_t(T) * cols, 3);
  std::vector<float> xg(size_t(plan.rows()) * cols);
  for (int r = 0; r < plan.rows(); ++r) {
    std::memcpy(&xg[size_t(r) * cols], &x[size_t(plan.row_token[size_t(r)]) * cols],
                sizeof(float) * cols);
  }
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_0}) {
    SCOPED_TRACE(testing::type_name(t));
    const size_t rb = weight_row_bytes(t, cols), mb = rb * size_t(rows);
    std::vector<uint8_t> wts(mb * N);
    const std::vector<float> src = testing::random_floats(size_t(N) * rows * cols, 5);
    for (int64_t r = 0; r < N * rows; ++r) {
      quantize_row(t, &src[size_t(r) * cols], wts.data() + size_t(r) * rb, cols);
    }
    const ExpertMatrices m{t, wts.data(), rows, cols, mb, WeightLayout::kRows};
    QuantizedActs xq;
    const bool int_path = has_int8_path(t);
    if (int_path) quantize_acts(xg.data(), cols, plan.rows(), cols, xq);
    // Expected: each token alone, each of its active slots.
    std::vector<float> want(size_t(plan.rows()) * rows);
    for (int r = 0; r < plan.rows(); ++r) {
      int ex = -1;
      for (int e : plan.active) {
        if (r >= plan.offset[size_t(e)] && r < plan.offset[size_t(e) + 1]) ex = e;
      }
      ASSERT_GE(ex, 0);
      if (int_path) {
        matmul_rows_q8(t, m.mat(ex), cols, 0, rows, xq, r, 1, &want[size_t(r) * rows], rows);
      } else {
        matmul_rows(t, m.mat(ex), cols, 0, rows, &xg[size_t(r) * cols], cols, 1,
                    &want[size_t(r) * rows], rows);
      }
    }
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> y(want.size(), -1.f), y2(want.size(), -1.f);
      const MatIdJob jobs[2] = {{m, xg.data(), int_path ? &xq : nullptr, y.data()},
                                {m, xg.data(), int_path ? &xq : nullptr, y2.data()}};
      matmul_id(pool, plan, jobs);
      EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * want.size()));
      EXPECT_EQ(0, std::memcmp(y2.data(), want.data(), sizeof(float) * want.size()));
    }
    // Mix: token t = sum over slots in order of weight * its row.
    std::vector<float> out(size_t(T) * rows, 7.f);
    mix_id(plan, want.data(), rows, out.data());
    for (int t2 = 0; t2 < T; ++t2) {
      std::vector<float> acc(size_t(rows), 0.f);
      for (int s = 0; s < k; ++s) {
        const size_t i = size_t(t2) * k + s;
        if (rw[i] > 0.f) axpy(rw[i], &want[size_t(plan.assign_row[i]) * rows], acc.data(), rows);
      }
      EXPECT_EQ(0, std::memcmp(acc.data(), &out[size_t(t2) * rows], sizeof(float) * rows))
          << "token " << t2;
    }
  }
}

// The pool's mix_id splits the tokens across its threads: each token's sum is the serial
// one's, bit for bit, whatever the pool size (enough tokens for several chunks of its grain).
TEST(MixId, PooledEqualsSerialForEveryPoolSize) {
  const int T = 300, k = 4, N = 9;
  const int64_t cols = 64;
  std::vector<int32_t> ids;
  std::vector<float> rw;
  random_routing(T, k, N, 17, ids, rw);
  ExpertPlan plan;
  plan.build(ids.data(), rw.data(), T, k, N);
  const std::vector<float> y = testing::random_floats(size_t(plan.rows()) * cols, 19);
  std::vector<float> want(size_t(T) * cols);
  mix_id(plan, y.data(), cols, want.data());
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> got(size_t(T) * cols, 7.f);
    mix_id(pool, plan, y.data(), cols, got.data());
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * want.size()))
        << threads << " threads";
  }
}

TEST(MatmulId, RejectsJobsOfDifferentRowCounts) {
  const int32_t ids[] = {0};
  const float w[] = {1.f};
  ExpertPlan plan;
  plan.build(ids, w, 1, 1, 1);
  std::vector<float> wa(16 * 32, 0.f), wb(32 * 32, 0.f), x(32, 1.f), y(64);
  const ExpertMatrices a{
      TensorType::F32,    reinterpret_cast<const uint8_t*>(wa.data()), 16, 32, wa.size() * 4,
      WeightLayout::kRows};
  const ExpertMatrices b{
      TensorType::F32,    reinterpret_cast<const uint8_t*>(wb.data()), 32, 32, wb.size() * 4,
      WeightLayout::kRows};
  const MatIdJob jobs[2] = {{a, x.data(), nullptr, y.data()}, {b, x.data(), nullptr, y.data()}};
  ThreadPool pool(1);
  EXPECT_THROW(matmul_id(pool, plan, jobs), Error);
}

}  // namespace
}  // namespace lynx::kernels
