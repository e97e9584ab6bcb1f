// Per-target helpers shared by the integer kernels (matmul_q8.cc, matmul_k_i16.cc): each of
// them is compiled once per instruction set through Highway's foreach_target.h, so this
// header follows Highway's -inl.h convention (its guard toggles with HWY_TARGET_TOGGLE and it
// is included once per target, after hwy/highway.h).
#if defined(LYNX_KERNELS_INT_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LYNX_KERNELS_INT_COMMON_INL_H_
#undef LYNX_KERNELS_INT_COMMON_INL_H_
#else
#define LYNX_KERNELS_INT_COMMON_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace icommon {
namespace hn = hwy::HWY_NAMESPACE;

// The integer kernels' vector shape: on x86 (AVX2, AVX-512) a full vector of int32 lanes, one
// weight row per lane (the byte-wise dot products vpmaddubsw / vpdpbusd sum into them);
// elsewhere 4 lanes, the shape the portable code paths are written for.
#undef LYNX_INT_X86
#if HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2
#define LYNX_INT_X86 1
#else
#define LYNX_INT_X86 0
#endif

#if LYNX_INT_X86
#if HWY_TARGET == HWY_AVX2
using DI = hn::Full256<int32_t>;
#else
using DI = hn::Full512<int32_t>;
#endif
#else
using DI = hn::CappedTag<int32_t, 4>;
#endif
using VI = hn::Vec<DI>;
using DF = hn::Rebind<float, DI>;
using VF = hn::Vec<DF>;
constexpr int kNR = static_cast<int>(hn::MaxLanes(DI()));  // rows per block

HWY_INLINE int32_t LoadI32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Calls f.template operator()<NT>() with NT == n, for n in [1, kMax]: the kernels take the
// token count of a group as a template parameter (accumulators in registers).
template <int kMax, class F>
HWY_INLINE void WithTokenCount(int n, F&& f) {
  if constexpr (kMax >= 1) {
    if (n == kMax) {
      f.template operator()<kMax>();
    } else {
      WithTokenCount<kMax - 1>(n, f);
    }
  }
}

// Stores lanes [lo, hi) of acc (one full vector of df's floats, aligned) to out[lo..hi).
template <class DF>
HWY_INLINE void StoreLanes(DF df, const float* acc, int lo, int hi, float* out) {
  if (lo == 0 && hi == static_cast<int>(hn::MaxLanes(df))) {
    hn::StoreU(hn::Load(df, acc), df, out);
  } else {
    std::memcpy(out + lo, acc + lo, static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

// acc + a * b rounded once, as std::fma in the scalar twins: MulAdd where the target fuses
// it, per lane std::fma elsewhere (so every target gives the twins' bits).
template <class DF, class VF = hn::Vec<DF>>
HWY_INLINE VF FmaExact(DF df, VF a, VF b, VF acc) {
#if HWY_NATIVE_FMA
  (void)df;
  return hn::MulAdd(a, b, acc);
#else
  constexpr size_t kN = hn::MaxLanes(DF());
  HWY_ALIGN float fa[kN], fb[kN], fc[kN];
  hn::Store(a, df, fa);
  hn::Store(b, df, fb);
  hn::Store(acc, df, fc);
  for (size_t i = 0; i < kN; ++i) fc[i] = std::fma(fa[i], fb[i], fc[i]);
  return hn::Load(df, fc);
#endif
}

}  // namespace icommon
}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#endif  // LYNX_KERNELS_INT_COMMON_INL_H_
