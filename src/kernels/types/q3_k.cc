// Q3_K: 256 elements = 32 bytes hmask (the third bit, inverted: set means +0, clear -4),
// 64 bytes of 2-bit quants (laid out as Q2_K's), 12 bytes of 16 6-bit scales, fp16 d
// (110 bytes); value = d * (scale - 32) * (q - (hbit ? 0 : 4)).
// Scales: scale i (0..15) has its low nibble in byte i % 8 (the low nibble for i < 8, the high
// one for i >= 8) and its top 2 bits in byte 8 + i % 4, at bits 2 * (i / 4).
// hmask: element 32 k + l (k = 0..7, l = 0..31) has its bit k in hmask byte l.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/levels_k.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

// The block's layout is read in levels_k.h (Reader<BlockQ3_K>), which these instantiate.
void levels_q3_k(const uint8_t* src, LevelsK& out) {
  levels_by_reader<BlockQ3_K>(src, out);
}

void decode_q3_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_reader<BlockQ3_K>(src, dst, n_blocks);
}

// ggml's reference Q3_K quantizer: per 16 values a scale from the refined symmetric search
// (levels -4..3), the 16 scales quantized to 6 bits against the largest, then the levels
// recomputed with the stored scales; the levels' third bit goes to hmask.
void encode_q3_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K, dst += 110) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = search_q3(16, 4, src + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(dst, 0, 110);
    uint8_t* s = dst + 96;
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = std::clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
        if (j < 8) {
          s[j] = static_cast<uint8_t>(l & 0x0F);
        } else {
          s[j - 8] |= static_cast<uint8_t>((l & 0x0F) << 4);
        }
        s[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      store_f16(dst + 108, 1 / iscale);
    }
    int sc[16];
    unpack_q3_scales(s, sc);
    const float d_all = load_f16(dst + 108);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(sc[j]);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] =
            static_cast<int8_t>(std::clamp(nearest_int(src[16 * j + l] / d), -4, 3) + 4);
      }
    }
    uint8_t* hm = dst;
    for (int e = 0; e < kQK_K; ++e) {
      if (L[e] > 3) {
        hm[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
        L[e] = static_cast<int8_t>(L[e] - 4);
      }
    }
    uint8_t* q = dst + 32;
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        q[32 * h + l] =
            static_cast<uint8_t>(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
      }
    }
  }
}

}  // namespace lynx::kernels::types
