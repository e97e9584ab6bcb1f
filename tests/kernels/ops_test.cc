// Element-wise kernels and reductions against their scalar twins (odd sizes, misaligned
// pointers, every SIMD target), fp16/bf16 conversion edge cases, quantization round trips.
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "lynx/error.h"
#include "test_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lynx::kernels {
namespace {

using testing::Buffer;
using testing::dot_tolerance;
using testing::for_each_target;
using testing::random_floats;

const int64_t kSizes[] = {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 1000, 4099};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Copies v into a buffer misaligned by `off` floats.
struct Vec {
  Buffer buf;
  int64_t n;
  Vec(const std::vector<float>& v, size_t off) : buf(v.size() * 4 + 4, off * 4), n(v.size()) {
    float* dst = buf.f32();
    for (size_t i = 0; i < v.size(); ++i) dst[i] = v[i];
  }
  float* data() { return buf.f32(); }
};

TEST(Ops, DotAndSumMatchReference) {
  for_each_target([] {
    for (int64_t n : kSizes) {
      for (size_t off : {0, 1}) {
        const auto av = random_floats(n, 1 + n), bv = random_floats(n, 2 + n);
        Vec a(av, off), b(bv, off + 1);
        double abs_sum = 0, abs_sum_x = 0;
        for (int64_t i = 0; i < n; ++i) {
          abs_sum += std::abs(static_cast<double>(av[i]) * bv[i]);
          abs_sum_x += std::abs(av[i]);
        }
        const float want = ref::dot(a.data(), b.data(), n);
        EXPECT_NEAR(dot(a.data(), b.data(), n), want, dot_tolerance(n, abs_sum, want)) << n;
        const float want_s = ref::sum(a.data(), n);
        EXPECT_NEAR(sum(a.data(), n), want_s, dot_tolerance(n, abs_sum_x, want_s)) << n;
      }
    }
    EXPECT_EQ(dot(nullptr, nullptr, 0), 0.0f);
  });
}

TEST(Ops, RmsNormMatchesReferenceAndMayAlias) {
  for_each_target([] {
    for (int64_t n : kSizes) {
      const auto xv = random_floats(n, 3 + n, 2.0f), wv = random_floats(n, 4 + n);
      for (bool with_w : {true, false}) {
        Vec x(xv, 1), w(wv, 0);
        std::vector<float> y(n), yr(n);
        const float* wp = with_w ? w.data() : nullptr;
        rmsnorm(x.data(), wp, y.data(), n, 1e-5f);
        ref::rmsnorm(x.data(), wp, yr.data(), n, 1e-5f);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(y[i], yr[i], 1e-5f * (std::abs(yr[i]) + 1e-3f)) << n << " " << i;
        }
        rmsnorm(x.data(), wp, x.data(), n, 1e-5f);  // in place
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x.data()[i], y[i]);
      }
    }
  });
}

TEST(Ops, SoftmaxMatchesReference) {
  for_each_target([] {
    for (int64_t n : kSizes) {
      auto v = random_floats(n, 5 + n, 4.0f);
      if (n > 2) v[1] = -INFINITY;  // a masked position
      Vec x(v, 1);
      std::vector<float> r = v;
      softmax_inplace(x.data(), n);
      ref::softmax_inplace(r.data(), n);
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        // A few ulp of exp, plus the f32 sum of n positive terms (normalizer).
        const double rel = 3e-6 + (static_cast<double>(n) / 4 + 8) * 6e-8;
        ASSERT_NEAR(x.data()[i], r[i], rel * r[i] + 1e-12) << n << " " << i;
        total += x.data()[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
      if (n > 2) {
        EXPECT_EQ(x.data()[1], 0.0f);
      }
      EXPECT_EQ(x.data()[n], 0.0f) << "wrote past the end";
    }
    std::vector<float> big = {1000.0f, 999.0f, -1000.0f};  // no overflow from large logits
    softmax_inplace(big.data(), 3);
    EXPECT_NEAR(big[0], 1.0f / (1.0f + std::exp(-1.0f)), 1e-6f);
    EXPECT_EQ(big[2], 0.0f);
  });
}

TEST(Ops, SwigluMatchesReferenceIncludingLargeInputs) {
  for_each_target([] {
    for (int64_t n : kSizes) {
      auto g = random_floats(n, 6 + n, 3.0f);
      const auto u = random_floats(n, 7 + n);
      if (n > 3) {
        g[0] = 100.0f;   // exp(-g) underflows
        g[1] = -100.0f;  // exp(-g) overflows in the naive form
        g[2] = 0.0f;
      }
      Vec gv(g, 1), uv(u, 0);
      std::vector<float> out(n), want(n);
      swiglu(gv.data(), uv.data(), out.data(), n);
      ref::swiglu(g.data(), u.data(), want.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << i;
        ASSERT_NEAR(out[i], want[i], 3e-6f * std::abs(want[i]) + 1e-30f) << n << " " << i;
      }
      swiglu(gv.data(), uv.data(), gv.data(), n);  // out aliases gate
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gv.data()[i], out[i]);
    }
  });
}

// GeGLU against the twin in double: only rounding separates them, also where the cube
// overflows and where the value is ~1e-20 (tests/model/gemma4_test.cc checks the tanh form
// by hand).
TEST(Ops, GegluMatchesReferenceIncludingLargeInputs) {
  for_each_target([] {
    for (int64_t n : kSizes) {
      auto g = random_floats(n, 16 + n, 4.0f);
      const auto u = random_floats(n, 17 + n);
      if (n > 5) {
        g[0] = 100.0f;
        g[1] = -100.0f;  // sigmoid(2z) underflows to 0
        g[2] = 0.0f;
        g[3] = 1e20f;  // g^3 overflows
        g[4] = -1e20f;
        g[5] = -5.0f;  // sigmoid ~ 5e-8: relative accuracy where the value is tiny
      }
      Vec gv(g, 1), uv(u, 0);
      std::vector<float> out(n), want(n);
      geglu(gv.data(), uv.data(), out.data(), n);
      ref::geglu(g.data(), u.data(), want.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << i;
        // exp(-2|z|) carries the float rounding of z itself: relative error ~|2z| ulp.
        const double z2 = std::min(
            100.0, std::abs(1.5957691216057308 * (g[i] + 0.044715 * double(g[i]) * g[i] * g[i])));
        const double tol = (3e-6 + 2e-7 * z2) * std::abs(want[i]) + 1e-30;
        ASSERT_NEAR(out[i], want[i], tol) << n << " " << i;
      }
      geglu(gv.data(), uv.data(), gv.data(), n);  // out aliases gate
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gv.data()[i], out[i]);
    }
  });
}

// cap tanh(x / cap) against the twin in double: Highway's tanh is within 4 ulp.
TEST(Ops, SoftCapMatchesReference) {
  for_each_target([] {
    for (int64_t n : kSizes) {
      auto x = random_floats(n, 18 + n, 60.0f);
      if (n > 3) {
        x[0] = 1e30f;  // saturates at cap
        x[1] = -1e30f;
        x[2] = 0.0f;
        x[3] = 1e-3f;  // ~x itself
      }
      std::vector<float> want = x;
      Vec v(x, 0);
      v.data()[n] = 42.0f;
      softcap(v.data(), n, 30.0f);
      ref::softcap(want.data(), n, 30.0f);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(v.data()[i], want[i], 6e-7f * std::abs(want[i]) + 1e-30f) << n << " " << i;
      }
      EXPECT_EQ(v.data()[n], 42.0f) << "wrote past the end";
    }
  });
}

TEST(Ops, AxpyMatchesReference) {
  for_each_target([] {
    for (int64_t n : kSizes) {
      const auto xv = random_floats(n, 8 + n), yv = random_floats(n, 9 + n);
      Vec x(xv, 1), y(yv, 0);
      std::vector<float> yr = yv;
      y.data()[n] = 42.0f;
      axpy(0.75f, x.data(), y.data(), n);
      ref::axpy(0.75f, xv.data(), yr.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float tol = 1.2e-7f * (std::abs(0.75f * xv[i]) + std::abs(yv[i]));
        ASSERT_NEAR(y.data()[i], yr[i], tol) << n << " " << i;
      }
      EXPECT_EQ(y.data()[n], 42.0f) << "wrote past the end";
    }
  });
}

// ------------------------------------------------------------------ fp16 / bf16

#if defined(__x86_64__)
__attribute__((target("f16c"))) float hw_fp16_to_fp32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("f16c"))) uint16_t hw_fp32_to_fp16(float f) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
#endif

TEST(Convert, Fp16Examples) {
  EXPECT_EQ(fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65519.996f), 0x7BFF);  // below the halfway point
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);    // tie rounds to even = inf
  EXPECT_EQ(fp32_to_fp16(1e10f), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: 0
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);         // tie to even: 2
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.75f, -24)), 0x0400);     // subnormal rounds up to normal
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie to even: down
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie to even: up
  EXPECT_EQ(fp32_to_fp16(1e-10f), 0x0000);
  const uint16_t nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  // A signalling NaN whose payload sits only in the low bits must stay a NaN.
  EXPECT_NE(fp32_to_fp16(from_bits(0x7F800001)) & 0x03FF, 0);

  EXPECT_EQ(fp16_to_fp32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(bits_of(fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xFC00)) && fp16_to_fp32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
}

TEST(Convert, Fp16MatchesHardwareExhaustively) {
#if defined(__x86_64__)
  // CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 29))) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_to_fp32(static_cast<uint16_t>(h));
    const float b = hw_fp16_to_fp32(static_cast<uint16_t>(h));
    ASSERT_EQ(bits_of(a), bits_of(b)) << std::hex << h;
    if (!std::isnan(a)) {
      ASSERT_EQ(fp32_to_fp16(a), h) << std::hex << h;  // round trip
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    // Random bit patterns over the whole range plus a dense band around the half range.
    float f = from_bits(rng());
    if (i % 2)
      f = std::ldexp(static_cast<float>(rng() % 4096) / 4096.0f + 1.0f,
                     static_cast<int>(rng() % 44) - 28);
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), hw_fp32_to_fp16(f)) << std::hexfloat << f;
  }
#else
  GTEST_SKIP() << "x86 only";
#endif
}

// Round to nearest even by direct comparison in double: the independent oracle for bf16.
uint16_t bf16_oracle(float f) {
  const uint32_t u = bits_of(f);
  const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
  const double dl = std::abs(static_cast<double>(from_bits(lo)) - f);
  const double dh = std::abs(static_cast<double>(from_bits(hi)) - f);
  if (dl < dh) return static_cast<uint16_t>(lo >> 16);
  if (dh < dl) return static_cast<uint16_t>(hi >> 16);
  return static_cast<uint16_t>(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

TEST(Convert, Bf16RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie: down to even
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // tie: up to even
  EXPECT_EQ(fp32_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(fp32_to_bf16(std::ldexp(1.0f, -130)), 0x0008);             // denormal kept
  const uint16_t nan = fp32_to_bf16(from_bits(0x7F800001));            // low-payload sNaN
  EXPECT_TRUE(std::isnan(bf16_to_fp32(nan)));
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bits_of(bf16_to_fp32(0x8000)), 0x80000000u);
  std::mt19937 rng(12);
  for (int i = 0; i < 1000000; ++i) {
    const float f = from_bits(rng());
    if (std::isnan(f) || std::isinf(f)) continue;
    if (std::abs(f) > 3.38e38f) continue;  // hi neighbour would be inf: covered above
    ASSERT_EQ(fp32_to_bf16(f), bf16_oracle(f)) << std::hexfloat << f;
  }
}

// ------------------------------------------------------------------ quantization

TEST(Quant, Q8_0RoundTripWithinHalfAStep) {
  const int64_t n = 32 * 64;
  auto x = random_floats(n, 13, 3.0f);
  x[5] = 0.0f;
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // an all-zero block (d = 0)
  std::vector<uint8_t> q(weight_row_bytes(TensorType::Q8_0, n));
  ASSERT_EQ(q.size(), static_cast<size_t>(n / 32 * 34));
  quantize_row(TensorType::Q8_0, x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row(TensorType::Q8_0, q.data(), y.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[b * 32 + j]));
    const float d = amax / 127.0f;
    for (int j = 0; j < 32; ++j) {
      // Half a step, plus the fp16 rounding of d times |q| <= 127.
      ASSERT_LE(std::abs(y[b * 32 + j] - x[b * 32 + j]), 0.5f * d + 127.0f * d * 0x1p-11f + 1e-30f)
          << b << " " << j;
    }
  }
  EXPECT_EQ(y[5], 0.0f);
  for (int j = 32; j < 64; ++j) EXPECT_EQ(y[j], 0.0f);
}

TEST(Quant, Q4_0RoundTripWithinOneStep) {
  const int64_t n = 32 * 64;
  const auto x = random_floats(n, 14, 0.5f);
  std::vector<uint8_t> q(weight_row_bytes(TensorType::Q4_0, n));
  ASSERT_EQ(q.size(), static_cast<size_t>(n / 32 * 18));
  quantize_row(TensorType::Q4_0, x.data(), q.data(), n);
  std::vector<float> y(n);
  dequantize_row(TensorType::Q4_0, q.data(), y.data(), n);
  double err2 = 0, sig2 = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[b * 32 + j]));
    const float d = amax / 8.0f;
    for (int j = 0; j < 32; ++j) {
      // The value of largest magnitude maps to -8 exactly; its negation clamps to +7, a full
      // step away; everything else is within half a step.
      ASSERT_LE(std::abs(y[b * 32 + j] - x[b * 32 + j]), d * (1.0f + 8.0f * 0x1p-11f))
          << b << " " << j;
      err2 += std::pow(y[b * 32 + j] - x[b * 32 + j], 2);
      sig2 += std::pow(x[b * 32 + j], 2);
    }
  }
  EXPECT_LT(std::sqrt(err2 / sig2), 0.15);  // ~4 bits of signal for Gaussian data
}

TEST(Quant, Q4_0LayoutIsGgmls) {
  // Element j in the low nibble of byte j, element j + 16 in its high nibble; the value of
  // largest magnitude (-4 here) gets d = -4 / -8 = 0.5 and nibble 0.
  std::vector<float> x(32);
  for (int j = 0; j < 16; ++j) x[j] = 0.5f * static_cast<float>(j - 8);  // nibbles 0..15
  for (int j = 16; j < 32; ++j) x[j] = 0.5f * static_cast<float>(7 - (j - 16) % 8);
  x[0] = -4.0f;
  std::vector<uint8_t> q(18);
  quantize_row(TensorType::Q4_0, x.data(), q.data(), 32);
  EXPECT_EQ(fp16_to_fp32(static_cast<uint16_t>(q[0] | q[1] << 8)), 0.5f);
  for (int j = 0; j < 16; ++j) {
    const int hi = 7 - j % 8 + 8;
    EXPECT_EQ(q[2 + j], static_cast<uint8_t>(j | hi << 4)) << j;
  }
  std::vector<float> y(32);
  ref::dequantize_row(TensorType::Q4_0, q.data(), y.data(), 32);
  EXPECT_EQ(y, x);
}

TEST(Quant, Q8_0LayoutIsGgmls) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) * 0.25f;  // amax 4 at j = 0
  std::vector<uint8_t> q(34);
  quantize_row(TensorType::Q8_0, x.data(), q.data(), 32);
  EXPECT_EQ(static_cast<uint16_t>(q[0] | q[1] << 8), fp32_to_fp16(4.0f / 127.0f));
  EXPECT_EQ(static_cast<int8_t>(q[2]), -127);
  EXPECT_EQ(static_cast<int8_t>(q[2 + 16]), 0);
  EXPECT_EQ(static_cast<int8_t>(q[2 + 24]), static_cast<int8_t>(std::round(2.0f * 127 / 4)));
}

TEST(Quant, FloatTypesRoundTrip) {
  const auto x = random_floats(1001, 15);
  std::vector<uint8_t> q(1001 * 4);
  std::vector<float> y(1001);
  quantize_row(TensorType::F32, x.data(), q.data(), 1001);
  dequantize_row(TensorType::F32, q.data(), y.data(), 1001);
  EXPECT_EQ(x, y);
  quantize_row(TensorType::F16, x.data(), q.data(), 1001);
  dequantize_row(TensorType::F16, q.data(), y.data(), 1001);
  for (int i = 0; i < 1001; ++i) ASSERT_NEAR(y[i], x[i], std::abs(x[i]) * 0x1p-11f + 0x1p-25f);
  quantize_row(TensorType::BF16, x.data(), q.data(), 1001);
  dequantize_row(TensorType::BF16, q.data(), y.data(), 1001);
  for (int i = 0; i < 1001; ++i) ASSERT_NEAR(y[i], x[i], std::abs(x[i]) * 0x1p-8f);
}

TEST(Quant, RowBytesAndErrors) {
  EXPECT_EQ(weight_row_bytes(TensorType::F32, 3), 12u);
  EXPECT_EQ(weight_row_bytes(TensorType::F16, 3), 6u);
  EXPECT_EQ(weight_row_bytes(TensorType::BF16, 3), 6u);
  EXPECT_EQ(weight_row_bytes(TensorType::Q8_0, 64), 68u);
  EXPECT_EQ(weight_row_bytes(TensorType::Q4_0, 64), 36u);
  EXPECT_THROW(weight_row_bytes(TensorType::Q4_0, 48), Error);
  EXPECT_EQ(weight_row_bytes(TensorType::Q6_K, 512), 420u);
  EXPECT_THROW(weight_row_bytes(TensorType::Q6_K, 384), Error);
  EXPECT_THROW(weight_row_bytes(TensorType::IQ2_XXS, 256), Error);  // not computed
  EXPECT_TRUE(is_compute_type(TensorType::BF16));
  EXPECT_TRUE(is_compute_type(TensorType::Q4_1));
  EXPECT_FALSE(is_compute_type(TensorType::IQ1_S));
  std::vector<float> x(48);
  std::vector<uint8_t> q(64);
  EXPECT_THROW(quantize_row(TensorType::Q8_0, x.data(), q.data(), 48), Error);
  EXPECT_THROW(dequantize_row(TensorType::Q8_0, q.data(), x.data(), 48), Error);
}

TEST(Targets, DispatchFollowsForcedTarget) {
  const auto targets = available_simd_targets();
  ASSERT_FALSE(targets.empty());
  for_each_target([] {});  // checks simd_target_name() per target
  EXPECT_STREQ(simd_target_name(), simd_target_name(targets.front()));
  EXPECT_THROW(test::force_simd_target(int64_t{1} << 40), Error);
}

}  // namespace
}  // namespace lynx::kernels
