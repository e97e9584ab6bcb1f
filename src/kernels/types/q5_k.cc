// Q5_K: 256 elements = fp16 d, fp16 dmin, 12 bytes of (scale, min) pairs as Q4_K, 32 bytes qh
// (fifth bits), 128 bytes of nibbles laid out as Q4_K's (176 bytes);
// value = d * scale * q - dmin * min. Element 64 k + l (l < 32) has its fifth bit in bit 2k
// of qh[l], element 64 k + 32 + l in bit 2k + 1.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/levels_k.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

// The block's layout is read in levels_k.h (Reader<BlockQ5_K>), which these instantiate.
void levels_q5_k(const uint8_t* src, LevelsK& out) {
  levels_by_reader<BlockQ5_K>(src, out);
}

void decode_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_reader<BlockQ5_K>(src, dst, n_blocks);
}

// ggml's reference Q5_K quantizer: per 32 values a (scale, min) pair from the asymmetric
// search (weights rms + |x|), both quantized to 6 bits against the largest and packed as
// kquants.h says, then the levels recomputed with the stored scales.
void encode_q5_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int kMax = 31;
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K, dst += 176) {
    uint8_t L[kQK_K];
    std::memset(dst, 0, 176);
    encode_k_scales_mins(src, kMax, -0.5f, 15, dst, L);
    uint8_t* qh = dst + 16;
    uint8_t* ql = dst + 48;
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[64 * k + l], l2 = L[64 * k + 32 + l];
        if (l1 > 15) qh[l] |= static_cast<uint8_t>(1 << (2 * k));
        if (l2 > 15) qh[l] |= static_cast<uint8_t>(2 << (2 * k));
        ql[32 * k + l] = static_cast<uint8_t>((l1 & 0x0F) | ((l2 & 0x0F) << 4));
      }
    }
  }
}

}  // namespace lynx::kernels::types
