// The reference quantizers of the type table (kernels/types/*.cc): quantize -> dequantize
// round trips within each type's error bound, zero and constant blocks, and the bits of the
// stored scales where the format fixes them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/types.h"
#include "lynx/error.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::random_floats;

struct Bound {
  TensorType type;
  // Largest relative RMS error (rms(x - dq(q(x))) / rms(x)) on Gaussian rows and on a row with
  // outliers (RoundTripWithinTheTypeBound), as measured (printed by the test) plus about 15%.
  double gauss, outliers;
};

// Measured (gaussian, outliers): f16 0.000209, 0.000205; bf16 0.00166, 0.00169; q8_0 0.00541,
// 0.00846; q8_k 0.00705, 0.0202; q6_k 0.018, 0.0253; q5_1 0.0389, 0.0462; q5_0 0.0433, 0.0684;
// q5_k 0.0367, 0.0446; q4_1 0.0792, 0.0953; q4_0 0.0876, 0.137; q4_k 0.0728, 0.0904; iq4_nl
// 0.0773, 0.104; iq4_xs 0.0778, 0.106; mxfp4 0.118, 0.151; q3_k 0.153, 0.195; q2_k 0.304, 0.352
const Bound kBounds[] = {
    {TensorType::F16, 0.00024, 0.00024}, {TensorType::BF16, 0.0019, 0.0019},
    {TensorType::Q8_0, 0.0062, 0.0097},  {TensorType::Q8_K, 0.0081, 0.023},
    {TensorType::Q6_K, 0.021, 0.029},    {TensorType::Q5_1, 0.045, 0.053},
    {TensorType::Q5_0, 0.05, 0.079},     {TensorType::Q5_K, 0.042, 0.051},
    {TensorType::Q4_1, 0.091, 0.11},     {TensorType::Q4_0, 0.1, 0.16},
    {TensorType::Q4_K, 0.084, 0.1},      {TensorType::IQ4_NL, 0.089, 0.12},
    {TensorType::IQ4_XS, 0.089, 0.12},   {TensorType::MXFP4, 0.14, 0.17},
    {TensorType::Q3_K, 0.18, 0.22},      {TensorType::Q2_K, 0.35, 0.41},
};

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(x[i]) * x[i];
  }
  return std::sqrt(num / den);
}

TEST(TypeQuantize, EveryTypeHasAQuantizer) {
  for (const TypeTraits& tr : all_type_traits()) {
    EXPECT_NE(tr.encode, nullptr) << gguf::tensor_type_name(tr.type);
  }
  EXPECT_EQ(std::size(kBounds) + 1, all_type_traits().size());  // + F32 (lossless)
}

TEST(TypeQuantize, RoundTripWithinTheTypeBound) {
  const int64_t n = 4096;
  auto round_trip = [&](TensorType t, const std::vector<float>& x) {
    std::vector<uint8_t> q(weight_row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(t, q.data(), y.data(), n);
    return rel_rmse(x, y);
  };
  for (const Bound& b : kBounds) {
    SCOPED_TRACE(gguf::tensor_type_name(b.type));
    // Gaussian rows at the scales of weights (0.02) and activations (3): scale-free error.
    double gauss = 0;
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      gauss = std::max(gauss,
                       round_trip(b.type, random_floats(size_t(n), seed, seed % 2 ? 0.02f : 3.0f)));
    }
    // Every 97th value 8x larger: outliers stretch their blocks' scales.
    auto x = random_floats(size_t(n), 99, 1.0f);
    for (int64_t i = 0; i < n; i += 97) x[size_t(i)] *= 8.0f;
    const double outl = round_trip(b.type, x);
    std::printf("%-7s relative RMS error %.4g (Gaussian), %.4g (outliers)\n",
                gguf::tensor_type_name(b.type), gauss, outl);
    EXPECT_LE(gauss, b.gauss);
    EXPECT_LE(outl, b.outliers);
    EXPECT_GT(gauss, 0.0);
  }
}

// All-zero rows (a dead expert, padding) must stay exactly zero, never NaN; a constant row
// must come back close.
TEST(TypeQuantize, ZeroAndConstantRows) {
  const int64_t n = 512;
  for (const Bound& b : kBounds) {
    SCOPED_TRACE(gguf::tensor_type_name(b.type));
    std::vector<uint8_t> q(weight_row_bytes(b.type, n));
    std::vector<float> zero(static_cast<size_t>(n), 0.0f), y(static_cast<size_t>(n), 1.0f);
    quantize_row(b.type, zero.data(), q.data(), n);
    dequantize_row(b.type, q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f);
    std::vector<float> c(static_cast<size_t>(n), -0.75f);
    quantize_row(b.type, c.data(), q.data(), n);
    dequantize_row(b.type, q.data(), y.data(), n);
    for (float v : y) ASSERT_NEAR(v, -0.75f, 0.75 * b.gauss * 4) << v;
  }
}

// Values on a type's grid come back exactly: Q8_0 integers times a power-of-two scale, Q4_K
// levels 0..15 with scale 1 and min 0 per sub-block, MXFP4 grid values.
TEST(TypeQuantize, GridValuesAreExact) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[size_t(i)] = float((i * 37) % 255 - 127) / 64.0f;
  // Each block's largest magnitude 127/64 makes its scale 1/64 (exact in fp16).
  for (int b = 0; b < 8; ++b) x[size_t(32 * b)] = 127.0f / 64.0f;
  std::vector<uint8_t> q(weight_row_bytes(TensorType::Q8_0, 256));
  std::vector<float> y(256);
  quantize_row(TensorType::Q8_0, x.data(), q.data(), 256);
  dequantize_row(TensorType::Q8_0, q.data(), y.data(), 256);
  for (int i = 0; i < 256; ++i) ASSERT_NEAR(y[size_t(i)], x[size_t(i)], 1e-6) << i;

  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> m(32);
  for (int i = 0; i < 32; ++i) m[size_t(i)] = (i % 2 ? -1.0f : 1.0f) * grid[i % 8];
  m[7] = 6.0f;  // the block's max sets the exponent: 6 = 1.5 * 2^2
  std::vector<uint8_t> qm(weight_row_bytes(TensorType::MXFP4, 32));
  std::vector<float> ym(32);
  quantize_row(TensorType::MXFP4, m.data(), qm.data(), 32);
  dequantize_row(TensorType::MXFP4, qm.data(), ym.data(), 32);
  for (int i = 0; i < 32; ++i) ASSERT_EQ(ym[size_t(i)], m[size_t(i)]) << i;

  std::vector<float> k(256);
  for (int i = 0; i < 256; ++i) k[size_t(i)] = float((i * 7) % 16);
  std::vector<uint8_t> qk(weight_row_bytes(TensorType::Q4_K, 256));
  std::vector<float> yk(256);
  quantize_row(TensorType::Q4_K, k.data(), qk.data(), 256);
  dequantize_row(TensorType::Q4_K, qk.data(), yk.data(), 256);
  EXPECT_LT(rel_rmse(k, yk), 1e-3);
}

TEST(TypeQuantize, RejectsRowsThatDoNotFitTheBlock) {
  std::vector<float> x(300);
  std::vector<uint8_t> q(1024);
  EXPECT_THROW(quantize_row(TensorType::Q4_K, x.data(), q.data(), 300), Error);
  EXPECT_THROW(quantize_row(TensorType::IQ4_NL, x.data(), q.data(), 300), Error);
  EXPECT_THROW(quantize_row(TensorType::IQ2_XXS, x.data(), q.data(), 256), Error);
}

}  // namespace
}  // namespace lynx::kernels
