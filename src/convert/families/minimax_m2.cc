// minimax_m2 -> `minimax-m2` (MiniMaxM2Model): experts block_sparse_moe.experts.N.w1 / w3 /
//   w2 stacked as Mixtral's, block_sparse_moe.gate -> ffn_gate_inp,
//   block_sparse_moe.e_score_correction_bias -> exp_probs_b.bias, q_norm / k_norm (whole-row
//   weights) -> attn_q_norm / attn_k_norm, intermediate_size is the expert width,
//   rope.dimension_count = rotary_dim, scoring_func -> expert_gating_func.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr KeyRule kMinimaxKeys[] = {
    {"num_local_experts", "expert_count", K::kU32, true},
    {"num_experts_per_tok", "expert_used_count", K::kU32, true},
    {"intermediate_size", "expert_feed_forward_length", K::kU32, true},
};

constexpr TensorRule kMinimaxExperts[] = {
    {T::kFfnGateInp, "model.layers.{L}.block_sparse_moe.gate.weight"},
    {T::kExpProbsB, "model.layers.{L}.block_sparse_moe.e_score_correction_bias"},
    {T::kFfnGateExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight"},
    {T::kFfnUpExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w3.weight"},
    {T::kFfnDownExps, "model.layers.{L}.block_sparse_moe.experts.{E}.w2.weight"},
};

constexpr Keys kMinimaxK[] = {kBaseKeys, kHeadDimKeys, kMinimaxKeys};

constexpr Rules kMinimaxL[] = {kGqaAttn, kQkNorm, kMinimaxExperts};

// MiniMax-M2's config.json: rotary_dim (64 of head_dim 128; transformers 5 writes
// partial_rotary_factor inside rope_parameters instead), scoring_func, and switches the
// architecture has one answer to (refused otherwise rather than converted into a file that
// runs another model): q/k norms over the whole row of all heads (use_qk_norm,
// qk_norm_type "per_layer"), the selection bias (use_routing_bias), no shared expert, every
// layer full attention (attn_type_list: MiniMax-Text-01's 0 is linear attention).
void minimax_m2_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "minimax-m2";
  no_rope_scaling(c);
  const int64_t head = c.has("head_dim")
                           ? c.get_int("head_dim")
                           : c.get_int("hidden_size") / c.get_int("num_attention_heads");
  const double prf = c.get_float("partial_rotary_factor", 1.0);
  const int64_t from_factor = int64_t(double(head) * prf);
  const int64_t rot = c.get_int("rotary_dim", from_factor);
  if (c.has("rotary_dim") && c.has("partial_rotary_factor") && rot != from_factor) {
    c.fail("rotary_dim " + std::to_string(rot) + " disagrees with partial_rotary_factor " +
           std::to_string(prf) + " x head_dim " + std::to_string(head));
  }
  if (rot < 2 || rot > head || rot % 2 != 0) {
    c.fail("rotary_dim " + std::to_string(rot) + " must be even and at most head_dim " +
           std::to_string(head));
  }
  w.set(key(a, "rope.dimension_count"), gguf::Value::u32(uint32_t(rot)));
  const std::string scoring = c.get_string("scoring_func", "sigmoid");
  if (scoring != "softmax" && scoring != "sigmoid") {
    c.fail("scoring_func '" + scoring + "' is not supported (softmax, sigmoid)");
  }
  w.set(key(a, "expert_gating_func"), gguf::Value::u32(scoring == "sigmoid" ? 2 : 1));
  if (!c.get_bool("use_qk_norm", true)) {
    c.fail("use_qk_norm is false, but minimax-m2 (llama.cpp's and lynx-moe's) needs q/k norms");
  }
  if (c.get_string("qk_norm_type", "per_layer") != "per_layer") {
    c.fail("qk_norm_type '" + c.get_string("qk_norm_type", "") +
           "' is not supported (per_layer: one norm over all heads)");
  }
  if (!c.get_bool("use_routing_bias", true)) {
    c.fail("use_routing_bias is false, but minimax-m2 needs e_score_correction_bias");
  }
  if (c.get_int("shared_intermediate_size", 0) != 0) {
    c.fail("shared_intermediate_size is set, but minimax-m2 has no shared expert");
  }
  if (c.has("attn_type_list")) {
    const auto& types = c.json().at("attn_type_list");
    if (!types.is_array()) c.fail("attn_type_list must be a list");
    for (const auto& t : types) {
      if (!t.is_number_integer() || t.get<int64_t>() != 1) {
        c.fail("attn_type_list has a layer that is not full attention (1)");
      }
    }
  }
}

}  // namespace

constexpr Family kMinimaxM2 = {
    .model_type = "minimax_m2",
    .arch = "minimax-m2",
    .keys = kMinimaxK,
    .global = kGlobal,
    .layer = kMinimaxL,
    .tokenizer_pre = "minimax-m2",
    .extra_keys = minimax_m2_extra,
};

}  // namespace lynx::convert::table
