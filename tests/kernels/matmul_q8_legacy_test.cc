// The integer path of the legacy 32-element types beside Q8_0 / Q4_0 (Q4_1, Q5_0, Q5_1,
// IQ4_NL, MXFP4: matmul_q8.cc against Q8_0 activation blocks, the min types with ggml's Q8_1
// term): bit for bit the scalar twin on every SIMD target, in the file's layout and in
// kInterleaved16, over odd sizes, row splits and 1-70 tokens; random bytes (NaN/Inf scales)
// agree NaN for NaN; the product is that of the dequantized weights and activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/types.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::for_each_target;
using testing::random_floats;

// Q8_0 too: in kInterleaved16 with more than 4 tokens AVX2 has its own kernel for it
// (RunGroupsQ8I16), which the cases below run through its chunks, super-groups and cut groups.
const TensorType kTypes[] = {TensorType::Q4_1,   TensorType::Q5_0,  TensorType::Q5_1,
                             TensorType::IQ4_NL, TensorType::MXFP4, TensorType::Q8_0};

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
  const size_t rb = weight_row_bytes(t, cols);
  std::vector<uint8_t> w(rb * size_t(rows));
  for (int64_t r = 0; r < rows; ++r)
    quantize_row(t, &f[size_t(r * cols)], &w[size_t(r) * rb], cols);
  return w;
}

std::vector<uint8_t> interleaved(TensorType t, const std::vector<uint8_t>& w, int64_t rows,
                                 int64_t cols) {
  std::vector<uint8_t> out(w.size());
  interleave16_into(t, w.data(), out.data(), cols, 0, rows / kInterleaveRows);
  return out;
}

TEST(MatmulQ8Legacy, TypeTableRowsSayTheirKernel) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const TypeTraits& tr = type_traits(t);
    EXPECT_TRUE(tr.int_kernel);
    EXPECT_TRUE(has_int8_path(t));
    EXPECT_TRUE(can_interleave(t, 32, 64));
    EXPECT_FALSE(can_interleave(t, 24, 64));
    // ggml's vec_dot_type: Q8_1 for the min types, Q8_0 for the others.
    const bool min = t == TensorType::Q4_1 || t == TensorType::Q5_1;
    EXPECT_EQ(tr.act_type, min ? TensorType::Q8_1 : TensorType::Q8_0);
  }
}

TEST(MatmulQ8Legacy, LayoutRoundTripsAndRowsReadBack) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t rows = 32, cols = 96;
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
  }
}

TEST(MatmulQ8Legacy, SimdEqualsScalarTwinOnEveryTargetAndLayout) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    for (int64_t cols : {32, 96, 544}) {
      const int64_t rows = 48;
      const auto w = weights(t, rows, cols, uint32_t(cols));
      const auto il = interleaved(t, w, rows, cols);
      const int n_max = 72;
      const auto x = random_floats(size_t(n_max * cols), 7, 1.5f);
      QuantizedActs q;
      quantize_acts(x.data(), cols, n_max, cols, q);
      for (int n_tok : {1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 33, 64, 65, 70}) {
        const int t0 = n_tok % 3;
        std::vector<float> twin(size_t(n_tok * rows)), in_place(twin.size());
        ref::matmul_rows_q8(t, w.data(), cols, 0, rows, q, t0, n_tok, twin.data(), rows);
        ref::matmul_rows_q8(t, il.data(), cols, 0, rows, q, t0, n_tok, in_place.data(), rows,
                            WeightLayout::kInterleaved16);
        for (size_t i = 0; i < twin.size(); ++i) ASSERT_EQ(bits(twin[i]), bits(in_place[i])) << i;
        for_each_target([&] {
          for (WeightLayout layout : {WeightLayout::kRows, WeightLayout::kInterleaved16}) {
            const std::vector<uint8_t>& m = layout == WeightLayout::kRows ? w : il;
            std::vector<float> got(twin.size(), NAN);
            // odd row splits: inside a group, across groups, to the end
            for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 7}, {7, 29}, {29, 48}}) {
              matmul_rows_q8(t, m.data(), cols, r0, r1, q, t0, n_tok, got.data(), rows, layout);
            }
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(bits(got[i]), bits(twin[i]))
                  << i << " cols " << cols << " tokens " << n_tok << " interleaved "
                  << (layout == WeightLayout::kInterleaved16);
            }
          }
        });
      }
    }
  }
}

// Every level and scale byte pattern, NaN / Inf fp16 scales and mins, every E8M0 exponent:
// the twin and every target agree (NaN with NaN) and nothing crashes.
TEST(MatmulQ8Legacy, RandomBlocksAgreeAndNanScalesDoNotCrash) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t cols = 256, rows = 32;
    std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
    std::mt19937 rng(5);
    for (auto& b : w) b = uint8_t(rng());
    const auto il = interleaved(t, w, rows, cols);
    const auto x = random_floats(size_t(6 * cols), 2);
    QuantizedActs q;
    quantize_acts(x.data(), cols, 6, cols, q);
    std::vector<float> a(size_t(6 * rows));
    ref::matmul_rows_q8(t, w.data(), cols, 0, rows, q, 0, 6, a.data(), rows);
    for_each_target([&] {
      for (WeightLayout layout : {WeightLayout::kRows, WeightLayout::kInterleaved16}) {
        std::vector<float> b(a.size());
        matmul_rows_q8(t, layout == WeightLayout::kRows ? w.data() : il.data(), cols, 0, rows, q, 0,
                       6, b.data(), rows, layout);
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_TRUE(same(a[i], b[i])) << i << " " << a[i] << " " << b[i];
        }
      }
    });
  }
}

// MXFP4 / IQ4_NL unpack their blocks in vector ops (E8M0 scales converted in lanes, nibbles
// looked up with vpermb on AVX3_DL) and 1-2 tokens split the vpdpbusd chain (Q8_0 too). The
// kernel gives the twin's bits on every target and layout: every E8M0 exponent 0-255 (the
// subnormal 0 and 1, 255 whose products overflow to inf) with every nibble, gpt-oss's 2880
// columns, odd row splits, 1-70 tokens.
TEST(MatmulQ8Legacy, Mxfp4EveryExponentEqualsTwin) {
  for (TensorType t : {TensorType::MXFP4, TensorType::IQ4_NL, TensorType::Q8_0}) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    for (int64_t cols : {2880, 8192}) {
      const int64_t rows = 32;
      const int64_t bb = type_traits(t).block_bytes, nb = cols / 32;
      std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
      std::mt19937 rng{uint32_t(cols)};
      for (auto& b : w) b = uint8_t(rng());
      if (t == TensorType::MXFP4) {
        // block i of the matrix gets exponent i % 256: cols 8192 = 256 blocks per row
        for (int64_t i = 0; i < rows * nb; ++i) w[size_t(i * bb)] = uint8_t(i % 256);
      } else {
        // finite fp16 scales (random bytes may be NaN: RandomBlocksAgree covers those)
        for (int64_t i = 0; i < rows * nb; ++i) {
          const uint16_t h = fp32_to_fp16(std::ldexp(1.0f + float(i % 7) / 8, int(i % 9) - 12));
          std::memcpy(&w[size_t(i * bb)], &h, 2);
        }
      }
      const auto il = interleaved(t, w, rows, cols);
      const int n_max = 72;
      const auto x = random_floats(size_t(n_max * cols), 3, 1.5f);
      QuantizedActs q;
      quantize_acts(x.data(), cols, n_max, cols, q);
      for (int n_tok : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 33, 70}) {
        const int t0 = n_tok % 2;
        std::vector<float> twin(size_t(n_tok * rows));
        ref::matmul_rows_q8(t, w.data(), cols, 0, rows, q, t0, n_tok, twin.data(), rows);
        for_each_target([&] {
          for (WeightLayout layout : {WeightLayout::kRows, WeightLayout::kInterleaved16}) {
            const std::vector<uint8_t>& m = layout == WeightLayout::kRows ? w : il;
            std::vector<float> got(twin.size(), 0.5f);
            for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 5}, {5, 19}, {19, 32}}) {
              matmul_rows_q8(t, m.data(), cols, r0, r1, q, t0, n_tok, got.data(), rows, layout);
            }
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_TRUE(same(got[i], twin[i]))
                  << i << " cols " << cols << " tokens " << n_tok << " interleaved "
                  << (layout == WeightLayout::kInterleaved16) << ": " << got[i] << " vs "
                  << twin[i];
            }
          }
        });
      }
    }
  }
}

// The integer path computes sum_c W[r][c] * xq[c] with the dequantized weights and
// activations: within float rounding of that product.
TEST(MatmulQ8Legacy, EqualsProductOfDequantizedValues) {
  const int64_t rows = 21, cols = 544;
  const int n_tok = 6;
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const auto w = weights(t, rows, cols, 5);
    const auto xv = random_floats(size_t(n_tok * cols), 9);
    QuantizedActs xa;
    quantize_acts(xv.data(), cols, n_tok, cols, xa);
    std::vector<float> y(size_t(rows * n_tok));
    matmul_rows_q8(t, w.data(), cols, 0, rows, xa, 0, n_tok, y.data(), rows);
    std::vector<float> wd(static_cast<size_t>(cols));
    const size_t rb = weight_row_bytes(t, cols);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t, w.data() + size_t(r) * rb, wd.data(), cols);
      for (int j = 0; j < n_tok; ++j) {
        double exact = 0, abs_sum = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double xq =
              double(xa.q[size_t(j * cols + c)]) * xa.d[size_t(j * (cols / 32) + c / 32)];
          exact += wd[size_t(c)] * xq;
          abs_sum += std::abs(wd[size_t(c)] * xq);
        }
        EXPECT_NEAR(y[size_t(j * rows + r)], exact, 1e-6 * abs_sum) << "r=" << r << " j=" << j;
      }
    }
  }
}

}  // namespace
}  // namespace lynx::kernels
