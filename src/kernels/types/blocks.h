// Shared by the per-type files of src/kernels/types/: byte access helpers and value grids (the
// block structs and the decode / encode entry points each file defines are in layout.h).
//
// Every decoder follows ggml's dequantize_row_<type> (ggml/src/ggml-quants.c) operation for
// operation in f32 (same products in the same order, no fused multiply-add: the library is
// built without -ffp-contract=fast and without FMA in its baseline), so the floats it writes
// are ggml's bit for bit. tests/reference/gguf_np.py decodes the same bytes independently.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/types/layout.h"

namespace lynx::kernels::types {

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f16(const uint8_t* p) {
  return fp16_to_fp32(load_u16(p));
}
inline void store_u16(uint8_t* p, uint16_t v) {
  std::memcpy(p, &v, 2);
}
inline void store_f32(uint8_t* p, float v) {
  std::memcpy(p, &v, 4);
}
inline void store_f16(uint8_t* p, float v) {
  store_u16(p, fp32_to_fp16(v));
}

// decode_<type> of a type read through its levels: q x d (+ m where the type has a min; no
// "+ 0" for the others, which would turn a -0 product into +0).
template <void (*kLevels)(const uint8_t*, Levels32&), int64_t kBlockBytes, bool kMin>
void decode_by_levels(const uint8_t* src, float* dst, int64_t n_blocks) {
  Levels32 l;
  for (int64_t b = 0; b < n_blocks; ++b, src += kBlockBytes, dst += 32) {
    kLevels(src, l);
    for (int j = 0; j < 32; ++j) {
      dst[j] = kMin ? static_cast<float>(l.q[j]) * l.d + l.m : static_cast<float>(l.q[j]) * l.d;
    }
  }
}

// MXFP4's E8M0 block scale, halved as ggml keeps it (its grid kMxfp4Values holds the E2M1 values
// doubled): 2^(e - 128), e = 0 and 1 the subnormals 2^-128 and 2^-127.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// MXFP4's 16 E2M1 values, doubled to integers (ggml's kvalues_mxfp4).
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// The 16 values of the 4-bit non-linear grid of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

}  // namespace lynx::kernels::types
