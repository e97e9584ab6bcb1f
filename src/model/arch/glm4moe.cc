// glm4moe (GLM-4.5, GLM-4.5-Air), by llama.cpp's names and keys (llama-arch.cpp,
// models/glm4-moe.cpp, convert_hf_to_gguf.py Glm4MoeModel):
// - GQA attention with q/k/v biases, per-head q/k RMSNorm when the file has attn_q_norm /
//   attn_k_norm (GLM-4.5 has them, GLM-4.5-Air not), NEOX rope on the first
//   rope.dimension_count dims of each head only (partial_rotary_factor 0.5: 64 of 128), the
//   rest passing through; kq scale 1/sqrt(head_dim);
// - the FFN's norm is named post_attention_norm (it normalizes the residual after attention,
//   like the other families' ffn_norm);
// - the first leading_dense_block_count layers dense, the others routed experts plus
//   expert_shared_count shared experts (one FFN of width expert_shared_count * n_ff_exp);
// - sigmoid gating (expert_gating_func absent or 0 means sigmoid for this family) with the
//   required selection bias exp_probs_b, expert_weights_norm, expert_weights_scale;
// - nextn_predict_layers next-token-prediction blocks after the trunk, counted in block_count:
//   a full layer plus nextn.eh_proj / enorm / hnorm (and optional embed_tokens,
//   shared_head_head, shared_head_norm). Only speculative decoding would use them; they are
//   skipped, as llama.cpp does.
#include <string>

#include "model/arch/families.h"

namespace lynx::arch {
namespace {

constexpr TensorGroup kAttn[] = {
    {kGqaTensors},
    {kQkvBias},
    {.tensors = kQkNormPerHead, .need = Dim::kQkNorm},
};
constexpr TensorSpec kPostAttnNorm = {
    tensor::kPostAttentionNorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr,
    &LayerWeights::ffn_norm,    Init::kNorm};
constexpr TensorSpec kDenseFfnGlm[] = {
    kPostAttnNorm,
    {tensor::kFfnGate, Dim::kEmbd, Dim::kFf, Dim::kOne, &LayerWeights::ffn_gate},
    {tensor::kFfnUp, Dim::kEmbd, Dim::kFf, Dim::kOne, &LayerWeights::ffn_up},
    {tensor::kFfnDown, Dim::kFf, Dim::kEmbd, Dim::kOne, &LayerWeights::ffn_down},
};
constexpr TensorSpec kMoeFfnGlm[] = {
    kPostAttnNorm,
    {tensor::kFfnGateInp, Dim::kEmbd, Dim::kExpert, Dim::kOne, &LayerWeights::router, nullptr,
     Init::kRouter},
    {tensor::kExpProbsB, Dim::kExpert, Dim::kOne, Dim::kOne, nullptr, &LayerWeights::exp_probs_b,
     Init::kBias},
    {tensor::kFfnGateExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::gate_exps},
    {tensor::kFfnUpExps, Dim::kEmbd, Dim::kFfExp, Dim::kExpert, &LayerWeights::up_exps},
    {tensor::kFfnDownExps, Dim::kFfExp, Dim::kEmbd, Dim::kExpert, &LayerWeights::down_exps},
};
constexpr TensorGroup kDense[] = {{kDenseFfnGlm}};
constexpr TensorGroup kMoe[] = {
    {kMoeFfnGlm},
    {.tensors = kSharedExpert, .need = Dim::kFfShexp},
};
// The NextN block's own tensors (no LayerWeights member: never bound). synth writes the
// required ones and the small optional norm, not the optional vocabulary-sized embed_tokens /
// shared_head_head (each as large as token_embd; llama.cpp loads a file without them).
constexpr TensorSpec kNextnTensors[] = {
    {tensor::kNextnEhProj, Dim::kEmbd2, Dim::kEmbd},
    {tensor::kNextnEnorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, nullptr, Init::kNorm},
    {tensor::kNextnHnorm, Dim::kEmbd, Dim::kOne, Dim::kOne, nullptr, nullptr, Init::kNorm},
    {.name = tensor::kNextnSharedHeadNorm,
     .cols = Dim::kEmbd,
     .init = Init::kNorm,
     .required = false},  // TENSOR_NOT_REQUIRED in llama.cpp
};
constexpr TensorGroup kNextn[] = {{kNextnTensors}, kNextnOptional[0], kNextnOptional[1]};

std::string key(const ModelConfig& c, const char* k) {
  return c.arch + "." + k;
}

void read(const gguf::File& f, ModelConfig& c) {
  // block_count counts the NextN blocks; the trunk is the layers before them.
  const int nextn = int_in(f, key(c, "nextn_predict_layers"), 0, 0, c.n_layer - 1);
  c.n_layer_nextn = nextn;
  c.n_layer -= nextn;
  // llama.cpp asserts key and value heads of one size (n_embd_head_k == n_embd_head_v).
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
  // q/k norms are optional per file (GLM-4.5 has them, 4.5-Air not); when blk.0 has them
  // every layer must (TensorGroup need = kQkNorm).
  c.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") ? QKNorm::kPerHead : QKNorm::kNone;
  c.n_layer_dense_lead = int_in(f, key(c, "leading_dense_block_count"), 0, 0, c.n_layer);
  f.get_int(key(c, "expert_shared_count"));  // required, as llama.cpp reads it
  c.n_expert_shared = int_in(f, key(c, "expert_shared_count"), 0, 0, 64);
  if (c.n_ff_shexp == 0) c.n_ff_shexp = c.n_expert_shared * c.n_ff_exp;
  // llama.cpp: 0 (none) or absent means sigmoid here; 1 softmax, 3 softmax over the selected.
  const int func = int_in(f, key(c, "expert_gating_func"), 0, 0, 3);
  c.gating.func = func == 1   ? GatingFunc::kSoftmax
                  : func == 3 ? GatingFunc::kSoftmaxWeight
                              : GatingFunc::kSigmoid;
  c.gating.select_bias = true;  // exp_probs_b is required in every MoE layer
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
  w.set(key(c, "expert_weights_scale"), gguf::Value::f32(c.gating.weights_scale));
  w.set(key(c, "expert_weights_norm"), gguf::Value::boolean(c.gating.norm_topk));
  u32("expert_gating_func", c.gating.func == GatingFunc::kSigmoid ? 2 : 1);
}

LayerKind layer(const ModelConfig& c, int il) {
  LayerKind k;
  if (il >= c.n_layer_dense_lead) k.ffn = c.n_ff_shexp > 0 ? FfnKind::kMoeShared : FfnKind::kMoe;
  return k;
}

}  // namespace

constexpr ArchDesc kGlm4Moe = {
    .name = "glm4moe",
    .rope = RopeType::kNeox,
    .qkv_bias = true,
    .norm_topk = false,  // llama.cpp's default; the released files write true
    .moe = true,
    .blocks = {.attn_gqa = kAttn, .ffn_dense = kDense, .ffn_moe = kMoe},
    .read_metadata = read,
    .write_metadata = write,
    .layer_kind = layer,
    .nextn = kNextn,
};

}  // namespace lynx::arch
