// F32, F16, BF16: one element per "block".
#include "kernels/types/blocks.h"

namespace lynx::kernels::types {

void decode_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}
void encode_f32(const float* src, uint8_t* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

void decode_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
}
void encode_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_f16(dst + 2 * i, src[i]);
}

void decode_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(src + 2 * i));
}
void encode_bf16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, fp32_to_bf16(src[i]));
}

}  // namespace lynx::kernels::types
