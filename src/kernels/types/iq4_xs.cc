// IQ4_XS: 256 elements = fp16 d, u16 scales_h, 4 bytes scales_l, 128 bytes of nibbles
// (136 bytes). 8 sub-blocks of 32, each laid out as an IQ4_NL block's nibbles, with a 6-bit
// scale ls: low nibble from scales_l[i / 2] (low nibble for even i), top 2 bits from scales_h
// bits 2i, 2i + 1; value = d * (ls - 32) * grid[nibble].
#include <algorithm>
#include <cstddef>

#include "kernels/types/blocks.h"
#include "kernels/types/iq4_search.h"

namespace lynx::kernels::types {

void levels_iq4_xs(const uint8_t* src, LevelsK& out) {
  without_mins(out);
  out.d = load_f16(src + offsetof(BlockIq4_xs, d));
  out.sub_len = 32;
  const uint16_t scales_h = load_u16(src + offsetof(BlockIq4_xs, scales_h));
  const uint8_t* scales_l = src + offsetof(BlockIq4_xs, scales_l);
  const uint8_t* qs = src + offsetof(BlockIq4_xs, qs);
  for (int ib = 0; ib < 8; ++ib, qs += 16) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
    out.scale[ib] = static_cast<int16_t>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      out.q[32 * ib + j] = kIq4nlValues[qs[j] & 0x0F];
      out.q[32 * ib + j + 16] = kIq4nlValues[qs[j] >> 4];
    }
  }
}

void decode_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels_k<levels_iq4_xs, sizeof(BlockIq4_xs), false, 32>(src, dst, n_blocks);
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
