// Q8_K: 256 elements = f32 d, 256 x int8 q, 16 x int16 sums of 16 quants each (292 bytes);
// value = d * q. The activation type of the K-quants' integer dot products in ggml (the
// sums serve the min terms of Q2_K/Q4_K/Q5_K).
#include <algorithm>
#include <cmath>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

void decode_q8_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 292, dst += 256) {
    const float d = load_f32(src);
    for (int j = 0; j < 256; ++j) dst[j] = d * static_cast<float>(static_cast<int8_t>(src[4 + j]));
  }
}

// ggml's Q8_K quantizer: d = -max / 127 from the signed value of largest magnitude, levels
// rounded half to even and capped at 127, and the 16 sums of 16 levels.
void encode_q8_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K, dst += 292) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    std::memset(dst, 0, 292);
    if (amax == 0) continue;
    const float iscale = -127.0f / max;
    auto* q = reinterpret_cast<int8_t*>(dst + 4);
    for (int j = 0; j < kQK_K; ++j)
      q[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * src[j])));
    for (int g = 0; g < 16; ++g) {
      int16_t s = 0;
      for (int l = 0; l < 16; ++l) s = static_cast<int16_t>(s + q[16 * g + l]);
      std::memcpy(dst + 260 + 2 * g, &s, 2);
    }
    store_f32(dst, 1 / iscale);
  }
}

}  // namespace lynx::kernels::types
