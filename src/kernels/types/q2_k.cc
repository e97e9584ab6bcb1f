// Q2_K: 256 elements = 16 bytes of (scale, min) nibbles (low: scale, high: min) for 16
// sub-blocks of 16, 64 bytes of 2-bit quants, fp16 d, fp16 dmin (84 bytes);
// value = d * scale * q - dmin * min.
// Quant layout: in each half of 128 elements, byte l (0..31) of the half's 32 bytes holds, in
// its bit pairs 0-1, 2-3, 4-5, 6-7, the elements l, l + 32, l + 64, l + 96; sub-block s of the
// half (16 elements) is element range 16 s.
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/types/blocks.h"
#include "kernels/types/kquants.h"
#include "kernels/types/levels_k.h"
#include "kernels/types/search.h"

namespace lynx::kernels::types {

// The block's layout is read in levels_k.h (Reader<BlockQ2_K>), which these instantiate.
void levels_q2_k(const uint8_t* src, LevelsK& out) {
  levels_by_reader<BlockQ2_K>(src, out);
}

void decode_q2_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_reader<BlockQ2_K>(src, dst, n_blocks);
}

// ggml's reference Q2_K quantizer: per 16 values a (scale, min) pair from the asymmetric
// search with |x| weights and absolute error, both quantized to 4 bits against the largest,
// then the levels recomputed with the stored scales.
void encode_q2_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += kQK_K, dst += 84) {
    uint8_t L[kQK_K];
    float w[16], scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(src[16 * j + l]);
      scales[j] =
          search_asymmetric(16, 3, src + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    uint8_t* sc = dst;
    std::memset(dst, 0, 84);
    if (max_scale > 0) {
      const float iscale = 15.0f / max_scale;
      for (int j = 0; j < 16; ++j) sc[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      store_f16(dst + 80, max_scale / 15.0f);
    }
    if (max_min > 0) {
      const float iscale = 15.0f / max_min;
      for (int j = 0; j < 16; ++j)
        sc[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      store_f16(dst + 82, max_min / 15.0f);
    }
    const float d_all = load_f16(dst + 80), m_all = load_f16(dst + 82);
    for (int j = 0; j < 16; ++j) {
      const float d = d_all * static_cast<float>(sc[j] & 0x0F);
      if (d == 0) continue;
      const float dm = m_all * static_cast<float>(sc[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] =
            static_cast<uint8_t>(std::clamp(nearest_int((src[16 * j + l] + dm) / d), 0, 3));
      }
    }
    uint8_t* q = dst + 16;
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* Lh = L + 128 * h;
        q[32 * h + l] =
            static_cast<uint8_t>(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
      }
    }
  }
}

}  // namespace lynx::kernels::types
