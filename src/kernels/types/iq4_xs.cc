// IQ4_XS: 256 elements = fp16 d, u16 scales_h, 4 bytes scales_l, 128 bytes of nibbles
// (136 bytes). 8 sub-blocks of 32, each laid out as an IQ4_NL block's nibbles, with a 6-bit
// scale ls: low nibble from scales_l[i / 2] (low nibble for even i), top 2 bits from scales_h
// bits 2i, 2i + 1; value = d * (ls - 32) * grid[nibble].
#include <algorithm>
#include <cstddef>

#include "kernels/types/blocks.h"
#include "kernels/types/iq4_search.h"
#include "kernels/types/levels_k.h"

namespace lynx::kernels::types {

// The block's layout is read in levels_k.h (Reader<BlockIq4_xs>), which these instantiate.
void levels_iq4_xs(const uint8_t* src, LevelsK& out) {
  levels_by_reader<BlockIq4_xs>(src, out);
}

void decode_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_reader<BlockIq4_xs>(src, dst, n_blocks);
}

// ggml's IQ4_XS quantizer: a searched scale per 32 values (iq4_search.h), the 8 scales
// quantized to 6 bits (ls - 32) against the one of largest magnitude, then the indices
// recomputed with each stored sub-block scale.
void encode_iq4_xs(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 256, dst += 136) {
    uint8_t L[32];
    float scales[8];
    float max_scale = 0, amax = 0;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = iq4_block_scale(src + 32 * ib, L);
      if (std::fabs(scales[ib]) > amax) {
        amax = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    std::memset(dst, 0, 136);
    const float d = -max_scale / 32;
    store_f16(dst, d);
    const float id = d != 0 ? 1 / d : 0.0f;
    uint16_t scales_h = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      iq4_indices(src + 32 * ib, d * static_cast<float>(l), L);
      pack_nibbles32(L, dst + 8 + 16 * ib);
      const int ls = l + 32;
      dst[4 + ib / 2] |= static_cast<uint8_t>((ls & 0x0F) << (4 * (ib % 2)));
      scales_h = static_cast<uint16_t>(scales_h | ((ls >> 4) << (2 * ib)));
    }
    std::memcpy(dst + 2, &scales_h, 2);
  }
}

}  // namespace lynx::kernels::types
