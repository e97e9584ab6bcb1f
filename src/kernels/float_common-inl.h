// Per-target helpers shared by the float kernels (kernels.cc, attention.cc, delta_net.cc,
// matmul.cc): the full float vector and its partial loads and stores at an array's end. As
// int_common-inl.h is for the integer kernels, this header follows Highway's -inl.h convention
// (its guard toggles with HWY_TARGET_TOGGLE; included once per target, after hwy/highway.h).
//
// What each of those files still writes itself is Highway's foreach_target preamble (#define
// HWY_TARGET_INCLUDE "<the file>", then hwy/foreach_target.h): it names the file that Highway
// re-includes once per target, so it cannot move into a shared header.
#if defined(LYNX_KERNELS_FLOAT_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LYNX_KERNELS_FLOAT_COMMON_INL_H_
#undef LYNX_KERNELS_FLOAT_COMMON_INL_H_
#else
#define LYNX_KERNELS_FLOAT_COMMON_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lynx::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr int64_t kN = static_cast<int64_t>(hn::MaxLanes(DF()));

// The last `count` (< kN) floats at p in a full vector; the other lanes `pad`. Through a stack
// copy, so no kernel reads past its arrays.
HWY_INLINE VF LoadTail(const float* p, int64_t count, float pad = 0.0f) {
  HWY_ALIGN float buf[kN];
  for (int64_t i = 0; i < kN; ++i) buf[i] = pad;
  std::memcpy(buf, p, size_t(count) * sizeof(float));
  return hn::Load(DF(), buf);
}
// The first `count` (< kN) lanes of v to p, nothing past them.
HWY_INLINE void StoreTail(VF v, float* p, int64_t count) {
  HWY_ALIGN float buf[kN];
  hn::Store(v, DF(), buf);
  std::memcpy(p, buf, size_t(count) * sizeof(float));
}

}  // namespace HWY_NAMESPACE
}  // namespace lynx::kernels
HWY_AFTER_NAMESPACE();

#endif  // LYNX_KERNELS_FLOAT_COMMON_INL_H_
