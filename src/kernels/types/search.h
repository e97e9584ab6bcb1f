// Scale searches of ggml's reference quantizers (ggml-quants.c), written from their
// description: given a group of values, choose the scale (and min) and the integer levels
// that minimize a weighted squared (or absolute) error, trying a few scales around the
// max-based one. Used by the K-quant, IQ4 and Q8_K encoders of this folder.
#pragma once
#include <cmath>
#include <cstdint>

namespace lynx::kernels::types {

// Groups whose largest magnitude is below this are stored as zeros (ggml's GROUP_MAX_EPS).
inline constexpr float kGroupMaxEps = 1e-15f;

// Round half to even, as ggml's nearest_int for |x| < 2^22; beyond that (and for Inf/NaN
// from non-finite weights) a saturated value instead of an out-of-range conversion.
inline int nearest_int(float x) {
  constexpr float kLim = 4194304.0f;  // 2^22
  if (!(std::fabs(x) < kLim)) return x > 0 ? int(kLim) : x < 0 ? -int(kLim) : 0;
  return static_cast<int>(std::nearbyint(x));
}

// Symmetric levels in [-nmax, nmax - 1] for n values (stored as level + nmax in L): the scale
// from the signed value of largest magnitude, then with rmse_type 1 (weights x^2) a search
// over 18 nearby scales for the least weighted squared error. Returns the scale.
float search_symmetric(int n, int nmax, const float* x, int8_t* L, int rmse_type);

// Asymmetric levels in [0, nmax] with a min (value = scale * L - min_out): the min/max scale,
// then nstep scales from (nmax + rmin) / range in steps of rdelta, each refined by the least
// squares (scale, min) for its levels; keeps the best weighted error (absolute when use_mad).
// Returns the scale; *min_out is the min as a positive offset (0 when all values are >= 0).
float search_asymmetric(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out,
                        float rmin, float rdelta, int nstep, bool use_mad);

// Q3_K's search: symmetric levels in [-nmax, nmax - 1] (L = level + nmax) refined one element
// at a time (up to 5 passes) toward the least x^2-weighted squared error. Returns the scale.
float search_q3(int n, int nmax, const float* x, int8_t* L);

// The scale stage shared by Q4_K and Q5_K (levels in [0, kmax]): per 32 values a (scale, min)
// pair from search_asymmetric (weights rms + |x|, rmin / 0.1 / nstep), both quantized to 6 bits
// against the largest and packed into dst[4..16) as kquants.h says, d and dmin as fp16 into
// dst[0..4); then the 256 levels in L recomputed with the stored scales. dst must be zeroed.
void encode_k_scales_mins(const float* src, int kmax, float rmin, int nstep, uint8_t* dst,
                          uint8_t* L);

// Index of the value of the sorted grid `values` (n entries) nearest to x (ties to the lower).
int nearest_grid_index(int n, const int8_t* values, float x);

}  // namespace lynx::kernels::types
