// SIMD element-wise kernels and reductions (Highway, dynamic dispatch), plus the SIMD target
// queries. Partial vectors at the end of an array go through a zero- or -inf-padded stack
// copy, so no kernel ever reads or writes past its arrays.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "lynx/error.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels.cc"
// Order matters: foreach_target.h re-includes this file once per target.
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

#include "hwy/contrib/math/math-inl.h"
#include "kernels/float_common-inl.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

HWY_INLINE float Sum(VF v) {
  return hn::GetLane(hn::SumOfLanes(DF(), v));
}

int64_t TargetT() {
  return HWY_TARGET;
}

// Four accumulators: enough independent adds to stream at memory or L1 speed.
float DotT(const float* a, const float* b, int64_t n) {
  const DF df;
  VF s0 = hn::Zero(df), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 4 * kN <= n; i += 4 * kN) {
    s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(df, a + i + kN), hn::LoadU(df, b + i + kN), s1);
    s2 = hn::MulAdd(hn::LoadU(df, a + i + 2 * kN), hn::LoadU(df, b + i + 2 * kN), s2);
    s3 = hn::MulAdd(hn::LoadU(df, a + i + 3 * kN), hn::LoadU(df, b + i + 3 * kN), s3);
  }
  for (; i + kN <= n; i += kN) s0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), s0);
  if (i < n) s1 = hn::MulAdd(LoadTail(a + i, n - i, 0.0f), LoadTail(b + i, n - i, 0.0f), s1);
  return Sum(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)));
}

float SumT(const float* x, int64_t n) {
  const DF df;
  VF s0 = hn::Zero(df), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 4 * kN <= n; i += 4 * kN) {
    s0 = hn::Add(hn::LoadU(df, x + i), s0);
    s1 = hn::Add(hn::LoadU(df, x + i + kN), s1);
    s2 = hn::Add(hn::LoadU(df, x + i + 2 * kN), s2);
    s3 = hn::Add(hn::LoadU(df, x + i + 3 * kN), s3);
  }
  for (; i + kN <= n; i += kN) s0 = hn::Add(hn::LoadU(df, x + i), s0);
  if (i < n) s1 = hn::Add(LoadTail(x + i, n - i, 0.0f), s1);
  return Sum(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)));
}

void RmsNormT(const float* x, const float* w, float* y, int64_t n, float eps) {
  const DF df;
  const float ss = DotT(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const VF vs = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    VF v = hn::Mul(hn::LoadU(df, x + i), vs);
    if (w) v = hn::Mul(v, hn::LoadU(df, w + i));
    hn::StoreU(v, df, y + i);
  }
  for (; i < n; ++i) y[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void SoftmaxT(float* x, int64_t n) {
  const DF df;
  if (n <= 0) return;
  const float kNegInf = -INFINITY;
  VF vmax = hn::Set(df, kNegInf);
  int64_t i = 0;
  for (; i + kN <= n; i += kN) vmax = hn::Max(vmax, hn::LoadU(df, x + i));
  if (i < n) vmax = hn::Max(vmax, LoadTail(x + i, n - i, kNegInf));
  const VF mx = hn::MaxOfLanes(df, vmax);
  // exp(x - max) <= 1; padding lanes are -inf, whose exp is 0, so they add nothing.
  VF vsum = hn::Zero(df);
  for (i = 0; i + kN <= n; i += kN) {
    const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), mx));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, df, x + i);
  }
  if (i < n) {
    const VF e = hn::Exp(df, hn::Sub(LoadTail(x + i, n - i, kNegInf), mx));
    vsum = hn::Add(vsum, e);
    StoreTail(e, x + i, n - i);
  }
  const VF inv = hn::Set(df, 1.0f / Sum(vsum));
  for (i = 0; i + kN <= n; i += kN) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), inv), df, x + i);
  if (i < n) StoreTail(hn::Mul(LoadTail(x + i, n - i, 0.0f), inv), x + i, n - i);
}

// silu(g) * u with sigmoid from e = exp(-|g|) <= 1, which never overflows:
// sigmoid(g) = 1 / (1 + e) for g >= 0 and e / (1 + e) for g < 0.
HWY_INLINE VF SwiGlu(VF g, VF u) {
  const DF df;
  const VF one = hn::Set(df, 1.0f);
  const VF e = hn::Exp(df, hn::Neg(hn::Abs(g)));
  const VF num = hn::IfThenElse(hn::Ge(g, hn::Zero(df)), one, e);
  return hn::Mul(hn::Mul(g, hn::Div(num, hn::Add(one, e))), u);
}

void SwiGluT(const float* gate, const float* up, float* out, int64_t n) {
  const DF df;
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    hn::StoreU(SwiGlu(hn::LoadU(df, gate + i), hn::LoadU(df, up + i)), df, out + i);
  }
  if (i < n) {
    StoreTail(SwiGlu(LoadTail(gate + i, n - i, 0.0f), LoadTail(up + i, n - i, 0.0f)), out + i,
              n - i);
  }
}

// gelu_tanh(g) * u. GELU's tanh form 0.5 g (1 + tanh(z)), z = sqrt(2/pi) (g + 0.044715 g^3),
// is g * sigmoid(2 z): one exp instead of a tanh, through the same overflow-free sigmoid as
// SwiGlu (a cube that overflows makes z +-inf, whose sigmoid is exactly 1 or 0).
HWY_INLINE VF GeGlu(VF g, VF u) {
  const DF df;
  const VF one = hn::Set(df, 1.0f);
  const VF inner = hn::MulAdd(hn::Mul(hn::Set(df, 0.044715f), g), hn::Mul(g, g), g);
  const VF z2 = hn::Mul(hn::Set(df, 2.0f * 0.7978845608028654f), inner);
  const VF e = hn::Exp(df, hn::Neg(hn::Abs(z2)));
  const VF num = hn::IfThenElse(hn::Ge(z2, hn::Zero(df)), one, e);
  return hn::Mul(hn::Mul(g, hn::Div(num, hn::Add(one, e))), u);
}

void GeGluT(const float* gate, const float* up, float* out, int64_t n) {
  const DF df;
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    hn::StoreU(GeGlu(hn::LoadU(df, gate + i), hn::LoadU(df, up + i)), df, out + i);
  }
  if (i < n) {
    StoreTail(GeGlu(LoadTail(gate + i, n - i, 0.0f), LoadTail(up + i, n - i, 0.0f)), out + i,
              n - i);
  }
}

// x <- cap tanh(x / cap) with Highway's tanh (4 ULP).
void SoftCapT(float* x, int64_t n, float cap) {
  const DF df;
  const VF vcap = hn::Set(df, cap), inv = hn::Set(df, 1.0f / cap);
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    hn::StoreU(hn::Mul(vcap, hn::Tanh(df, hn::Mul(hn::LoadU(df, x + i), inv))), df, x + i);
  }
  if (i < n)
    StoreTail(hn::Mul(vcap, hn::Tanh(df, hn::Mul(LoadTail(x + i, n - i, 0.0f), inv))), x + i,
              n - i);
}

void AxpyT(float a, const float* x, float* y, int64_t n) {
  const DF df;
  const VF va = hn::Set(df, a);
  int64_t i = 0;
  for (; i + kN <= n; i += kN) {
    hn::StoreU(hn::MulAdd(va, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  }
  if (i < n) {
    StoreTail(hn::MulAdd(va, LoadTail(x + i, n - i, 0.0f), LoadTail(y + i, n - i, 0.0f)), y + i,
              n - i);
  }
}

// 12 independent FMA chains on full vectors for `iters` rounds; returns the flops done and
// writes a checksum (so the chains cannot be optimized away). 12 chains cover the FMA latency
// (4 cycles) on 2 FMA pipes with room to spare, so this runs at the core's FMA peak.
double FmaChainsT(int64_t iters, float seed, float* sink) {
  const DF df;
  constexpr int kChains = 12;
  VF a[kChains];
  for (int k = 0; k < kChains; ++k) a[k] = hn::Set(df, seed * static_cast<float>(k + 1));
  const VF m = hn::Set(df, 0.9999999f), c = hn::Set(df, 1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int k = 0; k < kChains; ++k) a[k] = hn::MulAdd(a[k], m, c);
  }
  VF t = a[0];
  for (int k = 1; k < kChains; ++k) t = hn::Add(t, a[k]);
  *sink = Sum(t);
  return 2.0 * kChains * static_cast<double>(kN) * static_cast<double>(iters);
}

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lynx::kernels {

HWY_EXPORT(TargetT);
HWY_EXPORT(DotT);
HWY_EXPORT(SumT);
HWY_EXPORT(RmsNormT);
HWY_EXPORT(SoftmaxT);
HWY_EXPORT(SwiGluT);
HWY_EXPORT(GeGluT);
HWY_EXPORT(SoftCapT);
HWY_EXPORT(AxpyT);
HWY_EXPORT(FmaChainsT);

float dot(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotT)(a, b, n);
}
float sum(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SumT)(x, n);
}

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n <= 0) throw Error("rmsnorm: empty vector");
  HWY_DYNAMIC_DISPATCH(RmsNormT)(x, w, y, n, eps);
}
void softmax_inplace(float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SoftmaxT)(x, n);
}
void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwiGluT)(gate, up, out, n);
}
void geglu(const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeGluT)(gate, up, out, n);
}
void softcap(float* x, int64_t n, float cap) {
  HWY_DYNAMIC_DISPATCH(SoftCapT)(x, n, cap);
}
void axpy(float a, const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyT)(a, x, y, n);
}

double fma_chains(int64_t iters, float seed, float* sink) {
  return HWY_DYNAMIC_DISPATCH(FmaChainsT)(iters, seed, sink);
}

// Quantizing is not on the inference path (the GGUF writer and exporters use it) and must
// match ggml bit for bit, so the dispatched entry point shares the reference code.
void quantize_row(TensorType t, const float* src, void* dst, int64_t n) {
  ref::quantize_row(t, src, dst, n);
}

const char* simd_target_name(int64_t target) {
  return hwy::TargetName(target);
}
const char* simd_target_name() {
  return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetT)());
}

std::vector<int64_t> available_simd_targets() {
  return hwy::SupportedAndGeneratedTargets();
}

}  // namespace lynx::kernels
#endif  // HWY_ONCE
