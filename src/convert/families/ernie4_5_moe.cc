// ernie4_5_moe -> `ernie4_5-moe` (Ernie4_5MoeModel): experts mlp.experts.N.gate_proj / up_proj
//   / down_proj stacked, mlp.gate -> ffn_gate_inp, mlp.moe_statics.e_score_correction_bias ->
//   exp_probs_b.bias, mlp.shared_experts.* -> *_shexp, q/k unpermuted (normal rope on HF's
//   interleaved pairs), moe_layer_start_index / moe_layer_interval -> leading_dense_block_count /
//   interleave_moe_layer_step, the SentencePiece tokenizer.model when there is one.
#include "convert/families/common.h"
#include "lynx/error.h"

namespace lynx::convert::table {
namespace {

constexpr KeyRule kErnieKeys[] = {
    {"moe_num_experts", "expert_count", K::kU32, true},
    {"moe_k", "expert_used_count", K::kU32, true},
    {"moe_intermediate_size", "expert_feed_forward_length", K::kU32, true},
    {"moe_layer_start_index", "leading_dense_block_count", K::kU32, true},
    {"moe_layer_interval", "interleave_moe_layer_step", K::kU32, true},
    {"moe_num_shared_experts", "expert_shared_count"},
};

constexpr TensorRule kErnieExperts[] = {
    {T::kExpProbsB, "model.layers.{L}.mlp.moe_statics.e_score_correction_bias"},
    {T::kFfnGateShexp, "model.layers.{L}.mlp.shared_experts.gate_proj.weight"},
    {T::kFfnUpShexp, "model.layers.{L}.mlp.shared_experts.up_proj.weight"},
    {T::kFfnDownShexp, "model.layers.{L}.mlp.shared_experts.down_proj.weight"},
};

constexpr Absent kErnieAbsent[] = {
    {T::kAttnQBias, "use_bias is refused (ernie4_5_moe_extra): the released checkpoints have none"},
    {T::kAttnKBias, "use_bias is refused (ernie4_5_moe_extra): the released checkpoints have none"},
    {T::kAttnVBias, "use_bias is refused (ernie4_5_moe_extra): the released checkpoints have none"},
};

constexpr Keys kErnieK[] = {kBaseKeys, kHeadDimKeys, kErnieKeys};

constexpr Rules kErnieL[] = {kGqaAttn, kDenseFfn, kExperts, kErnieExperts};

// ERNIE-4.5's config.json: the shared experts' width (HF: one MLP of moe_intermediate_size x
// moe_num_shared_experts; llama.cpp's converter writes intermediate_size / num_key_value_heads,
// the same number for the 21B-A3B), and switches with one answer in llama.cpp's graph, refused
// otherwise: no biases (use_bias), SiLU, MoE layers up to the last (moe_layer_end_index), no
// rope scaling.
void ernie4_5_moe_extra(const HfConfig& c, gguf::Writer& w) {
  const char* a = "ernie4_5-moe";
  no_rope_scaling(c);
  if (c.get_bool("use_bias", false)) {
    c.fail("use_bias is true, but ernie4_5-moe (llama.cpp's graph) has no output or MLP biases");
  }
  if (c.get_string("hidden_act", "silu") != "silu") {
    c.fail("hidden_act '" + c.get_string("hidden_act", "") + "' is not supported (silu)");
  }
  const int64_t n_layer = c.get_int("num_hidden_layers");
  const int64_t end = c.get_int("moe_layer_end_index", -1);
  if (end != -1 && end != n_layer - 1) {
    c.fail("moe_layer_end_index " + std::to_string(end) +
           " is not the last layer, which llama.cpp's graph assumes");
  }
  if (c.get_int("moe_layer_interval") < 1) c.fail("moe_layer_interval must be at least 1");
  const int64_t shared = c.get_int("moe_num_shared_experts", 0);
  if (shared > 0) {
    w.set(key(a, "expert_shared_feed_forward_length"),
          gguf::Value::u32(uint32_t(shared * c.get_int("moe_intermediate_size"))));
  }
}

}  // namespace

constexpr Family kErnie45Moe = {
    .model_type = "ernie4_5_moe",
    .arch = "ernie4_5-moe",
    .keys = kErnieK,
    .global = kGlobal,
    .layer = kErnieL,
    .tokenizer_pre = "default",
    .extra_keys = ernie4_5_moe_extra,
    .absent = kErnieAbsent,
};

}  // namespace lynx::convert::table
