// Q8_0: 32 elements = fp16 d, 32 x int8 q (34 bytes); value = q * d.
#include <algorithm>
#include <cmath>

#include "kernels/types/blocks.h"

namespace lynx::kernels::types {

void levels_q8_0(const uint8_t* src, Levels32& out) {
  out.d = load_f16(src);
  out.m = 0.0f;
  for (int j = 0; j < 32; ++j) out.q[j] = static_cast<int8_t>(src[2 + j]);
}

void decode_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels<levels_q8_0, sizeof(BlockQ8_0), false>(src, dst, n_blocks);
}

// ggml's reference quantizer: d = max|x| / 127, q = round(x / d) half away from zero
// (computed with the f32 d, stored as fp16).
void encode_q8_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(dst, d);
    for (int j = 0; j < 32; ++j) {
      dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(src[j] * id)));
    }
  }
}

}  // namespace lynx::kernels::types
