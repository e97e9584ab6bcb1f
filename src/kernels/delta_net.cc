// Gated DeltaNet steps (delta_net.h): SIMD over channels (conv) and over the value dimension
// (delta rule), with the scalar twins at the end. A value head's state is dk rows of dv
// floats (Qwen3-Next: 128 x 128, 64 KiB); the delta rule reads it once and writes it once per
// token, holding kBlock vectors of each accumulator in registers while the rows stream by.
#include "kernels/delta_net.h"

#include <cmath>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/delta_net.cc"
// Order matters: foreach_target.h re-includes this file once per target.
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

#include "hwy/contrib/math/math-inl.h"
#include "kernels/float_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vectors of the value dimension per pass over the state's rows: 2 x 4 accumulators (S^T k
// and S^T q) plus 4 loads stay within the 16 registers of AVX2.
constexpr int kBlock = 4;

// silu(y) = y sigmoid(y), the sigmoid from e = exp(-|y|) <= 1, which never overflows.
HWY_INLINE VF Silu(VF y) {
  const DF df;
  const VF one = hn::Set(df, 1.0f);
  const VF e = hn::Exp(df, hn::Neg(hn::Abs(y)));
  const VF num = hn::IfThenElse(hn::Ge(y, hn::Zero(df)), one, e);
  return hn::Mul(y, hn::Div(num, hn::Add(one, e)));
}

// Channels [c, c + kN) of one conv position with K = 4 taps (Qwen3-Next's and Qwen3.5's
// conv): the kN x 4 weights are contiguous, and one de-interleaving load gives each tap's
// vector, where other widths gather them.
HWY_INLINE VF Conv4(const float* wc, const float* window, int64_t conv_dim, VF in) {
  const DF df;
  VF w0, w1, w2, w3;
  hn::LoadInterleaved4(df, wc, w0, w1, w2, w3);
  VF y = hn::Mul(w3, in);
  y = hn::MulAdd(w0, hn::LoadU(df, window), y);
  y = hn::MulAdd(w1, hn::LoadU(df, window + conv_dim), y);
  return hn::MulAdd(w2, hn::LoadU(df, window + 2 * conv_dim), y);
}

void ConvStepT(float* x, float* window, const float* w, int64_t conv_dim, int K, int64_t c0,
               int64_t c1) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  // Lane l reads channel c + l's tap: w[(c + l) K + j].
  const auto taps = hn::Mul(hn::Iota(di, 0), hn::Set(di, K));
  int64_t c = c0;
  for (; c + kN <= c1; c += kN) {
    const float* wc = w + c * K;
    const VF in = hn::LoadU(df, x + c);
    VF y;
    if (K == 4) {
      y = Conv4(wc, window + c, conv_dim, in);
    } else {
      y = hn::Mul(hn::GatherIndex(df, wc + K - 1, taps), in);
      for (int j = 0; j < K - 1; ++j) {
        y = hn::MulAdd(hn::GatherIndex(df, wc + j, taps), hn::LoadU(df, window + j * conv_dim + c),
                       y);
      }
    }
    for (int j = 0; j + 1 < K - 1; ++j) {
      hn::StoreU(hn::LoadU(df, window + (j + 1) * conv_dim + c), df, window + j * conv_dim + c);
    }
    if (K > 1) hn::StoreU(in, df, window + (K - 2) * conv_dim + c);
    hn::StoreU(Silu(y), df, x + c);
  }
  if (c < c1) ref::conv_step(x, window, w, conv_dim, K, c, c1);
}

// Pass 1 over value columns [j0, j0 + B kN): mk = S0^T k, mq = S0^T q (B == 0: the tail of
// `tail` columns in one zero-padded vector).
template <int B>
HWY_INLINE void ReadColumns(const float* S, const float* q, const float* k, int64_t dk, int64_t dv,
                            int64_t j0, int64_t tail, float* mk, float* mq) {
  const DF df;
  constexpr int kV = B > 0 ? B : 1;
  VF ak[kV], aq[kV];
  for (int b = 0; b < kV; ++b) ak[b] = aq[b] = hn::Zero(df);
  for (int64_t i = 0; i < dk; ++i) {
    const float* row = S + i * dv + j0;
    const VF ki = hn::Set(df, k[i]), qi = hn::Set(df, q[i]);
    for (int b = 0; b < kV; ++b) {
      const VF s = B > 0 ? hn::LoadU(df, row + b * kN) : LoadTail(row, tail);
      ak[b] = hn::MulAdd(ki, s, ak[b]);
      aq[b] = hn::MulAdd(qi, s, aq[b]);
    }
  }
  for (int b = 0; b < kV; ++b) {
    if (B > 0) {
      hn::StoreU(ak[b], df, mk + j0 + b * kN);
      hn::StoreU(aq[b], df, mq + j0 + b * kN);
    } else {
      StoreTail(ak[b], mk + j0, tail);
      StoreTail(aq[b], mq + j0, tail);
    }
  }
}

// Pass 2 over value columns [j0, j0 + B kN): S = decay S0 + k d^T.
template <int B>
HWY_INLINE void UpdateColumns(float* S, const float* k, const float* d, float decay, int64_t dk,
                              int64_t dv, int64_t j0, int64_t tail) {
  const DF df;
  constexpr int kV = B > 0 ? B : 1;
  const VF vdecay = hn::Set(df, decay);
  VF dj[kV];
  for (int b = 0; b < kV; ++b) {
    dj[b] = B > 0 ? hn::LoadU(df, d + j0 + b * kN) : LoadTail(d + j0, tail);
  }
  for (int64_t i = 0; i < dk; ++i) {
    float* row = S + i * dv + j0;
    const VF ki = hn::Set(df, k[i]);
    for (int b = 0; b < kV; ++b) {
      const VF s = B > 0 ? hn::LoadU(df, row + b * kN) : LoadTail(row, tail);
      const VF n = hn::MulAdd(ki, dj[b], hn::Mul(s, vdecay));
      if (B > 0) {
        hn::StoreU(n, df, row + b * kN);
      } else {
        StoreTail(n, row, tail);
      }
    }
  }
}

void DeltaRuleStepT(float* S, const float* q, const float* k, const float* v, float decay,
                    float beta, int64_t dk, int64_t dv, float* mem, float* out) {
  const DF df;
  int64_t j = 0;
  for (; j + kBlock * kN <= dv; j += kBlock * kN)
    ReadColumns<kBlock>(S, q, k, dk, dv, j, 0, mem, out);
  for (; j + kN <= dv; j += kN) ReadColumns<1>(S, q, k, dk, dv, j, 0, mem, out);
  if (j < dv) ReadColumns<0>(S, q, k, dk, dv, j, dv - j, mem, out);
  float qk = 0.f;
  for (int64_t i = 0; i < dk; ++i) qk += q[i] * k[i];
  // mem: S0^T k -> d = beta (v - decay S0^T k); out: S0^T q -> decay S0^T q + (q . k) d.
  const VF vdecay = hn::Set(df, decay), vbeta = hn::Set(df, beta), vqk = hn::Set(df, qk);
  for (j = 0; j + kN <= dv; j += kN) {
    const VF d =
        hn::Mul(vbeta, hn::NegMulAdd(vdecay, hn::LoadU(df, mem + j), hn::LoadU(df, v + j)));
    hn::StoreU(d, df, mem + j);
    hn::StoreU(hn::MulAdd(vqk, d, hn::Mul(vdecay, hn::LoadU(df, out + j))), df, out + j);
  }
  for (; j < dv; ++j) {
    mem[j] = beta * (v[j] - decay * mem[j]);
    out[j] = decay * out[j] + qk * mem[j];
  }
  for (j = 0; j + kBlock * kN <= dv; j += kBlock * kN)
    UpdateColumns<kBlock>(S, k, mem, decay, dk, dv, j, 0);
  for (; j + kN <= dv; j += kN) UpdateColumns<1>(S, k, mem, decay, dk, dv, j, 0);
  if (j < dv) UpdateColumns<0>(S, k, mem, decay, dk, dv, j, dv - j);
}

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(ConvStepT);
HWY_EXPORT(DeltaRuleStepT);

void conv_step(float* x, float* window, const float* w, int64_t conv_dim, int K, int64_t c0,
               int64_t c1) {
  HWY_DYNAMIC_DISPATCH(ConvStepT)(x, window, w, conv_dim, K, c0, c1);
}

void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay,
                     float beta, int64_t dk, int64_t dv, float* mem, float* out) {
  HWY_DYNAMIC_DISPATCH(DeltaRuleStepT)(S, q, k, v, decay, beta, dk, dv, mem, out);
}

namespace ref {

void conv_step(float* x, float* window, const float* w, int64_t conv_dim, int K, int64_t c0,
               int64_t c1) {
  for (int64_t c = c0; c < c1; ++c) {
    const float* wc = w + c * K;
    const float in = x[c];
    float y = wc[K - 1] * in;
    for (int j = 0; j < K - 1; ++j) y += wc[j] * window[j * conv_dim + c];
    for (int j = 0; j + 1 < K - 1; ++j) window[j * conv_dim + c] = window[(j + 1) * conv_dim + c];
    if (K > 1) window[(K - 2) * conv_dim + c] = in;
    x[c] = y / (1.f + std::exp(-y));
  }
}

void delta_rule_step(float* S, const float* q, const float* k, const float* v, float decay,
                     float beta, int64_t dk, int64_t dv, float* mem, float* out) {
  for (int64_t j = 0; j < dv; ++j) mem[j] = 0.f;
  for (int64_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    const float ki = k[i];
    for (int64_t j = 0; j < dv; ++j) {
      row[j] *= decay;
      mem[j] += ki * row[j];
    }
  }
  for (int64_t j = 0; j < dv; ++j) mem[j] = (v[j] - mem[j]) * beta;
  for (int64_t j = 0; j < dv; ++j) out[j] = 0.f;
  for (int64_t i = 0; i < dk; ++i) {
    float* row = S + i * dv;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < dv; ++j) {
      row[j] += ki * mem[j];
      out[j] += qi * row[j];
    }
  }
}

}  // namespace ref
}  // namespace lynx::kernels
#endif  // HWY_ONCE
