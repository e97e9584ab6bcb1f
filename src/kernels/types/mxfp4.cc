// MXFP4 (OCP microscaling FP4, gpt-oss's expert weights): 32 elements = one E8M0 scale byte
// e, 16 bytes of FP4 (E2M1) nibbles laid out as Q4_0's (17 bytes). ggml keeps the E2M1 values
// doubled as integers (kMxfp4Values) and halves the scale: value = grid[nibble] * 2^(e - 128).
// Every e decodes to a finite power of two (e = 255 is 2^127, not NaN, as in ggml; e = 0 and
// 1 are the subnormals 2^-128 and 2^-127).
#include <algorithm>
#include <cmath>
#include "kernels/types/blocks.h"

namespace lynx::kernels::types {

void levels_mxfp4(const uint8_t* src, Levels32& out) {
  out.d = e8m0_half(src[0]);
  out.m = 0.0f;
  for (int j = 0; j < 16; ++j) {
    out.q[j] = kMxfp4Values[src[1 + j] & 0x0F];
    out.q[j + 16] = kMxfp4Values[src[1 + j] >> 4];
  }
}

void decode_mxfp4(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels<levels_mxfp4, sizeof(BlockMxfp4), false>(src, dst, n_blocks);
}

// ggml's MXFP4 quantizer: the exponent e = floor(log2(max|x|)) - 2 + 127 (so the largest
// value lands near the grid's end, 6 = 12 / 2), each value to its nearest grid point (ties to
// the lower index).
void encode_mxfp4(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 17) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[j]));
    // Clamped in float before the conversion (an Inf input would not fit an int).
    const float fe = amax > 0 ? std::floor(std::log2(amax)) - 2.0f + 127.0f : 0.0f;
    const int e = static_cast<int>(std::clamp(fe, 0.0f, 254.0f));
    const float d = e8m0_half(static_cast<uint8_t>(e));
    dst[0] = static_cast<uint8_t>(e);
    auto nearest = [&](float x) {
      int best = 0;
      float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - x);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(kMxfp4Values[i]) * d - x);
        if (err < best_err) {
          best = i;
          best_err = err;
        }
      }
      return best;
    };
    for (int j = 0; j < 16; ++j) {
      dst[1 + j] = static_cast<uint8_t>(nearest(src[j]) | (nearest(src[j + 16]) << 4));
    }
  }
}

}  // namespace lynx::kernels::types
