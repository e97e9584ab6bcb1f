// The interleaved Q8_K kernel (matmul_k_i16.cc, Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS in
// kInterleaved16): bit
// for bit the scalar twin (ref::matmul_rows_k on the kRows matrix, and on the interleaved one read
// in place) on every SIMD target, over odd row splits, 1-70 tokens and token offsets; the layout's
// round trip; the float path on the interleaved matrix; random bytes with NaN/Inf scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/matmul_k.h"
#include "kernels/types.h"
#include "lynx/error.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::random_floats;

const TensorType kTypes[] = {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                             TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_XS};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b);
}

std::vector<uint8_t> weights(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = random_floats(size_t(rows * cols), seed, 0.05f);
  std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(t, &f[size_t(r * cols)], &w[size_t(r) * weight_row_bytes(t, cols)], cols);
  }
  return w;
}

std::vector<uint8_t> interleaved(TensorType t, const std::vector<uint8_t>& w, int64_t rows,
                                 int64_t cols) {
  std::vector<uint8_t> out(w.size());
  interleave16_into(t, w.data(), out.data(), cols, 0, rows / kInterleaveRows);
  return out;
}

TEST(MatmulKI16, TypeTableRowsSayTheirKernel) {
  for (TensorType t : kTypes) {
    const TypeTraits& tr = type_traits(t);
    EXPECT_TRUE(tr.int_kernel);
    EXPECT_EQ(tr.act_type, TensorType::Q8_K);
    EXPECT_TRUE(has_int_path(t));
    EXPECT_TRUE(has_k_interleaved_kernel(t));
    EXPECT_TRUE(can_interleave(t, 32, 512));
    EXPECT_FALSE(can_interleave(t, 24, 512));   // rows not a multiple of 16
    EXPECT_FALSE(can_interleave(t, 32, 1000));  // cols not a multiple of 256
  }
}

TEST(MatmulKI16, LayoutRoundTripsAndRowsReadBack) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t rows = 32, cols = 512;
    const auto w = weights(t, rows, cols, 11);
    auto il = interleaved(t, w, rows, cols);
    EXPECT_NE(il, w);
    const size_t rb = weight_row_bytes(t, cols);
    std::vector<uint8_t> row(rb);
    for (int64_t r = 0; r < rows; ++r) {
      read_row(t, WeightLayout::kInterleaved16, il.data(), cols, r, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), &w[size_t(r) * rb], rb)) << r;
    }
    deinterleave16(t, il.data(), cols, 0, rows / kInterleaveRows);
    EXPECT_EQ(il, w);
    interleave16(t, il.data(), cols, 0, rows / kInterleaveRows);
    EXPECT_EQ(il, interleaved(t, w, rows, cols));
  }
}

TEST(MatmulKI16, SimdEqualsScalarTwinOnEveryTarget) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    for (int64_t cols : {256, 768}) {
      const int64_t rows = 48;
      const auto w = weights(t, rows, cols, 3);
      const auto il = interleaved(t, w, rows, cols);
      const int n_max = 70;
      const auto x = random_floats(size_t(n_max * cols), 7, 1.5f);
      QuantizedActsK q;
      quantize_acts_k(x.data(), cols, n_max, cols, q);
      for (int n_tok : {1, 2, 3, 4, 5, 7, 8, 13, 33, 64, 65, 70}) {
        std::vector<float> twin(size_t(n_tok * rows)), in_place(twin.size());
        ref::matmul_rows_k(t, w.data(), cols, 0, rows, q, 0, n_tok, twin.data(), rows);
        ref::matmul_rows_k(t, il.data(), cols, 0, rows, q, 0, n_tok, in_place.data(), rows,
                           WeightLayout::kInterleaved16);
        for (size_t i = 0; i < twin.size(); ++i) ASSERT_EQ(bits(twin[i]), bits(in_place[i])) << i;
        testing::for_each_target([&] {
          std::vector<float> got(twin.size(), NAN);
          // odd row splits: inside a group, across groups, to the end
          for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 7}, {7, 29}, {29, 48}}) {
            matmul_rows_k(t, il.data(), cols, r0, r1, q, 0, n_tok, got.data(), rows,
                          WeightLayout::kInterleaved16);
          }
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(bits(got[i]), bits(twin[i])) << i << " tokens " << n_tok;
          }
        });
      }
      // A token range not starting at 0 gives those tokens' outputs.
      std::vector<float> all(size_t(n_max * rows)), part(size_t(5 * rows));
      ref::matmul_rows_k(t, w.data(), cols, 0, rows, q, 0, n_max, all.data(), rows);
      matmul_rows_k(t, il.data(), cols, 0, rows, q, 61, 5, part.data(), rows,
                    WeightLayout::kInterleaved16);
      for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(bits(part[i]), bits(all[61 * rows + i]));
    }
  }
}

// A batch longer than one token panel is computed panel by panel (kernels.h token_panel: 64
// tokens at 8192 columns, so 150 tokens from t0 = 7 take three passes) with the twin's bits.
TEST(MatmulKI16, TokenPanelsOfALongBatchGiveTheTwinsBits) {
  const int64_t cols = 8192, rows = 32;
  const int total = 160, t0 = 7, n_tok = 150;
  ASSERT_LT(token_panel(cols), n_tok / 2);
  const auto x = random_floats(size_t(total * cols), 9, 1.5f);
  QuantizedActsK q;
  quantize_acts_k(x.data(), cols, total, cols, q);
  for (TensorType t : {TensorType::Q4_K, TensorType::Q6_K}) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const auto w = weights(t, rows, cols, 4);
    const auto il = interleaved(t, w, rows, cols);
    std::vector<float> twin(size_t(n_tok * rows));
    ref::matmul_rows_k(t, w.data(), cols, 0, rows, q, t0, n_tok, twin.data(), rows);
    testing::for_each_target([&] {
      std::vector<float> got(twin.size(), NAN);
      matmul_rows_k(t, il.data(), cols, 0, rows, q, t0, n_tok, got.data(), rows,
                    WeightLayout::kInterleaved16);
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(bits(got[i]), bits(twin[i])) << i;
    });
  }
}

// Through matmul_rows_q8 (what the forward pass calls): Q8_K types read QuantizedActs::k.
TEST(MatmulKI16, MatmulRowsQ8TakesTheQ8KForm) {
  const int64_t rows = 16, cols = 512;
  const auto w = weights(TensorType::Q6_K, rows, cols, 5);
  const auto il = interleaved(TensorType::Q6_K, w, rows, cols);
  const auto x = random_floats(size_t(3 * cols), 9);
  QuantizedActs xq;
  quantize_acts_k(x.data(), cols, 3, cols, xq.k);
  std::vector<float> a(size_t(3 * rows)), b(a.size());
  ref::matmul_rows_k(TensorType::Q6_K, w.data(), cols, 0, rows, xq.k, 0, 3, a.data(), rows);
  matmul_rows_q8(TensorType::Q6_K, il.data(), cols, 0, rows, xq, 0, 3, b.data(), rows,
                 WeightLayout::kInterleaved16);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(bits(a[i]), bits(b[i])) << i;
}

// The exact float path on an interleaved matrix gives the kRows matrix's bits.
TEST(MatmulKI16, FloatPathOnInterleavedEqualsRows) {
  for (TensorType t : kTypes) {
    const int64_t rows = 32, cols = 512;
    const auto w = weights(t, rows, cols, 2);
    const auto il = interleaved(t, w, rows, cols);
    const auto x = random_floats(size_t(3 * cols), 4);
    std::vector<float> a(size_t(3 * rows)), b(a.size());
    matmul_rows(t, w.data(), cols, 0, rows, x.data(), cols, 3, a.data(), rows);
    matmul_rows(t, il.data(), cols, 5, 27, x.data(), cols, 3, b.data(), rows,
                WeightLayout::kInterleaved16);
    for (int j = 0; j < 3; ++j) {
      for (int64_t r = 5; r < 27; ++r) {
        ASSERT_EQ(bits(a[size_t(j * rows + r)]), bits(b[size_t(j * rows + r)])) << r;
      }
    }
  }
}

// Random bytes: every level and scale pattern (Q6_K's -128 scale included), NaN and Inf block
// scales. Twin and every target agree (NaN with NaN) and nothing crashes.
TEST(MatmulKI16, RandomBlocksAgreeAndNanScalesDoNotCrash) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t cols = 512, rows = 32;
    std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
    std::mt19937 rng(5);
    for (auto& b : w) b = uint8_t(rng());
    const auto il = interleaved(t, w, rows, cols);
    const auto x = random_floats(size_t(6 * cols), 2);
    QuantizedActsK q;
    quantize_acts_k(x.data(), cols, 6, cols, q);
    std::vector<float> a(size_t(6 * rows));
    ref::matmul_rows_k(t, w.data(), cols, 0, rows, q, 0, 6, a.data(), rows);
    testing::for_each_target([&] {
      // 1-4 tokens take the fused path on AVX-512 VNNI, 6 the levels form.
      for (int n : {1, 4, 6}) {
        std::vector<float> b(size_t(n * rows));
        matmul_rows_k(t, il.data(), cols, 0, rows, q, 0, n, b.data(), rows,
                      WeightLayout::kInterleaved16);
        for (size_t i = 0; i < b.size(); ++i)
          ASSERT_TRUE(same(a[i], b[i])) << i << " " << a[i] << " " << b[i] << " tokens " << n;
      }
    });
  }
}

TEST(MatmulKI16, RejectsTypesWithoutTheKernel) {
  QuantizedActsK q;
  const auto x = random_floats(256, 1);
  quantize_acts_k(x.data(), 256, 1, 256, q);
  std::vector<uint8_t> w(16 * 176);
  std::vector<float> y(16);
  EXPECT_THROW(matmul_rows_k(TensorType::Q8_K, w.data(), 256, 0, 16, q, 0, 1, y.data(), 16,
                             WeightLayout::kInterleaved16),
               Error);
  EXPECT_THROW(matmul_rows_k(TensorType::Q4_K, w.data(), 256, 0, 16, q, 0, 1, y.data(), 16,
                             WeightLayout::kPanel16),
               Error);
  EXPECT_THROW(interleave16(TensorType::Q8_K, w.data(), 256, 0, 1), Error);
}

}  // namespace
}  // namespace lynx::kernels
