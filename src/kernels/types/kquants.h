// Helpers shared by the K-quant type files (super-blocks of 256 elements, ggml's QK_K).
#pragma once
#include <cstdint>

namespace lynx::kernels::types {

inline constexpr int kQK_K = 256;

// Q4_K / Q5_K pack 8 (scale, min) pairs of 6 bits in 12 bytes: pairs 0-3 in the low 6 bits of
// bytes 0-3 (scales) and 4-7 (mins); pairs 4-7 in the nibbles of bytes 8-11 (low: scale,
// high: min) with their top 2 bits in the top 2 bits of bytes 0-3 (scales) and 4-7 (mins).
inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K packs 16 6-bit scales (stored + 32) in 12 bytes: the low 4 bits of scale i in the low
// (i < 8) or high (i >= 8) nibble of byte i % 8, its top 2 bits in bit pair i / 4 of byte
// 8 + i % 4.
inline void unpack_q3_scales(const uint8_t* s, int* out) {
  for (int i = 0; i < 16; ++i) {
    const int lo = i < 8 ? (s[i] & 0x0F) : (s[i - 8] >> 4);
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    out[i] = (lo | (hi << 4)) - 32;
  }
}

}  // namespace lynx::kernels::types
