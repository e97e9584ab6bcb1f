// Weight type traits: one row per ggml block type the engine computes with (ggml's
// `type_traits` idea). A row says how big a block is, how to decode it to F32 (the scalar
// decode, bit-exact to ggml's dequantize_row_*), how to encode it (the reference quantizer),
// which activation type ggml's dot product for it wants, and whether this engine has an
// integer kernel for it. Adding a type is its block struct and entry points in
// src/kernels/types/layout.h, one file in src/kernels/types/ and one row in the table below.
// The table is constexpr so that the kernels' templates read a type's geometry from it
// (type_row) instead of writing block sizes and field counts again.
//
// The block geometry repeats the GGUF layer's (gguf/types.cc), which must also know the types
// the engine does not compute with to validate files; tests/kernels/types_test.cc checks that
// the two agree.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "kernels/types/layout.h"
#include "lynx/gguf.h"

namespace lynx::kernels {

using gguf::TensorType;
class Scratch;  // scratch.h

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
  // The 32-element types with an integer kernel: a block as integer levels and scales
  // (types/layout.h Levels32), the reading the decode and the kernel's scalar twin share.
  void (*levels)(const uint8_t* blk, types::Levels32& out) = nullptr;
  // The 256-element types with an integer kernel: the same for their blocks (types/layout.h
  // LevelsK, from the reading in types/levels_k.h that the decode and the rows kernel's
  // unpacking instantiate too), for the scalar twin.
  void (*levels_k)(const uint8_t* blk, types::LevelsK& out) = nullptr;
};

namespace type_table {
using T = TensorType;
namespace ty = types;

// Block sizes are those of ggml's block structs (types/blocks.h); activation types are ggml's
// vec_dot_type of each type's CPU dot product.
// The interleaved layouts: {scalar fields, their bytes, at the block's end} (InterleaveSpec).
constexpr InterleaveSpec kScaleFirst{1, 2, false}, kTwoScalesFirst{2, 2, false},
    kScaleLast{1, 2, true}, kTwoScalesLast{2, 2, true}, kByteScaleFirst{1, 1, false};

//   type  elems bytes decode encode act int simd layout
inline constexpr TypeTraits kTypeTable[] = {
    {T::F32, 1, sizeof(float), ty::decode_f32, ty::encode_f32, T::F32, false, true},
    {T::F16, 1, sizeof(uint16_t), ty::decode_f16, ty::encode_f16, T::F16, false, true},
    {T::Q4_0, 32, sizeof(ty::BlockQ4_0), ty::decode_q4_0, ty::encode_q4_0, T::Q8_0, true, true,
     kScaleFirst, ty::levels_q4_0},
    {T::Q4_1, 32, sizeof(ty::BlockQ4_1), ty::decode_q4_1, ty::encode_q4_1, T::Q8_1, true, false,
     kTwoScalesFirst, ty::levels_q4_1},
    {T::Q5_0, 32, sizeof(ty::BlockQ5_0), ty::decode_q5_0, ty::encode_q5_0, T::Q8_0, true, false,
     kScaleFirst, ty::levels_q5_0},
    {T::Q5_1, 32, sizeof(ty::BlockQ5_1), ty::decode_q5_1, ty::encode_q5_1, T::Q8_1, true, false,
     kTwoScalesFirst, ty::levels_q5_1},
    {T::Q8_0, 32, sizeof(ty::BlockQ8_0), ty::decode_q8_0, ty::encode_q8_0, T::Q8_0, true, true,
     kScaleFirst, ty::levels_q8_0},
    {T::Q2_K, 256, sizeof(ty::BlockQ2_K), ty::decode_q2_k, ty::encode_q2_k, T::Q8_K, true, false,
     kTwoScalesLast, nullptr, ty::levels_q2_k},
    {T::Q3_K, 256, sizeof(ty::BlockQ3_K), ty::decode_q3_k, ty::encode_q3_k, T::Q8_K, true, false,
     kScaleLast, nullptr, ty::levels_q3_k},
    {T::Q4_K, 256, sizeof(ty::BlockQ4_K), ty::decode_q4_k, ty::encode_q4_k, T::Q8_K, true, false,
     kTwoScalesFirst, nullptr, ty::levels_q4_k},
    {T::Q5_K, 256, sizeof(ty::BlockQ5_K), ty::decode_q5_k, ty::encode_q5_k, T::Q8_K, true, false,
     kTwoScalesFirst, nullptr, ty::levels_q5_k},
    {T::Q6_K, 256, sizeof(ty::BlockQ6_K), ty::decode_q6_k, ty::encode_q6_k, T::Q8_K, true, false,
     kScaleLast, nullptr, ty::levels_q6_k},
    {T::Q8_K, 256, sizeof(ty::BlockQ8_K), ty::decode_q8_k, ty::encode_q8_k, T::Q8_K, false, false},
    {T::IQ4_NL, 32, sizeof(ty::BlockIq4_nl), ty::decode_iq4_nl, ty::encode_iq4_nl, T::Q8_0, true,
     false, kScaleFirst, ty::levels_iq4_nl},
    {T::IQ4_XS, 256, sizeof(ty::BlockIq4_xs), ty::decode_iq4_xs, ty::encode_iq4_xs, T::Q8_K, true,
     false, kTwoScalesFirst, nullptr, ty::levels_iq4_xs},
    {T::BF16, 1, sizeof(uint16_t), ty::decode_bf16, ty::encode_bf16, T::BF16, false, true},
    {T::MXFP4, 32, sizeof(ty::BlockMxfp4), ty::decode_mxfp4, ty::encode_mxfp4, T::Q8_0, true, false,
     kByteScaleFirst, ty::levels_mxfp4},
};

}  // namespace type_table
using type_table::kTypeTable;

// The row of type t, at compile time too (the kernels' templates read their block geometry from
// it); nullptr when the engine does not compute with t.
constexpr const TypeTraits* type_row(TensorType t) {
  for (const TypeTraits& tr : kTypeTable) {
    if (tr.type == t) return &tr;
  }
  return nullptr;
}

// Which integer kernel a row takes (its act_type decides): the 32-element kernel on Q8_0 (or
// Q8_1) activation blocks (matmul_q8.cc), or the 256-element one on Q8_K blocks (matmul_k*.cc).
constexpr bool takes_q8_kernel(const TypeTraits& tr) {
  return tr.int_kernel && (tr.act_type == TensorType::Q8_0 || tr.act_type == TensorType::Q8_1);
}
constexpr bool takes_k_kernel(const TypeTraits& tr) {
  return tr.int_kernel && tr.act_type == TensorType::Q8_K;
}
// The float path decodes in registers (matmul.cc).
constexpr bool takes_simd_decode(const TypeTraits& tr) {
  return tr.simd_decode;
}
// One value per element (F32, F16, BF16): the types that can be stored in 16-row panels.
constexpr bool takes_panels(const TypeTraits& tr) {
  return tr.block_elems == 1 && tr.simd_decode;
}

// The types of the table whose row satisfies Pred, in table order, as a constexpr array: the
// list a kernel instantiates its per-type templates for (dispatch_type).
template <bool (*Pred)(const TypeTraits&)>
consteval auto types_where() {
  constexpr size_t n = [] {
    size_t k = 0;
    for (const TypeTraits& tr : kTypeTable) k += Pred(tr) ? 1 : 0;
    return k;
  }();
  std::array<TensorType, n> out{};
  size_t i = 0;
  for (const TypeTraits& tr : kTypeTable) {
    if (Pred(tr)) out[i++] = tr.type;
  }
  return out;
}
inline constexpr auto kQ8KernelTypes = types_where<takes_q8_kernel>();
inline constexpr auto kKKernelTypes = types_where<takes_k_kernel>();
inline constexpr auto kSimdDecodeTypes = types_where<takes_simd_decode>();
inline constexpr auto kPanelTypes = types_where<takes_panels>();

// Calls f.template operator()<T>() for the entry T of kList that equals t (a kernel's type
// switch, written once: the list comes from the table); false when t is not in the list.
template <const auto& kList, class F>
bool dispatch_type(TensorType t, F&& f) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return ((t == kList[I] ? (f.template operator()<kList[I]>(), true) : false) || ...);
  }
  (std::make_index_sequence<kList.size()>());
}

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
// `scratch` as for matmul_rows.
void matmul_rows_decoded(TensorType t, const void* w, int64_t cols, int64_t r0, int64_t r1,
                         const float* x, int64_t ldx, int n_tok, float* y, int64_t ldy,
                         Scratch* scratch = nullptr);

}  // namespace lynx::kernels
