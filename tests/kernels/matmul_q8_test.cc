// The integer path (Q8_0 / Q4_0 weights x activations quantized to Q8_0 blocks): the SIMD
// quantizer against its scalar twin and ggml's Q8_0 quantizer, and matmul_rows_q8 against
// its scalar twin on every SIMD target. Both compute exact integer block sums and the same
// FMA per block in the same order, so the results must be bit-identical, not just close.
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
using testing::for_each_target;
using testing::random_floats;

using testing::kIntTypes;

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Activations of n rows x ld floats with features that stress the quantizer: blocks of
// zeros, a block whose products x * id land exactly on .5 (ties: roundf rounds them away
// from zero, round-to-even would not), tiny and large scales.
std::vector<float> make_acts(int n, int64_t ld, int64_t cols, uint32_t seed) {
  auto v = random_floats(static_cast<size_t>(n * ld), seed);
  for (int t = 0; t < n; ++t) {
    float* row = v.data() + t * ld;
    if (cols >= 64 && t % 3 == 1) std::fill(row + 32, row + 64, 0.0f);
    if (cols >= 96 && t % 2 == 0) {  // amax 127 -> d = 1, id = 1: x = k + 0.5 are ties
      for (int j = 0; j < 32; ++j) row[64 + j] = static_cast<float>(j % 2 ? j : -j) + 0.5f;
      row[64] = 127.0f;
    }
    if (t % 4 == 3) {
      for (int64_t c = 0; c < cols; ++c) row[c] *= 1e-6f;
    }
    if (t % 5 == 4) {
      for (int64_t c = 0; c < cols; ++c) row[c] *= 3e4f;
    }
  }
  return v;
}

TEST(QuantizeActs, SimdEqualsScalarTwinAndGgmlQ8_0) {
  for_each_target([] {
    for (int64_t cols : {32, 64, 96, 544, 1056, 2048}) {
      for (int n : {1, 3, 17}) {
        SCOPED_TRACE("cols=" + std::to_string(cols) + " n=" + std::to_string(n));
        const int64_t ldx = cols + 5;
        Buffer xb(static_cast<size_t>(ldx * n) * 4, 4);  // misaligned by one float
        const auto xv = make_acts(n, ldx, cols, static_cast<uint32_t>(cols + n));
        std::memcpy(xb.f32(), xv.data(), xv.size() * 4);
        QuantizedActs a, b;
        quantize_acts(xb.f32(), ldx, n, cols, a);
        b.resize(n, cols);
        ref::quantize_acts_rows(xb.f32(), ldx, 0, n, b);
        ASSERT_EQ(a.q, b.q);
        ASSERT_EQ(a.sum, b.sum);
        for (size_t i = 0; i < a.d.size(); ++i) {  // bitwise (no NaN here)
          ASSERT_EQ(std::memcmp(&a.d[i], &b.d[i], 4), 0) << i;
        }
        // The same numbers as the Q8_0 weight quantizer (ggml's quantize_row_q8_0_ref).
        std::vector<uint8_t> blocks(weight_row_bytes(TensorType::Q8_0, cols));
        for (int t = 0; t < n; ++t) {
          quantize_row(TensorType::Q8_0, xb.f32() + t * ldx, blocks.data(), cols);
          for (int64_t blk = 0; blk < cols / 32; ++blk) {
            const uint8_t* p = blocks.data() + blk * 34;
            const size_t bi = static_cast<size_t>(t * (cols / 32) + blk);
            ASSERT_EQ(fp32_to_fp16(a.d[bi]), load_u16(p));
            ASSERT_EQ(a.d[bi], fp16_to_fp32(load_u16(p)));
            int32_t s = 0;
            for (int j = 0; j < 32; ++j) {
              const int8_t q = a.q[static_cast<size_t>(t * cols + blk * 32 + j)];
              ASSERT_EQ(q, static_cast<int8_t>(p[2 + j])) << "t=" << t << " col " << blk * 32 + j;
              s += q;
            }
            ASSERT_EQ(a.sum[bi], s);
          }
        }
      }
    }
  });
}

TEST(QuantizeActs, TiesRoundAwayFromZero) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 15.5f;  // ..., -0.5, 0.5, ...
  x[0] = -127.0f;                                                     // d = 1
  QuantizedActs a;
  quantize_acts(x.data(), 32, 1, 32, a);
  EXPECT_EQ(a.d[0], 1.0f);
  EXPECT_EQ(a.q[15], -1);  // -0.5
  EXPECT_EQ(a.q[16], 1);   // 0.5
  EXPECT_EQ(a.q[18], 3);   // 2.5 (to even would give 2)
  EXPECT_EQ(a.q[0], -127);
}

// A [rows x cols] matrix of type t in a buffer starting `offset` bytes past alignment.
struct IntMatrix {
  int64_t rows, cols;
  size_t row_bytes;
  Buffer buf;
  IntMatrix(TensorType t, int64_t r, int64_t c, size_t offset, uint32_t seed)
      : rows(r), cols(c), row_bytes(weight_row_bytes(t, c)), buf(row_bytes * r, offset) {
    const auto v = random_floats(static_cast<size_t>(r * c), seed, 0.1f);
    for (int64_t i = 0; i < r; ++i) {
      quantize_row(t, v.data() + i * c, buf.data() + i * row_bytes, c);
    }
  }
};

TEST(MatmulQ8, SimdEqualsScalarTwinForEveryTargetSizeAndTokenCount) {
  for_each_target([] {
    for (TensorType t : kIntTypes) {
      for (int64_t cols : {32, 64, 96, 544, 1056}) {
        for (int64_t rows : {11, 37}) {
          IntMatrix m(t, rows, cols, cols % 64 ? 1 : 3, static_cast<uint32_t>(cols + rows));
          const int total = 72;  // the calls use tokens [t0, t0 + n_tok) of these
          const auto xv = make_acts(total, cols, cols, static_cast<uint32_t>(cols));
          QuantizedActs xa;
          quantize_acts(xv.data(), cols, total, cols, xa);
          for (int n_tok : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64, 65, 70}) {
            for (int64_t r0 : {0, 3}) {
              const int t0 = n_tok % 3;
              SCOPED_TRACE(std::string(testing::type_name(t)) + " cols=" + std::to_string(cols) +
                           " rows=" + std::to_string(rows) + " n_tok=" + std::to_string(n_tok) +
                           " r0=" + std::to_string(r0));
              const int64_t ldy = rows + 2;
              const float kSentinel = 12345.0f;
              std::vector<float> y(static_cast<size_t>(ldy * n_tok), kSentinel), yr(y);
              matmul_rows_q8(t, m.buf.data(), cols, r0, rows, xa, t0, n_tok, y.data(), ldy);
              ref::matmul_rows_q8(t, m.buf.data(), cols, r0, rows, xa, t0, n_tok, yr.data(), ldy);
              for (int j = 0; j < n_tok; ++j) {
                for (int64_t r = 0; r < ldy; ++r) {
                  const float got = y[j * ldy + r];
                  if (r < r0 || r >= rows) {
                    ASSERT_EQ(got, kSentinel) << "wrote outside rows, r=" << r;
                    continue;
                  }
                  ASSERT_EQ(got, yr[j * ldy + r]) << "r=" << r << " j=" << j;
                }
              }
            }
          }
        }
      }
    }
  });
}

// A batch longer than one token panel (token_panel: ~256 KiB of activation rows per pass over
// the weights) is computed panel by panel; the outputs are the scalar twin's bits whatever the
// panel boundaries (64 tokens at 8192 columns: 150 tokens from t0 = 7 take three passes).
TEST(MatmulQ8, TokenPanelsOfALongBatchGiveTheTwinsBits) {
  static_assert(token_panel(2048) == 128 && token_panel(8192) == 64 && token_panel(64) == 4096);
  const int64_t cols = 8192, rows = 37, r0 = 3;
  const int total = 160, t0 = 7, n_tok = 150;
  ASSERT_LT(token_panel(cols), n_tok / 2);
  const auto xv = make_acts(total, cols, cols, 11);
  QuantizedActs xa;
  quantize_acts(xv.data(), cols, total, cols, xa);
  for (TensorType t : kIntTypes) {
    SCOPED_TRACE(testing::type_name(t));
    IntMatrix m(t, rows, cols, 0, 5);
    std::vector<float> yr(static_cast<size_t>(rows * n_tok));
    ref::matmul_rows_q8(t, m.buf.data(), cols, r0, rows, xa, t0, n_tok, yr.data(), rows);
    for_each_target([&] {
      std::vector<float> y(yr.size(), 0.f);
      matmul_rows_q8(t, m.buf.data(), cols, r0, rows, xa, t0, n_tok, y.data(), rows);
      for (int j = 0; j < n_tok; ++j) {
        for (int64_t r = r0; r < rows; ++r) {
          ASSERT_EQ(y[j * rows + r], yr[j * rows + r]) << "r=" << r << " j=" << j;
        }
      }
    });
  }
}

// Weight and activation values at the ends of their ranges: Q8_0 -128 and 127 against
// activations of +-127 (the largest u8 x s8 pair sums of the non-VNNI kernels), Q4_0 nibbles
// 0 and 15.
TEST(MatmulQ8, ExtremeValuesMatchScalarTwin) {
  for_each_target([] {
    const int64_t rows = 19, cols = 96;
    for (TensorType t : kIntTypes) {
      const std::vector<uint8_t> w = testing::extreme_int_weights(t, rows, cols);
      std::vector<float> x(static_cast<size_t>(5 * cols));
      for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 3) % 2 ? 127.0f : -127.0f;
      for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(4 * cols + c)] = 127.0f;
      QuantizedActs xa;
      quantize_acts(x.data(), cols, 5, cols, xa);
      std::vector<float> y(static_cast<size_t>(rows * 5)), yr(y.size());
      matmul_rows_q8(t, w.data(), cols, 0, rows, xa, 0, 5, y.data(), rows);
      ref::matmul_rows_q8(t, w.data(), cols, 0, rows, xa, 0, 5, yr.data(), rows);
      EXPECT_EQ(y, yr) << testing::type_name(t);
    }
  });
}

// The integer path computes sum_c W[r][c] * xq[c] with the dequantized weights and
// activations: within float rounding of the exact product of those values.
TEST(MatmulQ8, EqualsProductOfDequantizedValues) {
  const int64_t rows = 21, cols = 544;
  const int n_tok = 6;
  for (TensorType t : kIntTypes) {
    IntMatrix m(t, rows, cols, 0, 5);
    const auto xv = random_floats(static_cast<size_t>(n_tok * cols), 9);
    QuantizedActs xa;
    quantize_acts(xv.data(), cols, n_tok, cols, xa);
    std::vector<float> y(static_cast<size_t>(rows * n_tok));
    matmul_rows_q8(t, m.buf.data(), cols, 0, rows, xa, 0, n_tok, y.data(), rows);
    std::vector<float> wd(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      ref::dequantize_row(t, m.buf.data() + r * m.row_bytes, wd.data(), cols);
      for (int j = 0; j < n_tok; ++j) {
        double exact = 0, abs_sum = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double xq = double(xa.q[static_cast<size_t>(j * cols + c)]) *
                            xa.d[static_cast<size_t>(j * (cols / 32) + c / 32)];
          exact += wd[c] * xq;
          abs_sum += std::abs(wd[c] * xq);
        }
        EXPECT_NEAR(y[j * rows + r], exact, 1e-6 * abs_sum) << "r=" << r << " j=" << j;
      }
    }
  }
}

// Each output depends only on its row and token: row splits, one token at a time, thread
// counts and the pool entry points all give bit-identical results.
TEST(MatmulQ8, BitExactAcrossRowSplitsTokenBatchesAndThreads) {
  for_each_target([] {
    for (TensorType t : kIntTypes) {
      const int64_t rows = 77, cols = 544;
      IntMatrix m(t, rows, cols, 0, 99);
      const int n_tok = 17;
      const auto x = random_floats(static_cast<size_t>(cols * n_tok), 5);
      QuantizedActs xa;
      quantize_acts(x.data(), cols, n_tok, cols, xa);
      std::vector<float> full(static_cast<size_t>(rows * n_tok));
      matmul_rows_q8(t, m.buf.data(), cols, 0, rows, xa, 0, n_tok, full.data(), rows);

      std::vector<float> split(full.size());
      for (int64_t r0 = 0; r0 < rows; r0 += 5) {
        matmul_rows_q8(t, m.buf.data(), cols, r0, std::min(rows, r0 + 5), xa, 0, n_tok,
                       split.data(), rows);
      }
      EXPECT_EQ(split, full) << testing::type_name(t) << ": row split";

      for (int j = 0; j < n_tok; ++j) {
        std::vector<float> one(static_cast<size_t>(rows));
        matmul_rows_q8(t, m.buf.data(), cols, 0, rows, xa, j, 1, one.data(), rows);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(one[r], full[j * rows + r]) << testing::type_name(t) << " token " << j;
        }
      }

      for (int threads = 1; threads <= 4; ++threads) {
        ThreadPool pool(threads);
        for (int nt : {1, 3, 17}) {
          std::vector<float> y(static_cast<size_t>(rows * nt)), y2(y.size());
          QuantizedActs serial;  // quantized without the pool, multiplied with it
          quantize_acts(x.data(), cols, nt, cols, serial);
          matmul(pool, t, m.buf.data(), rows, cols, serial, y.data(), rows);
          QuantizedActs part;
          quantize_acts(pool, x.data(), cols, nt, cols, part);
          matmul(pool, t, m.buf.data(), rows, cols, part, y2.data(), rows);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(y[i], full[i]) << testing::type_name(t) << " threads=" << threads;
            ASSERT_EQ(y2[i], full[i]) << testing::type_name(t) << " threads=" << threads;
          }
        }
      }
    }
  });
}

// The pool's float matmul() is the float path for every type (Q8_0 included); its integer
// overload rounds the activations.
TEST(MatmulQ8, PoolMatmulFloatAndIntegerEntryPoints) {
  ThreadPool pool(2);
  const int64_t rows = 32, cols = 64;
  const int n_tok = 3;
  const auto x = random_floats(static_cast<size_t>(cols * n_tok), 3);
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
    IntMatrix m(t, rows, cols, 0, 4);
    std::vector<float> plain(static_cast<size_t>(rows * n_tok)), rowsf(plain.size());
    matmul(pool, t, m.buf.data(), rows, cols, x.data(), cols, n_tok, plain.data(), rows);
    matmul_rows(t, m.buf.data(), cols, 0, rows, x.data(), cols, n_tok, rowsf.data(), rows);
    EXPECT_EQ(plain, rowsf) << testing::type_name(t);
    if (t == TensorType::Q8_0) {
      QuantizedActs xq;
      quantize_acts(pool, x.data(), cols, n_tok, cols, xq);
      EXPECT_EQ(xq.n_tok, n_tok);
      std::vector<float> with(plain.size());
      matmul(pool, t, m.buf.data(), rows, cols, xq, with.data(), rows);
      EXPECT_NE(with, rowsf);  // activations rounded
    }
  }
}

TEST(MatmulQ8, RejectsBadArguments) {
  std::vector<uint8_t> w(4096);
  std::vector<float> x(256), y(64);
  QuantizedActs xa;
  quantize_acts(x.data(), 64, 2, 64, xa);
  EXPECT_THROW(matmul_rows_q8(TensorType::F16, w.data(), 64, 0, 1, xa, 0, 1, y.data(), 1), Error);
  EXPECT_THROW(matmul_rows_q8(TensorType::Q8_0, w.data(), 96, 0, 1, xa, 0, 1, y.data(), 1), Error);
  EXPECT_THROW(matmul_rows_q8(TensorType::Q8_0, w.data(), 64, 0, 1, xa, 1, 2, y.data(), 1), Error);
  EXPECT_THROW(matmul_rows_q8(TensorType::Q4_0, w.data(), 64, 2, 1, xa, 0, 1, y.data(), 1), Error);
  EXPECT_THROW(xa.resize(1, 48), Error);
  EXPECT_THROW(quantize_acts_rows(x.data(), 64, 0, 3, xa), Error);
  y[0] = 7.0f;
  matmul_rows_q8(TensorType::Q4_0, w.data(), 64, 1, 1, xa, 0, 1, y.data(), 1);
  matmul_rows_q8(TensorType::Q4_0, w.data(), 64, 0, 1, xa, 0, 0, y.data(), 1);
  EXPECT_EQ(y[0], 7.0f);
}

}  // namespace
}  // namespace lynx::kernels
