// llama / mistral / mixtral -> `llama`: q_proj and k_proj rows permuted from HF's rotate-half
//   layout to ggml's adjacent pairs (LlamaModel.permute), Mixtral's experts w1/w3/w2 stacked
//   into ffn_gate_exps / ffn_up_exps / ffn_down_exps.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr KeyRule kLlamaKeys[] = {
    {"vocab_size", "vocab_size"},
    {"num_local_experts", "expert_count"},
    {"num_experts_per_tok", "expert_used_count"},
};

constexpr TensorRule kLlamaAttn[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQ, "model.layers.{L}.self_attn.q_proj.weight", Transform::kPermuteQ},
    {T::kAttnK, "model.layers.{L}.self_attn.k_proj.weight", Transform::kPermuteK},
    {T::kAttnV, "model.layers.{L}.self_attn.v_proj.weight"},
    {T::kAttnOutput, "model.layers.{L}.self_attn.o_proj.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
};

constexpr TensorRule kMixtralExperts[] = {
    {T::kFfnGateInp, "model.layers.{L}.block_sparse_moe.gate.weight"},
    {T::kFfnGateExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight"},
    {T::kFfnUpExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w3.weight"},
    {T::kFfnDownExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w2.weight"},
};

constexpr Keys kLlamaK[] = {kBaseKeys, kHeadDimKeys, kLlamaKeys};

constexpr Rules kLlamaL[] = {kLlamaAttn, kDenseFfn, kMixtralExperts};

void llama_extra(const HfConfig& c, gguf::Writer& w) {
  no_rope_scaling(c);
  const int64_t rot = c.has("head_dim")
                          ? c.get_int("head_dim")
                          : c.get_int("hidden_size") / c.get_int("num_attention_heads");
  w.set(key("llama", "rope.dimension_count"), gguf::Value::u32(uint32_t(rot)));
}

}  // namespace

constexpr Family kLlama = {
    .model_type = "llama",
    .arch = "llama",
    .keys = kLlamaK,
    .global = kGlobal,
    .layer = kLlamaL,
    .tokenizer_pre = "llama-bpe",
    .extra_keys = llama_extra,
    .absent = kAbsentShared,
};

constexpr Family kMistral = {
    .model_type = "mistral",
    .arch = "llama",
    .keys = kLlamaK,
    .global = kGlobal,
    .layer = kLlamaL,
    .tokenizer_pre = "llama-bpe",
    .extra_keys = llama_extra,
    .absent = kAbsentShared,
};

constexpr Family kMixtral = {
    .model_type = "mixtral",
    .arch = "llama",
    .keys = kLlamaK,
    .global = kGlobal,
    .layer = kLlamaL,
    .tokenizer_pre = "llama-bpe",
    .extra_keys = llama_extra,
    .absent = kAbsentShared,
};

}  // namespace lynx::convert::table
