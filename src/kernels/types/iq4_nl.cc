// IQ4_NL: 32 elements = fp16 d, 16 bytes of nibbles laid out as Q4_0's (18 bytes); a nibble
// indexes the non-linear grid kIq4nlValues: value = d * grid[nibble].
#include "kernels/types/blocks.h"
#include "kernels/types/iq4_search.h"

namespace lynx::kernels::types {

void levels_iq4_nl(const uint8_t* src, Levels32& out) {
  out.d = load_f16(src);
  out.m = 0.0f;
  for (int j = 0; j < 16; ++j) {
    out.q[j] = kIq4nlValues[src[2 + j] & 0x0F];
    out.q[j + 16] = kIq4nlValues[src[2 + j] >> 4];
  }
}

// ggml multiplies d x value; the product is the same either way round.
void decode_iq4_nl(const uint8_t* src, float* dst, int64_t n_blocks) {
  decode_by_levels<levels_iq4_nl, sizeof(BlockIq4_nl), false>(src, dst, n_blocks);
}

// ggml's IQ4_NL quantizer: the searched scale (iq4_search.h) stored as fp16, the indices
// recomputed with the scale before its rounding to fp16 (as ggml does).
void encode_iq4_nl(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 32, dst += 18) {
    uint8_t L[32];
    const float d = iq4_block_scale(src, L);
    store_f16(dst, d);
    iq4_indices(src, d, L);
    pack_nibbles32(L, dst + 2);
  }
}

}  // namespace lynx::kernels::types
