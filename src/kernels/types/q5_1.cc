// Q5_1: 32 elements = fp16 d, fp16 m, u32 qh (fifth bits), 16 bytes of low nibbles (24
// bytes); value = q * d + m.
#include <algorithm>
#include <cmath>

#include "kernels/types/blocks.h"

namespace lynx::kernels::types {

void levels_q5_1(const uint8_t* src, Levels32& out) {
  out.d = load_f16(src);
  out.m = load_f16(src + 2);
  const uint32_t qh = load_u32(src + 4);
  const uint8_t* qs = src + 8;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = static_cast<int>((qh >> j) & 1) << 4;
    const int hi1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
    out.q[j] = static_cast<int8_t>((qs[j] & 0x0F) | hi0);
    out.q[j + 16] = static_cast<int8_t>((qs[j] >> 4) | hi1);
  }
}

void decode_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels<levels_q5_1, sizeof(BlockQ5_1), true>(src, dst, n_blocks);
}

// Min/max of the block as Q4_1, 32 levels.
void encode_q5_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 24) {
    float mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < 32; ++j) {
      mn = std::min(mn, src[j]);
      mx = std::max(mx, src[j]);
    }
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    store_f16(dst + 2, mn);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 =
          std::min(31, static_cast<int>(static_cast<uint8_t>((src[j] - mn) * id + 0.5f)));
      const int q1 =
          std::min(31, static_cast<int>(static_cast<uint8_t>((src[j + 16] - mn) * id + 0.5f)));
      dst[8 + j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
    }
    std::memcpy(dst + 4, &qh, 4);
  }
}

}  // namespace lynx::kernels::types
