// dots1 -> `dots1` (Dots1Model, a Qwen2MoeModel): experts mlp.experts.N.gate_proj / up_proj /
//   down_proj stacked, mlp.gate -> ffn_gate_inp, mlp.gate.e_score_correction_bias ->
//   exp_probs_b.bias, mlp.shared_experts -> *_shexp, per-head q_norm / k_norm, the first
//   first_k_dense_replace layers dense; n_routed_experts, moe_intermediate_size,
//   n_shared_experts, routed_scaling_factor, norm_topk_prob; scoring_func noaux_tc -> sigmoid.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr KeyRule kDots1Keys[] = {
    {"n_routed_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"first_k_dense_replace", "leading_dense_block_count", K::kU32, true},
    {"n_shared_experts", "expert_shared_count", K::kU32, true},
    {"routed_scaling_factor", "expert_weights_scale", K::kF32, true},
    {"norm_topk_prob", "expert_weights_norm", K::kBool},
};

constexpr Keys kDots1K[] = {kBaseKeys, kHeadDimKeys, kDots1Keys};

constexpr Rules kDots1L[] = {kGqaAttn, kQkNorm, kDenseFfn, kExperts, kGlmExperts};

// dots.llm1's config.json: scoring_func noaux_tc (llama.cpp's converter; "sigmoid" is the
// same router, HF's code has no other) -> expert_gating_func 2. What llama.cpp's dots1 cannot
// express is refused rather than converted into a file that runs another model: rope scaling,
// q/k/v biases, fewer key/value heads than heads (its loader sizes attn_k / attn_v by the head
// count), group-limited routing (it writes no group keys; the released configs have 1 of 1).
void dots1_extra(const HfConfig& c, gguf::Writer& w) {
  no_rope_scaling(c);
  const std::string scoring = c.get_string("scoring_func", "noaux_tc");
  if (scoring != "noaux_tc" && scoring != "sigmoid") {
    c.fail("scoring_func '" + scoring + "' is not supported (noaux_tc, sigmoid)");
  }
  w.set(key("dots1", "expert_gating_func"), gguf::Value::u32(2));
  if (c.get_bool("attention_bias", false)) {
    c.fail("attention_bias is true, but dots1 (llama.cpp's and lynx-moe's) has no q/k/v biases");
  }
  const int64_t heads = c.get_int("num_attention_heads");
  if (c.get_int("num_key_value_heads", heads) != heads) {
    c.fail(
        "num_key_value_heads differs from num_attention_heads, which llama.cpp's dots1 "
        "cannot load (attn_k / attn_v sized by the head count)");
  }
  const auto& j = c.json();
  auto int_or_one = [&](const char* k) {
    return j.contains(k) && !j.at(k).is_null() ? c.get_int(k) : int64_t(1);
  };
  const int64_t n_group = int_or_one("n_group"), topk_group = int_or_one("topk_group");
  if (n_group > 1 && topk_group < n_group) {
    c.fail("n_group " + std::to_string(n_group) + " / topk_group " + std::to_string(topk_group) +
           ": group-limited routing, which llama.cpp's dots1 does not run");
  }
}

}  // namespace

constexpr Family kDots1 = {
    .model_type = "dots1",
    .arch = "dots1",
    .keys = kDots1K,
    .global = kGlobal,
    .layer = kDots1L,
    .tokenizer_pre = "qwen2",
    .extra_keys = dots1_extra,
};

}  // namespace lynx::convert::table
