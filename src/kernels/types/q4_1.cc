// Q4_1: 32 elements = fp16 d, fp16 m, 16 bytes of nibbles laid out as Q4_0's (20 bytes);
// value = nibble * d + m.
#include <algorithm>
#include <cmath>

#include "kernels/types/blocks.h"

namespace lynx::kernels::types {

void levels_q4_1(const uint8_t* src, Levels32& out) {
  out.d = load_f16(src);
  out.m = load_f16(src + 2);
  for (int j = 0; j < 16; ++j) {
    out.q[j] = static_cast<int8_t>(src[4 + j] & 0x0F);
    out.q[j + 16] = static_cast<int8_t>(src[4 + j] >> 4);
  }
}

void decode_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels<levels_q4_1, sizeof(BlockQ4_1), true>(src, dst, n_blocks);
}

// Min/max of the block: m = min, d = (max - min) / 15, q = trunc((x - min) / d + 0.5).
void encode_q4_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 20) {
    float mn = INFINITY, mx = -INFINITY;
    for (int j = 0; j < 32; ++j) {
      mn = std::min(mn, src[j]);
      mx = std::max(mx, src[j]);
    }
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    store_f16(dst + 2, mn);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>((src[j] - mn) * id + 0.5f)));
      const int hi =
          std::min(15, static_cast<int>(static_cast<int8_t>((src[j + 16] - mn) * id + 0.5f)));
      dst[4 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace lynx::kernels::types
