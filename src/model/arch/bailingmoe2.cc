// bailingmoe2 (inclusionAI Ling 2.0 / Ring 2.0: Ling-mini-2.0 16B-A1.4B, Ling-flash-2.0 100B,
// Ling-1T; HF BailingMoeV2ForCausalLM), by llama.cpp's names and keys (llama-arch.cpp
// LLM_ARCH_BAILINGMOE2, models/bailingmoe2.cpp, convert_hf_to_gguf.py BailingMoeV2Model;
// ik_llama.cpp's graphs/build_bailingmoe2.cpp) and Hugging Face's modeling_bailing_moe_v2.py:
// - attention through one fused projection attn_qkv (HF query_key_value): its rows are the
//   n_head query heads, then the n_head_kv key heads, then the value heads. It is split at load
//   into three row views of the tensor (no copy, model.cc split_qkv), so the GQA path, the KV
//   cache and the kernels run unchanged; a fused matmul would save two of three small
//   projection launches per layer, which the MoE FFN dwarfs at these shapes;
// - per-head q/k RMSNorm (head_dim weights) after the split, then NEOX rope (HF's
//   rotate_half) on the first rope.dimension_count dims of each head only (partial_rotary_factor
//   0.5: 64 of 128), the rest passing through; kq scale 1/sqrt(head_dim); no biases;
// - the first leading_dense_block_count layers have a dense SwiGLU FFN (feed_forward_length);
//   the others routed experts (expert_feed_forward_length) plus the shared experts, one FFN of
//   (expert_shared_feed_forward_length, or expert_feed_forward_length when absent) x
//   expert_shared_count, as llama.cpp sizes it, added unscaled and ungated;
// - the router: sigmoid(z) + exp_probs_b (HF expert_bias) chooses, within the best
//   expert_group_used_count of expert_group_count groups (a group's score: the sum of its two
//   best biased scores; HF group_limited_topk, llama.cpp build_moe_ffn, model.cc reads the
//   keys), the top k; sigmoid(z) alone weighs them, renormalized when expert_weights_norm says
//   so (HF always renormalizes; the released configs have norm_topk_prob true), times
//   expert_weights_scale (routed_scaling_factor: 2.5 for Ling-mini-2.0); exp_probs_b is
//   optional in llama.cpp; expert_gating_func is required as llama.cpp reads it: 2 sigmoid,
//   1 softmax run as written, others refused;
// - nextn_predict_layers multi-token-prediction blocks after the trunk, counted in block_count
//   (the released checkpoints carry one): only speculative decoding would use them; they are
//   skipped whole, as llama.cpp and ik_llama.cpp skip them.
// llama.cpp asserts value heads the size of key heads; a file that breaks it is refused.
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorSpec kProbsBias[] = {
    {tensor::kExpProbsB, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::exp_probs_b,
     Init::kBias},
};

constexpr TensorGroup kAttn[] = {{kFusedQkvTensors}, {kQkNormPerHead}};
constexpr TensorGroup kDense[] = {{kDenseFfn}};
// The selection bias is there when the first MoE layer has it; then every MoE layer must.
constexpr TensorGroup kMoe[] = {
    {kMoeFfn},
    {.tensors = kProbsBias, .need = Dim::kSelectBias},
    {kSharedExpert},
};
// The NextN block's own tensors (no LayerWeights member: never bound), as llama.cpp lists
// them; synth writes the required ones and the small optional norm, not the optional
// vocabulary-sized embed_tokens / shared_head_head.
constexpr TensorSpec kNextnTensors[] = {
    {tensor::kNextnEhProj, Dim::kEmbd2, Dim::kEmbd},
    {tensor::kNextnEnorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, nullptr, Init::kNorm},
    {tensor::kNextnHnorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, nullptr, Init::kNorm},
    {.name = tensor::kNextnSharedHeadNorm,
     .cols = Dim::kEmbd,
     .init = Init::kNorm,
     .required = false},  // TENSOR_NOT_REQUIRED in llama.cpp
    {tensor::kLayerOutputNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, nullptr, Init::kNorm},
};
constexpr TensorGroup kNextn[] = {{kNextnTensors}, kNextnOptional[0], kNextnOptional[1]};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

void read(const gguf::File& f, ModelConfig& c) {
  // block_count counts the NextN blocks; the trunk is the layers before them.
  c.n_layer_nextn = int_in(f, key(c, "nextn_predict_layers"), 0, 0, c.n_layer - 1);
  c.n_layer -= c.n_layer_nextn;
  const int v_len = int_in(f, key(c, "attention.value_length"), c.head_dim, 1, kMaxDim);
  if (v_len != c.head_dim) {
    throw Error("inconsistent head dimensions: " + key(c, "attention.value_length") + " = " +
                std::to_string(v_len) + " differs from the key head dimension " +
                std::to_string(c.head_dim));
  }
  c.n_rot = int_in(f, key(c, "rope.dimension_count"), c.head_dim, 1, kMaxDim);
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    throw Error("inconsistent head dimensions: " + key(c, "rope.dimension_count") + " = " +
                std::to_string(c.n_rot) + " must be even and at most the head dimension " +
                std::to_string(c.head_dim));
  }
  c.n_layer_dense_lead = int_in(f, key(c, "leading_dense_block_count"), 0, 0, c.n_layer - 1);
  // Required, as llama.cpp reads them.
  f.get_int(key(c, "expert_feed_forward_length"));
  f.get_int(key(c, "expert_shared_count"));
  c.n_expert_shared = int_in(f, key(c, "expert_shared_count"), 0, 1, 64);
  // llama.cpp: (expert_shared_feed_forward_length or the expert width) x the shared count.
  c.n_ff_shexp = (c.n_ff_shexp > 0 ? c.n_ff_shexp : c.n_ff_exp) * c.n_expert_shared;
  f.get_int(key(c, "expert_gating_func"));
  const int func = int_in(f, key(c, "expert_gating_func"), 2, 1, 2);
  c.gating.func = func == 1 ? GatingFunc::kSoftmax : GatingFunc::kSigmoid;
  const std::string first_moe = "blk." + std::to_string(c.n_layer_dense_lead) + ".";
  c.gating.select_bias = f.find_tensor(first_moe + tensor::kExpProbsB) != nullptr;
}

void write(const ModelConfig& c, gguf::Writer& w) {
  auto u32 = [&](const char* k, int v) { w.set(key(c, k), gguf::Value::u32(uint32_t(v))); };
  if (c.n_layer_nextn > 0) {
    u32("block_count", c.n_layer + c.n_layer_nextn);
    u32("nextn_predict_layers", c.n_layer_nextn);
  }
  u32("rope.dimension_count", c.rope_dim());
  u32("leading_dense_block_count", c.n_layer_dense_lead);
  u32("expert_shared_count", c.n_expert_shared);
  u32("expert_shared_feed_forward_length", c.n_ff_shexp / c.n_expert_shared);
  // ik_llama.cpp requires the group keys; 1 of 1 is no limit.
  u32("expert_group_count", c.gating.n_group);
  u32("expert_group_used_count", c.gating.n_group_used);
  w.set(key(c, "expert_weights_scale"), gguf::Value::f32(c.gating.weights_scale));
  w.set(key(c, "expert_weights_norm"), gguf::Value::boolean(c.gating.norm_topk));
  u32("expert_gating_func", c.gating.func == GatingFunc::kSigmoid ? 2 : 1);
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  if (il >= c.n_layer_dense_lead) k.ffn = FfnKind::kMoeShared;
  return k;
}

}  // namespace

constexpr ArchDesc kBailingMoe2 = {
    .name = "bailingmoe2",
    .rope = RopeType::kNeox,
    .qk_norm = QKNorm::kPerHead,
    .norm_topk = false,  // llama.cpp's default; the converter writes norm_topk_prob (true)
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoe},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
    .nextn = kNextn,
};

}  // namespace lynx::arch
