// Q5_0: 32 elements = fp16 d, u32 qh (the fifth bits: bit j for element j), 16 bytes of low
// nibbles laid out as Q4_0's (22 bytes); value = (q - 16) * d.
#include <algorithm>
#include <cmath>

#include "kernels/types/blocks.h"

namespace lynx::kernels::types {

void levels_q5_0(const uint8_t* src, Levels32& out) {
  out.d = load_f16(src);
  out.m = 0.0f;
  const uint32_t qh = load_u32(src + 2);
  const uint8_t* qs = src + 6;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>((qh >> j) & 1) << 4;
    const int hi1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
    out.q[j] = static_cast<int8_t>(((qs[j] & 0x0F) | hi0) - 16);
    out.q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | hi1) - 16);
  }
}

void decode_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels<levels_q5_0, sizeof(BlockQ5_0), false>(src, dst, n_blocks);
}

// As Q4_0 with 32 levels: d = (signed value of largest magnitude) / -16.
void encode_q5_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 22) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        vmax = src[j];
      }
    }
    const float d = vmax / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(src[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(src[j + 16] * id + 16.5f)));
      dst[6 + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(dst + 2, &qh, 4);
  }
}

}  // namespace lynx::kernels::types
