// Q4_K: 256 elements = fp16 d, fp16 dmin, 12 bytes of 8 (scale, min) 6-bit pairs
// (kquants.h), 128 bytes of nibbles (144 bytes); value = d * scale * q - dmin * min.
// Each 64 elements take 32 bytes: the low nibbles are elements 0-31 (sub-block 2k), the high
// nibbles elements 32-63 (sub-block 2k + 1).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

void levels_q4_k(const uint8_t* src, LevelsK& out) {
  out.d = load_f16(src + offsetof(BlockQ4_K, d));
  out.dmin = load_f16(src + offsetof(BlockQ4_K, dmin));
  out.sub_len = 32;
  out.has_min = true;
  const uint8_t* scales = src + offsetof(BlockQ4_K, scales);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    scale_min_k4(s, scales, &sc, &m);
    out.scale[s] = static_cast<int16_t>(sc);
    out.min[s] = static_cast<int16_t>(m);
  }
  const uint8_t* q = src + offsetof(BlockQ4_K, qs);
  for (int k = 0; k < 4; ++k, q += 32) {
    for (int l = 0; l < 32; ++l) {
      out.q[64 * k + l] = static_cast<int8_t>(q[l] & 0x0F);
      out.q[64 * k + 32 + l] = static_cast<int8_t>(q[l] >> 4);
    }
  }
}

void decode_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels_k<levels_q4_k, sizeof(BlockQ4_K), true, 32>(src, dst, n_blocks);
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
