// bailing_moe_v2 (and bailing_moe with architectures BailingMoeV2ForCausalLM: Ling / Ring 2.0)
//   -> `bailingmoe2` (BailingMoeV2Model): attention.query_key_value kept fused as attn_qkv
//   (the loader splits it into row views), attention.dense -> attn_output,
//   query_layernorm / key_layernorm -> attn_q_norm / attn_k_norm, model.word_embeddings ->
//   token_embd, mlp.gate.expert_bias -> exp_probs_b.bias, mlp.shared_experts -> *_shexp, the
//   first first_k_dense_replace layers dense; rope.dimension_count = head_dim x
//   partial_rotary_factor (0.5 absent), expert_shared_feed_forward_length =
//   moe_shared_expert_intermediate_size or moe_intermediate_size x num_shared_experts,
//   n_group / topk_group, score_function sigmoid -> expert_gating_func 2; the
//   num_nextn_predict_layers MTP layers after the trunk converted and counted in block_count.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr KeyRule kBailing2Keys[] = {
    {"num_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"first_k_dense_replace", "leading_dense_block_count", K::kU32, true},
    {"num_shared_experts", "expert_shared_count", K::kU32, true},
    {"routed_scaling_factor", "expert_weights_scale", K::kF32, true},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
    {"n_group", "expert_group_count"},
    {"topk_group", "expert_group_used_count"},
    {"num_nextn_predict_layers", "nextn_predict_layers"},
    {"vocab_size", "vocab_size"},
};

// Ling / Ring 2.0 (BailingMoeV2): the fused projection kept fused, its own names.
constexpr TensorRule kBailing2Global[] = {
    {T::kTokenEmbd, "model.word_embeddings.weight"},
    {T::kOutputNorm, "model.norm.weight"},
    {T::kOutput, "lm_head.weight"},
};

constexpr TensorRule kBailing2Layer[] = {
    {T::kAttnNorm, "model.layers.{L}.input_layernorm.weight"},
    {T::kAttnQkv, "model.layers.{L}.attention.query_key_value.weight"},
    {T::kAttnOutput, "model.layers.{L}.attention.dense.weight"},
    {T::kAttnQNorm, "model.layers.{L}.attention.query_layernorm.weight"},
    {T::kAttnKNorm, "model.layers.{L}.attention.key_layernorm.weight"},
    {T::kFfnNorm, "model.layers.{L}.post_attention_layernorm.weight"},
    {T::kExpProbsB, "model.layers.{L}.mlp.gate.expert_bias"},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight"},
    // The MTP layer's norm after its FFN (llama.cpp's LAYER_OUT_NORM, required there).
    {T::kLayerOutputNorm, "model.layers.{L}.final_layernorm.weight"},
};

constexpr Keys kBailing2K[] = {kBaseKeys, kHeadDimKeys, kBailing2Keys};

constexpr Rules kBailing2L[] = {kBailing2Layer, kDenseFfn, kExperts, kNextn};

// Ling / Ring 2.0's config.json. model_type "bailing_moe" is also Ling 1.x's (BailingMoeModel,
// another architecture): only BailingMoeV2ForCausalLM is taken under that name. What llama.cpp's
// bailingmoe2 cannot express is refused rather than converted into a file that runs another
// model: rope scaling, q/k/v or output biases, no q/k norm, another activation or router.
void bailingmoe2_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "bailingmoe2";
  const auto& j = c.json();
  if (c.model_type() == "bailing_moe") {
    const bool v2 = j.contains("architectures") && j.at("architectures").is_array() &&
                    !j.at("architectures").empty() &&
                    j.at("architectures")[0] == "BailingMoeV2ForCausalLM";
    if (!v2) {
      c.fail(
          "architectures is not BailingMoeV2ForCausalLM: Ling 1.x (BailingMoeForCausalLM) is "
          "another architecture, not supported");
    }
  }
  no_rope_scaling(c);
  if (c.get_bool("use_qkv_bias", false) || c.get_bool("use_bias", false)) {
    c.fail(
        "use_qkv_bias / use_bias is true, but bailingmoe2 (llama.cpp's and lynx-moe's) has "
        "no biases");
  }
  if (!c.get_bool("use_qk_norm", true)) {
    c.fail("use_qk_norm is false, but bailingmoe2 (llama.cpp's and lynx-moe's) needs q/k norms");
  }
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  const std::string score = c.get_string("score_function", "sigmoid");
  if (score != "sigmoid") {
    c.fail("score_function '" + score + "' is not supported (sigmoid: HF's router has no other)");
  }
  w.set(key(a, "expert_gating_func"), gguf::Value::u32(2));
  const int64_t head = c.has("head_dim")
                           ? c.get_int("head_dim")
                           : c.get_int("hidden_size") / c.get_int("num_attention_heads");
  const double prf = c.get_float("partial_rotary_factor", 0.5);
  const int64_t rot = int64_t(double(head) * prf);
  if (!(prf > 0 && prf <= 1) || rot < 2 || rot % 2 != 0) {
    c.fail("partial_rotary_factor " + std::to_string(prf) + " x head dimension " +
           std::to_string(head) + " must give an even number of rotated dimensions");
  }
  w.set(key(a, "rope.dimension_count"), gguf::Value::u32(uint32_t(rot)));
  const int64_t shared = c.has("moe_shared_expert_intermediate_size")
                             ? c.get_int("moe_shared_expert_intermediate_size")
                             : c.get_int("moe_intermediate_size") * c.get_int("num_shared_experts");
  w.set(key(a, "expert_shared_feed_forward_length"), gguf::Value::u32(uint32_t(shared)));
  // block_count counts the MTP layers (BailingMoeV2Model's block_count).
  w.set(key(a, "block_count"),
        gguf::Value::u32(
            uint32_t(c.get_int("num_hidden_layers") + c.get_int("num_nextn_predict_layers", 0))));
}

}  // namespace

// Ling 2.0's config says "bailing_moe" with architectures BailingMoeV2ForCausalLM (Ling 1.x's
// BailingMoeForCausalLM under the same name is refused by bailingmoe2_extra).
constexpr const char* kBailing2OtherNames[] = {"bailing_moe"};

constexpr Family kBailingMoe2 = {
    .model_type = "bailing_moe_v2",
    .arch = "bailingmoe2",
    .keys = kBailing2K,
    .global = kBailing2Global,
    .layer = kBailing2L,
    .tokenizer_pre = "bailingmoe2",
    .extra_keys = bailingmoe2_extra,
    .nextn_key = "num_nextn_predict_layers",
    .other_model_types = kBailing2OtherNames,
};

}  // namespace lynx::convert::table
