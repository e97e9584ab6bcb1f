// The chunked gated delta rule (delta_net.h: delta_rule_chunked). Within a chunk of n tokens,
// with g_t the decays, P[t][s] = g_{s+1} ... g_t (P[t][t] = 1) and G_t = g_0 ... g_t, the
// recurrence S_t = g_t S_{t-1} + k_t d_t^T, d_t = beta_t (v_t - g_t S_{t-1}^T k_t) unrolls to
//   d_t + beta_t sum_{s<t} P[t][s] (k_t . k_s) d_s = beta_t (v_t - G_t S_0^T k_t)
//   out_t = G_t S_0^T q_t + sum_{s<=t} P[t][s] (q_t . k_s) d_s
//   S_n   = G_{n-1} S_0 + sum_s P[n-1][s] k_s d_s^T
// (the UT / WY form of Yang et al.'s Gated DeltaNet): the state is read twice and written
// once per chunk instead of read and written per token, and the work is matrix products that
// keep 4 x 3 vectors of accumulators in registers, where the per-token step streams the state
// through memory at a few FMAs per load. The d_t come from one forward substitution (the
// unit lower-triangular system) per chunk.
#include <algorithm>
#include <cstring>

#include "kernels/delta_net.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/delta_net_chunked.cc"
// Order matters: foreach_target.h re-includes this file once per target.
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

#include "kernels/float_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kC = kDeltaChunk;

// Which part of a product a caller needs: all of it, only rows' inner sums up to the tile's
// last row (a lower-triangular left operand, zero above its diagonal), or only the column
// strips that reach the tile's rows' diagonal (the lower triangle of a Gram matrix; the rest
// is left unwritten or holds values no one reads).
enum class Tri { kNone, kInner, kCols };

// Rows [r0, r0 + R) x columns [j0, j0 + NV kN) of Cm = init + A B over `kin` inner terms
// (NV == 0: `tail` < kN columns). init: 0 when !acc, else cscale Cm.
template <int R, int NV>
HWY_INLINE void Tile(const float* A, int64_t lda, const float* Bm, int64_t ldb, int64_t kin,
                     float* Cm, int64_t ldc, int64_t tail, bool acc, float cscale) {
  const DF df;
  constexpr int kV = NV > 0 ? NV : 1;
  VF c[R][kV];
  const VF vs = hn::Set(df, cscale);
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < kV; ++b) {
      if (!acc) {
        c[r][b] = hn::Zero(df);
      } else {
        const float* p = Cm + r * ldc + b * kN;
        c[r][b] = hn::Mul(vs, NV > 0 ? hn::LoadU(df, p) : LoadTail(p, tail));
      }
    }
  }
  for (int64_t i = 0; i < kin; ++i) {
    VF bv[kV];
    const float* brow = Bm + i * ldb;
    for (int b = 0; b < kV; ++b)
      bv[b] = NV > 0 ? hn::LoadU(df, brow + b * kN) : LoadTail(brow, tail);
    for (int r = 0; r < R; ++r) {
      const VF a = hn::Set(df, A[r * lda + i]);
      for (int b = 0; b < kV; ++b) c[r][b] = hn::MulAdd(a, bv[b], c[r][b]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int b = 0; b < kV; ++b) {
      float* p = Cm + r * ldc + b * kN;
      if (NV > 0) {
        hn::StoreU(c[r][b], df, p);
      } else {
        StoreTail(c[r][b], p, tail);
      }
    }
  }
}

template <int NV>
void TileColumn(const float* A, int64_t lda, const float* Bm, int64_t ldb, float* Cm, int64_t ldc,
                int64_t M, int64_t N, int64_t K, int64_t j, int64_t tail, bool acc, float cscale,
                Tri tri) {
  for (int64_t r0 = 0; r0 < M; r0 += 4) {
    // Lower-triangular cases: rows whose columns all lie above the diagonal have nothing to
    // compute (kCols), and a row's inner sum stops at the tile's last row (kInner).
    if (tri == Tri::kCols && j >= r0 + 4) continue;
    const int64_t R = std::min<int64_t>(4, M - r0);
    const int64_t kin = tri == Tri::kInner ? std::min(K, r0 + R) : K;
    const float* a = A + r0 * lda;
    float* c = Cm + r0 * ldc + j;
    switch (R) {
      case 4:
        Tile<4, NV>(a, lda, Bm + j, ldb, kin, c, ldc, tail, acc, cscale);
        break;
      case 3:
        Tile<3, NV>(a, lda, Bm + j, ldb, kin, c, ldc, tail, acc, cscale);
        break;
      case 2:
        Tile<2, NV>(a, lda, Bm + j, ldb, kin, c, ldc, tail, acc, cscale);
        break;
      default:
        Tile<1, NV>(a, lda, Bm + j, ldb, kin, c, ldc, tail, acc, cscale);
        break;
    }
  }
  (void)N;
}

// Cm [M x N] = (acc ? cscale Cm : 0) + A [M x K] Bm [K x N], row-major with leading dims.
// Column strips outside, row tiles inside: a strip of Bm (K rows of 3 vectors: 12 KiB of a
// 128-row state on AVX2) stays in L1 while the row tiles pass over it, and A's rows are read
// in order; the other order streams all of Bm from L2 once per row tile (10% slower on AVX2).
// 4 x 3 accumulators, 3 loads and a broadcast fill AVX2's 16 registers (8% faster than
// 4 x 2 at a 512-token prefill).
void MatMul(const float* A, int64_t lda, const float* Bm, int64_t ldb, float* Cm, int64_t ldc,
            int64_t M, int64_t N, int64_t K, bool acc, float cscale, Tri tri) {
  int64_t j = 0;
  for (; j + 3 * kN <= N; j += 3 * kN) {
    TileColumn<3>(A, lda, Bm, ldb, Cm, ldc, M, N, K, j, 0, acc, cscale, tri);
  }
  for (; j + 2 * kN <= N; j += 2 * kN) {
    TileColumn<2>(A, lda, Bm, ldb, Cm, ldc, M, N, K, j, 0, acc, cscale, tri);
  }
  for (; j + kN <= N; j += kN)
    TileColumn<1>(A, lda, Bm, ldb, Cm, ldc, M, N, K, j, 0, acc, cscale, tri);
  if (j < N) TileColumn<0>(A, lda, Bm, ldb, Cm, ldc, M, N, K, j, N - j, acc, cscale, tri);
}

// Products of decays below this are taken as 0: a term that small is below float rounding of
// any other term, and flushing it keeps denormals (slow on x86) out of the products.
constexpr float kTiny = 1e-30f;

// One chunk of n <= kC tokens (rows of `r` from token t0).
void Chunk(float* S, const DeltaRuleRows& r, int64_t t0, int64_t n, int64_t dk, int64_t dv,
           float* mem) {
  const DF df;
  // Scratch (delta_rule_chunked_scratch): X [2 kC x dk] (k rows, then q rows), KT [dk x kC],
  // WU [2 kC x dv] (S_0^T k_t, then S_0^T q_t), GK / GQ / P [kC x kC], Gc [kC], D [kC x dv].
  float* X = mem;
  float* KT = X + 2 * kC * dk;
  float* WU = KT + dk * kC;
  float* GK = WU + 2 * kC * dv;
  float* GQ = GK + kC * kC;
  float* P = GQ + kC * kC;
  float* Gc = P + kC * kC;
  float* D = Gc + kC;

  for (int64_t t = 0; t < n; ++t) {
    const float* k = r.k + (t0 + t) * r.ld_qkv;
    std::memcpy(X + t * dk, k, size_t(dk) * sizeof(float));
    std::memcpy(X + (n + t) * dk, r.q + (t0 + t) * r.ld_qkv, size_t(dk) * sizeof(float));
    for (int64_t i = 0; i < dk; ++i) KT[i * kC + t] = k[i];
  }
  // The decays' products: P row t from row t - 1 times g_t, G_t = G_{t-1} g_t.
  float g_prev = 1.f;
  for (int64_t t = 0; t < n; ++t) {
    const float g = r.decay[(t0 + t) * r.ld_gb];
    float* pt = P + t * kC;
    for (int64_t s = 0; s < t; ++s) {
      const float p = P[(t - 1) * kC + s] * g;
      pt[s] = p < kTiny ? 0.f : p;
    }
    pt[t] = 1.f;
    const float gc = g_prev * g;
    Gc[t] = gc < kTiny ? 0.f : gc;
    g_prev = Gc[t];
  }

  // S_0^T k_t and S_0^T q_t in one pass over the state; the Gram matrices' lower triangles.
  MatMul(X, dk, S, dv, WU, dv, 2 * n, dv, dk, false, 0.f, Tri::kNone);
  MatMul(X, dk, KT, kC, GK, kC, n, n, dk, false, 0.f, Tri::kCols);
  MatMul(X + n * dk, dk, KT, kC, GQ, kC, n, n, dk, false, 0.f, Tri::kCols);

  // D = (I + A)^-1 R by forward substitution, A[t][s] = beta_t P[t][s] (k_t . k_s) for s < t,
  // R_t = beta_t (v_t - G_t S_0^T k_t); column blocks of 4 vectors held in registers.
  for (int64_t t = 0; t < n; ++t) {
    const float beta = r.beta[(t0 + t) * r.ld_gb];
    for (int64_t s = 0; s < t; ++s) GK[t * kC + s] *= beta * P[t * kC + s];
    const float* v = r.v + (t0 + t) * r.ld_qkv;
    const float* w = WU + t * dv;
    float* d = D + t * dv;
    for (int64_t j = 0; j < dv; ++j) d[j] = beta * (v[j] - Gc[t] * w[j]);
  }
  {
    int64_t j = 0;
    for (; j + 4 * kN <= dv; j += 4 * kN) {
      for (int64_t t = 0; t < n; ++t) {
        float* d = D + t * dv + j;
        VF a0 = hn::LoadU(df, d), a1 = hn::LoadU(df, d + kN), a2 = hn::LoadU(df, d + 2 * kN),
           a3 = hn::LoadU(df, d + 3 * kN);
        for (int64_t s = 0; s < t; ++s) {
          const VF c = hn::Set(df, GK[t * kC + s]);
          const float* ds = D + s * dv + j;
          a0 = hn::NegMulAdd(c, hn::LoadU(df, ds), a0);
          a1 = hn::NegMulAdd(c, hn::LoadU(df, ds + kN), a1);
          a2 = hn::NegMulAdd(c, hn::LoadU(df, ds + 2 * kN), a2);
          a3 = hn::NegMulAdd(c, hn::LoadU(df, ds + 3 * kN), a3);
        }
        hn::StoreU(a0, df, d);
        hn::StoreU(a1, df, d + kN);
        hn::StoreU(a2, df, d + 2 * kN);
        hn::StoreU(a3, df, d + 3 * kN);
      }
    }
    for (; j < dv; j += kN) {
      const int64_t w = std::min(kN, dv - j);
      for (int64_t t = 0; t < n; ++t) {
        float* d = D + t * dv + j;
        VF a = w == kN ? hn::LoadU(df, d) : LoadTail(d, w);
        for (int64_t s = 0; s < t; ++s) {
          const float* ds = D + s * dv + j;
          a = hn::NegMulAdd(hn::Set(df, GK[t * kC + s]),
                            w == kN ? hn::LoadU(df, ds) : LoadTail(ds, w), a);
        }
        if (w == kN) {
          hn::StoreU(a, df, d);
        } else {
          StoreTail(a, d, w);
        }
      }
    }
  }

  // out_t = G_t S_0^T q_t + sum_{s<=t} P[t][s] (q_t . k_s) d_s: L zero above its diagonal.
  for (int64_t t = 0; t < n; ++t) {
    float* lt = GQ + t * kC;
    for (int64_t s = 0; s <= t; ++s) lt[s] *= P[t * kC + s];
    for (int64_t s = t + 1; s < n; ++s) lt[s] = 0.f;
    float* o = r.out + (t0 + t) * r.ld_out;
    const float* u = WU + (n + t) * dv;
    for (int64_t j = 0; j < dv; ++j) o[j] = Gc[t] * u[j];
  }
  MatMul(GQ, kC, D, dv, r.out + t0 * r.ld_out, r.ld_out, n, dv, n, true, 1.f, Tri::kInner);

  // S_n = G_{n-1} S_0 + sum_s k_s (P[n-1][s] d_s)^T.
  for (int64_t s = 0; s < n; ++s) {
    const float p = P[(n - 1) * kC + s];
    float* d = D + s * dv;
    for (int64_t j = 0; j < dv; ++j) d[j] *= p;
  }
  MatMul(KT, kC, D, dv, S, dv, dk, dv, n, true, Gc[n - 1], Tri::kNone);
}

void DeltaRuleChunkedT(float* S, const DeltaRuleRows& r, int64_t n, int64_t dk, int64_t dv,
                       float* mem) {
  for (int64_t t0 = 0; t0 < n; t0 += kC) Chunk(S, r, t0, std::min(kC, n - t0), dk, dv, mem);
}

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(DeltaRuleChunkedT);

size_t delta_rule_chunked_scratch(int64_t dk, int64_t dv) {
  return size_t(2 * kDeltaChunk * dk + dk * kDeltaChunk + 3 * kDeltaChunk * dv +
                3 * kDeltaChunk * kDeltaChunk + kDeltaChunk);
}

void delta_rule_chunked(float* S, const DeltaRuleRows& rows, int64_t n, int64_t dk, int64_t dv,
                        float* mem) {
  HWY_DYNAMIC_DISPATCH(DeltaRuleChunkedT)(S, rows, n, dk, dv, mem);
}

}  // namespace lynx::kernels
#endif  // HWY_ONCE
