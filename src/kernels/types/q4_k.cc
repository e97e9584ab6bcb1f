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
#include "kernels/types/levels_k.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

// The block's layout is read in levels_k.h (Reader<BlockQ4_K>), which these instantiate.
void levels_q4_k(const uint8_t* src, LevelsK& out) {
  levels_by_reader<BlockQ4_K>(src, out);
}

void decode_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_reader<BlockQ4_K>(src, dst, n_blocks);
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
