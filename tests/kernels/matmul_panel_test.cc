// The kPanel16 float layout: the repack and its reading back, the scalar twin on it, and the
// kernels' promise (kernels.h): every output is one FMA chain over the columns in order, so
// on every instruction set with FMA it equals that chain computed here with std::fma, bit for
// bit, whatever the row range, the token count (the kernels group tokens by count and chunk
// columns past one group) and the threads.
#include <gtest/gtest.h>

#include <cmath>
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
using testing::dot_tolerance;
using testing::for_each_target;
using testing::random_floats;

const TensorType kFloatTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16};

// A [rows x cols] matrix in the file's layout and its kPanel16 copy (misaligned by `offset`),
// with the dequantized values.
struct PanelMatrix {
  TensorType type;
  int64_t rows, cols;
  size_t row_bytes;
  std::vector<uint8_t> plain;
  Buffer panel;
  std::vector<float> deq;
  PanelMatrix(TensorType t, int64_t r, int64_t c, size_t offset, uint32_t seed)
      : type(t),
        rows(r),
        cols(c),
        row_bytes(weight_row_bytes(t, c)),
        plain(row_bytes * r),
        panel(row_bytes * r, offset),
        deq(static_cast<size_t>(r * c)) {
    const auto v = random_floats(static_cast<size_t>(r * c), seed);
    for (int64_t i = 0; i < r; ++i) {
      quantize_row(t, v.data() + i * c, plain.data() + i * row_bytes, c);
      ref::dequantize_row(t, plain.data() + i * row_bytes, &deq[i * c], c);
    }
    panel16_into(t, plain.data(), panel.data(), c, 0, r / kPanelRows);
  }
  // The chain the kernels promise, with one rounding per step.
  float chain(int64_t r, const float* x) const {
    float acc = 0.0f;
    for (int64_t c = 0; c < cols; ++c) acc = std::fma(deq[r * cols + c], x[c], acc);
    return acc;
  }
};

// FMA is native on the x86 targets from AVX2 up; a target without it (a scalar fallback)
// rounds the product and the sum separately, so only the tolerance applies there.
bool target_has_fma() {
  return std::string(simd_target_name()).rfind("AVX", 0) == 0;
}

TEST(PanelLayout, RepackReadsBackAndMatchesTheRowsLayoutInTheScalarTwin) {
  for (TensorType t : kFloatTypes) {
    SCOPED_TRACE(testing::type_name(t));
    PanelMatrix m(t, 48, 37, 2, 11);
    std::vector<uint8_t> row(m.row_bytes);
    for (int64_t r = 0; r < m.rows; ++r) {
      read_row(t, WeightLayout::kPanel16, m.panel.data(), m.cols, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), m.plain.data() + r * m.row_bytes, m.row_bytes), 0) << r;
    }
    // The layout written out by hand: element (r, c) at (r - r % 16) * cols + 16 c + r % 16.
    const size_t es = m.row_bytes / size_t(m.cols);
    EXPECT_EQ(std::memcmp(m.panel.data() + ((16 * m.cols) + 5 * 16 + 3) * es,
                          m.plain.data() + (19 * m.cols + 5) * es, es),
              0);
    // The scalar twin reads the panels with its own indexing: the same values, the same sums.
    const int n_tok = 3;
    const auto x = random_floats(size_t(m.cols * n_tok), 4);
    std::vector<float> a(size_t(m.rows * n_tok)), b(a.size());
    ref::matmul_rows(t, m.plain.data(), m.cols, 0, m.rows, x.data(), m.cols, n_tok, a.data(),
                     m.rows);
    ref::matmul_rows(t, m.panel.data(), m.cols, 0, m.rows, x.data(), m.cols, n_tok, b.data(),
                     m.rows, WeightLayout::kPanel16);
    EXPECT_EQ(a, b);
  }
  EXPECT_TRUE(can_panel16(TensorType::F16, 32, 1));
  EXPECT_FALSE(can_panel16(TensorType::F16, 24, 64));
  EXPECT_FALSE(can_panel16(TensorType::Q8_0, 32, 64));
  EXPECT_FALSE(can_panel16(TensorType::F32, 16, 0));
}

TEST(PanelLayout, RejectsTypesThatHaveNoPanels) {
  std::vector<uint8_t> w(34 * 16 * 2), d(w.size());
  std::vector<float> x(64), y(64);
  EXPECT_THROW(panel16_into(TensorType::Q8_0, w.data(), d.data(), 64, 0, 1), Error);
  EXPECT_THROW(matmul_rows(TensorType::Q8_0, w.data(), 64, 0, 16, x.data(), 64, 1, y.data(), 16,
                           WeightLayout::kPanel16),
               Error);
  EXPECT_THROW(ref::matmul_rows(TensorType::Q4_0, w.data(), 64, 0, 16, x.data(), 64, 1, y.data(),
                                16, WeightLayout::kPanel16),
               Error);
  EXPECT_THROW(read_row(TensorType::Q4_0, WeightLayout::kPanel16, w.data(), 64, 0, d.data()),
               Error);
}

TEST(PanelMatmul, EveryOutputIsOneFmaChainOnEveryTarget) {
  for_each_target([] {
    const bool exact = target_has_fma();
    for (TensorType t : kFloatTypes) {
      for (int64_t cols : {1, 3, 17, 255, 513, 1040}) {
        PanelMatrix m(t, 64, cols, cols % 2 ? 2 : 6, uint32_t(cols));
        // Around the group sizes (14 tokens with AVX-512, 6 with AVX2), the column-chunked
        // path past one group, and more tokens than share one accumulator buffer (64).
        for (int n_tok : {1, 2, 5, 6, 7, 13, 14, 15, 29, 70}) {
          // Whole panels, partial panels at both ends, one row, one odd panel.
          for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 64},
                                {5, 37},
                                {17, 18},
                                {16, 32},
                                {32, 64},
                                {0, 48}}) {
            SCOPED_TRACE(std::string(testing::type_name(t)) + " cols=" + std::to_string(cols) +
                         " n_tok=" + std::to_string(n_tok) + " rows [" + std::to_string(r0) + ", " +
                         std::to_string(r1) + ")");
            const int64_t ldx = cols + 1, ldy = m.rows + 3;
            const auto x = random_floats(size_t(ldx * n_tok), uint32_t(n_tok));
            const float kSentinel = -777.0f;
            std::vector<float> y(size_t(ldy * n_tok), kSentinel);
            matmul_rows(t, m.panel.data(), cols, r0, r1, x.data(), ldx, n_tok, y.data(), ldy,
                        WeightLayout::kPanel16);
            for (int j = 0; j < n_tok; ++j) {
              for (int64_t r = 0; r < ldy; ++r) {
                const float got = y[size_t(j * ldy + r)];
                if (r < r0 || r >= r1) {
                  ASSERT_EQ(got, kSentinel) << "wrote outside rows, r=" << r;
                  continue;
                }
                const float want = m.chain(r, x.data() + j * ldx);
                if (exact) {
                  ASSERT_EQ(got, want) << "r=" << r << " j=" << j;
                } else {
                  double abs_sum = 0;
                  for (int64_t c = 0; c < cols; ++c) {
                    abs_sum += std::abs(double(m.deq[r * cols + c]) * x[j * ldx + c]);
                  }
                  ASSERT_NEAR(got, want, 2 * dot_tolerance(cols, abs_sum, want));
                }
              }
            }
          }
        }
      }
    }
  });
}

// Whatever the target: row splits, token counts and thread counts never change a bit.
TEST(PanelMatmul, BitExactAcrossRowSplitsTokenCountsAndThreads) {
  for_each_target([] {
    for (TensorType t : kFloatTypes) {
      SCOPED_TRACE(testing::type_name(t));
      PanelMatrix m(t, 80, 300, 0, 5);
      const int n_tok = 33;
      const auto x = random_floats(size_t(m.cols * n_tok), 8);
      std::vector<float> full(size_t(m.rows * n_tok));
      matmul_rows(t, m.panel.data(), m.cols, 0, m.rows, x.data(), m.cols, n_tok, full.data(),
                  m.rows, WeightLayout::kPanel16);
      std::vector<float> split(full.size());
      for (int64_t r0 = 0; r0 < m.rows; r0 += 7) {
        matmul_rows(t, m.panel.data(), m.cols, r0, std::min(m.rows, r0 + 7), x.data(), m.cols,
                    n_tok, split.data(), m.rows, WeightLayout::kPanel16);
      }
      EXPECT_EQ(split, full);
      for (int nt = 1; nt < n_tok; ++nt) {
        std::vector<float> y(size_t(m.rows * nt));
        matmul_rows(t, m.panel.data(), m.cols, 0, m.rows, x.data(), m.cols, nt, y.data(), m.rows,
                    WeightLayout::kPanel16);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], full[i]) << "n_tok=" << nt;
      }
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> y(full.size());
        matmul(pool, t, m.panel.data(), m.rows, m.cols, x.data(), m.cols, n_tok, y.data(), m.rows,
               WeightLayout::kPanel16);
        EXPECT_EQ(y, full) << "threads=" << threads;
      }
    }
  });
}

}  // namespace
}  // namespace lynx::kernels
