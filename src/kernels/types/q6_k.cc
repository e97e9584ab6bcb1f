// Q6_K: 256 elements = 128 bytes ql (low nibbles), 64 bytes qh (top 2 bits), 16 int8 scales
// (one per 16 elements), fp16 d (210 bytes); value = d * scale * (q - 32).
// Per half of 128 elements (64 ql bytes, 32 qh bytes, 8 scales), for l < 32: element l is the
// low nibble of ql[l], l + 32 the low nibble of ql[l + 32], l + 64 the high nibble of ql[l],
// l + 96 the high nibble of ql[l + 32]; their top bits are the bit pairs 0, 2, 4, 6 of qh[l].
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/levels_k.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

// The block's layout is read in levels_k.h (Reader<BlockQ6_K>), which these instantiate.
void levels_q6_k(const uint8_t* src, LevelsK& out) {
  levels_by_reader<BlockQ6_K>(src, out);
}

void decode_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_reader<BlockQ6_K>(src, dst, n_blocks);
}

// ggml's reference Q6_K quantizer: per 16 values a scale from the symmetric search (x^2
// weights, levels -32..31), the 16 scales quantized to int8 against the largest, then the
// levels recomputed with the stored scales.
void encode_q6_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K, dst += 210) {
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = search_symmetric(16, 32, src + 16 * j, L + 16 * j, 1);
      if (std::fabs(scales[j]) > max_abs) {
        max_abs = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(dst, 0, 210);
    if (max_abs < kGroupMaxEps) continue;  // all zeros, d = 0
    const float iscale = -128.0f / max_scale;
    store_f16(dst + 208, 1 / iscale);
    auto* sc = reinterpret_cast<int8_t*>(dst + 192);
    for (int j = 0; j < 16; ++j)
      sc[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[j])));
    const float d_all = load_f16(dst + 208);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(sc[j]);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] =
            static_cast<int8_t>(std::clamp(nearest_int(src[16 * j + l] / d), -32, 31) + 32);
      }
    }
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
      const int8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0x0F) | ((Lh[l + 64] & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0x0F) | ((Lh[l + 96] & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                     ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace lynx::kernels::types
