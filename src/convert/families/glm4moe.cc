// glm4_moe -> `glm4moe` (Glm4MoeModel): rope.dimension_count = head_dim x
//   partial_rotary_factor, sigmoid gating (expert_gating_func 2), e_score_correction_bias ->
//   exp_probs_b.bias, shared_experts -> *_shexp, the first first_k_dense_replace layers dense,
//   and the num_nextn_predict_layers next-token-prediction layers after the trunk converted as
//   blk.N with nextn.* tensors (eh_proj, enorm, hnorm, shared_head.norm / .head,
//   embed_tokens), block_count counting them.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr KeyRule kGlmKeys[] = {
    {"n_routed_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"n_shared_experts", "expert_shared_count", K::kU32, true},
    {"first_k_dense_replace", "leading_dense_block_count"},
    {"routed_scaling_factor", "expert_weights_scale", K::kF32},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
    {"num_nextn_predict_layers", "nextn_predict_layers"},
    {"n_group", "expert_group_count"},
    {"topk_group", "expert_group_used_count"},
};

constexpr Keys kGlmK[] = {kBaseKeys, kHeadDimKeys, kGlmKeys};

constexpr Rules kGlmL[] = {kGqaAttnPostNorm, kQkvBias,    kQkNorm, kDenseFfn,
                           kExperts,         kGlmExperts, kNextn};

void glm4moe_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "glm4moe";
  no_rope_scaling(c);
  if (!c.get_bool("attention_bias", true)) {
    c.fail("attention_bias is false, but glm4moe (llama.cpp's and lynx-moe's) needs q/k/v biases");
  }
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
  w.set(key(a, "expert_gating_func"), gguf::Value::u32(2));  // sigmoid
  // block_count counts the next-token-prediction layers (Glm4MoeModel's block_count).
  w.set(key(a, "block_count"),
        gguf::Value::u32(
            uint32_t(c.get_int("num_hidden_layers") + c.get_int("num_nextn_predict_layers", 0))));
}

}  // namespace

constexpr Family kGlm4Moe = {
    .model_type = "glm4_moe",
    .arch = "glm4moe",
    .keys = kGlmK,
    .global = kGlobal,
    .layer = kGlmL,
    .tokenizer_pre = "glm4",
    .extra_keys = glm4moe_extra,
    .nextn_key = "num_nextn_predict_layers",
    .qk_norm_key = "use_qk_norm",
};

}  // namespace lynx::convert::table
