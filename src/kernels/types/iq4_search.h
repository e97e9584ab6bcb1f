// The IQ4 scale search shared by IQ4_NL and IQ4_XS (ggml's quantize_row_iq4_nl_impl, written
// from its description): per block of 32, start from the scale that maps the value of largest
// magnitude onto the grid's end, then try 2 * kTries + 1 scales around it, each time taking the
// least-squares scale for the grid indices it gives (weights x^2); keep the best.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/types/blocks.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

// Best scale for the 32 values x (0 for an all-zero block); writes the grid indices to L.
inline float iq4_block_scale(const float* x, uint8_t* L) {
  constexpr int kTries = 7;
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int j = 0; j < 32; ++j) L[j] = 0;
    return 0.0f;
  }
  const float v0 = static_cast<float>(kIq4nlValues[0]);
  auto fit = [&](float id, float* sumqx, float* sumq2, bool store) {
    *sumqx = *sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const int l = nearest_grid_index(16, kIq4nlValues, id * x[j]);
      if (store) L[j] = static_cast<uint8_t>(l);
      const float q = static_cast<float>(kIq4nlValues[l]), w = x[j] * x[j];
      *sumqx += w * q * x[j];
      *sumq2 += w * q * q;
    }
  };
  float sumqx, sumq2;
  fit(1 / (-max / v0), &sumqx, &sumq2, true);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    const float id = (static_cast<float>(itry) + v0) / max;
    fit(id, &sumqx, &sumq2, false);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Nibble packing of 32 grid indices as Q4_0's: byte j = L[j] | L[j + 16] << 4.
inline void pack_nibbles32(const uint8_t* L, uint8_t* q) {
  for (int j = 0; j < 16; ++j) q[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

// Grid indices of the 32 values x for the stored scale d.
inline void iq4_indices(const float* x, float d, uint8_t* L) {
  const float id = d != 0 ? 1 / d : 0.0f;
  for (int j = 0; j < 32; ++j)
    L[j] = static_cast<uint8_t>(nearest_grid_index(16, kIq4nlValues, id * x[j]));
}

}  // namespace lynx::kernels::types
