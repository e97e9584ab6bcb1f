// Weight type traits: one row per ggml block type the engine computes with (ggml's
// `type_traits` idea). A row says how big a block is, how to decode it to F32 (the scalar
// decode, bit-exact to ggml's dequantize_row_*), how to encode it (the reference quantizer),
// which activation type ggml's dot product for it wants, and whether this engine has an
// integer kernel for it. Adding a type is one file in src/kernels/types/ and one row in
// src/kernels/types.cc.
//
// The block geometry repeats the GGUF layer's (gguf/types.cc), which must also know the types
// the engine does not compute with to validate files; tests/kernels/types_test.cc checks that
// the two agree.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "lynx/gguf.h"

namespace lynx::kernels {

using gguf::TensorType;

// Decodes `n_blocks` consecutive blocks at src into n_blocks * block_elems floats at dst.
using DecodeBlocksFn = void (*)(const uint8_t* src, float* dst, int64_t n_blocks);
// Encodes n_blocks * block_elems floats at src into n_blocks blocks at dst.
using EncodeBlocksFn = void (*)(const float* src, uint8_t* dst, int64_t n_blocks);

// How a block goes into the 16-row interleaved layout (kernels.h, kInterleaved16): its
// `fields` scalar fields of `field_bytes` each (the fp16 scales), at the start of the block or
// at its end, each stored as 16 values (row 0 first); the rest of the block, a multiple of 4
// bytes, as planes of 64 bytes (lane i: 4 bytes of row i). fields == 0: no interleaved layout.
struct InterleaveSpec {
  uint8_t fields = 0;
  uint8_t field_bytes = 2;
  bool at_end = false;
};

struct TypeTraits {
  TensorType type;
  int64_t block_elems;
  int64_t block_bytes;
  DecodeBlocksFn decode;
  EncodeBlocksFn encode;  // nullptr: no quantizer for this type (yet)
  // ggml's vec_dot_type: the type activations are converted to for the dot product
  // (Q8_0 for the 32-element legacy types, Q8_K for the K-quants and IQ4_XS, the type
  // itself for F32/F16/BF16).
  TensorType act_type;
  // True when the forward pass takes this type's integer kernel (matmul_q8.cc for Q8_0
  // activations, matmul_k.h for Q8_K) unless it runs exact activations. Every other type is
  // computed on the exact path: weight rows decoded to F32 (matmul_rows).
  bool int_kernel;
  // True when matmul.cc decodes the type in registers (a SIMD decoder); the others go through
  // `decode` into an F32 row buffer first.
  bool simd_decode;
  // The type's kInterleaved16 layout (for the integer kernels that read it).
  InterleaveSpec interleave = {};
};

// The row of type t; nullptr when the engine does not compute with t.
const TypeTraits* find_type_traits(TensorType t);
// The row of type t; throws lynx::Error naming the type when there is none.
const TypeTraits& type_traits(TensorType t);
// All rows, in ggml type-id order.
std::span<const TypeTraits> all_type_traits();

// matmul_rows (kernels.h) for a type without a SIMD decoder (simd_decode false), weights in
// kRows: rows are decoded with the table's `decode` a few at a time into an F32 buffer, which
// the F32 row kernel multiplies. Every output is then the F32 kernel's product of its decoded
// row, so it depends only on its row and token, as matmul_rows promises; and it is the exact
// product of ggml's dequantized weights with the F32 activations.
void matmul_rows_decoded(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                         const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy);

}  // namespace lynx::kernels
