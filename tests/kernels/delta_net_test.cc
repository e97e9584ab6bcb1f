// The Gated DeltaNet steps against their scalar twins on every SIMD target: odd channel
// ranges and conv widths, odd and wide value / key dims, misaligned arrays, several steps
// through the same state.
#include "kernels/delta_net.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace lynx::kernels {
namespace {

using testing::Buffer;
using testing::for_each_target;
using testing::random_floats;

constexpr double kEps = 6e-8;  // float unit roundoff

// `v` copied into a buffer that starts `off` floats past a 64-byte boundary.
struct Arr {
  Buffer buf;
  int64_t n;
  Arr(const std::vector<float>& v, size_t off) : buf(v.size() * 4 + 4, off * 4), n(v.size()) {
    for (size_t i = 0; i < v.size(); ++i) buf.f32()[i] = v[i];
  }
  float* data() { return buf.f32(); }
  float operator[](int64_t i) { return buf.f32()[i]; }
};

TEST(DeltaNet, ConvStepMatchesReference) {
  for_each_target([] {
    for (int K : {1, 2, 4, 5}) {
      for (int64_t cd : {1, 7, 16, 33, 100, 515}) {
        for (size_t off : {0, 3}) {
          SCOPED_TRACE(::testing::Message() << "K " << K << " channels " << cd << " off " << off);
          const auto w = random_floats(size_t(cd * K), 11 + uint32_t(cd), 0.5f);
          const auto win0 = random_floats(size_t(cd * (K - 1)), 12 + uint32_t(K), 2.f);
          Arr ws(w, off), win(win0, off + 1), win_ref(win0, 0);
          // Channels [c0, c1) of several positions: a range that is not whole vectors, as the
          // forward pass's chunks of 512 are not for every conv_dim.
          const int64_t c0 = cd > 3 ? 3 : 0, c1 = cd;
          for (int step = 0; step < 3; ++step) {
            const auto x0 = random_floats(size_t(cd), 13 + uint32_t(step) + uint32_t(cd), 3.f);
            Arr x(x0, off + 2), x_ref(x0, 0);
            // Per channel the sum of the products' magnitudes (SiLU's slope is at most 1.1).
            std::vector<double> mag(static_cast<size_t>(cd));
            for (int64_t c = 0; c < cd; ++c) {
              mag[size_t(c)] = std::abs(double(w[size_t(c * K + K - 1)]) * x0[size_t(c)]);
              for (int j = 0; j < K - 1; ++j) {
                mag[size_t(c)] += std::abs(double(w[size_t(c * K + j)]) * win_ref[j * cd + c]);
              }
            }
            conv_step(x.data(), win.data(), ws.data(), cd, K, c0, c1);
            ref::conv_step(x_ref.data(), win_ref.data(), w.data(), cd, K, c0, c1);
            for (int64_t c = 0; c < cd; ++c) {
              if (c < c0) {
                ASSERT_EQ(x[c], x0[size_t(c)]) << "channel " << c << " outside the range";
                continue;
              }
              EXPECT_NEAR(x[c], x_ref[c],
                          1.1 * (K + 4) * kEps * mag[size_t(c)] + 4 * kEps * std::abs(x_ref[c]))
                  << "step " << step << " channel " << c;
            }
            for (int64_t i = 0; i < cd * (K - 1); ++i) {
              ASSERT_EQ(win[i], win_ref[i]) << "step " << step << " window element " << i;
            }
          }
        }
      }
    }
  });
}

// The SIMD kernel's fused order (delta_net.h) against the definition's: each step starts
// both from the same state, so the bounds are one step's rounding.
TEST(DeltaNet, DeltaRuleStepMatchesReference) {
  for_each_target([] {
    for (int64_t dk : {1, 3, 8, 17, 128}) {
      for (int64_t dv : {1, 5, 16, 31, 64, 67, 128}) {
        for (size_t off : {0, 1}) {
          SCOPED_TRACE(::testing::Message() << "dk " << dk << " dv " << dv << " off " << off);
          auto S0 = random_floats(size_t(dk * dv), 21 + uint32_t(dk * dv), 0.3f);
          for (int step = 0; step < 3; ++step) {
            const uint32_t seed = 100 * uint32_t(step) + uint32_t(dk + dv);
            auto q = random_floats(size_t(dk), seed + 1), k = random_floats(size_t(dk), seed + 2);
            const auto v = random_floats(size_t(dv), seed + 3);
            double nq = 0, nk = 0;
            for (int64_t i = 0; i < dk; ++i) nq += double(q[i]) * q[i], nk += double(k[i]) * k[i];
            for (int64_t i = 0; i < dk; ++i) {
              q[size_t(i)] = float(q[size_t(i)] / std::sqrt(nq * dk));
              k[size_t(i)] = float(k[size_t(i)] / std::sqrt(nk));
            }
            const float decay = 0.5f + 0.15f * float(step), beta = 0.9f - 0.2f * float(step);
            Arr S(S0, off), qa(q, off + 1), ka(k, off + 2), va(v, off + 3);
            std::vector<float> S_ref = S0, mem(static_cast<size_t>(dv)),
                               mem_ref(static_cast<size_t>(dv));
            std::vector<float> out(size_t(dv) + 1), out_ref(static_cast<size_t>(dv));
            delta_rule_step(S.data(), qa.data(), ka.data(), va.data(), decay, beta, dk, dv,
                            mem.data(), out.data() + 1);
            ref::delta_rule_step(S_ref.data(), q.data(), k.data(), v.data(), decay, beta, dk, dv,
                                 mem_ref.data(), out_ref.data());
            // Bounds from the magnitudes of the sums: d_j sums dk products |k_i S_ij|; the new
            // state adds |k_i d_j| to |decay S_ij|; out_j sums dk products of q with it.
            for (int64_t j = 0; j < dv; ++j) {
              double md = std::abs(v[size_t(j)]);
              for (int64_t i = 0; i < dk; ++i)
                md += std::abs(k[size_t(i)] * S0[size_t(i * dv + j)]);
              const double d_tol = (dk + 8) * kEps * md;
              double mo = 0;
              for (int64_t i = 0; i < dk; ++i) {
                const double s = std::abs(decay * S0[size_t(i * dv + j)]) +
                                 std::abs(k[size_t(i)] * double(mem_ref[size_t(j)]));
                mo += std::abs(q[size_t(i)]) * s;
                EXPECT_NEAR(S[i * dv + j], S_ref[size_t(i * dv + j)],
                            4 * kEps * s + std::abs(k[size_t(i)]) * d_tol)
                    << "step " << step << " S[" << i << "][" << j << "]";
              }
              double qk = 0;
              for (int64_t i = 0; i < dk; ++i) qk += std::abs(q[size_t(i)] * k[size_t(i)]);
              EXPECT_NEAR(out[size_t(j) + 1], out_ref[size_t(j)],
                          (2 * dk + 8) * kEps * mo + qk * d_tol)
                  << "step " << step << " out " << j;
            }
            EXPECT_EQ(out[0], 0.f) << "wrote before out";
            S0 = S_ref;
          }
        }
      }
    }
  });
}

// The state is the recurrence's memory: with decay 1 and beta 1 a key written once is read
// back (the delta rule stores v at k: S^T k = v after the step when |k| = 1), on every target.
TEST(DeltaNet, DeltaRuleStoresTheValueAtItsKey) {
  for_each_target([] {
    const int64_t dk = 19, dv = 37;
    std::vector<float> S(size_t(dk * dv), 0.f), q(size_t(dk), 0.f), k(size_t(dk), 0.f);
    const auto v = random_floats(size_t(dv), 5);
    k[4] = 1.f;
    q[4] = 1.f;  // read with the same key
    std::vector<float> mem(static_cast<size_t>(dv)), out(static_cast<size_t>(dv));
    delta_rule_step(S.data(), q.data(), k.data(), v.data(), 1.f, 1.f, dk, dv, mem.data(),
                    out.data());
    for (int64_t j = 0; j < dv; ++j) EXPECT_FLOAT_EQ(out[size_t(j)], v[size_t(j)]) << j;
  });
}

}  // namespace
}  // namespace lynx::kernels
