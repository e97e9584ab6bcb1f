// Internals shared by the GGUF reader and writer: fixed sizes of the on-disk encoding.
// Layout (ggml/docs/gguf.md, v2 and v3 identical for little-endian files):
//   u32 magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
//   padding to `alignment`, then the data section (tensor offsets are relative to it).
// A string is u64 length + bytes (no terminator); an array is u32 elem_type, u64 count,
// then count values without their type tags.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>

#include "lynx/gguf.h"

namespace lynx::gguf::detail {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader/writer assume a little-endian host");

// Bytes of a scalar value on disk; 0 for STRING/ARRAY (variable) and unknown types.
inline size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

inline bool is_known_value_type(uint32_t t) {
  return t <= uint32_t(ValueType::FLOAT64);
}

// Smallest encoding of one value of type t: the reader uses it to reject counts that
// cannot fit in the bytes left before it allocates anything.
inline size_t min_value_size(ValueType t) {
  if (t == ValueType::STRING) return 8;     // u64 length, empty string
  if (t == ValueType::ARRAY) return 4 + 8;  // elem type + count, empty array
  return scalar_size(t);
}

inline uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace lynx::gguf::detail
