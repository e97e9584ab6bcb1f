// The Q8_K integer path (kernels/matmul_k.h): the activation quantizer against ggml's Q8_K
// quantizer (types/q8_k.cc), the dispatched kernels against their scalar twin bit for bit on
// every SIMD target over odd shapes and 1-70 tokens, and both against the float product of the
// decoded weights and decoded activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/matmul_k.h"
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

// Weights quantized from Gaussian rows with the type's reference quantizer.
std::vector<uint8_t> weights(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = random_floats(size_t(rows * cols), seed, 0.05f);
  std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(t, &f[size_t(r * cols)], &w[size_t(r) * weight_row_bytes(t, cols)], cols);
  }
  return w;
}

TEST(MatmulK, ActivationQuantizerIsGgmlsQ8K) {
  const int64_t cols = 512;
  const auto x = random_floats(size_t(3 * cols), 4, 2.0f);
  QuantizedActsK q;
  quantize_acts_k(x.data(), cols, 3, cols, q);
  std::vector<uint8_t> blk(weight_row_bytes(TensorType::Q8_K, cols));
  std::vector<float> dq(static_cast<size_t>(cols));
  for (int t = 0; t < 3; ++t) {
    quantize_row(TensorType::Q8_K, &x[size_t(t * cols)], blk.data(), cols);
    dequantize_row(TensorType::Q8_K, blk.data(), dq.data(), cols);
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(bits(dq[size_t(c)]),
                bits(q.d[size_t(t * 2 + c / 256)] * float(q.q[size_t(t * cols + c)])));
    }
    for (int b = 0; b < 2; ++b) {
      for (int g = 0; g < 16; ++g) {
        int32_t s = 0;
        for (int e = 0; e < 16; ++e) s += q.q[size_t(t * cols + b * 256 + g * 16 + e)];
        ASSERT_EQ(q.gsum[size_t((t * 2 + b) * 16 + g)], s);
      }
    }
  }
  EXPECT_THROW(quantize_acts_k(x.data(), 100, 1, 100, q), Error);
}

// The SIMD activation quantizer against its scalar twin (types::encode_q8_k) on every target:
// random rows at several scales, a zero block, magnitudes that tie between signs (the first
// one sets the sign of the scale), values at rounding ties, and blocks with a NaN or an inf.
TEST(MatmulK, ActivationQuantizerSimdEqualsScalarTwinOnEveryTarget) {
  const int64_t cols = 768;
  const int n_tok = 11;
  std::vector<float> x = random_floats(size_t(n_tok * cols), 9, 3.0f);
  for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] *= 1e-6f;    // tiny values
  std::fill(x.begin() + 2 * cols, x.begin() + 2 * cols + 256, 0.0f);  // a zero block
  x[size_t(3 * cols + 7)] = 50.0f;  // ties of |x|: +50 first, then -50
  x[size_t(3 * cols + 200)] = -50.0f;
  x[size_t(3 * cols + 256 + 3)] = -40.0f;  // -40 first, then +40
  x[size_t(3 * cols + 256 + 9)] = 40.0f;
  for (int64_t c = 0; c < 256; ++c) {  // max 127 (iscale -1): x + 0.5 are rounding ties
    x[size_t(4 * cols + c)] = float(c % 64) - 31.5f;
  }
  x[size_t(4 * cols)] = -127.0f;
  x[size_t(5 * cols + 17)] = std::nanf("");
  x[size_t(6 * cols + 300)] = INFINITY;
  x[size_t(7 * cols + 600)] = -INFINITY;
  QuantizedActsK twin, simd;
  twin.resize(n_tok, cols);
  ref::quantize_acts_k_rows(x.data(), cols, 0, n_tok, twin);
  testing::for_each_target([&] {
    simd.resize(n_tok, cols);
    quantize_acts_k_rows(x.data(), cols, 0, 4, simd);  // two calls: row ranges
    quantize_acts_k_rows(x.data(), cols, 4, n_tok, simd);
    ASSERT_EQ(simd.q, twin.q);
    ASSERT_EQ(simd.gsum, twin.gsum);
    ASSERT_EQ(simd.gpair, twin.gpair);
    ASSERT_EQ(simd.spair, twin.spair);
    for (size_t i = 0; i < twin.d.size(); ++i) {
      ASSERT_TRUE((std::isnan(twin.d[i]) && std::isnan(simd.d[i])) ||
                  bits(twin.d[i]) == bits(simd.d[i]))
          << "block " << i;
    }
  });
  EXPECT_LT(twin.d[size_t(3 * 3)], 0.0f);  // the +50 came first: d = 1 / (-127 / 50) < 0
  EXPECT_GT(twin.d[size_t(3 * 3 + 1)], 0.0f);
}

TEST(MatmulK, SimdEqualsScalarTwinOnEveryTargetAndIsNearTheFloatProduct) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    for (int64_t cols : {256, 768}) {
      const int64_t rows = 19;
      const auto w = weights(t, rows, cols, 3);
      std::vector<float> wf(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        dequantize_row(t, &w[size_t(r) * weight_row_bytes(t, cols)], &wf[size_t(r * cols)], cols);
      }
      const int n_max = 70;
      const auto x = random_floats(size_t(n_max * cols), 7, 1.5f);
      QuantizedActsK q;
      quantize_acts_k(x.data(), cols, n_max, cols, q);
      for (int n_tok : {1, 2, 3, 5, 8, 13, 32, 70}) {
        std::vector<float> twin(size_t(n_tok * rows));
        ref::matmul_rows_k(t, w.data(), cols, 0, rows, q, 0, n_tok, twin.data(), rows);
        // Float product of the decoded weights and decoded activations (double sums): the
        // integer path computes the same sum up to float rounding of the block terms.
        for (int j = 0; j < n_tok; ++j) {
          for (int64_t r = 0; r < rows; ++r) {
            double s = 0, a = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const double xv =
                  double(q.d[size_t(j * (cols / 256) + c / 256)]) * q.q[size_t(j * cols + c)];
              s += double(wf[size_t(r * cols + c)]) * xv;
              a += std::fabs(double(wf[size_t(r * cols + c)]) * xv);
            }
            ASSERT_NEAR(twin[size_t(j * rows + r)], s, 1e-5 * a + 1e-6)
                << "row " << r << " token " << j << " cols " << cols;
          }
        }
        testing::for_each_target([&] {
          std::vector<float> got(twin.size(), NAN);
          // an odd row split, and tokens from t0 = 0
          matmul_rows_k(t, w.data(), cols, 0, 7, q, 0, n_tok, got.data(), rows);
          matmul_rows_k(t, w.data(), cols, 7, rows, q, 0, n_tok, got.data(), rows);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(bits(got[i]), bits(twin[i])) << i << " tokens " << n_tok;
          }
        });
      }
      // A token range not starting at 0 gives that token's outputs.
      std::vector<float> all(size_t(n_max * rows)), part(size_t(3 * rows));
      matmul_rows_k(t, w.data(), cols, 0, rows, q, 0, n_max, all.data(), rows);
      matmul_rows_k(t, w.data(), cols, 0, rows, q, 40, 3, part.data(), rows);
      for (size_t i = 0; i < part.size(); ++i) ASSERT_EQ(bits(part[i]), bits(all[40 * rows + i]));
    }
  }
}

// Random bytes: every level and sub-block scale pattern (including Q6_K's -128 scale), NaN and
// Inf block scales. Twin and SIMD agree (NaN with NaN) and nothing crashes.
TEST(MatmulK, RandomBlocksAgreeAndNanScalesDoNotCrash) {
  for (TensorType t : kTypes) {
    SCOPED_TRACE(gguf::tensor_type_name(t));
    const int64_t cols = 512, rows = 9;
    std::vector<uint8_t> w(weight_row_bytes(t, cols) * size_t(rows));
    std::mt19937 rng(5);
    for (auto& b : w) b = uint8_t(rng());
    const auto x = random_floats(size_t(4 * cols), 2);
    QuantizedActsK q;
    quantize_acts_k(x.data(), cols, 4, cols, q);
    std::vector<float> a(size_t(4 * rows)), b(a.size());
    ref::matmul_rows_k(t, w.data(), cols, 0, rows, q, 0, 4, a.data(), rows);
    matmul_rows_k(t, w.data(), cols, 0, rows, q, 0, 4, b.data(), rows);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE((std::isnan(a[i]) && std::isnan(b[i])) || bits(a[i]) == bits(b[i])) << i;
    }
  }
}

TEST(MatmulK, RejectsOtherTypesAndShapes) {
  QuantizedActsK q;
  const auto x = random_floats(256, 1);
  quantize_acts_k(x.data(), 256, 1, 256, q);
  std::vector<uint8_t> w(1024);
  std::vector<float> y(4);
  EXPECT_FALSE(has_k_int_path(TensorType::Q4_0));
  EXPECT_TRUE(has_k_int_path(TensorType::IQ4_XS));
  EXPECT_THROW(matmul_rows_k(TensorType::Q4_0, w.data(), 256, 0, 1, q, 0, 1, y.data(), 1), Error);
  EXPECT_THROW(matmul_rows_k(TensorType::Q4_K, w.data(), 512, 0, 1, q, 0, 1, y.data(), 1), Error);
  EXPECT_THROW(matmul_rows_k(TensorType::Q4_K, w.data(), 256, 0, 1, q, 0, 2, y.data(), 1), Error);
}

}  // namespace
}  // namespace lynx::kernels
