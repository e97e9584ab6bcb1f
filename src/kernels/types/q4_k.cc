// Q4_K: 256 elements = fp16 d, fp16 dmin, 12 bytes of 8 (scale, min) 6-bit pairs
// (kquants.h), 128 bytes of nibbles (144 bytes); value = d * scale * q - dmin * min.
// Each 64 elements take 32 bytes: the low nibbles are elements 0-31 (sub-block 2k), the high
// nibbles elements 32-63 (sub-block 2k + 1).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

void decode_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 144) {
    const float d = load_f16(src), dmin = load_f16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int k = 0; k < 4; ++k, q += 32) {
      int sc, m;
      scale_min_k4(2 * k, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(2 * k + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// ggml's reference Q4_K quantizer: per 32 values a (scale, min) pair from the asymmetric
// search (weights rms + |x|), both quantized to 6 bits against the largest and packed as
// kquants.h says, then the levels recomputed with the stored scales.
void encode_q4_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int kMax = 15;
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K, dst += 144) {
    uint8_t L[kQK_K];
    std::memset(dst, 0, 144);
    encode_k_scales_mins(src, kMax, -1.0f, 20, dst, L);
    uint8_t* q = dst + 16;
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        q[32 * k + l] = static_cast<uint8_t>(L[64 * k + l] | (L[64 * k + 32 + l] << 4));
      }
    }
  }
}

}  // namespace lynx::kernels::types
