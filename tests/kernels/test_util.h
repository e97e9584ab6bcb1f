// Shared helpers for the kernel tests: deterministic random data, misaligned buffers, and a
// loop that runs a test body once per SIMD instruction set of the machine.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../simd_target.h"
#include "kernels/kernels.h"

namespace lynx::kernels::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A byte buffer whose data() starts `offset` bytes past a 64-byte boundary, to exercise
// misaligned loads.
class Buffer {
 public:
  Buffer(size_t bytes, size_t offset) : storage_(bytes + offset + 128), offset_(offset) {
    const auto base = reinterpret_cast<uintptr_t>(storage_.data());
    start_ = static_cast<size_t>((64 - base % 64) % 64) + offset_;
  }
  uint8_t* data() { return storage_.data() + start_; }
  float* f32() { return reinterpret_cast<float*>(data()); }

 private:
  std::vector<uint8_t> storage_;
  size_t offset_;
  size_t start_ = 0;
};

// Type name for messages: lynx_kernels links lynx_gguf, which has the canonical names.
inline const char* type_name(TensorType t) {
  return gguf::tensor_type_name(t);
}

// Runs `body` once per available SIMD target (best to worst), then restores dispatch.
template <class F>
void for_each_target(F&& body) {
  for (int64_t t : available_simd_targets()) {
    test::force_simd_target(t);
    SCOPED_TRACE(simd_target_name(t));
    EXPECT_STREQ(simd_target_name(), simd_target_name(t));
    body();
  }
  test::force_simd_target(0);
}

// Worst-case bound of a float sum of n products in any order with chains of at most n
// terms (unit roundoff 2^-24), plus the rounding of the result itself.
inline double dot_tolerance(int64_t n, double abs_sum, double result) {
  return (static_cast<double>(n) + 16.0) * 6.0e-8 * abs_sum + 6.0e-8 * std::abs(result) + 1e-30;
}

// The weight types with the integer path, and their block sizes in bytes written out here
// (an independent reference for the layout tests, not weight_row_bytes).
inline constexpr TensorType kIntTypes[] = {TensorType::Q8_0, TensorType::Q4_0};
inline int64_t int_block_bytes(TensorType t) {
  return t == TensorType::Q8_0 ? 34 : 18;
}

// rows x cols Q8_0 / Q4_0 weights at the ends of their ranges (Q8_0 -128 / 127, Q4_0
// nibbles 0 / 15, alternating), with a few different block scales.
inline std::vector<uint8_t> extreme_int_weights(TensorType t, int64_t rows, int64_t cols) {
  const size_t rb = weight_row_bytes(t, cols);
  const int64_t bb = int_block_bytes(t);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint8_t* blk = w.data() + static_cast<size_t>(r) * rb + b * bb;
      const uint16_t h = fp32_to_fp16(0.25f + 0.125f * static_cast<float>(r % 3));
      std::memcpy(blk, &h, 2);
      for (int64_t k = 2; k < bb; ++k) {
        const bool hi = (r + b + k) % 2 == 0;
        blk[k] = t == TensorType::Q8_0 ? (hi ? 0x7F : 0x80) : (r % 2 ? (hi ? 0xFF : 0x00) : 0xF0);
      }
    }
  }
  return w;
}

}  // namespace lynx::kernels::testing
