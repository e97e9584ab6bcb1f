// Q4_0: 32 elements = fp16 d, 16 bytes; byte j holds element j in its low nibble and element
// j + 16 in its high nibble (18 bytes); value = (nibble - 8) * d.
#include <algorithm>
#include <cmath>

#include "kernels/types/blocks.h"

namespace lynx::kernels::types {

void levels_q4_0(const uint8_t* src, Levels32& out) {
  out.d = load_f16(src);
  out.m = 0.0f;
  for (int j = 0; j < 16; ++j) {
    out.q[j] = static_cast<int8_t>((src[2 + j] & 0x0F) - 8);
    out.q[j + 16] = static_cast<int8_t>((src[2 + j] >> 4) - 8);
  }
}

void decode_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels<levels_q4_0, sizeof(BlockQ4_0), false>(src, dst, n_blocks);
}

// The scale comes from the signed value of largest magnitude, so that it maps to -8 exactly
// and the asymmetric range [-8, 7] is fully used (ggml's quantize_row_q4_0_ref).
void encode_q4_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 18) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        vmax = src[j];
      }
    }
    const float d = vmax / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    for (int j = 0; j < 16; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(src[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(src[j + 16] * id + 8.5f)));
      dst[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace lynx::kernels::types
