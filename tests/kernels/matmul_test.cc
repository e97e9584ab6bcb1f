// matmul_rows and dequantize_row: SIMD against the scalar twin for every weight type, odd
// sizes, misaligned pointers, token counts around the group sizes, and row ranges r0 > 0;
// plus the bit-exactness promises (row splits, threads, token batching).
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

const TensorType kTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0,
                             TensorType::Q4_0};

// A quantized [rows x cols] matrix in a buffer starting `offset` bytes past alignment.
struct Matrix {
  TensorType type;
  int64_t rows, cols;
  size_t row_bytes;
  Buffer buf;
  Matrix(TensorType t, int64_t r, int64_t c, size_t offset, uint32_t seed)
      : type(t), rows(r), cols(c), row_bytes(weight_row_bytes(t, c)), buf(row_bytes * r, offset) {
    const auto v = random_floats(static_cast<size_t>(r * c), seed);
    for (int64_t i = 0; i < r; ++i) {
      quantize_row(t, v.data() + i * c, buf.data() + i * row_bytes, c);
    }
  }
  const uint8_t* row(int64_t r) { return buf.data() + r * row_bytes; }
};

std::vector<int64_t> cols_for(TensorType t) {
  if (block_elems(t) == 32) return {32, 64, 96, 544, 1056};
  return {1, 3, 17, 31, 32, 33, 255, 513, 1040};
}

TEST(Matmul, MatchesReferenceForEveryTypeSizeAndTokenCount) {
  for_each_target([] {
    for (TensorType t : kTypes) {
      for (int64_t cols : cols_for(t)) {
        const int64_t rows = 11;
        const size_t w_off = (cols % 2) ? 2 : 1;  // never aligned
        Matrix m(t, rows, cols, w_off, static_cast<uint32_t>(cols));
        // Dequantized rows: the tolerance is computed from the exact weights the kernel uses.
        std::vector<float> deq(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r) ref::dequantize_row(t, m.row(r), &deq[r * cols], cols);
        for (int n_tok : {1, 2, 3, 4, 5, 8, 17, 70}) {
          for (int64_t r0 : {0, 3}) {
            SCOPED_TRACE(std::string(testing::type_name(t)) + " cols=" + std::to_string(cols) +
                         " n_tok=" + std::to_string(n_tok) + " r0=" + std::to_string(r0));
            const int64_t ldx = cols + 3, ldy = rows + 2;
            Buffer xb(static_cast<size_t>(ldx * n_tok) * 4, 4);  // x misaligned by one float
            const auto xv = random_floats(static_cast<size_t>(ldx * n_tok), 7 + n_tok);
            std::memcpy(xb.f32(), xv.data(), xv.size() * 4);
            const float kSentinel = 12345.0f;
            std::vector<float> y(static_cast<size_t>(ldy * n_tok), kSentinel);
            std::vector<float> yr(y.size(), kSentinel);
            matmul_rows(t, m.buf.data(), cols, r0, rows, xb.f32(), ldx, n_tok, y.data(), ldy);
            ref::matmul_rows(t, m.buf.data(), cols, r0, rows, xb.f32(), ldx, n_tok, yr.data(), ldy);
            for (int j = 0; j < n_tok; ++j) {
              for (int64_t r = 0; r < ldy; ++r) {
                const float got = y[j * ldy + r], want = yr[j * ldy + r];
                if (r < r0 || r >= rows) {
                  ASSERT_EQ(got, kSentinel) << "wrote outside rows, r=" << r;
                  continue;
                }
                double abs_sum = 0;
                for (int64_t c = 0; c < cols; ++c) {
                  abs_sum +=
                      std::abs(static_cast<double>(deq[r * cols + c]) * xb.f32()[j * ldx + c]);
                }
                ASSERT_NEAR(got, want, dot_tolerance(cols, abs_sum, want))
                    << "r=" << r << " j=" << j;
              }
            }
          }
        }
      }
    }
  });
}

// Each output depends only on its row and token: splitting rows, batching tokens and threads
// must give bit-identical results (the engine's output must not depend on its thread count).
TEST(Matmul, BitExactAcrossRowSplitsTokenBatchesAndThreads) {
  for_each_target([] {
    for (TensorType t : kTypes) {
      const int64_t rows = 77, cols = block_elems(t) == 32 ? 544 : 517;
      Matrix m(t, rows, cols, 0, 99);
      const int n_tok = 34;  // past kDirectMaxFloat (32): both float paths
      const auto x = random_floats(static_cast<size_t>(cols * n_tok), 5);
      std::vector<float> full(static_cast<size_t>(rows * n_tok));
      matmul_rows(t, m.buf.data(), cols, 0, rows, x.data(), cols, n_tok, full.data(), rows);

      std::vector<float> split(full.size());
      for (int64_t r0 = 0; r0 < rows; r0 += 5) {
        matmul_rows(t, m.buf.data(), cols, r0, std::min(rows, r0 + 5), x.data(), cols, n_tok,
                    split.data(), rows);
      }
      EXPECT_EQ(split, full) << testing::type_name(t) << ": row split";

      for (int j = 0; j < n_tok; ++j) {  // one token at a time
        std::vector<float> one(static_cast<size_t>(rows));
        matmul_rows(t, m.buf.data(), cols, 0, rows, x.data() + j * cols, cols, 1, one.data(), rows);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(one[r], full[j * rows + r]) << testing::type_name(t) << " token " << j;
        }
      }

      // Every token count (the kernels group tokens differently per count): the first nt
      // tokens' outputs equal those of the full batch.
      for (int nt = 2; nt < n_tok; ++nt) {
        std::vector<float> y(static_cast<size_t>(rows * nt));
        matmul_rows(t, m.buf.data(), cols, 0, rows, x.data(), cols, nt, y.data(), rows);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_EQ(y[i], full[i]) << testing::type_name(t) << " n_tok=" << nt;
        }
      }

      for (int threads = 1; threads <= 4; ++threads) {
        ThreadPool pool(threads);
        for (int nt : {1, 3, 17}) {
          std::vector<float> y(static_cast<size_t>(rows * nt));
          matmul(pool, t, m.buf.data(), rows, cols, x.data(), cols, nt, y.data(), rows);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(y[i], full[i]) << testing::type_name(t) << " threads=" << threads;
          }
        }
      }
    }
  });
}

// The working memory of the kernels that need one (the exact path of an interleaved matrix: a
// 16-row group back in rows, then decoded) is the pool's, per worker: it holds what the largest
// call needed, goes with release_scratch, and the results do not depend on it.
TEST(Matmul, WorkingMemoryIsThePoolsPerWorker) {
  for (const TensorType t : {TensorType::Q8_0, TensorType::Q4_K}) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t rows = 64, cols = 512;
    ASSERT_TRUE(can_interleave(t, rows, cols));
    Matrix m(t, rows, cols, 0, 9);
    std::vector<uint8_t> packed(m.row_bytes * rows);
    std::memcpy(packed.data(), m.buf.data(), packed.size());
    interleave16(t, packed.data(), cols, 0, rows / 16);
    const int n_tok = 3;
    const auto x = random_floats(size_t(n_tok * cols), 4);
    std::vector<float> want(size_t(n_tok * rows)), got(want.size()), again(want.size());
    matmul_rows(t, m.buf.data(), cols, 0, rows, x.data(), cols, n_tok, want.data(), rows);
    ThreadPool pool(2);
    EXPECT_EQ(pool.scratch_bytes(), 0u);
    matmul(pool, t, packed.data(), rows, cols, x.data(), cols, n_tok, got.data(), rows,
           WeightLayout::kInterleaved16);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
    EXPECT_GE(pool.scratch_bytes(), m.row_bytes * 16);  // at least one group's rows
    pool.release_scratch();
    EXPECT_EQ(pool.scratch_bytes(), 0u);
    matmul(pool, t, packed.data(), rows, cols, x.data(), cols, n_tok, again.data(), rows,
           WeightLayout::kInterleaved16);
    EXPECT_EQ(0, std::memcmp(want.data(), again.data(), want.size() * 4));
    EXPECT_THROW(pool.scratch(2), Error);
  }
}

TEST(Matmul, RejectsBadArguments) {
  std::vector<uint8_t> w(1024);
  std::vector<float> x(64), y(64);
  EXPECT_THROW(matmul_rows(TensorType::Q8_0, w.data(), 33, 0, 1, x.data(), 33, 1, y.data(), 1),
               Error);
  EXPECT_THROW(matmul_rows(TensorType::IQ2_XXS, w.data(), 256, 0, 1, x.data(), 256, 1, y.data(), 1),
               Error);
  EXPECT_THROW(matmul_rows(TensorType::F32, w.data(), 8, 2, 1, x.data(), 8, 1, y.data(), 1), Error);
  // Empty ranges are fine and write nothing.
  y[0] = 7.0f;
  matmul_rows(TensorType::F32, w.data(), 8, 1, 1, x.data(), 8, 1, y.data(), 1);
  matmul_rows(TensorType::F32, w.data(), 8, 0, 1, x.data(), 8, 0, y.data(), 1);
  EXPECT_EQ(y[0], 7.0f);
}

TEST(Dequantize, SimdEqualsReferenceBitExactly) {
  for_each_target([] {
    for (TensorType t : kTypes) {
      for (int64_t n : cols_for(t)) {
        for (size_t off : {0, 1, 3}) {
          Matrix m(t, 1, n, off, static_cast<uint32_t>(n + off));
          std::vector<float> a(static_cast<size_t>(n) + 1, -1.0f), b(a);
          dequantize_row(t, m.row(0), a.data(), n);
          ref::dequantize_row(t, m.row(0), b.data(), n);
          EXPECT_EQ(a, b) << testing::type_name(t) << " n=" << n;
          EXPECT_EQ(a[n], -1.0f) << "wrote past the row";
        }
      }
    }
  });
}

}  // namespace
}  // namespace lynx::kernels
