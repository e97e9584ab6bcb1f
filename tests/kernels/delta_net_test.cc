// The Gated DeltaNet steps against their scalar twins on every SIMD target: odd channel
// ranges and conv widths, odd and wide value / key dims, misaligned arrays, several steps
// through the same state.
#include "kernels/delta_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
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

// The chunked form (delta_rule_chunked) against the recurrence in float64, beside the float32
// recurrence (ref::delta_rule_step, token by token) against the same: over run lengths that
// end before, at and after chunk boundaries up to 600 tokens, decays near 0 (some exactly 0),
// near 1 and mixed, random betas, rows laid out as the forward pass has them (q, k and v in
// one strided row, decay and beta interleaved), on every SIMD target. Errors are normwise:
// the largest difference over the run's outputs (or the final state) over their largest
// magnitude. The chunked form sums in another order; its error stays within kChunkedTol.
constexpr double kChunkedTol = 5e-6;

struct RecurrenceRun {
  int64_t dk, dv, n;
  std::vector<float> rows, gb, S0;  // rows: [q | k | v | 3 pad] per token
  int64_t ld() const { return 2 * dk + dv + 3; }
};

RecurrenceRun make_run(int64_t dk, int64_t dv, int64_t n, int decay_kind, uint32_t seed) {
  RecurrenceRun r{dk, dv, n, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  r.rows.assign(size_t(n * r.ld()), 0.f);
  r.gb.assign(size_t(2 * n), 0.f);
  for (int64_t t = 0; t < n; ++t) {
    float* q = &r.rows[size_t(t * r.ld())];
    float* k = q + dk;
    double nq = 0, nk = 0;
    for (int64_t i = 0; i < dk; ++i) {
      q[i] = nd(rng), k[i] = nd(rng);
      nq += double(q[i]) * q[i], nk += double(k[i]) * k[i];
    }
    for (int64_t i = 0; i < dk; ++i) {
      q[i] = float(q[i] / std::sqrt(nq * double(dk)));
      k[i] = float(k[i] / std::sqrt(nk));
    }
    for (int64_t j = 0; j < dv; ++j) k[dk + j] = nd(rng);
    const float u = ud(rng);
    float decay = decay_kind == 0 ? 0.05f * u : decay_kind == 1 ? 1.f - 1e-3f * u : 0.3f + 0.7f * u;
    if (decay_kind == 0 && t % 5 == 2) decay = 0.f;
    r.gb[size_t(2 * t)] = decay;
    r.gb[size_t(2 * t + 1)] = ud(rng);  // beta in (0, 1): a sigmoid's range
  }
  r.S0 = random_floats(size_t(dk * dv), seed + 7, 0.3f);
  return r;
}

// The recurrence in float64: outputs [n x dv] and the final state.
void recurrence_f64(const RecurrenceRun& r, std::vector<double>& out, std::vector<double>& S) {
  const int64_t dk = r.dk, dv = r.dv;
  S.assign(r.S0.begin(), r.S0.end());
  out.assign(size_t(r.n * dv), 0.0);
  std::vector<double> d(static_cast<size_t>(dv));
  for (int64_t t = 0; t < r.n; ++t) {
    const float* q = &r.rows[size_t(t * r.ld())];
    const float* k = q + dk;
    const float* v = k + dk;
    const double g = r.gb[size_t(2 * t)], beta = r.gb[size_t(2 * t + 1)];
    for (double& s : S) s *= g;
    for (int64_t j = 0; j < dv; ++j) {
      double sk = 0;
      for (int64_t i = 0; i < dk; ++i) sk += S[size_t(i * dv + j)] * k[i];
      d[size_t(j)] = beta * (v[j] - sk);
    }
    for (int64_t i = 0; i < dk; ++i) {
      for (int64_t j = 0; j < dv; ++j) S[size_t(i * dv + j)] += k[i] * d[size_t(j)];
    }
    for (int64_t j = 0; j < dv; ++j) {
      double o = 0;
      for (int64_t i = 0; i < dk; ++i) o += S[size_t(i * dv + j)] * q[i];
      out[size_t(t * dv + j)] = o;
    }
  }
}

double normwise_error(const float* got, int64_t ld, const std::vector<double>& want, int64_t rows,
                      int64_t cols) {
  double diff = 0, mag = 1e-30;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < cols; ++j) {
      const double w = want[size_t(t * cols + j)];
      diff = std::max(diff, std::abs(double(got[t * ld + j]) - w));
      mag = std::max(mag, std::abs(w));
    }
  }
  return diff / mag;
}

TEST(DeltaNet, ChunkedMatchesTheRecurrence) {
  const int64_t shapes[][2] = {{128, 128}, {17, 31}, {8, 5}, {32, 67}};
  double worst_chunked = 0, worst_recurrent = 0;
  for_each_target([&] {
    for (const auto& [dk, dv] : shapes) {
      for (int64_t n : {1, 2, 7, 63, 64, 65, 127, 128, 129, 200, 600}) {
        if (dk == 128 && n > 200 && n != 600) continue;
        for (int decay_kind : {0, 1, 2}) {
          SCOPED_TRACE(::testing::Message() << "dk " << dk << " dv " << dv << " n " << n
                                            << " decay kind " << decay_kind);
          const RecurrenceRun r =
              make_run(dk, dv, n, decay_kind, uint32_t(1000 * decay_kind + 7 * n + dk + dv));
          std::vector<double> out64, S64;
          recurrence_f64(r, out64, S64);
          // Chunked, outputs into strided rows (2 floats of padding each).
          std::vector<float> S = r.S0, out(size_t(n * (dv + 2)), -1.f);
          std::vector<float> mem(delta_rule_chunked_scratch(dk, dv));
          const DeltaRuleRows rows{r.rows.data(),
                                   r.rows.data() + dk,
                                   r.rows.data() + 2 * dk,
                                   r.ld(),
                                   r.gb.data(),
                                   r.gb.data() + 1,
                                   2,
                                   out.data(),
                                   dv + 2};
          delta_rule_chunked(S.data(), rows, n, dk, dv, mem.data());
          // The float32 recurrence, token by token.
          std::vector<float> S_rec = r.S0, out_rec(size_t(n * dv)), m(static_cast<size_t>(dv));
          for (int64_t t = 0; t < n; ++t) {
            const float* q = &r.rows[size_t(t * r.ld())];
            ref::delta_rule_step(S_rec.data(), q, q + dk, q + 2 * dk, r.gb[size_t(2 * t)],
                                 r.gb[size_t(2 * t + 1)], dk, dv, m.data(),
                                 &out_rec[size_t(t * dv)]);
          }
          const double eo = normwise_error(out.data(), dv + 2, out64, n, dv);
          const double es = normwise_error(S.data(), dv, S64, dk, dv);
          const double ro = normwise_error(out_rec.data(), dv, out64, n, dv);
          const double rs = normwise_error(S_rec.data(), dv, S64, dk, dv);
          worst_chunked = std::max({worst_chunked, eo, es});
          worst_recurrent = std::max({worst_recurrent, ro, rs});
          EXPECT_LT(eo, kChunkedTol) << "outputs (float32 recurrence: " << ro << ")";
          EXPECT_LT(es, kChunkedTol) << "state (float32 recurrence: " << rs << ")";
          for (int64_t t = 0; t < n; ++t) {
            ASSERT_EQ(out[size_t(t * (dv + 2) + dv)], -1.f) << "wrote past token " << t;
          }
        }
      }
    }
  });
  std::printf(
      "normwise error against the float64 recurrence: chunked %.3g, float32 recurrence %.3g\n",
      worst_chunked, worst_recurrent);
}

// A run split across calls (a prefill in pieces that end mid-chunk) continues from the state
// the first call left: within the same tolerance of the whole run in one call.
TEST(DeltaNet, ChunkedContinuesAcrossCalls) {
  for_each_target([] {
    const int64_t dk = 128, dv = 128, n = 150;
    const RecurrenceRun r = make_run(dk, dv, n, 2, 99);
    std::vector<double> out64, S64;
    recurrence_f64(r, out64, S64);
    std::vector<float> mem(delta_rule_chunked_scratch(dk, dv));
    for (int64_t split : {1, 37, 64, 100}) {
      std::vector<float> S = r.S0, out(size_t(n * dv));
      for (auto [b, e] : {std::pair<int64_t, int64_t>{0, split}, {split, n}}) {
        const float* base = r.rows.data() + b * r.ld();
        const DeltaRuleRows rows{base,
                                 base + dk,
                                 base + 2 * dk,
                                 r.ld(),
                                 &r.gb[size_t(2 * b)],
                                 &r.gb[size_t(2 * b + 1)],
                                 2,
                                 &out[size_t(b * dv)],
                                 dv};
        delta_rule_chunked(S.data(), rows, e - b, dk, dv, mem.data());
      }
      EXPECT_LT(normwise_error(out.data(), dv, out64, n, dv), kChunkedTol) << "split " << split;
      EXPECT_LT(normwise_error(S.data(), dv, S64, dk, dv), kChunkedTol) << "split " << split;
    }
  });
}

}  // namespace
}  // namespace lynx::kernels
