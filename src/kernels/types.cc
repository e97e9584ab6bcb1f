// The weight type table (types.h): one row per type the engine computes with.
#include "kernels/types.h"

#include "kernels/types/blocks.h"
#include "lynx/error.h"

namespace lynx::kernels {
namespace {

using T = TensorType;
namespace ty = types;

// Block sizes are those of ggml's block structs (ggml-common.h); activation types are ggml's
// vec_dot_type of each type's CPU dot product.
// The interleaved layouts: {scalar fields, their bytes, at the block's end} (types.h).
constexpr InterleaveSpec kScaleFirst{1, 2, false}, kTwoScalesFirst{2, 2, false},
    kScaleLast{1, 2, true}, kTwoScalesLast{2, 2, true}, kByteScaleFirst{1, 1, false};

//   type      elems bytes decode            encode            act     int    simd  layout
constexpr TypeTraits kTraits[] = {
    {T::F32, 1, 4, ty::decode_f32, ty::encode_f32, T::F32, false, true},
    {T::F16, 1, 2, ty::decode_f16, ty::encode_f16, T::F16, false, true},
    {T::Q4_0, 32, 18, ty::decode_q4_0, ty::encode_q4_0, T::Q8_0, true, true, kScaleFirst},
    {T::Q4_1, 32, 20, ty::decode_q4_1, ty::encode_q4_1, T::Q8_1, true, false, kTwoScalesFirst},
    {T::Q5_0, 32, 22, ty::decode_q5_0, ty::encode_q5_0, T::Q8_0, true, false, kScaleFirst},
    {T::Q5_1, 32, 24, ty::decode_q5_1, ty::encode_q5_1, T::Q8_1, true, false, kTwoScalesFirst},
    {T::Q8_0, 32, 34, ty::decode_q8_0, ty::encode_q8_0, T::Q8_0, true, true, kScaleFirst},
    {T::Q2_K, 256, 84, ty::decode_q2_k, ty::encode_q2_k, T::Q8_K, true, false, kTwoScalesLast},
    {T::Q3_K, 256, 110, ty::decode_q3_k, ty::encode_q3_k, T::Q8_K, true, false, kScaleLast},
    {T::Q4_K, 256, 144, ty::decode_q4_k, ty::encode_q4_k, T::Q8_K, true, false, kTwoScalesFirst},
    {T::Q5_K, 256, 176, ty::decode_q5_k, ty::encode_q5_k, T::Q8_K, true, false, kTwoScalesFirst},
    {T::Q6_K, 256, 210, ty::decode_q6_k, ty::encode_q6_k, T::Q8_K, true, false, kScaleLast},
    {T::Q8_K, 256, 292, ty::decode_q8_k, ty::encode_q8_k, T::Q8_K, false, false},
    {T::IQ4_NL, 32, 18, ty::decode_iq4_nl, ty::encode_iq4_nl, T::Q8_0, true, false, kScaleFirst},
    {T::IQ4_XS, 256, 136, ty::decode_iq4_xs, ty::encode_iq4_xs, T::Q8_K, true, false,
     kTwoScalesFirst},
    {T::BF16, 1, 2, ty::decode_bf16, ty::encode_bf16, T::BF16, false, true},
    {T::MXFP4, 32, 17, ty::decode_mxfp4, ty::encode_mxfp4, T::Q8_0, true, false, kByteScaleFirst},
};

}  // namespace

const TypeTraits* find_type_traits(TensorType t) {
  for (const auto& tr : kTraits) {
    if (tr.type == t) return &tr;
  }
  return nullptr;
}

const TypeTraits& type_traits(TensorType t) {
  const TypeTraits* tr = find_type_traits(t);
  if (!tr) {
    throw Error(std::string("kernels: unsupported weight type ") + gguf::tensor_type_name(t) +
                " (the engine computes with " + compute_type_names() + ")");
  }
  return *tr;
}

std::span<const TypeTraits> all_type_traits() {
  return kTraits;
}

std::string compute_type_names() {
  std::string out;
  for (const auto& tr : kTraits) {
    if (!out.empty()) out += ", ";
    out += gguf::tensor_type_name(tr.type);
  }
  return out;
}

}  // namespace lynx::kernels
