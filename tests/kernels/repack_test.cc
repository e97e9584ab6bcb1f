// The 16-row interleaved layout of Q8_0 / Q4_0 matrices (WeightLayout::kInterleaved16): the
// repack functions against the layout as kernels.h specifies it, and every matmul on an
// interleaved matrix against the same matmul on the matrix in rows. The layout only moves
// bytes, so the results must be bit-identical, on every SIMD target, for any row range
// (including ranges that start or end inside a 16-row group) and any token count (the
// direct and the buffered kernels).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/thread_pool.h"
#include "lynx/error.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::Buffer;
using testing::for_each_target;
using testing::random_floats;

using testing::kIntTypes;
constexpr auto kRows = WeightLayout::kRows;
constexpr auto kI16 = WeightLayout::kInterleaved16;

// A quantized [rows x cols] matrix in rows (`plain`) and the same repacked (`inter`), both
// starting `offset` bytes past a 64-byte boundary.
struct Pair {
  int64_t rows, cols;
  size_t row_bytes, bytes;
  Buffer plain, inter;
  Pair(TensorType t, int64_t r, int64_t c, size_t offset, uint32_t seed)
      : rows(r),
        cols(c),
        row_bytes(weight_row_bytes(t, c)),
        bytes(row_bytes * r),
        plain(bytes, offset),
        inter(bytes, offset) {
    const auto v = random_floats(static_cast<size_t>(r * c), seed, 0.1f);
    for (int64_t i = 0; i < r; ++i)
      quantize_row(t, v.data() + i * c, plain.data() + i * row_bytes, c);
    std::memcpy(inter.data(), plain.data(), bytes);
    interleave16(t, inter.data(), c, 0, r / kInterleaveRows);
  }
};

// Activations as the engine makes them, with rows of zeros and of large values mixed in.
QuantizedActs make_acts(int n, int64_t cols, uint32_t seed) {
  auto v = random_floats(static_cast<size_t>(n * cols), seed);
  for (int t = 0; t < n; t += 3) std::fill(v.begin() + t * cols, v.begin() + t * cols + 32, 0.0f);
  for (int t = 1; t < n; t += 5) {
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(t * cols + c)] *= 3e4f;
  }
  QuantizedActs xa;
  quantize_acts(v.data(), cols, n, cols, xa);
  return xa;
}

TEST(Repack, CanInterleave) {
  EXPECT_TRUE(can_interleave(TensorType::Q4_0, 16, 32));
  EXPECT_TRUE(can_interleave(TensorType::Q8_0, 2048, 1024));
  EXPECT_FALSE(can_interleave(TensorType::Q8_0, 24, 32));  // rows not a multiple of 16
  EXPECT_FALSE(can_interleave(TensorType::Q8_0, 0, 32));
  EXPECT_FALSE(can_interleave(TensorType::Q4_0, 16, 48));
  EXPECT_FALSE(can_interleave(TensorType::F16, 16, 32));
  EXPECT_FALSE(can_interleave(TensorType::F32, 16, 32));
}

// The bytes are where kernels.h says, spelled out here independently of repack.cc: per
// group and block, 16 scales then planes of 64 bytes, plane p lane i = quant bytes 4p..4p+3
// of row i.
TEST(Repack, LayoutIsTheDocumentedOne) {
  for (TensorType t : kIntTypes) {
    SCOPED_TRACE(testing::type_name(t));
    const int64_t rows = 32, cols = 96, nb = 3, bb = testing::int_block_bytes(t);
    Pair m(t, rows, cols, 0, 7);
    const int64_t group_block = 16 * bb;
    EXPECT_EQ(group_block, t == TensorType::Q8_0 ? 544 : 288);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = r / 16, i = r % 16;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* src = m.plain.data() + r * m.row_bytes + b * bb;
        const uint8_t* gb = m.inter.data() + g * 16 * m.row_bytes + b * group_block;
        ASSERT_EQ(std::memcmp(gb + 2 * i, src, 2), 0) << "scale r=" << r << " b=" << b;
        for (int64_t k = 0; k < bb - 2; ++k) {
          ASSERT_EQ(gb[32 + 64 * (k / 4) + 4 * i + k % 4], src[2 + k])
              << "r=" << r << " b=" << b << " k=" << k;
        }
      }
    }
  }
}

TEST(Repack, RoundTripsAndReadsRows) {
  for (TensorType t : kIntTypes) {
    for (int64_t cols : {32, 64, 544}) {
      SCOPED_TRACE(std::string(testing::type_name(t)) + " cols=" + std::to_string(cols));
      const int64_t rows = 48;
      Pair m(t, rows, cols, 3, 11);
      ASSERT_NE(std::memcmp(m.plain.data(), m.inter.data(), m.bytes), 0);
      std::vector<uint8_t> row(m.row_bytes), group(16 * m.row_bytes);
      for (int64_t r = 0; r < rows; ++r) {
        read_row(t, kI16, m.inter.data(), cols, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), m.plain.data() + r * m.row_bytes, m.row_bytes), 0) << r;
        read_row(t, kRows, m.plain.data(), cols, r, row.data());
        ASSERT_EQ(std::memcmp(row.data(), m.plain.data() + r * m.row_bytes, m.row_bytes), 0) << r;
      }
      for (int64_t g = 0; g < rows / 16; ++g) {
        deinterleave_group(t, m.inter.data(), cols, g, group.data());
        ASSERT_EQ(std::memcmp(group.data(), m.plain.data() + g * 16 * m.row_bytes, group.size()),
                  0);
      }
      // Group ranges touch only their groups: repack group 1 alone, then the others.
      Buffer part(m.bytes, 0);
      std::memcpy(part.data(), m.plain.data(), m.bytes);
      interleave16(t, part.data(), cols, 1, 2);
      const size_t gbytes = 16 * m.row_bytes;
      EXPECT_EQ(std::memcmp(part.data(), m.plain.data(), gbytes), 0);
      EXPECT_EQ(std::memcmp(part.data() + gbytes, m.inter.data() + gbytes, gbytes), 0);
      EXPECT_EQ(std::memcmp(part.data() + 2 * gbytes, m.plain.data() + 2 * gbytes, gbytes), 0);
      interleave16(t, part.data(), cols, 0, 1);
      interleave16(t, part.data(), cols, 2, 3);
      EXPECT_EQ(std::memcmp(part.data(), m.inter.data(), m.bytes), 0);
      deinterleave16(t, part.data(), cols, 0, rows / 16);
      EXPECT_EQ(std::memcmp(part.data(), m.plain.data(), m.bytes), 0);
      // The repacking copy, group range by group range.
      std::vector<uint8_t> copy(m.bytes);
      interleave16_into(t, m.plain.data(), copy.data(), cols, 0, 2);
      interleave16_into(t, m.plain.data(), copy.data(), cols, 2, 3);
      EXPECT_EQ(std::memcmp(copy.data(), m.inter.data(), m.bytes), 0);
    }
  }
}

TEST(Repack, RejectsTypesAndShapesItCannotInterleave) {
  std::vector<uint8_t> w(16 * 34 * 4);
  std::vector<float> x(64), y(32);
  EXPECT_THROW(interleave16(TensorType::F16, w.data(), 32, 0, 1), Error);
  EXPECT_THROW(interleave16(TensorType::Q8_0, w.data(), 48, 0, 1), Error);
  EXPECT_THROW(deinterleave16(TensorType::BF16, w.data(), 32, 0, 1), Error);
  EXPECT_THROW(interleave16_into(TensorType::F32, w.data(), w.data() + 64, 32, 0, 1), Error);
  EXPECT_THROW(matmul_rows(TensorType::F32, w.data(), 32, 0, 1, x.data(), 32, 1, y.data(), 1, kI16),
               Error);
  EXPECT_THROW(
      ref::matmul_rows(TensorType::F16, w.data(), 32, 0, 1, x.data(), 32, 1, y.data(), 1, kI16),
      Error);
}

// Row ranges: whole matrix, inside one group, across group edges, single rows at both ends
// of a group, and empty.
std::vector<std::pair<int64_t, int64_t>> row_ranges(int64_t rows) {
  return {{0, rows}, {3, rows}, {0, 7},           {5, 21},       {15, 17},
          {16, 32},  {17, 18},  {rows - 1, rows}, {9, rows - 2}, {4, 4}};
}

TEST(Repack, IntegerMatmulOnInterleavedEqualsRowsOnEveryTarget) {
  for_each_target([] {
    for (TensorType t : kIntTypes) {
      for (int64_t cols : {32, 96, 544, 1056}) {
        for (int64_t rows : {32, 80}) {
          Pair m(t, rows, cols, cols % 64 ? 1 : 32, static_cast<uint32_t>(cols + rows));
          const int total = 72;
          const QuantizedActs xa = make_acts(total, cols, static_cast<uint32_t>(cols));
          for (int n_tok : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64, 65, 70}) {
            const int t0 = n_tok % 3;
            for (const auto& [r0, r1] : row_ranges(rows)) {
              SCOPED_TRACE(std::string(testing::type_name(t)) + " cols=" + std::to_string(cols) +
                           " rows=" + std::to_string(rows) + " n_tok=" + std::to_string(n_tok) +
                           " r=[" + std::to_string(r0) + "," + std::to_string(r1) + ")");
              const int64_t ldy = rows + 3;
              const float kSentinel = 12345.0f;
              std::vector<float> yi(static_cast<size_t>(ldy * n_tok), kSentinel), yp(yi);
              matmul_rows_q8(t, m.inter.data(), cols, r0, r1, xa, t0, n_tok, yi.data(), ldy, kI16);
              matmul_rows_q8(t, m.plain.data(), cols, r0, r1, xa, t0, n_tok, yp.data(), ldy);
              for (int j = 0; j < n_tok; ++j) {
                for (int64_t r = 0; r < ldy; ++r) {
                  const float got = yi[j * ldy + r];
                  if (r < r0 || r >= r1) {
                    ASSERT_EQ(got, kSentinel) << "wrote outside rows, r=" << r << " j=" << j;
                  } else {
                    ASSERT_EQ(got, yp[j * ldy + r]) << "r=" << r << " j=" << j;
                  }
                }
              }
            }
          }
        }
      }
    }
  });
}

// The scalar twins read the interleaved layout in place (their own indexing) and agree with
// themselves on rows and with the SIMD kernels.
TEST(Repack, ScalarTwinsOnInterleavedEqualRows) {
  for (TensorType t : kIntTypes) {
    const int64_t rows = 48, cols = 544;
    Pair m(t, rows, cols, 5, 3);
    const int n_tok = 5;
    const QuantizedActs xa = make_acts(n_tok, cols, 4);
    const auto xf = random_floats(static_cast<size_t>(n_tok * cols), 6);
    for (const auto& [r0, r1] : row_ranges(rows)) {
      SCOPED_TRACE(std::string(testing::type_name(t)) + " r=[" + std::to_string(r0) + "," +
                   std::to_string(r1) + ")");
      std::vector<float> a(static_cast<size_t>(rows * n_tok)), b(a.size()), c(a.size());
      ref::matmul_rows_q8(t, m.inter.data(), cols, r0, r1, xa, 0, n_tok, a.data(), rows, kI16);
      ref::matmul_rows_q8(t, m.plain.data(), cols, r0, r1, xa, 0, n_tok, b.data(), rows);
      matmul_rows_q8(t, m.inter.data(), cols, r0, r1, xa, 0, n_tok, c.data(), rows, kI16);
      EXPECT_EQ(a, b);
      EXPECT_EQ(a, c);
      std::vector<float> fa(a.size()), fb(a.size());
      ref::matmul_rows(t, m.inter.data(), cols, r0, r1, xf.data(), cols, n_tok, fa.data(), rows,
                       kI16);
      ref::matmul_rows(t, m.plain.data(), cols, r0, r1, xf.data(), cols, n_tok, fb.data(), rows);
      EXPECT_EQ(fa, fb);
    }
  }
}

// The exact float path (--exact-acts) on interleaved weights: the same bits as on rows.
TEST(Repack, FloatMatmulOnInterleavedEqualsRowsOnEveryTarget) {
  for_each_target([] {
    for (TensorType t : kIntTypes) {
      const int64_t rows = 48;
      for (int64_t cols : {32, 544}) {
        Pair m(t, rows, cols, 1, static_cast<uint32_t>(cols));
        for (int n_tok : {1, 4, 5, 40}) {
          const auto x = random_floats(static_cast<size_t>(n_tok * cols), 8);
          for (const auto& [r0, r1] : row_ranges(rows)) {
            SCOPED_TRACE(std::string(testing::type_name(t)) + " cols=" + std::to_string(cols) +
                         " n_tok=" + std::to_string(n_tok) + " r=[" + std::to_string(r0) + "," +
                         std::to_string(r1) + ")");
            const float kSentinel = -7.0f;
            std::vector<float> yi(static_cast<size_t>(rows * n_tok), kSentinel), yp(yi);
            matmul_rows(t, m.inter.data(), cols, r0, r1, x.data(), cols, n_tok, yi.data(), rows,
                        kI16);
            matmul_rows(t, m.plain.data(), cols, r0, r1, x.data(), cols, n_tok, yp.data(), rows);
            ASSERT_EQ(yi, yp);
          }
        }
      }
    }
  });
}

// The pool entry points split the rows over threads (chunks of 16 rows; a thread may also get
// the whole matrix): bit-identical to rows for any thread count, both paths.
TEST(Repack, PoolMatmulOnInterleavedEqualsRows) {
  for (TensorType t : kIntTypes) {
    const int64_t rows = 112, cols = 544;
    Pair m(t, rows, cols, 0, 21);
    for (int n_tok : {1, 3, 17}) {
      const auto x = random_floats(static_cast<size_t>(n_tok * cols), 2);
      QuantizedActs xa;
      quantize_acts(x.data(), cols, n_tok, cols, xa);
      std::vector<float> want(static_cast<size_t>(rows * n_tok)), want_f(want.size());
      matmul_rows_q8(t, m.plain.data(), cols, 0, rows, xa, 0, n_tok, want.data(), rows);
      matmul_rows(t, m.plain.data(), cols, 0, rows, x.data(), cols, n_tok, want_f.data(), rows);
      for (int threads = 1; threads <= 4; ++threads) {
        SCOPED_TRACE(std::string(testing::type_name(t)) + " n_tok=" + std::to_string(n_tok) +
                     " threads=" + std::to_string(threads));
        ThreadPool pool(threads);
        std::vector<float> y(want.size()), yf(want.size());
        matmul(pool, t, m.inter.data(), rows, cols, xa, y.data(), rows, kI16);
        matmul(pool, t, m.inter.data(), rows, cols, x.data(), cols, n_tok, yf.data(), rows, kI16);
        EXPECT_EQ(y, want);
        EXPECT_EQ(yf, want_f);
      }
    }
  }
}

// Weights at the ends of their ranges (Q8_0 -128 / 127, Q4_0 nibbles 0 / 15) against
// activations of +-127, interleaved: the same as on rows on every target.
TEST(Repack, ExtremeValuesOnInterleavedEqualRows) {
  for_each_target([] {
    const int64_t rows = 32, cols = 96;
    for (TensorType t : kIntTypes) {
      const std::vector<uint8_t> w = testing::extreme_int_weights(t, rows, cols);
      std::vector<uint8_t> wi(w);
      interleave16(t, wi.data(), cols, 0, rows / 16);
      std::vector<float> x(static_cast<size_t>(5 * cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 3) % 2 ? 127.0f : -127.0f;
      QuantizedActs xa;
      quantize_acts(x.data(), cols, 5, cols, xa);
      std::vector<float> y(static_cast<size_t>(rows * 5)), yi(y.size());
      matmul_rows_q8(t, w.data(), cols, 0, rows, xa, 0, 5, y.data(), rows);
      matmul_rows_q8(t, wi.data(), cols, 0, rows, xa, 0, 5, yi.data(), rows, kI16);
      EXPECT_EQ(y, yi) << testing::type_name(t);
    }
  });
}

}  // namespace
}  // namespace lynx::kernels
