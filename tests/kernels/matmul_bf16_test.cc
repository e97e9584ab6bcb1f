// The BF16 fast mode (matmul_bf16.h): the activation rounding against its scalar twin (bit for
// bit), every BF16 kernel this machine can run (AMX tiles, VDPBF16PS) against the scalar twin
// (F32 summation tolerance: the hardware picks its own order) over odd sizes, 1-70 tokens and
// partial row ranges, and their promise that an output depends only on its row and token. The
// kernel tests skip on machines without AVX512_BF16, where has_bf16_path is false and the
// engine keeps the exact path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/matmul_bf16.h"
#include "kernels/thread_pool.h"
#include "lynx/error.h"
#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::Buffer;
using testing::dot_tolerance;
using testing::random_floats;

const TensorType kHalfTypes[] = {TensorType::BF16, TensorType::F16};

// The BF16 kernels this machine can run, best first.
std::vector<Bf16Kernel> kernels_here() {
  std::vector<Bf16Kernel> ks;
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    if (bf16_kernel_available(k)) ks.push_back(k);
  }
  return ks;
}

// A [rows x cols] BF16/F16 matrix in kPanel16 (misaligned by `offset`), with its rows.
struct HalfPanels {
  TensorType type;
  int64_t rows, cols;
  std::vector<uint8_t> plain;
  mutable Buffer panel;
  HalfPanels(TensorType t, int64_t r, int64_t c, size_t offset, uint32_t seed)
      : type(t), rows(r), cols(c), plain(size_t(r * c) * 2), panel(size_t(r * c) * 2, offset) {
    const auto v = random_floats(size_t(r * c), seed);
    for (int64_t i = 0; i < r; ++i) quantize_row(t, &v[i * c], &plain[size_t(i * c) * 2], c);
    panel16_into(t, plain.data(), panel.data(), c, 0, r / kPanelRows);
  }
  // sum_c |W[r][c] x[c]| in double, with the operands the kernel multiplies.
  double abs_sum(int64_t r, const uint16_t* x) const {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) {
      uint16_t bits;
      std::memcpy(&bits, &plain[size_t(r * cols + c) * 2], 2);
      const float wv = type == TensorType::BF16 ? bf16_to_fp32(bits)
                                                : bf16_to_fp32(fp32_to_bf16(fp16_to_fp32(bits)));
      s += std::abs(double(wv) * bf16_to_fp32(x[c]));
    }
    return s;
  }
};

TEST(Bf16Acts, VectorRoundingEqualsTheScalarTwin) {
  for (int64_t cols : {1, 7, 16, 31, 32, 33, 100, 257}) {
    for (int n_tok : {1, 3, 17}) {
      auto x = random_floats(size_t(n_tok * (cols + 5)), uint32_t(cols * 100 + n_tok), 3.0f);
      x[0] = 1e-39f;                        // subnormal: to zero, as VCVTNE2PS2BF16 does
      x[x.size() / 2] = 1.0f + 1.0f / 256;  // a tie: to even
      Bf16Acts a;
      round_acts_bf16(x.data(), cols + 5, n_tok, cols, a);
      ASSERT_EQ(a.ld % 32, 0);
      ASSERT_GE(a.ld, cols);
      for (int t = 0; t < n_tok; ++t) {
        for (int64_t c = 0; c < a.ld; ++c) {
          const uint16_t got = a.v[size_t(t * a.ld + c)];
          if (c >= cols) {
            ASSERT_EQ(got, 0) << "padding " << c;
            continue;
          }
          const float xv = x[size_t(t * (cols + 5) + c)];
          // Compared as values: a flushed subnormal's zero may carry either sign.
          ASSERT_EQ(bf16_to_fp32(got), bf16_to_fp32(round_act_bf16(xv))) << t << " " << c;
        }
      }
    }
  }
  EXPECT_EQ(round_act_bf16(1.0f + 1.0f / 256), 0x3F80);   // tie to even (down)
  EXPECT_EQ(round_act_bf16(1.0f + 3.0f / 256), 0x3F82);   // tie to even (up)
  EXPECT_EQ(bf16_to_fp32(round_act_bf16(1e-39f)), 0.0f);  // subnormal flushed
  EXPECT_EQ(round_act_bf16(-2.0f), 0xC000);
}

TEST(Bf16Acts, TwinIsBf16NotExact) {
  // The twin multiplies the rounded activations: against the exact F32 path it differs, by at
  // most the rounding of each activation (2^-9 relative) summed.
  const HalfPanels m(TensorType::BF16, 16, 96, 0, 5);
  const auto x = random_floats(3 * 96, 6);
  Bf16Acts a;
  round_acts_bf16(x.data(), 96, 3, 96, a);
  std::vector<float> fast(3 * 16), exact(3 * 16);
  ref::matmul_rows_bf16(TensorType::BF16, m.panel.data(), 96, 0, 16, a, 0, 3, fast.data(), 16);
  ref::matmul_rows(TensorType::BF16, m.plain.data(), 96, 0, 16, x.data(), 96, 3, exact.data(), 16);
  int differ = 0;
  for (int t = 0; t < 3; ++t) {
    for (int r = 0; r < 16; ++r) {
      const double bound = m.abs_sum(r, &a.v[size_t(t * a.ld)]) * (1.0 / 256) + 1e-6;
      EXPECT_LE(std::abs(fast[t * 16 + r] - exact[t * 16 + r]), bound);
      differ += fast[t * 16 + r] != exact[t * 16 + r];
    }
  }
  EXPECT_GT(differ, 24);
}

// The kernel against the twin over rows [r0, r1) of an n_tok-token call starting at token t0.
void check_kernel(Bf16Kernel k, const HalfPanels& m, const Bf16Acts& a, int64_t r0, int64_t r1,
                  int t0, int n_tok) {
  const int64_t ldy = m.rows + 3;
  std::vector<float> got(size_t(n_tok * ldy), -7.0f), want(size_t(n_tok * ldy), -7.0f);
  matmul_rows_bf16(k, m.type, m.panel.data(), m.cols, r0, r1, a, t0, n_tok, got.data(), ldy);
  ref::matmul_rows_bf16(m.type, m.panel.data(), m.cols, r0, r1, a, t0, n_tok, want.data(), ldy);
  for (int j = 0; j < n_tok; ++j) {
    for (int64_t r = 0; r < ldy; ++r) {
      const float g = got[size_t(j * ldy + r)], w = want[size_t(j * ldy + r)];
      if (r < r0 || r >= r1) {
        ASSERT_EQ(g, -7.0f) << "wrote outside the rows, row " << r << " token " << j;
        continue;
      }
      const double tol = dot_tolerance(m.cols, m.abs_sum(r, &a.v[size_t((t0 + j) * a.ld)]), w);
      ASSERT_NEAR(g, w, tol) << bf16_kernel_name(k) << " " << gguf::tensor_type_name(m.type)
                             << " cols " << m.cols << " row " << r << " token " << j << " of "
                             << n_tok;
    }
  }
}

TEST(MatmulBf16, KernelMatchesTwinOverOddSizesAndEveryTokenCount) {
  if (kernels_here().empty()) {
    GTEST_SKIP() << "no AVX512_BF16 on this machine: the engine keeps the exact path";
  }
  for (Bf16Kernel k : kernels_here()) {
    for (TensorType t : kHalfTypes) {
      for (int64_t cols : {1, 2, 31, 33, 64, 95, 130}) {
        const HalfPanels m(t, 48, cols, size_t(cols % 3) * 2, uint32_t(cols));
        const auto x = random_floats(size_t(70 * cols), uint32_t(cols + 1));
        Bf16Acts a;
        round_acts_bf16(x.data(), cols, 70, cols, a);
        for (int n = 1; n <= 70; n += (cols == 33 || cols == 95 ? 1 : 7)) {
          check_kernel(k, m, a, 0, 48, 0, n);
        }
        check_kernel(k, m, a, 5, 43, 3, 33);  // partial panels at both ends, tokens from 3
        check_kernel(k, m, a, 16, 32, 69, 1);
        check_kernel(k, m, a, 17, 18, 0, 2);
        check_kernel(k, m, a, 33, 48, 60, 10);  // one panel, partial at its start
      }
    }
  }
}

TEST(MatmulBf16, OutputsDependOnlyOnRowAndToken) {
  if (kernels_here().empty()) GTEST_SKIP() << "no AVX512_BF16";
  const HalfPanels m(TensorType::F16, 96, 200, 0, 9);
  const auto x = random_floats(40 * 200, 10);
  Bf16Acts a;
  round_acts_bf16(x.data(), 200, 40, 200, a);
  for (Bf16Kernel k : kernels_here()) {
    std::vector<float> whole(40 * 96), split(40 * 96, 0.0f), pooled(40 * 96, 0.0f);
    matmul_rows_bf16(k, TensorType::F16, m.panel.data(), 200, 0, 96, a, 0, 40, whole.data(), 96);
    // Rows split unevenly, tokens in calls of 7 (the expert path's grouped rows).
    for (int t0 = 0; t0 < 40; t0 += 7) {
      const int n = std::min(7, 40 - t0);
      for (int64_t r0 : {0, 13, 50}) {
        const int64_t r1 = r0 == 0 ? 13 : r0 == 13 ? 50 : 96;
        matmul_rows_bf16(k, TensorType::F16, m.panel.data(), 200, r0, r1, a, t0, n,
                         split.data() + t0 * 96, 96);
      }
    }
    ThreadPool pool(3);
    matmul_bf16(k, pool, TensorType::F16, m.panel.data(), 96, 200, a, pooled.data(), 96);
    EXPECT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * 4)) << bf16_kernel_name(k);
    EXPECT_EQ(0, std::memcmp(whole.data(), pooled.data(), whole.size() * 4)) << bf16_kernel_name(k);
  }
}

TEST(MatmulBf16, KernelsByNameAndTheBestHere) {
  const Bf16Kernel k = best_bf16_kernel();
  EXPECT_TRUE(bf16_kernel_available(k));
  const auto here = kernels_here();
  EXPECT_EQ(k, here.empty() ? Bf16Kernel::kNone : here.front());
  EXPECT_EQ(bf16_kernel_by_name(""), k);
  EXPECT_EQ(bf16_kernel_by_name("auto"), k);
  EXPECT_EQ(bf16_kernel_by_name("none"), Bf16Kernel::kNone);
  for (Bf16Kernel c : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    if (bf16_kernel_available(c)) {
      EXPECT_EQ(bf16_kernel_by_name(bf16_kernel_name(c)), c);
    } else {
      EXPECT_THROW(bf16_kernel_by_name(bf16_kernel_name(c)), Error);  // not on this CPU
    }
  }
  EXPECT_THROW(bf16_kernel_by_name("avx2"), Error);
  EXPECT_EQ(has_bf16_path(TensorType::BF16, WeightLayout::kPanel16, k), k != Bf16Kernel::kNone);
  EXPECT_FALSE(has_bf16_path(TensorType::BF16, WeightLayout::kPanel16, Bf16Kernel::kNone));
  EXPECT_TRUE(bf16_kernel_available(Bf16Kernel::kNone));
  EXPECT_STREQ(bf16_kernel_name(Bf16Kernel::kAvx512Bf16), "avx512bf16");
}

TEST(MatmulBf16, RejectsWhatItCannotCompute) {
  const Bf16Kernel best = best_bf16_kernel();
  for (Bf16Kernel k : {best, Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    EXPECT_FALSE(has_bf16_path(TensorType::F32, WeightLayout::kPanel16, k));
    EXPECT_FALSE(has_bf16_path(TensorType::BF16, WeightLayout::kRows, k));
    EXPECT_FALSE(has_bf16_path(TensorType::Q8_0, WeightLayout::kRows, k));
  }
  Bf16Acts a;
  const std::vector<float> x(64, 1.0f);
  round_acts_bf16(x.data(), 64, 1, 64, a);
  std::vector<uint8_t> w(16 * 64 * 4);
  std::vector<float> y(16);
  EXPECT_THROW(matmul_rows_bf16(best, TensorType::F32, w.data(), 64, 0, 16, a, 0, 1, y.data(), 16),
               Error);
  EXPECT_THROW(matmul_rows_bf16(Bf16Kernel::kNone, TensorType::BF16, w.data(), 64, 0, 16, a, 0, 1,
                                y.data(), 16),
               Error);  // kNone is the exact path, not a kernel
  for (Bf16Kernel k : {Bf16Kernel::kAmx, Bf16Kernel::kAvx512Bf16}) {
    if (bf16_kernel_available(k)) continue;
    EXPECT_THROW(matmul_rows_bf16(k, TensorType::BF16, w.data(), 64, 0, 16, a, 0, 1, y.data(), 16),
                 Error);
  }
  if (has_bf16_path(TensorType::BF16, WeightLayout::kPanel16, best)) {
    EXPECT_THROW(
        matmul_rows_bf16(best, TensorType::BF16, w.data(), 32, 0, 16, a, 0, 1, y.data(), 16),
        Error);  // 64 activation columns against 32 weight columns
    EXPECT_THROW(
        matmul_rows_bf16(best, TensorType::BF16, w.data(), 64, 0, 16, a, 0, 2, y.data(), 16),
        Error);  // 2 tokens asked of 1
  }
  EXPECT_THROW(round_acts_bf16(x.data(), 64, 1, 0, a), Error);
}

}  // namespace
}  // namespace lynx::kernels
